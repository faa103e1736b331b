//! The agent's footprint on the API server as a fleet multiplies it, measured on a real
//! kube-apiserver 1.20 (a server of its own, so its audit log holds this agent's requests only):
//! 500 claims mounted on one node, connections, watches and LISTs at start, and writes in steady
//! state (zero after the first status of each claim, with maintenance windows open and closed
//! and an RWX claim watched by two agents). `HEADROOM_FOOTPRINT_CLAIMS` changes the count.

mod support {
    pub mod http;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use support::kube::audit::Entry;
use support::kube::cluster::{KubeCluster, POLICY};
use support::kube::server::{self, AGENT_USER, Server};
use support::node::{KubeletRoot, MI, fill, wait_for};

fn scans(port: u16) -> Option<f64> {
    support::http::metric(port, "headroom_scan_duration_seconds_count", &[])
}

/// Requests of `verb` the agent made, by its own `headroom_api_requests_total` (the audit log
/// records a watch only once its response starts, so idle watches would not show there).
fn requests(port: u16, verb: &str) -> f64 {
    let Some((_, text)) = support::http::get(port, "/metrics") else {
        return 0.0;
    };
    let label = format!("verb=\"{verb}\"");
    text.lines()
        .filter(|l| l.starts_with("headroom_api_requests_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn agent_entries(server: &Server) -> Vec<Entry> {
    support::kube::audit::read(&server.audit_log())
        .into_iter()
        .filter(|e| e.user.username == AGENT_USER)
        .collect()
}

/// PATCHes and other writes the agents made to claims.
fn claim_writes(server: &Server) -> usize {
    agent_entries(server)
        .iter()
        .filter(|e| e.resource() == "persistentvolumeclaims" && e.is_write())
        .count()
}

#[test]
fn five_hundred_claims_one_connection_few_watches_no_steady_writes() {
    if !server::available("five_hundred_claims_one_connection_few_watches_no_steady_writes") {
        return;
    }
    let n: usize = std::env::var("HEADROOM_FOOTPRINT_CLAIMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let server = Arc::new(Server::start());
    let mut c = KubeCluster::on(server.clone());
    let fast = c.fast.clone();
    // Windows: one open now (it opened at the top of this hour and lasts 3 h) and one closed
    // (12 h away), so status fields that name windows are exercised both ways.
    let hour: u32 = jiff::Timestamp::now()
        .to_zoned(jiff::tz::TimeZone::UTC)
        .hour() as u32;
    let open = format!("0 {hour} * * *");
    let closed = format!("0 {} * * *", (hour + 12) % 24);
    let started = Instant::now();
    for i in 0..n {
        let name = format!("c-{i}");
        let mut policy = POLICY.to_vec();
        let schedule;
        if i % 10 == 1 || i % 10 == 2 {
            schedule = if i % 10 == 1 {
                open.clone()
            } else {
                closed.clone()
            };
            policy.extend([
                ("mode", "convergent"),
                ("request", "8Mi"),
                ("maintenance-window-schedule", schedule.as_str()),
                ("maintenance-window-duration", "3h"),
            ]);
        }
        let mount = c.claim(&name, &fast, 16, &policy);
        // Under every trigger: 3Mi of 16Mi.
        fill(&mount, 3 * MI);
    }
    // An RWX claim mounted on this node and on a second one, each with its agent.
    let node_b = format!("{}-b", c.node);
    c.add_node(&node_b);
    c.pvc("shared", &fast, 16, POLICY, |p| {
        p["spec"]["accessModes"] = json!(["ReadWriteMany"]);
    });
    let uid_a = c.pod("pod-shared-a", &c.node.clone(), "shared");
    let uid_b = c.pod("pod-shared-b", &node_b, "shared");
    let pv = c.pv_name("shared");
    let shared = c.root.tmpfs_volume(&uid_a, &pv, 16 * MI);
    fill(&shared, 3 * MI);
    let mut root_b = KubeletRoot::new();
    root_b.bind_volume(&uid_b, &pv, &shared);
    eprintln!("{} claims set up in {:?}", n + 1, started.elapsed());

    let port = support::http::free_port();
    let listen = format!("127.0.0.1:{port}");
    let agent = c.agent("500ms", &["--listen", &listen]);
    let _agent_b = c.agent_on(&node_b, root_b.path(), "500ms", &[]);
    let names: Vec<String> = (0..n)
        .map(|i| format!("c-{i}"))
        .chain(["shared".into()])
        .collect();
    let ns = c.ns.clone();
    wait_for(
        Duration::from_secs(120),
        "every claim's first status",
        || {
            let with_status = names
                .iter()
                .filter(|name| c.status_field(name, "state").is_some())
                .count();
            (with_status == names.len()).then_some(())
        },
    );
    let size = serde_json::to_vec(&c.get("c-0")).expect("json").len();
    eprintln!("one claim with its status annotation: {size} bytes of JSON");
    // Let the first round of writes settle (a status written by one agent, then the other's
    // first look at it), then count.
    std::thread::sleep(Duration::from_secs(3));
    let first = claim_writes(&server);
    let refused = agent_entries(&server)
        .iter()
        .filter(|e| e.resource() == "persistentvolumeclaims" && e.is_write() && e.code() == 409)
        .count();
    eprintln!("of the {first} first writes, {refused} were refused with 409 (a stale claim)");
    let conns = server::connections(agent.child.id(), server.port);
    let entries = agent_entries(&server);
    let count = |verb: &str, resource: &str| {
        entries
            .iter()
            .filter(|e| e.verb == verb && e.resource() == resource)
            .map(|e| format!("{:?}", (e.request_uri.clone(), e.namespace())))
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    };
    let lists = count("list", "persistentvolumeclaims");
    let (watches, all_lists) = (requests(port, "watch"), requests(port, "list"));
    eprintln!(
        "{} claims in {ns}: {conns} connection(s) to the API server; {watches} watch and \
         {all_lists} list request(s) in all (claim LISTs of both agents on the server: {lists}); \
         {first} claim write(s) for the first statuses",
        names.len()
    );
    for e in entries
        .iter()
        .filter(|e| e.verb == "list" || e.verb == "watch")
    {
        eprintln!("  {} {}", e.verb, e.request_uri);
    }
    assert!(conns <= 3, "{conns} connections to the API server");
    // Pods, this node, StorageClasses, Namespaces and CSIDrivers (trim schedules, issue 24), the
    // ConfigMap, and the one namespace's claims and ResourceQuotas (issue 25): eight LISTs,
    // whatever the number of claims. A watch the server closes (a slow consumer during the burst
    // of first statuses on a loaded machine) resumes from its resourceVersion: one more watch
    // request, never another LIST; so watches are bounded by a constant, not exactly eight.
    assert_eq!(all_lists, 8.0, "LISTs at start");
    assert!(
        watches <= 16.0,
        "{watches} watch requests for {} claims",
        names.len()
    );
    assert!(lists <= 2, "claim lists {lists}");

    // 20 scans of steady state: nothing changes, so nothing is written.
    let before = scans(port).expect("scan count");
    wait_for(Duration::from_secs(120), "20 more scans", || {
        (scans(port)? >= before + 20.0).then_some(())
    });
    let after = claim_writes(&server);
    let writes: Vec<String> = agent_entries(&server)
        .iter()
        .filter(|e| e.resource() == "persistentvolumeclaims" && e.is_write())
        .skip(first)
        .map(|e| format!("{} {}", e.verb, e.name().unwrap_or("?")))
        .collect();
    assert_eq!(after, first, "writes in steady state: {writes:?}");
    let conns = server::connections(agent.child.id(), server.port);
    let (w, l) = (requests(port, "watch"), requests(port, "list"));
    eprintln!(
        "after 20 steady scans: {conns} connection(s), {w} watch and {l} list request(s) in all, \
         0 claim writes"
    );
    assert!(conns <= 3, "{conns} connections to the API server");
    assert_eq!(l, all_lists, "a LIST in steady state");
    assert!(
        w <= watches + 2.0,
        "{} watch restarts in 20 steady scans",
        w - watches
    );
}
