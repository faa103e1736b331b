//! The agent's entry point: [`Reclaimer::run_due`], called once per volume per scan. It decides
//! (cheaply, in the scan) and starts due trims as background tasks, so a long trim never delays
//! the scan that grows a filling volume. One trim at a time per node.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use tokio::sync::Semaphore;

use super::metrics::ReclaimMetrics;
use super::schedule;
use super::state::{self, Outcome, ReclaimRecord};
use super::{ReclaimError, fitrim};
use crate::decide::budget;
use crate::events::Notice;
use crate::policy::merge::CentralPolicy;
use crate::policy::reclaim::{ClaimObjects, Objects, Resolved, resolve_objects};
use crate::policy::validate::Finding;
use crate::probe::{Volume, VolumeClass, VolumeMode};
use crate::quantity;

/// One mounted claim, as the scan sees it.
pub struct Target<'a> {
    pub volume: &'a Volume,
    pub pvc: &'a PersistentVolumeClaim,
    pub storage_class: Option<&'a StorageClass>,
    /// The claim's Namespace (its csi-addons trim schedule), when the watch has it.
    pub namespace: Option<&'a Namespace>,
    /// The claim's CSI driver (its StorageClass's provisioner) and that CSIDriver object, when
    /// the watch has it.
    pub driver: Option<(&'a str, Option<&'a CSIDriver>)>,
    pub central: &'a CentralPolicy,
    pub node_draining: bool,
}

/// What [`Reclaimer::run_due`] did with one volume, for logs and reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Never trimmed: block mode, shared or network filesystem, not a mount of its own.
    NotEligible(&'static str),
    Off(String),
    Invalid(Vec<Finding>),
    Draining,
    NotDue(Option<Timestamp>),
    /// A trim of this claim is queued or running.
    InFlight,
    /// Dry run: would have trimmed.
    WouldTrim,
    Started,
}

#[derive(Debug, Clone, Copy)]
struct Track {
    first_seen: Timestamp,
    touched: Timestamp,
    in_flight: bool,
    /// The last run this agent wrote (the watched claim may not show it yet).
    last_run: Option<Timestamp>,
}

/// Claims not seen for this long are forgotten (their first-seen time with them).
const FORGET_AFTER: SignedDuration = SignedDuration::from_hours(24);

struct Inner {
    node: String,
    client: Client,
    events: crate::events::Publisher,
    dry_run: bool,
    api_timeout: Duration,
    one_at_a_time: Arc<Semaphore>,
    draining: AtomicBool,
    tracked: Mutex<HashMap<String, Track>>,
    /// The last problem announced per claim, so it is announced once, not every scan.
    announced: Mutex<HashMap<String, String>>,
    metrics: ReclaimMetrics,
}

#[derive(Clone)]
pub struct Reclaimer {
    inner: Arc<Inner>,
}

/// Whether a volume may ever be trimmed, and the device its trim must find at its mount point.
pub fn eligible(v: &Volume) -> Result<&str, &'static str> {
    if v.mode != VolumeMode::Filesystem {
        return Err("block-mode volume: there is no filesystem to trim");
    }
    if v.class != VolumeClass::OwnedBlock {
        return Err("not a filesystem of its own on a block device (shared, network or unknown)");
    }
    if !v.mounted {
        return Err("not mounted");
    }
    v.device.as_deref().ok_or("device unknown")
}

/// Why the node agent never trims a block-mode claim: said in its `headroom.dev/reclaim` record
/// and a `ReclaimNotPossible` Event when it asks to be trimmed.
pub const BLOCK_MODE: &str = "block-mode volume: there is no filesystem on the node to trim (FITRIM trims a mounted filesystem); a raw device's freed space is reclaimed by the storage system's controller (csi-addons' ReclaimSpace runs rbd sparsify for it there), not by a node agent";

fn is_block_mode(t: &Target<'_>) -> bool {
    t.volume.mode == VolumeMode::Block || crate::k8s::claim::is_block_mode(t.pvc)
}

fn annotations<'a>(
    m: &'a ObjectMeta,
    empty: &'a BTreeMap<String, String>,
) -> &'a BTreeMap<String, String> {
    m.annotations.as_ref().unwrap_or(empty)
}

/// What the claim, its Namespace, its StorageClass, its CSIDriver and the ConfigMap say about
/// trimming it.
fn resolve_target(t: &Target<'_>, key: &str) -> Resolved {
    let empty = BTreeMap::new();
    let ns = t.pvc.metadata.namespace.as_deref().unwrap_or_default();
    let class_name = t
        .pvc
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref());
    let class = t.storage_class.map(|c| annotations(&c.metadata, &empty));
    resolve_objects(
        &Objects {
            claim: ClaimObjects {
                pvc: key,
                pvc_annotations: annotations(&t.pvc.metadata, &empty),
                pvc_namespace: ns,
                pvc_labels: t.pvc.metadata.labels.as_ref().unwrap_or(&empty),
                namespace: t.namespace.map(|n| (ns, annotations(&n.metadata, &empty))),
                storage_class: class_name.map(|n| (n, class.unwrap_or(&empty))),
                spec_limit: None,
            },
            driver: t
                .driver
                .map(|(name, d)| (name, d.map(|d| annotations(&d.metadata, &empty)))),
        },
        t.central,
    )
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave these maps inconsistent: keep going.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Reclaimer {
    pub fn new(
        client: Client,
        node: &str,
        dry_run: bool,
        api_timeout: Duration,
    ) -> Result<Self, ReclaimError> {
        Ok(Reclaimer {
            inner: Arc::new(Inner {
                node: node.to_string(),
                events: crate::events::Publisher::new(client.clone(), node),
                client,
                dry_run,
                api_timeout,
                one_at_a_time: Arc::new(Semaphore::new(1)),
                draining: AtomicBool::new(false),
                tracked: Mutex::new(HashMap::new()),
                announced: Mutex::new(HashMap::new()),
                metrics: ReclaimMetrics::new().map_err(ReclaimError::Metrics)?,
            }),
        })
    }

    pub fn metrics(&self) -> &ReclaimMetrics {
        &self.inner.metrics
    }

    /// The problem last announced for a claim (tests).
    #[cfg(test)]
    pub(super) fn announced(&self, key: &str) -> Option<String> {
        lock(&self.inner.announced).get(key).cloned()
    }

    /// Trims the volume if its schedule is due; returns at once (the trim runs in the
    /// background, queued behind any other trim on this node).
    pub async fn run_due(&self, t: &Target<'_>, now: Timestamp) -> Plan {
        let inner = &self.inner;
        inner.draining.store(t.node_draining, Ordering::Relaxed);
        let ns = t.pvc.metadata.namespace.clone().unwrap_or_default();
        let name = t.pvc.metadata.name.clone().unwrap_or_default();
        let key = format!("{ns}/{name}");
        let resolved = resolve_target(t, &key);
        if is_block_mode(t) {
            // Trimming asked for: say once why this agent cannot, instead of a bare failure.
            if matches!(resolved, Resolved::Scheduled(_)) {
                self.not_possible(&key, t.pvc, now).await;
            }
            return Plan::NotEligible(BLOCK_MODE);
        }
        let device = match eligible(t.volume) {
            Ok(d) => d.to_string(),
            Err(why) => return Plan::NotEligible(why),
        };
        let schedule = match resolved {
            Resolved::Off(why) => {
                self.announce(&key, t.pvc, None).await;
                return Plan::Off(why);
            }
            Resolved::Invalid(errors) => {
                let detail: Vec<String> = errors
                    .iter()
                    .map(|f| format!("{}: {}", f.field, f.message))
                    .collect();
                let note = format!("reclaimSpace refused, not trimming: {}", detail.join("; "));
                self.announce(&key, t.pvc, Some(note)).await;
                return Plan::Invalid(errors);
            }
            Resolved::Scheduled(s) => s,
        };
        let recorded = match state::read(t.pvc) {
            Ok(r) => r.map(|r| r.at),
            Err(e) => {
                self.announce(&key, t.pvc, Some(e.to_string())).await;
                return Plan::Invalid(vec![Finding {
                    field: state::ANNOTATION.into(),
                    message: e.to_string(),
                }]);
            }
        };
        // A trim dated further ahead than clock skew explains did not happen: counting it would
        // put the next trim off until that date (9999 means never).
        let (recorded, future) = match recorded {
            Some(at) if at > budget::plus(now, budget::CLOCK_SKEW) => (None, Some(at)),
            r => (r, None),
        };
        let note = future.map(|at| {
            format!(
                "{}: last trim dated {at}, more than {:#} in the future; ignored",
                state::ANNOTATION,
                budget::CLOCK_SKEW
            )
        });
        self.announce(&key, t.pvc, note).await;
        let track = {
            let mut tracked = lock(&inner.tracked);
            tracked.retain(|_, tr| tr.in_flight || now.duration_since(tr.touched) < FORGET_AFTER);
            let tr = tracked.entry(key.clone()).or_insert(Track {
                first_seen: now,
                touched: now,
                in_flight: false,
                last_run: None,
            });
            tr.touched = now;
            *tr
        };
        if t.node_draining {
            return Plan::Draining;
        }
        if track.in_flight {
            return Plan::InFlight;
        }
        let last = recorded.max(track.last_run);
        let due = schedule::due(&schedule.cron, &schedule.tz, last, track.first_seen, now);
        if !due.due {
            return Plan::NotDue(due.at);
        }
        if inner.dry_run {
            tracing::info!(pvc = %key, path = %t.volume.path.display(), "dry run: would trim");
            self.set_track(&key, |tr| tr.last_run = Some(now));
            return Plan::WouldTrim;
        }
        self.set_track(&key, |tr| tr.in_flight = true);
        let job = Job {
            key,
            ns,
            name,
            pvc: t.pvc.clone(),
            path: t.volume.path.clone(),
            device,
            timeout: t.central.reclaim.timeout,
        };
        tokio::spawn(self.clone().trim(job));
        Plan::Started
    }

    fn set_track(&self, key: &str, f: impl FnOnce(&mut Track)) {
        if let Some(tr) = lock(&self.inner.tracked).get_mut(key) {
            f(tr);
        }
    }

    /// Publishes a warning when a claim's reclaim problem appears or changes; forgets it when
    /// it is gone.
    async fn announce(&self, key: &str, pvc: &PersistentVolumeClaim, note: Option<String>) {
        let changed = {
            let mut announced = lock(&self.inner.announced);
            match &note {
                Some(n) => announced.insert(key.to_string(), n.clone()).as_ref() != Some(n),
                None => {
                    announced.remove(key);
                    false
                }
            }
        };
        if let (true, Some(n)) = (changed, note) {
            tracing::warn!(pvc = %key, note = %n, "reclaim refused");
            self.publish(pvc, true, "ReclaimFailed", n).await;
        }
    }

    /// A block-mode claim asks to be trimmed: one `ReclaimNotPossible` Warning per agent and
    /// claim, and the reason in its `headroom.dev/reclaim` record (written once: not again while
    /// the record already says it).
    async fn not_possible(&self, key: &str, pvc: &PersistentVolumeClaim, now: Timestamp) {
        let first = lock(&self.inner.announced)
            .insert(key.to_string(), BLOCK_MODE.to_string())
            .as_deref()
            != Some(BLOCK_MODE);
        if first {
            tracing::info!(pvc = %key, "block-mode claim asks to be trimmed; a node agent cannot");
            self.publish(pvc, true, "ReclaimNotPossible", BLOCK_MODE.to_string())
                .await;
        }
        let said = state::read(pvc)
            .ok()
            .flatten()
            .is_some_and(|r| r.result == Outcome::NotPossible);
        if said || self.inner.dry_run {
            return;
        }
        let record = ReclaimRecord {
            at: now,
            bytes: 0,
            duration_ms: 0,
            result: Outcome::NotPossible,
            node: self.inner.node.clone(),
            error: Some(BLOCK_MODE.to_string()),
        };
        let ns = pvc.metadata.namespace.clone().unwrap_or_default();
        let name = pvc.metadata.name.clone().unwrap_or_default();
        self.write_record(key, &ns, &name, &record).await;
    }

    async fn publish(
        &self,
        pvc: &PersistentVolumeClaim,
        warning: bool,
        reason: &'static str,
        note: String,
    ) {
        let notice = Notice {
            warning,
            reason,
            note,
        };
        self.inner
            .events
            .publish(pvc, &notice, "ReclaimSpace")
            .await;
    }

    async fn trim(self, job: Job) {
        let inner = &self.inner;
        let Ok(permit) = inner.one_at_a_time.clone().acquire_owned().await else {
            return; // the semaphore is never closed
        };
        // The node may have started draining while this trim waited for its turn.
        if inner.draining.load(Ordering::Relaxed) {
            self.set_track(&job.key, |tr| tr.in_flight = false);
            return;
        }
        let at = Timestamp::now();
        let started = Instant::now();
        let (path, device) = (job.path.clone(), job.device.clone());
        // The permit moves into the blocking task: after a timeout the kernel may still be
        // trimming, and the next trim must wait for that, not only for this task to give up.
        let blocking = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            fitrim::fitrim_device(&path, &device)
        });
        let limit = Duration::try_from(job.timeout).unwrap_or(Duration::from_secs(600));
        let result: Result<u64, String> = match tokio::time::timeout(limit, blocking).await {
            Ok(Ok(Ok(bytes))) => Ok(bytes),
            Ok(Ok(Err(e))) => Err(e.to_string()),
            Ok(Err(e)) => Err(format!("the trim task failed: {e}")),
            Err(_) => Err(format!(
                "{}: no answer within {}; the kernel may still be trimming, the next trim on this node waits for it",
                job.path.display(),
                job.timeout
            )),
        };
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let record = ReclaimRecord {
            at,
            bytes: *result.as_ref().unwrap_or(&0),
            duration_ms,
            result: if result.is_ok() {
                Outcome::Succeeded
            } else {
                Outcome::Failed
            },
            node: inner.node.clone(),
            error: result.as_ref().err().cloned(),
        };
        inner.metrics.record(&record);
        self.set_track(&job.key, |tr| {
            tr.in_flight = false;
            tr.last_run = Some(at);
        });
        let (warning, reason, note) = match &result {
            Ok(bytes) => (
                false,
                "SpaceReclaimed",
                format!(
                    "trimmed {} ({bytes} bytes) in {:.1}s",
                    quantity::human(*bytes),
                    duration_ms as f64 / 1000.0
                ),
            ),
            Err(e) => (true, "ReclaimFailed", format!("trim failed: {e}")),
        };
        tracing::info!(pvc = %job.key, %note, "reclaim");
        self.write_record(&job.key, &job.ns, &job.name, &record)
            .await;
        self.publish(&job.pvc, warning, reason, note).await;
    }

    async fn write_record(&self, key: &str, ns: &str, name: &str, record: &ReclaimRecord) {
        let body = match state::patch(record) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(pvc = %key, error = %e, "could not encode the reclaim record");
                return;
            }
        };
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.inner.client.clone(), ns);
        let (params, patch) = (PatchParams::default(), Patch::Merge(&body));
        let call = api.patch(name, &params, &patch);
        match tokio::time::timeout(self.inner.api_timeout, call).await {
            Ok(Ok(_)) => {}
            // The in-memory record still holds off a repeat until this agent restarts.
            Ok(Err(e)) => {
                tracing::warn!(pvc = %key, error = %e, "could not record the trim")
            }
            Err(_) => tracing::warn!(pvc = %key, "could not record the trim: API timeout"),
        }
    }
}

struct Job {
    key: String,
    ns: String,
    name: String,
    pvc: PersistentVolumeClaim,
    path: PathBuf,
    device: String,
    timeout: SignedDuration,
}
