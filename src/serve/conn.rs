//! The daemon's accept loop: each connection served by hyper's HTTP/1 server with a
//! header-read timeout (which also closes idle keep-alive connections), a write timeout (a
//! client that stops reading is dropped) and a time limit on answering non-streaming requests;
//! a cap on open connections, kept well below the open-files limit so that the sampler always
//! has descriptors for `/proc`.
//!
//! At the cap, a new connection takes the place of the oldest idle one (no request in
//! progress, not an event stream): idle connections cost the attacker nothing, so they must
//! not lock others out. When every connection is busy the new one gets a 503 and is closed.
//! Everything is counted in [`HttpStats`] and exported on `/metrics`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};

use super::Shared;

/// hyper's per-connection buffer limit (its default is ~400 KiB): what a client that does not
/// read can make the daemon hold, besides one event.
const CONNECTION_BUFFER: usize = 64 << 10;
/// How long a connection closed to make room may take to finish the response it is writing.
const EVICTION_GRACE: Duration = Duration::from_secs(1);

/// The HTTP server's limits, as in effect (see [`Limits::effective`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_connections: usize,
    pub max_event_streams: usize,
    pub idle_timeout: Duration,
    pub request_timeout: Duration,
}

impl From<&crate::config::DaemonConfig> for Limits {
    /// As configured, before [`Limits::effective`].
    fn from(c: &crate::config::DaemonConfig) -> Self {
        Self {
            max_connections: c.max_connections,
            max_event_streams: c.max_event_streams,
            idle_timeout: c.idle_timeout,
            request_timeout: c.request_timeout,
        }
    }
}

impl Limits {
    /// The configured limits, with the connections capped at half the open-files limit
    /// (`nofile`: the soft `RLIMIT_NOFILE`, `None` for unlimited) and the event streams at half
    /// the connections, so that streams never take every slot.
    #[must_use]
    pub fn effective(self, nofile: Option<u64>) -> Self {
        let by_files = nofile.map_or(usize::MAX, |n| usize::try_from(n / 2).unwrap_or(usize::MAX));
        let max_connections = self.max_connections.min(by_files).max(1);
        Self {
            max_connections,
            max_event_streams: self.max_event_streams.min(max_connections / 2).max(1),
            ..self
        }
    }
}

/// The soft open-files limit of this process; `None` when unlimited.
pub fn open_files_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// Counters of the HTTP side (exported on `/metrics`).
#[derive(Debug, Default)]
pub struct HttpStats {
    /// Open now.
    pub connections: AtomicU64,
    pub event_streams: AtomicU64,
    /// Refused with 503: every connection busy.
    pub rejected_connections: AtomicU64,
    /// Refused with 503: the event streams are at their cap.
    pub rejected_event_streams: AtomicU64,
    /// `accept` failed (out of descriptors, most likely).
    pub accept_errors: AtomicU64,
    /// Closed to make room for a new connection.
    pub dropped_idle_evicted: AtomicU64,
    /// Closed: no complete request head within the idle timeout.
    pub dropped_idle_timeout: AtomicU64,
    /// Closed: the client stopped reading.
    pub dropped_write_timeout: AtomicU64,
    /// Event streams ended because the client fell behind.
    pub dropped_lagged: AtomicU64,
    /// Requests answered 503 because they took longer than the request timeout.
    pub request_timeouts: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// One open connection, as the accept loop sees it.
#[derive(Debug, Default)]
struct Conn {
    /// Requests being handled now.
    busy: AtomicUsize,
    /// An event stream is open on it (set and cleared by [`StreamMark::hold`]'s guard).
    streaming: AtomicBool,
    /// Asked to close (to make room).
    evicted: AtomicBool,
    /// It sent a request (else it can be closed without finishing anything).
    served: AtomicBool,
    close: tokio::sync::Notify,
}

impl Conn {
    fn is_idle(&self) -> bool {
        self.busy.load(Ordering::Acquire) == 0
            && !self.streaming.load(Ordering::Acquire)
            && !self.evicted.load(Ordering::Acquire)
    }
}

/// Handed to the event-stream handler (a request extension): the connection counts as
/// streaming, and so is never evicted as idle, exactly while the stream's guard lives.
#[derive(Debug, Clone)]
pub struct StreamMark(Arc<Conn>);

impl StreamMark {
    /// Marks the connection as streaming until the guard is dropped (the stream ended,
    /// lagged or was closed).
    pub fn hold(&self) -> StreamHeld {
        self.0.streaming.store(true, Ordering::Release);
        StreamHeld(Arc::clone(&self.0))
    }
}

/// See [`StreamMark::hold`].
#[derive(Debug)]
pub struct StreamHeld(Arc<Conn>);

impl Drop for StreamHeld {
    fn drop(&mut self) {
        self.0.streaming.store(false, Ordering::Release);
    }
}

/// Takes a connection out of the registry and the count when its task ends, however it ends
/// (a panicking handler included).
struct Registered {
    registry: Arc<Mutex<Registry>>,
    id: u64,
    shared: Arc<Shared>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.registry
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .open
            .remove(&self.id);
        self.shared.http.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The open connections, oldest first.
#[derive(Debug, Default)]
struct Registry {
    next: u64,
    open: BTreeMap<u64, Arc<Conn>>,
}

/// Accepts and serves connections until the runtime stops.
pub async fn serve(listener: TcpListener, app: Router, shared: Arc<Shared>) {
    let limits = shared.options.limits;
    let registry = Arc::new(Mutex::new(Registry::default()));
    // Evicted connections close at once unless a response is being written; this bounds how
    // far above the cap that lets the count go.
    let ceiling = limits.max_connections + limits.max_connections / 8 + 1;
    let mut accept_error_logged = false;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                bump(&shared.http.accept_errors);
                if !accept_error_logged {
                    crate::eprintln_safe!(
                        "gpuwatch: cannot accept HTTP connections: {e} (counted in gpuwatch_http_accept_errors_total; logged once)"
                    );
                    accept_error_logged = true;
                }
                // The pending connection stays queued; retrying at once would spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (id, conn, evicted) = {
            let mut reg = registry.lock().unwrap_or_else(PoisonError::into_inner);
            let mut evicted = false;
            let open = reg.open.len();
            if open >= limits.max_connections {
                let victim = reg.open.values().find(|c| c.is_idle()).cloned();
                match victim {
                    Some(v) if open < ceiling => {
                        v.evicted.store(true, Ordering::Release);
                        v.close.notify_one();
                        bump(&shared.http.dropped_idle_evicted);
                        evicted = true;
                    }
                    _ => {
                        drop(reg);
                        bump(&shared.http.rejected_connections);
                        refuse(&stream);
                        continue;
                    }
                }
            }
            let id = reg.next;
            reg.next += 1;
            let conn = Arc::new(Conn::default());
            reg.open.insert(id, Arc::clone(&conn));
            (id, conn, evicted)
        };
        shared.http.connections.fetch_add(1, Ordering::Relaxed);
        let app = app.clone();
        let shared = Arc::clone(&shared);
        let registry = Arc::clone(&registry);
        tokio::spawn(async move {
            let registered = Registered {
                registry,
                id,
                shared,
            };
            serve_one(stream, app, &registered.shared, &conn).await;
        });
        if evicted {
            // Let the evicted connection close (and free its descriptor) before the next
            // accept: a flood of ready connections would otherwise never yield.
            tokio::task::yield_now().await;
        }
    }
}

/// A 503 written without waiting (a fresh socket's send buffer has room), then closed.
fn refuse(stream: &TcpStream) {
    const BODY: &str = "{\"error\":\"too many connections\"}";
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\nretry-after: 1\r\n\r\n{BODY}",
        BODY.len()
    );
    // Whatever request already arrived is read first, so closing does not reset the
    // connection before the client sees the answer.
    let mut sink = [0u8; 4096];
    let _ = stream.try_read(&mut sink);
    let _ = stream.try_write(response.as_bytes());
}

async fn serve_one(stream: TcpStream, app: Router, shared: &Arc<Shared>, conn: &Arc<Conn>) {
    let limits = shared.options.limits;
    let _ = stream.set_nodelay(true);
    let mut io = tokio_io_timeout::TimeoutStream::new(stream);
    io.set_write_timeout(Some(limits.request_timeout));
    let io = TokioIo::new(Box::pin(io));
    let tower = TowerToHyperService::new(app);
    let service = {
        let conn = Arc::clone(conn);
        let shared = Arc::clone(shared);
        hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            let tower = tower.clone();
            let conn = Arc::clone(&conn);
            let shared = Arc::clone(&shared);
            async move {
                let streaming = req.uri().path() == "/api/v1/events";
                conn.served.store(true, Ordering::Release);
                conn.busy.fetch_add(1, Ordering::AcqRel);
                let _busy = Busy(&conn);
                if streaming {
                    // The handler holds the mark for as long as its stream is open.
                    req.extensions_mut().insert(StreamMark(Arc::clone(&conn)));
                    return hyper::service::Service::call(&tower, req).await;
                }
                let answer = hyper::service::Service::call(&tower, req);
                if let Ok(r) = tokio::time::timeout(limits.request_timeout, answer).await {
                    r
                } else {
                    bump(&shared.http.request_timeouts);
                    Ok(super::error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "the request took too long",
                    ))
                }
            }
        })
    };
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout)
        .keep_alive(true)
        .writev(false)
        .max_buf_size(CONNECTION_BUFFER)
        .serve_connection(io, service);
    tokio::pin!(served);
    let result = tokio::select! {
        r = served.as_mut() => r,
        () = conn.close.notified() => {
            if !conn.served.load(Ordering::Acquire) {
                // Not a byte of a request yet (or a trickle of one): nothing to finish.
                return;
            }
            // Idle between requests: closes now; a response being written gets a moment
            // to finish.
            served.as_mut().graceful_shutdown();
            match tokio::time::timeout(EVICTION_GRACE, served).await {
                Ok(r) => r,
                Err(_) => return,
            }
        }
    };
    if let Err(e) = result {
        if e.is_timeout() {
            bump(&shared.http.dropped_idle_timeout);
        } else if is_write_timeout(&e) {
            bump(&shared.http.dropped_write_timeout);
        }
    }
}

fn is_write_timeout(e: &hyper::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::TimedOut;
        }
        source = s.source();
    }
    false
}

/// Marks a request as finished when dropped (also when its future is).
struct Busy<'a>(&'a Conn);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_stay_below_half_the_open_files_limit() {
        let l = Limits::from(&crate::config::Config::default().daemon);
        assert_eq!(l.effective(None), l);
        let at_1024 = l.effective(Some(1024));
        assert_eq!(at_1024.max_connections, 256);
        let at_256 = l.effective(Some(256));
        assert_eq!(
            (at_256.max_connections, at_256.max_event_streams),
            (128, 32)
        );
        let tiny = l.effective(Some(16));
        assert_eq!((tiny.max_connections, tiny.max_event_streams), (8, 4));
    }
}
