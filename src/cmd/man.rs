//! `gpuwatch man [--dir DIR]`: the man pages, from the command-line definition.

use clap::CommandFactory;

use crate::app::{Failure, Result, write_stdout};
use crate::cli::{Cli, ManArgs};

pub(crate) fn man(_args: &ManArgs) -> Result<u8> {
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut out)
        .map_err(|e| Failure::runtime(format!("cannot render the man page: {e}")))?;
    write_stdout(&String::from_utf8_lossy(&out))?;
    Ok(0)
}
