//! Hostile claims, pods, StorageClasses and ConfigMaps through the whole pure path of one scan:
//! evaluate, the status annotation, the history written on a grow, the patch, the Event and the
//! metrics. No input, at no time (the ends of the time type included), panics; future history
//! is ignored with a finding; a panic that does happen is contained to its claim.

use std::collections::BTreeMap;
use std::path::PathBuf;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimCondition, PersistentVolumeClaimStatus, Pod,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use proptest::prelude::*;
use serde_json::json;

use super::contain::contain;
use crate::decide::{Action, BlockReason, GrowKind, Measurement, Verdict};
use crate::events::notice_for;
use crate::k8s::state::{self, StatusAnnotation};
use crate::metrics::Metrics;
use crate::policy::fields::FIELDS;
use crate::policy::hostile_tests::NASTY;
use crate::policy::merge::{CentralPolicy, parse_configmap};
use crate::probe::{Volume, VolumeClass, VolumeMode};
use crate::resolve::{Evaluation, KubeletVolume, Subject, evaluate};

const LABELS: &[&str] = &[
    "cnpg.io/cluster",
    "cnpg.io/instanceName",
    "cnpg.io/pvcRole",
    "cnpg.io/tablespaceName",
    "postgres-operator.crunchydata.com/cluster",
    "postgres-operator.crunchydata.com/instance",
    "postgres-operator.crunchydata.com/role",
    "postgres-operator.crunchydata.com/pgbackrest-volume",
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "application",
    "cluster-name",
    "spilo-role",
];

const TIMES: &[&str] = &[
    "9999-12-30T00:00:00Z",
    "9999-12-31T23:59:59.999999999Z",
    "-009999-01-02T01:59:59Z",
    "0000-01-01T00:00:00Z",
    "1970-01-01T00:00:00Z",
    "2026-03-01T12:00:00Z",
    "2026-03-01T12:04:59Z",
    "2026-03-01T12:05:01Z",
    "not a time",
    "2026-13-45T99:99:99Z",
];

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(NASTY).prop_map(str::to_string),
        1 => proptest::sample::select(TIMES).prop_map(str::to_string),
        2 => any::<String>(),
        2 => "[-+0-9.eE%a-zA-Z/*@ ]{0,24}",
    ]
}

fn any_time() -> impl Strategy<Value = Timestamp> {
    prop_oneof![
        Just(Timestamp::MIN),
        Just(Timestamp::MAX),
        Just(ts("2026-03-01T12:00:00Z")),
        (Timestamp::MIN.as_second()..=Timestamp::MAX.as_second())
            .prop_map(|s| Timestamp::from_second(s).unwrap_or(Timestamp::UNIX_EPOCH)),
    ]
}

fn ts(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

/// A history annotation: well-formed entries at any date and size, or garbage.
fn history() -> impl Strategy<Value = String> {
    let entry = (
        prop_oneof![
            proptest::sample::select(TIMES).prop_map(|t| json!(t)),
            any_time().prop_map(|t| json!(t.to_string())),
            any::<i64>().prop_map(|n| json!(n)),
        ],
        proptest::sample::select(vec![
            "Grow",
            "ScheduledGrow",
            "EmergencyGrow",
            "GroupGrow",
            "Retry",
            "Shrink",
        ]),
        prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()],
        prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()],
        proptest::option::of(prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()]),
    )
        .prop_map(|(at, kind, from, to, fs)| {
            json!({ "at": at, "kind": kind, "from": from, "to": to, "node": "n", "fs_before": fs })
        });
    prop_oneof![
        3 => proptest::collection::vec(entry, 0..12).prop_map(|v| json!(v).to_string()),
        1 => text(),
    ]
}

fn keys() -> Vec<&'static str> {
    let mut k: Vec<&'static str> = FIELDS.iter().map(|f| f.annotation).collect();
    k.extend([
        "headroom.dev/postgres-role",
        "headroom.dev/group",
        "resize.topolvm.io/enabled",
        "resize.topolvm.io/threshold",
        "resize.topolvm.io/inodes-threshold",
        "resize.topolvm.io/increase",
        "resize.topolvm.io/storage_limit",
        state::STATUS,
    ]);
    k
}

fn annotations() -> impl Strategy<Value = BTreeMap<String, String>> {
    (
        proptest::collection::btree_map(
            proptest::sample::select(keys()).prop_map(str::to_string),
            text(),
            0..10,
        ),
        proptest::option::of(history()),
        any::<bool>(),
    )
        .prop_map(|(mut m, h, on)| {
            if on {
                m.insert("headroom.dev/enabled".into(), "true".into());
                m.entry("headroom.dev/limit".into())
                    .or_insert_with(|| "100Gi".into());
            }
            if let Some(h) = h {
                m.insert(state::HISTORY.into(), h);
            }
            m
        })
}

fn labels() -> impl Strategy<Value = BTreeMap<String, String>> {
    proptest::collection::btree_map(
        proptest::sample::select(LABELS).prop_map(str::to_string),
        prop_oneof![
            proptest::sample::select(vec!["data", "wal", "PG_WAL", "primary", "pg"])
                .prop_map(str::to_string),
            text()
        ],
        0..5,
    )
}

fn quantity() -> impl Strategy<Value = Option<String>> {
    proptest::option::weighted(
        0.9,
        prop_oneof![
            Just("10Gi".to_string()),
            Just("18446744073709551615".to_string()),
            text()
        ],
    )
}

#[derive(Debug, Clone)]
struct World {
    pvc_annotations: BTreeMap<String, String>,
    pvc_labels: BTreeMap<String, String>,
    request: Option<String>,
    capacity: Option<String>,
    limit: Option<String>,
    condition: Option<(String, Timestamp)>,
    class_annotations: BTreeMap<String, String>,
    expandable: Option<bool>,
    pod_labels: BTreeMap<String, String>,
    configmap: String,
    measurement: Option<Measurement>,
    kubelet: Option<KubeletVolume>,
    group_size: Option<u64>,
    now: Timestamp,
}

fn measurement() -> impl Strategy<Value = Measurement> {
    let n = || prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>(), 0u64..(1 << 40)];
    (n(), n(), n(), n(), n()).prop_map(|(c, u, a, it, iu)| Measurement {
        capacity_bytes: c,
        used_bytes: u,
        available_bytes: a,
        inodes_total: it,
        inodes_used: iu,
    })
}

fn world() -> impl Strategy<Value = World> {
    (
        (annotations(), labels(), quantity(), quantity(), quantity()),
        proptest::option::of((
            proptest::sample::select(vec![
                "Resizing",
                "FileSystemResizePending",
                "ControllerResizeError",
                "NodeResizeError",
            ])
            .prop_map(str::to_string),
            any_time(),
        )),
        (annotations(), proptest::option::of(any::<bool>()), labels()),
        prop_oneof![
            Just(String::new()),
            text(),
            Just(
                "enabled: true\nlimit: 50Gi\nmaintenanceWindow:\n  schedule: '0 0 1 1 * 9999'\n"
                    .into()
            )
        ],
        (
            proptest::option::of(measurement()),
            proptest::option::of((measurement(), proptest::option::of(any_time()))),
            proptest::option::of(prop_oneof![Just(u64::MAX), any::<u64>()]),
            any_time(),
        ),
    )
        .prop_map(
            |(
                (pa, pl, request, capacity, limit),
                condition,
                (ca, expandable, pod_labels),
                configmap,
                (m, k, group_size, now),
            )| World {
                pvc_annotations: pa,
                pvc_labels: pl,
                request,
                capacity,
                limit,
                condition,
                class_annotations: ca,
                expandable,
                pod_labels,
                configmap,
                measurement: m,
                kubelet: k.map(|(measurement, at)| KubeletVolume { measurement, at }),
                group_size,
                now,
            },
        )
}

fn pvc(w: &World) -> PersistentVolumeClaim {
    let q = |v: &Option<String>| v.as_ref().map(|s| json!({ "storage": s }));
    let mut p: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": { "name": "data-pg-0", "namespace": "db", "resourceVersion": "7",
                      "annotations": w.pvc_annotations, "labels": w.pvc_labels },
        "spec": {
            "storageClassName": "fast",
            "volumeName": "pv-1",
            "resources": { "requests": q(&w.request), "limits": q(&w.limit) },
        },
    }))
    .expect("pvc");
    let mut status = PersistentVolumeClaimStatus {
        phase: Some("Bound".into()),
        ..Default::default()
    };
    if let Some(c) = &w.capacity {
        status.capacity = Some([("storage".to_string(), Quantity(c.clone()))].into());
    }
    if let Some((kind, at)) = &w.condition {
        status.conditions = Some(vec![PersistentVolumeClaimCondition {
            type_: kind.clone(),
            status: "True".into(),
            last_transition_time: Some(Time(*at)),
            ..Default::default()
        }]);
    }
    p.status = Some(status);
    p
}

fn pod(w: &World) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": "pg-0", "namespace": "db", "uid": "u1", "labels": w.pod_labels },
        "spec": { "containers": [{ "name": "pg" }],
                  "volumes": [{ "name": "data", "persistentVolumeClaim": { "claimName": "data-pg-0" } }] },
    }))
    .expect("pod")
}

fn class(w: &World) -> StorageClass {
    let mut c: StorageClass = serde_json::from_value(json!({
        "metadata": { "name": "fast", "annotations": w.class_annotations },
        "provisioner": "ebs.csi.aws.com",
    }))
    .expect("class");
    c.allow_volume_expansion = w.expandable;
    c
}

fn volume(w: &World) -> Volume {
    let mut v = Volume::new(
        PathBuf::from("/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pv-1/mount"),
        VolumeMode::Filesystem,
    );
    v.pv = Some("pv-1".into());
    v.pod_uid = Some("u1".into());
    v.class = VolumeClass::OwnedBlock;
    v.measurement = w.measurement;
    v
}

/// Everything the scan does with one evaluation short of the API calls.
fn downstream(e: &Evaluation, pvc: &PersistentVolumeClaim, now: Timestamp, metrics: &Metrics) {
    let r = &e.report;
    let status = StatusAnnotation::from_report(r, now);
    if let Ok(Some(old)) = state::read_status(pvc) {
        let _ = status.differs(&old);
    }
    let _ = notice_for(r);
    let _ = serde_json::to_string(r);
    let _ = crate::decide::recover::retry_size(&r.claim, &e.history);
    if let Some((to, kind)) = r.decision.grow_to() {
        let action = Action {
            node: "n".into(),
            fs_before: r.measurement.map(|m| m.capacity_bytes),
            ..Action::new(now, kind, r.claim.current_bytes(), to)
        };
        let h = state::append(&e.history, action, now);
        let _ = state::grow_patch("7", to, &h, &status);
    }
    let _ = state::status_patch(Some("7"), &status, None);
    metrics.observe_scan(std::slice::from_ref(r), std::time::Duration::ZERO, now);
}

fn run(w: &World, metrics: &Metrics) -> Evaluation {
    let (p, pod, class, vol) = (pvc(w), pod(w), class(w), volume(w));
    let data: BTreeMap<String, String> = [("policy.yaml".to_string(), w.configmap.clone())].into();
    let central = if w.configmap.is_empty() {
        CentralPolicy::default()
    } else {
        parse_configmap(&data, "headroom/headroom")
    };
    let claims = [&p];
    let s = Subject {
        logical: None,
        watching_since: jiff::Timestamp::UNIX_EPOCH,
        eviction_refused: None,
        owner: None,
        node_object: None,
        pool: &crate::resolve::pool::PoolRead::NotRead,
        volume: &vol,
        pod: &pod,
        pvc: &p,
        pod_claims: &claims,
        storage_class: Some(&class),
        namespace: None,
        central: &central,
        node: "n",
        node_draining: false,
        resize_timeout: SignedDuration::from_mins(30),
        group_size: w.group_size,
        kubelet: w.kubelet,
        fill_rate: None,
        quotas: &[],
        quota_refused: false,
    };
    let e = evaluate(&s, None, w.now);
    downstream(&e, &p, w.now, metrics);
    e
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, failure_persistence: None, ..ProptestConfig::default() })]

    /// Any objects at any time: a decision, never a panic; a grow only within the limit and the
    /// budget of the counted history.
    #[test]
    fn hostile_objects_never_panic(w in world()) {
        let metrics = Metrics::new("n").expect("metrics");
        let e = run(&w, &metrics);
        if let Verdict::Grow { to, kind } = e.report.decision.verdict {
            prop_assert!(to > e.report.claim.current_bytes());
            prop_assert!(e.report.claim.capacity_bytes > 0, "grew a claim of unknown size");
            if kind != GrowKind::EmergencyGrow {
                prop_assert!(e.report.limit_bytes.is_some_and(|l| to <= l));
            }
            prop_assert!(e.history.iter().all(|a| !crate::decide::budget::is_future(a, w.now)));
        }
    }
}

#[path = "hostile_named_tests.rs"]
mod named;
