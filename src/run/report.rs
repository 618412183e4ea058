//! The report `gpuwatch run` prints to stderr when the job ends: how long it ran, how it ended,
//! per GPU the job's peak memory and when, everyone else's peak and who held it, the growth
//! findings of the run; and, when the job failed, the diagnosis (see [`crate::triage`]).
//!
//! Pure: built from the [`RunRecord`] and the job's [`Outcome`].

use std::fmt::Write as _;

use super::child::Outcome;
use super::monitor::{GpuRun, RunRecord};
use crate::output::fmt_bytes;
use crate::text::{clean, clean_or};
use crate::triage::{Context, GpuView, ProcView};

fn unix(t: std::time::SystemTime) -> f64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `+1m58s` from the start of the run.
pub fn offset(started: f64, t: f64) -> String {
    let s = (t - started).max(0.0).round() as u64;
    if s >= 3600 {
        format!("+{}h{:02}m{:02}s", s / 3600, (s % 3600) / 60, s % 60)
    } else if s >= 60 {
        format!("+{}m{:02}s", s / 60, s % 60)
    } else {
        format!("+{s}s")
    }
}

fn duration(secs: f64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(secs.max(0.0).round() as u64))
        .to_string()
        .replace(' ', "")
}

fn holder_line(h: &super::monitor::Holder) -> String {
    let mut s = format!("pid {} ", h.pid);
    if let Some(u) = &h.user {
        let _ = write!(s, "({}) ", clean(u));
    }
    let _ = write!(s, "{}", fmt_bytes(h.bytes));
    if let Some(c) = &h.command {
        let c: String = clean(c).chars().take(60).collect();
        let _ = write!(s, "  {c}");
    }
    s
}

fn gpu_lines(out: &mut String, started: f64, g: &GpuRun) {
    let _ = writeln!(
        out,
        "  GPU {} ({}, {}){}",
        g.index,
        clean_or(g.name.as_deref(), "GPU"),
        clean(&g.uuid),
        g.total
            .map(|t| format!(", {} total", fmt_bytes(t)))
            .unwrap_or_default()
    );
    match g.job_peak {
        Some((b, t)) => {
            let _ = writeln!(
                out,
                "    job peak       {} at {}",
                fmt_bytes(b),
                offset(started, t)
            );
        }
        None => {
            let _ = writeln!(out, "    job peak       none (the job held no memory here)");
        }
    }
    if let Some((b, t, holders, unattributed)) = &g.external_peak {
        let _ = writeln!(
            out,
            "    others' peak   {} at {}{}",
            fmt_bytes(*b),
            offset(started, *t),
            if *b == 0 {
                " (the GPU was the job's alone)"
            } else {
                ""
            }
        );
        for h in holders.iter().take(5) {
            let _ = writeln!(out, "      {}", holder_line(h));
        }
        if holders.len() > 5 {
            let _ = writeln!(out, "      … and {} more", holders.len() - 5);
        }
        if *unattributed > 0 {
            let _ = writeln!(
                out,
                "      {} held by no process visible here (other containers, the driver)",
                fmt_bytes(*unattributed)
            );
        }
    }
}

/// The report (without the diagnosis). `note` says why the GPU was not watched, if it was not.
pub fn render(
    command: &str,
    outcome: &Outcome,
    record: Option<&RunRecord>,
    note: Option<&str>,
) -> String {
    let started = unix(outcome.started);
    let ended = unix(outcome.ended);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "gpuwatch: {}: {} after {}",
        clean(command),
        outcome.describe(),
        duration(ended - started)
    );
    if let Some(note) = note {
        let _ = writeln!(out, "  GPUs not watched: {}", clean(note));
    }
    let Some(record) = record else { return out };
    let gpus = record.job_gpus();
    if gpus.is_empty() {
        let _ = writeln!(
            out,
            "  the job held no GPU memory that the driver reported{}",
            if record.frames == 0 {
                " (no sample was taken: the job ended first)"
            } else {
                " (in a container NVML may not show its processes)"
            }
        );
    }
    for g in gpus {
        gpu_lines(&mut out, started, g);
    }
    if !record.findings.is_empty() {
        let _ = writeln!(out, "  during the run:");
        for f in &record.findings {
            let _ = writeln!(
                out,
                "    [{}] {} ({})",
                f.severity,
                clean(&f.summary),
                offset(started, f.since)
            );
        }
    }
    out
}

/// What the monitor saw, for the diagnosis: every GPU at the last moment the job held
/// memory (else the latest frame), the job's PIDs, the CUDA variables the job ran with.
pub fn context(
    record: &RunRecord,
    child_pid: u32,
    visible: Option<String>,
    order: Option<String>,
    batch_size: Option<u64>,
    command: String,
) -> Context {
    let mut job_pids: Vec<u32> = record.job_pids.iter().copied().collect();
    if !job_pids.contains(&child_pid) {
        job_pids.push(child_pid);
    }
    let frame = record.last_with_job.as_ref().or(record.latest.as_ref());
    let gpus = frame.map_or_else(Vec::new, |f| {
        f.sample
            .gpus
            .iter()
            .filter(|g| !g.lost)
            .filter_map(|g| {
                let mem = g.memory?;
                Some(GpuView {
                    index: g.index,
                    uuid: g.uuid.clone(),
                    pci_bus_id: g.pci_bus_id.clone(),
                    name: clean_or(g.name.as_deref(), "GPU").into_owned(),
                    total: mem.total,
                    used: mem.used,
                    free: mem.free,
                    processes: g
                        .processes
                        .iter()
                        .map(|p| ProcView {
                            pid: p.pid,
                            bytes: p.used_bytes.unwrap_or(0),
                            // The diagnosis quotes them in text lines.
                            user: p.host.user.as_deref().map(|u| clean(u).into_owned()),
                            command: p
                                .host
                                .command
                                .as_deref()
                                .or(p.host.name.as_deref())
                                .map(|c| clean(c).into_owned()),
                            is_job: job_pids.contains(&p.pid),
                        })
                        .collect(),
                })
            })
            .collect()
    });
    Context {
        job_pids,
        cuda_visible_devices: visible,
        cuda_device_order: order,
        gpus,
        batch_size,
        command: Some(command),
    }
}
