//! Shared helpers: find the built `libfake_nvml.so`, serialise the tests (the scenario is read
//! from process-global environment variables) and load the library through nvml-wrapper.
#![allow(dead_code, reason = "each test binary uses a subset of the helpers")]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;

static SERIAL: Mutex<()> = Mutex::new(());

/// The cdylib cargo built for this package. The test binary lives in `<target>/<profile>/deps/`;
/// `cargo test` builds the library there too (the crate is also an `rlib`, so the integration
/// tests depend on it). `cargo build` puts a copy one level up, which may be stale: `deps/` wins.
pub fn lib_path() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary has a parent directory");
    let candidates = [
        Some(deps.join("libfake_nvml.so")),
        deps.parent().map(|d| d.join("libfake_nvml.so")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("libfake_nvml.so not found next to {}", exe.display()))
}

/// One test's hold on the library: the serialisation lock and the scenario file.
pub struct Fixture {
    _serial: MutexGuard<'static, ()>,
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl Fixture {
    /// Writes `toml` to a fresh file (a new path, so the library loads it afresh) and points
    /// the environment at it. `freeze` sets `FAKE_NVML_FREEZE` (removed when `None`).
    pub fn new(toml: &str, freeze: Option<f64>) -> Self {
        let serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("scenario.toml");
        std::fs::write(&path, toml).expect("write scenario");
        // SAFETY: tests that touch the environment hold SERIAL; no other thread reads it now.
        unsafe {
            std::env::set_var("FAKE_NVML_SCENARIO", &path);
            std::env::remove_var("FAKE_NVML_EPOCH");
            match freeze {
                Some(f) => std::env::set_var("FAKE_NVML_FREEZE", f.to_string()),
                None => std::env::remove_var("FAKE_NVML_FREEZE"),
            }
        }
        Fixture {
            _serial: serial,
            dir,
            path,
        }
    }

    /// Rewrites the scenario file in place (the library reloads it within 50 ms).
    pub fn rewrite(&self, toml: &str) {
        std::fs::write(&self.path, toml).expect("rewrite scenario");
        // Let the 50 ms reload throttle expire.
        std::thread::sleep(std::time::Duration::from_millis(80));
    }

    /// Initialises through nvml-wrapper; borrowing the fixture proves the test holds the lock.
    #[allow(clippy::unused_self, reason = "the borrow ties init to a live fixture")]
    pub fn init(&self) -> Result<Nvml, NvmlError> {
        init()
    }
}

pub fn init() -> Result<Nvml, NvmlError> {
    let lib = lib_path();
    Nvml::builder().lib_path(OsStr::new(&lib)).init()
}

/// Raw access to the library's C symbols (for what nvml-wrapper does not expose).
pub struct Raw {
    lib: libloading::Library,
}

pub type Handle = *mut std::ffi::c_void;

impl Raw {
    pub fn open() -> Self {
        Self::open_at(&lib_path())
    }

    pub fn open_at(path: &Path) -> Self {
        // SAFETY: loading our own test double, whose initialisers are trivial.
        let lib = unsafe { libloading::Library::new(path) }.expect("dlopen libfake_nvml.so");
        Raw { lib }
    }

    /// A symbol of the library, typed by the caller.
    pub fn sym<T: Copy>(&self, name: &str) -> T {
        // SAFETY: the caller names the symbol's real C type.
        unsafe { *self.lib.get::<T>(name.as_bytes()).expect("symbol") }
    }

    pub fn init(&self) -> u32 {
        let f: unsafe extern "C" fn() -> u32 = self.sym("nvmlInit_v2");
        unsafe { f() }
    }

    pub fn shutdown(&self) -> u32 {
        let f: unsafe extern "C" fn() -> u32 = self.sym("nvmlShutdown");
        unsafe { f() }
    }

    pub fn handle(&self, index: u32) -> Handle {
        let f: unsafe extern "C" fn(u32, *mut Handle) -> u32 =
            self.sym("nvmlDeviceGetHandleByIndex_v2");
        let mut h: Handle = std::ptr::null_mut();
        assert_eq!(unsafe { f(index, &raw mut h) }, 0);
        h
    }
}
