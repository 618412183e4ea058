//! Triage: read a training job's error output and say what killed it.
//!
//! This module is pure: text in, [`Analysis`] out ([`analyze`] for a whole text, [`Scanner`]
//! for a stream, in bounded memory), then [`diagnose`] combines the analysis with what the
//! monitor saw (a [`Context`], or `None` for `gpuwatch explain`) into a [`Diagnosis`] with the
//! fixes in the order that works, and [`render_text`] prints it.
//!
//! # Classification
//! Each line (ANSI colour codes and `\r` stripped, at most [`MAX_LINE`] bytes looked at, its
//! decorations taken off by `clean`: quotes, code fences, rank/host labels, timestamps, glog
//! and logging prefixes, a truncating ellipsis; a message wrapped at a terminal width or a
//! collector's limit joined first) is matched following the usual flowchart: device words first (tensors on two devices), then
//! size/shape words, then out-of-memory, then the other known GPU failures (device-side assert,
//! illegal memory access, NCCL, no GPU, old driver, no kernel image, ECC, …). Anything else is
//! [`Failure::Unknown`]: with a traceback, a logic bug to read in it
//! ([`Analysis::traceback_hint`]); without one, the diagnosis says what is known (the exit code
//! or the signal `run` saw, whether the text was empty).
//!
//! When a text holds several errors (torchrun logs, chained tracebacks), the root cause wins
//! over the symptoms: OOM, device/shape mismatch and device-side asserts rank above illegal
//! memory accesses, which rank above NCCL errors, which rank above NCCL/watchdog timeouts; the
//! elastic agent's `ChildFailedError` is never a cause. Between two errors of the same rank the
//! first one printed wins (Python prints the original exception first), unless a later one of
//! the same class carries more facts (a full PyTorch OOM message after a bare
//! `CUDA error: out of memory`).
//!
//! Multi-line messages: after an OOM line, up to [`CONTINUATION_LINES`] following lines that
//! do not start a new record are read as its continuation (wrapped messages), and allocator
//! statistics printed by TensorFlow/XLA's BFC allocator (`Limit:`, `InUse:`, `rounded to`) fill
//! facts the final message lacks.

mod clean;
mod diagnose;
mod json;
mod parse;
mod size;

use serde::Serialize;

pub use diagnose::{
    Case, Confidence, Context, CudaDevice, Diagnosis, Fix, GpuView, ProcView, batch_size_from_args,
    cuda_order, cuda_visible, diagnose, diagnose_job, map_ordinal, render_text,
};
pub use json::{ExplainJson, SCHEMA_VERSION, explain_json, framework_name, shape_kind_name};
pub use size::{fmt_size, parse_size};

/// Bytes of one line that are looked at; the rest of a very long line is ignored.
pub const MAX_LINE: usize = 64 * 1024;
/// Lines after an OOM line read as its continuation.
pub const CONTINUATION_LINES: usize = 4;
/// Terminal widths (in characters) at which a wrapped message is broken into pieces: a line
/// exactly this long is held and joined with the next piece when that piece does not start a
/// record of its own.
const WRAP_COLUMNS: &[usize] = &[80, 100, 120, 132, 160, 200];
/// Log collectors' line limits (in bytes) at which they split a long line.
const WRAP_BYTES: &[usize] = &[1024, 2048, 4096, 8192, 16 * 1024];
/// Bytes of a joined wrapped message kept at most.
const MAX_WRAP: usize = 16 * 1024;
/// Lines kept in [`Analysis::excerpt`] at most.
pub const MAX_EXCERPT: usize = 20;
/// Characters kept of one excerpt line.
const MAX_EXCERPT_LINE: usize = 4096;

/// What the text says happened.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    pub failure: Failure,
    /// The error line(s) it matched (ANSI-stripped, each capped), at most [`MAX_EXCERPT`].
    pub excerpt: Vec<String>,
    /// The last frame of user code before the error, e.g.
    /// `File "train.py", line 42, in forward` (frames under `site-packages`, `dist-packages`
    /// and the standard library are skipped).
    pub traceback_hint: Option<String>,
    /// The first CUDA kernel assertion printed (``Assertion `t >= 0 && t < n_classes` failed.``),
    /// which says what a device-side assert was about.
    pub assertion: Option<String>,
    /// A Python traceback began in the text (a `Traceback (most recent call last):` line).
    pub traceback: bool,
    /// The text had no line but blank ones.
    pub empty: bool,
}

/// The class of failure, with its facts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Failure {
    OutOfMemory(OomFacts),
    DeviceMismatch(DeviceFacts),
    ShapeMismatch(ShapeFacts),
    /// A known failure and the line that says it.
    Known(KnownFailure, String),
    Unknown,
}

impl Failure {
    /// The failure's kind as `explain --json` names it (schema 1, `docs/explain-json.md`):
    /// `out_of_memory`, `device_mismatch`, `shape_mismatch`, a known failure's own name
    /// ([`KnownFailure::kind`]) or `unknown`. Stable: a name is never changed within a schema.
    pub fn kind(&self) -> &'static str {
        match self {
            Failure::OutOfMemory(_) => "out_of_memory",
            Failure::DeviceMismatch(_) => "device_mismatch",
            Failure::ShapeMismatch(_) => "shape_mismatch",
            Failure::Known(k, _) => k.kind(),
            Failure::Unknown => "unknown",
        }
    }
}

/// Known GPU (and neighbouring) failures that need no facts beyond the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum KnownFailure {
    DeviceSideAssert,
    IllegalMemoryAccess,
    /// `unspecified launch failure`, `misaligned address`, `an illegal instruction`.
    LaunchFailure,
    NcclError,
    NcclTimeout,
    NoGpu,
    /// PyTorch built without CUDA (`Torch not compiled with CUDA enabled`).
    NotCompiledWithCuda,
    /// `torch.load` of a CUDA checkpoint on a machine without CUDA (use `map_location`).
    CudaDeserialize,
    DriverTooOld,
    NoKernelImage,
    EccError,
    /// `invalid device ordinal`: the job asked for a GPU that `CUDA_VISIBLE_DEVICES` hides.
    InvalidDeviceOrdinal,
    /// `CUDA-capable device(s) is/are busy or unavailable` (exclusive-process mode, or taken).
    DeviceBusy,
    /// `CUDA unknown error`, `initialization error`: the driver could not start.
    CudaInit,
    /// `CUDNN_STATUS_INTERNAL_ERROR` / `EXECUTION_FAILED`: often an OOM in disguise.
    CudnnError,
    /// `CUBLAS_STATUS_NOT_INITIALIZED` / `EXECUTION_FAILED`: often an OOM or a bad index.
    CublasError,
    /// Two dtypes meet (`expected scalar type Float but found Double`, `Input type (…Half…) and
    /// weight type (…Float…)`).
    DtypeMismatch,
    /// `index out of range in self` (an embedding index ≥ `num_embeddings`, on the CPU).
    IndexOutOfRange,
    /// Host (CPU) memory, not GPU memory: `DefaultCPUAllocator: can't allocate memory`,
    /// a `DataLoader` worker killed.
    HostOutOfMemory,
    /// Shared memory for `DataLoader` workers exhausted (`/dev/shm`, `bus error`).
    SharedMemory,
    /// `Missing key(s)` / `Unexpected key(s) in state_dict`.
    StateDictKeys,
}

impl KnownFailure {
    /// Every known failure, for tests and the schema's documentation.
    pub const ALL: [KnownFailure; 21] = [
        KnownFailure::DeviceSideAssert,
        KnownFailure::IllegalMemoryAccess,
        KnownFailure::LaunchFailure,
        KnownFailure::NcclError,
        KnownFailure::NcclTimeout,
        KnownFailure::NoGpu,
        KnownFailure::NotCompiledWithCuda,
        KnownFailure::CudaDeserialize,
        KnownFailure::DriverTooOld,
        KnownFailure::NoKernelImage,
        KnownFailure::EccError,
        KnownFailure::InvalidDeviceOrdinal,
        KnownFailure::DeviceBusy,
        KnownFailure::CudaInit,
        KnownFailure::CudnnError,
        KnownFailure::CublasError,
        KnownFailure::DtypeMismatch,
        KnownFailure::IndexOutOfRange,
        KnownFailure::HostOutOfMemory,
        KnownFailure::SharedMemory,
        KnownFailure::StateDictKeys,
    ];

    /// The stable snake-case name of `explain --json`'s `kind`.
    pub fn kind(self) -> &'static str {
        match self {
            KnownFailure::DeviceSideAssert => "device_side_assert",
            KnownFailure::IllegalMemoryAccess => "illegal_memory_access",
            KnownFailure::LaunchFailure => "launch_failure",
            KnownFailure::NcclError => "nccl_error",
            KnownFailure::NcclTimeout => "nccl_timeout",
            KnownFailure::NoGpu => "no_gpu",
            KnownFailure::NotCompiledWithCuda => "not_compiled_with_cuda",
            KnownFailure::CudaDeserialize => "cuda_deserialize",
            KnownFailure::DriverTooOld => "driver_too_old",
            KnownFailure::NoKernelImage => "no_kernel_image",
            KnownFailure::EccError => "ecc_error",
            KnownFailure::InvalidDeviceOrdinal => "invalid_device_ordinal",
            KnownFailure::DeviceBusy => "device_busy",
            KnownFailure::CudaInit => "cuda_init",
            KnownFailure::CudnnError => "cudnn_error",
            KnownFailure::CublasError => "cublas_error",
            KnownFailure::DtypeMismatch => "dtype_mismatch",
            KnownFailure::IndexOutOfRange => "index_out_of_range",
            KnownFailure::HostOutOfMemory => "host_out_of_memory",
            KnownFailure::SharedMemory => "shared_memory",
            KnownFailure::StateDictKeys => "state_dict_keys",
        }
    }
}

/// Which library reported the out-of-memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Framework {
    PyTorch,
    Cublas,
    Cudnn,
    Jax,
    TensorFlow,
    Rocm,
    /// PyTorch's Apple MPS backend.
    Mps,
    /// Anything else that says CUDA ran out of memory (`CuPy`, numba, a bare CUDA error).
    Other,
}

/// Facts of an out-of-memory message; every size in exact bytes as printed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OomFacts {
    pub framework: Framework,
    /// The CUDA ordinal as printed (`GPU 0`, `device:GPU:1`, `on device 0`, `GPU_0_bfc`).
    pub gpu: Option<u32>,
    /// The allocation that failed.
    pub requested: Option<u64>,
    /// The GPU's total capacity (or the allocator's limit).
    pub total: Option<u64>,
    /// Free on the GPU when it failed.
    pub free: Option<u64>,
    /// Allocated by PyTorch (live tensors).
    pub allocated: Option<u64>,
    /// Reserved by PyTorch's caching allocator in total (new wording: allocated + reserved but
    /// unallocated, derived).
    pub reserved: Option<u64>,
    /// Reserved by PyTorch but unallocated: the cache; large against the request means
    /// fragmentation (old wording: reserved − allocated, derived).
    pub reserved_unallocated: Option<u64>,
    /// `Including non-PyTorch memory, this process has … memory in use`.
    pub process_total: Option<u64>,
    /// `Process N has … memory in use`: the other processes PyTorch saw (pid as PyTorch saw it).
    pub processes: Vec<(u32, u64)>,
    /// A per-process cap: PyTorch's `set_per_process_memory_fraction` (`… allowed;`), MPS's
    /// `max allowed` (its high watermark).
    pub allowed: Option<u64>,
    /// The allocator's own limit (TensorFlow/XLA BFC `Limit:`): below the GPU's capacity when
    /// a memory fraction caps it.
    pub limit: Option<u64>,
}

impl OomFacts {
    /// Facts with only the framework known.
    pub fn empty(framework: Framework) -> Self {
        Self {
            framework,
            gpu: None,
            requested: None,
            total: None,
            free: None,
            allocated: None,
            reserved: None,
            reserved_unallocated: None,
            process_total: None,
            processes: Vec::new(),
            allowed: None,
            limit: None,
        }
    }

    /// How many facts are known (used to prefer the fuller of two messages).
    pub(crate) fn richness(&self) -> usize {
        [
            self.gpu.is_some(),
            self.requested.is_some(),
            self.total.is_some(),
            self.free.is_some(),
            self.allocated.is_some(),
            self.reserved.is_some(),
            self.process_total.is_some(),
            self.allowed.is_some(),
            self.limit.is_some(),
        ]
        .iter()
        .filter(|b| **b)
        .count()
            + self.processes.len()
    }

    /// Fills the facts this one lacks from `other`.
    pub(crate) fn fill_from(&mut self, other: &OomFacts) {
        fn fill<T: Copy>(a: &mut Option<T>, b: Option<T>) {
            if a.is_none() {
                *a = b;
            }
        }
        fill(&mut self.gpu, other.gpu);
        fill(&mut self.requested, other.requested);
        fill(&mut self.total, other.total);
        fill(&mut self.free, other.free);
        fill(&mut self.allocated, other.allocated);
        fill(&mut self.reserved, other.reserved);
        fill(&mut self.reserved_unallocated, other.reserved_unallocated);
        fill(&mut self.process_total, other.process_total);
        fill(&mut self.allowed, other.allowed);
        fill(&mut self.limit, other.limit);
        if self.processes.is_empty() {
            self.processes.clone_from(&other.processes);
        }
    }
}

/// Facts of a device mismatch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceFacts {
    /// The devices as printed (`cuda:0`, `cpu`); `cuda` when the message names a tensor type
    /// (`torch.cuda.FloatTensor`) rather than a device.
    pub devices: Vec<String>,
    /// The argument named: `mat1`, `index`, `target`, `weight`, `input`, `hidden`.
    pub argument: Option<String>,
    /// The operator: `wrapper_CUDA__index_select`, `addmm`, `_th_addmm`.
    pub operator: Option<String>,
}

/// Kinds of shape mismatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ShapeKind {
    Matmul,
    BatchSize,
    Cat,
    Broadcast,
    View,
    ConvChannels,
    /// A convolution got an input with the wrong number of dimensions (missing batch dim).
    ConvRank,
    StateDict,
    Other,
}

/// Facts of a shape mismatch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShapeFacts {
    pub kind: ShapeKind,
    /// The shapes as printed (`64x9216`, `[10, 512]`), in the message's order.
    pub shapes: Vec<String>,
    /// The state-dict key (`fc.weight`).
    pub parameter: Option<String>,
    /// The mismatching numbers where the message gives them, in its order: matmul
    /// `[inner of mat1, inner of mat2]`, batch `[input, target]`, cat/conv `[expected, got]`,
    /// broadcast `[a, b]`, view `[input size]`.
    pub dims: Vec<u64>,
    /// The dimension index the message names (`at non-singleton dimension 1`).
    pub dim: Option<i64>,
}

/// Classifies a whole text.
pub fn analyze(text: &str) -> Analysis {
    let mut scanner = Scanner::new();
    for line in text.split('\n') {
        scanner.push_line(line);
    }
    scanner.finish()
}

#[derive(Debug, Clone)]
struct Candidate {
    rank: u8,
    richness: usize,
    failure: Failure,
    excerpt: Vec<String>,
    hint: Option<String>,
}

/// Streaming classifier: push lines as they come; memory stays bounded
/// ([`Scanner::retained_bytes`]) whatever the length of the stream.
// Independent facts of what the text showed (a traceback, any text, a chain marker, a BFC
// dump), not the states of one machine.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Clone, Default)]
pub struct Scanner {
    best: Option<Candidate>,
    /// Joined text of the current OOM candidate and its continuation lines.
    pending: Option<(String, usize)>,
    /// Last user frame of the current traceback.
    frame: Option<String>,
    /// Lines the frame stays valid after its traceback's exception line (multi-line messages
    /// such as `Error(s) in loading state_dict` follow it); `None` inside a traceback.
    frame_ttl: Option<u8>,
    /// A "During handling of the above exception" / "direct cause" line was seen: the next
    /// exception is a consequence, the one before is the root cause.
    chained: bool,
    /// Last exception-looking line and its frame, for [`Failure::Unknown`].
    last_exception: Option<(String, Option<String>)>,
    assertion: Option<String>,
    /// Facts from allocator statistics lines (TF/XLA BFC).
    aux: Option<OomFacts>,
    /// A traceback header was seen ([`Analysis::traceback`]).
    traceback: bool,
    /// A line that is not blank was seen.
    any_text: bool,
    /// A line of the BFC allocator's chunk dump was seen (printed only on a failed allocation).
    bfc_dump: bool,
    /// A line that filled a wrap width ([`WRAP_COLUMNS`], [`WRAP_BYTES`]): the first
    /// piece(s) of a wrapped message, joined as they come, and the width.
    wrap: Option<(String, usize)>,
}

/// The width a line fills if it is a wrap width (in characters for terminal columns, in bytes
/// for collectors' limits).
fn wrap_width(line: &str) -> Option<usize> {
    let bytes = line.len();
    if bytes < WRAP_COLUMNS[0] {
        return None;
    }
    if WRAP_BYTES.contains(&bytes) {
        return Some(bytes);
    }
    if bytes > 4 * WRAP_COLUMNS[WRAP_COLUMNS.len() - 1] {
        return None;
    }
    let chars = if line.is_ascii() {
        bytes
    } else {
        line.chars().count()
    };
    WRAP_COLUMNS.contains(&chars).then_some(chars)
}

fn width_of(line: &str, width: usize) -> usize {
    if WRAP_BYTES.contains(&width) || line.is_ascii() {
        line.len()
    } else {
        line.chars().count()
    }
}

/// Whether `line` can be the next piece of a wrapped message: not blank, not indented (a
/// traceback's code line), not a record of its own (a decoration prefix, a traceback header,
/// a frame, an exception line, a chain marker).
fn continues_piece(line: &str) -> bool {
    if line.trim().is_empty() || line.starts_with("  ") || line.starts_with('\t') {
        return false;
    }
    if clean::has_prefix(line) {
        return false;
    }
    let t = line.trim_start();
    !(t.starts_with("Traceback (")
        || t.starts_with("File \"")
        || t.starts_with("During handling")
        || t.starts_with("The above exception")
        || clean::is_fence(t)
        || parse::is_exception_line(t))
}

fn cap(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl Scanner {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one line (with or without its `\n`/`\r\n`). `\r`-separated segments (progress
    /// bars) are read as separate lines, and so are `\n`-separated ones if a caller pushes
    /// several lines at once; each is capped at [`MAX_LINE`] bytes. Push whole lines: a line
    /// split across two calls is read as two lines.
    pub fn push_line(&mut self, line: &str) {
        let line = line.strip_suffix('\n').unwrap_or(line);
        let line = line
            .strip_suffix('\r')
            .map_or(line, |l| if l.is_empty() { line } else { l });
        // Most lines have no newline, carriage return or escape: one pass to know it (the
        // general path below takes three), then straight to the classifier.
        let head = cap(line, MAX_LINE);
        if memchr::memchr3(b'\n', b'\r', 0x1b, head.as_bytes()).is_none() {
            self.push_physical(head);
            return;
        }
        for physical in line.split('\n') {
            let physical = cap(physical, MAX_LINE);
            let mut any = false;
            for segment in physical.split('\r').filter(|s| !s.is_empty()) {
                any = true;
                let clean = parse::strip_ansi(segment);
                self.push_physical(&clean);
            }
            if !any {
                self.push_physical(""); // a blank line ends a wrapped message
            }
        }
    }

    /// One physical line (ANSI-stripped): a piece of a message wrapped at a terminal's width or
    /// a collector's limit is held until the next piece, and the pieces are read as one line,
    /// joined as they were before the break (which may fall inside a word or a number).
    fn push_physical(&mut self, line: &str) {
        if let Some((mut held, width)) = self.wrap.take() {
            if continues_piece(line) {
                held.push_str(cap(line, MAX_WRAP.saturating_sub(held.len())));
                if width_of(line, width) == width && held.len() < MAX_WRAP {
                    self.wrap = Some((held, width));
                } else {
                    self.push_clean(&held);
                }
                return;
            }
            self.push_clean(&held);
        }
        if let Some(width) = wrap_width(line) {
            self.wrap = Some((line.to_string(), width));
            return;
        }
        self.push_clean(line);
    }

    fn push_clean(&mut self, line: &str) {
        let cleaned = clean::clean(line);
        let trimmed: &str = &cleaned;
        if trimmed.is_empty() {
            self.pending = None;
            return;
        }
        self.any_text = true;
        if trimmed.starts_with("Traceback (most recent call last)") {
            self.traceback = true;
            self.pending = None;
            self.frame = None;
            self.frame_ttl = None;
            return;
        }
        if let Some(frame) = parse::user_frame(trimmed) {
            self.pending = None;
            self.frame = Some(cap(&frame, 1024).to_string());
            self.frame_ttl = None;
            // A traceback folded onto one line (an issue title, a log collector that joins
            // lines): the error follows the frame on the same line.
            if (trimmed.contains("Error: ") || trimmed.contains("Exception: "))
                && let Some((failure, rank)) = parse::classify(trimmed)
            {
                self.offer(failure, rank, trimmed);
            }
            return;
        }
        if let Some(ttl) = self.frame_ttl.as_mut() {
            if *ttl == 0 {
                self.frame = None;
                self.frame_ttl = None;
            } else {
                *ttl -= 1;
            }
        }
        if trimmed.starts_with("During handling of the above exception")
            || trimmed.starts_with("The above exception was the direct cause")
        {
            self.chained = true;
        }
        // One pass rules out most lines for everything below but the exception check.
        let hit = parse::prefilter(trimmed);
        if hit && self.assertion.is_none() && parse::is_assertion(trimmed) {
            self.assertion = Some(cap(trimmed, 1024).to_string());
        }
        if hit && !self.bfc_dump && parse::is_bfc_dump(trimmed) {
            self.bfc_dump = true;
        }
        if hit && let Some(facts) = parse::allocator_stats(trimmed) {
            let aux = self
                .aux
                .get_or_insert_with(|| OomFacts::empty(Framework::TensorFlow));
            if parse::is_exact_stat(trimmed) {
                aux.allocated = facts.allocated;
            }
            aux.fill_from(&facts);
        }
        let is_exception = parse::is_exception_line(trimmed);
        if let Some((failure, rank)) = hit.then(|| parse::classify_filtered(trimmed)).flatten() {
            self.pending = None;
            // A launcher's summary (checked only here and below: most lines are neither) is
            // never the cause.
            if !clean::is_wrapper_report(trimmed) {
                self.offer(failure, rank, trimmed);
            }
            if is_exception {
                self.chained = false;
            }
        } else if is_exception {
            let root_kept = self.chained && self.last_exception.is_some();
            if !root_kept && !clean::is_wrapper_report(trimmed) {
                self.last_exception = Some((cap(trimmed, 1024).to_string(), self.frame.clone()));
            }
            self.chained = false;
        } else {
            self.continue_pending(trimmed);
        }
        if is_exception && self.frame_ttl.is_none() {
            self.frame_ttl = Some(8);
        }
    }

    /// A continuation line of a wrapped OOM message: re-read the joined text.
    fn continue_pending(&mut self, line: &str) {
        let Some((text, left)) = self.pending.as_mut() else {
            return;
        };
        if *left == 0 || !parse::looks_like_continuation(line) {
            self.pending = None;
            return;
        }
        *left -= 1;
        if text.len() < 16 * 1024 {
            text.push(' ');
            text.push_str(cap(line, 4096));
        }
        let joined = text.clone();
        if let Some(best) = self.best.as_mut()
            && let Failure::OutOfMemory(facts) = &mut best.failure
        {
            let more = parse::oom_facts(&joined, facts.framework);
            facts.fill_from(&more);
            best.richness = facts.richness();
            if best.excerpt.len() < MAX_EXCERPT {
                best.excerpt.push(cap(line, MAX_EXCERPT_LINE).to_string());
            }
        }
    }

    fn offer(&mut self, failure: Failure, rank: u8, line: &str) {
        let richness = match &failure {
            Failure::OutOfMemory(f) => f.richness(),
            _ => 0,
        };
        let better = match &self.best {
            None => true,
            // After "The above exception was the direct cause" / "During handling": the
            // exception printed first is the root cause, whatever the class of the one that
            // follows; only a fuller message of the same class adds facts.
            Some(best) if self.chained => {
                richness > best.richness
                    && std::mem::discriminant(&failure) == std::mem::discriminant(&best.failure)
            }
            Some(best) => {
                rank > best.rank
                    || (rank == best.rank
                        && richness > best.richness
                        && std::mem::discriminant(&failure)
                            == std::mem::discriminant(&best.failure))
            }
        };
        if !better {
            // The same out-of-memory said again (TensorFlow logs it, then raises it): what
            // follows it may carry the facts the first lacked (the node's device), so read its
            // continuation into the kept one.
            if let (Failure::OutOfMemory(_), Some(best)) = (&failure, &mut self.best)
                && let Failure::OutOfMemory(kept) = &mut best.failure
                && best.rank == rank
            {
                if let Failure::OutOfMemory(more) = &failure {
                    kept.fill_from(more);
                }
                self.pending = Some((cap(line, 16 * 1024).to_string(), CONTINUATION_LINES));
            }
            return;
        }
        let is_oom = matches!(failure, Failure::OutOfMemory(_));
        self.best = Some(Candidate {
            rank,
            richness,
            failure,
            excerpt: vec![cap(line, MAX_EXCERPT_LINE).to_string()],
            hint: self.frame.clone(),
        });
        if is_oom {
            self.pending = Some((cap(line, 16 * 1024).to_string(), CONTINUATION_LINES));
        }
    }

    /// Bytes this scanner holds now (strings it retains); bounded by a constant whatever was
    /// pushed: [`MAX_EXCERPT`] excerpt lines of at most 4 KiB, a 16 KiB pending message, and
    /// a few 1 KiB lines.
    pub fn retained_bytes(&self) -> usize {
        let mut n = std::mem::size_of::<Self>();
        if let Some(best) = &self.best {
            n += best.excerpt.iter().map(String::len).sum::<usize>();
            n += best.hint.as_ref().map_or(0, String::len);
            n += match &best.failure {
                Failure::Known(_, s) => s.len(),
                Failure::OutOfMemory(f) => f.processes.len() * 16,
                Failure::DeviceMismatch(f) => {
                    f.devices.iter().map(String::len).sum::<usize>()
                        + f.argument.as_ref().map_or(0, String::len)
                        + f.operator.as_ref().map_or(0, String::len)
                }
                Failure::ShapeMismatch(f) => {
                    f.shapes.iter().map(String::len).sum::<usize>()
                        + f.parameter.as_ref().map_or(0, String::len)
                        + f.dims.len() * 8
                }
                Failure::Unknown => 0,
            };
        }
        n += self.pending.as_ref().map_or(0, |(s, _)| s.len());
        n += self.frame.as_ref().map_or(0, String::len);
        n += self
            .last_exception
            .as_ref()
            .map_or(0, |(a, b)| a.len() + b.as_ref().map_or(0, String::len));
        n += self.assertion.as_ref().map_or(0, String::len);
        n += self.aux.as_ref().map_or(0, |a| a.processes.len() * 16);
        n += self.wrap.as_ref().map_or(0, |(s, _)| s.len());
        n
    }

    /// The analysis of everything pushed.
    pub fn finish(mut self) -> Analysis {
        if let Some((held, _)) = self.wrap.take() {
            self.push_clean(&held);
        }
        let assertion = self.assertion.take();
        // The BFC allocator dumps its statistics only when an allocation failed
        // (tensorflow/core/common_runtime/bfc_allocator.cc, DumpMemoryLog): a log cut after the
        // dump is still an out-of-memory.
        if self.best.is_none()
            && (self.bfc_dump
                || self
                    .aux
                    .as_ref()
                    .is_some_and(|a| a.limit.is_some() || a.allocated.is_some()))
        {
            self.best = Some(Candidate {
                rank: parse::RANK_ROOT,
                richness: self.aux.as_ref().map_or(0, OomFacts::richness),
                failure: Failure::OutOfMemory(OomFacts::empty(Framework::TensorFlow)),
                excerpt: Vec::new(),
                hint: self.frame.clone(),
            });
        }
        if let Some(mut best) = self.best {
            if let (Failure::OutOfMemory(facts), Some(aux)) = (&mut best.failure, &self.aux) {
                facts.fill_from(aux);
            }
            return Analysis {
                failure: best.failure,
                excerpt: best.excerpt,
                traceback_hint: best.hint,
                assertion,
                traceback: self.traceback,
                empty: !self.any_text,
            };
        }
        let (excerpt, hint) = match self.last_exception {
            Some((line, hint)) => (vec![line], hint),
            None => (Vec::new(), self.frame),
        };
        Analysis {
            failure: Failure::Unknown,
            excerpt,
            traceback_hint: hint,
            assertion,
            traceback: self.traceback,
            empty: !self.any_text,
        }
    }
}

/// Feeds a log to the triage scanner a line at a time, in bounded memory whatever the size
/// or the line lengths (a line is cut at [`MAX_LINE`] bytes; invalid UTF-8 is
/// replaced).
pub fn scan(reader: impl std::io::Read) -> std::io::Result<Analysis> {
    use std::io::BufRead as _;
    let mut reader = std::io::BufReader::with_capacity(1 << 16, reader);
    let mut scanner = Scanner::new();
    let mut line = Vec::with_capacity(1024);
    loop {
        line.clear();
        // Up to the cap; the rest of an over-long line is skipped.
        let n = std::io::Read::take(&mut reader, MAX_LINE as u64).read_until(b'\n', &mut line)?;
        if n == 0 {
            break;
        }
        if line.last() != Some(&b'\n') && n == MAX_LINE {
            loop {
                let buf = reader.fill_buf()?;
                if buf.is_empty() {
                    break;
                }
                if let Some(i) = buf.iter().position(|&b| b == b'\n') {
                    reader.consume(i + 1);
                    break;
                }
                let len = buf.len();
                reader.consume(len);
            }
        }
        // Valid UTF-8 (the usual case) is checked by the fast validator; only a line that is
        // not goes through the slower lossy conversion.
        match std::str::from_utf8(&line) {
            Ok(text) => scanner.push_line(text),
            Err(_) => scanner.push_line(&String::from_utf8_lossy(&line)),
        }
    }
    Ok(scanner.finish())
}

/// Retained state of a scanner after `lines` lines can't exceed this many bytes.
pub const SCANNER_BOUND: usize = 64 * 1024 + MAX_WRAP + MAX_EXCERPT * MAX_EXCERPT_LINE;
