//! Writing to stdout and stderr without ever panicking.
//!
//! `print!`, `println!`, `eprint!` and `eprintln!` panic when the write fails: a full disk
//! under a redirected log (`2>/dev/full`, `daemon 2>>log` on a full file system), a closed
//! pipe. A diagnostic must never end the program (`run` would lose the job's exit code, the
//! daemon would stop serving), so every message goes through here: [`err`] and the
//! [`crate::eprintln_safe!`] macro drop what cannot be written; [`out`] returns the error, for
//! the results a command exists to print. Clippy's `disallowed_macros` (see `clippy.toml`)
//! keeps the panicking macros out of the library and the binary.

use std::io::Write;

/// Writes `text` to stderr in one write; a failure is dropped (there is nowhere left to
/// report it).
pub fn err(text: &str) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(text.as_bytes());
    let _ = e.flush();
}

/// Writes the formatted line (a newline appended) to stderr; see [`err`]. Used by
/// [`crate::eprintln_safe!`]. Log lines quote paths, store and sink errors, names: every one
/// is shown through [`crate::text::clean_lines`] here, so no call site can forget it.
pub fn err_line(args: std::fmt::Arguments<'_>) {
    let mut line = crate::text::clean_lines(&args.to_string()).into_owned();
    line.push('\n');
    err(&line);
}

/// Writes `text` to stdout and flushes it, returning the error (`BrokenPipe` when the reader
/// went away, as with `| head`).
pub fn out(text: &str) -> std::io::Result<()> {
    let mut o = std::io::stdout().lock();
    o.write_all(text.as_bytes())?;
    o.flush()
}

/// `eprintln!` that never panics: the line is written to stderr in one write, or dropped when
/// stderr can't take it (see [`crate::stdio`]).
#[macro_export]
macro_rules! eprintln_safe {
    ($($arg:tt)*) => {
        $crate::stdio::err_line(::std::format_args!($($arg)*))
    };
}
