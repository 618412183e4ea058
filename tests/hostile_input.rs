//! Hostile input through the real binary: crafted times on the command line, in the history
//! API, in a recording and from a daemon (`tui --connect`); a clock step back in a recording;
//! 50 MiB lines; `/dev/zero` and FIFOs where a file is expected. Never a panic (exit 101),
//! never a hang, never an error message that quotes megabytes.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Daemon, ScenarioFile, gpuwatch_cmd};

fn scenario() -> ScenarioFile {
    ScenarioFile::new(
        "[[gpu]]\nmemory_total = \"80GiB\"\n[[gpu.process]]\npid = 4242\nused = \"12GiB\"\n",
    )
}

/// Runs `cmd` to completion within `limit`, killing it (and failing) if it takes longer.
fn run_within(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gpuwatch runs");
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "still running after {limit:?} (hung): {}",
                common::stderr(&out)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Fails the test when the command panicked or quoted too much.
fn no_panic_short(o: &Output) {
    let err = common::stderr(o);
    assert_ne!(o.status.code(), Some(101), "panicked: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.len() < 2_000,
        "{} bytes on stderr: {}",
        err.len(),
        &err[..2_000]
    );
}

fn get(port: u16, path: &str) -> (u16, serde_json::Value) {
    let (status, body) = common::request(port, path, None);
    let json = serde_json::from_str(&body).unwrap_or_else(|_| panic!("not JSON: {body}"));
    (status, json)
}

#[test]
fn crafted_times_in_the_history_api_and_cli_are_clear_errors() {
    let sc = scenario();
    let db = sc.dir.path().join("history.sqlite");
    let db_arg = db.to_string_lossy().into_owned();
    let daemon = Daemon::start(&sc, &["--history", &db_arg]);
    let cases = [
        ("since=0&until=1e20", "'until': 1e20 is out of range"),
        ("since=%E2%82%ACa%E2%82%AC", "'since': '€a€' is not a time"),
        ("since=1e19", "'since': 1e19 is out of range"),
        ("until=-1e300", "'until': -1e300 is out of range"),
        ("since=1000000000y", "'since': 1000000000y is out of range"),
        ("step=1e300", "'step': 1e300 s is out of range"),
        (
            "step=100000000000y",
            "'step': '100000000000y' is out of range",
        ),
    ];
    for (query, needle) in cases {
        let (status, body) = get(daemon.port, &format!("/api/v1/history?{query}"));
        assert_eq!(status, 400, "{query}: {body}");
        let error = body["error"].as_str().unwrap_or_default();
        assert!(error.contains(needle), "{query}: {error}");
    }
    let long = "9".repeat(8_000);
    let (status, body) = get(daemon.port, &format!("/api/v1/history?since={long}"));
    assert_eq!(status, 400);
    assert!(body["error"].as_str().unwrap().len() < 600, "{body}");
    // The daemon is still there.
    let (status, _) = get(daemon.port, "/api/v1/health");
    assert_eq!(status, 200);

    // The same file through `history`: a usage error (2) with a message, never 101.
    let history = |args: &[&str]| {
        let mut cmd = gpuwatch_cmd(&sc);
        cmd.arg("history").args(args).args(["--history", &db_arg]);
        run_within(cmd, Duration::from_secs(20))
    };
    let out = history(&["who", "--gpu", "0", "--at", "253402300800"]);
    common::fails_with(
        &out,
        2,
        "--at: 253402300800 is out of range: expected a time between 1970-01-01 and \
         9999-12-31, as Unix seconds or RFC 3339",
    );
    let out = history(&["peaks", "--since", "1e19"]);
    common::fails_with(&out, 2, "--since: 1e19 is out of range");
    for at in ["€a€", "-1", "1e300", "99999999999999999999y ago", "inf"] {
        let out = history(&["who", "--gpu", "0", &format!("--at={at}")]);
        common::fails_with(&out, 2, "--at: ");
    }
    // A duration too long to add to a clock: a usage error from the flag parser.
    let mut cmd = gpuwatch_cmd(&sc);
    cmd.args(["record", "--duration", "500000000000y"])
        .arg(sc.dir.path().join("never.jsonl"));
    let out = run_within(cmd, Duration::from_secs(20));
    common::fails_with(&out, 2, "--duration: '500000000000y' is out of range");

    // The edge of the range is a time (the history has nothing then: exit 1, not a usage
    // error).
    let out = history(&["who", "--gpu", "0", "--at", "9999-12-31T23:59:59Z"]);
    no_panic_short(&out);
    common::fails_with(&out, 1, "no samples of GPU 0 at 9999-12-31T23:59:59Z");
}

/// A real recording of the double: a header and `n` sample lines.
fn record(sc: &ScenarioFile, n: u32) -> (PathBuf, Vec<String>) {
    let path = sc.dir.path().join("r.jsonl");
    let out = gpuwatch_cmd(sc)
        .args(["--interval", "100ms", "record", "--force", "--samples"])
        .arg(n.to_string())
        .arg(&path)
        .output()
        .expect("record runs");
    assert!(out.status.success(), "{}", common::stderr(&out));
    let text = std::fs::read_to_string(&path).expect("recording");
    (path, text.lines().map(str::to_owned).collect())
}

/// A sample line with its `taken_at` replaced.
fn with_time(line: &str, t: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(line).expect("sample");
    v["taken_at"] = serde_json::from_str(t).expect("number");
    serde_json::to_string(&v).expect("json")
}

fn write_lines(path: &Path, lines: &[String]) {
    std::fs::write(path, lines.join("\n") + "\n").expect("write recording");
}

fn replay_snapshot(sc: &ScenarioFile, path: &Path) -> Output {
    let mut cmd = gpuwatch_cmd(sc);
    cmd.args(["--speed", "0", "--replay"])
        .arg(path)
        .args(["snapshot", "--json"]);
    run_within(cmd, Duration::from_secs(30))
}

#[test]
fn a_recording_with_a_crafted_time_plays_without_the_bad_sample() {
    let sc = scenario();
    let (path, mut lines) = record(&sc, 2);
    let last = lines.last().cloned().expect("a sample");
    lines.push(with_time(&last, "1e300"));
    write_lines(&path, &lines);
    let out = replay_snapshot(&sc, &path);
    no_panic_short(&out);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let err = common::stderr(&out);
    assert!(
        err.contains(":4: sample skipped: taken_at: 1e300 is out of range: expected a time between 1970-01-01 and 9999-12-31"),
        "{err}"
    );
    let snap: serde_json::Value = serde_json::from_str(&common::stdout(&out)).expect("json");
    assert!(snap["taken_at_unix"].as_f64().unwrap() < 1e10, "{snap}");
}

#[test]
fn a_recording_with_a_clock_step_back_still_plays() {
    let sc = scenario();
    let (path, lines) = record(&sc, 4);
    // Lines 4 and 5 were taken an hour "earlier": NTP stepped the clock back.
    let mut stepped = lines[..3].to_vec();
    for line in &lines[3..] {
        let t: serde_json::Value = serde_json::from_str(line).expect("sample");
        let t = t["taken_at"].as_f64().expect("taken_at") - 3600.0;
        stepped.push(with_time(line, &t.to_string()));
    }
    write_lines(&path, &stepped);
    let out = replay_snapshot(&sc, &path);
    no_panic_short(&out);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let err = common::stderr(&out);
    assert!(
        err.contains(":4: the clock stepped back 3599.") && err.contains("played in file order"),
        "{err}"
    );
    assert_eq!(err.matches("stepped back").count(), 1, "warned once: {err}");
    // A crawl (`--speed 1e-300`): the wait to the next sample is capped, not an overflow in
    // the sampler thread.
    let mut cmd = gpuwatch_cmd(&sc);
    cmd.args(["--speed", "1e-300", "--replay"])
        .arg(&path)
        .args(["snapshot", "--json"]);
    let crawl = run_within(cmd, Duration::from_secs(30));
    no_panic_short(&crawl);
    assert!(crawl.status.success(), "{}", common::stderr(&crawl));

    let snap: serde_json::Value = serde_json::from_str(&common::stdout(&out)).expect("json");
    let first: serde_json::Value = serde_json::from_str(&stepped[1]).unwrap();
    assert_eq!(snap["taken_at_unix"], first["taken_at"]);

    // Played through (recording the replay): every sample, in file order, with the times as
    // recorded; paced playback waits about one interval at the step, not an hour and not
    // zero (four gaps of ~100 ms at speed 1).
    let again = sc.dir.path().join("again.jsonl");
    let started = Instant::now();
    let mut cmd = gpuwatch_cmd(&sc);
    cmd.args(["--replay"])
        .arg(&path)
        .args(["record", "--force"])
        .arg(&again);
    let out = run_within(cmd, Duration::from_secs(30));
    assert!(out.status.success(), "{}", common::stderr(&out));
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "{took:?}");
    let times = |lines: &[String]| -> Vec<serde_json::Value> {
        lines[1..]
            .iter()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["taken_at"].clone())
            .collect()
    };
    let again: Vec<String> = std::fs::read_to_string(&again)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(times(&again), times(&stepped));
}

#[test]
fn a_50_mib_line_gets_a_short_error_without_being_read_whole() {
    let sc = scenario();
    let (path, lines) = record(&sc, 1);
    // A value serde would quote in full: a 50 MiB string where a number belongs.
    let mut bytes = format!("{}\n{{\"taken_at\": \"", lines[0]).into_bytes();
    bytes.resize(bytes.len() + (50 << 20), b'y');
    bytes.extend_from_slice(b"\", \"gpus\": []}\n");
    std::fs::write(&path, &bytes).expect("write");
    let out = replay_snapshot(&sc, &path);
    no_panic_short(&out);
    common::fails_with(&out, 2, ":2: line longer than 16 MiB: expected a sample");

    // Under the cap (1 MiB): the JSON error quotes a little of the line.
    let mut bytes = format!("{}\n{{\"taken_at\": \"", lines[0]).into_bytes();
    bytes.resize(bytes.len() + (1 << 20), b'y');
    bytes.extend_from_slice(b"\", \"gpus\": []}\n");
    std::fs::write(&path, &bytes).expect("write");
    let out = replay_snapshot(&sc, &path);
    no_panic_short(&out);
    common::fails_with(&out, 2, "bytes in all)");

    // A config file with a long line: refused or quoted short.
    let config = sc.dir.path().join("big.toml");
    let mut text = String::from("[sampling]\ninterval = \"");
    text.push_str(&"9".repeat(900_000));
    text.push_str("\"\n");
    std::fs::write(&config, &text).expect("write");
    let mut cmd = gpuwatch_cmd(&sc);
    cmd.arg("--config").arg(&config).arg("snapshot");
    let out = run_within(cmd, Duration::from_secs(20));
    no_panic_short(&out);
    common::fails_with(&out, 2, "sampling.interval");
    let mut text = String::from("[sampling]\n");
    text.push_str(&"k".repeat(900_000));
    text.push_str(" = 1\n");
    std::fs::write(&config, &text).expect("write");
    let mut cmd = gpuwatch_cmd(&sc);
    cmd.arg("--config").arg(&config).arg("snapshot");
    let out = run_within(cmd, Duration::from_secs(20));
    no_panic_short(&out);
    common::fails_with(&out, 2, "unknown key");

    // A scenario with a long line: TOML's message quotes the line; shortened.
    let bad = sc.dir.path().join("bad.toml");
    let mut text = String::from("[[gpu]]\nmemory_total = \"");
    text.push_str(&"8".repeat(900_000));
    text.push_str(" bananas\"\n");
    std::fs::write(&bad, &text).expect("write");
    let mut cmd = gpuwatch_cmd(&sc);
    cmd.arg("--scenario").arg(&bad).arg("snapshot");
    let out = run_within(cmd, Duration::from_secs(20));
    no_panic_short(&out);
    common::fails_with(&out, 2, "invalid scenario");
}

#[test]
fn devices_and_fifos_where_a_file_belongs_are_refused_without_hanging() {
    let sc = scenario();
    let fifo = sc.dir.path().join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let limit = Duration::from_secs(20);
    let run = |args: &[&std::ffi::OsStr]| {
        let mut cmd = gpuwatch_cmd(&sc);
        cmd.args(args).arg("snapshot");
        let out = run_within(cmd, limit);
        no_panic_short(&out);
        out
    };
    let zero = std::ffi::OsStr::new("/dev/zero");
    let out = run(&["--config".as_ref(), zero]);
    common::fails_with(
        &out,
        2,
        "'/dev/zero': it is a character device (expected a regular file)",
    );
    let out = run(&["--config".as_ref(), fifo.as_os_str()]);
    common::fails_with(&out, 2, "it is a FIFO (expected a regular file)");
    let out = run(&["--scenario".as_ref(), zero]);
    common::fails_with(&out, 2, "it is a character device");
    let out = run(&["--scenario".as_ref(), fifo.as_os_str()]);
    common::fails_with(&out, 2, "it is a FIFO");
    // A recording may be a pipe (`--replay <(zcat r.gz)`), so it is streamed with a cap per
    // line: /dev/zero is one endless line, a FIFO without a writer is empty.
    let out = run(&["--replay".as_ref(), zero]);
    common::fails_with(&out, 2, "/dev/zero:1: line longer than 1 MiB");
    let out = run(&["--replay".as_ref(), fifo.as_os_str()]);
    common::fails_with(&out, 2, "empty file");
    // Too big a config file.
    let big = sc.dir.path().join("big.toml");
    std::fs::write(&big, "#".repeat(2 << 20)).expect("write");
    let out = run(&["--config".as_ref(), big.as_os_str()]);
    common::fails_with(&out, 2, "it is larger than 1 MiB");
}

/// A fake daemon: answers every connection with an event stream of one crafted frame, then
/// holds the connection open.
fn fake_daemon(frame: String) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { break };
            let frame = frame.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().expect("clone"));
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                    line.clear();
                }
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n\
                     event: frame\ndata: {frame}\n\n"
                );
                let _ = conn.flush();
                let mut sink = [0u8; 64];
                let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
                let _ = conn.read(&mut sink);
            });
        }
    });
    port
}

#[test]
fn tui_connect_survives_a_daemon_sending_crafted_times() {
    let sc = scenario();
    // A real frame, from the double, as the daemon would send it.
    let out = gpuwatch_cmd(&sc)
        .args(["snapshot", "--json"])
        .output()
        .expect("snapshot");
    assert!(out.status.success(), "{}", common::stderr(&out));
    let mut frame: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    frame["taken_at_unix"] = serde_json::json!(1e300);
    let port = fake_daemon(serde_json::to_string(&frame).expect("json"));
    let mut cmd = gpuwatch_cmd(&sc);
    cmd.args(["--hang-timeout", "2s", "tui", "--connect"])
        .arg(format!("127.0.0.1:{port}"));
    let out = run_within(cmd, Duration::from_secs(30));
    no_panic_short(&out);
    common::fails_with(
        &out,
        1,
        "the daemon sent a frame with a bad time: taken_at_unix: 1e300 is out of range",
    );

    // A frame with a megabyte where a number belongs: the error quotes a little of it.
    frame["taken_at_unix"] = serde_json::json!("x".repeat(1 << 20));
    let port = fake_daemon(serde_json::to_string(&frame).expect("json"));
    let mut cmd = gpuwatch_cmd(&sc);
    cmd.args(["--hang-timeout", "2s", "tui", "--connect"])
        .arg(format!("127.0.0.1:{port}"));
    let out = run_within(cmd, Duration::from_secs(30));
    no_panic_short(&out);
    common::fails_with(&out, 1, "cannot read");
}
