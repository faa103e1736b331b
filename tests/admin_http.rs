//! The admin endpoint over real HTTP on 127.0.0.1: routes, readiness, a slow client, the
//! connection bound and shutdown.

mod support {
    pub mod reports;
}

use std::sync::{Arc, Mutex};
use std::time::Duration;

use headroom::http::{AdminState, ServeOptions, serve_with};
use headroom::metrics::Metrics;
use jiff::{SignedDuration, Timestamp};
use support::reports::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const INTERVAL: Duration = Duration::from_secs(30);
/// Upper bound for anything the server should do "soon"; never a performance assertion.
const PATIENCE: Duration = Duration::from_secs(10);

struct Server {
    addr: std::net::SocketAddr,
    state: Arc<AdminState>,
    now: Arc<Mutex<Timestamp>>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), headroom::http::HttpError>>,
}

async fn start(opts: ServeOptions) -> Server {
    let now = Arc::new(Mutex::new(at("2025-03-01T10:00:00Z")));
    let clock = Arc::clone(&now);
    let state = Arc::new(
        AdminState::new(Metrics::new("node-a").unwrap(), "node-a", INTERVAL)
            .with_clock(move || *clock.lock().unwrap()),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel();
    let task = tokio::spawn(serve_with(
        listener,
        Arc::clone(&state),
        async {
            let _ = rx.await;
        },
        opts,
    ));
    Server {
        addr,
        state,
        now,
        stop: Some(tx),
        task,
    }
}

impl Server {
    fn advance(&self, by: SignedDuration) {
        let mut now = self.now.lock().unwrap();
        *now = now.checked_add(by).unwrap();
    }

    fn now(&self) -> Timestamp {
        *self.now.lock().unwrap()
    }

    async fn shutdown(mut self) {
        self.stop.take().unwrap().send(()).unwrap();
        let r = tokio::time::timeout(PATIENCE, self.task).await;
        r.expect("server stops").unwrap().unwrap();
    }
}

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        let h = self
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name));
        h.map(|(_, v)| v.as_str())
    }
}

async fn request(addr: std::net::SocketAddr, method: &str, path: &str) -> Reply {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut raw))
        .await
        .expect("response in time")
        .unwrap();
    parse_reply(&raw)
}

fn parse_reply(raw: &[u8]) -> Reply {
    let text = String::from_utf8(raw.to_vec()).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.trim().to_string(), v.trim().to_string())
        })
        .collect();
    Reply {
        status,
        headers,
        body: body.to_string(),
    }
}

#[tokio::test]
async fn endpoints_serve_metrics_volumes_liveness_and_404() {
    let srv = start(ServeOptions::default()).await;
    srv.state.scan_finished(
        vec![
            pg_data("shop", "pgdata-orders-1"),
            unmeasured("shop", "scratch"),
        ],
        Duration::from_millis(80),
        srv.now(),
    );

    let live = request(srv.addr, "GET", "/live").await;
    assert_eq!(live.status, 200);

    let metrics = request(srv.addr, "GET", "/metrics").await;
    assert_eq!(metrics.status, 200);
    assert_eq!(
        metrics.header("content-type"),
        Some("text/plain; version=0.0.4")
    );
    let samples = parse(&metrics.body);
    let pvc = &[
        ("persistentvolumeclaim", "pgdata-orders-1"),
        ("node", "node-a"),
    ];
    assert_eq!(
        value(&samples, "headroom_wal_pending_archive_files", pvc),
        340.0
    );
    assert_eq!(value(&samples, "headroom_volumes_seen", &[]), 2.0);

    let volumes = request(srv.addr, "GET", "/volumes").await;
    assert_eq!(volumes.status, 200);
    assert_eq!(volumes.header("content-type"), Some("application/json"));
    let json: serde_json::Value = serde_json::from_str(&volumes.body).unwrap();
    assert_eq!(json["node"], "node-a");
    let vols = json["volumes"].as_array().unwrap();
    assert_eq!(vols.len(), 2);
    assert_eq!(vols[0]["pvc"], "pgdata-orders-1");
    assert_eq!(vols[0]["decision"]["reason"], "wal_archive_unhealthy");
    assert_eq!(vols[0]["wal"]["pending_files"], 340);
    assert_eq!(
        vols[0]["provenance"]["limit"],
        serde_json::json!("config_map_default")
    );
    assert_eq!(vols[1]["measurement"], serde_json::Value::Null);

    assert_eq!(request(srv.addr, "GET", "/nope").await.status, 404);
    assert_eq!(request(srv.addr, "GET", "/").await.status, 404);
    let post = request(srv.addr, "POST", "/metrics").await;
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow"), Some("GET, HEAD"));
    srv.shutdown().await;
}

#[tokio::test]
async fn ready_only_after_sync_and_first_scan_and_until_scans_go_stale() {
    let srv = start(ServeOptions::default()).await;
    let ready = || request(srv.addr, "GET", "/ready");

    let r = ready().await;
    assert_eq!(
        (r.status, r.body.contains("synced")),
        (503, true),
        "{}",
        r.body
    );
    srv.state.set_synced(true);
    let r = ready().await;
    assert_eq!(
        (r.status, r.body.contains("no scan")),
        (503, true),
        "{}",
        r.body
    );

    srv.state.scan_finished(vec![], Duration::ZERO, srv.now());
    assert_eq!(ready().await.status, 200);
    // Still fresh at exactly three intervals...
    srv.advance(SignedDuration::from_secs(90));
    assert_eq!(ready().await.status, 200);
    // ...stale past them: the agent is wedged even though the process lives.
    srv.advance(SignedDuration::from_secs(1));
    let r = ready().await;
    assert_eq!(
        (r.status, r.body.contains("older than 3 intervals")),
        (503, true),
        "{}",
        r.body
    );
    assert_eq!(request(srv.addr, "GET", "/live").await.status, 200);
    // A new scan makes it ready again; losing the watch sync makes it unready.
    srv.state.scan_finished(vec![], Duration::ZERO, srv.now());
    assert_eq!(ready().await.status, 200);
    srv.state.set_synced(false);
    assert_eq!(ready().await.status, 503);
    srv.shutdown().await;
}

#[tokio::test]
async fn a_client_sending_half_a_header_is_disconnected() {
    let srv = start(ServeOptions {
        header_read_timeout: Duration::from_millis(200),
        ..ServeOptions::default()
    })
    .await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: te")
        .await
        .unwrap();
    let mut got = Vec::new();
    // The server must close the connection on its own; the bound only keeps a broken server
    // from hanging the test.
    let read = tokio::time::timeout(PATIENCE, s.read_to_end(&mut got)).await;
    // Ok (EOF) or a reset both mean the server dropped it.
    let _closed = read.expect("server closed the connection of a slow client");
    let text = String::from_utf8_lossy(&got);
    assert!(
        !text.contains("200 OK"),
        "no response to a partial request: {text}"
    );
    // The endpoint still serves everyone else.
    assert_eq!(request(srv.addr, "GET", "/live").await.status, 200);
    srv.shutdown().await;
}

#[tokio::test]
async fn connections_beyond_the_bound_wait_for_a_free_slot() {
    let srv = start(ServeOptions {
        max_connections: 1,
        header_read_timeout: Duration::from_secs(60),
        ..ServeOptions::default()
    })
    .await;
    // A holds the only slot without sending anything.
    let idle = TcpStream::connect(srv.addr).await.unwrap();
    // Give the server the chance to accept A first.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut b = TcpStream::connect(srv.addr).await.unwrap();
    b.write_all(b"GET /live HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(300), b.read(&mut buf)).await;
    assert!(
        early.is_err(),
        "B must not be served while A holds the only slot"
    );
    drop(idle);
    let mut raw = Vec::new();
    tokio::time::timeout(PATIENCE, b.read_to_end(&mut raw))
        .await
        .expect("B served once A left")
        .unwrap();
    assert_eq!(parse_reply(&raw).status, 200);
    srv.shutdown().await;
}

#[tokio::test]
async fn a_watch_failing_past_its_grace_makes_the_agent_unready_until_it_yields_again() {
    let srv = start(ServeOptions::default()).await;
    let ready = || request(srv.addr, "GET", "/ready");
    srv.state.set_synced(true);
    srv.state.scan_finished(vec![], Duration::ZERO, srv.now());
    srv.state.watch_failed("pods");
    // Within the grace (two 30 s intervals) a failing watch is the watcher's backoff at work.
    assert_eq!(ready().await.status, 200);
    srv.advance(SignedDuration::from_secs(40));
    // Failing again does not restart its clock.
    srv.state.watch_failed("pods");
    srv.state.scan_finished(vec![], Duration::ZERO, srv.now());
    srv.advance(SignedDuration::from_secs(20));
    assert_eq!(ready().await.status, 200, "at exactly the grace");
    srv.advance(SignedDuration::from_secs(1));
    let r = ready().await;
    assert_eq!(
        (
            r.status,
            r.body.contains("pods watch has been failing since")
        ),
        (503, true),
        "{}",
        r.body
    );
    // Another watch recovering changes nothing; this one yielding an event again does.
    srv.state.watch_ok("node");
    assert_eq!(ready().await.status, 503);
    srv.state.watch_ok("pods");
    assert_eq!(ready().await.status, 200);

    // kube's watcher resumes a watch without an event: a watch whose retries stopped failing
    // while the API server answers again has recovered, once silent longer than its retries
    // are apart (20 s).
    srv.state.watch_failed("pvc db/data");
    srv.advance(SignedDuration::from_secs(55));
    srv.state.watch_failed("pvc db/data");
    srv.state.scan_finished(vec![], Duration::ZERO, srv.now());
    srv.advance(SignedDuration::from_secs(10));
    assert_eq!(ready().await.status, 503, "past the grace, still failing");
    srv.advance(SignedDuration::from_secs(11));
    assert_eq!(
        ready().await.status,
        503,
        "silent, but the API server has not answered since"
    );
    let failed = srv.state.request_sent();
    srv.state.request_ended(failed, Some(500));
    assert_eq!(ready().await.status, 503, "an error answer is no evidence");
    let answered = srv.state.request_sent();
    srv.state.request_ended(answered, Some(200));
    assert_eq!(ready().await.status, 200);
    // Failing again later starts a new streak, with a new grace.
    srv.state.watch_failed("pvc db/data");
    srv.state.scan_finished(vec![], Duration::ZERO, srv.now());
    assert_eq!(ready().await.status, 200);
    srv.shutdown().await;
}

#[tokio::test]
async fn live_turns_503_when_the_scan_loop_stops_finishing_iterations() {
    let srv = start(ServeOptions::default()).await;
    let live = || request(srv.addr, "GET", "/live");
    // Waiting for the first sync (an unreachable API server) is not a wedged loop: a restart
    // would not help.
    srv.advance(SignedDuration::from_hours(1));
    assert_eq!(live().await.status, 200);
    srv.state.loop_started();
    srv.advance(SignedDuration::from_secs(180));
    assert_eq!(live().await.status, 200, "at exactly six intervals");
    srv.advance(SignedDuration::from_secs(1));
    let r = live().await;
    assert_eq!(
        (r.status, r.body.contains("has not finished an iteration")),
        (503, true),
        "{}",
        r.body
    );
    // A failed scan is still an iteration: the loop turns (readiness tells it failed).
    srv.state.scan_failed(Duration::ZERO, srv.now());
    assert_eq!(live().await.status, 200);
    srv.state.set_synced(true);
    assert_eq!(request(srv.addr, "GET", "/ready").await.status, 503);
    srv.advance(SignedDuration::from_secs(181));
    assert_eq!(live().await.status, 503);
    srv.state.scan_finished(vec![], Duration::ZERO, srv.now());
    assert_eq!(live().await.status, 200);
    srv.shutdown().await;
}

#[tokio::test]
async fn a_failed_scan_keeps_the_last_good_values_marked_stale_and_is_not_a_success() {
    let srv = start(ServeOptions::default()).await;
    srv.state.set_synced(true);
    let t0 = srv.now();
    let good = pg_data("shop", "pg-1");
    let measured = good.measured_at.expect("measured").as_second() as f64;
    srv.state
        .scan_finished(vec![good.clone()], Duration::from_millis(10), t0);
    srv.advance(SignedDuration::from_secs(30));
    srv.state.scan_failed(Duration::from_millis(10), srv.now());

    let metrics = |body: String| parse(&body);
    let s = metrics(request(srv.addr, "GET", "/metrics").await.body);
    let pvc = &[("persistentvolumeclaim", "pg-1")];
    assert_eq!(
        value(&s, "headroom_last_successful_scan_timestamp_seconds", &[]),
        t0.as_second() as f64
    );
    assert_eq!(value(&s, "headroom_scan_failures_total", &[]), 1.0);
    assert_eq!(value(&s, "headroom_scan_duration_seconds_count", &[]), 2.0);
    // The last good numbers stay, with the time they were measured.
    assert_eq!(
        value(&s, "headroom_volume_used_bytes", pvc),
        good.measurement.expect("m").used_bytes as f64
    );
    assert_eq!(
        value(&s, "headroom_volume_measured_timestamp_seconds", pvc),
        measured
    );
    let json: serde_json::Value =
        serde_json::from_str(&request(srv.addr, "GET", "/volumes").await.body).unwrap();
    assert_eq!(json["volumes"][0]["pvc"], "pg-1");
    assert_eq!(json["scanned_at"], serde_json::json!(t0.to_string()));

    // A later scan that could not measure this volume (its statfs timed out) keeps its last
    // measurement time and says why; its numbers are gone (unknown, not zero).
    let mut timed_out = good.clone();
    timed_out.measurement = None;
    timed_out.measured_by = headroom::agent::MeasuredBy::None;
    timed_out.measured_at = None;
    timed_out.not_measured = Some(headroom::probe::Unmeasured::ProbeTimeout);
    srv.state
        .scan_finished(vec![timed_out], Duration::from_millis(10), srv.now());
    let s = metrics(request(srv.addr, "GET", "/metrics").await.body);
    assert_eq!(
        value(&s, "headroom_volume_measured_timestamp_seconds", pvc),
        measured
    );
    assert_eq!(
        value(
            &s,
            "headroom_volume_not_measured",
            &[
                ("persistentvolumeclaim", "pg-1"),
                ("reason", "probe_timeout")
            ]
        ),
        1.0
    );
    assert!(find(&s, "headroom_volume_used_bytes", pvc).is_empty());
    assert_eq!(request(srv.addr, "GET", "/ready").await.status, 200);

    // Failed scans only: readiness goes stale after three intervals.
    srv.advance(SignedDuration::from_secs(91));
    srv.state.scan_failed(Duration::from_millis(10), srv.now());
    assert_eq!(request(srv.addr, "GET", "/ready").await.status, 503);
    srv.shutdown().await;
}

#[tokio::test]
async fn a_request_the_api_server_never_answers_makes_the_agent_unready() {
    let srv = start(ServeOptions::default()).await;
    let ready = || request(srv.addr, "GET", "/ready");
    srv.state.set_synced(true);
    srv.state.scan_finished(vec![], Duration::ZERO, srv.now());
    // Answered requests, and ones the caller gave up on (bounded by its own timeout), leave
    // nothing behind.
    let answered = srv.state.request_sent();
    let dropped = srv.state.request_sent();
    let hanging = srv.state.request_sent();
    srv.state.request_ended(answered, Some(200));
    srv.state.request_ended(dropped, None);
    srv.advance(SignedDuration::from_secs(60));
    srv.state.scan_finished(vec![], Duration::ZERO, srv.now());
    assert_eq!(ready().await.status, 200, "at exactly the grace");
    srv.advance(SignedDuration::from_secs(1));
    let r = ready().await;
    assert_eq!(
        (
            r.status,
            r.body.contains("request to the API server has waited")
        ),
        (503, true),
        "{}",
        r.body
    );
    srv.state.request_ended(hanging, Some(200));
    assert_eq!(ready().await.status, 200);
    srv.shutdown().await;
}
