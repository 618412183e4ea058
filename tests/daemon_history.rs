//! The daemon records the local history while it runs; `gpuwatch history who` answers from it.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{ScenarioFile, Sleeper, gpuwatch_bin, gpuwatch_cmd};

#[test]
fn the_daemon_records_history_that_history_who_reads() {
    let job = Sleeper::spawn();
    let sc = ScenarioFile::new(&format!(
        "[[gpu]]\nmemory_total = \"80GiB\"\n[[gpu.process]]\npid = {}\nused = \"12GiB\"\nsm = 50\n",
        job.pid()
    ));
    let db = sc.dir.path().join("history.sqlite");
    let mut daemon = gpuwatch_cmd(&sc)
        .args([
            "--interval",
            "200ms",
            "daemon",
            "--listen",
            "127.0.0.1:0",
            "--history",
        ])
        .arg(&db)
        .stderr(Stdio::piped())
        .spawn()
        .expect("daemon starts");
    std::thread::sleep(Duration::from_secs(2));
    let started = Instant::now();
    Command::new("kill")
        .args(["-TERM", &daemon.id().to_string()])
        .status()
        .expect("kill");
    let status = daemon.wait().expect("exits");
    let mut err = String::new();
    daemon
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("read");
    assert!(status.success(), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(err.contains("recording history in"), "{err}");
    let out = Command::new(gpuwatch_bin())
        .args([
            "history",
            "who",
            "--gpu",
            "0",
            "--at",
            "now",
            "--json",
            "--history",
        ])
        .arg(&db)
        .output()
        .expect("history runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}{}",
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains(&job.pid().to_string()), "{text}");
    assert!(
        text.contains(&(12u64 << 30).to_string()),
        "the recorded memory: {text}"
    );
}
