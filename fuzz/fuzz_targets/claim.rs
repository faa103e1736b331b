//! One claim's whole evaluation as the agent's scan makes it (`resolve::evaluate`: the claim's,
//! its StorageClass's and the ConfigMap's policy, its history and status annotations, its
//! request, capacity and resize conditions, the measurement, the kubelet's numbers, the fill
//! rate, WAL health), then what the scan writes from it: the status annotation, the history with
//! the new action, the patches.
//!
//! Input: NUL-separated records: `pvc.<annotation>=`, `pvclabel.<label>=`, `sc.<annotation>=`,
//! `podlabel.<label>=`, `cm.<data key>=`, `history=` and `status=` (the claim's
//! `headroom.dev/history` and `headroom.dev/status`), `request=`, `capacity=`, `limit=`
//! (quantities as written), `condition=` (a resize condition's type) and `condition_at=`,
//! `expandable=` (`true`/`false`), `used=`, `available=`, `size=`, `inodes=`, `inodes_used=`
//! (the statfs measurement; none without `used=`), `kubelet_at=` (the same numbers from the
//! kubelet, dated), `group=` (the group's size), `rate=` (bytes per second), `draining=`,
//! `wal=` (WAL health as JSON), `now=` (seconds since the epoch, as every time here).
//!
//! Beyond "no panic", the engine's invariants (`src/decide/proptests.rs`) on every grow: never a
//! shrink, never over the limit unless an emergency may exceed it, never on a claim of unknown
//! size or with a resize in flight, never past the rolling 24 h budget of the counted history,
//! never a scheduled grow outside its window, only emergencies while the node drains; and the
//! history the agent writes reads back as written.
#![no_main]

use std::collections::BTreeMap;
use std::path::PathBuf;

use headroom::decide::Action;
use headroom::decide::budget::{WINDOW, counted, minus};
use headroom::decide::{GrowKind, Measurement, ResizeState, Verdict, WalHealth};
use headroom::k8s::state::{self, StatusAnnotation};
use headroom::policy::merge::{CentralPolicy, parse_configmap};
use headroom::policy::{Mode, Policy};
use headroom::probe::{Volume, VolumeClass, VolumeMode};
use headroom::resolve::pool::PoolRead;
use headroom::resolve::{KubeletVolume, Subject, evaluate};
use headroom_fuzz::{map_of, number, records, value};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimCondition, PersistentVolumeClaimStatus, Pod,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use libfuzzer_sys::fuzz_target;
use serde_json::json;

type Records = [(String, String)];

fn at(r: &Records, name: &str) -> Option<Timestamp> {
    let s: i64 = number(r, name)?;
    let s = s.clamp(Timestamp::MIN.as_second(), Timestamp::MAX.as_second());
    Timestamp::from_second(s).ok()
}

fn pvc(r: &Records) -> Option<PersistentVolumeClaim> {
    let mut annotations = map_of(r, "pvc.");
    for (name, key) in [("history", state::HISTORY), ("status", state::STATUS)] {
        if let Some(v) = value(r, name) {
            annotations.insert(key.to_string(), v.to_string());
        }
    }
    let q = |name| value(r, name).map(|s| json!({ "storage": s }));
    let mut p: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": { "name": "data-pg-0", "namespace": "db", "uid": "c1", "resourceVersion": "7",
                      "annotations": annotations, "labels": map_of(r, "pvclabel.") },
        "spec": {
            "storageClassName": "fast",
            "volumeName": "pv-1",
            "resources": { "requests": q("request"), "limits": q("limit") },
        },
    }))
    .ok()?;
    let mut status = PersistentVolumeClaimStatus {
        phase: Some("Bound".into()),
        ..Default::default()
    };
    if let Some(c) = value(r, "capacity") {
        status.capacity = Some([("storage".to_string(), Quantity(c.to_string()))].into());
    }
    if let Some(kind) = value(r, "condition") {
        status.conditions = Some(vec![PersistentVolumeClaimCondition {
            type_: kind.to_string(),
            status: "True".into(),
            last_transition_time: at(r, "condition_at").map(Time),
            ..Default::default()
        }]);
    }
    p.status = Some(status);
    Some(p)
}

fn pod(r: &Records) -> Option<Pod> {
    serde_json::from_value(json!({
        "metadata": { "name": "pg-0", "namespace": "db", "uid": "u1", "labels": map_of(r, "podlabel.") },
        "spec": { "containers": [{ "name": "pg" }],
                  "volumes": [{ "name": "data", "persistentVolumeClaim": { "claimName": "data-pg-0" } }] },
    }))
    .ok()
}

fn class(r: &Records) -> Option<StorageClass> {
    let mut c: StorageClass = serde_json::from_value(json!({
        "metadata": { "name": "fast", "annotations": map_of(r, "sc.") },
        "provisioner": "ebs.csi.aws.com",
    }))
    .ok()?;
    c.allow_volume_expansion = value(r, "expandable").map(|v| v == "true");
    Some(c)
}

fn measurement(r: &Records) -> Option<Measurement> {
    Some(Measurement {
        used_bytes: number(r, "used")?,
        capacity_bytes: number(r, "size").unwrap_or(10 << 30),
        available_bytes: number(r, "available").unwrap_or(0),
        inodes_total: number(r, "inodes").unwrap_or(0),
        inodes_used: number(r, "inodes_used").unwrap_or(0),
    })
}

/// The engine's daily limit for `kind`, written out apart from it (as the property tests do).
fn daily_limit(p: &Policy, kind: GrowKind) -> u32 {
    let e = &p.emergency_grow;
    if p.mode == Mode::Threshold {
        return p.max_actions_per_day;
    }
    let reserve = if e.enabled {
        e.reserved_actions_for_emergency
    } else {
        0
    };
    let planned = p
        .max_actions_per_day
        .min(e.max_actions_per_day.saturating_sub(reserve));
    if kind == GrowKind::EmergencyGrow {
        e.max_actions_per_day.max(planned)
    } else {
        planned
    }
}

fn check_grow(
    p: &Policy,
    e: &headroom::resolve::Evaluation,
    m: Option<&Measurement>,
    draining: bool,
    now: Timestamp,
) {
    let r = &e.report;
    let Verdict::Grow { to, kind } = r.decision.verdict else {
        return;
    };
    let current = r.claim.current_bytes();
    assert!(to > current, "shrink or no-op: {current} -> {to}");
    if !(kind == GrowKind::EmergencyGrow && p.emergency_grow.exceed_limit_on_emergency) {
        assert!(to <= p.limit, "over the limit: {to} > {}", p.limit);
    }
    assert!(r.claim.capacity_bytes > 0, "grew a claim of unknown size");
    assert_eq!(r.claim.resize, ResizeState::Idle, "grew during a resize");
    let since = minus(now, WINDOW);
    let used = counted(&e.history, now).filter(|a| a.at > since).count() as u32;
    assert!(
        used < daily_limit(p, kind),
        "over the daily budget: {used} used, {kind:?}"
    );
    if kind == GrowKind::ScheduledGrow {
        let w = p.maintenance_window.as_ref();
        assert!(
            w.is_some_and(|w| w.is_open(now)),
            "ScheduledGrow outside a window"
        );
    }
    if draining {
        let m = r.measurement.as_ref().or(m);
        assert!(
            m.is_some_and(
                |m| m.used_percent() >= f64::from(p.emergency_grow.critical_threshold)
                    || m.available_bytes < p.emergency_grow.critical_minimum_free
            ),
            "planned growth while the node drains"
        );
    }
}

/// What the scan writes after a decision; the history it writes must read back as written.
fn downstream(e: &headroom::resolve::Evaluation, pvc: &PersistentVolumeClaim, now: Timestamp) {
    let r = &e.report;
    let status = StatusAnnotation::from_report(r, now);
    if let Ok(Some(old)) = state::read_status(pvc) {
        let _ = status.differs(&old);
    }
    let _ = headroom::events::notice_for(r);
    let _ = serde_json::to_string(r);
    let mut written = e.history.clone();
    if let Some((to, kind)) = r.decision.grow_to() {
        let action = Action {
            node: "n".into(),
            fs_before: r.measurement.map(|m| m.capacity_bytes),
            ..Action::new(now, kind, r.claim.current_bytes(), to)
        };
        written = state::append(&e.history, action, now);
        let patch = state::grow_patch("7", to, &written, &status);
        assert!(patch.is_ok(), "grow patch: {patch:?}");
    }
    let _ = state::status_patch(Some("7"), &status, None);
    let Ok(text) = serde_json::to_string(&written) else {
        panic!("history does not serialise: {written:?}");
    };
    let mut again = pvc.clone();
    again
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(state::HISTORY.to_string(), text);
    assert_eq!(
        state::read_history(&again).ok().as_ref(),
        Some(&written),
        "history round trip"
    );
}

fuzz_target!(|data: &[u8]| {
    let r = records(data);
    let (Some(p), Some(pod), Some(class)) = (pvc(&r), pod(&r), class(&r)) else {
        return;
    };
    let cm = map_of(&r, "cm.");
    let central = if cm.is_empty() {
        CentralPolicy::default()
    } else {
        parse_configmap(&cm, "headroom/headroom")
    };
    let now = at(&r, "now")
        .unwrap_or_else(|| Timestamp::from_second(1_780_000_000).unwrap_or(Timestamp::UNIX_EPOCH));
    let m = measurement(&r);
    let mut volume = Volume::new(
        PathBuf::from("/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pv-1/mount"),
        VolumeMode::Filesystem,
    );
    volume.pv = Some("pv-1".into());
    volume.pod_uid = Some("u1".into());
    volume.class = VolumeClass::OwnedBlock;
    volume.measurement = m;
    let kubelet = value(&r, "kubelet_at")
        .and(m)
        .map(|measurement| KubeletVolume {
            measurement,
            at: at(&r, "kubelet_at"),
        });
    let wal: Option<WalHealth> = value(&r, "wal").and_then(|w| serde_json::from_str(w).ok());
    let draining = value(&r, "draining").is_some();
    let claims = [&p];
    let s = Subject {
        logical: None,
        watching_since: Timestamp::UNIX_EPOCH,
        volume: &volume,
        pod: &pod,
        pvc: &p,
        pod_claims: &claims,
        storage_class: Some(&class),
        namespace: None,
        central: &central,
        node: "n",
        node_draining: draining,
        resize_timeout: SignedDuration::from_mins(30),
        group_size: number(&r, "group"),
        kubelet,
        fill_rate: number::<f64>(&r, "rate"),
        quotas: &[],
        quota_refused: false,
        eviction_refused: None,
        owner: None,
        node_object: None,
        pool: &PoolRead::NotRead,
    };
    let e = evaluate(&s, wal, now);
    assert!(
        e.history
            .iter()
            .all(|a| !headroom::decide::budget::is_future(a, now)),
        "future history counted"
    );
    if e.report.decision.grow_to().is_some() {
        let Some(p) = e.policy.as_ref() else {
            panic!("a grow with no policy: {:?}", e.report.decision);
        };
        check_grow(p, &e, m.as_ref(), draining, now);
    }
    downstream(&e, &p, now);
});
