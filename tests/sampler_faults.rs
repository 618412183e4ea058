//! Faults the live sampler meets, through the real daemon on the NVML test double: a call that
//! hangs on one GPU, GPUs lost and re-initialised, a driver hung before the first sample, a
//! process list the driver does not support, GPUs added or removed while running.

mod common;

use std::time::{Duration, Instant};

use common::{Daemon, ScenarioFile, request};

fn wait_until(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn snapshot(d: &Daemon) -> Option<serde_json::Value> {
    let (status, body) = request(d.port, "/api/v1/snapshot", None);
    (status == 200).then(|| serde_json::from_str(&body).expect("snapshot JSON"))
}

fn metrics(d: &Daemon) -> String {
    let (status, body) = request(d.port, "/metrics", None);
    assert_eq!(status, 200, "{body}");
    body
}

/// `"GPU 1: memory_info (NoAnswer…)"` for each GPU error of a snapshot.
fn gpu_errors(snap: &serde_json::Value, gpu: usize) -> Vec<String> {
    snap["gpus"][gpu]["errors"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| format!("{} {}", e["call"], e["error"]))
                .collect()
        })
        .unwrap_or_default()
}

/// Item 10: a call that takes 20 s on GPU 1 must not stop GPU 0 from being sampled at its
/// cadence; GPU 1 is shown with the call it is stuck in.
#[test]
fn a_hung_call_on_one_gpu_does_not_stall_the_others() {
    let sc = ScenarioFile::new(
        r#"
[[gpu]]
memory_total = "80GiB"
base_used = { linear = [[0, "1GiB"], [100, "81GiB"]] }

[[gpu]]
memory_total = "80GiB"
faults.slow = [{ call = "memory", ms = 20000, from = 1.5 }]
"#,
    );
    let d = Daemon::start(&sc, &[]);
    // GPU 1's first memory call after t = 1.5 s hangs for 20 s.
    std::thread::sleep(Duration::from_secs(3));
    let first = snapshot(&d).expect("a snapshot");
    std::thread::sleep(Duration::from_millis(1500));
    let second = snapshot(&d).expect("a snapshot");
    let taken = |s: &serde_json::Value| s["taken_at_unix"].as_f64().expect("taken_at_unix");
    let used = |s: &serde_json::Value| s["gpus"][0]["memory"]["used_bytes"].as_u64();
    assert!(
        taken(&second) - taken(&first) >= 1.0,
        "GPU 0 is still sampled at the cadence: {} then {}",
        taken(&first),
        taken(&second)
    );
    assert!(
        second["age_seconds"].as_f64().expect("age") < 1.5,
        "fresh: {second}"
    );
    assert_eq!(second["stale"], false);
    assert!(
        used(&second) > used(&first),
        "GPU 0's memory follows the scenario"
    );
    assert_eq!(second["gpus"].as_array().map(Vec::len), Some(2));
    let errors = gpu_errors(&second, 1);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("memory_info") && e.contains("NoAnswer")),
        "GPU 1 is shown stuck in its call: {errors:?}"
    );
    assert!(second["gpus"][1]["memory"].is_null());
    assert!(gpu_errors(&second, 0).is_empty());
}

/// `(event, gpu uuid, gpu index)` of each source-health event in an alerts JSONL file.
fn source_events(jsonl: &std::path::Path) -> Vec<(String, String, Option<u64>)> {
    std::fs::read_to_string(jsonl)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a JSON line"))
        .filter(|e| e["finding"]["id"]["rule"] == "source-health")
        .map(|e| {
            (
                e["event"].as_str().unwrap_or_default().to_string(),
                e["finding"]["id"]["gpu"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                e["finding"]["gpu_index"].as_u64(),
            )
        })
        .collect()
}

fn label<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split(&format!("{name}=\"")).nth(1)?.split('"').next()
}

/// The `uuid` label of every `gpuwatch_gpu_info` series, in GPU index order (one entry per
/// series: a duplicate index would show as a second entry).
fn info_uuids(metrics: &str) -> Vec<String> {
    let mut out: Vec<(u32, String)> = metrics
        .lines()
        .filter(|l| l.starts_with("gpuwatch_gpu_info{"))
        .filter_map(|l| {
            Some((
                label(l, "gpu")?.parse().ok()?,
                label(l, "uuid")?.to_string(),
            ))
        })
        .collect();
    out.sort();
    out.into_iter().map(|(_, u)| u).collect()
}

/// Item 6: two GPUs lost (one comes back) keep their identities across the re-initialisations
/// the loss triggers: distinct `uuid` labels, one "opened" per GPU and a "resolved" only for the
/// one that came back, both GPUs' rows in the history.
#[test]
fn lost_gpus_keep_their_identity_across_reinitialisation() {
    let sc = ScenarioFile::new(
        r#"
[[gpu]]
memory_total = "80GiB"
[[gpu]]
memory_total = "80GiB"
base_used = "5GiB"
lost_at = 2
[[gpu]]
memory_total = "80GiB"
base_used = "7GiB"
lost_at = 2
lost_until = 7
"#,
    );
    let jsonl = sc.dir.path().join("events.jsonl");
    let config = sc.dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!("[alerts]\njsonl = \"{}\"\n", jsonl.display()),
    )
    .expect("config");
    let db = sc.dir.path().join("history.sqlite");
    let d = Daemon::start(
        &sc,
        &[
            "--history",
            db.to_str().expect("utf-8"),
            "--config",
            config.to_str().expect("utf-8"),
        ],
    );
    let uuids = |m: &str| info_uuids(m);
    wait_until("three GPUs", Duration::from_secs(10), || {
        uuids(&metrics(&d)).len() == 3
    });
    let before = uuids(&metrics(&d));
    assert!(before.iter().all(|u| u.starts_with("GPU-")), "{before:?}");
    // Lost from t = 2; re-initialised at about t = 3 and 5 (the backoff doubles); GPU 2 back at
    // t = 7.
    let lost = |m: &str, gpu: &str| {
        m.lines().any(|l| {
            l.starts_with("gpuwatch_alert_active{") && l.contains(&format!("gpu=\"{gpu}\""))
        })
    };
    wait_until("both GPUs lost", Duration::from_secs(10), || {
        let m = metrics(&d);
        lost(&m, "1") && lost(&m, "2")
    });
    std::thread::sleep(Duration::from_secs(4));
    let during = metrics(&d);
    assert_eq!(uuids(&during), before, "identities kept while lost");
    assert!(lost(&during, "1") && lost(&during, "2"), "{during}");
    let events = source_events(&jsonl);
    assert_eq!(
        events.iter().filter(|e| e.0 == "opened").count(),
        2,
        "one opened per lost GPU: {events:?}"
    );
    assert!(
        !events.iter().any(|e| e.0 == "resolved"),
        "nothing resolved while both are lost: {events:?}"
    );
    wait_until("GPU 2 back", Duration::from_secs(10), || {
        !lost(&metrics(&d), "2")
    });
    std::thread::sleep(Duration::from_secs(1));
    let after = metrics(&d);
    assert_eq!(uuids(&after), before);
    assert!(lost(&after, "1"), "GPU 1 is still lost");
    let events = source_events(&jsonl);
    let opened: Vec<_> = events.iter().filter(|e| e.0 == "opened").collect();
    let resolved: Vec<_> = events.iter().filter(|e| e.0 == "resolved").collect();
    assert_eq!(opened.len(), 2, "{events:?}");
    assert_eq!(opened[0].1, before[1], "{events:?}");
    assert_eq!(opened[1].1, before[2], "{events:?}");
    assert_eq!(resolved.len(), 1, "only GPU 2 came back: {events:?}");
    assert_eq!(resolved[0].1, before[2], "{events:?}");
    assert_eq!(resolved[0].2, Some(2), "{events:?}");

    // The history keeps one series per GPU, under its own identity.
    let (status, body) = request(d.port, "/api/v1/history?since=1m&step=1s", None);
    assert_eq!(status, 200, "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let series: Vec<String> = body["series"]
        .as_array()
        .expect("series")
        .iter()
        .map(|s| s["gpu_uuid"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(series, before, "{body}");
}

/// A scenario whose very first call (the identity read) hangs for a minute.
const HUNG_FROM_THE_START: &str = r#"
[[gpu]]
memory_total = "80GiB"
faults.slow = [{ call = "uuid", ms = 60000 }]
"#;

/// Item 9: a driver hung before the first sample is visible in `/metrics` (the self-metrics
/// exist from the start, so the collect-failing alert can fire; the stuck call is named) and in
/// `/api/v1/health`.
#[test]
fn a_driver_hung_before_the_first_sample_is_named_by_metrics_and_health() {
    let sc = ScenarioFile::new(HUNG_FROM_THE_START);
    let d = Daemon::start(&sc, &[]);
    let stuck = |m: &str| {
        m.lines()
            .find(|l| {
                l.starts_with("gpuwatch_collect_stuck_seconds{")
                    && label(l, "call") == Some("uuid")
                    && label(l, "gpu") == Some("0")
            })
            .map(str::to_string)
    };
    wait_until(
        "the stuck call in /metrics",
        Duration::from_secs(10),
        || stuck(&metrics(&d)).is_some(),
    );
    let m = metrics(&d);
    assert!(
        m.lines().any(|l| l
            .strip_prefix("gpuwatch_last_collect_success ")
            .and_then(|v| v.parse::<f64>().ok())
            == Some(0.0)),
        "exported before any sample: {m}"
    );
    let (status, body) = request(d.port, "/api/v1/health", None);
    assert_eq!(status, 200);
    let health: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(health["status"], "stale", "{health}");
    assert_eq!(health["stuck_calls"][0]["call"], "uuid", "{health}");
    assert_eq!(health["stuck_calls"][0]["gpu"], 0, "{health}");
    assert!(
        health["stuck_calls"][0]["detail"]
            .as_str()
            .is_some_and(|t| t.starts_with("uuid on GPU 0 has not returned for")),
        "{health}"
    );
    assert!(snapshot(&d).is_none(), "no sample yet");
}

/// Item 9: `snapshot` on such a driver gives up after `--hang-timeout`, naming the call.
#[test]
fn snapshot_names_the_first_call_that_hangs() {
    let sc = ScenarioFile::new(HUNG_FROM_THE_START);
    let started = Instant::now();
    let out = common::gpuwatch_on(&sc, &["--hang-timeout", "2s", "snapshot"]);
    assert!(started.elapsed() < Duration::from_secs(15));
    let err = common::stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("the call uuid on GPU 0 has not returned for"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// A GPU whose driver answers `NOT_SUPPORTED` for the compute process list, with a process on
/// it that a supported list would show, beside a GPU whose list works and is empty.
fn no_process_list(pid: u32) -> String {
    format!(
        r#"
[[gpu]]
memory_total = "80GiB"
base_used = "3GiB"
faults.not_supported = ["compute-processes"]
[[gpu.process]]
pid = {pid}
used = "10GiB"

[[gpu]]
memory_total = "80GiB"
base_used = "1GiB"
"#
    )
}

/// Item 14: a process list the driver does not give is "not available", not "no processes":
/// in the snapshot table and JSON, and in `/metrics` (no per-process series, unattributed
/// memory unknown rather than equal to `used`).
#[test]
fn an_unsupported_process_list_is_unavailable_not_empty() {
    let job = common::Sleeper::spawn();
    let sc = ScenarioFile::new(&no_process_list(job.pid()));

    let out = common::gpuwatch_on(&sc, &["snapshot"]);
    let text = common::stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let (gpu0, gpu1) = text.split_once("GPU 1").expect("two GPUs");
    assert!(
        gpu0.contains("process list not available"),
        "GPU 0 says its list is unknown:\n{text}"
    );
    assert!(!gpu0.contains("no processes"), "{text}");
    assert!(!gpu0.contains("unattributed"), "{text}");
    assert!(
        gpu1.contains("unattributed  1.0GiB"),
        "GPU 1's list is known (and empty):\n{text}"
    );

    let out = common::gpuwatch_on(&sc, &["snapshot", "--json"]);
    let snap: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(snap["gpus"][0]["processes_available"], false, "{snap}");
    assert!(snap["gpus"][0]["unattributed_bytes"].is_null(), "{snap}");
    assert!(snap["gpus"][0]["external_bytes"].is_null(), "{snap}");
    assert_eq!(snap["gpus"][1]["processes_available"], true, "{snap}");
    assert_eq!(snap["gpus"][1]["unattributed_bytes"], 1u64 << 30, "{snap}");

    let d = Daemon::start(&sc, &[]);
    wait_until("a sample", Duration::from_secs(10), || {
        snapshot(&d).is_some()
    });
    let m = metrics(&d);
    let on_gpu0 = |name: &str| {
        m.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")) && label(l, "gpu") == Some("0"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert!(
        on_gpu0("gpuwatch_memory_unattributed_bytes").is_empty(),
        "{m}"
    );
    assert!(on_gpu0("gpuwatch_memory_external_bytes").is_empty(), "{m}");
    assert!(
        on_gpu0("gpuwatch_process_memory_used_bytes").is_empty(),
        "{m}"
    );
    let available = on_gpu0("gpuwatch_process_list_available");
    assert!(
        available.len() == 1 && available[0].ends_with(" 0.0"),
        "{available:?}"
    );
    assert!(
        m.lines()
            .any(|l| l.starts_with("gpuwatch_memory_unattributed_bytes{")
                && label(l, "gpu") == Some("1")),
        "GPU 1's unattributed memory is known: {m}"
    );
}

/// `(index, uuid, lost, memory used)` of each GPU of a snapshot.
fn gpus_of(snap: &serde_json::Value) -> Vec<(u64, String, bool, Option<u64>)> {
    snap["gpus"]
        .as_array()
        .expect("gpus")
        .iter()
        .map(|g| {
            (
                g["index"].as_u64().expect("index"),
                g["uuid"].as_str().unwrap_or_default().to_string(),
                g["lost"].as_bool().unwrap_or_default(),
                g["memory"]["used_bytes"].as_u64(),
            )
        })
        .collect()
}

/// The UUID the double gives the scenario's `n`-th GPU.
fn uuid(n: u32) -> String {
    format!("GPU-5ce1a7e0-0000-4000-8000-{n:012x}")
}

/// Item 14: GPUs removed or added while the daemon runs are followed: a removed GPU stays,
/// lost, under its own identity (no ghost: the GPU that takes its index is not shown under its
/// name), and a new GPU appears with its own.
#[test]
fn gpus_added_or_removed_while_running_are_followed() {
    const GIB: u64 = 1 << 30;
    let sc = ScenarioFile::new(
        r#"
[[gpu]]
memory_total = "80GiB"
base_used = "1GiB"
[[gpu]]
memory_total = "80GiB"
base_used = "2GiB"
present = { until = 2.5 }
[[gpu]]
memory_total = "80GiB"
base_used = "3GiB"
present = { from = 4.5 }
"#,
    );
    let d = Daemon::start(&sc, &[]);
    wait_until("a sample", Duration::from_secs(10), || {
        snapshot(&d).is_some()
    });
    let at_start = gpus_of(&snapshot(&d).expect("snapshot"));
    assert_eq!(
        at_start,
        [
            (0, uuid(0), false, Some(GIB)),
            (1, uuid(1), false, Some(2 * GIB))
        ]
    );
    // t = 2.5: GPU 1 leaves the bus.
    let removed = [(0, uuid(0), false, Some(GIB)), (1, uuid(1), true, None)];
    wait_until("the removal", Duration::from_secs(10), || {
        gpus_of(&snapshot(&d).expect("snapshot")) == removed
    });
    // t = 4.5: a new GPU arrives, at index 1.
    let added = [
        (0, uuid(0), false, Some(GIB)),
        (1, uuid(2), false, Some(3 * GIB)),
        (1, uuid(1), true, None),
    ];
    let mut last = Vec::new();
    let start = Instant::now();
    while last != added {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the new GPU never shown: {last:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
        last = gpus_of(&snapshot(&d).expect("snapshot"));
    }
    let snap = snapshot(&d).expect("snapshot");
    assert!(
        gpu_errors(&snap, 2).iter().any(|e| e.contains("Removed")),
        "the removed GPU says so: {snap}"
    );
    let m = metrics(&d);
    let mut labels: Vec<String> = info_uuids(&m);
    labels.sort();
    assert_eq!(labels, [uuid(0), uuid(1), uuid(2)], "{m}");
}

/// Item 14: one GPU swapped for another at once (the count does not change): the new one is
/// not shown under the old one's identity.
#[test]
fn a_gpu_swapped_at_an_unchanged_count_is_not_a_ghost() {
    const GIB: u64 = 1 << 30;
    let sc = ScenarioFile::new(
        r#"
[[gpu]]
memory_total = "80GiB"
base_used = "2GiB"
present = { until = 2 }
[[gpu]]
memory_total = "80GiB"
base_used = "3GiB"
present = { from = 2 }
"#,
    );
    let d = Daemon::start(&sc, &[]);
    wait_until("a sample", Duration::from_secs(10), || {
        snapshot(&d).is_some()
    });
    let swapped = [(0, uuid(1), false, Some(3 * GIB)), (0, uuid(0), true, None)];
    let mut seen = Vec::new();
    let start = Instant::now();
    while seen != swapped {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never followed the swap: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
        seen = gpus_of(&snapshot(&d).expect("snapshot"));
        // Never the new GPU's memory under the old GPU's name.
        assert!(
            !seen.contains(&(0, uuid(0), false, Some(3 * GIB))),
            "a ghost: {seen:?}"
        );
    }
}

/// Item 10, one-shot: `snapshot` with a GPU whose memory call hangs from the start prints the
/// other GPU in full after one interval, and the stuck GPU by name with its call.
#[test]
fn snapshot_does_not_wait_for_a_hung_gpu() {
    let sc = ScenarioFile::new(
        r#"
[[gpu]]
memory_total = "80GiB"
base_used = "1GiB"
[[gpu]]
memory_total = "80GiB"
faults.slow = [{ call = "memory", ms = 30000 }]
"#,
    );
    let started = Instant::now();
    let out = common::gpuwatch_on(&sc, &["snapshot", "--json"]);
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let snap: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        snap["gpus"][0]["memory"]["used_bytes"],
        1u64 << 30,
        "{snap}"
    );
    assert_eq!(snap["gpus"][1]["uuid"], uuid(1), "{snap}");
    assert_eq!(snap["gpus"][1]["name"], "NVIDIA H200", "{snap}");
    assert!(
        gpu_errors(&snap, 1)
            .iter()
            .any(|e| e.contains("memory_info") && e.contains("NoAnswer")),
        "{snap}"
    );
}
