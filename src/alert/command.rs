//! The command sink: runs a shell command per event with the finding in `GPUWATCH_*`
//! environment variables.
//!
//! The command runs through `sh -c` in its own process group, with stdin and stdout on
//! `/dev/null` (it must not draw over the dashboard) and stderr captured for the error
//! message. It gets [`CommandSink::DEFAULT_TIMEOUT`] (or what [`CommandSink::with_timeout`]
//! sets); past that its whole process group is killed. A non-zero exit is a failure.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use super::sink::{Sink, event_json};
use crate::detect::FindingEvent;

/// How much of the command's stderr an error message keeps (its end).
const STDERR_KEEP: usize = 400;

/// Runs `sh -c <command>` per event. Variables (always set; empty when unknown):
///
/// | variable | value |
/// |---|---|
/// | `GPUWATCH_EVENT` | `opened`, `updated` or `resolved` |
/// | `GPUWATCH_RULE` | `filling-up`, `leak-suspected`, … |
/// | `GPUWATCH_SEVERITY` | `info`, `warning` or `critical` |
/// | `GPUWATCH_GPU` | the GPU's UUID |
/// | `GPUWATCH_GPU_INDEX` | its NVML index |
/// | `GPUWATCH_PID` | the process of a per-process finding |
/// | `GPUWATCH_SUMMARY` | the one-line summary, control characters shown escaped |
/// | `GPUWATCH_TIME_TO_FULL_S` | predicted seconds until full, rounded |
/// | `GPUWATCH_JSON` | the whole event, as the JSON-lines sink writes it |
pub struct CommandSink {
    command: String,
    timeout: Duration,
}

impl CommandSink {
    /// How long a command may run before it is killed.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            timeout: Self::DEFAULT_TIMEOUT,
        }
    }

    /// Sets how long the command may run before its process group is killed.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    fn spawn(&self, event: &FindingEvent) -> Result<Child, String> {
        let f = event.finding();
        let opt = |v: Option<String>| v.unwrap_or_default();
        Command::new("sh")
            .arg("-c")
            .arg(&self.command)
            .env("GPUWATCH_EVENT", event.kind())
            .env("GPUWATCH_RULE", f.id.rule.name())
            .env("GPUWATCH_SEVERITY", f.severity.to_string())
            .env("GPUWATCH_GPU", crate::text::clean(&f.id.gpu).as_ref())
            .env(
                "GPUWATCH_GPU_INDEX",
                opt(f.gpu_index.map(|i| i.to_string())),
            )
            .env("GPUWATCH_PID", opt(f.id.pid.map(|p| p.to_string())))
            // Scripts echo it: one line, no control characters (GPUWATCH_JSON keeps it raw).
            .env("GPUWATCH_SUMMARY", crate::text::clean(&f.summary).as_ref())
            .env(
                "GPUWATCH_TIME_TO_FULL_S",
                opt(f
                    .time_to_full_s
                    .filter(|t| t.is_finite())
                    .map(|t| format!("{:.0}", t.max(0.0)))),
            )
            .env("GPUWATCH_JSON", event_json(event).to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("command: cannot run sh: {e}"))
    }

    /// Waits for `child` up to the timeout; kills its process group past it.
    fn wait(&self, child: &mut Child) -> Result<ExitStatus, String> {
        let deadline = Instant::now() + self.timeout;
        let mut pause = Duration::from_millis(1);
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Ok(status),
                Ok(None) => {}
                Err(e) => return Err(format!("command: cannot wait for it: {e}")),
            }
            let now = Instant::now();
            if now >= deadline {
                kill_group(child);
                return Err(format!(
                    "command timed out after {}",
                    humantime::format_duration(self.timeout)
                ));
            }
            thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }
}

fn kill_group(child: &mut Child) {
    let pid = rustix::process::Pid::from_child(child);
    // The group may be gone already (the shell exited, its children linger or not).
    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    let _ = child.kill();
    let _ = child.wait();
}

/// Reads the command's stderr on a thread of its own (a full pipe would stall the command)
/// and hands back its tail. A grandchild that keeps the pipe open must not hang the sink,
/// hence the channel with a timeout instead of a join.
fn collect_stderr(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    if let Some(mut stderr) = child.stderr.take() {
        let _ = thread::Builder::new()
            .name("alert-command-stderr".into())
            .spawn(move || {
                let mut buf = Vec::new();
                let _ = stderr.read_to_end(&mut buf);
                let text = String::from_utf8_lossy(&buf);
                let text = text.trim();
                let start = text
                    .char_indices()
                    .rev()
                    .nth(STDERR_KEEP - 1)
                    .map_or(0, |(i, _)| i);
                let _ = tx.send(text[start..].replace('\n', " | "));
            });
    }
    rx
}

impl Sink for CommandSink {
    fn name(&self) -> &'static str {
        "command"
    }

    fn deliver(&mut self, event: &FindingEvent) -> Result<(), String> {
        let mut child = self.spawn(event)?;
        let stderr = collect_stderr(&mut child);
        let status = self.wait(&mut child)?;
        if status.success() {
            return Ok(());
        }
        let what = match status.code() {
            Some(code) => format!("command exited with status {code}"),
            None => format!("command ended by {status}"),
        };
        match stderr.recv_timeout(Duration::from_millis(100)) {
            Ok(text) if !text.is_empty() => Err(format!("{what}: {text}")),
            _ => Err(what),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::test_support::{event, finding};
    use crate::detect::{RuleKind, Severity};

    fn ev() -> FindingEvent {
        let mut f = finding(
            RuleKind::LeakSuspected,
            "GPU-x",
            Some(2),
            Severity::Warning,
            5.0,
        );
        f.id.pid = Some(4242);
        f.time_to_full_s = Some(1234.4);
        event("opened", f)
    }

    #[test]
    fn non_zero_exit_is_an_error_with_stderr() {
        let mut sink = CommandSink::new("echo \"bad $GPUWATCH_TIME_TO_FULL_S\" >&2; exit 3");
        let err = sink.deliver(&ev()).unwrap_err();
        assert_eq!(err, "command exited with status 3: bad 1234");
    }

    #[test]
    fn variables_are_set() {
        let mut sink = CommandSink::new(
            "test \"$GPUWATCH_EVENT $GPUWATCH_RULE $GPUWATCH_SEVERITY $GPUWATCH_GPU \
             $GPUWATCH_GPU_INDEX $GPUWATCH_PID\" = 'opened leak-suspected warning GPU-x 2 4242' \
             && case \"$GPUWATCH_JSON\" in *'\"event\":\"opened\"'*) ;; *) exit 9 ;; esac",
        );
        sink.deliver(&ev()).unwrap();
    }

    #[test]
    fn timeout_kills_the_command() {
        let mut sink =
            CommandSink::new("sleep 5; sleep 5").with_timeout(Duration::from_millis(200));
        let started = Instant::now();
        let err = sink.deliver(&ev()).unwrap_err();
        assert!(err.contains("timed out"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(3));
    }
}
