//! Logical volumes (issue 25) against a real kube-apiserver 1.20 + etcd: a three-instance
//! CloudNativePG-like cluster on three nodes, one agent each, shares one budget and one history.
//! The primary's fill is grown as one logical action that every member follows, and a
//! replacement member joins at the cluster's size but does not grow past it while the cluster's
//! budget is spent. The audit log is the record of every write.

mod support {
    pub mod http;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::time::Duration;

use serde_json::{Value, json};
use support::kube::cluster::{CNPG_GROUP_POLICY, KubeCluster, annotation};
use support::kube::server;
use support::node::{KubeletRoot, MI, capacity_of, fill, request_of, wait_for};

/// One action a day, so the first logical action spends the cluster's budget.
const POLICY: &[(&str, &str)] = CNPG_GROUP_POLICY;

fn cnpg(instance: &str) -> impl FnOnce(&mut Value) {
    let labels = json!({
        "cnpg.io/cluster": "pg", "cnpg.io/pvcRole": "PG_DATA", "cnpg.io/instanceName": instance,
    });
    move |p: &mut Value| p["metadata"]["labels"] = labels
}

/// Claim `name` of the cluster, mounted by its instance's pod on `node` as a tmpfs in `root`.
fn instance(c: &KubeCluster, root: &mut KubeletRoot, node: &str, name: &str) -> std::path::PathBuf {
    c.pvc(name, &c.fast.clone(), 64, POLICY, cnpg(name));
    let uid = c.pod(name, node, name);
    root.tmpfs_volume(&uid, &c.pv_name(name), 64 * MI)
}

fn history(c: &KubeCluster, name: &str) -> Vec<Value> {
    annotation(&c.get(name), "headroom.dev/history")
        .map(|h| serde_json::from_str(&h).expect("history is JSON"))
        .unwrap_or_default()
}

/// The logical action each entry of `name`'s history names.
fn actions(c: &KubeCluster, name: &str) -> Vec<Option<String>> {
    history(c, name)
        .iter()
        .map(|e| e["action"].as_str().map(str::to_string))
        .collect()
}

/// Waits for `name`'s resize to `bytes`, saying what its status says if it does not come.
fn wait_capacity(c: &KubeCluster, name: &str, bytes: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while capacity_of(&c.get(name)) != bytes {
        assert!(
            std::time::Instant::now() < deadline,
            "{name} not resized to {bytes}: status {:?}, history {:?}",
            annotation(&c.get(name), "headroom.dev/status"),
            history(c, name)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A field of the logical volume in `name`'s status.
fn logical_field(c: &KubeCluster, name: &str, field: &str) -> Option<Value> {
    let text = c.status_field(name, "logicalVolume")?;
    let v: Value = serde_json::from_str(&text).ok()?;
    v.get(field).cloned()
}

#[test]
fn a_cluster_grows_as_one_logical_action_and_a_replacement_never_outgrows_it() {
    let test = "a_cluster_grows_as_one_logical_action_and_a_replacement_never_outgrows_it";
    if !server::available(test) {
        return;
    }
    let c = KubeCluster::new();
    let (node_b, node_c) = (format!("{}-b", c.node), format!("{}-c", c.node));
    c.add_node(&node_b);
    c.add_node(&node_c);
    let (mut root_b, mut root_c) = (KubeletRoot::new(), KubeletRoot::new());
    let node_a = c.node.clone();
    let mut root_a = KubeletRoot::new();
    let primary = instance(&c, &mut root_a, &node_a, "pg-1");
    let replica_b = instance(&c, &mut root_b, &node_b, "pg-2");
    let replica_c = instance(&c, &mut root_c, &node_c, "pg-3");
    for m in [&replica_b, &replica_c] {
        fill(m, MI);
    }
    let _csi = c.csi(
        &[
            ("pg-1", primary.clone()),
            ("pg-2", replica_b.clone()),
            ("pg-3", replica_c.clone()),
        ],
        200,
    );
    let _a = c.agent_on(&node_a, root_a.path(), "300ms", &[]);
    let _b = c.agent_on(&node_b, root_b.path(), "300ms", &[]);
    let _c = c.agent_on(&node_c, root_c.path(), "300ms", &[]);
    for name in ["pg-1", "pg-2", "pg-3"] {
        wait_for(Duration::from_secs(20), "the first status", || {
            logical_field(&c, name, "members").filter(|m| m == &json!(3))
        });
    }

    // The primary fills: 56Mi of 64Mi is 87.5 %.
    fill(&primary, 56 * MI);
    for name in ["pg-1", "pg-2", "pg-3"] {
        c.wait_capacity(name, 80 * MI);
    }
    let first = actions(&c, "pg-1");
    assert_eq!(first.len(), 1, "{:?}", history(&c, "pg-1"));
    let id = first[0]
        .clone()
        .expect("the primary's entry names its action");
    for name in ["pg-2", "pg-3"] {
        assert_eq!(actions(&c, name), [Some(id.clone())], "{name}");
        assert_eq!(history(&c, name)[0]["kind"], "GroupGrow", "{name}");
    }
    // Every member counts one action: the shared budget, not one slot per member.
    for name in ["pg-1", "pg-2", "pg-3"] {
        wait_for(
            Duration::from_secs(10),
            &format!("{name}'s status to count one action"),
            || logical_field(&c, name, "actionsLast24h").filter(|n| n == &json!(1)),
        );
        let budget = c.status_field(name, "budget").expect("budget");
        assert!(budget.contains("\"actionsLast24h\":1"), "{name}: {budget}");
        c.assert_resize_patches(name, 1);
    }

    // A replacement instance: a new claim, no history, the template's 64Mi.
    let mut root_d = KubeletRoot::new();
    let node_d = format!("{}-d", c.node);
    c.add_node(&node_d);
    let replacement = instance(&c, &mut root_d, &node_d, "pg-4");
    fill(&replacement, MI);
    let _csi_d = c.csi(&[("pg-4", replacement.clone())], 200);
    let _d = c.agent_on(&node_d, root_d.path(), "300ms", &[]);
    // Raised to the cluster's size although the day's one action is spent: the raise is part of
    // that action.
    c.wait_capacity("pg-4", 80 * MI);
    assert_eq!(actions(&c, "pg-4"), [Some(id.clone())]);
    // Filling, it needs growth of its own, and the cluster's budget is spent.
    fill(&replacement, 70 * MI);
    c.wait_blocked("pg-4", "budget_exhausted");
    std::thread::sleep(Duration::from_secs(2));
    for name in ["pg-1", "pg-2", "pg-3", "pg-4"] {
        assert_eq!(request_of(&c.get(name)), 80 * MI, "{name}");
        c.assert_resize_patches(name, 1);
        assert_eq!(history(&c, name).len(), 1, "{name}");
    }

    // With max-actions-per-day 1 every member's own GroupGrow would have spent its own slot
    // too; what only a shared budget gives shows with room for two: the primary's second
    // action, followed by all, spends the cluster's day, and a member that arrives after it
    // joins at the size with a fresh history and still may not grow on its own.
    // The replacement no longer needs growth of its own: with room in the budget it would
    // otherwise take the slot at the moment the primary does (two members deciding at once each
    // spend one; see README, Logical volumes).
    fill(&replacement, MI);
    wait_for(Duration::from_secs(20), "pg-4 to need nothing", || {
        (c.status_field("pg-4", "state").as_deref() == Some("Balanced")).then_some(())
    });
    let two = json!({"metadata": {"annotations": {"headroom.dev/max-actions-per-day": "2"}}});
    for name in ["pg-1", "pg-2", "pg-3", "pg-4"] {
        c.patch_claim(name, two.clone());
    }
    fill(&primary, 66 * MI);
    for name in ["pg-1", "pg-2", "pg-3", "pg-4"] {
        wait_capacity(&c, name, 96 * MI);
    }
    let second = actions(&c, "pg-1")[1]
        .clone()
        .expect("the second action's id");
    assert_ne!(second, id);
    for name in ["pg-2", "pg-3", "pg-4"] {
        assert_eq!(actions(&c, name), [Some(id.clone()), Some(second.clone())]);
    }
    let late = instance(&c, &mut root_d, &node_d, "pg-5");
    c.patch_claim("pg-5", two);
    fill(&late, MI);
    let _csi_late = c.csi(&[("pg-5", late.clone())], 200);
    c.wait_capacity("pg-5", 96 * MI);
    assert_eq!(actions(&c, "pg-5"), [Some(second.clone())]);
    // 80Mi of 96Mi needs growth; its own history holds one entry of two allowed, the cluster's
    // day is spent.
    fill(&late, 80 * MI);
    c.wait_blocked("pg-5", "budget_exhausted");
    std::thread::sleep(Duration::from_secs(2));
    for name in ["pg-1", "pg-2", "pg-3", "pg-4", "pg-5"] {
        assert_eq!(request_of(&c.get(name)), 96 * MI, "{name}");
        wait_for(
            Duration::from_secs(10),
            &format!("{name}'s status to count two actions"),
            || logical_field(&c, name, "actionsLast24h").filter(|n| n == &json!(2)),
        );
    }
    c.assert_resize_patches("pg-5", 1);
    // `headroom status` lists the logical volume: its five members at their size and node, and
    // the two actions of the day.
    let text = c.headroom_status(&["-n", &c.ns]);
    let line = text
        .lines()
        .find(|l| l.contains("cnpg/pg/data"))
        .unwrap_or_else(|| panic!("no logical volume in:\n{text}"));
    assert!(line.contains(&format!("pg-1 96Mi@{node_a}")), "{line}");
    assert!(line.contains(&format!("pg-5 96Mi@{node_d}")), "{line}");
    let after = line.split("pg-5").nth(1).expect("after the members");
    let numbers: Vec<&str> = after.split_whitespace().skip(1).collect();
    assert_eq!(numbers.first(), Some(&"2"), "actions in 24 h: {line}");
    let refused = c
        .agent_requests()
        .iter()
        .filter(|e| e.is_write() && e.code() >= 400 && e.code() != 409)
        .count();
    assert_eq!(refused, 0, "writes the server refused");
}
