//! NVML test double: a shared library exporting (part of) the NVML C API, driven by a gpuwatch
//! scenario file (see the `scenario` crate and this crate's README).
//!
//! Every export wraps its body in [`guard`], so that a panic never crosses the FFI boundary
//! (it answers `NVML_ERROR_UNKNOWN`). State lives in one `Mutex`; calls release it before they
//! sleep (`faults.slow`), so a hanging call on one GPU does not block other threads.
#![allow(
    non_snake_case,
    reason = "the exported symbols must carry NVML's C names"
)]

mod state;

use std::ffi::{CStr, c_char, c_int, c_uint, c_ulonglong, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use scenario::{Call, Gpu, MigDevice, MigSpec, ProcKind, Process, Scenario};

use state::{LoadFailure, lock};

/// `nvmlReturn_t`.
pub type NvmlReturn = c_uint;
/// `nvmlDevice_t`: an opaque handle (never dereferenced by callers).
pub type NvmlDevice = *mut c_void;

const NVML_SUCCESS: NvmlReturn = 0;
const NVML_ERROR_UNINITIALIZED: NvmlReturn = 1;
const NVML_ERROR_INVALID_ARGUMENT: NvmlReturn = 2;
const NVML_ERROR_NOT_SUPPORTED: NvmlReturn = 3;
const NVML_ERROR_NO_PERMISSION: NvmlReturn = 4;
const NVML_ERROR_NOT_FOUND: NvmlReturn = 6;
const NVML_ERROR_INSUFFICIENT_SIZE: NvmlReturn = 7;
const NVML_ERROR_DRIVER_NOT_LOADED: NvmlReturn = 9;
const NVML_ERROR_FUNCTION_NOT_FOUND: NvmlReturn = 13;
const NVML_ERROR_GPU_IS_LOST: NvmlReturn = 15;
const NVML_ERROR_ARGUMENT_VERSION_MISMATCH: NvmlReturn = 25;
const NVML_ERROR_UNKNOWN: NvmlReturn = 999;

/// `NVML_VALUE_NOT_AVAILABLE` as an unsigned long long.
const VALUE_NOT_AVAILABLE: u64 = u64::MAX;
/// `gpuInstanceId`/`computeInstanceId` of a process on a non-MIG GPU.
const NO_INSTANCE: u32 = 0xFFFF_FFFF;
/// `nvmlMemory_v2`.
const MEMORY_V2_VERSION: c_uint = 0x0200_0028;
/// `nvmlTemperature_v1`.
const TEMPERATURE_V1_VERSION: c_uint = 0x0100_000C;
/// What the real driver answers to the process-utilisation sizing call (buffer capacity).
const PROCESS_UTIL_CAPACITY: c_uint = 72;

// ---------------------------------------------------------------------------------------------
// C structs (layouts from nvml.h / nvml-wrapper-sys 0.10)

/// `nvmlMemory_t` (v1: `used` includes the reserved memory).
#[repr(C)]
pub struct NvmlMemory {
    pub total: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
pub struct NvmlMemoryV2 {
    pub version: c_uint,
    pub total: c_ulonglong,
    pub reserved: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `nvmlUtilization_t`.
#[repr(C)]
pub struct NvmlUtilization {
    pub gpu: c_uint,
    pub memory: c_uint,
}

/// `nvmlProcessInfo_v1_t` (16 bytes).
#[repr(C)]
pub struct NvmlProcessInfoV1 {
    pub pid: c_uint,
    pub used_gpu_memory: c_ulonglong,
}

/// `nvmlProcessInfo_v2_t` = `nvmlProcessInfo_t` (24 bytes).
#[repr(C)]
pub struct NvmlProcessInfoV2 {
    pub pid: c_uint,
    pub used_gpu_memory: c_ulonglong,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

/// `nvmlProcessUtilizationSample_t` (32 bytes).
#[repr(C)]
pub struct NvmlProcessUtilizationSample {
    pub pid: c_uint,
    pub time_stamp: c_ulonglong,
    pub sm_util: c_uint,
    pub mem_util: c_uint,
    pub enc_util: c_uint,
    pub dec_util: c_uint,
}

/// `nvmlPciInfo_t` as used by `_v2`/`_v3` (68 bytes).
#[repr(C)]
pub struct NvmlPciInfo {
    pub bus_id_legacy: [c_char; 16],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pci_device_id: c_uint,
    pub pci_sub_system_id: c_uint,
    pub bus_id: [c_char; 32],
}

/// The legacy `nvmlPciInfo_v1` of the unversioned `nvmlDeviceGetPciInfo` (52 bytes).
#[repr(C)]
pub struct NvmlPciInfoV1 {
    pub bus_id: [c_char; 16],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pci_device_id: c_uint,
    pub pci_sub_system_id: c_uint,
    pub reserved: [c_uint; 4],
}

/// `nvmlTemperature_v1_t` (12 bytes).
#[repr(C)]
pub struct NvmlTemperatureV1 {
    pub version: c_uint,
    pub sensor_type: c_uint,
    pub temperature: c_int,
}

const _: () = {
    assert!(size_of::<NvmlMemory>() == 24);
    assert!(size_of::<NvmlMemoryV2>() == 40);
    assert!(size_of::<NvmlProcessInfoV1>() == 16);
    assert!(size_of::<NvmlProcessInfoV2>() == 24);
    assert!(size_of::<NvmlProcessUtilizationSample>() == 32);
    assert!(size_of::<NvmlPciInfo>() == 68);
    assert!(size_of::<NvmlPciInfoV1>() == 52);
    assert!(size_of::<NvmlTemperatureV1>() == 12);
};

// ---------------------------------------------------------------------------------------------
// Plumbing

type Res = Result<(), NvmlReturn>;

/// Runs an export's body; a panic answers `NVML_ERROR_UNKNOWN` instead of unwinding into C.
fn guard(body: impl FnOnce() -> Res) -> NvmlReturn {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => NVML_SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => NVML_ERROR_UNKNOWN,
    }
}

/// Writes `value` through an out-pointer; NULL is `INVALID_ARGUMENT`.
unsafe fn out<T>(ptr: *mut T, value: T) -> Res {
    if ptr.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: the caller passes a valid, aligned pointer to a `T` (NVML's contract).
    unsafe { ptr.write(value) };
    Ok(())
}

/// Copies `text` and a NUL into a caller's buffer of `length` bytes.
unsafe fn out_str(buf: *mut c_char, length: c_uint, text: &str) -> Res {
    if buf.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    let bytes = text.as_bytes();
    if bytes.len() + 1 > length as usize {
        return Err(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    // SAFETY: the buffer holds `length` bytes, which we checked is enough.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buf, bytes.len());
        buf.add(bytes.len()).write(0);
    }
    Ok(())
}

/// A fixed C char array holding `text` (truncated) and a NUL.
fn c_array<const N: usize>(text: &str) -> [c_char; N] {
    let mut arr = [0 as c_char; N];
    for (slot, b) in arr.iter_mut().zip(text.bytes().take(N - 1)) {
        *slot = c_char::from_ne_bytes([b]);
    }
    arr
}

/// A session call: the library is initialised and the driver loaded.
struct Session {
    scenario: Arc<Scenario>,
    t: f64,
    /// Wall-clock unix seconds that correspond to `t`.
    wall: f64,
}

fn session() -> Result<Session, NvmlReturn> {
    let mut st = lock();
    if st.init_count == 0 {
        return Err(NVML_ERROR_UNINITIALIZED);
    }
    let scenario = st.refresh().ok_or(NVML_ERROR_UNKNOWN)?;
    let t = st.time(&scenario);
    if scenario.driver_unloaded.is_some_and(|w| w.contains(t)) {
        return Err(NVML_ERROR_UNINITIALIZED);
    }
    let speed = scenario.clock.speed.unwrap_or(1.0);
    let wall = st.epoch(&scenario) + t / speed;
    Ok(Session { scenario, t, wall })
}

/// Which device a handle names: a physical GPU or one of its MIG devices.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dev {
    Gpu(usize),
    Mig(usize, usize),
}

const HANDLE_TAG: usize = 0x4E56_0000;
const HANDLE_TAG_MASK: usize = !0xFFFF;

impl Dev {
    fn handle(self) -> NvmlDevice {
        let bits = match self {
            Dev::Gpu(g) => HANDLE_TAG | (g << 8),
            Dev::Mig(g, m) => HANDLE_TAG | (g << 8) | (m + 1),
        };
        std::ptr::without_provenance_mut(bits)
    }

    fn decode(handle: NvmlDevice, scenario: &Scenario) -> Result<Dev, NvmlReturn> {
        let bits = handle.addr();
        if bits & HANDLE_TAG_MASK != HANDLE_TAG {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let g = (bits >> 8) & 0xFF;
        let m = bits & 0xFF;
        let gpu = scenario.gpus.get(g).ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
        if m == 0 {
            Ok(Dev::Gpu(g))
        } else if m <= gpu.mig_devices.len() && gpu.mig == MigSpec::Enabled {
            Ok(Dev::Mig(g, m - 1))
        } else {
            Err(NVML_ERROR_INVALID_ARGUMENT)
        }
    }

    fn gpu_index(self) -> usize {
        match self {
            Dev::Gpu(g) | Dev::Mig(g, _) => g,
        }
    }
}

/// A device call, past the init, handle, lost and fault checks (and the slow-call sleep).
struct Ctx {
    s: Session,
    dev: Dev,
}

impl Ctx {
    fn gpu(&self) -> &Gpu {
        &self.s.scenario.gpus[self.dev.gpu_index()]
    }

    fn mig(&self) -> Option<&MigDevice> {
        match self.dev {
            Dev::Gpu(_) => None,
            Dev::Mig(g, m) => Some(&self.s.scenario.gpus[g].mig_devices[m]),
        }
    }

    /// The physical GPU; MIG device handles answer `NOT_SUPPORTED`.
    fn physical(&self) -> Result<&Gpu, NvmlReturn> {
        match self.dev {
            Dev::Gpu(_) => Ok(self.gpu()),
            Dev::Mig(..) => Err(NVML_ERROR_NOT_SUPPORTED),
        }
    }

    fn t(&self) -> f64 {
        self.s.t
    }
}

/// Opens a device call: checks init, the handle, GPU loss and the injected faults for `call`,
/// then sleeps as `faults.slow` says (without holding the state lock).
fn device(handle: NvmlDevice, call: Option<Call>) -> Result<Ctx, NvmlReturn> {
    let s = session()?;
    let dev = Dev::decode(handle, &s.scenario)?;
    let gpu = &s.scenario.gpus[dev.gpu_index()];
    // A handle to a GPU taken off the bus answers like a lost one.
    if gpu.lost(s.t) || !gpu.present(s.t) {
        return Err(NVML_ERROR_GPU_IS_LOST);
    }
    if let Some(call) = call {
        if gpu.faults.not_supported.contains(&call) {
            return Err(NVML_ERROR_NOT_SUPPORTED);
        }
        if gpu.faults.no_permission.contains(&call) {
            return Err(NVML_ERROR_NO_PERMISSION);
        }
        if let Some(delay) = gpu.faults.delay(call, s.t) {
            std::thread::sleep(delay);
        }
    }
    Ok(Ctx { s, dev })
}

// ---------------------------------------------------------------------------------------------
// Init, shutdown, errors, system

fn init() -> NvmlReturn {
    guard(|| {
        let mut st = lock();
        let scenario = match st.init_load() {
            Ok(s) => s,
            Err(LoadFailure::NoScenario) => return Err(NVML_ERROR_DRIVER_NOT_LOADED),
            Err(LoadFailure::Invalid) => return Err(NVML_ERROR_UNKNOWN),
        };
        let t = st.time(&scenario);
        if scenario.driver_unloaded.is_some_and(|w| w.contains(t)) {
            return Err(NVML_ERROR_DRIVER_NOT_LOADED);
        }
        st.init_count = st.init_count.saturating_add(1);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlInit() -> NvmlReturn {
    init()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlInit_v2() -> NvmlReturn {
    init()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> NvmlReturn {
    init()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlShutdown() -> NvmlReturn {
    guard(|| {
        let mut st = lock();
        if st.init_count == 0 {
            return Err(NVML_ERROR_UNINITIALIZED);
        }
        st.init_count -= 1;
        // During a driver_unloaded window the session is gone: the count still drops (so that
        // refcounting stays sane) but the answer is UNINITIALIZED like every other call.
        if let Some(scenario) = st.refresh() {
            let t = st.time(&scenario);
            if scenario.driver_unloaded.is_some_and(|w| w.contains(t)) {
                return Err(NVML_ERROR_UNINITIALIZED);
            }
        }
        Ok(())
    })
}

fn error_text(code: NvmlReturn) -> &'static CStr {
    match code {
        0 => c"Success",
        1 => c"Uninitialized",
        2 => c"Invalid Argument",
        3 => c"Not Supported",
        4 => c"Insufficient Permissions",
        5 => c"Already Initialized",
        6 => c"Not Found",
        7 => c"Insufficient Size",
        8 => c"Insufficient External Power",
        9 => c"Driver Not Loaded",
        10 => c"Timeout",
        11 => c"Interrupt request issue",
        12 => c"NVML Shared Library Not Found",
        13 => c"Function Not Found",
        14 => c"Corrupted infoROM",
        15 => c"GPU is lost",
        16 => c"GPU requires restart",
        17 => c"The operating system has blocked the request.",
        18 => c"RM has detected an NVML/RM version mismatch.",
        19 => c"In use by another client",
        20 => c"Insufficient Memory",
        21 => c"No data",
        22 => c"The requested vgpu operation is not available on target device, becasue ECC is enabled",
        23 => c"Ran out of critical resources, other than memory",
        24 => c"Insufficient Power",
        25 => c"Struct version mismatch",
        26 => c"This operation is deprecated",
        27 => c"Not Ready",
        28 => c"GPU not found",
        29 => c"Invalid state",
        _ => c"Unknown Error",
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlErrorString(result: NvmlReturn) -> *const c_char {
    error_text(result).as_ptr()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    guard(|| {
        let s = session()?;
        unsafe { out_str(version, length, &s.scenario.driver_version) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(
    version: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    guard(|| {
        let s = session()?;
        unsafe { out_str(version, length, &s.scenario.nvml_version) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(version: *mut c_int) -> NvmlReturn {
    guard(|| {
        let s = session()?;
        unsafe { out(version, s.scenario.cuda_driver_version) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(version: *mut c_int) -> NvmlReturn {
    guard(|| {
        let s = session()?;
        unsafe { out(version, s.scenario.cuda_driver_version) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetProcessName(
    pid: c_uint,
    name: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    guard(|| {
        session()?;
        if name.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map_err(|_| NVML_ERROR_NOT_FOUND)?;
        unsafe { out_str(name, length, comm.trim_end_matches('\n')) }
    })
}

// ---------------------------------------------------------------------------------------------
// Enumeration and identity

fn device_count(count: *mut c_uint) -> NvmlReturn {
    guard(|| {
        let s = session()?;
        unsafe { out(count, s.scenario.present_gpus(s.t).count() as c_uint) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount(count: *mut c_uint) -> NvmlReturn {
    device_count(count)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> NvmlReturn {
    device_count(count)
}

fn handle_by_index(index: c_uint, device: *mut NvmlDevice) -> NvmlReturn {
    guard(|| {
        let s = session()?;
        let Some((g, _)) = s.scenario.present_gpus(s.t).nth(index as usize) else {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        };
        // A lost GPU still has a handle: the loss shows on the calls made with it.
        unsafe { out(device, Dev::Gpu(g).handle()) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(
    index: c_uint,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    handle_by_index(index, device)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    handle_by_index(index, device)
}

/// Reads a C string argument.
unsafe fn arg_str<'a>(ptr: *const c_char) -> Result<&'a str, NvmlReturn> {
    if ptr.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: the caller passes a NUL-terminated string.
    unsafe { CStr::from_ptr(ptr) }
        .to_str()
        .map_err(|_| NVML_ERROR_INVALID_ARGUMENT)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    guard(|| {
        let s = session()?;
        let wanted = unsafe { arg_str(uuid) }?.trim();
        for (g, gpu) in s.scenario.present_gpus(s.t) {
            if gpu.uuid(g).eq_ignore_ascii_case(wanted) {
                return unsafe { out(device, Dev::Gpu(g).handle()) };
            }
            if gpu.mig == MigSpec::Enabled {
                for (m, mig) in gpu.mig_devices.iter().enumerate() {
                    if mig.uuid(g).eq_ignore_ascii_case(wanted) {
                        return unsafe { out(device, Dev::Mig(g, m).handle()) };
                    }
                }
            }
        }
        Err(NVML_ERROR_NOT_FOUND)
    })
}

/// `(domain, bus, device, function)` of a PCI bus id such as `00000000:18:00.0`,
/// `0000:18:00.0` or `18:00.0`.
fn parse_bus_id(text: &str) -> Option<(u32, u32, u32, u32)> {
    let parts: Vec<&str> = text.trim().split(':').collect();
    let (domain, bus, rest) = match parts.as_slice() {
        [d, b, r] => (u32::from_str_radix(d, 16).ok()?, *b, *r),
        [b, r] => (0, *b, *r),
        _ => return None,
    };
    let (dev, func) = rest.split_once('.').unwrap_or((rest, "0"));
    Some((
        domain,
        u32::from_str_radix(bus, 16).ok()?,
        u32::from_str_radix(dev, 16).ok()?,
        u32::from_str_radix(func, 16).ok()?,
    ))
}

fn handle_by_pci(bus_id: *const c_char, device: *mut NvmlDevice) -> NvmlReturn {
    guard(|| {
        let s = session()?;
        let wanted =
            parse_bus_id(unsafe { arg_str(bus_id) }?).ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
        for (g, gpu) in s.scenario.present_gpus(s.t) {
            if parse_bus_id(&gpu.pci_bus_id(g)) == Some(wanted) {
                return unsafe { out(device, Dev::Gpu(g).handle()) };
            }
        }
        Err(NVML_ERROR_NOT_FOUND)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId(
    bus_id: *const c_char,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    handle_by_pci(bus_id, device)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    bus_id: *const c_char,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    handle_by_pci(bus_id, device)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetIndex(device: NvmlDevice, index: *mut c_uint) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, None)?;
        ctx.physical()?;
        let g = ctx.dev.gpu_index();
        let rank = ctx
            .s
            .scenario
            .present_gpus(ctx.t())
            .take_while(|(p, _)| *p < g)
            .count();
        unsafe { out(index, rank as c_uint) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(
    device: NvmlDevice,
    minor: *mut c_uint,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, None)?;
        ctx.physical()?;
        unsafe { out(minor, ctx.dev.gpu_index() as c_uint) }
    })
}

/// The name NVML gives a MIG device, e.g. `NVIDIA H200 MIG 1g.18gb`.
fn mig_name(gpu: &Gpu, mig: &MigDevice) -> String {
    let share = mig.memory_total as f64 / gpu.memory_total.max(1) as f64;
    let slices = (share * 7.0).round().max(1.0);
    let gb = (mig.memory_total as f64 / f64::from(1u32 << 30)).round();
    format!("{} MIG {slices}g.{gb}gb", gpu.name)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: NvmlDevice,
    name: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, Some(Call::Name))?;
        let text = match ctx.mig() {
            Some(mig) => mig_name(ctx.gpu(), mig),
            None => ctx.gpu().name.clone(),
        };
        unsafe { out_str(name, length, &text) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: NvmlDevice,
    uuid: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, Some(Call::Uuid))?;
        let g = ctx.dev.gpu_index();
        let text = match ctx.mig() {
            Some(mig) => mig.uuid(g),
            None => ctx.gpu().uuid(g),
        };
        unsafe { out_str(uuid, length, &text) }
    })
}

/// PCI facts of the GPU: (full bus id, legacy bus id, domain, bus, device).
fn pci_facts(ctx: &Ctx) -> (String, String, u32, u32, u32) {
    let g = ctx.dev.gpu_index();
    let full = ctx.gpu().pci_bus_id(g);
    let (domain, bus, dev, func) = parse_bus_id(&full).unwrap_or((0, 0, 0, 0));
    let full = format!("{domain:08X}:{bus:02X}:{dev:02X}.{func:X}");
    let legacy = format!("{:04X}:{bus:02X}:{dev:02X}.{func:X}", domain & 0xFFFF);
    (full, legacy, domain, bus, dev)
}

/// H200 SXM: device 0x2335, vendor 0x10DE.
const PCI_DEVICE_ID: c_uint = 0x2335_10DE;
const PCI_SUBSYSTEM_ID: c_uint = 0x18BE_10DE;

fn pci_info(device: NvmlDevice, pci: *mut NvmlPciInfo) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, Some(Call::PciInfo))?;
        let (full, legacy, domain, bus, dev) = pci_facts(&ctx);
        let info = NvmlPciInfo {
            bus_id_legacy: c_array(&legacy),
            domain,
            bus,
            device: dev,
            pci_device_id: PCI_DEVICE_ID,
            pci_sub_system_id: PCI_SUBSYSTEM_ID,
            bus_id: c_array(&full),
        };
        unsafe { out(pci, info) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    device: NvmlDevice,
    pci: *mut NvmlPciInfo,
) -> NvmlReturn {
    pci_info(device, pci)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v2(
    device: NvmlDevice,
    pci: *mut NvmlPciInfo,
) -> NvmlReturn {
    pci_info(device, pci)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo(
    device: NvmlDevice,
    pci: *mut NvmlPciInfoV1,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, Some(Call::PciInfo))?;
        let (_, legacy, domain, bus, dev) = pci_facts(&ctx);
        let info = NvmlPciInfoV1 {
            bus_id: c_array(&legacy),
            domain,
            bus,
            device: dev,
            pci_device_id: PCI_DEVICE_ID,
            pci_sub_system_id: PCI_SUBSYSTEM_ID,
            reserved: [0; 4],
        };
        unsafe { out(pci, info) }
    })
}

// ---------------------------------------------------------------------------------------------
// Memory, utilisation, sensors

/// (total, reserved, free, used-excluding-reserved) of the handle's device.
fn memory_numbers(ctx: &Ctx) -> (u64, u64, u64, u64) {
    let t = ctx.t();
    if let Some(mig) = ctx.mig() {
        let used = ctx.gpu().mig_used_at(mig, t);
        (
            mig.memory_total,
            0,
            mig.memory_total.saturating_sub(used),
            used,
        )
    } else {
        let gpu = ctx.gpu();
        (
            gpu.memory_total,
            gpu.memory_reserved,
            gpu.free_at(t),
            gpu.used_at(t),
        )
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: NvmlDevice,
    memory: *mut NvmlMemory,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, Some(Call::Memory))?;
        let (total, reserved, free, used) = memory_numbers(&ctx);
        let info = NvmlMemory {
            total,
            free,
            used: used.saturating_add(reserved),
        };
        unsafe { out(memory, info) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: NvmlDevice,
    memory: *mut NvmlMemoryV2,
) -> NvmlReturn {
    guard(|| {
        if memory.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: non-null pointer to the caller's struct; only its version is read here.
        let version = unsafe { (*memory).version };
        let ctx = self::device(device, Some(Call::Memory))?;
        if version != MEMORY_V2_VERSION {
            // What R580 answers (not ARGUMENT_VERSION_MISMATCH).
            return Err(NVML_ERROR_FUNCTION_NOT_FOUND);
        }
        let (total, reserved, free, used) = memory_numbers(&ctx);
        let info = NvmlMemoryV2 {
            version,
            total,
            reserved,
            free,
            used,
        };
        unsafe { out(memory, info) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: NvmlDevice,
    utilization: *mut NvmlUtilization,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, Some(Call::Utilization))?;
        let gpu = ctx.physical()?;
        let t = ctx.t();
        let info = NvmlUtilization {
            gpu: gpu.util_gpu.percent_at(t),
            memory: gpu.util_mem.percent_at(t),
        };
        unsafe { out(utilization, info) }
    })
}

fn temperature_c(ctx: &Ctx) -> Result<i32, NvmlReturn> {
    let gpu = ctx.physical()?;
    Ok(gpu.temperature.at(ctx.t()).round() as i32)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: NvmlDevice,
    sensor: c_uint,
    temp: *mut c_uint,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, Some(Call::Temperature))?;
        if sensor != 0 {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let c = temperature_c(&ctx)?;
        unsafe { out(temp, c.max(0) as c_uint) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperatureV(
    device: NvmlDevice,
    temperature: *mut NvmlTemperatureV1,
) -> NvmlReturn {
    guard(|| {
        if temperature.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: non-null pointer to the caller's struct.
        let (version, sensor) = unsafe { ((*temperature).version, (*temperature).sensor_type) };
        let ctx = self::device(device, Some(Call::Temperature))?;
        if version != TEMPERATURE_V1_VERSION {
            return Err(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        if sensor != 0 {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let c = temperature_c(&ctx)?;
        unsafe {
            out(
                temperature,
                NvmlTemperatureV1 {
                    version,
                    sensor_type: sensor,
                    temperature: c,
                },
            )
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperatureThreshold(
    device: NvmlDevice,
    threshold: c_uint,
    temp: *mut c_uint,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, Some(Call::TemperatureThreshold))?;
        let gpu = ctx.physical()?;
        let value = match threshold {
            0 => gpu.temp_shutdown,     // SHUTDOWN
            1 | 3 => gpu.temp_slowdown, // SLOWDOWN, GPU_MAX
            2 => gpu.temp_shutdown + 3, // MEM_MAX
            4..=7 => return Err(NVML_ERROR_NOT_SUPPORTED),
            _ => return Err(NVML_ERROR_INVALID_ARGUMENT),
        };
        unsafe { out(temp, value) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(
    device: NvmlDevice,
    power: *mut c_uint,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, Some(Call::Power))?;
        let gpu = ctx.physical()?;
        let mw = (gpu.power.at(ctx.t()) * 1000.0).round().max(0.0) as c_uint;
        unsafe { out(power, mw) }
    })
}

fn power_limit(device: NvmlDevice, limit: *mut c_uint) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, Some(Call::PowerLimit))?;
        let gpu = ctx.physical()?;
        let mw = (gpu.power_limit * 1000.0).round().max(0.0) as c_uint;
        unsafe { out(limit, mw) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(
    device: NvmlDevice,
    limit: *mut c_uint,
) -> NvmlReturn {
    power_limit(device, limit)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPowerManagementLimit(
    device: NvmlDevice,
    limit: *mut c_uint,
) -> NvmlReturn {
    power_limit(device, limit)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: NvmlDevice,
    energy: *mut c_ulonglong,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, Some(Call::Energy))?;
        let gpu = ctx.physical()?;
        unsafe { out(energy, gpu.energy_mj_at(ctx.t())) }
    })
}

const VIDEO_CLOCK_MHZ: c_uint = 1755;
const MAX_SM_CLOCK_MHZ: f64 = 1980.0;
const MAX_MEM_CLOCK_MHZ: f64 = 3201.0;

/// Current clock of `clock_type` (graphics 0, SM 1, memory 2, video 3) in MHz.
fn current_clock(gpu: &Gpu, clock_type: c_uint, t: f64) -> Result<c_uint, NvmlReturn> {
    match clock_type {
        0 | 1 => Ok(gpu.sm_clock.at_u64(t) as c_uint),
        2 => Ok(gpu.mem_clock.at_u64(t) as c_uint),
        3 => Ok(VIDEO_CLOCK_MHZ),
        _ => Err(NVML_ERROR_INVALID_ARGUMENT),
    }
}

fn max_clock(gpu: &Gpu, clock_type: c_uint, t: f64) -> Result<c_uint, NvmlReturn> {
    let current = current_clock(gpu, clock_type, t)?;
    let max = match clock_type {
        0 | 1 => MAX_SM_CLOCK_MHZ as c_uint,
        2 => MAX_MEM_CLOCK_MHZ as c_uint,
        _ => VIDEO_CLOCK_MHZ,
    };
    Ok(current.max(max))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    device: NvmlDevice,
    clock_type: c_uint,
    clock: *mut c_uint,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, Some(Call::Clock))?;
        let mhz = current_clock(ctx.physical()?, clock_type, ctx.t())?;
        unsafe { out(clock, mhz) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(
    device: NvmlDevice,
    clock_type: c_uint,
    clock: *mut c_uint,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, Some(Call::Clock))?;
        let mhz = max_clock(ctx.physical()?, clock_type, ctx.t())?;
        unsafe { out(clock, mhz) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetClock(
    device: NvmlDevice,
    clock_type: c_uint,
    clock_id: c_uint,
    clock: *mut c_uint,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, Some(Call::Clock))?;
        let gpu = ctx.physical()?;
        let mhz = match clock_id {
            0 => current_clock(gpu, clock_type, ctx.t())?, // CURRENT
            1..=3 => max_clock(gpu, clock_type, ctx.t())?, // APP target/default, boost max
            _ => return Err(NVML_ERROR_INVALID_ARGUMENT),
        };
        unsafe { out(clock, mhz) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPcieThroughput(
    device: NvmlDevice,
    counter: c_uint,
    value: *mut c_uint,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, Some(Call::PcieThroughput))?;
        let gpu = ctx.physical()?;
        let timeline = match counter {
            0 => &gpu.pcie_tx,
            1 => &gpu.pcie_rx,
            _ => return Err(NVML_ERROR_INVALID_ARGUMENT),
        };
        let kbps = timeline.at_u64(ctx.t()).min(u64::from(c_uint::MAX)) as c_uint;
        unsafe { out(value, kbps) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: NvmlDevice,
    error_type: c_uint,
    counter_type: c_uint,
    count: *mut c_ulonglong,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, Some(Call::Ecc))?;
        let gpu = ctx.physical()?;
        let value = match (error_type, counter_type) {
            (1, 0) => gpu.ecc_uncorrected.at_u64(ctx.t()), // uncorrected, volatile
            (0 | 1, 0 | 1) => 0,
            _ => return Err(NVML_ERROR_INVALID_ARGUMENT),
        };
        unsafe { out(count, value) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEccMode(
    device: NvmlDevice,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, Some(Call::Ecc))?;
        ctx.physical()?;
        if current.is_null() || pending.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        unsafe {
            out(current, 1)?;
            out(pending, 1)
        }
    })
}

fn fan_speed(device: NvmlDevice, fan: c_uint, speed: *mut c_uint) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, Some(Call::FanSpeed))?;
        let gpu = ctx.physical()?;
        if gpu.fans == 0 {
            return Err(NVML_ERROR_NOT_SUPPORTED);
        }
        if fan >= gpu.fans {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        unsafe { out(speed, gpu.fan_speed.percent_at(ctx.t())) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFanSpeed(
    device: NvmlDevice,
    speed: *mut c_uint,
) -> NvmlReturn {
    fan_speed(device, 0, speed)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFanSpeed_v2(
    device: NvmlDevice,
    fan: c_uint,
    speed: *mut c_uint,
) -> NvmlReturn {
    fan_speed(device, fan, speed)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetNumFans(
    device: NvmlDevice,
    num_fans: *mut c_uint,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, None)?;
        let gpu = ctx.physical()?;
        unsafe { out(num_fans, gpu.fans) }
    })
}

// ---------------------------------------------------------------------------------------------
// Static properties peers ask for at start-up

/// A call that answers a constant for a physical GPU.
fn constant(device: NvmlDevice, ptr: *mut c_uint, value: c_uint) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, None)?;
        ctx.physical()?;
        unsafe { out(ptr, value) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPersistenceMode(
    device: NvmlDevice,
    mode: *mut c_uint,
) -> NvmlReturn {
    constant(device, mode, 1) // NVML_FEATURE_ENABLED
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPerformanceState(
    device: NvmlDevice,
    state: *mut c_uint,
) -> NvmlReturn {
    constant(device, state, 0) // P0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeMode(
    device: NvmlDevice,
    mode: *mut c_uint,
) -> NvmlReturn {
    constant(device, mode, 0) // NVML_COMPUTEMODE_DEFAULT
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetBrand(device: NvmlDevice, brand: *mut c_uint) -> NvmlReturn {
    constant(device, brand, 14) // NVML_BRAND_NVIDIA (datacenter boards)
}

/// H200 SXM: PCIe Gen 5 x16 (current = max: the double never down-trains the link).
const PCIE_LINK_GEN: c_uint = 5;
const PCIE_LINK_WIDTH: c_uint = 16;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxPcieLinkGeneration(
    device: NvmlDevice,
    gen_out: *mut c_uint,
) -> NvmlReturn {
    constant(device, gen_out, PCIE_LINK_GEN)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCurrPcieLinkGeneration(
    device: NvmlDevice,
    gen_out: *mut c_uint,
) -> NvmlReturn {
    constant(device, gen_out, PCIE_LINK_GEN)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxPcieLinkWidth(
    device: NvmlDevice,
    width: *mut c_uint,
) -> NvmlReturn {
    constant(device, width, PCIE_LINK_WIDTH)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCurrPcieLinkWidth(
    device: NvmlDevice,
    width: *mut c_uint,
) -> NvmlReturn {
    constant(device, width, PCIE_LINK_WIDTH)
}

/// The encoder/decoder sampling period the real R580 driver reports (NVML-FACTS §2).
const CODEC_SAMPLING_PERIOD_US: c_uint = 100_000;

/// Encoder/decoder utilisation: the scenarios model compute jobs, so 0 %, with the real period.
fn codec_utilization(
    device: NvmlDevice,
    utilization: *mut c_uint,
    sampling_period_us: *mut c_uint,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, Some(Call::Utilization))?;
        ctx.physical()?;
        if utilization.is_null() || sampling_period_us.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        unsafe {
            out(utilization, 0)?;
            out(sampling_period_us, CODEC_SAMPLING_PERIOD_US)
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEncoderUtilization(
    device: NvmlDevice,
    utilization: *mut c_uint,
    sampling_period_us: *mut c_uint,
) -> NvmlReturn {
    codec_utilization(device, utilization, sampling_period_us)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDecoderUtilization(
    device: NvmlDevice,
    utilization: *mut c_uint,
    sampling_period_us: *mut c_uint,
) -> NvmlReturn {
    codec_utilization(device, utilization, sampling_period_us)
}

fn driver_model(device: NvmlDevice) -> NvmlReturn {
    guard(|| {
        self::device(device, None)?;
        // Linux has no WDDM/TCC driver models.
        Err(NVML_ERROR_NOT_SUPPORTED)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDriverModel(
    device: NvmlDevice,
    _current: *mut c_uint,
    _pending: *mut c_uint,
) -> NvmlReturn {
    driver_model(device)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDriverModel_v2(
    device: NvmlDevice,
    _current: *mut c_uint,
    _pending: *mut c_uint,
) -> NvmlReturn {
    driver_model(device)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    device: NvmlDevice,
    major: *mut c_int,
    minor: *mut c_int,
) -> NvmlReturn {
    guard(|| {
        self::device(device, None)?;
        if major.is_null() || minor.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        unsafe {
            out(major, 9)?;
            out(minor, 0)
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Process lists

#[derive(Clone, Copy)]
enum List {
    Compute,
    Graphics,
    Mps,
}

impl List {
    fn call(self) -> Call {
        match self {
            List::Compute => Call::ComputeProcesses,
            List::Graphics => Call::GraphicsProcesses,
            List::Mps => Call::MpsProcesses,
        }
    }

    fn shows(self, kind: ProcKind) -> bool {
        matches!(
            (self, kind),
            (List::Compute, ProcKind::Compute | ProcKind::Both)
                | (List::Graphics, ProcKind::Graphics | ProcKind::Both)
                | (List::Mps, ProcKind::Mps)
        )
    }
}

/// Whether a process runs on the handle's device (any process for a GPU, the instance's
/// processes for a MIG device).
fn on_device(ctx: &Ctx, p: &Process) -> bool {
    match ctx.mig() {
        None => true,
        Some(mig) => {
            p.gpu_instance == Some(mig.gpu_instance)
                && p.compute_instance
                    .is_none_or(|ci| ci == mig.compute_instance)
        }
    }
}

/// One process as the lists report it.
struct ProcRecord {
    pid: u32,
    used: u64,
    gpu_instance: u32,
    compute_instance: u32,
}

trait FromRecord {
    fn from_record(r: &ProcRecord) -> Self;
}

impl FromRecord for NvmlProcessInfoV1 {
    fn from_record(r: &ProcRecord) -> Self {
        Self {
            pid: r.pid,
            used_gpu_memory: r.used,
        }
    }
}

impl FromRecord for NvmlProcessInfoV2 {
    fn from_record(r: &ProcRecord) -> Self {
        Self {
            pid: r.pid,
            used_gpu_memory: r.used,
            gpu_instance_id: r.gpu_instance,
            compute_instance_id: r.compute_instance,
        }
    }
}

/// The two-call protocol: a sizing call (`*count` too small, or NULL `infos`) answers
/// `INSUFFICIENT_SIZE` with the count (`SUCCESS` and 0 when none run); a big enough buffer is
/// filled. `vanish_between_calls` processes count in the sizing answer only.
unsafe fn process_list<T: FromRecord>(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut T,
    list: List,
) -> Res {
    let ctx = self::device(device, Some(list.call()))?;
    if count.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    let t = ctx.t();
    let procs: Vec<&Process> = ctx
        .gpu()
        .processes_at(t)
        .filter(|p| list.shows(p.kind) && on_device(&ctx, p))
        .collect();
    let sizing = procs.len();
    // SAFETY: `count` is non-null.
    let capacity = unsafe { count.read() } as usize;
    let filled: Vec<&&Process> = procs.iter().filter(|p| !p.vanish_between_calls).collect();
    if infos.is_null() || capacity < filled.len() {
        unsafe { count.write(sizing as c_uint) };
        return if sizing == 0 {
            Ok(())
        } else {
            Err(NVML_ERROR_INSUFFICIENT_SIZE)
        };
    }
    for (i, p) in filled.iter().enumerate() {
        let record = ProcRecord {
            pid: p.pid,
            used: if p.used_unavailable {
                VALUE_NOT_AVAILABLE
            } else {
                p.used_at(t)
            },
            gpu_instance: p.gpu_instance.unwrap_or(NO_INSTANCE),
            compute_instance: p.compute_instance.unwrap_or(NO_INSTANCE),
        };
        // SAFETY: the caller's array holds `capacity` >= `filled.len()` records.
        unsafe { infos.add(i).write(T::from_record(&record)) };
    }
    unsafe { count.write(filled.len() as c_uint) };
    Ok(())
}

macro_rules! process_list_export {
    ($name:ident, $record:ty, $list:expr) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            device: NvmlDevice,
            count: *mut c_uint,
            infos: *mut $record,
        ) -> NvmlReturn {
            guard(|| unsafe { process_list(device, count, infos, $list) })
        }
    };
}

process_list_export!(
    nvmlDeviceGetComputeRunningProcesses,
    NvmlProcessInfoV1,
    List::Compute
);
process_list_export!(
    nvmlDeviceGetComputeRunningProcesses_v2,
    NvmlProcessInfoV2,
    List::Compute
);
process_list_export!(
    nvmlDeviceGetComputeRunningProcesses_v3,
    NvmlProcessInfoV2,
    List::Compute
);
process_list_export!(
    nvmlDeviceGetGraphicsRunningProcesses,
    NvmlProcessInfoV1,
    List::Graphics
);
process_list_export!(
    nvmlDeviceGetGraphicsRunningProcesses_v2,
    NvmlProcessInfoV2,
    List::Graphics
);
process_list_export!(
    nvmlDeviceGetGraphicsRunningProcesses_v3,
    NvmlProcessInfoV2,
    List::Graphics
);
process_list_export!(
    nvmlDeviceGetMPSComputeRunningProcesses,
    NvmlProcessInfoV1,
    List::Mps
);
process_list_export!(
    nvmlDeviceGetMPSComputeRunningProcesses_v2,
    NvmlProcessInfoV2,
    List::Mps
);
process_list_export!(
    nvmlDeviceGetMPSComputeRunningProcesses_v3,
    NvmlProcessInfoV2,
    List::Mps
);

/// The current sample's timestamp: µs since the Unix epoch, quantised to 100 ms.
fn sample_timestamp_us(wall: f64) -> u64 {
    ((wall * 10.0).floor().max(0.0) as u64) * 100_000
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: NvmlDevice,
    utilization: *mut NvmlProcessUtilizationSample,
    count: *mut c_uint,
    last_seen: c_ulonglong,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, Some(Call::ProcessUtilization))?;
        let gpu = ctx.physical()?;
        if count.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: `count` is non-null.
        if utilization.is_null() || unsafe { count.read() } < PROCESS_UTIL_CAPACITY {
            // The real driver answers its buffer capacity, whatever is pending.
            unsafe { count.write(PROCESS_UTIL_CAPACITY) };
            return Err(NVML_ERROR_INSUFFICIENT_SIZE);
        }
        let t = ctx.t();
        let stamp = sample_timestamp_us(ctx.s.wall);
        if stamp <= last_seen {
            return Err(NVML_ERROR_NOT_FOUND);
        }
        let mut n = 0usize;
        for p in gpu.processes_at(t) {
            let (sm, mem) = (p.sm.percent_at(t), p.mem.percent_at(t));
            if sm == 0 && mem == 0 {
                continue;
            }
            if n == PROCESS_UTIL_CAPACITY as usize {
                break;
            }
            let sample = NvmlProcessUtilizationSample {
                pid: p.pid,
                time_stamp: stamp,
                sm_util: sm,
                mem_util: mem,
                enc_util: 0,
                dec_util: 0,
            };
            // SAFETY: the buffer holds at least PROCESS_UTIL_CAPACITY samples.
            unsafe { utilization.add(n).write(sample) };
            n += 1;
        }
        if n == 0 {
            return Err(NVML_ERROR_NOT_FOUND);
        }
        unsafe { count.write(n as c_uint) };
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// MIG

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: NvmlDevice,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, Some(Call::MigMode))?;
        let mode = match ctx.physical()?.mig {
            MigSpec::Unsupported => return Err(NVML_ERROR_NOT_SUPPORTED),
            MigSpec::Disabled => 0,
            MigSpec::Enabled => 1,
        };
        if current.is_null() || pending.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        unsafe {
            out(current, mode)?;
            out(pending, mode)
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    device: NvmlDevice,
    count: *mut c_uint,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, None)?;
        let gpu = ctx.physical()?;
        if gpu.mig == MigSpec::Unsupported {
            return Err(NVML_ERROR_NOT_SUPPORTED);
        }
        unsafe { out(count, gpu.mig_devices.len().max(7) as c_uint) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: NvmlDevice,
    index: c_uint,
    mig_device: *mut NvmlDevice,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, None)?;
        let gpu = ctx.physical().map_err(|_| NVML_ERROR_INVALID_ARGUMENT)?;
        match gpu.mig {
            MigSpec::Unsupported => Err(NVML_ERROR_NOT_SUPPORTED),
            MigSpec::Disabled => Err(NVML_ERROR_INVALID_ARGUMENT),
            MigSpec::Enabled if (index as usize) < gpu.mig_devices.len() => unsafe {
                out(
                    mig_device,
                    Dev::Mig(ctx.dev.gpu_index(), index as usize).handle(),
                )
            },
            MigSpec::Enabled => Err(NVML_ERROR_NOT_FOUND),
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(
    device: NvmlDevice,
    is_mig: *mut c_uint,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, None)?;
        unsafe { out(is_mig, c_uint::from(ctx.mig().is_some())) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    mig_device: NvmlDevice,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(mig_device, None)?;
        match ctx.dev {
            Dev::Mig(g, _) => unsafe { out(device, Dev::Gpu(g).handle()) },
            Dev::Gpu(_) => Err(NVML_ERROR_INVALID_ARGUMENT),
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(
    device: NvmlDevice,
    id: *mut c_uint,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, None)?;
        let mig = ctx.mig().ok_or(NVML_ERROR_NOT_SUPPORTED)?;
        unsafe { out(id, mig.gpu_instance) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(
    device: NvmlDevice,
    id: *mut c_uint,
) -> NvmlReturn {
    guard(|| {
        let ctx = self::device(device, None)?;
        let mig = ctx.mig().ok_or(NVML_ERROR_NOT_SUPPORTED)?;
        unsafe { out(id, mig.compute_instance) }
    })
}
