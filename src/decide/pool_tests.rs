//! The pool gate: a step cut to what the storage pool gives (less `poolReserve`, within
//! `maximumVolumeSize`) when a smaller one still takes the volume out of its trigger, blocked
//! with `pool_exhausted` otherwise. Answers worked out by hand.

use super::pool::PoolRoom;
use super::tests::{claim, facts, meas, ts};
use super::*;
use crate::policy::{Policy, PoolReserve};
use crate::quantity::{GI, MI};

fn enabled() -> Policy {
    Policy {
        enabled: true,
        ..Policy::with_limit(1000 * GI)
    }
}

fn run(p: &Policy, size: u64, used: u64, f: VolumeFacts) -> Decision {
    decide(&Inputs {
        logical: None,
        policy: PolicyInput::Valid(p),
        measurement: meas(size, used),
        claim: &claim(size),
        history: &[],
        wal: None,
        facts: f,
        now: ts("2026-01-04T04:00:00Z"),
        fill_rate: None,
    })
}

fn pool(free: u64, max: Option<u64>) -> VolumeFacts {
    VolumeFacts {
        pool: Some(PoolRoom {
            free_bytes: free,
            max_volume_bytes: max,
        }),
        ..facts()
    }
}

#[test]
fn a_step_the_pool_holds_is_left_alone() {
    // 85Gi of 100Gi crosses 80 %: +20 % is 120Gi, 20Gi from the pool.
    let p = enabled();
    for f in [facts(), pool(20 * GI, None), pool(500 * GI, Some(120 * GI))] {
        let d = run(&p, 100 * GI, 85 * GI, f);
        assert_eq!(d.grow_to(), Some((120 * GI, GrowKind::Grow)), "{f:?}");
        assert!(d.notes.is_empty(), "{:?}", d.notes);
    }
}

#[test]
fn a_step_over_the_pool_is_cut_when_the_rest_still_does() {
    // Under 80 % needs 106.25Gi at least; 10.5Gi free: 110Gi (whole Gi).
    let p = enabled();
    let d = run(&p, 100 * GI, 85 * GI, pool(10 * GI + GI / 2, None));
    assert_eq!(d.grow_to(), Some((110 * GI, GrowKind::Grow)));
    assert_eq!(
        d.notes,
        [Note::PoolReduced {
            wanted: 120 * GI,
            to: 110 * GI
        }]
    );
    // maximumVolumeSize cuts the same way.
    let d = run(&p, 100 * GI, 85 * GI, pool(500 * GI, Some(108 * GI)));
    assert_eq!(d.grow_to(), Some((108 * GI, GrowKind::Grow)));
}

#[test]
fn the_reserve_is_kept_out_of_the_step() {
    // 20Gi free, 12Gi kept: 8Gi to give, 108Gi does.
    let p = Policy {
        pool_reserve: PoolReserve::Bytes(12 * GI),
        ..enabled()
    };
    let d = run(&p, 100 * GI, 85 * GI, pool(20 * GI, None));
    assert_eq!(d.grow_to(), Some((108 * GI, GrowKind::Grow)));
    // Half of 10Gi kept: 5Gi, 105Gi would still be over 80 %.
    let half = Policy {
        pool_reserve: PoolReserve::Percent(50.0),
        ..enabled()
    };
    let d = run(&half, 100 * GI, 85 * GI, pool(10 * GI, None));
    assert_eq!(d.blocked_reason(), Some(BlockReason::PoolExhausted));
}

#[test]
fn a_full_pool_blocks_and_says_what_was_needed() {
    let p = enabled();
    let d = run(&p, 100 * GI, 85 * GI, pool(3 * GI, None));
    assert_eq!(d.blocked_reason(), Some(BlockReason::PoolExhausted));
    assert_eq!(
        d.notes,
        [Note::PoolShort {
            needed: 20 * GI,
            room: 3 * GI
        }]
    );
    let d = run(&p, 100 * GI, 85 * GI, pool(0, None));
    assert_eq!(d.blocked_reason(), Some(BlockReason::PoolExhausted));
    // A volume already past maximumVolumeSize has no room: no grow, nothing wraps.
    let d = run(&p, 100 * GI, 85 * GI, pool(500 * GI, Some(50 * GI)));
    assert_eq!(d.blocked_reason(), Some(BlockReason::PoolExhausted));
    assert_eq!(
        d.notes,
        [Note::PoolShort {
            needed: 20 * GI,
            room: 0
        }]
    );
}

#[test]
fn the_quota_and_the_pool_both_cut_the_step() {
    // The quota leaves 112Gi, the pool 9Gi: 109Gi, both notes said.
    let p = enabled();
    let f = VolumeFacts {
        quota_ceiling: Some(112 * GI),
        ..pool(9 * GI, None)
    };
    let d = run(&p, 100 * GI, 85 * GI, f);
    assert_eq!(d.grow_to(), Some((109 * GI, GrowKind::Grow)));
    assert_eq!(d.notes.len(), 2, "{:?}", d.notes);
}

#[test]
fn a_group_member_joins_its_peers_whole_or_not_at_all() {
    let p = enabled();
    let f = VolumeFacts {
        group_size: Some(40 * GI),
        ..pool(29 * GI, None)
    };
    assert_eq!(
        run(&p, 10 * GI, GI, f).blocked_reason(),
        Some(BlockReason::PoolExhausted)
    );
    let f = VolumeFacts {
        group_size: Some(40 * GI),
        ..pool(30 * GI, None)
    };
    assert_eq!(
        run(&p, 10 * GI, GI, f).grow_to(),
        Some((40 * GI, GrowKind::GroupGrow))
    );
}

#[test]
fn no_need_is_not_a_block_and_small_claims_cut_in_mebibytes() {
    let p = enabled();
    let d = run(&p, 100 * GI, 10 * GI, pool(0, None));
    assert_eq!(
        d.verdict,
        Verdict::NoAction {
            state: State::Balanced
        }
    );
    // 56Mi of 64Mi, step 16Mi: 70Mi is the least that does, 7.5Mi free gives 71Mi.
    let small = Policy {
        step: crate::policy::Step::Bytes(16 * MI),
        ..enabled()
    };
    let d = run(&small, 64 * MI, 56 * MI, pool(7 * MI + MI / 2, None));
    assert_eq!(d.grow_to(), Some((71 * MI, GrowKind::Grow)));
}
