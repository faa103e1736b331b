//! The running agent's own endpoint: readiness after sync and a scan, metrics and /volumes that
//! describe the claim it measured. The real API server, through the fault proxy.

mod support {
    pub mod cluster;
    pub mod http;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::time::Duration;

use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::json;
use support::cluster::{Cluster, available};
use support::http::{free_port, get};
use support::node::{MI, fill, wait_for};

#[test]
fn endpoint_reports_the_measured_claim() {
    if !available("endpoint_reports_the_measured_claim", &[]) {
        return;
    }
    let mut c = Cluster::new();
    let fast = c.fast.clone();
    c.patch_cluster::<StorageClass>(
        &fast,
        json!({"metadata": {"annotations": {"headroom.dev/usage-threshold": "90"}}}),
    );
    c.pvc(
        "data",
        &fast,
        32,
        &[("enabled", "true"), ("limit", "64Mi")],
        |_| {},
    );
    let uid = c.pod("pg-0", &c.node, "data");
    let pv = c.pv_name("data");
    let mount = c.root.tmpfs_volume(&uid, &pv, 32 * MI);
    fill(&mount, 8 * MI);
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let _agent = c.agent_on(&c.node, c.root.path(), "500ms", &["--listen", &listen]);

    wait_for(Duration::from_secs(15), "/live", || {
        get(port, "/live").filter(|(c, _)| *c == 200)
    });
    wait_for(Duration::from_secs(15), "/ready", || {
        get(port, "/ready").filter(|(c, _)| *c == 200)
    });

    let (code, metrics) = get(port, "/metrics").expect("metrics");
    assert_eq!(code, 200);
    let line = metrics
        .lines()
        .find(|l| {
            l.starts_with("headroom_volume_used_ratio{")
                && l.contains("persistentvolumeclaim=\"data\"")
        })
        .unwrap_or_else(|| panic!("no used ratio for the claim in:\n{metrics}"));
    assert!(
        line.contains(&format!("namespace=\"{}\"", c.ns))
            && line.contains(&format!("node=\"{}\"", c.node)),
        "{line}"
    );
    let ratio: f64 = line
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .expect("value");
    assert!((ratio - 0.25).abs() < 0.02, "8Mi of 32Mi used, got {ratio}");
    assert!(
        metrics.contains("headroom_volume_limit_bytes{")
            && metrics.contains(&(64 * MI).to_string())
    );
    // Every request of the agent's client is counted, watches and lists included.
    for verb in ["list", "watch"] {
        let counted = metrics.lines().any(|l| {
            l.starts_with("headroom_api_requests_total{")
                && l.contains(&format!("verb=\"{verb}\""))
                && l.contains("code=\"200\"")
        });
        assert!(counted, "no {verb} requests counted in:\n{metrics}");
    }

    let (_, volumes) = get(port, "/volumes").expect("volumes");
    let v: serde_json::Value = serde_json::from_str(&volumes).expect("json");
    let vol = &v["volumes"][0];
    assert_eq!(vol["pvc"], "data");
    assert_eq!(
        vol["provenance"]["usageThreshold"],
        "storage_class_annotation"
    );
    assert_eq!(vol["provenance"]["limit"], "pvc_annotation");
    assert_eq!(vol["decision"]["verdict"], "NoAction");
    assert_eq!(vol["decision"]["state"], "Balanced");
    // Issue 24: the RFC's status model in /volumes too.
    assert_eq!(vol["instance"], "pg-0");
    assert_eq!(vol["decision"]["emergency"], false);
    assert_eq!(vol["decision"]["effective_bytes"], 32 * MI);
    assert_eq!(vol["decision"]["budget"]["available_for_planned"], 3);
    assert_eq!(vol["decision"]["budget"]["actions_last_24h"], 0);
}

/// A port already taken stops the agent at start, naming the flag that asked for it; no API
/// server is needed (both are bound before the agent reads its kubeconfig).
#[test]
fn a_port_in_use_names_its_flag() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let free = format!("127.0.0.1:{}", free_port());
    for (flag, args) in [
        ("--listen", vec!["--listen", addr.as_str()]),
        (
            "--webhook-listen",
            vec!["--listen", free.as_str(), "--webhook-listen", addr.as_str()],
        ),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_headroom"))
            .arg("agent")
            .args(&args)
            .env("NODE_NAME", "node-a")
            .env("POD_NAMESPACE", "headroom")
            .env("KUBECONFIG", "/nonexistent")
            .output()
            .expect("run the agent");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag}: {stderr}");
        assert!(
            stderr.contains(&format!("{flag} {addr}: Address already in use")),
            "{flag}: {stderr}"
        );
    }
}
