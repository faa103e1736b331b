//! A new claim's data source and the size the provisioner will require of it: a VolumeSnapshot
//! is restored only into a claim of at least its `status.restoreSize`, and a claim is cloned
//! only into one of at least its `status.capacity` (external-provisioner refuses a smaller one,
//! and the claim stays Pending). The snapshot is read as a dynamic object, since its CRD may not
//! be installed. Every value read is hostile: a size that cannot be learned becomes a message
//! naming the object and field, never an error that stops the review.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

use super::size::{SourceSize, pvc_label};
use crate::k8s::claim;
pub use crate::k8s::source::{SNAPSHOT_GROUP, Source, source_of};

/// Longer than any quantity a size is written as: not parsed, not echoed.
const MAX_QUANTITY: usize = 64;

/// VolumeSnapshot, `snapshot.storage.k8s.io/v1`.
pub fn snapshot_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk(SNAPSHOT_GROUP, "v1", "VolumeSnapshot");
    ApiResource::from_gvk_with_plural(&gvk, "volumesnapshots")
}

/// What VolumeSnapshot `what` (its JSON) requires: its `status.restoreSize`, a quantity or a
/// byte count (the CRD's int-or-string).
pub fn restore_size(snapshot: &Value, what: String) -> SourceSize {
    let field = "status.restoreSize";
    let unknown = |why: String| SourceSize::Unknown(format!("{what}: {field} {why}"));
    match snapshot.pointer("/status/restoreSize") {
        None | Some(Value::Null) => {
            unknown("is not set (not ready yet, or its driver reports no size)".into())
        }
        Some(Value::String(s)) if s.len() > MAX_QUANTITY => {
            unknown(format!("is not a quantity ({} characters)", s.len()))
        }
        Some(Value::String(s)) => match crate::quantity::parse(s) {
            Ok(bytes) => SourceSize::Known { bytes, what },
            Err(e) => unknown(format!("is not a size: {e}")),
        },
        Some(Value::Number(n)) => match n.as_u64() {
            Some(bytes) => SourceSize::Known { bytes, what },
            None => unknown(format!("is not a size: {n} is not a whole number of bytes")),
        },
        Some(_) => unknown("is not a quantity".into()),
    }
}

/// What cloning claim `what` requires: its `status.capacity.storage`.
pub fn clone_size(source: Option<&PersistentVolumeClaim>, what: String) -> SourceSize {
    match source.map(claim::storage_capacity) {
        None => SourceSize::Unknown(format!("{what} does not exist")),
        Some(Ok(Some(bytes))) => SourceSize::Known { bytes, what },
        Some(Ok(None)) => SourceSize::Unknown(format!(
            "{what} has no status.capacity.storage (not bound yet)"
        )),
        Some(Err(e)) => SourceSize::Unknown(e.to_string()),
    }
}

/// Why `what` (of `resource`) could not be read, and what fixes it.
pub fn unread(what: &str, resource: &str, e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s)
            if s.code == 404 && s.details.as_ref().is_some_and(|d| !d.name.is_empty()) =>
        {
            format!("{what} does not exist")
        }
        kube::Error::Api(s) if s.code == 404 => format!(
            "{what}: the API server does not serve {resource}: the VolumeSnapshot CRDs are not installed"
        ),
        kube::Error::Api(s) if s.code == 403 => format!(
            "{what}: the webhook may not get {resource} (RBAC: overlays/webhook/rbac.yaml, or Helm's webhook.enabled, grants it)"
        ),
        e => format!("{what}: reading it failed: {e}"),
    }
}

/// The size `pvc`'s data source requires, read from the API server. No deadline here: the
/// caller bounds the whole review.
pub async fn size(client: &kube::Client, pvc: &PersistentVolumeClaim) -> SourceSize {
    let ns = pvc.metadata.namespace.as_deref().unwrap_or("");
    let claim = pvc_label(pvc);
    match source_of(pvc) {
        None => SourceSize::None,
        Some(Source::OtherNamespace { kind, reference }) => SourceSize::Unknown(format!(
            "PVC {claim}: spec.dataSourceRef names {kind} {reference} of another namespace, which headroom never reads"
        )),
        Some(Source::BadName { kind, name }) => SourceSize::Unknown(format!(
            "PVC {claim}: its data source {kind} {name:?} is not an object name"
        )),
        Some(Source::Snapshot(name)) => {
            let what = format!("VolumeSnapshot {ns}/{name}");
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), ns, &snapshot_resource());
            match api.get(&name).await {
                Ok(snapshot) => restore_size(&snapshot.data, what),
                Err(e) => SourceSize::Unknown(unread(
                    &what,
                    "snapshot.storage.k8s.io/v1 volumesnapshots",
                    &e,
                )),
            }
        }
        Some(Source::Claim(name)) => {
            let what = format!("PVC {ns}/{name}");
            let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
            match api.get_opt(&name).await {
                Ok(found) => clone_size(found.as_ref(), what),
                Err(e) => SourceSize::Unknown(unread(&what, "persistentvolumeclaims", &e)),
            }
        }
    }
}
