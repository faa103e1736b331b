use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::decide::budget::WINDOW;
use crate::decide::{
    ActionResult, BlockReason, BudgetView, ClaimState, Decision, GrowKind, Measurement,
    ResizeState, State, VolumeRole,
};
use crate::quantity::GI;
use crate::report::{MeasuredBy, VolumeReport};

fn ts(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

fn now() -> Timestamp {
    ts("2026-03-01T12:00:00Z")
}

fn action(at: Timestamp, from_gi: u64, to_gi: u64) -> Action {
    Action {
        node: "worker-2".into(),
        ..Action::new(at, GrowKind::Grow, from_gi * GI, to_gi * GI)
    }
}

fn pvc_json(annotations: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "pgdata-pg-main-1",
            "namespace": "db",
            "resourceVersion": "48213",
            "labels": { "cnpg.io/cluster": "pg-main", "cnpg.io/pvcRole": "PG_DATA" },
            "annotations": annotations,
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "fast-ssd",
            "volumeName": "pvc-8f1c2a3b",
            "resources": { "requests": { "storage": "20Gi" } },
        },
        "status": { "phase": "Bound", "capacity": { "storage": "20Gi" } },
    })
}

fn pvc(annotations: Value) -> PersistentVolumeClaim {
    serde_json::from_value(pvc_json(annotations)).expect("test PVC")
}

#[test]
fn history_missing_or_blank_is_empty() {
    assert_eq!(read_history(&pvc(json!({}))).expect("ok"), vec![]);
    assert_eq!(
        read_history(&pvc(json!({ "headroom.dev/history": "" }))).expect("ok"),
        vec![]
    );
}

#[test]
fn history_reads_and_sorts() {
    let text = r#"[{"at":"2026-03-01T10:00:00Z","kind":"EmergencyGrow","from":21474836480,"to":26843545600,"node":"worker-2"},{"at":"2026-02-28T09:00:00Z","kind":"Grow","from":10737418240,"to":21474836480}]"#;
    let h = read_history(&pvc(json!({ HISTORY: text }))).expect("ok");
    assert_eq!(h.len(), 2);
    assert_eq!(h[0].at, ts("2026-02-28T09:00:00Z"));
    assert_eq!(h[0].node, "");
    assert_eq!(h[1].kind, GrowKind::EmergencyGrow);
    assert_eq!(h[1].to, 25 * GI);
}

#[test]
fn corrupt_history_is_an_error_naming_claim_and_annotation() {
    for bad in [
        "[{\"at\":\"2026-03-01T10:00:00Z\",\"kind\":\"Grow\"", // truncated
        "[{\"at\":\"yesterday\",\"kind\":\"Grow\",\"from\":1,\"to\":2}]",
        "[{\"at\":\"2026-03-01T10:00:00Z\",\"kind\":\"Grow\",\"from\":\"10Gi\",\"to\":2}]",
        "{}",
    ] {
        let msg = read_history(&pvc(json!({ HISTORY: bad })))
            .expect_err(bad)
            .to_string();
        assert!(
            msg.starts_with(
                "PVC db/pgdata-pg-main-1: annotation headroom.dev/history is not valid"
            ),
            "{msg}"
        );
    }
}

#[test]
fn history_encoding_is_compact_with_byte_numbers() {
    let h = vec![action(ts("2026-03-01T10:00:00Z"), 20, 25)];
    let text = serde_json::to_string(&h).expect("encode");
    assert_eq!(
        text,
        r#"[{"at":"2026-03-01T10:00:00Z","kind":"Grow","from":21474836480,"to":26843545600,"node":"worker-2"}]"#
    );
}

#[test]
fn append_keeps_the_fifty_newest() {
    // Issue 24 (the RFC's history of 50): older entries are kept up to 50 in all, where the
    // window and the five newest older ones (at most 32) were kept before.
    // 60 actions a day apart (all but the newest are older than 24 h) plus 3 within the window.
    let mut h: Vec<Action> = (1..=60)
        .map(|d: u64| {
            action(
                now() - SignedDuration::from_hours(24 * d as i64 + 1),
                d,
                d + 1,
            )
        })
        .collect();
    h.push(action(now() - SignedDuration::from_hours(23), 9, 10));
    h.push(action(now() - SignedDuration::from_hours(1), 10, 11));
    let out = append(&h, action(now(), 11, 12), now());
    assert_eq!(out.len(), 50);
    assert!(out.windows(2).all(|w| w[0].at <= w[1].at));
    // The 47 kept older ones are the most recent (1..=47 days old).
    assert_eq!(out[0].at, now() - SignedDuration::from_hours(24 * 47 + 1));
    assert_eq!(out[49], action(now(), 11, 12));
    // Fewer than 50: every one stays, 24 h old or not.
    let edge = append(&[action(now() - WINDOW, 1, 2)], action(now(), 2, 3), now());
    assert_eq!(edge.len(), 2);
}

#[test]
fn fifty_full_entries_fit_the_annotation_budget() {
    let full = |i: i64| Action {
        action: None,
        at: now() - SignedDuration::from_hours(i),
        kind: GrowKind::EmergencyGrow,
        from: 999 * 1024 * GI,
        to: 1000 * 1024 * GI,
        node: "ip-10-200-123-45.eu-central-1.compute.internal".into(),
        fs_before: Some(999 * 1024 * GI),
        landed: Some(now() - SignedDuration::from_hours(i) + SignedDuration::from_secs(95)),
        landed_unwatched: true,
        result: Some(ActionResult::Succeeded),
        instance: Some("pg-analytics-production-12".into()),
        volume_type: Some(VolumeRole::Tablespace),
        tablespace: Some("timeseries_archive".into()),
        evicted: Some(now() - SignedDuration::from_hours(i) + SignedDuration::from_secs(900)),
        through_owner: true,

        predicted: true,
        used_percent: crate::decide::Percent::of(99.96),
        bytes_per_second: Some(u64::MAX),
        approval: Some(crate::decide::Approval {
            id: "0123456789ab".into(),
            at: now() - SignedDuration::from_hours(i),
            by: Some("m".repeat(crate::decide::APPROVER_CHARS)),
        }),
    };
    let h: Vec<Action> = (1..=60).map(full).collect();
    let out = append(&h, full(0), now());
    assert_eq!(out.len(), MAX_ENTRIES);
    let text = serde_json::to_string(&out).expect("encode");
    // An eighth of the 256 KiB all annotations of an object share.
    assert!(text.len() < 32 * 1024, "{} bytes", text.len());
    assert_eq!(
        read_history(&pvc(json!({ HISTORY: text }))).expect("reads back"),
        out
    );
}

#[test]
fn history_entries_carry_result_instance_and_volume_type() {
    let text = r#"[{"at":"2026-03-01T10:00:00Z","kind":"ScheduledGrow","from":10737418240,"to":12884901888,"node":"worker-2","result":"Failed","instance":"pg-main-1","volume_type":"tablespace","tablespace":"ts1"}]"#;
    let h = read_history(&pvc(json!({ HISTORY: text }))).expect("ok");
    assert_eq!(h[0].result, Some(ActionResult::Failed));
    assert_eq!(h[0].instance.as_deref(), Some("pg-main-1"));
    assert_eq!(h[0].volume_type, Some(VolumeRole::Tablespace));
    assert_eq!(h[0].tablespace.as_deref(), Some("ts1"));
    assert_eq!(serde_json::to_string(&h).expect("encode"), text);
}

proptest! {
    #[test]
    fn append_bounds_and_keeps_the_window(
        older in proptest::collection::vec(24 * 3600 + 1..90 * 24 * 3600i64, 0..40),
        recent in proptest::collection::vec(-300..24 * 3600i64, 0..40),
        new_ago in 0..60i64,
    ) {
        let at = |ago: i64| now() - SignedDuration::from_secs(ago);
        let history: Vec<Action> = older
            .iter()
            .chain(&recent)
            .enumerate()
            .map(|(i, ago)| action(at(*ago), i as u64, i as u64 + 1))
            .collect();
        let new = action(at(new_ago), 1000, 1001);
        let out = append(&history, new.clone(), now());
        prop_assert!(out.len() <= MAX_ENTRIES);
        prop_assert!(out.windows(2).all(|w| w[0].at <= w[1].at));
        prop_assert!(out.contains(&new));
        let in_window: Vec<&Action> = history
            .iter()
            .chain([&new])
            .filter(|a| a.at > now() - WINDOW)
            .collect();
        let expected = (history.len() + 1).min(MAX_ENTRIES);
        prop_assert_eq!(out.len(), expected);
        // maxActionsPerDay is at most 10: a window of up to 50 entries always survives whole.
        if in_window.len() <= MAX_ENTRIES {
            for a in &in_window {
                prop_assert!(out.contains(a), "lost {:?}", a);
            }
        }
    }
}

fn report(verdict: Verdict, measurement: Option<Measurement>) -> VolumeReport {
    VolumeReport {
        logical: None,
        namespace: "db".into(),
        pvc: "pgdata-pg-main-1".into(),
        pv: "pvc-8f1c2a3b".into(),
        node: "worker-2".into(),
        storage_class: Some("fast-ssd".into()),
        role: VolumeRole::Data,
        tablespace: None,
        instance: None,
        postgres_cluster: Some("pg-main".into()),
        mount_path: "/var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pvc-8f1c2a3b/mount".into(),
        fs_class: "owned_block".into(),
        shared_with: vec![],
        measurement,
        measured_by: MeasuredBy::Statfs,
        measured_at: None,
        not_measured: None,
        limit_bytes: Some(100 * GI),
        provenance: BTreeMap::new(),
        policy_errors: vec![],
        policy_warnings: vec![],
        future_history: None,
        claim: ClaimState {
            request_bytes: 20 * GI,
            capacity_bytes: 20 * GI,
            resize: ResizeState::Idle,
        },
        decision: Decision {
            joins: None,
            verdict,
            target_bytes: Some(25 * GI),
            budget_left: 2,
            next_slot: Some(ts("2026-03-02T10:00:00Z")),
            next_window: None,
            seconds_to_full: None,
            seconds_to_limit: None,
            predicted: false,
            emergency: false,
            next_grow: None,
            held_until: None,
            budget: BudgetView {
                actions_last_24h: 2,
                reserved_for_emergency: 1,
                available_for_planned: 1,
                available_for_emergency: 2,
                resets_at: Some(ts("2026-03-02T10:00:00Z")),
            },
            effective_bytes: None,
            notes: vec![],
            fallback: None,
            lower_to: None,
            restart: None,
        },
        wal: None,
        last_action: None,
        fill_rate: None,
        quota: None,
        pool: None,
        enforced: None,
        evaluated_at: now(),
    }
}

fn measured(used_gi: u64) -> Option<Measurement> {
    Some(Measurement {
        capacity_bytes: 20 * GI,
        used_bytes: used_gi * GI,
        available_bytes: (20 - used_gi) * GI,
        inodes_total: 1_310_720,
        inodes_used: 2_000,
    })
}

#[test]
fn status_from_reports() {
    let grow = StatusAnnotation::from_report(
        &report(
            Verdict::Grow {
                to: 25 * GI,
                kind: GrowKind::Grow,
            },
            measured(17),
        ),
        now(),
    );
    assert_eq!(grow.state, "Growing");
    assert_eq!(grow.last_decision, "Grow 20Gi -> 25Gi");
    let mut predicted = report(
        Verdict::Grow {
            to: 25 * GI,
            kind: GrowKind::Grow,
        },
        measured(17),
    );
    predicted.decision.predicted = true;
    let predicted = StatusAnnotation::from_report(&predicted, now());
    assert_eq!(predicted.last_decision, "Grow (predicted) 20Gi -> 25Gi");
    assert_eq!(grow.effective_size_bytes, 20 * GI);
    assert_eq!(grow.used_percent, Some(85.0));
    assert_eq!(grow.blocked_reason, None);

    let blocked = StatusAnnotation::from_report(
        &report(
            Verdict::Blocked {
                reason: BlockReason::WalArchiveUnhealthy,
            },
            measured(19),
        ),
        now(),
    );
    assert_eq!(blocked.state, "Blocked");
    assert_eq!(
        blocked.blocked_reason.as_deref(),
        Some("wal_archive_unhealthy")
    );
    assert_eq!(blocked.last_decision, "blocked: wal_archive_unhealthy");

    let idle = StatusAnnotation::from_report(
        &report(
            Verdict::NoAction {
                state: State::Balanced,
            },
            None,
        ),
        now(),
    );
    assert_eq!(idle.state, "Balanced");
    assert_eq!(idle.used_percent, None);
    let text = serde_json::to_string(&idle).expect("encode");
    // Issue 24 added the RFC's status model: this claim's size apart from the effective size,
    // the budget breakdown and conditions.
    assert_eq!(
        text,
        concat!(
            r#"{"node":"worker-2","updatedAt":"2026-03-01T12:00:00Z","sizeBytes":21474836480,"effectiveSizeBytes":21474836480,"targetSizeBytes":26843545600,"limitBytes":107374182400,"state":"Balanced","lastDecision":"no action: Balanced","budgetLeft":2,"nextSlot":"2026-03-02T10:00:00Z","#,
            r#""budget":{"actionsLast24h":2,"reservedForEmergency":1,"availableForPlanned":1,"availableForEmergency":2,"budgetResetsAt":"2026-03-02T10:00:00Z"},"#,
            r#""conditions":[{"type":"Emergency","status":"False","reason":"BelowCriticalLine"},{"type":"Converged","status":"True","reason":"Balanced"},"#,
            r#"{"type":"GrowthBlocked","status":"False","reason":"NotBlocked"},{"type":"BudgetAvailable","status":"True","reason":"ActionsLeft"}]}"#
        )
    );
    // An annotation written before issue 24 still reads, its effectiveSizeBytes as the size.
    let old: StatusAnnotation = serde_json::from_str(
        r#"{"node":"worker-2","updatedAt":"2026-03-01T12:00:00Z","effectiveSizeBytes":21474836480,"state":"Balanced","lastDecision":"no action: Balanced","budgetLeft":2}"#,
    )
    .expect("old status");
    assert_eq!(
        (old.size_bytes, old.budget, old.conditions.len()),
        (None, None, 0)
    );
}

#[test]
fn status_carries_the_rfcs_emergency_state_budget_and_effective_size() {
    // Convergent, past the critical line, the emergency budget spent: Emergency, not Blocked.
    let mut r = report(
        Verdict::Blocked {
            reason: BlockReason::BudgetExhausted,
        },
        measured(19),
    );
    r.decision.emergency = true;
    r.decision.budget = BudgetView {
        actions_last_24h: 4,
        reserved_for_emergency: 1,
        available_for_planned: 0,
        available_for_emergency: 0,
        resets_at: Some(ts("2026-03-02T03:00:05Z")),
    };
    // A new replica of this volume should start at its group's 30Gi, not this claim's 20Gi.
    r.decision.effective_bytes = Some(30 * GI);
    let s = StatusAnnotation::from_report(&r, now());
    assert_eq!(s.state, "Emergency");
    assert_eq!(s.blocked_reason.as_deref(), Some("budget_exhausted"));
    assert_eq!(
        (s.size_bytes, s.effective_size_bytes, s.target_size_bytes),
        (Some(20 * GI), 30 * GI, Some(25 * GI))
    );
    let b = s.budget.expect("budget");
    assert_eq!(
        (
            b.actions_last_24h,
            b.available_for_planned,
            b.available_for_emergency
        ),
        (4, 0, 0)
    );
    assert_eq!(b.budget_resets_at, Some(ts("2026-03-02T03:00:05Z")));
    let conds: Vec<(&str, &str, &str)> = s
        .conditions
        .iter()
        .map(|c| (c.kind.as_str(), c.status.as_str(), c.reason.as_str()))
        .collect();
    assert_eq!(
        conds,
        [
            ("Emergency", "True", "PastCriticalLine"),
            ("Converged", "False", "Emergency"),
            ("GrowthBlocked", "True", "budget_exhausted"),
            ("BudgetAvailable", "False", "Exhausted"),
        ]
    );
    // Growing out of the emergency says Growing; planned slots gone, an emergency's left.
    r.decision.verdict = Verdict::Grow {
        to: 22 * GI,
        kind: GrowKind::EmergencyGrow,
    };
    r.decision.budget.available_for_emergency = 1;
    let s = StatusAnnotation::from_report(&r, now());
    assert_eq!(s.state, "Growing");
    assert_eq!(
        s.conditions.last().map(|c| c.reason.as_str()),
        Some("EmergencyOnly")
    );
    // Threshold mode (no target): no Emergency or Converged condition.
    r.decision.target_bytes = None;
    r.decision.emergency = false;
    let s = StatusAnnotation::from_report(&r, now());
    let kinds: Vec<&str> = s.conditions.iter().map(|c| c.kind.as_str()).collect();
    assert_eq!(kinds, ["GrowthBlocked", "BudgetAvailable"]);
}

#[test]
fn differs_ignores_time_and_small_used_moves() {
    let base = StatusAnnotation::from_report(
        &report(
            Verdict::NoAction {
                state: State::Balanced,
            },
            measured(10),
        ),
        now(),
    );
    let mut later = base.clone();
    later.updated_at = now() + SignedDuration::from_mins(5);
    later.used_percent = Some(50.9);
    assert!(!later.differs(&base));
    later.used_percent = Some(51.0);
    assert!(later.differs(&base));
    later.used_percent = None;
    assert!(later.differs(&base));
    let mut other = base.clone();
    other.state = "NeedsGrow".into();
    assert!(other.differs(&base));
    let mut other = base.clone();
    other.budget_left = 1;
    assert!(other.differs(&base));
}

#[test]
fn differs_ignores_quota_usage_moving_within_the_room() {
    use crate::decide::quota::{QuotaLine, QuotaView};
    let view = |hard: u64, used: u64| {
        let line = QuotaLine {
            quota: "storage".into(),
            resource: "requests.storage".into(),
            hard_bytes: hard,
            used_bytes: Some(used),
        };
        QuotaView::of(&[line], false)
    };
    let mut base = StatusAnnotation::from_report(
        &report(
            Verdict::NoAction {
                state: State::Balanced,
            },
            measured(10),
        ),
        now(),
    );
    base.quota = view(100 * GI, 40 * GI);
    // Another claim of the namespace grew: the same room, less of it. Not a write.
    let mut other = base.clone();
    other.quota = view(100 * GI, 60 * GI);
    assert!(!other.differs(&base));
    // Room running out, the limit changing, the quota going away, a refusal: each a write.
    other.quota = view(100 * GI, 100 * GI);
    assert!(other.differs(&base));
    other.quota = view(200 * GI, 60 * GI);
    assert!(other.differs(&base));
    other.quota = None;
    assert!(other.differs(&base));
    other.quota = base.quota.clone().map(|q| QuotaView { refused: true, ..q });
    assert!(other.differs(&base));
}

#[test]
fn differs_ignores_the_writer_and_small_target_moves() {
    let base = StatusAnnotation::from_report(
        &report(
            Verdict::NoAction {
                state: State::Balanced,
            },
            measured(10),
        ),
        now(),
    );
    let target = base.target_size_bytes.expect("a target");
    // Another node's agent on the same RWX claim: the same situation, not a write.
    let mut other = base.clone();
    other.node = "worker-9".into();
    assert!(!other.differs(&base));
    // A target that follows usage by a few bytes is not a change; one past 1 % is.
    other.target_size_bytes = Some(target + target / 200);
    assert!(!other.differs(&base));
    other.target_size_bytes = Some(target + target / 50);
    assert!(other.differs(&base));
    other.target_size_bytes = None;
    assert!(other.differs(&base));
}

#[test]
fn status_round_trips_and_corrupt_is_an_error() {
    assert_eq!(read_status(&pvc(json!({}))).expect("ok"), None);
    let s = StatusAnnotation::from_report(
        &report(
            Verdict::Blocked {
                reason: BlockReason::BudgetExhausted,
            },
            measured(18),
        ),
        now(),
    );
    let text = serde_json::to_string(&s).expect("encode");
    assert_eq!(
        read_status(&pvc(json!({ STATUS: text }))).expect("ok"),
        Some(s)
    );
    let msg = read_status(&pvc(json!({ STATUS: "{\"node\":" })))
        .expect_err("corrupt")
        .to_string();
    assert!(
        msg.starts_with("PVC db/pgdata-pg-main-1: annotation headroom.dev/status is not valid"),
        "{msg}"
    );
}

#[test]
fn grow_patch_is_one_conditional_merge_patch() {
    let history = append(&[], action(now(), 20, 25), now());
    let status = StatusAnnotation::from_report(
        &report(
            Verdict::Grow {
                to: 25 * GI,
                kind: GrowKind::Grow,
            },
            measured(17),
        ),
        now(),
    );
    let patch = grow_patch("48213", 25 * GI, &history, &status).expect("patch");
    assert_eq!(patch["metadata"]["resourceVersion"], "48213");
    assert_eq!(patch["spec"]["resources"]["requests"]["storage"], "25Gi");

    let mut doc = pvc_json(json!({ "kept.example.com/note": "x" }));
    json_patch::merge(&mut doc, &patch);
    let patched: PersistentVolumeClaim = serde_json::from_value(doc).expect("still a PVC");
    assert_eq!(
        crate::k8s::storage_request(&patched).expect("ok"),
        Some(25 * GI)
    );
    assert_eq!(read_history(&patched).expect("ok"), history);
    assert_eq!(read_status(&patched).expect("ok"), Some(status.clone()));
    let ann = patched.metadata.annotations.as_ref().expect("annotations");
    assert_eq!(ann["kept.example.com/note"], "x");

    let sp = status_patch(None, &status, None).expect("patch");
    assert!(sp["metadata"].get("resourceVersion").is_none());
    assert!(sp.get("spec").is_none());
    let sp = status_patch(Some("7"), &status, None).expect("patch");
    assert_eq!(sp["metadata"]["resourceVersion"], "7");
    assert!(sp["metadata"]["annotations"].get(HISTORY).is_none());
    // A landing time goes back with the history, in the same conditional write.
    let sp = status_patch(Some("7"), &status, Some(&history)).expect("patch");
    let written: Vec<Action> = serde_json::from_str(
        sp["metadata"]["annotations"][HISTORY]
            .as_str()
            .expect("history text"),
    )
    .expect("history json");
    assert_eq!(written, history);
}

/// Issue 36: the WAL block names each slot not known to be in use with its `restart_lsn`, and
/// the position its retention was measured from; slots in use are left out, and positions
/// moving alone are not a write.
#[test]
fn the_wal_block_reads_like_pg_replication_slots_and_moves_write_nothing() {
    use crate::decide::{
        Lsn, PositionSource, ReplicationSlot, SlotActivity, SlotRetention, WalHealth, WalPosition,
    };
    let mut r = report(
        Verdict::NoAction {
            state: State::Balanced,
        },
        measured(10),
    );
    assert_eq!(StatusAnnotation::from_report(&r, now()).wal, None);
    let mut wal = WalHealth {
        inactive_slots: Some(vec![SlotRetention {
            name: "cdc".into(),
            retained_bytes: 3 * GI,
            activity: SlotActivity::Inactive,
            restart_lsn: Some(Lsn(0x1_0000_0000)),
        }]),
        ..WalHealth::default()
    };
    wal.detail.position = Some(WalPosition {
        lsn: Lsn(0x1_C000_0000),
        source: PositionSource::NewestSegment,
    });
    wal.detail.slots = Some(vec![ReplicationSlot {
        slot_name: "standby".into(),
        slot_type: "physical".into(),
        restart_lsn: Some(Lsn(0x1_C000_0000)),
        retained_bytes: Some(0),
        activity: SlotActivity::Active,
    }]);
    r.wal = Some(wal.clone());
    let base = StatusAnnotation::from_report(&r, now());
    let block = serde_json::to_value(&base).expect("json")["wal"].clone();
    assert_eq!(
        block,
        json!({
            "position": {"lsn": "1/C0000000", "source": "newest_segment"},
            "slots": [{"name": "cdc", "restartLsn": "1/0", "retainedBytes": 3 * GI}],
        })
    );
    // The WAL moves on: no write. Another slot, or another source: a write.
    let mut moved = wal.clone();
    moved.detail.position = Some(WalPosition {
        lsn: Lsn(0x2_0000_0000),
        source: PositionSource::NewestSegment,
    });
    if let Some(s) = moved.inactive_slots.as_mut() {
        s[0].retained_bytes = 4 * GI;
    }
    r.wal = Some(moved.clone());
    assert!(!StatusAnnotation::from_report(&r, now()).differs(&base));
    moved.detail.position = moved.detail.position.map(|p| WalPosition {
        source: PositionSource::Checkpoint,
        ..p
    });
    r.wal = Some(moved);
    assert!(StatusAnnotation::from_report(&r, now()).differs(&base));
    wal.inactive_slots = Some(vec![]);
    r.wal = Some(wal);
    let none_idle = StatusAnnotation::from_report(&r, now());
    assert!(none_idle.differs(&base));
    assert_eq!(
        serde_json::to_value(&none_idle).expect("json")["wal"],
        json!({"position": {"lsn": "1/C0000000", "source": "newest_segment"}})
    );
}

#[test]
fn deadlines_are_bucketed_so_a_steady_fill_rewrites_the_status_a_few_times() {
    let mut r = report(
        Verdict::NoAction {
            state: State::Balanced,
        },
        measured(10),
    );
    r.decision.seconds_to_limit = Some(10.0 * 86_400.0);
    // Full in 2 h, then one scan every 10 s until full: each moves the deadline.
    let mut writes = 0;
    let mut last: Option<StatusAnnotation> = None;
    for scan in 0..720 {
        r.decision.seconds_to_full = Some(7_200.0 - 10.0 * f64::from(scan));
        let s = StatusAnnotation::from_report(&r, now());
        if last.as_ref().is_none_or(|l| s.differs(l)) {
            writes += 1;
            last = Some(s);
        }
    }
    // 2h, 1h, 30m, 10m, 5m, 1m, 0: one write each, not 720.
    assert_eq!(writes, 7);
    let s = last.expect("written");
    assert_eq!(s.full_in_seconds, Some(0));
    assert_eq!(s.limit_in_seconds, Some(7 * 86_400));
    // Unknown is absent, not 0.
    r.decision.seconds_to_full = None;
    let json = serde_json::to_value(StatusAnnotation::from_report(&r, now())).expect("json");
    assert!(json.get("fullInSeconds").is_none(), "{json}");
    assert_eq!(json["limitInSeconds"], 7 * 86_400);
}

#[test]
fn a_restore_says_what_it_is_sized_to_and_nothing_when_there_is_none() {
    let mut r = report(
        Verdict::Grow {
            to: 40 * GI,
            kind: GrowKind::GroupGrow,
        },
        measured(10),
    );
    let json = serde_json::to_value(StatusAnnotation::from_report(&r, now())).expect("json");
    assert!(json.get("restoring").is_none(), "{json}");
    r.decision.notes.push(crate::decide::Note::Restoring {
        source: Some(40 * GI),
    });
    let s = StatusAnnotation::from_report(&r, now());
    assert_eq!(
        s.restoring.as_deref(),
        Some("restoring a base backup: sized to its source (40Gi), not from the copy's fill rate")
    );
    let before = StatusAnnotation::from_report(
        &report(
            Verdict::Grow {
                to: 40 * GI,
                kind: GrowKind::GroupGrow,
            },
            measured(10),
        ),
        now(),
    );
    assert!(s.differs(&before), "a restore starting is worth a write");
}
