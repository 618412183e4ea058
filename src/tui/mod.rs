//! The dashboard (`gpuwatch`, `gpuwatch tui`): a ratatui front end over the sampler's frames.
//!
//! The loop is one `tokio::select!` over input, frames, signals and a slow clock tick, then one
//! draw — only when something changed. Input is read on its own thread, frames come from the
//! sampler's threads, so the UI answers keys even while an NVML call hangs.

pub mod keymap;
pub mod layout;
pub mod scope;
pub mod shown;
pub mod state;
pub mod terminal;
pub mod theme;
pub mod tree;
pub mod view;

use std::io::Stdout;
use std::time::{Duration, Instant, SystemTime};

use crossterm::event::{Event, KeyEventKind, MouseButton, MouseEventKind};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;

use crate::alert::Alerts;
use crate::sampler::{FrameRx, Sampler};
use crate::signal::Sig;
use crate::source::procdetail;
use crate::watch::WatchSet;
use state::{Command, Effect, UiState};
use theme::Theme;
use view::Context;

/// How the dashboard runs.
#[derive(Debug, Clone)]
pub struct TuiOptions {
    pub color: bool,
    pub read_only: bool,
    pub history_window: Duration,
    /// The detector's thresholds (the configuration's `[detect]`).
    pub rules: crate::detect::Rules,
    /// Where findings go besides the screen (the configuration's `[alerts]`). The `log` sink
    /// writes to the log file (`--log-file`), never to the terminal the dashboard draws on.
    pub alerts: crate::alert::AlertOptions,
    /// Where memory turns yellow and red (the `[detect]` near-capacity lines).
    pub mem_levels: crate::detect::MemLevels,
    /// What the screen is limited to (`tui --gpu`, `--only-visible`, `--user`); the alert
    /// sinks still get every finding.
    pub scope: scope::ViewScope,
}

/// Maps a terminal event to a command.
pub fn command_for(event: &Event, state: &UiState) -> Option<Command> {
    match event {
        Event::Key(k) if k.kind != KeyEventKind::Release => keymap::lookup(*k, state.mode()),
        Event::Mouse(m) => match m.kind {
            MouseEventKind::Down(MouseButton::Left) => Some(Command::Click(m.column, m.row)),
            MouseEventKind::ScrollUp => Some(Command::ScrollUp),
            MouseEventKind::ScrollDown => Some(Command::ScrollDown),
            _ => None,
        },
        Event::Resize(w, h) => Some(Command::Resize(*w, *h)),
        _ => None,
    }
}

/// Carries out an effect; what it yields goes back into the state. Only a live source's PIDs
/// are this host's processes: for a demo or a replay, detail and tree come from the frame.
pub fn perform(state: &mut UiState, effect: Effect) {
    let live = state.is_live();
    match effect {
        Effect::None | Effect::Quit => {}
        Effect::LoadDetail(pid) if live => state.detail_loaded(procdetail::read_detail(pid)),
        Effect::LoadDetail(pid) => {
            let detail = simulated_detail(state, pid);
            state.detail_loaded(detail);
        }
        Effect::LoadTree(pids) if live => state.tree_loaded(procdetail::process_forest(&pids)),
        Effect::LoadTree(pids) => {
            let rows = simulated_tree(state, &pids);
            state.tree_loaded(rows);
        }
        Effect::Signal {
            pid,
            start_time,
            sig,
        } => {
            let result = crate::signal::send(pid, start_time, sig).map_err(|e| e.to_string());
            match &result {
                Ok(()) => tracing::info!(pid, signal = sig.name(), "signal sent"),
                Err(e) => tracing::warn!(pid, signal = sig.name(), error = %e, "signal not sent"),
            }
            let sent = result.is_ok();
            state.signal_result(sig, result);
            if sig == Sig::Kill && sent {
                state.message = Some(format!("SIGKILL sent to PID {pid}"));
            }
        }
    }
}

/// The detail of a process that is not on this host (demo, replay): what the frame knows.
fn simulated_detail(state: &UiState, pid: u32) -> procdetail::ProcDetail {
    let host = state.latest.as_ref().and_then(|f| {
        f.sample
            .gpus
            .iter()
            .flat_map(|g| &g.processes)
            .find(|p| p.pid == pid)
            .map(|p| p.host.clone())
    });
    procdetail::ProcDetail {
        pid,
        command: host.and_then(|h| h.command),
        env_note: Some(format!(
            "not read: PID {pid} belongs to a {} source, not to this host",
            state
                .latest
                .as_ref()
                .map_or_else(|| "simulated".to_string(), |f| f.source.kind.to_string())
        )),
        ..procdetail::ProcDetail::default()
    }
}

/// The tree of a demo or replay, from the parents the frame knows.
fn simulated_tree(state: &UiState, pids: &[u32]) -> Vec<procdetail::TreeRow> {
    let mut entries: Vec<procdetail::ProcEntry> = Vec::new();
    if let Some(f) = state.latest.as_ref() {
        for p in f.sample.gpus.iter().flat_map(|g| &g.processes) {
            if entries.iter().any(|e| e.pid == p.pid) {
                continue;
            }
            entries.push(procdetail::ProcEntry {
                pid: p.pid,
                ppid: p.host.ppid,
                name: p.host.name.clone().unwrap_or_default(),
            });
            if let Some(pp) = p.host.ppid
                && !entries.iter().any(|e| e.pid == pp)
            {
                entries.push(procdetail::ProcEntry {
                    pid: pp,
                    ppid: None,
                    name: "(parent)".to_string(),
                });
            }
        }
    }
    procdetail::forest_from(&entries, pids)
}

/// Logs each kind of source error once (and when it clears), not on every frame.
fn log_errors(frame: &crate::model::Frame, logged: &mut std::collections::BTreeSet<String>) {
    let mut now = std::collections::BTreeSet::new();
    for e in &frame.sample.errors {
        now.insert(format!("{}: {}", e.call, e.error));
    }
    for g in &frame.sample.gpus {
        for e in &g.errors {
            now.insert(format!("GPU {} {}: {}", g.index, e.call, e.error));
        }
    }
    for new in now.difference(logged) {
        tracing::warn!(error = %crate::text::clean(new), "source error");
    }
    for gone in logged.difference(&now) {
        tracing::info!(error = %crate::text::clean(gone), "source error cleared");
    }
    *logged = now;
}

fn context(theme: Theme) -> Context {
    Context {
        now: SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
        mono: Instant::now(),
        theme,
    }
}

/// Runs the dashboard until the user quits or a terminating signal arrives. The terminal is
/// restored on every way out, panics included.
pub fn run(sampler: &Sampler, watch: WatchSet, options: &TuiOptions) -> std::io::Result<()> {
    let in_flight = || sampler.in_flight();
    let focus = |pids| sampler.focus_host(pids);
    run_feed(
        Feed {
            frames: sampler.frames(),
            in_flight: &in_flight,
            focus: &focus,
            link: None,
            past: (sampler.take_past(), Some(sampler.info())),
        },
        watch,
        options,
    )
}

/// Where the dashboard's frames come from: the local sampler, or a remote daemon's stream
/// (with the state of the link to it).
pub struct Feed<'a> {
    pub frames: FrameRx,
    /// The call a local sampler is stuck in.
    pub in_flight: &'a dyn Fn() -> Option<crate::source::InFlight>,
    /// Tells a local sampler's host thread which PIDs are on screen
    /// ([`crate::sampler::Sampler::focus_host`]); a no-op for a remote feed.
    pub focus: &'a dyn Fn(Option<Vec<u32>>),
    /// The remote daemon's URL and the link's state.
    pub link: Option<(String, tokio::sync::watch::Receiver<crate::remote::Link>)>,
    /// The source's past and who it is ([`crate::sampler::Sampler::take_past`]): run through
    /// the analysis before the first frame. Empty for a live GPU and a remote feed.
    pub past: (
        Vec<crate::model::Sample>,
        Option<std::sync::Arc<crate::model::SourceInfo>>,
    ),
}

/// Runs the dashboard on any feed (see [`run`]).
pub fn run_feed(feed: Feed<'_>, watch: WatchSet, options: &TuiOptions) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(run_loop(feed, watch, options))
}

async fn run_loop(feed: Feed<'_>, watch: WatchSet, options: &TuiOptions) -> std::io::Result<()> {
    // The sinks first: one that cannot start (a file that cannot be opened) is said on the
    // shell's screen, before the dashboard takes it.
    let alerts = Alerts::start(&dashboard_sinks(&options.alerts)).map_err(std::io::Error::other)?;
    let mut signals = terminal::ScreenSignals::new()?;
    let guard = terminal::TerminalGuard::enter()?;
    let mut term: Terminal<CrosstermBackend<Stdout>> =
        Terminal::new(CrosstermBackend::new(std::io::stdout()))?;
    // Not `term.clear()`: it asks the terminal where the cursor is (ESC[6n), and a terminal
    // that never answers ended the dashboard with "The cursor position could not be read".
    terminal::repaint(&mut term)?;
    let theme = Theme::new(options.color).with_mem_levels(options.mem_levels);
    let mut state = new_state(watch, options, feed.link.is_some(), feed.past);
    let size = term.size()?;
    state.size = (size.width, size.height);
    let mut input = spawn_input()?;

    let mut frames = feed.frames.clone();
    let (url, mut link) = match feed.link {
        Some((url, rx)) => (url, Some(rx)),
        None => (String::new(), None),
    };
    if let Some(rx) = link.as_mut() {
        state.link = Some((url.clone(), rx.borrow_and_update().clone()));
    }
    if let Some(f) = frames.borrow_and_update().clone() {
        state.on_frame(f);
    }
    let mut source_open = true;
    let mut logged = std::collections::BTreeSet::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut dirty = true;
    let mut focused: Option<Option<Vec<u32>>> = None;
    loop {
        if dirty {
            let ctx = context(theme);
            term.draw(|f| view::render(f, &state, &ctx))?;
            dirty = false;
            let focus = state.host_focus();
            if focused.as_ref() != Some(&focus) {
                (feed.focus)(focus.clone());
                focused = Some(focus);
            }
        }
        let effect = tokio::select! {
            biased;
            ev = input.recv() => match ev {
                Some(ev) => {
                    dirty = true;
                    command_for(&ev, &state).map_or(Effect::None, |c| state.update(c))
                }
                None => Effect::Quit,
            },
            sig = signals.recv() => match sig? {
                terminal::ScreenSignal::Quit => Effect::Quit,
                terminal::ScreenSignal::Resumed => {
                    // Back from a stop: the screen is the shell's, draw all of it again.
                    terminal::repaint(&mut term)?;
                    let size = term.size()?;
                    state.size = (size.width, size.height);
                    dirty = true;
                    Effect::None
                }
            },
            changed = frames.changed(), if source_open => {
                dirty = true;
                if changed.is_ok() {
                    let frame = frames.borrow_and_update().clone();
                    if let Some(f) = &frame {
                        log_errors(f, &mut logged);
                    }
                    frame.map_or(Effect::None, |f| state.on_frame(f))
                } else {
                    source_open = false;
                    state.message = Some("the source ended (end of the recording)".to_string());
                    Effect::None
                }
            },
            changed = async { link.as_mut()?.changed().await.ok() }, if link.is_some() => {
                dirty = true;
                match (changed, link.as_mut()) {
                    (Some(()), Some(rx)) => {
                        state.link = Some((url.clone(), rx.borrow_and_update().clone()));
                    }
                    _ => link = None,
                }
                Effect::None
            },
            _ = tick.tick() => {
                // The clock tick: sample ages, staleness, the call a hung sampler is in. Not
                // redrawn when nothing it shows moved (fresh frames redraw themselves).
                let previous = std::mem::replace(&mut state.in_flight, (feed.in_flight)());
                dirty |= view::tick_changes_screen(&state, Instant::now(), previous.as_ref());
                Effect::None
            },
        };
        deliver(&mut state, &alerts, term.backend_mut())?;
        if effect == Effect::Quit {
            break;
        }
        perform(&mut state, effect);
    }
    drop(term);
    drop(guard);
    stop_sinks(alerts);
    Ok(())
}

/// Lets the sinks deliver what is queued (2 s at most); logs what one dropped or failed.
fn stop_sinks(alerts: Alerts) {
    for s in alerts.shutdown(Duration::from_secs(2)) {
        if s.dropped > 0 || s.failed > 0 {
            tracing::warn!(
                sink = s.name,
                delivered = s.delivered,
                failed = s.failed,
                dropped = s.dropped,
                "alert sink"
            );
        }
    }
}

/// The dashboard's state over its own analysis stage (the configuration's `[detect]`; the
/// frames of a remote daemon are another host's).
/// With the source's past run through it first ([`Feed::past`]).
fn new_state(
    watch: WatchSet,
    options: &TuiOptions,
    remote: bool,
    past: (
        Vec<crate::model::Sample>,
        Option<std::sync::Arc<crate::model::SourceInfo>>,
    ),
) -> UiState {
    let mut analyzer = crate::analysis::Analyzer::new(
        options.rules.clone(),
        options.history_window,
        crate::analysis::Detail::Full,
        watch,
    );
    if remote {
        analyzer = analyzer.remote();
    }
    if let (past, Some(source)) = past {
        analyzer.prime(past, &source);
    }
    let mut state = UiState::new(analyzer, options.read_only);
    state.scope = options.scope.clone();
    state
}

/// The input thread: terminal events, read blocking, into a bounded channel.
fn spawn_input() -> std::io::Result<tokio::sync::mpsc::Receiver<Event>> {
    let (tx, input) = tokio::sync::mpsc::channel::<Event>(256);
    std::thread::Builder::new()
        .name("gpuwatch-input".into())
        .spawn(move || {
            while let Ok(ev) = crossterm::event::read() {
                if tx.blocking_send(ev).is_err() {
                    break;
                }
            }
        })?;
    Ok(input)
}

/// The sinks the dashboard runs: the configured ones, except that the `log` sink's lines go to
/// the log file (through [`deliver`]), never to the terminal the dashboard draws on.
fn dashboard_sinks(configured: &crate::alert::AlertOptions) -> crate::alert::AlertOptions {
    crate::alert::AlertOptions {
        log: false,
        ..configured.clone()
    }
}

/// Hands the findings of the latest frames to the sinks (each behind its own bounded queue:
/// this never waits on one), logs them (`--log-file`), and rings the bell once for a critical
/// finding that opened.
fn deliver(
    state: &mut UiState,
    alerts: &Alerts,
    out: &mut impl std::io::Write,
) -> std::io::Result<()> {
    for event in state.take_events() {
        let line = crate::text::clean(&crate::alert::event_line(&event)).into_owned();
        if event.finding().severity == crate::detect::Severity::Critical {
            tracing::warn!("{line}");
        } else {
            tracing::info!("{line}");
        }
        alerts.send(&event);
    }
    if state.take_bell() {
        out.write_all(b"\x07")?;
        out.flush()?;
    }
    Ok(())
}
