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
use crate::watch::WatchSet;

/// The dashboard on a terminal; elsewhere (a pipe, a file) the snapshot table on every frame.
pub(crate) fn tui(g: &GlobalArgs, config: &Config, args: &crate::cli::TuiArgs) -> Result<u8> {
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
        mem_levels: MemLevels::from(&config.detect),
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
                connect_dashboard(config, &url, options.token.clone())?;
                options.message = Some(format!("back from {url}"));
            }
        }
    }
}

pub(crate) fn dashboard(g: &GlobalArgs, config: &Config) -> Result<u8> {
    if !(std::io::stdout().is_terminal() && std::io::stdin().is_terminal()) {
        return live_table(g, config);
    }
    raise_open_files_limit();
    // The dashboard opens at once; the first frame arrives when the source answers.
    let sampler = crate::app::start_dashboard(g, config)?;
    let watch = watch_set(config, &sampler.info());
    let options = crate::tui::TuiOptions {
        // The dashboard runs on a terminal, so `auto` means colour.
        color: config.display.color != ColorChoice::Never,
        read_only: g.read_only,
        history_window: config.history.window,
        rules: config.detect.clone(),
        alerts: config.alerts.clone(),
        mem_levels: MemLevels::from(&config.detect),
    };
    crate::tui::run(&sampler, watch, &options)
        .map_err(|e| Failure::runtime(format!("the dashboard failed: {e}")))?;
    Ok(0)
}

/// The snapshot table, redrawn on every frame, for output that is not a terminal.
fn live_table(g: &GlobalArgs, config: &Config) -> Result<u8> {
    let rt = runtime()?;
    let sampler = start(g, config, None, false, false)?;
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
