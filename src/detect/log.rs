//! What the detector found lately: every finding's lifecycle (opened, updated, resolved), for
//! a front end that lists findings with their history (the dashboard's findings view). Built
//! from the detector's events, so it can never disagree with what the sinks were told. Bounded:
//! at most [`FindingLog::CAP`] entries, the oldest resolved ones go first.

use std::collections::VecDeque;

use super::{Finding, FindingEvent, FindingId, Severity};

/// One finding's life so far.
#[derive(Debug, Clone, PartialEq)]
pub struct LogEntry {
    pub id: FindingId,
    /// NVML index of its GPU.
    pub gpu_index: Option<u32>,
    /// Its severity now (at its resolution, once resolved).
    pub severity: Severity,
    /// The most severe it has been.
    pub worst: Severity,
    /// Its latest summary.
    pub summary: String,
    /// When the condition started, as far as the history showed (unix seconds).
    pub since: f64,
    /// When the detector opened it.
    pub opened: f64,
    /// How often it changed while open, and when last.
    pub updates: u32,
    pub updated: Option<f64>,
    /// When it resolved; `None` while open.
    pub resolved: Option<f64>,
    /// The processes it named last (PIDs), for "go to".
    pub culprits: Vec<u32>,
}

impl LogEntry {
    fn new(f: &Finding) -> Self {
        Self {
            id: f.id.clone(),
            gpu_index: f.gpu_index,
            severity: f.severity,
            worst: f.severity,
            summary: f.summary.clone(),
            since: f.since,
            opened: f.at,
            updates: 0,
            updated: None,
            resolved: None,
            culprits: f.culprits.iter().map(|c| c.pid).collect(),
        }
    }

    fn take(&mut self, f: &Finding) {
        self.severity = f.severity;
        self.worst = self.worst.max(f.severity);
        self.summary.clone_from(&f.summary);
        self.culprits = f.culprits.iter().map(|c| c.pid).collect();
    }

    pub fn is_open(&self) -> bool {
        self.resolved.is_none()
    }
}

/// The log of findings, oldest first.
#[derive(Debug, Clone, Default)]
pub struct FindingLog {
    entries: VecDeque<LogEntry>,
}

impl FindingLog {
    /// The most entries kept.
    pub const CAP: usize = 500;

    /// Takes a step's events.
    pub fn record(&mut self, events: &[FindingEvent]) {
        for e in events {
            match e {
                FindingEvent::Opened(f) => {
                    if self.entries.len() >= Self::CAP {
                        let gone = self.entries.iter().position(|e| !e.is_open()).unwrap_or(0);
                        self.entries.remove(gone);
                    }
                    self.entries.push_back(LogEntry::new(f));
                }
                FindingEvent::Updated(f) => {
                    if let Some(entry) = self.open_mut(&f.id) {
                        entry.take(f);
                        entry.updates = entry.updates.saturating_add(1);
                        entry.updated = Some(f.at);
                    } else {
                        // Opened before the log began (it cannot be, but a log must not lose it).
                        self.record(&[FindingEvent::Opened(f.clone())]);
                    }
                }
                FindingEvent::Resolved(f) => {
                    if let Some(entry) = self.open_mut(&f.id) {
                        entry.take(f);
                        entry.resolved = Some(f.at);
                    }
                }
            }
        }
    }

    fn open_mut(&mut self, id: &FindingId) -> Option<&mut LogEntry> {
        self.entries
            .iter_mut()
            .rev()
            .find(|e| e.is_open() && &e.id == id)
    }

    /// Open findings first (most severe, then newest), then resolved ones, newest first.
    pub fn listed(&self) -> Vec<&LogEntry> {
        let mut out: Vec<&LogEntry> = self.entries.iter().collect();
        out.sort_by(|a, b| match (a.is_open(), b.is_open()) {
            (true, true) => b
                .severity
                .cmp(&a.severity)
                .then(b.opened.total_cmp(&a.opened)),
            (false, false) => b
                .resolved
                .unwrap_or(0.0)
                .total_cmp(&a.resolved.unwrap_or(0.0)),
            (true, false) => std::cmp::Ordering::Less,
            (false, true) => std::cmp::Ordering::Greater,
        });
        out
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::RuleKind;

    /// The alert tests' finding on GPU 0, about `pid` when given, its condition 10 s old.
    fn finding(rule: RuleKind, pid: Option<u32>, severity: Severity, at: f64) -> Finding {
        let mut f = crate::alert::test_support::finding(rule, "GPU-0", Some(0), severity, at);
        f.id.pid = pid;
        f.since = at - 10.0;
        f.summary = format!("{rule} at {at}");
        f
    }

    #[test]
    fn a_findings_life_is_one_entry_opened_updated_resolved() {
        let mut log = FindingLog::default();
        let f = |sev, at| finding(RuleKind::NearCapacity, None, sev, at);
        log.record(&[FindingEvent::Opened(f(Severity::Warning, 100.0))]);
        log.record(&[FindingEvent::Updated(f(Severity::Critical, 105.0))]);
        log.record(&[FindingEvent::Updated(f(Severity::Warning, 110.0))]);
        log.record(&[FindingEvent::Resolved(f(Severity::Warning, 120.0))]);
        // The same finding opens again: a second entry, the first one stays resolved.
        log.record(&[FindingEvent::Opened(f(Severity::Warning, 200.0))]);
        let listed = log.listed();
        assert_eq!(listed.len(), 2);
        let (now, before) = (listed[0], listed[1]);
        assert!(now.is_open());
        assert!((now.opened - 200.0).abs() < 1e-9);
        assert!((before.opened - 100.0).abs() < 1e-9);
        assert_eq!(before.updates, 2);
        assert_eq!(before.updated, Some(110.0));
        assert_eq!(before.resolved, Some(120.0));
        assert_eq!(before.worst, Severity::Critical);
        assert_eq!(before.severity, Severity::Warning);
        assert_eq!(before.summary, "near-capacity at 120");
    }

    #[test]
    fn open_findings_come_first_most_severe_first_then_the_newest_resolved() {
        let mut log = FindingLog::default();
        log.record(&[
            FindingEvent::Opened(finding(RuleKind::IdleHolder, Some(1), Severity::Info, 1.0)),
            FindingEvent::Opened(finding(
                RuleKind::LeakSuspected,
                Some(2),
                Severity::Warning,
                2.0,
            )),
            FindingEvent::Opened(finding(RuleKind::FillingUp, None, Severity::Critical, 3.0)),
            FindingEvent::Opened(finding(RuleKind::IdleHolder, Some(4), Severity::Info, 4.0)),
        ]);
        log.record(&[
            FindingEvent::Resolved(finding(RuleKind::IdleHolder, Some(1), Severity::Info, 5.0)),
            FindingEvent::Resolved(finding(RuleKind::IdleHolder, Some(4), Severity::Info, 6.0)),
        ]);
        let pids: Vec<Option<u32>> = log.listed().iter().map(|e| e.id.pid).collect();
        assert_eq!(pids, [None, Some(2), Some(4), Some(1)]);
    }

    #[test]
    fn the_log_is_bounded_and_drops_resolved_entries_first() {
        let mut log = FindingLog::default();
        log.record(&[FindingEvent::Opened(finding(
            RuleKind::FillingUp,
            None,
            Severity::Warning,
            0.0,
        ))]);
        for i in 1..=(FindingLog::CAP as u32 + 50) {
            let f = finding(RuleKind::IdleHolder, Some(i), Severity::Info, f64::from(i));
            log.record(&[FindingEvent::Opened(f.clone()), FindingEvent::Resolved(f)]);
        }
        assert_eq!(log.len(), FindingLog::CAP);
        // The open one, older than every resolved one, is still there.
        assert!(log.listed()[0].is_open());
        assert_eq!(log.listed()[0].id.rule, RuleKind::FillingUp);
    }
}
