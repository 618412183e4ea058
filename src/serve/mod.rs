//! The daemon's HTTP side: `/metrics` (OpenMetrics to clients that ask for it, the classic
//! Prometheus text format to the rest) and the JSON API (`/api/v1/snapshot`,
//! `/api/v1/findings`, `/api/v1/health`, `/api/v1/events` as SSE). Connections, timeouts and
//! their limits: `conn.rs`.
//!
//! The daemon loop owns the pipeline and publishes what the server needs into [`Shared`]
//! after every frame; handlers only read it. Every response is built from the latest frame,
//! so the series of a process that exited disappear with it.

mod conn;
mod history;
pub mod metrics;

pub use conn::{HttpStats, Limits, open_files_limit};

/// At most this many `/api/v1/history` queries run at once; more get 429.
const HISTORY_QUERIES_AT_ONCE: usize = 2;
/// Events kept for the event streams (shared by all of them): a client further behind is
/// dropped.
const EVENTS_QUEUED: usize = 16;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::sync::broadcast;

use crate::cli::DaemonArgs;
use crate::config::DaemonConfig;
use crate::detect::{Finding, FindingEvent};
use crate::model::Frame;

/// How the server is set up (from the command line).
#[derive(Debug, Clone)]
pub struct Options {
    pub listen: SocketAddr,
    pub token: Option<String>,
    pub top_n: usize,
    pub floor: u64,
    /// The history file `/api/v1/history` reads (the daemon sets it when it records one).
    pub history: Option<std::path::PathBuf>,
    /// Connections, event streams and timeouts, as in effect.
    pub limits: Limits,
}

/// A token file larger than this is not a token file.
const TOKEN_FILE_MAX: u64 = 4096;

/// The bearer token in a token file: one line of printable ASCII without spaces (RFC 6750's
/// `b64token` and more), surrounding whitespace trimmed. An empty file, a second line, a space
/// or control character inside, a file over 4 KiB, or anything but a regular file (a FIFO
/// would block the start) is an error naming the file. The daemon serves it, `tui --connect`
/// and `tui --prometheus` send it.
pub fn read_token_file(path: &std::path::Path) -> Result<String, String> {
    let name = path.display();
    // Bounded, regular files only, never blocking on a FIFO: the one reader of small files
    // from outside.
    let text = textlimit::read_file(path, TOKEN_FILE_MAX)
        .map_err(|e| format!("cannot read the token file '{name}': {e}"))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!("the token file '{name}' is empty"));
    }
    if let Some(c) = token.chars().find(|c| !c.is_ascii_graphic()) {
        let what = if c == '\n' || c == '\r' {
            "more than one line".to_string()
        } else {
            format!("the character {c:?} inside the token")
        };
        return Err(format!(
            "the token file '{name}' holds {what}: expected one line with the token alone \
             (printable ASCII, no spaces)"
        ));
    }
    Ok(token.to_string())
}

impl Options {
    /// The command line over `[daemon]`: a non-loopback address needs a token or
    /// `--insecure-listen`.
    pub fn from_args(args: &DaemonArgs, config: &DaemonConfig) -> Result<Self, String> {
        let listen: SocketAddr = args.listen.unwrap_or(config.listen);
        let token = args
            .token_file
            .as_ref()
            .or(config.token_file.as_ref())
            .map(|p| read_token_file(p))
            .transpose()?;
        if !listen.ip().is_loopback() && token.is_none() && !args.insecure_listen {
            return Err(format!(
                "refusing to listen on {listen}: it is not a loopback address and no token is \
                 configured; give --token-file PATH, or --insecure-listen to serve anyone who \
                 can reach it"
            ));
        }
        Ok(Self {
            listen,
            token,
            top_n: args.metrics_top_n.unwrap_or(config.metrics_top_n),
            floor: args
                .metrics_floor
                .map_or(config.metrics_floor, |b| b.as_u64()),
            history: None,
            limits: Limits::from(config).effective(open_files_limit()),
        })
    }
}

/// What the daemon loop publishes for the server.
#[derive(Debug, Default)]
pub struct Published {
    pub latest: Option<Arc<Frame>>,
    /// PIDs the watch set matches in the latest frame.
    pub watched: HashSet<u32>,
    /// The findings open now, most severe first.
    pub findings: Vec<Finding>,
    /// Per GPU UUID: growth (bytes/s) and time to full (s), where known.
    pub growth: HashMap<String, (Option<f64>, Option<f64>)>,
    /// Failed calls since start, by call name.
    pub collect_errors: BTreeMap<String, u64>,
    /// The driver calls the sampler is in now, longest first (a hung driver shows here
    /// before any frame does).
    pub in_flight: Vec<crate::source::InFlight>,
}

/// Shared between the daemon loop and the handlers.
#[derive(Debug)]
pub struct Shared {
    pub state: Mutex<Published>,
    pub events: broadcast::Sender<Event>,
    pub options: Options,
    /// History queries run on blocking threads; this bounds how many at once.
    history_slots: Arc<tokio::sync::Semaphore>,
    pub http: HttpStats,
}

/// What `/api/v1/events` streams.
#[derive(Debug, Clone)]
pub enum Event {
    /// A snapshot JSON document.
    Frame(Arc<str>),
    /// A `FindingEvent` JSON document.
    Finding(Arc<str>),
}

impl Shared {
    pub fn new(options: Options) -> Arc<Self> {
        let (events, _) = broadcast::channel(EVENTS_QUEUED);
        Arc::new(Self {
            state: Mutex::new(Published::default()),
            events,
            options,
            history_slots: Arc::new(tokio::sync::Semaphore::new(HISTORY_QUERIES_AT_ONCE)),
            http: HttpStats::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Published> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Called by the daemon loop after each frame (only serialises when someone listens).
    pub fn publish_frame(&self, frame: &Frame) {
        if self.events.receiver_count() > 0 {
            let state = self.lock();
            let json = snapshot_json(frame, &state.watched);
            drop(state);
            let _ = self.events.send(Event::Frame(json.into()));
        }
    }

    pub fn publish_finding(&self, event: &FindingEvent) {
        if self.events.receiver_count() > 0
            && let Ok(json) = serde_json::to_string(event)
        {
            let _ = self.events.send(Event::Finding(json.into()));
        }
    }

    pub fn update(&self, f: impl FnOnce(&mut Published)) {
        f(&mut self.lock());
    }
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn snapshot_json(frame: &Frame, watched: &HashSet<u32>) -> String {
    let is_watched = |p: &crate::model::ProcSample| watched.contains(&p.pid);
    let snap = crate::output::json::snapshot(frame, &[], &is_watched, now_unix());
    serde_json::to_string(&snap).unwrap_or_else(|_| "{}".to_string())
}

/// Binds the address (synchronously, so a failure is reported before the daemon starts).
pub fn bind(addr: SocketAddr) -> Result<std::net::TcpListener, String> {
    let listener =
        std::net::TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    Ok(listener)
}

/// Serves until the runtime stops (call from inside the runtime).
pub fn spawn(listener: std::net::TcpListener, shared: Arc<Shared>) -> Result<(), String> {
    let listener =
        tokio::net::TcpListener::from_std(listener).map_err(|e| format!("cannot listen: {e}"))?;
    let app = router(Arc::clone(&shared));
    tokio::spawn(conn::serve(listener, app, shared));
    Ok(())
}

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/api/v1/snapshot", get(snapshot_handler))
        .route("/api/v1/findings", get(findings_handler))
        .route("/api/v1/health", get(health_handler))
        .route("/api/v1/events", get(events_handler))
        .route("/api/v1/history", get(history::handler))
        .fallback(not_found)
        .with_state(shared)
}

pub(crate) fn json_response(status: StatusCode, body: String) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

pub(crate) fn error(status: StatusCode, message: &str) -> Response {
    json_response(status, serde_json::json!({ "error": message }).to_string())
}

/// Unknown paths answer 404, but only to a client with the token (401 otherwise).
async fn not_found(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Some(r) = reject(&shared, &headers) {
        return r;
    }
    error(StatusCode::NOT_FOUND, "no such endpoint")
}

/// A 401 response unless the request carries the configured bearer token.
pub(crate) fn reject(shared: &Shared, headers: &HeaderMap) -> Option<Response> {
    let Some(token) = &shared.options.token else {
        return None;
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_credentials);
    // Compared without stopping at the first difference.
    let ok = given.is_some_and(|g| {
        g.len() == token.len()
            && g.bytes()
                .zip(token.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    });
    if ok {
        None
    } else {
        let mut r = error(StatusCode::UNAUTHORIZED, "a valid bearer token is required");
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        Some(r)
    }
}

/// The credentials of a `Bearer` authorization (the scheme is case-insensitive, RFC 7235
/// §2.1; one or more spaces follow it).
fn bearer_credentials(value: &str) -> Option<&str> {
    let (scheme, rest) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| rest.trim_start_matches(' '))
}

async fn metrics_handler(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Some(r) = reject(&shared, &headers) {
        return r;
    }
    let text = {
        let state = shared.lock();
        metrics::render(&state, &shared.options, &shared.http)
    };
    // OpenMetrics to those who ask for it (Prometheus does), the classic text format to the
    // rest (promtool, curl).
    let openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/openmetrics-text"));
    match text {
        Ok(text) if openmetrics => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            )],
            text,
        )
            .into_response(),
        Ok(text) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            )],
            metrics::to_prometheus_text(&text),
        )
            .into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e),
    }
}

async fn snapshot_handler(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Some(r) = reject(&shared, &headers) {
        return r;
    }
    let state = shared.lock();
    match &state.latest {
        Some(frame) => json_response(StatusCode::OK, snapshot_json(frame, &state.watched)),
        None => error(StatusCode::SERVICE_UNAVAILABLE, "no sample yet"),
    }
}

async fn findings_handler(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Some(r) = reject(&shared, &headers) {
        return r;
    }
    let body = serde_json::to_string(&shared.lock().findings).unwrap_or_else(|_| "[]".into());
    json_response(StatusCode::OK, body)
}

async fn health_handler(State(shared): State<Arc<Shared>>) -> Response {
    let state = shared.lock();
    let now = std::time::Instant::now();
    // The calls stuck now: what a hung driver is doing, named.
    let stuck: Vec<serde_json::Value> = state
        .in_flight
        .iter()
        .filter(|c| c.is_stuck(now))
        .map(|c| {
            serde_json::json!({
                "call": c.call,
                "gpu": c.gpu,
                "seconds": c.elapsed(now).as_secs_f64(),
                "detail": c.describe(now),
            })
        })
        .collect();
    let body = match &state.latest {
        Some(frame) => serde_json::json!({
            "status": if frame.is_stale() { "stale" } else { "ok" },
            "age_seconds": frame.age().as_secs_f64(),
            "source": frame.source.kind.to_string(),
            "stuck_calls": stuck,
        }),
        None => serde_json::json!({
            "status": "stale",
            "age_seconds": null,
            "source": null,
            "stuck_calls": stuck,
        }),
    };
    json_response(StatusCode::OK, body.to_string())
}

async fn events_handler(
    State(shared): State<Arc<Shared>>,
    mark: Option<axum::Extension<conn::StreamMark>>,
    headers: HeaderMap,
) -> Response {
    if let Some(r) = reject(&shared, &headers) {
        return r;
    }
    let Some(slot) = StreamSlot::take(&shared) else {
        shared
            .http
            .rejected_event_streams
            .fetch_add(1, Ordering::Relaxed);
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many event streams; try again later",
        );
    };
    // The connection is not idle (evictable) while the stream is open, and is again after.
    let held = mark.map(|axum::Extension(m)| m.hold());
    let slot = (slot, held);
    let rx = shared.events.subscribe();
    // A new client gets the latest frame at once, then every frame and finding as they come.
    let first = {
        let state = shared.lock();
        state
            .latest
            .as_ref()
            .map(|f| sse("frame", &snapshot_json(f, &state.watched)))
    };
    let stream =
        futures_util::stream::unfold((first, rx, slot), |(first, mut rx, slot)| async move {
            if let Some(chunk) = first {
                return Some((Ok::<_, std::convert::Infallible>(chunk), (None, rx, slot)));
            }
            match rx.recv().await {
                Ok(Event::Frame(json)) => Some((Ok(sse("frame", &json)), (None, rx, slot))),
                Ok(Event::Finding(json)) => Some((Ok(sse("finding", &json)), (None, rx, slot))),
                // A client that fell behind by more than the queue is dropped, not buffered for.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    slot.0.0.http.dropped_lagged.fetch_add(1, Ordering::Relaxed);
                    None
                }
                Err(broadcast::error::RecvError::Closed) => None,
            }
        });
    (
        StatusCode::OK,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

/// One of the event streams' places, given back when the stream ends.
struct StreamSlot(Arc<Shared>);

impl StreamSlot {
    fn take(shared: &Arc<Shared>) -> Option<Self> {
        let max = shared.options.limits.max_event_streams as u64;
        shared
            .http
            .event_streams
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Self(Arc::clone(shared)))
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.http.event_streams.fetch_sub(1, Ordering::AcqRel);
    }
}

fn sse(event: &str, data: &str) -> String {
    // The JSON is on one line, so one `data:` line carries it.
    format!("event: {event}\ndata: {data}\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        for v in ["Bearer abc", "bearer abc", "BEARER abc", "bEaReR   abc"] {
            assert_eq!(bearer_credentials(v), Some("abc"), "{v}");
        }
        for v in ["Basic abc", "Bearerabc", "Bearer", "Token abc"] {
            assert_eq!(bearer_credentials(v), None, "{v}");
        }
    }

    #[test]
    fn token_files_hold_one_token() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |text: &[u8]| {
            let p = dir.path().join("token");
            std::fs::write(&p, text).expect("write");
            p
        };
        assert_eq!(
            read_token_file(&write(b"  s3cret\n")).as_deref(),
            Ok("s3cret")
        );
        for (text, needle) in [
            (&b"abc\ndef\n"[..], "more than one line"),
            (b"abc def", "' ' inside the token"),
            (b"abc\x1b[2Jdef", "inside the token"),
            (b"\n\n", "is empty"),
            (b"\xff\xfe", "not UTF-8 text"),
        ] {
            let e = read_token_file(&write(text)).expect_err("refused");
            assert!(e.contains(needle) && e.contains("token"), "{e}");
        }
        let big = vec![b'a'; 5000];
        assert!(read_token_file(&write(&big)).is_err_and(|e| e.contains("larger than")));
        let e = read_token_file(dir.path()).expect_err("a directory");
        assert!(e.contains("a directory (expected a regular file)"), "{e}");
    }
}
