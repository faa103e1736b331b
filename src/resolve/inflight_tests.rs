use proptest::prelude::*;

use super::*;
use crate::decide::{GrowKind, Inputs, PolicyInput, VolumeFacts, decide};
use crate::policy::Policy;
use crate::quantity::GI;

fn ts(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

const TIMEOUT: SignedDuration = SignedDuration::from_mins(30);

fn grow(at: Timestamp, from: u64, to: u64, fs_before: Option<u64>) -> Action {
    Action {
        fs_before,
        ..Action::new(at, GrowKind::Grow, from, to)
    }
}

fn fs(capacity: u64) -> Measurement {
    Measurement {
        capacity_bytes: capacity,
        used_bytes: capacity / 2,
        available_bytes: capacity / 2,
        ..Default::default()
    }
}

fn seen(capacity: u64, at: Timestamp) -> Seen {
    Seen {
        measurement: fs(capacity),
        by: MeasuredBy::Statfs,
        at,
    }
}

fn idle(request: u64, capacity: u64) -> ClaimState {
    ClaimState {
        request_bytes: request,
        capacity_bytes: capacity,
        resize: ResizeState::Idle,
    }
}

#[test]
fn status_capacity_updated_but_filesystem_not_grown_is_in_flight() {
    let at = ts("2026-03-01T12:00:00Z");
    let h = [grow(at, 10 * GI, 12 * GI, Some(10 * GI))];
    let now = at + SignedDuration::from_secs(20);
    let c = resize_state(
        idle(12 * GI, 12 * GI),
        &h,
        Some(&seen(10 * GI, now)),
        TIMEOUT,
        now,
    );
    assert_eq!(c.resize, ResizeState::InProgress { since: Some(at) });
    // The filesystem grew: the resize is over.
    let c = resize_state(
        idle(12 * GI, 12 * GI),
        &h,
        Some(&seen(12 * GI, now)),
        TIMEOUT,
        now,
    );
    assert_eq!(c.resize, ResizeState::Idle);
}

#[test]
fn filesystem_grown_but_status_capacity_not_is_in_flight() {
    // The other half of "both must show it": the node grew the filesystem, the claim's status
    // still says the old size (the resizer has not caught up). Still in flight, from its status.
    let at = ts("2026-03-01T12:00:00Z");
    let h = [grow(at, 10 * GI, 12 * GI, Some(10 * GI))];
    let now = at + SignedDuration::from_secs(20);
    let status = ClaimState {
        resize: ResizeState::InProgress { since: None },
        ..idle(12 * GI, 10 * GI)
    };
    let c = resize_state(status, &h, Some(&seen(12 * GI, now)), TIMEOUT, now);
    assert!(
        matches!(c.resize, ResizeState::InProgress { .. }),
        "{:?}",
        c.resize
    );
}

#[test]
fn claim_without_capacity_is_in_flight_until_the_filesystem_grows() {
    let at = ts("2026-03-01T12:00:00Z");
    let h = [grow(at, 10 * GI, 13 * GI, Some(10 * GI))];
    let now = at + SignedDuration::from_secs(4);
    // status.capacity absent (0): request > capacity says nothing; the filesystem does.
    let c = resize_state(
        idle(13 * GI, 0),
        &h,
        Some(&seen(10 * GI, now)),
        TIMEOUT,
        now,
    );
    assert!(matches!(c.resize, ResizeState::InProgress { .. }));
}

#[test]
fn filesystem_not_grown_within_the_timeout_fails() {
    let at = ts("2026-03-01T12:00:00Z");
    let h = [grow(at, 10 * GI, 12 * GI, Some(10 * GI))];
    let now = at + TIMEOUT + SignedDuration::from_secs(1);
    let c = resize_state(
        idle(12 * GI, 12 * GI),
        &h,
        Some(&seen(10 * GI, now)),
        TIMEOUT,
        now,
    );
    match c.resize {
        ResizeState::Failed { cause, detail } => {
            assert_eq!(cause, FailureCause::FilesystemNotExpanded);
            assert!(detail.starts_with("filesystem not expanded"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn measurements_older_than_the_write_prove_nothing() {
    let at = ts("2026-03-01T12:00:00Z");
    let h = [grow(at, 10 * GI, 12 * GI, Some(10 * GI))];
    let now = at + SignedDuration::from_secs(30);
    let old = seen(12 * GI, at - SignedDuration::from_secs(1));
    let c = resize_state(idle(12 * GI, 12 * GI), &h, Some(&old), TIMEOUT, now);
    assert!(matches!(c.resize, ResizeState::InProgress { .. }));
}

#[test]
fn stale_kubelet_numbers_are_not_used_after_a_write() {
    let at = ts("2026-03-01T12:00:00Z");
    let now = at + SignedDuration::from_mins(1);
    let k = |t: Timestamp| KubeletVolume {
        measurement: fs(10 * GI),
        at: Some(t),
    };
    let before = k(at - SignedDuration::from_secs(30));
    assert_eq!(usable(None, Some(before), false, Some(at), now), None);
    // Fresh and newer than the write: used, and dated by the kubelet, not by the scan.
    let after = k(at + SignedDuration::from_secs(30));
    let s = usable(None, Some(after), false, Some(at), now).expect("usable");
    assert_eq!((s.by, s.at), (MeasuredBy::Kubelet, after.at.expect("at")));
    // statfs always wins, and is dated now.
    let s = usable(Some(fs(GI)), Some(after), false, Some(at), now).expect("usable");
    assert_eq!((s.by, s.at), (MeasuredBy::Statfs, now));
    // Block volumes have no filesystem numbers to fall back on.
    assert_eq!(usable(None, Some(after), true, None, now), None);
}

#[test]
fn old_entries_without_fs_before_compare_with_the_target() {
    let at = ts("2026-03-01T12:00:00Z");
    let h = [grow(at, 10 * GI, 20 * GI, None)];
    let now = at + SignedDuration::from_secs(30);
    let c = resize_state(
        idle(20 * GI, 20 * GI),
        &h,
        Some(&seen(10 * GI, now)),
        TIMEOUT,
        now,
    );
    assert!(matches!(c.resize, ResizeState::InProgress { .. }));
    let c = resize_state(
        idle(20 * GI, 20 * GI),
        &h,
        Some(&seen(19 * GI, now)),
        TIMEOUT,
        now,
    );
    assert_eq!(c.resize, ResizeState::Idle);
}

#[test]
fn lowered_request_waits_for_no_growth() {
    let at = ts("2026-03-01T12:00:00Z");
    let mut a = grow(at, 65 * GI, 15 * GI, Some(15 * GI));
    a.kind = GrowKind::Retry;
    let now = at + TIMEOUT + SignedDuration::from_mins(1);
    let c = resize_state(
        idle(15 * GI, 15 * GI),
        &[a],
        Some(&seen(15 * GI, now)),
        TIMEOUT,
        now,
    );
    assert_eq!(c.resize, ResizeState::Idle);
}

#[test]
fn extreme_dates_do_not_panic() {
    for at in [Timestamp::MIN, Timestamp::MAX] {
        let h = [grow(at, GI, 2 * GI, Some(GI))];
        for now in [Timestamp::MIN, Timestamp::UNIX_EPOCH, Timestamp::MAX] {
            let c = resize_state(idle(2 * GI, 0), &h, Some(&seen(GI, now)), TIMEOUT, now);
            let _ = c.resize;
            let k = KubeletVolume {
                measurement: fs(GI),
                at: Some(at),
            };
            let _ = usable(None, Some(k), false, Some(at), now);
        }
    }
}

/// One simulated volume: a filesystem the resizer grows after a lag, a `status.capacity` it sets
/// at another moment (or never), kubelet numbers refreshed now and then, statfs failing at times.
#[derive(Debug, Clone)]
struct Step {
    used_add: u64,
    statfs_ok: bool,
    kubelet_refresh: bool,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(
        (
            0u64..GI / 2,
            prop::bool::weighted(0.7),
            prop::bool::weighted(0.2),
        )
            .prop_map(|(used_add, statfs_ok, kubelet_refresh)| Step {
                used_add,
                statfs_ok,
                kubelet_refresh,
            }),
        1..120,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Through lagging resizers, lagging or absent `status.capacity`, stale kubelet numbers and
    /// failing statfs, every grow is decided from a measurement of the filesystem taken after the
    /// previous grow completed: one fill, one grow.
    #[test]
    fn no_double_grow(
        trace in steps(),
        fs_lag in 0usize..20,
        capacity_lag in 0usize..20,
        capacity_absent in any::<bool>(),
        start_used in 5 * GI..9 * GI,
    ) {
        let mut policy = Policy { enabled: true, ..Policy::with_limit(1000 * GI) };
        policy.max_actions_per_day = 1000;
        let interval = SignedDuration::from_secs(4);
        let mut now = ts("2026-03-01T12:00:00Z");
        let mut request = 10 * GI;
        let mut fs_size = 10 * GI;
        let mut status_cap: Option<u64> = (!capacity_absent).then_some(request);
        let mut used = start_used;
        let mut history: Vec<Action> = Vec::new();
        let mut kubelet: Option<KubeletVolume> = None;
        // When the current resize was asked for, in steps.
        let mut asked: Option<usize> = None;
        for (i, st) in trace.iter().enumerate() {
            now += interval;
            if let Some(at) = asked {
                if i >= at + fs_lag { fs_size = request; }
                if !capacity_absent && i >= at + capacity_lag { status_cap = Some(request); }
                if fs_size == request && status_cap.is_none_or(|c| c == request) { asked = None; }
            }
            used = (used + st.used_add).min(fs_size);
            let m = Measurement { capacity_bytes: fs_size, used_bytes: used, available_bytes: fs_size - used, ..Default::default() };
            if st.kubelet_refresh {
                kubelet = Some(KubeletVolume { measurement: m, at: Some(now) });
            }
            let statfs = st.statfs_ok.then_some(m);
            let last_write = history.iter().map(|a| a.at).max();
            let seen = usable(statfs, kubelet, false, last_write, now);
            let cap = status_cap.unwrap_or(0);
            let claim = ClaimState {
                request_bytes: request,
                capacity_bytes: cap,
                resize: if status_cap.is_some_and(|c| request > c) {
                    ResizeState::InProgress { since: None }
                } else {
                    ResizeState::Idle
                },
            };
            let claim = resize_state(claim, &history, seen.as_ref(), TIMEOUT, now);
            let facts = VolumeFacts {
                expandable: true,
                unmeasured: seen.is_none(),
                capacity_unknown: capacity_absent,
                ..VolumeFacts::default()
            };
            let d = decide(&Inputs {
                logical: None,
                policy: PolicyInput::Valid(&policy),
                measurement: seen.map(|s| s.measurement).unwrap_or_default(),
                claim: &claim,
                history: &history,
                wal: None,
                facts,
                now,
                fill_rate: None,
            });
            if let Some((to, kind)) = d.grow_to() {
                prop_assert!(!capacity_absent, "grew a claim whose capacity is unknown");
                let s = seen.expect("a grow needs a measurement");
                // The filesystem had finished the previous resize when it was measured...
                prop_assert_eq!(s.measurement.capacity_bytes, request, "step {}: grew from a filesystem not yet at its request", i);
                // ...and it was measured after the previous write.
                if let Some(w) = last_write {
                    prop_assert!(s.at > w, "step {}: grew from numbers taken before the last write", i);
                }
                history.push(Action { action: None, evicted: None, through_owner: false, at: now, kind, from: request, to, node: String::new(), fs_before: Some(s.measurement.capacity_bytes), landed: None, landed_unwatched: false, result: None, instance: None, volume_type: None, tablespace: None, predicted: false, used_percent: None, bytes_per_second: None, approval: None });
                request = to;
                asked = Some(i);
            }
        }
    }
}

#[test]
fn the_first_measurement_showing_growth_stamps_the_landing_once() {
    let at = ts("2026-03-01T12:00:00Z");
    let mut h = vec![
        grow(
            at - SignedDuration::from_hours(2),
            8 * GI,
            10 * GI,
            Some(8 * GI),
        ),
        grow(at, 10 * GI, 12 * GI, Some(10 * GI)),
    ];
    let t = |s| at + SignedDuration::from_secs(s);
    let since = at - SignedDuration::from_hours(3);
    // Not grown yet, and a measurement from before the write: nothing to stamp.
    assert!(!stamp_landing(
        &mut h,
        Some(&seen(10 * GI, t(30))),
        12 * GI,
        since
    ));
    assert!(!stamp_landing(
        &mut h,
        Some(&seen(12 * GI, t(-1))),
        12 * GI,
        since
    ));
    assert!(!stamp_landing(&mut h, None, 12 * GI, since));
    assert!(stamp_landing(
        &mut h,
        Some(&seen(12 * GI, t(45))),
        12 * GI,
        since
    ));
    assert_eq!(h[1].landed, Some(t(45)));
    assert!(!h[1].landed_unwatched);
    assert_eq!(h[0].landed, None, "only the newest action");
    // Later measurements do not move it.
    assert!(!stamp_landing(
        &mut h,
        Some(&seen(12 * GI, t(90))),
        12 * GI,
        since
    ));
    assert_eq!(learned_lead(&h), Some(SignedDuration::from_secs(45)));
    assert!(!stamp_landing(
        &mut [],
        Some(&seen(12 * GI, t(45))),
        12 * GI,
        since
    ));
}

/// The filesystem grown before the kubelet wrote `status.capacity`: no landing yet (a history
/// write now would make the kubelet's status write, which carries the claim's resourceVersion,
/// conflict) and the claim is worth a look again soon; the first measurement once the capacity
/// shows it stamps it, at that time.
#[test]
fn a_landing_is_stamped_once_status_capacity_shows_it_too() {
    let at = ts("2026-03-01T12:00:00Z");
    let mut h = vec![grow(at, 10 * GI, 12 * GI, Some(10 * GI))];
    let t = |s| at + SignedDuration::from_secs(s);
    let since = at - SignedDuration::from_hours(1);
    let (waiting, landed) = (idle(12 * GI, 10 * GI), idle(12 * GI, 12 * GI));
    // Neither grown yet: nothing waits for the status.
    assert!(!growth_awaits_capacity(
        &h,
        Some(&seen(10 * GI, t(10))),
        &waiting
    ));
    let grown = seen(12 * GI, t(20));
    assert!(!stamp_landing(&mut h, Some(&grown), 10 * GI, since));
    assert_eq!(h[0].landed, None);
    assert!(growth_awaits_capacity(&h, Some(&grown), &waiting));
    let failed = ClaimState {
        resize: ResizeState::Failed {
            cause: FailureCause::Stuck,
            detail: String::new(),
        },
        ..waiting.clone()
    };
    assert!(
        !growth_awaits_capacity(&h, Some(&grown), &failed),
        "a status that never comes"
    );
    assert!(stamp_landing(
        &mut h,
        Some(&seen(12 * GI, t(25))),
        12 * GI,
        since
    ));
    assert_eq!(h[0].landed, Some(t(25)));
    assert_eq!(learned_lead(&h), Some(SignedDuration::from_secs(25)));
    assert!(!growth_awaits_capacity(
        &h,
        Some(&seen(12 * GI, t(30))),
        &landed
    ));
}

/// An agent started (restarted, upgraded) after the PATCH first sees the growth hours later:
/// the landing is kept, marked unwatched, and teaches no lead time; the resize before it, watched,
/// still does.
#[test]
fn a_landing_first_seen_by_an_agent_started_after_the_patch_teaches_no_lead_time() {
    let at = ts("2026-03-01T12:00:00Z");
    let mut watched = grow(
        at - SignedDuration::from_hours(30),
        8 * GI,
        10 * GI,
        Some(8 * GI),
    );
    watched.landed = Some(watched.at + SignedDuration::from_secs(40));
    let mut h = vec![watched, grow(at, 10 * GI, 12 * GI, Some(10 * GI))];
    let started = at + SignedDuration::from_hours(5);
    let first_look = started + SignedDuration::from_secs(2);
    assert!(stamp_landing(
        &mut h,
        Some(&seen(12 * GI, first_look)),
        12 * GI,
        started
    ));
    assert_eq!(
        h[1].landed,
        Some(first_look),
        "the time it was first seen grown"
    );
    assert!(h[1].landed_unwatched);
    assert_eq!(h[1].took(), None);
    assert_eq!(learned_lead(&h), Some(SignedDuration::from_secs(40)));
    // Written back and read again, it stays unwatched; a watched landing writes no such field.
    let json = serde_json::to_string(&h).unwrap();
    assert_eq!(json.matches("landed_unwatched").count(), 1, "{json}");
    let back: Vec<Action> = serde_json::from_str(&json).unwrap();
    assert_eq!(back, h);
}

#[test]
fn a_lowered_request_has_no_landing() {
    let at = ts("2026-03-01T12:00:00Z");
    let mut h = vec![grow(at, 12 * GI, 10 * GI, Some(10 * GI))];
    let later = seen(12 * GI, at + SignedDuration::from_secs(5));
    assert!(!stamp_landing(&mut h, Some(&later), 12 * GI, at));
}

/// A resize waiting for the pod's restart has not failed: its entry stays `Requested`, and the
/// restart's growth still stamps it landed.
#[test]
fn a_resize_awaiting_a_remount_is_not_marked_failed() {
    let at = ts("2026-03-01T12:00:00Z");
    let mut h = [Action {
        result: Some(ActionResult::Requested),
        ..grow(at, 10 * GI, 12 * GI, Some(10 * GI))
    }];
    let mut claim = idle(12 * GI, 12 * GI);
    claim.resize = ResizeState::Failed {
        cause: FailureCause::NeedsRemount,
        detail: String::new(),
    };
    assert!(!stamp_failure(&mut h, &claim));
    assert_eq!(h[0].result, Some(ActionResult::Requested));
    claim.resize = ResizeState::Failed {
        cause: FailureCause::Stuck,
        detail: String::new(),
    };
    assert!(stamp_failure(&mut h, &claim));
    assert_eq!(h[0].result, Some(ActionResult::Failed));
}

/// The storage's part ended after the PATCH (FileSystemResizePending set later): the timeout
/// counts from that condition, so a scan between the two deadlines neither fails the resize nor
/// stamps its entry `Failed` (which would also hide it from a primary waiting for its replicas).
#[test]
fn a_resize_the_claim_still_dates_is_timed_from_its_condition() {
    let at = ts("2026-03-01T12:00:00Z");
    let h = [grow(at, 10 * GI, 12 * GI, Some(10 * GI))];
    let condition = at + SignedDuration::from_secs(4);
    let now = at + TIMEOUT + SignedDuration::from_secs(2);
    let mut claim = idle(12 * GI, 10 * GI);
    claim.resize = ResizeState::InProgress {
        since: Some(condition),
    };
    let c = resize_state(claim, &h, Some(&seen(10 * GI, now)), TIMEOUT, now);
    assert_eq!(
        c.resize,
        ResizeState::InProgress {
            since: Some(condition)
        }
    );
}
