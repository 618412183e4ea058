//! Runs a parsed command line: resolves settings, opens the source, starts the sampler and
//! hands frames to the front end the command asked for (one file per command in `crate::cmd`;
//! `run` in `crate::run::command`). Errors are returned with the exit code they deserve; `main`
//! prints them once.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use clap::CommandFactory;

use crate::cli::{Cli, Command, GlobalArgs};
use crate::cmd;
use crate::config::{ColorChoice, Config, Overrides};
use crate::model::Frame;
use crate::sampler::{Sampler, SamplerOptions};
use crate::source::GpuSource;
use crate::source::nvml::{NvmlOptions, NvmlSource};
use crate::source::replay::{ReplayOptions, ReplaySource};
use crate::source::scripted::ScriptedSource;
use crate::watch::WatchSet;

/// A failure with the exit code it maps to.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    /// Bad input or an environment that cannot work (no driver, bad file): exit 2.
    pub fn setup(message: impl std::fmt::Display) -> Self {
        Self {
            code: 2,
            message: message.to_string(),
        }
    }

    /// The command ran and could not do what was asked: exit 1.
    pub fn runtime(message: impl std::fmt::Display) -> Self {
        Self {
            code: 1,
            message: message.to_string(),
        }
    }
}

pub(crate) type Result<T> = std::result::Result<T, Failure>;

/// Runs the command line; returns the process exit code.
pub fn run(cli: Cli) -> Result<u8> {
    match &cli.command {
        Some(Command::Completions { shell }) => {
            let mut cmd = Cli::command();
            let mut out = Vec::new();
            clap_complete::generate(*shell, &mut cmd, "gpuwatch", &mut out);
            write_stdout(&String::from_utf8_lossy(&out))?;
            return Ok(0);
        }
        Some(Command::Man(args)) => return cmd::man::man(args),
        Some(Command::PrintConfig(args)) if args.defaults => {
            // The shipped file itself, whatever the config file and flags say.
            if cli.given.iter().any(|id| id != "defaults") {
                return Err(Failure::setup(
                    "print-config --defaults prints the shipped defaults: it takes no other \
                     option (without --defaults it prints the configuration in effect)",
                ));
            }
            write_stdout(crate::config::DEFAULT_TOML)?;
            return Ok(0);
        }
        // Neither reads the configuration: a broken config file must not stop them.
        Some(Command::Explain(args)) => return cmd::explain::explain(args),
        Some(Command::History(args)) => return cmd::history::history(args),
        _ => {}
    }
    let g = cli.options().map_err(Failure::setup)?;
    if let Some(path) = &g.log_file {
        init_log(path)?;
    }
    let config = load_config(&g, cli.command.as_ref())?;
    match cli.command {
        Some(Command::PrintConfig(_)) => {
            write_stdout(&format!(
                "{}\n{}",
                config.to_toml(),
                front_ends(&config, g.interval)
            ))?;
            Ok(0)
        }
        Some(Command::Snapshot(args)) => cmd::snapshot::snapshot(&g, &config, &args),
        Some(Command::Pick(args)) => cmd::pick::pick(&g, &config, &args),
        Some(Command::Record(args)) => cmd::record::record(&g, &config, &args),
        Some(Command::Run(args)) => crate::run::command::run_job(&g, &config, &args),
        Some(Command::Daemon(args)) => cmd::daemon::daemon(&g, &config, &args),
        None => cmd::tui::dashboard(&g, &config, crate::tui::scope::ViewScope::default(), None),
        Some(Command::Tui(args)) => cmd::tui::tui(&g, &config, &args),
        Some(
            Command::Completions { .. }
            | Command::Man(_)
            | Command::Explain(_)
            | Command::History(_),
        ) => Ok(0),
    }
}

/// What each front end takes from the configuration, as comment lines after `print-config`'s
/// TOML (every front end runs the same analysis: [`crate::analysis::Analyzer`]).
fn front_ends(config: &Config, interval_flag: Option<Duration>) -> String {
    let every = humantime::format_duration(config.sampling.interval);
    let window = humantime::format_duration(config.history.window);
    format!(
        "# What each front end uses of the settings above (one analysis for all of them):\n\
         #   dashboard (gpuwatch, gpuwatch tui): a sample every {every}, {window} of history, \
         [detect], [alerts] (the log sink's lines go to --log-file, never to the screen), [watch]\n\
         #   tui --connect URL: the daemon's frames; [detect], [alerts] and [watch] of this file\n\
         #   tui --prometheus URL: [detect] (its memory colours), [display]\n\
         #   daemon: a sample every {every}, {window} of history, [detect], [alerts], [watch], [daemon]\n\
         #   run: a sample every {} (--interval), {window} of history, [detect], [alerts]; it \
         watches the job's process tree, not [watch]\n\
         #   snapshot: [sampling], [watch], [display], [snapshot], [detect] (its memory colours); pick: [sampling], [pick]; \
         record: [sampling]\n",
        humantime::format_duration(interval_flag.unwrap_or(crate::run::command::RUN_INTERVAL)),
    )
}

pub(crate) fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Logs go to a file, never to the terminal the dashboard draws on.
fn init_log(path: &Path) -> Result<()> {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| {
            Failure::setup(format!(
                "cannot open the log file '{}': {e}",
                path.display()
            ))
        })?;
    let filter = tracing_subscriber::EnvFilter::try_from_env("GPUWATCH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::sync::Mutex::new(file))
        .with_ansi(false)
        // On a failed write (a full disk) tracing-subscriber would say so with `eprintln!`,
        // which panics when stderr fails too: a log line that can't be written is dropped.
        .log_internal_errors(false);
    tracing_subscriber::registry()
        .with(filter)
        .with(layer)
        .try_init()
        .map_err(|e| Failure::setup(format!("cannot start logging: {e}")))
}

fn load_config(g: &GlobalArgs, command: Option<&Command>) -> Result<Config> {
    let mut overrides = Overrides {
        interval: g.interval,
        slow_interval: g.slow_interval,
        hang_timeout: g.hang_timeout,
        nvml_library: g.nvml_library.clone(),
        color: g.color,
        watch: (!g.watch.is_empty()).then(|| g.watch.clone()),
        ..Overrides::default()
    };
    // NO_COLOR (https://no-color.org) counts as --no-color unless --color says otherwise.
    let no_color_env = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    if g.no_color || (no_color_env && g.color.is_none()) {
        overrides.color = Some(ColorChoice::Never);
    }
    if let Some(Command::Pick(p)) = command {
        overrides.pick_min_free = p.min_free;
        overrides.pick_count = p.count;
        overrides.pick_format = p.format;
    }
    crate::config::load(g.config.as_deref(), &overrides, &crate::config::process_env)
        .map_err(Failure::setup)
}

/// Opens the source the global options ask for, to be sampled every `interval`.
pub fn open_source(
    g: &GlobalArgs,
    config: &Config,
    start_at: Option<f64>,
    interval: Duration,
) -> Result<Box<dyn GpuSource>> {
    if g.demo {
        return Ok(Box::new(ScriptedSource::demo().map_err(Failure::setup)?));
    }
    if let Some(path) = &g.scenario {
        return Ok(Box::new(
            ScriptedSource::load(path).map_err(Failure::setup)?,
        ));
    }
    if let Some(path) = &g.replay {
        let opts = ReplayOptions {
            speed: g.speed,
            start_at,
            looped: false,
        };
        let source = ReplaySource::open(path, opts).map_err(Failure::setup)?;
        for w in source.warnings() {
            // Best effort: an unwritable stderr must not stop the replay; the warning quotes
            // the file, so it is cleaned for the terminal.
            crate::eprintln_safe!("gpuwatch: warning: {}", crate::text::clean(w));
        }
        return Ok(Box::new(source));
    }
    let source = NvmlSource::open(NvmlOptions {
        library: config.nvml.library.clone(),
        reinit_backoff_max: config.nvml.reinit_backoff_max,
        // A GPU stuck in a call holds the others back one interval at most.
        gpu_deadline: interval,
    })
    .map_err(Failure::setup)?;
    Ok(Box::new(source))
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::runtime(format!("cannot start the async runtime: {e}")))
}

/// Opens the source and starts the sampler at the configured cadences (`headless`: the
/// daemon's, which refreshes known processes' host readings less often). `past`: the front end
/// runs the source's past through its analysis ([`Sampler::take_past`]); the others do not
/// pay for reading it.
pub(crate) fn start(
    g: &GlobalArgs,
    config: &Config,
    start_at: Option<f64>,
    headless: bool,
    past: bool,
) -> Result<Sampler> {
    start_with(g, config, start_at, past, cadences(config, headless, false))
}

/// The dashboard's sampler: with the source's past, and frames that carry this host's CPU,
/// memory and load for the header (a live or demo source only).
pub(crate) fn start_dashboard(
    g: &GlobalArgs,
    config: &Config,
    start_at: Option<f64>,
) -> Result<Sampler> {
    start_with(g, config, start_at, true, cadences(config, false, true))
}

fn cadences(config: &Config, headless: bool, host_summary: bool) -> SamplerOptions {
    let interval = config.sampling.interval;
    SamplerOptions {
        interval,
        slow_interval: config.sampling.slow_interval,
        host_interval: if headless {
            config.sampling.slow_interval.max(HEADLESS_HOST_INTERVAL)
        } else {
            interval
        },
        host_summary,
    }
}

/// Opens the source and starts the sampler with these cadences.
pub(crate) fn start_with(
    g: &GlobalArgs,
    config: &Config,
    start_at: Option<f64>,
    past: bool,
    options: SamplerOptions,
) -> Result<Sampler> {
    let source = open_source(g, config, start_at, options.interval)?;
    // At 1 Hz at most (as the detector is judged), whatever the live cadence.
    let past = if past {
        source.past(
            crate::source::PREROLL,
            options.interval.max(Duration::from_secs(1)),
        )
    } else {
        Vec::new()
    };
    Sampler::spawn(source, options)
        .map(|s| s.with_past(past))
        .map_err(|e| Failure::runtime(format!("cannot start the sampler thread: {e}")))
}

/// How often a headless daemon refreshes the CPU % and RSS of processes it already knows.
/// Nothing it exports to Prometheus or feeds the detector uses them (only the JSON snapshot and
/// the event stream show them), and `/proc` reads are the daemon's largest cost at this scale;
/// a new PID is still read in full at once. The same refresh finds a process that exited while
/// the driver still lists it, so the daemon opens exited-holder up to this much later than
/// `detect.exited-grace` after the exit (the grace counts from when it was found gone).
const HEADLESS_HOST_INTERVAL: Duration = Duration::from_secs(30);

pub(crate) fn first_frame(
    rt: &tokio::runtime::Runtime,
    sampler: &Sampler,
    config: &Config,
) -> Result<Arc<Frame>> {
    rt.block_on(sampler.first_frame(config.sampling.hang_timeout))
        .map_err(Failure::runtime)
}

/// The watched set ("mine") for this frame's source.
pub(crate) fn watch_set(config: &Config, source: &crate::model::SourceInfo) -> WatchSet {
    let me = source
        .me
        .clone()
        .or_else(crate::source::procinfo::current_user);
    WatchSet::new(config.watch.specs.clone(), me)
}

/// The watched PIDs of a frame of this host's source (parents from this host's `/proc` for a
/// live source, from the frame for a demo or a replay).
pub(crate) fn mine_of(set: &WatchSet, frame: &Frame) -> std::collections::HashSet<u32> {
    crate::analysis::mine(
        set,
        frame,
        crate::analysis::Parents::of(frame.source.kind, false),
    )
}

pub(crate) fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Writes to stdout; a closed pipe (`| head`) ends the program quietly.
pub(crate) fn write_stdout(text: &str) -> Result<()> {
    match crate::stdio::out(text) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => Err(Failure::runtime(format!("cannot write to stdout: {e}"))),
    }
}
