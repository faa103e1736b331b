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
mod tests {
    use super::*;
    use crate::quantity::GI;
    use serde_json::{Value, json};

    fn pvc(spec_extra: Value, status: Value) -> PersistentVolumeClaim {
        let mut spec = json!({
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "fast-ssd",
            "volumeName": "pvc-8f1c2a3b-5d6e-4f70-8a9b-0c1d2e3f4a5b",
            "volumeMode": "Filesystem",
            "resources": { "requests": { "storage": "20Gi" } },
        });
        if let (Some(s), Some(extra)) = (spec.as_object_mut(), spec_extra.as_object()) {
            s.extend(extra.clone());
        }
        serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": "pgdata-pg-main-1",
                "namespace": "db",
                "resourceVersion": "48213",
                "uid": "0b5d1a8e-2f7c-4a19-9a53-3e4f5a6b7c8d",
            },
            "spec": spec,
            "status": status,
        }))
        .expect("test PVC")
    }

    fn bound(capacity: &str) -> Value {
        json!({ "phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": { "storage": capacity } })
    }

    fn now() -> Timestamp {
        "2026-03-01T12:00:00Z".parse().expect("timestamp")
    }

    #[test]
    fn a_volume_attributes_class_change_is_seen_until_it_lands() {
        let with = |spec: Value, status: Value| {
            let mut s = bound("20Gi");
            if let (Some(o), Some(extra)) = (s.as_object_mut(), status.as_object()) {
                o.extend(extra.clone());
            }
            attributes_changing(&pvc(spec, s))
        };
        // A 1.20 claim: neither field.
        assert!(!with(json!({}), json!({})));
        // Asked for, not yet current; then in progress; then landed.
        assert!(with(
            json!({ "volumeAttributesClassName": "fast" }),
            json!({})
        ));
        assert!(with(
            json!({ "volumeAttributesClassName": "fast" }),
            json!({ "currentVolumeAttributesClassName": "slow",
                    "modifyVolumeStatus": { "status": "InProgress", "targetVolumeAttributesClassName": "fast" } })
        ));
        assert!(with(
            json!({ "volumeAttributesClassName": "fast" }),
            json!({ "currentVolumeAttributesClassName": "fast",
                    "modifyVolumeStatus": { "status": "Pending" } })
        ));
        assert!(!with(
            json!({ "volumeAttributesClassName": "fast" }),
            json!({ "currentVolumeAttributesClassName": "fast" })
        ));
    }

    const TIMEOUT: SignedDuration = SignedDuration::from_mins(30);

    fn state(p: &PersistentVolumeClaim) -> ClaimState {
        claim_state(p, now(), Bounds::online(TIMEOUT)).expect("claim state")
    }

    #[test]
    fn idle_bound_claim() {
        let p = pvc(json!({}), bound("20Gi"));
        assert_eq!(storage_request(&p).expect("ok"), Some(20 * GI));
        assert_eq!(storage_capacity(&p).expect("ok"), Some(20 * GI));
        assert_eq!(
            state(&p),
            ClaimState {
                request_bytes: 20 * GI,
                capacity_bytes: 20 * GI,
                resize: ResizeState::Idle
            }
        );
        assert!(is_bound(&p));
        assert!(!is_block_mode(&p));
    }

    #[test]
    fn pending_claim_has_no_capacity_and_is_not_resizing() {
        let p = pvc(json!({ "volumeName": null }), json!({ "phase": "Pending" }));
        let s = state(&p);
        assert_eq!(s.capacity_bytes, 0);
        assert_eq!(s.resize, ResizeState::Idle);
        assert!(!is_bound(&p));
    }

    #[test]
    fn block_mode() {
        let p = pvc(json!({ "volumeMode": "Block" }), bound("20Gi"));
        assert!(is_block_mode(&p));
    }

    #[test]
    fn request_above_capacity_is_in_progress_without_since() {
        let p = pvc(
            json!({ "resources": { "requests": { "storage": "25Gi" } } }),
            bound("20Gi"),
        );
        let s = state(&p);
        assert_eq!(s.request_bytes, 25 * GI);
        assert_eq!(s.resize, ResizeState::InProgress { since: None });
    }

    #[test]
    fn resizing_condition_gives_since() {
        let mut status = bound("20Gi");
        status["conditions"] = json!([{
            "type": "FileSystemResizePending",
            "status": "True",
            "lastProbeTime": null,
            "lastTransitionTime": "2026-03-01T11:50:00Z",
            "message": "Waiting for user to (re-)start a pod to finish file system resize of volume on node.",
        }]);
        let p = pvc(
            json!({ "resources": { "requests": { "storage": "25Gi" } } }),
            status,
        );
        assert_eq!(
            state(&p).resize,
            ResizeState::InProgress {
                since: Some("2026-03-01T11:50:00Z".parse().expect("ts"))
            }
        );
    }

    #[test]
    fn false_condition_is_ignored() {
        let mut status = bound("20Gi");
        status["conditions"] = json!([{ "type": "Resizing", "status": "False" }]);
        assert_eq!(state(&pvc(json!({}), status)).resize, ResizeState::Idle);
    }

    #[test]
    fn allocated_statuses() {
        for (value, want_progress) in [
            ("ControllerResizeInProgress", true),
            ("NodeResizePending", true),
            ("NodeResizeInProgress", true),
        ] {
            let mut status = bound("20Gi");
            status["allocatedResourceStatuses"] = json!({ "storage": value });
            let s = state(&pvc(json!({}), status));
            assert_eq!(
                matches!(s.resize, ResizeState::InProgress { since: None }),
                want_progress,
                "{value}"
            );
        }
        for value in ["ControllerResizeInfeasible", "NodeResizeInfeasible"] {
            let mut status = bound("20Gi");
            status["allocatedResourceStatuses"] = json!({ "storage": value });
            match state(&pvc(json!({}), status)).resize {
                ResizeState::Failed { cause, detail } => {
                    assert_eq!(cause, FailureCause::Infeasible, "{value}");
                    assert!(detail.contains(value), "{detail}")
                }
                other => panic!("{value}: {other:?}"),
            }
        }
    }

    #[test]
    fn error_conditions_fail_and_win_over_progress() {
        let mut status = bound("20Gi");
        status["conditions"] = json!([
            { "type": "Resizing", "status": "True", "lastTransitionTime": "2026-03-01T11:59:00Z" },
            {
                "type": "ControllerResizeError",
                "status": "True",
                "lastTransitionTime": "2026-03-01T11:59:30Z",
                "message": "resize volume \"pvc-8f1c\" by resizer \"ebs.csi.aws.com\" failed: rpc error: code = Internal",
            },
        ]);
        let p = pvc(
            json!({ "resources": { "requests": { "storage": "25Gi" } } }),
            status,
        );
        match state(&p).resize {
            ResizeState::Failed { detail, .. } => {
                assert!(detail.starts_with("condition ControllerResizeError: resize volume"));
            }
            other => panic!("{other:?}"),
        }
        let mut status = bound("20Gi");
        status["conditions"] = json!([{ "type": "NodeResizeError", "status": "True" }]);
        assert_eq!(
            state(&pvc(json!({}), status)).resize,
            ResizeState::Failed {
                cause: FailureCause::Stuck,
                detail: "condition NodeResizeError".into()
            }
        );
    }

    #[test]
    fn stuck_resize_becomes_failed() {
        let mut status = bound("20Gi");
        status["conditions"] = json!([{
            "type": "Resizing", "status": "True", "lastTransitionTime": "2026-03-01T11:00:00Z",
        }]);
        let p = pvc(
            json!({ "resources": { "requests": { "storage": "25Gi" } } }),
            status,
        );
        match state(&p).resize {
            ResizeState::Failed { detail, .. } => {
                assert!(
                    detail.starts_with("resize in flight for more than 30m"),
                    "{detail}"
                );
            }
            other => panic!("{other:?}"),
        }
        // Exactly at the timeout it is still in flight.
        let at = claim_state(&p, now(), Bounds::online(SignedDuration::from_hours(1))).expect("ok");
        assert!(matches!(at.resize, ResizeState::InProgress { .. }));
    }

    fn held(conditions: Value, allocated: Option<&str>) -> ResizeState {
        held_within(conditions, allocated, Bounds::online(TIMEOUT))
    }

    fn held_within(conditions: Value, allocated: Option<&str>, bounds: Bounds) -> ResizeState {
        let mut status = bound("20Gi");
        status["conditions"] = conditions;
        if let Some(a) = allocated {
            status["allocatedResourceStatuses"] = json!({ "storage": a });
        }
        let p = pvc(
            json!({ "resources": { "requests": { "storage": "25Gi" } } }),
            status,
        );
        claim_state(&p, now(), bounds).expect("claim state").resize
    }

    /// `nodeExpansion: offline`: the node's part is a remount at once, dated or not; the
    /// controller's part still gets the timeout, and an error still wins.
    #[test]
    fn node_resize_declared_offline_needs_a_remount_at_once() {
        let offline = Bounds {
            resize: TIMEOUT,
            node_offline: true,
        };
        let pending = json!([{ "type": "FileSystemResizePending", "status": "True", "lastTransitionTime": "2026-03-01T11:59:00Z" }]);
        match held_within(pending.clone(), None, offline) {
            ResizeState::Failed { cause, detail } => {
                assert_eq!(cause, FailureCause::NeedsRemount);
                assert!(detail.contains("nodeExpansion: offline"), "{detail}");
                assert!(detail.contains("since 2026-03-01T11:59:00Z"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
        // Undeclared, the same minute-old condition is a resize in flight.
        assert!(matches!(
            held(pending, None),
            ResizeState::InProgress { .. }
        ));
        let undated = json!([{ "type": "Resizing", "status": "True" }]);
        assert!(matches!(
            held_within(undated, Some("NodeResizePending"), offline),
            ResizeState::Failed {
                cause: FailureCause::NeedsRemount,
                ..
            }
        ));
        let resizing = json!([{ "type": "Resizing", "status": "True", "lastTransitionTime": "2026-03-01T11:59:00Z" }]);
        assert!(matches!(
            held_within(resizing, Some("ControllerResizeInProgress"), offline),
            ResizeState::InProgress { .. }
        ));
        let error = json!([
            { "type": "FileSystemResizePending", "status": "True", "lastTransitionTime": "2026-03-01T11:59:00Z" },
            { "type": "NodeResizeError", "status": "True" },
        ]);
        assert!(matches!(
            held_within(error, None, offline),
            ResizeState::Failed {
                cause: FailureCause::Stuck,
                ..
            }
        ));
    }

    /// The node's part held past the timeout (the pod runs: only mounted claims are evaluated)
    /// is a driver that grows the filesystem at the next mount, not a failure of the storage.
    #[test]
    fn node_resize_held_past_the_timeout_needs_a_remount() {
        let pending = |at: &str| json!([{ "type": "FileSystemResizePending", "status": "True", "lastTransitionTime": at }]);
        match held(pending("2026-03-01T11:00:00Z"), None) {
            ResizeState::Failed { cause, detail } => {
                assert_eq!(cause, FailureCause::NeedsRemount);
                assert!(
                    detail.contains("FileSystemResizePending since 2026-03-01T11:00:00Z"),
                    "{detail}"
                );
                assert!(detail.contains("in 30m while the pod runs"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
        // Within the bound it is a resize in flight like any other.
        assert!(matches!(
            held(pending("2026-03-01T11:45:00Z"), None),
            ResizeState::InProgress { .. }
        ));
        // KEP-1790's allocatedResourceStatuses says the same, dated by the Resizing condition.
        let resizing = json!([{ "type": "Resizing", "status": "True", "lastTransitionTime": "2026-03-01T11:00:00Z" }]);
        assert!(matches!(
            held(resizing.clone(), Some("NodeResizePending")),
            ResizeState::Failed {
                cause: FailureCause::NeedsRemount,
                ..
            }
        ));
        // The controller's part held: a driver that expands only detached volumes, or stuck.
        assert!(matches!(
            held(resizing.clone(), None),
            ResizeState::Failed {
                cause: FailureCause::NeedsDetach,
                ..
            }
        ));
        assert!(matches!(
            held(resizing, Some("ControllerResizeInProgress")),
            ResizeState::Failed {
                cause: FailureCause::NeedsDetach,
                ..
            }
        ));
        // An error condition still wins: the storage refused it.
        let error = json!([
            { "type": "FileSystemResizePending", "status": "True", "lastTransitionTime": "2026-03-01T11:00:00Z" },
            { "type": "NodeResizeError", "status": "True" },
        ]);
        assert!(matches!(
            held(error, None),
            ResizeState::Failed {
                cause: FailureCause::Stuck,
                ..
            }
        ));
    }

    #[test]
    fn bad_quantities_name_the_claim_and_field() {
        let p = pvc(
            json!({ "resources": { "requests": { "storage": "20GB" } } }),
            bound("20Gi"),
        );
        let e = claim_state(&p, now(), Bounds::online(TIMEOUT)).expect_err("bad request");
        let msg = e.to_string();
        assert!(msg.contains("PVC db/pgdata-pg-main-1"), "{msg}");
        assert!(
            msg.contains("spec.resources.requests.storage '20GB'"),
            "{msg}"
        );

        let p = pvc(json!({}), bound("lots"));
        let msg = storage_capacity(&p).expect_err("bad capacity").to_string();
        assert!(msg.contains("status.capacity.storage 'lots'"), "{msg}");

        let p = pvc(json!({ "resources": {} }), bound("20Gi"));
        let msg = claim_state(&p, now(), Bounds::online(TIMEOUT))
            .expect_err("missing")
            .to_string();
        assert_eq!(
            msg,
            "PVC db/pgdata-pg-main-1: spec.resources.requests.storage is missing"
        );
    }
}
