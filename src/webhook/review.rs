//! AdmissionReview v1 in and out. Whatever arrives, the answer allows the request: a webhook that
//! cannot read a review has no business refusing the claim it carries.

use base64::Engine;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde::Deserialize;
use serde_json::{Value, json};

use super::ReviewError;

const API_VERSION: &str = "admission.k8s.io/v1";

/// A review this webhook acts on: a claim being created.
#[derive(Debug)]
pub struct ClaimCreate {
    pub uid: String,
    /// The claim as the API server will store it, its namespace filled from the request when the
    /// object does not carry one (the usual case on CREATE).
    pub pvc: PersistentVolumeClaim,
}

#[derive(Debug)]
pub enum Reviewed {
    Create(Box<ClaimCreate>),
    /// Any other operation or resource: allowed untouched.
    Other {
        uid: String,
    },
}

#[derive(Deserialize)]
struct Review {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    request: Request,
}

#[derive(Deserialize)]
struct Request {
    uid: String,
    kind: Gvk,
    operation: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    object: Option<Value>,
}

#[derive(Deserialize)]
struct Gvk {
    #[serde(default)]
    group: String,
    #[serde(default)]
    version: String,
    kind: String,
}

/// The request's uid, if the body has one where a review keeps it: it lets even an unreadable
/// review be answered in a form the API server accepts.
pub fn uid_of(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    v.pointer("/request/uid")?.as_str().map(str::to_string)
}

/// Reads one AdmissionReview.
pub fn parse(body: &[u8]) -> Result<Reviewed, ReviewError> {
    let review: Review =
        serde_json::from_slice(body).map_err(|e| ReviewError::Malformed(e.to_string()))?;
    if review.api_version != API_VERSION || review.kind != "AdmissionReview" {
        return Err(ReviewError::Malformed(format!(
            "expected {API_VERSION} AdmissionReview, got {} {}",
            review.api_version, review.kind
        )));
    }
    let r = review.request;
    let is_claim =
        r.kind.group.is_empty() && r.kind.version == "v1" && r.kind.kind == "PersistentVolumeClaim";
    if !is_claim || r.operation != "CREATE" {
        return Ok(Reviewed::Other { uid: r.uid });
    }
    let object = r
        .object
        .ok_or_else(|| ReviewError::Malformed("a CREATE without request.object".into()))?;
    let mut pvc: PersistentVolumeClaim = serde_json::from_value(object)
        .map_err(|e| ReviewError::Malformed(format!("request.object: {e}")))?;
    if pvc.metadata.namespace.as_deref().is_none_or(str::is_empty) {
        pvc.metadata.namespace = r.namespace;
    }
    Ok(Reviewed::Create(Box::new(ClaimCreate { uid: r.uid, pvc })))
}

/// The JSONPatch that sets the claim's storage request to `bytes` (the request exists: the
/// webhook raises only a claim that has one).
pub fn raise_patch(bytes: u64) -> Value {
    json!([{
        "op": "replace",
        "path": "/spec/resources/requests/storage",
        "value": crate::quantity::format(bytes),
    }])
}

/// An answer that allows the request, with `patch` applied when given and `warning` shown to
/// the client (kubectl prints it) when given.
pub fn allow(uid: &str, patch: Option<&Value>, warning: Option<&str>) -> Vec<u8> {
    let mut response = json!({ "uid": uid, "allowed": true });
    if let Some(p) = patch {
        let encoded = base64::engine::general_purpose::STANDARD.encode(p.to_string());
        response["patchType"] = json!("JSONPatch");
        response["patch"] = json!(encoded);
    }
    if let Some(w) = warning {
        // The API server caps a warning at 4 KiB and drops control characters; so do we.
        let clean: String = w.chars().filter(|c| !c.is_control()).take(400).collect();
        response["warnings"] = json!([format!("headroom: {clean}")]);
    }
    json!({ "apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response })
        .to_string()
        .into_bytes()
}
