//! One pipeline: the daemon, the dashboard and `run` find the same things in the same
//! recording. The real H200 leak-to-OOM recording is played to all three at once (the real
//! binary each time, a JSONL sink each), and the findings they deliver are compared: the same
//! rules opening and resolving on the same GPU at the same recorded moments.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::tmux::Tmux;
use common::{ScenarioFile, gpuwatch_bin};

/// `(event, rule, gpu, pid, seconds into the recording)` of the opened and resolved events a
/// JSONL sink holds (source health left out: only the daemon judges a source that stopped).
fn delivered(path: &Path, t0: f64) -> Vec<(String, String, String, Option<u64>, f64)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] != "updated" && v["finding"]["id"]["rule"] != "source-health")
        .map(|v| {
            let f = &v["finding"];
            (
                v["event"].as_str().unwrap_or_default().to_string(),
                f["id"]["rule"].as_str().unwrap_or_default().to_string(),
                f["id"]["gpu"].as_str().unwrap_or_default().to_string(),
                f["id"]["pid"].as_u64(),
                f["at"].as_f64().unwrap_or(0.0) - t0,
            )
        })
        .collect()
}

fn config(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let sink = dir.join(format!("{name}.jsonl"));
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!("[alerts]\nlog = false\njsonl = \"{}\"\n", sink.display()),
    )
    .expect("config");
    (config, sink)
}

#[test]
fn daemon_dashboard_and_run_find_the_same_things_in_one_recording() {
    let rec = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/h200/leak-to-oom.recording.jsonl");
    let t0 = 1_795_977_897.301_448;
    let sc = ScenarioFile::new("");
    let dir = sc.dir.path();
    let speed = "2";
    let env = |cmd: &mut Command| {
        cmd.env("XDG_CONFIG_HOME", dir)
            .env("XDG_STATE_HOME", dir)
            .env("NO_COLOR", "1");
    };
    // The daemon.
    let (daemon_config, daemon_sink) = config(dir, "daemon");
    let mut daemon = Command::new(gpuwatch_bin());
    env(&mut daemon);
    let mut daemon = daemon
        .arg("--replay")
        .arg(&rec)
        .args(["--speed", speed, "--config"])
        .arg(&daemon_config)
        .args(["daemon", "--listen", "127.0.0.1:0", "--no-history"])
        .stderr(Stdio::null())
        .spawn()
        .expect("daemon starts");
    // `run`: a job that outlives the recording (40 s at twice the speed).
    let (run_config, run_sink) = config(dir, "run");
    let mut run = Command::new(gpuwatch_bin());
    env(&mut run);
    let run = run
        .arg("--replay")
        .arg(&rec)
        .args(["--speed", speed, "--config"])
        .arg(&run_config)
        .args(["run", "--quiet", "--", "sleep", "44"])
        .stderr(Stdio::null())
        .spawn()
        .expect("run starts");
    // The dashboard, in a terminal.
    let (tui_config, tui_sink) = config(dir, "tui");
    let t = Tmux::session(
        "pipeline",
        (160, 50),
        None,
        Duration::from_mins(1),
        &format!(
            "'{}' --replay '{}' --speed {speed} --config '{}'; echo \"EXITED rc=$?\"; sleep 60",
            gpuwatch_bin(),
            rec.display(),
            tui_config.display()
        ),
    );
    t.wait_for("the end of the recording", |s| {
        s.contains("the source ended")
    });
    t.keys(&["q"]);
    t.wait_for("exit", |s| s.contains("EXITED rc=0"));
    let out = run.wait_with_output().expect("run ends");
    assert!(out.status.success(), "the job's exit code is run's");
    let start = Instant::now();
    // The daemon has seen the whole recording by now.
    while start.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = Command::new("kill")
        .args(["-TERM", &daemon.id().to_string()])
        .status();
    let _ = daemon.wait();

    let daemon = delivered(&daemon_sink, t0);
    let dashboard = delivered(&tui_sink, t0);
    let run = delivered(&run_sink, t0);
    eprintln!("daemon    {daemon:?}\ndashboard {dashboard:?}\nrun       {run:?}");
    // What the detector should deliver at all: the leak (from t ≈ 20.5 s) opens filling-up
    // after the model loads of the first 14 s (which open nothing), and it resolves as soon as
    // the leaker is gone (t ≈ 74.75 s).
    let filling: Vec<_> = daemon.iter().filter(|e| e.1 == "filling-up").collect();
    assert!(
        filling.len() == 2
            && filling[0].0 == "opened"
            && (20.5..36.0).contains(&filling[0].4)
            && filling[1].0 == "resolved"
            && (74.0..76.0).contains(&filling[1].4),
        "{daemon:?}"
    );
    // Frames of a fast replay may be skipped by a busy consumer: a moment may differ by a
    // sample or two (0.5 s), nothing else.
    let same = |a: &[(String, String, String, Option<u64>, f64)],
                b: &[(String, String, String, Option<u64>, f64)]| {
        a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| {
                x.0 == y.0 && x.1 == y.1 && x.2 == y.2 && x.3 == y.3 && (x.4 - y.4).abs() <= 0.6
            })
    };
    assert!(
        same(&daemon, &dashboard),
        "daemon and dashboard disagree:\n daemon    {daemon:?}\n dashboard {dashboard:?}"
    );
    assert!(
        same(&daemon, &run),
        "daemon and run disagree:\n daemon {daemon:?}\n run    {run:?}"
    );
}
