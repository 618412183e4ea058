//! nvml source (in progress).
