//! The detector: pure rules over the history of frames, and the lifecycle of what they find.
//!
//! `evaluate(&History, &Sample, &Rules, …) -> Vec<Finding>` is pure; [`Detector`] keeps the
//! open findings and turns each evaluation into `Opened` / `Updated` / `Resolved` events.

pub mod bench;
pub mod finding;
pub mod level;
pub mod log;
pub mod rules;

use std::collections::HashMap;
use std::time::Duration;

pub use finding::{Culprit, Finding, FindingEvent, FindingId, RuleKind, Severity};
pub use level::{MemLevel, MemLevels};
pub use log::{FindingLog, LogEntry};
pub use rules::{Input, evaluate};

/// Thresholds of every rule. Defaults are the issue's; all live in the config file's
/// `[detect]` section.
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    /// Near capacity: used/total at or above this fraction warns…
    pub near_capacity_warn: f64,
    /// …and at or above this one is critical.
    pub near_capacity_critical: f64,
    /// Free memory below this is near capacity too, whatever the fraction.
    pub near_capacity_headroom: u64,
    /// An open near-capacity finding clears only this far (a fraction) below the line.
    pub near_capacity_hysteresis: f64,
    /// The condition must hold this long before it opens.
    pub near_capacity_min_duration: Duration,
    /// Filling up: the slope of used memory over this window…
    pub filling_window: Duration,
    /// …fires when the GPU would be full within this horizon…
    pub filling_horizon: Duration,
    /// …and grows at least this fast (bytes per second).
    pub filling_min_rate: f64,
    /// A filling-up finding is critical only on a GPU at least this full (a fraction), and
    /// when it would be full within a fifth of the horizon.
    pub filling_critical_used: f64,
    /// Leak suspected: ignore a process's first this long (loading, warm-up)…
    pub leak_warmup: Duration,
    /// …then a ramp sustained this long is a leak…
    pub leak_sustain: Duration,
    /// …if it grows at least this fast (bytes per second).
    pub leak_min_rate: f64,
    /// External pressure: a rise of external memory over this window…
    pub external_window: Duration,
    /// …by more than this many bytes…
    pub external_rise: u64,
    /// …or headroom lower than the watched processes' growth over this horizon.
    pub external_horizon: Duration,
    /// Idle holder: at least this much memory…
    pub idle_min_bytes: u64,
    /// …with 0 % SM for this long.
    pub idle_duration: Duration,
    /// Exited holder: a process that left `/proc` while the driver still lists its memory,
    /// for this long.
    pub exited_grace: Duration,
}

impl Default for Rules {
    fn default() -> Self {
        Self {
            near_capacity_warn: 0.90,
            near_capacity_critical: 0.97,
            near_capacity_headroom: 2 << 30,
            near_capacity_hysteresis: 0.05,
            near_capacity_min_duration: Duration::from_secs(10),
            filling_window: Duration::from_secs(15),
            filling_horizon: Duration::from_mins(15),
            filling_min_rate: 1024.0 * 1024.0,
            filling_critical_used: 0.5,
            leak_warmup: Duration::from_mins(1),
            leak_sustain: Duration::from_mins(5),
            leak_min_rate: 1024.0 * 1024.0 / 6.0,
            external_window: Duration::from_mins(1),
            external_rise: 1 << 30,
            external_horizon: Duration::from_mins(5),
            idle_min_bytes: 1 << 30,
            idle_duration: Duration::from_mins(10),
            exited_grace: Duration::from_secs(30),
        }
    }
}

impl Rules {
    /// How long before the latest sample the rules read each process's memory point by
    /// point: the external-pressure window (the watched processes' memory is matched to the
    /// GPU's, sample by sample) and the filling window, plus 30 s. The leak and idle rules
    /// look further back but need no single point there (the leak rule picks 40 points spread
    /// in time, the idle rule keeps a running count), so older process points may be merged.
    pub fn process_detail(&self) -> Duration {
        self.external_window.max(self.filling_window) + Duration::from_secs(30)
    }
}

/// The step older process points are merged into in a [`compact_history`].
pub const COARSE_STEP: Duration = Duration::from_secs(10);

/// A history of `window` that keeps process points at full resolution only as far back as
/// these rules read them ([`Rules::process_detail`]), one point per [`COARSE_STEP`] before
/// that. The daemon's: it holds every process of every GPU for the whole window, and the
/// detector finds the same things in it as in a full one.
pub fn compact_history(window: Duration, rules: &Rules) -> crate::history::History {
    crate::history::History::new(window).with_process_detail(rules.process_detail(), COARSE_STEP)
}

/// Keeps the open findings and turns evaluations into lifecycle events.
#[derive(Debug, Default)]
pub struct Detector {
    rules: Rules,
    open: HashMap<FindingId, Finding>,
}

impl Detector {
    pub fn new(rules: Rules) -> Self {
        Self {
            rules,
            open: HashMap::new(),
        }
    }

    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    /// The findings open now, most severe first.
    pub fn open(&self) -> Vec<&Finding> {
        let mut v: Vec<&Finding> = self.open.values().collect();
        v.sort_by(|a, b| {
            b.severity
                .cmp(&a.severity)
                .then(a.since.total_cmp(&b.since))
                .then(a.id.cmp(&b.id))
        });
        v
    }

    /// Evaluates the rules on the latest sample (already pushed into the history) and returns
    /// what changed: new findings, findings whose facts moved, findings that cleared.
    pub fn step(
        &mut self,
        history: &crate::history::History,
        sample: &crate::model::Sample,
        now: f64,
        stale_after: Option<Duration>,
        watched: &dyn Fn(&crate::model::ProcSample) -> bool,
    ) -> Vec<FindingEvent> {
        let found = evaluate(
            &Input {
                history,
                sample,
                now,
                stale_after,
                watched,
                open: &self.open,
            },
            &self.rules,
        );
        let mut events = Vec::new();
        let mut next: HashMap<FindingId, Finding> = HashMap::with_capacity(found.len());
        for f in found {
            match self.open.get(&f.id) {
                None => events.push(FindingEvent::Opened(f.clone())),
                Some(prev) if changed(prev, &f) => events.push(FindingEvent::Updated(f.clone())),
                Some(_) => {}
            }
            next.insert(f.id.clone(), f);
        }
        let mut gone: Vec<&Finding> = self
            .open
            .values()
            .filter(|f| !next.contains_key(&f.id))
            .collect();
        gone.sort_by(|a, b| a.id.cmp(&b.id));
        for f in gone {
            let mut f = f.clone();
            f.at = sample.taken_at;
            events.push(FindingEvent::Resolved(f));
        }
        self.open = next;
        events
    }
}

/// Whether a finding moved enough to be worth an `Updated` event.
fn changed(prev: &Finding, now: &Finding) -> bool {
    let moved = |a: Option<f64>, b: Option<f64>, rel: f64| match (a, b) {
        (Some(a), Some(b)) => (a - b).abs() > rel * a.abs().max(b.abs()) && (a - b).abs() > 1.0,
        (None, None) => false,
        _ => true,
    };
    prev.severity != now.severity
        || prev
            .culprits
            .iter()
            .map(|c| c.pid)
            .ne(now.culprits.iter().map(|c| c.pid))
        || moved(prev.time_to_full_s, now.time_to_full_s, 0.10)
        || moved(prev.rate_bytes_per_s, now.rate_bytes_per_s, 0.20)
        || moved(
            prev.bytes.map(|b| b as f64),
            now.bytes.map(|b| b as f64),
            0.10,
        )
}
