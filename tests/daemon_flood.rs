//! The daemon under a connection flood (issue 11, item 4), bounded and on loopback: a daemon on
//! the NVML test double at its default settings, started with 256 file descriptors
//! (`prlimit --nofile=256:256`, util-linux), gets 100 event-stream clients that never read and
//! 400 idle TCP connections (more than the descriptors it has), held for 8 s.
//!
//! Throughout, `/api/v1/health` answers (latency recorded), the real processes of the scenario
//! keep their names in `/api/v1/snapshot` (a `/proc` read that fails for want of descriptors
//! must not turn them into nameless strangers), and the daemon's RSS stays under a stated
//! bound; after the clients leave it answers as before and its RSS comes back down. The figures
//! are printed (`--nocapture`).

mod common;

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Daemon, ScenarioFile, Sleeper};

const NOFILE: u64 = 256;
const SSE_CLIENTS: usize = 100;
const IDLE_CONNECTIONS: usize = 400;
const HOLD: Duration = Duration::from_secs(8);
/// The daemon's RSS may grow by at most this much under the flood…
const RSS_GROWTH_BOUND_KIB: u64 = 32 * 1024;
/// …and be at most this much above where it started once the clients left.
const RSS_AFTER_BOUND_KIB: u64 = 8 * 1024;

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("daemon status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// A GET with a deadline: status, body and how long it took; `None` when it did not answer.
fn get(port: u16, path: &str, deadline: Duration) -> Option<(u16, String, Duration)> {
    let t0 = Instant::now();
    let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), deadline).ok()?;
    s.set_read_timeout(Some(deadline)).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_string(), t0.elapsed()))
}

/// The daemon's log once it says `needle` (waits up to 10 s).
fn log_saying(daemon: &Daemon, needle: &str) -> String {
    let started = Instant::now();
    loop {
        let log = daemon.log.lock().expect("log").clone();
        if log.contains(needle) || started.elapsed() > Duration::from_secs(10) {
            return log;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
}

/// The value of an unlabelled series, or the sum of a family's series matching `filter`.
fn metric(text: &str, name: &str, filter: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with([' ', '{']))
                && l.contains(filter)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Every sleeper in the snapshot, visible and named `sleep`; a description of what is wrong
/// otherwise.
fn names_kept(body: &str, pids: &[u32]) -> Result<(), String> {
    let v: serde_json::Value = serde_json::from_str(body).map_err(|e| e.to_string())?;
    let procs: Vec<&serde_json::Value> = v["gpus"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["processes"].as_array().into_iter().flatten())
        .collect();
    for pid in pids {
        let rows: Vec<_> = procs.iter().filter(|p| p["pid"] == *pid).collect();
        if rows.len() != 1
            || rows[0]["name"] != "sleep"
            || rows[0]["visible"] != true
            || rows[0]["start_time"].is_null()
        {
            return Err(format!("pid {pid}: {rows:?}"));
        }
    }
    Ok(())
}

#[test]
#[allow(clippy::too_many_lines)] // one scenario, start to end
fn a_connection_flood_under_a_low_descriptor_limit_leaves_the_daemon_answering() {
    let sleepers: Vec<Sleeper> = (0..4).map(|_| Sleeper::spawn()).collect();
    let pids: Vec<u32> = sleepers.iter().map(Sleeper::pid).collect();
    // The sleepers plus 60 processes this host does not show, so the event stream carries
    // frames of some size.
    let mut scenario = String::from("[[gpu]]\nmemory_total = \"80GiB\"\nutil_gpu = 50\n");
    for pid in &pids {
        let _ = write!(scenario, "[[gpu.process]]\npid = {pid}\nused = \"1GiB\"\n");
    }
    for i in 0..60 {
        let _ = write!(
            scenario,
            "[[gpu.process]]\npid = {}\nused = \"64MiB\"\n",
            32_700 + i
        );
    }
    let sc = ScenarioFile::new(&scenario);
    let daemon = Daemon::start_with_nofile(&sc, NOFILE, &["--no-history"]);
    let (port, pid) = (daemon.port, daemon.child.id());
    // The cap in effect: half the descriptors.
    let log = log_saying(&daemon, "HTTP limits");
    assert!(
        log.contains("HTTP limits: 128 connections, 32 event streams"),
        "{log}"
    );
    let started = Instant::now();
    loop {
        if let Some((200, body, _)) = get(port, "/api/v1/snapshot", Duration::from_secs(2))
            && names_kept(&body, &pids).is_ok()
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "no named snapshot"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let rss_before = rss_kib(pid);

    // Health, every 50 ms, from start to end.
    let stop = Arc::new(AtomicBool::new(false));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let retries = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let poller = {
        let (stop, latencies, failures, retries) = (
            Arc::clone(&stop),
            Arc::clone(&latencies),
            Arc::clone(&failures),
            Arc::clone(&retries),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // A connection closed before it could send its request (the oldest idle ones
                // make room for new ones, and under a flood that can be a fresh one) is tried
                // again at once, as HTTP clients do; a retry is counted, a hang is a failure.
                let mut answer = get(port, "/api/v1/health", Duration::from_secs(3));
                if answer.is_none() {
                    retries.fetch_add(1, Ordering::Relaxed);
                    answer = get(port, "/api/v1/health", Duration::from_secs(3));
                }
                match answer {
                    Some((200, _, took)) => latencies
                        .lock()
                        .expect("lock")
                        .push(took.as_secs_f64() * 1000.0),
                    other => failures.lock().expect("lock").push(format!("{other:?}")),
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };

    // Event-stream clients that send their request and never read, then idle connections
    // that never send a byte: more than the daemon has descriptors. A daemon that stops
    // accepting shows as connections that time out.
    let addr = ([127, 0, 0, 1], port).into();
    let mut held: Vec<TcpStream> = Vec::new();
    let mut unconnected = 0;
    for i in 0..SSE_CLIENTS + IDLE_CONNECTIONS {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            Ok(mut s) => {
                if i < SSE_CLIENTS {
                    let _ = write!(s, "GET /api/v1/events HTTP/1.1\r\nHost: localhost\r\n\r\n");
                }
                held.push(s);
            }
            Err(_) => unconnected += 1,
        }
        assert!(
            unconnected < 3,
            "the daemon stopped accepting connections after {i}"
        );
    }
    let mut rss_peak = rss_kib(pid);
    let mut snapshots = 0;
    let hold_start = Instant::now();
    while hold_start.elapsed() < HOLD {
        rss_peak = rss_peak.max(rss_kib(pid));
        if snapshots * 1000 < hold_start.elapsed().as_millis() {
            snapshots += 1;
            let (status, body, _) = get(port, "/api/v1/snapshot", Duration::from_secs(3))
                .expect("the snapshot answers under load");
            assert_eq!(status, 200, "{body}");
            if let Err(e) = names_kept(&body, &pids) {
                panic!("under load a real process lost its name: {e}");
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, metrics, _) =
        get(port, "/metrics", Duration::from_secs(3)).expect("/metrics answers under load");
    assert_eq!(status, 200, "{metrics}");
    let open = metrics
        .lines()
        .filter(|l| l.starts_with("gpuwatch_http_connections "))
        .find_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .expect("gpuwatch_http_connections");
    let streams = metric(&metrics, "gpuwatch_http_event_streams", "");
    let rejected_streams = metric(&metrics, "gpuwatch_http_rejected_total", "event_streams");
    let rejected_conns = metric(&metrics, "gpuwatch_http_rejected_total", "\"connections\"");
    let evicted = metric(&metrics, "gpuwatch_http_dropped_total", "idle_evicted");
    let proc_errors = metric(&metrics, "gpuwatch_proc_read_errors_total", "");
    let accept_errors = metric(&metrics, "gpuwatch_http_accept_errors_total", "");

    drop(held);
    std::thread::sleep(Duration::from_secs(3));
    let rss_after = rss_kib(pid);
    let (status, body, _) =
        get(port, "/api/v1/snapshot", Duration::from_secs(3)).expect("answers after");
    assert_eq!(status, 200);
    names_kept(&body, &pids).expect("names after the flood");
    stop.store(true, Ordering::Relaxed);
    poller.join().expect("poller");

    let mut lat = latencies.lock().expect("lock").clone();
    lat.sort_by(f64::total_cmp);
    let failures = failures.lock().expect("lock").clone();
    eprintln!(
        "flood: {SSE_CLIENTS} non-reading event-stream clients + {IDLE_CONNECTIONS} idle connections, RLIMIT_NOFILE {NOFILE}, held {} s",
        HOLD.as_secs()
    );
    eprintln!(
        "daemon: {open} connections open at the cap (128), {streams} event streams (cap 32), rejected: {rejected_conns} connections, {rejected_streams} event streams; {evicted} idle connections closed for new ones; {accept_errors} failed accepts; {proc_errors} failed /proc reads"
    );
    let retries = retries.load(Ordering::Relaxed);
    eprintln!(
        "health: {} answers, {} failures, {retries} retried, latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        lat.len(),
        failures.len(),
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat[lat.len() - 1]
    );
    eprintln!(
        "RSS: before {rss_before} KiB, peak {rss_peak} KiB (+{} KiB), after {rss_after} KiB",
        rss_peak.saturating_sub(rss_before)
    );
    assert!(
        failures.is_empty(),
        "/api/v1/health did not answer {} time(s): {failures:?}",
        failures.len()
    );
    assert!(lat.len() > 50, "too few health checks: {}", lat.len());
    assert!(
        retries * 50 <= lat.len(),
        "{retries} health checks had to be retried"
    );
    assert!(open <= 128.0 + 17.0, "{open} connections open");
    assert!(streams <= 32.0, "{streams} streams");
    // All but the 32 streams are refused (a few stream requests may not be read at all:
    // their connection, silent so far, made room for a newer one).
    assert!(
        rejected_streams >= (SSE_CLIENTS - 32 - 5) as f64 && streams >= 27.0,
        "{rejected_streams} streams refused, {streams} open"
    );
    assert!(
        rss_peak < rss_before + RSS_GROWTH_BOUND_KIB,
        "RSS grew from {rss_before} KiB to {rss_peak} KiB"
    );
    assert!(
        rss_after < rss_before + RSS_AFTER_BOUND_KIB,
        "RSS after the flood {rss_after} KiB, before {rss_before} KiB"
    );
}

/// Asserts the daemon closes `s` in about a second (the idle timeout of the test below), once
/// what it sent so far is read.
fn closed_after_a_second(s: &mut TcpStream) {
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let t0 = Instant::now();
    let mut buf = [0u8; 4096];
    while s.read(&mut buf).expect("closed, not timed out") > 0 {}
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(800) && waited < Duration::from_secs(4),
        "closed after {waited:?}"
    );
}

/// The limits come from `[daemon]` in the config file: the event-stream cap, the idle timeout,
/// the connection cap (idle connections make room for new ones), and a client that stops
/// reading its event stream is dropped within the request timeout rather than buffered for.
#[test]
fn the_limits_in_the_config_file_hold_and_a_client_that_stops_reading_is_dropped() {
    let mut scenario = String::from("[[gpu]]\nmemory_total = \"80GiB\"\n");
    for i in 0..200 {
        let _ = write!(
            scenario,
            "[[gpu.process]]\npid = {}\nused = \"64MiB\"\n",
            32_500 + i
        );
    }
    let sc = ScenarioFile::new(&scenario);
    std::fs::create_dir_all(sc.dir.path().join("gpuwatch")).expect("config dir");
    std::fs::write(
        sc.dir.path().join("gpuwatch/config.toml"),
        "[daemon]\nmax-connections = 8\nmax-event-streams = 2\nidle-timeout = \"1s\"\nrequest-timeout = \"2s\"\n",
    )
    .expect("config");
    let daemon = Daemon::start(&sc, &["--no-history"]);
    let port = daemon.port;
    let log = log_saying(&daemon, "HTTP limits");
    assert!(
        log.contains("HTTP limits: 8 connections, 2 event streams")
            && log.contains("idle timeout 1s, request timeout 2s"),
        "{log}"
    );
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    // A stream client with a tiny receive window that never reads.
    let slow =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    slow.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    slow.connect(&addr.into()).expect("connect");
    let mut slow: TcpStream = slow.into();
    write!(
        slow,
        "GET /api/v1/events HTTP/1.1\r\nHost: localhost\r\n\r\n"
    )
    .expect("write");
    // A second stream is served; a third is refused.
    let mut reader = TcpStream::connect(addr).expect("connect");
    reader
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    write!(
        reader,
        "GET /api/v1/events HTTP/1.1\r\nHost: localhost\r\n\r\n"
    )
    .expect("write");
    let mut head = [0u8; 64];
    let n = reader.read(&mut head).expect("stream head");
    assert!(head[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &head[..n]);
    let (status, body, _) = get(port, "/api/v1/events", Duration::from_secs(3)).expect("an answer");
    assert_eq!(status, 503, "{body}");
    // An idle connection is closed after the idle timeout.
    closed_after_a_second(&mut TcpStream::connect(addr).expect("connect"));
    // So is a keep-alive connection once its response is sent.
    let mut kept = TcpStream::connect(addr).expect("connect");
    write!(
        kept,
        "GET /api/v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n"
    )
    .expect("write");
    let n = kept.read(&mut head).expect("response");
    assert!(head[..n].starts_with(b"HTTP/1.1 200"));
    closed_after_a_second(&mut kept);
    // Twenty idle connections: never more than eight open, the oldest closed for the newest.
    let crowd: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect(addr).expect("connect"))
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let (_, metrics, _) = get(port, "/metrics", Duration::from_secs(3)).expect("metrics");
    assert!(
        metric(&metrics, "gpuwatch_http_connections", "") <= 8.0,
        "{metrics}"
    );
    assert!(metric(&metrics, "gpuwatch_http_dropped_total", "idle_evicted") >= 12.0);
    assert!(metric(&metrics, "gpuwatch_http_rejected_total", "event_streams") >= 1.0);
    drop(crowd);
    // The client that does not read is dropped (it stalls the writes, or falls behind).
    let started = Instant::now();
    loop {
        let (_, metrics, _) = get(port, "/metrics", Duration::from_secs(3)).expect("metrics");
        let dropped = metric(&metrics, "gpuwatch_http_dropped_total", "write_timeout")
            + metric(&metrics, "gpuwatch_http_dropped_total", "lagged");
        if dropped >= 1.0 {
            eprintln!(
                "slow client dropped after {:.1} s",
                started.elapsed().as_secs_f64()
            );
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the non-reading client was never dropped: {metrics}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    drop(reader);
}
