//! The query layer: instant PromQL queries over the `gpuwatch_*` series (DESIGN.md §6) and the
//! pure join of their answers into one row per host and GPU.
//!
//! Five queries per refresh: the per-GPU series (identity and values, one selector on
//! `__name__`), the top process per GPU, the daemons' own open findings, Prometheus's firing
//! gpuwatch alerts, and the scrape targets' `up`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::Value;

/// Identity and per-GPU values, in one answer; each series keeps its `__name__`.
pub const Q_GPU: &str = "{__name__=~\"gpuwatch_(gpu_info|memory_used_bytes|memory_total_bytes|memory_external_bytes|utilization_ratio|memory_time_to_full_seconds)\"}";
/// The largest process per GPU.
pub const Q_TOP: &str = "topk by (instance, job, uuid) (1, gpuwatch_process_memory_used_bytes)";
/// The daemons' own open findings (labels `rule`, `gpu` = index or empty, `severity`).
pub const Q_DAEMON_ALERTS: &str = "gpuwatch_alert_active";
/// Alerts of the shipped rules (`assets/prometheus/rules.yml`) that fire now.
pub const Q_PROM_ALERTS: &str = "ALERTS{alertstate=\"firing\", alertname=~\"Gpu.*\"}";
/// Scrape health of the daemons: the `gpuwatch` job, and any target that exported gpuwatch
/// series in the last hour (a daemon scraped under another job name).
pub const Q_UP: &str =
    "up{job=\"gpuwatch\"} or (up and on(instance, job) last_over_time(gpuwatch_build_info[1h]))";

/// How long one query may take.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// One series of an instant vector.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Series {
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).map_or("", String::as_str)
    }
}

/// The answers of one refresh.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueryResults {
    pub gpu: Vec<Series>,
    pub top: Vec<Series>,
    pub daemon_alerts: Vec<Series>,
    pub prom_alerts: Vec<Series>,
    pub up: Vec<Series>,
}

/// One GPU of one host, as Prometheus sees it. Unavailable values (absent series) are `None`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterRow {
    /// The `hostname` label when the series carry one (a relabelling), else `instance`.
    pub host: String,
    /// The scrape target, `host:port`.
    pub instance: String,
    /// NVML index; empty for a host row without GPUs (a daemon that is down).
    pub gpu: String,
    pub uuid: String,
    pub name: String,
    pub mem_used: Option<u64>,
    pub mem_total: Option<u64>,
    /// Utilisation, percent.
    pub util: Option<f64>,
    /// The largest process: command (or `pid N`) and bytes.
    pub top_process: Option<(String, u64)>,
    pub external: Option<u64>,
    /// Seconds until memory is full at the current growth.
    pub time_to_full: Option<f64>,
    /// Open alert names (Prometheus alerts and the daemon's findings), sorted, no duplicates.
    pub alerts: Vec<String>,
    /// The daemon answered its last scrape.
    pub up: bool,
}

impl ClusterRow {
    /// Memory used, percent of total.
    pub fn used_percent(&self) -> Option<f64> {
        match (self.mem_used, self.mem_total) {
            (Some(u), Some(t)) if t > 0 => Some(u as f64 * 100.0 / t as f64),
            _ => None,
        }
    }

    pub fn free(&self) -> Option<u64> {
        Some(self.mem_total?.saturating_sub(self.mem_used?))
    }
}

/// A Prometheus server's HTTP API.
#[derive(Debug, Clone)]
pub struct PromClient {
    /// `http://prom:9090` (a trailing `/` is ignored).
    pub base: String,
    /// Sent as `Authorization: Bearer` when set.
    pub token: Option<String>,
}

impl PromClient {
    pub fn new(base: &str, token: Option<String>) -> Self {
        Self {
            base: base.trim_end_matches('/').to_string(),
            token,
        }
    }

    /// An instant query: the result vector.
    pub fn query(&self, promql: &str) -> Result<Vec<Series>, String> {
        check_url(&self.base)?;
        let agent = agent(QUERY_TIMEOUT);
        let url = format!("{}/api/v1/query", self.base);
        let mut req = agent.get(&url).query("query", promql);
        if let Some(t) = &self.token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        let mut response = req
            .call()
            .map_err(|e| format!("cannot query Prometheus at {}: {e}", self.base))?;
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_string()
            .map_err(|e| {
                format!(
                    "{} answered {status} with an unreadable body: {e}",
                    self.base
                )
            })?;
        parse_response(&self.base, status, &body)
    }
}

fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .user_agent(concat!("gpuwatch/", env!("CARGO_PKG_VERSION")))
        .build()
        .new_agent()
}

/// A URL ureq can query: `http` or `https`, with a host.
pub fn check_url(url: &str) -> Result<(), String> {
    let uri: ureq::http::Uri = url
        .parse()
        .map_err(|e| format!("invalid URL {url:?}: {e}"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => {
            return Err(format!("invalid URL {url:?}: expected http:// or https://"));
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("invalid URL {url:?}: no host"));
    }
    Ok(())
}

/// The result vector of an `/api/v1/query` answer, or what went wrong in words.
pub fn parse_response(base: &str, status: u16, body: &str) -> Result<Vec<Series>, String> {
    let not_prometheus =
        || format!("{base} answered {status} for /api/v1/query: is this a Prometheus server?");
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        return Err(not_prometheus());
    };
    match v["status"].as_str() {
        Some("success") => {}
        Some("error") => {
            return Err(format!(
                "Prometheus at {base} rejected the query ({status}): {}",
                v["error"].as_str().unwrap_or("no reason given")
            ));
        }
        _ => return Err(not_prometheus()),
    }
    if v["data"]["resultType"] != "vector" {
        return Err(format!(
            "Prometheus at {base} answered a {} where a vector was expected",
            v["data"]["resultType"]
        ));
    }
    let result = v["data"]["result"].as_array().ok_or_else(not_prometheus)?;
    Ok(result
        .iter()
        .filter_map(|s| {
            let labels = s["metric"]
                .as_object()?
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect();
            let value = s["value"][1].as_str()?.parse::<f64>().ok()?;
            Some(Series { labels, value })
        })
        .collect())
}

/// Runs the queries of one refresh.
pub fn fetch(client: &PromClient) -> Result<QueryResults, String> {
    Ok(QueryResults {
        gpu: client.query(Q_GPU)?,
        top: client.query(Q_TOP)?,
        daemon_alerts: client.query(Q_DAEMON_ALERTS)?,
        prom_alerts: client.query(Q_PROM_ALERTS)?,
        up: client.query(Q_UP)?,
    })
}

/// One row per host and GPU, sorted by host then GPU index.
pub fn overview(client: &PromClient) -> Result<Vec<ClusterRow>, String> {
    fetch(client).map(|r| rows(&r))
}

fn finite(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

fn bytes(v: f64) -> Option<u64> {
    finite(v).filter(|v| *v >= 0.0).map(|v| v.round() as u64)
}

/// Joins the answers by (instance, uuid). Targets that are down become one row each with
/// `up: false` unless their GPUs' series are still there.
pub fn rows(results: &QueryResults) -> Vec<ClusterRow> {
    // (instance, uuid) → row
    let mut by_gpu: BTreeMap<(String, String), ClusterRow> = BTreeMap::new();
    let mut hostnames: BTreeMap<String, String> = BTreeMap::new();
    for s in &results.gpu {
        let instance = s.label("instance").to_string();
        let uuid = s.label("uuid").to_string();
        if uuid.is_empty() {
            continue;
        }
        if !s.label("hostname").is_empty() {
            hostnames.insert(instance.clone(), s.label("hostname").to_string());
        }
        let row = by_gpu
            .entry((instance.clone(), uuid.clone()))
            .or_insert_with(|| ClusterRow {
                instance: instance.clone(),
                uuid,
                up: true,
                ..ClusterRow::default()
            });
        if row.gpu.is_empty() {
            row.gpu = s.label("gpu").to_string();
        }
        match s.label("__name__") {
            "gpuwatch_gpu_info" => row.name = s.label("name").to_string(),
            "gpuwatch_memory_used_bytes" => row.mem_used = bytes(s.value),
            "gpuwatch_memory_total_bytes" => row.mem_total = bytes(s.value),
            "gpuwatch_memory_external_bytes" => row.external = bytes(s.value),
            "gpuwatch_utilization_ratio" => row.util = finite(s.value).map(|v| v * 100.0),
            "gpuwatch_memory_time_to_full_seconds" => row.time_to_full = finite(s.value),
            _ => {}
        }
    }
    for s in &results.top {
        let key = (s.label("instance").to_string(), s.label("uuid").to_string());
        let (Some(row), Some(b)) = (by_gpu.get_mut(&key), bytes(s.value)) else {
            continue;
        };
        let who = if s.label("comm").is_empty() {
            format!("pid {}", s.label("pid"))
        } else {
            s.label("comm").to_string()
        };
        // topk may tie; keep the larger, then the first.
        if row.top_process.as_ref().is_none_or(|(_, old)| b > *old) {
            row.top_process = Some((who, b));
        }
    }
    let mut rows: Vec<ClusterRow> = by_gpu.into_values().collect();
    // Targets: down ones mark their rows, or become a row of their own.
    for s in &results.up {
        let instance = s.label("instance");
        let up = s.value >= 1.0;
        let mut any = false;
        for r in rows.iter_mut().filter(|r| r.instance == instance) {
            r.up &= up;
            any = true;
        }
        if !any && !instance.is_empty() {
            rows.push(ClusterRow {
                instance: instance.to_string(),
                up,
                ..ClusterRow::default()
            });
        }
    }
    for s in &results.prom_alerts {
        let (instance, uuid) = (s.label("instance"), s.label("uuid"));
        let name = s.label("alertname");
        for r in rows
            .iter_mut()
            .filter(|r| r.instance == instance && (uuid.is_empty() || r.uuid == uuid))
        {
            r.alerts.push(name.to_string());
        }
    }
    for s in &results.daemon_alerts {
        let (instance, gpu) = (s.label("instance"), s.label("gpu"));
        let name = s.label("rule");
        for r in rows
            .iter_mut()
            .filter(|r| r.instance == instance && (gpu.is_empty() || r.gpu == gpu))
        {
            r.alerts.push(name.to_string());
        }
    }
    for r in &mut rows {
        r.host = hostnames
            .get(&r.instance)
            .cloned()
            .unwrap_or_else(|| r.instance.clone());
        let set: BTreeSet<String> = r.alerts.drain(..).collect();
        r.alerts = set.into_iter().collect();
    }
    sort(&mut rows, SortKey::Host, false);
    rows
}

/// What the overview sorts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SortKey {
    /// Host, then GPU index (ascending).
    #[default]
    Host,
    /// Memory used, percent of total (fullest first).
    MemoryUsed,
    /// Utilisation (busiest first).
    Util,
    /// Number of open alerts (most first).
    Alerts,
    /// Free memory (most first: where a job fits).
    Free,
}

impl SortKey {
    pub const ALL: [SortKey; 5] = [
        SortKey::Host,
        SortKey::MemoryUsed,
        SortKey::Util,
        SortKey::Alerts,
        SortKey::Free,
    ];

    #[must_use]
    pub fn next(self) -> Self {
        let i = Self::ALL.iter().position(|k| *k == self).unwrap_or(0);
        Self::ALL[(i + 1) % Self::ALL.len()]
    }

    pub fn name(self) -> &'static str {
        match self {
            SortKey::Host => "host",
            SortKey::MemoryUsed => "memory used",
            SortKey::Util => "utilisation",
            SortKey::Alerts => "alerts",
            SortKey::Free => "free memory",
        }
    }
}

fn gpu_index(r: &ClusterRow) -> u32 {
    r.gpu.parse().unwrap_or(u32::MAX)
}

fn by_host(a: &ClusterRow, b: &ClusterRow) -> std::cmp::Ordering {
    a.host
        .cmp(&b.host)
        .then_with(|| a.instance.cmp(&b.instance))
        .then_with(|| gpu_index(a).cmp(&gpu_index(b)))
        .then_with(|| a.uuid.cmp(&b.uuid))
}

/// Larger first; unknown values last.
fn desc(a: Option<f64>, b: Option<f64>) -> std::cmp::Ordering {
    match (a, b) {
        (Some(x), Some(y)) => y.total_cmp(&x),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    }
}

/// Sorts by `key` in its natural direction (see [`SortKey`]), or the reverse; rows without the
/// value stay last either way, ties go by host and GPU.
pub fn sort(rows: &mut [ClusterRow], key: SortKey, reverse: bool) {
    let value = |r: &ClusterRow| -> Option<f64> {
        match key {
            SortKey::Host => None,
            SortKey::MemoryUsed => r.used_percent(),
            SortKey::Util => r.util,
            SortKey::Alerts => Some(r.alerts.len() as f64),
            SortKey::Free => r.free().map(|v| v as f64),
        }
    };
    rows.sort_by(|a, b| {
        if key == SortKey::Host {
            let o = by_host(a, b);
            return if reverse { o.reverse() } else { o };
        }
        let (va, vb) = (value(a), value(b));
        let o = match (va, vb) {
            (Some(_), Some(_)) if reverse => desc(vb, va),
            _ => desc(va, vb),
        };
        o.then_with(|| by_host(a, b))
    });
}

/// Whether the daemon at `base` answers `/api/v1/health` within `timeout`.
pub fn probe_daemon(base: &str, token: Option<&str>, timeout: Duration) -> Result<(), String> {
    check_url(base)?;
    let url = format!("{}/api/v1/health", base.trim_end_matches('/'));
    let mut req = agent(timeout).get(&url);
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    let response = req.call().map_err(|e| e.to_string())?;
    if response.status().is_success() {
        Ok(())
    } else {
        Err(format!("{url} answered {}", response.status()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn series(labels: &[(&str, &str)], value: f64) -> Series {
        Series {
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect(),
            value,
        }
    }

    fn gpu(name: &str, inst: &str, idx: &str, uuid: &str, value: f64) -> Series {
        series(
            &[
                ("__name__", name),
                ("instance", inst),
                ("job", "gpuwatch"),
                ("gpu", idx),
                ("uuid", uuid),
                ("name", "NVIDIA H100"),
            ],
            value,
        )
    }

    /// Two hosts: a with one GPU (20 of 80 GiB, busy), b with two (5 GiB and empty), c down.
    #[allow(clippy::too_many_lines)] // one flat fixture
    fn results() -> QueryResults {
        let (a, b) = ("10.0.0.1:9400", "10.0.0.2:9400");
        QueryResults {
            gpu: vec![
                gpu("gpuwatch_gpu_info", a, "0", "GPU-a0", 1.0),
                gpu(
                    "gpuwatch_memory_used_bytes",
                    a,
                    "0",
                    "GPU-a0",
                    20.0 * GIB as f64,
                ),
                gpu(
                    "gpuwatch_memory_total_bytes",
                    a,
                    "0",
                    "GPU-a0",
                    80.0 * GIB as f64,
                ),
                gpu("gpuwatch_utilization_ratio", a, "0", "GPU-a0", 0.93),
                gpu(
                    "gpuwatch_memory_time_to_full_seconds",
                    a,
                    "0",
                    "GPU-a0",
                    600.0,
                ),
                gpu("gpuwatch_gpu_info", b, "1", "GPU-b1", 1.0),
                gpu("gpuwatch_memory_used_bytes", b, "1", "GPU-b1", 0.0),
                gpu(
                    "gpuwatch_memory_total_bytes",
                    b,
                    "1",
                    "GPU-b1",
                    80.0 * GIB as f64,
                ),
                gpu("gpuwatch_gpu_info", b, "0", "GPU-b0", 1.0),
                gpu(
                    "gpuwatch_memory_used_bytes",
                    b,
                    "0",
                    "GPU-b0",
                    5.0 * GIB as f64,
                ),
                gpu(
                    "gpuwatch_memory_total_bytes",
                    b,
                    "0",
                    "GPU-b0",
                    80.0 * GIB as f64,
                ),
                gpu(
                    "gpuwatch_memory_external_bytes",
                    b,
                    "0",
                    "GPU-b0",
                    5.0 * GIB as f64,
                ),
                gpu(
                    "gpuwatch_memory_time_to_full_seconds",
                    b,
                    "0",
                    "GPU-b0",
                    f64::INFINITY,
                ),
            ],
            top: vec![
                series(
                    &[
                        ("instance", a),
                        ("uuid", "GPU-a0"),
                        ("pid", "7"),
                        ("comm", "python"),
                    ],
                    20.0 * GIB as f64,
                ),
                series(
                    &[
                        ("instance", b),
                        ("uuid", "GPU-b0"),
                        ("pid", "42"),
                        ("comm", ""),
                    ],
                    5.0 * GIB as f64,
                ),
            ],
            daemon_alerts: vec![series(
                &[("instance", a), ("rule", "memory-growth"), ("gpu", "0")],
                1.0,
            )],
            prom_alerts: vec![
                series(
                    &[
                        ("instance", a),
                        ("uuid", "GPU-a0"),
                        ("alertname", "GpuMemoryWillFill"),
                    ],
                    1.0,
                ),
                series(
                    &[("instance", "10.0.0.3:9400"), ("alertname", "GpuwatchDown")],
                    1.0,
                ),
            ],
            up: vec![
                series(&[("instance", a), ("job", "gpuwatch")], 1.0),
                series(&[("instance", b), ("job", "gpuwatch")], 1.0),
                series(&[("instance", "10.0.0.3:9400"), ("job", "gpuwatch")], 0.0),
            ],
        }
    }

    #[test]
    fn rows_join_by_instance_and_uuid() {
        let rows = rows(&results());
        let keys: Vec<(&str, &str, bool)> = rows
            .iter()
            .map(|r| (r.host.as_str(), r.gpu.as_str(), r.up))
            .collect();
        assert_eq!(
            keys,
            [
                ("10.0.0.1:9400", "0", true),
                ("10.0.0.2:9400", "0", true),
                ("10.0.0.2:9400", "1", true),
                ("10.0.0.3:9400", "", false),
            ]
        );
        let a = &rows[0];
        assert_eq!(a.name, "NVIDIA H100");
        assert_eq!((a.mem_used, a.mem_total), (Some(20 * GIB), Some(80 * GIB)));
        assert!((a.util.unwrap() - 93.0).abs() < 1e-9);
        assert_eq!(a.top_process, Some(("python".to_string(), 20 * GIB)));
        assert_eq!(a.time_to_full, Some(600.0));
        assert_eq!(a.alerts, ["GpuMemoryWillFill", "memory-growth"]);
        assert_eq!(a.external, None, "absent series stay unknown, not 0");
        let b0 = &rows[1];
        assert_eq!(b0.top_process, Some(("pid 42".to_string(), 5 * GIB)));
        assert_eq!(b0.time_to_full, None, "+Inf is no prediction");
        assert_eq!(b0.external, Some(5 * GIB));
        assert_eq!(b0.util, None);
        assert!(rows[2].alerts.is_empty() && rows[2].top_process.is_none());
        assert_eq!(rows[3].alerts, ["GpuwatchDown"]);
        assert_eq!(rows[3].mem_used, None);
    }

    #[test]
    fn a_hostname_label_names_the_host() {
        let mut r = results();
        r.gpu[0].labels.insert("hostname".into(), "gpu-07".into());
        let rows = rows(&r);
        assert_eq!(rows.last().unwrap().host, "gpu-07");
        assert_eq!(rows.last().unwrap().instance, "10.0.0.1:9400");
    }

    fn order(rows: &[ClusterRow]) -> Vec<String> {
        rows.iter()
            .map(|r| format!("{}/{}", &r.host[7..8], r.gpu))
            .collect()
    }

    #[test]
    fn sorting_by_each_key_and_reversed() {
        let mut rows = rows(&results());
        sort(&mut rows, SortKey::MemoryUsed, false);
        assert_eq!(order(&rows), ["1/0", "2/0", "2/1", "3/"]);
        sort(&mut rows, SortKey::MemoryUsed, true);
        assert_eq!(
            order(&rows),
            ["2/1", "2/0", "1/0", "3/"],
            "unknown stays last"
        );
        sort(&mut rows, SortKey::Free, false);
        assert_eq!(order(&rows), ["2/1", "2/0", "1/0", "3/"]);
        sort(&mut rows, SortKey::Util, false);
        assert_eq!(order(&rows), ["1/0", "2/0", "2/1", "3/"]);
        sort(&mut rows, SortKey::Alerts, false);
        assert_eq!(order(&rows), ["1/0", "3/", "2/0", "2/1"]);
        sort(&mut rows, SortKey::Host, true);
        assert_eq!(order(&rows), ["3/", "2/1", "2/0", "1/0"]);
        assert_eq!(SortKey::Free.next(), SortKey::Host);
    }

    #[test]
    fn answers_that_are_not_prometheus_say_so() {
        let e = parse_response("http://x:1", 404, "404 page not found").unwrap_err();
        assert_eq!(
            e,
            "http://x:1 answered 404 for /api/v1/query: is this a Prometheus server?"
        );
        let e = parse_response(
            "http://x:1",
            400,
            r#"{"status":"error","errorType":"bad_data","error":"parse error"}"#,
        )
        .unwrap_err();
        assert!(e.contains("rejected the query (400): parse error"), "{e}");
        let ok = parse_response(
            "http://x:1",
            200,
            r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"instance":"h:1"},"value":[1.5,"NaN"]},{"metric":{"instance":"h:2"},"value":[1.5,"2"]}]}}"#,
        )
        .unwrap();
        assert_eq!(ok.len(), 2);
        assert!(ok[0].value.is_nan());
        assert_eq!(ok[1].label("instance"), "h:2");
        assert!(check_url("prom:9090").is_err());
    }
}
