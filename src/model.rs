//! The data contract between the sampler and every consumer: plain, immutable data.
//!
//! Units: bytes for memory, percent (0–100) for utilisation, °C, watts, MHz, bytes/s for PCIe,
//! joules for energy. `None` always means "unavailable" (not supported, no permission, the call
//! failed, or NVML's not-available marker) and is never treated as zero.

use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

/// Where frames come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// The NVIDIA driver through NVML.
    Live,
    /// A built-in or user scenario.
    Demo,
    /// A recording played back.
    Replay,
    /// Another host's daemon, over its event stream (`tui --connect`).
    Remote,
}

impl std::fmt::Display for SourceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SourceKind::Live => "live",
            SourceKind::Demo => "demo",
            SourceKind::Replay => "replay",
            SourceKind::Remote => "remote",
        })
    }
}

/// Facts about a source that do not change between samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceInfo {
    pub kind: SourceKind,
    /// Host name of the machine the GPUs are on.
    pub host: String,
    pub driver_version: Option<String>,
    /// CUDA driver version, e.g. `13.0`.
    pub cuda_version: Option<String>,
    pub nvml_version: Option<String>,
    /// What the source reads: a library path, a scenario name, a recording file.
    pub detail: String,
    /// The user a simulated source pretends you are (a demo's "my processes"); `None`: the
    /// invoking user.
    #[serde(default)]
    pub me: Option<String>,
    /// A replay's place in its recording (the header shows the position, not the age).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<RecordingSpan>,
}

/// Where a replay's samples lie in their recording: recorded times, seconds since the Unix
/// epoch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RecordingSpan {
    /// The recording's first sample.
    pub start: f64,
    /// Its latest sample.
    pub end: f64,
    /// The first sample replayed (`--at`).
    pub first: f64,
    /// Looping: each later pass is shifted forward by this many seconds.
    pub period: Option<f64>,
}

impl RecordingSpan {
    /// Seconds from the recording's start to the recorded sample replayed at `taken_at` (a
    /// later pass of a loop folded back onto the recording), within `[0, end - start]`.
    pub fn offset(&self, taken_at: f64) -> f64 {
        let t = match self.period {
            Some(p) if p > 0.0 && taken_at > self.end => {
                self.first + (taken_at - self.first).rem_euclid(p)
            }
            _ => taken_at,
        };
        (t - self.start).clamp(0.0, (self.end - self.start).max(0.0))
    }

    /// How long the recording is, seconds.
    pub fn length(&self) -> f64 {
        (self.end - self.start).max(0.0)
    }
}

/// Type of GPU context a process holds, as nvidia-smi prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProcKind {
    #[serde(rename = "C")]
    Compute,
    #[serde(rename = "G")]
    Graphics,
    #[serde(rename = "C+G")]
    Both,
}

impl ProcKind {
    /// The nvidia-smi letter(s).
    pub fn label(self) -> &'static str {
        match self {
            ProcKind::Compute => "C",
            ProcKind::Graphics => "G",
            ProcKind::Both => "C+G",
        }
    }

    /// Merge two sightings of one PID (compute list and graphics list).
    #[must_use]
    pub fn merge(self, other: ProcKind) -> ProcKind {
        if self == other { self } else { ProcKind::Both }
    }
}

/// Host-side facts about a process (from `/proc` via sysinfo, or from a scenario/recording).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostProc {
    /// Whether this host can see the PID at all (false: another PID namespace or gone).
    pub visible: bool,
    pub name: Option<String>,
    /// Full command line, arguments joined by spaces.
    pub command: Option<String>,
    pub user: Option<String>,
    pub uid: Option<u32>,
    /// CPU usage in percent of one core (can exceed 100).
    pub cpu_percent: Option<f32>,
    pub rss_bytes: Option<u64>,
    /// Process start time, seconds since the Unix epoch.
    pub start_time: Option<u64>,
    pub ppid: Option<u32>,
    /// Container id (short) or Kubernetes pod, from `/proc/PID/cgroup`.
    pub container: Option<String>,
    /// The process left `/proc` while the driver still lists it (the classic zombie holding
    /// VRAM): `visible` is false and the facts above are the last ones gpuwatch read while it
    /// was there (CPU % and RSS unknown). Absent in older recordings (false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exited: bool,
    /// With `exited`: when gpuwatch first found it gone, seconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exited_at: Option<f64>,
}

/// What tables show in front of the last known command of an exited process.
pub const EXITED_MARK: &str = "[exited]";

impl HostProc {
    /// The command line as tables show it: the full command, else the name; for a process
    /// that exited while the driver still lists it, its last known command after
    /// [`EXITED_MARK`]; for a PID this host never saw, a note saying so.
    pub fn display_command(&self) -> String {
        let command = || {
            self.command
                .clone()
                .filter(|c| !c.is_empty())
                .or_else(|| self.name.clone())
                .unwrap_or_else(|| "-".to_string())
        };
        if self.visible {
            command()
        } else if self.exited {
            format!("{EXITED_MARK} {}", command())
        } else {
            "(not visible here: other PID namespace)".to_string()
        }
    }

    /// Whether these facts name the process: this host sees it now, or saw it before it
    /// exited (its user, command and parent are then the last known ones).
    pub fn known(&self) -> bool {
        self.visible || self.exited
    }
}

/// One process holding a context on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcSample {
    pub pid: u32,
    pub kind: ProcKind,
    /// GPU memory in bytes; `None` when NVML reports it as not available.
    pub used_bytes: Option<u64>,
    /// SM utilisation %; `None` when the device does not support per-process utilisation.
    pub sm_percent: Option<f32>,
    /// Memory-bandwidth utilisation %.
    pub mem_percent: Option<f32>,
    /// MIG GPU instance id.
    pub gpu_instance: Option<u32>,
    /// MIG compute instance id.
    pub compute_instance: Option<u32>,
    pub host: HostProc,
}

/// Device memory, as the v2 memory call reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    pub total: u64,
    /// Reserved by the driver (excluded from `used`).
    pub reserved: Option<u64>,
    pub used: u64,
    pub free: u64,
}

/// MIG mode of a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MigMode {
    Disabled,
    Enabled,
}

/// One MIG device (GPU instance / compute instance) of a GPU in MIG mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MigDeviceSample {
    pub index: u32,
    pub uuid: Option<String>,
    pub gpu_instance: Option<u32>,
    pub compute_instance: Option<u32>,
    pub memory: Option<Memory>,
}

/// A call that did not answer with a value during this sample.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallError {
    /// The call, e.g. `memory_info`.
    pub call: String,
    /// The error as NVML named it, e.g. `NotSupported`, `GpuLost`.
    pub error: String,
}

/// The slow-cadence readings of a GPU (expensive calls, sampled less often).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlowReadings {
    /// PCIe receive throughput, bytes/s.
    pub pcie_rx_bytes_per_s: Option<u64>,
    /// PCIe transmit throughput, bytes/s.
    pub pcie_tx_bytes_per_s: Option<u64>,
    /// Energy consumed since the driver loaded, joules.
    pub energy_joules: Option<f64>,
    /// Volatile uncorrected ECC errors.
    pub ecc_uncorrected: Option<u64>,
    /// Memory clock, MHz.
    pub mem_clock_mhz: Option<u32>,
    /// When these readings were taken, seconds since the Unix epoch.
    pub taken_at: Option<f64>,
}

/// One GPU at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    /// NVML index.
    pub index: u32,
    /// `GPU-…` as NVML reports it.
    pub uuid: String,
    pub name: Option<String>,
    pub pci_bus_id: Option<String>,
    pub memory: Option<Memory>,
    /// GPU utilisation %.
    pub util_gpu: Option<f32>,
    /// Memory-bandwidth utilisation %.
    pub util_mem: Option<f32>,
    pub temperature_c: Option<u32>,
    /// Temperature at which the GPU slows down.
    pub temp_slowdown_c: Option<u32>,
    pub power_watts: Option<f64>,
    pub power_limit_watts: Option<f64>,
    pub sm_clock_mhz: Option<u32>,
    pub slow: SlowReadings,
    /// `None` when the board does not support MIG.
    pub mig_mode: Option<MigMode>,
    pub mig_devices: Vec<MigDeviceSample>,
    /// The GPU fell off the bus (or its handle is gone); other values are `None`.
    pub lost: bool,
    /// Processes sorted by GPU memory, largest first.
    pub processes: Vec<ProcSample>,
    /// The driver did not give the process list (`NotSupported`, no permission, a failed or
    /// stuck call, a lost GPU): `processes` is empty because it is unknown, not because no
    /// process runs. Absent in older recordings (false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub processes_unavailable: bool,
    /// Calls that failed in this sample, besides those known unsupported.
    pub errors: Vec<CallError>,
}

impl GpuSample {
    /// A GPU with only its identity known (everything else unavailable).
    pub fn empty(index: u32, uuid: String) -> Self {
        Self {
            index,
            uuid,
            name: None,
            pci_bus_id: None,
            memory: None,
            util_gpu: None,
            util_mem: None,
            temperature_c: None,
            temp_slowdown_c: None,
            power_watts: None,
            power_limit_watts: None,
            sm_clock_mhz: None,
            slow: SlowReadings::default(),
            mig_mode: None,
            mig_devices: Vec::new(),
            lost: false,
            processes: Vec::new(),
            processes_unavailable: false,
            errors: Vec::new(),
        }
    }

    /// Memory no visible process accounts for: `used − Σ process used`, only when the device
    /// value, the process list and every process value are known. Never negative.
    pub fn unattributed_bytes(&self) -> Option<u64> {
        if self.processes_unavailable {
            return None;
        }
        let used = self.memory?.used;
        let mut sum = 0u64;
        for p in &self.processes {
            sum = sum.saturating_add(p.used_bytes?);
        }
        Some(used.saturating_sub(sum))
    }

    /// Fraction of total memory in use, 0–1.
    pub fn used_ratio(&self) -> Option<f64> {
        let m = self.memory?;
        (m.total > 0).then(|| m.used as f64 / m.total as f64)
    }

    /// Sort processes by GPU memory (largest first; unavailable last), then PID.
    pub fn sort_processes(&mut self) {
        self.processes.sort_by(|a, b| {
            b.used_bytes
                .map_or(-1i128, i128::from)
                .cmp(&a.used_bytes.map_or(-1i128, i128::from))
                .then(a.pid.cmp(&b.pid))
        });
    }
}

/// One sample of every GPU, as a source produced it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// When the sample was taken, seconds since the Unix epoch (recorded time on replay).
    pub taken_at: f64,
    pub gpus: Vec<GpuSample>,
    /// Failures that are not about one GPU (init, device count, reinitialisation).
    pub errors: Vec<CallError>,
    /// How long the source took to produce the fast part of this sample.
    pub collect_seconds: f64,
}

impl Sample {
    /// Whether any call failed while producing this sample.
    pub fn had_errors(&self) -> bool {
        !self.errors.is_empty() || self.gpus.iter().any(|g| !g.errors.is_empty() || g.lost)
    }

    /// The parent of a process in this sample, as its host reported it (for a remote host,
    /// whose PIDs this host's `/proc` knows nothing about).
    pub fn reported_ppid(&self, pid: u32) -> Option<u32> {
        self.gpus
            .iter()
            .flat_map(|g| &g.processes)
            .find(|p| p.pid == pid)
            .and_then(|p| p.host.ppid)
    }

    /// `taken_at` as a `SystemTime`.
    pub fn taken_at_system(&self) -> SystemTime {
        crate::times::system_time(self.taken_at)
    }
}

/// This host's CPU, memory, swap and load when a frame was published: the dashboard's header
/// line ([`crate::source::hostsummary`]). Bytes; CPU in percent of all CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct HostSummary {
    /// Busy share of all CPUs since the previous reading, 0–100; `None` on the first reading.
    pub cpu_percent: Option<f32>,
    pub memory_total: u64,
    /// Memory available without swapping (`MemAvailable`).
    pub memory_available: u64,
    pub swap_total: u64,
    pub swap_used: u64,
    /// The 1, 5 and 15-minute load averages; `None` when unreadable.
    pub load: Option<[f64; 3]>,
    /// Logical CPUs (what the load is read against).
    pub cpus: usize,
}

impl HostSummary {
    /// Memory in use: total − available (what `free` calls used, page cache excluded).
    pub fn memory_used(&self) -> u64 {
        self.memory_total.saturating_sub(self.memory_available)
    }
}

/// What consumers receive: a sample, plus when it was published here.
#[derive(Debug, Clone)]
pub struct Frame {
    /// Increases by one with every published frame.
    pub seq: u64,
    pub source: std::sync::Arc<SourceInfo>,
    pub sample: Sample,
    /// When the sampler published this frame (monotonic, this process).
    pub published: Instant,
    /// The fast cadence interval, to judge staleness.
    pub interval: Duration,
    /// This host's CPU, memory and load when the frame was published: only for the dashboard
    /// of a live GPU or a demo (`None` for a replay, a remote daemon, and other front ends).
    pub host: Option<HostSummary>,
}

impl Frame {
    /// A frame of `sample` from a demo source on host `h`, published now: for unit tests.
    #[cfg(test)]
    pub(crate) fn for_test(sample: Sample, interval: Duration) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Frame {
            seq: 1,
            source: std::sync::Arc::new(SourceInfo {
                kind: SourceKind::Demo,
                host: "h".into(),
                driver_version: None,
                cuda_version: None,
                nvml_version: None,
                detail: String::new(),
                me: None,
                span: None,
            }),
            sample,
            published: Instant::now(),
            interval,
            host: None,
        })
    }

    /// How old the frame is.
    pub fn age(&self) -> Duration {
        self.published.elapsed()
    }

    /// A frame is stale when no newer one arrived within three intervals (plus a second of
    /// grace): the sampler is stuck in a call or the source is failing.
    pub fn is_stale(&self) -> bool {
        self.age() > self.interval * 3 + Duration::from_secs(1)
    }
}

/// Small samples for the unit tests of the modules that read them.
#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    /// A compute process with `used` bytes and no host facts.
    pub(crate) fn proc(pid: u32, used: Option<u64>) -> ProcSample {
        ProcSample {
            pid,
            kind: ProcKind::Compute,
            used_bytes: used,
            sm_percent: None,
            mem_percent: None,
            gpu_instance: None,
            compute_instance: None,
            host: HostProc::default(),
        }
    }

    /// GPU 0 of 100 bytes (1 reserved) with `used` in use and these processes.
    pub(crate) fn gpu(used: u64, procs: Vec<ProcSample>) -> GpuSample {
        let mut g = GpuSample::empty(0, "GPU-x".into());
        g.memory = Some(Memory {
            total: 100,
            reserved: Some(1),
            used,
            free: 99 - used,
        });
        g.processes = procs;
        g
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{gpu, proc};
    use super::*;

    #[test]
    fn unattributed_is_used_minus_known_processes() {
        let g = gpu(50, vec![proc(1, Some(20)), proc(2, Some(10))]);
        assert_eq!(g.unattributed_bytes(), Some(20));
    }

    #[test]
    fn unattributed_is_unknown_when_any_process_is_unavailable() {
        let g = gpu(50, vec![proc(1, Some(20)), proc(2, None)]);
        assert_eq!(g.unattributed_bytes(), None);
    }

    #[test]
    fn unattributed_is_unknown_without_a_process_list() {
        let mut g = gpu(50, Vec::new());
        assert_eq!(g.unattributed_bytes(), Some(50));
        g.processes_unavailable = true;
        assert_eq!(g.unattributed_bytes(), None);
    }

    #[test]
    fn unattributed_never_negative() {
        let g = gpu(10, vec![proc(1, Some(20))]);
        assert_eq!(g.unattributed_bytes(), Some(0));
    }

    #[test]
    fn sort_puts_unavailable_last() {
        let mut g = gpu(50, vec![proc(3, None), proc(1, Some(5)), proc(2, Some(20))]);
        g.sort_processes();
        let order: Vec<u32> = g.processes.iter().map(|p| p.pid).collect();
        assert_eq!(order, vec![2, 1, 3]);
    }

    #[test]
    fn an_exited_process_shows_its_last_command_and_a_stranger_says_so() {
        let mut h = HostProc {
            visible: true,
            name: Some("python".into()),
            command: Some("python train.py".into()),
            user: Some("alice".into()),
            ..HostProc::default()
        };
        assert_eq!(h.display_command(), "python train.py");
        assert!(h.known());
        h.visible = false;
        h.exited = true;
        assert_eq!(h.display_command(), "[exited] python train.py");
        assert!(h.known());
        h.command = None;
        assert_eq!(h.display_command(), "[exited] python");
        let stranger = HostProc::default();
        assert_eq!(
            stranger.display_command(),
            "(not visible here: other PID namespace)"
        );
        assert!(!stranger.known());
    }

    /// A recording written before `exited` existed loads (not exited), and an exited process
    /// round-trips.
    #[test]
    fn exited_is_optional_in_recordings() {
        let old = r#"{"visible":false,"name":null,"command":null,"user":null,"uid":null,"cpu_percent":null,"rss_bytes":null,"start_time":null,"ppid":null,"container":null}"#;
        let h: HostProc = serde_json::from_str(old).expect("an old host record");
        assert!(!h.exited && h.exited_at.is_none());
        assert!(!serde_json::to_string(&h).expect("json").contains("exited"));
        let gone = HostProc {
            exited: true,
            exited_at: Some(1_800_000_000.5),
            command: Some("python train.py".into()),
            ..HostProc::default()
        };
        let text = serde_json::to_string(&gone).expect("json");
        assert_eq!(serde_json::from_str::<HostProc>(&text).expect("back"), gone);
    }

    /// A replay's offset in its recording: as recorded on the first pass, folded back onto the
    /// recording on later passes of a loop, never outside it.
    #[test]
    fn a_replays_offset_folds_loops_back_onto_the_recording() {
        let span = RecordingSpan {
            start: 1000.0,
            end: 1080.0,
            first: 1030.0,
            period: None,
        };
        assert!((span.length() - 80.0).abs() < 1e-9);
        assert!((span.offset(1042.5) - 42.5).abs() < 1e-9);
        assert!((span.offset(2000.0) - 80.0).abs() < 1e-9, "clamped");
        assert!(span.offset(900.0).abs() < 1e-9, "clamped");
        // Looping from 30 s: a pass of 50 s plus one 1-s interval; the second pass's 1081.0
        // (shifted by 51 s) is the recording's 1030.0.
        let looped = RecordingSpan {
            period: Some(51.0),
            ..span
        };
        assert!((looped.offset(1081.0) - 30.0).abs() < 1e-9);
        assert!((looped.offset(1081.0 + 51.0 + 5.0) - 35.0).abs() < 1e-9);
    }

    #[test]
    fn kinds_merge_to_both() {
        assert_eq!(ProcKind::Compute.merge(ProcKind::Graphics), ProcKind::Both);
        assert_eq!(
            ProcKind::Compute.merge(ProcKind::Compute),
            ProcKind::Compute
        );
    }
}
