//! One scan of this node: probe the kubelet's volumes, map them to claims, decide, act. Or, when
//! the fast loop saw volumes cross their triggers, the same for those volumes alone
//! ([`crossed`]).

mod claim;
mod config_keys;
mod crossed;
mod pending;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use tokio::task::JoinHandle;

use super::kubelet_stats::{ByClaim, KubeletStats};
use super::measure::Watchlist;
use super::pgconn::{self, Credentials};
use super::samples::Samples;
use super::shutdown::Shutdown;
use super::work::Work;
use super::world::World;
use super::{AgentConfig, MeasuredBy, VolumeReport};
use crate::events::Events;
use crate::http::AdminState;
use crate::k8s::roles;
use crate::metrics::labels::{ConfigKey, VolumeLabels};
use crate::policy::merge::{CentralPolicy, parse_configmap};
use crate::probe::{self, Volume};
use claim::{Claim, ReclaimTarget, by_pv};
use config_keys::Invalid;

pub struct Scanner {
    work: Arc<Work>,
    reclaimer: crate::reclaim::Reclaimer,
    kubelet: KubeletStats,
    /// Volume work (WAL health over SQL, the PATCH) still running from an earlier scan, by claim:
    /// a blackholed Postgres pod or a slow PATCH holds its own volume, never the scan or the
    /// other volumes. No second task starts for a claim while one runs.
    running: HashMap<String, JoinHandle<VolumeReport>>,
    /// Each claim's last report, standing in while its work is still running. Boxed: a report
    /// is about 1.5 KB, and a map keeps up to half its slots empty (500 claims: 1.5 MiB inline,
    /// 0.8 MiB boxed).
    last: HashMap<String, Box<VolumeReport>>,
    /// What the fast measurement loop watches between scans.
    watchlist: Arc<Watchlist>,
    /// The last full scan's volumes, with the fresher numbers of those decided on since.
    volumes: Vec<Volume>,
    /// The `RestoreTooSmall` Events created for the peers of the groups mounted here.
    pending: pending::PendingClaims,
    /// The ConfigMap keys found invalid, and said so.
    config_keys: config_keys::ConfigKeys,
}

/// Cordoned, or carrying the unschedulable taint that `kubectl drain` leaves.
pub fn node_draining(node: Option<&Node>) -> bool {
    let Some(spec) = node.and_then(|n| n.spec.as_ref()) else {
        return false;
    };
    spec.unschedulable == Some(true)
        || spec
            .taints
            .iter()
            .flatten()
            .any(|t| t.key == "node.kubernetes.io/unschedulable")
}

impl Scanner {
    pub fn new(
        cfg: AgentConfig,
        client: Client,
        (events, notifier): (Events, crate::notify::Notifier),
        admin: Arc<AdminState>,
        shutdown: Shutdown,
        reclaimer: crate::reclaim::Reclaimer,
    ) -> Self {
        let samples = Arc::new(Samples::default());
        Scanner {
            kubelet: KubeletStats::new(cfg.kubelet.clone(), cfg.api_timeout),
            watchlist: Arc::new(Watchlist::new(samples.clone())),
            work: Arc::new(Work {
                prober: probe::Prober::new(cfg.kubelet_root.clone(), cfg.probe_timeout),
                retried: Default::default(),
                triggers: Default::default(),
                slots: Default::default(),
                refusals: Default::default(),
                started: jiff::Timestamp::now(),
                evictions: Default::default(),
                samples,
                cfg,
                client,
                events,
                notifier,
                admin,
                shutdown,
            }),
            reclaimer,
            running: HashMap::new(),
            last: HashMap::new(),
            volumes: Vec::new(),
            pending: Default::default(),
            config_keys: Default::default(),
        }
    }

    /// One scan; an error when the node could not be probed at all (nothing was measured, so
    /// nothing is decided: the caller keeps the last good reports).
    pub async fn scan(
        &mut self,
        world: &mut World,
    ) -> Result<Vec<VolumeReport>, probe::ProbeError> {
        let now = Timestamp::now();
        let probed = self.work.prober.probe().await;
        self.work
            .admin
            .metrics()
            .stuck_calls(self.work.prober.stuck_calls());
        let volumes = probed?;
        let rates = self.record_samples(&volumes);
        // The kubelet is asked only for what statfs could not measure.
        let blind = volumes
            .iter()
            .any(|v| v.measurement.is_none() && v.mode == probe::VolumeMode::Filesystem);
        let decided = self
            .decide(world, &volumes, &rates, Scope { only: None, blind }, now)
            .await;
        self.cross_check(&decided.reports, &decided.kubelet);
        (self.pending).check(world, &decided.groups, &decided.common, &self.work);
        self.reclaim(decided.reclaims, &decided.common).await;
        self.forget_gone(&decided.reports, &volumes, &rates);
        self.volumes = volumes;
        Ok(decided.reports)
    }

    /// Starts the work of each claim mounted here (of the PersistentVolumes in `scope.only`, when
    /// set) and collects what finishes within the interval.
    async fn decide(
        &mut self,
        world: &mut World,
        volumes: &[Volume],
        rates: &HashMap<PathBuf, f64>,
        scope: Scope<'_>,
        now: Timestamp,
    ) -> Decided {
        // Volumes of pods being deleted are left alone: the workload is leaving this node.
        let pods: HashMap<String, Arc<Pod>> = world
            .pods
            .state()
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| Some((p.metadata.uid.clone()?, p)))
            .collect();
        let mounting: Vec<Arc<Pod>> = pods.values().cloned().collect();
        world
            .sync_for(
                &mounting,
                self.work.cfg.claim_watches,
                self.work.cfg.api_timeout,
            )
            .await;
        self.work
            .admin
            .metrics()
            .claim_watches(&world.claim_watches());
        let (central, creds) = self.central_policy(world);
        let kubelet = self.kubelet.get(now, scope.blind).await.clone();
        let common = Common {
            central: Arc::new(central),
            creds: Arc::new(creds),
            draining: node_draining(world.node().as_deref()),
            node: world.node(),
            now,
        };
        let mut started = Vec::new();
        let mut reclaims = Vec::new();
        let mut reports = Vec::new();
        let mut groups = pending::Groups::new();
        for (pv, vols) in by_pv(volumes) {
            if scope.only.is_some_and(|only| !only.contains(pv)) {
                continue;
            }
            let Some(claim) = Claim::of(world, &pods, pv, &vols) else {
                continue;
            };
            reclaims.push(claim.reclaim_target(world));
            if let Some(key) = roles::group_key(&claim.pvc, Some(&claim.pod)) {
                let ns = claim.pvc.metadata.namespace.clone().unwrap_or_default();
                groups.insert((ns, key));
            }
            if let Some(report) = self.collect_running(&claim.key).await {
                // Still busy from an earlier scan: its last word stands, nothing new starts.
                reports.extend(report);
                continue;
            }
            let ctx = claim.ctx(world, volumes, &kubelet, rates, &common);
            let work = self.work.clone();
            let pvc = claim.pvc;
            // All of the scan's tasks exist at once: each stays small (the claim shared, the
            // volume's work boxed when it starts) so 500 of them are not 500 full futures.
            started.push((
                claim.key,
                tokio::spawn(async move {
                    let pvc = (*pvc).clone();
                    Box::pin(work.volume(&ctx, pvc, now)).await
                }),
            ));
        }
        reports.extend(self.collect(started).await);
        Decided {
            reports,
            reclaims,
            common,
            kubelet,
            groups,
        }
    }

    /// Records each measured volume's usage; returns the fill rates the samples give.
    fn record_samples(&self, volumes: &[Volume]) -> HashMap<PathBuf, f64> {
        let measured_at = tokio::time::Instant::now();
        let samples = &self.work.samples;
        let mounted: HashSet<&Path> = volumes.iter().map(|v| v.path.as_path()).collect();
        samples.retain(|p| mounted.contains(p));
        volumes
            .iter()
            .filter_map(|v| {
                let m = v.measurement?;
                let rate = samples.record(&v.path, m.used_bytes, measured_at)?;
                Some((v.path.clone(), rate))
            })
            .collect()
    }

    /// The central policy and the Postgres credentials, from the agent's ConfigMap.
    fn central_policy(&mut self, world: &World) -> (CentralPolicy, Credentials) {
        let cm_name = format!("{}/{}", self.work.cfg.namespace, self.work.cfg.configmap);
        let cm = world.configmap();
        let data = cm.as_ref().and_then(|c| c.data.clone()).unwrap_or_default();
        let central = if data.is_empty() {
            CentralPolicy::default()
        } else {
            parse_configmap(&data, &cm_name)
        };
        let mut bad = Vec::new();
        let sinks = data.get(crate::notify::config::KEY);
        (self.work.notifier).configure(sinks.map(String::as_str));
        if let Some(text) = sinks
            && let Err(e) = crate::notify::config::parse(&cm_name, text)
        {
            bad.push(Invalid {
                key: ConfigKey::Notifications,
                text: text.clone(),
                error: e.to_string(),
            });
        }
        let creds = match data.get(pgconn::KEY) {
            Some(text) => Credentials::parse(&cm_name, text).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "Postgres credentials ignored");
                bad.push(Invalid {
                    key: ConfigKey::Postgres,
                    text: text.clone(),
                    error: e,
                });
                Credentials::default()
            }),
            None => Credentials::default(),
        };
        self.config_keys.report(&self.work, cm.as_deref(), bad);
        (central, creds)
    }

    /// Every volume's work runs at once; the scan waits for it up to one interval, and what is
    /// still running then reports at a later scan.
    async fn collect(
        &mut self,
        started: Vec<(String, JoinHandle<VolumeReport>)>,
    ) -> Vec<VolumeReport> {
        let deadline = tokio::time::Instant::now() + self.work.cfg.interval;
        let mut reports = Vec::new();
        for (key, mut task) in started {
            match tokio::time::timeout_at(deadline, &mut task).await {
                Ok(Ok(report)) => {
                    self.last.insert(key, Box::new(report.clone()));
                    reports.push(report);
                }
                Ok(Err(e)) => tracing::error!(pvc = %key, error = %e, "a volume's work failed"),
                Err(_) => {
                    tracing::debug!(pvc = %key, "a volume's work outlasts the scan; it goes on");
                    reports.extend(self.last.get(&key).map(|r| (**r).clone()));
                    self.running.insert(key, task);
                }
            }
        }
        reports
    }

    /// How far the kubelet's numbers are from statfs's, per volume both measured.
    fn cross_check(&self, reports: &[VolumeReport], kubelet: &ByClaim) {
        for report in reports {
            let Some(k) = kubelet.get(&(report.namespace.clone(), report.pvc.clone())) else {
                continue;
            };
            if let (MeasuredBy::Statfs, Some(m)) = (report.measured_by, report.measurement) {
                let ratio = super::kubelet_stats::disagreement(&m, &k.measurement);
                self.work
                    .admin
                    .metrics()
                    .kubelet_disagreement(VolumeLabels::of(report), ratio);
            }
        }
    }

    /// A due trim runs in the background, one per node at a time.
    async fn reclaim(&mut self, targets: Vec<ReclaimTarget>, common: &Common) {
        for (vol, pvc, class, namespace, driver) in targets {
            let target = crate::reclaim::Target {
                volume: &vol,
                pvc: &pvc,
                storage_class: class.as_deref(),
                namespace: namespace.as_deref(),
                driver: driver
                    .as_ref()
                    .map(|(d, name)| (name.as_str(), d.as_deref())),
                central: &common.central,
                node_draining: common.draining,
            };
            // FITRIM on a mount whose statfs is stuck would hang too, and hold the node's one
            // trim slot until the mount answers.
            if !self.work.shutdown.is_stopping() && vol.unmeasured.is_none() {
                let plan = self.reclaimer.run_due(&target, common.now).await;
                tracing::debug!(pv = ?vol.pv, ?plan, "reclaim");
            }
        }
    }

    /// Forgets what belongs to claims no longer on this node, and hands the fast loop what to
    /// watch until the next scan.
    fn forget_gone(
        &mut self,
        reports: &[VolumeReport],
        volumes: &[Volume],
        rates: &HashMap<PathBuf, f64>,
    ) {
        let keys: BTreeSet<String> = reports
            .iter()
            .map(|r| format!("{}/{}", r.namespace, r.pvc))
            .collect();
        self.work
            .events
            .retain(|k| keys.contains(k.split('#').next().unwrap_or(k)));
        self.last.retain(|k, _| keys.contains(k));
        self.work.lock_refusals().retain(|k, _| keys.contains(k));
        self.work.evictions.retain(|k| keys.contains(k));
        // Work for a claim that left the node meanwhile: nothing will collect it, so drop its
        // handle once done (a task still running finishes on its own).
        self.running
            .retain(|k, t| keys.contains(k) || !t.is_finished());
        let mounted: HashSet<&Path> = volumes.iter().map(|v| v.path.as_path()).collect();
        let mut triggers = self
            .work
            .triggers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        triggers.retain(|path, _| mounted.contains(path.as_path()));
        self.watchlist.set(volumes, &triggers, rates);
    }

    /// Whether the kubelet's mounts changed since the last full scan read them.
    pub async fn mounts_changed(&self) -> bool {
        self.work.prober.mounts_changed().await
    }

    /// The volumes the fast measurement loop watches, and the prober it measures them with.
    pub fn watchlist(&self) -> (Arc<Watchlist>, probe::Prober) {
        (self.watchlist.clone(), self.work.prober.clone())
    }

    /// For a claim whose work from an earlier scan is still running: `Some` (its last report,
    /// if any). A task that has finished meanwhile is collected, and `None` lets a new one start.
    async fn collect_running(&mut self, key: &str) -> Option<Option<VolumeReport>> {
        let task = self.running.remove(key)?;
        if !task.is_finished() {
            self.running.insert(key.to_string(), task);
            return Some(self.last.get(key).map(|r| (**r).clone()));
        }
        if let Ok(report) = task.await {
            self.last.insert(key.to_string(), Box::new(report));
        }
        None
    }

    /// After SIGTERM: lets volume work still running (a PATCH on its way) finish, within `grace`.
    pub async fn finish_running(&mut self, grace: std::time::Duration) {
        let tasks = self.running.drain().map(|(_, t)| t);
        let _ = tokio::time::timeout(grace, futures::future::join_all(tasks)).await;
    }
}

/// Which volumes a scan decides on.
struct Scope<'a> {
    /// Only the claims of these PersistentVolumes; every claim mounted here when `None`.
    only: Option<&'a HashSet<String>>,
    /// Some volume could not be measured by statfs: ask the kubelet (when its numbers are due).
    blind: bool,
}

/// What a scan decided, and what the rest of a full scan needs from it.
struct Decided {
    reports: Vec<VolumeReport>,
    reclaims: Vec<ReclaimTarget>,
    common: Common,
    kubelet: ByClaim,
    /// The groups of the claims decided on (their peers may be left Pending, too small).
    groups: pending::Groups,
}

/// What every volume of one scan shares.
struct Common {
    central: Arc<CentralPolicy>,
    creds: Arc<Credentials>,
    draining: bool,
    node: Option<Arc<k8s_openapi::api::core::v1::Node>>,
    now: Timestamp,
}
