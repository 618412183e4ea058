//! The scenario format: simulated GPUs and the processes on them, with values that follow
//! timelines, plus fault injection.
//!
//! One parser, shared by gpuwatch's `ScriptedSource` (`--demo`) and by `crates/fake-nvml` (the
//! NVML test double), so the demo and the double cannot disagree. A scenario is TOML:
//!
//! ```toml
//! version = 1
//! driver_version = "580.159.04"
//!
//! [clock]
//! freeze = 30.0            # optional: always evaluate at t = 30 s
//!
//! [[gpu]]
//! name = "NVIDIA H200"
//! uuid = "GPU-0f6c2d38-1c4e-4f3c-9a55-3b2b8f7d0001"
//! memory_total = "143771MiB"
//! memory_reserved = "616MiB"
//! base_used = "9MiB"       # used by nothing a process list shows (contexts, other namespaces)
//! util_gpu = { linear = [[0, 0], [10, 95]] }
//!
//! [[gpu.process]]
//! pid = 4242
//! used = { linear = [[0, "1GiB"], [60, "20GiB"]] }
//! sm = 80
//! ```
//!
//! Every value accepts a constant or a timeline (`{ linear = [[t, v], ...] }` or
//! `{ step = [[t, v], ...] }`, with optional `period` and `noise`); sizes accept units.

mod timeline;

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;

use serde::Deserialize;
use serde::de::{self, Deserializer};

pub use timeline::{Quantity, Timeline, parse_size};

/// The scenario format version this crate reads.
pub const FORMAT_VERSION: u32 = 1;

/// Errors loading a scenario. Parse errors carry the line and column.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read scenario file '{path}': {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid scenario{}: {message}", .path.as_ref().map(|p| format!(" '{p}'")).unwrap_or_default())]
    Parse {
        path: Option<String>,
        /// The parser's message, with line and column where known.
        message: String,
    },
}

/// A whole scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Format version; must be [`FORMAT_VERSION`] when present.
    #[serde(default = "default_version")]
    pub version: u32,
    /// What a human should know about this scenario.
    #[serde(default)]
    pub description: String,
    /// Driver version string as NVML reports it (`NNN.NN.NN`).
    #[serde(default = "default_driver")]
    pub driver_version: String,
    /// NVML library version string.
    #[serde(default = "default_nvml_version")]
    pub nvml_version: String,
    /// CUDA driver version as an integer (`13000` = 13.0).
    #[serde(default = "default_cuda")]
    pub cuda_driver_version: i32,
    /// Host name to report (scripted source only).
    #[serde(default)]
    pub hostname: Option<String>,
    /// The user the scripted source pretends you are, so the default watched set ("my
    /// processes") means something in a demo (scripted source only).
    #[serde(default)]
    pub demo_user: Option<String>,
    #[serde(default)]
    pub clock: ClockSpec,
    /// The driver is unloaded during this window: `nvmlInit` answers `DRIVER_NOT_LOADED` and
    /// calls on an existing session answer `UNINITIALIZED`, until the window ends.
    pub driver_unloaded: Option<Window>,
    #[serde(default, rename = "gpu")]
    pub gpus: Vec<Gpu>,
}

fn default_version() -> u32 {
    FORMAT_VERSION
}
fn default_driver() -> String {
    "580.159.04".to_string()
}
fn default_nvml_version() -> String {
    "13.580.159.04".to_string()
}
fn default_cuda() -> i32 {
    13000
}

/// How scenario time relates to wall time.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockSpec {
    /// When set, time stands still at this many seconds (deterministic tests).
    pub freeze: Option<f64>,
    /// Scenario seconds per wall second (default 1).
    pub speed: Option<f64>,
    /// Unix time (seconds) of t = 0, so that several processes share one timeline.
    pub epoch: Option<f64>,
}

/// A span of scenario time: `from` (inclusive) to `until` (exclusive; forever when absent).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Window {
    #[serde(default)]
    pub from: f64,
    pub until: Option<f64>,
}

impl Window {
    /// Whether `t` falls in the window.
    pub fn contains(&self, t: f64) -> bool {
        t >= self.from && self.until.is_none_or(|u| t < u)
    }
}

/// MIG mode of a simulated GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MigSpec {
    /// The board does not support MIG (`NotSupported`).
    #[default]
    Unsupported,
    Disabled,
    Enabled,
}

/// One simulated GPU.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    #[serde(default = "default_gpu_name")]
    pub name: String,
    /// `GPU-…`; generated from the index when absent.
    pub uuid: Option<String>,
    /// `00000000:BB:00.0`; generated from the index when absent.
    pub pci_bus_id: Option<String>,
    #[serde(deserialize_with = "de_bytes")]
    pub memory_total: u64,
    #[serde(default = "default_reserved", deserialize_with = "de_bytes")]
    pub memory_reserved: u64,
    /// Memory in use that no listed process accounts for (contexts, processes in other PID
    /// namespaces): it makes device `used` exceed the sum of process memory.
    #[serde(default)]
    pub base_used: Timeline,
    #[serde(default)]
    pub util_gpu: Timeline,
    #[serde(default)]
    pub util_mem: Timeline,
    #[serde(default = "default_temp")]
    pub temperature: Timeline,
    /// Slowdown threshold in °C.
    #[serde(default = "default_slowdown")]
    pub temp_slowdown: u32,
    /// Shutdown threshold in °C.
    #[serde(default = "default_shutdown")]
    pub temp_shutdown: u32,
    /// Power draw in watts.
    #[serde(default = "default_power")]
    pub power: Timeline,
    /// Enforced power limit in watts.
    #[serde(default = "default_power_limit")]
    pub power_limit: f64,
    /// SM clock in MHz.
    #[serde(default = "default_clock")]
    pub sm_clock: Timeline,
    /// Memory clock in MHz.
    #[serde(default = "default_mem_clock")]
    pub mem_clock: Timeline,
    /// PCIe receive throughput in KB/s (as NVML reports it).
    #[serde(default)]
    pub pcie_rx: Timeline,
    /// PCIe transmit throughput in KB/s.
    #[serde(default)]
    pub pcie_tx: Timeline,
    /// Volatile uncorrected ECC errors.
    #[serde(default)]
    pub ecc_uncorrected: Timeline,
    /// Number of fans; 0 on datacenter boards (fan speed then answers `NotSupported`).
    #[serde(default)]
    pub fans: u32,
    #[serde(default)]
    pub fan_speed: Timeline,
    #[serde(default)]
    pub mig: MigSpec,
    #[serde(default, rename = "mig_device")]
    pub mig_devices: Vec<MigDevice>,
    /// The GPU falls off the bus at this time: every call answers `GPU_IS_LOST` from then on.
    pub lost_at: Option<f64>,
    /// The GPU is back (after a reset) from this time on.
    pub lost_until: Option<f64>,
    /// The GPU is on the bus only during this window (hot-plug): before `from` and from
    /// `until` on, the driver does not list it (the device count leaves it out, the later
    /// GPUs' indices shift down, and calls on an old handle answer `GPU_IS_LOST`). Always
    /// present when absent.
    pub present: Option<Window>,
    #[serde(default)]
    pub faults: Faults,
    #[serde(default, rename = "process")]
    pub processes: Vec<Process>,
}

fn default_gpu_name() -> String {
    "NVIDIA H200".to_string()
}
fn default_reserved() -> u64 {
    616 << 20
}
fn default_temp() -> Timeline {
    Timeline::constant(35.0)
}
fn default_slowdown() -> u32 {
    87
}
fn default_shutdown() -> u32 {
    92
}
fn default_power() -> Timeline {
    Timeline::constant(120.0)
}
fn default_power_limit() -> f64 {
    700.0
}
fn default_clock() -> Timeline {
    Timeline::constant(1980.0)
}
fn default_mem_clock() -> Timeline {
    Timeline::constant(3201.0)
}

/// A MIG device (GPU instance + compute instance) carved from a GPU.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigDevice {
    pub gpu_instance: u32,
    pub compute_instance: u32,
    /// `MIG-…`; generated when absent.
    pub uuid: Option<String>,
    #[serde(deserialize_with = "de_bytes")]
    pub memory_total: u64,
}

/// The kind of GPU context a process holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProcKind {
    #[default]
    Compute,
    Graphics,
    /// Both a compute and a graphics context ("C+G").
    Both,
    /// A client of the MPS server (listed by the MPS call).
    Mps,
}

/// One simulated process on a GPU.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Process {
    pub pid: u32,
    #[serde(default, rename = "type")]
    pub kind: ProcKind,
    /// GPU memory the process holds.
    #[serde(default)]
    pub used: Timeline,
    /// NVML reports the process memory as not available (`~0`), as under WDDM or for some
    /// processes in other containers; the memory still counts in the device's `used`.
    #[serde(default)]
    pub used_unavailable: bool,
    /// SM utilisation %.
    #[serde(default)]
    pub sm: Timeline,
    /// Memory-bandwidth utilisation %.
    #[serde(default)]
    pub mem: Timeline,
    /// The process appears at this time (seconds).
    #[serde(default)]
    pub start: f64,
    /// The process is gone from this time on.
    pub end: Option<f64>,
    /// MIG GPU instance the process runs on.
    pub gpu_instance: Option<u32>,
    /// MIG compute instance the process runs on.
    pub compute_instance: Option<u32>,
    /// The process is counted by the sizing call and gone by the fill call (it exited in
    /// between), every time the list is read.
    #[serde(default)]
    pub vanish_between_calls: bool,
    /// Host-side facts, used by the scripted source (the double leaves these to `/proc`).
    #[serde(default)]
    pub host: HostSpec,
}

/// What the host would know about a simulated process.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    pub user: Option<String>,
    pub name: Option<String>,
    pub command: Option<String>,
    pub cpu: Option<Timeline>,
    pub rss: Option<Timeline>,
    pub ppid: Option<u32>,
    pub container: Option<String>,
    /// The process is in another PID namespace: the host cannot see it.
    #[serde(default)]
    pub hidden: bool,
    /// The process exits at this time (seconds) while the driver still lists its memory:
    /// from then on the scripted source reports it as exited, with the facts above as its last
    /// known ones. (The NVML double reads host facts from `/proc`: kill a real process there.)
    pub exited: Option<f64>,
}

/// NVML calls, as scenarios name them for fault injection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Call {
    Name,
    Uuid,
    PciInfo,
    Memory,
    Utilization,
    Temperature,
    TemperatureThreshold,
    Power,
    PowerLimit,
    Clock,
    PcieThroughput,
    Energy,
    Ecc,
    FanSpeed,
    ComputeProcesses,
    GraphicsProcesses,
    MpsProcesses,
    ProcessUtilization,
    MigMode,
}

impl Call {
    /// Every call, in a stable order.
    pub const ALL: [Call; 19] = [
        Call::Name,
        Call::Uuid,
        Call::PciInfo,
        Call::Memory,
        Call::Utilization,
        Call::Temperature,
        Call::TemperatureThreshold,
        Call::Power,
        Call::PowerLimit,
        Call::Clock,
        Call::PcieThroughput,
        Call::Energy,
        Call::Ecc,
        Call::FanSpeed,
        Call::ComputeProcesses,
        Call::GraphicsProcesses,
        Call::MpsProcesses,
        Call::ProcessUtilization,
        Call::MigMode,
    ];
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Call::Name => "name",
            Call::Uuid => "uuid",
            Call::PciInfo => "pci-info",
            Call::Memory => "memory",
            Call::Utilization => "utilization",
            Call::Temperature => "temperature",
            Call::TemperatureThreshold => "temperature-threshold",
            Call::Power => "power",
            Call::PowerLimit => "power-limit",
            Call::Clock => "clock",
            Call::PcieThroughput => "pcie-throughput",
            Call::Energy => "energy",
            Call::Ecc => "ecc",
            Call::FanSpeed => "fan-speed",
            Call::ComputeProcesses => "compute-processes",
            Call::GraphicsProcesses => "graphics-processes",
            Call::MpsProcesses => "mps-processes",
            Call::ProcessUtilization => "process-utilization",
            Call::MigMode => "mig-mode",
        };
        f.write_str(s)
    }
}

/// Injected faults of one GPU.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Faults {
    /// Calls that answer `NOT_SUPPORTED`.
    #[serde(default)]
    pub not_supported: BTreeSet<Call>,
    /// Calls that answer `NO_PERMISSION`.
    #[serde(default)]
    pub no_permission: BTreeSet<Call>,
    /// Calls that take a long time (or hang) within a time window.
    #[serde(default)]
    pub slow: Vec<SlowCall>,
}

/// A call that sleeps before answering.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlowCall {
    pub call: Call,
    /// How long the call sleeps, in milliseconds.
    pub ms: u64,
    /// From this scenario time on (default: always).
    #[serde(default)]
    pub from: f64,
    /// Until this scenario time (default: forever).
    pub until: Option<f64>,
}

impl Faults {
    /// How long `call` should sleep at time `t`, if at all.
    pub fn delay(&self, call: Call, t: f64) -> Option<std::time::Duration> {
        self.slow
            .iter()
            .find(|s| s.call == call && t >= s.from && s.until.is_none_or(|u| t < u))
            .map(|s| std::time::Duration::from_millis(s.ms))
    }
}

fn de_bytes<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    let q = Quantity::deserialize(deserializer)?;
    if q.0 < 0.0 {
        return Err(de::Error::custom("a size cannot be negative"));
    }
    Ok(q.0.round() as u64)
}

impl Process {
    /// Whether the process exists at time `t`.
    pub fn alive_at(&self, t: f64) -> bool {
        t >= self.start && self.end.is_none_or(|e| t < e)
    }

    /// The memory the process really holds at `t` (whether or not NVML reports it).
    pub fn used_at(&self, t: f64) -> u64 {
        self.used.at_u64(t)
    }
}

impl Gpu {
    /// The GPU's UUID, generated from its index when the scenario gives none.
    pub fn uuid(&self, index: usize) -> String {
        self.uuid
            .clone()
            .unwrap_or_else(|| format!("GPU-5ce1a7e0-0000-4000-8000-{index:012x}"))
    }

    /// The PCI bus id, generated from the index when the scenario gives none.
    pub fn pci_bus_id(&self, index: usize) -> String {
        self.pci_bus_id
            .clone()
            .unwrap_or_else(|| format!("00000000:{:02X}:00.0", 0x18 + index * 0x10))
    }

    /// Whether the driver lists the GPU at `t` (see [`Gpu::present`](#structfield.present)).
    pub fn present(&self, t: f64) -> bool {
        self.present.is_none_or(|w| w.contains(t))
    }

    /// Whether the GPU has fallen off the bus at `t`.
    pub fn lost(&self, t: f64) -> bool {
        self.lost_at.is_some_and(|l| t >= l) && self.lost_until.is_none_or(|u| t < u)
    }

    /// Processes alive at `t`.
    pub fn processes_at(&self, t: f64) -> impl Iterator<Item = &Process> {
        self.processes.iter().filter(move |p| p.alive_at(t))
    }

    /// Device memory `used` at `t` (the v2 call's meaning: excludes `reserved`), clamped to
    /// what the board has.
    pub fn used_at(&self, t: f64) -> u64 {
        let procs: u64 = self.processes_at(t).map(|p| p.used_at(t)).sum();
        let used = self.base_used.at_u64(t).saturating_add(procs);
        used.min(self.usable())
    }

    /// Free memory at `t`.
    pub fn free_at(&self, t: f64) -> u64 {
        self.usable().saturating_sub(self.used_at(t))
    }

    /// Total minus the driver's reservation.
    pub fn usable(&self) -> u64 {
        self.memory_total.saturating_sub(self.memory_reserved)
    }

    /// Energy consumed since t = 0, in millijoules (the integral of `power`).
    pub fn energy_mj_at(&self, t: f64) -> u64 {
        let joules = self.power.integral(t.max(0.0));
        (joules * 1000.0).round().max(0.0) as u64
    }

    /// Memory used on a MIG device at `t`: the processes on its instances.
    pub fn mig_used_at(&self, device: &MigDevice, t: f64) -> u64 {
        self.processes_at(t)
            .filter(|p| {
                p.gpu_instance == Some(device.gpu_instance)
                    && p.compute_instance
                        .is_none_or(|ci| ci == device.compute_instance)
            })
            .map(|p| p.used_at(t))
            .sum::<u64>()
            .min(device.memory_total)
    }
}

impl MigDevice {
    /// The MIG device's UUID, generated when the scenario gives none.
    pub fn uuid(&self, gpu_index: usize) -> String {
        self.uuid.clone().unwrap_or_else(|| {
            format!(
                "MIG-5ce1a7e0-{gpu_index:04x}-4000-8000-{:06x}{:06x}",
                self.gpu_instance, self.compute_instance
            )
        })
    }
}

/// The largest scenario file read (a scenario of 64 GPUs with 5 000 processes each is about
/// 20 MiB of TOML; the shipped ones are a few KiB).
pub const MAX_FILE_BYTES: u64 = 32 << 20;

impl Scenario {
    /// The GPUs the driver lists at `t`, in index order: (position in the scenario, GPU).
    /// The index NVML reports is the rank in this list.
    pub fn present_gpus(&self, t: f64) -> impl Iterator<Item = (usize, &Gpu)> {
        self.gpus
            .iter()
            .enumerate()
            .filter(move |(_, g)| g.present(t))
    }

    /// Parses a scenario from TOML text.
    pub fn parse(text: &str) -> Result<Self, ScenarioError> {
        Self::parse_named(text, None)
    }

    /// Reads and parses a scenario file: a regular file of at most [`MAX_FILE_BYTES`] (a
    /// device such as `/dev/zero` or a FIFO is refused, not read).
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        let text =
            textlimit::read_file(path, MAX_FILE_BYTES).map_err(|source| ScenarioError::Read {
                path: path.display().to_string(),
                source,
            })?;
        Self::parse_named(&text, Some(path.display().to_string()))
    }

    fn parse_named(text: &str, path: Option<String>) -> Result<Self, ScenarioError> {
        // TOML's message quotes the offending line: a line of a megabyte is quoted short.
        let short =
            |m: &str| textlimit::excerpt_lines(m.trim_end(), textlimit::QUOTE_MAX).into_owned();
        let scenario: Scenario = toml::from_str(text).map_err(|e| ScenarioError::Parse {
            path: path.clone(),
            message: short(&e.to_string()),
        })?;
        scenario
            .validate()
            .map_err(|message| ScenarioError::Parse {
                path,
                message: short(&message),
            })?;
        Ok(scenario)
    }

    fn validate(&self) -> Result<(), String> {
        if self.version != FORMAT_VERSION {
            return Err(format!(
                "version {} is not supported (this build reads version {FORMAT_VERSION})",
                self.version
            ));
        }
        let parts: Vec<&str> = self.driver_version.split('.').collect();
        if parts.len() < 2 || parts.iter().any(|p| p.parse::<u32>().is_err()) {
            return Err(format!(
                "driver_version '{}' must look like NNN.NN.NN",
                self.driver_version
            ));
        }
        if let Some(speed) = self.clock.speed
            && speed <= 0.0
        {
            return Err("clock.speed must be a positive number".to_string());
        }
        for (i, gpu) in self.gpus.iter().enumerate() {
            if gpu.memory_reserved > gpu.memory_total {
                return Err(format!(
                    "gpu {i}: memory_reserved is larger than memory_total"
                ));
            }
            if let Some(w) = gpu.present
                && (!w.from.is_finite() || w.until.is_some_and(|u| u.is_nan() || u <= w.from))
            {
                return Err(format!(
                    "gpu {i}: present = {{ from, until }} needs a finite from and an until after it"
                ));
            }
            let mut seen = BTreeSet::new();
            for p in &gpu.processes {
                if !seen.insert(p.pid) {
                    return Err(format!(
                        "gpu {i}: pid {} is listed twice (give one entry with type = \"both\" for C+G)",
                        p.pid
                    ));
                }
                if p.end.is_some_and(|e| e < p.start) {
                    return Err(format!("gpu {i}: pid {} ends before it starts", p.pid));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
version = 1
[clock]
freeze = 30.0

[[gpu]]
memory_total = "80GiB"
memory_reserved = "0"
base_used = "1GiB"
faults.not_supported = ["power", "process-utilization"]
faults.slow = [{ call = "memory", ms = 50, from = 10 }]

[[gpu.process]]
pid = 10
used = { linear = [[0, "1GiB"], [10, "2GiB"]] }

[[gpu.process]]
pid = 11
used = "4GiB"
start = 5
end = 20
"#;

    #[test]
    fn parses_and_evaluates() {
        let s = Scenario::parse(SAMPLE).expect("valid");
        let gpu = &s.gpus[0];
        assert_eq!(s.clock.freeze, Some(30.0));
        assert_eq!(gpu.processes_at(0.0).count(), 1);
        assert_eq!(gpu.processes_at(6.0).count(), 2);
        assert_eq!(gpu.used_at(10.0), (1 << 30) + (2 << 30) + (4 << 30));
        assert_eq!(gpu.free_at(10.0), (80 << 30) - (7 << 30));
        assert!(gpu.faults.not_supported.contains(&Call::Power));
        assert_eq!(
            gpu.faults.delay(Call::Memory, 12.0),
            Some(std::time::Duration::from_millis(50))
        );
        assert_eq!(gpu.faults.delay(Call::Memory, 2.0), None);
        assert!(gpu.uuid(0).starts_with("GPU-"));
    }

    #[test]
    fn errors_name_line_and_column() {
        let err = Scenario::parse("[[gpu]]\nmemory_total = \"80 bananas\"\n").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("line 2"), "{msg}");
        assert!(msg.contains("column"), "{msg}");
        assert!(msg.contains("80 bananas"), "{msg}");
    }

    #[test]
    fn unknown_keys_and_calls_are_rejected() {
        let err = Scenario::parse("[[gpu]]\nmemory_total = 1\nmemroy = 2\n").unwrap_err();
        assert!(err.to_string().contains("memroy"), "{err}");
        let err = Scenario::parse("[[gpu]]\nmemory_total = 1\nfaults.not_supported = [\"fly\"]\n")
            .unwrap_err();
        assert!(err.to_string().contains("fly"), "{err}");
    }

    #[test]
    fn a_present_window_that_never_opens_is_an_error() {
        for w in [
            "{ from = 5, until = 5 }",
            "{ from = 5, until = 2 }",
            "{ from = nan }",
            "{ from = 1, until = nan }",
        ] {
            let err = Scenario::parse(&format!(
                "[[gpu]]\nmemory_total = \"1GiB\"\npresent = {w}\n"
            ))
            .unwrap_err();
            assert!(err.to_string().contains("present"), "{w}: {err}");
        }
        assert!(
            Scenario::parse(
                "[[gpu]]\nmemory_total = \"1GiB\"\npresent = { from = 2, until = 9 }\n"
            )
            .is_ok()
        );
    }

    #[test]
    fn duplicate_pid_is_an_error() {
        let err = Scenario::parse(
            "[[gpu]]\nmemory_total = \"1GiB\"\n[[gpu.process]]\npid = 1\n[[gpu.process]]\npid = 1\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("pid 1 is listed twice"), "{err}");
    }

    #[test]
    fn used_is_clamped_to_the_board() {
        let s = Scenario::parse(
            "[[gpu]]\nmemory_total = \"10GiB\"\nmemory_reserved = \"1GiB\"\n[[gpu.process]]\npid = 1\nused = \"50GiB\"\n",
        )
        .expect("valid");
        assert_eq!(s.gpus[0].used_at(0.0), 9 << 30);
        assert_eq!(s.gpus[0].free_at(0.0), 0);
    }

    #[test]
    fn energy_integrates_power() {
        let s = Scenario::parse("[[gpu]]\nmemory_total = \"1GiB\"\npower = 100\n").expect("valid");
        assert_eq!(s.gpus[0].energy_mj_at(10.0), 1_000_000);
    }
}
