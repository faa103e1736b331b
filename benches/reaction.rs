//! Time from a fill crossing the usage threshold to the agent's resize PATCH, at the default
//! 10 s scan interval, against the real test API server (kube-apiserver 1.20.2 + etcd, see
//! tests/support/kube): `headroom agent` as a child process with the project's RBAC, real tmpfs
//! volumes. Also counts the agent's established connections to the API server and its watch
//! requests (from the server's audit log) with all claims mounted. Needs root and the server.
//!
//! `cargo bench --bench reaction` measures 200 crossings (four rounds of 50 claims, each claim
//! crossing once, at moments spread uniformly over one scan interval) with the agent's default
//! settings (`--interval 10s`, `--measure-interval 1s`); `-- --bench --measure-interval 0s`
//! measures the same with the fast measurement loop off. `-- --bench --from-idle` starts every
//! volume idle at 10 % and fills it to 87 % in one write (an instant fill from idle, far below
//! the line, instead of the last small write of a volume already near it). `-- --bench --held`
//! cordons the node first and starts every volume at 85 %, past its line, its grow held by the
//! drain; the crossing write takes it to 97 %, past the emergency line, which lets the grow
//! through. `-- --bench --held-interval` starts every volume at 85 %, its grow held by
//! `modificationInterval: 2h` after a last grow (in its history) dated so that each claim's
//! interval ends at its own moment, spread uniformly over four scan intervals once the agent has
//! started; it times each claim from the end of its interval to its PATCH (no write: the hold's
//! end is a time, not a line). `--hanging-sink` configures a notification sink (tests/support/sink.rs) that takes
//! every request and never answers, so each grow's message waits on it: the reaction must not
//! change. Without `--bench` (e.g. `cargo test --benches`) it runs a smoke pass of two crossings
//! at a 1 s interval.

mod support;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use support::kube::cluster::KubeCluster;
use support::kube::server;
use support::node::{MI, SplitMix, fill, request_of, wait_for};

const SIZE_MI: u64 = 8;
const POLICY: &[(&str, &str)] = &[
    ("enabled", "true"),
    ("limit", "1Gi"),
    ("step", "2Mi"),
    ("usage-threshold", "80"),
    // The emergency line at its default 95 %, without the default 1Gi of free space that
    // would make every 8Mi volume an emergency from the start.
    ("emergency-grow-critical-minimum-free", "64Ki"),
];

/// Percent used before the agent starts, and after the crossing write; whether the node is
/// cordoned (every grow below the emergency line held).
struct Levels {
    before: u64,
    after: u64,
    held: bool,
}

struct Plan {
    interval: Duration,
    interval_arg: &'static str,
    per_round: usize,
    rounds: usize,
}

fn main() -> ExitCode {
    let full = std::env::args().any(|a| a == "--bench");
    if !server::available("bench reaction") {
        return ExitCode::SUCCESS;
    }
    let plan = if full {
        Plan {
            interval: Duration::from_secs(10),
            interval_arg: "10s",
            per_round: 50,
            rounds: 4,
        }
    } else {
        Plan {
            interval: Duration::from_secs(1),
            interval_arg: "1s",
            per_round: 2,
            rounds: 1,
        }
    };
    let levels = if std::env::args().any(|a| a == "--from-idle") {
        Levels {
            before: 10,
            after: 87,
            held: false,
        }
    } else if std::env::args().any(|a| a == "--held") {
        Levels {
            before: 85,
            after: 97,
            held: true,
        }
    } else {
        Levels {
            before: 79,
            after: 85,
            held: false,
        }
    };
    let (what, samples) = if std::env::args().any(|a| a == "--held-interval") {
        let title = format!("end of a {HELD_INTERVAL} modification interval (at 85 %)");
        (title, hold_ends(&plan))
    } else {
        let crossing = if levels.held {
            "emergency crossing of a claim held by a drain"
        } else {
            "threshold crossing"
        };
        let title = format!("{crossing} ({} % -> {} %)", levels.before, levels.after);
        (title, measure(&plan, &levels))
    };
    report(&plan, &what, samples);
    ExitCode::SUCCESS
}

/// `--held-interval`'s modification interval: long enough that the last grows dated inside it
/// are hours old, nothing like a grow the agent could have made.
const HELD_INTERVAL: &str = "2h";

/// Every claim past its line (85 %) and held by its modification interval, each interval ending
/// at its own moment (uniform over the rounds' scan intervals, after a lead for the agent's start
/// and first scan); the delay from each end to the claim's PATCH.
fn hold_ends(plan: &Plan) -> Vec<Duration> {
    let mut c = KubeCluster::new();
    let fast = c.fast.clone();
    let total = plan.per_round * plan.rounds;
    let names: Vec<String> = (0..total).map(|i| format!("h-{i}")).collect();
    let policy = [POLICY, &[("modification-interval", HELD_INTERVAL)]].concat();
    for n in &names {
        let mount = c.claim(n, &fast, SIZE_MI, &policy);
        fill(&mount, SIZE_MI * MI * 85 / 100);
    }
    let lead = plan.interval * 3 + Duration::from_secs(20);
    let span_ms = (plan.interval * plan.rounds as u32).as_millis() as u64;
    let interval: SignedDuration = HELD_INTERVAL.parse().expect("interval");
    let mut rng = SplitMix(0x686f_6c64_656e_6473);
    let (t0, wall0) = (Instant::now(), Timestamp::now());
    let ends: Vec<Instant> = names
        .iter()
        .map(|n| {
            let end = lead + Duration::from_millis(rng.next() % span_ms);
            let at = wall0 + SignedDuration::try_from(end).expect("end") - interval;
            let last = json!([{
                "at": at, "kind": "Grow", "from": (SIZE_MI - 2) * MI, "to": SIZE_MI * MI,
                "fs_before": (SIZE_MI - 2) * MI, "landed": at + SignedDuration::from_secs(60),
                "result": "Succeeded",
            }]);
            let history =
                json!({"metadata": {"annotations": {"headroom.dev/history": last.to_string()}}});
            c.patch_claim(n, history);
            t0 + end
        })
        .collect();
    let extra: Vec<String> = std::env::args()
        .skip_while(|a| a != "--measure-interval")
        .take(2)
        .collect();
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let agent = c.agent(plan.interval_arg, &extra);
    let first_end = *ends.iter().min().expect("claims");
    wait_for(lead, "every claim held by its interval", || {
        names
            .iter()
            .all(|n| c.status_field(n, "blockedReason").as_deref() == Some("modification_interval"))
            .then_some(())
    });
    assert!(
        Instant::now() < first_end,
        "the first hold ended before every claim was seen held: a longer lead is needed"
    );
    let patched: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; total]));
    spawn_recorder(&c, &names, patched.clone());
    let last_end = *ends.iter().max().expect("claims");
    let wait = last_end.saturating_duration_since(Instant::now()) + Duration::from_secs(120);
    wait_for(wait, "every claim patched", || {
        let p = patched.lock().expect("patched");
        p.iter().all(Option::is_some).then_some(())
    });
    drop(agent);
    let p = patched.lock().expect("patched");
    ends.iter()
        .zip(p.iter())
        .map(|(end, at)| at.expect("patched").saturating_duration_since(*end))
        .collect()
}

fn measure(plan: &Plan, levels: &Levels) -> Vec<Duration> {
    let mut c = KubeCluster::new();
    let fast = c.fast.clone();
    let total = plan.per_round * plan.rounds;
    let names: Vec<String> = (0..total).map(|i| format!("r-{i}")).collect();
    let mounts: Vec<PathBuf> = names
        .iter()
        .map(|n| c.claim(n, &fast, SIZE_MI, POLICY))
        .collect();
    // Just under the threshold (the crossing is the last small write), or idle far below it
    // (the crossing is one large write); timed from the write's start.
    for m in &mounts {
        fill(m, SIZE_MI * MI * levels.before / 100);
    }
    if levels.held {
        let node = c.node.clone();
        c.patch_node(&node, json!({"spec": {"unschedulable": true}}));
    }
    let extra: Vec<String> = std::env::args()
        .skip_while(|a| a != "--measure-interval")
        .take(2)
        .collect();
    let mut extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    // Kept until the agent has stopped: a sink that hangs, not one that refuses connections.
    let hanging = std::env::args()
        .any(|a| a == "--hanging-sink")
        .then(|| support::sink::Sink::http(support::sink::Mode::Hang));
    let configmap = hanging
        .as_ref()
        .map(|s| support::sink_kube::configure(&c, &s.url(), "slack", "  timeout: 60s\n"));
    if let Some(cm) = &configmap {
        extra.extend(["--configmap", cm.as_str()]);
    }
    let agent = c.agent(plan.interval_arg, &extra);
    wait_for(
        plan.interval * 3 + Duration::from_secs(20),
        "first statuses",
        || {
            names
                .iter()
                .all(|n| c.status_field(n, "state").is_some())
                .then_some(())
        },
    );
    let conns = server::connections(agent.child.id(), c.server.port);
    let watches = c
        .agent_requests()
        .iter()
        .filter(|e| e.verb == "watch" || e.verb == "list")
        .count();
    println!(
        "{total} claims mounted: the agent holds {conns} connection(s) to the API server; \
         {watches} list/watch audit record(s) in the claims' namespace so far"
    );

    let patched: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; total]));
    spawn_recorder(&c, &names, patched.clone());
    let mut rng = SplitMix(0x6865_6164_726f_6f6d);
    let mut samples = Vec::new();
    for round in 0..plan.rounds {
        let ids: Vec<usize> = (round * plan.per_round..(round + 1) * plan.per_round).collect();
        let mut offsets: Vec<(Duration, usize)> = ids
            .iter()
            .map(|&i| {
                let ms = rng.next() % plan.interval.as_millis() as u64;
                (Duration::from_millis(ms), i)
            })
            .collect();
        offsets.sort();
        let start = Instant::now();
        let mut crossed = vec![None; total];
        for (offset, i) in offsets {
            if let Some(wait) = (start + offset).checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            crossed[i] = Some(Instant::now());
            fill(&mounts[i], SIZE_MI * MI * levels.after / 100);
        }
        wait_for(
            Duration::from_secs(120),
            "every claim of the round patched",
            || {
                let p = patched.lock().expect("patched");
                ids.iter().all(|&i| p[i].is_some()).then_some(())
            },
        );
        let p = patched.lock().expect("patched");
        for &i in &ids {
            let (Some(t0), Some(t1)) = (crossed[i], p[i]) else {
                panic!("claim {} was not patched", names[i]);
            };
            samples.push(t1.saturating_duration_since(t0));
        }
    }
    if let Some(s) = &hanging {
        println!(
            "hanging sink: {} request(s) taken, {} answered",
            s.attempts(),
            s.received().len()
        );
    }
    drop(agent);
    samples
}

/// Notes the first moment each claim's request grew, from a watch on the namespace.
fn spawn_recorder(c: &KubeCluster, names: &[String], patched: Arc<Mutex<Vec<Option<Instant>>>>) {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(c.admin.0.clone(), &c.ns);
    let names = names.to_vec();
    support::kube::runtime().spawn(async move {
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()).applied_objects());
        while let Some(Ok(p)) = stream.next().await {
            let at = Instant::now();
            let name = p.metadata.name.clone().unwrap_or_default();
            let Some(i) = names.iter().position(|n| *n == name) else {
                continue;
            };
            if request_of(&p) > SIZE_MI * MI {
                patched.lock().expect("patched")[i].get_or_insert(at);
            }
        }
    });
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    // Nearest rank.
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn report(plan: &Plan, what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let secs = |d: Duration| d.as_secs_f64();
    let mean = samples.iter().map(|d| secs(*d)).sum::<f64>() / samples.len() as f64;
    let measure: Vec<String> = std::env::args()
        .skip_while(|a| a != "--measure-interval")
        .collect();
    let hanging = std::env::args().any(|a| a == "--hanging-sink");
    let measure = if hanging && !measure.iter().any(|a| a == "--hanging-sink") {
        [measure, vec!["--hanging-sink".to_string()]].concat()
    } else {
        measure
    };
    println!(
        "{what} to PVC patch, interval {:?}, {} claims, {}",
        plan.interval,
        samples.len(),
        if measure.is_empty() {
            "default settings".to_string()
        } else {
            measure.join(" ")
        }
    );
    println!("| interval | n | min (s) | p50 (s) | mean (s) | p90 (s) | p99 (s) | max (s) |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {:?} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
        plan.interval,
        samples.len(),
        secs(samples[0]),
        secs(percentile(&samples, 0.5)),
        mean,
        secs(percentile(&samples, 0.9)),
        secs(percentile(&samples, 0.99)),
        secs(samples[samples.len() - 1]),
    );
}
