//! End to end: `gpuwatch daemon --listen 127.0.0.1:0` on the NVML test double, read over plain
//! HTTP: `/metrics` (parsed), the JSON API, 404, bearer tokens, the refusal to listen on a
//! public address without a token, and the SSE stream.

// The text format carries these values exactly.
#![allow(clippy::float_cmp)]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{Daemon, ScenarioFile, Sleeper, gpuwatch_cmd, gpuwatch_on, request, stderr};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

fn scenario(keeper: u32, leaver: u32) -> String {
    format!(
        r#"
[[gpu]]
memory_total = "80GiB"
memory_reserved = "0"
util_gpu = 50
temperature = 61
power = 300
power_limit = 700
sm_clock = 1980
[[gpu.process]]
pid = {keeper}
used = "10GiB"
sm = 40
[[gpu.process]]
pid = {leaver}
used = "2GiB"
end = 6

[[gpu]]
memory_total = "80GiB"
faults.not_supported = ["power"]
"#
    )
}

impl Daemon {
    fn get(&self, path: &str) -> (u16, String) {
        request(self.port, path, None)
    }
}

/// One sample of the text format: name, labels, value.
type Series = (String, BTreeMap<String, String>, f64);

/// A small parser of the Prometheus/OpenMetrics text format (enough for these tests).
fn parse_metrics(text: &str) -> Vec<Series> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, rest) = match line.find(['{', ' ']) {
            Some(i) => line.split_at(i),
            None => panic!("bad line: {line}"),
        };
        let mut labels = BTreeMap::new();
        let value_text = if let Some(mut rest) = rest.strip_prefix('{') {
            loop {
                if let Some(r) = rest.strip_prefix('}') {
                    break r;
                }
                rest = rest.trim_start_matches(',');
                let (key, r) = rest.split_once("=\"").expect("label");
                let mut value = String::new();
                let mut chars = r.char_indices();
                let end = loop {
                    let (i, c) = chars.next().expect("closing quote");
                    match c {
                        '\\' => {
                            let (_, e) = chars.next().expect("escape");
                            value.push(if e == 'n' { '\n' } else { e });
                        }
                        '"' => break i,
                        c => value.push(c),
                    }
                };
                labels.insert(key.to_string(), value);
                rest = &r[end + 1..];
            }
        } else {
            rest
        };
        let value: f64 = value_text
            .split_whitespace()
            .next()
            .expect("value")
            .parse()
            .unwrap_or_else(|e| panic!("bad value in {line}: {e}"));
        out.push((name.to_string(), labels, value));
    }
    out
}

fn find<'a>(series: &'a [Series], name: &str, labels: &[(&str, &str)]) -> Option<&'a Series> {
    series.iter().find(|(n, l, _)| {
        n == name
            && labels
                .iter()
                .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
    })
}

fn value(series: &[Series], name: &str, labels: &[(&str, &str)]) -> f64 {
    find(series, name, labels)
        .unwrap_or_else(|| panic!("no {name}{labels:?}"))
        .2
}

fn wait_until(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(started.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn scrape(d: &Daemon) -> Vec<Series> {
    let (status, body) = d.get("/metrics");
    assert_eq!(status, 200, "{body}");
    parse_metrics(&body)
}

#[test]
fn metrics_follow_the_scenario() {
    let keeper = Sleeper::spawn();
    let leaver = Sleeper::spawn();
    let sc = ScenarioFile::new(&scenario(keeper.pid(), leaver.pid()));
    let d = Daemon::start(&sc, &[]);
    let leaver_pid = leaver.pid().to_string();
    let keeper_pid = keeper.pid().to_string();
    let mut m = Vec::new();
    wait_until("the GPU series", Duration::from_secs(10), || {
        m = scrape(&d);
        find(&m, "gpuwatch_gpu_info", &[("gpu", "0")]).is_some()
    });
    let g0 = [("gpu", "0")];
    let g1 = [("gpu", "1")];
    assert_eq!(value(&m, "gpuwatch_memory_total_bytes", &g0), 80.0 * GIB);
    assert_eq!(value(&m, "gpuwatch_utilization_ratio", &g0), 0.5);
    assert_eq!(value(&m, "gpuwatch_temperature_celsius", &g0), 61.0);
    assert_eq!(value(&m, "gpuwatch_power_usage_watts", &g0), 300.0);
    assert_eq!(value(&m, "gpuwatch_power_limit_watts", &g0), 700.0);
    assert_eq!(value(&m, "gpuwatch_sm_clock_hertz", &g0), 1.98e9);
    assert_eq!(value(&m, "gpuwatch_build_info", &[]), 1.0);
    let info = find(&m, "gpuwatch_gpu_info", &g0).expect("info");
    assert!(info.1["uuid"].starts_with("GPU-"), "{info:?}");
    assert_eq!(
        value(
            &m,
            "gpuwatch_process_memory_used_bytes",
            &[("gpu", "0"), ("pid", &keeper_pid), ("comm", "sleep")]
        ),
        10.0 * GIB
    );
    assert_eq!(
        value(
            &m,
            "gpuwatch_process_sm_utilization_ratio",
            &[("pid", &keeper_pid)]
        ),
        0.4
    );
    assert!(find(&m, "gpuwatch_process_info", &[("pid", &keeper_pid)]).is_some());
    // Unavailable is absent, never 0; the GPU's other series are there.
    assert!(
        find(&m, "gpuwatch_power_usage_watts", &g1).is_none(),
        "{m:?}"
    );
    assert!(find(&m, "gpuwatch_memory_used_bytes", &g1).is_some());
    // The process that exits loses its series.
    let leaver_series = |m: &[Series]| {
        m.iter()
            .any(|(_, l, _)| l.get("pid").map(String::as_str) == Some(leaver_pid.as_str()))
    };
    // (When startup was slow enough that it was already gone, it must stay gone.)
    if leaver_series(&m) {
        wait_until(
            "the exited process to disappear",
            Duration::from_secs(15),
            || !leaver_series(&scrape(&d)),
        );
    }
    let m = scrape(&d);
    assert!(!leaver_series(&m));
    assert!(
        find(
            &m,
            "gpuwatch_process_memory_used_bytes",
            &[("pid", &keeper_pid)]
        )
        .is_some()
    );
}

#[test]
fn api_endpoints_and_404() {
    let keeper = Sleeper::spawn();
    let leaver = Sleeper::spawn();
    let sc = ScenarioFile::new(&scenario(keeper.pid(), leaver.pid()));
    let d = Daemon::start(&sc, &[]);
    let mut snap = serde_json::Value::Null;
    wait_until("a snapshot", Duration::from_secs(10), || {
        let (status, body) = d.get("/api/v1/snapshot");
        if status == 200 {
            snap = serde_json::from_str(&body).expect("JSON");
        }
        status == 200
    });
    assert_eq!(snap["schema_version"], 1);
    assert_eq!(snap["gpus"].as_array().map(Vec::len), Some(2));
    assert_eq!(snap["gpus"][1]["power_watts"], serde_json::Value::Null);

    let (status, body) = d.get("/api/v1/health");
    assert_eq!(status, 200);
    let health: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(health["status"], "ok", "{health}");
    assert_eq!(health["source"], "live");
    assert!(health["age_seconds"].is_number());

    let (status, body) = d.get("/api/v1/findings");
    assert_eq!(status, 200);
    assert!(
        serde_json::from_str::<serde_json::Value>(&body)
            .expect("JSON")
            .is_array()
    );

    let (status, body) = d.get("/nope");
    assert_eq!(status, 404);
    let err: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert!(err["error"].is_string());
}

#[test]
fn a_token_is_required_except_for_health() {
    let keeper = Sleeper::spawn();
    let leaver = Sleeper::spawn();
    let sc = ScenarioFile::new(&scenario(keeper.pid(), leaver.pid()));
    let token_file = sc.dir.path().join("token");
    std::fs::write(&token_file, "s3cret\n").expect("token");
    let d = Daemon::start(&sc, &["--token-file", token_file.to_str().expect("utf-8")]);
    for path in ["/metrics", "/api/v1/snapshot", "/api/v1/findings", "/nope"] {
        let (status, body) = request(d.port, path, None);
        assert_eq!(status, 401, "{path}: {body}");
        assert!(body.contains("\"error\""), "{body}");
        let (status, _) = request(d.port, path, Some("wrong"));
        assert_eq!(status, 401, "{path}");
    }
    let (status, _) = request(d.port, "/metrics", Some("s3cret"));
    assert_eq!(status, 200);
    let (status, _) = request(d.port, "/nope", Some("s3cret"));
    assert_eq!(status, 404);
    let (status, _) = request(d.port, "/api/v1/health", None);
    assert_eq!(status, 200);
}

#[test]
fn refuses_a_public_address_without_a_token() {
    let sc = ScenarioFile::new("[[gpu]]\nmemory_total = \"80GiB\"\n");
    let o = gpuwatch_on(&sc, &["daemon", "--listen", "0.0.0.0:0"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("refusing to listen on 0.0.0.0:0"), "{err}");
    assert!(err.contains("--token-file"), "{err}");
}

#[test]
fn sse_clients_receive_frames() {
    let keeper = Sleeper::spawn();
    let leaver = Sleeper::spawn();
    let sc = ScenarioFile::new(&scenario(keeper.pid(), leaver.pid()));
    let d = Daemon::start(&sc, &[]);
    let mut s = TcpStream::connect(("127.0.0.1", d.port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "GET /api/v1/events HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n"
    )
    .expect("write");
    let mut reader = BufReader::new(s);
    let mut saw_event = false;
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "no frame event"
        );
        let mut line = String::new();
        assert!(reader.read_line(&mut line).expect("read") > 0, "closed");
        if line.starts_with("HTTP/1.1 ") {
            assert!(line.contains(" 200 "), "{line}");
        }
        if line.trim_end() == "event: frame" {
            saw_event = true;
        } else if saw_event && let Some(data) = line.strip_prefix("data: ") {
            let v: serde_json::Value = serde_json::from_str(data.trim_end()).expect("JSON");
            assert_eq!(v["schema_version"], 1);
            assert_eq!(v["gpus"].as_array().map(Vec::len), Some(2));
            break;
        }
    }
}

#[test]
fn the_daemon_section_is_read_and_checked() {
    let sc = ScenarioFile::new("[[gpu]]\nmemory_total = \"80GiB\"\n");
    let cfg = sc.dir.path().join("config.toml");
    std::fs::write(&cfg, "[daemon]\nlisten = \"0.0.0.0:0\"\n").expect("config");
    let o = gpuwatch_on(&sc, &["--config", cfg.to_str().expect("utf-8"), "daemon"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("refusing to listen on 0.0.0.0:0"), "{err}");

    std::fs::write(&cfg, "[daemon]\nlisten = \"localhost\"\n").expect("config");
    let o = gpuwatch_on(&sc, &["--config", cfg.to_str().expect("utf-8"), "daemon"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("daemon.listen") && err.contains("not an address"),
        "{err}"
    );

    // A token file named in the config (relative to it) lifts the refusal.
    std::fs::write(sc.dir.path().join("token"), "t0ken").expect("token");
    std::fs::write(
        &cfg,
        "[daemon]\nlisten = \"0.0.0.0:0\"\ntoken-file = \"token\"\nmetrics-top-n = 3\n",
    )
    .expect("config");
    let o = gpuwatch_on(
        &sc,
        &["--config", cfg.to_str().expect("utf-8"), "print-config"],
    );
    let text = common::stdout(&o);
    assert!(text.contains("metrics-top-n = 3"), "{text}");
    assert!(text.contains("listen = \"0.0.0.0:0\""), "{text}");
}

#[test]
fn sse_clients_receive_findings() {
    let job = Sleeper::spawn();
    // ~1 GiB/s into an 80 GiB GPU: filling-up opens within seconds.
    let sc = ScenarioFile::new(&format!(
        r#"
[[gpu]]
memory_total = "80GiB"
memory_reserved = "0"
[[gpu.process]]
pid = {}
used = {{ linear = [[0, "2GiB"], [75, "78GiB"]] }}
sm = 90
"#,
        job.pid()
    ));
    let cfg = sc.dir.path().join("config.toml");
    std::fs::write(&cfg, "[detect]\nfilling-window = \"5s\"\n").expect("config");
    let mut child = gpuwatch_cmd(&sc)
        .args(["--config", cfg.to_str().expect("utf-8")])
        .args(["--interval", "200ms", "daemon", "--listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("daemon starts");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let port: u16 = loop {
        let line = lines.next().expect("a bound address").expect("stderr");
        if let Some(rest) = line.split("listening on http://127.0.0.1:").nth(1) {
            break rest
                .chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse()
                .expect("port");
        }
    };
    std::thread::spawn(move || lines.for_each(drop));
    let d = Daemon {
        child,
        port,
        log: std::sync::Arc::default(),
    };
    let mut s = TcpStream::connect(("127.0.0.1", d.port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    write!(s, "GET /api/v1/events HTTP/1.1\r\nHost: localhost\r\n\r\n").expect("write");
    let mut reader = BufReader::new(s);
    let mut in_finding = false;
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no finding event"
        );
        let mut line = String::new();
        assert!(reader.read_line(&mut line).expect("read") > 0, "closed");
        if line.trim_end() == "event: finding" {
            in_finding = true;
        } else if in_finding && let Some(data) = line.strip_prefix("data: ") {
            let v: serde_json::Value = serde_json::from_str(data.trim_end()).expect("JSON");
            if v["finding"]["id"]["rule"] == "filling-up" {
                assert_eq!(v["event"], "opened", "{v}");
                break;
            }
            in_finding = false;
        }
    }
    let (status, body) = d.get("/api/v1/findings");
    assert_eq!(status, 200);
    assert!(body.contains("filling-up"), "{body}");
    let (_, metrics) = d.get("/metrics");
    assert!(
        metrics.contains("gpuwatch_alert_active{rule=\"filling-up\",gpu=\"0\""),
        "{metrics}"
    );
    assert!(metrics.contains("gpuwatch_memory_growth_bytes_per_second{"));
    assert!(metrics.contains("gpuwatch_memory_time_to_full_seconds{"));
}

/// Token files that used to be accepted wrongly or hang the start are refused with an error
/// naming the file: a second line (which locked every client out), a FIFO (which blocked the
/// start forever), anything that is not one printable token.
#[test]
fn bad_token_files_are_refused_at_start() {
    let sc = ScenarioFile::new("[[gpu]]\nmemory_total = \"80GiB\"\n");
    let file = sc.dir.path().join("token");
    let arg = file.to_str().expect("utf-8").to_string();
    for (text, needle) in [
        ("s3cret\nother\n", "holds more than one line"),
        ("s3 cret\n", "inside the token"),
        ("\n", "is empty"),
    ] {
        std::fs::write(&file, text).expect("token");
        let o = gpuwatch_on(
            &sc,
            &["daemon", "--listen", "127.0.0.1:0", "--token-file", &arg],
        );
        common::fails_with(&o, 2, needle);
        assert!(stderr(&o).contains(&arg), "{}", stderr(&o));
    }
    std::fs::remove_file(&file).expect("rm");
    let status = std::process::Command::new("mkfifo")
        .arg(&file)
        .status()
        .expect("mkfifo runs");
    assert!(status.success());
    let mut child = gpuwatch_cmd(&sc)
        .args(["daemon", "--listen", "127.0.0.1:0", "--token-file", &arg])
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a FIFO as the token file blocked the start");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = child.wait_with_output().expect("output");
    common::fails_with(&o, 2, "it is a FIFO (expected a regular file)");
    assert!(stderr(&o).contains(&arg), "{}", stderr(&o));
}

/// `authorization: bearer X` (lower case, as curl and some proxies send it) is accepted: the
/// scheme is case-insensitive (RFC 7235).
#[test]
fn the_bearer_scheme_is_case_insensitive() {
    let sc = ScenarioFile::new("[[gpu]]\nmemory_total = \"80GiB\"\n");
    let token_file = sc.dir.path().join("token");
    std::fs::write(&token_file, "s3cret\n").expect("token");
    let d = Daemon::start(&sc, &["--token-file", token_file.to_str().expect("utf-8")]);
    for header in [
        "authorization: bearer s3cret",
        "AUTHORIZATION: BEARER s3cret",
        "Authorization: Bearer  s3cret",
    ] {
        let mut s = TcpStream::connect(("127.0.0.1", d.port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        write!(
            s,
            "GET /api/v1/findings HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{header}\r\n\r\n"
        )
        .expect("write");
        let mut text = String::new();
        std::io::Read::read_to_string(&mut s, &mut text).expect("read");
        assert!(text.starts_with("HTTP/1.1 200"), "{header}: {text}");
    }
    let (status, _) = request(d.port, "/api/v1/findings", Some("s3cretX"));
    assert_eq!(status, 401);
}
