//! The policy as Kubernetes annotations: `headroom.dev/<kebab-case-key>`, nested keys joined
//! with `-` (see [`FIELDS`]). Values are strings and are checked by the same parsers as YAML.

use std::collections::BTreeMap;

use super::Finding;
pub use super::fields::Field;
use super::fields::{self, ANNOTATION_PREFIX, FIELDS};
use super::spec::{PolicySpec, Raw};

/// The mapping between YAML paths and annotation keys, re-exported where annotations are read.
pub const ANNOTATION_KEYS: &[Field] = FIELDS;

/// `headroom.dev/*` annotations that are not policy keys: other parts of headroom own them.
pub const RESERVED: &[&str] = &[
    "headroom.dev/history",
    "headroom.dev/status",
    "headroom.dev/reclaim",
    "headroom.dev/postgres-role",
    "headroom.dev/group",
    // A person's approval of one recommendation (`enforcement: approve`).
    "headroom.dev/approve",
];
pub fn is_reserved(key: &str) -> bool {
    RESERVED.contains(&key)
}

/// Reads the policy keys from an object's annotations. `object` names the object in messages,
/// e.g. `PVC db/data-pg-0` or `StorageClass fast-ssd`; each value records
/// `<object> annotation <key>` as its origin so validation names the annotation. Unknown
/// `headroom.dev/` keys become problems naming the key (with the closest known key);
/// annotations outside `headroom.dev/` are not ours and are ignored.
pub fn from_annotations(annotations: &BTreeMap<String, String>, object: &str) -> PolicySpec {
    let mut spec = PolicySpec::default();
    for (key, text) in annotations {
        if !key.starts_with(ANNOTATION_PREFIX) || is_reserved(key) {
            continue;
        }
        let Some(field) = fields::by_annotation(key) else {
            let short = FIELDS
                .iter()
                .map(|f| f.annotation.trim_start_matches(ANNOTATION_PREFIX));
            let hint = match fields::closest(key.trim_start_matches(ANNOTATION_PREFIX), short) {
                Some(s) => format!("did you mean {ANNOTATION_PREFIX}{s}?"),
                None => "remove it (docs/policy.md lists every policy annotation)".to_string(),
            };
            spec.problems.push(Finding {
                field: key.clone(),
                message: format!("unknown headroom annotation on {object}; {hint}"),
            });
            continue;
        };
        if let Some(slot) = spec.slot_mut(field.path) {
            *slot = Some(Raw {
                text: text.clone(),
                origin: Some(format!("{object} annotation {key}")),
            });
        }
    }
    spec
}

/// The annotations that express `spec` (the inverse of [`from_annotations`]).
pub fn to_annotations(spec: &PolicySpec) -> BTreeMap<String, String> {
    FIELDS
        .iter()
        .filter_map(|f| {
            spec.get(f.path)
                .map(|r| (f.annotation.to_string(), r.text.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::validate::{Context, validate};
    use crate::quantity::GI;

    use crate::policy::test_map as map;

    #[test]
    fn every_spec_field_has_an_annotation_key() {
        // A struct literal without `..Default::default()`: adding a field to PolicySpec fails to
        // compile here until it is added, and then the serialised paths must match the table.
        use crate::policy::spec::*;
        let r = || Some(Raw::new("x"));
        let full = PolicySpec {
            enabled: r(),
            mode: r(),
            limit: r(),
            usage_threshold: r(),
            min_available: r(),
            inode_threshold: r(),
            step: r(),
            min_step: r(),
            max_step: r(),
            max_actions_per_day: r(),
            request: r(),
            target_buffer: r(),
            modification_interval: r(),
            logical_volume: r(),
            offline_expansion: r(),
            node_expansion: r(),
            enforcement: r(),
            resize_through: r(),
            pool_reserve: r(),
            trigger: TriggerSpec {
                predictive: r(),
                resize_lead_time: r(),
                margin: r(),
            },
            maintenance_window: WindowSpec {
                schedule: r(),
                duration: r(),
                timezone: r(),
            },
            emergency_grow: EmergencyGrowSpec {
                enabled: r(),
                critical_threshold: r(),
                critical_minimum_free: r(),
                exceed_limit_on_emergency: r(),
                max_actions_per_day: r(),
                reserved_actions_for_emergency: r(),
            },
            wal_safety: WalSafetySpec {
                acknowledge_wal_risk: r(),
                require_archive_healthy: r(),
                max_pending_wal_files: r(),
                max_slot_retention_bytes: r(),
                max_pending_wal_age: r(),
                alert_on_resize: r(),
            },
            reclaim_space: ReclaimSpaceSpec {
                enabled: r(),
                schedule: r(),
                timezone: r(),
            },
            problems: Vec::new(),
        };
        let json = serde_json::to_value(&full).expect("serialise");
        let mut paths = Vec::new();
        let top = json.as_object().expect("object");
        for (k, v) in top {
            match v.as_object() {
                Some(inner) => paths.extend(inner.keys().map(|ik| format!("{k}.{ik}"))),
                None => paths.push(k.clone()),
            }
        }
        paths.sort();
        let mut table: Vec<String> = FIELDS.iter().map(|f| f.path.to_string()).collect();
        table.sort();
        assert_eq!(paths, table);
        // And every table path is reachable through the accessors.
        for f in FIELDS {
            assert!(full.get(f.path).is_some(), "{} not reachable", f.path);
        }
        assert_eq!(to_annotations(&full).len(), FIELDS.len());
    }

    #[test]
    fn reads_policy_annotations_and_ignores_others() {
        let a = map(&[
            ("headroom.dev/enabled", "true"),
            ("headroom.dev/limit", "200Gi"),
            ("headroom.dev/usage-threshold", "85"),
            ("headroom.dev/maintenance-window-schedule", "0 3 * * 0"),
            ("headroom.dev/emergency-grow-critical-threshold", "97"),
            ("headroom.dev/wal-safety-acknowledge-wal-risk", "true"),
            ("headroom.dev/wal-safety-max-pending-wal-files", "250"),
            ("headroom.dev/history", "[]"),
            ("headroom.dev/reclaim", "{}"),
            (
                "volume.kubernetes.io/storage-provisioner",
                "ebs.csi.aws.com",
            ),
        ]);
        let spec = from_annotations(&a, "PVC db/data");
        assert!(spec.problems.is_empty(), "{:?}", spec.problems);
        assert_eq!(
            spec.get("emergencyGrow.criticalThreshold")
                .map(|r| r.text.as_str()),
            Some("97")
        );
        let v = validate(&spec, &Context::default());
        let p = v.policy.expect("valid");
        assert!(p.enabled);
        assert_eq!(p.limit, 200 * GI);
        assert_eq!(p.usage_threshold, Some(85));
        assert_eq!(p.emergency_grow.critical_threshold, 97);
        assert!(p.wal_safety.acknowledge_wal_risk);
        assert_eq!(p.wal_safety.max_pending_wal_files, 250);
        assert_eq!(
            p.maintenance_window.map(|w| w.schedule),
            Some("0 3 * * 0".to_string())
        );
        assert_eq!(to_annotations(&spec).len(), 7);
    }

    #[test]
    fn unknown_annotation_is_an_error_naming_the_key() {
        let a = map(&[
            ("headroom.dev/limit", "10Gi"),
            ("headroom.dev/usage-treshold", "90"),
        ]);
        let spec = from_annotations(&a, "PVC db/data");
        let v = validate(&spec, &Context::default());
        assert!(v.policy.is_none());
        assert_eq!(v.errors.len(), 1);
        assert_eq!(v.errors[0].field, "headroom.dev/usage-treshold");
        assert!(
            v.errors[0]
                .message
                .contains("did you mean headroom.dev/usage-threshold?"),
            "{}",
            v.errors[0].message
        );
    }

    #[test]
    fn enforcement_is_read_and_an_approval_is_not_a_policy_key() {
        use crate::policy::Enforcement;
        let a = map(&[
            ("headroom.dev/limit", "10Gi"),
            ("headroom.dev/enforcement", "approve"),
            // Whatever a person writes here, the claim's policy stays valid.
            ("headroom.dev/approve", "{not an id"),
        ]);
        let v = validate(&from_annotations(&a, "PVC db/data"), &Context::default());
        assert_eq!(v.errors, []);
        assert_eq!(v.policy.expect("valid").enforcement, Enforcement::Approve);
        let none = validate(
            &from_annotations(&map(&[("headroom.dev/limit", "10Gi")]), "PVC db/data"),
            &Context::default(),
        );
        assert_eq!(none.policy.expect("valid").enforcement, Enforcement::Act);
        let bad = map(&[
            ("headroom.dev/limit", "10Gi"),
            ("headroom.dev/enforcement", "dry-run"),
        ]);
        let v = validate(&from_annotations(&bad, "PVC db/data"), &Context::default());
        assert_eq!(v.errors.len(), 1);
        assert_eq!(v.errors[0].field, "enforcement");
        assert!(
            v.errors[0]
                .message
                .contains("write act, recommend or approve"),
            "{}",
            v.errors[0].message
        );
    }

    #[test]
    fn bad_annotation_value_names_the_annotation() {
        let a = map(&[
            ("headroom.dev/limit", "10GB"),
            ("headroom.dev/enabled", "yes"),
        ]);
        let v = validate(
            &from_annotations(&a, "StorageClass fast"),
            &Context::default(),
        );
        let fields: Vec<&str> = v.errors.iter().map(|f| f.field.as_str()).collect();
        assert_eq!(fields, ["enabled", "limit"]);
        assert!(
            v.errors[0]
                .message
                .contains("StorageClass fast annotation headroom.dev/enabled")
        );
        assert!(v.errors[1].message.contains("'10GB'"));
        assert!(v.errors[1].message.contains("headroom.dev/limit"));
    }
}
