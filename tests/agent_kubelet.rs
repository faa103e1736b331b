//! The kubelet's own numbers come from this node's kubelet over TLS, with the service account's
//! token (RBAC nodes/stats, never nodes/proxy): asked only when statfs missed a volume, at most
//! once a minute; they stand in for the blind volume and cross-check the others. The real API
//! server, through the fault proxy.

mod support {
    pub mod cluster;
    pub mod http;
    pub mod kube;
    pub mod kubelet_tls;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::time::Duration;

use headroom::agent::kubelet_stats_https::{KubeletEndpoint, KubeletError, fetch_summary};
use serde_json::json;
use support::cluster::{Cluster, ENABLED, available, status_field};
use support::http::{claim_metric, free_port, get};
use support::kube::block;
use support::kubelet_tls::{FakeKubelet, make_certificates};
use support::node::{MI, fill, wait_for};

fn kubelet_volume(ns: &str, claim: &str, capacity: u64, used: u64) -> serde_json::Value {
    json!({
        "time": jiff::Timestamp::now().to_string(), "name": "data",
        "pvcRef": { "name": claim, "namespace": ns },
        "capacityBytes": capacity, "usedBytes": used, "availableBytes": capacity - used,
        "inodes": 16384, "inodesUsed": 2, "inodesFree": 16382,
    })
}

/// The kubelet's summary of the pods of `c`'s node in its namespace, one claim each.
fn summary(c: &Cluster, volumes: &[(&str, u64)]) -> serde_json::Value {
    let pods: Vec<_> = volumes
        .iter()
        .map(|(claim, used)| {
            json!({ "podRef": { "name": format!("pod-{claim}"), "namespace": c.ns },
                    "volume": [kubelet_volume(&c.ns, claim, 64 * MI, *used)] })
        })
        .collect();
    json!({ "node": { "nodeName": c.node }, "pods": pods })
}

#[test]
fn a_blind_volume_gets_the_kubelets_numbers_and_the_others_a_cross_check() {
    if !available("a_blind_volume_gets_the_kubelets_numbers", &[]) {
        return;
    }
    let mut c = Cluster::new();
    let kubelet = block(FakeKubelet::start(summary(
        &c,
        &[
            ("off", 16 * MI + 64 * MI / 5),
            ("same", 16 * MI),
            ("blind", 40 * MI),
        ],
    )));
    let fast = c.fast.clone();
    let off = c.claim("off", &fast, 64, ENABLED);
    let same = c.claim("same", &fast, 64, ENABLED);
    fill(&off, 16 * MI);
    fill(&same, 16 * MI);
    // statfs cannot see this one: its mount directory is a symlink, which is never followed.
    c.pvc("blind", &fast, 64, ENABLED, |_| {});
    let uid = c.pod("pod-blind", &c.node, "blind");
    let mount = c.root.csi_mount_point(&uid, &c.pv_name("blind"));
    std::fs::remove_dir(&mount).expect("rmdir");
    std::os::unix::fs::symlink("/tmp", &mount).expect("symlink");

    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut flags = vec!["--listen".to_string(), listen];
    flags.extend(kubelet.agent_flags());
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let _agent = c.agent_on(&c.node, c.root.path(), "300ms", &flags);
    let name = "headroom_kubelet_statfs_disagreement_ratio";
    let (off, same) = wait_for(Duration::from_secs(15), name, || {
        Some((
            claim_metric(port, name, "off")?,
            claim_metric(port, name, "same")?,
        ))
    });
    assert!(
        (off - 0.2).abs() < 0.01,
        "20 % apart, the metric says {off}"
    );
    assert!(same < 0.01, "in agreement, the metric says {same}");
    // The cross-check's metric is set during a scan, /volumes when the scan is done: wait for it.
    let blind = wait_for(Duration::from_secs(15), "blind in /volumes", || {
        let (_, body) = get(port, "/volumes")?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        v["volumes"]
            .as_array()?
            .iter()
            .find(|x| x["pvc"] == "blind")
            .cloned()
    });
    assert_eq!(blind["measured_by"], "kubelet", "{blind}");
    assert_eq!(blind["measurement"]["used_bytes"], 40 * MI, "{blind}");
    // Many scans later: still the one request (at most once a minute), with the token.
    std::thread::sleep(Duration::from_secs(2));
    let seen = kubelet.requests();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].path, "/stats/summary");
    assert!(seen[0].authorized, "{seen:?}");
}

#[test]
fn the_kubelet_is_not_asked_when_statfs_measured_everything() {
    if !available(
        "the_kubelet_is_not_asked_when_statfs_measured_everything",
        &[],
    ) {
        return;
    }
    let mut c = Cluster::new();
    let kubelet = block(FakeKubelet::start(summary(&c, &[("seen", 16 * MI)])));
    c.claim("seen", &c.fast.clone(), 64, ENABLED);
    let flags = kubelet.agent_flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let _agent = c.agent_on(&c.node, c.root.path(), "300ms", &flags);
    wait_for(Duration::from_secs(15), "a status", || {
        status_field(&c.get("seen"), "state")
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(kubelet.requests().is_empty(), "{:?}", kubelet.requests());
}

#[tokio::test]
async fn the_kubelet_client_checks_the_ca_and_sends_the_token() {
    let kubelet = FakeKubelet::start(json!({ "node": { "nodeName": "node-a" }, "pods": [{
        "podRef": { "name": "pod-x", "namespace": "db" },
        "volume": [kubelet_volume("db", "x", 64 * MI, 1)],
    }] }))
    .await;
    let ep = |ca: &std::path::Path, token: &std::path::Path| KubeletEndpoint {
        host: "127.0.0.1".into(),
        port: kubelet.port,
        ca_file: ca.to_path_buf(),
        token_file: token.to_path_buf(),
    };
    let t = Duration::from_secs(10);
    let body = fetch_summary(&ep(&kubelet.ca, &kubelet.token), t)
        .await
        .expect("summary");
    let parsed = headroom::agent::kubelet_stats::parse(&body).expect("parse");
    assert_eq!(parsed.len(), 1);

    // Another CA: the TLS handshake fails before any request (so no token is sent).
    let other = tempfile::tempdir().expect("dir");
    let (other_ca, _, _) = make_certificates(other.path());
    let before = kubelet.requests().len();
    let e = fetch_summary(&ep(&other_ca, &kubelet.token), t)
        .await
        .expect_err("another CA");
    assert!(matches!(e, KubeletError::Connect { .. }), "{e}");
    assert_eq!(kubelet.requests().len(), before);

    // A wrong token: the kubelet says 401, which is an error, not an empty summary.
    let wrong = other.path().join("token");
    std::fs::write(&wrong, "not-the-token").expect("token");
    let e = fetch_summary(&ep(&kubelet.ca, &wrong), t)
        .await
        .expect_err("401");
    assert!(matches!(e, KubeletError::Status { status: 401, .. }), "{e}");
}
