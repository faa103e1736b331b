//! A claim's sizes and resize progress, read from its spec and status.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimCondition};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::{KubeError, pvc_name};
use crate::decide::{ClaimState, FailureCause, ResizeState};

const REQUEST_FIELD: &str = "spec.resources.requests.storage";
const CAPACITY_FIELD: &str = "status.capacity.storage";

/// Conditions that mean the resize failed and needs an operator.
const FAILED_CONDITIONS: [&str; 2] = ["ControllerResizeError", "NodeResizeError"];
/// Conditions that mean a resize is under way.
const PROGRESS_CONDITIONS: [&str; 2] = ["Resizing", NODE_PENDING];
/// The controller grew the volume; the node is still to grow the filesystem.
const NODE_PENDING: &str = "FileSystemResizePending";

fn parse_storage(
    pvc: &PersistentVolumeClaim,
    q: Option<&Quantity>,
    field: &'static str,
) -> Result<Option<u64>, KubeError> {
    q.map(|q| {
        crate::quantity::parse(&q.0).map_err(|source| KubeError::Quantity {
            object: pvc_name(pvc),
            field,
            value: q.0.clone(),
            source,
        })
    })
    .transpose()
}

/// `spec.resources.requests.storage` in bytes; `None` when absent.
pub fn storage_request(pvc: &PersistentVolumeClaim) -> Result<Option<u64>, KubeError> {
    let q = pvc
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"));
    parse_storage(pvc, q, REQUEST_FIELD)
}

/// `status.capacity.storage` in bytes; `None` until the claim is bound.
pub fn storage_capacity(pvc: &PersistentVolumeClaim) -> Result<Option<u64>, KubeError> {
    let q = pvc
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"));
    parse_storage(pvc, q, CAPACITY_FIELD)
}

pub fn is_block_mode(pvc: &PersistentVolumeClaim) -> bool {
    pvc.spec
        .as_ref()
        .and_then(|s| s.volume_mode.as_deref())
        .is_some_and(|m| m == "Block")
}

pub fn is_bound(pvc: &PersistentVolumeClaim) -> bool {
    pvc.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Bound")
}

/// Is the claim's VolumeAttributesClass changing (KEP-3751, GA in 1.34)? A modification in flight
/// (`status.modifyVolumeStatus`, present while one is pending, in progress or infeasible) or a
/// class asked for that the claim does not have yet (`spec.volumeAttributesClassName` unlike
/// `status.currentVolumeAttributesClassName`). The cloud counts such a change as a modification
/// of the volume, as it does a resize, and refuses a second one while it lasts. Servers before
/// the feature show neither field: never changing.
pub fn attributes_changing(pvc: &PersistentVolumeClaim) -> bool {
    let status = pvc.status.as_ref();
    let wanted = pvc
        .spec
        .as_ref()
        .and_then(|s| s.volume_attributes_class_name.as_deref());
    let current = status.and_then(|s| s.current_volume_attributes_class_name.as_deref());
    status.is_some_and(|s| s.modify_volume_status.is_some()) || wanted != current
}

fn true_conditions(
    pvc: &PersistentVolumeClaim,
) -> impl Iterator<Item = &PersistentVolumeClaimCondition> {
    pvc.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .filter(|c| c.status == "True")
}

/// How long a resize in flight may be held before it is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// `--resize-timeout`.
    pub resize: SignedDuration,
    /// The policy declares that the driver grows the filesystem only at the next mount
    /// (`nodeExpansion: offline`): the node's part (`FileSystemResizePending`,
    /// `NodeResizePending`) is not waited for, since it cannot finish while the pod runs.
    pub node_offline: bool,
}

impl Bounds {
    /// `nodeExpansion: online`: the node's part is given the timeout like the rest.
    pub fn online(resize: SignedDuration) -> Self {
        Self {
            resize,
            node_offline: false,
        }
    }
}

/// Sizes and resize state. A claim without a storage request is an error: the API server never
/// admits one, so it means a broken object, not a size of zero.
pub fn claim_state(
    pvc: &PersistentVolumeClaim,
    now: Timestamp,
    bounds: Bounds,
) -> Result<ClaimState, KubeError> {
    let request_bytes = storage_request(pvc)?.ok_or_else(|| KubeError::Missing {
        object: pvc_name(pvc),
        field: REQUEST_FIELD,
    })?;
    let capacity = storage_capacity(pvc)?;
    let resize = resize_state(pvc, request_bytes, capacity, now, bounds);
    Ok(ClaimState {
        request_bytes,
        capacity_bytes: capacity.unwrap_or(0),
        resize,
    })
}

fn resize_state(
    pvc: &PersistentVolumeClaim,
    request: u64,
    capacity: Option<u64>,
    now: Timestamp,
    bounds: Bounds,
) -> ResizeState {
    let mut failures = Vec::new();
    let mut cause = FailureCause::Stuck;
    let mut in_progress = false;
    let mut since: Option<Timestamp> = None;
    // The node's part (the controller is done) apart from the controller's: past the timeout
    // they say different things (a driver that grows the filesystem only at the next mount, one
    // that expands only a detached volume).
    let mut node_pending = false;
    for c in true_conditions(pvc) {
        if FAILED_CONDITIONS.contains(&c.type_.as_str()) {
            failures.push(match c.message.as_deref().filter(|m| !m.is_empty()) {
                Some(m) => format!("condition {}: {m}", c.type_),
                None => format!("condition {}", c.type_),
            });
        } else if PROGRESS_CONDITIONS.contains(&c.type_.as_str()) {
            in_progress = true;
            node_pending |= c.type_ == NODE_PENDING;
            // The earliest transition is when the resize started.
            if let Some(t) = &c.last_transition_time {
                since = Some(since.map_or(t.0, |s| s.min(t.0)));
            }
        }
    }
    let allocated = pvc
        .status
        .as_ref()
        .and_then(|s| s.allocated_resource_statuses.as_ref())
        .and_then(|m| m.get("storage"));
    if let Some(a) = allocated {
        if a.ends_with("Infeasible") {
            cause = FailureCause::Infeasible;
            failures.push(format!("allocatedResourceStatuses storage={a}"));
        } else if a.ends_with("InProgress") || a.ends_with("Pending") {
            in_progress = true;
            node_pending |= a == "NodeResizePending";
        }
    }
    if !failures.is_empty() {
        return ResizeState::Failed {
            cause,
            detail: failures.join("; "),
        };
    }
    // Unknown capacity (not yet bound) says nothing about a resize.
    if capacity.is_some_and(|c| request > c) {
        in_progress = true;
    }
    if !in_progress {
        return ResizeState::Idle;
    }
    let held = |bound: SignedDuration| since.is_some_and(|t| now.duration_since(t) > bound);
    if node_pending && (bounds.node_offline || held(bounds.resize)) {
        return needs_remount(since, bounds);
    }
    match since {
        Some(t) if !node_pending && held(bounds.resize) => needs_detach(t, bounds.resize),
        _ => ResizeState::InProgress { since },
    }
}

/// The node's part held past its bound, or at once when the policy declares it offline. The
/// agent evaluates only claims a running pod mounts, so it is held while the volume is in use.
fn needs_remount(since: Option<Timestamp>, bounds: Bounds) -> ResizeState {
    let (since, bound) = (
        since.map_or_else(String::new, |t| format!(" since {t}")),
        bounds.resize,
    );
    let detail = if bounds.node_offline {
        format!(
            "the storage grew the volume, and the node grows the filesystem only when the volume is mounted again (nodeExpansion: offline; {NODE_PENDING}{since} while the pod runs)"
        )
    } else {
        format!(
            "the storage grew the volume, but the node has not grown the filesystem in {bound:#} while the pod runs ({NODE_PENDING}{since}): its CSI driver grows it only when the volume is mounted again"
        )
    };
    ResizeState::Failed {
        cause: FailureCause::NeedsRemount,
        detail,
    }
}

/// The controller's part held past the timeout while the volume is in use.
fn needs_detach(since: Timestamp, timeout: SignedDuration) -> ResizeState {
    ResizeState::Failed {
        cause: FailureCause::NeedsDetach,
        detail: format!(
            "resize in flight for more than {timeout:#} (since {since}) while the volume is in use: the controller has not finished; a CSI driver that expands only a detached volume waits for the pod to be gone, any other is stuck (see the resizer's logs)"
        ),
    }
}

#[cfg(test)]
#[path = "claim_tests.rs"]
mod tests;
