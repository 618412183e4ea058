//! What `gpuwatch run` saw while the job ran: per GPU, the job's memory and everyone else's
//! over time (a bounded timeline), the peaks and who held the external memory at its peak,
//! the growth findings the detector opened, and the last frame in which the job still held
//! memory (the moment closest to a failure).
//!
//! Pure: it is fed frames and the job's PIDs for each frame; the caller decides where frames
//! come from.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::analysis::Analysis;
use crate::detect::{Finding, FindingEvent};
use crate::model::{Frame, GpuSample};

/// At most this many timeline points per GPU; beyond, neighbours merge (keeping maxima).
pub const TIMELINE_POINTS: usize = 2048;

/// One moment on a GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Unix seconds.
    pub t: f64,
    /// The job's processes' memory.
    pub job: u64,
    /// Everything else in use (other processes and memory no process accounts for).
    pub external: u64,
    pub total: u64,
}

/// A process other than the job's, as it was at the external peak.
#[derive(Debug, Clone, PartialEq)]
pub struct Holder {
    pub pid: u32,
    pub bytes: u64,
    pub user: Option<String>,
    pub command: Option<String>,
}

/// One GPU over the run.
#[derive(Debug, Clone, Default)]
pub struct GpuRun {
    pub index: u32,
    pub uuid: String,
    pub name: Option<String>,
    pub total: Option<u64>,
    /// The job's peak (bytes, unix seconds).
    pub job_peak: Option<(u64, f64)>,
    /// Everyone else's peak (bytes, unix seconds) and who held it then, largest first; the
    /// memory no process accounts for at that moment.
    pub external_peak: Option<(u64, f64, Vec<Holder>, u64)>,
    pub timeline: Vec<Point>,
    /// Seconds one timeline point covers (doubles each time the timeline is halved).
    pub point_span: f64,
}

impl GpuRun {
    /// Whether the job ever held memory here.
    pub fn job_used(&self) -> bool {
        self.job_peak.is_some_and(|(b, _)| b > 0)
    }

    fn push(&mut self, p: Point) {
        if let Some(last) = self.timeline.last_mut()
            && p.t - last.t < self.point_span
        {
            last.job = last.job.max(p.job);
            last.external = last.external.max(p.external);
            last.total = last.total.max(p.total);
            return;
        }
        self.timeline.push(p);
        if self.timeline.len() > TIMELINE_POINTS {
            // Halve: merge neighbours, keep the maxima (peaks must survive).
            let merged: Vec<Point> = self
                .timeline
                .chunks(2)
                .map(|c| Point {
                    t: c[0].t,
                    job: c.iter().map(|p| p.job).max().unwrap_or(0),
                    external: c.iter().map(|p| p.external).max().unwrap_or(0),
                    total: c.iter().map(|p| p.total).max().unwrap_or(0),
                })
                .collect();
            self.timeline = merged;
            self.point_span = if self.point_span > 0.0 {
                self.point_span * 2.0
            } else {
                let first = self.timeline.first().map_or(0.0, |p| p.t);
                let last = self.timeline.last().map_or(0.0, |p| p.t);
                (last - first) / self.timeline.len().max(1) as f64
            };
        }
    }
}

/// Everything the report and the diagnosis need.
pub struct RunRecord {
    /// Unix seconds.
    pub started: f64,
    pub gpus: BTreeMap<String, GpuRun>,
    /// Every PID of the job's tree seen holding GPU memory.
    pub job_pids: BTreeSet<u32>,
    /// Findings about the job's GPUs opened during the run (the latest version of each).
    pub findings: Vec<Finding>,
    /// The last frame in which the job held GPU memory.
    pub last_with_job: Option<Arc<Frame>>,
    /// The latest frame.
    pub latest: Option<Arc<Frame>>,
    pub frames: u64,
}

impl RunRecord {
    pub fn new(started: f64) -> Self {
        Self {
            started,
            gpus: BTreeMap::new(),
            job_pids: BTreeSet::new(),
            findings: Vec::new(),
            last_with_job: None,
            latest: None,
            frames: 0,
        }
    }

    /// Takes the analysis of one frame, whose watched set ("mine") is the job's tree. A GPU
    /// whose split is unknown (a process of the job, or of someone else, without a memory
    /// figure) adds nothing to the peaks or the timeline: an unknown value is never counted
    /// as zero.
    pub fn observe(&mut self, analysis: &Analysis) {
        let frame = &analysis.frame;
        self.frames += 1;
        let t = frame.sample.taken_at;
        let mut job_here = false;
        for (g, a) in frame.sample.gpus.iter().zip(&analysis.gpus) {
            let Some(split) = a.split else { continue };
            let run = self.gpus.entry(g.uuid.clone()).or_insert_with(|| GpuRun {
                index: g.index,
                uuid: g.uuid.clone(),
                ..GpuRun::default()
            });
            run.index = g.index;
            run.name.clone_from(&g.name);
            run.total = Some(split.total);
            let (Some(job_bytes), Some(external)) = (split.mine, split.external) else {
                continue;
            };
            job_here |= job_bytes > 0;
            if job_bytes > 0 && run.job_peak.is_none_or(|(b, _)| job_bytes > b) {
                run.job_peak = Some((job_bytes, t));
            }
            if run
                .external_peak
                .as_ref()
                .is_none_or(|(b, ..)| external > *b)
            {
                let holders = holders(g, analysis);
                let named: u64 = holders.iter().map(|h| h.bytes).sum();
                run.external_peak = Some((external, t, holders, external.saturating_sub(named)));
            }
            run.push(Point {
                t,
                job: job_bytes,
                external,
                total: split.total,
            });
        }
        for p in frame.sample.gpus.iter().flat_map(|g| &g.processes) {
            if analysis.is_mine(p) {
                self.job_pids.insert(p.pid);
            }
        }
        if job_here {
            self.last_with_job = Some(Arc::clone(frame));
        }
        self.latest = Some(Arc::clone(frame));
        // Growth: the detector's findings on the GPUs the job uses.
        for e in &analysis.events {
            if let FindingEvent::Opened(f) | FindingEvent::Updated(f) = e {
                match self.findings.iter_mut().find(|o| o.id == f.id) {
                    Some(o) => o.clone_from(f),
                    None => self.findings.push(f.clone()),
                }
            }
        }
    }

    /// The GPUs the job held memory on, by NVML index.
    pub fn job_gpus(&self) -> Vec<&GpuRun> {
        let mut v: Vec<&GpuRun> = self.gpus.values().filter(|g| g.job_used()).collect();
        v.sort_by_key(|g| g.index);
        v
    }
}

/// The other processes holding memory on this GPU (with a known figure), largest first.
fn holders(g: &GpuSample, analysis: &Analysis) -> Vec<Holder> {
    let mut holders: Vec<Holder> = g
        .processes
        .iter()
        .filter(|p| !analysis.is_mine(p))
        .filter_map(|p| {
            let bytes = p.used_bytes.filter(|&b| b > 0)?;
            Some(Holder {
                pid: p.pid,
                bytes,
                user: p.host.user.clone(),
                command: p.host.command.clone().or_else(|| p.host.name.clone()),
            })
        })
        .collect();
    holders.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.pid.cmp(&b.pid)));
    holders
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Memory, ProcKind, ProcSample};
    use std::collections::HashSet;
    use std::time::Duration;

    const GIB: u64 = 1 << 30;

    fn proc(pid: u32, bytes: u64) -> ProcSample {
        ProcSample {
            pid,
            kind: ProcKind::Compute,
            used_bytes: Some(bytes),
            sm_percent: None,
            mem_percent: None,
            gpu_instance: None,
            compute_instance: None,
            host: crate::model::HostProc {
                visible: true,
                user: Some(format!("u{pid}")),
                command: Some(format!("cmd{pid}")),
                ..Default::default()
            },
        }
    }

    fn frame(t: f64, gpus: Vec<(u64, Vec<ProcSample>)>) -> Arc<Frame> {
        let gpus = gpus
            .into_iter()
            .enumerate()
            .map(|(i, (used, procs))| {
                let mut g = GpuSample::empty(i as u32, format!("GPU-{i}"));
                g.memory = Some(Memory {
                    total: 80 * GIB,
                    reserved: None,
                    used,
                    free: 80 * GIB - used,
                });
                g.processes = procs;
                g
            })
            .collect();
        Frame::for_test(
            crate::model::Sample {
                taken_at: t,
                gpus,
                errors: vec![],
                collect_seconds: 0.0,
            },
            Duration::from_millis(250),
        )
    }

    /// A record and the analyzer that feeds it, watching `job`'s PIDs.
    struct Run(RunRecord, crate::analysis::Analyzer);

    impl Run {
        fn observe(&mut self, frame: &Arc<Frame>, _job: &HashSet<u32>) {
            let analysis = self.1.push(frame);
            self.0.observe(&analysis);
        }
    }

    fn record_of(job: &[u32]) -> Run {
        let watch = crate::watch::WatchSet::new(
            job.iter()
                .map(|&p| crate::watch::WatchSpec::Pid(p))
                .collect(),
            None,
        );
        Run(
            RunRecord::new(1000.0),
            crate::analysis::Analyzer::new(
                crate::detect::Rules::default(),
                Duration::from_mins(10),
                crate::analysis::Detail::Full,
                watch,
            )
            .with_parents(crate::analysis::Parents::Reported),
        )
    }

    #[test]
    fn peaks_and_holders_are_kept_per_gpu() {
        let job: HashSet<u32> = [10, 11].into_iter().collect();
        let mut run = record_of(&[10, 11]);
        // GPU 0: the job (two ranks) grows; pid 20 comes and takes 30 GiB, then leaves.
        run.observe(
            &frame(
                1000.0,
                vec![(5 * GIB, vec![proc(10, 4 * GIB)]), (0, vec![])],
            ),
            &job,
        );
        run.observe(
            &frame(
                1001.0,
                vec![
                    (
                        45 * GIB,
                        vec![proc(10, 8 * GIB), proc(11, 6 * GIB), proc(20, 30 * GIB)],
                    ),
                    (0, vec![]),
                ],
            ),
            &job,
        );
        run.observe(
            &frame(
                1002.0,
                vec![(20 * GIB, vec![proc(10, 19 * GIB)]), (0, vec![])],
            ),
            &job,
        );
        run.observe(&frame(1003.0, vec![(GIB, vec![]), (0, vec![])]), &job);
        let r = &run.0;
        let g0 = &r.gpus["GPU-0"];
        assert_eq!(g0.job_peak, Some((19 * GIB, 1002.0)));
        let (ext, at, holders, unattributed) = g0.external_peak.clone().unwrap();
        assert_eq!((ext, at), (31 * GIB, 1001.0));
        assert_eq!(holders.len(), 1);
        assert_eq!(holders[0].pid, 20);
        assert_eq!(holders[0].user.as_deref(), Some("u20"));
        assert_eq!(unattributed, GIB, "31 GiB external, 30 GiB named");
        assert_eq!(g0.timeline.len(), 4);
        assert_eq!(r.job_pids.iter().copied().collect::<Vec<_>>(), vec![10, 11]);
        assert!(
            (r.last_with_job.as_ref().unwrap().sample.taken_at - 1002.0).abs() < 1e-9,
            "the last frame with the job in it, not the one after it died"
        );
        assert_eq!(r.job_gpus().len(), 1, "GPU 1 never held the job");
    }

    #[test]
    fn the_timeline_stays_bounded_and_keeps_its_peaks() {
        let job: HashSet<u32> = [10].into_iter().collect();
        let mut run = record_of(&[10]);
        let n = TIMELINE_POINTS * 5;
        for k in 0..n {
            // One spike in the middle.
            let bytes = if k == n / 2 { 70 * GIB } else { GIB };
            run.observe(
                &frame(1000.0 + k as f64, vec![(bytes, vec![proc(10, bytes)])]),
                &job,
            );
        }
        let g = &run.0.gpus["GPU-0"];
        assert!(g.timeline.len() <= TIMELINE_POINTS, "{}", g.timeline.len());
        assert!(g.timeline.len() > TIMELINE_POINTS / 4);
        assert_eq!(g.timeline.iter().map(|p| p.job).max(), Some(70 * GIB));
        assert!(g.timeline.windows(2).all(|w| w[0].t < w[1].t));
        assert!((g.timeline[0].t - 1000.0).abs() < 1e-9);
    }
}
