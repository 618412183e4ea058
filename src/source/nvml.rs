//! The live source: the NVIDIA driver through `nvml-wrapper`.
//!
//! Follows DESIGN §3 to the letter:
//! - unavailable values (`NotSupported`, `NoPermission`, NVML's not-available marker, a failed
//!   call) are `None`, never 0; a call that answered `NotSupported` or `NoPermission` once is not
//!   asked again in this session (on an H200 a `NotSupported` answer still costs up to 0.1 ms);
//! - one failing call marks its field unavailable and never aborts the sample;
//! - per-process utilisation is asked with the newest timestamp seen on that device, and
//!   `NotFound` means "no samples in the window" (0 % for every process);
//! - compute, graphics and MPS process lists are merged by PID;
//! - a lost GPU or an unloaded driver is reported in the sample, and NVML is re-initialised
//!   with exponential backoff.
//!
//! Expensive calls (PCIe throughput ≈ 20 ms, total energy ≈ 3 ms per GPU on an H200) are taken
//! by a [`SlowSampler`] on its own thread, sharing the NVML session, so they never delay the
//! fast sample.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsStr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant, SystemTime};

use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, TemperatureSensor, TemperatureThreshold,
};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper::{Device, Nvml};

use super::{CallProbe, GpuSource, SlowSampler};
use crate::model::{
    CallError, GpuSample, HostProc, Memory, MigDeviceSample, MigMode, ProcKind, ProcSample, Sample,
    SlowReadings, SourceInfo, SourceKind,
};

/// The library the driver installs.
pub const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";

/// How the live source is set up.
#[derive(Debug, Clone)]
pub struct NvmlOptions {
    /// Path of `libnvidia-ml.so.1` (or the test double); `None` = the system's.
    pub library: Option<PathBuf>,
    /// Longest wait between re-initialisation attempts.
    pub reinit_backoff_max: Duration,
    /// How long a sample waits for a GPU's worker before showing that GPU as stuck in its
    /// call (the others are not held back longer). The sampling interval suits.
    pub gpu_deadline: Duration,
}

impl Default for NvmlOptions {
    fn default() -> Self {
        Self {
            library: None,
            reinit_backoff_max: Duration::from_secs(30),
            gpu_deadline: Duration::from_secs(1),
        }
    }
}

/// Why the live source could not start.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(
        "no NVIDIA driver found (could not load {library}): {detail}; to try gpuwatch without a GPU run: gpuwatch --demo"
    )]
    NoLibrary { library: String, detail: String },
    #[error(
        "the NVIDIA kernel driver is not loaded ({library} loaded, but NVML answered DriverNotLoaded); to try gpuwatch without a GPU run: gpuwatch --demo"
    )]
    DriverNotLoaded { library: String },
    #[error(
        "permission denied by NVML ({library}): this user may not open /dev/nvidia*; check the device files' group, or run gpuwatch --demo"
    )]
    NoPermission { library: String },
    #[error("no NVIDIA GPUs found (the driver {driver} is loaded but reports 0 devices)")]
    NoGpus { driver: String },
    #[error("NVML could not start ({library}): {detail}")]
    Other { library: String, detail: String },
}

/// A short name for an NVML error, as shown to users and exported as a label.
pub fn error_name(e: &NvmlError) -> String {
    match e {
        NvmlError::LibloadingError(inner) => format!("LibloadingError: {inner}"),
        NvmlError::FailedToLoadSymbol(s) => format!("FailedToLoadSymbol: {s}"),
        NvmlError::InsufficientSize(_) => "InsufficientSize".to_string(),
        NvmlError::UnexpectedVariant(v) => format!("UnexpectedVariant({v})"),
        other => {
            let debug = format!("{other:?}");
            debug
                .split(['(', ' ', '{'])
                .next()
                .unwrap_or(&debug)
                .to_string()
        }
    }
}

/// Errors that mean the NVML session itself is gone.
fn is_session_error(e: &NvmlError) -> bool {
    matches!(
        e,
        NvmlError::Uninitialized
            | NvmlError::DriverNotLoaded
            | NvmlError::LibRmVersionMismatch
            | NvmlError::LibloadingError(_)
    )
}

/// The NVML session shared by the fast and the slow sampler, replaced on re-initialisation.
#[derive(Default)]
struct Session {
    nvml: Mutex<Option<Arc<Nvml>>>,
}

impl Session {
    fn get(&self) -> Option<Arc<Nvml>> {
        self.nvml
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, nvml: Option<Arc<Nvml>>) {
        *self.nvml.lock().unwrap_or_else(PoisonError::into_inner) = nvml;
    }
}

/// What identifies a GPU to users and to every consumer (series labels, history rows, findings):
/// kept across re-initialisations, so a GPU that is lost keeps the name it had.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Identity {
    uuid: Option<String>,
    name: Option<String>,
    pci_bus_id: Option<String>,
}

impl Identity {
    /// Takes what `newer` knows, keeping what it does not.
    fn update(&mut self, newer: &Identity) {
        self.merge(newer, true);
    }

    /// Takes what `other` knows and this does not.
    fn fill(&mut self, other: &Identity) {
        self.merge(other, false);
    }

    /// Each field of `other` that is known replaces this one's: always (`overwrite`) or only
    /// where this one is unknown.
    fn merge(&mut self, other: &Identity, overwrite: bool) {
        for (mine, theirs) in [
            (&mut self.uuid, &other.uuid),
            (&mut self.name, &other.name),
            (&mut self.pci_bus_id, &other.pci_bus_id),
        ] {
            if theirs.is_some() && (overwrite || mine.is_none()) {
                mine.clone_from(theirs);
            }
        }
    }

    /// A sample of this GPU with nothing but its identity known.
    fn empty_sample(&self, index: u32) -> GpuSample {
        let mut g = GpuSample::empty(index, self.uuid.clone().unwrap_or_default());
        g.name.clone_from(&self.name);
        g.pci_bus_id.clone_from(&self.pci_bus_id);
        g
    }
}

/// What a GPU's worker remembers about its GPU across samples of one session.
#[derive(Debug, Default, Clone)]
struct GpuMemo {
    id: Identity,
    temp_slowdown: Option<u32>,
    /// Whether the static thresholds were read this session.
    thresholds_read: bool,
    /// Calls that answered `NotSupported`/`NoPermission`: not asked again this session.
    unavailable: HashSet<&'static str>,
    /// Newest process-utilisation timestamp seen (µs).
    last_seen_us: u64,
}

/// One GPU as the source follows it: its identity and its worker thread. A GPU the driver no
/// longer enumerates keeps its slot (shown lost, under its last identity).
struct GpuSlot {
    /// Stable key of this slot (workers answer with it).
    key: usize,
    id: Identity,
    /// NVML index in the current enumeration; `None`: no longer enumerated (removed).
    index: Option<u32>,
    /// The index shown: the current one, or the last one it had.
    shown_index: u32,
    worker: Option<Worker>,
    /// When the request now outstanding was sent.
    busy: Option<Instant>,
}

/// A GPU's sampling thread: a hung call on its GPU blocks only it.
struct Worker {
    jobs: mpsc::Sender<Job>,
    /// The worker's own slot of the call record: names the call it is stuck in.
    probe: CallProbe,
    /// The identity as the worker read it, published as soon as read: a GPU whose first sample
    /// hangs after its identity calls is still shown by name.
    seen: Arc<Mutex<Identity>>,
}

/// One request to a worker: sample GPU `index` with this session.
struct Job {
    nvml: Arc<Nvml>,
    index: u32,
    /// Enumeration generation: a new one resets what the worker cached about its GPU (the
    /// device may have been reset or replaced), identity excepted.
    generation: u64,
    id: Identity,
}

/// A worker's answer.
struct Done {
    key: usize,
    generation: u64,
    sample: GpuSample,
    session_lost: bool,
    /// The device at this index answered another UUID than the one known: GPUs were swapped
    /// (removed and added at once), so the sample is not of this slot's GPU.
    replaced: bool,
    id: Identity,
}

fn worker_loop(
    jobs: &mpsc::Receiver<Job>,
    done: &mpsc::Sender<Done>,
    key: usize,
    probe: &CallProbe,
    seen: &Mutex<Identity>,
) {
    let mut memo = GpuMemo::default();
    let mut generation = None;
    while let Ok(job) = jobs.recv() {
        if generation != Some(job.generation) {
            memo = GpuMemo::default();
            generation = Some(job.generation);
        }
        memo.id.update(&job.id);
        let known = memo.id.uuid.clone();
        let (sample, session_lost) = sample_gpu(&job.nvml, job.index, &mut memo, probe, Some(seen));
        drop(job.nvml);
        let replaced =
            known.is_some() && !sample.uuid.is_empty() && known != Some(sample.uuid.clone());
        if replaced {
            memo.id = job.id;
        }
        let answer = Done {
            key,
            generation: job.generation,
            sample,
            session_lost,
            replaced,
            id: memo.id.clone(),
        };
        if done.send(answer).is_err() {
            break;
        }
    }
}

/// The live NVML source. Each GPU is sampled by a worker thread of its own (NVML is
/// thread-safe), so a call that hangs on one GPU delays only that GPU: the sample waits for the
/// workers up to [`NvmlOptions::gpu_deadline`], then shows a GPU still in a call with that call
/// named and its values unavailable.
pub struct NvmlSource {
    options: NvmlOptions,
    session: Arc<Session>,
    info: SourceInfo,
    gpus: Vec<GpuSlot>,
    next_key: usize,
    generation: u64,
    done_tx: mpsc::Sender<Done>,
    done_rx: mpsc::Receiver<Done>,
    backoff: Duration,
    next_reinit: Option<Instant>,
}

fn library_name(options: &NvmlOptions) -> String {
    options
        .library
        .as_ref()
        .map_or_else(|| DEFAULT_LIBRARY.to_string(), |p| p.display().to_string())
}

fn init_nvml(options: &NvmlOptions) -> Result<Nvml, NvmlError> {
    let mut builder = Nvml::builder();
    if let Some(path) = &options.library {
        builder.lib_path(OsStr::new(path.as_os_str()));
    }
    builder.init()
}

impl NvmlSource {
    /// Loads NVML and discovers the GPUs.
    pub fn open(options: NvmlOptions) -> Result<Self, OpenError> {
        let library = library_name(&options);
        let nvml = init_nvml(&options).map_err(|e| match e {
            NvmlError::LibloadingError(inner) => OpenError::NoLibrary {
                library: library.clone(),
                detail: inner.to_string(),
            },
            NvmlError::DriverNotLoaded => OpenError::DriverNotLoaded {
                library: library.clone(),
            },
            NvmlError::NoPermission => OpenError::NoPermission {
                library: library.clone(),
            },
            other => OpenError::Other {
                library: library.clone(),
                detail: other.to_string(),
            },
        })?;
        let driver = nvml.sys_driver_version().ok();
        let count = nvml.device_count().map_err(|e| OpenError::Other {
            library: library.clone(),
            detail: format!("cannot count devices: {e}"),
        })?;
        if count == 0 {
            return Err(OpenError::NoGpus {
                driver: driver.unwrap_or_else(|| "?".to_string()),
            });
        }
        let cuda = nvml
            .sys_cuda_driver_version()
            .ok()
            .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10));
        let info = SourceInfo {
            kind: SourceKind::Live,
            host: crate::hostname(),
            driver_version: driver,
            cuda_version: cuda,
            nvml_version: nvml.sys_nvml_version().ok(),
            detail: library,
            me: None,
            span: None,
        };
        let session = Arc::new(Session::default());
        session.set(Some(Arc::new(nvml)));
        let (done_tx, done_rx) = mpsc::channel();
        let mut source = Self {
            options,
            session,
            info,
            gpus: Vec::new(),
            next_key: 0,
            generation: 0,
            done_tx,
            done_rx,
            backoff: Duration::from_secs(1),
            next_reinit: None,
        };
        // Identities are read by the workers on the first sample, not here: a call that hangs
        // must hang where the sampler can name it, not before it starts.
        for index in 0..count {
            source.add_slot(index, Identity::default());
        }
        Ok(source)
    }

    fn add_slot(&mut self, index: u32, id: Identity) {
        self.gpus.push(GpuSlot {
            key: self.next_key,
            id,
            index: Some(index),
            shown_index: index,
            worker: None,
            busy: None,
        });
        self.next_key += 1;
    }

    /// Matches the driver's devices to the GPUs followed so far: by UUID, else (a device whose
    /// UUID cannot be read, such as a lost one) by the index it had. Devices no longer listed
    /// keep their slot, marked removed; new ones get a slot. Workers forget their caches.
    fn enumerate(&mut self, nvml: &Nvml, probe: &CallProbe) {
        let count = probe
            .call("device_count", None, || nvml.device_count())
            .unwrap_or(0);
        let found: Vec<(u32, Option<String>)> = (0..count)
            .map(|i| {
                let uuid = probe.call("uuid", Some(i), || {
                    nvml.device_by_index(i).and_then(|d| d.uuid())
                });
                (i, uuid.ok())
            })
            .collect();
        let previous: Vec<Option<u32>> = self.gpus.iter().map(|g| g.index).collect();
        let mut matched = vec![false; self.gpus.len()];
        for g in &mut self.gpus {
            g.index = None;
        }
        let mut unmatched = Vec::new();
        for (i, uuid) in &found {
            let by_uuid = uuid.as_ref().and_then(|u| {
                (0..self.gpus.len())
                    .find(|&k| !matched[k] && self.gpus[k].id.uuid.as_ref() == Some(u))
            });
            match by_uuid {
                Some(k) => {
                    matched[k] = true;
                    self.gpus[k].index = Some(*i);
                    self.gpus[k].shown_index = *i;
                }
                None => unmatched.push((*i, uuid.clone())),
            }
        }
        for (i, uuid) in unmatched {
            // Same place as before, and either the UUID is unreadable or the slot never knew
            // its own: the same GPU.
            let by_place = (0..self.gpus.len()).find(|&k| {
                !matched[k]
                    && previous[k] == Some(i)
                    && (uuid.is_none() || self.gpus[k].id.uuid.is_none())
            });
            if let Some(k) = by_place {
                matched[k] = true;
                self.gpus[k].index = Some(i);
                self.gpus[k].id.update(&Identity {
                    uuid,
                    ..Identity::default()
                });
            } else {
                self.add_slot(
                    i,
                    Identity {
                        uuid,
                        ..Identity::default()
                    },
                );
                matched.push(true);
            }
        }
        self.gpus
            .sort_by_key(|g| (g.index.is_none(), g.shown_index));
        self.generation += 1;
    }

    /// Drops the session and schedules a re-initialisation.
    fn schedule_reinit(&mut self, now: Instant) {
        self.session.set(None);
        if self.next_reinit.is_none() {
            self.next_reinit = Some(now + self.backoff);
        }
    }

    /// Re-initialises NVML when a re-initialisation is due. Returns an error to report, if
    /// any. While a session exists (one GPU lost, the others fine), sampling goes on with it
    /// until the new session replaces it.
    fn maybe_reinit(&mut self, probe: &CallProbe) -> Option<CallError> {
        let due = self.next_reinit?;
        let now = Instant::now();
        if now < due {
            return self.session.get().is_none().then(|| CallError {
                call: "init".to_string(),
                error: format!(
                    "NVML session lost; reinitialising in {:.0?}",
                    due.saturating_duration_since(now)
                ),
            });
        }
        match probe.call("init", None, || init_nvml(&self.options)) {
            Ok(nvml) => {
                // Devices may have been reset, replaced, added or removed: match them again
                // (identities are kept; the workers forget the rest).
                self.enumerate(&nvml, probe);
                self.session.set(Some(Arc::new(nvml)));
                self.next_reinit = None;
                // The backoff resets only once a sample finds every GPU well (see `sample`), so
                // a GPU that stays lost is not re-initialised every second.
                None
            }
            Err(e) => {
                self.backoff = (self.backoff * 2).min(self.options.reinit_backoff_max);
                self.next_reinit = Some(now + self.backoff);
                Some(CallError {
                    call: "init".to_string(),
                    error: format!("{}; next try in {:.0?}", error_name(&e), self.backoff),
                })
            }
        }
    }

    fn placeholder_gpus(&self, error: &CallError) -> Vec<GpuSample> {
        self.gpus
            .iter()
            .map(|slot| {
                let mut g = slot.id.empty_sample(slot.shown_index);
                g.processes_unavailable = true;
                g.errors.push(error.clone());
                g
            })
            .collect()
    }

    /// Sends a job to the worker of slot `k` (starting the worker first if needed).
    fn dispatch(&mut self, k: usize, nvml: &Arc<Nvml>, probe: &CallProbe) {
        let generation = self.generation;
        let done = self.done_tx.clone();
        let slot = &mut self.gpus[k];
        let Some(index) = slot.index else { return };
        if slot.worker.is_none() {
            let (jobs, rx) = mpsc::channel();
            let wprobe = probe.slot();
            let key = slot.key;
            let thread_probe = wprobe.clone();
            let seen: Arc<Mutex<Identity>> = Arc::default();
            let thread_seen = Arc::clone(&seen);
            let spawned = std::thread::Builder::new()
                .name(format!("gpuwatch-gpu{index}"))
                .spawn(move || worker_loop(&rx, &done, key, &thread_probe, &thread_seen));
            if spawned.is_err() {
                return;
            }
            slot.worker = Some(Worker {
                jobs,
                probe: wprobe,
                seen,
            });
        }
        let job = Job {
            nvml: Arc::clone(nvml),
            index,
            generation,
            id: slot.id.clone(),
        };
        if let Some(w) = &slot.worker
            && w.jobs.send(job).is_ok()
        {
            slot.busy = Some(Instant::now());
        }
    }

    /// Asks every idle worker for a sample and waits for the answers: until all are in, or
    /// until the deadline once at least one is (a sample with nothing new is not a sample:
    /// with every GPU stuck, this blocks, and the probe names the calls).
    fn collect(&mut self, nvml: &Arc<Nvml>, probe: &CallProbe, started: Instant) -> Vec<Done> {
        for k in 0..self.gpus.len() {
            if self.gpus[k].busy.is_none() {
                self.dispatch(k, nvml, probe);
            }
        }
        let deadline = started + self.options.gpu_deadline;
        let mut fresh: Vec<Done> = Vec::new();
        while self.gpus.iter().any(|g| g.busy.is_some()) {
            let now = Instant::now();
            let answer = if fresh.is_empty() || now < deadline {
                let wait = deadline.saturating_duration_since(now);
                match self.done_rx.recv_timeout(wait) {
                    Ok(d) => d,
                    Err(mpsc::RecvTimeoutError::Timeout) if fresh.is_empty() => {
                        match self.done_rx.recv() {
                            Ok(d) => d,
                            Err(_) => break,
                        }
                    }
                    Err(_) => break,
                }
            } else {
                break;
            };
            let Some(k) = self.gpus.iter().position(|g| g.key == answer.key) else {
                continue;
            };
            self.gpus[k].busy = None;
            if answer.generation == self.generation {
                self.gpus[k].id.update(&answer.id);
                fresh.push(answer);
            } else {
                // Taken before the GPUs were enumerated again: ask again.
                self.dispatch(k, nvml, probe);
            }
        }
        fresh
    }
}

/// Records one call's outcome on a GPU: `Some(value)`, or `None` with the reason remembered.
struct Reader<'a> {
    memo: &'a mut GpuMemo,
    errors: &'a mut Vec<CallError>,
    probe: &'a CallProbe,
    index: u32,
    lost: bool,
    session_lost: bool,
}

impl Reader<'_> {
    fn read<T>(
        &mut self,
        call: &'static str,
        f: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Option<T> {
        if self.lost || self.session_lost || self.memo.unavailable.contains(call) {
            return None;
        }
        match self.probe.call(call, Some(self.index), f) {
            Ok(v) => Some(v),
            Err(e) => {
                self.fail(call, &e);
                None
            }
        }
    }

    fn fail(&mut self, call: &'static str, e: &NvmlError) {
        match e {
            NvmlError::NotSupported => {
                self.memo.unavailable.insert(call);
            }
            NvmlError::NoPermission => {
                self.memo.unavailable.insert(call);
                self.push(call, e);
            }
            NvmlError::GpuLost => {
                self.lost = true;
                self.push(call, e);
            }
            e if is_session_error(e) => {
                self.session_lost = true;
                self.push(call, e);
            }
            _ => self.push(call, e),
        }
    }

    fn push(&mut self, call: &'static str, e: &NvmlError) {
        self.errors.push(CallError {
            call: call.to_string(),
            error: error_name(e),
        });
    }
}

fn sample_gpu(
    nvml: &Nvml,
    index: u32,
    memo: &mut GpuMemo,
    probe: &CallProbe,
    seen: Option<&Mutex<Identity>>,
) -> (GpuSample, bool) {
    let mut errors = Vec::new();
    let device = probe.call("device_by_index", Some(index), || {
        nvml.device_by_index(index)
    });
    let device = match device {
        Ok(d) => d,
        Err(e) => {
            let mut g = memo.id.empty_sample(index);
            g.processes_unavailable = true;
            g.lost = matches!(e, NvmlError::GpuLost);
            let session_lost = is_session_error(&e);
            g.errors.push(CallError {
                call: "device_by_index".to_string(),
                error: error_name(&e),
            });
            return (g, session_lost);
        }
    };
    let mut r = Reader {
        memo,
        errors: &mut errors,
        probe,
        index,
        lost: false,
        session_lost: false,
    };

    // Identity: kept across re-initialisations. The UUID is asked every time (≈0.3 µs on
    // R580): a GPU swapped for another at this index must not be shown under the old identity.
    if let Some(uuid) = r.read("uuid", || device.uuid()) {
        if r.memo.id.uuid.as_ref().is_some_and(|known| *known != uuid) {
            // Another device: what was known about this one does not hold.
            r.memo.id = Identity::default();
        }
        r.memo.id.uuid = Some(uuid);
    }
    if r.memo.id.name.is_none() {
        r.memo.id.name = r.read("name", || device.name());
    }
    if r.memo.id.pci_bus_id.is_none() {
        r.memo.id.pci_bus_id = r.read("pci_info", || device.pci_info()).map(|p| p.bus_id);
    }
    if let Some(seen) = seen {
        let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
        if *seen != r.memo.id {
            seen.clone_from(&r.memo.id);
        }
    }
    if !r.memo.thresholds_read {
        let v = r.read("temperature_threshold", || {
            device.temperature_threshold(TemperatureThreshold::Slowdown)
        });
        if !r.lost {
            r.memo.temp_slowdown = v;
            r.memo.thresholds_read = true;
        }
    }

    let memory = r
        .read("memory_info", || device.memory_info())
        .map(|m| Memory {
            total: m.total,
            reserved: Some(m.reserved),
            used: m.used,
            free: m.free,
        });
    let util = r.read("utilization_rates", || device.utilization_rates());
    let temperature = r.read("temperature", || device.temperature(TemperatureSensor::Gpu));
    let power = r.read("power_usage", || device.power_usage());
    let power_limit = r.read("enforced_power_limit", || device.enforced_power_limit());
    let sm_clock = r.read("clock_info_sm", || device.clock_info(Clock::SM));
    let mig_mode = r.read("mig_mode", || device.mig_mode()).map(|m| {
        if m.current == 1 {
            MigMode::Enabled
        } else {
            MigMode::Disabled
        }
    });
    let mig_devices = if mig_mode == Some(MigMode::Enabled) {
        read_mig_devices(&device, &mut r)
    } else {
        Vec::new()
    };

    let (processes, processes_unavailable) = read_processes(&device, &mut r);

    let lost = r.lost;
    let session_lost = r.session_lost;
    let slowdown = r.memo.temp_slowdown;
    let mut g = memo.id.empty_sample(index);
    g.memory = memory;
    g.util_gpu = util.as_ref().map(|u| u.gpu as f32);
    g.util_mem = util.as_ref().map(|u| u.memory as f32);
    g.temperature_c = temperature;
    g.temp_slowdown_c = slowdown;
    g.power_watts = power.map(|mw| f64::from(mw) / 1000.0);
    g.power_limit_watts = power_limit.map(|mw| f64::from(mw) / 1000.0);
    g.sm_clock_mhz = sm_clock;
    g.mig_mode = mig_mode;
    g.mig_devices = mig_devices;
    g.lost = lost;
    g.processes = processes;
    g.processes_unavailable = processes_unavailable || lost;
    g.errors = errors;
    g.sort_processes();
    (g, session_lost)
}

fn read_mig_devices(device: &Device<'_>, r: &mut Reader<'_>) -> Vec<MigDeviceSample> {
    let Some(max) = r.read("mig_device_count", || device.mig_device_count()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for i in 0..max {
        // Empty slots answer NotFound: that is not a failure.
        let handle = match r.probe.call("mig_device_by_index", Some(r.index), || {
            device.mig_device_by_index(i)
        }) {
            Ok(h) => h,
            Err(NvmlError::NotFound | NvmlError::InvalidArg) => continue,
            Err(e) => {
                r.fail("mig_device_by_index", &e);
                continue;
            }
        };
        let uuid = r
            .probe
            .call("mig_uuid", Some(r.index), || handle.uuid())
            .ok();
        let memory = r
            .probe
            .call("mig_memory_info", Some(r.index), || handle.memory_info())
            .ok()
            .map(|m| Memory {
                total: m.total,
                reserved: Some(m.reserved),
                used: m.used,
                free: m.free,
            });
        out.push(MigDeviceSample {
            index: i,
            uuid,
            gpu_instance: None,
            compute_instance: None,
            memory,
        });
    }
    out
}

/// The processes on a device, and whether the list is unknown: the compute list (where CUDA
/// jobs show) did not answer — `NotSupported`, no permission, an error. Unknown is not "none".
fn read_processes(device: &Device<'_>, r: &mut Reader<'_>) -> (Vec<ProcSample>, bool) {
    let compute = r.read("running_compute_processes", || {
        device.running_compute_processes()
    });
    let unavailable = compute.is_none();
    let graphics = r.read("running_graphics_processes", || {
        device.running_graphics_processes()
    });
    let mps = r.read("mps_running_compute_processes", || {
        device.mps_running_compute_processes()
    });
    let lists = [
        (compute, ProcKind::Compute),
        (graphics, ProcKind::Graphics),
        (mps, ProcKind::Compute),
    ];
    let mut merged: BTreeMap<u32, ProcSample> = BTreeMap::new();
    for (list, kind) in lists {
        for p in list.into_iter().flatten() {
            merge_process(&mut merged, &p, kind);
        }
    }
    if merged.is_empty() {
        return (Vec::new(), unavailable);
    }

    // Per-process utilisation since the newest sample seen on this device.
    let last_seen = r.memo.last_seen_us;
    let util = if r.lost || r.session_lost || r.memo.unavailable.contains("process_utilization") {
        None
    } else {
        match r.probe.call("process_utilization", Some(r.index), || {
            device.process_utilization_stats(if last_seen == 0 {
                None
            } else {
                Some(last_seen)
            })
        }) {
            Ok(samples) => {
                let mut newest: HashMap<u32, (u64, u32, u32)> = HashMap::new();
                for s in samples {
                    r.memo.last_seen_us = r.memo.last_seen_us.max(s.timestamp);
                    let entry = newest.entry(s.pid).or_insert((0, 0, 0));
                    if s.timestamp >= entry.0 {
                        *entry = (s.timestamp, s.sm_util, s.mem_util);
                    }
                }
                Some(newest)
            }
            // No process ran a kernel since `last_seen`: zero for everyone, not an error.
            Err(NvmlError::NotFound) => Some(HashMap::new()),
            Err(e) => {
                r.fail("process_utilization", &e);
                None
            }
        }
    };

    let processes = merged
        .into_values()
        .map(|mut p| {
            if let Some(util) = &util {
                let (sm, mem) = util
                    .get(&p.pid)
                    .map_or((0.0, 0.0), |&(_, sm, mem)| (sm as f32, mem as f32));
                p.sm_percent = Some(sm);
                p.mem_percent = Some(mem);
            }
            p
        })
        .collect();
    (processes, unavailable)
}

fn merge_process(merged: &mut BTreeMap<u32, ProcSample>, p: &ProcessInfo, kind: ProcKind) {
    let used = match p.used_gpu_memory {
        UsedGpuMemory::Used(b) => Some(b),
        UsedGpuMemory::Unavailable => None,
    };
    merged
        .entry(p.pid)
        .and_modify(|existing| {
            existing.kind = existing.kind.merge(kind);
            // The same context seen in two lists: keep the known, larger figure.
            existing.used_bytes = match (existing.used_bytes, used) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
        })
        .or_insert_with(|| ProcSample {
            pid: p.pid,
            kind,
            used_bytes: used,
            sm_percent: None,
            mem_percent: None,
            gpu_instance: p.gpu_instance_id,
            compute_instance: p.compute_instance_id,
            host: HostProc::default(),
        });
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl GpuSource for NvmlSource {
    fn info(&self) -> SourceInfo {
        self.info.clone()
    }

    fn sample(&mut self, probe: &CallProbe) -> Sample {
        let started = Instant::now();
        let taken_at = unix_now();
        let mut errors = Vec::new();
        let reinit_error = self.maybe_reinit(probe);
        let Some(nvml) = self.session.get() else {
            let e = reinit_error.unwrap_or_else(|| {
                self.schedule_reinit(started);
                CallError {
                    call: "init".to_string(),
                    error: "NVML session lost; reinitialising".to_string(),
                }
            });
            errors.push(e.clone());
            return Sample {
                taken_at,
                gpus: self.placeholder_gpus(&e),
                errors,
                collect_seconds: started.elapsed().as_secs_f64(),
            };
        };
        errors.extend(reinit_error);
        // GPUs added or removed while running: the count is the cheapest call there is.
        match probe.call("device_count", None, || nvml.device_count()) {
            Ok(count) => {
                let listed = self.gpus.iter().filter(|g| g.index.is_some()).count();
                if count as usize != listed {
                    self.enumerate(&nvml, probe);
                }
            }
            Err(e) => errors.push(CallError {
                call: "device_count".to_string(),
                error: error_name(&e),
            }),
        }
        let mut fresh = self.collect(&nvml, probe, started);
        if fresh.iter().any(|d| d.replaced) {
            // GPUs swapped at an unchanged count: match them again, ask again.
            self.enumerate(&nvml, probe);
            fresh = self.collect(&nvml, probe, Instant::now());
        }
        let mut session_lost = false;
        let mut any_lost = false;
        let mut by_key: HashMap<usize, Done> = fresh.into_iter().map(|d| (d.key, d)).collect();
        let mut gpus = Vec::with_capacity(self.gpus.len());
        for slot in &self.gpus {
            if let Some(done) = by_key.remove(&slot.key) {
                session_lost |= done.session_lost;
                any_lost |= done.sample.lost;
                gpus.push(done.sample);
            } else if slot.index.is_none() {
                let mut g = slot.id.empty_sample(slot.shown_index);
                g.lost = true;
                g.processes_unavailable = true;
                g.errors.push(CallError {
                    call: "device_count".to_string(),
                    error: "Removed: the driver no longer lists this GPU".to_string(),
                });
                gpus.push(g);
            } else {
                // Still in a call since an earlier sample: named, its values unavailable.
                let mut id = slot.id.clone();
                if let Some(w) = &slot.worker {
                    id.fill(&w.seen.lock().unwrap_or_else(PoisonError::into_inner));
                }
                let mut g = id.empty_sample(slot.shown_index);
                g.processes_unavailable = true;
                let stuck = slot.worker.as_ref().and_then(|w| w.probe.own());
                let (call, since) =
                    stuck.map_or(("device_by_index", slot.busy), |f| (f.call, Some(f.since)));
                g.errors.push(CallError {
                    call: call.to_string(),
                    error: format!(
                        "NoAnswer: has not returned for {:.1} s",
                        since.map_or(0.0, |s| s.elapsed().as_secs_f64())
                    ),
                });
                gpus.push(g);
            }
        }
        drop(nvml);
        if session_lost {
            errors.push(CallError {
                call: "session".to_string(),
                error: "NVML session lost (driver unloaded?); reinitialising".to_string(),
            });
            self.schedule_reinit(started);
        } else if any_lost {
            // A GPU that fell off the bus needs a fresh session once it is back (reset).
            if self.next_reinit.is_none() {
                self.next_reinit = Some(started + self.backoff);
                self.backoff = (self.backoff * 2).min(self.options.reinit_backoff_max);
            }
        } else {
            self.backoff = Duration::from_secs(1);
        }
        Sample {
            taken_at,
            gpus,
            errors,
            collect_seconds: started.elapsed().as_secs_f64(),
        }
    }

    fn slow_sampler(&mut self) -> Option<Box<dyn SlowSampler>> {
        Some(Box::new(NvmlSlow {
            session: Arc::clone(&self.session),
            unavailable: HashSet::new(),
        }))
    }

    fn wants_host_enrichment(&self) -> bool {
        true
    }
}

/// Takes the expensive readings on the slow thread.
struct NvmlSlow {
    session: Arc<Session>,
    unavailable: HashSet<(u32, &'static str)>,
}

impl NvmlSlow {
    fn read<T>(
        &mut self,
        probe: &CallProbe,
        index: u32,
        call: &'static str,
        f: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Option<T> {
        if self.unavailable.contains(&(index, call)) {
            return None;
        }
        match probe.call(call, Some(index), f) {
            Ok(v) => Some(v),
            Err(NvmlError::NotSupported | NvmlError::NoPermission) => {
                self.unavailable.insert((index, call));
                None
            }
            Err(_) => None,
        }
    }
}

impl SlowSampler for NvmlSlow {
    fn sample_slow(&mut self, probe: &CallProbe) -> Vec<(String, SlowReadings)> {
        let Some(nvml) = self.session.get() else {
            self.unavailable.clear();
            return Vec::new();
        };
        let count = nvml.device_count().unwrap_or(0);
        let mut out = Vec::with_capacity(count as usize);
        for index in 0..count {
            let Ok(device) = nvml.device_by_index(index) else {
                continue;
            };
            let Ok(uuid) = device.uuid() else { continue };
            let rx = self.read(probe, index, "pcie_throughput_rx", || {
                device.pcie_throughput(PcieUtilCounter::Receive)
            });
            let tx = self.read(probe, index, "pcie_throughput_tx", || {
                device.pcie_throughput(PcieUtilCounter::Send)
            });
            let energy = self.read(probe, index, "total_energy_consumption", || {
                device.total_energy_consumption()
            });
            let ecc = self.read(probe, index, "total_ecc_errors", || {
                device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
            });
            let mem_clock = self.read(probe, index, "clock_info_mem", || {
                device.clock_info(Clock::Memory)
            });
            out.push((
                uuid,
                SlowReadings {
                    // NVML reports KB/s.
                    pcie_rx_bytes_per_s: rx.map(|kb| u64::from(kb) * 1024),
                    pcie_tx_bytes_per_s: tx.map(|kb| u64::from(kb) * 1024),
                    energy_joules: energy.map(|mj| mj as f64 / 1000.0),
                    ecc_uncorrected: ecc,
                    mem_clock_mhz: mem_clock,
                    taken_at: Some(unix_now()),
                },
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_names_are_short() {
        assert_eq!(error_name(&NvmlError::NotSupported), "NotSupported");
        assert_eq!(error_name(&NvmlError::GpuLost), "GpuLost");
        assert_eq!(
            error_name(&NvmlError::InsufficientSize(Some(3))),
            "InsufficientSize"
        );
    }

    #[test]
    fn missing_library_is_a_clear_error() {
        let err = NvmlSource::open(NvmlOptions {
            library: Some(PathBuf::from("/nonexistent/libnvidia-ml.so.1")),
            ..NvmlOptions::default()
        })
        .err()
        .expect("cannot open a missing library");
        let msg = err.to_string();
        assert!(
            msg.starts_with(
                "no NVIDIA driver found (could not load /nonexistent/libnvidia-ml.so.1): "
            ),
            "{msg}"
        );
        assert!(
            msg.ends_with("to try gpuwatch without a GPU run: gpuwatch --demo"),
            "{msg}"
        );
    }
}
