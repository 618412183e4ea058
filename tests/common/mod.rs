//! Shared helpers for integration tests: the NVML test double (built on demand, so a fresh
//! clone needs nothing but `cargo test`), real child processes for scenarios, and running the
//! real binary.

#![allow(dead_code)]

pub mod tmux;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::time::Duration;

/// Path of `libfake_nvml.so`, building it first if needed (once per test binary).
pub fn fake_nvml() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
        let status = Command::new(cargo)
            .args(["build", "--quiet", "-p", "fake-nvml", "--manifest-path"])
            .arg(&manifest)
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building crates/fake-nvml failed");
        let lib = target_dir().join("debug").join("libfake_nvml.so");
        assert!(lib.exists(), "{} was not built", lib.display());
        lib
    })
}

/// The cargo target directory this test runs from (`target/debug/deps/<test>` → `target`).
pub fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        let dir = PathBuf::from(dir);
        return if dir.is_absolute() {
            dir
        } else {
            Path::new(env!("CARGO_MANIFEST_DIR")).join(dir)
        };
    }
    let exe = std::env::current_exe().expect("test binary path");
    exe.ancestors()
        .nth(3)
        .expect("target/debug/deps/test layout")
        .to_path_buf()
}

/// The gpuwatch binary under test.
pub fn gpuwatch_bin() -> &'static str {
    env!("CARGO_BIN_EXE_gpuwatch")
}

/// A real process (`sleep`) whose PID a scenario can name; killed on drop.
pub struct Sleeper(pub Child);

impl Sleeper {
    pub fn spawn() -> Self {
        Self(
            Command::new("sleep")
                .arg("300")
                .stdin(Stdio::null())
                .spawn()
                .expect("sleep starts"),
        )
    }

    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A scenario file in a temporary directory.
pub struct ScenarioFile {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl ScenarioFile {
    pub fn new(text: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("scenario.toml");
        std::fs::write(&path, text).expect("write scenario");
        Self { dir, path }
    }

    /// Replaces the scenario (the double reloads it when the file changes).
    pub fn rewrite(&self, text: &str) {
        std::fs::write(&self.path, text).expect("rewrite scenario");
    }
}

/// Runs gpuwatch against the double with this scenario.
pub fn gpuwatch_on(scenario: &ScenarioFile, args: &[&str]) -> Output {
    gpuwatch_cmd(scenario)
        .args(args)
        .output()
        .expect("gpuwatch runs")
}

/// A gpuwatch command set up to load the double with this scenario.
pub fn gpuwatch_cmd(scenario: &ScenarioFile) -> Command {
    let mut cmd = Command::new(gpuwatch_bin());
    cmd.env("GPUWATCH_NVML_LIB", fake_nvml())
        .env("FAKE_NVML_SCENARIO", &scenario.path)
        .env("XDG_CONFIG_HOME", scenario.dir.path())
        .env("XDG_STATE_HOME", scenario.dir.path())
        .env("NO_COLOR", "1")
        .env_remove("FAKE_NVML_FREEZE")
        .env_remove("FAKE_NVML_EPOCH");
    cmd
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts the command failed with `code` and said `needle` on stderr, without panicking.
pub fn fails_with(o: &Output, code: i32, needle: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "exit code; stderr: {err}");
    assert!(err.contains(needle), "expected '{needle}' in: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// A running daemon and its port.
pub struct Daemon {
    pub child: std::process::Child,
    pub port: u16,
    /// Its stderr so far.
    pub log: Arc<Mutex<String>>,
}

impl Daemon {
    pub fn start(sc: &ScenarioFile, extra: &[&str]) -> Self {
        Self::spawn(gpuwatch_cmd(sc), extra)
    }

    /// A daemon at the default interval (1 s), as a user starts it.
    pub fn start_at_defaults(sc: &ScenarioFile, extra: &[&str]) -> Self {
        Self::spawn_with(gpuwatch_cmd(sc), &[], extra)
    }

    /// A daemon at the default interval with these global options (e.g. `--demo`).
    pub fn start_with_global(sc: &ScenarioFile, global: &[&str], extra: &[&str]) -> Self {
        Self::spawn_with(gpuwatch_cmd(sc), global, extra)
    }

    /// Starts it with this many file descriptors at most (`prlimit --nofile=N:N`, util-linux).
    pub fn start_with_nofile(sc: &ScenarioFile, nofile: u64, extra: &[&str]) -> Self {
        let plain = gpuwatch_cmd(sc);
        let mut cmd = Command::new("prlimit");
        cmd.arg(format!("--nofile={nofile}:{nofile}"))
            .arg(gpuwatch_bin());
        for (k, v) in plain.get_envs() {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        Self::spawn(cmd, extra)
    }

    fn spawn(cmd: Command, extra: &[&str]) -> Self {
        Self::spawn_with(cmd, &["--interval", "200ms"], extra)
    }

    fn spawn_with(mut cmd: Command, global: &[&str], extra: &[&str]) -> Self {
        let mut child = cmd
            .args(global)
            .args(["daemon", "--listen", "127.0.0.1:0"])
            .args(extra)
            .stderr(Stdio::piped())
            .spawn()
            .expect("daemon starts");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let log = Arc::clone(&stderr);
        let pipe = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split("listening on http://127.0.0.1:").nth(1) {
                    let port: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    let _ = tx.send(port.parse::<u16>().expect("port"));
                }
                let mut log = log.lock().expect("lock");
                log.push_str(&line);
                log.push('\n');
            }
        });
        let port = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("no bound address on stderr: {}", stderr.lock().unwrap()));
        Self {
            child,
            port,
            log: stderr,
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// A real Prometheus server scraping daemons on loopback; killed on drop.
pub struct Prometheus {
    pub child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Starts Prometheus (1 s scrape and evaluation, the shipped rules) scraping these ports as
/// job `gpuwatch`.
pub fn start_prometheus(targets: &[u16]) -> Prometheus {
    assert!(
        Command::new("prometheus")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "prometheus is needed for this test (apt-get install prometheus; .ci/run installs it)"
    );
    let dir = tempfile::tempdir().expect("tmp");
    let rules =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/prometheus/rules.yml");
    let targets: Vec<String> = targets.iter().map(|p| format!("'127.0.0.1:{p}'")).collect();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - '{}'\nscrape_configs:\n  - job_name: gpuwatch\n    static_configs:\n      - targets: [{}]\n",
            rules.display(),
            targets.join(", ")
        ),
    )
    .expect("config");
    let port = free_port();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus starts");
    Prometheus {
        child,
        port,
        _dir: dir,
    }
}

/// A PromQL instant query: the result vector.
pub fn query(port: u16, promql: &str) -> Option<Vec<serde_json::Value>> {
    let url = format!("http://127.0.0.1:{port}/api/v1/query");
    let body = ureq::get(&url)
        .query("query", promql)
        .call()
        .ok()?
        .into_body()
        .read_to_string()
        .ok()?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["data"]["result"].as_array().cloned()
}

/// A GET over a plain TCP connection to the daemon on `port`, with a bearer token if
/// given: status and body.
pub fn request(port: u16, path: &str, token: Option<&str>) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{auth}\r\n"
    )
    .expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    let (head, body) = text.split_once("\r\n\r\n").expect("a response");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    (status, body.to_string())
}

/// A real process whose command line and command name carry what an attacker would put
/// there: `argv[0]` as given (the command line gpuwatch shows), and the name (`comm`,
/// [`Hostile::COMM`]) from the file name it was started by (a symlink to `sleep` named with
/// ESC, BEL and a newline). Killed on drop.
pub struct Hostile {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Hostile {
    /// The command name: OSC 0 (set the title), BEL, a newline (15 bytes at most: `comm`).
    pub const COMM: &'static str = "\x1b]0;c\x07\nX";

    pub fn spawn(argv0: &str) -> Self {
        use std::os::unix::process::CommandExt as _;
        let dir = tempfile::tempdir().expect("temp dir");
        let sleep = ["/bin/sleep", "/usr/bin/sleep"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("sleep");
        let link = dir.path().join(Self::COMM);
        std::os::unix::fs::symlink(sleep, &link).expect("symlink");
        let child = Command::new(&link)
            .arg0(argv0)
            .arg("900")
            .stdin(Stdio::null())
            .spawn()
            .expect("the hostile process starts");
        let hostile = Self { child, _dir: dir };
        // The name and the command line are the kernel's once exec is done.
        let cmdline = format!("/proc/{}/cmdline", hostile.pid());
        let want = format!("{argv0}\0900\0");
        for _ in 0..200 {
            if std::fs::read(&cmdline).is_ok_and(|c| c == want.as_bytes()) {
                return hostile;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("{cmdline} never showed the crafted argv");
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Bytes that steer a terminal or hide text, where output meant for people must have none:
/// C0 controls but line feed, DEL, C1 controls, bidi controls.
pub fn steering_chars(text: &str) -> Vec<char> {
    text.chars()
        .filter(|&c| {
            (c.is_control() && c != '\n')
                || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        })
        .collect()
}

/// The dashboard's state over an analysis stage at the defaults (the built-in `[detect]`, a
/// 10-minute history, full detail), watching `user`'s processes.
pub fn ui_state(user: Option<&str>, read_only: bool) -> gpuwatch::tui::state::UiState {
    gpuwatch::tui::state::UiState::new(
        gpuwatch::analysis::Analyzer::new(
            gpuwatch::detect::Rules::default(),
            Duration::from_mins(10),
            gpuwatch::analysis::Detail::Full,
            gpuwatch::watch::WatchSet::new(Vec::new(), user.map(str::to_string)),
        ),
        read_only,
    )
}

/// A pseudo-terminal pair as the test's own (safe rustix calls).
pub fn open_pty(rows: u16, cols: u16) -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use rustix::fs::{Mode, OFlags};
    use rustix::pty::OpenptFlags;
    let master =
        rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)
            .expect("openpt");
    rustix::pty::grantpt(&master).unwrap();
    rustix::pty::unlockpt(&master).unwrap();
    let name = rustix::pty::ptsname(&master, Vec::new()).unwrap();
    let slave = rustix::fs::open(
        name.as_c_str(),
        OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .expect("open pty slave");
    rustix::termios::tcsetwinsize(
        &master,
        rustix::termios::Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )
    .unwrap();
    (master, slave)
}
