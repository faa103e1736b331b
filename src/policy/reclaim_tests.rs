use std::collections::BTreeMap;

use super::merge::{POLICY_KEY, STORAGE_CLASSES_KEY, Source, parse_configmap};
use super::reclaim::{CSI_ADDONS_SCHEDULE, GLOBAL_KEY, Resolved, resolve};
use super::validate::{Context, parse_policy_yaml};

use crate::policy::test_map as map;

fn central(extra: &[(&str, &str)]) -> super::CentralPolicy {
    let mut data = map(&[
        (
            POLICY_KEY,
            "enabled: true\nlimit: 100Gi\nreclaimSpace:\n  schedule: \"0 2 * * *\"\n",
        ),
        (
            STORAGE_CLASSES_KEY,
            "thin:\n  reclaimSpace:\n    enabled: true\n    timezone: Europe/Berlin\n",
        ),
    ]);
    data.extend(map(extra));
    parse_configmap(&data, "headroom/hp")
}

/// (schedule, timezone, source) of a scheduled volume; panics with the reason otherwise.
fn scheduled(r: Resolved) -> (String, String, Source) {
    match r {
        Resolved::Scheduled(s) => (s.schedule, s.timezone, s.source),
        other => panic!("expected a schedule, got {other:?}"),
    }
}

#[test]
fn hierarchy_pvc_over_class_over_configmap() {
    let none = BTreeMap::new();
    let c = central(&[]);
    // The ConfigMap's class section turns trimming on; the schedule comes from its defaults.
    assert_eq!(
        scheduled(resolve("db/a", &none, Some(("thin", &none)), &c)),
        (
            "0 2 * * *".into(),
            "Europe/Berlin".into(),
            Source::ConfigMapDefault
        )
    );
    // Another class is not enabled by the defaults: trimming is opt-in.
    assert!(matches!(
        resolve("db/a", &none, Some(("standard", &none)), &c),
        Resolved::Off(_)
    ));
    let sc = map(&[("headroom.dev/reclaim-space-schedule", "@daily")]);
    assert_eq!(
        scheduled(resolve("db/a", &none, Some(("thin", &sc)), &c)).2,
        Source::StorageClassAnnotation
    );
    let pvc = map(&[
        ("headroom.dev/reclaim-space-schedule", "@monthly"),
        ("headroom.dev/reclaim-space-timezone", "Asia/Tokyo"),
    ]);
    assert_eq!(
        scheduled(resolve("db/a", &pvc, Some(("thin", &sc)), &c)),
        (
            "@monthly".into(),
            "Asia/Tokyo".into(),
            Source::PvcAnnotation
        )
    );
    // A PVC may opt out of its class's trimming.
    let off = map(&[("headroom.dev/reclaim-space-enabled", "false")]);
    assert!(matches!(
        resolve("db/a", &off, Some(("thin", &sc)), &c),
        Resolved::Off(_)
    ));
}

#[test]
fn trimming_does_not_need_the_resize_keys() {
    // No ConfigMap at all, no limit, resize not enabled: the PVC alone opts in to trimming.
    let pvc = map(&[("headroom.dev/reclaim-space-enabled", "true")]);
    let (schedule, tz, source) = scheduled(resolve(
        "db/a",
        &pvc,
        None,
        &super::CentralPolicy::default(),
    ));
    assert_eq!((schedule.as_str(), tz.as_str()), ("@weekly", "UTC"));
    assert_eq!(source, Source::Default);
    // And a typo in a resize key does not stop it.
    let pvc = map(&[
        ("headroom.dev/reclaim-space-enabled", "true"),
        ("headroom.dev/usage-treshold", "80"),
    ]);
    assert!(matches!(
        resolve("db/a", &pvc, None, &super::CentralPolicy::default()),
        Resolved::Scheduled(_)
    ));
}

#[test]
fn csi_addons_schedule_sits_below_headrooms_own_annotation_on_each_object() {
    let none = BTreeMap::new();
    let c = central(&[]);
    let sc_csi = map(&[(CSI_ADDONS_SCHEDULE, "@weekly")]);
    // On a class the defaults do not enable, the csi-addons annotation alone turns trimming on.
    assert_eq!(
        scheduled(resolve("db/a", &none, Some(("standard", &sc_csi)), &c)),
        (
            "@weekly".into(),
            "UTC".into(),
            Source::CsiAddonsStorageClassAnnotation
        )
    );
    // A PVC's csi-addons schedule beats the StorageClass's headroom annotation...
    let pvc_csi = map(&[(CSI_ADDONS_SCHEDULE, "0 4 * * 6")]);
    let sc = map(&[("headroom.dev/reclaim-space-schedule", "@daily")]);
    assert_eq!(
        scheduled(resolve("db/a", &pvc_csi, Some(("thin", &sc)), &c)).2,
        Source::CsiAddonsPvcAnnotation
    );
    // ...and loses to the PVC's own headroom annotation, including an explicit opt-out.
    let mut both = pvc_csi.clone();
    both.insert(
        "headroom.dev/reclaim-space-schedule".into(),
        "@monthly".into(),
    );
    assert_eq!(
        scheduled(resolve("db/a", &both, Some(("thin", &sc)), &c)).0,
        "@monthly"
    );
    both.insert("headroom.dev/reclaim-space-enabled".into(), "false".into());
    assert!(matches!(
        resolve("db/a", &both, Some(("thin", &sc)), &c),
        Resolved::Off(_)
    ));
    // A csi-addons schedule croner cannot read is an error naming the annotation.
    let bad = map(&[(CSI_ADDONS_SCHEDULE, "@every 1h")]);
    let Resolved::Invalid(errors) = resolve("db/a", &bad, None, &c) else {
        panic!("expected an error");
    };
    assert_eq!(errors[0].field, "reclaimSpace.schedule");
    assert!(
        errors[0]
            .message
            .contains("PVC db/a annotation reclaimspace.csiaddons.openshift.io/schedule"),
        "{}",
        errors[0].message
    );
}

#[test]
fn global_switch_turns_everything_off() {
    let pvc = map(&[
        ("headroom.dev/reclaim-space-enabled", "true"),
        (CSI_ADDONS_SCHEDULE, "@daily"),
    ]);
    let c = central(&[(GLOBAL_KEY, "enabled: false\n")]);
    assert_eq!(c.all_problems().count(), 0);
    let Resolved::Off(why) = resolve("db/a", &pvc, None, &c) else {
        panic!("the switch must win");
    };
    assert!(why.contains("reclaimSpace.yaml"), "{why}");
    // Issue 24: without a timeout, the csi-addons design's 10 minutes (was 30).
    let c = central(&[(GLOBAL_KEY, "enabled: true\n")]);
    assert_eq!(c.reclaim.timeout, jiff::SignedDuration::from_mins(10));
    assert_eq!(
        crate::policy::reclaim::ReclaimGlobal::default().timeout,
        jiff::SignedDuration::from_mins(10)
    );
    // `enabled: true` (or no key) leaves it to the volumes; timeout is read.
    let c = central(&[(GLOBAL_KEY, "enabled: true\ntimeout: 2h\n")]);
    assert_eq!(c.reclaim.timeout, jiff::SignedDuration::from_hours(2));
    assert!(matches!(
        resolve("db/a", &pvc, None, &c),
        Resolved::Scheduled(_)
    ));
    // A broken switch fails closed for volumes that want trimming, naming the key.
    let c = central(&[(GLOBAL_KEY, "enabled: maybe\ntimout: 1h\n")]);
    let Resolved::Invalid(errors) = resolve("db/a", &pvc, None, &c) else {
        panic!("a broken switch must refuse");
    };
    let fields: Vec<&str> = errors.iter().map(|f| f.field.as_str()).collect();
    assert_eq!(
        fields,
        ["reclaimSpace.yaml enabled", "reclaimSpace.yaml timout"]
    );
    assert!(errors[0].message.contains("ConfigMap headroom/hp"));
    // ...and stays silent for volumes that do not.
    assert!(matches!(
        resolve("db/b", &BTreeMap::new(), None, &c),
        Resolved::Off(_)
    ));
}

#[test]
fn live_storage_class_change_changes_the_result() {
    // The agent resolves on every scan from the watched objects; nothing is copied to the PVC,
    // so editing the StorageClass annotation reaches existing claims.
    let c = central(&[]);
    let pvc = BTreeMap::new();
    let mut sc = map(&[("headroom.dev/reclaim-space-enabled", "true")]);
    assert_eq!(
        scheduled(resolve("db/a", &pvc, Some(("standard", &sc)), &c)).0,
        "0 2 * * *"
    );
    sc.insert(
        "headroom.dev/reclaim-space-schedule".into(),
        "30 1 * * 0".into(),
    );
    assert_eq!(
        scheduled(resolve("db/a", &pvc, Some(("standard", &sc)), &c)).0,
        "30 1 * * 0"
    );
    sc.insert("headroom.dev/reclaim-space-enabled".into(), "false".into());
    assert!(matches!(
        resolve("db/a", &pvc, Some(("standard", &sc)), &c),
        Resolved::Off(_)
    ));
}

#[test]
fn bad_values_name_the_field_and_where_it_was_written() {
    let c = central(&[]);
    let pvc = map(&[
        ("headroom.dev/reclaim-space-enabled", "true"),
        ("headroom.dev/reclaim-space-schedule", "61 * * * *"),
        ("headroom.dev/reclaim-space-timezone", "Mars/Olympus"),
        ("headroom.dev/reclaim-space-shedule", "@daily"),
    ]);
    let Resolved::Invalid(errors) = resolve("db/a", &pvc, None, &c) else {
        panic!("expected errors");
    };
    let fields: Vec<&str> = errors.iter().map(|f| f.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "headroom.dev/reclaim-space-shedule",
            "reclaimSpace.schedule",
            "reclaimSpace.timezone"
        ]
    );
    assert!(
        errors[0]
            .message
            .contains("headroom.dev/reclaim-space-schedule")
    );
    assert!(errors[1].message.contains("'61 * * * *'"));
    assert!(
        errors[1]
            .message
            .contains("PVC db/a annotation headroom.dev/reclaim-space-schedule")
    );
    assert!(errors[2].message.contains("Mars/Olympus"));

    // `headroom validate` reports the same, by YAML path.
    let v = parse_policy_yaml(
        "limit: 10Gi\nreclaimSpace:\n  enabled: yes\n  schedule: \"@hourlyish\"\n",
        &Context::default(),
    );
    let fields: Vec<&str> = v.errors.iter().map(|f| f.field.as_str()).collect();
    assert_eq!(fields, ["reclaimSpace.enabled", "reclaimSpace.schedule"]);
    let v = parse_policy_yaml(
        "limit: 10Gi\nreclaimSpace:\n  enabled: true\n  schedule: \"@monthly\"\n  timezone: America/New_York\n",
        &Context::default(),
    );
    assert!(v.errors.is_empty(), "{:?}", v.errors);
}

/// Issue 24 (ReclaimSpace design): schedules on the Namespace and on the CSIDriver object, in
/// csi-addons' precedence: PVC > Namespace > StorageClass > CSIDriver, then the ConfigMap.
#[test]
fn namespace_and_csidriver_schedules_in_the_designs_precedence() {
    use super::reclaim::{CSI_ADDONS_DRIVERS, ClaimObjects, Objects, resolve_objects};
    let none = BTreeMap::new();
    let c = central(&[]);
    let ns = map(&[(CSI_ADDONS_SCHEDULE, "0 1 * * *")]);
    let sc = map(&[(CSI_ADDONS_SCHEDULE, "0 2 * * 3")]);
    let driver = map(&[(CSI_ADDONS_SCHEDULE, "0 3 1 * *")]);
    let at = |pvc: &BTreeMap<String, String>,
              ns: &BTreeMap<String, String>,
              sc: &BTreeMap<String, String>,
              driver: &BTreeMap<String, String>| {
        scheduled(resolve_objects(
            &Objects {
                claim: ClaimObjects {
                    pvc: "db/a",
                    pvc_annotations: pvc,
                    pvc_namespace: "db",
                    pvc_labels: &BTreeMap::new(),
                    namespace: Some(("db", ns)),
                    storage_class: Some(("standard", sc)),
                    spec_limit: None,
                },
                driver: Some(("rbd.csi.ceph.com", Some(driver))),
            },
            &c,
        ))
    };
    // The CSIDriver alone turns trimming on for every claim of that driver.
    assert_eq!(
        at(&none, &none, &none, &driver),
        (
            "0 3 1 * *".into(),
            "UTC".into(),
            Source::CsiAddonsCsiDriverAnnotation
        )
    );
    // The StorageClass beats the CSIDriver; the Namespace beats both; the claim beats all.
    assert_eq!(
        at(&none, &none, &sc, &driver).2,
        Source::CsiAddonsStorageClassAnnotation
    );
    assert_eq!(
        at(&none, &ns, &sc, &driver).2,
        Source::CsiAddonsNamespaceAnnotation
    );
    let pvc = map(&[(CSI_ADDONS_SCHEDULE, "@monthly")]);
    assert_eq!(at(&pvc, &ns, &sc, &driver).0, "@monthly");
    // headroom's own StorageClass key ranks with the StorageClass: below the Namespace's.
    let sc_own = map(&[("headroom.dev/reclaim-space-schedule", "@daily")]);
    assert_eq!(
        at(&none, &ns, &sc_own, &driver).2,
        Source::CsiAddonsNamespaceAnnotation
    );
    assert_eq!(
        at(&none, &none, &sc_own, &driver).2,
        Source::StorageClassAnnotation
    );
    // Issue 42: the Namespace's own key is the resize keys' Namespace layer, in the same place:
    // above the Namespace's csi-addons schedule and everything of the class.
    let ns_own = map(&[
        ("headroom.dev/reclaim-space-schedule", "0 4 * * *"),
        (CSI_ADDONS_SCHEDULE, "0 1 * * *"),
    ]);
    assert_eq!(
        at(&none, &ns_own, &sc_own, &driver),
        (
            "0 4 * * *".into(),
            "UTC".into(),
            Source::NamespaceAnnotation
        )
    );
    assert_eq!(at(&pvc, &ns_own, &sc_own, &driver).0, "@monthly");
    // A headroom opt-out on the claim wins over every csi-addons schedule.
    let off = map(&[("headroom.dev/reclaim-space-enabled", "false")]);
    assert!(matches!(
        resolve_objects(
            &Objects {
                claim: ClaimObjects {
                    pvc: "db/a",
                    pvc_annotations: &off,
                    pvc_namespace: "db",
                    pvc_labels: &BTreeMap::new(),
                    namespace: Some(("db", &ns)),
                    storage_class: Some(("standard", &sc)),
                    spec_limit: None,
                },
                driver: Some(("rbd.csi.ceph.com", Some(&driver))),
            },
            &c,
        ),
        Resolved::Off(_)
    ));

    // A Namespace's `drivers` limits its schedule to those drivers' claims.
    let for_rbd = map(&[
        (CSI_ADDONS_SCHEDULE, "0 1 * * *"),
        (CSI_ADDONS_DRIVERS, "cephfs.csi.ceph.com, rbd.csi.ceph.com"),
    ]);
    assert_eq!(
        at(&none, &for_rbd, &sc, &driver).2,
        Source::CsiAddonsNamespaceAnnotation
    );
    let for_other = map(&[
        (CSI_ADDONS_SCHEDULE, "0 1 * * *"),
        (CSI_ADDONS_DRIVERS, "ebs.csi.aws.com"),
    ]);
    assert_eq!(
        at(&none, &for_other, &sc, &driver).2,
        Source::CsiAddonsStorageClassAnnotation
    );
    let only_ns = |ns: &BTreeMap<String, String>, driver: Option<&str>| {
        resolve_objects(
            &Objects {
                claim: ClaimObjects {
                    pvc: "db/a",
                    pvc_annotations: &none,
                    pvc_namespace: "db",
                    pvc_labels: &BTreeMap::new(),
                    namespace: Some(("db", ns)),
                    storage_class: None,
                    spec_limit: None,
                },
                driver: driver.map(|d| (d, None)),
            },
            &c,
        )
    };
    assert!(matches!(
        only_ns(&for_other, Some("rbd.csi.ceph.com")),
        Resolved::Off(_)
    ));
    // A driver list and no known driver: not applied (it cannot be said to be for this claim).
    assert!(matches!(only_ns(&for_rbd, None), Resolved::Off(_)));
    assert_eq!(
        scheduled(only_ns(&ns, None)).2,
        Source::CsiAddonsNamespaceAnnotation
    );
    // A bad schedule on either object names it.
    let bad = map(&[(CSI_ADDONS_SCHEDULE, "@every 1h")]);
    let Resolved::Invalid(errors) = only_ns(&bad, None) else {
        panic!("refused");
    };
    assert!(
        errors[0].message.contains("Namespace db annotation"),
        "{errors:?}"
    );
    let Resolved::Invalid(errors) = resolve_objects(
        &Objects {
            claim: ClaimObjects {
                pvc: "db/a",
                pvc_annotations: &none,
                pvc_namespace: "db",
                pvc_labels: &BTreeMap::new(),
                namespace: None,
                storage_class: None,
                spec_limit: None,
            },
            driver: Some(("rbd.csi.ceph.com", Some(&bad))),
        },
        &c,
    ) else {
        panic!("refused");
    };
    assert!(
        errors[0]
            .message
            .contains("CSIDriver rbd.csi.ceph.com annotation"),
        "{errors:?}"
    );
}
