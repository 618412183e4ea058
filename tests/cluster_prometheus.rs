//! The cluster overview (`gpuwatch tui --prometheus URL`): its view rendered into ratatui's
//! `TestBackend` from fixed rows, and its query layer against a real Prometheus server
//! (Debian's `prometheus` package; `.ci/run` installs it) scraping two daemons on loopback.

mod common;

use std::fmt::Write as _;
use std::time::{Duration, Instant, SystemTime};

use common::{
    Daemon, ScenarioFile, Sleeper, fails_with, free_port, gpuwatch_cmd, query, start_prometheus,
    stderr, stdout,
};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use gpuwatch::cluster::{
    Action, ClusterRow, ClusterState, PromClient, SortKey, overview, plain_table, view,
};
use gpuwatch::tui::theme::Theme;
use ratatui::Terminal;
use ratatui::backend::TestBackend;

const GIB: u64 = 1 << 30;

fn fixed_rows() -> Vec<ClusterRow> {
    vec![
        ClusterRow {
            host: "gpu-07".into(),
            instance: "10.0.0.7:9400".into(),
            gpu: "0".into(),
            uuid: "GPU-a0".into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            mem_used: Some(78 * GIB),
            mem_total: Some(80 * GIB),
            util: Some(97.0),
            top_process: Some(("python".into(), 70 * GIB)),
            external: Some(8 * GIB),
            time_to_full: Some(1500.0),
            alerts: vec!["GpuMemoryCritical".into()],
            up: true,
        },
        ClusterRow {
            host: "gpu-07".into(),
            instance: "10.0.0.7:9400".into(),
            gpu: "1".into(),
            uuid: "GPU-a1".into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            mem_used: Some(0),
            mem_total: Some(80 * GIB),
            util: Some(0.0),
            up: true,
            ..ClusterRow::default()
        },
        ClusterRow {
            host: "gpu-08".into(),
            instance: "10.0.0.8:9400".into(),
            gpu: "0".into(),
            uuid: "GPU-b0".into(),
            name: "NVIDIA A100-SXM4-40GB".into(),
            mem_used: Some(12 * GIB),
            mem_total: Some(40 * GIB),
            util: None,
            top_process: Some(("pid 4242".into(), 12 * GIB)),
            external: Some(0),
            up: true,
            ..ClusterRow::default()
        },
        ClusterRow {
            host: "10.0.0.9:9400".into(),
            instance: "10.0.0.9:9400".into(),
            alerts: vec!["GpuwatchDown".into()],
            up: false,
            ..ClusterRow::default()
        },
    ]
}

/// 2026-11-29T12:00:05Z
fn at() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_953_605)
}

fn screen(state: &ClusterState, w: u16, h: u16) -> String {
    let mut term = Terminal::new(TestBackend::new(w, h)).expect("terminal");
    term.draw(|f| view::render(f, state, Theme::new(false)))
        .expect("draw");
    let buf = term.backend().buffer().clone();
    let mut out = String::new();
    for y in 0..h {
        let line: String = (0..w).map(|x| buf[(x, y)].symbol().to_string()).collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn key(c: KeyCode) -> KeyEvent {
    KeyEvent::new(c, KeyModifiers::NONE)
}

#[test]
fn overview_renders_rows_and_marks_stale_data() {
    let mut st = ClusterState::new("http://prom:9090");
    st.on_result(Ok(fixed_rows()), at());
    insta::assert_snapshot!("cluster_overview", screen(&st, 140, 9));
    // A failed refresh keeps the rows, says why and marks them stale.
    st.on_result(
        Err("cannot query Prometheus at http://prom:9090: connection refused".into()),
        at() + Duration::from_secs(5),
    );
    assert!(st.stale());
    assert_eq!(st.rows.len(), 4);
    insta::assert_snapshot!("cluster_overview_stale", screen(&st, 100, 9));
}

#[test]
fn keys_sort_select_and_drill_down() {
    let mut st = ClusterState::new("http://prom:9090");
    st.on_result(Ok(fixed_rows()), at());
    assert_eq!(st.key(key(KeyCode::Char('s'))), Action::None);
    assert_eq!(st.sort, SortKey::MemoryUsed);
    let order = |st: &ClusterState| -> Vec<String> {
        st.rows
            .iter()
            .map(|r| format!("{}/{}", r.host, r.gpu))
            .collect()
    };
    assert_eq!(
        order(&st),
        ["gpu-07/0", "gpu-08/0", "gpu-07/1", "10.0.0.9:9400/"]
    );
    st.key(key(KeyCode::Char('S')));
    assert!(st.reverse);
    assert_eq!(
        order(&st),
        ["gpu-07/1", "gpu-08/0", "gpu-07/0", "10.0.0.9:9400/"]
    );
    // The selection follows its row across a re-sort.
    st.key(key(KeyCode::Home));
    st.key(key(KeyCode::Down));
    assert_eq!(st.rows[st.selected].host, "gpu-08");
    st.key(key(KeyCode::Char('s')));
    assert_eq!(st.sort, SortKey::Util);
    assert_eq!(st.rows[st.selected].host, "gpu-08");
    assert_eq!(
        st.key(key(KeyCode::Enter)),
        Action::Probe("http://10.0.0.8:9400".into())
    );
    assert!(st.message.as_deref().unwrap().contains("probing"));
    assert_eq!(st.key(key(KeyCode::Char('r'))), Action::Refresh);
    assert_eq!(st.message, None, "a message lasts until the next key");
    assert_eq!(st.key(key(KeyCode::Char('q'))), Action::Quit);
    assert_eq!(st.key(key(KeyCode::Esc)), Action::Quit);
}

#[test]
fn plain_table_lists_every_row() {
    let text = plain_table(&fixed_rows());
    insta::assert_snapshot!("cluster_plain_table", text);
}

fn scenario_gpu(uuid: &str, total: &str, util: u32, procs: &[(u32, &str)]) -> String {
    let mut s = format!(
        "[[gpu]]\nuuid = \"{uuid}\"\nmemory_total = \"{total}\"\nmemory_reserved = \"0\"\nutil_gpu = {util}\n"
    );
    for (pid, used) in procs {
        let _ = write!(s, "[[gpu.process]]\npid = {pid}\nused = \"{used}\"\n");
    }
    s
}

fn value(port: u16, promql: &str) -> Option<String> {
    query(port, promql)?
        .first()?
        .get("value")?
        .get(1)?
        .as_str()
        .map(str::to_string)
}

/// The binary with stdout piped prints the plain table once; bad URLs fail clearly.
fn check_binary(one: &ScenarioFile, url: &str, daemon_port: u16, instances: &[&str]) {
    // The binary with stdout piped: the plain table, once, listing both instances.
    let o = gpuwatch_cmd(one)
        .args(["tui", "--prometheus", url])
        .output()
        .expect("gpuwatch runs");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.starts_with("HOST"), "{text}");
    for i in instances {
        assert!(text.contains(i), "{i} not in {text}");
    }
    assert_eq!(text.lines().count(), 4, "{text}");

    // Not Prometheus (a daemon's port), nothing listening, not a URL: clear errors.
    let o = gpuwatch_cmd(one)
        .args([
            "tui",
            "--prometheus",
            &format!("http://127.0.0.1:{daemon_port}"),
        ])
        .output()
        .expect("gpuwatch runs");
    fails_with(&o, 1, "for /api/v1/query: is this a Prometheus server?");
    let o = gpuwatch_cmd(one)
        .args([
            "tui",
            "--prometheus",
            &format!("http://127.0.0.1:{}", free_port()),
        ])
        .output()
        .expect("gpuwatch runs");
    fails_with(&o, 1, "cannot query Prometheus at http://127.0.0.1:");
    let o = gpuwatch_cmd(one)
        .args(["tui", "--prometheus", "prom:9090"])
        .output()
        .expect("gpuwatch runs");
    fails_with(&o, 2, "expected http:// or https://");
}

#[test]
fn overview_from_a_real_prometheus_sees_both_hosts() {
    let (a, b, c) = (Sleeper::spawn(), Sleeper::spawn(), Sleeper::spawn());
    let one = ScenarioFile::new(&scenario_gpu(
        "GPU-aaaaaaaa-0000-0000-0000-000000000001",
        "80GiB",
        75,
        &[(a.pid(), "20GiB")],
    ));
    let two = ScenarioFile::new(
        &(scenario_gpu(
            "GPU-bbbbbbbb-0000-0000-0000-000000000001",
            "80GiB",
            10,
            &[(b.pid(), "5GiB"), (c.pid(), "3GiB")],
        ) + &scenario_gpu("GPU-bbbbbbbb-0000-0000-0000-000000000002", "40GiB", 0, &[])),
    );
    let d1 = Daemon::start(&one, &["--no-history"]);
    let d2 = Daemon::start(&two, &["--no-history"]);
    let (p1, p2) = (d1.port, d2.port);
    let prom = start_prometheus(&[p1, p2]);
    let started = Instant::now();
    loop {
        let up = value(prom.port, "sum(up{job=\"gpuwatch\"})");
        let gpus = value(prom.port, "count(gpuwatch_memory_used_bytes)");
        let procs = value(prom.port, "count(gpuwatch_process_memory_used_bytes)");
        if up.as_deref() == Some("2")
            && gpus.as_deref() == Some("3")
            && procs.as_deref() == Some("3")
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "Prometheus did not see both daemons: up = {up:?}, GPUs = {gpus:?}, processes = {procs:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let url = format!("http://127.0.0.1:{}", prom.port);
    let client = PromClient::new(&url, None);
    let rows = overview(&client).expect("overview");
    let (i1, i2) = (format!("127.0.0.1:{p1}"), format!("127.0.0.1:{p2}"));
    let of =
        |inst: &str| -> Vec<&ClusterRow> { rows.iter().filter(|r| r.instance == inst).collect() };
    assert_eq!(of(&i1).len(), 1, "{rows:#?}");
    assert_eq!(of(&i2).len(), 2, "{rows:#?}");
    assert_eq!(rows.len(), 3, "{rows:#?}");
    let h1 = of(&i1)[0];
    assert_eq!(h1.host, i1);
    assert!(h1.up);
    assert_eq!(h1.gpu, "0");
    assert_eq!(h1.uuid, "GPU-aaaaaaaa-0000-0000-0000-000000000001");
    assert!(!h1.name.is_empty());
    assert_eq!(h1.mem_used, Some(20 * GIB));
    assert_eq!(h1.mem_total, Some(80 * GIB));
    assert_eq!(h1.util.map(f64::round), Some(75.0));
    assert_eq!(h1.top_process, Some(("sleep".to_string(), 20 * GIB)));
    let (g0, g1) = (of(&i2)[0], of(&i2)[1]);
    assert_eq!((g0.gpu.as_str(), g1.gpu.as_str()), ("0", "1"));
    assert_eq!(g0.mem_used, Some(8 * GIB));
    assert_eq!(g0.top_process, Some(("sleep".to_string(), 5 * GIB)));
    assert_eq!(g1.mem_used, Some(0));
    assert_eq!(g1.mem_total, Some(40 * GIB));
    assert_eq!(
        g1.top_process, None,
        "no process: no top process, not a zero"
    );
    assert_eq!(g1.util.map(f64::round), Some(0.0));

    check_binary(&one, &url, p1, &[&i1, &i2]);

    // A daemon that stops: its host stays in the overview, down.
    drop(d1);
    let started = Instant::now();
    loop {
        let rows = overview(&client).expect("overview");
        let down: Vec<&ClusterRow> = rows.iter().filter(|r| r.instance == i1).collect();
        if down.len() == 1 && !down[0].up {
            assert_eq!(down[0].mem_used, None);
            assert_eq!(rows.iter().filter(|r| r.instance == i2 && r.up).count(), 2);
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the stopped daemon never showed as down: {rows:#?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}
