//! The command line (clap derive). Parsing has no side effects; `app` resolves it against the
//! config file into what each command needs.
//!
//! Each subcommand takes only the option groups it uses (help headings Source, Sampling,
//! Output, Daemon, …). The bare `gpuwatch` (the dashboard) takes the dashboard's groups too, so
//! `gpuwatch --demo snapshot` and `gpuwatch snapshot --demo` both work; an option given before
//! a subcommand that does not use it (`gpuwatch --demo explain`) is an error
//! ([`Cli::try_parse_checked`]), never silently ignored. [`Cli::options`] merges the two places
//! into one [`GlobalArgs`].

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::pick::PickFormat;

/// A live GPU monitor: who holds this VRAM, is it growing, will my job fit.
#[derive(Debug, Parser)]
#[command(name = "gpuwatch", version, about, long_about = None)]
pub struct Cli {
    /// The dashboard's options, given before any subcommand.
    #[command(flatten)]
    pub top: DashboardArgs,
    #[command(subcommand)]
    pub command: Option<Command>,
    /// The options given on the command line (not from the environment), before the
    /// subcommand and after it, by clap id (`interval`, `nvml_library`).
    #[arg(skip)]
    pub given: Vec<String>,
}

/// `--config`.
#[derive(Debug, Args, Default, Clone)]
pub struct ConfigArg {
    /// Read settings from this file instead of `$XDG_CONFIG_HOME/gpuwatch/config.toml`.
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
}

/// Where the GPUs come from.
#[derive(Debug, Args, Default, Clone)]
#[command(next_help_heading = "Source")]
pub struct SourceArgs {
    /// Use the built-in simulated GPUs instead of the driver (no GPU needed).
    #[arg(long, conflicts_with_all = ["replay", "scenario"])]
    pub demo: bool,
    /// Use simulated GPUs from this scenario file (the format of `assets/scenarios/demo.toml`).
    #[arg(long, value_name = "FILE", conflicts_with = "replay")]
    pub scenario: Option<PathBuf>,
    /// Play back a recording made by `gpuwatch record`.
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
    /// Replay speed: 1 = as recorded, 10 = ten times faster, 0 = as fast as possible
    /// [default: 1].
    #[arg(long, value_name = "X", value_parser = parse_speed)]
    pub speed: Option<f64>,
    #[command(flatten)]
    pub driver: DriverArg,
}

/// `--nvml-library` (also what `print-config` shows).
#[derive(Debug, Args, Default, Clone)]
#[command(next_help_heading = "Source")]
pub struct DriverArg {
    /// Path of the NVML library (default: the system's libnvidia-ml.so.1).
    #[arg(long, value_name = "PATH", env = "GPUWATCH_NVML_LIB")]
    pub nvml_library: Option<PathBuf>,
}

/// How often.
#[derive(Debug, Args, Default, Clone)]
#[command(next_help_heading = "Sampling")]
pub struct SamplingArgs {
    /// Fast sampling interval (memory, utilisation, processes), 100ms to 60s.
    #[arg(long, value_name = "DURATION", value_parser = parse_interval)]
    pub interval: Option<Duration>,
    /// Slow sampling interval (PCIe throughput, energy, ECC), 100ms to 10m, at least --interval.
    #[arg(long, value_name = "DURATION", value_parser = parse_slow_interval)]
    pub slow_interval: Option<Duration>,
    /// How long one-shot commands wait for the first sample before naming the call that hangs.
    #[arg(long, value_name = "DURATION", value_parser = parse_hang_timeout)]
    pub hang_timeout: Option<Duration>,
}

/// `--color`, `--no-color`.
#[derive(Debug, Args, Default, Clone)]
#[command(next_help_heading = "Output")]
pub struct ColorArgs {
    /// Colours: auto (on a terminal, unless `NO_COLOR` is set), always, never.
    #[arg(long, value_name = "WHEN")]
    pub color: Option<crate::config::ColorChoice>,
    /// Never colour the output (same as --color never; the `NO_COLOR` variable does the same).
    #[arg(long, conflicts_with = "color")]
    pub no_color: bool,
}

/// `--log-file`.
#[derive(Debug, Args, Default, Clone)]
#[command(next_help_heading = "Output")]
pub struct LogArg {
    /// Write a log to this file (never to the screen). Level from `GPUWATCH_LOG` (default info).
    #[arg(long, value_name = "PATH")]
    pub log_file: Option<PathBuf>,
}

/// `--watch`.
#[derive(Debug, Args, Default, Clone)]
#[command(next_help_heading = "Output")]
pub struct WatchArg {
    /// Processes that are "mine": `pid:N` (with descendants), `user:NAME`, `cmd:REGEX`.
    /// Repeatable. Default: the invoking user's processes.
    #[arg(long = "watch", value_name = "SPEC")]
    pub watch: Vec<crate::watch::WatchSpec>,
}

/// What every command that samples GPUs takes: the config file, the source, the cadences and
/// the log.
#[derive(Debug, Args, Default, Clone)]
pub struct SampledArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub log: LogArg,
}

/// The dashboard's options (`gpuwatch`, `gpuwatch tui`).
#[derive(Debug, Args, Default, Clone)]
pub struct DashboardArgs {
    /// Disable every action that changes something (signalling processes from the dashboard).
    #[arg(long)]
    pub read_only: bool,
    #[command(flatten)]
    pub sampled: SampledArgs,
    #[command(flatten)]
    pub color: ColorArgs,
    #[command(flatten)]
    pub watch: WatchArg,
}

/// The options in effect for a command: its own, or else those given before the subcommand
/// (what the front ends read; [`Cli::options`]).
#[derive(Debug, Default, Clone)]
pub struct GlobalArgs {
    pub config: Option<PathBuf>,
    pub demo: bool,
    pub scenario: Option<PathBuf>,
    pub replay: Option<PathBuf>,
    pub speed: f64,
    pub interval: Option<Duration>,
    pub slow_interval: Option<Duration>,
    pub hang_timeout: Option<Duration>,
    pub nvml_library: Option<PathBuf>,
    pub color: Option<crate::config::ColorChoice>,
    pub no_color: bool,
    pub log_file: Option<PathBuf>,
    pub read_only: bool,
    pub watch: Vec<crate::watch::WatchSpec>,
}

/// The option groups one subcommand takes (`None`: it takes none of that group).
#[derive(Default)]
struct Groups<'a> {
    config: Option<&'a ConfigArg>,
    source: Option<&'a SourceArgs>,
    driver: Option<&'a DriverArg>,
    sampling: Option<&'a SamplingArgs>,
    log: Option<&'a LogArg>,
    color: Option<&'a ColorArgs>,
    watch: Option<&'a WatchArg>,
    read_only: bool,
}

impl<'a> Groups<'a> {
    fn sampled(s: &'a SampledArgs) -> Self {
        Self {
            config: Some(&s.config),
            source: Some(&s.source),
            driver: Some(&s.source.driver),
            sampling: Some(&s.sampling),
            log: Some(&s.log),
            ..Self::default()
        }
    }

    fn dashboard(d: &'a DashboardArgs) -> Self {
        Self {
            color: Some(&d.color),
            watch: Some(&d.watch),
            read_only: d.read_only,
            ..Self::sampled(&d.sampled)
        }
    }
}

impl Cli {
    /// Parses the process's arguments as [`Self::try_parse_checked`] does; on `--help`, a
    /// usage error or a misplaced option, prints clap's message and exits (2 for errors).
    #[must_use]
    pub fn parse_checked() -> Self {
        Self::try_parse_checked(std::env::args_os()).unwrap_or_else(|e| e.exit())
    }

    /// Parses `argv`, and refuses an option given before a subcommand that does not take it
    /// (`gpuwatch --demo explain LOG`: explain reads a log, not GPUs).
    ///
    /// # Errors
    /// clap's error (help and version are errors too, as with `try_parse_from`).
    pub fn try_parse_checked<I, T>(argv: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let mut cmd = Self::command();
        let matches = cmd.try_get_matches_from_mut(argv)?;
        misplaced_option(&cmd, &matches)?;
        let mut cli = Self::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))?;
        let mut level = Some(&matches);
        while let Some(m) = level {
            cli.given.extend(
                m.ids()
                    .filter(|id| {
                        m.value_source(id.as_str()) == Some(clap::parser::ValueSource::CommandLine)
                    })
                    .map(|id| id.as_str().to_owned()),
            );
            level = m.subcommand().map(|(_, sub)| sub);
        }
        Ok(cli)
    }

    /// The options in effect: each group's value from the subcommand when given there, else
    /// from before it.
    ///
    /// # Errors
    /// Two sources (`--demo` before the subcommand, `--replay` after it), or `--color` and
    /// `--no-color`, across the two places.
    pub fn options(&self) -> Result<GlobalArgs, String> {
        let sub = self
            .command
            .as_ref()
            .map_or_else(Groups::default, Command::groups);
        let top = &self.top;
        let top_source = &top.sampled.source;
        let source = match sub.source {
            Some(s) if s.chosen().is_some() => {
                if let Some(before) = top_source.chosen()
                    && Some(before) != s.chosen()
                {
                    return Err(format!(
                        "{before} and {} each choose where the GPUs come from: give one of them",
                        s.chosen().unwrap_or_default()
                    ));
                }
                s
            }
            _ => top_source,
        };
        let color = match sub.color {
            Some(c) if c.color.is_some() || c.no_color => {
                if c.color.is_some() && top.color.no_color
                    || c.no_color && top.color.color.is_some()
                {
                    return Err(
                        "--color and --no-color contradict each other: give one of them".into(),
                    );
                }
                c
            }
            _ => &top.color,
        };
        let sampling = |f: fn(&SamplingArgs) -> Option<Duration>| {
            sub.sampling
                .and_then(f)
                .or_else(|| f(&top.sampled.sampling))
        };
        let watch = sub
            .watch
            .filter(|w| !w.watch.is_empty())
            .unwrap_or(&top.watch);
        Ok(GlobalArgs {
            config: sub
                .config
                .and_then(|c| c.config.clone())
                .or_else(|| top.sampled.config.config.clone()),
            demo: source.demo,
            scenario: source.scenario.clone(),
            replay: source.replay.clone(),
            speed: sub
                .source
                .and_then(|s| s.speed)
                .or(top_source.speed)
                .unwrap_or(1.0),
            interval: sampling(|s| s.interval),
            slow_interval: sampling(|s| s.slow_interval),
            hang_timeout: sampling(|s| s.hang_timeout),
            nvml_library: sub
                .driver
                .and_then(|d| d.nvml_library.clone())
                .or_else(|| top_source.driver.nvml_library.clone()),
            color: color.color,
            no_color: color.no_color,
            log_file: sub
                .log
                .and_then(|l| l.log_file.clone())
                .or_else(|| top.sampled.log.log_file.clone()),
            read_only: sub.read_only || top.read_only,
            watch: watch.watch.clone(),
        })
    }
}

impl SourceArgs {
    /// The flag that chose a simulated source, if one did.
    fn chosen(&self) -> Option<&'static str> {
        simulated(self.demo, self.scenario.is_some(), self.replay.is_some())
    }
}

impl GlobalArgs {
    /// The flag that chose a simulated source (`--demo`, `--scenario`, `--replay`), if one
    /// did: the GPUs are not this host's.
    pub fn simulated(&self) -> Option<&'static str> {
        simulated(self.demo, self.scenario.is_some(), self.replay.is_some())
    }
}

fn simulated(demo: bool, scenario: bool, replay: bool) -> Option<&'static str> {
    [
        (demo, "--demo"),
        (scenario, "--scenario"),
        (replay, "--replay"),
    ]
    .into_iter()
    .find_map(|(on, flag)| on.then_some(flag))
}

/// An option given before the subcommand (on the command line, not from the environment) that
/// the subcommand does not take is an error naming both.
fn misplaced_option(cmd: &clap::Command, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
    let Some((name, mut leaf_matches)) = matches.subcommand() else {
        return Ok(());
    };
    let mut path = vec![name];
    let mut leaf = cmd.find_subcommand(name);
    while let (Some(c), Some((n, m))) = (leaf, leaf_matches.subcommand()) {
        path.push(n);
        leaf = c.find_subcommand(n);
        leaf_matches = m;
    }
    let Some(leaf) = leaf else {
        return Ok(());
    };
    for arg in cmd.get_arguments() {
        let id = arg.get_id();
        if matches.value_source(id.as_str()) != Some(clap::parser::ValueSource::CommandLine) {
            continue;
        }
        if leaf.get_arguments().any(|a| a.get_id() == id) {
            continue;
        }
        let flag = arg
            .get_long()
            .map_or_else(|| id.to_string(), |l| format!("--{l}"));
        let sub = path.join(" ");
        return Err(cmd.clone().error(
            clap::error::ErrorKind::ArgumentConflict,
            format!(
                "{flag} does not apply to 'gpuwatch {sub}' (its options: gpuwatch {sub} --help)"
            ),
        ));
    }
    Ok(())
}
#[derive(Debug, Subcommand)]
pub enum Command {
    /// The dashboard (the default): GPUs, processes, history charts, process detail.
    Tui(TuiArgs),
    /// Headless: sampler, detector and alert sinks, logging to stderr, until SIGTERM.
    Daemon(DaemonArgs),
    /// Every GPU and every process holding memory on it, once.
    Snapshot(SnapshotArgs),
    /// Print the best GPU(s) for a new job: most free memory, then least utilisation.
    Pick(PickArgs),
    /// Record samples to a file that `--replay FILE` plays back.
    Record(RecordArgs),
    /// Run a training job, watch its GPUs, and explain why it failed.
    Run(RunArgs),
    /// Explain why a training job failed, from its saved log (the diagnosis `run` prints).
    Explain(ExplainArgs),
    /// Query the local history store that the daemon writes.
    #[command(subcommand)]
    History(HistoryCommand),
    /// Print the effective configuration (defaults, file and command line merged), or with
    /// --defaults the documented default file.
    PrintConfig(PrintConfigArgs),
    /// Print shell completions.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), or write one per command to a directory.
    Man(ManArgs),
}

impl Command {
    /// The option groups this subcommand takes.
    fn groups(&self) -> Groups<'_> {
        match self {
            Self::Tui(a) => Groups::dashboard(&a.dashboard),
            Self::Daemon(a) => Groups {
                watch: Some(&a.watch),
                ..Groups::sampled(&a.sampled)
            },
            Self::Snapshot(a) => Groups {
                color: Some(&a.color),
                watch: Some(&a.watch),
                ..Groups::sampled(&a.sampled)
            },
            Self::Pick(PickArgs { sampled, .. })
            | Self::Record(RecordArgs { sampled, .. })
            | Self::Run(RunArgs { sampled, .. }) => Groups::sampled(sampled),
            Self::PrintConfig(a) => Groups {
                config: Some(&a.config),
                driver: Some(&a.driver),
                sampling: Some(&a.sampling),
                color: Some(&a.color),
                watch: Some(&a.watch),
                ..Groups::default()
            },
            Self::Explain(_) | Self::History(_) | Self::Completions { .. } | Self::Man(_) => {
                Groups::default()
            }
        }
    }
}

/// `gpuwatch print-config`.
#[derive(Debug, Args, Default)]
pub struct PrintConfigArgs {
    /// Print the documented default configuration file, comments and all (every key at its
    /// default; optional keys commented out), instead of the configuration in effect.
    #[arg(long)]
    pub defaults: bool,
    #[command(flatten)]
    pub config: ConfigArg,
    #[command(flatten)]
    pub driver: DriverArg,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub color: ColorArgs,
    #[command(flatten)]
    pub watch: WatchArg,
}

/// `gpuwatch man`.
#[derive(Debug, Args, Default)]
pub struct ManArgs {
    /// Write gpuwatch.1 and a gpuwatch-COMMAND.1 page for every command into this directory
    /// (created if missing) instead of printing gpuwatch(1).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// `gpuwatch tui`: local GPUs by default, or a remote daemon, or a cluster through Prometheus.
#[derive(Debug, Args, Default)]
pub struct TuiArgs {
    /// Show a remote daemon's GPUs (its `/api/v1/events` stream), e.g. `http://gpu-07:9400`.
    #[arg(
        long,
        value_name = "URL",
        conflicts_with = "prometheus",
        help_heading = "Source"
    )]
    pub connect: Option<String>,
    /// Show a cluster overview from a Prometheus server that scrapes gpuwatch daemons, e.g.
    /// `http://prom:9090`.
    #[arg(long, value_name = "URL", help_heading = "Source")]
    pub prometheus: Option<String>,
    /// File holding the bearer token for the remote daemon(s) (`daemon --token-file`).
    #[arg(long, value_name = "PATH", help_heading = "Source")]
    pub token_file: Option<PathBuf>,
    /// With --replay: start at this moment, in seconds from the recording's start. The 11
    /// minutes recorded before it are run through the analysis first, so what was open then is
    /// on screen at once.
    #[arg(long, value_name = "SECONDS")]
    pub at: Option<f64>,
    /// Show only these GPUs: NVML indices, UUIDs or unique prefixes of one (a MIG device's
    /// MIG-… names its GPU), comma-separated or repeated. The header says so; alerts still
    /// cover every GPU.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        conflicts_with = "only_visible"
    )]
    pub gpu: Vec<crate::gpuref::GpuRef>,
    /// Show only the GPUs that `CUDA_VISIBLE_DEVICES` names, as a CUDA program started here
    /// sees them (indices in CUDA's numbering, GPU-… and MIG-… UUIDs). It must be set; set
    /// and empty, it names no GPU.
    #[arg(long)]
    pub only_visible: bool,
    /// Show only this user's processes in the table and the tree (the GPU panels and the
    /// findings still count everyone's memory).
    #[arg(long, value_name = "NAME", value_parser = parse_user)]
    pub user: Option<String>,
    #[command(flatten)]
    pub dashboard: DashboardArgs,
}

/// `gpuwatch history …`.
#[derive(Debug, Subcommand)]
pub enum HistoryCommand {
    /// Which processes held memory on a GPU at a past moment.
    Who(HistoryWhoArgs),
    /// Peak GPU memory of every process since a moment.
    Peaks(HistoryPeaksArgs),
}

/// Where the history file is.
#[derive(Debug, Args, Default)]
pub struct HistoryFileArgs {
    /// The history file (default: `$XDG_STATE_HOME/gpuwatch/history.sqlite`, else
    /// `~/.local/state/gpuwatch/history.sqlite`).
    #[arg(long = "history", value_name = "PATH")]
    pub path: Option<PathBuf>,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct HistoryWhoArgs {
    /// The GPU: NVML index, UUID or a unique prefix of one (GPU-ab).
    #[arg(long, value_name = "GPU")]
    pub gpu: crate::gpuref::GpuRef,
    /// The moment, in UTC: RFC 3339 (2026-11-29T03:12:00Z), HH:MM (today, or yesterday when
    /// still to come), '10m ago', 'now' or unix seconds.
    #[arg(long, value_name = "TIME", default_value = "now")]
    pub at: String,
    #[command(flatten)]
    pub file: HistoryFileArgs,
}

#[derive(Debug, Args)]
pub struct HistoryPeaksArgs {
    /// From when: a duration back from now (24h), or any TIME that `history who --at` takes.
    #[arg(long, value_name = "WHEN", default_value = "24h")]
    pub since: String,
    #[command(flatten)]
    pub file: HistoryFileArgs,
}

#[derive(Debug, Args, Default)]
pub struct DaemonArgs {
    /// Address the HTTP server (`/metrics`, `/api/v1/…`) listens on [config: daemon.listen;
    /// default 127.0.0.1:9400].
    #[arg(long, value_name = "ADDR", help_heading = "Daemon")]
    pub listen: Option<std::net::SocketAddr>,
    /// File holding a bearer token that every endpoint but `/api/v1/health` requires
    /// [config: daemon.token-file].
    #[arg(long, value_name = "PATH", help_heading = "Daemon")]
    pub token_file: Option<std::path::PathBuf>,
    /// Allow a non-loopback address without a token.
    #[arg(long, help_heading = "Daemon")]
    pub insecure_listen: bool,
    /// Per-process memory series: the top N processes per GPU by memory [config:
    /// daemon.metrics-top-n; default 20]…
    #[arg(long, value_name = "N", help_heading = "Daemon")]
    pub metrics_top_n: Option<usize>,
    /// …plus every process holding at least this much [config: daemon.metrics-floor; default
    /// 256MiB].
    #[arg(long, value_name = "SIZE", help_heading = "Daemon")]
    pub metrics_floor: Option<bytesize::ByteSize>,
    /// The local history database [default: `$XDG_STATE_HOME/gpuwatch/history.sqlite`; none
    /// with a simulated source (--demo, --scenario, --replay) unless given]. One daemon at a
    /// time writes a file (it holds `PATH.lock`).
    #[arg(
        long,
        value_name = "PATH",
        conflicts_with = "no_history",
        help_heading = "Daemon"
    )]
    pub history: Option<std::path::PathBuf>,
    /// Do not record the local history.
    #[arg(long, help_heading = "Daemon")]
    pub no_history: bool,
    #[command(flatten)]
    pub sampled: SampledArgs,
    #[command(flatten)]
    pub watch: WatchArg,
}

#[derive(Debug, Args, Default)]
pub struct SnapshotArgs {
    /// Print JSON (schema: docs/snapshot-json.md) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Show only these GPUs (NVML index, UUID or a unique prefix of one); repeatable.
    #[arg(long, value_name = "GPU")]
    pub gpu: Vec<crate::gpuref::GpuRef>,
    /// With --replay: the moment to show, in seconds from the recording's start.
    #[arg(long, value_name = "SECONDS")]
    pub at: Option<f64>,
    #[command(flatten)]
    pub sampled: SampledArgs,
    #[command(flatten)]
    pub color: ColorArgs,
    #[command(flatten)]
    pub watch: WatchArg,
}

#[derive(Debug, Args, Default)]
pub struct PickArgs {
    /// Only GPUs with at least this much free memory (e.g. 20GiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub min_free: Option<u64>,
    /// How many GPUs to pick.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub count: Option<u32>,
    /// Output format.
    #[arg(long, value_enum)]
    pub format: Option<PickFormat>,
    #[command(flatten)]
    pub sampled: SampledArgs,
}

#[derive(Debug, Args)]
pub struct RecordArgs {
    /// The file to write (JSON lines, docs/recording-format.md).
    pub file: PathBuf,
    /// Stop after this long (e.g. 10m); default: until interrupted.
    #[arg(long, value_name = "DURATION", value_parser = parse_any_duration)]
    pub duration: Option<Duration>,
    /// Stop after this many samples.
    #[arg(long, value_name = "N")]
    pub samples: Option<u64>,
    /// Replace FILE if it exists.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub sampled: SampledArgs,
}

/// `gpuwatch run [OPTIONS] [--] CMD ARGS…`. The sampling interval is the global `--interval`
/// (default 250ms while a job runs).
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The log to read (`-` or nothing: standard input). Read as a stream: any size.
    #[arg(value_name = "FILE|-")]
    pub file: Option<PathBuf>,
    /// Print the diagnosis as JSON (schema: docs/explain-json.md) instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// GPU for the job: auto (the one `pick` chooses), an NVML index, a UUID (GPU-… or a MIG
    /// device's MIG-…) or a unique prefix of one; sets `CUDA_VISIBLE_DEVICES` by UUID. Default: leave `CUDA_VISIBLE_DEVICES` as it is.
    #[arg(long, value_name = "auto|N|UUID")]
    pub gpu: Option<String>,
    /// With --gpu auto: only GPUs with at least this much free memory.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub min_free: Option<u64>,
    /// Draw the job's memory timeline to this SVG file at the end.
    #[arg(long, value_name = "FILE.svg")]
    pub timeline: Option<PathBuf>,
    /// Do not print the report at the end.
    #[arg(long)]
    pub quiet: bool,
    /// The command and its arguments (everything after the first word is the job's, options
    /// included; `--` before it is optional).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<std::ffi::OsString>,
    // Last: a flattened group's help heading would carry over to the arguments after it.
    #[command(flatten)]
    pub sampled: SampledArgs,
}

/// `100ms` … `60s`, with the config file's rules and messages.
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    crate::config::parse_duration_in(crate::config::INTERVAL_RANGE, text)
        .map_err(|e| format!("'{text}' is {e}"))
}

fn parse_slow_interval(text: &str) -> Result<Duration, String> {
    crate::config::parse_duration_in(crate::config::SLOW_INTERVAL_RANGE, text)
        .map_err(|e| format!("'{text}' is {e}"))
}

fn parse_hang_timeout(text: &str) -> Result<Duration, String> {
    crate::config::parse_duration_in(crate::config::HANG_TIMEOUT_RANGE, text)
        .map_err(|e| format!("'{text}' is {e}"))
}

/// Any duration humantime reads (`250ms`, `2s`, `5m`), up to [`crate::times::MAX_DURATION`].
pub fn parse_any_duration(text: &str) -> Result<Duration, String> {
    crate::times::parse_duration("--duration", text, crate::times::MAX_DURATION)
}

/// A size such as `20GiB`, `512MiB`, `0`, with the config file's rules and messages.
pub fn parse_size(text: &str) -> Result<u64, String> {
    crate::config::parse_size(text).map_err(|e| format!("'{text}' is {e}"))
}

/// A user name as `ps` shows it: not empty, at most 256 bytes, no control characters.
fn parse_user(text: &str) -> Result<String, String> {
    if text.is_empty() || text.len() > 256 || text.chars().any(char::is_control) {
        return Err(format!(
            "'{}' is not a user name (expected a login name as ps shows it)",
            crate::text::clean(&textlimit::excerpt(text, textlimit::QUOTE_MAX))
        ));
    }
    Ok(text.to_string())
}

fn parse_speed(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v >= 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!(
            "'{text}' is not a speed (expected a number ≥ 0: 1 = as recorded, 0 = as fast as possible)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn interval_range_is_enforced() {
        assert_eq!(parse_interval("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_interval("50ms").unwrap_err().contains("100ms to 60s"));
        assert!(parse_interval("2m").is_err());
        assert!(
            parse_interval("soon")
                .unwrap_err()
                .contains("not a duration")
        );
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("20GiB"), Ok(20 << 30));
        assert!(parse_size("big").is_err());
    }

    fn run_args(argv: &[&str]) -> (GlobalArgs, RunArgs) {
        let cli = Cli::try_parse_checked(argv).expect("parses");
        let options = cli.options().expect("options");
        match cli.command {
            Some(Command::Run(parsed)) => (options, parsed),
            other => panic!("not run: {other:?}"),
        }
    }

    #[test]
    fn run_passes_everything_after_the_command_to_it() {
        let (_, a) = run_args(&[
            "gpuwatch", "run", "--", "python", "train.py", "--lr", "3e-4",
        ]);
        assert_eq!(a.command, ["python", "train.py", "--lr", "3e-4"]);
        let (_, a) = run_args(&["gpuwatch", "run", "python", "-c", "print(1)"]);
        assert_eq!(a.command, ["python", "-c", "print(1)"]);
        // Our options before the command are ours; the same words after it are the job's.
        let (g, a) = run_args(&[
            "gpuwatch",
            "run",
            "--interval",
            "500ms",
            "--gpu",
            "auto",
            "--min-free",
            "20GiB",
            "--quiet",
            "python",
            "x.py",
            "--gpu",
            "3",
            "--interval",
            "1s",
            "--help",
        ]);
        assert_eq!(g.interval, Some(Duration::from_millis(500)));
        assert_eq!(a.gpu.as_deref(), Some("auto"));
        assert_eq!(a.min_free, Some(20 << 30));
        assert!(a.quiet);
        assert_eq!(
            a.command,
            ["python", "x.py", "--gpu", "3", "--interval", "1s", "--help"]
        );
        assert!(Cli::try_parse_from(["gpuwatch", "run"]).is_err());
    }
}
