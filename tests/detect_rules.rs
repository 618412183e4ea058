//! Every rule on scripted histories (1 sample a second), including what must *not* fire:
//! a plateau after a step, periodic eval buffers, a process restarting with a new PID, a value
//! hovering at a threshold.

use std::fmt::Write as _;
use std::time::Duration;

use gpuwatch::detect::{Detector, Finding, FindingEvent, FindingId, RuleKind, Rules};
use gpuwatch::history::History;
use gpuwatch::model::ProcSample;
use gpuwatch::source::scripted::ScriptedSource;
use scenario::Scenario;

const T0: f64 = 1_800_000_000.0;

/// Everything that happened while the scenario ran from 0 to `seconds` at 1 Hz.
struct Run {
    events: Vec<(f64, FindingEvent)>,
    open_at_end: Vec<Finding>,
}

impl Run {
    fn opened(&self, rule: RuleKind) -> Vec<(f64, &Finding)> {
        self.events
            .iter()
            .filter_map(|(t, e)| match e {
                FindingEvent::Opened(f) if f.id.rule == rule => Some((*t, f)),
                _ => None,
            })
            .collect()
    }

    fn resolved(&self, rule: RuleKind) -> Vec<f64> {
        self.events
            .iter()
            .filter_map(|(t, e)| {
                matches!(e, FindingEvent::Resolved(f) if f.id.rule == rule).then_some(*t)
            })
            .collect()
    }
}

/// Runs the scenario twice: over a full history (the dashboard's) and over the daemon's
/// compact one, whose process points older than [`Rules::process_detail`] are merged into
/// 10-second buckets. The two must open and resolve the same findings at the same moments;
/// the compact run is returned.
fn run(scenario: &str, seconds: u32) -> Run {
    run_with(
        scenario,
        seconds,
        Duration::from_mins(15),
        &Rules::default(),
    )
}

fn run_with(scenario: &str, seconds: u32, window: Duration, rules: &Rules) -> Run {
    let full = run_on(scenario, seconds, History::new(window), rules);
    let compact = run_on(
        scenario,
        seconds,
        gpuwatch::detect::compact_history(window, rules),
        rules,
    );
    let transitions = |r: &Run| -> Vec<(f64, &'static str, FindingId)> {
        r.events
            .iter()
            .filter(|(_, e)| !matches!(e, FindingEvent::Updated(_)))
            .map(|(t, e)| (*t, e.kind(), e.finding().id.clone()))
            .collect()
    };
    assert_eq!(
        transitions(&full),
        transitions(&compact),
        "the daemon's compact history finds what the full one finds"
    );
    compact
}

fn run_on(scenario: &str, seconds: u32, mut history: History, rules: &Rules) -> Run {
    let src = ScriptedSource::new(Scenario::parse(scenario).expect("valid scenario"), "test");
    let mut det = Detector::new(rules.clone());
    let mine = |p: &ProcSample| p.host.user.as_deref() == Some("alice");
    let mut events = Vec::new();
    for i in 0..=seconds {
        let t = f64::from(i);
        let sample = src.sample_at(t, T0 + t);
        history.push(&sample);
        for e in det.step(&history, &sample, T0 + t, None, &mine) {
            events.push((t, e));
        }
    }
    Run {
        events,
        open_at_end: det.open().into_iter().cloned().collect(),
    }
}

const GPU: &str = "[[gpu]]\nmemory_total = \"80GiB\"\nmemory_reserved = \"0\"\n";

#[test]
fn a_value_hovering_at_the_line_does_not_flap() {
    // 90 % ± 1 % for two minutes.
    let run = run(
        &format!("{GPU}base_used = {{ linear = [[0, \"72GiB\"]], noise = \"800MiB\" }}\n"),
        120,
    );
    assert!(
        run.opened(RuleKind::NearCapacity).len() <= 1,
        "{:?}",
        run.opened(RuleKind::NearCapacity)
    );
    assert!(
        run.resolved(RuleKind::NearCapacity).is_empty(),
        "no flapping"
    );
}

#[test]
fn near_capacity_opens_after_the_minimum_duration_and_clears_with_hysteresis() {
    // 93 % from t = 30; 87 % (inside the 5-point hysteresis) from t = 90; 80 % from t = 150.
    let run = run(
        &format!(
            "{GPU}base_used = {{ step = [[0, \"40GiB\"], [30, \"74.4GiB\"], [90, \"69.6GiB\"], [150, \"64GiB\"]] }}\n"
        ),
        200,
    );
    let opened = run.opened(RuleKind::NearCapacity);
    assert_eq!(opened.len(), 1);
    assert!(
        (40.0..=42.0).contains(&opened[0].0),
        "after the 10 s minimum: {}",
        opened[0].0
    );
    assert_eq!(
        run.resolved(RuleKind::NearCapacity),
        vec![150.0],
        "stays open at 87 %, clears at 80 %"
    );
}

#[test]
fn a_short_spike_is_not_near_capacity() {
    let run = run(
        &format!(
            "{GPU}base_used = {{ step = [[0, \"40GiB\"], [30, \"76GiB\"], [34, \"40GiB\"]] }}\n"
        ),
        90,
    );
    assert!(run.opened(RuleKind::NearCapacity).is_empty());
}

#[test]
fn critical_at_97_percent_and_low_headroom_counts() {
    let run = run(&format!("{GPU}base_used = \"78.5GiB\"\n"), 30);
    let opened = run.opened(RuleKind::NearCapacity);
    assert_eq!(opened.len(), 1);
    assert_eq!(opened[0].1.severity, gpuwatch::detect::Severity::Critical);
}

#[test]
fn filling_up_fires_on_a_ramp_names_it_and_resolves_when_growth_stops() {
    let run = run(
        &format!(
            "{GPU}[[gpu.process]]\npid = 10\nused = {{ linear = [[0, \"2GiB\"], [60, \"2GiB\"], [120, \"42GiB\"]] }}\nhost = {{ user = \"alice\", command = \"python leak.py\" }}\n[[gpu.process]]\npid = 11\nused = \"8GiB\"\nhost = {{ user = \"bob\", command = \"python idle.py\" }}\n"
        ),
        200,
    );
    let opened = run.opened(RuleKind::FillingUp);
    assert_eq!(opened.len(), 1);
    let (t, f) = opened[0];
    assert!(
        (60.0..=75.0).contains(&t),
        "detected within 15 s of the ramp: {t}"
    );
    assert_eq!(
        f.culprits.iter().map(|c| c.pid).collect::<Vec<_>>(),
        vec![10]
    );
    let ttf = f.time_to_full_s.expect("time to full");
    // ~67 GiB free at ~0.67 GiB/s: about 100 s (the slope still lags just after the start).
    assert!((60.0..=200.0).contains(&ttf), "{ttf}");
    let resolved = run.resolved(RuleKind::FillingUp);
    assert_eq!(resolved.len(), 1);
    assert!(
        (120.0..=140.0).contains(&resolved[0]),
        "resolved after growth stopped: {}",
        resolved[0]
    );
}

#[test]
fn a_partial_free_in_a_trend_that_goes_on_holds_filling_up_and_a_death_resolves_it() {
    // 100 MiB/s from 10 s; at 60 s the job frees 2 GiB of its 5 GiB rise and keeps growing;
    // at 120 s it dies and frees everything.
    let run = run(
        &format!(
            "{GPU}[[gpu.process]]\npid = 10\nend = 120\nused = {{ linear = [[0, \"2GiB\"], [10, \"2GiB\"], [60, \"7000MiB\"], [60.2, \"4952MiB\"], [120, \"10952MiB\"]] }}\nhost = {{ user = \"alice\" }}\n"
        ),
        130,
    );
    let opened = run.opened(RuleKind::FillingUp);
    assert_eq!(
        opened.len(),
        1,
        "opened once: {:?}",
        run.resolved(RuleKind::FillingUp)
    );
    assert!((10.0..=25.0).contains(&opened[0].0), "{}", opened[0].0);
    let resolved = run.resolved(RuleKind::FillingUp);
    assert_eq!(resolved.len(), 1, "{resolved:?}");
    assert!(
        (120.0..=122.0).contains(&resolved[0]),
        "resolved by the death, within 2 samples: {}",
        resolved[0]
    );
}

#[test]
fn a_step_then_a_plateau_is_not_filling_up_nor_a_leak() {
    let run = run(
        &format!(
            "{GPU}[[gpu.process]]\npid = 10\nused = {{ step = [[0, \"10GiB\"], [100, \"30GiB\"]] }}\nhost = {{ user = \"alice\" }}\n"
        ),
        600,
    );
    assert!(
        run.opened(RuleKind::FillingUp).is_empty(),
        "{:?}",
        run.opened(RuleKind::FillingUp)
    );
    assert!(run.opened(RuleKind::LeakSuspected).is_empty());
}

#[test]
fn periodic_eval_buffers_are_not_growth() {
    // 3 GiB every 50 s for 10 s, for 10 minutes.
    let run = run(
        &format!(
            "{GPU}[[gpu.process]]\npid = 10\nused = {{ step = [[0, \"13GiB\"], [40, \"16GiB\"], [50, \"13GiB\"]], period = 50 }}\nhost = {{ user = \"alice\" }}\n"
        ),
        600,
    );
    assert!(
        run.opened(RuleKind::FillingUp).is_empty(),
        "{:?}",
        run.opened(RuleKind::FillingUp)
    );
    assert!(run.opened(RuleKind::LeakSuspected).is_empty());
}

#[test]
fn a_sustained_ramp_past_warmup_is_a_leak() {
    // 60 MiB/min from the start, for 8 minutes.
    let run = run(
        &format!(
            "{GPU}[[gpu.process]]\npid = 10\nused = {{ linear = [[0, \"4GiB\"], [480, \"4.47GiB\"]] }}\nhost = {{ user = \"alice\" }}\n"
        ),
        480,
    );
    let opened = run.opened(RuleKind::LeakSuspected);
    assert_eq!(opened.len(), 1);
    let (t, f) = opened[0];
    assert!(
        t >= 360.0,
        "not before warm-up (1 min) + sustain (5 min): {t}"
    );
    assert_eq!(f.id.pid, Some(10));
    let per_min = f.rate_bytes_per_s.expect("rate") * 60.0 / (1024.0 * 1024.0);
    assert!((45.0..=75.0).contains(&per_min), "{per_min} MiB/min");
}

#[test]
fn a_leak_at_one_and_a_half_times_the_minimum_rate_is_suspected_through_its_noise() {
    // 15 MiB/min (the minimum is 10) with 4 MiB of noise: between two of the 40 points the
    // rule judges it rises 1.9 MiB, under the 4 MiB a single increment needs to count as noise.
    let run = run(
        &format!(
            "{GPU}[[gpu.process]]\npid = 10\nused = {{ linear = [[0, \"18432MiB\"], [1200, \"18732MiB\"]], noise = \"4MiB\" }}\nhost = {{ user = \"alice\" }}\n[[gpu.process]]\npid = 11\nused = {{ linear = [[0, \"2GiB\"]], noise = \"4MiB\" }}\nhost = {{ user = \"bob\" }}\n"
        ),
        600,
    );
    let opened = run.opened(RuleKind::LeakSuspected);
    assert_eq!(
        opened.iter().map(|(_, f)| f.id.pid).collect::<Vec<_>>(),
        vec![Some(10)],
        "the leak, and not the flat noisy holder"
    );
    assert!((360.0..=540.0).contains(&opened[0].0), "{}", opened[0].0);
}

#[test]
fn filling_up_names_the_process_that_fills_the_gpu_not_one_that_creeps() {
    // 100 MiB/s streamed by bob beside alice's job creeping 5 MiB/s (a ramp by itself, 5 %
    // of the growth): the culprit is bob's process alone.
    let run = run(
        &format!(
            "{GPU}[[gpu.process]]\npid = 10\nused = {{ linear = [[0, \"20GiB\"], [300, \"21980MiB\"]] }}\nhost = {{ user = \"alice\" }}\n[[gpu.process]]\npid = 11\nused = {{ linear = [[0, \"1GiB\"], [300, \"31024MiB\"]] }}\nhost = {{ user = \"bob\" }}\n"
        ),
        120,
    );
    let opened = run.opened(RuleKind::FillingUp);
    assert_eq!(opened.len(), 1);
    let named: std::collections::BTreeSet<u32> = run
        .events
        .iter()
        .filter(|(_, e)| e.finding().id.rule == RuleKind::FillingUp)
        .flat_map(|(_, e)| e.finding().culprits.iter().map(|c| c.pid))
        .collect();
    assert_eq!(named, [11].into(), "only the fast one, on every event");
}

#[test]
fn a_process_restarting_with_a_new_pid_is_not_a_leak() {
    // Each life ramps for 3 minutes, then the job restarts under a new PID.
    let mut text = String::from(GPU);
    for (i, start) in [0, 180, 360].iter().enumerate() {
        let _ = write!(
            text,
            "[[gpu.process]]\npid = {}\nstart = {start}\nend = {}\nused = {{ linear = [[{start}, \"1GiB\"], [{}, \"5GiB\"]] }}\nhost = {{ user = \"alice\" }}\n",
            100 + i,
            start + 180,
            start + 180
        );
    }
    let run = run(&text, 540);
    assert!(
        run.opened(RuleKind::LeakSuspected).is_empty(),
        "{:?}",
        run.opened(RuleKind::LeakSuspected)
    );
}

#[test]
fn an_intruder_raises_external_pressure_until_it_leaves() {
    let run = run(
        &format!(
            "{GPU}[[gpu.process]]\npid = 10\nused = \"30GiB\"\nhost = {{ user = \"alice\", command = \"python train.py\" }}\n[[gpu.process]]\npid = 20\nstart = 60\nend = 240\nused = {{ linear = [[60, \"0\"], [70, \"25GiB\"]] }}\nhost = {{ user = \"bob\", command = \"python eval.py\" }}\n"
        ),
        300,
    );
    let opened = run.opened(RuleKind::ExternalPressure);
    assert_eq!(opened.len(), 1);
    let (t, f) = opened[0];
    assert!((60.0..=70.0).contains(&t), "{t}");
    assert_eq!(f.culprits[0].pid, 20);
    assert!(f.summary.contains("pid 20 (bob: python)"), "{}", f.summary);
    // Still open long after the window (1 min) moved on: the baseline is kept.
    assert!(!run.resolved(RuleKind::ExternalPressure).is_empty());
    let resolved = run.resolved(RuleKind::ExternalPressure)[0];
    assert!(
        (240.0..=245.0).contains(&resolved),
        "resolved when it left, not before: {resolved}"
    );
}

#[test]
fn memory_no_one_accounts_for_is_named_as_such() {
    let run = run(
        &format!(
            "{GPU}base_used = {{ step = [[0, \"0\"], [60, \"20GiB\"]] }}\n[[gpu.process]]\npid = 10\nused = \"30GiB\"\nhost = {{ user = \"alice\" }}\n"
        ),
        120,
    );
    let opened = run.opened(RuleKind::ExternalPressure);
    assert_eq!(opened.len(), 1);
    assert!(
        opened[0]
            .1
            .summary
            .contains("memory no visible process accounts for"),
        "{}",
        opened[0].1.summary
    );
}

#[test]
fn an_idle_holder_is_reported_after_ten_minutes() {
    let run = run(
        &format!(
            "{GPU}[[gpu.process]]\npid = 10\nused = \"6GiB\"\nsm = 0\nhost = {{ user = \"carol\", command = \"python -m ipykernel_launcher\" }}\n[[gpu.process]]\npid = 11\nused = \"6GiB\"\nsm = 30\nhost = {{ user = \"alice\" }}\n[[gpu.process]]\npid = 12\nused = \"512MiB\"\nsm = 0\nhost = {{ user = \"dave\" }}\n"
        ),
        660,
    );
    let opened = run.opened(RuleKind::IdleHolder);
    assert_eq!(opened.len(), 1, "only the big idle one");
    assert!(opened[0].0 >= 600.0);
    assert_eq!(opened[0].1.id.pid, Some(10));
    assert_eq!(opened[0].1.bytes, Some(6 << 30));
    assert_eq!(opened[0].1.severity, gpuwatch::detect::Severity::Info);
}

#[test]
fn a_kernel_restarts_the_idle_count_and_the_window_does_not_cap_it() {
    // Idle from 0, one busy second at 300, idle again: not idle for 10 minutes before 901.
    // The history keeps only 5 minutes; idle time is counted as samples arrive, so the rule
    // still sees the full 10 minutes.
    let run = run_with(
        &format!(
            "{GPU}[[gpu.process]]\npid = 10\nused = \"6GiB\"\nsm = {{ step = [[0, 0], [300, 40], [301, 0]] }}\nhost = {{ user = \"carol\" }}\n"
        ),
        960,
        Duration::from_mins(5),
        &Rules::default(),
    );
    let opened = run.opened(RuleKind::IdleHolder);
    assert_eq!(opened.len(), 1, "{:?}", run.events);
    assert!(
        (opened[0].0 - 901.0).abs() < 1e-9,
        "opened at {}",
        opened[0].0
    );
    assert!(
        opened[0]
            .1
            .summary
            .contains("has not used the GPU for 10 min"),
        "{}",
        opened[0].1.summary
    );
    let last = run
        .open_at_end
        .iter()
        .find(|f| f.id.rule == RuleKind::IdleHolder);
    assert!(
        last.expect("still open").summary.contains("for 11 min"),
        "the idle time grows: {:?}",
        last.map(|f| &f.summary)
    );
}

#[test]
fn a_lost_gpu_is_a_critical_source_finding() {
    let run = run(&format!("{GPU}lost_at = 10\nlost_until = 20\n"), 30);
    let opened = run.opened(RuleKind::SourceHealth);
    assert_eq!(opened.len(), 1);
    assert!((opened[0].0 - 10.0).abs() < 1e-9);
    assert_eq!(run.resolved(RuleKind::SourceHealth), vec![20.0]);
    assert!(run.open_at_end.is_empty());
}

#[test]
fn stale_samples_are_reported() {
    let src = ScriptedSource::new(Scenario::parse(GPU).expect("valid"), "t");
    let sample = src.sample_at(0.0, T0);
    let mut history = History::new(Duration::from_mins(10));
    history.push(&sample);
    let mut det = Detector::new(Rules::default());
    let events = det.step(
        &history,
        &sample,
        T0 + 30.0,
        Some(Duration::from_secs(4)),
        &|_| false,
    );
    assert!(
        matches!(&events[..], [FindingEvent::Opened(f)] if f.id.rule == RuleKind::SourceHealth && f.summary.contains("stale"))
    );
}

#[test]
fn an_open_filling_up_names_a_new_driver_within_seconds_and_drops_one_that_left_at_once() {
    // bob streams 100 MiB/s throughout; carol's 20 MiB/s job leaves at 50 s (800 MiB freed:
    // no re-anchoring drop); dave's process, flat until 60 s, streams 100 MiB/s from then.
    let run = run(
        &format!(
            "{GPU}[[gpu.process]]\npid = 11\nused = {{ linear = [[0, \"1GiB\"], [150, \"16000MiB\"]] }}\nhost = {{ user = \"bob\" }}\n[[gpu.process]]\npid = 12\nend = 50\nused = {{ linear = [[0, \"0\"], [50, \"1000MiB\"]] }}\nhost = {{ user = \"carol\" }}\n[[gpu.process]]\npid = 13\nused = {{ linear = [[0, \"1GiB\"], [60, \"1GiB\"], [150, \"10024MiB\"]] }}\nhost = {{ user = \"dave\" }}\n"
        ),
        150,
    );
    assert_eq!(run.opened(RuleKind::FillingUp).len(), 1);
    let named = |pid: u32| -> Vec<f64> {
        run.events
            .iter()
            .filter(|(_, e)| e.finding().id.rule == RuleKind::FillingUp)
            .filter(|(_, e)| e.finding().culprits.iter().any(|c| c.pid == pid))
            .map(|(t, _)| *t)
            .collect()
    };
    assert!(
        named(12).first().is_some_and(|&t| t < 50.0),
        "carol named while she grew"
    );
    assert!(
        named(12).iter().all(|&t| t < 50.0),
        "not after she left: {:?}",
        named(12)
    );
    let dave = named(13);
    assert!(
        dave.first()
            .is_some_and(|&t| (60.0..=60.0 + 15.0 + 5.0).contains(&t)),
        "dave named within a window and the re-judging interval of his ramp: {dave:?}"
    );
    let last = run
        .open_at_end
        .iter()
        .find(|f| f.id.rule == RuleKind::FillingUp)
        .expect("still filling");
    let pids: Vec<u32> = last.culprits.iter().map(|c| c.pid).collect();
    assert_eq!(pids.len(), 2, "{pids:?}");
    assert!(pids.contains(&11) && pids.contains(&13), "{pids:?}");
}

/// At 1 Hz and the default grace (30 s): a process that exits at t = 10 while the driver keeps
/// listing its 5 GiB opens exited-holder at t = 40, not before, naming it with its last known
/// user and command; it resolves when the driver stops listing the PID (t = 70). A process
/// that exits and leaves the list within the grace, and one that was never seen in `/proc`,
/// open nothing.
#[test]
fn an_exited_process_the_driver_still_lists_is_reported_after_the_grace() {
    let run = run(
        &format!(
            "{GPU}[[gpu.process]]\npid = 10\nused = \"5GiB\"\nsm = 0\nend = 70\nhost = {{ user = \"alice\", command = \"python train.py --lr 1\", exited = 10 }}\n\
             [[gpu.process]]\npid = 11\nused = \"3GiB\"\nend = 25\nhost = {{ user = \"bob\", command = \"python eval.py\", exited = 20 }}\n\
             [[gpu.process]]\npid = 12\nused = \"2GiB\"\nhost = {{ hidden = true }}\n"
        ),
        90,
    );
    let opened = run.opened(RuleKind::ExitedHolder);
    assert_eq!(opened.len(), 1, "{:?}", run.events);
    let (t, f) = opened[0];
    assert!((t - 40.0).abs() < 1e-9, "opened at {t}");
    assert_eq!(f.id.pid, Some(10));
    assert_eq!(f.bytes, Some(5 << 30));
    assert_eq!(f.severity, gpuwatch::detect::Severity::Warning);
    assert_eq!(
        f.summary,
        "PID 10 (alice: python) exited 30 s ago but the driver still holds 5.0GiB for it on GPU 0"
    );
    assert_eq!(
        f.culprits[0].command.as_deref(),
        Some("python train.py --lr 1")
    );
    assert!(
        (f.since - (T0 + 10.0)).abs() < 1e-6,
        "since the exit: {}",
        f.since
    );
    assert_eq!(run.resolved(RuleKind::ExitedHolder), vec![70.0]);
}

/// `detect.exited-grace` is the rule's wait: at 5 s the same exit opens at t = 15.
#[test]
fn the_exited_grace_is_the_rules_wait() {
    let rules = Rules {
        exited_grace: Duration::from_secs(5),
        ..Rules::default()
    };
    let run = run_with(
        &format!(
            "{GPU}[[gpu.process]]\npid = 10\nused = \"5GiB\"\nhost = {{ user = \"alice\", exited = 10 }}\n"
        ),
        30,
        Duration::from_mins(15),
        &rules,
    );
    let opened = run.opened(RuleKind::ExitedHolder);
    assert_eq!(opened.len(), 1, "{:?}", run.events);
    assert!(
        (opened[0].0 - 15.0).abs() < 1e-9,
        "opened at {}",
        opened[0].0
    );
}
