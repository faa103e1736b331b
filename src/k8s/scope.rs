//! Which other claims of its namespace an agent must see to size a claim mounted on its node:
//! the members of its group ([`super::roles::group_key`]) and of its logical volume
//! ([`super::logical::logical_volume`]). The agent watches those and its own claims rather than
//! whole namespaces, so a node's memory and watch events follow its own claims, not its tenants'
//! namespaces (issue 33).
//!
//! Where the identity lives in labels, the peers are a label selector the API server applies;
//! where it does not (a `headroom.dev/group` annotation, a StatefulSet whose claims carry no
//! label in common with its pod), only the whole namespace holds them all.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};

use super::roles::{
    CNPG_CLUSTER, CRUNCHY_CLUSTER, GROUP, ZALANDO_APPLICATION, ZALANDO_CLUSTER, annotations,
    claim_template, controlling_statefulset, label, labels,
};
use crate::policy::topolvm::INITIAL_RESIZE_GROUP_BY;

/// Where a claim's peers are found, within its namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PeerScope {
    /// The claims carrying every one of these labels (a superset of the peers: the agent's own
    /// matching still decides who is a member).
    Labels(BTreeMap<String, String>),
    /// Only the whole namespace is sure to hold them.
    Namespace,
}

impl PeerScope {
    fn of(pairs: &[(&str, String)]) -> PeerScope {
        PeerScope::Labels(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_string(), v.clone()))
                .collect(),
        )
    }

    /// The selector as the API's `labelSelector` parameter writes it. Keys and values come from
    /// labels the API server validated, so neither holds `,` or `=`.
    pub fn selector(&self) -> Option<String> {
        match self {
            PeerScope::Labels(l) => Some(
                l.iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            PeerScope::Namespace => None,
        }
    }
}

/// The scopes holding every peer of `pvc` (mounted by `pod`); empty when it has none (it is in
/// no group and no logical volume).
pub fn peer_scopes(pvc: &PersistentVolumeClaim, pod: Option<&Pod>) -> Vec<PeerScope> {
    let m = &pvc.metadata;
    if annotations(m)
        .get(GROUP)
        .is_some_and(|g| !g.trim().is_empty())
    {
        // Annotations cannot be selected on: any claim of the namespace may carry the same one.
        return vec![PeerScope::Namespace];
    }
    let mut scopes = Vec::new();
    // pvc-autoresizer's group: every claim with the named label's value.
    if let Some(key) = annotations(m)
        .get(INITIAL_RESIZE_GROUP_BY)
        .map(|k| k.trim())
        .filter(|k| !k.is_empty() && !k.contains('='))
        && let Some(value) = label(m, key)
    {
        scopes.push(PeerScope::of(&[(key, value)]));
    }
    if let Some(cluster) = label(m, CNPG_CLUSTER) {
        scopes.push(PeerScope::of(&[(CNPG_CLUSTER, cluster)]));
    }
    if let Some(cluster) = label(m, CRUNCHY_CLUSTER) {
        scopes.push(PeerScope::of(&[(CRUNCHY_CLUSTER, cluster)]));
    }
    if label(m, ZALANDO_APPLICATION).as_deref() == Some("spilo")
        && let Some(cluster) = label(m, ZALANDO_CLUSTER)
    {
        scopes.push(PeerScope::of(&[
            (ZALANDO_APPLICATION, "spilo".into()),
            (ZALANDO_CLUSTER, cluster),
        ]));
    }
    if let Some(scope) = statefulset_scope(pvc, pod) {
        scopes.push(scope);
    }
    scopes.sort();
    scopes.dedup();
    scopes
}

/// A StatefulSet's claims carry its selector's `matchLabels` (the StatefulSet controller copies
/// them onto every claim it makes from a template), and its pods carry them too: the labels the
/// claim shares with its pod hold them all, and every sibling from the same template carries
/// them. With none in common (a claim made by hand), only the namespace is sure.
fn statefulset_scope(pvc: &PersistentVolumeClaim, pod: Option<&Pod>) -> Option<PeerScope> {
    let m = &pvc.metadata;
    let sts = pod
        .and_then(|p| controlling_statefulset(&p.metadata))
        .or_else(|| controlling_statefulset(m))?;
    claim_template(m.name.as_deref()?, &sts)?;
    let pod_labels = pod.map(|p| labels(&p.metadata));
    let common: BTreeMap<String, String> = labels(m)
        .iter()
        .filter(|(k, v)| pod_labels.is_some_and(|p| p.get(*k) == Some(*v)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Some(if common.is_empty() {
        PeerScope::Namespace
    } else {
        PeerScope::Labels(common)
    })
}

#[cfg(test)]
#[path = "scope_tests.rs"]
mod tests;
