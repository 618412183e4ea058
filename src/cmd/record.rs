//! `gpuwatch record FILE`: the frames as a JSONL recording, for `--replay`.

use std::path::Path;

use crate::app::{Failure, Result, first_frame, runtime, start};
use crate::cli::{GlobalArgs, RecordArgs};
use crate::config::Config;

pub(crate) fn record(g: &GlobalArgs, config: &Config, args: &RecordArgs) -> Result<u8> {
    let file = open_new(&args.file, args.force)?;
    let rt = runtime()?;
    let sampler = start(g, config, None, false, false)?;
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
