//! `gpuwatch explain [FILE|-] [--json]`: the diagnosis of a saved log, offline, on the real
//! messages in `tests/fixtures/triage/`.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{fails_with, gpuwatch_bin};

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/triage")
        .join(name)
}

fn explain(args: &[&str], stdin: Option<&[u8]>) -> std::process::Output {
    let mut child = Command::new(gpuwatch_bin())
        .arg("explain")
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    if let Some(bytes) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        // A writer thread: the child may read slower than we write.
        let bytes = bytes.to_vec();
        std::thread::spawn(move || {
            let _ = pipe.write_all(&bytes);
        });
    }
    child.wait_with_output().expect("exits")
}

#[test]
fn a_saved_log_gets_the_diagnosis_in_text_and_json() {
    let path = fixture("oom-torch-2.11-fragmentation-real.txt");
    let out = explain(&[path.to_str().unwrap()], None);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let text = common::stdout(&out);
    assert!(
        text.starts_with("Out of memory on GPU 0 from fragmentation"),
        "{text}"
    );
    assert!(text.contains("expandable_segments:True"), "{text}");

    let out = explain(&["--json", path.to_str().unwrap()], None);
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json["schema_version"], 1);
    assert_eq!(json["kind"], "out_of_memory");
    assert_eq!(json["cause"], "fragmentation");
    assert_eq!(json["framework"], "pytorch");
    assert_eq!(json["confidence"], "certain");
    // 57.55 GiB exactly, named.
    assert_eq!(
        json["facts"]["reserved_unallocated_bytes"],
        61_793_841_971_u64
    );
    assert_eq!(json["facts"]["requested_bytes"], 1u64 << 30);
    assert!(
        json["reasoning"]
            .as_str()
            .is_some_and(|r| r.contains("57.55 GiB") && r.contains("fragmentation")),
        "{json}"
    );
    assert_eq!(json["fixes"][0]["order"], 1);
}

#[test]
fn standard_input_and_dash_read_the_same() {
    let text = std::fs::read(fixture("shape-matmul-real.txt")).expect("fixture");
    let a = explain(&[], Some(&text));
    let b = explain(&["-"], Some(&text));
    assert!(a.status.success(), "{}", common::stderr(&a));
    assert_eq!(a.stdout, b.stdout);
    assert!(common::stdout(&a).to_lowercase().contains("shape"));
}

#[test]
fn the_error_at_the_end_of_a_long_noisy_log_is_found() {
    // 20 MiB of training chatter, a 1 MiB line without a newline's worth of sense and invalid
    // UTF-8, then the real OOM: found, and in bounded memory (the scanner keeps a window).
    let mut log = Vec::with_capacity(22 << 20);
    for i in 0..300_000 {
        writeln!(log, "step {i}: loss 0.{i:05} lr 3e-4 tokens/s 181234").unwrap();
    }
    log.extend(std::iter::repeat_n(b'x', 1 << 20));
    log.extend_from_slice(b"\n\xff\xfe garbage \xc3\n");
    log.extend(std::fs::read(fixture("oom-torch-2.11-others-real.txt")).expect("fixture"));
    let out = explain(&["--json"], Some(&log));
    assert!(out.status.success(), "{}", common::stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        json["facts"]["other_processes"].as_array().map(Vec::len),
        Some(2),
        "{json}"
    );
}

#[test]
fn bad_paths_get_clear_errors() {
    fails_with(
        &explain(&["/no/such/log.txt"], None),
        2,
        "cannot read the log '/no/such/log.txt'",
    );
    let dir = tempfile::tempdir().expect("tmp");
    fails_with(
        &explain(&[dir.path().to_str().unwrap()], None),
        2,
        "is a directory",
    );
}

/// The documented schema (`docs/explain-json.md`): every field of its tables, with its type.
fn documented_fields() -> Vec<(String, String)> {
    let doc = include_str!("../docs/explain-json.md");
    doc.lines()
        .filter_map(|l| {
            // | `field` | type | meaning |, where a type's alternatives are `\|`-escaped.
            let l = l.replace("\\|", "\u{a6}");
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let field = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            let ty = cells.get(2)?.replace('\u{a6}', "|");
            Some((field.to_string(), ty))
        })
        .collect()
}

/// The values a doc line lists for a field: every `snake_case` word in backticks after it.
fn documented_values(doc: &str, field: &str) -> Vec<String> {
    let line = doc
        .lines()
        .find(|l| l.starts_with(&format!("| `{field}` |")))
        .unwrap_or_else(|| panic!("no row for {field}"));
    line.split('`')
        .skip(3)
        .step_by(2)
        .filter(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .map(str::to_string)
        .collect()
}

fn has_type(v: &serde_json::Value, ty: &str) -> bool {
    ty.split('|').map(str::trim).any(|t| match t {
        "null" => v.is_null(),
        "integer" => v.is_u64() || v.is_i64(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        t if t.starts_with("array of ") => v.as_array().is_some_and(|a| {
            let inner = &t["array of ".len()..];
            a.iter().all(|e| match inner {
                "string" => e.is_string(),
                "integer" => e.is_u64(),
                _ => e.is_object(),
            })
        }),
        other => panic!("unknown documented type {other:?}"),
    })
}

/// Checks one object against the rows `prefix.*` of the doc: the same field names, each of
/// its documented type.
fn check_object(json: &serde_json::Value, fields: &[(String, String)], prefix: &str, what: &str) {
    let obj = json
        .as_object()
        .unwrap_or_else(|| panic!("{what}: {prefix} is not an object"));
    let rows: Vec<(&str, &str)> = fields
        .iter()
        .filter_map(|(f, t)| {
            let rest = if prefix.is_empty() {
                (!f.contains('.')).then_some(f.as_str())
            } else {
                f.strip_prefix(prefix)
            }?;
            Some((rest, t.as_str()))
        })
        .collect();
    let mut documented: Vec<&str> = rows.iter().map(|(f, _)| *f).collect();
    let mut printed: Vec<&str> = obj.keys().map(String::as_str).collect();
    documented.sort_unstable();
    printed.sort_unstable();
    assert_eq!(printed, documented, "{what}: the fields of {prefix:?}");
    for (field, ty) in rows {
        assert!(
            has_type(&obj[field], ty),
            "{what}: {prefix}{field} = {} is not {ty}",
            obj[field]
        );
    }
}

#[test]
fn the_json_follows_its_documented_schema() {
    let doc = include_str!("../docs/explain-json.md");
    let fields = documented_fields();
    assert!(fields.len() > 30, "{fields:?}");
    let kinds: Vec<String> = doc
        .split("### kind")
        .nth(1)
        .and_then(|s| s.split("## facts").next())
        .expect("a kind section")
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    let causes = documented_values(doc, "cause");
    let frameworks = documented_values(doc, "framework");
    let confidences = documented_values(doc, "confidence");
    let shape_kinds = documented_values(doc, "shape.kind");
    // Every kind the classifier can say is documented.
    for k in gpuwatch::triage::KnownFailure::ALL {
        assert!(
            kinds.iter().any(|d| d == k.kind()),
            "{} undocumented",
            k.kind()
        );
    }
    let mut seen_kinds = std::collections::BTreeSet::new();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/triage");
    let mut paths = Vec::new();
    for dir in [root.clone(), root.join("public/tune")] {
        for e in std::fs::read_dir(dir).expect("dir") {
            let p = e.expect("entry").path();
            if p.is_file() {
                paths.push(p);
            }
        }
    }
    paths.sort();
    for path in &paths {
        let what = path.display().to_string();
        let out = explain(&["--json", path.to_str().unwrap()], None);
        assert!(out.status.success(), "{what}: {}", common::stderr(&out));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        check_object(&json, &fields, "", &what);
        check_object(&json["facts"], &fields, "facts.", &what);
        for p in json["facts"]["other_processes"].as_array().expect("array") {
            assert!(p["pid"].is_u64() && p["bytes"].is_u64(), "{what}: {p}");
        }
        if !json["shape"].is_null() {
            check_object(&json["shape"], &fields, "shape.", &what);
            let k = json["shape"]["kind"].as_str().expect("kind");
            assert!(shape_kinds.iter().any(|d| d == k), "{what}: shape kind {k}");
        }
        if !json["device"].is_null() {
            check_object(&json["device"], &fields, "device.", &what);
        }
        for (i, fix) in json["fixes"].as_array().expect("fixes").iter().enumerate() {
            check_object(fix, &fields, "fixes[].", &what);
            assert_eq!(fix["order"], i + 1, "{what}");
        }
        let kind = json["kind"].as_str().expect("kind");
        assert!(
            kinds.iter().any(|d| d == kind),
            "{what}: kind {kind} undocumented"
        );
        seen_kinds.insert(kind.to_string());
        assert!(
            confidences.iter().any(|c| json["confidence"] == c.as_str()),
            "{what}: {}",
            json["confidence"]
        );
        if kind == "out_of_memory" {
            assert!(causes.iter().any(|c| json["cause"] == c.as_str()), "{what}");
            assert!(
                frameworks.iter().any(|f| json["framework"] == f.as_str()),
                "{what}"
            );
        } else {
            assert!(
                json["cause"].is_null() && json["framework"].is_null(),
                "{what}"
            );
        }
    }
    // The corpus exercises the kinds that carry objects, and more.
    for k in [
        "out_of_memory",
        "shape_mismatch",
        "device_mismatch",
        "unknown",
    ] {
        assert!(seen_kinds.contains(k), "{k} never printed: {seen_kinds:?}");
    }
    assert!(seen_kinds.len() >= 15, "{seen_kinds:?}");
}
