//! One grow per modification interval: the storage behind some CSI drivers accepts one resize of
//! a volume per interval (AWS EBS: 6 h), so a grow sent inside it fails at the cloud instead of
//! landing. The interval is counted from the last grow in the claim's own history (durable, so
//! a restarted agent or another node sees it too); a grow made then is sized so that, at the
//! learned fill rate, the volume lasts until the next grow is possible and has landed.

use jiff::Timestamp;

use super::budget;
use super::inputs::{GrowKind, Inputs};
use super::lines::Lines;
use super::predictive;
use super::rate::FillRate;
use crate::policy::{MinAvailable, Policy};

/// When the last grow was sent: the newest counted history entry that asked for more (a retry
/// lowers an infeasible request; it is not a modification the storage made).
pub fn last_grow(inputs: &Inputs) -> Option<Timestamp> {
    budget::counted(inputs.history, inputs.now)
        .filter(|a| a.kind != GrowKind::Retry)
        .map(|a| a.at)
        .max()
}

/// When the policy's interval next allows a grow, if it does not now; `None` when no interval
/// applies or it has passed.
pub fn next_grow(inputs: &Inputs, policy: &Policy) -> Option<Timestamp> {
    let interval = policy.modification_interval?;
    let last = last_grow(inputs)?;
    // Compared on `now`'s side: at the ends of time `last + interval` saturates.
    (last > budget::minus(inputs.now, interval)).then(|| budget::plus(last, interval))
}

/// Bytes the claim must grow by so that, filling at `rate`, its lines are not reached before
/// the interval has passed and a grow made then has landed (the lead time). `ratio` is usable
/// filesystem bytes per claim byte. 0 when no interval applies or the volume is not filling.
pub fn lasting_growth(inputs: &Inputs, policy: &Policy, rate: &FillRate, ratio: f64) -> u64 {
    let Some(interval) = policy.modification_interval else {
        return 0;
    };
    let per_second = rate.bytes_per_second;
    let usable_ratio = ratio.is_finite() && ratio > 0.0;
    if !per_second.is_finite() || per_second <= 0.0 || !usable_ratio {
        return 0;
    }
    let horizon = interval.saturating_add(predictive::lead(policy, rate));
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
