//! One way to name a GPU: `snapshot --gpu`, `run --gpu` (on the NVML double) and
//! `history who --gpu` (on the history the daemon recorded from the same double) accept the
//! same names (index, UUID, a unique prefix in any case, a MIG device's UUID) and refuse the
//! same ones with the same errors.

mod common;

use std::process::Output;
use std::time::{Duration, Instant};

use common::{ScenarioFile, Sleeper, gpuwatch_bin, gpuwatch_cmd, gpuwatch_on, stderr, stdout};

const AB12: &str = "GPU-ab12cd34-0000-4000-8000-000000000000";
const AB99: &str = "GPU-ab99cd34-0000-4000-8000-000000000001";
const CD34: &str = "GPU-cd34ef56-0000-4000-8000-000000000002";
const MIG: &str = "MIG-5f00aa11-0000-4000-8000-000000000003";

fn scenario(pid: u32) -> String {
    format!(
        r#"
[[gpu]]
uuid = "{AB12}"
memory_total = "80GiB"
[[gpu.process]]
pid = {pid}
used = "3GiB"
[[gpu]]
uuid = "{AB99}"
memory_total = "80GiB"
[[gpu]]
uuid = "{CD34}"
memory_total = "80GiB"
mig = "enabled"
[[gpu.mig_device]]
gpu_instance = 1
compute_instance = 0
uuid = "{MIG}"
memory_total = "40GiB"
"#
    )
}

/// Records a few samples of the scenario into a history file with the daemon.
fn record_history(sc: &ScenarioFile) -> std::path::PathBuf {
    let db = sc.dir.path().join("history.sqlite");
    let db_arg = db.to_string_lossy().into_owned();
    let daemon = common::Daemon::start(sc, &["--history", &db_arg]);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = common::request(daemon.port, "/api/v1/history?since=1m", None);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        if status == 200 && v["series"].as_array().is_some_and(|s| s.len() == 3) {
            break;
        }
        assert!(Instant::now() < deadline, "no history after 20 s: {body}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The history API takes the same names.
    let (status, body) = common::request(daemon.port, "/api/v1/history?since=1m&gpu=gpu-CD", None);
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(status, 200, "{body}");
    assert_eq!(v["series"].as_array().map(Vec::len), Some(1), "{body}");
    assert_eq!(v["series"][0]["gpu_uuid"], CD34, "{body}");
    let (status, body) = common::request(daemon.port, "/api/v1/history?since=1m&gpu=GPU-ab", None);
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("matches 2 devices") && body.contains(AB99),
        "{body}"
    );
    drop(daemon);
    db
}

/// The UUID of the GPU a command chose, or its exit code and error.
fn chosen(o: &Output, from_json: impl Fn(&serde_json::Value) -> String) -> Result<String, String> {
    if o.status.success() {
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)));
        Ok(from_json(&v))
    } else {
        let err = stderr(o);
        assert!(!err.contains("panicked"), "{err}");
        Err(format!("exit {:?}: {err}", o.status.code()))
    }
}

#[test]
fn snapshot_run_and_history_who_accept_the_same_gpu_names() {
    let job = Sleeper::spawn();
    let sc = ScenarioFile::new(&scenario(job.pid()));
    let db = record_history(&sc);
    let snapshot = |name: &str| {
        let o = gpuwatch_on(&sc, &["snapshot", "--json", "--gpu", name]);
        chosen(&o, |v| {
            assert_eq!(v["gpus"].as_array().map(Vec::len), Some(1), "{v}");
            v["gpus"][0]["uuid"].as_str().expect("uuid").to_string()
        })
    };
    let who = |name: &str| {
        let o = std::process::Command::new(gpuwatch_bin())
            .args(["history", "who", "--json", "--gpu", name, "--history"])
            .arg(&db)
            .output()
            .expect("history runs");
        chosen(&o, |v| {
            v["gpu_uuid"].as_str().expect("gpu_uuid").to_string()
        })
    };
    let run = |name: &str| {
        let o = gpuwatch_cmd(&sc)
            .args(["run", "--quiet", "--gpu", name, "--"])
            .args(["sh", "-c", r#"printf '{"v":"%s"}' "$CUDA_VISIBLE_DEVICES""#])
            .output()
            .expect("run runs");
        chosen(&o, |v| v["v"].as_str().expect("v").to_string())
    };

    for (name, gpu) in [
        ("1", AB99),
        (" 2 ", CD34),
        (CD34, CD34),
        ("GPU-cd", CD34),
        ("gpu-CD34EF", CD34),
        ("GPU-ab12", AB12),
    ] {
        assert_eq!(
            snapshot(name).as_deref(),
            Ok(gpu),
            "snapshot --gpu {name:?}"
        );
        assert_eq!(who(name).as_deref(), Ok(gpu), "history who --gpu {name:?}");
        assert_eq!(run(name).as_deref(), Ok(gpu), "run --gpu {name:?}");
    }
    // A MIG device: snapshot shows its GPU, run gives the job the MIG device itself.
    assert_eq!(snapshot("MIG-5f00").as_deref(), Ok(CD34));
    assert_eq!(run("mig-5F00").as_deref(), Ok(MIG));

    for (name, says) in [
        ("GPU-ab", "--gpu 'GPU-ab' matches 2 devices"),
        ("GPU-ff", "--gpu 'GPU-ff' is not a GPU"),
        ("7", "--gpu '7' is not a GPU"),
    ] {
        for (what, answer) in [("snapshot", snapshot(name)), ("run", run(name))] {
            let err = answer.expect_err(what);
            assert!(err.starts_with("exit Some(2)"), "{what} {name}: {err}");
            assert!(err.contains(says), "{what} {name}: {err}");
            // Every error lists the GPUs to choose from.
            assert!(err.contains(AB12) && err.contains(AB99), "{what}: {err}");
        }
    }
    // The history names what it has: an unknown or ambiguous UUID lists the file's GPUs; an
    // index is the GPU that had it at that moment (none had 7: no samples).
    for name in ["GPU-ab", "GPU-ff"] {
        let err = who(name).expect_err(name);
        assert!(err.starts_with("exit Some(2)"), "{err}");
        assert!(err.contains(AB12) && err.contains(AB99), "{err}");
    }
    assert!(who("GPU-ab").unwrap_err().contains("matches 2 devices"));
    let err = who("GPU-ff").unwrap_err();
    assert!(
        err.contains("is not a GPU in the history") && err.contains(CD34),
        "{err}"
    );
    let err = who("7").expect_err("7");
    assert!(err.contains("no samples of GPU 7"), "{err}");

    for bad in ["", "GPU ab", "99999999999"] {
        let o = gpuwatch_on(&sc, &["snapshot", "--gpu", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("expected"), "{bad:?}: {}", stderr(&o));
    }
}
