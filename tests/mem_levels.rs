//! One set of memory levels: the snapshot table, the dashboard and the cluster overview colour
//! the same numbers the same way (ok green, warning yellow, critical red), at the lines of the
//! `[detect]` near-capacity rule, and move together when those lines are configured.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuwatch::cluster::query::ClusterRow;
use gpuwatch::cluster::{ClusterState, view as cluster_view};
use gpuwatch::detect::{MemLevel, MemLevels, Rules};
use gpuwatch::model::{Frame, ProcSample};
use gpuwatch::output::table;
use gpuwatch::source::GpuSource;
use gpuwatch::source::scripted::ScriptedSource;
use gpuwatch::tui::state::Command;
use gpuwatch::tui::theme::Theme;
use gpuwatch::tui::view::{Context, render};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::style::Color;
use scenario::Scenario;

const GIB: u64 = 1 << 30;
const NOW: f64 = 1_795_953_600.0;

fn frame(used_gib: u64, total_gib: u64) -> Frame {
    let sc = Scenario::parse(&format!(
        "[[gpu]]\nuuid = \"GPU-level-0\"\nmemory_total = \"{total_gib}GiB\"\n\
         base_used = \"{used_gib}GiB\"\n"
    ))
    .expect("scenario");
    let src = ScriptedSource::new(sc, "levels");
    Frame {
        seq: 1,
        source: Arc::new(src.info()),
        sample: src.sample_at(0.0, NOW),
        published: Instant::now(),
        interval: Duration::from_secs(1),
        host: None,
    }
}

fn level_of(c: Color) -> Option<MemLevel> {
    match c {
        Color::Green => Some(MemLevel::Ok),
        Color::Yellow => Some(MemLevel::Warning),
        Color::Red => Some(MemLevel::Critical),
        _ => None,
    }
}

/// The snapshot table's bar colour (its ANSI code before the first `█`).
fn table_level(f: &Frame, levels: MemLevels) -> MemLevel {
    let text = table::render(
        f,
        &|_: &ProcSample| false,
        NOW as u64,
        &table::TableOptions {
            color: true,
            mem_levels: levels,
            ..table::TableOptions::default()
        },
    );
    let bar = text.find('█').expect("a bar");
    let code = text[..bar].rfind("\x1b[").expect("a colour");
    match &text[code..bar] {
        "\x1b[32m" => MemLevel::Ok,
        "\x1b[33m" => MemLevel::Warning,
        "\x1b[31m" => MemLevel::Critical,
        other => panic!("unexpected colour {other:?} in {text}"),
    }
}

/// The dashboard's colour of the GPU panel's `used/total` text.
fn dashboard_level(f: &Frame, levels: MemLevels) -> Option<MemLevel> {
    let mut st = common::ui_state(None, false);
    st.on_frame(Arc::new(f.clone()));
    st.update(Command::Resize(120, 30));
    let ctx = Context {
        now: NOW,
        mono: f.published,
        theme: Theme::new(true).with_mem_levels(levels),
    };
    let mut term = Terminal::new(TestBackend::new(120, 30)).expect("terminal");
    term.draw(|fr| render(fr, &st, &ctx)).expect("draw");
    let buf = term.backend().buffer();
    let m = f.sample.gpus[0].memory.expect("memory");
    let needle = format!("{}/", gpuwatch::output::fmt_bytes(m.used));
    for y in 0..buf.area.height {
        let line: String = (0..buf.area.width).map(|x| buf[(x, y)].symbol()).collect();
        if let Some(byte) = line.find(&needle) {
            let x = line[..byte].chars().count() as u16;
            return level_of(buf[(x, y)].fg);
        }
    }
    panic!("no '{needle}' on the dashboard");
}

/// The cluster overview's bar colour.
fn cluster_level(used: u64, total: u64, levels: MemLevels) -> Option<MemLevel> {
    let mut st = ClusterState::new("http://prom:9090");
    st.rows = vec![ClusterRow {
        host: "h".into(),
        instance: "h:9400".into(),
        gpu: "0".into(),
        uuid: "GPU-level-0".into(),
        mem_used: Some(used),
        mem_total: Some(total),
        up: true,
        ..ClusterRow::default()
    }];
    let mut term = Terminal::new(TestBackend::new(140, 10)).expect("terminal");
    term.draw(|fr| cluster_view::render(fr, &st, Theme::new(true).with_mem_levels(levels)))
        .expect("draw");
    let buf = term.backend().buffer();
    for y in 0..buf.area.height {
        for x in 0..buf.area.width {
            if buf[(x, y)].symbol() == "█" {
                return level_of(buf[(x, y)].fg);
            }
        }
    }
    panic!("no bar in the cluster overview");
}

#[test]
fn the_three_front_ends_colour_memory_by_the_same_levels() {
    let custom = MemLevels::from(&Rules {
        near_capacity_warn: 0.5,
        near_capacity_critical: 0.7,
        ..Rules::default()
    });
    // (used, total) in GiB: the level at the defaults (90 %, 97 %, 2 GiB free) and at 50/70 %.
    let cases = [
        (10, 100, MemLevel::Ok, MemLevel::Ok),
        (60, 100, MemLevel::Ok, MemLevel::Warning),
        (80, 100, MemLevel::Ok, MemLevel::Critical),
        (92, 100, MemLevel::Warning, MemLevel::Critical),
        (98, 100, MemLevel::Critical, MemLevel::Critical),
        // A small card: 1 GiB free is under the 2 GiB headroom.
        (3, 4, MemLevel::Warning, MemLevel::Critical),
        (2, 5, MemLevel::Ok, MemLevel::Ok),
    ];
    for (used, total, at_defaults, at_custom) in cases {
        let f = frame(used, total);
        for (levels, want) in [(MemLevels::default(), at_defaults), (custom, at_custom)] {
            let m = f.sample.gpus[0].memory.expect("memory");
            assert_eq!(levels.of(Some(m)), Some(want), "{used}/{total} GiB");
            assert_eq!(table_level(&f, levels), want, "table {used}/{total}");
            assert_eq!(
                dashboard_level(&f, levels),
                Some(want),
                "dashboard {used}/{total}"
            );
            assert_eq!(
                cluster_level(used * GIB, total * GIB, levels),
                Some(want),
                "cluster {used}/{total}"
            );
        }
    }
}

/// The bar colour `snapshot --color always` prints on the NVML double.
fn snapshot_bar_colour(sc: &common::ScenarioFile, config: Option<&str>) -> String {
    let mut cmd = common::gpuwatch_cmd(sc);
    if let Some(text) = config {
        let path = sc.dir.path().join("levels.toml");
        std::fs::write(&path, text).expect("write config");
        cmd.arg("--config").arg(path);
    }
    let o = cmd
        .env_remove("NO_COLOR")
        .args(["--color", "always", "snapshot"])
        .output()
        .expect("gpuwatch runs");
    let text = common::stdout(&o);
    assert!(o.status.success(), "{}", common::stderr(&o));
    let bar = text.find('█').expect("a bar");
    let code = text[..bar].rfind("\x1b[").expect("a colour");
    text[code..bar].to_string()
}

#[test]
fn the_detect_section_of_the_config_file_moves_the_snapshot_colours() {
    let sc = common::ScenarioFile::new(
        "[[gpu]]\nmemory_total = \"100GiB\"\nmemory_reserved = \"0GiB\"\nbase_used = \"65GiB\"\n",
    );
    assert_eq!(
        snapshot_bar_colour(&sc, None),
        "\x1b[32m",
        "65 % is ok at the defaults"
    );
    let warn = "[detect]\nnear-capacity-warn = 60\nnear-capacity-critical = 80\n";
    assert_eq!(
        snapshot_bar_colour(&sc, Some(warn)),
        "\x1b[33m",
        "a warning at 60 %"
    );
    let critical = "[detect]\nnear-capacity-warn = 55\nnear-capacity-critical = 65\n";
    assert_eq!(
        snapshot_bar_colour(&sc, Some(critical)),
        "\x1b[31m",
        "critical at 65 %"
    );
}
