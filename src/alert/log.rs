//! The log sink: one plain line per event on stderr, for the daemon's log (journald keeps
//! it as is: no colour, no timestamp of our own).

use std::io::Write;

use super::sink::{Sink, event_line};
use crate::detect::FindingEvent;

/// Writes `gpuwatch: [critical] filling-up opened on GPU 1: <summary>` per event.
pub struct LogSink {
    out: Box<dyn Write + Send>,
}

impl LogSink {
    /// A sink writing to stderr.
    pub fn new() -> Self {
        Self::with_writer(Box::new(std::io::stderr()))
    }

    /// A sink writing to `out` (tests, or a log file of the caller's).
    pub fn with_writer(out: Box<dyn Write + Send>) -> Self {
        Self { out }
    }
}

impl Default for LogSink {
    fn default() -> Self {
        Self::new()
    }
}

impl Sink for LogSink {
    fn name(&self) -> &'static str {
        "log"
    }

    fn deliver(&mut self, event: &FindingEvent) -> Result<(), String> {
        // One write per line so lines from other threads do not interleave with it.
        let line = format!("gpuwatch: {}\n", event_line(event));
        self.out
            .write_all(line.as_bytes())
            .and_then(|()| self.out.flush())
            .map_err(|e| format!("log: cannot write: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::alert::test_support::{event, finding};
    use crate::detect::{RuleKind, Severity};

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_hostile_name_stays_on_one_line_and_off_the_terminal() {
        let buf = Shared::default();
        let mut sink = LogSink::with_writer(Box::new(buf.clone()));
        let mut f = finding(
            RuleKind::FillingUp,
            "GPU-\u{202e}a",
            None,
            Severity::Critical,
            0.0,
        );
        f.summary = "pid 7 (evil\x1b]0;t\x07\ngpuwatch: [info] forged)".into();
        sink.deliver(&event("opened", f)).unwrap();
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text,
            "gpuwatch: [critical] filling-up opened on GPU GPU-\\u{202e}a: \
             pid 7 (evil\\e]0;t\\x07\\ngpuwatch: [info] forged)\n"
        );
    }

    #[test]
    fn one_plain_line_per_event() {
        let buf = Shared::default();
        let mut sink = LogSink::with_writer(Box::new(buf.clone()));
        let mut f = finding(
            RuleKind::FillingUp,
            "GPU-a",
            Some(1),
            Severity::Critical,
            0.0,
        );
        f.summary = "full in 4 min".into();
        sink.deliver(&event("opened", f.clone())).unwrap();
        f.gpu_index = None;
        sink.deliver(&event("resolved", f.clone())).unwrap();
        f.id.gpu = String::new();
        f.id.rule = RuleKind::SourceHealth;
        f.severity = Severity::Warning;
        f.summary = "NVML unavailable".into();
        sink.deliver(&event("updated", f)).unwrap();
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text,
            "gpuwatch: [critical] filling-up opened on GPU 1: full in 4 min\n\
             gpuwatch: [critical] filling-up resolved on GPU GPU-a: full in 4 min\n\
             gpuwatch: [warning] source-health updated: NVML unavailable\n"
        );
    }
}
