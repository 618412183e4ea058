//! A process that exits while the driver still lists its memory, through the real path: the
//! NVML double lists the PID of a real child, the test kills the child, and the daemon (at its
//! default cadences, the grace shortened in its config file) shows the PID as exited with its
//! last known user and command, still the invoking user's, and raises exited-holder after the
//! grace; it resolves when the driver stops listing the PID.

mod common;

use std::time::{Duration, Instant};

use common::{Daemon, ScenarioFile, Sleeper, request};

/// A JSON document from the daemon; `None` before its first sample (503).
fn get_json(port: u16, path: &str) -> Option<serde_json::Value> {
    let (status, body) = request(port, path, None);
    if status == 503 && body.contains("no sample yet") {
        return None;
    }
    assert_eq!(status, 200, "{body}");
    Some(serde_json::from_str(&body).expect("json"))
}

/// The process `pid` in the daemon's snapshot, if listed.
fn process(port: u16, pid: u32) -> Option<serde_json::Value> {
    let snap = get_json(port, "/api/v1/snapshot")?;
    snap["gpus"]
        .as_array()?
        .iter()
        .flat_map(|g| g["processes"].as_array().cloned().unwrap_or_default())
        .find(|p| p["pid"].as_u64() == Some(u64::from(pid)))
}

fn exited_finding(port: u16, pid: u32) -> Option<serde_json::Value> {
    get_json(port, "/api/v1/findings")?
        .as_array()?
        .iter()
        .find(|f| f["id"]["rule"] == "exited-holder" && f["id"]["pid"].as_u64() == Some(pid.into()))
        .cloned()
}

/// Polls `f` every 200 ms for up to `limit`.
fn wait_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if let Some(v) = f() {
            return Some(v);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    None
}

#[test]
fn a_killed_process_the_driver_still_lists_is_shown_exited_and_reported_after_the_grace() {
    let mut child = Sleeper::spawn();
    let pid = child.pid();
    let listed = |pid: u32| {
        format!(
            "[[gpu]]\nuuid = \"GPU-zombie\"\nmemory_total = \"80GiB\"\n[[gpu.process]]\npid = {pid}\nused = \"5GiB\"\n"
        )
    };
    let sc = ScenarioFile::new(&listed(pid));
    let cfg = sc.dir.path().join("gpuwatch.toml");
    std::fs::write(&cfg, "[detect]\nexited-grace = \"3s\"\n").expect("config");
    let cfg = cfg.display().to_string();
    let d = Daemon::start_with_global(&sc, &["--config", &cfg], &["--no-history"]);

    // Seen in /proc first: a named process of this user.
    let alive = wait_for(Duration::from_secs(10), || {
        process(d.port, pid).filter(|p| p["visible"] == true)
    })
    .expect("the child is listed and visible");
    assert_eq!(alive["command"], "sleep 300", "{alive}");
    assert_eq!(alive["exited"], false, "{alive}");
    let user = alive["user"].clone();
    assert!(user.is_string(), "{alive}");
    assert_eq!(
        alive["watched"], true,
        "the invoking user's process: {alive}"
    );

    let _ = child.0.kill();
    let _ = child.0.wait();
    let killed_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();

    // The daemon's host facts are refreshed every 30 s: the exit is seen within that.
    let gone = wait_for(Duration::from_secs(45), || {
        process(d.port, pid).filter(|p| p["exited"] == true)
    })
    .expect("the killed child is shown exited while the driver lists it");
    assert_eq!(gone["visible"], false, "{gone}");
    assert_eq!(gone["command"], "sleep 300", "last known command: {gone}");
    assert_eq!(gone["user"], user, "last known user: {gone}");
    assert_eq!(gone["start_time"], alive["start_time"], "{gone}");
    assert_eq!(gone["watched"], true, "still mine: {gone}");
    assert_eq!(gone["used_bytes"], 5u64 << 30, "{gone}");
    let exited_at = gone["exited_at"].as_f64().expect("exited_at");
    assert!(
        exited_at >= killed_at - 1.0,
        "{exited_at} vs kill at {killed_at}"
    );

    let finding = wait_for(Duration::from_secs(15), || exited_finding(d.port, pid))
        .expect("exited-holder opens after the grace");
    let at = finding["at"].as_f64().expect("at");
    assert!(
        at - exited_at >= 3.0 - 0.01,
        "opened {}s after the exit, before the 3 s grace: {finding}",
        at - exited_at
    );
    let summary = finding["summary"].as_str().expect("summary");
    assert!(
        summary.starts_with(&format!("PID {pid} (")) && summary.contains(": sleep) exited "),
        "{summary}"
    );
    assert!(
        summary.ends_with("ago but the driver still holds 5.0GiB for it on GPU 0"),
        "{summary}"
    );
    assert_eq!(finding["severity"], "warning");
    assert_eq!(finding["culprits"][0]["command"], "sleep 300");

    // The driver lets go: the row and the finding go.
    sc.rewrite("[[gpu]]\nuuid = \"GPU-zombie\"\nmemory_total = \"80GiB\"\n");
    let resolved = wait_for(Duration::from_secs(10), || {
        (process(d.port, pid).is_none() && exited_finding(d.port, pid).is_none()).then_some(())
    });
    assert!(
        resolved.is_some(),
        "resolved once the driver stopped listing it"
    );
}

/// The demo tells the story too: alice's earlier run (PID 2161) exited and the driver still
/// holds its 6 GiB; `snapshot --json` and the text table show it exited, hers, with its command.
#[test]
fn the_demo_shows_an_exited_process_with_its_user_and_command() {
    let out = std::process::Command::new(common::gpuwatch_bin())
        .args(["--demo", "snapshot", "--json"])
        .env("XDG_CONFIG_HOME", "/nonexistent-gpuwatch-test")
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", common::stderr(&out));
    let snap: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let p = snap["gpus"][0]["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find(|p| p["pid"] == 2161)
        .cloned()
        .expect("pid 2161 on GPU 0");
    assert_eq!(p["exited"], true, "{p}");
    assert_eq!(p["visible"], false, "{p}");
    assert_eq!(p["user"], "alice", "{p}");
    assert_eq!(p["watched"], true, "{p}");
    assert!(
        p["command"]
            .as_str()
            .is_some_and(|c| c.starts_with("python train.py --model resnet50")),
        "{p}"
    );
    assert!(p["exited_at"].as_f64().is_some(), "{p}");
    let out = std::process::Command::new(common::gpuwatch_bin())
        .args(["--demo", "snapshot"])
        .env("XDG_CONFIG_HOME", "/nonexistent-gpuwatch-test")
        .env("NO_COLOR", "1")
        .output()
        .expect("runs");
    let text = common::stdout(&out);
    let row = text
        .lines()
        .find(|l| l.contains(" 2161 "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.trim_start().starts_with("*  2161  alice"), "{row}");
    assert!(
        row.contains("[exited] python train.py --model resnet50"),
        "{row}"
    );
}
