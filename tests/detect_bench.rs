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
