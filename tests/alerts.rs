//! The alert sinks end to end: a JSON-lines file, a real `sh -c` command, and webhooks to a
//! small HTTP server on 127.0.0.1 that answers as each test scripts it (200, 500, or never).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use gpuwatch::alert::{AlertOptions, Alerts, JsonlSink, Sink, SinkStats, WebhookSink};
use gpuwatch::detect::{Finding, FindingEvent, FindingId, RuleKind, Severity};
use serde_json::Value;

fn finding(rule: RuleKind, pid: Option<u32>, severity: Severity, at: f64) -> Finding {
    Finding {
        id: FindingId {
            rule,
            gpu: "GPU-5f0e".into(),
            pid,
        },
        severity,
        gpu_index: Some(1),
        since: at - 60.0,
        at,
        summary: format!("{rule} summary at {at}"),
        time_to_full_s: Some(240.0),
        rate_bytes_per_s: Some(1.5e8),
        bytes: None,
        baseline_bytes: None,
        unattributed_bytes: None,
        culprits: Vec::new(),
        culprits_at: None,
    }
}

/// Options with no sink of their own (tests add theirs).
fn quiet() -> AlertOptions {
    AlertOptions {
        log: false,
        ..AlertOptions::default()
    }
}

fn stats_of<'a>(stats: &'a [SinkStats], name: &str) -> &'a SinkStats {
    stats.iter().find(|s| s.name == name).unwrap()
}

#[test]
fn jsonl_file_gets_one_object_per_event() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let alerts = Alerts::start(&AlertOptions {
        jsonl: Some(path.clone()),
        ..quiet()
    })
    .unwrap();
    alerts.send(&FindingEvent::Opened(finding(
        RuleKind::FillingUp,
        None,
        Severity::Critical,
        100.0,
    )));
    alerts.send(&FindingEvent::Updated(finding(
        RuleKind::FillingUp,
        None,
        Severity::Warning,
        110.0,
    )));
    alerts.send(&FindingEvent::Resolved(finding(
        RuleKind::FillingUp,
        None,
        Severity::Info,
        120.0,
    )));
    let stats = alerts.shutdown(Duration::from_secs(5));
    assert_eq!(stats_of(&stats, "jsonl").delivered, 3);

    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<_> = lines.iter().map(|l| l["event"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["opened", "updated", "resolved"]);
    for (line, at) in lines.iter().zip([100.0, 110.0, 120.0]) {
        assert!(line["at"].as_f64().unwrap() > 1.5e9, "{line}");
        let f: Finding = serde_json::from_value(line["finding"].clone()).unwrap();
        assert_eq!(f.id.rule, RuleKind::FillingUp);
        assert!((f.at - at).abs() < 1e-9, "{} != {at}", f.at);
    }
    assert!(text.ends_with('\n'));
}

#[test]
fn command_sink_runs_sh_with_finding_variables() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.txt");
    let command = format!(
        r#"echo "$GPUWATCH_RULE $GPUWATCH_PID" >> '{}'"#,
        out.display()
    );
    let alerts = Alerts::start(&AlertOptions {
        command: Some(command),
        ..quiet()
    })
    .unwrap();
    alerts.send(&FindingEvent::Opened(finding(
        RuleKind::LeakSuspected,
        Some(4242),
        Severity::Warning,
        1.0,
    )));
    alerts.send(&FindingEvent::Resolved(finding(
        RuleKind::LeakSuspected,
        Some(4242),
        Severity::Warning,
        2.0,
    )));
    let stats = alerts.shutdown(Duration::from_secs(10));
    assert_eq!(stats_of(&stats, "command").delivered, 2, "{stats:?}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(text, "leak-suspected 4242\nleak-suspected 4242\n");
}

/// One request the test server received.
struct Request {
    head: String,
    body: String,
}

/// How the server answers its n-th connection.
#[derive(Clone, Copy)]
enum Answer {
    Status(u16),
    Never,
}

/// An HTTP server on 127.0.0.1 answering one request per connection as `script` says (the
/// last answer repeats). Requests arrive on the returned channel.
fn server(script: Vec<Answer>) -> (String, mpsc::Receiver<Request>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hooks/gpu", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut held = Vec::new();
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(stream) = stream else { return };
            let answer = script[n.min(script.len() - 1)];
            let Some(request) = read_request(&stream) else {
                continue;
            };
            // Reported before answering, so the test has it once the client has its answer.
            if tx.send(request).is_err() {
                return;
            }
            match answer {
                Answer::Status(code) => {
                    let mut stream = stream;
                    let _ = write!(
                        stream,
                        "HTTP/1.1 {code} X\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                    );
                }
                // Keep the connection open and silent.
                Answer::Never => held.push(stream),
            }
        }
    });
    (url, rx)
}

fn read_request(stream: &TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
        head.push_str(&line);
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        head,
        body: String::from_utf8(body).ok()?,
    })
}

#[test]
fn webhook_posts_json_with_a_text_field() {
    let (url, requests) = server(vec![Answer::Status(200)]);
    let alerts = Alerts::start(&AlertOptions {
        webhook: Some(url),
        ..quiet()
    })
    .unwrap();
    alerts.send(&FindingEvent::Opened(finding(
        RuleKind::FillingUp,
        None,
        Severity::Critical,
        5.0,
    )));
    let stats = alerts.shutdown(Duration::from_secs(10));
    assert_eq!(stats_of(&stats, "webhook").delivered, 1, "{stats:?}");

    let request = requests.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(
        request.head.starts_with("POST /hooks/gpu HTTP/1.1\r\n"),
        "{}",
        request.head
    );
    assert!(
        request
            .head
            .to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{}",
        request.head
    );
    let body: Value = serde_json::from_str(&request.body).unwrap();
    let text = body["text"].as_str().unwrap();
    assert!(
        text.contains("[critical] filling-up opened on GPU 1: filling-up summary at 5"),
        "{text}"
    );
    assert_eq!(body["event"], "opened");
    assert_eq!(body["finding"]["id"]["rule"], "filling-up");
    assert_eq!(body["finding"]["id"]["gpu"], "GPU-5f0e");
}

fn webhook(url: &str, timeout: Duration, retries: u32) -> Box<dyn Sink> {
    Box::new(
        WebhookSink::new(url, timeout, retries)
            .unwrap()
            .with_backoff(Duration::from_millis(10)),
    )
}

#[test]
fn webhook_retries_after_a_server_error() {
    let (url, requests) = server(vec![Answer::Status(500), Answer::Status(200)]);
    let alerts =
        Alerts::with_sinks(vec![webhook(&url, Duration::from_secs(5), 3)], &quiet()).unwrap();
    alerts.send(&FindingEvent::Opened(finding(
        RuleKind::NearCapacity,
        None,
        Severity::Warning,
        5.0,
    )));
    let stats = alerts.shutdown(Duration::from_secs(10));
    assert_eq!((stats[0].delivered, stats[0].failed), (1, 0), "{stats:?}");
    let attempts: Vec<Request> = requests.try_iter().collect();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0].body, attempts[1].body);
}

#[test]
fn webhook_gives_up_after_its_retries() {
    let (url, requests) = server(vec![Answer::Status(500)]);
    let alerts =
        Alerts::with_sinks(vec![webhook(&url, Duration::from_secs(5), 2)], &quiet()).unwrap();
    alerts.send(&FindingEvent::Opened(finding(
        RuleKind::NearCapacity,
        None,
        Severity::Warning,
        5.0,
    )));
    let stats = alerts.shutdown(Duration::from_secs(10));
    assert_eq!((stats[0].delivered, stats[0].failed), (0, 1), "{stats:?}");
    let error = stats[0].last_error.as_deref().unwrap();
    assert!(
        error.contains("500") && error.contains("after 3 attempts"),
        "{error}"
    );
    assert_eq!(requests.try_iter().count(), 3);
}

/// Polls until `alerts` reports `delivered` events for sink `name`.
fn wait_delivered(alerts: &Alerts, name: &str, delivered: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while stats_of(&alerts.stats(), name).delivered < delivered {
        assert!(
            Instant::now() < deadline,
            "{name} never delivered {delivered}"
        );
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_silent_webhook_holds_up_nothing_but_itself() {
    let (url, requests) = server(vec![Answer::Never]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let sinks = vec![
        webhook(&url, Duration::from_millis(300), 0),
        Box::new(JsonlSink::new(&path).unwrap()) as Box<dyn Sink>,
    ];
    let alerts = Alerts::with_sinks(
        sinks,
        &AlertOptions {
            queue: 2,
            ..quiet()
        },
    )
    .unwrap();
    let event = |pid| {
        FindingEvent::Opened(finding(
            RuleKind::LeakSuspected,
            Some(pid),
            Severity::Critical,
            1.0,
        ))
    };

    // Event 1 reaches the server, which never answers: the webhook's thread is stuck.
    alerts.send(&event(1));
    requests.recv_timeout(Duration::from_secs(5)).unwrap();
    wait_delivered(&alerts, "jsonl", 1);
    // Events 2 and 3 wait in its queue; 4 to 6 find it full. JSONL keeps up meanwhile.
    for pid in 2..=6 {
        let begun = Instant::now();
        alerts.send(&event(pid));
        let took = begun.elapsed();
        assert!(took < Duration::from_millis(50), "send took {took:?}");
        wait_delivered(&alerts, "jsonl", u64::from(pid));
    }
    let stats = alerts.stats();
    assert_eq!(stats_of(&stats, "webhook").dropped, 3, "{stats:?}");
    assert_eq!(stats_of(&stats, "jsonl").dropped, 0, "{stats:?}");

    // The three queued attempts each time out after 300 ms, not the default 5 s.
    let begun = Instant::now();
    let stats = alerts.shutdown(Duration::from_secs(5));
    assert!(
        begun.elapsed() < Duration::from_secs(3),
        "{:?}",
        begun.elapsed()
    );
    let hook = stats_of(&stats, "webhook");
    assert_eq!(
        (hook.delivered, hook.failed, hook.dropped),
        (0, 3, 3),
        "{stats:?}"
    );
    let error = hook.last_error.as_deref().unwrap();
    assert!(
        error.contains("timeout") || error.contains("timed out"),
        "{error}"
    );
    assert_eq!(stats_of(&stats, "jsonl").delivered, 6);
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 6);
}
