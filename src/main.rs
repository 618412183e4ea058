//! The `gpuwatch` binary: parse, run, map errors to exit codes. Everything else is the library.

#![deny(clippy::disallowed_macros)]

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = gpuwatch::cli::Cli::parse();
    match gpuwatch::app::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            gpuwatch::eprintln_safe!("gpuwatch: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}
