//! Load on the daemon's HTTP side (issue 5): 200 `/metrics` scrapes a second for 30 s from this
//! test, on loopback, bounded (6 000 requests from 4 paced clients, one connection each at a
//! time), while the daemon samples the NVML test double every 200 ms. The fast cadence the
//! daemon processes — distinct samples seen in `/api/v1/snapshot` — must not be delayed by more
//! than 10 %. Scrape latency percentiles are printed (`--nocapture`), not asserted: they are a
//! figure of the machine. `python3 bench/metrics_load.py` measures the same on a release build
//! at 8 GPUs × 64 processes.

mod common;

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Daemon, ScenarioFile, Sleeper, request};

fn get(port: u16, path: &str) -> (u16, String) {
    request(port, path, None)
}

const RATE: u32 = 200;
const SECONDS: u32 = 30;
const CLIENTS: u32 = 4;
/// The daemon's interval in `Daemon::start`.
const INTERVAL: f64 = 0.2;

/// The sample times the daemon published while polling for `seconds` (every 40 ms, distinct
/// values only).
fn published(port: u16, seconds: f64) -> Vec<f64> {
    let mut seen: Vec<f64> = Vec::new();
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    while Instant::now() < end {
        let (status, body) = get(port, "/api/v1/snapshot");
        if status == 200 {
            let v: serde_json::Value = serde_json::from_str(&body).expect("snapshot JSON");
            let t = v["taken_at_unix"].as_f64().expect("taken_at_unix");
            if seen.last().is_none_or(|&last| t > last) {
                seen.push(t);
            }
        }
        std::thread::sleep(Duration::from_millis(40));
    }
    seen
}

/// Mean gap between published samples, seconds.
fn mean_gap(times: &[f64]) -> f64 {
    assert!(times.len() >= 10, "too few samples seen: {times:?}");
    (times[times.len() - 1] - times[0]) / (times.len() - 1) as f64
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
}

#[test]
fn two_hundred_scrapes_a_second_do_not_delay_the_fast_cadence() {
    // 2 GPUs × 16 processes that /proc can see, so every scrape renders process series.
    let sleepers: Vec<Sleeper> = (0..32).map(|_| Sleeper::spawn()).collect();
    let mut scenario = String::new();
    for g in 0..2 {
        scenario.push_str("[[gpu]]\nmemory_total = \"80GiB\"\nutil_gpu = 70\n");
        for (i, s) in sleepers[g * 16..(g + 1) * 16].iter().enumerate() {
            let _ = write!(
                scenario,
                "[[gpu.process]]\npid = {}\nused = \"{}MiB\"\nsm = {}\n",
                s.pid(),
                512 + i * 256,
                i * 5
            );
        }
    }
    let sc = ScenarioFile::new(&scenario);
    let d = Daemon::start(&sc, &["--no-history"]);
    let port = d.port;
    let idle = published(port, 5.0);
    let idle_gap = mean_gap(&idle);

    let latencies = Arc::new(Mutex::new(Vec::with_capacity((RATE * SECONDS) as usize)));
    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let latencies = Arc::clone(&latencies);
            std::thread::spawn(move || {
                let per_client = RATE / CLIENTS;
                let total = per_client * SECONDS;
                let mut mine = Vec::with_capacity(total as usize);
                let begin =
                    Instant::now() + Duration::from_secs_f64(f64::from(c) / f64::from(RATE));
                for i in 0..total {
                    let due = begin + Duration::from_secs_f64(f64::from(i) / f64::from(per_client));
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    let t0 = Instant::now();
                    let (status, body) = get(port, "/metrics");
                    mine.push(t0.elapsed().as_secs_f64() * 1000.0);
                    assert_eq!(status, 200, "{body}");
                    assert!(body.contains("gpuwatch_process_memory_used_bytes"));
                }
                latencies.lock().expect("lock").extend(mine);
            })
        })
        .collect();
    let busy = published(port, f64::from(SECONDS) - 2.0);
    for c in clients {
        c.join().expect("client");
    }
    let took = started.elapsed().as_secs_f64();
    let mut lat = latencies.lock().expect("lock").clone();
    lat.sort_by(f64::total_cmp);
    let busy_gap = mean_gap(&busy);
    eprintln!(
        "/metrics: {} scrapes in {took:.1} s ({:.0}/s), latency p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        lat.len(),
        lat.len() as f64 / took,
        percentile(&lat, 0.5),
        percentile(&lat, 0.9),
        percentile(&lat, 0.99),
        lat[lat.len() - 1]
    );
    eprintln!(
        "fast cadence ({INTERVAL} s): idle {idle_gap:.4} s over {} samples, under load {busy_gap:.4} s over {} samples ({:+.1} %)",
        idle.len(),
        busy.len(),
        (busy_gap / idle_gap - 1.0) * 100.0
    );
    assert_eq!(lat.len(), (RATE * SECONDS) as usize);
    // The load was applied: the requests did not fall far behind their schedule.
    assert!(
        took < f64::from(SECONDS) * 1.5,
        "6000 scrapes took {took:.1} s: the load was not applied at 200/s"
    );
    assert!(
        (idle_gap - INTERVAL).abs() < INTERVAL * 0.05,
        "idle cadence {idle_gap} s"
    );
    assert!(
        busy_gap <= INTERVAL * 1.10,
        "under load the daemon processed a sample every {busy_gap:.4} s (interval {INTERVAL} s): delayed by more than 10 %"
    );
}
