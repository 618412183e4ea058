//! The shipped monitoring assets: the Prometheus rules pass `promtool check rules` and their
//! unit tests (`promtool test rules`), the example scrape config passes `promtool check config`,
//! the Grafana dashboard is valid JSON, and every metric the rules and the dashboard query is one
//! the daemon exports (DESIGN.md section 6) or one Prometheus makes itself.
//!
//! Needs `promtool` on `PATH` (Debian: `apt-get install prometheus`; `.ci/run` installs it).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

mod common;

/// Metric names from DESIGN.md section 6, plus the slowdown threshold the rules compare with.
const GPUWATCH_METRICS: &[&str] = &[
    "gpuwatch_gpu_info",
    "gpuwatch_memory_total_bytes",
    "gpuwatch_memory_used_bytes",
    "gpuwatch_memory_free_bytes",
    "gpuwatch_memory_reserved_bytes",
    "gpuwatch_memory_unattributed_bytes",
    "gpuwatch_memory_external_bytes",
    "gpuwatch_utilization_ratio",
    "gpuwatch_memory_bandwidth_utilization_ratio",
    "gpuwatch_temperature_celsius",
    "gpuwatch_temperature_slowdown_celsius",
    "gpuwatch_power_usage_watts",
    "gpuwatch_power_limit_watts",
    "gpuwatch_energy_consumed_joules_total",
    "gpuwatch_sm_clock_hertz",
    "gpuwatch_memory_growth_bytes_per_second",
    "gpuwatch_memory_time_to_full_seconds",
    "gpuwatch_process_memory_used_bytes",
    "gpuwatch_process_sm_utilization_ratio",
    "gpuwatch_process_info",
    "gpuwatch_alert_active",
    "gpuwatch_collect_duration_seconds",
    "gpuwatch_collect_errors_total",
    "gpuwatch_last_collect_success",
    "gpuwatch_collect_stuck_seconds",
    "gpuwatch_process_list_available",
    "gpuwatch_build_info",
    "gpuwatch_http_connections",
    "gpuwatch_http_event_streams",
    "gpuwatch_http_rejected_total",
    "gpuwatch_http_dropped_total",
    "gpuwatch_http_accept_errors_total",
    "gpuwatch_proc_read_errors_total",
];

/// Series Prometheus itself makes: the scrape health and, for the dashboard's alert table, the
/// firing alerts of rules.yml.
const PROMETHEUS_METRICS: &[&str] = &["up", "ALERTS"];

const RULES: &str = "assets/prometheus/rules.yml";
const RULES_TEST: &str = "assets/prometheus/rules.test.yml";
const EXAMPLE_CONFIG: &str = "assets/prometheus/prometheus.example.yml";
const DASHBOARD: &str = "assets/grafana/gpuwatch.json";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    let path: PathBuf = root().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Runs `promtool ARGS` in the repository root and returns its output; fails the test when it
/// exits non-zero or is not installed.
fn promtool(args: &[&str]) -> String {
    let out = match Command::new("promtool")
        .args(args)
        .current_dir(root())
        .output()
    {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "promtool is not installed (or not on PATH), so the Prometheus rules in assets/prometheus \
             cannot be checked. Install it: `apt-get install prometheus` on Debian/Ubuntu (.ci/run does), \
             or put the `promtool` from a Prometheus release tarball on PATH."
        ),
        Err(e) => panic!("running promtool {}: {e}", args.join(" ")),
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "`promtool {}` failed ({}):\n{text}",
        args.join(" "),
        out.status
    );
    text
}

#[test]
fn promtool_check_rules_passes() {
    let out = promtool(&["check", "rules", RULES]);
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn promtool_rule_unit_tests_pass() {
    let out = promtool(&["test", "rules", RULES_TEST]);
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn promtool_check_example_config_passes() {
    let out = promtool(&["check", "config", EXAMPLE_CONFIG]);
    assert!(out.contains("SUCCESS"), "{out}");
}

// ---------------------------------------------------------------------------------------------
// Metric names in PromQL.

/// Words that are `PromQL` syntax, not metric names, when not followed by `(`.
#[rustfmt::skip]
const KEYWORDS: &[&str] = &[
    "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
    "group_right", "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
    "count_values", "bottomk", "topk", "quantile", "atan2", "inf", "nan", "start", "end",
];

/// Keywords followed by a parenthesised list of label names.
const LABEL_LIST_KEYWORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Index just past the bracket that closes the one at `open` (or the end), skipping strings.
fn skip_balanced(s: &[char], open: usize, close: char) -> usize {
    let opener = s[open];
    let mut depth = 0;
    let mut i = open;
    while i < s.len() {
        match s[i] {
            '"' | '\'' | '`' => {
                i = skip_string(s, i);
                continue;
            }
            c if c == opener => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    s.len()
}

/// Index just past the string literal that starts at `start`.
fn skip_string(s: &[char], start: usize) -> usize {
    let quote = s[start];
    let mut i = start + 1;
    while i < s.len() {
        if s[i] == '\\' && quote != '`' {
            i += 2;
            continue;
        }
        if s[i] == quote {
            return i + 1;
        }
        i += 1;
    }
    s.len()
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The metric names a `PromQL` expression selects: identifiers that are not functions, keywords,
/// label names (inside `{}` or after `by`/`on`/...), strings, numbers, durations or Grafana
/// variables (`$host`, `${DS_PROMETHEUS}`).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let s: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if c == '"' || c == '\'' || c == '`' {
            i = skip_string(&s, i);
        } else if c == '{' {
            i = skip_balanced(&s, i, '}');
        } else if c == '[' {
            i = skip_balanced(&s, i, ']');
        } else if c == '#' {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if c == '$' {
            i += 1;
            if i < s.len() && s[i] == '{' {
                i = skip_balanced(&s, i, '}');
            } else {
                while i < s.len() && is_ident(s[i]) {
                    i += 1;
                }
            }
        } else if c.is_ascii_digit() || (c == '.' && s.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            // Numbers (1e9, 0x1f, 0.5) and durations (5m, 1h30m).
            while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == '.' || s[i] == '_') {
                i += 1;
            }
        } else if is_ident_start(c) {
            let start = i;
            while i < s.len() && is_ident(s[i]) {
                i += 1;
            }
            let word: String = s[start..i].iter().collect();
            let mut j = i;
            while j < s.len() && s[j].is_whitespace() {
                j += 1;
            }
            let call = j < s.len() && s[j] == '(';
            let lower = word.to_ascii_lowercase();
            if LABEL_LIST_KEYWORDS.contains(&lower.as_str()) {
                if call {
                    i = skip_balanced(&s, j, ')');
                }
            } else if !call && !KEYWORDS.contains(&lower.as_str()) {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

/// The `expr:` of every rule in a rules file written in this repository's style: the expression
/// on the `expr:` line, or a `|` / `>` block indented under it.
fn rule_exprs(yaml: &str) -> Vec<String> {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut exprs = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        i += 1;
        let Some(rest) = trimmed.strip_prefix("expr:") else {
            continue;
        };
        let rest = rest.trim();
        if rest.starts_with('|') || rest.starts_with('>') {
            let indent = line.len() - trimmed.len();
            let mut block = String::new();
            while i < lines.len() {
                let l = lines[i];
                let body = l.trim_start();
                if !body.is_empty() && l.len() - body.len() <= indent {
                    break;
                }
                block.push_str(l);
                block.push('\n');
                i += 1;
            }
            exprs.push(block);
        } else {
            let unquoted = rest
                .strip_prefix('\'')
                .and_then(|r| r.strip_suffix('\''))
                .map(|r| r.replace("''", "'"))
                .or_else(|| {
                    rest.strip_prefix('"')
                        .and_then(|r| r.strip_suffix('"'))
                        .map(|r| r.replace("\\\"", "\""))
                })
                .unwrap_or_else(|| rest.to_string());
            exprs.push(unquoted);
        }
    }
    exprs
}

/// Values of `- record: NAME` lines.
fn recorded_names(yaml: &str) -> BTreeSet<String> {
    yaml.lines()
        .filter_map(|l| l.trim_start().strip_prefix("- record:"))
        .map(|n| n.trim().trim_matches(['"', '\'']).to_string())
        .collect()
}

fn allowed() -> BTreeSet<String> {
    GPUWATCH_METRICS
        .iter()
        .chain(PROMETHEUS_METRICS)
        .map(ToString::to_string)
        .collect()
}

#[test]
fn promql_scanner_finds_metric_names_only() {
    let expr = r#"
        topk(25, (gpuwatch_process_memory_used_bytes{instance=~"$host", gpu=~"$gpu"}
          + on(instance, job, pid) group_left(user, container) (0 * gpuwatch_process_info))
          or on(instance, job, gpu, pid) gpuwatch_process_memory_used_bytes offset 5m)
        / sum by (instance) (rate(gpuwatch_collect_errors_total{call="x"}[$__rate_interval]))
        >= bool 1e9 unless absent(up{job="gpuwatch"}) and gpuwatch:memory_used:ratio > 0.5
    "#;
    let got: Vec<String> = metric_names(expr).into_iter().collect();
    assert_eq!(
        got,
        [
            "gpuwatch:memory_used:ratio",
            "gpuwatch_collect_errors_total",
            "gpuwatch_process_info",
            "gpuwatch_process_memory_used_bytes",
            "up",
        ]
    );
}

#[test]
fn rules_query_only_exported_metrics() {
    let yaml = read(RULES);
    let exprs = rule_exprs(&yaml);
    let rules = yaml
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            t.starts_with("- alert:") || t.starts_with("- record:")
        })
        .count();
    assert!(rules > 0, "no rules found in {RULES}");
    assert_eq!(
        exprs.len(),
        rules,
        "{RULES}: found {} expr: for {rules} rules; keep each expr on its line or in a `|` block",
        exprs.len()
    );
    let recorded = recorded_names(&yaml);
    let allowed = allowed();
    let mut used = BTreeSet::new();
    for expr in &exprs {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{RULES}: no metric found in `{expr}`");
        for name in names {
            assert!(
                allowed.contains(&name) || recorded.contains(&name),
                "{RULES} queries `{name}`, which is neither a metric of DESIGN.md section 6 nor \
                 recorded in the file (expression: `{}`)",
                expr.trim()
            );
            used.insert(name);
        }
    }
    // The alerts the rules promise are all there.
    for name in [
        "gpuwatch_memory_used_bytes",
        "gpuwatch_memory_total_bytes",
        "gpuwatch_memory_external_bytes",
        "gpuwatch_temperature_celsius",
        "gpuwatch_temperature_slowdown_celsius",
        "gpuwatch_last_collect_success",
        "up",
    ] {
        assert!(used.contains(name), "{RULES} never queries {name}");
    }
    assert!(yaml.contains("predict_linear(gpuwatch_memory_used_bytes[10m], 30 * 60)"));
}

/// Every string under a key named `key`, anywhere in the JSON.
fn strings_under(v: &Value, key: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                match child {
                    Value::String(s) if k == key => out.push(s.clone()),
                    _ => strings_under(child, key, out),
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                strings_under(item, key, out);
            }
        }
        _ => {}
    }
}

/// The series selector inside a Grafana `label_values(SELECTOR, label)` variable query.
fn label_values_selector(query: &str) -> Option<&str> {
    let inner = query
        .trim()
        .strip_prefix("label_values(")?
        .strip_suffix(')')?;
    // label_values(label) has no selector; label_values(selector, label) has one.
    let comma = inner.rfind(',')?;
    Some(&inner[..comma])
}

#[test]
fn grafana_dashboard_is_valid_and_queries_only_exported_metrics() {
    let text = read(DASHBOARD);
    let dash: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{DASHBOARD} is not JSON: {e}"));
    let schema = dash["schemaVersion"].as_u64().expect("schemaVersion");
    assert!(
        schema >= 36,
        "{DASHBOARD}: schemaVersion {schema} is too old"
    );

    let vars: Vec<&str> = dash["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    for want in ["DS_PROMETHEUS", "host", "gpu"] {
        assert!(
            vars.contains(&want),
            "{DASHBOARD}: no `{want}` variable (has {vars:?})"
        );
    }

    // Every panel and query uses the datasource variable.
    let mut uids = Vec::new();
    strings_under(&dash["panels"], "uid", &mut uids);
    assert!(!uids.is_empty());
    for uid in &uids {
        assert_eq!(
            uid, "${DS_PROMETHEUS}",
            "{DASHBOARD}: a datasource is not ${{DS_PROMETHEUS}}"
        );
    }

    let mut exprs = Vec::new();
    strings_under(&dash, "expr", &mut exprs);
    assert!(
        exprs.len() >= 10,
        "{DASHBOARD}: only {} queries",
        exprs.len()
    );
    let mut var_queries = Vec::new();
    strings_under(&dash["templating"], "definition", &mut var_queries);
    for q in &var_queries {
        let selector = label_values_selector(q)
            .unwrap_or_else(|| panic!("{DASHBOARD}: unexpected variable query `{q}`"));
        exprs.push(selector.to_string());
    }

    let allowed = allowed();
    let mut used = BTreeSet::new();
    for expr in &exprs {
        let names = metric_names(expr);
        assert!(
            !names.is_empty(),
            "{DASHBOARD}: no metric found in `{expr}`"
        );
        for name in names {
            assert!(
                allowed.contains(&name),
                "{DASHBOARD} queries `{name}`, which is not a metric of DESIGN.md section 6 \
                 (expression: `{expr}`)"
            );
            used.insert(name);
        }
    }
    for name in [
        "gpuwatch_memory_external_bytes",
        "gpuwatch_memory_unattributed_bytes",
        "gpuwatch_memory_time_to_full_seconds",
        "gpuwatch_utilization_ratio",
        "gpuwatch_temperature_slowdown_celsius",
        "gpuwatch_process_memory_used_bytes",
        "gpuwatch_alert_active",
    ] {
        assert!(used.contains(name), "{DASHBOARD} never queries {name}");
    }
}

/// `promtool check metrics` on a live scrape of the daemon on the NVML test double, with every
/// optional series present: energy, collect errors, an open alert, process memory and SM
/// utilisation, temperature and power, the HTTP server's own series.
#[test]
fn promtool_check_metrics_passes_on_a_live_scrape() {
    use std::io::Write as _;
    let sleeper = common::Sleeper::spawn();
    let sc = common::ScenarioFile::new(&format!(
        "[[gpu]]\nmemory_total = \"80GiB\"\nmemory_reserved = \"512MiB\"\nbase_used = \"76GiB\"\n\
         util_gpu = 70\nutil_mem = 40\ntemperature = 65\npower = 300\npower_limit = 700\n\
         ecc_uncorrected = 1\npcie_rx = 1000\npcie_tx = 500\n\
         [[gpu.process]]\npid = {}\nused = \"2GiB\"\nsm = 50\n\
         [[gpu]]\nmemory_total = \"80GiB\"\n[gpu.faults]\nno_permission = [\"temperature\", \"power\"]\n",
        sleeper.pid()
    ));
    // The near-capacity finding opens at once; the slow readings (energy) come every second.
    std::fs::create_dir_all(sc.dir.path().join("gpuwatch")).expect("config dir");
    std::fs::write(
        sc.dir.path().join("gpuwatch/config.toml"),
        "[sampling]\nslow-interval = \"1s\"\n[detect]\nnear-capacity-min-duration = \"0s\"\n",
    )
    .expect("config");
    let daemon = common::Daemon::start(&sc, &["--no-history"]);
    let wanted = [
        "gpuwatch_energy_consumed_joules_total{",
        "gpuwatch_collect_errors_total{",
        "gpuwatch_alert_active{",
        "gpuwatch_process_memory_used_bytes{",
        "gpuwatch_process_sm_utilization_ratio{",
        "gpuwatch_process_info{",
        "gpuwatch_temperature_celsius{",
        "gpuwatch_power_usage_watts{",
        "gpuwatch_memory_reserved_bytes{",
        "gpuwatch_memory_growth_bytes_per_second{",
        "gpuwatch_last_collect_success ",
        "gpuwatch_http_rejected_total{",
        "gpuwatch_proc_read_errors_total ",
    ];
    let started = std::time::Instant::now();
    let text = loop {
        let (status, text) = common::request(daemon.port, "/metrics", None);
        assert_eq!(status, 200, "{text}");
        let missing: Vec<_> = wanted.iter().filter(|w| !text.contains(*w)).collect();
        if missing.is_empty() {
            break text;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "series never present: {missing:?}\n{text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    };
    let mut child = match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => panic!(
            "promtool is needed for this test ({e}): `apt-get install prometheus` (.ci/run does)"
        ),
    };
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool runs");
    assert!(
        out.status.success(),
        "promtool check metrics ({}):\n{}{}\non:\n{text}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
