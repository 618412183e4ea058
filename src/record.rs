//! The recording format: versioned JSON lines.
//!
//! Line 1 is a [`Header`] object
//! (`{"format": "gpuwatch-recording", "version": 1, "source": …, "interval_ms": …, "started_at": …}`);
//! every following line is one [`Sample`] as `serde_json` writes it. `docs/recording-format.md`
//! documents every field.
//!
//! - [`Recorder`] writes a recording and flushes after every line, so a recorder that is killed
//!   leaves a file that is valid up to its last complete line.
//! - [`Recording::read`] / [`Recording::parse`] read one back. Errors name the file, the line
//!   (and the column where JSON is involved) and what was expected, and quote at most
//!   [`textlimit::QUOTE_MAX`] characters of the input. An unterminated last line (the recorder
//!   died mid-write) is skipped and counted in [`Recording::truncated_lines`], not an error.
//! - Bounded: the header line may be at most [`MAX_HEADER_LINE`] bytes and a sample line at
//!   most [`MAX_SAMPLE_LINE`]; a longer line is an error, read no further than the cap.
//! - Time: samples are played in file order. A sample taken earlier than the one before it (the
//!   clock was stepped back, e.g. by NTP) is kept: [`Recording::clock_steps`] counts them and one
//!   warning names the first. A sample whose `taken_at` is outside 1970-01-01 to 9999-12-31
//!   ([`crate::times`]) is skipped with a warning, the rest of the recording plays.
//!
//! Versioning: `version` is a major version. Readers reject versions they do not know; within a
//! version, writers may add new optional fields, and readers ignore fields they do not know.

use std::fmt;
use std::io::{self, BufReader, Read, Write};
use std::path::Path;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::model::{Sample, SourceInfo};

/// The value of the header's `format` field.
pub const FORMAT: &str = "gpuwatch-recording";

/// The recording version this build writes and reads.
pub const VERSION: u32 = 1;

/// The longest header line read (a header is a few hundred bytes).
pub const MAX_HEADER_LINE: usize = 1 << 20;

/// The longest sample line read: about 50 000 processes in one sample.
pub const MAX_SAMPLE_LINE: usize = 16 << 20;

/// Line 1 of a recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Always [`FORMAT`].
    pub format: String,
    /// Major version of the format; this build reads and writes [`VERSION`].
    pub version: u32,
    /// The source the samples were taken from (as it described itself while recording).
    pub source: SourceInfo,
    /// The fast-cadence interval the recorder was asked for, milliseconds.
    pub interval_ms: u64,
    /// When the recording started, seconds since the Unix epoch.
    pub started_at: f64,
}

impl Header {
    /// A version-[`VERSION`] header for `source`, recorded at `interval`, starting at
    /// `started_at` (seconds since the Unix epoch).
    pub fn new(source: &SourceInfo, interval: Duration, started_at: f64) -> Self {
        Self {
            format: FORMAT.to_owned(),
            version: VERSION,
            // A replay's place in its own recording means nothing in this one.
            source: SourceInfo {
                span: None,
                ..source.clone()
            },
            interval_ms: u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
            started_at,
        }
    }

    /// The recorded interval as a `Duration`.
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms)
    }
}

/// Writes a recording: the header on creation, then one sample per [`Recorder::write`].
///
/// Every line goes to the writer in one `write_all` followed by a flush, so a killed recorder
/// leaves at most one incomplete (unterminated) last line, which readers skip.
#[derive(Debug)]
pub struct Recorder<W: Write> {
    out: W,
    written: u64,
    last_taken_at: Option<f64>,
    clock_steps: u64,
}

impl<W: Write> Recorder<W> {
    /// Starts a recording of `source` sampled every `interval`, started now.
    pub fn new(writer: W, source: &SourceInfo, interval: Duration) -> io::Result<Self> {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        Self::with_header(writer, &Header::new(source, interval, now))
    }

    /// Starts a recording with the given header (tests, converters). The header must name this
    /// format and version.
    pub fn with_header(writer: W, header: &Header) -> io::Result<Self> {
        if header.format != FORMAT || header.version != VERSION {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "this build writes {FORMAT:?} version {VERSION}, not {:?} version {}",
                    header.format, header.version
                ),
            ));
        }
        let mut recorder = Self {
            out: writer,
            written: 0,
            last_taken_at: None,
            clock_steps: 0,
        };
        recorder.write_line(header)?;
        Ok(recorder)
    }

    /// Appends one sample and flushes it.
    ///
    /// Refuses (with `InvalidInput`, writing nothing) a sample whose `taken_at` is outside the
    /// accepted range ([`crate::times::in_range`]) or whose `collect_seconds` is not finite. A
    /// sample older than the previous one (the clock was stepped back) is written: readers play
    /// in file order; [`Recorder::clock_steps`] counts them.
    pub fn write(&mut self, sample: &Sample) -> io::Result<()> {
        if !crate::times::in_range(sample.taken_at) || !sample.collect_seconds.is_finite() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "sample has a time out of range (taken_at {}, collect_seconds {}): expected {}",
                    sample.taken_at,
                    sample.collect_seconds,
                    crate::times::RANGE
                ),
            ));
        }
        self.write_line(sample)?;
        if self
            .last_taken_at
            .is_some_and(|last| sample.taken_at < last)
        {
            self.clock_steps += 1;
        }
        self.last_taken_at = Some(sample.taken_at);
        self.written += 1;
        Ok(())
    }

    /// How many samples were written with a time before the previous one's.
    pub fn clock_steps(&self) -> u64 {
        self.clock_steps
    }

    /// How many samples were written.
    pub fn samples_written(&self) -> u64 {
        self.written
    }

    /// Flushes and returns the writer.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }

    fn write_line<T: Serialize>(&mut self, value: &T) -> io::Result<()> {
        let mut line = serde_json::to_vec(value).map_err(io::Error::other)?;
        line.push(b'\n');
        self.out.write_all(&line)?;
        self.out.flush()
    }
}

/// A recording read back: its header and samples, in file order.
#[derive(Debug, Clone, PartialEq)]
pub struct Recording {
    /// What the recording was read from (a path, or the name given to [`Recording::parse`]).
    pub name: String,
    pub header: Header,
    pub samples: Vec<Sample>,
    /// Unterminated last lines that did not parse and were skipped (0 or 1): the recorder was
    /// killed while writing.
    pub truncated_lines: usize,
    /// Samples taken earlier than the sample before them (the clock was stepped back): kept,
    /// in file order.
    pub clock_steps: usize,
    /// Samples skipped because their time is out of range.
    pub skipped_samples: usize,
    /// Human-readable notes about what was tolerated while reading: a skipped last line, the
    /// first clock step back, each skipped sample (at most [`MAX_WARNINGS`], then a count).
    pub warnings: Vec<String>,
}

/// At most this many warnings are kept per recording; the rest are counted in the last.
pub const MAX_WARNINGS: usize = 20;

/// Why a recording could not be read. Every variant names the file; those about a line name it
/// (1-based) and, for JSON and schema errors, the column.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    #[error("{file}: cannot read the recording: {source}")]
    Io {
        file: String,
        #[source]
        source: io::Error,
    },
    #[error(
        "{file}: empty file: expected a gpuwatch recording header \
         ({{\"format\": \"{FORMAT}\", \"version\": {VERSION}, …}}) on line 1"
    )]
    Empty { file: String },
    #[error("{file}:{line}: not UTF-8 text: expected {expected}")]
    NotText {
        file: String,
        line: usize,
        expected: Expected,
    },
    #[error("{file}:{line}:{column}: invalid JSON: expected {expected}: {message}")]
    Json {
        file: String,
        line: usize,
        column: usize,
        expected: Expected,
        message: String,
    },
    /// Valid JSON that is not what the line should hold (a missing field, a wrong type).
    #[error("{file}:{line}:{column}: expected {expected}: {message}")]
    Schema {
        file: String,
        line: usize,
        column: usize,
        expected: Expected,
        message: String,
    },
    #[error(
        "{file}:1: missing header: expected {{\"format\": \"{FORMAT}\", \"version\": {VERSION}, …}} \
         on line 1, found {found}"
    )]
    MissingHeader { file: String, found: String },
    #[error("{file}:{line}: line longer than {}: expected {expected} (a line of at most that size)", textlimit::size(*max as u64))]
    LineTooLong {
        file: String,
        line: usize,
        max: usize,
        expected: Expected,
    },
    #[error("{file}:{line}: {message}")]
    Time {
        file: String,
        line: usize,
        message: String,
    },
    #[error("{file}:1: wrong format {found}: expected \"{FORMAT}\"")]
    WrongFormat { file: String, found: String },
    #[error("{file}:1: unsupported recording version {found} (this build reads version {VERSION})")]
    UnsupportedVersion { file: String, found: String },
}

impl RecordingError {
    /// The file the error is about.
    pub fn file(&self) -> &str {
        match self {
            RecordingError::Io { file, .. }
            | RecordingError::Empty { file }
            | RecordingError::NotText { file, .. }
            | RecordingError::Json { file, .. }
            | RecordingError::Schema { file, .. }
            | RecordingError::MissingHeader { file, .. }
            | RecordingError::WrongFormat { file, .. }
            | RecordingError::UnsupportedVersion { file, .. }
            | RecordingError::LineTooLong { file, .. }
            | RecordingError::Time { file, .. } => file,
        }
    }

    /// The 1-based line the error is about, when it is about one.
    pub fn line(&self) -> Option<usize> {
        match self {
            RecordingError::NotText { line, .. }
            | RecordingError::Json { line, .. }
            | RecordingError::Schema { line, .. }
            | RecordingError::LineTooLong { line, .. }
            | RecordingError::Time { line, .. } => Some(*line),
            RecordingError::MissingHeader { .. }
            | RecordingError::WrongFormat { .. }
            | RecordingError::UnsupportedVersion { .. } => Some(1),
            RecordingError::Io { .. } | RecordingError::Empty { .. } => None,
        }
    }

    /// The 1-based column of a JSON error.
    pub fn column(&self) -> Option<usize> {
        match self {
            RecordingError::Json { column, .. } | RecordingError::Schema { column, .. } => {
                Some(*column)
            }
            _ => None,
        }
    }
}

/// What a line was expected to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    Header,
    Sample,
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Expected::Header => "the recording header",
            Expected::Sample => "a sample",
        })
    }
}

impl Recording {
    /// Reads the recording at `path`.
    pub fn read(path: impl AsRef<Path>) -> Result<Self, RecordingError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let file = textlimit::open(path).map_err(|source| RecordingError::Io {
            file: name.clone(),
            source,
        })?;
        Self::parse(file, &name)
    }

    /// Reads a recording from `reader`; `name` is used in errors and warnings.
    pub fn parse(reader: impl Read, name: &str) -> Result<Self, RecordingError> {
        let mut reader = BufReader::new(reader);
        let io_err = |source| RecordingError::Io {
            file: name.to_owned(),
            source,
        };
        let mut buf = Vec::new();
        let mut line_no = 0usize;
        let mut header: Option<Header> = None;
        let mut samples: Vec<Sample> = Vec::new();
        let mut truncated_lines = 0usize;
        let mut tally = Tally::default();

        loop {
            buf.clear();
            let expected = if header.is_none() {
                Expected::Header
            } else {
                Expected::Sample
            };
            let max = match expected {
                Expected::Header => MAX_HEADER_LINE,
                Expected::Sample => MAX_SAMPLE_LINE,
            };
            let (n, too_long) = textlimit::read_line(&mut reader, &mut buf, max).map_err(io_err)?;
            if n == 0 {
                break;
            }
            line_no += 1;
            if too_long {
                return Err(RecordingError::LineTooLong {
                    file: name.to_owned(),
                    line: line_no,
                    max,
                    expected,
                });
            }
            let terminated = buf.last() == Some(&b'\n');
            let Ok(text) = std::str::from_utf8(&buf) else {
                if !terminated && header.is_some() {
                    truncated_lines += 1;
                    tally.warnings.push(truncation_warning(name, line_no));
                    break;
                }
                return Err(RecordingError::NotText {
                    file: name.to_owned(),
                    line: line_no,
                    expected,
                });
            };
            let text = text.trim_end_matches(['\n', '\r']);
            if text.trim().is_empty() {
                continue;
            }
            if header.is_none() {
                header = Some(parse_header(text, name, line_no)?);
                continue;
            }
            match serde_json::from_str::<Sample>(text) {
                Ok(sample) => {
                    tally.take(sample, &mut samples, name, line_no);
                }
                Err(e) if !terminated && e.is_eof() => {
                    // The recorder was killed mid-write: nothing can follow this line.
                    truncated_lines += 1;
                    tally.warnings.push(truncation_warning(name, line_no));
                    break;
                }
                Err(e) => return Err(json_error(name, line_no, expected, &e)),
            }
        }
        if tally.clock_steps > 1 {
            let steps = tally.clock_steps;
            tally.warnings.push(format!(
                "{name}: the clock stepped back {steps} times in all"
            ));
        }

        let Some(header) = header else {
            return Err(RecordingError::Empty {
                file: name.to_owned(),
            });
        };
        Ok(Self {
            name: name.to_owned(),
            header,
            samples,
            truncated_lines,
            clock_steps: tally.clock_steps,
            skipped_samples: tally.skipped_samples,
            warnings: tally.warnings.finish(name),
        })
    }

    /// Seconds from the first sample to the latest one (0 with fewer than two; with clock
    /// steps back, to the latest time recorded).
    pub fn duration_seconds(&self) -> f64 {
        let Some(first) = self.samples.first() else {
            return 0.0;
        };
        self.samples
            .iter()
            .map(|s| s.taken_at - first.taken_at)
            .fold(0.0, f64::max)
    }
}

/// What reading tolerated so far.
#[derive(Default)]
struct Tally {
    previous_line: usize,
    clock_steps: usize,
    skipped_samples: usize,
    warnings: Warnings,
}

impl Tally {
    /// Keeps a sample read from line `line`, or skips it (its time is out of range); counts a
    /// clock step back and warns about the first.
    fn take(&mut self, sample: Sample, samples: &mut Vec<Sample>, name: &str, line: usize) {
        if let Err(e) = crate::times::check("taken_at", sample.taken_at) {
            self.skipped_samples += 1;
            self.warnings
                .push(format!("{name}:{line}: sample skipped: {e}"));
            return;
        }
        if let Some(previous) = samples.last()
            && sample.taken_at < previous.taken_at
        {
            self.clock_steps += 1;
            if self.clock_steps == 1 {
                self.warnings.push(format!(
                    "{name}:{line}: the clock stepped back {:.3} s (taken at {}, after {} on \
                     line {}); played in file order",
                    previous.taken_at - sample.taken_at,
                    sample.taken_at,
                    previous.taken_at,
                    self.previous_line
                ));
            }
        }
        self.previous_line = line;
        samples.push(sample);
    }
}

/// Warnings while reading, keeping at most [`MAX_WARNINGS`] and counting the rest (a recording
/// of a million bad samples does not keep a million sentences).
#[derive(Default)]
struct Warnings {
    kept: Vec<String>,
    more: usize,
}

impl Warnings {
    fn push(&mut self, message: String) {
        if self.kept.len() < MAX_WARNINGS {
            self.kept.push(message);
        } else {
            self.more += 1;
        }
    }

    fn finish(mut self, name: &str) -> Vec<String> {
        if self.more > 0 {
            self.kept
                .push(format!("{name}: and {} more warnings", self.more));
        }
        self.kept
    }
}

fn truncation_warning(name: &str, line: usize) -> String {
    format!("{name}:{line}: incomplete last line skipped (the recorder was stopped mid-write)")
}

fn json_error(
    name: &str,
    line: usize,
    expected: Expected,
    e: &serde_json::Error,
) -> RecordingError {
    // serde_json's own message ends with " at line L column C" (relative to the one line it
    // parsed); keep only the description, the position is reported as the file's.
    let message = e.to_string();
    let message = message
        .rfind(" at line ")
        .map_or(message.as_str(), |i| &message[..i]);
    let message = textlimit::excerpt(message, textlimit::QUOTE_MAX).into_owned();
    let file = name.to_owned();
    let line = line + e.line().saturating_sub(1);
    let column = e.column();
    if e.is_data() {
        RecordingError::Schema {
            file,
            line,
            column,
            expected,
            message,
        }
    } else {
        RecordingError::Json {
            file,
            line,
            column,
            expected,
            message,
        }
    }
}

fn parse_header(text: &str, name: &str, line: usize) -> Result<Header, RecordingError> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| json_error(name, line, Expected::Header, &e))?;
    let Some(object) = value.as_object() else {
        return Err(RecordingError::MissingHeader {
            file: name.to_owned(),
            found: format!("a JSON {}", json_kind(&value)),
        });
    };
    let Some(format) = object.get("format") else {
        let found = if object.contains_key("taken_at") && object.contains_key("gpus") {
            "a sample (the header line is missing)".to_owned()
        } else {
            "an object without a \"format\" field".to_owned()
        };
        return Err(RecordingError::MissingHeader {
            file: name.to_owned(),
            found,
        });
    };
    if format.as_str() != Some(FORMAT) {
        return Err(RecordingError::WrongFormat {
            file: name.to_owned(),
            found: textlimit::excerpt(&format.to_string(), textlimit::QUOTE_MAX).into_owned(),
        });
    }
    match object.get("version") {
        Some(v) if v.as_u64() == Some(u64::from(VERSION)) => {}
        Some(v) => {
            return Err(RecordingError::UnsupportedVersion {
                file: name.to_owned(),
                found: textlimit::excerpt(&v.to_string(), textlimit::QUOTE_MAX).into_owned(),
            });
        }
        None => {
            return Err(RecordingError::UnsupportedVersion {
                file: name.to_owned(),
                found: "(none: the header has no \"version\" field)".to_owned(),
            });
        }
    }
    // Parse again from the text (not the Value) so that a field error has its column.
    let header = serde_json::from_str::<Header>(text)
        .map_err(|e| json_error(name, line, Expected::Header, &e))?;
    crate::times::check("started_at", header.started_at).map_err(|message| {
        RecordingError::Time {
            file: name.to_owned(),
            line,
            message,
        }
    })?;
    Ok(header)
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GpuSample, HostProc, Memory, ProcKind, ProcSample, SourceKind};

    fn source() -> SourceInfo {
        SourceInfo {
            kind: SourceKind::Live,
            host: "box".into(),
            driver_version: Some("580.159.04".into()),
            cuda_version: Some("13.0".into()),
            nvml_version: None,
            detail: "libnvidia-ml.so.1".into(),
            me: None,
            span: None,
        }
    }

    fn sample(t: f64) -> Sample {
        let mut gpu = GpuSample::empty(0, "GPU-x".into());
        gpu.memory = Some(Memory {
            total: 150_754_820_096,
            reserved: Some(644_939_776),
            used: 7_000_000_000,
            free: 143_109_880_320,
        });
        gpu.util_gpu = Some(12.5);
        gpu.power_watts = Some(80.565);
        gpu.processes = vec![ProcSample {
            pid: 431,
            kind: ProcKind::Compute,
            used_bytes: Some(6_985_613_312),
            sm_percent: Some(0.1),
            mem_percent: None,
            gpu_instance: None,
            compute_instance: None,
            host: HostProc::default(),
        }];
        Sample {
            taken_at: t,
            gpus: vec![gpu],
            errors: vec![],
            collect_seconds: 0.003_027,
        }
    }

    fn record(samples: &[Sample]) -> Vec<u8> {
        let header = Header::new(&source(), Duration::from_millis(250), 1_795_977_733.465_999);
        let mut rec = Recorder::with_header(Vec::new(), &header).unwrap();
        for s in samples {
            rec.write(s).unwrap();
        }
        rec.into_inner().unwrap()
    }

    #[test]
    fn round_trip() {
        let samples = vec![
            sample(1_795_977_733.481_804),
            sample(1_795_977_733.719_136),
            sample(1_795_977_733.969_032),
        ];
        let bytes = record(&samples);
        let rec = Recording::parse(bytes.as_slice(), "mem").unwrap();
        assert_eq!(rec.samples, samples);
        assert_eq!(rec.header.source, source());
        assert_eq!(rec.header.interval_ms, 250);
        assert_eq!(rec.truncated_lines, 0);
    }

    #[test]
    fn header_only_is_valid() {
        let rec = Recording::parse(record(&[]).as_slice(), "mem").unwrap();
        assert!(rec.samples.is_empty());
    }

    #[test]
    fn recorder_keeps_a_clock_step_back_and_refuses_bad_times() {
        let header = Header::new(&source(), Duration::from_millis(250), 0.0);
        let mut rec = Recorder::with_header(Vec::new(), &header).unwrap();
        rec.write(&sample(10.0)).unwrap();
        rec.write(&sample(9.0)).unwrap();
        rec.write(&sample(10.0)).unwrap();
        assert_eq!((rec.samples_written(), rec.clock_steps()), (3, 1));
        for bad in [f64::NAN, 1e300, -1.0] {
            let err = rec.write(&sample(bad)).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        }
        assert_eq!(rec.samples_written(), 3);
    }

    #[test]
    fn a_clock_step_back_plays_in_file_order_with_one_warning() {
        let bytes = record(&[
            sample(100.0),
            sample(101.0),
            sample(50.0),
            sample(51.0),
            sample(40.0),
        ]);
        let rec = Recording::parse(bytes.as_slice(), "r").unwrap();
        let times: Vec<f64> = rec.samples.iter().map(|s| s.taken_at).collect();
        assert_eq!(times, [100.0, 101.0, 50.0, 51.0, 40.0]);
        assert_eq!(rec.clock_steps, 2);
        assert_eq!(rec.warnings.len(), 2, "{:?}", rec.warnings);
        assert!(
            rec.warnings[0].starts_with("r:4: the clock stepped back 51.000 s"),
            "{:?}",
            rec.warnings
        );
        assert!((rec.duration_seconds() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_sample_out_of_range_is_skipped_with_a_warning() {
        use std::fmt::Write as _;
        let ok = String::from_utf8(record(&[sample(1.0)])).unwrap();
        let mut text = ok.clone();
        for t in ["1e300", "-5", "253402300800"] {
            let _ = writeln!(
                text,
                "{{\"taken_at\": {t}, \"gpus\": [], \"errors\": [], \"collect_seconds\": 0}}"
            );
        }
        text.push_str(&ok.lines().nth(1).unwrap().replace("1.0", "2.0"));
        text.push('\n');
        let rec = Recording::parse(text.as_bytes(), "r").unwrap();
        assert_eq!(rec.samples.len(), 2);
        assert_eq!(rec.skipped_samples, 3);
        assert!(
            rec.warnings[0].starts_with("r:3: sample skipped: taken_at: 1e300 is out of range"),
            "{:?}",
            rec.warnings
        );
        // Many bad samples keep a bounded list of warnings.
        let mut many = ok.clone();
        for _ in 0..1000 {
            many.push_str(
                "{\"taken_at\": 1e300, \"gpus\": [], \"errors\": [], \"collect_seconds\": 0}\n",
            );
        }
        let rec = Recording::parse(many.as_bytes(), "r").unwrap();
        assert_eq!(rec.warnings.len(), MAX_WARNINGS + 1);
        assert_eq!(rec.warnings[MAX_WARNINGS], "r: and 980 more warnings");
    }

    #[test]
    fn long_lines_are_refused_and_quoted_short() {
        let ok = String::from_utf8(record(&[])).unwrap();
        // Over the cap: an error, read no further than the cap.
        let mut text = ok.clone().into_bytes();
        text.resize(text.len() + MAX_SAMPLE_LINE + 10, b'x');
        let err = Recording::parse(text.as_slice(), "r").unwrap_err();
        assert_eq!(
            err.to_string(),
            "r:2: line longer than 16 MiB: expected a sample (a line of at most that size)"
        );
        let err = Recording::parse(&vec![b' '; MAX_HEADER_LINE + 1][..], "r").unwrap_err();
        assert!(
            matches!(err, RecordingError::LineTooLong { line: 1, .. }),
            "{err}"
        );
        // Under the cap, a long string value: the message quotes a little of it.
        let line = format!(
            "{{\"taken_at\": \"{}\", \"gpus\": []}}\n",
            "y".repeat(1 << 20)
        );
        let err = Recording::parse(format!("{ok}{line}").as_bytes(), "r").unwrap_err();
        let msg = err.to_string();
        assert!(msg.len() < 500, "{} bytes: {}", msg.len(), &msg[..500]);
        assert!(msg.contains("… ("), "{msg}");
        let header = format!(
            "{{\"format\": \"{}\", \"version\": 1}}\n",
            "z".repeat(500_000)
        );
        let msg = Recording::parse(header.as_bytes(), "r")
            .unwrap_err()
            .to_string();
        assert!(msg.len() < 500, "{msg}");
    }

    #[test]
    fn every_line_is_flushed() {
        struct Counting(Vec<u8>, usize);
        impl Write for Counting {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.0.extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                self.1 += 1;
                Ok(())
            }
        }
        let header = Header::new(&source(), Duration::from_millis(250), 0.0);
        let mut rec = Recorder::with_header(Counting(Vec::new(), 0), &header).unwrap();
        rec.write(&sample(1.0)).unwrap();
        rec.write(&sample(2.0)).unwrap();
        let out = rec.into_inner().unwrap();
        assert!(out.1 >= 3);
        assert_eq!(String::from_utf8(out.0).unwrap().lines().count(), 3);
    }

    #[test]
    fn unknown_fields_are_ignored_within_a_version() {
        let bytes = record(&[sample(1.0)]);
        let text = String::from_utf8(bytes).unwrap();
        let text = text
            .replacen(
                "\"interval_ms\"",
                "\"future_field\":[1,2],\"interval_ms\"",
                1,
            )
            .replacen("\"taken_at\"", "\"future\":{\"x\":1},\"taken_at\"", 1);
        let rec = Recording::parse(text.as_bytes(), "mem").unwrap();
        assert_eq!(rec.samples, vec![sample(1.0)]);
    }

    #[test]
    fn json_error_has_line_and_column() {
        let mut text = String::from_utf8(record(&[sample(1.0)])).unwrap();
        text.push_str("{\"taken_at\": 2.0, \"gpus\": [}\n");
        let err = Recording::parse(text.as_bytes(), "x.jsonl").unwrap_err();
        assert_eq!(err.line(), Some(3));
        assert_eq!(err.column(), Some(28));
        let msg = err.to_string();
        assert!(
            msg.starts_with("x.jsonl:3:28: invalid JSON: expected a sample"),
            "{msg}"
        );
    }

    #[test]
    fn unterminated_bad_header_is_an_error() {
        let err = Recording::parse(&b"{\"format\": \"gpuwatch-rec"[..], "x").unwrap_err();
        assert!(matches!(err, RecordingError::Json { line: 1, .. }), "{err}");
    }

    #[test]
    fn unterminated_last_line_with_a_real_error_is_an_error() {
        let mut text = String::from_utf8(record(&[sample(1.0)])).unwrap();
        text.push_str("{\"taken_at\": \"soon\", \"gpus\": []}");
        let err = Recording::parse(text.as_bytes(), "x").unwrap_err();
        assert_eq!(err.line(), Some(3), "{err}");
    }

    #[test]
    fn schema_errors_are_not_called_invalid_json() {
        let ok = String::from_utf8(record(&[])).unwrap();
        let text = format!("{ok}{{\"taken_at\": 3.0}}\n");
        let err = Recording::parse(text.as_bytes(), "r.jsonl").unwrap_err();
        assert!(
            matches!(err, RecordingError::Schema { line: 2, .. }),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "r.jsonl:2:17: expected a sample: missing field `gpus`"
        );
    }

    #[test]
    fn empty_and_blank_files_are_errors() {
        for input in [&b""[..], &b"\n\n"[..]] {
            let err = Recording::parse(input, "e.jsonl").unwrap_err();
            assert!(matches!(err, RecordingError::Empty { .. }), "{err}");
            assert!(err.to_string().starts_with("e.jsonl: empty file"), "{err}");
        }
    }

    #[test]
    fn not_utf8_names_the_line() {
        let mut bytes = record(&[sample(1.0)]);
        bytes.extend_from_slice(b"\xff\xfe\n");
        let err = Recording::parse(bytes.as_slice(), "x").unwrap_err();
        assert!(
            matches!(err, RecordingError::NotText { line: 3, .. }),
            "{err}"
        );
    }
}
