//! The JSON-lines sink: appends one JSON object per event to a file.
//!
//! The file is opened for each event (events are few: rate-limited, deduplicated), so a log
//! rotation that moves the file away is followed without a signal.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::sink::{Sink, event_json};
use crate::detect::FindingEvent;

/// Appends `{"event": "opened", "finding": {...}, "at": <unix>}` lines to a file.
pub struct JsonlSink {
    path: PathBuf,
}

impl JsonlSink {
    /// Checks that `path` can be opened for appending (creating the file, not its directory).
    pub fn new(path: impl Into<PathBuf>) -> Result<Self, String> {
        let path = path.into();
        open(&path)?;
        Ok(Self { path })
    }

    /// The file written to.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn open(path: &Path) -> Result<File, String> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot open {} for appending: {e}", path.display()))
}

impl Sink for JsonlSink {
    fn name(&self) -> &'static str {
        "jsonl"
    }

    fn deliver(&mut self, event: &FindingEvent) -> Result<(), String> {
        let mut line = event_json(event).to_string();
        line.push('\n');
        let mut file = open(&self.path)?;
        // One write of the whole line (O_APPEND): readers never see half a line from us.
        file.write_all(line.as_bytes())
            .and_then(|()| file.flush())
            .map_err(|e| format!("cannot write {}: {e}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_directory_is_an_error_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no/such/dir/events.jsonl");
        let err = JsonlSink::new(&path).err().unwrap();
        assert!(err.contains(&path.display().to_string()), "{err}");
    }
}
