//! `gpuwatch run -- CMD`: output passed through byte for byte (pipes and pseudo-terminals),
//! signals forwarded (and terminal ones not doubled), the job's exit code returned.
//!
//! Every test drives the real binary. Synchronisation is by the job's output ("ready"), never
//! by sleeping; a job that waits for a signal gives up after 30 s so a failure can't hang.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdout, Command, Stdio};

use rustix::process::{Pid, Signal, kill_process};

/// `gpuwatch` with its config and state isolated in a temporary directory.
struct Gw {
    dir: tempfile::TempDir,
}

impl Gw {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    /// `gpuwatch run --quiet -- ARGS…` (without its report on stderr, so what comes out is
    /// exactly what the job wrote; `tests/run_job.rs` checks the report).
    fn run(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(common::gpuwatch_bin());
        self.isolate(&mut cmd);
        cmd.arg("run")
            .arg("--quiet")
            .arg("--")
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    fn isolate(&self, cmd: &mut Command) {
        cmd.env("XDG_CONFIG_HOME", self.dir.path())
            .env("XDG_STATE_HOME", self.dir.path())
            .env("NO_COLOR", "1")
            .env_remove("GPUWATCH_LOG");
    }
}

/// A job for the signal tests: prints `ready`, then waits (at most 30 s) for signals; `INT`
/// prints `int-N` and carries on, `TERM` prints `term-after-N` and exits 143, `HUP` prints
/// `hup` and exits 129. The `sleep` it waits on is restarted if a terminal's Ctrl-C killed it
/// (a background job ignores SIGINT only once its forked shell has set that up, which under
/// load can be after the Ctrl-C).
const SIGNAL_JOB: &str = r"
n=0
end=$(( $(date +%s) + 30 ))
sleep 30 & s=$!
trap 'n=$((n+1)); echo int-$n' INT
trap 'echo term-after-$n; kill $s 2>/dev/null; exit 143' TERM
trap 'echo hup; kill $s 2>/dev/null; exit 129' HUP
echo ready
while :; do
  wait $s
  if ! kill -0 $s 2>/dev/null; then
    [ $(date +%s) -ge $end ] && break
    sleep 30 & s=$!
  fi
done
echo gave-up
exit 99
";

fn read_line(out: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    out.read_line(&mut line).expect("read gpuwatch's stdout");
    line
}

fn signal(child: &Child, sig: Signal) {
    kill_process(Pid::from_child(child), sig).expect("signal gpuwatch");
}

/// `len` pseudo-random bytes (xorshift) that surely include NUL, CR, LF, ESC and invalid UTF-8.
fn blob(len: usize, mut seed: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        v.extend_from_slice(&seed.to_le_bytes());
    }
    v.truncate(len);
    v[..8].copy_from_slice(b"\0\r\n\x1b\xff\xfe\xc3\x28");
    v
}

#[test]
fn binary_output_passes_through_byte_for_byte() {
    let gw = Gw::new();
    let a = blob(1 << 20, 0x9e37_79b9_7f4a_7c15);
    let b = blob((1 << 20) + 17, 0x2545_f491_4f6c_dd1d);
    let pa = gw.dir.path().join("a.bin");
    let pb = gw.dir.path().join("b.bin");
    std::fs::write(&pa, &a).unwrap();
    std::fs::write(&pb, &b).unwrap();
    let out = gw
        .run(&[
            "sh",
            "-c",
            r#"cat "$1"; cat "$2" >&2; cat "$1""#,
            "sh",
            pa.to_str().unwrap(),
            pb.to_str().unwrap(),
        ])
        .output()
        .expect("gpuwatch runs");
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout == [a.clone(), a].concat(), "stdout differs");
    assert!(out.stderr == b, "stderr differs");
}

#[test]
fn arguments_reach_the_job_untouched() {
    let gw = Gw::new();
    let out = gw
        .run(&[
            "sh",
            "-c",
            r#"printf '%s|' "$@""#,
            "sh",
            "--lr",
            "3e-4",
            "--help",
            "",
            "two words",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "--lr|3e-4|--help||two words|"
    );
    // Without `--` too: everything after the command's name is the command's.
    let mut cmd = Command::new(common::gpuwatch_bin());
    gw.isolate(&mut cmd);
    let out = cmd
        .args([
            "run",
            "sh",
            "-c",
            r#"printf '%s|' "$@""#,
            "sh",
            "--version",
            "-x",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "--version|-x|");
    assert_eq!(out.status.code(), Some(0));
}

/// Runs `cmd` with stdout and stderr on a fresh terminal; returns what the terminal got and
/// the exit code.
fn on_terminal(mut cmd: Command) -> (Vec<u8>, Option<i32>) {
    let (master, slave) = common::open_pty(33, 77);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave));
    let mut child = cmd.spawn().expect("starts");
    // Our copies of the slave must be closed, or the master never reports the end.
    drop(cmd);
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match rustix::io::read(&master, &mut buf) {
                Ok(0) | Err(rustix::io::Errno::IO) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => panic!("read pty: {e}"),
            }
        }
        got
    });
    let status = child.wait().unwrap();
    (reader.join().unwrap(), status.code())
}

#[test]
fn a_terminal_stays_a_terminal_and_bytes_are_as_a_direct_run() {
    let gw = Gw::new();
    let job = r"test -t 1 && test -t 2 && printf 'tty\r\n\033[31mred\033[0m\n' && printf 'err\tx\n' >&2 && stty size <&1";
    let (through, code) = on_terminal(gw.run(&["sh", "-c", job]));
    assert_eq!(code, Some(0), "{}", String::from_utf8_lossy(&through));
    let mut direct = Command::new("sh");
    direct.args(["-c", job]);
    let (direct, code) = on_terminal(direct);
    assert_eq!(code, Some(0));
    // Only the outer terminal's own ONLCR (\n → \r\n); stdout and stderr share one terminal
    // so their order is kept; the window size is ours.
    let expected = b"tty\r\r\n\x1b[31mred\x1b[0m\r\nerr\tx\r\n33 77\r\n";
    assert_eq!(
        String::from_utf8_lossy(&direct),
        String::from_utf8_lossy(expected)
    );
    assert_eq!(
        String::from_utf8_lossy(&through),
        String::from_utf8_lossy(&direct)
    );
}

#[test]
fn only_the_terminal_stream_gets_a_terminal() {
    let gw = Gw::new();
    // The master stays open: a terminal whose master is closed is hung up.
    let (_master, slave) = common::open_pty(24, 80);
    let out = gw
        .run(&[
            "sh",
            "-c",
            "if test -t 1; then echo out-tty; else echo out-pipe; fi; if test -t 2; then echo err-tty; else echo err-pipe; fi",
        ])
        .stderr(Stdio::from(slave))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out-pipe\nerr-tty\n");
}

#[test]
fn stdout_and_stderr_into_one_pipe_keep_their_order() {
    let gw = Gw::new();
    let (read, write) = std::io::pipe().unwrap();
    let mut cmd = gw.run(&[
        "sh",
        "-c",
        "for i in 1 2 3 4 5; do echo out-$i; echo err-$i >&2; done",
    ]);
    cmd.stdout(write.try_clone().unwrap()).stderr(write);
    let mut child = cmd.spawn().unwrap();
    drop(cmd);
    let mut got = String::new();
    BufReader::new(read).read_to_string(&mut got).unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert_eq!(
        got,
        "out-1\nerr-1\nout-2\nerr-2\nout-3\nerr-3\nout-4\nerr-4\nout-5\nerr-5\n"
    );
}

fn start_signal_job(gw: &Gw) -> (Child, BufReader<ChildStdout>) {
    let mut child = gw
        .run(&["sh", "-c", SIGNAL_JOB])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    assert_eq!(read_line(&mut out), "ready\n");
    (child, out)
}

fn rest(mut out: BufReader<ChildStdout>) -> String {
    let mut s = String::new();
    out.read_to_string(&mut s).unwrap();
    s
}

#[test]
fn sigterm_is_forwarded_and_the_job_code_returned() {
    let gw = Gw::new();
    let (mut child, out) = start_signal_job(&gw);
    signal(&child, Signal::TERM);
    assert_eq!(rest(out), "term-after-0\n");
    // gpuwatch itself did not die of the signal: it exits with the job's code.
    assert_eq!(child.wait().unwrap().code(), Some(143));
}

#[test]
fn sigint_sent_with_kill_is_forwarded() {
    let gw = Gw::new();
    let (mut child, mut out) = start_signal_job(&gw);
    signal(&child, Signal::INT);
    assert_eq!(read_line(&mut out), "int-1\n");
    signal(&child, Signal::HUP);
    // SIGHUP is forwarded too.
    assert_eq!(rest(out), "hup\n");
    assert_eq!(child.wait().unwrap().code(), Some(128 + 1));
}

/// Ctrl-C on the terminal reaches the job through the process group; gpuwatch survives it and
/// does not send a second one. Needs `setsid -c` (util-linux) to give gpuwatch a controlling
/// terminal.
#[test]
fn ctrl_c_from_the_terminal_reaches_the_job_once() {
    if Command::new("setsid").arg("--version").output().is_err() {
        eprintln!("skipped: no setsid");
        return;
    }
    let gw = Gw::new();
    let (master, slave) = common::open_pty(24, 80);
    let mut cmd = Command::new("setsid");
    gw.isolate(&mut cmd);
    cmd.arg("-c")
        .arg(common::gpuwatch_bin())
        .args(["run", "--quiet", "--", "sh", "-c", SIGNAL_JOB])
        .stdin(Stdio::from(slave))
        .stdout(Stdio::piped());
    // setsid is not a group leader here, so it execs gpuwatch itself: the child is gpuwatch.
    let mut child = cmd.spawn().unwrap();
    drop(cmd);
    let mut out = BufReader::new(child.stdout.take().unwrap());
    assert_eq!(read_line(&mut out), "ready\n");
    rustix::io::write(&master, b"\x03").unwrap();
    assert_eq!(read_line(&mut out), "int-1\n");
    // Had gpuwatch forwarded the terminal's SIGINT, it would have arrived long before this.
    signal(&child, Signal::TERM);
    assert_eq!(rest(out), "term-after-1\n");
    assert_eq!(child.wait().unwrap().code(), Some(143));
}

#[test]
fn exit_codes_like_a_shell() {
    let gw = Gw::new();
    let code = |args: &[&str]| gw.run(args).output().unwrap();
    assert_eq!(code(&["sh", "-c", "exit 7"]).status.code(), Some(7));
    assert_eq!(code(&["true"]).status.code(), Some(0));
    // Killed by a signal: 128 + signal, and gpuwatch itself exits normally.
    let out = code(&["sh", "-c", "echo before; kill -9 $$"]);
    assert_eq!(out.status.code(), Some(137));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "before\n");

    let out = code(&["gpuwatch-test-no-such-command", "--flag"]);
    assert_eq!(out.status.code(), Some(127));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "gpuwatch: cannot run 'gpuwatch-test-no-such-command': No such file or directory (os error 2)\n"
    );

    let script = gw.dir.path().join("not-executable.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    let out = code(&[script.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(126));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not-executable.sh': Permission denied"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_closed_stdout_does_not_block_the_job() {
    let gw = Gw::new();
    let mut child = gw
        .run(&[
            "sh",
            "-c",
            "head -c 10000000 /dev/zero; echo done >&2; exit 3",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stderr), "done\n");
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn memory_stays_bounded_with_50_mib_and_no_newline() {
    let gw = Gw::new();
    // The job reports gpuwatch's (its parent's) peak resident size at the end.
    let out = gw
        .run(&[
            "sh",
            "-c",
            r"head -c 52428800 /dev/zero | tr '\0' x; grep VmHWM /proc/$PPID/status >&2",
        ])
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    let kib: u64 = err
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in {err:?}"));
    assert!(kib < 40 * 1024, "gpuwatch peaked at {kib} KiB");
}

#[test]
fn the_job_inherits_stdin() {
    let gw = Gw::new();
    let mut child = gw
        .run(&["sh", "-c", "read line; echo got-$line"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "got-hello\n");
}

/// Slurm's `--signal=USR1@90` (PyTorch Lightning's auto-requeue), SIGUSR2 and SIGALRM go to
/// the job; gpuwatch neither dies of them (which would orphan the job) nor keeps them, and
/// exits with the code the job's handler chose.
#[test]
fn usr1_usr2_and_alrm_reach_the_job() {
    let gw = Gw::new();
    for (sig, name) in [
        (Signal::USR1, "USR1"),
        (Signal::USR2, "USR2"),
        (Signal::ALARM, "ALRM"),
    ] {
        let job = format!(
            "sleep 30 & s=$!; trap 'echo got {name}; kill $s; exit 7' {name}; echo ready; \
             wait $s; echo not-signalled; exit 99"
        );
        let mut child = gw
            .run(&["sh", "-c", &job])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        assert_eq!(read_line(&mut out), "ready\n");
        signal(&child, sig);
        assert_eq!(rest(out), format!("got {name}\n"), "SIG{name}");
        assert_eq!(
            child.wait().unwrap().code(),
            Some(7),
            "SIG{name}: the job's code"
        );
    }
}

/// The state letter of `/proc/PID/stat` (`None` once the PID is gone).
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// `kill -9` of gpuwatch: nothing is left to forward a signal, and the job must not live on
/// unwatched (holding its GPU memory): its parent-death signal ends it.
#[test]
fn the_job_does_not_outlive_a_killed_gpuwatch() {
    let gw = Gw::new();
    let mut child = gw
        .run(&["sh", "-c", "echo $$; exec sleep 300"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let job: u32 = read_line(&mut out).trim().parse().expect("the job's PID");
    assert!(proc_state(job).is_some(), "the job runs");
    signal(&child, Signal::KILL);
    child.wait().unwrap();
    let started = std::time::Instant::now();
    // Gone, or a zombie waiting for whoever adopted it to reap it.
    while proc_state(job).is_some_and(|s| s != 'Z') {
        if started.elapsed() > std::time::Duration::from_secs(5) {
            let _ = kill_process(
                Pid::from_raw(i32::try_from(job).unwrap()).unwrap(),
                Signal::KILL,
            );
            panic!("the job (PID {job}) outlived gpuwatch by 5 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    eprintln!(
        "the job was gone {:.0} ms after gpuwatch was killed",
        started.elapsed().as_secs_f64() * 1000.0
    );
}
