use std::collections::HashMap;
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use super::*;

const DEFAULT_TOML: &str = include_str!("../../config/default.toml");

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
            // nvml.library has no default value; it is documented, commented out.
            if (*section, *key) == ("nvml", "library") {
                assert!(DEFAULT_TOML.contains("# library = "));
                continue;
            }
            assert!(table.contains_key(*key), "{section}.{key} missing");
        }
    }
    assert!(file.nvml.unwrap().library.is_none());
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
    let text = c.to_toml();
    assert_eq!(resolve_text(&text).unwrap(), c, "{text}");
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
         (valid sections: sampling, nvml, display, watch, pick, history, snapshot)"
    );
    assert_eq!(
        err_text("color = \"never\""),
        "config file '/x/config.toml': unknown section 'color' at line 1, column 1 \
         (valid sections: sampling, nvml, display, watch, pick, history, snapshot)"
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
