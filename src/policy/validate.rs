//! From a (merged) [`PolicySpec`] to a [`Policy`]: errors refuse the policy, warnings accept it
//! but flag what is probably not what the user meant. Every finding names its YAML path and its
//! message says what to write instead.

pub use super::Finding;
use super::checker::Checker;
pub use super::checker::Context;
use super::defaults::*;
use super::fields::{CONVERGENT_ONLY, FIELDS, THRESHOLD_ONLY};
use super::floor::{self, Floor};
use super::sections::{emergency_grow, modification_interval, predictive, wal_safety, window};
use super::spec::PolicySpec;
use super::value::{self, boolean, size};
use super::{Enforcement, Fallback, MinAvailable, Mode, OfflineExpansion, Policy, Source, Step};
use crate::quantity::format as q;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Validation {
    /// Present exactly when `errors` is empty.
    pub policy: Option<Policy>,
    pub errors: Vec<Finding>,
    pub warnings: Vec<Finding>,
}

/// Parses and validates one whole YAML policy document.
pub fn parse_policy_yaml(text: &str, ctx: &Context) -> Validation {
    match PolicySpec::from_yaml(text, None) {
        Ok(spec) => validate(&spec, ctx),
        Err(e) => Validation {
            policy: None,
            errors: vec![Finding {
                field: "(yaml)".to_string(),
                message: e.to_string(),
            }],
            warnings: Vec::new(),
        },
    }
}

pub fn validate(spec: &PolicySpec, ctx: &Context) -> Validation {
    let mut c = Checker {
        spec,
        errors: spec.problems.clone(),
        warnings: Vec::new(),
    };
    // Every key is read into one draft; its limit is a stand-in until the limit read is known
    // valid, and only then is the draft the policy.
    let mut p = Policy::with_limit(0);
    switches(&mut c, &mut p);
    let limit = limit(&mut c);
    space(&mut c, &mut p);
    timing(&mut c, &mut p, ctx);
    let (_, reclaim_errors) = super::reclaim::check_keys(spec);
    c.errors.extend(reclaim_errors);
    p.emergency_grow = emergency_grow(&mut c, p.mode, p.max_actions_per_day);
    p.wal_safety = wal_safety(&mut c);
    cross_key_errors(&mut c, (p.min_step, p.max_step), p.request, limit);
    policy_warnings(&mut c, &p, limit, ctx);
    let floor = Floor {
        value: p.min_available,
        usage: p.usage_threshold,
        on_claim: ctx.min_available_source.map(Source::on_claim),
    };
    if let Some(current) = ctx.current_size {
        current_size_warnings(&mut c, &p, (current, limit), &floor);
    }
    p.floor_on_claim = floor.on_claim == Some(true);
    let policy = match (c.errors.is_empty(), limit) {
        (true, Some(limit)) => Some(Policy { limit, ..p }),
        _ => None,
    };
    Validation {
        policy,
        errors: c.errors,
        warnings: c.warnings,
    }
}

/// The keys that choose among behaviours: on or off, the mode, the logical volume, how a
/// resize is finished, carried out and written.
fn switches(c: &mut Checker<'_>, p: &mut Policy) {
    p.enabled = c.value("enabled", boolean).unwrap_or(ENABLED);
    p.mode = c.value("mode", value::mode).unwrap_or(MODE);
    p.logical_volume = c
        .value("logicalVolume", value::logical_volume)
        .unwrap_or(LOGICAL_VOLUME);
    p.offline_expansion = c
        .value("offlineExpansion", value::offline_expansion)
        .unwrap_or(OFFLINE_EXPANSION);
    p.node_expansion = c
        .value("nodeExpansion", value::node_expansion)
        .unwrap_or(NODE_EXPANSION);
    p.enforcement = c
        .value("enforcement", value::enforcement)
        .unwrap_or(ENFORCEMENT);
    p.resize_through = c
        .value("resizeThrough", value::resize_through)
        .unwrap_or(RESIZE_THROUGH);
}

/// When a volume grows on space and by how much: the triggers, the steps, the daily budget,
/// convergent mode's request and buffer.
fn space(c: &mut Checker<'_>, p: &mut Policy) {
    (p.usage_threshold, p.min_available, p.fallback) = triggers(c, p.mode);
    p.inode_threshold = c.percent("inodeThreshold", 1, 99, INODE_THRESHOLD);
    p.step = c.value("step", value::step).unwrap_or(STEP);
    p.max_step = c.value("maxStep", size).unwrap_or(MAX_STEP);
    // The default minStep yields to a smaller maxStep written for a small claim: only a
    // minStep the user wrote contradicts maxStep (see `cross_key_errors`).
    p.min_step = c.value("minStep", size).unwrap_or(MIN_STEP.min(p.max_step));
    p.max_actions_per_day = c.count("maxActionsPerDay", 10, MAX_ACTIONS_PER_DAY);
    p.request = c.value("request", size);
    p.target_buffer = c.percent("targetBuffer", 5, 50, TARGET_BUFFER);
    p.pool_reserve = c
        .value("poolReserve", value::pool_reserve)
        .unwrap_or(POOL_RESERVE);
}

/// When a grow may happen: ahead of the fill, the storage's own interval, the window.
fn timing(c: &mut Checker<'_>, p: &mut Policy, ctx: &Context) {
    p.predictive = predictive(c);
    (p.modification_interval, p.modification_budget) = modification_interval(c, ctx);
    p.maintenance_window = window(c, p.mode);
}

/// Warnings about keys that are valid alone but do not do what they seem to beside the others.
fn policy_warnings(c: &mut Checker<'_>, p: &Policy, limit: Option<u64>, ctx: &Context) {
    if p.enabled && p.max_actions_per_day == 0 && p.mode == Mode::Threshold {
        c.warn(
            "maxActionsPerDay",
            "0 with enabled: true means headroom never acts; write 1 or more, or enabled: false"
                .into(),
        );
    }
    step_warnings(c, p.step, p.min_step, limit);
    let evicts = p.offline_expansion == OfflineExpansion::Evict;
    mode_warnings(c, p.mode, (evicts, p.enforcement == Enforcement::Approve));
    if p.wal_safety.acknowledge_wal_risk && ctx.wal_has_own_volume == Some(true) {
        c.warn(
            "walSafety.acknowledgeWALRisk",
            "has no effect: WAL has its own volume, so this volume is not grown on WAL's account; remove it".into(),
        );
    }
    if evicts && p.maintenance_window.is_none() {
        c.warn(
            "offlineExpansion",
            "evict without a maintenance window restarts a pod only past the emergency line (emergencyGrow.criticalThreshold, criticalMinimumFree); write maintenanceWindow.schedule for planned restarts".into(),
        );
    }
}

/// Warnings that need the claim's size (`validate --size`): a limit it reaches, a floor it
/// cannot meet, an emergency line near it.
fn current_size_warnings(
    c: &mut Checker<'_>,
    p: &Policy,
    (current, limit): (u64, Option<u64>),
    floor: &Floor,
) {
    // What the floor's steps are counted with: the engine's own step and limit.
    let mut sizing = Policy::with_limit(limit.unwrap_or(u64::MAX));
    (sizing.step, sizing.min_step, sizing.max_step) = (p.step, p.min_step, p.max_step);
    sizing.max_actions_per_day = p.max_actions_per_day;
    size_warnings(c, current, limit, floor, &sizing);
    // The emergency line also decides what proceeds during a node drain: on a volume not much
    // larger than criticalMinimumFree, nearly every growth counts as an emergency.
    let critical_minimum_free = p.emergency_grow.critical_minimum_free;
    if critical_minimum_free > 0 && critical_minimum_free.saturating_mul(2) >= current {
        c.warn("emergencyGrow.criticalMinimumFree", format!("{} is half or more of the volume ({}), so nearly every check counts as an emergency (growing outside windows and during drains); write a value well below {}", q(critical_minimum_free), q(current), q(current / 2)));
    }
}

/// `limit`: required, and more than zero.
fn limit(c: &mut Checker<'_>) -> Option<u64> {
    let limit = c.value("limit", size);
    if c.spec.get("limit").is_none() {
        c.error(
            "limit",
            "required: write the largest size headroom may grow this volume to, e.g. limit: 100Gi"
                .into(),
        );
    } else if limit == Some(0) {
        c.error(
            "limit",
            "must be more than zero; write the largest size for this volume, e.g. 100Gi".into(),
        );
    }
    limit
}

/// Errors that involve two keys: steps that contradict each other, a request over the limit.
fn cross_key_errors(
    c: &mut Checker<'_>,
    (min_step, max_step): (u64, u64),
    request: Option<u64>,
    limit: Option<u64>,
) {
    if max_step == 0 && c.spec.get("maxStep").is_some() {
        c.error(
            "maxStep",
            "0 would hold every percent step at nothing; write a size such as 16Mi, or remove maxStep".into(),
        );
    } else if min_step > max_step {
        c.error(
            "minStep",
            format!("minStep ({}) is larger than maxStep ({}); make minStep at most {} or raise maxStep to at least {}", q(min_step), q(max_step), q(max_step), q(min_step)),
        );
    }
    if let (Some(r), Some(l)) = (request, limit)
        && r > l
    {
        c.error(
            "request",
            format!(
                "{} is larger than limit ({}); write a request at most {}",
                q(r),
                q(l),
                q(l)
            ),
        );
    }
}

/// A step that more than doubles the volume, a minStep beside a fixed step (which it never
/// applies to), a minStep over the limit. maxStep still bounds a fixed step widened for a fill
/// rate (predictive, interval-lasting), so it draws no warning.
fn step_warnings(c: &mut Checker<'_>, step: Step, min_step: u64, limit: Option<u64>) {
    match step {
        Step::Percent(p) if p > 100 => c.warn(
            "step",
            format!("{p}% more than doubles the volume per action; write 100% or less unless that is intended"),
        ),
        Step::Bytes(_) => {
            if c.spec.get("minStep").is_some() {
                c.warn("minStep", "minStep only bounds a percent step, and step is a fixed size; remove minStep or write step as a percent like 20%".into());
            }
        }
        Step::Percent(_) => {}
    }
    if let Some(l) = limit.filter(|&l| c.spec.get("minStep").is_some() && min_step > l) {
        c.warn("minStep", format!("{} is larger than limit ({}), so every step is capped at the limit; write a minStep below {}", q(min_step), q(l), q(l)));
    }
}

/// Warnings that need the claim's size: a limit it already reaches, a floor it cannot meet.
fn size_warnings(
    c: &mut Checker<'_>,
    current: u64,
    limit: Option<u64>,
    floor: &Floor,
    sizing: &Policy,
) {
    if let Some(l) = limit.filter(|&l| l > 0 && l <= current) {
        c.warn("limit", format!("{} is at or below the current size ({}), so headroom can never grow this volume; write a limit above {}", q(l), q(current), q(current)));
    }
    floor::warning(c, floor, current, sizing);
}

/// Keys of one mode written in the other. `offlineExpansion: evict` uses the window and
/// `emergencyGrow.enabled` in either mode (when a pod may be restarted), `enforcement: approve`
/// the latter (whether a grow past the emergency line waits for an approval).
fn mode_warnings(c: &mut Checker<'_>, mode: Mode, (evicts, approves): (bool, bool)) {
    let (other, this, other_name) = match mode {
        Mode::Threshold => (CONVERGENT_ONLY, "threshold", "convergent"),
        Mode::Convergent => (THRESHOLD_ONLY, "convergent", "threshold"),
    };
    for f in FIELDS {
        let top = f.path.split('.').next().unwrap_or(f.path);
        let restarts = evicts && (top == "maintenanceWindow" || f.path == "emergencyGrow.enabled");
        // `enforcement: approve` grows past the emergency line without approval only with it.
        let approval = approves && f.path == "emergencyGrow.enabled";
        let unused = (other.contains(&top) || other.contains(&f.path)) && !restarts && !approval;
        if unused && c.spec.get(f.path).is_some() {
            c.warn(
                f.path,
                format!("is used only in {other_name} mode and this policy is in {this} mode; remove it or write mode: {other_name}"),
            );
        }
    }
}

/// `usageThreshold` and `minAvailable`, threshold mode's two space triggers. `minAvailable`
/// alone (no `usageThreshold` in any layer, or `usageThreshold: 0`) is a purely absolute trigger,
/// as in the CloudNativePG auto-resize RFC. An invalid `minAvailable` is a warning, not an error:
/// it is ignored and the percent trigger decides (the RFC's fallback), reported on the claim as
/// a [`Fallback`]. Every other invalid key refuses the policy.
fn triggers(c: &mut Checker<'_>, mode: Mode) -> (Option<u8>, MinAvailable, Option<Fallback>) {
    let usage_text = c
        .spec
        .get("usageThreshold")
        .map(|r| r.text.trim().to_string());
    let off = usage_text.as_deref() == Some("0");
    let usage = match usage_text {
        Some(_) if !off => Some(c.percent("usageThreshold", 1, 99, USAGE_THRESHOLD)),
        _ => None,
    };
    let floor = c
        .spec
        .get("minAvailable")
        .map(|r| value::min_available(&r.text));
    match floor {
        Some(Err(m)) => {
            let pct = usage.unwrap_or(USAGE_THRESHOLD);
            c.warn(
                "minAvailable",
                format!("{m}; until then it is ignored and the volume grows at usageThreshold {pct} (the auto-resize RFC's fallback; the claim's status, an Event and headroom_volume_policy_fallback say so)"),
            );
            let fallback = (mode == Mode::Threshold).then_some(Fallback::MinAvailableInvalid {
                usage_threshold: pct,
            });
            (Some(pct), MinAvailable::OFF, fallback)
        }
        Some(Ok(f)) if !f.is_off() => (usage, f, None),
        floor => {
            if off {
                c.error(
                    "usageThreshold",
                    "0 turns the percent trigger off, and no minAvailable is set, so nothing would grow this volume on space; write a percent from 1 to 99, or a minAvailable such as 5Gi (to turn headroom off, write enabled: false)".into(),
                );
            }
            let f = floor.and_then(Result::ok).unwrap_or(MinAvailable::OFF);
            (Some(usage.unwrap_or(USAGE_THRESHOLD)), f, None)
        }
    }
}
