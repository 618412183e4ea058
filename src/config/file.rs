//! The config file as written: every key optional, values as text, unknown keys refused with
//! their position and the keys that would have been valid. Turning these texts into checked
//! values is `resolve`'s job, so a file and a flag are checked by the same code.

use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize, Serializer};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::ConfigError;

/// A config file, as parsed. Every field is optional: absent means "not set here".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ConfigFile {
    /// Where the file was read from (for error messages and relative paths); `None` when
    /// there was no file.
    #[serde(skip)]
    pub path: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampling: Option<SamplingFile>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvml: Option<NvmlFile>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display: Option<DisplayFile>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub watch: Option<WatchFile>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pick: Option<PickFile>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history: Option<HistoryFile>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotFile>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detect: Option<DetectFile>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alerts: Option<AlertsFile>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daemon: Option<DaemonFile>,
}

/// `[daemon]`: the HTTP server of `gpuwatch daemon`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct DaemonFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_top_n: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_floor: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_event_streams: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_timeout: Option<String>,
}

/// `[sampling]`
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct SamplingFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slow_interval: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hang_timeout: Option<String>,
}

/// `[nvml]`
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct NvmlFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub library: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reinit_backoff_max: Option<String>,
}

/// `[display]`
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct DisplayFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub color: Option<String>,
}

/// `[watch]`
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct WatchFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub specs: Option<Vec<String>>,
}

/// `[pick]`
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PickFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_free: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
}

/// `[history]`
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct HistoryFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
}

/// `[snapshot]`
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct SnapshotFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub show_unattributed_min: Option<String>,
}

/// `[detect]`: percentages, percentage points and MiB per minute are numbers (`90`, `92.5`);
/// durations and sizes are text, as elsewhere.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct DetectFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub near_capacity_warn: Option<Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub near_capacity_critical: Option<Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub near_capacity_headroom: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub near_capacity_hysteresis: Option<Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub near_capacity_min_duration: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filling_window: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filling_horizon: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filling_min_rate: Option<Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filling_critical_used: Option<Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leak_warmup: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leak_sustain: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leak_min_rate: Option<Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_window: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_rise: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_horizon: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_min: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_duration: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exited_grace: Option<String>,
}

/// `[alerts]`: switches are TOML booleans and counts TOML integers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct AlertsFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jsonl: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook_timeout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook_retries: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub desktop: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_severity: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<i64>,
}

/// A number key: read from a TOML integer or float, written as an integer when it is whole
/// (`90`, not `90.0`), so `print-config` reads like the shipped file.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(transparent)]
pub struct Number(pub f64);

impl Serialize for Number {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        /// Whole numbers up to 2^53 are exact both as `i64` and as `f64`.
        const EXACT: f64 = 9_007_199_254_740_992.0;
        let x = self.0;
        if x.fract() == 0.0 && x.abs() <= EXACT {
            s.serialize_i64(x as i64)
        } else {
            s.serialize_f64(x)
        }
    }
}

/// Every section and its keys, in file order. Unknown-key errors list these; a test checks
/// that serde's view of [`ConfigFile`] agrees.
pub const SCHEMA: &[(&str, &[&str])] = &[
    ("sampling", &["interval", "slow-interval", "hang-timeout"]),
    ("nvml", &["library", "reinit-backoff-max"]),
    ("display", &["color"]),
    ("watch", &["specs"]),
    ("pick", &["min-free", "count", "format"]),
    ("history", &["window"]),
    ("snapshot", &["show-unattributed-min"]),
    (
        "detect",
        &[
            "near-capacity-warn",
            "near-capacity-critical",
            "near-capacity-headroom",
            "near-capacity-hysteresis",
            "near-capacity-min-duration",
            "filling-window",
            "filling-horizon",
            "filling-min-rate",
            "filling-critical-used",
            "leak-warmup",
            "leak-sustain",
            "leak-min-rate",
            "external-window",
            "external-rise",
            "external-horizon",
            "idle-min",
            "idle-duration",
            "exited-grace",
        ],
    ),
    (
        "alerts",
        &[
            "log",
            "jsonl",
            "command",
            "webhook",
            "webhook-timeout",
            "webhook-retries",
            "desktop",
            "min-severity",
            "rate-limit",
            "queue",
        ],
    ),
    (
        "daemon",
        &[
            "listen",
            "token-file",
            "metrics-top-n",
            "metrics-floor",
            "max-connections",
            "max-event-streams",
            "idle-timeout",
            "request-timeout",
        ],
    ),
];

impl ConfigFile {
    /// Parses the text of the config file at `path` (the path is only used in messages and to
    /// resolve relative paths in it).
    pub fn parse(text: &str, path: &Path) -> Result<ConfigFile, ConfigError> {
        let doc = DeTable::parse(text).map_err(|e| syntax_error(path, text, None, &e))?;
        check_keys(doc.get_ref(), path, text)?;
        let mut file: ConfigFile = toml::from_str(text).map_err(|e| {
            let key = e.span().and_then(|span| key_at(doc.get_ref(), &span));
            syntax_error(path, text, key, &e)
        })?;
        file.path = Some(path.to_owned());
        Ok(file)
    }

    /// The file path as messages show it.
    pub(crate) fn display_path(&self) -> String {
        self.path
            .as_ref()
            .map_or_else(|| "<none>".to_owned(), |p| p.display().to_string())
    }
}

fn syntax_error(path: &Path, text: &str, key: Option<String>, e: &toml::de::Error) -> ConfigError {
    let (line, column) = e.span().map_or((0, 0), |s| line_column(text, s.start));
    ConfigError::Syntax {
        path: path.to_owned(),
        key,
        line,
        column,
        message: textlimit::excerpt_lines(e.message().trim_end(), textlimit::QUOTE_MAX)
            .into_owned(),
    }
}

/// 1-based line and column (in characters) of byte offset `at` in `text`.
pub(crate) fn line_column(text: &str, at: usize) -> (usize, usize) {
    let at = at.min(text.len());
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
    (line, column)
}

fn check_keys(doc: &DeTable<'_>, path: &Path, text: &str) -> Result<(), ConfigError> {
    let sections: Vec<&'static str> = SCHEMA.iter().map(|(s, _)| *s).collect();
    for (key, value) in doc {
        let name = key.get_ref().as_ref();
        let Some((section, keys)) = SCHEMA.iter().find(|(s, _)| *s == name) else {
            return Err(unknown_key(
                path,
                text,
                key,
                name.to_owned(),
                None,
                &sections,
            ));
        };
        // A section that is not a table is a type error; serde reports it.
        let Some(table) = value.get_ref().as_table() else {
            continue;
        };
        for (key, _) in table {
            let name = key.get_ref().as_ref();
            if !keys.contains(&name) {
                return Err(unknown_key(
                    path,
                    text,
                    key,
                    format!("{section}.{name}"),
                    Some(section),
                    keys,
                ));
            }
        }
    }
    Ok(())
}

fn unknown_key(
    path: &Path,
    text: &str,
    key: &Spanned<toml::de::DeString<'_>>,
    dotted: String,
    section: Option<&'static str>,
    valid: &[&'static str],
) -> ConfigError {
    let (line, column) = line_column(text, key.span().start);
    ConfigError::UnknownKey {
        path: path.to_owned(),
        key: dotted,
        line,
        column,
        section,
        valid: valid.to_vec(),
    }
}

/// The dotted path of the key or value whose span is (or encloses, most tightly) `span`.
fn key_at(doc: &DeTable<'_>, span: &Range<usize>) -> Option<String> {
    fn walk(table: &DeTable<'_>, span: &Range<usize>, prefix: &str) -> Option<String> {
        for (key, value) in table {
            let name = if prefix.is_empty() {
                key.get_ref().to_string()
            } else {
                format!("{prefix}.{}", key.get_ref())
            };
            let encloses = |s: Range<usize>| s.start <= span.start && span.end <= s.end;
            if let DeValue::Table(inner) = value.get_ref()
                && let Some(found) = walk(inner, span, &name)
            {
                return Some(found);
            }
            if encloses(key.span()) || encloses(value.span()) {
                return Some(name);
            }
        }
        None
    }
    walk(doc, span, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_column_counts_from_one() {
        let text = "a\nbc\nd";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 3), (2, 2));
        assert_eq!(line_column(text, 5), (3, 1));
    }

    /// The schema used for unknown-key messages must list exactly what serde accepts.
    #[test]
    fn schema_agrees_with_serde() {
        let top = toml::from_str::<ConfigFile>("bogus = 1").unwrap_err();
        for (section, keys) in SCHEMA {
            assert!(top.message().contains(&format!("`{section}`")), "{top}");
            let err = toml::from_str::<ConfigFile>(&format!("[{section}]\nbogus = 1")).unwrap_err();
            for key in *keys {
                assert!(
                    err.message().contains(&format!("`{key}`")),
                    "{section}: {err}"
                );
            }
            let listed = err.message().matches('`').count() / 2 - 1; // minus `bogus`
            assert_eq!(listed, keys.len(), "{section}: {err}");
        }
        let sections = top.message().matches('`').count() / 2 - 1;
        assert_eq!(sections, SCHEMA.len(), "{top}");
    }
}
