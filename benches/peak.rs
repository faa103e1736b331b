//! Peak usage of a real tmpfs volume filled at a steady rate, threshold-only against the
//! predictive trigger, with `headroom agent` at its default settings (`--interval 10s`,
//! `--measure-interval 1s`) against the real test API server, and a simulated resizer that
//! applies a new size a fixed delay after the request (tmpfs remounted bigger and
//! `status.capacity` set, as the e2e tests' CSI driver does). Needs root and the server.
//!
//! Each rate runs both policies at once, on two claims of one agent: the same fill, the same
//! resizer. The scale is the (a 20Gi claim, a 60 s resize, 10-200 MB/s) with time
//! shrunk: a 2Gi claim and a 3 s resize, so at 200 MB/s the last 20 % fills in 2.1 s, before a
//! resize started at the threshold can land, and the first 80 % takes 8.6 s.
//!
//! `cargo bench --bench peak` (`-- --bench`) runs 10, 50 and 200 MB/s; without `--bench` (e.g.
//! `cargo test --benches`) a smoke pass of one small, slow fill.

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::kube::cluster::KubeCluster;
use support::kube::server;
use support::node::{MI, fill, request_of, wait_for};

const MB: f64 = 1e6;

struct Plan {
    size_mi: u64,
    resize_delay: Duration,
    /// (MB/s, used share the fill starts from)
    rates: Vec<(f64, f64)>,
    /// The fill stops once this share of the claim's first size has been written.
    end_share: f64,
}

fn policy(predictive: bool, delay: Duration) -> Vec<(&'static str, String)> {
    let mut p = vec![
        ("enabled", "true".to_string()),
        ("limit", "32Gi".to_string()),
    ];
    if predictive {
        // The user's own figure for how long a resize takes here, and a margin.
        p.push(("trigger-predictive", "true".to_string()));
        let secs = delay.as_secs().max(1);
        p.push(("trigger-resize-lead-time", format!("{secs}s")));
        p.push(("trigger-margin", "1s".to_string()));
    }
    p
}

/// Statfs of `mount` every 5 ms: the highest used share of the filesystem's size at that moment.
fn watch_peak(mount: PathBuf, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<f64> {
    std::thread::spawn(move || {
        let mut peak: f64 = 0.0;
        while !stop.load(Ordering::SeqCst) {
            if let Ok(s) = nix::sys::statvfs::statvfs(&mount) {
                let frsize = s.fragment_size() as f64;
                let total = s.blocks() as f64 * frsize;
                let used = (s.blocks() - s.blocks_free()) as f64 * frsize;
                if total > 0.0 {
                    peak = peak.max(used / total);
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        peak
    })
}

/// Writes at `rate` bytes per second (in 10 ms steps, catching up after a stall) until `end`
/// bytes are in the file; returns how long writes failed for lack of space (ms).
fn fill_at(mount: &Path, from: u64, end: u64, rate: f64) -> u64 {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(mount.join("fill"))
        .expect("open fill");
    let chunk = vec![0x5au8; MI as usize];
    let start = Instant::now();
    // A volume that never grows again must not hold the bench forever.
    let give_up =
        start + Duration::from_secs_f64((end - from) as f64 / rate) + Duration::from_secs(60);
    let mut written = from;
    let mut failing_ms = 0;
    let mut full_since: Option<Instant> = None;
    while written < end && Instant::now() < give_up {
        let due = from + (rate * start.elapsed().as_secs_f64()) as u64;
        while written < due.min(end) {
            let n = (due.min(end) - written).min(MI) as usize;
            match f.write(&chunk[..n]) {
                Ok(k) => {
                    written += k as u64;
                    if let Some(t) = full_since.take() {
                        failing_ms += t.elapsed().as_millis() as u64;
                    }
                }
                Err(_) => {
                    full_since.get_or_insert_with(Instant::now);
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if let Some(t) = full_since {
        failing_ms += t.elapsed().as_millis() as u64;
    }
    failing_ms
}

struct Row {
    peak: f64,
    full_ms: u64,
    grows: usize,
    final_mi: u64,
}

fn run_rate(plan: &Plan, rate_mb: f64, start_share: f64) -> [Row; 2] {
    let mut c = KubeCluster::new();
    let fast = c.fast.clone();
    let size = plan.size_mi * MI;
    let names = ["threshold", "predictive"];
    let mut mounts = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let p = policy(i == 1, plan.resize_delay);
        let p: Vec<(&str, &str)> = p.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let m = c.claim(name, &fast, plan.size_mi, &p);
        fill(&m, (size as f64 * start_share) as u64);
        mounts.push(m);
    }
    let _csi = c.csi(
        &[(names[0], mounts[0].clone()), (names[1], mounts[1].clone())],
        plan.resize_delay.as_millis() as u64,
    );
    let _agent = c.agent("10s", &[]);
    wait_for(Duration::from_secs(60), "first statuses", || {
        names
            .iter()
            .all(|n| c.status_field(n, "state").is_some())
            .then_some(())
    });
    // Let the loop take a few quiet samples first, as it would have in production.
    std::thread::sleep(Duration::from_secs(3));
    let stop = Arc::new(AtomicBool::new(false));
    let end = (size as f64 * plan.end_share) as u64;
    let from = (size as f64 * start_share) as u64;
    let (peaks, fillers): (Vec<_>, Vec<_>) = mounts
        .iter()
        .map(|m| {
            let peak = watch_peak(m.clone(), stop.clone());
            let target = m.clone();
            let filler = std::thread::spawn(move || fill_at(&target, from, end, rate_mb * MB));
            (peak, filler)
        })
        .unzip();
    let failed: Vec<u64> = fillers
        .into_iter()
        .map(|f| f.join().expect("filler"))
        .collect();
    // Whatever is in flight lands.
    std::thread::sleep(plan.resize_delay + Duration::from_secs(2));
    stop.store(true, Ordering::SeqCst);
    let peaks: Vec<f64> = peaks.into_iter().map(|p| p.join().expect("peak")).collect();
    std::array::from_fn(|i| Row {
        peak: peaks[i],
        full_ms: failed[i],
        grows: c.resize_patches(names[i]),
        final_mi: request_of(&c.get(names[i])) / MI,
    })
}

fn main() -> ExitCode {
    let full = std::env::args().any(|a| a == "--bench");
    if !server::available("bench peak") {
        return ExitCode::SUCCESS;
    }
    let plan = if full {
        Plan {
            size_mi: 2048,
            resize_delay: Duration::from_secs(3),
            rates: vec![(10.0, 0.70), (50.0, 0.50), (200.0, 0.20)],
            end_share: 1.1,
        }
    } else {
        Plan {
            size_mi: 64,
            resize_delay: Duration::from_secs(1),
            rates: vec![(4.0, 0.5)],
            end_share: 1.0,
        }
    };
    println!(
        "claim {} MiB, resize delay {:?}, fill until {:.0} % of the first size is written",
        plan.size_mi,
        plan.resize_delay,
        plan.end_share * 100.0
    );
    println!(
        "| fill | from | threshold-only: peak | full for | grows | final size | predictive: peak | full for | grows | final size |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for &(rate, from) in &plan.rates {
        let [t, p] = run_rate(&plan, rate, from);
        println!(
            "| {rate} MB/s | {:.0} % | {:.1} % | {:.1} s | {} | {} MiB | {:.1} % | {:.1} s | {} | {} MiB |",
            from * 100.0,
            t.peak * 100.0,
            t.full_ms as f64 / 1000.0,
            t.grows,
            t.final_mi,
            p.peak * 100.0,
            p.full_ms as f64 / 1000.0,
            p.grows,
            p.final_mi
        );
    }
    ExitCode::SUCCESS
}
