//! Host enrichment against real processes: children of this test spawned with `sleep`.

use std::process::{Child, Command};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gpuwatch::source::procinfo::{ProcInfo, current_user, read_ppid};

/// A `sleep 30` child, killed and reaped on drop.
struct Sleeper(Child);

impl Sleeper {
    fn spawn() -> Self {
        Self(
            Command::new("sleep")
                .arg("30")
                .spawn()
                .expect("spawn sleep"),
        )
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Waits until the child has exec'd `sleep` (right after `spawn` it may still be the forked
/// copy of this test binary; mid-exec, `comm` is already `sleep` while `cmdline` is still
/// empty).
fn wait_exec(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if comm.trim() == "sleep" && !cmdline.is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("child {pid} never became `sleep`");
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

/// A PID no process can have: above the kernel's `pid_max`.
fn impossible_pid() -> u32 {
    let max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4_194_304);
    max + 1
}

#[test]
fn child_is_enriched() {
    let child = Sleeper::spawn();
    let pid = child.pid();
    wait_exec(pid);

    let mut info = ProcInfo::new().expect("sysinfo supported");
    let out = info.enrich(&[pid]);
    let h = &out[&pid];
    assert!(h.visible);
    assert_eq!(h.name.as_deref(), Some("sleep"));
    assert!(
        h.command.as_deref().is_some_and(|c| c.contains("sleep 30")),
        "{:?}",
        h.command
    );
    assert_eq!(h.user, current_user());
    assert!(h.uid.is_some());
    assert_eq!(h.ppid, Some(std::process::id()));
    let start = h.start_time.expect("start time");
    let now = now_secs();
    // Start time has one-second resolution (and boot time is rounded): allow a little slack.
    assert!(
        start <= now + 2 && start + 60 >= now,
        "start {start}, now {now}"
    );
    assert!(h.rss_bytes.is_some_and(|r| r > 0), "{:?}", h.rss_bytes);
    // Not in a container on this host (the test would not run in a pod's cgroup otherwise…
    // but if it does, the field must at least be well formed).
    if let Some(c) = &h.container {
        assert!(c.len() >= 12, "{c}");
    }

    assert_eq!(info.parent_of(pid), Some(std::process::id()));
    assert_eq!(read_ppid(pid), Some(std::process::id()));
    // An ancestor holding no GPU context: answered from /proc/PID/stat.
    assert_eq!(
        info.parent_of(std::process::id()),
        read_ppid(std::process::id())
    );
}

#[test]
fn missing_pid_is_not_visible() {
    let mut info = ProcInfo::new().expect("sysinfo supported");
    let gone = impossible_pid();

    // A just-reaped child too.
    let mut reaped = Sleeper::spawn();
    let reaped_pid = reaped.pid();
    reaped.stop();

    let out = info.enrich(&[gone, reaped_pid]);
    assert_eq!(out.len(), 2);
    for pid in [gone, reaped_pid] {
        let h = &out[&pid];
        assert!(!h.visible, "{pid}: {h:?}");
        assert_eq!(*h, gpuwatch::model::HostProc::default());
    }
    assert!(info.loaded_pids().is_empty());
    assert_eq!(info.parent_of(gone), None);
}

#[test]
fn cpu_percent_needs_a_second_sighting() {
    let child = Sleeper::spawn();
    let pid = child.pid();
    wait_exec(pid);

    let mut info = ProcInfo::new().expect("sysinfo supported");
    let first = info.enrich(&[pid]);
    assert_eq!(first[&pid].cpu_percent, None);

    std::thread::sleep(Duration::from_millis(300));
    let second = info.enrich(&[pid]);
    let cpu = second[&pid]
        .cpu_percent
        .expect("cpu known on the second refresh");
    // `sleep` sleeps.
    assert!((0.0..20.0).contains(&cpu), "{cpu}");
}

#[test]
fn busy_process_shows_cpu() {
    // A shell loop burning one core.
    let mut child = Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .spawn()
        .expect("spawn sh");
    let pid = child.id();
    let mut info = ProcInfo::new().expect("sysinfo supported");
    info.enrich(&[pid]);
    std::thread::sleep(Duration::from_millis(500));
    let cpu = info.enrich(&[pid])[&pid].cpu_percent;
    let _ = child.kill();
    let _ = child.wait();
    // One core busy is ~100 %; a loaded 2-core CI box may give it less.
    let cpu = cpu.expect("cpu known");
    assert!(cpu > 20.0 && cpu < 150.0, "{cpu}");
}

#[test]
fn exited_child_becomes_invisible() {
    let mut a = Sleeper::spawn();
    let b = Sleeper::spawn();
    wait_exec(a.pid());
    wait_exec(b.pid());
    let (pa, pb) = (a.pid(), b.pid());

    let mut info = ProcInfo::new().expect("sysinfo supported");
    let out = info.enrich(&[pa, pb]);
    assert!(out[&pa].visible && out[&pb].visible);

    a.stop();
    let out = info.enrich(&[pa, pb]);
    assert!(!out[&pa].visible);
    assert!(out[&pb].visible);
    assert_eq!(info.loaded_pids(), vec![pb]);
}

#[test]
fn zombie_is_visible_with_name_as_command() {
    let mut child = Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("spawn sleep");
    let pid = child.id();
    wait_exec(pid);
    child.kill().expect("kill");
    // Not reaped yet: a zombie, still in /proc, with an empty command line.
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut info = ProcInfo::new().expect("sysinfo supported");
    let h = info.enrich(&[pid]).remove(&pid).expect("entry");
    let _ = child.wait();
    assert!(h.visible);
    assert_eq!(h.name.as_deref(), Some("sleep"));
    assert_eq!(h.command, h.name, "empty cmdline falls back to the name");
}

#[test]
fn only_asked_pids_are_loaded() {
    let a = Sleeper::spawn();
    let b = Sleeper::spawn();
    wait_exec(a.pid());
    wait_exec(b.pid());
    let (pa, pb) = (a.pid(), b.pid());

    let mut info = ProcInfo::new().expect("sysinfo supported");
    // A process-table scan would load every process on the host (this test binary, init…).
    let out = info.enrich(&[pa, pb, pa]);
    assert_eq!(out.len(), 2);
    let mut both = vec![pa, pb];
    both.sort_unstable();
    assert_eq!(info.loaded_pids(), both);

    // PIDs no longer asked are forgotten, and their CPU baseline with them.
    let out = info.enrich(&[pb]);
    assert_eq!(out.len(), 1);
    assert_eq!(info.loaded_pids(), vec![pb]);
    std::thread::sleep(Duration::from_millis(150));
    let out = info.enrich(&[pa, pb]);
    assert_eq!(out[&pa].cpu_percent, None, "pa starts over");
    assert!(out[&pb].cpu_percent.is_some());
}

#[test]
fn empty_call_is_empty() {
    let mut info = ProcInfo::new().expect("sysinfo supported");
    assert!(info.enrich(&[]).is_empty());
    assert!(info.loaded_pids().is_empty());
}

/// Rough cost of one `enrich` call (steady state: every PID seen before). Run with
/// `cargo test --release --test procinfo enrich_cost -- --ignored --nocapture`.
#[test]
#[ignore = "timing, prints only"]
fn enrich_cost() {
    for n in [4usize, 64] {
        let children: Vec<Sleeper> = (0..n).map(|_| Sleeper::spawn()).collect();
        for c in &children {
            wait_exec(c.pid());
        }
        let pids: Vec<u32> = children.iter().map(Sleeper::pid).collect();
        let mut info = ProcInfo::new().expect("sysinfo supported");
        let t = Instant::now();
        info.enrich(&pids);
        let first = t.elapsed();
        let rounds = 200u32;
        let t = Instant::now();
        for _ in 0..rounds {
            std::hint::black_box(info.enrich(&pids));
        }
        let steady = t.elapsed() / rounds;
        // One PID dropped each call forces the System rebuild path.
        let t = Instant::now();
        for i in 0..rounds {
            let k = i as usize % n;
            let subset: Vec<u32> = pids.iter().copied().filter(|&p| p != pids[k]).collect();
            std::hint::black_box(info.enrich(&subset));
        }
        let churn = t.elapsed() / rounds;
        println!("enrich {n:>2} pids: first {first:?}, steady {steady:?}, with churn {churn:?}");
    }
}
