//! A fleet on one real kube-apiserver 1.20.2 + etcd (tests/support/fleet.rs): N simulated nodes,
//! one `headroom agent` process each, and the API server's own `/metrics` beside every agent's,
//! side by side in one run (issue 33). Node 0 mounts five claims, nodes 1 to N/2 one each, the
//! rest none; claims mounted on no agent's node join the same namespace in steps up to M.
//!
//! `cargo bench --bench fleet -- --bench` runs 100 agents and up to 10,000 claims;
//! `--nodes N` and `--claims 1000,5000,10000` change them. `HEADROOM_BENCH_AGENT_BIN` runs
//! another build of the agent (before and after a change) under the same harness. Without
//! `--bench` (`cargo test --benches`) it runs a smoke pass: three agents, 60 claims.
//!
//! Phases: the idle server; N agents started (time until all ready) and their steady state; M
//! growing with each node's own claims fixed (per-agent RSS and events); churn of the claims
//! elsewhere at a fixed rate; a rolling restart of every agent (LISTs, bytes served, time until
//! all ready); a logical volume with members on three nodes grown by the fleet.

mod support;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::fleet::{Fleet, claim_watch_events, cpu_seconds, open_watches, rss, sum};
use support::kube::cluster::{CNPG_GROUP_POLICY, POLICY};
use support::kube::server::{self, Server};
use support::node::{MI, fill, wait_for};

struct Plan {
    nodes: usize,
    claims: Vec<usize>,
    window: Duration,
    churn: usize,
    churn_rate: f64,
}

fn plan() -> Plan {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1).cloned())
    };
    if !args.iter().any(|a| a == "--bench") {
        return Plan {
            nodes: 3,
            claims: vec![60],
            window: Duration::from_secs(3),
            churn: 20,
            churn_rate: 20.0,
        };
    }
    Plan {
        nodes: value("--nodes").and_then(|v| v.parse().ok()).unwrap_or(100),
        claims: value("--claims")
            .map(|v| v.split(',').filter_map(|n| n.parse().ok()).collect())
            .unwrap_or_else(|| vec![1000, 5000, 10000]),
        window: Duration::from_secs(60),
        churn: 2000,
        churn_rate: 50.0,
    }
}

/// What the API server's `/metrics` says at one moment.
struct ServerSample {
    at: Instant,
    cpu: f64,
    rss: f64,
    requests: f64,
    lists: f64,
    list_bytes: f64,
    watchers: f64,
    pvc_events: f64,
}

fn sample(f: &Fleet) -> ServerSample {
    let text = f.server_metrics();
    ServerSample {
        at: Instant::now(),
        cpu: sum(&text, "process_cpu_seconds_total", &[]),
        rss: sum(&text, "process_resident_memory_bytes", &[]),
        requests: sum(&text, "apiserver_request_total", &[]),
        lists: sum(&text, "apiserver_request_total", &["verb=\"LIST\""]),
        list_bytes: sum(&text, "apiserver_response_sizes_sum", &["verb=\"LIST\""]),
        watchers: open_watches(&text, false),
        pvc_events: claim_watch_events(&text),
    }
}

fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / MI as f64)
}

/// Each agent's RSS and CPU seconds.
fn agents(f: &Fleet) -> Vec<(f64, f64)> {
    (0..f.nodes.len())
        .map(|i| {
            let pid = f.pid(i).unwrap_or(0);
            (
                rss(pid).unwrap_or(0) as f64,
                cpu_seconds(pid).unwrap_or(0.0),
            )
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// The kinds of node: 0 (five claims), those with one, those with none.
fn kinds(n: usize) -> [(&'static str, Vec<usize>); 3] {
    [
        ("node 0 (5 claims)", vec![0]),
        ("nodes with 1 claim", (1..=n / 2).collect()),
        ("nodes with none", (n / 2 + 1..n).collect()),
    ]
}

/// Median RSS and CPU (percent of a core over `secs`) and claim events per kind of node, between
/// two agent samples.
fn per_kind(f: &Fleet, before: &[(f64, f64)], after: &[(f64, f64)], events: &[f64], secs: f64) {
    for (kind, nodes) in kinds(f.nodes.len()) {
        if nodes.is_empty() {
            continue;
        }
        let rss = median(nodes.iter().map(|&i| after[i].0).collect());
        let cpu = median(
            nodes
                .iter()
                .map(|&i| (after[i].1 - before[i].1) / secs * 100.0)
                .collect(),
        );
        let ev = median(nodes.iter().map(|&i| events[i]).collect());
        println!(
            "    {kind}: RSS {} (median), CPU {cpu:.2} % of a core, claim events {ev}",
            mib(rss)
        );
    }
}

fn set_up_nodes(f: &mut Fleet) {
    for i in 0..5 {
        let m = f.mounted_claim(0, &format!("own-{i}"), 16, POLICY, |_| {});
        fill(&m, 3 * MI);
    }
    for node in 1..=f.nodes.len() / 2 {
        let m = f.mounted_claim(node, &format!("one-{node}"), 16, POLICY, |_| {});
        fill(&m, 3 * MI);
    }
}

/// Steady state over `window`: the server's CPU, memory, requests and watchers, and the agents'.
fn steady(f: &Fleet, window: Duration, label: &str) {
    let (s0, a0) = (sample(f), agents(f));
    let e0: Vec<f64> = (0..f.nodes.len()).map(|i| f.claim_events(i)).collect();
    std::thread::sleep(window);
    let (s1, a1) = (sample(f), agents(f));
    let e1: Vec<f64> = (0..f.nodes.len()).map(|i| f.claim_events(i)).collect();
    let secs = s1.at.duration_since(s0.at).as_secs_f64();
    let events: Vec<f64> = e1.iter().zip(&e0).map(|(a, b)| a - b).collect();
    println!(
        "  {label}: API server CPU {:.2} % of a core, RSS {}, {:.2} requests/s, {} watchers",
        (s1.cpu - s0.cpu) / secs * 100.0,
        mib(s1.rss),
        (s1.requests - s0.requests) / secs,
        s1.watchers
    );
    per_kind(f, &a0, &a1, &events, secs);
}

/// Rewrites `count` claims elsewhere at `rate` a second, as other agents' statuses would.
fn churn(f: &Fleet, names: &[String], rate: f64) {
    let (s0, a0) = (sample(f), agents(f));
    let e0: Vec<f64> = (0..f.nodes.len()).map(|i| f.claim_events(i)).collect();
    let started = Instant::now();
    for (k, chunk) in names.chunks(rate.max(1.0) as usize).enumerate() {
        f.annotate(chunk, "status.example.com/churn", &k.to_string());
        let due = Duration::from_secs_f64((k + 1) as f64);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    let (s1, a1) = (sample(f), agents(f));
    let e1: Vec<f64> = (0..f.nodes.len()).map(|i| f.claim_events(i)).collect();
    let secs = s1.at.duration_since(s0.at).as_secs_f64();
    let events: Vec<f64> = e1.iter().zip(&e0).map(|(a, b)| a - b).collect();
    println!(
        "  churn: {} claims elsewhere rewritten in {:.0} s: API server CPU {:.2} % of a core, \
         PVC watch events sent {}; events received by all agents {}",
        names.len(),
        secs,
        (s1.cpu - s0.cpu) / secs * 100.0,
        s1.pvc_events - s0.pvc_events,
        events.iter().sum::<f64>()
    );
    per_kind(f, &a0, &a1, &events, secs);
}

fn rolling_restart(f: &mut Fleet, interval: &str) {
    let s0 = sample(f);
    let started = Instant::now();
    for i in 0..f.nodes.len() {
        f.start(i, interval, &[]);
        wait_for(
            Duration::from_secs(120),
            "the restarted agent ready",
            || f.ready(i).then_some(()),
        );
    }
    let took = started.elapsed();
    let s1 = sample(f);
    println!(
        "  rolling restart of {} agents, one at a time: {:.1} s until all ready; {} LISTs, {:.0} \
         KiB served for them; API server CPU {:.1} s",
        f.nodes.len(),
        took.as_secs_f64(),
        s1.lists - s0.lists,
        (s1.list_bytes - s0.list_bytes) / 1024.0,
        s1.cpu - s0.cpu
    );
}

/// A CloudNativePG cluster's data volumes on nodes 0, 1 and 2, the primary filled: time until all
/// three are grown, and the logical actions in the primary's history.
fn logical_volume(f: &mut Fleet) {
    let cnpg = |name: &str| {
        let labels = json!({"cnpg.io/cluster": "lv", "cnpg.io/pvcRole": "PG_DATA",
                            "cnpg.io/instanceName": name});
        move |p: &mut Value| p["metadata"]["labels"] = labels
    };
    let mut mounts = Vec::new();
    for (node, name) in [(0, "lv-1"), (1, "lv-2"), (2, "lv-3")] {
        let m = f.mounted_claim(node, name, 64, CNPG_GROUP_POLICY, cnpg(name));
        fill(&m, MI);
        mounts.push((name, m));
    }
    let _csi = f.c.csi(&mounts, 200);
    // The members' first statuses, then the primary's fill: 56Mi of 64Mi.
    for (name, _) in &mounts {
        wait_for(Duration::from_secs(120), "a member's first status", || {
            f.c.status_field(name, "state")
        });
    }
    let started = Instant::now();
    fill(&mounts[0].1, 56 * MI);
    for (name, _) in &mounts {
        f.c.wait_capacity(name, 80 * MI);
    }
    let history = f.c.history_len("lv-1");
    println!(
        "  logical volume on nodes 0, 1, 2: all three members grown 64Mi -> 80Mi {:.1} s after \
         the primary's fill; {history} entry in the primary's history",
        started.elapsed().as_secs_f64()
    );
}

fn main() -> ExitCode {
    if !server::available("fleet bench") {
        return ExitCode::SUCCESS;
    }
    let p = plan();
    let interval = "10s";
    let server = Arc::new(Server::start());
    let mut f = Fleet::new(server, p.nodes);
    println!(
        "fleet: {} nodes, claims up to {:?}, agent {}",
        p.nodes,
        p.claims,
        std::env::var("HEADROOM_BENCH_AGENT_BIN").unwrap_or_else(|_| "(this build)".into())
    );
    set_up_nodes(&mut f);
    let own = 5 + p.nodes / 2;
    std::thread::sleep(p.window.min(Duration::from_secs(20)));
    steady(&f, p.window.min(Duration::from_secs(30)), "no agent");
    let started = Instant::now();
    f.start_all(interval, &[]);
    f.wait_all_ready(Duration::from_secs(600));
    println!(
        "  {} agents started: all ready in {:.1} s",
        p.nodes,
        started.elapsed().as_secs_f64()
    );
    std::thread::sleep(Duration::from_secs(15).min(p.window));
    steady(&f, p.window, &format!("{own} claims"));
    let mut made = 0;
    let mut names = Vec::new();
    for &m in &p.claims {
        let add: Vec<String> = (made..m.saturating_sub(own))
            .map(|i| format!("far-{i}"))
            .collect();
        let t = Instant::now();
        f.foreign_claims(&add, &json!({"app": "elsewhere"}));
        made += add.len();
        names.extend(add);
        println!(
            "  {} claims elsewhere created in {:.0} s",
            names.len(),
            t.elapsed().as_secs_f64()
        );
        std::thread::sleep(Duration::from_secs(15).min(p.window));
        steady(&f, p.window, &format!("{m} claims in the namespace"));
    }
    let n = p.churn.min(names.len());
    churn(&f, &names[..n], p.churn_rate);
    rolling_restart(&mut f, interval);
    std::thread::sleep(Duration::from_secs(15).min(p.window));
    steady(&f, p.window, "after the restart");
    logical_volume(&mut f);
    ExitCode::SUCCESS
}
