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
        // TensorFlow's node decoration after an op's error (errors_impl / AttachContext):
        // it names the device (`_device="/job:localhost/replica:0/task:0/device:GPU:1"`).
        "[[Node:",
        // NCCL src/include/alloc.h, after its `Cuda failure 'out of memory'` WARN line.
        "Failed to CUDA",
        "[[{{node",
        "_device=",
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
    // allocator statistics (see allocator_stats)
    "Limit:",
    "InUse:",
    "Sum Total of in-use",
    "otal memory:",
    "totalMemory:",
    "Failed to CUDA",
    // signatures (see SIGNATURES)
    "Expected object of",
    "tensors are not at",
    "tensors are not on",
    "different GPUs",
    "incompatible devices",
    "colocated on the same device",
    "explicit device specification",
    "devices matching that specification",
    "Cannot colocate",
    "annot assign a device",
    "must be equal",
    "must be equal rank",
    "but is rank",
    "Input to reshape",
    "Cannot reshape",
    "inner dimension does not match",
    "Assign requires shapes",
    "when attempting to restore variable",
    "not compatible with",
    "Shape mismatch in layer",
    "load a weight file",
    "Layer count mismatch",
    "variables during loading",
    "variable.assign(value)",
    "incompatible with the layer",
    "incompatible with layer",
    "executable is built for device",
    "dot_general requires",
    "incompatible shapes for broadcasting",
    "Incompatible shapes for broadcasting",
    "same number of dimensions",
    "arrays of different rank",
    "inconsistent sizes",
    "weight tensor expected",
    "Assertion `",
    "runtime error (59)",
    "can't be cast to the desired",
    "xpected object of sca",
    "busy or unavailable",
    "ontracting dimension sizes",
    "must have the same rank",
    "are not compatible",
    "Incompatible shapes: ",
    "view size is not compatible",
    "in state_dict",
    "posix_memalign",
    "Torch: not enough memory",
    "[Errno 12]",
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
    "out of memory",
    "runtime err(2)",
    "runtime err (2)",
    "udnn_status_alloc_failed",
    "UDNN_STATUS_ALLOC_FAILED",
    "HIP_ERROR_OutOfMemory",
    "CUDA failed with error out of memory",
    "cuda failed with error",
    "hipError_t(1002)",
    "ailed to determine best cudnn",
    "ailed to determine best cuDNN",
    "with 'cpu' backend",
    "jax.local_devices",
    "saved weight has shape",
    "shared memory segment",
    "have failed or timed out",
    "InUse at ",
    "Free at ",
    "Total Chunks:",
    "Errno 12]",
    "Attempting to reserve",
    "ran out of memory",
    // known
    "device-side assert",
    "cudaError",
    "CUDA_ERROR_",
    "kernel image",
    "invalid device function",
    "Invalid device function",
    "not compatible with the current PyTorch",
    "too old",
    "driver version is insufficient",
    "forward compatibility",
    "ECC",
    "compiled with CUDA",
    "deserialize",
    "Initializer expected to generate shape",
    "Inconsistent shapes between value",
    "ScopeParamShapeError",
    "feature_group_count must equal",
    "cannot reshape array",
    "reshape total size",
    "must have the same shape",
    "Watchdog caught",
    "Cuda failure '",
    "NCCL failure",
    "No CUDA GPUs",
    "CUDA-capable",
    "NVIDIA driver",
    "NVIDIA-SMI",
    "CUDA gpu",
    "invalid device ordinal",
    "busy or unavailable",
    "unknown error",
    "initialization error",
    "SYSTEM_NOT_READY",
    "SystemNotReady",
    "system not yet initialized",
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

/// Whether the line holds any phrase a classifier or the allocator statistics need: one pass,
/// and most lines of a log fail it.
pub(crate) fn prefilter(line: &str) -> bool {
    PREFILTER.is_match(line)
}

/// Classifies one clean line: the failure and its rank.
pub(crate) fn classify(line: &str) -> Option<(Failure, u8)> {
    if !PREFILTER.is_match(line) {
        return None;
    }
    classify_filtered(line)
}

/// [`classify`] for a line that passed [`prefilter`].
pub(crate) fn classify_filtered(line: &str) -> Option<(Failure, u8)> {
    if let Some(f) = device_mismatch(line) {
        return Some(f);
    }
    if let Some(f) = shape_mismatch(line) {
        return Some((Failure::ShapeMismatch(f), RANK_ROOT));
    }
    if let Some(f) = out_of_memory(line) {
        return Some(f);
    }
    known(line).or_else(|| signature(line))
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

// PyTorch aten/src/ATen/TensorIterator.cpp (compute_types) and the dispatcher's
// aten/src/ATen/core/op_registration/adaption.cpp (common_device_check_failure), 1.9+.
static DEV_TWO: LazyLock<Regex> =
    LazyLock::new(|| re(r"found at least two devices, ([\w:]+)(?: and ([\w:]+))?"));
// PyTorch aten/src/ATen/TensorIterator.cpp, 1.5-1.8 ("but got <arg> is on <dev>, different
// from other tensors on <dev>").
static DEV_GOT: LazyLock<Regex> =
    LazyLock::new(|| re(r"but got (\w+) is on ([\w:]+), different from other tensors on ([\w:]+)"));
// PyTorch aten/src/ATen/core/op_registration/adaption.cpp: the argument and the method.
static DEV_CHECK_ARG: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"when checking argument for argument (\w+) in method (\w+)|when checking argument in method (\w+)",
    )
});
// PyTorch aten/src/ATen/Utils.h (checked_dense_tensor_unwrap), 0.4-1.6.
static DEV_OBJ: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Expected object of (?:device type|backend) (\w+) but got (?:device type|backend) (\w+) for argument #\d+ '(\w+)'(?: in call to (\w+))?",
    )
});
// PyTorch 0.3-0.4 torch/csrc/autograd / THP bindings ("Expected object of type").
static DEV_OBJ_TYPE: LazyLock<Regex> = LazyLock::new(|| {
    re(r"Expected object of type ([\w.]+) but found type ([\w.]+) for argument #\d+ '(\w+)'")
});
// PyTorch aten/src/ATen/native/Convolution.cpp (check_input_same_type_as_parameters):
// the types name both device and dtype.
static DEV_INPUT_TYPE: LazyLock<Regex> = LazyLock::new(|| {
    // `should be the same`, or as much of it as a cut message kept.
    re(r"Input type \(([^)]{1,80})\) and (weight|bias) type \(([^)]{1,80})\) should")
});
// PyTorch aten/src/ATen/TensorUtils.cpp (checkDeviceType / checkSameGPU callers), 1.x.
static DEV_ARG_ON: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Tensor for (?:argument #\d+ )?'(\w+)' is on (CPU|GPU|CUDA|cpu|cuda)[^,]*, but expected (?:it|them) to be on (CPU|GPU|CUDA|cpu|cuda)(?:[^(]*\(while checking arguments for (\w+)\))?",
    )
});
// PyTorch aten/src/ATen/TensorUtils.cpp (checkSameGPU, checkAllSameGPU).
static DEV_SAME_AS: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"[Ee]xpected tensor for (?:argument #\d+ )?'(\w+)' to have the same device as tensor for (?:argument #\d+ )?'(\w+)(?:'; but device (\d+) does not equal (\d+)(?: \(while checking arguments for (\w+)\))?)?",
    )
});
// PyTorch aten/src/ATen/native/RNN.h (check_attributes) and cudnn/RNN.cpp.
static DEV_RNN: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Input and (parameter|hidden) tensors are not (?:at|on) the same device, found input tensor at ([\w:]+) and (?:parameter|hidden) tensor at ([\w:]+)",
    )
});
// PyTorch aten/src/ATen/native/TensorAdvancedIndexing.cpp (index checks).
static DEV_INDICES: LazyLock<Regex> = LazyLock::new(|| {
    re(r"indices should be either on cpu or on the same device as the indexed tensor \(([\w:]+)\)")
});
// PyTorch c10/core/TensorImpl / aten checks ("Expected device <d> but got device <d>").
static DEV_EXPECTED: LazyLock<Regex> =
    LazyLock::new(|| re(r"[Ee]xpected device ([\w:]+) but got device ([\w:]+)"));
// PyTorch aten/src/ATen/core/Generator.h (check_generator).
static DEV_GENERATOR: LazyLock<Regex> =
    LazyLock::new(|| re(r"Expected a '(\w+)' device type for generator but found '(\w+)'"));
// PyTorch aten/src/ATen/TensorUtils.cpp (checkBackend), 1.x.
static DEV_BACKEND: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Expected tensor to have (\w+) Backend, but got tensor with (\w+) Backend(?: \(while checking arguments for (\w+)\))?",
    )
});
// PyTorch torch/csrc/utils/tensor_numpy.cpp (tensor_to_numpy).
static DEV_NUMPY: LazyLock<Regex> =
    LazyLock::new(|| re(r"can't convert ([\w:]+) device type tensor to numpy"));
// PyTorch torch/nn/parallel/data_parallel.py (DataParallel.forward).
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
        // The second device is missing when the message was cut after the first.
        let devices = [c.get(1), c.get(2)]
            .into_iter()
            .flatten()
            .map(|m| clean_device(m.as_str()))
            .filter(|d| !d.is_empty())
            .collect();
        return facts(devices, arg, op);
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

// PyTorch aten/src/ATen/native/LinearAlgebra.cpp (addmm meta), 1.8+.
static SH_MATMUL: LazyLock<Regex> = LazyLock::new(|| {
    re(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)")
});
// PyTorch aten/src/THC/generic/THCTensorMathBlas.cu / TH (addmm), before 1.8.
static SH_MATMUL_OLD: LazyLock<Regex> =
    LazyLock::new(|| re(r"size mismatch, m1: \[(\d+) x (\d+)\], m2: \[(\d+) x (\d+)\]"));
// PyTorch aten/src/ATen/native/LinearAlgebra.cpp (matmul, mm checks).
static SH_MATMUL_DIM: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"mat1 dim 1 must match mat2 dim 0|self and mat2 shapes cannot be multiplied|both arguments to matmul need to be at least 1D",
    )
});
// PyTorch aten/src/ATen/native/LinearAlgebra.cpp (bmm/baddbmm checks).
static SH_BMM: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Expected size for first two dimensions of batch2 tensor to be: (\[[\d, ]{1,80}\]) but got: (\[[\d, ]{1,80}\])",
    )
});
// TensorFlow core/kernels/matmul_op_impl.h ("Matrix size-incompatible: In[0]: .., In[1]: ..").
static SH_TF_MATMUL: LazyLock<Regex> = LazyLock::new(|| {
    re(r"Matrix size-incompatible: In\[0\]: (\[[\d,]{1,80}\]), In\[1\]: (\[[\d,]{1,80}\])")
});
// JAX jax/_src/lax/lax.py (_dot_general_shape_rule).
static SH_JAX_DOT: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"dot_general requires contracting dimensions to have the same shape, got (\([\d, ]{0,80}\)) and (\([\d, ]{0,80}\))",
    )
});
// PyTorch aten/src/ATen/native/LossNLL.cpp (nll_loss_nd), torch/nn/functional.py before.
static SH_BATCH: LazyLock<Regex> = LazyLock::new(|| {
    re(r"Expected input batch_size \((\d+)\) to match target batch_size \((\d+)\)")
});
// PyTorch aten/src/ATen/native/TensorShape.cpp (check_cat_shape_except_dim); 1.5-1.9 on
// CUDA named the mismatching dimension ("Got N and M in dimension D").
static SH_CAT: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Sizes of tensors must match except in dimension (-?\d+)\. (?:Expected size (\d+) but got size (\d+)|Got (\d+) and (\d+) in dimension (-?\d+))",
    )
});
// PyTorch aten/src/ATen/native/TensorShape.cpp (get_stack_inputs).
static SH_STACK: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"stack expects each tensor to be equal size, but got (\[[\d, ]{0,80}\]) at entry (\d+) and (\[[\d, ]{0,80}\]) at entry (\d+)",
    )
});
// PyTorch aten/src/ATen/ExpandUtils.cpp (infer_size_impl), 0.4-2.x.
static SH_BROADCAST: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"The size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton dimension (-?\d+)",
    )
});
// TensorFlow core/kernels/cwise_ops_common.cc ("Incompatible shapes: [..] vs. [..]") and
// JAX jax/_src/lax/lax.py ("Incompatible shapes for broadcasting: shapes=[..]").
static SH_TF_BROADCAST: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Incompatible shapes(?: for broadcasting)?: (?:shapes=\[)?(\[[\d, ]{0,80}\]|\([\d, ]{0,80}\)),? (?:vs\. )?(\[[\d, ]{0,80}\]|\([\d, ]{0,80}\))",
    )
});
// PyTorch aten/src/ATen/ExpandUtils.cpp (inferExpandGeometry).
static SH_EXPAND: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"The expanded size of the tensor \((\d+)\) must match the existing size \((\d+)\) at non-singleton dimension (-?\d+)\.\s*Target sizes: (\[[-\d, ]{0,80}\])\.\s*Tensor sizes: (\[[\d, ]{0,80}\])",
    )
});
// PyTorch aten/src/ATen/native/TensorAdvancedIndexing.cpp (index_put_ shape check).
static SH_INDEX_BROADCAST: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"shape mismatch: value tensor of shape (\[[\d, ]{0,80}\]) cannot be broadcast to indexing result of shape (\[[\d, ]{0,80}\])",
    )
});
// PyTorch aten/src/ATen/TensorIterator.cpp (compute_shape, out= argument).
static SH_OUT_BROADCAST: LazyLock<Regex> = LazyLock::new(|| {
    re(r"output with shape (\[[\d, ]{0,80}\]) doesn't match the broadcast shape (\[[\d, ]{0,80}\])")
});
// PyTorch aten/src/ATen/native/Convolution.cpp (check_shape_forward), 1.0-1.4 wording.
static SH_CONV_OLD: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Given groups=\d+ and weights of shape: ?(\[[\d, ]{0,80}\]) ?, so expected input ?\((\[[\d, ]{0,80}\])\) +to have (\d+) channels, but got (\d+) channels instead",
    )
});
// PyTorch aten/src/ATen/native/Loss*.cpp / THNN criterion checks.
static SH_TARGET_PAIR: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"target tensor expects \d+D input tensors, but found inputs with sizes (\[[\d, ]{0,80}\]) and (\[[\d, ]{0,80}\])|Expected target size (\[[\d, ]{0,80}\]), got (\[[\d, ]{0,80}\])|size mismatch \(got input: (\[[\d, ]{0,80}\]), target: (\[[\d, ]{0,80}\])\)|The shape of the mask (\[[\d, ]{0,80}\]) at index \d+ does not match the shape of the indexed tensor (\[[\d, ]{0,80}\])",
    )
});
// PyTorch aten/src/ATen/native/Pool.h (pool2d_shape_check).
static SH_POOL: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Given input size: (\([\dx]{1,60}\))\. Calculated output size: (\([\dx-]{1,60}\))\. Output size is too small",
    )
});
// PyTorch aten/src/ATen/InferSize.h (infer_size_impl).
static SH_VIEW: LazyLock<Regex> =
    LazyLock::new(|| re(r"shape '(\[[-\d, ]{0,200}\])' is invalid for input of size (\d+)"));
// PyTorch aten/src/ATen/native/TensorShape.cpp (view_impl).
static SH_VIEW_STRIDE: LazyLock<Regex> =
    LazyLock::new(|| re(r"view size is not compatible with input tensor's size and stride"));
// PyTorch aten/src/ATen/native/Convolution.cpp (check_shape_forward), 1.5+.
static SH_CONV: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Given (?:groups|transposed)=\d+, weight of size (\[[\d, ]{0,80}\]|[\d ]{1,80}), expected input(\[[\d, ]{0,80}\]) to have (\d+) channels, but got (\d+) channels instead",
    )
});
// PyTorch aten/src/ATen/native/Convolution.cpp (check_shape_forward: "Expected N-dimensional
// input for N-dimensional weight", before 1.11; batchify: "Expected 3D (unbatched) or 4D
// (batched) input to conv2d", 1.11+).
static SH_CONV_RANK: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Expected (\d+)-dimensional input for \d+-dimensional weight (\[[\d, ]{0,80}\]), but got (\d+)-dimensional input of size (\[[\d, ]{0,80}\])|Expected (\d+)D \(unbatched\) or (\d+)D \(batched\) input to (\w+), but got input of size: (\[[\d, ]{0,80}\])",
    )
});
// PyTorch torch/nn/modules/module.py (_load_from_state_dict).
static SH_STATE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"size mismatch for ([\w.\-]+): copying a param with shape torch\.Size\((\[[\d, ]{0,80}\])\) from checkpoint, the shape in current model is torch\.Size\((\[[\d, ]{0,80}\])\)",
    )
});
// PyTorch torch/nn/functional.py (binary_cross_entropy*).
static SH_TARGET: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Target size \(torch\.Size\((\[[\d, ]{0,80}\])\)\) must be the same as input size \(torch\.Size\((\[[\d, ]{0,80}\])\)\)",
    )
});
// PyTorch aten/src/ATen/native/Normalization.cpp (batch_norm checks).
static SH_RUNNING_MEAN: LazyLock<Regex> =
    LazyLock::new(|| re(r"running_mean should contain (\d+) elements not (\d+)"));
// PyTorch torch/nn/modules/rnn.py (check_input).
static SH_RNN_INPUT: LazyLock<Regex> = LazyLock::new(|| {
    re(r"input\.size\(-1\) must be equal to input_size\. Expected (\d+), got (\d+)")
});
// PyTorch torch/nn/modules/rnn.py (check_hidden_size).
static SH_HIDDEN: LazyLock<Regex> = LazyLock::new(|| {
    re(r"Expected hidden(?:\[\d\])? size (\([\d, ]{0,80}\)), got (\[[\d, ]{0,80}\])")
});
// PyTorch c10/core/WrapDimMinimal.cpp (maybe_wrap_dim).
static SH_DIM_RANGE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Dimension out of range \(expected to be in range of \[(-?\d+), (-?\d+)\], but got (-?\d+)\)",
    )
});
// Keras layers/input_spec.py (assert_input_compatibility; engine/input_spec.py in tf.keras).
static SH_KERAS: LazyLock<Regex> = LazyLock::new(|| {
    re(
        // Keras 2.2 engine/base_layer.py said "… to have value 784 but got shape (None, 28, 28)".
        r"expected axis (-?\d+) of input shape to have value (\d+),? but (?:received input with|got) shape (\([\w, ]{0,80}\))",
    )
});
// TensorFlow python/framework/tensor_shape.py (assert_is_compatible_with), from tf.keras losses.
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

// PyTorch c10/cuda/CUDACachingAllocator.cpp (every wording; "HIP" once hipified, XPU's own
// allocator), c10/cuda/CUDAException.cpp ("CUDA error: out of memory"), cuBLAS/cuDNN status
// names (aten/src/ATen/cuda/Exceptions.h), TensorFlow core/framework/op_kernel.cc ("OOM when
// allocating") and core/common_runtime/bfc_allocator.cc, XLA/PjRt RESOURCE_EXHAUSTED,
// aten/src/ATen/mps/MPSAllocator.mm, CuPy cupy/cuda/memory.pyx, NCCL src/include/checks.h.
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
        // PyTorch 0.1-0.4 THC (THCGeneral.cpp "cuda runtime error (%d) : %s", 2 =
        // cudaErrorMemoryAllocation), also retyped; cuDNN's status name in a lowercased title;
        // CuPy <= 6 (cupy/cuda/memory.pyx "out of memory to allocate %d bytes (total %d
        // bytes)"); XLA's ROCm driver (xla/stream_executor/rocm/rocm_driver.cc); TensorFlow's
        // Eigen allocator (core/common_runtime/gpu/gpu_device.cc); XLA's tf_allocator_adapter.cc.
        // CTranslate2 src/cuda/utils.h ("CUDA failed with error out of memory"), Caffe2
        // caffe2/core/common_gpu.h CUDA_ENFORCE ("Error at: <file>:<line>: out of memory"),
        // XLA's TPU/host allocator ("Attempting to reserve 6.48G at the bottom of memory").
        r"(?P<wrapped>(?i:cuda failed with error (?:2 )?out of memory)|hipError_t\(1002\)|Error at: \S{1,300}:\d+: out of memory|Attempting to reserve \S+ at the bottom of memory)|",
        r"(?P<old>(?i:cuda runtime err(?:or)? ?\(2\) ?: ?out of memory|cudnn_status_alloc_failed)|out of memory to allocate|HIP_ERROR_OutOfMemory|EigenAllocator for GPU ran out of memory|Out of memory while trying to allocate)|",
        r"(?P<generic>OutOfMemoryError|Out of memory allocating|ResourceExhaustedError|cuda runtime error \(2\) : out of memory|error=2 : out of memory|Cuda failure 'out of memory'|cudaMalloc failed: out of memory|Dst tensor is not initialized|No available memory for the cache blocks|larger than the maximum number of tokens that can be stored in KV cache)"
    ))
});

static GPU_NO: LazyLock<Regex> = LazyLock::new(|| {
    re(
        // TensorFlow 1.x named devices `/gpu:0` (lower case) before `/device:GPU:0`.
        r"\(GPU (\d+);|GPU (\d+) has a total capac|device:GPU:(\d+)|GPU_(\d+)_bfc|on device (\d+)|device ordinal (\d+)|Device (\d+) has|/gpu:(\d+)",
    )
});
static REQ: LazyLock<Regex> = LazyLock::new(|| {
    sized(
        r"(?:Tried to allocate|[Tt]rying to allocate|out of memory to allocate|Attempting to reserve|Failed to CUDA (?:calloc|malloc|host alloc)|Attempting to allocate|Failed to allocate request for|[Ff]ailed to allocate|Out of memory allocating|[Oo]ut of memory while trying to allocate|allocating) {SIZE}",
    )
});
static EXACT_BYTES: LazyLock<Regex> =
    LazyLock::new(|| re(r"\((?:rounded to )?(\d+)(?:B| bytes)?\)"));
// TensorFlow core/common_runtime/gpu/gpu_device.cc (EigenAllocator): a count of bytes, no unit.
static EIGEN_BYTES: LazyLock<Regex> =
    LazyLock::new(|| re(r"ran out of memory when allocating (\d{1,20})\b"));
// The 1.x parenthesis, closed or cut short (a log collector's line limit, an issue title).
static OLD_PAREN: LazyLock<Regex> = LazyLock::new(|| re(r"\(GPU \d+; ([^)]{1,600})(?:\)|$)"));
static OLD_PIECE: LazyLock<Regex> = LazyLock::new(|| {
    sized(
        r"^\s*{SIZE} (total capacity|already allocated|free|reserved in total by PyTorch|cached|allowed)",
    )
});
// PyTorch c10/cuda/CUDACachingAllocator.cpp, 2.1+ ("capacty" in 2.1).
static NEW_TOTAL: LazyLock<Regex> =
    LazyLock::new(|| sized(r"total capaci?ty of {SIZE} of which {SIZE} is free"));
// PyTorch c10/cuda/CUDACachingAllocator.cpp (reportProcessMemoryInfo, through NVML), 2.1+.
static NEW_PROC: LazyLock<Regex> =
    LazyLock::new(|| sized(r"Process (\d+) has {SIZE} memory in use"));
static NEW_THIS: LazyLock<Regex> =
    LazyLock::new(|| sized(r"this process has {SIZE} memory in use"));
static NEW_ALLOC: LazyLock<Regex> = LazyLock::new(|| sized(r"{SIZE} is allocated by PyTorch"));
static NEW_UNALLOC: LazyLock<Regex> =
    LazyLock::new(|| sized(r"{SIZE} is reserved by PyTorch but unallocated"));
static THERE_ARE_FREE: LazyLock<Regex> = LazyLock::new(|| sized(r"There are {SIZE} free"));
// CuPy's pool total (cupy/cuda/memory.pyx: `allocated so far`, `total` before v7): what the
// pool holds, used blocks and cached ones.
static SO_FAR: LazyLock<Regex> = LazyLock::new(|| {
    sized(r"(?:allocated so far: |out of memory to allocate .{1,40}\(total ){SIZE}")
});
// PyTorch aten/src/ATen/mps/MPSAllocator.mm (alloc_buffer_block).
// CuPy cupy/cuda/memory.pyx, a pool with set_limit / CUPY_GPU_MEMORY_LIMIT.
static CUPY_LIMIT: LazyLock<Regex> = LazyLock::new(|| sized(r"limit set to: {SIZE}"));
static MPS: LazyLock<Regex> = LazyLock::new(|| {
    sized(r"MPS allocated: {SIZE}, other allocations: {SIZE}, max allowed: {SIZE}")
});
// TensorFlow core/framework/op_kernel.cc (OpKernelContext::allocate_tensor).
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
    // Advice that names the error is not the error: "If you encounter CUDA out of memory, try
    // a smaller --tile" printed by a program after its own, different, failure.
    let lead = line.trim_start();
    if lead.starts_with("If ") || lead.starts_with("if ") {
        return None;
    }
    let has = |p: &str| line.contains(p);
    // TensorFlow names the device a tensor was to live on (core/framework/op_kernel.cc): on the
    // CPU, by the CPU allocator, it is host RAM that ran out.
    if has("OOM when allocating") && names_a_cpu_device(line) {
        return Some((
            Failure::Known(KnownFailure::HostOutOfMemory, cap_line(line)),
            RANK_HOST,
        ));
    }
    let mut rank = RANK_ROOT;
    let framework =
        if has("HIP out of memory") || has("hipError") || has("HIP error") || has("HIP_ERROR") {
            Framework::Rocm
        } else if has("MPS backend out of memory") {
            Framework::Mps
        } else if has("CUBLAS_STATUS_ALLOC_FAILED") {
            // Often the symptom of an out-of-range index on the GPU (asynchronous): an
            // IndexError in the same log wins.
            rank = RANK_ROOT - 1;
            Framework::Cublas
        } else if has("CUDNN_STATUS_NOT_ALLOCATED")
            || has("CUDNN_STATUS_ALLOC_FAILED")
            || line
                .to_ascii_lowercase()
                .contains("cudnn_status_alloc_failed")
        {
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
        } else if has("RESOURCE_EXHAUSTED") || has("Resource exhausted") || has("jax") || has("Xla")
        {
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

// The device and allocator TensorFlow's OOM names for the tensor itself
// (core/framework/op_kernel.cc: "OOM when allocating tensor with shape[..] and type .. on
// /job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu"), not a node decoration's.
static TF_OOM_DEVICE: LazyLock<Regex> = LazyLock::new(|| {
    re(r"OOM when allocating tensor.{0,400}? on (\S{1,120}) by allocator (\w{1,40})")
});

/// A TensorFlow OOM for a tensor on the CPU, by the CPU allocator: host RAM ran out.
fn names_a_cpu_device(line: &str) -> bool {
    TF_OOM_DEVICE.captures(line).is_some_and(|c| {
        let (device, allocator) = (&c[1], &c[2]);
        device.contains("device:CPU:")
            || device.ends_with("/cpu:0")
            || allocator == "cpu"
            || allocator == "mklcpu"
    })
}

/// Every fact an OOM text gives.
pub(crate) fn oom_facts(text: &str, framework: Framework) -> OomFacts {
    let mut f = OomFacts::empty(framework);
    if let Some(c) = GPU_NO.captures(text) {
        f.gpu = (1..=8)
            .find_map(|i| c.get(i))
            .and_then(|m| m.as_str().parse().ok());
    }
    if let Some(c) = REQ.captures(text) {
        f.requested = size_at(&c, 1);
        // An exact byte count right after the rounded figure: `1.17GiB (rounded to 1258291200)`,
        // `3.00GiB (3221225472B)`, `3.77G (4046333952 bytes)`.
        let rest = &text[c.get(0).map_or(0, |m| m.end())..];
        let near = cap_str(rest, 40);
        // Only a count close to the rounded figure is its exact value (`hipError_t(1002)` is
        // an error code).
        if let Some(e) = EXACT_BYTES.captures(near)
            && let Ok(n) = e[1].parse::<u64>()
            && f.requested
                .is_none_or(|r| n >= r / 2 && n <= r.saturating_mul(2))
        {
            f.requested = Some(n);
        }
    }
    if f.requested.is_none()
        && let Some(c) = EIGEN_BYTES.captures(text)
    {
        f.requested = c[1].parse().ok();
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
                    // 1.0-1.3: the cache alone, `amount_cached - amount_allocated`
                    // (aten/src/THC/THCCachingAllocator.cpp, then c10/cuda/
                    // CUDACachingAllocator.cpp until 1.4 renamed the figure).
                    "cached" => f.reserved_unallocated = value,
                    // 1.4-2.0: allocated + cache (c10/cuda/CUDACachingAllocator.cpp).
                    _ => f.reserved = value,
                }
            }
        }
        match (f.reserved, f.allocated, f.reserved_unallocated) {
            (Some(r), Some(a), None) => f.reserved_unallocated = Some(r.saturating_sub(a)),
            (None, Some(a), Some(u)) => f.reserved = a.checked_add(u),
            _ => {}
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
        f.reserved = size_at(&c, 1);
    }
    if let Some(c) = CUPY_LIMIT.captures(text) {
        f.limit = size_at(&c, 1);
    }
    if let Some(c) = MPS.captures(text) {
        // aten/src/ATen/mps/MPSAllocator.mm: the allocator's heaps, the process's other Metal
        // allocations, and the high watermark (a cap, not the machine's memory).
        f.allocated = size_at(&c, 1);
        f.process_total = f
            .allocated
            .zip(size_at(&c, 2))
            .map(|(a, o)| a.saturating_add(o));
        f.allowed = size_at(&c, 3);
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
static BFC_CHUNK: LazyLock<Regex> = LazyLock::new(|| {
    // After the glog prefix (taken off by clean.rs, or still there).
    re(
        r"(?:^|\] )(?:InUse|Free) at (?:0x)?[0-9a-f]{4,16} (?:of size|next)|(?:^|\] )Bin \(\d+\): \s*Total Chunks:",
    )
});
// TensorFlow 1.x core/common_runtime/gpu/gpu_device.cc, when it creates the device: "Found
// device 0 with properties: ... totalMemory: 1.94GiB freeMemory: 1.71GiB". The capacity is the
// card's; the free figure is at start, not at the failure, so it is not kept as `free`.
// TensorFlow 1.0-1.4 printed it on a line of its own: "Total memory: 7.92GiB".
static TF_DEVICE_TOTAL: LazyLock<Regex> =
    LazyLock::new(|| sized(r"(?:totalMemory: ?|^Total memory: ){SIZE}"));
// NVIDIA/nccl src/include/alloc.h: the allocation a `Cuda failure 'out of memory'` was for,
// on a WARN line of its own, before or after it.
static NCCL_ALLOC: LazyLock<Regex> =
    LazyLock::new(|| sized(r"Failed to CUDA (?:calloc|malloc|host alloc)(?: async)? {SIZE}"));
// core/common_runtime/bfc_allocator.cc (DumpMemoryLog): "Sum Total of in-use chunks: 2.27GiB".
static BFC_SUM: LazyLock<Regex> = LazyLock::new(|| sized(r"Sum Total of in-use chunks: {SIZE}"));

/// Facts from TensorFlow/XLA BFC allocator statistics (`Limit:`, `InUse:`) and its
/// `ran out of memory trying to allocate … (rounded to N)` warning.
pub(crate) fn allocator_stats(line: &str) -> Option<OomFacts> {
    if !(line.contains("Limit:")
        || line.contains("InUse:")
        || line.contains("Sum Total of in-use")
        || line.contains("otal memory:")
        || line.contains("totalMemory:")
        || line.contains("Failed to CUDA"))
    {
        return None;
    }
    let mut f = OomFacts::empty(Framework::TensorFlow);
    if let Some(c) = NCCL_ALLOC.captures(line) {
        f.requested = size_at(&c, 1);
        return f.requested.is_some().then_some(f);
    }
    if let Some(c) = TF_DEVICE_TOTAL.captures(line) {
        f.total = size_at(&c, 1);
        return f.total.is_some().then_some(f);
    }
    if let Some(c) = BFC_LIMIT.captures(line) {
        f.limit = c[1].parse().ok();
    }
    if let Some(c) = BFC_INUSE.captures(line) {
        f.allocated = c[1].parse().ok();
    } else if let Some(c) = BFC_SUM.captures(line) {
        f.allocated = size_at(&c, 1);
    }
    (f.limit.is_some() || f.allocated.is_some()).then_some(f)
}

/// The statistics line gives an exact byte count (`InUse:`), which beats a rounded one
/// (`Sum Total of in-use chunks: 479.75MiB`) read before it.
/// A line of the BFC allocator's chunk dump (`InUse at f008f1f00 of size 256 next 35`, `Bin (256):
/// Total Chunks: …`), which it prints only when an allocation failed
/// (`core/common_runtime/bfc_allocator.cc`, `DumpMemoryLog`).
pub(crate) fn is_bfc_dump(line: &str) -> bool {
    BFC_CHUNK.is_match(line)
}

pub(crate) fn is_exact_stat(line: &str) -> bool {
    BFC_INUSE.is_match(line)
}

// ---------------------------------------------------------------------------------------------
// Other known failures

static KNOWN: LazyLock<Vec<(Regex, KnownFailure, u8)>> = LazyLock::new(|| {
    use KnownFailure as K;
    [
        // CUDA runtime cudaErrorAssert through c10/cuda/CUDAException.cpp (C10_CUDA_CHECK), the
        // kernels' CUDA_KERNEL_ASSERT (c10/macros/Macros.h).
        (r"(?i)device-side assert(?:ion)? triggered|cudaErrorAssert|CUDA_ERROR_ASSERT", K::DeviceSideAssert, RANK_ROOT),
        // cudaErrorNoKernelImageForDevice / HIP hipErrorNoBinaryForGpu (ROCm/clr hip_error.cpp),
        // torch/cuda/__init__.py (_check_cubins: "is not compatible with the current PyTorch
        // installation", "no longer supports this GPU").
        (r"(?i)no kernel image is available|cudaErrorNoKernelImageForDevice|invalid device function|CUDA_ERROR_NO_BINARY_FOR_GPU|hipErrorNoBinaryForGpu|no longer supports this GPU|is not compatible with the current PyTorch installation", K::NoKernelImage, RANK_ENV),
        // cudaErrorInsufficientDriver, c10/cuda/CUDAFunctions.cpp (device_count_impl: "The NVIDIA
        // driver on your system is too old"), CUDA forward-compatibility errors.
        (r"(?i)NVIDIA driver on your system is too old|driver version is insufficient for CUDA runtime|cudaErrorInsufficientDriver|CUDA_ERROR_SYSTEM_DRIVER_MISMATCH|forward compatibility was attempted on non supported HW|unsupported display driver / cuda driver combination|PTX was compiled with an unsupported toolchain", K::DriverTooOld, RANK_ENV),
        // cudaErrorECCUncorrectable through C10_CUDA_CHECK.
        (r"(?i)uncorrectable ECC error|cudaErrorECCUncorrectable|CUDA_ERROR_ECC_UNCORRECTABLE", K::EccError, RANK_ENV),
        // torch/cuda/__init__.py (_lazy_init).
        (r"Torch not compiled with CUDA enabled", K::NotCompiledWithCuda, RANK_ENV),
        // torch/serialization.py (validate_cuda_device).
        (r"Attempting to ?deserialize object on (?:a )?CUDA device", K::CudaDeserialize, RANK_ENV),
        // c10/cuda/CUDAFunctions.cpp (device_count_ensure_non_zero: "No CUDA GPUs are
        // available"), cudaErrorNoDevice, torch/cuda/__init__.py ("Found no NVIDIA driver").
        (r"(?i)found no NVIDIA driver|No CUDA GPUs are available|no CUDA-capable device is detected|cudaErrorNoDevice|CUDA_ERROR_NO_DEVICE|you might not have a CUDA gpu|NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver", K::NoGpu, RANK_ENV),
        // cudaErrorInvalidDevice through C10_CUDA_CHECK.
        (r"(?i)invalid device ordinal|cudaErrorInvalidDevice\b|CUDA_ERROR_INVALID_DEVICE", K::InvalidDeviceOrdinal, RANK_ENV),
        // cudaErrorDevicesUnavailable (exclusive-process compute mode).
        (r"(?i)CUDA-capable device\(s\) (?:is/are|is|are) busy or unavailable|cudaErrorDevicesUnavailable", K::DeviceBusy, RANK_ENV),
        // cudaErrorUnknown / cudaErrorInitializationError through C10_CUDA_CHECK.
        (r"(?i)CUDA unknown error|CUDA error: unknown error|cudaErrorUnknown|CUDA error: initialization error|cudaErrorInitializationError|CUDA_ERROR_NOT_INITIALIZED|CUDA_ERROR_SYSTEM_NOT_READY|cudaErrorSystemNotReady|system not yet initialized", K::CudaInit, RANK_ENV),
        // c10/core/impl/alloc_cpu.cpp (DefaultCPUAllocator; c10/core/CPUAllocator.cpp before
        // 1.11), torch/utils/data/_utils/signal_handling.py ("DataLoader worker (pid N) is killed by
        // signal"), torch/distributed/elastic (exitcode -9).
        (r"(?i)DefaultCPUAllocator: (?:can't allocate memory|not enough memory)|^Killed$|Signal 9 \(SIGKILL\) received|exitcode\s*:\s*-9\b|DataLoader worker \(pid\(?s?\)? ?[\d, ]*\)? is killed by signal: Killed|std::bad_alloc", K::HostOutOfMemory, RANK_HOST),
        // torch/utils/data/_utils/signal_handling.py (bus error), aten/src/ATen/MapAllocator.cpp
        // ("unable to open shared memory object", "unable to write to file").
        (r"(?i)insufficient shared memory \(shm\)|unable to (?:write to file|open shared memory object)|DataLoader worker .{0,40}killed by signal: Bus error|bus error", K::SharedMemory, RANK_HOST),
        // aten/src/ATen/templates/TensorMethods.cpp (check_type: "expected scalar type X but found
        // Y"), LinearAlgebra.cpp (mat1 and mat2 dtype), Convolution.cpp (bias type).
        (r"expected scalar type \w+ but found \w+|expected (?:mat1 and mat2|m1 and m2) to have the same dtype|[Ff]ound dtype \w+ but expected \w+|Expected object of scalar type \w+ but got scalar type|and bias type .{0,60} should be the same|must have the same dtype|not implemented for '\w+'", K::DtypeMismatch, RANK_ROOT),
        // aten/src/ATen/native/Embedding.cpp / TensorAdvancedIndexing.cpp (index_select),
        // LossNLL.cpp ("Target N is out of bounds").
        (r"index out of range in self|index \d+ is out of bounds for dimension|Target -?\d+ is out of bounds", K::IndexOutOfRange, RANK_ROOT),
        // Below the shape ranks so a `size mismatch for` in the same message wins.
        // torch/nn/modules/module.py (load_state_dict).
        (r"(?:Missing|Unexpected) key\(s\) in state_dict", K::StateDictKeys, RANK_ROOT - 2),
        // cudaErrorIllegalAddress through C10_CUDA_CHECK.
        (r"(?i)an illegal memory access was encountered|cudaErrorIllegalAddress|CUDA_ERROR_ILLEGAL_ADDRESS", K::IllegalMemoryAccess, RANK_ILLEGAL),
        // cudaErrorLaunchFailure, cudaErrorMisalignedAddress, cudaErrorLaunchTimeout,
        // cudaErrorIllegalInstruction.
        (r"(?i)unspecified launch failure|misaligned address|the launch timed out and was terminated|an illegal instruction was encountered|cudaErrorLaunchFailure|CUDA_ERROR_LAUNCH_FAILED", K::LaunchFailure, RANK_ILLEGAL),
        // cudnnGetErrorString names through aten/src/ATen/cuda/Exceptions.h (AT_CUDNN_CHECK);
        // TensorFlow stream_executor/cuda/cuda_dnn.cc, core/kernels/conv_ops.cc.
        (r"CUDNN_STATUS_\w+|cuDNN error|Unable to find a valid cuDNN algorithm|DNN library initialization failed|Failed to get convolution algorithm|(?i:Failed to determine best cudnn convolution algorithm)", K::CudnnError, RANK_LIB),
        // cublasStatus_t names through aten/src/ATen/cuda/Exceptions.h (TORCH_CUDABLAS_CHECK).
        (r"CUBLAS_STATUS_\w+|cuBLAS error", K::CublasError, RANK_LIB),
        // torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp: the watchdog's words for an NCCL
        // error as much as for a timeout, so an NCCL error, ranked below both: the specific line
        // wins when the log has it.
        (r"Some NCCL operations have failed or timed out", K::NcclError, RANK_NCCL_TIMEOUT - 1),
        // torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (WorkNCCL::checkTimeout: "Watchdog
        // caught collective operation timeout"), c10d TCPStore ("Socket Timeout").
        (r"(?i)Watchdog caught collective operation timeout|collective operation timeout|NCCL communicator was aborted|ProcessGroupNCCL.{0,80}timed out|DistStoreError: .{0,60}timed? ?out|Socket Timeout|Timed out initializing process group", K::NcclTimeout, RANK_NCCL_TIMEOUT),
        // The specific reason NCCL gives beats its generic "NCCL error" line.
        (r"Duplicate GPU detected", K::NcclError, RANK_NCCL + 1),
        // torch/csrc/distributed/c10d/NCCLUtils.hpp (C10D_NCCL_CHECK: "NCCL error in: <file>:<line>,
        // <ncclGetErrorString>"), NVIDIA/nccl src/init.cc (ncclGetErrorString texts).
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

// ---------------------------------------------------------------------------------------------
// Signatures: wordings that decide the class alone
//
// Each is the fixed part of a message template in a framework's own source (the file named
// builds the message), so that a message whose numbers were lost (cut by a log collector or an
// issue title, wrapped, in a TensorFlow graph node's decoration) is still read. The facts the
// full message carries come from the extractors above; a signature only adds the numbers that
// sit right next to its words.

/// What a signature says.
#[derive(Clone, Copy)]
enum Says {
    Device,
    Shape(ShapeKind),
    Known(KnownFailure),
}

static SIGNATURES: LazyLock<Vec<(Regex, Says)>> = LazyLock::new(|| {
    use KnownFailure as K;
    use ShapeKind as S;
    [
        // ---- device placement
        // PyTorch aten/src/ATen/Utils.h (checked_dense_tensor_unwrap, 0.4-1.6): "Expected object
        // of backend CUDA but got backend CPU for argument #2 'x'", "... of device type ...".
        (r"Expected object of (?:device type|backend) \w*", Says::Device),
        // PyTorch aten/src/ATen/native/RNN.h (check_attributes) and cudnn/RNN.cpp.
        (r"(?i)input and (?:parameter|hidden) tensors are not (?:at|on) the same device", Says::Device),
        // PyTorch aten/src/THC/THCGeneral.h (THCAssertSameGPU).
        (r"arguments are located on different GPUs", Says::Device),
        // PyTorch aten/src/ATen/TensorIterator.cpp (compute_types), cut before the devices.
        (r"(?i)expected all tensors to be on the same device", Says::Device),
        // JAX jax/_src/stages.py (_device_assignment_mismatch_error; jax/_src/pjit.py in 0.4.x).
        (r"Received incompatible devices for p?jitted computation", Says::Device),
        // JAX jax/_src/dispatch.py (jax <= 0.4.1).
        (r"primitive arguments must be colocated on the same device", Says::Device),
        // TensorFlow core/common_runtime/placer.cc / colocation_graph.cc: an op pinned to a
        // device that has no kernel for it, or two ops that must share a device.
        (r"Could not satisfy explicit device specification '[^']{0,80}' because no supported kernel", Says::Device),
        (r"Cannot colocate nodes", Says::Device),
        (r"[Cc]annot assign a device (?:for operation|to node) .{0,200}(?:colocat|no supported kernel)", Says::Device),
        // XLA tensorflow/compiler/xla/python/local_client.cc (2019-2020): a jitted function run
        // with its arguments on another GPU than it was compiled for.
        (r"executable is built for device \S+ of type .{0,120}; cannot run it on device", Says::Device),
        // TensorFlow: a device asked for that this process does not have.
        (r"no devices matching that specification are registered", Says::Known(K::NoGpu)),
        // ---- shapes
        // TensorFlow core/framework/shape_inference.cc (InferenceContext::Merge / WithRank).
        (r"Dimensions? (?:\d+ in both shapes )?must be equal, but are -?\d+ and -?\d+", Says::Shape(S::Other)),
        (r"Shapes must be equal rank, but are \d+ and \d+", Says::Shape(S::Other)),
        (r"Shape must be (?:at (?:least|most) )?rank \d+ but is rank \d+", Says::Shape(S::Other)),
        // TensorFlow core/kernels/reshape_op.h.
        (r"Input to reshape is a tensor with \d+ values, but the requested shape", Says::Shape(S::View)),
        // TensorFlow python/ops/array_ops / Keras Reshape layer.
        (r"Cannot reshape a tensor with \d+ elements to shape", Says::Shape(S::View)),
        // TensorFlow core/kernels/sparse_matmul_op.cc, matmul_op_impl.h.
        (r"Cannot multiply A and B because inner dimension does not match", Says::Shape(S::Matmul)),
        (r"Matrix size-incompatible", Says::Shape(S::Matmul)),
        // TensorFlow core/kernels/assign_op.h (TF1 Saver restore) and python/ops/
        // resource_variable_ops.py (checkpoint restore).
        (r"Assign requires shapes of both tensors to match", Says::Shape(S::StateDict)),
        (r"Received incompatible tensor with shape .{0,80} when attempting to restore variable", Says::Shape(S::StateDict)),
        // Keras engine/base_layer.py (Layer.set_weights, 2.x; "Layer <name> weight shape" from
        // 2.13), Keras 0.x/1.x engine/topology.py ("Layer shape ... not compatible with weight
        // shape"), legacy saving/hdf5_format.py.
        (r"weight shape \(?[\d, ]{0,80}\)? (?:is )?not compatible with (?:provided )?weight shape", Says::Shape(S::StateDict)),
        (r"Layer shape \([\d, ]{0,80}\) not compatible with weight shape", Says::Shape(S::StateDict)),
        (r"Shape mismatch in layer #\d+", Says::Shape(S::StateDict)),
        (r"You are trying to load a weight file containing \d+ layers into a model with \d+ layers", Says::Shape(S::StateDict)),
        (r"Layer count mismatch when loading weights from file", Says::Shape(S::StateDict)),
        // Keras 3 keras/src/layers/layer.py (_check_load_own_variables).
        (r"expected \d+ variables, but received \d+ variables during loading", Says::Known(K::StateDictKeys)),
        // Keras 3 keras/src/backend/common/variables.py (Variable.assign).
        (r"The shape of the target variable and the shape of the target value in `variable\.assign\(value\)` must match", Says::Shape(S::StateDict)),
        // Keras layers/input_spec.py (assert_input_compatibility), cut before the shapes.
        // Keras 2.x/tf.keras say "Input 0 is incompatible with layer <name>: expected
        // shape=.., found shape=..", Keras 3 "… with the layer: expected …".
        (r"is incompatible with (?:the )?layer[^:]{0,120}: expected (?:axis|ndim|shape|min_ndim|max_ndim)", Says::Shape(S::Other)),
        // JAX jax/_src/lax/lax.py (_dot_general_shape_rule, _try_broadcast_shapes) and
        // jax/_src/api.py (_mapped_axis_size).
        (r"dot_general requires (?:lhs batch dimensions and rhs batch dimensions|contracting dimensions) to have the same shape", Says::Shape(S::Matmul)),
        (r"\w+ got incompatible shapes for broadcasting", Says::Shape(S::Broadcast)),
        (r"Incompatible shapes for broadcasting", Says::Shape(S::Broadcast)),
        // jax/_src/lax/lax.py: "<op>: arrays must have same number of dimensions, got
        // {shapes}." (2021 on), "<op> got arrays of different rank: (..), (..)." before.
        (r"arrays must have (?:the )?same number of dimensions, got|got arrays of different rank", Says::Shape(S::Broadcast)),
        (r"vmap got inconsistent sizes for array axes to be mapped", Says::Shape(S::BatchSize)),
        // XLA xla/service/shape_inference.cc (InferDotOpShape: "Contracting dimension sizes do
        // not match.", later "... are not compatible"), StableHLO's TypeInference.cpp ("...
        // must match for lhs/rhs").
        (r"(?i)contracting dimension sizes (?:do not match|are not compatible|must match)", Says::Shape(S::Matmul)),
        // TensorFlow python/framework/tensor_shape.py (assert_is_compatible_with,
        // assert_same_rank, Dimension.assert_is_compatible_with) and the broadcasting kernels
        // (core/kernels/cwise_ops_common.cc "Incompatible shapes: [..] vs. [..]") in any shape
        // notation.
        (r"Shapes \(?[^()]{0,80}\)? and \(?[^()]{0,80}\)? (?:are incompatible|must have the same rank)", Says::Shape(S::Other)),
        (r"Dimensions -?\d+ and -?\d+ are not compatible", Says::Shape(S::Other)),
        (r"Incompatible shapes: \S", Says::Shape(S::Broadcast)),
        // PyTorch aten/src/ATen/native/TensorShape.cpp / InferSize.h / Convolution.cpp, their
        // words alone (the numbers cut off), and the TH/THNN wordings before ATen's.
        (r"shape '\[[-\d, ]{0,200}\]' is invalid for input of size", Says::Shape(S::View)),
        (r"Sizes of tensors must match except in dimension", Says::Shape(S::Cat)),
        (r"mat1 and mat2 shapes cannot be multiplied", Says::Shape(S::Matmul)),
        (r"size mismatch, m1: ", Says::Shape(S::Matmul)),
        (r"Expected \d+-dimensional input for \d+-dimensional weight", Says::Shape(S::ConvRank)),
        (r"2D or 4D weight tensor expected", Says::Shape(S::ConvRank)),
        (r"Given groups=\d+, (?:expected )?weight of size", Says::Shape(S::ConvChannels)),
        (r"The size of tensor a \(\d+\) must match the size of tensor b", Says::Shape(S::Broadcast)),
        (r"Expected input batch_size \(\d+\) to match target batch_size", Says::Shape(S::BatchSize)),
        (r"view size is not compatible with input tensor", Says::Shape(S::View)),
        // torch/nn/modules/module.py (_load_from_state_dict) in 1.0-1.1: "size mismatch for ..:
        // copying a param of torch.Size(..) from checkpoint, where the shape is torch.Size(..)
        // in current model", and the words alone when cut.
        (r"size mismatch for \S+: copying a param (?:of|with shape)", Says::Shape(S::StateDict)),
        // torch/nn/modules/module.py before 0.4 (load_state_dict raised KeyError).
        (r#"(?i)unexpected key "?[^" ]{1,200}"? in state_dict|missing keys in state_dict"#, Says::Known(K::StateDictKeys)),
        // ---- host memory
        // PyTorch c10/core/CPUAllocator.cpp (1.0-1.1: CAFFE_ENFORCE_EQ on posix_memalign, 12 =
        // ENOMEM), aten/src/TH/THGeneral.cpp (0.4-1.0 THAlloc), and the C library's ENOMEM text
        // as Python raises it (fork of a DataLoader worker, mmap of a dataset).
        (r"posix_memalign\(.{0,60}\) == 0\. 12 vs 0", Says::Known(K::HostOutOfMemory)),
        (r"Torch: not enough memory: you tried to (?:re)?allocate", Says::Known(K::HostOutOfMemory)),
        (r"\[Errno 12\]\s*Cannot allocate memory", Says::Known(K::HostOutOfMemory)),
        // flax flax/errors.py (ScopeParamShapeError): parameters loaded or initialised in another
        // shape ("Initializer expected to generate shape .. but got shape ..", before that
        // "Inconsistent shapes between value and initializer for parameter").
        (r"Initializer expected to generate shape .{0,120} but got shape|Inconsistent shapes between value and initializer for parameter|ScopeParamShapeError", Says::Shape(S::StateDict)),
        // jax/_src/lax/convolution.py (_conv_general_dilated_shape_rule).
        (r"feature dimension size divided by feature_group_count must equal", Says::Shape(S::ConvChannels)),
        // jax/_src/numpy (reshape: "cannot reshape array of shape (..) (size N) into shape
        // (..)"), NumPy's own "cannot reshape array of size N into shape (..)", lax's
        // "reshape total size must be unchanged".
        (r"cannot reshape array of (?:shape|size)|reshape total size must be unchanged", Says::Shape(S::View)),
        // Keras 3 keras/src/backend/*/nn.py (losses: target against output).
        (r"Arguments `target` and `output` must have the same shape", Says::Shape(S::Other)),
        // jaxlib/xla: a value put on a device of a backend that was not started ("Cannot copy
        // value to device 'gpu:0' with 'cpu' backend"), jax/_src/api.py ("Device .. was not
        // found in jax.local_devices()").
        (r"Cannot copy value to device '[^']{1,40}' with '[^']{1,40}' backend|was not found in jax\.local_devices\(\)", Says::Device),
        // Keras 2.2 engine/saving.py (load_weights by_name): "Layer #N (named ..), weight .. has
        // shape (..), but the saved weight has shape (..)".
        (r"but the saved weight has shape", Says::Shape(S::StateDict)),
        // ---- known failures in other wordings
        // NVIDIA/nccl src/misc/shmutils.cc: NCCL's shared memory (/dev/shm) could not be made.
        (r"Error while (?:creating|attaching to) shared memory segment", Says::Known(K::SharedMemory)),
        // torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, cut mid-word after its first words.
        (r"Watchdog caught collective", Says::Known(K::NcclTimeout)),
        // NVIDIA/nccl src/init.cc (ncclGetErrorString) as nccl-tests print it ("Test NCCL failure
        // common.cu:N 'unhandled cuda error'"), and NCCL's own "Cuda failure 'initialization
        // error'" (src/include/checks.h) when the driver could not start.
        (r"Cuda failure '(?:initialization error|unknown error)'", Says::Known(K::CudaInit)),
        (r"NCCL failure .{0,80}'(?:unhandled (?:cuda|system) error|internal error|invalid (?:argument|usage)|remote process exited)", Says::Known(K::NcclError)),
        // A CUDA kernel's own assertion line (c10/macros/Macros.h CUDA_KERNEL_ASSERT ->
        // __assert_fail; THC/THCUNN kernels before): printed before the exception, often the
        // only part of a device-side assert a log keeps.
        (r"\.cuh?:\d+: .{0,400}block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion `", Says::Known(K::DeviceSideAssert)),
        // cudaErrorAssert is 59 (aten/src/THC/THCGeneral.cpp "cuda runtime error (%d) : %s").
        (r"cuda runtime error \(59\)", Says::Known(K::DeviceSideAssert)),
        // PyTorch c10/core/ScalarType.h / TensorIterator (result type promotion).
        (r"result type \w+ can't be cast to the desired output type", Says::Known(K::DtypeMismatch)),
        (r"(?i)expected object of scalar type \w+ but got scalar type", Says::Known(K::DtypeMismatch)),
        // CUDA's cudaGetErrorString for cudaErrorDevicesUnavailable, as PyTorch 1.0's THC
        // printed it ("all CUDA-capable devices are busy or unavailable").
        (r"(?i)all CUDA-capable devices are busy or unavailable", Says::Known(K::DeviceBusy)),
    ]
    .into_iter()
    .map(|(p, says)| (re(p), says))
    .collect()
});

static SIG_JAX_DEVICES: LazyLock<Regex> =
    LazyLock::new(|| re(r"device ids (\[[\d, ]{1,80}\]) on platform (\w+)"));
static SIG_TF_DIMS: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"must be equal, but are (-?\d+) and (-?\d+)(?:.{0,600}?with input shapes: (\[[\d,?]{0,80}\]), (\[[\d,?]{0,80}\]))?",
    )
});
static SIG_TF_OP: LazyLock<Regex> = LazyLock::new(|| re(r"\(op: '(\w+)'\)|\}\} = (\w+)\["));
static SIG_RESHAPE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"tensor with (\d+) (?:values|elements)(?:, but the requested shape (?:has|requires a multiple of) (\d+)| to shape (\[[-\d, ]{0,80}\]))",
    )
});
static SIG_TWO_SHAPES: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?:got|weight shape|Layer shape|shapes:?) (\(?[\d, ?]{0,80}\)?|\[[\d, ?]{0,80}\]) (?:and|(?:is )?not compatible with (?:provided )?weight shape) (\(?[\d, ?]{0,80}\)?|\[[\d, ?]{0,80}\])",
    )
});
static SIG_JAX_BCAST: LazyLock<Regex> =
    LazyLock::new(|| re(r"for broadcasting: (?:shapes=\[)?(\([\d, ]{0,80}\)), (\([\d, ]{0,80}\))"));

/// A signature's class, with the numbers right next to its words.
fn signature(line: &str) -> Option<(Failure, u8)> {
    let (_, says) = SIGNATURES.iter().find(|(r, _)| r.is_match(line))?;
    let failure = match *says {
        Says::Device => Failure::DeviceMismatch(DeviceFacts {
            // JAX names each side's device ids and platform.
            devices: SIG_JAX_DEVICES
                .captures_iter(line)
                .take(4)
                .map(|c| format!("{} {}", &c[2], &c[1]))
                .collect(),
            argument: None,
            operator: None,
        }),
        Says::Known(k) => Failure::Known(k, cap_line(line)),
        Says::Shape(kind) => {
            let mut f = shape(kind, Vec::new(), Vec::new(), None);
            if let Some(c) = SIG_TF_DIMS.captures(line) {
                f.dims = vec![
                    num(c[1].trim_start_matches('-')),
                    num(c[2].trim_start_matches('-')),
                ];
                if let (Some(a), Some(b)) = (c.get(3), c.get(4)) {
                    f.shapes = vec![a.as_str().to_string(), b.as_str().to_string()];
                }
                if let Some(op) = SIG_TF_OP.captures(line) {
                    let op = op.get(1).or_else(|| op.get(2)).map_or("", |m| m.as_str());
                    f.kind = match op {
                        "MatMul" | "BatchMatMul" | "BatchMatMulV2" | "BatchMatMulV3" => {
                            ShapeKind::Matmul
                        }
                        "Assign" | "AssignVariableOp" => ShapeKind::StateDict,
                        "ConcatV2" | "Concat" => ShapeKind::Cat,
                        "Add" | "AddV2" | "Mul" | "Sub" | "RealDiv" | "Maximum" | "Minimum"
                        | "SquaredDifference" | "BiasAdd" => ShapeKind::Broadcast,
                        _ => f.kind,
                    };
                }
            } else if let Some(c) = SIG_RESHAPE.captures(line) {
                f.dims = [c.get(1), c.get(2)]
                    .into_iter()
                    .flatten()
                    .map(|m| num(m.as_str()))
                    .collect();
                if let Some(m) = c.get(3) {
                    f.shapes = vec![m.as_str().to_string()];
                }
            } else if let Some(c) = SIG_JAX_BCAST
                .captures(line)
                .or_else(|| SIG_TWO_SHAPES.captures(line))
            {
                f.shapes = vec![c[1].trim().to_string(), c[2].trim().to_string()];
            }
            Failure::ShapeMismatch(f)
        }
    };
    // One below the full message of the same class, so that it wins when the text has both
    // (a kernel's assertion line, then `device-side assert triggered`).
    let rank = match *says {
        Says::Known(k) => known_rank(k),
        Says::Device | Says::Shape(_) => RANK_ROOT,
    };
    Some((failure, rank - 1))
}

/// The rank of a known failure's class: root causes, then the environment, host memory,
/// illegal accesses, library status errors, NCCL errors, NCCL timeouts. The `KNOWN` table
/// uses it for every row but two it documents (a test holds them together).
fn known_rank(k: KnownFailure) -> u8 {
    use KnownFailure as K;
    match k {
        K::DeviceSideAssert | K::DtypeMismatch | K::IndexOutOfRange => RANK_ROOT,
        // Below the shape ranks, so a `size mismatch for` in the same message wins.
        K::StateDictKeys => RANK_ROOT - 2,
        K::NoKernelImage
        | K::DriverTooOld
        | K::EccError
        | K::NotCompiledWithCuda
        | K::CudaDeserialize
        | K::NoGpu
        | K::InvalidDeviceOrdinal
        | K::DeviceBusy
        | K::CudaInit => RANK_ENV,
        K::HostOutOfMemory | K::SharedMemory => RANK_HOST,
        K::IllegalMemoryAccess | K::LaunchFailure => RANK_ILLEGAL,
        K::CudnnError | K::CublasError => RANK_LIB,
        K::NcclError => RANK_NCCL,
        K::NcclTimeout => RANK_NCCL_TIMEOUT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line of every real text in the corpus (`tests/fixtures/triage/*-real.txt` and
    /// the public corpus, whose files name their source thread).
    fn real_lines() -> Vec<String> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/triage");
        let mut lines = Vec::new();
        for dir in [
            root.join("public/tune"),
            root.join("public/holdout"),
            root.join("public/fresh"),
            root.join("public/blind"),
            root.join("public/final"),
            root.clone(),
        ] {
            for e in std::fs::read_dir(dir).expect("corpus dir") {
                let p = e.expect("entry").path();
                let name = p
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                if !p.is_file()
                    || (p.parent() == Some(root.as_path()) && !name.ends_with("-real.txt"))
                {
                    continue;
                }
                let text = std::fs::read_to_string(&p).expect("read");
                let body = text.split_once("\n---\n").map_or(text.as_str(), |(_, b)| b);
                lines.extend(
                    body.lines()
                        .map(|l| super::super::clean::clean(&strip_ansi(l)).into_owned()),
                );
            }
        }
        lines
    }

    /// The table's ranks are its classes' ranks, but for the two rows that say why not.
    #[test]
    fn known_rows_rank_as_their_class() {
        let sayings_apart = ["Some NCCL operations have failed", "Duplicate GPU detected"];
        for (r, k, rank) in KNOWN.iter() {
            if sayings_apart.iter().any(|p| r.as_str().starts_with(p)) {
                continue;
            }
            assert_eq!(*rank, known_rank(*k), "{}", r.as_str());
        }
        // A cut watchdog line (a signature) stays below a real illegal access.
        let (_, rank) = classify("[Rank 5] Watchdog caught collective operati").expect("read");
        assert!(rank < RANK_ILLEGAL, "{rank}");
    }

    /// Each signature is read in at least one real text; the ones the corpus has none for yet
    /// are listed here, and the list may only shrink.
    #[test]
    fn every_signature_has_a_real_text() {
        const NOT_YET: &[&str] = &[];
        let lines = real_lines();
        let mut missing = Vec::new();
        for (r, _) in SIGNATURES.iter() {
            if !lines.iter().any(|l| r.is_match(l)) {
                missing.push(r.as_str().to_string());
            }
        }
        let unexpected: Vec<&String> = missing
            .iter()
            .filter(|m| !NOT_YET.iter().any(|n| m.contains(n)))
            .collect();
        assert!(
            unexpected.is_empty(),
            "signatures with no real text: {unexpected:#?}"
        );
    }

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
