//! One test per validation error and warning: each asserts the field it names.

use super::validate::{Context, Validation, parse_policy_yaml};
use super::{Fallback, MinAvailable, Mode, Policy, Source, Step};
use crate::quantity::{GI, MI};

fn check_with(yaml: &str, ctx: Context) -> Validation {
    let v = parse_policy_yaml(yaml, &ctx);
    assert_eq!(
        v.policy.is_some(),
        v.errors.is_empty(),
        "policy only without errors: {v:?}"
    );
    v
}
fn check(yaml: &str) -> Validation {
    check_with(yaml, Context::default())
}
fn error_fields(yaml: &str) -> Vec<String> {
    check(yaml).errors.into_iter().map(|f| f.field).collect()
}
fn warning_fields(v: &Validation) -> Vec<&str> {
    v.warnings.iter().map(|f| f.field.as_str()).collect()
}
/// The single error of `yaml`, asserting it names `field`; returns its message.
fn only_error(yaml: &str, field: &str) -> String {
    let v = check(yaml);
    assert_eq!(v.errors.len(), 1, "{yaml:?}: {:?}", v.errors);
    assert_eq!(v.errors[0].field, field, "{yaml:?}");
    v.errors[0].message.clone()
}
/// Valid, with exactly one warning naming `field`; returns its message.
fn only_warning(yaml: &str, ctx: Context, field: &str) -> String {
    let v = check_with(yaml, ctx);
    assert!(v.errors.is_empty(), "{yaml:?}: {:?}", v.errors);
    assert_eq!(warning_fields(&v), [field], "{yaml:?}");
    v.warnings[0].message.clone()
}

#[test]
fn minimal_policy_takes_the_defaults() {
    let v = check("limit: 100Gi\n");
    assert!(v.errors.is_empty() && v.warnings.is_empty(), "{v:?}");
    assert_eq!(v.policy, Some(Policy::with_limit(100 * GI)));
}

#[test]
fn full_convergent_policy_is_read_exactly() {
    let v = check(
        "enabled: true\nmode: convergent\nlimit: 1Ti\nmaxActionsPerDay: 5\nrequest: 50Gi\ntargetBuffer: 30\n\
         maintenanceWindow: { schedule: \"0 2 * * *\", duration: 90m, timezone: Europe/Berlin }\n\
         emergencyGrow: { enabled: false, criticalThreshold: 90, criticalMinimumFree: 5Gi, exceedLimitOnEmergency: true, maxActionsPerDay: 5, reservedActionsForEmergency: 2 }\n\
         walSafety: { acknowledgeWALRisk: true, requireArchiveHealthy: false, maxPendingWALFiles: 500, maxSlotRetentionBytes: 50Gi }\n",
    );
    assert!(v.warnings.is_empty(), "{:?}", v.warnings);
    let p = v.policy.expect("valid");
    assert!(p.enabled);
    assert_eq!(p.mode, Mode::Convergent);
    assert_eq!(
        (p.limit, p.request, p.target_buffer, p.max_actions_per_day),
        (1024 * GI, Some(50 * GI), 30, 5)
    );
    let w = p.maintenance_window.expect("window");
    assert_eq!(
        (
            w.schedule.as_str(),
            w.duration.as_mins(),
            w.timezone.as_str()
        ),
        ("0 2 * * *", 90, "Europe/Berlin")
    );
    let e = p.emergency_grow;
    assert_eq!(
        (e.enabled, e.critical_threshold, e.critical_minimum_free),
        (false, 90, 5 * GI)
    );
    assert_eq!(
        (
            e.exceed_limit_on_emergency,
            e.max_actions_per_day,
            e.reserved_actions_for_emergency
        ),
        (true, 5, 2)
    );
    let s = p.wal_safety;
    assert_eq!(
        (s.acknowledge_wal_risk, s.require_archive_healthy),
        (true, false)
    );
    assert_eq!(
        (s.max_pending_wal_files, s.max_slot_retention_bytes),
        (500, Some(50 * GI))
    );
}

#[test]
fn ranges() {
    for (yaml, field) in [
        ("usageThreshold: 100", "usageThreshold"),
        ("inodeThreshold: 0", "inodeThreshold"),
        ("inodeThreshold: 100", "inodeThreshold"),
        ("maxActionsPerDay: 11", "maxActionsPerDay"),
        ("maxActionsPerDay: -1", "maxActionsPerDay"),
        (
            "mode: convergent\nmaintenanceWindow: {schedule: '@daily'}\ntargetBuffer: 4",
            "targetBuffer",
        ),
        (
            "mode: convergent\nmaintenanceWindow: {schedule: '@daily'}\ntargetBuffer: 51",
            "targetBuffer",
        ),
        (
            "mode: convergent\nmaintenanceWindow: {schedule: '@daily'}\nemergencyGrow: {criticalThreshold: 79}",
            "emergencyGrow.criticalThreshold",
        ),
        (
            "mode: convergent\nmaintenanceWindow: {schedule: '@daily'}\nemergencyGrow: {criticalThreshold: 100}",
            "emergencyGrow.criticalThreshold",
        ),
        (
            "mode: convergent\nmaintenanceWindow: {schedule: '@daily'}\nemergencyGrow: {reservedActionsForEmergency: 11}",
            "emergencyGrow.reservedActionsForEmergency",
        ),
        (
            "walSafety: {maxPendingWALFiles: many}",
            "walSafety.maxPendingWALFiles",
        ),
        ("step: 1001%", "step"),
        ("limit: 0", "limit"),
    ] {
        let yaml = if field == "limit" {
            yaml.to_string()
        } else {
            format!("limit: 100Gi\n{yaml}\n")
        };
        let msg = only_error(&yaml, field);
        assert!(msg.contains("write"), "{yaml:?}: {msg}");
    }
    let msg = only_error("limit: 100Gi\nusageThreshold: 80%\n", "usageThreshold");
    assert!(msg.contains("plain number"), "{msg}");
}

#[test]
fn usage_threshold_zero() {
    let msg = only_error("limit: 100Gi\nusageThreshold: 0\n", "usageThreshold");
    assert!(msg.contains("enabled: false"), "{msg}");
}

#[test]
fn steps() {
    assert!(only_error("limit: 100Gi\nstep: 0\n", "step").contains("never grow"));
    assert!(only_error("limit: 100Gi\nstep: 20\n", "step").contains("use '20%' or '20Gi'"));
    assert!(only_error("limit: 100Gi\nstep: 0%\n", "step").contains("never grow"));
    assert!(only_error("limit: 100Gi\nmaxStep: 50%\n", "maxStep").contains("write e.g. 2Gi"));
    assert!(only_error("limit: 100Gi\nminStep: 5%\n", "minStep").contains("write e.g. 2Gi"));
    let msg = only_error("limit: 100Gi\nminStep: 20Gi\nmaxStep: 10Gi\n", "minStep");
    assert!(
        msg.contains("minStep (20Gi) is larger than maxStep (10Gi)"),
        "{msg}"
    );
    // Against the default maxStep (500Gi), the key the user wrote is named.
    assert!(only_error("limit: 1Ti\nminStep: 600Gi\n", "minStep").contains("500Gi"));
}

/// Issue 42: "make minStep at most 16Mi or raise minStep" named the wrong key to raise.
#[test]
fn a_written_min_step_over_max_step_says_raise_max_step() {
    let msg = only_error("limit: 1Gi\nminStep: 1Gi\nmaxStep: 16Mi\n", "minStep");
    assert!(
        msg.ends_with("make minStep at most 16Mi or raise maxStep to at least 1Gi"),
        "{msg}"
    );
}

/// Issue 42: the default minStep (1Gi) yields to a smaller maxStep written for a small claim,
/// beside a percent step or a fixed one, and the engine grows by what validate accepted.
#[test]
fn the_default_min_step_yields_to_a_smaller_max_step() {
    for text in [
        "limit: 100Gi\nmaxStep: 512Mi\n",
        "limit: 1Gi\nstep: 8Mi\nmaxStep: 16Mi\n",
    ] {
        let v = check(text);
        assert!(v.errors.is_empty(), "{text}: {:?}", v.errors);
        assert!(v.warnings.is_empty(), "{text}: {:?}", v.warnings);
    }
    let p = check("limit: 1Gi\nmaxStep: 16Mi\n").policy.expect("valid");
    assert_eq!((p.min_step, p.max_step), (16 * MI, 16 * MI));
    // 20 % of 200Mi is 40Mi, held to maxStep: the engine's step, not the default 1Gi floor.
    assert_eq!(p.threshold_step(200 * MI), 16 * MI);
    let p = check("limit: 1Gi\nmaxStep: 16Mi\nstep: 8Mi\n")
        .policy
        .expect("valid");
    assert_eq!(p.threshold_step(200 * MI), 8 * MI);
    assert!(only_error("limit: 1Gi\nmaxStep: 0\n", "maxStep").contains("such as 16Mi"));
}

#[test]
fn quantities() {
    // Issue 24 (threshold mode): an invalid minAvailable warns and falls back to the percent
    // trigger instead of refusing the policy (was an error).
    assert!(
        only_warning(
            "limit: 100Gi\nminAvailable: -1Gi\n",
            Context::default(),
            "minAvailable"
        )
        .contains("negative")
    );
    let msg = only_error("limit: 10GB\n", "limit");
    assert!(msg.contains("'10GB'") && msg.contains("10Gi"), "{msg}");
    assert!(only_error("limit: lots\n", "limit").contains("'lots'"));
    let msg = only_error(
        "limit: 100Gi\nwalSafety: {maxSlotRetentionBytes: 1.5.1Gi}\n",
        "walSafety.maxSlotRetentionBytes",
    );
    assert!(msg.contains("'1.5.1Gi'"), "{msg}");
}

#[test]
fn request_above_limit() {
    let msg = only_error(
        "mode: convergent\nmaintenanceWindow: {schedule: '@daily'}\nlimit: 10Gi\nrequest: 20Gi\n",
        "request",
    );
    assert!(msg.contains("at most 10Gi"), "{msg}");
}

#[test]
fn missing_limit() {
    assert!(only_error("enabled: true\n", "limit").contains("limit: 100Gi"));
}

#[test]
fn reserve_above_budget() {
    // Issue 24: the reserve comes out of emergencyGrow.maxActionsPerDay (the RFC's), no longer out
    // of maxActionsPerDay, so it is that budget an explicit reserve must fit.
    let y = "mode: convergent\nmaintenanceWindow: {schedule: '@daily'}\nlimit: 10Gi\nemergencyGrow: {maxActionsPerDay: 2, reservedActionsForEmergency: 3}\n";
    assert!(only_error(y, "emergencyGrow.reservedActionsForEmergency").contains("at most 2"));
    // An unset reserve shrinks to fit the budget instead.
    let v = check("limit: 10Gi\nemergencyGrow: {maxActionsPerDay: 0}\n");
    assert_eq!(
        v.policy
            .expect("valid")
            .emergency_grow
            .reserved_actions_for_emergency,
        0
    );
}

#[test]
fn window_parts() {
    let v = check(
        "mode: convergent\nlimit: 10Gi\nmaintenanceWindow: {schedule: '61 * * * *', duration: four hours, timezone: Mars/Olympus}\n",
    );
    let fields: Vec<&str> = v.errors.iter().map(|f| f.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "maintenanceWindow.schedule",
            "maintenanceWindow.duration",
            "maintenanceWindow.timezone"
        ]
    );
    assert!(v.errors[0].message.contains("\"0 3 * * 0\""));
    assert!(v.errors[1].message.contains("4h"));
    assert!(v.errors[2].message.contains("Europe/Berlin"));
    assert!(only_error("limit: 10Gi\nmode: convergent\nmaintenanceWindow: {duration: 0s, schedule: '@daily'}\n", "maintenanceWindow.duration").contains("more than zero"));
    // Issue 24: in convergent mode the schedule has the RFC's default too; only a threshold-mode
    // window (which holds back a GroupGrow) needs one written.
    assert!(
        only_error(
            "limit: 10Gi\nmaintenanceWindow: {duration: 2h}\n",
            "maintenanceWindow.schedule"
        )
        .contains("required")
    );
    let p = check("limit: 10Gi\nmode: convergent\nmaintenanceWindow: {duration: 1h}\n")
        .policy
        .expect("valid");
    let w = p.maintenance_window.expect("window");
    assert_eq!(
        (w.schedule.as_str(), w.duration.as_hours()),
        ("0 3 * * *", 1)
    );
    // Only the schedule given: the default duration and time zone apply (issue 24: the RFC's
    // 2h, where it was 4h).
    let p = check("limit: 10Gi\nmode: convergent\nmaintenanceWindow: {schedule: '0 1 * * *'}\n")
        .policy
        .expect("valid");
    let w = p.maintenance_window.expect("window");
    assert_eq!((w.duration.as_hours(), w.timezone.as_str()), (2, "UTC"));
}

#[test]
fn other_bad_values() {
    assert!(
        only_error("limit: 10Gi\nmode: thresold\n", "mode").contains("threshold or convergent")
    );
    assert!(only_error("limit: 10Gi\nenabled: yes\n", "enabled").contains("true or false"));
    assert!(
        only_error(
            "limit: 10Gi\nwalSafety: {acknowledgeWALRisk: 1}\n",
            "walSafety.acknowledgeWALRisk"
        )
        .contains("true or false")
    );
}

#[test]
fn every_error_is_reported_at_once() {
    let fields = error_fields("usageThreshold: 0\nstep: 20\nunknownKey: 1\nmaxActionsPerDay: 99\n");
    assert_eq!(
        fields,
        [
            "unknownKey",
            "limit",
            "usageThreshold",
            "step",
            "maxActionsPerDay"
        ]
    );
}

#[test]
fn warning_budget_zero_while_enabled() {
    let msg = only_warning(
        "limit: 10Gi\nenabled: true\nmaxActionsPerDay: 0\n",
        Context::default(),
        "maxActionsPerDay",
    );
    assert!(msg.contains("never acts"));
    assert!(
        check("limit: 10Gi\nenabled: false\nmaxActionsPerDay: 0\n")
            .warnings
            .is_empty()
    );
}

#[test]
fn warning_step_above_100_percent() {
    assert!(
        only_warning("limit: 10Gi\nstep: 150%\n", Context::default(), "step")
            .contains("100% or less")
    );
    assert!(check("limit: 10Gi\nstep: 100%\n").warnings.is_empty());
}

#[test]
fn warning_min_max_step_with_absolute_step() {
    let v = check("limit: 100Gi\nstep: 10Gi\nminStep: 2Gi\nmaxStep: 50Gi\n");
    // maxStep still caps the fixed step widened for a fast fill: no warning for it.
    assert_eq!(warning_fields(&v), ["minStep"]);
    assert!(v.warnings[0].message.contains("step as a percent"));
    assert_eq!(v.policy.expect("valid").step, Step::Bytes(10 * GI));
}

#[test]
fn warning_min_step_above_limit() {
    let msg = only_warning(
        "limit: 10Gi\nminStep: 20Gi\nmaxStep: 40Gi\n",
        Context::default(),
        "minStep",
    );
    assert!(msg.contains("below 10Gi"), "{msg}");
}

#[test]
fn warning_keys_of_the_other_mode() {
    // The emergency line is no other mode's key: in threshold mode it lets a grow through a
    // node drain.
    let v = check(
        "limit: 10Gi\nrequest: 1Gi\nemergencyGrow: {criticalThreshold: 90, enabled: false}\n",
    );
    assert_eq!(warning_fields(&v), ["request", "emergencyGrow.enabled"]);
    assert!(v.warnings[0].message.contains("mode: convergent"));
    let v = check(
        "limit: 10Gi\nmode: convergent\nmaintenanceWindow: {schedule: '@daily'}\nstep: 10%\ninodeThreshold: 95\n",
    );
    assert_eq!(warning_fields(&v), ["inodeThreshold", "step"]);
    assert!(v.warnings[0].message.contains("mode: threshold"));
}

#[test]
fn warning_acknowledge_wal_risk_with_own_wal_volume() {
    let y = "limit: 10Gi\nwalSafety: {acknowledgeWALRisk: true}\n";
    let own = Context {
        wal_has_own_volume: Some(true),
        ..Context::default()
    };
    assert!(only_warning(y, own, "walSafety.acknowledgeWALRisk").contains("remove it"));
    let shared = Context {
        wal_has_own_volume: Some(false),
        ..Context::default()
    };
    assert!(check_with(y, shared).warnings.is_empty());
}

#[test]
fn warnings_from_the_current_size() {
    let ctx = Context {
        current_size: Some(20 * GI),
        ..Context::default()
    };
    assert!(only_warning("limit: 20Gi\n", ctx, "limit").contains("above 20Gi"));
    assert!(check_with("limit: 21Gi\n", ctx).warnings.is_empty());
    assert!(
        only_warning("limit: 100Gi\nminAvailable: 25Gi\n", ctx, "minAvailable")
            .contains("well below 20Gi")
    );
    assert!(
        check_with("limit: 100Gi\nminAvailable: 5Gi\n", ctx)
            .warnings
            .is_empty()
    );
}

#[test]
fn warning_convergent_without_window() {
    // Issue 24: the RFC's minimal policy (request + limit) grows daily at 03:00 UTC for 2h; the
    // warning says so, and that such a policy grew only in emergencies before.
    let v = check_with(
        "limit: 100Gi\nrequest: 10Gi\nmode: convergent\n",
        Context::default(),
    );
    assert_eq!(warning_fields(&v), ["maintenanceWindow"]);
    let msg = &v.warnings[0].message;
    assert!(
        msg.contains("03:00 UTC")
            && msg.contains("only in emergencies")
            && msg.contains("schedule"),
        "{msg}"
    );
    let w = v
        .policy
        .expect("valid")
        .maintenance_window
        .expect("the default window");
    assert_eq!(
        (
            w.schedule.as_str(),
            w.duration.as_hours(),
            w.timezone.as_str()
        ),
        ("0 3 * * *", 2, "UTC")
    );
    // Threshold mode has no window unless one is written.
    assert!(
        check("limit: 10Gi\n")
            .policy
            .expect("valid")
            .maintenance_window
            .is_none()
    );
}

#[test]
fn convergent_budgets_are_the_rfcs() {
    // Defaults: emergencyGrow.maxActionsPerDay 4, 1 reserved, planned capped at 3.
    let p = check("limit: 10Gi\nmode: convergent\nmaintenanceWindow: {schedule: '@daily'}\n")
        .policy
        .expect("valid");
    let e = &p.emergency_grow;
    assert_eq!(
        (
            p.max_actions_per_day,
            e.max_actions_per_day,
            e.reserved_actions_for_emergency
        ),
        (3, 4, 1)
    );
    // The nested key is a key, not an unknown-key error; out of range is.
    assert_eq!(
        error_fields("limit: 10Gi\nmode: convergent\nemergencyGrow: {maxActionsPerDay: 11}\n"),
        ["emergencyGrow.maxActionsPerDay"]
    );
    let w = "limit: 10Gi\nmode: convergent\nmaintenanceWindow: {schedule: '@daily'}\n";
    // A maxActionsPerDay written for the old meaning (every action) is capped by the emergency
    // budget less its reserve: said, with the value that would allow it.
    let msg = only_warning(
        &format!("{w}maxActionsPerDay: 5\n"),
        Context::default(),
        "maxActionsPerDay",
    );
    assert!(
        msg.contains("planned growth only") && msg.contains("emergencyGrow.maxActionsPerDay: 6"),
        "{msg}"
    );
    // An RFC-style emergency budget beyond 4 is still capped for planned growth by maxActionsPerDay.
    let msg = only_warning(
        &format!("{w}emergencyGrow: {{maxActionsPerDay: 6}}\n"),
        Context::default(),
        "emergencyGrow.maxActionsPerDay",
    );
    assert!(
        msg.contains("leaves 5 planned") && msg.contains("maxActionsPerDay: 5"),
        "{msg}"
    );
    assert!(
        check(&format!(
            "{w}maxActionsPerDay: 5\nemergencyGrow: {{maxActionsPerDay: 6}}\n"
        ))
        .warnings
        .is_empty()
    );
    // A reserve of the whole budget leaves no scheduled growth.
    let msg = only_warning(
        &format!(
            "{w}maxActionsPerDay: 0\nemergencyGrow: {{maxActionsPerDay: 2, reservedActionsForEmergency: 2}}\n"
        ),
        Context::default(),
        "emergencyGrow.reservedActionsForEmergency",
    );
    assert!(msg.contains("never grows on schedule"), "{msg}");
    // In threshold mode the nested keys are the other mode's, but for the emergency line, which
    // decides what grows while the node drains.
    let v = check(
        "limit: 10Gi\nemergencyGrow: {maxActionsPerDay: 6, criticalThreshold: 90, criticalMinimumFree: 2Gi}\n",
    );
    assert_eq!(warning_fields(&v), ["emergencyGrow.maxActionsPerDay"]);
    assert!(v.warnings[0].message.contains("only in convergent mode"));
}

#[test]
fn critical_minimum_free_near_the_volume_size() {
    let small = Context {
        current_size: Some(2 * GI),
        wal_has_own_volume: None,
        driver_rule: None,
        min_available_source: None,
    };
    let v = check_with(
        "limit: 10Gi\nmode: convergent\nmaintenanceWindow: { schedule: \"0 3 * * 0\" }\n",
        small,
    );
    assert!(
        warning_fields(&v).contains(&"emergencyGrow.criticalMinimumFree"),
        "{:?}",
        v.warnings
    );
    let big = Context {
        current_size: Some(20 * GI),
        wal_has_own_volume: None,
        driver_rule: None,
        min_available_source: None,
    };
    let v = check_with(
        "limit: 100Gi\nmode: convergent\nmaintenanceWindow: { schedule: \"0 3 * * 0\" }\n",
        big,
    );
    assert!(
        !warning_fields(&v).contains(&"emergencyGrow.criticalMinimumFree"),
        "{:?}",
        v.warnings
    );
}

#[test]
fn wal_limits_mean_what_the_rfc_says() {
    // Unset: the slot check is off, the age limit 15 minutes, alerts on.
    let p = check("limit: 10Gi\n").policy.unwrap();
    assert_eq!(p.wal_safety.max_slot_retention_bytes, None);
    assert_eq!(p.wal_safety.max_pending_wal_age_seconds, 900);
    assert!(p.wal_safety.alert_on_resize);
    // 0 is off, and a config that meant "block on any" hears about it.
    let m = only_warning(
        "limit: 10Gi\nwalSafety: {maxPendingWALFiles: 0}\n",
        Context::default(),
        "walSafety.maxPendingWALFiles",
    );
    assert!(
        m.contains("turns the pending-files check off") && m.contains("write 1"),
        "{m}"
    );
    let v = check("limit: 10Gi\nwalSafety: {maxSlotRetentionBytes: 0}\n");
    assert_eq!(warning_fields(&v), ["walSafety.maxSlotRetentionBytes"]);
    assert_eq!(v.policy.unwrap().wal_safety.max_slot_retention_bytes, None);
    let p = check(
        "limit: 10Gi\nwalSafety: {maxSlotRetentionBytes: 2Gi, maxPendingWALAge: 1h, alertOnResize: false}\n",
    )
    .policy
    .unwrap();
    assert_eq!(p.wal_safety.max_slot_retention_bytes, Some(2 * GI));
    assert_eq!(p.wal_safety.max_pending_wal_age_seconds, 3600);
    assert!(!p.wal_safety.alert_on_resize);
    let p = check("limit: 10Gi\nwalSafety: {maxPendingWALAge: 0}\n")
        .policy
        .unwrap();
    assert_eq!(p.wal_safety.max_pending_wal_age_seconds, 0);
    for bad in ["soon", "8d", "-5m"] {
        let m = only_error(
            &format!("limit: 10Gi\nwalSafety: {{maxPendingWALAge: {bad}}}\n"),
            "walSafety.maxPendingWALAge",
        );
        assert!(!m.is_empty());
    }
    let m = only_error(
        "limit: 10Gi\nwalSafety: {alertOnResize: maybe}\n",
        "walSafety.alertOnResize",
    );
    assert!(!m.is_empty());
}

#[test]
fn min_available_alone_is_a_purely_absolute_trigger() {
    // No usageThreshold anywhere: only the floor grows the volume (the auto-resize RFC).
    let p = check("limit: 100Gi\nminAvailable: 5Gi\n")
        .policy
        .expect("valid");
    assert_eq!(
        (p.usage_threshold, p.min_available),
        (None, MinAvailable::Bytes(5 * GI))
    );
    // Beside a usageThreshold, both apply.
    let p = check("limit: 100Gi\nminAvailable: 5Gi\nusageThreshold: 85\n")
        .policy
        .expect("valid");
    assert_eq!(p.usage_threshold, Some(85));
    // usageThreshold: 0 says "no percent trigger" in a layer that must beat a ConfigMap's 80.
    let p = check("limit: 100Gi\nminAvailable: 10%\nusageThreshold: 0\n")
        .policy
        .expect("valid");
    assert_eq!(
        (p.usage_threshold, p.min_available),
        (None, MinAvailable::Percent(10.0))
    );
    // Without a floor, 0 would leave nothing to grow on: refused.
    assert!(
        only_error(
            "limit: 100Gi\nusageThreshold: 0\nminAvailable: 0\n",
            "usageThreshold"
        )
        .contains("no minAvailable")
    );
    // No floor at all: the default percent trigger.
    let p = check("limit: 100Gi\n").policy.expect("valid");
    assert_eq!(p.usage_threshold, Some(80));
}

#[test]
fn an_invalid_min_available_warns_and_falls_back_to_the_percent_trigger() {
    for bad in ["10GB", "150%", "0%", "lots"] {
        let yaml = format!("limit: 100Gi\nminAvailable: {bad}\n");
        let m = only_warning(&yaml, Context::default(), "minAvailable");
        assert!(m.contains("usageThreshold 80"), "{bad}: {m}");
        let p = check(&yaml).policy.expect("accepted");
        assert_eq!(
            (p.usage_threshold, p.min_available, p.fallback),
            (
                Some(80),
                MinAvailable::OFF,
                Some(Fallback::MinAvailableInvalid {
                    usage_threshold: 80
                })
            ),
            "{bad}"
        );
    }
    // The written usageThreshold is the fallback's line, even a 0 ("none"): never no trigger.
    let p = check("limit: 100Gi\nminAvailable: 5GB\nusageThreshold: 70\n")
        .policy
        .expect("accepted");
    assert_eq!(p.usage_threshold, Some(70));
    let p = check("limit: 100Gi\nminAvailable: 5GB\nusageThreshold: 0\n")
        .policy
        .expect("accepted");
    assert_eq!(p.usage_threshold, Some(80));
    // Every other invalid key still refuses the whole policy.
    assert!(
        check("limit: 100Gi\nminAvailable: 5GB\ninodeThreshold: 0\n")
            .policy
            .is_none()
    );
    // In convergent mode the key is unused: a warning, and no fallback to report.
    let v = check(
        "limit: 100Gi\nmode: convergent\nmaintenanceWindow: {schedule: '@daily'}\nminAvailable: 5GB\n",
    );
    assert_eq!(v.policy.expect("accepted").fallback, None);
}

#[test]
fn a_floor_the_claim_cannot_meet_at_its_size_is_said() {
    let one_gi = Context {
        current_size: Some(GI),
        ..Context::default()
    };
    let floor = "limit: 100Gi\nminAvailable: 5Gi\nusageThreshold: 80\n";
    let said_of = |yaml: &str, ctx| {
        let v = check_with(yaml, ctx);
        let w = v.warnings.iter().find(|w| w.field == "minAvailable");
        w.expect("a minAvailable warning").message.clone()
    };
    let said = |ctx| said_of(floor, ctx);
    // Inherited (the shipped ConfigMap's old floor) on a 1Gi claim: not applied, and said.
    let inherited = said(Context {
        min_available_source: Some(Source::ConfigMapDefault),
        ..one_gi
    });
    assert!(
        inherited.contains("can never be met")
            && inherited.contains("usageThreshold 80")
            && inherited.contains("1Gi")
            && !inherited.contains("step"),
        "{inherited}"
    );
    // Written on the claim (issue 36): applied, and how many of its steps it takes (20 % of
    // 1Gi, raised to minStep 1Gi: 1Gi at a time until the claim is larger than 5Gi), over how
    // many days at 3 a day.
    let own = "5 step(s) (1Gi -> 2Gi -> 3Gi -> 4Gi -> 5Gi -> 6Gi), over 2 days or more at maxActionsPerDay 3";
    for source in [Source::PvcAnnotation, Source::TopolvmPvcAnnotation] {
        let m = said(Context {
            min_available_source: Some(source),
            ..one_gi
        });
        assert!(m.contains("applied as written") && m.contains(own), "{m}");
        assert!(!m.contains("usageThreshold 80"), "{m}");
    }
    // A policy file could be either: both are said.
    let m = said(one_gi);
    assert!(m.contains(own) && m.contains("usageThreshold 80"), "{m}");
    // A limit below the floor stops the claim there.
    let m = said_of(
        "limit: 3Gi\nminAvailable: 5Gi\n",
        Context {
            min_available_source: Some(Source::PvcAnnotation),
            ..one_gi
        },
    );
    assert!(
        m.contains("to its limit, 2 step(s)") && m.contains("raise limit above 5Gi"),
        "{m}"
    );
    // The RFC's small-cluster example (500Mi on a 1Gi volume) can be met: no warning.
    let v = check_with("limit: 10Gi\nminAvailable: 500Mi\n", one_gi);
    assert!(
        !warning_fields(&v).contains(&"minAvailable"),
        "{:?}",
        v.warnings
    );
}

#[test]
fn emergency_grow_enabled_is_used_in_threshold_mode_by_approve() {
    let yaml = "limit: 10Gi\nemergencyGrow:\n  enabled: false\n";
    let v = check(yaml);
    assert_eq!(warning_fields(&v), ["emergencyGrow.enabled"]);
    let v = check(&format!("{yaml}enforcement: approve\n"));
    assert_eq!(warning_fields(&v), Vec::<&str>::new());
    assert!(!v.policy.expect("valid").emergency_grow.enabled);
}

#[test]
fn resize_through_owner_is_accepted_with_every_enforcement() {
    for enforcement in ["act", "recommend", "approve"] {
        let v = check(&format!(
            "limit: 10Gi\nresizeThrough: owner\nenforcement: {enforcement}\n"
        ));
        assert_eq!(warning_fields(&v), Vec::<&str>::new(), "{enforcement}");
        let p = v.policy.expect("valid");
        assert_eq!(p.resize_through, crate::policy::ResizeThrough::Owner);
        assert_eq!(
            serde_json::to_value(p.enforcement).ok(),
            Some(serde_json::json!(enforcement))
        );
        // What writes a size writes the owner's, and the agent reads the owner for it.
        assert_eq!(p.grows_through_owner(), enforcement != "recommend");
    }
    assert_eq!(
        error_fields("limit: 10Gi\nresizeThrough: cluster\n"),
        ["resizeThrough"]
    );
    let p = check("limit: 10Gi\n").policy.expect("valid");
    assert_eq!(p.resize_through, crate::policy::ResizeThrough::Claim);
    assert!(!p.grows_through_owner());
}
