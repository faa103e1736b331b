//! Time from a fill crossing the usage threshold to the agent's resize PATCH, at the default
//! 10 s scan interval: `headroom agent` as a child process, the fake API server, real tmpfs
//! volumes (the end-to-end tests' setup). Needs root for the mounts.
//!
//! `cargo bench --bench reaction` measures 60 crossings (two rounds of 30 claims, each claim
//! crossing once, at moments spread uniformly over one interval). Without `--bench` (e.g.
//! `cargo test --benches`) it runs a smoke pass of two crossings at a 1 s interval.

#[path = "../tests/support/cluster.rs"]
mod cluster;
#[allow(unused_imports)] // its unit tests are not compiled into a bench
#[path = "../tests/support/fake_api/mod.rs"]
mod fake_api;
#[path = "../tests/support/node.rs"]
mod node;
#[path = "../tests/support/root.rs"]
mod root;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster::{Cluster, status_field};
use node::{MI, fill, request_of, wait_for};

const SIZE_MI: u64 = 8;
const POLICY: &[(&str, &str)] = &[
    ("enabled", "true"),
    ("limit", "1Gi"),
    ("step", "2Mi"),
    ("usage-threshold", "80"),
];

struct Plan {
    interval: Duration,
    interval_arg: &'static str,
    per_round: usize,
    rounds: usize,
}

use node::SplitMix;

fn main() -> ExitCode {
    let full = std::env::args().any(|a| a == "--bench");
    if !root::require_root("bench reaction", &[]) {
        return ExitCode::SUCCESS;
    }
    let plan = if full {
        Plan {
            interval: Duration::from_secs(10),
            interval_arg: "10s",
            per_round: 30,
            rounds: 2,
        }
    } else {
        Plan {
            interval: Duration::from_secs(1),
            interval_arg: "1s",
            per_round: 2,
            rounds: 1,
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let samples = rt.block_on(measure(&plan));
    report(&plan, samples);
    ExitCode::SUCCESS
}

async fn measure(plan: &Plan) -> Vec<Duration> {
    let mut c = Cluster::new().await;
    let total = plan.per_round * plan.rounds;
    let names: Vec<String> = (0..total).map(|i| format!("r-{i}")).collect();
    let mounts: Vec<PathBuf> = names
        .iter()
        .map(|n| c.claim(n, "fast", SIZE_MI, POLICY))
        .collect();
    // Just under the threshold: the crossing is the last small write, timed from its start.
    for m in &mounts {
        fill(m, SIZE_MI * MI * 79 / 100);
    }
    let _agent = c.agent(plan.interval_arg);
    wait_for(
        plan.interval * 3 + Duration::from_secs(10),
        "first statuses",
        || {
            names
                .iter()
                .all(|n| status_field(&c.get(n), "state").is_some())
                .then_some(())
        },
    );

    let mut rng = SplitMix(0x6865_6164_726f_6f6d);
    let mut samples = Vec::new();
    for round in 0..plan.rounds {
        let ids: Vec<usize> = (round * plan.per_round..(round + 1) * plan.per_round).collect();
        let patched: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; total]));
        let poller = spawn_poller(&c, &names, &ids, patched.clone());
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
            fill(&mounts[i], SIZE_MI * MI * 85 / 100);
        }
        poller.join().expect("poller");
        let patched = patched.lock().expect("patched");
        for &i in &ids {
            let (Some(t0), Some(t1)) = (crossed[i], patched[i]) else {
                panic!("claim {} was not patched", names[i]);
            };
            samples.push(t1.saturating_duration_since(t0));
        }
    }
    samples
}

/// Notes, every 2 ms, the first moment each claim's request grew; returns once all have.
fn spawn_poller(
    c: &Cluster,
    names: &[String],
    ids: &[usize],
    patched: Arc<Mutex<Vec<Option<Instant>>>>,
) -> std::thread::JoinHandle<()> {
    let fake = c.fake.clone();
    let watch: Vec<(usize, String)> = ids.iter().map(|&i| (i, names[i].clone())).collect();
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut left = watch;
        while !left.is_empty() && Instant::now() < deadline {
            left.retain(|(i, name)| {
                let grown = fake
                    .get::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(cluster::NS, name)
                    .is_some_and(|p| request_of(&p) > SIZE_MI * MI);
                if grown {
                    patched.lock().expect("patched")[*i] = Some(Instant::now());
                }
                !grown
            });
            std::thread::sleep(Duration::from_millis(2));
        }
    })
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    // Nearest rank.
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn report(plan: &Plan, mut samples: Vec<Duration>) {
    samples.sort();
    let secs = |d: Duration| d.as_secs_f64();
    let mean = samples.iter().map(|d| secs(*d)).sum::<f64>() / samples.len() as f64;
    println!(
        "threshold crossing to PVC patch, interval {:?}, {} crossings",
        plan.interval,
        samples.len()
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
