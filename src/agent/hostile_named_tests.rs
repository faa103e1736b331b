//! Named cases of [`super`]: far-future, far-past, malformed and huge values in every annotation
//! the agent reads, the ends of the time type, and a contained panic.

use super::*;

/// The first word of the finding that says history entries were ignored, as people read it.
const INVALID_HISTORY: &str = "invalid_history";

fn base_world() -> World {
    World {
        pvc_annotations: [
            ("headroom.dev/enabled".to_string(), "true".to_string()),
            ("headroom.dev/limit".to_string(), "100Gi".to_string()),
        ]
        .into(),
        pvc_labels: BTreeMap::new(),
        request: Some("10Gi".into()),
        capacity: Some("10Gi".into()),
        limit: None,
        condition: None,
        class_annotations: BTreeMap::new(),
        expandable: Some(true),
        pod_labels: BTreeMap::new(),
        configmap: String::new(),
        measurement: Some(Measurement {
            capacity_bytes: 10 << 30,
            used_bytes: 9 << 30,
            available_bytes: 1 << 30,
            inodes_total: 1000,
            inodes_used: 10,
        }),
        kubelet: None,
        group_size: None,
        now: ts("2026-03-01T12:00:00Z"),
    }
}

fn with_history(entries: serde_json::Value) -> World {
    let mut w = base_world();
    w.pvc_annotations
        .insert(state::HISTORY.into(), entries.to_string());
    w
}

fn entry(at: &str) -> serde_json::Value {
    json!({ "at": at, "kind": "Grow", "from": 1u64 << 30, "to": 2u64 << 30 })
}

#[test]
fn history_dated_9999_is_ignored_with_an_invalid_history_finding() {
    // The annotation that crash-looped the agent (budget next_slot overflowed).
    let metrics = Metrics::new("n").expect("metrics");
    let mut entries = vec![entry("9999-12-30T00:00:00Z")];
    for _ in 0..5 {
        entries.push(entry("2026-03-02T00:00:00Z"));
    }
    let e = run(&with_history(json!(entries)), &metrics);
    // Not counted: the budget is whole and the volume at 90% grows.
    assert!(
        e.report.decision.grow_to().is_some(),
        "{:?}",
        e.report.decision
    );
    assert_eq!(e.report.decision.next_slot, None);
    let f = e
        .report
        .policy_warnings
        .iter()
        .find(|f| f.message.starts_with(INVALID_HISTORY))
        .expect("finding");
    assert_eq!(f.field, state::HISTORY);
    assert_eq!(e.report.future_history.map(|h| h.entries), Some(6));
    assert!(
        f.message.contains("6 entries") && f.message.contains("9999-12-30T00:00:00Z"),
        "{}",
        f.message
    );
    assert!(e.history.is_empty(), "{:?}", e.history);
    let text = metrics.encode().expect("encode");
    assert!(
        text.lines()
            .any(|l| l.starts_with("headroom_volume_invalid_history{") && l.ends_with(" 1")),
        "{text}"
    );
}

#[test]
fn history_within_the_clock_skew_still_counts() {
    let metrics = Metrics::new("n").expect("metrics");
    let e = run(
        &with_history(json!([
            entry("2026-03-01T12:04:59Z"),
            entry("2026-03-01T12:04:00Z"),
            entry("2026-03-01T11:00:00Z"),
        ])),
        &metrics,
    );
    // Counted (the budget of 3 is spent), and the newest keeps a resize in flight until a
    // measurement is taken after it: skew only ever makes headroom wait.
    assert_eq!(e.report.decision.budget_left, 0);
    assert!(e.report.decision.grow_to().is_none());
    assert!(
        e.report
            .policy_warnings
            .iter()
            .all(|f| !f.message.starts_with(INVALID_HISTORY))
    );
    assert_eq!(e.report.future_history, None);
}

#[test]
fn far_past_history_is_history() {
    let metrics = Metrics::new("n").expect("metrics");
    let e = run(
        &with_history(json!([
            entry("-009999-01-02T01:59:59Z"),
            entry("0000-01-01T00:00:00Z")
        ])),
        &metrics,
    );
    assert!(
        e.report.decision.grow_to().is_some(),
        "{:?}",
        e.report.decision
    );
    assert_eq!(e.report.decision.budget_left, 3);
}

#[test]
fn malformed_or_huge_history_refuses_the_claim_naming_the_annotation() {
    let metrics = Metrics::new("n").expect("metrics");
    for bad in [
        json!("not json"),
        json!([{ "at": "2026-13-45T99:99:99Z", "kind": "Grow", "from": 1, "to": 2 }]),
        json!([{ "at": "2026-03-01T00:00:00Z", "kind": "Grow", "from": -1, "to": 2 }]),
        json!([{ "at": "2026-03-01T00:00:00Z", "kind": "Grow", "from": 1, "to": "18446744073709551616" }]),
        json!([{ "at": "2026-03-01T00:00:00Z", "kind": "Shrink", "from": 1, "to": 2 }]),
        json!([{ "at": "10000-01-01T00:00:00Z", "kind": "Grow", "from": 1, "to": 2 }]),
    ] {
        let text = match &bad {
            serde_json::Value::String(s) => s.clone(),
            v => v.to_string(),
        };
        let mut w = base_world();
        w.pvc_annotations.insert(state::HISTORY.into(), text);
        let e = run(&w, &metrics);
        assert_eq!(
            e.report.decision.blocked_reason(),
            Some(BlockReason::InvalidPolicy),
            "{bad}"
        );
        assert!(
            e.report
                .policy_errors
                .iter()
                .any(|f| f.field == state::HISTORY),
            "{bad}: {:?}",
            e.report.policy_errors
        );
    }
    // Sizes at the top of u64 are sizes: the grow from them saturates instead of overflowing.
    let e = run(
        &with_history(
            json!([{ "at": "2026-03-01T11:00:00Z", "kind": "Grow", "from": u64::MAX, "to": u64::MAX, "fs_before": u64::MAX }]),
        ),
        &metrics,
    );
    let _ = e.report.decision;
}

#[test]
fn far_and_malformed_status_annotation_never_panics() {
    let metrics = Metrics::new("n").expect("metrics");
    for status in [
        json!({ "node": "n", "updatedAt": "9999-12-31T23:59:59Z", "effectiveSizeBytes": u64::MAX,
                "state": "Growing", "lastDecision": "x", "budgetLeft": u32::MAX,
                "nextSlot": "-009999-01-02T01:59:59Z", "usedPercent": 1e308 })
        .to_string(),
        json!({ "updatedAt": "not a time" }).to_string(),
        "{".to_string(),
        "null".to_string(),
    ] {
        let mut w = base_world();
        w.pvc_annotations
            .insert(state::STATUS.into(), status.clone());
        let e = run(&w, &metrics);
        assert!(e.report.decision.grow_to().is_some(), "{status}");
    }
}

#[test]
fn engine_at_the_ends_of_time() {
    let metrics = Metrics::new("n").expect("metrics");
    for now in [Timestamp::MIN, Timestamp::MAX] {
        for at in ["9999-12-30T00:00:00Z", "-009999-01-02T01:59:59Z"] {
            let mut w = with_history(json!([entry(at)]));
            w.now = now;
            w.condition = Some(("Resizing".into(), Timestamp::MIN));
            let _ = run(&w, &metrics);
            w.kubelet = Some(KubeletVolume {
                measurement: Measurement::default(),
                at: Some(Timestamp::MAX),
            });
            w.measurement = None;
            let _ = run(&w, &metrics);
        }
    }
}

#[test]
fn bound_claim_without_capacity_is_blocked_capacity_unknown() {
    let metrics = Metrics::new("n").expect("metrics");
    let mut w = base_world();
    w.capacity = None;
    let e = run(&w, &metrics);
    assert_eq!(
        e.report.decision.blocked_reason(),
        Some(BlockReason::CapacityUnknown)
    );
    let n = notice_for(&e.report).expect("a warning");
    assert_eq!(n.reason, "CapacityUnknown");
}

#[test]
fn bad_operator_labels_and_role_annotation_are_findings_not_panics() {
    let metrics = Metrics::new("n").expect("metrics");
    for v in NASTY {
        let mut w = base_world();
        for l in LABELS {
            w.pvc_labels.insert(l.to_string(), v.to_string());
            w.pod_labels.insert(l.to_string(), v.to_string());
        }
        w.pvc_annotations
            .insert("headroom.dev/postgres-role".into(), v.to_string());
        w.pvc_annotations
            .insert("headroom.dev/group".into(), v.repeat(1000));
        let e = run(&w, &metrics);
        if !["data", "wal", "tablespace"].contains(&v.trim()) {
            assert_eq!(
                e.report.decision.blocked_reason(),
                Some(BlockReason::InvalidPolicy),
                "{v:?}"
            );
        }
    }
}

#[test]
fn a_panic_is_contained_to_its_claim() {
    let metrics = Metrics::new("n").expect("metrics");
    let w = base_world();
    let (p, pod, class, vol) = (pvc(&w), pod(&w), class(&w), volume(&w));
    let central = CentralPolicy::default();
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
        group_size: None,
        kubelet: None,
        fill_rate: None,
        quotas: &[],
        quota_refused: false,
    };
    let e = *contain(&s, w.now, &metrics, || -> Evaluation {
        panic!("index out of bounds: the len is 0")
    })
    .expect_err("the panic is contained");
    assert_eq!(
        e.report.decision.blocked_reason(),
        Some(BlockReason::InternalError)
    );
    assert_eq!(
        (e.report.namespace.as_str(), e.report.pvc.as_str()),
        ("db", "data-pg-0")
    );
    assert!(
        e.report.decision.notes[0]
            .to_string()
            .contains("index out of bounds")
    );
    let n = notice_for(&e.report).expect("a warning");
    assert_eq!(n.reason, "InternalError");
    metrics.observe_scan(
        std::slice::from_ref(&e.report),
        std::time::Duration::ZERO,
        w.now,
    );
    let text = metrics.encode().expect("encode");
    assert!(
        !text.contains("headroom_volume_resize_budget_remaining{"),
        "an internal error is no spent budget: {text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("headroom_internal_errors_total") && l.ends_with(" 1")),
        "{text}"
    );
    // And without a panic the claim's own evaluation comes through.
    let e = contain(&s, w.now, &metrics, || evaluate(&s, None, w.now)).expect("no panic");
    assert!(e.report.decision.grow_to().is_some());
}

/// Issue 36: a floor written on the claim (`headroom.dev/min-available` or pvc-autoresizer's
/// `threshold`) grows an empty 1Gi claim by its step; the same floor inherited from the
/// StorageClass or the ConfigMap is not applied (and said), and the shipped ConfigMap leaves the
/// claim alone.
#[test]
fn a_floor_on_the_claim_grows_a_small_claim_an_inherited_one_does_not() {
    let small = |w: &mut World| {
        (w.request, w.capacity) = (Some("1Gi".into()), Some("1Gi".into()));
        w.measurement = Some(Measurement {
            capacity_bytes: 1 << 30,
            used_bytes: 0,
            available_bytes: 1 << 30,
            inodes_total: 1000,
            inodes_used: 10,
        });
    };
    let floor = ("headroom.dev/min-available".to_string(), "5Gi".to_string());
    let grown = |w: &World| {
        let e = run(w, &Metrics::new("n").expect("metrics"));
        (
            e.report.decision.grow_to().map(|(to, _)| to),
            e.report.decision.fallback.map(|f| f.as_str()),
        )
    };
    let mut own = base_world();
    small(&mut own);
    own.pvc_annotations.insert(floor.0.clone(), floor.1.clone());
    assert_eq!(grown(&own), (Some(2 << 30), None));
    let mut topolvm = base_world();
    small(&mut topolvm);
    topolvm.pvc_annotations = [
        ("resize.topolvm.io/storage_limit", "100Gi"),
        ("resize.topolvm.io/threshold", "5Gi"),
        ("resize.topolvm.io/increase", "1Gi"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into();
    topolvm.class_annotations =
        [("resize.topolvm.io/enabled".to_string(), "true".to_string())].into();
    assert_eq!(grown(&topolvm), (Some(2 << 30), None));
    let unreachable = (None, Some("min_available_unreachable"));
    let mut class = base_world();
    small(&mut class);
    class.class_annotations = [floor.clone()].into();
    assert_eq!(grown(&class), unreachable);
    let mut central = base_world();
    small(&mut central);
    central.configmap = "minAvailable: 5Gi\n".into();
    assert_eq!(grown(&central), unreachable);
    // The shipped ConfigMap sets no floor: an empty 1Gi claim is left alone, nothing to say.
    let shipped: serde_json::Value =
        serde_saphyr::from_str(include_str!("../../daemonset/configmap.yaml")).expect("yaml");
    let mut shipped_world = base_world();
    small(&mut shipped_world);
    shipped_world.configmap = shipped["data"]["policy.yaml"]
        .as_str()
        .expect("policy.yaml")
        .into();
    assert_eq!(grown(&shipped_world), (None, None));
}

/// Issue 24: a trigger not applied as written is said on the claim: its status, a Warning
/// Event and `headroom_volume_policy_fallback`, from one evaluation.
#[test]
fn a_fallback_reaches_the_status_the_event_and_the_metric() {
    // The shipped ConfigMap's old floor on an empty 1Gi claim: not grown, and said.
    let mut w = base_world();
    w.configmap = "usageThreshold: 80\nminAvailable: 5Gi\n".into();
    (w.request, w.capacity) = (Some("1Gi".into()), Some("1Gi".into()));
    w.measurement = Some(Measurement {
        capacity_bytes: 1 << 30,
        used_bytes: 0,
        available_bytes: 1 << 30,
        inodes_total: 1000,
        inodes_used: 10,
    });
    let metrics = Metrics::new("n").expect("metrics");
    let e = run(&w, &metrics);
    assert_eq!(e.report.decision.grow_to(), None, "{:?}", e.report.decision);
    let status = state::StatusAnnotation::from_report(&e.report, w.now);
    let note = status.fallback.expect("status says it");
    assert_eq!(note.reason, "min_available_unreachable");
    assert!(
        note.message.contains("minAvailable 5Gi can never be met"),
        "{}",
        note.message
    );
    let n = crate::events::fallback_notice(&e.report).expect("an Event");
    assert!(n.warning && n.reason == "PolicyFallback", "{n:?}");
    let text = metrics.encode().expect("encode");
    let series = |reason: &str| {
        text.lines()
            .find(|l| {
                l.starts_with("headroom_volume_policy_fallback{")
                    && l.contains(&format!("reason=\"{reason}\""))
            })
            .map(|l| l.ends_with(" 1"))
    };
    assert_eq!(series("min_available_unreachable"), Some(true), "{text}");
    assert_eq!(series("min_available_invalid"), Some(false), "{text}");
    // The validate warning travels with the report too.
    assert!(
        e.report
            .policy_warnings
            .iter()
            .any(|f| f.field == "minAvailable"),
        "{:?}",
        e.report.policy_warnings
    );

    // An invalid minAvailable on the claim: the policy still applies (90 % used grows at 80),
    // and the fallback is said the same three ways.
    let mut w = base_world();
    w.pvc_annotations
        .insert("headroom.dev/min-available".into(), "5GB".into());
    let metrics = Metrics::new("n").expect("metrics");
    let e = run(&w, &metrics);
    assert!(
        e.report.decision.grow_to().is_some(),
        "{:?}",
        e.report.decision
    );
    assert!(
        e.report.policy_errors.is_empty(),
        "{:?}",
        e.report.policy_errors
    );
    let status = state::StatusAnnotation::from_report(&e.report, w.now);
    assert_eq!(
        status.fallback.map(|n| n.reason).as_deref(),
        Some("min_available_invalid")
    );
    assert!(crate::events::fallback_notice(&e.report).is_some());
    let text = metrics.encode().expect("encode");
    assert!(
        text.lines()
            .any(|l| l.starts_with("headroom_volume_policy_fallback{")
                && l.contains("reason=\"min_available_invalid\"")
                && l.ends_with(" 1")),
        "{text}"
    );
}
