//! The public triage corpus: real error texts copied from public bug reports, one per file under
//! `tests/fixtures/triage/public/<set>/`, each with a header that names its source thread and
//! what a human reader says killed the run (see the corpus's README.md).
//!
//! The classifier's patterns were tuned on `tune/`; `holdout/` was kept aside; `fresh/`,
//! `blind/`, `final/` and `last/` were each collected later from new threads and measured once
//! before being read (`last/` never was). Each set's class accuracy and exact-number rate are
//! asserted here, and printed (`cargo test --test triage_public -- --nocapture`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use gpuwatch::triage::{Failure, OomFacts, analyze};

/// One corpus file.
struct Case {
    name: String,
    source: String,
    kind: String,
    cause: Option<String>,
    facts: Vec<(String, String)>,
    text: String,
}

const KINDS: &[&str] = &[
    "out_of_memory",
    "device_mismatch",
    "shape_mismatch",
    "unknown",
    "device_side_assert",
    "illegal_memory_access",
    "launch_failure",
    "nccl_error",
    "nccl_timeout",
    "no_gpu",
    "not_compiled_with_cuda",
    "cuda_deserialize",
    "driver_too_old",
    "no_kernel_image",
    "ecc_error",
    "invalid_device_ordinal",
    "device_busy",
    "cuda_init",
    "cudnn_error",
    "cublas_error",
    "dtype_mismatch",
    "index_out_of_range",
    "host_out_of_memory",
    "shared_memory",
    "state_dict_keys",
];

fn dir(split: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/triage/public")
        .join(split)
}

fn load(split: &str) -> Vec<Case> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir(split))
        .unwrap_or_else(|e| panic!("{split}: {e}"))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    paths.sort();
    paths.iter().map(|p| parse(p)).collect()
}

fn parse(path: &Path) -> Case {
    let name = format!(
        "{}/{}",
        path.parent()
            .and_then(Path::file_name)
            .unwrap_or_default()
            .to_string_lossy(),
        path.file_name().unwrap_or_default().to_string_lossy()
    );
    let raw = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{name}: {e}"));
    let (head, text) = raw
        .split_once("\n---\n")
        .unwrap_or_else(|| panic!("{name}: no `---` line after the header"));
    let mut case = Case {
        name: name.clone(),
        source: String::new(),
        kind: String::new(),
        cause: None,
        facts: Vec::new(),
        text: text.to_string(),
    };
    for line in head.lines() {
        let (key, value) = line
            .split_once(':')
            .unwrap_or_else(|| panic!("{name}: header line without `key:`: {line}"));
        let value = value.trim().to_string();
        match key.trim() {
            "source" => case.source = value,
            "kind" => case.kind = value,
            "cause" => case.cause = Some(value),
            "framework" | "version" | "note" => {}
            k if k.starts_with("fact.") => case.facts.push((k["fact.".len()..].to_string(), value)),
            k => panic!("{name}: unknown header key {k:?}"),
        }
    }
    case
}

/// A size as printed, in bytes, and half its last printed digit (what rounding to the printed
/// precision can hide): binary units whatever the label (`GB` is what some frameworks print for
/// GiB). An exact count in parentheses (`1.51G (1617277696 bytes)`) is the figure. Independent
/// of the crate's own parser.
fn bytes(printed: &str) -> Option<(u64, u64)> {
    let t = printed.trim();
    if let Some((_, inner)) = t.split_once('(') {
        let inner = inner.trim_end_matches(')').trim();
        let digits = inner.trim_end_matches("bytes").trim_end_matches('B').trim();
        if let Ok(n) = digits.replace(',', "").parse::<u64>() {
            return Some((n, 0));
        }
    }
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(end);
    let num: String = num.chars().filter(|c| *c != ',').collect();
    let unit: u128 = match unit.trim().trim_end_matches('.') {
        "" | "B" | "bytes" | "byte" => 1,
        "K" | "KB" | "KiB" | "kB" => 1 << 10,
        "M" | "MB" | "MiB" => 1 << 20,
        "G" | "GB" | "GiB" => 1 << 30,
        "T" | "TB" | "TiB" => 1 << 40,
        _ => return None,
    };
    let (int, frac) = num.split_once('.').unwrap_or((&num, ""));
    let int: u128 = int.parse().ok()?;
    let scale = 10u128.pow(u32::try_from(frac.len()).ok()?);
    let frac: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    let value = u64::try_from(int * unit + (frac * unit + scale / 2) / scale).ok()?;
    let slack = u64::try_from(unit / scale / 2).ok()?;
    Some((value, slack))
}

/// The numbers of a shape list as printed (`64x9216 ; [128, 10]` → [[64, 9216], [128, 10]]),
/// `None`/`?` as 0.
fn dims(list: &str) -> Vec<Vec<u64>> {
    list.split(';')
        .map(|s| {
            s.replace("None", " 0 ")
                .replace('?', " 0 ")
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|w| w.parse().ok())
                .collect()
        })
        .collect()
}

/// Compares one stated fact with what the classifier read; `Err` says how it differs.
fn check_oom_fact(f: &OomFacts, key: &str, value: &str) -> Result<(), String> {
    let got = match key {
        "gpu" => {
            let want = value.parse::<u32>().ok();
            return if f.gpu == want {
                Ok(())
            } else {
                Err(format!("gpu: want {value}, got {:?}", f.gpu))
            };
        }
        "requested" => f.requested,
        "total" => f.total,
        "free" => f.free,
        "allocated" | "in_use" => f.allocated,
        "reserved" => f.reserved,
        // 1.0-1.3's "cached" is the cache alone (amount cached - amount allocated): 2.x's
        // "reserved by PyTorch but unallocated".
        "reserved_unallocated" | "cached" => f.reserved_unallocated,
        "process_total" => f.process_total,
        "allowed" => f.allowed,
        "limit" => f.limit,
        k if k.starts_with("other.") => {
            let pid: u32 = k["other.".len()..]
                .parse()
                .map_err(|_| format!("bad pid in {k}"))?;
            f.processes.iter().find(|(p, _)| *p == pid).map(|(_, b)| *b)
        }
        k => return Err(format!("unknown fact {k}")),
    };
    let (want, slack) =
        bytes(value).ok_or_else(|| format!("{key}: cannot read {value:?} as a size"))?;
    if got.is_some_and(|g| g.abs_diff(want) <= slack) {
        Ok(())
    } else {
        Err(format!("{key}: want {value} = {want}, got {got:?}"))
    }
}

struct Score {
    files: usize,
    class_ok: usize,
    /// OOM texts whose header names a cause, and those the diagnosis agrees with.
    causes: usize,
    cause_ok: usize,
    oom_with_numbers: usize,
    oom_numbers_ok: usize,
    misses: Vec<String>,
}

fn score(split: &str) -> Score {
    let mut s = Score {
        files: 0,
        class_ok: 0,
        causes: 0,
        cause_ok: 0,
        oom_with_numbers: 0,
        oom_numbers_ok: 0,
        misses: Vec::new(),
    };
    for case in load(split) {
        s.files += 1;
        let a = analyze(&case.text);
        // `explain` reads a file through `scan` (a reader, line by line): the same analysis.
        let streamed = gpuwatch::triage::scan(case.text.as_bytes()).expect("reads");
        assert_eq!(
            streamed.failure, a.failure,
            "{}: scan and analyze differ",
            case.name
        );
        let got = a.failure.kind();
        if got == case.kind {
            s.class_ok += 1;
        } else {
            s.misses.push(format!(
                "{}: class: want {}, got {got}",
                case.name, case.kind
            ));
        }
        if let Some(want) = &case.cause {
            s.causes += 1;
            let d = gpuwatch::triage::diagnose(&a, None);
            // The corpus says `other_process`; the schema `other_processes`.
            let got = d.case.cause().unwrap_or("-");
            if got == want || (got, want.as_str()) == ("other_processes", "other_process") {
                s.cause_ok += 1;
            } else {
                s.misses.push(format!(
                    "{}: cause: want {want}, got {got} ({})",
                    case.name,
                    d.reasoning.unwrap_or_default()
                ));
            }
        }
        let sizes: Vec<&(String, String)> = case
            .facts
            .iter()
            .filter(|(k, _)| k != "shapes" && k != "devices")
            .collect();
        if case.kind == "out_of_memory" && !sizes.is_empty() {
            s.oom_with_numbers += 1;
            let errs: Vec<String> = match &a.failure {
                Failure::OutOfMemory(f) => sizes
                    .iter()
                    .filter_map(|(k, v)| check_oom_fact(f, k, v).err())
                    .collect(),
                _ => vec!["not read as an OOM".into()],
            };
            if errs.is_empty() {
                s.oom_numbers_ok += 1;
            } else {
                s.misses
                    .push(format!("{}: numbers: {}", case.name, errs.join("; ")));
            }
        }
        for (k, v) in &case.facts {
            let shown = match (&a.failure, k.as_str()) {
                (Failure::ShapeMismatch(f), "shapes") => Some(f.shapes.join(" ; ")),
                (Failure::DeviceMismatch(f), "devices") => Some(f.devices.join(" ; ")),
                _ => None,
            };
            if let Some(shown) = shown
                && dims(&shown) != dims(v)
                && k == "shapes"
            {
                s.misses.push(format!(
                    "{}: shapes: want {v}, got {shown} (not scored)",
                    case.name
                ));
            }
        }
    }
    s
}

fn pct(a: usize, b: usize) -> f64 {
    if b == 0 {
        100.0
    } else {
        a as f64 * 100.0 / b as f64
    }
}

fn report(split: &str, s: &Score) -> String {
    let mut out = format!(
        "{split}: class {}/{} = {:.1} %; OOM texts with every number exact {}/{} = {:.1} %; \
         cause as labelled {}/{}\n",
        s.class_ok,
        s.files,
        pct(s.class_ok, s.files),
        s.oom_numbers_ok,
        s.oom_with_numbers,
        pct(s.oom_numbers_ok, s.oom_with_numbers),
        s.cause_ok,
        s.causes
    );
    for m in &s.misses {
        let _ = writeln!(out, "  {m}");
    }
    out
}

#[test]
fn every_file_names_its_source_and_a_known_kind() {
    for split in ["tune", "holdout", "fresh", "blind", "final", "last"] {
        let cases = load(split);
        assert!(cases.len() >= 75, "{split}: {} files", cases.len());
        for c in cases {
            assert!(
                c.source.starts_with("https://"),
                "{}: source {:?}",
                c.name,
                c.source
            );
            assert!(
                KINDS.contains(&c.kind.as_str()),
                "{}: kind {:?}",
                c.name,
                c.kind
            );
            assert!(!c.text.trim().is_empty(), "{}: no text", c.name);
        }
    }
    // The kinds the classifier can say are the kinds the corpus may name.
    for k in gpuwatch::triage::KnownFailure::ALL {
        assert!(KINDS.contains(&k.kind()), "{}", k.kind());
    }
}

#[test]
fn the_sizes_are_read_as_printed() {
    assert_eq!(bytes("20.00 MiB"), Some((20 << 20, 5242)));
    assert_eq!(bytes("1.95GiB"), Some((2_093_796_557, 5_368_709)));
    assert_eq!(bytes("8589934592 bytes"), Some((8_589_934_592, 0)));
    assert_eq!(bytes("256.0KiB"), Some((256 << 10, 51)));
    assert_eq!(bytes("1.51G (1617277696 bytes)"), Some((1_617_277_696, 0)));
    assert_eq!(
        dims("64x9216 ; [128, 10]"),
        vec![vec![64, 9216], vec![128, 10]]
    );
    assert_eq!(dims("(None, 65536)"), vec![vec![0, 65536]]);
}

/// Scores one set, prints its report, and asserts it stands where it stood: at least `class` %
/// of its texts classified as labelled, and every number exact in at least `numbers` % of its
/// out-of-memory texts. The bar is 98 % and 95 %.
fn holds(split: &str, class: f64, numbers: f64) {
    let s = score(split);
    let text = report(split, &s);
    println!("{text}");
    assert!(pct(s.class_ok, s.files) >= class, "{text}");
    assert!(
        pct(s.oom_numbers_ok, s.oom_with_numbers) >= numbers,
        "{text}"
    );
}

/// Tuned on.
#[test]
fn the_tune_half() {
    holds("tune", 99.0, 97.0);
}

/// Kept aside; the first run listed its misses by file name, and six families they named were
/// then fixed (see the CHANGELOG).
#[test]
fn the_holdout_half() {
    holds("holdout", 98.0, 95.0);
}

// Each set below was collected from threads none of the sets before it comes from and measured
// once unread (the figures are in the CHANGELOG); fresh/, blind/ and final/ were then read and
// their misses' families fixed.

#[test]
fn the_fresh_set() {
    holds("fresh", 98.0, 95.0);
}

#[test]
fn the_blind_set() {
    holds("blind", 99.0, 90.0);
}

#[test]
fn the_final_set() {
    holds("final", 99.0, 96.0);
}

/// Collected after every change to the classifier, measured once and not read: its figure is
/// what the classifier does on texts nobody tuned it on.
#[test]
fn the_last_set() {
    holds("last", 92.0, 91.0);
}
