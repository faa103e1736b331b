//! Offline expansion (`offlineExpansion: evict`) against the real kube-apiserver + etcd: the
//! agent runs as its service account with `rbac/` and `overlays/offline-expansion/`, and the
//! server's own Eviction API (policy/v1) answers, PodDisruptionBudgets included. The
//! test plays an offline CSI driver: it sets the claim's capacity and `FileSystemResizePending`
//! and leaves the filesystem as it was (a remount would grow it), and the disruption controller
//! (it writes the budget's status, which is all the Eviction API reads).

mod support {
    pub mod http;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::kube::block;
use support::kube::cluster::{KubeCluster, POLICY, annotation, apply_manifest};
use support::kube::server;
use support::node::{MI, fill, wait_for};

/// [`POLICY`] restarting pods in a window that is always open (every minute, for two).
fn evicting() -> Vec<(&'static str, &'static str)> {
    let mut p = POLICY.to_vec();
    p.extend([
        ("offline-expansion", "evict"),
        ("maintenance-window-schedule", "* * * * *"),
        ("maintenance-window-duration", "2m"),
    ]);
    p
}

/// Claim `name` of 64Mi mounted by pod `pod-<name>` (labelled `app: <name>`) on the test's node.
fn claim(c: &mut KubeCluster, name: &str, policy: &[(&str, &str)]) -> PathBuf {
    c.pvc(name, &c.fast.clone(), 64, policy, |_| {});
    mounted(c, name, json!({"app": name}), 64)
}

/// Pod `pod-<name>` with `labels`, running and ready on the test's node, mounting claim `name`
/// as a tmpfs of `mi` MiB.
fn mounted(c: &mut KubeCluster, name: &str, labels: Value, mi: u64) -> PathBuf {
    let pod = format!("pod-{name}");
    let made = c.create(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod, "namespace": c.ns, "labels": labels},
        "spec": {
            "nodeName": c.node,
            "containers": [{"name": "db", "image": "postgres:17", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": name}}],
        },
    }));
    c.patch_status::<k8s_openapi::api::core::v1::Pod>(
        &pod,
        // Ready: the Eviction API lets an unready pod go whatever its budget says.
        &json!({"status": {
            "phase": "Running", "podIP": "127.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"}],
        }}),
    );
    let uid = made["metadata"]["uid"].as_str().expect("uid").to_string();
    let pv = c.pv_name(name);
    c.root.tmpfs_volume(&uid, &pv, mi * MI)
}

/// The offline driver's half of a resize: the controller grew the volume to `mi` MiB, the node
/// waits for a remount. The filesystem stays as it is.
fn controller_done(c: &KubeCluster, name: &str, mi: u64) {
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    c.patch_status::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(
        name,
        &json!({"status": {
            "capacity": {"storage": format!("{mi}Mi")},
            "conditions": [{
                "type": "FileSystemResizePending", "status": "True", "lastTransitionTime": now,
                "message": "Waiting for user to (re-)start a pod to finish file system resize of volume on node.",
            }],
        }}),
    );
}

fn pdbs(c: &KubeCluster) -> Api<DynamicObject> {
    let gvk = kube::api::GroupVersionKind::gvk("policy", "v1", "PodDisruptionBudget");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "poddisruptionbudgets");
    Api::namespaced_with(c.admin.0.clone(), &c.ns, &ar)
}

/// A `maxUnavailable: 0` budget over `app: <name>`, with the status its controller would write:
/// no disruption allowed.
fn blocking_pdb(c: &KubeCluster, name: &str) {
    let api = pdbs(c);
    let pdb: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": c.ns},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": name}}},
    }))
    .expect("pdb");
    let status = json!({"status": {
        "observedGeneration": 1, "disruptionsAllowed": 0,
        "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1,
    }});
    let name = name.to_string();
    block(async move {
        api.create(&PostParams::default(), &pdb)
            .await
            .expect("create pdb");
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .expect("pdb status");
    });
}

/// The agent's evictions of `pod`, as the audit log has them, with their codes.
fn evictions(c: &KubeCluster, pod: &str) -> Vec<u16> {
    c.agent_requests()
        .into_iter()
        .filter(|e| e.name() == Some(pod))
        .filter(|e| {
            e.object_ref.as_ref().and_then(|o| o.subresource.as_deref()) == Some("eviction")
        })
        .map(|e| e.code())
        .collect()
}

/// The claim's `restart` status (`{"restart": "refused", ...}`), parsed.
fn restart(c: &KubeCluster, name: &str) -> Option<Value> {
    let text = annotation(&c.get(name), "headroom.dev/status")?;
    let v: Value = serde_json::from_str(&text).ok()?;
    v.get("restart").cloned()
}

fn pod_deleting(c: &KubeCluster, pod: &str) -> bool {
    let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(c.admin.0.clone(), &c.ns);
    let pod = pod.to_string();
    block(async move { api.get(&pod).await.expect("pod") })
        .metadata
        .deletion_timestamp
        .is_some()
}

/// Grows the claim once (56Mi of 64Mi is past 80 %: +16Mi), then the driver leaves it
/// waiting for a remount.
fn grown_and_waiting(c: &KubeCluster, name: &str, mount: &Path) {
    fill(mount, 56 * MI);
    c.wait_request(name, 80 * MI);
    controller_done(c, name, 80);
}

#[test]
fn a_budget_that_allows_no_eviction_is_reported_and_not_retried_every_scan() {
    let test = "a_budget_that_allows_no_eviction_is_reported_and_not_retried_every_scan";
    if !server::available(test) {
        return;
    }
    let mut c = KubeCluster::new();
    apply_manifest(&c.admin.0, "overlays/offline-expansion/rbac.yaml");
    let policy = evicting();
    let mount = claim(&mut c, "held", &policy);
    blocking_pdb(&c, "held");
    let _agent = c.agent("500ms", &["--resize-timeout", "2s"]);
    grown_and_waiting(&c, "held", &mount);

    c.wait_blocked("held", "awaiting_remount");
    let refused = wait_for(Duration::from_secs(20), "the refusal in the status", || {
        restart(&c, "held").filter(|r| r["restart"] == "refused")
    });
    assert_eq!(refused["count"], 1, "{refused}");
    assert_eq!(refused["switchover"], false, "{refused}");
    // Ten more scans: the budget still allows none, and no second request is made before the
    // backoff (a minute) has passed.
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(evictions(&c, "pod-held"), vec![429]);
    assert!(!pod_deleting(&c, "pod-held"));
    let events = c.events_for("held");
    let said: Vec<_> = events
        .iter()
        .filter(|(r, t, _)| r == "EvictionRefused" && t == "Warning")
        .collect();
    assert_eq!(said.len(), 1, "{events:?}");
    assert!(said[0].2.contains("disruption budget"), "{said:?}");
    // The resize is still the one headroom made, unrecorded as evicted.
    let history = annotation(&c.get("held"), "headroom.dev/history").expect("history");
    assert!(!history.contains("evicted"), "{history}");
}

#[test]
fn an_allowed_eviction_happens_once_and_is_recorded_and_a_claim_not_opted_in_is_left_alone() {
    let test =
        "an_allowed_eviction_happens_once_and_is_recorded_and_a_claim_not_opted_in_is_left_alone";
    if !server::available(test) {
        return;
    }
    let mut c = KubeCluster::new();
    apply_manifest(&c.admin.0, "overlays/offline-expansion/rbac.yaml");
    let policy = evicting();
    let mount = claim(&mut c, "free", &policy);
    // Waiting for a remount too, with the same policy but not enabled: never touched.
    let off: Vec<(&str, &str)> = policy
        .iter()
        .map(|(k, v)| {
            if *k == "enabled" {
                (*k, "false")
            } else {
                (*k, *v)
            }
        })
        .collect();
    claim(&mut c, "theirs", &off);
    c.patch_claim(
        "theirs",
        json!({"spec": {"resources": {"requests": {"storage": "80Mi"}}}}),
    );
    controller_done(&c, "theirs", 80);
    let _agent = c.agent("500ms", &["--resize-timeout", "2s"]);
    grown_and_waiting(&c, "free", &mount);

    evicted_once(&c, "free");
    assert_eq!(
        restart(&c, "free").map(|r| r["restart"].clone()),
        Some(json!("evicted"))
    );
    assert_eq!(evictions(&c, "pod-theirs"), Vec::<u16>::new());
    assert!(!pod_deleting(&c, "pod-theirs"));
    assert!(c.claim_writes("theirs").is_empty());
}

/// Waits for the eviction of `pod-<name>` recorded on the claim's history entry, then checks it
/// was asked for once (five scans later), said once, and the pod is going.
fn evicted_once(c: &KubeCluster, name: &str) {
    let evicted = wait_for(Duration::from_secs(20), "the eviction's record", || {
        let h = annotation(&c.get(name), "headroom.dev/history")?;
        let h: Vec<Value> = serde_json::from_str(&h).ok()?;
        h.last()?.get("evicted").cloned()
    });
    assert!(evicted.is_string(), "{evicted}");
    let pod = format!("pod-{name}");
    assert!(pod_deleting(c, &pod));
    assert_eq!(
        restart(c, name).map(|r| r["restart"].clone()),
        Some(json!("evicted"))
    );
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(evictions(c, &pod), vec![201]);
    c.assert_one_event(name, "PodEvicted", "Normal", &pod);
}

/// A StorageClass that declares its driver grows the filesystem only at the next mount
/// (`headroom.dev/node-expansion: offline`): with `--resize-timeout` an hour, the claim is
/// `awaiting_remount` as soon as the node's part is pending, and its pod is evicted in the
/// window. Undeclared, it would wait the hour.
#[test]
fn a_storage_class_declared_offline_is_awaiting_remount_at_once_and_its_pod_evicted() {
    let test = "a_storage_class_declared_offline_is_awaiting_remount_at_once_and_its_pod_evicted";
    if !server::available(test) {
        return;
    }
    let mut c = KubeCluster::new();
    apply_manifest(&c.admin.0, "overlays/offline-expansion/rbac.yaml");
    let class = format!("{}-offline", c.fast);
    c.create(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": class, "annotations": {"headroom.dev/node-expansion": "offline"}},
        "provisioner": "test.csi.headroom.dev", "allowVolumeExpansion": true,
    }));
    c.pvc("declared", &class, 64, &evicting(), |_| {});
    let mount = mounted(&mut c, "declared", json!({"app": "declared"}), 64);
    let _agent = c.agent("500ms", &["--resize-timeout", "1h"]);
    grown_and_waiting(&c, "declared", &mount);

    c.wait_blocked("declared", "awaiting_remount");
    evicted_once(&c, "declared");
    // The Event says why it did not wait.
    let events = c.events_for("declared");
    assert!(
        events
            .iter()
            .any(|(r, t, note)| r == "ExpansionAwaitingRemount"
                && t == "Warning"
                && note.contains("nodeExpansion: offline")),
        "{events:?}"
    );
}

/// The kubelet's part of an eviction and the restart: the old pod gone, its mount with it, a
/// new pod of the same name mounting the volume, grown at the mount (`mi` MiB), the condition
/// cleared.
fn restarted(c: &mut KubeCluster, name: &str, old: &Path, labels: Value, mi: u64) -> PathBuf {
    let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(c.admin.0.clone(), &c.ns);
    let pod = format!("pod-{name}");
    block(async move {
        let dp = kube::api::DeleteParams::default().grace_period(0);
        api.delete(&pod, &dp).await.expect("delete pod");
    });
    let out = std::process::Command::new("umount")
        .arg(old)
        .output()
        .expect("umount");
    assert!(out.status.success(), "umount {}: {out:?}", old.display());
    let mount = mounted(c, name, labels, mi);
    c.patch_status::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(
        name,
        &json!({"status": {"conditions": null}}),
    );
    mount
}

/// A CloudNativePG-labelled pair on one node, both resizes waiting for a remount: the replica is
/// evicted first while the primary waits (`peer_first`); once the replica is back and its
/// resize landed, the primary is evicted.
#[test]
fn a_cloudnativepg_replica_is_restarted_before_its_primary() {
    let test = "a_cloudnativepg_replica_is_restarted_before_its_primary";
    if !server::available(test) {
        return;
    }
    let mut c = KubeCluster::new();
    apply_manifest(&c.admin.0, "overlays/offline-expansion/rbac.yaml");
    let mut policy = evicting();
    // CloudNativePG keeps WAL on the data volume unless told otherwise.
    policy.push(("wal-safety-acknowledge-wal-risk", "true"));
    let pod_labels = |instance: &str, role: &str| json!({"cnpg.io/cluster": "pg", "cnpg.io/instanceName": instance, "cnpg.io/instanceRole": role});
    let mut mounts = Vec::new();
    for (name, role) in [("pg-1", "primary"), ("pg-2", "replica")] {
        let labels = json!({
            "cnpg.io/cluster": "pg", "cnpg.io/pvcRole": "PG_DATA", "cnpg.io/instanceName": name,
        });
        c.pvc(name, &c.fast.clone(), 64, &policy, move |p: &mut Value| {
            p["metadata"]["labels"] = labels
        });
        mounts.push(mounted(&mut c, name, pod_labels(name, role), 64));
    }
    let _agent = c.agent("500ms", &["--resize-timeout", "2s"]);
    for (name, mount) in ["pg-1", "pg-2"].iter().zip(&mounts) {
        fill(mount, 56 * MI);
        c.wait_request(name, 80 * MI);
    }
    for name in ["pg-1", "pg-2"] {
        controller_done(&c, name, 80);
    }

    let evicted = |c: &KubeCluster, name: &str| {
        let h = annotation(&c.get(name), "headroom.dev/history")?;
        let h: Vec<Value> = serde_json::from_str(&h).ok()?;
        h.last()?.get("evicted").cloned()
    };
    wait_for(Duration::from_secs(20), "the replica's eviction", || {
        evicted(&c, "pg-2")
    });
    wait_for(
        Duration::from_secs(20),
        "the primary waiting for it",
        || restart(&c, "pg-1").filter(|r| r["restart"] == "peer_first"),
    );
    assert_eq!(evictions(&c, "pod-pg-1"), Vec::<u16>::new());

    // The replica comes back: its filesystem grown at the mount, its resize seen landed.
    let labels = pod_labels("pg-2", "replica");
    let back = restarted(&mut c, "pg-2", &mounts[1], labels, 80);
    fill(&back, 8 * MI);
    wait_for(Duration::from_secs(20), "the primary's eviction", || {
        evicted(&c, "pg-1")
    });
    assert_eq!(evictions(&c, "pod-pg-2"), vec![201]);
    assert_eq!(evictions(&c, "pod-pg-1"), vec![201]);
    let h = annotation(&c.get("pg-2"), "headroom.dev/history").expect("history");
    assert!(
        h.contains("\"landed\""),
        "the replica's resize never landed: {h}"
    );
}
