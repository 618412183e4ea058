//! `gpuwatch daemon`: the pipeline without a screen — sampler, history, detector, alert sinks —
//! logging plain lines to stderr, until SIGTERM or SIGINT.
//!
//! The HTTP side (`/metrics`, the JSON API, SSE; see [`crate::serve`]) runs on the same
//! runtime; the loop publishes the latest frame, the open findings and the growth after each
//! frame. The local history store joins it later.

use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};

use crate::alert::Alerts;
use crate::config::Config;
use crate::detect::Detector;
use crate::history::History;
use crate::model::ProcSample;
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
    let mut store = history_path.and_then(|path| match crate::store::Store::open(path) {
        Ok(store) => {
            eprintln!("gpuwatch: recording history in {}", path.display());
            Some(store)
        }
        Err(e) => {
            eprintln!("gpuwatch: no local history: {e}");
            None
        }
    });
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
    eprintln!(
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
    eprintln!(
        "gpuwatch: listening on http://{bound}{}",
        if shared.options.token.is_some() {
            " (bearer token required)"
        } else {
            ""
        }
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
        eprintln!("gpuwatch: history: {e}");
    }
    for s in alerts.shutdown(Duration::from_secs(2)) {
        eprintln!(
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
    eprintln!("gpuwatch: daemon stopped");
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
    let mut frames = sampler.frames();
    // Compact: the daemon's memory is mostly this history (8 GPUs × 64 processes × 10 min).
    let mut history = crate::detect::compact_history(config.history.window, &config.detect);
    let mut detector = Detector::new(config.detect.clone());
    let interval = config.sampling.interval;
    // Staleness is judged on a tick, since a stuck source sends no frame to judge it by.
    let stale_after = interval * 3 + Duration::from_secs(1);
    let mut tick = tokio::time::interval(interval.max(Duration::from_millis(500)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut latest = None;
    let mut dropped: std::collections::HashMap<&'static str, u64> =
        std::collections::HashMap::new();
    let mut source_open = true;
    // "Mine", decided once per frame: the rules and the server ask many times per process.
    let mut mine = std::collections::HashSet::new();
    loop {
        let events = tokio::select! {
            biased;
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
            changed = frames.changed(), if source_open => {
                if changed.is_err() {
                    source_open = false;
                    eprintln!("gpuwatch: the source ended");
                    continue;
                }
                let Some(frame) = frames.borrow_and_update().clone() else { continue };
                history.push(&frame.sample);
                if let Some(store) = store.as_deref_mut() {
                    // A full disk is reported (once per kind of error) and sampling goes on.
                    match store.write(&frame.sample) {
                        Ok(()) => last_store_error = None,
                        Err(e) => {
                            let text = e.to_string();
                            if last_store_error.as_deref() != Some(text.as_str()) {
                                eprintln!("gpuwatch: history not recorded: {}", clean(&text));
                                last_store_error = Some(text);
                            }
                        }
                    }
                }
                mine = watch.pids_in(&frame.sample, &crate::source::procinfo::read_ppid);
                let watched = |p: &ProcSample| mine.contains(&p.pid);
                let events = detector.step(&history, &frame.sample, frame.sample.taken_at, None, &watched);
                publish(shared, &frame, &history, &detector, config, &watched);
                shared.publish_frame(&frame);
                latest = Some(frame);
                events
            },
            _ = tick.tick() => {
                // Downsampling and retention once a minute.
                if let Some(store) = store.as_deref_mut()
                    && last_maintain.elapsed() >= Duration::from_mins(1)
                {
                    last_maintain = std::time::Instant::now();
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0.0, |d| d.as_secs_f64());
                    if let Err(e) = store.maintain(now) {
                        eprintln!("gpuwatch: history maintenance failed: {e}");
                    }
                }
                // Drops are reported as they happen, not only at the end.
                for s in alerts.stats() {
                    let before = dropped.insert(s.name, s.dropped).unwrap_or(0);
                    if s.dropped > before {
                        eprintln!(
                            "gpuwatch: sink {} dropped {} event(s): its queue is full (it is slow or failing{})",
                            s.name,
                            s.dropped - before,
                            s.last_error.as_ref().map(|e| format!(": {}", clean(e))).unwrap_or_default()
                        );
                    }
                }
                match &latest {
                    Some(frame) if frame.age() > stale_after => {
                        let now = frame.sample.taken_at + frame.age().as_secs_f64();
                        let watched = |p: &ProcSample| mine.contains(&p.pid);
                        let events = detector.step(&history, &frame.sample, now, Some(stale_after), &watched);
                        if !events.is_empty() {
                            let open = detector.open().into_iter().cloned().collect();
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

/// Hands the server what it reads: the latest frame, the watched PIDs, the open findings, the
/// growth per GPU and the failed calls so far.
fn publish(
    shared: &Shared,
    frame: &Arc<crate::model::Frame>,
    history: &History,
    detector: &Detector,
    config: &Config,
    watched: &dyn Fn(&ProcSample) -> bool,
) {
    let over = config.detect.filling_window;
    let pids = frame
        .sample
        .gpus
        .iter()
        .flat_map(|g| g.processes.iter())
        .filter(|p| watched(p))
        .map(|p| p.pid)
        .collect();
    let growth = frame
        .sample
        .gpus
        .iter()
        .filter_map(|g| {
            let h = history.gpu(&g.uuid)?;
            Some((
                g.uuid.clone(),
                (
                    h.growth_bytes_per_s(over),
                    h.time_to_full(over).map(|d| d.as_secs_f64()),
                ),
            ))
        })
        .collect();
    let findings = detector.open().into_iter().cloned().collect();
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
        s.watched = pids;
        s.growth = growth;
        s.findings = findings;
    });
}
