//! The sampler's threads with a scripted source (no NVML, no environment): frames flow, a
//! hanging call makes consumers see a stale frame and names the call, and stopping is prompt.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuwatch::sampler::{FirstFrameError, Sampler, SamplerOptions};
use gpuwatch::source::scripted::ScriptedSource;
use scenario::Scenario;

fn source(text: &str) -> Box<ScriptedSource> {
    Box::new(ScriptedSource::new(
        Scenario::parse(text).expect("valid scenario"),
        "test",
    ))
}

fn fast() -> SamplerOptions {
    SamplerOptions {
        interval: Duration::from_millis(100),
        slow_interval: Duration::from_secs(1),
        host_interval: Duration::from_millis(100),
        host_summary: false,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn frames_arrive_at_the_fast_cadence_with_increasing_seq() {
    let sampler =
        Sampler::spawn(source("[[gpu]]\nmemory_total = \"8GiB\"\n"), fast()).expect("spawn");
    let rt = runtime();
    let first = rt
        .block_on(sampler.first_frame(Duration::from_secs(5)))
        .expect("first frame");
    assert_eq!(first.seq, 1);
    assert_eq!(first.source.kind, gpuwatch::model::SourceKind::Demo);
    std::thread::sleep(Duration::from_millis(650));
    let latest = sampler.frames().borrow().clone().expect("a frame");
    assert!(latest.seq >= 4, "seq {} after 650 ms at 100 ms", latest.seq);
    assert!(!latest.is_stale());
    assert!(latest.sample.taken_at >= first.sample.taken_at);
}

#[test]
fn a_hanging_call_shows_as_a_stale_frame_and_is_named() {
    // From t = 0.3 s the memory call takes 10 s.
    let sampler = Sampler::spawn(
        source("[[gpu]]\nmemory_total = \"8GiB\"\nfaults.slow = [{ call = \"memory\", ms = 10000, from = 0.3 }]\n"),
        fast(),
    )
    .expect("spawn");
    let rt = runtime();
    rt.block_on(sampler.first_frame(Duration::from_secs(5)))
        .expect("first frame");
    let started = Instant::now();
    // The consumer keeps answering: it reads the latest frame without waiting on the sampler.
    let mut stale_seen = false;
    while started.elapsed() < Duration::from_secs(4) {
        let frame: Arc<_> = sampler.frames().borrow().clone().expect("a frame");
        if frame.is_stale() {
            stale_seen = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(stale_seen, "the last frame went stale while the call hung");
    let stuck = sampler.in_flight().expect("a call is in flight");
    assert_eq!(stuck.call, "memory_info");
    assert_eq!(stuck.gpu, Some(0));
}

#[test]
fn first_frame_times_out_naming_the_call() {
    let sampler = Sampler::spawn(
        source(
            "[[gpu]]\nmemory_total = \"8GiB\"\nfaults.slow = [{ call = \"memory\", ms = 10000 }]\n",
        ),
        fast(),
    )
    .expect("spawn");
    let rt = runtime();
    let err = rt
        .block_on(sampler.first_frame(Duration::from_millis(500)))
        .expect_err("no frame while the call hangs");
    assert!(matches!(err, FirstFrameError::Hung { .. }));
    let msg = err.to_string();
    assert!(
        msg.contains("memory_info on GPU 0 has not returned"),
        "{msg}"
    );
}

#[test]
fn dropping_the_sampler_stops_it_promptly() {
    let sampler = Sampler::spawn(
        source("[[gpu]]\nmemory_total = \"8GiB\"\n"),
        SamplerOptions {
            interval: Duration::from_mins(1),
            slow_interval: Duration::from_mins(1),
            host_interval: Duration::from_mins(1),
            host_summary: false,
        },
    )
    .expect("spawn");
    let mut rx = sampler.frames();
    let rt = runtime();
    rt.block_on(sampler.first_frame(Duration::from_secs(5)))
        .expect("first frame");
    let started = Instant::now();
    drop(sampler);
    // The sleeping thread wakes and exits, closing the channel.
    let closed = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(2), async {
            while rx.changed().await.is_ok() {}
        })
        .await
    });
    assert!(closed.is_ok(), "channel closed within 2 s");
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// Asked for (the dashboard), a demo's frames carry this host's memory, swap and load; other
/// front ends' frames carry none.
#[test]
fn the_dashboards_frames_carry_this_hosts_summary() {
    let rt = runtime();
    for asked in [true, false] {
        let sampler = Sampler::spawn(
            source("[[gpu]]\nmemory_total = \"8GiB\"\n"),
            SamplerOptions {
                host_summary: asked,
                ..fast()
            },
        )
        .expect("spawn");
        let frame = rt
            .block_on(sampler.first_frame(Duration::from_secs(5)))
            .expect("a frame");
        match frame.host {
            Some(h) => {
                assert!(asked);
                assert!(
                    h.memory_total > 0 && h.memory_used() <= h.memory_total,
                    "{h:?}"
                );
                assert!(h.load.is_some(), "{h:?}");
            }
            None => assert!(!asked, "asked, yet no host summary"),
        }
    }
}
