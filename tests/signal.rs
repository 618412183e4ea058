//! `gpuwatch::signal::send` against real child processes: identity checks before any signal.

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command};

use gpuwatch::signal::{self, Sig, SignalError};
use gpuwatch::source::procinfo::ProcInfo;

fn sleeper() -> Child {
    Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("spawn sleep")
}

/// Kills and reaps `child` (for cleanup after a test that must leave it alive).
fn reap(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn start_time_agrees_with_procinfo() {
    let child = sleeper();
    let pid = child.id();
    let mut info = ProcInfo::new().expect("sysinfo supported");
    let host = &info.enrich(&[pid])[&pid];
    assert!(host.visible);
    assert_eq!(signal::start_time(pid), host.start_time);
    assert!(signal::start_time(pid).is_some());
    reap(child);
}

#[test]
fn term_kills_a_child() {
    let mut child = sleeper();
    let pid = child.id();
    let start = signal::start_time(pid).expect("visible");
    signal::send(pid, start, Sig::Term).expect("signal sent");
    let status = child.wait().expect("wait");
    assert_eq!(status.signal(), Some(15));
}

#[test]
fn kill_with_the_start_time_kills_a_child() {
    let mut child = sleeper();
    let start = signal::start_time(child.id()).expect("visible");
    signal::send(child.id(), start, Sig::Kill).expect("signal sent");
    assert_eq!(child.wait().expect("wait").signal(), Some(9));
}

#[test]
fn one_second_off_is_the_same_process() {
    let mut child = sleeper();
    let pid = child.id();
    let start = signal::start_time(pid).expect("visible");
    signal::send(pid, start + 1, Sig::Term).expect("within tolerance");
    assert_eq!(child.wait().expect("wait").signal(), Some(15));
}

#[test]
fn reused_pid_is_refused_and_nothing_sent() {
    let mut child = sleeper();
    let pid = child.id();
    let start = signal::start_time(pid).expect("visible");
    let err = signal::send(pid, start - 3600, Sig::Kill).expect_err("refused");
    match &err {
        SignalError::Reused {
            pid: p,
            expected,
            found,
        } => {
            assert_eq!((*p, *expected, *found), (pid, start - 3600, start));
        }
        other => panic!("expected Reused, got {other:?}"),
    }
    assert!(err.to_string().contains("nothing was sent"), "{err}");
    // Still alive.
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "child was signalled"
    );
    reap(child);
}

#[test]
fn reaped_child_is_gone() {
    let mut child = sleeper();
    let pid = child.id();
    let start = signal::start_time(pid).expect("visible");
    child.kill().expect("kill");
    child.wait().expect("wait");
    // The PID could in theory be reused by now; then the start time tells it apart.
    match signal::send(pid, start, Sig::Term) {
        Err(SignalError::Gone { pid: p }) => assert_eq!(p, pid),
        Err(SignalError::Reused { .. }) => {}
        other => panic!("expected Gone, got {other:?}"),
    }
    assert!(signal::start_time(pid).is_none_or(|s| s != start));
}

/// PID 1 with a wrong start time is refused before anything is sent. (`SIGKILL` is used so
/// that even a bug could not hurt: the kernel never delivers `SIGKILL` to init.)
#[test]
fn pid1_with_wrong_start_time_is_refused() {
    let Some(start) = signal::start_time(1) else {
        return; // PID 1 not visible in this namespace.
    };
    let err = signal::send(1, start.saturating_sub(3600), Sig::Kill).expect_err("refused");
    assert!(matches!(err, SignalError::Reused { pid: 1, .. }), "{err:?}");
}

/// As a normal user, signalling init is refused by the kernel. Root may signal anything, so
/// the assertion only runs for other users (the mapping itself is unit-tested).
#[test]
fn pid1_permission_denied_when_not_root() {
    if gpuwatch::source::procinfo::current_uid() == Some(0) {
        return;
    }
    let Some(start) = signal::start_time(1) else {
        return;
    };
    let err = signal::send(1, start, Sig::Term).expect_err("refused");
    match &err {
        SignalError::PermissionDenied { pid: 1, owner } => {
            assert!(owner.is_some());
            assert!(err.to_string().contains("only signal your own processes"));
        }
        other => panic!("expected PermissionDenied, got {other:?}"),
    }
}
