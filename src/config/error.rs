//! Config errors. Every message says where the bad value came from (a file and its key, or a
//! flag), what was wrong, and what would have been accepted.

use std::fmt;
use std::path::PathBuf;

use super::ValueError;

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A command-line flag, e.g. `--interval`.
    Flag(&'static str),
    /// A key in a config file.
    File { path: String, key: String },
    /// A built-in default.
    Default { key: String },
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Flag(flag) => f.write_str(flag),
            Origin::File { path, key } => write!(f, "{key} in config file '{path}'"),
            Origin::Default { key } => write!(f, "default {key}"),
        }
    }
}

/// Why a config could not be loaded or resolved.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `--config PATH` named a file that does not exist.
    #[error("config file '{}' does not exist", path.display())]
    NotFound { path: PathBuf },
    #[error("cannot read config file '{}': {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Not TOML, or a value of the wrong TOML type.
    #[error(
        "config file '{}': {}line {line}, column {column}: {message}",
        path.display(),
        key.as_ref().map(|k| format!("{k}: ")).unwrap_or_default()
    )]
    Syntax {
        path: PathBuf,
        /// The dotted key the error is about, when known.
        key: Option<String>,
        line: usize,
        column: usize,
        message: String,
    },
    /// A key or section the config does not have.
    #[error(
        "config file '{}': unknown {} '{}' at line {line}, column {column} (valid {}: {})",
        path.display(),
        if section.is_some() { "key" } else { "section" },
        textlimit::excerpt(key, textlimit::QUOTE_MAX),
        section.map_or_else(|| "sections".to_owned(), |s| format!("keys in [{s}]")),
        valid.join(", ")
    )]
    UnknownKey {
        path: PathBuf,
        /// Dotted, e.g. `sampling.intervall`.
        key: String,
        line: usize,
        column: usize,
        /// The section the key is in; `None` for an unknown section.
        section: Option<&'static str>,
        valid: Vec<&'static str>,
    },
    /// A value that does not parse or is out of range.
    #[error("{}", invalid_message(origin, value, problem))]
    Invalid {
        origin: Origin,
        /// The value as written where it came from: TOML syntax for a file key (`"5ms"`, `0`),
        /// the argument text for a flag.
        value: String,
        problem: Box<ValueError>,
    },
    /// Two values that are each fine but do not fit together.
    #[error("{message}")]
    Conflict { message: String },
}

fn invalid_message(origin: &Origin, value: &str, problem: &ValueError) -> String {
    let value = textlimit::excerpt(value, textlimit::QUOTE_MAX);
    match origin {
        Origin::File { path, key } => {
            format!("config file '{path}': {key} = {value} is {problem}")
        }
        Origin::Flag(flag) => format!("{flag} '{value}' is {problem}"),
        Origin::Default { key } => format!("default {key} = '{value}' is {problem}"),
    }
}
