//! Names that try to drive the terminal (issue 11, item 2): a real process whose argv and
//! command name carry OSC 0 (set the title), CSI 2J (clear the screen), OSC 52 (write the
//! clipboard), a newline that forges a table row and a bidi override; GPU, host, user and
//! container names doing the same from the NVML double, a scenario and a recording. Every text
//! output shows them escaped (`\e`, `\x07`, `\n`, `\u{202e}`): on a pipe, on a terminal
//! (tmux: the pane's title stays, the screen is not cleared, no clipboard write), in `history
//! who`/`peaks`, through `tui --connect`, and in the dashboard. The JSON keeps them exact.

mod common;

use std::fmt::Write as _;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::tmux::Tmux;
use common::{
    Hostile, ScenarioFile, Sleeper, fake_nvml, gpuwatch_bin, gpuwatch_cmd, gpuwatch_on, stderr,
    stdout, steering_chars,
};

/// argv[0] of the hostile process: title, clear screen, clipboard, a forged row, a bidi
/// override.
const ARGV0: &str = "evil\x1b]0;pwned\x07\x1b[2J\x1b]52;c;cHduZWQ=\x07\n  666  root  C  99GiB  forged\u{202e}gnp.exe";
/// Its command line as every text output shows it.
const SHOWN: &str = "evil\\e]0;pwned\\x07\\e[2J\\e]52;c;cHduZWQ=\\x07\\n  666  root  C  99GiB  forged\\u{202e}gnp.exe 900";

/// One GPU (its name forging a second GPU's title) with the hostile process and a plain one.
fn nvml_scenario(hostile: u32, plain: u32) -> String {
    format!(
        r#"
[clock]
freeze = 10.0

[[gpu]]
name = "H200\u001b]0;gpu\u0007\nGPU 7  forged"
memory_total = "80GiB"
memory_reserved = "0"

[[gpu.process]]
pid = {hostile}
used = "12GiB"

[[gpu.process]]
pid = {plain}
used = "1GiB"
"#
    )
}

/// Lines of the snapshot table that are process rows: a PID first (after the `*` marker).
fn process_rows(table: &str) -> Vec<&str> {
    table
        .lines()
        .filter(|l| {
            let t = l.trim_start().trim_start_matches('*').trim_start();
            t.split(' ')
                .next()
                .is_some_and(|w| w.parse::<u32>().is_ok())
        })
        .collect()
}

fn assert_clean(what: &str, text: &str) {
    let bad = steering_chars(text);
    assert!(bad.is_empty(), "{what} holds {bad:?}:\n{text}");
}

/// The table shows the hostile process's command line escaped, in one row of its own, and a
/// GPU title that forges nothing.
fn assert_table(table: &str, hostile: u32, plain: u32) {
    assert_clean("the table", table);
    let rows = process_rows(table);
    assert_eq!(rows.len(), 2, "one row per process:\n{table}");
    let row = rows
        .iter()
        .find(|r| r.contains(&format!(" {hostile} ")))
        .unwrap_or_else(|| panic!("no row for {hostile}:\n{table}"));
    assert!(row.contains(SHOWN), "escaped command line in:\n{row}");
    assert!(rows.iter().any(|r| r.contains(&format!(" {plain} "))));
    assert!(
        table.contains("GPU 0  H200\\e]0;gpu\\x07\\nGPU 7  forged"),
        "{table}"
    );
    assert_eq!(
        table.lines().filter(|l| l.starts_with("GPU ")).count(),
        1,
        "one GPU title:\n{table}"
    );
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "gpuwatch failed: {}", stderr(o));
    stdout(o)
}

#[test]
fn snapshot_on_a_pipe_shows_a_hostile_process_escaped_and_the_json_exact() {
    let (bad, plain) = (Hostile::spawn(ARGV0), Sleeper::spawn());
    let sc = ScenarioFile::new(&nvml_scenario(bad.pid(), plain.pid()));
    let table = ok(&gpuwatch_on(&sc, &["snapshot"]));
    assert_table(&table, bad.pid(), plain.pid());

    // The JSON carries the exact bytes (JSON escapes them itself).
    let json: serde_json::Value =
        serde_json::from_str(&ok(&gpuwatch_on(&sc, &["snapshot", "--json"]))).expect("JSON");
    let procs = json["gpus"][0]["processes"].as_array().expect("processes");
    let p = procs
        .iter()
        .find(|p| p["pid"] == bad.pid())
        .expect("the hostile process");
    assert_eq!(p["command"], format!("{ARGV0} 900"), "{p}");
    assert_eq!(p["name"], Hostile::COMM, "{p}");
    assert_eq!(json["gpus"][0]["name"], "H200\x1b]0;gpu\x07\nGPU 7  forged");
}

/// A scenario (`--scenario`) and a recording of it (`--replay`): host, GPU, user, container
/// and command names from the file.
#[test]
fn snapshots_of_a_scenario_and_of_its_recording_escape_every_name() {
    let sc = ScenarioFile::new(
        r#"
hostname = "node\u001b]0;host\u0007\u202e"

[[gpu]]
name = "H200\u001b]52;c;cHduZWQ=\u0007"
uuid = "GPU-1\nGPU 9 forged"
memory_total = "80GiB"

[[gpu.process]]
pid = 4242
used = "10GiB"
host = { user = "mal\u001b[2Jlory", command = "train\u0085.py\u2066x\u2069\r\nforged", container = "c\u0007" }
"#,
    );
    let scenario = sc.path.to_string_lossy().into_owned();
    let check = |table: &str| {
        assert_clean("the table", table);
        assert_eq!(process_rows(table).len(), 1, "{table}");
        for shown in [
            "node\\e]0;host\\x07\\u{202e}",
            "GPU 0  H200\\e]52;c;cHduZWQ=\\x07",
            "mal\\e[2Jlory",
            "train\\u{85}.py\\u{2066}x\\u{2069}\\r\\nforged",
            "c\\x07",
        ] {
            assert!(table.contains(shown), "{shown} in:\n{table}");
        }
    };
    let table = ok(&gpuwatch_cmd(&sc)
        .args(["--scenario", &scenario, "snapshot"])
        .output()
        .expect("runs"));
    check(&table);

    let rec = sc.dir.path().join("hostile.rec");
    let o = gpuwatch_cmd(&sc)
        .args(["--scenario", &scenario, "--interval", "100ms", "record"])
        .arg(&rec)
        .args(["--samples", "2"])
        .output()
        .expect("record runs");
    assert!(o.status.success(), "{}", stderr(&o));
    let table = ok(&gpuwatch_cmd(&sc)
        .arg("--replay")
        .arg(&rec)
        .arg("snapshot")
        .output()
        .expect("replay runs"));
    check(&table);
    assert!(table.contains("hostile.rec"), "{table}");

    // An error message quoting the file shows the quote escaped too.
    sc.rewrite(&format!(
        "driver_version = \"580\\u001b]0;err\\u0007\"\n{}",
        std::fs::read_to_string(&sc.path).expect("scenario")
    ));
    let o = gpuwatch_cmd(&sc)
        .args(["--scenario", &scenario, "snapshot"])
        .output()
        .expect("runs");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("driver_version '580\\e]0;err\\x07'"), "{err}");
    assert_clean("the error", &err);
}

/// `history who` and `history peaks` over a history the daemon recorded with the hostile
/// process in it.
#[test]
fn history_who_and_peaks_show_a_recorded_hostile_name_escaped() {
    let (bad, plain) = (Hostile::spawn(ARGV0), Sleeper::spawn());
    let sc = ScenarioFile::new(&nvml_scenario(bad.pid(), plain.pid()));
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
        .stderr(Stdio::null())
        .spawn()
        .expect("daemon starts");
    std::thread::sleep(Duration::from_secs(2));
    let _ = Command::new("kill")
        .args(["-TERM", &daemon.id().to_string()])
        .status();
    assert!(daemon.wait().expect("exits").success());
    let history = |args: &[&str]| {
        let o = Command::new(gpuwatch_bin())
            .arg("history")
            .args(args)
            .arg("--history")
            .arg(&db)
            .output()
            .expect("history runs");
        ok(&o)
    };
    let who = history(&["who", "--gpu", "0", "--at", "now"]);
    let peaks = history(&["peaks", "--since", "1h"]);
    for (what, text) in [("history who", &who), ("history peaks", &peaks)] {
        assert_clean(what, text);
        let rows: Vec<&str> = text
            .lines()
            .filter(|l| {
                l.trim_start()
                    .split(' ')
                    .next()
                    .is_some_and(|w| w.parse::<u32>().is_ok())
            })
            .collect();
        assert_eq!(rows.len(), 2, "{what}: one row per process:\n{text}");
        assert!(
            rows.iter()
                .any(|r| r.contains(&bad.pid().to_string()) && r.ends_with(SHOWN)),
            "{what}:\n{text}"
        );
    }
    // The JSON form keeps the exact command line.
    let json = history(&["who", "--gpu", "0", "--at", "now", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert!(
        v["processes"]
            .as_array()
            .expect("processes")
            .iter()
            .any(|p| p["command"] == format!("{ARGV0} 900")),
        "{json}"
    );
}

/// `tui --connect` with stdout not a terminal prints the remote daemon's frame as the table.
#[test]
fn tui_connect_on_a_pipe_shows_a_remote_hostile_name_escaped() {
    let (bad, plain) = (Hostile::spawn(ARGV0), Sleeper::spawn());
    let sc = ScenarioFile::new(&nvml_scenario(bad.pid(), plain.pid()));
    let daemon = common::Daemon::start(&sc, &["--no-history"]);
    let o = Command::new(gpuwatch_bin())
        .args(["tui", "--connect"])
        .arg(format!("http://127.0.0.1:{}", daemon.port))
        .env("NO_COLOR", "1")
        .env("XDG_CONFIG_HOME", sc.dir.path())
        .stdin(Stdio::null())
        .output()
        .expect("tui --connect runs");
    assert_table(&ok(&o), bad.pid(), plain.pid());
}

/// A shell script that runs gpuwatch with `args` on the double with this scenario, with a
/// title set first (the one that must survive) and a marker line printed before (the one a
/// clear screen would wipe).
fn pane_script(sc: &ScenarioFile, args: &str) -> String {
    let mut s = String::new();
    for (k, v) in [
        ("GPUWATCH_NVML_LIB", fake_nvml().display().to_string()),
        ("FAKE_NVML_SCENARIO", sc.path.display().to_string()),
        ("XDG_CONFIG_HOME", sc.dir.path().display().to_string()),
        ("XDG_STATE_HOME", sc.dir.path().display().to_string()),
        ("NO_COLOR", "1".to_string()),
    ] {
        let _ = write!(s, "export {k}='{v}'; ");
    }
    let _ = write!(
        s,
        "printf '\\033]2;KEEP-TITLE\\033\\\\'; echo MARKER-BEFORE; '{}' {args}; echo \"EXITED rc=$?\"; sleep 60",
        gpuwatch_bin()
    );
    s
}

#[test]
fn snapshot_on_a_terminal_neither_retitles_nor_clears_it() {
    let (bad, plain) = (Hostile::spawn(ARGV0), Sleeper::spawn());
    let sc = ScenarioFile::new(&nvml_scenario(bad.pid(), plain.pid()));
    let t = Tmux::start_open("snapshot", &pane_script(&sc, "snapshot"));
    let screen = t.wait_for("the snapshot", |s| s.contains("EXITED rc="));
    assert!(screen.contains("EXITED rc=0"), "{screen}");
    assert_eq!(t.title(), "KEEP-TITLE", "the pane title changed:\n{screen}");
    assert!(
        screen.contains("MARKER-BEFORE"),
        "the screen was cleared:\n{screen}"
    );
    assert!(
        t.buffers().trim().is_empty(),
        "clipboard written: {}",
        t.buffers()
    );
    assert!(screen.contains("evil\\e]0;pwned\\x07\\e[2J"), "{screen}");
    assert!(!screen.contains("\n  666  root"), "a forged row:\n{screen}");
}

/// The dashboard (ratatui) on the same process: nothing reaches the terminal raw.
#[test]
fn the_dashboard_neither_retitles_the_pane_nor_writes_the_clipboard() {
    let (bad, plain) = (Hostile::spawn(ARGV0), Sleeper::spawn());
    let sc = ScenarioFile::new(&nvml_scenario(bad.pid(), plain.pid()));
    let t = Tmux::start_open("dashboard", &pane_script(&sc, "--interval 200ms"));
    let pid = bad.pid().to_string();
    let screen = t.wait_for("the hostile process's row", |s| {
        s.contains(&pid) && s.contains("evil")
    });
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(t.title(), "KEEP-TITLE", "the pane title changed:\n{screen}");
    assert!(
        t.buffers().trim().is_empty(),
        "clipboard written: {}",
        t.buffers()
    );
    assert!(screen.contains("evil\\e]0;pwned\\x07\\e[2J"), "{screen}");
    t.tmux(&["send-keys", "-t", "t", "q"]);
    let screen = t.wait_for("the dashboard to quit", |s| s.contains("EXITED rc="));
    assert!(screen.contains("EXITED rc=0"), "{screen}");
    assert!(screen.contains("MARKER-BEFORE"), "{screen}");
    assert_eq!(t.title(), "KEEP-TITLE");
}

/// `explain` quotes the log: what the ANSI stripper leaves (a lone BEL, an 8-bit CSI, a bidi
/// override) is shown escaped.
#[test]
fn explain_quotes_a_hostile_log_line_escaped() {
    use std::io::Write as _;
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/triage/oom-torch-2.11-others-real.txt");
    let log = std::fs::read_to_string(fixture).expect("fixture").replace(
        "CUDA out of memory. Tried",
        "CUDA out of memory.\x07\u{9b}2J\u{202e} Tried",
    );
    let mut child = Command::new(gpuwatch_bin())
        .arg("explain")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("explain runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(log.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("explain ends");
    let text = ok(&out);
    assert_clean("explain", &text);
    assert!(
        text.contains("CUDA out of memory.\\x07\\u{9b}2J\\u{202e} Tried"),
        "{text}"
    );
}

/// `run`'s report and diagnosis name the other processes on the job's GPU: the hostile one
/// shows escaped (the job's own output passes through as it is; this job's is plain).
#[test]
fn the_run_report_names_a_hostile_neighbour_escaped() {
    let intruder = Hostile::spawn(ARGV0);
    let sc = ScenarioFile::new(&format!(
        "[[gpu]]\nmemory_total = \"143771MiB\"\nmemory_reserved = \"0\"\n\
         [[gpu.process]]\npid = {}\nused = \"50GiB\"\n",
        intruder.pid()
    ));
    let job = sc.dir.path().join("job.sh");
    std::fs::write(
        &job,
        format!(
            r#"printf '[[gpu.process]]\npid = %s\nused = "70GiB"\n' $$ >> "$FAKE_NVML_SCENARIO"
sleep 1.5
echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 30.00 GiB. GPU 0 has a total capacity of 139.80 GiB of which 18.26 GiB is free. Process {} has 50.00 GiB memory in use. Including non-PyTorch memory, this process has 70.51 GiB memory in use.' >&2
exit 1
"#,
            intruder.pid()
        ),
    )
    .expect("job script");
    let out = gpuwatch_cmd(&sc)
        .args(["--interval", "100ms", "run", "--", "sh"])
        .arg(&job)
        .output()
        .expect("gpuwatch runs");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_clean("the run report", &err);
    let shown: String = SHOWN.chars().take(60).collect();
    assert!(
        err.contains(&format!("pid {} ", intruder.pid())) && err.contains(&shown),
        "{err}"
    );
}
