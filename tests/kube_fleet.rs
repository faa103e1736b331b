//! The agent as one of a fleet, against a real kube-apiserver 1.20 + etcd (tests/support/kube):
//! two agents on one RWX claim (real resourceVersion conflicts), SIGKILL mid-action, cordon,
//! an API server killed and restarted, `headroom status -A`, and the agent's effective
//! permissions as the server computes them from the shipped `rbac/`.

mod support {
    pub mod http;
    pub mod kube;
    pub mod node;
    pub mod root;
}

use std::time::Duration;

use k8s_openapi::api::authorization::v1::SelfSubjectRulesReview;
use serde_json::json;
use support::kube::cluster::{KubeCluster, POLICY, client_for};
use support::kube::server::{self, Server};
use support::node::{MI, fill, request_of, wait_for};

#[test]
fn two_agents_on_one_rwx_claim_grow_it_once() {
    if !server::available("two_agents_on_one_rwx_claim_grow_it_once") {
        return;
    }
    let mut c = KubeCluster::new();
    let node_b = format!("{}-b", c.node);
    c.add_node(&node_b);
    c.pvc("shared", &c.fast.clone(), 64, POLICY, |p| {
        p["spec"]["accessModes"] = json!(["ReadWriteMany"]);
    });
    let uid_a = c.pod("pod-a", &c.node.clone(), "shared");
    let uid_b = c.pod("pod-b", &node_b, "shared");
    let pv = c.pv_name("shared");
    let mount = c.root.tmpfs_volume(&uid_a, &pv, 64 * MI);
    // The same filesystem, seen by the second node's kubelet.
    let mut root_b = support::node::KubeletRoot::new();
    root_b.bind_volume(&uid_b, &pv, &mount);
    let _csi = c.csi(&[("shared", mount.clone())], 300);
    let _a = c.agent("200ms", &[]);
    let _b = c.agent_on(&node_b, root_b.path(), "200ms", &[]);
    wait_for(Duration::from_secs(20), "the first status", || {
        c.status_field("shared", "state")
    });
    fill(&mount, 56 * MI);
    c.wait_capacity("shared", 80 * MI);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(request_of(&c.get("shared")), 80 * MI, "grown twice for one fill");
    assert_eq!(c.resize_patches("shared"), 1);
    assert_eq!(c.history_len("shared"), 1);
}

#[test]
fn sigkill_mid_action_loses_no_history_and_never_double_grows() {
    if !server::available("sigkill_mid_action_loses_no_history_and_never_double_grows") {
        return;
    }
    let mut c = KubeCluster::new();
    let mount = c.claim("data", &c.fast.clone(), 64, POLICY);
    let _csi = c.csi(&[("data", mount.clone())], 200);
    let mut rng = support::node::SplitMix(0x5eed_0012);
    let mut size = 64;
    for _ in 0..3 {
        let mut agent = c.agent("200ms", &[]);
        // Over the threshold, then SIGKILL at a random moment around the grow.
        fill(&mount, size * MI * 7 / 8);
        std::thread::sleep(Duration::from_millis(200 + rng.next() % 800));
        agent.kill();
        let _agent = c.agent("200ms", &[]);
        size += 16;
        c.wait_capacity("data", size * MI);
    }
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(request_of(&c.get("data")), size * MI);
    assert_eq!(c.resize_patches("data"), 3, "one grow per fill");
    assert_eq!(c.history_len("data"), 3, "history lost or doubled");
}

#[test]
fn cordon_pauses_planned_growth_but_not_emergencies() {
    if !server::available("cordon_pauses_planned_growth_but_not_emergencies") {
        return;
    }
    let mut c = KubeCluster::new();
    let mount = c.claim("data", &c.fast.clone(), 64, POLICY);
    let _csi = c.csi(&[("data", mount.clone())], 100);
    let node = c.node.clone();
    c.patch_node(&node, json!({"spec": {"unschedulable": true}}));
    // 56Mi of 64Mi: 87.5 %, over the 80 % threshold, under the 95 % emergency line.
    fill(&mount, 56 * MI);
    let _agent = c.agent("300ms", &[]);
    c.wait_blocked("data", "node_draining");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(c.resize_patches("data"), 0, "planned growth while cordoned");

    // 62Mi of 64Mi: 96.9 %, past the emergency line: grows although the node drains.
    fill(&mount, 62 * MI);
    c.wait_capacity("data", 80 * MI);
    // Planned again: paused while cordoned, resumes once uncordoned.
    fill(&mount, 70 * MI);
    c.wait_blocked("data", "node_draining");
    assert_eq!(c.resize_patches("data"), 1);
    c.patch_node(&node, json!({"spec": {"unschedulable": false}}));
    c.wait_request("data", 96 * MI);
    assert_eq!(c.resize_patches("data"), 2);
}

#[test]
fn api_server_restart_turns_ready_off_and_watches_resume() {
    if !server::available("api_server_restart_turns_ready_off_and_watches_resume") {
        return;
    }
    // A server of its own: stopping the shared one would fail the other tests.
    let server = std::sync::Arc::new(Server::start());
    let mut c = KubeCluster::on(server.clone());
    let mount = c.claim("data", &c.fast.clone(), 64, POLICY);
    let _csi = c.csi(&[("data", mount.clone())], 100);
    let port = support::http::free_port();
    let listen = format!("127.0.0.1:{port}");
    let _agent = c.agent("300ms", &["--listen", &listen]);
    let ready = |code: u16| {
        wait_for(Duration::from_secs(30), &format!("/ready {code}"), || {
            support::http::get(port, "/ready").filter(|(c, _)| *c == code)
        })
    };
    ready(200);
    server.stop_apiserver();
    ready(503);
    server.start_apiserver();
    ready(200);
    // The watches resumed: a fill after the restart is seen and grown.
    fill(&mount, 56 * MI);
    c.wait_capacity("data", 80 * MI);
}

#[test]
fn status_lists_every_namespace_from_the_real_server() {
    if !server::available("status_lists_every_namespace_from_the_real_server") {
        return;
    }
    let mut c = KubeCluster::new();
    let mount = c.claim("data", &c.fast.clone(), 64, POLICY);
    fill(&mount, 56 * MI);
    let _agent = c.agent("300ms", &[]);
    c.wait_request("data", 80 * MI);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(["status", "-A", "--kubeconfig"])
        .arg(c.admin_kubeconfig.path())
        .env_remove("KUBECONFIG")
        .output()
        .expect("run headroom status");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let line = text
        .lines()
        .find(|l| l.contains(&c.ns) && l.contains("data"))
        .unwrap_or_else(|| panic!("no line for {}/data in:\n{text}", c.ns));
    assert!(line.contains("80Mi"), "{line}");
}

/// What `kubectl auth can-i --list` shows for the agent's service account, from the server.
fn agent_rules(c: &KubeCluster, namespace: &str) -> Vec<(String, String, String)> {
    let agent = client_for(c.agent_kubeconfig.path());
    let review: SelfSubjectRulesReview = serde_json::from_value(json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": namespace},
    }))
    .expect("review");
    let api: kube::Api<SelfSubjectRulesReview> = kube::Api::all(agent);
    let done = support::kube::block(async move { api.create(&Default::default(), &review).await })
        .expect("SelfSubjectRulesReview");
    let mut rules = Vec::new();
    for r in done.status.expect("status").resource_rules {
        for g in r.api_groups.unwrap_or_default() {
            for res in r.resources.clone().unwrap_or_default() {
                for v in &r.verbs {
                    rules.push((g.clone(), res.clone(), v.clone()));
                }
            }
        }
    }
    rules.sort();
    rules
}

#[test]
fn the_agent_can_do_what_it_needs_and_nothing_that_reaches_other_workloads() {
    if !server::available("the_agent_can_do_what_it_needs_and_nothing_that_reaches_other_workloads") {
        return;
    }
    let c = KubeCluster::new();
    for ns in [c.ns.as_str(), "headroom"] {
        let rules = agent_rules(&c, ns);
        eprintln!("agent permissions in {ns}: {rules:#?}");
        let has = |g: &str, r: &str, v: &str| rules.iter().any(|x| x == &(g.into(), r.into(), v.into()));
        for (g, r, v) in [
            ("", "persistentvolumeclaims", "patch"),
            ("", "pods", "watch"),
            ("events.k8s.io", "events", "create"),
        ] {
            assert!(has(g, r, v), "the agent cannot {v} {r} in {ns}: {rules:?}");
        }
        for (g, r, v) in &rules {
            let denied = r == "nodes/proxy"
                || r == "secrets"
                || r.starts_with("pods/")
                || r == "*"
                || v == "*"
                || g == "*"
                || (r == "persistentvolumeclaims" && (v == "delete" || v == "update"));
            assert!(!denied, "the agent may {v} {g}/{r} in {ns}");
        }
    }
    // The ConfigMap is readable in the agent's own namespace only.
    let cm = |ns: &str| agent_rules(&c, ns).iter().any(|(_, r, _)| r == "configmaps");
    assert!(cm("headroom"));
    assert!(!cm(&c.ns), "the agent may read ConfigMaps in a tenant namespace");
}
