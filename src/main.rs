//! The `gpuwatch` binary: parse, run, map errors to exit codes. Everything else is the library.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = gpuwatch::cli::Cli::parse();
    match gpuwatch::app::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            // Messages quote files, names and remote answers: never raw on the terminal.
            eprintln!(
                "gpuwatch: {}",
                gpuwatch::text::clean_lines(&failure.message)
            );
            ExitCode::from(failure.code)
        }
    }
}
