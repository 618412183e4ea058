//! CPU cost of one fast sample, NVML excluded: the live source (`NvmlSource`) over the NVML test
//! double — whose calls cost well under a microsecond — plus host enrichment and frame assembly,
//! exactly what the sampler's fast thread does each tick.
//!
//! Targets (issue 2): 1 GPU × 4 processes ≤ 0.3 ms; 8 GPUs × 64 processes ≤ 2 ms. The host
//! thread's `/proc` refresh for the same PIDs is measured beside it, since it is the other
//! recurring cost of a live sampler.
//! Run: `cargo bench --bench sample`. The processes are real (`sleep`), so `/proc` is read for
//! real; in steady state the host thread owns those reads (see `sampler.rs`), and this bench
//! measures the fast path as it runs in steady state.

#[path = "../tests/common/mod.rs"]
mod common;

use std::fmt::Write as _;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use criterion::Criterion;
use gpuwatch::sampler::Collector;
use gpuwatch::source::CallProbe;
use gpuwatch::source::nvml::{NvmlOptions, NvmlSource};
use gpuwatch::source::procinfo::ProcInfo;

fn scenario(gpus: usize, procs: usize, pids: &[u32]) -> String {
    let mut s = String::from("[clock]\nfreeze = 30.0\n");
    for g in 0..gpus {
        let _ = writeln!(
            s,
            "[[gpu]]\nmemory_total = \"143771MiB\"\nbase_used = \"700MiB\"\nutil_gpu = 80"
        );
        for p in 0..procs {
            let pid = pids[g * procs + p];
            let _ = writeln!(
                s,
                "[[gpu.process]]\npid = {pid}\nused = \"{}MiB\"\nsm = {}\nmem = 5",
                256 + p * 64,
                p % 100
            );
        }
    }
    s
}

/// The double reads its scenario path from `FAKE_NVML_SCENARIO` at `nvmlInit`. Setting the
/// environment in-process needs `unsafe` (edition 2024), which this crate forbids, so the bench
/// re-executes itself with the variable set, and rewrites that file for each case (the double
/// reloads a scenario file when it changes).
fn scenario_path() -> PathBuf {
    common::target_dir().join("bench-fake-nvml-scenario.toml")
}

fn bench_case(c: &mut Criterion, gpus: usize, procs: usize) {
    let sleepers: Vec<common::Sleeper> = (0..gpus * procs)
        .map(|_| common::Sleeper::spawn())
        .collect();
    let pids: Vec<u32> = sleepers.iter().map(common::Sleeper::pid).collect();
    std::fs::write(scenario_path(), scenario(gpus, procs, &pids)).expect("write scenario");
    // Let the double's reload check (every 50 ms) see the new file.
    std::thread::sleep(Duration::from_millis(120));
    let source = NvmlSource::open(NvmlOptions {
        library: Some(common::fake_nvml().to_path_buf()),
        ..NvmlOptions::default()
    })
    .expect("the double opens");
    let mut collector = Collector::standalone(Box::new(source));
    let probe = CallProbe::default();
    // Warm: every PID seen once, as in steady state.
    let first = collector.collect(&probe);
    assert_eq!(first.gpus.len(), gpus);
    assert!(first.gpus.iter().all(|g| g.processes.len() == procs));
    assert!(first.gpus[0].processes.iter().all(|p| p.host.visible));
    c.bench_function(
        &format!("fast sample {gpus} GPU x {procs} processes"),
        |b| {
            b.iter(|| collector.collect(&probe));
        },
    );
    // What the host thread does once per interval, off the fast path: /proc for every PID.
    let mut procinfo = ProcInfo::new().expect("procinfo");
    procinfo.enrich(&pids);
    c.bench_function(
        &format!("host refresh {} PIDs (host thread)", pids.len()),
        |b| {
            b.iter(|| procinfo.enrich(&pids));
        },
    );
    drop(sleepers);
}

/// `GPUWATCH_BENCH_REAL=1`: the same measurement on the system's NVML and whatever processes
/// run on the GPUs (NVML's own cost included), for a machine with a GPU.
fn bench_real(c: &mut Criterion) {
    let source = NvmlSource::open(NvmlOptions::default()).expect("the system's NVML opens");
    let mut collector = Collector::standalone(Box::new(source));
    let probe = CallProbe::default();
    let first = collector.collect(&probe);
    let procs: usize = first.gpus.iter().map(|g| g.processes.len()).sum();
    eprintln!(
        "real driver: {} GPU(s), {procs} process(es); source part of the first sample {:.3} ms",
        first.gpus.len(),
        first.collect_seconds * 1e3
    );
    c.bench_function(
        &format!(
            "real NVML fast sample {} GPU x {procs} processes",
            first.gpus.len()
        ),
        |b| b.iter(|| collector.collect(&probe)),
    );
}

fn main() {
    if std::env::var_os("GPUWATCH_BENCH_REAL").is_some() {
        let mut c = Criterion::default().configure_from_args();
        bench_real(&mut c);
        c.final_summary();
        return;
    }
    if std::env::var_os("FAKE_NVML_SCENARIO").is_none() {
        let status = Command::new(std::env::current_exe().expect("bench binary"))
            .args(std::env::args_os().skip(1))
            .env("FAKE_NVML_SCENARIO", scenario_path())
            .status()
            .expect("re-exec the bench");
        std::process::exit(status.code().unwrap_or(1));
    }
    let mut c = Criterion::default().configure_from_args();
    bench_case(&mut c, 1, 4);
    bench_case(&mut c, 8, 64);
    c.final_summary();
}
