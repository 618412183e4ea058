//! Alert sinks: where finding events go besides the screen. Each sink runs on its own thread
//! behind a bounded queue, so a slow or failing sink never delays sampling or the dashboard;
//! what a full queue drops is counted.

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
