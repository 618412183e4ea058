//! The C ABI directly: the process-list sizing protocol with `count = 0` and NULL.

mod common;

use common::{Fixture, Handle, Raw};

type ListFn = unsafe extern "C" fn(Handle, *mut u32, *mut u8) -> u32;

#[test]
fn sizing_protocol_with_zero_and_null() {
    let _fx = Fixture::new(
        r#"
[[gpu]]
memory_total = "80GiB"
[[gpu.process]]
pid = 7
used = "1GiB"
[[gpu.process]]
pid = 8
used = "2GiB"
[[gpu]]
memory_total = "80GiB"
"#,
        Some(1.0),
    );
    let raw = Raw::open();
    assert_eq!(raw.init(), 0);
    let busy = raw.handle(0);
    let idle = raw.handle(1);
    for symbol in [
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetComputeRunningProcesses_v3",
    ] {
        let f: ListFn = raw.sym(symbol);
        let mut count = 0u32;
        assert_eq!(
            unsafe { f(busy, &raw mut count, std::ptr::null_mut()) },
            7,
            "{symbol}"
        );
        assert_eq!(count, 2, "{symbol}");
        let mut count = 0u32;
        assert_eq!(
            unsafe { f(idle, &raw mut count, std::ptr::null_mut()) },
            0,
            "{symbol}"
        );
        assert_eq!(count, 0, "{symbol}");
        // NULL count: INVALID_ARGUMENT.
        assert_eq!(
            unsafe { f(busy, std::ptr::null_mut(), std::ptr::null_mut()) },
            2
        );
    }

    // v1 records are 16 bytes: pid, then usedGpuMemory at offset 8.
    let v1: ListFn = raw.sym("nvmlDeviceGetComputeRunningProcesses");
    let mut buf = [0u8; 16 * 4];
    let mut count = 4u32;
    assert_eq!(unsafe { v1(busy, &raw mut count, buf.as_mut_ptr()) }, 0);
    assert_eq!(count, 2);
    let pid1 = u32::from_ne_bytes(buf[16..20].try_into().expect("4 bytes"));
    let used1 = u64::from_ne_bytes(buf[24..32].try_into().expect("8 bytes"));
    assert_eq!((pid1, used1), (8, 2 << 30));

    // v3 records are 24 bytes with instance ids 0xFFFFFFFF off MIG.
    let v3: ListFn = raw.sym("nvmlDeviceGetComputeRunningProcesses_v3");
    let mut buf = [0u8; 24 * 4];
    let mut count = 4u32;
    assert_eq!(unsafe { v3(busy, &raw mut count, buf.as_mut_ptr()) }, 0);
    assert_eq!(count, 2);
    let pid1 = u32::from_ne_bytes(buf[24..28].try_into().expect("4 bytes"));
    let gi1 = u32::from_ne_bytes(buf[40..44].try_into().expect("4 bytes"));
    assert_eq!((pid1, gi1), (8, u32::MAX));

    // A buffer too small: INSUFFICIENT_SIZE with the count.
    let mut count = 1u32;
    assert_eq!(unsafe { v3(busy, &raw mut count, buf.as_mut_ptr()) }, 7);
    assert_eq!(count, 2);

    // Process utilisation sizing: the capacity (72), not the number of processes.
    let util: unsafe extern "C" fn(Handle, *mut u8, *mut u32, u64) -> u32 =
        raw.sym("nvmlDeviceGetProcessUtilization");
    let mut count = 0u32;
    assert_eq!(
        unsafe { util(busy, std::ptr::null_mut(), &raw mut count, 0) },
        7
    );
    assert_eq!(count, 72);
    let mut small = [0u8; 32 * 64];
    let mut count = 64u32;
    assert_eq!(
        unsafe { util(busy, small.as_mut_ptr(), &raw mut count, 0) },
        7
    );

    // Strings: too small a buffer is INSUFFICIENT_SIZE; the error strings are static.
    let name: unsafe extern "C" fn(Handle, *mut u8, u32) -> u32 = raw.sym("nvmlDeviceGetName");
    let mut tiny = [0u8; 4];
    assert_eq!(unsafe { name(busy, tiny.as_mut_ptr(), 4) }, 7);
    // A bad handle.
    let mut big = [0u8; 96];
    assert_eq!(
        unsafe { name(std::ptr::null_mut(), big.as_mut_ptr(), 96) },
        2
    );
    let err: unsafe extern "C" fn(u32) -> *const std::ffi::c_char = raw.sym("nvmlErrorString");
    let text = unsafe { std::ffi::CStr::from_ptr(err(15)) };
    assert_eq!(text.to_str().expect("utf-8"), "GPU is lost");
    assert_eq!(raw.shutdown(), 0);
}
