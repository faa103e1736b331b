//! One volume's work within a scan: resolve the claim, gather WAL health, decide once, act,
//! and retry on a conflicting writer; it runs as its own task so a slow volume holds only itself.

use std::collections::HashMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, ResourceQuota};
use kube::{Api, Client};

use super::act::{Actor, Applied};
use super::contain::contain;
use super::evict::{Memos, claim_key};
use super::kubelet_stats::KubeletVolume;
use super::measure::Armed;
use super::pgconn::Credentials;
use super::samples::Samples;
use super::shutdown::Shutdown;
use super::{AgentConfig, VolumeReport};
use crate::decide::WalHealth;
use crate::events::Events;
use crate::http::AdminState;
use crate::policy::merge::CentralPolicy;
use crate::probe::{self, Volume};
use crate::resolve::pool::PoolRead;
use crate::resolve::trigger::Trigger;
use crate::resolve::{Evaluation, Subject, inflight, prepare};

mod pool;

/// A conflicting writer (another agent on an RWX claim, an old pod during a move) gets at most
/// this many fresh reads and decisions per scan.
const CONFLICT_RETRIES: usize = 3;

/// What one volume's work needs, shared by the scan and the tasks it starts.
pub(super) struct Work {
    pub(super) cfg: AgentConfig,
    pub(super) client: Client,
    pub(super) events: Events,
    pub(super) notifier: crate::notify::Notifier,
    pub(super) admin: Arc<AdminState>,
    pub(super) shutdown: Shutdown,
    pub(super) prober: probe::Prober,
    pub(super) retried: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Each evaluated volume's trigger and hold (by mount path), for the fast measurement loop.
    pub(super) triggers: std::sync::Mutex<HashMap<std::path::PathBuf, Armed>>,
    /// Each volume's recent usage, from scans and the fast loop: its fill rate.
    pub(super) samples: Arc<Samples>,
    /// What earlier scans saw of each data directory's replication slots.
    pub(super) slots: std::sync::Mutex<crate::postgres::slots::Tracker>,
    /// Claims whose grow the API server refused as over quota: the namespace's quota versions
    /// then, and when. No grow is tried again until those versions change (or [`REFUSAL_HOLD`]
    /// has passed, in case the quota watch missed a change), never every interval.
    pub(super) refusals: std::sync::Mutex<HashMap<String, (String, tokio::time::Instant)>>,
    /// When this agent began measuring: a resize asked for earlier was not watched landing.
    pub(super) started: jiff::Timestamp,
    /// Pods evicted to finish a resize, and evictions refused (`offlineExpansion: evict`).
    pub(super) evictions: Memos,
}

/// The longest a quota refusal stands without the quotas changing.
const REFUSAL_HOLD: std::time::Duration = std::time::Duration::from_secs(15 * 60);

impl Work {
    pub(super) async fn volume(
        &self,
        ctx: &VolumeCtx,
        mut pvc: PersistentVolumeClaim,
        now: Timestamp,
    ) -> VolumeReport {
        let ns = pvc.metadata.namespace.clone().unwrap_or_default();
        let name = pvc.metadata.name.clone().unwrap_or_default();
        let key = format!("{ns}/{name}");
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &ns);
        let actor = Actor {
            api: api.clone(),
            events: &self.events,
            notifier: &self.notifier,
            metrics: self.admin.metrics(),
            shutdown: &self.shutdown,
            node: &self.cfg.node,
            dry_run: self.cfg.dry_run,
            timeout: self.cfg.api_timeout,
            retried: &self.retried,
            client: self.client.clone(),
            evictions: &self.evictions,
        };
        let mut wal: Option<WalHealth> = None;
        let mut attempt = 0;
        let mut owner = self.owner_awaited(ctx, &pvc).await;
        let mut pool = PoolRead::NotRead;
        loop {
            let claim_refs: Vec<&PersistentVolumeClaim> = ctx
                .claims
                .iter()
                .map(|c| {
                    if c.metadata.name == pvc.metadata.name {
                        &pvc
                    } else {
                        c.as_ref()
                    }
                })
                .collect();
            let subject = Subject {
                volume: &ctx.vol,
                pod: &ctx.pod,
                pvc: &pvc,
                pod_claims: &claim_refs,
                storage_class: ctx.class.as_deref(),
                namespace: ctx.namespace.as_deref(),
                central: &ctx.central,
                node: &self.cfg.node,
                node_draining: ctx.draining,
                resize_timeout: self.cfg.resize_timeout,
                group_size: ctx.group_size,
                kubelet: ctx.kubelet,
                fill_rate: ctx.fill_rate,
                quotas: &ctx.quotas,
                quota_refused: self.refused(&key, &ctx.quota_version),
                logical: ctx.logical.as_ref(),
                watching_since: self.started,
                eviction_refused: self.eviction_refused(&key, &pvc),
                owner: owner.as_ref(),
                node_object: ctx.node.as_deref(),
                pool: &pool,
            };
            let eval = self.evaluate(ctx, &subject, &mut wal, now).await;
            // A grow that would be sent is decided again with the class's published capacity
            // read (once): the pool may not hold it.
            if matches!(pool, PoolRead::NotRead)
                && let Some(driver) = pool::wanted(&eval, ctx.class.as_deref())
            {
                pool = pool::read(&self.client, driver, self.cfg.api_timeout).await;
                continue;
            }
            // A grow through the owner is decided again with the owner read (once): it may
            // have been lowered under what headroom set, or be unreadable.
            if owner.is_none()
                && super::act::through_owner(&eval)
                && eval.report.decision.grow_to().is_some()
                && let Some(lv) = ctx.logical.as_ref().map(|p| &p.id)
                && let Some(seen) =
                    super::owner::read(&self.client, &pvc, lv, self.cfg.api_timeout).await
            {
                owner = Some(seen);
                continue;
            }
            attempt += 1;
            self.note_trigger(&ctx.vol.path, &eval, now);
            match actor.apply(&pvc, &eval, owner.as_ref(), now).await {
                Applied::Done => return eval.report,
                Applied::Conflict if attempt < CONFLICT_RETRIES => {
                    match tokio::time::timeout(self.cfg.api_timeout, api.get(&name)).await {
                        Ok(Ok(fresh)) => pvc = fresh,
                        _ => return eval.report,
                    }
                    // The owner may be what changed: read it again for the next decision.
                    owner = None;
                }
                Applied::Conflict => return eval.report,
                Applied::QuotaRefused if attempt < CONFLICT_RETRIES => {
                    self.lock_refusals().insert(
                        key.clone(),
                        (ctx.quota_version.clone(), tokio::time::Instant::now()),
                    );
                }
                Applied::QuotaRefused => return eval.report,
            }
        }
    }

    /// Resolves the claim once, gathers WAL health for the policy it resolved to (once per
    /// scan: a conflict's fresh read reuses it), and decides once.
    async fn evaluate(
        &self,
        ctx: &VolumeCtx,
        subject: &Subject<'_>,
        wal: &mut Option<WalHealth>,
        now: Timestamp,
    ) -> Evaluation {
        let metrics = self.admin.metrics();
        let prepared = match contain(subject, now, metrics, || prepare(subject, now)) {
            Ok(p) => p,
            Err(e) => return *e,
        };
        if wal.is_none() {
            *wal = super::wal::health(
                &self.prober,
                &self.slots,
                subject,
                &prepared,
                &ctx.creds,
                ctx.data_mount.as_deref(),
                now,
            )
            .await;
        }
        let wal = wal.clone();
        let restoring =
            wal.is_none() && super::wal::restoring(&self.prober, subject, &prepared).await;
        let prepared = prepared.restoring(restoring);
        contain(subject, now, metrics, || prepared.finish(subject, wal, now)).unwrap_or_else(|e| *e)
    }

    pub(super) fn lock_refusals(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, (String, tokio::time::Instant)>> {
        self.refusals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether claim `key`'s last grow was refused as over quota and the quotas (at `version`)
    /// have not changed since; a refusal that no longer stands is forgotten.
    fn refused(&self, key: &str, version: &str) -> bool {
        let mut refusals = self.lock_refusals();
        let stands = refusals
            .get(key)
            .is_some_and(|(v, at)| v == version && at.elapsed() < REFUSAL_HOLD);
        if !stands {
            refusals.remove(key);
        }
        stands
    }

    /// The claim's owner, read before deciding once headroom has set its size
    /// ([`crate::resolve::owner::watched`]): a revert is seen at the next scan, not only at the
    /// next grow. `None` otherwise (no GET).
    async fn owner_awaited(
        &self,
        ctx: &VolumeCtx,
        pvc: &PersistentVolumeClaim,
    ) -> Option<crate::k8s::owner::Seen> {
        let lv = &ctx.logical.as_ref()?.id;
        let history = crate::k8s::state::read_history(pvc).ok()?;
        if !crate::resolve::owner::watched(&history) {
            return None;
        }
        super::owner::read(&self.client, pvc, lv, self.cfg.api_timeout).await
    }

    /// The last refused eviction of the pod for the claim's resize in flight, if any.
    fn eviction_refused(
        &self,
        key: &str,
        pvc: &PersistentVolumeClaim,
    ) -> Option<crate::decide::restart::Refusal> {
        let request = crate::k8s::claim::storage_request(pvc).ok().flatten()?;
        self.evictions.get(&claim_key(key, request)).refused
    }

    fn note_trigger(&self, path: &std::path::Path, eval: &Evaluation, now: Timestamp) {
        let learned = inflight::learned_lead(&eval.history);
        let restoring = eval.report.decision.restoring().is_some();
        let trigger = eval
            .policy
            .as_ref()
            .and_then(|p| Trigger::for_policy(p, learned))
            .map(|t| if restoring { t.without_prediction() } else { t })
            .map(|trigger| Armed {
                trigger,
                wake_at: wake_at(eval, now),
            });
        let mut t = self
            .triggers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match trigger {
            Some(trigger) => t.insert(path.to_path_buf(), trigger),
            None => t.remove(path),
        };
    }
}

/// A resize whose filesystem growth is seen but whose `status.capacity` is not
/// ([`inflight::awaits_capacity`]): looked at again this soon.
const LANDING_RECHECK: jiff::SignedDuration = jiff::SignedDuration::from_secs(1);

/// When the fast loop decides on the volume again whatever its numbers: when its hold ends, or
/// soon while its landing waits for `status.capacity` (stamped once both show it).
fn wake_at(eval: &Evaluation, now: Timestamp) -> Option<Timestamp> {
    let landing =
        inflight::awaits_capacity(eval).then(|| crate::decide::budget::plus(now, LANDING_RECHECK));
    match (eval.report.decision.held_until, landing) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The namespace's quotas as names and resourceVersions: changes whenever any of them does.
pub(super) fn quota_version(quotas: &[Arc<ResourceQuota>]) -> String {
    quotas
        .iter()
        .map(|q| {
            format!(
                "{}@{}",
                q.metadata.name.as_deref().unwrap_or(""),
                q.metadata.resource_version.as_deref().unwrap_or("")
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

pub(super) struct VolumeCtx {
    pub(super) vol: Volume,
    pub(super) quotas: Vec<Arc<ResourceQuota>>,
    pub(super) quota_version: String,
    pub(super) pod: Arc<Pod>,
    pub(super) claims: Vec<Arc<PersistentVolumeClaim>>,
    pub(super) class: Option<Arc<k8s_openapi::api::storage::v1::StorageClass>>,
    /// The claim's Namespace as the watch holds it: its name and policy annotations.
    pub(super) namespace: Option<Arc<k8s_openapi::api::core::v1::Namespace>>,
    pub(super) central: Arc<CentralPolicy>,
    pub(super) creds: Arc<Credentials>,
    pub(super) draining: bool,
    /// This node as its watch holds it (labels and annotations: the pool's segment and
    /// TopoLVM's free bytes).
    pub(super) node: Option<Arc<k8s_openapi::api::core::v1::Node>>,
    pub(super) group_size: Option<u64>,
    /// The claim's logical volume and its other members, from the namespace's claim watch.
    pub(super) logical: Option<crate::k8s::logical::Peers>,
    pub(super) kubelet: Option<KubeletVolume>,
    pub(super) fill_rate: Option<f64>,
    /// The pod's Postgres data volume, for a WAL volume's data directory.
    pub(super) data_mount: Option<std::path::PathBuf>,
}
