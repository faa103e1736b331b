//! The policy schema as a JSON Schema (draft-07), for tools that validate policy YAML before
//! headroom reads it: the Helm chart's `values.schema.json` embeds it, so `helm lint` and
//! `helm install` refuse an unknown key, a wrong type or an out-of-range number in the chart's
//! policy values. Its keys are [`FIELDS`]; its ranges and enums are the ones [`super::validate`]
//! enforces (the tests below probe `validate` at every bound). Formats the schema cannot express
//! (durations, cron, time zones, whole-byte quantities) are left to `headroom validate` and the
//! agent, which refuse them with a message.

use serde_json::{Map, Value, json};

use super::fields::{FIELDS, GROUPS, default_text};

/// How one key's value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Boolean,
    Enum(&'static [&'static str]),
    /// A whole number in `min..=max` (`max` None: no upper bound).
    Integer(u64, Option<u64>),
    /// A Kubernetes quantity (`10Gi`, `500M`, a plain byte count).
    Size,
    /// `N%` (1-1000) or a quantity with a unit.
    Step,
    /// A free-space floor: a quantity, or a percent above 0 and below 100. `validate` only warns
    /// about a bad one (it falls back to the percent trigger); the chart refuses it at install.
    Floor,
    /// Text headroom parses itself: a duration, a cron schedule, a time zone.
    Text(&'static str),
    /// Such text, or 0 (the check off).
    TextOrZero(&'static str),
}

/// The kind of every key in [`FIELDS`]; a key missing here fails the tests.
fn kind(path: &str) -> Option<Kind> {
    use Kind::*;
    Some(match path {
        "enabled"
        | "trigger.predictive"
        | "emergencyGrow.enabled"
        | "emergencyGrow.exceedLimitOnEmergency"
        | "walSafety.acknowledgeWALRisk"
        | "walSafety.requireArchiveHealthy"
        | "walSafety.alertOnResize"
        | "reclaimSpace.enabled" => Boolean,
        "mode" => Enum(&["threshold", "convergent"]),
        "logicalVolume" => Enum(&["auto", "on", "off"]),
        "offlineExpansion" => Enum(&["off", "evict"]),
        "nodeExpansion" => Enum(&["online", "offline"]),
        "enforcement" => Enum(&["act", "recommend", "approve"]),
        "resizeThrough" => Enum(&["claim", "owner"]),
        "minAvailable" | "poolReserve" => Floor,
        "limit"
        | "minStep"
        | "maxStep"
        | "request"
        | "emergencyGrow.criticalMinimumFree"
        | "walSafety.maxSlotRetentionBytes" => Size,
        // 0: no percent trigger (a floor alone decides; issue 24).
        "usageThreshold" => Integer(0, Some(99)),
        "inodeThreshold" => Integer(1, Some(99)),
        "maxActionsPerDay"
        | "emergencyGrow.maxActionsPerDay"
        | "emergencyGrow.reservedActionsForEmergency" => Integer(0, Some(10)),
        "targetBuffer" => Integer(5, Some(50)),
        "emergencyGrow.criticalThreshold" => Integer(80, Some(99)),
        "walSafety.maxPendingWALFiles" => Integer(0, None),
        "step" => Step,
        "modificationInterval" => TextOrZero(
            "auto (the CSI driver's known limit, e.g. 6h for ebs.csi.aws.com), a duration up to 7 days such as 6h, or 0s: none",
        ),
        "trigger.resizeLeadTime" => Text("a duration from 1s to 24h, e.g. 2m"),
        "trigger.margin" => Text("a duration from 0s to 24h, e.g. 30s"),
        "walSafety.maxPendingWALAge" => TextOrZero("a duration up to 7 days, e.g. 15m; 0: off"),
        "maintenanceWindow.duration" => Text("a duration up to 7 days, e.g. 4h or 1h30m"),
        "maintenanceWindow.schedule" => Text("a 5-field cron start time or @daily"),
        "reclaimSpace.schedule" => Text("a 5-field cron, @daily, @weekly or @monthly"),
        "maintenanceWindow.timezone" | "reclaimSpace.timezone" => {
            Text("an IANA time zone name, e.g. Europe/Berlin")
        }
        _ => return None,
    })
}

/// The spellings of true and false that headroom reads (`value::boolean`).
const BOOLEAN_TEXT: &[&str] = &["true", "True", "TRUE", "false", "False", "FALSE"];
/// A Kubernetes quantity: digits with an optional fraction, then a suffix or a decimal exponent.
const QUANTITY: &str =
    r"[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?";
/// A percent above 0 and below 100 (a free-space floor relative to the filesystem's size).
const PERCENT_BELOW_100: &str = r"([1-9][0-9]?(\.[0-9]+)?|0?\.[0-9]*[1-9][0-9]*)";
/// A quantity with a unit (a bare number is refused as a step).
const QUANTITY_WITH_UNIT: &str =
    r"[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)";

fn leaf(path: &str, kind: Kind, annotation: &str) -> Value {
    let default = default_text(path).map_or_else(|| "none".to_string(), |d| d.to_string());
    let mut s = match kind {
        Kind::Boolean => {
            let mut values = vec![json!(true), json!(false)];
            values.extend(BOOLEAN_TEXT.iter().map(|t| json!(t)));
            json!({ "enum": values })
        }
        Kind::Enum(values) => json!({ "type": "string", "enum": values }),
        Kind::Integer(min, max) => {
            let mut s = json!({ "type": "integer", "minimum": min });
            if let Some(max) = max {
                s["maximum"] = json!(max);
            }
            s
        }
        Kind::Size => json!({ "anyOf": [
            { "type": "integer", "minimum": 0 },
            { "type": "string", "pattern": format!("^{QUANTITY}$") },
        ] }),
        Kind::Floor => json!({ "anyOf": [
            { "type": "integer", "minimum": 0 },
            { "type": "string", "pattern": format!("^{QUANTITY}$") },
            { "type": "string", "pattern": format!("^{PERCENT_BELOW_100}%$") },
        ] }),
        Kind::Step => json!({
            "type": "string",
            "pattern": format!("^((1000|[1-9][0-9]{{0,2}})%|{QUANTITY_WITH_UNIT})$"),
        }),
        Kind::Text(what) => json!({ "type": "string", "minLength": 1, "$comment": what }),
        Kind::TextOrZero(what) => json!({
            "anyOf": [{ "type": "integer", "enum": [0] }, { "type": "string", "minLength": 1 }],
            "$comment": what,
        }),
    };
    s["description"] = json!(format!("{annotation}; default {default}"));
    s
}

fn object(properties: Map<String, Value>) -> Value {
    json!({ "type": "object", "additionalProperties": false, "properties": properties })
}

/// One policy document (`policy.yaml`, or one StorageClass's section of `storageClasses.yaml`):
/// every key optional, unknown keys refused, as headroom reads it.
pub fn policy_schema() -> Value {
    let mut top = Map::new();
    let mut groups: Vec<(&str, Map<String, Value>)> =
        GROUPS.iter().map(|g| (*g, Map::new())).collect();
    for f in FIELDS {
        let kind = kind(f.path).unwrap_or_else(|| panic!("{} has no kind in json_schema", f.path));
        let schema = leaf(f.path, kind, f.annotation);
        match f.path.split_once('.') {
            Some((group, key)) => {
                let (_, props) = groups
                    .iter_mut()
                    .find(|(g, _)| *g == group)
                    .unwrap_or_else(|| panic!("{group} is not in GROUPS"));
                props.insert(key.to_string(), schema);
            }
            None => {
                top.insert(f.path.to_string(), schema);
            }
        }
    }
    for (group, props) in groups {
        top.insert(group.to_string(), object(props));
    }
    let mut s = object(top);
    s["description"] = json!(
        "A headroom policy (docs/policy.md); headroom validate checks what this schema cannot."
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::validate::{Context, parse_policy_yaml};

    /// The errors `validate` reports for `path: value`, in a policy whose other keys leave room
    /// for it: a limit (the one required key) large enough that no size is refused for exceeding
    /// it, and the largest daily budgets, which an emergency reserve may not exceed. The sizes
    /// probed lie between the default minStep and maxStep, so no cross-key rule fires.
    fn errors(path: &str, value: &str) -> Vec<String> {
        let mut yaml = String::new();
        let mut room = vec![("limit", "1Ei"), ("maxActionsPerDay", "10")];
        // usageThreshold 0 says "no percent trigger", which needs a floor to grow on.
        if path == "usageThreshold" {
            room.push(("minAvailable", "1Gi"));
        }
        for (key, room) in room {
            if path != key {
                yaml.push_str(&format!("{key}: {room}\n"));
            }
        }
        // The emergency reserve must also fit the emergency budget (issue 24): the largest.
        let mut emergency = vec![("maxActionsPerDay", "10".to_string())];
        match path.split_once('.') {
            Some(("emergencyGrow", k)) => {
                emergency.retain(|(key, _)| *key != k);
                emergency.push((k, value.to_string()));
            }
            Some((g, k)) => yaml.push_str(&format!("{g}:\n  {k}: {value}\n")),
            None => yaml.push_str(&format!("{path}: {value}\n")),
        }
        yaml.push_str("emergencyGrow:\n");
        for (k, v) in emergency {
            yaml.push_str(&format!("  {k}: {v}\n"));
        }
        parse_policy_yaml(&yaml, &Context::default())
            .errors
            .into_iter()
            .map(|f| format!("{}: {}", f.field, f.message))
            .collect()
    }

    fn accepted(path: &str, value: &str) -> bool {
        errors(path, value).iter().all(|e| !e.starts_with(path))
    }

    /// What the schema says of `value` (as YAML would give it: a whole number, else a string),
    /// for a leaf whose alternatives are integers and patterned strings.
    fn schema_accepts(path: &str, value: &str) -> bool {
        let s = policy_schema();
        let leaf = &s["properties"][path];
        leaf["anyOf"]
            .as_array()
            .expect("anyOf")
            .iter()
            .any(|alt| match alt["type"].as_str() {
                Some("integer") => value.parse::<u64>().is_ok(),
                Some("string") => {
                    value.parse::<u64>().is_err()
                        && regex::Regex::new(alt["pattern"].as_str().expect("pattern"))
                            .expect("regex")
                            .is_match(value)
                }
                _ => false,
            })
    }

    /// Read as written: neither refused nor warned about (a bad floor is only a warning).
    fn read_as_written(path: &str, value: &str) -> bool {
        let yaml = format!("limit: 1Ei\n{path}: {value}\n");
        let v = parse_policy_yaml(&yaml, &Context::default());
        v.errors.iter().chain(&v.warnings).all(|f| f.field != path)
    }

    #[test]
    fn every_key_has_a_kind_and_appears_once() {
        let s = policy_schema();
        for f in FIELDS {
            assert!(kind(f.path).is_some(), "{}", f.path);
            let pointer = format!("/properties/{}", f.path.replace('.', "/properties/"));
            let leaf = s.pointer(&pointer).unwrap_or_else(|| panic!("{pointer}"));
            assert!(
                leaf["description"]
                    .as_str()
                    .is_some_and(|d| d.starts_with(f.annotation)),
                "{leaf}"
            );
        }
        let top = s["properties"].as_object().expect("properties");
        let nested: usize = GROUPS
            .iter()
            .map(|g| top[*g]["properties"].as_object().expect("group").len())
            .sum();
        assert_eq!(top.len() - GROUPS.len() + nested, FIELDS.len());
        assert_eq!(s["additionalProperties"], false);
        for g in GROUPS {
            assert_eq!(top[*g]["additionalProperties"], false, "{g}");
        }
    }

    /// Every bound and enum the schema states is the one `validate` enforces.
    #[test]
    fn bounds_and_enums_are_validates() {
        for f in FIELDS {
            let path = f.path;
            match kind(path).expect("kind") {
                Kind::Boolean => {
                    for t in BOOLEAN_TEXT {
                        assert!(accepted(path, t), "{path}: {t}");
                    }
                    assert!(!accepted(path, "yes"), "{path}: yes");
                }
                Kind::Enum(values) => {
                    for v in values {
                        assert!(accepted(path, v), "{path}: {v}");
                    }
                    assert!(!accepted(path, "other"), "{path}");
                }
                Kind::Integer(min, max) => {
                    assert!(accepted(path, &min.to_string()), "{path}: {min}");
                    if min > 0 {
                        assert!(!accepted(path, &(min - 1).to_string()), "{path}: below");
                    }
                    assert!(!accepted(path, "-1"), "{path}: -1");
                    match max {
                        Some(max) => {
                            assert!(accepted(path, &max.to_string()), "{path}: {max}");
                            assert!(!accepted(path, &(max + 1).to_string()), "{path}: above");
                        }
                        None => assert!(accepted(path, &u32::MAX.to_string()), "{path}"),
                    }
                    assert!(!accepted(path, "1.5"), "{path}: a fraction");
                }
                Kind::Size => {
                    for ok in ["10Gi", "20G", "1e10", "10737418240", "1.5Gi", "+2Gi"] {
                        assert!(accepted(path, ok), "{path}: {ok}");
                    }
                    for bad in ["10GB", "20%", "-1Gi", "Gi"] {
                        assert!(!accepted(path, bad), "{path}: {bad}");
                    }
                }
                Kind::Floor => {
                    for ok in ["5Gi", "500Mi", "0", "10%", "99.5%", "0.5%", "1%"] {
                        assert!(read_as_written(path, ok), "{path}: {ok}");
                        assert!(schema_accepts(path, ok), "schema {path}: {ok}");
                    }
                    for bad in ["10GB", "0%", "100%", "150%", "-1Gi", "ten%"] {
                        assert!(!read_as_written(path, bad), "{path}: {bad}");
                        assert!(!schema_accepts(path, bad), "schema {path}: {bad}");
                    }
                }
                Kind::Step => {
                    for ok in ["1%", "20%", "1000%", "10Gi", "500M"] {
                        assert!(accepted(path, ok), "{path}: {ok}");
                    }
                    for bad in ["0%", "1001%", "20", "0Gi", "10GB"] {
                        assert!(!accepted(path, bad), "{path}: {bad}");
                    }
                }
                Kind::Text(_) => {}
                Kind::TextOrZero(_) => {
                    assert!(accepted(path, "0"), "{path}: 0");
                    assert!(!accepted(path, "-1"), "{path}: -1");
                }
            }
            // Each default is a value of its kind.
            if let Some(d) = default_text(path) {
                assert!(accepted(path, &d), "{path}: default {d}");
                match kind(path).expect("kind") {
                    Kind::Integer(min, max) => {
                        let n: u64 = d.parse().expect("integer default");
                        assert!(n >= min && max.is_none_or(|m| n <= m), "{path}: {d}");
                    }
                    Kind::Boolean => assert!(BOOLEAN_TEXT.contains(&d.as_str()), "{path}: {d}"),
                    Kind::Enum(values) => assert!(values.contains(&d.as_str()), "{path}: {d}"),
                    _ => {}
                }
            }
        }
    }
}
