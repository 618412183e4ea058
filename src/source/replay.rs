//! A recording played back as a [`GpuSource`].
//!
//! [`ReplaySource`] hands out the recorded samples one by one, exactly as recorded (processes,
//! values and errors unchanged, `taken_at` is the recorded time), and paces them with
//! [`GpuSource::next_delay`]: the recorded gap to the next sample divided by the speed.
//!
//! Clock steps: samples play in file order. Where the recorded time goes back (the clock was
//! stepped, e.g. by NTP), the replay waits one recorded interval, as if the step were not there;
//! `taken_at` stays as recorded (consumers such as [`crate::history::History`] cope with a
//! step back), and [`Recording`] warns once.
//!
//! Looping: the first pass is untouched. Each later pass shifts `taken_at` forward by one loop
//! period (the replayed span plus one recorded interval), so that consumers keep seeing time go
//! forward; everything else stays as recorded.

use std::path::Path;
use std::time::Duration;

use crate::model::{RecordingSpan, Sample, SourceInfo, SourceKind};
use crate::record::{Header, Recording, RecordingError};
use crate::source::{CallProbe, GpuSource};

/// How to play a recording back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplayOptions {
    /// 1.0 plays at the recorded pace, 2.0 twice as fast; 0 or infinity as fast as possible.
    pub speed: f64,
    /// Start this many seconds after the first sample (skipping the samples before).
    pub start_at: Option<f64>,
    /// Start over after the last sample instead of finishing.
    pub looped: bool,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self {
            speed: 1.0,
            start_at: None,
            looped: false,
        }
    }
}

/// Why a replay could not start.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Recording(#[from] RecordingError),
    #[error("{file}: {message}")]
    Options { file: String, message: String },
}

/// Plays a [`Recording`] back.
#[derive(Debug)]
pub struct ReplaySource {
    info: SourceInfo,
    header: Header,
    samples: Vec<Sample>,
    /// Index of the first replayed sample (after `start_at`).
    first: usize,
    /// Index of the sample the next `sample()` returns.
    next: usize,
    /// Completed passes (looping only).
    loops: u32,
    /// Seconds added to `taken_at` per completed pass.
    loop_period: f64,
    /// Gap between the last sample and the first replayed one when looping, seconds.
    wrap_gap: f64,
    speed: f64,
    looped: bool,
    returned_any: bool,
    truncated_lines: usize,
    warnings: Vec<String>,
}

impl ReplaySource {
    /// Reads the recording at `path` and prepares to replay it.
    pub fn open(path: impl AsRef<Path>, options: ReplayOptions) -> Result<Self, ReplayError> {
        Self::from_recording(Recording::read(path)?, options)
    }

    /// Replays a recording already read.
    pub fn from_recording(
        recording: Recording,
        options: ReplayOptions,
    ) -> Result<Self, ReplayError> {
        let bad = |message: String| ReplayError::Options {
            file: recording.name.clone(),
            message,
        };
        if options.speed.is_nan() || options.speed < 0.0 {
            return Err(bad(format!(
                "replay speed must be positive (0 or infinity: as fast as possible), not {}",
                options.speed
            )));
        }
        let first = match options.start_at {
            None => 0,
            Some(start) if !start.is_finite() || start < 0.0 => {
                return Err(bad(format!(
                    "start offset must be 0 or more seconds, not {start}"
                )));
            }
            Some(start) => {
                let origin = recording.samples.first().map_or(0.0, |s| s.taken_at);
                // A little slack so that "start at 1.25 s" includes a sample recorded at
                // 1.2499999 s after the first.
                let index = recording
                    .samples
                    .iter()
                    .position(|s| s.taken_at - origin >= start - 1e-6);
                match index {
                    Some(i) => i,
                    None if recording.samples.is_empty() && start == 0.0 => 0,
                    None => {
                        return Err(bad(format!(
                            "start offset {start} s is past the end of the recording ({:.3} s long)",
                            recording.duration_seconds()
                        )));
                    }
                }
            }
        };

        // To the latest time of the pass (not the last sample's: the clock may have stepped
        // back), so that the next pass starts after everything in this one.
        let span = recording.samples.get(first).map_or(0.0, |a| {
            recording.samples[first..]
                .iter()
                .map(|s| s.taken_at - a.taken_at)
                .fold(0.0, f64::max)
        });
        let replayed = recording.samples.len().saturating_sub(first);
        let wrap_gap = if recording.header.interval_ms > 0 {
            recording.header.interval_ms as f64 / 1000.0
        } else if replayed > 1 {
            span / (replayed - 1) as f64
        } else {
            0.0
        };

        let detail = Path::new(&recording.name).file_name().map_or_else(
            || recording.name.clone(),
            |n| n.to_string_lossy().into_owned(),
        );
        let recorded = &recording.header.source;
        let info = SourceInfo {
            kind: SourceKind::Replay,
            host: recorded.host.clone(),
            driver_version: recorded.driver_version.clone(),
            cuda_version: recorded.cuda_version.clone(),
            nvml_version: recorded.nvml_version.clone(),
            detail,
            me: recorded.me.clone(),
            span: recording.samples.first().map(|a| {
                let start = a.taken_at;
                RecordingSpan {
                    start,
                    end: recording
                        .samples
                        .iter()
                        .map(|s| s.taken_at)
                        .fold(start, f64::max),
                    first: recording.samples.get(first).map_or(start, |s| s.taken_at),
                    period: options.looped.then_some(span + wrap_gap),
                }
            }),
        };
        Ok(Self {
            info,
            header: recording.header,
            samples: recording.samples,
            first,
            next: first,
            loops: 0,
            loop_period: span + wrap_gap,
            wrap_gap,
            speed: options.speed,
            looped: options.looped,
            returned_any: false,
            truncated_lines: recording.truncated_lines,
            warnings: recording.warnings,
        })
    }

    /// The recording's header (its `source` is the source as recorded, e.g. `live`).
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Number of samples replayed per pass (after `start_at`).
    pub fn len(&self) -> usize {
        self.samples.len() - self.first
    }

    /// Whether there is no sample to replay.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many samples of the current pass were handed out.
    pub fn position(&self) -> usize {
        self.next - self.first
    }

    /// Completed passes (only grows when looping).
    pub fn loops(&self) -> u32 {
        self.loops
    }

    /// What was tolerated while reading the recording (for the user to see once).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Incomplete last lines skipped while reading the recording.
    pub fn truncated_lines(&self) -> usize {
        self.truncated_lines
    }

    fn as_fast_as_possible(&self) -> bool {
        self.speed == 0.0 || self.speed.is_infinite()
    }

    fn scaled(&self, seconds: f64) -> Duration {
        if self.as_fast_as_possible() {
            return Duration::ZERO;
        }
        // At most MAX_DURATION (8 000 years): callers add it to an `Instant`, which
        // `Duration::MAX` would overflow (`--speed 1e-300`, a crafted `interval_ms`).
        Duration::try_from_secs_f64((seconds / self.speed).max(0.0))
            .unwrap_or(crate::times::MAX_DURATION)
            .min(crate::times::MAX_DURATION)
    }
}

impl GpuSource for ReplaySource {
    fn info(&self) -> SourceInfo {
        self.info.clone()
    }

    /// The next recorded sample. After the end of a recording that does not loop, the last
    /// sample again (the sampler is expected to stop at [`GpuSource::finished`]); a recording
    /// with no samples gives an empty sample at its start time.
    fn sample(&mut self, _probe: &CallProbe) -> Sample {
        if self.next >= self.samples.len() {
            if self.looped && !self.is_empty() {
                self.loops += 1;
                self.next = self.first;
            } else {
                return self.samples.last().cloned().unwrap_or_else(|| Sample {
                    taken_at: self.header.started_at,
                    gpus: Vec::new(),
                    errors: Vec::new(),
                    collect_seconds: 0.0,
                });
            }
        }
        let mut sample = self.samples[self.next].clone();
        if self.loops > 0 {
            sample.taken_at += f64::from(self.loops) * self.loop_period;
        }
        self.next += 1;
        self.returned_any = true;
        sample
    }

    fn wants_host_enrichment(&self) -> bool {
        false
    }

    /// With a start (`--at`): the recorded samples of the `span` before it, at most one per
    /// `step`, as recorded. Started at the beginning, a recording has no past.
    fn past(&self, span: Duration, step: Duration) -> Vec<Sample> {
        let Some(start) = self.samples.get(self.first).map(|s| s.taken_at) else {
            return Vec::new();
        };
        let from = start - span.as_secs_f64();
        let step = step.as_secs_f64();
        let mut out: Vec<Sample> = Vec::new();
        for s in &self.samples[..self.first] {
            if s.taken_at < from || s.taken_at >= start {
                continue;
            }
            if out
                .last()
                .is_some_and(|last| s.taken_at < last.taken_at + step - 1e-6)
            {
                continue;
            }
            out.push(s.clone());
        }
        out
    }

    /// Before the first sample: zero. Then the recorded gap from the sample just returned to the
    /// next one, divided by the speed; zero once finished.
    fn next_delay(&self) -> Option<Duration> {
        if !self.returned_any || self.finished() {
            return Some(Duration::ZERO);
        }
        let gap = match (self.samples.get(self.next - 1), self.samples.get(self.next)) {
            (Some(prev), Some(next)) if next.taken_at >= prev.taken_at => {
                next.taken_at - prev.taken_at
            }
            // The clock stepped back here, or the last sample of a looping replay: one
            // interval.
            _ => self.wrap_gap,
        };
        Some(self.scaled(gap))
    }

    fn finished(&self) -> bool {
        if self.looped {
            self.is_empty()
        } else {
            self.next >= self.samples.len()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::GpuSample;
    use crate::record::{FORMAT, VERSION};

    fn recording(times: &[f64]) -> Recording {
        Recording {
            name: "/some/dir/run.recording.jsonl".into(),
            header: Header {
                format: FORMAT.into(),
                version: VERSION,
                source: SourceInfo {
                    kind: SourceKind::Live,
                    host: "h".into(),
                    driver_version: Some("1".into()),
                    cuda_version: None,
                    nvml_version: None,
                    detail: "nvml".into(),
                    me: None,
                    span: None,
                },
                interval_ms: 250,
                started_at: 99.0,
            },
            samples: times
                .iter()
                .map(|&t| Sample {
                    taken_at: t,
                    gpus: vec![GpuSample::empty(0, "GPU-0".into())],
                    errors: vec![],
                    collect_seconds: 0.001,
                })
                .collect(),
            truncated_lines: 0,
            clock_steps: 0,
            skipped_samples: 0,
            warnings: vec![],
        }
    }

    fn opts(speed: f64) -> ReplayOptions {
        ReplayOptions {
            speed,
            ..ReplayOptions::default()
        }
    }

    #[test]
    fn a_replay_started_later_has_the_span_before_as_its_past_one_sample_a_step() {
        // 4 Hz from 0 to 100 s; started at 90 s.
        let times: Vec<f64> = (0..=400).map(|i| f64::from(i) * 0.25).collect();
        let src = ReplaySource::from_recording(
            recording(&times),
            ReplayOptions {
                start_at: Some(90.0),
                ..opts(0.0)
            },
        )
        .expect("valid");
        let past = src.past(Duration::from_secs(30), Duration::from_secs(1));
        let at: Vec<f64> = past.iter().map(|s| s.taken_at).collect();
        assert_eq!(at.len(), 30, "{at:?}");
        assert!(
            (at[0] - 60.0).abs() < 1e-9 && (at[29] - 89.0).abs() < 1e-9,
            "{at:?}"
        );
        // From the beginning there is no past.
        let src = ReplaySource::from_recording(recording(&times), opts(0.0)).expect("valid");
        assert!(
            src.past(Duration::from_secs(30), Duration::from_secs(1))
                .is_empty()
        );
    }

    #[test]
    fn delays_stay_addable_to_an_instant() {
        let mut rec = recording(&[100.0, 2.0e11]);
        rec.header.interval_ms = u64::MAX;
        for (speed, looped) in [(1e-300, false), (f64::MIN_POSITIVE, true), (1.0, true)] {
            let mut src = ReplaySource::from_recording(
                rec.clone(),
                ReplayOptions {
                    speed,
                    start_at: None,
                    looped,
                },
            )
            .unwrap();
            let probe = CallProbe::default();
            for _ in 0..4 {
                src.sample(&probe);
                let d = src.next_delay().unwrap();
                assert!(std::time::Instant::now().checked_add(d).is_some(), "{d:?}");
            }
        }
    }

    #[test]
    fn info_is_replay_named_after_the_file() {
        let src = ReplaySource::from_recording(recording(&[100.0]), opts(1.0)).unwrap();
        let info = src.info();
        assert_eq!(info.kind, SourceKind::Replay);
        assert_eq!(info.detail, "run.recording.jsonl");
        assert_eq!(info.host, "h");
        assert!(!src.wants_host_enrichment());
    }

    /// The source says where its samples lie in the recording, for the header's position: the
    /// whole recording's first and latest times, the first replayed, the loop period.
    #[test]
    fn info_carries_the_recordings_span() {
        let rec = recording(&[100.0, 101.0, 103.0, 102.0]);
        let src = ReplaySource::from_recording(rec.clone(), opts(1.0)).unwrap();
        assert_eq!(
            src.info().span,
            Some(RecordingSpan {
                start: 100.0,
                end: 103.0,
                first: 100.0,
                period: None
            })
        );
        let looped = ReplaySource::from_recording(
            rec,
            ReplayOptions {
                start_at: Some(1.0),
                looped: true,
                ..opts(1.0)
            },
        )
        .unwrap();
        let span = looped.info().span.expect("span");
        assert_eq!((span.start, span.end, span.first), (100.0, 103.0, 101.0));
        assert!(span.period.is_some_and(|p| p > 2.0), "{span:?}");
    }

    #[test]
    fn delays_follow_the_recording() {
        let probe = CallProbe::default();
        let mut src =
            ReplaySource::from_recording(recording(&[100.0, 100.5, 101.5]), opts(1.0)).unwrap();
        assert_eq!(src.next_delay(), Some(Duration::ZERO));
        assert!((src.sample(&probe).taken_at - 100.0).abs() < f64::EPSILON);
        assert_eq!(src.next_delay(), Some(Duration::from_millis(500)));
        src.sample(&probe);
        assert_eq!(src.next_delay(), Some(Duration::from_secs(1)));
        assert!(!src.finished());
        src.sample(&probe);
        assert!(src.finished());
        assert_eq!(src.next_delay(), Some(Duration::ZERO));
        // Past the end: the last sample again.
        assert!((src.sample(&probe).taken_at - 101.5).abs() < f64::EPSILON);
    }

    #[test]
    fn speed_zero_and_infinity_do_not_wait() {
        for speed in [0.0, f64::INFINITY] {
            let probe = CallProbe::default();
            let mut src =
                ReplaySource::from_recording(recording(&[1.0, 2.0]), opts(speed)).unwrap();
            src.sample(&probe);
            assert_eq!(src.next_delay(), Some(Duration::ZERO));
        }
    }

    #[test]
    fn looping_moves_time_forward() {
        let probe = CallProbe::default();
        let mut src = ReplaySource::from_recording(
            recording(&[10.0, 11.0, 12.0]),
            ReplayOptions {
                speed: 1.0,
                start_at: Some(1.0),
                looped: true,
            },
        )
        .unwrap();
        assert_eq!(src.len(), 2);
        let times: Vec<f64> = (0..5).map(|_| src.sample(&probe).taken_at).collect();
        // span 1 s + one 0.25 s interval per loop
        assert_eq!(times, vec![11.0, 12.0, 12.25, 13.25, 13.5]);
        assert_eq!(src.loops(), 2);
        assert!(!src.finished());
    }

    #[test]
    fn wrap_delay_is_one_interval() {
        let probe = CallProbe::default();
        let mut src = ReplaySource::from_recording(
            recording(&[10.0, 11.0]),
            ReplayOptions {
                speed: 1.0,
                start_at: None,
                looped: true,
            },
        )
        .unwrap();
        src.sample(&probe);
        src.sample(&probe);
        assert_eq!(src.next_delay(), Some(Duration::from_millis(250)));
    }

    #[test]
    fn bad_options_are_refused() {
        for o in [
            opts(-1.0),
            opts(f64::NAN),
            ReplayOptions {
                start_at: Some(-1.0),
                ..ReplayOptions::default()
            },
            ReplayOptions {
                start_at: Some(50.0),
                ..ReplayOptions::default()
            },
        ] {
            let err = ReplaySource::from_recording(recording(&[1.0, 2.0]), o).unwrap_err();
            assert!(
                err.to_string()
                    .starts_with("/some/dir/run.recording.jsonl: "),
                "{err}"
            );
        }
    }

    #[test]
    fn empty_recording_is_finished_at_once() {
        let probe = CallProbe::default();
        for looped in [false, true] {
            let mut src = ReplaySource::from_recording(
                recording(&[]),
                ReplayOptions {
                    looped,
                    ..ReplayOptions::default()
                },
            )
            .unwrap();
            assert!(src.finished());
            let s = src.sample(&probe);
            assert!(s.gpus.is_empty());
            assert!((s.taken_at - 99.0).abs() < f64::EPSILON);
        }
    }
}
