//! One grow per modification interval, end to end: a claim of pd.csi.storage.gke.io (Hyperdisk
//! accepts one modification per volume per 4 h) is never sent a second resize inside the
//! interval, not even when it is past the emergency line; the block is said (status, Event). A
//! claim of a driver without an interval, filled the same way beside it, is grown twice. (EBS's
//! rule since January 2026 is a budget, four per rolling 24 h: the engine's and the simulator's
//! tests cover it.) The
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
/// would be for a Hyperdisk volume.
fn as_hyperdisk_volume(mount: &Path) {
    let data = mount.parent().expect("volume dir").join("vol_data.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&data).expect("vol_data.json"))
            .expect("vol_data.json is JSON");
    v["driverName"] = json!("pd.csi.storage.gke.io");
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
    as_hyperdisk_volume(&hd);
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
