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
