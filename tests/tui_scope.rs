//! `tui --gpu`, `--only-visible`, `--user`: the real binary in tmux, on the demo's simulated
//! GPUs and on the NVML double. The screen shows only what was asked for and says so in the
//! header; the alert sinks still get the findings about every GPU.

mod common;

use std::time::{Duration, Instant};

use common::tmux::Tmux;
use common::{ScenarioFile, fake_nvml, gpuwatch_bin};

/// The GPU panels on screen, by the index of their title (`GPU 3 H200`).
fn panels(s: &str) -> Vec<u32> {
    (0..4)
        .filter(|i| s.contains(&format!("GPU {i} H200")))
        .collect()
}

/// Whether the process table has a row for `pid`.
fn has_row(s: &str, pid: u32) -> bool {
    s.lines()
        .any(|l| l.contains(&format!(" {pid} ")) && !l.starts_with('!'))
}

#[test]
fn gpu_list_shows_only_those_gpus_their_processes_and_findings() {
    let t = Tmux::start("gpu", &[], "--demo tui --gpu 1");
    let s = t.wait_for("GPU 1 and its process", |s| {
        s.contains("GPU 1 H200") && has_row(s, 2207)
    });
    assert_eq!(panels(&s), [1], "{s}");
    for pid in [2101, 3011, 2350, 4120] {
        assert!(!has_row(&s, pid), "pid {pid} is on another GPU:\n{s}");
    }
    assert!(
        s.lines().next().unwrap_or_default().contains("only GPU 1"),
        "{s}"
    );
    // The demo's GPU 3 is near capacity and filling up from the start: not this screen's.
    assert!(
        s.contains("leak suspected: pid 2207"),
        "GPU 1's finding:\n{s}"
    );
    assert!(!s.contains("GPU 3"), "findings about other GPUs:\n{s}");
    // `g` cycles among the GPUs in scope only: GPU 1, then all (of the scope) again.
    t.keys(&["g"]);
    t.wait_for("g on GPU 1", |s| s.contains("GPU:1"));
    t.keys(&["g"]);
    let s = t.wait_for("g back to all", |s| s.contains("GPU:all"));
    assert_eq!(panels(&s), [1], "{s}");
    t.keys(&["q"]);
    t.wait_for("exit", |s| s.contains("EXITED rc=0"));
}

#[test]
fn only_visible_follows_cuda_visible_devices() {
    // A UUID prefix and a CUDA index (the demo's GPUs are one model, so CUDA numbers them as
    // NVML does).
    let env = [("CUDA_VISIBLE_DEVICES", "GPU-e9b3,0".to_string())];
    let t = Tmux::start("visible", &env, "--demo tui --only-visible");
    let s = t.wait_for("GPUs 0 and 3", |s| {
        s.contains("GPU 3 H200") && s.contains("GPU 0 H200") && has_row(s, 4120)
    });
    assert_eq!(panels(&s), [0, 3], "{s}");
    assert!(
        has_row(&s, 2101) && !has_row(&s, 2207) && !has_row(&s, 3011),
        "{s}"
    );
    assert!(s.contains("only CUDA_VISIBLE_DEVICES=GPU-e9b3,0"), "{s}");
    t.keys(&["q"]);
    t.wait_for("exit", |s| s.contains("EXITED rc=0"));

    // Set and empty: a CUDA program sees no GPU, and neither does the screen.
    let env = [("CUDA_VISIBLE_DEVICES", String::new())];
    let t = Tmux::start("none", &env, "--demo tui --only-visible");
    let s = t.wait_for("the header", |s| {
        s.contains("only CUDA_VISIBLE_DEVICES= (no GPU)")
    });
    assert_eq!(panels(&s), Vec::<u32>::new(), "{s}");
    t.keys(&["q"]);
    t.wait_for("exit", |s| s.contains("EXITED rc=0"));
}

#[test]
fn only_visible_without_the_variable_is_a_clear_error() {
    let o = std::process::Command::new(gpuwatch_bin())
        .args(["--demo", "tui", "--only-visible"])
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env("XDG_CONFIG_HOME", "/nonexistent-gpuwatch-test")
        .output()
        .expect("runs");
    common::fails_with(
        &o,
        2,
        "--only-visible shows the GPUs CUDA_VISIBLE_DEVICES names",
    );
    let o = std::process::Command::new(gpuwatch_bin())
        .args(["tui", "--gpu", "1", "--only-visible"])
        .output()
        .expect("runs");
    assert_eq!(
        o.status.code(),
        Some(2),
        "--gpu and --only-visible conflict"
    );
}

#[test]
fn a_scope_without_a_dashboard_is_refused() {
    let run = |args: &[&str]| {
        std::process::Command::new(gpuwatch_bin())
            .args(args)
            .env("XDG_CONFIG_HOME", "/nonexistent-gpuwatch-test")
            .output()
            .expect("runs")
    };
    // Output to a pipe gets the plain table of every GPU: no dashboard to limit.
    let o = run(&["--demo", "tui", "--gpu", "1"]);
    common::fails_with(&o, 2, "the output is not a terminal");
    let o = run(&["tui", "--prometheus", "http://127.0.0.1:1", "--user", "bob"]);
    common::fails_with(&o, 2, "not the cluster overview");
    let o = run(&["tui", "--connect", "http://127.0.0.1:1", "--only-visible"]);
    common::fails_with(
        &o,
        2,
        "--only-visible reads this shell's CUDA_VISIBLE_DEVICES",
    );
    let o = run(&["--demo", "tui", "--connect", "http://127.0.0.1:1"]);
    common::fails_with(&o, 2, "--demo does not apply to it");
    let o = run(&["tui", "--user", "a\u{1b}[2Jb"]);
    common::fails_with(&o, 2, "is not a user name");
    assert!(
        !common::stderr(&o).contains('\u{1b}'),
        "the name is cleaned"
    );
}

#[test]
fn user_limits_the_table_not_the_gpus() {
    let t = Tmux::start("user", &[], "--demo tui --user bob");
    let s = t.wait_for("bob's process", |s| {
        has_row(s, 4120) && s.contains("GPU 3 H200")
    });
    assert_eq!(panels(&s), [0, 1, 2, 3], "every GPU panel:\n{s}");
    for pid in [2101, 2207, 3011, 2350] {
        assert!(!has_row(&s, pid), "pid {pid} is not bob's:\n{s}");
    }
    assert!(s.contains("only user bob"), "{s}");
    t.keys(&["q"]);
    t.wait_for("exit", |s| s.contains("EXITED rc=0"));
}

#[test]
fn alert_sinks_get_findings_about_gpus_off_screen() {
    // GPU 0 is near capacity from the start; the screen shows only GPU 1.
    let sc = ScenarioFile::new(
        r#"
[[gpu]]
memory_total = "80GiB"
[[gpu.process]]
pid = 4100
used = "78.5GiB"
[[gpu]]
memory_total = "80GiB"
[[gpu.process]]
pid = 4200
used = "1GiB"
"#,
    );
    let sink = sc.dir.path().join("events.jsonl");
    let config = sc.dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[detect]\nnear-capacity-min-duration = \"0s\"\n[alerts]\njsonl = \"{}\"\n",
            sink.display()
        ),
    )
    .expect("config");
    let env = [
        ("GPUWATCH_NVML_LIB", fake_nvml().display().to_string()),
        ("FAKE_NVML_SCENARIO", sc.path.display().to_string()),
    ];
    let args = format!("tui --gpu 1 --config '{}'", config.display());
    let t = Tmux::start("sinks", &env, &args);
    t.wait_for("GPU 1", |s| has_row(s, 4200));
    let start = Instant::now();
    let opened = || {
        std::fs::read_to_string(&sink)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .any(|v| v["event"] == "opened" && v["finding"]["id"]["rule"] == "near-capacity")
    };
    while !opened() {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "GPU 0's near-capacity never reached the sink"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let s = t.screen();
    assert!(
        !s.contains("GPU 0") && !has_row(&s, 4100),
        "GPU 0 is off screen:\n{s}"
    );
    t.keys(&["q"]);
    t.wait_for("exit", |s| s.contains("EXITED rc=0"));
}
