//! Where samples come from. A [`GpuSource`] is owned by the sampler thread and called with
//! blocking calls; consumers never touch a source.
//!
//! - [`nvml::NvmlSource`]: the NVIDIA driver through `nvml-wrapper`.
//! - [`scripted::ScriptedSource`]: a scenario file (`--demo`).
//! - [`replay::ReplaySource`]: a recording written by `gpuwatch record`.

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
}

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

/// Shared record of the call in progress. Cheap: one uncontended lock per call.
#[derive(Debug, Clone, Default)]
pub struct CallProbe {
    current: Arc<Mutex<Option<InFlight>>>,
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

    /// The call in progress, if any.
    pub fn in_flight(&self) -> Option<InFlight> {
        self.current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set(&self, value: Option<InFlight>) {
        *self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = value;
    }
}
