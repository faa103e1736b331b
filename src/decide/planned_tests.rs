//! Gates added for issue 13/16: a group member joining its peers waits for a configured window
//! like any planned grow; a claim of unknown size is never grown.

use jiff::Timestamp;

use super::*;
use crate::policy::{MaintenanceWindow, Policy};
use crate::quantity::GI;

fn ts(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

fn decide_at(p: &Policy, facts: VolumeFacts, now: Timestamp) -> Decision {
    let claim = ClaimState {
        request_bytes: 10 * GI,
        capacity_bytes: 10 * GI,
        resize: ResizeState::Idle,
    };
    decide(&Inputs {
        logical: None,
        policy: PolicyInput::Valid(p),
        measurement: Measurement {
            capacity_bytes: 10 * GI,
            used_bytes: GI,
            available_bytes: 9 * GI,
            ..Default::default()
        },
        claim: &claim,
        history: &[],
        wal: None,
        facts,
        now,
        fill_rate: None,
    })
}

#[test]
fn group_grow_waits_for_a_configured_window() {
    let mut p = Policy {
        enabled: true,
        ..Policy::with_limit(100 * GI)
    };
    let facts = VolumeFacts {
        expandable: true,
        group_size: Some(40 * GI),
        ..VolumeFacts::default()
    };
    // No window configured: the member joins its peers at once.
    let tuesday = ts("2026-01-06T12:00:00Z");
    assert_eq!(
        decide_at(&p, facts, tuesday).grow_to(),
        Some((40 * GI, GrowKind::GroupGrow))
    );
    // Sundays 03:00-07:00 UTC: outside it waits, inside it grows.
    p.maintenance_window = Some(MaintenanceWindow::new("0 3 * * 0", "4h", "UTC").expect("window"));
    let d = decide_at(&p, facts, tuesday);
    assert_eq!(d.blocked_reason(), Some(BlockReason::OutsideWindow));
    assert_eq!(d.next_window, Some(ts("2026-01-11T03:00:00Z")));
    assert_eq!(
        decide_at(&p, facts, ts("2026-01-11T04:00:00Z")).grow_to(),
        Some((40 * GI, GrowKind::GroupGrow))
    );
}

#[test]
fn unknown_capacity_blocks_even_an_emergency() {
    let p = Policy {
        enabled: true,
        ..Policy::with_limit(100 * GI)
    };
    let claim = ClaimState {
        request_bytes: 10 * GI,
        capacity_bytes: 0,
        resize: ResizeState::Idle,
    };
    let d = decide(&Inputs {
        logical: None,
        policy: PolicyInput::Valid(&p),
        measurement: Measurement {
            capacity_bytes: 10 * GI,
            used_bytes: 10 * GI - 1,
            available_bytes: 1,
            ..Default::default()
        },
        claim: &claim,
        history: &[],
        wal: None,
        facts: VolumeFacts {
            expandable: true,
            capacity_unknown: true,
            ..VolumeFacts::default()
        },
        now: ts("2026-01-06T12:00:00Z"),
        fill_rate: None,
    });
    assert_eq!(d.blocked_reason(), Some(BlockReason::CapacityUnknown));
}
