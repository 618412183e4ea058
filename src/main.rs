//! The `gpuwatch` binary: parse, run, map errors to exit codes. Everything else is the library.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = gpuwatch::cli::Cli::parse();
    match gpuwatch::app::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("gpuwatch: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}
