use jiff::{SignedDuration, Timestamp};

use super::*;
use crate::decide::{ClaimState, GrowKind, ResizeState};
use crate::k8s::owner::{CNPG_CLUSTER, Declared, Field, Target};
use crate::quantity::GI;
use crate::resolve::inflight::resize_state;

const FIELD: &str = "Cluster db/pg spec.storage.size";

fn ts(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

fn owner_policy() -> Policy {
    let mut p = Policy::with_limit(100 * GI);
    p.resize_through = ResizeThrough::Owner;
    p
}

fn through(at: &str, from: u64, to: u64) -> Action {
    Action {
        through_owner: true,
        ..Action::new(ts(at), GrowKind::Grow, from, to)
    }
}

fn seen(bytes: u64) -> Seen {
    let target = Target {
        kind: CNPG_CLUSTER,
        namespace: "db".into(),
        name: "pg".into(),
        field: Field::Path(&["spec", "storage", "size"]),
    };
    let declared = Declared {
        bytes,
        resource_version: "1".into(),
        index: None,
    };
    Seen {
        field: FIELD.into(),
        declared: Ok((target, declared)),
    }
}

#[test]
fn an_owner_lowered_under_what_headroom_set_is_reverted_and_says_both_sizes() {
    let history = [through("2026-01-01T00:00:00Z", GI, 2 * GI)];
    let p = owner_policy();
    let (got, message) = problem(Some(&seen(GI)), Some(&p), &history, None).unwrap();
    assert_eq!(got, OwnerProblem::Reverted);
    assert!(
        message.contains("Cluster db/pg spec.storage.size is 1Gi, lower than the 2Gi"),
        "{message}"
    );
    // At or above what headroom set: no problem.
    assert_eq!(problem_of(2 * GI, &history, &p), None);
    assert_eq!(problem_of(3 * GI, &history, &p), None);
}

fn problem_of(bytes: u64, history: &[Action], p: &Policy) -> Option<OwnerProblem> {
    problem(Some(&seen(bytes)), Some(p), history, None).map(|(p, _)| p)
}

#[test]
fn a_peers_grow_through_the_owner_counts_as_set_and_a_claim_grow_does_not() {
    let p = owner_policy();
    let logical = Logical {
        actions: vec![through("2026-01-01T00:00:00Z", GI, 4 * GI)],
        ..Logical::default()
    };
    let got = problem(Some(&seen(2 * GI)), Some(&p), &[], Some(&logical));
    assert_eq!(got.map(|(p, _)| p), Some(OwnerProblem::Reverted));
    // Grown as a claim before (resizeThrough: claim): the owner was never set by headroom.
    let own = [Action::new(
        ts("2026-01-01T00:00:00Z"),
        GrowKind::Grow,
        GI,
        4 * GI,
    )];
    assert_eq!(problem_of(GI, &own, &p), None);
}

#[test]
fn an_unreadable_owner_is_invalid_with_its_message_and_a_claim_policy_reads_nothing() {
    let p = owner_policy();
    let bad = Seen {
        field: FIELD.into(),
        declared: Err("Cluster db/pg: spec.storage.size is missing".into()),
    };
    let (got, message) = problem(Some(&bad), Some(&p), &[], None).unwrap();
    assert_eq!(got, OwnerProblem::Invalid);
    assert!(
        message.starts_with("Cluster db/pg: spec.storage.size is missing"),
        "{message}"
    );
    let claim = Policy::with_limit(100 * GI);
    assert_eq!(problem(Some(&bad), Some(&claim), &[], None), None);
    assert_eq!(problem(None, Some(&p), &[], None), None);
}

#[test]
fn a_grow_through_the_owner_waits_for_the_operator_then_is_awaiting_owner() {
    let timeout = SignedDuration::from_mins(5);
    let history = [through("2026-01-01T00:00:00Z", GI, 2 * GI)];
    let claim = ClaimState {
        request_bytes: GI,
        capacity_bytes: GI,
        resize: ResizeState::Idle,
    };
    let soon = ts("2026-01-01T00:04:00Z");
    let late = ts("2026-01-01T00:06:00Z");
    let state = resize_state(claim.clone(), &history, None, timeout, soon);
    assert_eq!(
        state.resize,
        ResizeState::InProgress {
            since: Some(history[0].at)
        }
    );
    assert!(watched(&history));
    let state = resize_state(claim.clone(), &history, None, timeout, late);
    let ResizeState::Failed { cause, detail } = state.resize else {
        panic!("expected awaiting the owner, got {:?}", state.resize);
    };
    assert_eq!(cause, crate::decide::FailureCause::AwaitingOwner);
    assert!(detail.contains("the owner's size set to 2Gi"), "{detail}");
    // Once headroom has set the owner's size it is read every scan, applied or not; a history
    // without a grow through the owner (a claim grown as a claim, a failed raise) is never read.
    assert!(!watched(&[]));
    let mut as_claim = through("2026-01-01T00:00:00Z", GI, 2 * GI);
    as_claim.through_owner = false;
    assert!(!watched(&[as_claim]));
}
