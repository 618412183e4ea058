//! One `evaluate` over 10 minutes of history at 1 Hz for 8 GPUs × 64 processes.
//! Target (issue 4): ≤ 1 ms. Run: `cargo bench --bench detect`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use gpuwatch::detect::{Input, Rules, evaluate};
use gpuwatch::history::History;
use gpuwatch::model::ProcSample;
use gpuwatch::source::scripted::ScriptedSource;
use scenario::Scenario;

fn scenario() -> String {
    let mut s = String::new();
    for g in 0..8 {
        let _ = writeln!(s, "[[gpu]]\nmemory_total = \"143771MiB\"\nutil_gpu = 80");
        for p in 0..64 {
            // A mix: flat holders, slow ramps, periodic buffers, idle ones.
            let used = match p % 4 {
                0 => "\"1GiB\"".to_string(),
                1 => format!(
                    "{{ linear = [[0, \"{}MiB\"], [600, \"{}MiB\"]] }}",
                    500 + p,
                    900 + p
                ),
                2 => "{ step = [[0, \"1GiB\"], [40, \"1.5GiB\"], [50, \"1GiB\"]], period = 50 }"
                    .to_string(),
                _ => "\"1.2GiB\"".to_string(),
            };
            let sm = if p % 4 == 3 { 0 } else { 40 };
            let _ = writeln!(
                s,
                "[[gpu.process]]\npid = {}\nused = {used}\nsm = {sm}\nhost = {{ user = \"u{}\", command = \"python job.py\" }}",
                10_000 + g * 100 + p,
                p % 3
            );
        }
    }
    s
}

fn bench(c: &mut Criterion) {
    let src = ScriptedSource::new(Scenario::parse(&scenario()).expect("valid"), "bench");
    let mut history = History::new(Duration::from_mins(10));
    let t0 = 1_800_000_000.0;
    let mut last = None;
    for i in 0..600u32 {
        let s = src.sample_at(f64::from(i), t0 + f64::from(i));
        history.push(&s);
        last = Some(s);
    }
    let sample = last.expect("samples");
    let watched = |p: &ProcSample| p.host.user.as_deref() == Some("u0");
    let open = HashMap::new();
    let rules = Rules::default();
    let input = Input {
        history: &history,
        sample: &sample,
        now: sample.taken_at,
        stale_after: Some(Duration::from_secs(4)),
        watched: &watched,
        open: &open,
    };
    let found = evaluate(&input, &rules);
    eprintln!("{} findings on the last sample", found.len());
    c.bench_function("evaluate 10 min at 1 Hz, 8 GPUs x 64 processes", |b| {
        b.iter(|| evaluate(&input, &rules));
    });
}

criterion_group!(detect_bench, bench);
criterion_main!(detect_bench);
