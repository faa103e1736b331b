use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use serde_json::{Value, json};

use super::*;

fn pvc(name: &str, labels: Value, annotations: Value, owners: Value) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {
            "name": name, "namespace": "db", "uid": format!("uid-{name}"),
            "labels": labels, "annotations": annotations, "ownerReferences": owners,
        },
        "spec": { "resources": { "requests": { "storage": "20Gi" } } },
    }))
    .expect("test PVC")
}

fn plain(name: &str, labels: Value) -> PersistentVolumeClaim {
    pvc(name, labels, json!({}), json!([]))
}

fn sts_pod(sts: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": format!("{sts}-0"), "namespace": "db", "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "StatefulSet", "name": sts, "uid": "u", "controller": true,
        }]},
    }))
    .expect("test Pod")
}

fn id(owner: Owner, role: Role) -> LogicalVolume {
    LogicalVolume {
        namespace: "db".into(),
        owner,
        role,
    }
}

#[test]
fn each_operator_names_its_cluster_and_role() {
    let cnpg = |role: &str| json!({"cnpg.io/cluster": "pg", "cnpg.io/pvcRole": role});
    let pg = || Owner::CloudNativePG {
        cluster: "pg".into(),
    };
    assert_eq!(
        logical_volume(&plain("pg-1", cnpg("PG_DATA")), None),
        Some(id(pg(), Role::Data))
    );
    assert_eq!(
        logical_volume(&plain("pg-1-wal", cnpg("PG_WAL")), None),
        Some(id(pg(), Role::Wal))
    );
    let mut tbs = cnpg("PG_TABLESPACE");
    tbs["cnpg.io/tablespaceName"] = json!("hot");
    let tbs = logical_volume(&plain("pg-1-tbs-hot", tbs), None).expect("tablespace");
    assert_eq!(tbs.role, Role::Tablespace("hot".into()));
    assert_eq!(tbs.to_string(), "cnpg/pg/tablespace/hot");

    let spilo = json!({"application": "spilo", "cluster-name": "acid-main"});
    let z = logical_volume(&plain("pgdata-acid-main-0", spilo), None).expect("zalando");
    assert_eq!(z.to_string(), "zalando/acid-main/data");
    assert!(z.on_by_default());

    let crunchy = |role: &str, data: &str| {
        json!({
            "postgres-operator.crunchydata.com/cluster": "hippo",
            "postgres-operator.crunchydata.com/instance-set": "00",
            "postgres-operator.crunchydata.com/instance": "hippo-00-abcd",
            "postgres-operator.crunchydata.com/data": data,
            "postgres-operator.crunchydata.com/role": role,
        })
    };
    let c = logical_volume(
        &plain("hippo-00-abcd-pgwal", crunchy("pgwal", "postgres")),
        None,
    );
    assert_eq!(c.expect("crunchy").to_string(), "crunchy/hippo/00/wal");
    // A pgBackRest repository holds its own repository, not a replica's data.
    assert_eq!(
        logical_volume(&plain("hippo-repo1", crunchy("", "pgbackrest")), None),
        None
    );
}

#[test]
fn statefulsets_and_explicit_groups() {
    let claim = plain("data-kafka-2", json!({}));
    let lv = logical_volume(&claim, Some(&sts_pod("kafka"))).expect("sts");
    assert_eq!(lv.to_string(), "sts/kafka/data");
    // Unknown software: opt-in.
    assert!(!lv.on_by_default());
    // Members on other nodes are seen without their pods: by name.
    assert!(is_member(&plain("data-kafka-0", json!({})), &lv));
    assert!(!is_member(&plain("data-kafka-x", json!({})), &lv));
    assert!(!is_member(&plain("logs-kafka-0", json!({})), &lv));
    let mut other_ns = plain("data-kafka-0", json!({}));
    other_ns.metadata.namespace = Some("other".into());
    assert!(!is_member(&other_ns, &lv));

    let grouped = pvc(
        "a",
        json!({}),
        json!({"headroom.dev/group": " shards "}),
        json!([]),
    );
    let g = logical_volume(&grouped, None).expect("group");
    assert_eq!(g.to_string(), "group/shards");
    assert!(g.on_by_default(), "the user asked for it");
    let blank = pvc(
        "b",
        json!({}),
        json!({"headroom.dev/group": "  "}),
        json!([]),
    );
    assert_eq!(logical_volume(&blank, None), None);
}

#[test]
fn peers_are_the_other_members_with_what_their_claims_say() {
    let labels = json!({"cnpg.io/cluster": "pg", "cnpg.io/pvcRole": "PG_DATA"});
    let me = plain("pg-1", labels.clone());
    let history = r#"[{"at":"2026-01-04T01:00:00Z","kind":"Grow","from":1,"to":2,"action":"a-1"}]"#;
    let status = r#"{"node":"n","updatedAt":"2026-01-04T01:00:00Z","effectiveSizeBytes":1,
        "state":"Blocked","blockedReason":"not_expandable","lastDecision":"x","budgetLeft":0}"#;
    let two = pvc(
        "pg-2",
        labels.clone(),
        json!({"headroom.dev/history": history, "headroom.dev/status": status,
               "volume.kubernetes.io/selected-node": "worker-2"}),
        json!([]),
    );
    let corrupt = pvc(
        "pg-3",
        labels,
        json!({"headroom.dev/history": "{not json"}),
        json!([]),
    );
    let stranger = plain("web-0", json!({}));
    let all = [me.clone(), two, corrupt, stranger];
    let p = peers(&me, None, all.iter()).expect("a logical volume");
    let names: Vec<&str> = p.peers.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["pg-2", "pg-3"]);
    let two = &p.peers[0];
    assert_eq!(two.request, 20 * crate::quantity::GI);
    assert_eq!(
        two.history.as_ref().expect("history")[0]
            .action
            .as_ref()
            .map(|a| a.as_str()),
        Some("a-1")
    );
    assert_eq!(two.blocked, Some(BlockReason::NotExpandable));
    assert_eq!(two.node.as_deref(), Some("worker-2"));
    let err = p.peers[1].history.as_ref().expect_err("corrupt");
    assert!(err.contains("db/pg-3"), "{err}");
    // A claim in no logical volume has no peers.
    assert!(peers(&all[3], None, all.iter()).is_none());
}
