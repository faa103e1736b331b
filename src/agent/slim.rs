//! What the watch stores keep of each object: only what the agent reads. The rest of a Pod (its
//! containers, their statuses and conditions), every object's `managedFields` (often half its
//! size) and `kubectl apply`'s copy of the whole manifest in an annotation would be held for
//! every pod and claim on the node, and copied whenever the agent clones an object.
//!
//! What is read, and so kept (tests below hold the list to the code):
//! - Pod: metadata (name, namespace, uid, labels, annotations, owner references, deletion
//!   timestamp), the `spec.volumes` that name a claim (`persistentVolumeClaim`, `ephemeral`; not
//!   the projected service account token every pod has), each container's name and its mounts
//!   of those volumes (name, path, subPath), `spec.nodeName`, `status.phase`, `status.podIP(s)`.
//! - PersistentVolumeClaim: everything but `managedFields` and the last-applied annotation
//!   (annotations, labels, owners, spec and status are all read by the policy and the actor).
//! - Node: metadata and spec (`unschedulable`, taints); its status (images, conditions) is not.
//! - StorageClass, ConfigMap: everything but `managedFields`.
//! - ResourceQuota: metadata, the spec's scopes and scope selector, and of `status.hard` and
//!   `status.used` only the storage request lines (a quota on pods' CPU is not read).
//! - Namespace, CSIDriver: the name and csi-addons' `reclaimspace.csiaddons.openshift.io/*`
//!   annotations (a trim schedule), and a Namespace's `headroom.dev/*` ones (its policy layer);
//!   nothing else, so the cluster's every Namespace costs a name and the policy written on it.

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Namespace, Node, PersistentVolumeClaim, Pod, PodSpec, PodStatus,
    ResourceQuota, VolumeMount,
};
use k8s_openapi::api::storage::v1::{CSIDriver, CSIDriverSpec, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// `kubectl apply`'s record of the last manifest it applied: the whole object again.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

fn meta(m: &mut ObjectMeta) {
    m.managed_fields = None;
    if let Some(a) = m.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

pub fn pod(p: &mut Pod) {
    meta(&mut p.metadata);
    p.spec = p.spec.take().map(|s| {
        let volumes: Option<Vec<_>> = s.volumes.map(|vs| {
            vs.into_iter()
                .filter(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some())
                .collect()
        });
        let claim_volume = |name: &str| volumes.iter().flatten().any(|v| v.name == name);
        // Of each container, its mounts of those volumes: where a `pg_wal` link leads.
        let containers = s
            .containers
            .into_iter()
            .map(|c| Container {
                volume_mounts: c.volume_mounts.map(|ms| {
                    ms.into_iter()
                        .filter(|m| claim_volume(&m.name))
                        .map(|m| VolumeMount {
                            name: m.name,
                            mount_path: m.mount_path,
                            sub_path: m.sub_path,
                            ..VolumeMount::default()
                        })
                        .collect()
                }),
                name: c.name,
                ..Container::default()
            })
            .collect();
        PodSpec {
            containers,
            volumes,
            node_name: s.node_name,
            ..PodSpec::default()
        }
    });
    p.status = p.status.take().map(|s| PodStatus {
        phase: s.phase,
        pod_ip: s.pod_ip,
        pod_ips: s.pod_ips,
        ..PodStatus::default()
    });
}

pub fn quota(q: &mut ResourceQuota) {
    meta(&mut q.metadata);
    let storage = |k: &String, _: &mut _| k.ends_with("requests.storage");
    if let Some(spec) = q.spec.as_mut() {
        spec.hard = None;
    }
    if let Some(status) = q.status.as_mut() {
        status.hard.iter_mut().for_each(|h| h.retain(storage));
        status.used.iter_mut().for_each(|u| u.retain(storage));
    }
}

pub fn claim(c: &mut PersistentVolumeClaim) {
    meta(&mut c.metadata);
}

pub fn node(n: &mut Node) {
    meta(&mut n.metadata);
    n.status = None;
}

pub fn storage_class(s: &mut StorageClass) {
    meta(&mut s.metadata);
}

pub fn configmap(c: &mut ConfigMap) {
    meta(&mut c.metadata);
}

/// The prefix of the csi-addons annotations read from Namespaces and CSIDrivers.
const CSI_ADDONS_RECLAIM: &str = "reclaimspace.csiaddons.openshift.io/";

/// Only the name and the annotations under `prefixes`.
fn name_and_annotations(m: &mut ObjectMeta, prefixes: &[&str]) {
    let annotations = m.annotations.take().map(|a| {
        a.into_iter()
            .filter(|(k, _)| prefixes.iter().any(|p| k.starts_with(p)))
            .collect()
    });
    *m = ObjectMeta {
        name: m.name.take(),
        resource_version: m.resource_version.take(),
        annotations,
        ..ObjectMeta::default()
    };
}

pub fn namespace(n: &mut Namespace) {
    let policy = crate::policy::fields::ANNOTATION_PREFIX;
    name_and_annotations(&mut n.metadata, &[CSI_ADDONS_RECLAIM, policy]);
    n.spec = None;
    n.status = None;
}

pub fn csi_driver(d: &mut CSIDriver) {
    name_and_annotations(&mut d.metadata, &[CSI_ADDONS_RECLAIM]);
    d.spec = CSIDriverSpec::default();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::roles;
    use serde_json::json;

    fn managed() -> serde_json::Value {
        json!([{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}}}])
    }

    fn full_pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": "main-1", "namespace": "db", "uid": "u-1",
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"cnpg.io/cluster": "main", "postgres-operator.crunchydata.com/instance": "i1",
                           "application": "spilo", "cluster-name": "z"},
                "annotations": {"a": "b", LAST_APPLIED: "{\"huge\": true}"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "main",
                                     "uid": "s-1", "controller": true}],
                "managedFields": managed(),
            },
            "spec": {
                "nodeName": "n1",
                "containers": [{"name": "pg", "image": "postgres:17",
                                "env": [{"name": "PGDATA", "value": "/data"}],
                                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                "initContainers": [{"name": "init", "image": "busybox"}],
                "tolerations": [{"operator": "Exists"}],
                "volumes": [
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data-main-1"}},
                    {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                    {"name": "cfg", "configMap": {"name": "c"}},
                ],
            },
            "status": {
                "phase": "Running", "podIP": "10.0.0.7", "podIPs": [{"ip": "10.0.0.7"}],
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "pg", "image": "postgres:17", "imageID": "x",
                                       "ready": true, "restartCount": 0}],
            },
        }))
        .expect("pod")
    }

    fn full_claim() -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {
                "name": "data-main-1", "namespace": "db",
                "labels": {"cnpg.io/cluster": "main", "cnpg.io/pvcRole": "PG_DATA"},
                "annotations": {"headroom.dev/enabled": "true", "headroom.dev/group": "g",
                                LAST_APPLIED: "{}"},
                "managedFields": managed(),
            },
            "spec": {"storageClassName": "fast", "volumeName": "pv-1",
                     "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}},
        }))
        .expect("claim")
    }

    #[test]
    fn a_trimmed_pod_answers_every_question_the_agent_asks_as_the_full_one_does() {
        let full = full_pod();
        let mut t = full.clone();
        pod(&mut t);
        let claim = full_claim();
        assert_eq!(roles::pod_claim_names(&t), roles::pod_claim_names(&full));
        assert_eq!(
            roles::pod_claim_names(&t),
            ["data-main-1", "main-1-scratch"]
        );
        assert_eq!(
            roles::group_key(&claim, Some(&t)),
            roles::group_key(&claim, Some(&full))
        );
        assert_eq!(
            format!("{:?}", roles::postgres_volume(&claim, Some(&t))),
            format!("{:?}", roles::postgres_volume(&claim, Some(&full)))
        );
        assert_eq!(
            roles::wal_on_data(&t, &[&claim]),
            roles::wal_on_data(&full, &[&claim])
        );
        assert_eq!(
            roles::mount_path(&t, "data-main-1"),
            roles::mount_path(&full, "data-main-1")
        );
        assert_eq!(
            roles::mount_path(&t, "data-main-1"),
            Some(std::path::PathBuf::from("/data"))
        );
        for op in [
            crate::agent::pgconn::Operator::CloudNativePG,
            crate::agent::pgconn::Operator::Crunchy,
            crate::agent::pgconn::Operator::Zalando,
        ] {
            assert_eq!(
                crate::agent::pgconn::owned_by(&t, op, "main"),
                crate::agent::pgconn::owned_by(&full, op, "main")
            );
        }
        let (m, fm) = (&t.metadata, &full.metadata);
        assert_eq!(
            (
                &m.name,
                &m.namespace,
                &m.uid,
                &m.labels,
                &m.owner_references
            ),
            (
                &fm.name,
                &fm.namespace,
                &fm.uid,
                &fm.labels,
                &fm.owner_references
            )
        );
        assert_eq!(m.deletion_timestamp, fm.deletion_timestamp);
        let status = t.status.as_ref().expect("status");
        assert_eq!(status.pod_ip.as_deref(), Some("10.0.0.7"));
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let spec = t.spec.as_ref().expect("spec");
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        // What is gone.
        assert!(m.managed_fields.is_none());
        assert_eq!(m.annotations.as_ref().map(|a| a.len()), Some(1));
        assert!(spec.init_containers.is_none() && spec.tolerations.is_none());
        let c = &spec.containers[0];
        assert!(c.image.is_none() && c.env.is_none(), "{c:?}");
        let kept: Vec<&str> = spec
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(kept, ["data", "scratch"]);
        assert!(status.conditions.is_none() && status.container_statuses.is_none());
        let size = |p: &Pod| serde_json::to_vec(p).map(|v| v.len()).unwrap_or(0);
        assert!(size(&t) < size(&full), "{} vs {}", size(&t), size(&full));
    }

    #[test]
    fn a_trimmed_claim_keeps_all_but_managed_fields_and_the_applied_manifest() {
        let full = full_claim();
        let mut t = full.clone();
        claim(&mut t);
        assert!(t.metadata.managed_fields.is_none());
        let mut expected = full.clone();
        expected.metadata.managed_fields = None;
        if let Some(a) = expected.metadata.annotations.as_mut() {
            a.remove(LAST_APPLIED);
        }
        assert_eq!(t, expected);
        assert_eq!(roles::group_key(&t, None), roles::group_key(&full, None));
    }

    #[test]
    fn a_trimmed_quota_keeps_its_storage_lines_and_scopes_only() {
        let full: ResourceQuota = serde_json::from_value(json!({
            "metadata": {"name": "q", "namespace": "db", "managedFields": managed()},
            "spec": {"hard": {"pods": "10", "requests.storage": "1Gi"},
                     "scopeSelector": {"matchExpressions": [
                         {"scopeName": "VolumeAttributesClass", "operator": "Exists"}]}},
            "status": {
                "hard": {"pods": "10", "requests.cpu": "4", "requests.storage": "1Gi",
                         "gold.storageclass.storage.k8s.io/requests.storage": "500Mi"},
                "used": {"pods": "3", "requests.cpu": "1", "requests.storage": "200Mi",
                         "gold.storageclass.storage.k8s.io/requests.storage": "100Mi"}
            }
        }))
        .expect("quota");
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "db"},
            "spec": {"storageClassName": "gold", "volumeAttributesClassName": "fast",
                     "resources": {"requests": {"storage": "64Mi"}}}
        }))
        .expect("claim");
        let mut t = full.clone();
        quota(&mut t);
        assert!(t.metadata.managed_fields.is_none());
        let keys = |m: Option<&std::collections::BTreeMap<String, _>>| {
            m.map(|m| m.keys().cloned().collect::<Vec<String>>())
        };
        let status = t.status.as_ref().expect("status");
        assert_eq!(
            keys(status.hard.as_ref()),
            Some(vec![
                "gold.storageclass.storage.k8s.io/requests.storage".to_string(),
                "requests.storage".to_string()
            ])
        );
        assert_eq!(keys(status.used.as_ref()), keys(status.hard.as_ref()));
        // What the agent reads of it is the same.
        assert_eq!(
            crate::k8s::quota::lines_for([&t], &claim).expect("lines"),
            crate::k8s::quota::lines_for([&full], &claim).expect("lines")
        );
    }

    #[test]
    fn a_trimmed_node_still_tells_a_drain() {
        let mut n: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "managedFields": managed()},
            "spec": {"unschedulable": true,
                     "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]},
            "status": {"images": [{"names": ["postgres:17"], "sizeBytes": 1}]},
        }))
        .expect("node");
        let before = n.spec.clone();
        node(&mut n);
        assert_eq!(n.spec, before);
        assert!(n.status.is_none() && n.metadata.managed_fields.is_none());
    }

    #[test]
    fn a_trimmed_namespace_or_csidriver_keeps_its_name_trim_schedule_and_policy_only() {
        let mut ns: Namespace = serde_json::from_value(json!({
            "metadata": {"name": "db", "managedFields": managed(), "labels": {"team": "a"},
                         "annotations": {"reclaimspace.csiaddons.openshift.io/schedule": "@daily",
                                         "reclaimspace.csiaddons.openshift.io/drivers": "rbd",
                                         "headroom.dev/enabled": "true", "headroom.dev/limt": "1Gi",
                                         "openshift.io/sa.scc.mcs": "s0:c29,c14", LAST_APPLIED: "{}"}},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }))
        .expect("namespace");
        namespace(&mut ns);
        assert_eq!(
            serde_json::to_value(&ns).expect("json"),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "db", "annotations": {
                "reclaimspace.csiaddons.openshift.io/schedule": "@daily",
                "reclaimspace.csiaddons.openshift.io/drivers": "rbd",
                "headroom.dev/enabled": "true", "headroom.dev/limt": "1Gi"}}})
        );
        let mut d: CSIDriver = serde_json::from_value(json!({
            "metadata": {"name": "rbd.csi.ceph.com", "managedFields": managed(),
                         "annotations": {"reclaimspace.csiaddons.openshift.io/schedule": "@weekly",
                                         "headroom.dev/enabled": "true"}},
            "spec": {"attachRequired": true, "podInfoOnMount": false},
        }))
        .expect("csidriver");
        csi_driver(&mut d);
        assert_eq!(d.metadata.name.as_deref(), Some("rbd.csi.ceph.com"));
        assert_eq!(d.metadata.annotations.as_ref().map(|a| a.len()), Some(1));
        assert_eq!(d.spec, CSIDriverSpec::default());
    }
}
