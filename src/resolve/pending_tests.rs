//! Which Pending claims get the `RestoreTooSmall` Event, and what it says; hostile sources,
//! sizes and uids. The API server's side is tests/kube_restore_pending.rs.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde_json::{Value, json};

use super::*;
use crate::quantity::MI;

const UID: &str = "0b6c7a52-1f0e-4c8e-9a55-3d2f0c1e9b7a";
const AFTER: SignedDuration = SignedDuration::from_mins(1);

fn at(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

/// A claim created at 12:00:00, Pending, asking for `request`, with `spec` added.
fn claim(request: &str, spec: Value, phase: &str) -> PersistentVolumeClaim {
    let mut c = json!({
        "metadata": {"name": "pg-3", "namespace": "db", "uid": UID,
                     "creationTimestamp": "2026-11-28T12:00:00Z",
                     "labels": {"cnpg.io/cluster": "pg", "cnpg.io/pvcRole": "PG_DATA"}},
        "spec": {"resources": {"requests": {"storage": request}}},
        "status": {"phase": phase},
    });
    for (k, v) in spec.as_object().expect("object") {
        c["spec"][k] = v.clone();
    }
    serde_json::from_value(c).expect("claim")
}

fn from_snapshot(name: &str) -> Value {
    json!({"dataSource": {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": name}})
}

fn later() -> Timestamp {
    at("2026-11-28T12:01:00Z")
}

#[test]
fn a_restore_left_pending_below_its_group_is_reported_once_the_bound_has_passed() {
    let c = claim("64Mi", from_snapshot("snap-1"), "Pending");
    let u = undersized(&c, Some(80 * MI), true, later(), AFTER).expect("undersized");
    assert_eq!(
        u,
        Undersized {
            uid: UID.into(),
            request: 64 * MI,
            needs: 80 * MI,
            source: Source::Snapshot("snap-1".into()),
        }
    );
    assert_eq!(u.event_name(), format!("headroom-restore-too-small.{UID}"));
    let note = u.note(AFTER);
    for part in [
        "Pending for over 60s",
        "restored from VolumeSnapshot snap-1",
        "a request of 64Mi",
        "group's size 80Mi",
        "overlays/webhook",
        "webhook.enabled=true",
        "spec.storage.size to 80Mi",
        "docs/operations.md#a-restored-or-cloned-claim-stays-pending",
    ] {
        assert!(note.contains(part), "{part:?} not in {note}");
    }
    // A second before the bound: not yet (the provisioner may still be at work).
    let early = at("2026-11-28T12:00:59Z");
    assert_eq!(undersized(&c, Some(80 * MI), true, early, AFTER), None);
    // A clone of a claim alike.
    let clone = claim(
        "64Mi",
        json!({"dataSource": {"kind": "PersistentVolumeClaim", "name": "pg-1"}}),
        "Pending",
    );
    let u = undersized(&clone, Some(80 * MI), true, later(), AFTER).expect("clone");
    assert!(u.note(AFTER).contains("cloned from PVC pg-1"), "{u:?}");
}

#[test]
fn a_claim_at_size_bound_not_opted_in_or_without_a_source_is_left_alone() {
    let restore = claim("64Mi", from_snapshot("snap-1"), "Pending");
    let none = |c: &PersistentVolumeClaim, group: Option<u64>, opted_in: bool| {
        undersized(c, group, opted_in, later(), AFTER)
    };
    assert_eq!(
        none(&restore, Some(64 * MI), true),
        None,
        "at the group's size"
    );
    assert_eq!(none(&restore, Some(32 * MI), true), None, "above it");
    assert_eq!(none(&restore, None, true), None, "no group size known");
    assert_eq!(none(&restore, Some(80 * MI), false), None, "not opted in");
    let bound = claim("64Mi", from_snapshot("snap-1"), "Bound");
    assert_eq!(none(&bound, Some(80 * MI), true), None, "bound");
    let plain = claim("64Mi", json!({}), "Pending");
    assert_eq!(none(&plain, Some(80 * MI), true), None, "no data source");
    let populator = claim(
        "64Mi",
        json!({"dataSource": {"apiGroup": "example.com", "kind": "Backup", "name": "b"}}),
        "Pending",
    );
    assert_eq!(none(&populator, Some(80 * MI), true), None, "a populator");
    let mut leaving = restore.clone();
    leaving.metadata.deletion_timestamp = restore.metadata.creation_timestamp.clone();
    assert_eq!(none(&leaving, Some(80 * MI), true), None, "being deleted");
}

#[test]
fn hostile_sources_sizes_uids_and_dates_take_no_action() {
    let none = |c: PersistentVolumeClaim| undersized(&c, Some(80 * MI), true, later(), AFTER);
    // Another namespace's snapshot (dataSourceRef), and names no object has.
    let other = json!({"dataSourceRef": {"apiGroup": "snapshot.storage.k8s.io",
                       "kind": "VolumeSnapshot", "name": "snap", "namespace": "kube-system"}});
    assert_eq!(none(claim("64Mi", other, "Pending")), None);
    for name in [
        "../../secrets",
        "Snap",
        "",
        &"a".repeat(300),
        "snap\n\u{202e}",
    ] {
        assert_eq!(
            none(claim("64Mi", from_snapshot(name), "Pending")),
            None,
            "{name:?}"
        );
    }
    // Requests that are not sizes.
    for request in ["lots", "-1Gi", "99999999999999999999Ei", ""] {
        assert_eq!(
            none(claim(request, from_snapshot("snap"), "Pending")),
            None,
            "{request:?}"
        );
    }
    // Phases that only look like Pending.
    for phase in ["pending", "Pending ", "PENDING"] {
        assert_eq!(
            none(claim("64Mi", from_snapshot("snap"), phase)),
            None,
            "{phase:?}"
        );
    }
    // A uid that would not make a name, a missing one, a missing date.
    for uid in [json!("../x"), json!("A".repeat(100)), Value::Null] {
        let mut c = claim("64Mi", from_snapshot("snap"), "Pending");
        c.metadata.uid = uid.as_str().map(str::to_string);
        assert_eq!(none(c), None, "{uid:?}");
    }
    let mut c = claim("64Mi", from_snapshot("snap"), "Pending");
    c.metadata.creation_timestamp = None;
    assert_eq!(none(c), None, "no creationTimestamp");
    // A creation date in the future (a skewed clock): not yet.
    let c = claim("64Mi", from_snapshot("snap"), "Pending");
    assert_eq!(
        undersized(&c, Some(80 * MI), true, at("2026-11-28T11:00:00Z"), AFTER),
        None
    );
}

#[test]
fn the_note_quotes_a_long_source_name_clipped_and_fits_an_events_note() {
    let long = format!("{}.{}", "a".repeat(200), "b".repeat(52));
    let c = claim("1Ki", from_snapshot(&long), "Pending");
    let u = undersized(&c, Some(u64::MAX), true, later(), AFTER).expect("undersized");
    let note = u.note(SignedDuration::from_hours(24 * 365 * 100));
    assert!(
        note.contains(&"a".repeat(63)) && !note.contains(&"a".repeat(64)),
        "{note}"
    );
    // events.k8s.io/v1 refuses a note of 1 KiB or more.
    assert!(note.len() < 1024, "{} bytes: {note}", note.len());
}
