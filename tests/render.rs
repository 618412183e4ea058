//! Whole-output snapshots of `snapshot`'s table and JSON, built from scripted samples at a fixed
//! moment, so they are deterministic. Review changes with `cargo insta review`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuwatch::model::{Frame, ProcSample};
use gpuwatch::output::{json, table};
use gpuwatch::source::GpuSource;
use gpuwatch::source::scripted::{DEMO_START, ScriptedSource};
use gpuwatch::watch::WatchSet;
use scenario::Scenario;

/// 2026-11-29T12:00:00Z
const NOW: u64 = 1_795_953_600;

fn frame(source: &ScriptedSource, t: f64) -> Frame {
    Frame {
        seq: 1,
        source: Arc::new(source.info()),
        sample: source.sample_at(t, NOW as f64),
        published: Instant::now(),
        interval: Duration::from_secs(1),
        host: None,
    }
}

fn render(frame: &Frame, width: Option<usize>) -> String {
    let set = WatchSet::new(Vec::new(), frame.source.me.clone());
    let watched = |p: &ProcSample| set.matches(&p.host, p.pid, &|_| None);
    table::render(
        frame,
        &watched,
        NOW,
        &table::TableOptions {
            width,
            ..table::TableOptions::default()
        },
    )
}

#[test]
fn demo_table() {
    let demo = ScriptedSource::demo().expect("demo");
    insta::assert_snapshot!(render(&frame(&demo, DEMO_START), None));
}

#[test]
fn demo_table_at_80_columns() {
    let demo = ScriptedSource::demo().expect("demo");
    let text = render(&frame(&demo, DEMO_START), Some(80));
    for line in text.lines() {
        assert!(
            line.chars().count() <= 80,
            "line longer than 80 columns: {line}"
        );
    }
    insta::assert_snapshot!(text);
}

#[test]
fn unavailable_values_and_a_lost_gpu() {
    let sc = Scenario::parse(
        r#"
[[gpu]]
name = "NVIDIA A100-SXM4-80GB"
memory_total = "81920MiB"
memory_reserved = "0"
faults.not_supported = ["power", "temperature", "process-utilization"]
faults.no_permission = ["power-limit"]
[[gpu.process]]
pid = 4242
used = "20GiB"
used_unavailable = true
host = { user = "dana", command = "python serve.py" }
[[gpu.process]]
pid = 4343
used = "1GiB"
host = { hidden = true }
[[gpu]]
memory_total = "81920MiB"
lost_at = 0
"#,
    )
    .expect("valid");
    let src = ScriptedSource::new(sc, "faults");
    let f = frame(&src, 1.0);
    insta::assert_snapshot!(render(&f, None));
    let set = WatchSet::new(Vec::new(), Some("dana".into()));
    let watched = |p: &ProcSample| set.matches(&p.host, p.pid, &|_| None);
    let mut snap = serde_json::to_value(json::snapshot(&f, &[], &watched, NOW)).expect("json");
    snap["age_seconds"] = serde_json::json!(0.0);
    insta::assert_json_snapshot!(snap);
}
