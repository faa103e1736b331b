use super::*;

fn fields(f: &[Finding]) -> Vec<&str> {
    f.iter().map(|f| f.field.as_str()).collect()
}

const MANIFEST: &str = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: headroom-policy
  namespace: headroom
data:
  policy.yaml: |
    enabled: false
    limit: 500Gi
    usageTreshold: 80
  storageClasses.yaml: |
    fast:
      limit: 1Ti
      minStep: 2Gi
      maxStep: 1Gi
    slow:
      enabled: true
  reclaimSpace.yaml: |
    enabled: maybe
  postgres.yaml: |
    clusters: []
  polcy.yaml: |
    limit: 1Gi
"#;

#[test]
fn a_configmap_manifest_is_checked_key_by_key() {
    let c = check_document(MANIFEST, &Context::default());
    // The defaults' typo once, under policy.yaml (not again under each class); the class's
    // own contradiction under its section; the switch under its key.
    assert_eq!(
        fields(&c.errors),
        [
            "reclaimSpace.yaml enabled",
            "policy.yaml: usageTreshold",
            "storageClasses.yaml[fast]: minStep",
        ],
        "{:?}",
        c.errors
    );
    assert!(
        c.errors[1]
            .message
            .contains("ConfigMap headroom/headroom-policy key policy.yaml"),
        "{:?}",
        c.errors[1]
    );
    // A class that turns headroom on takes the defaults' limit: no finding for it; an unknown
    // data key is said, postgres.yaml (the agent's) is not.
    assert_eq!(fields(&c.warnings), ["data.polcy.yaml"], "{:?}", c.warnings);
}

#[test]
fn a_section_that_turns_headroom_on_without_a_limit_is_warned() {
    let text = "kind: ConfigMap\ndata:\n  policy.yaml: |\n    step: 10%\n  storageClasses.yaml: |\n    fast:\n      enabled: true\n";
    let c = check_document(text, &Context::default());
    assert!(c.errors.is_empty(), "{:?}", c.errors);
    assert_eq!(fields(&c.warnings), ["storageClasses.yaml[fast]: limit"]);
}

#[test]
fn a_policy_file_and_other_kinds() {
    let c = check_document("limit: 10Gi\nusageThreshold: 150\n", &Context::default());
    assert_eq!(fields(&c.errors), ["usageThreshold"]);
    // A policy file must say limit: it is the whole policy.
    let c = check_document("enabled: true\n", &Context::default());
    assert_eq!(fields(&c.errors), ["limit"]);
    let c = check_document(
        "kind: Deployment\nmetadata: {name: x}\n",
        &Context::default(),
    );
    assert_eq!(fields(&c.errors), ["kind"]);
    assert!(c.errors[0].message.contains("a Deployment manifest"));
    let c = check_document(
        "kind: ConfigMap\ndata:\n  policy.yaml: [a]\n",
        &Context::default(),
    );
    assert_eq!(fields(&c.errors), ["data.policy.yaml"]);
    let c = check_document("kind: ConfigMap\n", &Context::default());
    assert_eq!(c, Checked::default());
}

/// Issue 42: a Namespace's annotations are checked as the layer they are: a typo names the
/// Namespace and the annotation; turning headroom on without a limit is a warning.
#[test]
fn a_namespace_manifest_checks_its_policy_annotations() {
    let text = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: payments\n  annotations:\n    headroom.dev/enabled: \"true\"\n    headroom.dev/usage-treshold: \"70\"\n    team: a\n";
    let c = check_document(text, &Context::default());
    assert_eq!(fields(&c.errors), ["headroom.dev/usage-treshold"]);
    assert!(
        c.errors[0].message.contains("unknown headroom annotation on Namespace payments; did you mean headroom.dev/usage-threshold?"),
        "{:?}",
        c.errors
    );
    assert_eq!(fields(&c.warnings), ["limit"]);
    let ok =
        "kind: Namespace\nmetadata:\n  name: db\n  annotations:\n    headroom.dev/limit: 20Gi\n";
    assert_eq!(check_document(ok, &Context::default()), Checked::default());
}

/// Issue 42: the selector sections are checked as the agent reads them: an invalid expression
/// names the key, the section and the field; a section's policy is checked over the defaults.
#[test]
fn selector_sections_are_checked() {
    let text = "kind: ConfigMap\nmetadata: {name: hp, namespace: headroom}\ndata:\n  policy.yaml: |\n    limit: 100Gi\n  selectors.yaml: |\n    - matchLabels: {cnpg.io/cluster: pg-main}\n      policy: {enabled: true, usageThreshold: 150}\n    - matchExpressions: [{key: app, operator: Exists, values: [x]}]\n      policy: {enabled: true}\n";
    let c = check_document(text, &Context::default());
    assert_eq!(
        fields(&c.errors),
        [
            "selectors.yaml[0]: usageThreshold",
            "selectors.yaml[1].matchExpressions[0].values"
        ],
        "{:?}",
        c.errors
    );
    assert!(
        c.errors[1].message.starts_with("ConfigMap headroom/hp key selectors.yaml, section 1, matchExpressions[0].values: Exists takes no values"),
        "{:?}",
        c.errors[1]
    );
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
}
