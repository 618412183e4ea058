//! Line classifiers and fact extractors. Every regex is compiled once; the Rust regex engine
//! runs in linear time, and callers cap the line length.

use std::borrow::Cow;
use std::sync::LazyLock;

use aho_corasick::{AhoCorasick, AhoCorasickKind};
use regex::Regex;

use super::size::{SIZE, parse_size};
use super::{DeviceFacts, Failure, Framework, KnownFailure, OomFacts, ShapeFacts, ShapeKind};

/// Ranks: the root cause wins over its symptoms.
pub(crate) const RANK_ROOT: u8 = 90;
const RANK_ENV: u8 = 85;
const RANK_HOST: u8 = 80;
const RANK_ILLEGAL: u8 = 70;
const RANK_LIB: u8 = 65;
const RANK_NCCL: u8 = 60;
const RANK_NCCL_TIMEOUT: u8 = 50;
/// An allocator warning (`ran out of memory trying to allocate`) that the real error follows.
const RANK_OOM_WARNING: u8 = 40;

fn re(pattern: &str) -> Regex {
    Regex::new(&ascii_classes(pattern)).expect("static regex compiles")
}

/// `pattern` with `\d`, `\w`, `\s` and `\b` made ASCII (`[0-9]`, …, `(?-u:\b)`): the messages
/// matched are ASCII, and the Unicode classes cost dearly: compiling every triage regex took
/// 2.7 s and 80 MiB (counted repetitions of Unicode `\d`), and a Unicode `\b` keeps a regex off
/// its DFA. Works inside classes too (`[\w:]` becomes the nested class `[[0-9A-Za-z_]:]`).
fn ascii_classes(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 32);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str("[0-9]"),
            Some('w') => out.push_str("[0-9A-Za-z_]"),
            Some('s') => out.push_str(r"[\t\n\x0B\x0C\r ]"),
            Some('b') => out.push_str(r"(?-u:\b)"),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

fn sized(pattern: &str) -> Regex {
    re(&pattern.replace("{SIZE}", &format!("({SIZE})")))
}

static ANSI: LazyLock<Regex> =
    LazyLock::new(|| re(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])"));

/// Removes ANSI escape sequences (colours, cursor moves, OSC titles).
pub(crate) fn strip_ansi(line: &str) -> Cow<'_, str> {
    if line.contains('\x1b') {
        ANSI.replace_all(line, "")
    } else {
        Cow::Borrowed(line)
    }
}

static FRAME: LazyLock<Regex> =
    LazyLock::new(|| re(r#"^File "([^"]*)", line (\d+), in (.{1,200})$"#));

/// `File "train.py", line 42, in forward` when the frame is user code.
pub(crate) fn user_frame(line: &str) -> Option<String> {
    if !line.starts_with("File \"") {
        return None;
    }
    let caps = FRAME.captures(line)?;
    let path = caps.get(1)?.as_str();
    let library = [
        "site-packages",
        "dist-packages",
        "/lib/python",
        "<frozen",
        "/torch/",
        "/jax/",
        "/tensorflow/",
    ];
    if library.iter().any(|l| path.contains(l)) {
        return None;
    }
    // Windows: `C:\Users\me\miniconda3\Lib\site-packages\torch\…`, `C:\Python310\lib\…`
    // (any case).
    if path.contains('\\') {
        let lower = path.to_ascii_lowercase();
        let windows = ["\\lib\\", "\\torch\\", "\\jax\\", "\\tensorflow\\"];
        if windows.iter().any(|l| lower.contains(l)) {
            return None;
        }
    }
    Some(line.to_string())
}

/// The elastic agent's summary (`ChildFailedError`): never the cause.
pub(crate) fn is_agent_error(line: &str) -> bool {
    line.contains("ChildFailedError") || line.contains("elastic.multiprocessing")
}

pub(crate) fn is_assertion(line: &str) -> bool {
    line.contains("Assertion `") && line.contains("failed")
}

static EXCEPTION: LazyLock<Regex> = LazyLock::new(|| {
    re(
        // Made ASCII by `re`: with a Unicode `\b` the slow PikeVM ran for every line of a log
        // (a third of `explain`'s time on short lines).
        r"^(?:\[[^\]]{1,40}\]:?\s*|E\s{2,})?[A-Za-z_][\w.]{0,120}(?:Error|Exception|Interrupt|Exit)\b:?",
    )
});

pub(crate) fn is_exception_line(line: &str) -> bool {
    EXCEPTION.is_match(line)
}

pub(crate) fn looks_like_continuation(line: &str) -> bool {
    // A wrapped OOM message: the next piece carries one of its phrases.
    [
        "Process ",
        "total capac",
        "already allocated",
        "reserved in total",
        "Including non-PyTorch",
        "Of the allocated memory",
        "reserved by PyTorch",
        "is free",
        " free;",
        "max_split_size_mb",
        "expandable_segments",
        "PYTORCH_CUDA_ALLOC_CONF",
        "Memory Management",
        "trying to allocate",
        "allocating",
    ]
    .iter()
    .any(|p| line.contains(p))
}

// ---------------------------------------------------------------------------------------------
// Prefilter: most log lines name nothing we know; one pass rules them out.

/// Literal phrases at least one of which every classifier needs. Case-sensitive on purpose
/// (variants listed): a literal set is searched with SIMD, a case-insensitive one is not.
const PHRASES: &[&str] = &[
    // device
    "same device",
    "device type",
    "backend",
    "Input type",
    "tensors are not",
    "different from other",
    "xpected device",
    "is on CPU",
    "is on GPU",
    "is on cpu",
    "is on cuda",
    "is on CUDA",
    "expected it to be on",
    "indices should be",
    "for generator",
    "device_ids[0]",
    "Expected object of",
    // shape
    "cannot be multiplied",
    "size mismatch",
    "mat1 dim",
    "at least 1D",
    "batch2 tensor",
    "size-incompatible",
    "contracting dimensions",
    "batch_size (",
    "Sizes of tensors",
    "stack expects",
    "size of tensor a",
    "Incompatible shapes",
    "is invalid for input of size",
    "view size is not compatible",
    "channels, but got",
    "-dimensional input",
    "(batched) input",
    "Target size",
    "running_mean",
    "input_size",
    "Expected hidden",
    "Dimension out of range",
    "expected axis",
    "are incompatible",
    // out of memory
    "out of memory",
    "Out of memory",
    "OOM when",
    "RESOURCE_EXHAUSTED",
    "Resource exhausted",
    "_ALLOC_FAILED",
    "NOT_ALLOCATED",
    "OutOfMemory",
    "cudaErrorMemoryAllocation",
    // known
    "device-side assert",
    "cudaError",
    "CUDA_ERROR_",
    "kernel image",
    "invalid device function",
    "not compatible with the current PyTorch",
    "too old",
    "driver version is insufficient",
    "forward compatibility",
    "ECC",
    "compiled with CUDA",
    "deserialize",
    "No CUDA GPUs",
    "CUDA-capable",
    "NVIDIA driver",
    "NVIDIA-SMI",
    "CUDA gpu",
    "invalid device ordinal",
    "busy or unavailable",
    "unknown error",
    "initialization error",
    "CPUAllocator",
    "killed by signal",
    "bad_alloc",
    "shared memory",
    "(shm)",
    "Bus error",
    "bus error",
    "scalar type",
    "same dtype",
    "found dtype",
    "Found dtype",
    "is out of bounds",
    "Killed",
    "SIGKILL",
    "exitcode",
    "launch timed out",
    "hipErrorNoBinaryForGpu",
    "display driver",
    "Timed out initializing",
    "Cuda failure",
    "cudaMalloc failed",
    "cache blocks",
    "KV cache",
    "Dst tensor is not initialized",
    "valid cuDNN algorithm",
    "expanded size",
    "target tensor expected",
    "multi-target",
    "Output size is too small",
    "shape mismatch:",
    "weights of shape",
    "target tensor expects",
    "Expected target size",
    "doesn't match the broadcast shape",
    "does not match the shape of the indexed tensor",
    "size mismatch (got input",
    "MPS device",
    "to numpy",
    "Backend, but got",
    "must be on the current device",
    "Duplicate GPU",
    "no longer supports this GPU",
    "Tried to allocate",
    "PTX was compiled",
    "NCCL operation",
    "DNN library initialization",
    "convolution algorithm",
    "ResourceExhaustedError",
    "must be CUDA and dense",
    "No backend type associated",
    "not implemented for '",
    "to have the same device",
    "bias type",
    "index out of range",
    "out of bounds for dimension",
    "key(s) in state_dict",
    "illegal memory access",
    "illegal instruction",
    "launch failure",
    "misaligned address",
    "CUDNN_STATUS",
    "cuDNN error",
    "CUBLAS_STATUS",
    "cuBLAS error",
    "Watchdog",
    "collective operation",
    "NCCL",
    "nccl",
    "DistBackendError",
    "DistStoreError",
    "Socket Timeout",
];

/// One pass of an Aho-Corasick DFA over the line (a regex alternation of this many literals
/// ran an NFA at ~5 ns a byte, the largest cost of `explain` on short-line logs).
static PREFILTER: LazyLock<AhoCorasick> = LazyLock::new(|| {
    AhoCorasick::builder()
        .kind(Some(AhoCorasickKind::DFA))
        .build(PHRASES)
        .expect("static phrases build")
});

/// Classifies one clean line: the failure and its rank.
pub(crate) fn classify(line: &str) -> Option<(Failure, u8)> {
    if !PREFILTER.is_match(line) {
        return None;
    }
    if let Some(f) = device_mismatch(line) {
        return Some(f);
    }
    if let Some(f) = shape_mismatch(line) {
        return Some((Failure::ShapeMismatch(f), RANK_ROOT));
    }
    if let Some(f) = out_of_memory(line) {
        return Some(f);
    }
    known(line)
}

// ---------------------------------------------------------------------------------------------
// Device mismatch

fn device_of_type(ty: &str) -> &'static str {
    let lower = ty.to_ascii_lowercase();
    if lower.contains("cuda") {
        "cuda"
    } else if lower.contains("mps") {
        "mps"
    } else if lower.contains("xpu") {
        "xpu"
    } else if lower.contains("hip") {
        "hip"
    } else {
        "cpu"
    }
}

fn clean_device(d: &str) -> String {
    d.trim_matches(|c: char| matches!(c, '!' | ',' | '.' | ';' | ')' | '(' | '\'' | '"' | '`'))
        .to_string()
}

static DEV_TWO: LazyLock<Regex> =
    LazyLock::new(|| re(r"found at least two devices, ([\w:]+) and ([\w:]+)"));
static DEV_GOT: LazyLock<Regex> =
    LazyLock::new(|| re(r"but got (\w+) is on ([\w:]+), different from other tensors on ([\w:]+)"));
static DEV_CHECK_ARG: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"when checking argument for argument (\w+) in method (\w+)|when checking argument in method (\w+)",
    )
});
static DEV_OBJ: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Expected object of (?:device type|backend) (\w+) but got (?:device type|backend) (\w+) for argument #\d+ '(\w+)'(?: in call to (\w+))?",
    )
});
static DEV_OBJ_TYPE: LazyLock<Regex> = LazyLock::new(|| {
    re(r"Expected object of type ([\w.]+) but found type ([\w.]+) for argument #\d+ '(\w+)'")
});
static DEV_INPUT_TYPE: LazyLock<Regex> = LazyLock::new(|| {
    re(r"Input type \(([^)]{1,80})\) and (weight|bias) type \(([^)]{1,80})\) should be the same")
});
static DEV_ARG_ON: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Tensor for (?:argument #\d+ )?'(\w+)' is on (CPU|GPU|CUDA|cpu|cuda)[^,]*, but expected (?:it|them) to be on (CPU|GPU|CUDA|cpu|cuda)(?:[^(]*\(while checking arguments for (\w+)\))?",
    )
});
static DEV_SAME_AS: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"[Ee]xpected tensor for (?:argument #\d+ )?'(\w+)' to have the same device as tensor for (?:argument #\d+ )?'(\w+)(?:'; but device (\d+) does not equal (\d+)(?: \(while checking arguments for (\w+)\))?)?",
    )
});
static DEV_RNN: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Input and (parameter|hidden) tensors are not (?:at|on) the same device, found input tensor at ([\w:]+) and (?:parameter|hidden) tensor at ([\w:]+)",
    )
});
static DEV_INDICES: LazyLock<Regex> = LazyLock::new(|| {
    re(r"indices should be either on cpu or on the same device as the indexed tensor \((\w+)\)")
});
static DEV_EXPECTED: LazyLock<Regex> =
    LazyLock::new(|| re(r"[Ee]xpected device ([\w:]+) but got device ([\w:]+)"));
static DEV_GENERATOR: LazyLock<Regex> =
    LazyLock::new(|| re(r"Expected a '(\w+)' device type for generator but found '(\w+)'"));
static DEV_BACKEND: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Expected tensor to have (\w+) Backend, but got tensor with (\w+) Backend(?: \(while checking arguments for (\w+)\))?",
    )
});
static DEV_NUMPY: LazyLock<Regex> =
    LazyLock::new(|| re(r"can't convert ([\w:]+) device type tensor to numpy"));
static DEV_DP: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"module must have its parameters and buffers on device ([\w:]+) \(device_ids\[0\]\) but found one of them on device: ([\w:]+)",
    )
});

#[allow(clippy::too_many_lines)]
fn device_mismatch(line: &str) -> Option<(Failure, u8)> {
    let facts = |devices: Vec<String>, argument: Option<String>, operator: Option<String>| {
        Some((
            Failure::DeviceMismatch(DeviceFacts {
                devices,
                argument,
                operator,
            }),
            RANK_ROOT,
        ))
    };
    let check_arg = || {
        DEV_CHECK_ARG.captures(line).map(|c| {
            let arg = c.get(1).map(|m| m.as_str().to_string());
            let op = c
                .get(2)
                .or_else(|| c.get(3))
                .map(|m| m.as_str().to_string());
            (arg, op)
        })
    };
    if let Some(c) = DEV_GOT.captures(line) {
        let (_, op) = check_arg().unwrap_or((None, None));
        return facts(
            vec![clean_device(&c[2]), clean_device(&c[3])],
            Some(c[1].to_string()),
            op,
        );
    }
    if let Some(c) = DEV_TWO.captures(line) {
        let (arg, op) = check_arg().unwrap_or((None, None));
        return facts(vec![clean_device(&c[1]), clean_device(&c[2])], arg, op);
    }
    if line.contains("Expected all tensors to be on the same device")
        || line.contains("expected all tensors to be on the same device")
    {
        let (arg, op) = check_arg().unwrap_or((None, None));
        return facts(Vec::new(), arg, op);
    }
    if let Some(c) = DEV_INPUT_TYPE.captures(line) {
        let input = device_of_type(&c[1]);
        let param = device_of_type(&c[3]);
        if input == param {
            return Some((
                Failure::Known(KnownFailure::DtypeMismatch, cap_line(line)),
                RANK_ROOT,
            ));
        }
        // Name the tensor that is on the CPU: that's the one to move.
        let argument = if param == "cpu" {
            c[2].to_string()
        } else {
            "input".to_string()
        };
        return facts(
            vec![input.to_string(), param.to_string()],
            Some(argument),
            None,
        );
    }
    if let Some(c) = DEV_OBJ.captures(line) {
        return facts(
            vec![c[1].to_ascii_lowercase(), c[2].to_ascii_lowercase()],
            Some(c[3].to_string()),
            c.get(4).map(|m| m.as_str().to_string()),
        );
    }
    if let Some(c) = DEV_OBJ_TYPE.captures(line) {
        let (a, b) = (device_of_type(&c[1]), device_of_type(&c[2]));
        if a == b {
            return Some((
                Failure::Known(KnownFailure::DtypeMismatch, cap_line(line)),
                RANK_ROOT,
            ));
        }
        return facts(
            vec![a.to_string(), b.to_string()],
            Some(c[3].to_string()),
            None,
        );
    }
    if let Some(c) = DEV_ARG_ON.captures(line) {
        let norm = |d: &str| {
            if d.eq_ignore_ascii_case("cpu") {
                "cpu".to_string()
            } else {
                "cuda".to_string()
            }
        };
        return facts(
            vec![norm(&c[2]), norm(&c[3])],
            Some(c[1].to_string()),
            c.get(4).map(|m| m.as_str().to_string()),
        );
    }
    if let Some(c) = DEV_SAME_AS.captures(line) {
        let devices = match (c.get(3), c.get(4)) {
            (Some(a), Some(b)) => vec![
                format!("cuda:{}", a.as_str()),
                format!("cuda:{}", b.as_str()),
            ],
            _ => Vec::new(),
        };
        return facts(
            devices,
            Some(c[1].to_string()),
            c.get(5).map(|m| m.as_str().to_string()),
        );
    }
    if let Some(c) = DEV_RNN.captures(line) {
        return facts(
            vec![clean_device(&c[2]), clean_device(&c[3])],
            Some(if &c[1] == "hidden" { "hidden" } else { "input" }.to_string()),
            None,
        );
    }
    if let Some(c) = DEV_INDICES.captures(line) {
        return facts(
            vec!["cpu".to_string(), clean_device(&c[1])],
            Some("indices".to_string()),
            None,
        );
    }
    if let Some(c) = DEV_EXPECTED.captures(line) {
        return facts(vec![clean_device(&c[1]), clean_device(&c[2])], None, None);
    }
    if let Some(c) = DEV_GENERATOR.captures(line) {
        return facts(
            vec![c[1].to_string(), c[2].to_string()],
            Some("generator".to_string()),
            None,
        );
    }
    if let Some(c) = DEV_BACKEND.captures(line) {
        return facts(
            vec![c[1].to_ascii_lowercase(), c[2].to_ascii_lowercase()],
            None,
            c.get(3).map(|m| m.as_str().to_string()),
        );
    }
    if let Some(c) = DEV_NUMPY.captures(line) {
        return facts(
            vec![clean_device(&c[1]), "cpu".to_string()],
            None,
            Some("numpy".to_string()),
        );
    }
    if line.contains("Tensors must be CUDA and dense")
        || line.contains("No backend type associated with device type cpu")
    {
        // A CPU tensor handed to an NCCL collective.
        return facts(
            vec!["cpu".to_string(), "cuda".to_string()],
            None,
            Some("collective".to_string()),
        );
    }
    if line.contains("Placeholder storage has not been allocated on MPS device") {
        return facts(vec!["cpu".to_string(), "mps".to_string()], None, None);
    }
    if line.contains("Input, output and indices must be on the current device") {
        return facts(Vec::new(), Some("indices".to_string()), None);
    }
    if let Some(c) = DEV_DP.captures(line) {
        return facts(vec![clean_device(&c[1]), clean_device(&c[2])], None, None);
    }
    None
}

// ---------------------------------------------------------------------------------------------
// Shape mismatch

static SH_MATMUL: LazyLock<Regex> = LazyLock::new(|| {
    re(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)")
});
static SH_MATMUL_OLD: LazyLock<Regex> =
    LazyLock::new(|| re(r"size mismatch, m1: \[(\d+) x (\d+)\], m2: \[(\d+) x (\d+)\]"));
static SH_MATMUL_DIM: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"mat1 dim 1 must match mat2 dim 0|self and mat2 shapes cannot be multiplied|both arguments to matmul need to be at least 1D",
    )
});
static SH_BMM: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Expected size for first two dimensions of batch2 tensor to be: (\[[\d, ]{1,80}\]) but got: (\[[\d, ]{1,80}\])",
    )
});
static SH_TF_MATMUL: LazyLock<Regex> = LazyLock::new(|| {
    re(r"Matrix size-incompatible: In\[0\]: (\[[\d,]{1,80}\]), In\[1\]: (\[[\d,]{1,80}\])")
});
static SH_JAX_DOT: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"dot_general requires contracting dimensions to have the same shape, got (\([\d, ]{0,80}\)) and (\([\d, ]{0,80}\))",
    )
});
static SH_BATCH: LazyLock<Regex> = LazyLock::new(|| {
    re(r"Expected input batch_size \((\d+)\) to match target batch_size \((\d+)\)")
});
static SH_CAT: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Sizes of tensors must match except in dimension (-?\d+)\. (?:Expected size (\d+) but got size (\d+)|Got (\d+) and (\d+) in dimension (-?\d+))",
    )
});
static SH_STACK: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"stack expects each tensor to be equal size, but got (\[[\d, ]{0,80}\]) at entry (\d+) and (\[[\d, ]{0,80}\]) at entry (\d+)",
    )
});
static SH_BROADCAST: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"The size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton dimension (-?\d+)",
    )
});
static SH_TF_BROADCAST: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Incompatible shapes(?: for broadcasting)?: (?:shapes=\[)?(\[[\d, ]{0,80}\]|\([\d, ]{0,80}\)),? (?:vs\. )?(\[[\d, ]{0,80}\]|\([\d, ]{0,80}\))",
    )
});
static SH_EXPAND: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"The expanded size of the tensor \((\d+)\) must match the existing size \((\d+)\) at non-singleton dimension (-?\d+)\.\s*Target sizes: (\[[-\d, ]{0,80}\])\.\s*Tensor sizes: (\[[\d, ]{0,80}\])",
    )
});
static SH_INDEX_BROADCAST: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"shape mismatch: value tensor of shape (\[[\d, ]{0,80}\]) cannot be broadcast to indexing result of shape (\[[\d, ]{0,80}\])",
    )
});
static SH_OUT_BROADCAST: LazyLock<Regex> = LazyLock::new(|| {
    re(r"output with shape (\[[\d, ]{0,80}\]) doesn't match the broadcast shape (\[[\d, ]{0,80}\])")
});
static SH_CONV_OLD: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Given groups=\d+ and weights of shape: ?(\[[\d, ]{0,80}\]) ?, so expected input ?\((\[[\d, ]{0,80}\])\) +to have (\d+) channels, but got (\d+) channels instead",
    )
});
static SH_TARGET_PAIR: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"target tensor expects \d+D input tensors, but found inputs with sizes (\[[\d, ]{0,80}\]) and (\[[\d, ]{0,80}\])|Expected target size (\[[\d, ]{0,80}\]), got (\[[\d, ]{0,80}\])|size mismatch \(got input: (\[[\d, ]{0,80}\]), target: (\[[\d, ]{0,80}\])\)|The shape of the mask (\[[\d, ]{0,80}\]) at index \d+ does not match the shape of the indexed tensor (\[[\d, ]{0,80}\])",
    )
});
static SH_POOL: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Given input size: (\([\dx]{1,60}\))\. Calculated output size: (\([\dx-]{1,60}\))\. Output size is too small",
    )
});
static SH_VIEW: LazyLock<Regex> =
    LazyLock::new(|| re(r"shape '(\[[-\d, ]{0,200}\])' is invalid for input of size (\d+)"));
static SH_VIEW_STRIDE: LazyLock<Regex> =
    LazyLock::new(|| re(r"view size is not compatible with input tensor's size and stride"));
static SH_CONV: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Given (?:groups|transposed)=\d+, weight of size (\[[\d, ]{0,80}\]|[\d ]{1,80}), expected input(\[[\d, ]{0,80}\]) to have (\d+) channels, but got (\d+) channels instead",
    )
});
static SH_CONV_RANK: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Expected (\d+)-dimensional input for \d+-dimensional weight (\[[\d, ]{0,80}\]), but got (\d+)-dimensional input of size (\[[\d, ]{0,80}\])|Expected (\d+)D \(unbatched\) or (\d+)D \(batched\) input to (\w+), but got input of size: (\[[\d, ]{0,80}\])",
    )
});
static SH_STATE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"size mismatch for ([\w.\-]+): copying a param with shape torch\.Size\((\[[\d, ]{0,80}\])\) from checkpoint, the shape in current model is torch\.Size\((\[[\d, ]{0,80}\])\)",
    )
});
static SH_TARGET: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Target size \(torch\.Size\((\[[\d, ]{0,80}\])\)\) must be the same as input size \(torch\.Size\((\[[\d, ]{0,80}\])\)\)",
    )
});
static SH_RUNNING_MEAN: LazyLock<Regex> =
    LazyLock::new(|| re(r"running_mean should contain (\d+) elements not (\d+)"));
static SH_RNN_INPUT: LazyLock<Regex> = LazyLock::new(|| {
    re(r"input\.size\(-1\) must be equal to input_size\. Expected (\d+), got (\d+)")
});
static SH_HIDDEN: LazyLock<Regex> = LazyLock::new(|| {
    re(r"Expected hidden(?:\[\d\])? size (\([\d, ]{0,80}\)), got (\[[\d, ]{0,80}\])")
});
static SH_DIM_RANGE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Dimension out of range \(expected to be in range of \[(-?\d+), (-?\d+)\], but got (-?\d+)\)",
    )
});
static SH_KERAS: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"expected axis (-?\d+) of input shape to have value (\d+),? but received input with shape (\([\w, ]{0,80}\))",
    )
});
static SH_KERAS_SHAPES: LazyLock<Regex> =
    LazyLock::new(|| re(r"Shapes (\([\w, ]{0,80}\)) and (\([\w, ]{0,80}\)) are incompatible"));

fn num(s: &str) -> u64 {
    s.parse().unwrap_or(0)
}

fn shape(kind: ShapeKind, shapes: Vec<String>, dims: Vec<u64>, dim: Option<i64>) -> ShapeFacts {
    ShapeFacts {
        kind,
        shapes,
        parameter: None,
        dims,
        dim,
    }
}

#[allow(clippy::too_many_lines)]
fn shape_mismatch(line: &str) -> Option<ShapeFacts> {
    if let Some(c) = SH_MATMUL
        .captures(line)
        .or_else(|| SH_MATMUL_OLD.captures(line))
    {
        return Some(shape(
            ShapeKind::Matmul,
            vec![
                format!("{}x{}", &c[1], &c[2]),
                format!("{}x{}", &c[3], &c[4]),
            ],
            vec![num(&c[2]), num(&c[3])],
            None,
        ));
    }
    if let Some(c) = SH_BMM.captures(line) {
        return Some(shape(
            ShapeKind::Matmul,
            vec![c[1].to_string(), c[2].to_string()],
            vec![],
            None,
        ));
    }
    if let Some(c) = SH_TF_MATMUL
        .captures(line)
        .or_else(|| SH_JAX_DOT.captures(line))
    {
        return Some(shape(
            ShapeKind::Matmul,
            vec![c[1].to_string(), c[2].to_string()],
            vec![],
            None,
        ));
    }
    if SH_MATMUL_DIM.is_match(line) {
        return Some(shape(ShapeKind::Matmul, vec![], vec![], None));
    }
    if let Some(c) = SH_STATE.captures(line) {
        let mut f = shape(
            ShapeKind::StateDict,
            vec![c[2].to_string(), c[3].to_string()],
            vec![],
            None,
        );
        f.parameter = Some(c[1].to_string());
        return Some(f);
    }
    if let Some(c) = SH_BATCH.captures(line) {
        return Some(shape(
            ShapeKind::BatchSize,
            vec![],
            vec![num(&c[1]), num(&c[2])],
            None,
        ));
    }
    if let Some(c) = SH_CAT.captures(line) {
        let (dims, dim) = if let Some(e) = c.get(2) {
            (vec![num(e.as_str()), num(&c[3])], None)
        } else {
            (vec![num(&c[4]), num(&c[5])], c[6].parse().ok())
        };
        // "except in dimension N": the concatenation dimension; the mismatch is in another.
        return Some(shape(ShapeKind::Cat, vec![], dims, dim));
    }
    if let Some(c) = SH_STACK.captures(line) {
        return Some(shape(
            ShapeKind::Cat,
            vec![c[1].to_string(), c[3].to_string()],
            vec![],
            None,
        ));
    }
    if let Some(c) = SH_BROADCAST.captures(line) {
        return Some(shape(
            ShapeKind::Broadcast,
            vec![],
            vec![num(&c[1]), num(&c[2])],
            c[3].parse().ok(),
        ));
    }
    if let Some(c) = SH_EXPAND.captures(line) {
        return Some(shape(
            ShapeKind::Broadcast,
            vec![c[4].to_string(), c[5].to_string()],
            vec![num(&c[1]), num(&c[2])],
            c[3].parse().ok(),
        ));
    }
    if let Some(c) = SH_INDEX_BROADCAST
        .captures(line)
        .or_else(|| SH_OUT_BROADCAST.captures(line))
    {
        return Some(shape(
            ShapeKind::Broadcast,
            vec![c[1].to_string(), c[2].to_string()],
            vec![],
            None,
        ));
    }
    if let Some(c) = SH_CONV_OLD.captures(line) {
        return Some(shape(
            ShapeKind::ConvChannels,
            vec![c[1].to_string(), c[2].to_string()],
            vec![num(&c[3]), num(&c[4])],
            None,
        ));
    }
    if let Some(c) = SH_TARGET_PAIR.captures(line) {
        let shapes: Vec<String> = (1..=8)
            .filter_map(|i| c.get(i).map(|m| m.as_str().to_string()))
            .collect();
        return Some(shape(ShapeKind::Other, shapes, vec![], None));
    }
    if let Some(c) = SH_POOL.captures(line) {
        return Some(shape(
            ShapeKind::Other,
            vec![c[1].to_string(), c[2].to_string()],
            vec![],
            None,
        ));
    }
    if line.contains("0D or 1D target tensor expected, multi-target not supported")
        || line.contains("multi-target not supported")
    {
        return Some(shape(ShapeKind::Other, vec![], vec![], None));
    }
    if let Some(c) = SH_TF_BROADCAST.captures(line) {
        return Some(shape(
            ShapeKind::Broadcast,
            vec![c[1].to_string(), c[2].to_string()],
            vec![],
            None,
        ));
    }
    if let Some(c) = SH_VIEW.captures(line) {
        return Some(shape(
            ShapeKind::View,
            vec![c[1].to_string()],
            vec![num(&c[2])],
            None,
        ));
    }
    if SH_VIEW_STRIDE.is_match(line) {
        return Some(shape(ShapeKind::View, vec![], vec![], None));
    }
    if let Some(c) = SH_CONV.captures(line) {
        let weight = c[1].trim().to_string();
        let weight = if weight.starts_with('[') {
            weight
        } else {
            format!(
                "[{}]",
                weight.split_whitespace().collect::<Vec<_>>().join(", ")
            )
        };
        return Some(shape(
            ShapeKind::ConvChannels,
            vec![weight, c[2].to_string()],
            vec![num(&c[3]), num(&c[4])],
            None,
        ));
    }
    if let Some(c) = SH_CONV_RANK.captures(line) {
        if let Some(expected) = c.get(1) {
            return Some(shape(
                ShapeKind::ConvRank,
                vec![c[2].to_string(), c[4].to_string()],
                vec![num(expected.as_str()), num(&c[3])],
                None,
            ));
        }
        return Some(shape(
            ShapeKind::ConvRank,
            vec![c[8].to_string()],
            vec![num(&c[5]), num(&c[6])],
            None,
        ));
    }
    if let Some(c) = SH_TARGET.captures(line) {
        return Some(shape(
            ShapeKind::Other,
            vec![c[1].to_string(), c[2].to_string()],
            vec![],
            None,
        ));
    }
    if let Some(c) = SH_RUNNING_MEAN
        .captures(line)
        .or_else(|| SH_RNN_INPUT.captures(line))
    {
        return Some(shape(
            ShapeKind::Other,
            vec![],
            vec![num(&c[1]), num(&c[2])],
            None,
        ));
    }
    if let Some(c) = SH_HIDDEN.captures(line) {
        return Some(shape(
            ShapeKind::Other,
            vec![c[1].to_string(), c[2].to_string()],
            vec![],
            None,
        ));
    }
    if let Some(c) = SH_DIM_RANGE.captures(line) {
        return Some(shape(ShapeKind::Other, vec![], vec![], c[3].parse().ok()));
    }
    if let Some(c) = SH_KERAS.captures(line) {
        return Some(shape(
            ShapeKind::Matmul,
            vec![c[3].to_string()],
            vec![num(&c[2])],
            c[1].parse().ok(),
        ));
    }
    if let Some(c) = SH_KERAS_SHAPES.captures(line) {
        return Some(shape(
            ShapeKind::Other,
            vec![c[1].to_string(), c[2].to_string()],
            vec![],
            None,
        ));
    }
    None
}

// ---------------------------------------------------------------------------------------------
// Out of memory

static OOM_HEAD: LazyLock<Regex> = LazyLock::new(|| {
    re(concat!(
        r"(?P<torch>(?P<accel>CUDA|HIP|XPU) out of memory)|",
        r"(?P<partial>Tried to allocate [\d.,]{1,20} ?[A-Za-z]{1,5}(?: \(GPU \d+;|\. GPU \d+ has a total capac))|(?P<cudaerr>CUDA error: out of memory|HIP error: out of memory|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY|hipErrorOutOfMemory|CUDA driver error: out of memory)|",
        r"(?P<cublas>CUBLAS_STATUS_ALLOC_FAILED)|",
        r"(?P<cudnn>CUDNN_STATUS_NOT_ALLOCATED|CUDNN_STATUS_ALLOC_FAILED)|",
        r"(?P<tf>OOM when allocating)|",
        r"(?P<jax>RESOURCE_EXHAUSTED|Resource exhausted:|XlaRuntimeError: .{0,40}[Oo]ut of memory)|",
        r"(?P<mps>MPS backend out of memory)|",
        r"(?P<bfc>ran out of memory trying to allocate)|",
        r"(?P<generic>OutOfMemoryError|Out of memory allocating|ResourceExhaustedError|cuda runtime error \(2\) : out of memory|error=2 : out of memory|Cuda failure 'out of memory'|cudaMalloc failed: out of memory|Dst tensor is not initialized|No available memory for the cache blocks|larger than the maximum number of tokens that can be stored in KV cache)"
    ))
});

static GPU_NO: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"\(GPU (\d+);|GPU (\d+) has a total capac|device:GPU:(\d+)|GPU_(\d+)_bfc|on device (\d+)|device ordinal (\d+)|Device (\d+) has",
    )
});
static REQ: LazyLock<Regex> = LazyLock::new(|| {
    sized(
        r"(?:Tried to allocate|[Tt]rying to allocate|Attempting to allocate|Failed to allocate request for|[Ff]ailed to allocate|Out of memory allocating|[Oo]ut of memory while trying to allocate|allocating) {SIZE}",
    )
});
static EXACT_BYTES: LazyLock<Regex> =
    LazyLock::new(|| re(r"\((?:rounded to )?(\d+)(?:B| bytes)?\)"));
static OLD_PAREN: LazyLock<Regex> = LazyLock::new(|| re(r"\(GPU \d+; ([^)]{1,600})\)"));
static OLD_PIECE: LazyLock<Regex> = LazyLock::new(|| {
    sized(
        r"^\s*{SIZE} (total capacity|already allocated|free|reserved in total by PyTorch|cached|allowed)",
    )
});
static NEW_TOTAL: LazyLock<Regex> =
    LazyLock::new(|| sized(r"total capaci?ty of {SIZE} of which {SIZE} is free"));
static NEW_PROC: LazyLock<Regex> =
    LazyLock::new(|| sized(r"Process (\d+) has {SIZE} memory in use"));
static NEW_THIS: LazyLock<Regex> =
    LazyLock::new(|| sized(r"this process has {SIZE} memory in use"));
static NEW_ALLOC: LazyLock<Regex> = LazyLock::new(|| sized(r"{SIZE} is allocated by PyTorch"));
static NEW_UNALLOC: LazyLock<Regex> =
    LazyLock::new(|| sized(r"{SIZE} is reserved by PyTorch but unallocated"));
static THERE_ARE_FREE: LazyLock<Regex> = LazyLock::new(|| sized(r"There are {SIZE} free"));
static SO_FAR: LazyLock<Regex> = LazyLock::new(|| sized(r"allocated so far: {SIZE}"));
static MPS: LazyLock<Regex> = LazyLock::new(|| {
    sized(r"MPS allocated: {SIZE}, other allocations: {SIZE}, max allowed: {SIZE}")
});
static TF_SHAPE: LazyLock<Regex> = LazyLock::new(|| {
    re(r"OOM when allocating tensor with shape\s?\[([\d,\s]{0,200})\] and type (\w+)")
});

fn size_at(c: &regex::Captures<'_>, i: usize) -> Option<u64> {
    c.get(i).and_then(|m| parse_size(m.as_str()))
}

fn dtype_bytes(name: &str) -> Option<u64> {
    Some(match name {
        "float" | "float32" | "int32" | "uint32" | "qint32" => 4,
        "half" | "bfloat16" | "float16" | "int16" | "uint16" => 2,
        "double" | "float64" | "int64" | "uint64" | "complex64" => 8,
        "complex128" => 16,
        "int8" | "uint8" | "bool" | "qint8" | "quint8" => 1,
        _ => return None,
    })
}

fn out_of_memory(line: &str) -> Option<(Failure, u8)> {
    if line.contains("DefaultCPUAllocator") || line.contains("CPUAllocator") {
        return None;
    }
    if !OOM_HEAD.is_match(line) {
        return None;
    }
    let has = |p: &str| line.contains(p);
    let mut rank = RANK_ROOT;
    let framework = if has("HIP out of memory") || has("hipError") || has("HIP error") {
        Framework::Rocm
    } else if has("MPS backend out of memory") {
        Framework::Mps
    } else if has("CUBLAS_STATUS_ALLOC_FAILED") {
        Framework::Cublas
    } else if has("CUDNN_STATUS_NOT_ALLOCATED") || has("CUDNN_STATUS_ALLOC_FAILED") {
        Framework::Cudnn
    } else if has("ran out of memory trying to allocate") {
        // The BFC allocator's warning; the real error (JAX or TensorFlow) follows.
        rank = RANK_OOM_WARNING;
        Framework::TensorFlow
    } else if has("external/org_tensorflow") || has("external/xla") || has("jaxlib") {
        // jaxlib vendors TensorFlow's XLA sources under external/.
        Framework::Jax
    } else if has("OOM when allocating")
        || has("Dst tensor is not initialized")
        || has("tensorflow")
        || has("ResourceExhaustedError")
        || has("from device:")
    {
        Framework::TensorFlow
    } else if has("RESOURCE_EXHAUSTED") || has("Resource exhausted") || has("jax") || has("Xla") {
        Framework::Jax
    } else if has("CUDA out of memory")
        || has("XPU out of memory")
        || has("THC")
        || has("torch")
        || has("RuntimeError")
        || line.starts_with("CUDA error")
    {
        Framework::PyTorch
    } else {
        Framework::Other
    };
    Some((Failure::OutOfMemory(oom_facts(line, framework)), rank))
}

/// Every fact an OOM text gives.
pub(crate) fn oom_facts(text: &str, framework: Framework) -> OomFacts {
    let mut f = OomFacts::empty(framework);
    if let Some(c) = GPU_NO.captures(text) {
        f.gpu = (1..=7)
            .find_map(|i| c.get(i))
            .and_then(|m| m.as_str().parse().ok());
    }
    if let Some(c) = REQ.captures(text) {
        f.requested = size_at(&c, 1);
        // An exact byte count right after the rounded figure: `1.17GiB (rounded to 1258291200)`,
        // `3.00GiB (3221225472B)`, `3.77G (4046333952 bytes)`.
        let rest = &text[c.get(0).map_or(0, |m| m.end())..];
        let near = cap_str(rest, 40);
        if let Some(e) = EXACT_BYTES.captures(near)
            && let Ok(n) = e[1].parse::<u64>()
        {
            f.requested = Some(n);
        }
    }
    if let Some(c) = OLD_PAREN.captures(text) {
        for piece in c[1].split(';') {
            if let Some(p) = OLD_PIECE.captures(piece) {
                let value = size_at(&p, 1);
                match &p[2] {
                    "total capacity" => f.total = value,
                    "already allocated" => f.allocated = value,
                    "free" => f.free = value,
                    "allowed" => f.allowed = value,
                    _ => f.reserved = value, // "reserved in total by PyTorch", 1.x "cached"
                }
            }
        }
        if let (Some(r), Some(a)) = (f.reserved, f.allocated) {
            f.reserved_unallocated = Some(r.saturating_sub(a));
        }
    }
    if let Some(c) = NEW_TOTAL.captures(text) {
        f.total = size_at(&c, 1);
        f.free = size_at(&c, 2);
    }
    for c in NEW_PROC.captures_iter(text).take(256) {
        if let (Ok(pid), Some(bytes)) = (c[1].parse(), size_at(&c, 2)) {
            f.processes.push((pid, bytes));
        }
    }
    if let Some(c) = NEW_THIS.captures(text) {
        f.process_total = size_at(&c, 1);
    }
    if let Some(c) = NEW_ALLOC.captures(text) {
        f.allocated = size_at(&c, 1);
    }
    if let Some(c) = NEW_UNALLOC.captures(text) {
        f.reserved_unallocated = size_at(&c, 1);
        if let (Some(a), Some(u)) = (f.allocated, f.reserved_unallocated) {
            f.reserved = a.checked_add(u);
        }
    }
    if let Some(c) = THERE_ARE_FREE.captures(text) {
        f.free = size_at(&c, 1);
    }
    if let Some(c) = SO_FAR.captures(text) {
        f.allocated = size_at(&c, 1);
    }
    if let Some(c) = MPS.captures(text) {
        f.allocated = size_at(&c, 1);
        f.total = size_at(&c, 3);
    }
    if f.requested.is_none()
        && let Some(c) = TF_SHAPE.captures(text)
    {
        // TensorFlow names the tensor, not its size: elements × the dtype's width.
        let elements = c[1]
            .split(',')
            .map(|d| d.trim().parse::<u64>().ok())
            .try_fold(1u64, |acc, d| acc.checked_mul(d?));
        f.requested = elements
            .zip(dtype_bytes(&c[2]))
            .and_then(|(e, w)| e.checked_mul(w));
    }
    f
}

static BFC_LIMIT: LazyLock<Regex> = LazyLock::new(|| re(r"^(?:.*\] )?\s*Limit:\s+(\d+)\s*$"));
static BFC_INUSE: LazyLock<Regex> = LazyLock::new(|| re(r"^(?:.*\] )?\s*InUse:\s+(\d+)\s*$"));

/// Facts from TensorFlow/XLA BFC allocator statistics (`Limit:`, `InUse:`) and its
/// `ran out of memory trying to allocate … (rounded to N)` warning.
pub(crate) fn allocator_stats(line: &str) -> Option<OomFacts> {
    if !(line.contains("Limit:") || line.contains("InUse:")) {
        return None;
    }
    let mut f = OomFacts::empty(Framework::TensorFlow);
    if let Some(c) = BFC_LIMIT.captures(line) {
        f.total = c[1].parse().ok();
    }
    if let Some(c) = BFC_INUSE.captures(line) {
        f.allocated = c[1].parse().ok();
    }
    (f.total.is_some() || f.allocated.is_some()).then_some(f)
}

// ---------------------------------------------------------------------------------------------
// Other known failures

static KNOWN: LazyLock<Vec<(Regex, KnownFailure, u8)>> = LazyLock::new(|| {
    use KnownFailure as K;
    [
        (r"(?i)device-side assert(?:ion)? triggered|cudaErrorAssert|CUDA_ERROR_ASSERT", K::DeviceSideAssert, RANK_ROOT),
        (r"(?i)no kernel image is available|cudaErrorNoKernelImageForDevice|invalid device function|CUDA_ERROR_NO_BINARY_FOR_GPU|hipErrorNoBinaryForGpu|no longer supports this GPU|is not compatible with the current PyTorch installation", K::NoKernelImage, RANK_ENV),
        (r"(?i)NVIDIA driver on your system is too old|driver version is insufficient for CUDA runtime|cudaErrorInsufficientDriver|CUDA_ERROR_SYSTEM_DRIVER_MISMATCH|forward compatibility was attempted on non supported HW|unsupported display driver / cuda driver combination|PTX was compiled with an unsupported toolchain", K::DriverTooOld, RANK_ENV),
        (r"(?i)uncorrectable ECC error|cudaErrorECCUncorrectable|CUDA_ERROR_ECC_UNCORRECTABLE", K::EccError, RANK_ENV),
        (r"Torch not compiled with CUDA enabled", K::NotCompiledWithCuda, RANK_ENV),
        (r"Attempting to deserialize object on (?:a )?CUDA device", K::CudaDeserialize, RANK_ENV),
        (r"(?i)found no NVIDIA driver|No CUDA GPUs are available|no CUDA-capable device is detected|cudaErrorNoDevice|CUDA_ERROR_NO_DEVICE|you might not have a CUDA gpu|NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver", K::NoGpu, RANK_ENV),
        (r"(?i)invalid device ordinal|cudaErrorInvalidDevice\b|CUDA_ERROR_INVALID_DEVICE", K::InvalidDeviceOrdinal, RANK_ENV),
        (r"(?i)CUDA-capable device\(s\) (?:is/are|is|are) busy or unavailable|cudaErrorDevicesUnavailable", K::DeviceBusy, RANK_ENV),
        (r"(?i)CUDA unknown error|CUDA error: unknown error|cudaErrorUnknown|CUDA error: initialization error|cudaErrorInitializationError|CUDA_ERROR_NOT_INITIALIZED", K::CudaInit, RANK_ENV),
        (r"(?i)DefaultCPUAllocator: (?:can't allocate memory|not enough memory)|^Killed$|Signal 9 \(SIGKILL\) received|exitcode\s*:\s*-9\b|DataLoader worker \(pid\(?s?\)? ?[\d, ]*\)? is killed by signal: Killed|std::bad_alloc", K::HostOutOfMemory, RANK_HOST),
        (r"(?i)insufficient shared memory \(shm\)|unable to (?:write to file|open shared memory object)|DataLoader worker .{0,40}killed by signal: Bus error|bus error", K::SharedMemory, RANK_HOST),
        (r"expected scalar type \w+ but found \w+|expected (?:mat1 and mat2|m1 and m2) to have the same dtype|[Ff]ound dtype \w+ but expected \w+|Expected object of scalar type \w+ but got scalar type|and bias type .{0,60} should be the same|must have the same dtype|not implemented for '\w+'", K::DtypeMismatch, RANK_ROOT),
        (r"index out of range in self|index \d+ is out of bounds for dimension|Target -?\d+ is out of bounds", K::IndexOutOfRange, RANK_ROOT),
        // Below the shape ranks so a `size mismatch for` in the same message wins.
        (r"(?:Missing|Unexpected) key\(s\) in state_dict", K::StateDictKeys, RANK_ROOT - 2),
        (r"(?i)an illegal memory access was encountered|cudaErrorIllegalAddress|CUDA_ERROR_ILLEGAL_ADDRESS", K::IllegalMemoryAccess, RANK_ILLEGAL),
        (r"(?i)unspecified launch failure|misaligned address|the launch timed out and was terminated|an illegal instruction was encountered|cudaErrorLaunchFailure|CUDA_ERROR_LAUNCH_FAILED", K::LaunchFailure, RANK_ILLEGAL),
        (r"CUDNN_STATUS_\w+|cuDNN error|Unable to find a valid cuDNN algorithm|DNN library initialization failed|Failed to get convolution algorithm", K::CudnnError, RANK_LIB),
        (r"CUBLAS_STATUS_\w+|cuBLAS error", K::CublasError, RANK_LIB),
        (r"(?i)Watchdog caught collective operation timeout|collective operation timeout|NCCL communicator was aborted|ProcessGroupNCCL.{0,80}timed out|DistStoreError: .{0,60}timed? ?out|Socket Timeout|Timed out initializing process group", K::NcclTimeout, RANK_NCCL_TIMEOUT),
        // The specific reason NCCL gives beats its generic "NCCL error" line.
        (r"Duplicate GPU detected", K::NcclError, RANK_NCCL + 1),
        (r"(?i:NCCL error)|NCCL operation \w+|ncclUnhandledCudaError|ncclSystemError|ncclInternalError|ncclInvalidArgument|ncclInvalidUsage|ncclRemoteError|unhandled system error, NCCL version|DistBackendError", K::NcclError, RANK_NCCL),
    ]
    .into_iter()
    .map(|(p, k, r)| (re(p), k, r))
    .collect()
});

fn cap_str(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn cap_line(line: &str) -> String {
    cap_str(line, 4096).to_string()
}

fn known(line: &str) -> Option<(Failure, u8)> {
    KNOWN
        .iter()
        .find(|(r, _, _)| r.is_match(line))
        .map(|(_, k, rank)| (Failure::Known(*k, cap_line(line)), *rank))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_made_ascii_escapes_kept() {
        assert_eq!(ascii_classes(r"\d+"), "[0-9]+");
        assert_eq!(ascii_classes(r"[\w:]"), "[[0-9A-Za-z_]:]");
        assert_eq!(ascii_classes(r"a\sb\b"), r"a[\t\n\x0B\x0C\r ]b(?-u:\b)");
        assert_eq!(ascii_classes(r"\\d\.\(\D"), r"\\d\.\(\D");
        let r = re(r"^(\w+) (\d{1,3})\b");
        assert!(r.is_match("abc 123 x"));
        assert!(!r.is_match("abc 1234"));
        assert!(!r.is_match("abc ١٢٣"), "Arabic-Indic digits are not ASCII");
    }

    #[test]
    fn the_ascii_regexes_still_classify() {
        let text = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB. \
                    GPU 0 has a total capacity of 139.80 GiB of which 5.94 MiB is free.";
        assert!(classify(text).is_some());
        for line in [
            "RuntimeError: Expected all tensors to be on the same device",
            "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x3 and 5x6)",
            "RuntimeError: CUDA error: device-side assert triggered",
            "InUse: 1024 Limit: 2048",
        ] {
            let _ = classify(line);
            let _ = allocator_stats(line);
        }
    }
}
