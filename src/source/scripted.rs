//! The scripted source: GPUs and processes from a scenario file (`--demo`, `--scenario FILE`).
//!
//! The scenario format lives in `crates/scenario`, shared with the NVML test double, so the
//! demo and the double cannot disagree. Host facts (user, command, container…) come from the
//! scenario's `host` tables, since the demo's PIDs are not real processes.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use scenario::{Call, Gpu, Scenario, ScenarioError};

use super::{CallProbe, GpuSource};
use crate::model::{
    CallError, GpuSample, HostProc, Memory, MigDeviceSample, MigMode, ProcKind, ProcSample, Sample,
    SlowReadings, SourceInfo, SourceKind,
};

/// Scenario time at which `--demo` starts.
pub const DEMO_START: f64 = 90.0;

/// The demo scenario shipped in the binary.
pub const DEMO_SCENARIO: &str = include_str!("../../assets/scenarios/demo.toml");

/// A source that evaluates a scenario at the current scenario time.
pub struct ScriptedSource {
    scenario: Scenario,
    name: String,
    started: Instant,
    /// Scenario time at `started`.
    offset: f64,
    speed: f64,
}

impl ScriptedSource {
    /// The built-in demo, started at [`DEMO_START`] so every story is already on screen.
    pub fn demo() -> Result<Self, ScenarioError> {
        Ok(Self::new(Scenario::parse(DEMO_SCENARIO)?, "built-in demo").starting_at(DEMO_START))
    }

    /// A scenario file.
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        Ok(Self::new(
            Scenario::load(path)?,
            &path.display().to_string(),
        ))
    }

    /// A parsed scenario; time starts now at 0 (or where `clock.epoch` says).
    pub fn new(scenario: Scenario, name: &str) -> Self {
        let offset = scenario.clock.epoch.map_or(0.0, |epoch| {
            let now = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            (now - epoch).max(0.0)
        });
        let speed = scenario.clock.speed.unwrap_or(1.0);
        Self {
            scenario,
            name: name.to_string(),
            started: Instant::now(),
            offset,
            speed,
        }
    }

    /// Starts the timeline at `t` seconds instead of 0.
    #[must_use]
    pub fn starting_at(mut self, t: f64) -> Self {
        self.offset = t;
        self
    }

    /// The scenario time now.
    pub fn now(&self) -> f64 {
        self.scenario
            .clock
            .freeze
            .unwrap_or_else(|| self.offset + self.started.elapsed().as_secs_f64() * self.speed)
    }

    /// The timeline before scenario time `t`, every `step` (wall time) over `span`, oldest
    /// first, stamped that long before `wall` ([`GpuSource::past`] at now; pure otherwise).
    pub fn past_at(&self, t: f64, wall: f64, span: Duration, step: Duration) -> Vec<Sample> {
        let step_s = step.as_secs_f64();
        if step_s <= 0.0 {
            return Vec::new();
        }
        // At most one sample per step, and never a million of them for a tiny step.
        let n = ((span.as_secs_f64() / step_s).floor() as usize).min(100_000);
        (1..=n)
            .rev()
            .map(|k| {
                let back = k as f64 * step_s;
                self.sample_at(t - back * self.speed, wall - back)
            })
            .collect()
    }

    /// The sample the scenario describes at time `t` (pure: no sleeping, no clock).
    pub fn sample_at(&self, t: f64, taken_at: f64) -> Sample {
        let gpus = self
            .scenario
            .present_gpus(t)
            .enumerate()
            .map(|(rank, (i, g))| {
                let mut s = gpu_at(g, i, t, taken_at);
                s.index = rank as u32;
                s
            })
            .collect();
        Sample {
            taken_at,
            gpus,
            errors: Vec::new(),
            collect_seconds: 0.0,
        }
    }
}

fn gpu_at(g: &Gpu, index: usize, t: f64, taken_at: f64) -> GpuSample {
    let mut s = GpuSample::empty(index as u32, g.uuid(index));
    s.name = Some(g.name.clone());
    s.pci_bus_id = Some(g.pci_bus_id(index));
    if g.lost(t) {
        s.lost = true;
        s.processes_unavailable = true;
        s.errors.push(CallError {
            call: "memory_info".to_string(),
            error: "GpuLost".to_string(),
        });
        return s;
    }
    let off: &BTreeSet<Call> = &g.faults.not_supported;
    let denied: &BTreeSet<Call> = &g.faults.no_permission;
    let has = |c: Call| !off.contains(&c) && !denied.contains(&c);
    for c in denied {
        s.errors.push(CallError {
            call: nvml_call_name(*c).to_string(),
            error: "NoPermission".to_string(),
        });
    }

    if has(Call::Memory) {
        s.memory = Some(Memory {
            total: g.memory_total,
            reserved: Some(g.memory_reserved),
            used: g.used_at(t),
            free: g.free_at(t),
        });
    }
    if has(Call::Utilization) {
        s.util_gpu = Some(g.util_gpu.percent_at(t) as f32);
        s.util_mem = Some(g.util_mem.percent_at(t) as f32);
    }
    if has(Call::Temperature) {
        s.temperature_c = Some(g.temperature.at(t).round().max(0.0) as u32);
    }
    if has(Call::TemperatureThreshold) {
        s.temp_slowdown_c = Some(g.temp_slowdown);
    }
    if has(Call::Power) {
        s.power_watts = Some((g.power.at(t) * 1000.0).round() / 1000.0);
    }
    if has(Call::PowerLimit) {
        s.power_limit_watts = Some(g.power_limit);
    }
    if has(Call::Clock) {
        s.sm_clock_mhz = Some(g.sm_clock.at_u64(t) as u32);
    }
    s.slow = SlowReadings {
        pcie_rx_bytes_per_s: has(Call::PcieThroughput).then(|| g.pcie_rx.at_u64(t) * 1024),
        pcie_tx_bytes_per_s: has(Call::PcieThroughput).then(|| g.pcie_tx.at_u64(t) * 1024),
        energy_joules: has(Call::Energy).then(|| g.energy_mj_at(t) as f64 / 1000.0),
        ecc_uncorrected: has(Call::Ecc).then(|| g.ecc_uncorrected.at_u64(t)),
        mem_clock_mhz: has(Call::Clock).then(|| g.mem_clock.at_u64(t) as u32),
        taken_at: Some(taken_at),
    };
    if has(Call::MigMode) {
        s.mig_mode = match g.mig {
            scenario::MigSpec::Unsupported => None,
            scenario::MigSpec::Disabled => Some(MigMode::Disabled),
            scenario::MigSpec::Enabled => Some(MigMode::Enabled),
        };
    }
    if s.mig_mode == Some(MigMode::Enabled) {
        s.mig_devices = g
            .mig_devices
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let used = g.mig_used_at(d, t);
                MigDeviceSample {
                    index: i as u32,
                    uuid: Some(d.uuid(index)),
                    gpu_instance: Some(d.gpu_instance),
                    compute_instance: Some(d.compute_instance),
                    memory: Some(Memory {
                        total: d.memory_total,
                        reserved: None,
                        used,
                        free: d.memory_total.saturating_sub(used),
                    }),
                }
            })
            .collect();
    }
    s.processes = processes_at(g, t, taken_at, &has);
    s.processes_unavailable = !has(Call::ComputeProcesses);
    s.sort_processes();
    s
}

fn processes_at(g: &Gpu, t: f64, taken_at: f64, has: &dyn Fn(Call) -> bool) -> Vec<ProcSample> {
    let util_known = has(Call::ProcessUtilization);
    g.processes_at(t)
        .filter(|p| match p.kind {
            scenario::ProcKind::Compute | scenario::ProcKind::Both => has(Call::ComputeProcesses),
            scenario::ProcKind::Graphics => has(Call::GraphicsProcesses),
            scenario::ProcKind::Mps => has(Call::MpsProcesses),
        })
        .map(|p| ProcSample {
            pid: p.pid,
            kind: match p.kind {
                scenario::ProcKind::Compute | scenario::ProcKind::Mps => ProcKind::Compute,
                scenario::ProcKind::Graphics => ProcKind::Graphics,
                scenario::ProcKind::Both => ProcKind::Both,
            },
            used_bytes: (!p.used_unavailable).then(|| p.used_at(t)),
            sm_percent: util_known.then(|| p.sm.percent_at(t) as f32),
            mem_percent: util_known.then(|| p.mem.percent_at(t) as f32),
            gpu_instance: p.gpu_instance,
            compute_instance: p.compute_instance,
            host: host_at(&p.host, p.start, t, taken_at),
        })
        .collect()
}

/// The name the live source gives the NVML call behind a scenario call, so errors read the
/// same whichever source produced them.
fn nvml_call_name(call: Call) -> &'static str {
    match call {
        Call::Name => "name",
        Call::Uuid => "uuid",
        Call::PciInfo => "pci_info",
        Call::Memory => "memory_info",
        Call::Utilization => "utilization_rates",
        Call::Temperature => "temperature",
        Call::TemperatureThreshold => "temperature_threshold",
        Call::Power => "power_usage",
        Call::PowerLimit => "enforced_power_limit",
        Call::Clock => "clock_info_sm",
        Call::PcieThroughput => "pcie_throughput_rx",
        Call::Energy => "total_energy_consumption",
        Call::Ecc => "total_ecc_errors",
        Call::FanSpeed => "fan_speed",
        Call::ComputeProcesses => "running_compute_processes",
        Call::GraphicsProcesses => "running_graphics_processes",
        Call::MpsProcesses => "mps_running_compute_processes",
        Call::ProcessUtilization => "process_utilization",
        Call::MigMode => "mig_mode",
    }
}

fn host_at(h: &scenario::HostSpec, start: f64, t: f64, taken_at: f64) -> HostProc {
    if h.hidden {
        return HostProc::default();
    }
    let now = taken_at.max(0.0) as u64;
    // Exited at `x` (scenario seconds): what the host knew of it, and when it went.
    let exited_at = h.exited.filter(|&x| t >= x).map(|x| taken_at - (t - x));
    let exited = exited_at.is_some();
    HostProc {
        visible: !exited,
        name: h.name.clone().or_else(|| {
            h.command
                .as_deref()
                .and_then(|c| c.split_whitespace().next())
                .map(|c| c.rsplit('/').next().unwrap_or(c).to_string())
        }),
        command: h.command.clone(),
        user: h.user.clone(),
        uid: None,
        cpu_percent: h
            .cpu
            .as_ref()
            .filter(|_| !exited)
            .map(|c| c.at(t).max(0.0) as f32),
        rss_bytes: h.rss.as_ref().filter(|_| !exited).map(|r| r.at_u64(t)),
        // The process started (t - start) scenario seconds ago.
        start_time: Some(now.saturating_sub((t - start).max(0.0) as u64)),
        ppid: h.ppid,
        container: h.container.clone(),
        exited,
        exited_at,
    }
}

impl GpuSource for ScriptedSource {
    fn info(&self) -> SourceInfo {
        SourceInfo {
            kind: SourceKind::Demo,
            host: self
                .scenario
                .hostname
                .clone()
                .unwrap_or_else(|| "demo".to_string()),
            driver_version: Some(self.scenario.driver_version.clone()),
            cuda_version: Some(format!(
                "{}.{}",
                self.scenario.cuda_driver_version / 1000,
                (self.scenario.cuda_driver_version % 1000) / 10
            )),
            nvml_version: Some(self.scenario.nvml_version.clone()),
            detail: self.name.clone(),
            me: self.scenario.demo_user.clone(),
            span: None,
        }
    }

    fn sample(&mut self, probe: &CallProbe) -> Sample {
        let started = Instant::now();
        let t = self.now();
        // Injected slow calls sleep here too, so a hanging source can be shown without a GPU.
        for (i, g) in self.scenario.gpus.iter().enumerate() {
            if let Some(delay) = g.faults.delay(Call::Memory, t) {
                probe.call("memory_info", Some(i as u32), || std::thread::sleep(delay));
            }
        }
        let taken_at = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let mut sample = self.sample_at(t, taken_at);
        sample.collect_seconds = started.elapsed().as_secs_f64();
        sample
    }

    /// The timeline before now, every `step` over `span` (scenario time runs `speed` times
    /// as fast), stamped that long before the wall clock's now.
    fn past(&self, span: Duration, step: Duration) -> Vec<Sample> {
        let wall = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.past_at(self.now(), wall, span, step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_past_is_the_timeline_before_now_oldest_first_stamped_before_now() {
        let demo = ScriptedSource::demo().expect("demo");
        let past = demo.past(Duration::from_secs(10), Duration::from_secs(1));
        assert_eq!(past.len(), 10);
        let wall = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("clock")
            .as_secs_f64();
        assert!(
            past.windows(2)
                .all(|w| (w[1].taken_at - w[0].taken_at - 1.0).abs() < 1e-6)
        );
        let newest = past.last().expect("samples").taken_at;
        assert!((wall - newest - 1.0).abs() < 0.5, "one step before now");
        // Bob's evaluation job arrives at t = 30: ten seconds before t = 90 it is there.
        let bob = |s: &Sample| s.gpus[3].processes.iter().any(|p| p.pid == 4120);
        assert!(past.iter().all(bob));
        // A zero step or span gives nothing rather than a flood.
        assert!(
            demo.past(Duration::from_secs(10), Duration::ZERO)
                .is_empty()
        );
        assert!(demo.past(Duration::ZERO, Duration::from_secs(1)).is_empty());
    }

    /// The dashboard's analysis at the defaults, alice's processes watched.
    fn alice_analyzer() -> crate::analysis::Analyzer {
        crate::analysis::Analyzer::new(
            crate::detect::Rules::default(),
            Duration::from_mins(10),
            crate::analysis::Detail::Full,
            crate::watch::WatchSet::new(Vec::new(), Some("alice".into())),
        )
    }

    /// The demo's past run through the analysis leaves every story open at its start: near
    /// capacity, filling-up with its time to full, a leak, external pressure, an idle holder,
    /// an exited process whose memory the driver still holds.
    #[test]
    fn the_demo_primed_with_its_past_opens_six_rules_at_its_start() {
        let demo = ScriptedSource::demo().expect("demo");
        let info = std::sync::Arc::new(demo.info());
        let mut analyzer = alice_analyzer();
        analyzer.prime(
            demo.past(crate::source::PREROLL, Duration::from_secs(1)),
            &info,
        );
        let rules: BTreeSet<&str> = analyzer.open().iter().map(|f| f.id.rule.name()).collect();
        assert_eq!(
            rules,
            [
                "exited-holder",
                "external-pressure",
                "filling-up",
                "idle-holder",
                "leak-suspected",
                "near-capacity"
            ]
            .into(),
            "{:#?}",
            analyzer.open()
        );
    }

    /// While filling-up is open, the analysis's time to full (the panel's "full in" and
    /// /metrics) is the finding's, also on frames whose window alone is no ramp.
    #[test]
    fn the_time_to_full_of_a_gpu_is_its_open_filling_up_findings() {
        let demo = ScriptedSource::demo().expect("demo");
        let info = std::sync::Arc::new(demo.info());
        let mut analyzer = alice_analyzer();
        let wall = 1_800_000_000.0;
        analyzer.prime(
            demo.past_at(
                DEMO_START,
                wall,
                crate::source::PREROLL,
                Duration::from_secs(1),
            ),
            &info,
        );
        let mut open_frames = 0;
        for i in 0..40u32 {
            let t = f64::from(i);
            let frame = std::sync::Arc::new(crate::model::Frame {
                seq: u64::from(i) + 1,
                source: std::sync::Arc::clone(&info),
                sample: demo.sample_at(DEMO_START + t, wall + t),
                published: Instant::now(),
                interval: Duration::from_secs(1),
                host: None,
            });
            let a = analyzer.push(&frame);
            for f in a
                .findings
                .iter()
                .filter(|f| f.id.rule.name() == "filling-up")
            {
                open_frames += 1;
                let shown = a.gpu(&f.id.gpu).and_then(|g| g.time_to_full_s);
                assert_eq!(shown, f.time_to_full_s, "at DEMO_START + {t}");
            }
        }
        assert!(open_frames > 0, "GPU 3 fills at the demo's start");
    }

    #[test]
    fn demo_scenario_parses_and_tells_its_story() {
        let demo = ScriptedSource::demo().expect("the shipped demo parses");
        let s = demo.sample_at(DEMO_START, 0.0);
        assert!(s.gpus.len() >= 3, "several GPUs");
        let users: BTreeSet<_> = s
            .gpus
            .iter()
            .flat_map(|g| g.processes.iter())
            .filter_map(|p| p.host.user.clone())
            .collect();
        assert!(users.len() >= 2, "an intruder from another user: {users:?}");
        // One GPU is nearing capacity.
        assert!(
            s.gpus.iter().any(|g| g.used_ratio().unwrap_or(0.0) > 0.9),
            "a GPU nearing capacity"
        );
        // Someone leaks: memory grows between two moments.
        let later = demo.sample_at(DEMO_START + 120.0, 0.0);
        let grows = s.gpus.iter().zip(&later.gpus).any(|(a, b)| {
            a.processes.iter().any(|p| {
                b.processes.iter().any(|q| {
                    q.pid == p.pid
                        && q.used_bytes.unwrap_or(0) > p.used_bytes.unwrap_or(0) + (1 << 30)
                })
            })
        });
        assert!(grows, "a leaking trainer");
    }

    #[test]
    fn not_supported_faults_become_unavailable() {
        let sc = Scenario::parse(
            r#"
[[gpu]]
memory_total = "80GiB"
faults.not_supported = ["power", "process-utilization"]
[[gpu.process]]
pid = 7
used = "1GiB"
used_unavailable = true
sm = 50
"#,
        )
        .expect("valid");
        let src = ScriptedSource::new(sc, "t");
        let s = src.sample_at(0.0, 0.0);
        let g = &s.gpus[0];
        assert_eq!(g.power_watts, None);
        assert!(g.temperature_c.is_some());
        assert_eq!(g.processes[0].sm_percent, None);
        assert_eq!(g.processes[0].used_bytes, None);
        assert_eq!(g.unattributed_bytes(), None, "n/a never enters a sum");
    }

    #[test]
    fn lost_gpu_is_reported() {
        let sc = Scenario::parse("[[gpu]]\nmemory_total = \"8GiB\"\nlost_at = 5\n").expect("valid");
        let src = ScriptedSource::new(sc, "t");
        assert!(!src.sample_at(1.0, 0.0).gpus[0].lost);
        let g = &src.sample_at(6.0, 0.0).gpus[0];
        assert!(g.lost);
        assert_eq!(g.memory, None);
    }
}
