//! The [`Sink`] trait every alert destination implements, and the message formats they share:
//! one human line per event and one JSON object per event.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::detect::FindingEvent;
use crate::text::clean;

/// One alert destination. [`crate::alert::Alerts`] runs each sink on its own thread and calls
/// [`Sink::deliver`] once per event, in order; a sink may block (a slow webhook, a long
/// command) without delaying anyone but itself.
pub trait Sink: Send {
    /// A short name for stats and error messages (`log`, `jsonl`, `command`, `webhook`, …).
    fn name(&self) -> &'static str;

    /// Delivers one event. An error is counted and kept as the sink's last error; the next
    /// event is delivered as usual.
    fn deliver(&mut self, event: &FindingEvent) -> Result<(), String>;
}

/// One line a human reads: `[critical] filling-up opened on GPU 1: <summary>`.
///
/// The GPU is named by its index when known, else by its UUID; findings about the source as
/// a whole (no GPU) name none. Summaries name processes: the line is [`clean`]ed (one line,
/// no control characters); the JSON keeps the raw texts.
pub fn event_line(event: &FindingEvent) -> String {
    let finding = event.finding();
    let gpu = match (finding.gpu_index, finding.id.gpu.as_str()) {
        (Some(index), _) => format!(" on GPU {index}"),
        (None, "") => String::new(),
        (None, uuid) => format!(" on GPU {}", clean(uuid)),
    };
    format!(
        "[{}] {} {}{gpu}: {}",
        finding.severity,
        finding.id.rule,
        event.kind(),
        clean(&finding.summary)
    )
}

/// The event as one JSON object: `{"event": "opened", "finding": {...}, "at": <unix>}`, where
/// `at` is when the sink handled it (unix seconds, millisecond precision) and the finding's
/// own `at` is when the detector computed it.
pub fn event_json(event: &FindingEvent) -> serde_json::Value {
    serde_json::json!({
        "event": event.kind(),
        "finding": event.finding(),
        "at": unix_now(),
    })
}

/// Wall-clock unix seconds, rounded to milliseconds.
pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| (d.as_millis() as f64) / 1000.0)
}
