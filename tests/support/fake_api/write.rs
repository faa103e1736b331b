//! The write verbs: POST, PUT, PATCH, DELETE, with optimistic concurrency on
//! `metadata.resourceVersion`, the status subresource split, and the rules of `rules.rs`.

use serde_json::{Value, json};

use super::handlers::{Call, Reply, Target};
use super::resources::Res;
use super::rules;
use super::status::{ApiError, FieldError};
use super::store::{Store, now};
use super::{Shared, lock};

fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding request body: {e}")))?;
    if !v.is_object() || !(v["metadata"].is_object() || v.get("metadata").is_none()) {
        return Err(ApiError::bad_request(
            "request body must be an object with an object metadata",
        ));
    }
    Ok(v)
}

/// apiVersion and kind in a body must name the type of the URL when they are given.
fn check_type(res: Res, obj: &mut Value) -> Result<(), ApiError> {
    let ty = res.ty();
    let api_version = ty.api_version();
    if let Some(v) = obj["apiVersion"].as_str()
        && !v.is_empty()
        && v != api_version
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({v}) does not match the expected API version ({api_version})"
        )));
    }
    if let Some(k) = obj["kind"].as_str()
        && !k.is_empty()
        && k != ty.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({})",
            ty.kind
        )));
    }
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(ty.kind);
    Ok(())
}

fn meta<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj["metadata"][field].as_str().unwrap_or("")
}

pub fn create(shared: &Shared, t: &Target, call: &Call) -> Result<Reply, ApiError> {
    let mut obj = parse_body(call.body)?;
    check_type(t.res, &mut obj)?;
    let mut store = lock(&shared.store);
    if meta(&obj, "name").is_empty() {
        let prefix = meta(&obj, "generateName").to_string();
        if prefix.is_empty() {
            let err = FieldError::required("metadata.name", "name or generateName is required");
            return Err(ApiError::invalid(t.res.ty(), "", &[err]));
        }
        // Short, unique and DNS-safe like the real 5-character suffix.
        let suffix = store.new_uid();
        obj["metadata"]["name"] = json!(format!("{prefix}{}", &suffix[suffix.len() - 5..]));
    }
    if t.res.ty().namespaced {
        match meta(&obj, "namespace") {
            "" => obj["metadata"]["namespace"] = json!(t.ns()),
            ns if ns != t.ns() => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => {}
        }
    }
    if !meta(&obj, "resourceVersion").is_empty() {
        return Err(ApiError::bad_request(
            "resourceVersion should not be set on objects to be created",
        ));
    }
    if let Some(m) = obj["metadata"].as_object_mut() {
        for server_owned in [
            "uid",
            "creationTimestamp",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            m.remove(server_owned);
        }
    }
    if t.res.ty().status_subresource {
        obj["status"] = rules::initial_status(t.res);
    }
    rules::apply_defaults(t.res, &mut obj);
    rules::validate_create(t.res, &obj)?;
    let created = store.create(t.res, obj)?;
    Ok(Reply::Json(201, created))
}

pub fn replace(shared: &Shared, t: &Target, call: &Call) -> Result<Reply, ApiError> {
    let body = parse_body(call.body)?;
    update(shared, t, |_| Ok(body))
}

pub fn patch(shared: &Shared, t: &Target, call: &Call) -> Result<Reply, ApiError> {
    let patch: Value = serde_json::from_slice(call.body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    match call.content_type {
        "application/merge-patch+json" => update(shared, t, |old| Ok(merged(old, &patch))),
        // Strategic merge differs from a JSON merge patch only for lists with patch-merge keys
        // (containers, conditions, ...) and `$` directives; the agent patches only maps and
        // scalars, for which the two agree. Directives are refused rather than misapplied.
        "application/strategic-merge-patch+json" => {
            if has_directive(&patch) {
                return Err(ApiError::bad_request(
                    "the fake API server does not implement strategic-merge-patch directives ($patch, $retainKeys, ...)",
                ));
            }
            update(shared, t, |old| Ok(merged(old, &patch)))
        }
        "application/json-patch+json" => {
            let ops: json_patch::Patch = serde_json::from_value(patch)
                .map_err(|e| ApiError::bad_request(format!("error decoding json patch: {e}")))?;
            update(shared, t, |old| {
                let mut doc = old.clone();
                json_patch::patch(&mut doc, &ops).map_err(|e| {
                    let name = meta(old, "name");
                    ApiError::invalid(
                        t.res.ty(),
                        name,
                        &[FieldError::invalid("", "", e.to_string())],
                    )
                })?;
                Ok(doc)
            })
        }
        other => Err(ApiError::unsupported_media_type(other)),
    }
}

fn merged(old: &Value, patch: &Value) -> Value {
    let mut doc = old.clone();
    json_patch::merge(&mut doc, patch);
    doc
}

fn has_directive(v: &Value) -> bool {
    match v {
        Value::Object(m) => m
            .iter()
            .any(|(k, v)| k.starts_with('$') || has_directive(v)),
        Value::Array(a) => a.iter().any(has_directive),
        _ => false,
    }
}

/// Read, compute the new object, check it, write: all under the store lock, so concurrent
/// writers serialize exactly as through etcd's compare-and-swap.
fn update(
    shared: &Shared,
    t: &Target,
    compute: impl FnOnce(&Value) -> Result<Value, ApiError>,
) -> Result<Reply, ApiError> {
    let name = t.name.as_deref().unwrap_or("");
    let ty = t.res.ty();
    let features = *lock(&shared.features);
    let mut store = lock(&shared.store);
    let old = store
        .get(t.res, t.ns(), name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(ty, name))?;
    let mut new = compute(&old)?;
    if !new.is_object() || !new["metadata"].is_object() {
        return Err(ApiError::bad_request("the updated object has no metadata"));
    }
    check_type(t.res, &mut new)?;
    match meta(&new, "name") {
        "" => new["metadata"]["name"] = json!(name),
        n if n != name => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        _ => {}
    }
    if ty.namespaced {
        match meta(&new, "namespace") {
            "" => new["metadata"]["namespace"] = json!(t.ns()),
            ns if ns != t.ns() => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => {}
        }
    }
    let wanted_rv = meta(&new, "resourceVersion");
    if !wanted_rv.is_empty() && wanted_rv != meta(&old, "resourceVersion") {
        return Err(ApiError::conflict_modified(ty, name));
    }
    for server_owned in [
        "uid",
        "creationTimestamp",
        "generation",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "resourceVersion",
    ] {
        match old["metadata"].get(server_owned) {
            Some(v) => new["metadata"][server_owned] = v.clone(),
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove(server_owned);
                }
            }
        }
    }
    if t.sub.as_deref() == Some("status") {
        // The status endpoint writes status only (ResetObjectMetaForStatus + spec reset).
        new["spec"] = old["spec"].clone();
        for kept in ["labels", "annotations", "finalizers", "ownerReferences"] {
            match old["metadata"].get(kept) {
                Some(v) => new["metadata"][kept] = v.clone(),
                None => {
                    if let Some(m) = new["metadata"].as_object_mut() {
                        m.remove(kept);
                    }
                }
            }
        }
    } else {
        if ty.status_subresource {
            // The main resource cannot write status.
            new["status"] = old["status"].clone();
            if old.get("status").is_none()
                && let Some(m) = new.as_object_mut()
            {
                m.remove("status");
            }
        }
        rules::validate_update(t.res, &old, &new, features, |class| {
            store.get(storage_class(), "", class).cloned()
        })?;
    }
    let updated = store.update(t.res, new)?;
    finish_deletion(&mut store, t.res, updated)
}

fn storage_class() -> Res {
    super::resources::find("storage.k8s.io", "v1", "storageclasses")
        .unwrap_or_else(|| unreachable!("storageclasses are always served"))
}

/// An object being deleted goes away once its last finalizer is removed.
fn finish_deletion(store: &mut Store, res: Res, obj: Value) -> Result<Reply, ApiError> {
    let deleting = !meta(&obj, "deletionTimestamp").is_empty();
    let finalizers = obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty());
    if deleting && !finalizers {
        let gone = store.delete(res, meta(&obj, "namespace"), meta(&obj, "name"))?;
        return Ok(Reply::Json(200, gone));
    }
    Ok(Reply::Json(200, obj))
}

pub fn delete(shared: &Shared, t: &Target, call: &Call) -> Result<Reply, ApiError> {
    let name = t.name.as_deref().unwrap_or("");
    let ty = t.res.ty();
    let options: Value = if call.body.is_empty() {
        json!({})
    } else {
        parse_body(call.body)?
    };
    let mut store = lock(&shared.store);
    let obj = store
        .get(t.res, t.ns(), name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(ty, name))?;
    for (field, label) in [("uid", "UID"), ("resourceVersion", "ResourceVersion")] {
        if let Some(want) = options["preconditions"][field].as_str()
            && want != meta(&obj, field)
        {
            let why = format!(
                "Precondition failed: {label} in precondition: {want}, {label} in object meta: {}",
                meta(&obj, field)
            );
            return Err(ApiError::conflict(ty, name, &why));
        }
    }
    let grace = call
        .param("gracePeriodSeconds")
        .and_then(|g| g.parse::<i64>().ok())
        .or_else(|| options["gracePeriodSeconds"].as_i64());
    let finalizers = obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty());
    let grace = grace
        .or_else(|| obj["spec"]["terminationGracePeriodSeconds"].as_i64())
        .unwrap_or(30);
    // A scheduled pod is deleted gracefully: marked now, removed later by its kubelet.
    let graceful_pod = t.res.is("", "pods")
        && grace > 0
        && !obj["spec"]["nodeName"].as_str().unwrap_or("").is_empty();
    if finalizers || graceful_pod {
        if !meta(&obj, "deletionTimestamp").is_empty() {
            return Ok(Reply::Json(200, obj));
        }
        let mut marked = obj;
        marked["metadata"]["deletionTimestamp"] = json!(now());
        marked["metadata"]["deletionGracePeriodSeconds"] =
            json!(if graceful_pod { grace } else { 0 });
        let updated = store.update(t.res, marked)?;
        return Ok(Reply::Json(200, updated));
    }
    let gone = store.delete(t.res, t.ns(), name)?;
    Ok(Reply::Json(200, gone))
}
