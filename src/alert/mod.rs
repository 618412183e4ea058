//! Alert sinks: where finding events go besides the screen. Each sink runs on its own thread
//! behind a bounded queue, so a slow or failing sink never delays sampling or the dashboard;
//! what a full queue drops is counted.
//!
//! [`Alerts`] is the dispatcher: it filters events (minimum severity, deduplication, a rate
//! limit per rule and GPU) and offers them to each [`Sink`]'s bounded queue with `try_send`.
//! Sinks: [`LogSink`] (stderr), [`JsonlSink`] (a JSON-lines file), [`CommandSink`] (`sh -c`
//! with `GPUWATCH_*` variables), [`WebhookSink`] (POST JSON with a `text` field, retries
//! with backoff) and, with the cargo feature `desktop`, `DesktopSink`.

pub mod command;
#[cfg(feature = "desktop")]
pub mod desktop;
pub mod dispatch;
pub mod jsonl;
pub mod log;
pub mod sink;
pub mod webhook;

pub use command::CommandSink;
#[cfg(feature = "desktop")]
pub use desktop::DesktopSink;
pub use dispatch::{Alerts, SinkStats};
pub use jsonl::JsonlSink;
pub use log::LogSink;
pub use sink::{Sink, event_json, event_line};
pub use webhook::WebhookSink;

use std::path::PathBuf;
use std::time::Duration;

use crate::detect::Severity;

/// Which sinks run and how (the config file's `[alerts]` section).
#[derive(Debug, Clone, PartialEq)]
pub struct AlertOptions {
    /// One log line per event on stderr (the daemon's log).
    pub log: bool,
    /// Append events as JSON lines to this file.
    pub jsonl: Option<PathBuf>,
    /// Run this command (through `sh -c`) per event, with the finding in `GPUWATCH_*` variables.
    pub command: Option<String>,
    /// POST each event as JSON (with a `text` field for Slack/Mattermost) to this URL.
    pub webhook: Option<String>,
    pub webhook_timeout: Duration,
    /// Retries after a failed POST, with exponential backoff from 1 s.
    pub webhook_retries: u32,
    /// Desktop notifications (only in builds with the `desktop` feature).
    pub desktop: bool,
    /// Events below this severity are not sent to sinks (they still show on screen).
    pub min_severity: Severity,
    /// An `updated` event of the same rule on the same GPU is sent at most this often.
    pub rate_limit: Duration,
    /// Events waiting per sink before new ones are dropped (and counted).
    pub queue: usize,
}

impl Default for AlertOptions {
    fn default() -> Self {
        Self {
            log: true,
            jsonl: None,
            command: None,
            webhook: None,
            webhook_timeout: Duration::from_secs(5),
            webhook_retries: 3,
            desktop: false,
            min_severity: Severity::Warning,
            rate_limit: Duration::from_mins(1),
            queue: 64,
        }
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use crate::detect::{Finding, FindingEvent, FindingId, RuleKind, Severity};

    pub fn finding(
        rule: RuleKind,
        gpu: &str,
        gpu_index: Option<u32>,
        severity: Severity,
        at: f64,
    ) -> Finding {
        Finding {
            id: FindingId {
                rule,
                gpu: gpu.into(),
                pid: None,
            },
            severity,
            gpu_index,
            since: 0.0,
            at,
            summary: format!("{rule} on {gpu}"),
            time_to_full_s: None,
            rate_bytes_per_s: None,
            bytes: None,
            baseline_bytes: None,
            unattributed_bytes: None,
            culprits: Vec::new(),
            culprits_at: None,
        }
    }

    pub fn event(kind: &str, finding: Finding) -> FindingEvent {
        match kind {
            "opened" => FindingEvent::Opened(finding),
            "updated" => FindingEvent::Updated(finding),
            "resolved" => FindingEvent::Resolved(finding),
            other => panic!("no event kind {other}"),
        }
    }
}
