//! Reclaim space end to end: a claim on ext4 over a loop device (sparse backing file) in the
//! kubelet root, trimmed by the agent when its schedule comes due and recorded on the claim; a
//! restarted agent does not trim again before the next due time, and trims once at once when an
//! occurrence passed while it was down. The real API server, through the fault proxy.

mod support {
    pub mod cluster;
    pub mod http;
    pub mod kube;
    pub mod loop_ext4;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::time::Duration;

use serde_json::json;
use support::cluster::{Cluster, available};
use support::http::{free_port, get};
use support::loop_ext4::{self, LoopExt4, SLACK};
use support::node::wait_for;

/// (type, note) of the Events about the claim with `reason`.
fn events(c: &Cluster, reason: &str) -> Vec<(String, String)> {
    c.events_for("trim")
        .into_iter()
        .filter(|(r, _, _)| r == reason)
        .map(|(_, t, n)| (t, n))
        .collect()
}

fn reclaim_record(c: &Cluster) -> Option<serde_json::Value> {
    let pvc = c.get("trim");
    let text = pvc
        .metadata
        .annotations?
        .get("headroom.dev/reclaim")?
        .clone();
    Some(serde_json::from_str(&text).expect("headroom.dev/reclaim is JSON"))
}

/// Daily at the second `secs` from now, UTC (the cron parser takes a seconds field).
fn daily_in(secs: i64) -> String {
    let at = (jiff::Timestamp::now() + jiff::SignedDuration::from_secs(secs))
        .to_zoned(jiff::tz::TimeZone::UTC);
    format!("{} {} {} * * *", at.second(), at.minute(), at.hour())
}

fn set_reclaim_schedule(c: &Cluster, schedule: &str) {
    c.patch_claim(
        "trim",
        json!({"metadata": {"annotations": {"headroom.dev/reclaim-space-schedule": schedule}}}),
    );
}

#[test]
fn due_volume_is_trimmed_once_not_again_after_a_restart_and_late_once() {
    if !available(
        "due_volume_is_trimmed_once_not_again_after_a_restart_and_late_once",
        loop_ext4::TOOLS,
    ) {
        return;
    }
    let c = Cluster::new();
    let annotations = [
        ("reclaim-space-enabled", "true"),
        ("reclaim-space-timezone", "UTC"),
        // Yearly, far from now: the agent first sees the volume with nothing due.
        ("reclaim-space-schedule", "0 0 1 1 *"),
    ];
    c.pvc("trim", &c.fast, 256, &annotations, |_| {});
    let uid = c.pod("pod-trim", &c.node, "trim");
    let fs = LoopExt4::new_at(&c.root.csi_mount_point(&uid, &c.pv_name("trim")));
    let before = fs.write_and_delete();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let flags = ["--listen", listen.as_str()];
    let mut agent = c.agent_on(&c.node, c.root.path(), "300ms", &flags);
    wait_for(Duration::from_secs(15), "/ready", || {
        get(port, "/ready").filter(|(code, _)| *code == 200)
    });
    std::thread::sleep(Duration::from_millis(600));
    assert!(reclaim_record(&c).is_none(), "trimmed before its schedule");

    set_reclaim_schedule(&c, &daily_in(3));
    let record = wait_for(Duration::from_secs(15), "the trim record", || {
        reclaim_record(&c)
    });
    assert_eq!(record["result"], "Succeeded", "{record}");
    assert_eq!(record["node"], c.node.as_str());
    let bytes = record["bytes"].as_u64().expect("bytes");
    fs.assert_reclaimed(before, bytes);
    let said = wait_for(Duration::from_secs(5), "SpaceReclaimed", || {
        Some(events(&c, "SpaceReclaimed")).filter(|e| !e.is_empty())
    });
    assert_eq!(said.len(), 1, "{said:?}");
    assert_eq!(said[0].0, "Normal");

    // Freed again and left untrimmed: a second trim would show in the backing file.
    let before = fs.write_and_delete();
    agent.kill();
    let mut agent = c.agent_on(&c.node, c.root.path(), "300ms", &flags);
    wait_for(Duration::from_secs(15), "/ready after the restart", || {
        get(port, "/ready").filter(|(code, _)| *code == 200)
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        agent.child.try_wait().expect("try_wait").is_none(),
        "the agent exited"
    );
    assert_eq!(
        reclaim_record(&c).as_ref(),
        Some(&record),
        "trimmed again after a restart"
    );
    assert_eq!(events(&c, "SpaceReclaimed").len(), 1);
    assert!(
        fs.allocated() + SLACK >= before,
        "the backing file shrank: trimmed again"
    );

    // Down while an occurrence passes: the restarted agent trims once, at once, because the
    // claim's record says the last trim was before that occurrence.
    agent.kill();
    set_reclaim_schedule(&c, &daily_in(1));
    std::thread::sleep(Duration::from_secs(2));
    let _agent = c.agent_on(&c.node, c.root.path(), "300ms", &flags);
    let late = wait_for(Duration::from_secs(15), "the overdue trim", || {
        reclaim_record(&c).filter(|r| r["at"] != record["at"])
    });
    assert_eq!(late["result"], "Succeeded", "{late}");
    fs.assert_reclaimed(before, late["bytes"].as_u64().expect("bytes"));
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(reclaim_record(&c).as_ref(), Some(&late), "trimmed twice");
    assert_eq!(events(&c, "SpaceReclaimed").len(), 2);
}

/// Sets (or with `None` removes) the csi-addons schedule annotation of a cluster-scoped object.
fn set_schedule<K>(c: &Cluster, name: &str, schedule: Option<&str>)
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    c.patch_cluster::<K>(
        name,
        json!({"metadata": {"annotations": {SCHEDULE: schedule}}}),
    );
}

const SCHEDULE: &str = "reclaimspace.csiaddons.openshift.io/schedule";

/// Issue 24 (ReclaimSpace design): a claim with no trim annotation of its own is trimmed on its
/// Namespace's csi-addons schedule, then, with that gone, on its CSIDriver's (the StorageClass's
/// provisioner), each picked up live from the agent's watches. A block-mode claim that asks to
/// be trimmed is told why the node agent cannot: a `ReclaimNotPossible` Warning and the reason
/// in its `headroom.dev/reclaim` record, once.
#[test]
fn namespace_and_csidriver_schedules_trim_and_a_block_claim_is_told_why() {
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::api::storage::v1::CSIDriver;
    if !available(
        "namespace_and_csidriver_schedules_trim_and_a_block_claim_is_told_why",
        loop_ext4::TOOLS,
    ) {
        return;
    }
    let mut c = Cluster::new();
    let ns = c.ns.clone();
    let yearly = "0 0 1 1 *";
    set_schedule::<Namespace>(&c, &ns, Some(yearly));
    // The provisioner of the test's classes: cluster-wide, its schedule set by this test only
    // (the other test's claim has a schedule of its own, which ranks above it).
    c.create(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
        "metadata": {"name": "test.csi.headroom.dev"}, "spec": {}
    }));
    let fast = c.fast.clone();
    c.pvc("trim", &fast, 256, &[], |_| {});
    let uid = c.pod("pod-trim", &c.node, "trim");
    let fs = LoopExt4::new_at(&c.root.csi_mount_point(&uid, &c.pv_name("trim")));
    c.pvc(
        "raw",
        &fast,
        256,
        &[("reclaim-space-schedule", "@daily")],
        |p| {
            if let Some(s) = p.spec.as_mut() {
                s.volume_mode = Some("Block".into());
            }
        },
    );
    let raw_uid = c.pod("pod-raw", &c.node, "raw");
    let raw_pv = c.pv_name("raw");
    c.root.block_volume(&raw_uid, &raw_pv);
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let _agent = c.agent_on(
        &c.node,
        c.root.path(),
        "300ms",
        &["--listen", listen.as_str()],
    );
    wait_for(Duration::from_secs(15), "/ready", || {
        get(port, "/ready").filter(|(code, _)| *code == 200)
    });

    // The block-mode claim: told once, recorded once, never trimmed.
    let said = wait_for(Duration::from_secs(10), "ReclaimNotPossible", || {
        let e: Vec<_> = c
            .events_for("raw")
            .into_iter()
            .filter(|(r, _, _)| r == "ReclaimNotPossible")
            .collect();
        Some(e).filter(|e| !e.is_empty())
    });
    assert_eq!(said[0].1, "Warning");
    assert!(
        said[0].2.contains("block-mode") && said[0].2.contains("controller"),
        "{said:?}"
    );
    let raw_record = |c: &Cluster| -> Option<serde_json::Value> {
        let text = c
            .get("raw")
            .metadata
            .annotations?
            .get("headroom.dev/reclaim")?
            .clone();
        serde_json::from_str(&text).ok()
    };
    let record = wait_for(Duration::from_secs(10), "the raw claim's record", || {
        raw_record(&c)
    });
    assert_eq!(record["result"], "NotPossible", "{record}");
    assert!(
        record["error"]
            .as_str()
            .is_some_and(|e| e.contains("block-mode")),
        "{record}"
    );

    // The Namespace's schedule comes due: trimmed with no annotation on the claim.
    std::thread::sleep(Duration::from_millis(600));
    assert!(reclaim_record(&c).is_none(), "trimmed before its schedule");
    let before = fs.write_and_delete();
    set_schedule::<Namespace>(&c, &ns, Some(&daily_in(3)));
    let first = wait_for(Duration::from_secs(15), "the Namespace's trim", || {
        reclaim_record(&c)
    });
    assert_eq!(first["result"], "Succeeded", "{first}");
    fs.assert_reclaimed(before, first["bytes"].as_u64().expect("bytes"));

    // Without it, the CSIDriver's schedule applies.
    let before = fs.write_and_delete();
    set_schedule::<Namespace>(&c, &ns, None);
    set_schedule::<CSIDriver>(&c, "test.csi.headroom.dev", Some(&daily_in(3)));
    let second = wait_for(Duration::from_secs(15), "the CSIDriver's trim", || {
        reclaim_record(&c).filter(|r| r["at"] != first["at"])
    });
    assert_eq!(second["result"], "Succeeded", "{second}");
    fs.assert_reclaimed(before, second["bytes"].as_u64().expect("bytes"));

    // Still said once, recorded once.
    assert_eq!(
        c.events_for("raw")
            .iter()
            .filter(|(r, _, _)| r == "ReclaimNotPossible")
            .count(),
        1
    );
    assert_eq!(raw_record(&c), Some(record));
}
