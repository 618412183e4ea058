//! The one growth estimate of a memory series — per GPU and per process — that the detector's
//! rules use and that front ends show ("growth" columns, `/metrics`): a robust rate, whether
//! the series *ramps*, and the time to full while it does (DESIGN §3).
//!
//! A ramp is many increments, a load a few large ones. Over the window (`[detect]
//! filling-window`, 15 s by default) the series is judged on increments over at least 1 s (so
//! 1 Hz and 4 Hz sampling see the same shape) and it ramps when all of these hold:
//! - it rises at least at the minimum rate, the newest third still rising (a staircase of
//!   three parts whose medians each rise — [`staircase`]);
//! - most increments rise, the rising ones spread over at least half of the window with no
//!   plateau longer than a fifth of it since the first, and the newest quarter still rises: a model load, ranks starting, a checkpoint reload or a JAX
//!   preallocation is a few steps between plateaus, then a plateau;
//! - the two largest increments carry at most 60 % of the rise (beyond the noise of the
//!   increments), unless three quarters of the increments rise and the rise without those two
//!   is a ramp by itself (a leak that an intruder's allocation lands on);
//! - the rise at its rate over the window is at least 3 × the points' scatter about that line
//!   (the median absolute deviation of the residuals): a flat holder's noise is not a ramp.
//!
//! A drop that frees at least 1 GiB and half of what the window rose *re-anchors* the
//! estimate: only points after it count, so a dead leaker's GPU stops predicting full at once.
//! The rate is the Theil–Sen slope of the anchored window, with an increment that alone
//! carries most of the rise taken out; when the series ramps steadily further back (its two
//! halves agree, and no step lies in it), a longer window (up to 8× or 2 min) refines it, so a
//! slow noisy leak does not get a noisy time to full and a load before a ramp does not bend it.

use std::time::Duration;

use super::{GpuHistory, ProcHistory, slope_bytes_per_s, slope_on_picked};
use crate::detect::Rules;

const MIB: f64 = 1024.0 * 1024.0;
const GIB: f64 = 1024.0 * MIB;

/// The smallest rise between parts or increment that counts for a GPU (16 MiB), so that
/// noise does not…
pub const GPU_NOISE: f64 = 16.0 * MIB;
/// …and for one process (4 MiB).
pub const PROC_NOISE: f64 = 4.0 * MIB;

/// A drop frees at least this much to re-anchor the estimate.
const DROP_MIN: f64 = GIB;

/// Increments are taken over at least this long.
const BUCKET_S: f64 = 1.0;

/// Points per slope when refining (half of [`super::SLOPE_MAX_POINTS`], a quarter of the
/// pairs): refining ran three slopes per longer window for every ramping process, most of the
/// dashboard's CPU with 400 processes ramping.
const REFINE_POINTS: usize = 16;

/// The longest window a steady ramp's rate is refined over.
const MAX_EXTENDED: Duration = Duration::from_mins(2);

/// How a memory series grows now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Growth {
    /// Robust rate, bytes per second (negative when shrinking).
    pub rate: f64,
    /// Whether the series ramps (see the module doc).
    pub ramping: bool,
    /// Seconds until the GPU is full at `rate`: only while ramping with a known headroom.
    pub time_to_full: Option<f64>,
    /// The oldest point the estimate used (after the last re-anchoring drop).
    pub since: f64,
    /// The newest point.
    pub at: f64,
    /// `Some` when the rate is a trend that goes on through partial frees ([`through_frees`]):
    /// how many bytes above the newest value the line of its peaks stands now. Such a GPU is
    /// full when a peak reaches capacity, so its time to full is measured from there.
    pub peaks_ahead: Option<f64>,
}

/// The growth of a GPU's used memory, by the rules' window and minimum rate. `None` without
/// two points with known memory in the window.
pub fn gpu_growth(h: &GpuHistory, rules: &Rules) -> Option<Growth> {
    let at = h.latest()?.t;
    let headroom = h
        .points()
        .rev()
        .find_map(super::GpuPoint::headroom)
        .map(|b| b as f64);
    let points_from = |from| window_points(h.used_series().map(|(t, u)| (t, u as f64)), from);
    let test = gpu_test(rules);
    let growth = lazy_growth(points_from, at, headroom, &test, None)?;
    let extended = points_from(at - extended(test.window).as_secs_f64());
    Some(match through_frees(&extended, test.noise) {
        Some((rate, ahead)) if rate >= test.min_rate / 2.0 => Growth {
            rate,
            time_to_full: headroom.map(|h| (h - ahead).max(0.0) / rate),
            peaks_ahead: Some(ahead),
            ..growth
        },
        _ => growth,
    })
}

/// A trend that goes on through partial frees, as an allocator that hands part of what it took
/// back now and then (`torch.cuda.empty_cache()` in a training loop): at least two drops that
/// re-anchor the window, each leaving memory higher than the drop before it left it (a leaker
/// that dies leaves it lower: no trend), with the peaks before them rising. The window's own
/// rate after each drop is one tooth's, steeper than the trend. Returns the Theil–Sen rate of
/// the peaks and how far the line of the peaks stands above the newest value now.
fn through_frees(points: &[(f64, f64)], noise: f64) -> Option<(f64, f64)> {
    let (&first, &(at, latest)) = (points.first()?, points.last()?);
    let mut peaks: Vec<(f64, f64)> = Vec::new();
    let mut troughs: Vec<f64> = Vec::new();
    let (mut low, mut high, mut peak) = (first.1, first.1, first);
    for w in points.windows(2) {
        let (prev, (t, v)) = (w[0].1, w[1]);
        // The drop that re-anchors the window ([`reanchor`]'s rule).
        if prev - v >= DROP_MIN.max(0.5 * (high - low)) {
            peaks.push(peak);
            troughs.push(v);
            (low, high, peak) = (v, v, (t, v));
        } else {
            (low, high) = (low.min(v), high.max(v));
            if v > peak.1 {
                peak = (t, v);
            }
        }
    }
    let rising = |v: &[f64]| v.windows(2).all(|w| w[1] - w[0] > noise);
    let peak_values: Vec<f64> = peaks.iter().map(|p| p.1).collect();
    if peaks.len() < 2
        || !rising(&troughs)
        || !rising(&peak_values)
        || troughs.last().is_some_and(|&t| latest < t)
    {
        return None;
    }
    let rate = slope_bytes_per_s(&peaks)?;
    // The line of the peaks now: the median of each peak carried forward at the rate.
    let mut now: Vec<f64> = peaks.iter().map(|&(t, v)| v + rate * (at - t)).collect();
    now.sort_by(f64::total_cmp);
    let level = now[now.len() / 2];
    Some((rate, (level - latest).max(0.0)))
}

/// The growth of one process's GPU memory (no time to full: a process has no headroom of its
/// own; [`Growth::with_headroom`] gives the GPU's). A process ramps from a quarter of the
/// GPU's minimum rate: it may be one of several driving the GPU.
///
/// The rate refined over a longer window is kept with the history and reused while it is less
/// than [`REFINE_EVERY`] old (by sample time): a longer window's rate moves little in a few
/// seconds, and refining every ramping process on every frame was most of the detector's cost
/// (the GPU's own growth, whose time to full the rules judge, is refined on every call).
pub fn process_growth(ph: &ProcHistory, rules: &Rules) -> Option<Growth> {
    let at = ph.latest()?.t;
    lazy_growth(
        |from| window_points(ph.used_series().map(|(t, u)| (t, u as f64)), from),
        at,
        None,
        &process_test(rules),
        Some(ph.refined()),
    )
}

/// How long a process's refined rate is reused (sample time).
pub const REFINE_EVERY: f64 = 5.0;

/// A refined rate and the time of the newest point it was computed at.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Refined {
    pub(crate) at: f64,
    pub(crate) rate: f64,
}

/// [`series_growth`] on the window's points, and on the [`extended`] window's only when the
/// rate is worth refining (reading 2 minutes of every process each frame is most of the cost).
/// With `memo`, a refined rate less than [`REFINE_EVERY`] old is reused (and a new one kept).
fn lazy_growth(
    points_from: impl Fn(f64) -> Vec<(f64, f64)>,
    at: f64,
    headroom: Option<f64>,
    test: &RampTest,
    memo: Option<&std::cell::Cell<Option<Refined>>>,
) -> Option<Growth> {
    let window = test.window.as_secs_f64();
    let recent = points_from(at - window);
    let short = series_growth(&recent, headroom, test)?;
    let anchored = recent.first().is_some_and(|p| p.0 >= short.since);
    if anchored && short.rate >= test.min_rate / 2.0 {
        // What `series_growth` on the extended points would give: the same window (so the
        // same anchor, shape and ramp), refined over the longer one. Judging the window a
        // second time was a third of the detector's cost with every process ramping.
        let kept = memo
            .and_then(std::cell::Cell::get)
            .filter(|m| (0.0..REFINE_EVERY).contains(&(at - m.at)));
        let rate = kept.map_or_else(
            || {
                let longer = refine(
                    &points_from(at - extended(test.window).as_secs_f64()),
                    window,
                );
                // Only a rate a longer window gave is kept: the window's own moves each frame.
                if let Some(memo) = memo {
                    memo.set(longer.map(|rate| Refined { at, rate }));
                }
                longer.unwrap_or(short.rate)
            },
            |m| m.rate,
        );
        Some(Growth {
            rate,
            time_to_full: ttf(short.ramping, rate, headroom),
            ..short
        })
    } else {
        // A drop re-anchored the window, or the rate fell: what was refined before is over.
        if let Some(memo) = memo {
            memo.set(None);
        }
        Some(short)
    }
}

/// What a growth is judged by: the window, the minimum rate and the smallest increment that
/// counts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RampTest {
    pub window: Duration,
    pub min_rate: f64,
    pub noise: f64,
}

/// A GPU's ramp test by the rules.
pub fn gpu_test(rules: &Rules) -> RampTest {
    RampTest {
        window: rules.filling_window,
        min_rate: rules.filling_min_rate,
        noise: GPU_NOISE,
    }
}

/// A process's (or a group of processes', or unattributed memory's) ramp test by the rules.
pub fn process_test(rules: &Rules) -> RampTest {
    RampTest {
        window: rules.filling_window,
        min_rate: rules.filling_min_rate / 4.0,
        noise: PROC_NOISE,
    }
}

/// How far back before the latest point [`series_growth`] reads (the refining windows).
pub fn extended(window: Duration) -> Duration {
    (window * 8).min(MAX_EXTENDED.max(window))
}

impl Growth {
    /// The same growth with a time to full against `headroom` bytes (while ramping).
    #[must_use]
    pub fn with_headroom(mut self, headroom: Option<u64>) -> Self {
        self.time_to_full = ttf(self.ramping, self.rate, headroom.map(|b| b as f64));
        self
    }
}

fn ttf(ramping: bool, rate: f64, headroom: Option<f64>) -> Option<f64> {
    (ramping && rate > 0.0)
        .then(|| headroom.map(|h| h.max(0.0) / rate))
        .flatten()
}

/// Points of a series from `from` on, oldest first (read from the newest end).
pub fn window_points(
    points: impl DoubleEndedIterator<Item = (f64, f64)>,
    from: f64,
) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = points
        .rev()
        .take_while(|(t, _)| *t >= from)
        .filter(|(t, v)| t.is_finite() && v.is_finite())
        .collect();
    v.reverse();
    v
}

/// The growth of `(t, bytes)` points (oldest first, spanning up to the [`extended`] window)
/// by `test`. See the module doc.
pub fn series_growth(
    points: &[(f64, f64)],
    headroom: Option<f64>,
    test: &RampTest,
) -> Option<Growth> {
    let at = points.last()?.0;
    let window = test.window.as_secs_f64();
    let start = points.partition_point(|p| p.0 < at - window);
    let recent = &points[start..];
    let anchor = reanchor(recent);
    let anchored = &recent[anchor..];
    let since = anchored.first()?.0;
    // Flat within the noise (most processes, most of the time): no slope to compute.
    let (low, high) = anchored
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), p| {
            (l.min(p.1), h.max(p.1))
        });
    if high - low <= test.noise {
        return Some(Growth {
            rate: 0.0,
            ramping: false,
            time_to_full: None,
            since,
            at,
            peaks_ahead: None,
        });
    }
    // One point after a drop: no rate yet (and no ramp).
    let rate = rate_of(anchored).unwrap_or(0.0);
    let ramping = anchored.len() >= 3
        && at - since >= window * 0.5
        && rate >= test.min_rate
        && ramps(anchored, test.min_rate, test.noise)
        && above_scatter(anchored, rate);
    // A steady ramp further back than the window, with no re-anchoring drop: refine the rate
    // (only for a rate that matters: most series are flat, and this is per GPU and process).
    let rate = if anchor == 0 && rate >= test.min_rate / 2.0 {
        refine(points, window).unwrap_or(rate)
    } else {
        rate
    };
    Some(Growth {
        rate,
        ramping,
        time_to_full: ttf(ramping, rate, headroom),
        since,
        at,
        peaks_ahead: None,
    })
}

/// The index after the last drop that frees at least [`DROP_MIN`] and half of what the points
/// before it (since the previous anchor) rose above their lowest.
fn reanchor(points: &[(f64, f64)]) -> usize {
    let mut anchor = 0;
    let Some(&(_, first)) = points.first() else {
        return 0;
    };
    let (mut low, mut high) = (first, first);
    for i in 1..points.len() {
        let (prev, v) = (points[i - 1].1, points[i].1);
        if prev - v >= DROP_MIN.max(0.5 * (high - low)) {
            anchor = i;
            (low, high) = (v, v);
        } else {
            low = low.min(v);
            high = high.max(v);
        }
    }
    anchor
}

/// Theil–Sen slope, with the one increment that carries most of the rise (a step) taken out.
fn rate_of(points: &[(f64, f64)]) -> Option<f64> {
    slope_bytes_per_s(&destep(points))
}

/// `points` with one level shift taken out, the points after it moved back by it, less one
/// typical increment (the ramp went on while it happened):
/// - a step: the one increment of at least 1 GiB that carries more than half of the rise (an
///   intruder's allocation on top of a ramp; noise on a slow ramp is not one);
/// - else a free too small to re-anchor the window: the one fall of more than [`FREE_TIMES`]
///   × the largest rise between points (a small process that leaves while the GPU fills),
///   which would bend every slope that spans it.
fn destep(points: &[(f64, f64)]) -> std::borrow::Cow<'_, [(f64, f64)]> {
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return points.into();
    };
    if points.len() < 4 {
        return points.into();
    }
    let rise = last.1 - first.1;
    let incs = || {
        points
            .windows(2)
            .enumerate()
            .map(|(i, w)| (i + 1, w[1].1 - w[0].1))
    };
    let (Some(top), Some(bottom)) = (
        incs().max_by(|a, b| a.1.total_cmp(&b.1)),
        incs().min_by(|a, b| a.1.total_cmp(&b.1)),
    ) else {
        return points.into();
    };
    let (i, shift) = if top.1 >= DROP_MIN && top.1 > 0.5 * rise {
        top
    } else if is_free(top.1, bottom.1) {
        bottom
    } else {
        return points.into();
    };
    let typical = (rise - shift) / (points.len() - 2) as f64;
    points
        .iter()
        .enumerate()
        .map(|(j, &(t, v))| (t, if j >= i { v - shift + typical } else { v }))
        .collect::<Vec<_>>()
        .into()
}

/// How many times the largest rise between points a fall must be for [`destep`] to take it
/// out: noise falls as much as it rises, an allocator's free or a process that leaves does not.
const FREE_TIMES: f64 = 4.0;

/// Whether the largest fall between points, `bottom`, is a free beside the largest rise, `top`.
fn is_free(top: f64, bottom: f64) -> bool {
    top > 0.0 && -bottom > FREE_TIMES * top
}

/// Whether `points` hold a free ([`is_free`]): the rate before it is not the rate after.
fn has_free(points: &[(f64, f64)]) -> bool {
    let (top, bottom) = points
        .windows(2)
        .map(|w| w[1].1 - w[0].1)
        .fold((f64::NEG_INFINITY, f64::INFINITY), |(t, b), d| {
            (t.max(d), b.min(d))
        });
    points.len() >= 4 && is_free(top, bottom)
}

/// Increments of `points` over at least [`BUCKET_S`]: the last value of each bucket minus the
/// last of the one before (the first: minus the first point).
fn increments(points: &[(f64, f64)]) -> Vec<f64> {
    let Some(&(t0, v0)) = points.first() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut prev = v0;
    let mut bucket = 0u64;
    let mut last_in_bucket: Option<f64> = None;
    for &(t, v) in &points[1..] {
        let b = ((t - t0) / BUCKET_S).floor().max(0.0) as u64;
        if b != bucket {
            if let Some(l) = last_in_bucket.take() {
                out.push(l - prev);
                prev = l;
            }
            bucket = b;
        }
        last_in_bucket = Some(v);
    }
    if let Some(l) = last_in_bucket {
        out.push(l - prev);
    }
    out
}

/// The ramp test of the module doc, on anchored points.
fn ramps(points: &[(f64, f64)], min_rate: f64, noise: f64) -> bool {
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return false;
    };
    let rise = last.1 - first.1;
    let span = last.0 - first.0;
    if rise <= 0.0 || span <= 0.0 {
        return false;
    }
    let inc = increments(points);
    let n = inc.len();
    if n < 2 {
        return false;
    }
    let destepped = destep(points);
    // Most increments rise, spread over at least half of the window, and the newest quarter
    // still rises: a load is a few steps between plateaus, then a plateau. An increment rises
    // when it is above the noise and at least half an even share of the rise (an intruder's
    // step taken out): a 300 MiB context created before a 20 GiB load is not part of a ramp.
    let even = destepped.last().map_or(rise, |l| l.1 - destepped[0].1);
    let floor = noise.max(even / (2 * n) as f64);
    let rises = |d: &f64| *d > floor;
    let rising = inc.iter().filter(|d| rises(d)).count();
    let first_rise = inc.iter().position(rises).unwrap_or(n);
    let last_rise = inc.iter().rposition(rises).unwrap_or(0);
    // Since the first rise, no plateau longer than a fifth of the window (at least 2
    // increments): loads one after another are steps between plateaus.
    let longest_gap = inc[first_rise.min(n)..]
        .split(|d| rises(d))
        .map(<[f64]>::len)
        .max()
        .unwrap_or(0);
    if rising * 2 < n
        || (last_rise + 1).saturating_sub(first_rise) * 2 < n
        || !inc[n - (n / 4).max(1)..].iter().any(rises)
        || longest_gap > (n / 5).max(2)
        || !staircase(&destepped, 3, noise)
    {
        return false;
    }
    // The two largest increments, in one pass.
    let (mut a, mut b) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    for &d in &inc {
        if d > a {
            (a, b) = (d, a);
        } else if d > b {
            b = d;
        }
    }
    let top2 = a.max(0.0) + b.max(0.0);
    if top2 <= 0.6 * rise {
        return true;
    }
    // The spread of the increments (twice their median absolute deviation): noise on a slow
    // ramp makes its largest increments large without being steps.
    let mut mid = inc.clone();
    let med = median(&mut mid);
    let mut dev: Vec<f64> = inc.iter().map(|d| (d - med).abs()).collect();
    let spread = 2.0 * median(&mut dev);
    if top2 - 2.0 * spread <= 0.6 * rise {
        return true;
    }
    rising * 4 >= n * 3 && (rise - top2) >= min_rate * span
}

/// How many times the points' scatter about the line the rise over the window must be: a flat
/// series with a few MiB of noise is not a slow ramp however its increments fall.
const SCATTER_TIMES: f64 = 3.0;

/// Whether the rise at `rate` over the points' span stands out of their scatter about that
/// line ([`SCATTER_TIMES`] × the median absolute deviation of the residuals, a step taken out
/// first as for the rate).
fn above_scatter(points: &[(f64, f64)], rate: f64) -> bool {
    let points = destep(points);
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return false;
    };
    let mut residuals: Vec<f64> = points
        .iter()
        .map(|&(t, v)| v - rate * (t - first.0))
        .collect();
    let mid = residuals.len() / 2;
    let centre = *residuals.select_nth_unstable_by(mid, f64::total_cmp).1;
    for r in &mut residuals {
        *r = (*r - centre).abs();
    }
    let scatter = *residuals.select_nth_unstable_by(mid, f64::total_cmp).1;
    rate * (last.0 - first.0) >= SCATTER_TIMES * scatter
}

/// Whether `points` hold a step: an increment (over at least 1 s) of at least 1 GiB and over
/// 4× their median increment — a load, a checkpoint reload or an intruder's allocation, not
/// a part of the ramp. A longer window with one in it would carry the step into the rate.
fn has_step(points: &[(f64, f64)]) -> bool {
    let mut inc = increments(points);
    let Some(top) = inc.iter().copied().max_by(f64::total_cmp) else {
        return false;
    };
    if top < DROP_MIN {
        return false;
    }
    let mid = inc.len() / 2;
    let (_, med, _) = inc.select_nth_unstable_by(mid, f64::total_cmp);
    top > 4.0 * med.max(0.0)
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The rate over the longest window (2×, 4×, 8× the filling window, within the points) whose
/// two halves ramp at rates within 50 % of each other: loose enough for noise on a slow ramp
/// (whose short-window rate is noisy: it is not compared), tight enough to refuse a plateau or
/// a load before a fast ramp. `None` when none does.
fn refine(points: &[(f64, f64)], window: f64) -> Option<f64> {
    let &(at, _) = points.last()?;
    let mut best = None;
    // The newer half of each span is the span before it (k doubles): its slope is known.
    let mut newer: Option<f64> = None;
    for k in [2.0, 4.0, 8.0] {
        let from = at - window * k;
        if points.first().is_none_or(|p| p.0 > from + window * 0.5) {
            break;
        }
        let start = points.partition_point(|p| p.0 < from);
        let span = &points[start..];
        if reanchor(span) != 0 {
            break;
        }
        let mid = span.partition_point(|p| p.0 < at - window * k / 2.0);
        let close = |x: f64, y: f64| (x - y).abs() <= 0.5 * x.abs().max(y.abs());
        // The halves first: the whole span's slope only when they agree.
        let (Some(a), Some(b)) = (
            slope_on_picked(&span[..mid], REFINE_POINTS),
            newer.or_else(|| slope_on_picked(&span[mid..], REFINE_POINTS)),
        ) else {
            break;
        };
        if !(a > 0.0 && b > 0.0 && close(a, b)) || has_step(span) || has_free(span) {
            break;
        }
        match slope_on_picked(span, REFINE_POINTS) {
            Some(all) if close(all, a.max(b)) => {
                best = Some(all);
                newer = Some(all);
            }
            _ => break,
        }
    }
    best
}

/// Whether the window `[first, last]` of `points` is cut into `parts` whose medians each rise
/// by more than `min_step` and by at least half of an even share of the whole rise. Medians are
/// taken over at most 9 evenly picked points per part.
pub fn staircase(points: &[(f64, f64)], parts: usize, min_step: f64) -> bool {
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return false;
    };
    let span = last.0 - first.0;
    if parts < 2 || span <= 0.0 {
        return false;
    }
    let mut medians = Vec::with_capacity(parts);
    let mut start = 0;
    for k in 0..parts {
        let end_t = first.0 + span * (k + 1) as f64 / parts as f64;
        let mut end = start;
        while end < points.len() && (points[end].0 <= end_t || k + 1 == parts) {
            end += 1;
        }
        let part = &points[start..end];
        if part.is_empty() {
            return false;
        }
        let n = part.len().min(9);
        let mut picked: Vec<f64> = (0..n)
            .map(|i| {
                part[if n == 1 {
                    0
                } else {
                    i * (part.len() - 1) / (n - 1)
                }]
                .1
            })
            .collect();
        picked.sort_by(f64::total_cmp);
        medians.push(picked[n / 2]);
        start = end;
    }
    // Every part rises, and by at least half an even share of the whole rise: a step with a
    // small bump beside it (a context created, then the allocation) is still one step.
    let total = medians[parts - 1] - medians[0];
    let share = total / (2 * (parts - 1)) as f64;
    total > 0.0
        && medians
            .windows(2)
            .all(|w| w[1] - w[0] > min_step.max(share))
}

/// Whether `points` (e.g. a leak window's picked points) pass the ramp test with increments
/// over at least 1 s: many increments rather than a few steps.
pub fn ramp_shape(points: &[(f64, f64)], min_rate: f64, noise: f64) -> bool {
    ramps(points, min_rate, noise)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> RampTest {
        gpu_test(&Rules::default())
    }

    fn at(hz: f64, secs: f64, f: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
        let n = (secs * hz) as usize;
        (0..=n)
            .map(|i| {
                let t = i as f64 / hz;
                (t, f(t))
            })
            .collect()
    }

    #[test]
    fn a_steady_ramp_ramps_at_1_and_4_hz_with_its_rate() {
        for hz in [1.0, 4.0] {
            let pts = at(hz, 30.0, |t| 10.0 * GIB + t * 0.5 * GIB);
            let g = series_growth(&pts, Some(50.0 * GIB), &rules()).expect("growth");
            assert!(g.ramping, "{hz} Hz");
            assert!(
                (g.rate - 0.5 * GIB).abs() < 0.01 * GIB,
                "{hz} Hz: {}",
                g.rate
            );
            assert!((g.time_to_full.expect("ttf") - 100.0).abs() < 1.0);
        }
    }

    #[test]
    fn a_load_before_a_ramp_does_not_steepen_its_rate() {
        // A 5.5 GiB load at 13.7 s, a plateau, then 1 GiB/s from 20 s: from 15 s into the
        // ramp its rate is the ramp's, not the load's carried into a longer window.
        let series = |t: f64| {
            GIB * if t < 13.7 {
                0.5
            } else if t < 20.0 {
                6.0
            } else {
                6.0 + (t - 20.0)
            }
        };
        for hz in [1.0, 4.0] {
            let pts = at(hz, 60.0, series);
            for end in (35.0 * hz) as usize..pts.len() {
                let t = pts[end - 1].0;
                let g = series_growth(&pts[..end], Some((79.0 - 17.0) * GIB), &rules())
                    .expect("growth");
                assert!(
                    (g.rate - GIB).abs() < 0.05 * GIB,
                    "{hz} Hz at t = {t}: {} GiB/s",
                    g.rate / GIB
                );
            }
        }
        // Without the load (the same ramp, no step), the longer window still refines it.
        let steady = at(1.0, 60.0, |t| 6.0 * GIB + t * GIB);
        assert!(!has_step(&steady));
        assert!(has_step(&at(1.0, 40.0, series)));
    }

    /// A sawtooth: 4 GiB over 16 s from `start`, 2 GiB freed at the end of each 20 s tooth.
    fn sawtooth(t: f64, start: f64) -> f64 {
        if t < start {
            return 20.0 * GIB;
        }
        let k = ((t - start) / 20.0).floor();
        let into = (t - start) - k * 20.0;
        20.0 * GIB + k * 2.0 * GIB + 4.0 * GIB * (into.min(16.0) / 16.0)
    }

    #[test]
    fn a_trend_through_partial_frees_is_the_line_of_its_peaks() {
        for hz in [1.0, 4.0] {
            let pts = at(hz, 200.0, |t| sawtooth(t, 20.0));
            // Two frees seen (at 36 and 56): the peaks rise 2 GiB per 20 s.
            let end = pts.partition_point(|p| p.0 <= 60.0);
            let (rate, ahead) = through_frees(&pts[..end], GPU_NOISE).expect("a trend");
            assert!(
                (rate - 0.1 * GIB).abs() < 1e-6 * GIB,
                "{hz} Hz: {}",
                rate / GIB
            );
            // At 60 s the line of the peaks stands at 26 GiB + 0.4 GiB; the tooth is at 24.
            assert!(
                (ahead - 2.4 * GIB).abs() < 0.01 * GIB,
                "{hz} Hz: {} GiB",
                ahead / GIB
            );
            // One free seen: no trend yet (a tooth and a free are not a line).
            let end = pts.partition_point(|p| p.0 <= 50.0);
            assert_eq!(through_frees(&pts[..end], GPU_NOISE), None, "{hz} Hz");
        }
    }

    #[test]
    fn a_free_too_small_to_reanchor_does_not_bend_the_rate() {
        // 120 MiB/s, and a 1000 MiB process leaves at 50 s (less than the 1 GiB that
        // re-anchors); the GPU then fills at 100 MiB/s. Every slope across the fall was bent:
        // the rate fell to a third and the finding resolved for 7 s.
        let mib = |t: f64| {
            MIB * if t < 50.0 {
                4000.0 + 120.0 * t
            } else {
                3000.0 + 20.0 * 50.0 + 100.0 * t
            }
        };
        for hz in [1.0, 4.0] {
            let pts = at(hz, 60.0, mib);
            for end in (52.0 * hz) as usize..pts.len() {
                let g = series_growth(&pts[..end], Some(60.0 * GIB), &rules()).expect("growth");
                let t = pts[end - 1].0;
                assert!(g.ramping, "{hz} Hz at {t}");
                assert!(
                    (95.0..=125.0).contains(&(g.rate / MIB)),
                    "{hz} Hz at {t}: {} MiB/s",
                    g.rate / MIB
                );
            }
        }
    }

    #[test]
    fn frees_that_do_not_leave_more_each_time_are_no_trend() {
        for hz in [1.0, 4.0] {
            // The sawtooth, then the leaker dies at 150 s: the last free leaves less.
            let died = at(hz, 170.0, |t| {
                if t < 150.0 {
                    sawtooth(t, 20.0)
                } else {
                    20.0 * GIB
                }
            });
            assert_eq!(through_frees(&died, GPU_NOISE), None, "{hz} Hz");
            // Eval buffers: 6 GiB taken for 5 s every 20 s, all freed; the peaks stay level.
            let eval = at(hz, 120.0, |t| {
                GIB * if (t % 20.0) < 5.0 { 26.0 } else { 20.0 }
            });
            assert_eq!(through_frees(&eval, GPU_NOISE), None, "{hz} Hz");
        }
    }

    #[test]
    fn a_flat_process_with_noise_never_ramps() {
        // 50 GiB held flat with 16 MiB of noise, new each second (as NVML reports a holder
        // that allocates and frees scratch buffers), at 4 Hz for 5 minutes: however its
        // increments happen to fall, it rises out of its scatter in no window.
        let jitter = |t: f64| {
            let mut z = (t.floor() as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (z as f64 / u64::MAX as f64) * 2.0 - 1.0
        };
        let pts = at(4.0, 300.0, |t| 50.0 * GIB + 16.0 * MIB * jitter(t));
        let test = process_test(&Rules::default());
        let window = (test.window.as_secs_f64() * 4.0) as usize;
        for end in window..pts.len() {
            let g = series_growth(&pts[end - window..end], None, &test).expect("growth");
            assert!(!g.ramping, "at t = {}: {g:?}", pts[end - 1].0);
        }
    }

    #[test]
    fn a_load_in_steps_then_a_plateau_never_ramps() {
        // leak-to-oom's first 20 s: steps of 6.5, 2, 1.2, 6.6 GiB.
        let load = |t: f64| {
            GIB * [
                (4.5, 6.5),
                (9.0, 0.8),
                (9.25, 1.2),
                (14.0, 1.2),
                (14.25, 7.6),
            ]
            .iter()
            .filter(|(s, _)| t >= *s)
            .map(|(_, v)| v)
            .sum::<f64>()
        };
        for hz in [1.0, 4.0] {
            let pts = at(hz, 40.0, load);
            for end in 2..pts.len() {
                let g = series_growth(&pts[..end], Some(100.0 * GIB), &rules()).expect("growth");
                assert!(!g.ramping, "{hz} Hz at t = {}", pts[end - 1].0);
                assert_eq!(g.time_to_full, None);
            }
        }
    }

    #[test]
    fn a_leak_in_coarse_steps_still_ramps() {
        // 0.4 GiB every 2 s, at 1 Hz and 4 Hz.
        for hz in [1.0, 4.0] {
            let pts = at(hz, 30.0, |t| GIB + (t / 2.0).floor() * 0.4 * GIB);
            let g = series_growth(&pts, Some(50.0 * GIB), &rules()).expect("growth");
            assert!(g.ramping, "{hz} Hz");
            assert!(
                (g.rate - 0.2 * GIB).abs() < 0.05 * GIB,
                "{hz} Hz: {}",
                g.rate
            );
        }
    }

    #[test]
    fn a_drop_re_anchors_at_once() {
        for hz in [1.0, 4.0] {
            let mut pts = at(hz, 30.0, |t| GIB + t * GIB);
            let last = pts.last().expect("points").0;
            pts.push((last + 1.0 / hz, 2.0 * GIB));
            let g = series_growth(&pts, Some(100.0 * GIB), &rules()).expect("growth");
            assert!(!g.ramping, "{hz} Hz");
            assert_eq!(g.time_to_full, None);
        }
    }

    #[test]
    fn a_ramp_an_intruder_lands_on_still_ramps_at_its_own_rate() {
        for hz in [1.0, 4.0] {
            let pts = at(hz, 30.0, |t| {
                GIB + t * GIB + if t >= 22.0 { 40.0 * GIB } else { 0.0 }
            });
            let g = series_growth(&pts, Some(100.0 * GIB), &rules()).expect("growth");
            assert!(g.ramping, "{hz} Hz");
            assert!(
                (g.rate - GIB).abs() < 0.15 * GIB,
                "{hz} Hz: {}",
                g.rate / GIB
            );
        }
    }

    #[test]
    fn a_flat_series_has_no_growth() {
        let pts = at(1.0, 30.0, |t| 5.0 * GIB + if t > 10.0 { MIB } else { 0.0 });
        let g = series_growth(&pts, Some(GIB), &rules()).expect("growth");
        assert_eq!((g.rate, g.ramping, g.time_to_full), (0.0, false, None));
    }

    #[test]
    fn a_slow_noisy_ramp_gets_a_steady_rate_from_a_longer_window() {
        // The demo's GPU 1: 2.6 GiB/min with ±200 MiB of noise, at 1 Hz over 2 min.
        let mut x: u64 = 12345;
        let mut noise = || {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            ((x >> 33) as f64 / f64::from(1u32 << 31) - 0.5) * 400.0 * MIB
        };
        let rate = 2.6 * GIB / 60.0;
        let pts: Vec<(f64, f64)> = (0..=120)
            .map(|i| (f64::from(i), 80.0 * GIB + f64::from(i) * rate + noise()))
            .collect();
        let g = series_growth(&pts, Some(50.0 * GIB), &rules()).expect("growth");
        assert!((g.rate - rate).abs() < 0.1 * rate, "{} vs {rate}", g.rate);
    }
}
