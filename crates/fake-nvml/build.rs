//! Marks the library "nodelete": a process that drops its last NVML handle (dlclose) and
//! initialises again later — as gpuwatch does when it re-initialises NVML after the driver went
//! away — finds the double's state (init count, time origin) as it left it, as it would find
//! the kernel driver's.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
}
