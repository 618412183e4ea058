//! What the dashboard shows, derived from the state: the findings panel's lines and the
//! table's unattributed rows. The view draws them; [`UiState::layout`] sizes the screen by them
//! (through the pure [`super::layout`]), so the state never calls the view.

use std::time::Instant;

use super::layout::{self, Layout};
use super::state::UiState;
use crate::detect::{Finding, Severity};
use crate::model::{CallError, GpuSample};

/// What the bottom rows of the table say about a GPU's memory outside the process rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unattributed {
    /// Held by no process visible here.
    Bytes(u64),
    /// Unknown: a process's memory is not available.
    Unknown,
    /// The driver gave no process list: the rows above are not the whole story.
    NoProcessList,
}

/// An unattributed amount below this is folded with the other GPUs' small amounts into one
/// row, when there are several: overhead and sampling skew, not a hidden process (on the H200
/// traces in tests/fixtures/h200 it stays between -236 MiB and +69 MiB).
pub const FOLD_BELOW: u64 = 1 << 30;

impl Unattributed {
    /// What the table says about `g`'s memory outside its process rows, if anything (less than
    /// 1 MiB is nothing).
    pub fn of(g: &GpuSample) -> Option<Self> {
        if g.lost || (g.memory.is_none() && !g.processes_unavailable) {
            return None;
        }
        if g.processes_unavailable {
            return Some(Unattributed::NoProcessList);
        }
        match g.unattributed_bytes() {
            Some(b) if b >= 1 << 20 => Some(Unattributed::Bytes(b)),
            Some(_) => None,
            None => Some(Unattributed::Unknown),
        }
    }

    /// A small amount, folded with the others.
    pub fn is_small(self) -> bool {
        matches!(self, Unattributed::Bytes(b) if b < FOLD_BELOW)
    }
}

/// Where `Enter` on a finding goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoTo {
    /// The GPU's panel and processes (a finding about the GPU as a whole).
    Gpu(u32),
    /// The process's row (a finding about one process).
    Process { gpu: u32, pid: u32 },
}

impl GoTo {
    /// Where a finding about `gpu` (and `pid`, for a per-process rule) goes.
    pub fn of(gpu: Option<u32>, pid: Option<u32>) -> Option<Self> {
        match (gpu, pid) {
            (Some(gpu), Some(pid)) => Some(GoTo::Process { gpu, pid }),
            (Some(gpu), None) => Some(GoTo::Gpu(gpu)),
            (None, _) => None,
        }
    }
}

/// One line of the findings panel.
#[derive(Debug, Clone, PartialEq)]
pub struct PanelLine {
    /// Terminal-safe text: `[severity] summary`, or a source problem.
    pub text: String,
    pub severity: Severity,
    pub goes_to: Option<GoTo>,
}

impl PanelLine {
    fn problem(text: String) -> Self {
        Self {
            text,
            severity: Severity::Warning,
            goes_to: None,
        }
    }
}

/// One entry of the findings panel, before it is formatted: counting them (the layout, the
/// header) formats nothing.
enum Item<'a> {
    /// A lost link, a stale or hung source: already a sentence.
    Problem(String),
    Finding(&'a Finding),
    /// A single call that failed on a GPU that is still there.
    CallFailed(u32, &'a CallError),
}

impl Item<'_> {
    fn line(self) -> PanelLine {
        match self {
            Item::Problem(text) => PanelLine::problem(text),
            Item::Finding(f) => PanelLine {
                text: format!("[{}] {}", f.severity, crate::text::clean(&f.summary)),
                severity: f.severity,
                goes_to: GoTo::of(f.gpu_index, f.id.pid),
            },
            Item::CallFailed(gpu, e) => PanelLine {
                goes_to: Some(GoTo::Gpu(gpu)),
                ..PanelLine::problem(format!(
                    "GPU {gpu}: {} failed: {}",
                    crate::text::clean(&e.call),
                    crate::text::clean(&e.error)
                ))
            },
        }
    }
}

impl UiState {
    /// What the findings panel lists: a lost link, a stale source, the detector's findings
    /// (most severe first, those about GPUs in the scope), then single calls that failed.
    pub fn findings_lines(&self, mono: Instant) -> Vec<PanelLine> {
        self.findings_items(mono)
            .into_iter()
            .map(Item::line)
            .collect()
    }

    /// How many lines the findings panel lists at `mono` ([`UiState::findings_lines`]).
    pub fn findings_count(&self, mono: Instant) -> usize {
        self.findings_items(mono).len()
    }

    fn findings_items(&self, mono: Instant) -> Vec<Item<'_>> {
        let mut out = Vec::new();
        if let Some((url, link @ crate::remote::Link::Disconnected { .. })) = &self.link {
            out.push(Item::Problem(crate::remote::describe(link, url, mono).0));
        }
        let Some(frame) = self.latest.as_ref() else {
            if let Some(c) = self.in_flight.as_ref().filter(|c| c.is_stuck(mono)) {
                out.push(Item::Problem(format!(
                    "no sample yet: {} (is the driver hung?)",
                    c.describe(mono)
                )));
            }
            return out;
        };
        let age = mono.saturating_duration_since(frame.published);
        if age > frame.interval * 3 + std::time::Duration::from_secs(1) {
            let waiting = self
                .in_flight
                .as_ref()
                .map_or_else(String::new, |c| format!(": {}", c.describe(mono)));
            out.push(Item::Problem(format!(
                "source stale: no sample for {:.0}s{waiting}",
                age.as_secs_f64()
            )));
        }
        // The detector's findings (source health included), most severe first.
        let scoped = |gpu: &str| self.scope.shows_finding_on(gpu, &frame.sample);
        out.extend(
            self.analyzer
                .open()
                .into_iter()
                .filter(|f| scoped(&f.id.gpu))
                .map(Item::Finding),
        );
        // Single calls that failed on a GPU that is still there (a permission, a transient error).
        for g in &frame.sample.gpus {
            if g.lost || !self.scope.shows_gpu(g) {
                continue;
            }
            out.extend(g.errors.iter().map(|e| Item::CallFailed(g.index, e)));
        }
        out
    }

    /// How much of each variable part the screen shows at `mono`.
    pub fn shown_parts(&self, mono: Instant) -> layout::Shown {
        layout::Shown {
            gpus: self.visible_gpus().len(),
            findings: self.findings_count(mono),
        }
    }

    /// The layout at the current terminal size, at `mono` (a stale source adds a findings
    /// line).
    pub fn layout_at(&self, mono: Instant) -> Layout {
        let full = ratatui::layout::Rect::new(0, 0, self.size.0, self.size.1);
        layout::compute(full, self.shown_parts(mono))
    }

    /// The layout now: what paging and mouse hits use.
    pub fn layout(&self) -> Layout {
        self.layout_at(Instant::now())
    }
}
