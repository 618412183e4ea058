//! `/metrics`: a registry built from the latest frame on every scrape, so the series of a
//! process that exited (or a value that became unavailable) are simply absent.
//!
//! Names and labels: DESIGN.md §6. Base units: bytes, seconds, watts, hertz, ratios 0–1.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{HttpStats, Options, Published};
use crate::model::GpuSample;

type Labels = Vec<(&'static str, String)>;
type GaugeFamily = Family<Labels, Gauge<f64, AtomicU64>>;
type CounterFamily = Family<Labels, Counter<f64, AtomicU64>>;

/// Families created on first use, so a metric with no series is not even declared.
#[derive(Default)]
struct Builder {
    registry: Registry,
    gauges: std::collections::HashMap<&'static str, GaugeFamily>,
    counters: std::collections::HashMap<&'static str, CounterFamily>,
}

impl Builder {
    #[allow(clippy::needless_pass_by_value)] // call sites build the labels in place
    fn gauge(&mut self, name: &'static str, help: &'static str, labels: Labels, value: f64) {
        let family = self.gauges.entry(name).or_insert_with(|| {
            let f = GaugeFamily::default();
            self.registry
                .register(name, help.trim_end_matches('.'), f.clone());
            f
        });
        family.get_or_create(&labels).set(value);
    }

    fn maybe(&mut self, name: &'static str, help: &'static str, labels: &Labels, v: Option<f64>) {
        if let Some(v) = v {
            self.gauge(name, help, labels.clone(), v);
        }
    }

    /// `name` without `_total`: the encoder appends it.
    #[allow(clippy::needless_pass_by_value)]
    fn counter(&mut self, name: &'static str, help: &'static str, labels: Labels, value: f64) {
        let family = self.counters.entry(name).or_insert_with(|| {
            let f = CounterFamily::default();
            self.registry
                .register(name, help.trim_end_matches('.'), f.clone());
            f
        });
        family.get_or_create(&labels).inc_by(value);
    }
}

fn gpu_labels(g: &GpuSample) -> Labels {
    vec![("gpu", g.index.to_string()), ("uuid", g.uuid.clone())]
}

/// Renders the text exposition format.
pub fn render(state: &Published, options: &Options, http: &HttpStats) -> Result<String, String> {
    let mut b = Builder::default();
    http_series(&mut b, http);
    b.gauge(
        "gpuwatch_build_info",
        "gpuwatch build information.",
        vec![("version", env!("CARGO_PKG_VERSION").to_string())],
        1.0,
    );
    for (call, n) in &state.collect_errors {
        b.counter(
            "gpuwatch_collect_errors",
            "Driver calls that failed, by call.",
            vec![("call", call.clone())],
            *n as f64,
        );
    }
    let now = std::time::Instant::now();
    for c in state.in_flight.iter().filter(|c| c.is_stuck(now)) {
        b.gauge(
            "gpuwatch_collect_stuck_seconds",
            "How long a driver call has been running, for calls running a second or more.",
            vec![
                ("call", c.call.to_string()),
                ("gpu", c.gpu.map(|g| g.to_string()).unwrap_or_default()),
            ],
            c.elapsed(now).as_secs_f64(),
        );
    }
    if state.latest.is_none() {
        // Exported from the start: a driver that hangs before the first sample must fire the
        // collect-failing alert, not leave it without a series.
        b.gauge(
            "gpuwatch_last_collect_success",
            "1 when the last sample had no failed call and the source is not stale.",
            Vec::new(),
            0.0,
        );
    }
    if let Some(frame) = &state.latest {
        let sample = &frame.sample;
        b.gauge(
            "gpuwatch_collect_duration_seconds",
            "Time the last sample took to collect.",
            Vec::new(),
            sample.collect_seconds,
        );
        b.gauge(
            "gpuwatch_last_collect_success",
            "1 when the last sample had no failed call and the source is not stale.",
            Vec::new(),
            if sample.had_errors() || frame.is_stale() {
                0.0
            } else {
                1.0
            },
        );
        let driver = frame.source.driver_version.clone().unwrap_or_default();
        let mut procs_seen = std::collections::HashSet::new();
        for g in &sample.gpus {
            gpu(&mut b, g, &driver, state, options, &mut procs_seen);
        }
    }
    for f in &state.findings {
        b.gauge(
            "gpuwatch_alert_active",
            "1 for each open finding of the detector.",
            vec![
                ("rule", f.id.rule.name().to_string()),
                (
                    "gpu",
                    f.gpu_index.map(|i| i.to_string()).unwrap_or_default(),
                ),
                ("severity", f.severity.to_string()),
            ],
            1.0,
        );
    }
    let mut out = String::new();
    encode(&mut out, &b.registry).map_err(|e| format!("cannot encode metrics: {e}"))?;
    Ok(out)
}

/// The HTTP server's own series (and the `/proc` read failures that the connections can
/// cause), present from the start.
fn http_series(b: &mut Builder, http: &HttpStats) {
    let get =
        |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed) as f64;
    b.gauge(
        "gpuwatch_http_connections",
        "HTTP connections open now.",
        Vec::new(),
        get(&http.connections),
    );
    b.gauge(
        "gpuwatch_http_event_streams",
        "Event streams (/api/v1/events) open now.",
        Vec::new(),
        get(&http.event_streams),
    );
    for (reason, c) in [
        ("connections", &http.rejected_connections),
        ("event_streams", &http.rejected_event_streams),
    ] {
        b.counter(
            "gpuwatch_http_rejected",
            "Connections and event streams refused with 503 because the server was at its cap.",
            vec![("reason", reason.to_string())],
            get(c),
        );
    }
    for (reason, c) in [
        ("idle_evicted", &http.dropped_idle_evicted),
        ("idle_timeout", &http.dropped_idle_timeout),
        ("write_timeout", &http.dropped_write_timeout),
        ("lagged", &http.dropped_lagged),
        ("request_timeout", &http.request_timeouts),
    ] {
        b.counter(
            "gpuwatch_http_dropped",
            "Connections, event streams and requests the server ended early, by reason.",
            vec![("reason", reason.to_string())],
            get(c),
        );
    }
    b.counter(
        "gpuwatch_http_accept_errors",
        "Failed accepts of HTTP connections (usually out of file descriptors).",
        Vec::new(),
        get(&http.accept_errors),
    );
    b.counter(
        "gpuwatch_proc_read_errors",
        "Reads of a known process's /proc files that failed while it still existed.",
        Vec::new(),
        crate::source::procinfo::read_errors() as f64,
    );
}

/// The Prometheus text format (0.0.4) of what [`render`] gives in OpenMetrics: a counter's
/// `# HELP` and `# TYPE` name its samples' name (`…_total`), and there is no `# EOF` or
/// `# UNIT`. For clients that do not ask for OpenMetrics (`promtool check metrics`, curl, older
/// scrapers); the samples are the same.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + 64 * counters.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "].into_iter().find_map(|prefix| {
            let (name, rest) = line.strip_prefix(prefix)?.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{prefix}{name}_total {rest}"))
        });
        match meta {
            Some(renamed) => out.push_str(&renamed),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[allow(clippy::too_many_lines)] // one flat list of series
fn gpu(
    b: &mut Builder,
    g: &GpuSample,
    driver: &str,
    state: &Published,
    options: &Options,
    procs_seen: &mut std::collections::HashSet<u32>,
) {
    let labels = gpu_labels(g);
    let mut info = labels.clone();
    info.push(("name", g.name.clone().unwrap_or_default()));
    info.push(("pci_bus_id", g.pci_bus_id.clone().unwrap_or_default()));
    info.push(("driver_version", driver.to_string()));
    b.gauge("gpuwatch_gpu_info", "GPU identity; always 1.", info, 1.0);
    if let Some(m) = g.memory {
        b.gauge(
            "gpuwatch_memory_total_bytes",
            "Total device memory.",
            labels.clone(),
            m.total as f64,
        );
        b.gauge(
            "gpuwatch_memory_used_bytes",
            "Device memory in use.",
            labels.clone(),
            m.used as f64,
        );
        b.gauge(
            "gpuwatch_memory_free_bytes",
            "Free device memory.",
            labels.clone(),
            m.free as f64,
        );
        b.maybe(
            "gpuwatch_memory_reserved_bytes",
            "Device memory reserved by the driver.",
            &labels,
            m.reserved.map(|v| v as f64),
        );
    }
    b.gauge(
        "gpuwatch_process_list_available",
        "1 when the driver gave the GPU's process list, 0 when not (no process series then: unknown, not none).",
        labels.clone(),
        if g.processes_unavailable { 0.0 } else { 1.0 },
    );
    b.maybe(
        "gpuwatch_memory_unattributed_bytes",
        "Memory in use that no visible process accounts for.",
        &labels,
        g.unattributed_bytes().map(|v| v as f64),
    );
    let watched = |p: &crate::model::ProcSample| state.watched.contains(&p.pid);
    b.maybe(
        "gpuwatch_memory_external_bytes",
        "Memory in use minus the watched processes' memory.",
        &labels,
        crate::output::json::split_mine(g, &watched).map(|(_, ext)| ext as f64),
    );
    b.maybe(
        "gpuwatch_utilization_ratio",
        "GPU utilisation, 0-1.",
        &labels,
        g.util_gpu.map(|v| f64::from(v) / 100.0),
    );
    b.maybe(
        "gpuwatch_memory_bandwidth_utilization_ratio",
        "Memory bandwidth utilisation, 0-1.",
        &labels,
        g.util_mem.map(|v| f64::from(v) / 100.0),
    );
    b.maybe(
        "gpuwatch_temperature_celsius",
        "GPU temperature.",
        &labels,
        g.temperature_c.map(f64::from),
    );
    b.maybe(
        "gpuwatch_power_usage_watts",
        "Power draw.",
        &labels,
        g.power_watts,
    );
    b.maybe(
        "gpuwatch_power_limit_watts",
        "Power limit.",
        &labels,
        g.power_limit_watts,
    );
    if let Some(j) = g.slow.energy_joules {
        b.counter(
            "gpuwatch_energy_consumed_joules",
            "Energy consumed since the driver loaded.",
            labels.clone(),
            j,
        );
    }
    b.maybe(
        "gpuwatch_sm_clock_hertz",
        "SM clock.",
        &labels,
        g.sm_clock_mhz.map(|v| f64::from(v) * 1e6),
    );
    if let Some((growth, ttf)) = state.growth.get(&g.uuid) {
        b.maybe(
            "gpuwatch_memory_growth_bytes_per_second",
            "Growth of memory used, as the detector measures it (robust, over the filling window).",
            &labels,
            *growth,
        );
        b.maybe(
            "gpuwatch_memory_time_to_full_seconds",
            "Predicted time until memory is full, only while the growth is a ramp.",
            &labels,
            *ttf,
        );
    }
    // Bounded: the top N by memory (processes are sorted largest first) plus any above the floor.
    for (rank, p) in g.processes.iter().enumerate() {
        let above_floor = p.used_bytes.is_some_and(|u| u >= options.floor);
        if rank >= options.top_n && !above_floor {
            continue;
        }
        let comm = p.host.name.clone().unwrap_or_default();
        let mut pl = labels.clone();
        pl.push(("pid", p.pid.to_string()));
        pl.push(("comm", comm.clone()));
        b.maybe(
            "gpuwatch_process_memory_used_bytes",
            "GPU memory a process holds.",
            &pl,
            p.used_bytes.map(|v| v as f64),
        );
        b.maybe(
            "gpuwatch_process_sm_utilization_ratio",
            "SM utilisation of a process, 0-1.",
            &pl,
            p.sm_percent.map(|v| f64::from(v) / 100.0),
        );
        if procs_seen.insert(p.pid) {
            b.gauge(
                "gpuwatch_process_info",
                "Process identity; always 1.",
                vec![
                    ("pid", p.pid.to_string()),
                    ("comm", comm),
                    ("user", p.host.user.clone().unwrap_or_default()),
                    ("container", p.host.container.clone().unwrap_or_default()),
                ],
                1.0,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Frame, HostProc, Memory, ProcKind, ProcSample, Sample};
    use std::time::Duration;

    fn proc(pid: u32, used: u64) -> ProcSample {
        ProcSample {
            pid,
            kind: ProcKind::Compute,
            used_bytes: Some(used),
            sm_percent: None,
            mem_percent: None,
            gpu_instance: None,
            compute_instance: None,
            host: HostProc::default(),
        }
    }

    fn state() -> Published {
        let mut g = GpuSample::empty(0, "GPU-a".into());
        g.memory = Some(Memory {
            total: 100 << 30,
            reserved: None,
            used: 30 << 30,
            free: 70 << 30,
        });
        // Sorted largest first, as the sampler hands them over.
        g.processes = vec![
            proc(1, 5 << 30),
            proc(2, 4 << 30),
            proc(3, 1 << 30),
            proc(4, 1 << 20),
            proc(5, 1 << 10),
        ];
        Published {
            latest: Some(Frame::for_test(
                Sample {
                    taken_at: 1.0,
                    gpus: vec![g],
                    errors: Vec::new(),
                    collect_seconds: 0.001,
                },
                Duration::from_secs(1),
            )),
            ..Published::default()
        }
    }

    fn render_test(state: &Published, options: &Options) -> Result<String, String> {
        render(state, options, &HttpStats::default())
    }

    fn options(top_n: usize, floor: u64) -> Options {
        Options {
            listen: "127.0.0.1:0".parse().unwrap(),
            token: None,
            top_n,
            floor,
            history: None,
            limits: super::super::Limits::from(&crate::config::Config::default().daemon),
        }
    }

    /// The PIDs with a memory series, sorted (a family's series come in no set order).
    fn pids(text: &str) -> Vec<&str> {
        let mut v: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("gpuwatch_process_memory_used_bytes{"))
            .filter_map(|l| l.split("pid=\"").nth(1)?.split('"').next())
            .collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn process_series_are_the_top_n_plus_those_above_the_floor() {
        let s = state();
        let mut got = pids(&render_test(&s, &options(1, 1 << 30)).unwrap()).join(",");
        assert_eq!(got, "1,2,3");
        got = pids(&render_test(&s, &options(4, u64::MAX)).unwrap()).join(",");
        assert_eq!(got, "1,2,3,4");
        assert!(pids(&render_test(&s, &options(0, u64::MAX)).unwrap()).is_empty());
    }

    #[test]
    fn unavailable_values_have_no_series() {
        let text = render_test(&state(), &options(20, 0)).unwrap();
        // Power, temperature, utilisation and reserved memory are unknown in this sample.
        for name in [
            "gpuwatch_power_usage_watts",
            "gpuwatch_temperature_celsius",
            "gpuwatch_utilization_ratio",
            "gpuwatch_memory_reserved_bytes",
            "gpuwatch_process_sm_utilization_ratio",
        ] {
            assert!(!text.contains(name), "{name} in {text}");
        }
        assert!(text.contains("gpuwatch_memory_used_bytes{gpu=\"0\",uuid=\"GPU-a\"} 32212254720"));
        assert!(text.contains("gpuwatch_memory_unattributed_bytes"));
    }

    #[test]
    fn the_prometheus_text_names_counters_by_their_samples() {
        let mut s = state();
        s.collect_errors.insert("temperature".into(), 2);
        let om = render_test(&s, &options(20, 0)).unwrap();
        assert!(om.contains("# TYPE gpuwatch_collect_errors counter\n"));
        assert!(om.ends_with("# EOF\n"));
        let text = to_prometheus_text(&om);
        assert!(text.contains("# HELP gpuwatch_collect_errors_total Driver calls"));
        assert!(text.contains("# TYPE gpuwatch_collect_errors_total counter\n"));
        assert!(text.contains("gpuwatch_collect_errors_total{call=\"temperature\"} 2"));
        assert!(text.contains("# TYPE gpuwatch_memory_used_bytes gauge\n"));
        assert!(!text.contains("# EOF"));
    }

    #[test]
    fn no_frame_yet_still_answers() {
        let text = render_test(&Published::default(), &options(20, 0)).unwrap();
        assert!(text.contains("gpuwatch_build_info"));
        assert!(!text.contains("gpuwatch_gpu_info"));
    }
}
