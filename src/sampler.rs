//! The sampler: dedicated threads that own the source and publish frames.
//!
//! ```text
//!  fast thread ── source.sample() ─ enrich from /proc ─ merge slow readings ─► watch<Frame>
//!  slow thread ── slow.sample_slow() (PCIe, energy, ECC, memory clock) ──► latest readings
//! ```
//!
//! NVML calls block, so they never run on the async runtime. The expensive calls live on the
//! slow thread so they never stretch the fast sample. The live source samples each GPU on a
//! worker thread of its own: a call that hangs on one GPU holds the frame back one interval at
//! most, and that GPU is shown with the call it is stuck in while the others stay fresh. If
//! every GPU hangs (or the source itself does), no new frame is published; consumers see the
//! last frame age and go stale, and [`CallProbe`] says which call is stuck.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::model::{Frame, HostProc, Sample, SlowReadings, SourceInfo, SourceKind};
use crate::source::hostsummary::HostSummaryReader;
use crate::source::procinfo::{Handover, ProcInfo};
use crate::source::{CallProbe, GpuSource, InFlight};

/// How the sampler paces itself.
#[derive(Debug, Clone, Copy)]
pub struct SamplerOptions {
    /// Fast cadence: memory, utilisation, processes, process utilisation.
    pub interval: Duration,
    /// Slow cadence: PCIe throughput, energy, ECC, memory clock.
    pub slow_interval: Duration,
    /// How often the host facts (CPU %, RSS) of known processes are refreshed from `/proc`;
    /// a PID seen for the first time is read at once whatever this is. The dashboard wants
    /// the fast cadence; a headless daemon is content with the slow one (`/proc` costs tens of
    /// µs per PID).
    pub host_interval: Duration,
    /// Whether frames carry this host's CPU, memory and load ([`crate::model::HostSummary`],
    /// read at most once a second on the fast thread): the dashboard's header line. Only for
    /// a live or demo source, whose host is this machine.
    pub host_summary: bool,
}

impl Default for SamplerOptions {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(1),
            slow_interval: Duration::from_secs(10),
            host_interval: Duration::from_secs(1),
            host_summary: false,
        }
    }
}

/// The latest frame, `None` until the first sample is in.
pub type FrameRx = watch::Receiver<Option<Arc<Frame>>>;

/// A running sampler. Dropping it stops the threads (a thread stuck in a call is detached).
pub struct Sampler {
    frames: FrameRx,
    /// The first frame, kept: a one-shot command wants it even when a fast source (a replay at
    /// full speed) has published more since.
    first: Arc<OnceLock<Arc<Frame>>>,
    probe: CallProbe,
    slow_probe: CallProbe,
    info: Arc<SourceInfo>,
    stop: Arc<Stop>,
    threads: Vec<JoinHandle<()>>,
    /// The host thread's shared state (`None` for a source without host facts).
    host: Option<Arc<HostShared>>,
    /// The source's past ([`GpuSource::past`] over [`crate::source::PREROLL`]) when the front
    /// end asked for it ([`Sampler::with_past`]), until it takes it ([`Sampler::take_past`]).
    past: Mutex<Vec<Sample>>,
}

/// A stop flag that also wakes sleeping threads.
#[derive(Default)]
struct Stop {
    flag: AtomicBool,
    lock: Mutex<()>,
    wake: std::sync::Condvar,
}

impl Stop {
    fn stopped(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    fn stop(&self) {
        self.flag.store(true, Ordering::Release);
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.wake.notify_all();
    }

    /// Sleeps until `deadline` or until stopped; returns false when stopped.
    fn sleep_until(&self, deadline: Instant) -> bool {
        let mut guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if self.stopped() {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            guard = self
                .wake
                .wait_timeout(guard, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

type SlowMap = Arc<Mutex<HashMap<String, SlowReadings>>>;

impl Sampler {
    /// Starts sampling `source` on its own threads.
    ///
    /// # Errors
    /// When the operating system refuses to start a thread.
    pub fn spawn(mut source: Box<dyn GpuSource>, options: SamplerOptions) -> std::io::Result<Self> {
        let info = Arc::new(source.info());
        let (tx, rx) = watch::channel(None);
        let probe = CallProbe::default();
        let slow_probe = CallProbe::default();
        let stop = Arc::new(Stop::default());
        let slow_map: SlowMap = Arc::default();
        let mut threads = Vec::new();

        if let Some(mut slow) = source.slow_sampler() {
            let stop = Arc::clone(&stop);
            let map = Arc::clone(&slow_map);
            let probe = slow_probe.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("gpuwatch-slow".into())
                    .spawn(move || {
                        loop {
                            let started = Instant::now();
                            let readings = slow.sample_slow(&probe);
                            {
                                let mut map = map.lock().unwrap_or_else(PoisonError::into_inner);
                                map.clear();
                                map.extend(readings);
                            }
                            if !stop.sleep_until(started + options.slow_interval) {
                                break;
                            }
                        }
                    })?,
            );
        }

        let host = if source.wants_host_enrichment() {
            let host = Arc::new(HostShared {
                handover: Mutex::new(Some(Handover::default())),
                ..HostShared::default()
            });
            let stop = Arc::clone(&stop);
            let shared = Arc::clone(&host);
            threads.push(
                std::thread::Builder::new()
                    .name("gpuwatch-host".into())
                    .spawn(move || host_loop(&shared, &stop, options.host_interval))?,
            );
            Some(host)
        } else {
            None
        };
        let host_handle = host.clone();

        let first: Arc<OnceLock<Arc<Frame>>> = Arc::default();
        let fast_first = Arc::clone(&first);
        let fast_stop = Arc::clone(&stop);
        let fast_probe = probe.clone();
        let fast_info = Arc::clone(&info);
        let mut summary = summary_reader(options, info.kind);
        threads.push(
            std::thread::Builder::new()
                .name("gpuwatch-sampler".into())
                .spawn(move || {
                    let mut collector = Collector::new(source, host, slow_map);
                    let mut seq = 0u64;
                    loop {
                        let started = Instant::now();
                        let sample = collector.collect(&fast_probe);
                        seq += 1;
                        let published = Instant::now();
                        let frame = Frame {
                            seq,
                            source: Arc::clone(&fast_info),
                            sample,
                            published,
                            interval: options.interval,
                            host: summary.as_mut().map(|s| s.read(published)),
                        };
                        let frame = Arc::new(frame);
                        let _ = fast_first.set(Arc::clone(&frame));
                        if tx.send(Some(frame)).is_err() {
                            break;
                        }
                        if collector.source.finished() {
                            break;
                        }
                        let delay = collector.source.next_delay().unwrap_or(options.interval);
                        if !fast_stop.sleep_until(started + delay) {
                            break;
                        }
                    }
                    // Dropping `tx` closes the channel: consumers learn the source ended.
                })?,
        );

        Ok(Self {
            frames: rx,
            first,
            probe,
            slow_probe,
            info,
            stop,
            threads,
            host: host_handle,
            past: Mutex::new(Vec::new()),
        })
    }

    /// The sampler, keeping `past` (the source's, read before it was spawned) for
    /// [`Sampler::take_past`].
    #[must_use]
    pub fn with_past(self, past: Vec<Sample>) -> Self {
        *self.past.lock().unwrap_or_else(PoisonError::into_inner) = past;
        self
    }

    /// The source's past, oldest first, once (empty after the first call, and for a live
    /// GPU): what a front end runs through its analysis before the first live frame.
    pub fn take_past(&self) -> Vec<Sample> {
        std::mem::take(&mut *self.past.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Tells the host thread which PIDs a front end shows now: those are refreshed on every
    /// host cycle, the others on every [`BACKGROUND_EVERY`]th (`None`, the default: all on
    /// every cycle). PIDs seen for the first time are always read at once.
    pub fn focus_host(&self, pids: Option<Vec<u32>>) {
        if let Some(host) = &self.host {
            let pids = pids.map(|mut v| {
                v.sort_unstable();
                v.dedup();
                v
            });
            *host.focus.lock().unwrap_or_else(PoisonError::into_inner) = pids;
        }
    }

    /// A receiver of frames.
    pub fn frames(&self) -> FrameRx {
        self.frames.clone()
    }

    /// Facts about the source.
    pub fn info(&self) -> Arc<SourceInfo> {
        Arc::clone(&self.info)
    }

    /// The call the fast sampler is blocked in, if any (slow thread's otherwise).
    pub fn in_flight(&self) -> Option<InFlight> {
        self.probe
            .in_flight()
            .or_else(|| self.slow_probe.in_flight())
    }

    /// Every call the sampler's threads are in, longest first.
    pub fn in_flight_all(&self) -> Vec<InFlight> {
        let mut all = self.probe.all();
        all.extend(self.slow_probe.all());
        all.sort_by_key(|f| f.since);
        all
    }

    /// Waits up to `timeout` for the first frame the sampler published. On timeout, says
    /// which call hangs.
    pub async fn first_frame(&self, timeout: Duration) -> Result<Arc<Frame>, FirstFrameError> {
        let mut rx = self.frames();
        let waited = tokio::time::timeout(timeout, rx.wait_for(Option::is_some)).await;
        match waited {
            // A frame arrived, or the channel closed after a source that ended published one.
            Ok(_) => self.first.get().cloned().ok_or(FirstFrameError::Ended),
            Err(_) => Err(FirstFrameError::Hung {
                waited: timeout,
                in_flight: self.in_flight(),
            }),
        }
    }

    /// Stops the threads. A thread blocked in a call is left to finish on its own.
    pub fn stop(&mut self) {
        self.stop.stop();
        let threads = std::mem::take(&mut self.threads);
        for t in threads {
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The reader of this host's summary when `options` ask for it and the source's host is this
/// machine (a live GPU or a demo; a replay's is not).
fn summary_reader(options: SamplerOptions, kind: SourceKind) -> Option<HostSummaryReader> {
    let here = matches!(kind, SourceKind::Live | SourceKind::Demo);
    (options.host_summary && here)
        .then(HostSummaryReader::new)
        .flatten()
}

/// Why no first frame arrived.
#[derive(Debug, thiserror::Error)]
pub enum FirstFrameError {
    #[error("{}", describe_hang(*.waited, .in_flight.as_ref()))]
    Hung {
        waited: Duration,
        in_flight: Option<InFlight>,
    },
    #[error("the source ended before producing a sample")]
    Ended,
}

fn describe_hang(waited: Duration, in_flight: Option<&InFlight>) -> String {
    match in_flight {
        Some(f) => format!(
            "no sample after {}: the call {} (is the driver hung?)",
            humantime::format_duration(waited),
            f.describe(Instant::now())
        ),
        None => format!("no sample after {}", humantime::format_duration(waited)),
    }
}

/// Host facts shared between the fast thread and the host thread.
#[derive(Default)]
struct HostShared {
    /// Latest host facts per PID, refreshed by the host thread.
    facts: Mutex<HashMap<u32, HostProc>>,
    /// The PIDs a front end shows now, sorted: refreshed on every cycle, the others on every
    /// [`BACKGROUND_EVERY`]th. `None`: every PID on every cycle.
    focus: Mutex<Option<Vec<u32>>>,
    /// The PIDs of the latest sample: what the host thread refreshes.
    pids: Mutex<Vec<u32>>,
    /// What the fast thread learnt enriching first-seen PIDs, for the host thread to take
    /// over rather than read those PIDs in full again; `None` without a host thread.
    handover: Mutex<Option<Handover>>,
}

/// Refreshes CPU %, RSS and the rest for the current PIDs, off the fast path (reading `/proc`
/// costs tens of µs per PID).
fn host_loop(shared: &HostShared, stop: &Stop, interval: Duration) {
    let Ok(mut procinfo) = ProcInfo::new() else {
        return;
    };
    for cycle in 0u64.. {
        let started = Instant::now();
        let pids = shared
            .pids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let focus = shared
            .focus
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let handover = shared
            .handover
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
            .map(std::mem::take);
        if let Some(handover) = handover {
            procinfo.adopt(handover);
        }
        let fresh = refresh(&mut procinfo, &pids, focus.as_deref(), cycle);
        {
            // Merge rather than replace: the fast thread may have added PIDs it saw first while
            // this refresh ran; forget only PIDs the latest sample no longer has.
            let current = shared
                .pids
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            let mut facts = shared.facts.lock().unwrap_or_else(PoisonError::into_inner);
            facts.extend(fresh);
            facts.retain(|pid, _| current.binary_search(pid).is_ok());
        }
        if !stop.sleep_until(started + interval) {
            break;
        }
    }
}

/// One host cycle: every PID without a focus or on every [`BACKGROUND_EVERY`]th cycle; else
/// the focused PIDs (sorted) and those seen for the first time.
fn refresh(
    procinfo: &mut ProcInfo,
    pids: &[u32],
    focus: Option<&[u32]>,
    cycle: u64,
) -> HashMap<u32, HostProc> {
    match focus {
        Some(focus) if !cycle.is_multiple_of(BACKGROUND_EVERY) => {
            procinfo.enrich_due(pids, |pid| focus.binary_search(&pid).is_ok())
        }
        _ => procinfo.enrich(pids),
    }
}

/// With a focus set (the dashboard's rows on screen), the other PIDs are refreshed on every
/// this many host cycles (30 s at the dashboard's 1 s): reading `/proc/PID/stat` of 400
/// processes every second was most of the dashboard's CPU, for rows nobody sees. What they are
/// (user, command, container) is read when they are first seen; a row scrolled into view is
/// refreshed at the next cycle, and sorting by CPU or RSS drops the focus.
pub const BACKGROUND_EVERY: u64 = 30;

/// Takes one fast sample and completes it: host facts and the latest slow readings.
///
/// PIDs seen for the first time are enriched right here (so a one-shot snapshot names every
/// process); PIDs already known take the host thread's latest facts, which keeps `/proc` reads
/// off the fast path.
pub struct Collector {
    source: Box<dyn GpuSource>,
    host: Option<Arc<HostShared>>,
    /// Enriches first-seen PIDs on the fast thread.
    first_sight: Option<ProcInfo>,
    slow: SlowMap,
}

impl Collector {
    fn new(source: Box<dyn GpuSource>, host: Option<Arc<HostShared>>, slow: SlowMap) -> Self {
        let first_sight = host.as_ref().and_then(|_| ProcInfo::new().ok());
        Self {
            source,
            host,
            first_sight,
            slow,
        }
    }

    /// A collector that does on one thread what the sampler's threads do (host facts are
    /// read on every call). For benchmarks and tests.
    pub fn standalone(mut source: Box<dyn GpuSource>) -> Self {
        let host = source
            .wants_host_enrichment()
            .then(|| Arc::new(HostShared::default()));
        let slow: SlowMap = Arc::default();
        if let Some(mut s) = source.slow_sampler() {
            let readings = s.sample_slow(&CallProbe::default());
            slow.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend(readings);
        }
        Self::new(source, host, slow)
    }

    /// Takes and completes one fast sample.
    pub fn collect(&mut self, probe: &CallProbe) -> Sample {
        let mut sample = self.source.sample(probe);
        if let Some(host) = &self.host {
            enrich(host, self.first_sight.as_mut(), &mut sample);
        }
        merge_slow(&self.slow, &mut sample);
        sample
    }
}

fn enrich(host: &HostShared, first_sight: Option<&mut ProcInfo>, sample: &mut Sample) {
    let mut pids: Vec<u32> = sample
        .gpus
        .iter()
        .flat_map(|g| g.processes.iter().map(|p| p.pid))
        .collect();
    pids.sort_unstable();
    pids.dedup();
    let mut facts = host.facts.lock().unwrap_or_else(PoisonError::into_inner);
    let unknown: Vec<u32> = pids
        .iter()
        .copied()
        .filter(|pid| !facts.contains_key(pid))
        .collect();
    if !unknown.is_empty()
        && let Some(procinfo) = first_sight
    {
        facts.extend(procinfo.enrich(&unknown));
        if let Some(handover) = host
            .handover
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            handover.merge(procinfo.hand_over());
        }
    }
    for g in &mut sample.gpus {
        for p in &mut g.processes {
            if let Some(h) = facts.get(&p.pid) {
                p.host.clone_from(h);
            }
        }
    }
    drop(facts);
    *host.pids.lock().unwrap_or_else(PoisonError::into_inner) = pids;
}

fn merge_slow(map: &SlowMap, sample: &mut Sample) {
    let map = map.lock().unwrap_or_else(PoisonError::into_inner);
    if map.is_empty() {
        return;
    }
    for g in &mut sample.gpus {
        if let Some(r) = map.get(&g.uuid) {
            g.slow = r.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host summary is this machine's: read for a live GPU or a demo when asked, never for
    /// a replay (whose host is the recording's).
    #[test]
    fn only_sources_on_this_host_get_a_host_summary() {
        let asked = SamplerOptions {
            host_summary: true,
            ..SamplerOptions::default()
        };
        assert!(summary_reader(asked, SourceKind::Live).is_some());
        assert!(summary_reader(asked, SourceKind::Demo).is_some());
        assert!(summary_reader(asked, SourceKind::Replay).is_none());
        assert!(summary_reader(asked, SourceKind::Remote).is_none());
        assert!(summary_reader(SamplerOptions::default(), SourceKind::Live).is_none());
    }

    /// Over five cycles with a focus, the focused PID is refreshed on each, the other once (and
    /// kept, not forgotten, in between); without a focus both are refreshed on each.
    #[test]
    fn the_host_refresh_reads_unfocused_pids_every_background_cycle() {
        // Past exec (the facts of a process caught mid-exec are incomplete, read in full again).
        let ((mut a, pa), (mut b, pb)) = (
            crate::source::procinfo::tests::running_sleep(),
            crate::source::procinfo::tests::running_sleep(),
        );
        let mut pids = vec![pa, pb];
        pids.sort_unstable();
        let mut info = ProcInfo::new().expect("sysinfo supported");
        // Cycle 0 reads both (the first sighting, and a full cycle).
        let first = refresh(&mut info, &pids, Some(&[pa]), 0);
        assert_eq!(first.len(), 2);
        let mut seen = (0, 0);
        for cycle in 1..=BACKGROUND_EVERY {
            let got = refresh(&mut info, &pids, Some(&[pa]), cycle);
            seen.0 += usize::from(got.contains_key(&pa));
            seen.1 += usize::from(got.contains_key(&pb));
        }
        assert_eq!(
            seen,
            (BACKGROUND_EVERY as usize, 1),
            "(focused, other) refreshes over {BACKGROUND_EVERY} cycles"
        );
        assert_eq!(info.loaded_pids().len(), 2);
        let all = refresh(&mut info, &pids, None, 7);
        assert_eq!(all.len(), 2, "no focus: every PID");
        for c in [&mut a, &mut b] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
