use super::*;
use crate::policy::validate::{Context, validate};
use crate::quantity::GI;

use crate::policy::test_map as map;

fn central() -> CentralPolicy {
    let c = parse_configmap(
        &map(&[
            (
                POLICY_KEY,
                "enabled: true\nlimit: 100Gi\nusageThreshold: 70\nemergencyGrow:\n  criticalThreshold: 90\n  criticalMinimumFree: 2Gi\n",
            ),
            (
                STORAGE_CLASSES_KEY,
                "fast:\n  usageThreshold: 75\n  step: 10Gi\nslow:\n  limit: 1Ti\n",
            ),
            ("agent.yaml", "not: ours"),
        ]),
        "headroom/headroom-policy",
    );
    assert_eq!(c.all_problems().count(), 0);
    c
}

#[test]
fn pvc_overrides_one_nested_key_only() {
    let pvc = map(&[("headroom.dev/emergency-grow-critical-threshold", "97")]);
    let sc = map(&[("headroom.dev/max-actions-per-day", "5")]);
    let m = effective("db/data-pg-0", &pvc, Some(("fast", &sc)), &central());
    let src = |k: &str| m.provenance[k];
    assert_eq!(
        src("emergencyGrow.criticalThreshold"),
        Source::PvcAnnotation
    );
    assert_eq!(
        src("emergencyGrow.criticalMinimumFree"),
        Source::ConfigMapDefault
    );
    assert_eq!(src("maxActionsPerDay"), Source::StorageClassAnnotation);
    assert_eq!(src("usageThreshold"), Source::ConfigMapStorageClass);
    assert_eq!(src("step"), Source::ConfigMapStorageClass);
    assert_eq!(src("limit"), Source::ConfigMapDefault);
    assert_eq!(src("inodeThreshold"), Source::Default);
    assert_eq!(m.provenance.len(), FIELDS.len());
    let p = validate(&m.spec, &Context::default())
        .policy
        .expect("valid");
    assert_eq!(p.emergency_grow.critical_threshold, 97);
    assert_eq!(p.emergency_grow.critical_minimum_free, 2 * GI);
    assert_eq!(
        (p.max_actions_per_day, p.usage_threshold, p.limit),
        (5, Some(75), 100 * GI)
    );
    assert_eq!(p.inode_threshold, crate::policy::defaults::INODE_THRESHOLD);
    let json = serde_json::to_value(&m.provenance).expect("json");
    assert_eq!(json["emergencyGrow.criticalThreshold"], "pvc_annotation");
    assert_eq!(json["maxActionsPerDay"], "storage_class_annotation");
    assert_eq!(json["usageThreshold"], "config_map_storage_class");
    assert_eq!(json["limit"], "config_map_default");
    assert_eq!(json["inodeThreshold"], "default");
}

/// Issue 42: a Namespace's `headroom.dev/*` annotations are a layer between the claim's own
/// and its StorageClass's, key by key, and a typo in them refuses the policy naming the
/// Namespace.
#[test]
fn a_namespace_sits_between_the_claim_and_its_class() {
    let ns = map(&[
        ("headroom.dev/enabled", "true"),
        ("headroom.dev/limit", "20Gi"),
        ("headroom.dev/usage-threshold", "60"),
    ]);
    let pvc = map(&[("headroom.dev/usage-threshold", "90")]);
    let sc = map(&[("headroom.dev/limit", "1Ti"), ("headroom.dev/step", "5Gi")]);
    let no_labels = BTreeMap::new();
    let o = ClaimObjects {
        pvc: "db/a",
        pvc_annotations: &pvc,
        pvc_namespace: "db",
        pvc_labels: &no_labels,
        namespace: Some(("db", &ns)),
        storage_class: Some(("fast", &sc)),
        spec_limit: None,
    };
    let m = effective_for(&o, &central());
    let src = |k: &str| m.provenance[k];
    assert_eq!(src("usageThreshold"), Source::PvcAnnotation);
    assert_eq!(src("limit"), Source::NamespaceAnnotation);
    assert_eq!(src("enabled"), Source::NamespaceAnnotation);
    assert_eq!(src("step"), Source::StorageClassAnnotation);
    assert_eq!(src("inodeThreshold"), Source::Default);
    assert_eq!(
        m.spec.get("limit").and_then(|r| r.origin.as_deref()),
        Some("Namespace db annotation headroom.dev/limit")
    );
    assert!(m.wants_enabled());
    let json = serde_json::to_value(&m.provenance).expect("json");
    assert_eq!(json["limit"], "namespace_annotation");
    let typo = map(&[
        ("headroom.dev/enabled", "true"),
        ("headroom.dev/limt", "1Gi"),
    ]);
    let m = effective_for(
        &ClaimObjects {
            namespace: Some(("db", &typo)),
            ..o
        },
        &central(),
    );
    let v = validate(&m.spec, &Context::default());
    assert_eq!(v.errors[0].field, "headroom.dev/limt");
    assert!(
        v.errors[0].message.contains(
            "unknown headroom annotation on Namespace db; did you mean headroom.dev/limit?"
        ),
        "{}",
        v.errors[0].message
    );
    assert!(v.policy.is_none());
}

/// Issue 42: the first matching selector section sits between the claim and its Namespace;
/// a broken section refuses the claims that reach it, naming the key, section and field.
#[test]
fn a_selector_section_sits_between_the_claim_and_its_namespace() {
    let mut data = map(&[(
        SELECTORS_KEY,
        "- matchLabels: {cnpg.io/cluster: pg-main}\n  policy: {limit: 300Gi, step: 7Gi}\n- matchExpressions: [{key: app, operator: in, values: [x]}]\n  policy: {limit: 1Gi}\n",
    )]);
    data.extend(map(&[(POLICY_KEY, "enabled: true\nlimit: 100Gi\n")]));
    let c = parse_configmap(&data, "headroom/hp");
    let ns = map(&[("headroom.dev/limit", "20Gi"), ("headroom.dev/step", "2Gi")]);
    let pvc = map(&[("headroom.dev/step", "3Gi")]);
    let pg = map(&[("cnpg.io/cluster", "pg-main")]);
    let o = ClaimObjects {
        pvc: "db/pg-main-1",
        pvc_annotations: &pvc,
        pvc_namespace: "db",
        pvc_labels: &pg,
        namespace: Some(("db", &ns)),
        storage_class: None,
        spec_limit: None,
    };
    let m = effective_for(&o, &c);
    assert_eq!(m.provenance["limit"], Source::ConfigMapSelector);
    assert_eq!(m.provenance["step"], Source::PvcAnnotation);
    assert_eq!(m.provenance["enabled"], Source::ConfigMapDefault);
    assert_eq!(
        m.spec.get("limit").and_then(|r| r.origin.as_deref()),
        Some("ConfigMap headroom/hp key selectors.yaml, section 0")
    );
    let v = validate(&m.spec, &Context::default());
    assert!(v.errors.is_empty(), "{:?}", v.errors);
    assert_eq!(v.policy.map(|p| p.limit), Some(300 * GI));
    // Another cluster reaches section 1, which cannot be read: refused, naming it.
    let other = map(&[("cnpg.io/cluster", "pg-other")]);
    let m = effective_for(
        &ClaimObjects {
            pvc_labels: &other,
            ..o
        },
        &c,
    );
    let v = validate(&m.spec, &Context::default());
    assert_eq!(
        v.errors
            .iter()
            .map(|f| f.field.as_str())
            .collect::<Vec<_>>(),
        ["selectors.yaml[1].matchExpressions[0].operator"]
    );
    assert!(
        v.errors[0]
            .message
            .contains("ConfigMap headroom/hp key selectors.yaml, section 1")
    );
    assert_eq!(c.all_problems().count(), 1);
}

#[test]
fn only_the_volumes_own_storage_class_section_applies() {
    let c = central();
    let m = effective(
        "db/a",
        &BTreeMap::new(),
        Some(("slow", &BTreeMap::new())),
        &c,
    );
    assert_eq!(m.spec.get("limit").map(|r| r.text.as_str()), Some("1Ti"));
    assert_eq!(
        m.spec.get("usageThreshold").map(|r| r.text.as_str()),
        Some("70")
    );
    let m = effective("db/b", &BTreeMap::new(), None, &c);
    assert_eq!(m.spec.get("limit").map(|r| r.text.as_str()), Some("100Gi"));
    assert_eq!(m.provenance["limit"], Source::ConfigMapDefault);
}

#[test]
fn errors_name_the_layer() {
    let pvc = map(&[("headroom.dev/usage-threshold", "150")]);
    let m = effective("db/data-pg-0", &pvc, None, &central());
    let v = validate(&m.spec, &Context::default());
    assert_eq!(v.errors.len(), 1);
    assert_eq!(v.errors[0].field, "usageThreshold");
    assert!(
        v.errors[0]
            .message
            .contains("PVC db/data-pg-0 annotation headroom.dev/usage-threshold"),
        "{}",
        v.errors[0].message
    );
    // A typo in a StorageClass annotation refuses the PVC's policy instead of being ignored.
    let sc = map(&[("headroom.dev/usage-treshold", "90")]);
    let m = effective(
        "db/data-pg-0",
        &BTreeMap::new(),
        Some(("fast", &sc)),
        &central(),
    );
    let v = validate(&m.spec, &Context::default());
    assert_eq!(v.errors[0].field, "headroom.dev/usage-treshold");
    assert!(v.errors[0].message.contains("StorageClass fast"));
}

#[test]
fn configmap_errors_name_the_key_and_field() {
    let c = parse_configmap(
        &map(&[
            (POLICY_KEY, "limit: [100Gi\n"),
            (
                STORAGE_CLASSES_KEY,
                "fast:\n  usageTreshold: 80\n  limit: 10GB\n",
            ),
        ]),
        "headroom/hp",
    );
    assert_eq!(c.errors.len(), 1);
    assert_eq!(c.errors[0].field, POLICY_KEY);
    assert!(c.errors[0].message.contains("ConfigMap headroom/hp"));
    let fast = &c.storage_classes["fast"];
    assert_eq!(fast.problems[0].field, "usageTreshold");
    assert!(
        fast.problems[0]
            .message
            .contains("ConfigMap headroom/hp key storageClasses.yaml, StorageClass fast")
    );
    // The broken defaults refuse every volume; the bad value names where it was written.
    let v = validate(
        &effective(
            "db/x",
            &BTreeMap::new(),
            Some(("fast", &BTreeMap::new())),
            &c,
        )
        .spec,
        &Context::default(),
    );
    let fields: Vec<&str> = v.errors.iter().map(|f| f.field.as_str()).collect();
    assert_eq!(fields, ["usageTreshold", "policy.yaml", "limit"]);
    assert!(
        v.errors[2].message.contains("'10GB'") && v.errors[2].message.contains("StorageClass fast")
    );

    let c = parse_configmap(&map(&[(STORAGE_CLASSES_KEY, "- fast\n")]), "headroom/hp");
    assert_eq!(c.errors[0].field, STORAGE_CLASSES_KEY);
    assert!(c.errors[0].message.contains("mapping of StorageClass name"));
    let c = parse_configmap(&map(&[(STORAGE_CLASSES_KEY, "fast: 3\n")]), "headroom/hp");
    assert_eq!(c.storage_classes["fast"].problems[0].field, "(document)");
}
