//! The CPU one fast-loop pass costs: `Prober::remeasure` over N real tmpfs volumes under a
//! kubelet-like root, in-process (no API server, no agent), as CPU time of the whole process
//! (every thread: the runtime's workers and the blocking pool) per pass. At one pass a second,
//! µs per pass / 10^4 is the percent of one core.
//!
//! `cargo bench --bench probe_cost`: 500 volumes, 400 passes back to back, then 30 at one a
//! second (the agent's pace: caches and threads cold at each). Without `--bench` a smoke pass of
//! 20 volumes. Needs root (mounts).

#[path = "../tests/support/node.rs"]
mod node;
#[path = "../tests/support/root.rs"]
mod root;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use headroom::probe::{DEFAULT_DEADLINE, Prober};
use node::KubeletRoot;

/// CPU time of the whole process (all threads).
fn cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out pointer.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(r, 0);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn main() -> ExitCode {
    let full = std::env::args().any(|a| a == "--bench");
    if !root::require_root("bench probe_cost", &[]) {
        return ExitCode::SUCCESS;
    }
    let (n, passes) = if full { (500, 400) } else { (20, 5) };
    let mut root = KubeletRoot::new();
    for i in 0..n {
        root.tmpfs_volume(&format!("pod-{i}"), &format!("pv-{i}"), 1 << 20);
    }
    // The agent's shape: two runtime workers on a 2-core node.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let prober = Prober::new(root.path().to_path_buf(), DEFAULT_DEADLINE);
    let paced = if full { 30 } else { 2 };
    let (hot, wall, cold, clones) = runtime.block_on(async {
        let vols = prober.probe().await.expect("probe");
        assert_eq!(vols.iter().filter(|v| v.measurement.is_some()).count(), n);
        let vols: Vec<_> = vols.iter().filter_map(|v| v.target()).collect();
        assert_eq!(vols.len(), n);
        // Warm the blocking pool as a running agent has it.
        for _ in 0..5 {
            prober.remeasure(vols.clone()).await;
        }
        let (c0, w0) = (cpu(), Instant::now());
        for _ in 0..passes {
            // The fast loop hands over clones of its watched volumes; so does this.
            let out = prober.remeasure(vols.clone()).await;
            assert_eq!(out.iter().filter(|r| r.is_ok()).count(), n);
        }
        let (hot, wall) = (cpu() - c0, w0.elapsed());
        // As the agent runs it: one pass a second, caches and threads gone cold in between.
        let mut cold = Duration::ZERO;
        for _ in 0..paced {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let c0 = cpu();
            let out = prober.remeasure(vols.clone()).await;
            cold += cpu() - c0;
            assert_eq!(out.len(), n);
        }
        // The part of a pass that is the caller's clone of the volumes and their drop.
        let c0 = cpu();
        for _ in 0..passes {
            std::hint::black_box(vols.clone());
        }
        (hot, wall, cold, cpu() - c0)
    });
    let us = |d: Duration, k: usize| d.as_secs_f64() * 1e6 / k as f64;
    println!(
        "| passes | volumes | CPU per pass (µs) | CPU per volume (µs) | wall per pass (ms) | % of one core at 1 pass/s |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let row = |what: &str, per_pass: f64, wall: Option<f64>| {
        println!(
            "| {what} | {n} | {per_pass:.0} | {:.2} | {} | {:.3} |",
            per_pass / n as f64,
            wall.map_or("".to_owned(), |w| format!("{w:.2}")),
            per_pass / 1e4
        );
    };
    row(
        &format!("{passes} back to back"),
        us(hot, passes),
        Some(wall.as_secs_f64() * 1e3 / passes as f64),
    );
    row(&format!("{paced}, one a second"), us(cold, paced), None);
    row(
        "of which: clone + drop of the volumes",
        us(clones, passes),
        None,
    );
    ExitCode::SUCCESS
}
