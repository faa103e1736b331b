//! The agent as one of a fleet, against a real kube-apiserver 1.20 + etcd (tests/support/kube):
//! two agents on one RWX claim (real resourceVersion conflicts), SIGKILL mid-action, cordon,
//! an API server killed and restarted, `headroom status -A`, and the agent's effective
//! permissions as the server computes them from the shipped `rbac/`.

mod support {
    pub mod http;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::authorization::v1::SelfSubjectRulesReview;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use support::kube::cluster::{KubeCluster, POLICY, annotation, client_for};
use support::kube::server::{self, Server};
use support::node::{MI, SplitMix, capacity_of, fill, request_of, wait_for};

#[test]
fn two_agents_on_one_rwx_claim_grow_it_once() {
    if !server::available("two_agents_on_one_rwx_claim_grow_it_once") {
        return;
    }
    const ROUNDS: usize = 3;
    let mut collisions = 0;
    for round in 0..ROUNDS {
        let mut c = KubeCluster::new();
        let node_b = format!("{}-b", c.node);
        c.add_node(&node_b);
        c.pvc("shared", &c.fast.clone(), 64, POLICY, |p| {
            p["spec"]["accessModes"] = json!(["ReadWriteMany"]);
        });
        let uid_a = c.pod("pod-a", &c.node.clone(), "shared");
        let uid_b = c.pod("pod-b", &node_b, "shared");
        let pv = c.pv_name("shared");
        // One filesystem, mounted by a pod on each node; already over the threshold when both
        // agents start, so both decide from the same resourceVersion.
        let mount = c.root.tmpfs_volume(&uid_a, &pv, 64 * MI);
        let mut root_b = support::node::KubeletRoot::new();
        root_b.bind_volume(&uid_b, &pv, &mount);
        fill(&mount, 56 * MI);
        let _csi = c.csi(&[("shared", mount.clone())], 300);
        let _a = c.agent("200ms", &[]);
        let _b = c.agent_on(&node_b, root_b.path(), "200ms", &[]);
        c.wait_capacity("shared", 80 * MI);
        // Several more scans by both, on a volume now at 70 %.
        std::thread::sleep(Duration::from_secs(2));
        assert_eq!(
            request_of(&c.get("shared")),
            80 * MI,
            "round {round}: grown twice"
        );
        assert_eq!(
            c.resize_patches("shared"),
            1,
            "round {round}: resize patches"
        );
        assert_eq!(c.history_len("shared"), 1, "round {round}: history");
        let conflicts = c
            .claim_writes("shared")
            .iter()
            .filter(|e| e.code() == 409)
            .count();
        eprintln!("round {round}: {conflicts} write(s) refused with 409 by the real server");
        collisions += conflicts;
    }
    eprintln!("{collisions} collision(s) in {ROUNDS} rounds");
}

type Versions = Arc<Mutex<HashMap<String, (u64, u64)>>>;

/// Every version of every claim in the namespace, by resourceVersion: (request, capacity).
fn record_versions(c: &KubeCluster, expect: usize) -> Versions {
    let versions: Versions = Arc::default();
    let seen = versions.clone();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(c.admin.0.clone(), &c.ns);
    support::kube::runtime().spawn(async move {
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()).applied_objects());
        while let Some(Ok(p)) = stream.next().await {
            let rv = p.metadata.resource_version.clone().unwrap_or_default();
            let sizes = (request_of(&p), capacity_of(&p));
            seen.lock().expect("versions").insert(rv, sizes);
        }
    });
    let ready = versions.clone();
    wait_for(Duration::from_secs(10), "the version recorder", move || {
        (ready.lock().expect("versions").len() >= expect).then_some(())
    });
    versions
}

#[test]
fn sigkill_at_random_moments_never_double_resizes_or_loses_history() {
    if !server::available("sigkill_at_random_moments_never_double_resizes_or_loses_history") {
        return;
    }
    const RUNS: u64 = 50;
    const VOLUMES: usize = 5;
    const STEP: u64 = 2 * MI;
    // Ten actions a day is the most a policy may allow; five claims give the runs room to act.
    let policy = [
        ("enabled", "true"),
        ("limit", "1Gi"),
        ("step", "2Mi"),
        ("max-actions-per-day", "10"),
    ];
    let mut c = KubeCluster::new();
    let fast = c.fast.clone();
    let names: Vec<String> = (0..VOLUMES).map(|i| format!("vol-{i}")).collect();
    let mounts: Vec<PathBuf> = names
        .iter()
        .map(|n| c.claim(n, &fast, 8, &policy))
        .collect();
    let versions = record_versions(&c, VOLUMES);
    let pairs: Vec<(&str, PathBuf)> = names
        .iter()
        .map(String::as_str)
        .zip(mounts.iter().cloned())
        .collect();
    let _csi = c.csi(&pairs, 150);

    for run in 0..RUNS {
        // Round robin: refill one claim (to 85 %, over the 80 % threshold) once its last resize
        // is done; the others may still be resizing from an earlier run.
        let i = run as usize % VOLUMES;
        let pvc = c.get(&names[i]);
        let fs = nix::sys::statvfs::statvfs(&mounts[i]).expect("statvfs");
        let fs_bytes = fs.blocks() * fs.fragment_size();
        if request_of(&pvc) == capacity_of(&pvc) && fs_bytes == capacity_of(&pvc) {
            fill(&mounts[i], fs_bytes / 100 * 85);
        }
        let life = SplitMix(run).next() % 1501;
        let mut agent = c.agent("200ms", &[]);
        std::thread::sleep(Duration::from_millis(life));
        agent.kill();
    }
    // A request the last agent sent before it died may still be on its way through the server.
    std::thread::sleep(Duration::from_millis(500));

    let versions = versions.lock().expect("versions").clone();
    let mut total = 0;
    for name in &names {
        let pvc = c.get(name);
        let h: Vec<serde_json::Value> = annotation(&pvc, "headroom.dev/history")
            .map(|h| serde_json::from_str(&h).expect("history is JSON"))
            .unwrap_or_default();
        let sizes: Vec<(u64, u64)> = h
            .iter()
            .map(|a| {
                (
                    a["from"].as_u64().expect("from"),
                    a["to"].as_u64().expect("to"),
                )
            })
            .collect();
        let mut expect_from = 8 * MI;
        for (from, to) in &sizes {
            assert_eq!(
                *from, expect_from,
                "{name}: history breaks its chain: {sizes:?}"
            );
            assert_eq!(*to, from + STEP, "{name}: not one step: {sizes:?}");
            expect_from = *to;
        }
        assert_eq!(request_of(&pvc), expect_from, "{name}: request vs history");
        // The server's record of each resize PATCH: 200, or 500 when the agent was killed before
        // the answer reached it (the server may have applied it: the audit code is the
        // response's, not the write's).
        let resizes: Vec<(u16, serde_json::Value)> = c
            .claim_writes(name)
            .into_iter()
            .filter_map(|e| Some((e.code(), e.request_object.clone()?)))
            .filter(|(_, b)| b.pointer("/spec/resources/requests/storage").is_some())
            .collect();
        let applied = resizes.iter().filter(|(code, _)| *code == 200).count();
        let aborted = resizes.iter().filter(|(code, _)| *code == 500).count();
        assert!(
            applied <= sizes.len() && sizes.len() <= applied + aborted,
            "{name}: {applied} resize PATCHes accepted, {aborted} cut off, {} history entries",
            sizes.len()
        );
        let bodies: Vec<&serde_json::Value> = resizes
            .iter()
            .filter(|(code, _)| *code == 200 || *code == 500)
            .map(|(_, b)| b)
            .collect();
        for body in &bodies {
            let rv = body["metadata"]["resourceVersion"]
                .as_str()
                .expect("resize patch without a resourceVersion precondition");
            let (req, cap) = versions[rv];
            assert_eq!(
                req, cap,
                "{name}: resized while a resize was in flight: {body}"
            );
        }
        total += sizes.len();
    }
    eprintln!("{total} resizes over {RUNS} killed runs");
    assert!(
        total >= VOLUMES * 2,
        "only {total} resizes in {RUNS} runs: the agent hardly acted"
    );
}

fn cordon_pauses_planned_growth_only(test: &str, cordon: fn(bool) -> serde_json::Value) {
    if !server::available(test) {
        return;
    }
    let mut c = KubeCluster::new();
    let mount = c.claim("data", &c.fast.clone(), 64, POLICY);
    let _csi = c.csi(&[("data", mount.clone())], 100);
    let node = c.node.clone();
    c.patch_node(&node, cordon(true));
    // 56Mi of 64Mi: 87.5 %, over the 80 % threshold, under the 95 % emergency line.
    fill(&mount, 56 * MI);
    let _agent = c.agent("300ms", &[]);
    c.wait_blocked("data", "node_draining");
    std::thread::sleep(Duration::from_millis(1500));
    c.assert_resize_patches("data", 0);

    // 62Mi of 64Mi: 96.9 %, past the emergency line: grows although the node drains.
    fill(&mount, 62 * MI);
    c.wait_capacity("data", 80 * MI);
    // Planned again: paused while cordoned, resumes once uncordoned.
    fill(&mount, 70 * MI);
    c.wait_blocked("data", "node_draining");
    c.assert_resize_patches("data", 1);
    c.patch_node(&node, cordon(false));
    c.wait_request("data", 96 * MI);
    c.assert_resize_patches("data", 2);
}

#[test]
fn cordoned_node_pauses_planned_growth_but_not_emergencies() {
    cordon_pauses_planned_growth_only(
        "cordoned_node_pauses_planned_growth_but_not_emergencies",
        |on| json!({"spec": {"unschedulable": on}}),
    );
}

#[test]
fn unschedulable_taint_pauses_planned_growth_but_not_emergencies() {
    cordon_pauses_planned_growth_only(
        "unschedulable_taint_pauses_planned_growth_but_not_emergencies",
        |on| {
            let taints = on.then(
                || json!([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]),
            );
            json!({"spec": {"taints": taints}})
        },
    );
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
    let text = c.headroom_status(&["-A"]);
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
    if !server::available("the_agent_can_do_what_it_needs_and_nothing_that_reaches_other_workloads")
    {
        return;
    }
    let c = KubeCluster::new();
    for ns in [c.ns.as_str(), "headroom"] {
        let rules = agent_rules(&c, ns);
        eprintln!("agent permissions in {ns}: {rules:#?}");
        let has =
            |g: &str, r: &str, v: &str| rules.iter().any(|x| x == &(g.into(), r.into(), v.into()));
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
    let cm = |ns: &str| {
        agent_rules(&c, ns)
            .iter()
            .any(|(_, r, _)| r == "configmaps")
    };
    assert!(cm("headroom"));
    assert!(
        !cm(&c.ns),
        "the agent may read ConfigMaps in a tenant namespace"
    );
}
