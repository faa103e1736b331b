//! A namespace's ResourceQuotas as the lines that limit one claim's storage request, read the way
//! the API server's quota admission reads them (kube-apiserver 1.20 to 1.34,
//! `pkg/quota/v1/evaluator/core/persistent_volume_claims.go` and the `ResourceQuota` admission
//! plugin): only `status.hard` and `status.used` count (a quota the controller has not synced
//! limits nothing yet), a quota with scopes does not match claims unless every scope is
//! `VolumeAttributesClass`, and a claim is charged the larger of its request and
//! `status.allocatedResources.storage`.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, ResourceQuota};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::{KubeError, pvc_name};
use crate::decide::quota::QuotaLine;

pub const REQUESTS_STORAGE: &str = "requests.storage";
/// `<class>.storageclass.storage.k8s.io/requests.storage`: the per-class line.
const CLASS_SUFFIX: &str = ".storageclass.storage.k8s.io/requests.storage";
/// The only scope a claim can match (behind the VolumeAttributesClass gate, GA in 1.34).
const VAC_SCOPE: &str = "VolumeAttributesClass";

/// What the quota admission charges the claim: the larger of its request and
/// `status.allocatedResources.storage` (KEP-1790; absent before 1.23's
/// RecoverVolumeExpansionFailure, where the request alone counts).
pub fn charged(pvc: &PersistentVolumeClaim) -> Result<u64, KubeError> {
    let request = super::storage_request(pvc)?.unwrap_or(0);
    let allocated = pvc
        .status
        .as_ref()
        .and_then(|s| s.allocated_resources.as_ref())
        .and_then(|a| a.get("storage"))
        .map(|q| parse(&pvc_name(pvc), "status.allocatedResources.storage", q))
        .transpose()?
        .unwrap_or(0);
    Ok(request.max(allocated))
}

/// The claim's class as quota reads it: `spec.storageClassName`, or the beta annotation older
/// claims carry.
fn class_of(pvc: &PersistentVolumeClaim) -> Option<&str> {
    pvc.spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .or_else(|| {
            pvc.metadata
                .annotations
                .as_ref()?
                .get("volume.beta.kubernetes.io/storage-class")
                .map(String::as_str)
        })
        .filter(|c| !c.is_empty())
}

/// Every line of `quotas` that limits `pvc`'s storage request. A quantity that does not parse is
/// an error naming the quota and the field: the claim is not grown blind.
pub fn lines_for<'a>(
    quotas: impl IntoIterator<Item = &'a ResourceQuota>,
    pvc: &PersistentVolumeClaim,
) -> Result<Vec<QuotaLine>, KubeError> {
    let per_class = class_of(pvc).map(|c| format!("{c}{CLASS_SUFFIX}"));
    let mut lines = Vec::new();
    for q in quotas {
        if !matches_claim(q, pvc) {
            continue;
        }
        let Some(status) = q.status.as_ref() else {
            continue;
        };
        let object = format!(
            "ResourceQuota {}/{}",
            q.metadata.namespace.as_deref().unwrap_or(""),
            q.metadata.name.as_deref().unwrap_or("")
        );
        let resources = [Some(REQUESTS_STORAGE), per_class.as_deref()];
        for resource in resources.into_iter().flatten() {
            let Some(hard) = status.hard.as_ref().and_then(|h| h.get(resource)) else {
                continue;
            };
            let used = status.used.as_ref().and_then(|u| u.get(resource));
            lines.push(QuotaLine {
                quota: q.metadata.name.clone().unwrap_or_default(),
                resource: resource.to_string(),
                hard_bytes: parse(&object, &format!("status.hard[{resource}]"), hard)?,
                used_bytes: used
                    .map(|u| parse(&object, &format!("status.used[{resource}]"), u))
                    .transpose()?,
            });
        }
    }
    Ok(lines)
}

fn parse(object: &str, field: &str, q: &Quantity) -> Result<u64, KubeError> {
    crate::quantity::parse(&q.0).map_err(|source| KubeError::FieldQuantity {
        object: object.to_string(),
        field: field.to_string(),
        value: q.0.clone(),
        source,
    })
}

/// The quota a refusal by the `ResourceQuota` admission plugin names, if the answer is one. Its
/// Status is a plain `Forbidden` (403) whose details (kind, name) are the claim's, exactly as an
/// RBAC or resize-admission refusal's are: the message is the only place that says which quota,
/// in the fixed forms `... exceeded quota: <name>, requested: ...` and `... status unknown for
/// quota: <name>, resources: ...` (`k8s.io/apiserver/pkg/admission/plugin/resourcequota`,
/// unchanged from 1.20 to 1.34). The name is read out of it; nothing else acts on the text.
pub fn refused_by(code: u16, reason: &str, message: &str) -> Option<String> {
    if code != 403 || reason != "Forbidden" {
        return None;
    }
    let (_, rest) = message
        .split_once("exceeded quota: ")
        .or_else(|| message.split_once("status unknown for quota: "))?;
    let name = rest.split(',').next()?.trim();
    (!name.is_empty()).then(|| name.to_string())
}

/// Whether the quota counts this claim at all: an unscoped quota does; a scoped one only through
/// `VolumeAttributesClass` selectors the claim satisfies (any other scope is a pod's).
fn matches_claim(q: &ResourceQuota, pvc: &PersistentVolumeClaim) -> bool {
    let Some(spec) = q.spec.as_ref() else {
        return true;
    };
    let scopes = spec
        .scopes
        .iter()
        .flatten()
        .map(|s| (s.as_str(), "Exists", None));
    let selectors = spec
        .scope_selector
        .iter()
        .flat_map(|s| s.match_expressions.iter().flatten())
        .map(|e| {
            (
                e.scope_name.as_str(),
                e.operator.as_str(),
                e.values.as_deref(),
            )
        });
    let classes = attribute_classes(pvc);
    scopes.chain(selectors).all(|(scope, op, values)| {
        scope == VAC_SCOPE && vac_matches(op, values.unwrap_or_default(), &classes)
    })
}

fn attribute_classes(pvc: &PersistentVolumeClaim) -> Vec<&str> {
    let spec = pvc
        .spec
        .as_ref()
        .and_then(|s| s.volume_attributes_class_name.as_deref());
    let status = pvc.status.as_ref();
    let current = status.and_then(|s| s.current_volume_attributes_class_name.as_deref());
    let target = status
        .and_then(|s| s.modify_volume_status.as_ref())
        .map(|m| {
            m.target_volume_attributes_class_name
                .as_deref()
                .unwrap_or("")
        });
    [spec, current, target]
        .into_iter()
        .flatten()
        .filter(|c| !c.is_empty())
        .collect()
}

/// A label selector over `{VolumeAttributesClass: <name>}` for each class the claim names (an
/// empty set when it names none), as the evaluator builds it.
fn vac_matches(op: &str, values: &[String], classes: &[&str]) -> bool {
    let has = |c: &&str| values.iter().any(|v| v == c);
    match op {
        "Exists" => !classes.is_empty(),
        "DoesNotExist" => classes.is_empty(),
        "In" => classes.iter().any(has),
        "NotIn" => classes.is_empty() || classes.iter().any(|c| !has(c)),
        // An operator the API server would not have admitted: count the quota, the safe side.
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::MI;
    use serde_json::json;

    fn claim(class: &str, request: &str, allocated: Option<&str>) -> PersistentVolumeClaim {
        let mut v = json!({
            "metadata": {"name": "data", "namespace": "db"},
            "spec": {"storageClassName": class, "resources": {"requests": {"storage": request}}},
            "status": {}
        });
        if let Some(a) = allocated {
            v["status"]["allocatedResources"] = json!({"storage": a});
        }
        serde_json::from_value(v).expect("claim")
    }

    fn quota(
        name: &str,
        spec: serde_json::Value,
        hard: serde_json::Value,
        used: serde_json::Value,
    ) -> ResourceQuota {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "db"},
            "spec": spec,
            "status": {"hard": hard, "used": used}
        }))
        .expect("quota")
    }

    #[test]
    fn both_storage_lines_of_the_claims_class_count_and_nothing_else() {
        let q = quota(
            "storage",
            json!({}),
            json!({"requests.storage": "1Gi", "fast.storageclass.storage.k8s.io/requests.storage": "100Mi",
                   "slow.storageclass.storage.k8s.io/requests.storage": "1Mi", "pods": "10"}),
            json!({"requests.storage": "200Mi", "fast.storageclass.storage.k8s.io/requests.storage": "64Mi"}),
        );
        let lines = lines_for([&q], &claim("fast", "64Mi", None)).expect("lines");
        let got: Vec<(&str, u64, Option<u64>)> = lines
            .iter()
            .map(|l| (l.resource.as_str(), l.hard_bytes, l.used_bytes))
            .collect();
        assert_eq!(
            got,
            [
                ("requests.storage", 1024 * MI, Some(200 * MI)),
                (
                    "fast.storageclass.storage.k8s.io/requests.storage",
                    100 * MI,
                    Some(64 * MI)
                ),
            ]
        );
    }

    #[test]
    fn a_quota_not_synced_yet_or_scoped_to_pods_limits_nothing() {
        let unsynced: ResourceQuota = serde_json::from_value(json!({
            "metadata": {"name": "new", "namespace": "db"},
            "spec": {"hard": {"requests.storage": "1Mi"}}
        }))
        .expect("quota");
        let pods_only = quota(
            "be",
            json!({"scopes": ["BestEffort"]}),
            json!({"requests.storage": "1Mi"}),
            json!({"requests.storage": "1Mi"}),
        );
        let c = claim("fast", "64Mi", None);
        assert_eq!(lines_for([&unsynced, &pods_only], &c).expect("lines"), []);
    }

    #[test]
    fn attribute_class_scopes_follow_the_claims_classes() {
        let scoped = |op: &str, values: serde_json::Value| {
            quota(
                "vac",
                json!({"scopeSelector": {"matchExpressions": [
                    {"scopeName": "VolumeAttributesClass", "operator": op, "values": values}]}}),
                json!({"requests.storage": "1Gi"}),
                json!({"requests.storage": "0"}),
            )
        };
        let mut gold = claim("fast", "64Mi", None);
        if let Some(s) = gold.spec.as_mut() {
            s.volume_attributes_class_name = Some("gold".into());
        }
        let plain = claim("fast", "64Mi", None);
        let count =
            |q: &ResourceQuota, c: &PersistentVolumeClaim| lines_for([q], c).expect("lines").len();
        assert_eq!(count(&scoped("In", json!(["gold"])), &gold), 1);
        assert_eq!(count(&scoped("In", json!(["gold"])), &plain), 0);
        assert_eq!(count(&scoped("NotIn", json!(["gold"])), &plain), 1);
        assert_eq!(count(&scoped("Exists", json!(null)), &plain), 0);
        assert_eq!(count(&scoped("DoesNotExist", json!(null)), &plain), 1);
    }

    #[test]
    fn the_charge_is_the_larger_of_request_and_allocated() {
        assert_eq!(
            charged(&claim("fast", "64Mi", None)).expect("charge"),
            64 * MI
        );
        assert_eq!(
            charged(&claim("fast", "64Mi", Some("80Mi"))).expect("charge"),
            80 * MI
        );
        assert_eq!(
            charged(&claim("fast", "64Mi", Some("1Mi"))).expect("charge"),
            64 * MI
        );
    }

    #[test]
    fn a_quota_refusal_is_told_from_other_403s_and_names_its_quota() {
        let exceeded = "persistentvolumeclaims \"data\" is forbidden: exceeded quota: storage, \
                        requested: requests.storage=16Mi, used: requests.storage=64Mi, limited: requests.storage=64Mi";
        assert_eq!(
            refused_by(403, "Forbidden", exceeded).as_deref(),
            Some("storage")
        );
        let unknown = "persistentvolumeclaims \"data\" is forbidden: status unknown for quota: q1, resources: requests.storage";
        assert_eq!(refused_by(403, "Forbidden", unknown).as_deref(), Some("q1"));
        let rbac = "persistentvolumeclaims \"data\" is forbidden: User \"x\" cannot patch resource";
        assert_eq!(refused_by(403, "Forbidden", rbac), None);
        let resize = "persistentvolumeclaims \"data\" is forbidden: only dynamically provisioned pvc can be resized";
        assert_eq!(refused_by(403, "Forbidden", resize), None);
        assert_eq!(refused_by(422, "Invalid", exceeded), None);
        assert_eq!(refused_by(403, "Forbidden", "exceeded quota: , x"), None);
    }

    #[test]
    fn a_bad_quantity_names_the_quota_and_field() {
        let q = quota(
            "bad",
            json!({}),
            json!({"requests.storage": "lots"}),
            json!({}),
        );
        let e = lines_for([&q], &claim("fast", "64Mi", None)).expect_err("refused");
        let text = e.to_string();
        assert!(
            text.contains("ResourceQuota db/bad") && text.contains("status.hard[requests.storage]"),
            "{text}"
        );
    }
}
