//! Growth through the owning cluster (`resizeThrough: owner`): one bounded GET of the owner for
//! a decision that would write it (or while its operator has yet to apply a grow), and the one
//! conditional PATCH of its size field. No watch and no LIST: a cluster at rest costs nothing.

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};

use crate::k8s::logical::LogicalVolume;
use crate::k8s::owner::{self, Kind, OwnerPatch, Seen, Target};

fn resource(kind: Kind) -> ApiResource {
    let gvk = GroupVersionKind::gvk(kind.group, kind.version, kind.kind);
    ApiResource::from_gvk_with_plural(&gvk, kind.plural)
}

fn api(client: &Client, t: &Target) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), &t.namespace, &resource(t.kind))
}

/// Reads the owner of `pvc`'s logical volume `lv`; `None` when it has none headroom grows
/// through. Whatever goes wrong is the answer's error, naming the object and field.
pub async fn read(
    client: &Client,
    pvc: &PersistentVolumeClaim,
    lv: &LogicalVolume,
    timeout: Duration,
) -> Option<Seen> {
    let target = match owner::target(pvc, lv) {
        Ok(Some(t)) => t,
        Ok(None) => return None,
        Err(e) => {
            return Some(Seen {
                field: crate::k8s::pvc_name(pvc),
                declared: Err(e.to_string()),
            });
        }
    };
    let object = target.object();
    let got = tokio::time::timeout(timeout, api(client, &target).get(&target.name)).await;
    let declared = match got {
        Ok(Ok(obj)) => serde_json::to_value(&obj)
            .map_err(|e| format!("{object}: {e}"))
            .and_then(|v| owner::declared(&target, &v).map_err(|e| e.to_string())),
        Ok(Err(e)) => Err(format!("{object}: could not be read: {e}")),
        Err(_) => Err(format!("{object}: no answer within {timeout:?}")),
    };
    Some(Seen {
        field: target.to_string(),
        declared: declared.map(|d| (target, d)),
    })
}

/// How the owner's PATCH ended.
pub enum Written {
    Done,
    /// The owner changed since it was read (409): read it again and decide again.
    Conflict,
    Failed(String),
}

/// A JSON patch (RFC 6902) of `t`, built by hand: kube's `Patch::Json` needs its `jsonpatch`
/// feature and a second copy of the json-patch crate in the agent for one request.
fn json_patch_request(t: &Target, ops: &serde_json::Value) -> Option<http::Request<Vec<u8>>> {
    let url = format!(
        "/apis/{}/{}/namespaces/{}/{}/{}",
        t.kind.group, t.kind.version, t.namespace, t.kind.plural, t.name
    );
    let body = serde_json::to_vec(ops).ok()?;
    http::Request::patch(url)
        .header(http::header::CONTENT_TYPE, "application/json-patch+json")
        .body(body)
        .ok()
}

/// Sends `patch` to the owner `t`.
pub async fn write(client: &Client, t: &Target, patch: &OwnerPatch, timeout: Duration) -> Written {
    let sent = match patch {
        OwnerPatch::Merge(v) => {
            let api = api(client, t);
            let patch = Patch::Merge(v);
            tokio::time::timeout(timeout, api.patch(&t.name, &PatchParams::default(), &patch)).await
        }
        OwnerPatch::Json(v) => {
            let Some(request) = json_patch_request(t, v) else {
                return Written::Failed(format!("{}: encoding the patch", t.object()));
            };
            tokio::time::timeout(timeout, client.request::<DynamicObject>(request)).await
        }
    };
    match sent {
        Ok(Ok(_)) => Written::Done,
        Ok(Err(kube::Error::Api(s))) if s.code == 409 => Written::Conflict,
        Ok(Err(e)) => Written::Failed(format!("{}: {e}", t.object())),
        Err(_) => Written::Failed(format!("{}: no answer within {timeout:?}", t.object())),
    }
}
