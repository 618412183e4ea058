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
