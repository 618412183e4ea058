//! The binary's other paths: record and replay, recovery after a lost GPU or an unloaded
//! driver, the slow cadence, the demo, config and its errors, colour, completions, the man page.
//! GPUs come from the NVML test double (through the real `nvml-wrapper` path) or a scenario.

mod common;

use std::path::Path;
use std::process::Output;

use common::{
    ScenarioFile, Sleeper, fails_with, gpuwatch_bin, gpuwatch_cmd, gpuwatch_on, stderr, stdout,
};
use serde_json::Value;

const GIB: u64 = 1 << 30;

fn run(args: &[&str]) -> Output {
    std::process::Command::new(gpuwatch_bin())
        .args(args)
        .env("NO_COLOR", "1")
        .env("XDG_CONFIG_HOME", "/nonexistent-gpuwatch-test")
        .output()
        .expect("gpuwatch runs")
}

fn ok_json(o: &Output) -> Value {
    assert!(o.status.success(), "gpuwatch failed: {}", stderr(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

/// The samples of a recording (header skipped).
fn samples(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("recording");
    let mut lines = text.lines();
    let header: Value = serde_json::from_str(lines.next().expect("header")).expect("header JSON");
    assert_eq!(header["format"], "gpuwatch-recording");
    assert_eq!(header["version"], 1);
    lines
        .map(|l| serde_json::from_str(l).expect("sample JSON"))
        .collect()
}

#[test]
fn record_then_replay_gives_back_the_same_numbers() {
    let a = Sleeper::spawn();
    let sc = ScenarioFile::new(&format!(
        "[[gpu]]\nmemory_total = \"80GiB\"\n[[gpu.process]]\npid = {}\nused = {{ linear = [[0, \"1GiB\"], [10, \"11GiB\"]] }}\nsm = 40\n",
        a.pid()
    ));
    let file = sc.dir.path().join("run.jsonl");
    let file_s = file.to_str().expect("utf-8");
    let o = gpuwatch_on(
        &sc,
        &["--interval", "100ms", "record", "--samples", "5", file_s],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("recorded 5 samples"), "{}", stderr(&o));
    let recorded = samples(&file);
    assert_eq!(recorded.len(), 5);
    // Memory rises along the ramp; the host facts were recorded.
    let used = |s: &Value| {
        s["gpus"][0]["processes"][0]["used_bytes"]
            .as_u64()
            .expect("used")
    };
    assert!(used(&recorded[4]) > used(&recorded[0]));
    assert_eq!(
        recorded[0]["gpus"][0]["processes"][0]["host"]["name"],
        "sleep"
    );

    // Replayed, without the double: the first sample, and a later one with --at.
    let v = ok_json(&run(&[
        "--replay", file_s, "--speed", "0", "snapshot", "--json",
    ]));
    assert_eq!(v["source"]["kind"], "replay");
    let p = &v["gpus"][0]["processes"][0];
    assert_eq!(p["pid"], a.pid());
    assert_eq!(p["used_bytes"].as_u64(), Some(used(&recorded[0])));
    assert_eq!(p["name"], "sleep");
    let span =
        recorded[4]["taken_at"].as_f64().expect("t") - recorded[0]["taken_at"].as_f64().expect("t");
    let at = format!("{:.3}", span - 0.001);
    let v = ok_json(&run(&[
        "--replay", file_s, "snapshot", "--json", "--at", &at,
    ]));
    assert_eq!(
        v["gpus"][0]["processes"][0]["used_bytes"].as_u64(),
        Some(used(&recorded[4]))
    );
}

#[test]
fn record_never_overwrites_without_force() {
    let sc = ScenarioFile::new("[[gpu]]\nmemory_total = \"8GiB\"\n");
    let file = sc.dir.path().join("keep.jsonl");
    std::fs::write(&file, "precious\n").expect("write");
    let file_s = file.to_str().expect("utf-8");
    let o = gpuwatch_on(&sc, &["record", "--samples", "1", file_s]);
    fails_with(&o, 2, "already exists; pass --force");
    assert_eq!(std::fs::read_to_string(&file).expect("read"), "precious\n");
    let o = gpuwatch_on(&sc, &["record", "--samples", "1", "--force", file_s]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(samples(&file).len(), 1);
}

/// Records `seconds` of samples at 100 ms from the double.
fn record_for(sc: &ScenarioFile, seconds: &str) -> Vec<Value> {
    let file = sc.dir.path().join("rec.jsonl");
    let o = gpuwatch_on(
        sc,
        &[
            "--interval",
            "100ms",
            "record",
            "--force",
            "--duration",
            seconds,
            file.to_str().expect("utf-8"),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    samples(&file)
}

#[test]
fn unloaded_driver_is_reported_then_nvml_is_reinitialised() {
    let sc = ScenarioFile::new(
        "driver_unloaded = { from = 0.6, until = 1.4 }\n[[gpu]]\nmemory_total = \"8GiB\"\nbase_used = \"1GiB\"\n",
    );
    let recorded = record_for(&sc, "4s");
    let has_memory = |s: &Value| s["gpus"][0]["memory"].is_object();
    let first_bad = recorded
        .iter()
        .position(|s| !has_memory(s))
        .expect("some samples lost the session");
    assert!(has_memory(&recorded[0]), "sampled before the unload");
    let errors = recorded[first_bad].to_string();
    assert!(
        errors.contains("reinitialis"),
        "says it will reinitialise: {errors}"
    );
    let recovered = recorded[first_bad..]
        .iter()
        .position(has_memory)
        .expect("sampling resumed after the driver came back");
    assert!(recorded[first_bad + recovered..].iter().all(has_memory));
    assert_eq!(
        recorded.last().expect("samples")["gpus"][0]["memory"]["used"],
        GIB
    );
}

#[test]
fn lost_gpu_is_reported_and_recovers_after_reset() {
    let sc = ScenarioFile::new(
        "[[gpu]]\nmemory_total = \"8GiB\"\n[[gpu]]\nmemory_total = \"8GiB\"\nlost_at = 0.5\nlost_until = 1.2\n",
    );
    let recorded = record_for(&sc, "4s");
    let lost = |s: &Value| s["gpus"][1]["lost"] == true;
    let first_lost = recorded
        .iter()
        .position(lost)
        .expect("the GPU was reported lost");
    // The healthy GPU is sampled in every sample, the lost one's wait included.
    for s in &recorded {
        assert!(s["gpus"][0]["memory"].is_object(), "GPU 0 sampled: {s}");
    }
    let errors = recorded[first_lost]["gpus"][1]["errors"].to_string();
    assert!(errors.contains("GpuLost"), "{errors}");
    let back = recorded[first_lost..]
        .iter()
        .position(|s| !lost(s) && s["gpus"][1]["memory"].is_object())
        .expect("the GPU came back after its reset (NVML re-initialised)");
    assert!(back > 0);
}

#[test]
fn slow_calls_never_delay_the_fast_sample() {
    // PCIe throughput and energy take 300 ms per call (an H200 takes ~20 ms per PCIe call).
    let sc = ScenarioFile::new(
        r#"
[[gpu]]
memory_total = "8GiB"
pcie_rx = 1000
faults.slow = [{ call = "pcie-throughput", ms = 300 }, { call = "energy", ms = 300 }]
"#,
    );
    let recorded = record_for(&sc, "2s");
    // At 100 ms the fast cadence gives ~20 samples; on one thread with the slow calls it would
    // give at most 2 (900 ms per sample).
    assert!(
        recorded.len() >= 10,
        "only {} samples in 2 s",
        recorded.len()
    );
    let slow = &recorded.last().expect("samples")["gpus"][0]["slow"];
    assert_eq!(
        slow["pcie_rx_bytes_per_s"],
        1000 * 1024,
        "slow readings arrive: {slow}"
    );
    assert!(slow["energy_joules"].is_number());
}

#[test]
fn mig_mode_and_devices_are_shown() {
    let a = Sleeper::spawn();
    let sc = ScenarioFile::new(&format!(
        r#"
[clock]
freeze = 1.0
[[gpu]]
memory_total = "80GiB"
mig = "enabled"
[[gpu.mig_device]]
gpu_instance = 1
compute_instance = 0
memory_total = "40GiB"
[[gpu.mig_device]]
gpu_instance = 2
compute_instance = 0
memory_total = "40GiB"
[[gpu.process]]
pid = {}
used = "3GiB"
gpu_instance = 2
compute_instance = 0
"#,
        a.pid()
    ));
    let v = ok_json(&gpuwatch_on(&sc, &["snapshot", "--json"]));
    let g = &v["gpus"][0];
    assert_eq!(g["mig_mode"], "enabled");
    let devices = g["mig_devices"].as_array().expect("mig devices");
    assert_eq!(devices.len(), 2);
    assert_eq!(devices[1]["memory"]["used_bytes"], 3 * GIB);
    assert_eq!(devices[0]["memory"]["used_bytes"], 0);
    assert!(
        devices[0]["uuid"]
            .as_str()
            .unwrap_or("")
            .starts_with("MIG-")
    );
    assert_eq!(g["processes"][0]["gpu_instance"], 2);
    assert_eq!(g["processes"][0]["compute_instance"], 0);
    // A GPU split into MIG devices is not offered by pick.
    let o = gpuwatch_on(&sc, &["pick"]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn demo_runs_without_a_gpu_and_tells_its_stories() {
    let v = ok_json(&run(&["--demo", "snapshot", "--json"]));
    assert_eq!(v["source"]["kind"], "demo");
    let gpus = v["gpus"].as_array().expect("gpus");
    assert_eq!(gpus.len(), 4);
    let users: Vec<&str> = gpus
        .iter()
        .flat_map(|g| g["processes"].as_array().into_iter().flatten())
        .filter_map(|p| p["user"].as_str())
        .collect();
    assert!(
        users.contains(&"bob") && users.contains(&"alice"),
        "{users:?}"
    );
    let used = |g: &Value| {
        g["memory"]["used_bytes"].as_f64().expect("used")
            / g["memory"]["total_bytes"].as_f64().expect("total")
    };
    assert!(used(&gpus[3]) > 0.9, "GPU 3 nears capacity");
    assert!(gpus[0]["unattributed_bytes"].as_u64().unwrap_or(0) >= GIB);
    // alice is "me" in the demo: her processes are mine, bob's are external.
    assert!(gpus[3]["external_bytes"].as_u64().unwrap_or(0) > 60 * GIB);
    let o = run(&["--demo", "pick", "--format", "index"]);
    assert_eq!(stdout(&o).trim(), "2", "the idle GPU: {}", stderr(&o));
    let o = run(&["--demo", "snapshot"]);
    assert!(
        stdout(&o).contains("bob") && stdout(&o).contains("unattributed"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn replaying_the_h200_recordings_works_from_the_command_line() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/h200/leak-to-oom.recording.jsonl");
    let f = fixture.to_str().expect("utf-8");
    let v = ok_json(&run(&["--replay", f, "snapshot", "--json", "--at", "60"]));
    let pids: Vec<u64> = v["gpus"][0]["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .filter_map(|p| p["pid"].as_u64())
        .collect();
    assert_eq!(
        pids[0], 1055,
        "the leaking process holds the most at t = 60 s: {pids:?}"
    );
    assert!(pids.contains(&1014) && pids.contains(&1030));
    assert_eq!(v["gpus"][0]["processes"][0]["visible"], false);

    // A recording made by `gpuwatch record` on a real H200 (driver 580.159.04).
    let live = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/h200-live/gpuwatch-record-h200.recording.jsonl");
    let recorded = samples(&live);
    let v = ok_json(&run(&[
        "--replay",
        live.to_str().expect("utf-8"),
        "snapshot",
        "--json",
    ]));
    assert_eq!(v["source"]["driver_version"], "580.159.04");
    let first = &recorded[0]["gpus"][0];
    assert_eq!(
        v["gpus"][0]["memory"]["used_bytes"],
        first["memory"]["used"]
    );
    assert_eq!(
        v["gpus"][0]["processes"].as_array().map(Vec::len),
        first["processes"].as_array().map(Vec::len)
    );
}

#[test]
fn bad_input_files_are_named_with_line_and_column() {
    let dir = tempfile::tempdir().expect("tmp");
    let scenario = dir.path().join("bad.toml");
    std::fs::write(
        &scenario,
        "[[gpu]]\nmemory_total = \"80GiB\"\nutil_gpu = { linear = 5 }\n",
    )
    .expect("write");
    let o = run(&["--scenario", scenario.to_str().expect("utf-8"), "snapshot"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("bad.toml") && err.contains("line 3") && err.contains("column"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");

    let recording = dir.path().join("bad.jsonl");
    std::fs::write(&recording, "{\"format\":\"gpuwatch-recording\",\"version\":1,\"source\":{\"kind\":\"live\",\"host\":\"h\",\"driver_version\":null,\"cuda_version\":null,\"nvml_version\":null,\"detail\":\"x\"},\"interval_ms\":1000,\"started_at\":0}\n{\"taken_at\": oops}\n").expect("write");
    let o = run(&["--replay", recording.to_str().expect("utf-8"), "snapshot"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("bad.jsonl:2:"), "{err}");

    let o = run(&["--replay", "/nonexistent/rec.jsonl", "snapshot"]);
    fails_with(&o, 2, "/nonexistent/rec.jsonl");
}

#[test]
fn config_file_errors_name_file_key_and_expectation() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = dir.path().join("config.toml");
    std::fs::write(&cfg, "[sampling]\nintervall = \"1s\"\n").expect("write");
    let o = run(&[
        "--config",
        cfg.to_str().expect("utf-8"),
        "--demo",
        "snapshot",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("config.toml") && err.contains("sampling.intervall") && err.contains("line 2"),
        "{err}"
    );

    std::fs::write(&cfg, "[sampling]\ninterval = \"5ms\"\n").expect("write");
    let o = run(&["--config", cfg.to_str().expect("utf-8"), "print-config"]);
    fails_with(&o, 2, "from 100ms to 60s");

    let o = run(&["--config", "/nonexistent/gpuwatch.toml", "print-config"]);
    fails_with(&o, 2, "/nonexistent/gpuwatch.toml");
}

#[test]
fn print_config_merges_command_line_over_file_over_defaults() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = dir.path().join("gpuwatch").join("config.toml");
    std::fs::create_dir_all(cfg.parent().expect("dir")).expect("mkdir");
    std::fs::write(
        &cfg,
        "[sampling]\ninterval = \"2s\"\nslow-interval = \"20s\"\n[pick]\ncount = 2\n",
    )
    .expect("write");
    // Found through XDG_CONFIG_HOME; --interval wins over the file.
    let o = std::process::Command::new(gpuwatch_bin())
        .args(["--interval", "500ms", "print-config"])
        .env("XDG_CONFIG_HOME", dir.path())
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let parsed: toml::Table = toml::from_str(&text).expect("print-config prints TOML");
    assert_eq!(parsed["sampling"]["interval"].as_str(), Some("500ms"));
    assert_eq!(parsed["sampling"]["slow-interval"].as_str(), Some("20s"));
    assert_eq!(parsed["pick"]["count"].as_integer(), Some(2));
    assert_eq!(parsed["pick"]["format"].as_str(), Some("env"));
    // What each front end uses, after the TOML: the dashboard and the daemon sample at the
    // effective interval, and so does run, whose own default (250ms) --interval overrides.
    for front in [
        "#   dashboard (gpuwatch, gpuwatch tui): a sample every 500ms",
        "#   daemon: a sample every 500ms",
        "#   run: a sample every 500ms",
    ] {
        assert!(text.contains(front), "{front}:\n{text}");
    }
    let o = run(&["print-config"]);
    assert!(
        stdout(&o).contains("#   run: a sample every 250ms"),
        "{}",
        stdout(&o)
    );
    let o = run(&["--interval", "10ms", "print-config"]);
    fails_with(&o, 2, "--interval");
}

#[test]
fn colour_follows_flag_env_and_config() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "[display]\ncolor = \"always\"\n").expect("write");
    let c = cfg.to_str().expect("utf-8");
    let with = |extra: &[&str], no_color_env: bool| {
        let mut cmd = std::process::Command::new(gpuwatch_bin());
        cmd.args(["--config", c, "--demo"])
            .args(extra)
            .arg("snapshot");
        if no_color_env {
            cmd.env("NO_COLOR", "1");
        } else {
            cmd.env_remove("NO_COLOR");
        }
        stdout(&cmd.output().expect("runs"))
    };
    assert!(
        with(&[], false).contains('\x1b'),
        "color = always colours a pipe"
    );
    assert!(!with(&["--no-color"], false).contains('\x1b'));
    assert!(!with(&[], true).contains('\x1b'), "NO_COLOR wins");
    assert!(
        with(&["--color", "always"], true).contains('\x1b'),
        "an explicit --color beats NO_COLOR"
    );
    assert!(!with(&["--color", "never"], false).contains('\x1b'));
}

#[test]
fn print_config_defaults_prints_the_documented_file() {
    let o = run(&["print-config", "--defaults"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let shipped =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("config/default.toml"))
            .expect("config/default.toml");
    // Byte for byte, comments and the commented-out optional keys included.
    assert_eq!(stdout(&o), shipped);
    for comment in [
        "# gpuwatch configuration: every setting, at its default.",
        "# library = \"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1\"",
    ] {
        assert!(stdout(&o).contains(comment), "{comment}");
    }
    // Read back as a config file, it is the defaults: the same effective configuration as
    // no file at all.
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = dir.path().join("defaults.toml");
    std::fs::write(&cfg, &o.stdout).expect("write");
    let with_file = run(&["--config", cfg.to_str().expect("utf-8"), "print-config"]);
    assert!(with_file.status.success(), "{}", stderr(&with_file));
    assert_eq!(stdout(&with_file), stdout(&run(&["print-config"])));
    // A broken config file does not stop it; options it would ignore are refused.
    std::fs::write(&cfg, "[sampling]\nintervall = 1\n").expect("write");
    let broken = std::process::Command::new(gpuwatch_bin())
        .args(["print-config", "--defaults"])
        .env("XDG_CONFIG_HOME", dir.path())
        .output()
        .expect("runs");
    assert_eq!(stdout(&broken), shipped, "{}", stderr(&broken));
    for args in [
        &["print-config", "--defaults", "--interval", "2s"][..],
        &["--interval", "2s", "print-config", "--defaults"],
        &["print-config", "--defaults", "--config", "x.toml"],
        &["print-config", "--defaults", "--nvml-library", "/x.so"],
    ] {
        fails_with(&run(args), 2, "--defaults prints the shipped defaults");
    }
    // The library from the environment is no option given.
    let from_env = std::process::Command::new(gpuwatch_bin())
        .args(["print-config", "--defaults"])
        .env("GPUWATCH_NVML_LIB", "/x.so")
        .output()
        .expect("runs");
    assert_eq!(stdout(&from_env), shipped, "{}", stderr(&from_env));
}

/// `gpuwatch SUBCOMMAND --help`.
fn help(sub: &[&str]) -> String {
    let mut args = sub.to_vec();
    args.push("--help");
    let o = run(&args);
    assert!(o.status.success(), "{sub:?}: {}", stderr(&o));
    stdout(&o)
}

#[test]
fn each_subcommand_lists_only_its_options_under_headings() {
    const SOURCE: &[&str] = &["--demo", "--scenario", "--replay", "--speed"];
    // Commands that read GPUs: the source and sampling options, under their headings.
    for sub in ["snapshot", "pick", "record", "run", "daemon", "tui"] {
        let text = help(&[sub]);
        for heading in ["\nSource:\n", "\nSampling:\n", "\nOutput:\n"] {
            assert!(text.contains(heading), "{sub} {heading:?}:\n{text}");
        }
        for flag in SOURCE
            .iter()
            .chain(&["--nvml-library", "--interval", "--log-file"])
        {
            assert!(text.contains(flag), "{sub} {flag}:\n{text}");
        }
        // The Source heading holds the source options, not the command's own.
        let source = &text[text.find("\nSource:\n").expect("Source")..];
        let source = &source[..source.find("\nSampling:\n").expect("Sampling")];
        assert!(
            source.contains("--demo") && !source.contains("--interval"),
            "{sub}"
        );
        // --config is among the command's own options, under no heading of a group.
        let options = &text[text.find("\nOptions:\n").expect("Options")..];
        let end = ["\nSource:\n", "\nDaemon:\n"]
            .iter()
            .filter_map(|h| options.find(h))
            .min()
            .expect("a heading");
        assert!(options[..end].contains("--config <PATH>"), "{sub}:\n{text}");
    }
    // The job's command is an argument, under no option heading.
    assert!(help(&["run"]).contains("Arguments:\n  <CMD>..."));
    assert!(help(&["daemon"]).contains("\nDaemon:\n      --listen <ADDR>"));
    let tui = help(&["tui"]);
    assert!(tui.contains("--read-only") && tui.contains("--connect <URL>"));
    // Options a command does not use are not offered.
    for sub in [&["explain"][..], &["history", "who"], &["history", "peaks"]] {
        let text = help(sub);
        for flag in SOURCE.iter().chain(&[
            "--interval",
            "--nvml-library",
            "--read-only",
            "--watch",
            "Source:",
        ]) {
            assert!(!text.contains(flag), "{sub:?} offers {flag}:\n{text}");
        }
    }
    let print_config = help(&["print-config"]);
    for flag in SOURCE.iter().chain(&["--read-only", "--log-file"]) {
        assert!(!print_config.contains(flag), "print-config offers {flag}");
    }
    for flag in [
        "--defaults",
        "--interval",
        "--color",
        "--watch",
        "--nvml-library",
    ] {
        assert!(print_config.contains(flag), "print-config: {flag}");
    }
    for flag in ["--read-only", "--color", "--watch"] {
        assert!(!help(&["pick"]).contains(flag), "pick offers {flag}");
    }
}

#[test]
fn options_before_or_after_the_subcommand_and_misplaced_ones() {
    // Before the subcommand (the README's way) or after it: the same.
    for args in [
        &["--demo", "snapshot", "--json", "--gpu", "3"][..],
        &["snapshot", "--demo", "--json", "--gpu", "3"],
        &["snapshot", "--json", "--gpu", "3", "--demo"],
    ] {
        let v = ok_json(&run(args));
        assert_eq!(v["source"]["kind"], "demo", "{args:?}");
        assert_eq!(v["gpus"].as_array().map(Vec::len), Some(1), "{args:?}");
    }
    let interval = |args: &[&str]| {
        let text = stdout(&run(args));
        let parsed: toml::Table = toml::from_str(&text).expect("TOML");
        parsed["sampling"]["interval"].as_str().map(str::to_owned)
    };
    assert_eq!(
        interval(&["--interval", "500ms", "print-config"]).as_deref(),
        Some("500ms")
    );
    assert_eq!(
        interval(&["print-config", "--interval", "700ms"]).as_deref(),
        Some("700ms")
    );
    // After the subcommand, the command's own value wins.
    assert_eq!(
        interval(&["--interval", "500ms", "print-config", "--interval", "700ms"]).as_deref(),
        Some("700ms")
    );
    // A source option for a command that reads no GPUs is an error, before it or after it.
    let o = run(&["--demo", "explain", "/dev/null"]);
    fails_with(&o, 2, "--demo does not apply to 'gpuwatch explain'");
    let o = run(&["--replay", "x.jsonl", "history", "who", "--gpu", "0"]);
    fails_with(&o, 2, "--replay does not apply to 'gpuwatch history who'");
    fails_with(
        &run(&["--demo", "print-config"]),
        2,
        "--demo does not apply",
    );
    fails_with(
        &run(&["--read-only", "snapshot"]),
        2,
        "--read-only does not apply",
    );
    fails_with(
        &run(&["explain", "--demo"]),
        2,
        "unexpected argument '--demo'",
    );
    // Two sources, one in each place.
    let o = run(&["--demo", "snapshot", "--replay", "x.jsonl"]);
    fails_with(
        &o,
        2,
        "--demo and --replay each choose where the GPUs come from",
    );
    // An option from the environment is no misplaced option.
    let o = std::process::Command::new(gpuwatch_bin())
        .args(["explain", "/dev/null"])
        .env("GPUWATCH_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn completions_and_man_page_come_from_the_cli() {
    let o = run(&["completions", "bash"]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("snapshot") && stdout(&o).contains("--min-free"));
    let o = run(&["completions", "zsh"]);
    assert!(stdout(&o).contains("#compdef gpuwatch"));
    let o = run(&["man"]);
    assert!(o.status.success());
    assert!(stdout(&o).contains(".TH gpuwatch"), "{}", stdout(&o));
    let o = run(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2), "unknown shells are a usage error");
}

/// A man page's text with roff's escaped hyphens and apostrophes plain, and its sections by
/// `.SH` title.
fn man_sections(roff: &str) -> Vec<(String, String)> {
    let text = roff.replace("\\-", "-").replace("\\*(Aq", "'");
    let mut out: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if let Some(title) = line.strip_prefix(".SH ") {
            out.push((title.trim_matches('"').to_owned(), String::new()));
        } else if let Some((_, body)) = out.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    out
}

fn section<'a>(sections: &'a [(String, String)], title: &str) -> &'a str {
    sections
        .iter()
        .find(|(t, _)| t == title)
        .map_or_else(|| panic!("no {title} section"), |(_, b)| b.as_str())
}

/// `gpuwatch man --dir`: the directory and the names of the pages in it.
fn man_dir() -> (tempfile::TempDir, std::path::PathBuf, Vec<String>) {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("man1");
    let o = run(&["man", "--dir", out.to_str().expect("utf-8")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().into_string().expect("name"))
        .collect();
    names.sort();
    (dir, out, names)
}

/// The environment variables the source reads by a literal name.
fn variables_read_by_src() -> std::collections::BTreeSet<String> {
    let read = regex::Regex::new(
        r#"(?:var_os|env::var|try_from_env|non_empty)\("([A-Z_]+)"\)|env = "([A-Z_]+)""#,
    )
    .expect("regex");
    let mut seen = std::collections::BTreeSet::new();
    let mut stack = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("src") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let code = std::fs::read_to_string(&p).expect("source");
                for m in read.captures_iter(&code) {
                    let var = m.get(1).or_else(|| m.get(2)).expect("name").as_str();
                    seen.insert(var.to_owned());
                }
            }
        }
    }
    seen
}

#[test]
fn man_pages_for_every_command_render_and_name_only_emitted_pages() {
    let (_dir, out, names) = man_dir();
    let mut expected: Vec<String> = [
        "",
        "-tui",
        "-daemon",
        "-snapshot",
        "-pick",
        "-record",
        "-run",
        "-explain",
        "-history",
        "-history-who",
        "-history-peaks",
        "-print-config",
        "-completions",
        "-man",
    ]
    .iter()
    .map(|s| format!("gpuwatch{s}.1"))
    .collect();
    expected.sort();
    assert_eq!(names, expected);
    // `gpuwatch man` prints gpuwatch(1).
    let main = std::fs::read_to_string(out.join("gpuwatch.1")).expect("gpuwatch.1");
    assert_eq!(stdout(&run(&["man"])), main);

    let reference = regex::Regex::new(r"\b(gpuwatch(?:-[a-z]+)*)\((\d)\)").expect("regex");
    let groff = std::process::Command::new("groff")
        .arg("--version")
        .output()
        .is_ok();
    for name in &names {
        let text = std::fs::read_to_string(out.join(name)).expect("page");
        assert_eq!(text.matches("\n.TH ").count(), 1, "{name}: one title");
        let sections = man_sections(&text);
        for title in ["NAME", "SYNOPSIS", "DESCRIPTION", "EXIT STATUS", "SEE ALSO"] {
            assert!(
                !section(&sections, title).trim().is_empty(),
                "{name}: {title}"
            );
        }
        // Every page it names is one of those written.
        for m in reference.captures_iter(&text.replace("\\-", "-")) {
            let file = format!("{}.{}", &m[1], &m[2]);
            assert!(
                names.contains(&file),
                "{name} refers to {file}, never emitted"
            );
        }
        assert!(!text.contains("gpuwatch\\-help"), "{name}");
        if groff {
            // It renders, without a warning.
            let r = std::process::Command::new("groff")
                .args(["-k", "-man", "-Tutf8", "-ww", "-z"])
                .arg(out.join(name))
                .output()
                .expect("groff");
            assert!(
                r.status.success() && r.stderr.is_empty(),
                "{name}: {}",
                stderr(&r)
            );
        }
    }
    let run_page = man_sections(&std::fs::read_to_string(out.join("gpuwatch-run.1")).expect("run"));
    assert!(section(&run_page, "EXIT STATUS").contains("128 + N when signal N killed it"));
}

#[test]
fn man_page_documents_keys_findings_files_environment_exit_status() {
    let (_dir, out, _) = man_dir();
    let main = std::fs::read_to_string(out.join("gpuwatch.1")).expect("gpuwatch.1");
    let sections = man_sections(&main);
    // KEYS: every binding of the key table, in gpuwatch(1) and gpuwatch-tui(1).
    let tui = std::fs::read_to_string(out.join("gpuwatch-tui.1")).expect("tui");
    for page in [&sections, &man_sections(&tui)] {
        let keys = section(page, "KEYS");
        for b in gpuwatch::tui::keymap::BINDINGS {
            assert!(
                keys.contains(&format!("\\fB{}\\fR\n{}\n", b.label, b.help)),
                "KEYS lacks {} {}:\n{keys}",
                b.label,
                b.help
            );
        }
    }
    // FINDINGS: every rule of the detector, with what it means.
    let findings = section(&sections, "FINDINGS");
    for rule in gpuwatch::detect::RuleKind::ALL {
        assert!(
            findings.contains(&format!("\\fB{}\\fR", rule.name())),
            "{rule}"
        );
        let start: String = rule.summary().chars().take(30).collect();
        assert!(findings.contains(&start), "{rule}: {start}");
    }
    let files = section(&sections, "FILES");
    for path in ["gpuwatch/config.toml", "gpuwatch/history.sqlite", ".lock"] {
        assert!(files.contains(path), "FILES: {path}");
    }
    // ENVIRONMENT: every variable the source reads by name.
    let environment = section(&sections, "ENVIRONMENT");
    let seen = variables_read_by_src();
    for var in [
        "GPUWATCH_NVML_LIB",
        "GPUWATCH_LOG",
        "NO_COLOR",
        "XDG_STATE_HOME",
        "HOME",
    ] {
        assert!(seen.contains(var), "the scan finds {var}: {seen:?}");
    }
    // The variables each entry is about: its bold term, "A, B".
    let documented: Vec<&str> = regex::Regex::new(r"\\fB([A-Z_, ]+)\\fR")
        .expect("regex")
        .captures_iter(environment)
        .flat_map(|m| m.get(1).expect("term").as_str().split(", "))
        .collect();
    for var in seen
        .iter()
        .map(String::as_str)
        .chain(["CUDA_VISIBLE_DEVICES", "USER"])
    {
        assert!(
            documented.contains(&var),
            "ENVIRONMENT lacks {var}: {documented:?}"
        );
    }
    let exit = section(&sections, "EXIT STATUS");
    for code in ["0", "1", "2"] {
        assert!(
            exit.contains(&format!("\\fB{code}\\fR")),
            "EXIT STATUS {code}"
        );
    }
}

#[test]
fn a_closed_pipe_ends_quietly() {
    use std::io::Read;
    // `gpuwatch snapshot | head -0`: the reader is gone before anything is written.
    for args in [&["completions", "bash"][..], &["--demo", "snapshot"]] {
        let mut child = std::process::Command::new(gpuwatch_bin())
            .args(args)
            .env("XDG_CONFIG_HOME", "/nonexistent-gpuwatch-test")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("runs");
        drop(child.stdout.take());
        let status = child.wait().expect("exits");
        let mut err = String::new();
        child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut err)
            .expect("read");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(status.code(), Some(0), "{args:?}: quietly; stderr: {err}");
    }
    let _ = gpuwatch_cmd;
}

/// `/dev/full`: every write fails with `ENOSPC`, as on a full disk.
fn dev_full() -> std::fs::File {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full")
}

/// `run -- sh -c 'exit N' 2>/dev/full` exits N: the report that can't be written must not
/// turn the job's code into a panic's 101.
#[test]
fn run_returns_the_jobs_code_when_stderr_is_full() {
    let sc = ScenarioFile::new("[[gpu]]\nmemory_total = \"80GiB\"\n");
    for code in [0, 3] {
        let status = gpuwatch_cmd(&sc)
            .args(["run", "--", "sh", "-c"])
            .arg(format!("echo the job writes to stderr >&2; exit {code}"))
            .stdout(std::process::Stdio::null())
            .stderr(dev_full())
            .status()
            .expect("gpuwatch runs");
        assert_eq!(status.code(), Some(code), "the job's code");
    }
}

/// `snapshot >/dev/full`: a clear error and exit 1, not a panic; with stderr full as well,
/// still exit 1.
#[test]
fn snapshot_to_a_full_disk_fails_cleanly() {
    let sc = ScenarioFile::new("[[gpu]]\nmemory_total = \"80GiB\"\n");
    let o = gpuwatch_cmd(&sc)
        .arg("snapshot")
        .stdout(dev_full())
        .output()
        .expect("gpuwatch runs");
    fails_with(&o, 1, "cannot write to stdout: No space left on device");
    let status = gpuwatch_cmd(&sc)
        .arg("snapshot")
        .stdout(dev_full())
        .stderr(dev_full())
        .status()
        .expect("gpuwatch runs");
    assert_eq!(status.code(), Some(1));
}

/// The daemon with its log on a full disk keeps serving: its start-up lines fail to write,
/// `/api/v1/health` answers, and SIGTERM still ends it cleanly (after more log lines).
#[test]
fn the_daemon_serves_with_its_log_on_a_full_disk() {
    let sc = ScenarioFile::new("[[gpu]]\nmemory_total = \"80GiB\"\n");
    let port = common::free_port();
    let mut child = gpuwatch_cmd(&sc)
        .args(["--interval", "200ms", "daemon", "--no-history", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(dev_full())
        .spawn()
        .expect("daemon starts");
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!("the daemon died: {status}");
        }
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (status, body) = common::request(port, "/api/v1/health", None);
    assert_eq!(status, 200, "{body}");
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(common::request(port, "/api/v1/health", None).0, 200);
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    let status = child.wait().expect("exits");
    assert_eq!(status.code(), Some(0), "a clean stop: {status}");
}

#[test]
fn running_without_a_command_shows_the_live_table_until_interrupted() {
    use std::io::{BufRead, BufReader};
    let mut child = std::process::Command::new(gpuwatch_bin())
        .args(["--demo", "--interval", "100ms"])
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    // Two frames arrive (each starts with the header line).
    let mut headers = 0;
    for line in lines.by_ref() {
        if line.expect("utf-8").starts_with("demo-node · demo") {
            headers += 1;
            if headers == 2 {
                break;
            }
        }
    }
    assert_eq!(headers, 2, "the table is redrawn as frames arrive");
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    // Keep reading until the process closes its output: it ends on SIGINT, not on a closed pipe.
    for line in lines {
        let _ = line;
    }
    let out = child.wait_with_output().expect("exits");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// `export $(gpuwatch pick)` is what users paste: a UUID the driver (here the NVML double)
/// reports with a space and `=` in it must not add a variable to their shell; pick prints that
/// GPU's index instead, and a well-formed UUID as it is.
#[test]
fn pick_never_prints_a_uuid_that_would_word_split_a_shell() {
    let sc = ScenarioFile::new(
        "[[gpu]]\nmemory_total = \"80GiB\"\nuuid = \"GPU-x LD_PRELOAD=/tmp/x.so\"\n\
         [[gpu]]\nmemory_total = \"80GiB\"\nuuid = \"GPU-5ce1a7e0-0000-4000-8000-000000000001\"\n",
    );
    let o = gpuwatch_on(&sc, &["pick", "--count", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o).trim(),
        "CUDA_VISIBLE_DEVICES=0,GPU-5ce1a7e0-0000-4000-8000-000000000001"
    );
}
