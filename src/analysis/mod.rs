//! The one analysis stage every front end consumes: frames in, [`Analysis`] out.
//!
//! The daemon, the dashboard (local and `--connect`) and `run` each own an [`Analyzer`] and feed
//! it the frames they receive; what they show, export or report is read from the
//! [`Analysis`] it returns — the frame, the watched set ("mine"), each GPU's memory split and
//! growth, the open findings and the lifecycle events of this frame. Nothing here does I/O
//! except reading a live host's `/proc` for the parents of watched processes ([`Parents`]).
//!
//! One rule each, here and nowhere else:
//! - *mine* is decided once per frame by the watch set, with the parents of a process taken from
//!   where the frame came from ([`Parents`]);
//! - the memory split ([`MemSplit`]): *external* is everything in `used` that is not mine,
//!   unattributed memory included (DESIGN §3); an unknown value is never summed;
//! - growth and time to full are the detector's ([`crate::history::gpu_growth`]: time to full
//!   only while the growth is a ramp, or the open filling-up finding's while there is one).

pub mod split;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crate::detect::{Detector, Finding, FindingEvent, FindingLog, Rules};
use crate::history::History;
use crate::model::{Frame, ProcSample, Sample, SourceInfo, SourceKind};
use crate::watch::WatchSet;

pub use split::MemSplit;

/// Where the parent of a process comes from, for `pid:N` watch specs that take in a tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parents {
    /// This host's `/proc`: the frames come from this host's driver.
    Host,
    /// The frame's own report (a recording, a scenario, a remote daemon): this host's PIDs are
    /// not the frame's.
    Reported,
}

impl Parents {
    /// Where the parents of `kind`'s processes come from; `remote`: the frames come from
    /// another host's daemon.
    pub fn of(kind: SourceKind, remote: bool) -> Self {
        if kind == SourceKind::Live && !remote {
            Parents::Host
        } else {
            Parents::Reported
        }
    }
}

/// One GPU of an [`Analysis`], in the frame's order.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuAnalysis {
    pub uuid: String,
    pub index: u32,
    /// `None` when the GPU's memory is unknown.
    pub split: Option<MemSplit>,
    /// The detector's growth of memory used, bytes per second.
    pub growth_bytes_per_s: Option<f64>,
    /// Seconds until full: the open filling-up finding's while there is one, else at that
    /// growth while it is a ramp.
    pub time_to_full_s: Option<f64>,
}

/// What one frame means: the same for every front end.
#[derive(Debug, Clone)]
pub struct Analysis {
    pub frame: Arc<Frame>,
    /// The PIDs of the frame that are in the watched set.
    pub mine: Arc<HashSet<u32>>,
    pub gpus: Vec<GpuAnalysis>,
    /// The findings open after this frame, most severe first.
    pub findings: Vec<Finding>,
    /// What opened, changed and resolved with this frame.
    pub events: Vec<FindingEvent>,
}

impl Analysis {
    /// Whether a process of this frame is mine.
    pub fn is_mine(&self, p: &ProcSample) -> bool {
        self.mine.contains(&p.pid)
    }

    /// The analysis of the GPU with this UUID.
    pub fn gpu(&self, uuid: &str) -> Option<&GpuAnalysis> {
        self.gpus.iter().find(|g| g.uuid == uuid)
    }
}

/// How an [`Analyzer`] keeps its history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// Every process point for the whole window (the dashboard: its charts read them).
    Full,
    /// Process points at full resolution only as far back as the rules read them (the daemon:
    /// 8 GPUs × 64 processes for 10 minutes).
    Compact,
}

/// History + detector + watched set: the pipeline's analysis stage.
pub struct Analyzer {
    history: History,
    detector: Detector,
    watch: WatchSet,
    /// PIDs and users marked from the dashboard (`w`/`W`), watched besides the watch set.
    extra_pids: BTreeSet<u32>,
    extra_users: BTreeSet<String>,
    /// `None`: decided by the first frame's source ([`Parents::of`]).
    parents: Option<Parents>,
    remote: bool,
    mine: Arc<HashSet<u32>>,
    /// Every finding's lifecycle, primed past included (the dashboard's findings view).
    log: FindingLog,
    /// The PIDs of the last frame the watch set took in (the marks aside): an exited process
    /// among them stays mine.
    watched: HashSet<u32>,
}

impl Analyzer {
    /// An analyzer with `rules` (the config's `[detect]`), a history of `window`.
    pub fn new(rules: Rules, window: Duration, detail: Detail, watch: WatchSet) -> Self {
        let history = match detail {
            Detail::Full => History::new(window),
            Detail::Compact => crate::detect::compact_history(window, &rules),
        };
        Self {
            history,
            detector: Detector::new(rules),
            watch,
            extra_pids: BTreeSet::new(),
            extra_users: BTreeSet::new(),
            parents: None,
            remote: false,
            mine: Arc::new(HashSet::new()),
            log: FindingLog::default(),
            watched: HashSet::new(),
        }
    }

    /// The frames come from another host's daemon: its PIDs are not this host's.
    #[must_use]
    pub fn remote(mut self) -> Self {
        self.remote = true;
        self
    }

    /// Fixes where parents come from (tests; otherwise the first frame's source decides).
    #[must_use]
    pub fn with_parents(mut self, parents: Parents) -> Self {
        self.parents = Some(parents);
        self
    }

    pub fn history(&self) -> &History {
        &self.history
    }

    pub fn rules(&self) -> &Rules {
        self.detector.rules()
    }

    /// The findings open now, most severe first.
    pub fn open(&self) -> Vec<&Finding> {
        self.detector.open()
    }

    /// Every finding's lifecycle so far (bounded).
    pub fn log(&self) -> &FindingLog {
        &self.log
    }

    /// Marks or unmarks a PID as mine; returns whether it is marked now.
    pub fn toggle_pid(&mut self, pid: u32) -> bool {
        if self.extra_pids.remove(&pid) {
            false
        } else {
            self.extra_pids.insert(pid);
            true
        }
    }

    /// Marks or unmarks a user as mine; returns whether it is marked now.
    pub fn toggle_user(&mut self, user: &str) -> bool {
        if self.extra_users.remove(user) {
            false
        } else {
            self.extra_users.insert(user.to_string());
            true
        }
    }

    /// Where the parents of the frames' processes come from.
    pub fn parents(&self, frame: &Frame) -> Parents {
        self.parents
            .unwrap_or_else(|| Parents::of(frame.source.kind, self.remote))
    }

    /// The watched PIDs of a frame: the watch set (with the parents from where the frame came
    /// from), the marks, and the processes that were mine in the previous frame and have
    /// exited since (a `pid:N` tree whose launcher died with them no longer reaches them).
    pub fn mine_in(&self, frame: &Frame) -> HashSet<u32> {
        self.watched_and_mine(frame).1
    }

    /// The PIDs the watch set takes in (with the exited ones it took in before), and those
    /// with the marks: what [`Self::mine_in`] gives.
    fn watched_and_mine(&self, frame: &Frame) -> (HashSet<u32>, HashSet<u32>) {
        let sample = &frame.sample;
        let mut watched = mine(&self.watch, frame, self.parents(frame));
        watched.extend(
            sample
                .gpus
                .iter()
                .flat_map(|g| &g.processes)
                .filter(|p| p.host.exited && self.watched.contains(&p.pid))
                .map(|p| p.pid),
        );
        let mut pids = watched.clone();
        if !self.extra_pids.is_empty() || !self.extra_users.is_empty() {
            pids.extend(
                sample
                    .gpus
                    .iter()
                    .flat_map(|g| &g.processes)
                    .filter(|p| {
                        self.extra_pids.contains(&p.pid)
                            || p.host
                                .user
                                .as_ref()
                                .is_some_and(|u| self.extra_users.contains(u))
                    })
                    .map(|p| p.pid),
            );
        }
        (watched, pids)
    }

    /// Takes one frame: pushes it into the history, decides mine, runs the detector.
    pub fn push(&mut self, frame: &Arc<Frame>) -> Analysis {
        self.history.push(&frame.sample);
        let (watched, mine) = self.watched_and_mine(frame);
        self.watched = watched;
        let mine = Arc::new(mine);
        let watched = |p: &ProcSample| mine.contains(&p.pid);
        let events = self.detector.step(
            &self.history,
            &frame.sample,
            frame.sample.taken_at,
            None,
            &watched,
        );
        self.log.record(&events);
        self.mine = Arc::clone(&mine);
        self.analysis(frame, mine, events)
    }

    /// Runs a source's past ([`crate::sampler::Sampler::take_past`]) through the history and
    /// the detector, as if gpuwatch had been running: the findings it leaves open are on
    /// screen from the first live frame. Its events are history, not news: none is returned
    /// (no sink hears of them, no bell rings); the log keeps them.
    pub fn prime(&mut self, past: Vec<Sample>, source: &Arc<SourceInfo>) {
        // The past's samples are one interval apart.
        let interval = match past.as_slice() {
            [a, b, ..] => Duration::from_secs_f64((b.taken_at - a.taken_at).clamp(0.01, 3600.0)),
            _ => Duration::from_secs(1),
        };
        for sample in past {
            let frame = Arc::new(Frame {
                seq: 0,
                source: Arc::clone(source),
                sample,
                published: std::time::Instant::now(),
                interval,
                host: None,
            });
            let _ = self.push(&frame);
        }
    }

    /// The analysis of `frame` (already pushed) without stepping the detector: for a front end
    /// whose watch marks changed, or that shows a paused frame.
    pub fn reanalyse(&mut self, frame: &Arc<Frame>) -> Analysis {
        let (watched, mine) = self.watched_and_mine(frame);
        self.watched = watched;
        let mine = Arc::new(mine);
        self.mine = Arc::clone(&mine);
        self.analysis(frame, mine, Vec::new())
    }

    /// The detector on the latest frame again, at `now`, judging staleness (`stale_after`):
    /// for the clock tick of a front end whose source stopped sending.
    pub fn tick(&mut self, frame: &Frame, now: f64, stale_after: Duration) -> Vec<FindingEvent> {
        let mine = Arc::clone(&self.mine);
        let watched = |p: &ProcSample| mine.contains(&p.pid);
        let events = self.detector.step(
            &self.history,
            &frame.sample,
            now,
            Some(stale_after),
            &watched,
        );
        self.log.record(&events);
        events
    }

    fn analysis(
        &self,
        frame: &Arc<Frame>,
        mine: Arc<HashSet<u32>>,
        events: Vec<FindingEvent>,
    ) -> Analysis {
        let watched = |p: &ProcSample| mine.contains(&p.pid);
        let findings: Vec<Finding> = self.detector.open().into_iter().cloned().collect();
        let gpus = gpus(
            &self.history,
            &frame.sample,
            self.rules(),
            &watched,
            &findings,
        );
        Analysis {
            frame: Arc::clone(frame),
            mine,
            gpus,
            findings,
            events,
        }
    }
}

/// The PIDs of `frame` in the watch set, the parents of `pid:N` trees taken from `parents`:
/// the one place that decides "mine", for the pipeline and the one-shot commands alike.
pub fn mine(watch: &WatchSet, frame: &Frame, parents: Parents) -> HashSet<u32> {
    let sample = &frame.sample;
    match parents {
        Parents::Host => watch.pids_in(sample, &crate::source::procinfo::read_ppid),
        Parents::Reported => {
            let reported: HashMap<u32, u32> = sample
                .gpus
                .iter()
                .flat_map(|g| &g.processes)
                .filter_map(|p| Some((p.pid, p.host.ppid?)))
                .collect();
            watch.pids_in(sample, &|pid| reported.get(&pid).copied())
        }
    }
}

/// Split and growth of every GPU of a sample.
fn gpus(
    history: &History,
    sample: &Sample,
    rules: &Rules,
    watched: &dyn Fn(&ProcSample) -> bool,
    findings: &[Finding],
) -> Vec<GpuAnalysis> {
    sample
        .gpus
        .iter()
        .map(|g| {
            let growth = history
                .gpu(&g.uuid)
                .and_then(|h| crate::history::gpu_growth(h, rules));
            GpuAnalysis {
                uuid: g.uuid.clone(),
                index: g.index,
                split: MemSplit::of(g, watched),
                growth_bytes_per_s: growth.map(|gr| gr.rate),
                // While filling-up is open, its time to full (held over a partial free, or
                // from the line of the peaks): the panel and /metrics say what the finding says.
                time_to_full_s: findings
                    .iter()
                    .find(|f| f.id.rule == crate::detect::RuleKind::FillingUp && f.id.gpu == g.uuid)
                    .and_then(|f| f.time_to_full_s)
                    .or_else(|| growth.and_then(|gr| gr.time_to_full)),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::test_support::{gpu, proc};

    fn frame_of(procs: Vec<ProcSample>) -> Arc<Frame> {
        Frame::for_test(
            Sample {
                taken_at: 1.0,
                gpus: vec![gpu(50, procs)],
                errors: Vec::new(),
                collect_seconds: 0.0,
            },
            Duration::from_secs(1),
        )
    }

    fn child_of(pid: u32, parent: Option<u32>, exited: bool) -> ProcSample {
        let mut p = proc(pid, Some(10));
        p.host.visible = !exited;
        p.host.exited = exited;
        p.host.user = Some("bob".into());
        p.host.ppid = parent;
        p
    }

    /// A process the watch set took in stays mine once it exited, even where the watch set no
    /// longer reaches it (its launcher died with it: no parent link); an exited process that
    /// never was mine does not become mine, and a mark taken back is taken back.
    #[test]
    fn an_exited_process_stays_mine_if_it_was() {
        let watch = WatchSet::new(vec![crate::watch::WatchSpec::Pid(7)], None);
        let mut a = Analyzer::new(
            crate::detect::Rules::default(),
            Duration::from_mins(10),
            Detail::Full,
            watch,
        )
        .with_parents(Parents::Reported);
        let first = a.push(&frame_of(vec![
            child_of(20, Some(7), false),
            child_of(30, Some(1), false),
        ]));
        assert_eq!(*first.mine, HashSet::from([20]));
        let gone = frame_of(vec![child_of(20, None, true), child_of(30, None, true)]);
        assert_eq!(*a.push(&gone).mine, HashSet::from([20]));
        assert_eq!(
            *a.push(&gone).mine,
            HashSet::from([20]),
            "and on later frames"
        );
        // Marked from the dashboard and unmarked: back to what the watch set says.
        assert!(a.toggle_pid(30));
        assert_eq!(*a.reanalyse(&gone).mine, HashSet::from([20, 30]));
        assert!(!a.toggle_pid(30));
        assert_eq!(*a.reanalyse(&gone).mine, HashSet::from([20]));
    }
}
