//! The desktop sink (cargo feature `desktop`): one notification per event through the
//! desktop's notification service (D-Bus on Linux, via `notify-rust`).

use notify_rust::Notification;

use super::sink::Sink;
use crate::detect::FindingEvent;

/// Shows a notification per event: the rule, event and GPU as its title, the summary as its
/// body; critical findings are marked urgent where the platform knows urgency.
#[derive(Debug, Default)]
pub struct DesktopSink;

impl DesktopSink {
    pub fn new() -> Self {
        Self
    }
}

impl Sink for DesktopSink {
    fn name(&self) -> &'static str {
        "desktop"
    }

    fn deliver(&mut self, event: &FindingEvent) -> Result<(), String> {
        let f = event.finding();
        let gpu = f
            .gpu_index
            .map(|i| format!(" on GPU {i}"))
            .unwrap_or_default();
        let mut note = Notification::new();
        note.appname("gpuwatch")
            .summary(&format!(
                "{} {}{gpu} ({})",
                f.id.rule,
                event.kind(),
                f.severity
            ))
            // The body may be markup (`<a href>`, `<img>`) and the summary names processes.
            .body(&crate::text::for_markup(&f.summary));
        #[cfg(all(unix, not(target_os = "macos")))]
        note.urgency(match (event, f.severity) {
            (FindingEvent::Resolved(_), _) => notify_rust::Urgency::Low,
            (_, crate::detect::Severity::Critical) => notify_rust::Urgency::Critical,
            _ => notify_rust::Urgency::Normal,
        });
        note.show()
            .map(drop)
            .map_err(|e| format!("desktop: cannot show a notification: {e}"))
    }
}
