//! The history file survives what the daemon will meet (issue 11, item 12), through the real
//! binary on the NVML test double: one writer at a time, simulated sources kept out of the real
//! history, readers without write access, other programs' files left alone, SIGHUP a clean stop.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{ScenarioFile, Sleeper, gpuwatch_bin, gpuwatch_cmd};

fn scenario(pid: u32) -> ScenarioFile {
    ScenarioFile::new(&format!(
        "[[gpu]]\nmemory_total = \"80GiB\"\nmemory_reserved = \"0\"\n[[gpu.process]]\npid = {pid}\n\
         used = {{ linear = [[0, \"2GiB\"], [75, \"78GiB\"]] }}\nsm = 90\n"
    ))
}

/// A daemon whose stderr is collected as it comes.
struct Running {
    child: Child,
    log: Arc<Mutex<String>>,
}

impl Running {
    fn start(cmd: &mut Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("daemon starts");
        let log = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&log);
        let pipe = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                let mut log = sink.lock().expect("lock");
                log.push_str(&line);
                log.push('\n');
            }
        });
        Self { child, log }
    }

    fn log(&self) -> String {
        self.log.lock().expect("lock").clone()
    }

    fn wait_for(&self, needle: &str, limit: Duration) {
        let started = Instant::now();
        while !self.log().contains(needle) {
            assert!(
                started.elapsed() < limit,
                "no '{needle}' after {limit:?}: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for the exit (at most `limit`; killed and failed past it).
    fn wait(&mut self, limit: Duration) -> std::process::ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                // Let the reader thread take the last lines.
                std::thread::sleep(Duration::from_millis(100));
                return status;
            }
            if started.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("still running after {limit:?}: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill -{sig}");
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn daemon_cmd(sc: &ScenarioFile, extra: &[&str]) -> Command {
    let mut cmd = gpuwatch_cmd(sc);
    cmd.args(["--interval", "200ms"])
        .args(extra)
        .args(["daemon", "--listen", "127.0.0.1:0"]);
    cmd
}

fn daemon_on(sc: &ScenarioFile, db: &Path) -> Command {
    let mut cmd = daemon_cmd(sc, &[]);
    cmd.arg("--history").arg(db);
    cmd
}

/// `gpuwatch history who --gpu 0 --at now --history DB`, as this user or, when `as_nobody`
/// and running as root, as user `nobody` (root reads any file: the fault needs another user).
fn who(db: &Path, as_nobody: bool) -> Output {
    let mut cmd = if as_nobody && is_root() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            gpuwatch_bin(),
        ]);
        c
    } else {
        Command::new(gpuwatch_bin())
    };
    cmd.args(["history", "who", "--gpu", "0", "--at", "now", "--history"])
        .arg(db)
        // No configuration file (root's is not readable by nobody).
        .env("XDG_CONFIG_HOME", db.parent().unwrap())
        .env("HOME", db.parent().unwrap())
        .env("NO_COLOR", "1")
        .output()
        .expect("history who runs")
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A directory other users may enter (a temp dir is 0700), holding a gpuwatch history a
/// stopped daemon wrote about `job`.
fn recorded_history(sc: &ScenarioFile) -> PathBuf {
    let dir = sc.dir.path().join("state");
    std::fs::create_dir(&dir).unwrap();
    let db = dir.join("history.sqlite");
    let mut d = Running::start(&mut daemon_on(sc, &db));
    d.wait_for("listening on", Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(1500));
    d.signal("TERM");
    assert!(d.wait(Duration::from_secs(10)).success(), "{}", d.log());
    db
}

fn open_up(dir: &Path) {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

// (a) One writer per file; a killed holder does not block the next start.
#[test]
fn a_second_daemon_on_the_same_history_is_refused_and_a_killed_one_blocks_nothing() {
    let job = Sleeper::spawn();
    let sc = scenario(job.pid());
    let db = sc.dir.path().join("history.sqlite");
    let mut first = Running::start(&mut daemon_on(&sc, &db));
    first.wait_for("listening on", Duration::from_secs(20));

    let mut second = Running::start(&mut daemon_on(&sc, &db));
    let status = second.wait(Duration::from_secs(15));
    let log = second.log();
    assert_eq!(status.code(), Some(2), "refused as a setup error: {log}");
    assert!(
        log.contains("in use by another gpuwatch daemon")
            && log.contains(&format!("PID {}", first.child.id()))
            && log.contains(&*db.to_string_lossy()),
        "names the file and the holder: {log}"
    );
    assert!(!log.contains("panicked"), "{log}");

    // kill -9: no clean stop, the lock file stays behind; the kernel dropped the lock.
    first.signal("KILL");
    first.wait(Duration::from_secs(10));
    assert!(db.with_extension("sqlite.lock").exists());
    let mut third = Running::start(&mut daemon_on(&sc, &db));
    third.wait_for("listening on", Duration::from_secs(20));
    assert!(
        third.log().contains("recording history in"),
        "{}",
        third.log()
    );
    // Readers take no lock: `history who` answers while the writer runs.
    std::thread::sleep(Duration::from_millis(800));
    let out = who(&db, false);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&job.pid().to_string()),
        "{}",
        text(&out)
    );
    third.signal("TERM");
    assert!(
        third.wait(Duration::from_secs(10)).success(),
        "{}",
        third.log()
    );
}

// (b) Simulated sources stay out of the real history.
#[test]
fn simulated_sources_do_not_write_the_real_history() {
    let sc = ScenarioFile::new("[[gpu]]\nmemory_total = \"80GiB\"\n");
    let real = sc.dir.path().join("gpuwatch/history.sqlite");
    let recording = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/h200/leak-to-oom.recording.jsonl");
    let replay = ["--replay", recording.to_str().unwrap()];
    for source in [&["--demo"][..], &replay[..]] {
        let mut d = Running::start(&mut daemon_cmd(&sc, source));
        d.wait_for("listening on", Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(1200));
        d.signal("TERM");
        assert!(d.wait(Duration::from_secs(10)).success(), "{}", d.log());
        assert!(
            d.log()
                .contains("no local history: the source is simulated"),
            "{source:?} says why: {}",
            d.log()
        );
        assert!(
            !real.exists() && !real.parent().unwrap().exists(),
            "{source:?} created {}",
            real.display()
        );
    }
    // Asked for explicitly, a simulated source records into the file it was given.
    let demo_db = sc.dir.path().join("demo-history.sqlite");
    let mut d = Running::start(daemon_cmd(&sc, &["--demo"]).arg("--history").arg(&demo_db));
    d.wait_for("recording history in", Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(800));
    d.signal("TERM");
    assert!(d.wait(Duration::from_secs(10)).success(), "{}", d.log());
    assert!(who(&demo_db, false).status.success());
    assert!(!real.exists());
}

// (c) A stopped daemon's history is readable by a user who may not write it or its directory.
#[test]
fn a_reader_without_write_access_reads_a_stopped_daemons_history() {
    let job = Sleeper::spawn();
    let sc = scenario(job.pid());
    open_up(sc.dir.path());
    let db = recorded_history(&sc);
    let dir = db.parent().unwrap().to_path_buf();
    assert!(
        !db.with_extension("sqlite-wal").exists(),
        "a clean stop leaves no WAL"
    );
    // The file 0644 in a 0755 directory owned by root, read as nobody; not root: a 0555 dir.
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    if !is_root() {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    }
    let out = who(&db, true);
    let answer = text(&out);
    assert!(out.status.success(), "{answer}");
    assert!(answer.contains(&job.pid().to_string()), "{answer}");
    assert!(
        !db.with_extension("sqlite-shm").exists(),
        "the reader wrote nothing beside the file"
    );

    // Precise errors: a file this user may not read is not "is it a SQLite file?".
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o000)).unwrap();
    let out = who(&db, true);
    open_up(&dir);
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let msg = text(&out);
    assert_eq!(out.status.code(), Some(2), "{msg}");
    assert!(
        msg.contains("permission denied") && msg.contains("history.sqlite"),
        "{msg}"
    );
    assert!(!msg.contains("SQLite file?"), "{msg}");

    // A damaged history (SQLite's header, garbage after it) is named damaged.
    let damaged = dir.join("damaged.sqlite");
    let mut bytes = std::fs::read(&db).unwrap();
    for b in bytes.iter_mut().skip(100) {
        *b = 0xa5;
    }
    std::fs::write(&damaged, &bytes).unwrap();
    let out = who(&damaged, false);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("damaged SQLite database"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_reader_without_write_access_reads_while_the_daemon_runs() {
    let job = Sleeper::spawn();
    let sc = scenario(job.pid());
    open_up(sc.dir.path());
    let dir = sc.dir.path().join("state");
    std::fs::create_dir(&dir).unwrap();
    let db = dir.join("history.sqlite");
    let mut d = Running::start(&mut daemon_on(&sc, &db));
    d.wait_for("listening on", Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(1200));
    let out = who(&db, true);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&job.pid().to_string()),
        "{}",
        text(&out)
    );
    d.signal("TERM");
    assert!(d.wait(Duration::from_secs(10)).success(), "{}", d.log());
}

// (d) Another program's SQLite file (or any other file) is refused, and left byte for byte.
#[test]
fn a_foreign_file_is_refused_and_left_untouched() {
    let sc = ScenarioFile::new("[[gpu]]\nmemory_total = \"80GiB\"\n");
    let foreign = sc.dir.path().join("notes.sqlite");
    {
        let conn = rusqlite::Connection::open(&foreign).unwrap();
        conn.execute_batch(
            "CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT);
             INSERT INTO notes(body) VALUES ('mine, not gpuwatch''s');",
        )
        .unwrap();
    }
    let text_file = sc.dir.path().join("notes.txt");
    std::fs::write(&text_file, "plain text, not a database\n".repeat(100)).unwrap();
    for (file, needle) in [
        (
            &foreign,
            "not a gpuwatch history (user_version 0, tables: notes)",
        ),
        (&text_file, "not a SQLite database"),
    ] {
        let before = std::fs::read(file).unwrap();
        let mtime = std::fs::metadata(file).unwrap().modified().unwrap();
        std::thread::sleep(Duration::from_millis(20));

        let mut d = Running::start(&mut daemon_on(&sc, file));
        let status = d.wait(Duration::from_secs(15));
        let log = d.log();
        assert_eq!(status.code(), Some(2), "the daemon refuses it: {log}");
        assert!(
            log.contains(needle) && log.contains("nothing was written"),
            "{log}"
        );

        let out = who(file, false);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains(needle), "{}", text(&out));

        assert_eq!(std::fs::read(file).unwrap(), before, "{}", file.display());
        assert_eq!(std::fs::metadata(file).unwrap().modified().unwrap(), mtime);
        for suffix in ["-wal", "-shm", "-journal", ".lock"] {
            let side = PathBuf::from(format!("{}{suffix}", file.display()));
            assert!(!side.exists(), "{} was created", side.display());
        }
    }
}

// (e) SIGHUP is a clean stop: the WAL checkpointed, the alerts delivered.
#[test]
fn sighup_stops_the_daemon_cleanly() {
    let job = Sleeper::spawn();
    let sc = scenario(job.pid());
    let jsonl = sc.dir.path().join("events.jsonl");
    let cfg = sc.dir.path().join("config.toml");
    std::fs::write(
        &cfg,
        format!(
            "[detect]\nfilling-window = \"5s\"\n[alerts]\nlog = true\njsonl = \"{}\"\n",
            jsonl.display()
        ),
    )
    .unwrap();
    let db = sc.dir.path().join("history.sqlite");
    let mut cmd = daemon_cmd(&sc, &["--config", cfg.to_str().unwrap()]);
    cmd.arg("--history").arg(&db);
    let mut d = Running::start(&mut cmd);
    d.wait_for("filling-up opened on GPU 0", Duration::from_secs(40));
    let wal = db.with_extension("sqlite-wal");
    assert!(
        std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0),
        "the daemon writes through the WAL"
    );
    d.signal("HUP");
    let status = d.wait(Duration::from_secs(10));
    let log = d.log();
    assert!(status.success(), "exit status {status:?}: {log}");
    assert!(
        log.contains("SIGHUP") && log.contains("daemon stopped"),
        "{log}"
    );
    assert!(
        log.contains("sink jsonl: ") && !log.contains("sink jsonl: 0 delivered"),
        "the queued alert was delivered: {log}"
    );
    assert!(
        std::fs::metadata(&wal).map_or(0, |m| m.len()) == 0,
        "the WAL was checkpointed"
    );
    let events = std::fs::read_to_string(&jsonl).unwrap();
    assert!(events.contains("\"filling-up\""), "{events}");
    let out = who(&db, false);
    assert!(out.status.success(), "{}", text(&out));
}
