//! The history store at scale: 8 GPUs × 64 processes. Setup fills a file with 7 days of
//! data under the default retention (a sample a minute for the first 7 days less an hour,
//! downsampled by `maintain`, then the last hour at 1 Hz at full resolution), and prints the
//! bytes per day of the downsampled data and of the full-resolution hour. Measures writing one
//! sample, `who` on recent (full-resolution) and old (downsampled) data, and `peaks` over the
//! last hour. Run: `cargo bench --bench store`.
//!
//! Measured on a 2-core VM (release): downsampled 36.9 MiB/day, full-resolution hour 51.2 MiB
//! (full resolution all day would be ≈ 1.2 GiB/day), so the 200 MiB bound keeps ≈ 4.9 days at
//! this scale; `who` 38 µs (recent) / 40 µs (3 days ago); `peaks` over the last hour 0.88 s;
//! writing one sample (512 process rows) 1.1 ms; setup 41 s.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use gpuwatch::model::{GpuSample, HostProc, Memory, ProcKind, ProcSample, Sample};
use gpuwatch::store::{GpuRef, Store};

const GPUS: u32 = 8;
const PROCS: u32 = 64;
const T0: f64 = 1_764_000_000.0;
const DAY: f64 = 86_400.0;

fn sample(t: f64) -> Sample {
    let k = t as u64;
    Sample {
        taken_at: t,
        gpus: (0..GPUS)
            .map(|g| {
                let mut gpu = GpuSample::empty(g, format!("GPU-bench-{g}"));
                gpu.memory = Some(Memory {
                    total: 141 << 30,
                    reserved: Some(1 << 29),
                    used: (60 << 30) + (k % 1000) * 4096,
                    free: 80 << 30,
                });
                gpu.util_gpu = Some(80.0);
                gpu.temperature_c = Some(60);
                gpu.power_watts = Some(500.0);
                gpu.processes = (0..PROCS)
                    .map(|p| ProcSample {
                        // Processes are replaced every 6 hours.
                        pid: 10_000 + g * PROCS + p + (k / 21_600) as u32 * 1000,
                        kind: ProcKind::Compute,
                        used_bytes: Some((u64::from(p) + 1) * 700_000_000 + (k % 977) * 2_097_152),
                        sm_percent: Some((p % 100) as f32),
                        mem_percent: None,
                        gpu_instance: None,
                        compute_instance: None,
                        host: HostProc {
                            visible: true,
                            user: Some(format!("user{}", p % 7)),
                            command: Some(format!("python train.py --rank {p}")),
                            start_time: Some(1_763_000_000 + k / 21_600),
                            ..HostProc::default()
                        },
                    })
                    .collect();
                gpu
            })
            .collect(),
        errors: Vec::new(),
        collect_seconds: 0.0,
    }
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("history.sqlite")).unwrap();
    let started = Instant::now();
    let end = T0 + 7.0 * DAY;
    let hour_start = end - 3600.0;
    let mut t = T0;
    while t < hour_start {
        store.write(&sample(t)).unwrap();
        t += 60.0;
        if (t - T0) % 21_600.0 < 60.0 {
            store.maintain(t).unwrap();
        }
    }
    let steps_only = store.maintain(hour_start + 3600.0).unwrap();
    let mut oldest = f64::MAX;
    for peak in store.peaks(0.0).unwrap() {
        oldest = oldest.min(peak.at);
    }
    let days_kept = (hour_start - oldest) / DAY;
    let steps_bytes = store.used_bytes().unwrap();
    let mut t = hour_start;
    while t < end {
        store.write(&sample(t)).unwrap();
        t += 1.0;
    }
    let total = store.used_bytes().unwrap();
    let report = store.maintain(end).unwrap();
    eprintln!(
        "setup {:.0}s; downsampled: {:.1} MiB for {days_kept:.2} days = {:.1} MiB/day; \
         full-resolution hour: {:.1} MiB; file after maintenance {:.1} MiB (bound 200 MiB; \
         steps-only maintenance left {:.1} MiB)",
        started.elapsed().as_secs_f64(),
        steps_bytes as f64 / 1_048_576.0,
        steps_bytes as f64 / 1_048_576.0 / days_kept,
        (total - steps_bytes) as f64 / 1_048_576.0,
        report.bytes as f64 / 1_048_576.0,
        steps_only.bytes as f64 / 1_048_576.0,
    );

    let mut group = c.benchmark_group("store_8x64");
    group.measurement_time(Duration::from_secs(3));
    group.sample_size(20);
    group.bench_function("who_recent", |b| {
        b.iter(|| {
            black_box(
                store
                    .who(&GpuRef::Index(3), black_box(end - 600.5))
                    .unwrap(),
            )
        });
    });
    group.bench_function("who_3_days_ago", |b| {
        b.iter(|| {
            black_box(
                store
                    .who(
                        &GpuRef::Uuid("GPU-bench-5".into()),
                        black_box(end - 3.0 * DAY),
                    )
                    .unwrap(),
            )
        });
    });
    group.bench_function("peaks_last_hour", |b| {
        b.iter(|| black_box(store.peaks(black_box(end - 3600.0)).unwrap()));
    });
    let mut t = end;
    group.bench_function("write_one_sample", |b| {
        b.iter(|| {
            t += 1.0;
            store.write(&sample(t)).unwrap();
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
