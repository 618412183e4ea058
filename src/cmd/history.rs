//! `gpuwatch history who|peaks`: questions to the daemon's local history file.

use crate::app::{Failure, Result, now_secs, write_stdout};

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

fn fmt_time(t: f64) -> String {
    crate::times::format_rfc3339(t)
}

fn opt_bytes(v: Option<u64>) -> String {
    v.map_or_else(|| "n/a".to_string(), crate::output::fmt_bytes)
}

pub(crate) fn history(cmd: &crate::cli::HistoryCommand) -> Result<u8> {
    use crate::cli::HistoryCommand;
    use crate::text::{clean, clean_or};
    use std::fmt::Write as _;
    let now = now_secs();
    match cmd {
        HistoryCommand::Who(args) => {
            let at = crate::times::parse_time("--at", &args.at, now).map_err(Failure::setup)?;
            let store = open_history(&args.file)?;
            let gpu = store
                .resolve("--gpu", &args.gpu)
                .map_err(Failure::runtime)?
                .map_err(Failure::setup)?;
            let who = store.who(&gpu, at).map_err(Failure::runtime)?;
            let Some(who) = who else {
                return Err(Failure::runtime(format!(
                    "no samples of GPU {gpu} at {} in '{}'",
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
