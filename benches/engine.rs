//! Decisions per second of the engine, on a mix of threshold and convergent cases.
//! `cargo bench --bench engine` runs the full measurement; under `cargo test` it runs a smoke
//! pass so the bench stays compiled and correct.

use std::hint::black_box;
use std::time::Instant;

use headroom::decide::rate::{self, Sample};
use headroom::decide::{
    Action, ClaimState, GrowKind, Inputs, Measurement, PolicyInput, ResizeState, VolumeFacts,
    WalHealth, decide,
};
use headroom::policy::{MaintenanceWindow, Mode, Policy};
use headroom::quantity::GI;
use jiff::{SignedDuration, Timestamp};

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let n: u64 = if full { 2_000_000 } else { 10_000 };
    let now: Timestamp = "2026-03-08T06:30:00Z".parse().expect("ts");
    let threshold = Policy {
        enabled: true,
        ..Policy::with_limit(1000 * GI)
    };
    let convergent = Policy {
        mode: Mode::Convergent,
        maintenance_window: MaintenanceWindow::new("0 3 * * 0", "4h", "America/New_York").ok(),
        ..threshold.clone()
    };
    let history: Vec<Action> = (0..3)
        .map(|i| Action {
            node: "n".into(),
            ..Action::new(
                now - SignedDuration::from_hours(6 * i),
                GrowKind::Grow,
                10 * GI,
                12 * GI,
            )
        })
        .collect();
    let wal = WalHealth {
        archive_configured: Some(true),
        archive_healthy: Some(true),
        ..WalHealth::default()
    };
    let claim = ClaimState {
        request_bytes: 100 * GI,
        capacity_bytes: 100 * GI,
        resize: ResizeState::Idle,
    };
    let facts = VolumeFacts {
        expandable: true,
        ..VolumeFacts::default()
    };
    for (name, policy) in [("threshold", &threshold), ("convergent", &convergent)] {
        let started = Instant::now();
        let mut grows = 0u64;
        for i in 0..n {
            let used = (i % 100) * GI;
            let d = decide(black_box(&Inputs {
                logical: None,
                policy: PolicyInput::Valid(policy),
                measurement: Measurement {
                    capacity_bytes: 100 * GI,
                    used_bytes: used,
                    available_bytes: 100 * GI - used,
                    inodes_total: 1 << 20,
                    inodes_used: 1 << 10,
                },
                claim: &claim,
                history: &history[..(i % 3) as usize],
                wal: Some(&wal),
                facts,
                now: now + SignedDuration::from_secs((i % 86_400) as i64),
                fill_rate: None,
            }));
            grows += u64::from(d.grow_to().is_some());
        }
        let secs = started.elapsed().as_secs_f64();
        println!(
            "engine/{name}: {n} decisions in {secs:.3} s = {:.0} decisions/s ({grows} grows)",
            n as f64 / secs
        );
    }
    // The fill-rate estimate the predictive trigger reads: once per volume per measurement, over
    // a full window of samples.
    let samples: Vec<Sample> = (0..rate::MAX_SAMPLES as u64)
        .map(|i| Sample {
            seconds: i as f64,
            used_bytes: 10 * GI + i * 50_000_000 + (i % 7) * 1_000_000,
        })
        .collect();
    estimates("rate/estimate", &samples, n / 10);
    // The most the burst search can cost (the samples are a tenant's to shape): a burst every
    // other sample, each larger than all before it together, so each pass leaves out one.
    let mut used = 10 * GI;
    let bursts: Vec<Sample> = (0..rate::MAX_SAMPLES as u64)
        .map(|i| {
            if i % 2 == 1 && i < 118 {
                used += 1 << (i / 2 + 2);
            }
            Sample {
                seconds: i as f64,
                used_bytes: used,
            }
        })
        .collect();
    estimates("rate/estimate, 59 bursts", &bursts, n / 10);
}

/// Times `n` estimates over `samples`.
fn estimates(name: &str, samples: &[Sample], n: u64) {
    let started = Instant::now();
    let mut sum = 0.0;
    for _ in 0..n {
        sum += rate::estimate(black_box(samples)).unwrap_or(0.0);
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{name}: {n} estimates of {} samples in {secs:.3} s = {:.2} µs each (mean {:.0} B/s)",
        samples.len(),
        secs * 1e6 / n as f64,
        sum / n as f64
    );
}
