//! `gpuwatch run -- CMD ARGS…`: run a training job with its output passed through, its
//! signals forwarded and its exit code returned, keeping the tail of its output for the
//! diagnosis.

pub mod child;
pub(crate) mod command;
pub mod monitor;
pub mod report;
pub mod tail;
pub mod timeline;

pub use child::{ChildSpec, Exit, Outcome, Running, signal_name, spawn};
pub use tail::{Stream, Tail, TailLimits};
