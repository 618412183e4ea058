//! gpuwatch: a live GPU monitor that answers "who holds this VRAM, is it growing, and will my
//! job fit?". The binary is a thin shell over this library; every front end (snapshot, pick,
//! the dashboard, the daemon) consumes the same frames from the sampler.

// `print!`/`eprintln!` panic on a failed write: output goes through `stdio` (clippy.toml).
#![deny(clippy::disallowed_macros)]

pub mod alert;
pub mod analysis;
pub mod app;
pub mod cli;
pub mod cluster;
mod cmd;
pub mod config;
pub mod daemon;
pub mod detect;
pub mod gpuref;
pub mod history;
pub mod model;
pub mod output;
pub mod pick;
pub mod record;
pub mod remote;
pub mod run;
pub mod sampler;
pub mod serve;
pub mod signal;
pub mod source;
pub mod stdio;
pub mod store;
pub mod text;
pub mod times;
pub mod triage;
pub mod tui;
pub mod watch;

/// This machine's host name (empty when unknown).
pub fn hostname() -> String {
    sysinfo::System::host_name().unwrap_or_default()
}
