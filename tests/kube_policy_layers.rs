//! Issue 42's policy layers on a real kube-apiserver 1.20 + etcd (tests/support/kube), the agent
//! as its own service account with the project's `rbac/`: a claim's Namespace annotations and
//! the central ConfigMap's selector sections, read live from the watches the agent already has,
//! shown by `headroom status --policy` with the layer of each key, and refused with an Event
//! when they cannot be read. The test plays the PV binder, the scheduler and the kubelet + CSI
//! driver, as in `kube_agent.rs`.

mod support {
    pub mod http;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use serde_json::json;
use support::kube::cluster::{KubeCluster, annotation};
use support::kube::server;
use support::node::{MI, fill};

/// [`support::kube::cluster::POLICY`] as a Namespace's or a section's words.
const NS_POLICY: &[(&str, &str)] = &[
    ("headroom.dev/enabled", "true"),
    ("headroom.dev/limit", "200Mi"),
    ("headroom.dev/step", "16Mi"),
    ("headroom.dev/max-actions-per-day", "5"),
    ("headroom.dev/emergency-grow-critical-minimum-free", "1Mi"),
];

fn annotate_namespace(c: &KubeCluster, pairs: &[(&str, &str)]) {
    let annotations: serde_json::Map<String, serde_json::Value> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    c.patch_cluster::<Namespace>(&c.ns, json!({"metadata": {"annotations": annotations}}));
}

/// `headroom status --policy` of one claim as JSON: key -> (source, origin).
fn layers(c: &KubeCluster, claim: &str, extra: &[&str]) -> Vec<(String, String, String)> {
    let mut args = vec!["--policy", "-n", &c.ns, claim, "--format", "json"];
    args.extend_from_slice(extra);
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&c.headroom_status(&args)).expect("status JSON");
    assert_eq!(rows.len(), 1, "{rows:?}");
    rows[0]["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| {
            let s = |f: &str| k[f].as_str().unwrap_or("-").to_string();
            (s("key"), s("source"), s("origin"))
        })
        .collect()
}

fn layer_of(rows: &[(String, String, String)], key: &str) -> (String, String) {
    let (_, source, origin) = rows.iter().find(|r| r.0 == key).expect(key);
    (source.clone(), origin.clone())
}

#[test]
fn a_namespace_annotated_enabled_with_a_limit_grows_its_unannotated_claims() {
    if !server::available("a_namespace_annotated_enabled_with_a_limit_grows_its_unannotated_claims")
    {
        return;
    }
    let mut c = KubeCluster::new();
    let fast = c.fast.clone();
    // 95 % first: 56Mi of 64Mi (87.5 %) is under it; the Namespace says 80 % next.
    let mut words = NS_POLICY.to_vec();
    words.push(("headroom.dev/usage-threshold", "95"));
    annotate_namespace(&c, &words);
    let mount = c.claim("data", &fast, 64, &[]);
    let _csi = c.csi(&[("data", mount.clone())], 200);
    fill(&mount, 56 * MI);
    let _agent = c.agent("500ms", &[]);
    wait_used_over(&c, "data", 85.0);
    std::thread::sleep(Duration::from_millis(1500));
    c.assert_resize_patches("data", 0);
    assert_eq!(c.status_field("data", "state").as_deref(), Some("Balanced"));

    let rows = layers(&c, "data", &[]);
    let ns_origin = |key: &str| format!("Namespace {} annotation headroom.dev/{key}", c.ns);
    assert_eq!(
        layer_of(&rows, "enabled"),
        ("namespace_annotation".into(), ns_origin("enabled"))
    );
    assert_eq!(layer_of(&rows, "limit").0, "namespace_annotation");
    assert_eq!(layer_of(&rows, "usageThreshold").0, "namespace_annotation");
    assert_eq!(layer_of(&rows, "inodeThreshold").0, "default");

    // Live: the Namespace's next words reach the existing claim at the next scan.
    annotate_namespace(&c, &[("headroom.dev/usage-threshold", "80")]);
    c.wait_capacity("data", 80 * MI);
    c.assert_resize_patches("data", 1);
    assert_eq!(c.history_len("data"), 1);
    // The claim's own words still win over its Namespace's.
    c.patch_claim(
        "data",
        json!({"metadata": {"annotations": {"headroom.dev/limit": "100Mi"}}}),
    );
    let rows = layers(&c, "data", &[]);
    assert_eq!(layer_of(&rows, "limit").0, "pvc_annotation");
    assert_eq!(layer_of(&rows, "step").0, "namespace_annotation");
}

#[test]
fn a_typo_in_a_namespace_annotation_is_an_invalid_policy_event_and_no_patch() {
    if !server::available(
        "a_typo_in_a_namespace_annotation_is_an_invalid_policy_event_and_no_patch",
    ) {
        return;
    }
    let mut c = KubeCluster::new();
    let fast = c.fast.clone();
    let mut words = NS_POLICY.to_vec();
    words.push(("headroom.dev/usage-treshold", "80"));
    annotate_namespace(&c, &words);
    let mount = c.claim("data", &fast, 64, &[]);
    fill(&mount, 56 * MI);
    let _agent = c.agent("500ms", &[]);
    c.wait_blocked("data", "invalid_policy");
    std::thread::sleep(Duration::from_secs(2));
    c.assert_resize_patches("data", 0);
    c.assert_one_event(
        "data",
        "InvalidPolicy",
        "Warning",
        &format!("unknown headroom annotation on Namespace {}", c.ns),
    );
    c.assert_one_event(
        "data",
        "InvalidPolicy",
        "Warning",
        "headroom.dev/usage-treshold",
    );
}

/// The agent and `status --policy` read the ConfigMap `headroom/<name>`.
fn selector_configmap(c: &KubeCluster, name: &str, selectors: &str) {
    c.create(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "headroom"},
        "data": {"selectors.yaml": selectors},
    }));
}

#[test]
fn a_selector_section_for_one_cluster_applies_to_its_claims_only() {
    if !server::available("a_selector_section_for_one_cluster_applies_to_its_claims_only") {
        return;
    }
    let mut c = KubeCluster::new();
    let fast = c.fast.clone();
    let cm = format!("sel-{}", c.id);
    // Section 0 is broken, but for another namespace: it delays nothing here.
    selector_configmap(
        &c,
        &cm,
        &format!(
            "- namespaces: [elsewhere]\n  matchExpressions: [{{key: app, operator: Equals, values: [x]}}]\n  policy: {{enabled: true, limit: 1Gi}}\n- namespaces: [{}]\n  matchLabels: {{cnpg.io/cluster: pg-main}}\n  policy:\n    enabled: true\n    limit: 200Mi\n    step: 16Mi\n    maxActionsPerDay: 5\n    emergencyGrow: {{criticalMinimumFree: 1Mi}}\n    walSafety: {{acknowledgeWALRisk: true}}\n",
            c.ns
        ),
    );
    let mut mounts = Vec::new();
    for (name, cluster) in [("pg-main-1", "pg-main"), ("pg-other-1", "pg-other")] {
        c.pvc(name, &fast, 64, &[], |p| {
            p["metadata"]["labels"] =
                json!({"cnpg.io/cluster": cluster, "cnpg.io/pvcRole": "PG_DATA"});
        });
        let uid = c.pod(name, &c.node.clone(), name);
        let pv = c.pv_name(name);
        let mount = c.root.tmpfs_volume(&uid, &pv, 64 * MI);
        fill(&mount, 56 * MI);
        mounts.push((name, mount));
    }
    let _csi = c.csi(&mounts, 200);
    let _agent = c.agent("500ms", &["--configmap", &cm]);
    c.wait_capacity("pg-main-1", 80 * MI);
    std::thread::sleep(Duration::from_secs(2));
    c.assert_resize_patches("pg-main-1", 1);
    assert_eq!(c.claim_writes("pg-other-1").len(), 0);
    assert!(annotation(&c.get("pg-other-1"), "headroom.dev/status").is_none());
    assert_eq!(c.events_for("pg-other-1"), vec![]);

    let rows = layers(&c, "pg-main-1", &["--configmap", &cm]);
    assert_eq!(
        layer_of(&rows, "limit"),
        (
            "config_map_selector".into(),
            format!("ConfigMap headroom/{cm} key selectors.yaml, section 1")
        )
    );
    assert_eq!(layer_of(&rows, "usageThreshold").0, "default");
    let rows = layers(&c, "pg-other-1", &["--configmap", &cm]);
    assert_eq!(layer_of(&rows, "enabled").0, "default");
}

fn wait_used_over(c: &KubeCluster, claim: &str, pct: f64) {
    support::node::wait_for(Duration::from_secs(20), "a status with the fill", || {
        let used: f64 = c.status_field(claim, "usedPercent")?.parse().ok()?;
        (used > pct).then_some(())
    });
}
