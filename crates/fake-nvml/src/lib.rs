//! NVML test double (work in progress).
