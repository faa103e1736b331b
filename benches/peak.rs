//! Peak usage of a real tmpfs volume filled at a steady rate, threshold-only against the
//! predictive trigger (the default since issue 27), with `headroom agent` at its default settings (`--interval 10s`,
//! `--measure-interval 1s`) against the real test API server, and a simulated resizer that
//! applies a new size a fixed delay after the request (tmpfs remounted bigger and
//! `status.capacity` set, as the e2e tests' CSI driver does). Needs root and the server.
//!
//! Each rate runs both policies at once, on two claims of one agent: the same fill, the same
//! resizer. The scale is the (a 20Gi claim, a 60 s resize, 10-200 MB/s) with time
//! shrunk: a 2Gi claim and a 3 s resize, so at 200 MB/s the last 20 % fills in 2.1 s, before a
//! resize started at the threshold can land, and the first 80 % takes 8.6 s.
//!
//! Both policies are the defaults but for `trigger.predictive: false` on the threshold-only
//! claim: the predictive one learns its lead time from its own first resize (until then the
//! default `resizeLeadTime: 2m` + `margin: 30s`).
//!
//! `cargo bench --bench peak` (`-- --bench`) runs 10, 50, 200 and 500 MB/s with a 3 s resizer;
//! `-- --bench --resize-delay 60` runs the rates whose fill a 60 s resizer can outlast within
//! this machine's memory (10 and 50 MB/s: at 200 MB/s the 13 GB written during one resize would
//! have to fit in RAM twice). Without `--bench` (e.g. `cargo test --benches`) a smoke pass of
//! one small, slow fill.

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
    resize_delay: Duration,
    /// (MB/s, used share the fill starts from, claim size in MiB)
    rates: Vec<(f64, f64, u64)>,
    /// The fill stops once this share of the claim's first size has been written.
    end_share: f64,
}

fn policy(predictive: bool) -> Vec<(&'static str, &'static str)> {
    let mut p = vec![("enabled", "true"), ("limit", "32Gi")];
    if !predictive {
        p.push(("trigger-predictive", "false"));
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

fn run_rate(plan: &Plan, rate_mb: f64, start_share: f64, size_mi: u64) -> [Row; 2] {
    let mut c = KubeCluster::new();
    let fast = c.fast.clone();
    let size = size_mi * MI;
    let names = ["threshold", "predictive"];
    let mut mounts = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let m = c.claim(name, &fast, size_mi, &policy(i == 1));
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
    let args: Vec<String> = std::env::args().collect();
    let delay = args
        .iter()
        .position(|a| a == "--resize-delay")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(3);
    let plan = match (full, delay) {
        (false, _) => Plan {
            resize_delay: Duration::from_secs(1),
            rates: vec![(4.0, 0.5, 64)],
            end_share: 1.0,
        },
        (true, 60) => Plan {
            resize_delay: Duration::from_secs(60),
            rates: vec![(10.0, 0.50, 2048), (50.0, 0.0, 4096)],
            end_share: 1.1,
        },
        (true, d) => Plan {
            resize_delay: Duration::from_secs(d),
            rates: vec![
                (10.0, 0.70, 2048),
                (50.0, 0.50, 2048),
                (200.0, 0.20, 2048),
                (500.0, 0.0, 4096),
            ],
            end_share: 1.1,
        },
    };
    println!(
        "resize delay {:?}, fill until {:.0} % of the first size is written",
        plan.resize_delay,
        plan.end_share * 100.0
    );
    println!(
        "| fill | claim | from | threshold-only: peak | full for | grows | final size | predictive: peak | full for | grows | final size |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for &(rate, from, size_mi) in &plan.rates {
        let [t, p] = run_rate(&plan, rate, from, size_mi);
        println!(
            "| {rate} MB/s | {size_mi} MiB | {:.0} % | {:.1} % | {:.1} s | {} | {} MiB | {:.1} % | {:.1} s | {} | {} MiB |",
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
