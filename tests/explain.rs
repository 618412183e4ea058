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
    assert_eq!(json["case"], "Fragmentation");
    let facts = &json["analysis"]["failure"];
    assert!(
        facts.to_string().contains("61793841971"),
        "57.55 GiB exactly: {facts}"
    );
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
        json["analysis"]["failure"]["OutOfMemory"]["processes"]
            .as_array()
            .map(Vec::len),
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
