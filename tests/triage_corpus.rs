//! The triage corpus: one error text per file under `tests/fixtures/triage/`, each with its
//! expected class and every fact asserted exactly. Files ending in `-real.txt` are verbatim
//! output recorded on an H200 with PyTorch 2.11 / JAX (`../shared/data/h200/`); the others are
//! written from the wordings PyTorch 1.x–2.x, TensorFlow, JAX, `ROCm`, MPS and `CuPy` print.

use std::fmt::Write as _;
use std::path::Path;

use gpuwatch::triage::{
    Analysis, DeviceFacts, Failure, Framework, KnownFailure, OomFacts, ShapeFacts, ShapeKind,
    analyze,
};

const KI: u64 = 1 << 10;
const MI: u64 = 1 << 20;
const GI: u64 = 1 << 30;

/// A size printed with two decimals: `sz(5755, GI)` = 57.55 GiB, rounded to the byte.
fn sz(hundredths: u64, unit: u64) -> u64 {
    (hundredths * unit + 50) / 100
}

fn text(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/triage")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn run(name: &str) -> Analysis {
    analyze(&text(name))
}

fn oom(name: &str) -> OomFacts {
    match run(name).failure {
        Failure::OutOfMemory(f) => f,
        other => panic!("{name}: expected OutOfMemory, got {other:?}"),
    }
}

fn device(name: &str) -> DeviceFacts {
    match run(name).failure {
        Failure::DeviceMismatch(f) => f,
        other => panic!("{name}: expected DeviceMismatch, got {other:?}"),
    }
}

fn shape(name: &str) -> ShapeFacts {
    match run(name).failure {
        Failure::ShapeMismatch(f) => f,
        other => panic!("{name}: expected ShapeMismatch, got {other:?}"),
    }
}

fn known(name: &str) -> (KnownFailure, String) {
    match run(name).failure {
        Failure::Known(k, line) => (k, line),
        other => panic!("{name}: expected Known, got {other:?}"),
    }
}

fn facts(framework: Framework) -> OomFacts {
    OomFacts::empty(framework)
}

fn dev(devices: &[&str], argument: Option<&str>, operator: Option<&str>) -> DeviceFacts {
    DeviceFacts {
        devices: devices.iter().map(ToString::to_string).collect(),
        argument: argument.map(ToString::to_string),
        operator: operator.map(ToString::to_string),
    }
}

fn shp(kind: ShapeKind, shapes: &[&str], dims: &[u64], dim: Option<i64>) -> ShapeFacts {
    ShapeFacts {
        kind,
        shapes: shapes.iter().map(ToString::to_string).collect(),
        parameter: None,
        dims: dims.to_vec(),
        dim,
    }
}

// ---- PyTorch OOM, every wording ---------------------------------------------------------

#[test]
fn oom_torch_2_11_plain_real() {
    let a = run("oom-torch-2.11-plain-real.txt");
    let Failure::OutOfMemory(f) = &a.failure else {
        panic!("{a:?}")
    };
    let allocated = 100 * GI;
    assert_eq!(
        *f,
        OomFacts {
            gpu: Some(0),
            requested: Some(60 * GI),
            total: Some(sz(13980, GI)),
            free: Some(sz(3929, GI)),
            allocated: Some(allocated),
            reserved: Some(allocated),
            reserved_unallocated: Some(0),
            process_total: Some(sz(10051, GI)),
            ..facts(Framework::PyTorch)
        }
    );
    assert_eq!(
        a.traceback_hint.as_deref(),
        Some("File \"<string>\", line 1, in <module>")
    );
    assert_eq!(a.excerpt.len(), 1);
    assert!(a.excerpt[0].starts_with("torch.OutOfMemoryError: CUDA out of memory."));
}

#[test]
fn oom_torch_2_11_others_real() {
    assert_eq!(
        oom("oom-torch-2.11-others-real.txt"),
        OomFacts {
            gpu: Some(0),
            requested: Some(30 * GI),
            total: Some(sz(13980, GI)),
            free: Some(sz(1826, GI)),
            allocated: Some(70 * GI),
            reserved: Some(70 * GI),
            reserved_unallocated: Some(0),
            process_total: Some(sz(7051, GI)),
            processes: vec![(902, sz(2051, GI)), (901, sz(3051, GI))],
            ..facts(Framework::PyTorch)
        }
    );
}

#[test]
fn oom_torch_2_11_leak_real() {
    let a = run("oom-torch-2.11-leak-real.txt");
    let Failure::OutOfMemory(f) = &a.failure else {
        panic!("{a:?}")
    };
    let allocated = sz(11956, GI);
    let unallocated = sz(22487, MI);
    assert_eq!(
        *f,
        OomFacts {
            gpu: Some(0),
            requested: Some(256 * MI),
            total: Some(sz(13980, GI)),
            free: Some(sz(594, MI)),
            allocated: Some(allocated),
            reserved: Some(allocated + unallocated),
            reserved_unallocated: Some(unallocated),
            process_total: Some(sz(12051, GI)),
            processes: vec![(1014, sz(651, GI)), (1030, sz(1276, GI))],
            ..facts(Framework::PyTorch)
        }
    );
    assert_eq!(
        a.traceback_hint.as_deref(),
        Some("File \"<string>\", line 33, in <module>")
    );
}

#[test]
fn oom_torch_2_11_fragmentation_real() {
    let allocated = sz(8145, GI);
    let unallocated = sz(5755, GI);
    assert_eq!(unallocated, 61_793_841_971);
    assert_eq!(
        oom("oom-torch-2.11-fragmentation-real.txt"),
        OomFacts {
            gpu: Some(0),
            requested: Some(1024 * MI),
            total: Some(sz(13980, GI)),
            free: Some(sz(29312, MI)),
            allocated: Some(allocated),
            reserved: Some(allocated + unallocated),
            reserved_unallocated: Some(unallocated),
            process_total: Some(sz(13951, GI)),
            ..facts(Framework::PyTorch)
        }
    );
}

#[test]
fn oom_torch_2_11_expandable_real() {
    assert_eq!(
        oom("oom-torch-2.11-expandable-real.txt"),
        OomFacts {
            gpu: Some(0),
            requested: Some(1024 * MI),
            total: Some(sz(13980, GI)),
            free: Some(sz(101, GI)),
            allocated: Some(sz(13828, GI)),
            reserved: Some(sz(13828, GI)),
            reserved_unallocated: Some(0),
            process_total: Some(sz(13879, GI)),
            ..facts(Framework::PyTorch)
        }
    );
}

#[test]
fn oom_torch_1x_cached() {
    // PyTorch 1.0–1.3's "cached" is the cache alone (amount cached − amount allocated), what
    // 2.x calls "reserved by PyTorch but unallocated"; it was read as the reserved total.
    assert_eq!(
        oom("oom-torch-1.x-cached.txt"),
        OomFacts {
            gpu: Some(0),
            requested: Some(sz(1250, MI)),
            total: Some(sz(1092, GI)),
            free: Some(sz(928, GI)),
            allocated: Some(sz(857, MI)),
            // 1.0-1.3 "cached" is the cache alone, on top of what is allocated.
            reserved: Some(sz(857, MI) + sz(468, MI)),
            reserved_unallocated: Some(sz(468, MI)),
            ..facts(Framework::PyTorch)
        }
    );
}

#[test]
fn oom_torch_1x_reserved() {
    assert_eq!(
        oom("oom-torch-1.x-reserved.txt"),
        OomFacts {
            gpu: Some(0),
            requested: Some(20 * MI),
            total: Some(2 * GI),
            free: Some(0),
            allocated: Some(sz(110, GI)),
            reserved: Some(sz(114, GI)),
            reserved_unallocated: Some(sz(114, GI) - sz(110, GI)),
            ..facts(Framework::PyTorch)
        }
    );
}

#[test]
fn oom_torch_1x_allowed() {
    assert_eq!(
        oom("oom-torch-1.x-allowed.txt"),
        OomFacts {
            gpu: Some(0),
            requested: Some(64 * MI),
            total: Some(4 * GI),
            free: Some(0),
            allocated: Some(sz(220, GI)),
            reserved: Some(sz(226, GI)),
            reserved_unallocated: Some(sz(226, GI) - sz(220, GI)),
            allowed: Some(sz(221, GI)),
            ..facts(Framework::PyTorch)
        }
    );
}

#[test]
fn oom_torch_2_0_outofmemoryerror() {
    assert_eq!(
        oom("oom-torch-2.0-outofmemoryerror.txt"),
        OomFacts {
            gpu: Some(1),
            requested: Some(sz(150, GI)),
            total: Some(sz(2369, GI)),
            free: Some(sz(106, GI)),
            allocated: Some(sz(2043, GI)),
            reserved: Some(sz(2173, GI)),
            reserved_unallocated: Some(sz(2173, GI) - sz(2043, GI)),
            ..facts(Framework::PyTorch)
        }
    );
}

#[test]
fn oom_torch_2_1_capacty_typo_container() {
    // 2.1 misspelt "capacty"; in a container the process itself is listed as "Process N".
    let allocated = sz(7752, GI);
    assert_eq!(
        oom("oom-torch-2.1-container.txt"),
        OomFacts {
            gpu: Some(0),
            requested: Some(172 * MI),
            total: Some(sz(7915, GI)),
            free: Some(sz(925, MI)),
            allocated: Some(allocated),
            reserved: Some(allocated + sz(110, GI)),
            reserved_unallocated: Some(sz(110, GI)),
            processes: vec![(2315, sz(7913, GI))],
            ..facts(Framework::PyTorch)
        }
    );
}

#[test]
fn oom_torch_2_1_including() {
    let allocated = sz(1395, GI);
    assert_eq!(
        oom("oom-torch-2.1-including.txt"),
        OomFacts {
            gpu: Some(0),
            requested: Some(20 * MI),
            total: Some(sz(1475, GI)),
            free: Some(sz(306, MI)),
            allocated: Some(allocated),
            reserved: Some(allocated + sz(65993, MI)),
            reserved_unallocated: Some(sz(65993, MI)),
            process_total: Some(sz(1474, GI)),
            ..facts(Framework::PyTorch)
        }
    );
}

#[test]
fn oom_torch_private_pools() {
    let allocated = sz(7412, GI);
    assert_eq!(
        oom("oom-torch-private-pools.txt"),
        OomFacts {
            gpu: Some(3),
            requested: Some(2 * GI),
            total: Some(sz(7910, GI)),
            free: Some(sz(123, GI)),
            allocated: Some(allocated),
            reserved: Some(allocated + sz(224, GI)),
            reserved_unallocated: Some(sz(224, GI)),
            process_total: Some(sz(7786, GI)),
            ..facts(Framework::PyTorch)
        }
    );
}

#[test]
fn oom_wrapped_ansi_crlf() {
    // A logger wrapped the message over four lines, with colour codes and CRLF endings.
    let a = run("oom-wrapped-ansi-crlf.txt");
    let Failure::OutOfMemory(f) = &a.failure else {
        panic!("{a:?}")
    };
    let allocated = sz(6050, GI);
    assert_eq!(
        *f,
        OomFacts {
            gpu: Some(0),
            requested: Some(4 * GI),
            total: Some(sz(7919, GI)),
            free: Some(sz(281, GI)),
            allocated: Some(allocated),
            reserved: Some(allocated + sz(325, GI)),
            reserved_unallocated: Some(sz(325, GI)),
            process_total: Some(sz(6437, GI)),
            processes: vec![(4242, 12 * GI)],
            ..facts(Framework::PyTorch)
        }
    );
    assert_eq!(
        a.traceback_hint.as_deref(),
        Some("File \"/home/u/proj/train.py\", line 77, in train_step")
    );
    assert!(
        a.excerpt
            .iter()
            .all(|l| !l.contains('\x1b') && !l.contains('\r'))
    );
    assert_eq!(a.excerpt.len(), 4);
}

#[test]
fn oom_bare_cuda_error() {
    let a = run("oom-cuda-error-bare.txt");
    assert_eq!(a.failure, Failure::OutOfMemory(facts(Framework::PyTorch)));
    assert_eq!(
        a.excerpt,
        vec!["RuntimeError: CUDA error: out of memory".to_string()]
    );
}

#[test]
fn oom_cublas_and_cudnn() {
    assert_eq!(oom("oom-cublas-alloc-failed.txt"), facts(Framework::Cublas));
    assert_eq!(oom("oom-cudnn-not-allocated.txt"), facts(Framework::Cudnn));
}

#[test]
fn oom_chained_picks_the_original() {
    let a = run("oom-chained.txt");
    let Failure::OutOfMemory(f) = &a.failure else {
        panic!("{a:?}")
    };
    assert_eq!(f.requested, Some(8 * GI));
    assert_eq!(f.total, Some(sz(2364, GI)));
    assert_eq!(f.free, Some(sz(612, GI)));
    assert_eq!(f.process_total, Some(sz(1751, GI)));
    assert_eq!(f.allocated, Some(sz(1690, GI)));
    assert_eq!(f.reserved_unallocated, Some(sz(14521, MI)));
    assert_eq!(
        a.traceback_hint.as_deref(),
        Some("File \"bench.py\", line 9, in run")
    );
}

#[test]
fn oom_torchrun_beats_the_watchdog_and_child_failed() {
    let a = run("oom-torchrun-then-timeout.txt");
    let Failure::OutOfMemory(f) = &a.failure else {
        panic!("{a:?}")
    };
    let allocated = sz(3791, GI);
    assert_eq!(
        *f,
        OomFacts {
            gpu: Some(1),
            requested: Some(512 * MI),
            total: Some(sz(3938, GI)),
            free: Some(sz(30138, MI)),
            allocated: Some(allocated),
            reserved: Some(allocated + sz(63332, MI)),
            reserved_unallocated: Some(sz(63332, MI)),
            process_total: Some(sz(3907, GI)),
            ..facts(Framework::PyTorch)
        }
    );
    // The "[rank1]: " prefix does not hide the frames.
    assert_eq!(
        a.traceback_hint.as_deref(),
        Some("File \"/workspace/train.py\", line 118, in main")
    );
}

// ---- other frameworks ------------------------------------------------------------------

#[test]
fn oom_jax_real() {
    let a = run("oom-jax-real.txt");
    assert_eq!(
        a.failure,
        Failure::OutOfMemory(OomFacts {
            gpu: Some(0),
            requested: Some(322_122_547_200),
            ..facts(Framework::Jax)
        })
    );
    assert!(a.excerpt[0].starts_with("jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED"));
}

#[test]
fn oom_jax_variants() {
    assert_eq!(
        oom("oom-jax-request-bytes.txt"),
        OomFacts {
            gpu: Some(1),
            requested: Some(3_221_225_472),
            ..facts(Framework::Jax)
        }
    );
    assert_eq!(
        oom("oom-jax-old.txt"),
        OomFacts {
            requested: Some(sz(250, GI)),
            ..facts(Framework::Jax)
        }
    );
}

#[test]
fn oom_tensorflow() {
    // shape[32,1024,1024] float = 32 × 1024 × 1024 × 4 bytes.
    assert_eq!(
        oom("oom-tf-shape.txt"),
        OomFacts {
            gpu: Some(0),
            requested: Some(32 * 1024 * 1024 * 4),
            ..facts(Framework::TensorFlow)
        }
    );
    // The BFC allocator's statistics fill the limit and what was in use.
    assert_eq!(
        oom("oom-tf-bfc-stats.txt"),
        OomFacts {
            gpu: Some(0),
            requested: Some(1_258_291_200),
            limit: Some(10_508_668_928),
            allocated: Some(9_873_321_984),
            ..facts(Framework::TensorFlow)
        }
    );
    assert_eq!(
        oom("oom-tf-cuda-driver.txt"),
        OomFacts {
            requested: Some(4_046_333_952),
            ..facts(Framework::TensorFlow)
        }
    );
}

#[test]
fn oom_rocm_mps_cupy() {
    let allocated = sz(6012, GI);
    assert_eq!(
        oom("oom-rocm.txt"),
        OomFacts {
            gpu: Some(0),
            requested: Some(2 * GI),
            total: Some(sz(6398, GI)),
            free: Some(sz(105, GI)),
            allocated: Some(allocated),
            reserved: Some(allocated + sz(131, GI)),
            reserved_unallocated: Some(sz(131, GI)),
            ..facts(Framework::Rocm)
        }
    );
    assert_eq!(
        oom("oom-rocm-old.txt"),
        OomFacts {
            gpu: Some(0),
            requested: Some(2 * MI),
            total: Some(sz(1598, GI)),
            free: Some(0),
            allocated: Some(sz(1577, GI)),
            reserved: Some(sz(1585, GI)),
            reserved_unallocated: Some(sz(1585, GI) - sz(1577, GI)),
            ..facts(Framework::Rocm)
        }
    );
    // MPS prints binary sizes labelled GB/MB/KB.
    assert_eq!(
        oom("oom-mps.txt"),
        OomFacts {
            requested: Some(1024 * KI),
            allowed: Some(sz(1813, GI)),
            allocated: Some(sz(1811, GI)),
            // MPS allocated + other allocations: what this process holds.
            process_total: Some(sz(1811, GI) + sz(252, MI)),
            ..facts(Framework::Mps)
        }
    );
    assert_eq!(
        oom("oom-cupy.txt"),
        OomFacts {
            requested: Some(1_073_741_824),
            // What CuPy's pool holds (cupy/cuda/memory.pyx), used and cached blocks.
            reserved: Some(4_294_967_296),
            ..facts(Framework::Other)
        }
    );
}

// ---- device mismatch -------------------------------------------------------------------

#[test]
fn device_real() {
    assert_eq!(
        device("device-add-real.txt"),
        dev(&["cuda:0", "cpu"], None, None)
    );
    assert_eq!(
        device("device-linear-real.txt"),
        dev(&["cpu", "cuda:0"], Some("mat1"), Some("wrapper_CUDA_addmm"))
    );
    assert_eq!(
        device("device-index-real.txt"),
        dev(
            &["cpu", "cuda:0"],
            Some("index"),
            Some("wrapper_CUDA__index_select")
        )
    );
    assert_eq!(
        device("device-loss-target-real.txt"),
        dev(
            &["cpu", "cuda:0"],
            Some("target"),
            Some("wrapper_CUDA_nll_loss_forward")
        )
    );
}

#[test]
fn device_older_wordings() {
    assert_eq!(
        device("device-input-type.txt"),
        dev(&["cuda", "cpu"], Some("weight"), None)
    );
    assert_eq!(
        device("device-two-cuda-old.txt"),
        dev(&["cuda:1", "cuda:0"], Some("mat1"), Some("wrapper_addmm"))
    );
    assert_eq!(
        device("device-object-type-old.txt"),
        dev(&["cuda", "cpu"], Some("self"), Some("_th_addmm"))
    );
    assert_eq!(
        device("device-rnn-hidden.txt"),
        dev(&["cuda:0", "cpu"], Some("hidden"), None)
    );
    assert_eq!(
        device("device-while-checking.txt"),
        dev(&["cpu", "cuda"], Some("mat1"), Some("addmm"))
    );
}

// ---- shape mismatch --------------------------------------------------------------------

#[test]
fn shape_real() {
    use ShapeKind as K;
    assert_eq!(
        shape("shape-matmul-real.txt"),
        shp(K::Matmul, &["64x256", "512x10"], &[256, 512], None)
    );
    assert_eq!(
        shape("shape-batch-real.txt"),
        shp(K::BatchSize, &[], &[64, 32], None)
    );
    assert_eq!(shape("shape-cat-real.txt"), shp(K::Cat, &[], &[3, 4], None));
    assert_eq!(
        shape("shape-broadcast-real.txt"),
        shp(K::Broadcast, &[], &[5, 6], Some(1))
    );
    assert_eq!(
        shape("shape-view-real.txt"),
        shp(K::View, &["[3, 7]"], &[20], None)
    );
    assert_eq!(
        shape("shape-conv-channels-real.txt"),
        shp(
            K::ConvChannels,
            &["[8, 3, 3, 3]", "[1, 1, 8, 8]"],
            &[3, 1],
            None
        )
    );
}

#[test]
fn shape_wordings() {
    use ShapeKind as K;
    assert_eq!(
        shape("shape-matmul.txt"),
        shp(K::Matmul, &["64x9216", "4608x128"], &[9216, 4608], None)
    );
    assert_eq!(
        shape("shape-matmul-old.txt"),
        shp(K::Matmul, &["64x9216", "4608x128"], &[9216, 4608], None)
    );
    assert_eq!(
        shape("shape-batch.txt"),
        shp(K::BatchSize, &[], &[32, 64], None)
    );
    assert_eq!(shape("shape-cat.txt"), shp(K::Cat, &[], &[3, 4], None));
    assert_eq!(
        shape("shape-cat-old.txt"),
        shp(K::Cat, &[], &[3, 4], Some(1))
    );
    assert_eq!(
        shape("shape-broadcast.txt"),
        shp(K::Broadcast, &[], &[3, 4], Some(1))
    );
    assert_eq!(
        shape("shape-view.txt"),
        shp(K::View, &["[-1, 400]"], &[1000], None)
    );
    assert_eq!(shape("shape-view-stride.txt"), shp(K::View, &[], &[], None));
    assert_eq!(
        shape("shape-conv-channels.txt"),
        shp(
            K::ConvChannels,
            &["[64, 3, 7, 7]", "[1, 4, 224, 224]"],
            &[3, 4],
            None
        )
    );
    assert_eq!(
        shape("shape-stack.txt"),
        shp(K::Cat, &["[3, 224, 224]", "[1, 224, 224]"], &[], None)
    );
    assert_eq!(
        shape("shape-conv-rank.txt"),
        shp(K::ConvRank, &["[64, 1, 1, 28, 28]"], &[3, 4], None)
    );
    let mut sd = shp(K::StateDict, &["[10, 512]", "[1000, 512]"], &[], None);
    sd.parameter = Some("fc.weight".to_string());
    assert_eq!(shape("shape-state-dict.txt"), sd);
}

// ---- known failures --------------------------------------------------------------------

#[test]
fn known_failures() {
    use KnownFailure as K;
    let cases = [
        ("known-illegal-memory-access.txt", K::IllegalMemoryAccess),
        ("known-nccl-timeout.txt", K::NcclTimeout),
        ("known-no-driver.txt", K::NoGpu),
        ("known-no-gpus.txt", K::NoGpu),
        ("known-driver-too-old.txt", K::DriverTooOld),
        ("known-no-kernel-image.txt", K::NoKernelImage),
        ("known-ecc.txt", K::EccError),
        ("known-cudnn-internal.txt", K::CudnnError),
        ("known-dtype.txt", K::DtypeMismatch),
        ("known-host-oom.txt", K::HostOutOfMemory),
    ];
    // NCCL's own last error names the root cause: its shared memory segment (NVIDIA/nccl
    // src/misc/shmutils.cc), the same fix as a DataLoader's /dev/shm.
    let (k, line) = known("known-nccl-error.txt");
    assert_eq!(k, K::SharedMemory);
    assert!(
        line.starts_with("Error while creating shared memory segment"),
        "{line}"
    );
    for (name, kind) in cases {
        let (k, line) = known(name);
        assert_eq!(k, kind, "{name}");
        assert_eq!(
            line,
            text(name).lines().next().unwrap_or_default().trim(),
            "{name}"
        );
    }
}

#[test]
fn device_side_assert_beats_the_later_illegal_access() {
    let a = run("known-device-assert.txt");
    assert_eq!(
        a.failure,
        Failure::Known(
            KnownFailure::DeviceSideAssert,
            "RuntimeError: CUDA error: device-side assert triggered".to_string()
        )
    );
    assert_eq!(
        a.assertion.as_deref(),
        Some(
            "../aten/src/ATen/native/cuda/Loss.cu:240: nll_loss_forward_reduce_cuda_kernel_2d: \
             block: [0,0,0], thread: [5,0,0] Assertion `t >= 0 && t < n_classes` failed."
        )
    );
    assert_eq!(
        a.traceback_hint.as_deref(),
        Some("File \"train.py\", line 55, in <module>")
    );
}

#[test]
fn unknown_is_a_logic_bug_with_its_frame() {
    let a = run("unknown-keyerror.txt");
    assert_eq!(a.failure, Failure::Unknown);
    assert_eq!(a.excerpt, vec!["KeyError: 'label'".to_string()]);
    assert_eq!(
        a.traceback_hint.as_deref(),
        Some("File \"/home/u/proj/data.py\", line 10, in __getitem__")
    );
}

#[test]
fn unknown_keeps_the_root_of_a_chain_and_skips_the_agent() {
    let chained = "Traceback (most recent call last):\n  File \"a.py\", line 3, in f\n    \
                   d[k]\nKeyError: 'x'\n\nDuring handling of the above exception, another \
                   exception occurred:\n\nTraceback (most recent call last):\n  File \"a.py\", \
                   line 5, in <module>\n    f()\nValueError: lookup failed\n";
    let a = analyze(chained);
    assert_eq!(a.failure, Failure::Unknown);
    assert_eq!(a.excerpt, vec!["KeyError: 'x'".to_string()]);
    assert_eq!(
        a.traceback_hint.as_deref(),
        Some("File \"a.py\", line 3, in f")
    );
    let torchrun = "[rank0]: Traceback (most recent call last):\n[rank0]:   File \"t.py\", line 9, \
                    in <module>\n[rank0]: AssertionError: bad config\nE1129 api.py:869] failed \
                    (exitcode: 1)\ntorch.distributed.elastic.multiprocessing.errors.\
                    ChildFailedError: \n";
    let a = analyze(torchrun);
    assert_eq!(a.excerpt, vec!["AssertionError: bad config".to_string()]);
    assert_eq!(
        a.traceback_hint.as_deref(),
        Some("File \"t.py\", line 9, in <module>")
    );
    // A frame from an earlier traceback does not stick to an error printed much later.
    let mut late = String::from(chained);
    for i in 0..20 {
        let _ = writeln!(late, "step {i}");
    }
    late.push_str("RuntimeError: CUDA error: an illegal memory access was encountered\n");
    assert_eq!(analyze(&late).traceback_hint, None);
}

#[test]
fn nccl_duplicate_gpu_names_the_cause() {
    let text = "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/\
                NCCLUtils.hpp:219, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL \
                version 2.19.3\nncclInvalidUsage: This usually reflects invalid usage of NCCL \
                library.\nLast error:\nDuplicate GPU detected : rank 1 and rank 0 both on CUDA \
                device 1000\n";
    let a = analyze(text);
    assert!(
        matches!(&a.failure, Failure::Known(KnownFailure::NcclError, l) if l.starts_with("Duplicate GPU")),
        "{:?}",
        a.failure
    );
    let d = diagnose(&a, None);
    assert!(
        d.fixes[0]
            .detail
            .contains("torch.cuda.set_device(local_rank)")
    );
}

#[test]
fn pytest_failure_lines_are_exceptions() {
    let a = analyze("    def test_step():\n>       step()\nE       KeyError: 'label'\n");
    assert_eq!(a.failure, Failure::Unknown);
    assert_eq!(a.excerpt, vec!["E       KeyError: 'label'".to_string()]);
}

#[test]
fn wrapped_jax_oom_reads_the_next_line() {
    let a = analyze(
        "[1] 2019-06-13 01:17:08.886805: E external/org_tensorflow/tensorflow/compiler/xla/python/\
         local_client.cc:672] Execution of replica 0 failed: Resource exhausted: Out \nof memory \
         while trying to allocate 5520758552 bytes.\n",
    );
    let Failure::OutOfMemory(f) = a.failure else {
        panic!("{a:?}")
    };
    assert_eq!(f.requested, Some(5_520_758_552));
    assert_eq!(f.framework, Framework::Jax);
}

#[test]
fn scanner_accepts_several_lines_per_push() {
    let text = text("oom-torch-2.11-leak-real.txt");
    let mut scanner = Scanner::new();
    scanner.push_line(&text);
    assert_eq!(scanner.finish(), analyze(&text));
}

#[test]
fn every_fixture_is_asserted() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/triage");
    let this = include_str!("triage_corpus.rs");
    let mut count = 0;
    for entry in std::fs::read_dir(dir).expect("fixtures dir") {
        let entry = entry.expect("entry");
        if entry.path().is_dir() {
            continue; // public/: asserted by tests/triage_public.rs
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        assert!(
            this.contains(&format!("\"{name}\"")),
            "{name} is not asserted"
        );
        count += 1;
    }
    assert!(count >= 40, "only {count} fixtures");
}

#[test]
#[ignore = "prints diagnoses; run by hand"]
fn dump_diagnoses() {
    for name in [
        "oom-torch-2.11-others-real.txt",
        "oom-torch-2.11-fragmentation-real.txt",
        "oom-torch-2.11-leak-real.txt",
        "oom-torch-2.11-plain-real.txt",
        "oom-cuda-error-bare.txt",
        "oom-torch-2.1-container.txt",
        "device-linear-real.txt",
        "shape-matmul.txt",
        "known-device-assert.txt",
        "unknown-keyerror.txt",
        "shape-state-dict.txt",
        "shape-batch-real.txt",
        "known-nccl-timeout.txt",
        "oom-jax-real.txt",
    ] {
        let d = gpuwatch::triage::diagnose(&run(name), None);
        println!(
            "==== {name} {:?}\n{}",
            d.case,
            gpuwatch::triage::render_text(&d)
        );
    }
}

// ---- diagnosis ------------------------------------------------------------------------

use gpuwatch::triage::{Case, Context, GpuView, ProcView, Scanner, diagnose, render_text};

fn proc(pid: u32, bytes: u64, user: &str, command: &str, is_job: bool) -> ProcView {
    ProcView {
        pid,
        bytes,
        user: Some(user.to_string()),
        command: Some(command.to_string()),
        is_job,
    }
}

fn h200(index: u32, used: u64, processes: Vec<ProcView>) -> GpuView {
    GpuView {
        index,
        uuid: format!("GPU-0000000{index}-1111-2222-3333-444444444444"),
        pci_bus_id: Some(format!("00000000:{:02X}:00.0", 0x18 + index * 0x10)),
        name: "NVIDIA H200".to_string(),
        total: sz(13980, GI),
        used,
        free: sz(13980, GI).saturating_sub(used),
        processes,
    }
}

fn all_fix_text(d: &gpuwatch::triage::Diagnosis) -> String {
    let mut s = String::new();
    for f in &d.fixes {
        let _ = writeln!(s, "{}\n{}", f.title, f.detail);
    }
    s
}

#[test]
fn diagnose_external_pressure_names_the_pid_and_the_gpu_with_room() {
    let a = run("oom-torch-2.11-others-real.txt");
    let ctx = Context {
        job_pids: vec![941],
        gpus: vec![
            h200(
                0,
                sz(13980, GI) - sz(1826, GI),
                vec![
                    proc(941, sz(7051, GI), "me", "python train.py", true),
                    proc(901, sz(3051, GI), "alice", "python hold.py --big", false),
                    proc(902, sz(2051, GI), "bob", "python hold.py", false),
                ],
            ),
            h200(1, 130 * GI, vec![]),
            h200(2, 20 * GI, vec![]),
        ],
        ..Context::default()
    };
    let d = diagnose(&a, Some(&ctx));
    assert_eq!(d.case, Case::ExternalPressure);
    assert_eq!(d.nvml_gpu, Some(0));
    assert!(d.headline.contains("pid 901"), "{}", d.headline);
    assert!(d.headline.contains("pid 902"), "{}", d.headline);
    assert!(d.headline.contains("51.02 GiB"), "{}", d.headline);
    assert_eq!(d.fixes[0].title, "Use GPU 2: it has 119.80 GiB free");
    assert!(
        d.fixes[0]
            .detail
            .contains("CUDA_VISIBLE_DEVICES=GPU-00000002")
    );
    assert!(
        d.fixes[1]
            .detail
            .contains("user alice: python hold.py --big")
    );
    assert!(!all_fix_text(&d).contains("expandable_segments"));
    // From the text alone: the same case, with `gpuwatch pick` instead of a named GPU.
    let d = diagnose(&a, None);
    assert_eq!(d.case, Case::ExternalPressure);
    assert!(d.fixes[0].detail.contains("gpuwatch pick --min-free"));
}

#[test]
fn diagnose_fragmentation_real() {
    let d = diagnose(&run("oom-torch-2.11-fragmentation-real.txt"), None);
    assert_eq!(d.case, Case::Fragmentation);
    assert!(d.headline.contains("57.55 GiB"), "{}", d.headline);
    assert!(
        d.fixes[0]
            .detail
            .contains("PYTORCH_ALLOC_CONF=expandable_segments:True")
    );
    assert!(d.fixes[0].detail.contains("PYTORCH_CUDA_ALLOC_CONF"));
    // The same workload with expandable segments: 0 bytes unallocated, no fragmentation.
    let d = diagnose(&run("oom-torch-2.11-expandable-real.txt"), None);
    assert_eq!(d.case, Case::OwnTensors);
    assert!(!all_fix_text(&d).contains("expandable_segments"));
}

#[test]
fn diagnose_own_tensors_with_batch_estimates_a_smaller_batch() {
    let a = run("oom-torch-2.11-plain-real.txt");
    let ctx = Context {
        job_pids: vec![77],
        batch_size: Some(64),
        gpus: vec![h200(
            0,
            sz(10051, GI),
            vec![proc(77, sz(10051, GI), "me", "python train.py", true)],
        )],
        ..Context::default()
    };
    let d = diagnose(&a, Some(&ctx));
    assert_eq!(d.case, Case::OwnTensors);
    // ⌊64 × 0.9 × (139.80 − 0.51 overhead) ÷ (100.00 + 60.00 + 0.51)⌋ = ⌊49.98⌋
    assert_eq!(d.suggested_batch, Some(49));
    assert_eq!(d.fixes[0].title, "Reduce the per-device batch to 49");
    assert!(
        d.fixes[1]
            .detail
            .contains("Accumulate 2 steps of 49 for an effective batch of 98")
    );
    assert!(d.fixes[2].title.contains("mixed precision"));
    assert!(d.fixes[3].title.contains("checkpointing"));
    assert!(!all_fix_text(&d).contains("expandable_segments"));
    assert!(
        !all_fix_text(&d).contains("empty_cache"),
        "nothing is cached here"
    );
}

#[test]
fn diagnose_own_tensors_without_batch() {
    let d = diagnose(&run("oom-torch-2.11-leak-real.txt"), None);
    assert_eq!(d.case, Case::OwnTensors, "{}", d.headline);
    assert_eq!(d.suggested_batch, None);
    assert_eq!(d.fixes[0].title, "Reduce the per-device batch");
    assert!(all_fix_text(&d).contains("leak"));
    assert!(!all_fix_text(&d).contains("expandable_segments"));
    // The other two processes are named as facts, but they are not the cause.
    assert!(d.facts.iter().any(|f| f.contains("pid 1030 (12.76 GiB)")));
}

#[test]
fn diagnose_small_cache_is_not_fragmentation() {
    // 40 MiB cached next to a 20 MiB request on a 2 GiB GPU: not what expandable segments fix;
    // 0.86 GiB was held outside PyTorch.
    let d = diagnose(&run("oom-torch-1.x-reserved.txt"), None);
    assert_eq!(d.case, Case::OwnTensors, "{}", d.headline);
    assert!(!all_fix_text(&d).contains("expandable_segments"));
    assert_eq!(d.fixes[0].title, "Check what else holds the GPU");
    assert!(
        d.facts
            .iter()
            .any(|f| f.starts_with("880.64 MiB of the GPU was held outside")),
        "{:?}",
        d.facts
    );
}

#[test]
fn diagnose_fragmentation_needs_the_request_to_fit_a_compacted_cache() {
    // 9.35 GiB cached + 12.73 GiB free < 22.78 GiB asked: compaction would not have helped.
    let big = analyze(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB. GPU 0 has a \
         total capacity of 31.47 GiB of which 12.73 GiB is free. Including non-PyTorch memory, \
         this process has 18.73 GiB memory in use. Of the allocated memory 9.08 GiB is \
         allocated by PyTorch, and 9.35 GiB is reserved by PyTorch but unallocated.",
    );
    assert_eq!(diagnose(&big, None).case, Case::OwnTensors);
    // 0 bytes free, 2.30 GiB cached, 1.70 GiB asked: fragmentation.
    let frag = analyze(
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.70 GiB. GPU 0 has \
         a total capacty of 6.00 GiB of which 0 bytes is free. Of the allocated memory 2.93 GiB \
         is allocated by PyTorch, and 2.30 GiB is reserved by PyTorch but unallocated.",
    );
    assert_eq!(diagnose(&frag, None).case, Case::Fragmentation);
    // A partial paste without the "CUDA out of memory" head is still an OOM.
    let partial = analyze(
        "Tried to allocate 20.00 MiB (GPU 0; 1.96 GiB total capacity; 1.24 GiB already \
         allocated; 2.88 MiB free; 1.25 GiB reserved in total by PyTorch)",
    );
    let Failure::OutOfMemory(f) = partial.failure else {
        panic!("{partial:?}")
    };
    assert_eq!(f.total, Some(sz(196, GI)));
    assert_eq!(f.free, Some(sz(288, MI)));
}

#[test]
fn diagnose_bare_oom_says_what_is_unknown() {
    let d = diagnose(&run("oom-cuda-error-bare.txt"), None);
    assert_eq!(d.case, Case::OutOfMemoryUnclear);
    assert!(d.facts.iter().any(|f| f.starts_with("unknown:")));
    assert!(d.fixes[0].detail.contains("gpuwatch run"));
}

#[test]
fn diagnose_container_pid_is_the_job() {
    // Inside a container PyTorch printed its own process as "Process 2315".
    let a = run("oom-torch-2.1-container.txt");
    let ctx = Context {
        job_pids: vec![41],
        gpus: vec![GpuView {
            total: sz(7915, GI),
            free: sz(2, GI),
            ..h200(
                0,
                sz(7913, GI),
                vec![proc(41, sz(7913, GI), "me", "python train.py", true)],
            )
        }],
        ..Context::default()
    };
    for d in [diagnose(&a, Some(&ctx)), diagnose(&a, None)] {
        assert_ne!(d.case, Case::ExternalPressure, "{}", d.headline);
        assert!(
            d.facts
                .iter()
                .any(|f| f.starts_with("Process 2315 in the message")),
            "{:?}",
            d.facts
        );
    }
    // With a context whose job pid matches nothing and whose memory differs, 2315 is external.
    let ctx = Context {
        job_pids: vec![41],
        gpus: vec![h200(
            0,
            sz(7913, GI),
            vec![proc(41, GI, "me", "python train.py", true)],
        )],
        ..Context::default()
    };
    let d = diagnose(&a, Some(&ctx));
    assert_eq!(d.case, Case::ExternalPressure, "{}", d.headline);
}

#[test]
fn diagnose_unattributed_memory_is_external() {
    // Another container held 60 GiB that no process visible here accounts for.
    let a = analyze(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a \
         total capacity of 139.80 GiB of which 9.29 GiB is free. Including non-PyTorch memory, \
         this process has 70.51 GiB memory in use. Of the allocated memory 70.00 GiB is \
         allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.",
    );
    let job = sz(7051, GI);
    let ctx = Context {
        job_pids: vec![77],
        gpus: vec![
            h200(
                0,
                job + 60 * GI,
                vec![proc(77, job, "me", "python train.py", true)],
            ),
            h200(1, GI, vec![]),
        ],
        cuda_visible_devices: Some("0".to_string()),
        ..Context::default()
    };
    let d = diagnose(&a, Some(&ctx));
    assert_eq!(d.case, Case::ExternalPressure, "{}", d.headline);
    assert!(
        d.headline.contains("60.00 GiB unattributed"),
        "{}",
        d.headline
    );
    assert_eq!(d.fixes[0].title, "Use GPU 1: it has 138.80 GiB free");
}

#[test]
fn diagnose_device_mismatch_checklist() {
    let d = diagnose(&run("device-linear-real.txt"), None);
    assert_eq!(d.case, Case::DeviceMismatch);
    assert!(d.headline.contains("`mat1`"));
    assert!(d.fixes[0].title.contains("cuda:0"));
    let list = &d.fixes[1].detail;
    for item in [
        "model.to(device)",
        "every batch",
        "inside forward",
        "targets",
    ] {
        assert!(list.contains(item), "{item} missing from {list}");
    }
    let d = diagnose(&run("device-input-type.txt"), None);
    assert_eq!(d.fixes[0].title, "Move the model to the GPU");
}

#[test]
fn diagnose_shape_in_features() {
    let d = diagnose(&run("shape-matmul.txt"), None);
    assert_eq!(d.case, Case::ShapeMismatch);
    assert!(
        d.headline
            .contains("expects in_features=4608 but gets 9216"),
        "{}",
        d.headline
    );
    assert!(d.fixes[0].detail.contains("nn.Linear(9216, 128)"));
    assert!(d.fixes.iter().any(|f| f.title.contains("Print the shapes")));
}

/// Every text of the corpus: the written and recorded ones, and the public ones
/// (`public/{tune,holdout}/`, header included).
fn fixture_paths() -> Vec<std::path::PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/triage");
    let mut out = Vec::new();
    for dir in [
        root.clone(),
        root.join("public/tune"),
        root.join("public/holdout"),
    ] {
        for entry in std::fs::read_dir(dir).expect("fixtures dir") {
            let path = entry.expect("entry").path();
            if path.is_file() {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_fixture_diagnoses_and_renders() {
    for path in fixture_paths() {
        let a = analyze(&std::fs::read_to_string(&path).expect("read"));
        let d = diagnose(&a, None);
        assert!(!d.headline.is_empty(), "{}", path.display());
        assert!(!d.fixes.is_empty(), "{}", path.display());
        let text = render_text(&d);
        // Only a single unbreakable token (a URL, a path) may run past the width.
        assert!(
            text.lines()
                .all(|l| l.chars().count() <= 100 || !l.trim().contains(' ')),
            "{}:\n{text}",
            path.display()
        );
        assert!(serde_json::to_string(&d).is_ok());
    }
}

// ---- streaming and robustness ----------------------------------------------------------

#[test]
fn scanner_streams_a_large_log_in_bounded_memory() {
    // 100 MiB runs in the bench (`benches/triage.rs`); unoptimised regex makes debug builds slow.
    const MIB: usize = 6;
    let mut scanner = Scanner::new();
    let mut pushed = 0usize;
    let mut line = String::with_capacity(256);
    let mut i = 0u64;
    let mut max_retained = 0;
    while pushed < MIB << 20 {
        line.clear();
        let _ = match i % 8 {
            0 => write!(
                line,
                "step {i} loss=0.{i} cuda mem alloc=61.22GiB reserved=64.00GiB"
            ),
            1 => write!(
                line,
                "\x1b[33mWARNING\x1b[0m size of batch {i} is odd; dimension ok"
            ),
            2 => write!(
                line,
                "  File \"/opt/venv/lib/python3.12/site-packages/x.py\", line {i}, in f"
            ),
            3 => write!(line, "ValueError: bad sample {i}\r"),
            4 => write!(line, "{}", "x".repeat(200)),
            _ => write!(line, "epoch 1 step {i} tokens/s=48211 lr=3e-4"),
        };
        scanner.push_line(&line);
        pushed += line.len() + 1;
        i += 1;
        if i.is_multiple_of(4096) {
            max_retained = max_retained.max(scanner.retained_bytes());
        }
    }
    scanner.push_line("Traceback (most recent call last):");
    scanner.push_line("  File \"train.py\", line 42, in <module>");
    scanner.push_line(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB. GPU 0 has a \
         total capacity of 139.80 GiB of which 5.94 MiB is free.",
    );
    max_retained = max_retained.max(scanner.retained_bytes());
    assert!(
        max_retained <= gpuwatch::triage::SCANNER_BOUND,
        "{max_retained}"
    );
    let a = scanner.finish();
    let Failure::OutOfMemory(f) = a.failure else {
        panic!("{:?}", a.failure)
    };
    assert_eq!(f.requested, Some(256 * MI));
    assert_eq!(
        a.traceback_hint.as_deref(),
        Some("File \"train.py\", line 42, in <module>")
    );
}

#[test]
fn very_long_lines_are_capped() {
    let long = format!(
        "{}CUDA out of memory. Tried to allocate 1.00 GiB.",
        "a".repeat(200_000)
    );
    let a = analyze(&long);
    assert_eq!(
        a.failure,
        Failure::Unknown,
        "the message is past the 64 KiB looked at"
    );
    let mut scanner = Scanner::new();
    scanner.push_line(&format!(
        "RuntimeError: CUDA error: out of memory {}",
        "é".repeat(100_000)
    ));
    assert!(scanner.retained_bytes() <= gpuwatch::triage::SCANNER_BOUND);
    assert!(matches!(scanner.finish().failure, Failure::OutOfMemory(_)));
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn fixtures() -> Vec<String> {
        let mut v: Vec<String> = super::fixture_paths()
            .iter()
            .map(|p| std::fs::read_to_string(p).expect("read"))
            .collect();
        v.sort();
        v
    }

    fn check(text: &str) {
        let a = analyze(text);
        let d = diagnose(&a, None);
        let _ = render_text(&d);
        let ctx = Context {
            job_pids: vec![1, 2315],
            cuda_visible_devices: Some("1,0".to_string()),
            batch_size: Some(7),
            gpus: vec![
                h200(0, GI, vec![]),
                h200(1, 2 * GI, vec![proc(1, GI, "u", "c", true)]),
            ],
            ..Context::default()
        };
        let _ = render_text(&diagnose(&a, Some(&ctx)));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn arbitrary_text_never_panics(s in any::<String>()) {
            check(&s);
        }

        #[test]
        fn mutated_corpus_never_panics(
            pick in any::<prop::sample::Index>(),
            edits in prop::collection::vec((any::<prop::sample::Index>(), "\\PC{0,12}|[0-9.,;() ]{0,8}", 0usize..40), 0..8),
        ) {
            let all = fixtures();
            let mut text = all[pick.index(all.len())].clone();
            for (at, insert, delete) in edits {
                let mut i = at.index(text.len() + 1);
                while !text.is_char_boundary(i) { i -= 1; }
                let mut j = (i + delete).min(text.len());
                while !text.is_char_boundary(j) { j -= 1; }
                text.replace_range(i..j, &insert);
            }
            check(&text);
        }
    }
}

// ---- wordings seen in public bug reports, one line each --------------------------------

#[test]
#[allow(clippy::too_many_lines)]
fn real_world_variants_classify() {
    use KnownFailure as K;
    #[derive(Debug)]
    enum Want {
        Oom(Framework),
        Dev,
        Shape(ShapeKind),
        Known(KnownFailure),
        Unknown,
    }
    let cases: &[(&str, Want)] = &[
        (
            "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/THCCachingAllocator.cpp:510",
            Want::Oom(Framework::PyTorch),
        ),
        (
            "THCudaCheck FAIL file=/pytorch/aten/src/THC/THCGeneral.cpp line=383 error=2 : out of memory",
            Want::Oom(Framework::PyTorch),
        ),
        (
            "RuntimeError: CUDA out of memory. Tried to allocate 2.00 MiB (GPU 0; 11.17 GiB total capacity; 10.62 GiB already allocated; 832.00 KiB free; 10.66 GiB reserved in total by PyTorch)",
            Want::Oom(Framework::PyTorch),
        ),
        (
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.",
            Want::Oom(Framework::Jax),
        ),
        (
            "E external/xla/xla/pjrt/pjrt_stream_executor_client.cc:2469] Execution of replica 0 failed: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 6.21GiB.",
            Want::Oom(Framework::Jax),
        ),
        (
            "tensorflow.python.framework.errors_impl.InternalError: Failed copying input tensor from /job:localhost/replica:0/task:0/device:CPU:0 to /job:localhost/replica:0/task:0/device:GPU:0 in order to run _EagerConst: Dst tensor is not initialized.",
            Want::Oom(Framework::TensorFlow),
        ),
        (
            "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4096.00 MiB on device 0: cudaMalloc failed: out of memory",
            Want::Oom(Framework::Other),
        ),
        (
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
            Want::Oom(Framework::Other),
        ),
        ("Cuda failure 'out of memory'", Want::Oom(Framework::Other)),
        (
            "RuntimeError: MPS backend out of memory (MPS allocated: 1.77 GB, other allocations: 39.00 MB, max allowed: 1.81 GB). Tried to allocate 3.00 MB on private pool.",
            Want::Oom(Framework::Mps),
        ),
        (
            "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cpu and cuda:0! (when checking argument for argument index in method wrapper__index_select)",
            Want::Dev,
        ),
        (
            "RuntimeError: Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) should be the same or input should be a MKLDNN tensor and weight is a dense tensor",
            Want::Dev,
        ),
        (
            "RuntimeError: Input type (MPSFloatType) and weight type (torch.FloatTensor) should be the same",
            Want::Dev,
        ),
        (
            "RuntimeError: expected device cuda:0 but got device cpu",
            Want::Dev,
        ),
        (
            "RuntimeError: Expected object of backend CUDA but got backend CPU for argument #2 'mat2'",
            Want::Dev,
        ),
        (
            "RuntimeError: Expected tensor for argument #1 'input' to have the same device as tensor for argument #2 'weight'; but device 1 does not equal 0 (while checking arguments for cudnn_convolution)",
            Want::Dev,
        ),
        (
            "TypeError: can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first.",
            Want::Dev,
        ),
        (
            "RuntimeError: Placeholder storage has not been allocated on MPS device!",
            Want::Dev,
        ),
        (
            "RuntimeError: Input and parameter tensors are not at the same device, found input tensor at cpu and parameter tensor at cuda:0",
            Want::Dev,
        ),
        (
            "RuntimeError: indices should be either on cpu or on the same device as the indexed tensor (cpu)",
            Want::Dev,
        ),
        (
            "RuntimeError: Expected a 'cuda' device type for generator but found 'cpu'",
            Want::Dev,
        ),
        (
            "RuntimeError: mat1 and mat2 shapes cannot be multiplied (1x512 and 2048x1000)",
            Want::Shape(ShapeKind::Matmul),
        ),
        (
            "RuntimeError: size mismatch, m1: [1 x 25088], m2: [512 x 4096] at C:/w/1/s/conda/aten/src\\THC/generic/THCTensorMathBlas.cu:290",
            Want::Shape(ShapeKind::Matmul),
        ),
        (
            "RuntimeError: The size of tensor a (512) must match the size of tensor b (256) at non-singleton dimension 3",
            Want::Shape(ShapeKind::Broadcast),
        ),
        (
            "RuntimeError: The expanded size of the tensor (3) must match the existing size (4) at non-singleton dimension 1.  Target sizes: [2, 3].  Tensor sizes: [2, 4]",
            Want::Shape(ShapeKind::Broadcast),
        ),
        (
            "RuntimeError: shape '[-1, 16, 5, 5]' is invalid for input of size 179776",
            Want::Shape(ShapeKind::View),
        ),
        (
            "RuntimeError: Given groups=1, weight of size 64 3 3 3, expected input[1, 1, 224, 224] to have 3 channels, but got 1 channels instead",
            Want::Shape(ShapeKind::ConvChannels),
        ),
        (
            "RuntimeError: Expected 4-dimensional input for 4-dimensional weight [64, 3, 7, 7], but got 3-dimensional input of size [3, 224, 224] instead",
            Want::Shape(ShapeKind::ConvRank),
        ),
        (
            "RuntimeError: Sizes of tensors must match except in dimension 1. Got 64 and 32 in dimension 2 (The offending index is 1)",
            Want::Shape(ShapeKind::Cat),
        ),
        (
            "RuntimeError: Given input size: (512x1x1). Calculated output size: (512x0x0). Output size is too small",
            Want::Shape(ShapeKind::Other),
        ),
        (
            "RuntimeError: 0D or 1D target tensor expected, multi-target not supported",
            Want::Shape(ShapeKind::Other),
        ),
        (
            "tensorflow.python.framework.errors_impl.InvalidArgumentError: Incompatible shapes: [32,10] vs. [32,5]",
            Want::Shape(ShapeKind::Broadcast),
        ),
        (
            "InvalidArgumentError: Matrix size-incompatible: In[0]: [32,784], In[1]: [512,10] [Op:MatMul]",
            Want::Shape(ShapeKind::Matmul),
        ),
        (
            "TypeError: dot_general requires contracting dimensions to have the same shape, got (3,) and (4,).",
            Want::Shape(ShapeKind::Matmul),
        ),
        (
            "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`",
            Want::Known(K::CublasError),
        ),
        (
            "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`",
            Want::Known(K::CublasError),
        ),
        (
            "RuntimeError: Unable to find a valid cuDNN algorithm to run convolution",
            Want::Known(K::CudnnError),
        ),
        (
            "RuntimeError: CUDA error: invalid device ordinal",
            Want::Known(K::InvalidDeviceOrdinal),
        ),
        (
            "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable",
            Want::Known(K::DeviceBusy),
        ),
        (
            "RuntimeError: CUDA error: unknown error",
            Want::Known(K::CudaInit),
        ),
        (
            "UserWarning: CUDA initialization: CUDA unknown error - this may be due to an incorrectly set up environment, e.g. changing env variable CUDA_VISIBLE_DEVICES after program start.",
            Want::Known(K::CudaInit),
        ),
        (
            "RuntimeError: CUDA error: the launch timed out and was terminated",
            Want::Known(K::LaunchFailure),
        ),
        (
            "RuntimeError: CUDA error: misaligned address",
            Want::Known(K::LaunchFailure),
        ),
        (
            "RuntimeError: NCCL Error 2: unhandled system error",
            Want::Known(K::NcclError),
        ),
        (
            "RuntimeError: NCCL communicator was aborted on rank 1. Original reason for failure was: [Rank 1] Watchdog caught collective operation timeout",
            Want::Known(K::NcclTimeout),
        ),
        (
            "RuntimeError: Timed out initializing process group in store based barrier on rank: 0, for key: store_based_barrier_key:1",
            Want::Known(K::NcclTimeout),
        ),
        (
            "AssertionError: Torch not compiled with CUDA enabled",
            Want::Known(K::NotCompiledWithCuda),
        ),
        (
            "RuntimeError: Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False. If you are running on a CPU-only machine, please use torch.load with map_location=torch.device('cpu')",
            Want::Known(K::CudaDeserialize),
        ),
        (
            "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version",
            Want::Known(K::DriverTooOld),
        ),
        (
            "RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 804: forward compatibility was attempted on non supported HW",
            Want::Known(K::DriverTooOld),
        ),
        (
            "RuntimeError: CUDA driver initialization failed, you might not have a CUDA gpu.",
            Want::Known(K::NoGpu),
        ),
        (
            "RuntimeError: CUDA error: no CUDA-capable device is detected",
            Want::Known(K::NoGpu),
        ),
        (
            "RuntimeError: HIP error: invalid device function",
            Want::Known(K::NoKernelImage),
        ),
        (
            "UserWarning: NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.",
            Want::Known(K::NoKernelImage),
        ),
        (
            "RuntimeError: Found dtype Long but expected Float",
            Want::Known(K::DtypeMismatch),
        ),
        (
            "RuntimeError: Input type (torch.cuda.HalfTensor) and weight type (torch.cuda.FloatTensor) should be the same",
            Want::Known(K::DtypeMismatch),
        ),
        (
            "IndexError: Target 10 is out of bounds.",
            Want::Known(K::IndexOutOfRange),
        ),
        (
            "IndexError: index out of range in self",
            Want::Known(K::IndexOutOfRange),
        ),
        (
            "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed.",
            Want::Known(K::HostOutOfMemory),
        ),
        (
            "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared memory. Please try to raise your shared memory limit.",
            Want::Known(K::SharedMemory),
        ),
        ("Killed", Want::Known(K::HostOutOfMemory)),
        (
            "RuntimeError: Error(s) in loading state_dict for Net: Missing key(s) in state_dict: \"conv1.weight\".",
            Want::Known(K::StateDictKeys),
        ),
        (
            "RuntimeError: Trying to backward through the graph a second time",
            Want::Unknown,
        ),
        (
            "RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn",
            Want::Unknown,
        ),
        (
            "INFO: Using backend nccl with size 8 on device cuda:0",
            Want::Unknown,
        ),
        (
            "tensorflow.python.framework.errors_impl.ResourceExhaustedError: failed to allocate memory [Op:AddV2]",
            Want::Oom(Framework::TensorFlow),
        ),
        (
            "RuntimeError: HIP error: out of memory",
            Want::Oom(Framework::Rocm),
        ),
        (
            "RuntimeError: Expected tensor for 'out' to have the same device as tensor for argument #1 'self'; but device 0 does not equal 1 (while checking arguments for addmm_out)",
            Want::Dev,
        ),
        (
            "RuntimeError:  :expected tensor for argument #1 'input' to have the same device as tensor for argument #2 'weight",
            Want::Dev,
        ),
        ("RuntimeError: Tensors must be CUDA and dense", Want::Dev),
        (
            "    PyTorch no longer supports this GPU because it is too old.",
            Want::Known(K::NoKernelImage),
        ),
        (
            "RuntimeError: shape mismatch: value tensor of shape [52, 256, 16, 64] cannot be broadcast to indexing result of shape [52, 256, 16, 16]",
            Want::Shape(ShapeKind::Broadcast),
        ),
        (
            "RuntimeError: output with shape [1, 28, 28] doesn't match the broadcast shape [3, 28, 28]",
            Want::Shape(ShapeKind::Broadcast),
        ),
        (
            "RuntimeError: Given groups=2 and weights of shape: [4, 2, 3, 3, 3] , so expected input ([1, 2, 5, 5, 5])  to have 4 channels, but got 2 channels instead",
            Want::Shape(ShapeKind::ConvChannels),
        ),
        (
            "RuntimeError: 1D target tensor expects 2D input tensors, but found inputs with sizes [46, 16, 50] and [46, 16, 50].",
            Want::Shape(ShapeKind::Other),
        ),
        (
            "RuntimeError: Expected target size [32, 10], got [32]",
            Want::Shape(ShapeKind::Other),
        ),
        (
            "RuntimeError: No backend type associated with device type cpu",
            Want::Dev,
        ),
        (
            "RuntimeError: CUDA error: the provided PTX was compiled with an unsupported toolchain.",
            Want::Known(K::DriverTooOld),
        ),
        (
            "jaxlib.xla_extension.XlaRuntimeError: FAILED_PRECONDITION: DNN library initialization failed.",
            Want::Known(K::CudnnError),
        ),
        (
            "tensorflow.python.framework.errors_impl.UnknownError: Failed to get convolution algorithm. This is probably because cuDNN failed to initialize",
            Want::Known(K::CudnnError),
        ),
        (
            "RuntimeError: \"nll_loss_forward_reduce_cuda_kernel_2d_index\" not implemented for 'Int'",
            Want::Known(K::DtypeMismatch),
        ),
        (
            "XlaRuntimeError: INTERNAL: custom call 'xla.gpu.all_reduce' failed: NCCL operation ncclAllReduce(send_buffer, recv_buffer) failed: unhandled cuda error",
            Want::Known(K::NcclError),
        ),
    ];
    for (line, want) in cases {
        let got = analyze(line).failure;
        let ok = match (want, &got) {
            (Want::Oom(fw), Failure::OutOfMemory(f)) => f.framework == *fw,
            (Want::Dev, Failure::DeviceMismatch(_)) | (Want::Unknown, Failure::Unknown) => true,
            (Want::Shape(k), Failure::ShapeMismatch(f)) => f.kind == *k,
            (Want::Known(k), Failure::Known(g, _)) => g == k,
            _ => false,
        };
        assert!(ok, "{line}\n  want {want:?}\n  got  {got:?}");
    }
}

#[test]
fn absurd_numbers_do_not_overflow() {
    let text = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 16000000.00 TiB. GPU 0 \
                has a total capacity of 16000000.00 TiB of which 16000000.00 TiB is free. Process 1 \
                has 16000000.00 TiB memory in use. Process 2 has 16000000.00 TiB memory in use. \
                Including non-PyTorch memory, this process has 16000000.00 TiB memory in use. Of \
                the allocated memory 16000000.00 TiB is allocated by PyTorch, and 16000000.00 TiB \
                is reserved by PyTorch but unallocated.";
    let a = analyze(text);
    let big = Context {
        job_pids: vec![3],
        batch_size: Some(u64::MAX),
        gpus: vec![GpuView {
            total: u64::MAX,
            used: u64::MAX,
            ..h200(
                0,
                0,
                vec![
                    proc(3, u64::MAX, "u", "c", true),
                    proc(4, u64::MAX, "u", "c", false),
                ],
            )
        }],
        ..Context::default()
    };
    let _ = render_text(&diagnose(&a, Some(&big)));
    let _ = render_text(&diagnose(&a, None));
}

// ---- the case, decided by the numbers ---------------------------------------------------

fn diagnosis_of(text: &str) -> gpuwatch::triage::Diagnosis {
    gpuwatch::triage::diagnose(&analyze(text), None)
}

#[test]
fn the_case_is_decided_by_the_numbers_and_says_why() {
    use gpuwatch::triage::{Case, Confidence};
    // The cache larger than the request while the GPU had no room.
    let d = diagnosis_of(&text("oom-torch-2.11-fragmentation-real.txt"));
    assert_eq!(
        (d.case, d.confidence),
        (Case::Fragmentation, Confidence::Certain)
    );
    assert!(
        d.reasoning
            .as_deref()
            .is_some_and(|r| r.starts_with("reserved − allocated = 57.55 GiB")),
        "{d:?}"
    );
    // A printed cap (set_per_process_memory_fraction's "allowed").
    let d = diagnosis_of(&text("oom-torch-1.x-allowed.txt"));
    assert_eq!((d.case, d.confidence), (Case::Cap, Confidence::Certain));
    assert!(d.fixes[0].title.contains("cap"), "{:?}", d.fixes);
    // Free memory far above the request: a limit, not fragmentation or own tensors; the text
    // cannot tell which limit, so run would add.
    let d = diagnosis_of(&text("oom-torch-1.x-cached.txt"));
    assert_eq!((d.case, d.confidence), (Case::Cap, Confidence::Likely));
    assert!(d.run_would_add.is_some());
    // Old wording, no process list: most of the GPU held outside what PyTorch reserved, and
    // the request did not fit in what was free.
    let d = diagnosis_of(
        "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 10.76 GiB total \
         capacity; 1.00 GiB already allocated; 1.50 GiB free; 1.20 GiB reserved in total by PyTorch)",
    );
    assert_eq!(
        (d.case, d.confidence),
        (Case::ExternalPressure, Confidence::Likely)
    );
    assert!(
        d.reasoning
            .as_deref()
            .is_some_and(|r| r.contains("held outside this job")),
        "{d:?}"
    );
    // The same numbers with the job holding most of the GPU: its own tensors.
    let d = diagnosis_of(
        "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 10.76 GiB total \
         capacity; 8.80 GiB already allocated; 1.50 GiB free; 9.00 GiB reserved in total by PyTorch)",
    );
    assert_eq!(d.case, Case::OwnTensors);
}

#[test]
fn an_allocator_limit_is_a_cap_only_well_below_the_card() {
    use gpuwatch::triage::Case;
    let log = |limit: u64| {
        format!(
            "I tensorflow/core/common_runtime/gpu/gpu_device.cc:885] Found device 0 with properties: name: GeForce GTX 1080 Ti totalMemory: 10.00GiB freeMemory: 9.80GiB\n\
             I tensorflow/core/common_runtime/bfc_allocator.cc:680] Limit:      {limit}\n\
             I tensorflow/core/common_runtime/bfc_allocator.cc:680] InUse:      {}\n\
             tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[256,1024,32,32] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n",
            limit - 1000
        )
    };
    // JAX's default 75 %, or a fraction set by hand: a cap.
    let d = diagnosis_of(&log(8_053_063_680));
    assert_eq!(d.case, Case::Cap, "{d:?}");
    assert!(
        d.fixes[0]
            .detail
            .contains("per_process_gpu_memory_fraction"),
        "{:?}",
        d.fixes
    );
    // TensorFlow's default, what was free at start (93 % here): not a cap.
    let d = diagnosis_of(&log(9_985_000_000));
    assert_ne!(d.case, Case::Cap, "{d:?}");
}

#[test]
fn numbers_that_do_not_add_up_are_named() {
    // "this process has" far below what PyTorch reserved: the driver could not see the process.
    let d = diagnosis_of(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total \
         capacity of 79.14 GiB of which 200.00 MiB is free. Including non-PyTorch memory, this \
         process has 0 bytes memory in use. Of the allocated memory 70.00 GiB is allocated by \
         PyTorch, and 8.00 GiB is reserved by PyTorch but unallocated.",
    );
    assert!(
        d.checks
            .iter()
            .any(|c| c.contains("could not see this process")),
        "{:?}",
        d.checks
    );
    // A consistent message has no check.
    let d = diagnosis_of(&text("oom-torch-2.11-fragmentation-real.txt"));
    assert!(d.checks.is_empty(), "{:?}", d.checks);
}
