//! The agent's admin endpoint: `/metrics`, `/live`, `/ready`, `/volumes`.
//!
//! Every node runs one, reachable from the cluster network, so a slow or idle client must not
//! hold resources: headers must arrive within a deadline and connections are bounded.

use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use jiff::Timestamp;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::health::Health;
pub use crate::health::{LIVE_INTERVALS, Liveness, Readiness, STALE_INTERVALS};
use crate::metrics::{self, Metrics};
use crate::report::VolumeReport;

/// Default `--listen`. Prometheus' exporter port list (9100-9999) is fully allocated, so this is
/// a port no common node-level exporter uses: not node-exporter (9100), CloudNativePG (9187),
/// the CSI livenessprobe (9808) or the kubelet (10250/10255).
pub const DEFAULT_LISTEN: &str = "0.0.0.0:9737";

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("accepting connections on {addr}: {source}")]
    Accept {
        addr: String,
        source: std::io::Error,
    },
}

#[derive(Debug, Clone, Copy)]
pub struct ServeOptions {
    /// A client must send its whole request head within this (also bounds idle keep-alive).
    pub header_read_timeout: Duration,
    /// Connections served at once; more wait in the kernel's accept queue.
    pub max_connections: usize,
    /// On shutdown, how long open connections get to finish.
    pub shutdown_grace: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            header_read_timeout: Duration::from_secs(10),
            max_connections: 32,
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

type Clock = Box<dyn Fn() -> Timestamp + Send + Sync>;

/// What the agent shares with the admin endpoint.
pub struct AdminState {
    metrics: Metrics,
    node: String,
    clock: Clock,
    health: Health,
    reports: Mutex<Arc<Vec<VolumeReport>>>,
}

#[derive(Serialize)]
struct VolumesBody<'a> {
    node: &'a str,
    scanned_at: Option<Timestamp>,
    volumes: &'a [VolumeReport],
}

impl AdminState {
    /// `interval`: the scan interval, for staleness.
    pub fn new(metrics: Metrics, node: &str, interval: Duration) -> AdminState {
        AdminState {
            metrics,
            node: node.to_string(),
            clock: Box::new(Timestamp::now),
            health: Health::new(interval),
            reports: Mutex::new(Arc::new(Vec::new())),
        }
    }

    /// Replaces the wall clock `/ready` reads (tests move time instead of sleeping).
    pub fn with_clock(mut self, clock: impl Fn() -> Timestamp + Send + Sync + 'static) -> Self {
        self.clock = Box::new(clock);
        self
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    fn now(&self) -> Timestamp {
        (self.clock)()
    }

    /// The watchers have (or, after a relist, no longer have) a complete view.
    pub fn set_synced(&self, synced: bool) {
        self.health.set_synced(synced);
    }

    /// A successful scan: updates the metrics and the `/volumes` view.
    pub fn scan_finished(&self, reports: Vec<VolumeReport>, duration: Duration, at: Timestamp) {
        self.metrics.observe_scan(&reports, duration, at);
        // Report before timestamp, so `/volumes` never pairs new time with old reports.
        *self.reports.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(reports);
        self.health.scan_succeeded(at);
    }

    /// Some volumes were decided on between scans: their reports change, the scan's health and
    /// timestamps do not (only a full scan says the node was measured).
    pub fn volumes_decided(&self, reports: Vec<VolumeReport>) {
        self.metrics.observe_volumes(&reports);
        *self.reports.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(reports);
    }

    /// A scan that could not measure: the loop turned, but nothing is updated, so the last
    /// good values stay (their timestamps show their age) and readiness ages.
    pub fn scan_failed(&self, duration: Duration, at: Timestamp) {
        self.metrics.scan_failed(duration);
        self.health.scan_failed(at);
    }

    /// The scan loop starts now; from here on `/live` expects iterations.
    pub fn loop_started(&self) {
        self.health.loop_started(self.now());
    }

    /// `watcher` failed; the first failure since it last worked starts its clock.
    pub fn watch_failed(&self, watcher: &str) {
        self.health.watch_failed(watcher, self.now());
    }

    /// `watcher` yielded an event (it works again), or was stopped.
    pub fn watch_ok(&self, watcher: &str) {
        self.health.watch_ok(watcher);
    }

    /// A request to the API server was sent; pass the token to [`Self::request_ended`].
    pub fn request_sent(&self) -> u64 {
        self.health.request_sent(self.now())
    }

    /// The request got its answer (`Some(status)`, 0 for none) or was given up (`None`).
    pub fn request_ended(&self, token: u64, status: Option<u16>) {
        self.health.request_ended(token, status, self.now());
    }

    pub fn reports(&self) -> Arc<Vec<VolumeReport>> {
        Arc::clone(&self.reports.lock().unwrap_or_else(PoisonError::into_inner))
    }

    pub fn readiness(&self, now: Timestamp) -> Readiness {
        self.health.readiness(now)
    }

    pub fn liveness(&self, now: Timestamp) -> Liveness {
        self.health.liveness(now)
    }

    fn volumes_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        let reports = self.reports();
        serde_json::to_vec_pretty(&VolumesBody {
            node: &self.node,
            scanned_at: self.health.last_scan(),
            volumes: &reports,
        })
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn with_type(mut r: Response<Full<Bytes>>, ct: &'static str) -> Response<Full<Bytes>> {
    r.headers_mut()
        .insert(CONTENT_TYPE, hyper::header::HeaderValue::from_static(ct));
    r
}

/// Routes one request; pure apart from reading the state, so it is what the tests exercise
/// through real HTTP.
fn route(state: &AdminState, method: &Method, path: &str) -> Response<Full<Bytes>> {
    let known = matches!(path, "/metrics" | "/live" | "/ready" | "/volumes");
    if !known {
        return text(StatusCode::NOT_FOUND, "not found\n");
    }
    if method != Method::GET && method != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n");
        r.headers_mut()
            .insert(ALLOW, hyper::header::HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match path {
        "/live" => match state.liveness(state.now()) {
            Liveness::Live => text(StatusCode::OK, "ok\n"),
            Liveness::Wedged { since } => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "not live: the scan loop has not finished an iteration since {since} ({LIVE_INTERVALS} intervals)\n"
                ),
            ),
        },
        "/ready" => match state.readiness(state.now()) {
            Readiness::Ready => text(StatusCode::OK, "ready\n"),
            Readiness::NotSynced => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: watchers have not synced\n",
            ),
            Readiness::WatchLost { watcher, since } => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: the {watcher} watch has been failing since {since}\n"),
            ),
            Readiness::ApiUnanswered { since } => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: a request to the API server has waited since {since}\n"),
            ),
            Readiness::NoScanYet => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: no scan has finished yet\n",
            ),
            Readiness::Stale { last_scan } => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "not ready: last successful scan at {last_scan} is older than {STALE_INTERVALS} intervals\n"
                ),
            ),
        },
        "/metrics" => match state.metrics.encode() {
            Ok(body) => with_type(text(StatusCode::OK, body), metrics::CONTENT_TYPE),
            Err(e) => {
                tracing::error!(error = %e, "encoding metrics");
                text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n"))
            }
        },
        _ => match state.volumes_json() {
            Ok(body) => with_type(text(StatusCode::OK, body), "application/json"),
            Err(e) => {
                tracing::error!(error = %e, "encoding /volumes");
                text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n"))
            }
        },
    }
}

/// Accept errors that come and go (a client that gave up, descriptors or memory exhausted for a
/// moment) must not take the endpoint down.
fn transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | WouldBlock | TimedOut
    ) || matches!(
        e.raw_os_error(),
        Some(libc_errno::EMFILE | libc_errno::ENFILE | libc_errno::ENOBUFS | libc_errno::ENOMEM)
    )
}

mod libc_errno {
    pub const EMFILE: i32 = nix::errno::Errno::EMFILE as i32;
    pub const ENFILE: i32 = nix::errno::Errno::ENFILE as i32;
    pub const ENOBUFS: i32 = nix::errno::Errno::ENOBUFS as i32;
    pub const ENOMEM: i32 = nix::errno::Errno::ENOMEM as i32;
}

/// Serves until `shutdown` completes, then lets open connections finish (bounded).
pub async fn serve(
    listener: TcpListener,
    state: Arc<AdminState>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), HttpError> {
    serve_with(listener, state, shutdown, ServeOptions::default()).await
}

pub async fn serve_with(
    listener: TcpListener,
    state: Arc<AdminState>,
    shutdown: impl Future<Output = ()>,
    opts: ServeOptions,
) -> Result<(), HttpError> {
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".to_string());
    let permits = Arc::new(Semaphore::new(opts.max_connections.max(1)));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut conns = JoinSet::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(opts.header_read_timeout);
    tokio::pin!(shutdown);
    let result = loop {
        // Reap finished connections so the set does not grow with every scrape.
        while conns.try_join_next().is_some() {}
        let permit = tokio::select! {
            () = &mut shutdown => break Ok(()),
            p = Arc::clone(&permits).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break Ok(()),
            },
        };
        let stream = tokio::select! {
            () = &mut shutdown => break Ok(()),
            a = listener.accept() => match a {
                Ok((stream, _)) => stream,
                Err(e) if transient(&e) => {
                    tracing::warn!(error = %e, "accept on admin endpoint");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                Err(source) => break Err(HttpError::Accept { addr: addr.clone(), source }),
            },
        };
        let state = Arc::clone(&state);
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let resp = route(&state, req.method(), req.uri().path());
            async move { Ok::<_, Infallible>(resp) }
        });
        let conn = http.serve_connection(TokioIo::new(stream), service);
        let mut stop = stop_rx.clone();
        conns.spawn(async move {
            let _permit = permit;
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "admin connection");
                    }
                }
                () = async { let _ = stop.wait_for(|s| *s).await; } => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    };
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(opts.shutdown_grace, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        conns.abort_all();
    }
    result
}
