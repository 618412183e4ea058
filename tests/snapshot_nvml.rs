//! `gpuwatch snapshot` and `pick` end to end: the real binary, the real `nvml-wrapper` path,
//! the NVML test double (`crates/fake-nvml`) underneath, and real child processes whose PIDs the
//! scenarios name, so that `/proc` enrichment runs for real.

#![allow(clippy::many_single_char_names)]

mod common;

use common::{ScenarioFile, Sleeper, fails_with, gpuwatch_cmd, gpuwatch_on, stderr, stdout};
use serde_json::Value;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

fn json(o: &std::process::Output) -> Value {
    assert!(o.status.success(), "gpuwatch failed: {}", stderr(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

fn procs(gpu: &Value) -> Vec<&Value> {
    gpu["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .collect()
}

fn two_gpu_scenario(a: u32, b: u32, c: u32) -> String {
    format!(
        r#"
[clock]
freeze = 10.0

[[gpu]]
name = "NVIDIA H200"
uuid = "GPU-00000000-1111-2222-3333-000000000000"
memory_total = "143771MiB"
memory_reserved = "616MiB"
base_used = "1500MiB"
util_gpu = 93
util_mem = 40
temperature = 61
power = 455.5
sm_clock = 1980

[[gpu.process]]
pid = {a}
used = {{ linear = [[0, "1GiB"], [20, "21GiB"]] }}
sm = 71
mem = 12

[[gpu.process]]
pid = {b}
type = "both"
used = "2GiB"
sm = 0

[[gpu]]
name = "NVIDIA H200"
uuid = "GPU-00000000-1111-2222-3333-000000000001"
memory_total = "143771MiB"
memory_reserved = "616MiB"
util_gpu = 3

[[gpu.process]]
pid = {c}
type = "graphics"
used = "512MiB"
"#
    )
}

#[test]
fn snapshot_json_lists_every_gpu_and_process_with_unattributed_memory() {
    let (a, b, c) = (Sleeper::spawn(), Sleeper::spawn(), Sleeper::spawn());
    let sc = ScenarioFile::new(&two_gpu_scenario(a.pid(), b.pid(), c.pid()));
    let v = json(&gpuwatch_on(&sc, &["snapshot", "--json"]));

    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["source"]["kind"], "live");
    assert_eq!(v["source"]["driver_version"], "580.159.04");
    let gpus = v["gpus"].as_array().expect("gpus");
    assert_eq!(gpus.len(), 2);

    let g0 = &gpus[0];
    assert_eq!(g0["uuid"], "GPU-00000000-1111-2222-3333-000000000000");
    assert_eq!(g0["memory"]["total_bytes"], 143_771 * MIB);
    assert_eq!(g0["memory"]["reserved_bytes"], 616 * MIB);
    // used = base 1500 MiB + 11 GiB (halfway up the ramp at t = 10) + 2 GiB.
    let used = 1500 * MIB + 11 * GIB + 2 * GIB;
    assert_eq!(g0["memory"]["used_bytes"], used);
    assert_eq!(g0["memory"]["free_bytes"], 143_771 * MIB - 616 * MIB - used);
    assert_eq!(g0["unattributed_bytes"], 1500 * MIB);
    assert_eq!(g0["utilization_percent"], 93.0);
    assert_eq!(g0["temperature_celsius"], 61);
    assert_eq!(g0["power_watts"], 455.5);

    // Sorted by GPU memory; compute+graphics merged into one C+G row.
    let p = procs(g0);
    assert_eq!(p.len(), 2);
    assert_eq!(p[0]["pid"], a.pid());
    assert_eq!(p[0]["type"], "C");
    assert_eq!(p[0]["used_bytes"], 11 * GIB);
    assert_eq!(p[0]["sm_percent"], 71.0);
    assert_eq!(p[0]["memory_bandwidth_percent"], 12.0);
    assert_eq!(p[1]["pid"], b.pid());
    assert_eq!(p[1]["type"], "C+G");
    // A process that ran no kernel has 0 %, not n/a: the feature works on this device.
    assert_eq!(p[1]["sm_percent"], 0.0);

    // Host enrichment from /proc, for real.
    let me = std::env::var("USER").ok();
    for proc in &p {
        assert_eq!(proc["visible"], true);
        assert_eq!(proc["name"], "sleep");
        assert!(proc["command"].as_str().unwrap_or("").contains("sleep 300"));
        assert_eq!(proc["ppid"], std::process::id());
        if let Some(me) = &me {
            assert_eq!(proc["user"], me.as_str());
        }
        // The invoking user's processes are watched by default.
        assert_eq!(proc["watched"], true);
        assert!(proc["rss_bytes"].as_u64().unwrap_or(0) > 0);
    }
    assert_eq!(g0["mine_bytes"], 13 * GIB);
    assert_eq!(g0["external_bytes"], 1500 * MIB);

    let g1 = &gpus[1];
    assert_eq!(procs(g1)[0]["type"], "G");
    assert_eq!(g1["unattributed_bytes"], 0);
}

#[test]
fn snapshot_table_shows_bar_processes_and_unattributed_row() {
    let (a, b, c) = (Sleeper::spawn(), Sleeper::spawn(), Sleeper::spawn());
    let sc = ScenarioFile::new(&two_gpu_scenario(a.pid(), b.pid(), c.pid()));
    let o = gpuwatch_on(&sc, &["snapshot"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(!text.contains('\x1b'), "NO_COLOR is respected: {text}");
    assert!(text.contains("GPU 0  NVIDIA H200"), "{text}");
    assert!(text.contains("[██"), "memory bar: {text}");
    assert!(text.contains("14.5GiB / 140.4GiB"), "used/total: {text}");
    assert!(text.contains("PID  USER"), "{text}");
    let row_a = text
        .lines()
        .find(|l| l.contains(&format!(" {} ", a.pid())))
        .expect("row of the first process");
    assert!(
        row_a.trim_start().starts_with('*'),
        "watched marker: {row_a}"
    );
    assert!(
        row_a.contains("11.0GiB") && row_a.contains("sleep 300"),
        "{row_a}"
    );
    assert!(text.contains("unattributed  1.5GiB"), "{text}");
    // Rows sorted by memory: a (11 GiB) before b (2 GiB).
    let pos = |pid: u32| text.find(&format!(" {pid} ")).expect("pid shown");
    assert!(pos(a.pid()) < pos(b.pid()));
}

#[test]
fn gpu_filter_selects_by_index_and_uuid_and_rejects_unknown() {
    let (a, b, c) = (Sleeper::spawn(), Sleeper::spawn(), Sleeper::spawn());
    let sc = ScenarioFile::new(&two_gpu_scenario(a.pid(), b.pid(), c.pid()));
    let v = json(&gpuwatch_on(&sc, &["snapshot", "--json", "--gpu", "1"]));
    assert_eq!(v["gpus"].as_array().map(Vec::len), Some(1));
    assert_eq!(v["gpus"][0]["index"], 1);
    let v = json(&gpuwatch_on(
        &sc,
        &[
            "snapshot",
            "--json",
            "--gpu",
            "GPU-00000000-1111-2222-3333-000000000000",
        ],
    ));
    assert_eq!(v["gpus"][0]["index"], 0);
    let o = gpuwatch_on(&sc, &["snapshot", "--gpu", "7"]);
    fails_with(&o, 2, "--gpu '7' is not a GPU here");
}

#[test]
fn unavailable_values_are_null_never_zero() {
    let a = Sleeper::spawn();
    let sc = ScenarioFile::new(&format!(
        r#"
[clock]
freeze = 1.0
[[gpu]]
memory_total = "80GiB"
faults.not_supported = ["power", "temperature", "process-utilization"]
[[gpu.process]]
pid = {}
used = "3GiB"
used_unavailable = true
"#,
        a.pid()
    ));
    let v = json(&gpuwatch_on(&sc, &["snapshot", "--json"]));
    let g = &v["gpus"][0];
    assert_eq!(g["power_watts"], Value::Null);
    assert_eq!(g["temperature_celsius"], Value::Null);
    assert_eq!(g["processes"][0]["used_bytes"], Value::Null);
    assert_eq!(g["processes"][0]["sm_percent"], Value::Null);
    // The device still counts the memory; with a process n/a nothing can be attributed.
    assert_eq!(g["memory"]["used_bytes"], 3 * GIB);
    assert_eq!(g["unattributed_bytes"], Value::Null);
    assert_eq!(g["mine_bytes"], Value::Null);
    // NotSupported is not a failure: no error is reported for it.
    assert_eq!(g["errors"].as_array().map(Vec::len), Some(0));

    let o = gpuwatch_on(&sc, &["snapshot"]);
    let text = stdout(&o);
    assert!(
        text.contains("power n/a") && text.contains("temp n/a"),
        "{text}"
    );
    assert!(
        !text.contains(" 0 W") && !text.contains(" 0°C"),
        "n/a is never shown as 0: {text}"
    );
    assert!(text.contains("unattributed  n/a"), "{text}");
}

#[test]
fn lost_gpu_is_reported_and_the_others_still_sampled() {
    let a = Sleeper::spawn();
    let sc = ScenarioFile::new(&format!(
        r#"
[clock]
freeze = 5.0
[[gpu]]
memory_total = "80GiB"
[[gpu.process]]
pid = {}
used = "1GiB"
[[gpu]]
memory_total = "80GiB"
lost_at = 2.0
"#,
        a.pid()
    ));
    let v = json(&gpuwatch_on(&sc, &["snapshot", "--json"]));
    assert_eq!(v["gpus"][0]["lost"], false);
    assert_eq!(v["gpus"][0]["memory"]["used_bytes"], GIB);
    assert_eq!(v["gpus"][1]["lost"], true);
    assert_eq!(v["gpus"][1]["memory"], Value::Null);
    let errors = v["gpus"][1]["errors"].to_string();
    assert!(errors.contains("GpuLost"), "{errors}");
    let text = stdout(&gpuwatch_on(&sc, &["snapshot"]));
    assert!(text.contains("GPU 1") && text.contains("LOST"), "{text}");
}

#[test]
fn a_hanging_call_is_named_instead_of_freezing() {
    let sc = ScenarioFile::new(
        r#"
[[gpu]]
memory_total = "80GiB"
faults.slow = [{ call = "memory", ms = 20000 }]
"#,
    );
    let cfg = sc.dir.path().join("cfg.toml");
    std::fs::write(&cfg, "[sampling]\nhang-timeout = \"1s\"\n").expect("config");
    let started = std::time::Instant::now();
    let o = gpuwatch_cmd(&sc)
        .args(["--config", cfg.to_str().expect("utf-8"), "snapshot"])
        .output()
        .expect("runs");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "did not wait for the hung call"
    );
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("memory_info on GPU 0 has not returned"),
        "{err}"
    );
}

#[test]
fn vanished_and_invisible_pids_keep_their_rows() {
    let alive = Sleeper::spawn();
    // A PID that existed and is gone: reap a child and reuse its number.
    let mut gone = Sleeper::spawn();
    let gone_pid = gone.pid();
    let _ = gone.0.kill();
    let _ = gone.0.wait();
    let sc = ScenarioFile::new(&format!(
        r#"
[clock]
freeze = 1.0
[[gpu]]
memory_total = "80GiB"
[[gpu.process]]
pid = {alive}
used = "2GiB"
[[gpu.process]]
pid = {gone_pid}
used = "5GiB"
[[gpu.process]]
pid = 4000001
used = "1GiB"
vanish_between_calls = true
"#,
        alive = alive.pid()
    ));
    let v = json(&gpuwatch_on(&sc, &["snapshot", "--json"]));
    let p = procs(&v["gpus"][0]);
    // The process that vanished between the sizing and the fill call is simply absent.
    assert_eq!(p.len(), 2, "{p:?}");
    assert_eq!(p[0]["pid"], gone_pid);
    assert_eq!(p[0]["visible"], false);
    assert_eq!(p[0]["used_bytes"], 5 * GIB);
    assert_eq!(p[0]["user"], Value::Null);
    assert_eq!(p[1]["visible"], true);
    let text = stdout(&gpuwatch_on(&sc, &["snapshot"]));
    assert!(text.contains("not visible here"), "{text}");
}

#[test]
fn pick_prefers_free_memory_then_low_utilisation() {
    let sc = ScenarioFile::new(
        r#"
[clock]
freeze = 1.0
[[gpu]]
uuid = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
memory_total = "80GiB"
memory_reserved = "0"
base_used = "60GiB"
[[gpu]]
uuid = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
memory_total = "80GiB"
memory_reserved = "0"
base_used = "10GiB"
util_gpu = 90
[[gpu]]
uuid = "GPU-cccccccc-0000-0000-0000-000000000000"
memory_total = "80GiB"
memory_reserved = "0"
base_used = "10GiB"
util_gpu = 5
"#,
    );
    let o = gpuwatch_on(&sc, &["pick"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o).trim(),
        "CUDA_VISIBLE_DEVICES=GPU-cccccccc-0000-0000-0000-000000000000"
    );
    let o = gpuwatch_on(&sc, &["pick", "--count", "2", "--format", "index"]);
    assert_eq!(stdout(&o).trim(), "2,1");
    let o = gpuwatch_on(
        &sc,
        &[
            "pick",
            "--min-free",
            "30GiB",
            "--count",
            "3",
            "--format",
            "uuid",
        ],
    );
    fails_with(
        &o,
        1,
        "3 GPUs with 30.0GiB free were asked for, and only 2 have it",
    );
    let o = gpuwatch_on(&sc, &["pick", "--min-free", "lots"]);
    fails_with(&o, 2, "'lots' is not a size");
}

#[test]
fn no_driver_is_a_clear_error_with_exit_2() {
    let sc = ScenarioFile::new("[[gpu]]\nmemory_total = \"1GiB\"\n");
    let o = gpuwatch_cmd(&sc)
        .env("GPUWATCH_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
        .arg("snapshot")
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.starts_with(
            "gpuwatch: no NVIDIA driver found (could not load /nonexistent/libnvidia-ml.so.1): "
        ),
        "{err}"
    );
    assert!(
        err.trim_end()
            .ends_with("to try gpuwatch without a GPU run: gpuwatch --demo"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn no_gpus_and_unloaded_driver_are_clear_errors() {
    let sc = ScenarioFile::new("driver_version = \"580.159.04\"\n");
    let o = gpuwatch_on(&sc, &["snapshot"]);
    fails_with(&o, 2, "no NVIDIA GPUs found");

    let sc =
        ScenarioFile::new("driver_unloaded = { from = 0 }\n[[gpu]]\nmemory_total = \"1GiB\"\n");
    let o = gpuwatch_on(&sc, &["snapshot"]);
    fails_with(&o, 2, "kernel driver is not loaded");
}

#[test]
fn watch_specs_choose_what_is_mine() {
    let (a, b, c) = (Sleeper::spawn(), Sleeper::spawn(), Sleeper::spawn());
    let sc = ScenarioFile::new(&two_gpu_scenario(a.pid(), b.pid(), c.pid()));
    let spec = format!("pid:{}", a.pid());
    let v = json(&gpuwatch_on(&sc, &["snapshot", "--json", "--watch", &spec]));
    let p = procs(&v["gpus"][0]);
    assert_eq!(p[0]["watched"], true);
    assert_eq!(p[1]["watched"], false);
    assert_eq!(v["gpus"][0]["mine_bytes"], 11 * GIB);
    let o = gpuwatch_on(&sc, &["snapshot", "--watch", "nope"]);
    fails_with(&o, 2, "'nope'");
}
