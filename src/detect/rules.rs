//! The rules: pure functions of the history, the latest sample, the thresholds and the
//! findings already open (for hysteresis and baselines). Each rule is its own small function
//! with its check and its message.
//!
//! Growth is judged by the one growth estimate of `history::growth` (a robust rate, a ramp
//! test that tells many increments from a few steps, re-anchored after a drop), so a model
//! load, a one-time step (allocator cache, a larger batch), a periodic eval buffer and noise
//! do not count as a ramp, while a leak that grows in steps of one training step does.

// Rules read best with the conventional short names: r(ules), g(pu), h(istory), p(rocess).
#![allow(clippy::many_single_char_names)]

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::{Culprit, Finding, FindingId, RuleKind, Rules, Severity};
use crate::history::growth::{
    self, PROC_NOISE, process_test, ramp_shape, series_growth, staircase,
};
use crate::history::{
    GpuHistory, History, ProcHistory, gpu_growth, process_growth, slope_bytes_per_s,
};
use crate::model::{GpuSample, ProcSample, Sample};
use crate::output::{fmt_bytes, fmt_eta, fmt_growth};

/// Everything a rule may look at.
pub struct Input<'a> {
    pub history: &'a History,
    /// The latest sample (already pushed into `history`).
    pub sample: &'a Sample,
    /// Unix seconds now (staleness); the sample's time when judging recordings.
    pub now: f64,
    /// Samples older than this are stale; `None`: not judged.
    pub stale_after: Option<Duration>,
    /// Whether a process belongs to the watched set ("mine").
    pub watched: &'a dyn Fn(&ProcSample) -> bool,
    /// Findings open before this evaluation.
    pub open: &'a HashMap<FindingId, Finding>,
}

/// Evaluates every rule.
pub fn evaluate(input: &Input<'_>, rules: &Rules) -> Vec<Finding> {
    let mut out = Vec::new();
    source_health(input, &mut out);
    for g in &input.sample.gpus {
        if g.lost {
            continue;
        }
        let Some(h) = input.history.gpu(&g.uuid) else {
            continue;
        };
        out.extend(near_capacity(input, rules, g, h));
        out.extend(filling_up(input, rules, g, h));
        out.extend(external_pressure(input, rules, g, h));
        // The PIDs with an open leak finding on this GPU, looked up once rather than by a
        // `FindingId` built and hashed for every process of every frame.
        let open_leaks: HashSet<u32> = input
            .open
            .keys()
            .filter(|k| k.rule == RuleKind::LeakSuspected && k.gpu == g.uuid)
            .filter_map(|k| k.pid)
            .collect();
        for p in &g.processes {
            out.extend(exited_holder(input, rules, g, p));
            let Some((_, ph)) = input.history.process_for(&g.uuid, p) else {
                continue;
            };
            let open = open_leaks.contains(&p.pid);
            if open || leak_due(ph) {
                out.extend(leak_suspected(input, rules, g, p, ph, open));
            }
            out.extend(idle_holder(input, rules, g, p, ph));
        }
    }
    out
}

fn id(rule: RuleKind, gpu: &GpuSample, pid: Option<u32>) -> FindingId {
    FindingId {
        rule,
        gpu: gpu.uuid.clone(),
        pid,
    }
}

fn base(
    input: &Input<'_>,
    id: FindingId,
    severity: Severity,
    gpu: Option<u32>,
    summary: String,
) -> Finding {
    let since = input
        .open
        .get(&id)
        .map_or(input.sample.taken_at, |f| f.since);
    Finding {
        id,
        severity,
        gpu_index: gpu,
        since,
        at: input.sample.taken_at,
        summary,
        time_to_full_s: None,
        rate_bytes_per_s: None,
        bytes: None,
        baseline_bytes: None,
        unattributed_bytes: None,
        culprits: Vec::new(),
        culprits_at: None,
    }
}

fn culprit(p: &ProcSample, growth: Option<f64>) -> Culprit {
    Culprit {
        pid: p.pid,
        user: p.host.user.clone(),
        command: p.host.command.clone().or_else(|| p.host.name.clone()),
        used_bytes: p.used_bytes,
        growth_bytes_per_s: growth,
    }
}

fn who(c: &Culprit) -> String {
    let name = c
        .command
        .as_deref()
        .and_then(|s| s.split_whitespace().next())
        .map(|s| s.rsplit('/').next().unwrap_or(s).to_string());
    match (&c.user, name) {
        (Some(u), Some(n)) => format!("pid {} ({u}: {n})", c.pid),
        (None, Some(n)) => format!("pid {} ({n})", c.pid),
        (Some(u), None) => format!("pid {} ({u})", c.pid),
        (None, None) => format!("pid {}", c.pid),
    }
}

/// Points of a series from `from` on.
fn since(points: impl DoubleEndedIterator<Item = (f64, f64)>, from: f64) -> Vec<(f64, f64)> {
    growth::window_points(points, from)
}

fn source_health(input: &Input<'_>, out: &mut Vec<Finding>) {
    let sample = input.sample;
    let source_id = |detail: &str| FindingId {
        rule: RuleKind::SourceHealth,
        gpu: detail.to_string(),
        pid: None,
    };
    if let Some(limit) = input.stale_after {
        let age = input.now - sample.taken_at;
        if age > limit.as_secs_f64() {
            let mut f = base(
                input,
                source_id(""),
                Severity::Critical,
                None,
                format!("samples are stale: the last one is {} old", fmt_eta(age)),
            );
            f.at = input.now;
            out.push(f);
        }
    }
    if !sample.errors.is_empty() {
        let text: Vec<String> = sample
            .errors
            .iter()
            .map(|e| format!("{}: {}", e.call, e.error))
            .collect();
        out.push(base(
            input,
            source_id(""),
            Severity::Critical,
            None,
            format!("NVML is failing: {}", text.join("; ")),
        ));
    }
    for g in &sample.gpus {
        if g.lost {
            out.push(base(
                input,
                id(RuleKind::SourceHealth, g, None),
                Severity::Critical,
                Some(g.index),
                format!(
                    "GPU {} is lost: it fell off the bus or is being reset",
                    g.index
                ),
            ));
        }
    }
    // One source finding at most: merge stale and failing.
    let mut seen = false;
    out.retain(|f| {
        if f.id.rule == RuleKind::SourceHealth && f.id.gpu.is_empty() {
            let keep = !seen;
            seen = true;
            keep
        } else {
            true
        }
    });
}

fn near_capacity(input: &Input<'_>, r: &Rules, g: &GpuSample, h: &GpuHistory) -> Option<Finding> {
    let fid = id(RuleKind::NearCapacity, g, None);
    let open = input.open.contains_key(&fid);
    // The lines are the memory levels every front end colours by.
    let levels = super::MemLevels::from(r);
    let level = |used: u64, total: u64, free: u64| levels.level(used, total, Some(free));
    let hot = |used: u64, total: u64, free: u64| {
        level(used, total, free).is_some_and(|l| l >= super::MemLevel::Warning)
    };
    let latest = h.latest()?;
    let (used, total) = (latest.used?, latest.total?);
    let free = latest.headroom()?;
    let ratio = used as f64 / total as f64;
    let holds = if open {
        // Hysteresis: clears only clearly below the line.
        ratio >= r.near_capacity_warn - r.near_capacity_hysteresis
            || free < r.near_capacity_headroom + (r.near_capacity_hysteresis * total as f64) as u64
    } else {
        // Minimum duration: every point of the last `min_duration` is over the line.
        let from = latest.t - r.near_capacity_min_duration.as_secs_f64();
        let first = h.points().next().map_or(latest.t, |p| p.t);
        first <= from
            && h.points().rev().take_while(|p| p.t >= from).all(|p| {
                match (p.used, p.total, p.headroom()) {
                    (Some(u), Some(t), Some(f)) => hot(u, t, f),
                    _ => false,
                }
            })
    };
    if !holds {
        return None;
    }
    let severity = if level(used, total, free) == Some(super::MemLevel::Critical) {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let mut f = base(
        input,
        fid,
        severity,
        Some(g.index),
        format!(
            "GPU {} is {:.0}% full ({} of {}, {} free)",
            g.index,
            ratio * 100.0,
            fmt_bytes(used),
            fmt_bytes(total),
            fmt_bytes(free)
        ),
    );
    f.bytes = Some(free);
    f.unattributed_bytes = g.unattributed_bytes();
    f.culprits = g
        .processes
        .iter()
        .take(3)
        .map(|p| culprit(p, None))
        .collect();
    Some(f)
}

/// An open filling-up finding holds until the time to full moves past this many horizons (the
/// message then says so).
const FILLING_HOLD: f64 = 1.25;

/// Points of a process's sustain window the leak rule judges (spread in time).
const LEAK_POINTS: usize = 40;

/// Culprits of filling-up: the fastest ramping processes that together make this share of the
/// ramping processes' growth.
const DRIVERS_SHARE: f64 = 0.95;

fn filling_up(input: &Input<'_>, r: &Rules, g: &GpuSample, h: &GpuHistory) -> Option<Finding> {
    let fid = id(RuleKind::FillingUp, g, None);
    let prev = input.open.get(&fid);
    let open = prev.is_some();
    let latest = h.latest()?;
    let growth = gpu_growth(h, r)?;
    let horizon = r.filling_horizon.as_secs_f64();
    let window = r.filling_window.as_secs_f64();
    // A drop re-anchored the window less than half a window ago: too short to judge a rate
    // (unless the drops are partial frees in a trend that goes on: its rate is that trend's).
    let reanchored = growth.peaks_ahead.is_none() && growth.at - growth.since < window * 0.5;
    let held = prev.filter(|f| reanchored && held_over_free(f, g, h, latest.used));
    let partial = held.and_then(|f| f.rate_bytes_per_s);
    let slope = partial.unwrap_or(growth.rate);
    // Through partial frees the GPU is full when a peak reaches capacity.
    let headroom = (latest.headroom()? as f64 - growth.peaks_ahead.unwrap_or(0.0)).max(0.0);
    let ttf = if slope > 0.0 {
        headroom / slope
    } else {
        f64::INFINITY
    };
    let holds = if open {
        // Hysteresis on the rate and on the time to full; a re-anchoring drop (a window that
        // restarts after it) that gives back what the GPU rose resolves it at once.
        (!reanchored || partial.is_some())
            && slope >= r.filling_min_rate / 2.0
            && ttf <= horizon * FILLING_HOLD
    } else {
        (growth.ramping || growth.peaks_ahead.is_some()) && ttf <= horizon
    };
    if !holds {
        return None;
    }
    let (drivers, judged_at) = judged_drivers(
        input,
        r,
        g,
        prev,
        held.filter(|_| partial.is_some()),
        latest.t,
    );
    let from = latest.t - growth::extended(r.filling_window).as_secs_f64();
    let unattributed =
        growth::window_points(h.unattributed_series().map(|(t, u)| (t, u as f64)), from);
    let unattributed_grows =
        series_growth(&unattributed, None, &process_test(r)).is_some_and(|u| u.ramping);
    // Opening also needs someone whose own memory ramps: processes that each loaded once
    // (ranks or workers starting one after another) add up to a rise that is not a trend.
    if !open && drivers.is_empty() && !unattributed_grows {
        return None;
    }
    let why = why_filling(&drivers, unattributed_grows);
    let used_fraction = match (latest.used, latest.total) {
        (Some(u), Some(t)) if t > 0 => u as f64 / t as f64,
        _ => 0.0,
    };
    // Critical only when it is both soon and a GPU mostly in use: a model loading on a free
    // card is at worst a warning.
    let severity = if ttf <= horizon / 5.0 && used_fraction >= r.filling_critical_used {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let when = if ttf <= horizon {
        format!("will be full in ~{}", fmt_eta(ttf))
    } else {
        // Held open by the hysteresis: say so rather than contradict the horizon.
        format!(
            "is still filling: full in ~{} (opened within {}, clears past {})",
            fmt_eta(ttf),
            fmt_eta(horizon),
            fmt_eta(horizon * FILLING_HOLD)
        )
    };
    let mut f = base(
        input,
        fid,
        severity,
        Some(g.index),
        format!(
            "GPU {} {when} (+{}){}",
            g.index,
            fmt_growth(slope),
            if why.is_empty() {
                String::new()
            } else {
                format!(": {}", why.join(", "))
            }
        ),
    );
    f.time_to_full_s = Some(ttf);
    f.rate_bytes_per_s = Some(slope);
    f.bytes = Some(headroom as u64);
    f.unattributed_bytes = g.unattributed_bytes();
    f.culprits = drivers;
    f.culprits_at = judged_at;
    if !open {
        // The condition started with the window that ramps, not at the sample that opened it:
        // a partial free that leaves the GPU above that still holds it.
        f.since = growth.since;
    }
    Some(f)
}

/// The message's list of what drives a filling GPU: its three fastest drivers, and memory no
/// process accounts for where that ramps.
fn why_filling(drivers: &[Culprit], unattributed_grows: bool) -> Vec<String> {
    let mut why: Vec<String> = drivers
        .iter()
        .take(3)
        .map(|c| {
            format!(
                "{} +{}",
                who(c),
                fmt_growth(c.growth_bytes_per_s.unwrap_or(0.0))
            )
        })
        .collect();
    if unattributed_grows {
        why.push("memory no visible process accounts for".to_string());
    }
    why
}

/// Whether an open filling-up holds over a drop that re-anchored the window: the drop left the
/// GPU above where the window that opened it began, and the processes that drove it are all
/// still there (a partial free in a trend that goes on, as an allocator's periodic release).
/// It then holds at the rate it had until the new window can be judged. A leaker that dies is
/// gone and took what it held with it.
fn held_over_free(f: &Finding, g: &GpuSample, h: &GpuHistory, used: Option<u64>) -> bool {
    !f.culprits.is_empty()
        && f.culprits
            .iter()
            .all(|c| g.processes.iter().any(|p| p.pid == c.pid))
        && h.used_series()
            .find(|p| p.0 >= f.since)
            .is_some_and(|(_, at_open)| used.is_some_and(|u| u > at_open))
}

/// Who drives a filling GPU, and when that was judged: the processes whose own memory ramps
/// ([`drivers`]). Held over a partial free (`held`), the drivers it had: the one that freed
/// re-anchored its own window too, and whoever else creeps would be named alone. Open and
/// judged less than [`growth::REFINE_EVERY`] ago, the drivers it had that are still on the
/// GPU, with their memory now: judging every process of a filling GPU on every frame was most
/// of the dashboard's CPU, and their rates are refined that often anyway.
fn judged_drivers(
    input: &Input<'_>,
    r: &Rules,
    g: &GpuSample,
    prev: Option<&Finding>,
    held: Option<&Finding>,
    now: f64,
) -> (Vec<Culprit>, Option<f64>) {
    if let Some(f) = held {
        return (f.culprits.clone(), f.culprits_at);
    }
    let recent = prev
        .filter(|f| {
            f.culprits_at
                .is_some_and(|at| (0.0..growth::REFINE_EVERY).contains(&(now - at)))
        })
        .map(|f| (still_there(&f.culprits, g), f.culprits_at))
        .filter(|(c, _)| !c.is_empty());
    recent.unwrap_or_else(|| (drivers(input, r, g), Some(now)))
}

/// The culprits still on the GPU, with their memory now.
fn still_there(culprits: &[Culprit], g: &GpuSample) -> Vec<Culprit> {
    culprits
        .iter()
        .filter_map(|c| {
            let p = g.processes.iter().find(|p| p.pid == c.pid)?;
            Some(Culprit {
                used_bytes: p.used_bytes,
                ..c.clone()
            })
        })
        .collect()
}

/// The processes whose own memory ramps, fastest first: those that together make
/// [`DRIVERS_SHARE`] of their growth.
fn drivers(input: &Input<'_>, r: &Rules, g: &GpuSample) -> Vec<Culprit> {
    let mut drivers: Vec<Culprit> = g
        .processes
        .iter()
        .filter_map(|p| {
            let (_, ph) = input.history.process_for(&g.uuid, p)?;
            let pg = process_growth(ph, r)?;
            pg.ramping.then(|| culprit(p, Some(pg.rate)))
        })
        .collect();
    drivers.sort_by(|a, b| {
        b.growth_bytes_per_s
            .unwrap_or(0.0)
            .total_cmp(&a.growth_bytes_per_s.unwrap_or(0.0))
    });
    // The fastest that together make most of the drivers' growth: a flat holder whose noise
    // passes for a slow ramp beside one that streams 50 MiB/s is not why the GPU fills.
    let total: f64 = drivers.iter().filter_map(|c| c.growth_bytes_per_s).sum();
    let mut before = 0.0;
    drivers.retain(|c| {
        let keep = before < DRIVERS_SHARE * total;
        before += c.growth_bytes_per_s.unwrap_or(0.0);
        keep
    });
    drivers
}

/// Memory of the watched processes on a GPU at each sample time of the window.
/// The watched processes' memory summed per sample time over `[from, latest]`, ascending by
/// time. The processes' series share their sample times, so each one is merged into the running
/// sum in one pass (no hashing per point: at 64 processes and a one-minute window this runs
/// thousands of times per GPU and frame).
fn mine_by_time(input: &Input<'_>, g: &GpuSample, from: f64) -> Vec<(f64, u64)> {
    let mut mine: Vec<(f64, u64)> = Vec::new();
    let mut points: Vec<(f64, u64)> = Vec::new();
    let mut merged: Vec<(f64, u64)> = Vec::new();
    for p in g.processes.iter().filter(|p| (input.watched)(p)) {
        if let Some((_, ph)) = input.history.process_for(&g.uuid, p) {
            points.clear();
            points.extend(ph.used_from(from));
            merge_sum(&mine, &points, &mut merged);
            std::mem::swap(&mut mine, &mut merged);
        }
    }
    mine
}

/// `a` and `b` (each ascending by time, one value per time) merged into `out`, ascending, the
/// values of equal times added.
fn merge_sum(a: &[(f64, u64)], b: &[(f64, u64)], out: &mut Vec<(f64, u64)>) {
    out.clear();
    out.reserve(a.len().max(b.len()));
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].0.total_cmp(&b[j].0) {
            std::cmp::Ordering::Less => {
                out.push(a[i]);
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                out.push(b[j]);
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                out.push((a[i].0, a[i].1 + b[j].1));
                i += 1;
                j += 1;
            }
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
}

fn external_pressure(
    input: &Input<'_>,
    r: &Rules,
    g: &GpuSample,
    h: &GpuHistory,
) -> Option<Finding> {
    if !g.processes.iter().any(|p| (input.watched)(p)) {
        return None;
    }
    let fid = id(RuleKind::ExternalPressure, g, None);
    let prev = input.open.get(&fid);
    let latest = h.latest()?;
    let from = latest.t - r.external_window.as_secs_f64();
    let mine = mine_by_time(input, g, from);
    let external: Vec<(f64, f64)> = since(h.used_series().map(|(t, u)| (t, u as f64)), from)
        .into_iter()
        .map(|(t, u)| {
            let u = u as u64;
            let at = mine
                .binary_search_by(|m| m.0.total_cmp(&t))
                .map_or(0, |i| mine[i].1);
            (t, u.saturating_sub(at) as f64)
        })
        .collect();
    let now_ext = external.last()?.1;
    let low = external.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let rise_limit = r.external_rise as f64;
    // A: external memory rose. The baseline is kept while the finding is open, so a
    // persistent intruder stays named after the window has moved on.
    let baseline = prev
        .and_then(|f| f.baseline_bytes)
        .map_or(low, |b| b as f64);
    let rose = if prev.is_some() {
        now_ext - baseline >= rise_limit / 2.0
    } else {
        now_ext - low >= rise_limit
    };
    // B: the watched processes ramp, what is left does not cover their growth over the
    // horizon, and it would if external memory were not there: external memory stands in the
    // job's way. (A need beyond all external memory is the job's own growth: filling-up.)
    let mine_pts: Vec<(f64, f64)> = mine.iter().map(|&(t, u)| (t, u as f64)).collect();
    let mine_growth = series_growth(&mine_pts, None, &process_test(r))
        .filter(|m| m.ramping && m.rate > 0.0)
        .map_or(0.0, |m| m.rate);
    let headroom = latest.headroom()? as f64;
    let need = mine_growth * r.external_horizon.as_secs_f64();
    let squeezed =
        mine_growth > 0.0 && headroom < need && need <= headroom + now_ext && now_ext >= rise_limit;
    if !rose && !squeezed {
        return None;
    }
    let (culprits, unattributed_rose) = if rose {
        external_risers(input, g, h, baseline_time(prev, from), rise_limit)
    } else {
        in_the_way(input, g, need - headroom)
    };
    let unattributed_now = g.unattributed_bytes();
    let mut names: Vec<String> = culprits.iter().take(3).map(|(_, c)| who(c)).collect();
    if unattributed_rose || (names.is_empty() && rose) {
        names.push(
            "memory no visible process accounts for (another container or PID namespace)"
                .to_string(),
        );
    }
    let what = if rose {
        format!(
            "external memory on GPU {} rose by {}",
            g.index,
            fmt_bytes((now_ext - baseline).max(0.0) as u64)
        )
    } else {
        format!(
            "external memory on GPU {} ({}) leaves {} free; your processes grow {} and need {} over {}",
            g.index,
            fmt_bytes(now_ext as u64),
            fmt_bytes(headroom as u64),
            fmt_growth(mine_growth),
            fmt_bytes(need as u64),
            fmt_eta(r.external_horizon.as_secs_f64())
        )
    };
    let mut f = base(
        input,
        fid,
        if squeezed {
            Severity::Critical
        } else {
            Severity::Warning
        },
        Some(g.index),
        format!("{what}: {}", names.join(", ")),
    );
    f.bytes = Some(now_ext as u64);
    f.baseline_bytes = Some(baseline as u64);
    f.unattributed_bytes = unattributed_now;
    f.culprits = culprits.into_iter().map(|(_, c)| c).collect();
    if squeezed {
        f.time_to_full_s = Some(headroom / mine_growth);
        f.rate_bytes_per_s = Some(mine_growth);
    }
    Some(f)
}

/// The external processes that grew since `since` by at least a quarter of the rise that
/// counts, largest growth first, and whether unattributed memory rose as much.
fn external_risers(
    input: &Input<'_>,
    g: &GpuSample,
    h: &GpuHistory,
    since: f64,
    rise_limit: f64,
) -> (Vec<(f64, Culprit)>, bool) {
    let mut culprits: Vec<(f64, Culprit)> = g
        .processes
        .iter()
        .filter(|p| !(input.watched)(p))
        .filter_map(|p| {
            let now_used = p.used_bytes? as f64;
            let ph = input.history.process_for(&g.uuid, p).map(|(_, ph)| ph);
            let then = ph
                .and_then(|ph| {
                    ph.used_series()
                        .find(|(t, _)| *t >= since)
                        .map(|(_, u)| u as f64)
                })
                .unwrap_or(0.0);
            let first_seen = ph.map_or(0.0, ProcHistory::first_seen);
            let grew = if first_seen >= since {
                now_used
            } else {
                now_used - then
            };
            (grew >= rise_limit / 4.0).then(|| (grew, culprit(p, None)))
        })
        .collect();
    culprits.sort_by(|a, b| b.0.total_cmp(&a.0));
    let unattributed_then = h
        .points()
        .find(|p| p.t >= since)
        .and_then(|p| p.unattributed);
    let unattributed_rose = match (g.unattributed_bytes(), unattributed_then) {
        (Some(n), Some(t)) => n as f64 - t as f64 >= rise_limit / 4.0,
        _ => false,
    };
    (culprits, unattributed_rose)
}

/// The fewest external holders, largest first, whose memory would cover `short` bytes (what
/// the watched processes lack), and whether unattributed memory is needed too. Memory NVML
/// does not report for a process is not counted (unknown is not zero).
fn in_the_way(input: &Input<'_>, g: &GpuSample, short: f64) -> (Vec<(f64, Culprit)>, bool) {
    let mut holders: Vec<(f64, Culprit)> = g
        .processes
        .iter()
        .filter(|p| !(input.watched)(p))
        .filter_map(|p| Some((p.used_bytes? as f64, culprit(p, None))))
        .collect();
    holders.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut freed = 0.0;
    let mut named = Vec::new();
    for h in holders {
        if freed >= short {
            break;
        }
        freed += h.0;
        named.push(h);
    }
    let unattributed = freed < short && g.unattributed_bytes().is_some_and(|u| u > 0);
    (named, unattributed)
}

/// The moment external memory is compared with: when the finding opened, else the window.
fn baseline_time(prev: Option<&Finding>, window_start: f64) -> f64 {
    prev.map_or(window_start, |f| f.since.min(window_start))
}

/// How often (sample time) the leak rule judges a process that has no open finding: its window
/// is 5 minutes, and judging 400 processes on every frame was a third of the dashboard's CPU.
/// An open finding is judged on every frame (a finding not found again resolves).
pub const LEAK_EVERY: f64 = 5.0;

/// Whether the leak rule judges this process now (and if so, remembers when).
fn leak_due(ph: &ProcHistory) -> bool {
    let Some(now) = ph.latest().map(|p| p.t) else {
        return false;
    };
    let due = ph
        .leak_judged()
        .get()
        .is_none_or(|at| !(0.0..LEAK_EVERY).contains(&(now - at)));
    if due {
        ph.leak_judged().set(Some(now));
    }
    due
}

/// `open`: whether this process's leak finding is open.
fn leak_suspected(
    input: &Input<'_>,
    r: &Rules,
    g: &GpuSample,
    p: &ProcSample,
    ph: &ProcHistory,
    open: bool,
) -> Option<Finding> {
    let latest = ph.latest()?;
    let sustain = r.leak_sustain.as_secs_f64();
    let from = latest.t - sustain;
    // Past the warm-up: the whole ramp window lies after the process's first minute.
    if from < ph.first_seen() + r.leak_warmup.as_secs_f64() {
        return None;
    }
    // Cheap rejection first (most processes are flat): the rise over the window must be at
    // least half of what the minimum rate gives.
    let (t_start, start) = ph.first_used_from(from)?;
    let rise = latest.used? as f64 - start as f64;
    if latest.t - t_start < sustain * 0.8 || (!open && rise < r.leak_min_rate * sustain * 0.5) {
        return None;
    }
    let pts = ph.used_picked(from, LEAK_POINTS);
    let slope = slope_bytes_per_s(&pts)?;
    let holds = if open {
        slope >= r.leak_min_rate / 2.0
    } else {
        // Steady over five parts, and many increments rather than a few steps (a checkpoint
        // reload or an allocator cache growing in chunks). An increment between picked points
        // counts as rising from half of what the minimum rate gives it (0.6 MiB at the
        // defaults): at the process noise of 4 MiB a leak under ~30 MiB/min never could.
        let step_at_min = r.leak_min_rate * sustain / (LEAK_POINTS - 1) as f64;
        slope >= r.leak_min_rate
            && staircase(&pts, 5, PROC_NOISE)
            && ramp_shape(&pts, r.leak_min_rate, PROC_NOISE.min(step_at_min / 2.0))
    };
    if !holds {
        return None;
    }
    let c = culprit(p, Some(slope));
    let mut f = base(
        input,
        id(RuleKind::LeakSuspected, g, Some(p.pid)),
        Severity::Warning,
        Some(g.index),
        format!(
            "leak suspected: {} on GPU {} has grown steadily for {} at {}",
            who(&c),
            g.index,
            fmt_eta(
                latest.t
                    - input
                        .open
                        .get(&id(RuleKind::LeakSuspected, g, Some(p.pid)))
                        .map_or(from, |f| f.since.min(from))
            ),
            fmt_growth(slope)
        ),
    );
    if !open {
        f.since = from;
    }
    f.rate_bytes_per_s = Some(slope);
    f.bytes = p.used_bytes;
    f.culprits = vec![c];
    Some(f)
}

fn idle_holder(
    input: &Input<'_>,
    r: &Rules,
    g: &GpuSample,
    p: &ProcSample,
    ph: &ProcHistory,
) -> Option<Finding> {
    let used = p.used_bytes?;
    // An exited process is not idle, and stopping it frees nothing: exited-holder's.
    if used < r.idle_min_bytes || p.host.exited {
        return None;
    }
    let latest = ph.latest()?;
    // Every SM reading for at least `idle_duration` is 0 (an n/a reading proves nothing and
    // restarts the count).
    let idle = latest.t - ph.idle_since()?;
    if idle < r.idle_duration.as_secs_f64() {
        return None;
    }
    let c = culprit(p, None);
    let mut f = base(
        input,
        id(RuleKind::IdleHolder, g, Some(p.pid)),
        Severity::Info,
        Some(g.index),
        format!(
            "{} holds {} on GPU {} and has not used the GPU for {}: stopping it would free {}",
            who(&c),
            fmt_bytes(used),
            g.index,
            fmt_eta(idle),
            fmt_bytes(used)
        ),
    );
    f.bytes = Some(used);
    f.culprits = vec![c];
    Some(f)
}

/// A process that left `/proc` (it exited) while the driver still lists memory for it, for at
/// least the grace period: a process that is exiting is gone from the list within a second or
/// two, one still listed after that holds memory no process will free (a zombie whose parent
/// has not reaped it, a context the driver has not torn down). Resolves when the driver stops
/// listing the PID (or `/proc` shows a process at that PID again).
fn exited_holder(input: &Input<'_>, r: &Rules, g: &GpuSample, p: &ProcSample) -> Option<Finding> {
    if !p.host.exited || p.used_bytes == Some(0) {
        return None;
    }
    // A time from a recording or a remote daemon is data: a non-finite one times nothing.
    let at = p.host.exited_at.filter(|t| t.is_finite())?;
    let gone_for = input.sample.taken_at - at;
    if !gone_for.is_finite() || gone_for < r.exited_grace.as_secs_f64() {
        return None;
    }
    let c = culprit(p, None);
    let held = p.used_bytes.map_or_else(
        || "memory (NVML does not say how much)".to_string(),
        fmt_bytes,
    );
    let who = who(&c);
    let mut f = base(
        input,
        id(RuleKind::ExitedHolder, g, Some(p.pid)),
        Severity::Warning,
        Some(g.index),
        format!(
            "PID{} exited {} ago but the driver still holds {held} for it on GPU {}",
            who.strip_prefix("pid").unwrap_or(&who),
            fmt_eta(gone_for),
            g.index
        ),
    );
    f.since = at;
    f.bytes = p.used_bytes;
    f.culprits = vec![c];
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::growth::GPU_NOISE;

    fn line(n: usize, slope: f64) -> Vec<(f64, f64)> {
        (0..n).map(|i| (i as f64, 1e9 + slope * i as f64)).collect()
    }

    #[test]
    fn the_leak_rule_judges_a_process_every_few_seconds_and_an_open_leak_on_every_frame() {
        // 0.25 s samples (as `run` takes them): a process is judged at its first sample, then
        // once LEAK_EVERY seconds of samples later, whatever the interval.
        let text = "[[gpu]]\nmemory_total = \"80GiB\"\n[[gpu.process]]\npid = 7\nused = \"1GiB\"\n";
        let src = crate::source::scripted::ScriptedSource::new(
            scenario::Scenario::parse(text).expect("valid"),
            "t",
        );
        let mut history = History::new(Duration::from_mins(10));
        let mut judged = Vec::new();
        for i in 0..=48u32 {
            let t = f64::from(i) / 4.0;
            let sample = src.sample_at(t, 1_800_000_000.0 + t);
            history.push(&sample);
            let g = &sample.gpus[0];
            let (_, ph) = history.process_for(&g.uuid, &g.processes[0]).expect("seen");
            if leak_due(ph) {
                judged.push(t);
            }
        }
        assert_eq!(judged, vec![0.0, LEAK_EVERY, 2.0 * LEAK_EVERY]);
        // A finding that is open is judged on every frame (see `evaluate`): not found again,
        // it would resolve.
    }

    #[test]
    fn merge_sum_adds_equal_times_and_keeps_the_others() {
        let mut out = Vec::new();
        merge_sum(&[], &[(1.0, 5)], &mut out);
        assert_eq!(out, vec![(1.0, 5)]);
        let a = [(1.0, 1), (2.0, 2), (4.0, 4)];
        let b = [(0.5, 10), (2.0, 20), (3.0, 30), (4.0, 40), (5.0, 50)];
        let sum = [
            (0.5, 10),
            (1.0, 1),
            (2.0, 22),
            (3.0, 30),
            (4.0, 44),
            (5.0, 50),
        ];
        merge_sum(&a, &b, &mut out);
        assert_eq!(out, sum);
        // The order of the operands does not matter.
        merge_sum(&b, &a, &mut out);
        assert_eq!(out, sum);
    }

    #[test]
    fn staircase_tells_a_ramp_from_a_step_and_a_bump() {
        let gib = 1024.0 * 1024.0 * 1024.0;
        assert!(staircase(&line(60, 0.1 * gib), 3, GPU_NOISE));
        let step: Vec<(f64, f64)> = (0..60)
            .map(|i| (f64::from(i), if i < 30 { 1.0 } else { 4.0 } * gib))
            .collect();
        assert!(!staircase(&step, 3, GPU_NOISE), "one step is not a ramp");
        let bump: Vec<(f64, f64)> = (0..60)
            .map(|i| {
                (
                    f64::from(i),
                    if (20..40).contains(&i) { 4.0 } else { 1.0 } * gib,
                )
            })
            .collect();
        assert!(
            !staircase(&bump, 3, GPU_NOISE),
            "an eval buffer is not a ramp"
        );
        assert!(!staircase(&line(60, 0.0), 3, GPU_NOISE), "flat");
        // A context (20 MiB) then the allocation (6.5 GiB): one step, not a ramp.
        let two: Vec<(f64, f64)> = (0..32)
            .map(|i| {
                (
                    f64::from(i) / 4.0,
                    if i < 16 {
                        0.0
                    } else if i < 20 {
                        0.02 * gib
                    } else {
                        6.5 * gib
                    },
                )
            })
            .collect();
        assert!(!staircase(&two, 3, GPU_NOISE));
        // A leak in coarse steps (every 4 samples) is still a ramp.
        let stairs: Vec<(f64, f64)> = (0..60)
            .map(|i| (f64::from(i), gib + f64::from(i / 4) * 0.4 * gib))
            .collect();
        assert!(staircase(&stairs, 3, GPU_NOISE));
    }
}
