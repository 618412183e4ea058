//! Throughput of the streaming triage `Scanner` (MiB/s), and of `gpuwatch explain`'s reader
//! (`triage::scan`) over two shapes of log: short lines (80 bytes, the worst case: the cost is
//! per line) and long lines (4 KiB, the cost is per byte).
//! Run: `cargo bench --bench triage`.

use std::fmt::Write as _;
use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gpuwatch::triage::{Failure, Scanner, scan};

/// ~`mib` MiB of a realistic log: step lines, warnings, tqdm bars with `\r`, ANSI colours,
/// a few tracebacks of handled exceptions, and a PyTorch OOM at the end.
fn log(mib: usize) -> String {
    let mut s = String::with_capacity(mib << 20);
    let mut step = 0u64;
    while s.len() < mib << 20 {
        step += 1;
        let _ = writeln!(
            s,
            "2026-11-29 18:44:{:02} | INFO | train.py:88 | epoch 3 step {step} loss={:.4} lr=3.0e-4 grad_norm=0.91 tokens/s=48211 mem alloc=61.22GiB reserved=64.00GiB",
            step % 60,
            1.0 / (step as f64)
        );
        if step.is_multiple_of(7) {
            let _ = writeln!(
                s,
                "\r 45%|████▌     | 450/1000 [00:12<00:15, 36.1it/s]\r 46%|████▋     | 460/1000 [00:12<00:14, 36.2it/s]"
            );
        }
        if step.is_multiple_of(11) {
            let _ = writeln!(
                s,
                "\x1b[33mWARNING\x1b[0m torch/utils/data/dataloader.py:557: UserWarning: This DataLoader will create 8 worker processes in total."
            );
        }
        if step.is_multiple_of(97) {
            s.push_str("Traceback (most recent call last):\n  File \"/opt/venv/lib/python3.12/site-packages/datasets/load.py\", line 10, in load\n    raise KeyError(k)\nKeyError: 'label'\n");
        }
    }
    s.push_str("Traceback (most recent call last):\n  File \"train.py\", line 42, in <module>\n    loss.backward()\n");
    s.push_str("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB. GPU 0 has a total capacity of 139.80 GiB of which 5.94 MiB is free. Process 1014 has 6.51 GiB memory in use. Including non-PyTorch memory, this process has 120.51 GiB memory in use. Of the allocated memory 119.56 GiB is allocated by PyTorch, and 224.87 MiB is reserved by PyTorch but unallocated.\n");
    s
}

const OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB. GPU 0 has a total capacity of 139.80 GiB of which 5.94 MiB is free.\n";

/// ~`mib` MiB of 80-byte lines (79 characters and a newline), then an OOM.
fn short_lines(mib: usize) -> String {
    let mut s = String::with_capacity(mib << 20);
    let mut step = 0u64;
    while s.len() < mib << 20 {
        step += 1;
        let line = format!(
            "step {step} loss={:.4} lr=3.0e-4 tokens/s=48211 alloc=61.22GiB reserved=64GiB{:80}",
            1.0 / (step as f64),
            ""
        );
        s.push_str(&line[..79]);
        s.push('\n');
    }
    s.push_str(OOM);
    s
}

/// ~`mib` MiB of 4 KiB lines (metrics dumps), then an OOM.
fn long_lines(mib: usize) -> String {
    let mut s = String::with_capacity(mib << 20);
    let mut step = 0u64;
    while s.len() < mib << 20 {
        step += 1;
        let mut line = format!("step {step}");
        let mut i = 0u64;
        while line.len() < 4095 {
            let _ = write!(line, " metric_{i}={:.5}", ((step * i) % 997) as f64 / 997.0);
            i += 1;
        }
        s.push_str(&line[..4095]);
        s.push('\n');
    }
    s.push_str(OOM);
    s
}

fn bench_explain(c: &mut Criterion) {
    for (name, text) in [
        ("explain: 100 MiB of 80-byte lines", short_lines(100)),
        ("explain: 100 MiB of 4 KiB lines", long_lines(100)),
        ("explain: 100 MiB training log", log(100)),
    ] {
        let mut group = c.benchmark_group("triage");
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.sample_size(10);
        group.bench_function(name, |b| {
            b.iter(|| {
                let a = scan(black_box(text.as_bytes())).expect("in memory");
                assert!(matches!(a.failure, Failure::OutOfMemory(_)));
                a
            });
        });
        group.finish();
    }
}

fn bench(c: &mut Criterion) {
    let text = log(100);
    let mut group = c.benchmark_group("triage");
    group.throughput(Throughput::Bytes(text.len() as u64));
    group.sample_size(10);
    group.bench_function("scanner over a 100 MiB training log", |b| {
        b.iter(|| {
            let mut scanner = Scanner::new();
            for line in black_box(&text).split('\n') {
                scanner.push_line(line);
            }
            let a = scanner.finish();
            assert!(matches!(a.failure, Failure::OutOfMemory(_)));
            a
        });
    });
    group.finish();
}

criterion_group!(benches, bench, bench_explain);
criterion_main!(benches);
