//! The daemon records the local history while it runs; `gpuwatch history who` answers from it.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{ScenarioFile, Sleeper, gpuwatch_bin, gpuwatch_cmd};

#[test]
fn the_daemon_records_history_that_history_who_reads() {
    let job = Sleeper::spawn();
    let sc = ScenarioFile::new(&format!(
        "[[gpu]]\nmemory_total = \"80GiB\"\n[[gpu.process]]\npid = {}\nused = \"12GiB\"\nsm = 50\n",
        job.pid()
    ));
    let db = sc.dir.path().join("history.sqlite");
    let mut daemon = gpuwatch_cmd(&sc)
        .args([
            "--interval",
            "200ms",
            "daemon",
            "--listen",
            "127.0.0.1:0",
            "--history",
        ])
        .arg(&db)
        .stderr(Stdio::piped())
        .spawn()
        .expect("daemon starts");
    std::thread::sleep(Duration::from_secs(2));
    let started = Instant::now();
    Command::new("kill")
        .args(["-TERM", &daemon.id().to_string()])
        .status()
        .expect("kill");
    let status = daemon.wait().expect("exits");
    let mut err = String::new();
    daemon
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("read");
    assert!(status.success(), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(err.contains("recording history in"), "{err}");
    let out = Command::new(gpuwatch_bin())
        .args([
            "history",
            "who",
            "--gpu",
            "0",
            "--at",
            "now",
            "--json",
            "--history",
        ])
        .arg(&db)
        .output()
        .expect("history runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}{}",
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains(&job.pid().to_string()), "{text}");
    assert!(
        text.contains(&(12u64 << 30).to_string()),
        "the recorded memory: {text}"
    );
}

/// A GET with ureq that returns any status with its body.
fn get(port: u16, path: &str) -> (u16, serde_json::Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let mut resp = agent
        .get(format!("http://127.0.0.1:{port}{path}"))
        .call()
        .expect("the daemon answers");
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().expect("a body");
    let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (status, json)
}

#[test]
fn the_history_endpoint_answers_from_the_recorded_history_and_checks_its_input() {
    let job = Sleeper::spawn();
    let sc = ScenarioFile::new(&format!(
        "[[gpu]]\nmemory_total = \"80GiB\"\n[[gpu.process]]\npid = {}\nused = \"12GiB\"\n\
         [[gpu]]\nmemory_total = \"40GiB\"\n",
        job.pid()
    ));
    let db = sc.dir.path().join("history.sqlite");
    let db_arg = db.to_string_lossy().into_owned();
    let daemon = common::Daemon::start(&sc, &["--history", &db_arg]);
    // Wait until a few samples are in.
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        let (status, body) = get(daemon.port, "/api/v1/history?since=1m&step=1s");
        assert_eq!(status, 200, "{body}");
        let points = body["series"][0]["points"].as_array().map_or(0, Vec::len);
        if points >= 3 {
            break body;
        }
        assert!(Instant::now() < deadline, "no history after 20 s: {body}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let series = body["series"].as_array().expect("series");
    assert_eq!(series.len(), 2, "one series per GPU: {body}");
    assert_eq!(series[0]["gpu_index"], 0);
    assert_eq!(series[1]["gpu_index"], 1);
    assert!(series[0]["gpu_uuid"].as_str().unwrap().starts_with("GPU-"));
    let p = &series[0]["points"][0];
    assert_eq!(p["total"], 80u64 << 30);
    assert_eq!(p["used_max"], 12u64 << 30, "{p}");
    assert!(p["samples"].as_u64().unwrap() >= 1);
    assert_eq!(body["step"], 1.0);

    // One process: its series carries its PID and command, on GPU 0 only.
    let (status, body) = get(
        daemon.port,
        &format!("/api/v1/history?pid={}&since=1m&step=10s", job.pid()),
    );
    assert_eq!(status, 200, "{body}");
    let series = body["series"].as_array().expect("series");
    assert_eq!(series.len(), 1, "{body}");
    assert_eq!(series[0]["pid"], job.pid());
    assert_eq!(series[0]["gpu_index"], 0);
    assert_eq!(series[0]["points"][0]["used_min"], 12u64 << 30);
    assert!(series[0]["points"][0].get("total").is_none());

    // One GPU by index; a GPU nobody has is an empty list, not an error.
    let (_, body) = get(daemon.port, "/api/v1/history?gpu=1&since=1m");
    assert_eq!(body["series"].as_array().unwrap().len(), 1);
    assert_eq!(body["series"][0]["points"][0]["total"], 40u64 << 30);
    let (status, body) = get(daemon.port, "/api/v1/history?gpu=7&since=1m");
    assert_eq!((status, body["series"].as_array().unwrap().len()), (200, 0));

    // Bad input: 400 with a JSON error naming the parameter; unbounded ranges refused.
    for (query, needle) in [
        ("pid=-3", "'pid'"),
        ("since=tomorrowish", "'since'"),
        ("step=0", "'step'"),
        ("since=30d&step=1s", "more than 11000"),
        ("since=400d", "longer than"),
        ("until=1h%20ago&since=10m", "not before"),
        ("frobnicate=1", "unknown parameter"),
    ] {
        let (status, body) = get(daemon.port, &format!("/api/v1/history?{query}"));
        assert_eq!(status, 400, "{query}: {body}");
        let msg = body["error"].as_str().expect("a JSON error");
        assert!(msg.contains(needle), "{query}: {msg}");
    }
}

#[test]
fn without_history_the_endpoint_says_why() {
    let sc = ScenarioFile::new("[[gpu]]\nmemory_total = \"80GiB\"\n");
    let daemon = common::Daemon::start(&sc, &["--no-history"]);
    let (status, body) = get(daemon.port, "/api/v1/history");
    assert_eq!(status, 404, "{body}");
    assert!(body["error"].as_str().unwrap().contains("--no-history"));
}
