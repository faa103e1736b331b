//! One fill, one grow, end to end (issue 13 item 4, issue 16 item 2): the agent against the fake
//! API server with real tmpfs volumes. A bound claim without `status.capacity` is never resized;
//! a storage system that sets `status.capacity` before the filesystem grows gets one resize, and
//! the next comes only after the filesystem has grown and filled again.

#[path = "support/fake_api/mod.rs"]
mod fake_api;
mod support {
    pub mod fake_cluster;
    pub mod node;
    pub mod root;
}

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use nix::mount::{MsFlags, mount};
use support::fake_cluster::{Cluster, ENABLED, NODE, NS, status_field};
use support::node::{MI, fill, request_of, wait_for};

const WAIT: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread")]
async fn bound_claim_without_capacity_is_never_resized() {
    if !support::root::require_root("bound_claim_without_capacity_is_never_resized", &[]) {
        return;
    }
    let mut c = Cluster::new().await;
    c.pvc("data", "fast", 64, ENABLED, |p| {
        if let Some(s) = p.status.as_mut() {
            s.capacity = None;
        }
    });
    let uid = c.pod("pod-data", NODE, "data");
    let mount_point = c.root.tmpfs_volume(&uid, "pv-data", 64 * MI);
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

#[tokio::test(flavor = "multi_thread")]
async fn capacity_set_before_the_filesystem_grows_is_one_grow() {
    if !support::root::require_root("capacity_set_before_the_filesystem_grows_is_one_grow", &[]) {
        return;
    }
    let mut c = Cluster::new().await;
    let mount_point = c.claim("data", "fast", 64, ENABLED);
    fill(&mount_point, 60 * MI);
    let _agent = c.agent("300ms");
    wait_for(WAIT, "the first grow", || {
        (request_of(&c.get("data")) == 80 * MI).then_some(())
    });
    // The controller reports the new capacity at once; the node has not expanded the filesystem.
    c.fake
        .update_with::<PersistentVolumeClaim>(NS, "data", |p| {
            let status = p.status.get_or_insert_with(Default::default);
            status
                .capacity
                .get_or_insert_with(Default::default)
                .insert("storage".into(), Quantity("80Mi".into()));
        });
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
    mount(
        Some("tmpfs"),
        &mount_point,
        Some("tmpfs"),
        MsFlags::MS_REMOUNT,
        Some(format!("size={}", 80 * MI).as_str()),
    )
    .expect("remount");
    wait_for(WAIT, "balanced after the filesystem grew", || {
        (status_field(&c.get("data"), "state").as_deref() == Some("Balanced")).then_some(())
    });
    assert_eq!(c.resize_patches("data"), 1);
    // ...until it fills again: a new fill, a new grow.
    fill(&mount_point, 76 * MI);
    wait_for(WAIT, "the second grow", || {
        (request_of(&c.get("data")) == 96 * MI).then_some(())
    });
    assert_eq!(c.resize_patches("data"), 2);
}
