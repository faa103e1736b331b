//! The predictive trigger (`trigger.predictive`, threshold mode): grow before the threshold when
//! the fill rate says it will be crossed before a resize started now could land.

use jiff::SignedDuration;

use super::inputs::{Inputs, Measurement};
use super::lines::Lines;
use super::rate::FillRate;
use crate::policy::Policy;

/// The time a resize takes to land plus the margin: the claim's own when seen, else the policy's.
pub fn lead(policy: &Policy, rate: &FillRate) -> SignedDuration {
    let p = &policy.predictive;
    rate.resize_lead
        .unwrap_or(p.resize_lead_time)
        .saturating_add(p.margin)
}

/// Bytes still to be written before a threshold-mode line (usage or minAvailable) is reached;
/// 0 once it is. A percent line that is not finite (none) is never reached.
pub fn bytes_to_line(m: &Measurement, usage_threshold: f64, min_available: u64) -> u64 {
    let usable = m.used_bytes as f64 + m.available_bytes as f64;
    let to_threshold = if usage_threshold.is_finite() {
        let line = (usable * usage_threshold / 100.0).ceil();
        (line - m.used_bytes as f64).max(0.0) as u64
    } else {
        u64::MAX
    };
    let to_min_available = if min_available > 0 {
        m.available_bytes.saturating_sub(min_available)
    } else {
        u64::MAX
    };
    to_threshold.min(to_min_available)
}

/// Will a threshold-mode trigger (usage or minAvailable) fire within the lead time?
pub fn crosses_soon(inputs: &Inputs, policy: &Policy, rate: &FillRate) -> bool {
    let lines = Lines::of(policy, &inputs.measurement);
    let to_line = bytes_to_line(&inputs.measurement, lines.percent(), lines.min_available);
    let Some(seconds) = rate.seconds_for(to_line) else {
        return false;
    };
    seconds < lead(policy, rate).as_secs_f64()
}

/// A step at least as large as what the fill adds while this resize lands, so a fast fill is not
/// grown in steps it outruns (each one spending the daily budget). Still bounded by maxStep, and
/// the caller caps the size at the limit.
pub fn step(policy: &Policy, rate: &FillRate, step: u64) -> u64 {
    let Some(per_second) = Some(rate.bytes_per_second).filter(|r| r.is_finite() && *r > 0.0) else {
        return step;
    };
    let fill = per_second * lead(policy, rate).as_secs_f64();
    let fill = if fill.is_finite() {
        fill.min(u64::MAX as f64) as u64
    } else {
        u64::MAX
    };
    step.max(fill.min(policy.max_step.max(step)))
}
