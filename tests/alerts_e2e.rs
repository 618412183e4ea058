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

/// A webhook receiver that answers 200 and keeps the bodies: its URL and the bodies.
fn receiver() -> (String, Arc<Mutex<Vec<String>>>) {
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
    (url, bodies)
}

#[test]
fn filling_up_reaches_the_webhook_the_command_and_the_jsonl_file() {
    let job = Sleeper::spawn();
    let sc = ScenarioFile::new(&ramp_scenario(job.pid()));
    let (url, bodies) = receiver();
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

/// Issue 11, item 3: a process named `<!channel>&<@U123>` (with a terminal escape after it)
/// that a finding names. The webhook's `text` is escaped for Slack/Mattermost and shows the
/// escape as text, the structured fields keep the exact name; the log line and the command's
/// `GPUWATCH_SUMMARY` show it escaped, one line each.
#[test]
fn a_process_named_like_a_slack_mention_pings_nobody() {
    const ARGV0: &str = "<!channel>&<@U123>\x1b]0;t\x07";
    let job = common::Hostile::spawn(ARGV0);
    let sc = ScenarioFile::new(&ramp_scenario(job.pid()));
    let (url, bodies) = receiver();
    let cfg = sc.dir.path().join("config.toml");
    let summaries = sc.dir.path().join("summaries.log");
    std::fs::write(
        &cfg,
        format!(
            r#"
[detect]
filling-window = "5s"
[alerts]
log = true
command = "printf '%s\\n' \"$GPUWATCH_SUMMARY\" >> {summaries}"
webhook = "{url}"
webhook-timeout = "2s"
webhook-retries = 0
"#,
            summaries = summaries.display()
        ),
    )
    .expect("config");
    let daemon = start_daemon(&sc, &cfg);
    let found = |bodies: &[String]| -> Option<serde_json::Value> {
        bodies
            .iter()
            .filter_map(|b| serde_json::from_str::<serde_json::Value>(b).ok())
            .find(|j| j["finding"]["id"]["rule"] == "filling-up")
    };
    wait_until("the webhook", Duration::from_secs(30), || {
        found(&bodies.lock().expect("lock")).is_some()
    });
    let json = found(&bodies.lock().expect("lock")).expect("a filling-up event");
    let text = json["text"].as_str().expect("a text field");
    assert!(
        text.contains("&lt;!channel&gt;&amp;&lt;@U123&gt;\\e]0;t\\x07"),
        "the text, escaped for Slack: {text}"
    );
    assert!(
        !text.contains(['<', '>', '\x1b', '\x07', '\n']),
        "nothing Slack or a terminal acts on: {text}"
    );
    // The structured fields are the raw facts.
    let finding = &json["finding"];
    assert_eq!(finding["culprits"][0]["command"], format!("{ARGV0} 900"));
    assert!(
        finding["summary"]
            .as_str()
            .is_some_and(|s| s.contains(ARGV0)),
        "{finding}"
    );
    wait_until("the command sink", Duration::from_secs(10), || {
        std::fs::read_to_string(&summaries).is_ok_and(|s| !s.is_empty())
    });
    let from_command = std::fs::read_to_string(&summaries).expect("summaries");
    assert!(
        from_command.contains("<!channel>&<@U123>\\e]0;t\\x07"),
        "GPUWATCH_SUMMARY: {from_command}"
    );
    assert!(
        common::steering_chars(&from_command).is_empty(),
        "{from_command:?}"
    );
    let log = stop(daemon);
    let line = log
        .lines()
        .find(|l| l.contains("filling-up opened"))
        .unwrap_or_else(|| panic!("no log line: {log}"));
    assert!(line.contains("<!channel>&<@U123>\\e]0;t\\x07"), "{line}");
    assert!(
        common::steering_chars(&log).is_empty(),
        "the daemon's log: {log:?}"
    );
}
