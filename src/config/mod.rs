//! Configuration: the config file, the command-line overrides, and the resolved [`Config`]
//! every front end reads.
//!
//! Layers, highest first: command line ([`Overrides`]) over the config file ([`ConfigFile`])
//! over the defaults ([`Config::default`], documented in `config/default.toml`, which a test
//! keeps equal to the defaults). [`resolve`] merges them in one place and checks every value
//! with the same ranges whichever layer it came from, so an error names the flag or the file
//! and key it came from.
//!
//! The file is looked up by [`locate`]: `--config PATH` (which must exist), else
//! `$XDG_CONFIG_HOME/gpuwatch/config.toml`, else `$HOME/.config/gpuwatch/config.toml`; a
//! default file that does not exist means "all defaults". The environment is passed in, never
//! read deep inside, so tests can inject it.

mod error;
mod file;
mod value;

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

pub use error::{ConfigError, Origin};
pub use file::{
    AlertsFile, ConfigFile, DaemonFile, DetectFile, DisplayFile, HistoryFile, Number, NvmlFile,
    PickFile, SCHEMA, SamplingFile, SnapshotFile, WatchFile,
};
pub use value::{
    ALERT_QUEUE_RANGE, DurationRange, EXITED_GRACE_RANGE, EXTERNAL_HORIZON_RANGE,
    EXTERNAL_WINDOW_RANGE, FILLING_CRITICAL_USED_RANGE, FILLING_HORIZON_RANGE,
    FILLING_WINDOW_RANGE, GROWTH_RATE_RANGE, HANG_TIMEOUT_RANGE, HISTORY_WINDOW_RANGE,
    HTTP_TIMEOUT_RANGE, HYSTERESIS_RANGE, IDLE_DURATION_RANGE, INTERVAL_RANGE, IntRange,
    LEAK_SUSTAIN_RANGE, LEAK_WARMUP_RANGE, MAX_CONNECTIONS_RANGE, MAX_EVENT_STREAMS_RANGE,
    METRICS_TOP_N_RANGE, MIN_PICK_COUNT, NEAR_CAPACITY_MIN_DURATION_RANGE,
    NEAR_CAPACITY_PERCENT_RANGE, NumberRange, RATE_LIMIT_RANGE, REINIT_BACKOFF_MAX_RANGE,
    SLOW_INTERVAL_RANGE, ValueError, WEBHOOK_RETRIES_RANGE, WEBHOOK_TIMEOUT_RANGE,
    bytes_per_s_to_mib_per_min, check_count, check_duration, check_integer, check_number,
    format_duration, format_number, format_size, fraction_to_percent, mib_per_min_to_bytes_per_s,
    parse_count, parse_duration_in, parse_size, parse_webhook_url, percent_to_fraction,
};

use crate::alert::AlertOptions;
use crate::detect::{Rules, Severity};
use crate::watch::WatchSpec;

/// The command-line flags that override config keys, so messages and the CLI agree.
pub mod flags {
    pub const CONFIG: &str = "--config";
    pub const INTERVAL: &str = "--interval";
    pub const SLOW_INTERVAL: &str = "--slow-interval";
    pub const HANG_TIMEOUT: &str = "--hang-timeout";
    pub const NVML_LIBRARY: &str = "--nvml-library";
    pub const COLOR: &str = "--color";
    pub const WATCH: &str = "--watch";
    pub const MIN_FREE: &str = "--min-free";
    pub const COUNT: &str = "--count";
    pub const FORMAT: &str = "--format";
}

/// The resolved configuration: every value present and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub sampling: SamplingConfig,
    pub nvml: NvmlConfig,
    pub display: DisplayConfig,
    pub watch: WatchConfig,
    pub pick: PickConfig,
    pub history: HistoryConfig,
    pub snapshot: SnapshotConfig,
    /// `[detect]`: the detector's thresholds. The file writes percentages and MiB per minute;
    /// [`Rules`] holds fractions and bytes per second.
    pub detect: Rules,
    /// `[alerts]`: which alert sinks run and how.
    pub alerts: AlertOptions,
    /// `[daemon]`: the HTTP server of `gpuwatch daemon`.
    pub daemon: DaemonConfig,
}

/// `[daemon]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonConfig {
    /// Where `/metrics` and the API listen.
    pub listen: std::net::SocketAddr,
    /// A file holding the bearer token; `None`: no token.
    pub token_file: Option<PathBuf>,
    /// Per-process memory series: the top N per GPU by memory…
    pub metrics_top_n: usize,
    /// …plus every process holding at least this many bytes.
    pub metrics_floor: u64,
    /// At most this many HTTP connections at once (and at most half the open-files limit).
    /// [`MAX_CONNECTIONS_RANGE`].
    pub max_connections: usize,
    /// At most this many `/api/v1/events` streams at once. [`MAX_EVENT_STREAMS_RANGE`].
    pub max_event_streams: usize,
    /// A connection that sends no complete request head for this long is closed (idle
    /// keep-alive, slow headers). [`HTTP_TIMEOUT_RANGE`].
    pub idle_timeout: Duration,
    /// A request (other than the event stream) must be answered in this long, and a client
    /// that stops reading a response for this long is dropped. [`HTTP_TIMEOUT_RANGE`].
    pub request_timeout: Duration,
}

/// `[sampling]`: the sampler's cadences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplingConfig {
    /// Fast cadence: memory, utilisation, processes. [`INTERVAL_RANGE`].
    pub interval: Duration,
    /// Slow cadence: PCIe throughput, energy, clocks, ECC. [`SLOW_INTERVAL_RANGE`], and at
    /// least `interval`.
    pub slow_interval: Duration,
    /// How long a one-shot command waits for the first sample before it reports which call
    /// hangs. [`HANG_TIMEOUT_RANGE`].
    pub hang_timeout: Duration,
}

/// `[nvml]`: how the driver library is loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmlConfig {
    /// The NVML library to load; `None`: the system's `libnvidia-ml.so.1`.
    pub library: Option<PathBuf>,
    /// Longest wait between attempts to reinitialise NVML after it failed.
    /// [`REINIT_BACKOFF_MAX_RANGE`].
    pub reinit_backoff_max: Duration,
}

/// `[display]`
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DisplayConfig {
    pub color: ColorChoice,
}

/// `[watch]`: the watched set ("mine"); see [`crate::watch`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WatchConfig {
    /// Empty: the invoking user's processes.
    pub specs: Vec<WatchSpec>,
}

/// `[pick]`: defaults for `gpuwatch pick`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PickConfig {
    /// Only GPUs with at least this much free memory, in bytes.
    pub min_free: u64,
    /// How many GPUs to print; at least [`MIN_PICK_COUNT`].
    pub count: u32,
    pub format: PickFormat,
}

/// `[history]`: in-memory history kept by front ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryConfig {
    /// [`HISTORY_WINDOW_RANGE`].
    pub window: Duration,
}

/// `[snapshot]`
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotConfig {
    /// The "unattributed" row is shown when it holds at least this many bytes; less is noise.
    pub show_unattributed_min: u64,
}

/// When to use colours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ColorChoice {
    /// Colour when the output is a terminal (and `NO_COLOR` is unset).
    #[default]
    Auto,
    Always,
    Never,
}

/// How `gpuwatch pick` prints its choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum PickFormat {
    /// GPU UUIDs, comma-separated.
    Uuid,
    /// NVML indices, comma-separated.
    Index,
    /// `CUDA_VISIBLE_DEVICES=…`, ready for `export` or `env`.
    #[default]
    Env,
}

/// A small closed set of names, parsed case-insensitively and written in lowercase.
trait Named: Sized + Copy + 'static {
    const ALL: &'static [(&'static str, Self)];
    const NAMES: &'static [&'static str];

    fn name(self) -> &'static str
    where
        Self: PartialEq,
    {
        Self::ALL
            .iter()
            .find(|(_, v)| *v == self)
            .map_or("", |(n, _)| n)
    }

    fn parse_name(text: &str) -> Result<Self, ValueError> {
        let text = text.trim();
        Self::ALL
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(text))
            .map(|(_, v)| *v)
            .ok_or(ValueError::NotOneOf {
                expected: Self::NAMES,
            })
    }
}

impl Named for ColorChoice {
    const ALL: &'static [(&'static str, Self)] = &[
        ("auto", ColorChoice::Auto),
        ("always", ColorChoice::Always),
        ("never", ColorChoice::Never),
    ];
    const NAMES: &'static [&'static str] = &["auto", "always", "never"];
}

impl Named for PickFormat {
    const ALL: &'static [(&'static str, Self)] = &[
        ("uuid", PickFormat::Uuid),
        ("index", PickFormat::Index),
        ("env", PickFormat::Env),
    ];
    const NAMES: &'static [&'static str] = &["uuid", "index", "env"];
}

/// `alerts.min-severity`; written back with `Severity`'s `Display`, which uses the same names.
impl Named for Severity {
    const ALL: &'static [(&'static str, Self)] = &[
        ("info", Severity::Info),
        ("warning", Severity::Warning),
        ("critical", Severity::Critical),
    ];
    const NAMES: &'static [&'static str] = &["info", "warning", "critical"];
}

impl FromStr for ColorChoice {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_name(s)
    }
}

impl fmt::Display for ColorChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PickFormat {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_name(s)
    }
}

impl fmt::Display for PickFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            sampling: SamplingConfig {
                interval: Duration::from_secs(1),
                slow_interval: Duration::from_secs(10),
                hang_timeout: Duration::from_secs(5),
            },
            nvml: NvmlConfig {
                library: None,
                reinit_backoff_max: Duration::from_secs(30),
            },
            display: DisplayConfig {
                color: ColorChoice::Auto,
            },
            watch: WatchConfig { specs: Vec::new() },
            pick: PickConfig {
                min_free: 0,
                count: 1,
                format: PickFormat::Env,
            },
            history: HistoryConfig {
                window: Duration::from_mins(10),
            },
            snapshot: SnapshotConfig {
                show_unattributed_min: 1 << 20,
            },
            detect: Rules::default(),
            alerts: AlertOptions::default(),
            daemon: DaemonConfig {
                listen: std::net::SocketAddr::from(([127, 0, 0, 1], 9400)),
                token_file: None,
                metrics_top_n: 20,
                metrics_floor: 256 << 20,
                max_connections: 256,
                max_event_streams: 32,
                idle_timeout: Duration::from_secs(15),
                request_timeout: Duration::from_secs(30),
            },
        }
    }
}

/// What the command line can set. `None`: not given, the file or default applies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--interval`
    pub interval: Option<Duration>,
    /// `--slow-interval`
    pub slow_interval: Option<Duration>,
    /// `--hang-timeout`
    pub hang_timeout: Option<Duration>,
    /// `--nvml-library`
    pub nvml_library: Option<PathBuf>,
    /// `--color`
    pub color: Option<ColorChoice>,
    /// `--watch` (repeatable); when given, replaces `watch.specs` from the file.
    pub watch: Option<Vec<WatchSpec>>,
    /// `--min-free`, bytes.
    pub pick_min_free: Option<u64>,
    /// `--count`
    pub pick_count: Option<u32>,
    /// `--format`
    pub pick_format: Option<PickFormat>,
}

/// The layering rule, in one place: the command line wins over the file, the file over the
/// default.
fn layer<T>(cli: Option<T>, file: Option<T>, default: T) -> T {
    cli.or(file).unwrap_or(default)
}

/// A value together with where it came from (for messages about values that conflict).
struct Sourced<T> {
    value: T,
    origin: Origin,
}

/// Checks and converts the values of one layer, naming the origin in errors.
struct Checker<'a> {
    path: &'a str,
}

impl Checker<'_> {
    fn file_origin(&self, key: &str) -> Origin {
        Origin::File {
            path: self.path.to_owned(),
            key: key.to_owned(),
        }
    }

    /// A string value from the file, converted by `parse`.
    fn file<T>(
        &self,
        key: &str,
        text: Option<&str>,
        parse: impl FnOnce(&str) -> Result<T, ValueError>,
    ) -> Result<Option<Sourced<T>>, ConfigError> {
        let Some(text) = text else { return Ok(None) };
        let origin = self.file_origin(key);
        match parse(text) {
            Ok(value) => Ok(Some(Sourced { value, origin })),
            Err(problem) => Err(ConfigError::Invalid {
                origin,
                value: toml::Value::String(text.to_owned()).to_string(),
                problem: Box::new(problem),
            }),
        }
    }
}

impl Checker<'_> {
    /// A number from the file (`[detect]` percentages and rates), checked against `range`.
    fn number(
        &self,
        key: &str,
        number: Option<Number>,
        range: NumberRange,
    ) -> Result<Option<Sourced<f64>>, ConfigError> {
        let Some(Number(x)) = number else {
            return Ok(None);
        };
        let origin = self.file_origin(key);
        match check_number(range, x) {
            Ok(value) => Ok(Some(Sourced { value, origin })),
            Err(problem) => Err(ConfigError::Invalid {
                origin,
                value: format_number(x),
                problem: Box::new(problem),
            }),
        }
    }

    /// A whole number from the file, checked against `range`.
    fn integer(
        &self,
        key: &str,
        n: Option<i64>,
        range: IntRange,
    ) -> Result<Option<i64>, ConfigError> {
        let Some(n) = n else { return Ok(None) };
        check_integer(range, n)
            .map(Some)
            .map_err(|problem| ConfigError::Invalid {
                origin: self.file_origin(key),
                value: n.to_string(),
                problem: Box::new(problem),
            })
    }
}

/// A value from the command line, checked by `check`; `show` formats it back for messages.
fn cli<T>(
    flag: &'static str,
    value: Option<T>,
    show: impl FnOnce(&T) -> String,
    check: impl FnOnce(&T) -> Result<(), ValueError>,
) -> Result<Option<Sourced<T>>, ConfigError> {
    let Some(value) = value else { return Ok(None) };
    match check(&value) {
        Ok(()) => Ok(Some(Sourced {
            value,
            origin: Origin::Flag(flag),
        })),
        Err(problem) => Err(ConfigError::Invalid {
            origin: Origin::Flag(flag),
            value: show(&value),
            problem: Box::new(problem),
        }),
    }
}

fn default<T>(key: &str, value: T) -> Sourced<T> {
    Sourced {
        value,
        origin: Origin::Default {
            key: key.to_owned(),
        },
    }
}

fn duration_in(range: DurationRange) -> impl Fn(&str) -> Result<Duration, ValueError> {
    move |text| parse_duration_in(range, text)
}

fn check_range(range: DurationRange) -> impl Fn(&Duration) -> Result<(), ValueError> {
    move |d| check_duration(range, *d)
}

fn show_duration(d: &Duration) -> String {
    format_duration(*d)
}

/// Merges the command line over the file over the defaults and checks every value.
///
/// Every value in the file is checked, even one the command line overrides: a broken file is
/// reported rather than silently shadowed. `sampling.slow-interval` left at its default is
/// raised to `sampling.interval` when the interval is longer; set explicitly shorter than the
/// interval, it is an error.
pub fn resolve(file: ConfigFile, overrides: &Overrides) -> Result<Config, ConfigError> {
    let d = Config::default();
    let path = file.display_path();
    let base_dir = file.path.as_deref().and_then(Path::parent);
    let f = Checker { path: &path };
    let o = overrides;

    let sampling = resolve_sampling(&f, &file.sampling.unwrap_or_default(), o, d.sampling)?;
    let nvml = resolve_nvml(&f, &file.nvml.unwrap_or_default(), base_dir, o, d.nvml)?;

    let display = file.display.unwrap_or_default();
    let color = f.file(
        "display.color",
        display.color.as_deref(),
        ColorChoice::parse_name,
    )?;

    let watch = file.watch.unwrap_or_default();
    let mut file_specs = None;
    if let Some(texts) = watch.specs {
        let mut specs = Vec::with_capacity(texts.len());
        for (i, text) in texts.iter().enumerate() {
            let spec = f.file(&format!("watch.specs[{i}]"), Some(text), |t| {
                t.parse::<WatchSpec>()
                    .map_err(|e| ValueError::WatchSpec(e.problem))
            })?;
            specs.extend(spec.map(|s| s.value));
        }
        file_specs = Some(specs);
    }

    let pick = resolve_pick(&f, &file.pick.unwrap_or_default(), o, d.pick)?;

    let history = file.history.unwrap_or_default();
    let window = f.file(
        "history.window",
        history.window.as_deref(),
        duration_in(HISTORY_WINDOW_RANGE),
    )?;

    let detect = resolve_detect(&f, &file.detect.unwrap_or_default(), &d.detect)?;
    let alerts = resolve_alerts(&f, &file.alerts.unwrap_or_default(), base_dir, d.alerts)?;
    let daemon = resolve_daemon(&f, &file.daemon.unwrap_or_default(), base_dir, d.daemon)?;

    let snapshot = file.snapshot.unwrap_or_default();
    let unattributed = f.file(
        "snapshot.show-unattributed-min",
        snapshot.show_unattributed_min.as_deref(),
        parse_size,
    )?;

    Ok(Config {
        sampling,
        nvml,
        display: DisplayConfig {
            color: layer(o.color, value(color), d.display.color),
        },
        watch: WatchConfig {
            specs: layer(o.watch.clone(), file_specs, d.watch.specs),
        },
        pick,
        history: HistoryConfig {
            window: layer(None, value(window), d.history.window),
        },
        snapshot: SnapshotConfig {
            show_unattributed_min: layer(
                None,
                value(unattributed),
                d.snapshot.show_unattributed_min,
            ),
        },
        detect,
        alerts,
        daemon,
    })
}

fn resolve_daemon(
    f: &Checker<'_>,
    file: &DaemonFile,
    base_dir: Option<&Path>,
    d: DaemonConfig,
) -> Result<DaemonConfig, ConfigError> {
    let listen = f.file("daemon.listen", file.listen.as_deref(), |text| {
        text.trim().parse().map_err(|_| ValueError::NotAddress)
    })?;
    // Read relative to the config file's directory, like the other paths in it.
    let token_file = f.file("daemon.token-file", file.token_file.as_deref(), |text| {
        output_path(text, base_dir)
    })?;
    let top_n = f.integer(
        "daemon.metrics-top-n",
        file.metrics_top_n,
        METRICS_TOP_N_RANGE,
    )?;
    let floor = f.file(
        "daemon.metrics-floor",
        file.metrics_floor.as_deref(),
        parse_size,
    )?;
    let max_connections = f.integer(
        "daemon.max-connections",
        file.max_connections,
        MAX_CONNECTIONS_RANGE,
    )?;
    let max_event_streams = f.integer(
        "daemon.max-event-streams",
        file.max_event_streams,
        MAX_EVENT_STREAMS_RANGE,
    )?;
    let idle_timeout = f.file(
        "daemon.idle-timeout",
        file.idle_timeout.as_deref(),
        duration_in(HTTP_TIMEOUT_RANGE),
    )?;
    let request_timeout = f.file(
        "daemon.request-timeout",
        file.request_timeout.as_deref(),
        duration_in(HTTP_TIMEOUT_RANGE),
    )?;
    // In range, so these conversions cannot fail.
    let count = |n: Option<i64>| n.and_then(|n| usize::try_from(n).ok());
    Ok(DaemonConfig {
        max_connections: layer(None, count(max_connections), d.max_connections),
        max_event_streams: layer(None, count(max_event_streams), d.max_event_streams),
        idle_timeout: layer(None, value(idle_timeout), d.idle_timeout),
        request_timeout: layer(None, value(request_timeout), d.request_timeout),
        listen: layer(None, value(listen), d.listen),
        token_file: layer(None, value(token_file).map(Some), d.token_file),
        // In range, so this conversion cannot fail.
        metrics_top_n: layer(
            None,
            top_n.and_then(|n| usize::try_from(n).ok()),
            d.metrics_top_n,
        ),
        metrics_floor: layer(None, value(floor), d.metrics_floor),
    })
}

/// The value of a layer, without its origin.
fn value<T>(layer: Option<Sourced<T>>) -> Option<T> {
    layer.map(|s| s.value)
}

fn resolve_sampling(
    f: &Checker<'_>,
    file: &SamplingFile,
    o: &Overrides,
    d: SamplingConfig,
) -> Result<SamplingConfig, ConfigError> {
    let file_interval = f.file(
        "sampling.interval",
        file.interval.as_deref(),
        duration_in(INTERVAL_RANGE),
    )?;
    let file_slow = f.file(
        "sampling.slow-interval",
        file.slow_interval.as_deref(),
        duration_in(SLOW_INTERVAL_RANGE),
    )?;
    let file_hang = f.file(
        "sampling.hang-timeout",
        file.hang_timeout.as_deref(),
        duration_in(HANG_TIMEOUT_RANGE),
    )?;
    let interval = layer(
        cli(
            flags::INTERVAL,
            o.interval,
            show_duration,
            check_range(INTERVAL_RANGE),
        )?,
        file_interval,
        default("sampling.interval", d.interval),
    );
    let slow = layer(
        cli(
            flags::SLOW_INTERVAL,
            o.slow_interval,
            show_duration,
            check_range(SLOW_INTERVAL_RANGE),
        )?,
        file_slow,
        default("sampling.slow-interval", d.slow_interval),
    );
    let hang_timeout = layer(
        value(cli(
            flags::HANG_TIMEOUT,
            o.hang_timeout,
            show_duration,
            check_range(HANG_TIMEOUT_RANGE),
        )?),
        value(file_hang),
        d.hang_timeout,
    );
    Ok(SamplingConfig {
        slow_interval: slow_interval_for(&interval, &slow)?,
        interval: interval.value,
        hang_timeout,
    })
}

fn resolve_nvml(
    f: &Checker<'_>,
    file: &NvmlFile,
    base_dir: Option<&Path>,
    o: &Overrides,
    d: NvmlConfig,
) -> Result<NvmlConfig, ConfigError> {
    let file_library = f.file("nvml.library", file.library.as_deref(), |text| {
        library_path(text, base_dir)
    })?;
    let file_backoff = f.file(
        "nvml.reinit-backoff-max",
        file.reinit_backoff_max.as_deref(),
        duration_in(REINIT_BACKOFF_MAX_RANGE),
    )?;
    let cli_library = cli(
        flags::NVML_LIBRARY,
        o.nvml_library.clone(),
        |p| p.display().to_string(),
        |p| {
            if p.as_os_str().is_empty() {
                Err(ValueError::EmptyPath)
            } else {
                Ok(())
            }
        },
    )?;
    Ok(NvmlConfig {
        library: layer(
            value(cli_library).map(Some),
            value(file_library).map(Some),
            d.library,
        ),
        reinit_backoff_max: layer(None, value(file_backoff), d.reinit_backoff_max),
    })
}

fn resolve_pick(
    f: &Checker<'_>,
    file: &PickFile,
    o: &Overrides,
    d: PickConfig,
) -> Result<PickConfig, ConfigError> {
    let min_free = f.file("pick.min-free", file.min_free.as_deref(), parse_size)?;
    let count = match file.count {
        None => None,
        Some(n) => Some(check_count(n).map_err(|problem| ConfigError::Invalid {
            origin: f.file_origin("pick.count"),
            value: n.to_string(),
            problem: Box::new(problem),
        })?),
    };
    let format = f.file(
        "pick.format",
        file.format.as_deref(),
        PickFormat::parse_name,
    )?;
    let cli_count = cli(flags::COUNT, o.pick_count, u32::to_string, |n| {
        check_count(i64::from(*n)).map(|_| ())
    })?;
    Ok(PickConfig {
        min_free: layer(o.pick_min_free, value(min_free), d.min_free),
        count: layer(value(cli_count), count, d.count),
        format: layer(o.pick_format, value(format), d.format),
    })
}

fn resolve_detect(f: &Checker<'_>, file: &DetectFile, d: &Rules) -> Result<Rules, ConfigError> {
    let duration = |key: &str, text: &Option<String>, range, default| {
        f.file(key, text.as_deref(), duration_in(range))
            .map(|v| layer(None, value(v), default))
    };
    let size = |key: &str, text: &Option<String>, default| {
        f.file(key, text.as_deref(), parse_size)
            .map(|v| layer(None, value(v), default))
    };
    let rate = |key: &str, number: Option<Number>, default| {
        f.number(key, number, GROWTH_RATE_RANGE)
            .map(|v| layer(None, value(v).map(mib_per_min_to_bytes_per_s), default))
    };
    let (warn, critical, hysteresis) = near_capacity_levels(f, file, d)?;
    Ok(Rules {
        near_capacity_warn: warn,
        near_capacity_critical: critical,
        near_capacity_hysteresis: hysteresis,
        near_capacity_headroom: size(
            "detect.near-capacity-headroom",
            &file.near_capacity_headroom,
            d.near_capacity_headroom,
        )?,
        near_capacity_min_duration: duration(
            "detect.near-capacity-min-duration",
            &file.near_capacity_min_duration,
            NEAR_CAPACITY_MIN_DURATION_RANGE,
            d.near_capacity_min_duration,
        )?,
        filling_window: duration(
            "detect.filling-window",
            &file.filling_window,
            FILLING_WINDOW_RANGE,
            d.filling_window,
        )?,
        filling_horizon: duration(
            "detect.filling-horizon",
            &file.filling_horizon,
            FILLING_HORIZON_RANGE,
            d.filling_horizon,
        )?,
        filling_min_rate: rate(
            "detect.filling-min-rate",
            file.filling_min_rate,
            d.filling_min_rate,
        )?,
        filling_critical_used: f
            .number(
                "detect.filling-critical-used",
                file.filling_critical_used,
                FILLING_CRITICAL_USED_RANGE,
            )
            .map(|v| {
                layer(
                    None,
                    value(v).map(percent_to_fraction),
                    d.filling_critical_used,
                )
            })?,
        leak_warmup: duration(
            "detect.leak-warmup",
            &file.leak_warmup,
            LEAK_WARMUP_RANGE,
            d.leak_warmup,
        )?,
        leak_sustain: duration(
            "detect.leak-sustain",
            &file.leak_sustain,
            LEAK_SUSTAIN_RANGE,
            d.leak_sustain,
        )?,
        leak_min_rate: rate("detect.leak-min-rate", file.leak_min_rate, d.leak_min_rate)?,
        external_window: duration(
            "detect.external-window",
            &file.external_window,
            EXTERNAL_WINDOW_RANGE,
            d.external_window,
        )?,
        external_rise: size("detect.external-rise", &file.external_rise, d.external_rise)?,
        external_horizon: duration(
            "detect.external-horizon",
            &file.external_horizon,
            EXTERNAL_HORIZON_RANGE,
            d.external_horizon,
        )?,
        idle_min_bytes: size("detect.idle-min", &file.idle_min, d.idle_min_bytes)?,
        idle_duration: duration(
            "detect.idle-duration",
            &file.idle_duration,
            IDLE_DURATION_RANGE,
            d.idle_duration,
        )?,
        exited_grace: duration(
            "detect.exited-grace",
            &file.exited_grace,
            EXITED_GRACE_RANGE,
            d.exited_grace,
        )?,
    })
}

/// `detect.near-capacity-warn`, `-critical` and `-hysteresis`: percentages in the file,
/// fractions in [`Rules`].
fn near_capacity_levels(
    f: &Checker<'_>,
    file: &DetectFile,
    d: &Rules,
) -> Result<(f64, f64, f64), ConfigError> {
    let percent = |key: &str, number: Option<Number>, range, fallback| {
        f.number(key, number, range).map(|v| {
            layer(
                None,
                v.map(|s| Sourced {
                    value: percent_to_fraction(s.value),
                    origin: s.origin,
                }),
                default(key, fallback),
            )
        })
    };
    let warn = percent(
        "detect.near-capacity-warn",
        file.near_capacity_warn,
        NEAR_CAPACITY_PERCENT_RANGE,
        d.near_capacity_warn,
    )?;
    let critical = percent(
        "detect.near-capacity-critical",
        file.near_capacity_critical,
        NEAR_CAPACITY_PERCENT_RANGE,
        d.near_capacity_critical,
    )?;
    let hysteresis = percent(
        "detect.near-capacity-hysteresis",
        file.near_capacity_hysteresis,
        HYSTERESIS_RANGE,
        d.near_capacity_hysteresis,
    )?;
    Ok((
        warn.value,
        critical_for(&warn, &critical)?,
        hysteresis.value,
    ))
}

/// The critical level must not be below the warning level. Left at its default, it follows a
/// higher warning level; set explicitly lower, it is an error naming both origins.
fn critical_for(warn: &Sourced<f64>, critical: &Sourced<f64>) -> Result<f64, ConfigError> {
    if critical.value >= warn.value {
        return Ok(critical.value);
    }
    if matches!(critical.origin, Origin::Default { .. }) {
        return Ok(warn.value);
    }
    Err(ConfigError::Conflict {
        message: format!(
            "the near-capacity critical level {}% ({}) is below the warning level {}% ({}); \
             critical must be at least warn",
            format_number(fraction_to_percent(critical.value)),
            critical.origin,
            format_number(fraction_to_percent(warn.value)),
            warn.origin,
        ),
    })
}

fn resolve_alerts(
    f: &Checker<'_>,
    file: &AlertsFile,
    base_dir: Option<&Path>,
    d: AlertOptions,
) -> Result<AlertOptions, ConfigError> {
    let jsonl = f.file("alerts.jsonl", file.jsonl.as_deref(), |text| {
        output_path(text, base_dir)
    })?;
    let command = f.file("alerts.command", file.command.as_deref(), |text| {
        if text.trim().is_empty() {
            Err(ValueError::Empty {
                expected: "a shell command",
            })
        } else {
            Ok(text.to_owned())
        }
    })?;
    let webhook = f.file("alerts.webhook", file.webhook.as_deref(), parse_webhook_url)?;
    let webhook_timeout = f.file(
        "alerts.webhook-timeout",
        file.webhook_timeout.as_deref(),
        duration_in(WEBHOOK_TIMEOUT_RANGE),
    )?;
    let webhook_retries = f.integer(
        "alerts.webhook-retries",
        file.webhook_retries,
        WEBHOOK_RETRIES_RANGE,
    )?;
    let min_severity = f.file(
        "alerts.min-severity",
        file.min_severity.as_deref(),
        Severity::parse_name,
    )?;
    let rate_limit = f.file(
        "alerts.rate-limit",
        file.rate_limit.as_deref(),
        duration_in(RATE_LIMIT_RANGE),
    )?;
    let queue = f.integer("alerts.queue", file.queue, ALERT_QUEUE_RANGE)?;
    Ok(AlertOptions {
        log: layer(None, file.log, d.log),
        jsonl: layer(None, value(jsonl).map(Some), d.jsonl),
        command: layer(None, value(command).map(Some), d.command),
        webhook: layer(None, value(webhook).map(Some), d.webhook),
        webhook_timeout: layer(None, value(webhook_timeout), d.webhook_timeout),
        // In range, so these conversions cannot fail.
        webhook_retries: layer(
            None,
            webhook_retries.and_then(|n| u32::try_from(n).ok()),
            d.webhook_retries,
        ),
        desktop: layer(None, file.desktop, d.desktop),
        min_severity: layer(None, value(min_severity), d.min_severity),
        rate_limit: layer(None, value(rate_limit), d.rate_limit),
        queue: layer(None, queue.and_then(|n| usize::try_from(n).ok()), d.queue),
    })
}

/// A file the program writes (`alerts.jsonl`): a relative path, even a bare file name, is taken
/// relative to the config file's directory.
fn output_path(text: &str, base_dir: Option<&Path>) -> Result<PathBuf, ValueError> {
    if text.trim().is_empty() {
        return Err(ValueError::Empty {
            expected: "a path to a file",
        });
    }
    let path = PathBuf::from(text);
    Ok(match base_dir {
        Some(dir) if path.is_relative() => dir.join(path),
        _ => path,
    })
}

/// The slow cadence must not be faster than the fast one. Left at its default, it follows a
/// longer interval; set explicitly, a shorter value is an error naming both origins.
fn slow_interval_for(
    interval: &Sourced<Duration>,
    slow: &Sourced<Duration>,
) -> Result<Duration, ConfigError> {
    if slow.value >= interval.value {
        return Ok(slow.value);
    }
    if matches!(slow.origin, Origin::Default { .. }) {
        return Ok(interval.value);
    }
    Err(ConfigError::Conflict {
        message: format!(
            "the slow interval {} ({}) is shorter than the interval {} ({}); the slow cadence \
             must be at least the fast one",
            format_duration(slow.value),
            slow.origin,
            format_duration(interval.value),
            interval.origin,
        ),
    })
}

/// `nvml.library`: a bare file name is left to the dynamic loader's search; any other relative
/// path is taken relative to the config file's directory.
fn library_path(text: &str, base_dir: Option<&Path>) -> Result<PathBuf, ValueError> {
    if text.trim().is_empty() {
        return Err(ValueError::EmptyPath);
    }
    let path = PathBuf::from(text);
    let bare_name = path.components().count() == 1 && path.is_relative();
    Ok(match base_dir {
        Some(dir) if path.is_relative() && !bare_name => dir.join(path),
        _ => path,
    })
}

impl Config {
    /// The effective configuration as a TOML config file (for `gpuwatch print-config`).
    /// Parsing the text and resolving it without overrides gives this config back.
    pub fn to_toml(&self) -> String {
        let file = ConfigFile {
            path: None,
            sampling: Some(SamplingFile {
                interval: Some(format_duration(self.sampling.interval)),
                slow_interval: Some(format_duration(self.sampling.slow_interval)),
                hang_timeout: Some(format_duration(self.sampling.hang_timeout)),
            }),
            nvml: Some(NvmlFile {
                library: self
                    .nvml
                    .library
                    .as_ref()
                    .map(|p| p.to_string_lossy().into_owned()),
                reinit_backoff_max: Some(format_duration(self.nvml.reinit_backoff_max)),
            }),
            display: Some(DisplayFile {
                color: Some(self.display.color.to_string()),
            }),
            watch: Some(WatchFile {
                specs: Some(self.watch.specs.iter().map(ToString::to_string).collect()),
            }),
            pick: Some(PickFile {
                min_free: Some(format_size(self.pick.min_free)),
                count: Some(i64::from(self.pick.count)),
                format: Some(self.pick.format.to_string()),
            }),
            history: Some(HistoryFile {
                window: Some(format_duration(self.history.window)),
            }),
            snapshot: Some(SnapshotFile {
                show_unattributed_min: Some(format_size(self.snapshot.show_unattributed_min)),
            }),
            detect: Some(detect_file(&self.detect)),
            alerts: Some(alerts_file(&self.alerts)),
            daemon: Some(DaemonFile {
                listen: Some(self.daemon.listen.to_string()),
                token_file: self
                    .daemon
                    .token_file
                    .as_ref()
                    .map(|p| p.to_string_lossy().into_owned()),
                metrics_top_n: i64::try_from(self.daemon.metrics_top_n).ok(),
                metrics_floor: Some(format_size(self.daemon.metrics_floor)),
                max_connections: i64::try_from(self.daemon.max_connections).ok(),
                max_event_streams: i64::try_from(self.daemon.max_event_streams).ok(),
                idle_timeout: Some(format_duration(self.daemon.idle_timeout)),
                request_timeout: Some(format_duration(self.daemon.request_timeout)),
            }),
        };
        let body = toml::to_string(&file)
            .unwrap_or_else(|e| format!("# cannot write the config as TOML: {e}\n"));
        format!("# gpuwatch: effective configuration\n\n{body}")
    }
}

/// `[detect]` as written: fractions back to percentages, bytes per second back to MiB per
/// minute, each as the shortest number that reads back to exactly the same value.
fn detect_file(r: &Rules) -> DetectFile {
    let duration = |d: Duration| Some(format_duration(d));
    let size = |b: u64| Some(format_size(b));
    let percent = |x: f64| Some(Number(fraction_to_percent(x)));
    let rate = |x: f64| Some(Number(bytes_per_s_to_mib_per_min(x)));
    DetectFile {
        near_capacity_warn: percent(r.near_capacity_warn),
        near_capacity_critical: percent(r.near_capacity_critical),
        near_capacity_headroom: size(r.near_capacity_headroom),
        near_capacity_hysteresis: percent(r.near_capacity_hysteresis),
        near_capacity_min_duration: duration(r.near_capacity_min_duration),
        filling_window: duration(r.filling_window),
        filling_horizon: duration(r.filling_horizon),
        filling_min_rate: rate(r.filling_min_rate),
        filling_critical_used: percent(r.filling_critical_used),
        leak_warmup: duration(r.leak_warmup),
        leak_sustain: duration(r.leak_sustain),
        leak_min_rate: rate(r.leak_min_rate),
        external_window: duration(r.external_window),
        external_rise: size(r.external_rise),
        external_horizon: duration(r.external_horizon),
        idle_min: size(r.idle_min_bytes),
        idle_duration: duration(r.idle_duration),
        exited_grace: duration(r.exited_grace),
    }
}

/// `[alerts]` as written; unset paths, commands and URLs are left out.
fn alerts_file(a: &AlertOptions) -> AlertsFile {
    AlertsFile {
        log: Some(a.log),
        jsonl: a.jsonl.as_ref().map(|p| p.to_string_lossy().into_owned()),
        command: a.command.clone(),
        webhook: a.webhook.clone(),
        webhook_timeout: Some(format_duration(a.webhook_timeout)),
        webhook_retries: Some(i64::from(a.webhook_retries)),
        desktop: Some(a.desktop),
        min_severity: Some(a.min_severity.to_string()),
        rate_limit: Some(format_duration(a.rate_limit)),
        queue: Some(i64::try_from(a.queue).unwrap_or(i64::MAX)),
    }
}

/// Which config file to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// Given with `--config`: it must exist.
    Explicit(PathBuf),
    /// The default place: it may be missing (then: defaults).
    Default(PathBuf),
    /// No default place could be worked out (neither `XDG_CONFIG_HOME` nor `HOME` set).
    None,
}

/// The default config file: `$XDG_CONFIG_HOME/gpuwatch/config.toml` when `XDG_CONFIG_HOME` is
/// an absolute path (the XDG spec says to ignore a relative one), else
/// `$HOME/.config/gpuwatch/config.toml`.
pub fn default_path(env: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let non_empty = |key| {
        env(key)
            .filter(|v: &OsString| !v.is_empty())
            .map(PathBuf::from)
    };
    let base = non_empty("XDG_CONFIG_HOME")
        .filter(|p| p.is_absolute())
        .or_else(|| non_empty("HOME").map(|home| home.join(".config")))?;
    Some(base.join("gpuwatch").join("config.toml"))
}

/// Where to look: `explicit` (from `--config`) when given, else [`default_path`].
pub fn locate(explicit: Option<&Path>, env: &dyn Fn(&str) -> Option<OsString>) -> Location {
    match explicit {
        Some(path) => Location::Explicit(path.to_owned()),
        None => default_path(env).map_or(Location::None, Location::Default),
    }
}

/// The largest config file read (the shipped default is a few KiB): a bigger file, a device
/// (`/dev/zero`) or a FIFO is refused before it is read.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// Reads the config file at `location`; a missing default file gives an empty file (all
/// defaults), a missing explicit one is an error. At most [`MAX_FILE_BYTES`], a regular file.
pub fn read(location: &Location) -> Result<ConfigFile, ConfigError> {
    let (path, required) = match location {
        Location::Explicit(p) => (p, true),
        Location::Default(p) => (p, false),
        Location::None => return Ok(ConfigFile::default()),
    };
    match textlimit::read_file(path, MAX_FILE_BYTES) {
        Ok(text) => ConfigFile::parse(&text, path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if required {
                Err(ConfigError::NotFound { path: path.clone() })
            } else {
                Ok(ConfigFile::default())
            }
        }
        Err(source) => Err(ConfigError::Read {
            path: path.clone(),
            source,
        }),
    }
}

/// Finds, reads and resolves the configuration: what a front end calls at start-up, with
/// `--config` as `explicit` and [`process_env`] as `env`.
pub fn load(
    explicit: Option<&Path>,
    overrides: &Overrides,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<Config, ConfigError> {
    resolve(read(&locate(explicit, env))?, overrides)
}

/// The documented default configuration file (`config/default.toml`), comments and all:
/// what `gpuwatch print-config --defaults` prints. A test keeps it equal to
/// [`Config::default`].
pub const DEFAULT_TOML: &str = include_str!("../../config/default.toml");

/// The real process environment, for [`load`] and [`locate`].
pub fn process_env(key: &str) -> Option<OsString> {
    std::env::var_os(key)
}

#[cfg(test)]
mod tests;
