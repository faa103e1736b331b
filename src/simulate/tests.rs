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
