//! One volume, one decision: gathers the engine's inputs from the objects and the measurement.
//! No I/O: the loop fetches, this resolves and decides.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;

use super::kubelet::KubeletVolume;
use super::{MeasuredBy, VolumeReport};
use crate::decide::{
    Action, ClaimState, Inputs, Measurement, PolicyInput, ResizeState, VolumeFacts, VolumeRole,
    WalHealth, decide,
};
use crate::k8s::{claim, roles, state};
use crate::policy::Policy;
use crate::policy::merge::{CentralPolicy, effective_with_limits};
use crate::policy::validate::{Context, Finding, validate};
use crate::probe::{Volume, VolumeMode};
use crate::quantity;

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
}

pub struct Evaluation {
    pub report: VolumeReport,
    pub policy: Option<Policy>,
    pub history: Vec<Action>,
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

/// Resize failures the claim's own status cannot show: a resize whose only trace is request >
/// capacity (no condition to date it) is dated by our history; and a filesystem still well under
/// the claim's capacity long after our last resize has not followed it.
fn stuck_or_not_expanded(
    mut claim: ClaimState,
    history: &[Action],
    measured: Option<Measurement>,
    timeout: SignedDuration,
    now: Timestamp,
) -> ClaimState {
    let last = history.iter().max_by_key(|a| a.at);
    match (&claim.resize, last) {
        (ResizeState::InProgress { since: None }, Some(a))
            if a.to == claim.request_bytes && now - timeout > a.at =>
        {
            claim.resize = ResizeState::Failed {
                detail: format!(
                    "resize to {} in flight for more than {timeout:#} (since {})",
                    quantity::format(a.to),
                    a.at
                ),
            };
        }
        (ResizeState::Idle, Some(a)) if now - timeout > a.at => {
            if let Some(m) = measured.filter(|m| {
                (m.capacity_bytes as f64) < claim.capacity_bytes as f64 * NOT_EXPANDED_RATIO
            }) {
                claim.resize = ResizeState::Failed {
                    detail: format!(
                        "filesystem not expanded: statfs shows {} of the claim's {}",
                        quantity::format(m.capacity_bytes),
                        quantity::format(claim.capacity_bytes)
                    ),
                };
            }
        }
        _ => {}
    }
    claim
}

/// Filesystems keep a few percent for metadata; under this share of the claim, it did not grow.
const NOT_EXPANDED_RATIO: f64 = 0.9;

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
    let claim = stuck_or_not_expanded(claim, &history, s.volume.measurement, s.resize_timeout, now);
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
    let validation = validate(&merged.spec, &ctx);
    errors.extend(validation.errors.iter().cloned());
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

    let block_mode = s.volume.mode == VolumeMode::Block || claim::is_block_mode(s.pvc);
    // statfs first; the kubelet's (older) numbers only when statfs could not see the volume.
    let fallback = s.kubelet.filter(|k| k.fresh(now));
    let (measurement, measured_by) = match (s.volume.measurement, fallback) {
        (Some(m), _) => (Some(m), MeasuredBy::Statfs),
        (None, Some(k)) if !block_mode => (Some(k.measurement), MeasuredBy::Kubelet),
        _ => (None, MeasuredBy::None),
    };
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
    });
    if let (MeasuredBy::Kubelet, Some(k)) = (measured_by, fallback) {
        let at = k.at.map(|t| t.to_string()).unwrap_or_default();
        decision.notes.push(format!(
            "statfs could not measure the volume: using the kubelet's numbers from {at}"
        ));
    }
    let report = VolumeReport {
        namespace: s.pvc.metadata.namespace.clone().unwrap_or_default(),
        pvc: s.pvc.metadata.name.clone().unwrap_or_default(),
        pv: s.volume.pv.clone().unwrap_or_default(),
        node: s.node.to_string(),
        storage_class: class_name,
        role,
        postgres_cluster: cluster,
        mount_path: s.volume.path.clone(),
        fs_class: s.volume.class.as_str().to_string(),
        shared_with: s.volume.shared_with.clone(),
        measurement,
        measured_by,
        limit_bytes: policy.as_ref().map(|p| p.limit),
        provenance: merged.provenance,
        policy_errors: if wants_enabled { errors } else { Vec::new() },
        policy_warnings: validation.warnings,
        claim,
        decision,
        wal,
        last_action: history.iter().max_by_key(|a| a.at).cloned(),
        evaluated_at: now,
    };
    Evaluation {
        report,
        policy,
        history,
    }
}
