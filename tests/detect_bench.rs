//! The detection benchmark as tests: every bench file under tests/fixtures/detect (tune and
//! holdout) at 1 Hz and at 4 Hz, through `gpuwatch::detect::bench` (the one harness). Each
//! expectation and prohibition must hold; a failure names the scenario, the set, the rate, the
//! rule and what happened. `cargo bench --bench detect` prints the table.

use std::path::{Path, PathBuf};

use gpuwatch::detect::bench;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/detect")
}

fn check(set: &str, name: &str) {
    let path = dir().join(set).join(format!("{name}.toml"));
    let outcomes = bench::run_file(&path).unwrap_or_else(|e| panic!("{e}"));
    assert!(!outcomes.is_empty(), "{name}: nothing judged");
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.passed)
        .map(bench::describe)
        .collect();
    assert!(failed.is_empty(), "\n{}\n", failed.join("\n"));
}

macro_rules! cases {
    ($set:literal: $($test:ident => $file:literal),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                check($set, $file);
            }
        )*
    };
}

mod tune {
    use super::check;
    cases!("tune":
        h200_leak_to_oom => "h200-leak-to-oom",
        h200_leak_to_oom_load => "h200-leak-to-oom-load",
        h200_leak_to_oom_ramp => "h200-leak-to-oom-ramp",
        h200_leak_to_oom_after => "h200-leak-to-oom-after",
        h200_leak_intruder => "h200-leak-intruder",
        h200_leak_intruder_visit => "h200-leak-intruder-visit",
        h200_leak_intruder_load => "h200-leak-intruder-load",
        h200_loader_jax => "h200-loader-jax",
        staggered_model_loads => "staggered-model-loads",
        torchrun_ranks => "torchrun-ranks",
        eval_buffers => "eval-buffers",
        checkpoint_reload => "checkpoint-reload",
        dataloader_workers => "dataloader-workers",
        jax_prealloc => "jax-prealloc",
        restart_new_pid => "restart-new-pid",
        fast_staircase_restart => "fast-staircase-restart",
        intruder_arrives_and_leaves => "intruder-arrives-and-leaves",
        slow_leak_50mib => "slow-leak-50mib",
        fast_leak_to_oom => "fast-leak-to-oom",
        freed_in_one_step => "freed-in-one-step",
        external_static_holders => "external-static-holders",
        external_in_the_way => "external-in-the-way",
        demo => "demo",
    );
}

mod holdout {
    use super::check;
    cases!("holdout":
        staggered_loads_24g => "staggered-loads-24g",
        torchrun_8_ranks_40g => "torchrun-8-ranks-40g",
        eval_buffers_48g => "eval-buffers-48g",
        checkpoint_reload_3_jobs => "checkpoint-reload-3-jobs",
        fast_leak_24g => "fast-leak-24g",
        slow_leak_16g_noisy => "slow-leak-16g-noisy",
        intruder_24g => "intruder-24g",
        restart_under_new_pid_h100 => "restart-under-new-pid-h100",
        coarse_step_leak => "coarse-step-leak",
    );
}

/// Written after the first holdout set had been looked at (one of its cases led to a change),
/// before that change: never tuned on.
mod holdout2 {
    use super::check;
    cases!("holdout2":
        five_loads_with_contexts_h200 => "five-loads-with-contexts-h200",
        medium_leak_48g => "medium-leak-48g",
        intruder_40g_two_watched => "intruder-40g-two-watched",
        periodic_reload_80g => "periodic-reload-80g",
    );
}

/// Written after cases of both earlier holdout sets had prompted changes, before the last of
/// them: never tuned on.
mod holdout3 {
    use super::check;
    cases!("holdout3":
        loads_2s_apart_a100 => "loads-2s-apart-a100",
        leak_every_2s_h200 => "leak-every-2s-h200",
        leak_then_freed_16g => "leak-then-freed-16g",
    );
}

/// Written from the targets and from what real workloads do, without reading the
/// detector's internals, and committed before any run: never tuned on.
mod holdout4 {
    use super::check;
    cases!("holdout4":
        llm_server_3_shards_kv_80g => "llm-server-3-shards-kv-80g",
        vllm_tp2_prealloc_90pct_94g => "vllm-tp2-prealloc-90pct-94g",
        training_warmup_eval_40g => "training-warmup-eval-40g",
        slow_leak_200mib_24g => "slow-leak-200mib-24g",
        second_job_arrives_one_step_141g => "second-job-arrives-one-step-141g",
        restart_every_60s_24g => "restart-every-60s-24g",
        dataloader_8_workers_per_epoch_40g => "dataloader-8-workers-per-epoch-40g",
        cache_ramp_stops_after_40s_94g => "cache-ramp-stops-after-40s-94g",
    );

    // Missed at issue 12's first stop (time to full off by 26 % about 16 s into a 1 GiB/s
    // ramp after a 6 GiB load: the refined rate carried the load); the fix (a longer window
    // with a step in it does not refine the rate) was found on it, so it is tuned on now.
    cases!("holdout4":
        fast_leak_1gibps_oom_80g => "fast-leak-1gibps-oom-80g",
    );
}

/// Written blind (from the detector's promises and the scenarios' physics, without reading the
/// detector) and committed before any run: never tuned on.
mod holdout5 {
    use super::check;
    cases!("holdout5":
        h200_leak_after_10min_plateau_141g => "h200-leak-after-10min-plateau-141g",
        fast_ramp_4gibps_oom_80g => "fast-ramp-4gibps-oom-80g",
        two_leakers_30_and_10_mibps_l40s => "two-leakers-30-and-10-mibps-l40s",
        pipeline_4_stages_staggered_4x80g => "pipeline-4-stages-staggered-4x80g",
        grad_accum_buffers_every_16s_40g => "grad-accum-buffers-every-16s-40g",
        torchelastic_restart_new_pid_reload_94g => "torchelastic-restart-new-pid-reload-94g",
        unattributed_memory_ramp_to_full_l40s => "unattributed-memory-ramp-to-full-l40s",
        bursty_util_flat_memory_900s_141g => "bursty-util-flat-memory-900s-141g",
    );

    // Missed at the first run (written and committed before it) and fixed after it, so tuned
    // on since: a 15 MiB/min leak was never suspected (an increment between the leak rule's
    // points had to pass the 4 MiB process noise); a flat holder with 16 MiB of noise was
    // named beside a ramp at 4 Hz (a process ramps now only out of its own scatter); the
    // watched flat job was named beside an intruder's 50 MiB/s (culprits are now the fastest
    // that make 95 % of the drivers' growth).
    cases!("holdout5":
        very_slow_leak_15mib_per_min_20min_a100 => "very-slow-leak-15mib-per-min-20min-a100",
        ramp_stops_at_2min_before_full_141g => "ramp-stops-at-2min-before-full-141g",
        intruder_grows_on_watched_gpu_80g => "intruder-grows-on-watched-gpu-80g",
    );

    // Missed at the first run and at issue 12's second stop (a sawtooth that trends up
    // 102.4 MiB/s, +4 GiB per 16 s and 2 GiB freed each 20 s: each free re-anchored the 15 s
    // window, so it opened 24 times, then twice, with a tooth's rate, 256 MiB/s, for its time
    // to full: off by up to 64 %). Fixed on it since (a trend through partial frees is the
    // line of its peaks; a partial free holds while the drivers are all there), so tuned on.
    cases!("holdout5":
        sawtooth_leak_partial_frees_80g => "sawtooth-leak-partial-frees-80g",
    );
}

/// Every bench file is one of the tests above (a file added without a test would be skipped).
#[test]
fn every_bench_file_is_a_test() {
    let src = include_str!("detect_bench.rs");
    for path in bench::files(&dir()) {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        assert!(
            src.contains(&format!("=> \"{name}\"")),
            "{} has no test in tests/detect_bench.rs",
            path.display()
        );
    }
}

/// A bench file that names an unknown key, a bad rule or a missing recording is refused with
/// a message naming the file and the problem.
#[test]
fn a_bad_bench_file_is_refused_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = tmp.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let gpu = "[[gpu]]\nmemory_total = \"1GiB\"\n";
    let cases = [
        (
            "no-duration.toml",
            format!("[[forbid]]\nrule = \"filling-up\"\n{gpu}"),
            "duration",
        ),
        (
            "bad-rule.toml",
            format!("[bench]\nduration = 5\n[[forbid]]\nrule = \"filling\"\n{gpu}"),
            "[[forbid]]",
        ),
        (
            "typo.toml",
            format!(
                "[bench]\nduration = 5\n[[expect]]\nrule = \"filling-up\"\nopens_between = [0, 1]\neta = 0.2\n{gpu}"
            ),
            "eta",
        ),
        (
            "nothing.toml",
            format!("[bench]\nduration = 5\n{gpu}"),
            "test nothing",
        ),
        (
            "no-rec.toml",
            "[bench]\nrecording = \"nope.jsonl\"\n[[forbid]]\nrule = \"filling-up\"\n".to_string(),
            "recording",
        ),
    ];
    for (name, text, needle) in cases {
        let err = bench::load(&write(name, &text))
            .err()
            .unwrap_or_else(|| panic!("{name} accepted"));
        assert!(err.contains(name) && err.contains(needle), "{name}: {err}");
    }
}
