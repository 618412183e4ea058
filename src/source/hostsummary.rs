//! This host's CPU, memory, swap and load average, for the dashboard's header line.
//!
//! Read on the sampler's fast thread (never in the render loop), at most once a second
//! ([`MIN_REFRESH`]) whatever the interval: one refresh reads `/proc/stat` (CPU time, through
//! `sysinfo`), `/proc/meminfo` (memory and swap) and `/proc/loadavg` — three small files, no
//! process table. Only the dashboard of a live GPU or a demo asks for it (their host is this
//! machine); a replay's and a remote daemon's frames carry none.

use std::time::{Duration, Instant};

use sysinfo::{CpuRefreshKind, MemoryRefreshKind, System};

use crate::model::HostSummary;

/// The least time between two readings: CPU % over a shorter window is mostly tick noise.
pub const MIN_REFRESH: Duration = Duration::from_secs(1);

/// Reads [`HostSummary`]s; owned by the sampler's fast thread.
pub struct HostSummaryReader {
    system: System,
    /// The last reading and when it was taken.
    last: Option<(Instant, HostSummary)>,
}

impl std::fmt::Debug for HostSummaryReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostSummaryReader")
            .field("last", &self.last)
            .finish_non_exhaustive()
    }
}

impl HostSummaryReader {
    /// A reader; `None` where `sysinfo` does not support the platform.
    pub fn new() -> Option<Self> {
        Some(Self {
            system: System::new().ok()?,
            last: None,
        })
    }

    /// The summary at `now`: a new reading when the last one is [`MIN_REFRESH`] old (or there
    /// is none), else the last one. CPU % needs two readings: the first has none.
    pub fn read(&mut self, now: Instant) -> HostSummary {
        if let Some((at, last)) = self.last
            && now.saturating_duration_since(at) < MIN_REFRESH
        {
            return last;
        }
        let first = self.last.is_none();
        self.system
            .refresh_cpu_specifics(CpuRefreshKind::nothing().with_usage());
        self.system
            .refresh_memory_specifics(MemoryRefreshKind::nothing().with_ram().with_swap());
        let s = &self.system;
        let cpu = s.global_cpu_usage();
        let load = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|t| parse_loadavg(&t));
        let summary = HostSummary {
            cpu_percent: (!first && cpu.is_finite()).then(|| cpu.clamp(0.0, 100.0)),
            memory_total: s.total_memory(),
            memory_available: s.available_memory().min(s.total_memory()),
            swap_total: s.total_swap(),
            swap_used: s.used_swap().min(s.total_swap()),
            load,
            cpus: s.cpus().len(),
        };
        self.last = Some((now, summary));
        summary
    }
}

/// The 1, 5 and 15-minute load averages from `/proc/loadavg` text (`0.52 0.58 0.59 1/467
/// 12345`): `None` unless the first three fields are finite numbers from 0 on.
fn parse_loadavg(text: &str) -> Option<[f64; 3]> {
    let mut fields = text.split_ascii_whitespace().map(str::parse::<f64>);
    let mut load = [0.0; 3];
    for v in &mut load {
        *v = fields.next()?.ok().filter(|x| x.is_finite() && *x >= 0.0)?;
    }
    Some(load)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loadavg_needs_three_numbers() {
        assert_eq!(
            parse_loadavg("0.52 0.58 0.59 1/467 12345\n"),
            Some([0.52, 0.58, 0.59])
        );
        assert_eq!(parse_loadavg("0.52 0.58"), None);
        assert_eq!(parse_loadavg("0.52 x 0.59 1/2 3"), None);
        assert_eq!(parse_loadavg("-1 0 0"), None);
        assert_eq!(parse_loadavg("NaN 0 0"), None);
        assert_eq!(parse_loadavg(""), None);
    }

    #[test]
    fn a_reading_has_this_hosts_memory_and_is_reused_within_a_second() {
        let mut r = HostSummaryReader::new().expect("sysinfo supported");
        let t0 = Instant::now();
        let first = r.read(t0);
        assert!(first.memory_total > 0, "{first:?}");
        assert!(first.memory_used() <= first.memory_total, "{first:?}");
        assert!(first.swap_used <= first.swap_total, "{first:?}");
        assert_eq!(first.cpu_percent, None, "one reading gives no CPU %");
        assert!(first.load.is_some(), "/proc/loadavg: {first:?}");
        assert!(first.cpus > 0, "{first:?}");
        // Within a second: the same reading, nothing read again.
        assert_eq!(r.read(t0 + Duration::from_millis(500)), first);
        let second = r.read(t0 + MIN_REFRESH);
        assert!(
            second
                .cpu_percent
                .is_some_and(|c| (0.0..=100.0).contains(&c)),
            "{second:?}"
        );
    }
}
