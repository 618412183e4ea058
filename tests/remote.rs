//! `gpuwatch tui --connect URL`: a remote daemon's frames over its event stream, a token when
//! the daemon wants one, and the link going down and coming back (reconnect with backoff).

mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{Daemon, ScenarioFile, Sleeper, gpuwatch_bin, gpuwatch_cmd};
use gpuwatch::remote::{self, Link};

/// One GPU with one process: the daemon reads it through the NVML test double, and the
/// process's user and command from this host's `/proc` (a `Sleeper`).
fn scenario(pid: u32) -> ScenarioFile {
    ScenarioFile::new(&format!(
        "[[gpu]]\nmemory_total = \"80GiB\"\n[[gpu.process]]\npid = {pid}\nused = \"12GiB\"\n"
    ))
}

#[test]
fn the_remote_table_shows_the_daemons_gpus_and_processes() {
    let job = Sleeper::spawn();
    let sc = scenario(job.pid());
    let daemon = Daemon::start(&sc, &["--no-history"]);
    let out = std::process::Command::new(gpuwatch_bin())
        .args([
            "tui",
            "--connect",
            &format!("http://127.0.0.1:{}", daemon.port),
        ])
        .env("XDG_CONFIG_HOME", sc.dir.path())
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let host = gpuwatch::hostname();
    assert!(text.contains(&format!("{host} · remote (live")), "{text}");
    assert!(text.contains("12.0GiB / 80.0GiB"), "{text}");
    assert!(text.contains(&job.pid().to_string()), "{text}");
    assert!(
        text.contains("sleep 300"),
        "the command, from the daemon's host: {text}"
    );
}

#[test]
fn a_daemon_with_a_token_needs_it() {
    let sc = scenario(4242);
    let token = sc.dir.path().join("token");
    std::fs::write(&token, "s3cret\n").expect("token");
    let token_arg = token.to_string_lossy().into_owned();
    let daemon = Daemon::start(&sc, &["--no-history", "--token-file", &token_arg]);
    let url = format!("http://127.0.0.1:{}", daemon.port);
    let without = std::process::Command::new(gpuwatch_bin())
        .args(["--hang-timeout", "2s", "tui", "--connect", &url])
        .env("XDG_CONFIG_HOME", sc.dir.path())
        .output()
        .expect("runs");
    common::fails_with(&without, 1, "bearer token");
    let with = std::process::Command::new(gpuwatch_bin())
        .args(["tui", "--connect", &url, "--token-file", &token_arg])
        .env("XDG_CONFIG_HOME", sc.dir.path())
        .output()
        .expect("runs");
    assert!(with.status.success(), "{}", common::stderr(&with));
    assert!(common::stdout(&with).contains("4242"));
}

#[test]
fn bad_addresses_and_dead_daemons_get_clear_errors() {
    let sc = scenario(4242);
    let bad = gpuwatch_cmd(&sc)
        .args(["tui", "--connect", "ftp://somewhere"])
        .output()
        .expect("runs");
    common::fails_with(&bad, 2, "expected http://HOST:PORT");
    let port = free_port();
    let dead = gpuwatch_cmd(&sc)
        .args(["--hang-timeout", "1s", "tui", "--connect"])
        .arg(format!("127.0.0.1:{port}"))
        .output()
        .expect("runs");
    common::fails_with(&dead, 1, "Connection refused");
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A daemon process, killed when dropped (a failing test leaves nothing behind).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A daemon on a fixed port (so a restart comes back at the same address).
fn daemon_on(sc: &ScenarioFile, port: u16) -> Killed {
    let mut child = gpuwatch_cmd(sc)
        .args(["--interval", "200ms", "daemon", "--no-history", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("daemon starts");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    loop {
        let line = lines
            .next()
            .expect("the daemon says where it listens")
            .expect("stderr");
        if line.contains("listening on") {
            break;
        }
    }
    // Keep draining stderr so the daemon never blocks on it.
    std::thread::spawn(move || for _ in lines {});
    Killed(child)
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_link_goes_down_and_comes_back_with_the_daemon() {
    let job = Sleeper::spawn();
    let sc = scenario(job.pid());
    let port = free_port();
    let first = daemon_on(&sc, port);
    let remote = remote::connect(&format!("127.0.0.1:{port}"), None).expect("connects");
    let frames = remote.frames();
    let link = remote.link();
    wait_for("the first frame", || frames.borrow().is_some());
    assert!(matches!(*link.borrow(), Link::Connected { .. }));
    let seq_before = frames.borrow().as_ref().map_or(0, |f| f.seq);
    let frame = frames.borrow().clone().expect("a frame");
    assert_eq!(frame.source.host, gpuwatch::hostname());
    assert_eq!(frame.sample.gpus[0].processes[0].used_bytes, Some(12 << 30));

    // The daemon stops: the link says since when and why, and backs off.
    drop(first);
    let stopped = std::time::SystemTime::now();
    wait_for("the link to go down", || {
        matches!(*link.borrow(), Link::Disconnected { .. })
    });
    wait_for(
        "a second failed try",
        || matches!(*link.borrow(), Link::Disconnected { attempts, .. } if attempts >= 2),
    );
    if let Link::Disconnected { since, error, .. } = &*link.borrow() {
        let lag = since
            .duration_since(stopped)
            .unwrap_or_else(|e| e.duration());
        assert!(lag < Duration::from_secs(5), "down since {lag:?} off");
        assert!(!error.is_empty());
    }

    // It comes back on the same address: frames flow again without anyone asking.
    let second = daemon_on(&sc, port);
    wait_for("the link to come back", || {
        matches!(*link.borrow(), Link::Connected { .. })
    });
    wait_for("a new frame", || {
        frames.borrow().as_ref().map_or(0, |f| f.seq) > seq_before + 1
    });
    drop(second);
}
