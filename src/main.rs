//! The `gpuwatch` binary: parse, run, map errors to exit codes. Everything else is the library.

#![deny(clippy::disallowed_macros)]

use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = gpuwatch::cli::Cli::parse_checked();
    match gpuwatch::app::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            // Messages quote files, names and remote answers: never raw on the terminal.
            gpuwatch::eprintln_safe!(
                "gpuwatch: {}",
                gpuwatch::text::clean_lines(&failure.message)
            );
            ExitCode::from(failure.code)
        }
    }
}
