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
