//! Every parser of outside input, fuzzed with proptest (`cargo fuzz` needs a nightly
//! toolchain): times and durations, recording lines, scenarios, config files, the event stream
//! `tui --connect` reads, GPU names (`--gpu`) and the triage scanner (the history API's query: a proptest in
//! `src/serve/history.rs`). Arbitrary text and
//! bytes give a value or an error, never a panic, and an error never quotes more than a few
//! hundred bytes of the input.
//!
//! The corpus is kept twice: proptest writes each failure it finds to
//! `tests/fuzz_parsers.proptest-regressions` (committed; replayed first on every run), and
//! `tests/fixtures/hostile/` holds hand-written nasty inputs that
//! [`the_seed_corpus_never_panics`] replays through the same parsers (`times.txt`: one time per
//! line; `recording-*`, `scenario-*`, `config-*`, `sse-*`: one file each).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use gpuwatch::config::{ConfigFile, Overrides, resolve};
use gpuwatch::record::Recording;
use gpuwatch::remote::{SseParser, frame_from_json};
use gpuwatch::source::replay::{ReplayOptions, ReplaySource};
use gpuwatch::source::scripted::ScriptedSource;
use gpuwatch::source::{CallProbe, GpuSource};
use gpuwatch::times;
use proptest::prelude::*;

/// An error message from outside input stays short whatever the input.
const MAX_MESSAGE: usize = 1_500;

fn short(what: &str, message: &str) {
    assert!(
        message.len() <= MAX_MESSAGE,
        "{what}: a {}-byte message: {}…",
        message.len(),
        &message[..message.floor_char_boundary(300)]
    );
}

const NOW: f64 = 1_764_388_800.0;

fn time(text: &str) {
    for (what, r) in [
        ("parse_time", times::parse_time("t", text, NOW)),
        ("parse_since", times::parse_since("t", text, NOW)),
    ] {
        match r {
            Ok(t) => {
                assert!(times::in_range(t), "{what}({text:?}) = {t}");
                let _ = times::format_rfc3339(t);
            }
            Err(e) => short(what, &e),
        }
    }
    if let Err(e) = times::parse_duration("d", text, times::MAX_DURATION) {
        short("parse_duration", &e);
    }
}

/// A recording: read it, then play it through to the end, pacing included.
fn recording(bytes: &[u8]) {
    match Recording::parse(bytes, "fuzz") {
        Ok(rec) => {
            for s in &rec.samples {
                assert!(times::in_range(s.taken_at), "{}", s.taken_at);
                let _ = s.taken_at_system();
            }
            for w in &rec.warnings {
                short("recording warning", w);
            }
            for looped in [false, true] {
                let options = ReplayOptions {
                    speed: 1.0,
                    start_at: None,
                    looped,
                };
                let Ok(mut src) = ReplaySource::from_recording(rec.clone(), options) else {
                    // Only a recording with nothing to play may be refused.
                    assert!(
                        rec.samples.is_empty(),
                        "a recording with samples was refused"
                    );
                    continue;
                };
                let probe = CallProbe::default();
                for _ in 0..rec.samples.len() + 3 {
                    let _ = src.sample(&probe).taken_at_system();
                    let _ = src.next_delay();
                    if src.finished() {
                        break;
                    }
                }
            }
        }
        Err(e) => short("recording", &e.to_string()),
    }
}

fn scenario(text: &str) {
    match scenario::Scenario::parse(text) {
        Ok(sc) => {
            let src = ScriptedSource::new(sc, "fuzz");
            for t in [0.0, 1.0, 1e9, 1e300, -1.0] {
                let _ = src.sample_at(t, NOW).taken_at_system();
            }
        }
        Err(e) => short("scenario", &e.to_string()),
    }
}

fn config(text: &str) {
    match ConfigFile::parse(text, Path::new("fuzz.toml")) {
        Ok(file) => {
            if let Err(e) = resolve(file, &Overrides::default()) {
                short("config resolve", &e.to_string());
            }
        }
        Err(e) => short("config", &e.to_string()),
    }
}

/// The event stream, a line at a time, as `tui --connect` reads it; each frame decoded.
fn sse(text: &str) {
    let mut parser = SseParser::default();
    for line in text.split_inclusive('\n') {
        match parser.line(line) {
            Ok(Some(event)) => {
                if let Err(e) = frame_from_json(&event.data) {
                    short("frame", &e);
                }
            }
            Ok(None) => {}
            Err(e) => short("sse", &e),
        }
    }
    if let Err(e) = frame_from_json(text) {
        short("frame", &e);
    }
}

fn triage(text: &str) {
    let analysis = gpuwatch::triage::analyze(text);
    let _ = gpuwatch::triage::render_text(&gpuwatch::triage::diagnose(&analysis, None));
}

/// A GPU name (`--gpu`, `?gpu=`): parsed, then resolved against GPUs whose UUIDs are the
/// text's own pieces (so prefixes, case and ambiguity are exercised).
fn gpu_ref(text: &str) {
    match text.parse::<gpuwatch::gpuref::GpuRef>() {
        Err(e) => short("gpu ref", &e),
        Ok(r) => {
            let uuids: Vec<String> = text
                .split_whitespace()
                .chain(["GPU-a", text])
                .map(str::to_string)
                .collect();
            let devices: Vec<gpuwatch::gpuref::Device<'_>> = uuids
                .iter()
                .enumerate()
                .map(|(i, u)| gpuwatch::gpuref::Device {
                    index: Some(i as u32),
                    uuid: u,
                    parent: (i % 2 == 1).then_some("GPU-a"),
                })
                .collect();
            if let Err(e) = gpuwatch::gpuref::resolve("--gpu", &r, &devices, "here") {
                short("gpu ref", &e);
            }
        }
    }
}

fn every_parser(text: &str) {
    time(text);
    gpu_ref(text);
    recording(text.as_bytes());
    scenario(text);
    config(text);
    sse(text);
    triage(text);
}

fn corpus() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hostile");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("tests/fixtures/hostile")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    files
}

#[test]
fn the_seed_corpus_never_panics() {
    let files = corpus();
    assert!(files.len() >= 10, "{files:?}");
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(&path).expect("read");
        let text = String::from_utf8_lossy(&bytes);
        match name.split('-').next().unwrap_or_default() {
            "times.txt" => text.lines().for_each(time),
            "recording" => recording(&bytes),
            "scenario" => scenario(&text),
            "config" => config(&text),
            "sse" => sse(&text),
            other => panic!("{name}: unknown corpus kind '{other}'"),
        }
        // Any file through every parser, too.
        every_parser(&text);
    }
}

#[test]
fn the_seed_corpus_gets_the_expected_answers() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hostile");
    let read = |name: &str| std::fs::read(dir.join(name)).expect(name);
    let rec = Recording::parse(&read("recording-time-1e300.jsonl")[..], "r").expect("plays");
    assert_eq!((rec.samples.len(), rec.skipped_samples), (1, 1));
    let rec = Recording::parse(&read("recording-clock-step.jsonl")[..], "r").expect("plays");
    assert_eq!((rec.samples.len(), rec.clock_steps), (4, 1));
    let e = Recording::parse(&read("recording-started-at-1e300.jsonl")[..], "r").unwrap_err();
    assert_eq!(
        e.to_string(),
        "r:1: started_at: 1e300 is out of range: expected a time between 1970-01-01 and \
         9999-12-31, as Unix seconds or RFC 3339"
    );
}

/// Keys the config and scenario parsers know, so that generated values reach their range
/// checks rather than stopping at "unknown key".
const REAL_KEYS: &[&str] = &[
    "interval",
    "slow-interval",
    "hang-timeout",
    "window",
    "listen",
    "max-connections",
    "max-event-streams",
    "idle-timeout",
    "request-timeout",
    "metrics-top-n",
    "metrics-floor",
    "memory_total",
    "memory_used",
    "pid",
    "used",
    "name",
    "uuid",
    "util",
    "temperature",
];

/// The first two lines (header, first sample) of a real H200 recording.
fn real_recording() -> (String, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/h200/leak-to-oom.recording.jsonl");
    let text = std::fs::read_to_string(path).expect("fixture");
    let mut lines = text.lines();
    (
        lines.next().expect("header").to_owned(),
        lines.next().expect("sample").to_owned(),
    )
}

/// A valid recording header followed by `lines`.
fn with_header(lines: &str) -> Vec<u8> {
    format!("{}\n{lines}", real_recording().0).into_bytes()
}

/// The real sample line with its top-level `taken_at` and `collect_seconds` written as `t` and
/// `c` (JSON number text).
fn line_with(t: &str, c: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(&real_recording().1).expect("json");
    // Markers no other field holds (a nested `slow.taken_at` is null too, and serde_json sorts
    // keys, so replacing a `null` would hit that one and leave the line unparsable).
    v["taken_at"] = "@TAKEN_AT@".into();
    v["collect_seconds"] = "@COLLECT@".into();
    serde_json::to_string(&v)
        .expect("json")
        .replacen("\"@TAKEN_AT@\"", t, 1)
        .replacen("\"@COLLECT@\"", c, 1)
}

/// A real sample line with its times drawn from the edges and a few bytes edited.
fn sample_line() -> impl Strategy<Value = String> {
    let number = prop_oneof![
        any::<f64>().prop_map(|v| if v.is_finite() {
            format!("{v:e}")
        } else {
            "1e999".into()
        }),
        Just("1e300".to_owned()),
        Just("-1".to_owned()),
        Just("253402300800".to_owned()),
        Just("18446744073709551616".to_owned()),
        (0.0..2e9f64).prop_map(|v| v.to_string()),
    ];
    let edits = prop::collection::vec(
        (
            any::<prop::sample::Index>(),
            "\\PC{0,6}|[0-9e.-]{0,6}",
            0usize..8,
        ),
        0..3,
    );
    (number.clone(), number, edits).prop_map(|(t, c, edits)| {
        let mut line = line_with(&t, &c);
        for (at, insert, delete) in edits {
            let mut i = at.index(line.len() + 1);
            while !line.is_char_boundary(i) {
                i -= 1;
            }
            let mut j = (i + delete).min(line.len());
            while !line.is_char_boundary(j) {
                j -= 1;
            }
            line.replace_range(i..j, &insert);
        }
        line
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics_any_parser(s in any::<String>()) {
        every_parser(&s);
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_recording_reader(
        head in any::<bool>(),
        bytes in prop::collection::vec(any::<u8>(), 0..2_000),
    ) {
        if head {
            let mut all = with_header("");
            all.extend_from_slice(&bytes);
            recording(&all);
        } else {
            recording(&bytes);
        }
    }

    #[test]
    fn the_generated_lines_reach_the_sample_fields(t in 0u32..2_000_000_000, c in 0u32..1000) {
        // Unedited and in range, a generated line is one sample at that time: the edges the
        // next test draws land in the fields the reader checks, not in an unparsable line.
        let line = line_with(&t.to_string(), &format!("{}", f64::from(c) / 1000.0));
        let rec = Recording::parse(with_header(&(line + "\n")).as_slice(), "fuzz").expect("parses");
        prop_assert_eq!(rec.samples.len(), 1);
        prop_assert!((rec.samples[0].taken_at - f64::from(t)).abs() < 1e-6);
    }

    #[test]
    fn sample_lines_from_the_edges_never_panic(lines in prop::collection::vec(sample_line(), 0..8)) {
        recording(&with_header(&(lines.join("\n") + "\n")));
    }

    #[test]
    fn toml_shaped_text_never_panics(
        keys in prop::collection::vec((prop_oneof![
            "[a-z_-]{1,20}",
            prop::sample::select(REAL_KEYS).prop_map(str::to_owned),
        ], "-?[0-9]{1,30}(\\.[0-9]{0,5})?(e[0-9]{1,3})?|\"\\PC{0,20}\"|nan|inf|-inf"), 0..8),
        section in "sampling|daemon|detect|alerts|history|display|gpu|gpu.process|\\PC{0,6}",
    ) {
        let body = keys.iter().fold(String::new(), |mut b, (k, v)| {
            let _ = writeln!(b, "{k} = {v}");
            b
        });
        config(&format!("[{section}]\n{body}"));
        scenario(&format!("[[gpu]]\nmemory_total = \"80GiB\"\n{body}"));
        scenario(&format!("[[gpu]]\nmemory_total = \"80GiB\"\n[[gpu.process]]\npid = 1\n{body}"));
    }

    #[test]
    fn event_streams_never_panic(
        lines in prop::collection::vec("(event|data|id|retry|:)?:? ?\\PC{0,40}\r?\n?", 0..20),
    ) {
        sse(&lines.concat());
    }
}
