//! What kube-apiserver refuses, for the objects the agent writes: PVC validation
//! (`ValidatePersistentVolumeClaimUpdate` in pkg/apis/core/validation) and the
//! `PersistentVolumeClaimResize` admission plugin, with their messages.
//!
//! Quantities are parsed here independently of the crate's own parser, so a parsing bug in the
//! agent cannot hide behind the same bug in the fake.

use serde_json::{Value, json};

use super::resources::Res;
use super::status::{ApiError, FieldError};

/// Cluster behaviours that changed across Kubernetes versions.
#[derive(Debug, Clone, Copy, Default)]
pub struct Features {
    /// KEP-1790 `RecoverVolumeExpansionFailure` (GA in 1.34): a bound claim may lower its request
    /// as long as it stays above `status.capacity`. Off: any decrease is refused (before 1.34).
    pub recover_from_expansion_failure: bool,
}

/// A storage quantity in nano-units, exact for every suffix kube-apiserver accepts.
pub fn parse_quantity(s: &str) -> Option<i128> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let (negative, number) = match number.as_bytes().first() {
        Some(b'-') => (true, &number[1..]),
        Some(b'+') => (false, &number[1..]),
        _ => (false, number),
    };
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && frac.is_empty()
        || !whole
            .chars()
            .chain(frac.chars())
            .all(|c| c.is_ascii_digit())
    {
        return None;
    }
    let digits: i128 = format!("{whole}{frac}").parse().ok()?;
    let (pow2, pow10): (u32, i32) = match suffix {
        "" => (0, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        exp if exp.starts_with(['e', 'E']) => (0, exp[1..].parse().ok()?),
        _ => return None,
    };
    let scale = 9 + pow10 - i32::try_from(frac.len()).ok()?;
    let mut v = digits.checked_mul(1i128.checked_shl(pow2)?)?;
    if scale >= 0 {
        v = v.checked_mul(10i128.checked_pow(u32::try_from(scale).ok()?)?)?;
    } else {
        // Below a nano-unit: round up, as resource.Quantity does.
        let d = 10i128.checked_pow(u32::try_from(-scale).ok()?)?;
        v = (v + d - 1) / d;
    }
    Some(if negative { -v } else { v })
}

const QUANTITY_ERROR: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

fn storage_at(obj: &Value, path: &[&str]) -> Result<Option<i128>, ApiError> {
    let mut cur = obj;
    for p in path {
        match cur.get(p) {
            Some(v) => cur = v,
            None => return Ok(None),
        }
    }
    match cur {
        Value::String(s) => parse_quantity(s)
            .map(Some)
            .ok_or_else(|| ApiError::bad_request(QUANTITY_ERROR)),
        Value::Number(n) => Ok(n.as_i64().map(|n| i128::from(n) * 1_000_000_000)),
        _ => Err(ApiError::bad_request(QUANTITY_ERROR)),
    }
}

fn requested(pvc: &Value) -> Result<Option<i128>, ApiError> {
    storage_at(pvc, &["spec", "resources", "requests", "storage"])
}

fn phase(obj: &Value) -> &str {
    obj["status"]["phase"].as_str().unwrap_or("")
}

/// Defaults the real API server fills in on create, so seeded objects look like served ones.
pub fn apply_defaults(res: Res, obj: &mut Value) {
    if res.is("", "persistentvolumeclaims") || res.is("", "persistentvolumes") {
        let spec = &mut obj["spec"];
        if spec.is_object() && spec.get("volumeMode").is_none() {
            spec["volumeMode"] = json!("Filesystem");
        }
    }
}

/// The status a create through the API starts with: the status subresource owns the rest.
pub fn initial_status(res: Res) -> Value {
    if res.is("", "pods") || res.is("", "persistentvolumeclaims") || res.is("", "persistentvolumes")
    {
        json!({ "phase": "Pending" })
    } else {
        json!({})
    }
}

pub fn validate_create(res: Res, obj: &Value) -> Result<(), ApiError> {
    if !res.is("", "persistentvolumeclaims") {
        return Ok(());
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    let mut errs = Vec::new();
    if obj["spec"]["accessModes"]
        .as_array()
        .is_none_or(|a| a.is_empty())
    {
        errs.push(FieldError::required(
            "spec.accessModes",
            "at least 1 access mode is required",
        ));
    }
    match requested(obj)? {
        None => errs.push(FieldError::required("spec.resources[storage]", "")),
        Some(n) if n <= 0 => errs.push(FieldError::invalid(
            "spec.resources[storage]",
            obj["spec"]["resources"]["requests"]["storage"]
                .as_str()
                .unwrap_or(""),
            "must be greater than zero",
        )),
        Some(_) => {}
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(res.ty(), name, &errs))
    }
}

/// Validation of an update through the main resource, then the resize admission plugin, in the
/// order kube-apiserver runs them (422 before 403). `storage_class` looks a StorageClass up.
pub fn validate_update(
    res: Res,
    old: &Value,
    new: &Value,
    features: Features,
    storage_class: impl Fn(&str) -> Option<Value>,
) -> Result<(), ApiError> {
    if !res.is("", "persistentvolumeclaims") {
        return Ok(());
    }
    let name = old["metadata"]["name"].as_str().unwrap_or("");
    let errs = pvc_update_errors(old, new, features)?;
    if !errs.is_empty() {
        return Err(ApiError::invalid(res.ty(), name, &errs));
    }
    resize_admission(res, name, old, new, storage_class)
}

fn pvc_update_errors(
    old: &Value,
    new: &Value,
    features: Features,
) -> Result<Vec<FieldError>, ApiError> {
    let mut errs = Vec::new();
    let mut old_spec = old["spec"].clone();
    let mut new_spec = new["spec"].clone();
    // The PV controller binds a claim by setting volumeName once.
    if old_spec["volumeName"].as_str().unwrap_or("").is_empty() {
        old_spec["volumeName"] = new_spec["volumeName"].clone();
    }
    let (old_size, new_size) = (requested(old)?, requested(new)?);
    // `new.status` is the stored status here (the main resource cannot change it).
    if phase(new) == "Bound" {
        for spec in [&mut old_spec, &mut new_spec] {
            if let Some(req) = spec["resources"]["requests"].as_object_mut() {
                req.remove("storage");
            }
            if let Some(o) = spec.as_object_mut() {
                o.remove("volumeAttributesClassName");
            }
        }
    }
    strip_nulls(&mut old_spec);
    strip_nulls(&mut new_spec);
    if old_spec != new_spec {
        errs.push(FieldError::forbidden(
            "spec",
            format!(
                "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims\n{}",
                spec_diff(&old_spec, &new_spec)
            ),
        ));
    }
    if let (Some(old_size), Some(new_size)) = (old_size, new_size)
        && new_size < old_size
    {
        if !features.recover_from_expansion_failure {
            errs.push(FieldError::forbidden(
                "spec.resources.requests.storage",
                "field can not be less than previous value",
            ));
        } else {
            let capacity = storage_at(old, &["status", "capacity", "storage"])?.unwrap_or(0);
            if new_size <= capacity {
                errs.push(FieldError::forbidden(
                    "spec.resources.requests.storage",
                    "field can not be less than status.capacity",
                ));
            }
        }
    }
    if old["spec"]["volumeMode"] != new["spec"]["volumeMode"] {
        let v = new["spec"]["volumeMode"].as_str().unwrap_or("");
        errs.push(FieldError::invalid("volumeMode", v, "field is immutable"));
    }
    Ok(errs)
}

/// The `PersistentVolumeClaimResize` admission plugin: only growth is checked.
fn resize_admission(
    res: Res,
    name: &str,
    old: &Value,
    new: &Value,
    storage_class: impl Fn(&str) -> Option<Value>,
) -> Result<(), ApiError> {
    let (Some(old_size), Some(new_size)) = (requested(old)?, requested(new)?) else {
        return Ok(());
    };
    if new_size <= old_size {
        return Ok(());
    }
    if phase(old) != "Bound" {
        return Err(ApiError::forbidden(
            res.ty(),
            name,
            "Only bound persistent volume claims can be expanded",
        ));
    }
    let (class, old_class) = (claim_class(new), claim_class(old));
    let allowed = !class.is_empty()
        && class == old_class
        && storage_class(class)
            .is_some_and(|sc| sc["allowVolumeExpansion"].as_bool() == Some(true));
    if allowed {
        Ok(())
    } else {
        Err(ApiError::forbidden(
            res.ty(),
            name,
            "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize",
        ))
    }
}

/// `GetPersistentVolumeClaimClass`: the beta annotation wins over `spec.storageClassName`.
fn claim_class(pvc: &Value) -> &str {
    pvc["metadata"]["annotations"]["volume.beta.kubernetes.io/storage-class"]
        .as_str()
        .or_else(|| pvc["spec"]["storageClassName"].as_str())
        .unwrap_or("")
}

fn strip_nulls(v: &mut Value) {
    if let Value::Object(m) = v {
        m.retain(|_, x| !x.is_null());
        m.values_mut().for_each(strip_nulls);
    }
}

/// A short stand-in for the `cmp.Diff` text the real message carries after a newline.
fn spec_diff(old: &Value, new: &Value) -> String {
    let keys: std::collections::BTreeSet<&String> = old
        .as_object()
        .into_iter()
        .chain(new.as_object())
        .flat_map(|m| m.keys())
        .collect();
    keys.into_iter()
        .filter(|k| old.get(k.as_str()) != new.get(k.as_str()))
        .map(|k| {
            format!(
                "  {k}: {} -> {}",
                old.get(k.as_str()).unwrap_or(&Value::Null),
                new.get(k.as_str()).unwrap_or(&Value::Null)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::parse_quantity;

    #[test]
    fn quantities() {
        let g = 1_000_000_000i128;
        assert_eq!(parse_quantity("1Gi"), Some((1 << 30) * g));
        assert_eq!(parse_quantity("1073741824"), Some((1 << 30) * g));
        assert_eq!(parse_quantity("1.5Gi"), Some(3 * (1 << 29) * g));
        assert_eq!(parse_quantity("2G"), Some(2_000_000_000 * g));
        assert_eq!(parse_quantity("500m"), Some(g / 2));
        assert_eq!(parse_quantity("1e3"), Some(1000 * g));
        assert_eq!(parse_quantity("10Zi"), None);
        assert_eq!(parse_quantity("abc"), None);
    }
}
