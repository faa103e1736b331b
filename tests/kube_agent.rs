//! The agent against a real kube-apiserver 1.20 + etcd (tests/support/kube), as its own service
//! account with exactly the project's `rbac/`: admission, validation, field selectors, the status
//! subresource and events.k8s.io are the real server's. The test plays the PV binder, the
//! scheduler and the kubelet + CSI driver (tmpfs remounted bigger, `status.capacity` set).
//! Growth, refusals, opt-in, live policy, dry run. Fleet behaviour (RWX, kills, cordon, restarts)
//! is in `kube_fleet.rs`; faults a server cannot be made to produce come from the fault proxy in
//! front of it (`agent_faults.rs` and others, tests/README.md).

mod support {
    pub mod http;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::json;
use support::kube::cluster::{CNPG_GROUP_POLICY, KubeCluster, POLICY, annotation};
use support::kube::server;
use support::node::{MI, capacity_of, fill, request_of, wait_for};

#[test]
fn threshold_grow_is_accepted_and_waits_for_the_resize() {
    if !server::available("threshold_grow_is_accepted_and_waits_for_the_resize") {
        return;
    }
    let mut c = KubeCluster::new();
    let mount = c.claim("data", &c.fast.clone(), 64, POLICY);
    let _agent = c.agent("500ms", &[]);
    wait_for(Duration::from_secs(20), "the first status", || {
        c.status_field("data", "state")
    });
    c.assert_resize_patches("data", 0);

    // 56Mi of 64Mi is 87.5 % >= 80 %: +16Mi. No resizer yet: the resize stays in flight.
    fill(&mount, 56 * MI);
    c.wait_request("data", 80 * MI);
    std::thread::sleep(Duration::from_secs(3));
    let pvc = c.get("data");
    assert_eq!(request_of(&pvc), 80 * MI, "grown again while in flight");
    assert_eq!(capacity_of(&pvc), 64 * MI);
    c.assert_resize_patches("data", 1);
    assert_eq!(c.history_len("data"), 1);
    c.assert_one_event("data", "Resized", "Normal", "64Mi -> 80Mi");

    // The storage system completes it (tmpfs remounted at 80Mi, status.capacity set).
    let _csi = c.csi(&[("data", mount.clone())], 100);
    c.wait_capacity("data", 80 * MI);
    // 72Mi of 80Mi is 90 %: the next step, 96Mi.
    fill(&mount, 72 * MI);
    c.wait_request("data", 96 * MI);
    c.wait_capacity("data", 96 * MI);
    c.assert_resize_patches("data", 2);
    assert_eq!(c.history_len("data"), 2);
    // Every write carried the resourceVersion precondition and none was refused otherwise.
    for w in c.claim_writes("data") {
        assert!(w.code() == 200 || w.code() == 409, "write refused: {w:?}");
    }
    // Its log, written to a file as a container's is, is plain text: no colour escape codes.
    let log = _agent.log_text();
    assert!(log.contains("agent started"), "{log}");
    assert!(!log.contains('\u{1b}'), "escape codes in the log: {log:?}");
}

#[test]
fn fills_grow_until_budget_then_limit() {
    if !server::available("fills_grow_until_budget_then_limit") {
        return;
    }
    let mut c = KubeCluster::new();
    let policy = [
        ("enabled", "true"),
        ("limit", "100Mi"),
        ("step", "16Mi"),
        ("max-actions-per-day", "2"),
    ];
    let mount = c.claim("data", &c.fast.clone(), 64, &policy);
    let _csi = c.csi(&[("data", mount.clone())], 200);
    let _agent = c.agent("500ms", &[]);
    fill(&mount, 56 * MI);
    c.wait_capacity("data", 80 * MI);
    fill(&mount, 72 * MI);
    c.wait_capacity("data", 96 * MI);
    // 90Mi of 96Mi: growth needed, budget spent.
    fill(&mount, 90 * MI);
    c.wait_blocked("data", "budget_exhausted");
    // A bigger budget (a live policy change) allows one more action, capped at the 100Mi limit.
    c.patch_claim(
        "data",
        json!({"metadata": {"annotations": {"headroom.dev/max-actions-per-day": "5"}}}),
    );
    c.wait_capacity("data", 100 * MI);
    fill(&mount, 95 * MI);
    c.wait_blocked("data", "at_limit");
    assert_eq!(c.history_len("data"), 3);
    c.assert_resize_patches("data", 3);
    c.assert_one_event("data", "BudgetExhausted", "Warning", "");
    c.assert_one_event("data", "AtLimit", "Warning", "");
}

#[test]
fn refusals_say_why_and_never_write_a_size() {
    if !server::available("refusals_say_why_and_never_write_a_size") {
        return;
    }
    let mut c = KubeCluster::new();
    let fast = c.fast.clone();
    let node = c.node.clone();
    let fixed = c.claim("fixed", &c.fixed.clone(), 64, POLICY);
    fill(&fixed, 56 * MI);
    // Two claims whose volumes are directories of one node disk: statfs answers for the disk.
    let disk = c.root.scratch_tmpfs(64 * MI);
    for name in ["shared-a", "shared-b"] {
        let dir = disk.join(name);
        std::fs::create_dir_all(&dir).expect("shared dir");
        c.pvc(name, &fast, 64, POLICY, |_| {});
        let uid = c.pod(&format!("pod-{name}"), &node, name);
        let pv = c.pv_name(name);
        c.root.bind_volume(&uid, &pv, &dir);
    }
    fill(&disk.join("shared-a"), 56 * MI);
    c.pvc("raw", &fast, 64, POLICY, |p| {
        p["spec"]["volumeMode"] = json!("Block");
    });
    let uid = c.pod("pod-raw", &node, "raw");
    let pv = c.pv_name("raw");
    c.root.block_volume(&uid, &pv);
    let mut bad_policy = POLICY.to_vec();
    bad_policy.push(("usage-threshold", "120"));
    let bad = c.claim("bad", &fast, 64, &bad_policy);
    fill(&bad, 56 * MI);

    let _agent = c.agent("500ms", &[]);
    let expected = [
        ("fixed", "not_expandable"),
        ("shared-a", "shared_filesystem"),
        ("shared-b", "shared_filesystem"),
        ("raw", "block_mode"),
        ("bad", "invalid_policy"),
    ];
    for (name, reason) in expected {
        c.wait_blocked(name, reason);
    }
    std::thread::sleep(Duration::from_secs(2));
    for (name, _) in expected {
        c.assert_resize_patches(name, 0);
        assert_eq!(request_of(&c.get(name)), 64 * MI, "{name}'s request");
    }
    c.assert_one_event("fixed", "ResizeBlocked", "Warning", "not_expandable");
    c.assert_one_event("shared-a", "SharedFilesystem", "Warning", "directory");
    c.assert_one_event("shared-b", "SharedFilesystem", "Warning", "directory");
    c.assert_one_event("raw", "ResizeBlocked", "Warning", "block_mode");
    c.assert_one_event("bad", "InvalidPolicy", "Warning", "usage-threshold");
    // The real server's own refusal, for the record: a class without allowVolumeExpansion.
    let api: kube::Api<PersistentVolumeClaim> = kube::Api::namespaced(c.admin.0.clone(), &c.ns);
    let body = json!({"spec": {"resources": {"requests": {"storage": "80Mi"}}}});
    let refused = support::kube::block(api.patch(
        "fixed",
        &Default::default(),
        &kube::api::Patch::Merge(body),
    ));
    assert!(
        matches!(refused, Err(kube::Error::Api(ref e)) if e.code == 403),
        "{refused:?}"
    );
}

#[test]
fn a_claim_that_did_not_opt_in_is_never_written() {
    if !server::available("a_claim_that_did_not_opt_in_is_never_written") {
        return;
    }
    let mut c = KubeCluster::new();
    let quiet = c.claim("quiet", &c.fast.clone(), 64, &[("limit", "200Mi")]);
    let loud = c.claim("loud", &c.fast.clone(), 64, POLICY);
    fill(&quiet, 62 * MI);
    fill(&loud, 8 * MI);
    let port = support::http::free_port();
    let listen = format!("127.0.0.1:{port}");
    let _agent = c.agent("300ms", &["--listen", &listen]);
    // The opted-in neighbour proves scans ran; the quiet one is measured for metrics only.
    wait_for(
        Duration::from_secs(20),
        "the opted-in claim's status",
        || c.status_field("loud", "state"),
    );
    wait_for(Duration::from_secs(10), "the quiet claim's metric", || {
        support::http::claim_metric(port, "headroom_volume_used_bytes", "quiet")
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        c.claim_writes("quiet").len(),
        0,
        "{:?}",
        c.claim_writes("quiet")
    );
    assert!(annotation(&c.get("quiet"), "headroom.dev/status").is_none());
    assert_eq!(
        c.events_for("quiet"),
        vec![],
        "Events about a claim that did not opt in"
    );
}

#[test]
fn storage_class_annotation_change_applies_at_the_next_scan() {
    if !server::available("storage_class_annotation_change_applies_at_the_next_scan") {
        return;
    }
    let mut c = KubeCluster::new();
    let fast = c.fast.clone();
    let threshold =
        |pct: &str| json!({"metadata": {"annotations": {"headroom.dev/usage-threshold": pct}}});
    c.patch_cluster::<StorageClass>(&fast, threshold("95"));
    let mount = c.claim("data", &fast, 64, POLICY);
    let _csi = c.csi(&[("data", mount.clone())], 200);
    // 56Mi of 64Mi is 87.5 %: under the class's 95 %, over the 80 % it will say next.
    fill(&mount, 56 * MI);
    let _agent = c.agent("500ms", &[]);
    wait_for(Duration::from_secs(20), "a status with the fill", || {
        let used: f64 = c.status_field("data", "usedPercent")?.parse().ok()?;
        (used > 85.0).then_some(())
    });
    std::thread::sleep(Duration::from_millis(1500));
    c.assert_resize_patches("data", 0);
    assert_eq!(c.status_field("data", "state").as_deref(), Some("Balanced"));

    c.patch_cluster::<StorageClass>(&fast, threshold("80"));
    c.wait_capacity("data", 80 * MI);
    c.assert_resize_patches("data", 1);
    assert_eq!(c.history_len("data"), 1);
}

#[test]
fn dry_run_decides_but_never_writes() {
    if !server::available("dry_run_decides_but_never_writes") {
        return;
    }
    let mut c = KubeCluster::new();
    let mount = c.claim("data", &c.fast.clone(), 64, POLICY);
    fill(&mount, 60 * MI);
    let port = support::http::free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut agent = c.agent("300ms", &["--dry-run", "--listen", &listen]);
    // The claim was read (the watcher's LIST) and its volume measured and decided.
    wait_for(Duration::from_secs(20), "the claim's metrics", || {
        support::http::claim_metric(port, "headroom_volume_used_bytes", "data")
    });
    assert!(
        c.agent_requests()
            .iter()
            .any(|e| e.resource() == "persistentvolumeclaims" && e.verb == "list"),
        "the agent never read the claim"
    );
    // Several scans over a volume at 94 %: decided (logged "would grow"), never written.
    std::thread::sleep(Duration::from_secs(3));
    let writes: Vec<_> = c
        .agent_requests()
        .into_iter()
        .filter(|e| e.is_write())
        .collect();
    assert!(
        writes
            .iter()
            .all(|e| e.resource() != "persistentvolumeclaims"),
        "dry run wrote a claim: {writes:?}"
    );
    assert_eq!(request_of(&c.get("data")), 64 * MI);
    assert!(
        agent.child.try_wait().expect("wait").is_none(),
        "the agent exited"
    );
}

#[test]
fn new_group_member_is_grown_to_its_peers_size_once() {
    if !server::available("new_group_member_is_grown_to_its_peers_size_once") {
        return;
    }
    // One action a day (CNPG_GROUP_POLICY): the group growth must use it up.
    let labels = |p: &mut serde_json::Value| {
        p["metadata"]["labels"] = json!({"cnpg.io/cluster": "pg", "cnpg.io/pvcRole": "PG_DATA"});
    };
    let mut c = KubeCluster::new();
    let fast = c.fast.clone();
    let node_b = format!("{}-b", c.node);
    c.add_node(&node_b);
    // The first instance, grown long ago, runs on another node: nothing of it is mounted here.
    c.pvc("pg-1", &fast, 80, CNPG_GROUP_POLICY, labels);
    c.pod("pg-1", &node_b, "pg-1");
    // A new replica at the template size, nearly empty.
    c.pvc("pg-2", &fast, 64, CNPG_GROUP_POLICY, labels);
    let uid = c.pod("pg-2", &c.node.clone(), "pg-2");
    let pv = c.pv_name("pg-2");
    let mount = c.root.tmpfs_volume(&uid, &pv, 64 * MI);
    fill(&mount, MI);
    let _csi = c.csi(&[("pg-2", mount.clone())], 200);
    let _agent = c.agent("300ms", &[]);

    c.wait_capacity("pg-2", 80 * MI);
    let history = annotation(&c.get("pg-2"), "headroom.dev/history").expect("history");
    assert!(history.contains("GroupGrow"), "{history}");
    std::thread::sleep(Duration::from_millis(1500));
    c.assert_resize_patches("pg-2", 1);
    c.assert_resize_patches("pg-1", 0);
    assert_eq!(c.history_len("pg-2"), 1);
    // It counted: 70Mi of 80Mi needs growth, and the day's one action is spent.
    fill(&mount, 70 * MI);
    c.wait_blocked("pg-2", "budget_exhausted");
    c.assert_resize_patches("pg-2", 1);
}

/// The agent's `/volumes`: the last full scan's time, and each claim's report by name.
fn volumes(port: u16) -> Option<(serde_json::Value, HashMap<String, serde_json::Value>)> {
    let (code, body) = support::http::get(port, "/volumes")?;
    let all: serde_json::Value = serde_json::from_str(&body).ok().filter(|_| code == 200)?;
    let by_claim = all["volumes"]
        .as_array()?
        .iter()
        .filter_map(|v| Some((v["pvc"].as_str()?.to_string(), v.clone())))
        .collect();
    Some((all["scanned_at"].clone(), by_claim))
}

#[test]
fn a_crossing_between_scans_is_decided_on_alone() {
    if !server::available("a_crossing_between_scans_is_decided_on_alone") {
        return;
    }
    let mut c = KubeCluster::new();
    let fast = c.fast.clone();
    let mount = c.claim("data", &fast, 64, POLICY);
    c.claim("other", &fast, 64, POLICY);
    let port = support::http::free_port();
    let listen = format!("127.0.0.1:{port}");
    // One full scan, at start: everything after it is the fast loop's.
    let _agent = c.agent("1h", &["--listen", &listen]);
    let (scanned, before) = wait_for(Duration::from_secs(20), "both claims reported", || {
        volumes(port).filter(|(_, v)| v.len() == 2)
    });
    fill(&mount, 56 * MI);
    wait_for(Duration::from_secs(10), "the crossing acted on", || {
        (request_of(&c.get("data")) == 80 * MI).then_some(())
    });
    let (scanned_after, after) = wait_for(Duration::from_secs(5), "data's fresh report", || {
        volumes(port).filter(|(_, v)| v["data"]["measured_at"] != before["data"]["measured_at"])
    });
    // No scan of the node ran: the crossed claim's report is new, the other's is the scan's.
    assert_eq!(scanned_after, scanned, "a full scan ran");
    assert!(
        after["data"]["measurement"]["used_bytes"].as_u64() >= Some(56 * MI),
        "{:#}",
        after["data"]
    );
    assert_eq!(after["other"], before["other"]);
}

/// A crossing decided on alone leans on the last scan's finding of which volumes share a device.
/// When the kubelet has since mounted the same device for another claim, the node is scanned
/// again and both are refused as shared, never grown (on the real node in CI, such a claim grew).
#[test]
fn a_device_mounted_for_another_claim_since_the_scan_is_refused_at_the_crossing() {
    if !server::available(
        "a_device_mounted_for_another_claim_since_the_scan_is_refused_at_the_crossing",
    ) {
        return;
    }
    let mut c = KubeCluster::new();
    let fast = c.fast.clone();
    let mount = c.claim("data", &fast, 64, POLICY);
    c.pvc("twin", &fast, 64, POLICY, |_| {});
    let uid = c.pod("pod-twin", &c.node.clone(), "twin");
    let pv = c.pv_name("twin");
    let port = support::http::free_port();
    let listen = format!("127.0.0.1:{port}");
    // One full scan, at start, that sees data alone on its device.
    let _agent = c.agent("1h", &["--listen", &listen]);
    wait_for(Duration::from_secs(20), "data reported", || {
        volumes(port).filter(|(_, v)| v.contains_key("data"))
    });
    c.root.bind_volume(&uid, &pv, &mount);
    fill(&mount, 56 * MI);
    wait_for(Duration::from_secs(10), "data refused as shared", || {
        (c.status_field("data", "blockedReason").as_deref() == Some("shared_filesystem"))
            .then_some(())
    });
    assert_eq!(
        request_of(&c.get("data")),
        64 * MI,
        "a shared filesystem grew"
    );
    assert!(
        annotation(&c.get("data"), "headroom.dev/history").is_none(),
        "{:?}",
        c.get("data").metadata.annotations
    );
}

#[test]
fn a_fill_between_scans_is_acted_on_within_a_second_or_two() {
    if !server::available("a_fill_between_scans_is_acted_on_within_a_second_or_two") {
        return;
    }
    let mut c = KubeCluster::new();
    let mount = c.claim("data", &c.fast.clone(), 64, POLICY);
    // Scans every 30 s; the fast measurement loop (default 1 s, 250 ms near the trigger) sees
    // the fill and wakes the reconcile loop.
    let _agent = c.agent("30s", &[]);
    wait_for(Duration::from_secs(20), "the first status", || {
        c.status_field("data", "state")
    });
    fill(&mount, 56 * MI);
    let filled = std::time::Instant::now();
    wait_for(
        Duration::from_secs(5),
        "a resize long before the next scan",
        || (request_of(&c.get("data")) == 80 * MI).then_some(()),
    );
    eprintln!(
        "grown {:?} after the fill, at a 30 s scan interval",
        filled.elapsed()
    );
    // With the loop off, the same fill waits for the next scan.
    let mut c = KubeCluster::new();
    let mount = c.claim("data", &c.fast.clone(), 64, POLICY);
    let _agent = c.agent("30s", &["--measure-interval", "0s"]);
    wait_for(Duration::from_secs(20), "the first status", || {
        c.status_field("data", "state")
    });
    fill(&mount, 56 * MI);
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        request_of(&c.get("data")),
        64 * MI,
        "grown without a scan or the fast loop"
    );
}

/// A claim past its line whose grow a drain holds is still watched by the fast loop, for the
/// emergency line that lifts the hold: a fill past it is grown by the loop's wake, before the
/// next scan (one runs at start; the interval is a minute), not up to an interval later.
#[test]
fn a_claim_held_by_a_drain_is_grown_at_the_emergency_line_before_the_next_scan() {
    if !server::available(
        "a_claim_held_by_a_drain_is_grown_at_the_emergency_line_before_the_next_scan",
    ) {
        return;
    }
    let mut c = KubeCluster::new();
    let mount = c.claim("data", &c.fast.clone(), 64, POLICY);
    let node = c.node.clone();
    c.patch_node(&node, json!({"spec": {"unschedulable": true}}));
    // 56Mi of 64Mi: 87.5 %, over the 80 % threshold, under the 95 % emergency line.
    fill(&mount, 56 * MI);
    let port = support::http::free_port();
    let listen = format!("127.0.0.1:{port}");
    let _agent = c.agent("60s", &["--listen", &listen]);
    c.wait_blocked("data", "node_draining");
    let (scanned, _) = wait_for(Duration::from_secs(20), "data reported", || {
        volumes(port).filter(|(_, v)| v.contains_key("data"))
    });
    // 62Mi of 64Mi: 96.9 %, past the emergency line: the drain no longer holds the grow.
    fill(&mount, 62 * MI);
    c.wait_request("data", 80 * MI);
    let (scanned_after, after) =
        wait_for(Duration::from_secs(5), "data's report", || volumes(port));
    // Decided on by the fast loop's wake: no scan of the node ran since the first.
    assert_eq!(
        scanned_after, scanned,
        "a full scan ran: {:#}",
        after["data"]
    );
    c.assert_resize_patches("data", 1);
}

/// A claim past its line whose grow is held by its modification interval is grown when the
/// interval ends, by the fast loop's wake at that time (`Decision::held_until`): `/volumes`'
/// `scanned_at` unchanged says no full scan ran (`--interval 60s`), whatever its numbers did.
#[test]
fn a_claim_held_by_its_modification_interval_is_grown_when_it_ends_before_the_next_scan() {
    if !server::available(
        "a_claim_held_by_its_modification_interval_is_grown_when_it_ends_before_the_next_scan",
    ) {
        return;
    }
    let mut c = KubeCluster::new();
    // Steps of 16Mi exactly (not widened to last the interval), one grow per 20 s.
    let policy = [
        POLICY,
        &[
            ("modification-interval", "20s"),
            ("min-step", "1Mi"),
            ("max-step", "16Mi"),
        ],
    ]
    .concat();
    let mount = c.claim("data", &c.fast.clone(), 64, &policy);
    let _csi = c.csi(&[("data", mount.clone())], 100);
    let port = support::http::free_port();
    let listen = format!("127.0.0.1:{port}");
    let _agent = c.agent("60s", &["--listen", &listen]);
    let (scanned, _) = wait_for(Duration::from_secs(20), "data reported", || {
        volumes(port).filter(|(_, v)| v.contains_key("data"))
    });
    // 87.5 %: grown by the fast loop, and the resize lands.
    fill(&mount, 56 * MI);
    c.wait_capacity("data", 80 * MI);
    // 90 % of 80Mi, inside the interval: held.
    fill(&mount, 72 * MI);
    c.wait_blocked("data", "modification_interval");
    c.assert_resize_patches("data", 1);
    // The interval ends 20 s after the first grow: grown then, before the next scan.
    wait_for(
        Duration::from_secs(40),
        "the grow at the interval's end",
        || (request_of(&c.get("data")) >= 96 * MI).then_some(()),
    );
    let (scanned_after, after) =
        wait_for(Duration::from_secs(5), "data's report", || volumes(port));
    assert_eq!(
        scanned_after, scanned,
        "a full scan ran: {:#}",
        after["data"]
    );
    c.assert_resize_patches("data", 2);
}
