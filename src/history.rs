//! In-memory history of samples: per-GPU and per-process time series over a sliding window,
//! and the robust growth estimates (Theil–Sen slopes, time to full) computed from them.
//!
//! This module owns the series the dashboard charts and the detector evaluates. It is pure
//! data: no I/O and no clock reads — time comes only from [`Sample::taken_at`] (unix seconds),
//! so a replay builds exactly the history the live run built.
//!
//! Rules:
//! - **Window.** Points older than `window` before the newest pushed sample are dropped; a GPU
//!   or process not seen for longer than `window` is forgotten. Each series is also capped at
//!   [`History::max_points`] (one point per [`MIN_SPACING`] of window), oldest dropped first, so
//!   a fast replay cannot grow memory without bound.
//! - **Time order.** A sample whose `taken_at` is not after the last one pushed (a repeated
//!   sample, a clock stepped back a little) or is not finite is ignored. A sample more than one
//!   window *before* the last one (the clock was stepped back a long way, or a different source
//!   began) clears the history and starts over, so a backwards clock cannot freeze it. Replay
//!   loops shift time forward themselves and never hit either case.
//! - **Unavailable is not zero.** Every value is an `Option`; the `*_series` accessors skip
//!   unavailable points, and growth uses only available ones.
//! - **Identity.** A process is (GPU, pid, start time) — [`ProcKey`]; a reused PID is a new
//!   key. Host facts can arrive a tick after NVML first lists a process, so a process first
//!   seen without a start time is re-keyed when its start time becomes known, and a sample
//!   that briefly lacks the start time continues the series it belonged to (see
//!   [`History::process_for`]).
//! - **Peaks** ([`ProcHistory::peak_used`], [`GpuHistory::peak_used`]) are kept since first
//!   seen, not limited to the window.
//! - **Process detail.** By default every process point of the window is kept. A history made
//!   [`History::with_process_detail`]`(recent, step)` keeps full resolution only for the last
//!   `recent` of each process; older points are merged into one point per `step` (aligned to
//!   multiples of `step` in unix time) that keeps the bucket's maxima and its latest time. The
//!   daemon uses this: at 8 GPUs × 64 processes a 10-minute window at 1 Hz is 307 200 points,
//!   and its rules read full resolution only over the last minute or so. GPU series are never
//!   thinned.
//! - **Idle time** ([`ProcHistory::idle_since`]) is tracked as samples arrive, not read back
//!   from the points, so it is exact whatever the window and the detail.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::time::Duration;

use crate::model::{GpuSample, ProcSample, Sample};

pub mod growth;

pub use growth::{Growth, gpu_growth, process_growth};

/// Each series holds at most one point per this much of the window (the hard cap).
pub const MIN_SPACING: Duration = Duration::from_millis(50);

/// The fewest points a series is allowed to hold, whatever the window.
const MIN_CAP: usize = 16;

/// [`slope_bytes_per_s`] uses at most this many evenly spaced points (≤ 496 pairwise slopes).
pub const SLOPE_MAX_POINTS: usize = 32;

const SLOPE_MAX_PAIRS: usize = SLOPE_MAX_POINTS * (SLOPE_MAX_POINTS - 1) / 2;

/// A process on one GPU: (GPU uuid, pid, start time). A reused PID has another start time and
/// so is another key. Ordered by GPU first, so one GPU's processes are contiguous.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcKey {
    /// UUID of the GPU the process holds memory on.
    pub gpu: String,
    pub pid: u32,
    /// Process start time, unix seconds; `None` when the host could not tell.
    pub start_time: Option<u64>,
}

/// A [`ProcKey`] seen through its parts, so that the maps can be searched with a borrowed
/// `(&str, pid, start time)` instead of a key built (and its GPU UUID allocated) for every
/// lookup: the daemon looks processes up thousands of times a second. Orders exactly as
/// `ProcKey`'s derived `Ord` (GPU, then pid, then start time).
trait KeyView {
    fn parts(&self) -> (&str, u32, Option<u64>);
}

impl KeyView for ProcKey {
    fn parts(&self) -> (&str, u32, Option<u64>) {
        (&self.gpu, self.pid, self.start_time)
    }
}

impl KeyView for (&str, u32, Option<u64>) {
    fn parts(&self) -> (&str, u32, Option<u64>) {
        *self
    }
}

impl<'a> std::borrow::Borrow<dyn KeyView + 'a> for ProcKey {
    fn borrow(&self) -> &(dyn KeyView + 'a) {
        self
    }
}

impl PartialEq for dyn KeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn KeyView + '_ {}

impl PartialOrd for dyn KeyView + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn KeyView + '_ {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.parts().cmp(&other.parts())
    }
}

/// One GPU at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuPoint {
    /// Unix seconds.
    pub t: f64,
    /// Memory used, bytes.
    pub used: Option<u64>,
    /// Total memory, bytes.
    pub total: Option<u64>,
    /// Free memory as the driver reports it (total − reserved − used), bytes.
    pub free: Option<u64>,
    /// GPU utilisation, %.
    pub util: Option<f32>,
    /// Memory-bandwidth utilisation, %.
    pub mem_util: Option<f32>,
    /// Memory no visible process accounts for, bytes.
    pub unattributed: Option<u64>,
}

impl GpuPoint {
    fn from_sample(t: f64, g: &GpuSample) -> Self {
        Self {
            t,
            used: g.memory.map(|m| m.used),
            total: g.memory.map(|m| m.total),
            free: g.memory.map(|m| m.free),
            util: g.util_gpu,
            mem_util: g.util_mem,
            unattributed: g.unattributed_bytes(),
        }
    }

    /// Headroom: the driver's free memory, or total − used when free is unknown.
    pub fn headroom(&self) -> Option<u64> {
        self.free
            .or_else(|| Some(self.total?.saturating_sub(self.used?)))
    }
}

/// One process on one GPU at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcPoint {
    /// Unix seconds.
    pub t: f64,
    /// GPU memory, bytes.
    pub used: Option<u64>,
    /// SM utilisation, %.
    pub sm: Option<f32>,
}

/// A series of points in time order, bounded by a window and a hard cap.
trait Timed {
    fn t(&self) -> f64;
}

impl Timed for GpuPoint {
    fn t(&self) -> f64 {
        self.t
    }
}

/// A [`ProcPoint`] as a series stores it: 16 bytes instead of 32 (a daemon holds hundreds of
/// thousands). `v` holds the memory in its low 48 bits (all ones: unknown; 256 TiB and more,
/// which no GPU has, is stored as the largest value that fits) and SM % × 100 in its high 16
/// bits (`0xFFFF`: unknown; NVML reports whole percents, so nothing is lost).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Packed {
    t: f64,
    v: u64,
}

const USED_BITS: u32 = 48;
const USED_UNKNOWN: u64 = (1 << USED_BITS) - 1;
const SM_UNKNOWN: u64 = 0xFFFF;

impl Packed {
    fn new(t: f64, used: Option<u64>, sm: Option<f32>) -> Self {
        let used = used.map_or(USED_UNKNOWN, |u| u.min(USED_UNKNOWN - 1));
        let sm = sm
            .filter(|s| s.is_finite())
            .map_or(SM_UNKNOWN, |s| (s.clamp(0.0, 655.0) * 100.0).round() as u64);
        Self {
            t,
            v: used | (sm << USED_BITS),
        }
    }

    fn used(self) -> Option<u64> {
        let u = self.v & USED_UNKNOWN;
        (u != USED_UNKNOWN).then_some(u)
    }

    fn sm(self) -> Option<f32> {
        let s = self.v >> USED_BITS;
        (s != SM_UNKNOWN).then(|| s as f32 / 100.0)
    }

    fn unpack(self) -> ProcPoint {
        ProcPoint {
            t: self.t,
            used: self.used(),
            sm: self.sm(),
        }
    }
}

impl Timed for Packed {
    fn t(&self) -> f64 {
        self.t
    }
}

/// Appends `point`, dropping the oldest points beyond `cap`; returns how many were dropped.
///
/// A full buffer grows by a quarter (at least 8 points), not by doubling: a daemon holds
/// hundreds of series that all reach the same steady length, and doubling would leave up to
/// half of each unused.
fn push_bounded<P: Timed>(series: &mut VecDeque<P>, point: P, cap: usize) -> usize {
    let mut dropped = 0;
    while series.len() >= cap {
        series.pop_front();
        dropped += 1;
    }
    if series.len() == series.capacity() {
        series.reserve_exact((series.len() / 4).clamp(8, cap));
    }
    series.push_back(point);
    dropped
}

/// Drops the points before `cutoff`; returns how many.
fn prune<P: Timed>(series: &mut VecDeque<P>, cutoff: f64) -> usize {
    let mut dropped = 0;
    while series.front().is_some_and(|p| p.t() < cutoff) {
        series.pop_front();
        dropped += 1;
    }
    dropped
}

/// The larger of two optional values; an unknown one does not hide a known one.
fn max_known<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if y > x { y } else { x }),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Keeps a running peak `(value, when)`; the first of equal values wins.
fn raise_peak(peak: &mut Option<(u64, f64)>, value: Option<u64>, t: f64) {
    if let Some(v) = value
        && peak.is_none_or(|(p, _)| v > p)
    {
        *peak = Some((v, t));
    }
}

/// Growth of `value` over the last `over` before the series' last point: `None` with fewer
/// than 3 available points or when they span less than `over / 3` (warm-up).
///
/// Picks at most [`SLOPE_MAX_POINTS`] points straight from the series (no copy of the whole
/// window): evenly spaced anchors, each moved to the nearest available point before the next
/// anchor (the last one: the latest available point), so the picked points span the data.
fn growth<P: Timed>(
    series: &VecDeque<P>,
    over: Duration,
    value: impl Fn(&P) -> Option<u64>,
) -> Option<f64> {
    let last = series.back()?.t();
    let over = over.as_secs_f64();
    let mut picked = [(0.0f64, 0.0f64); SLOPE_MAX_POINTS];
    let count = pick(series, last - over, &mut picked, value);
    let points = &picked[..count];
    let (first, latest) = (points.first()?, points.last()?);
    if points.len() < 3 || latest.0 - first.0 < over / 3.0 {
        return None;
    }
    slope_bytes_per_s(points)
}

/// Fills `out` with up to `out.len()` points `(t, value)` of the series from `from` on, spread
/// evenly **in time** (a thinned process series is sparse in its older part, so spreading by
/// index would crowd the picks into the recent part): anchors evenly spaced from the first
/// point at or after `from` to the last point, each moved to the first point with a value
/// before the next anchor (the last one: the latest point with a value). Returns how many.
/// Each anchor costs a checked guess (or a binary search), not a walk of the window.
fn pick<P: Timed>(
    series: &VecDeque<P>,
    from: f64,
    out: &mut [(f64, f64)],
    value: impl Fn(&P) -> Option<u64>,
) -> usize {
    let Some(last) = series.back().map(Timed::t) else {
        return 0;
    };
    let start = series.partition_point(|p| p.t() < from);
    let len = series.len() - start;
    if len == 0 {
        return 0;
    }
    let first = series[start].t();
    let anchors = len.min(out.len());
    // The first index at or after anchor `a`'s time. Series are mostly evenly spaced, so a
    // guess by interpolation is usually right (checked); else a binary search.
    let index_at = |a: usize| {
        if a == 0 {
            return start;
        }
        let at = first + (last - first) * a as f64 / (anchors - 1) as f64;
        let guess = start + ((len - 1) as f64 * (at - first) / (last - first)).ceil() as usize;
        if guess < series.len()
            && series[guess].t() >= at
            && (guess == start || series[guess - 1].t() < at)
        {
            return guess;
        }
        series.partition_point(|p| p.t() < at).max(start)
    };
    let available = |i: &usize| value(&series[*i]).is_some();
    let mut count = 0;
    // Indices below `floor` are taken or skipped.
    let mut floor = start;
    let mut anchor = start;
    for a in 0..anchors {
        let index = if a + 1 == anchors {
            (floor..series.len()).rev().find(available)
        } else {
            let next = index_at(a + 1);
            let found = (anchor.max(floor)..next).find(available);
            anchor = next;
            found
        };
        if let Some(i) = index {
            let p = &series[i];
            if let Some(v) = value(p) {
                out[count] = (p.t(), v as f64);
                count += 1;
            }
            floor = i + 1;
        }
    }
    count
}

/// The history of one GPU.
#[derive(Debug, Clone)]
pub struct GpuHistory {
    index: u32,
    first_seen: f64,
    last_seen: f64,
    points: VecDeque<GpuPoint>,
    peak_used: Option<(u64, f64)>,
}

impl GpuHistory {
    fn new(index: u32, t: f64) -> Self {
        Self {
            index,
            first_seen: t,
            last_seen: t,
            points: VecDeque::new(),
            peak_used: None,
        }
    }

    /// NVML index in the latest sample.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// When this GPU was first seen (unix seconds), since the history last forgot it.
    pub fn first_seen(&self) -> f64 {
        self.first_seen
    }

    /// When this GPU was last seen (unix seconds).
    pub fn last_seen(&self) -> f64 {
        self.last_seen
    }

    /// Every point in the window, oldest first.
    pub fn points(
        &self,
    ) -> impl DoubleEndedIterator<Item = &GpuPoint> + ExactSizeIterator + Clone + '_ {
        self.points.iter()
    }

    /// The newest point.
    pub fn latest(&self) -> Option<&GpuPoint> {
        self.points.back()
    }

    /// `(t, used bytes)` for the points where memory is known.
    pub fn used_series(&self) -> impl DoubleEndedIterator<Item = (f64, u64)> + Clone + '_ {
        self.points.iter().filter_map(|p| Some((p.t, p.used?)))
    }

    /// `(t, GPU utilisation %)` for the points where it is known.
    pub fn util_series(&self) -> impl DoubleEndedIterator<Item = (f64, f32)> + Clone + '_ {
        self.points.iter().filter_map(|p| Some((p.t, p.util?)))
    }

    /// `(t, memory-bandwidth utilisation %)` for the points where it is known.
    pub fn mem_util_series(&self) -> impl DoubleEndedIterator<Item = (f64, f32)> + Clone + '_ {
        self.points.iter().filter_map(|p| Some((p.t, p.mem_util?)))
    }

    /// `(t, unattributed bytes)` for the points where it is known.
    pub fn unattributed_series(&self) -> impl DoubleEndedIterator<Item = (f64, u64)> + Clone + '_ {
        self.points
            .iter()
            .filter_map(|p| Some((p.t, p.unattributed?)))
    }

    /// Highest memory used since first seen, and when (not limited to the window).
    pub fn peak_used(&self) -> Option<(u64, f64)> {
        self.peak_used
    }

    /// Highest memory used within the window, and when.
    pub fn peak_used_in_window(&self) -> Option<(u64, f64)> {
        let mut peak = None;
        for p in &self.points {
            raise_peak(&mut peak, p.used, p.t);
        }
        peak
    }

    /// Robust growth of memory used over the last `over` before the latest point, bytes/s.
    /// `None` during warm-up: fewer than 3 known points, or less than `over / 3` of data.
    pub fn growth_bytes_per_s(&self, over: Duration) -> Option<f64> {
        growth(&self.points, over, |p| p.used)
    }

    /// Time until memory is full at the growth rate over `over`: headroom of the latest point
    /// with known memory (the driver's free, else total − used) ÷ slope. `None` while the slope
    /// is not positive, during warm-up, or when memory is unknown.
    pub fn time_to_full(&self, over: Duration) -> Option<Duration> {
        let slope = self.growth_bytes_per_s(over)?;
        if slope <= 0.0 {
            return None;
        }
        let headroom = self.points.iter().rev().find_map(GpuPoint::headroom)?;
        Duration::try_from_secs_f64(headroom as f64 / slope).ok()
    }
}

/// The history of one process on one GPU.
#[derive(Debug, Clone)]
pub struct ProcHistory {
    first_seen: f64,
    last_seen: f64,
    /// `points[..coarse]` are merged buckets (see [`History::with_process_detail`]), the rest
    /// full resolution.
    points: VecDeque<Packed>,
    coarse: usize,
    peak_used: Option<(u64, f64)>,
    idle_since: Option<f64>,
    /// The last rate refined over a longer window ([`growth::process_growth`]), reused for a
    /// few seconds of samples.
    refined: std::cell::Cell<Option<growth::Refined>>,
    /// When the leak rule last judged this process (sample time): it judges one that has no
    /// open finding every few seconds, not on every frame.
    leak_judged: std::cell::Cell<Option<f64>>,
}

impl ProcHistory {
    fn new(t: f64) -> Self {
        Self {
            first_seen: t,
            last_seen: t,
            points: VecDeque::new(),
            coarse: 0,
            peak_used: None,
            idle_since: None,
            refined: std::cell::Cell::new(None),
            leak_judged: std::cell::Cell::new(None),
        }
    }

    /// See the field.
    pub(crate) fn leak_judged(&self) -> &std::cell::Cell<Option<f64>> {
        &self.leak_judged
    }

    /// See the field.
    pub(crate) fn refined(&self) -> &std::cell::Cell<Option<growth::Refined>> {
        &self.refined
    }

    /// Since when every SM reading of this process has been 0 (unix seconds): the time of the
    /// first reading of the current run of zeros. `None` while the latest reading is above 0
    /// or unknown (an unknown reading proves nothing). Kept as samples arrive, so it is not
    /// limited to the window.
    pub fn idle_since(&self) -> Option<f64> {
        self.idle_since
    }

    /// The first point at or after `from` whose memory is known, `(t, used bytes)`.
    pub fn first_used_from(&self, from: f64) -> Option<(f64, u64)> {
        self.used_from(from).next()
    }

    /// Up to `k` points `(t, used bytes)` of `[from, latest]`, spread evenly in time (so a
    /// thinned series is sampled like a uniform one), each a point whose memory is known.
    pub fn used_picked(&self, from: f64, k: usize) -> Vec<(f64, f64)> {
        let mut out = vec![(0.0, 0.0); k];
        let n = pick(&self.points, from, &mut out, |p| p.used());
        out.truncate(n);
        out
    }

    /// How many of the oldest points are merged buckets rather than single samples.
    pub fn coarse_points(&self) -> usize {
        self.coarse
    }

    /// When this process was first seen on this GPU (unix seconds).
    pub fn first_seen(&self) -> f64 {
        self.first_seen
    }

    /// When this process was last seen on this GPU (unix seconds).
    pub fn last_seen(&self) -> f64 {
        self.last_seen
    }

    /// Every point in the window, oldest first.
    pub fn points(
        &self,
    ) -> impl DoubleEndedIterator<Item = ProcPoint> + ExactSizeIterator + Clone + '_ {
        self.points.iter().map(|p| p.unpack())
    }

    /// The newest point.
    pub fn latest(&self) -> Option<ProcPoint> {
        self.points.back().map(|p| p.unpack())
    }

    /// Appends the point of sample row `p` taken at `t`, keeping at most `cap` points. A second
    /// row at the same time (the same PID listed twice in one GPU's sample) is ignored: the
    /// first wins.
    fn record(&mut self, t: f64, p: &ProcSample, cap: usize, detail: Option<ProcessDetail>) {
        if self.points.back().is_some_and(|last| last.t >= t) {
            return;
        }
        self.last_seen = t;
        raise_peak(&mut self.peak_used, p.used_bytes, t);
        match p.sm_percent {
            Some(sm) if sm <= 0.0 => {
                self.idle_since.get_or_insert(t);
            }
            _ => self.idle_since = None,
        }
        let dropped = push_bounded(
            &mut self.points,
            Packed::new(t, p.used_bytes, p.sm_percent),
            cap,
        );
        self.coarse = self.coarse.saturating_sub(dropped);
        if let Some(d) = detail {
            self.thin(t - d.recent.as_secs_f64(), d.step.as_secs_f64());
        }
    }

    /// Moves the full-resolution points older than `before` into buckets of `step` seconds:
    /// a point joins the bucket before it when both lie in the same multiple of `step` (the
    /// bucket keeps the maxima and the later time), else it starts a bucket. The newest point
    /// is never merged.
    fn thin(&mut self, before: f64, step: f64) {
        let bucket = |t: f64| (t / step).floor() as i64;
        while self.coarse + 1 < self.points.len() && self.points[self.coarse].t < before {
            let p = self.points[self.coarse];
            match self.coarse.checked_sub(1).map(|i| &mut self.points[i]) {
                Some(b) if bucket(b.t) == bucket(p.t) => {
                    *b = Packed::new(
                        p.t,
                        max_known(b.used(), p.used()),
                        max_known(b.sm(), p.sm()),
                    );
                    self.points.remove(self.coarse);
                }
                _ => self.coarse += 1,
            }
        }
    }

    /// `(t, used bytes)` for the points where memory is known.
    pub fn used_series(&self) -> impl DoubleEndedIterator<Item = (f64, u64)> + Clone + '_ {
        self.points.iter().filter_map(|p| Some((p.t, p.used()?)))
    }

    /// `(t, used bytes)` for the points at or after `from` where memory is known, oldest
    /// first (a binary search, then the points from there).
    pub fn used_from(&self, from: f64) -> impl Iterator<Item = (f64, u64)> + '_ {
        let start = self.points.partition_point(|p| p.t < from);
        self.points
            .range(start..)
            .filter_map(|p| Some((p.t, p.used()?)))
    }

    /// `(t, SM utilisation %)` for the points where it is known.
    pub fn sm_series(&self) -> impl DoubleEndedIterator<Item = (f64, f32)> + Clone + '_ {
        self.points.iter().filter_map(|p| Some((p.t, p.sm()?)))
    }

    /// Highest GPU memory since first seen, and when (not limited to the window).
    pub fn peak_used(&self) -> Option<(u64, f64)> {
        self.peak_used
    }

    /// Robust growth of GPU memory over the last `over` before this process's latest point,
    /// bytes/s. `None` during warm-up: fewer than 3 known points, or less than `over / 3` of
    /// data.
    pub fn growth_bytes_per_s(&self, over: Duration) -> Option<f64> {
        growth(&self.points, over, |p| p.used())
    }
}

/// What [`History::push`] did with a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushOutcome {
    /// The sample was appended.
    Appended,
    /// The sample was not after the last one pushed (or its time was not finite) and was
    /// ignored.
    Ignored,
    /// The sample was more than one window before the last one: the history was cleared and
    /// restarted from it.
    Reset,
}

/// How much of each process series is kept at full resolution: see
/// [`History::with_process_detail`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessDetail {
    /// Full resolution for this long before each process's latest point.
    pub recent: Duration,
    /// Older points: one per this much time.
    pub step: Duration,
}

/// Per-GPU and per-process series over a sliding window. See the module docs for the rules.
#[derive(Debug, Clone)]
pub struct History {
    window: Duration,
    max_points: usize,
    detail: Option<ProcessDetail>,
    last_t: Option<f64>,
    gpus: BTreeMap<String, GpuHistory>,
    procs: BTreeMap<ProcKey, ProcHistory>,
}

impl History {
    /// An empty history keeping `window` of data.
    pub fn new(window: Duration) -> Self {
        let cap = window.as_secs_f64() / MIN_SPACING.as_secs_f64();
        let max_points = (cap.ceil() as usize).max(MIN_CAP);
        Self {
            window,
            max_points,
            detail: None,
            last_t: None,
            gpus: BTreeMap::new(),
            procs: BTreeMap::new(),
        }
    }

    /// Keeps each process's points at full resolution only for the last `recent`; older ones
    /// are merged into one point per `step` (maxima kept). Peaks, first/last seen and
    /// [`ProcHistory::idle_since`] are unaffected. A zero `step` keeps full resolution.
    #[must_use]
    pub fn with_process_detail(mut self, recent: Duration, step: Duration) -> Self {
        self.detail = (!step.is_zero()).then_some(ProcessDetail { recent, step });
        self
    }

    /// How much data is kept.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The hard cap on points per series.
    pub fn max_points(&self) -> usize {
        self.max_points
    }

    /// `taken_at` of the newest sample pushed.
    pub fn last_time(&self) -> Option<f64> {
        self.last_t
    }

    /// The key of a process in a sample: (GPU uuid, pid, start time).
    pub fn key_of(gpu_uuid: &str, proc: &ProcSample) -> ProcKey {
        ProcKey {
            gpu: gpu_uuid.to_owned(),
            pid: proc.pid,
            start_time: proc.host.start_time,
        }
    }

    /// Appends one sample: a point per GPU and a point per process on it; then drops points
    /// older than the window and forgets GPUs and processes not seen within it.
    pub fn push(&mut self, sample: &Sample) -> PushOutcome {
        let t = sample.taken_at;
        if !t.is_finite() {
            return PushOutcome::Ignored;
        }
        let window = self.window.as_secs_f64();
        let mut outcome = PushOutcome::Appended;
        if let Some(last) = self.last_t {
            if t < last - window {
                self.gpus.clear();
                self.procs.clear();
                self.last_t = None;
                outcome = PushOutcome::Reset;
            } else if t <= last {
                return PushOutcome::Ignored;
            }
        }
        let previous = self.last_t;
        for g in &sample.gpus {
            self.push_gpu(t, g, previous);
        }
        self.last_t = Some(t);
        self.prune(t - window);
        outcome
    }

    fn push_gpu(&mut self, t: f64, g: &GpuSample, previous: Option<f64>) {
        let cap = self.max_points;
        let detail = self.detail;
        if !self.gpus.contains_key(&g.uuid) {
            self.gpus
                .insert(g.uuid.clone(), GpuHistory::new(g.index, t));
        }
        let Some(gh) = self.gpus.get_mut(&g.uuid) else {
            return;
        };
        gh.index = g.index;
        gh.last_seen = t;
        let point = GpuPoint::from_sample(t, g);
        raise_peak(&mut gh.peak_used, point.used, t);
        push_bounded(&mut gh.points, point, cap);

        for p in &g.processes {
            // The common case, a process already known by its start time, in one lookup.
            let view = (g.uuid.as_str(), p.pid, p.host.start_time);
            if view.2.is_some()
                && let Some(ph) = self.procs.get_mut(&view as &dyn KeyView)
            {
                ph.record(t, p, cap, detail);
                continue;
            }
            let key = self.key_for_push(&g.uuid, p, previous);
            self.procs
                .entry(key)
                .or_insert_with(|| ProcHistory::new(t))
                .record(t, p, cap, detail);
        }
    }

    /// The keys of `pid` on `gpu`, whatever the start time.
    fn keys_of_pid<'a>(
        &'a self,
        gpu: &str,
        pid: u32,
    ) -> impl Iterator<Item = (&'a ProcKey, &'a ProcHistory)> + 'a {
        let lo = ProcKey {
            gpu: gpu.to_owned(),
            pid,
            start_time: None,
        };
        let hi = ProcKey {
            gpu: gpu.to_owned(),
            pid,
            start_time: Some(u64::MAX),
        };
        self.procs.range((Bound::Included(lo), Bound::Included(hi)))
    }

    /// Which series a process in a sample continues (see [`History::process_for`]); re-keys a
    /// series first seen without a start time once the start time is known.
    fn key_for_push(&mut self, gpu: &str, p: &ProcSample, previous: Option<f64>) -> ProcKey {
        let key = Self::key_of(gpu, p);
        if key.start_time.is_some() {
            if !self.procs.contains_key(&key) {
                let unknown = ProcKey {
                    start_time: None,
                    ..key.clone()
                };
                if let Some(ph) = self.procs.remove(&unknown) {
                    self.procs.insert(key.clone(), ph);
                }
            }
            return key;
        }
        previous
            .and_then(|prev| self.continued_key(gpu, p.pid, prev))
            .unwrap_or(key)
    }

    /// For a sighting without a start time: the key without one if it exists, else the key of
    /// this pid seen most recently, if that was at `since` or later.
    fn continued_key(&self, gpu: &str, pid: u32, since: f64) -> Option<ProcKey> {
        let mut best: Option<(&ProcKey, &ProcHistory)> = None;
        for (k, h) in self.keys_of_pid(gpu, pid) {
            if k.start_time.is_none() {
                return Some(k.clone());
            }
            if best.is_none_or(|(_, b)| h.last_seen > b.last_seen) {
                best = Some((k, h));
            }
        }
        best.filter(|(_, h)| h.last_seen >= since)
            .map(|(k, _)| k.clone())
    }

    fn prune(&mut self, cutoff: f64) {
        self.gpus.retain(|_, g| {
            prune(&mut g.points, cutoff);
            g.last_seen >= cutoff
        });
        self.procs.retain(|_, p| {
            let dropped = prune(&mut p.points, cutoff);
            p.coarse = p.coarse.saturating_sub(dropped);
            p.last_seen >= cutoff
        });
    }

    /// The history of a GPU by UUID.
    pub fn gpu(&self, uuid: &str) -> Option<&GpuHistory> {
        self.gpus.get(uuid)
    }

    /// Every GPU with a history, by UUID.
    pub fn gpus(&self) -> impl Iterator<Item = (&str, &GpuHistory)> + '_ {
        self.gpus.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The history of a process by key.
    pub fn process(&self, key: &ProcKey) -> Option<&ProcHistory> {
        self.procs.get(key)
    }

    /// The history a process row of the latest sample belongs to. Usually that of
    /// [`History::key_of`]; when the row has no start time (host facts not known yet, or
    /// briefly lost), the series of that pid seen in the latest sample.
    pub fn process_for(
        &self,
        gpu_uuid: &str,
        proc: &ProcSample,
    ) -> Option<(&ProcKey, &ProcHistory)> {
        if proc.host.start_time.is_some() {
            let view = (gpu_uuid, proc.pid, proc.host.start_time);
            return self.procs.get_key_value(&view as &dyn KeyView);
        }
        let key = self.continued_key(gpu_uuid, proc.pid, self.last_t?)?;
        self.procs.get_key_value(&key)
    }

    /// Every process with a history.
    pub fn processes(&self) -> impl Iterator<Item = (&ProcKey, &ProcHistory)> + '_ {
        self.procs.iter()
    }

    /// The processes with a history on one GPU, by pid (for its memory split by process).
    pub fn processes_on<'a>(
        &'a self,
        gpu_uuid: &'a str,
    ) -> impl Iterator<Item = (&'a ProcKey, &'a ProcHistory)> + 'a {
        let lo = ProcKey {
            gpu: gpu_uuid.to_owned(),
            pid: 0,
            start_time: None,
        };
        self.procs
            .range(lo..)
            .take_while(move |(k, _)| k.gpu == gpu_uuid)
    }

    /// A rough estimate of the heap memory held, bytes.
    pub fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        // A B-tree entry costs about its key and value plus a share of node overhead.
        const NODE_OVERHEAD: usize = 16;
        let gpus: usize = self
            .gpus
            .iter()
            .map(|(k, g)| {
                k.capacity()
                    + size_of::<String>()
                    + size_of::<GpuHistory>()
                    + NODE_OVERHEAD
                    + g.points.capacity() * size_of::<GpuPoint>()
            })
            .sum();
        let procs: usize = self
            .procs
            .iter()
            .map(|(k, p)| {
                k.gpu.capacity()
                    + size_of::<ProcKey>()
                    + size_of::<ProcHistory>()
                    + NODE_OVERHEAD
                    + p.points.capacity() * size_of::<Packed>()
            })
            .sum();
        gpus + procs
    }
}

/// Robust slope of `(t seconds, bytes)` points, bytes/s: the Theil–Sen estimator (median of
/// the pairwise slopes), on at most [`SLOPE_MAX_POINTS`] evenly spaced points (first and last
/// included) so it stays cheap. Pairs with equal times are skipped. `None` with fewer than two
/// points at distinct times. Points are expected in time order; non-finite values are skipped.
pub fn slope_bytes_per_s(points: &[(f64, f64)]) -> Option<f64> {
    slope_on_picked(points, SLOPE_MAX_POINTS)
}

/// [`slope_bytes_per_s`] on at most `max_points` (≤ [`SLOPE_MAX_POINTS`]) evenly spaced points:
/// a quarter of the pairs at half the points, for a rate that is only compared.
pub fn slope_on_picked(points: &[(f64, f64)], max_points: usize) -> Option<f64> {
    let len = points.len();
    let count = len.min(max_points.min(SLOPE_MAX_POINTS));
    if count < 2 {
        return None;
    }
    let mut picked = [(0.0f64, 0.0f64); SLOPE_MAX_POINTS];
    let mut used = 0;
    for i in 0..count {
        // Evenly spaced indices from 0 to len − 1, rounded.
        let (t, v) = points[(i * (len - 1) + (count - 1) / 2) / (count - 1)];
        if t.is_finite() && v.is_finite() {
            picked[used] = (t, v);
            used += 1;
        }
    }
    let picked = &picked[..used];
    let mut slopes = [0.0f64; SLOPE_MAX_PAIRS];
    let mut pairs = 0;
    for (i, &(t0, v0)) in picked.iter().enumerate() {
        for &(t1, v1) in &picked[i + 1..] {
            let dt = t1 - t0;
            if dt != 0.0 {
                slopes[pairs] = (v1 - v0) / dt;
                pairs += 1;
            }
        }
    }
    median(&mut slopes[..pairs])
}

/// Median (mean of the two middle values for an even count), reordering `values`.
fn median(values: &mut [f64]) -> Option<f64> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let mid = n / 2;
    let (lower, upper, _) = values.select_nth_unstable_by(mid, f64::total_cmp);
    let upper = *upper;
    if n % 2 == 1 {
        return Some(upper);
    }
    let lower = lower.iter().copied().max_by(f64::total_cmp)?;
    Some(f64::midpoint(lower, upper))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{HostProc, Memory, ProcKind};

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    fn proc(pid: u32, start: Option<u64>, used: Option<u64>) -> ProcSample {
        ProcSample {
            pid,
            kind: ProcKind::Compute,
            used_bytes: used,
            sm_percent: None,
            mem_percent: None,
            gpu_instance: None,
            compute_instance: None,
            host: HostProc {
                start_time: start,
                ..HostProc::default()
            },
        }
    }

    fn gpu(uuid: &str, used: Option<u64>, procs: Vec<ProcSample>) -> GpuSample {
        let mut g = GpuSample::empty(0, uuid.into());
        g.memory = used.map(|used| Memory {
            total: 100 * GIB,
            reserved: Some(0),
            used,
            free: 100 * GIB - used,
        });
        g.processes = procs;
        g
    }

    fn sample(t: f64, gpus: Vec<GpuSample>) -> Sample {
        Sample {
            taken_at: t,
            gpus,
            errors: Vec::new(),
            collect_seconds: 0.0,
        }
    }

    fn key(pid: u32, start: Option<u64>) -> ProcKey {
        ProcKey {
            gpu: "GPU-a".into(),
            pid,
            start_time: start,
        }
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    /// A process's rate refined over a longer window is reused for [`growth::REFINE_EVERY`]
    /// seconds of samples, then refined again; a drop that re-anchors the window forgets it.
    #[test]
    fn a_refined_process_rate_is_reused_for_a_few_seconds_then_refined_again() {
        let rules = crate::detect::Rules::default();
        let mut h = History::new(Duration::from_mins(10));
        // 8 MiB/s for 2 minutes, then 16 MiB/s: the longer window's rate moves slowly.
        let used = |t: f64| {
            let mib = if t <= 120.0 {
                t * 8.0
            } else {
                960.0 + (t - 120.0) * 16.0
            };
            GIB + (mib * MIB as f64) as u64
        };
        let push = |h: &mut History, t: f64, bytes: u64| {
            h.push(&sample(
                t,
                vec![gpu(
                    "GPU-a",
                    Some(bytes),
                    vec![proc(7, Some(1), Some(bytes))],
                )],
            ));
        };
        for i in 0..=120 {
            push(&mut h, f64::from(i), used(f64::from(i)));
        }
        let ph = h.processes().next().expect("one process").1;
        let first = growth::process_growth(ph, &rules).expect("growth");
        let kept = ph.refined().get().expect("a steady ramp is refined");
        assert_eq!(
            (kept.at, kept.rate.to_bits()),
            (120.0, first.rate.to_bits())
        );
        for i in 121..=124 {
            push(&mut h, f64::from(i), used(f64::from(i)));
            let ph = h.processes().next().expect("one process").1;
            let g = growth::process_growth(ph, &rules).expect("growth");
            assert_eq!(
                g.rate.to_bits(),
                first.rate.to_bits(),
                "reused at t = {i}: {g:?}"
            );
            assert_eq!(ph.refined().get().map(|m| m.at), Some(120.0));
        }
        push(&mut h, 125.0, used(125.0));
        let ph = h.processes().next().expect("one process").1;
        let _ = growth::process_growth(ph, &rules).expect("growth");
        assert_eq!(
            ph.refined().get().map(|m| m.at),
            Some(125.0),
            "refined again"
        );
        // Freed: the window re-anchors and the refined rate is forgotten.
        push(&mut h, 126.0, GIB);
        let ph = h.processes().next().expect("one process").1;
        let _ = growth::process_growth(ph, &rules);
        assert_eq!(ph.refined().get(), None);
    }

    #[test]
    fn old_points_are_dropped() {
        let mut h = History::new(Duration::from_secs(10));
        for t in 0..=30u32 {
            let s = sample(
                f64::from(t),
                vec![gpu(
                    "GPU-a",
                    Some(u64::from(t)),
                    vec![proc(1, Some(5), Some(1))],
                )],
            );
            assert_eq!(h.push(&s), PushOutcome::Appended);
        }
        let g = h.gpu("GPU-a").expect("gpu");
        let times: Vec<f64> = g.used_series().map(|(t, _)| t).collect();
        assert_eq!(times.first().copied(), Some(20.0));
        assert_eq!(times.last().copied(), Some(30.0));
        assert_eq!(times.len(), 11);
        assert_eq!(
            h.process(&key(1, Some(5))).expect("proc").points().len(),
            11
        );
        // The peak is kept since first seen; the window's peak is the window's.
        assert_eq!(g.peak_used(), Some((30, 30.0)));
        assert_eq!(g.peak_used_in_window(), Some((30, 30.0)));
    }

    #[test]
    fn gone_process_is_forgotten_after_the_window() {
        let mut h = History::new(Duration::from_secs(10));
        h.push(&sample(
            0.0,
            vec![gpu("GPU-a", Some(1), vec![proc(1, Some(5), Some(1))])],
        ));
        for t in 1..=10u32 {
            h.push(&sample(f64::from(t), vec![gpu("GPU-a", Some(1), vec![])]));
        }
        // Last seen at 0, newest 10: exactly one window, still kept.
        assert!(h.process(&key(1, Some(5))).is_some());
        h.push(&sample(10.5, vec![gpu("GPU-a", Some(1), vec![])]));
        assert!(h.process(&key(1, Some(5))).is_none());
        assert_eq!(h.processes_on("GPU-a").count(), 0);
    }

    #[test]
    fn reused_pid_is_a_new_process() {
        let mut h = History::new(Duration::from_mins(1));
        h.push(&sample(
            0.0,
            vec![gpu("GPU-a", None, vec![proc(7, Some(100), Some(GIB))])],
        ));
        h.push(&sample(
            1.0,
            vec![gpu("GPU-a", None, vec![proc(7, Some(200), Some(MIB))])],
        ));
        let old = h.process(&key(7, Some(100))).expect("old");
        let new = h.process(&key(7, Some(200))).expect("new");
        assert_eq!(old.peak_used(), Some((GIB, 0.0)));
        assert_eq!(new.peak_used(), Some((MIB, 1.0)));
        assert!(close(new.first_seen(), 1.0, 0.0));
        assert_eq!(h.processes_on("GPU-a").count(), 2);
    }

    #[test]
    fn start_time_arriving_late_continues_the_series() {
        let mut h = History::new(Duration::from_mins(1));
        h.push(&sample(
            0.0,
            vec![gpu("GPU-a", None, vec![proc(7, None, Some(1))])],
        ));
        h.push(&sample(
            1.0,
            vec![gpu("GPU-a", None, vec![proc(7, Some(100), Some(2))])],
        ));
        // Host facts briefly missing: the row continues the same series.
        let row = proc(7, None, Some(3));
        h.push(&sample(2.0, vec![gpu("GPU-a", None, vec![row.clone()])]));
        assert_eq!(h.processes_on("GPU-a").count(), 1);
        let (k, p) = h.process_for("GPU-a", &row).expect("series");
        assert_eq!(k, &key(7, Some(100)));
        let used: Vec<u64> = p.used_series().map(|(_, u)| u).collect();
        assert_eq!(used, vec![1, 2, 3]);
        assert!(close(p.first_seen(), 0.0, 0.0));
    }

    #[test]
    fn processes_split_by_gpu() {
        let mut h = History::new(Duration::from_mins(1));
        h.push(&sample(
            0.0,
            vec![
                gpu(
                    "GPU-a",
                    None,
                    vec![proc(1, None, Some(1)), proc(2, None, Some(1))],
                ),
                gpu("GPU-b", None, vec![proc(1, None, Some(1))]),
            ],
        ));
        let pids: Vec<u32> = h.processes_on("GPU-a").map(|(k, _)| k.pid).collect();
        assert_eq!(pids, vec![1, 2]);
        assert_eq!(h.processes_on("GPU-b").count(), 1);
        assert_eq!(h.processes_on("GPU-c").count(), 0);
    }

    #[test]
    fn peak_is_kept_beyond_the_window() {
        let mut h = History::new(Duration::from_secs(10));
        h.push(&sample(
            0.0,
            vec![gpu(
                "GPU-a",
                Some(50 * GIB),
                vec![proc(1, Some(5), Some(9 * GIB))],
            )],
        ));
        for t in 1..=60u32 {
            h.push(&sample(
                f64::from(t),
                vec![gpu("GPU-a", Some(GIB), vec![proc(1, Some(5), Some(GIB))])],
            ));
        }
        let p = h.process(&key(1, Some(5))).expect("proc");
        assert_eq!(p.peak_used(), Some((9 * GIB, 0.0)));
        assert!(p.points().all(|pt| pt.t >= 50.0));
        let g = h.gpu("GPU-a").expect("gpu");
        assert_eq!(g.peak_used(), Some((50 * GIB, 0.0)));
        assert_eq!(g.peak_used_in_window(), Some((GIB, 50.0)));
    }

    #[test]
    fn unavailable_values_are_skipped_not_zero() {
        let mut h = History::new(Duration::from_mins(1));
        for t in 0..10u32 {
            let used = (t % 3 != 1).then_some(u64::from(t) * GIB);
            h.push(&sample(
                f64::from(t),
                vec![gpu("GPU-a", used, vec![proc(1, Some(5), used)])],
            ));
        }
        let p = h.process(&key(1, Some(5))).expect("proc");
        assert_eq!(p.points().len(), 10);
        let series: Vec<(f64, u64)> = p.used_series().collect();
        assert_eq!(series.len(), 7);
        assert!(series.iter().all(|&(t, u)| u == t as u64 * GIB));
        // A zero in place of n/a would pull the slope down; it stays exactly 1 GiB/s.
        let slope = p
            .growth_bytes_per_s(Duration::from_secs(20))
            .expect("slope");
        assert!(close(slope, GIB as f64, 1.0));
        let g = h.gpu("GPU-a").expect("gpu");
        assert_eq!(g.used_series().count(), 7);
        assert_eq!(g.util_series().count(), 0);
        // Unattributed is unknown whenever a process value is.
        assert_eq!(g.unattributed_series().count(), 7);
    }

    #[test]
    fn stale_samples_are_ignored_and_a_long_jump_back_resets() {
        let mut h = History::new(Duration::from_secs(10));
        assert_eq!(
            h.push(&sample(100.0, vec![gpu("GPU-a", Some(1), vec![])])),
            PushOutcome::Appended
        );
        assert_eq!(
            h.push(&sample(100.0, vec![gpu("GPU-a", Some(2), vec![])])),
            PushOutcome::Ignored
        );
        assert_eq!(
            h.push(&sample(95.0, vec![gpu("GPU-a", Some(3), vec![])])),
            PushOutcome::Ignored
        );
        assert_eq!(
            h.push(&sample(f64::NAN, vec![gpu("GPU-a", Some(3), vec![])])),
            PushOutcome::Ignored
        );
        assert_eq!(h.gpu("GPU-a").expect("gpu").points().len(), 1);
        assert_eq!(
            h.push(&sample(50.0, vec![gpu("GPU-a", Some(4), vec![])])),
            PushOutcome::Reset
        );
        let used: Vec<u64> = h
            .gpu("GPU-a")
            .expect("gpu")
            .used_series()
            .map(|(_, u)| u)
            .collect();
        assert_eq!(used, vec![4]);
        assert_eq!(h.last_time(), Some(50.0));
    }

    #[test]
    fn series_are_capped_by_count_too() {
        let mut h = History::new(Duration::from_secs(10));
        assert_eq!(h.max_points(), 200);
        for i in 0..1000u32 {
            h.push(&sample(
                f64::from(i) * 0.001,
                vec![gpu("GPU-a", Some(1), vec![proc(1, None, Some(1))])],
            ));
        }
        assert_eq!(h.gpu("GPU-a").expect("gpu").points().len(), 200);
        assert_eq!(h.process(&key(1, None)).expect("proc").points().len(), 200);
        assert!(h.memory_bytes() > 200 * std::mem::size_of::<GpuPoint>());
    }

    fn proc_sm(pid: u32, used: Option<u64>, sm: Option<f32>) -> ProcSample {
        ProcSample {
            sm_percent: sm,
            ..proc(pid, Some(5), used)
        }
    }

    #[test]
    #[allow(clippy::float_cmp)] // times are whole seconds, exact by construction
    fn process_detail_merges_old_points_into_buckets_keeping_maxima() {
        let window = Duration::from_mins(10);
        let mut full = History::new(window);
        let mut compact = History::new(window)
            .with_process_detail(Duration::from_mins(1), Duration::from_secs(10));
        // 15 minutes at 1 Hz: a 1 MiB/s ramp with a 1 GiB spike at 400 s and SM busy only at
        // 405 s; from 1000 s on the process is not reported (`None`) every other second.
        for t in 0..900u32 {
            let spike = if t == 400 { GIB } else { 0 };
            let used = (t < 850 || t % 2 == 0).then_some(u64::from(t) * MIB + spike);
            let sm = Some(if t == 405 { 70.0 } else { 0.0 });
            let s = sample(
                f64::from(t),
                vec![gpu("GPU-a", Some(GIB), vec![proc_sm(1, used, sm)])],
            );
            full.push(&s);
            compact.push(&s);
        }
        let f = full.process(&key(1, Some(5))).expect("full");
        let c = compact.process(&key(1, Some(5))).expect("compact");
        assert_eq!(
            f.points().len(),
            601,
            "the full history keeps every second of the window"
        );
        assert_eq!(f.coarse_points(), 0);
        // The last minute point by point: 839.0 ..= 899.0.
        let fine: Vec<f64> = c.points().skip(c.coarse_points()).map(|p| p.t).collect();
        assert_eq!(fine.len(), 61);
        assert!(
            fine.iter().zip(839u32..).all(|(&t, s)| t == f64::from(s)),
            "{fine:?}"
        );
        // Before that, one point per 10 s bucket ([290, 300), … [830, 839)), each at its
        // latest time (so the bucket that straddles the window's start is kept while its
        // latest point is inside) and with its largest memory and SM.
        let coarse: Vec<ProcPoint> = c.points().take(c.coarse_points()).collect();
        assert_eq!(
            coarse.len(),
            55,
            "{:?}",
            coarse.iter().map(|p| p.t).collect::<Vec<_>>()
        );
        assert_eq!(coarse[0].t, 299.0);
        assert_eq!(coarse[54].t, 838.0);
        for p in &coarse {
            let bucket = (p.t / 10.0).floor() * 10.0;
            assert!(p.t == bucket + 9.0 || p.t == 838.0, "{}", p.t);
            let expect = if bucket == 400.0 {
                400 * MIB + GIB
            } else {
                p.t as u64 * MIB
            };
            assert_eq!(p.used, Some(expect), "bucket {bucket}");
            assert_eq!(p.sm, Some(if bucket == 400.0 { 70.0 } else { 0.0 }));
        }
        // Unknown memory in the fine part stays unknown; in a bucket it does not hide a value.
        assert!(c.points().skip(c.coarse_points()).any(|p| p.used.is_none()));
        assert!(coarse.iter().all(|p| p.used.is_some()));
        // What does not depend on the points is the same.
        assert_eq!(c.peak_used(), f.peak_used());
        assert_eq!(c.idle_since(), f.idle_since());
        assert_eq!(c.idle_since(), Some(406.0));
        assert_eq!(c.first_seen(), f.first_seen());
        // Growth and picks over the whole window agree with the full history.
        let (gf, gc) = (
            f.growth_bytes_per_s(window).expect("full"),
            c.growth_bytes_per_s(window).expect("compact"),
        );
        assert!(close(gf, MIB as f64, 0.01 * MIB as f64), "{gf}");
        assert!(close(gc, MIB as f64, 0.01 * MIB as f64), "{gc}");
        let picked = c.used_picked(899.0 - 300.0, 40);
        assert!(picked.len() >= 25, "{}", picked.len());
        let gaps: Vec<f64> = picked.windows(2).map(|w| w[1].0 - w[0].0).collect();
        assert!(
            gaps.iter().all(|&g| g <= 20.0),
            "spread in time, not crowded into the recent part: {gaps:?}"
        );
        assert_eq!(c.first_used_from(599.0), Some((599.0, 599 * MIB)));
        assert_eq!(c.first_used_from(850.5), Some((852.0, 852 * MIB)));
        // 116 points held instead of 601 (the GPU series, the same in both, is not thinned).
        assert!(
            full.memory_bytes() - compact.memory_bytes() >= 450 * std::mem::size_of::<Packed>(),
            "{} vs {}",
            compact.memory_bytes(),
            full.memory_bytes()
        );
    }

    #[test]
    fn a_borrowed_key_finds_what_the_owned_key_finds() {
        let mut h = History::new(Duration::from_mins(1));
        let rows = |gpu: &str| {
            vec![
                proc(7, Some(100), Some(1)),
                proc(7, Some(200), Some(2)),
                proc(70, Some(5), Some(3)),
                proc(8, None, Some(4)),
            ]
            .into_iter()
            .map(|mut p| {
                p.used_bytes = p.used_bytes.map(|u| u + u64::from(gpu == "GPU-b") * 10);
                p
            })
            .collect::<Vec<_>>()
        };
        h.push(&sample(
            0.0,
            vec![
                gpu("GPU-a", None, rows("GPU-a")),
                gpu("GPU-b", None, rows("GPU-b")),
            ],
        ));
        for (key, ph) in h.processes() {
            let view = (key.gpu.as_str(), key.pid, key.start_time);
            let found = h
                .procs
                .get(&view as &dyn KeyView)
                .expect("found by its parts");
            assert!(std::ptr::eq(found, ph), "{key:?}");
        }
        let missing: [(&str, u32, Option<u64>); 3] = [
            ("GPU-a", 7, Some(300)),
            ("GPU-a", 9, None),
            ("GPU-c", 7, Some(100)),
        ];
        for missing in missing {
            assert!(
                !h.procs.contains_key(&missing as &dyn KeyView),
                "{missing:?}"
            );
        }
        let row = proc(7, Some(200), None);
        let (k, p) = h.process_for("GPU-b", &row).expect("by start time");
        assert_eq!(
            (k.gpu.as_str(), k.pid, p.peak_used()),
            ("GPU-b", 7, Some((12, 0.0)))
        );
    }

    #[test]
    fn process_points_pack_into_16_bytes_without_losing_what_nvml_reports() {
        assert_eq!(std::mem::size_of::<Packed>(), 16);
        let cases = [
            (Some(0), Some(0.0)),
            (Some(143_771 * MIB + 12_345), Some(37.0)),
            (None, Some(100.0)),
            (Some(GIB), None),
            (None, None),
            (Some(USED_UNKNOWN - 1), Some(99.5)),
        ];
        for (used, sm) in cases {
            let p = Packed::new(1.8e9 + 0.25, used, sm).unpack();
            assert_eq!((p.t, p.used, p.sm), (1.8e9 + 0.25, used, sm));
        }
        // Out of range: clamped, never taken for "unknown"; a NaN reading is unknown.
        let p = Packed::new(0.0, Some(u64::MAX), Some(f32::NAN)).unpack();
        assert_eq!((p.used, p.sm), (Some(USED_UNKNOWN - 1), None));
        assert_eq!(Packed::new(0.0, None, Some(-3.0)).unpack().sm, Some(0.0));
    }

    #[test]
    fn idle_since_is_the_start_of_the_current_run_of_zero_readings() {
        let mut h = History::new(Duration::from_secs(20));
        let readings = [Some(50.0), Some(0.0), Some(0.0), None, Some(0.0), Some(0.0)];
        let mut seen = Vec::new();
        for (t, sm) in readings.into_iter().enumerate() {
            h.push(&sample(
                t as f64,
                vec![gpu("GPU-a", None, vec![proc_sm(1, Some(GIB), sm)])],
            ));
            seen.push(h.process(&key(1, Some(5))).expect("proc").idle_since());
        }
        // Busy: none. Zeros from 1. Unknown at 3 proves nothing: the count restarts at 4.
        assert_eq!(
            seen,
            vec![None, Some(1.0), Some(1.0), None, Some(4.0), Some(4.0)]
        );
        // Kept beyond the window: 100 more seconds of zeros.
        for t in 6..106u32 {
            h.push(&sample(
                f64::from(t),
                vec![gpu("GPU-a", None, vec![proc_sm(1, Some(GIB), Some(0.0))])],
            ));
        }
        let p = h.process(&key(1, Some(5))).expect("proc");
        assert_eq!(p.idle_since(), Some(4.0));
        assert!(p.points().all(|pt| pt.t >= 85.0));
    }

    #[test]
    fn series_grow_by_a_quarter_not_by_doubling() {
        // 64 processes, 10 minutes at 1 Hz: 601 points each. Doubling would reserve 1024.
        let mut h = History::new(Duration::from_mins(10));
        for t in 0..=600u32 {
            let procs = (0..64).map(|pid| proc(pid, Some(5), Some(GIB))).collect();
            h.push(&sample(f64::from(t), vec![gpu("GPU-a", Some(GIB), procs)]));
        }
        let points = 64 * 601 * std::mem::size_of::<Packed>() + 601 * size_of::<GpuPoint>();
        let bytes = h.memory_bytes();
        assert!(
            bytes < points * 13 / 10,
            "{bytes} bytes for {points} bytes of points"
        );
    }

    #[test]
    fn growth_over_a_long_sparse_window_is_exact() {
        let mut h = History::new(Duration::from_mins(10));
        for t in 0..600u32 {
            // Known at one sample in seven only; the newest sample (599) is unknown.
            let used = (t % 7 == 3).then_some(u64::from(t) * MIB);
            h.push(&sample(
                f64::from(t),
                vec![gpu("GPU-a", None, vec![proc(1, Some(5), used)])],
            ));
        }
        let p = h.process(&key(1, Some(5))).expect("proc");
        let slope = p
            .growth_bytes_per_s(Duration::from_mins(10))
            .expect("slope");
        assert!(close(slope, MIB as f64, 1e-3), "{slope}");
        // Only the last 2 s: one known point, so warm-up.
        assert_eq!(p.growth_bytes_per_s(Duration::from_secs(2)), None);
        let slope = p
            .growth_bytes_per_s(Duration::from_secs(30))
            .expect("slope");
        assert!(close(slope, MIB as f64, 1e-3), "{slope}");
    }

    #[test]
    fn growth_needs_warm_up() {
        let mut h = History::new(Duration::from_mins(10));
        let over = Duration::from_secs(30);
        for t in 0..=9u32 {
            h.push(&sample(
                f64::from(t),
                vec![gpu("GPU-a", Some(u64::from(t) * GIB), vec![])],
            ));
        }
        // 9 s of data < 30 s / 3.
        assert_eq!(h.gpu("GPU-a").expect("gpu").growth_bytes_per_s(over), None);
        h.push(&sample(10.0, vec![gpu("GPU-a", Some(10 * GIB), vec![])]));
        let slope = h
            .gpu("GPU-a")
            .expect("gpu")
            .growth_bytes_per_s(over)
            .expect("warm");
        assert!(close(slope, GIB as f64, 1.0));
    }

    #[test]
    fn time_to_full_is_headroom_over_slope() {
        let mut h = History::new(Duration::from_mins(10));
        for t in 0..=20u32 {
            h.push(&sample(
                f64::from(t),
                vec![gpu("GPU-a", Some(u64::from(t) * GIB), vec![])],
            ));
        }
        let g = h.gpu("GPU-a").expect("gpu");
        let ttf = g.time_to_full(Duration::from_secs(20)).expect("ramp");
        // 80 GiB free at 1 GiB/s.
        assert!(close(ttf.as_secs_f64(), 80.0, 1e-6));

        let mut flat = History::new(Duration::from_mins(10));
        for t in 0..=20u32 {
            flat.push(&sample(f64::from(t), vec![gpu("GPU-a", Some(GIB), vec![])]));
        }
        assert_eq!(
            flat.gpu("GPU-a")
                .expect("gpu")
                .time_to_full(Duration::from_secs(20)),
            None
        );
    }

    fn least_squares(points: &[(f64, f64)]) -> f64 {
        let n = points.len() as f64;
        let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
        let my = points.iter().map(|p| p.1).sum::<f64>() / n;
        let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
        sxy / sxx
    }

    #[test]
    fn theil_sen_is_exact_on_a_line() {
        let line: Vec<(f64, f64)> = (0..100)
            .map(|i| (1.8e9 + f64::from(i) * 0.25, 3.0 * f64::from(i) + 7.0))
            .collect();
        let slope = slope_bytes_per_s(&line).expect("slope");
        assert!(close(slope, 12.0, 1e-4), "{slope}");
        assert_eq!(slope_bytes_per_s(&line[..1]), None);
        assert_eq!(slope_bytes_per_s(&[(1.0, 1.0), (1.0, 5.0)]), None);
    }

    #[test]
    fn theil_sen_ignores_a_one_time_spike() {
        let mut points: Vec<(f64, f64)> = (0..20)
            .map(|i| (f64::from(i), f64::from(i) * MIB as f64))
            .collect();
        points[15].1 += 100.0 * GIB as f64;
        let robust = slope_bytes_per_s(&points).expect("slope");
        let ls = least_squares(&points);
        assert!(close(robust, MIB as f64, 1.0), "{robust}");
        assert!(ls > 100.0 * MIB as f64, "least squares {ls}");
    }

    #[test]
    fn step_then_plateau_is_flat() {
        // 60 s window: a 5 GiB step at 10 s, then a plateau.
        let points: Vec<(f64, f64)> = (0..60)
            .map(|i| {
                (
                    f64::from(i),
                    if i < 10 { GIB as f64 } else { 6.0 * GIB as f64 },
                )
            })
            .collect();
        let slope = slope_bytes_per_s(&points).expect("slope");
        assert!(slope.abs() < 1.0, "{slope}");
        assert!(least_squares(&points) > 50.0 * MIB as f64);
    }

    #[test]
    fn noise_around_flat_is_small() {
        // Deterministic noise of ±64 MiB around 10 GiB.
        let mut seed = 12_345u64;
        let points: Vec<(f64, f64)> = (0..240)
            .map(|i| {
                seed = seed
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let noise = ((seed >> 33) % (128 * MIB)) as f64 - 64.0 * MIB as f64;
                (f64::from(i) * 0.25, 10.0 * GIB as f64 + noise)
            })
            .collect();
        let slope = slope_bytes_per_s(&points).expect("slope");
        assert!(slope.abs() < 5.0 * MIB as f64, "{slope}");
    }

    #[test]
    fn median_of_even_and_odd() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&mut []), None);
    }
}
