//! What a review needs from the API server: the namespace's claims (the group's members) and,
//! for a claim named like a StatefulSet member, the namespace's StatefulSets. Read on demand
//! (a claim CREATE is rare) from the API server's watch cache; the agent's own claim watches
//! cover only namespaces with a volume on its node.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Api;
use kube::api::ListParams;

use super::WebhookError;
use crate::k8s::roles;

/// The new claim's group and the namespace's claims.
pub struct Found {
    pub group: Option<String>,
    pub members: Vec<PersistentVolumeClaim>,
}

/// Some other claim shares the new one's `<prefix>-` before an ordinal: only then can it have
/// StatefulSet peers worth a LIST.
pub fn has_ordinal_peers(name: &str, members: &[PersistentVolumeClaim]) -> bool {
    let Some(prefix) = roles::ordinal_prefix(name) else {
        return false;
    };
    members.iter().any(|m| {
        m.metadata
            .name
            .as_deref()
            .is_some_and(|n| n != name && roles::ordinal_prefix(n) == Some(prefix))
    })
}

/// The StatefulSet group `pvc` belongs to: a set of the namespace with a claim template `t` such
/// that the claim is `<t>-<set>-<ordinal>`. The StatefulSet controller names claims that way and
/// on Kubernetes before persistentVolumeClaimRetentionPolicy sets no owner on them; the name
/// alone cannot tell `data-pg` + `main` from `data` + `pg-main`, nor a hand-made `cache-1` from
/// a member, so the sets themselves decide.
pub fn statefulset_group(pvc: &PersistentVolumeClaim, sets: &[StatefulSet]) -> Option<String> {
    let ns = pvc.metadata.namespace.as_deref()?;
    sets.iter().find_map(|set| {
        let set_name = set.metadata.name.as_deref()?;
        set.spec
            .volume_claim_templates
            .iter()
            .flatten()
            .filter_map(|t| t.metadata.name.as_deref())
            .map(|template| roles::statefulset_key(ns, set_name, template))
            .find(|key| roles::in_group(pvc, key))
    })
}

/// Reads what [`super::size::verdict`] needs for `pvc`. No deadline here: the caller bounds the
/// whole review.
pub async fn find(
    client: &kube::Client,
    pvc: &PersistentVolumeClaim,
) -> Result<Found, WebhookError> {
    let ns = pvc.metadata.namespace.as_deref().unwrap_or("");
    let list = |what: &'static str| {
        move |source| WebhookError::Read {
            what,
            namespace: ns.to_string(),
            source,
        }
    };
    let mut group = roles::group_key(pvc, None);
    let name = pvc.metadata.name.as_deref().unwrap_or("");
    // No group by labels or owner, and no ordinal in its name: nothing to read.
    if group.is_none() && roles::ordinal_prefix(name).is_none() {
        return Ok(Found {
            group,
            members: Vec::new(),
        });
    }
    let params = ListParams::default().match_any();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let members = claims
        .list(&params)
        .await
        .map_err(list("persistentvolumeclaims"))?
        .items;
    if group.is_none() && has_ordinal_peers(name, &members) {
        let sets: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
        let sets = sets
            .list(&params)
            .await
            .map_err(list("statefulsets"))?
            .items;
        group = statefulset_group(pvc, &sets);
    }
    Ok(Found { group, members })
}
