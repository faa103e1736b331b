use jiff::SignedDuration;

use super::*;
use crate::decide::VolumeRole;
use crate::policy::{MaintenanceWindow, Mode, Policy};
use crate::quantity::GI;

fn opts(capacity: u64) -> Options {
    Options {
        capacity,
        interval: SignedDuration::from_secs(10),
        resize_delay: SignedDuration::from_secs(60),
        start: "2026-01-04T00:00:00Z".parse().expect("start"),
        facts: VolumeFacts {
            expandable: true,
            ..VolumeFacts::default()
        },
        storage_rule: None,
    }
}

fn linear(from: u64, to: u64, seconds: u64) -> Trace {
    trace::parse(&format!("seconds,used_bytes\n0,{from}\n{seconds},{to}\n")).expect("trace")
}

#[test]
fn threshold_policy_keeps_a_linear_fill_below_full() {
    let p = Policy {
        enabled: true,
        ..Policy::with_limit(100 * GI)
    };
    // 10Gi volume, 5Gi -> 20Gi over 6 hours.
    let r = simulate(&p, &linear(5 * GI, 20 * GI, 6 * 3600), &opts(10 * GI));
    // 80% of 10Gi at 8Gi: +2Gi; 80% of 12Gi at 9.6Gi: +2.4 -> 15Gi; 80% of 15 at 12: +3 -> 18Gi.
    let sizes: Vec<u64> = r.actions.iter().map(|a| a.to_bytes / GI).collect();
    assert_eq!(sizes, vec![12, 15, 18]);
    // 5Gi + 15Gi * t / 6h reaches 8Gi (80%) at t = 1h12m, itself a 10 s tick.
    assert_eq!(r.actions[0].seconds, 4_320.0);
    // Each grow is in flight for 60 s while usage stays over 80%; then the budget of 3 is spent
    // and the volume fills at 18Gi before the trace ends.
    use BlockReason::{BudgetExhausted, ResizeInProgress};
    let reasons: Vec<_> = r.blocked.iter().map(|b| b.reason).collect();
    assert_eq!(
        reasons,
        vec![
            ResizeInProgress,
            ResizeInProgress,
            ResizeInProgress,
            BudgetExhausted
        ]
    );
    assert_eq!(r.final_capacity_bytes, 18 * GI);
    assert!(r.full_seconds > 0.0 && r.peak_used_percent == 100.0);
}

#[test]
fn resize_delay_blocks_stacking() {
    let p = Policy {
        enabled: true,
        ..Policy::with_limit(100 * GI)
    };
    let mut o = opts(10 * GI);
    o.resize_delay = SignedDuration::from_secs(600);
    // Already over the threshold for 20 minutes: one grow, then in flight, no second grow until
    // the first lands and the volume is under the threshold again.
    let r = simulate(&p, &linear(9 * GI, 9 * GI, 1200), &o);
    assert_eq!(r.actions.len(), 1);
    assert_eq!(r.final_capacity_bytes, 12 * GI);
}

#[test]
fn wal_columns_block_and_unblock() {
    let p = Policy {
        enabled: true,
        ..Policy::with_limit(100 * GI)
    };
    let mut o = opts(10 * GI);
    o.facts.role = VolumeRole::Wal;
    let t = trace::parse(
        "seconds,used_bytes,archive_healthy,pending_wal_files\n0,9000000000,false,5\n600,9000000000,true,0\n1200,9000000000,true,0\n",
    )
    .expect("trace");
    let r = simulate(&p, &t, &o);
    assert_eq!(r.blocked[0].reason, BlockReason::WalArchiveUnhealthy);
    assert_eq!(r.actions.len(), 1);
    assert_eq!(r.actions[0].seconds, 600.0);
}

#[test]
fn convergent_waits_for_the_window_then_converges() {
    let p = Policy {
        enabled: true,
        mode: Mode::Convergent,
        maintenance_window: Some(MaintenanceWindow::new("0 3 * * *", "1h", "UTC").expect("w")),
        ..Policy::with_limit(100 * GI)
    };
    // 9Gi used of 10Gi from midnight: NeedsGrow at once, but the window opens at 03:00.
    let r = simulate(&p, &linear(9 * GI, 9 * GI, 4 * 3600), &opts(10 * GI));
    assert_eq!(r.blocked[0].reason, BlockReason::OutsideWindow);
    assert_eq!(r.actions.len(), 1);
    assert_eq!(r.actions[0].kind, GrowKind::ScheduledGrow);
    assert_eq!(r.actions[0].seconds, 3.0 * 3600.0);
    assert_eq!(r.actions[0].to_bytes, 12 * GI);
}

/// One row a second: `used` bytes at second `t` for `t` in `0..=seconds`.
fn dense(seconds: u64, used: impl Fn(u64) -> u64) -> Trace {
    let mut text = String::from("seconds,used_bytes\n");
    for t in 0..=seconds {
        text.push_str(&format!("{t},{}\n", used(t)));
    }
    trace::parse(&text).expect("trace")
}

#[test]
fn predictive_keeps_a_fast_fill_from_filling_the_volume() {
    let p = Policy {
        enabled: true,
        ..Policy::with_limit(100 * GI)
    };
    // 20Gi claim, 4Gi used, filling at 200 MB/s for 100 s: full at 86 s. The threshold (80%) is
    // crossed at 64 s, and a resize decided then lands after the volume is full.
    let t = dense(100, |s| 4 * GI + 200_000_000 * s);
    let c = compare(&p, &t, &opts(20 * GI));
    assert_eq!(c.threshold_only.peak_used_percent, 100.0);
    assert!(c.threshold_only.full_seconds > 0.0);
    assert!(c.threshold_only.actions.iter().all(|a| !a.predicted));
    // The estimate needs 5 samples; the first 10 s tick after that predicts the crossing.
    let first = &c.predictive.actions[0];
    assert!(first.predicted && first.seconds == 10.0, "{first:?}");
    assert!(c.predictive.peak_used_percent < 80.0, "{:?}", c.predictive);
    assert_eq!(c.predictive.full_seconds, 0.0);
    assert!(c.predictive.peak_used_bytes > c.threshold_only.peak_used_bytes);
}

#[test]
fn a_burst_then_flat_grows_nothing_early() {
    let mut p = Policy {
        enabled: true,
        ..Policy::with_limit(100 * GI)
    };
    p.predictive.enabled = true;
    // 4Gi, a 10Gi bulk load in one second, then quiet for 20 minutes at 70%.
    let t = dense(1260, |s| if s < 60 { 4 * GI } else { 14 * GI });
    let r = simulate(&p, &t, &opts(20 * GI));
    assert!(r.actions.is_empty(), "{:?}", r.actions);
    assert_eq!(r.final_capacity_bytes, 20 * GI);
}

#[test]
fn a_two_row_trace_gives_no_rate_and_predicts_nothing() {
    // The estimator sees the trace's own rows: two rows are too few to estimate from, so the
    // predictive run is the threshold run.
    let p = Policy {
        enabled: true,
        ..Policy::with_limit(100 * GI)
    };
    let c = compare(&p, &linear(5 * GI, 20 * GI, 6 * 3600), &opts(10 * GI));
    assert_eq!(c.threshold_only, c.predictive);
}

/// A policy as the agent validates it for a claim of `driver` (`modificationInterval: auto` is
/// the driver's rule).
fn for_driver(yaml: &str, driver: &str) -> Policy {
    let ctx = crate::policy::Context {
        driver_rule: crate::policy::drivers::rule(driver),
        ..crate::policy::Context::default()
    };
    crate::policy::parse_policy_yaml(yaml, &ctx)
        .policy
        .expect("valid policy")
}

fn on_ebs(capacity: u64) -> Options {
    Options {
        interval: SignedDuration::from_secs(60),
        storage_rule: crate::policy::drivers::rule("ebs.csi.aws.com"),
        ..opts(capacity)
    }
}

/// Issue 40: a fill that speeds up after its first grow needs a second one within three hours.
/// EBS's rule since January 2026 (four per rolling 24 h, each after the last landed) takes it and
/// the volume is never full; under the six-hour rule it was full for most of the fast hour.
#[test]
fn a_fill_that_speeds_up_on_ebs_is_never_full_under_the_2026_rule() {
    let t = trace::parse(include_str!("../../examples/ebs-speed-up.csv")).expect("trace");
    let ebs = "ebs.csi.aws.com";
    let now = simulate(
        &for_driver("enabled: true\nlimit: 1Ti\n", ebs),
        &t,
        &on_ebs(50 * GI),
    );
    assert_eq!(now.full_seconds, 0.0, "{now:?}");
    assert!(now.refused.is_empty(), "{now:?}");
    let at: Vec<f64> = now.actions.iter().map(|a| a.seconds).collect();
    assert!(
        at.len() >= 2 && at[1] - at[0] < 3.0 * 3600.0,
        "grows at {at:?}"
    );
    assert!(at.len() <= 4, "grows at {at:?}");

    let old = "enabled: true\nlimit: 1Ti\nmodificationInterval: 6h\n";
    let before = simulate(&for_driver(old, ebs), &t, &on_ebs(50 * GI));
    assert!(before.full_seconds > 1800.0, "{before:?}");
    assert_eq!(before.peak_used_percent, 100.0);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 48, failure_persistence: None, ..Default::default() })]

    /// Whatever the fill (a rate for each of eight 6-hour legs, up to 40 MB/s), a claim on EBS
    /// is never sent a resize its storage refuses, and so never more than four in 24 h.
    #[test]
    fn no_fill_gets_more_than_four_grows_a_day_on_ebs(
        legs in proptest::collection::vec(0u64..40_000_000, 8),
        predictive in proptest::bool::ANY,
    ) {
        let mut csv = String::from("seconds,used_bytes\n");
        let mut used = 10 * GI;
        for t in (0..48 * 3600).step_by(600) {
            csv.push_str(&format!("{t},{used}\n"));
            used += 600 * legs[t / (6 * 3600)];
        }
        let t = trace::parse(&csv).expect("trace");
        // Room in headroom's own daily budget: the storage's is what must hold it back.
        let yaml = format!("enabled: true\nlimit: 100Ti\nmaxActionsPerDay: 10\ntrigger:\n  predictive: {predictive}\n");
        let mut o = on_ebs(20 * GI);
        o.interval = SignedDuration::from_secs(600);
        let r = simulate(&for_driver(&yaml, "ebs.csi.aws.com"), &t, &o);
        proptest::prop_assert!(r.refused.is_empty(), "{:?}", r.refused);
        let at: Vec<f64> = r.actions.iter().map(|a| a.seconds).collect();
        for (i, a) in at.iter().enumerate() {
            let within = at[i..].iter().take_while(|b| **b - a < 24.0 * 3600.0).count();
            proptest::prop_assert!(within <= 4, "grows at {:?}", at);
        }
    }
}
