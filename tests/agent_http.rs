//! The running agent's own endpoint: readiness after sync and a scan, metrics and /volumes that
//! describe the claim it measured.

#[path = "support/fake_api/mod.rs"]
mod fake_api;
mod support {
    pub mod http;
    pub mod node;
    pub mod root;
}

use std::time::Duration;

use fake_api::FakeApi;
use fake_api::fixtures::{bound_pvc, node, pod, storage_class};
use k8s_openapi::api::core::v1::Pod;
use support::http::{free_port, get};
use support::node::{Agent, AgentOpts, KubeletRoot, MI, fill, wait_for};

#[tokio::test(flavor = "multi_thread")]
async fn endpoint_reports_the_measured_claim() {
    if !support::root::require_root("endpoint_reports_the_measured_claim", &[]) {
        return;
    }
    let fake = FakeApi::start().await;
    fake.insert(node("node-a"));
    let mut class = storage_class("fast", true);
    class.metadata.annotations =
        Some([("headroom.dev/usage-threshold".to_string(), "90".to_string())].into());
    fake.insert(class);
    let mut pvc = bound_pvc("db", "data", "fast", "32Mi");
    pvc.metadata.annotations = Some(
        [
            ("headroom.dev/enabled", "true"),
            ("headroom.dev/limit", "64Mi"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into(),
    );
    fake.insert(pvc);
    let p: Pod = fake.insert(pod("db", "pg-0", "node-a", Some("data")));
    let mut root = KubeletRoot::new();
    let mount = root.tmpfs_volume(&p.metadata.uid.expect("uid"), "pv-data", 32 * MI);
    fill(&mount, 8 * MI);
    let kubeconfig = tempfile::NamedTempFile::new().expect("kubeconfig");
    fake.write_kubeconfig(kubeconfig.path());
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let _agent = Agent::spawn(&AgentOpts {
        kubeconfig: kubeconfig.path(),
        node: "node-a",
        root: root.path(),
        interval: "500ms",
        extra: &["--listen", &listen],
    });

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
        line.contains("namespace=\"db\"") && line.contains("node=\"node-a\""),
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
