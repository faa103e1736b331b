//! The engine at the ends of time: `now` and history anywhere in the time type's range,
//! [`Timestamp::MIN`] and [`Timestamp::MAX`] included. Every decision keeps the invariants of
//! [`super::proptests`]; nothing overflows.

use jiff::{SignedDuration, Timestamp};
use proptest::prelude::*;

use super::budget::{CLOCK_SKEW, WINDOW};
use super::proptests::{check_one, facts, policy, wal};
use super::*;
use crate::policy::Policy;
use crate::quantity::GI;

fn any_time() -> impl Strategy<Value = Timestamp> {
    prop_oneof![
        Just(Timestamp::MIN),
        Just(Timestamp::MAX),
        Just(Timestamp::UNIX_EPOCH),
        (Timestamp::MIN.as_second()..=Timestamp::MAX.as_second())
            .prop_map(|s| Timestamp::from_second(s).unwrap_or(Timestamp::UNIX_EPOCH)),
    ]
}

fn action(at: Timestamp, from: u64, to: u64) -> Action {
    Action::new(at, GrowKind::Grow, from, to)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn decisions_at_any_time_keep_every_invariant(
        p in policy(),
        size in prop_oneof![Just(0u64), Just(u64::MAX), 1u64..4096 * GI],
        used in any::<u64>(),
        available in any::<u64>(),
        history in proptest::collection::vec(
            (any_time(), prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()]),
            0..6,
        ),
        w in wal(),
        f in facts(),
        now in any_time(),
    ) {
        let claim = ClaimState { request_bytes: size, capacity_bytes: size, resize: ResizeState::Idle };
        let history: Vec<Action> = history.iter().map(|&(at, to)| action(at, size, to)).collect();
        let inputs = Inputs {
            logical: None,
            policy: PolicyInput::Valid(&p),
            measurement: Measurement {
                capacity_bytes: size,
                used_bytes: used,
                available_bytes: available,
                inodes_total: used,
                inodes_used: available,
            },
            claim: &claim,
            history: &history,
            wal: w.as_ref(),
            facts: f,
            now,
            fill_rate: None,
        };
        let d = decide(&inputs);
        check_one(&p, &inputs, &d)?;
        if let Some(slot) = d.next_slot {
            prop_assert!(slot > now || slot == Timestamp::MAX || now >= slot, "slot {slot} at {now}");
        }
    }
}

#[test]
fn history_at_the_end_of_time_is_not_counted_and_does_not_overflow() {
    let p = Policy {
        enabled: true,
        ..Policy::with_limit(100 * GI)
    };
    let claim = ClaimState {
        request_bytes: 10 * GI,
        capacity_bytes: 10 * GI,
        resize: ResizeState::Idle,
    };
    let now: Timestamp = "2026-03-01T12:00:00Z".parse().expect("ts");
    let far = "9999-12-30T00:00:00Z".parse().expect("ts");
    for history in [
        vec![action(far, GI, 2 * GI); 5],
        vec![action(Timestamp::MAX, GI, 2 * GI)],
        vec![action(Timestamp::MIN, GI, 2 * GI)],
        vec![action(now + CLOCK_SKEW + SignedDuration::from_secs(1), GI, 2 * GI); 3],
    ] {
        let d = decide(&Inputs {
            logical: None,
            policy: PolicyInput::Valid(&p),
            measurement: Measurement {
                capacity_bytes: 10 * GI,
                used_bytes: 9 * GI,
                available_bytes: GI,
                ..Default::default()
            },
            claim: &claim,
            history: &history,
            wal: None,
            facts: VolumeFacts {
                expandable: true,
                ..VolumeFacts::default()
            },
            now,
            fill_rate: None,
        });
        assert!(d.grow_to().is_some(), "{history:?}: {d:?}");
        assert_eq!((d.budget_left, d.next_slot), (3, None));
    }
    // Within the skew allowance an entry counts, and its slot frees a day later.
    let near = now + CLOCK_SKEW;
    let b = budget::Budget::new(&[action(near, GI, 2 * GI)], now, &p);
    assert_eq!((b.used(), b.next_slot()), (1, Some(near + WINDOW)));
    // The slot of an entry at the very end of time saturates instead of overflowing.
    let b = budget::Budget::new(&[action(Timestamp::MAX, GI, 2 * GI)], Timestamp::MAX, &p);
    assert_eq!((b.used(), b.next_slot()), (1, Some(Timestamp::MAX)));
    let b = budget::Budget::new(&[action(Timestamp::MIN, GI, 2 * GI)], Timestamp::MIN, &p);
    assert!(b.used() <= 1 && b.next_slot() <= Some(Timestamp::MIN + WINDOW));
}
