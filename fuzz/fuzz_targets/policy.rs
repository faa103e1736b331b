//! Every policy key, from every layer that can carry it, through policy resolution and
//! `validate`: the central ConfigMap (`policy.yaml`, `storageClasses.yaml`, the reclaim keys),
//! the StorageClass's and the claim's annotations (headroom's, topolvm's pvc-autoresizer keys,
//! csi-addons' reclaim schedule on the claim, StorageClass, Namespace and CSIDriver), the claim's
//! `spec.resources.limits.storage`, and a policy file as `headroom validate` reads one.
//!
//! Input: NUL-separated records: `pvc.<annotation>=`, `label.<claim label>=`, `sc.<annotation>=`,
//! `ns.<annotation>=` (the claim's Namespace, a layer of its own),
//! `driver.<annotation>=`, `cm.<data key>=`, `class=` (the StorageClass's name; none without
//! it), `provisioner=`, `size=` (the claim's request), `limit=` (its spec limit), `file=` (a
//! policy file).
//!
//! Beyond "no panic": a policy comes out exactly when there is no error, and a valid policy's
//! values are within the ranges the documentation states.
#![no_main]

use headroom::policy::merge::{ClaimObjects, effective_for, parse_configmap};
use headroom::policy::reclaim::{Objects, resolve_objects};
use headroom::policy::validate::{Context, Validation, parse_policy_yaml, validate};
use headroom::policy::{Policy, drivers};
use headroom_fuzz::{map_of, records, value};
use libfuzzer_sys::fuzz_target;

fn check(v: &Validation, what: &str) {
    assert_eq!(
        v.policy.is_some(),
        v.errors.is_empty(),
        "{what}: a policy with errors, or none without: {:?}",
        v.errors
    );
    if let Some(p) = &v.policy {
        in_range(p, what);
    }
    for f in v.errors.iter().chain(&v.warnings) {
        assert!(
            !f.field.is_empty() && !f.message.is_empty(),
            "{what}: unnamed finding {f:?}"
        );
    }
}

fn in_range(p: &Policy, what: &str) {
    assert!((1..=99).contains(&p.inode_threshold), "{what}: {p:?}");
    assert!((5..=50).contains(&p.target_buffer), "{what}: {p:?}");
    assert!(
        p.usage_threshold.is_none_or(|t| (1..=99).contains(&t)),
        "{what}: {p:?}"
    );
    assert!(
        (80..=99).contains(&p.emergency_grow.critical_threshold),
        "{what}: {p:?}"
    );
    assert!(p.min_step <= p.max_step, "{what}: {p:?}");
    assert!(p.request.is_none_or(|r| r <= p.limit), "{what}: {p:?}");
}

fuzz_target!(|data: &[u8]| {
    let r = records(data);
    let (pvc, sc, ns, driver, cm) = (
        map_of(&r, "pvc."),
        map_of(&r, "sc."),
        map_of(&r, "ns."),
        map_of(&r, "driver."),
        map_of(&r, "cm."),
    );
    let class = value(&r, "class");
    let provisioner = value(&r, "provisioner").unwrap_or("ebs.csi.aws.com");
    let size = value(&r, "size").and_then(|s| headroom::quantity::parse(s).ok());
    let central = parse_configmap(&cm, "headroom/headroom");
    for f in central.all_problems() {
        assert!(!f.field.is_empty(), "unnamed ConfigMap finding {f:?}");
    }
    let labels = map_of(&r, "label.");
    let claim = ClaimObjects {
        pvc: "db/data-pg-0",
        pvc_annotations: &pvc,
        pvc_namespace: "db",
        pvc_labels: &labels,
        namespace: Some(("db", &ns)),
        storage_class: class.map(|c| (c, &sc)),
        spec_limit: value(&r, "limit"),
    };
    let merged = effective_for(&claim, &central);
    let ctx = Context {
        current_size: size,
        wal_has_own_volume: None,
        driver_rule: drivers::rule(provisioner),
        min_available_source: merged.min_available_source(),
    };
    check(&validate(&merged.spec, &ctx), "merged");
    let _ = merged.wants_enabled();
    let _ = resolve_objects(
        &Objects {
            claim,
            driver: Some((provisioner, Some(&driver))),
        },
        &central,
    );
    if let Some(file) = value(&r, "file") {
        check(&parse_policy_yaml(file, &Context::default()), "file");
    }
});
