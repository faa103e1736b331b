//! Realistic `VolumeReport`s, built by hand the way the agent fills them, and a small parser for
//! the Prometheus text format so tests assert on series, not substrings.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use headroom::agent::{MeasuredBy, VolumeReport};
use headroom::decide::restart::Restart;
use headroom::decide::{
    Action, ActionResult, BlockReason, ClaimState, Decision, FailureCause, GrowKind, Measurement,
    ResizeState, SlotActivity, SlotRetention, State, Verdict, VolumeRole, WalDetail, WalHealth,
    WalSources,
};
use headroom::policy::merge::Source;

pub const GI: u64 = 1 << 30;

pub fn at(s: &str) -> jiff::Timestamp {
    s.parse().expect("timestamp")
}

/// A 10 GiB data volume of a Postgres cluster, 85 % used, growth blocked because archiving fails.
pub fn pg_data(ns: &str, pvc: &str) -> VolumeReport {
    VolumeReport {
        logical: None,
        namespace: ns.into(),
        pvc: pvc.into(),
        pv: format!("pvc-{pvc}-0a1b"),
        node: "node-a".into(),
        storage_class: Some("fast-ssd".into()),
        role: VolumeRole::Data,
        tablespace: None,
        instance: None,
        postgres_cluster: Some("orders".into()),
        mount_path: PathBuf::from(format!("/var/lib/kubelet/pods/x/volumes/{pvc}")),
        fs_class: "owned_block".into(),
        shared_with: vec![],
        measurement: Some(Measurement {
            capacity_bytes: 10 * GI,
            used_bytes: 8 * GI + GI / 2,
            available_bytes: GI + GI / 2,
            inodes_total: 655_360,
            inodes_used: 1_234,
        }),
        measured_by: MeasuredBy::Statfs,
        measured_at: Some(at("2025-03-01T10:00:00Z")),
        not_measured: None,
        limit_bytes: Some(50 * GI),
        provenance: BTreeMap::from([
            ("enabled".to_string(), Source::PvcAnnotation),
            ("limit".to_string(), Source::ConfigMapDefault),
        ]),
        policy_errors: vec![],
        policy_warnings: vec![],
        future_history: None,
        claim: ClaimState {
            request_bytes: 10 * GI,
            capacity_bytes: 10 * GI,
            resize: ResizeState::Idle,
        },
        decision: Decision {
            joins: None,
            verdict: Verdict::Blocked {
                reason: BlockReason::WalArchiveUnhealthy,
            },
            target_bytes: Some(12 * GI),
            budget_left: 2,
            next_slot: None,
            next_window: None,
            seconds_to_full: Some(3_600.0),
            seconds_to_limit: Some(86_400.0),
            predicted: false,
            emergency: false,
            next_grow: None,
            held_until: None,
            budget: Default::default(),
            effective_bytes: None,
            notes: vec![],
            fallback: None,
            lower_to: None,
            restart: None,
        },
        wal: Some(WalHealth {
            archive_configured: Some(true),
            archive_healthy: Some(false),
            pending_files: Some(340),
            oldest_pending_seconds: Some(5_400),
            inactive_slots: Some(vec![SlotRetention {
                name: "old_replica".into(),
                retained_bytes: 3 * GI,
                activity: SlotActivity::Inactive,
                restart_lsn: None,
            }]),
            sources: WalSources {
                volume: true,
                sql: true,
            },
            observed_at: Some(at("2025-03-01T10:00:00Z")),
            detail: WalDetail {
                wal_bytes: Some(6 * GI),
                problems: vec!["last archive failure is newer than last success".into()],
                ..WalDetail::default()
            },
        }),
        last_action: None,
        fill_rate: None,
        quota: None,
        pool: None,
        enforced: None,
        evaluated_at: at("2025-03-01T10:00:00Z"),
    }
}

/// A plain volume with nothing known beyond the claim: not measured, no policy, no WAL.
pub fn unmeasured(ns: &str, pvc: &str) -> VolumeReport {
    let mut r = pg_data(ns, pvc);
    r.role = VolumeRole::Other;
    r.postgres_cluster = None;
    r.storage_class = None;
    r.measurement = None;
    r.measured_by = MeasuredBy::None;
    r.measured_at = None;
    r.limit_bytes = None;
    r.wal = None;
    r.decision = Decision {
        budget_left: 3,
        ..Decision::bare(Verdict::NoAction {
            state: State::Balanced,
        })
    };
    r
}

/// A data volume whose resize waits for a remount, its pod's eviction refused by its budget.
pub fn awaiting_remount(ns: &str, pvc: &str) -> VolumeReport {
    let mut r = pg_data(ns, pvc);
    r.claim.resize = ResizeState::Failed {
        cause: FailureCause::NeedsRemount,
        detail: "FileSystemResizePending".into(),
    };
    r.decision = Decision {
        restart: Some(Restart::Refused {
            count: 1,
            retry_at: at("2025-03-01T10:01:00Z"),
            switchover: false,
        }),
        ..Decision::bare(Verdict::Blocked {
            reason: BlockReason::AwaitingRemount,
        })
    };
    r
}

/// A data volume under `enforcement: recommend` whose grow to 12Gi waits for a person.
pub fn recommended(ns: &str, pvc: &str) -> VolumeReport {
    let mut r = pg_data(ns, pvc);
    let made = at("2025-03-01T10:00:00Z");
    r.decision.verdict = Verdict::Grow {
        to: 12 * GI,
        kind: GrowKind::Grow,
    };
    r.enforced = Some(headroom::decide::recommend::Enforced {
        recommendation: Some(headroom::decide::recommend::Recommendation {
            id: "3f1c9a0b27de".into(),
            kind: GrowKind::Grow,
            predicted: false,
            from_bytes: 10 * GI,
            to_bytes: 12 * GI,
            full_at: None,
            used_percent: Some(90),
            made_at: made,
            stale_at: made + jiff::SignedDuration::from_hours(1),
        }),
        hold: true,
        ..Default::default()
    });
    r
}

/// A WAL volume at its limit, growing (the agent is about to resize it); its previous grow
/// landed an hour ago.
pub fn wal_at_limit(ns: &str, pvc: &str) -> VolumeReport {
    let mut r = pg_data(ns, pvc);
    r.role = VolumeRole::Wal;
    r.last_action = Some(Action {
        action: None,
        at: at("2025-03-01T08:58:00Z"),
        kind: GrowKind::EmergencyGrow,
        from: 8 * GI,
        to: 10 * GI,
        node: "node-a".into(),
        fs_before: Some(8 * GI),
        landed: Some(at("2025-03-01T09:00:00Z")),
        landed_unwatched: false,
        result: Some(ActionResult::Succeeded),
        instance: Some("orders-1".into()),
        volume_type: Some(VolumeRole::Wal),
        tablespace: None,
        evicted: None,
        through_owner: false,

        predicted: false,
        used_percent: None,
        bytes_per_second: None,
        approval: None,
    });
    r.limit_bytes = Some(10 * GI);
    r.decision.verdict = Verdict::Grow {
        to: 12 * GI,
        kind: GrowKind::EmergencyGrow,
    };
    r.decision.target_bytes = None;
    r.wal = Some(WalHealth {
        archive_configured: Some(true),
        archive_healthy: Some(true),
        pending_files: Some(0),
        oldest_pending_seconds: None,
        inactive_slots: Some(vec![]),
        ..WalHealth::default()
    });
    r
}

/// One sample of the text format: name, labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Parses the Prometheus text format (the subset `prometheus::TextEncoder` writes).
pub fn parse(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("sample has a value");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            v => v.parse().expect("numeric value"),
        };
        let (name, labels) = match series.split_once('{') {
            None => (series.to_string(), BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("closing brace");
                (name.to_string(), parse_labels(body))
            }
        };
        out.push(Sample {
            name,
            labels,
            value,
        });
    }
    out
}

fn parse_labels(mut body: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    while !body.is_empty() {
        let (key, rest) = body.split_once("=\"").expect("label=\"");
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next().expect("closing quote") {
                (i, '"') => break i,
                (_, '\\') => match chars.next().expect("escape").1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        labels.insert(key.to_string(), value);
        body = rest[end + 1..].trim_start_matches(',');
    }
    labels
}

/// The samples named `name` whose labels include every pair of `with`.
pub fn find<'a>(samples: &'a [Sample], name: &str, with: &[(&str, &str)]) -> Vec<&'a Sample> {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            with.iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect()
}

/// The one value of `name` with these labels; panics when absent or ambiguous.
pub fn value(samples: &[Sample], name: &str, with: &[(&str, &str)]) -> f64 {
    let found = find(samples, name, with);
    assert_eq!(found.len(), 1, "{name} {with:?}: {found:?}");
    found[0].value
}
