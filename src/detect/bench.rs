//! The detection benchmark: scenario files with expected findings, fed through the detector
//! exactly as the front ends feed it, at a given sampling interval, and scored.
//!
//! A bench file is a scenario (the `crates/scenario` format, the one `--scenario` and the NVML
//! double read) plus three tables the scenario parser is not shown:
//!
//! ```toml
//! [bench]
//! description = "a model loads in three steps, then trains"
//! duration = 120            # seconds of scenario to feed
//! # or, instead of the scenario's GPUs: a recording (relative to this file), optionally cut
//! # recording = "../../h200/leak-to-oom.recording.jsonl"
//! # from = 0
//! # until = 20
//! watch = [1234]            # the watched set ("mine"), by PID
//!
//! [[expect]]
//! rule = "filling-up"
//! gpu = 0                   # NVML index (optional)
//! opens_between = [20, 35]  # opens in this window (scenario seconds), never before
//! # delay_from = 22         # the detection delay is measured from here (default: 20)
//! full_at = 73.8            # when the GPU fills (the truth for the time to full)
//! eta_within = 0.2          # predicted time to full within ±20 % of the truth…
//! # eta_between = [35, 70] # …over this window (default: 15 s after the opening window
//!                           #    starts until 3 s before full_at)
//! culprit = 1055            # named while open
//! not_culprit = [1030]      # never named
//! max_severity = "warning"  # never more severe
//! max_openings = 1          # opens at most this many times (no flapping)
//! resolve_after = 74.75     # resolved by the n-th sample from this time on (the first
//! resolves_within_samples = 2   # one at or after it counts as 1)
//!
//! [[forbid]]
//! rule = "filling-up"       # never open (optionally `gpu`, `pid`, `between = [a, b]`)
//! ```
//!
//! [`feed`] is the one place that turns a case into samples and runs them through the
//! pipeline's analysis stage ([`crate::analysis::Analyzer`], compact as the daemon's, over the
//! default history window, the sample's time as now); [`score`] judges a run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::{Finding, FindingEvent, RuleKind, Rules, Severity, compact_history};
use crate::model::Sample;
use crate::record::Recording;
use crate::source::scripted::ScriptedSource;

/// Bench files larger than this are refused (they are hand-written TOML).
const MAX_FILE_BYTES: u64 = 1 << 20;

/// The unix time of scenario t = 0.
const EPOCH: f64 = 1_800_000_000.0;

/// The `[bench]` table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BenchTable {
    #[serde(default)]
    description: String,
    duration: Option<f64>,
    recording: Option<String>,
    from: Option<f64>,
    until: Option<f64>,
    #[serde(default)]
    watch: Vec<u32>,
}

/// One `[[expect]]`: a finding that must open, and how well it must do.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub rule: RuleKind,
    pub gpu: Option<u32>,
    pub pid: Option<u32>,
    pub opens_between: [f64; 2],
    /// What the detection delay is measured from (default: the opening window's start).
    pub delay_from: Option<f64>,
    pub full_at: Option<f64>,
    pub eta_within: Option<f64>,
    pub eta_between: Option<[f64; 2]>,
    pub culprit: Option<u32>,
    #[serde(default)]
    pub not_culprit: Vec<u32>,
    pub max_severity: Option<Severity>,
    pub max_openings: Option<usize>,
    pub resolve_after: Option<f64>,
    pub resolves_within_samples: Option<usize>,
}

/// One `[[forbid]]`: a finding that must not be open (in a window).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Forbid {
    pub rule: RuleKind,
    pub gpu: Option<u32>,
    pub pid: Option<u32>,
    pub between: Option<[f64; 2]>,
}

/// Where a case's samples come from.
enum Feed {
    Scenario {
        source: Box<ScriptedSource>,
        duration: f64,
    },
    Recording {
        samples: Vec<Sample>,
        from: f64,
        until: f64,
    },
}

/// A bench file read.
pub struct Case {
    /// The file name without `.toml`.
    pub name: String,
    /// The folder it is in (`tune` or `holdout`).
    pub set: String,
    pub description: String,
    pub watch: Vec<u32>,
    pub expects: Vec<Expect>,
    pub forbids: Vec<Forbid>,
    feed: Feed,
}

/// Reads a bench file; the error names the file and what is wrong.
pub fn load(path: &Path) -> Result<Case, String> {
    let shown = path.display();
    let size = std::fs::metadata(path)
        .map_err(|e| format!("bench file '{shown}': {e}"))?
        .len();
    if size > MAX_FILE_BYTES {
        return Err(format!(
            "bench file '{shown}' is {size} bytes (expected at most {MAX_FILE_BYTES})"
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("bench file '{shown}': {e}"))?;
    let mut table: toml::Table = text
        .parse()
        .map_err(|e| format!("bench file '{shown}': {e}"))?;
    let take = |table: &mut toml::Table, key: &str| table.remove(key);
    let bench: BenchTable = take(&mut table, "bench")
        .map(toml::Value::try_into)
        .transpose()
        .map_err(|e| format!("bench file '{shown}': [bench]: {e}"))?
        .unwrap_or_default();
    let expects: Vec<Expect> = take(&mut table, "expect")
        .map(toml::Value::try_into)
        .transpose()
        .map_err(|e| format!("bench file '{shown}': [[expect]]: {e}"))?
        .unwrap_or_default();
    let forbids: Vec<Forbid> = take(&mut table, "forbid")
        .map(toml::Value::try_into)
        .transpose()
        .map_err(|e| format!("bench file '{shown}': [[forbid]]: {e}"))?
        .unwrap_or_default();
    if expects.is_empty() && forbids.is_empty() {
        return Err(format!(
            "bench file '{shown}' has no [[expect]] and no [[forbid]]: it would test nothing"
        ));
    }
    let feed = if let Some(rec) = &bench.recording {
        let dir = path.parent().unwrap_or(Path::new("."));
        let rec = Recording::read(dir.join(rec))
            .map_err(|e| format!("bench file '{shown}': recording: {e}"))?;
        Feed::Recording {
            samples: rec.samples,
            from: bench.from.unwrap_or(0.0),
            until: bench.until.unwrap_or(f64::INFINITY),
        }
    } else {
        let duration = bench
            .duration
            .filter(|d| d.is_finite() && *d > 0.0 && *d <= 86_400.0)
            .ok_or_else(|| {
                format!(
                    "bench file '{shown}': [bench] duration: expected seconds from 0 to 86400 \
                         (or a recording)"
                )
            })?;
        let scenario = scenario::Scenario::parse(
            &toml::to_string(&table).map_err(|e| format!("bench file '{shown}': {e}"))?,
        )
        .map_err(|e| format!("bench file '{shown}': {e}"))?;
        Feed::Scenario {
            source: Box::new(ScriptedSource::new(scenario, &shown.to_string())),
            duration,
        }
    };
    Ok(Case {
        name: path
            .file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned()),
        set: path
            .parent()
            .and_then(Path::file_name)
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned()),
        description: bench.description,
        watch: bench.watch,
        expects,
        forbids,
        feed,
    })
}

/// The bench files under `dir` (`*.toml`, in every sub-folder), sorted.
pub fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "toml") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// What was open after one sample.
#[derive(Debug, Clone)]
pub struct Observation {
    /// Scenario seconds.
    pub t: f64,
    pub open: Vec<Finding>,
}

/// A case fed at one interval.
pub struct Run {
    pub interval: Duration,
    pub observations: Vec<Observation>,
    /// Every lifecycle event, with its scenario time.
    pub events: Vec<(f64, FindingEvent)>,
}

/// Feeds a case at `interval` through the pipeline's analysis stage, the one every front end
/// consumes ([`crate::analysis::Analyzer`], its history compact as the daemon's, over the
/// default history window), the case's `watch` PIDs as the watched set.
pub fn feed(case: &Case, interval: Duration, rules: &Rules) -> Run {
    use crate::analysis::{Analyzer, Detail, Parents};
    let mut run = Run {
        interval,
        observations: Vec::new(),
        events: Vec::new(),
    };
    let watch = crate::watch::WatchSet::new(
        case.watch
            .iter()
            .map(|&pid| crate::watch::WatchSpec::Pid(pid))
            .collect(),
        None,
    );
    let mut analyzer = Analyzer::new(
        rules.clone(),
        crate::config::Config::default().history.window,
        Detail::Compact,
        watch,
    )
    .with_parents(Parents::Reported);
    let source = std::sync::Arc::new(crate::model::SourceInfo {
        kind: crate::model::SourceKind::Replay,
        host: "bench".into(),
        driver_version: None,
        cuda_version: None,
        nvml_version: None,
        detail: case.name.clone(),
        me: None,
        span: None,
    });
    let mut seq = 0;
    samples(case, interval, &mut |t, sample| {
        seq += 1;
        let frame = std::sync::Arc::new(crate::model::Frame {
            seq,
            source: std::sync::Arc::clone(&source),
            sample: sample.clone(),
            published: std::time::Instant::now(),
            interval,
            host: None,
        });
        let analysis = analyzer.push(&frame);
        run.events
            .extend(analysis.events.into_iter().map(|e| (t, e)));
        run.observations.push(Observation {
            t,
            open: analysis.findings,
        });
    });
    run
}

/// The samples of a case at `interval`, each pushed into a history built as the daemon
/// builds it, then handed to `each` with its scenario time (a tool may look at the growth
/// estimates with it).
pub fn trace(
    case: &Case,
    interval: Duration,
    rules: &Rules,
    each: &mut dyn FnMut(f64, &crate::history::History, &Sample),
) {
    let mut history = compact_history(crate::config::Config::default().history.window, rules);
    samples(case, interval, &mut |t, sample| {
        history.push(sample);
        each(t, &history, sample);
    });
}

/// The samples of a case at `interval`, with their scenario times: a scenario evaluated every
/// `interval`, or the recording's samples a sampler at `interval` would have seen.
fn samples(case: &Case, interval: Duration, one: &mut dyn FnMut(f64, &Sample)) {
    let step = interval.as_secs_f64().max(0.01);
    match &case.feed {
        Feed::Scenario { source, duration } => {
            let n = (duration / step).floor() as u64;
            for k in 0..=n {
                let t = k as f64 * step;
                one(t, &source.sample_at(t, EPOCH + t));
            }
        }
        Feed::Recording {
            samples,
            from,
            until,
        } => {
            let Some(t0) = samples.first().map(|s| s.taken_at) else {
                return;
            };
            // Every sample at or after the next tick (a quarter interval early counts: the
            // recorder's ticks jitter), as a sampler at `interval` would have seen it.
            let mut next = *from;
            for s in samples {
                let t = s.taken_at - t0;
                if t < *from || t >= *until || t < next - step / 4.0 {
                    continue;
                }
                next = if t >= next + step {
                    t + step
                } else {
                    next + step
                };
                one(t, s);
            }
        }
    }
}

/// How one expectation or prohibition did in one run.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub case: String,
    pub set: String,
    pub interval: Duration,
    pub rule: RuleKind,
    /// `expect` or `forbid`.
    pub kind: &'static str,
    pub passed: bool,
    /// What happened, one line per problem (empty when passed).
    pub problems: Vec<String>,
    /// Expect: it opened in its window.
    pub detected: bool,
    /// Expect: seconds from the window's start to the opening.
    pub delay: Option<f64>,
    /// Expect: relative errors of the predicted time to full (absolute values).
    pub eta_errors: Vec<f64>,
    /// Expect: samples from `resolve_after` until resolved (1 = the first sample).
    pub resolve_samples: Option<usize>,
    /// Forbid: openings in the window (at least 1 when it was open there at all).
    pub false_positives: usize,
}

fn matches(f: &Finding, rule: RuleKind, gpu: Option<u32>, pid: Option<u32>) -> bool {
    f.id.rule == rule
        && gpu.is_none_or(|g| f.gpu_index == Some(g))
        && pid.is_none_or(|p| f.id.pid == Some(p))
}

/// Scores a run against every expectation and prohibition of its case.
pub fn score(case: &Case, run: &Run) -> Vec<Outcome> {
    let mut out = Vec::new();
    for e in &case.expects {
        out.push(score_expect(case, run, e));
    }
    for f in &case.forbids {
        out.push(score_forbid(case, run, f));
    }
    out
}

fn outcome(case: &Case, run: &Run, rule: RuleKind, kind: &'static str) -> Outcome {
    Outcome {
        case: case.name.clone(),
        set: case.set.clone(),
        interval: run.interval,
        rule,
        kind,
        passed: true,
        problems: Vec::new(),
        detected: false,
        delay: None,
        eta_errors: Vec::new(),
        resolve_samples: None,
        false_positives: 0,
    }
}

fn score_expect(case: &Case, run: &Run, exp: &Expect) -> Outcome {
    let mut out = outcome(case, run, exp.rule, "expect");
    let find = |obs: &Observation| {
        obs.open
            .iter()
            .find(|f| matches(f, exp.rule, exp.gpu, exp.pid))
            .cloned()
    };
    check_opening(run, exp, &find, &mut out);
    check_eta(run, exp, &find, &mut out);
    check_names(run, exp, &find, &mut out);
    check_resolve(run, exp, &find, &mut out);
    out.passed = out.problems.is_empty();
    out
}

type Find<'a> = dyn Fn(&Observation) -> Option<Finding> + 'a;

/// Opens in its window and never before; at most `max_openings` times.
fn check_opening(run: &Run, exp: &Expect, find: &Find<'_>, out: &mut Outcome) {
    let [lo, hi] = exp.opens_between;
    match run.observations.iter().find(|obs| find(obs).is_some()) {
        Some(obs) if obs.t < lo => out.problems.push(format!(
            "opened early, at t = {:.2} s (expected from {lo} s): {}",
            obs.t,
            find(obs).map(|f| f.summary).unwrap_or_default()
        )),
        Some(obs) if obs.t <= hi => {
            out.detected = true;
            out.delay = Some(obs.t - exp.delay_from.unwrap_or(lo));
        }
        Some(obs) => out.problems.push(format!(
            "opened late, at t = {:.2} s (expected between {lo} and {hi} s)",
            obs.t
        )),
        None => out
            .problems
            .push(format!("never opened (expected between {lo} and {hi} s)")),
    }
    if let Some(max) = exp.max_openings {
        let n = run
            .events
            .iter()
            .filter(|(_, ev)| {
                matches!(ev, FindingEvent::Opened(_))
                    && matches(ev.finding(), exp.rule, exp.gpu, exp.pid)
            })
            .count();
        if n > max {
            out.problems
                .push(format!("opened {n} times (at most {max}: it flaps)"));
        }
    }
}

/// The predicted time to full against the truth, over its window.
fn check_eta(run: &Run, exp: &Expect, find: &Find<'_>, out: &mut Outcome) {
    let (Some(within), Some(full_at)) = (exp.eta_within, exp.full_at) else {
        return;
    };
    let [from, until] = exp
        .eta_between
        .unwrap_or([exp.opens_between[0] + 15.0, full_at - 3.0]);
    let mut missing = None;
    for obs in run
        .observations
        .iter()
        .filter(|o| o.t >= from && o.t <= until)
    {
        let truth = full_at - obs.t;
        match find(obs).and_then(|f| f.time_to_full_s) {
            Some(p) if truth > 0.0 => out.eta_errors.push(((p - truth) / truth).abs()),
            Some(_) => {}
            None => {
                missing.get_or_insert(obs.t);
            }
        }
    }
    if let Some(t) = missing {
        out.problems.push(format!(
            "no time to full at t = {t:.2} s (judged from {from} to {until} s)"
        ));
    }
    let worst = out.eta_errors.iter().copied().fold(0.0, f64::max);
    if worst > within {
        out.problems.push(format!(
            "time to full off by up to {:.0} % (allowed ±{:.0} %)",
            worst * 100.0,
            within * 100.0
        ));
    }
}

/// Who it names, and how severe it gets.
fn check_names(run: &Run, exp: &Expect, find: &Find<'_>, out: &mut Outcome) {
    let named: std::collections::BTreeSet<u32> = run
        .observations
        .iter()
        .filter_map(find)
        .flat_map(|f| f.culprits.into_iter().map(|c| c.pid))
        .collect();
    if let Some(c) = exp.culprit
        && !named.contains(&c)
    {
        out.problems
            .push(format!("never named pid {c} (named: {named:?})"));
    }
    for c in &exp.not_culprit {
        if named.contains(c) {
            out.problems
                .push(format!("named pid {c}, which it must not"));
        }
    }
    if let Some(max) = exp.max_severity
        && let Some(f) = run
            .observations
            .iter()
            .filter_map(find)
            .find(|f| f.severity > max)
    {
        out.problems
            .push(format!("was {} (at most {max}): {}", f.severity, f.summary));
    }
}

/// Resolved by the n-th sample from `resolve_after` on.
fn check_resolve(run: &Run, exp: &Expect, find: &Find<'_>, out: &mut Outcome) {
    let (Some(after), Some(k)) = (exp.resolve_after, exp.resolves_within_samples) else {
        return;
    };
    let start = run.observations.partition_point(|obs| obs.t < after);
    let resolved = run.observations[start..]
        .iter()
        .position(|obs| find(obs).is_none());
    out.resolve_samples = resolved.map(|i| i + 1);
    match resolved {
        Some(i) if i < k => {}
        Some(i) => out.problems.push(format!(
            "resolved only {} samples after t = {after} s (at most {k}): still said {}",
            i + 1,
            find(&run.observations[start + i - 1])
                .map(|f| f.summary)
                .unwrap_or_default()
        )),
        None => out
            .problems
            .push(format!("never resolved after t = {after} s")),
    }
}

fn score_forbid(case: &Case, run: &Run, f: &Forbid) -> Outcome {
    let mut o = outcome(case, run, f.rule, "forbid");
    let [a, b] = f.between.unwrap_or([f64::NEG_INFINITY, f64::INFINITY]);
    let inside = |t: f64| t >= a && t <= b;
    let opened = run
        .events
        .iter()
        .filter(|(t, ev)| {
            inside(*t)
                && matches!(ev, FindingEvent::Opened(_))
                && matches(ev.finding(), f.rule, f.gpu, f.pid)
        })
        .count();
    let first = run
        .observations
        .iter()
        .filter(|obs| inside(obs.t))
        .find_map(|obs| {
            obs.open
                .iter()
                .find(|x| matches(x, f.rule, f.gpu, f.pid))
                .map(|x| (obs.t, x.summary.clone(), x.severity))
        });
    if let Some((t, summary, severity)) = first {
        o.false_positives = opened.max(1);
        o.problems.push(format!(
            "open at t = {t:.2} s ({severity}, {} opening(s)): {summary}",
            o.false_positives
        ));
    }
    o.passed = o.problems.is_empty();
    o
}

/// One line naming what failed, for a test's message.
pub fn describe(o: &Outcome) -> String {
    format!(
        "{} ({}) at {}: {} {}: {}",
        o.case,
        o.set,
        rate(o.interval),
        o.kind,
        o.rule,
        o.problems.join("; ")
    )
}

fn rate(interval: Duration) -> String {
    let hz = 1.0 / interval.as_secs_f64().max(1e-3);
    format!("{hz:.0} Hz")
}

/// The benchmark's table over outcomes: per set, rate and rule, the expectations met and
/// missed, the false positives, the detection delay, the time-to-full error and the time to
/// resolve (Markdown).
pub fn table(outcomes: &[Outcome]) -> String {
    use std::collections::BTreeMap;
    use std::fmt::Write as _;
    #[derive(Default)]
    struct Row {
        expected: usize,
        met: usize,
        detected: usize,
        forbids: usize,
        fp: usize,
        delays: Vec<f64>,
        eta: Vec<f64>,
        resolve: Vec<usize>,
    }
    let mut rows: BTreeMap<(String, u128, RuleKind), Row> = BTreeMap::new();
    for o in outcomes {
        let r = rows
            .entry((o.set.clone(), o.interval.as_millis(), o.rule))
            .or_default();
        if o.kind == "expect" {
            r.expected += 1;
            r.met += usize::from(o.passed);
            r.detected += usize::from(o.detected);
            r.delays.extend(o.delay);
            r.eta.extend(&o.eta_errors);
            r.resolve.extend(o.resolve_samples);
        } else {
            r.forbids += 1;
            r.fp += o.false_positives;
        }
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    let opt = |x: Option<f64>, f: &dyn Fn(f64) -> String| x.map_or_else(|| "–".to_string(), f);
    let mut s = String::from(
        "| set | rate | rule | expected: met / detected / all | false positives (forbids) | delay median / worst | ETA error median / worst | resolve (samples, worst) |\n|---|---|---|---|---|---|---|---|\n",
    );
    for ((set, ms, rule), mut r) in rows {
        let worst_delay = r.delays.iter().copied().reduce(f64::max);
        let worst_eta = r.eta.iter().copied().reduce(f64::max);
        let _ = writeln!(
            s,
            "| {set} | {} | {rule} | {} / {} / {} | {} ({}) | {} / {} | {} / {} | {} |",
            rate(Duration::from_millis(ms as u64)),
            r.met,
            r.detected,
            r.expected,
            r.fp,
            r.forbids,
            opt(med(&mut r.delays), &|d| format!("{d:.1} s")),
            opt(worst_delay, &|d| format!("{d:.1} s")),
            opt(med(&mut r.eta), &|e| format!("{:.1} %", e * 100.0)),
            opt(worst_eta, &|e| format!("{:.1} %", e * 100.0)),
            r.resolve
                .iter()
                .max()
                .map_or_else(|| "–".to_string(), ToString::to_string),
        );
    }
    s
}

/// The two rates every case is judged at: the live default (1 s) and `run`'s (250 ms).
pub const RATES: [Duration; 2] = [Duration::from_secs(1), Duration::from_millis(250)];

/// Runs one file at both [`RATES`] with the default rules.
pub fn run_file(path: &Path) -> Result<Vec<Outcome>, String> {
    let case = load(path)?;
    let rules = Rules::default();
    Ok(RATES
        .iter()
        .flat_map(|&i| score(&case, &feed(&case, i, &rules)))
        .collect())
}
