//! The rules. One entry point, [`decide`]; every branch returns a [`Decision`].
//!
//! Order of checks: reasons that make any growth wrong whatever the numbers (disabled, invalid
//! policy, shared or unmeasurable volume, failed resize) come first and are reported even when no
//! growth is needed, so an operator sees them before the day they matter. Then the need is
//! computed from the measurement; gates that only matter when growth is needed (in flight, WAL
//! safety, limit, drain, window, cooldown, budget) come after.

use super::budget::Budget;
use super::decision::{BlockReason, Decision, Note, State, Verdict};
use super::inputs::{GrowKind, Inputs, PolicyInput, ResizeState};
use super::lines::Lines;
use super::logical::{budget_history, follow, joining};
use super::{deadline, gates, interval, pool, predictive, quota, wal};
use crate::policy::{Mode, Policy, Step};
use crate::quantity::{GI, round_size};

/// Convergent mode ignores a target less than this fraction above the current size.
pub const MIN_CHANGE_PERCENT: u64 = 5;
/// Convergent mode reports NeedsShrink only when free space exceeds targetBuffer by this much.
pub const SHRINK_MARGIN_POINTS: f64 = 20.0;
/// Convergent mode's step: emergency growth adds at least this percent of the current size and a
/// scheduled grow at most that much...
pub const EMERGENCY_MIN_PERCENT: u64 = 10;
/// ...the step being at least this many bytes...
pub const EMERGENCY_MIN_BYTES: u64 = 2 * GI;
/// ...and at most this many bytes per action, whatever the kind (the RFC's "petabyte problem":
/// one huge resize can keep a cloud volume "optimizing" for hours).
pub const EMERGENCY_MAX_BYTES: u64 = 500 * GI;

/// What the measurement asks for, before the gates.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Need {
    Nothing(State),
    Grow {
        to: u64,
        kind: GrowKind,
        emergency: bool,
    },
    /// Growth is needed but the limit leaves no room.
    AtLimit {
        emergency: bool,
    },
}

pub fn decide(inputs: &Inputs) -> Decision {
    let policy = match inputs.policy {
        PolicyInput::Valid(p) => p,
        PolicyInput::Invalid => {
            // How soon it fills is what makes a refused policy urgent.
            let mut d = Decision::bare(Verdict::Blocked {
                reason: BlockReason::InvalidPolicy,
            });
            d.seconds_to_full = seconds_to_full(inputs);
            return d;
        }
    };
    if !policy.enabled {
        return Decision::bare(Verdict::Blocked {
            reason: BlockReason::Disabled,
        });
    }
    let budget = Budget::new(budget_history(inputs), inputs.now, policy);
    let mut decision = Decision {
        verdict: Verdict::NoAction {
            state: State::Balanced,
        },
        target_bytes: None,
        budget_left: budget.left(),
        next_slot: budget.next_slot(),
        // The open window's own start, not `now`: the value stays the same for the whole window,
        // so the status annotation it lands in is not rewritten every scan.
        next_window: policy
            .maintenance_window
            .as_ref()
            .and_then(|w| w.open_since(inputs.now).or_else(|| w.next_open(inputs.now))),
        seconds_to_full: seconds_to_full(inputs),
        seconds_to_limit: seconds_to_limit(inputs, policy),
        predicted: false,
        emergency: false,
        next_grow: None,
        held_until: None,
        budget: budget.view(),
        effective_bytes: None,
        notes: Vec::new(),
        fallback: None,
        lower_to: None,
        joins: None,
        restart: None,
    };
    // Lowering a refused request cancels a resize: no gate of growth applies to it.
    decision.lower_to = super::recover::lower_to(inputs.claim, inputs.history);
    decision.next_grow = interval::next_grow(inputs, policy);
    if inputs.facts.restoring {
        let current = inputs.claim.current_bytes();
        decision.notes.push(Note::Restoring {
            source: (inputs.facts.group_size)
                .map(|g| g.min(policy.limit))
                .filter(|g| *g > current),
        });
    }
    decision.verdict = verdict(inputs, policy, &budget, &mut decision);
    decision.restart = super::restart::restart(inputs, policy, is_critical(inputs, policy));
    decision.held_until = super::held::held_until(inputs, &budget, &decision);
    if let Verdict::Grow {
        kind: GrowKind::GroupGrow,
        ..
    } = decision.verdict
    {
        decision.joins = joining(inputs).cloned();
    }
    decision.effective_bytes = Some(effective_size(inputs, policy, &decision.verdict));
    decision
}

fn seconds_to_full(inputs: &Inputs) -> Option<f64> {
    inputs
        .fill_rate
        .and_then(|r| r.seconds_for(inputs.measurement.available_bytes))
}

/// From the logical volume's actions (each counted once) and size when the claim shares one,
/// else from its own history and size.
fn seconds_to_limit(inputs: &Inputs, policy: &Policy) -> Option<f64> {
    let (history, size) = match inputs.logical {
        Some(l) => (l.actions.as_slice(), l.size),
        None => (inputs.history, 0),
    };
    let size = size.max(inputs.claim.current_bytes());
    deadline::seconds_to_limit(size, policy.limit, history, inputs.now)
}

/// The size a new claim of this volume should get (the RFC's `effectiveSize`): what this claim
/// is or is being grown to, what its group's largest member is (within the limit), and in
/// convergent mode at least `request`. A new replica created at it does not start small and grow.
fn effective_size(inputs: &Inputs, policy: &Policy, verdict: &Verdict) -> u64 {
    let current = inputs.claim.current_bytes();
    let growing = match verdict {
        Verdict::Grow { to, .. } => *to,
        _ => 0,
    };
    let group = inputs.facts.group_size.unwrap_or(0).min(policy.limit);
    let floor = match policy.mode {
        Mode::Convergent => policy.request.unwrap_or(0),
        Mode::Threshold => 0,
    };
    current.max(growing).max(group).max(floor)
}

fn blocked(reason: BlockReason) -> Verdict {
    Verdict::Blocked { reason }
}

/// The refusals, the need, then the gates of growth in the order the module's doc gives.
fn verdict(inputs: &Inputs, policy: &Policy, budget: &Budget, decision: &mut Decision) -> Verdict {
    if let Some(reason) = gates::refusal(inputs) {
        return blocked(reason);
    }
    let need = match policy.mode {
        Mode::Threshold => threshold_need(inputs, policy, decision),
        Mode::Convergent => convergent_need(inputs, policy, decision),
    };
    let need = group_need(inputs, policy, need);
    let (to, kind, emergency) = match need {
        Need::Nothing(state) => return no_action(inputs, state),
        Need::AtLimit { emergency } => (0, GrowKind::Grow, emergency),
        Need::Grow {
            to,
            kind,
            emergency,
        } => (to, kind, emergency),
    };
    if let Some(reason) = gates::in_flight(inputs) {
        return blocked(reason);
    }
    if inputs.facts.holds_wal()
        && let Some(reason) = wal::gate(inputs, policy, &mut decision.notes)
    {
        return blocked(reason);
    }
    if matches!(need, Need::AtLimit { .. }) {
        return blocked(BlockReason::AtLimit);
    }
    if let Some(reason) = gates::not_now(inputs, policy, decision, (kind, emergency)) {
        return blocked(reason);
    }
    match gates::spent(inputs, policy, budget, kind) {
        // A need of its own the logical volume's budget cannot pay: the member still follows the
        // action its peers already paid for.
        Some(reason) => match follow(inputs, policy) {
            Some(size) => within_quota(inputs, policy, (size, GrowKind::GroupGrow), decision),
            None => blocked(reason),
        },
        None => within_quota(inputs, policy, (to, kind), decision),
    }
}

/// Nothing to grow; a resize still on its way is what the volume is doing.
fn no_action(inputs: &Inputs, state: State) -> Verdict {
    let state = match inputs.claim.resize {
        ResizeState::InProgress { .. } => State::Resizing,
        _ => state,
    };
    Verdict::NoAction { state }
}

/// The grow, cut to what the storage pool gives (less `poolReserve`) when a smaller step
/// still does; blocked when none does (the storage would refuse the resize).
fn within_pool(
    inputs: &Inputs,
    policy: &Policy,
    (to, kind): (u64, GrowKind),
    decision: &mut Decision,
) -> Verdict {
    let current = inputs.claim.current_bytes();
    let Some(ceiling) = inputs
        .facts
        .pool
        .map(|room| pool::ceiling(room, current, policy.pool_reserve))
        .filter(|c| to > *c)
    else {
        return Verdict::Grow { to, kind };
    };
    let floor = quota_floor(inputs, policy, kind);
    match floor.and_then(|f| quota::fit(current, f, ceiling)) {
        Some(fitted) => {
            decision.notes.push(Note::PoolReduced {
                wanted: to,
                to: fitted,
            });
            Verdict::Grow { to: fitted, kind }
        }
        None => {
            // The policy's step, not one widened for the fill rate: the Event names it, and it
            // moves only with the claim's size.
            let step = match policy.mode {
                Mode::Threshold => to.min(current.saturating_add(policy.threshold_step(current))),
                Mode::Convergent => to,
            };
            decision.notes.push(Note::PoolShort {
                needed: step.saturating_sub(current),
                room: ceiling.saturating_sub(current),
            });
            blocked(BlockReason::PoolExhausted)
        }
    }
}

/// The grow, cut to what the namespace's quotas leave when a smaller step still does; blocked
/// when none does (the API server would refuse the write with 403). Then the storage pool's
/// bound.
fn within_quota(
    inputs: &Inputs,
    policy: &Policy,
    (to, kind): (u64, GrowKind),
    decision: &mut Decision,
) -> Verdict {
    let Some(ceiling) = inputs.facts.quota_ceiling.filter(|c| to > *c) else {
        return within_pool(inputs, policy, (to, kind), decision);
    };
    let floor = quota_floor(inputs, policy, kind);
    match floor.and_then(|f| quota::fit(inputs.claim.current_bytes(), f, ceiling)) {
        Some(fitted) => {
            decision.notes.push(Note::QuotaReduced {
                wanted: to,
                to: fitted,
            });
            within_pool(inputs, policy, (fitted, kind), decision)
        }
        None => blocked(BlockReason::QuotaExhausted),
    }
}

/// The least a step cut to fit a quota must still reach: out of the trigger's lines (and at
/// least `minStep` for a percent step), or back under the emergency line. `None` for growth that
/// is all or nothing: a group member joins its peers' size, a scheduled grow its planned step.
fn quota_floor(inputs: &Inputs, policy: &Policy, kind: GrowKind) -> Option<u64> {
    let current = inputs.claim.current_bytes();
    let ratio = usable_ratio(inputs);
    match kind {
        GrowKind::Grow => {
            let m = &inputs.measurement;
            let lines = Lines::of(policy, m);
            let used = m.used_bytes as f64;
            // Free bytes that put the volume under the percent line: used/(used+free) < p.
            let for_percent = lines.used_percent.map_or(0.0, |p| {
                let p = f64::from(p).clamp(1.0, 100.0);
                (used * (100.0 - p) / p).floor() + 1.0
            });
            let free = for_percent.max(lines.min_available as f64);
            let extra = ((free - m.available_bytes as f64).max(0.0) / ratio).ceil();
            let out_of_lines = current.saturating_add(extra.min(u64::MAX as f64) as u64);
            let least = match policy.step {
                Step::Percent(_) => policy.min_step,
                Step::Bytes(_) => 1,
            };
            Some(out_of_lines.max(current.saturating_add(least)))
        }
        GrowKind::EmergencyGrow => Some(emergency_floor(inputs, policy, ratio)),
        GrowKind::ScheduledGrow | GrowKind::GroupGrow | GrowKind::Retry => None,
    }
}

/// A member below its group's size (a replica just created at the template size) joins its
/// peers at once instead of filling first; a larger need of its own still wins, and so does an
/// emergency.
fn group_need(inputs: &Inputs, policy: &Policy, need: Need) -> Need {
    let current = inputs.claim.current_bytes();
    let Some(group) = inputs.facts.group_size.map(|g| g.min(policy.limit)) else {
        return need;
    };
    if group <= current {
        return need;
    }
    if inputs.facts.restoring {
        // A copy of its source needs the source's size, however fast the copy fills it: no
        // step past it, and no waiting for a fill first.
        let emergency = matches!(
            need,
            Need::Grow {
                emergency: true,
                ..
            } | Need::AtLimit { emergency: true }
        );
        return Need::Grow {
            to: group,
            kind: GrowKind::GroupGrow,
            emergency,
        };
    }
    // Sharing a logical volume, a need no larger than the peers' size follows the action that
    // set it rather than spending a slot of its own.
    let joins = joining(inputs).is_some();
    match need {
        Need::Grow { to, .. } if to > group || (to == group && !joins) => need,
        Need::Grow {
            emergency: true, ..
        }
        | Need::AtLimit { emergency: true } => need,
        _ => Need::Grow {
            to: group,
            kind: GrowKind::GroupGrow,
            emergency: false,
        },
    }
}

fn is_critical(inputs: &Inputs, policy: &Policy) -> bool {
    let e = &policy.emergency_grow;
    let no_inode_line = f64::INFINITY;
    inputs.measurement.crosses(
        f64::from(e.critical_threshold),
        e.critical_minimum_free,
        no_inode_line,
    )
}

fn threshold_need(inputs: &Inputs, policy: &Policy, decision: &mut Decision) -> Need {
    let m = &inputs.measurement;
    let lines = Lines::of(policy, m);
    decision.fallback = lines.fallback;
    let triggered = lines.crossed(m, f64::from(policy.inode_threshold));
    // A base backup being restored fills at the copy's rate: extrapolated over a lead time or a
    // modification interval, it sizes the claim for a copy that never ends (to the limit).
    let fill_rate = inputs.fill_rate.filter(|_| !inputs.facts.restoring);
    let rate = if policy.predictive.enabled {
        fill_rate
    } else {
        None
    };
    if !triggered {
        if !rate.is_some_and(|r| predictive::crosses_soon(inputs, policy, &r)) {
            return Need::Nothing(State::Balanced);
        }
        decision.predicted = true;
    }
    // In threshold mode the emergency line only decides what may proceed during a node drain.
    let emergency = is_critical(inputs, policy);
    let current = inputs.claim.current_bytes();
    let step = policy.threshold_step(current);
    let step = rate.map_or(step, |r| predictive::step(policy, &r, step));
    // A fill rate is known whether or not the predictive trigger may act on it; a grow that has
    // to last an interval is sized from it either way.
    let step = fill_rate.map_or(step, |r| {
        interval::step(inputs, policy, &r, usable_ratio(inputs), step)
    });
    let to = policy.grown_by(current, step);
    if to <= current {
        return Need::AtLimit { emergency };
    }
    Need::Grow {
        to,
        kind: GrowKind::Grow,
        emergency,
    }
}

/// Usable filesystem bytes per claim byte (filesystem overhead and root-reserved blocks), so a
/// target leaves the buffer free as `df` will show it, not merely as the claim size suggests.
pub(super) fn usable_ratio(inputs: &Inputs) -> f64 {
    let m = &inputs.measurement;
    let claim = inputs.claim.capacity_bytes.max(m.capacity_bytes);
    if claim == 0 {
        return 1.0;
    }
    let usable = (m.used_bytes as f64 + m.available_bytes as f64) / claim as f64;
    if usable.is_finite() {
        usable.clamp(0.5, 1.0)
    } else {
        1.0
    }
}

fn convergent_need(inputs: &Inputs, policy: &Policy, decision: &mut Decision) -> Need {
    let m = &inputs.measurement;
    let current = inputs.claim.current_bytes();
    let ratio = usable_ratio(inputs);
    let used = m.used_bytes as f64;

    let buffer = f64::from(policy.target_buffer) / 100.0;
    let wanted = (used / (ratio * (1.0 - buffer))).ceil();
    let floor = policy.request.unwrap_or(0);
    let wanted = (wanted.min(u64::MAX as f64) as u64).max(floor);
    let target = round_size(wanted, current).min(policy.limit);
    decision.target_bytes = Some(target);

    // Past the critical line is the RFC's Emergency state, whether or not emergencyGrow may act.
    decision.emergency = is_critical(inputs, policy);
    if policy.emergency_grow.enabled && decision.emergency {
        return emergency_need(inputs, policy, current, ratio);
    }
    let min_change = (current / 100 * MIN_CHANGE_PERCENT).max(1);
    if wanted > current && wanted - current >= min_change {
        if current >= policy.limit {
            return Need::AtLimit { emergency: false };
        }
        if policy.maintenance_window.is_none() {
            // No window configured: only emergencies grow; say what the volume wants.
            return Need::Nothing(State::NeedsGrow);
        }
        // One step per action, as an emergency takes: a target far above the size is reached
        // over several windows, never in one resize the storage may take hours over.
        let step = round_size(current.saturating_add(step_bytes(current)), current);
        return Need::Grow {
            to: target.min(step),
            kind: GrowKind::ScheduledGrow,
            emergency: false,
        };
    }
    let free_percent = 100.0 - m.used_percent();
    if current > policy.limit
        || free_percent > f64::from(policy.target_buffer) + SHRINK_MARGIN_POINTS
    {
        return Need::Nothing(State::NeedsShrink);
    }
    Need::Nothing(State::Balanced)
}

/// Convergent mode's step: 10 % of the size, at least 2Gi, at most 500Gi.
fn step_bytes(current: u64) -> u64 {
    // MIN_BYTES < MAX_BYTES, so this clamp cannot panic.
    (current / 100 * EMERGENCY_MIN_PERCENT).clamp(EMERGENCY_MIN_BYTES, EMERGENCY_MAX_BYTES)
}

/// The size that puts the volume back under the critical line and above the critical free bytes.
fn emergency_floor(inputs: &Inputs, policy: &Policy, ratio: f64) -> u64 {
    let e = &policy.emergency_grow;
    let used = inputs.measurement.used_bytes as f64;
    let under_line = (used * 100.0 / (ratio * f64::from(e.critical_threshold))).floor() + 1.0;
    let with_free = ((used + e.critical_minimum_free as f64) / ratio).ceil();
    under_line.max(with_free).min(u64::MAX as f64) as u64
}

/// Enough to get back under the critical line (and above the critical free bytes), at least
/// 10% / 2Gi, at most 500Gi; beyond the limit only when the policy allows it.
fn emergency_need(inputs: &Inputs, policy: &Policy, current: u64, ratio: f64) -> Need {
    let e = &policy.emergency_grow;
    let needed = emergency_floor(inputs, policy, ratio);
    let least = step_bytes(current);
    let increment = needed
        .saturating_sub(current)
        .clamp(least, EMERGENCY_MAX_BYTES);
    let mut to = round_size(current.saturating_add(increment), current)
        .min(current.saturating_add(EMERGENCY_MAX_BYTES));
    if !e.exceed_limit_on_emergency {
        to = to.min(policy.limit);
    }
    if to <= current {
        return Need::AtLimit { emergency: true };
    }
    Need::Grow {
        to,
        kind: GrowKind::EmergencyGrow,
        emergency: true,
    }
}
