//! A restored or cloned claim left Pending below its group's size (issue 40, item 3). Once a
//! group has grown, a snapshot of a member restores only into a claim of at least the member's
//! size, and a clone needs its source's capacity; a new member created at the size its operator
//! declared (CloudNativePG's `spec.storage.size`) is refused by the provisioner and stays
//! Pending. The claim webhook creates such claims at size; where it is off or could not read the
//! source, the agents holding another member of the group (their peer watch holds the new one)
//! say what fixes it, in one Event on the claim. Pure: time is an argument.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use crate::k8s::claim::storage_request;
use crate::k8s::source::{Source, source_of};
use crate::quantity::format as q;

/// The Event's reason.
pub const REASON: &str = "RestoreTooSmall";

/// Where docs/operations.md says which claims get the Event and what to do.
const RUNBOOK: &str = "docs/operations.md#a-restored-or-cloned-claim-stays-pending";

/// At most this many characters of a source's name are quoted (an object name may have 253).
const NAME_ECHO: usize = 63;

/// A Pending claim that asks for less than its group's size and names a source it is restored
/// or cloned from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undersized {
    /// The claim's uid: the Event's name derives from it, so the agents that see the claim post
    /// one Event between them.
    pub uid: String,
    pub request: u64,
    /// Its group's size: the largest request among the members.
    pub needs: u64,
    pub source: Source,
}

/// A uid as the API server writes one (a UUID): anything else is not put in a name.
fn is_uid(uid: &str) -> bool {
    !uid.is_empty()
        && uid.len() <= 64
        && uid
            .chars()
            .all(|c| matches!(c, '0'..='9' | 'a'..='f' | '-'))
}

/// Whether `pvc` is Pending (exactly: a phase is the API server's word, never parsed loosely).
pub fn is_pending(pvc: &PersistentVolumeClaim) -> bool {
    pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending")
}

/// `pvc`, a member of a group of size `group_size`, when it is worth the Event at `now`: its
/// policy asks for growth (`opted_in`), it is Pending (and not being deleted) for at least
/// `after` since its creation, it is restored from a VolumeSnapshot or cloned from a claim of its
/// own namespace, and it asks for less than the group's size. A source in another namespace or
/// with a name no object has, an unreadable request, a missing date or uid: `None`.
pub fn undersized(
    pvc: &PersistentVolumeClaim,
    group_size: Option<u64>,
    opted_in: bool,
    now: Timestamp,
    after: SignedDuration,
) -> Option<Undersized> {
    let m = &pvc.metadata;
    if !opted_in || !is_pending(pvc) || m.deletion_timestamp.is_some() {
        return None;
    }
    let created = m.creation_timestamp.as_ref()?.0;
    if now.duration_since(created) < after {
        return None;
    }
    let source = match source_of(pvc)? {
        s @ (Source::Snapshot(_) | Source::Claim(_)) => s,
        Source::OtherNamespace { .. } | Source::BadName { .. } => return None,
    };
    let request = storage_request(pvc).ok().flatten()?;
    let needs = group_size.filter(|&g| g > request)?;
    let uid = m.uid.as_deref().filter(|u| is_uid(u))?.to_string();
    Some(Undersized {
        uid,
        request,
        needs,
        source,
    })
}

impl Undersized {
    /// The Event's name: the same on every node, so a second agent's create is refused (409).
    pub fn event_name(&self) -> String {
        format!("headroom-restore-too-small.{}", self.uid)
    }

    /// What the Event says: the source, the sizes, and the fixes. Only bounded text: a validated
    /// object name (clipped), sizes, and fixed words; never the group's key (an annotation's
    /// value may be long).
    pub fn note(&self, after: SignedDuration) -> String {
        let source = match &self.source {
            Source::Snapshot(n) => format!("restored from VolumeSnapshot {}", clip(n)),
            Source::Claim(n) => format!("cloned from PVC {}", clip(n)),
            // `undersized` returns neither.
            Source::OtherNamespace { .. } | Source::BadName { .. } => {
                "created from a source".into()
            }
        };
        let needs = q(self.needs);
        format!(
            "Pending for over {}s, {source} with a request of {}, below its group's size {needs} \
             (headroom grew the group): a provisioner refuses a claim smaller than its source \
             (see its ProvisioningFailed Events). To fix: enable headroom's claim webhook \
             (overlays/webhook, or Helm webhook.enabled=true), which creates such a claim at its \
             source's size, or create the claim again with a request of at least {needs} \
             (CloudNativePG: raise the Cluster's spec.storage.size to {needs}); {RUNBOOK}",
            after.as_secs(),
            q(self.request),
        )
    }
}

fn clip(name: &str) -> String {
    name.chars().take(NAME_ECHO).collect()
}

#[cfg(test)]
#[path = "pending_tests.rs"]
mod tests;
