use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use serde_json::{Value, json};

use super::*;
use crate::k8s::logical;
use crate::k8s::roles::{group_key, in_group};

fn pvc(name: &str, labels: Value, annotations: Value, owners: Value) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {
            "name": name, "namespace": "db",
            "labels": labels, "annotations": annotations, "ownerReferences": owners,
        },
        "spec": { "resources": { "requests": { "storage": "20Gi" } } },
    }))
    .expect("test PVC")
}

fn pod(labels: Value, owners: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": "p", "namespace": "db", "labels": labels, "ownerReferences": owners },
    }))
    .expect("test pod")
}

fn sts(name: &str) -> Value {
    json!([{ "apiVersion": "apps/v1", "kind": "StatefulSet", "name": name, "uid": "u",
             "controller": true }])
}

/// Does `scope` hold `other` (as the API server would select it)?
fn holds(scope: &PeerScope, other: &PersistentVolumeClaim) -> bool {
    match scope {
        PeerScope::Namespace => true,
        PeerScope::Labels(want) => want.iter().all(|(k, v)| {
            other
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(k))
                .is_some_and(|have| have == v)
        }),
    }
}

/// Claims of one namespace in every kind of group and logical volume headroom knows, with
/// outsiders beside them.
fn claims() -> Vec<(PersistentVolumeClaim, Option<Pod>)> {
    let cnpg = |name: &str, cluster: &str, role: &str| {
        pvc(
            name,
            json!({ "cnpg.io/cluster": cluster, "cnpg.io/pvcRole": role,
                    "cnpg.io/instanceName": name }),
            json!({}),
            json!([]),
        )
    };
    let web_pod = pod(
        json!({ "app": "web", "statefulset.kubernetes.io/pod-name": "web-0" }),
        sts("web"),
    );
    let web = |i: u32| {
        pvc(
            &format!("data-web-{i}"),
            json!({ "app": "web" }),
            json!({}),
            json!([]),
        )
    };
    let topolvm = |name: &str, team: &str| {
        pvc(
            name,
            json!({ "team": team }),
            json!({ "resize.topolvm.io/initial-resize-group-by": "team" }),
            json!([]),
        )
    };
    vec![
        (cnpg("pg-1", "pg", "PG_DATA"), None),
        (cnpg("pg-1-wal", "pg", "PG_WAL"), None),
        (cnpg("pg-2", "pg", "PG_DATA"), None),
        (cnpg("other-1", "other", "PG_DATA"), None),
        (
            pvc(
                "spilo-a",
                json!({ "application": "spilo", "cluster-name": "acid" }),
                json!({}),
                json!([]),
            ),
            None,
        ),
        (
            pvc(
                "spilo-b",
                json!({ "application": "spilo", "cluster-name": "acid" }),
                json!({}),
                json!([]),
            ),
            None,
        ),
        (
            pvc(
                "crunchy-a",
                json!({ "postgres-operator.crunchydata.com/cluster": "hippo",
                        "postgres-operator.crunchydata.com/data": "postgres",
                        "postgres-operator.crunchydata.com/instance-set": "i1",
                        "postgres-operator.crunchydata.com/role": "pgdata" }),
                json!({}),
                json!([]),
            ),
            None,
        ),
        (
            pvc(
                "crunchy-b",
                json!({ "postgres-operator.crunchydata.com/cluster": "hippo",
                        "postgres-operator.crunchydata.com/data": "postgres",
                        "postgres-operator.crunchydata.com/instance-set": "i1",
                        "postgres-operator.crunchydata.com/role": "pgdata" }),
                json!({}),
                json!([]),
            ),
            None,
        ),
        (web(0), Some(web_pod)),
        (web(1), None),
        (web(2), None),
        (topolvm("t-a", "blue"), None),
        (
            pvc("t-b", json!({ "team": "blue" }), json!({}), json!([])),
            None,
        ),
        (topolvm("t-c", "red"), None),
        (
            pvc(
                "g-a",
                json!({}),
                json!({ "headroom.dev/group": "g" }),
                json!([]),
            ),
            None,
        ),
        (
            pvc(
                "g-b",
                json!({}),
                json!({ "headroom.dev/group": "g" }),
                json!([]),
            ),
            None,
        ),
        (
            pvc("loner", json!({ "app": "x" }), json!({}), json!([])),
            None,
        ),
    ]
}

#[test]
fn every_peer_of_a_claim_is_in_one_of_its_scopes() {
    let all = claims();
    let mut peers_seen = 0;
    for (own, pod) in &all {
        let scopes = peer_scopes(own, pod.as_ref());
        let key = group_key(own, pod.as_ref());
        let lv = logical::logical_volume(own, pod.as_ref());
        for (other, _) in &all {
            let peer = key.as_ref().is_some_and(|k| in_group(other, k))
                || lv.as_ref().is_some_and(|lv| logical::is_member(other, lv));
            if peer && other.metadata.name != own.metadata.name {
                peers_seen += 1;
                assert!(
                    scopes.iter().any(|s| holds(s, other)),
                    "{:?}: peer {:?} is in none of {scopes:?}",
                    own.metadata.name,
                    other.metadata.name
                );
            }
        }
    }
    // Every kind above has a peer: a fixture that lost its peers would pass vacuously.
    assert_eq!(peers_seen, 11, "peer pairs");
}

#[test]
fn labelled_identities_are_selected_and_outsiders_left_out() {
    let all = claims();
    let find = |name: &str| {
        all.iter()
            .find(|(c, _)| c.metadata.name.as_deref() == Some(name))
            .expect("fixture")
    };
    let (pg, _) = find("pg-1");
    let scopes = peer_scopes(pg, None);
    assert_eq!(scopes.len(), 1);
    assert_eq!(scopes[0].selector().as_deref(), Some("cnpg.io/cluster=pg"));
    assert!(!holds(&scopes[0], &find("other-1").0));

    let (spilo, _) = find("spilo-a");
    assert_eq!(
        peer_scopes(spilo, None)[0].selector().as_deref(),
        Some("application=spilo,cluster-name=acid")
    );
    let (t, _) = find("t-a");
    let scopes = peer_scopes(t, None);
    assert_eq!(scopes[0].selector().as_deref(), Some("team=blue"));
    assert!(!holds(&scopes[0], &find("t-c").0));

    // The StatefulSet's selector labels, shared by the claim and its pod; the pod's own
    // name label is not on the claim and not in the selector.
    let (web, pod) = find("data-web-0");
    let scopes = peer_scopes(web, pod.as_ref());
    assert_eq!(
        scopes,
        vec![PeerScope::Labels([("app".into(), "web".into())].into())]
    );
    assert!(!holds(&scopes[0], &find("loner").0));

    // A claim in no group needs no peers at all.
    assert!(peer_scopes(&find("loner").0, None).is_empty());
}

#[test]
fn identities_without_labels_need_the_namespace() {
    let all = claims();
    let (g, _) = all
        .iter()
        .find(|(c, _)| c.metadata.name.as_deref() == Some("g-a"))
        .expect("fixture");
    assert_eq!(peer_scopes(g, None), vec![PeerScope::Namespace]);
    // A StatefulSet's claim made by hand, with no label in common with its pod.
    let bare = pvc("data-web-0", json!({}), json!({}), json!([]));
    let web_pod = pod(json!({ "app": "web" }), sts("web"));
    assert_eq!(
        peer_scopes(&bare, Some(&web_pod)),
        vec![PeerScope::Namespace]
    );
    // A blank group annotation is no group (as roles reads it): no scope from it.
    let blank = pvc(
        "b",
        json!({}),
        json!({ "headroom.dev/group": " " }),
        json!([]),
    );
    assert!(peer_scopes(&blank, None).is_empty());
}
