//! The size a new claim is born at: the largest of its group's effective size (the largest
//! request among the members) and what its data source requires (a VolumeSnapshot's
//! `restoreSize`, a cloned claim's capacity), under its own policy's `limit`, and only for a
//! claim that opted in. Pure: the members, the source's size, the class, the Namespace and the
//! central policy are read by the caller.

use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

use crate::k8s::{claim, roles};
use crate::policy::merge::{CentralPolicy, Merged};
use crate::policy::validate::{Context, validate};
use crate::quantity::format as q;

/// What the webhook does with one new claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Raised from `from` to `to`, the size `because` names; `caveat`, when set, is what the
    /// user should still know (a source that could not be sized, or needing more than `limit`).
    Raise {
        from: u64,
        to: u64,
        because: Because,
        caveat: Option<Caveat>,
    },
    Keep(Keep),
}

/// Whose size a claim was raised to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Because {
    /// Its group's, by key.
    Group(String),
    /// Its data source's, named as in [`SourceSize::Known`].
    Source(String),
}

impl std::fmt::Display for Because {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Because::Group(g) => write!(f, "the size of its group {g}"),
            Because::Source(s) => write!(f, "the size its source {s} requires"),
        }
    }
}

/// What the size of a new claim's data source came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceSize {
    /// No data source the webhook sizes from (none, or a volume populator's kind).
    None,
    /// The provisioner will need at least `bytes`; `what` names the source
    /// (`VolumeSnapshot db/snap-1`, `PVC db/pg-1`).
    Known { bytes: u64, what: String },
    /// A source the webhook could not size; the message names the object and field.
    Unknown(String),
}

/// Why the size decided may still not be what the provisioner accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caveat {
    /// The source could not be sized (see [`SourceSize::Unknown`]).
    SourceUnknown(String),
    /// The source needs more than the claim's `limit`; the message gives both.
    AboveLimit(String),
}

impl Caveat {
    pub fn message(&self) -> &str {
        match self {
            Caveat::SourceUnknown(m) | Caveat::AboveLimit(m) => m,
        }
    }
}

/// Why a new claim keeps the size it asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keep {
    /// It belongs to no group and names no data source.
    NoGroup,
    /// Its policy does not say `enabled: true` (nor does pvc-autoresizer enable it).
    NotOptedIn,
    /// Its policy is not valid; the message names the object and field.
    InvalidPolicy(String),
    /// No request to raise, or one that is not a quantity (the API server judges it).
    NoRequest(String),
    /// No other member and no source needs more (or none that `limit` leaves room for).
    AtSize,
    /// At size as far as the webhook knows, with what it could not know or do.
    Caveat(Caveat),
}

impl Keep {
    /// A reason to tell the client: only cases the user can act on.
    pub fn warning(&self) -> Option<&str> {
        match self {
            Keep::InvalidPolicy(m) | Keep::NoRequest(m) => Some(m),
            Keep::Caveat(c) => Some(c.message()),
            _ => None,
        }
    }
}

pub fn pvc_label(pvc: &PersistentVolumeClaim) -> String {
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

/// The policy layers above a new claim, as the agents' watch stores hold them.
#[derive(Clone, Copy)]
pub struct Layers<'a> {
    pub class: Option<&'a StorageClass>,
    pub namespace: Option<&'a Namespace>,
    pub central: &'a CentralPolicy,
}

fn merged(pvc: &PersistentVolumeClaim, layers: Layers<'_>) -> Merged {
    let class_name = pvc
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref());
    crate::resolve::claim_policy(
        pvc,
        class_name,
        layers.class,
        layers.namespace,
        layers.central,
    )
}

/// Whether `pvc`'s policy asks for growth at all (before validation): only then is its data
/// source read, so a claim that did not opt in costs no read.
pub fn opted_in(pvc: &PersistentVolumeClaim, layers: Layers<'_>) -> bool {
    merged(pvc, layers).wants_enabled()
}

/// The claim's request, or why it keeps its size.
fn request(pvc: &PersistentVolumeClaim) -> Result<u64, Keep> {
    match claim::storage_request(pvc) {
        Ok(Some(b)) => Ok(b),
        Ok(None) => Err(Keep::NoRequest(format!(
            "PVC {}: no spec.resources.requests.storage to raise",
            pvc_label(pvc)
        ))),
        Err(e) => Err(Keep::NoRequest(e.to_string())),
    }
}

/// The `limit` of a claim that opted in with a valid policy, or why it keeps its size.
fn limit(pvc: &PersistentVolumeClaim, requested: u64, layers: Layers<'_>) -> Result<u64, Keep> {
    let merged = merged(pvc, layers);
    if !merged.wants_enabled() {
        return Err(Keep::NotOptedIn);
    }
    let ctx = Context {
        current_size: Some(requested),
        ..Context::default()
    };
    let validation = validate(&merged.spec, &ctx);
    match (validation.policy, validation.errors.first()) {
        (Some(p), None) if p.enabled => Ok(p.limit),
        (_, Some(f)) => Err(Keep::InvalidPolicy(format!(
            "PVC {}: policy {}: {}",
            pvc_label(pvc),
            f.field,
            f.message
        ))),
        _ => Err(Keep::NotOptedIn),
    }
}

/// The new claim `pvc` of group `group` (when it has one) among `members` (the namespace's
/// claims; the new one is not among them yet), with what its data source requires, its
/// StorageClass, Namespace and the central policy.
pub fn verdict(
    pvc: &PersistentVolumeClaim,
    group: Option<&str>,
    members: &[PersistentVolumeClaim],
    source: &SourceSize,
    layers: Layers<'_>,
) -> Verdict {
    let requested = match request(pvc) {
        Ok(r) => r,
        Err(keep) => return Verdict::Keep(keep),
    };
    if group.is_none() && *source == SourceSize::None {
        return Verdict::Keep(Keep::NoGroup);
    }
    let limit = match limit(pvc, requested, layers) {
        Ok(l) => l,
        Err(keep) => return Verdict::Keep(keep),
    };
    let name = pvc.metadata.name.as_deref();
    let others = members
        .iter()
        .filter(|m| name.is_none() || m.metadata.name.as_deref() != name);
    let by_group =
        group.and_then(|g| Some((roles::group_size(others, g)?, Because::Group(g.into()))));
    let (by_source, caveat) = from_source(pvc, source, limit);
    let wanted = match (by_group, by_source) {
        (Some(g), Some(s)) => Some(if s.0 > g.0 { s } else { g }),
        (g, s) => g.or(s),
    };
    match wanted.map(|(bytes, because)| (bytes.min(limit), because)) {
        Some((to, because)) if to > requested => Verdict::Raise {
            from: requested,
            to,
            because,
            caveat,
        },
        _ => Verdict::Keep(caveat.map_or(Keep::AtSize, Keep::Caveat)),
    }
}

/// The size `source` asks of `pvc`, and what to tell the user about it.
fn from_source(
    pvc: &PersistentVolumeClaim,
    source: &SourceSize,
    limit: u64,
) -> (Option<(u64, Because)>, Option<Caveat>) {
    match source {
        SourceSize::None => (None, None),
        SourceSize::Unknown(m) => (None, Some(Caveat::SourceUnknown(m.clone()))),
        SourceSize::Known { bytes, what } => {
            let caveat = (*bytes > limit).then(|| {
                Caveat::AboveLimit(format!(
                    "PVC {}: its source {what} needs {}, above its limit {}: the provisioner \
                     refuses a smaller claim; raise the limit to at least {} and create the \
                     claim again",
                    pvc_label(pvc),
                    q(*bytes),
                    q(limit),
                    q(*bytes)
                ))
            });
            (Some((*bytes, Because::Source(what.clone()))), caveat)
        }
    }
}
