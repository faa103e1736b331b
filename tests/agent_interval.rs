//! One grow per modification interval, end to end: a claim of ebs.csi.aws.com (the storage
//! accepts one modification per volume per 6 h) is never sent a second resize inside the
//! interval, not even when it is past the emergency line; the block is said (status, Event). A
//! claim of a driver without an interval, filled the same way beside it, is grown twice. The
//! real API server (1.20) behind the fault proxy, whose request log counts the PATCHes.

mod support {
    pub mod cluster;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::path::Path;
use std::time::Duration;

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
/// would be for an EBS volume.
fn as_ebs_volume(mount: &Path) {
    let data = mount.parent().expect("volume dir").join("vol_data.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&data).expect("vol_data.json"))
            .expect("vol_data.json is JSON");
    v["driverName"] = json!("ebs.csi.aws.com");
    std::fs::write(&data, v.to_string()).expect("write vol_data.json");
}

#[test]
fn an_ebs_claim_is_never_sent_a_second_resize_inside_six_hours() {
    if !available(
        "an_ebs_claim_is_never_sent_a_second_resize_inside_six_hours",
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
    let ebs = c.claim("ebs", &ebs_class, 64, POLICY);
    as_ebs_volume(&ebs);
    let fast = c.fast.clone();
    let other = c.claim("other", &fast, 64, POLICY);
    let _csi = c.csi(&[("ebs", ebs.clone()), ("other", other.clone())], 300);
    let _agent = c.agent("2s");
    wait_for(Duration::from_secs(30), "the first statuses", || {
        ["ebs", "other"]
            .iter()
            .all(|n| status_field(&c.get(n), "state").is_some())
            .then_some(())
    });

    // Past the 80 % line: both are grown, and the resizes land.
    for m in [&ebs, &other] {
        fill(m, 56 * MI);
    }
    let first: Vec<u64> = ["ebs", "other"]
        .iter()
        .map(|n| {
            wait_for(Duration::from_secs(20), "the first grow landed", || {
                let cap = capacity_of(&c.get(n));
                (cap > 64 * MI).then_some(cap)
            })
        })
        .collect();
    assert_eq!(c.resize_patches("ebs"), 1);

    // Past the emergency line of the new sizes (97 %): the claim of a driver without an
    // interval is grown again; the EBS one is not sent a resize its storage would refuse.
    for (m, size) in [(&ebs, first[0]), (&other, first[1])] {
        fill(m, size / 100 * 97);
    }
    wait_for(
        Duration::from_secs(20),
        "the second grow of the other claim",
        || (c.resize_patches("other") == 2).then_some(()),
    );
    let reason = wait_for(Duration::from_secs(20), "the EBS claim's block", || {
        status_field(&c.get("ebs"), "blockedReason")
    });
    assert_eq!(reason, "modification_interval");
    // Several scans and the fast loop's wake-ups later, still one resize.
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(c.resize_patches("ebs"), 1, "a resize inside the interval");
    let patches = c
        .proxy
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with("/persistentvolumeclaims/ebs"))
        .filter(|r| r.body.as_deref().is_some_and(|b| b.contains("\"storage\"")))
        .count();
    assert_eq!(patches, 1, "PATCHes carrying a size, whatever their answer");
    let events = c.events_for("ebs");
    let said = events
        .iter()
        .find(|(r, _, _)| r == "ModificationInterval")
        .unwrap_or_else(|| panic!("no ModificationInterval Event: {events:?}"));
    assert_eq!(said.1, "Warning");
    assert!(said.2.contains("none sent"), "{said:?}");
}
