//! The dashboard's state and its only writer, [`UiState::update`].
//!
//! Input and frames become [`Command`]s; `update` changes the state and returns an [`Effect`]
//! for the loop to carry out (I/O: sending a signal, reading `/proc` for the detail or tree
//! view), whose result comes back as another command. Rendering reads the state and never
//! changes it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::analysis::{Analysis, Analyzer};
use crate::detect::FindingEvent;
use crate::history::{History, ProcKey};
use crate::model::{Frame, GpuSample, ProcSample};
use crate::signal::Sig;
use crate::source::InFlight;
use crate::source::procdetail::{ProcDetail, TreeRow};

/// Columns the table can be sorted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    Gpu,
    Pid,
    User,
    Type,
    Memory,
    Sm,
    Growth,
    Peak,
    Cpu,
    Rss,
    Elapsed,
    Container,
    Command,
}

impl SortKey {
    /// The order `s` cycles through them: the table's columns, left to right.
    pub const CYCLE: [SortKey; 13] = [
        SortKey::Gpu,
        SortKey::Pid,
        SortKey::User,
        SortKey::Type,
        SortKey::Memory,
        SortKey::Sm,
        SortKey::Growth,
        SortKey::Peak,
        SortKey::Cpu,
        SortKey::Rss,
        SortKey::Elapsed,
        SortKey::Container,
        SortKey::Command,
    ];

    /// Numbers sort largest first by default; names A→Z.
    pub fn descending_by_default(self) -> bool {
        !matches!(
            self,
            SortKey::Pid
                | SortKey::User
                | SortKey::Gpu
                | SortKey::Type
                | SortKey::Container
                | SortKey::Command
        )
    }
}

/// Which bindings are live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Table,
    Filter,
    Detail,
    Chart,
    Dialog,
    /// The findings panel has the keys (`f`), or the findings view is open (`F`).
    Findings,
    /// The tree view: the table's keys, and collapsing.
    Tree,
    /// The help overlay is open: its scroll keys.
    Help,
}

/// Everything input, frames and effect results can ask of the state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Command {
    Quit,
    ToggleHelp,
    Back,
    Up,
    Down,
    PageUp,
    PageDown,
    Home,
    End,
    SortNext,
    SortReverse,
    SortBy(SortKey),
    FilterStart,
    FilterInput(char),
    FilterBackspace,
    /// Erase the filter's text and keep typing (Ctrl-U).
    FilterErase,
    FilterAccept,
    FilterCancel,
    CycleGpu,
    OpenDetail,
    ToggleTree,
    /// The tree view: hide the selected node's subtree (on a leaf, its parent's).
    TreeCollapse,
    /// The tree view: show the selected node's subtree again.
    TreeExpand,
    OpenChart,
    /// Scroll the table sideways (`←`/`→`).
    ScrollLeft,
    ScrollRight,
    /// Move the keys into the findings panel, or back to the table (`f`).
    FocusFindings,
    /// The findings view: every finding with its history (`F`).
    OpenFindings,
    /// Go to the GPU or process of the finding under the cursor (`Enter` on a finding).
    GoToFinding,
    ToggleWatchPid,
    ToggleWatchUser,
    Kill,
    Confirm,
    ConfirmKill,
    TogglePause,
    ZoomIn,
    ZoomOut,
    ScrollUp,
    ScrollDown,
    /// A mouse click at (column, row) of the terminal.
    Click(u16, u16),
    Resize(u16, u16),
}

/// Work for the loop: I/O the pure state cannot do.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    None,
    Quit,
    /// Signal `pid` if it is still the process that started at `start_time` (a row without a
    /// start time is never signalled: there is nothing to check the PID against).
    Signal {
        pid: u32,
        start_time: u64,
        sig: Sig,
    },
    LoadDetail(u32),
    LoadTree(Vec<u32>),
}

/// The main view's body.
#[derive(Debug, Clone, PartialEq)]
pub enum View {
    Table,
    Tree,
    Detail(ProcKey),
    Chart {
        gpu: String,
    },
    /// Every finding of this session (and the primed past), open and resolved.
    Findings,
}

/// The kill confirmation.
#[derive(Debug, Clone, PartialEq)]
pub struct KillPrompt {
    pub pid: u32,
    /// The start time shown; `None` (the PID is not visible here) means no signal can be sent.
    pub start_time: Option<u64>,
    /// How the process was shown: "bob: python eval.py … (62.0GiB on GPU 3)".
    pub label: String,
    pub stage: KillStage,
}

#[derive(Debug, Clone, PartialEq)]
pub enum KillStage {
    Confirm,
    /// SIGTERM went out; SIGKILL can follow.
    TermSent,
    Done(String),
    Failed(String),
}

/// Growth and peak of a process, derived when a frame arrives (not while rendering).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Derived {
    /// The detector's growth of the process ([`crate::history::process_growth`]), bytes per
    /// second; measured for the rows on screen (all of them when the table is sorted by it).
    pub growth: Option<f64>,
    /// Largest memory seen since the process appeared.
    pub peak: Option<u64>,
    /// Whether `growth` was measured for this frame.
    measured: bool,
}

/// One row of the process table: indices into the shown frame, or a GPU's unattributed
/// memory ([`RowRef::UNATTRIBUTED`]), or the small amounts of several GPUs folded into one
/// row ([`RowRef::FOLDED`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowRef {
    pub gpu: usize,
    pub proc: usize,
}

impl RowRef {
    /// `proc` of the row of a GPU's memory that no visible process accounts for.
    pub const UNATTRIBUTED: usize = usize::MAX;
    /// `proc` (and `gpu`) of the row that folds several GPUs' small unattributed amounts.
    pub const FOLDED: usize = usize::MAX - 1;

    /// Whether the row is a process's.
    pub fn is_process(self) -> bool {
        self.proc < Self::FOLDED
    }
}

/// One `←`/`→` scrolls the table this many characters sideways…
pub const HSCROLL_STEP: usize = 8;
/// …up to this far (a command line longer than this shows its start only).
pub const HSCROLL_MAX: usize = 4096;

/// Chart spans `+`/`-` step through.
pub const CHART_SPANS: [Duration; 6] = [
    Duration::from_secs(30),
    Duration::from_mins(1),
    Duration::from_mins(2),
    Duration::from_mins(5),
    Duration::from_mins(10),
    Duration::from_hours(1),
];

/// The whole UI state. (Its flags are independent switches of the screen, hence several bools.)
#[allow(clippy::struct_excessive_bools)]
pub struct UiState {
    /// Latest frame received.
    pub latest: Option<Arc<Frame>>,
    /// Frame on screen (the latest unless paused).
    pub shown: Option<Arc<Frame>>,
    pub paused: bool,
    /// History, detector and watched set: the pipeline's analysis stage, fed every frame
    /// (paused or not).
    pub analyzer: Analyzer,
    /// The analysis of the frame on screen.
    pub analysis: Option<Analysis>,
    pub derived: HashMap<ProcKey, Derived>,
    pub view: View,
    pub help: bool,
    /// The help overlay's first line shown.
    pub help_scroll: usize,
    pub sort: SortKey,
    pub descending: bool,
    pub filter: String,
    pub filter_editing: bool,
    /// Show one GPU (NVML index) or all.
    pub gpu_filter: Option<u32>,
    /// What the command line limited the screen to (`tui --gpu`, `--only-visible`, `--user`).
    pub scope: super::scope::ViewScope,
    /// Rows of the table, sorted and filtered.
    pub rows: Vec<RowRef>,
    /// Index into `rows`.
    pub selected: usize,
    /// Identity of the selected row, so it survives new frames and re-sorting.
    pub selected_key: Option<(String, u32)>,
    /// First visible row.
    pub offset: usize,
    pub read_only: bool,
    pub kill: Option<KillPrompt>,
    pub detail: Option<ProcDetail>,
    /// The tree view's rows, collapsed subtrees and cursor.
    pub tree: super::tree::Tree,
    /// How far the table is scrolled sideways (characters; `←`/`→`).
    pub hscroll: usize,
    /// The findings panel has the keys: the cursor moves over its lines.
    pub findings_focus: bool,
    /// The cursor in the findings panel…
    pub findings_cursor: usize,
    /// …and in the findings view.
    pub log_cursor: usize,
    tree_read_at: Option<Instant>,
    pub chart_span: usize,
    pub message: Option<String>,
    /// Terminal size, for paging and mouse hits.
    pub size: (u16, u16),
    /// The call the sampler is stuck in, refreshed on each tick.
    pub in_flight: Option<InFlight>,
    /// Finding events of the latest frame, not yet handed to the alert sinks: the loop takes
    /// them ([`UiState::take_events`]) after every frame.
    pending_events: Vec<FindingEvent>,
    /// A critical finding opened: the loop rings the terminal bell once ([`UiState::take_bell`]).
    bell: bool,
    pub quit: bool,
    /// With `--connect`: the daemon's URL and the state of the link to it.
    pub link: Option<(String, crate::remote::Link)>,
}

impl UiState {
    /// The state of a dashboard over `analyzer` (built from the configuration's `[detect]`
    /// and watch set).
    pub fn new(analyzer: Analyzer, read_only: bool) -> Self {
        Self {
            latest: None,
            shown: None,
            paused: false,
            analyzer,
            analysis: None,
            derived: HashMap::new(),
            view: View::Table,
            help: false,
            help_scroll: 0,
            sort: SortKey::Memory,
            descending: true,
            filter: String::new(),
            filter_editing: false,
            gpu_filter: None,
            scope: super::scope::ViewScope::default(),
            rows: Vec::new(),
            selected: 0,
            selected_key: None,
            offset: 0,
            read_only,
            kill: None,
            detail: None,
            tree: super::tree::Tree::default(),
            hscroll: 0,
            findings_focus: false,
            findings_cursor: 0,
            log_cursor: 0,
            tree_read_at: None,
            chart_span: 3,
            message: None,
            size: (80, 24),
            in_flight: None,
            pending_events: Vec::new(),
            bell: false,
            quit: false,
            link: None,
        }
    }

    /// Whether the frames come from this host's driver (so their PIDs are this host's).
    pub fn is_live(&self) -> bool {
        self.latest
            .as_ref()
            .is_some_and(|f| f.source.kind == crate::model::SourceKind::Live)
    }

    /// Which bindings are live now.
    pub fn mode(&self) -> Mode {
        if self.filter_editing {
            Mode::Filter
        } else if self.help {
            Mode::Help
        } else if self.kill.is_some() {
            Mode::Dialog
        } else {
            match self.view {
                View::Findings => Mode::Findings,
                View::Table | View::Tree if self.findings_focus => Mode::Findings,
                View::Table => Mode::Table,
                View::Tree => Mode::Tree,
                View::Detail(_) => Mode::Detail,
                View::Chart { .. } => Mode::Chart,
            }
        }
    }

    /// Whether a process is "mine" (decided when the frame arrived or the watch set changed,
    /// so drawing never walks `/proc` for `pid:N` specs).
    pub fn is_watched(&self, p: &ProcSample) -> bool {
        self.analysis.as_ref().is_some_and(|a| a.is_mine(p))
    }

    /// The history the analysis keeps (charts, sparklines).
    pub fn history(&self) -> &History {
        self.analyzer.history()
    }

    /// Finding events since the last call, for the alert sinks; nothing accumulates.
    pub fn take_events(&mut self) -> Vec<FindingEvent> {
        std::mem::take(&mut self.pending_events)
    }

    /// Whether to ring the bell now (a critical finding opened since the last call).
    pub fn take_bell(&mut self) -> bool {
        std::mem::take(&mut self.bell)
    }

    /// Decides "mine" again for the frame on screen (the watch marks or the frame changed).
    fn refresh_watched(&mut self) {
        if let Some(f) = self.shown.clone() {
            self.analysis = Some(self.analyzer.reanalyse(&f));
        }
    }

    /// Whether a GPU is on screen: in the scope (`tui --gpu`, `--only-visible`), and all of
    /// them or the one `g` chose.
    pub fn shows_gpu(&self, g: &GpuSample) -> bool {
        self.gpu_filter.is_none_or(|i| g.index == i) && self.scope.shows_gpu(g)
    }

    /// GPUs on screen.
    pub fn visible_gpus(&self) -> Vec<&GpuSample> {
        self.shown.as_ref().map_or_else(Vec::new, |f| {
            f.sample.gpus.iter().filter(|g| self.shows_gpu(g)).collect()
        })
    }

    /// The row under the cursor.
    pub fn selected_row(&self) -> Option<(&GpuSample, &ProcSample)> {
        let frame = self.shown.as_ref()?;
        let r = self.rows.get(self.selected)?;
        let g = frame.sample.gpus.get(r.gpu)?;
        Some((g, g.processes.get(r.proc)?))
    }

    /// A new frame from the sampler.
    pub fn on_frame(&mut self, frame: Arc<Frame>) -> Effect {
        if self
            .latest
            .as_ref()
            .is_some_and(|f| f.seq == frame.seq && Arc::ptr_eq(&f.source, &frame.source))
        {
            return Effect::None;
        }
        let mut analysis = self.analyzer.push(&frame);
        self.derive(&frame);
        let events = std::mem::take(&mut analysis.events);
        self.bell |= events.iter().any(|e| {
            matches!(e, FindingEvent::Opened(f) if f.severity == crate::detect::Severity::Critical)
        });
        self.pending_events.extend(events);
        self.latest = Some(Arc::clone(&frame));
        if self.paused {
            // The rows on screen keep their growth (derive measured none of them).
            self.measure_visible();
            return Effect::None;
        }
        if let Some(problem) = self.scope.resolve(&frame.sample) {
            self.message = Some(problem);
        }
        self.shown = Some(frame);
        self.analysis = Some(analysis);
        self.rebuild_rows();
        // The tree follows new processes, at most once a second.
        if self.view == View::Tree
            && self
                .tree_read_at
                .is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
        {
            return self.load_tree();
        }
        Effect::None
    }

    /// Peaks of every process of a new frame; growth only when the table is sorted by it (a
    /// robust growth of hundreds of processes every frame was an eighth of the dashboard's
    /// CPU): otherwise [`UiState::measure_visible`] measures the rows on screen.
    fn derive(&mut self, frame: &Frame) {
        let all = self.sort == SortKey::Growth;
        let mut derived = HashMap::with_capacity(self.derived.len());
        for g in &frame.sample.gpus {
            for p in &g.processes {
                let key = History::key_of(&g.uuid, p);
                let d = self.analyzer.history().process_for(&g.uuid, p).map_or_else(
                    Derived::default,
                    |(_, h)| Derived {
                        growth: if all {
                            crate::history::process_growth(h, self.analyzer.rules()).map(|g| g.rate)
                        } else {
                            None
                        },
                        peak: h.peak_used().map(|(bytes, _)| bytes),
                        measured: all,
                    },
                );
                derived.insert(key, d);
            }
        }
        self.derived = derived;
    }

    /// Measures the growth of the rows on screen (and the selected one) not measured yet.
    fn measure_visible(&mut self) {
        let wanted = self.visible_rows().collect::<Vec<_>>();
        self.measure(&wanted);
    }

    /// The rows on screen, then the selected one.
    fn visible_rows(&self) -> impl Iterator<Item = RowRef> + '_ {
        let page = self.page_rows();
        let end = (self.offset + page).min(self.rows.len());
        self.rows[self.offset.min(end)..end]
            .iter()
            .chain(self.rows.get(self.selected))
            .copied()
    }

    /// The PIDs whose host facts (CPU %, RSS) must be fresh on every refresh: the rows on
    /// screen and the selected one. `None` (all of them) while sorted by CPU or RSS, which
    /// compares every row's.
    pub fn host_focus(&self) -> Option<Vec<u32>> {
        if matches!(self.sort, SortKey::Cpu | SortKey::Rss) {
            return None;
        }
        let frame = self.shown.as_ref()?;
        Some(
            self.visible_rows()
                .filter_map(|r| Some(frame.sample.gpus.get(r.gpu)?.processes.get(r.proc)?.pid))
                .collect(),
        )
    }

    /// Measures the growth of these rows of the shown frame, where not measured yet.
    fn measure(&mut self, rows: &[RowRef]) {
        let Some(frame) = self.shown.clone() else {
            return;
        };
        for &r in rows {
            let Some(g) = frame.sample.gpus.get(r.gpu) else {
                continue;
            };
            let Some(p) = g.processes.get(r.proc) else {
                continue;
            };
            let key = History::key_of(&g.uuid, p);
            if self.derived.get(&key).is_some_and(|d| d.measured) {
                continue;
            }
            let growth = self
                .analyzer
                .history()
                .process_for(&g.uuid, p)
                .and_then(|(_, h)| crate::history::process_growth(h, self.analyzer.rules()))
                .map(|g| g.rate);
            let d = self.derived.entry(key).or_default();
            d.growth = growth;
            d.measured = true;
        }
    }

    /// Growth and peak of a process on a GPU.
    pub fn derived_of(&self, g: &GpuSample, p: &ProcSample) -> Derived {
        self.derived
            .get(&History::key_of(&g.uuid, p))
            .copied()
            .unwrap_or_default()
    }

    /// Recomputes the visible rows: filter, GPU choice, sort; keeps the selection on the same
    /// process when it is still there.
    pub fn rebuild_rows(&mut self) {
        let Some(frame) = self.shown.clone() else {
            self.rows.clear();
            return;
        };
        let needle = self.filter.to_lowercase();
        let mut rows: Vec<RowRef> = Vec::new();
        for (gi, g) in frame.sample.gpus.iter().enumerate() {
            if !self.shows_gpu(g) {
                continue;
            }
            for (pi, p) in g.processes.iter().enumerate() {
                if self.scope.shows_process(p) && (needle.is_empty() || matches_filter(p, &needle))
                {
                    rows.push(RowRef { gpu: gi, proc: pi });
                }
            }
        }
        if self.sort == SortKey::Growth {
            self.measure(&rows);
        }
        let key = self.sort;
        let gpus = &frame.sample.gpus;
        let proc_of = |r: &RowRef| (&gpus[r.gpu], &gpus[r.gpu].processes[r.proc]);
        rows.sort_by(|a, b| {
            let (ga, pa) = proc_of(a);
            let (gb, pb) = proc_of(b);
            let ord = self.compare(key, (ga, pa), (gb, pb));
            let ord = if self.descending { ord.reverse() } else { ord };
            ord.then(ga.index.cmp(&gb.index)).then(pa.pid.cmp(&pb.pid))
        });
        if needle.is_empty() {
            place_unattributed(&mut rows, gpus, |g| self.shows_gpu(g));
        }
        self.rows = rows;
        // Keep the cursor on the same process.
        if let Some((uuid, pid)) = &self.selected_key
            && let Some(i) = self.rows.iter().position(|r| {
                r.is_process() && {
                    let (g, p) = proc_of(r);
                    &g.uuid == uuid && p.pid == *pid
                }
            })
        {
            self.selected = i;
        }
        self.selected = self.selected.min(self.rows.len().saturating_sub(1));
        self.remember_selection();
        self.keep_visible();
    }

    fn compare(
        &self,
        key: SortKey,
        (ga, pa): (&GpuSample, &ProcSample),
        (gb, pb): (&GpuSample, &ProcSample),
    ) -> std::cmp::Ordering {
        use std::cmp::Ordering;
        // Unavailable sorts below any value.
        fn opt<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Ordering {
            match (a, b) {
                (Some(a), Some(b)) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
                (Some(_), None) => Ordering::Greater,
                (None, Some(_)) => Ordering::Less,
                (None, None) => Ordering::Equal,
            }
        }
        match key {
            SortKey::Memory => opt(pa.used_bytes, pb.used_bytes),
            SortKey::Growth => opt(
                self.derived_of(ga, pa).growth,
                self.derived_of(gb, pb).growth,
            ),
            SortKey::Peak => opt(self.derived_of(ga, pa).peak, self.derived_of(gb, pb).peak),
            SortKey::Sm => opt(pa.sm_percent, pb.sm_percent),
            SortKey::Cpu => opt(pa.host.cpu_percent, pb.host.cpu_percent),
            SortKey::Rss => opt(pa.host.rss_bytes, pb.host.rss_bytes),
            // Longest running first: an earlier start is "more elapsed".
            SortKey::Elapsed => opt(pb.host.start_time, pa.host.start_time),
            SortKey::Pid => pa.pid.cmp(&pb.pid),
            SortKey::User => opt(pa.host.user.as_deref(), pb.host.user.as_deref()),
            SortKey::Gpu => ga.index.cmp(&gb.index),
            SortKey::Type => pa.kind.label().cmp(pb.kind.label()),
            SortKey::Container => opt(pa.host.container.as_deref(), pb.host.container.as_deref()),
            SortKey::Command => opt(pa.host.command.as_deref(), pb.host.command.as_deref()),
        }
    }

    fn remember_selection(&mut self) {
        self.selected_key = self.selected_row().map(|(g, p)| (g.uuid.clone(), p.pid));
    }

    /// Rows the table can show at the current size.
    pub fn page_rows(&self) -> usize {
        usize::from(self.layout().table_rows.height).max(1)
    }

    fn keep_visible(&mut self) {
        let page = self.page_rows();
        if self.selected < self.offset {
            self.offset = self.selected;
        } else if self.selected >= self.offset + page {
            self.offset = self.selected + 1 - page;
        }
        let max_offset = self.rows.len().saturating_sub(page);
        self.offset = self.offset.min(max_offset);
        self.measure_visible();
    }

    fn select(&mut self, index: usize) {
        self.selected = index.min(self.rows.len().saturating_sub(1));
        self.remember_selection();
        self.keep_visible();
    }

    fn load_tree(&mut self) -> Effect {
        self.tree_read_at = Some(Instant::now());
        let mut pids: Vec<u32> = self
            .rows
            .iter()
            .filter_map(|r| {
                let f = self.shown.as_ref()?;
                Some(f.sample.gpus.get(r.gpu)?.processes.get(r.proc)?.pid)
            })
            .collect();
        pids.sort_unstable();
        pids.dedup();
        Effect::LoadTree(pids)
    }

    /// Results of effects.
    pub fn detail_loaded(&mut self, detail: ProcDetail) {
        self.detail = Some(detail);
    }

    pub fn tree_loaded(&mut self, rows: Vec<TreeRow>) {
        self.tree.set_rows(rows);
    }

    /// Tree view: cursor keys, paging and the wheel move the tree's cursor; landing on a GPU
    /// process selects it in the table (what `Enter`, `w`, `K` act on).
    fn navigate_tree(&mut self, cmd: Command) {
        let page = isize::try_from(self.tree_page()).unwrap_or(isize::MAX);
        let pid = match cmd {
            Command::Up => self.tree.move_by(-1),
            Command::Down => self.tree.move_by(1),
            Command::PageUp => self.tree.move_by(-page),
            Command::PageDown => self.tree.move_by(page),
            Command::Home => self.tree.move_to_end(false),
            Command::End => self.tree.move_to_end(true),
            Command::ScrollUp => self.tree.move_by(-3),
            Command::ScrollDown => self.tree.move_by(3),
            Command::Click(x, y) => {
                let body = self.layout().body;
                // The body's first line is the tree's header.
                if x < body.x || x >= body.right() || y <= body.y || y >= body.bottom() {
                    return;
                }
                let (shown, at) = self.tree.shown();
                let first = super::tree::first_shown(at, self.tree_page());
                let Some(pid) = shown
                    .get(first + usize::from(y - body.y - 1))
                    .map(|s| s.row.pid)
                else {
                    return;
                };
                self.tree.point_at(pid);
                Some(pid)
            }
            _ => None,
        };
        if let Some(pid) = pid {
            self.select_tree_pid(pid);
        }
    }

    /// Help open: the keys scroll it, within its length.
    fn scroll_help(&mut self, cmd: Command) {
        let (page, max) = super::keymap::help_page(self.size.1);
        self.help_scroll = moved(cmd, self.help_scroll, page, max + 1);
    }

    /// Rows of the tree the body shows (below its header line).
    pub fn tree_page(&self) -> usize {
        usize::from(self.layout().body.height.saturating_sub(1)).max(1)
    }

    /// Selects the table row of `pid` (its first GPU), when it has one.
    fn select_tree_pid(&mut self, pid: u32) {
        let Some(frame) = self.shown.clone() else {
            return;
        };
        let at = self.rows.iter().position(|r| {
            frame
                .sample
                .gpus
                .get(r.gpu)
                .and_then(|g| g.processes.get(r.proc))
                .is_some_and(|p| p.pid == pid)
        });
        if let Some(i) = at {
            self.select(i);
        }
    }

    /// In the tree view, whether the cursor is on a process without GPU memory (no table row
    /// to act on): then says so and returns true.
    fn tree_cursor_off_gpu(&mut self) -> bool {
        if self.view != View::Tree {
            return false;
        }
        let Some(pid) = self.tree.cursor() else {
            return false;
        };
        if self.selected_row().is_some_and(|(_, p)| p.pid == pid) {
            return false;
        }
        self.message = Some(format!(
            "PID {pid} holds no GPU memory: select a GPU process in the tree"
        ));
        true
    }

    pub fn signal_result(&mut self, sig: Sig, result: Result<(), String>) {
        let Some(k) = self.kill.as_mut() else { return };
        k.stage = match (sig, result) {
            (Sig::Term, Ok(())) => KillStage::TermSent,
            (Sig::Kill, Ok(())) => KillStage::Done(format!("SIGKILL sent to PID {}", k.pid)),
            (_, Err(e)) => KillStage::Failed(e),
        };
    }

    /// The only writer of UI state for input.
    pub fn update(&mut self, cmd: Command) -> Effect {
        self.message = None;
        match cmd {
            Command::Quit => {
                self.quit = true;
                Effect::Quit
            }
            Command::ToggleHelp => {
                self.help = !self.help;
                self.help_scroll = 0;
                Effect::None
            }
            Command::Back => {
                self.back();
                Effect::None
            }
            Command::Up
            | Command::Down
            | Command::PageUp
            | Command::PageDown
            | Command::Home
            | Command::End
            | Command::ScrollUp
            | Command::ScrollDown
            | Command::Click(..) => {
                if self.help {
                    self.scroll_help(cmd);
                } else if self.mode() == Mode::Findings && !matches!(cmd, Command::Click(..)) {
                    self.move_in_findings(cmd);
                } else if self.view == View::Tree {
                    self.navigate_tree(cmd);
                } else {
                    self.navigate(cmd);
                }
                Effect::None
            }
            Command::Resize(..) => {
                self.navigate(cmd);
                Effect::None
            }
            Command::ScrollLeft
            | Command::ScrollRight
            | Command::FocusFindings
            | Command::OpenFindings
            | Command::GoToFinding => {
                self.focus(cmd);
                Effect::None
            }
            Command::TreeCollapse => {
                // The cursor may move up to the parent.
                if self.tree.collapse()
                    && let Some(pid) = self.tree.cursor()
                {
                    self.select_tree_pid(pid);
                }
                Effect::None
            }
            Command::TreeExpand => {
                self.tree.expand();
                Effect::None
            }
            Command::SortNext
            | Command::SortReverse
            | Command::SortBy(_)
            | Command::FilterStart
            | Command::FilterInput(_)
            | Command::FilterBackspace
            | Command::FilterErase
            | Command::FilterAccept
            | Command::FilterCancel
            | Command::CycleGpu => {
                self.arrange(cmd);
                Effect::None
            }
            Command::OpenDetail
            | Command::ToggleTree
            | Command::OpenChart
            | Command::ZoomIn
            | Command::ZoomOut
            | Command::TogglePause => self.change_view(cmd),
            Command::ToggleWatchPid | Command::ToggleWatchUser => {
                self.toggle_watch(cmd);
                Effect::None
            }
            Command::Kill => {
                self.open_kill();
                Effect::None
            }
            Command::Confirm => self.confirm(Sig::Term),
            Command::ConfirmKill => self.confirm(Sig::Kill),
        }
    }

    /// Cursor, paging, mouse, terminal size.
    fn navigate(&mut self, cmd: Command) {
        match cmd {
            Command::Up
            | Command::Down
            | Command::PageUp
            | Command::PageDown
            | Command::Home
            | Command::End
            | Command::ScrollUp
            | Command::ScrollDown => {
                self.select(moved(cmd, self.selected, self.page_rows(), self.rows.len()));
            }
            Command::Click(x, y) => self.click(x, y),
            Command::Resize(w, h) => {
                self.size = (w, h);
                self.keep_visible();
            }
            _ => {}
        }
    }

    /// Sorting, filtering, the GPU shown.
    fn arrange(&mut self, cmd: Command) {
        match cmd {
            Command::SortNext => {
                let i = SortKey::CYCLE
                    .iter()
                    .position(|k| *k == self.sort)
                    .unwrap_or(0);
                self.set_sort(SortKey::CYCLE[(i + 1) % SortKey::CYCLE.len()]);
            }
            Command::SortReverse => {
                self.descending = !self.descending;
                self.rebuild_rows();
            }
            Command::SortBy(key) => self.set_sort(key),
            Command::FilterStart => self.filter_editing = true,
            Command::FilterInput(c) => {
                self.filter.push(c);
                self.rebuild_rows();
            }
            Command::FilterBackspace => {
                self.filter.pop();
                self.rebuild_rows();
            }
            Command::FilterErase => {
                self.filter.clear();
                self.rebuild_rows();
            }
            Command::FilterAccept => self.filter_editing = false,
            Command::FilterCancel => {
                self.filter_editing = false;
                self.filter.clear();
                self.rebuild_rows();
            }
            Command::CycleGpu => self.cycle_gpu(),
            _ => {}
        }
    }

    /// Detail, tree, chart, zoom, pause.
    fn change_view(&mut self, cmd: Command) -> Effect {
        match cmd {
            Command::OpenDetail => {
                if self.tree_cursor_off_gpu() {
                    return Effect::None;
                }
                if let Some((g, p)) = self.selected_row() {
                    let pid = p.pid;
                    self.view = View::Detail(History::key_of(&g.uuid, p));
                    self.detail = None;
                    return Effect::LoadDetail(pid);
                }
            }
            Command::ToggleTree => {
                if self.view == View::Tree {
                    self.view = View::Table;
                } else {
                    self.view = View::Tree;
                    if let Some((_, p)) = self.selected_row() {
                        self.tree.point_at(p.pid);
                    }
                    return self.load_tree();
                }
            }
            Command::OpenChart => {
                let gpu = self
                    .selected_row()
                    .map(|(g, _)| g.uuid.clone())
                    .or_else(|| self.visible_gpus().first().map(|g| g.uuid.clone()));
                if let Some(gpu) = gpu {
                    self.view = View::Chart { gpu };
                }
            }
            Command::ZoomIn => self.chart_span = self.chart_span.saturating_sub(1),
            Command::ZoomOut => {
                self.chart_span = (self.chart_span + 1).min(CHART_SPANS.len() - 1);
            }
            Command::TogglePause => {
                self.paused = !self.paused;
                if !self.paused {
                    self.shown.clone_from(&self.latest);
                    self.refresh_watched();
                    self.rebuild_rows();
                }
            }
            _ => {}
        }
        Effect::None
    }

    /// `w` / `W`: the selected process, or its user, joins or leaves the watched set.
    fn toggle_watch(&mut self, cmd: Command) {
        if self.tree_cursor_off_gpu() {
            return;
        }
        let Some((_, p)) = self.selected_row() else {
            return;
        };
        let (pid, user) = (p.pid, p.host.user.clone());
        let (what, now_watched) = if cmd == Command::ToggleWatchPid {
            let watched = self.analyzer.toggle_pid(pid);
            (format!("PID {pid}"), watched)
        } else {
            let Some(user) = user else {
                self.message = Some("this process's user is not known here".to_string());
                return;
            };
            let watched = self.analyzer.toggle_user(&user);
            (format!("user {user}"), watched)
        };
        self.refresh_watched();
        self.rebuild_rows();
        self.message = Some(format!(
            "{what} {}",
            if now_watched {
                "watched"
            } else {
                "no longer watched"
            }
        ));
    }

    fn set_sort(&mut self, key: SortKey) {
        if self.sort == key {
            self.descending = !self.descending;
        } else {
            self.sort = key;
            self.descending = key.descending_by_default();
        }
        self.rebuild_rows();
    }

    fn cycle_gpu(&mut self) {
        let indices: Vec<u32> = self
            .shown
            .as_ref()
            .map(|f| {
                let gpus = f.sample.gpus.iter().filter(|g| self.scope.shows_gpu(g));
                gpus.map(|g| g.index).collect()
            })
            .unwrap_or_default();
        self.gpu_filter = match self.gpu_filter {
            None => indices.first().copied(),
            Some(i) => indices.iter().copied().find(|&j| j > i),
        };
        self.offset = 0;
        self.rebuild_rows();
    }

    /// Sideways scroll, the findings panel's focus, the findings view, going to a finding.
    fn focus(&mut self, cmd: Command) {
        match cmd {
            Command::ScrollLeft => {
                self.hscroll = self.hscroll.saturating_sub(HSCROLL_STEP);
            }
            Command::ScrollRight => {
                self.hscroll = (self.hscroll + HSCROLL_STEP).min(HSCROLL_MAX);
            }
            Command::FocusFindings => {
                if self.view == View::Findings {
                    self.view = View::Table;
                    self.findings_focus = false;
                } else {
                    self.findings_focus = !self.findings_focus;
                }
            }
            Command::OpenFindings => {
                self.findings_focus = false;
                self.view = if self.view == View::Findings {
                    View::Table
                } else {
                    self.log_cursor = 0;
                    View::Findings
                };
            }
            Command::GoToFinding => {
                self.go_to_finding();
            }
            _ => {}
        }
    }

    /// The cursor of the findings panel or view.
    fn move_in_findings(&mut self, cmd: Command) {
        let in_view = self.view == View::Findings;
        let (count, page) = if in_view {
            let body = self.layout().body.height.saturating_sub(1);
            (self.findings_log().len(), usize::from(body).max(1))
        } else {
            let l = self.layout();
            (
                self.findings_count(Instant::now()),
                usize::from(l.findings.height).max(1),
            )
        };
        let cursor = if in_view {
            self.log_cursor
        } else {
            self.findings_cursor
        };
        let next = moved(cmd, cursor, page, count);
        if in_view {
            self.log_cursor = next;
        } else {
            self.findings_cursor = next;
        }
    }

    /// The findings view's list: the log's entries (open first) about GPUs in the scope.
    pub fn findings_log(&self) -> Vec<&crate::detect::LogEntry> {
        let mut log = self.analyzer.log().listed();
        if let Some(f) = self.shown.as_ref() {
            log.retain(|e| self.scope.shows_finding_on(&e.id.gpu, &f.sample));
        }
        log
    }

    /// Where the finding under the cursor goes, if anywhere.
    pub fn finding_target(&self) -> Option<super::shown::GoTo> {
        if self.view == View::Findings {
            let log = self.findings_log();
            let e = log.get(self.log_cursor.min(log.len().saturating_sub(1)))?;
            super::shown::GoTo::of(e.gpu_index, e.id.pid)
        } else {
            let lines = self.findings_lines(Instant::now());
            lines
                .get(self.findings_cursor.min(lines.len().saturating_sub(1)))?
                .goes_to
        }
    }

    /// `Enter` on a finding: its process's row, or its GPU alone; the keys go back to the table.
    fn go_to_finding(&mut self) {
        use super::shown::GoTo;
        let Some(target) = self.finding_target() else {
            self.message = Some("this line is about no GPU or process".to_string());
            return;
        };
        self.findings_focus = false;
        self.view = View::Table;
        match target {
            GoTo::Gpu(gpu) => {
                self.gpu_filter = Some(gpu);
                self.offset = 0;
                self.rebuild_rows();
                self.message = Some(format!("GPU {gpu} only (g: the next GPU, Esc: all GPUs)"));
            }
            GoTo::Process { gpu, pid } => {
                if self.gpu_filter.is_some_and(|g| g != gpu) {
                    self.gpu_filter = None;
                }
                let find = |s: &Self| {
                    let frame = s.shown.as_ref()?;
                    s.rows.iter().position(|r| {
                        let g = &frame.sample.gpus[r.gpu];
                        g.index == gpu && g.processes.get(r.proc).is_some_and(|p| p.pid == pid)
                    })
                };
                self.rebuild_rows();
                let mut at = find(self);
                if at.is_none() && !self.filter.is_empty() {
                    // The filter hid it: the finding matters more than the filter.
                    self.filter.clear();
                    self.rebuild_rows();
                    at = find(self);
                }
                match at {
                    Some(i) => {
                        self.select(i);
                        self.message = Some(format!("PID {pid} on GPU {gpu}"));
                    }
                    None => {
                        self.message = Some(format!("PID {pid} is no longer on GPU {gpu}"));
                    }
                }
            }
        }
    }

    fn back(&mut self) {
        if self.help {
            self.help = false;
        } else if self.kill.is_some() {
            self.kill = None;
        } else if self.findings_focus && matches!(self.view, View::Table | View::Tree) {
            // The panel had the keys: they go back to the table (a chart or detail opened
            // over it closes first, below).
            self.findings_focus = false;
        } else if self.view != View::Table {
            self.view = View::Table;
            self.detail = None;
        } else if !self.filter.is_empty() {
            self.filter.clear();
            self.rebuild_rows();
        } else if self.gpu_filter.is_some() {
            self.gpu_filter = None;
            self.rebuild_rows();
        }
    }

    fn open_kill(&mut self) {
        if self.read_only {
            self.message = Some("read-only: signals are disabled (--read-only)".to_string());
            return;
        }
        if !self.is_live() {
            self.message = Some(
                "signals go only to live processes: these PIDs are simulated or recorded"
                    .to_string(),
            );
            return;
        }
        if self.tree_cursor_off_gpu() {
            return;
        }
        let Some((g, p)) = self.selected_row() else {
            return;
        };
        let who = p.host.user.clone().unwrap_or_else(|| "?".to_string());
        let what = p
            .host
            .command
            .clone()
            .or_else(|| p.host.name.clone())
            .unwrap_or_else(|| "(not visible here)".to_string());
        let mem = p
            .used_bytes
            .map_or_else(|| "n/a".to_string(), crate::output::fmt_bytes);
        // Without a start time the PID can't be tied to the process shown: say so at once,
        // and offer nothing to confirm.
        let stage = match p.host.start_time {
            // Gone from /proc: nothing is left to signal (and the PID may be another's soon).
            Some(_) if p.host.exited => KillStage::Failed(format!(
                "PID {} has exited: no process is left to signal (the driver still holds its \
                 memory until it tears the context down)",
                p.pid
            )),
            Some(_) => KillStage::Confirm,
            None => {
                KillStage::Failed(crate::signal::SignalError::NoIdentity { pid: p.pid }.to_string())
            }
        };
        self.kill = Some(KillPrompt {
            pid: p.pid,
            start_time: p.host.start_time,
            label: format!(
                "{}: {} ({mem} on GPU {})",
                crate::text::clean(&who),
                crate::text::clean(&what),
                g.index
            ),
            stage,
        });
    }

    fn confirm(&mut self, sig: Sig) -> Effect {
        let Some(k) = &self.kill else {
            return Effect::None;
        };
        let allowed = match sig {
            Sig::Term => k.stage == KillStage::Confirm,
            Sig::Kill => k.stage == KillStage::TermSent,
        };
        let Some(start_time) = k.start_time.filter(|_| allowed) else {
            return Effect::None;
        };
        Effect::Signal {
            pid: k.pid,
            start_time,
            sig,
        }
    }

    fn click(&mut self, x: u16, y: u16) {
        let area = self.layout().table_rows;
        if x >= area.x && x < area.x + area.width && y >= area.y && y < area.y + area.height {
            let index = self.offset + usize::from(y - area.y);
            if index < self.rows.len() {
                self.select(index);
            }
        }
    }
}

/// Where a cursor key moves a cursor at `at` over `len` lines shown `page` at a time (the
/// table's, the findings', the help's): within `0..len`.
fn moved(cmd: Command, at: usize, page: usize, len: usize) -> usize {
    let to = match cmd {
        Command::Up => at.saturating_sub(1),
        Command::Down => at.saturating_add(1),
        Command::PageUp => at.saturating_sub(page),
        Command::PageDown => at.saturating_add(page),
        Command::Home => 0,
        Command::End => len,
        Command::ScrollUp => at.saturating_sub(3),
        Command::ScrollDown => at.saturating_add(3),
        _ => at,
    };
    to.min(len.saturating_sub(1))
}

/// Puts each GPU's unattributed row after that GPU's last process row (at the end for a GPU
/// with none), and folds the small amounts of several GPUs into one row at the end.
fn place_unattributed(
    rows: &mut Vec<RowRef>,
    gpus: &[GpuSample],
    shows: impl Fn(&GpuSample) -> bool,
) {
    use super::shown::Unattributed;
    let kinds: Vec<(usize, Unattributed)> = gpus
        .iter()
        .enumerate()
        .filter(|(_, g)| shows(g))
        .filter_map(|(i, g)| Some((i, Unattributed::of(g)?)))
        .collect();
    let fold = kinds.iter().filter(|(_, u)| u.is_small()).count() >= 2;
    // After the last row of its GPU, from the back so that positions stay true.
    let mut at: Vec<(usize, usize)> = kinds
        .iter()
        .filter(|(_, u)| !(fold && u.is_small()))
        .map(|&(gi, _)| {
            let pos = rows
                .iter()
                .rposition(|r| r.gpu == gi)
                .map_or(usize::MAX, |p| p + 1);
            (pos, gi)
        })
        .collect();
    at.sort_by(|a, b| b.cmp(a));
    let mut tail = Vec::new();
    for (pos, gi) in at {
        let row = RowRef {
            gpu: gi,
            proc: RowRef::UNATTRIBUTED,
        };
        if pos == usize::MAX {
            tail.push(row);
        } else {
            rows.insert(pos, row);
        }
    }
    tail.reverse();
    rows.extend(tail);
    if fold {
        rows.push(RowRef {
            gpu: RowRef::FOLDED,
            proc: RowRef::FOLDED,
        });
    }
}

fn matches_filter(p: &ProcSample, needle: &str) -> bool {
    let h = &p.host;
    p.pid.to_string().contains(needle)
        || [&h.user, &h.command, &h.name, &h.container]
            .iter()
            .filter_map(|v| v.as_deref())
            .any(|v| v.to_lowercase().contains(needle))
}
