//! From a (merged) [`PolicySpec`] to a [`Policy`]: errors refuse the policy, warnings accept it
//! but flag what is probably not what the user meant. Every finding names its YAML path and its
//! message says what to write instead.

pub use super::Finding;
use super::defaults::*;
use super::fields::{CONVERGENT_ONLY, FIELDS, THRESHOLD_ONLY};
use super::spec::PolicySpec;
use super::value::{self, boolean, integer, size};
use super::window::{MaintenanceWindow, WindowError};
use super::{Fallback, MinAvailable, Mode, Policy, Step};
use crate::quantity::format as q;

/// Facts about the volume a policy is for, when known; they enable the warnings that need them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Context {
    pub current_size: Option<u64>,
    pub wal_has_own_volume: Option<bool>,
    /// The documented least time between two resizes of a volume of the claim's CSI driver
    /// ([`super::drivers`]), when the driver is known and has one: `modificationInterval: auto`.
    pub driver_interval: Option<jiff::SignedDuration>,
}

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

struct Checker<'a> {
    spec: &'a PolicySpec,
    errors: Vec<Finding>,
    warnings: Vec<Finding>,
}

impl Checker<'_> {
    fn finding(&self, path: &str, message: String) -> Finding {
        let message = match self.spec.get(path).and_then(|r| r.origin.as_deref()) {
            Some(origin) => format!("{message} (set by {origin})"),
            None => message,
        };
        Finding {
            field: path.to_string(),
            message,
        }
    }
    fn error(&mut self, path: &str, message: String) {
        let f = self.finding(path, message);
        self.errors.push(f);
    }
    fn warn(&mut self, path: &str, message: String) {
        let f = self.finding(path, message);
        self.warnings.push(f);
    }
    /// The parsed value of a key; `None` when absent or invalid (then an error is recorded).
    fn value<T>(&mut self, path: &str, parse: impl FnOnce(&str) -> Result<T, String>) -> Option<T> {
        let text = self.spec.get(path)?.text.clone();
        parse(&text).map_err(|m| self.error(path, m)).ok()
    }
    fn percent(&mut self, path: &str, min: u64, max: u64, default: u8) -> u8 {
        let what = format!("a whole percent from {min} to {max}");
        let v = self.value(path, |t| integer(t, min, max, &what));
        v.and_then(|n| u8::try_from(n).ok()).unwrap_or(default)
    }
    fn count(&mut self, path: &str, max: u64, default: u32) -> u32 {
        let what = format!("a whole number from 0 to {max}");
        let v = self.value(path, |t| integer(t, 0, max, &what));
        v.and_then(|n| u32::try_from(n).ok()).unwrap_or(default)
    }
}

pub fn validate(spec: &PolicySpec, ctx: &Context) -> Validation {
    let mut c = Checker {
        spec,
        errors: spec.problems.clone(),
        warnings: Vec::new(),
    };
    let enabled = c.value("enabled", boolean).unwrap_or(ENABLED);
    let mode = c.value("mode", value::mode).unwrap_or(MODE);

    let limit = limit(&mut c);
    let (usage_threshold, min_available, fallback) = triggers(&mut c, mode);
    let inode_threshold = c.percent("inodeThreshold", 1, 99, INODE_THRESHOLD);
    let step = c.value("step", value::step).unwrap_or(STEP);
    let min_step = c.value("minStep", size).unwrap_or(MIN_STEP);
    let max_step = c.value("maxStep", size).unwrap_or(MAX_STEP);
    let max_actions = c.count("maxActionsPerDay", 10, MAX_ACTIONS_PER_DAY);
    let request = c.value("request", size);
    let target_buffer = c.percent("targetBuffer", 5, 50, TARGET_BUFFER);
    let predictive = predictive(&mut c);
    let modification_interval = modification_interval(&mut c, ctx);
    let window = window(&mut c, mode);
    let (_, reclaim_errors) = super::reclaim::check_keys(spec);
    c.errors.extend(reclaim_errors);

    let emergency_grow = emergency_grow(&mut c, mode, max_actions);

    let wal_safety = wal_safety(&mut c);

    cross_key_errors(&mut c, (min_step, max_step), request, limit);
    // Warnings.
    if enabled && max_actions == 0 && mode == Mode::Threshold {
        c.warn(
            "maxActionsPerDay",
            "0 with enabled: true means headroom never acts; write 1 or more, or enabled: false"
                .into(),
        );
    }
    step_warnings(&mut c, step, min_step, limit);
    mode_warnings(&mut c, mode);
    if wal_safety.acknowledge_wal_risk && ctx.wal_has_own_volume == Some(true) {
        c.warn(
            "walSafety.acknowledgeWALRisk",
            "has no effect: WAL has its own volume, so this volume is not grown on WAL's account; remove it".into(),
        );
    }
    if let Some(current) = ctx.current_size {
        size_warnings(&mut c, current, limit, (min_available, usage_threshold));
        // The emergency line also decides what proceeds during a node drain: on a volume not much
        // larger than criticalMinimumFree, nearly every growth counts as an emergency.
        let critical_minimum_free = emergency_grow.critical_minimum_free;
        if critical_minimum_free > 0 && critical_minimum_free.saturating_mul(2) >= current {
            c.warn("emergencyGrow.criticalMinimumFree", format!("{} is half or more of the volume ({}), so nearly every check counts as an emergency (growing outside windows and during drains); write a value well below {}", q(critical_minimum_free), q(current), q(current / 2)));
        }
    }

    let policy = match (c.errors.is_empty(), limit) {
        (true, Some(limit)) => {
            let mut p = Policy::with_limit(limit);
            p.enabled = enabled;
            p.mode = mode;
            p.usage_threshold = usage_threshold;
            p.min_available = min_available;
            p.inode_threshold = inode_threshold;
            p.step = step;
            p.min_step = min_step;
            p.max_step = max_step;
            p.max_actions_per_day = max_actions;
            p.request = request;
            p.target_buffer = target_buffer;
            p.predictive = predictive;
            p.modification_interval = modification_interval;
            p.maintenance_window = window;
            p.emergency_grow = emergency_grow;
            p.wal_safety = wal_safety;
            p.fallback = fallback;
            Some(p)
        }
        _ => None,
    };
    Validation {
        policy,
        errors: c.errors,
        warnings: c.warnings,
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
    if min_step > max_step {
        let (field, other) = if c.spec.get("minStep").is_some() {
            ("minStep", "maxStep")
        } else {
            ("maxStep", "minStep")
        };
        c.error(
            field,
            format!("minStep ({}) is larger than maxStep ({}); make minStep at most {} or raise {other}", q(min_step), q(max_step), q(max_step)),
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

/// A step that more than doubles the volume, bounds that do not apply to a fixed step, a
/// minStep over the limit.
fn step_warnings(c: &mut Checker<'_>, step: Step, min_step: u64, limit: Option<u64>) {
    match step {
        Step::Percent(p) if p > 100 => c.warn(
            "step",
            format!("{p}% more than doubles the volume per action; write 100% or less unless that is intended"),
        ),
        Step::Bytes(_) => {
            for k in ["minStep", "maxStep"] {
                if c.spec.get(k).is_some() {
                    c.warn(k, format!("{k} only bounds a percent step, and step is a fixed size; remove {k} or write step as a percent like 20%"));
                }
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
    (min_available, usage_threshold): (MinAvailable, Option<u8>),
) {
    if let Some(l) = limit.filter(|&l| l > 0 && l <= current) {
        c.warn("limit", format!("{} is at or below the current size ({}), so headroom can never grow this volume; write a limit above {}", q(l), q(current), q(current)));
    }
    floor_warning(c, min_available, usage_threshold, current);
}

fn mode_warnings(c: &mut Checker<'_>, mode: Mode) {
    let (other, this, other_name) = match mode {
        Mode::Threshold => (CONVERGENT_ONLY, "threshold", "convergent"),
        Mode::Convergent => (THRESHOLD_ONLY, "convergent", "threshold"),
    };
    for f in FIELDS {
        let top = f.path.split('.').next().unwrap_or(f.path);
        if other.contains(&top) && c.spec.get(f.path).is_some() {
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

/// A floor the claim cannot meet at its size, even empty: the engine does not apply it until the
/// claim is larger (it would grow an empty claim action after action) and says so on the claim;
/// `validate` says it first.
fn floor_warning(c: &mut Checker<'_>, floor: MinAvailable, usage: Option<u8>, current: u64) {
    let bytes = floor.bytes(current);
    if bytes == 0 || bytes < current {
        return;
    }
    let pct = usage.unwrap_or(USAGE_THRESHOLD);
    c.warn(
        "minAvailable",
        format!("{} can never be met at the claim's size ({}): it would grow the claim empty, so headroom does not apply it until the claim is larger and grows at usageThreshold {pct} meanwhile (the claim's status and an Event say so); write a value well below {}", q(bytes), q(current), q(current)),
    );
}

/// A duration key in `min..=max`, written like `2m` or `90s`.
fn duration(
    c: &mut Checker<'_>,
    path: &str,
    default: &str,
    min: jiff::SignedDuration,
    max: jiff::SignedDuration,
) -> jiff::SignedDuration {
    let what = format!("a duration from {:#} to {:#}, e.g. {default}", min, max);
    let v = c.value(path, |t| {
        let d: jiff::SignedDuration = t
            .trim()
            .parse()
            .map_err(|_| format!("'{}' is not a duration; write {what}", t.trim()))?;
        if d < min || d > max {
            return Err(format!("{:#} is out of range; write {what}", d));
        }
        Ok(d)
    });
    // The defaults are constants of this crate, so they parse; the zero fallback is unreachable.
    v.unwrap_or_else(|| default.parse().unwrap_or(min))
}

/// The `walSafety` keys. 0 turns `maxPendingWALFiles`, `maxSlotRetentionBytes` and
/// `maxPendingWALAge` off, as the CloudNativePG RFC defines them; headroom read 0 as "block on
/// any" before, so a 0 is warned about.
fn wal_safety(c: &mut Checker<'_>) -> super::WalSafety {
    let max_pending = c
        .value("walSafety.maxPendingWALFiles", |t| {
            integer(
                t,
                0,
                u64::MAX,
                "a number of WAL files, e.g. 100; 0 turns the check off",
            )
        })
        .unwrap_or(MAX_PENDING_WAL_FILES);
    if max_pending == 0 && c.spec.get("walSafety.maxPendingWALFiles").is_some() {
        c.warn(
            "walSafety.maxPendingWALFiles",
            "0 turns the pending-files check off (as in the CloudNativePG RFC); it no longer blocks on any pending segment: to block on one, write 1".into(),
        );
    }
    let max_slot = c.value("walSafety.maxSlotRetentionBytes", size);
    if max_slot == Some(0) {
        c.warn(
            "walSafety.maxSlotRetentionBytes",
            "0 turns the slot check off (as in the CloudNativePG RFC); it no longer blocks on any inactive slot: to block on any retention, write 1".into(),
        );
    }
    let age = c.value("walSafety.maxPendingWALAge", |t| {
        let t = t.trim();
        if t == "0" {
            return Ok(0);
        }
        let d: jiff::SignedDuration = t.parse().map_err(|_| {
            format!("'{t}' is not a duration; write e.g. {MAX_PENDING_WAL_AGE}, or 0 to turn the check off")
        })?;
        u64::try_from(d.as_secs())
            .ok()
            .filter(|&s| s <= 7 * 86_400)
            .ok_or_else(|| format!("{d:#} is out of range; write 0 to 7 days"))
    });
    super::WalSafety {
        acknowledge_wal_risk: c
            .value("walSafety.acknowledgeWALRisk", boolean)
            .unwrap_or(ACKNOWLEDGE_WAL_RISK),
        require_archive_healthy: c
            .value("walSafety.requireArchiveHealthy", boolean)
            .unwrap_or(REQUIRE_ARCHIVE_HEALTHY),
        max_pending_wal_files: max_pending,
        max_slot_retention_bytes: max_slot.filter(|&b| b > 0),
        max_pending_wal_age_seconds: age.unwrap_or(MAX_PENDING_WAL_AGE_SECONDS),
        alert_on_resize: c
            .value("walSafety.alertOnResize", boolean)
            .unwrap_or(ALERT_ON_RESIZE),
    }
}

fn predictive(c: &mut Checker<'_>) -> super::Predictive {
    use jiff::SignedDuration as D;
    let given = c.value("trigger.predictive", boolean);
    let enabled = given.unwrap_or(PREDICTIVE);
    // A bad trigger.predictive is already an error; the keys it governs need no second word.
    let refused = given.is_none() && c.spec.get("trigger.predictive").is_some();
    let lead = duration(
        c,
        "trigger.resizeLeadTime",
        RESIZE_LEAD_TIME,
        D::from_secs(1),
        D::from_hours(24),
    );
    let margin = duration(
        c,
        "trigger.margin",
        PREDICTIVE_MARGIN,
        D::ZERO,
        D::from_hours(24),
    );
    if !enabled && !refused {
        for k in ["trigger.resizeLeadTime", "trigger.margin"] {
            if c.spec.get(k).is_some() {
                c.warn(
                    k,
                    format!("has effect only with trigger.predictive: true; add it or remove {k}"),
                );
            }
        }
    }
    super::Predictive {
        enabled,
        resize_lead_time: lead,
        margin,
    }
}

/// `modificationInterval`: `auto` (the default) is the claim's CSI driver's documented limit,
/// a duration up to 7 days overrides it, `0s` (or `0`) turns it off.
fn modification_interval(c: &mut Checker<'_>, ctx: &Context) -> Option<jiff::SignedDuration> {
    let written = c.value("modificationInterval", |t| {
        let t = t.trim();
        if t == MODIFICATION_INTERVAL {
            return Ok(None);
        }
        if t == "0" {
            return Ok(Some(jiff::SignedDuration::ZERO));
        }
        let what =
            "auto (the CSI driver's known limit), a duration up to 7 days such as 6h, or 0s (none)";
        let d: jiff::SignedDuration = t
            .parse()
            .map_err(|_| format!("'{t}' is not a duration; write {what}"))?;
        if d.is_negative() || d > jiff::SignedDuration::from_hours(7 * 24) {
            return Err(format!("{d:#} is out of range; write {what}"));
        }
        Ok(Some(d))
    });
    written
        .flatten()
        .or(ctx.driver_interval)
        .filter(|d| d.is_positive())
}

/// Checks each window part on its own (so all bad parts are reported), then builds the window.
/// Convergent mode always has one: every part defaults to the CloudNativePG RFC's (daily 03:00
/// UTC for 2h). In threshold mode (where a window only holds back a `GroupGrow`) there is none
/// unless a schedule is written.
fn window(c: &mut Checker<'_>, mode: Mode) -> Option<MaintenanceWindow> {
    let spec = c.spec;
    if mode == Mode::Convergent && !spec.has("maintenanceWindow") {
        c.warn(
            "maintenanceWindow",
            format!("not given, so convergent mode grows in the default window, daily at 03:00 UTC for {WINDOW_DURATION} (the CloudNativePG RFC's; before, headroom grew such a policy only in emergencies); write maintenanceWindow: {{ schedule: \"0 3 * * 0\", duration: 4h }} to choose another"),
        );
        return MaintenanceWindow::rfc_default();
    }
    if !spec.has("maintenanceWindow") {
        return None;
    }
    let schedule = match spec.get("maintenanceWindow.schedule") {
        Some(r) => r.text.trim().to_string(),
        None if mode == Mode::Convergent => WINDOW_SCHEDULE.to_string(),
        None => {
            c.error(
                "maintenanceWindow.schedule",
                "required when maintenanceWindow is given; write a cron start time like \"0 3 * * 0\" (Sundays 03:00)".into(),
            );
            return None;
        }
    };
    let duration = spec
        .get("maintenanceWindow.duration")
        .map_or(WINDOW_DURATION.to_string(), |r| r.text.trim().to_string());
    let timezone = spec
        .get("maintenanceWindow.timezone")
        .map_or(WINDOW_TIMEZONE.to_string(), |r| r.text.trim().to_string());
    const KNOWN_GOOD_CRON: &str = "0 3 * * 0";
    let parts = [
        (
            "maintenanceWindow.schedule",
            MaintenanceWindow::new(&schedule, WINDOW_DURATION, WINDOW_TIMEZONE),
        ),
        (
            "maintenanceWindow.duration",
            MaintenanceWindow::new(KNOWN_GOOD_CRON, &duration, WINDOW_TIMEZONE),
        ),
        (
            "maintenanceWindow.timezone",
            MaintenanceWindow::new(KNOWN_GOOD_CRON, WINDOW_DURATION, &timezone),
        ),
    ];
    let mut ok = true;
    for (path, result) in parts {
        if let Err(e) = result {
            ok = false;
            let hint = match e {
                WindowError::Schedule(..) => {
                    "; write 5 cron fields like \"0 3 * * 0\" (Sundays 03:00)"
                }
                _ => "",
            };
            c.error(path, format!("{e}{hint}"));
        }
    }
    if !ok {
        return None;
    }
    MaintenanceWindow::new(&schedule, &duration, &timezone)
        .map_err(|e| c.error("maintenanceWindow", e.to_string()))
        .ok()
}

/// The `emergencyGrow` keys. Its `maxActionsPerDay` is the CloudNativePG RFC's: in convergent
/// mode, the most actions of any kind in a rolling 24 h, of which planned growth leaves
/// `reservedActionsForEmergency` to emergencies (and stops at the top-level `maxActionsPerDay`).
fn emergency_grow(c: &mut Checker<'_>, mode: Mode, planned_max: u32) -> super::EmergencyGrow {
    let enabled = c
        .value("emergencyGrow.enabled", boolean)
        .unwrap_or(EMERGENCY_ENABLED);
    let critical_threshold = c.percent(
        "emergencyGrow.criticalThreshold",
        80,
        99,
        CRITICAL_THRESHOLD,
    );
    let critical_minimum_free = c
        .value("emergencyGrow.criticalMinimumFree", size)
        .unwrap_or(CRITICAL_MINIMUM_FREE);
    let exceed_limit_on_emergency = c
        .value("emergencyGrow.exceedLimitOnEmergency", boolean)
        .unwrap_or(EXCEED_LIMIT_ON_EMERGENCY);
    let max_actions = c.count(
        "emergencyGrow.maxActionsPerDay",
        10,
        EMERGENCY_MAX_ACTIONS_PER_DAY,
    );
    let reserved = reserve(c, max_actions);
    if mode == Mode::Convergent {
        budget_warnings(c, planned_max, max_actions, reserved, enabled);
    }
    super::EmergencyGrow {
        enabled,
        critical_threshold,
        critical_minimum_free,
        exceed_limit_on_emergency,
        max_actions_per_day: max_actions,
        reserved_actions_for_emergency: reserved,
    }
}

/// `reservedActionsForEmergency` comes out of `emergencyGrow.maxActionsPerDay`, as in the RFC: an
/// explicit reserve must fit in it; the default one shrinks to fit a smaller budget.
fn reserve(c: &mut Checker<'_>, max_actions: u32) -> u32 {
    let path = "emergencyGrow.reservedActionsForEmergency";
    let given = c.value(path, |t| integer(t, 0, 10, "a whole number from 0 to 10"));
    match given.and_then(|n| u32::try_from(n).ok()) {
        Some(r) if r > max_actions => {
            c.error(
                path,
                format!("{r} is more than emergencyGrow.maxActionsPerDay ({max_actions}), the daily budget it is reserved from; write at most {max_actions}, or raise emergencyGrow.maxActionsPerDay"),
            );
            r
        }
        Some(r) => r,
        None => RESERVED_ACTIONS_FOR_EMERGENCY.min(max_actions),
    }
}

/// Convergent mode's two daily limits, where a value written would be read differently than
/// its writer probably meant: before `emergencyGrow.maxActionsPerDay`, headroom's top-level
/// `maxActionsPerDay` counted every action of a convergent policy, and an RFC user's
/// `emergencyGrow.maxActionsPerDay` beyond 4 is still capped by it for planned growth.
fn budget_warnings(c: &mut Checker<'_>, planned_max: u32, max: u32, reserved: u32, enabled: bool) {
    let after_reserve = if enabled {
        max.saturating_sub(reserved)
    } else {
        max
    };
    let spec = c.spec;
    if spec.get("maxActionsPerDay").is_some() && planned_max > after_reserve {
        c.warn(
            "maxActionsPerDay",
            format!("in convergent mode maxActionsPerDay caps planned growth only, and emergencyGrow.maxActionsPerDay ({max}) less the {reserved} reserved for emergencies leaves it {after_reserve} a day (before, maxActionsPerDay counted every action); write emergencyGrow.maxActionsPerDay: {} to allow {planned_max}", planned_max.saturating_add(reserved).min(10)),
        );
    } else if (spec.get("emergencyGrow.maxActionsPerDay").is_some()
        || spec
            .get("emergencyGrow.reservedActionsForEmergency")
            .is_some())
        && after_reserve > planned_max
    {
        c.warn(
            "emergencyGrow.maxActionsPerDay",
            format!("leaves {after_reserve} planned actions a day after the emergency reserve, but maxActionsPerDay ({planned_max}) caps planned growth at {planned_max}; write maxActionsPerDay: {after_reserve} to use them"),
        );
    }
    if enabled && max > 0 && after_reserve == 0 {
        c.warn(
            "emergencyGrow.reservedActionsForEmergency",
            format!("reserves all {max} of emergencyGrow.maxActionsPerDay for emergencies, so convergent mode never grows on schedule; write a reserve below {max}"),
        );
    }
}
