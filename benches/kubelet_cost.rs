//! What the API server spends on a kubelet and on idle headroom agents, side by side on the real
//! node of tests/support/realnode (kube-apiserver, kube-controller-manager, kube-scheduler,
//! kube-proxy, containerd and a kubelet 1.20.2), the controller manager and the scheduler
//! stopped first (the node controller would otherwise react to the kubelet's end and cost more
//! than the kubelet did): the server's own `process_cpu_seconds_total` over equal windows with
//! (A) the kubelet and kube-proxy running, (B) the same plus K idle agents (host processes on
//! that node, an empty kubelet root), (C) the agents stopped and the kubelet killed. A kubelet
//! costs A - C (its watches, its node lease renewed every 10 s, its status), an agent (B - A) / K.
//! Registered watchers and requests are counted in each window.
//!
//! `cargo bench --bench kubelet_cost -- --bench` (60 s windows, 10 agents). Without `--bench`
//! (`cargo test --benches`) a smoke pass of 3 s windows and one agent. Needs what real_node needs
//! (./scripts/test.sh builds it).

// The API server's test support and the real node both spawn their processes through
// realnode/proc.rs, each as a module of its own: two copies of two small functions.
#![allow(clippy::duplicate_mod)]

mod support;

#[path = "../tests/support/realnode/mod.rs"]
mod realnode;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use support::fleet::{open_watches, sum};
use support::node::{Agent, AgentOpts, wait_for};

struct Window {
    cpu_percent: f64,
    watchers: f64,
    requests_per_second: f64,
}

fn metrics(node: &realnode::Node) -> String {
    node.kubectl(&["get", "--raw", "/metrics"])
        .unwrap_or_else(|e| panic!("API server /metrics: {e}"))
}

/// The server's CPU (percent of a core), watchers and request rate over `secs`.
fn window(node: &realnode::Node, secs: Duration) -> Window {
    let (t0, m0) = (Instant::now(), metrics(node));
    std::thread::sleep(secs);
    let (t1, m1) = (Instant::now(), metrics(node));
    let span = t1.duration_since(t0).as_secs_f64();
    let delta = |name: &str| sum(&m1, name, &[]) - sum(&m0, name, &[]);
    Window {
        cpu_percent: delta("process_cpu_seconds_total") / span * 100.0,
        watchers: open_watches(&m1, false),
        requests_per_second: delta("apiserver_request_total") / span,
    }
}

fn print(label: &str, w: &Window) {
    println!(
        "  {label}: API server CPU {:.2} % of a core, {} watchers, {:.2} requests/s",
        w.cpu_percent, w.watchers, w.requests_per_second
    );
}

fn main() -> ExitCode {
    let Some(parts) = realnode::parts("kubelet_cost bench") else {
        return ExitCode::SUCCESS;
    };
    let bench = std::env::args().any(|a| a == "--bench");
    let (secs, agents, settle) = if bench {
        (Duration::from_secs(60), 10, Duration::from_secs(30))
    } else {
        (Duration::from_secs(3), 1, Duration::from_secs(2))
    };
    let node = realnode::Node::start(parts);
    node.kill("kube-controller-manager");
    node.kill("kube-scheduler");
    std::thread::sleep(settle);
    let a = window(&node, secs);
    print("the kubelet and kube-proxy", &a);

    let root = tempfile::tempdir().expect("an empty kubelet root");
    let admin = node.kubeconfig("admin");
    let ports: Vec<u16> = (0..agents).map(|_| support::ports::free_port()).collect();
    let listens: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let mut running: Vec<Agent> = listens
        .iter()
        .map(|listen| {
            Agent::spawn(&AgentOpts {
                kubeconfig: &admin,
                node: realnode::NODE,
                root: root.path(),
                interval: "10s",
                extra: &["--listen", listen],
            })
        })
        .collect();
    wait_for(Duration::from_secs(120), "every agent ready", || {
        ports
            .iter()
            .all(|p| support::http::get(*p, "/ready").is_some_and(|(c, _)| c == 200))
            .then_some(())
    });
    std::thread::sleep(settle);
    let b = window(&node, secs);
    print(&format!("the same and {agents} idle agents"), &b);
    for agent in &mut running {
        agent.kill();
    }
    node.kill("kubelet");
    std::thread::sleep(settle);
    let c = window(&node, secs);
    print("agents stopped, kubelet killed (kube-proxy alone)", &c);
    println!(
        "  per idle agent: {:.3} % of a core, {:.1} watchers, {:.3} requests/s; the kubelet: \
         {:.3} % of a core, {} watchers, {:.3} requests/s",
        (b.cpu_percent - a.cpu_percent) / agents as f64,
        (b.watchers - a.watchers) / agents as f64,
        (b.requests_per_second - a.requests_per_second) / agents as f64,
        a.cpu_percent - c.cpu_percent,
        a.watchers - c.watchers,
        a.requests_per_second - c.requests_per_second
    );
    node.teardown();
    ExitCode::SUCCESS
}
