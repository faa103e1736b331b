//! A node's cost follows its own claims, not its namespaces' (issue 33), on a fleet of ten agents
//! on one real kube-apiserver 1.20 with 1,000 claims in one namespace: node 0 mounts five (one in
//! a pvc-autoresizer group whose two other members are mounted nowhere), node 1 mounts one, the
//! other eight nodes none. Asserts counts, never times: the watches each agent holds, the LISTs
//! it makes (all from the watch cache), and the claim events it receives while every claim on no
//! agent's node is rewritten, before and after a rolling restart of every agent.
//! `cargo bench --bench fleet` runs the same harness at a hundred agents and 10,000 claims.

mod support {
    pub mod fleet;
    pub mod http;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use support::fleet::{Fleet, claim_watch_events, open_watches};
use support::kube::cluster::POLICY;
use support::kube::server::{self, AGENT_USER, Server};
use support::node::{MI, fill, wait_for};

const NODES: usize = 10;
const CLAIMS: usize = 1000;
/// Pods, this node, StorageClasses, the ConfigMap, Namespaces and CSIDrivers.
const BASE_WATCHES: f64 = 6.0;

fn own(i: usize) -> String {
    format!("own-{i}")
}

/// Node 0's five claims (the first in the group `team=blue`), node 1's one, the group's two
/// members mounted nowhere, and the rest of the namespace's claims, unlabelled.
fn set_up(f: &mut Fleet) -> (Vec<String>, Vec<String>) {
    for i in 0..5 {
        let mount = f.mounted_claim(0, &own(i), 16, POLICY, |c| {
            if i == 0 {
                c["metadata"]["labels"] = json!({"team": "blue"});
                c["metadata"]["annotations"]["resize.topolvm.io/initial-resize-group-by"] =
                    json!("team");
            }
        });
        // Under every trigger: 3Mi of 16Mi.
        fill(&mount, 3 * MI);
    }
    let mount = f.mounted_claim(1, "lone", 16, POLICY, |_| {});
    fill(&mount, 3 * MI);
    let peers: Vec<String> = (0..2).map(|i| format!("peer-{i}")).collect();
    f.foreign_claims(&peers, &json!({"team": "blue"}));
    let foreign: Vec<String> = (0..CLAIMS - 5 - 1 - peers.len())
        .map(|i| format!("far-{i}"))
        .collect();
    f.foreign_claims(&foreign, &json!({"app": "elsewhere"}));
    (peers, foreign)
}

/// (claim, selector, namespace) watches node `i`'s agent holds.
fn claim_watches(f: &Fleet, i: usize) -> (f64, f64, f64) {
    let kind = |k: &str| f.metric(i, "headroom_claim_watches", &[&format!("kind=\"{k}\"")]);
    (kind("claim"), kind("selector"), kind("namespace"))
}

fn requests(f: &Fleet, i: usize, verb: &str) -> f64 {
    f.metric(
        i,
        "headroom_api_requests_total",
        &[&format!("verb=\"{verb}\"")],
    )
}

/// Each agent's watches and LISTs: the six of every node, one per claim it mounts, one for its
/// group's peers, one for the quotas of each namespace it mounts claims of.
fn assert_watches(f: &Fleet) {
    assert_eq!(
        claim_watches(f, 0),
        (5.0, 1.0, 0.0),
        "node 0's claim watches"
    );
    assert_eq!(
        claim_watches(f, 1),
        (1.0, 0.0, 0.0),
        "node 1's claim watches"
    );
    let expected = |i: usize| match i {
        0 => BASE_WATCHES + 5.0 + 1.0 + 1.0,
        1 => BASE_WATCHES + 1.0 + 1.0,
        _ => BASE_WATCHES,
    };
    for i in 0..NODES {
        if i > 1 {
            assert_eq!(
                claim_watches(f, i),
                (0.0, 0.0, 0.0),
                "node {i}'s claim watches"
            );
        }
        assert_eq!(requests(f, i, "list"), expected(i), "node {i}'s LISTs");
        // A watch the server ends resumes from its resourceVersion: one more request, no LIST.
        let watches = requests(f, i, "watch");
        assert!(
            watches >= expected(i) && watches <= expected(i) + 3.0,
            "node {i}: {watches} watch requests for {} watches",
            expected(i)
        );
    }
}

/// Claim events per agent, and the API server's count of PVC events sent to watchers.
fn events(f: &Fleet) -> (Vec<f64>, f64) {
    let agents = (0..NODES).map(|i| f.claim_events(i)).collect();
    let server = claim_watch_events(&f.server_metrics());
    (agents, server)
}

/// Rewrites every claim on no agent's node, then one member of node 0's group (the marker that
/// the churn has been sent); returns what each agent and the server counted meanwhile.
fn churn(f: &Fleet, round: &str, peers: &[String], foreign: &[String]) -> (Vec<f64>, f64) {
    let (before, server_before) = events(f);
    f.annotate(foreign, "status.example.com/churn", round);
    f.annotate(&peers[..1], "status.example.com/churn", round);
    wait_for(
        Duration::from_secs(60),
        "node 0 to see its group's peer change",
        || (f.claim_events(0) > before[0]).then_some(()),
    );
    // The foreign changes were sent before the marker; a second more for stragglers.
    std::thread::sleep(Duration::from_secs(1));
    let (after, server_after) = events(f);
    let delta = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    (delta, server_after - server_before)
}

fn assert_churn(round: &str, (delta, server): (Vec<f64>, f64), foreign: usize) {
    eprintln!(
        "{round}: {foreign} claims elsewhere rewritten, then one peer: claim events per agent \
         {delta:?}; PVC watch events the server sent: {server}"
    );
    assert_eq!(
        delta[0], 1.0,
        "node 0 receives its peer's change and nothing else"
    );
    for (i, d) in delta.iter().enumerate().skip(1) {
        assert_eq!(
            *d, 0.0,
            "node {i} received {d} events for claims it does not serve"
        );
    }
    assert_eq!(server, 1.0, "PVC watch events sent by the server");
}

#[test]
fn a_nodes_watches_and_events_follow_its_own_claims() {
    if !server::available("a_nodes_watches_and_events_follow_its_own_claims") {
        return;
    }
    let server = Arc::new(Server::start());
    let mut f = Fleet::new(server.clone(), NODES);
    let (peers, foreign) = set_up(&mut f);
    f.start_all("2s", &[]);
    f.wait_all_ready(Duration::from_secs(120));
    wait_for(
        Duration::from_secs(120),
        "every mounted claim's status",
        || {
            (0..5)
                .map(own)
                .chain(["lone".to_string()])
                .all(|n| f.c.status_field(&n, "state").is_some())
                .then_some(())
        },
    );
    // Let the first statuses' own echoes arrive before counting.
    std::thread::sleep(Duration::from_secs(3));
    assert_watches(&f);
    let registered = open_watches(&f.server_metrics(), true);
    assert_eq!(
        registered, 7.0,
        "PVC watchers on the server for 1,000 claims"
    );
    assert_churn("steady", churn(&f, "1", &peers, &foreign), foreign.len());

    // The DaemonSet's update: every agent in turn, each ready before the next.
    for i in 0..NODES {
        f.start(i, "2s", &[]);
        wait_for(Duration::from_secs(60), "the restarted agent ready", || {
            f.ready(i).then_some(())
        });
    }
    std::thread::sleep(Duration::from_secs(3));
    assert_watches(&f);
    let lists: Vec<String> = support::kube::audit::read(&server.audit_log())
        .into_iter()
        .filter(|e| e.user.username == AGENT_USER && e.verb == "list")
        .map(|e| e.request_uri)
        .collect();
    assert!(!lists.is_empty(), "the audit log has the agents' LISTs");
    let quorum: Vec<&String> = lists
        .iter()
        .filter(|uri| !uri.contains("resourceVersion=0"))
        .collect();
    assert!(
        quorum.is_empty(),
        "LISTs not served from the watch cache: {quorum:?}"
    );
    assert_churn(
        "after the restart",
        churn(&f, "2", &peers, &foreign),
        foreign.len(),
    );
}
