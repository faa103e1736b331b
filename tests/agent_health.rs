//! The running agent's health endpoints tell the truth: through an API outage (watches failing)
//! and a kubelet root that hangs (every scan fails to measure), then recovery. The real API
//! server; its outages and hangs are the fault proxy's.

mod support {
    pub mod cluster;
    pub mod http;
    pub mod hung;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::time::Duration;

use support::cluster::{Cluster, ENABLED, available};
use support::http::{free_port, get, metric};
use support::hung::HungMount;
use support::node::{Agent, MI, fill, wait_for};

fn status(port: u16, path: &str) -> Option<(u16, String)> {
    get(port, path)
}

fn start(c: &Cluster, extra: &[&str]) -> (Agent, u16) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut args = vec!["--listen", listen.as_str()];
    args.extend_from_slice(extra);
    let agent = c.agent_on(&c.node, c.root.path(), "1s", &args);
    wait_for(Duration::from_secs(20), "/ready", || {
        status(port, "/ready").filter(|(code, _)| *code == 200)
    });
    (agent, port)
}

#[test]
fn an_api_outage_makes_the_agent_unready_and_recovery_ready_while_it_stays_live() {
    if !available(
        "an_api_outage_makes_the_agent_unready_and_recovery_ready_while_it_stays_live",
        &[],
    ) {
        return;
    }
    let mut c = Cluster::new();
    c.claim("data", &c.fast.clone(), 64, ENABLED);
    let (mut agent, port) = start(&c, &["--api-timeout", "1s"]);

    // Stopped: every request fails and the open watches end; they fail on every retry.
    c.proxy.set_failing(true);
    c.proxy.drop_watches();
    let (_, body) = wait_for(Duration::from_secs(30), "/ready 503", || {
        status(port, "/ready").filter(|(code, _)| *code == 503)
    });
    assert!(body.contains("watch has been failing since"), "{body}");
    assert_eq!(status(port, "/live").map(|r| r.0), Some(200));
    assert!(agent.child.try_wait().expect("try_wait").is_none());
    let restarts = metric(port, "headroom_watch_restarts_total", &[]).unwrap_or(0.0);
    assert!(restarts >= 1.0, "watch restarts: {restarts}");

    // Back: each watch relists (after its backoff) and the agent is ready again.
    c.proxy.set_failing(false);
    wait_for(Duration::from_secs(90), "/ready 200 after recovery", || {
        status(port, "/ready").filter(|(code, _)| *code == 200)
    });
    assert_eq!(status(port, "/live").map(|r| r.0), Some(200));
}

#[test]
fn a_hung_kubelet_root_fails_scans_keeps_the_last_values_and_recovers() {
    if !available(
        "a_hung_kubelet_root_fails_scans_keeps_the_last_values_and_recovers",
        &[("bindfs", "bindfs")],
    ) {
        return;
    }
    let mut c = Cluster::new();
    let mount = c.claim("data", &c.fast.clone(), 64, ENABLED);
    fill(&mount, 8 * MI);
    let (_agent, port) = start(&c, &["--probe-timeout", "1s"]);
    let pvc = ["persistentvolumeclaim=\"data\""];
    let used = wait_for(Duration::from_secs(20), "used bytes", || {
        metric(port, "headroom_volume_used_bytes", &pvc).filter(|u| *u >= (8 * MI) as f64)
    });

    // A pod directory the discovery walks into hangs (a stopped FUSE filesystem mounted on
    // it): no scan can list the node's volumes, so none measures anything.
    let empty = tempfile::tempdir().expect("bindfs source");
    let pod_dir = c.root.path().join("pods").join("pod-on-hung-storage");
    std::fs::create_dir(&pod_dir).expect("pod dir");
    let hung = HungMount::start(empty.path(), &pod_dir);
    let failures = |p| metric(p, "headroom_scan_failures_total", &[]).unwrap_or(0.0);
    wait_for(Duration::from_secs(20), "three failed scans", || {
        (failures(port) >= 3.0).then_some(())
    });
    let last_ok = metric(port, "headroom_last_successful_scan_timestamp_seconds", &[])
        .expect("last successful scan");
    let measured = metric(port, "headroom_volume_measured_timestamp_seconds", &pvc)
        .expect("measured timestamp");
    // Failed scans are not successes: the timestamp stays, the last good numbers stay, marked
    // by their own (unchanging) measurement time.
    let before = failures(port);
    wait_for(Duration::from_secs(20), "two more failed scans", || {
        (failures(port) >= before + 2.0).then_some(())
    });
    assert_eq!(
        metric(port, "headroom_last_successful_scan_timestamp_seconds", &[]),
        Some(last_ok)
    );
    assert_eq!(
        metric(port, "headroom_volume_used_bytes", &pvc),
        Some(used),
        "the last good value"
    );
    assert_eq!(
        metric(port, "headroom_volume_measured_timestamp_seconds", &pvc),
        Some(measured)
    );
    // The discovery call is stuck once; later scans do not start another.
    assert_eq!(metric(port, "headroom_probe_stuck_calls", &[]), Some(1.0));
    // Unready once the last success is over three intervals old; live, since the loop turns.
    let (_, body) = wait_for(Duration::from_secs(20), "/ready 503", || {
        status(port, "/ready").filter(|(code, _)| *code == 503)
    });
    assert!(body.contains("last successful scan"), "{body}");
    assert_eq!(status(port, "/live").map(|r| r.0), Some(200));

    // The filesystem answers again and goes away: scans succeed, the agent is ready.
    hung.resume();
    drop(hung);
    wait_for(Duration::from_secs(20), "/ready 200 after recovery", || {
        status(port, "/ready").filter(|(code, _)| *code == 200)
    });
    let newer = metric(port, "headroom_volume_measured_timestamp_seconds", &pvc)
        .expect("measured timestamp");
    assert!(newer > measured, "{newer} vs {measured}");
    assert_eq!(metric(port, "headroom_probe_stuck_calls", &[]), Some(0.0));
}

#[test]
fn an_api_server_that_stops_answering_makes_the_agent_unready_until_it_answers() {
    if !available(
        "an_api_server_that_stops_answering_makes_the_agent_unready_until_it_answers",
        &[],
    ) {
        return;
    }
    let mut c = Cluster::new();
    c.claim("data", &c.fast.clone(), 64, ENABLED);
    let (mut agent, port) = start(&c, &["--api-timeout", "1s"]);

    // Hung: connections are accepted but answers take 8 s; the watches reconnect into that.
    // No watch fails, none yields: only the unanswered request shows it.
    c.proxy.set_delay(Duration::from_secs(8));
    c.proxy.drop_watches();
    let (_, body) = wait_for(Duration::from_secs(20), "/ready 503", || {
        status(port, "/ready").filter(|(code, _)| *code == 503)
    });
    assert!(
        body.contains("request to the API server has waited since"),
        "{body}"
    );
    // Scans go on (each of their requests is bounded by --api-timeout): the agent is live.
    let scans = |p| metric(p, "headroom_scan_duration_seconds_count", &[]).unwrap_or(0.0);
    let before = scans(port);
    wait_for(Duration::from_secs(20), "scans while the API hangs", || {
        (scans(port) >= before + 3.0).then_some(())
    });
    assert_eq!(status(port, "/live").map(|r| r.0), Some(200));
    assert!(agent.child.try_wait().expect("try_wait").is_none());

    // Answering again: the waiting requests get their answers and the agent is ready.
    c.proxy.set_delay(Duration::ZERO);
    wait_for(Duration::from_secs(60), "/ready 200 after recovery", || {
        status(port, "/ready").filter(|(code, _)| *code == 200)
    });
}
