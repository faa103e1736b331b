//! Offline expansion (`offlineExpansion: evict`, issue 40) on the real node: the test CSI
//! driver's offline mode (tests/support/realnode/csi/main.go) refuses NodeExpandVolume while the
//! volume is in use and grows the filesystem when it is published again, so a claim the test's
//! resizer grew keeps `FileSystemResizePending` until its pod restarts. headroom is installed with
//! `overlays/offline-expansion/`'s eviction grant and `--resize-timeout` 30s; the StatefulSet
//! controller recreates an evicted pod and the kubelet mounts the volume again. The figures are
//! printed (`measured:`), not asserted; BENCHMARKS.md quotes them.

mod support {
    pub mod realnode;
}

use std::time::{Duration, Instant};

use serde_json::Value;
use support::realnode::observe::*;
use support::realnode::offline::*;
use support::realnode::scenario::*;
use support::realnode::witness::witness;
use support::realnode::{Node, wait_for_cmd};

fn env(test: &str) -> Option<&'static Installed> {
    installed_by(test, install_offline)
}

/// When the test's resizer (the controller half) had grown `v`'s volume, if it has.
fn controller_done(env: &Installed, v: &Vol) -> Option<Instant> {
    let log = env._resizer.log.lock().ok()?;
    log.get(&v.pv)?.expanded.first().map(|e| e.1)
}

/// Fills the claim as in tests/real_node.rs: a scan sees it near its line (78 %), then the
/// crossing write (85 %) starts the clock.
fn cross(node: &Node, v: &Vol) -> Instant {
    let (_, ip, _) = agent_pod(node, Duration::from_secs(60));
    fill_to(&v.mount(), 78, "fill-near");
    reported(&ip, v, Duration::from_secs(60));
    wait_for_cmd(
        Duration::from_secs(60),
        "a scan of the nearly full claim",
        || {
            let r = reported_once(&ip, v)?;
            let used = r["measurement"]["used_bytes"].as_u64()?;
            let avail = r["measurement"]["available_bytes"].as_u64()?;
            (used * 100 / (used + avail) >= 75).then_some(())
        },
    );
    let crossed = Instant::now();
    fill_to(&v.mount(), 85, "fill");
    crossed
}

/// The last history entry, once landed.
fn landed(node: &Node, v: &Vol, within: Duration) -> Value {
    wait_for_cmd(within, &format!("{}'s resize landed", v.claim), || {
        let last = history(&claim_json(node, v)).last()?.clone();
        (!last["landed"].is_null()).then_some(last)
    })
}

#[test]
fn a_statefulset_pod_is_evicted_in_the_window_and_its_filesystem_grows_at_the_remount() {
    let Some(env) = env("a_statefulset_pod_is_evicted_in_the_window") else {
        return;
    };
    let node = &*env.node;
    let ns = "rn-off-sts";
    let _witness = witness(node, &[ns]);
    namespace(node, ns);
    offline_claim(node, ns, "data-web-0", &evicting(""));
    statefulset(node, ns, "web", "data-web-0", true, "");
    let uid = ready_pod(node, ns, "web", None, Duration::from_secs(120));
    let v = vol(ns, "data-web-0", &uid);
    let (size0, _) = statfs(&v.mount());

    let crossed = cross(node, &v);
    let patched = wait_patched(node, &v, Duration::from_secs(60));
    // PodEvicted is posted only for a claim awaiting its remount.
    let held = wait_blocked_or(
        node,
        &v,
        "awaiting_remount",
        "PodEvicted",
        Duration::from_secs(120),
    );
    // Offline: nothing grows the filesystem while the pod runs. Read before the pod: once it is
    // evicted, its replacement's publish may grow the filesystem before the old mount is gone.
    let evicted = wait_for_cmd(Duration::from_secs(60), "web-0 evicted", || {
        let size = nix::sys::statvfs::statvfs(&v.mount())
            .ok()
            .map(|s| s.blocks() * s.fragment_size());
        match sts_pod(node, ns, "web") {
            Some((now, _, false)) if now == uid => {
                assert_eq!(size, Some(size0), "grown while in use");
                None
            }
            _ => Some(Instant::now()),
        }
    });
    let back = ready_pod(node, ns, "web", Some(&uid), Duration::from_secs(120));
    let restarted = Instant::now();
    let v2 = vol(ns, "data-web-0", &back);
    let grown = wait_larger(&v2, size0, Duration::from_secs(60));
    // Grown by the driver at the publish, not by a NodeExpandVolume on the volume in use.
    let csi = node.log("headroom-csi");
    assert!(
        csi.contains(&format!(
            "NodePublishVolume {}-data-web-0 offline: filesystem grown",
            ns
        )),
        "{csi}"
    );
    let entry = landed(node, &v2, Duration::from_secs(120));
    let landed_at = Instant::now();
    assert_eq!(entry["result"], "Succeeded", "{entry}");
    assert!(
        entry["evicted"].is_string(),
        "no eviction recorded: {entry}"
    );
    // Nothing more: one resize, one eviction, the recreated pod left alone.
    std::thread::sleep(Duration::from_secs(20));
    assert_eq!(history(&claim_json(node, &v2)).len(), 1);
    assert_eq!(
        sts_pod(node, ns, "web").map(|p| p.0),
        Some(back.clone()),
        "evicted again"
    );
    let said = events(node, ns, "data-web-0", "PodEvicted");
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("web-0"), "{said:?}");
    let controller = controller_done(env, &v).expect("the resizer's record");
    eprintln!(
        "measured: offline expansion, seconds after the crossing write: PATCH {:.1}, controller done {:.1}, awaiting_remount {:.1}, evicted {:.1}, pod Ready again {:.1}, filesystem larger {:.1}, landed seen {:.1} (resize-timeout {RESIZE_TIMEOUT})",
        secs(crossed, patched),
        secs(crossed, controller),
        secs(crossed, held),
        secs(crossed, evicted),
        secs(crossed, restarted),
        secs(crossed, grown),
        secs(crossed, landed_at),
    );
}

#[test]
fn a_budget_allowing_no_disruption_blocks_the_eviction_and_is_reported_once() {
    let Some(env) = env("a_budget_allowing_no_disruption_blocks_the_eviction") else {
        return;
    };
    let node = &*env.node;
    let ns = "rn-off-pdb";
    let _witness = witness(node, &[ns]);
    namespace(node, ns);
    offline_claim(node, ns, "data-db-0", &evicting(""));
    statefulset(node, ns, "db", "data-db-0", true, "");
    node.apply(&format!(
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: db\n  namespace: {ns}\nspec:\n  maxUnavailable: 0\n  selector:\n    matchLabels: {{app: db}}\n"
    ));
    // Ready, so that the budget counts it as healthy (an unready pod is not what this test is about).
    let uid = ready_pod(node, ns, "db", None, Duration::from_secs(120));
    wait_for_cmd(
        Duration::from_secs(60),
        "the disruption controller's status",
        || {
            let s = node.get_json(&["-n", ns, "pdb.v1.policy", "db"])["status"].clone();
            (s["currentHealthy"] == 1 && s["disruptionsAllowed"] == 0).then_some(())
        },
    );
    let v = vol(ns, "data-db-0", &uid);
    let (size0, _) = statfs(&v.mount());

    let crossed = cross(node, &v);
    wait_patched(node, &v, Duration::from_secs(60));
    wait_blocked(node, &v, "awaiting_remount", Duration::from_secs(120));
    let (refused, r) = wait_for_cmd(Duration::from_secs(60), "the refusal", || {
        let r = restart(&claim_json(node, &v)).filter(|r| r["restart"] == "refused")?;
        Some((Instant::now(), r))
    });
    assert_eq!(r["count"], 1, "{r}");
    // The kubelet's own try on the volume in use (its pod sync, about a minute after the resize)
    // is refused by the driver, and the claim stays as it was.
    let kubelet_refused = wait_for_cmd(
        Duration::from_secs(120),
        "the driver refusing the kubelet's NodeExpandVolume",
        || {
            node.log("headroom-csi")
                .contains(&format!("NodeExpandVolume {ns}-data-db-0 offline: refused"))
                .then(Instant::now)
        },
    );
    let c = claim_json(node, &v);
    assert_eq!(
        restart(&c).map(|r| r["count"].clone()),
        Some(1.into()),
        "{c}"
    );
    assert_eq!(sts_pod(node, ns, "db").map(|p| p.0), Some(uid), "evicted");
    assert_eq!(statfs(&v.mount()).0, size0, "grown while in use");
    let said = events(node, ns, "data-db-0", "EvictionRefused");
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("disruption budget"), "{said:?}");
    assert!(events(node, ns, "data-db-0", "PodEvicted").is_empty());
    let h = history(&c);
    assert!(h.len() == 1 && h[0]["evicted"].is_null(), "{h:?}");
    eprintln!(
        "measured: offline expansion under a maxUnavailable 0 budget, seconds after the crossing write: eviction refused (429) {:.1}, the kubelet's NodeExpandVolume refused by the driver {:.1}; 0 evictions and 1 EvictionRefused in {:.0} s",
        secs(crossed, refused),
        secs(crossed, kubelet_refused),
        secs(crossed, Instant::now()),
    );
}

#[test]
fn a_cloudnativepg_pair_restarts_its_replica_before_its_primary() {
    let Some(env) = env("a_cloudnativepg_pair_restarts_its_replica_before_its_primary") else {
        return;
    };
    let node = &*env.node;
    let ns = "rn-off-cnpg";
    let _witness = witness(node, &[ns]);
    namespace(node, ns);
    let mut vols = Vec::new();
    for (name, role) in [("pg-1", "primary"), ("pg-2", "replica")] {
        let meta = evicting(&format!(
            "    headroom.dev/wal-safety-acknowledge-wal-risk: \"true\"\n  labels:\n    cnpg.io/cluster: pg\n    cnpg.io/instanceName: {name}\n    cnpg.io/pvcRole: PG_DATA\n"
        ));
        offline_claim(node, ns, name, &meta);
        // CloudNativePG runs bare pods and recreates them itself; a StatefulSet of one plays it.
        let labels = format!(
            ", cnpg.io/cluster: pg, cnpg.io/instanceName: {name}, cnpg.io/instanceRole: {role}"
        );
        statefulset(node, ns, name, name, false, &labels);
        let uid = ready_pod(node, ns, name, None, Duration::from_secs(120));
        vols.push(vol(ns, name, &uid));
    }
    let size0 = statfs(&vols[0].mount()).0;
    let crossed = Instant::now();
    for v in &vols {
        fill_to(&v.mount(), 85, "fill");
    }
    for v in &vols {
        wait_patched(node, v, Duration::from_secs(60));
    }
    let (primary, replica) = (&vols[0], &vols[1]);
    let replica_out = wait_evicted(node, ns, "pg-2", &replica.pod_uid, Duration::from_secs(120));
    let waiting = restart(&claim_json(node, primary));
    assert_eq!(
        waiting.as_ref().map(|r| r["restart"].clone()),
        Some("peer_first".into()),
        "{waiting:?}"
    );
    let back = ready_pod(
        node,
        ns,
        "pg-2",
        Some(&replica.pod_uid),
        Duration::from_secs(120),
    );
    let replica2 = vol(ns, "pg-2", &back);
    let replica_grown = wait_larger(&replica2, size0, Duration::from_secs(60));
    // The primary is still the pod it was until the replica's resize is seen landed.
    let replica_landed = landed(node, &replica2, Duration::from_secs(120));
    assert!(replica_landed["evicted"].is_string(), "{replica_landed}");
    let primary_out = wait_evicted(node, ns, "pg-1", &primary.pod_uid, Duration::from_secs(120));
    let back = ready_pod(
        node,
        ns,
        "pg-1",
        Some(&primary.pod_uid),
        Duration::from_secs(120),
    );
    let primary2 = vol(ns, "pg-1", &back);
    let primary_grown = wait_larger(&primary2, size0, Duration::from_secs(60));
    let primary_landed = landed(node, &primary2, Duration::from_secs(120));
    let ts = |e: &Value, k: &str| -> jiff::Timestamp {
        e[k].as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{k} of {e}"))
    };
    assert!(
        ts(&primary_landed, "evicted") >= ts(&replica_landed, "landed"),
        "the primary went before the replica's resize landed: replica {replica_landed}, primary {primary_landed}"
    );
    for name in ["pg-1", "pg-2"] {
        assert_eq!(events(node, ns, name, "PodEvicted").len(), 1, "{name}");
    }
    eprintln!(
        "measured: offline expansion of a CloudNativePG pair, seconds after both crossings: replica evicted {:.1}, replica's filesystem larger {:.1}, primary evicted {:.1}, primary's filesystem larger {:.1}",
        secs(crossed, replica_out),
        secs(crossed, replica_grown),
        secs(crossed, primary_out),
        secs(crossed, primary_grown),
    );
}
