//! The double, loaded through the real nvml-wrapper (`Nvml::builder().lib_path(..)`).

mod common;

use std::time::{Duration, Instant};

use common::{Fixture, Raw};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

const TWO_GPUS: &str = r#"
version = 1
driver_version = "580.159.04"

[[gpu]]
name = "NVIDIA H200"
uuid = "GPU-0f6c2d38-1c4e-4f3c-9a55-3b2b8f7d0001"
pci_bus_id = "00000000:18:00.0"
memory_total = "140GiB"
memory_reserved = "616MiB"
base_used = "9MiB"
power = 250
faults.not_supported = ["power"]
faults.no_permission = ["ecc"]

[[gpu.process]]
pid = 100
used = { linear = [[0, "1GiB"], [10, "11GiB"]] }
sm = 70
mem = 4

[[gpu.process]]
pid = 101
type = "graphics"
used = "512MiB"

[[gpu.process]]
pid = 102
type = "both"
used = "2GiB"
used_unavailable = true
sm = 10

[[gpu.process]]
pid = 103
type = "mps"
used = "1GiB"

[[gpu.process]]
pid = 104
used = "3GiB"
start = 100

[[gpu]]
name = "NVIDIA H100 80GB HBM3"
memory_total = "80GiB"
memory_reserved = "0"
"#;

#[test]
fn enumerates_devices_and_identity() {
    let fx = Fixture::new(TWO_GPUS, Some(5.0));
    let nvml = fx.init().expect("init");
    assert_eq!(nvml.device_count().expect("count"), 2);
    assert_eq!(nvml.sys_driver_version().expect("driver"), "580.159.04");
    assert_eq!(nvml.sys_cuda_driver_version().expect("cuda"), 13000);
    let d0 = nvml.device_by_index(0).expect("handle 0");
    assert_eq!(d0.name().expect("name"), "NVIDIA H200");
    assert_eq!(
        d0.uuid().expect("uuid"),
        "GPU-0f6c2d38-1c4e-4f3c-9a55-3b2b8f7d0001"
    );
    assert_eq!(d0.index().expect("index"), 0);
    let pci = d0.pci_info().expect("pci");
    assert_eq!(pci.bus_id, "00000000:18:00.0");
    assert_eq!((pci.domain, pci.bus, pci.device), (0, 0x18, 0));
    let d1 = nvml.device_by_index(1).expect("handle 1");
    assert_eq!(d1.name().expect("name"), "NVIDIA H100 80GB HBM3");
    let uuid1 = d1.uuid().expect("uuid");
    assert!(uuid1.starts_with("GPU-"), "{uuid1}");
    assert_eq!(
        nvml.device_by_uuid(uuid1.as_str())
            .expect("by uuid")
            .index()
            .expect("index"),
        1
    );
    let bus1 = d1.pci_info().expect("pci").bus_id;
    assert_eq!(
        nvml.device_by_pci_bus_id(bus1)
            .expect("by bus")
            .index()
            .expect("index"),
        1
    );
    assert!(matches!(
        nvml.device_by_index(2),
        Err(NvmlError::InvalidArg)
    ));
    // Datacenter board defaults: no fans, MIG unsupported.
    assert_eq!(d0.num_fans().expect("fans"), 0);
    assert!(matches!(d0.fan_speed(0), Err(NvmlError::NotSupported)));
    assert_eq!(
        d0.temperature(nvml_wrapper::enum_wrappers::device::TemperatureSensor::Gpu)
            .expect("temp"),
        35
    );
    assert_eq!(d0.enforced_power_limit().expect("limit"), 700_000);
    // pid of this test process: the name comes from /proc.
    let me = nvml
        .sys_process_name(std::process::id(), 64)
        .expect("process name");
    assert!(!me.is_empty());
}

/// What nvtop 3.0.1 needs before it lists a GPU: it refuses the library when any of these
/// symbols is missing (PCIe link generation/width, encoder/decoder utilisation).
#[test]
fn pcie_link_and_codec_utilization_for_nvtop() {
    let fx = Fixture::new(TWO_GPUS, Some(5.0));
    let nvml = fx.init().expect("init");
    let d0 = nvml.device_by_index(0).expect("handle 0");
    assert_eq!(d0.max_pcie_link_gen().expect("max gen"), 5);
    assert_eq!(d0.current_pcie_link_gen().expect("gen"), 5);
    assert_eq!(d0.max_pcie_link_width().expect("max width"), 16);
    assert_eq!(d0.current_pcie_link_width().expect("width"), 16);
    for codec in [d0.encoder_utilization(), d0.decoder_utilization()] {
        let codec = codec.expect("codec utilisation");
        assert_eq!((codec.utilization, codec.sampling_period), (0, 100_000));
    }
    drop(nvml);
    drop(fx); // releases the serialisation lock the next fixture takes
    // The codec calls follow the `utilization` fault knob.
    let fx = Fixture::new(
        "[[gpu]]\nmemory_total = \"80GiB\"\nfaults.not_supported = [\"utilization\"]\n",
        Some(1.0),
    );
    let nvml = fx.init().expect("init");
    let d0 = nvml.device_by_index(0).expect("handle 0");
    assert!(matches!(
        d0.encoder_utilization(),
        Err(NvmlError::NotSupported)
    ));
    assert!(matches!(
        d0.decoder_utilization(),
        Err(NvmlError::NotSupported)
    ));
    assert_eq!(d0.current_pcie_link_gen().expect("gen"), 5);
}

#[test]
fn memory_v2_excludes_reserved_and_v1_includes_it() {
    let fx = Fixture::new(TWO_GPUS, Some(5.0));
    let nvml = fx.init().expect("init");
    let dev = nvml.device_by_index(0).expect("handle");
    let mem = dev.memory_info().expect("memory v2");
    // At t=5: pid 100 = 6 GiB, 101 = 512 MiB, 102 = 2 GiB, 103 = 1 GiB, base 9 MiB.
    let used = 6 * GIB + 512 * MIB + 2 * GIB + GIB + 9 * MIB;
    assert_eq!(mem.total, 140 * GIB);
    assert_eq!(mem.reserved, 616 * MIB);
    assert_eq!(mem.used, used);
    assert_eq!(mem.free, 140 * GIB - 616 * MIB - used);

    // v1 through the raw symbol: used includes reserved.
    let raw = Raw::open();
    let h = raw.handle(0);
    let v1: unsafe extern "C" fn(common::Handle, *mut [u64; 3]) -> u32 =
        raw.sym("nvmlDeviceGetMemoryInfo");
    let mut out = [0u64; 3];
    assert_eq!(unsafe { v1(h, &raw mut out) }, 0);
    assert_eq!(out, [140 * GIB, mem.free, used + 616 * MIB]);

    // v2 with a wrong struct version: FUNCTION_NOT_FOUND (13), as R580 answers.
    let v2: unsafe extern "C" fn(common::Handle, *mut [u64; 5]) -> u32 =
        raw.sym("nvmlDeviceGetMemoryInfo_v2");
    let mut bad = [0u64; 5];
    bad[0] = 0x0100_0028;
    assert_eq!(unsafe { v2(h, &raw mut bad) }, 13);
}

#[test]
fn process_lists_by_kind() {
    let fx = Fixture::new(TWO_GPUS, Some(5.0));
    let nvml = fx.init().expect("init");
    let dev = nvml.device_by_index(0).expect("handle");

    let compute = dev.running_compute_processes().expect("compute v3");
    let pids: Vec<u32> = compute.iter().map(|p| p.pid).collect();
    assert_eq!(
        pids,
        [100, 102],
        "compute + both, not graphics/mps/not-yet-started"
    );
    assert_eq!(compute[0].used_gpu_memory, UsedGpuMemory::Used(6 * GIB));
    assert_eq!(compute[1].used_gpu_memory, UsedGpuMemory::Unavailable);
    assert_eq!(compute[0].gpu_instance_id, None);
    assert_eq!(compute[0].compute_instance_id, None);

    let graphics = dev.running_graphics_processes().expect("graphics v3");
    let pids: Vec<u32> = graphics.iter().map(|p| p.pid).collect();
    assert_eq!(pids, [101, 102]);

    let mps = dev.mps_running_compute_processes().expect("mps v3");
    let pids: Vec<u32> = mps.iter().map(|p| p.pid).collect();
    assert_eq!(pids, [103]);

    let idle = nvml.device_by_index(1).expect("handle 1");
    assert!(idle.running_compute_processes().expect("none").is_empty());
}

#[test]
fn processes_appear_with_time() {
    let fx = Fixture::new(TWO_GPUS, Some(150.0));
    let nvml = fx.init().expect("init");
    let dev = nvml.device_by_index(0).expect("handle");
    let pids: Vec<u32> = dev
        .running_compute_processes()
        .expect("compute")
        .iter()
        .map(|p| p.pid)
        .collect();
    assert_eq!(pids, [100, 102, 104]);
}

#[test]
fn process_utilization_samples_then_not_found() {
    let fx = Fixture::new(TWO_GPUS, Some(5.0));
    let nvml = fx.init().expect("init");
    let dev = nvml.device_by_index(0).expect("handle");
    let samples = dev.process_utilization_stats(None).expect("samples");
    let mut got: Vec<(u32, u32, u32)> = samples
        .iter()
        .map(|s| (s.pid, s.sm_util, s.mem_util))
        .collect();
    got.sort_unstable();
    assert_eq!(got, [(100, 70, 4), (102, 10, 0)]);
    let stamp = samples[0].timestamp;
    assert!(samples.iter().all(|s| s.timestamp == stamp));
    assert_eq!(stamp % 100_000, 0, "quantised to 100 ms");
    // Frozen time: no newer sample.
    assert!(matches!(
        dev.process_utilization_stats(stamp),
        Err(NvmlError::NotFound)
    ));
    // An older lastSeen gets the sample again.
    assert_eq!(
        dev.process_utilization_stats(stamp - 1)
            .expect("again")
            .len(),
        2
    );
    // An idle GPU has no samples.
    let idle = nvml.device_by_index(1).expect("handle 1");
    assert!(matches!(
        idle.process_utilization_stats(None),
        Err(NvmlError::NotFound)
    ));
}

#[test]
fn injected_not_supported_and_no_permission() {
    let fx = Fixture::new(TWO_GPUS, Some(5.0));
    let nvml = fx.init().expect("init");
    let d0 = nvml.device_by_index(0).expect("handle");
    assert!(matches!(d0.power_usage(), Err(NvmlError::NotSupported)));
    assert!(matches!(
        d0.total_ecc_errors(
            nvml_wrapper::enum_wrappers::device::MemoryError::Uncorrected,
            nvml_wrapper::enum_wrappers::device::EccCounter::Volatile
        ),
        Err(NvmlError::NoPermission)
    ));
    // The other GPU is unaffected: 120 W default.
    let d1 = nvml.device_by_index(1).expect("handle 1");
    assert_eq!(d1.power_usage().expect("power"), 120_000);
    assert_eq!(d1.total_energy_consumption().expect("energy"), 600_000);
}

const LOST: &str = r#"
[[gpu]]
memory_total = "80GiB"
lost_at = 20
[[gpu]]
memory_total = "80GiB"
"#;

#[test]
fn gpu_lost_after_lost_at() {
    let fx = Fixture::new(LOST, Some(10.0));
    {
        let nvml = fx.init().expect("init");
        let d0 = nvml.device_by_index(0).expect("handle");
        assert!(d0.memory_info().is_ok(), "not lost yet at t=10");
    }
    // SAFETY: the fixture holds the serialisation lock.
    unsafe { std::env::set_var("FAKE_NVML_FREEZE", "25") };
    let nvml = common::init().expect("init while a GPU is lost");
    assert_eq!(nvml.device_count().expect("count"), 2);
    let d0 = nvml.device_by_index(0).expect("handle of a lost GPU");
    assert!(matches!(d0.memory_info(), Err(NvmlError::GpuLost)));
    assert!(matches!(d0.uuid(), Err(NvmlError::GpuLost)));
    assert!(matches!(
        d0.running_compute_processes(),
        Err(NvmlError::GpuLost)
    ));
    let d1 = nvml.device_by_index(1).expect("handle 1");
    assert!(d1.memory_info().is_ok());
}

const HOTPLUG: &str = r#"
[[gpu]]
memory_total = "80GiB"
present = { until = 20 }
[[gpu]]
memory_total = "40GiB"
[[gpu]]
memory_total = "20GiB"
present = { from = 30 }
"#;

#[test]
fn present_window_adds_and_removes_gpus() {
    let fx = Fixture::new(HOTPLUG, Some(10.0));
    let nvml = fx.init().expect("init");
    assert_eq!(nvml.device_count().expect("count"), 2);
    let first = nvml.device_by_index(0).expect("handle 0");
    let uuid0 = first.uuid().expect("uuid");
    let uuid1 = nvml
        .device_by_index(1)
        .and_then(|d| d.uuid())
        .expect("uuid 1");
    assert!(nvml.device_by_index(2).is_err());
    // SAFETY: the fixture holds the serialisation lock.
    unsafe { std::env::set_var("FAKE_NVML_FREEZE", "25") };
    let nvml = common::init().expect("init after the removal");
    assert_eq!(nvml.device_count().expect("count"), 1);
    let d = nvml.device_by_index(0).expect("handle 0");
    assert_eq!(d.uuid().expect("uuid"), uuid1, "the next GPU moved down");
    assert_eq!(d.index().expect("index"), 0);
    assert!(matches!(first.memory_info(), Err(NvmlError::GpuLost)));
    assert!(nvml.device_by_uuid(uuid0.as_str()).is_err());
    // SAFETY: as above.
    unsafe { std::env::set_var("FAKE_NVML_FREEZE", "35") };
    let nvml = common::init().expect("init after the addition");
    assert_eq!(nvml.device_count().expect("count"), 2);
    let added = nvml.device_by_index(1).expect("handle 1");
    assert_eq!(added.memory_info().expect("memory").total, 20 << 30);
    assert_eq!(added.index().expect("index"), 1);
}

#[test]
fn slow_call_sleeps() {
    let fx = Fixture::new(
        r#"
[[gpu]]
memory_total = "80GiB"
faults.slow = [{ call = "memory", ms = 150, from = 0 }]
"#,
        Some(1.0),
    );
    let nvml = fx.init().expect("init");
    let dev = nvml.device_by_index(0).expect("handle");
    let started = Instant::now();
    dev.memory_info().expect("memory");
    assert!(started.elapsed() >= Duration::from_millis(150));
    // Other calls are not slowed.
    let started = Instant::now();
    dev.name().expect("name");
    assert!(started.elapsed() < Duration::from_millis(100));
}

#[test]
fn slow_call_does_not_block_other_threads() {
    let fx = Fixture::new(
        r#"
[[gpu]]
memory_total = "80GiB"
faults.slow = [{ call = "memory", ms = 400 }]
[[gpu]]
memory_total = "80GiB"
"#,
        Some(1.0),
    );
    let nvml = fx.init().expect("init");
    std::thread::scope(|scope| {
        let slow = scope.spawn(|| {
            let dev = nvml.device_by_index(0).expect("handle");
            dev.memory_info().expect("memory")
        });
        std::thread::sleep(Duration::from_millis(50));
        let started = Instant::now();
        let dev = nvml.device_by_index(1).expect("handle 1");
        dev.memory_info().expect("memory 1");
        assert!(started.elapsed() < Duration::from_millis(200));
        slow.join().expect("slow thread");
    });
}

#[test]
fn vanishing_process_is_counted_but_not_listed() {
    let fx = Fixture::new(
        r#"
[[gpu]]
memory_total = "80GiB"
[[gpu.process]]
pid = 1
used = "1GiB"
[[gpu.process]]
pid = 2
used = "1GiB"
vanish_between_calls = true
"#,
        Some(1.0),
    );
    let nvml = fx.init().expect("init");
    let raw = Raw::open();
    let h = raw.handle(0);
    let sizing: unsafe extern "C" fn(common::Handle, *mut u32, *mut u8) -> u32 =
        raw.sym("nvmlDeviceGetComputeRunningProcesses_v3");
    let mut count = 0u32;
    assert_eq!(
        unsafe { sizing(h, &raw mut count, std::ptr::null_mut()) },
        7
    );
    assert_eq!(count, 2);
    let list = nvml
        .device_by_index(0)
        .expect("handle")
        .running_compute_processes()
        .expect("list");
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].pid, 1);
}

#[test]
fn init_refcount_and_double_shutdown() {
    let _fx = Fixture::new(LOST, Some(1.0));
    let raw = Raw::open();
    // Drain whatever an earlier test might have left initialised.
    while raw.shutdown() == 0 {}
    assert_eq!(raw.init(), 0);
    assert_eq!(raw.init(), 0);
    assert_eq!(raw.shutdown(), 0);
    assert_eq!(raw.shutdown(), 0);
    assert_eq!(
        raw.shutdown(),
        1,
        "second shutdown past zero: UNINITIALIZED"
    );
    // Calls while uninitialised.
    let count: unsafe extern "C" fn(*mut u32) -> u32 = raw.sym("nvmlDeviceGetCount_v2");
    let mut n = 0;
    assert_eq!(unsafe { count(&raw mut n) }, 1);
    // The wrapper's explicit shutdown works once per init.
    let nvml = common::init().expect("init");
    nvml.shutdown().expect("shutdown");
}

#[test]
fn reload_when_the_file_changes() {
    let fx = Fixture::new(
        "[[gpu]]\nmemory_total = \"80GiB\"\nmemory_reserved = \"0\"\nbase_used = \"1GiB\"\n",
        Some(1.0),
    );
    let nvml = fx.init().expect("init");
    let dev = nvml.device_by_index(0).expect("handle");
    assert_eq!(dev.memory_info().expect("memory").used, GIB);
    fx.rewrite(
        "[[gpu]]\nmemory_total = \"80GiB\"\nmemory_reserved = \"0\"\nbase_used = \"3GiB\"\n# longer\n",
    );
    assert_eq!(dev.memory_info().expect("memory").used, 3 * GIB);
    // A broken file keeps the previous scenario.
    fx.rewrite("[[gpu]]\nmemory_total = \"lots\"\n");
    assert_eq!(dev.memory_info().expect("memory").used, 3 * GIB);
}

#[test]
fn driver_unloaded_window() {
    let window = "driver_unloaded = { from = 50, until = 70 }\n";
    let gpu = "[[gpu]]\nmemory_total = \"80GiB\"\n";
    let fx = Fixture::new(&format!("{window}{gpu}"), Some(60.0));
    assert!(matches!(fx.init(), Err(NvmlError::DriverNotLoaded)));

    // A session that outlives the driver: move time with the scenario's own clock.
    // SAFETY: the fixture holds the serialisation lock.
    unsafe { std::env::remove_var("FAKE_NVML_FREEZE") };
    fx.rewrite(&format!("{window}[clock]\nfreeze = 10\n{gpu}"));
    let nvml = fx.init().expect("init before the window");
    assert_eq!(nvml.device_count().expect("count"), 1);
    fx.rewrite(&format!("{window}[clock]\nfreeze = 55\n{gpu}"));
    assert!(matches!(nvml.device_count(), Err(NvmlError::Uninitialized)));
    fx.rewrite(&format!("{window}[clock]\nfreeze = 75\n{gpu}"));
    assert_eq!(nvml.device_count().expect("count after the window"), 1);
}

#[test]
fn no_scenario_and_bad_scenario() {
    let fx = Fixture::new("[[gpu]]\nmemory_total = \"80GiB\"\n", None);
    // SAFETY: the fixture holds the serialisation lock.
    unsafe { std::env::remove_var("FAKE_NVML_SCENARIO") };
    assert!(matches!(common::init(), Err(NvmlError::DriverNotLoaded)));
    let bad = fx.dir.path().join("bad.toml");
    std::fs::write(&bad, "[[gpu]]\nmemory_total = \"80 bananas\"\n").expect("write");
    unsafe { std::env::set_var("FAKE_NVML_SCENARIO", &bad) };
    assert!(matches!(common::init(), Err(NvmlError::Unknown)));
}

#[test]
fn mig_devices_list_and_memory() {
    let fx = Fixture::new(
        r#"
[[gpu]]
memory_total = "140GiB"
mig = "enabled"
[[gpu.mig_device]]
gpu_instance = 1
compute_instance = 0
memory_total = "18GiB"
[[gpu.mig_device]]
gpu_instance = 2
compute_instance = 0
memory_total = "35GiB"
[[gpu.process]]
pid = 10
used = "4GiB"
gpu_instance = 1
compute_instance = 0
[[gpu.process]]
pid = 11
used = "6GiB"
gpu_instance = 2
compute_instance = 0
"#,
        Some(1.0),
    );
    let nvml = fx.init().expect("init");
    let dev = nvml.device_by_index(0).expect("handle");
    let mode = dev.mig_mode().expect("mig mode");
    assert_eq!((mode.current, mode.pending), (1, 1));
    assert_eq!(dev.mig_device_count().expect("max"), 7);
    assert!(!dev.mig_is_mig_device_handle().expect("is mig"));

    let m0 = dev.mig_device_by_index(0).expect("mig 0");
    assert!(m0.mig_is_mig_device_handle().expect("is mig"));
    let mem = m0.memory_info().expect("mig memory");
    assert_eq!(
        (mem.total, mem.used, mem.free),
        (18 * GIB, 4 * GIB, 14 * GIB)
    );
    assert!(m0.uuid().expect("uuid").starts_with("MIG-"));
    assert!(m0.name().expect("name").contains("MIG"));
    assert_eq!(
        m0.mig_parent_device()
            .expect("parent")
            .uuid()
            .expect("uuid"),
        dev.uuid().expect("uuid")
    );
    let m1 = dev.mig_device_by_index(1).expect("mig 1");
    assert_eq!(m1.memory_info().expect("mig memory").used, 6 * GIB);
    assert!(matches!(
        dev.mig_device_by_index(2),
        Err(NvmlError::NotFound)
    ));

    // Processes on the whole GPU carry their instance ids; the MIG handle lists its own.
    let all = dev.running_compute_processes().expect("processes");
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].gpu_instance_id, Some(1));
    assert_eq!(all[0].compute_instance_id, Some(0));
    let on_m1 = m1.running_compute_processes().expect("mig processes");
    assert_eq!(on_m1.len(), 1);
    assert_eq!(on_m1[0].pid, 11);
    // Lookups by MIG uuid.
    let by_uuid = nvml
        .device_by_uuid(m1.uuid().expect("uuid"))
        .expect("by uuid");
    assert!(by_uuid.mig_is_mig_device_handle().expect("is mig"));
}

#[test]
fn epoch_and_speed_place_t() {
    let fx = Fixture::new(
        "[clock]\nspeed = 2\n[[gpu]]\nmemory_total = \"80GiB\"\nmemory_reserved = \"0\"\nbase_used = { linear = [[0, 0], [1000, \"1000MiB\"]] }\n",
        None,
    );
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    // t = (now - epoch) * speed = 100 s * 2 = 200 s: base_used = 200 MiB.
    // SAFETY: the fixture holds the serialisation lock.
    unsafe { std::env::set_var("FAKE_NVML_EPOCH", (wall - 100.0).to_string()) };
    let nvml = fx.init().expect("init");
    let used = nvml
        .device_by_index(0)
        .expect("handle")
        .memory_info()
        .expect("memory")
        .used;
    let mib = used as f64 / MIB as f64;
    assert!((199.0..=205.0).contains(&mib), "{mib} MiB");
    // FAKE_NVML_FREEZE wins over the clock.
    drop(nvml);
    unsafe { std::env::set_var("FAKE_NVML_FREEZE", "500") };
    let nvml = fx.init().expect("init");
    let used = nvml
        .device_by_index(0)
        .expect("handle")
        .memory_info()
        .expect("memory")
        .used;
    assert_eq!(used, 500 * MIB);
    unsafe { std::env::remove_var("FAKE_NVML_EPOCH") };
}
