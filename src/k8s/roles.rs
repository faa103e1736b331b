//! Postgres roles of claims, from the labels each operator sets (or an explicit annotation), and
//! the group a claim sizes with.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use super::{KubeError, pvc_name};
use crate::decide::VolumeRole;

pub const POSTGRES_ROLE: &str = "headroom.dev/postgres-role";
pub const GROUP: &str = "headroom.dev/group";
use crate::policy::topolvm::INITIAL_RESIZE_GROUP_BY;
/// The group kind of pvc-autoresizer's `initial-resize-group-by` in a group key.
const TOPOLVM_GROUP: &str = "topolvm";

const CNPG_ROLE: &str = "cnpg.io/pvcRole";
pub(super) const CNPG_CLUSTER: &str = "cnpg.io/cluster";
const CNPG_INSTANCE: &str = "cnpg.io/instanceName";
const CNPG_TABLESPACE: &str = "cnpg.io/tablespaceName";
pub(super) const CRUNCHY_CLUSTER: &str = "postgres-operator.crunchydata.com/cluster";
pub(super) const ZALANDO_APPLICATION: &str = "application";
pub(super) const ZALANDO_CLUSTER: &str = "cluster-name";
const CRUNCHY_INSTANCE: &str = "postgres-operator.crunchydata.com/instance";
const CRUNCHY_ROLE: &str = "postgres-operator.crunchydata.com/role";
const CRUNCHY_BACKREST_VOLUME: &str = "postgres-operator.crunchydata.com/pgbackrest-volume";
const K8S_NAME: &str = "app.kubernetes.io/name";
const K8S_INSTANCE: &str = "app.kubernetes.io/instance";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Operator {
    CloudNativePG,
    Zalando,
    Crunchy,
    Bitnami,
    /// Only the `headroom.dev/postgres-role` annotation says it is Postgres.
    Annotation,
}

/// A claim that holds part of a Postgres instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PgVolume {
    pub role: VolumeRole,
    pub operator: Operator,
    pub cluster: Option<String>,
    /// The instance (pod) the volume belongs to; pairs an instance's data and WAL volumes.
    pub instance: Option<String>,
}

static EMPTY: BTreeMap<String, String> = BTreeMap::new();

pub(super) fn labels(meta: &ObjectMeta) -> &BTreeMap<String, String> {
    meta.labels.as_ref().unwrap_or(&EMPTY)
}

pub(super) fn annotations(meta: &ObjectMeta) -> &BTreeMap<String, String> {
    meta.annotations.as_ref().unwrap_or(&EMPTY)
}

pub(super) fn label(meta: &ObjectMeta, key: &str) -> Option<String> {
    labels(meta).get(key).filter(|v| !v.is_empty()).cloned()
}

/// The Postgres role of `pvc`, mounted by `pod` when known; `None` when it is not a Postgres
/// volume. An explicit `headroom.dev/postgres-role` wins over operator labels; a value other than
/// data, wal or tablespace is an error naming the claim.
pub fn postgres_volume(
    pvc: &PersistentVolumeClaim,
    pod: Option<&Pod>,
) -> Result<Option<PgVolume>, KubeError> {
    let explicit = match annotations(&pvc.metadata).get(POSTGRES_ROLE) {
        None => None,
        Some(v) => Some(match v.trim() {
            "data" => VolumeRole::Data,
            "wal" => VolumeRole::Wal,
            "tablespace" => VolumeRole::Tablespace,
            other => {
                return Err(KubeError::InvalidAnnotation {
                    object: pvc_name(pvc),
                    annotation: POSTGRES_ROLE,
                    message: format!(
                        "'{other}' is not a Postgres role (write data, wal or tablespace)"
                    ),
                });
            }
        }),
    };
    let detected = by_operator(pvc, pod);
    Ok(match (explicit, detected) {
        (Some(role), Some(v)) => Some(PgVolume { role, ..v }),
        (Some(role), None) => Some(PgVolume {
            role,
            operator: Operator::Annotation,
            cluster: None,
            instance: pod.and_then(|p| p.metadata.name.clone()),
        }),
        (None, v) => v,
    })
}

fn by_operator(pvc: &PersistentVolumeClaim, pod: Option<&Pod>) -> Option<PgVolume> {
    let m = &pvc.metadata;
    let pod_meta = pod.map(|p| &p.metadata);
    let pod_label = |key: &str| pod_meta.and_then(|pm| label(pm, key));
    let pod_name = || pod_meta.and_then(|pm| pm.name.clone());

    if let Some(role) = label(m, CNPG_ROLE) {
        return Some(PgVolume {
            role: match role.as_str() {
                "PG_DATA" => VolumeRole::Data,
                "PG_WAL" => VolumeRole::Wal,
                "PG_TABLESPACE" => VolumeRole::Tablespace,
                // A role a newer CloudNativePG invents is Postgres, but not one we size for.
                _ => VolumeRole::Other,
            },
            operator: Operator::CloudNativePG,
            cluster: label(m, CNPG_CLUSTER),
            instance: label(m, CNPG_INSTANCE).or_else(pod_name),
        });
    }
    if let Some(cluster) = label(m, CNPG_CLUSTER) {
        // CloudNativePG before 1.18 did not label the role; its names did: <instance>-wal,
        // <instance>-tbs-<name>.
        let name = m.name.as_deref().unwrap_or("");
        let role = if name.ends_with("-wal") {
            VolumeRole::Wal
        } else if name.contains("-tbs-") {
            VolumeRole::Tablespace
        } else {
            VolumeRole::Data
        };
        return Some(PgVolume {
            role,
            operator: Operator::CloudNativePG,
            cluster: Some(cluster),
            instance: label(m, CNPG_INSTANCE).or_else(pod_name),
        });
    }

    // Crunchy PGO v5 labels both the instance pods and their claims; the pgBackRest repository
    // host has the cluster label but no instance, and its repo volume is not Postgres data.
    if labels(m).contains_key(CRUNCHY_BACKREST_VOLUME) {
        return None;
    }
    let crunchy_role = label(m, CRUNCHY_ROLE);
    let crunchy_instance = label(m, CRUNCHY_INSTANCE).or_else(|| pod_label(CRUNCHY_INSTANCE));
    if crunchy_instance.is_some() || matches!(crunchy_role.as_deref(), Some("pgdata" | "pgwal")) {
        return Some(PgVolume {
            role: match crunchy_role.as_deref() {
                Some("pgwal") => VolumeRole::Wal,
                Some("tablespace") => VolumeRole::Tablespace,
                _ => VolumeRole::Data,
            },
            operator: Operator::Crunchy,
            cluster: label(m, CRUNCHY_CLUSTER).or_else(|| pod_label(CRUNCHY_CLUSTER)),
            instance: crunchy_instance,
        });
    }

    // Zalando (Spilo) and Bitnami label their claim templates like their pods, so either works.
    let either = |key: &str| pod_label(key).or_else(|| label(m, key));
    if either(ZALANDO_APPLICATION).as_deref() == Some("spilo") {
        return Some(PgVolume {
            role: VolumeRole::Data,
            operator: Operator::Zalando,
            cluster: either(ZALANDO_CLUSTER),
            instance: pod_name(),
        });
    }
    if either(K8S_NAME).as_deref() == Some("postgresql") {
        return Some(PgVolume {
            role: VolumeRole::Data,
            operator: Operator::Bitnami,
            cluster: either(K8S_INSTANCE),
            instance: pod_name(),
        });
    }
    None
}

/// Names of the claims `pod` mounts: persistentVolumeClaim volumes and generic ephemeral volumes
/// (whose claim is named `<pod>-<volume>`).
pub fn pod_claim_names(pod: &Pod) -> Vec<String> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or("");
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| {
            if let Some(c) = &v.persistent_volume_claim {
                Some(c.claim_name.clone())
            } else {
                v.ephemeral
                    .as_ref()
                    .map(|_| format!("{pod_name}-{}", v.name))
            }
        })
        .collect()
}

/// Where `pod`'s containers mount `claim` whole (the first that does; a `subPath` mount is not
/// the volume's root): a `pg_wal` link that points into the volume is read there.
pub fn mount_path(pod: &Pod, claim: &str) -> Option<std::path::PathBuf> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or("");
    let spec = pod.spec.as_ref()?;
    let volume = spec.volumes.iter().flatten().find(|v| {
        v.persistent_volume_claim
            .as_ref()
            .is_some_and(|c| c.claim_name == claim)
            || (v.ephemeral.is_some() && format!("{pod_name}-{}", v.name) == claim)
    })?;
    spec.containers
        .iter()
        .flat_map(|c| c.volume_mounts.iter().flatten())
        .find(|m| m.name == volume.name && m.sub_path.as_deref().unwrap_or("").is_empty())
        .map(|m| std::path::PathBuf::from(&m.mount_path))
        .filter(|p| p.is_absolute())
}

/// Does the instance's data volume also hold WAL? Yes unless one of the pod's claims is a WAL
/// volume. Claims in `pvcs` that the pod does not mount are ignored; a claim whose role cannot be
/// read counts as not WAL, which errs towards gating the data volume on WAL health.
pub fn wal_on_data(pod: &Pod, pvcs: &[&PersistentVolumeClaim]) -> bool {
    let mounted = pod_claim_names(pod);
    !pvcs.iter().any(|pvc| {
        pvc.metadata
            .name
            .as_ref()
            .is_some_and(|n| mounted.contains(n))
            && pvc.metadata.namespace == pod.metadata.namespace
            && matches!(
                postgres_volume(pvc, Some(pod)),
                Ok(Some(PgVolume {
                    role: VolumeRole::Wal,
                    ..
                }))
            )
    })
}

/// The role labels each operator sets on its pods, and the value that means primary:
/// CloudNativePG (`cnpg.io/instanceRole`, and `role` before 1.18), Zalando/Spilo (`spilo-role`),
/// Crunchy PGO v5 (`postgres-operator.crunchydata.com/role`).
const PRIMARY_LABELS: [(&str, &str, Operator); 4] = [
    ("cnpg.io/instanceRole", "primary", Operator::CloudNativePG),
    ("role", "primary", Operator::CloudNativePG),
    ("spilo-role", "master", Operator::Zalando),
    (CRUNCHY_ROLE, "master", Operator::Crunchy),
];

/// The operator whose primary `pod` is, by its role labels; `None` for a replica or a pod of no
/// Postgres operator. The value is compared whole: a label naming anything else is not primary.
pub fn primary_of(pod: &Pod) -> Option<Operator> {
    let labels = labels(&pod.metadata);
    PRIMARY_LABELS
        .iter()
        .find(|(key, value, _)| labels.get(*key).is_some_and(|v| v == value))
        .map(|(_, _, op)| *op)
}

/// The tablespace a CloudNativePG tablespace claim holds (`cnpg.io/tablespaceName`).
pub fn tablespace(pvc: &PersistentVolumeClaim) -> Option<String> {
    label(&pvc.metadata, CNPG_TABLESPACE)
}

/// The group `pvc` sizes with (issue 6), namespaced and prefixed by how it was found:
/// `<ns>/group/<annotation>`, `<ns>/topolvm/<label key>=<value>` (pvc-autoresizer's
/// `initial-resize-group-by`), `<ns>/cnpg/<cluster>/<pvcRole>[/<tablespace>]`, or
/// `<ns>/sts/<statefulset>/<claim template>`.
pub fn group_key(pvc: &PersistentVolumeClaim, pod: Option<&Pod>) -> Option<String> {
    let m = &pvc.metadata;
    let ns = m.namespace.as_deref().unwrap_or("");
    if let Some(g) = annotations(m).get(GROUP).filter(|g| !g.trim().is_empty()) {
        return Some(format!("{ns}/group/{}", g.trim()));
    }
    // pvc-autoresizer sizes a new claim like the largest claim of its namespace carrying the
    // same value of the label the annotation names; without that label it has no group.
    if let Some(key) = annotations(m)
        .get(INITIAL_RESIZE_GROUP_BY)
        .map(|k| k.trim())
        .filter(|k| !k.is_empty() && !k.contains('='))
    {
        return label(m, key).map(|value| format!("{ns}/{TOPOLVM_GROUP}/{key}={value}"));
    }
    if let (Some(cluster), Some(role)) = (label(m, CNPG_CLUSTER), label(m, CNPG_ROLE)) {
        let mut key = format!("{ns}/cnpg/{cluster}/{role}");
        if let Some(tbs) = label(m, CNPG_TABLESPACE) {
            key = format!("{key}/{tbs}");
        }
        return Some(key);
    }
    let sts_of = |meta: &ObjectMeta| {
        meta.owner_references
            .iter()
            .flatten()
            .find(|o| o.kind == "StatefulSet" && o.controller == Some(true))
            .map(|o| o.name.clone())
    };
    // The pod's owner, or the claim's own (persistentVolumeClaimRetentionPolicy whenDeleted: Delete).
    let sts = pod
        .and_then(|p| sts_of(&p.metadata))
        .or_else(|| sts_of(m))?;
    let template = claim_template(m.name.as_deref()?, &sts)?;
    Some(statefulset_key(ns, &sts, template))
}

/// Is `pvc` a member of the group `key` (as returned by [`group_key`] for a member whose pod is
/// known)? Members on other nodes are seen without their pods, so a StatefulSet group also
/// matches by the claim name `<template>-<sts>-<ordinal>`.
pub fn in_group(pvc: &PersistentVolumeClaim, key: &str) -> bool {
    if group_key(pvc, None).as_deref() == Some(key) {
        return true;
    }
    // pvc-autoresizer's group is every claim of the namespace with the label's value, whether
    // or not it carries the annotation itself. Label keys and values hold no `=`.
    if let Some((ns, rest)) = key.split_once(&format!("/{TOPOLVM_GROUP}/"))
        && let Some((label_key, value)) = rest.split_once('=')
    {
        return pvc.metadata.namespace.as_deref() == Some(ns)
            && label(&pvc.metadata, label_key).as_deref() == Some(value);
    }
    let mut parts = key.splitn(4, '/');
    let (Some(ns), Some("sts"), Some(sts), Some(template)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    pvc.metadata.namespace.as_deref() == Some(ns)
        && pvc
            .metadata
            .name
            .as_deref()
            .and_then(|n| claim_template(n, sts))
            == Some(template)
}

/// The group's effective size: the largest request among its members.
pub fn group_size<'a>(
    members: impl IntoIterator<Item = &'a PersistentVolumeClaim>,
    key: &str,
) -> Option<u64> {
    members
        .into_iter()
        .filter(|p| in_group(p, key))
        .filter_map(|p| super::claim::storage_request(p).ok().flatten())
        .max()
}

/// The StatefulSet that controls the object, by its owner reference.
pub(super) fn controlling_statefulset(meta: &ObjectMeta) -> Option<String> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "StatefulSet" && o.controller == Some(true))
        .map(|o| o.name.clone())
}

/// The group key of StatefulSet `sts`'s claim template `template` in namespace `ns`, as
/// [`group_key`] gives it and [`in_group`] reads it.
pub fn statefulset_key(ns: &str, sts: &str, template: &str) -> String {
    format!("{ns}/sts/{sts}/{template}")
}

/// `<prefix>-<ordinal>` -> prefix: a StatefulSet member's claim name without its ordinal.
pub fn ordinal_prefix(name: &str) -> Option<&str> {
    let (prefix, ordinal) = name.rsplit_once('-')?;
    (!prefix.is_empty() && !ordinal.is_empty() && ordinal.bytes().all(|b| b.is_ascii_digit()))
        .then_some(prefix)
}

/// `<template>-<sts>-<ordinal>` -> template.
pub(super) fn claim_template<'a>(pvc_name: &'a str, sts: &str) -> Option<&'a str> {
    let template = ordinal_prefix(pvc_name)?
        .strip_suffix(sts)?
        .strip_suffix('-')?;
    (!template.is_empty()).then_some(template)
}

#[cfg(test)]
#[path = "roles_tests.rs"]
mod tests;
