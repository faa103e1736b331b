use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use serde_json::{Value, json};

use super::*;

fn pvc(
    ns: &str,
    name: &str,
    labels: Value,
    annotations: Value,
    owners: Value,
) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": owners,
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "fast-ssd",
            "resources": { "requests": { "storage": "20Gi" } },
        },
        "status": { "phase": "Bound", "capacity": { "storage": "20Gi" } },
    }))
    .expect("test PVC")
}

fn pod(ns: &str, name: &str, labels: Value, owners: Value, claims: &[&str]) -> Pod {
    let volumes: Vec<Value> = claims
        .iter()
        .enumerate()
        .map(|(i, c)| json!({ "name": format!("vol{i}"), "persistentVolumeClaim": { "claimName": c } }))
        .chain([json!({ "name": "shm", "emptyDir": { "medium": "Memory" } })])
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "namespace": ns, "labels": labels, "ownerReferences": owners },
        "spec": {
            "nodeName": "worker-2",
            "containers": [{ "name": "postgres", "image": "postgres:17" }],
            "volumes": volumes,
        },
    }))
    .expect("test Pod")
}

fn sts_owner(name: &str) -> Value {
    json!([{
        "apiVersion": "apps/v1", "kind": "StatefulSet", "name": name,
        "uid": "6f1e0c2a-0d8b-4c6e-9a51-1b2c3d4e5f60", "controller": true, "blockOwnerDeletion": true,
    }])
}

fn cnpg_owner() -> Value {
    json!([{
        "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster", "name": "pg-main",
        "uid": "0a9b8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d", "controller": true,
    }])
}

fn cnpg_pvc(name: &str, role: &str, extra: Value) -> PersistentVolumeClaim {
    let mut labels = json!({
        "cnpg.io/cluster": "pg-main",
        "cnpg.io/instanceName": "pg-main-1",
        "cnpg.io/instanceRole": "primary",
        "cnpg.io/pvcRole": role,
        "role": "primary",
    });
    if let (Some(l), Some(e)) = (labels.as_object_mut(), extra.as_object()) {
        l.extend(e.clone());
    }
    let annotations = json!({
        "cnpg.io/nodeSerial": "1",
        "cnpg.io/operatorVersion": "1.24.1",
        "cnpg.io/pvcStatus": "ready",
    });
    pvc("db", name, labels, annotations, cnpg_owner())
}

fn cnpg_pod(claims: &[&str]) -> Pod {
    pod(
        "db",
        "pg-main-1",
        json!({
            "cnpg.io/cluster": "pg-main",
            "cnpg.io/instanceName": "pg-main-1",
            "cnpg.io/instanceRole": "primary",
            "cnpg.io/podRole": "instance",
            "role": "primary",
        }),
        cnpg_owner(),
        claims,
    )
}

fn vol(role: VolumeRole, operator: Operator, cluster: &str, instance: &str) -> Option<PgVolume> {
    Some(PgVolume {
        role,
        operator,
        cluster: Some(cluster.into()),
        instance: Some(instance.into()),
    })
}

fn pg(pvc: &PersistentVolumeClaim, pod: Option<&Pod>) -> Option<PgVolume> {
    postgres_volume(pvc, pod).expect("readable role")
}

#[test]
fn cloudnativepg_roles_from_pvc_labels() {
    let data = cnpg_pvc("pg-main-1", "PG_DATA", json!({}));
    let wal = cnpg_pvc("pg-main-1-wal", "PG_WAL", json!({}));
    let tbs = cnpg_pvc(
        "pg-main-1-tbs-analytics",
        "PG_TABLESPACE",
        json!({ "cnpg.io/tablespaceName": "analytics" }),
    );
    let c = Operator::CloudNativePG;
    assert_eq!(
        pg(&data, None),
        vol(VolumeRole::Data, c, "pg-main", "pg-main-1")
    );
    assert_eq!(
        pg(&wal, None),
        vol(VolumeRole::Wal, c, "pg-main", "pg-main-1")
    );
    assert_eq!(
        pg(&tbs, None),
        vol(VolumeRole::Tablespace, c, "pg-main", "pg-main-1")
    );

    let both = cnpg_pod(&["pg-main-1", "pg-main-1-wal"]);
    assert!(!wal_on_data(&both, &[&data, &wal]));
    let data_only = cnpg_pod(&["pg-main-1"]);
    assert!(wal_on_data(&data_only, &[&data]));
    // A WAL claim the pod does not mount (another instance's) does not count.
    assert!(wal_on_data(&data_only, &[&data, &wal]));

    assert_eq!(
        group_key(&data, Some(&both)).as_deref(),
        Some("db/cnpg/pg-main/PG_DATA")
    );
    assert_eq!(
        group_key(&wal, None).as_deref(),
        Some("db/cnpg/pg-main/PG_WAL")
    );
    assert_eq!(
        group_key(&tbs, None).as_deref(),
        Some("db/cnpg/pg-main/PG_TABLESPACE/analytics")
    );
    // Issue 24: the tablespace's name, the `tablespace` label of its series.
    assert_eq!(tablespace(&tbs).as_deref(), Some("analytics"));
    assert_eq!(tablespace(&data), None);
}

#[test]
fn old_cloudnativepg_without_role_label_uses_names() {
    let labels = json!({ "cnpg.io/cluster": "pg-old", "cnpg.io/instanceName": "pg-old-2" });
    let data = pvc("db", "pg-old-2", labels.clone(), json!({}), cnpg_owner());
    let wal = pvc("db", "pg-old-2-wal", labels, json!({}), cnpg_owner());
    assert_eq!(pg(&data, None).map(|v| v.role), Some(VolumeRole::Data));
    assert_eq!(pg(&wal, None).map(|v| v.role), Some(VolumeRole::Wal));
}

#[test]
fn zalando_spilo() {
    let labels =
        json!({ "application": "spilo", "cluster-name": "acid-minimal-cluster", "team": "acid" });
    let data = pvc(
        "db",
        "pgdata-acid-minimal-cluster-0",
        labels,
        json!({}),
        json!([]),
    );
    let p = pod(
        "db",
        "acid-minimal-cluster-0",
        json!({
            "application": "spilo",
            "cluster-name": "acid-minimal-cluster",
            "spilo-role": "master",
            "team": "acid",
            "controller-revision-hash": "acid-minimal-cluster-6d5c8f7b9",
            "statefulset.kubernetes.io/pod-name": "acid-minimal-cluster-0",
        }),
        sts_owner("acid-minimal-cluster"),
        &["pgdata-acid-minimal-cluster-0"],
    );
    let z = Operator::Zalando;
    assert_eq!(
        pg(&data, Some(&p)),
        vol(
            VolumeRole::Data,
            z,
            "acid-minimal-cluster",
            "acid-minimal-cluster-0"
        )
    );
    assert!(wal_on_data(&p, &[&data]));
    assert_eq!(
        group_key(&data, Some(&p)).as_deref(),
        Some("db/sts/acid-minimal-cluster/pgdata")
    );
    // Without the pod, the claim's own labels still say spilo.
    assert_eq!(pg(&data, None).map(|v| v.operator), Some(z));
}

fn crunchy_labels(extra: Value) -> Value {
    let mut l = json!({
        "postgres-operator.crunchydata.com/cluster": "hippo",
        "postgres-operator.crunchydata.com/instance": "hippo-instance1-7bdx",
        "postgres-operator.crunchydata.com/instance-set": "instance1",
    });
    if let (Some(l), Some(e)) = (l.as_object_mut(), extra.as_object()) {
        l.extend(e.clone());
    }
    l
}

#[test]
fn crunchy_pgo_v5() {
    let data = pvc(
        "pgo",
        "hippo-instance1-7bdx-pgdata",
        crunchy_labels(
            json!({ "postgres-operator.crunchydata.com/data": "postgres", "postgres-operator.crunchydata.com/role": "pgdata" }),
        ),
        json!({}),
        json!([]),
    );
    let wal = pvc(
        "pgo",
        "hippo-instance1-7bdx-pgwal",
        crunchy_labels(json!({ "postgres-operator.crunchydata.com/role": "pgwal" })),
        json!({}),
        json!([]),
    );
    let repo = pvc(
        "pgo",
        "hippo-repo1",
        json!({
            "postgres-operator.crunchydata.com/cluster": "hippo",
            "postgres-operator.crunchydata.com/data": "pgbackrest",
            "postgres-operator.crunchydata.com/pgbackrest": "",
            "postgres-operator.crunchydata.com/pgbackrest-repo": "repo1",
            "postgres-operator.crunchydata.com/pgbackrest-volume": "",
        }),
        json!({}),
        json!([]),
    );
    let p = pod(
        "pgo",
        "hippo-instance1-7bdx-0",
        crunchy_labels(json!({
            "postgres-operator.crunchydata.com/role": "master",
            "postgres-operator.crunchydata.com/patroni": "hippo-ha",
            "postgres-operator.crunchydata.com/data": "postgres",
        })),
        sts_owner("hippo-instance1-7bdx"),
        &["hippo-instance1-7bdx-pgdata", "hippo-instance1-7bdx-pgwal"],
    );
    let c = Operator::Crunchy;
    assert_eq!(
        pg(&data, Some(&p)),
        vol(VolumeRole::Data, c, "hippo", "hippo-instance1-7bdx")
    );
    assert_eq!(
        pg(&wal, Some(&p)),
        vol(VolumeRole::Wal, c, "hippo", "hippo-instance1-7bdx")
    );
    assert_eq!(pg(&repo, None), None);
    assert!(!wal_on_data(&p, &[&data, &wal]));
    assert!(wal_on_data(&p, &[&data]));

    // An unlabelled claim mounted by an instance pod is data.
    let extra = pvc("pgo", "scratch", json!({}), json!({}), json!([]));
    assert_eq!(pg(&extra, Some(&p)).map(|v| v.role), Some(VolumeRole::Data));
    // Crunchy names do not follow the StatefulSet template pattern: no group from it.
    assert_eq!(group_key(&data, Some(&p)), None);
}

#[test]
fn bitnami_chart() {
    let chart = json!({
        "app.kubernetes.io/name": "postgresql",
        "app.kubernetes.io/instance": "my-release",
        "app.kubernetes.io/component": "primary",
    });
    let data = pvc(
        "apps",
        "data-my-release-postgresql-0",
        chart.clone(),
        json!({}),
        json!([]),
    );
    let mut pod_labels = chart;
    pod_labels["app.kubernetes.io/managed-by"] = json!("Helm");
    pod_labels["helm.sh/chart"] = json!("postgresql-16.2.1");
    let p = pod(
        "apps",
        "my-release-postgresql-0",
        pod_labels,
        sts_owner("my-release-postgresql"),
        &["data-my-release-postgresql-0"],
    );
    assert_eq!(
        pg(&data, Some(&p)),
        vol(
            VolumeRole::Data,
            Operator::Bitnami,
            "my-release",
            "my-release-postgresql-0"
        )
    );
    assert_eq!(
        group_key(&data, Some(&p)).as_deref(),
        Some("apps/sts/my-release-postgresql/data")
    );
}

#[test]
fn annotation_wins_and_bad_values_are_errors() {
    // A Bitnami claim explicitly marked as the WAL volume.
    let wal = pvc(
        "apps",
        "wal-my-release-postgresql-0",
        json!({ "app.kubernetes.io/name": "postgresql", "app.kubernetes.io/instance": "my-release" }),
        json!({ "headroom.dev/postgres-role": "wal" }),
        json!([]),
    );
    let v = pg(&wal, None).expect("postgres");
    assert_eq!((v.role, v.operator), (VolumeRole::Wal, Operator::Bitnami));

    let plain = pvc(
        "apps",
        "pg-data",
        json!({}),
        json!({ "headroom.dev/postgres-role": "data" }),
        json!([]),
    );
    let p = pod(
        "apps",
        "pg-0",
        json!({ "app": "pg" }),
        json!([]),
        &["pg-data"],
    );
    assert_eq!(
        pg(&plain, Some(&p)),
        Some(PgVolume {
            role: VolumeRole::Data,
            operator: Operator::Annotation,
            cluster: None,
            instance: Some("pg-0".into()),
        })
    );

    let bad = pvc(
        "apps",
        "pg-data",
        json!({}),
        json!({ "headroom.dev/postgres-role": "pgwal" }),
        json!([]),
    );
    let msg = postgres_volume(&bad, None)
        .expect_err("bad role")
        .to_string();
    assert_eq!(
        msg,
        "PVC apps/pg-data: annotation headroom.dev/postgres-role: 'pgwal' is not a Postgres role (write data, wal or tablespace)"
    );
    // Not Postgres at all.
    let other = pvc(
        "apps",
        "uploads",
        json!({ "app": "web" }),
        json!({}),
        json!([]),
    );
    let web = pod(
        "apps",
        "web-0",
        json!({ "app": "web" }),
        sts_owner("web"),
        &["uploads"],
    );
    assert_eq!(pg(&other, Some(&web)), None);
}

#[test]
fn group_keys() {
    let annotated = pvc(
        "apps",
        "data-kafka-0",
        json!({}),
        json!({ "headroom.dev/group": "kafka-brokers" }),
        json!([]),
    );
    assert_eq!(
        group_key(&annotated, None).as_deref(),
        Some("apps/group/kafka-brokers")
    );

    let claim = pvc("apps", "data-kafka-2", json!({}), json!({}), json!([]));
    let p = pod(
        "apps",
        "kafka-2",
        json!({}),
        sts_owner("kafka"),
        &["data-kafka-2"],
    );
    assert_eq!(
        group_key(&claim, Some(&p)).as_deref(),
        Some("apps/sts/kafka/data")
    );
    // Template names may contain dashes; the StatefulSet name anchors the split.
    let claim = pvc("apps", "log-dirs-kafka-10", json!({}), json!({}), json!([]));
    assert_eq!(
        group_key(&claim, Some(&p)).as_deref(),
        Some("apps/sts/kafka/log-dirs")
    );
    // Owned by the StatefulSet itself (retention policy whenDeleted: Delete), no pod needed.
    let owned = pvc(
        "apps",
        "data-kafka-1",
        json!({}),
        json!({}),
        sts_owner("kafka"),
    );
    assert_eq!(
        group_key(&owned, None).as_deref(),
        Some("apps/sts/kafka/data")
    );
    // Not a template claim of that StatefulSet, or no owner: no group.
    let stray = pvc("apps", "data-zookeeper-0", json!({}), json!({}), json!([]));
    assert_eq!(group_key(&stray, Some(&p)), None);
    assert_eq!(group_key(&claim, None), None);
    let deployment = pod("apps", "web-5d9c-x2", json!({}), json!([]), &["data-web"]);
    assert_eq!(
        group_key(
            &pvc("apps", "data-web", json!({}), json!({}), json!([])),
            Some(&deployment)
        ),
        None
    );
}

#[test]
fn ephemeral_volumes_count_as_the_pods_claims() {
    let p: Pod = serde_json::from_value(json!({
        "metadata": { "name": "pg-0", "namespace": "db" },
        "spec": {
            "containers": [{ "name": "pg", "image": "postgres:17" }],
            "volumes": [
                { "name": "data", "persistentVolumeClaim": { "claimName": "pg-data" } },
                { "name": "wal", "ephemeral": { "volumeClaimTemplate": { "spec": {
                    "accessModes": ["ReadWriteOnce"], "resources": { "requests": { "storage": "5Gi" } } } } } },
            ],
        },
    }))
    .expect("pod");
    assert_eq!(pod_claim_names(&p), vec!["pg-data", "pg-0-wal"]);
    let wal = pvc(
        "db",
        "pg-0-wal",
        json!({}),
        json!({ "headroom.dev/postgres-role": "wal" }),
        json!([]),
    );
    assert!(!wal_on_data(&p, &[&wal]));
}

#[test]
fn group_size_counts_peers_seen_without_their_pods() {
    let pvc = |name: &str, size: &str, labels: serde_json::Value| -> PersistentVolumeClaim {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": name, "namespace": "db", "labels": labels },
            "spec": { "resources": { "requests": { "storage": size } } },
        }))
        .expect("pvc")
    };
    let cnpg = |n: &str, size: &str, role: &str| {
        pvc(
            n,
            size,
            serde_json::json!({ "cnpg.io/cluster": "pg", "cnpg.io/pvcRole": role }),
        )
    };
    let members = [
        cnpg("pg-1", "40Gi", "PG_DATA"),
        cnpg("pg-2", "50Gi", "PG_DATA"),
        cnpg("pg-1-wal", "90Gi", "PG_WAL"),
        cnpg("pg-3", "10Gi", "PG_DATA"),
    ];
    assert_eq!(group_size(&members, "db/cnpg/pg/PG_DATA"), Some(50 << 30));
    // StatefulSet peers carry no owner: matched by `<template>-<sts>-<ordinal>`.
    let sts = [
        pvc("data-web-0", "8Gi", serde_json::json!({})),
        pvc("data-web-1", "12Gi", serde_json::json!({})),
        pvc("data-webby-0", "99Gi", serde_json::json!({})),
        pvc("logs-web-0", "50Gi", serde_json::json!({})),
    ];
    assert_eq!(group_size(&sts, "db/sts/web/data"), Some(12 << 30));
    assert_eq!(group_size(&sts, "db/sts/nothing/data"), None);
}

#[test]
fn pvc_autoresizers_initial_resize_group_by_groups_by_the_named_labels_value() {
    let by = json!({ "resize.topolvm.io/initial-resize-group-by": "label-foobar" });
    let member = |name: &str, ns: &str, value: Option<&str>, annotations: &Value| {
        let labels = value.map_or(json!({}), |v| json!({ "label-foobar": v }));
        pvc(ns, name, labels, annotations.clone(), json!([]))
    };
    // pvc-autoresizer's README example: pvc-x-3 joins pvc-x-1 and pvc-x-2, not pvc-y-1.
    let x3 = member("pvc-x-3", "db", Some("group-x"), &by);
    let key = group_key(&x3, None).expect("grouped");
    assert_eq!(key, "db/topolvm/label-foobar=group-x");
    assert!(in_group(
        &member("pvc-x-1", "db", Some("group-x"), &by),
        &key
    ));
    // A claim with the label but not the annotation counts, as pvc-autoresizer lists by label.
    assert!(in_group(
        &member("pvc-x-2", "db", Some("group-x"), &json!({})),
        &key
    ));
    assert!(!in_group(
        &member("pvc-y-1", "db", Some("group-y"), &by),
        &key
    ));
    assert!(!in_group(
        &member("pvc-x-9", "other", Some("group-x"), &by),
        &key
    ));
    // The annotation without the label, or naming nothing: no group.
    assert_eq!(group_key(&member("pvc-z", "db", None, &by), None), None);
    let blank = json!({ "resize.topolvm.io/initial-resize-group-by": " " });
    assert_eq!(
        group_key(&member("pvc-z", "db", Some("group-x"), &blank), None),
        None
    );
    // headroom's own group annotation wins.
    let both = json!({ "resize.topolvm.io/initial-resize-group-by": "label-foobar", "headroom.dev/group": "g" });
    assert_eq!(
        group_key(&member("pvc-x-4", "db", Some("group-x"), &both), None).as_deref(),
        Some("db/group/g")
    );
    // Label keys with a prefix keep their slash.
    let app = pvc(
        "db",
        "data-0",
        json!({ "app.kubernetes.io/instance": "mysql-a" }),
        json!({ "resize.topolvm.io/initial-resize-group-by": "app.kubernetes.io/instance" }),
        json!([]),
    );
    let key = group_key(&app, None).expect("grouped");
    assert_eq!(key, "db/topolvm/app.kubernetes.io/instance=mysql-a");
    assert!(in_group(&app, &key));
}
