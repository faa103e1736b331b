//! The size a new claim is born at: its group's effective size (the largest request among the
//! members), under its own policy's `limit`, and only for a claim that opted in. Pure: the
//! members, the class and the central policy are read by the caller.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;

use crate::k8s::{claim, roles};
use crate::policy::merge::CentralPolicy;
use crate::policy::validate::{Context, validate};

/// What the webhook does with one new claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Raise { from: u64, to: u64, group: String },
    Keep(Keep),
}

/// Why a new claim keeps the size it asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keep {
    /// It belongs to no group.
    NoGroup,
    /// Its policy does not say `enabled: true` (nor does pvc-autoresizer enable it).
    NotOptedIn,
    /// Its policy is not valid; the message names the object and field.
    InvalidPolicy(String),
    /// No request to raise, or one that is not a quantity (the API server judges it).
    NoRequest(String),
    /// No other member has a larger request (or none that `limit` leaves room for).
    AtSize,
}

impl Keep {
    /// A reason to tell the client: only cases the user can act on.
    pub fn warning(&self) -> Option<&str> {
        match self {
            Keep::InvalidPolicy(m) | Keep::NoRequest(m) => Some(m),
            _ => None,
        }
    }
}

fn pvc_label(pvc: &PersistentVolumeClaim) -> String {
    format!(
        "{}/{}",
        pvc.metadata.namespace.as_deref().unwrap_or(""),
        pvc.metadata
            .name
            .as_deref()
            .or(pvc.metadata.generate_name.as_deref())
            .unwrap_or("")
    )
}

/// The new claim `pvc` of group `group` (when it has one) among `members` (the namespace's
/// claims; the new one is not among them yet), with its StorageClass and the central policy.
pub fn verdict(
    pvc: &PersistentVolumeClaim,
    group: Option<&str>,
    members: &[PersistentVolumeClaim],
    class: Option<&StorageClass>,
    central: &CentralPolicy,
) -> Verdict {
    let requested = match claim::storage_request(pvc) {
        Ok(Some(b)) => b,
        Ok(None) => {
            return Verdict::Keep(Keep::NoRequest(format!(
                "PVC {}: no spec.resources.requests.storage to raise",
                pvc_label(pvc)
            )));
        }
        Err(e) => return Verdict::Keep(Keep::NoRequest(e.to_string())),
    };
    let Some(group) = group else {
        return Verdict::Keep(Keep::NoGroup);
    };
    let class_name = pvc
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref());
    let merged = crate::resolve::claim_policy(pvc, class_name, class, central);
    if !merged.wants_enabled() {
        return Verdict::Keep(Keep::NotOptedIn);
    }
    let ctx = Context {
        current_size: Some(requested),
        ..Context::default()
    };
    let validation = validate(&merged.spec, &ctx);
    let policy = match (validation.policy, validation.errors.first()) {
        (Some(p), None) => p,
        (_, Some(f)) => {
            return Verdict::Keep(Keep::InvalidPolicy(format!(
                "PVC {}: policy {}: {}",
                pvc_label(pvc),
                f.field,
                f.message
            )));
        }
        (None, None) => return Verdict::Keep(Keep::NotOptedIn),
    };
    if !policy.enabled {
        return Verdict::Keep(Keep::NotOptedIn);
    }
    let name = pvc.metadata.name.as_deref();
    let others = members
        .iter()
        .filter(|m| name.is_none() || m.metadata.name.as_deref() != name);
    let target = roles::group_size(others, group).map(|size| size.min(policy.limit));
    match target {
        Some(to) if to > requested => Verdict::Raise {
            from: requested,
            to,
            group: group.to_string(),
        },
        _ => Verdict::Keep(Keep::AtSize),
    }
}
