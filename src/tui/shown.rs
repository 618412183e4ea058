//! What the dashboard shows, derived from the state: the findings panel's lines and the
//! table's unattributed rows. The view draws them; [`UiState::layout`] sizes the screen by them
//! (through the pure [`super::layout`]), so the state never calls the view.

use std::time::Instant;

use super::layout::{self, Layout};
use super::state::UiState;

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

impl UiState {
    /// What the findings panel lists: source health, until the detector adds its findings.
    pub fn findings_lines(&self, mono: Instant) -> Vec<String> {
        let mut out = Vec::new();
        if let Some((url, link @ crate::remote::Link::Disconnected { .. })) = &self.link {
            out.push(crate::remote::describe(link, url, mono).0);
        }
        let Some(frame) = self.latest.as_ref() else {
            if let Some(c) = self.in_flight.as_ref().filter(|c| c.is_stuck(mono)) {
                out.push(format!(
                    "no sample yet: {} (is the driver hung?)",
                    c.describe(mono)
                ));
            }
            return out;
        };
        let age = mono.saturating_duration_since(frame.published);
        if age > frame.interval * 3 + std::time::Duration::from_secs(1) {
            let waiting = self
                .in_flight
                .as_ref()
                .map_or_else(String::new, |c| format!(": {}", c.describe(mono)));
            out.push(format!(
                "source stale: no sample for {:.0}s{waiting}",
                age.as_secs_f64()
            ));
        }
        // The detector's findings (source health included), most severe first.
        let scoped = |gpu: &str| self.scope.shows_finding_on(gpu, &frame.sample);
        for f in self
            .analyzer
            .open()
            .into_iter()
            .filter(|f| scoped(&f.id.gpu))
        {
            out.push(format!(
                "[{}] {}",
                f.severity,
                crate::text::clean(&f.summary)
            ));
        }
        // Single calls that failed on a GPU that is still there (a permission, a transient error).
        for g in &frame.sample.gpus {
            if g.lost || !self.scope.shows_gpu(g) {
                continue;
            }
            for e in &g.errors {
                out.push(format!(
                    "GPU {}: {} failed: {}",
                    g.index,
                    crate::text::clean(&e.call),
                    crate::text::clean(&e.error)
                ));
            }
        }
        out
    }

    /// Per GPU on screen, the memory no visible process accounts for.
    pub fn unattributed_rows(&self) -> Vec<(u32, Unattributed)> {
        self.visible_gpus()
            .iter()
            .filter(|g| !g.lost && (g.memory.is_some() || g.processes_unavailable))
            .filter_map(|g| {
                if g.processes_unavailable {
                    return Some((g.index, Unattributed::NoProcessList));
                }
                match g.unattributed_bytes() {
                    Some(b) if b >= 1 << 20 => Some((g.index, Unattributed::Bytes(b))),
                    Some(_) => None,
                    None => Some((g.index, Unattributed::Unknown)),
                }
            })
            .collect()
    }

    /// How much of each variable part the screen shows at `mono`.
    pub fn shown_parts(&self, mono: Instant) -> layout::Shown {
        layout::Shown {
            gpus: self.visible_gpus().len(),
            findings: self.findings_lines(mono).len(),
            unattributed: self.unattributed_rows().len(),
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
