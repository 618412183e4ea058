//! The detector on the live path at the defaults: the daemon, 1 s interval, on the NVML double
//! (real nvml-wrapper calls), its findings read over HTTP. A sustained ramp opens filling-up
//! within 15 s of its start and names the process that ramps; a model load on another GPU
//! (steps of 6.5, 2, 1.2 and 6.6 GiB, then a plateau, as in the H200 trace) opens nothing.

mod common;

use std::time::{Duration, Instant};

use common::{Daemon, ScenarioFile, request};

/// The daemon's open findings (`/api/v1/findings`).
fn open_findings(port: u16) -> Vec<serde_json::Value> {
    let (status, body) = request(port, "/api/v1/findings", None);
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("json")
}

#[test]
fn a_ramp_opens_filling_up_at_1_hz_and_a_model_load_opens_nothing() {
    let sc = ScenarioFile::new(
        r#"
[[gpu]]
uuid = "GPU-ramp"
memory_total = "80GiB"
[[gpu.process]]
pid = 5000
used = { step = [[0, "0"], [2, "20GiB"]] }
[[gpu.process]]
pid = 5001
used = { linear = [[0, "1GiB"], [5, "1GiB"], [605, "61GiB"]] }

[[gpu]]
uuid = "GPU-load"
memory_total = "141GiB"
[[gpu.process]]
pid = 6000
used = { step = [[0, "0"], [1, "6.5GiB"]] }
[[gpu.process]]
pid = 6001
used = { step = [[0, "0"], [4, "2GiB"], [7, "3.2GiB"]] }
[[gpu.process]]
pid = 6002
used = { step = [[0, "0"], [10, "6.6GiB"]] }
"#,
    );
    let d = Daemon::start_at_defaults(&sc, &["--no-history"]);
    let started = Instant::now();
    let mut opened_at = None;
    // The ramp starts at t = 5 s of the double's clock (which starts when the daemon loads
    // it): open within 15 s of that, plus the daemon's start.
    while started.elapsed() < Duration::from_secs(30) {
        let findings = open_findings(d.port);
        for f in &findings {
            assert!(
                !(f["id"]["gpu"] == "GPU-load"
                    && ["filling-up", "leak-suspected"]
                        .contains(&f["id"]["rule"].as_str().unwrap_or(""))),
                "a model load opened {f}"
            );
        }
        if let Some(f) = findings
            .iter()
            .find(|f| f["id"]["rule"] == "filling-up" && f["id"]["gpu"] == "GPU-ramp")
        {
            let culprits: Vec<u64> = f["culprits"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|c| c["pid"].as_u64())
                .collect();
            assert_eq!(
                culprits,
                vec![5001],
                "the process that ramps, not the one that loaded: {f}"
            );
            assert_eq!(
                f["severity"], "warning",
                "a GPU 30 % used is not critical: {f}"
            );
            opened_at.get_or_insert(started.elapsed());
            if started.elapsed() >= Duration::from_secs(25) {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let at = opened_at.expect("filling-up opened on the ramping GPU");
    assert!(
        at <= Duration::from_secs(22),
        "opened {at:?} after the start (ramp from 5 s)"
    );
}

/// At the defaults, through the daemon's HTTP API: a job ramping 200 MiB/s that frees 2 GiB at
/// 30 s and goes on keeps its filling-up finding open through the free (it resolved and
/// opened again), and a process creeping 5 MiB/s beside it (a ramp by itself, 2 % of the
/// growth) is never named a culprit.
#[test]
fn a_partial_free_keeps_filling_up_open_and_a_creeping_process_is_not_a_culprit() {
    let sc = ScenarioFile::new(
        r#"
[[gpu]]
uuid = "GPU-saw"
memory_total = "80GiB"
[[gpu.process]]
pid = 7001
used = { linear = [[0, "1GiB"], [2, "1GiB"], [30, "6624MiB"], [30.2, "4576MiB"], [120, "22576MiB"]] }
[[gpu.process]]
pid = 7002
used = { linear = [[0, "10GiB"], [120, "10840MiB"]] }
"#,
    );
    let d = Daemon::start_at_defaults(&sc, &["--no-history"]);
    let started = Instant::now();
    let mut opened_at = None;
    let mut missing_after_open = Vec::new();
    while started.elapsed() < Duration::from_secs(42) {
        let findings = open_findings(d.port);
        let filling = findings.iter().find(|f| f["id"]["rule"] == "filling-up");
        match filling {
            Some(f) => {
                let culprits: Vec<u64> = f["culprits"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|c| c["pid"].as_u64())
                    .collect();
                assert_eq!(culprits, vec![7001], "only the fast one: {f}");
                opened_at.get_or_insert(started.elapsed());
            }
            None if opened_at.is_some() => missing_after_open.push(started.elapsed()),
            None => {}
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let at = opened_at.expect("filling-up opened on the ramp");
    assert!(
        at <= Duration::from_secs(22),
        "opened {at:?} after the start"
    );
    assert!(
        missing_after_open.is_empty(),
        "resolved at {missing_after_open:?} after opening at {at:?} (the free is at 30 s)"
    );
}

/// The demo's past is run through the daemon's analysis at start: its five stories are open
/// findings within seconds, and none of those that opened in the past reaches a sink.
#[test]
fn the_daemon_on_the_demo_has_its_stories_open_at_once_and_sends_none_of_the_past() {
    let sc = ScenarioFile::new("[[gpu]]\nmemory_total = \"80GiB\"\n");
    let sink = sc.dir.path().join("events.jsonl");
    let cfg = sc.dir.path().join("demo.toml");
    std::fs::write(
        &cfg,
        format!("[alerts]\nlog = false\njsonl = \"{}\"\n", sink.display()),
    )
    .expect("config");
    let cfg = cfg.display().to_string();
    let d = Daemon::start_with_global(&sc, &["--demo", "--config", &cfg], &["--no-history"]);
    let started = Instant::now();
    let rules = loop {
        let findings = open_findings(d.port);
        let rules: std::collections::BTreeSet<String> = findings
            .iter()
            .filter_map(|f| f["id"]["rule"].as_str().map(str::to_string))
            .collect();
        if rules.len() >= 5 || started.elapsed() > Duration::from_secs(10) {
            break rules;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "open within seconds: {:?}",
        started.elapsed()
    );
    for rule in [
        "near-capacity",
        "filling-up",
        "leak-suspected",
        "external-pressure",
        "idle-holder",
    ] {
        assert!(rules.contains(rule), "{rule} open at start: {rules:?}");
    }
    std::thread::sleep(Duration::from_secs(3));
    drop(d);
    let events = std::fs::read_to_string(&sink).unwrap_or_default();
    for line in events.lines() {
        let e: serde_json::Value = serde_json::from_str(line).expect("jsonl");
        let rule = e["finding"]["id"]["rule"].as_str().unwrap_or("");
        assert!(
            !(e["event"] == "opened" && ["leak-suspected", "idle-holder"].contains(&rule)),
            "an opening of the past reached the sink: {line}"
        );
    }
}
