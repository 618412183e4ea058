//! Sending signals to processes, with identity checks (the dashboard's kill action).
//!
//! A process is `(pid, start time)` and PIDs are reused, so [`send`] re-reads the start time
//! of the PID right before signalling and sends nothing when it differs from the one the user
//! was shown. The start time is read exactly as [`crate::source::procinfo::ProcInfo`]
//! computes `HostProc::start_time` (`sysinfo`'s `Process::start_time` for that one PID:
//! boot time from `/proc/stat` plus field 22 of `/proc/PID/stat`), so a value taken from a
//! sample compares equal; a tolerance of one second absorbs rounding elsewhere.
//!
//! A process whose identity can't be pinned is never signalled:
//!
//! - [`send`] takes the start time the user was shown, not an `Option`: a row without one (a
//!   PID not visible in this PID namespace, whose `/proc` entry can't be read) can't be
//!   checked, and the caller refuses it with [`SignalError::NoIdentity`] instead of sending.
//! - The process is first pinned with a pidfd (`pidfd_open`, Linux 5.3+), then its identity
//!   is checked, then the signal goes through the pidfd. If the pinned process is still alive
//!   when the signal is delivered, it was alive during the check too, so the start time read
//!   was its own; if it died in between, the signal fails with `ESRCH` and nothing reaches a
//!   process that took the PID. Without a pidfd (an older kernel, a seccomp filter, no file
//!   descriptor left) nothing is sent ([`SignalError::NotPinned`]): a check followed by
//!   `kill(2)` by number would leave a window in which a reused PID is hit.
//!
//! The UI drives the sequence (TERM, then KILL if the user asks); nothing here waits.

use std::fmt;

use rustix::io::Errno;
use rustix::process::{Pid, PidfdFlags, Signal};
use sysinfo::{ProcessRefreshKind, ProcessesToUpdate, System, UpdateKind};

/// Start times within this many seconds of each other are the same process.
pub const START_TIME_TOLERANCE: u64 = 1;

/// The signals the kill action sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sig {
    /// `SIGTERM` (15): asks the process to exit; it may clean up (or ignore it).
    Term,
    /// `SIGKILL` (9): ends the process at once; it can't be caught.
    Kill,
}

impl Sig {
    fn to_rustix(self) -> Signal {
        match self {
            Sig::Term => Signal::TERM,
            Sig::Kill => Signal::KILL,
        }
    }

    /// The conventional name, e.g. `SIGTERM`.
    pub fn name(self) -> &'static str {
        match self {
            Sig::Term => "SIGTERM",
            Sig::Kill => "SIGKILL",
        }
    }
}

impl fmt::Display for Sig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a signal was not sent (or not delivered).
#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    /// No process has this PID any more (it exited).
    #[error("PID {pid} is gone (the process exited); nothing was sent")]
    Gone { pid: u32 },
    /// The PID now belongs to a process with another start time; nothing was sent.
    #[error(
        "PID {pid} now belongs to another process (started {}, the one shown started {}); \
         nothing was sent",
        clock(*found, *expected),
        clock(*expected, *found)
    )]
    Reused { pid: u32, expected: u64, found: u64 },
    /// The caller has no start time for `pid` (it is not visible in this PID namespace, or its
    /// `/proc` entry can't be read): nothing can tell whether the PID still means the process
    /// shown, so nothing is sent. [`send`] can't be called without a start time; callers
    /// report this instead.
    #[error(
        "PID {pid} is not visible in this PID namespace: its identity can't be checked, so \
         gpuwatch will not signal it"
    )]
    NoIdentity { pid: u32 },
    /// No pidfd could be opened for `pid` (`pidfd_open` needs Linux 5.3+; a seccomp filter or
    /// the descriptor limit can refuse it too): the process can't be pinned between the
    /// identity check and the signal, so nothing is sent.
    #[error(
        "cannot pin PID {pid} with a pidfd ({source}; Linux 5.3+ is needed): without it the \
         PID could be reused between the check and the signal, so gpuwatch will not signal \
         it; nothing was sent"
    )]
    NotPinned {
        pid: u32,
        #[source]
        source: std::io::Error,
    },
    /// The kernel refused (`EPERM`): the process belongs to another user and we are not root.
    #[error(
        "not allowed to signal PID {pid} ({}): you can only signal your own processes unless \
         you are root",
        owner.as_deref().map_or_else(|| "another user's process".to_owned(), |o| format!("owned by {o}"))
    )]
    PermissionDenied { pid: u32, owner: Option<String> },
    /// Any other failure of the system call.
    #[error("could not signal PID {pid}: {source}")]
    Os {
        pid: u32,
        #[source]
        source: std::io::Error,
    },
}

/// `secs` (Unix seconds) as a UTC wall-clock time: `12:03:44 UTC`, with the date in front
/// when `other` falls on another day.
fn clock(secs: u64, other: u64) -> String {
    let rfc = |s: u64| crate::times::format_rfc3339(s as f64);
    let this = rfc(secs);
    let (date, time) = this.split_once('T').unwrap_or((this.as_str(), ""));
    let time = time.trim_end_matches('Z');
    let same_day = rfc(other).split_once('T').is_some_and(|(d, _)| d == date);
    if same_day {
        format!("{time} UTC")
    } else {
        format!("{date} {time} UTC")
    }
}

/// Start time (Unix seconds) and owner uid of `pid`, read through `sysinfo` for that PID
/// only, exactly as `ProcInfo::enrich` reads `HostProc::start_time`; `None` when the process
/// is not visible.
fn identity(pid: u32) -> Option<(u64, Option<u32>)> {
    let mut system = System::new().ok()?;
    let target = sysinfo::Pid::from_u32(pid);
    system.refresh_processes_specifics(
        ProcessesToUpdate::Some(&[target]),
        true,
        ProcessRefreshKind::nothing().with_user(UpdateKind::Always),
    );
    let proc_ = system.process(target)?;
    Some((proc_.start_time(), proc_.user_id().map(|u| **u)))
}

/// The start time of `pid` in Unix seconds, computed as `HostProc::start_time` is; `None`
/// when the process is not visible. Reads `/proc/PID/stat` (and `/proc/stat` once for the
/// boot time).
pub fn start_time(pid: u32) -> Option<u64> {
    identity(pid).map(|(start, _)| start)
}

/// Sends `sig` to `pid`, provided it is still the process that started at
/// `expected_start_time` (Unix seconds, ±[`START_TIME_TOLERANCE`]). There is no way to skip
/// the check: a caller without a start time must not signal (see
/// [`SignalError::NoIdentity`]).
///
/// Errors: [`SignalError::Gone`] when no such process exists (a reaped child, PID 0 or a PID
/// out of range), [`SignalError::Reused`] when its start time differs (nothing is sent),
/// [`SignalError::NotPinned`] when no pidfd can be opened (nothing is sent),
/// [`SignalError::PermissionDenied`] when the kernel refuses (another user's process).
pub fn send(pid: u32, expected_start_time: u64, sig: Sig) -> Result<(), SignalError> {
    send_with(pid, expected_start_time, sig, true)
}

/// [`send`], with `pidfd_open` made to fail by `use_pidfd: false` (tests of a kernel without
/// pidfds).
fn send_with(pid: u32, expected: u64, sig: Sig, use_pidfd: bool) -> Result<(), SignalError> {
    // PID 0 (and negative values) would address process groups in kill(2): never.
    let Some(target) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return Err(SignalError::Gone { pid });
    };
    // Pin the process first, so the identity checked below is the one signalled.
    let opened = if use_pidfd {
        rustix::process::pidfd_open(target, PidfdFlags::empty())
    } else {
        Err(Errno::NOSYS)
    };
    let pidfd = match opened {
        Ok(fd) => fd,
        Err(Errno::SRCH) => return Err(SignalError::Gone { pid }),
        // ENOSYS (kernel < 5.3), EPERM from a seccomp filter, EMFILE, ...: the process can't
        // be pinned, so the check below could be about another process than the one hit.
        Err(errno) => {
            return Err(SignalError::NotPinned {
                pid,
                source: errno.into(),
            });
        }
    };
    let Some((found, uid)) = identity(pid) else {
        return Err(SignalError::Gone { pid });
    };
    if found.abs_diff(expected) > START_TIME_TOLERANCE {
        return Err(SignalError::Reused {
            pid,
            expected,
            found,
        });
    }
    rustix::process::pidfd_send_signal(&pidfd, sig.to_rustix())
        .map_err(|errno| error_for(pid, errno, || uid.map(crate::source::procinfo::user_name)))
}

/// The error for a failed signal system call; `owner` is asked only for `EPERM`.
fn error_for(pid: u32, errno: Errno, owner: impl FnOnce() -> Option<String>) -> SignalError {
    match errno {
        Errno::SRCH => SignalError::Gone { pid },
        Errno::PERM => SignalError::PermissionDenied {
            pid,
            owner: owner(),
        },
        other => SignalError::Os {
            pid,
            source: other.into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_mapping() {
        let e = error_for(4120, Errno::PERM, || Some("alice".into()));
        assert!(matches!(
            &e,
            SignalError::PermissionDenied { pid: 4120, owner: Some(o) } if o == "alice"
        ));
        assert_eq!(
            e.to_string(),
            "not allowed to signal PID 4120 (owned by alice): you can only signal your own \
             processes unless you are root"
        );
        let e = error_for(7, Errno::PERM, || None);
        assert_eq!(
            e.to_string(),
            "not allowed to signal PID 7 (another user's process): you can only signal your \
             own processes unless you are root"
        );
        let e = error_for(7, Errno::SRCH, || panic!("owner not needed"));
        assert!(matches!(e, SignalError::Gone { pid: 7 }));
        let e = error_for(7, Errno::INVAL, || panic!("owner not needed"));
        assert!(matches!(e, SignalError::Os { pid: 7, .. }));
    }

    #[test]
    fn reused_message() {
        // 2024-05-06 12:03:44 UTC and 11:58:02 the same day.
        let found = 1_714_997_024;
        let expected = found - (5 * 60 + 42);
        let e = SignalError::Reused {
            pid: 4120,
            expected,
            found,
        };
        assert_eq!(
            e.to_string(),
            "PID 4120 now belongs to another process (started 12:03:44 UTC, the one shown \
             started 11:58:02 UTC); nothing was sent"
        );
        let e = SignalError::Reused {
            pid: 1,
            expected: found - 86_400,
            found,
        };
        assert!(e.to_string().contains("started 2024-05-06 12:03:44 UTC"));
        assert!(e.to_string().contains("started 2024-05-05 12:03:44 UTC"));
    }

    #[test]
    fn without_a_pidfd_nothing_is_sent() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        let start = start_time(pid).expect("visible");
        // The right start time, but the process can't be pinned: refused all the same.
        let err = send_with(pid, start, Sig::Kill, false).expect_err("refused");
        assert!(matches!(err, SignalError::NotPinned { pid: p, .. } if p == pid));
        assert!(err.to_string().contains("will not signal it"), "{err}");
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(child.try_wait().expect("try_wait").is_none(), "signalled");
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn no_identity_message() {
        assert_eq!(
            SignalError::NoIdentity { pid: 4120 }.to_string(),
            "PID 4120 is not visible in this PID namespace: its identity can't be checked, so \
             gpuwatch will not signal it"
        );
    }

    #[test]
    fn invalid_pids_are_gone() {
        for pid in [0, u32::MAX, i32::MAX as u32 + 1] {
            assert!(matches!(
                send(pid, 0, Sig::Kill),
                Err(SignalError::Gone { .. })
            ));
        }
    }
}
