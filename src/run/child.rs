//! Runs the job for `gpuwatch run`: output passed through untouched, signals forwarded, exit
//! status reported like a shell would.
//!
//! # Output
//!
//! stdin is inherited. For stdout and for stderr separately: when *our* descriptor is a
//! terminal the job gets a fresh pseudo-terminal for that stream (so `isatty` is true and
//! colours and progress bars work), its slave in raw mode (no `ONLCR`: bytes arrive exactly as
//! written and our own terminal does the translation, as for a direct run) with our window
//! size, updated on `SIGWINCH`; otherwise a pipe. When our stdout and stderr are the same file
//! (one terminal, or `2>&1` into one pipe or file) the job gets one channel for both, so the
//! order of its stdout and stderr writes is kept exactly; with two channels it could not be.
//! A relay thread per channel copies the bytes to our descriptor exactly and feeds the bounded
//! [`Tail`]. When our stdout is closed (EPIPE)
//! the relay keeps draining, so the job never blocks on a full pipe, and keeps the tail.
//!
//! The pseudo-terminals are not the job's controlling terminal and the job stays in our
//! process group: Ctrl-C and Ctrl-Z on the user's terminal reach it directly and job control
//! keeps working.
//!
//! # Signals
//!
//! While the job runs gpuwatch catches SIGTERM, SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2,
//! SIGALRM and SIGWINCH (it never dies of them; it waits and exits with the job's status):
//!
//! - SIGTERM, SIGHUP, SIGUSR1, SIGUSR2 and SIGALRM are always forwarded to the job. (Slurm's
//!   `--signal=USR1@90`, which PyTorch Lightning's auto-requeue waits for, must reach the job,
//!   not end the wrapper and orphan the job; gpuwatch sets no timers of its own, so a SIGALRM
//!   is always someone's message for the job.)
//! - SIGINT and SIGQUIT are forwarded only when a process sent them (`kill(2)`, `tkill`,
//!   `sigqueue`: `si_code` `SI_USER`/`SI_TKILL`/`SI_QUEUE`, which `signal-hook` reports as
//!   [`Cause::Sent`]). The terminal driver sends Ctrl-C/Ctrl-\ to the whole foreground process
//!   group with `si_code` `SI_KERNEL` ([`Cause::Kernel`], no sender process); the job, being
//!   in that group, has already received it, and forwarding would deliver it twice (Python
//!   would raise `KeyboardInterrupt` inside its own handler). A process that signals the whole
//!   process group (`kill -INT -PGID`) also reaches the job twice; that cannot be told apart
//!   from a `kill` to gpuwatch alone.
//! - SIGWINCH copies our window size to the job's pseudo-terminals, then is sent to the job
//!   (it also got the terminal's own, possibly before the size was updated; a second one is
//!   harmless).
//!
//! When gpuwatch dies without its orderly path (`SIGKILL`, the OOM killer, a crash) nothing is
//! left to forward anything: the job is started with a parent-death signal, `SIGKILL`
//! ([`pdeathsig`]), so it does not live on unwatched, holding its GPU memory. `SIGKILL`, not
//! `SIGTERM`: every catchable way gpuwatch can be asked to stop already reaches the job as the
//! signal that was sent, so this case is only the uncatchable one; by then the job's output
//! pipes have lost their reader and its next write fails anyway, and a job that traps or
//! ignores `SIGTERM` would go on unseen. The signal follows the thread that spawned the job:
//! [`spawn`] is called on the main thread, which lives as long as gpuwatch. It is not inherited
//! by the job's own children, and a set-user-ID program (`sudo`) clears it.
//!
//! Forwarding stops before the job is reaped (it is waited for with `WNOWAIT` first), so a
//! signal can never hit a recycled PID. Once no job runs any more these signals take their
//! default action again (`signal-hook` can't uninstall its handler, so the default is
//! emulated).

use std::ffi::OsString;
use std::io::{self, IsTerminal, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::io::Errno;
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions, kill_process, waitid};
use signal_hook::consts::{SIGALRM, SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGWINCH};
use signal_hook::iterator::SignalsInfo;
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::low_level::siginfo::{Cause, Origin};

pub use super::tail::{Stream, Tail, TailLimits};

/// After the job exits, its output is drained until the pipes close, or until nothing arrives
/// for this long (a background process it left behind may hold them open; what it writes
/// later is lost)…
const DRAIN_QUIET: Duration = Duration::from_millis(100);
/// …or for at most this long.
const DRAIN_MAX: Duration = Duration::from_secs(2);

/// The signals caught while a job runs.
const CAUGHT: [i32; 8] = [
    SIGTERM, SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGWINCH,
];
/// The ones that would end gpuwatch by default (emulated once no job runs).
const FATAL: [i32; 7] = [SIGTERM, SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM];

/// What to run.
#[derive(Debug, Clone, Default)]
pub struct ChildSpec {
    pub program: OsString,
    pub args: Vec<OsString>,
    /// Set in the job's environment, in addition to ours.
    pub env: Vec<(OsString, OsString)>,
}

/// How the job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// It was killed by this signal.
    Signal(i32),
}

impl Exit {
    /// The exit code a shell reports: the code's low byte, or 128 + the signal.
    pub fn shell_code(self) -> u8 {
        match self {
            Exit::Code(c) => (c & 0xff) as u8,
            Exit::Signal(s) => ((128 + s) & 0xff) as u8,
        }
    }

    /// "exit code 1", "killed by SIGKILL (signal 9)".
    pub fn describe(self) -> String {
        match self {
            Exit::Code(c) => format!("exit code {c}"),
            Exit::Signal(s) => format!("killed by {} (signal {s})", signal_name(s)),
        }
    }
}

/// A finished job.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: Exit,
    pub started: SystemTime,
    pub ended: SystemTime,
    /// The last lines of stdout and stderr, interleaved in arrival order, as plain text (see
    /// [`Tail`]).
    pub tail: Vec<String>,
}

impl Outcome {
    /// The code gpuwatch exits with: the job's code, or 128 + signal like a shell.
    pub fn exit_code(&self) -> u8 {
        self.status.shell_code()
    }

    /// "exit code 1" / "killed by SIGKILL (signal 9)".
    pub fn describe(&self) -> String {
        self.status.describe()
    }
}

/// The conventional name of a Linux signal number (`SIGKILL`), `SIGRTMIN+N` for real-time
/// ones, `signal N` when unknown.
pub fn signal_name(signal: i32) -> String {
    const NAMES: [&str; 31] = [
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    match usize::try_from(signal) {
        Ok(n @ 1..=31) => NAMES[n - 1].to_string(),
        Ok(n @ 34..=64) => format!("SIGRTMIN+{}", n - 34),
        _ => format!("signal {signal}"),
    }
}

/// Whether a caught signal goes on to the job (the rule in the module docs).
pub fn should_forward(signal: i32, cause: Cause) -> bool {
    match signal {
        SIGTERM | SIGHUP | SIGUSR1 | SIGUSR2 | SIGALRM => true,
        SIGINT | SIGQUIT => matches!(cause, Cause::Sent(_)),
        _ => false,
    }
}

/// A running job. [`Running::wait`] relays its output until it has exited and its output is
/// drained; call it (from any thread) exactly once. Dropping a `Running` without waiting stops
/// the signal forwarding and, shortly after, the relaying; the job keeps running.
#[derive(Debug)]
pub struct Running {
    child: std::process::Child,
    pid: Pid,
    started: SystemTime,
    forwarder: Forwarder,
    relays: Vec<JoinHandle<()>>,
    /// Dropped when the job has exited: the relays see the read end close and drain.
    exited: Option<OwnedFd>,
    tail: Arc<Mutex<Tail>>,
}

/// Starts the job. Call it from a thread that lives as long as the job is to (the main
/// thread): the job's parent-death signal fires when the spawning thread ends (see the module
/// docs).
///
/// Errors name the program: "cannot run 'foo': No such file or directory (os error 2)"; the
/// kind is the underlying one (`NotFound`, `PermissionDenied`, …).
pub fn spawn(spec: &ChildSpec, limits: TailLimits) -> io::Result<Running> {
    let name = spec.program.to_string_lossy().into_owned();
    let fail = |e: io::Error| io::Error::new(e.kind(), format!("cannot run '{name}': {e}"));
    // Catch the signals before the job exists, so none is lost or kills us in between.
    let signals = Signals::new().map_err(fail)?;
    let (out, out_child) = Output::new(Stream::Stdout).map_err(fail)?;
    // Our stdout and stderr on the same terminal, pipe or file (`2>&1`): one channel for both,
    // so the job's interleaving of the two is kept exactly, as in a direct run.
    let (err, err_child) = if same_file(io::stdout(), io::stderr()) {
        (None, out_child.try_clone().map_err(fail)?)
    } else {
        let (err, err_child) = Output::new(Stream::Stderr).map_err(fail)?;
        (Some(err), err_child)
    };
    let (exited_rx, exited_tx) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| fail(e.into()))?;

    let mut command = Command::new(&spec.program);
    command
        .args(&spec.args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::inherit())
        .stdout(Stdio::from(out_child))
        .stderr(Stdio::from(err_child));
    pdeathsig::die_with_parent(&mut command, pdeathsig::Signal::KILL);
    let started = SystemTime::now();
    let mut child = command.spawn().map_err(fail)?;
    // Close our copies of the job's ends, or the relays would never see end of file.
    drop(command);
    let pid = Pid::from_child(&child);

    let outputs: Vec<Output> = std::iter::once(out).chain(err).collect();
    let ptys: Vec<(Stream, Arc<OwnedFd>)> = outputs
        .iter()
        .filter(|o| o.pty)
        .map(|o| (o.stream, Arc::clone(&o.ours)))
        .collect();
    let forwarder = signals.forward_to(pid, ptys);

    let tail = Arc::new(Mutex::new(Tail::new(limits)));
    let exited_rx = Arc::new(exited_rx);
    let relays = outputs
        .into_iter()
        .map(|o| {
            let tail = Arc::clone(&tail);
            let exited = Arc::clone(&exited_rx);
            std::thread::Builder::new()
                .name(format!("run-relay-{:?}", o.stream).to_lowercase())
                .spawn(move || relay(&o.ours, o.stream, &exited, &tail))
        })
        .collect::<io::Result<Vec<_>>>();
    let relays = match relays {
        Ok(relays) => relays,
        Err(e) => {
            // Nobody would read its output: it would block. Don't leave it behind.
            drop(forwarder);
            let _ = child.kill();
            let _ = child.wait();
            return Err(fail(e));
        }
    };

    Ok(Running {
        child,
        pid,
        started,
        forwarder,
        relays,
        exited: Some(exited_tx),
        tail,
    })
}

impl Running {
    /// The job's process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Relays output and forwards signals until the job has exited and its output is drained.
    pub fn wait(self) -> io::Result<Outcome> {
        let Running {
            mut child,
            pid,
            started,
            mut forwarder,
            relays,
            mut exited,
            tail,
        } = self;
        // Wait for the end without reaping: until it is reaped the PID can't be reused, so the
        // forwarder can't signal a stranger.
        loop {
            match waitid(
                WaitId::Pid(pid),
                WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
            ) {
                Ok(_) => break,
                Err(Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        forwarder.stop();
        let status = child.wait()?;
        let ended = SystemTime::now();
        drop(exited.take());
        for relay in relays {
            let _ = relay.join();
        }
        let status = match (status.code(), status.signal()) {
            (Some(code), _) => Exit::Code(code),
            (None, Some(signal)) => Exit::Signal(signal),
            (None, None) => Exit::Code(status.into_raw()),
        };
        let tail = std::mem::replace(
            &mut *tail.lock().unwrap_or_else(PoisonError::into_inner),
            Tail::new(TailLimits {
                lines: 0,
                line_bytes: 0,
            }),
        );
        Ok(Outcome {
            status,
            started,
            ended,
            tail: tail.into_lines(),
        })
    }
}

/// One of the job's output streams, our end: the pty master or the pipe's read end.
struct Output {
    stream: Stream,
    ours: Arc<OwnedFd>,
    pty: bool,
}

impl Output {
    /// Our end and the job's (the pty slave or the pipe's write end).
    fn new(stream: Stream) -> io::Result<(Self, OwnedFd)> {
        let is_tty = match stream {
            Stream::Stdout => io::stdout().is_terminal(),
            Stream::Stderr => io::stderr().is_terminal(),
        };
        if is_tty {
            match open_pty(stream) {
                Ok((master, slave)) => {
                    let ours = Arc::new(master);
                    return Ok((
                        Self {
                            stream,
                            ours,
                            pty: true,
                        },
                        slave,
                    ));
                }
                Err(e) => {
                    tracing::warn!("no pseudo-terminal for the job's {stream:?} ({e}); a pipe");
                }
            }
        }
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let ours = Arc::new(read);
        Ok((
            Self {
                stream,
                ours,
                pty: false,
            },
            write,
        ))
    }
}

/// Whether two of our descriptors are the same file (device and inode): `2>&1`, or both on
/// one terminal.
fn same_file(a: impl std::os::fd::AsFd, b: impl std::os::fd::AsFd) -> bool {
    match (rustix::fs::fstat(a), rustix::fs::fstat(b)) {
        (Ok(a), Ok(b)) => a.st_dev == b.st_dev && a.st_ino == b.st_ino,
        _ => false,
    }
}

/// A pseudo-terminal pair, the slave raw and as large as our terminal.
fn open_pty(stream: Stream) -> io::Result<(OwnedFd, OwnedFd)> {
    use rustix::fs::{Mode, OFlags};
    use rustix::pty::OpenptFlags;
    use rustix::termios::{OptionalActions, tcgetattr, tcsetattr};

    let master =
        rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    rustix::pty::grantpt(&master)?;
    rustix::pty::unlockpt(&master)?;
    let name = rustix::pty::ptsname(&master, Vec::new())?;
    let slave = rustix::fs::open(
        name.as_c_str(),
        OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut termios = tcgetattr(&slave)?;
    termios.make_raw();
    tcsetattr(&slave, OptionalActions::Now, &termios)?;
    copy_winsize(stream, &master);
    Ok((master, slave))
}

/// Copies the window size of our terminal on `stream` to a pty master (best effort).
fn copy_winsize(stream: Stream, master: &OwnedFd) {
    use rustix::termios::{tcgetwinsize, tcsetwinsize};
    let size = match stream {
        Stream::Stdout => tcgetwinsize(io::stdout()),
        Stream::Stderr => tcgetwinsize(io::stderr()),
    };
    if let Ok(size) = size {
        let _ = tcsetwinsize(master, size);
    }
}

/// Copies one stream of the job to ours, exactly, and into the tail.
fn relay(src: &OwnedFd, stream: Stream, exited: &OwnedFd, tail: &Mutex<Tail>) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut writable = true;
    let mut drain_since: Option<Instant> = None;
    loop {
        let ready = match drain_since {
            None => {
                let mut fds = [
                    PollFd::new(src, PollFlags::IN),
                    PollFd::new(exited, PollFlags::IN),
                ];
                match poll(&mut fds, None) {
                    Ok(_) => {}
                    Err(Errno::INTR) => continue,
                    Err(_) => break,
                }
                if !fds[1].revents().is_empty() {
                    drain_since = Some(Instant::now());
                }
                !fds[0].revents().is_empty()
            }
            Some(since) => {
                if since.elapsed() >= DRAIN_MAX {
                    break;
                }
                let mut fds = [PollFd::new(src, PollFlags::IN)];
                let quiet = Timespec::try_from(DRAIN_QUIET).unwrap_or_default();
                match poll(&mut fds, Some(&quiet)) {
                    Ok(0) => break,
                    Ok(_) => true,
                    Err(Errno::INTR) => continue,
                    Err(_) => break,
                }
            }
        };
        if !ready {
            continue;
        }
        let n = match rustix::io::read(src, &mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(Errno::INTR | Errno::AGAIN) => continue,
            // EIO: a pty master whose slave is closed everywhere (end of output).
            Err(_) => break,
        };
        let data = &buf[..n];
        if writable && let Err(e) = write_ours(stream, data) {
            tracing::debug!("cannot pass the job's {stream:?} on ({e}); still draining it");
            writable = false;
        }
        tail.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .feed(stream, data);
    }
}

fn write_ours(stream: Stream, data: &[u8]) -> io::Result<()> {
    match stream {
        Stream::Stdout => {
            let mut out = io::stdout().lock();
            out.write_all(data)?;
            out.flush()
        }
        Stream::Stderr => {
            let mut err = io::stderr().lock();
            err.write_all(data)?;
            err.flush()
        }
    }
}

/// The caught signals, before the job exists.
struct Signals(SignalsInfo<WithOrigin>);

impl Signals {
    fn new() -> io::Result<Self> {
        ensure_default_when_idle()?;
        let signals = SignalsInfo::<WithOrigin>::new(CAUGHT)?;
        set_active(1);
        Ok(Self(signals))
    }

    fn forward_to(mut self, pid: Pid, ptys: Vec<(Stream, Arc<OwnedFd>)>) -> Forwarder {
        let handle = self.0.handle();
        let thread = std::thread::Builder::new()
            .name("run-signals".to_string())
            .spawn(move || {
                for origin in self.0.forever() {
                    forward(pid, &ptys, &origin);
                }
            });
        match thread {
            Ok(thread) => Forwarder {
                handle,
                thread: Some(thread),
            },
            Err(e) => {
                tracing::warn!(
                    "cannot start the signal forwarder ({e}); signals stay with gpuwatch"
                );
                Forwarder {
                    handle,
                    thread: None,
                }
            }
        }
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        // Unregistered by SignalsInfo's own drop; the count follows.
        set_active(-1);
    }
}

fn forward(pid: Pid, ptys: &[(Stream, Arc<OwnedFd>)], origin: &Origin) {
    let signal = origin.signal;
    tracing::debug!(signal, cause = ?origin.cause, process = ?origin.process, "run: caught");
    if signal == SIGWINCH {
        if !ptys.is_empty() {
            for (stream, master) in ptys {
                copy_winsize(*stream, master);
            }
            let _ = kill_process(pid, Signal::WINCH);
        }
        return;
    }
    if !should_forward(signal, origin.cause) {
        return;
    }
    if let Some(sig) = Signal::from_named_raw(signal)
        && let Err(e) = kill_process(pid, sig)
    {
        tracing::debug!("cannot forward {} to {pid:?}: {e}", signal_name(signal));
    }
}

/// The running forwarder; stopping it (or dropping it) unregisters the signals.
#[derive(Debug)]
struct Forwarder {
    handle: signal_hook::iterator::Handle,
    thread: Option<JoinHandle<()>>,
}

impl Forwarder {
    fn stop(&mut self) {
        self.handle.close();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How many jobs are running in this process, and the flag that is true when none is.
fn active() -> &'static (Mutex<usize>, Arc<AtomicBool>) {
    static ACTIVE: OnceLock<(Mutex<usize>, Arc<AtomicBool>)> = OnceLock::new();
    ACTIVE.get_or_init(|| (Mutex::new(0), Arc::new(AtomicBool::new(true))))
}

fn set_active(delta: isize) {
    let (count, idle) = active();
    let mut count = count.lock().unwrap_or_else(PoisonError::into_inner);
    *count = count.saturating_add_signed(delta);
    idle.store(*count == 0, Ordering::SeqCst);
}

/// Once signal-hook has handlers for the fatal signals they can't be uninstalled; emulate the
/// default action (end the process) whenever no job runs, as if they had never been caught.
fn ensure_default_when_idle() -> io::Result<()> {
    static REGISTERED: Mutex<bool> = Mutex::new(false);
    let mut done = REGISTERED.lock().unwrap_or_else(PoisonError::into_inner);
    if !*done {
        let idle = Arc::clone(&active().1);
        for signal in FATAL {
            signal_hook::flag::register_conditional_default(signal, Arc::clone(&idle))?;
        }
        *done = true;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use signal_hook::low_level::siginfo::Sent;

    #[test]
    fn exit_codes_like_a_shell() {
        assert_eq!(Exit::Code(0).shell_code(), 0);
        assert_eq!(Exit::Code(7).shell_code(), 7);
        assert_eq!(Exit::Code(256 + 3).shell_code(), 3);
        assert_eq!(Exit::Signal(9).shell_code(), 137);
        assert_eq!(Exit::Signal(15).shell_code(), 143);
        assert_eq!(Exit::Signal(2).shell_code(), 130);
    }

    #[test]
    fn describes_the_end() {
        assert_eq!(Exit::Code(1).describe(), "exit code 1");
        assert_eq!(Exit::Signal(9).describe(), "killed by SIGKILL (signal 9)");
        assert_eq!(Exit::Signal(11).describe(), "killed by SIGSEGV (signal 11)");
        assert_eq!(signal_name(35), "SIGRTMIN+1");
        assert_eq!(signal_name(99), "signal 99");
    }

    #[test]
    fn forwarding_rule() {
        let kill = Cause::Sent(Sent::User);
        for cause in [Cause::Kernel, kill, Cause::Unknown] {
            for sig in [SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM] {
                assert!(should_forward(sig, cause));
            }
        }
        for sig in [SIGINT, SIGQUIT] {
            assert!(should_forward(sig, kill));
            assert!(should_forward(sig, Cause::Sent(Sent::TKill)));
            assert!(should_forward(sig, Cause::Sent(Sent::Queue)));
            // From the terminal: the job got it through the process group already.
            assert!(!should_forward(sig, Cause::Kernel));
        }
        assert!(!should_forward(SIGWINCH, kill));
    }

    #[test]
    fn running_can_be_waited_for_on_another_thread() {
        fn send<T: Send + 'static>() {}
        send::<Running>();
        send::<Outcome>();
    }

    #[test]
    fn spawn_error_names_the_program() {
        let spec = ChildSpec {
            program: "gpuwatch-no-such-program".into(),
            ..ChildSpec::default()
        };
        let err = spawn(&spec, TailLimits::default()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert_eq!(
            err.to_string(),
            "cannot run 'gpuwatch-no-such-program': No such file or directory (os error 2)"
        );
    }

    #[test]
    fn waits_and_keeps_the_tail() {
        let spec = ChildSpec {
            program: "sh".into(),
            args: vec![
                "-c".into(),
                "printf 'run-child-test 10%%\\r100%%\\n' >&2; printf \"$GW_TEST\\n\" >&2; exit 3"
                    .into(),
            ],
            env: vec![("GW_TEST".into(), "from-env".into())],
        };
        let running = spawn(&spec, TailLimits::default()).expect("sh runs");
        assert!(running.pid() > 0);
        let outcome = std::thread::spawn(move || running.wait())
            .join()
            .expect("no panic")
            .expect("waits");
        assert_eq!(outcome.status, Exit::Code(3));
        assert_eq!(outcome.exit_code(), 3);
        assert_eq!(outcome.tail, ["100%", "from-env"]);
        assert!(outcome.ended >= outcome.started);
    }
}
