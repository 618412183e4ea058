//! The dashboard end to end: the real binary in a real terminal (tmux), driven by keys, read
//! back from the screen. `.ci/run` installs tmux when it is missing.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::{Duration, Instant};

use common::tmux::Tmux;
use common::{ScenarioFile, Sleeper, fake_nvml, gpuwatch_bin};

#[test]
fn demo_sort_filter_detail_and_quit() {
    let t = Tmux::start("demo", &[], "--demo --interval 200ms");
    let s = t.wait_for("the demo's GPUs", |s| {
        s.contains("GPU 3 H200") && s.contains("4120")
    });
    assert!(
        t.alternate_screen(),
        "the dashboard uses the alternate screen"
    );
    assert!(s.contains("GPU-MEM↓"), "sorted by memory at first:\n{s}");
    // Sort: `s` moves to the next column (SM %).
    t.keys(&["s"]);
    t.wait_for("sort by SM %", |s| {
        s.contains("sort:SM%") && s.contains("SM%↓")
    });
    // Filter: only bob's process is left.
    t.keys(&["/", "b", "o", "b", "Enter"]);
    let s = t.wait_for("the filter", |s| s.contains("filter:bob"));
    assert!(
        s.contains(" 4120 ") && !s.contains(" 2101 "),
        "filtered:\n{s}"
    );
    // Detail of the selected (only) process.
    t.keys(&["Enter"]);
    let s = t.wait_for("the detail view", |s| s.contains("PID 4120 · bob"));
    assert!(s.contains("python eval.py --model llama-70b"), "{s}");
    assert!(s.contains("GPU memory (GiB)"), "history chart:\n{s}");
    // Help, then back, then quit.
    t.keys(&["Escape", "?"]);
    t.wait_for("the help", |s| s.contains("keys (? or Esc to close)"));
    t.keys(&["Escape", "q"]);
    let s = t.wait_for("exit", |s| s.contains("EXITED") && s.contains("icanon"));
    assert!(s.contains("EXITED rc=0"), "{s}");
    assert!(
        !t.alternate_screen(),
        "the terminal left the alternate screen"
    );
    assert!(
        s.contains("icanon echo"),
        "the terminal modes are restored:\n{s}"
    );
}

#[test]
fn sigterm_restores_the_terminal() {
    let t = Tmux::start("term", &[], "--demo");
    t.wait_for("the dashboard", |s| s.contains("GPU 0 H200"));
    let pid = t.gpuwatch_pid();
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let s = t.wait_for("exit after SIGTERM", |s| {
        s.contains("EXITED") && s.contains("icanon")
    });
    assert!(s.contains("EXITED rc=0"), "{s}");
    assert!(!t.alternate_screen());
    assert!(s.contains("icanon echo"), "raw mode undone:\n{s}");
}

/// The modes a shell expects back: main screen, cursor shown, no mouse reporting.
const RESTORED: &str = "alt=0 cursor=1 mouse=0000";

#[test]
fn sigquit_restores_the_terminal() {
    let t = Tmux::start("quit", &[], "--demo");
    t.wait_for("the dashboard", |s| s.contains("GPU 0 H200"));
    assert_ne!(t.modes(), RESTORED, "the dashboard's modes are on");
    let pid = t.gpuwatch_pid();
    let status = Command::new("kill")
        .args(["-QUIT", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let s = t.wait_for("exit after SIGQUIT", |s| {
        s.contains("EXITED") && s.contains("icanon")
    });
    assert!(s.contains("EXITED rc=0"), "{s}");
    assert_eq!(t.modes(), RESTORED);
    assert!(s.contains("icanon echo"), "raw mode undone:\n{s}");
}

/// `kill -TSTP` (Ctrl-Z is a key in raw mode, so a stop comes from outside): the shell gets
/// its terminal back as it was, and `fg` brings the dashboard back, redrawn in its modes.
#[test]
fn sigtstp_restores_the_terminal_and_fg_redraws() {
    let t = Tmux::interactive("tstp");
    t.wait_for("the prompt", |s| s.contains('$'));
    t.type_line(&format!("'{}' --demo --interval 200ms", gpuwatch_bin()));
    t.wait_for("the dashboard", |s| s.contains("GPU 0 H200"));
    let on = t.modes();
    assert!(on.starts_with("alt=1 cursor=0 mouse=1"), "{on}");
    let pid = t.gpuwatch_pid();
    let status = Command::new("kill")
        .args(["-TSTP", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let s = t.wait_for("the shell's job control", |s| s.contains("Stopped"));
    assert_eq!(t.modes(), RESTORED, "modes restored on stop:\n{s}");
    t.type_line(
        "stty -a | tr ' ;' '\\n\\n' | grep -x -e icanon -e -icanon -e echo -e -echo | tr '\\n' ' '; echo END-\"\"OF-MODES",
    );
    // The command line shows `END-""OF-MODES`, only its output `END-OF-MODES`.
    let s = t.wait_for("stty", |s| s.contains("END-OF-MODES"));
    assert!(
        s.contains("icanon echo END-OF-MODES"),
        "cooked mode on stop:\n{s}"
    );
    // Back in the foreground: the modes again, and a full redraw.
    t.type_line("fg");
    let started = Instant::now();
    while t.modes() == RESTORED {
        assert!(started.elapsed() < Duration::from_secs(10), "not resumed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let s = t.wait_for("the redrawn dashboard", |s| {
        s.contains("GPU 0 H200") && !s.contains("Stopped") && !s.contains("END-OF-MODES")
    });
    assert_eq!(t.modes(), on, "the dashboard's modes again:\n{s}");
    t.keys(&["q"]);
    t.wait_for("the prompt again", |s| s.trim_end().ends_with('$'));
    assert_eq!(t.modes(), RESTORED);
}

#[test]
fn live_source_on_the_double_signals_a_real_process() {
    let mut victim = Sleeper::spawn();
    let victim_pid = victim.pid();
    let other = Sleeper::spawn();
    let sc = ScenarioFile::new(&format!(
        r#"
[[gpu]]
memory_total = "80GiB"
[[gpu.process]]
pid = {}
used = "30GiB"
sm = 50
[[gpu.process]]
pid = {}
used = "10GiB"
"#,
        victim.pid(),
        other.pid()
    ));
    let env = [
        ("GPUWATCH_NVML_LIB", fake_nvml().display().to_string()),
        ("FAKE_NVML_SCENARIO", sc.path.display().to_string()),
    ];
    let log = sc.dir.path().join("gpuwatch.log");
    let t = Tmux::start(
        "live",
        &env,
        &format!("--interval 200ms --log-file '{}'", log.display()),
    );
    let s = t.wait_for("the live processes", |s| {
        s.contains(&format!(" {} ", victim.pid())) && s.contains("sleep 300")
    });
    assert!(s.contains("live"), "the header names the live source:\n{s}");
    // The first row is the largest: the victim. Ask to signal it, then confirm.
    t.keys(&["K"]);
    let s = t.wait_for("the confirmation", |s| s.contains("Send SIGTERM?"));
    assert!(s.contains(&format!("PID {}", victim.pid())), "{s}");
    t.keys(&["y"]);
    t.wait_for("the signal was sent", |s| s.contains("SIGTERM sent"));
    let status = victim.0.wait().expect("the victim exits");
    assert_eq!(status.signal(), Some(15), "killed by SIGTERM");
    // The other process is untouched.
    assert!(std::path::Path::new(&format!("/proc/{}", other.pid())).exists());
    t.keys(&["Escape", "q"]);
    let s = t.wait_for("exit", |s| s.contains("EXITED rc=0"));
    // The log went to its file, not to the screen.
    let logged = std::fs::read_to_string(&log).expect("log file");
    assert!(
        logged.contains("signal sent") && logged.contains(&victim_pid.to_string()),
        "{logged}"
    );
    assert!(!s.contains("signal sent"), "{s}");
}

#[test]
fn read_only_never_signals() {
    let victim = Sleeper::spawn();
    let sc = ScenarioFile::new(&format!(
        "[[gpu]]\nmemory_total = \"80GiB\"\n[[gpu.process]]\npid = {}\nused = \"30GiB\"\n",
        victim.pid()
    ));
    let env = [
        ("GPUWATCH_NVML_LIB", fake_nvml().display().to_string()),
        ("FAKE_NVML_SCENARIO", sc.path.display().to_string()),
    ];
    let t = Tmux::start("ro", &env, "--read-only --interval 200ms");
    t.wait_for("the process", |s| {
        s.contains(&format!(" {} ", victim.pid()))
    });
    t.keys(&["K"]);
    t.wait_for("the refusal", |s| {
        s.contains("read-only: signals are disabled")
    });
    t.keys(&["y", "q"]);
    t.wait_for("exit", |s| s.contains("EXITED rc=0"));
    assert!(std::path::Path::new(&format!("/proc/{}", victim.pid())).exists());
}

#[test]
fn keys_are_answered_while_the_source_hangs() {
    // From t = 1 s every memory call takes a minute: the sampler is stuck, the UI is not.
    let sc = ScenarioFile::new(
        "[[gpu]]\nmemory_total = \"80GiB\"\nfaults.slow = [{ call = \"memory\", ms = 60000, from = 1 }]\n",
    );
    let t = Tmux::start(
        "hang",
        &[],
        &format!("--scenario '{}' --interval 200ms", sc.path.display()),
    );
    t.wait_for("the first frames", |s| s.contains("GPU 0 H200"));
    let s = t.wait_for("the stale marker", |s| s.contains("STALE"));
    assert!(
        s.contains("memory_info on GPU 0 has not returned"),
        "names the call:\n{s}"
    );
    let asked = Instant::now();
    t.keys(&["?"]);
    // Poll quickly to see how soon the screen answers.
    while !t.screen().contains("keys (? or Esc to close)") {
        assert!(
            asked.elapsed() < Duration::from_secs(2),
            "answered while hung"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    eprintln!(
        "key answered {:.0} ms after it was sent, while the sampler was stuck in a call (tmux round trips included)",
        asked.elapsed().as_secs_f64() * 1000.0
    );
    t.keys(&["Escape", "q"]);
    t.wait_for("exit", |s| s.contains("EXITED rc=0"));
}

#[test]
fn the_remote_dashboard_follows_a_daemon_and_says_when_it_is_gone() {
    let job = Sleeper::spawn();
    let sc = ScenarioFile::new(&format!(
        "[[gpu]]\nmemory_total = \"80GiB\"\n[[gpu.process]]\npid = {}\nused = \"12GiB\"\n",
        job.pid()
    ));
    let daemon = common::Daemon::start(&sc, &["--no-history"]);
    let t = Tmux::start(
        "remote",
        &[],
        &format!("tui --connect http://127.0.0.1:{}", daemon.port),
    );
    let screen = t.wait_for("the remote process", |s| {
        s.contains(&job.pid().to_string()) && s.contains("12.0GiB")
    });
    assert!(
        screen.contains("remote") && screen.contains(&format!("127.0.0.1:{}", daemon.port)),
        "{screen}"
    );
    // The daemon's host is not this one: no host summary in the header.
    assert!(!screen.contains("host mem"), "{screen}");
    // The daemon goes away: the header says since when and why, and the dashboard stays up.
    drop(daemon);
    let screen = t.wait_for("the disconnected state", |s| {
        s.contains("DISCONNECTED since")
    });
    assert!(screen.contains("retrying in"), "{screen}");
    assert!(
        screen.contains(&job.pid().to_string()),
        "the last frame stays on screen: {screen}"
    );
    t.keys(&["q"]);
    t.wait_for("a clean exit", |s| s.contains("EXITED rc=0"));
}

/// The PID a scenario row names, inside the dashboard's own PID namespace (see
/// [`a_pid_not_visible_here_is_never_signalled`]).
const TAKEN_PID: u32 = 20_000;

/// PID 1 of the dashboard's PID namespace: starts gpuwatch (`"$@"`) and, once the test writes
/// to the FIFO `$1/take`, a `sleep` with PID `TAKEN_PID` — the process that took the PID of a
/// row after the kill dialog opened. Its PID goes to `$1/pid`, how it ended to `$1/exit`.
/// Nothing forks while it waits (a FIFO, not a polling loop), so PIDs stay predictable.
const TAKER: &str = r#"dir=$1; shift
(
  read _ < "$dir/take"
  echo $((TAKEN_PID - 1)) > /proc/sys/kernel/ns_last_pid
  sleep 300 &
  echo $! > "$dir/pid"
  wait $!
  echo "rc=$?" > "$dir/exit"
) &
"$@"
"#;

/// The issue's attack: a row "not visible here" (no start time) whose PID is taken by another
/// process after the kill dialog opened. `y` (SIGTERM) then `9` (SIGKILL) must not reach it,
/// and the dialog says why. The dashboard runs in a PID namespace of its own (`unshare`, a
/// user namespace too, so no privileges are needed) where the test can hand that PID to a new
/// process at will.
#[test]
fn a_pid_not_visible_here_is_never_signalled() {
    let ns_ok = Command::new("unshare")
        .args(["-Urpf", "--mount-proc", "true"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ns_ok,
        "this test needs `unshare -Urpf --mount-proc` (util-linux, user namespaces enabled)"
    );
    let sc = ScenarioFile::new(&format!(
        "[[gpu]]\nmemory_total = \"80GiB\"\n[[gpu.process]]\npid = {TAKEN_PID}\nused = \"30GiB\"\n"
    ));
    let dir = sc.dir.path();
    let fifo = dir.join("take");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .is_ok_and(|s| s.success())
    );
    let taker = dir.join("taker.sh");
    std::fs::write(&taker, TAKER).expect("write the wrapper");
    let env = [
        ("GPUWATCH_NVML_LIB", fake_nvml().display().to_string()),
        ("FAKE_NVML_SCENARIO", sc.path.display().to_string()),
        ("TAKEN_PID", TAKEN_PID.to_string()),
    ];
    let t = Tmux::start_in(
        "nsreuse",
        &env,
        &format!(
            "unshare -Urpf --mount-proc sh '{}' '{}'",
            taker.display(),
            dir.display()
        ),
        "--interval 200ms",
    );
    t.wait_for("the row that is not visible here", |s| {
        s.contains(&format!(" {TAKEN_PID} ")) && s.contains("not visible")
    });
    t.keys(&["K"]);
    let s = t.wait_for("the dialog", |s| s.contains("signal a process"));
    // Now another process takes the PID.
    std::fs::write(&fifo, "go\n").expect("wake the taker");
    let started = Instant::now();
    let pid = loop {
        if let Some(p) = std::fs::read_to_string(dir.join("pid"))
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok())
        {
            break p;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "no taker");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(pid, TAKEN_PID, "the new process took the row's PID");
    // Both keys of the sequence, then Escape: once the dialog is gone the dashboard has
    // handled `y` and `9` (keys are read in order), so what they did is done.
    t.keys(&["y", "9", "Escape"]);
    let after = t.wait_for("the dialog to close", |s| !s.contains("signal a process"));
    // A signal is delivered at once; the taker's shell notes its death within milliseconds.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !dir.join("exit").exists(),
        "the process that took PID {TAKEN_PID} was signalled: {:?}\n{after}",
        std::fs::read_to_string(dir.join("exit"))
    );
    // The whole refusal, wrapped inside the dialog.
    let said = format!(
        "PID {TAKEN_PID} is not visible in this PID namespace: its identity can't be checked, \
         so gpuwatch will not signal it"
    );
    let flat = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat(&s.replace('│', " ")).contains(&said),
        "the dialog says why:\n{s}"
    );
    assert!(
        !after.contains("SIGTERM sent") && !after.contains("SIGKILL sent"),
        "{after}"
    );
    t.keys(&["q"]);
    t.wait_for("exit", |s| s.contains("EXITED rc=0"));
}

/// Issue 11 item 9: a driver that hangs before the first sample: the dashboard names the call
/// in the header and in the findings panel, and does not claim "no findings".
#[test]
fn a_driver_hung_before_the_first_sample_is_named_on_the_dashboard() {
    let sc = ScenarioFile::new(
        "[[gpu]]\nmemory_total = \"80GiB\"\nfaults.slow = [{ call = \"uuid\", ms = 60000 }]\n",
    );
    let env = [
        ("GPUWATCH_NVML_LIB", fake_nvml().display().to_string()),
        ("FAKE_NVML_SCENARIO", sc.path.display().to_string()),
    ];
    let t = Tmux::start("hung-first", &env, "--interval 200ms");
    let s = t.wait_for("the stuck call", |s| {
        s.contains("no sample yet: uuid on GPU 0 has not returned for")
    });
    // The header and the findings panel each name it.
    assert!(
        s.matches("no sample yet: uuid on GPU 0 has not returned for")
            .count()
            >= 2
            && s.contains("! no sample yet: uuid on GPU 0 has not returned for"),
        "the header and the findings panel name it:\n{s}"
    );
    assert!(!s.contains("no findings"), "{s}");
    assert!(!s.contains("waiting for the first sample"), "{s}");
    t.keys(&["q"]);
    t.wait_for("exit", |s| s.contains("EXITED rc=0"));
}

/// Issue 11 item 14: a GPU whose process list the driver does not give says so on the
/// dashboard, instead of looking idle.
#[test]
fn an_unsupported_process_list_is_named_on_the_dashboard() {
    let sc = ScenarioFile::new(
        "[[gpu]]\nmemory_total = \"80GiB\"\nbase_used = \"3GiB\"\nfaults.not_supported = [\"compute-processes\"]\n",
    );
    let env = [
        ("GPUWATCH_NVML_LIB", fake_nvml().display().to_string()),
        ("FAKE_NVML_SCENARIO", sc.path.display().to_string()),
    ];
    let t = Tmux::start("no-list", &env, "--interval 200ms");
    let s = t.wait_for("the first sample", |s| s.contains("GPU 0"));
    let s = if s.contains("process list not available") {
        s
    } else {
        t.wait_for("the note", |s| s.contains("process list not available"))
    };
    assert!(!s.contains("no process holds memory"), "{s}");
    assert!(!s.contains("held by no process"), "{s}");
    t.keys(&["q"]);
    t.wait_for("exit", |s| s.contains("EXITED rc=0"));
}

/// The pid on the selected (reversed) line of a `capture-pane -e` screen.
fn selected_pid(styled: &str, pids: &[u32]) -> Option<u32> {
    // A line that turns reverse video on: an SGR sequence with the parameter 7.
    let reversed = |l: &&str| {
        l.split("\x1b[").skip(1).any(|seq| {
            seq.split_once('m')
                .is_some_and(|(params, _)| params.split(';').any(|p| p == "7"))
        })
    };
    let line = styled.lines().find(reversed)?;
    pids.iter()
        .copied()
        .find(|p| line.contains(&format!(" {p} ")))
}

#[test]
fn the_mouse_and_page_down_follow_the_rows_on_screen() {
    // 12 processes on one GPU, more than the 120×16 screen's table shows; a frozen clock, so
    // nothing on screen changes size while the test clicks and pages.
    let pids: Vec<u32> = (1..=12).map(|i| 3_999_000 + i).collect();
    let mut text = String::from(
        "[clock]\nfreeze = 5.0\n[[gpu]]\nmemory_total = \"143GiB\"\nbase_used = \"0GiB\"\n",
    );
    for (i, pid) in pids.iter().enumerate() {
        let _ = std::fmt::Write::write_fmt(
            &mut text,
            format_args!(
                "[[gpu.process]]\npid = {pid}\nused = \"{}GiB\"\nsm = 50\n",
                i + 1
            ),
        );
    }
    let sc = ScenarioFile::new(&text);
    let script = format!(
        "export GPUWATCH_NVML_LIB='{}'; export FAKE_NVML_SCENARIO='{}'; '{}' --interval 200ms; \
         echo \"EXITED rc=$?\"; sleep 60",
        fake_nvml().display(),
        sc.path.display(),
        gpuwatch_bin()
    );
    let t = Tmux::session("paging", (120, 16), None, Duration::from_secs(10), &script);
    // The footer is drawn last: the whole screen is there.
    let s = t.wait_for("the processes", |s| {
        s.contains(" 3999012 ") && s.contains("q quit")
    });
    // The process rows on screen, top to bottom (largest memory first).
    let lines: Vec<&str> = s.lines().collect();
    let rows: Vec<(usize, u32)> = lines
        .iter()
        .enumerate()
        .filter_map(|(y, l)| {
            pids.iter()
                .copied()
                .find(|p| l.contains(&format!(" {p} ")))
                .map(|p| (y, p))
        })
        .collect();
    let page = rows.len();
    assert!(
        (2..12).contains(&page),
        "a page shorter than the list:\n{s}"
    );
    assert_eq!(rows[0].1, 3_999_012, "largest first:\n{s}");
    let styled = || t.tmux(&["capture-pane", "-e", "-p", "-t", "t"]);
    let first = styled();
    assert_eq!(selected_pid(&first, &pids), Some(rows[0].1), "{first:?}");

    // A left click (SGR mouse report, 1-based) on the second row on screen selects it.
    let (y, pid) = rows[1];
    t.tmux(&[
        "send-keys",
        "-t",
        "t",
        "-l",
        &format!("\x1b[<0;10;{}M\x1b[<0;10;{}m", y + 1, y + 1),
    ]);
    let selects = |pid: u32, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(5);
        while selected_pid(&styled(), &pids) != Some(pid) {
            assert!(Instant::now() < deadline, "{what} ({pid}):\n{}", styled());
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    selects(pid, "the click selects the second row");

    // Page Down from the top moves one screenful: one Up from there is the last row of the
    // first page, so the page is exactly the rows the screen shows.
    t.keys(&["Home", "PageDown"]);
    std::thread::sleep(Duration::from_millis(300));
    t.keys(&["Up"]);
    selects(
        rows[page - 1].1,
        "after PageDown, Up selects the first page's last row",
    );
    t.keys(&["q"]);
    t.wait_for("exit", |s| s.contains("EXITED rc=0"));
}

/// The foreground colour (SGR 30–37) in force where `needle` starts on a `capture-pane -e`
/// screen, as `3N` (tmux writes attribute changes only; a line starts from the defaults; a
/// basic colour may come as 256-colour index N, `38;5;N`).
fn colour_at(styled: &str, needle: &str) -> Option<String> {
    let line = styled.lines().find(|l| l.contains(needle))?;
    let before = &line[..line.find(needle)?];
    let mut fg = None;
    for seq in before.split("\x1b[").skip(1) {
        let Some((params, _)) = seq.split_once('m') else {
            continue;
        };
        let params: Vec<&str> = params.split(';').collect();
        let mut i = 0;
        while i < params.len() {
            match params[i] {
                "" | "0" | "39" => fg = None,
                "38" if params.get(i + 1) == Some(&"5") => {
                    fg = params.get(i + 2).map(|n| format!("3{n}"));
                    i += 2;
                }
                p if p.len() == 2 && p.starts_with('3') => fg = Some(p.to_string()),
                _ => {}
            }
            i += 1;
        }
    }
    fg
}

#[test]
fn the_detect_thresholds_of_the_config_file_colour_the_dashboards_memory() {
    let sc = ScenarioFile::new(
        "[clock]\nfreeze = 5.0\n[[gpu]]\nmemory_total = \"100GiB\"\nmemory_reserved = \"0GiB\"\n\
         base_used = \"0GiB\"\n[[gpu.process]]\npid = 3999100\nused = \"65GiB\"\nsm = 50\n",
    );
    let config = sc.dir.path().join("levels.toml");
    std::fs::write(
        &config,
        "[detect]\nnear-capacity-warn = 60\nnear-capacity-critical = 80\n",
    )
    .expect("config");
    let colour = |name: &str, extra: &str| {
        let script = format!(
            "unset NO_COLOR; export GPUWATCH_NVML_LIB='{}'; export FAKE_NVML_SCENARIO='{}'; \
             '{}' --color always --interval 200ms {extra}; echo \"EXITED rc=$?\"; sleep 60",
            fake_nvml().display(),
            sc.path.display(),
            gpuwatch_bin()
        );
        let t = Tmux::session(name, (120, 30), None, Duration::from_secs(10), &script);
        t.wait_for("the GPU", |s| {
            s.contains("65.0GiB/100.0GiB") && s.contains("q quit")
        });
        let styled = t.tmux(&["capture-pane", "-e", "-p", "-t", "t"]);
        t.keys(&["q"]);
        t.wait_for("exit", |s| s.contains("EXITED rc=0"));
        colour_at(&styled, "65.0GiB/100.0GiB")
    };
    // 65 % is ok (green) at the defaults (warn at 90 %), a warning (yellow) at 60 %.
    assert_eq!(colour("levels-default", "").as_deref(), Some("32"));
    assert_eq!(
        colour("levels-config", &format!("--config '{}'", config.display())).as_deref(),
        Some("33")
    );
}

/// The rule a finding's line on screen is about, by the detector's own wording.
fn rule_of(line: &str) -> Option<&'static str> {
    [
        ("% full (", "near-capacity"),
        ("will be full in", "filling-up"),
        ("is still filling", "filling-up"),
        ("leak suspected", "leak-suspected"),
        ("external memory on GPU", "external-pressure"),
        ("has not used the GPU for", "idle-holder"),
        ("but the driver still holds", "exited-holder"),
    ]
    .iter()
    .find(|(words, _)| line.contains(words))
    .map(|(_, rule)| *rule)
}

#[test]
fn the_demo_tells_all_its_stories_within_ten_seconds_and_changes_within_a_minute() {
    // At the default interval, 160×48: the demo's past is run through the analysis at start.
    let script = format!(
        "'{}' --demo; echo \"EXITED rc=$?\"; sleep 60",
        gpuwatch_bin()
    );
    let t = Tmux::session("stories", (160, 48), None, Duration::from_secs(70), &script);
    let started = Instant::now();
    let rules = |s: &str| -> std::collections::BTreeSet<&'static str> {
        s.lines()
            .filter(|l| l.starts_with("! ") || l.contains(" shown) ! "))
            .filter_map(rule_of)
            .collect()
    };
    let s = t.wait_for("five findings of five rules", |s| rules(s).len() >= 5);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "all five within 10 s: {:?}\n{s}",
        started.elapsed()
    );
    // The time to full on every growing GPU's panel (GPU 1's leak, GPU 3's intruder).
    for gpu in ["GPU 1 H200", "GPU 3 H200"] {
        let panel: Vec<&str> = s.lines().skip_while(|l| !l.contains(gpu)).take(3).collect();
        // The panel's column: from where its title starts, in characters.
        let title = s.lines().find(|l| l.contains(gpu)).unwrap_or("");
        let at = title.find(gpu).map_or(0, |i| title[..i].chars().count());
        let column = |l: &str| Some(l.chars().skip(at).take(79).collect::<String>());
        assert!(
            panel
                .iter()
                .filter_map(|l| column(l))
                .any(|l| l.contains("full in ")),
            "{gpu} shows its time to full:\n{s}"
        );
    }
    // Within a minute something changes: bob's job stops growing, so GPU 3's filling-up
    // resolves (and the GPU crosses 97 %).
    let before = rules(&s);
    assert!(before.contains("filling-up"), "{s}");
    let s = t.wait_for("a change", |s| {
        !s.lines()
            .filter(|l| l.starts_with("! ") || l.contains(" shown) ! "))
            .any(|l| l.contains("GPU 3 will be full") || l.contains("GPU 3 is still filling"))
    });
    assert!(
        started.elapsed() < Duration::from_secs(62),
        "a change within a minute: {:?}\n{s}",
        started.elapsed()
    );
}

/// The findings lines of a screen (`! …`, or the panel's last line when it is cut).
fn finding_lines(s: &str) -> Vec<&str> {
    s.lines()
        .filter(|l| l.starts_with("! ") || l.contains(") ! "))
        .collect()
}

#[test]
fn the_findings_panel_takes_the_keys_scrolls_and_goes_to_a_findings_process_or_gpu() {
    // The demo at the default interval, first at 80×24: its six findings do not fit the panel.
    let script = format!(
        "'{}' --demo; echo \"EXITED rc=$?\"; sleep 60",
        gpuwatch_bin()
    );
    let t = Tmux::session("findings", (80, 24), None, Duration::from_secs(15), &script);
    let s = t.wait_for("a cut findings panel", |s| {
        s.lines().any(|l| l.contains(" shown, f: scroll) ! "))
    });
    let total: usize = {
        let line = s
            .lines()
            .find(|l| l.contains(" shown, f: scroll)"))
            .unwrap();
        let of = line.split(" of ").nth(1).unwrap();
        of.split(' ').next().unwrap().parse().unwrap()
    };
    assert!(total >= 5, "{s}");
    // At 80 columns the header leaves out whole pieces and keeps the count; the footer's
    // hints are whole, `f` among them.
    let header = s.lines().next().unwrap_or("");
    assert!(
        header.contains(&format!("{total} findings")) && !header.trim_end().ends_with('·'),
        "{header:?}"
    );
    let footer = s.lines().last().unwrap_or("");
    assert!(footer.contains("f findings"), "{footer:?}");
    // `f` gives the panel the keys; End scrolls to its last finding.
    t.keys(&["f", "End"]);
    let s = t.wait_for("the panel scrolled to its end", |s| {
        s.lines()
            .any(|l| l.contains(&format!(" of {total}) ! ")) && l.contains(&format!("–{total} ")))
    });
    assert!(s.contains("Esc back"), "the footer says how to leave:\n{s}");
    // A chart opened from there closes first on Esc, and the panel has the keys again.
    t.keys(&["c"]);
    t.wait_for("the chart", |s| s.contains("+/- zoom"));
    t.keys(&["Escape"]);
    t.wait_for("the panel's keys again", |s| {
        s.lines().last().is_some_and(|l| l.contains("↑↓ move"))
    });
    // Back to the table, on a 160×48 screen where the panel shows them all.
    t.keys(&["Escape"]);
    t.tmux(&["resize-window", "-t", "t", "-x", "160", "-y", "48"]);
    let s = t.wait_for("every finding on screen", |s| {
        finding_lines(s).len() >= total && !s.contains(" shown, f: scroll)")
    });
    // Enter on the leak goes to the leaking process's row.
    let lines = finding_lines(&s);
    let leak = lines
        .iter()
        .position(|l| l.contains("leak suspected: pid 2207"))
        .unwrap_or_else(|| panic!("the leak is listed:\n{s}"));
    let mut keys = vec!["f", "Home"];
    keys.extend(std::iter::repeat_n("Down", leak));
    keys.push("Enter");
    t.keys(&keys);
    let s = t.wait_for("the leaker selected", |s| s.contains("PID 2207 on GPU 1"));
    let styled = t.tmux(&["capture-pane", "-p", "-e", "-t", "t"]);
    assert_eq!(
        selected_pid(&styled, &[2207, 2101, 2350, 4120, 3011, 91234]),
        Some(2207),
        "the leaker's row is the selected one:\n{s}"
    );
    // Enter on a finding about a GPU as a whole shows that GPU alone.
    let lines = finding_lines(&s);
    let near = lines
        .iter()
        .position(|l| l.contains("GPU 3 is 9") && l.contains("% full ("))
        .unwrap_or_else(|| panic!("GPU 3 near capacity is listed:\n{s}"));
    let mut keys = vec!["f", "Home"];
    keys.extend(std::iter::repeat_n("Down", near));
    keys.push("Enter");
    t.keys(&keys);
    let s = t.wait_for("GPU 3 alone", |s| s.contains("GPU 3 only"));
    assert!(
        s.contains("GPU 3 H200")
            && !s.contains("GPU 1 H200")
            && !s
                .lines()
                .any(|l| !l.starts_with('!') && l.contains(" 2207 ")),
        "only GPU 3's panel and processes:\n{s}"
    );
    // The findings view lists every finding with its history. Wait for the whole view: a
    // capture can catch a frame half drawn (seen on a loaded 2-core CI machine).
    t.keys(&["F"]);
    let rules = [
        "leak-suspected",
        "near-capacity",
        "idle-holder",
        "external-pressure",
    ];
    let s = t.wait_for("the findings view", |s| {
        s.contains("FINDINGS: ") && rules.iter().all(|r| s.contains(r))
    });
    for rule in rules {
        assert!(
            s.lines()
                .any(|l| l.contains(" open ") || l.starts_with("▶ open"))
                && s.contains(rule),
            "{rule} in the view:\n{s}"
        );
    }
    t.keys(&["Escape", "Escape", "q"]);
    t.wait_for("exit", |s| s.contains("EXITED rc=0"));
}

#[test]
fn the_table_hides_empty_columns_places_unattributed_rows_counts_and_scrolls_sideways() {
    // GPU 0: 30 processes and 5 GiB no process accounts for; GPUs 1 and 2: 256 MiB each of
    // driver overhead, folded into one row. No process runs in a container.
    let mut text = String::from("hostname = \"table\"\n");
    text.push_str("[[gpu]]\nmemory_total = \"140GiB\"\nbase_used = \"5GiB\"\n");
    for i in 0..30 {
        let command = if i == 0 {
            "python train.py --config configs/a-very-long-configuration-name.yaml --the-end-of-a-long-command".to_string()
        } else {
            format!("python worker.py --rank {i}")
        };
        let _ = std::fmt::Write::write_fmt(
            &mut text,
            format_args!(
                "[[gpu.process]]\npid = {}\nused = \"{}MiB\"\nsm = 10\nstart = -60\nhost = {{ user = \"u\", command = \"{command}\", cpu = 5, rss = \"1GiB\" }}\n",
                5000 + i,
                3000 - 50 * i
            ),
        );
    }
    for g in 1..3 {
        let _ = std::fmt::Write::write_fmt(
            &mut text,
            format_args!(
                "[[gpu]]\nmemory_total = \"140GiB\"\nbase_used = \"256MiB\"\n[[gpu.process]]\npid = {}\nused = \"8GiB\"\nsm = 10\nstart = -60\nhost = {{ user = \"v\", command = \"python other.py\" }}\n",
                6000 + g
            ),
        );
    }
    let sc = ScenarioFile::new(&text);
    let t = Tmux::start("table", &[], &format!("--scenario '{}'", sc.path.display()));
    let s = t.wait_for("the table", |s| {
        s.contains(" 5000 ") && s.contains("processes")
    });
    let lines: Vec<&str> = s.lines().collect();
    let header = lines
        .iter()
        .find(|l| l.contains(" PID ") && l.contains("GPU-MEM"))
        .unwrap_or_else(|| panic!("a table header:\n{s}"));
    assert!(
        !header.contains("CONTAINER"),
        "no process is in a container:\n{s}"
    );
    assert!(header.contains("of 32 processes"), "n of m processes:\n{s}");
    // The largest are GPU 0's, then GPU 1's and 2's 8 GiB: the rows shown are GPU 0's, and its
    // unattributed row is not pinned to the bottom of the screen but follows its last row.
    assert!(
        !s.contains("held by no process visible here"),
        "GPU 0's unattributed row follows its 30 processes, below the page:\n{s}"
    );
    t.keys(&["End"]);
    let s = t.wait_for("the end of the table", |s| {
        s.contains("on each of GPUs 1,2")
    });
    let lines: Vec<&str> = s.lines().collect();
    let own = lines
        .iter()
        .position(|l| l.contains("5.0GiB") && l.contains("held by no process visible here"))
        .unwrap_or_else(|| panic!("GPU 0's unattributed row:\n{s}"));
    assert!(
        lines[own - 1].contains(" 5029 "),
        "right after GPU 0's last process (5029, the smallest):\n{s}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("512MiB") && l.contains("256MiB on each of GPUs 1,2")),
        "the two small amounts are one row:\n{s}"
    );
    // Sideways: the long command's end comes into view, the PID column stays.
    t.keys(&["Home"]);
    t.wait_for("the top", |s| s.contains(" 5000 "));
    assert!(!t.screen().contains("--the-end-of-a-long-command"));
    t.keys(&["Right"; 8]);
    let s = t.wait_for("scrolled right", |s| {
        s.contains("--the-end-of-a-long-command")
    });
    assert!(
        s.contains(" 5000«"),
        "the PID stays, a « marks the scroll:\n{s}"
    );
    t.keys(&["Left"; 8]);
    t.wait_for("back", |s| !s.contains("«") && s.contains("MiB/min"));
    t.keys(&["q"]);
    t.wait_for("exit", |s| s.contains("EXITED rc=0"));
}

#[test]
fn a_replay_started_at_a_moment_shows_what_was_open_then_at_once() {
    // The real H200 trace: an intruder (PID 502) arrives at ≈ 28.8 s beside the watched job.
    // Started at 36 s, the 36 s before are run through the analysis first: the external
    // pressure and the filling-up open then are on screen from the first frame, although the
    // replay itself has not seen the intruder arrive.
    let rec = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/h200/leak-intruder.recording.jsonl");
    let script = format!(
        "'{}' --replay '{}' --watch pid:431 --watch pid:450 --watch pid:472 tui --at 36; echo \"EXITED rc=$?\"; sleep 60",
        gpuwatch_bin(),
        rec.display()
    );
    let t = Tmux::session("at", (160, 48), None, Duration::from_secs(10), &script);
    let started = Instant::now();
    let s = t.wait_for("the findings open at 36 s", |s| {
        s.contains("external memory on GPU 0 rose by") && s.contains("GPU 0 will be full in")
    });
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "on screen at once, not after a window of replay: {:?}\n{s}",
        started.elapsed()
    );
    assert!(s.contains("pid 502"), "the intruder is named:\n{s}");
    t.keys(&["q"]);
    t.wait_for("exit", |s| s.contains("EXITED rc=0"));
}

/// The demo's tree (`t`): each GPU process under its parent with its user, `*` for mine and
/// its full command line; `-` on a parent hides its child and says how many, `+` shows it.
#[test]
fn the_demo_tree_shows_users_and_command_lines_and_collapses() {
    let t = Tmux::start("tree", &[], "--demo --interval 200ms");
    t.wait_for("the demo", |s| {
        s.contains("GPU 3 H200") && s.contains("4120")
    });
    t.keys(&["t"]);
    let s = t.wait_for("the tree", |s| s.contains("TREE · COMMAND"));
    let line_of = |s: &str, pid: &str| {
        s.lines()
            .find(|l| l.contains(&format!(" {pid} ")))
            .unwrap_or_else(|| panic!("PID {pid} not in the tree:\n{s}"))
            .to_string()
    };
    let alice = line_of(&s, "2101");
    assert!(alice.starts_with('*'), "alice's process is mine: {alice}");
    assert!(alice.contains(" alice "), "{alice}");
    assert!(
        alice.contains("└─ python train.py --model resnet152 --batch-size 256 --epochs 90"),
        "the full command line under its parent: {alice}"
    );
    let bob = line_of(&s, "4120");
    assert!(!bob.starts_with('*') && bob.contains(" bob "), "{bob}");
    assert!(
        bob.contains("python eval.py --model llama-70b --batch-size 64"),
        "{bob}"
    );
    // The third line: 2101's parent, a root, after the exited run 2161 and its parent; `-`
    // hides 2101.
    let parent = line_of(&s, "2088");
    assert!(!parent.contains("└─"), "a root: {parent}");
    t.keys(&["Home", "Down", "Down", "-"]);
    let s = t.wait_for("the collapsed parent", |s| s.contains("[+1]"));
    assert!(line_of(&s, "2088").contains("[+1]"), "{s}");
    assert!(!s.contains(" 2101 "), "the child is hidden:\n{s}");
    assert!(s.contains(" 4120 "), "other trees stay:\n{s}");
    t.keys(&["+"]);
    let s = t.wait_for("the expanded parent", |s| s.contains(" 2101 "));
    assert!(!s.contains("[+1]"), "{s}");
    t.keys(&["q"]);
    let s = t.wait_for("exit", |s| s.contains("EXITED"));
    assert!(s.contains("EXITED rc=0"), "{s}");
}

/// At 80×24 the help (`?`) is taller than the screen: it says which lines it shows, and the
/// keys scroll it to its last key.
#[test]
fn the_help_scrolls_to_its_last_key_at_80x24() {
    let script = format!(
        "'{}' --demo --interval 200ms; echo \"EXITED rc=$?\"; sleep 60",
        gpuwatch_bin()
    );
    let t = Tmux::session("help", (80, 24), None, Duration::from_secs(10), &script);
    t.wait_for("the demo", |s| {
        s.contains("GPU 3 H200") && s.contains("q quit")
    });
    t.keys(&["?"]);
    // Its bottom border is drawn last: the whole overlay is there.
    let s = t.wait_for("the help and its indicator", |s| {
        s.contains("lines 1–22 of ")
    });
    assert!(s.contains("keys (? or Esc to close)"), "{s}");
    assert!(!s.contains("last line"), "{s}");
    t.keys(&["PageDown", "PageDown", "PageDown"]);
    let s = t.wait_for("the end of the help", |s| s.contains("End     last line"));
    assert!(s.contains("mouse: click selects a process"), "{s}");
    t.keys(&["Down", "Up", "Escape"]);
    t.wait_for("the help closed", |s| !s.contains("keys (? or Esc"));
    t.keys(&["q"]);
    let s = t.wait_for("exit", |s| s.contains("EXITED"));
    assert!(s.contains("EXITED rc=0"), "{s}");
}

/// The demo's header carries this machine's host summary (the demo's GPUs are simulated on it):
/// CPU %, memory used of this host's total (as `/proc/meminfo` says), swap and load.
#[test]
fn the_demo_header_shows_this_hosts_cpu_memory_and_load() {
    let total_kib: u64 = std::fs::read_to_string("/proc/meminfo")
        .expect("meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("MemTotal");
    let total = gpuwatch::output::fmt_bytes(total_kib * 1024);
    let script = format!(
        "'{}' --demo; echo \"EXITED rc=$?\"; sleep 60",
        gpuwatch_bin()
    );
    let t = Tmux::session(
        "hostline",
        (200, 50),
        None,
        Duration::from_secs(30),
        &script,
    );
    let s = t.wait_for("the host summary", |s| {
        s.lines()
            .next()
            .is_some_and(|h| h.contains("host CPU ") && h.contains(" · load "))
    });
    let header = s.lines().next().unwrap_or("");
    assert!(
        header.starts_with("gpuwatch · demo-node · demo"),
        "{header}"
    );
    let summary = header.split("host CPU ").nth(1).expect("summary");
    assert!(
        summary.contains(&format!("GiB/{total}")) || summary.contains(&format!("MiB/{total}")),
        "this host's {total} of memory: {header}"
    );
    assert!(summary.contains("% · mem "), "{header}");
    t.keys(&["q"]);
    t.wait_for("exit", |s| s.contains("EXITED rc=0"));
}

/// `--replay`: the header says where in the recording the screen is (recorded time, elapsed of
/// the whole), not the sample's age, as the replay plays at its recorded pace.
#[test]
fn a_replay_header_shows_the_position_in_the_recording() {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/h200/leak-to-oom.recording.jsonl");
    let script = format!(
        "'{}' --replay '{}'; echo \"EXITED rc=$?\"; sleep 60",
        gpuwatch_bin(),
        fixture.display()
    );
    let t = Tmux::session(
        "replaypos",
        (160, 40),
        None,
        Duration::from_secs(30),
        &script,
    );
    let position = |s: &str| -> Option<u64> {
        let header = s.lines().next()?;
        let rest = header.split("at 2026-11-29 18:4").nth(1)?;
        let elapsed = rest.split(" UTC · ").nth(1)?.split(" of 01:20").next()?;
        let (m, sec) = elapsed.split_once(':')?;
        Some(m.parse::<u64>().ok()? * 60 + sec.parse::<u64>().ok()?)
    };
    let s = t.wait_for("the replay position", |s| {
        position(s).is_some_and(|p| p >= 1)
    });
    let first = position(&s).expect("position");
    let header = s.lines().next().unwrap_or("");
    assert!(header.contains(" · replay · "), "{header}");
    assert!(
        !header.contains(" ago"),
        "the position, not the age: {header}"
    );
    // It moves with the replay.
    t.wait_for("the position moving on", |s| {
        position(s).is_some_and(|p| p >= first + 2)
    });
    t.keys(&["q"]);
    t.wait_for("exit", |s| s.contains("EXITED rc=0"));
}

/// A process the driver still lists after it exited keeps its row on the live dashboard (at
/// the default interval): `[exited]` before its last command, its user and the `*` of mine,
/// and, after `detect.exited-grace` (shortened in the config file), the finding that says the
/// driver still holds its memory.
#[test]
fn an_exited_process_keeps_its_row_and_is_reported_on_the_dashboard() {
    let mut child = Sleeper::spawn();
    let pid = child.pid();
    let sc = ScenarioFile::new(&format!(
        "[[gpu]]\nmemory_total = \"80GiB\"\n[[gpu.process]]\npid = {pid}\nused = \"5GiB\"\n"
    ));
    let cfg = sc.dir.path().join("gpuwatch.toml");
    std::fs::write(&cfg, "[detect]\nexited-grace = \"2s\"\n").expect("config");
    let env = [
        ("GPUWATCH_NVML_LIB", fake_nvml().display().to_string()),
        ("FAKE_NVML_SCENARIO", sc.path.display().to_string()),
    ];
    let t = Tmux::start("exited", &env, &format!("--config '{}'", cfg.display()));
    let row = |s: &str| {
        s.lines()
            .find(|l| l.contains(&format!(" {pid} ")) && l.contains("5.0GiB"))
            .map(str::to_string)
    };
    let s = t.wait_for("the live row", |s| {
        row(s).is_some_and(|r| r.contains("sleep 300"))
    });
    let alive = row(&s).expect("row");
    assert!(alive.starts_with('*'), "mine: {alive}");
    let _ = child.0.kill();
    let _ = child.0.wait();
    let s = t.wait_for("the exited row and its finding", |s| {
        row(s).is_some_and(|r| r.contains("[exited] sleep 300"))
            && s.contains(&format!("PID {pid} ("))
            && s.contains("but the driver still holds 5.0GiB for it on GPU 0")
    });
    let gone = row(&s).expect("row");
    assert!(gone.starts_with('*'), "still mine: {gone}");
    let user = alive.split_whitespace().nth(3).expect("user");
    assert_eq!(
        gone.split_whitespace().nth(3),
        Some(user),
        "{alive}\n{gone}"
    );
    // The only row is selected: the kill key refuses, there is no process to signal.
    t.keys(&["K"]);
    t.wait_for("the refusal", |s| {
        s.contains(&format!(
            "PID {pid} has exited: no process is left to signal"
        ))
    });
    t.keys(&["Escape", "q"]);
    t.wait_for("exit", |s| s.contains("EXITED rc=0"));
}
