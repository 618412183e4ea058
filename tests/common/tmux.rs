//! The tmux driver of the tests that run the real binary in a real terminal: a tmux server of
//! their own (its own socket) with one detached session `t`, keys sent to it, the screen and
//! the pane's state read back. `.ci/run` installs tmux when it is missing.

#![allow(dead_code)]

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use super::gpuwatch_bin;

/// A tmux server of our own (its own socket), killed on drop.
pub struct Tmux {
    socket: String,
    /// How long [`Tmux::wait_for`] waits at most.
    wait: Duration,
    /// The directory of the tmux.conf, when there is one.
    _conf: Option<tempfile::TempDir>,
}

impl Tmux {
    /// Starts `command` in a detached 120×40 session. The pane's shell reports the exit code
    /// (`EXITED rc=N`) and the terminal modes (`icanon echo` or their negations) once gpuwatch
    /// is gone.
    pub fn start(name: &str, env: &[(&str, String)], args: &str) -> Self {
        Self::start_in(name, env, "", args)
    }

    /// [`Tmux::start`], with gpuwatch run under `wrapper` (a command line its path and
    /// arguments are appended to).
    pub fn start_in(name: &str, env: &[(&str, String)], wrapper: &str, args: &str) -> Self {
        let exports = env.iter().fold(String::new(), |mut acc, (k, v)| {
            let _ = write!(acc, "export {k}='{v}'; ");
            acc
        });
        let script = format!(
            "{exports}{wrapper} '{}' {args}; echo \"EXITED rc=$?\"; stty -a | tr ' ;' '\\n\\n' | grep -x -e icanon -e -icanon -e echo -e -echo | tr '\\n' ' '; echo; sleep 60",
            gpuwatch_bin()
        );
        Self::session(name, (120, 40), None, Duration::from_secs(10), &script)
    }

    /// An interactive `bash` (job control on, prompt `$ `) in a detached 120×40 session, for
    /// the tests that stop gpuwatch and bring it back with `fg`.
    pub fn interactive(name: &str) -> Self {
        Self::session(
            name,
            (120, 40),
            None,
            Duration::from_secs(10),
            "env PS1='$ ' bash --norc --noprofile -i",
        )
    }

    /// Runs `script` (a shell command line, all of it the caller's) in a detached 200×50 pane
    /// with the clipboard open to applications (as `set-clipboard on` does, so an OSC 52 write
    /// would show as a paste buffer, [`Tmux::buffers`]) and renaming allowed (so a title
    /// change would show in [`Tmux::title`]).
    pub fn start_open(name: &str, script: &str) -> Self {
        Self::session(
            name,
            (200, 50),
            Some("set -g set-clipboard on\nset -g allow-rename on\n"),
            Duration::from_secs(20),
            script,
        )
    }

    /// Runs `command` (a shell command line) in a detached `width`×`height` session `t` on a
    /// server of its own, configured by these tmux.conf lines (`None`: no configuration at
    /// all); [`Tmux::wait_for`] waits `wait` at most.
    pub fn session(
        name: &str,
        (width, height): (u16, u16),
        conf: Option<&str>,
        wait: Duration,
        command: &str,
    ) -> Self {
        assert!(
            Command::new("tmux")
                .arg("-V")
                .output()
                .is_ok_and(|o| o.status.success()),
            "tmux is needed for this test (apt-get install tmux; .ci/run installs it)"
        );
        let socket = format!("gpuwatch-test-{}-{name}", std::process::id());
        let conf_dir = conf.map(|lines| {
            let dir = tempfile::tempdir().expect("tmp");
            std::fs::write(dir.path().join("tmux.conf"), lines).expect("tmux.conf");
            dir
        });
        let conf_file = conf_dir.as_ref().map_or_else(
            || PathBuf::from("/dev/null"),
            |d| d.path().join("tmux.conf"),
        );
        let status = Command::new("tmux")
            .args(["-L", &socket, "-f"])
            .arg(&conf_file)
            .args(["new-session", "-d", "-s", "t", "-x"])
            .arg(width.to_string())
            .arg("-y")
            .arg(height.to_string())
            .arg(command)
            .env("NO_COLOR", "1")
            .env("XDG_CONFIG_HOME", "/nonexistent-gpuwatch-test")
            .status()
            .expect("tmux runs");
        assert!(status.success());
        Self {
            socket,
            wait,
            _conf: conf_dir,
        }
    }

    /// Runs a tmux command on this server: its stdout.
    pub fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "t"])
    }

    /// Sends each key (a tmux key name) in turn.
    pub fn keys(&self, keys: &[&str]) {
        for k in keys {
            self.tmux(&["send-keys", "-t", "t", k]);
        }
    }

    /// Types `line` and Enter.
    pub fn type_line(&self, line: &str) {
        self.tmux(&["send-keys", "-t", "t", "-l", line]);
        self.tmux(&["send-keys", "-t", "t", "Enter"]);
    }

    /// Waits until the screen satisfies `pred` (as long as the constructor said at most);
    /// returns the screen.
    pub fn wait_for(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        loop {
            let s = self.screen();
            if pred(&s) {
                return s;
            }
            assert!(
                started.elapsed() < self.wait,
                "timed out waiting for {what}; screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The pane's title.
    pub fn title(&self) -> String {
        self.tmux(&["display", "-p", "-t", "t", "#{pane_title}"])
            .trim()
            .to_string()
    }

    /// The paste buffers (`list-buffers`): where an OSC 52 clipboard write lands.
    pub fn buffers(&self) -> String {
        self.tmux(&["list-buffers"])
    }

    /// The pane's modes a full-screen program sets: alternate screen, cursor visible, mouse
    /// reporting.
    pub fn modes(&self) -> String {
        self.tmux(&[
            "display",
            "-p",
            "-t",
            "t",
            "alt=#{alternate_on} cursor=#{cursor_flag} mouse=#{mouse_any_flag}#{mouse_button_flag}#{mouse_standard_flag}#{mouse_sgr_flag}",
        ])
        .trim()
        .to_string()
    }

    pub fn alternate_screen(&self) -> bool {
        self.tmux(&["display", "-p", "-t", "t", "#{alternate_on}"])
            .trim()
            == "1"
    }

    /// The PID of gpuwatch: the pane's shell's child.
    pub fn gpuwatch_pid(&self) -> u32 {
        let shell: u32 = self
            .tmux(&["list-panes", "-t", "t", "-F", "#{pane_pid}"])
            .trim()
            .parse()
            .expect("pane pid");
        let out = Command::new("pgrep")
            .args(["-P", &shell.to_string()])
            .output()
            .expect("pgrep");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.trim().parse().ok())
            .expect("gpuwatch runs in the pane")
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        // kill-server leaves the socket file behind: remove it too.
        let path = self.tmux(&["display", "-p", "#{socket_path}"]);
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
        let path = path.trim();
        if !path.is_empty() {
            let _ = std::fs::remove_file(path);
        }
    }
}
