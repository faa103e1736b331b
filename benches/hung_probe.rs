//! The agent's probe (discovery, then each volume's statfs with a deadline) over N healthy tmpfs
//! volumes under a kubelet-like root, with and without one hung FUSE mount among them (bindfs
//! stopped with SIGSTOP). Shows the scan keeps its pace: only the first scan after the mount
//! hangs waits for the deadline; later scans skip the stuck volume at once.
//!
//! Both roots exist at once and their scans alternate, so load from other work on the machine
//! falls on both runs alike.
//!
//! `cargo bench --bench hung_probe` (or `cargo test --bench hung_probe -- --bench`): 500 volumes,
//! 200 scans per run, the default 5 s deadline. Without `--bench` it runs a smoke pass. Needs
//! root (mounts) and bindfs.

#[path = "../tests/support/hung.rs"]
mod hung;
#[path = "../tests/support/node.rs"]
mod node;
#[path = "../tests/support/root.rs"]
mod root;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use headroom::probe::{DEFAULT_DEADLINE, Prober, Unmeasured};
use node::KubeletRoot;

struct Run {
    name: &'static str,
    durations: Vec<Duration>,
    stuck: usize,
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

/// One scan; checks every healthy volume was measured and `hung` timed out.
async fn scan(prober: &Prober, healthy: usize, hung: usize) -> Duration {
    let started = Instant::now();
    let vols = prober.probe().await.expect("probe");
    let took = started.elapsed();
    let measured = vols.iter().filter(|v| v.measurement.is_some()).count();
    let timed_out = vols
        .iter()
        .filter(|v| v.unmeasured == Some(Unmeasured::ProbeTimeout))
        .count();
    assert_eq!((measured, timed_out), (healthy, hung));
    took
}

fn main() -> ExitCode {
    let full = std::env::args().any(|a| a == "--bench");
    if !root::require_root("bench hung_probe", &[("bindfs", "bindfs")]) {
        return ExitCode::SUCCESS;
    }
    let (n, scans, deadline) = if full {
        (500, 200, DEFAULT_DEADLINE)
    } else {
        (20, 5, Duration::from_secs(1))
    };
    let mut roots = [KubeletRoot::new(), KubeletRoot::new()];
    for root in &mut roots {
        for i in 0..n {
            root.tmpfs_volume(&format!("pod-{i}"), &format!("pv-{i}"), 1 << 20);
        }
    }
    let source = tempfile::tempdir().expect("bindfs source");
    let mount = roots[1].csi_mount_point("pod-hung", "pv-hung");
    let hung_mount = hung::HungMount::start(source.path(), &mount);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let probers = roots
        .each_ref()
        .map(|r| Prober::new(r.path().to_path_buf(), deadline));
    let mut healthy = Run {
        name: "healthy",
        durations: Vec::new(),
        stuck: 0,
    };
    let mut with_hung = Run {
        name: "one hung",
        durations: Vec::new(),
        stuck: 0,
    };
    runtime.block_on(async {
        for _ in 0..scans {
            healthy.durations.push(scan(&probers[0], n, 0).await);
            with_hung.durations.push(scan(&probers[1], n, 1).await);
        }
    });
    healthy.stuck = probers[0].stuck_calls();
    with_hung.stuck = probers[1].stuck_calls();
    hung_mount.resume();
    drop(hung_mount);
    // The stuck statfs returned when the mount was continued: nothing is left to wait for.
    runtime.shutdown_timeout(Duration::from_secs(5));

    println!(
        "| run | volumes | scans | p50 (ms) | p99 (ms) | p99 after the first (ms) | max (ms) | stuck calls at end |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in [&healthy, &with_hung] {
        let mut all = r.durations.clone();
        all.sort();
        let mut later = r.durations[1..].to_vec();
        later.sort();
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            r.name,
            n + usize::from(r.name != "healthy"),
            all.len(),
            ms(quantile(&all, 0.5)),
            ms(quantile(&all, 0.99)),
            ms(quantile(&later, 0.99)),
            ms(*all.last().expect("scans")),
            r.stuck
        );
    }
    println!("deadline {deadline:?}");
    ExitCode::SUCCESS
}
