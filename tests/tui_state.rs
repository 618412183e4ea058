//! The dashboard's state machine without a terminal: navigation, sorting, pause, watching,
//! the mouse, and the kill dialog's stages. Scripted frames, so every step is deterministic.

mod common;

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuwatch::model::{Frame, SourceKind};
use gpuwatch::signal::Sig;
use gpuwatch::source::GpuSource;
use gpuwatch::source::scripted::{DEMO_START, ScriptedSource};
use gpuwatch::tui::state::{Command, Effect, KillStage, SortKey, UiState, View};

fn frame(src: &ScriptedSource, seq: u64, t: f64, kind: SourceKind) -> Arc<Frame> {
    let mut info = src.info();
    info.kind = kind;
    Arc::new(Frame {
        seq,
        source: Arc::new(info),
        sample: src.sample_at(t, 1_795_953_600.0 + t),
        published: Instant::now(),
        interval: Duration::from_secs(1),
        host: None,
    })
}

fn demo_state(kind: SourceKind) -> (UiState, ScriptedSource) {
    let src = ScriptedSource::demo().expect("demo");
    let mut st = common::ui_state(Some("alice"), false);
    st.update(Command::Resize(120, 40));
    st.on_frame(frame(&src, 1, DEMO_START, kind));
    (st, src)
}

fn pids(st: &UiState) -> Vec<u32> {
    let f = st.shown.as_ref().expect("frame");
    st.rows
        .iter()
        .filter(|r| r.is_process())
        .map(|r| f.sample.gpus[r.gpu].processes[r.proc].pid)
        .collect()
}

#[test]
fn sorting_cycles_reverses_and_keeps_the_selection() {
    let (mut st, _) = demo_state(SourceKind::Demo);
    assert_eq!(pids(&st)[0], 2350, "largest memory first");
    st.update(Command::Down);
    let chosen = st.selected_row().map(|(_, p)| p.pid);
    st.update(Command::SortBy(SortKey::Pid));
    assert_eq!(pids(&st), vec![2101, 2161, 2207, 2350, 3011, 4120, 91234]);
    assert_eq!(
        st.selected_row().map(|(_, p)| p.pid),
        chosen,
        "the cursor follows its process"
    );
    st.update(Command::SortReverse);
    assert_eq!(pids(&st)[0], 91234);
    st.update(Command::SortBy(SortKey::Pid));
    assert_eq!(pids(&st)[0], 2101, "the same key again flips the order");
    st.update(Command::SortNext);
    assert_eq!(st.sort, SortKey::User);
}

#[test]
fn s_cycles_through_every_column_left_to_right() {
    use SortKey as K;
    let (mut st, _) = demo_state(SourceKind::Demo);
    let mut seen = vec![st.sort];
    for _ in 0..13 {
        st.update(Command::SortNext);
        seen.push(st.sort);
    }
    assert_eq!(
        seen,
        [
            K::Memory,
            K::Sm,
            K::Growth,
            K::Peak,
            K::Cpu,
            K::Rss,
            K::Elapsed,
            K::Container,
            K::Command,
            K::Gpu,
            K::Pid,
            K::User,
            K::Type,
            K::Memory
        ]
    );
}

#[test]
fn each_gpus_unattributed_row_follows_its_last_process() {
    let (st, _) = demo_state(SourceKind::Demo);
    let f = st.shown.as_ref().expect("frame");
    let rows: Vec<String> = st
        .rows
        .iter()
        .map(|r| {
            if r.is_process() {
                let g = &f.sample.gpus[r.gpu];
                format!("{}:{}", g.index, g.processes[r.proc].pid)
            } else {
                format!("{}:unattributed", f.sample.gpus[r.gpu].index)
            }
        })
        .collect();
    // By memory: GPU 3's two processes; GPU 0's last one is the hidden 4 GiB holder, after
    // alice's exited 6 GiB run.
    assert_eq!(
        rows,
        [
            "3:2350",
            "1:2207",
            "3:4120",
            "3:unattributed",
            "0:2101",
            "2:3011",
            "0:2161",
            "0:91234",
            "0:unattributed"
        ]
    );
}

#[test]
fn navigation_stays_in_bounds_and_the_mouse_selects() {
    let (mut st, _) = demo_state(SourceKind::Demo);
    // Six processes and two GPUs' unattributed rows.
    st.update(Command::End);
    assert_eq!(st.selected, 8);
    st.update(Command::Down);
    assert_eq!(st.selected, 8);
    assert!(
        st.selected_row().is_none(),
        "an unattributed row is no process"
    );
    st.update(Command::Home);
    st.update(Command::Up);
    assert_eq!(st.selected, 0);
    st.update(Command::PageDown);
    assert_eq!(st.selected, 8);
    // A click on the third process row selects it.
    let body = st.layout().table_rows;
    st.update(Command::Click(body.x + 5, body.y + 2));
    assert_eq!(st.selected, 2);
    st.update(Command::ScrollUp);
    assert_eq!(st.selected, 0);
}

#[test]
fn pause_freezes_the_screen_while_frames_keep_coming() {
    let (mut st, src) = demo_state(SourceKind::Demo);
    st.update(Command::TogglePause);
    st.on_frame(frame(&src, 2, DEMO_START + 60.0, SourceKind::Demo));
    assert_eq!(st.shown.as_ref().map(|f| f.seq), Some(1), "screen frozen");
    assert_eq!(
        st.latest.as_ref().map(|f| f.seq),
        Some(2),
        "frames still arrive"
    );
    st.update(Command::TogglePause);
    assert_eq!(st.shown.as_ref().map(|f| f.seq), Some(2));
}

#[test]
fn watching_a_process_and_a_user() {
    let (mut st, _) = demo_state(SourceKind::Demo);
    st.update(Command::SortBy(SortKey::Pid));
    while st.selected_row().map(|(_, p)| p.pid) != Some(4120) {
        st.update(Command::Down);
    }
    let bob = st.selected_row().map(|(_, p)| p.clone()).expect("row");
    assert!(!st.is_watched(&bob));
    st.update(Command::ToggleWatchPid);
    assert!(st.is_watched(&bob));
    st.update(Command::ToggleWatchPid);
    assert!(!st.is_watched(&bob));
    st.update(Command::ToggleWatchUser);
    assert!(st.is_watched(&bob));
    assert!(
        st.message
            .as_deref()
            .unwrap_or("")
            .contains("user bob watched")
    );
}

#[test]
fn filter_gpu_choice_and_back() {
    let (mut st, _) = demo_state(SourceKind::Demo);
    st.update(Command::CycleGpu);
    assert_eq!(st.gpu_filter, Some(0));
    assert!(pids(&st).iter().all(|p| [2101, 2161, 91234].contains(p)));
    st.update(Command::Back);
    assert_eq!(st.gpu_filter, None);
    st.update(Command::FilterStart);
    for c in "CAROL".chars() {
        st.update(Command::FilterInput(c));
    }
    assert_eq!(pids(&st), vec![3011], "case-insensitive over the user");
    st.update(Command::FilterCancel);
    assert_eq!(pids(&st).len(), 7);
    // Ctrl-U erases what was typed and editing goes on.
    st.update(Command::FilterStart);
    for c in "carol".chars() {
        st.update(Command::FilterInput(c));
    }
    st.update(Command::FilterErase);
    assert!(st.filter.is_empty() && st.filter_editing);
    assert_eq!(pids(&st).len(), 7);
    st.update(Command::FilterInput('c'));
    assert_eq!(st.filter, "c");
}

#[test]
fn kill_asks_then_sends_term_then_kill() {
    let (mut st, _) = demo_state(SourceKind::Live);
    st.update(Command::SortBy(SortKey::Pid));
    st.update(Command::Home);
    assert_eq!(
        st.update(Command::Confirm),
        Effect::None,
        "nothing without a dialog"
    );
    st.update(Command::Kill);
    let k = st.kill.clone().expect("dialog");
    assert_eq!(k.pid, 2101);
    assert_eq!(k.stage, KillStage::Confirm);
    assert_eq!(
        st.update(Command::ConfirmKill),
        Effect::None,
        "no SIGKILL before SIGTERM"
    );
    let effect = st.update(Command::Confirm);
    assert_eq!(
        effect,
        Effect::Signal {
            pid: 2101,
            start_time: k.start_time.expect("the demo's rows have start times"),
            sig: Sig::Term
        }
    );
    st.signal_result(Sig::Term, Ok(()));
    assert!(matches!(
        st.update(Command::ConfirmKill),
        Effect::Signal { sig: Sig::Kill, .. }
    ));
    st.signal_result(
        Sig::Kill,
        Err("PID 2101 now belongs to another process".into()),
    );
    assert!(
        matches!(st.kill.as_ref().map(|k| &k.stage), Some(KillStage::Failed(m)) if m.contains("another process"))
    );
    st.update(Command::Back);
    assert!(st.kill.is_none());
}

/// The demo's exited process (alice's earlier run, whose memory the driver still holds) keeps
/// its user, command and mine mark; the kill dialog says there is nothing left to signal, and
/// neither `y` nor `9` yields a signal although its start time is known.
#[test]
fn an_exited_process_keeps_its_identity_and_is_never_signalled() {
    let (mut st, _) = demo_state(SourceKind::Live);
    while st.selected_row().map(|(_, p)| p.pid) != Some(2161) {
        st.update(Command::Down);
    }
    let (_, p) = st.selected_row().expect("row");
    assert!(p.host.exited && !p.host.visible, "{:?}", p.host);
    assert_eq!(p.host.user.as_deref(), Some("alice"));
    assert!(
        p.host
            .display_command()
            .starts_with("[exited] python train.py"),
        "{}",
        p.host.display_command()
    );
    assert!(p.host.start_time.is_some());
    let p = p.clone();
    assert!(st.is_watched(&p), "still mine");
    st.update(Command::Kill);
    let k = st.kill.clone().expect("dialog");
    assert_eq!(k.pid, 2161);
    assert!(
        matches!(&k.stage, KillStage::Failed(m) if m.starts_with("PID 2161 has exited: no process is left to signal")),
        "{:?}",
        k.stage
    );
    assert_eq!(st.update(Command::Confirm), Effect::None);
    assert_eq!(st.update(Command::ConfirmKill), Effect::None);
}

/// A row without a start time (the PID is not visible in this PID namespace) can't be tied to
/// a process: the dialog says why at once, and neither `y` nor `9` yields a signal.
#[test]
fn a_row_without_a_start_time_is_never_signalled() {
    let (mut st, src) = demo_state(SourceKind::Live);
    let mut f = (*frame(&src, 2, DEMO_START + 1.0, SourceKind::Live)).clone();
    for p in f
        .sample
        .gpus
        .iter_mut()
        .flat_map(|g| g.processes.iter_mut())
    {
        p.host.start_time = None;
    }
    st.on_frame(Arc::new(f));
    st.update(Command::SortBy(SortKey::Pid));
    st.update(Command::Home);
    st.update(Command::Kill);
    let k = st.kill.clone().expect("dialog");
    assert_eq!(k.pid, 2101);
    assert_eq!(
        k.stage,
        KillStage::Failed(
            "PID 2101 is not visible in this PID namespace: its identity can't be checked, so \
             gpuwatch will not signal it"
                .into()
        )
    );
    assert_eq!(st.update(Command::Confirm), Effect::None);
    assert_eq!(st.update(Command::ConfirmKill), Effect::None);
}

#[test]
fn views_open_and_close() {
    let (mut st, _) = demo_state(SourceKind::Demo);
    assert!(matches!(
        st.update(Command::OpenDetail),
        Effect::LoadDetail(2350)
    ));
    assert!(matches!(st.view, View::Detail(_)));
    st.update(Command::Back);
    assert_eq!(st.view, View::Table);
    st.update(Command::OpenChart);
    assert!(matches!(st.view, View::Chart { .. }));
    let span = st.chart_span;
    st.update(Command::ZoomOut);
    assert_eq!(st.chart_span, span + 1);
    st.update(Command::Back);
    assert_eq!(st.update(Command::Quit), Effect::Quit);
}

#[test]
fn findings_reach_the_state_and_a_critical_one_rings_the_bell() {
    let src = ScriptedSource::demo().expect("demo");
    let mut st = common::ui_state(Some("alice"), false);
    // A minute of the demo before its start: bob's job arrives on GPU 3 and fills it.
    for i in 0..60u32 {
        st.on_frame(frame(
            &src,
            u64::from(i) + 1,
            DEMO_START - 59.0 + f64::from(i),
            SourceKind::Demo,
        ));
    }
    let open: Vec<_> = st.analyzer.open().into_iter().map(|f| f.id.rule).collect();
    assert!(
        open.contains(&gpuwatch::detect::RuleKind::ExternalPressure),
        "{open:?}"
    );
    assert!(st.take_bell(), "a critical finding opened");
    assert!(!st.take_bell(), "the bell rings once");
    assert!(!st.take_events().is_empty(), "events wait for the sinks");
    assert!(
        st.take_events().is_empty(),
        "taken events do not accumulate"
    );
}

/// The clock tick redraws only what it can change: between fresh frames (which redraw the
/// screen themselves) nothing, so a 1 s dashboard draws once a second, not twice; a late,
/// stale or paused frame, a stuck call (and the tick after it returns) and the time-axis views
/// still get their tick.
#[test]
fn the_tick_redraws_only_what_the_clock_moves() {
    use gpuwatch::source::InFlight;
    use gpuwatch::tui::view::tick_changes_screen;
    let (mut st, src) = demo_state(SourceKind::Demo);
    let published = st.shown.as_ref().expect("frame").published;
    let fresh = published + Duration::from_millis(500);
    let late = published + Duration::from_millis(1500);
    assert!(!tick_changes_screen(&st, fresh, None), "fresh frame");
    assert!(tick_changes_screen(&st, late, None), "a late frame's age");
    // A call stuck for a second or more, and the tick after it returned.
    let stuck = InFlight {
        call: "memory_info",
        gpu: Some(0),
        since: published,
    };
    st.in_flight = Some(stuck.clone());
    assert!(tick_changes_screen(&st, late, None));
    st.in_flight = None;
    assert!(tick_changes_screen(
        &st,
        fresh + Duration::from_millis(600),
        Some(&stuck)
    ));
    assert!(
        !tick_changes_screen(&st, fresh, Some(&stuck)),
        "not stuck yet"
    );
    // Paused: the frame on screen ages even while fresh ones arrive.
    st.update(Command::TogglePause);
    let newer = frame(&src, 2, DEMO_START + 1.0, SourceKind::Demo);
    let newer_at = newer.published;
    st.on_frame(newer);
    assert!(tick_changes_screen(
        &st,
        newer_at.max(published + Duration::from_secs(1)),
        None
    ));
    st.update(Command::TogglePause);
    st.on_frame(frame(&src, 3, DEMO_START + 2.0, SourceKind::Demo));
    let now = st.shown.as_ref().expect("frame").published;
    assert!(!tick_changes_screen(&st, now, None), "resumed, fresh");
    // The chart's time axis follows the clock.
    st.update(Command::OpenChart);
    assert!(matches!(st.view, View::Chart { .. }), "{:?}", st.view);
    assert!(tick_changes_screen(&st, now, None));
}

#[test]
fn growth_is_measured_for_the_rows_on_screen_and_for_all_when_sorted_by_it() {
    // 40 flat processes of 2 GiB and, smallest of all, one that leaks: it sorts last by
    // memory, off a 20-line screen.
    let mut text = String::from("[[gpu]]\nmemory_total = \"141GiB\"\n");
    for i in 0..40 {
        let _ = writeln!(text, "[[gpu.process]]\npid = {}\nused = \"2GiB\"", 1000 + i);
    }
    text.push_str(
        "[[gpu.process]]\npid = 999\nused = { linear = [[0, \"100MiB\"], [120, \"1900MiB\"]] }\n",
    );
    let src = ScriptedSource::new(scenario::Scenario::parse(&text).expect("scenario"), "t");
    let mut st = common::ui_state(None, false);
    st.update(Command::Resize(120, 20));
    for i in 0..30u32 {
        st.on_frame(frame(
            &src,
            u64::from(i) + 1,
            f64::from(i),
            SourceKind::Demo,
        ));
    }
    let growth_of = |st: &UiState, pid: u32| {
        let (g, p) = st
            .shown
            .as_ref()
            .unwrap()
            .sample
            .gpus
            .iter()
            .flat_map(|g| g.processes.iter().map(move |p| (g, p)))
            .find(|(_, p)| p.pid == pid)
            .unwrap();
        st.derived_of(g, p).growth
    };
    assert_eq!(*pids(&st).last().unwrap(), 999);
    assert!(
        growth_of(&st, 1000).is_some(),
        "a row on screen is measured"
    );
    assert_eq!(
        growth_of(&st, 999),
        None,
        "a row off screen is not measured"
    );
    // Scrolling to it measures it at once, without waiting for a frame.
    st.update(Command::End);
    let leak = growth_of(&st, 999).expect("measured once on screen");
    assert!(leak > 10.0 * 1024.0 * 1024.0 / 60.0, "{leak}");
    // Sorted by growth, every row is measured and the leaker comes first.
    st.update(Command::Home);
    st.update(Command::SortBy(SortKey::Growth));
    assert_eq!(pids(&st)[0], 999);
    st.on_frame(frame(&src, 31, 30.0, SourceKind::Demo));
    assert_eq!(pids(&st)[0], 999, "and stays first on the next frame");
    // Paused, new frames still arrive: the rows on screen keep a growth.
    st.update(Command::SortBy(SortKey::Memory));
    st.update(Command::TogglePause);
    st.on_frame(frame(&src, 32, 31.0, SourceKind::Demo));
    assert!(growth_of(&st, 1000).is_some(), "measured while paused");
}

/// The host facts the dashboard keeps fresh every second are those of the rows on screen (and
/// the selected one): scrolling moves them, and sorting by CPU or RSS, which compares every
/// row's, asks for all.
#[test]
fn host_focus_follows_the_rows_on_screen_and_is_all_when_sorted_by_cpu_or_rss() {
    let mut text = String::from("[[gpu]]\nmemory_total = \"141GiB\"\n");
    for i in 0..40u32 {
        let _ = writeln!(
            text,
            "[[gpu.process]]\npid = {}\nused = \"{}MiB\"",
            1000 + i,
            4000 - i * 10
        );
    }
    let src = ScriptedSource::new(scenario::Scenario::parse(&text).expect("scenario"), "t");
    let mut st = common::ui_state(None, false);
    st.update(Command::Resize(120, 20));
    st.on_frame(frame(&src, 1, 0.0, SourceKind::Demo));
    let page = st.page_rows();
    assert!(page < 40, "the list is longer than the screen");
    let focus = st.host_focus().expect("a focus");
    let mut shown = pids(&st)[..page].to_vec();
    shown.sort_unstable();
    let mut got = focus.clone();
    got.sort_unstable();
    got.dedup();
    assert_eq!(got, shown, "the first page (the largest holders)");
    st.update(Command::End);
    let focus = st.host_focus().expect("a focus");
    assert!(focus.contains(&1039), "the last row, selected: {focus:?}");
    assert!(!focus.contains(&1000), "scrolled off: {focus:?}");
    for key in [SortKey::Cpu, SortKey::Rss] {
        st.update(Command::SortBy(key));
        assert_eq!(st.host_focus(), None, "{key:?}");
    }
    st.update(Command::SortBy(SortKey::Pid));
    assert!(st.host_focus().is_some());
}

#[test]
fn esc_closes_a_chart_opened_from_the_findings_panel_first_then_gives_the_keys_back() {
    use gpuwatch::tui::state::{Mode, View};
    let (mut st, _) = demo_state(SourceKind::Demo);
    st.update(Command::FocusFindings);
    assert_eq!(st.mode(), Mode::Findings);
    st.update(Command::OpenChart);
    assert_eq!(st.mode(), Mode::Chart);
    st.update(Command::Back);
    assert_eq!(st.view, View::Table, "Esc closes the chart on screen first");
    assert_eq!(st.mode(), Mode::Findings, "back where it was opened");
    st.update(Command::Back);
    assert_eq!(st.mode(), Mode::Table);
}
