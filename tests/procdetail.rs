//! `gpuwatch::source::procdetail` against real child processes.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use gpuwatch::source::procdetail::{self, ProcDetail};

fn reap(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Polls `read_detail(pid)` until `ok` holds (a freshly spawned shell needs a moment to exec
/// or fork), for at most 5 s.
fn detail_until(pid: u32, ok: impl Fn(&ProcDetail) -> bool) -> ProcDetail {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let d = procdetail::read_detail(pid);
        if ok(&d) || Instant::now() > deadline {
            return d;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn cwd_command_and_env() {
    let dir = tempfile::tempdir().expect("temp dir");
    let child = Command::new("sh")
        .args(["-c", "exec sleep 30"])
        .env("FOO", "1")
        .env("CUDA_VISIBLE_DEVICES", "GPU-x")
        .env("LOCAL_RANK", "3")
        .env("NCCL_DEBUG", "INFO")
        .current_dir(dir.path())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    let d = detail_until(pid, |d| d.command.as_deref() == Some("sleep 30"));

    assert_eq!(d.pid, pid);
    assert_eq!(
        d.cwd
            .as_deref()
            .map(std::fs::canonicalize)
            .transpose()
            .ok()
            .flatten(),
        Some(std::fs::canonicalize(dir.path()).expect("canonical"))
    );
    assert_eq!(d.command.as_deref(), Some("sleep 30"));
    assert_eq!(d.env_note, None);
    let names: Vec<&str> = d.env.iter().map(|(k, _)| k.as_str()).collect();
    assert!(!names.contains(&"FOO"), "{names:?}");
    assert!(!names.contains(&"PATH"), "{names:?}");
    let get = |k: &str| d.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("CUDA_VISIBLE_DEVICES"), Some("GPU-x"));
    assert_eq!(get("LOCAL_RANK"), Some("3"));
    assert_eq!(get("NCCL_DEBUG"), Some("INFO"));
    // INTERESTING_ENV order, NCCL_* last.
    let cuda = names.iter().position(|n| *n == "CUDA_VISIBLE_DEVICES");
    let rank = names.iter().position(|n| *n == "LOCAL_RANK");
    assert!(cuda < rank);
    assert_eq!(names.last(), Some(&"NCCL_DEBUG"));

    // The parent chain starts with this test process and ends at PID 1.
    assert_eq!(d.ancestors.first().map(|a| a.pid), Some(std::process::id()));
    assert_eq!(d.ancestors.last().map(|a| a.pid), Some(1));
    assert!(d.ancestors.iter().all(|a| !a.name.is_empty()));
    assert!(d.children.is_empty());
    reap(child);
}

#[test]
fn children_of_a_shell() {
    let child = Command::new("sh")
        .args(["-c", "sleep 30 & sleep 30 & wait"])
        .spawn()
        .expect("spawn");
    let pid = child.id();
    // Forked children are named `sh` until they exec `sleep`.
    let d = detail_until(pid, |d| {
        d.children.len() >= 2 && d.children.iter().all(|c| c.name == "sleep")
    });
    assert_eq!(d.children.len(), 2, "{:?}", d.children);
    assert!(
        d.children.iter().all(|c| c.name == "sleep"),
        "{:?}",
        d.children
    );
    assert!(d.children[0].pid < d.children[1].pid);
    for c in &d.children {
        let grandchild = procdetail::read_detail(c.pid);
        assert_eq!(grandchild.ancestors.first().map(|a| a.pid), Some(pid));
        assert_eq!(
            grandchild.ancestors.get(1).map(|a| a.pid),
            Some(std::process::id())
        );
    }
    let kids: Vec<u32> = d.children.iter().map(|c| c.pid).collect();
    reap(child);
    for k in kids {
        let _ = Command::new("kill").arg(k.to_string()).status();
    }
}

#[test]
fn gone_process_says_so() {
    let mut child = Command::new("true").spawn().expect("spawn");
    let pid = child.id();
    child.wait().expect("wait");
    let d = procdetail::read_detail(pid);
    // The PID could be reused by now, in theory; then it's another process's detail.
    if d.command.is_none() {
        assert_eq!(d.env_note.as_deref(), Some("process gone"));
        assert!(d.env.is_empty() && d.cwd.is_none());
    }
}

#[test]
fn forest_groups_children_under_their_parent() {
    let child = Command::new("sh")
        .args(["-c", "sleep 30 & sleep 30 & wait"])
        .spawn()
        .expect("spawn");
    let shell = child.id();
    let d = detail_until(shell, |d| d.children.len() >= 2);
    let kids: Vec<u32> = d.children.iter().map(|c| c.pid).collect();
    assert_eq!(kids.len(), 2);

    let rows = procdetail::process_forest(&kids);
    let rows: Vec<(u32, usize, bool)> = rows.iter().map(|r| (r.pid, r.depth, r.on_gpu)).collect();
    assert_eq!(
        rows,
        vec![(shell, 0, false), (kids[0], 1, true), (kids[1], 1, true)]
    );

    // The shell on the GPU too: it shows under its parent (this test), with its children.
    let rows = procdetail::process_forest(&[shell]);
    let rows: Vec<(u32, usize, bool)> = rows.iter().map(|r| (r.pid, r.depth, r.on_gpu)).collect();
    assert_eq!(
        rows,
        vec![
            (std::process::id(), 0, false),
            (shell, 1, true),
            (kids[0], 2, false),
            (kids[1], 2, false),
        ]
    );

    reap(child);
    for k in kids {
        let _ = Command::new("kill").arg(k.to_string()).status();
    }
}
