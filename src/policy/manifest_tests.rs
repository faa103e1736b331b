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

const SECTIONS: &str = "- matchLabels: {cnpg.io/cluster: pg-main}\n  policy: {enabled: true, limit: 1Ti, usageThreshold: 150}\n- matchExpressions: [{key: app, operator: Exists, values: [x]}]\n  policy: {limit: 1Gi}\n";

/// Issue 49: the selector sections kept as a file of their own (a list, whatever its name) get
/// the checks the ConfigMap's key gets, the file named in their messages.
#[test]
fn a_file_of_selector_sections_is_checked_as_the_configmap_key() {
    let ctx = Context::default();
    let file = check_file("selectors.yaml", SECTIONS, &ctx, None);
    let indented: String = SECTIONS.lines().map(|l| format!("    {l}\n")).collect();
    let cm = format!("kind: ConfigMap\ndata:\n  selectors.yaml: |\n{indented}");
    assert_eq!(file, {
        let key = check_document(&cm, &ctx);
        Checked {
            errors: key
                .errors
                .iter()
                .map(|f| Finding {
                    field: f.field.clone(),
                    message: f.message.replace(
                        "ConfigMap (unnamed) key selectors.yaml",
                        "selector sections file selectors.yaml",
                    ),
                })
                .collect(),
            warnings: key.warnings,
        }
    });
    assert_eq!(
        fields(&file.errors),
        [
            "selectors.yaml[0]: usageThreshold",
            "selectors.yaml[1].matchExpressions[0].values"
        ]
    );
    assert!(
        file.errors[1].message.starts_with("selector sections file selectors.yaml, section 1, matchExpressions[0].values: Exists takes no values"),
        "{:?}",
        file.errors[1]
    );
    // By its shape alone, under any name.
    let other = check_file("team-a.yaml", SECTIONS, &ctx, None);
    assert_eq!(fields(&other.errors), fields(&file.errors));
    let good = "- namespaces: [db]\n  matchLabels: {cnpg.io/cluster: pg-main}\n  policy: {enabled: true, limit: 2Ti}\n";
    assert_eq!(check_file("s.yaml", good, &ctx, None), Checked::default());
    // With the cluster's claims, as for the ConfigMap: a section none of them reach is said.
    let c = check_file("s.yaml", good, &ctx, Some(&[]));
    assert_eq!(
        fields(&c.warnings),
        ["selectors.yaml[0]"],
        "{:?}",
        c.warnings
    );
}

/// Issue 49: a file named as selector sections is read as them whatever it holds; a file that
/// is no form at all is told every form validate reads.
#[test]
fn a_selectors_file_by_its_name_and_a_file_of_no_form() {
    let ctx = Context::default();
    let mapping = "matchLabels: {app: a}\npolicy: {limit: 1Gi}\n";
    let c = check_file("prod-selectors.yml", mapping, &ctx, None);
    assert_eq!(fields(&c.errors), ["selectors.yaml"], "{:?}", c.errors);
    assert!(
        c.errors[0]
            .message
            .starts_with("selector sections file prod-selectors.yml: expected a list of sections"),
        "{:?}",
        c.errors
    );
    // The same mapping under another name is a policy file, with its unknown keys.
    let c = check_file("p.yaml", mapping, &ctx, None);
    assert!(fields(&c.errors).contains(&"matchLabels"), "{:?}", c.errors);
    assert_eq!(
        check_file("selectors.yaml", "", &ctx, None),
        Checked::default()
    );
    let c = check_file("notes.yaml", "just some notes\n", &ctx, None);
    assert_eq!(fields(&c.errors), ["(document)"]);
    for form in [
        "the file is a single value",
        "a policy file",
        "a file of selector sections",
        "kind: ConfigMap",
        "a Namespace's",
    ] {
        assert!(c.errors[0].message.contains(form), "{form}: {:?}", c.errors);
    }
}
