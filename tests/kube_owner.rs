//! Growth through the owning cluster (`resizeThrough: owner`, issue 42) against a real
//! kube-apiserver 1.20 + etcd: the test installs its own minimal CRDs for CloudNativePG's
//! `postgresql.cnpg.io/v1` `Cluster` and Zalando's `acid.zalan.do/v1` `postgresql` (the same group,
//! version, kind and plural; their spec keeps any field) and plays the operator, copying the
//! declared size to the cluster's claims; the test's CSI driver then resizes them. The agent runs as its service account with `rbac/` and
//! `overlays/resize-through-owner/`. The audit log is the record of every write.

mod support {
    pub mod http;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::kube::block;
use support::kube::cluster::{KubeCluster, POLICY, annotation, apply_manifest};
use support::kube::server;
use support::node::{MI, fill, request_of, wait_for};

/// An operator's cluster kind as the test needs it: its API, where it declares the data
/// volume's size, and the labels it puts on its claims.
struct Kind {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    /// Where the spec declares the data volume's size (a JSON pointer into `spec`).
    size: &'static str,
}

const CNPG: Kind = Kind {
    group: "postgresql.cnpg.io",
    version: "v1",
    kind: "Cluster",
    plural: "clusters",
    size: "/storage/size",
};

const ZALANDO: Kind = Kind {
    group: "acid.zalan.do",
    version: "v1",
    kind: "postgresql",
    plural: "postgresqls",
    size: "/volume/size",
};

/// PGO v5: instance set `set1` is the second of two, so the patch must address it by index.
const CRUNCHY: Kind = Kind {
    group: "postgres-operator.crunchydata.com",
    version: "v1beta1",
    kind: "PostgresCluster",
    plural: "postgresclusters",
    size: "/instances/1/dataVolumeClaimSpec/resources/requests/storage",
};

impl Kind {
    /// `spec` declaring `size` for the data volume.
    fn spec(&self, size: &str) -> Value {
        if self.group == CRUNCHY.group {
            let claim = |s: &str| json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": s}}});
            return json!({"instances": [
                {"name": "set0", "dataVolumeClaimSpec": claim("1Gi")},
                {"name": "set1", "dataVolumeClaimSpec": claim(size)},
            ]});
        }
        let keys: Vec<&str> = self.size.split('/').skip(1).collect();
        keys.iter()
            .rev()
            .fold(json!(size), |v, key| json!({ *key: v }))
    }

    fn declared(&self, spec: &Value) -> Value {
        spec.pointer(self.size).cloned().unwrap_or(Value::Null)
    }

    /// The labels (and ownerReference) the operator puts on instance `name`'s data claim.
    fn claim_meta(&self, name: &str, uid: &str) -> Value {
        let labels = match self.group {
            "postgresql.cnpg.io" => {
                json!({"cnpg.io/cluster": "pg", "cnpg.io/pvcRole": "PG_DATA", "cnpg.io/instanceName": name})
            }
            "acid.zalan.do" => json!({"application": "spilo", "cluster-name": "pg"}),
            _ => json!({
                "postgres-operator.crunchydata.com/cluster": "pg",
                "postgres-operator.crunchydata.com/instance-set": "set1",
                "postgres-operator.crunchydata.com/data": "postgres",
                "postgres-operator.crunchydata.com/role": "pgdata",
                "postgres-operator.crunchydata.com/instance": format!("pg-set1-{name}"),
            }),
        };
        json!({"labels": labels, "ownerReferences": [{
            "apiVersion": format!("{}/{}", self.group, self.version), "kind": self.kind, "name": "pg",
            "uid": uid, "controller": true,
        }]})
    }
}

fn resource(k: &Kind) -> ApiResource {
    let gvk = GroupVersionKind::gvk(k.group, k.version, k.kind);
    ApiResource::from_gvk_with_plural(&gvk, k.plural)
}

fn owners(c: &KubeCluster, k: &Kind) -> Api<DynamicObject> {
    Api::namespaced_with(c.admin.0.clone(), &c.ns, &resource(k))
}

fn clusters(c: &KubeCluster) -> Api<DynamicObject> {
    owners(c, &CNPG)
}

/// Installs the kind's CRD (once per server) and waits until the server serves it.
fn install_crd(c: &KubeCluster, k: &Kind) {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{}.{}", k.plural, k.group)},
        "spec": {
            "group": k.group,
            "names": {"kind": k.kind, "listKind": format!("{}List", k.kind), "plural": k.plural, "singular": k.kind.to_lowercase()},
            "scope": "Namespaced",
            "versions": [{
                "name": k.version, "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                }}},
            }],
        },
    }))
    .expect("CRD");
    let crds: Api<CustomResourceDefinition> = Api::all(c.admin.0.clone());
    block(async move {
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("create the CRD: {e}"),
        }
    });
    let api = owners(c, k);
    wait_for(Duration::from_secs(30), "the owner's API", || {
        let api = api.clone();
        block(async move { api.list(&Default::default()).await.ok() })
    });
}

/// The kind's object `pg` with `spec`; returns its uid.
fn cluster(c: &KubeCluster, k: &Kind, spec: Value) -> String {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{}/{}", k.group, k.version), "kind": k.kind,
        "metadata": {"name": "pg", "namespace": c.ns},
        "spec": spec,
    }))
    .expect("owner");
    let api = owners(c, k);
    let made = block(async move { api.create(&PostParams::default(), &obj).await })
        .expect("create the Cluster");
    made.metadata.uid.expect("uid")
}

fn cluster_spec(c: &KubeCluster) -> Value {
    owner_spec(c, &CNPG)
}

fn owner_spec(c: &KubeCluster, k: &Kind) -> Value {
    let api = owners(c, k);
    let obj = block(async move { api.get("pg").await }).expect("the Cluster");
    obj.data["spec"].clone()
}

/// What a GitOps sync does: the manifest's size written back.
fn set_size(c: &KubeCluster, size: &str) {
    let api = clusters(c);
    let body = json!({"spec": {"storage": {"size": size}}});
    block(async move {
        api.patch("pg", &PatchParams::default(), &Patch::Merge(&body))
            .await
    })
    .expect("patch the Cluster");
}

/// [`POLICY`] (16Mi steps, five actions a day) growing through the owner; CloudNativePG keeps
/// WAL on the data volume unless told otherwise.
fn owner_policy() -> Vec<(&'static str, &'static str)> {
    let mut p = POLICY.to_vec();
    p.extend([
        ("resize-through", "owner"),
        ("wal-safety-acknowledge-wal-risk", "true"),
    ]);
    p
}

/// Instance `name` of the kind's cluster `pg` (uid `uid`): its data claim with `policy`, labelled
/// and owned as the operator does, mounted by its pod on the test's node as a 64Mi tmpfs.
fn instance(
    c: &mut KubeCluster,
    (k, policy): (&Kind, &[(&str, &str)]),
    name: &str,
    uid: &str,
) -> PathBuf {
    let meta = k.claim_meta(name, uid);
    c.pvc(name, &c.fast.clone(), 64, policy, move |p: &mut Value| {
        p["metadata"]["labels"] = meta["labels"].clone();
        p["metadata"]["ownerReferences"] = meta["ownerReferences"].clone();
    });
    let uid = c.pod(&format!("pod-{name}"), &c.node.clone(), name);
    let pv = c.pv_name(name);
    c.root.tmpfs_volume(&uid, &pv, 64 * MI)
}

/// The test's operator: copies the declared size to every claim below it (as CloudNativePG and
/// Zalando's operator do; neither shrinks one), until dropped.
struct Operator {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Operator {
    fn start(c: &KubeCluster, k: &'static Kind, claims: &[&str]) -> Operator {
        let stop = Arc::new(AtomicBool::new(false));
        let (api, pvcs) = (
            owners(c, k),
            Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(
                c.admin.0.clone(),
                &c.ns,
            ),
        );
        let claims: Vec<String> = claims.iter().map(|s| s.to_string()).collect();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                block(async {
                    let Ok(obj) = api.get("pg").await else { return };
                    let declared = k.declared(&obj.data["spec"]);
                    let Some(size) = declared.as_str() else {
                        return;
                    };
                    let Ok(want) = headroom::quantity::parse(size) else {
                        return;
                    };
                    for name in &claims {
                        let Ok(pvc) = pvcs.get(name).await else {
                            continue;
                        };
                        if request_of(&pvc) < want {
                            let body =
                                json!({"spec": {"resources": {"requests": {"storage": size}}}});
                            let _ = pvcs
                                .patch(name, &PatchParams::default(), &Patch::Merge(&body))
                                .await;
                        }
                    }
                });
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Operator {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The agent's successful PATCHes of Cluster `pg`, with their bodies.
fn owner_patches(c: &KubeCluster) -> Vec<Value> {
    patches_of(c, &CNPG)
}

fn patches_of(c: &KubeCluster, k: &Kind) -> Vec<Value> {
    c.agent_requests()
        .into_iter()
        .filter(|e| e.resource() == k.plural && e.name() == Some("pg") && e.is_write())
        .filter(|e| e.code() == 200)
        .map(|e| e.request_object.unwrap_or(Value::Null))
        .collect()
}

/// No write of the agent to these claims carried a storage request.
fn assert_no_claim_resized(c: &KubeCluster, claims: &[&str]) {
    for name in claims {
        let carried: Vec<_> = c
            .claim_writes(name)
            .into_iter()
            .filter(|e| {
                e.request_object
                    .as_ref()
                    .is_some_and(|b| b.pointer("/spec/resources/requests/storage").is_some())
            })
            .collect();
        assert!(
            carried.is_empty(),
            "{name}: headroom wrote its request: {carried:?}"
        );
    }
}

fn setup(c: &mut KubeCluster, spec: Value) -> (PathBuf, PathBuf) {
    setup_kind(c, &CNPG, spec)
}

fn setup_kind(c: &mut KubeCluster, k: &Kind, spec: Value) -> (PathBuf, PathBuf) {
    setup_policy(c, k, spec, &owner_policy())
}

fn setup_policy(
    c: &mut KubeCluster,
    k: &Kind,
    spec: Value,
    policy: &[(&str, &str)],
) -> (PathBuf, PathBuf) {
    install_crd(c, k);
    apply_manifest(&c.admin.0, "overlays/resize-through-owner/rbac.yaml");
    let uid = cluster(c, k, spec);
    (
        instance(c, (k, policy), "pg-1", &uid),
        instance(c, (k, policy), "pg-2", &uid),
    )
}

/// What plays the storage, the operator and the node's agent; all stopped when dropped.
type Running = (support::node::CsiDriver, Operator, support::node::Agent);

/// The test's CSI driver and operator for CloudNativePG instances `pg-1` (mounted at `primary`)
/// and `pg-2`, and the agent scanning every 500ms.
fn run_cnpg(c: &KubeCluster, (primary, replica): (&PathBuf, &PathBuf)) -> Running {
    let csi = c.csi(&[("pg-1", primary.clone()), ("pg-2", replica.clone())], 200);
    let operator = Operator::start(c, &CNPG, &["pg-1", "pg-2"]);
    (csi, operator, c.agent("500ms", &[]))
}

/// Both claims raised to 80Mi by the operator from the Cluster's size, which the agent wrote in
/// one patch of that field alone, with the resourceVersion read as precondition; no claim's
/// request written by the agent.
fn assert_grown_once_through_the_cluster(c: &KubeCluster) {
    for name in ["pg-1", "pg-2"] {
        c.wait_capacity(name, 80 * MI);
    }
    assert_eq!(cluster_spec(c)["storage"]["size"], "80Mi");
    std::thread::sleep(Duration::from_secs(2));
    let patches = owner_patches(c);
    assert_eq!(patches.len(), 1, "{patches:?}");
    let body = &patches[0];
    assert_eq!(body["spec"], json!({"storage": {"size": "80Mi"}}), "{body}");
    assert!(body["metadata"]["resourceVersion"].is_string(), "{body}");
    assert_eq!(body.as_object().map(|o| o.len()), Some(2), "{body}");
    assert_no_claim_resized(c, &["pg-1", "pg-2"]);
}

/// A two-instance CloudNativePG cluster of 64Mi claims with [`owner_policy`] under
/// `enforcement`, its replica 1Mi full, running ([`run_cnpg`]); the primary's mount.
fn running_cnpg(c: &mut KubeCluster, enforcement: &'static str) -> (PathBuf, Running) {
    let mut policy = owner_policy();
    policy.push(("enforcement", enforcement));
    let spec = json!({"instances": 2, "storage": {"size": "64Mi"}});
    let (primary, replica) = setup_policy(c, &CNPG, spec, &policy);
    fill(&replica, MI);
    let running = run_cnpg(c, (&primary, &replica));
    (primary, running)
}

/// `pg-1`'s history, which holds one entry: that entry.
fn one_history_entry(c: &KubeCluster) -> Value {
    let text = annotation(&c.get("pg-1"), "headroom.dev/history").expect("history");
    let history: Vec<Value> = serde_json::from_str(&text).expect("history is JSON");
    assert_eq!(history.len(), 1, "{history:?}");
    history[0].clone()
}

#[test]
fn a_cluster_grows_through_its_owner_once_and_a_lowered_owner_is_not_fought() {
    let test = "a_cluster_grows_through_its_owner_once_and_a_lowered_owner_is_not_fought";
    if !server::available(test) {
        return;
    }
    let mut c = KubeCluster::new();
    let (primary, replica) = setup(&mut c, json!({"instances": 2, "storage": {"size": "64Mi"}}));
    fill(&replica, MI);
    let _running = run_cnpg(&c, (&primary, &replica));

    // 56Mi of 64Mi is past 80 %: +16Mi, written to the Cluster, applied by the operator.
    fill(&primary, 56 * MI);
    assert_grown_once_through_the_cluster(&c);
    let history = annotation(&c.get("pg-1"), "headroom.dev/history").expect("history");
    assert!(history.contains("\"owner\":true"), "{history}");
    c.assert_one_event("pg-1", "Resized", "Normal", "through Cluster");

    // A GitOps sync writes the manifest's 64Mi back; the operator does not shrink claims. The
    // owner is read every scan once headroom has set it: the revert is said with no grow due,
    // and the next grow headroom would make is not made either.
    set_size(&c, "64Mi");
    c.wait_blocked("pg-1", "owner_reverted");
    fill(&primary, 70 * MI);
    std::thread::sleep(Duration::from_secs(2));
    c.wait_blocked("pg-1", "owner_reverted");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(owner_patches(&c).len(), 1);
    assert_eq!(cluster_spec(&c)["storage"]["size"], "64Mi");
    assert_no_claim_resized(&c, &["pg-1", "pg-2"]);
    c.assert_one_event(
        "pg-1",
        "OwnerReverted",
        "Warning",
        "is 64Mi, lower than the 80Mi",
    );
}

/// `enforcement: approve` with `resizeThrough: owner`: the grow waits as a recommendation, with
/// nothing written to the Cluster or a claim's request; the approval is carried out through the
/// Cluster's size, once, and recorded on the claim's history entry with the field manager that
/// gave it.
#[test]
fn an_approved_grow_is_made_through_the_owner_once_and_records_the_approval() {
    let test = "an_approved_grow_is_made_through_the_owner_once_and_records_the_approval";
    if !server::available(test) {
        return;
    }
    let mut c = KubeCluster::new();
    let (primary, _running) = running_cnpg(&mut c, "approve");

    // 56Mi of 64Mi is past 80 % and short of the emergency line: recommended, not made.
    fill(&primary, 56 * MI);
    let rec = wait_for(Duration::from_secs(20), "pg-1's recommendation", || {
        let text = c.status_field("pg-1", "recommendation")?;
        serde_json::from_str::<Value>(&text).ok()
    });
    assert_eq!(rec["toBytes"], json!(80 * MI), "{rec}");
    let id = rec["id"].as_str().expect("id").to_string();
    std::thread::sleep(Duration::from_secs(2));
    assert!(owner_patches(&c).is_empty(), "{:?}", owner_patches(&c));
    assert_eq!(cluster_spec(&c)["storage"]["size"], "64Mi");
    assert_no_claim_resized(&c, &["pg-1", "pg-2"]);
    assert_eq!(c.history_len("pg-1"), 0);

    // Approved by a person's tool, named by its field manager.
    let pvcs = Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(
        c.admin.0.clone(),
        &c.ns,
    );
    let body = json!({"metadata": {"annotations": {"headroom.dev/approve": id}}});
    let params = PatchParams {
        field_manager: Some("dba-on-call".into()),
        ..PatchParams::default()
    };
    block(async move { pvcs.patch("pg-1", &params, &Patch::Merge(&body)).await }).expect("approve");
    assert_grown_once_through_the_cluster(&c);
    let entry = one_history_entry(&c);
    assert_eq!(
        (&entry["owner"], &entry["to"]),
        (&json!(true), &json!(80 * MI))
    );
    assert_eq!(entry["approval"]["id"], json!(id), "{entry}");
    assert_eq!(entry["approval"]["by"], json!("dba-on-call"), "{entry}");
    c.assert_one_event(
        "pg-1",
        "Resized",
        "Normal",
        &format!(
            "through Cluster {}/pg spec.storage.size (approved recommendation {id})",
            c.ns
        ),
    );
}

/// `enforcement: approve` past the emergency line grows without an approval, and through the
/// owner all the same: one patch of the Cluster's size, no claim's request, no approval recorded.
#[test]
fn an_emergency_grow_under_approve_is_made_through_the_owner() {
    if !server::available("an_emergency_grow_under_approve_is_made_through_the_owner") {
        return;
    }
    let mut c = KubeCluster::new();
    let (primary, _running) = running_cnpg(&mut c, "approve");
    // 62Mi of 64Mi is past the emergency line (95 %).
    fill(&primary, 62 * MI);
    assert_grown_once_through_the_cluster(&c);
    let history = one_history_entry(&c);
    assert_eq!(history["owner"], json!(true), "{history}");
    assert_eq!(history.get("approval"), None, "{history}");
    c.assert_one_event("pg-1", "Resized", "Normal", "through Cluster");
}

/// `enforcement: recommend` with `resizeThrough: owner` writes nothing, so reads no owner: the
/// recommendation is made with no request of the agent's for the Cluster in the audit log.
#[test]
fn a_recommendation_reads_no_owner() {
    if !server::available("a_recommendation_reads_no_owner") {
        return;
    }
    let mut c = KubeCluster::new();
    let (primary, _running) = running_cnpg(&mut c, "recommend");
    fill(&primary, 56 * MI);
    wait_for(Duration::from_secs(20), "pg-1's recommendation", || {
        c.status_field("pg-1", "recommendation")
    });
    std::thread::sleep(Duration::from_secs(2));
    let read: Vec<_> = c
        .agent_requests()
        .into_iter()
        .filter(|e| e.resource() == CNPG.plural)
        .collect();
    assert!(read.is_empty(), "{read:?}");
    assert_no_claim_resized(&c, &["pg-1", "pg-2"]);
}

#[test]
fn an_operator_that_never_applies_is_awaiting_owner_and_a_revert_meanwhile_is_seen_at_once() {
    let test =
        "an_operator_that_never_applies_is_awaiting_owner_and_a_revert_meanwhile_is_seen_at_once";
    if !server::available(test) {
        return;
    }
    let mut c = KubeCluster::new();
    let (primary, replica) = setup(&mut c, json!({"instances": 2, "storage": {"size": "64Mi"}}));
    fill(&replica, MI);
    // No operator: the Cluster's size is never applied.
    let _agent = c.agent("500ms", &["--resize-timeout", "3s"]);
    fill(&primary, 56 * MI);
    wait_for(Duration::from_secs(20), "the Cluster's new size", || {
        (cluster_spec(&c)["storage"]["size"] == "80Mi").then_some(())
    });
    c.wait_blocked("pg-1", "awaiting_owner");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(owner_patches(&c).len(), 1);
    assert_eq!(request_of(&c.get("pg-1")), 64 * MI);
    assert_no_claim_resized(&c, &["pg-1", "pg-2"]);
    c.assert_one_event(
        "pg-1",
        "ExpansionAwaitingOwner",
        "Warning",
        "has not raised this claim",
    );

    // The same, with a long deadline: a revert while the operator has yet to apply it is seen
    // at the next scan (the owner is read every scan while it waits), not at the deadline.
    let mut d = KubeCluster::on(c.server.clone());
    let (primary, replica) = setup(&mut d, json!({"instances": 2, "storage": {"size": "64Mi"}}));
    fill(&replica, MI);
    let _agent_d = d.agent("500ms", &["--resize-timeout", "10m"]);
    fill(&primary, 56 * MI);
    wait_for(Duration::from_secs(20), "the Cluster's new size", || {
        (cluster_spec(&d)["storage"]["size"] == "80Mi").then_some(())
    });
    d.wait_blocked("pg-1", "resize_in_progress");
    set_size(&d, "64Mi");
    let reverted_at = std::time::Instant::now();
    d.wait_blocked("pg-1", "owner_reverted");
    let took = reverted_at.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "the revert took {took:?} to be seen"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(owner_patches(&d).len(), 1);
    assert_no_claim_resized(&d, &["pg-1", "pg-2"]);
}

#[test]
fn an_owner_without_its_size_field_is_an_error_naming_it_and_delays_nothing_else() {
    let test = "an_owner_without_its_size_field_is_an_error_naming_it_and_delays_nothing_else";
    if !server::available(test) {
        return;
    }
    let mut c = KubeCluster::new();
    let (primary, replica) = setup(
        &mut c,
        json!({"instances": 2, "storage": {"storageClass": "fast"}}),
    );
    fill(&replica, MI);
    let plain = c.claim("plain", &c.fast.clone(), 64, POLICY);
    let _csi = c.csi(&[("plain", plain.clone())], 200);
    let _agent = c.agent("500ms", &[]);
    fill(&primary, 56 * MI);
    fill(&plain, 56 * MI);
    c.wait_blocked("pg-1", "owner_invalid");
    c.wait_capacity("plain", 80 * MI);
    std::thread::sleep(Duration::from_secs(2));
    let ns = c.ns.clone();
    c.assert_one_event(
        "pg-1",
        "OwnerInvalid",
        "Warning",
        &format!("Cluster {ns}/pg: spec.storage.size is missing"),
    );
    assert!(owner_patches(&c).is_empty());
    assert_no_claim_resized(&c, &["pg-1", "pg-2"]);
}

/// Zalando's operator: the `postgresql`'s `spec.volume.size`, merge-patched once, applied by the
/// test as the operator; the claims' requests never written by headroom.
#[test]
fn a_zalando_cluster_grows_through_its_postgresql_once() {
    let test = "a_zalando_cluster_grows_through_its_postgresql_once";
    if !server::available(test) {
        return;
    }
    let mut c = KubeCluster::new();
    let mut spec = ZALANDO.spec("64Mi");
    spec["numberOfInstances"] = json!(2);
    let (primary, replica) = setup_kind(&mut c, &ZALANDO, spec);
    fill(&replica, MI);
    let _csi = c.csi(&[("pg-1", primary.clone()), ("pg-2", replica.clone())], 200);
    let _operator = Operator::start(&c, &ZALANDO, &["pg-1", "pg-2"]);
    let _agent = c.agent("500ms", &[]);
    fill(&primary, 56 * MI);
    for name in ["pg-1", "pg-2"] {
        c.wait_capacity(name, 80 * MI);
    }
    assert_eq!(ZALANDO.declared(&owner_spec(&c, &ZALANDO)), "80Mi");
    std::thread::sleep(Duration::from_secs(2));
    let patches = patches_of(&c, &ZALANDO);
    assert_eq!(patches.len(), 1, "{patches:?}");
    assert_eq!(
        patches[0]["spec"],
        json!({"volume": {"size": "80Mi"}}),
        "{}",
        patches[0]
    );
    assert!(patches[0]["metadata"]["resourceVersion"].is_string());
    assert_no_claim_resized(&c, &["pg-1", "pg-2"]);
    c.assert_one_event("pg-1", "Resized", "Normal", "through postgresql");
}

/// Crunchy PGO v5: the instance set's `dataVolumeClaimSpec` is an element of `spec.instances`,
/// which a merge patch cannot address: one JSON patch testing the resourceVersion and the set's
/// name, replacing that set's size alone.
#[test]
fn a_crunchy_instance_set_grows_through_one_json_patch_of_its_element() {
    let test = "a_crunchy_instance_set_grows_through_one_json_patch_of_its_element";
    if !server::available(test) {
        return;
    }
    let mut c = KubeCluster::new();
    let (primary, replica) = setup_kind(&mut c, &CRUNCHY, CRUNCHY.spec("64Mi"));
    fill(&replica, MI);
    let _csi = c.csi(&[("pg-1", primary.clone()), ("pg-2", replica.clone())], 200);
    let _operator = Operator::start(&c, &CRUNCHY, &["pg-1", "pg-2"]);
    let _agent = c.agent("500ms", &[]);
    fill(&primary, 56 * MI);
    for name in ["pg-1", "pg-2"] {
        c.wait_capacity(name, 80 * MI);
    }
    let spec = owner_spec(&c, &CRUNCHY);
    assert_eq!(CRUNCHY.declared(&spec), "80Mi");
    // The other instance set is as it was.
    let other = "/instances/0/dataVolumeClaimSpec/resources/requests/storage";
    assert_eq!(spec.pointer(other), Some(&json!("1Gi")));
    std::thread::sleep(Duration::from_secs(2));
    let patches = patches_of(&c, &CRUNCHY);
    assert_eq!(patches.len(), 1, "{patches:?}");
    let ops = patches[0].as_array().expect("a JSON patch");
    assert_eq!(ops[0]["op"], "test");
    assert_eq!(ops[0]["path"], "/metadata/resourceVersion");
    assert_eq!(
        ops[1],
        json!({"op": "test", "path": "/spec/instances/1/name", "value": "set1"})
    );
    let size = "/spec/instances/1/dataVolumeClaimSpec/resources/requests/storage";
    assert_eq!(
        ops[2],
        json!({"op": "replace", "path": size, "value": "80Mi"})
    );
    assert_eq!(ops.len(), 3);
    assert_no_claim_resized(&c, &["pg-1", "pg-2"]);
    c.assert_one_event("pg-1", "Resized", "Normal", "through PostgresCluster");
}
