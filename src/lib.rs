//! gpuwatch: a live GPU monitor that answers "who holds this VRAM, is it growing, and will my
//! job fit?". The binary is a thin shell over this library; every front end (snapshot, pick,
//! the dashboard, the daemon) consumes the same frames from the sampler.

pub mod config;
pub mod model;
pub mod source;
pub mod watch;
