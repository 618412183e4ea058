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
use std::sync::{Arc, Mutex, PoisonError};
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
}

impl Default for NvmlOptions {
    fn default() -> Self {
        Self {
            library: None,
            reinit_backoff_max: Duration::from_secs(30),
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

/// What we remember about one GPU across samples.
#[derive(Debug, Default, Clone)]
struct GpuMemo {
    uuid: Option<String>,
    name: Option<String>,
    pci_bus_id: Option<String>,
    temp_slowdown: Option<u32>,
    /// Whether the static thresholds were read this session.
    thresholds_read: bool,
    /// Calls that answered `NotSupported`/`NoPermission`: not asked again this session.
    unavailable: HashSet<&'static str>,
    /// Newest process-utilisation timestamp seen (µs).
    last_seen_us: u64,
}

/// The live NVML source.
pub struct NvmlSource {
    options: NvmlOptions,
    session: Arc<Session>,
    info: SourceInfo,
    gpus: Vec<GpuMemo>,
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
        };
        let session = Arc::new(Session::default());
        session.set(Some(Arc::new(nvml)));
        Ok(Self {
            options,
            session,
            info,
            gpus: vec![GpuMemo::default(); count as usize],
            backoff: Duration::from_secs(1),
            next_reinit: None,
        })
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
                let count = nvml.device_count().unwrap_or(0) as usize;
                // Forget everything cached: devices may have been reset or replaced.
                self.gpus = vec![GpuMemo::default(); count];
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
            .enumerate()
            .map(|(i, memo)| {
                let mut g = GpuSample::empty(i as u32, memo.uuid.clone().unwrap_or_default());
                g.name.clone_from(&memo.name);
                g.pci_bus_id.clone_from(&memo.pci_bus_id);
                g.errors.push(error.clone());
                g
            })
            .collect()
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

fn sample_gpu(nvml: &Nvml, index: u32, memo: &mut GpuMemo, probe: &CallProbe) -> (GpuSample, bool) {
    let mut errors = Vec::new();
    let device = probe.call("device_by_index", Some(index), || {
        nvml.device_by_index(index)
    });
    let device = match device {
        Ok(d) => d,
        Err(e) => {
            let mut g = GpuSample::empty(index, memo.uuid.clone().unwrap_or_default());
            g.name.clone_from(&memo.name);
            g.pci_bus_id.clone_from(&memo.pci_bus_id);
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

    // Identity: asked once per session.
    if r.memo.uuid.is_none() {
        r.memo.uuid = r.read("uuid", || device.uuid());
    }
    if r.memo.name.is_none() {
        r.memo.name = r.read("name", || device.name());
    }
    if r.memo.pci_bus_id.is_none() {
        r.memo.pci_bus_id = r.read("pci_info", || device.pci_info()).map(|p| p.bus_id);
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

    let processes = read_processes(&device, &mut r);

    let lost = r.lost;
    let session_lost = r.session_lost;
    let slowdown = r.memo.temp_slowdown;
    let mut g = GpuSample::empty(index, memo.uuid.clone().unwrap_or_default());
    g.name.clone_from(&memo.name);
    g.pci_bus_id.clone_from(&memo.pci_bus_id);
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

fn read_processes(device: &Device<'_>, r: &mut Reader<'_>) -> Vec<ProcSample> {
    let compute = r.read("running_compute_processes", || {
        device.running_compute_processes()
    });
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
        return Vec::new();
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

    merged
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
        .collect()
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
        let mut gpus = Vec::with_capacity(self.gpus.len());
        let mut session_lost = false;
        let mut any_lost = false;
        for (i, memo) in self.gpus.iter_mut().enumerate() {
            let (g, lost_session) = sample_gpu(&nvml, i as u32, memo, probe);
            session_lost |= lost_session;
            any_lost |= g.lost;
            gpus.push(g);
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
