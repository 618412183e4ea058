//! Whole-screen snapshots of the dashboard, rendered into ratatui's `TestBackend` from
//! scripted frames (fixed times, fixed clocks), so they are deterministic.
//! Review changes with `cargo insta review`.

mod common;

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuwatch::model::{Frame, SourceKind};
use gpuwatch::source::GpuSource;
use gpuwatch::source::procdetail::{ProcDetail, ProcLink, TreeRow};
use gpuwatch::source::scripted::{DEMO_START, ScriptedSource};
use gpuwatch::tui::state::{Command, UiState, View};
use gpuwatch::tui::theme::Theme;
use gpuwatch::tui::view::{Context, render};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use scenario::Scenario;

/// 2026-11-29T12:00:00Z
const NOW: f64 = 1_795_953_600.0;

/// A state fed `steps` frames, one a second, ending at scenario time `t_end` (= `NOW`).
fn fed(source: &ScriptedSource, me: &str, t_end: f64, steps: usize) -> (UiState, Instant) {
    fed_as(source, None, me, t_end, steps)
}

/// The same, with the frames claiming another source kind (e.g. live, for signals).
fn fed_as(
    source: &ScriptedSource,
    kind: Option<SourceKind>,
    me: &str,
    t_end: f64,
    steps: usize,
) -> (UiState, Instant) {
    let mut st = common::ui_state(Some(me), false);
    let mut info = source.info();
    if let Some(kind) = kind {
        info.kind = kind;
    }
    let info = Arc::new(info);
    let mut last = Instant::now();
    for i in 0..steps {
        let back = (steps - 1 - i) as f64;
        last = Instant::now();
        st.on_frame(frame(
            &info,
            i as u64 + 1,
            source.sample_at(t_end - back, NOW - back),
            last,
        ));
    }
    (st, last)
}

/// A frame of `sample` at 1 s, published at `published`.
fn frame(
    info: &Arc<gpuwatch::model::SourceInfo>,
    seq: u64,
    sample: gpuwatch::model::Sample,
    published: Instant,
) -> Arc<Frame> {
    Arc::new(Frame {
        seq,
        source: Arc::clone(info),
        sample,
        published,
        interval: Duration::from_secs(1),
        host: None,
    })
}

fn screen(st: &mut UiState, width: u16, height: u16, mono: Instant) -> String {
    st.update(Command::Resize(width, height));
    let ctx = Context {
        now: NOW,
        mono,
        theme: Theme::new(false),
    };
    let mut term = Terminal::new(TestBackend::new(width, height)).expect("terminal");
    term.draw(|f| render(f, st, &ctx)).expect("draw");
    let buf = term.backend().buffer();
    let mut out = String::new();
    for y in 0..buf.area.height {
        let mut line = String::new();
        for x in 0..buf.area.width {
            line.push_str(buf[(x, y)].symbol());
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

fn demo() -> ScriptedSource {
    ScriptedSource::demo().expect("demo")
}

fn fresh(last: Instant) -> Instant {
    last + Duration::from_millis(300)
}

#[test]
fn one_gpu() {
    let sc = Scenario::parse(
        r#"
hostname = "box"
[[gpu]]
memory_total = "80GiB"
memory_reserved = "0"
base_used = "512MiB"
util_gpu = { linear = [[0, 10], [60, 90]] }
util_mem = 30
temperature = 70
[[gpu.process]]
pid = 1200
used = { linear = [[0, "10GiB"], [60, "40GiB"]] }
sm = 80
host = { user = "me", command = "python train.py --lr 3e-4", cpu = 250, rss = "12GiB" }
[[gpu.process]]
pid = 1300
used = "8GiB"
sm = 0
host = { user = "bob", command = "python -m ipykernel_launcher", cpu = 0, rss = "2GiB" }
"#,
    )
    .expect("valid");
    let src = ScriptedSource::new(sc, "one");
    let (mut st, last) = fed(&src, "me", 60.0, 61);
    insta::assert_snapshot!(screen(&mut st, 120, 30, fresh(last)));
}

#[test]
fn eight_gpus_wide() {
    let mut text = String::from("hostname = \"node8\"\n");
    for g in 0..8 {
        let _ = write!(
            text,
            "[[gpu]]\nmemory_total = \"143771MiB\"\nutil_gpu = {}\n",
            10 * g + 5
        );
        for p in 0..3 {
            let _ = write!(
                text,
                "[[gpu.process]]\npid = {}\nused = \"{}GiB\"\nsm = {}\nhost = {{ user = \"u{p}\", command = \"python rank{g}.py\" }}\n",
                1000 + g * 10 + p,
                5 + p * 7 + g,
                20 + p * 10
            );
        }
    }
    let src = ScriptedSource::new(Scenario::parse(&text).expect("valid"), "eight");
    let (mut st, last) = fed(&src, "u0", 30.0, 5);
    insta::assert_snapshot!(screen(&mut st, 200, 60, fresh(last)));
}

#[test]
fn demo_at_80x24() {
    let (mut st, last) = fed(&demo(), "alice", DEMO_START, 30);
    let text = screen(&mut st, 80, 24, fresh(last));
    assert!(text.lines().all(|l| l.chars().count() <= 80));
    insta::assert_snapshot!(text);
}

#[test]
fn filter_active() {
    let (mut st, last) = fed(&demo(), "alice", DEMO_START, 5);
    st.update(Command::FilterStart);
    for c in "bob".chars() {
        st.update(Command::FilterInput(c));
    }
    let text = screen(&mut st, 120, 30, fresh(last));
    assert!(text.contains("4120"), "bob's process is listed");
    assert!(!text.contains(" 2101 "), "alice's is filtered out");
    insta::assert_snapshot!(text);
}

#[test]
fn detail_view() {
    let (mut st, last) = fed(&demo(), "alice", DEMO_START, 60);
    // Select the leaking fine-tune (pid 2207) and open it.
    while st.selected_row().map(|(_, p)| p.pid) != Some(2207) {
        st.update(Command::Down);
    }
    assert_eq!(
        st.update(Command::OpenDetail),
        gpuwatch::tui::state::Effect::LoadDetail(2207)
    );
    st.detail_loaded(ProcDetail {
        pid: 2207,
        cwd: Some("/home/alice/llama".into()),
        command: Some("python finetune.py --model llama-7b --lr 2e-5 --keep-graph".into()),
        env: vec![
            (
                "CUDA_VISIBLE_DEVICES".into(),
                "GPU-8a52d0b4-19c3-4f7d-b1e2-6c0f3a9d2b11".into(),
            ),
            (
                "PYTORCH_CUDA_ALLOC_CONF".into(),
                "expandable_segments:True".into(),
            ),
            ("LOCAL_RANK".into(), "0".into()),
        ],
        env_note: None,
        ancestors: vec![
            ProcLink {
                pid: 2188,
                name: "bash".into(),
            },
            ProcLink {
                pid: 2100,
                name: "tmux: server".into(),
            },
        ],
        children: vec![ProcLink {
            pid: 2210,
            name: "pt_data_worker".into(),
        }],
    });
    let text = screen(&mut st, 120, 40, fresh(last));
    let footer = text.lines().last().unwrap_or("");
    assert!(
        footer.starts_with("Esc back") && !footer.contains("sort:"),
        "the detail view's own keys: {footer:?}"
    );
    insta::assert_snapshot!(text);
}

/// A torchrun job as the scenario gives it: four ranks, one per GPU, under launcher 5000.
fn torchrun_scenario() -> Scenario {
    let mut text = String::from("hostname = \"box\"\n");
    for rank in 0..4 {
        let _ = write!(
            text,
            r#"
[[gpu]]
memory_total = "80GiB"
memory_reserved = "0"
base_used = "512MiB"
util_gpu = 90
[[gpu.process]]
pid = {pid}
used = "{used}GiB"
sm = {sm}
host = {{ user = "{user}", command = "/usr/bin/python3 -u train.py --local-rank={rank} --nnodes=1 --config configs/llama-13b.yaml --output /scratch/run-17", cpu = 150, rss = "9GiB", ppid = 5000 }}
"#,
            pid = 5001 + rank,
            used = 60 + rank,
            sm = 70 + rank,
            user = if rank == 3 { "bob" } else { "alice" },
        );
    }
    Scenario::parse(&text).expect("scenario")
}

/// The rows the tree view reads for it: launcher, ranks, two data-loader workers per rank
/// (forked from the rank: the same command line), one with a hostile command line.
fn torchrun_tree() -> Vec<TreeRow> {
    let row = |pid, depth, on_gpu, command: &str| TreeRow {
        pid,
        name: "python3".to_string(),
        depth,
        on_gpu,
        user: Some("alice".to_string()),
        command: Some(command.to_string()),
    };
    let rank = |n: u32| {
        format!(
            "/usr/bin/python3 -u train.py --local-rank={n} --nnodes=1 --config configs/llama-13b.yaml --output /scratch/run-17"
        )
    };
    let mut rows = vec![row(
        5000,
        0,
        false,
        "/usr/bin/python3 /usr/local/bin/torchrun --nproc-per-node=4 train.py --config configs/llama-13b.yaml",
    )];
    for n in 0..4 {
        let pid = 5001 + n;
        rows.push(row(pid, 1, true, &rank(n)));
        if n < 3 {
            rows.push(row(6000 + 10 * n, 2, false, &rank(n)));
            rows.push(row(6001 + 10 * n, 2, false, &rank(n)));
        }
    }
    let mut hostile = row(6100, 2, false, "sh -c \x1b[2Jecho pwned");
    hostile.user = Some("bob".to_string());
    rows.push(hostile);
    rows
}

#[test]
fn tree_view() {
    let (mut st, last) = fed(
        &ScriptedSource::new(torchrun_scenario(), "t"),
        "alice",
        NOW,
        3,
    );
    let effect = st.update(Command::ToggleTree);
    assert!(matches!(effect, gpuwatch::tui::state::Effect::LoadTree(_)));
    assert_eq!(st.view, View::Tree);
    st.tree_loaded(torchrun_tree());
    let text = screen(&mut st, 120, 40, fresh(last));
    // Each rank is told apart by its command line, with its user, memory, SM and GPU.
    for n in 0..4 {
        let line = text
            .lines()
            .find(|l| l.contains(&format!("{:>7} ", 5001 + n)))
            .unwrap_or_else(|| panic!("rank {n} missing:\n{text}"));
        assert!(line.contains(&format!("--local-rank={n}")), "{line}");
        assert!(line.contains(&format!("{}.0GiB", 60 + n)), "{line}");
        assert!(
            line.contains(if n == 3 { " bob " } else { " alice " }),
            "{line}"
        );
        // Mine: alice's ranks.
        assert_eq!(line.starts_with('*'), n != 3, "{line}");
    }
    assert!(
        text.contains("├─ /usr/bin/python3 -u train.py --local-rank=0"),
        "{text}"
    );
    assert!(text.contains("│  ├─ "), "{text}");
    assert!(text.contains("│  └─ "), "{text}");
    assert!(
        text.contains("└─ /usr/bin/python3 -u train.py --local-rank=3"),
        "{text}"
    );
    assert!(
        text.contains("   └─ sh -c \\e[2Jecho pwned"),
        "escaped: {text}"
    );
    assert!(!text.contains('\x1b'));
    // Lines are cut at the edge, never wrapped.
    assert!(text.lines().all(|l| l.chars().count() <= 120));
    insta::assert_snapshot!(text);
}

#[test]
fn tree_view_collapsed() {
    let (mut st, last) = fed(
        &ScriptedSource::new(torchrun_scenario(), "t"),
        "alice",
        NOW,
        3,
    );
    st.update(Command::ToggleTree);
    st.tree_loaded(torchrun_tree());
    // The cursor starts on the table's selected process: the largest, rank 3.
    assert_eq!(st.tree.cursor(), Some(5004));
    st.update(Command::Home);
    st.update(Command::TreeCollapse);
    let text = screen(&mut st, 80, 24, fresh(last));
    assert!(
        text.contains(
            "     5000 alice                         [+11] /usr/bin/python3 /usr/local/b"
        ),
        "{text}"
    );
    assert!(!text.contains("--local-rank"), "{text}");
    insta::assert_snapshot!(text);
    st.update(Command::TreeExpand);
    // On a data-loader worker: `-` folds its rank; Enter and K need a GPU process.
    st.update(Command::Down);
    st.update(Command::Down);
    assert_eq!(st.tree.cursor(), Some(6000));
    st.update(Command::OpenDetail);
    assert_eq!(
        st.view,
        View::Tree,
        "no detail for a process without GPU memory"
    );
    assert!(
        st.message
            .as_deref()
            .is_some_and(|m| m.contains("PID 6000"))
    );
    st.update(Command::TreeCollapse);
    assert_eq!(st.tree.cursor(), Some(5001));
    let text = screen(&mut st, 120, 40, fresh(last));
    assert!(
        text.contains("├─ [+2] /usr/bin/python3 -u train.py --local-rank=0"),
        "{text}"
    );
    // The cursor on a rank selects it in the table.
    assert_eq!(st.selected_row().map(|(_, p)| p.pid), Some(5001));
    // A click on a line of the tree (below its header) moves the cursor there.
    let body = st.layout().body;
    let line = text
        .lines()
        .position(|l| l.contains("   5003 "))
        .expect("rank 2 on screen");
    st.update(Command::Click(
        body.x + 3,
        u16::try_from(line).expect("row"),
    ));
    assert_eq!(st.tree.cursor(), Some(5003));
    assert_eq!(st.selected_row().map(|(_, p)| p.pid), Some(5003));
}

#[test]
fn help_overlay() {
    let (mut st, last) = fed(&demo(), "alice", DEMO_START, 2);
    st.update(Command::ToggleHelp);
    let text = screen(&mut st, 100, 50, fresh(last));
    assert!(text.contains("quit") && text.contains("sort by the next column"));
    insta::assert_snapshot!(text);
}

/// At 80×24 the help is taller than the screen: it says which lines it shows and scrolls to
/// the last key.
#[test]
fn help_overlay_scrolls_at_80x24() {
    let (mut st, last) = fed(&demo(), "alice", DEMO_START, 2);
    st.update(Command::ToggleHelp);
    let text = screen(&mut st, 80, 24, fresh(last));
    let total = gpuwatch::tui::keymap::help_lines().len();
    assert!(
        text.contains(&format!("lines 1–22 of {total}")),
        "the indicator:\n{text}"
    );
    assert!(text.contains("keys (? or Esc to close)"), "{text}");
    insta::assert_snapshot!(text);
    // Down scrolls one line; PgDn pages to the end and stops there.
    st.update(Command::Down);
    let text = screen(&mut st, 80, 24, fresh(last));
    assert!(text.contains(&format!("lines 2–23 of {total}")), "{text}");
    assert!(!text.contains("last line"), "{text}");
    for _ in 0..10 {
        st.update(Command::PageDown);
    }
    let text = screen(&mut st, 80, 24, fresh(last));
    assert!(
        text.contains(&format!("lines {}–{total} of {total}", total - 21)),
        "{text}"
    );
    assert!(text.contains("End     last line"), "the last key:\n{text}");
    assert!(text.contains("mouse: click selects a process"), "{text}");
    // The keys scrolled the help, not the table behind it; Up goes back.
    assert_eq!(st.selected, 0);
    st.update(Command::Up);
    let text = screen(&mut st, 80, 24, fresh(last));
    assert!(
        text.contains(&format!("lines {}–{} of {total}", total - 22, total - 1)),
        "{text}"
    );
    // Closed and opened again: from the top.
    st.update(Command::ToggleHelp);
    st.update(Command::ToggleHelp);
    let text = screen(&mut st, 80, 24, fresh(last));
    assert!(text.contains(&format!("lines 1–22 of {total}")), "{text}");
}

#[test]
fn stale_source() {
    let (mut st, last) = fed(&demo(), "alice", DEMO_START, 3);
    let text = screen(&mut st, 120, 30, last + Duration::from_secs(42));
    assert!(text.contains("STALE 42s"), "{text}");
    assert!(text.contains("source stale: no sample for 42s"), "{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn unavailable_values() {
    let sc = Scenario::parse(
        r#"
hostname = "odd"
[[gpu]]
name = "NVIDIA A100-SXM4-80GB"
memory_total = "81920MiB"
faults.not_supported = ["power", "temperature", "process-utilization", "utilization"]
[[gpu.process]]
pid = 4242
used = "20GiB"
used_unavailable = true
host = { user = "dana", command = "python serve.py" }
[[gpu.process]]
pid = 4343
used = "1GiB"
host = { hidden = true }
[[gpu]]
memory_total = "81920MiB"
lost_at = 0
"#,
    )
    .expect("valid");
    let src = ScriptedSource::new(sc, "faults");
    let (mut st, last) = fed(&src, "dana", 5.0, 3);
    let text = screen(&mut st, 120, 24, fresh(last));
    assert!(text.contains("n/a") && text.contains("LOST"), "{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn kill_confirmation() {
    // Signals go only to live processes: the demo's frames pose as live here.
    let (mut st, last) = fed_as(&demo(), Some(SourceKind::Live), "alice", DEMO_START, 3);
    while st.selected_row().map(|(_, p)| p.pid) != Some(4120) {
        st.update(Command::Down);
    }
    st.update(Command::Kill);
    let text = screen(&mut st, 100, 30, fresh(last));
    assert!(text.contains("Send SIGTERM?"), "{text}");
    assert!(text.contains("bob: python eval.py"), "{text}");
    insta::assert_snapshot!(text);
}

/// The text inside the kill dialog's border, its lines joined by spaces.
fn dialog_text(screen: &str) -> String {
    let mut inside = false;
    let mut words = Vec::new();
    for line in screen.lines() {
        if line.contains("┌ signal a process") {
            inside = true;
            continue;
        }
        if inside && line.contains('└') {
            break;
        }
        if inside {
            let body = line.split('│').nth(1).unwrap_or("");
            words.extend(body.split_whitespace().map(str::to_string));
        }
    }
    words.join(" ")
}

/// The refusals are the dialog's longest texts: at 80×24 each is on screen whole, wrapped.
#[test]
fn kill_refusals_are_shown_whole_at_80x24() {
    let (mut st, last) = fed_as(&demo(), Some(SourceKind::Live), "alice", DEMO_START, 3);
    // PID 91234 is not visible here: no start time pins its identity.
    while st.selected_row().map(|(_, p)| p.pid) != Some(91234) {
        st.update(Command::Down);
    }
    st.update(Command::Kill);
    let text = screen(&mut st, 80, 24, fresh(last));
    let said = gpuwatch::signal::SignalError::NoIdentity { pid: 91234 }.to_string();
    assert!(dialog_text(&text).contains(&said), "{said}\n{text}");
    insta::assert_snapshot!(text);

    // A process that cannot be pinned (no pidfd): the longest refusal, after the question.
    st.update(Command::Back);
    while st.selected_row().map(|(_, p)| p.pid) != Some(4120) {
        st.update(Command::Up);
    }
    st.update(Command::Kill);
    let said = gpuwatch::signal::SignalError::NotPinned {
        pid: 4120,
        source: std::io::Error::from_raw_os_error(38),
    }
    .to_string();
    st.signal_result(gpuwatch::signal::Sig::Term, Err(said.clone()));
    for (w, h) in [(80, 24), (60, 20), (40, 24)] {
        let text = screen(&mut st, w, h, fresh(last));
        let inside = dialog_text(&text);
        assert!(inside.contains(&said), "{w}×{h}: {said}\n{text}");
        assert!(inside.contains("bob: python eval.py"), "{w}×{h}:\n{text}");
    }
}

#[test]
fn read_only_refuses_to_signal() {
    let src = demo();
    let info = Arc::new(src.info());
    let mut st = common::ui_state(None, true);
    st.on_frame(frame(
        &info,
        1,
        src.sample_at(DEMO_START, NOW),
        Instant::now(),
    ));
    assert_eq!(st.update(Command::Kill), gpuwatch::tui::state::Effect::None);
    assert!(st.kill.is_none());
    assert!(st.message.as_deref().unwrap_or("").contains("read-only"));
}

#[test]
fn simulated_pids_are_never_signalled() {
    let (mut st, _) = fed(&demo(), "alice", DEMO_START, 2);
    assert_eq!(st.update(Command::Kill), gpuwatch::tui::state::Effect::None);
    assert!(st.kill.is_none());
    assert!(
        st.message
            .as_deref()
            .unwrap_or("")
            .contains("only to live processes")
    );
}

#[test]
fn remote_daemon_disconnected() {
    // `tui --connect`: the frames came from a daemon whose stream then broke. The header says
    // so before anything else, and the findings panel repeats it with the reason.
    let src = demo();
    let (mut st, last) = fed_as(&src, Some(SourceKind::Remote), "alice", DEMO_START, 5);
    let mono = last + Duration::from_secs(20);
    st.link = Some((
        "http://gpu-07:9400".to_string(),
        gpuwatch::remote::Link::Disconnected {
            // 2026-11-29T11:59:45Z
            since: std::time::UNIX_EPOCH + Duration::from_secs(1_795_953_585),
            error: "io: Connection refused (os error 111)".to_string(),
            retry_at: mono + Duration::from_secs(4),
            attempts: 3,
        },
    ));
    let text = screen(&mut st, 160, 24, mono);
    assert!(
        text.lines().next().unwrap().contains(
            "DISCONNECTED since 11:59:45 UTC from http://gpu-07:9400: io: Connection refused"
        ),
        "{text}"
    );
    assert!(text.contains("retrying in 4s"), "{text}");
    insta::assert_snapshot!(text);
}

/// The GPU panels' facts are ranked (memory split, time to full, temperature, power, clocks,
/// PCIe): what does not fit is dropped whole from the least important up, never cut, at the
/// common sizes; the time to full is on screen wherever the analysis has one.
#[test]
fn no_gpu_fact_is_cut_at_the_common_sizes() {
    for (w, h) in [(80, 24), (120, 40), (160, 48), (200, 60), (240, 60)] {
        let (mut st, last) = fed(&demo(), "alice", DEMO_START, 30);
        let text = screen(&mut st, w, h, fresh(last));
        let panels: Vec<&str> = text
            .lines()
            .skip(1)
            .take_while(|l| !(l.contains(" PID ") && l.contains("GPU-MEM")))
            .collect();
        assert!(!panels.is_empty(), "{w}x{h}: no panels\n{text}");
        // The header's pieces are left out whole, the findings count kept ("… ago ·" was cut).
        let header = text.lines().next().unwrap_or("");
        assert!(
            header.contains(" findings") && !header.ends_with('·') && !header.contains('…'),
            "{w}x{h}: the header {header:?}"
        );
        for l in &panels {
            assert!(
                !l.contains('…'),
                "{w}x{h}: a GPU fact is cut: {l:?}\n{text}"
            );
        }
        if h >= 40 {
            assert!(
                panels.iter().any(|l| l.contains("full in ")),
                "{w}x{h}: the demo's growing GPU shows its time to full\n{text}"
            );
        }
    }
}

/// More findings than the panel's share of the screen: it says how many it shows of how many.
#[test]
fn a_cut_findings_panel_says_how_many_it_shows() {
    let mut text = String::from("hostname = \"full\"\n");
    for g in 0..10 {
        let _ = write!(
            text,
            "[[gpu]]\nmemory_total = \"80GiB\"\nmemory_reserved = \"0\"\n[[gpu.process]]\npid = {}\nused = \"79GiB\"\nsm = 50\nhost = {{ user = \"u\", command = \"python full{g}.py\" }}\n",
            2000 + g
        );
    }
    let src = ScriptedSource::new(Scenario::parse(&text).expect("valid"), "full");
    let (mut st, last) = fed(&src, "u", 120.0, 121);
    let screen = screen(&mut st, 120, 40, fresh(last));
    let lines: Vec<&str> = screen.lines().collect();
    let findings: Vec<&&str> = lines.iter().filter(|l| l.contains("! ")).collect();
    assert_eq!(findings.len(), 8, "a fifth of 40 lines\n{screen}");
    assert!(
        findings[7].starts_with("(8 of 10 shown, f: scroll) ! "),
        "{:?}\n{screen}",
        findings[7]
    );
}

/// Every GPU's bar has the same width, whatever its memory text (`22.0GiB/…` or `135.0GiB/…`).
#[test]
fn the_gpu_bars_of_a_screen_have_one_width() {
    for (w, h) in [(80, 24), (120, 40), (160, 48)] {
        let (mut st, last) = fed(&demo(), "alice", DEMO_START, 30);
        let text = screen(&mut st, w, h, fresh(last));
        let widths: std::collections::BTreeSet<usize> = text
            .lines()
            .flat_map(|l| l.split("GPU ").skip(1))
            .filter_map(|p| {
                let (a, b) = (p.find('▕')?, p.find('▏')?);
                Some(p[a..b].chars().count())
            })
            .collect();
        assert_eq!(widths.len(), 1, "{w}x{h}: bar widths {widths:?}\n{text}");
    }
}

/// Paused, the header says how old the screen is, not the newest sample's age.
#[test]
fn a_paused_screen_says_how_old_it_is() {
    let src = demo();
    let info = Arc::new(src.info());
    let mut st = common::ui_state(Some("alice"), false);
    let mut last = Instant::now();
    // Frames up to 12 s before NOW, then a pause, then twelve more (the newest at NOW).
    for i in 0..20u32 {
        if i == 8 {
            st.update(Command::TogglePause);
        }
        let back = 19.0 - f64::from(i);
        last = Instant::now();
        st.on_frame(frame(
            &info,
            u64::from(i) + 1,
            src.sample_at(DEMO_START - back, NOW - back),
            last,
        ));
    }
    let text = screen(&mut st, 160, 40, fresh(last));
    let header = text.lines().next().unwrap_or("");
    assert!(
        header.contains("PAUSED (p): the screen is from 12 s ago"),
        "{header}"
    );
}

/// 8 GPUs × 50 processes, six findings or more: a fleet node's screen.
fn eight_by_fifty() -> ScriptedSource {
    let mut text = String::from("hostname = \"node-8x50\"\ndemo_user = \"u\"\n");
    let mut pid = 10_000;
    for g in 0..8 {
        let _ = write!(
            text,
            "[[gpu]]\nname = \"NVIDIA H100 80GB HBM3\"\nmemory_total = \"80GiB\"\nmemory_reserved = \"512MiB\"\nbase_used = \"256MiB\"\nutil_gpu = 80\ntemperature = 60\npower = 500\nsm_clock = 1980\n"
        );
        // GPU 0: a leaker filling it up; GPU 1 and 5: an idle holder; GPU 2: an intruder.
        let special = match g {
            0 => Some(
                "used = { linear = [[-1200, \"2GiB\"], [300, \"80GiB\"]] }\nsm = 90\nhost = { user = \"u\", command = \"python leak.py --keep-graph\" }\nstart = -1300\n",
            ),
            1 | 5 => Some(
                "used = \"20GiB\"\nsm = 0\nhost = { user = \"carol\", command = \"python -m ipykernel_launcher -f /home/carol/.local/share/jupyter/runtime/kernel-1.json\" }\nstart = -7200\n",
            ),
            2 => Some(
                "used = { linear = [[-50, \"0\"], [0, \"40GiB\"]] }\nsm = 60\nhost = { user = \"bob\", command = \"python eval.py --model llama-70b --batch-size 64\" }\nstart = -50\n",
            ),
            _ => None,
        };
        let n = if g < 2 { 7 } else { 6 };
        for i in 0..n {
            pid += 1;
            let body = if let Some(special) = special.filter(|_| i == 0) {
                special.to_string()
            } else {
                format!(
                    "used = \"{}GiB\"\nsm = {}\nhost = {{ user = \"u\", command = \"python -m torch.distributed.run --nproc-per-node 8 train.py --local-rank={g} --worker={i}\", cpu = 99, rss = \"3GiB\" }}\nstart = -3000\n",
                    1 + i % 3,
                    40 + i
                )
            };
            let _ = write!(text, "[[gpu.process]]\npid = {pid}\n{body}");
        }
    }
    ScriptedSource::new(Scenario::parse(&text).expect("valid 8x50"), "8x50")
}

/// The five common sizes with 8 GPUs, 50 processes and six findings: no ranked GPU fact is
/// cut, the findings panel says how many it shows, and the table says how many processes.
#[test]
fn eight_gpus_fifty_processes_six_findings_at_five_sizes() {
    let src = eight_by_fifty();
    let (mut st, last) = fed(&src, "u", 0.0, 620);
    assert!(
        st.analyzer.open().len() >= 6,
        "six findings: {:?}",
        st.analyzer
            .open()
            .iter()
            .map(|f| f.summary.clone())
            .collect::<Vec<_>>()
    );
    assert_eq!(
        st.shown
            .as_ref()
            .unwrap()
            .sample
            .gpus
            .iter()
            .map(|g| g.processes.len())
            .sum::<usize>(),
        50
    );
    for (w, h) in [(80, 24), (120, 40), (160, 48), (200, 60), (240, 60)] {
        let text = screen(&mut st, w, h, fresh(last));
        let lines: Vec<&str> = text.lines().collect();
        let table = lines
            .iter()
            .position(|l| l.contains(" PID ") && l.contains("GPU-MEM"))
            .unwrap_or_else(|| panic!("{w}x{h}: the table header\n{text}"));
        for l in &lines[1..table] {
            assert!(
                !l.contains('…'),
                "{w}x{h}: a GPU fact is cut: {l:?}\n{text}"
            );
        }
        assert!(
            lines[table].contains(" of 50 processes"),
            "{w}x{h}: the table says how many it shows\n{text}"
        );
        insta::assert_snapshot!(format!("eight_by_fifty_{w}x{h}"), text);
    }
}

/// Sorted by any column, its header keeps its whole name and the arrow, at 80 and 160 columns.
#[test]
fn the_sort_arrow_never_cuts_a_column_header() {
    use gpuwatch::tui::state::SortKey;
    for key in SortKey::CYCLE {
        for w in [80, 160] {
            let (mut st, last) = fed(&demo(), "alice", DEMO_START, 3);
            st.update(Command::SortBy(key));
            let text = screen(&mut st, w, 40, fresh(last));
            let header = text
                .lines()
                .find(|l| l.contains(" PID") && l.contains("GPU-MEM"))
                .unwrap_or_else(|| panic!("{key:?} {w}: a header\n{text}"));
            assert!(!header.contains('…'), "{key:?} at {w}: {header:?}");
        }
    }
    let (mut st, last) = fed(&demo(), "alice", DEMO_START, 3);
    st.update(Command::SortBy(SortKey::Gpu));
    let text = screen(&mut st, 160, 40, fresh(last));
    assert!(text.contains(" GPU↑     PID"), "{text}");
}

/// The demo fed with frames that carry this host summary (as the dashboard's sampler makes
/// them for a live GPU or a demo).
fn fed_with_host(host: gpuwatch::model::HostSummary) -> (UiState, Instant) {
    let src = demo();
    let info = Arc::new(src.info());
    let mut st = common::ui_state(Some("alice"), false);
    let mut last = Instant::now();
    for i in 0..3u32 {
        let back = 2.0 - f64::from(i);
        last = Instant::now();
        st.on_frame(Arc::new(Frame {
            seq: u64::from(i) + 1,
            source: Arc::clone(&info),
            sample: src.sample_at(DEMO_START - back, NOW - back),
            published: last,
            interval: Duration::from_secs(1),
            host: Some(host),
        }));
    }
    (st, last)
}

const GIB: u64 = 1 << 30;

fn host(mem_used_gib: u64, swap_used_gib: u64) -> gpuwatch::model::HostSummary {
    gpuwatch::model::HostSummary {
        cpu_percent: Some(37.4),
        memory_total: 256 * GIB,
        memory_available: (256 - mem_used_gib) * GIB,
        swap_total: 8 * GIB,
        swap_used: swap_used_gib * GIB,
        load: Some([12.5, 9.75, 8.0]),
        cpus: 64,
    }
}

/// The header's host summary: right-aligned after the header's facts at 200 columns; at 160
/// and 120 the pieces that do not fit are left out whole (load, then swap, then CPU; memory
/// last), never cut; at 80 there is no room.
#[test]
fn the_header_shows_the_host_summary_and_drops_whole_pieces() {
    let (mut st, last) = fed_with_host(host(60, 0));
    let header = |st: &mut UiState, w: u16| {
        screen(st, w, 40, fresh(last))
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    };
    let wide = header(&mut st, 200);
    insta::assert_snapshot!(wide);
    assert!(
        wide.ends_with(
            "host CPU 37% · mem 60.0GiB/256.0GiB · swap 0MiB/8.0GiB · load 12.50 9.75 8.00"
        ),
        "{wide}"
    );
    assert_eq!(wide.chars().count(), 200, "right-aligned: {wide}");
    for w in [160u16, 120] {
        let h = header(&mut st, w);
        assert!(h.chars().count() <= usize::from(w), "{h}");
        assert!(!h.contains('…'), "no piece is cut: {h}");
        let summary = h
            .split("host ")
            .nth(1)
            .unwrap_or_else(|| panic!("{w}: {h}"));
        assert!(
            summary.contains("mem 60.0GiB/256.0GiB"),
            "{w}: memory first: {h}"
        );
        // What is left out goes in rank order: load, then swap, then CPU.
        let kept = ["CPU", "swap", "load"].map(|p| summary.contains(p));
        assert!(kept[0] >= kept[1] && kept[1] >= kept[2], "{w}: {h}");
    }
    assert!(
        !header(&mut st, 80).contains("host "),
        "no room at 80 columns"
    );
}

/// Host memory nearly full is coloured as a GPU's memory bar would be (warning at 90 %,
/// critical at 97 %), and swap with it while it is in use; with plenty free neither is.
#[test]
fn nearly_full_host_memory_is_coloured() {
    use ratatui::style::Color;
    let colour_of = |h: gpuwatch::model::HostSummary, needle: &str| {
        let (mut st, last) = fed_with_host(h);
        st.update(Command::Resize(200, 40));
        let ctx = Context {
            now: NOW,
            mono: fresh(last),
            theme: Theme::new(true),
        };
        let mut term = Terminal::new(TestBackend::new(200, 40)).expect("terminal");
        term.draw(|f| render(f, &st, &ctx)).expect("draw");
        let buf = term.backend().buffer();
        let line: String = (0..200).map(|x| buf[(x, 0)].symbol().to_string()).collect();
        let at = line
            .find(needle)
            .unwrap_or_else(|| panic!("{needle} in {line}"));
        let x = u16::try_from(line[..at].chars().count()).expect("column");
        buf[(x, 0)].fg
    };
    assert_eq!(colour_of(host(60, 1), "mem "), Color::Reset);
    assert_eq!(colour_of(host(60, 1), "swap "), Color::Reset);
    assert_eq!(colour_of(host(235, 1), "mem "), Color::Yellow, "92 % used");
    assert_eq!(
        colour_of(host(235, 1), "swap "),
        Color::Yellow,
        "swapping under pressure"
    );
    assert_eq!(colour_of(host(250, 1), "mem "), Color::Red, "98 % used");
    assert_eq!(
        colour_of(host(235, 8), "swap "),
        Color::Red,
        "swap full too"
    );
}

/// In replay the header says where the screen is in the recording (its recorded time and how
/// far into it), not how long ago the sampler handed the sample over; paused, it keeps saying
/// so rather than an age measured against today.
#[test]
fn a_replay_shows_its_position_in_the_recording() {
    use gpuwatch::source::replay::{ReplayOptions, ReplaySource};
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/h200/leak-to-oom.recording.jsonl");
    let mut src = ReplaySource::open(
        &fixture,
        ReplayOptions {
            start_at: Some(30.0),
            ..ReplayOptions::default()
        },
    )
    .expect("the fixture");
    let info = Arc::new(src.info());
    let mut st = common::ui_state(Some("alice"), false);
    let probe = gpuwatch::source::CallProbe::default();
    let mut last = Instant::now();
    // 12 samples of 250 ms: the last one is 2.75 s after the 30 s mark.
    for i in 0..12u64 {
        last = Instant::now();
        st.on_frame(frame(&info, i + 1, src.sample(&probe), last));
    }
    let header = |st: &mut UiState| {
        screen(st, 160, 40, fresh(last))
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    };
    let h = header(&mut st);
    assert!(
        h.contains(" · replay · ") && h.contains("at 2026-11-29 18:45:30 UTC · 00:33 of 01:20"),
        "{h}"
    );
    assert!(!h.contains(" ago"), "{h}");
    st.update(Command::TogglePause);
    st.on_frame(frame(&info, 13, src.sample(&probe), last));
    let h = header(&mut st);
    assert!(h.contains("00:33 of 01:20 · PAUSED (p)"), "{h}");
    assert!(!h.contains(" ago"), "{h}");
}
