//! End to end: `gpuwatch daemon` on the NVML test double sees a real process's memory ramp,
//! the detector raises filling-up, the webhook sink delivers it to a local HTTP server, the
//! command sink runs, the JSONL sink writes — and nothing blocks when the webhook server hangs.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{ScenarioFile, Sleeper, gpuwatch_cmd};

/// A GPU whose memory a real process fills at ~1 GiB/s: full in about a minute.
fn ramp_scenario(pid: u32) -> String {
    format!(
        r#"
[[gpu]]
memory_total = "80GiB"
memory_reserved = "0"
[[gpu.process]]
pid = {pid}
used = {{ linear = [[0, "2GiB"], [75, "78GiB"]] }}
sm = 90
"#
    )
}

fn config(dir: &std::path::Path, webhook: &str) -> std::path::PathBuf {
    let path = dir.join("config.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[detect]
filling-window = "5s"
[alerts]
log = true
jsonl = "{jsonl}"
command = "echo \"$GPUWATCH_EVENT $GPUWATCH_RULE $GPUWATCH_PID\" >> {cmdlog}"
webhook = "{webhook}"
webhook-timeout = "500ms"
webhook-retries = 0
queue = 2
"#,
            jsonl = dir.join("events.jsonl").display(),
            cmdlog = dir.join("command.log").display(),
        ),
    )
    .expect("config");
    path
}

fn start_daemon(sc: &ScenarioFile, cfg: &std::path::Path) -> Child {
    gpuwatch_cmd(sc)
        .args([
            "--config",
            cfg.to_str().expect("utf-8"),
            "--interval",
            "200ms",
            "daemon",
            "--listen",
            "127.0.0.1:0",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .expect("daemon starts")
}

fn wait_until(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(started.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn stop(mut daemon: Child) -> String {
    let pid = daemon.id().to_string();
    let started = Instant::now();
    Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    let status = daemon.wait().expect("exits");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stopped promptly on SIGTERM"
    );
    let mut err = String::new();
    daemon
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("read");
    assert!(status.success(), "exit status {status:?}: {err}");
    err
}

#[test]
fn filling_up_reaches_the_webhook_the_command_and_the_jsonl_file() {
    let job = Sleeper::spawn();
    let sc = ScenarioFile::new(&ramp_scenario(job.pid()));
    // A webhook receiver that answers 200 and keeps the bodies.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    let bodies: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = Arc::clone(&bodies);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            seen.lock()
                .expect("lock")
                .push(String::from_utf8_lossy(&body).into_owned());
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
        }
    });
    let cfg = config(sc.dir.path(), &url);
    let daemon = start_daemon(&sc, &cfg);
    wait_until("the webhook", Duration::from_secs(30), || {
        bodies
            .lock()
            .expect("lock")
            .iter()
            .any(|b| b.contains("filling-up"))
    });
    let body = bodies
        .lock()
        .expect("lock")
        .iter()
        .find(|b| b.contains("filling-up"))
        .cloned()
        .expect("body");
    let json: serde_json::Value = serde_json::from_str(&body).expect("JSON body");
    assert_eq!(json["event"], "opened");
    assert!(
        json["text"].as_str().unwrap_or("").contains("will be full"),
        "{json}"
    );
    assert_eq!(json["finding"]["culprits"][0]["pid"], job.pid());
    let cmdlog = sc.dir.path().join("command.log");
    wait_until("the command", Duration::from_secs(10), || {
        std::fs::read_to_string(&cmdlog).is_ok_and(|s| s.contains("opened filling-up"))
    });
    let jsonl = std::fs::read_to_string(sc.dir.path().join("events.jsonl")).expect("jsonl");
    assert!(
        jsonl.lines().any(|l| l.contains("\"filling-up\"")),
        "{jsonl}"
    );
    let log = stop(daemon);
    assert!(
        log.contains("filling-up opened on GPU 0"),
        "the log line on stderr: {log}"
    );
    assert!(log.contains("daemon stopped"), "{log}");
}

#[test]
fn a_hanging_webhook_blocks_nothing() {
    let job = Sleeper::spawn();
    let sc = ScenarioFile::new(&ramp_scenario(job.pid()));
    // Accepts connections and never answers.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    let cfg = config(sc.dir.path(), &url);
    let daemon = start_daemon(&sc, &cfg);
    // The other sinks deliver while the webhook hangs.
    let jsonl = sc.dir.path().join("events.jsonl");
    wait_until("the JSONL sink", Duration::from_secs(30), || {
        std::fs::read_to_string(&jsonl).is_ok_and(|s| s.contains("\"filling-up\""))
    });
    let cmdlog = sc.dir.path().join("command.log");
    wait_until("the command sink", Duration::from_secs(10), || {
        std::fs::read_to_string(&cmdlog).is_ok_and(|s| s.contains("filling-up"))
    });
    // The daemon still answers SIGTERM promptly and reports the webhook's failures.
    let log = stop(daemon);
    assert!(log.contains("sink webhook"), "{log}");
    assert!(
        log.contains("filling-up opened"),
        "the log sink was not blocked: {log}"
    );
}
