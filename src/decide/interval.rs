//! The storage's rule for modifying a volume: some CSI drivers' clouds accept one resize per
//! fixed gap (Hyperdisk: 4 h), others so many per rolling window, each once the previous one has
//! completed (AWS EBS since January 2026: four per 24 h), so a grow sent sooner fails at the cloud
//! instead of landing. Both are counted from the claim's own history (durable, so a restarted
//! agent or another node sees them too). The "previous one completed" half is the in-flight model
//! itself (one fill, one grow: no grow is sent while the last one has not landed), and for the
//! sizing below it means the next grow waits at least until this one has landed. A grow is
//! sized so that, at the learned fill rate, the volume lasts until the next grow is possible
//! and has landed.

use jiff::{SignedDuration, Timestamp};

use super::budget;
use super::inputs::{GrowKind, Inputs};
use super::lines::Lines;
use super::predictive;
use super::rate::FillRate;
use crate::policy::drivers::Budget;
use crate::policy::{MinAvailable, Policy};

/// The grows the storage counted: the counted history entries that asked for more (a retry
/// lowers an infeasible request; it is not a modification the storage made).
fn grows<'a>(inputs: &'a Inputs) -> impl Iterator<Item = Timestamp> + 'a {
    budget::counted(inputs.history, inputs.now)
        .filter(|a| a.kind != GrowKind::Retry)
        .map(|a| a.at)
}

/// When the last grow was sent.
pub fn last_grow(inputs: &Inputs) -> Option<Timestamp> {
    grows(inputs).max()
}

/// When the storage's rule next allows a grow, if it does not now; `None` when no rule applies
/// or it allows one now. The later of the gap since the last grow and, with a budget, the time
/// the oldest of the window's grows leaves it.
pub fn next_grow(inputs: &Inputs, policy: &Policy) -> Option<Timestamp> {
    let gap = policy.modification_interval.and_then(|interval| {
        let last = last_grow(inputs)?;
        // Compared on `now`'s side: at the ends of time `last + interval` saturates.
        (last > budget::minus(inputs.now, interval)).then(|| budget::plus(last, interval))
    });
    let slot = policy
        .modification_budget
        .and_then(|b| slot_frees(inputs, b, None));
    gap.max(slot)
}

/// When a grow frees a place in `b`'s window, if all `b.count` places are taken at `now` (with
/// `extra`, a grow about to be sent, counted too); `None` when one is free.
fn slot_frees(inputs: &Inputs, b: Budget, extra: Option<Timestamp>) -> Option<Timestamp> {
    let since = budget::minus(inputs.now, b.window);
    let mut recent: Vec<Timestamp> = grows(inputs).chain(extra).filter(|t| *t > since).collect();
    let count = usize::try_from(b.count).unwrap_or(usize::MAX);
    if count == 0 || recent.len() < count {
        return None;
    }
    recent.sort_unstable();
    // The grow that must leave the window for the count to drop below the budget.
    Some(budget::plus(recent[recent.len() - count], b.window))
}

/// How long after a grow sent now the next grow is possible: the gap, the time a place frees in
/// the storage's budget window (this grow counted), with `after_landed` at least this grow's
/// lead time, and the time a place frees in the policy's own `maxActionsPerDay` (a grow that
/// spends the last one must last until then too). `None` when the storage has no rule.
pub fn wait_after_grow(
    inputs: &Inputs,
    policy: &Policy,
    lead: SignedDuration,
) -> Option<SignedDuration> {
    let frees = |b: Budget| {
        let frees = slot_frees(inputs, b, Some(inputs.now))
            .map_or(SignedDuration::ZERO, |t| t.duration_since(inputs.now));
        if b.after_landed {
            frees.max(lead)
        } else {
            frees
        }
    };
    let gap = policy.modification_interval;
    let storage = policy.modification_budget.map(frees);
    if gap.is_none() && storage.is_none() {
        return None;
    }
    let own = frees(Budget {
        count: budget::limit(policy, GrowKind::Grow),
        window: budget::WINDOW,
        after_landed: false,
    });
    gap.max(storage).max(Some(own))
}

/// Bytes the claim must grow by so that, filling at `rate`, its lines are not reached before
/// the next grow is possible ([`wait_after_grow`]) and a grow made then has landed (the lead
/// time). `ratio` is usable filesystem bytes per claim byte. 0 when no rule applies or the volume
/// is not filling.
pub fn lasting_growth(inputs: &Inputs, policy: &Policy, rate: &FillRate, ratio: f64) -> u64 {
    let lead = predictive::lead(policy, rate);
    let Some(wait) = wait_after_grow(inputs, policy, lead) else {
        return 0;
    };
    let per_second = rate.bytes_per_second;
    let usable_ratio = ratio.is_finite() && ratio > 0.0;
    if !per_second.is_finite() || per_second <= 0.0 || !usable_ratio {
        return 0;
    }
    let horizon = wait.saturating_add(lead);
    let need = per_second * horizon.as_secs_f64();
    let m = &inputs.measurement;
    let used = m.used_bytes as f64;
    let available = m.available_bytes as f64;
    let usable = used + available;
    let lines = Lines::of(policy, m);
    // Until full when no line applies; each line that does asks for its own share.
    let mut claim_bytes = (need - available) / ratio;
    if let Some(p) = lines.used_percent.filter(|p| *p > 0) {
        let p = f64::from(p) / 100.0;
        claim_bytes = claim_bytes.max(((used + need) / p - usable) / ratio);
    }
    if lines.min_available > 0 {
        // A percent floor grows with the filesystem; a size floor does not.
        let share = match policy.min_available {
            MinAvailable::Percent(q) if lines.fallback.is_none() => q / 100.0,
            _ => 0.0,
        };
        let headroom = available - lines.min_available as f64;
        claim_bytes = claim_bytes.max((need - headroom) / (ratio * (1.0 - share)));
    }
    if claim_bytes.is_finite() && claim_bytes > 0.0 {
        claim_bytes.min(u64::MAX as f64).ceil() as u64
    } else {
        0
    }
}

/// The threshold-mode step widened to [`lasting_growth`], still within `maxStep` (or the step
/// itself when that is larger); the caller caps the size at the limit.
pub fn step(inputs: &Inputs, policy: &Policy, rate: &FillRate, ratio: f64, step: u64) -> u64 {
    let lasting = lasting_growth(inputs, policy, rate, ratio);
    step.max(lasting.min(policy.max_step.max(step)))
}
