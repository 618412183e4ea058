//! `gpuwatch daemon`: the pipeline without a screen — sampler, history, detector, alert sinks —
//! logging plain lines to stderr, until SIGTERM, SIGINT or SIGHUP (each a clean stop).
//!
//! The HTTP side (`/metrics`, the JSON API, SSE; see [`crate::serve`]) runs on the same
//! runtime; the loop publishes the latest frame, the open findings and the growth after each
//! frame. The local history store joins it later.

use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};

use crate::alert::Alerts;
use crate::analysis::{Analysis, Analyzer, Detail};
use crate::config::Config;
use crate::sampler::Sampler;
use crate::serve::{Options, Shared};
use crate::text::clean;
use crate::watch::WatchSet;

/// Runs until a terminating signal; returns the sinks' final statistics as log lines.
pub fn run(
    sampler: &Sampler,
    watch: &WatchSet,
    config: &Config,
    mut server: Options,
    history_path: Option<&std::path::Path>,
) -> Result<(), String> {
    let listener = crate::serve::bind(server.listen)?;
    // The local history is worth having, not worth stopping for: a file that cannot be opened
    // is reported and the daemon runs without it.
    // A file that is the wrong one (another daemon's, another program's, a newer schema's)
    // stops the start: running on would lose the history or double it.
    let mut store = match history_path.map(crate::store::Store::open) {
        None => None,
        Some(Ok(store)) => {
            crate::eprintln_safe!("gpuwatch: recording history in {}", store.path().display());
            Some(store)
        }
        Some(Err(e)) if e.is_refusal() => return Err(e.to_string()),
        Some(Err(e)) => {
            crate::eprintln_safe!("gpuwatch: no local history: {e}");
            None
        }
    };
    let bound = listener
        .local_addr()
        .map_err(|e| format!("cannot listen on {}: {e}", server.listen))?;
    let alerts = Alerts::start(&config.alerts)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    if store.is_some() {
        server.history = history_path.map(std::path::Path::to_path_buf);
    }
    let shared = Shared::new(server);
    {
        let _guard = rt.enter();
        crate::serve::spawn(listener, Arc::clone(&shared))?;
    }
    let info = sampler.info();
    crate::eprintln_safe!(
        "gpuwatch: daemon started: {} source ({}), interval {}, sinks: {}",
        info.kind,
        clean(&info.detail),
        humantime::format_duration(config.sampling.interval),
        alerts
            .stats()
            .iter()
            .map(|s| s.name)
            .collect::<Vec<_>>()
            .join(", ")
    );
    crate::eprintln_safe!(
        "gpuwatch: listening on http://{bound}{}",
        if shared.options.token.is_some() {
            " (bearer token required)"
        } else {
            ""
        }
    );
    let limits = shared.options.limits;
    crate::eprintln_safe!(
        "gpuwatch: HTTP limits: {} connections, {} event streams (max-connections and max-event-streams, capped by the open-files limit of {}), idle timeout {}, request timeout {}",
        limits.max_connections,
        limits.max_event_streams,
        crate::serve::open_files_limit().map_or_else(|| "unlimited".to_string(), |n| n.to_string()),
        humantime::format_duration(limits.idle_timeout),
        humantime::format_duration(limits.request_timeout),
    );
    rt.block_on(pipeline(
        sampler,
        watch,
        config,
        &alerts,
        &shared,
        store.as_mut(),
    ))?;
    if let Some(store) = store.as_mut()
        && let Err(e) = store.checkpoint()
    {
        crate::eprintln_safe!("gpuwatch: history: {e}");
    }
    for s in alerts.shutdown(Duration::from_secs(2)) {
        crate::eprintln_safe!(
            "gpuwatch: sink {}: {} delivered, {} failed, {} dropped{}",
            s.name,
            s.delivered,
            s.failed,
            s.dropped,
            s.last_error
                .map(|e| format!(" (last error: {})", clean(&e)))
                .unwrap_or_default()
        );
    }
    crate::eprintln_safe!("gpuwatch: daemon stopped");
    Ok(())
}

async fn pipeline(
    sampler: &Sampler,
    watch: &WatchSet,
    config: &Config,
    alerts: &Alerts,
    shared: &Shared,
    mut store: Option<&mut crate::store::Store>,
) -> Result<(), String> {
    let mut last_store_error: Option<String> = None;
    let mut last_maintain = std::time::Instant::now();
    let mut sigterm = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    // SIGHUP (the terminal or the session went away; `systemctl reload` without a reload
    // command) stops the daemon cleanly too: the history checkpointed, the alerts flushed.
    // There is no configuration reload: restart the daemon to apply a new configuration.
    let mut sighup = signal(SignalKind::hangup()).map_err(|e| e.to_string())?;
    let mut frames = sampler.frames();
    // Compact: the daemon's memory is mostly this history (8 GPUs × 64 processes × 10 min).
    let mut analyzer = Analyzer::new(
        config.detect.clone(),
        config.history.window,
        Detail::Compact,
        watch.clone(),
    );
    // A scenario's past (the demo's stories): findings open from the first frame.
    analyzer.prime(sampler.take_past(), &sampler.info());
    let interval = config.sampling.interval;
    // Staleness is judged on a tick, since a stuck source sends no frame to judge it by.
    let stale_after = interval * 3 + Duration::from_secs(1);
    let mut tick = tokio::time::interval(interval.max(Duration::from_millis(500)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut latest = None;
    let mut dropped: std::collections::HashMap<&'static str, u64> =
        std::collections::HashMap::new();
    let mut source_open = true;
    let mut proc_errors = (0u64, std::time::Instant::now());
    loop {
        let events = tokio::select! {
            biased;
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
            _ = sighup.recv() => {
                crate::eprintln_safe!("gpuwatch: SIGHUP: stopping (there is no reload; restart to apply a new configuration)");
                break;
            }
            changed = frames.changed(), if source_open => {
                if changed.is_err() {
                    source_open = false;
                    crate::eprintln_safe!("gpuwatch: the source ended");
                    continue;
                }
                let Some(frame) = frames.borrow_and_update().clone() else { continue };
                if let Some(store) = store.as_deref_mut() {
                    record(store, &frame.sample, &mut last_store_error);
                }
                let analysis = analyzer.push(&frame);
                publish(shared, sampler, &analysis);
                shared.publish_frame(&frame);
                latest = Some(frame);
                analysis.events
            },
            _ = tick.tick() => {
                // The calls the sampler is in: named by /metrics and /api/v1/health even
                // before the first frame.
                let calls = sampler.in_flight_all();
                shared.update(|s| s.in_flight = calls);
                // Downsampling and retention once a minute.
                if let Some(store) = store.as_deref_mut()
                    && last_maintain.elapsed() >= Duration::from_mins(1)
                {
                    last_maintain = std::time::Instant::now();
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0.0, |d| d.as_secs_f64());
                    if let Err(e) = store.maintain(now) {
                        crate::eprintln_safe!("gpuwatch: history maintenance failed: {e}");
                    }
                }
                report_proc_errors(&mut proc_errors);
                report_drops(alerts, &mut dropped);
                match &latest {
                    Some(frame) if frame.age() > stale_after => {
                        let now = frame.sample.taken_at + frame.age().as_secs_f64();
                        let events = analyzer.tick(frame, now, stale_after);
                        if !events.is_empty() {
                            let open = analyzer.open().into_iter().cloned().collect();
                            shared.update(|s| s.findings = open);
                        }
                        events
                    }
                    _ => Vec::new(),
                }
            },
        };
        for event in &events {
            shared.publish_finding(event);
            alerts.send(event);
        }
    }
    Ok(())
}

/// Writes one sample to the history; a failure (a full disk) is reported once per kind of
/// error and sampling goes on.
fn record(
    store: &mut crate::store::Store,
    sample: &crate::model::Sample,
    last: &mut Option<String>,
) {
    match store.write(sample) {
        Ok(()) => *last = None,
        Err(e) => {
            let text = e.to_string();
            if last.as_deref() != Some(text.as_str()) {
                crate::eprintln_safe!("gpuwatch: history not recorded: {}", clean(&text));
                *last = Some(text);
            }
        }
    }
}

/// Logs what each alert sink dropped since the last report, as it happens, not only at the
/// end; `dropped` is the count reported per sink.
fn report_drops(alerts: &Alerts, dropped: &mut std::collections::HashMap<&'static str, u64>) {
    for s in alerts.stats() {
        let before = dropped.insert(s.name, s.dropped).unwrap_or(0);
        if s.dropped > before {
            crate::eprintln_safe!(
                "gpuwatch: sink {} dropped {} event(s): its queue is full (it is slow or failing{})",
                s.name,
                s.dropped - before,
                s.last_error
                    .as_ref()
                    .map(|e| format!(": {}", clean(e)))
                    .unwrap_or_default()
            );
        }
    }
}

/// Logs `/proc` read failures (out of descriptors…) since the last report, at most every
/// 10 s; `last` is the count reported and when.
fn report_proc_errors(last: &mut (u64, std::time::Instant)) {
    let failed = crate::source::procinfo::read_errors();
    if failed > last.0 && last.1.elapsed() >= Duration::from_secs(10) {
        crate::eprintln_safe!(
            "gpuwatch: {} /proc read(s) failed (last: {}); the processes keep their known facts",
            failed - last.0,
            clean(&crate::source::procinfo::last_read_error().unwrap_or_default())
        );
        *last = (failed, std::time::Instant::now());
    }
}

/// Hands the server what it reads: the latest frame, the watched PIDs, the open findings, the
/// growth per GPU and the failed calls so far.
fn publish(shared: &Shared, sampler: &Sampler, analysis: &Analysis) {
    let frame = &analysis.frame;
    let pids = frame
        .sample
        .gpus
        .iter()
        .flat_map(|g| g.processes.iter())
        .filter(|p| analysis.is_mine(p))
        .map(|p| p.pid)
        .collect();
    let growth = analysis
        .gpus
        .iter()
        .map(|g| (g.uuid.clone(), (g.growth_bytes_per_s, g.time_to_full_s)))
        .collect();
    let findings = analysis.findings.clone();
    let in_flight = sampler.in_flight_all();
    shared.update(|s| {
        let errors = frame
            .sample
            .errors
            .iter()
            .chain(frame.sample.gpus.iter().flat_map(|g| g.errors.iter()));
        for e in errors {
            *s.collect_errors.entry(e.call.clone()).or_insert(0) += 1;
        }
        s.latest = Some(Arc::clone(frame));
        s.in_flight = in_flight;
        s.watched = pids;
        s.growth = growth;
        s.findings = findings;
    });
}
