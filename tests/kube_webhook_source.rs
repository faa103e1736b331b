//! Claims restored from a VolumeSnapshot or cloned from a claim, sized to their source by the
//! claim admission webhook (issue 40, item 3), on the real kube-apiserver + etcd with a
//! VolumeSnapshot CRD installed by the test: the server calls the agent's webhook (as
//! tests/kube_webhook.rs sets it up, with `overlays/webhook/`'s RBAC as shipped) and stores the
//! request it answers. No provisioner runs: what is checked is the size each claim is stored at,
//! which is what external-provisioner compares with the snapshot's `restoreSize` or the source
//! claim's capacity before it provisions.
//!
//! A `spec.dataSourceRef` into another namespace reaches the webhook as written (mutating
//! admission runs before the server drops fields of gates that are off), so the webhook's own
//! refusal to read another namespace's source is shown here, on the server; with
//! CrossNamespaceVolumeDataSource off (alpha, the default) the server then stores the claim
//! without the reference.

mod support {
    pub mod http;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::http::metric;
use support::kube::block;
use support::kube::cluster::{CNPG_GROUP_POLICY, KubeCluster, POLICY};
use support::kube::server;
use support::kube::webhook::{
    agent_calls, create_claim, create_claim_with, headroom_annotations, overlay_docs,
    serving_agent, webhook_cluster,
};
use support::node::{MI, wait_for};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// `headroom_webhook_requests_total{outcome}` of the agent whose admin endpoint is `admin`.
fn answered(admin: u16, outcome: &str) -> Option<f64> {
    metric(
        admin,
        "headroom_webhook_requests_total",
        &[&format!("outcome=\"{outcome}\"")],
    )
}

const CRD: &str = "volumesnapshots.snapshot.storage.k8s.io";

/// A VolumeSnapshot CRD with the real group, version, kind, plural and status subresource
/// (external-snapshotter's `client/config/crd`), its spec as upstream's. Upstream's status
/// schema holds `restoreSize` to a quantity's pattern; here the status keeps any field, so the
/// test can store what a looser CRD version or an aggregated API could serve.
fn snapshot_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        // A *.k8s.io group needs the API review's approval (KEP 1111); upstream's names its PR.
        "metadata": {"name": CRD, "annotations": {
            "api-approved.kubernetes.io": "https://github.com/kubernetes-csi/external-snapshotter/pull/419",
        }},
        "spec": {
            "group": "snapshot.storage.k8s.io",
            "names": {
                "kind": "VolumeSnapshot", "listKind": "VolumeSnapshotList",
                "plural": "volumesnapshots", "singular": "volumesnapshot", "shortNames": ["vs"],
            },
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object", "required": ["spec"],
                    "properties": {
                        "spec": {"type": "object", "required": ["source"], "properties": {
                            "source": {"type": "object", "properties": {
                                "persistentVolumeClaimName": {"type": "string"},
                                "volumeSnapshotContentName": {"type": "string"},
                            }},
                            "volumeSnapshotClassName": {"type": "string"},
                        }},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    },
                }},
            }],
        },
    }))
    .expect("CRD")
}

fn snapshots(c: &KubeCluster) -> Api<DynamicObject> {
    let ar = headroom::webhook::source::snapshot_resource();
    Api::namespaced_with(c.admin.0.clone(), &c.ns, &ar)
}

/// Installs the CRD and waits until the server serves it; `false` when it already was.
fn install_crd(c: &KubeCluster) -> bool {
    let crds: Api<CustomResourceDefinition> = Api::all(c.admin.0.clone());
    let created = block(async move {
        match crds.create(&PostParams::default(), &snapshot_crd()).await {
            Ok(_) => true,
            Err(kube::Error::Api(e)) if e.code == 409 => false,
            Err(e) => panic!("create the CRD: {e}"),
        }
    });
    let api = snapshots(c);
    wait_for(Duration::from_secs(30), "the VolumeSnapshot API", || {
        let api = api.clone();
        block(async move { api.list(&Default::default()).await.ok() })
    });
    created
}

/// A snapshot of `source` whose `status.restoreSize` is `restore_size` (set through the status
/// subresource, as the snapshot controller does).
fn snapshot(c: &KubeCluster, name: &str, restore_size: Value) {
    let ar = headroom::webhook::source::snapshot_resource();
    let mut obj = DynamicObject::new(name, &ar).within(&c.ns);
    obj.data = json!({"spec": {"source": {"persistentVolumeClaimName": "pg-1"}}});
    let api = snapshots(c);
    let status = json!({"status": {"readyToUse": true, "restoreSize": restore_size}});
    let name = name.to_string();
    block(async move {
        api.create(&PostParams::default(), &obj)
            .await
            .expect("create snapshot");
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .expect("snapshot status");
    });
}

fn from_snapshot(name: &str) -> Value {
    json!({"dataSource": {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": name}})
}

fn from_claim(name: &str) -> Value {
    json!({"dataSource": {"kind": "PersistentVolumeClaim", "name": name}})
}

/// Whether the agent may get volumesnapshots in the test's namespace.
fn agent_may_get_snapshots(c: &KubeCluster) -> bool {
    c.agent_may("snapshot.storage.k8s.io", "volumesnapshots", "get")
}

/// The webhook's ClusterRole with `rules` (a merge patch replaces the list whole).
fn set_webhook_rules(c: &KubeCluster, rules: Value) {
    c.patch_cluster::<ClusterRole>("headroom-webhook", json!({ "rules": rules }));
}

#[test]
fn restored_and_cloned_claims_are_born_at_their_sources_size() {
    if !server::available("restored_and_cloned_claims_are_born_at_their_sources_size") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let c = webhook_cluster();
    let policy = headroom_annotations(POLICY);
    // Created before the webhook is configured: a grown claim (capacity above its request, as
    // after a grow whose request was edited back, or a provisioner that rounds up) and a
    // CloudNativePG member of 80Mi.
    create_claim(&c, "source", 64, policy.clone(), json!({}));
    c.patch_status::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(
        "source",
        &json!({"status": {"phase": "Bound", "capacity": {"storage": "96Mi"}}}),
    );
    let cnpg = json!({"cnpg.io/cluster": "pg", "cnpg.io/pvcRole": "PG_DATA"});
    create_claim(
        &c,
        "pg-a",
        80,
        headroom_annotations(CNPG_GROUP_POLICY),
        cnpg.clone(),
    );

    let (_agent, admin) = serving_agent(&c);
    let answered = |outcome: &str| answered(admin, outcome);

    // No snapshot API yet (the server answers 404 for the whole resource): created as asked.
    let crd_absent = {
        let crds: Api<CustomResourceDefinition> = Api::all(c.admin.0.clone());
        block(async move { crds.get_opt(CRD).await.expect("get CRD") }).is_none()
    };
    assert!(
        crd_absent,
        "this test installs the CRD; the server is its process's own"
    );
    let restore = |name: &str, policy: &Value, snap: &str| {
        create_claim_with(&c, name, 64, policy.clone(), json!({}), from_snapshot(snap))
    };
    assert_eq!(restore("no-api", &policy, "big"), 64 * MI);
    assert_eq!(answered("source_unknown"), Some(1.0));

    assert!(install_crd(&c));
    snapshot(&c, "big", json!("96Mi"));
    snapshot(&c, "lots", json!("lots"));
    snapshot(&c, "negative", json!("-1Gi"));
    snapshot(&c, "absurd", json!("99999999999999999999Ei"));

    // Restored from a snapshot of a grown volume: born at its restoreSize.
    assert_eq!(restore("restored", &policy, "big"), 96 * MI);
    // Never above its limit.
    let mut capped = policy.clone();
    capped["headroom.dev/limit"] = json!("72Mi");
    assert_eq!(restore("capped", &capped, "big"), 72 * MI);
    // A clone of a grown claim: born at its capacity.
    let clone = create_claim_with(
        &c,
        "clone",
        64,
        policy.clone(),
        json!({}),
        from_claim("source"),
    );
    assert_eq!(clone, 96 * MI);
    // Not opted in: as asked, and its snapshot is not read.
    assert_eq!(restore("asked", &json!({}), "big"), 64 * MI);
    assert_eq!(answered("raised"), Some(3.0));
    // Hostile or missing sources: created as asked, counted, never refused.
    for snap in ["lots", "negative", "absurd", "missing"] {
        assert_eq!(restore(&format!("hostile-{snap}"), &policy, snap), 64 * MI);
    }
    let missing_claim = create_claim_with(
        &c,
        "clone-of-none",
        64,
        policy.clone(),
        json!({}),
        from_claim("none"),
    );
    assert_eq!(missing_claim, 64 * MI);
    assert_eq!(answered("source_unknown"), Some(6.0));
    // A member of a group whose snapshot is missing: its group's size still applies.
    let member = create_claim_with(
        &c,
        "pg-b",
        64,
        headroom_annotations(CNPG_GROUP_POLICY),
        cnpg.clone(),
        from_snapshot("missing"),
    );
    assert_eq!(member, 80 * MI);
    assert_eq!(answered("source_unknown"), Some(7.0));
    // A snapshot of another namespace through dataSourceRef: never read (no GET of it below),
    // created as asked and counted as a source the webhook could not size.
    let other_ns = json!({"dataSourceRef": {
        "apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "big", "namespace": "kube-system",
    }});
    assert_eq!(
        create_claim_with(&c, "cross", 64, policy.clone(), json!({}), other_ns),
        64 * MI
    );
    assert_eq!(answered("source_unknown"), Some(8.0));
    assert_eq!(answered("as_requested"), Some(1.0));
    // Then the server drops the reference whole (CrossNamespaceVolumeDataSource is off): the
    // claim is an empty volume, which its request fits.
    let stored = c.get("cross").spec.expect("spec");
    assert_eq!((stored.data_source_ref, stored.data_source), (None, None));

    // RBAC without volumesnapshots get: created as asked, counted; the grant restored, sized.
    let rules = overlay_docs("rbac.yaml")
        .into_iter()
        .find(|d| d["kind"] == "ClusterRole")
        .expect("the overlay's ClusterRole")["rules"]
        .clone();
    let without: Vec<Value> = rules
        .as_array()
        .expect("rules")
        .iter()
        .filter(|r| r["resources"] != json!(["volumesnapshots"]))
        .cloned()
        .collect();
    set_webhook_rules(&c, json!(without));
    wait_for(Duration::from_secs(20), "the grant to be gone", || {
        (!agent_may_get_snapshots(&c)).then_some(())
    });
    assert_eq!(restore("refused", &policy, "big"), 64 * MI);
    assert_eq!(answered("source_unknown"), Some(9.0));
    set_webhook_rules(&c, rules);
    wait_for(Duration::from_secs(20), "the grant to be back", || {
        agent_may_get_snapshots(&c).then_some(())
    });
    assert_eq!(restore("granted", &policy, "big"), 96 * MI);

    // Snapshots read only for claims that opted in, by name, in the claim's namespace: no-api,
    // restored, capped, the four hostile ones, pg-b, refused and granted; never for "asked". (The
    // server writes an audit record after its answer: waited for.)
    let gets = wait_for(Duration::from_secs(5), "the audit records", || {
        let gets = agent_calls(&c, "volumesnapshots", "get");
        (gets.len() >= 10).then_some(gets)
    });
    let read: Vec<_> = gets.iter().filter_map(|e| e.name()).collect();
    assert_eq!(read.len(), 10, "{read:?}");
    assert!(
        gets.iter().all(|e| e.namespace() == Some(c.ns.as_str())),
        "{read:?}"
    );
    // Born at size: the webhook's patch, not a PATCH by the agent afterwards.
    for name in ["restored", "capped", "clone", "pg-b", "granted"] {
        assert!(c.claim_writes(name).is_empty(), "{name}");
    }
    assert_eq!(answered("lookup_failed"), Some(0.0));
    assert_eq!(answered("timed_out"), Some(0.0));
}
