//! Reading YAML into a PolicySpec: structure, unknown keys, round trip.

use super::spec::{PolicySpec, Raw};
use super::validate::{Context, parse_policy_yaml};

const FULL: &str = r#"
enabled: true
mode: threshold            # threshold | convergent
limit: 100Gi
usageThreshold: 80
minAvailable: 5Gi
inodeThreshold: 90
step: 20%
minStep: 2Gi
maxStep: 500Gi
maxActionsPerDay: 3
request: 10Gi
targetBuffer: 20
maintenanceWindow: { schedule: "0 3 * * 0", duration: 4h, timezone: America/New_York }
emergencyGrow:
  enabled: true
  criticalThreshold: 95
  criticalMinimumFree: 1Gi
  exceedLimitOnEmergency: false
  reservedActionsForEmergency: 1
walSafety:
  acknowledgeWALRisk: false
  requireArchiveHealthy: true
  maxPendingWALFiles: 100
  maxSlotRetentionBytes: 10Gi
"#;

fn text<'a>(s: &'a PolicySpec, path: &str) -> Option<&'a str> {
    s.get(path).map(|r| r.text.as_str())
}

#[test]
fn reads_the_issue_example_keeping_text() {
    let s = PolicySpec::from_yaml(FULL, None).expect("yaml");
    assert!(s.problems.is_empty(), "{:?}", s.problems);
    assert_eq!(text(&s, "enabled"), Some("true"));
    assert_eq!(text(&s, "limit"), Some("100Gi"));
    assert_eq!(text(&s, "usageThreshold"), Some("80"));
    assert_eq!(text(&s, "step"), Some("20%"));
    assert_eq!(text(&s, "maintenanceWindow.schedule"), Some("0 3 * * 0"));
    assert_eq!(text(&s, "maintenanceWindow.duration"), Some("4h"));
    assert_eq!(
        text(&s, "maintenanceWindow.timezone"),
        Some("America/New_York")
    );
    assert_eq!(
        text(&s, "emergencyGrow.exceedLimitOnEmergency"),
        Some("false")
    );
    assert_eq!(text(&s, "walSafety.maxPendingWALFiles"), Some("100"));
    assert_eq!(text(&s, "walSafety.maxSlotRetentionBytes"), Some("10Gi"));
}

#[test]
fn yaml_round_trip() {
    let s = PolicySpec::from_yaml(FULL, None).expect("yaml");
    let out = serde_saphyr::to_string(&s).expect("serialise");
    let back = PolicySpec::from_yaml(&out, None).expect("reparse");
    assert_eq!(back, s, "serialised as:\n{out}");
    // Quoted strings that look like other types come back as the same text.
    let s = PolicySpec::from_yaml("enabled: \"true\"\nstep: \"20\"\nlimit: '1e3'\n", None)
        .expect("yaml");
    let back =
        PolicySpec::from_yaml(&serde_saphyr::to_string(&s).expect("ser"), None).expect("reparse");
    assert_eq!(back, s);
}

#[test]
fn unknown_keys_are_problems_with_suggestions() {
    let s = PolicySpec::from_yaml(
        "limit: 10Gi\nusageTreshold: 90\ncolour: blue\nemergencyGrow:\n  criticalTreshold: 95\ncriticalMinimumFree: 1Gi\n",
        None,
    )
    .expect("yaml");
    let fields: Vec<&str> = s.problems.iter().map(|f| f.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "usageTreshold",
            "colour",
            "emergencyGrow.criticalTreshold",
            "criticalMinimumFree"
        ]
    );
    assert!(
        s.problems[0]
            .message
            .contains("did you mean usageThreshold?")
    );
    assert!(s.problems[1].message.contains("unknown key; remove it"));
    assert!(
        s.problems[2]
            .message
            .contains("did you mean emergencyGrow.criticalThreshold?"),
        "{}",
        s.problems[2].message
    );
    assert!(
        s.problems[3]
            .message
            .contains("did you mean emergencyGrow.criticalMinimumFree?")
    );
    // The typo'd value did not land anywhere.
    assert_eq!(s.get("usageThreshold"), None);
    let v = parse_policy_yaml("limit: 10Gi\nusageTreshold: 90\n", &Context::default());
    assert!(v.policy.is_none());
    assert_eq!(v.errors[0].field, "usageTreshold");
}

#[test]
fn wrong_shapes_and_syntax() {
    let s = PolicySpec::from_yaml(
        "limit: [1, 2]\nwalSafety: true\nmaintenanceWindow: ~\n",
        None,
    )
    .expect("yaml");
    let fields: Vec<&str> = s.problems.iter().map(|f| f.field.as_str()).collect();
    assert_eq!(fields, ["limit", "walSafety"]);
    assert!(
        s.problems[0]
            .message
            .contains("expected a single value, found a list")
    );
    assert!(s.problems[1].message.contains("acknowledgeWALRisk"));
    let top = PolicySpec::from_yaml("- a\n- b\n", None).expect("yaml");
    assert_eq!(top.problems[0].field, "(document)");
    for bad in ["limit: 10Gi\nlimit: 20Gi\n", "limit: [10Gi\n", "a: b: c\n"] {
        let v = parse_policy_yaml(bad, &Context::default());
        assert_eq!(v.errors.len(), 1, "{bad:?}: {:?}", v.errors);
        assert_eq!(v.errors[0].field, "(yaml)");
        assert!(!v.errors[0].message.contains('\n'));
    }
}

#[test]
fn empty_document_is_missing_limit() {
    for doc in ["", "# only a comment\n", "---\n"] {
        let v = parse_policy_yaml(doc, &Context::default());
        let fields: Vec<&str> = v.errors.iter().map(|f| f.field.as_str()).collect();
        assert_eq!(fields, ["limit"], "{doc:?}");
    }
}

#[test]
fn scalars_keep_their_text() {
    let s = PolicySpec::from_yaml("limit: 10GB\nusageThreshold: 80.5\nenabled: yes\n", None)
        .expect("yaml");
    assert_eq!(s.get("limit"), Some(&Raw::new("10GB")));
    assert_eq!(text(&s, "usageThreshold"), Some("80.5"));
    assert_eq!(text(&s, "enabled"), Some("yes"));
    let v = parse_policy_yaml("limit: 10GB\n", &Context::default());
    assert!(
        v.errors[0].message.contains("'10GB'"),
        "{}",
        v.errors[0].message
    );
}

/// Found by the `policy` fuzz target: an empty key (`'': 1`) made a finding with an empty field,
/// an error that names nothing.
#[test]
fn an_empty_key_is_named_as_written() {
    let v = parse_policy_yaml(
        "limit: 10Gi\n'': 1\ntrigger:\n  '': 2\n",
        &Context::default(),
    );
    let fields: Vec<&str> = v.errors.iter().map(|f| f.field.as_str()).collect();
    assert_eq!(fields, ["\"\"", "trigger.\"\""], "{:?}", v.errors);
    assert!(v.policy.is_none());
}
