//! The `run` command: starts the sampler and the job, picks the job's GPU (`--gpu`,
//! `--min-free`), watches the job on a monitor thread and reports when it ends.

use std::time::{Duration, SystemTime};

use crate::app::{Failure, Result, first_frame, now_secs, runtime, start_with};
use crate::cli::{GlobalArgs, RunArgs};
use crate::config::Config;
use crate::sampler::{Sampler, SamplerOptions};
use crate::watch::WatchSet;

/// `gpuwatch run`: runs the job with its output passed through and signals forwarded; exits
/// with its code (128 + signal when a signal killed it). A job that can't be started exits
/// 127 (not found) or 126 (not executable), like a shell.
/// `gpuwatch run -- CMD…`: the job runs whatever happens to the monitor (no GPU, no driver:
/// it runs unwatched and the report says why); its exit code is ours.
pub(crate) fn run_job(g: &GlobalArgs, config: &Config, args: &RunArgs) -> Result<u8> {
    use crate::run::child::{ChildSpec, TailLimits};
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| Failure::setup("run: no command given"))?;
    let command_text = args
        .command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    let (sampler, mut note) = run_sampler(g, config);
    let env = if args.gpu.is_some() || args.min_free.is_some() {
        gpu_env(config, sampler.as_ref(), args, &mut note)?
    } else {
        Vec::new()
    };
    let env_value = |name: &str| -> Option<String> {
        env.iter()
            .find(|(k, _): &&(std::ffi::OsString, std::ffi::OsString)| k == name)
            .map(|(_, v)| v.to_string_lossy().into_owned())
            .or_else(|| std::env::var(name).ok())
    };
    let visible = env_value("CUDA_VISIBLE_DEVICES");
    let order = env_value("CUDA_DEVICE_ORDER");
    let spec = ChildSpec {
        program: program.clone(),
        args: rest.to_vec(),
        env,
    };
    let running = crate::run::child::spawn(&spec, TailLimits::default()).map_err(|e| Failure {
        code: if e.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        },
        message: e.to_string(),
    })?;
    let child_pid = running.pid();
    // The job runs now: whatever fails from here on is reported, never a reason to leave
    // (which would orphan the job, or with its parent-death signal, kill it).
    let monitor = sampler
        .as_ref()
        .and_then(|s| match start_run_monitor(s, config, child_pid) {
            Ok(m) => Some(m),
            Err(e) => {
                note = Some(e.message);
                None
            }
        });
    let outcome = running
        .wait()
        .map_err(|e| Failure::runtime(format!("lost track of the job: {e}")))?;
    let record = monitor.and_then(RunMonitor::finish);
    drop(sampler);
    let failed = outcome.exit_code() != 0;
    let diagnosis = failed.then(|| {
        let words: Vec<String> = args
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let ctx = record.as_ref().map(|r| {
            crate::run::report::context(
                r,
                child_pid,
                visible.clone(),
                order.clone(),
                crate::triage::batch_size_from_args(&words).map(|(b, _)| b),
                command_text.clone(),
            )
        });
        let mut scanner = crate::triage::Scanner::new();
        for line in &outcome.tail {
            scanner.push_line(line);
        }
        crate::triage::diagnose_job(&scanner.finish(), ctx.as_ref(), Some(outcome.status))
    });
    if !args.quiet {
        let mut text =
            crate::run::report::render(&command_text, &outcome, record.as_ref(), note.as_deref());
        if let Some(d) = &diagnosis {
            text.push('\n');
            text.push_str(&crate::triage::render_text(d));
        }
        crate::stdio::err(&text);
    }
    if let Some(path) = &args.timeline {
        write_timeline(
            path,
            &command_text,
            &outcome,
            record.as_ref(),
            diagnosis.as_ref(),
            args.quiet,
        );
    }
    Ok(outcome.exit_code())
}

/// `--gpu`/`--min-free`: the GPU for the job (after the first sample), as the job's
/// `CUDA_VISIBLE_DEVICES` (by UUID) and `CUDA_DEVICE_ORDER`.
fn gpu_env(
    config: &Config,
    sampler: Option<&Sampler>,
    args: &RunArgs,
    note: &mut Option<String>,
) -> Result<Vec<(std::ffi::OsString, std::ffi::OsString)>> {
    let rt = runtime()?;
    let first = sampler.and_then(|s| match first_frame(&rt, s, config) {
        Ok(f) => Some(f),
        Err(e) => {
            *note = Some(e.message);
            None
        }
    });
    let Some(frame) = &first else {
        return Err(Failure::setup(format!(
            "run: --gpu/--min-free need to see the GPUs: {}",
            note.as_deref().unwrap_or("no sample")
        )));
    };
    let chosen = choose_gpu(&frame.sample, args.gpu.as_deref(), args.min_free)?;
    crate::eprintln_safe!(
        "gpuwatch: running on {} ({}{})",
        describe(&chosen),
        crate::text::clean(&chosen.gpu.uuid),
        chosen
            .memory
            .map(|m| format!(", {} free", crate::output::fmt_bytes(m.free)))
            .unwrap_or_default()
    );
    Ok(vec![
        (
            "CUDA_VISIBLE_DEVICES".into(),
            chosen.uuid.to_string().into(),
        ),
        ("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into()),
    ])
}

/// The sampler `run` watches the job with (at `--interval`, default [`RUN_INTERVAL`]), or why
/// there is none.
fn run_sampler(g: &GlobalArgs, config: &Config) -> (Option<Sampler>, Option<String>) {
    let interval = g.interval.unwrap_or(RUN_INTERVAL);
    let started = start_with(
        g,
        config,
        None,
        false,
        SamplerOptions {
            interval,
            slow_interval: config.sampling.slow_interval.max(interval),
            host_interval: interval,
            host_summary: false,
        },
    );
    match started {
        Ok(s) => (Some(s), None),
        Err(e) => (None, Some(e.message)),
    }
}

/// `run --timeline FILE.svg`. The job's exit code is what matters: a timeline that cannot be
/// written is reported, nothing more.
fn write_timeline(
    path: &std::path::Path,
    command: &str,
    outcome: &crate::run::Outcome,
    record: Option<&crate::run::monitor::RunRecord>,
    diagnosis: Option<&crate::triage::Diagnosis>,
    quiet: bool,
) {
    let unix = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    };
    let gpus = record
        .map(crate::run::monitor::RunRecord::job_gpus)
        .unwrap_or_default();
    let svg = crate::run::timeline::svg(
        command,
        unix(outcome.started),
        &gpus,
        &crate::run::timeline::Ending {
            at: unix(outcome.ended),
            status: outcome.describe(),
            cause: diagnosis.map(|d| d.headline.clone()),
            failed: outcome.exit_code() != 0,
        },
    );
    match std::fs::write(path, svg) {
        Err(e) => crate::eprintln_safe!(
            "gpuwatch: cannot write the timeline '{}': {e}",
            path.display()
        ),
        Ok(()) if !quiet => {
            crate::eprintln_safe!("gpuwatch: timeline written to {}", path.display());
        }
        Ok(()) => {}
    }
}

/// Sampling interval while a job runs (faster than the dashboard's: a job can fill a GPU in
/// seconds).
pub(crate) const RUN_INTERVAL: Duration = Duration::from_millis(250);

/// The device `run` gives the job: a GPU, or a MIG device on one.
struct Chosen<'a> {
    gpu: &'a crate::model::GpuSample,
    /// The UUID for `CUDA_VISIBLE_DEVICES` (the MIG device's when one was named).
    uuid: &'a str,
    memory: Option<crate::model::Memory>,
}

/// `--gpu auto|N|UUID` (and `--min-free`) against the first sample.
fn choose_gpu<'a>(
    sample: &'a crate::model::Sample,
    gpu: Option<&str>,
    min_free: Option<u64>,
) -> Result<Chosen<'a>> {
    let chosen = match gpu.map(str::trim) {
        None | Some("auto") => {
            let g = crate::pick::pick(sample, min_free.unwrap_or(0), 1)
                .map(|v| v[0])
                .map_err(Failure::runtime)?;
            return Ok(Chosen {
                gpu: g,
                uuid: &g.uuid,
                memory: g.memory,
            });
        }
        Some(want) => {
            let wanted: crate::gpuref::GpuRef = want
                .parse()
                .map_err(|e| Failure::setup(format!("--gpu: {e} (or auto)")))?;
            let devices = crate::gpuref::devices(sample);
            let d = crate::gpuref::resolve("--gpu", &wanted, &devices, "here")
                .map_err(Failure::setup)?;
            let g = sample
                .gpus
                .iter()
                .find(|g| {
                    Some(g.uuid.as_str()) == d.parent || (d.parent.is_none() && g.uuid == d.uuid)
                })
                .ok_or_else(|| Failure::setup(format!("--gpu '{wanted}': its GPU is gone")))?;
            // The rule `pick` applies: a lost GPU takes no job (its UUID may be unknown, and
            // an empty CUDA_VISIBLE_DEVICES would run the job on no GPU, or a wrong one).
            if crate::pick::unfit(g) == Some(crate::pick::Unfit::Lost) {
                return Err(Failure::setup(format!(
                    "--gpu '{wanted}': GPU {} is lost (NVML reports it fell off the bus); the job \
                     was not started",
                    g.index
                )));
            }
            let memory = if d.parent.is_some() {
                g.mig_devices
                    .iter()
                    .find(|m| m.uuid.as_deref() == Some(d.uuid))
                    .and_then(|m| m.memory)
            } else {
                g.memory
            };
            Chosen {
                gpu: g,
                uuid: d.uuid,
                memory,
            }
        }
    };
    if let (Some(need), Some(m)) = (min_free, chosen.memory)
        && m.free < need
    {
        return Err(Failure::runtime(format!(
            "{} has {} free, less than --min-free {}",
            describe(&chosen),
            crate::output::fmt_bytes(m.free),
            crate::output::fmt_bytes(need)
        )));
    }
    Ok(chosen)
}

/// "GPU 1", or "MIG device MIG-… on GPU 1".
fn describe(c: &Chosen<'_>) -> String {
    if c.uuid == c.gpu.uuid {
        format!("GPU {}", c.gpu.index)
    } else {
        format!(
            "MIG device {} on GPU {}",
            crate::text::clean(c.uuid),
            c.gpu.index
        )
    }
}

/// The monitor thread of `run`: frames in, a [`crate::run::monitor::RunRecord`] out.
struct RunMonitor {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: std::thread::JoinHandle<crate::run::monitor::RunRecord>,
}

impl RunMonitor {
    fn finish(mut self) -> Option<crate::run::monitor::RunRecord> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.thread.join().ok()
    }
}

fn start_run_monitor(sampler: &Sampler, config: &Config, child: u32) -> Result<RunMonitor> {
    let mut frames = sampler.frames();
    // Only frames taken after the job started.
    frames.borrow_and_update();
    let watch = WatchSet::new(vec![crate::watch::WatchSpec::Pid(child)], None);
    let mut analyzer = crate::analysis::Analyzer::new(
        config.detect.clone(),
        config.history.window,
        crate::analysis::Detail::Full,
        watch,
    );
    // The findings go to the configured sinks as the daemon's and the dashboard's do (the
    // `log` sink's lines on stderr, beside the job's own output). A sink that cannot start (a
    // file that cannot be opened) is said once; the job is watched all the same.
    let alerts = crate::alert::Alerts::start(&config.alerts)
        .inspect_err(|e| crate::eprintln_safe!("gpuwatch: no alerts: {e}"))
        .ok();
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let started = now_secs();
    let thread = std::thread::Builder::new()
        .name("gpuwatch-run-monitor".into())
        .spawn(move || {
            let mut record = crate::run::monitor::RunRecord::new(started);
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return record;
            };
            rt.block_on(async {
                loop {
                    tokio::select! {
                        _ = &mut stopped => break,
                        changed = frames.changed() => {
                            if changed.is_err() {
                                break;
                            }
                            let frame = frames.borrow_and_update().clone();
                            if let Some(frame) = frame {
                                let analysis = analyzer.push(&frame);
                                if let Some(alerts) = &alerts {
                                    for event in &analysis.events {
                                        alerts.send(event);
                                    }
                                }
                                record.observe(&analysis);
                            }
                        }
                    }
                }
            });
            drop(rt);
            if let Some(alerts) = alerts {
                alerts.shutdown(Duration::from_secs(2));
            }
            record
        })
        .map_err(|e| Failure::runtime(format!("cannot start the monitor thread: {e}")))?;
    Ok(RunMonitor {
        stop: Some(stop),
        thread,
    })
}
