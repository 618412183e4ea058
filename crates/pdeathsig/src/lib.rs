//! A child process that does not outlive its parent.
//!
//! [`die_with_parent`] makes a [`Command`]'s child ask the kernel (`prctl(PR_SET_PDEATHSIG)`)
//! for a signal when its parent dies, so a job whose wrapper was killed with `SIGKILL` (or
//! crashed) does not live on unwatched, holding its GPU memory. It has to be set in the child,
//! between `fork` and `exec`, which only `CommandExt::pre_exec` offers, and that is `unsafe`:
//! this crate holds that one call, so the rest of the workspace can stay
//! `unsafe_code = "forbid"`.
//!
//! # Caveats (Linux semantics)
//!
//! - The signal fires when the **thread** that forked the child exits, not the process: spawn
//!   from a thread that lives as long as the process (the main thread), or the child gets the
//!   signal when that thread ends.
//! - It is cleared when the child executes a set-user-ID or set-group-ID program or one with
//!   file capabilities (`sudo …`), and it is not inherited by the child's own children: a job's
//!   workers are covered only if they set one themselves.
//! - If the parent dies after `fork` but before the `prctl`, no signal would ever come: the
//!   child compares `getppid()` with the parent's PID after the `prctl` and does not start
//!   (the spawn fails with `ESRCH`, to nobody, as the parent is gone).

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

pub use rustix::process::Signal;

/// Makes `command`'s child receive `signal` when the thread that spawns it (see the module
/// docs) exits, and refuses to start it if that parent is already gone.
pub fn die_with_parent(command: &mut Command, signal: Signal) -> &mut Command {
    // Read in the parent: the PID the child must see as its parent's.
    let parent = rustix::process::getpid();
    let hook = move || -> io::Result<()> {
        rustix::process::set_parent_process_death_signal(Some(signal))?;
        // Reparented already (to init or a subreaper): the parent died before the prctl and
        // the signal will never come.
        if rustix::process::getppid() != Some(parent) {
            return Err(rustix::io::Errno::SRCH.into());
        }
        Ok(())
    };
    // SAFETY: `pre_exec` runs the closure in the forked child before `exec`, where only
    // async-signal-safe work is sound (another thread may have held a lock, such as malloc's,
    // at the fork). The closure makes two system calls through rustix (`prctl` and
    // `getppid`: plain syscalls, no allocation, no locks), compares two `Pid`s and may build
    // an `io::Error` from a raw OS error code, which does not allocate. It captures only
    // `Copy` values (a `Pid` and a `Signal`) and touches no file descriptor or memory shared
    // with the parent.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(hook)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    #[test]
    fn the_child_runs_normally() {
        // The hook does not fail while the parent lives: the program starts and exits.
        let status = die_with_parent(Command::new("true").env_clear(), Signal::KILL)
            .status()
            .expect("spawns");
        assert!(status.success());
    }

    #[test]
    fn the_child_dies_with_the_thread_that_spawned_it() {
        // A thread spawns `sleep` and exits without waiting: the death signal fires.
        let child = std::thread::spawn(|| {
            die_with_parent(Command::new("sleep").arg("30"), Signal::KILL)
                .spawn()
                .expect("spawns")
        })
        .join()
        .expect("no panic");
        let mut child = child;
        let status = child.wait().expect("waits");
        assert_eq!(
            status.signal(),
            Some(9),
            "killed when its parent thread ended"
        );
    }
}
