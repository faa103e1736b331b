//! No scan waits on one slow thing (the real API server behind the fault proxy, real tmpfs
//! volumes, `headroom agent` as a child process): a Postgres pod whose address accepts
//! connections and never answers, and a PATCH the API server holds for seconds, each delay only
//! their own claim. The proxy holds the one PATCH; the blackholed Postgres is a real TCP
//! listener on loopback.

mod support {
    pub mod cluster;
    pub mod http;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::time::{Duration, Instant};

use support::cluster::{Cluster, ENABLED, available, history_len};
use support::http::free_port;
use support::node::{MI, fill, request_of, wait_for};

fn scans(port: u16) -> Option<f64> {
    support::http::metric(port, "headroom_scan_duration_seconds_count", &[])
}

/// Accepts every connection and never says a word (nor closes), counting the connections.
fn blackhole() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            held.push(stream);
        }
    });
    (port, accepted)
}

#[test]
fn a_blackholed_postgres_pod_delays_only_its_own_volume() {
    if !available("a_blackholed_postgres_pod_delays_only_its_own_volume", &[]) {
        return;
    }
    let (pg_port, accepted) = blackhole();
    let mut c = Cluster::new();
    let mut pg_policy = ENABLED.to_vec();
    pg_policy.extend([
        ("postgres-role", "data"),
        ("wal-safety-acknowledge-wal-risk", "true"),
    ]);
    let _pg = c.claim("a-pgdata", &c.fast.clone(), 64, &pg_policy);
    c.cnpg_instance("pod-a-pgdata", "pg");
    let password = tempfile::NamedTempFile::new().expect("password file");
    std::fs::write(password.path(), "secret\n").expect("password");
    let postgres_yaml = format!(
        "clusters:\n  - {{ namespace: {}, cluster: pg, operator: cloudnativepg, user: headroom, passwordFile: {}, port: {pg_port}, sslmode: disable }}\n",
        c.ns,
        password.path().display(),
    );
    c.configmap(serde_json::json!({ "postgres.yaml": postgres_yaml }));
    let other = c.claim("b-other", &c.fast.clone(), 64, ENABLED);
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let _agent = c.agent_on(&c.node, c.root.path(), "500ms", &["--listen", &listen]);
    wait_for(
        Duration::from_secs(15),
        "the agent to ask the blackholed Postgres",
        || (accepted.load(std::sync::atomic::Ordering::SeqCst) > 0).then_some(()),
    );
    // Scans keep their interval while the SQL connection hangs (it is bounded by its own
    // 5 s timeout, inside its own volume's work).
    let before = scans(port).expect("scan count");
    std::thread::sleep(Duration::from_secs(3));
    let done = scans(port).expect("scan count") - before;
    assert!(done >= 4.0, "only {done} scans in 3 s at a 500 ms interval");
    // The neighbour is grown within a scan or two of its fill, not after the hung query.
    fill(&other, 56 * MI);
    let filled = Instant::now();
    wait_for(Duration::from_secs(3), "the neighbour's resize", || {
        (request_of(&c.get("b-other")) == 80 * MI).then_some(())
    });
    eprintln!("neighbour grown {:?} after its fill", filled.elapsed());
}

#[test]
fn a_slow_patch_delays_only_its_own_claim_and_is_sent_once() {
    if !available(
        "a_slow_patch_delays_only_its_own_claim_and_is_sent_once",
        &[],
    ) {
        return;
    }
    let mut c = Cluster::new();
    // Sorted first, so a scan that handled volumes one by one would reach the other after it.
    let slow = c.claim("a-slow", &c.fast.clone(), 64, ENABLED);
    let quick = c.claim("b-quick", &c.fast.clone(), 64, ENABLED);
    c.proxy.set_slow(
        "PATCH",
        &format!("/namespaces/{}/persistentvolumeclaims/a-slow", c.ns),
        Duration::from_secs(6),
    );
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let _agent = c.agent_on(&c.node, c.root.path(), "500ms", &["--listen", &listen]);
    wait_for(
        Duration::from_secs(15),
        "the first status of the quick claim",
        || support::cluster::status_field(&c.get("b-quick"), "state"),
    );
    fill(&slow, 56 * MI);
    fill(&quick, 56 * MI);
    let filled = Instant::now();
    wait_for(Duration::from_secs(3), "the quick claim's resize", || {
        (request_of(&c.get("b-quick")) == 80 * MI).then_some(())
    });
    eprintln!("quick claim grown {:?} after its fill", filled.elapsed());
    // The slow PATCH lands when the server lets it, once: no second one was started meanwhile.
    wait_for(Duration::from_secs(15), "the slow claim's resize", || {
        (request_of(&c.get("a-slow")) == 80 * MI).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    let slow_patches = c
        .proxy
        .arrivals()
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with("/persistentvolumeclaims/a-slow"))
        .filter(|r| r.body.as_deref().is_some_and(|b| b.contains("\"storage\"")))
        .count();
    assert_eq!(slow_patches, 1, "resize PATCHes sent for the slow claim");
    assert_eq!(history_len(&c.get("a-slow")), 1);
    assert_eq!(request_of(&c.get("a-slow")), 80 * MI);
}
