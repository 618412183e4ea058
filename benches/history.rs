//! Cost of the history per frame at scale: 8 GPUs × 200 processes, a 10-minute window sampled
//! every second (600 points per series, 1 600 process series). Measures pushing one sample
//! (append + prune), the growth of every process (Theil–Sen over the whole window and over
//! the last minute), and one whole frame (push, then growth of all 1 600 processes over the
//! window). Run: `cargo bench --bench history`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use gpuwatch::history::History;
use gpuwatch::model::{GpuSample, HostProc, Memory, ProcKind, ProcSample, Sample};

const GPUS: u32 = 8;
const PROCS: u32 = 200;
const MIB: u64 = 1 << 20;

fn sample(t: u32) -> Sample {
    let gpus = (0..GPUS)
        .map(|g| {
            let mut gpu = GpuSample::empty(g, format!("GPU-bench-{g}"));
            gpu.util_gpu = Some(80.0);
            gpu.util_mem = Some(30.0);
            gpu.processes = (0..PROCS)
                .map(|p| {
                    let pid = 10_000 + g * PROCS + p;
                    // A quarter of the processes grow by 1 MiB/s, the rest hold steady.
                    let used =
                        256 * MIB + u64::from(p) * MIB + u64::from(p % 4 == 0) * u64::from(t) * MIB;
                    ProcSample {
                        pid,
                        kind: ProcKind::Compute,
                        used_bytes: Some(used),
                        sm_percent: Some((p % 100) as f32),
                        mem_percent: Some(5.0),
                        gpu_instance: None,
                        compute_instance: None,
                        host: HostProc {
                            visible: true,
                            start_time: Some(1_700_000_000 + u64::from(pid)),
                            ..HostProc::default()
                        },
                    }
                })
                .collect();
            let used = gpu
                .processes
                .iter()
                .filter_map(|p| p.used_bytes)
                .sum::<u64>();
            let total = 143_771 * MIB;
            gpu.memory = Some(Memory {
                total,
                reserved: Some(615 * MIB),
                used,
                free: total.saturating_sub(used + 615 * MIB),
            });
            gpu
        })
        .collect();
    Sample {
        taken_at: 1.8e9 + f64::from(t),
        gpus,
        errors: Vec::new(),
        collect_seconds: 0.0,
    }
}

/// A history holding a full window, and the time of its next sample.
fn full_history() -> (History, u32) {
    let mut history = History::new(Duration::from_mins(10));
    for t in 0..600 {
        history.push(&sample(t));
    }
    (history, 600)
}

fn growth_all(history: &History, over: Duration) -> usize {
    history
        .processes()
        .filter_map(|(_, p)| p.growth_bytes_per_s(over))
        .count()
}

fn bench(c: &mut Criterion) {
    let (mut history, mut t) = full_history();
    eprintln!(
        "history: {} GPUs, {} processes, {} points per process, ~{:.1} MiB",
        history.gpus().count(),
        history.processes().count(),
        history
            .processes()
            .next()
            .map_or(0, |(_, p)| p.points().len()),
        history.memory_bytes() as f64 / MIB as f64
    );
    // Samples are built outside the measurement so the bench measures the history only.
    let template = sample(600);
    c.bench_function("history push 8x200", |b| {
        b.iter_batched(
            || {
                let mut s = template.clone();
                s.taken_at = 1.8e9 + f64::from(t);
                t += 1;
                s
            },
            |s| black_box(history.push(&s)),
            BatchSize::LargeInput,
        );
    });
    let (history, _) = full_history();
    c.bench_function("history growth 1600 procs over 10m", |b| {
        b.iter(|| black_box(growth_all(&history, Duration::from_mins(10))));
    });
    c.bench_function("history growth 1600 procs over 1m", |b| {
        b.iter(|| black_box(growth_all(&history, Duration::from_mins(1))));
    });
    let (mut history, mut t) = full_history();
    c.bench_function("history frame 8x200 (push + growth over 10m)", |b| {
        b.iter_batched(
            || {
                let mut s = template.clone();
                s.taken_at = 1.8e9 + f64::from(t);
                t += 1;
                s
            },
            |s| {
                history.push(&s);
                black_box(growth_all(&history, Duration::from_mins(10)))
            },
            BatchSize::LargeInput,
        );
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
