//! `gpuwatch` / `gpuwatch tui`: the dashboard (local, `--connect` to a daemon, or the
//! `--prometheus` cluster overview), or the plain table when the output is not a terminal.

use std::io::IsTerminal;

use crate::app::{
    Failure, Result, first_frame, mine_of, now_unix, runtime, start, watch_set, write_stdout,
};
use crate::cli::GlobalArgs;
use crate::cmd::snapshot::table_options;
use crate::config::{ColorChoice, Config};
use crate::detect::MemLevels;
use crate::model::ProcSample;
use crate::output::table;
use crate::tui::scope::{GpuChoice, ViewScope};
use crate::watch::WatchSet;

/// The dashboard on a terminal; elsewhere (a pipe, a file) the snapshot table on every frame.
pub(crate) fn tui(g: &GlobalArgs, config: &Config, args: &crate::cli::TuiArgs) -> Result<u8> {
    let remote = args.connect.as_deref().map(|_| "--connect");
    let remote = remote.or(args.prometheus.as_deref().map(|_| "--prometheus"));
    if let (Some(flag), Some(local)) = (remote, g.simulated()) {
        return Err(Failure::setup(format!(
            "{flag} shows GPUs from elsewhere: {local} does not apply to it"
        )));
    }
    let scope = scope(args)?;
    let token = args
        .token_file
        .as_deref()
        .map(crate::serve::read_token_file)
        .transpose()
        .map_err(Failure::setup)?;
    if let Some(url) = &args.connect {
        return connect_dashboard(config, url, token, &scope);
    }
    if let Some(prometheus) = &args.prometheus {
        return cluster_overview(config, prometheus, token);
    }
    if args.at.is_some() && g.replay.is_none() {
        return Err(Failure::setup(
            "tui --at SECONDS is a moment of a recording: it needs --replay FILE",
        ));
    }
    dashboard(g, config, scope, args.at)
}

/// The longest `CUDA_VISIBLE_DEVICES` read (a few hundred bytes name 64 MIG devices).
const CUDA_VISIBLE_MAX: usize = 64 << 10;

/// `--gpu`, `--only-visible`, `--user`: what the dashboard shows.
fn scope(args: &crate::cli::TuiArgs) -> Result<ViewScope> {
    let scoped = !args.gpu.is_empty() || args.only_visible || args.user.is_some();
    if scoped && args.prometheus.is_some() {
        return Err(Failure::setup(
            "--gpu, --only-visible and --user limit the dashboard of one host, not the cluster \
             overview (--prometheus); its Enter opens a host's dashboard",
        ));
    }
    if args.only_visible && args.connect.is_some() {
        return Err(Failure::setup(
            "--only-visible reads this shell's CUDA_VISIBLE_DEVICES, which names this host's \
             GPUs, not those of the daemon --connect shows: use --gpu",
        ));
    }
    let gpus = if args.only_visible {
        let visible = std::env::var_os("CUDA_VISIBLE_DEVICES").ok_or_else(|| {
            Failure::setup(
                "--only-visible shows the GPUs CUDA_VISIBLE_DEVICES names, and it is not set \
                 (a CUDA program started here sees every GPU: leave --only-visible out)",
            )
        })?;
        let visible = visible
            .into_string()
            .ok()
            .filter(|v| v.len() <= CUDA_VISIBLE_MAX)
            .ok_or_else(|| {
                Failure::setup(
                    "CUDA_VISIBLE_DEVICES is not a list of GPUs (expected indices or UUIDs, \
                     comma-separated, in UTF-8 and at most 64 KiB)",
                )
            })?;
        let order = std::env::var_os("CUDA_DEVICE_ORDER").map(|o| o.to_string_lossy().into_owned());
        GpuChoice::CudaVisible { visible, order }
    } else if args.gpu.is_empty() {
        GpuChoice::All
    } else {
        GpuChoice::Named(args.gpu.clone())
    };
    Ok(ViewScope::new(gpus, args.user.clone()))
}

/// A scope needs the dashboard: the plain table of a pipe shows every GPU and process.
fn no_scope_off_terminal(scope: &ViewScope) -> Result<()> {
    match scope.label() {
        None => Ok(()),
        Some(label) => Err(Failure::setup(format!(
            "the output is not a terminal, so there is no dashboard to limit to {label}: \
             gpuwatch snapshot --gpu prints chosen GPUs for a script"
        ))),
    }
}

/// `tui --connect URL`: a remote daemon's GPUs in the full dashboard (or, when the output is
/// not a terminal, its snapshot table once).
fn connect_dashboard(
    config: &Config,
    url: &str,
    token: Option<String>,
    scope: &ViewScope,
) -> Result<u8> {
    let remote = crate::remote::connect(url, token).map_err(Failure::setup)?;
    let watch = WatchSet::new(
        config.watch.specs.clone(),
        crate::source::procinfo::current_user(),
    );
    if !(std::io::stdout().is_terminal() && std::io::stdin().is_terminal()) {
        no_scope_off_terminal(scope)?;
        return remote_table(config, &remote, &watch);
    }
    let options = crate::tui::TuiOptions {
        color: config.display.color != ColorChoice::Never,
        read_only: true,
        history_window: config.history.window,
        rules: config.detect.clone(),
        alerts: config.alerts.clone(),
        mem_levels: MemLevels::from(&config.detect),
        scope: scope.clone(),
    };
    let no_call = || None;
    let no_focus = |_| {};
    crate::tui::run_feed(
        crate::tui::Feed {
            frames: remote.frames(),
            in_flight: &no_call,
            focus: &no_focus,
            link: Some((remote.url.clone(), remote.link())),
            past: (Vec::new(), None),
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
        mem_levels: MemLevels::from(&config.detect),
    };
    loop {
        match cluster::run(options.clone())
            .map_err(|e| Failure::runtime(format!("the cluster overview failed: {e}")))?
        {
            ClusterExit::Quit => return Ok(0),
            ClusterExit::DrillDown(url) => {
                // The host's full dashboard; quitting it comes back to the overview.
                connect_dashboard(config, &url, options.token.clone(), &ViewScope::default())?;
                options.message = Some(format!("back from {url}"));
            }
        }
    }
}

/// The dashboard; `start_at`: where a replay starts (`tui --at`), its past primed.
pub(crate) fn dashboard(
    g: &GlobalArgs,
    config: &Config,
    scope: ViewScope,
    start_at: Option<f64>,
) -> Result<u8> {
    if !(std::io::stdout().is_terminal() && std::io::stdin().is_terminal()) {
        no_scope_off_terminal(&scope)?;
        return live_table(g, config, start_at);
    }
    raise_open_files_limit();
    // The dashboard opens at once; the first frame arrives when the source answers.
    let sampler = crate::app::start_dashboard(g, config, start_at)?;
    let watch = watch_set(config, &sampler.info());
    let options = crate::tui::TuiOptions {
        // The dashboard runs on a terminal, so `auto` means colour.
        color: config.display.color != ColorChoice::Never,
        read_only: g.read_only,
        history_window: config.history.window,
        rules: config.detect.clone(),
        alerts: config.alerts.clone(),
        mem_levels: MemLevels::from(&config.detect),
        scope,
    };
    crate::tui::run(&sampler, watch, &options)
        .map_err(|e| Failure::runtime(format!("the dashboard failed: {e}")))?;
    Ok(0)
}

/// The snapshot table, redrawn on every frame, for output that is not a terminal.
fn live_table(g: &GlobalArgs, config: &Config, start_at: Option<f64>) -> Result<u8> {
    let rt = runtime()?;
    let sampler = start(g, config, start_at, false, false)?;
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

/// Raises the soft open-files limit towards the hard one (at most 65536), before the sampler
/// starts: the dashboard keeps the `/proc` files of the processes it shows open between
/// refreshes (a quarter of the soft limit, `src/source/procinfo.rs`), and a terminal's common
/// soft limit of 1024 would leave most of 400 processes uncached. It never uses `select(2)`.
/// A limit that cannot be raised is left as it is.
fn raise_open_files_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let want = limit.maximum.unwrap_or(u64::MAX).min(65_536);
    if limit.current.is_some_and(|soft| soft < want) {
        let raised = rustix::process::Rlimit {
            current: Some(want),
            maximum: limit.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::info!(error = %e, "open-files limit not raised");
        }
    }
}
