// Figures go to the test log.
#![allow(clippy::disallowed_macros)]

use super::*;
use crate::model::{GpuSample, HostProc, Memory, ProcKind, ProcSample};

/// A sample of `gpus` GPUs with `procs` processes each; process `i` uses `used(i)` bytes.
pub(crate) fn sample(t: f64, gpus: u32, procs: u32, used: impl Fn(u32) -> Option<u64>) -> Sample {
    let gpus = (0..gpus)
        .map(|g| {
            let mut s = GpuSample::empty(g, format!("GPU-{g:08x}-0000-0000-0000-000000000000"));
            s.memory = Some(Memory {
                total: 80 << 30,
                reserved: Some(1 << 29),
                used: 40 << 30,
                free: 39 << 30,
            });
            s.util_gpu = Some(87.0);
            s.temperature_c = Some(61);
            s.power_watts = Some(412.5);
            s.processes = (0..procs)
                .map(|i| ProcSample {
                    pid: 10_000 + g * 1000 + i,
                    kind: ProcKind::Compute,
                    used_bytes: used(i),
                    sm_percent: (i % 2 == 0).then_some(42.0),
                    mem_percent: None,
                    gpu_instance: None,
                    compute_instance: None,
                    host: HostProc {
                        visible: i != 1,
                        user: (i != 1).then(|| format!("user{i}")),
                        command: (i != 1).then(|| format!("python train.py --rank {i}")),
                        start_time: Some(1_764_000_000 + u64::from(i)),
                        container: None,
                        ..HostProc::default()
                    },
                })
                .collect();
            s
        })
        .collect();
    Sample {
        taken_at: t,
        gpus,
        errors: Vec::new(),
        collect_seconds: 0.01,
    }
}

const T0: f64 = 1_764_000_000.0;

#[test]
fn round_trip_who_returns_what_was_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("h.sqlite")).unwrap();
    for k in 0..10u64 {
        store
            .write(&sample(T0 + k as f64, 2, 3, |i| {
                (i != 2).then_some((u64::from(i) + 1) * (1 << 30) + k)
            }))
            .unwrap();
    }
    let who = store.who(&GpuRef::Index(1), T0 + 5.5).unwrap().unwrap();
    assert!((who.t - (T0 + 5.0)).abs() < 1e-6);
    assert!(!who.downsampled);
    assert_eq!(who.gpu_index, 1);
    assert_eq!(who.used, Some(40 << 30));
    assert_eq!(who.processes.len(), 3);
    assert_eq!(who.processes[0].pid, 11_001);
    assert_eq!(who.processes[0].used, Some((2 << 30) + 5));
    assert_eq!(who.processes[0].user, None, "invisible process has no user");
    assert_eq!(who.processes[0].sm, None, "unavailable SM stays None");
    assert_eq!(who.processes[1].user.as_deref(), Some("user0"));
    assert_eq!(who.processes[1].sm, Some(42));
    assert_eq!(who.processes[2].used, None, "unavailable memory stays None");
    // By UUID, and nothing before the first sample or far after the last.
    let by_uuid = store
        .who(&GpuRef::Uuid(who.gpu_uuid.clone()), T0 + 5.5)
        .unwrap()
        .unwrap();
    assert_eq!(by_uuid, who);
    assert!(store.who(&GpuRef::Index(1), T0 - 1.0).unwrap().is_none());
    assert!(store.who(&GpuRef::Index(1), T0 + 100.0).unwrap().is_none());
    assert!(store.who(&GpuRef::Index(7), T0 + 5.0).unwrap().is_none());
    // Host facts are stored once per process.
    let n: i64 = store
        .conn
        .query_row("SELECT count(*) FROM process", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 6);
    // A read-only handle answers the same.
    let ro = Store::open_read_only(&dir.path().join("h.sqlite")).unwrap();
    assert_eq!(ro.who(&GpuRef::Index(1), T0 + 5.5).unwrap().unwrap(), who);
    assert!(ro.peaks(T0).is_ok());
    drop(ro);
    // Reopening keeps it all.
    drop(store);
    let store = Store::open(&dir.path().join("h.sqlite")).unwrap();
    assert_eq!(
        store.who(&GpuRef::Index(1), T0 + 5.5).unwrap().unwrap(),
        who
    );
}

#[test]
fn peaks_report_the_largest_value_and_when() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("h.sqlite")).unwrap();
    for k in 0..20u64 {
        let bump = if k == 7 { 1 << 29 } else { 0 };
        store
            .write(&sample(T0 + k as f64, 1, 2, |i| {
                Some(u64::from(i + 1) * (1 << 30) + if i == 0 { bump } else { 0 })
            }))
            .unwrap();
    }
    let peaks = store.peaks(T0).unwrap();
    assert_eq!(peaks.len(), 2);
    assert_eq!(peaks[0].pid, 10_001);
    assert_eq!(peaks[0].peak_used, 2 << 30);
    assert_eq!(peaks[1].pid, 10_000);
    assert_eq!(peaks[1].peak_used, (1 << 30) + (1 << 29));
    assert!((peaks[1].at - (T0 + 7.0)).abs() < 1e-6);
    assert_eq!(peaks[1].user.as_deref(), Some("user0"));
    assert_eq!(peaks[1].gpu, 0);
    // Since after the spike: process 0's peak is lower.
    let later = store.peaks(T0 + 10.0).unwrap();
    assert_eq!(later[1].peak_used, 1 << 30);
}

#[test]
fn downsampled_data_answers_who_and_peaks() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("h.sqlite")).unwrap();
    for k in 0..180u64 {
        store
            .write(&sample(T0 + k as f64, 1, 2, |i| {
                Some(u64::from(i) * 1000 + k)
            }))
            .unwrap();
    }
    let report = store.maintain(T0 + 2.0 * 3600.0).unwrap();
    assert!(report.downsampled_rows > 0);
    let raw: i64 = store
        .conn
        .query_row("SELECT count(*) FROM proc_sample", [], |r| r.get(0))
        .unwrap();
    assert_eq!(raw, 0);
    let who = store.who(&GpuRef::Index(0), T0 + 90.0).unwrap().unwrap();
    assert!(who.downsampled);
    assert_eq!(who.processes.len(), 2);
    // The step containing T0+90 is [T0+60, T0+120) when T0 is on a minute boundary.
    let step_start = (T0 + 90.0).div_euclid(60.0) * 60.0;
    assert!((who.t - step_start).abs() < 1e-6);
    let peaks = store.peaks(T0).unwrap();
    assert_eq!(peaks[0].peak_used, 1000 + 179);
}

#[test]
fn a_week_of_samples_stays_under_the_bound_and_forgets_old_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sqlite");
    let opts = StoreOptions {
        max_bytes: 4 << 20,
        max_age: Duration::from_hours(48),
        ..StoreOptions::default()
    };
    let mut store = Store::open_with(&path, opts).unwrap();
    // A week, 2 GPUs × 4 processes, a sample every 5 s (to keep the test quick),
    // maintenance every 10 minutes.
    let mut max_seen = 0;
    let week: u32 = 7 * 24 * 3600;
    for s in (0..week).step_by(5) {
        let t = T0 + f64::from(s);
        store
            .write(&sample(t, 2, 4, |i| {
                Some(u64::from(i) << 30 | u64::from(s % 977))
            }))
            .unwrap();
        if s % 600 == 595 {
            let r = store.maintain(t).unwrap();
            max_seen = max_seen.max(r.bytes);
            assert!(
                r.bytes <= opts.max_bytes,
                "{} > {}",
                r.bytes,
                opts.max_bytes
            );
        }
    }
    let end = T0 + f64::from(week);
    assert!(store.file_bytes() <= opts.max_bytes + (1 << 20));
    assert_eq!(store.integrity_check().unwrap(), "ok");
    // Older than max_age: gone. Recent: there.
    assert!(
        store
            .who(&GpuRef::Index(0), end - 3.0 * 86_400.0)
            .unwrap()
            .is_none()
    );
    assert!(store.who(&GpuRef::Index(0), end - 10.0).unwrap().is_some());
    let oldest: f64 = store
        .conn
        .query_row("SELECT min(t) FROM gpu_step", [], |r| r.get::<_, i64>(0))
        .map(secs)
        .unwrap();
    assert!(oldest >= end - 2.0 * 86_400.0 - 3600.0);
    eprintln!("week simulated; largest file after maintenance {max_seen} bytes");
}

#[test]
fn size_bound_deletes_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    let opts = StoreOptions {
        max_bytes: 1 << 20,
        ..StoreOptions::default()
    };
    let mut store = Store::open_with(&dir.path().join("h.sqlite"), opts).unwrap();
    // 6 hours of 1 GPU × 64 processes at 1 sample per 10 s, maintained at the end.
    for s in (0..6 * 3600).step_by(10) {
        store
            .write(&sample(T0 + f64::from(s), 1, 64, |i| {
                Some(u64::from(i) << 20)
            }))
            .unwrap();
    }
    let r = store.maintain(T0 + 6.0 * 3600.0).unwrap();
    assert!(r.bytes <= opts.max_bytes, "{}", r.bytes);
    assert!(
        store
            .who(&GpuRef::Index(0), T0 + 6.0 * 3600.0 - 20.0)
            .unwrap()
            .is_some()
    );
    assert!(store.who(&GpuRef::Index(0), T0 + 60.0).unwrap().is_none());
}

#[test]
fn errors_name_the_path_and_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let bad = file.join("h.sqlite");
    let err = Store::open(&bad).err().unwrap().to_string();
    assert!(err.contains(&*bad.to_string_lossy()), "{err}");
    let garbage = dir.path().join("garbage.sqlite");
    std::fs::write(&garbage, vec![7u8; 8192]).unwrap();
    let err = Store::open(&garbage).err().unwrap().to_string();
    assert!(err.contains("garbage.sqlite"), "{err}");
}

#[test]
fn read_only_file_is_reported() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sqlite");
    {
        let mut s = Store::open(&path).unwrap();
        s.write(&sample(T0, 1, 1, |_| Some(1))).unwrap();
        s.checkpoint().unwrap();
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o555)).unwrap();
    let result = Store::open(&path).and_then(|mut s| s.write(&sample(T0 + 1.0, 1, 1, |_| Some(1))));
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Running as root ignores permissions; otherwise the failure is a clear error.
    if let Err(e) = result {
        assert!(e.to_string().contains("h.sqlite"), "{e}");
    }
}

/// Bytes per day for 8 GPUs × 64 processes at 1 Hz: the downsampled tables (what accumulates
/// per day) and the full-resolution hour (a constant on top).
#[test]
#[ignore = "slow (about a minute); run with --ignored to print the figures"]
fn bytes_per_day_8x64() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("h.sqlite")).unwrap();
    let used = |i: u32| Some((u64::from(i) + 1) * 300_000_000 + u64::from(i) * 4096);
    // One hour of full resolution.
    for s in 0..3600 {
        store
            .write(&sample(T0 + f64::from(s), 8, 64, used))
            .unwrap();
    }
    let hour_raw = store.used_bytes().unwrap();
    // Fold it: one hour of steps.
    store.maintain(T0 + 2.0 * 3600.0).unwrap();
    let hour_steps = store.used_bytes().unwrap();
    eprintln!(
        "8x64 @1Hz: full-resolution hour {:.1} MiB; downsampled {:.2} MiB/hour = {:.1} MiB/day",
        hour_raw as f64 / 1_048_576.0,
        hour_steps as f64 / 1_048_576.0,
        hour_steps as f64 * 24.0 / 1_048_576.0
    );
}

#[test]
fn full_disk_is_reported_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("h.sqlite")).unwrap();
    store.write(&sample(T0, 1, 1, |_| Some(1))).unwrap();
    // SQLite answers SQLITE_FULL, as on a full disk, once the file reaches max_page_count.
    let pages: i64 = store
        .conn
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .unwrap();
    store
        .conn
        .query_row(&format!("PRAGMA max_page_count = {pages}"), [], |_| Ok(()))
        .unwrap();
    let mut failed = None;
    for k in 1..2000 {
        if let Err(e) = store.write(&sample(T0 + f64::from(k), 8, 64, |i| Some(u64::from(i)))) {
            failed = Some(e);
            break;
        }
    }
    let e = failed.expect("writes never failed");
    assert!(e.is_disk_full(), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("h.sqlite") && text.contains("disk is full"),
        "{text}"
    );
    // What was written before is still readable.
    assert!(store.who(&GpuRef::Index(0), T0).unwrap().is_some());
}

#[test]
fn series_buckets_raw_and_downsampled_data_alike() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("h.sqlite")).unwrap();
    // 3 hours at one sample every 10 s; process 0 grows by 1 MiB per sample. Maintenance at
    // the end downsamples everything older than an hour into one-minute steps.
    let n: u32 = 3 * 360;
    for k in 0..n {
        let t = T0 + f64::from(k) * 10.0;
        store
            .write(&sample(t, 2, 2, |i| {
                Some(if i == 0 { u64::from(k) << 20 } else { 5 << 30 })
            }))
            .unwrap();
    }
    store.maintain(T0 + f64::from(n) * 10.0).unwrap();

    // Every GPU, one-hour buckets over the three hours: both halves of the data are counted.
    let all = store
        .series(&SeriesQuery {
            gpu: None,
            pid: None,
            since: T0,
            until: T0 + 3.0 * 3600.0,
            step: 3600.0,
        })
        .unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].key.gpu_index, 0);
    assert_eq!(all[1].key.gpu_index, 1);
    let points = &all[1].points;
    assert_eq!(points.len(), 3);
    assert!((points[0].t - T0).abs() < 1e-6);
    assert_eq!(
        points[0].samples, 360,
        "downsampled steps keep their sample counts"
    );
    assert_eq!(points[2].samples, 360, "the last hour is full resolution");
    assert_eq!(points[1].used_max, Some(40 << 30));
    assert_eq!(points[1].total, Some(80 << 30));
    assert!((points[1].util_mean.unwrap() - 87.0).abs() < 1e-6);

    // One process (GPU 1's process 0 is pid 11 000), one GPU, ten-minute buckets.
    let one = store
        .series(&SeriesQuery {
            gpu: Some(GpuRef::Index(1)),
            pid: Some(11_000),
            since: T0 + 3600.0,
            until: T0 + 3.0 * 3600.0 - 1.0,
            step: 600.0,
        })
        .unwrap();
    assert_eq!(one.len(), 1);
    let s = &one[0];
    assert_eq!(s.key.pid, Some(11_000));
    assert_eq!(s.key.command.as_deref(), Some("python train.py --rank 0"));
    assert_eq!(s.points.len(), 12);
    // The first bucket holds samples 360..420 (in one-minute steps before the cut): min and
    // max are exact, the mean is the samples' mean.
    assert_eq!(s.points[0].used_min, Some(360 << 20));
    assert_eq!(s.points[0].used_max, Some(419 << 20));
    assert_eq!(s.points[0].used_mean, Some((389 << 20) + (1 << 19)));
    assert_eq!(s.points[0].total, None);
    // The last bucket is raw data: samples 1020..1079.
    assert_eq!(s.points[11].used_min, Some(1020 << 20));
    assert_eq!(s.points[11].used_max, Some(1079 << 20));
    assert_eq!(s.points[11].samples, 60);

    // A PID on another GPU, and nothing outside the recorded time.
    assert!(
        store
            .series(&SeriesQuery {
                gpu: Some(GpuRef::Index(0)),
                pid: Some(11_000),
                since: T0,
                until: T0 + 3.0 * 3600.0,
                step: 60.0,
            })
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .series(&SeriesQuery {
                gpu: None,
                pid: None,
                since: T0 - 7200.0,
                until: T0 - 1.0,
                step: 60.0,
            })
            .unwrap()
            .is_empty()
    );
}

#[test]
fn a_history_from_before_the_application_id_still_opens_and_is_stamped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sqlite");
    {
        let mut s = Store::open(&path).unwrap();
        s.write(&sample(T0, 1, 2, |_| Some(1 << 30))).unwrap();
        // What every history written before the id looked like.
        s.conn.execute_batch("PRAGMA application_id = 0;").unwrap();
    }
    let id = |p: &Path| -> i32 {
        Connection::open(p)
            .unwrap()
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(id(&path), 0);
    let ro = Store::open_read_only(&path).unwrap();
    assert!(ro.who(&GpuRef::Index(0), T0).unwrap().is_some());
    drop(ro);
    assert_eq!(id(&path), 0, "a reader writes nothing");
    let s = Store::open(&path).unwrap();
    assert_eq!(
        s.who(&GpuRef::Index(0), T0)
            .unwrap()
            .unwrap()
            .processes
            .len(),
        2
    );
    drop(s);
    assert_eq!(id(&path), APPLICATION_ID, "the writer stamps it");
}

#[test]
fn sqlite_files_that_only_look_like_a_history_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (name, sql, needle) in [
        (
            "partial.sqlite",
            "CREATE TABLE gpu(id INTEGER PRIMARY KEY); PRAGMA user_version = 1;",
            "not a gpuwatch history (user_version 1, tables: gpu)",
        ),
        (
            "other-app.sqlite",
            "PRAGMA application_id = 1234;",
            "another program's SQLite database (application_id 0x000004d2",
        ),
    ] {
        let path = dir.path().join(name);
        Connection::open(&path).unwrap().execute_batch(sql).unwrap();
        let before = std::fs::read(&path).unwrap();
        for result in [
            Store::open(&path).map(drop),
            Store::open_read_only(&path).map(drop),
        ] {
            let e = result.unwrap_err();
            assert!(e.is_refusal(), "{e}");
            assert!(e.to_string().contains(needle), "{e}");
        }
        assert_eq!(std::fs::read(&path).unwrap(), before, "{name} untouched");
        assert!(!lock_path(&path).exists());
    }
    // A newer schema of ours is refused too, rather than altered.
    let path = dir.path().join("newer.sqlite");
    Store::open(&path).unwrap();
    Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA user_version = 2;")
        .unwrap();
    let e = Store::open(&path).err().unwrap();
    assert!(e.is_refusal() && e.to_string().contains("newer"), "{e}");
}

#[test]
fn a_second_writer_is_refused_with_the_holders_pid_until_the_first_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sqlite");
    let first = Store::open(&path).unwrap();
    let e = Store::open(&path).err().unwrap();
    assert!(
        matches!(&e, StoreError::InUse { pid: Some(p), .. } if *p == std::process::id()),
        "{e}"
    );
    assert!(e.is_refusal());
    // Readers take no lock.
    assert!(Store::open_read_only(&path).is_ok());
    drop(first);
    assert!(Store::open(&path).is_ok());
}

#[test]
fn the_process_cache_stays_bounded_with_churning_pids() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("h.sqlite")).unwrap();
    // 1 Hz for 10 minutes; 2 GPUs x 8 processes, every process replaced by a new PID each
    // sample: 9 600 distinct processes, of which 16 run at any time.
    let mut max = 0;
    for k in 0..600u32 {
        let mut s = sample(T0 + f64::from(k), 2, 8, |_| Some(1 << 30));
        for (g, gpu) in s.gpus.iter_mut().enumerate() {
            for (i, p) in gpu.processes.iter_mut().enumerate() {
                p.pid = 100_000 + k * 16 + (g * 8 + i) as u32;
            }
        }
        store.write(&s).unwrap();
        max = max.max(store.procs.len());
    }
    // What the last two minutes (plus half a minute between sweeps) saw, not 9 600.
    let bound = 16 * (PROC_CACHE_IDLE_MS as usize * 3 / 2 / 1000 + 1);
    assert!(max <= bound, "cache grew to {max} (bound {bound})");
    // A process forgotten by the cache and seen again keeps its row.
    let mut s = sample(T0 + 4000.0, 1, 1, |_| Some(1 << 30));
    s.gpus[0].processes[0].pid = 100_000;
    s.gpus[0].processes[0].host.start_time = Some(1_764_000_000);
    store.write(&s).unwrap();
    let rows: i64 = store
        .conn
        .query_row("SELECT count(*) FROM process WHERE pid = 100000", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(rows, 1);
    // Past the cap, only the current sample's processes stay.
    let mut s = sample(T0 + 5000.0, 1, 1, |_| Some(1));
    s.gpus[0].processes = (0..PROC_CACHE_CAP as u32 + 10)
        .map(|i| {
            let mut p = s.gpus[0].processes[0].clone();
            p.pid = 1_000_000 + i;
            p
        })
        .collect();
    store.write(&s).unwrap();
    s.taken_at += 1.0;
    s.gpus[0].processes.truncate(3);
    store.write(&s).unwrap();
    assert_eq!(store.procs.len(), 3);
}
