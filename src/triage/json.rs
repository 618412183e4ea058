//! `gpuwatch explain --json`: the diagnosis as a documented, versioned object
//! (`docs/explain-json.md`, schema 1). Built field by field from the [`Diagnosis`], so that
//! renaming a Rust type or variant cannot change the public interface.

use serde::Serialize;

use super::{Diagnosis, Failure, Framework, OomFacts, ShapeKind};

/// The schema's version; bumped when a field is renamed, removed or changes meaning.
pub const SCHEMA_VERSION: u32 = 1;

/// The object `explain --json` prints.
#[derive(Debug, Serialize)]
pub struct ExplainJson<'a> {
    pub schema_version: u32,
    pub kind: &'static str,
    pub cause: Option<&'static str>,
    pub framework: Option<&'static str>,
    pub confidence: &'static str,
    pub headline: &'a str,
    pub reasoning: Option<&'a str>,
    pub facts: Facts,
    pub shape: Option<Shape<'a>>,
    pub device: Option<Device<'a>>,
    pub checks: &'a [String],
    pub notes: &'a [String],
    pub run_would_add: Option<&'a str>,
    pub fixes: Vec<FixJson<'a>>,
    pub nvml_gpu: Option<u32>,
    pub suggested_batch: Option<u64>,
    pub error_lines: &'a [String],
    pub raised_from: Option<&'a str>,
    pub assertion: Option<&'a str>,
    pub traceback: bool,
    pub empty: bool,
}

/// An out-of-memory's numbers, each in bytes as printed (`null`: the text does not give it).
#[derive(Debug, Default, Serialize)]
pub struct Facts {
    pub gpu: Option<u32>,
    pub requested_bytes: Option<u64>,
    pub total_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
    pub allocated_bytes: Option<u64>,
    pub reserved_bytes: Option<u64>,
    pub reserved_unallocated_bytes: Option<u64>,
    pub process_total_bytes: Option<u64>,
    pub allowed_bytes: Option<u64>,
    pub limit_bytes: Option<u64>,
    pub other_processes: Vec<OtherProcess>,
}

#[derive(Debug, Serialize)]
pub struct OtherProcess {
    pub pid: u32,
    pub bytes: u64,
}

#[derive(Debug, Serialize)]
pub struct Shape<'a> {
    pub kind: &'static str,
    pub shapes: &'a [String],
    pub dims: &'a [u64],
    pub dim: Option<i64>,
    pub parameter: Option<&'a str>,
}

#[derive(Debug, Serialize)]
pub struct Device<'a> {
    pub devices: &'a [String],
    pub argument: Option<&'a str>,
    pub operator: Option<&'a str>,
}

#[derive(Debug, Serialize)]
pub struct FixJson<'a> {
    pub order: usize,
    pub title: &'a str,
    pub detail: &'a str,
}

/// The stable name of a framework in `explain --json`.
pub fn framework_name(f: Framework) -> &'static str {
    match f {
        Framework::PyTorch => "pytorch",
        Framework::Cublas => "cublas",
        Framework::Cudnn => "cudnn",
        Framework::Jax => "jax",
        Framework::TensorFlow => "tensorflow",
        Framework::Rocm => "rocm",
        Framework::Mps => "mps",
        Framework::Other => "other",
    }
}

/// The stable name of a shape mismatch's kind.
pub fn shape_kind_name(k: ShapeKind) -> &'static str {
    match k {
        ShapeKind::Matmul => "matmul",
        ShapeKind::BatchSize => "batch_size",
        ShapeKind::Cat => "cat",
        ShapeKind::Broadcast => "broadcast",
        ShapeKind::View => "view",
        ShapeKind::ConvChannels => "conv_channels",
        ShapeKind::ConvRank => "conv_rank",
        ShapeKind::StateDict => "state_dict",
        ShapeKind::Other => "other",
    }
}

fn facts(f: &OomFacts) -> Facts {
    Facts {
        gpu: f.gpu,
        requested_bytes: f.requested,
        total_bytes: f.total,
        free_bytes: f.free,
        allocated_bytes: f.allocated,
        reserved_bytes: f.reserved,
        reserved_unallocated_bytes: f.reserved_unallocated,
        process_total_bytes: f.process_total,
        allowed_bytes: f.allowed,
        limit_bytes: f.limit,
        other_processes: f
            .processes
            .iter()
            .map(|&(pid, bytes)| OtherProcess { pid, bytes })
            .collect(),
    }
}

/// The schema-1 object of a diagnosis.
pub fn explain_json(d: &Diagnosis) -> ExplainJson<'_> {
    let a = &d.analysis;
    let (framework, oom_facts) = match &a.failure {
        Failure::OutOfMemory(f) => (Some(framework_name(f.framework)), facts(f)),
        _ => (None, Facts::default()),
    };
    ExplainJson {
        schema_version: SCHEMA_VERSION,
        kind: a.failure.kind(),
        cause: d.case.cause(),
        framework,
        confidence: d.confidence.label(),
        headline: &d.headline,
        reasoning: d.reasoning.as_deref(),
        facts: oom_facts,
        shape: match &a.failure {
            Failure::ShapeMismatch(s) => Some(Shape {
                kind: shape_kind_name(s.kind),
                shapes: &s.shapes,
                dims: &s.dims,
                dim: s.dim,
                parameter: s.parameter.as_deref(),
            }),
            _ => None,
        },
        device: match &a.failure {
            Failure::DeviceMismatch(f) => Some(Device {
                devices: &f.devices,
                argument: f.argument.as_deref(),
                operator: f.operator.as_deref(),
            }),
            _ => None,
        },
        checks: &d.checks,
        notes: &d.facts,
        run_would_add: d.run_would_add.as_deref(),
        fixes: d
            .fixes
            .iter()
            .enumerate()
            .map(|(i, f)| FixJson {
                order: i + 1,
                title: &f.title,
                detail: &f.detail,
            })
            .collect(),
        nvml_gpu: d.nvml_gpu,
        suggested_batch: d.suggested_batch,
        error_lines: &a.excerpt,
        raised_from: a.traceback_hint.as_deref(),
        assertion: a.assertion.as_deref(),
        traceback: a.traceback,
        empty: a.empty,
    }
}
