//! The `snapshot --json` schema (version 1), documented in `docs/snapshot-json.md`.
//!
//! Its own types, separate from the internal model, so the model can change without breaking
//! scripts: bytes are integers, percentages are numbers, `null` means unavailable. New fields
//! may be added within a schema version; nothing is renamed or removed without a new version.

use serde::{Deserialize, Serialize};

use super::WatchedFn;
use crate::model::{Frame, GpuSample, MigMode, ProcSample};

/// Bumped when a field changes meaning, type or name, or is removed.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
pub struct Snapshot {
    pub schema_version: u32,
    pub host: String,
    pub source: Source,
    /// RFC 3339, UTC.
    pub taken_at: String,
    pub taken_at_unix: f64,
    /// Seconds since the sampler published this frame.
    pub age_seconds: f64,
    /// The sampler's fast interval (added in 0.1; absent from older documents).
    #[serde(default)]
    pub interval_seconds: Option<f64>,
    pub stale: bool,
    pub errors: Vec<Error>,
    pub gpus: Vec<Gpu>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Source {
    pub kind: String,
    pub detail: String,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    pub nvml_version: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Error {
    pub call: String,
    pub error: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct MemoryJson {
    pub total_bytes: u64,
    pub reserved_bytes: Option<u64>,
    pub used_bytes: u64,
    pub free_bytes: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Gpu {
    pub index: u32,
    pub uuid: String,
    pub name: Option<String>,
    pub pci_bus_id: Option<String>,
    pub lost: bool,
    pub memory: Option<MemoryJson>,
    /// `used − Σ process memory`; `null` when a process's memory is unavailable.
    pub unattributed_bytes: Option<u64>,
    /// Memory of watched processes ("mine").
    pub mine_bytes: Option<u64>,
    /// Everything else in `used`, unattributed memory included.
    pub external_bytes: Option<u64>,
    pub utilization_percent: Option<f32>,
    pub memory_bandwidth_percent: Option<f32>,
    pub temperature_celsius: Option<u32>,
    pub temperature_slowdown_celsius: Option<u32>,
    pub power_watts: Option<f64>,
    pub power_limit_watts: Option<f64>,
    pub sm_clock_mhz: Option<u32>,
    pub memory_clock_mhz: Option<u32>,
    pub pcie_rx_bytes_per_second: Option<u64>,
    pub pcie_tx_bytes_per_second: Option<u64>,
    pub energy_joules: Option<f64>,
    pub ecc_uncorrected_volatile: Option<u64>,
    /// `"enabled"`, `"disabled"`, or `null` when the board has no MIG.
    pub mig_mode: Option<String>,
    pub mig_devices: Vec<MigDevice>,
    pub errors: Vec<Error>,
    /// False when the driver did not give the process list (not supported, no permission,
    /// a failed or stuck call, a lost GPU): `processes` is then empty because it is unknown.
    #[serde(default = "yes")]
    pub processes_available: bool,
    pub processes: Vec<Process>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct MigDevice {
    pub index: u32,
    pub uuid: Option<String>,
    pub gpu_instance: Option<u32>,
    pub compute_instance: Option<u32>,
    pub memory: Option<MemoryJson>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Process {
    pub pid: u32,
    /// `"C"`, `"G"` or `"C+G"`.
    #[serde(rename = "type")]
    pub kind: String,
    pub used_bytes: Option<u64>,
    pub sm_percent: Option<f32>,
    pub memory_bandwidth_percent: Option<f32>,
    pub gpu_instance: Option<u32>,
    pub compute_instance: Option<u32>,
    /// In the watched set ("mine").
    pub watched: bool,
    /// Whether this host's `/proc` shows the PID.
    pub visible: bool,
    pub name: Option<String>,
    pub command: Option<String>,
    pub user: Option<String>,
    pub cpu_percent: Option<f32>,
    pub rss_bytes: Option<u64>,
    /// Unix seconds.
    pub start_time: Option<u64>,
    pub elapsed_seconds: Option<u64>,
    pub ppid: Option<u32>,
    pub container: Option<String>,
    /// The process left `/proc` while the driver still lists it: `visible` is false and the
    /// host fields are its last known ones (added within schema 1; absent: false).
    #[serde(default)]
    pub exited: bool,
    /// With `exited`: when gpuwatch first found it gone, seconds since the Unix epoch.
    #[serde(default)]
    pub exited_at: Option<f64>,
}

fn yes() -> bool {
    true
}

fn memory(m: Option<crate::model::Memory>) -> Option<MemoryJson> {
    m.map(|m| MemoryJson {
        total_bytes: m.total,
        reserved_bytes: m.reserved,
        used_bytes: m.used,
        free_bytes: m.free,
    })
}

fn errors(list: &[crate::model::CallError]) -> Vec<Error> {
    list.iter()
        .map(|e| Error {
            call: e.call.clone(),
            error: e.error.clone(),
        })
        .collect()
}

/// The memory of watched processes and everything else (`None` when a process is n/a).
pub fn split_mine(gpu: &GpuSample, watched: WatchedFn<'_>) -> Option<(u64, u64)> {
    let s = crate::analysis::MemSplit::of(gpu, watched)?;
    Some((s.mine?, s.external?))
}

fn process(p: &ProcSample, now_unix: u64, watched: WatchedFn<'_>) -> Process {
    Process {
        pid: p.pid,
        kind: p.kind.label().to_string(),
        used_bytes: p.used_bytes,
        sm_percent: p.sm_percent,
        memory_bandwidth_percent: p.mem_percent,
        gpu_instance: p.gpu_instance,
        compute_instance: p.compute_instance,
        watched: watched(p),
        visible: p.host.visible,
        name: p.host.name.clone(),
        command: p.host.command.clone(),
        user: p.host.user.clone(),
        cpu_percent: p.host.cpu_percent,
        rss_bytes: p.host.rss_bytes,
        start_time: p.host.start_time,
        elapsed_seconds: p.host.start_time.map(|s| now_unix.saturating_sub(s)),
        ppid: p.host.ppid,
        container: p.host.container.clone(),
        exited: p.host.exited,
        exited_at: p.host.exited_at,
    }
}

/// Builds the schema from a frame. `gpus` selects GPUs (all when empty).
pub fn snapshot(frame: &Frame, gpus: &[u32], watched: WatchedFn<'_>, now_unix: u64) -> Snapshot {
    let info = &frame.source;
    let sample = &frame.sample;
    Snapshot {
        schema_version: SCHEMA_VERSION,
        host: info.host.clone(),
        source: Source {
            kind: info.kind.to_string(),
            detail: info.detail.clone(),
            driver_version: info.driver_version.clone(),
            cuda_version: info.cuda_version.clone(),
            nvml_version: info.nvml_version.clone(),
        },
        taken_at: humantime::format_rfc3339_millis(sample.taken_at_system()).to_string(),
        taken_at_unix: sample.taken_at,
        age_seconds: frame.age().as_secs_f64(),
        interval_seconds: Some(frame.interval.as_secs_f64()),
        stale: frame.is_stale(),
        errors: errors(&sample.errors),
        gpus: sample
            .gpus
            .iter()
            .filter(|g| gpus.is_empty() || gpus.contains(&g.index))
            .map(|g| {
                let split = split_mine(g, watched);
                Gpu {
                    index: g.index,
                    uuid: g.uuid.clone(),
                    name: g.name.clone(),
                    pci_bus_id: g.pci_bus_id.clone(),
                    lost: g.lost,
                    memory: memory(g.memory),
                    unattributed_bytes: g.unattributed_bytes(),
                    mine_bytes: split.map(|s| s.0),
                    external_bytes: split.map(|s| s.1),
                    utilization_percent: g.util_gpu,
                    memory_bandwidth_percent: g.util_mem,
                    temperature_celsius: g.temperature_c,
                    temperature_slowdown_celsius: g.temp_slowdown_c,
                    power_watts: g.power_watts,
                    power_limit_watts: g.power_limit_watts,
                    sm_clock_mhz: g.sm_clock_mhz,
                    memory_clock_mhz: g.slow.mem_clock_mhz,
                    pcie_rx_bytes_per_second: g.slow.pcie_rx_bytes_per_s,
                    pcie_tx_bytes_per_second: g.slow.pcie_tx_bytes_per_s,
                    energy_joules: g.slow.energy_joules,
                    ecc_uncorrected_volatile: g.slow.ecc_uncorrected,
                    mig_mode: g.mig_mode.map(|m| {
                        match m {
                            MigMode::Enabled => "enabled",
                            MigMode::Disabled => "disabled",
                        }
                        .to_string()
                    }),
                    mig_devices: g
                        .mig_devices
                        .iter()
                        .map(|d| MigDevice {
                            index: d.index,
                            uuid: d.uuid.clone(),
                            gpu_instance: d.gpu_instance,
                            compute_instance: d.compute_instance,
                            memory: memory(d.memory),
                        })
                        .collect(),
                    errors: errors(&g.errors),
                    processes_available: !g.processes_unavailable,
                    processes: g
                        .processes
                        .iter()
                        .map(|p| process(p, now_unix, watched))
                        .collect(),
                }
            })
            .collect(),
    }
}

fn memory_back(m: Option<&MemoryJson>) -> Option<crate::model::Memory> {
    m.map(|m| crate::model::Memory {
        total: m.total_bytes,
        reserved: m.reserved_bytes,
        used: m.used_bytes,
        free: m.free_bytes,
    })
}

fn errors_back(list: &[Error]) -> Vec<crate::model::CallError> {
    list.iter()
        .map(|e| crate::model::CallError {
            call: e.call.clone(),
            error: e.error.clone(),
        })
        .collect()
}

impl Snapshot {
    /// The source facts and the sample this document describes: what a remote dashboard
    /// shows (`tui --connect`). The inverse of [`snapshot`] for every field the schema carries;
    /// derived fields (`mine_bytes`, …) are recomputed by the reader.
    pub fn to_model(&self) -> (crate::model::SourceInfo, crate::model::Sample) {
        use crate::model::{GpuSample, HostProc, MigDeviceSample, ProcKind, SlowReadings};
        let info = crate::model::SourceInfo {
            kind: crate::model::SourceKind::Remote,
            host: self.host.clone(),
            driver_version: self.source.driver_version.clone(),
            cuda_version: self.source.cuda_version.clone(),
            nvml_version: self.source.nvml_version.clone(),
            detail: format!("{} ({})", self.source.kind, self.source.detail),
            me: None,
            span: None,
        };
        let gpus = self
            .gpus
            .iter()
            .map(|g| GpuSample {
                index: g.index,
                uuid: g.uuid.clone(),
                name: g.name.clone(),
                pci_bus_id: g.pci_bus_id.clone(),
                memory: memory_back(g.memory.as_ref()),
                util_gpu: g.utilization_percent,
                util_mem: g.memory_bandwidth_percent,
                temperature_c: g.temperature_celsius,
                temp_slowdown_c: g.temperature_slowdown_celsius,
                power_watts: g.power_watts,
                power_limit_watts: g.power_limit_watts,
                sm_clock_mhz: g.sm_clock_mhz,
                slow: SlowReadings {
                    pcie_rx_bytes_per_s: g.pcie_rx_bytes_per_second,
                    pcie_tx_bytes_per_s: g.pcie_tx_bytes_per_second,
                    energy_joules: g.energy_joules,
                    ecc_uncorrected: g.ecc_uncorrected_volatile,
                    mem_clock_mhz: g.memory_clock_mhz,
                    taken_at: None,
                },
                mig_mode: g.mig_mode.as_deref().and_then(|m| match m {
                    "enabled" => Some(MigMode::Enabled),
                    "disabled" => Some(MigMode::Disabled),
                    _ => None,
                }),
                mig_devices: g
                    .mig_devices
                    .iter()
                    .map(|d| MigDeviceSample {
                        index: d.index,
                        uuid: d.uuid.clone(),
                        gpu_instance: d.gpu_instance,
                        compute_instance: d.compute_instance,
                        memory: memory_back(d.memory.as_ref()),
                    })
                    .collect(),
                lost: g.lost,
                processes_unavailable: !g.processes_available,
                processes: g
                    .processes
                    .iter()
                    .map(|p| ProcSample {
                        pid: p.pid,
                        kind: match p.kind.as_str() {
                            "G" => ProcKind::Graphics,
                            "C+G" => ProcKind::Both,
                            _ => ProcKind::Compute,
                        },
                        used_bytes: p.used_bytes,
                        sm_percent: p.sm_percent,
                        mem_percent: p.memory_bandwidth_percent,
                        gpu_instance: p.gpu_instance,
                        compute_instance: p.compute_instance,
                        host: HostProc {
                            visible: p.visible,
                            name: p.name.clone(),
                            command: p.command.clone(),
                            user: p.user.clone(),
                            uid: None,
                            cpu_percent: p.cpu_percent,
                            rss_bytes: p.rss_bytes,
                            start_time: p.start_time,
                            ppid: p.ppid,
                            container: p.container.clone(),
                            exited: p.exited,
                            exited_at: p.exited_at,
                        },
                    })
                    .collect(),
                errors: errors_back(&g.errors),
            })
            .collect();
        let sample = crate::model::Sample {
            taken_at: self.taken_at_unix,
            gpus,
            errors: errors_back(&self.errors),
            collect_seconds: 0.0,
        };
        (info, sample)
    }
}
