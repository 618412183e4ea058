//! A real Prometheus server (Debian's `prometheus` package; `.ci/run` installs it) scrapes two
//! daemons on loopback, each on its own simulated GPUs, with the shipped rules loaded; PromQL
//! answers with both hosts' series.

mod common;

use std::time::{Duration, Instant};

use common::{Daemon, ScenarioFile, Sleeper, query, start_prometheus};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

#[test]
fn prometheus_scrapes_two_daemons_and_promql_sees_both_hosts() {
    let (a, b) = (Sleeper::spawn(), Sleeper::spawn());
    let one = ScenarioFile::new(&format!(
        "[[gpu]]\nuuid = \"GPU-aaaaaaaa-0000-0000-0000-000000000001\"\nmemory_total = \"80GiB\"\nmemory_reserved = \"0\"\n[[gpu.process]]\npid = {}\nused = \"20GiB\"\n",
        a.pid()
    ));
    let two = ScenarioFile::new(&format!(
        "[[gpu]]\nuuid = \"GPU-bbbbbbbb-0000-0000-0000-000000000001\"\nmemory_total = \"80GiB\"\nmemory_reserved = \"0\"\n[[gpu.process]]\npid = {}\nused = \"5GiB\"\n[[gpu]]\nuuid = \"GPU-bbbbbbbb-0000-0000-0000-000000000002\"\nmemory_total = \"80GiB\"\n",
        b.pid()
    ));
    let (d1, d2) = (
        Daemon::start(&one, &["--no-history"]),
        Daemon::start(&two, &["--no-history"]),
    );
    let prom = start_prometheus(&[d1.port, d2.port]);
    // Both targets up and three GPUs' memory series, within 30 s.
    let started = Instant::now();
    loop {
        let up = query(prom.port, "sum(up{job=\"gpuwatch\"})").and_then(|r| {
            r.first()
                .and_then(|s| s["value"][1].as_str().map(str::to_string))
        });
        let gpus = query(prom.port, "count(gpuwatch_memory_used_bytes)").and_then(|r| {
            r.first()
                .and_then(|s| s["value"][1].as_str().map(str::to_string))
        });
        if up.as_deref() == Some("2") && gpus.as_deref() == Some("3") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "Prometheus did not see both daemons: up = {up:?}, GPUs = {gpus:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // Per host: the first daemon's GPU holds 20 GiB, the second's two GPUs 5 GiB and 0.
    let by_host =
        query(prom.port, "sum by (instance) (gpuwatch_memory_used_bytes)").expect("query");
    assert_eq!(by_host.len(), 2, "{by_host:?}");
    let value_of = |port: u16| -> f64 {
        by_host
            .iter()
            .find(|s| s["metric"]["instance"] == format!("127.0.0.1:{port}"))
            .and_then(|s| s["value"][1].as_str()?.parse().ok())
            .expect("the host's series")
    };
    assert!((value_of(d1.port) - 20.0 * GIB).abs() < 1.0);
    assert!((value_of(d2.port) - 5.0 * GIB).abs() < 1.0);
    // The process series and the shipped recording rules work on live data.
    let procs = query(prom.port, "gpuwatch_process_memory_used_bytes").expect("query");
    assert_eq!(procs.len(), 2, "{procs:?}");
    let started = Instant::now();
    while query(prom.port, "gpuwatch:memory_used:ratio").is_none_or(|r| r.len() < 3) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the recording rule never evaluated"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}
