//! Notification delivery against a real HTTP server on loopback (tests/support/sink.rs): a
//! sink that answers, one that is slow, one that answers 500 then recovers, one that hangs, one
//! that is down and comes back, one behind TLS with a private CA, and sinks reached through a
//! real forward proxy (tinyproxy). The scan's side only offers; these check what reaches the
//! server and what the counters say.

mod support {
    pub mod ports;
    pub mod proxy;
    pub mod sink;
}

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use headroom::metrics::labels::NotificationOutcome;
use headroom::notify::post::Endpoint;
use headroom::notify::proxy::Proxies;
use headroom::notify::retry::Backoff;
use headroom::notify::{Count, Format, Kind, Message, Notifier, Settings, SinkHandle};
use support::proxy::{Proxy, require_tinyproxy};
use support::sink::{Mode, Sink};

type Counted = Arc<Mutex<Vec<(NotificationOutcome, u64)>>>;

fn counter() -> (Counted, Count) {
    let seen: Counted = Arc::default();
    let s = seen.clone();
    let count: Count = Arc::new(move |_sink: &str, o, n| {
        s.lock().unwrap_or_else(|e| e.into_inner()).push((o, n));
    });
    (seen, count)
}

fn total(seen: &Counted, outcome: NotificationOutcome) -> u64 {
    let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
    seen.iter().filter(|c| c.0 == outcome).map(|c| c.1).sum()
}

fn settings(queue: usize, timeout_ms: u64, retry_for: Duration) -> Settings {
    Settings {
        events: Kind::ALL.to_vec(),
        queue,
        timeout: Duration::from_millis(timeout_ms),
        retry_for,
        backoff: Backoff {
            base: Duration::from_millis(50),
            max: Duration::from_millis(200),
        },
    }
}

fn message(claim: &str) -> Message {
    Message {
        kind: Kind::Grown,
        namespace: "db".into(),
        claim: claim.into(),
        node: "n1".into(),
        reason: "Resized",
        blocked: None,
        grow: Some("Grow"),
        from_bytes: Some(1 << 30),
        to_bytes: Some(2 << 30),
        limit_bytes: None,
        full_at: None,
        until: None,
        recommendation: None,
        time: "2026-01-01T00:00:00Z".parse().expect("time"),
    }
}

/// A JSON sink on a new server answering `mode`: room for 10, 2 s per request, 30 s of retries.
fn json_sink(mode: Mode) -> (tokio::runtime::Runtime, Sink, Counted, Notifier) {
    let rt = runtime();
    let _g = rt.enter();
    let server = Sink::http(mode);
    let (seen, count) = counter();
    let n = sink(
        &server,
        Format::Json,
        settings(10, 2000, Duration::from_secs(30)),
        count,
    );
    drop(_g);
    (rt, server, seen, n)
}

/// The endpoint of `server`, in `format`, trusting its own CA when it has one.
fn endpoint(server: &Sink, format: Format) -> Endpoint {
    let ca = server.ca_pem.as_deref().map(str::as_bytes);
    Endpoint::new("team", format, &server.url(), ca).expect("endpoint")
}

/// A notifier of the one sink `ep`, running on the test's runtime.
fn notifier(ep: Endpoint, s: Settings, count: Count) -> Notifier {
    Notifier::with_sinks(vec![SinkHandle::spawn("team", s, Some(ep), count)])
}

/// A sink on `server`, in `format`, running on the test's runtime.
fn sink(server: &Sink, format: Format, s: Settings, count: Count) -> Notifier {
    notifier(endpoint(server, format), s, count)
}

// The sink records a body before it answers, and the notifier counts `sent` only once it has
// read the answer: a test waits for both, never reads the counter right after the body arrives.
fn wait(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn json_and_slack_payloads_arrive_in_order_once_each() {
    let rt = runtime();
    let _g = rt.enter();
    let server = Sink::http(Mode::Ok);
    let (seen, count) = counter();
    let n = sink(
        &server,
        Format::Json,
        settings(10, 2000, Duration::from_secs(30)),
        count.clone(),
    );
    for c in ["a", "b", "c"] {
        n.send(message(c));
    }
    wait("3 messages counted sent", Duration::from_secs(10), || {
        server.received().len() == 3 && total(&seen, NotificationOutcome::Sent) == 3
    });
    let claims: Vec<_> = server
        .received()
        .iter()
        .map(|v| v["claim"].clone())
        .collect();
    assert_eq!(claims, ["a", "b", "c"]);
    assert_eq!(server.received()[0]["toBytes"], 2u64 << 30);
    assert_eq!(total(&seen, NotificationOutcome::Sent), 3);

    let slack = Sink::http(Mode::Ok);
    let n = sink(
        &slack,
        Format::Slack,
        settings(10, 2000, Duration::from_secs(30)),
        count,
    );
    n.send(message("d"));
    wait("the Slack message", Duration::from_secs(10), || {
        slack.received().len() == 1
    });
    let text = slack.received()[0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        text.starts_with("headroom grew db/d (node n1) from 1Gi to 2Gi"),
        "{text}"
    );
    // The URL (its path is the credential) is in no message.
    assert!(!text.contains("s3cr3t") && !server.received()[0].to_string().contains("s3cr3t"));
}

#[test]
fn a_slow_sink_within_its_deadline_gets_everything() {
    let (_rt, server, seen, n) = json_sink(Mode::Slow(Duration::from_millis(300)));
    for c in ["a", "b", "c", "d"] {
        n.send(message(c));
    }
    wait("4 messages counted sent", Duration::from_secs(10), || {
        server.received().len() == 4 && total(&seen, NotificationOutcome::Sent) == 4
    });
    assert_eq!(total(&seen, NotificationOutcome::Sent), 4);
    assert_eq!(
        server.attempts(),
        4,
        "a slow answer is not a failure: no retry"
    );
}

#[test]
fn answers_of_500_are_retried_with_backoff_until_delivered() {
    let (_rt, server, seen, n) = json_sink(Mode::Ok);
    server.fail_first(3);
    let started = Instant::now();
    n.send(message("a"));
    n.send(message("b"));
    wait(
        "both messages counted sent",
        Duration::from_secs(10),
        || server.received().len() == 2 && total(&seen, NotificationOutcome::Sent) == 2,
    );
    // 3 failures then success: waits of 50, 100, 200 ms before the 4th try.
    assert!(
        started.elapsed() >= Duration::from_millis(350),
        "no backoff: {:?}",
        started.elapsed()
    );
    assert_eq!(server.attempts(), 5);
    assert_eq!(total(&seen, NotificationOutcome::Sent), 2);
    assert_eq!(total(&seen, NotificationOutcome::Failed), 0);
}

#[test]
fn a_refusing_sink_is_not_retried_and_counts_failed() {
    let (_rt, server, seen, n) = json_sink(Mode::Status(404));
    n.send(message("a"));
    wait("failed", Duration::from_secs(10), || {
        total(&seen, NotificationOutcome::Failed) == 1
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(server.attempts(), 1);
}

/// The sink hangs: sending stays instant, its queue holds what fits and drops (counted) what
/// does not, each request ends at its deadline, and once the sink answers again every queued
/// message arrives.
#[test]
fn a_hanging_sink_costs_only_its_queue_and_loses_nothing_that_fits() {
    let rt = runtime();
    let _g = rt.enter();
    let server = Sink::http(Mode::Hang);
    let (seen, count) = counter();
    let n = sink(
        &server,
        Format::Json,
        settings(3, 200, Duration::from_secs(60)),
        count,
    );
    n.send(message("first"));
    wait("the first attempt", Duration::from_secs(5), || {
        server.attempts() >= 1
    });
    let started = Instant::now();
    for i in 0..10 {
        n.send(message(&format!("m{i}")));
    }
    assert!(
        started.elapsed() < Duration::from_millis(100),
        "send waited on the sink"
    );
    // One in delivery, three queued; the other seven dropped.
    assert_eq!(total(&seen, NotificationOutcome::Dropped), 7);
    wait("retries past the deadline", Duration::from_secs(5), || {
        server.attempts() >= 3
    });
    server.set_mode(Mode::Ok);
    wait("the 4 kept counted sent", Duration::from_secs(10), || {
        server.received().len() == 4 && total(&seen, NotificationOutcome::Sent) == 4
    });
    let claims: Vec<_> = server
        .received()
        .iter()
        .map(|v| v["claim"].clone())
        .collect();
    assert_eq!(claims, ["first", "m0", "m1", "m2"]);
    assert_eq!(total(&seen, NotificationOutcome::Sent), 4);
    assert_eq!(total(&seen, NotificationOutcome::Failed), 0);
}

#[test]
fn a_sink_down_past_retry_for_counts_failed() {
    let rt = runtime();
    let _g = rt.enter();
    let server = Sink::http(Mode::Status(503));
    let (seen, count) = counter();
    let n = sink(
        &server,
        Format::Json,
        settings(10, 200, Duration::from_millis(500)),
        count,
    );
    n.send(message("a"));
    n.send(message("b"));
    wait("both failed", Duration::from_secs(10), || {
        total(&seen, NotificationOutcome::Failed) == 2
    });
    assert!(server.attempts() >= 3, "retried: {}", server.attempts());
    assert_eq!(total(&seen, NotificationOutcome::Sent), 0);
}

#[test]
fn tls_with_a_private_ca_is_verified() {
    let rt = runtime();
    let _g = rt.enter();
    let server = Sink::https(Mode::Ok);
    let (seen, count) = counter();
    let n = sink(
        &server,
        Format::Slack,
        settings(10, 2000, Duration::from_secs(30)),
        count.clone(),
    );
    n.send(message("a"));
    wait(
        "the message over TLS counted sent",
        Duration::from_secs(10),
        || server.received().len() == 1 && total(&seen, NotificationOutcome::Sent) == 1,
    );
    assert_eq!(total(&seen, NotificationOutcome::Sent), 1);

    // Another CA than the one that signed the server's certificate: never delivered.
    let other = Sink::https(Mode::Ok);
    let ca = other.ca_pem.as_deref().map(str::as_bytes);
    let ep = Endpoint::new("team", Format::Json, &server.url(), ca).expect("endpoint");
    let (seen, count) = counter();
    let s = settings(10, 500, Duration::from_millis(400));
    let n = notifier(ep, s, count);
    n.send(message("b"));
    wait("failed", Duration::from_secs(10), || {
        total(&seen, NotificationOutcome::Failed) == 1
    });
    assert_eq!(server.received().len(), 1);
}

#[test]
fn a_url_that_is_not_http_is_refused_without_quoting_it() {
    for url in ["ftp://x/s3cr3t", "not a url s3cr3t", "https:///s3cr3t"] {
        let e = Endpoint::new("team", Format::Json, url, None)
            .err()
            .expect("refused")
            .to_string();
        assert!(e.starts_with("sink team:"), "{e}");
        assert!(!e.contains("s3cr3t"), "{e}");
    }
}

/// A notifier of one sink at `server`, reached as `proxies` say.
fn proxied(server: &Sink, proxies: &Proxies, count: Count, retry_for: Duration) -> Notifier {
    let ep = endpoint(server, Format::Json).through(proxies);
    notifier(ep, settings(10, 2000, retry_for), count)
}

const PROXY_USER: (&str, &str) = ("headroom", "pr0xy-s3cr3t");

#[test]
fn through_a_forward_proxy_plain_http_and_a_tls_tunnel_arrive_with_its_credential() {
    let Some(bin) = require_tinyproxy() else {
        return;
    };
    let proxy = Proxy::start(&bin, Some(PROXY_USER));
    let url = proxy.url(Some(PROXY_USER));
    let proxies = Proxies::new(Some(&url), Some(&url), None).expect("proxies");
    let rt = runtime();
    let _g = rt.enter();

    let plain = Sink::http(Mode::Ok);
    let (seen, count) = counter();
    proxied(&plain, &proxies, count, Duration::from_secs(30)).send(message("a"));
    wait("the plain message", Duration::from_secs(10), || {
        plain.received().len() == 1 && total(&seen, NotificationOutcome::Sent) == 1
    });
    let post = format!("POST {} HTTP/1.1", plain.url());
    assert!(proxy.requests().contains(&post), "{:?}", proxy.requests());

    let tls = Sink::https(Mode::Ok);
    let (seen, count) = counter();
    proxied(&tls, &proxies, count, Duration::from_secs(30)).send(message("b"));
    wait(
        "the message through the tunnel",
        Duration::from_secs(10),
        || tls.received().len() == 1 && total(&seen, NotificationOutcome::Sent) == 1,
    );
    assert_eq!(tls.received()[0]["claim"], "b");
    let connect = format!("CONNECT localhost:{} HTTP/1.1", tls.port);
    assert!(
        proxy.requests().contains(&connect),
        "{:?}",
        proxy.requests()
    );
}

#[test]
fn a_proxy_refusing_the_credential_fails_the_message_and_no_proxy_goes_direct() {
    let Some(bin) = require_tinyproxy() else {
        return;
    };
    let proxy = Proxy::start(&bin, Some(PROXY_USER));
    let wrong = proxy.url(Some(("headroom", "wr0ng-s3cr3t")));
    let proxies = Proxies::new(Some(&wrong), Some(&wrong), None).expect("proxies");
    let rt = runtime();
    let _g = rt.enter();
    let tls = Sink::https(Mode::Ok);
    let ep = endpoint(&tls, Format::Json).through(&proxies);
    let e = rt
        .block_on(ep.post(b"{}".to_vec(), Duration::from_secs(5)))
        .expect_err("refused by the proxy")
        .to_string();
    assert!(
        e.starts_with("sink team: the proxy answered CONNECT with 4"),
        "{e}"
    );
    assert!(!e.contains("s3cr3t") && !e.contains("127.0.0.1"), "{e}");
    let (seen, count) = counter();
    proxied(&tls, &proxies, count, Duration::from_millis(400)).send(message("c"));
    wait("failed", Duration::from_secs(10), || {
        total(&seen, NotificationOutcome::Failed) == 1
    });
    assert!(tls.received().is_empty());

    // The sink's host in NO_PROXY: straight to it, the proxy (and its wrong password) unused.
    let asked = proxy.requests().len();
    let direct =
        Proxies::new(Some(&wrong), Some(&wrong), Some("example.org, localhost")).expect("proxies");
    let (seen, count) = counter();
    proxied(&tls, &direct, count, Duration::from_secs(30)).send(message("d"));
    wait("the direct message", Duration::from_secs(10), || {
        tls.received().len() == 1 && total(&seen, NotificationOutcome::Sent) == 1
    });
    assert_eq!(proxy.requests().len(), asked, "{:?}", proxy.requests());
}
