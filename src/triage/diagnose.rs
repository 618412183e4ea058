//! Diagnosis: the analysis of the text combined with what the monitor saw.
//!
//! # Out of memory: which case
//! * **External pressure** when memory held by other processes (the message's `Process N has …`
//!   lines that are not the job, and/or other processes in the [`Context`]'s view of that GPU)
//!   would have let the request fit (`requested ≤ free + external`), is a real share of what
//!   the job needed (≥ 25 % of the job's own use + the request), and the job alone would fit on
//!   the GPU (own use + request ≤ total). Without a request size, other
//!   processes holding ≥ 25 % of the GPU. Fixes: another GPU (with a context: the GPU with the
//!   most free memory now, if it fits the job's footprint), then the other processes by name,
//!   then the job's own footprint.
//! * **Fragmentation** when PyTorch's reserved-but-unallocated memory is at least the request
//!   and material (≥ 1 GiB or ≥ 5 % of what it reserved), or a large share of what it reserved
//!   (≥ 25 % and ≥ 1 GiB), and the request would have fit in the free memory plus the cache
//!   (`requested ≤ free + reserved_unallocated`). Only then is
//!   `PYTORCH_ALLOC_CONF=expandable_segments:True` the first fix (older versions read
//!   `PYTORCH_CUDA_ALLOC_CONF`, still accepted as an alias); it is never recommended otherwise.
//! * **Own tensors** otherwise: reduce the per-device batch first (when the batch is known, the
//!   largest batch that fits ≈ ⌊B × 0.9 × usable ÷ needed⌋ with needed = allocated, plus the
//!   request, plus non-PyTorch overhead, and usable = total − external − overhead; this assumes
//!   memory grows
//!   with the batch, so it overestimates when weights and optimizer state dominate, hence the
//!   10 % margin), then gradient accumulation to keep the effective batch, mixed precision,
//!   activation checkpointing; `empty_cache` only when the cache (reserved − allocated) is large.
//! * A bare `CUDA error: out of memory` (no numbers) and no context: the case is unknown; say
//!   what is missing and suggest `gpuwatch run`.
//!
//! # Containers
//! Inside a container PyTorch sees its own process under the host PID and prints it as
//! `Process N has …` (without the `this process has` sentence). A listed process is the job's
//! when its pid is one of the job's pids, or (with job pids in the context) its memory equals
//! the job's own total within 1 %, or (text alone, no `this process` sentence) it holds at least
//! what PyTorch reserved.

use std::fmt::Write as _;

use serde::Serialize;

use super::size::fmt_size;
use super::{Analysis, Failure, Framework, KnownFailure, OomFacts, ShapeFacts, ShapeKind};
use crate::run::{Exit, signal_name};

use signal_hook::consts::{SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGKILL, SIGSEGV};

const GIB: u64 = 1 << 30;

/// What the monitor saw around the failure; `explain` passes `None`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Context {
    pub job_pids: Vec<u32>,
    pub cuda_visible_devices: Option<String>,
    pub cuda_device_order: Option<String>,
    /// Every GPU at (or just before) the failure.
    pub gpus: Vec<GpuView>,
    /// The per-device batch size, if known (see [`batch_size_from_args`]).
    pub batch_size: Option<u64>,
    /// The job's command line, for the fixes' snippets (`explain` says `python train.py …`).
    pub command: Option<String>,
}

/// The job's command line for a snippet.
fn job_command(ctx: Option<&Context>) -> String {
    ctx.and_then(|c| c.command.clone())
        .unwrap_or_else(|| "python train.py …".to_string())
}

/// One GPU as the monitor saw it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuView {
    /// NVML index.
    pub index: u32,
    pub uuid: String,
    pub pci_bus_id: Option<String>,
    pub name: String,
    pub total: u64,
    pub used: u64,
    /// Free as NVML reports it: the driver's reserved memory is neither used nor free, so
    /// this is less than `total - used`.
    pub free: u64,
    /// Processes at the failure or at their peak.
    pub processes: Vec<ProcView>,
}

/// One process on a GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcView {
    pub pid: u32,
    pub bytes: u64,
    pub user: Option<String>,
    pub command: Option<String>,
    pub is_job: bool,
}

/// Which case the diagnosis settled on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Case {
    ExternalPressure,
    OwnTensors,
    Fragmentation,
    /// Out of memory under a per-process cap (`set_per_process_memory_fraction`, MPS's high
    /// watermark, a TF/XLA memory fraction, a MIG slice), not a full GPU.
    Cap,
    /// Out of memory, but neither the text nor the context says why.
    OutOfMemoryUnclear,
    DeviceMismatch,
    ShapeMismatch,
    Known(KnownFailure),
    Unknown,
}

/// One fix: a title and its detail (may hold a code or shell snippet, indented).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fix {
    pub title: String,
    pub detail: String,
}

/// How sure the diagnosis is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Confidence {
    /// The text states the failure and, for an out-of-memory, its numbers decide the case.
    Certain,
    /// The failure is stated, but the case is inferred (numbers missing or cut), or the
    /// message was cut before its facts.
    Likely,
    /// Inferred from indirect signs (a cuDNN status error that is often an OOM, no known
    /// failure at all).
    Possible,
}

impl Confidence {
    /// The stable name of `explain --json`'s `confidence`.
    pub fn label(self) -> &'static str {
        match self {
            Confidence::Certain => "certain",
            Confidence::Likely => "likely",
            Confidence::Possible => "possible",
        }
    }
}

impl Case {
    /// The stable name of `explain --json`'s `cause` for an out-of-memory, `None` for the
    /// other kinds (their kind says it).
    pub fn cause(self) -> Option<&'static str> {
        Some(match self {
            Case::ExternalPressure => "other_processes",
            Case::OwnTensors => "own_tensors",
            Case::Fragmentation => "fragmentation",
            Case::Cap => "cap",
            Case::OutOfMemoryUnclear => "unclear",
            _ => return None,
        })
    }
}

/// The diagnosis: the case, a headline, the facts, the fixes in the order to try them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnosis {
    pub case: Case,
    pub confidence: Confidence,
    pub headline: String,
    /// The one line of arithmetic that decided the case ("reserved − allocated = 57.55 GiB,
    /// more than the 1.00 GiB asked, and 293.12 MiB free: fragmentation").
    pub reasoning: Option<String>,
    /// Where the message's numbers do not add up, what is missing or contradictory.
    pub checks: Vec<String>,
    /// What `gpuwatch run` would add when the text alone cannot decide.
    pub run_would_add: Option<String>,
    pub facts: Vec<String>,
    pub fixes: Vec<Fix>,
    /// The NVML index of the GPU that failed, when the ordinal could be mapped.
    pub nvml_gpu: Option<u32>,
    /// The largest per-device batch estimated to fit (own-tensor OOM, batch known).
    pub suggested_batch: Option<u64>,
    pub analysis: Analysis,
}

fn fix(title: impl Into<String>, detail: impl Into<String>) -> Fix {
    Fix {
        title: title.into(),
        detail: detail.into(),
    }
}

// ---------------------------------------------------------------------------------------------
// Batch size from the command line

/// Reads the batch size from a command line: `--batch-size N`, `--batch_size=N`, `--bs N`,
/// `-b N`, `batch_size=N` (Hydra-style, also dotted `data.batch_size=N`),
/// `--per_device_train_batch_size N`, `--micro_batch_size N`, `--train_batch_size N`.
/// Returns the size and the flag as written.
pub fn batch_size_from_args(args: &[String]) -> Option<(u64, String)> {
    const FLAGS: [&str; 14] = [
        "--per_device_train_batch_size",
        "--per-device-train-batch-size",
        "--per_gpu_train_batch_size",
        "--micro_batch_size",
        "--micro-batch-size",
        "--train_batch_size",
        "--train-batch-size",
        "--batch-size",
        "--batch_size",
        "--batchsize",
        "--batchSize",
        "--bs",
        "-bs",
        "-b",
    ];
    const KEYS: [&str; 4] = [
        "per_device_train_batch_size",
        "micro_batch_size",
        "batch_size",
        "bs",
    ];
    for (i, arg) in args.iter().enumerate() {
        let arg = arg.as_str();
        for flag in FLAGS {
            if arg == flag {
                if let Some(n) = args.get(i + 1).and_then(|v| v.trim().parse::<u64>().ok()) {
                    return Some((n, flag.to_string()));
                }
            } else if let Some(v) = arg.strip_prefix(flag).and_then(|r| r.strip_prefix('='))
                && let Ok(n) = v.trim().parse::<u64>()
            {
                return Some((n, flag.to_string()));
            }
        }
        if !arg.starts_with('-')
            && let Some((key, value)) = arg.split_once('=')
        {
            let last = key
                .trim_start_matches('+')
                .rsplit('.')
                .next()
                .unwrap_or(key);
            if KEYS.contains(&last)
                && let Ok(n) = value.trim().parse::<u64>()
            {
                return Some((n, key.to_string()));
            }
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// CUDA ordinal → NVML index

fn norm_bus(id: &str) -> String {
    // NVML prints "00000000:3B:00.0"; CUDA and lspci "0000:3b:00.0". Compare the domain as a
    // number, the rest case-insensitively.
    let lower = id.trim().to_ascii_lowercase();
    match lower.split_once(':') {
        Some((domain, rest)) => {
            let d = u64::from_str_radix(domain, 16).unwrap_or(0);
            format!("{d:x}:{rest}")
        }
        None => lower,
    }
}

/// Maps a CUDA ordinal (as printed by the framework) to the NVML index of that GPU.
///
/// * `order`: `CUDA_DEVICE_ORDER`, as [`cuda_order`] reads it; with mixed models and CUDA's
///   default order, this returns `None`.
/// * `visible` (`CUDA_VISIBLE_DEVICES`): `None` = all GPUs; otherwise as [`cuda_visible`]
///   reads it (`""` = no GPU). A `MIG-` entry names a MIG instance, which has no NVML device
///   index of its own: such an ordinal maps to `None`.
pub fn map_ordinal(
    ordinal: u32,
    visible: Option<&str>,
    order: Option<&str>,
    gpus: &[GpuView],
) -> Option<u32> {
    let ordered = cuda_order(order, gpus)?;
    let Some(visible) = visible else {
        return ordered.get(ordinal as usize).map(|g| g.index);
    };
    match cuda_visible(visible, Some(&ordered), gpus).get(ordinal as usize) {
        Some(CudaDevice::Gpu(index)) => Some(*index),
        _ => None,
    }
}

/// One device that `CUDA_VISIBLE_DEVICES` names, in the order CUDA numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CudaDevice<'v> {
    /// A GPU, by NVML index.
    Gpu(u32),
    /// A MIG instance, as the entry wrote it (it has no NVML index of its own).
    Mig(&'v str),
}

/// The GPUs in CUDA's numbering. `order` (`CUDA_DEVICE_ORDER`): `PCI_BUS_ID` enumerates by
/// PCI bus id; otherwise CUDA's default `FASTEST_FIRST`, which on a machine where all GPUs are
/// the same model matches NVML's order (assumed). `None` when that is not knowable from here:
/// mixed models in the default order, or a GPU without a bus id.
pub fn cuda_order<'g>(order: Option<&str>, gpus: &'g [GpuView]) -> Option<Vec<&'g GpuView>> {
    let mut ordered: Vec<&GpuView> = gpus.iter().collect();
    if order.is_some_and(|o| o.trim().eq_ignore_ascii_case("PCI_BUS_ID")) {
        if ordered.iter().any(|g| g.pci_bus_id.is_none()) {
            return None;
        }
        ordered.sort_by_key(|g| g.pci_bus_id.as_deref().map(norm_bus));
    } else {
        ordered.sort_by_key(|g| g.index);
        if let Some(first) = ordered.first()
            && ordered.iter().any(|g| g.name != first.name)
        {
            return None; // FASTEST_FIRST over mixed models: not knowable from here
        }
    }
    Some(ordered)
}

/// The devices `visible` (`CUDA_VISIBLE_DEVICES`) names, as CUDA reads it: integers are
/// positions in `ordered` ([`cuda_order`]; `None`: not knowable, so an integer is as invalid),
/// UUIDs are matched among `gpus` with or without `GPU-` (unique prefixes are accepted, as
/// CUDA does), `MIG-` entries name MIG instances. `""` names no GPU. The first empty, invalid,
/// ambiguous or repeated entry ends the list, as CUDA does.
pub fn cuda_visible<'v>(
    visible: &'v str,
    ordered: Option<&[&GpuView]>,
    gpus: &[GpuView],
) -> Vec<CudaDevice<'v>> {
    let mut list: Vec<CudaDevice<'v>> = Vec::new();
    for entry in visible.split(',') {
        let entry = entry.trim();
        if entry.is_empty() {
            break;
        }
        let found = if entry.bytes().all(|b| b.is_ascii_digit()) {
            match entry.parse::<usize>().ok().and_then(|i| ordered?.get(i)) {
                Some(g) => g.index,
                None => break,
            }
        } else if entry.starts_with("MIG-") {
            list.push(CudaDevice::Mig(entry));
            continue;
        } else {
            let want = entry
                .strip_prefix("GPU-")
                .unwrap_or(entry)
                .to_ascii_lowercase();
            let matches: Vec<&GpuView> = gpus
                .iter()
                .filter(|g| {
                    g.uuid
                        .strip_prefix("GPU-")
                        .unwrap_or(&g.uuid)
                        .to_ascii_lowercase()
                        .starts_with(&want)
                })
                .collect();
            match matches.as_slice() {
                [g] => g.index,
                _ => break,
            }
        };
        if list.contains(&CudaDevice::Gpu(found)) {
            break;
        }
        list.push(CudaDevice::Gpu(found));
    }
    list
}

// ---------------------------------------------------------------------------------------------
// Diagnosis

/// Combines the analysis with the context (or `None` for the text alone).
pub fn diagnose(analysis: &Analysis, ctx: Option<&Context>) -> Diagnosis {
    diagnose_job(analysis, ctx, None)
}

/// [`diagnose`], knowing how the job ended (`run` does; `explain` has only the text): when
/// the text holds no GPU failure and no traceback, the exit code or the signal is what is
/// known, and the diagnosis says it.
pub fn diagnose_job(analysis: &Analysis, ctx: Option<&Context>, ended: Option<Exit>) -> Diagnosis {
    let mut d = Diagnosis {
        case: Case::Unknown,
        confidence: Confidence::Certain,
        headline: String::new(),
        reasoning: None,
        checks: Vec::new(),
        run_would_add: None,
        facts: Vec::new(),
        fixes: Vec::new(),
        nvml_gpu: None,
        suggested_batch: None,
        analysis: analysis.clone(),
    };
    match &analysis.failure {
        Failure::OutOfMemory(f) => oom(&mut d, f, ctx),
        Failure::DeviceMismatch(f) => device(&mut d, f),
        Failure::ShapeMismatch(f) => shape(&mut d, f),
        Failure::Known(k, line) => known(&mut d, *k, line, ctx),
        Failure::Unknown if !analysis.traceback && analysis.traceback_hint.is_none() => {
            d.confidence = Confidence::Possible;
            no_traceback(&mut d, analysis, ctx, ended);
        }
        Failure::Unknown => {
            d.confidence = Confidence::Possible;
            d.headline = "No known GPU failure in the text: a logic bug to read in the traceback"
                .to_string();
            if let Some(line) = analysis.excerpt.first() {
                d.facts.push(format!("last error: {line}"));
            }
            d.fixes.push(fix(
                "Read the traceback from the last frame of your own code",
                match &analysis.traceback_hint {
                    Some(h) => format!("The error was raised from: {h}"),
                    None => "Look for the last `File \"…\"` line that is your code.".to_string(),
                },
            ));
        }
    }
    if let Some(h) = &analysis.traceback_hint {
        d.facts.push(format!("raised from {h}"));
    }
    d
}

/// No GPU failure and no traceback in the text: say what is known (how the job ended, whether
/// it printed anything) and where to look, never "read the traceback".
fn no_traceback(d: &mut Diagnosis, a: &Analysis, ctx: Option<&Context>, ended: Option<Exit>) {
    let printed = if a.empty {
        "printed nothing"
    } else {
        "printed no GPU failure and no traceback"
    };
    d.headline = match ended {
        Some(Exit::Signal(SIGKILL)) => format!(
            "The job was killed by SIGKILL (signal 9) and {printed}: usually the host's \
             out-of-memory killer or a container (cgroup) memory limit"
        ),
        Some(Exit::Signal(s)) => format!(
            "The job was killed by {} (signal {s}) and {printed}",
            signal_name(s)
        ),
        Some(Exit::Code(c)) => format!("The job exited with code {c} and {printed}"),
        None if a.empty => "The log is empty: there is nothing to diagnose in it".to_string(),
        None => "No known GPU failure and no traceback in the text".to_string(),
    };
    if let Some(e) = ended {
        d.facts.push(format!("the job ended: {}", e.describe()));
    }
    if a.empty {
        d.facts.push(
            if ended.is_some() {
                "its output (stdout and stderr) was empty"
            } else {
                "the log is empty"
            }
            .to_string(),
        );
    } else if let Some(line) = a.excerpt.first() {
        d.facts.push(format!("last error: {line}"));
    } else {
        d.facts
            .push("no error line and no Python traceback in the output".to_string());
    }
    let command = job_command(ctx);
    match ended {
        Some(Exit::Signal(SIGKILL)) => {
            d.fixes.push(fix(
                "Check whether the kernel's out-of-memory killer killed it",
                "    dmesg -T | grep -iE 'out of memory|oom-kill'\n    \
                 journalctl -k | grep -iE 'out of memory|oom-kill'\n\
                 \"Out of memory: Killed process <pid>\" naming the job (or one of its workers) \
                 means host memory (RAM) ran out, not GPU memory: fewer data-loader workers, \
                 less prefetching, less data held in RAM.",
            ));
            d.fixes.push(fix(
                "In a container or a cgroup: check its memory limit",
                "    cat /sys/fs/cgroup/memory.max\n    cat /sys/fs/cgroup/memory.events\n\
                 An oom_kill count above 0 in memory.events means the container's limit killed \
                 it (Kubernetes shows OOMKilled; cgroup v1 has memory.limit_in_bytes and \
                 memory.failcnt): raise the limit or lower the job's host memory.",
            ));
            d.fixes.push(fix(
                "Otherwise something sent it SIGKILL",
                "A scheduler's time or memory limit (Slurm, Kubernetes), a watchdog or a \
                 `kill -9`: see the scheduler's log for this job.",
            ));
        }
        Some(Exit::Signal(s)) if [SIGILL, SIGABRT, SIGBUS, SIGFPE, SIGSEGV].contains(&s) => {
            d.fixes.push(fix(
                "It crashed in native code: get the stack of the crash",
                format!(
                    "A C++/CUDA extension or a library crashed ({}). Python prints the stack \
                     of every thread at the crash with:\n    PYTHONFAULTHANDLER=1 {command}",
                    signal_name(s)
                ),
            ));
        }
        Some(Exit::Signal(s)) => d.fixes.push(fix(
            format!("Find what sent it {}", signal_name(s)),
            "A scheduler's time limit or preemption, Ctrl-C, a closed terminal, or another \
             process: see the scheduler's log for this job.",
        )),
        Some(Exit::Code(c)) => d.fixes.push(fix(
            format!("Find where the job exits with code {c}"),
            if a.empty {
                format!(
                    "It printed nothing: its own code (or its launcher) chose to exit with {c}. \
                     Look for sys.exit({c}) or exit({c}) there, and log before exiting."
                )
            } else {
                format!(
                    "Its own code (or its launcher) chose to exit with {c}: look for \
                     sys.exit({c}) or exit({c}), and read the last lines it printed."
                )
            },
        )),
        None => d.fixes.push(fix(
            "Keep the job's whole output, and how it ended",
            format!(
                "    gpuwatch run -- {command}\nkeeps the end of stdout and stderr and says the \
                 exit code or the signal (a job killed with SIGKILL prints nothing)."
            ),
        )),
    }
}

/// A process that held memory on the failed GPU and is not the job.
#[derive(Debug, Clone)]
struct Other {
    pid: u32,
    bytes: u64,
    user: Option<String>,
    command: Option<String>,
}

impl Other {
    fn describe(&self) -> String {
        let mut s = format!("pid {} ({})", self.pid, fmt_size(self.bytes));
        match (&self.user, &self.command) {
            (Some(u), Some(c)) => {
                let _ = write!(s, ", user {u}: {}", short(c, 60));
            }
            (Some(u), None) => {
                let _ = write!(s, ", user {u}");
            }
            (None, Some(c)) => {
                let _ = write!(s, ": {}", short(c, 60));
            }
            (None, None) => {}
        }
        s
    }
}

fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let cut: String = s.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

/// Sizes come from untrusted text: add without overflowing.
fn sum_bytes(values: impl Iterator<Item = u64>) -> u64 {
    values.fold(0, u64::saturating_add)
}

fn within_1pct(a: u64, b: u64) -> bool {
    let (hi, lo) = if a > b { (a, b) } else { (b, a) };
    (hi - lo) as f64 <= hi as f64 * 0.01
}

#[allow(clippy::too_many_lines)]
fn oom(d: &mut Diagnosis, f: &OomFacts, ctx: Option<&Context>) {
    let visible_count = ctx
        .and_then(|c| c.cuda_visible_devices.as_deref())
        .map(|v| v.split(',').filter(|e| !e.trim().is_empty()).count());
    let single = visible_count == Some(1) || ctx.is_some_and(|c| c.gpus.len() == 1);
    let ordinal = f.gpu.or(if single { Some(0) } else { None });
    let nvml = match (ctx, ordinal) {
        (Some(c), Some(o)) => map_ordinal(
            o,
            c.cuda_visible_devices.as_deref(),
            c.cuda_device_order.as_deref(),
            &c.gpus,
        ),
        _ => None,
    };
    d.nvml_gpu = nvml;
    let view = ctx
        .zip(nvml)
        .and_then(|(c, i)| c.gpus.iter().find(|g| g.index == i));
    let job_pids: &[u32] = ctx.map_or(&[], |c| c.job_pids.as_slice());
    let job_bytes_ctx: Option<u64> = view.map(|g| {
        sum_bytes(
            g.processes
                .iter()
                .filter(|p| p.is_job || job_pids.contains(&p.pid))
                .map(|p| p.bytes),
        )
    });

    // Which of the message's processes are the job itself (container pid namespaces).
    let mut own_total = f.process_total;
    let mut others: Vec<Other> = Vec::new();
    for &(pid, bytes) in &f.processes {
        let is_job = job_pids.contains(&pid)
            || (!job_pids.is_empty()
                && (f.process_total.is_some_and(|t| within_1pct(t, bytes))
                    || job_bytes_ctx.is_some_and(|t| t > 0 && within_1pct(t, bytes))))
            || (ctx.is_none_or(|c| c.job_pids.is_empty())
                && f.process_total.is_none()
                && own_total.is_none()
                && f.reserved
                    .is_some_and(|r| r > 0 && bytes >= r && bytes - r <= 4 * GIB));
        if is_job {
            own_total = Some(own_total.map_or(bytes, |t| t.max(bytes)));
            d.facts.push(format!(
                "Process {pid} in the message ({}) is this job (seen under another PID namespace)",
                fmt_size(bytes)
            ));
            continue;
        }
        let pv = view.and_then(|g| g.processes.iter().find(|p| p.pid == pid));
        others.push(Other {
            pid,
            bytes,
            user: pv.and_then(|p| p.user.clone()),
            command: pv.and_then(|p| p.command.clone()),
        });
    }
    if let Some(g) = view {
        for p in &g.processes {
            if p.is_job || job_pids.contains(&p.pid) || others.iter().any(|o| o.pid == p.pid) {
                continue;
            }
            // The job itself under a namespaced pid: same memory as the job's own total.
            if f.process_total.is_some_and(|t| within_1pct(t, p.bytes)) && job_bytes_ctx == Some(0)
            {
                continue;
            }
            others.push(Other {
                pid: p.pid,
                bytes: p.bytes,
                user: p.user.clone(),
                command: p.command.clone(),
            });
        }
    }
    others.sort_by_key(|o| std::cmp::Reverse(o.bytes));
    // Memory no visible process accounts for (other containers, other PID namespaces) is
    // external too; below 1 GiB it is driver overhead and noise.
    let unattributed = view
        .map(|g| {
            let listed = sum_bytes(g.processes.iter().map(|p| p.bytes));
            g.used.saturating_sub(listed)
        })
        .filter(|u| *u >= GIB)
        .unwrap_or(0);
    let external = sum_bytes(others.iter().map(|o| o.bytes)).saturating_add(unattributed);
    let own = own_total
        .or(job_bytes_ctx.filter(|b| *b > 0))
        .or(f.reserved)
        .or(f.allocated);
    let total = f.total.or(view.map(|g| g.total)).or(f.limit);
    let free = f.free.or(view.map(|g| g.free));

    // Facts.
    let gpu_name = match (f.gpu, nvml) {
        (Some(o), Some(n)) if o != n => format!("GPU {o} (CUDA ordinal; NVML GPU {n})"),
        (Some(o), _) => format!("GPU {o}"),
        (None, Some(n)) => format!("GPU {n}"),
        (None, None) => "the GPU".to_string(),
    };
    if ctx.is_some() && ordinal.is_some() && nvml.is_none() {
        d.facts.push(
            "which physical GPU this was is uncertain (mixed GPU models without \
             CUDA_DEVICE_ORDER=PCI_BUS_ID, or a MIG instance)"
                .to_string(),
        );
    }
    let framework = match f.framework {
        Framework::PyTorch => "PyTorch",
        Framework::Cublas => "cuBLAS",
        Framework::Cudnn => "cuDNN",
        Framework::Jax => "JAX/XLA",
        Framework::TensorFlow => "TensorFlow",
        Framework::Rocm => "PyTorch on ROCm",
        Framework::Mps => "PyTorch on MPS",
        Framework::Other => "a CUDA library",
    };
    let mut line = format!("{framework} ran out of memory on {gpu_name}");
    if let Some(r) = f.requested {
        let _ = write!(line, " asking for {}", fmt_size(r));
    }
    d.facts.push(line);
    if let (Some(t), Some(fr)) = (total, free) {
        d.facts.push(format!(
            "total {}, free {} at the failure",
            fmt_size(t),
            fmt_size(fr)
        ));
    }
    if let Some(o) = own {
        d.facts.push(format!("this job held {}", fmt_size(o)));
    }
    if let (Some(a), Some(r)) = (f.allocated, f.reserved) {
        d.facts.push(format!(
            "PyTorch: {} allocated to live tensors, {} reserved ({} cached but unallocated)",
            fmt_size(a),
            fmt_size(r),
            fmt_size(r.saturating_sub(a))
        ));
    }
    for o in &others {
        d.facts
            .push(format!("another process held memory: {}", o.describe()));
    }
    if unattributed > 0 {
        d.facts.push(format!(
            "{} on the GPU belonged to no process visible here (another container?)",
            fmt_size(unattributed)
        ));
    }

    let requested = f.requested;
    let needed_by_job = own.unwrap_or(0).saturating_add(requested.unwrap_or(0));
    // The GPU had room: free (the allocator measures it after releasing its cache) far
    // exceeds the request, so neither the card nor the cache was the limit.
    // The margin (a tenth of the request, at least 256 MiB) covers the allocator's rounding and
    // the driver's granularity, where a request just below the free figure still fails.
    let room = matches!((requested, free), (Some(r), Some(fr))
        if fr >= r.saturating_add((r / 10).max(256 << 20)));
    let external_case = external > 0
        && !room
        && match (requested, free) {
            (Some(r), Some(fr)) => {
                r <= fr.saturating_add(external)
                    && (needed_by_job == 0 || external.saturating_mul(4) >= needed_by_job)
                    // a job that could never fit on this GPU alone is not a victim of others
                    && total.is_none_or(|t| own.is_none() || needed_by_job <= t)
            }
            _ => total.is_some_and(|t| external.saturating_mul(4) >= t),
        };
    let unalloc = f.reserved_unallocated;
    // Material: at least 1 GiB or 5 % of what PyTorch reserved; a few MiB of cached small
    // blocks next to a small request is not what expandable segments fix.
    let material = |u: u64| u >= GIB || f.reserved.is_some_and(|r| u.saturating_mul(20) >= r);
    let frag_case = !room
        && unalloc.is_some_and(|u| {
            u > 0
                && ((requested.is_some_and(|r| u >= r) && material(u))
                    || (u >= GIB && f.reserved.is_some_and(|r| u.saturating_mul(4) >= r)))
                // A request larger than the cache and the free memory together would not
                // have fit even in a perfectly compacted cache.
                && match (requested, free) {
                    (Some(r), Some(fr)) => r <= fr.saturating_add(u),
                    _ => true,
                }
        });
    // A cap the message prints: PyTorch's `… allowed;` (set_per_process_memory_fraction),
    // MPS's `max allowed` (its high watermark), or a BFC allocator limit well below the card.
    let held = [f.reserved, f.allocated, f.process_total]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(0);
    let cap = f
        .allowed
        .map(|a| (a, "allowed"))
        .or(match (f.limit, total) {
            // TensorFlow's default limit is what was free at start (most of the card);
            // a fraction set by hand, or JAX's default 75 %, is well below it.
            (Some(l), Some(t)) if l.saturating_mul(100) < t.saturating_mul(80) => {
                Some((l, "the allocator's limit"))
            }
            _ => None,
        })
        // Within 2 % counts: the figures are rounded to two decimals, and an allocator grows
        // by whole blocks or heaps larger than the request.
        .filter(|(a, _)| {
            room || held
                .saturating_add(requested.unwrap_or(0))
                .saturating_mul(50)
                >= a.saturating_mul(49)
        });
    // Old wording, no process list: what neither PyTorch nor the free pool holds was held by
    // the CUDA context, other processes or a display. New wording without `Process N` lines
    // (a container, ROCm): what this process does not hold.
    let outside = match (f.total, f.free, f.reserved, f.process_total) {
        (Some(t), Some(fr), Some(r), None) if f.processes.is_empty() && ctx.is_none() => Some((
            t.saturating_sub(fr).saturating_sub(r),
            r,
            "PyTorch reserved",
        )),
        (Some(t), Some(fr), _, Some(p)) if f.processes.is_empty() && ctx.is_none() => Some((
            t.saturating_sub(fr).saturating_sub(p),
            p,
            "this process held",
        )),
        _ => None,
    }
    .filter(|(o, _, _)| *o >= GIB / 2 && total.is_some_and(|t| o.saturating_mul(4) >= t));
    // Held outside the job, more than the job itself: others, not the job's tensors.
    let outside_case = !room
        && outside.is_some_and(|(o, mine, _)| o > mine && o >= GIB)
        // The request did not fit in what was free, and would have with the memory held outside.
        && requested.is_none_or(|r| {
            free.is_none_or(|fr| fr < r && r <= fr.saturating_add(outside.map_or(0, |x| x.0)))
        });
    // What the job itself held, or the GPU's state: without either, "own tensors" is a guess.
    let has_numbers = f.allocated.is_some() || own.is_some() || (total.is_some() && free.is_some());
    check_sums(d, f, total, free);
    let asked = requested.map_or_else(String::new, |r| format!(" than the {} asked", fmt_size(r)));

    if let Some((limit, what)) = cap {
        d.case = Case::Cap;
        d.confidence = Confidence::Certain;
        let full_too = !room && free.zip(requested).is_some_and(|(fr, r)| fr < r);
        d.reasoning = Some(format!(
            "{} held{} against {} {what}{}",
            fmt_size(held),
            requested.map_or_else(String::new, |r| format!(" + {} asked", fmt_size(r))),
            fmt_size(limit),
            match free {
                Some(fr) if room => format!(
                    ", while {} was free: a per-process cap, not a full GPU",
                    fmt_size(fr)
                ),
                _ if full_too =>
                    ": the cap refused it, and the GPU had no room left either".to_string(),
                _ => ": a per-process cap, not a full GPU".to_string(),
            }
        ));
        d.headline = format!(
            "Out of memory on {gpu_name} under a per-process cap of {}{}",
            fmt_size(limit),
            match free {
                Some(fr) if room => format!(", with {} of the GPU still free", fmt_size(fr)),
                Some(fr) => format!("; the GPU was nearly full as well ({} free)", fmt_size(fr)),
                None => String::new(),
            }
        );
        cap_fixes(d, f, ctx);
        own_fixes(d, f, ctx, total, external, false);
        framework_fixes(d, f);
        return;
    }
    if room && !external_case {
        let (r, fr) = (requested.unwrap_or(0), free.unwrap_or(0));
        d.case = Case::Cap;
        d.confidence = Confidence::Likely;
        d.reasoning = Some(format!(
            "{} free, more{asked}: the GPU had room, so a limit the message does not \
             print refused it (a memory fraction, a MIG slice, a container or driver limit) \
             or another process took the memory at that moment",
            fmt_size(fr)
        ));
        d.headline = format!(
            "Out of memory on {gpu_name} although {} was free for a {} request: a limit, not a \
             full GPU",
            fmt_size(fr),
            fmt_size(r)
        );
        d.run_would_add = Some(
            "`gpuwatch run -- …` records every process on the GPU up to the failure, which \
             tells a cap from another process that took the memory."
                .to_string(),
        );
        cap_fixes(d, f, ctx);
        own_fixes(d, f, ctx, total, external, false);
        framework_fixes(d, f);
        return;
    }
    if outside_case && !external_case && !frag_case {
        let (o, mine, what) = outside.unwrap_or((0, 0, ""));
        d.case = Case::ExternalPressure;
        d.confidence = Confidence::Likely;
        d.reasoning = Some(format!(
            "total − free − {} = {} held outside this job, more than the {} {what}: other \
             processes (the message does not list them)",
            if what == "PyTorch reserved" {
                "reserved"
            } else {
                "this process"
            },
            fmt_size(o),
            fmt_size(mine)
        ));
        d.headline = format!(
            "Out of memory on {gpu_name}: {} of it was held outside this job, which {what} \
             only {}",
            fmt_size(o),
            fmt_size(mine)
        );
        d.facts.push(format!(
            "{} of the GPU was held outside this job (other processes, or this process's own \
             non-PyTorch memory)",
            fmt_size(o)
        ));
        d.run_would_add = Some(
            "`gpuwatch run -- …` names the processes that held the rest when the job failed."
                .to_string(),
        );
        d.fixes
            .push(another_gpu(ctx, nvml, needed_by_job.max(mine)));
        d.fixes.push(fix(
            "Find what else holds the GPU",
            format!(
                "{} is not this job's: `gpuwatch` (or nvidia-smi) shows which processes hold \
                 it; stop them, wait for them, or ask their owner.",
                fmt_size(o)
            ),
        ));
        own_fixes(d, f, ctx, total, external, false);
        framework_fixes(d, f);
        return;
    }
    if external_case {
        d.case = Case::ExternalPressure;
        d.reasoning = Some(format!(
            "other processes held {}{}: without them the request fits",
            fmt_size(external),
            match (requested, free) {
                (Some(r), Some(fr)) => format!(
                    "; {} free + {} ≥ the {} asked",
                    fmt_size(fr),
                    fmt_size(external),
                    fmt_size(r)
                ),
                _ => String::new(),
            }
        ));
        if requested.is_none() || free.is_none() {
            d.confidence = Confidence::Likely;
        }
        let mut names: Vec<String> = others
            .iter()
            .take(3)
            .map(|o| format!("pid {} ({})", o.pid, fmt_size(o.bytes)))
            .collect();
        if unattributed > 0 {
            names.push(format!("{} unattributed", fmt_size(unattributed)));
        }
        d.headline = format!(
            "Out of memory on {gpu_name}: other processes held {} ({}){}",
            fmt_size(external),
            names.join(", "),
            match requested {
                Some(r) => format!(
                    ", and the {} request would have fit without them",
                    fmt_size(r)
                ),
                None => String::new(),
            }
        );
        let footprint = needed_by_job.max(own.unwrap_or(0));
        d.fixes.push(another_gpu(ctx, nvml, footprint));
        let mut who = String::new();
        for o in &others {
            let _ = writeln!(who, "{}", o.describe());
        }
        who.push_str(
            "If they are yours, stop them or wait for them; if not, ask their owner. \
             `gpuwatch history` shows who held the GPU when.",
        );
        d.fixes
            .push(fix("Free the memory the other processes hold", who));
        own_fixes(d, f, ctx, total, external, false);
    } else if frag_case {
        d.case = Case::Fragmentation;
        let u = unalloc.unwrap_or(0);
        d.reasoning = Some(format!(
            "reserved − allocated = {}, more{asked}{}: fragmentation",
            fmt_size(u),
            free.map_or_else(String::new, |fr| format!(
                ", and only {} free",
                fmt_size(fr)
            ))
        ));
        if requested.is_none() {
            d.confidence = Confidence::Likely;
        }
        d.headline = format!(
            "Out of memory on {gpu_name} from fragmentation: {} was reserved by PyTorch but \
             unallocated{}",
            fmt_size(u),
            match requested {
                Some(r) => format!(", yet no free block of {} was left", fmt_size(r)),
                None => String::new(),
            }
        );
        d.fixes.push(fix(
            "Let the caching allocator grow segments instead of carving fixed blocks",
            format!(
                "    PYTORCH_ALLOC_CONF=expandable_segments:True {}\n\
                 PYTORCH_ALLOC_CONF is the name since PyTorch 2.9; older versions read \
                 PYTORCH_CUDA_ALLOC_CONF (still accepted as an alias). On versions without \
                 expandable segments, `max_split_size_mb:512` limits the splitting of large \
                 blocks.",
                job_command(ctx)
            ),
        ));
        d.fixes.push(fix(
            "Release the cache between phases",
            "If memory changes shape between phases (train → eval, varying sequence lengths), \
             `torch.cuda.empty_cache()` between them returns cached blocks; padding inputs to a \
             few fixed sizes keeps the blocks reusable.",
        ));
        own_fixes(d, f, ctx, total, external, false);
    } else if let (Some(r), Some(t)) = (requested, total)
        && r > t
    {
        d.case = Case::OwnTensors;
        d.reasoning = Some(format!(
            "the {} asked is more than the GPU's {}: no GPU of this size fits it",
            fmt_size(r),
            fmt_size(t)
        ));
        d.headline = format!(
            "Out of memory on {gpu_name}: one allocation of {} is larger than the whole GPU \
             ({})",
            fmt_size(r),
            fmt_size(t)
        );
        own_fixes(d, f, ctx, total, external, true);
    } else if has_numbers || view.is_some() {
        d.case = Case::OwnTensors;
        d.reasoning = Some(match (own, total) {
            (Some(o), Some(t)) if requested.is_some_and(|r| r > o) => format!(
                "the {} asked is more than all the job held ({} of {}){}: one allocation too \
                 large for what was left",
                fmt_size(requested.unwrap_or(0)),
                fmt_size(o),
                fmt_size(t),
                free.map_or_else(String::new, |fr| format!(", with {} free", fmt_size(fr)))
            ),
            (Some(o), Some(t)) => format!(
                "this job held {} of {}{}{}: its own memory filled the GPU",
                fmt_size(o),
                fmt_size(t),
                requested.map_or_else(String::new, |r| format!(", asked {} more", fmt_size(r))),
                free.map_or_else(String::new, |fr| format!(", {} free", fmt_size(fr)))
            ),
            _ => "no other process and no cache in the numbers: the job's own memory".to_string(),
        });
        if own.is_none() || total.is_none() {
            d.confidence = Confidence::Likely;
            d.run_would_add = Some(
                "`gpuwatch run -- …` measures how much this job and every other process held \
                 when it failed."
                    .to_string(),
            );
        }
        let mut headline = format!("Out of memory on {gpu_name}: the job's own tensors filled it");
        if let (Some(o), Some(t)) = (own, total) {
            let _ = write!(
                headline,
                " ({} of {}{})",
                fmt_size(o),
                fmt_size(t),
                match requested {
                    Some(r) => format!(", {} more requested", fmt_size(r)),
                    None => String::new(),
                }
            );
        }
        d.headline = headline;
        if let Some((o, _, _)) = outside {
            d.facts.push(format!(
                "{} of the GPU was held outside PyTorch (the CUDA context, other processes, a \
                 display)",
                fmt_size(o)
            ));
            d.fixes.push(fix(
                "Check what else holds the GPU",
                format!(
                    "{} is not PyTorch's: `gpuwatch` (or nvidia-smi) shows which processes hold \
                     it; `gpuwatch run -- …` names them when the job fails.",
                    fmt_size(o)
                ),
            ));
        }
        own_fixes(d, f, ctx, total, external, true);
    } else {
        d.case = Case::OutOfMemoryUnclear;
        d.confidence = Confidence::Likely;
        d.reasoning = Some("the message gives no numbers to decide who held the memory".into());
        d.run_would_add = Some(
            "`gpuwatch run -- …` watches the job and every other process on its GPU and names \
             the case when it fails (other processes, its own tensors, fragmentation, a cap)."
                .to_string(),
        );
        d.headline = match requested {
            Some(r) => format!(
                "{framework} ran out of GPU memory asking for {}; the message does not say who \
                 held the rest",
                fmt_size(r)
            ),
            None => format!("{framework} ran out of GPU memory, but the message gives no numbers"),
        };
        d.facts.push(format!(
            "unknown: {}how much this job held, and whether other processes held memory",
            if requested.is_none() {
                "how much was requested, "
            } else {
                ""
            }
        ));
        match f.framework {
            Framework::Cublas | Framework::Cudnn => d.facts.push(format!(
                "{framework} could not allocate its workspace or handle: the GPU was already full \
                 (often at the first matmul/convolution)"
            )),
            _ => {}
        }
        d.fixes.push(fix(
            "Run the job under gpuwatch to see who held the memory",
            "    gpuwatch run -- python train.py …\n\
             It watches the job and every other process on its GPU and names the case when it \
             fails (other processes, your own tensors, or fragmentation).",
        ));
        own_fixes(d, f, ctx, total, external, true);
    }
    framework_fixes(d, f);
}

/// Where the message's numbers do not add up, say which is missing or contradictory rather
/// than guess: `d.checks`.
fn check_sums(d: &mut Diagnosis, f: &OomFacts, total: Option<u64>, free: Option<u64>) {
    let slack = |t: u64| (t / 20).max(GIB);
    if let (Some(t), Some(a)) = (total, f.allocated)
        && a > t
    {
        d.checks.push(format!(
            "allocated {} is more than the total {}: the numbers come from different GPUs or \
             processes, or the total is a cap",
            fmt_size(a),
            fmt_size(t)
        ));
    }
    if let (Some(p), Some(r)) = (f.process_total, f.reserved)
        && p.saturating_add(64 << 20) < r
    {
        d.checks.push(format!(
            "this process's {} in use is less than the {} PyTorch reserved: the driver could \
             not see this process (a container's PID namespace), so its figure is missing",
            fmt_size(p),
            fmt_size(r)
        ));
    }
    if let (Some(t), Some(fr)) = (total, free) {
        let used = t.saturating_sub(fr);
        let mine = f.process_total.or(f.reserved);
        let others: u64 = sum_bytes(f.processes.iter().map(|(_, b)| *b));
        if let Some(m) = mine {
            let accounted = m.saturating_add(others);
            if accounted > used.saturating_add(slack(t)) {
                d.checks.push(format!(
                    "this job and the listed processes hold {}, more than the {} in use \
                     (total − free): the figures were taken at different moments",
                    fmt_size(accounted),
                    fmt_size(used)
                ));
            } else if used > accounted.saturating_add(slack(t)) && !f.processes.is_empty() {
                d.checks.push(format!(
                    "{} in use is in no number of the message (total − free − this process − \
                     the listed processes): processes the driver did not list, or its reserve",
                    fmt_size(used - accounted)
                ));
            }
        }
    }
}

/// Fixes for an out-of-memory under a per-process cap.
fn cap_fixes(d: &mut Diagnosis, f: &OomFacts, ctx: Option<&Context>) {
    let detail = match f.framework {
        Framework::Mps => format!(
            "The cap is MPS's high watermark. Raise it, at the risk of swapping the whole \
             machine:\n    PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 {}",
            job_command(ctx)
        ),
        Framework::TensorFlow => "TensorFlow's allocator took a fraction of the GPU: raise \
             `per_process_gpu_memory_fraction` (TF1 `GPUOptions`) or the virtual device's \
             `memory_limit`, or use `tf.config.experimental.set_memory_growth`."
            .to_string(),
        Framework::Jax => "JAX preallocates a fraction of the GPU (75 % by default): raise \
             XLA_PYTHON_CLIENT_MEM_FRACTION (e.g. .95), or set \
             XLA_PYTHON_CLIENT_PREALLOCATE=false to allocate on demand."
            .to_string(),
        _ => "Look for `torch.cuda.set_per_process_memory_fraction` in the code or its \
             libraries, a MIG slice (`nvidia-smi -L` lists MIG devices), or a container or \
             scheduler limit on GPU memory, and raise it."
            .to_string(),
    };
    d.fixes.push(fix("Raise or remove the cap", detail));
}

fn another_gpu(ctx: Option<&Context>, failed: Option<u32>, footprint: u64) -> Fix {
    let Some(ctx) = ctx else {
        return fix(
            "Use a GPU that has room",
            format!(
                "    gpuwatch pick --min-free {}\nprints the GPUs with that much free, for \
                 CUDA_VISIBLE_DEVICES.",
                fmt_size(footprint.max(GIB)).replace(' ', "")
            ),
        );
    };
    let best = ctx
        .gpus
        .iter()
        .filter(|g| Some(g.index) != failed)
        .max_by_key(|g| g.free);
    match best {
        Some(g) if g.free >= footprint => {
            let free = g.free;
            fix(
                format!("Use GPU {}: it has {} free", g.index, fmt_size(free)),
                format!(
                    "GPU {} ({}) has {} free now, enough for this job's {}:\n    \
                     gpuwatch run --gpu {} -- {}\n(it sets CUDA_VISIBLE_DEVICES={}; \
                     `--gpu auto` picks the emptiest GPU)",
                    g.index,
                    g.name,
                    fmt_size(free),
                    fmt_size(footprint),
                    g.index,
                    job_command(Some(ctx)),
                    g.uuid
                ),
            )
        }
        Some(g) => fix(
            "No other GPU has room either",
            format!(
                "The GPU with most free memory, GPU {}, has {} free; this job needs about {}. \
                 Wait for the other processes or reduce the job's footprint (below).",
                g.index,
                fmt_size(g.free),
                fmt_size(footprint)
            ),
        ),
        None => fix(
            "No other GPU on this machine",
            "Wait for the other processes, or reduce the job's footprint (below).",
        ),
    }
}

/// Code for the own-tensor fixes, in the framework that failed.
struct Snippets {
    accumulate: &'static str,
    mixed_precision: &'static str,
    checkpointing: &'static str,
}

fn snippets(framework: Framework) -> Snippets {
    match framework {
        Framework::Jax => Snippets {
            accumulate: "    optax.MultiSteps(optimizer, every_k_schedule=accum_steps)",
            mixed_precision: "Keep activations (and params where it is safe) in bfloat16: \
                              x.astype(jnp.bfloat16); jmp policies do it per module.",
            checkpointing: "Recompute blocks in the backward pass: jax.checkpoint(block) \
                            (flax: nn.remat(Block)).",
        },
        Framework::TensorFlow => Snippets {
            accumulate: "Accumulate gradients over accum_steps batches before \
                         optimizer.apply_gradients (Keras 3: \
                         optimizer = keras.optimizers.Adam(gradient_accumulation_steps=k)).",
            mixed_precision: "    tf.keras.mixed_precision.set_global_policy(\"mixed_float16\")",
            checkpointing: "Recompute activations: tf.recompute_grad(block) around the large \
                            blocks.",
        },
        _ => Snippets {
            accumulate: "    loss = loss_fn(model(x), y) / accum_steps\n    loss.backward()\n    \
                         if (step + 1) % accum_steps == 0:\n        optimizer.step(); \
                         optimizer.zero_grad()",
            mixed_precision: "Activations in bf16 take half the memory:\n    \
                              with torch.autocast(\"cuda\", dtype=torch.bfloat16):\n        \
                              loss = loss_fn(model(x), y)",
            checkpointing: "Trade compute for memory: torch.utils.checkpoint.checkpoint(block, x, \
                            use_reentrant=False) around the large blocks (Hugging Face: \
                            model.gradient_checkpointing_enable()).",
        },
    }
}

#[allow(clippy::too_many_lines)]
fn own_fixes(
    d: &mut Diagnosis,
    f: &OomFacts,
    ctx: Option<&Context>,
    total: Option<u64>,
    external: u64,
    primary: bool,
) {
    let batch = ctx.and_then(|c| c.batch_size);
    let snippets = snippets(f.framework);
    let overhead = match (f.process_total, f.reserved) {
        (Some(p), Some(r)) => p.saturating_sub(r),
        _ => 0,
    };
    let estimate = match (batch, f.allocated, f.requested, total) {
        (Some(current), Some(allocated), Some(request), Some(capacity)) if current > 0 => {
            let needed = allocated.saturating_add(request).saturating_add(overhead);
            let usable = capacity.saturating_sub(external).saturating_sub(overhead);
            if needed == 0 {
                None
            } else {
                let est = (current as f64 * 0.9 * usable as f64 / needed as f64).floor() as u64;
                Some(if est >= current { current / 2 } else { est })
            }
        }
        _ => None,
    };
    if primary {
        d.suggested_batch = estimate;
    }
    let batch_detail = match (batch, estimate) {
        (Some(b), Some(0)) => format!(
            "Even a batch of 1 may not fit from these numbers (current {b}): the weights and \
             optimizer state alone are too large; see mixed precision and checkpointing below, \
             or shard the model (FSDP/ZeRO)."
        ),
        (Some(b), Some(e)) => format!(
            "Largest batch that fits ≈ {e} (current {b}; estimated as ⌊{b} × 0.9 × usable ÷ \
             needed⌋, assuming memory grows with the batch; halve again if it still fails)."
        ),
        (Some(b), None) => format!("Halve the per-device batch (current {b}) until it fits."),
        (None, _) => "Halve the per-device batch size until it fits (the batch size was not on \
                      the command line, so no estimate)."
            .to_string(),
    };
    let title = match estimate {
        Some(e) if e > 0 => format!("Reduce the per-device batch to {e}"),
        _ => "Reduce the per-device batch".to_string(),
    };
    if !primary {
        d.fixes.push(fix(
            format!("Then, if it still fails: {}", title.to_lowercase()),
            batch_detail,
        ));
        return;
    }
    d.fixes.push(fix(title, batch_detail));
    let steps = match (batch, estimate) {
        (Some(b), Some(e)) if e > 0 => Some(b.div_ceil(e)),
        _ => None,
    };
    d.fixes.push(fix(
        "Keep the effective batch with gradient accumulation",
        format!(
            "{}\n{}",
            match (batch, estimate, steps) {
                (Some(current), Some(smaller), Some(steps)) => format!(
                    "Accumulate {steps} steps of {smaller} for an effective batch of {} (was \
                     {current}).",
                    smaller.saturating_mul(steps)
                ),
                _ =>
                    "Accumulate k smaller steps so the effective batch stays the same.".to_string(),
            },
            snippets.accumulate
        ),
    ));
    d.fixes
        .push(fix("Use mixed precision", snippets.mixed_precision));
    d.fixes.push(fix(
        "Recompute activations (activation checkpointing)",
        snippets.checkpointing,
    ));
    if let (Some(a), Some(r)) = (f.allocated, f.reserved)
        && r.saturating_sub(a) >= GIB
        && !matches!(f.framework, Framework::Jax | Framework::TensorFlow)
    {
        d.fixes.push(fix(
            "Release the cache between phases",
            format!(
                "{} is cached but unallocated: torch.cuda.empty_cache() between phases (after \
                 evaluation) returns it; it does not help within a step.",
                fmt_size(r - a)
            ),
        ));
    }
    if let (Some(p), Some(t)) = (f.process_total.or(f.allocated), total)
        && p.saturating_mul(10) >= t.saturating_mul(8)
    {
        d.fixes.push(fix(
            "If memory grew step after step, look for a leak",
            "Tensors kept alive across steps (a running `total_loss += loss` without .item(), \
             outputs appended to a list, a growing cache) fill the GPU slowly; `gpuwatch run` \
             shows the growth rate of the job's memory.",
        ));
    }
}

fn framework_fixes(d: &mut Diagnosis, f: &OomFacts) {
    match f.framework {
        Framework::Jax => d.fixes.push(fix(
            "JAX preallocates 75 % of each GPU",
            "Two JAX processes (or JAX beside PyTorch) on one GPU starve each other: \
             XLA_PYTHON_CLIENT_PREALLOCATE=false, or XLA_PYTHON_CLIENT_MEM_FRACTION=.40 for each.",
        )),
        Framework::TensorFlow => d.fixes.push(fix(
            "TensorFlow takes the whole GPU by default",
            "tf.config.experimental.set_memory_growth(gpu, True) for each GPU (or \
             TF_FORCE_GPU_ALLOW_GROWTH=true) lets other processes share it.",
        )),
        _ => {}
    }
}

fn device(d: &mut Diagnosis, f: &super::DeviceFacts) {
    d.case = Case::DeviceMismatch;
    if f.devices.is_empty() && f.argument.is_none() && f.operator.is_none() {
        // The message's words, not its facts (cut short, or a wording without them).
        d.confidence = Confidence::Likely;
    }
    let devices = if f.devices.is_empty() {
        "two devices".to_string()
    } else {
        f.devices.join(" and ")
    };
    let cpu_side = f.devices.iter().any(|x| x == "cpu");
    let gpu_dev = f
        .devices
        .iter()
        .find(|x| x.as_str() != "cpu")
        .cloned()
        .unwrap_or_else(|| "cuda".to_string());
    d.headline = match (&f.argument, &f.operator) {
        (Some(a), Some(o)) => {
            format!("Tensors on {devices}: `{a}` is on the wrong device (in {o})")
        }
        (Some(a), None) => format!("Tensors on {devices}: `{a}` is on the wrong device"),
        (None, Some(o)) => format!("Tensors on {devices} meet in {o}"),
        (None, None) => format!("Tensors on {devices} meet in one operation"),
    };
    d.facts.push(format!("devices: {devices}"));
    if let Some(a) = &f.argument {
        d.facts.push(format!("argument: {a}"));
    }
    if let Some(o) = &f.operator {
        d.facts.push(format!("operator: {o}"));
    }
    let target = if cpu_side {
        gpu_dev.as_str()
    } else {
        "the model's device"
    };
    let two_gpus = !cpu_side && f.devices.len() == 2 && f.devices[0] != f.devices[1];
    let (title, detail) = match f.argument.as_deref() {
        _ if two_gpus => (
            "Keep the tensors on one GPU".to_string(),
            format!(
                "Two GPUs meet ({devices}): a tensor created with a hard-coded device \
                 (\"cuda:0\") or a model split across GPUs. Use the model's device:\n    \
                 x = x.to(next(model.parameters()).device)\nUnder DataParallel/DDP do not \
                 move tensors to a fixed GPU inside forward."
            ),
        ),
        Some("weight" | "bias") => (
            "Move the model to the GPU".to_string(),
            "The input is on the GPU but the layer's weights are not:\n    \
             model = model.to(device)   # once, before creating the optimizer"
                .to_string(),
        ),
        Some("index" | "indices" | "input_ids") => (
            format!("Move the indices to {target}"),
            format!(
                "The embedding/index tensor (token ids) is on another device:\n    \
                 input_ids = input_ids.to(\"{target}\")"
            ),
        ),
        Some("target") => (
            format!("Move the targets to {target}"),
            "The model output is on the GPU but the labels are not:\n    \
             x, y = x.to(device), y.to(device)"
                .to_string(),
        ),
        Some("hidden") => (
            "Create the hidden state on the input's device".to_string(),
            "    h0 = torch.zeros(layers, batch, hidden, device=x.device)".to_string(),
        ),
        Some("generator") => (
            "Give the generator the same device".to_string(),
            "    torch.Generator(device=\"cuda\") for a sampler over CUDA tensors, or keep \
             the sampler's tensors on the CPU"
                .to_string(),
        ),
        Some(a) => (
            format!("Move `{a}` to {target}"),
            format!("    {a} = {a}.to(\"{target}\")   # or .to(device), the model's device"),
        ),
        None => (
            "Move every tensor to one device".to_string(),
            "    device = next(model.parameters()).device\n    x = x.to(device)".to_string(),
        ),
    };
    d.fixes.push(fix(title, detail));
    d.fixes.push(fix(
        "Check the usual places",
        "- the model is moved once: model.to(device), before building the optimizer\n\
         - every batch is moved inside the loop: x, y = x.to(device), y.to(device)\n\
         - tensors created inside forward use the input's device: torch.zeros(..., \
         device=x.device) (or register_buffer)\n\
         - targets/labels and masks are moved too, not only the inputs",
    ));
}

#[allow(clippy::too_many_lines)]
fn shape(d: &mut Diagnosis, f: &ShapeFacts) {
    d.case = Case::ShapeMismatch;
    if f.shapes.is_empty() && f.dims.is_empty() && f.parameter.is_none() {
        d.confidence = Confidence::Likely;
    }
    let shapes = f.shapes.join(" and ");
    let print_shapes = fix(
        "Print the shapes to find the layer",
        "    def forward(self, x):\n        print(\"in\", x.shape)\n        x = self.features(x)\n        \
         print(\"after features\", x.shape)   # compare with the next layer's in_features\n\
         or once: for m in model.modules(): m.register_forward_hook(lambda m, i, o: \
         print(type(m).__name__, [t.shape for t in i]))",
    );
    match f.kind {
        ShapeKind::Matmul => {
            if let ([a, b], [got, expected]) = (f.shapes.as_slice(), f.dims.as_slice()) {
                d.headline = format!(
                    "Shape mismatch in a matrix multiply ({a} @ {b}): the Linear layer expects \
                     in_features={expected} but gets {got}"
                );
                let out = b.split('x').nth(1).unwrap_or("out_features");
                d.fixes.push(fix(
                    format!("Make the layer's in_features match the flattened size {got}"),
                    format!(
                        "The input has {got} features per sample (the flattened size after the \
                         previous layer); the layer was built for {expected}:\n    \
                         nn.Linear({got}, {out})\nor change what comes before it (pooling, \
                         the image size) so that flatten gives {expected}. nn.LazyLinear({out}) \
                         infers it."
                    ),
                ));
            } else {
                d.headline = if shapes.is_empty() {
                    "Shape mismatch in a matrix multiply".to_string()
                } else {
                    format!("Shape mismatch in a matrix multiply: {shapes}")
                };
                d.fixes.push(fix(
                    "Make the inner dimensions agree",
                    "The last dimension of the input must equal the layer's in_features.",
                ));
            }
        }
        ShapeKind::BatchSize => {
            let (i, t) = (
                f.dims.first().copied().unwrap_or(0),
                f.dims.get(1).copied().unwrap_or(0),
            );
            d.headline = format!(
                "Batch size mismatch: the model's output has {i} rows but the targets have {t}"
            );
            d.fixes.push(fix(
                "Keep the batch dimension when flattening",
                "A view that folds the batch into features changes the row count:\n    \
                 x = x.view(x.size(0), -1)   # or torch.flatten(x, 1)\nAlso check that inputs \
                 and labels come from the same batch (drop_last, a sampler over one of them).",
            ));
        }
        ShapeKind::Cat => {
            d.headline = if let [e, g] = f.dims.as_slice() {
                format!("Tensors to concatenate differ: expected size {e}, got {g}")
            } else {
                format!("Tensors to stack/concatenate differ: {shapes}")
            };
            d.fixes.push(fix(
                "Make every tensor the same size outside the concatenated dimension",
                "For a DataLoader (stack in collate): resize/crop images to one size, convert \
                 all images to the same mode (RGB), or pad sequences (a collate_fn with \
                 pad_sequence).",
            ));
        }
        ShapeKind::Broadcast => {
            d.headline = match (f.dims.as_slice(), f.dim) {
                ([a, b], Some(dim)) => {
                    format!("Shapes do not broadcast: size {a} against size {b} at dimension {dim}")
                }
                _ => format!("Shapes do not broadcast: {shapes}"),
            };
            d.fixes.push(fix(
                "Align the two operands",
                "Usually a prediction of shape [N, 1] against targets [N] (use .squeeze(1) / \
                 .view(-1)), or a mask/positional table built for another length.",
            ));
        }
        ShapeKind::View => {
            d.headline = match (f.shapes.first(), f.dims.first()) {
                (Some(s), Some(n)) => {
                    format!("Cannot view a tensor of {n} elements as {s}")
                }
                _ => "view() on a non-contiguous tensor".to_string(),
            };
            d.fixes.push(fix(
                if f.shapes.is_empty() {
                    "Use reshape() or .contiguous().view()"
                } else {
                    "Flatten per sample instead of hard-coding the size"
                },
                if f.shapes.is_empty() {
                    "After transpose/permute the memory is not contiguous: x.reshape(...) or \
                     x.contiguous().view(...)."
                } else {
                    "    x = x.view(x.size(0), -1)   # or torch.flatten(x, 1)\nand make the next \
                     layer's in_features equal the flattened size."
                },
            ));
        }
        ShapeKind::ConvChannels => {
            let (e, g) = (
                f.dims.first().copied().unwrap_or(0),
                f.dims.get(1).copied().unwrap_or(0),
            );
            d.headline =
                format!("The convolution expects {e} input channels but got {g} ({shapes})");
            d.fixes.push(fix(
                "Feed the channels the layer was built for",
                format!(
                    "Images with {g} channels into a layer built for {e}: convert them \
                     (PIL: img.convert(\"RGB\") for RGBA/greyscale), or build the first layer \
                     with in_channels={g}. Check the layout is NCHW (permute(0, 3, 1, 2) from \
                     NHWC)."
                ),
            ));
        }
        ShapeKind::ConvRank => {
            d.headline = format!(
                "The convolution got an input with the wrong number of dimensions ({shapes})"
            );
            d.fixes.push(fix(
                "Add (or remove) the batch dimension",
                "A single image needs a batch dimension: x.unsqueeze(0); an extra dimension \
                 (e.g. [N, 1, 1, H, W]) needs .squeeze(1).",
            ));
        }
        ShapeKind::StateDict => {
            let p = f.parameter.as_deref().unwrap_or("a parameter");
            d.headline = match f.shapes.as_slice() {
                [ck, model] => format!(
                    "The checkpoint does not fit the model: {p} is {ck} in the checkpoint, \
                     {model} in the model"
                ),
                _ => format!("The checkpoint does not fit the model ({p})"),
            };
            d.fixes.push(fix(
                "Build the model with the checkpoint's configuration, or replace the head",
                "Usually the classifier head (num_classes) differs: build the model with the \
                 checkpoint's sizes, or drop the mismatching keys and load the rest:\n    \
                 sd = {k: v for k, v in sd.items() if not k.startswith(\"fc.\")}\n    \
                 model.load_state_dict(sd, strict=False)",
            ));
        }
        ShapeKind::Other => {
            d.headline = if shapes.is_empty() {
                "Shape mismatch".to_string()
            } else {
                format!("Shape mismatch: {shapes}")
            };
        }
    }
    if !f.shapes.is_empty() {
        d.facts.push(format!("shapes: {shapes}"));
    }
    if !f.dims.is_empty() {
        let dims: Vec<String> = f.dims.iter().map(u64::to_string).collect();
        d.facts
            .push(format!("mismatching sizes: {}", dims.join(" vs ")));
    }
    d.fixes.push(print_shapes);
}

#[allow(clippy::too_many_lines)]
fn known(d: &mut Diagnosis, k: KnownFailure, line: &str, ctx: Option<&Context>) {
    use KnownFailure as K;
    d.case = Case::Known(k);
    if matches!(k, K::CudnnError | K::CublasError) {
        // The status names the library, not the cause: memory, an earlier kernel error or
        // mismatched versions look alike in the text.
        d.confidence = Confidence::Likely;
        d.run_would_add = Some(
            "`gpuwatch run -- …` records how full the GPU was when the library failed, which \
             tells an out-of-memory in disguise from a version or kernel error."
                .to_string(),
        );
    }
    let (headline, fixes): (&str, Vec<Fix>) = match k {
        K::DeviceSideAssert => (
            "A CUDA kernel assertion failed (device-side assert): usually an index out of range",
            vec![
                fix(
                    "Check the labels and indices",
                    "Class labels must be in [0, num_classes) (no -1, no 1-based labels), \
                     embedding ids < num_embeddings:\n    assert 0 <= y.min() and y.max() < \
                     num_classes",
                ),
                fix(
                    "Get the real line",
                    "Kernels run asynchronously, so the traceback may point elsewhere: rerun \
                     with CUDA_LAUNCH_BLOCKING=1, or run one batch on the CPU for a readable \
                     error.",
                ),
            ],
        ),
        K::IllegalMemoryAccess | K::LaunchFailure => (
            "A CUDA kernel accessed memory it should not (illegal memory access / launch failure)",
            vec![
                fix(
                    "Find the kernel",
                    "Rerun with CUDA_LAUNCH_BLOCKING=1; `compute-sanitizer python train.py` \
                     names the kernel. Custom CUDA extensions, out-of-range indices and \
                     library bugs are the usual causes; an earlier error in the log may be the \
                     root cause.",
                ),
                fix(
                    "Rule out the hardware",
                    "Look for Xid errors in `dmesg` (Xid 13/31/43 software, 48/63/79 \
                     hardware); try another GPU.",
                ),
            ],
        ),
        K::NcclError => (
            "NCCL (the multi-GPU communication library) failed",
            vec![
                fix(
                    "Get NCCL's reason",
                    "Rerun with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS=INIT,NET); look for the \
                     first rank that failed — its error is the root cause.",
                ),
                fix(
                    "Common causes",
                    "- containers: too little shared memory (--shm-size=16g or --ipc=host)\n\
                     - the wrong network interface: NCCL_SOCKET_IFNAME=eth0\n\
                     - InfiniBand problems: try NCCL_IB_DISABLE=1 to confirm\n\
                     - P2P not working across PCIe switches/VMs: NCCL_P2P_DISABLE=1",
                ),
            ],
        ),
        K::NcclTimeout => (
            "A collective operation timed out: one rank stopped or fell behind",
            vec![
                fix(
                    "Find the rank that stopped",
                    "The watchdog fires on the ranks that waited; the cause is on the rank that \
                     did not arrive (an OOM, an exception, a hang in data loading). Read the \
                     first error in each rank's log.",
                ),
                fix(
                    "Make every rank run the same collectives",
                    "Uneven data per rank (a last partial batch, a rank-only evaluation) or a \
                     collective inside `if rank == 0` leaves the others waiting. A slow step \
                     that is legitimate: raise init_process_group(timeout=timedelta(minutes=60)).",
                ),
            ],
        ),
        K::NoGpu => (
            "The job found no usable GPU",
            vec![fix(
                "Check the driver and what the job can see",
                "`nvidia-smi` must list the GPU; in a container run with --gpus all (and the \
                 NVIDIA container toolkit); check that CUDA_VISIBLE_DEVICES is not empty or \
                 pointing at a GPU that does not exist.",
            )],
        ),
        K::NotCompiledWithCuda => (
            "This PyTorch was built without CUDA",
            vec![fix(
                "Install a CUDA build of PyTorch",
                "    pip install torch --index-url https://download.pytorch.org/whl/cu128\n\
                 (pick the CUDA version your driver supports: `nvidia-smi` shows it).",
            )],
        ),
        K::CudaDeserialize => (
            "A checkpoint saved on a GPU is loaded where CUDA is not available",
            vec![fix(
                "Map the checkpoint to the CPU",
                "    torch.load(path, map_location=\"cpu\")",
            )],
        ),
        K::DriverTooOld => (
            "The NVIDIA driver is older than the CUDA runtime this build needs",
            vec![fix(
                "Upgrade the driver, or install a build for an older CUDA",
                driver_detail(line),
            )],
        ),
        K::NoKernelImage => (
            "This build has no GPU code for this GPU's architecture (no kernel image)",
            vec![fix(
                "Install a build that supports this GPU",
                "The wheel was compiled for other compute capabilities (new GPUs need recent \
                 CUDA, e.g. cu128 for Blackwell; old GPUs are dropped by new builds). \
                 `python -c \"import torch; print(torch.cuda.get_arch_list())\"` shows what it \
                 has; `nvidia-smi --query-gpu=compute_cap --format=csv` what the GPU needs.",
            )],
        ),
        K::EccError => (
            "The GPU reported an uncorrectable ECC memory error: a hardware fault",
            vec![
                fix(
                    "Move the job to another GPU",
                    "The data on that GPU can't be trusted; rerun elsewhere (gpuwatch pick).",
                ),
                fix(
                    "Report the GPU",
                    "`nvidia-smi -q -d ECC,PAGE_RETIREMENT` and Xid 48/63/94/95 in `dmesg`; a \
                     GPU reset retires/remaps the page, repeated errors mean replacing the GPU.",
                ),
            ],
        ),
        K::InvalidDeviceOrdinal => (
            "The job asked for a GPU number that does not exist for it",
            vec![fix(
                "Count GPUs after CUDA_VISIBLE_DEVICES",
                "CUDA renumbers the visible GPUs from 0: with CUDA_VISIBLE_DEVICES=2,3 the job \
                 sees cuda:0 and cuda:1 only. Use cuda:0, or LOCAL_RANK under torchrun.",
            )],
        ),
        K::DeviceBusy => (
            "The GPU is busy or unavailable (exclusive compute mode, or taken)",
            vec![fix(
                "Use another GPU or free this one",
                "`nvidia-smi -q -d COMPUTE` shows the compute mode; in EXCLUSIVE_PROCESS only one \
                 process may use it. gpuwatch pick finds a free GPU.",
            )],
        ),
        K::CudaInit => (
            "CUDA could not initialise the GPU",
            vec![fix(
                "Check the driver",
                "`nvidia-smi` must work; after a suspend/resume reload nvidia_uvm \
                 (`sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm`); check that the driver \
                 and the CUDA runtime match.",
            )],
        ),
        K::CudnnError => (
            "cuDNN failed: often an out-of-memory in disguise",
            vec![
                fix(
                    "Rule out memory first",
                    "cuDNN reports internal errors when it can't get a workspace: reduce the \
                     batch and retry; `gpuwatch run` shows whether the GPU was full.",
                ),
                fix(
                    "Then the versions",
                    "Check that the cuDNN, CUDA and driver versions match the build; \
                     torch.backends.cudnn.benchmark=False; CUDA_LAUNCH_BLOCKING=1 for the real \
                     line.",
                ),
            ],
        ),
        K::CublasError => (
            "cuBLAS failed: often an out-of-memory or an earlier out-of-range index",
            vec![
                fix(
                    "Rule out memory first",
                    "CUBLAS_STATUS_NOT_INITIALIZED at cublasCreate usually means the GPU was \
                     full: reduce the batch; `gpuwatch run` shows who held memory.",
                ),
                fix(
                    "Then indices",
                    "An earlier kernel error is reported here asynchronously: rerun with \
                     CUDA_LAUNCH_BLOCKING=1; check embedding ids and labels.",
                ),
            ],
        ),
        K::DtypeMismatch => (
            "Two tensors of different dtypes meet",
            vec![fix(
                "Cast to one dtype",
                "torch.from_numpy gives float64: x = x.float(); labels for cross_entropy are \
                 .long(); under mixed precision keep the op inside torch.autocast.",
            )],
        ),
        K::IndexOutOfRange => (
            "An index is out of range (an embedding id ≥ num_embeddings, or a label)",
            vec![fix(
                "Check the vocabulary size against the ids",
                "assert input_ids.max() < model.get_input_embeddings().num_embeddings; after \
                 adding tokens: model.resize_token_embeddings(len(tokenizer)).",
            )],
        ),
        K::HostOutOfMemory => (
            "The host (CPU) ran out of memory, not the GPU",
            vec![fix(
                "Reduce host memory",
                "Fewer DataLoader workers (each copies the dataset object), load data lazily \
                 instead of into RAM; `dmesg` shows the kernel's OOM killer.",
            )],
        ),
        K::SharedMemory => (
            "Shared memory (/dev/shm) ran out: DataLoader workers or NCCL could not get a segment",
            vec![fix(
                "Give the container more shared memory",
                "docker run --shm-size=16g (or --ipc=host); `df -h /dev/shm` shows its size. For \
                 DataLoader workers, num_workers=0 confirms it; for NCCL between GPUs of one \
                 host, NCCL_SHM_DISABLE=1 works around it at some speed.",
            )],
        ),
        K::StateDictKeys => (
            "The checkpoint's keys do not match the model's",
            vec![fix(
                "Match the key names",
                "A `module.` prefix comes from DataParallel/DDP: strip it; otherwise load with \
                 strict=False and check which keys are missing.",
            )],
        ),
    };
    d.headline = headline.to_string();
    d.fixes = fixes;
    if k == K::NoKernelImage
        && let Some(cap) = line
            .split_whitespace()
            .find(|w| w.starts_with("sm_") && w.len() > 3)
    {
        d.facts.push(format!("the GPU's compute capability: {cap}"));
    }
    if k == K::NcclError && line.contains("Duplicate GPU detected") {
        d.headline = "Two ranks use the same GPU (NCCL: duplicate GPU detected)".to_string();
        d.fixes.insert(
            0,
            fix(
                "Give each rank its own GPU",
                "    local_rank = int(os.environ[\"LOCAL_RANK\"])\n    \
                 torch.cuda.set_device(local_rank)   # before init_process_group\n\
                 and check that --nproc_per_node does not exceed the GPUs CUDA_VISIBLE_DEVICES \
                 shows.",
            ),
        );
    }
    if k == K::DeviceSideAssert
        && let Some(a) = &d.analysis.assertion
    {
        d.facts
            .push(format!("kernel assertion: {}", short(a.trim(), 200)));
    }
    if let Some(c) = ctx
        && matches!(k, K::NoKernelImage | K::DriverTooOld | K::EccError)
        && !c.gpus.is_empty()
    {
        let names: Vec<String> = c
            .gpus
            .iter()
            .map(|g| format!("GPU {} {}", g.index, g.name))
            .collect();
        d.facts.push(format!("GPUs here: {}", names.join(", ")));
    }
    if let Some(c) = ctx
        && matches!(k, K::NoGpu | K::InvalidDeviceOrdinal)
    {
        match c.cuda_visible_devices.as_deref() {
            Some("") => d
                .facts
                .push("CUDA_VISIBLE_DEVICES was empty: no GPU visible".to_string()),
            Some(v) => d.facts.push(format!("CUDA_VISIBLE_DEVICES={v}")),
            None => {}
        }
    }
}

fn driver_detail(line: &str) -> String {
    let found = line
        .split("found version ")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<u32>().ok());
    let mut s = String::new();
    if let Some(v) = found {
        let _ = write!(
            s,
            "The driver supports CUDA up to {}.{} (found version {v}). ",
            v / 1000,
            (v % 1000) / 10
        );
    }
    s.push_str(
        "Upgrade the NVIDIA driver, or install a PyTorch build for a CUDA version the driver \
         supports (`nvidia-smi` shows it, top right).",
    );
    s
}

// ---------------------------------------------------------------------------------------------
// Text rendering

/// Lines of `text` wrapped at `width`. Texts quote the log and process names: each line goes
/// through [`crate::text::clean`] (a control character in a quote is shown escaped).
fn wrap(out: &mut String, text: &str, indent: &str, width: usize) {
    for raw in text.lines() {
        let raw = crate::text::clean(raw);
        let raw = raw.as_ref();
        if raw.starts_with(' ') {
            // Code: keep as written.
            let _ = writeln!(out, "{indent}{raw}");
            continue;
        }
        // A list item wraps under its text.
        let (first, rest, body) = match raw.strip_prefix("- ") {
            Some(body) => (format!("{indent}- "), format!("{indent}  "), body),
            None => (indent.to_string(), indent.to_string(), raw),
        };
        let mut prefix = first;
        let mut line = String::new();
        for word in body.split_whitespace() {
            if !line.is_empty()
                && prefix.chars().count() + line.chars().count() + 1 + word.chars().count() > width
            {
                let _ = writeln!(out, "{prefix}{line}");
                line.clear();
                prefix.clone_from(&rest);
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        let _ = writeln!(out, "{prefix}{line}");
    }
}

/// Plain text (no colour), about 80 columns, for stderr.
pub fn render_text(d: &Diagnosis) -> String {
    let mut out = String::new();
    wrap(&mut out, &d.headline, "", 80);
    let why = match &d.reasoning {
        Some(r) => format!("Why ({}): {r}", d.confidence.label()),
        None => format!("Confidence: {}", d.confidence.label()),
    };
    wrap(&mut out, &why, "  ", 80);
    if !d.analysis.excerpt.is_empty() {
        out.push_str("\nThe error:\n");
        for l in d.analysis.excerpt.iter().take(4) {
            wrap(&mut out, &short(l.trim(), 400), "  ", 80);
        }
    }
    if !d.facts.is_empty() {
        out.push_str("\nFacts:\n");
        for f in &d.facts {
            let mut s = String::new();
            wrap(&mut s, f, "    ", 80);
            out.push_str("  - ");
            out.push_str(s.trim_start());
        }
    }
    if !d.checks.is_empty() {
        out.push_str("\nThe numbers do not add up:\n");
        for c in &d.checks {
            let mut s = String::new();
            wrap(&mut s, c, "    ", 80);
            out.push_str("  - ");
            out.push_str(s.trim_start());
        }
    }
    if let Some(more) = &d.run_would_add {
        out.push('\n');
        wrap(
            &mut out,
            &format!("The text alone cannot tell: {more}"),
            "",
            80,
        );
    }
    if !d.fixes.is_empty() {
        out.push_str("\nFixes, in order:\n");
        for (i, f) in d.fixes.iter().enumerate() {
            let mut s = String::new();
            wrap(&mut s, &f.title, "     ", 80);
            let _ = write!(out, "  {}. {}", i + 1, s.trim_start());
            wrap(&mut out, &f.detail, "     ", 80);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, uuid: &str, bus: &str, name: &str) -> GpuView {
        GpuView {
            index,
            uuid: uuid.to_string(),
            pci_bus_id: Some(bus.to_string()),
            name: name.to_string(),
            total: 140 * GIB,
            used: 0,
            free: 140 * GIB,
            processes: vec![],
        }
    }

    fn four() -> Vec<GpuView> {
        vec![
            gpu(0, "GPU-aaaa1111-0000", "00000000:18:00.0", "NVIDIA H200"),
            gpu(1, "GPU-bbbb2222-0000", "00000000:2A:00.0", "NVIDIA H200"),
            gpu(2, "GPU-cccc3333-0000", "00000000:3A:00.0", "NVIDIA H200"),
            gpu(3, "GPU-cccc4444-0000", "00000000:5D:00.0", "NVIDIA H200"),
        ]
    }

    #[test]
    fn ordinals_through_cuda_visible_devices() {
        let g = four();
        assert_eq!(map_ordinal(2, None, None, &g), Some(2));
        assert_eq!(map_ordinal(4, None, None, &g), None);
        assert_eq!(map_ordinal(1, Some("0,2"), None, &g), Some(2));
        assert_eq!(map_ordinal(0, Some("3,1"), None, &g), Some(3));
        assert_eq!(map_ordinal(0, Some(" 1 , 3 "), None, &g), Some(1));
        assert_eq!(map_ordinal(0, Some(""), None, &g), None, "empty = no GPU");
        // UUIDs, unique prefixes, with or without "GPU-".
        assert_eq!(map_ordinal(0, Some("GPU-bbbb2222-0000"), None, &g), Some(1));
        assert_eq!(map_ordinal(0, Some("GPU-bbbb"), None, &g), Some(1));
        assert_eq!(map_ordinal(1, Some("0,GPU-cccc4"), None, &g), Some(3));
        assert_eq!(map_ordinal(0, Some("aaaa"), None, &g), Some(0));
        // An ambiguous prefix, an index out of range, a repeat, garbage: the list ends there.
        assert_eq!(map_ordinal(0, Some("GPU-cccc"), None, &g), None);
        assert_eq!(map_ordinal(0, Some("1,7,2"), None, &g), Some(1));
        assert_eq!(map_ordinal(1, Some("1,7,2"), None, &g), None);
        assert_eq!(map_ordinal(1, Some("1,1,2"), None, &g), None);
        assert_eq!(map_ordinal(1, Some("2,x,0"), None, &g), None);
        assert_eq!(map_ordinal(0, Some("-1"), None, &g), None);
        // MIG instances have no NVML index of their own.
        assert_eq!(map_ordinal(0, Some("MIG-1234-5678"), None, &g), None);
        assert_eq!(map_ordinal(1, Some("MIG-1234-5678,2"), None, &g), Some(2));
    }

    #[test]
    fn ordinals_with_device_order() {
        // NVML index order differs from bus order here (as it can with some topologies).
        let mut g = four();
        g[0].pci_bus_id = Some("00000000:81:00.0".to_string());
        assert_eq!(map_ordinal(0, None, Some("PCI_BUS_ID"), &g), Some(1));
        assert_eq!(map_ordinal(3, None, Some("PCI_BUS_ID"), &g), Some(0));
        assert_eq!(map_ordinal(0, Some("3"), Some("PCI_BUS_ID"), &g), Some(0));
        // CUDA's 0000:18:00.0 and NVML's 00000000:18:00.0 are the same bus.
        g[0].pci_bus_id = Some("0000:05:00.0".to_string());
        assert_eq!(map_ordinal(0, None, Some("PCI_BUS_ID"), &g), Some(0));
        // Mixed models: FASTEST_FIRST is not knowable from here.
        let mut mixed = four();
        mixed[3].name = "NVIDIA A100".to_string();
        assert_eq!(map_ordinal(0, None, None, &mixed), None);
        assert_eq!(map_ordinal(0, None, Some("FASTEST_FIRST"), &mixed), None);
        assert_eq!(map_ordinal(3, None, Some("PCI_BUS_ID"), &mixed), Some(3));
        assert_eq!(map_ordinal(0, None, None, &[]), None);
    }

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn batch_sizes_from_command_lines() {
        type Case<'a> = (&'a [&'a str], Option<(u64, &'a str)>);
        let cases: [Case<'_>; 12] = [
            (
                &["train.py", "--batch-size", "32"],
                Some((32, "--batch-size")),
            ),
            (&["train.py", "--batch_size=16"], Some((16, "--batch_size"))),
            (&["train.py", "--bs", "8"], Some((8, "--bs"))),
            (&["train.py", "-b", "4"], Some((4, "-b"))),
            (&["train.py", "batch_size=12"], Some((12, "batch_size"))),
            (
                &["train.py", "data.batch_size=24"],
                Some((24, "data.batch_size")),
            ),
            (
                &["run_clm.py", "--per_device_train_batch_size", "2"],
                Some((2, "--per_device_train_batch_size")),
            ),
            (
                &["x.py", "--micro-batch-size=6"],
                Some((6, "--micro-batch-size")),
            ),
            (&["train.py", "--batch-size"], None),
            (&["train.py", "-b", "big"], None),
            (&["train.py", "--epochs", "3"], None),
            (
                &["train.py", "--lr=0.1", "--batch-size", "64", "--bs", "1"],
                Some((64, "--batch-size")),
            ),
        ];
        for (a, want) in cases {
            let got = batch_size_from_args(&args(a));
            assert_eq!(got, want.map(|(n, f)| (n, f.to_string())), "{a:?}");
        }
    }

    /// The whole diagnosis as text, fixes included.
    fn text_of(d: &Diagnosis) -> String {
        render_text(d)
    }

    fn no_traceback_advice(d: &Diagnosis) {
        let text = text_of(d);
        assert!(!text.contains("logic bug"), "{text}");
        assert!(!text.contains("Read the traceback"), "{text}");
        assert!(!text.contains("File \""), "{text}");
    }

    #[test]
    fn an_empty_log_says_so_without_traceback_advice() {
        let a = crate::triage::analyze("");
        assert!(a.empty && !a.traceback);
        let d = diagnose(&a, None);
        assert_eq!(d.case, Case::Unknown);
        assert_eq!(
            d.headline,
            "The log is empty: there is nothing to diagnose in it"
        );
        assert!(
            d.facts.iter().any(|f| f == "the log is empty"),
            "{:?}",
            d.facts
        );
        no_traceback_advice(&d);
        // Blank lines and progress-bar carriage returns are still nothing.
        assert!(crate::triage::analyze("\n  \n\r\n").empty);
    }

    #[test]
    fn a_job_that_exits_with_no_output_gets_its_exit_code() {
        let a = crate::triage::analyze("");
        let d = diagnose_job(&a, None, Some(Exit::Code(3)));
        assert_eq!(d.headline, "The job exited with code 3 and printed nothing");
        assert!(
            d.facts.iter().any(|f| f == "the job ended: exit code 3"),
            "{:?}",
            d.facts
        );
        assert!(
            d.facts
                .iter()
                .any(|f| f == "its output (stdout and stderr) was empty"),
            "{:?}",
            d.facts
        );
        assert!(d.fixes[0].detail.contains("sys.exit(3)"), "{:?}", d.fixes);
        no_traceback_advice(&d);
    }

    #[test]
    fn output_without_a_traceback_says_what_it_printed() {
        let a = crate::triage::analyze("epoch 1: loss 2.31\nsaving checkpoint\n");
        assert!(!a.empty && !a.traceback);
        let d = diagnose_job(&a, None, Some(Exit::Code(1)));
        assert_eq!(
            d.headline,
            "The job exited with code 1 and printed no GPU failure and no traceback"
        );
        no_traceback_advice(&d);
        let d = diagnose(&a, None);
        assert_eq!(
            d.headline,
            "No known GPU failure and no traceback in the text"
        );
        assert!(
            d.fixes[0].detail.contains("gpuwatch run --"),
            "{:?}",
            d.fixes
        );
        no_traceback_advice(&d);
    }

    #[test]
    fn sigkill_points_at_the_oom_killer_and_the_cgroup_limit() {
        for text in ["", "epoch 1: loss 2.31\n"] {
            let a = crate::triage::analyze(text);
            let d = diagnose_job(&a, None, Some(Exit::Signal(9)));
            assert!(
                d.headline
                    .starts_with("The job was killed by SIGKILL (signal 9) and printed "),
                "{}",
                d.headline
            );
            assert!(
                d.headline.contains("out-of-memory killer"),
                "{}",
                d.headline
            );
            assert!(d.headline.contains("memory limit"), "{}", d.headline);
            let fixes = text_of(&d);
            for needle in [
                "dmesg",
                "journalctl -k",
                "Out of memory: Killed process",
                "oom-kill",
                "memory.max",
                "memory.events",
            ] {
                assert!(fixes.contains(needle), "{needle}: {fixes}");
            }
            assert!(
                d.facts
                    .iter()
                    .any(|f| f == "the job ended: killed by SIGKILL (signal 9)"),
                "{:?}",
                d.facts
            );
            no_traceback_advice(&d);
        }
    }

    #[test]
    fn other_signals_are_named() {
        let a = crate::triage::analyze("");
        let d = diagnose_job(&a, None, Some(Exit::Signal(11)));
        assert_eq!(
            d.headline,
            "The job was killed by SIGSEGV (signal 11) and printed nothing"
        );
        assert!(
            d.fixes[0].detail.contains("PYTHONFAULTHANDLER=1"),
            "{:?}",
            d.fixes
        );
        let d = diagnose_job(&a, None, Some(Exit::Signal(15)));
        assert_eq!(
            d.headline,
            "The job was killed by SIGTERM (signal 15) and printed nothing"
        );
        no_traceback_advice(&d);
    }

    #[test]
    fn a_traceback_without_a_gpu_failure_is_still_a_logic_bug() {
        let text = "Traceback (most recent call last):\n  File \"train.py\", line 7, in <module>\n    \
                    main()\nKeyError: 'labels'\n";
        let a = crate::triage::analyze(text);
        assert!(a.traceback);
        for ended in [None, Some(Exit::Code(1)), Some(Exit::Signal(9))] {
            let d = diagnose_job(&a, None, ended);
            assert_eq!(
                d.headline,
                "No known GPU failure in the text: a logic bug to read in the traceback"
            );
            assert_eq!(
                d.fixes[0].title,
                "Read the traceback from the last frame of your own code"
            );
        }
        // Only library frames: the traceback is still there to read.
        let text = "Traceback (most recent call last):\n  File \"/usr/lib/python3.11/json/decoder.py\", \
                    line 3, in decode\njson.decoder.JSONDecodeError: Expecting value\n";
        let d = diagnose_job(&crate::triage::analyze(text), None, Some(Exit::Code(1)));
        assert!(d.headline.contains("logic bug"), "{}", d.headline);
    }

    #[test]
    fn render_stays_near_80_columns() {
        let d = Diagnosis {
            case: Case::Unknown,
            confidence: Confidence::Possible,
            reasoning: Some("because ".repeat(20)),
            checks: vec!["a check ".repeat(20)],
            run_would_add: None,
            headline: "word ".repeat(40),
            facts: vec!["- a fact ".repeat(20)],
            fixes: vec![fix("t", "- item ".repeat(30))],
            nvml_gpu: None,
            suggested_batch: None,
            analysis: Analysis {
                failure: Failure::Unknown,
                excerpt: vec!["e ".repeat(100)],
                traceback_hint: None,
                assertion: None,
                traceback: false,
                empty: false,
            },
        };
        for line in render_text(&d).lines() {
            assert!(line.chars().count() <= 80, "{line}");
            assert!(!line.contains('\x1b'));
        }
    }
}
