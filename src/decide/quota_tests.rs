//! The quota gate: a step cut to what the namespace's ResourceQuotas leave when a smaller one
//! still takes the volume out of its trigger, blocked otherwise. Answers worked out by hand.

use super::tests::{claim, facts, meas, ts};
use super::*;
use crate::policy::Policy;
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

fn under(ceiling: Option<u64>) -> VolumeFacts {
    VolumeFacts {
        quota_ceiling: ceiling,
        ..facts()
    }
}

#[test]
fn a_step_that_fits_is_left_alone() {
    // 85Gi of 100Gi crosses 80 %: +20 % is 120Gi.
    let p = enabled();
    for ceiling in [None, Some(120 * GI), Some(500 * GI)] {
        let d = run(&p, 100 * GI, 85 * GI, under(ceiling));
        assert_eq!(d.grow_to(), Some((120 * GI, GrowKind::Grow)), "{ceiling:?}");
        assert!(d.notes.is_empty(), "{:?}", d.notes);
    }
}

#[test]
fn a_step_over_the_quota_is_cut_when_the_rest_still_does() {
    // Under 80 % needs more than 85 * 20/80 = 21.25Gi free: 106.25Gi at least. 110.5Gi left
    // in the quota: 110Gi (whole Gi), which does.
    let p = enabled();
    let d = run(&p, 100 * GI, 85 * GI, under(Some(110 * GI + GI / 2)));
    assert_eq!(d.grow_to(), Some((110 * GI, GrowKind::Grow)));
    assert_eq!(
        d.notes,
        [Note::QuotaReduced {
            wanted: 120 * GI,
            to: 110 * GI
        }]
    );
    assert_eq!(d.effective_bytes, Some(110 * GI));
}

#[test]
fn a_cut_step_that_would_not_do_is_blocked() {
    let p = enabled();
    // 106Gi would still be over 80 % (85/106 = 80.2 %).
    let d = run(&p, 100 * GI, 85 * GI, under(Some(106 * GI + 900 * MI)));
    assert_eq!(d.blocked_reason(), Some(BlockReason::QuotaExhausted));
    // Nothing left at all.
    let d = run(&p, 100 * GI, 85 * GI, under(Some(100 * GI)));
    assert_eq!(d.blocked_reason(), Some(BlockReason::QuotaExhausted));
    // minStep holds for a percent step: 1Gi more would leave it under the line but minStep
    // asks 5Gi.
    let big_min = Policy {
        min_step: 5 * GI,
        ..enabled()
    };
    let d = run(&big_min, 100 * GI, 81 * GI, under(Some(104 * GI)));
    assert_eq!(d.blocked_reason(), Some(BlockReason::QuotaExhausted));
    let d = run(&big_min, 100 * GI, 81 * GI, under(Some(105 * GI)));
    assert_eq!(d.grow_to(), Some((105 * GI, GrowKind::Grow)));
}

#[test]
fn a_byte_step_is_cut_to_what_the_trigger_needs_only() {
    // 56Mi of 64Mi (87.5 %), step 16Mi: under 80 % needs more than 14Mi free, 6Mi more: 70Mi.
    let p = Policy {
        step: crate::policy::Step::Bytes(16 * MI),
        ..enabled()
    };
    let d = run(&p, 64 * MI, 56 * MI, under(Some(72 * MI)));
    assert_eq!(d.grow_to(), Some((72 * MI, GrowKind::Grow)));
    let d = run(&p, 64 * MI, 56 * MI, under(Some(70 * MI)));
    assert_eq!(d.blocked_reason(), Some(BlockReason::QuotaExhausted));
}

#[test]
fn a_group_member_joins_its_peers_whole_or_not_at_all() {
    let p = enabled();
    let f = VolumeFacts {
        group_size: Some(40 * GI),
        ..under(Some(39 * GI))
    };
    assert_eq!(
        run(&p, 10 * GI, GI, f).blocked_reason(),
        Some(BlockReason::QuotaExhausted)
    );
    let f = VolumeFacts {
        group_size: Some(40 * GI),
        ..under(Some(40 * GI))
    };
    assert_eq!(
        run(&p, 10 * GI, GI, f).grow_to(),
        Some((40 * GI, GrowKind::GroupGrow))
    );
}

#[test]
fn other_reasons_come_first_and_no_need_is_not_a_block() {
    let p = enabled();
    // Balanced: the quota says nothing.
    let d = run(&p, 100 * GI, 10 * GI, under(Some(100 * GI)));
    assert_eq!(
        d.verdict,
        Verdict::NoAction {
            state: State::Balanced
        }
    );
    // At the limit is the reason, not the quota.
    let at = Policy {
        enabled: true,
        ..Policy::with_limit(100 * GI)
    };
    let d = run(&at, 100 * GI, 90 * GI, under(Some(100 * GI)));
    assert_eq!(d.blocked_reason(), Some(BlockReason::AtLimit));
}
