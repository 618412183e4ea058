//! `gpuwatch tui --prometheus URL`: a cluster overview built from PromQL queries over the
//! daemons' `gpuwatch_*` series — one row per host and GPU, sortable, with drill-down into a
//! host whose daemon answers.
//!
//! Queries run on a worker thread (every [`REFRESH`], or at once on `r`); the UI thread only
//! draws and reads keys, so a slow Prometheus never blocks input.

pub mod query;
pub mod view;

use std::io::Stdout;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use tokio::sync::mpsc::UnboundedSender;

pub use query::{ClusterRow, PromClient, QueryResults, Series, SortKey, overview, rows, sort};

use crate::tui::terminal::{ScreenSignal, ScreenSignals, TerminalGuard};
use crate::tui::theme::Theme;

/// How often the overview queries Prometheus.
pub const REFRESH: Duration = Duration::from_secs(5);
/// How long the drill-down waits for a daemon's `/api/v1/health`.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(1500);

/// How the overview runs.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// The Prometheus server, e.g. `http://prom:9090`.
    pub prometheus: String,
    /// The daemons' bearer token (health probe and drill-down only; never sent to Prometheus).
    pub token: Option<String>,
    pub color: bool,
    /// A line to show at start (e.g. why the overview came back).
    pub message: Option<String>,
    /// Where memory turns yellow and red (the `[detect]` near-capacity lines).
    pub mem_levels: crate::detect::MemLevels,
}

/// How the overview ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterExit {
    Quit,
    /// The user chose a host whose daemon answers: its base URL (`http://host:port`).
    DrillDown(String),
}

/// What a key asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    None,
    Quit,
    Refresh,
    /// Probe this daemon, then drill down.
    Probe(String),
}

/// Everything the overview shows.
#[derive(Debug, Clone, Default)]
pub struct ClusterState {
    pub url: String,
    pub rows: Vec<ClusterRow>,
    pub sort: SortKey,
    pub reverse: bool,
    pub selected: usize,
    /// When the last successful refresh finished.
    pub last_refresh: Option<SystemTime>,
    /// Why the last refresh failed; the rows shown are then the previous ones (stale).
    pub error: Option<String>,
    pub refreshing: bool,
    pub message: Option<String>,
}

impl ClusterState {
    pub fn new(url: &str) -> Self {
        Self {
            url: url.to_string(),
            ..Self::default()
        }
    }

    pub fn stale(&self) -> bool {
        self.error.is_some() && self.last_refresh.is_some()
    }

    /// A refresh finished.
    pub fn on_result(&mut self, result: Result<Vec<ClusterRow>, String>, at: SystemTime) {
        self.refreshing = false;
        match result {
            Ok(rows) => {
                let keep = self.rows.get(self.selected).map(row_key);
                self.rows = rows;
                self.error = None;
                self.last_refresh = Some(at);
                self.resort();
                if let Some(k) = keep
                    && let Some(i) = self.rows.iter().position(|r| row_key(r) == k)
                {
                    self.selected = i;
                }
            }
            Err(e) => self.error = Some(e),
        }
        self.selected = self.selected.min(self.rows.len().saturating_sub(1));
    }

    fn resort(&mut self) {
        sort(&mut self.rows, self.sort, self.reverse);
    }

    /// (hosts, GPUs) shown.
    pub fn counts(&self) -> (usize, usize) {
        let hosts: std::collections::BTreeSet<&str> =
            self.rows.iter().map(|r| r.instance.as_str()).collect();
        let gpus = self.rows.iter().filter(|r| !r.uuid.is_empty()).count();
        (hosts.len(), gpus)
    }

    /// A key press.
    pub fn key(&mut self, k: KeyEvent) -> Action {
        if k.kind == KeyEventKind::Release {
            return Action::None;
        }
        let ctrl = k.modifiers.contains(KeyModifiers::CONTROL);
        // A message (drill-down outcome) lasts until the next key.
        self.message = None;
        match k.code {
            KeyCode::Char('c') if ctrl => Action::Quit,
            KeyCode::Char('q') | KeyCode::Esc => Action::Quit,
            KeyCode::Char('r') => {
                self.refreshing = true;
                Action::Refresh
            }
            KeyCode::Char('s') => {
                let keep = self.rows.get(self.selected).map(row_key);
                self.sort = self.sort.next();
                self.resort();
                self.reselect(keep);
                Action::None
            }
            KeyCode::Char('S') => {
                let keep = self.rows.get(self.selected).map(row_key);
                self.reverse = !self.reverse;
                self.resort();
                self.reselect(keep);
                Action::None
            }
            KeyCode::Down | KeyCode::Char('j') => {
                self.selected = (self.selected + 1).min(self.rows.len().saturating_sub(1));
                Action::None
            }
            KeyCode::Up | KeyCode::Char('k') => {
                self.selected = self.selected.saturating_sub(1);
                Action::None
            }
            KeyCode::Home | KeyCode::Char('g') => {
                self.selected = 0;
                Action::None
            }
            KeyCode::End | KeyCode::Char('G') => {
                self.selected = self.rows.len().saturating_sub(1);
                Action::None
            }
            KeyCode::Enter => match self.rows.get(self.selected) {
                Some(r) => {
                    let url = format!("http://{}", r.instance);
                    self.message = Some(format!("probing the daemon at {url} …"));
                    Action::Probe(url)
                }
                None => Action::None,
            },
            _ => Action::None,
        }
    }

    fn reselect(&mut self, keep: Option<(String, String)>) {
        if let Some(k) = keep
            && let Some(i) = self.rows.iter().position(|r| row_key(r) == k)
        {
            self.selected = i;
        }
    }
}

fn row_key(r: &ClusterRow) -> (String, String) {
    (r.instance.clone(), r.uuid.clone())
}

/// The overview once, as a plain table (for a pipe or a file).
pub fn plain_table(rows: &[ClusterRow]) -> String {
    use crate::output::fmt_bytes;
    use std::fmt::Write as _;
    let header = [
        "HOST",
        "INSTANCE",
        "GPU",
        "NAME",
        "USED",
        "TOTAL",
        "USE%",
        "UTIL",
        "TOP PROCESS",
        "EXTERNAL",
        "FULL IN",
        "ALERTS",
    ];
    let na = || "-".to_string();
    let mut lines: Vec<Vec<String>> = vec![header.iter().map(|s| (*s).to_string()).collect()];
    for r in rows {
        lines.push(vec![
            r.host.clone(),
            r.instance.clone(),
            if r.up {
                if r.gpu.is_empty() {
                    na()
                } else {
                    r.gpu.clone()
                }
            } else {
                "down".to_string()
            },
            if r.name.is_empty() {
                na()
            } else {
                r.name.clone()
            },
            r.mem_used.map_or_else(na, fmt_bytes),
            r.mem_total.map_or_else(na, fmt_bytes),
            r.used_percent().map_or_else(na, |p| format!("{p:.0}%")),
            r.util.map_or_else(na, |u| format!("{u:.0}%")),
            r.top_process
                .as_ref()
                .map_or_else(na, |(who, b)| format!("{who} {}", fmt_bytes(*b))),
            r.external.map_or_else(na, fmt_bytes),
            view::fmt_ttf(r.time_to_full),
            if r.alerts.is_empty() {
                na()
            } else {
                r.alerts.join(",")
            },
        ]);
    }
    // Labels come from Prometheus (any exporter's host, GPU and process names).
    for cell in lines.iter_mut().flatten() {
        if let std::borrow::Cow::Owned(escaped) = crate::text::clean(cell) {
            *cell = escaped;
        }
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            lines
                .iter()
                .map(|l| l[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for l in &lines {
        let mut line = String::new();
        for (c, cell) in l.iter().enumerate() {
            if c + 1 == l.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}  ", w = widths[c]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

enum Msg {
    Input(Event),
    Overview(Result<Vec<ClusterRow>, String>, SystemTime),
    Probe(String, Result<(), String>),
}

/// Reads terminal events; polls so that it ends when the overview does (a drill-down reads
/// keys next).
fn spawn_input(tx: UnboundedSender<Msg>, stop: Arc<AtomicBool>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("gpuwatch-cluster-input".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match crossterm::event::poll(Duration::from_millis(100)) {
                    Ok(true) => match crossterm::event::read() {
                        Ok(ev) => {
                            if tx.send(Msg::Input(ev)).is_err() {
                                break;
                            }
                        }
                        Err(_) => break,
                    },
                    Ok(false) => {}
                    Err(_) => break,
                }
            }
        })?;
    Ok(())
}

/// Queries Prometheus every [`REFRESH`], or at once when the returned sender asks.
fn spawn_queries(
    url: &str,
    tx: UnboundedSender<Msg>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::sync::mpsc::Sender<()>> {
    let (refresh_tx, refresh_rx) = std::sync::mpsc::channel::<()>();
    let client = PromClient::new(url, None);
    std::thread::Builder::new()
        .name("gpuwatch-cluster-query".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let result = overview(&client);
                if tx.send(Msg::Overview(result, SystemTime::now())).is_err() {
                    break;
                }
                match refresh_rx.recv_timeout(REFRESH) {
                    Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        // Requests that piled up while querying count once.
                        while refresh_rx.try_recv().is_ok() {}
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
        })?;
    Ok(refresh_tx)
}

/// Runs the overview on the terminal until the user quits or drills down. The terminal is
/// restored on every way out.
#[allow(clippy::needless_pass_by_value)] // owned: the caller loops over drill-downs
pub fn run(options: ClusterOptions) -> std::io::Result<ClusterExit> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let stop = Arc::new(AtomicBool::new(false));
    let result = rt.block_on(run_loop(&options, &stop));
    // The helper threads see the flag within their poll period and end.
    stop.store(true, Ordering::Relaxed);
    result
}

async fn run_loop(
    options: &ClusterOptions,
    stop: &Arc<AtomicBool>,
) -> std::io::Result<ClusterExit> {
    let mut signals = ScreenSignals::new()?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Msg>();

    spawn_input(tx.clone(), Arc::clone(stop))?;
    let refresh_tx = spawn_queries(&options.prometheus, tx.clone(), Arc::clone(stop))?;

    let guard = TerminalGuard::enter()?;
    let mut term: Terminal<CrosstermBackend<Stdout>> =
        Terminal::new(CrosstermBackend::new(std::io::stdout()))?;
    // Not `term.clear()`, which asks for the cursor position (see `repaint`).
    crate::tui::terminal::repaint(&mut term)?;
    let theme = Theme::new(options.color).with_mem_levels(options.mem_levels);
    let mut state = ClusterState::new(&options.prometheus);
    state.message.clone_from(&options.message);
    state.refreshing = true;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut probing = false;
    let exit = loop {
        term.draw(|f| view::render(f, &state, theme))?;
        let msg = tokio::select! {
            m = rx.recv() => m,
            sig = signals.recv() => match sig? {
                ScreenSignal::Quit => break ClusterExit::Quit,
                ScreenSignal::Resumed => {
                    crate::tui::terminal::repaint(&mut term)?;
                    continue;
                }
            },
            _ = tick.tick() => continue,
        };
        let Some(msg) = msg else {
            break ClusterExit::Quit;
        };
        match msg {
            Msg::Input(Event::Key(k)) => match state.key(k) {
                Action::Quit => break ClusterExit::Quit,
                Action::Refresh => {
                    let _ = refresh_tx.send(());
                }
                Action::Probe(url) if !probing => {
                    probing = true;
                    let probe_tx = tx.clone();
                    let token = options.token.clone();
                    std::thread::spawn(move || {
                        let r = query::probe_daemon(&url, token.as_deref(), PROBE_TIMEOUT);
                        let _ = probe_tx.send(Msg::Probe(url, r));
                    });
                }
                Action::None | Action::Probe(_) => {}
            },
            Msg::Input(_) => {}
            Msg::Overview(result, at) => state.on_result(result, at),
            Msg::Probe(url, result) => {
                probing = false;
                match result {
                    Ok(()) => break ClusterExit::DrillDown(url),
                    Err(e) => state.message = Some(format!("daemon at {url} not reachable: {e}")),
                }
            }
        }
    };
    drop(term);
    drop(guard);
    Ok(exit)
}
