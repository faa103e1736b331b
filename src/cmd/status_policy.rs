//! `headroom status --policy`: each claim's effective policy and where every key came from (the
//! claim, its Namespace, its StorageClass, their pvc-autoresizer annotations, the ConfigMap, the
//! built-in default), merged exactly as the agent merges it, from what the caller's kubeconfig can read.
//! A pvc-autoresizer user checks a migration with it before uninstalling pvc-autoresizer.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use serde::Serialize;

use super::StatusError;
use crate::k8s::claim;
use crate::policy::Mode;
use crate::policy::fields::{FIELDS, default_text_in};
use crate::policy::merge::{CentralPolicy, Source, parse_configmap};
use crate::policy::validate::{Context, validate};

/// One key of one claim's effective policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyRow {
    pub key: String,
    /// As written where it came from; the built-in default's text for `default`.
    pub value: Option<String>,
    pub source: Source,
    /// The object and field it was written in, when it was written somewhere.
    pub origin: Option<String>,
}

/// One claim's effective policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRow {
    pub namespace: String,
    pub name: String,
    pub storage_class: Option<String>,
    /// Whether headroom manages the claim (`enabled`, or pvc-autoresizer's annotations enable it).
    pub managed: bool,
    /// Where pvc-autoresizer's `resize.topolvm.io/enabled` enables the claim, if it would resize it.
    pub pvc_autoresizer_enabled_by: Option<String>,
    pub keys: Vec<KeyRow>,
    /// Why the agent would refuse this policy (only for managed claims, as the agent reports).
    pub errors: Vec<String>,
}

/// The rows for `claims`, with their StorageClasses and Namespaces by name and the central
/// ConfigMap.
pub fn rows(
    claims: &[PersistentVolumeClaim],
    classes: &BTreeMap<String, StorageClass>,
    namespaces: &BTreeMap<String, Namespace>,
    central: &CentralPolicy,
) -> Vec<PolicyRow> {
    claims
        .iter()
        .map(|pvc| {
            let ns = pvc.metadata.namespace.clone().unwrap_or_default();
            let name = pvc.metadata.name.clone().unwrap_or_default();
            let class_name = pvc.spec.as_ref().and_then(|s| s.storage_class_name.clone());
            let class = class_name.as_ref().and_then(|n| classes.get(n));
            let merged = crate::resolve::claim_policy(
                pvc,
                class_name.as_deref(),
                class,
                namespaces.get(&ns),
                central,
            );
            let current = claim::storage_request(pvc)
                .ok()
                .flatten()
                .max(claim::storage_capacity(pvc).ok().flatten());
            let ctx = Context {
                current_size: current.filter(|b| *b > 0),
                wal_has_own_volume: None,
                driver_rule: None,
                min_available_source: merged.min_available_source(),
            };
            let managed = merged.wants_enabled();
            let errors = if managed {
                validate(&merged.spec, &ctx)
                    .errors
                    .iter()
                    .map(|f| format!("{}: {}", f.field, f.message))
                    .collect()
            } else {
                Vec::new()
            };
            // The window has a default only in convergent mode.
            let mode = match merged.spec.get("mode").map(|r| r.text.trim()) {
                Some("convergent") => Mode::Convergent,
                _ => Mode::Threshold,
            };
            let keys = FIELDS
                .iter()
                .map(|f| {
                    let raw = merged.spec.get(f.path);
                    KeyRow {
                        key: f.path.to_string(),
                        value: raw
                            .map(|r| r.text.clone())
                            .or_else(|| default_text_in(f.path, mode)),
                        source: merged
                            .provenance
                            .get(f.path)
                            .copied()
                            .unwrap_or(Source::Default),
                        origin: raw.and_then(|r| r.origin.clone()),
                    }
                })
                .collect();
            PolicyRow {
                namespace: ns,
                name,
                storage_class: class_name,
                managed,
                pvc_autoresizer_enabled_by: merged.topolvm_enabled_by,
                keys,
                errors,
            }
        })
        .collect()
}

/// Fetches the claims' StorageClasses and the ConfigMap, then merges. A ConfigMap that cannot be
/// read is said on stderr and left out, so the rest of the view still shows.
pub async fn fetch(
    client: kube::Client,
    claims: &[PersistentVolumeClaim],
    configmap: (&str, &str),
) -> Result<Vec<PolicyRow>, StatusError> {
    let sc_api: Api<StorageClass> = Api::all(client.clone());
    let mut classes = BTreeMap::new();
    for pvc in claims {
        let Some(name) = pvc.spec.as_ref().and_then(|s| s.storage_class_name.clone()) else {
            continue;
        };
        if classes.contains_key(&name) {
            continue;
        }
        let class = sc_api
            .get_opt(&name)
            .await
            .map_err(|source| StatusError::Api {
                action: format!("reading StorageClass {name}"),
                source,
            })?;
        if let Some(class) = class {
            classes.insert(name, class);
        }
    }
    let namespaces = namespaces(&client, claims).await;
    let (cm_ns, cm_name) = configmap;
    let cm_api: Api<ConfigMap> = Api::namespaced(client, cm_ns);
    let shown = format!("{cm_ns}/{cm_name}");
    let central = match cm_api.get_opt(cm_name).await {
        Ok(Some(cm)) => parse_configmap(&cm.data.unwrap_or_default(), &shown),
        Ok(None) => {
            eprintln!("headroom status: ConfigMap {shown} not found: its layers are left out");
            CentralPolicy::default()
        }
        Err(e) => {
            eprintln!(
                "headroom status: cannot read ConfigMap {shown} ({e}): its layers are left out"
            );
            CentralPolicy::default()
        }
    };
    Ok(rows(claims, &classes, &namespaces, &central))
}

/// The claims' Namespaces, for their policy annotations. One that cannot be read (a kubeconfig
/// that may list claims but not get Namespaces) is said on stderr and its layer left out.
async fn namespaces(
    client: &kube::Client,
    claims: &[PersistentVolumeClaim],
) -> BTreeMap<String, Namespace> {
    let api: Api<Namespace> = Api::all(client.clone());
    let names: std::collections::BTreeSet<&str> = claims
        .iter()
        .filter_map(|c| c.metadata.namespace.as_deref())
        .collect();
    let mut out = BTreeMap::new();
    for name in names {
        match api.get_opt(name).await {
            Ok(Some(ns)) => {
                out.insert(name.to_string(), ns);
            }
            Ok(None) => {}
            Err(e) => eprintln!(
                "headroom status: cannot read Namespace {name} ({e}): its layer is left out"
            ),
        }
    }
    out
}

/// One block per claim: a heading, then KEY VALUE SOURCE ORIGIN, padded.
pub fn render(rows: &[PolicyRow]) -> String {
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let class = row.storage_class.as_deref().unwrap_or("-");
        let managed = match (&row.pvc_autoresizer_enabled_by, row.managed) {
            (Some(by), _) => format!("managed: enabled for pvc-autoresizer by {by}"),
            (None, true) => "managed".to_string(),
            (None, false) => "not managed: enabled is false".to_string(),
        };
        out.push_str(&format!(
            "PVC {}/{} (StorageClass {class}) {managed}\n",
            row.namespace, row.name
        ));
        let cells: Vec<[String; 4]> =
            std::iter::once(["KEY", "VALUE", "SOURCE", "ORIGIN"].map(String::from))
                .chain(row.keys.iter().map(|k| {
                    [
                        k.key.clone(),
                        k.value.clone().unwrap_or_else(|| "-".into()),
                        source_name(k.source).to_string(),
                        k.origin.clone().unwrap_or_else(|| "-".into()),
                    ]
                }))
                .collect();
        let mut widths = [0usize; 3];
        for c in &cells {
            for (w, cell) in widths.iter_mut().zip(c) {
                *w = (*w).max(cell.chars().count());
            }
        }
        for c in &cells {
            let line = format!(
                "  {:<w0$}   {:<w1$}   {:<w2$}   {}",
                c[0],
                c[1],
                c[2],
                c[3],
                w0 = widths[0],
                w1 = widths[1],
                w2 = widths[2]
            );
            out.push_str(line.trim_end());
            out.push('\n');
        }
        for e in &row.errors {
            out.push_str(&format!("  error: {e}\n"));
        }
    }
    out
}

/// The same names `/volumes` serves.
fn source_name(s: Source) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{s:?}"))
}

#[cfg(test)]
#[path = "status_policy_tests.rs"]
mod tests;
