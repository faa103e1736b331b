//! Small builders for the objects tests seed: built from JSON so they read like manifests.

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::json;

pub fn storage_class(name: &str, allow_expansion: bool) -> StorageClass {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "provisioner": "test.csi.headroom.dev",
        "allowVolumeExpansion": allow_expansion,
    }))
    .expect("valid StorageClass")
}

/// A claim bound to `pv-<name>`, with `status.capacity` equal to its request.
pub fn bound_pvc(namespace: &str, name: &str, class: &str, size: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": namespace },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class,
            "volumeName": format!("pv-{name}"),
            "resources": { "requests": { "storage": size } },
        },
        "status": { "phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": { "storage": size } },
    }))
    .expect("valid PersistentVolumeClaim")
}

pub fn pending_pvc(namespace: &str, name: &str, class: &str, size: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": namespace },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class,
            "resources": { "requests": { "storage": size } },
        },
        "status": { "phase": "Pending" },
    }))
    .expect("valid PersistentVolumeClaim")
}

/// A running pod on `node`; `claim` mounts that PVC as volume "data".
pub fn pod(namespace: &str, name: &str, node: &str, claim: Option<&str>) -> Pod {
    let volumes = claim
        .map(|c| json!([{ "name": "data", "persistentVolumeClaim": { "claimName": c } }]))
        .unwrap_or(json!([]));
    serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": namespace, "labels": { "app": name } },
        "spec": {
            "nodeName": node,
            "containers": [{ "name": "main", "image": "postgres:17" }],
            "volumes": volumes,
        },
        "status": { "phase": "Running", "podIP": "10.0.0.1" },
    }))
    .expect("valid Pod")
}

pub fn node(name: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "kubernetes.io/hostname": name } },
        "spec": {},
    }))
    .expect("valid Node")
}
