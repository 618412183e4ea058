//! Where samples come from. A [`GpuSource`] is owned by the sampler thread and called with
//! blocking calls; consumers never touch a source.
//!
//! - [`nvml::NvmlSource`]: the NVIDIA driver through `nvml-wrapper`.
//! - [`scripted::ScriptedSource`]: a scenario file (`--demo`).
//! - [`replay::ReplaySource`]: a recording written by `gpuwatch record`.

pub mod hostsummary;
pub mod nvml;
pub mod procdetail;
pub mod procinfo;
pub mod replay;
pub mod scripted;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::model::{Sample, SlowReadings, SourceInfo};

/// A producer of samples. All methods may block; they run on the sampler's threads.
pub trait GpuSource: Send {
    /// Facts that do not change between samples.
    fn info(&self) -> SourceInfo;

    /// Takes the fast-cadence sample: memory, utilisation, processes, process utilisation.
    /// Failures are data (in `Sample::errors` / `GpuSample::errors`), never a panic.
    fn sample(&mut self, probe: &CallProbe) -> Sample;

    /// A handle that takes the slow-cadence readings (expensive calls) on another thread so
    /// they never delay the fast sample. `None`: the source has no slow readings of its own
    /// (scripted and replayed samples carry them already).
    fn slow_sampler(&mut self) -> Option<Box<dyn SlowSampler>> {
        None
    }

    /// Whether the sampler should enrich processes from this host's `/proc`.
    fn wants_host_enrichment(&self) -> bool {
        false
    }

    /// How long to wait before the next sample, when the source sets its own pace (a replay
    /// follows its recording); `None` uses the configured interval.
    fn next_delay(&self) -> Option<Duration> {
        None
    }

    /// The source has nothing more to give (a replay reached its end).
    fn finished(&self) -> bool {
        false
    }

    /// The source's own past, when it has one (a scenario's timeline before where it starts):
    /// samples every `step` over the `span` before now, oldest first, stamped as if taken then.
    /// Front ends run them through their analysis before the first live sample, so the history
    /// and the detector start as if gpuwatch had been running. Empty for a live GPU.
    fn past(&self, span: Duration, step: Duration) -> Vec<Sample> {
        let _ = (span, step);
        Vec::new()
    }
}

/// How much of a source's past front ends run through their analysis at start
/// ([`GpuSource::past`]): longer than the idle-holder rule's 10 minutes and the leak rule's
/// warm-up and sustain (6 minutes), so the demo's stories are all on screen at once.
pub const PREROLL: Duration = Duration::from_mins(11);

/// Takes slow-cadence readings, keyed by GPU UUID.
pub trait SlowSampler: Send {
    fn sample_slow(&mut self, probe: &CallProbe) -> Vec<(String, SlowReadings)>;
}

/// The call a sampler thread is blocked in, if any: lets consumers say *which* call hangs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlight {
    pub call: &'static str,
    pub gpu: Option<u32>,
    pub since: Instant,
}

impl InFlight {
    /// How long the call has been running at `now`.
    pub fn elapsed(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.since)
    }

    /// `memory_info on GPU 1 has not returned for 20 s`: the one wording of a stuck call, for
    /// every front end.
    pub fn describe(&self, now: Instant) -> String {
        format!(
            "{}{} has not returned for {:.0} s",
            self.call,
            self.gpu.map(|g| format!(" on GPU {g}")).unwrap_or_default(),
            self.elapsed(now).as_secs_f64()
        )
    }

    /// Whether the call has run long enough to call it stuck rather than slow (a healthy call
    /// takes microseconds; the slowest ones, milliseconds).
    pub fn is_stuck(&self, now: Instant) -> bool {
        self.elapsed(now) >= STUCK_AFTER
    }
}

/// How long a call runs before front ends report it as stuck.
pub const STUCK_AFTER: Duration = Duration::from_secs(1);

/// Shared record of the calls in progress: one slot per thread that makes calls (the fast
/// sampler, the slow sampler, each GPU's worker), so a hung call on one GPU stays visible while
/// the others go on. Cheap: one uncontended lock per call.
#[derive(Debug, Clone)]
pub struct CallProbe {
    slots: Arc<Mutex<Vec<Option<InFlight>>>>,
    slot: usize,
}

impl Default for CallProbe {
    fn default() -> Self {
        Self {
            slots: Arc::new(Mutex::new(vec![None])),
            slot: 0,
        }
    }
}

impl CallProbe {
    /// Runs `f` as the named call on the given GPU, recording it as in flight meanwhile.
    pub fn call<T>(&self, call: &'static str, gpu: Option<u32>, f: impl FnOnce() -> T) -> T {
        self.set(Some(InFlight {
            call,
            gpu,
            since: Instant::now(),
        }));
        let out = f();
        self.set(None);
        out
    }

    /// A probe for another thread: its own slot in the same record, so that
    /// [`in_flight`](Self::in_flight) on any of them sees its calls too.
    #[must_use]
    pub fn slot(&self) -> CallProbe {
        let mut slots = self.lock();
        slots.push(None);
        CallProbe {
            slots: Arc::clone(&self.slots),
            slot: slots.len() - 1,
        }
    }

    /// The call in progress longest, on any slot of this record.
    pub fn in_flight(&self) -> Option<InFlight> {
        self.lock()
            .iter()
            .flatten()
            .min_by_key(|f| f.since)
            .cloned()
    }

    /// Every call in progress on this record, longest first.
    pub fn all(&self) -> Vec<InFlight> {
        let mut out: Vec<InFlight> = self.lock().iter().flatten().cloned().collect();
        out.sort_by_key(|f| f.since);
        out
    }

    /// The call in progress on this probe's own slot.
    pub fn own(&self) -> Option<InFlight> {
        self.lock().get(self.slot).cloned().flatten()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Option<InFlight>>> {
        self.slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn set(&self, value: Option<InFlight>) {
        if let Some(slot) = self.lock().get_mut(self.slot) {
            *slot = value;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_report_the_oldest_call_and_their_own() {
        let probe = CallProbe::default();
        let worker = probe.slot();
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let w = worker.clone();
        let t = std::thread::spawn(move || {
            w.call("memory_info", Some(1), || {
                tx.send(()).unwrap();
                done_rx.recv().unwrap();
            });
        });
        rx.recv().unwrap();
        // The fast slot finishing a call does not clear the worker's.
        probe.call("device_count", None, || ());
        let f = probe.in_flight().expect("the worker's call is seen");
        assert_eq!((f.call, f.gpu), ("memory_info", Some(1)));
        assert_eq!(probe.own(), None);
        assert_eq!(worker.own().map(|f| f.call), Some("memory_info"));
        done_tx.send(()).unwrap();
        t.join().unwrap();
        assert_eq!(probe.in_flight(), None);
    }
}
