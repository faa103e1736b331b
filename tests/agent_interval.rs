//! One grow per modification interval, end to end: a claim of pd.csi.storage.gke.io (Hyperdisk
//! accepts one modification per volume per 4 h) is never sent a second resize inside the
//! interval, not even when it is past the emergency line; the block is said (status, Event). A
//! claim of a driver without an interval, filled the same way beside it, is grown twice. EBS's
//! rule since January 2026 is a budget, four per rolling 24 h: with three grows in its history a
//! claim is grown a fourth time an hour after the third, with four it is not grown again until
//! the oldest leaves the window. The real API server (1.34 or newer) behind the fault proxy, whose
//! request log counts the PATCHes.

mod support {
    pub mod cluster;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::path::Path;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde_json::json;
use support::cluster::{Cluster, available, status_field};
use support::node::{MI, capacity_of, fill, wait_for};

/// Small steps so that the first grow leaves room for a second one below the limit: a step of
/// 32Mi, widened (for the interval) to at most maxStep (minStep below it, as validation wants).
const POLICY: &[(&str, &str)] = &[
    ("enabled", "true"),
    ("limit", "1Gi"),
    ("step", "32Mi"),
    ("min-step", "1Mi"),
    ("max-step", "64Mi"),
];

/// The kubelet's record of the volume's driver (`vol_data.json`, beside the mount point), as it
/// would be for a volume of `driver`.
fn as_volume_of(mount: &Path, driver: &str) {
    let data = mount.parent().expect("volume dir").join("vol_data.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&data).expect("vol_data.json"))
            .expect("vol_data.json is JSON");
    v["driverName"] = json!(driver);
    std::fs::write(&data, v.to_string()).expect("write vol_data.json");
}

#[test]
fn a_hyperdisk_claim_is_never_sent_a_second_resize_inside_four_hours() {
    if !available(
        "a_hyperdisk_claim_is_never_sent_a_second_resize_inside_four_hours",
        &[],
    ) {
        return;
    }
    let mut c = Cluster::new();
    let hd_class = format!("hyperdisk-{}", c.id);
    c.create(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": hd_class}, "provisioner": "pd.csi.storage.gke.io",
        "allowVolumeExpansion": true,
    }));
    let hd = c.claim("hd", &hd_class, 64, POLICY);
    as_volume_of(&hd, "pd.csi.storage.gke.io");
    let fast = c.fast.clone();
    let other = c.claim("other", &fast, 64, POLICY);
    let _csi = c.csi(&[("hd", hd.clone()), ("other", other.clone())], 300);
    let _agent = c.agent("2s");
    wait_for(Duration::from_secs(30), "the first statuses", || {
        ["hd", "other"]
            .iter()
            .all(|n| status_field(&c.get(n), "state").is_some())
            .then_some(())
    });

    // Past the 80 % line: both are grown, and the resizes land.
    for m in [&hd, &other] {
        fill(m, 56 * MI);
    }
    let first: Vec<u64> = ["hd", "other"]
        .iter()
        .map(|n| {
            wait_for(Duration::from_secs(20), "the first grow landed", || {
                let cap = capacity_of(&c.get(n));
                (cap > 64 * MI).then_some(cap)
            })
        })
        .collect();
    // The server has a PATCH before the proxy logs it: the one counted here, waited for.
    c.wait_resize_patches("hd", 1);
    assert_eq!(c.resize_patches("hd"), 1);

    // Past the emergency line of the new sizes (97 %): the claim of a driver without an
    // interval is grown again; the Hyperdisk one is not sent a resize its storage would refuse.
    for (m, size) in [(&hd, first[0]), (&other, first[1])] {
        fill(m, size / 100 * 97);
    }
    wait_for(
        Duration::from_secs(20),
        "the second grow of the other claim",
        || (c.resize_patches("other") == 2).then_some(()),
    );
    let reason = wait_for(
        Duration::from_secs(20),
        "the Hyperdisk claim's block",
        || status_field(&c.get("hd"), "blockedReason"),
    );
    assert_eq!(reason, "modification_interval");
    // Several scans and the fast loop's wake-ups later, still one resize.
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(c.resize_patches("hd"), 1, "a resize inside the interval");
    let patches = c
        .proxy
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with("/persistentvolumeclaims/hd"))
        .filter(|r| r.body.as_deref().is_some_and(|b| b.contains("\"storage\"")))
        .count();
    assert_eq!(patches, 1, "PATCHes carrying a size, whatever their answer");
    let events = c.events_for("hd");
    let said = events
        .iter()
        .find(|(r, _, _)| r == "ModificationInterval")
        .unwrap_or_else(|| panic!("no ModificationInterval Event: {events:?}"));
    assert_eq!(said.1, "Warning");
    assert!(said.2.contains("none sent"), "{said:?}");
}

/// KEP-3751 (GA in 1.34): a claim whose VolumeAttributesClass is changing is being modified by
/// its storage, which counts that as the same kind of modification as a resize and refuses
/// another until it lands. Past its line (and its emergency line) it is not resized, with the
/// reason said; once the change has landed it is. The class fields are the real server's: the
/// claim asks for `gold` in its spec, and the test writes the status as the external-resizer
/// does while the modification is in flight (`modifyVolumeStatus`, `ModifyingVolume`) and when it
/// lands (`currentVolumeAttributesClassName`, neither of those).
#[test]
fn a_claim_whose_attributes_class_is_changing_is_resized_once_it_lands() {
    if !available(
        "a_claim_whose_attributes_class_is_changing_is_resized_once_it_lands",
        &[],
    ) {
        return;
    }
    let mut c = Cluster::new();
    let fast = c.fast.clone();
    let vac = c.claim("vac", &fast, 64, POLICY);
    let ns = c.ns.clone();
    c.kube.patch_claim(
        "vac",
        json!({ "spec": { "volumeAttributesClassName": "gold" } }),
    );
    let modifying = json!({ "status": {
        "currentVolumeAttributesClassName": "silver",
        "modifyVolumeStatus": { "status": "InProgress", "targetVolumeAttributesClassName": "gold" },
        "conditions": [{ "type": "ModifyingVolume", "status": "True" }],
    } });
    c.patch_status_in::<PersistentVolumeClaim>(&ns, "vac", modifying);
    let _csi = c.csi(&[("vac", vac.clone())], 300);
    let _agent = c.agent("2s");
    fill(&vac, 63 * MI);
    let reason = wait_for(Duration::from_secs(30), "the block", || {
        status_field(&c.get("vac"), "blockedReason").filter(|r| r == "volume_attributes_changing")
    });
    assert_eq!(reason, "volume_attributes_changing");
    // Several scans and the fast loop's wake-ups later, still no resize.
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        c.resize_patches("vac"),
        0,
        "a resize while the class changes"
    );
    let events = c.events_for("vac");
    assert!(
        events
            .iter()
            .any(|(r, t, _)| r == "VolumeAttributesChanging" && t == "Warning"),
        "{events:?}"
    );

    // The change lands: the class is current, no modification in flight, the resizer's
    // condition cleared (a merge patch's null removes the field).
    c.patch_status_in::<PersistentVolumeClaim>(
        &ns,
        "vac",
        json!({ "status": {
            "currentVolumeAttributesClassName": "gold",
            "modifyVolumeStatus": null,
            "conditions": [],
        } }),
    );
    wait_for(Duration::from_secs(30), "the grow", || {
        (capacity_of(&c.get("vac")) > 64 * MI).then_some(())
    });
    c.wait_resize_patches("vac", 1);
    assert_eq!(c.resize_patches("vac"), 1);
}

/// A history of landed grows of the claim, `hours` ago each (oldest first), the last one to its
/// 64Mi; and when the oldest leaves a 24 h window.
fn grown_hours_ago(hours: &[i64]) -> (String, Timestamp) {
    let now = Timestamp::from_second(Timestamp::now().as_second()).expect("now");
    let n = hours.len() as u64;
    let entries: Vec<serde_json::Value> = hours
        .iter()
        .zip(0..)
        .map(|(h, i)| {
            let at = now - SignedDuration::from_hours(*h);
            let (from, to) = ((64 - 8 * (n - i)) * MI, (64 - 8 * (n - i - 1)) * MI);
            json!({"at": at, "kind": "Grow", "from": from, "to": to, "fs_before": from,
                   "landed": at + SignedDuration::from_secs(60), "result": "Succeeded"})
        })
        .collect();
    let oldest = now - SignedDuration::from_hours(hours[0]) + SignedDuration::from_hours(24);
    (serde_json::Value::Array(entries).to_string(), oldest)
}

/// EBS (January 2026): four grows per rolling 24 h, each after the last one landed. A claim with
/// three landed grows in its last day, the last an hour ago (the old six-hour rule would hold
/// it), is grown past its emergency line; one with four is not sent a resize at all, blocked
/// until the oldest of them leaves the window, which its Event names. The driver is the
/// StorageClass's provisioner and the kubelet's record.
#[test]
fn an_ebs_claim_is_grown_a_fourth_time_in_a_day_and_not_a_fifth() {
    if !available(
        "an_ebs_claim_is_grown_a_fourth_time_in_a_day_and_not_a_fifth",
        &[],
    ) {
        return;
    }
    let mut c = Cluster::new();
    let ebs_class = format!("ebs-{}", c.id);
    c.create(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": ebs_class}, "provisioner": "ebs.csi.aws.com",
        "allowVolumeExpansion": true,
    }));
    // The policy's own daily budget (3 by default) well above the storage's.
    let policy = |history: &str| -> Vec<(&'static str, String)> {
        POLICY
            .iter()
            .map(|(k, v)| (*k, v.to_string()))
            .chain([
                ("max-actions-per-day", "10".to_string()),
                ("history", history.to_string()),
            ])
            .collect()
    };
    let (three, _) = grown_hours_ago(&[23, 12, 1]);
    let (four, frees) = grown_hours_ago(&[20, 15, 10, 5]);
    let mut mounts = Vec::new();
    for (name, history) in [("three", &three), ("four", &four)] {
        let annotations = policy(history);
        let annotations: Vec<(&str, &str)> =
            annotations.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mount = c.claim(name, &ebs_class, 64, &annotations);
        as_volume_of(&mount, "ebs.csi.aws.com");
        mounts.push(mount);
    }
    let _agent = c.agent("2s");
    // 98 %: past the line and the emergency line.
    for m in &mounts {
        fill(m, 63 * MI);
    }
    wait_for(
        Duration::from_secs(30),
        "the fourth grow of the day",
        || (c.resize_patches("three") == 1).then_some(()),
    );
    let reason = wait_for(Duration::from_secs(30), "the fifth grow's block", || {
        status_field(&c.get("four"), "blockedReason")
    });
    assert_eq!(reason, "modification_interval");
    // Several scans and the fast loop's wake-ups later, still none.
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(c.resize_patches("four"), 0, "a fifth resize within 24 h");
    let events = c.events_for("four");
    let said = events
        .iter()
        .find(|(r, _, _)| r == "ModificationInterval")
        .unwrap_or_else(|| panic!("no ModificationInterval Event: {events:?}"));
    assert!(
        said.2.contains(&frees.to_string()),
        "{said:?} does not name {frees}"
    );
}
