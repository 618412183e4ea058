//! Feeds the real H200 leak-to-OOM recording (4 Hz) into a `History` and checks the growth
//! estimates against what happened: pid 1055 leaks ~2.2 GiB/s until the GPU fills at ≈ 73.8 s,
//! pid 1030 (a healthy trainer) steps up at ≈ 25 s and then plateaus.

use std::path::Path;
use std::time::Duration;

use gpuwatch::history::{History, PushOutcome};
use gpuwatch::model::Sample;
use gpuwatch::record::Recording;

const GIB: f64 = (1u64 << 30) as f64;
const MIB: f64 = (1u64 << 20) as f64;
const GPU: &str = "GPU-h200-reference-0";
const LEAKER: u32 = 1055;
const TRAINER: u32 = 1030;

fn leak_to_oom() -> Recording {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/h200/leak-to-oom.recording.jsonl");
    Recording::read(&path).expect("read recording")
}

/// Seconds after the first sample at which the GPU first has less than 1 GiB free.
fn fill_time(samples: &[Sample]) -> f64 {
    let t0 = samples[0].taken_at;
    samples
        .iter()
        .find(|s| s.gpus[0].memory.is_some_and(|m| (m.free as f64) < GIB))
        .map(|s| s.taken_at - t0)
        .expect("the GPU fills")
}

fn growth_of(history: &History, sample: &Sample, pid: u32, over: Duration) -> Option<f64> {
    let gpu = sample.gpus.iter().find(|g| g.uuid == GPU).expect("gpu");
    let row = gpu
        .processes
        .iter()
        .find(|p| p.pid == pid)
        .expect("process in sample");
    let (_, ph) = history.process_for(GPU, row).expect("process history");
    ph.growth_bytes_per_s(over)
}

#[test]
fn leak_to_oom_growth_and_time_to_full() {
    let recording = leak_to_oom();
    let samples = &recording.samples;
    let t0 = samples[0].taken_at;
    let fills_at = fill_time(samples);
    assert!((fills_at - 73.8).abs() < 0.5, "fills at {fills_at:.2} s");

    let over = Duration::from_secs(15);
    let mut history = History::new(Duration::from_mins(10));
    let mut at_40 = None;
    for s in samples {
        assert_eq!(history.push(s), PushOutcome::Appended);
        if s.taken_at - t0 >= 40.0 {
            at_40 = Some(s);
            break;
        }
    }
    let now = at_40.expect("the recording reaches 40 s");
    let elapsed = now.taken_at - t0;

    let leak = growth_of(&history, now, LEAKER, over).expect("leaker warm");
    let plateau = growth_of(&history, now, TRAINER, over).expect("trainer warm");
    let gpu = history.gpu(GPU).expect("gpu history");
    let gpu_slope = gpu.growth_bytes_per_s(over).expect("gpu warm");
    let ttf = gpu.time_to_full(over).expect("ramp holds").as_secs_f64();
    let remaining = fills_at - elapsed;
    eprintln!(
        "at {elapsed:.2} s: pid {LEAKER} {:.3} GiB/s, pid {TRAINER} {:.3} MiB/s, GPU {:.3} GiB/s, \
         time to full {ttf:.2} s (real {remaining:.2} s, error {:+.1} %)",
        leak / GIB,
        plateau / MIB,
        gpu_slope / GIB,
        (ttf / remaining - 1.0) * 100.0
    );
    assert!((1.5 * GIB..=3.0 * GIB).contains(&leak), "leak {leak}");
    assert!(plateau.abs() < 50.0 * MIB, "plateau {plateau}");
    assert!(
        (ttf - remaining).abs() <= 0.2 * remaining,
        "ttf {ttf} vs {remaining}"
    );
}

#[test]
fn leak_to_oom_whole_recording() {
    let recording = leak_to_oom();
    let mut history = History::new(Duration::from_mins(10));
    let mut appended = 0;
    for s in &recording.samples {
        if history.push(s) == PushOutcome::Appended {
            appended += 1;
        }
    }
    assert_eq!(appended, recording.samples.len());
    let (key, leaker) = history
        .processes_on(GPU)
        .find(|(k, _)| k.pid == LEAKER)
        .expect("the killed leaker is still in the window");
    assert_eq!(key.start_time, None);
    // It was killed by the OOM: no longer seen, its peak is the GPU nearly full.
    let last = history.last_time().expect("pushed");
    assert!(leaker.last_seen() < last);
    let (peak, _) = leaker.peak_used().expect("peak");
    assert!(peak as f64 > 115.0 * GIB, "peak {peak}");
    let pids: Vec<u32> = history.processes_on(GPU).map(|(k, _)| k.pid).collect();
    assert_eq!(pids, vec![1014, TRAINER, LEAKER]);
    // Series have one point per sample where the GPU reported memory.
    let gpu = history.gpu(GPU).expect("gpu");
    assert_eq!(gpu.points().len(), recording.samples.len());
    assert_eq!(
        gpu.used_series().count(),
        recording
            .samples
            .iter()
            .filter(|s| s.gpus[0].memory.is_some())
            .count()
    );
}
