use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::json;

use super::*;
use crate::k8s::logical::logical_volume;

const GI: u64 = 1 << 30;

fn claim(labels: &[(&str, &str)], owner: Option<&str>) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some("pg-1".into()),
            namespace: Some("db".into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            owner_references: owner.map(|name| {
                vec![OwnerReference {
                    api_version: "postgresql.cnpg.io/v1".into(),
                    kind: "Cluster".into(),
                    name: name.into(),
                    uid: "u".into(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]
            }),
            ..ObjectMeta::default()
        },
        ..PersistentVolumeClaim::default()
    }
}

fn cnpg(role: &str) -> PersistentVolumeClaim {
    let mut labels = vec![("cnpg.io/cluster", "pg"), ("cnpg.io/pvcRole", role)];
    if role == "PG_TABLESPACE" {
        labels.push(("cnpg.io/tablespaceName", "idx"));
    }
    claim(&labels, Some("pg"))
}

fn target_of(pvc: &PersistentVolumeClaim) -> Result<Option<Target>, KubeError> {
    let lv = logical_volume(pvc, None).expect("a logical volume");
    target(pvc, &lv)
}

fn cluster(spec: Value) -> Value {
    json!({
        "apiVersion": "postgresql.cnpg.io/v1",
        "kind": "Cluster",
        "metadata": {"name": "pg", "namespace": "db", "resourceVersion": "42"},
        "spec": spec,
    })
}

#[test]
fn cloudnativepg_data_wal_and_tablespace_claims_name_their_field() {
    let fields: Vec<String> = ["PG_DATA", "PG_WAL", "PG_TABLESPACE"]
        .iter()
        .map(|r| target_of(&cnpg(r)).unwrap().unwrap().to_string())
        .collect();
    assert_eq!(
        fields,
        [
            "Cluster db/pg spec.storage.size",
            "Cluster db/pg spec.walStorage.size",
            "Cluster db/pg spec.tablespaces[name=idx].storage.size",
        ]
    );
}

#[test]
fn zalando_data_claims_name_spec_volume_size() {
    let pvc = claim(
        &[("application", "spilo"), ("cluster-name", "acid-main")],
        None,
    );
    let t = target_of(&pvc).unwrap().unwrap();
    assert_eq!(t.to_string(), "postgresql db/acid-main spec.volume.size");
    assert_eq!(t.kind, ZALANDO_POSTGRESQL);
}

#[test]
fn a_statefulset_or_group_has_no_owner_to_grow_through() {
    let mut pvc = claim(&[], None);
    pvc.metadata.annotations = Some([("headroom.dev/group".to_string(), "g".to_string())].into());
    assert_eq!(target_of(&pvc).unwrap(), None);
}

#[test]
fn an_owner_reference_naming_another_cluster_is_an_error_naming_the_claim() {
    let pvc = claim(
        &[("cnpg.io/cluster", "pg"), ("cnpg.io/pvcRole", "PG_DATA")],
        Some("other"),
    );
    let e = target_of(&pvc).unwrap_err().to_string();
    assert!(e.contains("PVC db/pg-1: metadata.ownerReferences"), "{e}");
    assert!(e.contains("Cluster other"), "{e}");
}

#[test]
fn reads_the_declared_size_and_patches_that_field_alone_with_the_resource_version() {
    let t = target_of(&cnpg("PG_WAL")).unwrap().unwrap();
    let obj = cluster(json!({"storage": {"size": "5Gi"}, "walStorage": {"size": "1Gi"}}));
    let d = declared(&t, &obj).unwrap();
    assert_eq!((d.bytes, d.resource_version.as_str()), (GI, "42"));
    assert_eq!(
        patch(&t, &d, 2 * GI),
        OwnerPatch::Merge(json!({
            "metadata": {"resourceVersion": "42"},
            "spec": {"walStorage": {"size": "2Gi"}},
        }))
    );
}

#[test]
fn a_tablespace_is_patched_by_index_after_testing_its_name_and_the_resource_version() {
    let t = target_of(&cnpg("PG_TABLESPACE")).unwrap().unwrap();
    let obj = cluster(json!({"tablespaces": [
        {"name": "a", "storage": {"size": "1Gi"}},
        {"name": "idx", "storage": {"size": "3Gi"}},
    ]}));
    let d = declared(&t, &obj).unwrap();
    assert_eq!((d.bytes, d.index), (3 * GI, Some(1)));
    let OwnerPatch::Json(ops) = patch(&t, &d, 4 * GI) else {
        panic!("a list element needs a JSON patch");
    };
    assert_eq!(
        ops[0],
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": "42"})
    );
    assert_eq!(
        ops[1],
        json!({"op": "test", "path": "/spec/tablespaces/1/name", "value": "idx"})
    );
    assert_eq!(ops[2]["path"], "/spec/tablespaces/1/storage/size");
    assert_eq!(ops[2]["value"], "4Gi");
}

#[test]
fn hostile_owners_are_errors_naming_the_object_and_field() {
    let data = target_of(&cnpg("PG_DATA")).unwrap().unwrap();
    let tbs = target_of(&cnpg("PG_TABLESPACE")).unwrap().unwrap();
    let mut elsewhere = cluster(json!({"storage": {"size": "1Gi"}}));
    elsewhere["metadata"]["namespace"] = json!("other");
    let mut no_rv = cluster(json!({"storage": {"size": "1Gi"}}));
    no_rv["metadata"]["resourceVersion"] = json!(null);
    let cases = [
        (&data, cluster(json!({})), "spec.storage.size is missing"),
        (
            &data,
            cluster(json!({"storage": "10Gi"})),
            "spec.storage.size is missing",
        ),
        (&data, cluster(json!(["x"])), "spec.storage.size is missing"),
        (
            &data,
            cluster(json!({"storage": {"size": "ten"}})),
            "'ten' is not a storage quantity",
        ),
        (
            &data,
            cluster(json!({"storage": {"size": {"a": 1}}})),
            "not a quantity",
        ),
        (&data, cluster(json!({"storage": {"size": "0"}})), "is 0"),
        (&data, json!("nonsense"), "metadata.namespace"),
        (
            &data,
            elsewhere,
            "metadata.namespace is \"other\", not the claim's namespace db",
        ),
        (&data, no_rv, "metadata.resourceVersion is missing"),
        (
            &tbs,
            cluster(json!({"tablespaces": {"idx": 1}})),
            "spec.tablespaces is missing or not a list",
        ),
        (
            &tbs,
            cluster(json!({"tablespaces": []})),
            "no element of the list has that name",
        ),
        (
            &tbs,
            cluster(json!({"tablespaces": [{"name": "idx"}, {"name": "idx"}]})),
            "more than one element",
        ),
        (
            &tbs,
            cluster(json!({"tablespaces": [{"name": "idx"}]})),
            "storage.size is missing",
        ),
    ];
    for (t, obj, want) in cases {
        let e = declared(t, &obj).unwrap_err().to_string();
        assert!(e.starts_with("Cluster db/pg: "), "{e}");
        assert!(e.contains(want), "{e} should say {want}");
    }
}

#[test]
fn an_owner_name_that_is_no_object_name_is_an_error_never_a_request_path() {
    for bad in ["..", ".", "-a", "a/b", "A"] {
        let pvc = claim(
            &[("cnpg.io/cluster", bad), ("cnpg.io/pvcRole", "PG_DATA")],
            None,
        );
        let Some(lv) = logical_volume(&pvc, None) else {
            continue;
        };
        let e = target(&pvc, &lv).unwrap_err().to_string();
        assert!(e.contains("metadata.labels name the owner"), "{e}");
    }
}

#[test]
fn a_crunchy_instance_set_is_patched_by_index_in_spec_instances() {
    let labels = [
        ("postgres-operator.crunchydata.com/cluster", "hippo"),
        ("postgres-operator.crunchydata.com/instance-set", "set2"),
        ("postgres-operator.crunchydata.com/data", "postgres"),
        ("postgres-operator.crunchydata.com/role", "pgwal"),
        (
            "postgres-operator.crunchydata.com/instance",
            "hippo-set2-abcd",
        ),
    ];
    let t = target_of(&claim(&labels, None)).unwrap().unwrap();
    assert_eq!(
        t.to_string(),
        "PostgresCluster db/hippo spec.instances[name=set2].walVolumeClaimSpec.resources.requests.storage"
    );
    let storage = |s: &str| json!({"resources": {"requests": {"storage": s}}});
    let obj = json!({
        "metadata": {"name": "hippo", "namespace": "db", "resourceVersion": "7"},
        "spec": {"instances": [
            {"name": "set1", "walVolumeClaimSpec": storage("9Gi")},
            {"name": "set2", "dataVolumeClaimSpec": storage("5Gi"), "walVolumeClaimSpec": storage("1Gi")},
        ]},
    });
    let d = declared(&t, &obj).unwrap();
    assert_eq!((d.bytes, d.index), (GI, Some(1)));
    let OwnerPatch::Json(ops) = patch(&t, &d, 2 * GI) else {
        panic!("a list element needs a JSON patch");
    };
    assert_eq!(
        ops[1],
        json!({"op": "test", "path": "/spec/instances/1/name", "value": "set2"})
    );
    assert_eq!(
        ops[2],
        json!({"op": "replace", "path": "/spec/instances/1/walVolumeClaimSpec/resources/requests/storage", "value": "2Gi"})
    );
}
