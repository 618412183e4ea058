//! The dashboard delivers its findings where the user meets them: the real binary in tmux on
//! the NVML double, at the default interval, with a JSONL sink configured in a config file. A
//! finding shows on screen *and* reaches the sink's file; a critical opening rings the bell
//! once (counted in the raw bytes the dashboard wrote to its terminal); `[detect]` thresholds
//! from the config file change what the dashboard finds.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::tmux::Tmux;
use common::{ScenarioFile, fake_nvml, gpuwatch_bin};

/// The events a JSONL sink wrote so far, as (event, rule, severity).
fn events(path: &Path) -> Vec<(String, String, String)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| {
            let f = &v["finding"];
            (
                v["event"].as_str().unwrap_or_default().to_string(),
                f["id"]["rule"].as_str().unwrap_or_default().to_string(),
                f["severity"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Waits (10 s at most) until the sink's file holds an `opened` event of `rule` at `severity`.
fn wait_for_opened(sink: &Path, rule: &str, severity: &str) {
    let start = Instant::now();
    while !events(sink)
        .iter()
        .any(|(e, r, sev)| e == "opened" && r == rule && sev == severity)
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting for the event in the sink's file: {rule} {severity} opened"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// BEL bytes that are not the end of an OSC sequence (a title, a clipboard write).
fn bells(raw: &[u8]) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == 0x1b && raw.get(i + 1) == Some(&b']') {
            // Skip to the OSC's terminator: BEL or ESC \.
            i += 2;
            while i < raw.len()
                && raw[i] != 0x07
                && !(raw[i] == 0x1b && raw.get(i + 1) == Some(&b'\\'))
            {
                i += 1;
            }
            i += 1;
            continue;
        }
        if raw[i] == 0x07 {
            n += 1;
        }
        i += 1;
    }
    n
}

/// Runs the dashboard on `scenario` with `config` (a config file's text) under `script`, which
/// keeps every byte written to the terminal in `raw`.
fn dashboard(name: &str, sc: &ScenarioFile, config: &str) -> (Tmux, std::path::PathBuf) {
    let config_path = sc.dir.path().join("config.toml");
    std::fs::write(&config_path, config).expect("config");
    let raw = sc.dir.path().join("terminal.raw");
    let script = format!(
        "export GPUWATCH_NVML_LIB='{}' FAKE_NVML_SCENARIO='{}'; script -qfe -c \"'{}' --config '{}' --log-file '{}'\" '{}'; echo \"EXITED rc=$?\"; sleep 60",
        fake_nvml().display(),
        sc.path.display(),
        gpuwatch_bin(),
        config_path.display(),
        sc.dir.path().join("gpuwatch.log").display(),
        raw.display(),
    );
    let t = Tmux::session(name, (120, 40), None, Duration::from_secs(40), &script);
    (t, raw)
}

#[test]
fn a_finding_reaches_the_screen_the_sink_and_the_bell_once() {
    // 78.5 of 80 GiB in use from the start: near capacity, critical (≥ 97 %) once it has held
    // for the default 10 s.
    let sc = ScenarioFile::new(
        r#"
[[gpu]]
memory_total = "80GiB"
[[gpu.process]]
pid = 4100
used = "78.5GiB"
sm = 90
"#,
    );
    let sink = sc.dir.path().join("events.jsonl");
    let (t, raw) = dashboard(
        "alerts",
        &sc,
        &format!("[alerts]\njsonl = \"{}\"\n", sink.display()),
    );
    let s = t.wait_for("the finding on screen", |s| {
        s.contains("[critical] GPU 0 is 98% full")
    });
    assert!(s.contains("4100"), "{s}");
    wait_for_opened(&sink, "near-capacity", "critical");
    // A few more frames: the finding stays open, nothing more rings.
    std::thread::sleep(Duration::from_secs(3));
    t.keys(&["q"]);
    t.wait_for("exit", |s| s.contains("EXITED rc=0"));
    let raw = std::fs::read(&raw).expect("the terminal's bytes");
    assert_eq!(bells(&raw), 1, "one bell for one critical opening");
    let opened = events(&sink)
        .into_iter()
        .filter(|(e, _, _)| e == "opened")
        .count();
    assert_eq!(opened, 1, "{:?}", events(&sink));
    // The findings are in the log file too, and no sink line went to the screen.
    let log = std::fs::read_to_string(sc.dir.path().join("gpuwatch.log")).expect("log");
    assert!(log.contains("near-capacity opened"), "{log}");
    assert!(!String::from_utf8_lossy(&raw).contains("near-capacity opened"));
}

#[test]
fn detect_thresholds_from_the_config_file_change_what_the_dashboard_finds() {
    // 60 % used: nothing at the defaults (90 %); a config file that warns from 50 % after 2 s
    // opens a warning, on screen and in the sink, and no bell rings for a warning.
    let sc = ScenarioFile::new(
        r#"
[[gpu]]
memory_total = "80GiB"
[[gpu.process]]
pid = 4200
used = "48GiB"
"#,
    );
    let sink = sc.dir.path().join("events.jsonl");
    let (t, raw) = dashboard(
        "detect",
        &sc,
        &format!(
            "[detect]\nnear-capacity-warn = 50\nnear-capacity-min-duration = \"2s\"\n\n[alerts]\njsonl = \"{}\"\n",
            sink.display()
        ),
    );
    t.wait_for("the warning on screen", |s| {
        s.contains("[warning] GPU 0 is 60% full")
    });
    wait_for_opened(&sink, "near-capacity", "warning");
    t.keys(&["q"]);
    t.wait_for("exit", |s| s.contains("EXITED rc=0"));
    assert_eq!(bells(&std::fs::read(&raw).expect("raw")), 0);
}
