use std::collections::HashMap;
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use super::*;

fn parse(text: &str) -> Result<ConfigFile, ConfigError> {
    ConfigFile::parse(text, Path::new("/x/config.toml"))
}

fn resolve_text(text: &str) -> Result<Config, ConfigError> {
    resolve(parse(text)?, &Overrides::default())
}

fn err_text(text: &str) -> String {
    resolve_text(text).unwrap_err().to_string()
}

fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> + use<> {
    let map: HashMap<String, OsString> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), OsString::from(v)))
        .collect();
    move |k| map.get(k).cloned()
}

#[test]
fn shipped_default_toml_is_exactly_the_defaults() {
    let file = ConfigFile::parse(DEFAULT_TOML, Path::new("config/default.toml")).unwrap();
    assert_eq!(
        resolve(file, &Overrides::default()).unwrap(),
        Config::default()
    );
}

#[test]
fn shipped_default_toml_sets_every_key() {
    let file = ConfigFile::parse(DEFAULT_TOML, Path::new("config/default.toml")).unwrap();
    let doc: toml::Table = toml::from_str(DEFAULT_TOML).unwrap();
    for (section, keys) in SCHEMA {
        let table = doc[*section].as_table().unwrap();
        for key in *keys {
            // Keys without a default value are documented, commented out.
            if matches!(
                (*section, *key),
                ("nvml", "library")
                    | ("alerts", "jsonl" | "command" | "webhook")
                    | ("daemon", "token-file")
            ) {
                assert!(DEFAULT_TOML.contains(&format!("\n# {key} = ")), "{key}");
                continue;
            }
            assert!(table.contains_key(*key), "{section}.{key} missing");
        }
    }
    assert!(file.nvml.unwrap().library.is_none());
    assert_eq!(file.alerts.unwrap().jsonl, None);
}

#[test]
fn defaults_round_trip_through_to_toml() {
    let text = Config::default().to_toml();
    assert_eq!(resolve_text(&text).unwrap(), Config::default());
}

#[test]
fn a_changed_config_round_trips_through_to_toml() {
    let mut c = Config::default();
    c.sampling.interval = Duration::from_millis(250);
    c.sampling.slow_interval = Duration::from_secs(90);
    c.sampling.hang_timeout = Duration::from_mins(10);
    c.nvml.library = Some("/opt/nvml/libnvidia-ml.so.1".into());
    c.nvml.reinit_backoff_max = Duration::from_secs(1);
    c.display.color = ColorChoice::Never;
    c.watch.specs = vec![
        "pid:42".parse().unwrap(),
        "user:alice".parse().unwrap(),
        "cmd:python .*train\\.py \"x\"".parse().unwrap(),
    ];
    c.pick.min_free = (8 << 30) + 1;
    c.pick.count = 3;
    c.pick.format = PickFormat::Uuid;
    c.history.window = Duration::from_hours(24);
    c.snapshot.show_unattributed_min = 0;
    c.detect = crate::detect::Rules {
        near_capacity_warn: 0.925,
        near_capacity_critical: 0.99,
        near_capacity_headroom: 512 << 20,
        near_capacity_hysteresis: 0.025,
        near_capacity_min_duration: Duration::ZERO,
        filling_window: Duration::from_secs(30),
        filling_horizon: Duration::from_hours(2),
        filling_min_rate: mib_per_min_to_bytes_per_s(12.5),
        filling_critical_used: 0.75,
        leak_warmup: Duration::from_secs(90),
        leak_sustain: Duration::from_mins(20),
        leak_min_rate: 3.0 * 1024.0 * 1024.0,
        external_window: Duration::from_secs(45),
        external_rise: 3 << 29,
        external_horizon: Duration::from_mins(30),
        idle_min_bytes: 4_000_000_000,
        idle_duration: Duration::from_hours(1),
        exited_grace: Duration::from_mins(2),
    };
    c.alerts = crate::alert::AlertOptions {
        log: false,
        jsonl: Some("/var/log/gpuwatch/events.jsonl".into()),
        command: Some("echo \"$GPUWATCH_RULE\" >> /tmp/x".to_owned()),
        webhook: Some("https://hooks.example.com/T0/B0?x=1".to_owned()),
        webhook_timeout: Duration::from_millis(250),
        webhook_retries: 0,
        desktop: true,
        min_severity: crate::detect::Severity::Info,
        rate_limit: Duration::ZERO,
        queue: 10_000,
    };
    // Every key of the two sections differs from its default.
    let d = Config::default();
    let text = c.to_toml();
    let changed = toml::from_str::<toml::Table>(&text).unwrap();
    let default = toml::from_str::<toml::Table>(&d.to_toml()).unwrap();
    for (section, keys) in SCHEMA
        .iter()
        .filter(|(s, _)| ["detect", "alerts"].contains(s))
    {
        for key in *keys {
            assert_ne!(
                changed[*section].get(*key),
                default[*section].get(*key),
                "{section}.{key}"
            );
        }
    }
    assert_eq!(resolve_text(&text).unwrap(), c, "{text}");
}

#[test]
fn detect_and_alerts_sections_print_as_written() {
    let text = Config::default().to_toml();
    for line in [
        "[detect]\nnear-capacity-warn = 90\nnear-capacity-critical = 97\n",
        "near-capacity-hysteresis = 5\n",
        "filling-min-rate = 60\n",
        "leak-min-rate = 10\n",
        "idle-min = \"1GiB\"\n",
        "[alerts]\nlog = true\nwebhook-timeout = \"5s\"\nwebhook-retries = 3\n",
        "min-severity = \"warning\"\n",
        "queue = 64\n",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
    let mut c = Config::default();
    c.detect.near_capacity_warn = 0.925;
    c.detect.leak_min_rate = mib_per_min_to_bytes_per_s(2.5);
    let text = c.to_toml();
    assert!(text.contains("near-capacity-warn = 92.5\n"), "{text}");
    assert!(text.contains("leak-min-rate = 2.5\n"), "{text}");
}

#[test]
fn detect_and_alerts_values_are_read_and_converted() {
    let c = resolve_text(
        r#"
        [detect]
        near-capacity-warn = 80
        near-capacity-critical = 95.5
        near-capacity-hysteresis = 0
        filling-min-rate = 120
        leak-min-rate = 0.5
        idle-min = "512MiB"
        [alerts]
        log = false
        jsonl = "events.jsonl"
        webhook = "http://localhost:8080/hook"
        webhook-retries = 10
        min-severity = "Critical"
        queue = 1
        "#,
    )
    .unwrap();
    assert_eq!(c.detect.near_capacity_warn.to_bits(), 0.80_f64.to_bits());
    assert_eq!(
        c.detect.near_capacity_critical.to_bits(),
        0.955_f64.to_bits()
    );
    assert_eq!(
        c.detect.near_capacity_hysteresis.to_bits(),
        0.0_f64.to_bits()
    );
    assert_eq!(c.detect.filling_min_rate.to_bits(), 2_097_152_f64.to_bits());
    assert_eq!(
        c.detect.leak_min_rate.to_bits(),
        (1024.0_f64 * 1024.0 / 120.0).to_bits()
    );
    assert_eq!(c.detect.idle_min_bytes, 512 << 20);
    assert_eq!(c.detect.leak_sustain, Duration::from_mins(5)); // default
    assert!(!c.alerts.log);
    assert_eq!(c.alerts.jsonl, Some("/x/events.jsonl".into()));
    assert_eq!(
        c.alerts.webhook.as_deref(),
        Some("http://localhost:8080/hook")
    );
    assert_eq!(c.alerts.webhook_retries, 10);
    assert_eq!(c.alerts.min_severity, crate::detect::Severity::Critical);
    assert_eq!(c.alerts.queue, 1);
    assert_eq!(c.alerts.rate_limit, Duration::from_mins(1)); // default
}

#[test]
fn detect_and_alerts_out_of_range_name_file_key_and_range() {
    for (text, expected) in [
        (
            "[detect]\nnear-capacity-warn = 45",
            "detect.near-capacity-warn = 45 is out of range (expected a percentage from 50 to \
             100)",
        ),
        (
            "[detect]\nnear-capacity-critical = 100.5",
            "detect.near-capacity-critical = 100.5 is out of range (expected a percentage from \
             50 to 100)",
        ),
        (
            "[detect]\nnear-capacity-hysteresis = 21",
            "detect.near-capacity-hysteresis = 21 is out of range (expected a number of \
             percentage points from 0 to 20)",
        ),
        (
            "[detect]\nfilling-min-rate = -1",
            "detect.filling-min-rate = -1 is out of range (expected a rate in MiB per minute of \
             at least 0)",
        ),
        (
            "[detect]\nleak-min-rate = nan",
            "detect.leak-min-rate = nan is out of range (expected a rate in MiB per minute of \
             at least 0)",
        ),
        (
            "[detect]\nnear-capacity-min-duration = \"11m\"",
            "detect.near-capacity-min-duration = \"11m\" is out of range (expected a duration \
             from 0s to 10m)",
        ),
        (
            "[detect]\nfilling-window = \"1s\"",
            "detect.filling-window = \"1s\" is out of range (expected a duration from 5s to 10m)",
        ),
        (
            "[detect]\nfilling-horizon = \"2d\"",
            "detect.filling-horizon = \"2d\" is out of range (expected a duration from 60s to 24h)",
        ),
        (
            "[detect]\nleak-warmup = \"2h\"",
            "detect.leak-warmup = \"2h\" is out of range (expected a duration from 0s to 1h)",
        ),
        (
            "[detect]\nleak-sustain = \"10s\"",
            "detect.leak-sustain = \"10s\" is out of range (expected a duration from 30s to 24h)",
        ),
        (
            "[detect]\nexternal-window = \"5s\"",
            "detect.external-window = \"5s\" is out of range (expected a duration from 10s to 1h)",
        ),
        (
            "[detect]\nexternal-horizon = \"30s\"",
            "detect.external-horizon = \"30s\" is out of range (expected a duration from 60s to \
             24h)",
        ),
        (
            "[detect]\nidle-duration = \"59s\"",
            "detect.idle-duration = \"59s\" is out of range (expected a duration from 60s to 24h)",
        ),
        (
            "[alerts]\nwebhook-timeout = \"50ms\"",
            "alerts.webhook-timeout = \"50ms\" is out of range (expected a duration from 100ms \
             to 5m)",
        ),
        (
            "[alerts]\nrate-limit = \"25h\"",
            "alerts.rate-limit = \"25h\" is out of range (expected a duration from 0s to 24h)",
        ),
        (
            "[alerts]\nwebhook-retries = 11",
            "alerts.webhook-retries = 11 is out of range (expected a whole number from 0 to 10)",
        ),
        (
            "[alerts]\nqueue = 0",
            "alerts.queue = 0 is out of range (expected a whole number from 1 to 10000)",
        ),
        (
            "[alerts]\nqueue = 10001",
            "alerts.queue = 10001 is out of range (expected a whole number from 1 to 10000)",
        ),
    ] {
        assert_eq!(
            err_text(text),
            format!("config file '/x/config.toml': {expected}"),
            "{text}"
        );
    }
}

#[test]
fn detect_and_alerts_bad_forms_name_file_key_and_expected_form() {
    let e = err_text("[detect]\nnear-capacity-headroom = \"2G\"");
    assert!(
        e.starts_with(
            "config file '/x/config.toml': detect.near-capacity-headroom = \"2G\" is ambiguous"
        ),
        "{e}"
    );
    assert_eq!(
        err_text("[alerts]\nwebhook = \"hooks.example.com/x\""),
        "config file '/x/config.toml': alerts.webhook = \"hooks.example.com/x\" is not a webhook \
         URL (expected a URL starting with http:// or https://)"
    );
    assert_eq!(
        err_text("[alerts]\nmin-severity = \"error\""),
        "config file '/x/config.toml': alerts.min-severity = \"error\" is not one of info, \
         warning, critical"
    );
    assert_eq!(
        err_text("[alerts]\ncommand = \" \""),
        "config file '/x/config.toml': alerts.command = \" \" is empty (expected a shell command)"
    );
    assert_eq!(
        err_text("[alerts]\njsonl = \"\""),
        "config file '/x/config.toml': alerts.jsonl = \"\" is empty (expected a path to a file)"
    );
}

#[test]
fn detect_and_alerts_wrong_toml_types_name_the_key() {
    let e = err_text("[alerts]\nlog = \"yes\"\n");
    assert!(
        e.starts_with("config file '/x/config.toml': alerts.log: line 2, column 7: "),
        "{e}"
    );
    assert!(
        e.contains("invalid type: string \"yes\", expected a boolean"),
        "{e}"
    );
    let e = err_text("[alerts]\nqueue = 6.5\n");
    assert!(e.contains("alerts.queue: line 2"), "{e}");
    let e = err_text("[detect]\nnear-capacity-warn = \"90%\"\n");
    assert!(e.contains("detect.near-capacity-warn: line 2"), "{e}");
    let e = err_text("[detect]\nidle-min = 1024\n");
    assert!(e.contains("detect.idle-min: line 2"), "{e}");
}

#[test]
fn near_capacity_critical_below_warn_names_both() {
    assert_eq!(
        err_text("[detect]\nnear-capacity-warn = 95\nnear-capacity-critical = 92.5"),
        "the near-capacity critical level 92.5% (detect.near-capacity-critical in config file \
         '/x/config.toml') is below the warning level 95% (detect.near-capacity-warn in config \
         file '/x/config.toml'); critical must be at least warn"
    );
    // Explicitly set to the default value still counts as set.
    let e = err_text("[detect]\nnear-capacity-warn = 98\nnear-capacity-critical = 97");
    assert!(
        e.contains("critical level 97% (detect.near-capacity-critical in"),
        "{e}"
    );
    // Equal is fine.
    let c = resolve_text("[detect]\nnear-capacity-warn = 96\nnear-capacity-critical = 96").unwrap();
    assert_eq!(
        c.detect.near_capacity_critical.to_bits(),
        c.detect.near_capacity_warn.to_bits()
    );
}

#[test]
fn default_near_capacity_critical_follows_a_higher_warn() {
    let c = resolve_text("[detect]\nnear-capacity-warn = 99").unwrap();
    assert_eq!(
        c.detect.near_capacity_critical.to_bits(),
        0.99_f64.to_bits()
    );
    assert_eq!(c.detect.near_capacity_warn.to_bits(), 0.99_f64.to_bits());
}

#[test]
fn unknown_keys_in_detect_and_alerts() {
    let e = err_text("[detect]\nnear-capacity-warn = 90\nnear-capacity = 80\n");
    assert!(
        e.starts_with(
            "config file '/x/config.toml': unknown key 'detect.near-capacity' at line 3, \
             column 1 (valid keys in [detect]: near-capacity-warn, near-capacity-critical, "
        ),
        "{e}"
    );
    assert!(e.ends_with("idle-min, idle-duration, exited-grace)"), "{e}");
    assert_eq!(
        err_text("[alerts]\nslack = \"https://x\"\n"),
        "config file '/x/config.toml': unknown key 'alerts.slack' at line 2, column 1 (valid \
         keys in [alerts]: log, jsonl, command, webhook, webhook-timeout, webhook-retries, \
         desktop, min-severity, rate-limit, queue)"
    );
}

#[test]
fn severity_names_agree_with_its_display() {
    use crate::detect::Severity;
    for v in [Severity::Info, Severity::Warning, Severity::Critical] {
        assert_eq!(Severity::parse_name(&v.to_string()), Ok(v));
        assert_eq!(v.name(), v.to_string());
    }
}

#[test]
fn to_toml_reads_like_the_shipped_file() {
    let text = Config::default().to_toml();
    assert!(text.contains("[sampling]\ninterval = \"1s\"\n"), "{text}");
    assert!(text.contains("show-unattributed-min = \"1MiB\""), "{text}");
    assert!(text.contains("specs = []"), "{text}");
    assert!(!text.contains("library"), "{text}");
}

#[test]
fn empty_file_is_the_defaults() {
    assert_eq!(resolve_text("").unwrap(), Config::default());
    assert_eq!(
        resolve(ConfigFile::default(), &Overrides::default()).unwrap(),
        Config::default()
    );
}

#[test]
fn file_values_are_read() {
    let c = resolve_text(
        r#"
        [sampling]
        interval = "250ms"
        slow-interval = "2m"
        [pick]
        min-free = "8 GiB"
        count = 2
        format = "index"
        [watch]
        specs = ["pid:7", "cmd:^python"]
        [display]
        color = "Never"
        "#,
    )
    .unwrap();
    assert_eq!(c.sampling.interval, Duration::from_millis(250));
    assert_eq!(c.sampling.slow_interval, Duration::from_mins(2));
    assert_eq!(c.pick.min_free, 8 << 30);
    assert_eq!(c.pick.count, 2);
    assert_eq!(c.pick.format, PickFormat::Index);
    assert_eq!(c.display.color, ColorChoice::Never);
    assert_eq!(c.watch.specs.len(), 2);
    // Untouched keys keep their defaults.
    assert_eq!(c.history, Config::default().history);
}

#[test]
fn dotted_keys_at_top_level_work() {
    let c = resolve_text("sampling.interval = \"2s\"").unwrap();
    assert_eq!(c.sampling.interval, Duration::from_secs(2));
}

#[test]
fn out_of_range_names_file_key_and_range() {
    assert_eq!(
        err_text("[sampling]\ninterval = \"5ms\""),
        "config file '/x/config.toml': sampling.interval = \"5ms\" is out of range \
         (expected a duration from 100ms to 60s)"
    );
    assert_eq!(
        err_text("[sampling]\nhang-timeout = \"11m\""),
        "config file '/x/config.toml': sampling.hang-timeout = \"11m\" is out of range \
         (expected a duration from 1s to 10m)"
    );
    assert_eq!(
        err_text("[history]\nwindow = \"2d\""),
        "config file '/x/config.toml': history.window = \"2d\" is out of range \
         (expected a duration from 10s to 24h)"
    );
    assert_eq!(
        err_text("[pick]\ncount = 0"),
        "config file '/x/config.toml': pick.count = 0 is out of range \
         (expected a whole number of at least 1)"
    );
}

#[test]
fn bad_forms_name_file_key_and_expected_form() {
    let e = err_text("[sampling]\ninterval = \"soon\"");
    assert!(
        e.starts_with(
            "config file '/x/config.toml': sampling.interval = \"soon\" is not a duration \
             (expected a duration like 250ms, 1s or 2m"
        ),
        "{e}"
    );
    let e = err_text("[pick]\nmin-free = \"lots\"");
    assert!(
        e.starts_with("config file '/x/config.toml': pick.min-free = \"lots\" is not a size"),
        "{e}"
    );
    assert_eq!(
        err_text("[pick]\nformat = \"json\""),
        "config file '/x/config.toml': pick.format = \"json\" is not one of uuid, index, env"
    );
    assert_eq!(
        err_text("[display]\ncolor = \"yes\""),
        "config file '/x/config.toml': display.color = \"yes\" is not one of auto, always, never"
    );
    assert_eq!(
        err_text("[watch]\nspecs = [\"pid:1\", \"foo\"]"),
        "config file '/x/config.toml': watch.specs[1] = \"foo\" is not a valid watch spec: \
         expected pid:N, user:NAME or cmd:REGEX"
    );
    let e = err_text("[watch]\nspecs = [\"cmd:(\"]");
    assert!(
        e.starts_with(
            "config file '/x/config.toml': watch.specs[0] = \"cmd:(\" is not a valid watch \
             spec: bad regex '(': "
        ),
        "{e}"
    );
    assert!(err_text("[nvml]\nlibrary = \"\"").contains("nvml.library = \"\" is empty"));
}

#[test]
fn wrong_toml_types_name_the_key_and_position() {
    let e = err_text("[sampling]\ninterval = 5\n");
    assert!(
        e.starts_with("config file '/x/config.toml': sampling.interval: line 2, column 12: "),
        "{e}"
    );
    assert!(
        e.contains("invalid type: integer `5`, expected a string"),
        "{e}"
    );
    let e = err_text("sampling = 3");
    assert!(
        e.starts_with("config file '/x/config.toml': sampling: line 1, column 12"),
        "{e}"
    );
}

#[test]
fn toml_syntax_errors_give_the_position() {
    let e = err_text("[sampling]\ninterval = \"1s\n");
    assert!(
        e.starts_with("config file '/x/config.toml': line 2, column "),
        "{e}"
    );
}

#[test]
fn unknown_key_names_key_line_and_valid_keys() {
    let err = resolve_text("[sampling]\ninterval = \"1s\"\n  intervall = \"2s\"\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "config file '/x/config.toml': unknown key 'sampling.intervall' at line 3, column 3 \
         (valid keys in [sampling]: interval, slow-interval, hang-timeout)"
    );
    assert!(matches!(
        err,
        ConfigError::UnknownKey {
            line: 3,
            column: 3,
            ..
        }
    ));
}

#[test]
fn unknown_section_names_the_valid_sections() {
    assert_eq!(
        err_text("\n[sampler]\ninterval = \"1s\""),
        "config file '/x/config.toml': unknown section 'sampler' at line 2, column 2 \
         (valid sections: sampling, nvml, display, watch, pick, history, snapshot, detect, alerts, daemon)"
    );
    assert_eq!(
        err_text("color = \"never\""),
        "config file '/x/config.toml': unknown section 'color' at line 1, column 1 \
         (valid sections: sampling, nvml, display, watch, pick, history, snapshot, detect, alerts, daemon)"
    );
}

#[test]
fn unknown_nested_tables_are_unknown_keys() {
    let e = err_text("[pick.extra]\nx = 1");
    assert!(
        e.contains("unknown key 'pick.extra' at line 1, column 7"),
        "{e}"
    );
}

#[test]
fn unknown_keys_in_inline_tables_are_found() {
    let e = err_text("sampling = { interval = \"1s\", every = \"2s\" }");
    assert!(
        e.contains("unknown key 'sampling.every' at line 1, column 31"),
        "{e}"
    );
}

#[test]
fn enum_names_agree_with_clap() {
    use clap::ValueEnum;
    for v in ColorChoice::value_variants() {
        let name = v.to_possible_value().unwrap().get_name().to_owned();
        assert_eq!(v.to_string(), name);
        assert_eq!(name.parse::<ColorChoice>(), Ok(*v));
    }
    for v in PickFormat::value_variants() {
        let name = v.to_possible_value().unwrap().get_name().to_owned();
        assert_eq!(v.to_string(), name);
        assert_eq!(name.parse::<PickFormat>(), Ok(*v));
    }
}

#[test]
fn command_line_over_file_over_defaults() {
    let file = parse(
        "[sampling]\ninterval = \"2s\"\nhang-timeout = \"9s\"\n[pick]\ncount = 2\nformat = \"uuid\"",
    )
    .unwrap();
    let overrides = Overrides {
        interval: Some(Duration::from_millis(500)),
        pick_count: Some(4),
        color: Some(ColorChoice::Always),
        watch: Some(vec!["user:bob".parse().unwrap()]),
        ..Overrides::default()
    };
    let c = resolve(file, &overrides).unwrap();
    assert_eq!(c.sampling.interval, Duration::from_millis(500)); // flag
    assert_eq!(c.sampling.hang_timeout, Duration::from_secs(9)); // file
    assert_eq!(c.sampling.slow_interval, Duration::from_secs(10)); // default
    assert_eq!(c.pick.count, 4); // flag
    assert_eq!(c.pick.format, PickFormat::Uuid); // file
    assert_eq!(c.display.color, ColorChoice::Always); // flag
    assert_eq!(c.watch.specs, vec!["user:bob".parse().unwrap()]); // flag
    assert_eq!(c.pick.min_free, 0); // default
}

#[test]
fn watch_flags_replace_file_specs() {
    let file = parse("[watch]\nspecs = [\"pid:1\", \"pid:2\"]").unwrap();
    let overrides = Overrides {
        watch: Some(vec!["pid:3".parse().unwrap()]),
        ..Overrides::default()
    };
    let c = resolve(file, &overrides).unwrap();
    assert_eq!(c.watch.specs, vec![crate::watch::WatchSpec::Pid(3)]);
}

#[test]
fn command_line_values_are_checked_and_name_the_flag() {
    let bad = Overrides {
        interval: Some(Duration::from_millis(5)),
        ..Overrides::default()
    };
    assert_eq!(
        resolve(ConfigFile::default(), &bad)
            .unwrap_err()
            .to_string(),
        "--interval '5ms' is out of range (expected a duration from 100ms to 60s)"
    );
    let bad = Overrides {
        pick_count: Some(0),
        ..Overrides::default()
    };
    assert_eq!(
        resolve(ConfigFile::default(), &bad)
            .unwrap_err()
            .to_string(),
        "--count '0' is out of range (expected a whole number of at least 1)"
    );
    let bad = Overrides {
        hang_timeout: Some(Duration::from_millis(10)),
        ..Overrides::default()
    };
    assert!(
        resolve(ConfigFile::default(), &bad)
            .unwrap_err()
            .to_string()
            .starts_with("--hang-timeout '10ms' is out of range")
    );
}

#[test]
fn a_bad_file_value_is_reported_even_when_a_flag_overrides_it() {
    let file = parse("[sampling]\ninterval = \"5ms\"").unwrap();
    let overrides = Overrides {
        interval: Some(Duration::from_secs(1)),
        ..Overrides::default()
    };
    assert!(resolve(file, &overrides).is_err());
}

#[test]
fn slow_interval_must_not_be_shorter_than_interval() {
    let e = err_text("[sampling]\ninterval = \"5s\"\nslow-interval = \"2s\"");
    assert_eq!(
        e,
        "the slow interval 2s (sampling.slow-interval in config file '/x/config.toml') is \
         shorter than the interval 5s (sampling.interval in config file '/x/config.toml'); the \
         slow cadence must be at least the fast one"
    );
    let file = parse("[sampling]\nslow-interval = \"2s\"").unwrap();
    let overrides = Overrides {
        interval: Some(Duration::from_secs(3)),
        ..Overrides::default()
    };
    let e = resolve(file, &overrides).unwrap_err().to_string();
    assert!(e.contains("interval 3s (--interval)"), "{e}");
}

#[test]
fn default_slow_interval_follows_a_longer_interval() {
    let c = resolve_text("[sampling]\ninterval = \"30s\"").unwrap();
    assert_eq!(c.sampling.slow_interval, Duration::from_secs(30));
}

#[test]
fn relative_library_paths_are_relative_to_the_file() {
    let c = resolve_text("[nvml]\nlibrary = \"lib/libnvidia-ml.so.1\"").unwrap();
    assert_eq!(c.nvml.library, Some("/x/lib/libnvidia-ml.so.1".into()));
    let c = resolve_text("[nvml]\nlibrary = \"libnvidia-ml.so.1\"").unwrap();
    assert_eq!(c.nvml.library, Some("libnvidia-ml.so.1".into()));
    let c = resolve_text("[nvml]\nlibrary = \"/opt/libnvidia-ml.so\"").unwrap();
    assert_eq!(c.nvml.library, Some("/opt/libnvidia-ml.so".into()));
}

#[test]
fn lookup_prefers_xdg_then_home() {
    let both = env(&[("XDG_CONFIG_HOME", "/xdg"), ("HOME", "/home/a")]);
    assert_eq!(
        default_path(&both),
        Some("/xdg/gpuwatch/config.toml".into())
    );
    let home = env(&[("HOME", "/home/a")]);
    assert_eq!(
        default_path(&home),
        Some("/home/a/.config/gpuwatch/config.toml".into())
    );
    let empty_xdg = env(&[("XDG_CONFIG_HOME", ""), ("HOME", "/home/a")]);
    assert_eq!(
        default_path(&empty_xdg),
        Some("/home/a/.config/gpuwatch/config.toml".into())
    );
    let relative_xdg = env(&[("XDG_CONFIG_HOME", "cfg"), ("HOME", "/home/a")]);
    assert_eq!(
        default_path(&relative_xdg),
        Some("/home/a/.config/gpuwatch/config.toml".into())
    );
    assert_eq!(default_path(&env(&[])), None);
    assert_eq!(locate(None, &env(&[])), Location::None);
    assert_eq!(
        locate(Some(Path::new("/c.toml")), &both),
        Location::Explicit("/c.toml".into())
    );
}

#[test]
fn xdg_file_is_read_and_a_missing_one_means_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path().join("xdg");
    let vars = env(&[("XDG_CONFIG_HOME", xdg.to_str().unwrap())]);
    // Missing default file: defaults.
    assert_eq!(
        load(None, &Overrides::default(), &vars).unwrap(),
        Config::default()
    );
    std::fs::create_dir_all(xdg.join("gpuwatch")).unwrap();
    std::fs::write(
        xdg.join("gpuwatch/config.toml"),
        "[sampling]\ninterval = \"3s\"\n",
    )
    .unwrap();
    let c = load(None, &Overrides::default(), &vars).unwrap();
    assert_eq!(c.sampling.interval, Duration::from_secs(3));
    // And errors name that file.
    std::fs::write(xdg.join("gpuwatch/config.toml"), "[sampling]\nnope = 1\n").unwrap();
    let e = load(None, &Overrides::default(), &vars)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("'{}'", xdg.join("gpuwatch/config.toml").display())),
        "{e}"
    );
}

#[test]
fn explicit_config_must_exist() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.toml");
    let err = load(Some(&missing), &Overrides::default(), &env(&[])).unwrap_err();
    assert!(matches!(err, ConfigError::NotFound { .. }));
    assert_eq!(
        err.to_string(),
        format!("config file '{}' does not exist", missing.display())
    );
    let present = dir.path().join("c.toml");
    std::fs::write(&present, "[pick]\ncount = 2\n").unwrap();
    // The explicit file wins over the default place.
    let vars = env(&[("HOME", dir.path().to_str().unwrap())]);
    let c = load(Some(&present), &Overrides::default(), &vars).unwrap();
    assert_eq!(c.pick.count, 2);
}

#[test]
fn unreadable_config_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    // A directory where the file should be.
    let err = load(Some(dir.path()), &Overrides::default(), &env(&[])).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }), "{err}");
}

#[test]
fn value_parsers_for_the_command_line() {
    assert_eq!(
        parse_duration_in(INTERVAL_RANGE, "250ms"),
        Ok(Duration::from_millis(250))
    );
    assert_eq!(parse_size("8GiB"), Ok(8 << 30));
    assert_eq!("never".parse::<ColorChoice>(), Ok(ColorChoice::Never));
    assert_eq!("ENV".parse::<PickFormat>(), Ok(PickFormat::Env));
    assert_eq!(
        "json".parse::<PickFormat>().unwrap_err().to_string(),
        "not one of uuid, index, env"
    );
}

#[test]
fn default_values_lie_in_their_ranges() {
    let d = Config::default();
    assert!(INTERVAL_RANGE.contains(d.sampling.interval));
    assert!(SLOW_INTERVAL_RANGE.contains(d.sampling.slow_interval));
    assert!(d.sampling.slow_interval >= d.sampling.interval);
    assert!(HANG_TIMEOUT_RANGE.contains(d.sampling.hang_timeout));
    assert!(REINIT_BACKOFF_MAX_RANGE.contains(d.nvml.reinit_backoff_max));
    assert!(HISTORY_WINDOW_RANGE.contains(d.history.window));
    assert!(d.pick.count >= MIN_PICK_COUNT);
    let r = &d.detect;
    assert!(NEAR_CAPACITY_PERCENT_RANGE.contains(fraction_to_percent(r.near_capacity_warn)));
    assert!(NEAR_CAPACITY_PERCENT_RANGE.contains(fraction_to_percent(r.near_capacity_critical)));
    assert!(r.near_capacity_critical >= r.near_capacity_warn);
    assert!(HYSTERESIS_RANGE.contains(fraction_to_percent(r.near_capacity_hysteresis)));
    assert!(NEAR_CAPACITY_MIN_DURATION_RANGE.contains(r.near_capacity_min_duration));
    assert!(FILLING_WINDOW_RANGE.contains(r.filling_window));
    assert!(FILLING_HORIZON_RANGE.contains(r.filling_horizon));
    assert!(GROWTH_RATE_RANGE.contains(bytes_per_s_to_mib_per_min(r.filling_min_rate)));
    assert!(FILLING_CRITICAL_USED_RANGE.contains(fraction_to_percent(r.filling_critical_used)));
    assert!(LEAK_WARMUP_RANGE.contains(r.leak_warmup));
    assert!(LEAK_SUSTAIN_RANGE.contains(r.leak_sustain));
    assert!(GROWTH_RATE_RANGE.contains(bytes_per_s_to_mib_per_min(r.leak_min_rate)));
    assert!(EXTERNAL_WINDOW_RANGE.contains(r.external_window));
    assert!(EXTERNAL_HORIZON_RANGE.contains(r.external_horizon));
    assert!(IDLE_DURATION_RANGE.contains(r.idle_duration));
    assert!(EXITED_GRACE_RANGE.contains(r.exited_grace));
    let a = &d.alerts;
    assert!(WEBHOOK_TIMEOUT_RANGE.contains(a.webhook_timeout));
    assert!(RATE_LIMIT_RANGE.contains(a.rate_limit));
    assert!(check_integer(WEBHOOK_RETRIES_RANGE, i64::from(a.webhook_retries)).is_ok());
    assert!(check_integer(ALERT_QUEUE_RANGE, i64::try_from(a.queue).unwrap()).is_ok());
}

/// The public parsers plug into clap as value parsers, and clap's message names the flag.
mod with_clap {
    use clap::Parser;

    use super::*;
    use crate::watch::WatchSpec;

    #[derive(Debug, Parser)]
    struct Cli {
        #[arg(long, value_parser = |s: &str| parse_duration_in(INTERVAL_RANGE, s))]
        interval: Option<Duration>,
        #[arg(long, value_parser = parse_size)]
        min_free: Option<u64>,
        #[arg(long, value_parser = parse_count)]
        count: Option<u32>,
        #[arg(long)]
        watch: Vec<WatchSpec>,
        #[arg(long, value_enum)]
        color: Option<ColorChoice>,
        #[arg(long, value_enum)]
        format: Option<PickFormat>,
    }

    fn try_parse(args: &[&str]) -> Result<Cli, String> {
        Cli::try_parse_from(std::iter::once("gpuwatch").chain(args.iter().copied()))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn flags_parse() {
        let cli = try_parse(&[
            "--interval",
            "250ms",
            "--min-free",
            "8GiB",
            "--count",
            "2",
            "--watch",
            "pid:4",
            "--watch",
            "cmd:train",
            "--color",
            "never",
            "--format",
            "uuid",
        ])
        .unwrap();
        assert_eq!(cli.interval, Some(Duration::from_millis(250)));
        assert_eq!(cli.min_free, Some(8 << 30));
        assert_eq!(cli.count, Some(2));
        assert_eq!(cli.watch.len(), 2);
        assert_eq!(cli.color, Some(ColorChoice::Never));
        assert_eq!(cli.format, Some(PickFormat::Uuid));
    }

    #[test]
    fn flag_errors_name_the_flag_and_the_form() {
        let e = try_parse(&["--interval", "5ms"]).unwrap_err();
        assert!(
            e.contains(
                "invalid value '5ms' for '--interval <INTERVAL>': out of range (expected a \
                 duration from 100ms to 60s)"
            ),
            "{e}"
        );
        let e = try_parse(&["--min-free", "8G"]).unwrap_err();
        assert!(e.contains("'--min-free <MIN_FREE>': ambiguous"), "{e}");
        let e = try_parse(&["--watch", "foo"]).unwrap_err();
        assert!(
            e.contains("invalid watch spec 'foo': expected pid:N, user:NAME or cmd:REGEX"),
            "{e}"
        );
        let e = try_parse(&["--count", "0"]).unwrap_err();
        assert!(e.contains("'--count <COUNT>': out of range"), "{e}");
    }
}
