//! Replays the recordings converted from the real H200 traces and checks them against the
//! original trace lines (parsed here independently, as plain JSON); checks pacing, `start_at`,
//! the end of a replay, the round trip through `Recorder`, and the reader's error messages.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gpuwatch::model::{ProcKind, Sample, SourceKind};
use gpuwatch::record::{Recorder, Recording, RecordingError};
use gpuwatch::source::replay::{ReplayOptions, ReplaySource};
use gpuwatch::source::{CallProbe, GpuSource};
use serde_json::Value;

const FIXTURES: [&str; 3] = ["leak-intruder", "leak-to-oom", "loader-jax-fragmentation"];

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/h200")
}

fn recording_path(name: &str) -> PathBuf {
    fixture_dir().join(format!("{name}.recording.jsonl"))
}

fn original(name: &str) -> Vec<Value> {
    let path = fixture_dir().join(format!("original/trace-{name}.jsonl"));
    std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn fast() -> ReplayOptions {
    ReplayOptions {
        speed: 0.0,
        start_at: None,
        looped: false,
    }
}

fn replay_all(src: &mut ReplaySource) -> Vec<Sample> {
    let probe = CallProbe::default();
    let mut out = Vec::new();
    while !src.finished() {
        out.push(src.sample(&probe));
        assert!(out.len() < 100_000, "replay does not finish");
    }
    out
}

/// What the trace says about one process on one GPU: (kind, used bytes, sm %, mem %).
type Expected = (ProcKind, Option<u64>, Option<f32>, Option<f32>);

/// The trace's processes, merged by pid, with their utilisation, computed from the raw JSON.
fn expected_processes(gpu: &Value) -> BTreeMap<u32, Expected> {
    let putil = &gpu["putil"];
    // None: per-process utilisation unavailable. Some(map): newest sample per pid.
    let util: Option<BTreeMap<u64, (u64, f32, f32)>> = if let Some(samples) = putil.as_array() {
        let mut m: BTreeMap<u64, (u64, f32, f32)> = BTreeMap::new();
        for s in samples {
            let pid = s["pid"].as_u64().unwrap();
            let ts = s["ts"].as_u64().unwrap();
            let entry = (
                ts,
                s["sm"].as_u64().unwrap() as f32,
                s["mem"].as_u64().unwrap() as f32,
            );
            if m.get(&pid).is_none_or(|old| old.0 <= ts) {
                m.insert(pid, entry);
            }
        }
        Some(m)
    } else if putil["err"] == "NotFound" {
        Some(BTreeMap::new())
    } else {
        None
    };

    let mut out: BTreeMap<u32, Expected> = BTreeMap::new();
    for (list, kind) in [("procs", ProcKind::Compute), ("gprocs", ProcKind::Graphics)] {
        for p in gpu[list].as_array().unwrap() {
            let pid = p["pid"].as_u64().unwrap();
            let used = if p["used"] == "unavailable" {
                None
            } else {
                Some(p["used"].as_u64().unwrap())
            };
            let (sm, mem) = match &util {
                None => (None, None),
                Some(m) => m
                    .get(&pid)
                    .map_or((Some(0.0), Some(0.0)), |u| (Some(u.1), Some(u.2))),
            };
            let pid = u32::try_from(pid).unwrap();
            out.entry(pid)
                .and_modify(|e| e.0 = e.0.merge(kind))
                .or_insert((kind, used, sm, mem));
        }
    }
    out
}

#[test]
#[allow(
    clippy::float_cmp,
    reason = "the recording must hold exactly the value the trace implies"
)]
fn fixtures_replay_exactly_as_the_original_traces() {
    for name in FIXTURES {
        let trace = original(name);
        let mut src = ReplaySource::open(recording_path(name), fast()).unwrap();
        assert_eq!(src.info().kind, SourceKind::Replay);
        assert_eq!(src.info().detail, format!("{name}.recording.jsonl"));
        assert_eq!(src.header().source.kind, SourceKind::Live);
        assert_eq!(
            src.header().source.driver_version.as_deref(),
            Some("580.159.04")
        );
        assert_eq!(src.truncated_lines(), 0);
        let samples = replay_all(&mut src);
        assert_eq!(samples.len(), trace.len(), "{name}: sample count");

        let mut processes_seen = 0;
        for (i, (sample, line)) in samples.iter().zip(&trace).enumerate() {
            let at = format!("{name} sample {}", i + 1);
            let unix_us = line["unix_us"].as_u64().unwrap();
            assert_eq!(sample.taken_at, unix_us as f64 / 1e6, "{at}: taken_at");
            let cost_us = line["sample_cost_us"].as_u64().unwrap();
            assert_eq!(sample.collect_seconds, cost_us as f64 / 1e6, "{at}");
            assert!(sample.errors.is_empty(), "{at}");

            let gpus = line["gpus"].as_array().unwrap();
            assert_eq!(sample.gpus.len(), gpus.len(), "{at}: GPU count");
            for (gpu, raw) in sample.gpus.iter().zip(gpus) {
                let at = format!("{at} GPU {}", gpu.index);
                assert_eq!(u64::from(gpu.index), raw["index"].as_u64().unwrap(), "{at}");
                assert_eq!(gpu.uuid, format!("GPU-h200-reference-{}", gpu.index));
                let mem = gpu.memory.unwrap();
                let raw_mem = &raw["mem"];
                assert_eq!(mem.total, raw_mem["total"].as_u64().unwrap(), "{at}: total");
                assert_eq!(mem.used, raw_mem["used"].as_u64().unwrap(), "{at}: used");
                assert_eq!(mem.free, raw_mem["free"].as_u64().unwrap(), "{at}: free");
                assert_eq!(mem.reserved, raw_mem["reserved"].as_u64(), "{at}: reserved");
                assert_eq!(
                    gpu.temperature_c.map(u64::from),
                    raw["temp"].as_u64(),
                    "{at}"
                );
                assert_eq!(
                    gpu.sm_clock_mhz.map(u64::from),
                    raw["clock_sm"].as_u64(),
                    "{at}"
                );
                let power_mw = raw["power_mw"].as_u64().unwrap();
                assert_eq!(gpu.power_watts, Some(power_mw as f64 / 1000.0), "{at}");
                assert_eq!(
                    gpu.util_gpu,
                    Some(raw["util"]["gpu"].as_u64().unwrap() as f32),
                    "{at}"
                );
                assert_eq!(
                    gpu.util_mem,
                    Some(raw["util"]["mem"].as_u64().unwrap() as f32),
                    "{at}"
                );
                assert!(!gpu.lost && gpu.errors.is_empty(), "{at}");

                let expected = expected_processes(raw);
                let got: BTreeMap<u32, Expected> = gpu
                    .processes
                    .iter()
                    .map(|p| {
                        assert!(!p.host.visible, "{at}: host data invented");
                        assert_eq!(p.host.name, None, "{at}: host data invented");
                        (p.pid, (p.kind, p.used_bytes, p.sm_percent, p.mem_percent))
                    })
                    .collect();
                assert_eq!(got.len(), gpu.processes.len(), "{at}: duplicate pid");
                assert_eq!(got, expected, "{at}: processes");
                processes_seen += got.len();

                let mut sorted = gpu.clone();
                sorted.sort_processes();
                assert_eq!(sorted.processes, gpu.processes, "{at}: process order");
            }
        }
        assert!(
            processes_seen > 100,
            "{name}: only {processes_seen} processes"
        );
    }
}

#[test]
fn fixtures_hold_the_documented_events() {
    // leak-to-oom: pid 1055 is present before t≈73.8 s and gone from t≈74.75 s.
    let rec = Recording::read(recording_path("leak-to-oom")).unwrap();
    let origin = rec.samples[0].taken_at;
    let holds = |s: &Sample, pid: u32| s.gpus[0].processes.iter().any(|p| p.pid == pid);
    let last_seen = rec
        .samples
        .iter()
        .filter(|s| holds(s, 1055))
        .map(|s| s.taken_at - origin)
        .fold(f64::NAN, f64::max);
    assert!(
        (73.0..75.0).contains(&last_seen),
        "last seen at {last_seen}"
    );
    // Per-process SM utilisation is real data: some process ran kernels.
    assert!(rec.samples.iter().any(|s| {
        s.gpus[0]
            .processes
            .iter()
            .any(|p| p.sm_percent.unwrap_or(0.0) > 50.0)
    }));
}

#[test]
fn next_delay_is_the_recorded_gap_divided_by_speed() {
    let name = "leak-intruder";
    let trace = original(name);
    for speed in [1.0, 2.0, 0.5] {
        let probe = CallProbe::default();
        let mut src = ReplaySource::open(
            recording_path(name),
            ReplayOptions {
                speed,
                start_at: None,
                looped: false,
            },
        )
        .unwrap();
        assert_eq!(
            src.next_delay(),
            Some(Duration::ZERO),
            "before the first sample"
        );
        for (i, pair) in trace.windows(2).enumerate() {
            let now = src.sample(&probe);
            let gap_us =
                pair[1]["unix_us"].as_u64().unwrap() - pair[0]["unix_us"].as_u64().unwrap();
            let delay = src.next_delay().unwrap();
            let want = Duration::from_micros(gap_us).as_secs_f64() / speed;
            assert!(
                (delay.as_secs_f64() - want).abs() < 1e-6,
                "speed {speed}, gap {}: {delay:?} != {want}",
                i + 1
            );
            assert!(now.taken_at > 0.0);
            assert!(!src.finished());
        }
        src.sample(&probe);
        assert!(src.finished());
    }
}

#[test]
fn speed_two_halves_every_delay() {
    let probe = CallProbe::default();
    let open = |speed| {
        ReplaySource::open(
            recording_path("loader-jax-fragmentation"),
            ReplayOptions {
                speed,
                start_at: None,
                looped: false,
            },
        )
        .unwrap()
    };
    let (mut one, mut two) = (open(1.0), open(2.0));
    let mut n = 0;
    while !one.finished() {
        one.sample(&probe);
        two.sample(&probe);
        let (a, b) = (one.next_delay().unwrap(), two.next_delay().unwrap());
        assert!(
            a.abs_diff(b * 2) <= Duration::from_nanos(2),
            "{a:?} vs {b:?}"
        );
        n += 1;
    }
    assert!(two.finished());
    assert_eq!(n, 260);
}

#[test]
fn start_at_skips_the_beginning() {
    let name = "leak-intruder";
    let all = Recording::read(recording_path(name)).unwrap().samples;
    let origin = all[0].taken_at;
    let mut src = ReplaySource::open(
        recording_path(name),
        ReplayOptions {
            speed: 0.0,
            start_at: Some(30.0),
            looped: false,
        },
    )
    .unwrap();
    let replayed = replay_all(&mut src);
    let skipped = all.len() - replayed.len();
    assert!(skipped > 100 && skipped < 130, "skipped {skipped}");
    assert!(replayed[0].taken_at - origin >= 30.0 - 1e-6);
    assert!(all[skipped - 1].taken_at - origin < 30.0);
    assert_eq!(replayed[..], all[skipped..]);

    let err = ReplaySource::open(
        recording_path(name),
        ReplayOptions {
            speed: 1.0,
            start_at: Some(1000.0),
            looped: false,
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("leak-intruder.recording.jsonl") && err.contains("past the end"),
        "{err}"
    );
}

#[test]
fn looping_never_finishes_and_keeps_time_forward() {
    let probe = CallProbe::default();
    let mut src = ReplaySource::open(
        recording_path("loader-jax-fragmentation"),
        ReplayOptions {
            speed: 0.0,
            start_at: None,
            looped: true,
        },
    )
    .unwrap();
    let n = src.len();
    let mut last = f64::NEG_INFINITY;
    for _ in 0..(2 * n + 3) {
        assert!(!src.finished());
        let s = src.sample(&probe);
        assert!(s.taken_at > last);
        last = s.taken_at;
    }
    assert_eq!(src.loops(), 2);
}

#[test]
fn recorder_round_trip_of_a_real_recording() {
    let rec = Recording::read(recording_path("leak-to-oom")).unwrap();
    let mut recorder = Recorder::with_header(Vec::new(), &rec.header).unwrap();
    for s in &rec.samples {
        recorder.write(s).unwrap();
    }
    assert_eq!(recorder.samples_written(), 320);
    let bytes = recorder.into_inner().unwrap();
    let again = Recording::parse(bytes.as_slice(), "memory").unwrap();
    assert_eq!(again.header, rec.header);
    assert_eq!(again.samples, rec.samples);
}

#[test]
fn recorder_output_is_readable_from_a_file() {
    let rec = Recording::read(recording_path("loader-jax-fragmentation")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.recording.jsonl");
    let file = std::fs::File::create(&path).unwrap();
    let mut recorder = Recorder::new(file, &rec.header.source, Duration::from_millis(250)).unwrap();
    for s in &rec.samples[..10] {
        recorder.write(s).unwrap();
    }
    drop(recorder);
    let mut src = ReplaySource::open(&path, fast()).unwrap();
    assert_eq!(src.info().detail, "out.recording.jsonl");
    assert_eq!(replay_all(&mut src), rec.samples[..10]);
}

// ---- the reader's errors, through files (so that messages name a real path) ----

fn header_line() -> String {
    std::fs::read_to_string(recording_path("leak-intruder"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_owned()
}

fn sample_lines(n: usize) -> Vec<String> {
    std::fs::read_to_string(recording_path("leak-intruder"))
        .unwrap()
        .lines()
        .skip(1)
        .take(n)
        .map(str::to_owned)
        .collect()
}

fn read_text(text: &str) -> (Result<Recording, RecordingError>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("case.recording.jsonl");
    std::fs::write(&path, text).unwrap();
    (Recording::read(&path), path.display().to_string())
}

fn join(lines: &[String]) -> String {
    let mut s = String::new();
    for l in lines {
        writeln!(s, "{l}").unwrap();
    }
    s
}

#[test]
fn bad_json_names_line_and_column() {
    let mut lines = vec![header_line()];
    lines.extend(sample_lines(5));
    lines.push("{\"taken_at\": 1795977800.0, \"gpus\": [}".to_owned());
    lines.extend(sample_lines(1));
    let (res, path) = read_text(&join(&lines));
    let err = res.unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.line(), Some(7), "{msg}");
    assert_eq!(err.column(), Some(37), "{msg}");
    assert!(msg.starts_with(&format!("{path}:7:37: ")), "{msg}");
    assert!(msg.contains("invalid JSON: expected a sample"), "{msg}");
}

#[test]
fn a_sample_with_a_wrong_field_names_its_column() {
    let mut lines = vec![header_line()];
    lines.push(sample_lines(1)[0].replacen("\"used\":0", "\"used\":\"zero\"", 1));
    let (res, path) = read_text(&join(&lines));
    let msg = res.unwrap_err().to_string();
    let col = lines[1].find("\"zero\"").unwrap();
    assert!(msg.starts_with(&format!("{path}:2:")), "{msg}");
    // serde_json points at (or just after) the offending value
    let reported: usize = msg[path.len() + 3..]
        .split(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(reported.abs_diff(col) <= 8, "{msg} (value at column {col})");
}

#[test]
fn wrong_version_is_refused() {
    let header = header_line().replacen("\"version\":1", "\"version\":2", 1);
    let (res, path) = read_text(&join(&[header]));
    let err = res.unwrap_err();
    assert!(matches!(err, RecordingError::UnsupportedVersion { .. }));
    assert_eq!(
        err.to_string(),
        format!("{path}:1: unsupported recording version 2 (this build reads version 1)")
    );
}

#[test]
fn wrong_format_is_refused() {
    let header = header_line().replacen("gpuwatch-recording", "nvtop-log", 1);
    let (res, path) = read_text(&join(&[header]));
    assert_eq!(
        res.unwrap_err().to_string(),
        format!("{path}:1: wrong format \"nvtop-log\": expected \"gpuwatch-recording\"")
    );
}

#[test]
fn missing_header_is_refused() {
    let (res, path) = read_text(&join(&sample_lines(3)));
    let err = res.unwrap_err();
    assert!(matches!(err, RecordingError::MissingHeader { .. }));
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("{path}:1: missing header")),
        "{msg}"
    );
    assert!(
        msg.contains("a sample (the header line is missing)"),
        "{msg}"
    );
}

#[test]
fn empty_file_is_refused() {
    let (res, path) = read_text("");
    let msg = res.unwrap_err().to_string();
    assert!(msg.starts_with(&format!("{path}: empty file")), "{msg}");
}

#[test]
fn out_of_order_samples_play_in_file_order() {
    // A clock stepped back (NTP): the samples play in file order, one warning names the step,
    // and the replay waits one recorded interval there instead of a negative gap.
    let mut lines = vec![header_line()];
    let samples = sample_lines(4);
    lines.extend([&samples[0], &samples[2], &samples[1], &samples[3]].map(String::clone));
    let (res, path) = read_text(&join(&lines));
    let rec = res.unwrap();
    assert_eq!(rec.clock_steps, 1);
    assert_eq!(rec.warnings.len(), 1, "{:?}", rec.warnings);
    assert!(
        rec.warnings[0].starts_with(&format!("{path}:4: the clock stepped back"))
            && rec.warnings[0].ends_with("on line 3); played in file order"),
        "{:?}",
        rec.warnings
    );
    let times: Vec<f64> = rec.samples.iter().map(|s| s.taken_at).collect();
    let interval = rec.header.interval();
    let mut src = ReplaySource::from_recording(
        rec,
        ReplayOptions {
            speed: 1.0,
            ..fast()
        },
    )
    .unwrap();
    assert_eq!(src.warnings().len(), 1);
    let probe = CallProbe::default();
    let mut played = Vec::new();
    let mut delays = Vec::new();
    while !src.finished() {
        played.push(src.sample(&probe).taken_at);
        delays.push(src.next_delay().unwrap());
    }
    assert_eq!(played, times);
    assert_eq!(delays[1], interval, "at the step: one interval");
    assert!(delays[0] > Duration::ZERO && delays[2] > Duration::ZERO);
}

#[test]
fn truncated_last_line_is_tolerated() {
    let text = std::fs::read_to_string(recording_path("leak-to-oom")).unwrap();
    let full = Recording::parse(text.as_bytes(), "full").unwrap();
    // Cut the file in the middle of its last line, as a killed recorder would leave it.
    let last_start = text[..text.len() - 1].rfind('\n').unwrap() + 1;
    for cut in [last_start + 1, last_start + 700, text.len() - 2] {
        let (res, path) = read_text(&text[..cut]);
        let rec = res.unwrap();
        assert_eq!(rec.samples.len(), full.samples.len() - 1);
        assert_eq!(rec.samples[..], full.samples[..full.samples.len() - 1]);
        assert_eq!(rec.truncated_lines, 1);
        assert_eq!(rec.warnings.len(), 1);
        assert!(
            rec.warnings[0].starts_with(&format!("{path}:321:")),
            "{:?}",
            rec.warnings
        );
        let src = ReplaySource::from_recording(rec, fast()).unwrap();
        assert_eq!(src.truncated_lines(), 1);
    }
    // The same damage on a line that is followed by others is an error.
    let mut damaged = text[..last_start - 300].to_owned();
    damaged.push('\n');
    damaged.push_str(&text[last_start..]);
    let (res, _) = read_text(&damaged);
    assert_eq!(res.unwrap_err().line(), Some(320));
}
