//! The history store across processes: `kill -9` in the middle of writes leaves a sound file,
//! and `gpuwatch history who|peaks` read what was written.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

use gpuwatch::model::{GpuSample, HostProc, Memory, ProcKind, ProcSample, Sample};
use gpuwatch::store::{GpuRef, Store};

const CRASH_ENV: &str = "GPUWATCH_STORE_CRASH_PATH";

fn sample(t: f64, gpus: u32, procs: u32) -> Sample {
    Sample {
        taken_at: t,
        gpus: (0..gpus)
            .map(|g| {
                let mut s = GpuSample::empty(g, format!("GPU-test-{g}"));
                s.memory = Some(Memory {
                    total: 80 << 30,
                    reserved: None,
                    used: 10 << 30,
                    free: 70 << 30,
                });
                s.processes = (0..procs)
                    .map(|i| ProcSample {
                        pid: 4000 + i,
                        kind: ProcKind::Compute,
                        used_bytes: Some(u64::from(i + 1) << 28),
                        sm_percent: None,
                        mem_percent: None,
                        gpu_instance: None,
                        compute_instance: None,
                        host: HostProc {
                            visible: true,
                            user: Some("alice".into()),
                            command: Some(format!("python job{i}.py")),
                            start_time: Some(1_700_000_000),
                            ..HostProc::default()
                        },
                    })
                    .collect();
                s
            })
            .collect(),
        errors: Vec::new(),
        collect_seconds: 0.0,
    }
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Not a test on its own: the child that `crash_safety` starts and kills.
#[test]
#[ignore = "child process of crash_safety"]
fn crash_child() {
    let Some(path) = std::env::var_os(CRASH_ENV) else {
        return;
    };
    let mut store = Store::open(Path::new(&path)).unwrap();
    let start: f64 = store
        .peaks(0.0)
        .unwrap()
        .iter()
        .map(|p| p.at)
        .fold(1_764_000_000.0, f64::max);
    let mut k = 0u32;
    loop {
        k += 1;
        let t = start + f64::from(k);
        store.write(&sample(t, 4, 16)).unwrap();
        if k.is_multiple_of(40) {
            // Maintenance with a clock far ahead, so that it downsamples and deletes.
            store.maintain(t + 3600.0 + 120.0).unwrap();
        }
    }
}

#[test]
fn crash_safety() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.sqlite");
    let exe = std::env::current_exe().unwrap();
    let mut seed = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    for round in 0..6 {
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--ignored", "--nocapture"])
            .env(CRASH_ENV, &path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // xorshift: a different moment each round.
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        let wait = 300 + u64::from(seed % 900);
        std::thread::sleep(Duration::from_millis(wait));
        assert!(
            child.try_wait().unwrap().is_none(),
            "round {round}: the writer exited early"
        );
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let store = Store::open(&path).unwrap();
        assert_eq!(store.integrity_check().unwrap(), "ok", "round {round}");
    }
    let store = Store::open(&path).unwrap();
    let peaks = store.peaks(0.0).unwrap();
    assert!(!peaks.is_empty(), "nothing survived the kills");
    let last = peaks.iter().map(|p| p.at).fold(0.0, f64::max);
    let who = store.who(&GpuRef::Index(0), last).unwrap();
    assert!(who.is_some(), "who at the last sample");
}

#[test]
fn history_commands_print_what_was_stored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sqlite");
    let t = now();
    {
        let mut store = Store::open(&path).unwrap();
        for k in 0..5 {
            store.write(&sample(t - 5.0 + f64::from(k), 2, 3)).unwrap();
        }
    }
    let bin = env!("CARGO_BIN_EXE_gpuwatch");
    let out = Command::new(bin)
        .args(["history", "who", "--gpu", "1", "--at", "now", "--history"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("GPU-test-1"), "{text}");
    assert!(text.contains("python job2.py"), "{text}");
    assert!(text.contains("768MiB"), "{text}");

    let out = Command::new(bin)
        .args(["history", "peaks", "--since", "1h", "--json", "--history"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 6);
    assert_eq!(v[0]["peak_used"], 3u64 << 28);
    assert_eq!(v[0]["user"], "alice");

    let out = Command::new(bin)
        .args([
            "history",
            "who",
            "--gpu",
            "0",
            "--at",
            "2h ago",
            "--history",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no samples of GPU 0"));

    let out = Command::new(bin)
        .args(["history", "who", "--gpu", "0", "--at", "later", "--history"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a time"));
}
