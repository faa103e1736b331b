//! One fill, one grow. A resize is in flight until both the claim and the filesystem show it:
//! the claim's status (`status.capacity` below the request, a resize condition) keeps it in
//! flight, and so does a filesystem not yet measured larger after the write, since
//! `status.capacity` is absent on some drivers and set before the node expands the filesystem on
//! others; numbers measured before the write end nothing. Pure: the shells pass
//! the measurement and when it was taken.

use jiff::{SignedDuration, Timestamp};

use super::KubeletVolume;
use crate::decide::budget;
use crate::decide::{Action, ActionResult, ClaimState, FailureCause, Measurement, ResizeState};
use crate::quantity;
use crate::report::MeasuredBy;

/// Filesystems keep a few percent for metadata; under this share of the claim, it did not grow.
/// Only for history entries written before `fs_before` was recorded.
const NOT_EXPANDED_RATIO: f64 = 0.9;

/// A measurement and when it was taken.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Seen {
    pub measurement: Measurement,
    pub by: MeasuredBy,
    pub at: Timestamp,
}

/// The measurement decisions may use: statfs, taken now; else the kubelet's, when fresh and
/// taken after our last write (older numbers still show the volume before that resize, and
/// growing from them grows the same fill twice).
pub fn usable(
    statfs: Option<Measurement>,
    kubelet: Option<KubeletVolume>,
    block_mode: bool,
    last_write: Option<Timestamp>,
    now: Timestamp,
) -> Option<Seen> {
    if let Some(m) = statfs {
        return Some(Seen {
            measurement: m,
            by: MeasuredBy::Statfs,
            at: now,
        });
    }
    let k = kubelet.filter(|k| k.fresh(now) && !block_mode)?;
    let at = k.at?;
    if last_write.is_some_and(|w| at <= w) {
        return None;
    }
    Some(Seen {
        measurement: k.measurement,
        by: MeasuredBy::Kubelet,
        at,
    })
}

/// Did this measurement see the filesystem grown by `a`? `None`: it cannot tell (taken before
/// the write, or the action asked for no growth).
fn shows_growth(a: &Action, seen: &Seen) -> Option<bool> {
    // A request lowered back (a cancelled infeasible resize) waits for no filesystem growth.
    if a.to <= a.from || seen.at <= a.at {
        return None;
    }
    let fs = seen.measurement.capacity_bytes;
    Some(match a.fs_before {
        Some(before) => fs > before,
        None => fs as f64 >= a.to as f64 * NOT_EXPANDED_RATIO,
    })
}

/// Stamps the newest action `landed` when this is the first measurement to show its growth and
/// the claim's `status.capacity` (`capacity`) has reached its size too; `true` when it did (the
/// history then needs writing, once per resize). Not before: the kubelet writes
/// `status.capacity` after growing the filesystem, carrying the claim's resourceVersion, and a
/// history write in between makes its write conflict and wait a reconcile. An action older than
/// `watching_since` (when this agent began measuring) landed unwatched: any time before.
pub fn stamp_landing(
    history: &mut [Action],
    seen: Option<&Seen>,
    capacity: u64,
    watching_since: Timestamp,
) -> bool {
    let Some(a) = history.iter_mut().max_by_key(|a| a.at) else {
        return false;
    };
    match seen {
        Some(s) if a.landed.is_none() && capacity >= a.to && shows_growth(a, s) == Some(true) => {
            a.landed = Some(s.at);
            a.landed_unwatched = a.at < watching_since;
            // Entries written before results were kept stay without one.
            if a.result.is_some() {
                a.result = Some(ActionResult::Succeeded);
            }
            true
        }
        _ => false,
    }
}

/// The evaluation's newest action has grown the filesystem but not yet the claim's
/// `status.capacity`: the kubelet writes that within moments of growing the filesystem, carrying
/// the claim's resourceVersion as it read it, so a write to the claim now would make its write
/// conflict (and retry a reconcile later). The claim is written once the status shows it, and is
/// worth a fresh look soon rather than at the next scan.
pub fn awaits_capacity(eval: &super::Evaluation) -> bool {
    let r = &eval.report;
    let seen = (r.measurement.zip(r.measured_at)).map(|(measurement, at)| Seen {
        measurement,
        by: r.measured_by,
        at,
    });
    growth_awaits_capacity(&eval.history, seen.as_ref(), &r.claim)
}

/// [`awaits_capacity`] from the history, the measurement and the claim. Not once the resize
/// has failed (a status that never comes).
fn growth_awaits_capacity(history: &[Action], seen: Option<&Seen>, claim: &ClaimState) -> bool {
    let Some(a) = history.iter().max_by_key(|a| a.at) else {
        return false;
    };
    let failed = matches!(claim.resize, ResizeState::Failed { .. });
    a.landed.is_none()
        && !failed
        && claim.capacity_bytes < a.to
        && seen.is_some_and(|s| shows_growth(a, s) == Some(true))
}

/// Marks the newest action `Failed` when the claim's resize failed (the storage refused it, or
/// the filesystem did not grow in time) and it is still only `Requested`; `true` when it did
/// (the history then needs writing, once per failure).
pub fn stamp_failure(history: &mut [Action], claim: &ClaimState) -> bool {
    let Some(a) = history.iter_mut().max_by_key(|a| a.at) else {
        return false;
    };
    // A resize waiting for a restart or a detach has not failed: a restart still lands it.
    let failed =
        matches!(&claim.resize, ResizeState::Failed { cause, .. } if !cause.waits_for_the_pod());
    if failed && a.result == Some(ActionResult::Requested) {
        a.result = Some(ActionResult::Failed);
        return true;
    }
    false
}

/// The lead time this claim's own resizes have shown (`rate::learned_lead_time` of how long each
/// took, from its PATCH to `landed`); `None` until one has landed.
pub fn learned_lead(history: &[Action]) -> Option<SignedDuration> {
    let took: Vec<SignedDuration> = history.iter().filter_map(Action::took).collect();
    crate::decide::rate::learned_lead_time(&took)
}

/// The claim's resize state with what its own status cannot show: a resize whose only trace is
/// request > capacity is dated by our history and fails after `timeout`; our last resize stays
/// in flight until a measurement taken after it shows the filesystem larger, and fails as "not
/// expanded" when that has not happened within `timeout`.
pub fn resize_state(
    mut claim: ClaimState,
    history: &[Action],
    seen: Option<&Seen>,
    timeout: SignedDuration,
    now: Timestamp,
) -> ClaimState {
    let Some(a) = history.iter().max_by_key(|a| a.at) else {
        return claim;
    };
    let timed_out = budget::minus(now, timeout) > a.at;
    if let ResizeState::InProgress { since: None } = claim.resize
        && a.to == claim.request_bytes
        && timed_out
    {
        claim.resize = ResizeState::Failed {
            cause: FailureCause::Stuck,
            detail: format!(
                "resize to {} in flight for more than {timeout:#} (since {})",
                quantity::format(a.to),
                a.at
            ),
        };
    }
    if matches!(claim.resize, ResizeState::Failed { .. }) {
        return claim;
    }
    // Grown through the owner: in flight until its operator raises this claim's request, and
    // after `timeout` waiting for it rather than failed (it still lands when the operator acts).
    if a.through_owner && claim.request_bytes < a.to {
        claim.resize = if timed_out {
            ResizeState::Failed {
                cause: FailureCause::AwaitingOwner,
                detail: format!(
                    "the owner's size set to {} at {} (resizeThrough: owner); its operator has not raised this claim (request {}) within {timeout:#}",
                    quantity::format(a.to),
                    a.at,
                    quantity::format(claim.request_bytes)
                ),
            }
        } else {
            ResizeState::InProgress { since: Some(a.at) }
        };
        return claim;
    }
    let expected = a.to > a.from;
    // A resize the claim's own conditions still date (the storage finished its part after our
    // PATCH, e.g. FileSystemResizePending) is timed from them: k8s::claim fails it, or calls it
    // awaiting_remount or awaiting_detach, once they are held past the timeout. Timed from the
    // PATCH instead, a driver that grows the filesystem only at the next mount was first marked
    // failed for the seconds its controller took (seen on the real node).
    let dated_by_claim = matches!(claim.resize, ResizeState::InProgress { since: Some(_) });
    match seen.and_then(|s| shows_growth(a, s).map(|grown| (s, grown))) {
        Some((_, true)) => {}
        Some((s, false)) if timed_out && !dated_by_claim => {
            claim.resize = ResizeState::Failed {
                cause: FailureCause::FilesystemNotExpanded,
                detail: format!(
                    "filesystem not expanded: statfs shows {} {timeout:#} after the resize to {} (at {})",
                    quantity::format(s.measurement.capacity_bytes),
                    quantity::format(a.to),
                    a.at
                ),
            };
        }
        _ if expected && !timed_out => {
            let since = match &claim.resize {
                ResizeState::InProgress { since: Some(t) } => *t,
                _ => a.at,
            };
            claim.resize = ResizeState::InProgress { since: Some(since) };
        }
        _ => {}
    }
    claim
}

#[cfg(test)]
#[path = "inflight_tests.rs"]
mod tests;
