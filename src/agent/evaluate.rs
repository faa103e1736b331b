//! One volume, one decision: gathers the engine's inputs from the objects and the measurement.
//! No I/O: the loop fetches, this resolves and decides.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;

use super::inflight;
use super::kubelet::KubeletVolume;
use super::{MeasuredBy, VolumeReport};
use crate::decide::rate::FillRate;
use crate::decide::{
    Action, BlockReason, ClaimState, Decision, Inputs, PolicyInput, ResizeState, VolumeFacts,
    VolumeRole, WalHealth, decide,
};
use crate::decide::{Note, budget};
use crate::k8s::{claim, roles, state};
use crate::policy::Policy;
use crate::policy::merge::{CentralPolicy, effective_with_limits};
use crate::policy::validate::{Context, Finding, validate};
use crate::probe::{Volume, VolumeMode};
use crate::report::FutureHistory;

/// Everything known about one mounted claim at one scan.
pub struct Subject<'a> {
    pub volume: &'a Volume,
    pub pod: &'a Pod,
    pub pvc: &'a PersistentVolumeClaim,
    /// Every claim the pod mounts (to tell whether WAL has its own volume).
    pub pod_claims: &'a [&'a PersistentVolumeClaim],
    pub storage_class: Option<&'a StorageClass>,
    pub central: &'a CentralPolicy,
    pub node: &'a str,
    pub node_draining: bool,
    pub resize_timeout: SignedDuration,
    /// The largest request among the claim's group (see `k8s::roles::group_key`), if grouped.
    pub group_size: Option<u64>,
    /// The kubelet's numbers for this claim, if it reported any.
    pub kubelet: Option<KubeletVolume>,
    /// The volume's fill rate (bytes per second) from its recent samples, when known.
    pub fill_rate: Option<f64>,
}

pub struct Evaluation {
    pub report: VolumeReport,
    pub policy: Option<Policy>,
    pub history: Vec<Action>,
    /// `history`'s newest action was first seen landed (or failed) by this evaluation: the
    /// history is written back with the time and result, so the claim keeps how long its
    /// resizes take and what became of them.
    pub history_changed: bool,
}

fn annotations(pvc_or_class: Option<&BTreeMap<String, String>>) -> BTreeMap<String, String> {
    pvc_or_class.cloned().unwrap_or_default()
}

/// The volume's Postgres role, whether its instance keeps WAL on it, and its cluster. An invalid
/// role annotation is an error for the caller to report.
pub fn postgres_facts(s: &Subject) -> Result<(VolumeRole, bool, Option<String>), String> {
    match roles::postgres_volume(s.pvc, Some(s.pod)).map_err(|e| e.to_string())? {
        Some(pg) => {
            let wal_on_data =
                pg.role == VolumeRole::Data && roles::wal_on_data(s.pod, s.pod_claims);
            Ok((pg.role, wal_on_data, pg.cluster.or(pg.instance)))
        }
        None => Ok((VolumeRole::Other, false, None)),
    }
}

/// Splits off history entries dated beyond the clock-skew allowance: no action happened then, so
/// they are not counted (they would block the claim until that date).
fn split_future(history: Vec<Action>, now: Timestamp) -> (Vec<Action>, Option<FutureHistory>) {
    let (future, valid): (Vec<Action>, Vec<Action>) =
        history.into_iter().partition(|a| budget::is_future(a, now));
    let ignored = future
        .iter()
        .map(|a| a.at)
        .max()
        .map(|latest| FutureHistory {
            entries: future.len(),
            latest,
        });
    (valid, ignored)
}

pub fn evaluate(s: &Subject, wal: Option<WalHealth>, now: Timestamp) -> Evaluation {
    let ns = s.pvc.metadata.namespace.as_deref().unwrap_or("");
    let pvc_name = format!("{ns}/{}", s.pvc.metadata.name.as_deref().unwrap_or(""));
    let mut errors: Vec<Finding> = Vec::new();
    let claim = claim::claim_state(s.pvc, now, s.resize_timeout).unwrap_or_else(|e| {
        errors.push(Finding {
            field: "spec.resources.requests.storage".into(),
            message: e.to_string(),
        });
        ClaimState {
            request_bytes: 0,
            capacity_bytes: 0,
            resize: ResizeState::Idle,
        }
    });
    let history = state::read_history(s.pvc).unwrap_or_else(|e| {
        errors.push(Finding {
            field: state::HISTORY.into(),
            message: e.to_string(),
        });
        Vec::new()
    });
    let (mut history, ignored) = split_future(history, now);
    let block_mode = s.volume.mode == VolumeMode::Block || claim::is_block_mode(s.pvc);
    let last_write = history.iter().map(|a| a.at).max();
    let seen = inflight::usable(s.volume.measurement, s.kubelet, block_mode, last_write, now);
    let landed = inflight::stamp_landing(&mut history, seen.as_ref());
    let fill_rate = s.fill_rate.map(|bytes_per_second| FillRate {
        bytes_per_second,
        resize_lead: inflight::learned_lead(&history),
    });
    let claim = inflight::resize_state(claim, &history, seen.as_ref(), s.resize_timeout, now);
    let failed = inflight::stamp_failure(&mut history, &claim);
    // Bound (it has a volume) yet no size reported: nothing to grow from, nothing to compare with.
    let capacity_unknown = claim::storage_capacity(s.pvc).is_ok_and(|c| c.is_none())
        && (claim::is_bound(s.pvc) || s.volume.pv.is_some());
    let (role, wal_on_data, cluster) = postgres_facts(s).unwrap_or_else(|message| {
        errors.push(Finding {
            field: "headroom.dev/postgres-role".into(),
            message,
        });
        (VolumeRole::Other, false, None)
    });

    let class_name = s
        .pvc
        .spec
        .as_ref()
        .and_then(|sp| sp.storage_class_name.clone());
    let class_annotations = annotations(
        s.storage_class
            .and_then(|c| c.metadata.annotations.as_ref()),
    );
    // topolvm users may set the ceiling as the claim's own `spec.resources.limits.storage`.
    let spec_limit = s
        .pvc
        .spec
        .as_ref()
        .and_then(|sp| sp.resources.as_ref())
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("storage"))
        .map(|q| q.0.as_str());
    let merged = effective_with_limits(
        &pvc_name,
        &annotations(s.pvc.metadata.annotations.as_ref()),
        class_name.as_deref().map(|n| (n, &class_annotations)),
        spec_limit,
        s.central,
    );
    let ctx = Context {
        current_size: Some(claim.current_bytes()).filter(|b| *b > 0),
        wal_has_own_volume: (role == VolumeRole::Data).then_some(!wal_on_data),
    };
    let mut validation = validate(&merged.spec, &ctx);
    errors.extend(validation.errors.iter().cloned());
    validation
        .warnings
        .extend(ignored.map(|h| h.finding(state::HISTORY, budget::CLOCK_SKEW)));
    // Opt-in: a policy that does not say `enabled: true` is off, and its other problems are not
    // worth an Event on every claim of the cluster; a claim pvc-autoresizer would resize is in.
    let wants_enabled = merged.wants_enabled();
    let policy = validation.policy.filter(|_| errors.is_empty());
    let disabled = Policy::with_limit(0);
    let input = match (&policy, wants_enabled) {
        (Some(p), _) => PolicyInput::Valid(p),
        (None, true) => PolicyInput::Invalid,
        (None, false) => PolicyInput::Valid(&disabled),
    };

    // statfs first; the kubelet's (older) numbers only when statfs could not see the volume.
    let measurement = seen.map(|m| m.measurement);
    let measured_by = seen.map_or(MeasuredBy::None, |m| m.by);
    let facts = VolumeFacts {
        role,
        wal_on_data,
        shared: s.volume.class.is_shared(),
        expandable: s
            .storage_class
            .and_then(|c| c.allow_volume_expansion)
            .unwrap_or(false),
        block_mode,
        unmeasured: measurement.is_none() && !block_mode,
        capacity_unknown,
        node_draining: s.node_draining,
        group_size: s.group_size,
    };
    let mut decision = decide(&Inputs {
        policy: input,
        measurement: measurement.unwrap_or_default(),
        claim: &claim,
        history: &history,
        wal: wal.as_ref(),
        facts,
        now,
        fill_rate,
    });
    if let Some(m) = seen.filter(|m| m.by == MeasuredBy::Kubelet) {
        decision.notes.push(Note::KubeletNumbers { at: m.at });
    } else if s.volume.measurement.is_none()
        && !block_mode
        && s.kubelet.is_some_and(|k| k.fresh(now))
    {
        decision.notes.push(Note::KubeletNumbersStale);
    }
    let report = VolumeReport {
        namespace: s.pvc.metadata.namespace.clone().unwrap_or_default(),
        pvc: s.pvc.metadata.name.clone().unwrap_or_default(),
        pv: s.volume.pv.clone().unwrap_or_default(),
        node: s.node.to_string(),
        storage_class: class_name,
        role,
        tablespace: roles::tablespace(s.pvc).filter(|_| role == VolumeRole::Tablespace),
        instance: s.pod.metadata.name.clone(),
        postgres_cluster: cluster,
        mount_path: s.volume.path.clone(),
        fs_class: s.volume.class.as_str().to_string(),
        shared_with: s.volume.shared_with.clone(),
        measurement,
        measured_by,
        measured_at: seen.map(|m| m.at),
        not_measured: s
            .volume
            .unmeasured
            .filter(|_| measured_by == MeasuredBy::None),
        limit_bytes: policy.as_ref().map(|p| p.limit),
        provenance: merged.provenance,
        policy_errors: if wants_enabled { errors } else { Vec::new() },
        policy_warnings: validation.warnings,
        future_history: ignored,
        claim,
        decision,
        wal,
        last_action: history.iter().max_by_key(|a| a.at).cloned(),
        fill_rate,
        evaluated_at: now,
    };
    Evaluation {
        report,
        policy,
        history,
        history_changed: landed || failed,
    }
}

/// [`evaluate`], with a panic contained: a bug tripped by one claim's objects leaves that claim
/// blocked (`internal_error`, counted, logged with the panic's message) and the scan goes on.
pub fn guarded(
    s: &Subject,
    wal: Option<WalHealth>,
    now: Timestamp,
    metrics: &crate::metrics::Metrics,
) -> Evaluation {
    contain(s, now, metrics, || evaluate(s, wal, now))
}

/// Runs one claim's evaluation `f`; a panic in it becomes an `internal_error` evaluation.
pub fn contain(
    s: &Subject,
    now: Timestamp,
    metrics: &crate::metrics::Metrics,
    f: impl FnOnce() -> Evaluation,
) -> Evaluation {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(eval) => eval,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|m| m.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic with a non-text payload".to_string());
            let ns = s.pvc.metadata.namespace.clone().unwrap_or_default();
            let pvc = s.pvc.metadata.name.clone().unwrap_or_default();
            tracing::error!(pvc = %format!("{ns}/{pvc}"), panic = %message, "evaluating the claim panicked; it is left alone");
            metrics.internal_error();
            internal_error(s, ns, pvc, message, now)
        }
    }
}

fn internal_error(
    s: &Subject,
    namespace: String,
    pvc: String,
    message: String,
    now: Timestamp,
) -> Evaluation {
    let decision = Decision {
        verdict: crate::decide::Verdict::Blocked {
            reason: BlockReason::InternalError,
        },
        target_bytes: None,
        budget_left: 0,
        next_slot: None,
        next_window: None,
        seconds_to_full: None,
        predicted: false,
        emergency: false,
        budget: Default::default(),
        effective_bytes: None,
        notes: vec![Note::InternalError(message)],
        fallback: None,
    };
    let report = VolumeReport {
        namespace,
        pvc,
        pv: s.volume.pv.clone().unwrap_or_default(),
        node: s.node.to_string(),
        storage_class: None,
        role: VolumeRole::Other,
        tablespace: None,
        instance: None,
        postgres_cluster: None,
        mount_path: s.volume.path.clone(),
        fs_class: s.volume.class.as_str().to_string(),
        shared_with: s.volume.shared_with.clone(),
        measurement: s.volume.measurement,
        measured_by: if s.volume.measurement.is_some() {
            MeasuredBy::Statfs
        } else {
            MeasuredBy::None
        },
        measured_at: s.volume.measurement.map(|_| now),
        not_measured: s.volume.unmeasured,
        limit_bytes: None,
        provenance: BTreeMap::new(),
        policy_errors: Vec::new(),
        policy_warnings: Vec::new(),
        future_history: None,
        claim: ClaimState {
            request_bytes: 0,
            capacity_bytes: 0,
            resize: ResizeState::Idle,
        },
        decision,
        wal: None,
        last_action: None,
        fill_rate: None,
        evaluated_at: now,
    };
    Evaluation {
        report,
        policy: None,
        history: Vec::new(),
        history_changed: false,
    }
}
