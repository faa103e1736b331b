//! The policy's sections that stand on their own (WAL safety, the predictive trigger, the
//! modification interval, the maintenance window, emergency growth, the budget's reserve): each
//! reads its keys through [`Checker`], records its findings, and returns its part of the policy.

use super::Mode;
use super::checker::{Checker, Context, duration};
use super::defaults::*;
use super::value::{boolean, integer, size};
use super::window::{MaintenanceWindow, WindowError};

/// The `walSafety` keys. 0 turns `maxPendingWALFiles`, `maxSlotRetentionBytes` and
/// `maxPendingWALAge` off, as the CloudNativePG RFC defines them; headroom read 0 as "block on
/// any" before, so a 0 is warned about.
pub(super) fn wal_safety(c: &mut Checker<'_>) -> super::WalSafety {
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

pub(super) fn predictive(c: &mut Checker<'_>) -> super::Predictive {
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

/// `modificationInterval`: `auto` (the default) is the claim's CSI driver's documented rule (its
/// gap and its budget); a duration up to 7 days replaces that whole rule with one grow per that
/// duration, `0s` (or `0`) with none.
pub(super) fn modification_interval(
    c: &mut Checker<'_>,
    ctx: &Context,
) -> (Option<jiff::SignedDuration>, Option<super::drivers::Budget>) {
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
    let (gap, budget) = match written.flatten() {
        Some(d) => (Some(d), None),
        None => ctx.driver_rule.map_or((None, None), |r| (r.gap, r.budget)),
    };
    (
        gap.filter(|d| d.is_positive()),
        budget.filter(|b| b.count > 0 && b.window.is_positive()),
    )
}

/// Checks each window part on its own (so all bad parts are reported), then builds the window.
/// Convergent mode always has one: every part defaults to the CloudNativePG RFC's (daily 03:00
/// UTC for 2h). In threshold mode (where a window only holds back a `GroupGrow`) there is none
/// unless a schedule is written.
pub(super) fn window(c: &mut Checker<'_>, mode: Mode) -> Option<MaintenanceWindow> {
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
pub(super) fn emergency_grow(
    c: &mut Checker<'_>,
    mode: Mode,
    planned_max: u32,
) -> super::EmergencyGrow {
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
