//! One fill, one grow, end to end (issue 13 item 4, issue 16 item 2): the agent against the real
//! API server (through the fault proxy, which counts its PATCHes) with real tmpfs volumes. A bound claim without `status.capacity` is never resized;
//! a storage system that sets `status.capacity` before the filesystem grows gets one resize, and
//! the next comes only after the filesystem has grown and filled again.

mod support {
    pub mod cluster;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use nix::mount::{MsFlags, mount};
use serde_json::json;
use support::cluster::{Cluster, ENABLED, available, history, status_field};
use support::node::{MI, fill, request_of, wait_for};

const WAIT: Duration = Duration::from_secs(15);

/// The node expanding the filesystem: the tmpfs remounted at `bytes`.
fn remount(mount_point: &std::path::Path, bytes: u64) {
    mount(
        Some("tmpfs"),
        mount_point,
        Some("tmpfs"),
        MsFlags::MS_REMOUNT,
        Some(format!("size={bytes}").as_str()),
    )
    .expect("remount");
}

#[test]
fn bound_claim_without_capacity_is_never_resized() {
    if !available("bound_claim_without_capacity_is_never_resized", &[]) {
        return;
    }
    let mut c = Cluster::new();
    c.pvc("data", &c.fast, 64, ENABLED, |p| {
        if let Some(s) = p.status.as_mut() {
            s.capacity = None;
        }
    });
    let uid = c.pod("pod-data", &c.node, "data");
    let pv = c.pv_name("data");
    let mount_point = c.root.tmpfs_volume(&uid, &pv, 64 * MI);
    fill(&mount_point, 60 * MI);
    let _agent = c.agent("300ms");
    wait_for(WAIT, "status blocked: capacity_unknown", || {
        (status_field(&c.get("data"), "blockedReason").as_deref() == Some("capacity_unknown"))
            .then_some(())
    });
    // Many scans later: still no resize (it was grown three times in 12 s before), one Event.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(c.resize_patches("data"), 0);
    assert_eq!(request_of(&c.get("data")), 64 * MI);
    let events = c.events_for("data");
    let warned: Vec<_> = events
        .iter()
        .filter(|(r, t, _)| r == "CapacityUnknown" && t == "Warning")
        .collect();
    assert_eq!(warned.len(), 1, "{events:?}");
}

#[test]
fn capacity_set_before_the_filesystem_grows_is_one_grow() {
    if !available("capacity_set_before_the_filesystem_grows_is_one_grow", &[]) {
        return;
    }
    let mut c = Cluster::new();
    let mount_point = c.claim("data", &c.fast.clone(), 64, ENABLED);
    fill(&mount_point, 60 * MI);
    let _agent = c.agent("300ms");
    wait_for(WAIT, "the first grow", || {
        (request_of(&c.get("data")) == 80 * MI).then_some(())
    });
    // The server has the PATCH before the proxy logs it: the one counted below, waited for.
    c.wait_resize_patches("data", 1);
    // The controller reports the new capacity at once; the node has not expanded the filesystem.
    c.patch_status::<PersistentVolumeClaim>(
        "data",
        &json!({"status": {"capacity": {"storage": "80Mi"}}}),
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        c.resize_patches("data"),
        1,
        "grew again before the filesystem did"
    );
    assert_eq!(
        status_field(&c.get("data"), "blockedReason").as_deref(),
        Some("resize_in_progress")
    );
    // The node expands the filesystem: 60Mi of 80Mi is under the threshold, nothing to do...
    remount(&mount_point, 80 * MI);
    wait_for(WAIT, "balanced after the filesystem grew", || {
        (status_field(&c.get("data"), "state").as_deref() == Some("Balanced")).then_some(())
    });
    assert_eq!(c.resize_patches("data"), 1);
    // ...until it fills again: a new fill, a new grow.
    fill(&mount_point, 76 * MI);
    wait_for(WAIT, "the second grow", || {
        (request_of(&c.get("data")) == 96 * MI).then_some(())
    });
    c.wait_resize_patches("data", 2);
    assert_eq!(c.resize_patches("data"), 2);
}

/// A 64Mi claim filled to 60Mi and grown to 80Mi by an agent whose scans are a minute apart:
/// the fill, and what follows the grow, are seen by the fast loop alone. The resize has not
/// landed.
fn grown_between_scans() -> (Cluster, std::path::PathBuf, support::node::Agent) {
    let mut c = Cluster::new();
    let mount_point = c.claim("data", &c.fast.clone(), 64, ENABLED);
    let agent = c.agent("60s");
    wait_for(WAIT, "the first status", || {
        status_field(&c.get("data"), "state")
    });
    fill(&mount_point, 60 * MI);
    wait_for(WAIT, "the grow", || {
        (request_of(&c.get("data")) == 80 * MI).then_some(())
    });
    (c, mount_point, agent)
}

/// The landing of a resize is written when it is seen, even when the claim changed in that very
/// moment (the CSI driver setting its capacity while the agent reads it): the 409 on that write
/// is re-read and written again, not left for the next scan a whole interval later, which would
/// also make the lead time learned from it that much too long. Seen once in CI
/// (`kube_predictive`, interval 60 s: no landing in 20 s).
#[test]
fn a_landing_whose_write_meets_a_conflict_is_written_at_once() {
    if !available(
        "a_landing_whose_write_meets_a_conflict_is_written_at_once",
        &[],
    ) {
        return;
    }
    let (c, mount_point, _agent) = grown_between_scans();
    // The agent's next write to the claim (the landing's) meets a change it has not seen.
    let path = format!("/api/v1/namespaces/{}/persistentvolumeclaims/data", c.ns);
    c.proxy.fail_next_matching(1, 409, "PATCH", &path);
    c.patch_status::<PersistentVolumeClaim>(
        "data",
        &json!({"status": {"capacity": {"storage": "80Mi"}}}),
    );
    let grown_at = jiff::Timestamp::now();
    remount(&mount_point, 80 * MI);
    let landed = wait_for(WAIT, "the landing in the history", || {
        history(&c.get("data"))
            .iter()
            .find_map(|e| e.get("landed")?.as_str()?.parse::<jiff::Timestamp>().ok())
    });
    let refused_landing = |r: &support::kube::proxy::RequestRecord| {
        r.method == "PATCH" && r.path == path && r.status == 409
    };
    let refused: Vec<_> = c
        .proxy
        .wait_requests(WAIT, "the refused landing write", |log| {
            log.iter().any(refused_landing)
        })
        .into_iter()
        .filter(refused_landing)
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0]
            .body
            .as_deref()
            .is_some_and(|b| b.contains("landed")),
        "the refused write was the landing's: {refused:?}"
    );
    // Stamped when the filesystem was seen grown, not at a later scan.
    let after = landed.duration_since(grown_at).as_secs_f64();
    assert!(
        (0.0..5.0).contains(&after),
        "landed {after} s after the remount"
    );
    c.wait_resize_patches("data", 1);
    assert_eq!(c.resize_patches("data"), 1);
}

/// The kubelet grows the filesystem, then writes `status.capacity` carrying the resourceVersion
/// it read (kubelet 1.20's addResourceVersion). The agent sees the filesystem grown in between
/// and writes nothing to the claim, so that write is not refused (409) and retried a reconcile
/// later; it stamps the landing once the status shows it too, within moments, not at the next
/// scan a minute later.
#[test]
fn nothing_is_written_between_the_filesystem_growing_and_the_kubelets_status_write() {
    if !available(
        "nothing_is_written_between_the_filesystem_growing_and_the_kubelets_status_write",
        &[],
    ) {
        return;
    }
    let (c, mount_point, _agent) = grown_between_scans();
    // What the grow's decision wrote is written; the kubelet reads the claim.
    std::thread::sleep(Duration::from_secs(2));
    let read = c
        .get("data")
        .metadata
        .resource_version
        .expect("resourceVersion");
    remount(&mount_point, 80 * MI);
    // The fast loop sees the filesystem grown (several looks) before the status write.
    std::thread::sleep(Duration::from_secs(3));
    let written = jiff::Timestamp::now();
    c.patch_status::<PersistentVolumeClaim>(
        "data",
        &json!({"metadata": {"resourceVersion": read}, "status": {"capacity": {"storage": "80Mi"}}}),
    );
    let landed = wait_for(WAIT, "the landing in the history", || {
        history(&c.get("data"))
            .iter()
            .find_map(|e| e.get("landed")?.as_str()?.parse::<jiff::Timestamp>().ok())
    });
    assert!(
        landed >= written,
        "stamped at {landed}, before the status showed it at {written}"
    );
    c.wait_resize_patches("data", 1);
    assert_eq!(c.resize_patches("data"), 1);
}
