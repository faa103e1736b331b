//! What the fast measurement loop costs: the agent's CPU (utime + stime from /proc) and RSS with
//! N claims mounted as real tmpfs volumes, against the real test API server, with the loop at its
//! default (`--measure-interval 1s`) and off (`0s`), at the default `--interval 10s`. The
//! difference is the loop's cost. RSS is sampled each second of the window (median and max),
//! and split into anonymous memory (heap, stacks) and file pages (the binary's text) at the end.
//! Needs root and the server (tests/support/kube).
//!
//! `cargo bench --bench measure_cost` runs 500 claims and 60 s windows (`HEADROOM_BENCH_INTERVAL`
//! sets `--interval`, e.g. `1h` for windows without scans); without `--bench`
//! (e.g. `cargo test --benches`) a smoke pass of 10 claims and 3 s windows.

mod support;

use std::process::ExitCode;
use std::time::Duration;

use support::fleet::{cpu_seconds, rss};
use support::kube::cluster::{KubeCluster, POLICY};
use support::kube::server;
use support::node::{MI, fill, wait_for};

/// Resident memory by kind (kB), from `/proc/<pid>/smaps_rollup`: anonymous pages (the heap,
/// malloc arenas, thread stacks) apart from file pages (the binary's text, shared libraries).
fn smaps_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn main() -> ExitCode {
    let full = std::env::args().any(|a| a == "--bench");
    if !server::available("bench measure_cost") {
        return ExitCode::SUCCESS;
    }
    let (n, window) = if full {
        (500, Duration::from_secs(60))
    } else {
        (10, Duration::from_secs(3))
    };
    let mut c = KubeCluster::new();
    let fast = c.fast.clone();
    for i in 0..n {
        let m = c.claim(&format!("c-{i}"), &fast, 16, POLICY);
        fill(&m, 3 * MI);
    }
    println!(
        "| claims | measure interval | CPU (% of one core) | RSS median (MiB) | RSS max (MiB) | anon (MiB) | file (MiB) | threads |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|");
    // HEADROOM_BENCH_MEASURE=800ms runs that setting alone (when profiling one, or weighing
    // another period).
    let only = std::env::var("HEADROOM_BENCH_MEASURE").ok();
    // HEADROOM_BENCH_INTERVAL=1h: one scan at start and none in the window, so the difference
    // between the two settings is the fast loop alone, without the scans' noise.
    let interval = std::env::var("HEADROOM_BENCH_INTERVAL").unwrap_or_else(|_| "10s".to_owned());
    let settings = only.map_or_else(|| vec!["1s".to_owned(), "0s".to_owned()], |m| vec![m]);
    for measure in settings.iter().map(String::as_str) {
        let agent = c.agent(&interval, &["--measure-interval", measure]);
        let pid = agent.child.id();
        wait_for(
            Duration::from_secs(180),
            "every claim's first status",
            || {
                (0..n)
                    .all(|i| c.status_field(&format!("c-{i}"), "state").is_some())
                    .then_some(())
            },
        );
        // Let the start-up work (first LISTs, first statuses) settle.
        std::thread::sleep(Duration::from_secs(if full { 15 } else { 1 }));
        // RSS once a second over the window: a scan's burst (every volume's work at once) is
        // the max, the median is the agent between scans.
        let t0 = cpu_seconds(pid).unwrap_or(0.0);
        let start = std::time::Instant::now();
        let mut rss_kib = Vec::new();
        while start.elapsed() < window {
            std::thread::sleep(Duration::from_secs(1).min(window));
            rss_kib.push(rss(pid).unwrap_or(0) / 1024);
        }
        let used = cpu_seconds(pid).unwrap_or(0.0) - t0;
        rss_kib.sort_unstable();
        let median = rss_kib.get(rss_kib.len() / 2).copied().unwrap_or(0);
        let max = rss_kib.last().copied().unwrap_or(0);
        let pct = 100.0 * used / window.as_secs_f64();
        let mib = |kib: u64| kib as f64 / 1024.0;
        println!(
            "| {n} | {measure} | {pct:.2} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
            mib(median),
            mib(max),
            mib(smaps_kib(pid, "Anonymous")),
            mib(smaps_kib(pid, "Rss") - smaps_kib(pid, "Anonymous")),
            threads(pid)
        );
        // HEADROOM_BENCH_HOLD=FILE keeps the agent running while FILE exists (to attach a
        // profiler or read /proc/<pid>/smaps).
        if let Some(hold) = std::env::var_os("HEADROOM_BENCH_HOLD") {
            std::fs::write(&hold, pid.to_string()).ok();
            eprintln!("agent pid {pid}; holding while {hold:?} exists");
            while std::path::Path::new(&hold).exists() {
                std::thread::sleep(Duration::from_millis(500));
            }
        }
        drop(agent);
    }
    ExitCode::SUCCESS
}
