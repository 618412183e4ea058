//! The detection benchmark, then the detector's cost. Run: `cargo bench --bench detect`.
//!
//! First, ONE table over every bench file under tests/fixtures/detect (tune and holdout sets)
//! at 1 Hz and 4 Hz, through `gpuwatch::detect::bench` (the harness `tests/detect_bench.rs`
//! uses): per rule, expectations met, false positives, detection delay, time-to-full error and
//! time to resolve; then each failure. `GPUWATCH_BENCH_TABLE_ONLY=1` stops there.
//!
//! Then the cost: one `evaluate` over 10 minutes of history at 1 Hz for 8 GPUs × 64
//! processes. Target (issue 4): ≤ 1 ms.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use criterion::{Criterion, criterion_group};
use gpuwatch::detect::{Input, Rules, evaluate};
use gpuwatch::history::History;
use gpuwatch::model::ProcSample;
use gpuwatch::source::scripted::ScriptedSource;
use scenario::Scenario;

fn scenario(leak_every: usize) -> String {
    let mut s = String::new();
    for g in 0..8 {
        let _ = writeln!(s, "[[gpu]]\nmemory_total = \"143771MiB\"\nutil_gpu = 80");
        for p in 0..64 {
            // A mix: flat holders, slow ramps, periodic buffers, idle ones.
            let used = if p % leak_every == 1 {
                format!(
                    "{{ linear = [[0, \"{}MiB\"], [600, \"{}MiB\"]] }}",
                    500 + p,
                    900 + p
                )
            } else if p % 4 == 2 {
                "{ step = [[0, \"1GiB\"], [40, \"1.5GiB\"], [50, \"1GiB\"]], period = 50 }"
                    .to_string()
            } else if p % 4 == 3 {
                "\"1.2GiB\"".to_string()
            } else {
                "\"1GiB\"".to_string()
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

/// `bench/tui_cpu.py`'s load: 8 GPUs x 50 processes whose memory all ramps (a 60 s sawtooth),
/// so every GPU is filling and every process drives it: the detector's worst frame.
fn all_ramping() -> String {
    let mut s = String::new();
    for g in 0..8 {
        let _ = writeln!(
            s,
            "[[gpu]]\nmemory_total = \"143771MiB\"\nbase_used = \"700MiB\"\nutil_gpu = 80"
        );
        for p in 0..50 {
            let _ = writeln!(
                s,
                "[[gpu.process]]\npid = {}\nused = {{ linear = [[0, \"{}MiB\"], [60, \"{}MiB\"]], period = 60 }}\nsm = 40",
                10_000 + g * 100 + p,
                256 + p * 16,
                512 + p * 32
            );
        }
    }
    s
}

fn bench(c: &mut Criterion) {
    bench_scenario(
        c,
        &all_ramping(),
        "evaluate 10 min at 1 Hz, 8 GPUs x 50 processes all ramping (tui_cpu's load)",
        false,
    );
    // Typical: one process in 16 leaking. Stress: one in 4 (128 leak findings each time).
    bench_case(c, 16, "evaluate 10 min at 1 Hz, 8 GPUs x 64 processes");
    bench_case(
        c,
        4,
        "evaluate 10 min at 1 Hz, 8 GPUs x 64 processes, a quarter leaking",
    );
}

fn bench_case(c: &mut Criterion, leak_every: usize, name: &str) {
    bench_scenario(c, &scenario(leak_every), name, leak_every == 16);
}

fn bench_scenario(c: &mut Criterion, text: &str, name: &str, growth_too: bool) {
    let src = ScriptedSource::new(Scenario::parse(text).expect("valid"), "bench");
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
    let mut by_rule = std::collections::BTreeMap::new();
    for f in &found {
        *by_rule.entry(f.id.rule.name()).or_insert(0) += 1;
    }
    eprintln!("{} findings on the last sample: {by_rule:?}", found.len());
    c.bench_function(name, |b| {
        b.iter(|| evaluate(&input, &rules));
    });
    if growth_too {
        // What a front end's growth columns cost per frame: the one growth estimate of every
        // GPU and every process.
        c.bench_function("gpu_growth + process_growth, 8 GPUs x 64 processes", |b| {
            b.iter(|| {
                let gpus = history
                    .gpus()
                    .filter_map(|(_, h)| gpuwatch::history::gpu_growth(h, &rules))
                    .count();
                let procs = history
                    .processes()
                    .filter_map(|(_, ph)| gpuwatch::history::process_growth(ph, &rules))
                    .count();
                (gpus, procs)
            });
        });
    }
}

fn table() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/detect");
    let mut outcomes = Vec::new();
    let files = gpuwatch::detect::bench::files(&dir);
    let started = std::time::Instant::now();
    for path in &files {
        match gpuwatch::detect::bench::run_file(path) {
            Ok(o) => outcomes.extend(o),
            Err(e) => eprintln!("{e}"),
        }
    }
    println!(
        "Detection benchmark: {} scenario files at 1 Hz and 4 Hz ({:.1} s)\n",
        files.len(),
        started.elapsed().as_secs_f64()
    );
    println!("{}", gpuwatch::detect::bench::table(&outcomes));
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.passed)
        .map(gpuwatch::detect::bench::describe)
        .collect();
    if failed.is_empty() {
        println!("every expectation holds");
    } else {
        println!("failures:\n{}", failed.join("\n"));
    }
}

criterion_group!(detect_bench, bench);

fn main() {
    table();
    if std::env::var_os("GPUWATCH_BENCH_TABLE_ONLY").is_some() {
        return;
    }
    detect_bench();
    Criterion::default().configure_from_args().final_summary();
}
