//! Where the parents of a watched process come from: a demo's or a recording's own report,
//! never this host's `/proc` (whose PID 4101, if any, is some other process).

mod common;

use std::process::Command;

#[test]
fn watch_pid_takes_in_the_children_the_demo_reports() {
    // The demo's bob runs `python eval.py` as PID 4120 under PID 4101 (its launcher) on GPU 3.
    let out = Command::new(common::gpuwatch_bin())
        .args(["--demo", "--watch", "pid:4101", "snapshot", "--json"])
        .env("XDG_CONFIG_HOME", "/nonexistent-gpuwatch-test")
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let snap: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let gpu3 = &snap["gpus"][3];
    let eval = gpu3["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == 4120)
        .expect("pid 4120 on GPU 3");
    assert_eq!(eval["watched"], true, "{eval}");
    assert_eq!(gpu3["mine_bytes"], eval["used_bytes"], "{gpu3}");
    // Nobody else is mine.
    for g in snap["gpus"].as_array().unwrap() {
        for p in g["processes"].as_array().unwrap() {
            assert_eq!(p["watched"], p["pid"] == 4120, "{p}");
        }
    }
}

#[test]
fn a_scenario_s_tree_is_walked_in_the_scenario_never_in_this_host_s_proc() {
    // PID 777 of the scenario names as its parent the PID of a real process here (a sleep,
    // child of this test): walking this host's /proc from there would reach this test's PID
    // and call 777 "mine". PID 778's grandparent 775 is known from the scenario alone
    // (778 → 776 → 775, 776 being a GPU process too).
    let sleeper = common::Sleeper::spawn();
    let sc = common::ScenarioFile::new(&format!(
        r#"
[[gpu]]
memory_total = "80GiB"
[[gpu.process]]
pid = 777
used = "10GiB"
host = {{ user = "eve", command = "python a.py", ppid = {} }}
[[gpu.process]]
pid = 776
used = "1GiB"
host = {{ user = "eve", command = "torchrun", ppid = 775 }}
[[gpu.process]]
pid = 778
used = "5GiB"
host = {{ user = "eve", command = "python rank.py", ppid = 776 }}
"#,
        sleeper.pid()
    ));
    let snapshot = |watch: &str| -> serde_json::Value {
        let out = Command::new(common::gpuwatch_bin())
            .arg("--scenario")
            .arg(&sc.path)
            .args(["--watch", watch, "snapshot", "--json"])
            .env("XDG_CONFIG_HOME", "/nonexistent-gpuwatch-test")
            .output()
            .expect("runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("json")
    };
    let watched = |snap: &serde_json::Value| -> Vec<u64> {
        let mut v: Vec<u64> = snap["gpus"][0]["processes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["watched"] == true)
            .map(|p| p["pid"].as_u64().unwrap())
            .collect();
        v.sort_unstable();
        v
    };
    assert_eq!(
        watched(&snapshot(&format!("pid:{}", std::process::id()))),
        Vec::<u64>::new(),
        "this host's process tree says nothing about a scenario's PIDs"
    );
    assert_eq!(watched(&snapshot("pid:775")), vec![776, 778]);
}
