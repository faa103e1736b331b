//! The agent end to end: a fake API server, real tmpfs volumes under a kubelet-like root, a test
//! "CSI driver" that carries out resizes, and `headroom agent` as a child process.
//! Growth, blocks, live policy. Races, kills and API faults are in `agent_faults.rs`.

#[path = "support/fake_api/mod.rs"]
mod fake_api;
mod support {
    pub mod cluster;
    pub mod node;
    pub mod root;
}

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use support::cluster::{Cluster, NS, annotate, history_len, status_field};
use support::node::{CsiDriver, MI, capacity_of, fill, request_of, wait_for};

use support::root::needs_root;

use support::cluster::ENABLED;

#[tokio::test(flavor = "multi_thread")]
async fn fills_grow_until_budget_then_limit() {
    if !needs_root("fills_grow_until_budget_then_limit") {
        return;
    }
    let mut c = Cluster::new().await;
    let mount = c.claim("data", "fast", 64, ENABLED);
    let _csi = CsiDriver::start(
        c.fake.clone(),
        BTreeMap::from([(("db".into(), "data".into()), vec![mount.clone()])]),
        Duration::from_millis(300),
    );
    let _agent = c.agent("1s");
    // Balanced first: the agent writes a status, no resize.
    wait_for(Duration::from_secs(15), "first status", || {
        status_field(&c.get("data"), "state")
    });
    assert_eq!(request_of(&c.get("data")), 64 * MI);

    // 56Mi of 64Mi is 87.5% >= 80%: +16Mi -> 80Mi, within two intervals.
    fill(&mount, 56 * MI);
    let pvc = wait_for(Duration::from_secs(3), "the first resize patch", || {
        let p = c.get("data");
        (request_of(&p) > 64 * MI).then_some(p)
    });
    assert_eq!(request_of(&pvc), 80 * MI);
    assert_eq!(history_len(&pvc), 1);
    wait_for(Duration::from_secs(5), "the filesystem to grow", || {
        (nix::sys::statvfs::statvfs(&mount).ok()?.blocks() * 4096 >= 80 * MI).then_some(())
    });

    // 72Mi of 80Mi is 90%: the second and last action of the budget -> 96Mi.
    fill(&mount, 72 * MI);
    wait_for(Duration::from_secs(5), "the second resize", || {
        (capacity_of(&c.get("data")) == 96 * MI).then_some(())
    });
    // 90Mi of 96Mi: growth needed, budget spent.
    fill(&mount, 90 * MI);
    wait_for(Duration::from_secs(5), "budget_exhausted", || {
        (status_field(&c.get("data"), "blockedReason").as_deref() == Some("budget_exhausted"))
            .then_some(())
    });
    // A bigger budget (a live policy change) allows one more action, capped at the 100Mi limit.
    c.fake
        .update_with::<PersistentVolumeClaim>("db", "data", |p| {
            annotate(p, &[("max-actions-per-day", "5")])
        });
    wait_for(Duration::from_secs(5), "growth to the limit", || {
        (capacity_of(&c.get("data")) == 100 * MI).then_some(())
    });
    fill(&mount, 95 * MI);
    wait_for(Duration::from_secs(5), "at_limit", || {
        (status_field(&c.get("data"), "blockedReason").as_deref() == Some("at_limit")).then_some(())
    });
    let pvc = c.get("data");
    assert_eq!(history_len(&pvc), 3);
    assert_eq!(c.resize_patches("data"), 3);
    let events: Vec<k8s_openapi::api::events::v1::Event> = c.fake.list();
    let reasons: Vec<&str> = events.iter().filter_map(|e| e.reason.as_deref()).collect();
    for r in ["Resized", "BudgetExhausted", "AtLimit"] {
        assert!(reasons.contains(&r), "missing Event {r} in {reasons:?}");
    }
}

/// `ENABLED` plus `extra` (later keys win).
fn enabled_with<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut all: Vec<(&str, &str)> = ENABLED.to_vec();
    all.extend_from_slice(extra);
    all
}

#[tokio::test(flavor = "multi_thread")]
async fn blocked_volumes_are_never_resized_and_say_why() {
    if !needs_root("blocked_volumes_are_never_resized_and_say_why") {
        return;
    }
    let mut c = Cluster::new().await;
    // Two claims whose volumes are directories of one node disk: statfs answers for the disk.
    let disk = c.root.scratch_tmpfs(64 * MI);
    for name in ["shared-a", "shared-b"] {
        let dir = disk.join(name);
        std::fs::create_dir_all(&dir).expect("shared dir");
        c.pvc(name, "fast", 64, ENABLED, |_| {});
        let uid = c.pod(&format!("pod-{name}"), support::cluster::NODE, name);
        c.root.bind_volume(&uid, &format!("pv-{name}"), &dir);
    }
    fill(&disk.join("shared-a"), 56 * MI);
    let fixed = c.claim("fixed", "fixed", 64, ENABLED);
    fill(&fixed, 56 * MI);
    c.pvc("raw", "fast", 64, ENABLED, |p| {
        p.spec.as_mut().expect("spec").volume_mode = Some("Block".into());
    });
    let uid = c.pod("pod-raw", support::cluster::NODE, "raw");
    c.root.block_volume(&uid, "pv-raw");
    let bad = c.claim(
        "bad",
        "fast",
        64,
        &enabled_with(&[("usage-threshold", "120")]),
    );
    fill(&bad, 56 * MI);

    let _agent = c.agent("500ms");
    let expected = [
        ("shared-a", "shared_filesystem"),
        ("shared-b", "shared_filesystem"),
        ("fixed", "not_expandable"),
        ("raw", "block_mode"),
        ("bad", "invalid_policy"),
    ];
    for (name, reason) in expected {
        let got = wait_for(Duration::from_secs(15), &format!("{name}'s status"), || {
            status_field(&c.get(name), "blockedReason")
        });
        assert_eq!(got, reason, "blockedReason of {name}");
    }
    // A few more scans: still no resize, and each Event said once.
    std::thread::sleep(Duration::from_millis(1500));
    for (name, _) in expected {
        assert_eq!(c.resize_patches(name), 0, "{name} was resized");
        assert_eq!(request_of(&c.get(name)), 64 * MI, "{name}'s request");
    }
    let warning = |name: &str, reason: &str, note_has: &str| {
        let events = c.events_for(name);
        let matching: Vec<_> = events
            .iter()
            .filter(|(r, t, note)| r == reason && t == "Warning" && note.contains(note_has))
            .collect();
        assert_eq!(
            matching.len(),
            1,
            "{name}: want one Warning {reason} naming {note_has:?}, got {events:?}"
        );
    };
    warning("shared-a", "SharedFilesystem", "directory");
    warning("shared-b", "SharedFilesystem", "directory");
    warning("fixed", "ResizeBlocked", "not_expandable");
    warning("raw", "ResizeBlocked", "block_mode");
    warning("bad", "InvalidPolicy", "usage-threshold");
}

#[tokio::test(flavor = "multi_thread")]
async fn storage_class_annotation_change_applies_at_the_next_scan() {
    if !needs_root("storage_class_annotation_change_applies_at_the_next_scan") {
        return;
    }
    let set_class_threshold = |c: &Cluster, pct: &str| {
        c.fake.update_with::<StorageClass>("", "fast", |sc| {
            sc.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert("headroom.dev/usage-threshold".into(), pct.into());
        });
    };
    let mut c = Cluster::new().await;
    set_class_threshold(&c, "95");
    let mount = c.claim("data", "fast", 64, ENABLED);
    let _csi = CsiDriver::start(
        c.fake.clone(),
        BTreeMap::from([((NS.into(), "data".into()), vec![mount.clone()])]),
        Duration::from_millis(200),
    );
    // 56Mi of 64Mi is 87.5%: under the class's 95%, over the 80% it will say next.
    fill(&mount, 56 * MI);
    let _agent = c.agent("500ms");
    wait_for(Duration::from_secs(15), "a status with the fill", || {
        let used: f64 = status_field(&c.get("data"), "usedPercent")?.parse().ok()?;
        (used > 85.0).then_some(())
    });
    std::thread::sleep(Duration::from_millis(1500));
    let pvc = c.get("data");
    assert_eq!(c.resize_patches("data"), 0);
    assert_eq!(request_of(&pvc), 64 * MI);
    assert_eq!(status_field(&pvc, "state").as_deref(), Some("Balanced"));

    set_class_threshold(&c, "80");
    let pvc = wait_for(
        Duration::from_secs(3),
        "growth after the class change",
        || {
            let p = c.get("data");
            (request_of(&p) > 64 * MI).then_some(p)
        },
    );
    assert_eq!(request_of(&pvc), 80 * MI);
    assert_eq!(history_len(&pvc), 1);
    wait_for(Duration::from_secs(5), "the resize to finish", || {
        (capacity_of(&c.get("data")) == 80 * MI).then_some(())
    });
    assert_eq!(c.resize_patches("data"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn dry_run_decides_but_never_writes() {
    if !needs_root("dry_run_decides_but_never_writes") {
        return;
    }
    let mut c = Cluster::new().await;
    let mount = c.claim("data", "fast", 64, ENABLED);
    fill(&mount, 60 * MI);
    let mut agent = c.agent_on(
        support::cluster::NODE,
        c.root.path(),
        "300ms",
        &["--dry-run"],
    );
    // Several scans over a volume at 94%: decided (the agent logs "would grow"), never patched.
    std::thread::sleep(Duration::from_secs(3));
    let writes: Vec<_> = c
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH" || r.method == "PUT")
        .collect();
    let claim_writes = writes
        .iter()
        .filter(|r| r.path.contains("persistentvolumeclaims"))
        .count();
    assert_eq!(claim_writes, 0, "dry run wrote a claim: {writes:?}");
    assert!(
        c.fake
            .requests()
            .iter()
            .any(|r| r.path.contains("persistentvolumeclaims") && r.is_watch()),
        "the agent never watched the claim"
    );
    assert_eq!(request_of(&c.get("data")), 64 * MI);
    assert!(
        agent.child.try_wait().expect("wait").is_none(),
        "the agent exited"
    );
}
