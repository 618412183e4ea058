//! The dispatcher: filters finding events (minimum severity, deduplication, rate limit) and
//! hands them to every sink's queue without ever blocking the caller.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::AlertOptions;
use super::sink::Sink;
use crate::detect::{FindingEvent, FindingId, RuleKind, Severity};

/// What one sink has done so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SinkStats {
    pub name: &'static str,
    /// Events the sink delivered.
    pub delivered: u64,
    /// Events the sink failed to deliver (after its own retries).
    pub failed: u64,
    /// Events dropped because the sink's queue was full (or its thread had stopped).
    pub dropped: u64,
    /// The sink's latest error, if any.
    pub last_error: Option<String>,
}

/// Counters shared between a sink's thread and [`Alerts::stats`].
#[derive(Default)]
struct Counters {
    delivered: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl Counters {
    fn fail(&self, error: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        *self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(error);
    }
}

struct Worker {
    name: &'static str,
    queue: SyncSender<Arc<FindingEvent>>,
    counters: Arc<Counters>,
    thread: JoinHandle<()>,
}

/// The alert dispatcher: one thread and one bounded queue per sink.
///
/// [`Alerts::send`] filters an event and offers it to every queue; a full queue drops the
/// event for that sink and counts it. Dropping `Alerts` closes the queues: each thread
/// delivers what is already queued and ends. [`Alerts::shutdown`] waits for that, up to a
/// grace period.
pub struct Alerts {
    gate: Mutex<Gate>,
    workers: Vec<Worker>,
}

impl Alerts {
    /// Builds the sinks `options` configures and starts their threads. An error names the
    /// option at fault (`alerts.jsonl: cannot open …`, `alerts.webhook: invalid URL …`).
    pub fn start(options: &AlertOptions) -> Result<Self, String> {
        let mut sinks: Vec<Box<dyn Sink>> = Vec::new();
        if options.log {
            sinks.push(Box::new(super::LogSink::new()));
        }
        if let Some(path) = &options.jsonl {
            let sink = super::JsonlSink::new(path).map_err(|e| format!("alerts.jsonl: {e}"))?;
            sinks.push(Box::new(sink));
        }
        if let Some(command) = &options.command {
            if command.trim().is_empty() {
                return Err("alerts.command: empty command".into());
            }
            sinks.push(Box::new(super::CommandSink::new(command.clone())));
        }
        if let Some(url) = &options.webhook {
            let sink =
                super::WebhookSink::new(url, options.webhook_timeout, options.webhook_retries)
                    .map_err(|e| format!("alerts.webhook: {e}"))?;
            sinks.push(Box::new(sink));
        }
        if options.desktop {
            #[cfg(feature = "desktop")]
            sinks.push(Box::new(super::DesktopSink::new()));
            #[cfg(not(feature = "desktop"))]
            return Err(
                "alerts.desktop: this gpuwatch was built without desktop notifications \
                 (cargo feature `desktop`)"
                    .into(),
            );
        }
        Self::with_sinks(sinks, options)
    }

    /// Runs the given sinks with the filters and queue size of `options` (its sink settings
    /// are ignored).
    pub fn with_sinks(sinks: Vec<Box<dyn Sink>>, options: &AlertOptions) -> Result<Self, String> {
        let mut workers = Vec::with_capacity(sinks.len());
        for sink in sinks {
            workers.push(spawn(sink, options.queue)?);
        }
        Ok(Self {
            gate: Mutex::new(Gate::new(options)),
            workers,
        })
    }

    /// Offers `event` to every sink, unless the filters hold it back. Never blocks: a full
    /// queue drops the event for that sink (counted in [`SinkStats::dropped`]).
    ///
    /// Filters, in order:
    /// - deduplication: an event with the same kind and content as the last one sent for
    ///   its finding (ignoring `at`, the time it was computed) is skipped;
    /// - minimum severity: `opened` and `updated` below it are skipped unless the finding
    ///   was already sent (then its downgrade is news); `resolved` is sent exactly when
    ///   the finding was sent, whatever its severity now;
    /// - rate limit: an `updated` with the severity last sent waits `rate_limit` after the
    ///   last `opened` or `updated` sent for the same rule on the same GPU (by the
    ///   findings' `at`); `opened` and `resolved` always pass.
    pub fn send(&self, event: &FindingEvent) {
        let admitted = self
            .gate
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .admit(event);
        if !admitted || self.workers.is_empty() {
            return;
        }
        let event = Arc::new(event.clone());
        for worker in &self.workers {
            match worker.queue.try_send(Arc::clone(&event)) {
                Ok(()) => {}
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                    worker.counters.dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Each sink's counters, in the order the sinks were configured.
    pub fn stats(&self) -> Vec<SinkStats> {
        self.workers
            .iter()
            .map(|w| stats_of(w.name, &w.counters))
            .collect()
    }

    /// Closes the queues and waits up to `grace` for the sinks to deliver what is queued;
    /// sinks still busy after that are left to finish on their own. Returns the final
    /// counters.
    pub fn shutdown(self, grace: Duration) -> Vec<SinkStats> {
        let deadline = Instant::now() + grace;
        let mut pending = Vec::with_capacity(self.workers.len());
        for worker in self.workers {
            drop(worker.queue);
            pending.push((worker.name, worker.counters, worker.thread));
        }
        let mut pause = Duration::from_millis(1);
        while pending.iter().any(|(_, _, t)| !t.is_finished()) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(20));
        }
        pending
            .into_iter()
            .map(|(name, counters, thread)| {
                if thread.is_finished() {
                    let _ = thread.join();
                }
                stats_of(name, &counters)
            })
            .collect()
    }
}

fn stats_of(name: &'static str, c: &Counters) -> SinkStats {
    SinkStats {
        name,
        delivered: c.delivered.load(Ordering::Relaxed),
        failed: c.failed.load(Ordering::Relaxed),
        dropped: c.dropped.load(Ordering::Relaxed),
        last_error: c
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone(),
    }
}

fn spawn(mut sink: Box<dyn Sink>, queue: usize) -> Result<Worker, String> {
    let name = sink.name();
    let (tx, rx) = sync_channel::<Arc<FindingEvent>>(queue);
    let counters = Arc::new(Counters::default());
    let shared = Arc::clone(&counters);
    let thread = thread::Builder::new()
        .name(format!("alert-{name}"))
        .spawn(move || run(sink.as_mut(), &rx, &shared))
        .map_err(|e| format!("alerts: cannot start the {name} sink's thread: {e}"))?;
    Ok(Worker {
        name,
        queue: tx,
        counters,
        thread,
    })
}

/// A sink's thread: delivers until the queue closes. A panicking sink counts as a failure
/// and keeps its thread.
fn run(sink: &mut dyn Sink, queue: &Receiver<Arc<FindingEvent>>, counters: &Counters) {
    for event in queue {
        match catch_unwind(AssertUnwindSafe(|| sink.deliver(&event))) {
            Ok(Ok(())) => {
                counters.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Err(error)) => counters.fail(error),
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(ToString::to_string)
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                counters.fail(format!("{}: panicked: {what}", sink.name()));
            }
        }
    }
}

/// The filters of [`Alerts::send`], with the time taken from the events (`finding.at`).
struct Gate {
    min_severity: Severity,
    rate_limit: f64,
    /// The last event sent per finding still open as far as the sinks know.
    sent: HashMap<FindingId, FindingEvent>,
    /// When an `opened` or `updated` was last sent per (rule, GPU UUID).
    last_per_gpu: HashMap<(RuleKind, String), f64>,
}

impl Gate {
    fn new(options: &AlertOptions) -> Self {
        Self {
            min_severity: options.min_severity,
            rate_limit: options.rate_limit.as_secs_f64(),
            sent: HashMap::new(),
            last_per_gpu: HashMap::new(),
        }
    }

    /// Whether `event` goes to the sinks; records it if so.
    fn admit(&mut self, event: &FindingEvent) -> bool {
        let finding = event.finding();
        let id = &finding.id;
        if let FindingEvent::Resolved(_) = event {
            return self.sent.remove(id).is_some();
        }
        let last = self.sent.get(id);
        if last.is_some_and(|last| same_content(last, event)) {
            return false;
        }
        if last.is_none() && finding.severity < self.min_severity {
            return false;
        }
        let key = (id.rule, id.gpu.clone());
        let now = finding.at;
        if let (FindingEvent::Updated(_), Some(last)) = (event, last) {
            let severity_changed = last.finding().severity != finding.severity;
            let elapsed = self.last_per_gpu.get(&key).map(|t| now - t);
            if !severity_changed && elapsed.is_some_and(|e| (0.0..self.rate_limit).contains(&e)) {
                return false;
            }
        }
        self.last_per_gpu.insert(key, now);
        self.sent.insert(id.clone(), event.clone());
        true
    }
}

/// The same kind of event about the same finding content, whenever it was computed.
fn same_content(a: &FindingEvent, b: &FindingEvent) -> bool {
    if a.kind() != b.kind() {
        return false;
    }
    let mut a = a.finding().clone();
    a.at = b.finding().at;
    a == *b.finding()
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;
    use crate::alert::test_support::{event, finding};

    fn options() -> AlertOptions {
        AlertOptions {
            min_severity: Severity::Warning,
            rate_limit: Duration::from_mins(1),
            queue: 2,
            ..AlertOptions::default()
        }
    }

    fn ev(kind: &str, rule: RuleKind, gpu: &str, severity: Severity, at: f64) -> FindingEvent {
        event(kind, finding(rule, gpu, Some(0), severity, at))
    }

    use RuleKind::{FillingUp, LeakSuspected, NearCapacity};
    use Severity::{Critical, Info, Warning};

    #[test]
    fn alerts_can_be_shared_between_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<Alerts>();
    }

    #[test]
    fn identical_events_are_sent_once() {
        let mut gate = Gate::new(&options());
        let opened = ev("opened", NearCapacity, "a", Warning, 0.0);
        assert!(gate.admit(&opened));
        // The same content computed later is still a duplicate…
        let mut again = opened.clone();
        if let FindingEvent::Opened(f) = &mut again {
            f.at = 500.0;
        }
        assert!(!gate.admit(&again));
        // …an update with the same content too (the rate limit has passed by then)…
        let mut update = finding(NearCapacity, "a", Some(0), Warning, 100.0);
        update.summary = "94% used".into();
        assert!(gate.admit(&event("updated", update.clone())));
        update.at = 200.0;
        assert!(!gate.admit(&event("updated", update.clone())));
        // …but changed content is not.
        update.at = 300.0;
        update.summary = "95% used".into();
        assert!(gate.admit(&event("updated", update)));
        let resolved = ev("resolved", NearCapacity, "a", Warning, 400.0);
        assert!(gate.admit(&resolved));
        assert!(!gate.admit(&resolved), "resolved twice");
        // A new lifecycle of the same finding is news again.
        assert!(gate.admit(&opened));
    }

    #[test]
    fn min_severity_pairs_resolved_with_opened() {
        let mut gate = Gate::new(&options());
        // Opened below the minimum: neither it nor its resolution is sent.
        assert!(!gate.admit(&ev("opened", FillingUp, "a", Info, 0.0)));
        assert!(!gate.admit(&ev("resolved", FillingUp, "a", Info, 10.0)));
        // Opened at the minimum, resolved after a downgrade below it: both sent, and the
        // downgrade too (the sinks were told it mattered).
        assert!(gate.admit(&ev("opened", FillingUp, "b", Warning, 0.0)));
        assert!(gate.admit(&ev("updated", FillingUp, "b", Info, 10.0)));
        assert!(gate.admit(&ev("resolved", FillingUp, "b", Info, 20.0)));
        // Opened below, escalated by an update: the update is sent, and so is the end.
        assert!(!gate.admit(&ev("opened", FillingUp, "c", Info, 0.0)));
        assert!(!gate.admit(&ev("updated", FillingUp, "c", Info, 100.0)));
        assert!(gate.admit(&ev("updated", FillingUp, "c", Critical, 200.0)));
        assert!(gate.admit(&ev("resolved", FillingUp, "c", Info, 300.0)));
    }

    #[test]
    fn updates_are_rate_limited_per_rule_and_gpu() {
        let mut gate = Gate::new(&options());
        let update = |gpu: &str, at: f64| {
            let mut f = finding(LeakSuspected, gpu, Some(0), Warning, at);
            f.summary = format!("at {at}");
            event("updated", f)
        };
        assert!(gate.admit(&ev("opened", LeakSuspected, "a", Warning, 0.0)));
        assert!(gate.admit(&ev("opened", LeakSuspected, "b", Warning, 30.0)));
        assert!(gate.admit(&ev("opened", NearCapacity, "a", Warning, 30.0)));
        // GPU a: the opened at 0 starts the window; other GPUs and rules do not move it.
        assert!(!gate.admit(&update("a", 59.0)));
        assert!(gate.admit(&update("a", 60.0)));
        assert!(!gate.admit(&update("a", 119.0)));
        assert!(gate.admit(&update("a", 120.0)));
        // GPU b has its own window (from its opened at 30).
        assert!(!gate.admit(&update("b", 60.0)));
        assert!(gate.admit(&update("b", 90.0)));
        // A severity change is not held back.
        assert!(gate.admit(&ev("updated", LeakSuspected, "a", Critical, 121.0)));
        // Opened and resolved always pass.
        assert!(gate.admit(&ev("resolved", LeakSuspected, "a", Critical, 122.0)));
        assert!(gate.admit(&ev("opened", LeakSuspected, "a", Warning, 123.0)));
    }

    /// Records events; blocks in each delivery until released when built with a gate.
    struct TestSink {
        seen: Arc<Mutex<Vec<FindingEvent>>>,
        started: Option<mpsc::Sender<()>>,
        release: Option<mpsc::Receiver<()>>,
    }

    impl Sink for TestSink {
        fn name(&self) -> &'static str {
            "test"
        }
        fn deliver(&mut self, event: &FindingEvent) -> Result<(), String> {
            if let Some(started) = &self.started {
                let _ = started.send(());
            }
            if let Some(release) = &self.release {
                let _ = release.recv();
            }
            self.seen.lock().unwrap().push(event.clone());
            if event.finding().summary == "fail" {
                return Err("asked to fail".into());
            }
            Ok(())
        }
    }

    fn opened(pid: u32) -> FindingEvent {
        let mut f = finding(LeakSuspected, "a", Some(0), Critical, f64::from(pid));
        f.id.pid = Some(pid);
        event("opened", f)
    }

    #[test]
    fn delivers_in_order_and_counts_failures() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = TestSink {
            seen: Arc::clone(&seen),
            started: None,
            release: None,
        };
        let alerts = Alerts::with_sinks(vec![Box::new(sink)], &options()).unwrap();
        alerts.send(&opened(1));
        alerts.send(&ev("opened", FillingUp, "a", Info, 0.0)); // below the minimum
        let mut failing = finding(FillingUp, "b", Some(1), Critical, 0.0);
        failing.summary = "fail".into();
        alerts.send(&event("opened", failing));
        let stats = alerts.shutdown(Duration::from_secs(5));
        assert_eq!(
            stats,
            vec![SinkStats {
                name: "test",
                delivered: 1,
                failed: 1,
                dropped: 0,
                last_error: Some("asked to fail".into()),
            }]
        );
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0], opened(1));
    }

    #[test]
    fn a_blocked_sink_drops_and_counts_without_blocking_send() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (started_tx, started_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel();
        let sink = TestSink {
            seen: Arc::clone(&seen),
            started: Some(started_tx),
            release: Some(release_rx),
        };
        let alerts = Alerts::with_sinks(vec![Box::new(sink)], &options()).unwrap();
        alerts.send(&opened(1));
        started_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        // The sink holds event 1; the queue (2) takes two more; the rest are dropped.
        let begun = Instant::now();
        for pid in 2..=10 {
            alerts.send(&opened(pid));
        }
        let took = begun.elapsed();
        assert!(took < Duration::from_millis(50), "send took {took:?}");
        let stats = alerts.stats();
        assert_eq!((stats[0].delivered, stats[0].dropped), (0, 7));
        for _ in 0..3 {
            release_tx.send(()).unwrap();
        }
        let stats = alerts.shutdown(Duration::from_secs(5));
        assert_eq!(
            (stats[0].delivered, stats[0].failed, stats[0].dropped),
            (3, 0, 7)
        );
        let pids: Vec<_> = seen
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.finding().id.pid)
            .collect();
        assert_eq!(pids, vec![Some(1), Some(2), Some(3)]);
    }

    #[test]
    fn shutdown_gives_up_after_the_grace_period() {
        let (started_tx, started_rx) = mpsc::channel();
        let (_release_tx, release_rx) = mpsc::channel::<()>();
        let sink = TestSink {
            seen: Arc::default(),
            started: Some(started_tx),
            release: Some(release_rx),
        };
        let alerts = Alerts::with_sinks(vec![Box::new(sink)], &options()).unwrap();
        alerts.send(&opened(1));
        started_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        let begun = Instant::now();
        let stats = alerts.shutdown(Duration::from_millis(50));
        assert!(begun.elapsed() < Duration::from_secs(2));
        assert_eq!(stats[0].delivered, 0);
    }

    #[test]
    fn bad_options_are_named() {
        let opts = AlertOptions {
            log: false,
            webhook: Some("hooks.example.com/x".into()),
            ..AlertOptions::default()
        };
        let err = Alerts::start(&opts).err().unwrap();
        assert!(err.starts_with("alerts.webhook: invalid URL"), "{err}");
        let opts = AlertOptions {
            log: false,
            jsonl: Some("/nonexistent-dir/events.jsonl".into()),
            ..AlertOptions::default()
        };
        let err = Alerts::start(&opts).err().unwrap();
        assert!(
            err.starts_with("alerts.jsonl: cannot open /nonexistent-dir/events.jsonl"),
            "{err}"
        );
        #[cfg(not(feature = "desktop"))]
        {
            let opts = AlertOptions {
                log: false,
                desktop: true,
                ..AlertOptions::default()
            };
            assert!(
                Alerts::start(&opts)
                    .err()
                    .unwrap()
                    .starts_with("alerts.desktop")
            );
        }
    }
}
