//! What the detector reports: findings, their identity and their lifecycle events.

use serde::{Deserialize, Serialize};

/// The rule that raised a finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RuleKind {
    NearCapacity,
    FillingUp,
    LeakSuspected,
    ExternalPressure,
    IdleHolder,
    ExitedHolder,
    SourceHealth,
}

impl RuleKind {
    /// Every rule, in the order the documentation lists them.
    pub const ALL: [RuleKind; 7] = [
        RuleKind::NearCapacity,
        RuleKind::FillingUp,
        RuleKind::LeakSuspected,
        RuleKind::ExternalPressure,
        RuleKind::IdleHolder,
        RuleKind::ExitedHolder,
        RuleKind::SourceHealth,
    ];

    /// When the rule fires and what it means, for the man page (thresholds are `[detect]`
    /// keys of the configuration; docs/DETECTION.md has the details).
    pub fn summary(self) -> &'static str {
        match self {
            RuleKind::NearCapacity => {
                "A GPU's used memory has been at least near-capacity-warn % of its total \
                 (critical from near-capacity-critical %), or less than near-capacity-headroom \
                 has been free, for near-capacity-min-duration. The next allocation on it may \
                 fail with out of memory."
            }
            RuleKind::FillingUp => {
                "The GPU's used memory ramps, driven by a process (or by memory no process \
                 accounts for) whose own memory ramps, and at that rate it would be full within \
                 filling-horizon. The finding gives the time to full and the processes driving \
                 it: a job will run out of memory unless it stops growing."
            }
            RuleKind::LeakSuspected => {
                "After its first leak-warmup, a process's memory has grown steadily for \
                 leak-sustain at leak-min-rate MiB/min or faster, without steps: it probably \
                 keeps tensors or caches without bound."
            }
            RuleKind::ExternalPressure => {
                "Memory held outside the watched processes (\"mine\", --watch) rose by \
                 external-rise within external-window, or leaves less free memory than the \
                 watched processes' growth needs over external-horizon. It names the holders \
                 in the way: someone else's job is squeezing yours."
            }
            RuleKind::IdleHolder => {
                "A process has held at least idle-min with 0 % SM utilisation for \
                 idle-duration: memory others could use (a finished notebook, a stuck job)."
            }
            RuleKind::ExitedHolder => {
                "A process gpuwatch saw has left /proc, and exited-grace later the driver still \
                 lists memory for it: the process is gone but its memory is not freed (a \
                 teardown that hangs, a context another process still holds). The finding names \
                 its last user and command; it resolves when the driver stops listing it."
            }
            RuleKind::SourceHealth => {
                "The driver cannot be read as it should: NVML calls fail, a GPU is lost (fell \
                 off the bus or is being reset) or samples are stale. What is on screen is \
                 incomplete; the message names the call."
            }
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RuleKind::NearCapacity => "near-capacity",
            RuleKind::FillingUp => "filling-up",
            RuleKind::LeakSuspected => "leak-suspected",
            RuleKind::ExternalPressure => "external-pressure",
            RuleKind::IdleHolder => "idle-holder",
            RuleKind::ExitedHolder => "exited-holder",
            RuleKind::SourceHealth => "source-health",
        }
    }
}

impl std::fmt::Display for RuleKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl std::fmt::Display for Severity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        })
    }
}

/// What makes two findings "the same" across evaluations: the rule, the GPU and, for
/// per-process rules, the process.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FindingId {
    pub rule: RuleKind,
    /// GPU UUID (empty for findings about the source as a whole).
    pub gpu: String,
    pub pid: Option<u32>,
}

/// A process a finding names (an intruder, a process driving growth).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Culprit {
    pub pid: u32,
    pub user: Option<String>,
    pub command: Option<String>,
    /// Its GPU memory now.
    pub used_bytes: Option<u64>,
    /// Its growth (bytes per second) where that is what it is named for.
    pub growth_bytes_per_s: Option<f64>,
}

/// One condition the detector found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub id: FindingId,
    pub severity: Severity,
    /// NVML index of the GPU (for messages).
    pub gpu_index: Option<u32>,
    /// When the condition started (unix seconds), as far as the history shows.
    pub since: f64,
    /// When this version of the finding was computed.
    pub at: f64,
    /// One line for a list or a chat message.
    pub summary: String,
    /// Predicted seconds until the GPU is full (filling-up, external pressure).
    pub time_to_full_s: Option<f64>,
    /// Growth rate in bytes per second (filling-up, leak).
    pub rate_bytes_per_s: Option<f64>,
    /// Memory involved, in bytes (what an idle holder would free, external memory, …).
    pub bytes: Option<u64>,
    /// External pressure: external memory when the finding opened (kept while it is open).
    pub baseline_bytes: Option<u64>,
    /// Memory no visible process accounts for, when it is part of the story.
    pub unattributed_bytes: Option<u64>,
    /// Processes the finding names.
    pub culprits: Vec<Culprit>,
    /// When the culprits were last judged (sample time), where a rule reuses them for a few
    /// seconds rather than judging every process on every frame. Not sent to sinks.
    #[serde(skip)]
    pub culprits_at: Option<f64>,
}

/// A finding's lifecycle, as sinks and front ends receive it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", content = "finding", rename_all = "lowercase")]
pub enum FindingEvent {
    Opened(Finding),
    Updated(Finding),
    Resolved(Finding),
}

impl FindingEvent {
    pub fn finding(&self) -> &Finding {
        match self {
            FindingEvent::Opened(f) | FindingEvent::Updated(f) | FindingEvent::Resolved(f) => f,
        }
    }

    /// `opened`, `updated` or `resolved`.
    pub fn kind(&self) -> &'static str {
        match self {
            FindingEvent::Opened(_) => "opened",
            FindingEvent::Updated(_) => "updated",
            FindingEvent::Resolved(_) => "resolved",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RuleKind;

    #[test]
    fn all_lists_every_rule_once() {
        // A new rule fails to compile here: add it to `RuleKind::ALL` (the man page's list).
        let position = |k: RuleKind| match k {
            RuleKind::NearCapacity => 0,
            RuleKind::FillingUp => 1,
            RuleKind::LeakSuspected => 2,
            RuleKind::ExternalPressure => 3,
            RuleKind::IdleHolder => 4,
            RuleKind::ExitedHolder => 5,
            RuleKind::SourceHealth => 6,
        };
        for (i, k) in RuleKind::ALL.iter().enumerate() {
            assert_eq!(position(*k), i, "{k}");
            assert!(!k.summary().is_empty());
        }
    }
}
