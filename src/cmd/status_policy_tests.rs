use std::collections::BTreeMap;

use serde_json::json;

use super::*;

fn pvc(name: &str, annotations: serde_json::Value) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": "db", "annotations": annotations },
        "spec": {
            "storageClassName": "topolvm-provisioner",
            "resources": { "requests": { "storage": "10Gi" } },
        },
        "status": { "phase": "Bound", "capacity": { "storage": "10Gi" } },
    }))
    .expect("pvc")
}

fn classes(annotations: serde_json::Value) -> BTreeMap<String, StorageClass> {
    let class: StorageClass = serde_json::from_value(json!({
        "metadata": { "name": "topolvm-provisioner", "annotations": annotations },
        "provisioner": "topolvm.io",
    }))
    .expect("class");
    BTreeMap::from([("topolvm-provisioner".to_string(), class)])
}

fn central() -> CentralPolicy {
    parse_configmap(
        &BTreeMap::from([
            (
                "policy.yaml".to_string(),
                "enabled: false\nlimit: 500Gi\nmaxActionsPerDay: 3\n".to_string(),
            ),
            (
                "storageClasses.yaml".to_string(),
                "topolvm-provisioner:\n  emergencyGrow:\n    criticalThreshold: 97\n".to_string(),
            ),
        ]),
        "headroom/headroom",
    )
}

fn key<'a>(row: &'a PolicyRow, k: &str) -> &'a KeyRow {
    row.keys.iter().find(|r| r.key == k).expect("key")
}

#[test]
fn every_key_names_its_layer_and_where_it_was_written() {
    let claims = [pvc(
        "data-0",
        json!({
            "resize.topolvm.io/storage_limit": "100Gi",
            "resize.topolvm.io/increase": "5Gi",
            "headroom.dev/inode-threshold": "85",
        }),
    )];
    let rows = rows(
        &claims,
        &classes(json!({ "resize.topolvm.io/enabled": "true" })),
        &BTreeMap::new(),
        &central(),
    );
    let row = &rows[0];
    assert!(row.managed && row.errors.is_empty(), "{row:?}");
    assert_eq!(row.keys.len(), FIELDS.len());
    let expect = [
        (
            "enabled",
            "true",
            Source::TopolvmStorageClassAnnotation,
            Some("StorageClass topolvm-provisioner annotation resize.topolvm.io/enabled"),
        ),
        (
            "limit",
            "100Gi",
            Source::TopolvmPvcAnnotation,
            Some("PVC db/data-0 annotation resize.topolvm.io/storage_limit"),
        ),
        (
            "step",
            "5Gi",
            Source::TopolvmPvcAnnotation,
            Some("PVC db/data-0 annotation resize.topolvm.io/increase: 5Gi"),
        ),
        (
            "inodeThreshold",
            "85",
            Source::PvcAnnotation,
            Some("PVC db/data-0 annotation headroom.dev/inode-threshold"),
        ),
        (
            "emergencyGrow.criticalThreshold",
            "97",
            Source::ConfigMapStorageClass,
            Some(
                "ConfigMap headroom/headroom key storageClasses.yaml, StorageClass topolvm-provisioner",
            ),
        ),
        (
            "maxActionsPerDay",
            "3",
            Source::ConfigMapDefault,
            Some("ConfigMap headroom/headroom key policy.yaml"),
        ),
        ("targetBuffer", "20", Source::Default, None),
    ];
    for (k, value, source, origin) in expect {
        let r = key(row, k);
        assert_eq!(
            (r.value.as_deref(), r.source, r.origin.as_deref()),
            (Some(value), source, origin),
            "{k}"
        );
    }
    let usage = key(row, "usageThreshold");
    assert_eq!(usage.source, Source::TopolvmDefault);
    assert!(
        usage.origin.as_deref().is_some_and(
            |o| o.starts_with("pvc-autoresizer default resize.topolvm.io/threshold: 10%")
        ),
        "{usage:?}"
    );

    let table = render(&rows);
    assert!(
        table.starts_with("PVC db/data-0 (StorageClass topolvm-provisioner) managed: enabled for pvc-autoresizer by StorageClass topolvm-provisioner annotation resize.topolvm.io/enabled\n"),
        "{table}"
    );
    let line = table
        .lines()
        .find(|l| l.trim_start().starts_with("limit "))
        .expect("limit line");
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cols[..3], ["limit", "100Gi", "topolvm_pvc_annotation"]);
    let json = serde_json::to_value(&rows).expect("json");
    assert_eq!(
        json[0]["keys"][0]["source"],
        "topolvm_storage_class_annotation"
    );
    assert_eq!(
        json[0]["pvcAutoresizerEnabledBy"],
        "StorageClass topolvm-provisioner annotation resize.topolvm.io/enabled"
    );
}

#[test]
fn refusals_show_for_managed_claims_only() {
    let claims = [
        pvc(
            "switched-off",
            json!({ "resize.topolvm.io/storage_limit": "100Gi", "headroom.dev/enabled": "false" }),
        ),
        pvc(
            "bad-threshold",
            json!({ "resize.topolvm.io/storage_limit": "100Gi", "resize.topolvm.io/threshold": "ten%" }),
        ),
        pvc("no-limit", json!({})),
    ];
    let rows = rows(
        &claims,
        &classes(json!({ "resize.topolvm.io/enabled": "true" })),
        &BTreeMap::new(),
        &central(),
    );
    assert!(rows[0].managed);
    assert!(
        rows[0]
            .errors
            .iter()
            .any(|e| e.starts_with("enabled: ") && e.contains("turns headroom off")),
        "{:?}",
        rows[0].errors
    );
    assert!(
        rows[1].errors.iter().any(|e| e.contains("'ten%'")),
        "{:?}",
        rows[1].errors
    );
    // pvc-autoresizer would not resize a claim without a limit, and the ConfigMap says off.
    assert!(!rows[2].managed && rows[2].errors.is_empty());
    assert_eq!(key(&rows[2], "enabled").source, Source::ConfigMapDefault);
    assert!(render(&rows).contains(
        "PVC db/no-limit (StorageClass topolvm-provisioner) not managed: enabled is false"
    ));
}

/// Issue 42: a claim with no annotations, enabled and limited by its Namespace, is managed, and
/// each key names its layer (the render's SOURCE column too).
#[test]
fn the_namespace_layer_is_named() {
    let ns: Namespace = serde_json::from_value(json!({
        "metadata": { "name": "db", "annotations": {
            "headroom.dev/enabled": "true", "headroom.dev/limit": "50Gi" } },
    }))
    .expect("namespace");
    let namespaces = BTreeMap::from([("db".to_string(), ns)]);
    let rows = rows(
        &[pvc("plain", json!({}))],
        &classes(json!({})),
        &namespaces,
        &central(),
    );
    let row = &rows[0];
    assert!(row.managed && row.errors.is_empty(), "{row:?}");
    assert_eq!(key(row, "limit").source, Source::NamespaceAnnotation);
    assert_eq!(
        key(row, "limit").origin.as_deref(),
        Some("Namespace db annotation headroom.dev/limit")
    );
    assert_eq!(
        key(row, "maxActionsPerDay").source,
        Source::ConfigMapDefault
    );
    let table = render(&rows);
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == [
                    "limit",
                    "50Gi",
                    "namespace_annotation",
                    "Namespace",
                    "db",
                    "annotation",
                    "headroom.dev/limit"
                ]),
        "{table}"
    );
}
