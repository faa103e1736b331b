//! The one answer of older servers that the tested releases (1.34 and newer) cannot be made to
//! give: a lowered storage request refused. Before KEP-1790's `RecoverVolumeExpansionFailure`
//! was on (kube-apiserver 1.31 and older, where the gate is alpha and off; 1.32-1.33 where a
//! cluster turned the beta off) `ValidatePersistentVolumeClaimUpdate` refuses any decrease with
//! 422 "field can not be less than previous value"; from 1.34 the gate is GA and locked on, and
//! a request may go down while it stays above `status.capacity`. The fault proxy
//! ([`super::proxy`]) applies it to the claims a test names; everything else is the real
//! server's.
#![allow(dead_code)]

use std::collections::BTreeMap;

use hyper::Method;
use serde_json::Value;

#[derive(Debug, Default)]
pub struct Before1790 {
    /// The request each scripted claim has (bytes), by `(namespace, name)`.
    requests: BTreeMap<(String, String), u128>,
}

/// A claims URL: `/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}` (no subresource).
fn claim_of(path: &str) -> Option<(String, String)> {
    match path
        .split('/')
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()[..]
    {
        [
            "api",
            "v1",
            "namespaces",
            ns,
            "persistentvolumeclaims",
            name,
        ] => Some((ns.to_string(), name.to_string())),
        _ => None,
    }
}

/// The storage request a PATCH or PUT body sets, in bytes.
fn request_in(method: &Method, body: &[u8]) -> Option<u128> {
    if !matches!(*method, Method::PATCH | Method::PUT) {
        return None;
    }
    let body: Value = serde_json::from_slice(body).ok()?;
    let q = body.pointer("/spec/resources/requests/storage")?.as_str()?;
    headroom::quantity::parse(q).ok().map(u128::from)
}

impl Before1790 {
    /// Claim `namespace/name`, whose request is `request` bytes, is on a server without KEP-1790.
    pub fn refuse_lowering(&mut self, namespace: &str, name: &str, request: u64) {
        self.requests
            .insert((namespace.into(), name.into()), u128::from(request));
    }

    /// The old server's answer to a write that lowers a scripted claim's request.
    pub fn refuse(&self, method: &Method, path: &str, body: &[u8]) -> Option<Value> {
        let key = claim_of(path)?;
        let held = *self.requests.get(&key)?;
        if request_in(method, body)? >= held {
            return None;
        }
        let field = "spec.resources.requests.storage";
        let why = "field can not be less than previous value";
        let mut status = super::proxy::status_json(
            422,
            "Invalid",
            &format!(
                "PersistentVolumeClaim \"{}\" is invalid: {field}: Forbidden: {why}",
                key.1
            ),
        );
        status["details"] = serde_json::json!({
            "name": key.1, "kind": "persistentvolumeclaims",
            "causes": [{ "reason": "FieldValueForbidden", "message": format!("Forbidden: {why}"), "field": field }],
        });
        Some(status)
    }

    /// A write the server accepted: a larger request is the new floor.
    pub fn written(&mut self, method: &Method, path: &str, body: &[u8]) {
        let (Some(key), Some(new)) = (claim_of(path), request_in(method, body)) else {
            return;
        };
        if let Some(held) = self.requests.get_mut(&key) {
            *held = (*held).max(new);
        }
    }
}
