//! One volume, one decision: the engine's inputs from the claim's objects and the measurement
//! ([`prepare`]), then, with the WAL health the shell gathered for the policy it resolved, the
//! decision and its report ([`Prepared::finish`]). No I/O: the loop fetches, this resolves and
//! decides, each once per volume and scan.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolumeClaim, Pod, ResourceQuota};
use k8s_openapi::api::storage::v1::StorageClass;

use super::KubeletVolume;
use super::inflight::{self, Seen};
use super::logical::{self, Shared};
use crate::decide::pool::PoolView;
use crate::decide::quota::{self, QuotaView};
use crate::decide::rate::FillRate;
use crate::decide::restart::Refusal;
use crate::decide::{
    Action, ClaimState, Decision, Inputs, PolicyInput, ResizeState, VolumeFacts, VolumeRole,
    WalHealth, decide,
};
use crate::decide::{Note, budget};
use crate::k8s::{claim, roles, state};
use crate::policy::merge::{CentralPolicy, Merged, Source};
use crate::policy::validate::{Context, Finding, validate};
use crate::policy::{Policy, drivers};
use crate::probe::{Volume, VolumeMode};
use crate::report::{FutureHistory, MeasuredBy, VolumeReport};

/// Everything known about one mounted claim at one scan.
pub struct Subject<'a> {
    pub volume: &'a Volume,
    pub pod: &'a Pod,
    pub pvc: &'a PersistentVolumeClaim,
    /// Every claim the pod mounts (to tell whether WAL has its own volume).
    pub pod_claims: &'a [&'a PersistentVolumeClaim],
    pub storage_class: Option<&'a StorageClass>,
    /// The claim's Namespace (its policy annotations), when the watch holds it.
    pub namespace: Option<&'a Namespace>,
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
    /// The namespace's ResourceQuotas.
    pub quotas: &'a [std::sync::Arc<ResourceQuota>],
    /// The API server refused this claim's last grow as over quota, and the namespace's quotas
    /// have not changed since.
    pub quota_refused: bool,
    /// The claim's logical volume and its other members, when it belongs to one.
    pub logical: Option<&'a crate::k8s::logical::Peers>,
    /// Since when this agent has measured the volume: a landing first seen by then may have
    /// happened any time before, and is no resize lead time.
    pub watching_since: Timestamp,
    /// The last refused eviction of the pod for this claim's resize in flight
    /// (`offlineExpansion: evict`), for its backoff.
    pub eviction_refused: Option<Refusal>,
    /// The owning cluster as the shell read it for this decision (`resizeThrough: owner`: read
    /// only for a grow it would write, and while its operator has yet to apply one).
    pub owner: Option<&'a crate::k8s::owner::Seen>,
    /// This node as its watch holds it: its labels select a pool's segment, its annotations
    /// carry TopoLVM's free bytes.
    pub node_object: Option<&'a Node>,
    /// The class's `CSIStorageCapacity` objects, when the shell read them for this decision
    /// (only for one that would grow).
    pub pool: &'a super::pool::PoolRead,
}

#[derive(Debug)]
pub struct Evaluation {
    pub report: VolumeReport,
    pub policy: Option<Policy>,
    pub history: Vec<Action>,
    /// `history`'s newest action was first seen landed (or failed) by this evaluation: the
    /// history is written back with the time and result, so the claim keeps how long its
    /// resizes take and what became of them.
    pub history_changed: bool,
    /// The logical action a history entry written for this evaluation belongs to; `None` when
    /// the claim keeps its own budget.
    pub action: Option<crate::decide::logical::ActionId>,
}

/// The volume's Postgres role, whether its instance keeps WAL on it, and its cluster. An invalid
/// role annotation is an error for the caller to report.
fn postgres_facts(s: &Subject) -> Result<(VolumeRole, bool, Option<String>), String> {
    match roles::postgres_volume(s.pvc, Some(s.pod)).map_err(|e| e.to_string())? {
        Some(pg) => {
            let wal_on_data =
                pg.role == VolumeRole::Data && roles::wal_on_data(s.pod, s.pod_claims);
            Ok((pg.role, wal_on_data, pg.cluster.or(pg.instance)))
        }
        None => Ok((VolumeRole::Other, false, None)),
    }
}

/// The namespace's quotas on this claim: the largest request they admit (none after a refusal
/// the quotas have not changed since) and what the status shows. A quota that cannot be read is
/// an error: the claim is not grown blind into a 403.
fn quota_of(s: &Subject, errors: &mut Vec<Finding>) -> (Option<u64>, Option<QuotaView>) {
    let read = crate::k8s::quota::lines_for(s.quotas.iter().map(|q| q.as_ref()), s.pvc)
        .and_then(|lines| Ok((crate::k8s::quota::charged(s.pvc)?, lines)));
    match read {
        Ok((charged, lines)) => {
            let ceiling = if s.quota_refused {
                Some(charged)
            } else {
                quota::ceiling(&lines, charged)
            };
            (ceiling, QuotaView::of(&lines, s.quota_refused))
        }
        Err(e) => {
            errors.push(Finding {
                field: "resourceQuota".into(),
                message: e.to_string(),
            });
            (None, None)
        }
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

/// The claim's CSI driver: the PV's as the kubelet recorded it beside the mount
/// (`vol_data.json`), else the StorageClass's provisioner.
fn driver<'a>(s: &'a Subject) -> Option<&'a str> {
    s.volume
        .driver
        .as_deref()
        .or_else(|| s.storage_class.map(|c| c.provisioner.as_str()))
}

/// What a volume resolves to before the engine runs: its claim state and history (with what the
/// latest measurement says of the resize in flight), its Postgres role and its policy. The shell
/// gathers WAL health for [`Prepared::policy`], then [`Prepared::finish`] decides.
pub struct Prepared {
    claim: ClaimState,
    history: Vec<Action>,
    ignored: Option<FutureHistory>,
    seen: Option<Seen>,
    history_changed: bool,
    fill_rate: Option<FillRate>,
    block_mode: bool,
    capacity_unknown: bool,
    role: VolumeRole,
    wal_on_data: bool,
    cluster: Option<String>,
    class_name: Option<String>,
    provenance: BTreeMap<String, Source>,
    warnings: Vec<Finding>,
    errors: Vec<Finding>,
    wants_enabled: bool,
    policy: Option<Policy>,
    /// The largest request the namespace's quotas admit, and what the status shows of them.
    quota_ceiling: Option<u64>,
    quota: Option<QuotaView>,
    pool: Option<PoolView>,
    shared: Option<Shared>,
    /// The data directory holds `backup_label`, as the shell read it on a data volume whose WAL
    /// health is not gathered (its WAL has a volume of its own).
    restoring: bool,
}

/// [`prepare`] then [`Prepared::finish`]: the whole evaluation when WAL health is at hand.
pub fn evaluate(s: &Subject, wal: Option<WalHealth>, now: Timestamp) -> Evaluation {
    prepare(s, now).finish(s, wal, now)
}

/// The claim's size and resize state as its own objects say them; an unreadable size is an
/// error, and the claim then counts as empty and idle.
fn claim_of(s: &Subject, now: Timestamp, merged: &Merged, errors: &mut Vec<Finding>) -> ClaimState {
    let bounds = claim::Bounds {
        resize: s.resize_timeout,
        node_offline: merged.node_offline(),
    };
    claim::claim_state(s.pvc, now, bounds).unwrap_or_else(|e| {
        errors.push(Finding {
            field: "spec.resources.requests.storage".into(),
            message: e.to_string(),
        });
        ClaimState {
            request_bytes: 0,
            capacity_bytes: 0,
            resize: ResizeState::Idle,
        }
    })
}

fn history_of(
    s: &Subject,
    now: Timestamp,
    errors: &mut Vec<Finding>,
) -> (Vec<Action>, Option<FutureHistory>) {
    let history = state::read_history(s.pvc).unwrap_or_else(|e| {
        errors.push(Finding {
            field: state::HISTORY.into(),
            message: e.to_string(),
        });
        Vec::new()
    });
    split_future(history, now)
}

/// Resolves everything the engine needs but WAL health.
pub fn prepare(s: &Subject, now: Timestamp) -> Prepared {
    let mut errors: Vec<Finding> = Vec::new();
    let class_name = s
        .pvc
        .spec
        .as_ref()
        .and_then(|sp| sp.storage_class_name.clone());
    let merged = super::claim_policy(
        s.pvc,
        class_name.as_deref(),
        s.storage_class,
        s.namespace,
        s.central,
    );
    let claim = claim_of(s, now, &merged, &mut errors);
    let (mut history, ignored) = history_of(s, now, &mut errors);
    let block_mode = s.volume.mode == VolumeMode::Block || claim::is_block_mode(s.pvc);
    let last_write = history.iter().map(|a| a.at).max();
    let seen = inflight::usable(s.volume.measurement, s.kubelet, block_mode, last_write, now);
    let landed = inflight::stamp_landing(
        &mut history,
        seen.as_ref(),
        claim.capacity_bytes,
        s.watching_since,
    );
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
    let (quota_ceiling, quota) = quota_of(s, &mut errors);
    let mut pool_warnings = Vec::new();
    let read = (s.node_object, s.pool);
    let pool = super::pool::resolve(s.storage_class, read, &mut errors, &mut pool_warnings);
    let ctx = Context {
        current_size: Some(claim.current_bytes()).filter(|b| *b > 0),
        wal_has_own_volume: (role == VolumeRole::Data).then_some(!wal_on_data),
        driver_rule: driver(s).and_then(drivers::rule),
        min_available_source: merged.min_available_source(),
    };
    let mut validation = validate(&merged.spec, &ctx);
    errors.extend(validation.errors.iter().cloned());
    let shared = match (validation.policy.as_ref(), s.logical) {
        (Some(p), Some(peers)) => {
            let uid = s.pvc.metadata.uid.as_deref().unwrap_or_default();
            let own = (history.as_slice(), claim.request_bytes);
            logical::shared(peers, own, p, (uid, now), &mut errors)
        }
        _ => None,
    };
    validation
        .warnings
        .extend(ignored.map(|h| h.finding(state::HISTORY, budget::CLOCK_SKEW)));
    validation.warnings.extend(pool_warnings);
    Prepared {
        policy: validation.policy.filter(|_| errors.is_empty()),
        // Opt-in: a policy that does not say `enabled: true` is off, and its other problems are
        // not worth an Event on every claim of the cluster; a claim pvc-autoresizer would resize
        // is in.
        wants_enabled: merged.wants_enabled(),
        provenance: merged.provenance,
        warnings: validation.warnings,
        claim,
        history,
        ignored,
        seen,
        history_changed: landed || failed,
        fill_rate,
        block_mode,
        capacity_unknown,
        role,
        wal_on_data,
        cluster,
        class_name,
        errors,
        quota_ceiling,
        quota,
        pool,
        shared,
        restoring: false,
    }
}

impl Prepared {
    /// The claim's valid effective policy, if it has one (what WAL health is gathered for).
    pub fn policy(&self) -> Option<&Policy> {
        self.policy.as_ref()
    }

    /// The volume's Postgres role, and whether its instance keeps WAL on it.
    pub fn postgres_role(&self) -> (VolumeRole, bool) {
        (self.role, self.wal_on_data)
    }

    /// Whether the shell found a base backup being restored in the volume's data directory
    /// (WAL health says so itself where it is gathered).
    pub fn restoring(mut self, restoring: bool) -> Prepared {
        self.restoring = restoring;
        self
    }

    fn facts(&self, s: &Subject, wal: Option<&WalHealth>, now: Timestamp) -> VolumeFacts {
        VolumeFacts {
            role: self.role,
            wal_on_data: self.wal_on_data,
            shared: s.volume.class.is_shared(),
            expandable: s
                .storage_class
                .and_then(|c| c.allow_volume_expansion)
                .unwrap_or(false),
            block_mode: self.block_mode,
            unmeasured: self.seen.is_none() && !self.block_mode,
            capacity_unknown: self.capacity_unknown,
            node_draining: s.node_draining,
            restoring: self.restoring || wal.is_some_and(|w| w.detail.restoring_backup),
            attributes_changing: claim::attributes_changing(s.pvc),
            // Sharing, the volume's size is its members' (this claim's included).
            group_size: match &self.shared {
                Some(sh) => Some(sh.logical.size),
                None => s.group_size,
            },
            quota_ceiling: self.quota_ceiling,
            pool: self.pool.as_ref().map(PoolView::room),
            restart: super::restart::facts(s.pod, s.logical, s.eviction_refused, now),
            owner: None,
        }
    }

    /// Decides, with the WAL health the shell gathered (if any), and reports.
    pub fn finish(self, s: &Subject, wal: Option<WalHealth>, now: Timestamp) -> Evaluation {
        let disabled = Policy::with_limit(0);
        let input = match (&self.policy, self.wants_enabled) {
            (Some(p), _) => PolicyInput::Valid(p),
            (None, true) => PolicyInput::Invalid,
            (None, false) => PolicyInput::Valid(&disabled),
        };
        // statfs first; the kubelet's (older) numbers only when statfs could not see the volume.
        let measurement = self.seen.map(|m| m.measurement);
        let owner = super::owner::problem(
            s.owner,
            self.policy.as_ref(),
            &self.history,
            self.shared.as_ref().map(|sh| &sh.logical),
        );
        let facts = VolumeFacts {
            owner: owner.as_ref().map(|(p, _)| *p),
            ..self.facts(s, wal.as_ref(), now)
        };
        let mut decision = decide(&Inputs {
            policy: input,
            measurement: measurement.unwrap_or_default(),
            claim: &self.claim,
            history: &self.history,
            wal: wal.as_ref(),
            facts,
            now,
            fill_rate: self.fill_rate,
            logical: self.shared.as_ref().map(|sh| &sh.logical),
        });
        if let Some((_, message)) = owner {
            decision.notes.push(Note::Owner(message));
        }
        if let Some(m) = self.seen.filter(|m| m.by == MeasuredBy::Kubelet) {
            decision.notes.push(Note::KubeletNumbers { at: m.at });
        } else if s.volume.measurement.is_none()
            && !self.block_mode
            && s.kubelet.is_some_and(|k| k.fresh(now))
        {
            decision.notes.push(Note::KubeletNumbersStale);
        }
        self.report(s, decision, wal, now)
    }

    fn report(
        self,
        s: &Subject,
        decision: Decision,
        wal: Option<WalHealth>,
        now: Timestamp,
    ) -> Evaluation {
        let measured_by = self.seen.map_or(MeasuredBy::None, |m| m.by);
        let role = self.role;
        let own = (
            s.pvc.metadata.name.as_deref().unwrap_or_default(),
            self.claim.request_bytes,
        );
        let logical = self
            .shared
            .as_ref()
            .map(|sh| sh.view(own, decision.blocked_reason(), now));
        let action = self
            .shared
            .map(|sh| decision.joins.clone().unwrap_or(sh.new_action));
        let enforced = super::enforce::enforced(
            s.pvc,
            self.policy.as_ref(),
            &decision,
            self.seen.map(|m| m.measurement).as_ref(),
            (self.claim.request_bytes, &self.history),
            now,
        );
        let report = VolumeReport {
            namespace: s.pvc.metadata.namespace.clone().unwrap_or_default(),
            pvc: s.pvc.metadata.name.clone().unwrap_or_default(),
            pv: s.volume.pv.clone().unwrap_or_default(),
            node: s.node.to_string(),
            storage_class: self.class_name,
            role,
            tablespace: roles::tablespace(s.pvc).filter(|_| role == VolumeRole::Tablespace),
            instance: s.pod.metadata.name.clone(),
            postgres_cluster: self.cluster,
            mount_path: s.volume.path.clone(),
            fs_class: s.volume.class.as_str().to_string(),
            shared_with: s.volume.shared_with.clone(),
            measurement: self.seen.map(|m| m.measurement),
            measured_by,
            measured_at: self.seen.map(|m| m.at),
            not_measured: s
                .volume
                .unmeasured
                .filter(|_| measured_by == MeasuredBy::None),
            limit_bytes: self.policy.as_ref().map(|p| p.limit),
            provenance: self.provenance,
            policy_errors: if self.wants_enabled {
                self.errors
            } else {
                Vec::new()
            },
            policy_warnings: self.warnings,
            future_history: self.ignored,
            claim: self.claim,
            decision,
            wal,
            last_action: self.history.iter().max_by_key(|a| a.at).cloned(),
            fill_rate: self.fill_rate,
            quota: self.quota,
            pool: self.pool,
            logical,
            enforced,
            evaluated_at: now,
        };
        Evaluation {
            report,
            policy: self.policy,
            history: self.history,
            history_changed: self.history_changed,
            action,
        }
    }
}
