//! `gpuwatch explain [FILE|-]`: the diagnosis of a saved log.

use crate::app::{Failure, Result, write_stdout};
use crate::cli::ExplainArgs;

/// `gpuwatch explain [FILE|-]`: the diagnosis of a saved log, from the text alone.
pub(crate) fn explain(args: &ExplainArgs) -> Result<u8> {
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
        let text = serde_json::to_string_pretty(&crate::triage::explain_json(&diagnosis))
            .map_err(|e| Failure::runtime(format!("cannot write JSON: {e}")))?;
        write_stdout(&format!("{text}\n"))?;
    } else {
        write_stdout(&crate::triage::render_text(&diagnosis))?;
    }
    Ok(0)
}
