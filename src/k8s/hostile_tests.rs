//! The parsers of what tenants write on claims and pods, fed arbitrary strings and arbitrary
//! JSON: the history, status and reclaim annotations, storage quantities and resize conditions
//! at any date, operator labels, pod volumes and owner references; and the ConfigMap's
//! `postgres.yaml` and the kubelet's summary. Errors, never panics.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::{claim, roles, state};
use crate::agent::kubelet_stats as kubelet;
use crate::agent::pgconn::Credentials;
use crate::policy::hostile_tests::NASTY;
use crate::reclaim::state as reclaim_state;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => proptest::sample::select(NASTY).prop_map(str::to_string),
        2 => any::<String>(),
        1 => "[-+0-9.eE:TZa-zA-Z/ ]{0,32}",
    ]
}

/// Arbitrary JSON, a few levels deep, with the numbers and strings that sit on type edges.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        text().prop_map(Value::from),
        Just(json!("9999-12-30T00:00:00Z")),
        Just(json!("-009999-01-02T01:59:59Z")),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            proptest::collection::btree_map(
                proptest::sample::select(vec![
                    "at",
                    "kind",
                    "from",
                    "to",
                    "node",
                    "fs_before",
                    "landed",
                    "updatedAt",
                    "state",
                    "budgetLeft",
                    "effectiveSizeBytes",
                    "lastDecision",
                    "bytes",
                    "durationMs",
                    "result",
                    "pods",
                    "volume",
                    "pvcRef",
                    "time",
                    "capacityBytes",
                    "usedBytes",
                    "availableBytes",
                    "name",
                    "namespace",
                    "default",
                    "clusters",
                    "user",
                    "passwordFile",
                    "port",
                ])
                .prop_map(str::to_string),
                inner,
                0..6,
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn annotation_text() -> impl Strategy<Value = String> {
    prop_oneof![text(), json_value().prop_map(|v| v.to_string())]
}

fn pvc_with(
    annotations: BTreeMap<String, String>,
    labels: BTreeMap<String, String>,
) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": { "name": "data-pg-0", "namespace": "db", "annotations": annotations, "labels": labels },
        "spec": { "resources": { "requests": { "storage": "10Gi" } } },
    }))
    .expect("pvc")
}

fn any_time() -> impl Strategy<Value = Timestamp> {
    prop_oneof![
        Just(Timestamp::MIN),
        Just(Timestamp::MAX),
        (Timestamp::MIN.as_second()..=Timestamp::MAX.as_second())
            .prop_map(|s| Timestamp::from_second(s).unwrap_or(Timestamp::UNIX_EPOCH)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn claim_annotations_never_panic(h in annotation_text(), s in annotation_text(), r in annotation_text(), now in any_time()) {
        let p = pvc_with(
            [
                (state::HISTORY.to_string(), h),
                (state::STATUS.to_string(), s),
                (reclaim_state::ANNOTATION.to_string(), r),
            ]
            .into(),
            BTreeMap::new(),
        );
        if let Ok(history) = state::read_history(&p) {
            prop_assert!(history.windows(2).all(|w| w[0].at <= w[1].at));
            if let Some(a) = history.first().cloned() {
                let out = state::append(&history, a, now);
                prop_assert!(out.len() <= state::MAX_ENTRIES);
            }
        }
        if let Ok(Some(status)) = state::read_status(&p) {
            let _ = status.differs(&status);
        }
        let _ = reclaim_state::read(&p);
    }

    #[test]
    fn sizes_and_conditions_never_panic(
        request in proptest::option::of(text()),
        capacity in proptest::option::of(text()),
        kind in proptest::sample::select(vec!["Resizing", "FileSystemResizePending", "ControllerResizeError", "NodeResizeError", "Other"]),
        allocated in proptest::option::of(text()),
        since in any_time(),
        now in any_time(),
        timeout_s in prop_oneof![Just(i64::MAX), Just(i64::MIN), any::<i64>()],
    ) {
        let mut p: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": { "name": "x", "namespace": "db" },
            "spec": { "resources": { "requests": request.map(|r| json!({ "storage": r })) } },
            "status": {
                "phase": "Bound",
                "capacity": capacity.map(|c| json!({ "storage": c })),
                "allocatedResourceStatuses": allocated.map(|a| json!({ "storage": a })),
            },
        }))
        .expect("pvc");
        if let Some(st) = p.status.as_mut() {
            st.conditions = Some(vec![k8s_openapi::api::core::v1::PersistentVolumeClaimCondition {
                type_: kind.to_string(),
                status: "True".into(),
                last_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(since)),
                ..Default::default()
            }]);
        }
        let timeout = SignedDuration::from_secs(timeout_s);
        let _ = claim::claim_state(&p, now, claim::Bounds::online(timeout));
    }

    #[test]
    fn operator_labels_and_pod_shapes_never_panic(
        labels in proptest::collection::btree_map(
            proptest::sample::select(vec![
                "cnpg.io/cluster", "cnpg.io/instanceName", "cnpg.io/pvcRole", "cnpg.io/tablespaceName",
                "postgres-operator.crunchydata.com/cluster", "postgres-operator.crunchydata.com/instance",
                "postgres-operator.crunchydata.com/role", "postgres-operator.crunchydata.com/pgbackrest-volume",
                "app.kubernetes.io/name", "app.kubernetes.io/instance", "application", "cluster-name", "spilo-role",
            ]).prop_map(str::to_string),
            text(),
            0..8,
        ),
        role in proptest::option::of(text()),
        group in proptest::option::of(text()),
        pvc_name in text(),
        pod_name in text(),
        owner in proptest::option::of(text()),
        volumes in proptest::collection::vec((text(), any::<bool>()), 0..4),
    ) {
        let mut annotations = BTreeMap::new();
        if let Some(r) = role { annotations.insert(roles::POSTGRES_ROLE.to_string(), r); }
        if let Some(g) = group { annotations.insert(roles::GROUP.to_string(), g); }
        let mut p = pvc_with(annotations, labels.clone());
        p.metadata.name = Some(pvc_name);
        let vols: Vec<Value> = volumes
            .iter()
            .map(|(n, ephemeral)| if *ephemeral {
                json!({ "name": n, "ephemeral": { "volumeClaimTemplate": { "spec": {} } } })
            } else {
                json!({ "name": n, "persistentVolumeClaim": { "claimName": n } })
            })
            .collect();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": pod_name, "namespace": "db", "labels": labels,
                "ownerReferences": owner.map(|o| json!([{ "apiVersion": "apps/v1", "kind": "StatefulSet", "name": o, "uid": "u", "controller": true }])),
            },
            "spec": { "containers": [], "volumes": vols },
        }))
        .expect("pod");
        let _ = roles::postgres_volume(&p, Some(&pod));
        let _ = roles::postgres_volume(&p, None);
        let _ = roles::pod_claim_names(&pod);
        let _ = roles::wal_on_data(&pod, &[&p]);
        if let Some(key) = roles::group_key(&p, Some(&pod)) {
            let _ = roles::in_group(&p, &key);
            let _ = roles::group_size([&p], &key);
        }
    }

    #[test]
    fn postgres_yaml_and_kubelet_summary_never_panic(doc in prop_oneof![text(), json_value().prop_map(|v| v.to_string())], summary in json_value()) {
        let _ = Credentials::parse("headroom/headroom", &doc);
        let _ = kubelet::parse(summary.to_string().as_bytes());
        let _ = kubelet::parse(doc.as_bytes());
    }
}

#[test]
fn reclaim_annotation_far_future_far_past_malformed_and_huge() {
    use crate::policy::window::{parse_cron, parse_timezone};
    let cron = parse_cron("@daily").expect("cron");
    let tz = parse_timezone("UTC").expect("tz");
    let now: Timestamp = "2026-03-01T12:00:00Z".parse().expect("ts");
    for (record, readable) in [
        (
            json!({ "at": "9999-12-30T00:00:00Z", "bytes": 1, "durationMs": 1, "result": "Succeeded", "node": "n" }),
            true,
        ),
        (
            json!({ "at": "-009999-01-02T01:59:59Z", "bytes": 1, "durationMs": 1, "result": "Failed", "node": "n" }),
            true,
        ),
        (
            json!({ "at": "2026-03-01T00:00:00Z", "bytes": u64::MAX, "durationMs": u64::MAX, "result": "Succeeded", "node": "n" }),
            true,
        ),
        (
            json!({ "at": "2026-03-01T00:00:00Z", "bytes": "18446744073709551616", "durationMs": 1, "result": "Succeeded", "node": "n" }),
            false,
        ),
        (
            json!({ "at": "10000-01-01T00:00:00Z", "bytes": 1, "durationMs": 1, "result": "Succeeded", "node": "n" }),
            false,
        ),
        (json!("not a record"), false),
    ] {
        let p = pvc_with(
            [(reclaim_state::ANNOTATION.to_string(), record.to_string())].into(),
            BTreeMap::new(),
        );
        match reclaim_state::read(&p) {
            Ok(Some(r)) => {
                assert!(readable, "{record}");
                let due = crate::reclaim::schedule::due(&cron, &tz, Some(r.at), now, now);
                let _ = due.at;
            }
            Ok(None) => panic!("{record}: absent"),
            Err(e) => {
                assert!(!readable, "{record}: {e}");
                let msg = e.to_string();
                assert!(
                    msg.contains("db/data-pg-0") && msg.contains(reclaim_state::ANNOTATION),
                    "{msg}"
                );
            }
        }
    }
}

#[test]
fn huge_sizes_and_conditions_at_the_ends_of_time() {
    let now: Timestamp = "2026-03-01T12:00:00Z".parse().expect("ts");
    for (request, capacity, ok) in [
        ("18446744073709551615", "18446744073709551615", true),
        ("16Ei", "1Gi", false),
        ("18446744073709551616", "1Gi", false),
        (
            "1Gi",
            "99999999999999999999999999999999999999999999999999Ei",
            false,
        ),
        ("0.000000000000000000000000000000000001m", "1Gi", false),
        ("-1Gi", "1Gi", false),
        ("1e308", "1Gi", false),
    ] {
        for since in [Timestamp::MIN, Timestamp::MAX] {
            let mut p: PersistentVolumeClaim = serde_json::from_value(json!({
                "metadata": { "name": "data-pg-0", "namespace": "db" },
                "spec": { "resources": { "requests": { "storage": request } } },
                "status": { "phase": "Bound", "capacity": { "storage": capacity } },
            }))
            .expect("pvc");
            if let Some(st) = p.status.as_mut() {
                st.conditions = Some(vec![
                    k8s_openapi::api::core::v1::PersistentVolumeClaimCondition {
                        type_: "Resizing".into(),
                        status: "True".into(),
                        last_transition_time: Some(
                            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(since),
                        ),
                        ..Default::default()
                    },
                ]);
            }
            for timeout in [
                SignedDuration::MAX,
                SignedDuration::MIN,
                SignedDuration::ZERO,
            ] {
                let r = claim::claim_state(&p, now, claim::Bounds::online(timeout));
                assert_eq!(r.is_ok(), ok, "{request} {capacity}: {r:?}");
                if let Err(e) = r {
                    assert!(e.to_string().contains("PVC db/data-pg-0"), "{e}");
                }
            }
        }
    }
}
