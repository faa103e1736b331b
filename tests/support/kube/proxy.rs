//! A fault proxy in front of the real API server ([`super::server`]): plain HTTP/1.1 on
//! 127.0.0.1, every request passed through to kube-apiserver over TLS with the client's own
//! `Authorization` (so RBAC, admission and watch semantics stay the server's), unless a fault
//! scripted here answers instead. Faults a real server cannot be made to produce: an answer of
//! any status N times for a method and path (5xx, 409 storms on PATCH), every request failing,
//! stalls before a request reaches the server, and open watch streams closed at a chosen moment.
//! Requests are logged twice, on arrival and when answered, for tests that count calls.
//!
//! One rule of servers older than the ones tested, a lowered request refused before KEP-1790,
//! is scripted per claim by [`super::before_1790`].
//!
//! The proxy runs on a thread and runtime of its own: a test that blocks its own thread never
//! stalls the API its agent talks to.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

use super::before_1790::Before1790;
use super::server::Server;

type Body = UnsyncBoxBody<Bytes, hyper::Error>;
type Upstream = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// One request as the proxy saw it, in arrival order (logged when answered).
#[derive(Debug, Clone)]
pub struct RequestRecord {
    pub method: String,
    pub path: String,
    /// Raw (still percent-encoded) query string.
    pub query: String,
    /// 0 while not answered (in [`FaultProxy::arrivals`]).
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Option<String>,
}

impl RequestRecord {
    /// A decoded query parameter.
    pub fn param(&self, name: &str) -> Option<String> {
        form_urlencoded::parse(self.query.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }

    pub fn is_watch(&self) -> bool {
        matches!(self.param("watch").as_deref(), Some("true" | "1"))
    }
}

#[derive(Debug, Clone)]
struct Rule {
    remaining: usize,
    status: u16,
    method: Option<String>,
    path_contains: Option<String>,
}

#[derive(Debug, Default)]
struct Faults {
    rules: Vec<Rule>,
    failing: bool,
    delay: Duration,
    /// (method, path fragment, delay): a stall for matching requests only.
    slow: Vec<(String, String, Duration)>,
    /// The answer to `GET /version` instead of the real server's: a release that is not the
    /// one running (older, newer, unreadable), which a real server cannot be made to report.
    version: Option<Value>,
}

impl Faults {
    fn delay_for(&self, method: &str, path: &str) -> Duration {
        self.slow
            .iter()
            .filter(|(m, p, _)| m == method && path.contains(p.as_str()))
            .map(|(_, _, d)| *d)
            .fold(self.delay, Duration::max)
    }

    /// The status to answer instead of passing this request on, consuming one scripted failure.
    fn take(&mut self, method: &str, path: &str) -> Option<u16> {
        if self.failing {
            return Some(500);
        }
        let rule = self.rules.iter_mut().find(|r| {
            r.remaining > 0
                && r.method.as_deref().is_none_or(|m| m == method)
                && r.path_contains.as_deref().is_none_or(|p| path.contains(p))
        })?;
        rule.remaining -= 1;
        let status = rule.status;
        self.rules.retain(|r| r.remaining > 0);
        Some(status)
    }
}

struct Shared {
    upstream: Upstream,
    /// `https://127.0.0.1:<port>` of the real server.
    base: String,
    faults: Mutex<Faults>,
    log: Mutex<Vec<RequestRecord>>,
    arrivals: Mutex<Vec<RequestRecord>>,
    before_1790: Mutex<Before1790>,
    /// Bumped by [`FaultProxy::drop_watches`]: every watch open at that moment ends.
    cut: watch::Sender<u64>,
    open_watches: AtomicUsize,
}

/// A poisoned lock only means another test thread panicked; the data is still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub struct FaultProxy {
    shared: Arc<Shared>,
    pub addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FaultProxy {
    /// A proxy on an ephemeral port of 127.0.0.1 in front of `server`; it stops when dropped.
    pub fn start(server: &Server) -> FaultProxy {
        let ca = server.dir.join("pki/apiserver.crt");
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(&ca).expect("API server certificate") {
            roots
                .add(cert.expect("PEM certificate"))
                .expect("trust the API server's certificate");
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the fault proxy");
        listener.set_nonblocking(true).expect("non-blocking");
        let addr = listener.local_addr().expect("proxy address");
        let (shutdown, stop) = oneshot::channel::<()>();
        let (thread, shared) = {
            let (tx, rx) = std::sync::mpsc::channel();
            let base = format!("https://127.0.0.1:{}", server.port);
            let thread = std::thread::Builder::new()
                .name("fault-proxy".into())
                .spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("runtime for the fault proxy");
                    rt.block_on(async move {
                        // The client's pool lives on this runtime.
                        let shared = Arc::new(Shared {
                            upstream: Client::builder(TokioExecutor::new()).build(https),
                            base,
                            faults: Mutex::default(),
                            log: Mutex::default(),
                            arrivals: Mutex::default(),
                            before_1790: Mutex::default(),
                            cut: watch::channel(0).0,
                            open_watches: AtomicUsize::new(0),
                        });
                        let _ = tx.send(shared.clone());
                        let listener = TcpListener::from_std(listener).expect("tokio listener");
                        tokio::select! {
                            () = accept_loop(listener, shared) => {}
                            _ = stop => {}
                        }
                    });
                    // Dropping the runtime ends every connection, open watches included.
                })
                .expect("spawn the fault proxy thread");
            (thread, rx.recv().expect("fault proxy started"))
        };
        FaultProxy {
            shared,
            addr,
            shutdown: Some(shutdown),
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig naming the proxy, with `token` (the server's admin or the agent's).
    pub fn kubeconfig(&self, token: &str, path: &Path) {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster:\n    server: {}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    cluster: proxy\n    user: u\n    namespace: default\ncurrent-context: c\n",
            self.url()
        );
        std::fs::write(path, text).expect("write the proxy kubeconfig");
    }

    // ---- observation ----

    /// Requests answered so far (by the server or by a fault), in the order they were answered.
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.shared.log).clone()
    }

    /// [`Self::requests`] once `done` holds of it, polled for up to `within`; panics with the log
    /// when it does not. A request is logged only once the proxy has the server's answer: the
    /// server has acted on it before that, so a test that saw the change on the server (a claim
    /// grown, an Event created) can read the log a moment before the record lands, and on a
    /// loaded machine it does. Such a test waits for the record here before counting.
    pub fn wait_requests(
        &self,
        within: Duration,
        what: &str,
        done: impl Fn(&[RequestRecord]) -> bool,
    ) -> Vec<RequestRecord> {
        let start = std::time::Instant::now();
        loop {
            let log = self.requests();
            if done(&log) {
                return log;
            }
            if start.elapsed() >= within {
                let lines: Vec<String> = log
                    .iter()
                    .map(|r| format!("{} {}?{} -> {}", r.method, r.path, r.query, r.status))
                    .collect();
                panic!(
                    "timed out after {within:?} waiting for {what} in the fault proxy's log:\n{}",
                    lines.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Requests as they arrived, answered or not (`status` 0): a stalled request is in here and
    /// not yet in [`Self::requests`].
    pub fn arrivals(&self) -> Vec<RequestRecord> {
        lock(&self.shared.arrivals).clone()
    }

    pub fn clear_requests(&self) {
        lock(&self.shared.log).clear();
        lock(&self.shared.arrivals).clear();
    }

    /// Watch streams open through the proxy (readers that went away are not counted).
    pub fn open_watches(&self) -> usize {
        self.shared.open_watches.load(Ordering::SeqCst)
    }

    // ---- faults ----

    /// The next `n` requests are answered `status` with a `metav1.Status`, never reaching the
    /// server. kube's client retries 429, 503 and 504 itself; 500 reaches the caller.
    pub fn fail_next(&self, n: usize, status: u16) {
        lock(&self.shared.faults).rules.push(Rule {
            remaining: n,
            status,
            method: None,
            path_contains: None,
        });
    }

    /// Like `fail_next`, for requests of one method whose path contains `path_contains` (e.g.
    /// 409s on a claim's PATCH), so background watches do not use the failures up.
    pub fn fail_next_matching(&self, n: usize, status: u16, method: &str, path_contains: &str) {
        lock(&self.shared.faults).rules.push(Rule {
            remaining: n,
            status,
            method: Some(method.to_ascii_uppercase()),
            path_contains: Some(path_contains.to_string()),
        });
    }

    /// While set, every new request is answered 500. Open watches stay open (see
    /// [`Self::drop_watches`]).
    pub fn set_failing(&self, failing: bool) {
        lock(&self.shared.faults).failing = failing;
    }

    /// Every request is held this long before it goes on (zero to stop).
    pub fn set_delay(&self, delay: Duration) {
        lock(&self.shared.faults).delay = delay;
    }

    /// Holds every `method` request whose path contains `path_contains` for `delay`.
    pub fn set_slow(&self, method: &str, path_contains: &str, delay: Duration) {
        lock(&self.shared.faults).slow.push((
            method.to_ascii_uppercase(),
            path_contains.to_string(),
            delay,
        ));
    }

    /// Answers `GET /version` with `info` (a `version.Info` as some server would send it).
    pub fn report_version(&self, info: Value) {
        lock(&self.shared.faults).version = Some(info);
    }

    /// Ends every open watch stream cleanly: clients see the end of the stream and watch again.
    pub fn drop_watches(&self) {
        self.shared.cut.send_modify(|n| *n += 1);
    }

    /// Claims on which the proxy refuses a lowered request as servers before KEP-1790 do (see
    /// [`super::before_1790`]).
    pub fn before_1790(&self) -> MutexGuard<'_, Before1790> {
        lock(&self.shared.before_1790)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| serve(shared.clone(), req));
            // A client hanging up mid-watch ends the connection with an error: nothing to do.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn serve(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let method = parts.method.as_str().to_string();
    let path = parts.uri.path().to_string();
    let mut record = RequestRecord {
        method: method.clone(),
        path: path.clone(),
        query: parts.uri.query().unwrap_or("").to_string(),
        status: 0,
        content_type: parts
            .headers
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(';').next().unwrap_or("").trim().to_string()),
        body: (!body.is_empty()).then(|| String::from_utf8_lossy(&body).into_owned()),
    };
    lock(&shared.arrivals).push(record.clone());
    let delay = lock(&shared.faults).delay_for(&method, &path);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let injected = lock(&shared.faults).take(&method, &path);
    let response = match injected {
        Some(code) => status_response(
            code,
            reason(code),
            &format!("Internal error occurred: injected fault ({code})"),
        ),
        None => forward(&shared, parts, body, record.is_watch()).await,
    };
    record.status = response.status().as_u16();
    lock(&shared.log).push(record);
    Ok(response)
}

fn reason(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    }
}

/// A `metav1.Status` answer, as kube-apiserver shapes its errors.
pub fn status_json(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    })
}

fn status_response(code: u16, reason: &str, message: &str) -> Response<Body> {
    json_response(code, &status_json(code, reason, message))
}

fn json_response(code: u16, v: &Value) -> Response<Body> {
    let mut r = Response::new(full(Bytes::from(v.to_string())));
    *r.status_mut() =
        hyper::StatusCode::from_u16(code).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn full(b: Bytes) -> Body {
    Full::new(b).map_err(|never| match never {}).boxed_unsync()
}

/// Headers that belong to one connection, not to the request or answer.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "host",
];

async fn forward(
    shared: &Arc<Shared>,
    parts: hyper::http::request::Parts,
    body: Bytes,
    is_watch: bool,
) -> Response<Body> {
    let path = parts.uri.path();
    let version = lock(&shared.faults).version.clone();
    if let Some(info) = version.filter(|_| parts.method == hyper::Method::GET && path == "/version")
    {
        return json_response(200, &info);
    }
    if let Some(refusal) = lock(&shared.before_1790).refuse(&parts.method, path, &body) {
        return json_response(422, &refusal);
    }
    let uri = format!(
        "{}{}",
        shared.base,
        parts.uri.path_and_query().map_or("/", |p| p.as_str())
    );
    let mut up = Request::builder().method(parts.method.clone()).uri(uri);
    for (name, value) in &parts.headers {
        let n = name.as_str();
        if HOP_BY_HOP.contains(&n) {
            continue;
        }
        up = up.header(name, value);
    }
    let request = up.body(Full::new(body.clone())).expect("upstream request");
    let answer = match shared.upstream.request(request).await {
        Ok(a) => a,
        Err(e) => {
            return status_response(
                503,
                "ServiceUnavailable",
                &format!("the fault proxy cannot reach the API server: {e}"),
            );
        }
    };
    let (mut head, upstream) = answer.into_parts();
    for name in HOP_BY_HOP {
        head.headers.remove(*name);
    }
    if head.status.is_success() {
        lock(&shared.before_1790).written(&parts.method, path, &body);
    }
    let body = if is_watch {
        watch_body(shared, upstream)
    } else {
        upstream.boxed_unsync()
    };
    Response::from_parts(head, body)
}

/// Holds the count of open watches up for as long as one answer is being streamed.
struct OpenWatch(Arc<Shared>);

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.0.open_watches.fetch_sub(1, Ordering::SeqCst);
    }
}

struct WatchState {
    open: OpenWatch,
    upstream: Incoming,
    cut: watch::Receiver<u64>,
}

/// A watch answer streamed through until the server ends it or [`FaultProxy::drop_watches`]
/// cuts it (a clean end of stream, as when a server closes a watch).
fn watch_body(shared: &Arc<Shared>, upstream: Incoming) -> Body {
    shared.open_watches.fetch_add(1, Ordering::SeqCst);
    let state = WatchState {
        open: OpenWatch(shared.clone()),
        cut: shared.cut.subscribe(),
        upstream,
    };
    let frames = futures::stream::unfold(state, |mut s| async move {
        loop {
            let frame = tokio::select! {
                _ = s.cut.changed() => return None,
                f = s.upstream.frame() => f,
            };
            let data = match frame {
                None | Some(Err(_)) => return None,
                Some(Ok(f)) => match f.into_data() {
                    Ok(d) => d,
                    Err(_) => continue,
                },
            };
            if !data.is_empty() {
                return Some((Ok(Frame::data(data)), s));
            }
        }
    });
    StreamBody::new(frames).boxed_unsync()
}
