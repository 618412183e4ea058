//! A remote daemon as a frame source: `gpuwatch tui --connect http://host:9400`.
//!
//! A thread reads the daemon's `/api/v1/events` stream (Server-Sent Events: one `frame` event
//! per sample, the `snapshot --json` schema) and publishes each frame on a watch channel, the
//! same kind the local sampler publishes on, so the dashboard draws a remote host exactly as
//! it draws this one. When the stream breaks (the daemon restarts, the network drops, the
//! daemon stops sending) the thread reconnects with exponential backoff (0.5 s doubling to
//! 30 s, back to the start after a frame arrives) and publishes the link's state, which the
//! dashboard shows as "disconnected since …".

use std::io::BufReader;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use crate::model::Frame;
use crate::output::json::Snapshot;
use crate::sampler::FrameRx;

/// First reconnection delay; it doubles up to [`BACKOFF_MAX`].
pub const BACKOFF_START: Duration = Duration::from_millis(500);
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// No byte from the daemon for this long and the connection is given up (a daemon sends a
/// frame every interval, at most 60 s).
const READ_IDLE: Duration = Duration::from_secs(75);
/// One SSE event larger than this is refused (a frame of 8 GPUs × 64 processes is ~60 KiB).
const MAX_EVENT_BYTES: usize = 16 << 20;

/// The state of the connection to the daemon.
#[derive(Debug, Clone, PartialEq)]
pub enum Link {
    /// Connecting for the first time.
    Connecting,
    /// Frames are arriving (since this moment).
    Connected { since: SystemTime },
    /// The stream broke (at `since`; `error` says why); the next try is at `retry_at`.
    Disconnected {
        since: SystemTime,
        error: String,
        retry_at: Instant,
        /// Tries since the link was last up.
        attempts: u32,
    },
}

/// A connection to a daemon; dropping it stops the reader thread (at its next wake-up).
pub struct Remote {
    pub url: String,
    frames: FrameRx,
    link: watch::Receiver<Link>,
    stop: Arc<AtomicBool>,
}

impl Remote {
    pub fn frames(&self) -> FrameRx {
        self.frames.clone()
    }

    pub fn link(&self) -> watch::Receiver<Link> {
        self.link.clone()
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// The daemon's base URL, checked: `http://host:port` (a trailing `/` is dropped; a bare
/// `host:port` gets `http://`).
pub fn base_url(text: &str) -> Result<String, String> {
    let t = text.trim();
    let url = if t.contains("://") {
        t.to_string()
    } else {
        format!("http://{t}")
    };
    let url = url.trim_end_matches('/').to_string();
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .filter(|rest| !rest.contains("//"))
        .ok_or_else(|| {
            format!("'{text}' is not a daemon address (expected http://HOST:PORT, e.g. http://gpu-07:9400)")
        })?;
    if rest.is_empty() || rest.contains(char::is_whitespace) {
        return Err(format!(
            "'{text}' is not a daemon address (expected http://HOST:PORT, e.g. http://gpu-07:9400)"
        ));
    }
    Ok(url)
}

/// Starts reading `base`'s event stream.
pub fn connect(base: &str, token: Option<String>) -> Result<Remote, String> {
    let url = base_url(base)?;
    let (frames_tx, frames) = watch::channel(None);
    let (link_tx, link) = watch::channel(Link::Connecting);
    let stop = Arc::new(AtomicBool::new(false));
    let thread_stop = Arc::clone(&stop);
    let events = format!("{url}/api/v1/events");
    std::thread::Builder::new()
        .name("gpuwatch-remote".into())
        .spawn(move || {
            reader(
                &events,
                token.as_deref(),
                &frames_tx,
                &link_tx,
                &thread_stop,
            );
        })
        .map_err(|e| format!("cannot start the connection thread: {e}"))?;
    Ok(Remote {
        url,
        frames,
        link,
        stop,
    })
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(5)))
        .timeout_recv_response(Some(Duration::from_secs(10)))
        .timeout_per_read(Some(READ_IDLE))
        .build()
        .into()
}

/// Reads the stream, reconnecting with backoff, until `stop` or until nobody listens.
fn reader(
    url: &str,
    token: Option<&str>,
    frames: &watch::Sender<Option<Arc<Frame>>>,
    link: &watch::Sender<Link>,
    stop: &AtomicBool,
) {
    let agent = agent();
    let mut backoff = BACKOFF_START;
    let mut attempts = 0u32;
    let mut down_since: Option<SystemTime> = None;
    let mut seq = 0u64;
    loop {
        if stop.load(Ordering::Acquire) || frames.is_closed() {
            return;
        }
        let mut got_frame = false;
        let error = match stream(&agent, url, token, &mut |mut frame| {
            if !got_frame {
                got_frame = true;
                let _ = link.send(Link::Connected {
                    since: SystemTime::now(),
                });
            }
            seq += 1;
            frame.seq = seq;
            frames.send(Some(Arc::new(frame))).is_ok() && !stop.load(Ordering::Acquire)
        }) {
            Ok(()) => return,
            Err(e) => e,
        };
        if got_frame {
            backoff = BACKOFF_START;
            attempts = 0;
            down_since = None;
        }
        attempts += 1;
        let since = *down_since.get_or_insert_with(SystemTime::now);
        let retry_at = Instant::now() + backoff;
        let _ = link.send(Link::Disconnected {
            since,
            error,
            retry_at,
            attempts,
        });
        // Sleep in short steps so a stop is noticed.
        while Instant::now() < retry_at {
            if stop.load(Ordering::Acquire) || frames.is_closed() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100).min(retry_at - Instant::now()));
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// One connection: `Ok` when the consumer asked to stop, `Err(why)` when the stream broke.
fn stream(
    agent: &ureq::Agent,
    url: &str,
    token: Option<&str>,
    on_frame: &mut dyn FnMut(Frame) -> bool,
) -> Result<(), String> {
    let mut req = agent.get(url).header("Accept", "text/event-stream");
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    let resp = req.call().map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    if status == 401 {
        return Err(
            "the daemon wants a bearer token (give --token-file PATH) or refused this one".into(),
        );
    }
    if status != 200 {
        return Err(format!("the daemon answered HTTP {status} for {url}"));
    }
    let mut body = BufReader::new(resp.into_body().into_reader());
    let mut parser = SseParser::default();
    let mut line = Vec::new();
    loop {
        line.clear();
        // Bounded: a longer line is an error, not split into a second "line" that the parser
        // would read as a field of its own.
        let (n, too_long) = textlimit::read_line(&mut body, &mut line, MAX_EVENT_BYTES)
            .map_err(|e| format!("the stream broke: {e}"))?;
        if n == 0 {
            return Err("the daemon closed the stream".into());
        }
        if too_long {
            return Err(format!(
                "the daemon sent a line longer than {}",
                textlimit::size(MAX_EVENT_BYTES as u64)
            ));
        }
        let text = String::from_utf8_lossy(&line);
        match parser.line(&text) {
            Ok(Some(event)) if event.name == "frame" => {
                if !on_frame(frame_from_json(&event.data)?) {
                    return Ok(());
                }
            }
            Ok(_) => {}
            Err(e) => return Err(e),
        }
    }
}

/// A frame from one `snapshot --json` document, published now (its age on the daemon
/// counted in).
pub fn frame_from_json(text: &str) -> Result<Frame, String> {
    let snap: Snapshot = serde_json::from_str(text).map_err(|e| {
        format!(
            "the daemon sent a frame this version cannot read: {}",
            textlimit::excerpt(&e.to_string(), textlimit::QUOTE_MAX)
        )
    })?;
    crate::times::check("taken_at_unix", snap.taken_at_unix)
        .map_err(|e| format!("the daemon sent a frame with a bad time: {e}"))?;
    if snap.schema_version != crate::output::json::SCHEMA_VERSION {
        return Err(format!(
            "the daemon speaks snapshot schema {} and this gpuwatch reads {}: upgrade one of them",
            snap.schema_version,
            crate::output::json::SCHEMA_VERSION
        ));
    }
    let (info, sample) = snap.to_model();
    let age = Duration::from_secs_f64(snap.age_seconds.clamp(0.0, 3600.0));
    let now = Instant::now();
    Ok(Frame {
        seq: 0,
        source: Arc::new(info),
        sample,
        published: now.checked_sub(age).unwrap_or(now),
        interval: snap
            .interval_seconds
            .filter(|s| s.is_finite() && *s > 0.0)
            .map_or(Duration::from_secs(1), |s| {
                Duration::from_secs_f64(s.min(3600.0))
            }),
        // The daemon's host is not this one, and its snapshot carries no host summary.
        host: None,
    })
}

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub name: String,
    pub data: String,
}

/// The event-stream format, a line at a time (`event:`, `data:` lines, a blank line ends an
/// event, `:` starts a comment; `\r\n` or `\n`).
#[derive(Debug, Default)]
pub struct SseParser {
    name: String,
    data: String,
    has_data: bool,
}

impl SseParser {
    /// Feeds one line; returns the event it completes.
    pub fn line(&mut self, line: &str) -> Result<Option<SseEvent>, String> {
        let line = line.trim_end_matches('\n').trim_end_matches('\r');
        if line.is_empty() {
            if !self.has_data {
                self.name.clear();
                return Ok(None);
            }
            let event = SseEvent {
                name: if self.name.is_empty() {
                    "message".into()
                } else {
                    std::mem::take(&mut self.name)
                },
                data: std::mem::take(&mut self.data),
            };
            self.has_data = false;
            return Ok(Some(event));
        }
        if line.starts_with(':') {
            return Ok(None);
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => value.clone_into(&mut self.name),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
                if self.data.len() > MAX_EVENT_BYTES {
                    return Err(format!(
                        "the daemon sent an event over {} MiB",
                        MAX_EVENT_BYTES >> 20
                    ));
                }
            }
            _ => {}
        }
        Ok(None)
    }
}

/// What the header says about the link ("connected to …", "DISCONNECTED since …").
pub fn describe(link: &Link, url: &str, now: Instant) -> (String, bool) {
    match link {
        Link::Connecting => (format!("connecting to {url}…"), false),
        Link::Connected { .. } => (url.to_string(), false),
        Link::Disconnected {
            since,
            error,
            retry_at,
            ..
        } => {
            let at = humantime::format_rfc3339_seconds(*since).to_string();
            let clock = at.get(11..19).unwrap_or(&at).to_string();
            (
                format!(
                    "DISCONNECTED since {clock} UTC from {url}: {}; retrying in {:.0}s",
                    crate::text::clean(error),
                    retry_at.saturating_duration_since(now).as_secs_f64().ceil()
                ),
                true,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_lines_make_events() {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        for line in [
            ": a comment\n",
            "event: frame\r\n",
            "data: {\"a\":\n",
            "data:1}\n",
            "\n",
            "\n",
            "data: plain\n",
            "\r\n",
        ] {
            if let Some(e) = p.line(line).unwrap() {
                out.push(e);
            }
        }
        assert_eq!(
            out,
            vec![
                SseEvent {
                    name: "frame".into(),
                    data: "{\"a\":\n1}".into()
                },
                SseEvent {
                    name: "message".into(),
                    data: "plain".into()
                }
            ]
        );
    }

    #[test]
    fn addresses_are_checked() {
        assert_eq!(base_url("gpu-07:9400").unwrap(), "http://gpu-07:9400");
        assert_eq!(
            base_url("http://gpu-07:9400/").unwrap(),
            "http://gpu-07:9400"
        );
        assert!(
            base_url("ftp://x")
                .unwrap_err()
                .contains("expected http://HOST:PORT")
        );
        assert!(base_url("http://").is_err());
    }

    #[test]
    fn a_snapshot_document_becomes_the_frame_it_was_made_from() {
        use crate::model::{GpuSample, HostProc, Memory, ProcKind, ProcSample, Sample};
        let mut g = GpuSample::empty(3, "GPU-1234".into());
        g.name = Some("NVIDIA H200".into());
        g.memory = Some(Memory {
            total: 150 << 30,
            reserved: Some(1 << 29),
            used: 40 << 30,
            free: 110 << 30,
        });
        g.util_gpu = Some(87.0);
        g.temperature_c = Some(61);
        g.slow.energy_joules = Some(12.5);
        g.processes = vec![ProcSample {
            pid: 4242,
            kind: ProcKind::Both,
            used_bytes: Some(39 << 30),
            sm_percent: None,
            mem_percent: Some(3.0),
            gpu_instance: None,
            compute_instance: None,
            host: HostProc {
                visible: true,
                name: Some("python".into()),
                command: Some("python train.py".into()),
                user: Some("ana".into()),
                ppid: Some(1),
                start_time: Some(1_764_000_000),
                ..HostProc::default()
            },
        }];
        let sample = Sample {
            taken_at: 1_764_000_123.5,
            gpus: vec![g],
            errors: vec![],
            collect_seconds: 0.0,
        };
        let frame = Frame {
            seq: 9,
            source: Arc::new(crate::model::SourceInfo {
                kind: crate::model::SourceKind::Live,
                host: "gpu-07".into(),
                driver_version: Some("580.1".into()),
                cuda_version: None,
                nvml_version: None,
                detail: "libnvidia-ml.so.1".into(),
                me: None,
                span: None,
            }),
            sample: sample.clone(),
            published: Instant::now(),
            interval: Duration::from_millis(250),
            host: None,
        };
        let doc = crate::output::json::snapshot(&frame, &[], &|_| false, 1_764_000_200);
        let text = serde_json::to_string(&doc).unwrap();
        let back = frame_from_json(&text).unwrap();
        assert_eq!(back.sample, sample);
        assert_eq!(back.source.host, "gpu-07");
        assert_eq!(back.source.kind, crate::model::SourceKind::Remote);
        assert_eq!(back.source.driver_version.as_deref(), Some("580.1"));
        assert_eq!(back.interval, Duration::from_millis(250));
        // Another schema version is refused with a sentence, not misread.
        let other = text.replace("\"schema_version\":1", "\"schema_version\":2");
        assert!(frame_from_json(&other).unwrap_err().contains("schema 2"));
        assert!(frame_from_json("{").unwrap_err().contains("cannot read"));
    }
}
