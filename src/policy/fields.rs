//! The one table of policy keys: YAML path <-> annotation key. YAML parsing, annotation parsing,
//! the merge and docs/policy.md's table all read it, so the three places cannot drift apart.

use super::{Step, defaults};
use crate::quantity;

/// One policy key as it is written in YAML (`path`, nested keys joined with `.`) and as a
/// Kubernetes annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub path: &'static str,
    pub annotation: &'static str,
}

const fn f(path: &'static str, annotation: &'static str) -> Field {
    Field { path, annotation }
}

pub const ANNOTATION_PREFIX: &str = "headroom.dev/";

/// Every policy key, in the order README documents them.
pub const FIELDS: &[Field] = &[
    f("enabled", "headroom.dev/enabled"),
    f("mode", "headroom.dev/mode"),
    f("limit", "headroom.dev/limit"),
    f("usageThreshold", "headroom.dev/usage-threshold"),
    f("minAvailable", "headroom.dev/min-available"),
    f("inodeThreshold", "headroom.dev/inode-threshold"),
    f("step", "headroom.dev/step"),
    f("minStep", "headroom.dev/min-step"),
    f("maxStep", "headroom.dev/max-step"),
    f("maxActionsPerDay", "headroom.dev/max-actions-per-day"),
    f("request", "headroom.dev/request"),
    f("targetBuffer", "headroom.dev/target-buffer"),
    f("modificationInterval", "headroom.dev/modification-interval"),
    f("logicalVolume", "headroom.dev/logical-volume"),
    f("offlineExpansion", "headroom.dev/offline-expansion"),
    f("nodeExpansion", "headroom.dev/node-expansion"),
    f("enforcement", "headroom.dev/enforcement"),
    f("resizeThrough", "headroom.dev/resize-through"),
    f("poolReserve", "headroom.dev/pool-reserve"),
    f("trigger.predictive", "headroom.dev/trigger-predictive"),
    f(
        "trigger.resizeLeadTime",
        "headroom.dev/trigger-resize-lead-time",
    ),
    f("trigger.margin", "headroom.dev/trigger-margin"),
    f(
        "maintenanceWindow.schedule",
        "headroom.dev/maintenance-window-schedule",
    ),
    f(
        "maintenanceWindow.duration",
        "headroom.dev/maintenance-window-duration",
    ),
    f(
        "maintenanceWindow.timezone",
        "headroom.dev/maintenance-window-timezone",
    ),
    f(
        "emergencyGrow.enabled",
        "headroom.dev/emergency-grow-enabled",
    ),
    f(
        "emergencyGrow.criticalThreshold",
        "headroom.dev/emergency-grow-critical-threshold",
    ),
    f(
        "emergencyGrow.criticalMinimumFree",
        "headroom.dev/emergency-grow-critical-minimum-free",
    ),
    f(
        "emergencyGrow.exceedLimitOnEmergency",
        "headroom.dev/emergency-grow-exceed-limit-on-emergency",
    ),
    f(
        "emergencyGrow.maxActionsPerDay",
        "headroom.dev/emergency-grow-max-actions-per-day",
    ),
    f(
        "emergencyGrow.reservedActionsForEmergency",
        "headroom.dev/emergency-grow-reserved-actions-for-emergency",
    ),
    f(
        "walSafety.acknowledgeWALRisk",
        "headroom.dev/wal-safety-acknowledge-wal-risk",
    ),
    f(
        "walSafety.requireArchiveHealthy",
        "headroom.dev/wal-safety-require-archive-healthy",
    ),
    f(
        "walSafety.maxPendingWALFiles",
        "headroom.dev/wal-safety-max-pending-wal-files",
    ),
    f(
        "walSafety.maxSlotRetentionBytes",
        "headroom.dev/wal-safety-max-slot-retention-bytes",
    ),
    f(
        "walSafety.maxPendingWALAge",
        "headroom.dev/wal-safety-max-pending-wal-age",
    ),
    f(
        "walSafety.alertOnResize",
        "headroom.dev/wal-safety-alert-on-resize",
    ),
    f("reclaimSpace.enabled", "headroom.dev/reclaim-space-enabled"),
    f(
        "reclaimSpace.schedule",
        "headroom.dev/reclaim-space-schedule",
    ),
    f(
        "reclaimSpace.timezone",
        "headroom.dev/reclaim-space-timezone",
    ),
];

/// The keys that hold a nested mapping in YAML.
pub const GROUPS: &[&str] = &[
    "trigger",
    "maintenanceWindow",
    "emergencyGrow",
    "walSafety",
    "reclaimSpace",
];

/// Keys (or whole groups) used only in convergent mode (a warning in threshold mode). Not the
/// emergency line (`emergencyGrow.criticalThreshold`, `criticalMinimumFree`): in threshold mode
/// it decides which grows go on while the node drains.
pub const CONVERGENT_ONLY: &[&str] = &[
    "request",
    "targetBuffer",
    "maintenanceWindow",
    "emergencyGrow.enabled",
    "emergencyGrow.exceedLimitOnEmergency",
    "emergencyGrow.maxActionsPerDay",
    "emergencyGrow.reservedActionsForEmergency",
];
/// Keys used only in threshold mode (a warning in convergent mode).
pub const THRESHOLD_ONLY: &[&str] = &[
    "usageThreshold",
    "minAvailable",
    "inodeThreshold",
    "step",
    "minStep",
    "maxStep",
    "trigger",
];

pub fn by_path(path: &str) -> Option<&'static Field> {
    FIELDS.iter().find(|f| f.path == path)
}

pub fn by_annotation(key: &str) -> Option<&'static Field> {
    FIELDS.iter().find(|f| f.annotation == key)
}

/// The default of a key as a user would write it; `None` where there is none (limit is required,
/// request is off unless given). The window's schedule is a default of convergent mode only: a
/// threshold-mode policy has no window unless one is written ([`default_text_in`]).
pub fn default_text(path: &str) -> Option<String> {
    use defaults::*;
    let q = quantity::format;
    Some(match path {
        "enabled" => ENABLED.to_string(),
        "mode" => "threshold".to_string(),
        "usageThreshold" => USAGE_THRESHOLD.to_string(),
        "minAvailable" => q(MIN_AVAILABLE.bytes(0)),
        "inodeThreshold" => INODE_THRESHOLD.to_string(),
        "step" => match STEP {
            Step::Percent(p) => format!("{p}%"),
            Step::Bytes(b) => q(b),
        },
        "minStep" => q(MIN_STEP),
        "maxStep" => q(MAX_STEP),
        "maxActionsPerDay" => MAX_ACTIONS_PER_DAY.to_string(),
        "targetBuffer" => TARGET_BUFFER.to_string(),
        "modificationInterval" => MODIFICATION_INTERVAL.to_string(),
        "logicalVolume" => "auto".to_string(),
        "offlineExpansion" => "off".to_string(),
        "nodeExpansion" => "online".to_string(),
        "enforcement" => "act".to_string(),
        "resizeThrough" => "claim".to_string(),
        "poolReserve" => match POOL_RESERVE {
            super::PoolReserve::Bytes(b) => q(b),
            super::PoolReserve::Percent(p) => format!("{p}%"),
        },
        "trigger.predictive" => PREDICTIVE.to_string(),
        "trigger.resizeLeadTime" => RESIZE_LEAD_TIME.to_string(),
        "trigger.margin" => PREDICTIVE_MARGIN.to_string(),
        "maintenanceWindow.schedule" => WINDOW_SCHEDULE.to_string(),
        "maintenanceWindow.duration" => WINDOW_DURATION.to_string(),
        "maintenanceWindow.timezone" => WINDOW_TIMEZONE.to_string(),
        "emergencyGrow.enabled" => EMERGENCY_ENABLED.to_string(),
        "emergencyGrow.criticalThreshold" => CRITICAL_THRESHOLD.to_string(),
        "emergencyGrow.criticalMinimumFree" => q(CRITICAL_MINIMUM_FREE),
        "emergencyGrow.exceedLimitOnEmergency" => EXCEED_LIMIT_ON_EMERGENCY.to_string(),
        "emergencyGrow.maxActionsPerDay" => EMERGENCY_MAX_ACTIONS_PER_DAY.to_string(),
        "emergencyGrow.reservedActionsForEmergency" => RESERVED_ACTIONS_FOR_EMERGENCY.to_string(),
        "walSafety.acknowledgeWALRisk" => ACKNOWLEDGE_WAL_RISK.to_string(),
        "walSafety.requireArchiveHealthy" => REQUIRE_ARCHIVE_HEALTHY.to_string(),
        "walSafety.maxPendingWALFiles" => MAX_PENDING_WAL_FILES.to_string(),
        "walSafety.maxSlotRetentionBytes" => return MAX_SLOT_RETENTION_BYTES.map(q),
        "walSafety.maxPendingWALAge" => MAX_PENDING_WAL_AGE.to_string(),
        "walSafety.alertOnResize" => ALERT_ON_RESIZE.to_string(),
        "reclaimSpace.enabled" => RECLAIM_ENABLED.to_string(),
        "reclaimSpace.schedule" => RECLAIM_SCHEDULE.to_string(),
        "reclaimSpace.timezone" => RECLAIM_TIMEZONE.to_string(),
        _ => return None,
    })
}

/// [`default_text`] for a policy in `mode`: in threshold mode the window keys have no default,
/// since no window applies unless one is written.
pub fn default_text_in(path: &str, mode: super::Mode) -> Option<String> {
    if mode == super::Mode::Threshold && path.starts_with("maintenanceWindow.") {
        return None;
    }
    default_text(path)
}

/// Folds case and separators so `usage_threshold`, `usage-threshold` and `UsageThreshold` all
/// compare equal to `usageThreshold`.
fn fold(s: &str) -> String {
    s.chars()
        .filter(|c| !matches!(c, '-' | '_' | '.' | ' '))
        .flat_map(char::to_lowercase)
        .collect()
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The candidate closest to what was written, if one is close enough to be a likely typo.
/// A candidate also matches on its last `.`-segment, so a nested key written at the top level
/// (`criticalThreshold`) suggests its full path (`emergencyGrow.criticalThreshold`).
pub fn closest<'a>(
    written: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let w = fold(written);
    let len = w.chars().count();
    let limit = (len / 4).max(2);
    // The distance is at least the difference in length: a candidate that far off is not
    // measured. Without this, each hostile key of a few kilobytes cost seconds of CPU (the
    // `policy` fuzz target found it), at every scan of every claim it reached.
    let near = |s: &str| {
        let f = fold(s);
        (f.chars().count().abs_diff(len) <= limit).then_some(f)
    };
    candidates
        .into_iter()
        .filter_map(|c| {
            let last = c.rsplit('.').next().unwrap_or(c);
            let d = [near(c), near(last)]
                .into_iter()
                .flatten()
                .map(|f| levenshtein(&w, &f))
                .min()?;
            Some((d, c))
        })
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_survive_the_length_cut() {
        // The `policy` fuzz target found keys of a few kilobytes taking seconds each: candidates
        // too far off in length are no longer measured. The cost is the fuzz corpus's to check
        // (its input replays under libFuzzer's time bound); the answers are checked here.
        let long = "x".repeat(1 << 16);
        assert_eq!(closest(&long, FIELDS.iter().map(|f| f.path)), None);
        assert_eq!(
            closest("targetBufer", FIELDS.iter().map(|f| f.path)),
            Some("targetBuffer")
        );
        assert_eq!(
            closest("criticalTreshold", FIELDS.iter().map(|f| f.path)),
            Some("emergencyGrow.criticalThreshold")
        );
    }

    #[test]
    fn annotation_keys_are_kebab_case_of_the_path() {
        for f in FIELDS {
            let mut kebab = String::from(ANNOTATION_PREFIX);
            let path = f.path.replace("WAL", "Wal").replace('.', "-");
            for c in path.chars() {
                if c.is_ascii_uppercase() {
                    kebab.push('-');
                    kebab.push(c.to_ascii_lowercase());
                } else {
                    kebab.push(c);
                }
            }
            assert_eq!(f.annotation, kebab, "annotation key of {}", f.path);
        }
    }

    #[test]
    fn the_window_has_a_default_in_convergent_mode_only() {
        use crate::policy::Mode;
        let schedule = "maintenanceWindow.schedule";
        assert_eq!(
            default_text_in(schedule, Mode::Convergent).as_deref(),
            Some("0 3 * * *")
        );
        assert_eq!(default_text_in(schedule, Mode::Threshold), None);
        assert_eq!(
            default_text_in("maintenanceWindow.duration", Mode::Convergent).as_deref(),
            Some("2h")
        );
        assert_eq!(
            default_text_in("emergencyGrow.maxActionsPerDay", Mode::Threshold).as_deref(),
            Some("4")
        );
    }

    #[test]
    fn suggestions() {
        let paths = FIELDS.iter().map(|f| f.path);
        assert_eq!(
            closest("usageTreshold", paths.clone()),
            Some("usageThreshold")
        );
        assert_eq!(
            closest("usage_threshold", paths.clone()),
            Some("usageThreshold")
        );
        assert_eq!(
            closest("criticalThreshold", paths.clone()),
            Some("emergencyGrow.criticalThreshold")
        );
        assert_eq!(
            closest("acknowledgeWalRisk", paths.clone()),
            Some("walSafety.acknowledgeWALRisk")
        );
        assert_eq!(closest("colour", paths), None);
    }
}
