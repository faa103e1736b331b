//! The storage pool as a bound on a grow (issue 48) against the real kube-apiserver: the test
//! plays the provisioner, creating `CSIStorageCapacity` objects (storage.k8s.io/v1, labelled
//! with the driver's name as external-provisioner labels them) for the test's node and another
//! one, and writes TopoLVM's node annotation itself. The agent reads the objects through the
//! shipped `rbac/` (a list it is granted) and the Node it already watches; the server's audit
//! log is the record of what it sent.

mod support {
    pub mod cluster;
    pub mod http;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use support::cluster::{Cluster, available};
use support::kube::block;
use support::kube::cluster::POLICY;
use support::node::{MI, fill, request_of, wait_for};

/// The test CSI driver's name: the fast class's provisioner.
const DRIVER: &str = "test.csi.headroom.dev";
/// The node label the objects' segments select.
const SEGMENT: &str = "topology.headroom.dev/node";

/// Labels and annotations on the test's node, as topolvm-node and the kubelet would set them.
fn patch_node(c: &Cluster, meta: serde_json::Value) {
    let api: Api<Node> = Api::all(c.admin.0.clone());
    let body = json!({ "metadata": meta });
    block(async {
        api.patch(&c.node, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .expect("patch node")
    });
}

/// A `CSIStorageCapacity` of the fast class for the segment of node `node`.
fn capacity(c: &Cluster, name: &str, node: &str, capacity: &str) {
    let api: Api<CSIStorageCapacity> = Api::namespaced(c.admin.0.clone(), &c.ns);
    let o: CSIStorageCapacity = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": c.ns,
            "labels": {"csi.storage.k8s.io/drivername": DRIVER,
                       "csi.storage.k8s.io/managed-by": "external-provisioner"}},
        "storageClassName": c.fast,
        "nodeTopology": {"matchLabels": {SEGMENT: node}},
        "capacity": capacity,
    }))
    .expect("capacity");
    block(async {
        api.create(&PostParams::default(), &o)
            .await
            .expect("create capacity")
    });
}

fn set_capacity(c: &Cluster, name: &str, capacity: &str) {
    let api: Api<CSIStorageCapacity> = Api::namespaced(c.admin.0.clone(), &c.ns);
    let body = json!({ "capacity": capacity });
    block(async {
        api.patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .expect("patch capacity")
    });
}

/// The agent's LISTs of the test driver's CSIStorageCapacity objects (their request URIs), from
/// the audit log.
fn capacity_lists(c: &Cluster) -> Vec<String> {
    support::kube::audit::read(&c.server.audit_log())
        .into_iter()
        .filter(|e| e.user.username == support::kube::server::AGENT_USER)
        .filter(|e| e.verb == "list" && e.resource() == "csistoragecapacities")
        .filter(|e| e.request_uri.contains(DRIVER))
        .map(|e| e.request_uri)
        .collect()
}

/// Fill to a grow the pool cuts, then to one it cannot hold, then give the pool room again;
/// the claim's status `pool` while blocked.
fn cut_block_resume(
    c: &Cluster,
    mount: &std::path::Path,
    port: u16,
    free: impl Fn(&str),
) -> String {
    // 10Mi free: the 16Mi step does not fit, the 6Mi that takes 56Mi under 80 % does.
    fill(mount, 56 * MI);
    c.wait_capacity("data", 74 * MI);
    c.wait_resize_patches("data", 1);
    c.assert_one_event("data", "Resized", "Normal", "64Mi -> 74Mi");
    c.assert_one_event(
        "data",
        "Resized",
        "Normal",
        "(cut from 80Mi to fit the storage pool)",
    );

    // The provisioner's next poll: the grow took the pool's 10Mi.
    free("0");
    fill(mount, 70 * MI);
    c.wait_blocked("data", "pool_exhausted");
    // Many scans later (300 ms each): still one resize, one Event with the numbers.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(request_of(&c.get("data")), 74 * MI);
    assert_eq!(c.resize_patches("data"), 1, "resize PATCHes");
    c.assert_one_event("data", "PoolExhausted", "Warning", "has 0 free");
    c.assert_one_event("data", "PoolExhausted", "Warning", "the grow needs 16Mi");
    assert_eq!(
        support::http::blocked_metric(port, "data", "pool_exhausted"),
        Some(1.0)
    );
    let free_metric = support::http::claim_metric(port, "headroom_volume_pool_free_bytes", "data");
    assert_eq!(free_metric, Some(0.0));
    let pool = c.status_field("data", "pool").expect("pool in the status");
    assert!(pool.contains("\"freeBytes\":0"), "{pool}");

    // Room again: growth resumes with the full step.
    free("1Gi");
    c.wait_capacity("data", 90 * MI);
    c.wait_resize_patches("data", 2);
    assert_eq!(c.resize_patches("data"), 2, "resize PATCHes");
    pool
}

#[test]
fn csi_storage_capacity_cuts_the_step_then_blocks_without_a_patch_and_growth_resumes() {
    let test = "csi_storage_capacity_cuts_the_step_then_blocks_without_a_patch_and_growth_resumes";
    if !available(test, &[]) {
        return;
    }
    let mut c = Cluster::new();
    let node = c.node.clone();
    patch_node(&c, json!({"labels": {SEGMENT: node}}));
    let mount = c.claim("data", &c.fast.clone(), 64, POLICY);
    capacity(&c, "here", &node, "10Mi");
    // Another node's segment with room: not this claim's pool.
    capacity(&c, "elsewhere", "another-node", "100Gi");
    let _csi = c.csi(&[("data", mount.clone())], 100);
    let port = support::http::free_port();
    let listen = format!("127.0.0.1:{port}");
    let _agent = c.agent_on(&c.node, c.root.path(), "300ms", &["--listen", &listen]);
    wait_for(Duration::from_secs(20), "the first status", || {
        c.status_field("data", "state")
    });
    // Scans that decide nothing read no capacity.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        capacity_lists(&c),
        Vec::<String>::new(),
        "LISTs before any grow was needed"
    );
    let pool = cut_block_resume(&c, &mount, port, |free| set_capacity(&c, "here", free));
    assert!(pool.contains("CSIStorageCapacity"), "{pool}");
    // Bounded LISTs (pages of 500), one per decision that would grow.
    let lists = capacity_lists(&c);
    assert!(
        lists.len() >= 2,
        "a LIST per decision that would grow: {lists:?}"
    );
    assert!(lists.iter().all(|u| u.contains("limit=500")), "{lists:?}");
}

#[test]
fn topolvm_node_annotation_bounds_the_same_way() {
    let test = "topolvm_node_annotation_bounds_the_same_way";
    if !available(test, &[]) {
        return;
    }
    let mut c = Cluster::new();
    let class = format!("topolvm-{}", c.id);
    c.create(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": class}, "provisioner": "topolvm.io",
        "parameters": {"topolvm.io/device-class": "ssd"},
        "allowVolumeExpansion": true,
    }));
    let mount = c.claim("data", &class, 64, POLICY);
    let annotate = |free: &str| {
        let bytes = match free {
            "0" => 0,
            "1Gi" => 1024 * MI,
            other => headroom::quantity::parse(other).expect("size"),
        };
        // The default class's figure is not this claim's: its device class is ssd.
        patch_node(
            &c,
            json!({"annotations": {"capacity.topolvm.io/ssd": bytes.to_string(),
                                   "capacity.topolvm.io/00default": "107374182400"}}),
        );
    };
    annotate("10Mi");
    let _csi = c.csi(&[("data", mount.clone())], 100);
    let port = support::http::free_port();
    let listen = format!("127.0.0.1:{port}");
    let _agent = c.agent_on(&c.node, c.root.path(), "300ms", &["--listen", &listen]);
    wait_for(Duration::from_secs(20), "the first status", || {
        c.status_field("data", "state")
    });
    let pool = cut_block_resume(&c, &mount, port, annotate);
    assert!(pool.contains("capacity.topolvm.io/ssd"), "{pool}");
}
