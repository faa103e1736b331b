use std::collections::BTreeMap;

use super::*;
use crate::policy::merge::{
    CentralPolicy, Source, effective, effective_with_limits, parse_configmap,
};
use crate::policy::validate::{Context, Validation, validate};
use crate::policy::{MinAvailable, Step};
use crate::quantity::GI;

use crate::policy::test_map as map;

fn enabled_class() -> BTreeMap<String, String> {
    map(&[(ENABLED, "true")])
}

fn run(
    pvc: &BTreeMap<String, String>,
    class: &BTreeMap<String, String>,
    spec_limit: Option<&str>,
    central: &CentralPolicy,
) -> (crate::policy::Merged, Validation) {
    let m = effective_with_limits(
        "db/data-pg-0",
        pvc,
        Some(("topolvm-provisioner", class)),
        spec_limit,
        central,
    );
    // As the agent validates: knowing where minAvailable came from.
    let ctx = Context {
        min_available_source: m.min_available_source(),
        ..Context::default()
    };
    let v = validate(&m.spec, &ctx);
    (m, v)
}

#[test]
fn the_upstream_readme_example_translates_key_by_key() {
    let pvc = map(&[
        (STORAGE_LIMIT, "100Gi"),
        (THRESHOLD, "20%"),
        (INODES_THRESHOLD, "20%"),
        (INCREASE, "20Gi"),
        // topolvm's own bookkeeping and grouping annotations are not policy.
        ("resize.topolvm.io/pre_capacity_bytes", "32212254720"),
        ("resize.topolvm.io/initial-resize-group-by", "app"),
    ]);
    let (m, v) = run(&pvc, &enabled_class(), None, &CentralPolicy::default());
    assert!(v.errors.is_empty(), "{:?}", v.errors);
    let p = v.policy.expect("valid");
    assert!(p.enabled);
    assert_eq!(p.limit, 100 * GI);
    // Issue 24: the threshold is a free-space floor of 20 % of the filesystem, strictly below,
    // with no percent-used trigger, as pvc-autoresizer reads it (was usageThreshold 80).
    assert_eq!(p.min_available, MinAvailable::Percent(20.0));
    assert_eq!((p.usage_threshold, p.inode_threshold), (None, 80));
    assert_eq!(p.step, Step::Bytes(20 * GI));
    for key in [
        "limit",
        "usageThreshold",
        "minAvailable",
        "inodeThreshold",
        "step",
    ] {
        assert_eq!(m.provenance[key], Source::TopolvmPvcAnnotation, "{key}");
    }
    assert_eq!(
        m.provenance["enabled"],
        Source::TopolvmStorageClassAnnotation
    );
    assert_eq!(m.provenance["maxActionsPerDay"], Source::Default);
    assert_eq!(
        serde_json::to_value(&m.provenance).expect("json")["step"],
        "topolvm_pvc_annotation"
    );
    let origin = m.spec.get("usageThreshold").and_then(|r| r.origin.clone());
    assert_eq!(
        origin.as_deref(),
        Some("PVC db/data-pg-0 annotation resize.topolvm.io/threshold: 20%")
    );
    let origin = m.spec.get("enabled").and_then(|r| r.origin.clone());
    assert_eq!(
        origin.as_deref(),
        Some("StorageClass topolvm-provisioner annotation resize.topolvm.io/enabled")
    );
}

#[test]
fn unset_keys_take_pvc_autoresizers_defaults_only_when_it_enables_the_claim() {
    let pvc = map(&[(STORAGE_LIMIT, "50Gi")]);
    let (m, v) = run(&pvc, &enabled_class(), None, &CentralPolicy::default());
    let p = v.policy.expect("valid");
    // Issue 24: the default 10 % threshold is a 10 % free-space floor (was usageThreshold 90).
    assert_eq!(p.min_available, MinAvailable::Percent(10.0));
    assert_eq!((p.usage_threshold, p.inode_threshold), (None, 90));
    assert_eq!(p.step, Step::Percent(10));
    let origin = m
        .spec
        .get("step")
        .and_then(|r| r.origin.clone())
        .unwrap_or_default();
    assert!(
        origin.starts_with("pvc-autoresizer default resize.topolvm.io/increase: 10%"),
        "{origin}"
    );

    // Without the StorageClass annotation, topolvm never touches the claim, so neither do its
    // annotations nor its defaults.
    let (m, v) = run(&pvc, &BTreeMap::new(), None, &CentralPolicy::default());
    assert!(m.provenance.values().all(|s| *s == Source::Default));
    assert!(m.spec.problems.is_empty());
    assert!(v.policy.is_none(), "no limit anywhere: not a usable policy");
    assert!(m.spec.get("enabled").is_none());
}

#[test]
fn limit_comes_from_the_annotation_then_the_claims_spec_and_zero_is_ignored() {
    let class = enabled_class();
    let central = CentralPolicy::default();
    let (m, _) = run(&BTreeMap::new(), &class, Some("30Gi"), &central);
    assert_eq!(m.spec.get("limit").map(|r| r.text.as_str()), Some("30Gi"));
    assert_eq!(
        m.spec.get("limit").and_then(|r| r.origin.as_deref()),
        Some("PVC db/data-pg-0 spec.resources.limits.storage")
    );
    let pvc = map(&[(STORAGE_LIMIT, "80Gi")]);
    let (m, _) = run(&pvc, &class, Some("30Gi"), &central);
    assert_eq!(m.spec.get("limit").map(|r| r.text.as_str()), Some("80Gi"));
    let pvc = map(&[(STORAGE_LIMIT, "0")]);
    let (m, _) = run(&pvc, &class, Some("30Gi"), &central);
    assert_eq!(m.spec.get("limit").map(|r| r.text.as_str()), Some("30Gi"));

    // No non-zero limit: pvc-autoresizer would not resize, and the layer does not enable.
    let (m, _) = run(&pvc, &class, None, &central);
    assert_eq!(m.provenance["enabled"], Source::Default);
    assert!(m.spec.problems.is_empty());
    // `effective` has no spec limits, so a spec-only limit does not enable through it.
    let m = effective("db/a", &BTreeMap::new(), Some(("c", &class)), &central);
    assert_eq!(m.provenance["enabled"], Source::Default);
}

#[test]
fn an_objects_topolvm_annotations_rank_with_its_own_keys_above_the_configmap() {
    let central = parse_configmap(
        &map(&[
            (
                "policy.yaml",
                "enabled: false\nlimit: 500Gi\nusageThreshold: 70\nminAvailable: 5Gi\nminStep: 1Gi\nmaxStep: 100Gi\nmaxActionsPerDay: 4\n",
            ),
            (
                "storageClasses.yaml",
                "topolvm-provisioner:\n  maxStep: 50Gi\n  step: 5Gi\n  mode: convergent\n",
            ),
        ]),
        "headroom/headroom",
    );
    let pvc = map(&[
        (STORAGE_LIMIT, "100Gi"),
        (THRESHOLD, "20%"),
        (INCREASE, "30%"),
        ("headroom.dev/inode-threshold", "75"),
    ]);
    let class = map(&[(ENABLED, "true"), ("headroom.dev/limit", "200Gi")]);
    let (m, v) = run(&pvc, &class, None, &central);
    assert!(v.errors.is_empty(), "{:?}", v.errors);
    let p = v.policy.expect("valid");
    assert!(
        p.enabled,
        "the ConfigMap's enabled: false is only a default"
    );
    assert_eq!(p.mode, crate::policy::Mode::Threshold);
    assert_eq!(
        (p.usage_threshold, p.inode_threshold, p.limit, p.step),
        (None, 75, 100 * GI, Step::Percent(30))
    );
    // pvc-autoresizer has one trigger (its free-space floor, issue 24: the ConfigMap's
    // usageThreshold and minAvailable do not apply) and an unclamped percent increase.
    assert_eq!(
        (p.min_available, p.min_step, p.max_step),
        (MinAvailable::Percent(20.0), 0, 100 * GI)
    );
    assert_eq!(
        p.max_actions_per_day, 4,
        "what no object says, the ConfigMap fills"
    );
    let src = |k: &str| m.provenance[k];
    assert_eq!(src("usageThreshold"), Source::TopolvmPvcAnnotation);
    assert_eq!(src("minAvailable"), Source::TopolvmPvcAnnotation);
    assert_eq!(src("step"), Source::TopolvmPvcAnnotation);
    // The claim's storage_limit is the claim's own setting: above the StorageClass's.
    assert_eq!(src("limit"), Source::TopolvmPvcAnnotation);
    assert_eq!(src("inodeThreshold"), Source::PvcAnnotation);
    assert_eq!(src("enabled"), Source::TopolvmStorageClassAnnotation);
    assert_eq!(src("mode"), Source::TopolvmStorageClassAnnotation);
    assert_eq!(src("maxActionsPerDay"), Source::ConfigMapDefault);
    assert_eq!(
        m.topolvm_enabled_by.as_deref(),
        Some("StorageClass topolvm-provisioner annotation resize.topolvm.io/enabled")
    );

    // Without topolvm's own value, the StorageClass's headroom key beats pvc-autoresizer's
    // default and the ConfigMap: `headroom.dev/step` on the class, default increase otherwise.
    let pvc = map(&[(STORAGE_LIMIT, "100Gi")]);
    let class = map(&[(ENABLED, "true"), ("headroom.dev/step", "3Gi")]);
    let (m, v) = run(&pvc, &class, None, &central);
    let p = v.policy.expect("valid");
    assert_eq!((p.step, p.usage_threshold), (Step::Bytes(3 * GI), None));
    assert_eq!(p.min_available, MinAvailable::Percent(10.0));
    assert_eq!(m.provenance["step"], Source::StorageClassAnnotation);
    assert_eq!(m.provenance["usageThreshold"], Source::TopolvmDefault);

    // On one object, headroom's key wins over topolvm's.
    let class = map(&[(ENABLED, "true"), ("headroom.dev/usage-threshold", "60")]);
    let pvc = map(&[
        (STORAGE_LIMIT, "100Gi"),
        ("headroom.dev/step", "2Gi"),
        (INCREASE, "5Gi"),
    ]);
    let (m, v) = run(&pvc, &class, None, &central);
    let p = v.policy.expect("valid");
    assert_eq!((p.step, p.usage_threshold), (Step::Bytes(2 * GI), Some(60)));
    assert_eq!(m.provenance["step"], Source::PvcAnnotation);
}

#[test]
fn headroom_switching_off_what_topolvm_enables_is_reported_not_silent() {
    for (pvc_extra, class_extra, by) in [
        (
            ("headroom.dev/enabled", "false"),
            ("x", "y"),
            "PVC db/data-pg-0 annotation headroom.dev/enabled",
        ),
        (
            ("x", "y"),
            ("headroom.dev/enabled", "false"),
            "StorageClass topolvm-provisioner annotation headroom.dev/enabled",
        ),
    ] {
        let pvc = map(&[(STORAGE_LIMIT, "100Gi"), pvc_extra]);
        let class = map(&[(ENABLED, "true"), class_extra]);
        let (m, v) = run(&pvc, &class, None, &CentralPolicy::default());
        assert!(
            m.wants_enabled(),
            "{by}: the claim asked pvc-autoresizer to resize it"
        );
        let e = v
            .errors
            .iter()
            .find(|f| f.field == "enabled")
            .unwrap_or_else(|| panic!("{by}: no finding: {:?}", v.errors));
        assert!(
            e.message.contains("StorageClass topolvm-provisioner annotation resize.topolvm.io/enabled enables pvc-autoresizer")
                && e.message.contains(by),
            "{}",
            e.message
        );
    }
    // A claim pvc-autoresizer leaves alone (no limit) disabled by the ConfigMap: silence is right.
    let central = parse_configmap(
        &map(&[("policy.yaml", "enabled: false\nlimit: 1Ti\n")]),
        "h/h",
    );
    let (m, v) = run(&BTreeMap::new(), &enabled_class(), None, &central);
    assert!(!m.wants_enabled());
    assert!(v.errors.is_empty(), "{:?}", v.errors);
}

#[test]
fn the_shipped_configmap_changes_nothing_pvc_autoresizer_decides() {
    let shipped: serde_json::Value =
        serde_saphyr::from_str(include_str!("../../daemonset/configmap.yaml")).expect("yaml");
    let data: BTreeMap<String, String> =
        serde_json::from_value(shipped["data"].clone()).expect("data");
    let central = parse_configmap(&data, "headroom/headroom");
    assert_eq!(central.all_problems().count(), 0);
    let bare = map(&[(STORAGE_LIMIT, "100Gi")]);
    let (_, with_shipped) = run(&bare, &enabled_class(), None, &central);
    let (_, alone) = run(&bare, &enabled_class(), None, &CentralPolicy::default());
    let (a, b) = (
        with_shipped.policy.expect("valid"),
        alone.policy.expect("valid"),
    );
    assert!(a.enabled);
    assert_eq!(
        (
            a.usage_threshold,
            a.min_available,
            a.inode_threshold,
            a.step,
            a.min_step,
            a.max_step,
            a.limit
        ),
        (
            b.usage_threshold,
            b.min_available,
            b.inode_threshold,
            b.step,
            b.min_step,
            b.max_step,
            b.limit
        )
    );
    assert_eq!(
        (a.usage_threshold, a.min_available, a.step, a.limit),
        (
            None,
            MinAvailable::Percent(10.0),
            Step::Percent(10),
            100 * GI
        )
    );
}

#[test]
fn sizes_fractions_and_off_values() {
    let pvc = map(&[
        (STORAGE_LIMIT, "1Ti"),
        (THRESHOLD, "5Gi"),
        (INODES_THRESHOLD, "0%"),
        (INCREASE, "7.5%"),
    ]);
    let (_, v) = run(&pvc, &enabled_class(), None, &CentralPolicy::default());
    let p = v.policy.expect("valid");
    assert_eq!(p.min_available, MinAvailable::Bytes(5 * GI));
    // Issue 24: no percent trigger at all (was 99, the closest headroom allowed).
    assert_eq!(
        p.usage_threshold, None,
        "a size threshold has no percent trigger"
    );
    assert_eq!(p.inode_threshold, 99);
    assert_eq!(p.step, Step::Percent(8));

    assert_eq!(threshold("12.5%"), Ok(Threshold::Percent(12.5)));
    assert_eq!(threshold("0.5%"), Ok(Threshold::Percent(0.5)));
    assert_eq!(
        threshold("10"),
        Ok(Threshold::Bytes(10)),
        "a bare number is bytes"
    );
    assert_eq!(increase("100%").as_deref(), Ok("100%"));
    assert_eq!(increase("1073741824").as_deref(), Ok("1Gi"));
    // An empty annotation means the default, as upstream reads it.
    let pvc = map(&[(STORAGE_LIMIT, "1Ti"), (THRESHOLD, " ")]);
    let (_, v) = run(&pvc, &enabled_class(), None, &CentralPolicy::default());
    assert_eq!(
        v.policy.expect("valid").min_available,
        MinAvailable::Percent(10.0)
    );
}

#[test]
fn invalid_values_are_errors_naming_the_annotation_and_object() {
    type Case = (
        &'static [(&'static str, &'static str)],
        &'static str,
        &'static str,
    );
    let cases: &[Case] = &[
        (
            &[(THRESHOLD, "ten%")],
            THRESHOLD,
            "'ten%' is not a percent from 0% to 100%",
        ),
        (&[(THRESHOLD, "150%")], THRESHOLD, "'150%' is not a percent"),
        (&[(THRESHOLD, "0%")], THRESHOLD, "never grow on free space"),
        (&[(THRESHOLD, "100%")], THRESHOLD, "grow on every check"),
        (&[(THRESHOLD, "10GB")], THRESHOLD, "write 10Gi"),
        (
            &[(INODES_THRESHOLD, "5Gi")],
            INODES_THRESHOLD,
            "percent of free inodes",
        ),
        (&[(INCREASE, "0Gi")], INCREASE, "never grow the claim"),
        (&[(INCREASE, "-5%")], INCREASE, "not a percent"),
        (&[(STORAGE_LIMIT, "100GB")], STORAGE_LIMIT, "write 100Gi"),
    ];
    for (annotations, field, expected) in cases {
        let mut pvc = map(annotations);
        pvc.entry(STORAGE_LIMIT.to_string())
            .or_insert_with(|| "100Gi".to_string());
        let (_, v) = run(&pvc, &enabled_class(), None, &CentralPolicy::default());
        assert!(v.policy.is_none(), "{annotations:?} must refuse the policy");
        let e = v
            .errors
            .iter()
            .find(|f| f.field == *field)
            .unwrap_or_else(|| panic!("{annotations:?}: no finding for {field}: {:?}", v.errors));
        assert!(e.message.contains(expected), "{}", e.message);
        assert!(
            e.message
                .contains(&format!("PVC db/data-pg-0 annotation {field}")),
            "{}",
            e.message
        );
    }

    let (_, v) = run(
        &map(&[(STORAGE_LIMIT, "100Gi")]),
        &map(&[(ENABLED, "True")]),
        None,
        &CentralPolicy::default(),
    );
    assert_eq!(v.errors[0].field, ENABLED);
    assert!(
        v.errors[0].message.contains("'True' does not enable")
            && v.errors[0]
                .message
                .contains("StorageClass topolvm-provisioner annotation resize.topolvm.io/enabled"),
        "{}",
        v.errors[0].message
    );
    let (_, v) = run(
        &BTreeMap::new(),
        &enabled_class(),
        Some("lots"),
        &CentralPolicy::default(),
    );
    assert_eq!(v.errors[0].field, SPEC_LIMIT);
    assert!(
        v.errors[0].message.contains("'lots'"),
        "{}",
        v.errors[0].message
    );
}

#[test]
fn disabled_by_topolvm_is_recorded_as_such() {
    let (m, v) = run(
        &map(&[(STORAGE_LIMIT, "100Gi")]),
        &map(&[(ENABLED, "false")]),
        None,
        &CentralPolicy::default(),
    );
    assert_eq!(
        m.provenance["enabled"],
        Source::TopolvmStorageClassAnnotation
    );
    assert_eq!(m.provenance["limit"], Source::Default);
    assert!(v.errors.iter().all(|f| f.field == "limit"));
}

#[test]
fn readme_side_by_side_claims_get_the_same_policy() {
    let central = CentralPolicy::default();
    let topolvm = effective(
        "db/data-pg-0",
        &map(&[
            (STORAGE_LIMIT, "100Gi"),
            (THRESHOLD, "20%"),
            (INODES_THRESHOLD, "20%"),
            (INCREASE, "20Gi"),
        ]),
        Some(("topolvm-provisioner", &enabled_class())),
        &central,
    );
    let headroom = effective(
        "db/data-pg-0",
        &map(&[
            ("headroom.dev/limit", "100Gi"),
            // minAvailable alone: a purely absolute trigger, as pvc-autoresizer's threshold.
            ("headroom.dev/min-available", "20%"),
            ("headroom.dev/inode-threshold", "80"),
            ("headroom.dev/step", "20Gi"),
            // pvc-autoresizer grows only at its threshold.
            ("headroom.dev/trigger-predictive", "false"),
        ]),
        Some((
            "topolvm-provisioner",
            &map(&[("headroom.dev/enabled", "true")]),
        )),
        &central,
    );
    let policy = |m: &crate::policy::Merged| validate(&m.spec, &Context::default()).policy;
    assert!(policy(&topolvm).is_some());
    assert_eq!(policy(&topolvm), policy(&headroom));
}

#[test]
fn amount_from_the_design_notes_is_the_increase() {
    // pvc-autoresizer's design notes: `threshold: 20%`, `amount: 20Gi` (issue 24: the claim used
    // to grow by the default 10 %).
    let pvc = map(&[
        (STORAGE_LIMIT, "100Gi"),
        (THRESHOLD, "20%"),
        (AMOUNT, "20Gi"),
    ]);
    let (m, v) = run(&pvc, &enabled_class(), None, &CentralPolicy::default());
    let p = v.policy.expect("valid");
    assert_eq!(p.step, Step::Bytes(20 * GI));
    assert_eq!(m.provenance["step"], Source::TopolvmPvcAnnotation);
    assert_eq!(
        m.spec.get("step").and_then(|r| r.origin.as_deref()),
        Some("PVC db/data-pg-0 annotation resize.topolvm.io/amount: 20Gi")
    );
    // On the StorageClass too, and as a percent (then unclamped, like increase).
    let class = map(&[(ENABLED, "true"), (AMOUNT, "25%")]);
    let (m, v) = run(
        &map(&[(STORAGE_LIMIT, "100Gi")]),
        &class,
        None,
        &CentralPolicy::default(),
    );
    let p = v.policy.expect("valid");
    assert_eq!(
        (p.step, p.min_step, p.max_step),
        (Step::Percent(25), 0, 100 * GI)
    );
    assert_eq!(m.provenance["step"], Source::TopolvmStorageClassAnnotation);
    // pvc-autoresizer's code reads `increase`: it wins when both are written.
    let pvc = map(&[
        (STORAGE_LIMIT, "100Gi"),
        (AMOUNT, "20Gi"),
        (INCREASE, "5Gi"),
    ]);
    let (_, v) = run(&pvc, &enabled_class(), None, &CentralPolicy::default());
    assert_eq!(v.policy.expect("valid").step, Step::Bytes(5 * GI));
    // A bad amount is an error naming it, like a bad increase.
    let pvc = map(&[(STORAGE_LIMIT, "100Gi"), (AMOUNT, "20GB")]);
    let (_, v) = run(&pvc, &enabled_class(), None, &CentralPolicy::default());
    assert!(v.policy.is_none());
    assert_eq!(v.errors[0].field, AMOUNT);
    assert!(
        v.errors[0]
            .message
            .contains("PVC db/data-pg-0 annotation resize.topolvm.io/amount"),
        "{}",
        v.errors[0].message
    );
}

/// pvc-autoresizer's own resize cases (internal/runners/pvc_autoresizer_test.go, "parameter
/// tests": increase 1Gi, limit 100Gi), through the translation and the engine: each claim
/// grows exactly where pvc-autoresizer grows it, strictly below the threshold (issue 24: the
/// three cases with exactly 5Gi of 10Gi free at `threshold: 50%` grew before), measured as the
/// peer's metrics say (issue 36: "capacity size check" on its 1Gi filesystem did not grow).
#[test]
fn pvc_autoresizers_own_resize_cases_grow_where_it_does() {
    use crate::decide::{
        ClaimState, GrowKind, Inputs, Measurement, PolicyInput, ResizeState, VolumeFacts, decide,
    };
    struct Peer {
        what: &'static str,
        request_gi: u64,
        /// `None`: no status.capacity.
        capacity_gi: Option<u64>,
        threshold: &'static str,
        available: u64,
        inodes: (u64, u64),
        inodes_threshold: &'static str,
        expect_gi: u64,
    }
    let case = |what,
                request_gi,
                capacity_gi,
                threshold,
                available,
                inodes,
                inodes_threshold,
                expect_gi| Peer {
        what,
        request_gi,
        capacity_gi,
        threshold,
        available,
        inodes,
        inodes_threshold,
        expect_gi,
    };
    let cases = [
        case(
            "Should resize(absolute value)",
            10,
            Some(10),
            "5Gi",
            5 * GI - 1,
            (100, 100),
            "",
            11,
        ),
        case(
            "Should not resize(absolute value)",
            10,
            Some(10),
            "5Gi",
            5 * GI,
            (100, 100),
            "",
            10,
        ),
        case(
            "Should resize(%)",
            10,
            Some(10),
            "50%",
            5 * GI - 1,
            (100, 100),
            "",
            11,
        ),
        case(
            "Should not resize(%)",
            10,
            Some(10),
            "50%",
            5 * GI,
            (100, 100),
            "",
            10,
        ),
        case(
            "Should resize(inode)",
            10,
            Some(10),
            "50%",
            5 * GI,
            (9, 100),
            "",
            11,
        ),
        case(
            "Should resize(inode with annotation)",
            10,
            Some(10),
            "50%",
            5 * GI,
            (49, 100),
            "50%",
            11,
        ),
        case(
            "Should not resize(inode)",
            10,
            Some(10),
            "50%",
            5 * GI,
            (9, 100),
            "0%",
            10,
        ),
        // The request (and the filesystem, 1Gi) is below the capacity: the new size is counted
        // from the capacity, and the claim's own 5Gi floor applies though 1Gi cannot meet it
        // (issue 36: before, headroom fell back to 80 % used and left it alone).
        case(
            "Should resize(capacity size check)",
            1,
            Some(10),
            "5Gi",
            5 * GI - 1,
            (100, 100),
            "",
            11,
        ),
        case(
            "Should not resize(inode - 0 capacityInodeSize)",
            10,
            Some(10),
            "50%",
            5 * GI,
            (0, 0),
            "20%",
            10,
        ),
        case(
            "Should not resize(no capacity value set)",
            10,
            None,
            "5Gi",
            5 * GI - 1,
            (100, 100),
            "",
            10,
        ),
    ];
    for c in cases {
        let mut pvc = map(&[
            (STORAGE_LIMIT, "100Gi"),
            (THRESHOLD, c.threshold),
            (INCREASE, "1Gi"),
        ]);
        if !c.inodes_threshold.is_empty() {
            pvc.insert(INODES_THRESHOLD.into(), c.inodes_threshold.into());
        }
        let (_, v) = run(&pvc, &enabled_class(), None, &CentralPolicy::default());
        let p = v
            .policy
            .unwrap_or_else(|| panic!("{}: {:?}", c.what, v.errors));
        // The filesystem is the peer's metrics: `setMetrics(.., pvcSizeGi<<30, ..)`, the request.
        // A 1Gi filesystem cannot have the 5Gi-1 free "capacity size check" reports: all of it
        // is free, which is under the floor either way.
        let fs = c.request_gi * GI;
        let available = c.available.min(fs);
        let (inodes_free, inodes_total) = c.inodes;
        let m = Measurement {
            capacity_bytes: fs,
            used_bytes: fs - available,
            available_bytes: available,
            inodes_total,
            inodes_used: inodes_total - inodes_free,
        };
        let claim = ClaimState {
            request_bytes: c.request_gi * GI,
            capacity_bytes: c.capacity_gi.unwrap_or(0) * GI,
            resize: ResizeState::Idle,
        };
        let d = decide(&Inputs {
            logical: None,
            policy: PolicyInput::Valid(&p),
            measurement: m,
            claim: &claim,
            history: &[],
            wal: None,
            facts: VolumeFacts {
                expandable: true,
                capacity_unknown: c.capacity_gi.is_none(),
                ..VolumeFacts::default()
            },
            now: "2026-01-04T04:00:00Z".parse().expect("ts"),
            fill_rate: None,
        });
        let grown = d.grow_to().map_or(
            c.request_gi.max(c.capacity_gi.unwrap_or(0)),
            |(to, kind)| {
                assert_eq!(kind, GrowKind::Grow, "{}", c.what);
                to / GI
            },
        );
        assert_eq!(grown, c.expect_gi, "{}: {d:?}", c.what);
    }
}

/// `threshold: 100%` grows pvc-autoresizer's claim at every check until its limit; headroom
/// refuses it (kept deliberately, README's migration section), with the reason on the claim.
#[test]
fn a_hundred_percent_threshold_is_refused_with_the_reason() {
    let pvc = map(&[(STORAGE_LIMIT, "100Gi"), (THRESHOLD, "100%")]);
    let (m, v) = run(&pvc, &enabled_class(), None, &CentralPolicy::default());
    assert!(m.wants_enabled(), "reported, not silently skipped");
    let e = v
        .errors
        .iter()
        .find(|f| f.field == THRESHOLD)
        .expect("refused");
    assert!(
        e.message.contains("every check") && e.message.contains("pvc-autoresizer accepts it"),
        "{}",
        e.message
    );
}
