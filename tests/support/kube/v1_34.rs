//! A scripted mock of what kube-apiserver 1.34 adds to claims and the 1.20 test server lacks,
//! applied by the fault proxy ([`super::proxy`]) to the claims a test names:
//!
//! - `status.allocatedResourceStatuses` (e.g. `ControllerResizeInfeasible`): 1.20 drops the
//!   field, so the mock adds it to every answer carrying the claim (GET, LIST, WATCH, PATCH).
//! - KEP-1790 `RecoverVolumeExpansionFailure` (GA in 1.34, [`Features`]): a bound claim may lower
//!   its request while it stays above `status.capacity`; lower than that is refused (422,
//!   "field can not be less than status.capacity"). 1.20 never lets a request go down, so the
//!   server holds such a claim at its capacity and the mock shows the higher request until a
//!   write sets one: a lowering to above the capacity then reaches 1.20 as growth, which it
//!   accepts. Without the feature nothing is scripted: 1.20 refuses any decrease itself, as
//!   every server before 1.34 does.
//! - KEP-3751 VolumeAttributesClass (GA in 1.34, [`Attributes`]): the class a claim asks for
//!   (`spec.volumeAttributesClassName`), the one it has (`status.currentVolumeAttributesClassName`)
//!   and the modification in flight (`status.modifyVolumeStatus`); 1.20 has none of these
//!   fields, so the mock adds them to every answer carrying the claim, as it does the statuses.
//!
//! Everything else about these claims (admission, resourceVersions, watches) is the real
//! server's.
#![allow(dead_code)]

use std::collections::BTreeMap;

use hyper::Method;
use hyper::body::Bytes;
use serde_json::Value;

/// Cluster behaviours that changed across Kubernetes versions.
#[derive(Debug, Clone, Copy, Default)]
pub struct Features {
    /// KEP-1790 (GA in 1.34): a bound claim may lower its request while it stays above
    /// `status.capacity`. Off: the real 1.20 server's rule, any decrease refused.
    pub recover_from_expansion_failure: bool,
}

/// A claim's VolumeAttributesClass as 1.34 shows it (KEP-3751): `None` leaves a field absent.
#[derive(Debug, Clone, Default)]
pub struct Attributes {
    /// `spec.volumeAttributesClassName`.
    pub wanted: Option<String>,
    /// `status.currentVolumeAttributesClassName`.
    pub current: Option<String>,
    /// `status.modifyVolumeStatus` (`{"status": "InProgress", "targetVolumeAttributesClassName": ...}`).
    pub modify_status: Option<Value>,
}

#[derive(Debug, Default)]
struct Scripted {
    allocated_resource_statuses: Option<Value>,
    attributes: Option<Attributes>,
    /// (request shown, status.capacity): a request above capacity that 1.20 cannot hold.
    held: Option<(String, u128)>,
}

#[derive(Debug, Default)]
pub struct V134 {
    features: Features,
    claims: BTreeMap<(String, String), Scripted>,
}

/// A claims URL: `/api/v1[/namespaces/{ns}]/persistentvolumeclaims[/{name}[/{sub}]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimsPath {
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
}

pub fn claims_path(path: &str) -> Option<ClaimsPath> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let (namespace, rest) = match parts.as_slice() {
        ["api", "v1", "namespaces", ns, rest @ ..] => (Some(ns.to_string()), rest),
        ["api", "v1", rest @ ..] => (None, rest),
        _ => return None,
    };
    match rest {
        ["persistentvolumeclaims", more @ ..] if more.len() <= 2 => Some(ClaimsPath {
            namespace,
            name: more.first().map(|s| s.to_string()),
            sub: more.get(1).map(|s| s.to_string()),
        }),
        _ => None,
    }
}

/// A storage quantity in bytes: an integer with an optional binary or decimal suffix (what the
/// tests and the agent write). `None` for anything else, which the mock leaves to the server.
fn bytes(q: &str) -> Option<u128> {
    let q = q.trim();
    let split = q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len());
    let (n, suffix) = q.split_at(split);
    let n: u128 = n.parse().ok()?;
    let unit: u128 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        _ => return None,
    };
    n.checked_mul(unit)
}

/// Sets `field` of the object `obj` to `value`, or removes it for `None` (not an object: left).
fn set(obj: &mut Value, field: &str, value: Option<Value>) {
    let Some(o) = obj.as_object_mut() else { return };
    match value {
        Some(v) => o.insert(field.to_string(), v),
        None => o.remove(field),
    };
}

fn storage<'a>(obj: &'a Value, at: &str) -> Option<&'a str> {
    obj.pointer(at)?.as_str()
}

impl V134 {
    pub fn set_features(&mut self, features: Features) {
        self.features = features;
    }

    pub fn features(&self) -> Features {
        self.features
    }

    /// Claim `namespace/name` reports these `status.allocatedResourceStatuses` from now on.
    pub fn allocated_resource_statuses(&mut self, namespace: &str, name: &str, statuses: Value) {
        self.claims
            .entry((namespace.into(), name.into()))
            .or_default()
            .allocated_resource_statuses = Some(statuses);
    }

    /// Claim `namespace/name` shows these VolumeAttributesClass fields from now on (answers only:
    /// a watching client sees them with the claim's next change on the server).
    pub fn volume_attributes(&mut self, namespace: &str, name: &str, attributes: Attributes) {
        self.claims
            .entry((namespace.into(), name.into()))
            .or_default()
            .attributes = Some(attributes);
    }

    /// Claim `namespace/name`, stored by the 1.20 server at `capacity`, shows `request` until a
    /// write sets another (KEP-1790's lowered requests need the feature on).
    pub fn hold_request(&mut self, namespace: &str, name: &str, request: &str, capacity: &str) {
        assert!(
            self.features.recover_from_expansion_failure,
            "a request above capacity needs no mock without KEP-1790: create it on the server"
        );
        let cap = bytes(capacity).expect("capacity quantity");
        self.claims
            .entry((namespace.into(), name.into()))
            .or_default()
            .held = Some((request.into(), cap));
    }

    /// Whether answers for `path` may carry a scripted claim.
    pub fn scripts(&self, path: Option<&ClaimsPath>) -> bool {
        let Some(p) = path else { return false };
        self.claims.keys().any(|(ns, name)| {
            p.namespace.as_ref().is_none_or(|n| n == ns)
                && p.name.as_ref().is_none_or(|n| n == name)
        })
    }

    fn target(&self, path: &str) -> Option<((String, String), &Scripted)> {
        let p = claims_path(path)?;
        let key = (p.namespace?, p.name?);
        if p.sub.is_some() {
            return None;
        }
        let s = self.claims.get(&key)?;
        Some((key, s))
    }

    /// The 1.34 answer to a write the server must not see: a held request lowered to or below
    /// `status.capacity` (422, as `ValidatePersistentVolumeClaimUpdate` says it).
    pub fn refuse(&self, method: &Method, path: &str, body: &[u8]) -> Option<Value> {
        if !matches!(*method, Method::PATCH | Method::PUT) {
            return None;
        }
        let ((_, name), s) = self.target(path)?;
        let (held, capacity) = s.held.as_ref()?;
        let body: Value = serde_json::from_slice(body).ok()?;
        let new = bytes(storage(&body, "/spec/resources/requests/storage")?)?;
        if new >= bytes(held)? || new > *capacity {
            return None;
        }
        let field = "spec.resources.requests.storage";
        let why = "field can not be less than status.capacity";
        let mut status = super::proxy::status_json(
            422,
            "Invalid",
            &format!("PersistentVolumeClaim \"{name}\" is invalid: {field}: Forbidden: {why}"),
        );
        status["details"] = serde_json::json!({
            "name": name, "kind": "persistentvolumeclaims",
            "causes": [{ "reason": "FieldValueForbidden", "message": format!("Forbidden: {why}"), "field": field }],
        });
        Some(status)
    }

    /// A write the server accepted: a new storage request replaces the held one.
    pub fn written(&mut self, method: &Method, path: &str, body: &[u8]) {
        if !matches!(*method, Method::PATCH | Method::PUT) {
            return;
        }
        let Some((key, _)) = self.target(path) else {
            return;
        };
        let sets_request = serde_json::from_slice::<Value>(body)
            .ok()
            .is_some_and(|b| storage(&b, "/spec/resources/requests/storage").is_some());
        if sets_request && let Some(s) = self.claims.get_mut(&key) {
            s.held = None;
        }
    }

    /// One claim as 1.34 would show it.
    pub fn apply(&self, claim: &mut Value) {
        let ns = claim["metadata"]["namespace"].as_str().unwrap_or("");
        let name = claim["metadata"]["name"].as_str().unwrap_or("");
        let Some(s) = self.claims.get(&(ns.to_string(), name.to_string())) else {
            return;
        };
        if let Some(statuses) = &s.allocated_resource_statuses
            && claim["status"].is_object()
        {
            claim["status"]["allocatedResourceStatuses"] = statuses.clone();
        }
        if let Some(a) = &s.attributes {
            set(
                &mut claim["spec"],
                "volumeAttributesClassName",
                a.wanted.clone().map(Value::from),
            );
            let current = a.current.clone().map(Value::from);
            set(
                &mut claim["status"],
                "currentVolumeAttributesClassName",
                current,
            );
            set(
                &mut claim["status"],
                "modifyVolumeStatus",
                a.modify_status.clone(),
            );
        }
        if let Some((request, _)) = &s.held
            && claim["spec"]["resources"]["requests"].is_object()
        {
            claim["spec"]["resources"]["requests"]["storage"] = Value::from(request.as_str());
        }
    }

    /// A claim or a list of claims (an answer to GET, LIST, PATCH), as 1.34 would show it.
    pub fn rewrite(&self, body: &Bytes) -> Bytes {
        let Ok(mut v) = serde_json::from_slice::<Value>(body) else {
            return body.clone();
        };
        if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
            items.iter_mut().for_each(|c| self.apply(c));
        } else if v["kind"] == "PersistentVolumeClaim" {
            self.apply(&mut v);
        } else {
            return body.clone();
        }
        Bytes::from(v.to_string())
    }

    /// Watch event lines (each a JSON object and a newline), as 1.34 would send them.
    pub fn rewrite_lines(&self, lines: &[u8]) -> Bytes {
        let mut out = Vec::with_capacity(lines.len());
        for line in lines.split_inclusive(|b| *b == b'\n') {
            match serde_json::from_slice::<Value>(line) {
                Ok(mut event) if event["object"].is_object() => {
                    self.apply(&mut event["object"]);
                    out.extend_from_slice(event.to_string().as_bytes());
                    out.push(b'\n');
                }
                _ => out.extend_from_slice(line),
            }
        }
        Bytes::from(out)
    }
}
