//! Runs a parsed command line: resolves settings, opens the source, starts the sampler and
//! hands frames to the front end the command asked for. Errors are returned with the exit code
//! they deserve; `main` prints them once.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use clap::CommandFactory;

use crate::cli::{
    Cli, Command, ExplainArgs, GlobalArgs, PickArgs, RecordArgs, RunArgs, SnapshotArgs,
};
use crate::config::{ColorChoice, Config, Overrides};
use crate::model::{Frame, ProcSample};
use crate::output::{json, table};
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

type Result<T> = std::result::Result<T, Failure>;

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
        Some(Command::Man) => {
            let mut out = Vec::new();
            clap_mangen::Man::new(Cli::command())
                .render(&mut out)
                .map_err(|e| Failure::runtime(format!("cannot render the man page: {e}")))?;
            write_stdout(&String::from_utf8_lossy(&out))?;
            return Ok(0);
        }
        _ => {}
    }
    if let Some(path) = &cli.global.log_file {
        init_log(path)?;
    }
    let config = load_config(&cli)?;
    match cli.command {
        Some(Command::History(cmd)) => history(&cmd),
        Some(Command::PrintConfig) => {
            write_stdout(&format!(
                "{}\n{}",
                config.to_toml(),
                front_ends(&config, cli.global.interval)
            ))?;
            Ok(0)
        }
        Some(Command::Snapshot(args)) => snapshot(&cli.global, &config, &args),
        Some(Command::Pick(args)) => pick(&cli.global, &config, &args),
        Some(Command::Record(args)) => record(&cli.global, &config, &args),
        Some(Command::Run(args)) => run_job(&cli.global, &config, &args),
        Some(Command::Explain(args)) => explain(&args),
        Some(Command::Daemon(args)) => {
            let server =
                crate::serve::Options::from_args(&args, &config.daemon).map_err(Failure::setup)?;
            let sampler = start(&cli.global, &config, None, None, true)?;
            let watch = watch_set(&config, &sampler.info());
            // A simulated source (--demo, --scenario, --replay) records no history unless asked
            // with --history PATH: its jobs must not enter the real history.
            let simulated = [
                (cli.global.demo, "--demo"),
                (cli.global.scenario.is_some(), "--scenario"),
                (cli.global.replay.is_some(), "--replay"),
            ]
            .into_iter()
            .find_map(|(on, flag)| on.then_some(flag));
            let history = match (&args.history, simulated) {
                _ if args.no_history => None,
                (Some(path), _) => Some(path.clone()),
                (None, Some(flag)) => {
                    crate::eprintln_safe!(
                        "gpuwatch: no local history: the source is simulated ({flag}); pass \
                         --history PATH to record it in a file of its own"
                    );
                    None
                }
                (None, None) => crate::store::default_path(),
            };
            crate::daemon::run(&sampler, &watch, &config, server, history.as_deref())
                .map_err(Failure::setup)?;
            Ok(0)
        }
        None => dashboard(&cli.global, &config),
        Some(Command::Tui(args)) => tui(&cli.global, &config, &args),
        Some(Command::Completions { .. } | Command::Man) => Ok(0),
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
         #   daemon: a sample every {every}, {window} of history, [detect], [alerts], [watch], [daemon]\n\
         #   run: a sample every {} (--interval), {window} of history, [detect], [alerts]; it \
         watches the job's process tree, not [watch]\n\
         #   snapshot: [sampling], [watch], [display], [snapshot]; pick: [sampling], [pick]; \
         record: [sampling]\n",
        humantime::format_duration(interval_flag.unwrap_or(RUN_INTERVAL)),
    )
}

fn open_history(args: &crate::cli::HistoryFileArgs) -> Result<crate::store::Store> {
    let path = match &args.path {
        Some(p) => p.clone(),
        None => crate::store::default_path().ok_or_else(|| {
            Failure::setup(
                "cannot find the history file: set XDG_STATE_HOME or HOME, or pass --history PATH",
            )
        })?,
    };
    if !path.exists() {
        return Err(Failure::setup(format!(
            "no history file at '{}' (the daemon writes it; pass --history PATH for another)",
            path.display()
        )));
    }
    crate::store::Store::open_read_only(&path).map_err(Failure::setup)
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn fmt_time(t: f64) -> String {
    crate::times::format_rfc3339(t)
}

fn opt_bytes(v: Option<u64>) -> String {
    v.map_or_else(|| "n/a".to_string(), crate::output::fmt_bytes)
}

fn history(cmd: &crate::cli::HistoryCommand) -> Result<u8> {
    use crate::cli::HistoryCommand;
    use crate::text::{clean, clean_or};
    use std::fmt::Write as _;
    let now = now_secs();
    match cmd {
        HistoryCommand::Who(args) => {
            let at = crate::times::parse_time("--at", &args.at, now).map_err(Failure::setup)?;
            let store = open_history(&args.file)?;
            let who = store.who(&args.gpu, at).map_err(Failure::runtime)?;
            let Some(who) = who else {
                return Err(Failure::runtime(format!(
                    "no samples of GPU {} at {} in '{}'",
                    match &args.gpu {
                        crate::store::GpuRef::Index(i) => i.to_string(),
                        crate::store::GpuRef::Uuid(u) => u.clone(),
                    },
                    fmt_time(at),
                    store.path().display()
                )));
            };
            if args.file.json {
                let text = serde_json::to_string_pretty(&who)
                    .map_err(|e| Failure::runtime(format!("cannot write JSON: {e}")))?;
                write_stdout(&format!("{text}\n"))?;
                return Ok(0);
            }
            let mut out = format!(
                "GPU {} {} at {}{}: {} / {} used\n",
                who.gpu_index,
                clean(&who.gpu_uuid),
                fmt_time(who.t),
                if who.downsampled {
                    " (1-minute step: peak memory, mean SM)"
                } else {
                    ""
                },
                opt_bytes(who.used),
                opt_bytes(who.total)
            );
            let _ = writeln!(
                out,
                "{:>8}  {:<12} {:>10} {:>5}  COMMAND",
                "PID", "USER", "GPU MEM", "SM%"
            );
            for p in &who.processes {
                let _ = writeln!(
                    out,
                    "{:>8}  {:<12} {:>10} {:>5}  {}",
                    p.pid,
                    clean_or(p.user.as_deref(), "n/a"),
                    opt_bytes(p.used),
                    p.sm.map_or_else(|| "n/a".to_string(), |v| v.to_string()),
                    clean_or(p.command.as_deref(), "(not visible here)")
                );
            }
            write_stdout(&out)?;
            Ok(0)
        }
        HistoryCommand::Peaks(args) => {
            let since =
                crate::times::parse_since("--since", &args.since, now).map_err(Failure::setup)?;
            let store = open_history(&args.file)?;
            let peaks = store.peaks(since).map_err(Failure::runtime)?;
            if args.file.json {
                let text = serde_json::to_string_pretty(&peaks)
                    .map_err(|e| Failure::runtime(format!("cannot write JSON: {e}")))?;
                write_stdout(&format!("{text}\n"))?;
                return Ok(0);
            }
            let mut out = format!("Peak GPU memory since {}\n", fmt_time(since));
            let _ = writeln!(
                out,
                "{:>8}  {:<12} {:>3} {:>10}  {:<20}  COMMAND",
                "PID", "USER", "GPU", "PEAK", "AT"
            );
            for p in &peaks {
                let _ = writeln!(
                    out,
                    "{:>8}  {:<12} {:>3} {:>10}  {:<20}  {}",
                    p.pid,
                    clean_or(p.user.as_deref(), "n/a"),
                    p.gpu,
                    crate::output::fmt_bytes(p.peak_used),
                    fmt_time(p.at),
                    clean_or(p.command.as_deref(), "(not visible here)")
                );
            }
            write_stdout(&out)?;
            Ok(0)
        }
    }
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

fn load_config(cli: &Cli) -> Result<Config> {
    let g = &cli.global;
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
    if let Some(Command::Pick(p)) = &cli.command {
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

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::runtime(format!("cannot start the async runtime: {e}")))
}

fn start(
    g: &GlobalArgs,
    config: &Config,
    start_at: Option<f64>,
    interval: Option<Duration>,
    headless: bool,
) -> Result<Sampler> {
    let source = open_source(
        g,
        config,
        start_at,
        interval.unwrap_or(config.sampling.interval),
    )?;
    Sampler::spawn(
        source,
        SamplerOptions {
            interval: interval.unwrap_or(config.sampling.interval),
            slow_interval: config.sampling.slow_interval,
            host_interval: if headless {
                config.sampling.slow_interval.max(HEADLESS_HOST_INTERVAL)
            } else {
                interval.unwrap_or(config.sampling.interval)
            },
        },
    )
    .map_err(|e| Failure::runtime(format!("cannot start the sampler thread: {e}")))
}

/// How often a headless daemon refreshes the CPU % and RSS of processes it already knows.
/// Nothing it exports to Prometheus or feeds the detector uses them (only the JSON snapshot and
/// the event stream show them), and `/proc` reads are the daemon's largest cost at this scale;
/// a new PID is still read in full at once.
const HEADLESS_HOST_INTERVAL: Duration = Duration::from_secs(30);

fn first_frame(
    rt: &tokio::runtime::Runtime,
    sampler: &Sampler,
    config: &Config,
) -> Result<Arc<Frame>> {
    rt.block_on(sampler.first_frame(config.sampling.hang_timeout))
        .map_err(Failure::runtime)
}

/// The watched set ("mine") for this frame's source.
fn watch_set(config: &Config, source: &crate::model::SourceInfo) -> WatchSet {
    let me = source
        .me
        .clone()
        .or_else(crate::source::procinfo::current_user);
    WatchSet::new(config.watch.specs.clone(), me)
}

/// The watched PIDs of a frame of this host's source (parents from this host's `/proc` for a
/// live source, from the frame for a demo or a replay).
fn mine_of(set: &WatchSet, frame: &Frame) -> std::collections::HashSet<u32> {
    crate::analysis::mine(
        set,
        frame,
        crate::analysis::Parents::of(frame.source.kind, false),
    )
}

fn color(config: &Config) -> bool {
    match config.display.color {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => std::io::stdout().is_terminal(),
    }
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Resolves `--gpu` values (index or UUID, or a unique UUID prefix) to NVML indices.
fn select_gpus(frame: &Frame, wanted: &[String]) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    for w in wanted {
        let w = w.trim();
        let found = if let Ok(i) = w.parse::<u32>() {
            frame.sample.gpus.iter().find(|g| g.index == i)
        } else {
            let hits: Vec<_> = frame
                .sample
                .gpus
                .iter()
                .filter(|g| g.uuid.eq_ignore_ascii_case(w) || g.uuid.starts_with(w))
                .collect();
            if hits.len() > 1 {
                return Err(Failure::setup(format!(
                    "--gpu '{w}' matches {} GPUs; give more of the UUID",
                    hits.len()
                )));
            }
            hits.first().copied()
        };
        let Some(g) = found else {
            let known: Vec<String> = frame
                .sample
                .gpus
                .iter()
                .map(|g| format!("{} ({})", g.index, g.uuid))
                .collect();
            return Err(Failure::setup(format!(
                "--gpu '{w}' is not a GPU here (expected an index or UUID among: {})",
                known.join(", ")
            )));
        };
        out.push(g.index);
    }
    Ok(out)
}

fn snapshot(g: &GlobalArgs, config: &Config, args: &SnapshotArgs) -> Result<u8> {
    if args.at.is_some() && g.replay.is_none() {
        return Err(Failure::setup(
            "--at picks a moment of a recording: use it with --replay FILE",
        ));
    }
    let rt = runtime()?;
    let sampler = start(g, config, args.at, None, false)?;
    let frame = first_frame(&rt, &sampler, config)?;
    let gpus = select_gpus(&frame, &args.gpu)?;
    let set = watch_set(config, &frame.source);
    let mine = mine_of(&set, &frame);
    let watched = |p: &ProcSample| mine.contains(&p.pid);
    let text = if args.json {
        let snap = json::snapshot(&frame, &gpus, &watched, now_unix());
        let mut s = serde_json::to_string_pretty(&snap)
            .map_err(|e| Failure::runtime(format!("cannot encode JSON: {e}")))?;
        s.push('\n');
        s
    } else {
        table::render(&frame, &watched, now_unix(), &table_options(config, gpus))
    };
    write_stdout(&text)?;
    Ok(0)
}

fn table_options(config: &Config, gpus: Vec<u32>) -> table::TableOptions {
    let tty = std::io::stdout().is_terminal();
    table::TableOptions {
        color: color(config),
        width: tty
            .then(|| {
                crossterm::terminal::size()
                    .ok()
                    .map(|(w, _)| usize::from(w))
            })
            .flatten(),
        gpus,
        unattributed_min: config.snapshot.show_unattributed_min,
        ..table::TableOptions::default()
    }
}

fn pick(g: &GlobalArgs, config: &Config, _args: &PickArgs) -> Result<u8> {
    let rt = runtime()?;
    let sampler = start(g, config, None, None, false)?;
    let frame = first_frame(&rt, &sampler, config)?;
    let p = &config.pick;
    match crate::pick::pick(&frame.sample, p.min_free, p.count as usize) {
        Ok(gpus) => {
            write_stdout(&format!("{}\n", crate::pick::format(&gpus, p.format)))?;
            Ok(0)
        }
        Err(e) => Err(Failure::runtime(e)),
    }
}

fn record(g: &GlobalArgs, config: &Config, args: &RecordArgs) -> Result<u8> {
    let file = open_new(&args.file, args.force)?;
    let rt = runtime()?;
    let sampler = start(g, config, None, None, false)?;
    let first = first_frame(&rt, &sampler, config)?;
    let mut recorder = crate::record::Recorder::new(
        std::io::BufWriter::new(file),
        &first.source,
        config.sampling.interval,
    )
    .map_err(|e| Failure::runtime(format!("cannot write '{}': {e}", args.file.display())))?;
    let deadline = args
        .duration
        .and_then(|d| tokio::time::Instant::now().checked_add(d));
    let mut rx = sampler.frames();
    let mut written = 0u64;
    let mut last_seq = 0u64;
    let outcome: std::io::Result<()> = rt.block_on(async {
        loop {
            let frame = rx.borrow_and_update().clone();
            if let Some(frame) = frame
                && frame.seq != last_seq
            {
                last_seq = frame.seq;
                recorder.write(&frame.sample)?;
                written += 1;
                if args.samples.is_some_and(|n| written >= n) {
                    return Ok(());
                }
            }
            let until = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = rx.changed() => if changed.is_err() { return Ok(()) },
                _ = tokio::signal::ctrl_c() => return Ok(()),
                () = until => return Ok(()),
            }
        }
    });
    outcome
        .map_err(|e| Failure::runtime(format!("cannot write '{}': {e}", args.file.display())))?;
    crate::eprintln_safe!(
        "gpuwatch: recorded {written} samples to {}",
        args.file.display()
    );
    Ok(0)
}

fn open_new(path: &Path, force: bool) -> Result<std::fs::File> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true);
    if force {
        opts.create(true).truncate(true);
    } else {
        opts.create_new(true);
    }
    opts.open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            Failure::setup(format!(
                "'{}' already exists; pass --force to replace it (a recording is never overwritten silently)",
                path.display()
            ))
        } else {
            Failure::setup(format!("cannot create '{}': {e}", path.display()))
        }
    })
}

/// The dashboard on a terminal; elsewhere (a pipe, a file) the snapshot table on every frame.
fn tui(g: &GlobalArgs, config: &Config, args: &crate::cli::TuiArgs) -> Result<u8> {
    let token = args
        .token_file
        .as_deref()
        .map(crate::serve::read_token_file)
        .transpose()
        .map_err(Failure::setup)?;
    if let Some(url) = &args.connect {
        return connect_dashboard(config, url, token);
    }
    if let Some(prometheus) = &args.prometheus {
        return cluster_overview(config, prometheus, token);
    }
    dashboard(g, config)
}

/// `tui --connect URL`: a remote daemon's GPUs in the full dashboard (or, when the output is
/// not a terminal, its snapshot table once).
fn connect_dashboard(config: &Config, url: &str, token: Option<String>) -> Result<u8> {
    let remote = crate::remote::connect(url, token).map_err(Failure::setup)?;
    let watch = WatchSet::new(
        config.watch.specs.clone(),
        crate::source::procinfo::current_user(),
    );
    if !(std::io::stdout().is_terminal() && std::io::stdin().is_terminal()) {
        return remote_table(config, &remote, &watch);
    }
    let options = crate::tui::TuiOptions {
        color: config.display.color != ColorChoice::Never,
        read_only: true,
        history_window: config.history.window,
        rules: config.detect.clone(),
        alerts: config.alerts.clone(),
    };
    let no_call = || None;
    crate::tui::run_feed(
        crate::tui::Feed {
            frames: remote.frames(),
            in_flight: &no_call,
            link: Some((remote.url.clone(), remote.link())),
        },
        watch,
        &options,
    )
    .map_err(|e| Failure::runtime(format!("the dashboard failed: {e}")))?;
    Ok(0)
}

/// The remote daemon's first frame as the snapshot table; gives up after the hang timeout,
/// saying why the link is down.
fn remote_table(config: &Config, remote: &crate::remote::Remote, watch: &WatchSet) -> Result<u8> {
    let rt = runtime()?;
    let mut frames = remote.frames();
    let frame = rt.block_on(async {
        match tokio::time::timeout(
            config.sampling.hang_timeout,
            frames.wait_for(Option::is_some),
        )
        .await
        {
            Ok(Ok(f)) => f.clone(),
            _ => None,
        }
    });
    let Some(frame) = frame else {
        let why = match &*remote.link().borrow() {
            crate::remote::Link::Disconnected { error, .. } => error.clone(),
            _ => "no frame arrived".to_string(),
        };
        return Err(Failure::runtime(format!(
            "no frame from {} within {}: {why}",
            remote.url,
            humantime::format_duration(config.sampling.hang_timeout)
        )));
    };
    let mine = crate::analysis::mine(watch, &frame, crate::analysis::Parents::Reported);
    let watched = |p: &ProcSample| mine.contains(&p.pid);
    write_stdout(&table::render(
        &frame,
        &watched,
        now_unix(),
        &table_options(config, Vec::new()),
    ))?;
    Ok(0)
}

/// `tui --prometheus URL`: the cluster overview on a terminal, the plain table once elsewhere.
fn cluster_overview(config: &Config, prometheus: &str, token: Option<String>) -> Result<u8> {
    use crate::cluster::{self, ClusterExit, ClusterOptions, PromClient};
    cluster::query::check_url(prometheus).map_err(Failure::setup)?;
    if !(std::io::stdout().is_terminal() && std::io::stdin().is_terminal()) {
        let rows =
            cluster::overview(&PromClient::new(prometheus, None)).map_err(Failure::runtime)?;
        write_stdout(&cluster::plain_table(&rows))?;
        return Ok(0);
    }
    let mut options = ClusterOptions {
        prometheus: prometheus.to_string(),
        token,
        color: config.display.color != ColorChoice::Never,
        message: None,
    };
    loop {
        match cluster::run(options.clone())
            .map_err(|e| Failure::runtime(format!("the cluster overview failed: {e}")))?
        {
            ClusterExit::Quit => return Ok(0),
            ClusterExit::DrillDown(url) => {
                // The host's full dashboard; quitting it comes back to the overview.
                connect_dashboard(config, &url, options.token.clone())?;
                options.message = Some(format!("back from {url}"));
            }
        }
    }
}

fn dashboard(g: &GlobalArgs, config: &Config) -> Result<u8> {
    if !(std::io::stdout().is_terminal() && std::io::stdin().is_terminal()) {
        return live_table(g, config);
    }
    // The dashboard opens at once; the first frame arrives when the source answers.
    let sampler = start(g, config, None, None, false)?;
    let watch = watch_set(config, &sampler.info());
    let options = crate::tui::TuiOptions {
        // The dashboard runs on a terminal, so `auto` means colour.
        color: config.display.color != ColorChoice::Never,
        read_only: g.read_only,
        history_window: config.history.window,
        rules: config.detect.clone(),
        alerts: config.alerts.clone(),
    };
    crate::tui::run(&sampler, watch, &options)
        .map_err(|e| Failure::runtime(format!("the dashboard failed: {e}")))?;
    Ok(0)
}

/// The snapshot table, redrawn on every frame, for output that is not a terminal.
fn live_table(g: &GlobalArgs, config: &Config) -> Result<u8> {
    let rt = runtime()?;
    let sampler = start(g, config, None, None, false)?;
    let first = first_frame(&rt, &sampler, config)?;
    let set = watch_set(config, &first.source);
    let tty = std::io::stdout().is_terminal();
    let mut rx = sampler.frames();
    rt.block_on(async {
        loop {
            let frame = rx.borrow_and_update().clone();
            if let Some(frame) = frame {
                let mut text = String::new();
                if tty {
                    // Home + clear: redraw in place.
                    text.push_str("\x1b[H\x1b[2J");
                }
                let mine = mine_of(&set, &frame);
                let watched = |p: &ProcSample| mine.contains(&p.pid);
                text.push_str(&table::render(
                    &frame,
                    &watched,
                    now_unix(),
                    &table_options(config, Vec::new()),
                ));
                if tty {
                    text.push_str("\n(Ctrl-C to quit; the full dashboard is on its way)\n");
                }
                write_stdout(&text)?;
            }
            tokio::select! {
                changed = rx.changed() => if changed.is_err() { return Ok(0) },
                _ = tokio::signal::ctrl_c() => return Ok(0),
            }
        }
    })
}

/// Writes to stdout; a closed pipe (`| head`) ends the program quietly.
/// `gpuwatch run`: runs the job with its output passed through and signals forwarded; exits
/// with its code (128 + signal when a signal killed it). A job that can't be started exits
/// 127 (not found) or 126 (not executable), like a shell.
/// `gpuwatch run -- CMD…`: the job runs whatever happens to the monitor (no GPU, no driver:
/// it runs unwatched and the report says why); its exit code is ours.
fn run_job(g: &GlobalArgs, config: &Config, args: &RunArgs) -> Result<u8> {
    use crate::run::child::{ChildSpec, TailLimits};
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| Failure::setup("run: no command given"))?;
    let command_text = args
        .command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    let (sampler, mut note) = run_sampler(g, config);
    let env = if args.gpu.is_some() || args.min_free.is_some() {
        gpu_env(config, sampler.as_ref(), args, &mut note)?
    } else {
        Vec::new()
    };
    let env_value = |name: &str| -> Option<String> {
        env.iter()
            .find(|(k, _): &&(std::ffi::OsString, std::ffi::OsString)| k == name)
            .map(|(_, v)| v.to_string_lossy().into_owned())
            .or_else(|| std::env::var(name).ok())
    };
    let visible = env_value("CUDA_VISIBLE_DEVICES");
    let order = env_value("CUDA_DEVICE_ORDER");
    let spec = ChildSpec {
        program: program.clone(),
        args: rest.to_vec(),
        env,
    };
    let running = crate::run::child::spawn(&spec, TailLimits::default()).map_err(|e| Failure {
        code: if e.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        },
        message: e.to_string(),
    })?;
    let child_pid = running.pid();
    // The job runs now: whatever fails from here on is reported, never a reason to leave
    // (which would orphan the job, or with its parent-death signal, kill it).
    let monitor = sampler
        .as_ref()
        .and_then(|s| match start_run_monitor(s, config, child_pid) {
            Ok(m) => Some(m),
            Err(e) => {
                note = Some(e.message);
                None
            }
        });
    let outcome = running
        .wait()
        .map_err(|e| Failure::runtime(format!("lost track of the job: {e}")))?;
    let record = monitor.and_then(RunMonitor::finish);
    drop(sampler);
    let failed = outcome.exit_code() != 0;
    let diagnosis = failed.then(|| {
        let words: Vec<String> = args
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let ctx = record.as_ref().map(|r| {
            crate::run::report::context(
                r,
                child_pid,
                visible.clone(),
                order.clone(),
                crate::triage::batch_size_from_args(&words).map(|(b, _)| b),
                command_text.clone(),
            )
        });
        let mut scanner = crate::triage::Scanner::new();
        for line in &outcome.tail {
            scanner.push_line(line);
        }
        crate::triage::diagnose(&scanner.finish(), ctx.as_ref())
    });
    if !args.quiet {
        let mut text =
            crate::run::report::render(&command_text, &outcome, record.as_ref(), note.as_deref());
        if let Some(d) = &diagnosis {
            text.push('\n');
            text.push_str(&crate::triage::render_text(d));
        }
        crate::stdio::err(&text);
    }
    if let Some(path) = &args.timeline {
        write_timeline(
            path,
            &command_text,
            &outcome,
            record.as_ref(),
            diagnosis.as_ref(),
            args.quiet,
        );
    }
    Ok(outcome.exit_code())
}

/// `gpuwatch explain [FILE|-]`: the diagnosis of a saved log, from the text alone.
fn explain(args: &ExplainArgs) -> Result<u8> {
    let (name, reader): (String, Box<dyn std::io::Read>) = match &args.file {
        None => ("standard input".into(), Box::new(std::io::stdin())),
        Some(p) if p.as_os_str() == "-" => ("standard input".into(), Box::new(std::io::stdin())),
        Some(p) => {
            let f = std::fs::File::open(p).map_err(|e| {
                Failure::setup(format!("cannot read the log '{}': {e}", p.display()))
            })?;
            if f.metadata().is_ok_and(|m| m.is_dir()) {
                return Err(Failure::setup(format!(
                    "'{}' is a directory (expected a log file, or - for standard input)",
                    p.display()
                )));
            }
            (format!("'{}'", p.display()), Box::new(f))
        }
    };
    let analysis = crate::triage::scan(reader)
        .map_err(|e| Failure::runtime(format!("cannot read {name}: {e}")))?;
    let diagnosis = crate::triage::diagnose(&analysis, None);
    if args.json {
        let text = serde_json::to_string_pretty(&diagnosis)
            .map_err(|e| Failure::runtime(format!("cannot write JSON: {e}")))?;
        write_stdout(&format!("{text}\n"))?;
    } else {
        write_stdout(&crate::triage::render_text(&diagnosis))?;
    }
    Ok(0)
}

/// `--gpu`/`--min-free`: the GPU for the job (after the first sample), as the job's
/// `CUDA_VISIBLE_DEVICES` (by UUID) and `CUDA_DEVICE_ORDER`.
fn gpu_env(
    config: &Config,
    sampler: Option<&Sampler>,
    args: &RunArgs,
    note: &mut Option<String>,
) -> Result<Vec<(std::ffi::OsString, std::ffi::OsString)>> {
    let rt = runtime()?;
    let first = sampler.and_then(|s| match first_frame(&rt, s, config) {
        Ok(f) => Some(f),
        Err(e) => {
            *note = Some(e.message);
            None
        }
    });
    let Some(frame) = &first else {
        return Err(Failure::setup(format!(
            "run: --gpu/--min-free need to see the GPUs: {}",
            note.as_deref().unwrap_or("no sample")
        )));
    };
    let gpu = choose_gpu(&frame.sample, args.gpu.as_deref(), args.min_free)?;
    crate::eprintln_safe!(
        "gpuwatch: running on GPU {} ({}{})",
        gpu.index,
        crate::text::clean(&gpu.uuid),
        gpu.memory
            .map(|m| format!(", {} free", crate::output::fmt_bytes(m.free)))
            .unwrap_or_default()
    );
    Ok(vec![
        ("CUDA_VISIBLE_DEVICES".into(), gpu.uuid.clone().into()),
        ("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into()),
    ])
}

/// The sampler `run` watches the job with (at `--interval`, default [`RUN_INTERVAL`]), or why
/// there is none.
fn run_sampler(g: &GlobalArgs, config: &Config) -> (Option<Sampler>, Option<String>) {
    let interval = g.interval.unwrap_or(RUN_INTERVAL);
    let started = open_source(g, config, None, interval).and_then(|source| {
        Sampler::spawn(
            source,
            SamplerOptions {
                interval,
                slow_interval: config.sampling.slow_interval.max(interval),
                host_interval: interval,
            },
        )
        .map_err(|e| Failure::runtime(format!("cannot start the sampler thread: {e}")))
    });
    match started {
        Ok(s) => (Some(s), None),
        Err(e) => (None, Some(e.message)),
    }
}

/// `run --timeline FILE.svg`. The job's exit code is what matters: a timeline that cannot be
/// written is reported, nothing more.
fn write_timeline(
    path: &std::path::Path,
    command: &str,
    outcome: &crate::run::Outcome,
    record: Option<&crate::run::monitor::RunRecord>,
    diagnosis: Option<&crate::triage::Diagnosis>,
    quiet: bool,
) {
    let unix = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    };
    let gpus = record
        .map(crate::run::monitor::RunRecord::job_gpus)
        .unwrap_or_default();
    let svg = crate::run::timeline::svg(
        command,
        unix(outcome.started),
        &gpus,
        &crate::run::timeline::Ending {
            at: unix(outcome.ended),
            status: outcome.describe(),
            cause: diagnosis.map(|d| d.headline.clone()),
            failed: outcome.exit_code() != 0,
        },
    );
    match std::fs::write(path, svg) {
        Err(e) => crate::eprintln_safe!(
            "gpuwatch: cannot write the timeline '{}': {e}",
            path.display()
        ),
        Ok(()) if !quiet => {
            crate::eprintln_safe!("gpuwatch: timeline written to {}", path.display());
        }
        Ok(()) => {}
    }
}

/// Sampling interval while a job runs (faster than the dashboard's: a job can fill a GPU in
/// seconds).
const RUN_INTERVAL: Duration = Duration::from_millis(250);

/// `--gpu auto|N|UUID` (and `--min-free`) against the first sample.
fn choose_gpu<'a>(
    sample: &'a crate::model::Sample,
    gpu: Option<&str>,
    min_free: Option<u64>,
) -> Result<&'a crate::model::GpuSample> {
    let known = || {
        sample
            .gpus
            .iter()
            .map(|g| format!("{} ({})", g.index, g.uuid))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match gpu.map(str::trim) {
        None | Some("auto") => crate::pick::pick(sample, min_free.unwrap_or(0), 1)
            .map(|v| v[0])
            .map_err(Failure::runtime),
        Some(want) => {
            let found = if let Ok(i) = want.parse::<u32>() {
                sample.gpus.iter().find(|g| g.index == i)
            } else {
                let matches: Vec<_> = sample
                    .gpus
                    .iter()
                    .filter(|g| g.uuid == want || g.uuid.starts_with(want))
                    .collect();
                if matches.len() > 1 {
                    return Err(Failure::setup(format!(
                        "--gpu '{want}' matches {} GPUs; give more of the UUID",
                        matches.len()
                    )));
                }
                matches.first().copied()
            };
            let g = found.ok_or_else(|| {
                Failure::setup(format!(
                    "--gpu '{want}' is not a GPU here (expected auto, an index or a UUID; GPUs: {})",
                    known()
                ))
            })?;
            if let (Some(need), Some(m)) = (min_free, g.memory)
                && m.free < need
            {
                return Err(Failure::runtime(format!(
                    "GPU {} has {} free, less than --min-free {}",
                    g.index,
                    crate::output::fmt_bytes(m.free),
                    crate::output::fmt_bytes(need)
                )));
            }
            Ok(g)
        }
    }
}

/// The monitor thread of `run`: frames in, a [`crate::run::monitor::RunRecord`] out.
struct RunMonitor {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: std::thread::JoinHandle<crate::run::monitor::RunRecord>,
}

impl RunMonitor {
    fn finish(mut self) -> Option<crate::run::monitor::RunRecord> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.thread.join().ok()
    }
}

fn start_run_monitor(sampler: &Sampler, config: &Config, child: u32) -> Result<RunMonitor> {
    let mut frames = sampler.frames();
    // Only frames taken after the job started.
    frames.borrow_and_update();
    let watch = WatchSet::new(vec![crate::watch::WatchSpec::Pid(child)], None);
    let mut analyzer = crate::analysis::Analyzer::new(
        config.detect.clone(),
        config.history.window,
        crate::analysis::Detail::Full,
        watch,
    );
    // The findings go to the configured sinks as the daemon's and the dashboard's do (the
    // `log` sink's lines on stderr, beside the job's own output).
    // A sink that cannot start (a file that cannot be opened) is said once; the job is watched
    // all the same.
    let alerts = crate::alert::Alerts::start(&config.alerts)
        .inspect_err(|e| crate::eprintln_safe!("gpuwatch: no alerts: {e}"))
        .ok();
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let started = now_secs();
    let thread = std::thread::Builder::new()
        .name("gpuwatch-run-monitor".into())
        .spawn(move || {
            let mut record = crate::run::monitor::RunRecord::new(started);
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return record;
            };
            rt.block_on(async {
                loop {
                    tokio::select! {
                        _ = &mut stopped => break,
                        changed = frames.changed() => {
                            if changed.is_err() {
                                break;
                            }
                            let frame = frames.borrow_and_update().clone();
                            if let Some(frame) = frame {
                                let analysis = analyzer.push(&frame);
                                if let Some(alerts) = &alerts {
                                    for event in &analysis.events {
                                        alerts.send(event);
                                    }
                                }
                                record.observe(&analysis);
                            }
                        }
                    }
                }
            });
            drop(rt);
            if let Some(alerts) = alerts {
                alerts.shutdown(std::time::Duration::from_secs(2));
            }
            record
        })
        .map_err(|e| Failure::runtime(format!("cannot start the monitor thread: {e}")))?;
    Ok(RunMonitor {
        stop: Some(stop),
        thread,
    })
}

fn write_stdout(text: &str) -> Result<()> {
    match crate::stdio::out(text) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => Err(Failure::runtime(format!("cannot write to stdout: {e}"))),
    }
}
