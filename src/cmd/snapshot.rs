//! `gpuwatch snapshot`: one frame as the table or as JSON; the table's options, shared with
//! the dashboard's plain-output fallbacks.

use std::io::IsTerminal;

use crate::app::{
    Failure, Result, first_frame, mine_of, now_unix, runtime, start, watch_set, write_stdout,
};
use crate::cli::{GlobalArgs, SnapshotArgs};
use crate::config::{ColorChoice, Config};
use crate::gpuref::GpuRef;
use crate::model::Frame;
use crate::output::{json, table};

pub(crate) fn snapshot(g: &GlobalArgs, config: &Config, args: &SnapshotArgs) -> Result<u8> {
    if args.at.is_some() && g.replay.is_none() {
        return Err(Failure::setup(
            "--at picks a moment of a recording: use it with --replay FILE",
        ));
    }
    let rt = runtime()?;
    let sampler = start(g, config, args.at, false, false)?;
    let frame = first_frame(&rt, &sampler, config)?;
    let gpus = select_gpus(&frame, &args.gpu)?;
    let set = watch_set(config, &frame.source);
    let mine = mine_of(&set, &frame);
    let watched = |p: &crate::model::ProcSample| mine.contains(&p.pid);
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

/// Resolves `--gpu` values to NVML indices (a MIG device names its GPU).
fn select_gpus(frame: &Frame, wanted: &[GpuRef]) -> Result<Vec<u32>> {
    let devices = crate::gpuref::devices(&frame.sample);
    wanted
        .iter()
        .map(|w| {
            crate::gpuref::resolve("--gpu", w, &devices, "here")
                .map(|d| d.index.unwrap_or_default())
                .map_err(Failure::setup)
        })
        .collect()
}

pub(crate) fn table_options(config: &Config, gpus: Vec<u32>) -> table::TableOptions {
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
        mem_levels: crate::detect::MemLevels::from(&config.detect),
        ..table::TableOptions::default()
    }
}

fn color(config: &Config) -> bool {
    match config.display.color {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => std::io::stdout().is_terminal(),
    }
}
