//! The dashboard on a terminal that answers nothing: a pseudo-terminal of the test's own whose
//! master side is only read, never written back to, except for the `q` that ends it. Terminals
//! that do not answer the cursor position query (`ESC[6n`) are common (serial consoles, some
//! web and IDE terminals); tmux always answers, so the tmux tests cannot see this.

mod common;

use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{gpuwatch_bin, open_pty};

/// The text of terminal output without its CSI sequences (`ESC [ … final byte`).
fn without_csi(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if ('\x40'..='\x7e').contains(&c) {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Collects what the terminal receives, on a thread, until the last slave closes.
fn record(master: OwnedFd) -> (Arc<OwnedFd>, Arc<Mutex<Vec<u8>>>) {
    let master = Arc::new(master);
    let got = Arc::new(Mutex::new(Vec::new()));
    let (m, g) = (Arc::clone(&master), Arc::clone(&got));
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        loop {
            match rustix::io::read(&*m, &mut buf) {
                Ok(0) | Err(rustix::io::Errno::IO) => break,
                Ok(n) => g.lock().expect("lock").extend_from_slice(&buf[..n]),
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => panic!("read pty: {e}"),
            }
        }
    });
    (master, got)
}

#[test]
fn the_dashboard_runs_on_a_terminal_that_never_answers_the_cursor_query() {
    let (master, slave) = open_pty(24, 80);
    // `setsid --ctty`: the pty is gpuwatch's controlling terminal (its /dev/tty), as in a
    // real terminal, not the test runner's.
    let mut cmd = Command::new("setsid");
    cmd.args(["--ctty", gpuwatch_bin(), "--demo", "--interval", "200ms"])
        .env("NO_COLOR", "1")
        .env("TERM", "xterm-256color")
        .env("XDG_CONFIG_HOME", "/nonexistent-gpuwatch-test")
        .stdin(Stdio::from(slave.try_clone().expect("dup")))
        .stdout(Stdio::from(slave.try_clone().expect("dup")))
        .stderr(Stdio::from(slave));
    let mut child = cmd.spawn().expect("setsid (util-linux) runs gpuwatch");
    // Our copies of the slave must be closed, or the master never reports the end.
    drop(cmd);
    let (master, got) = record(master);
    let seen = || without_csi(&got.lock().expect("lock"));

    // It draws: the GPU panels and the footer's keys. (Before the fix it waited 2 s for an
    // answer, then exited 1: "The cursor position could not be read within a normal
    // duration".)
    let started = Instant::now();
    while !(seen().contains("H200") && seen().contains("quit")) {
        let exited = child.try_wait().expect("wait");
        assert!(
            exited.is_none() && started.elapsed() < Duration::from_secs(15),
            "no dashboard (exit: {exited:?}); the terminal got:\n{}",
            seen()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Still running after the 2 s a cursor query would have waited for.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        child.try_wait().expect("wait").is_none(),
        "it exited:\n{}",
        seen()
    );

    rustix::io::write(&*master, b"q").expect("type q");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "q did not end it:\n{}",
            seen()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "{}", seen());
    let bytes = got.lock().expect("lock").clone();
    assert!(
        !bytes.windows(4).any(|w| w == b"\x1b[6n"),
        "the dashboard asked for the cursor position"
    );
    assert!(!seen().contains("cursor position"), "{}", seen());
}
