//! What the agent knows about the cluster: reflector stores fed by watches, never polling.
//!
//! Pods are watched with a `spec.nodeName` field selector, this Node and the ConfigMap by name,
//! StorageClasses whole (few and small), Namespaces and CSIDrivers whole but trimmed to their
//! name and csi-addons trim schedule, a Namespace also to its `headroom.dev/*` policy layer (one
//! watch each per node, whatever the claims: the trim schedule's design reads it from both). Claims are watched as [`super::claim_watch`] plans:
//! each claim a pod here mounts by name, its peers by label selector, a namespace whole only
//! where nothing narrower holds them, so a node's memory and watch events follow its own claims,
//! not the size of its tenants' namespaces. The ResourceQuotas of the namespaces with a claim
//! mounted here are watched per namespace (what a grow may still take): quota status is
//! rewritten on every admitted pod or claim of a namespace with a quota, and a cluster-wide watch
//! would carry every tenant's churn to every node. Every watch shares one HTTP/2 connection
//! ([`super::client`]).
//!
//! Initial lists are served from the API server's watch cache (`resourceVersion=0`, not a quorum
//! read of etcd), and a watch that ends resumes from its last resourceVersion, kept fresh by
//! bookmarks; only an expired one (410) lists again. A rolling restart of the DaemonSet costs one
//! cached LIST per watch, never one per claim.
//!
//! Each store keeps only the fields the agent reads ([`super::trim`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, Node, PersistentVolumeClaim, Pod, ResourceQuota,
};
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use super::claim_watch::{ClaimWatch, Needs};
use crate::k8s::{roles, scope};
use crate::metrics::labels::watched as res;

/// Told how each watch fares, by the watcher's name.
pub trait WatchObserver: Send + Sync {
    /// The watch failed and restarts with backoff; its view may be stale from now on.
    fn failed(&self, watcher: &str);
    /// The watch yielded an event (it works), or was stopped (nothing to track).
    fn ok(&self, watcher: &str);
    /// An object of `resource` arrived on a watch (counted: what the fleet pays per node).
    fn received(&self, resource: &'static str);
}

pub type Observer = Arc<dyn WatchObserver>;

/// The longest wait between a failing watch's retries, before jitter (up to half again).
pub const RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(10);

pub use crate::health::RETRY_QUIET;

/// Doubling delays from half a second to [`RETRY_MAX`], each lengthened by up to half at random,
/// so a fleet of agents does not retry in step after an outage.
struct RetryBackoff {
    next: std::time::Duration,
    seed: u64,
}

const RETRY_MIN: std::time::Duration = std::time::Duration::from_millis(500);

impl RetryBackoff {
    fn new(name: &str) -> Self {
        use std::hash::{BuildHasher, RandomState};
        RetryBackoff {
            next: RETRY_MIN,
            seed: RandomState::new().hash_one(name),
        }
    }
}

impl Iterator for RetryBackoff {
    type Item = std::time::Duration;

    fn next(&mut self) -> Option<std::time::Duration> {
        // splitmix64: enough randomness for jitter without a dependency.
        self.seed = self.seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        let share = (z ^ (z >> 31)) as f64 / u64::MAX as f64 / 2.0;
        let delay = self.next;
        self.next = (delay * 2).min(RETRY_MAX);
        Some(delay + delay.mul_f64(share))
    }
}

impl kube::runtime::utils::Backoff for RetryBackoff {
    fn reset(&mut self) {
        self.next = RETRY_MIN;
    }
}

fn spawn_reflector<K>(
    api: Api<K>,
    config: watcher::Config,
    (resource, name): (&'static str, String),
    observer: Observer,
    trim: fn(&mut K),
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    // resourceVersion=0: the list comes from the API server's watch cache. kube drops it when a
    // page size is set, and the cache does not page anyway.
    let mut config = config.any_semantic();
    config.page_size = None;
    let retry = RetryBackoff::new(&name);
    // Trimmed before the store keeps it: the store holds only what the agent reads.
    let events = watcher(api, config).modify(trim).backoff(retry);
    let stream = reflector::reflector(writer, events);
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Err(e) => {
                    tracing::warn!(watcher = %name, error = %e, "watch failed; retrying with backoff");
                    observer.failed(&name);
                }
                Ok(event) => {
                    observer.ok(&name);
                    if matches!(
                        event,
                        watcher::Event::Apply(_)
                            | watcher::Event::Delete(_)
                            | watcher::Event::InitApply(_)
                    ) {
                        observer.received(resource);
                    }
                }
            }
        }
    });
    (reader, task)
}

/// Per key: the store, the task, and the watcher's name.
type Watches<K, T = PersistentVolumeClaim> = HashMap<K, (Store<T>, JoinHandle<()>, String)>;

/// Makes `watches` hold exactly the keys in `wanted`: stops the others, starts the missing ones
/// with `start` and waits up to `wait` for them to list (one that has not is picked up by a
/// later scan).
async fn sync_watches<K: Clone + Eq + Hash + Ord, T: Resource + Clone + 'static>(
    watches: &mut Watches<K, T>,
    wanted: &BTreeSet<K>,
    wait: std::time::Duration,
    observer: &Observer,
    name_of: impl Fn(&K) -> String,
    start: impl Fn(&K, String) -> (Store<T>, JoinHandle<()>),
) where
    T::DynamicType: Eq + Hash + Clone,
{
    watches.retain(|key, (_, task, name)| {
        let keep = wanted.contains(key);
        if !keep {
            task.abort();
            // A stopped watch's last failure must not hold readiness down.
            observer.ok(name);
        }
        keep
    });
    let mut started = Vec::new();
    for key in wanted {
        if !watches.contains_key(key) {
            let name = name_of(key);
            let (store, task) = start(key, name.clone());
            started.push(store.clone());
            watches.insert(key.clone(), (store, task, name));
        }
    }
    let ready = futures::future::join_all(started.iter().map(|s| s.wait_until_ready()));
    let _ = tokio::time::timeout(wait, ready).await;
}

pub struct World {
    pub pods: Store<Pod>,
    pub nodes: Store<Node>,
    pub classes: Store<StorageClass>,
    pub configmaps: Store<ConfigMap>,
    /// Every Namespace and CSIDriver, trimmed to name, trim schedule and (a Namespace) policy.
    pub namespace_objects: Store<Namespace>,
    pub csi_drivers: Store<CSIDriver>,
    client: Client,
    /// Claims as planned: by name, by selector, or a namespace whole.
    claims: Watches<ClaimWatch>,
    /// ResourceQuotas of the same namespaces: what a grow there may still take.
    quotas: Watches<String, ResourceQuota>,
    tasks: Vec<JoinHandle<()>>,
    observer: Observer,
}

impl World {
    pub fn start(
        client: Client,
        node: &str,
        namespace: &str,
        configmap: &str,
        observer: Observer,
    ) -> Self {
        let by_name =
            |name: &str| watcher::Config::default().fields(&format!("metadata.name={name}"));
        let (pods, t1) = spawn_reflector(
            Api::<Pod>::all(client.clone()),
            watcher::Config::default().fields(&format!("spec.nodeName={node}")),
            (res::PODS, "pods".into()),
            observer.clone(),
            super::slim::pod,
        );
        let (nodes, t2) = spawn_reflector(
            Api::<Node>::all(client.clone()),
            by_name(node),
            (res::NODES, "node".into()),
            observer.clone(),
            super::slim::node,
        );
        let (classes, t3) = spawn_reflector(
            Api::<StorageClass>::all(client.clone()),
            watcher::Config::default(),
            (res::STORAGE_CLASSES, "storageclasses".into()),
            observer.clone(),
            super::slim::storage_class,
        );
        let (configmaps, t4) = spawn_reflector(
            Api::<ConfigMap>::namespaced(client.clone(), namespace),
            by_name(configmap),
            (res::CONFIGMAPS, "configmap".into()),
            observer.clone(),
            super::slim::configmap,
        );
        let (namespace_objects, t5) = spawn_reflector(
            Api::<Namespace>::all(client.clone()),
            watcher::Config::default(),
            (res::NAMESPACES, "namespaces".into()),
            observer.clone(),
            super::slim::namespace,
        );
        let (csi_drivers, t6) = spawn_reflector(
            Api::<CSIDriver>::all(client.clone()),
            watcher::Config::default(),
            (res::CSI_DRIVERS, "csidrivers".into()),
            observer.clone(),
            super::slim::csi_driver,
        );
        World {
            pods,
            nodes,
            classes,
            configmaps,
            namespace_objects,
            csi_drivers,
            client,
            claims: HashMap::new(),
            quotas: HashMap::new(),
            tasks: vec![t1, t2, t3, t4, t5, t6],
            observer,
        }
    }

    /// Waits until every cluster-level watch has listed once.
    pub async fn wait_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.pods.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        self.classes.wait_until_ready().await?;
        self.namespace_objects.wait_until_ready().await?;
        self.csi_drivers.wait_until_ready().await?;
        self.configmaps.wait_until_ready().await
    }

    /// Keeps exactly the claim watches of `plan` and one ResourceQuota watch for each namespace
    /// of `quotas`: starts new ones (and waits, up to `wait`, for them to list, so a scan sees a
    /// claim as soon as its pod is here), stops those no longer wanted.
    pub async fn sync_claims(
        &mut self,
        plan: &BTreeSet<ClaimWatch>,
        quotas: &BTreeSet<String>,
        wait: std::time::Duration,
    ) {
        let (client, observer) = (self.client.clone(), self.observer.clone());
        sync_watches(
            &mut self.claims,
            plan,
            wait,
            &observer,
            ClaimWatch::name,
            |watch, watcher| {
                let config = match watch {
                    ClaimWatch::Claim { name, .. } => {
                        watcher::Config::default().fields(&format!("metadata.name={name}"))
                    }
                    ClaimWatch::Labels { selector, .. } => {
                        watcher::Config::default().labels(selector)
                    }
                    ClaimWatch::Namespace(_) => watcher::Config::default(),
                };
                spawn_reflector(
                    Api::<PersistentVolumeClaim>::namespaced(client.clone(), watch.namespace()),
                    config,
                    (res::CLAIMS, watcher),
                    observer.clone(),
                    super::slim::claim,
                )
            },
        )
        .await;
        sync_watches(
            &mut self.quotas,
            quotas,
            wait,
            &observer,
            |ns| format!("resourcequotas in {ns}"),
            |ns, watcher| {
                spawn_reflector(
                    Api::<ResourceQuota>::namespaced(client.clone(), ns),
                    watcher::Config::default(),
                    (res::QUOTAS, watcher),
                    observer.clone(),
                    super::slim::quota,
                )
            },
        )
        .await;
    }

    /// Plans and keeps the claim watches for `pods` (the live pods on this node) with at most
    /// `cap` narrow ones, and the quota watches of their namespaces. A claim first seen in this
    /// call names its peers only once its own watch has listed, so the plan is made twice.
    pub async fn sync_for(&mut self, pods: &[Arc<Pod>], cap: usize, wait: std::time::Duration) {
        let needs = self.needs(pods);
        let quotas: BTreeSet<String> = needs.claims.keys().cloned().collect();
        let plan = needs.plan(cap);
        self.sync_claims(&plan, &quotas, wait).await;
        let again = self.needs(pods).plan(cap);
        if again != plan {
            self.sync_claims(&again, &quotas, wait).await;
        }
    }

    /// The claims `pods` mount and where the peers of those already seen are.
    fn needs(&self, pods: &[Arc<Pod>]) -> Needs {
        let mut needs = Needs::default();
        for pod in pods {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            for name in roles::pod_claim_names(pod) {
                if let Some(pvc) = self.claim(&ns, &name) {
                    let scopes = scope::peer_scopes(&pvc, Some(pod));
                    if !scopes.is_empty() {
                        needs.peers.entry(ns.clone()).or_default().extend(scopes);
                    }
                }
                needs.claims.entry(ns.clone()).or_default().insert(name);
            }
        }
        needs
    }

    /// The claim watches running now, by kind (`headroom_claim_watches`).
    pub fn claim_watches(&self) -> BTreeMap<&'static str, usize> {
        let mut by_kind = BTreeMap::new();
        for watch in self.claims.keys() {
            *by_kind.entry(watch.kind()).or_default() += 1;
        }
        by_kind
    }

    /// The ResourceQuotas of namespace `ns` as its watch last saw them, by name.
    pub fn quotas(&self, ns: &str) -> Vec<Arc<ResourceQuota>> {
        let mut all = self
            .quotas
            .get(ns)
            .map(|(store, _, _)| store.state())
            .unwrap_or_default();
        all.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        all
    }

    /// Every claim of namespace `ns` that a watch here holds (the claims mounted here and their
    /// peers, or the whole namespace where it is watched whole); none until a watch has listed.
    pub fn claims_in(&self, ns: &str) -> Vec<Arc<PersistentVolumeClaim>> {
        if let Some((store, _, _)) = self.claims.get(&ClaimWatch::Namespace(ns.into())) {
            return store.state();
        }
        // A claim seen by two watches (its own and a peer selector's) is kept once, the newer.
        let mut by_name: BTreeMap<String, Arc<PersistentVolumeClaim>> = BTreeMap::new();
        for (watch, (store, _, _)) in &self.claims {
            if watch.namespace() != ns {
                continue;
            }
            for c in store.state() {
                let name = c.metadata.name.clone().unwrap_or_default();
                match by_name.get(&name) {
                    Some(kept) if !newer(&c, kept) => {}
                    _ => {
                        by_name.insert(name, c);
                    }
                }
            }
        }
        by_name.into_values().collect()
    }

    /// The claim as a watch here last saw it; `None` until one holding it has listed.
    pub fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        let key = reflector::ObjectRef::new(name).within(namespace);
        let own = ClaimWatch::Claim {
            namespace: namespace.into(),
            name: name.into(),
        };
        if let Some(c) = self.claims.get(&own).and_then(|(s, _, _)| s.get(&key)) {
            return Some(c);
        }
        self.claims
            .iter()
            .filter(|(w, _)| w.namespace() == namespace)
            .find_map(|(_, (store, _, _))| store.get(&key))
    }

    pub fn node(&self) -> Option<Arc<Node>> {
        self.nodes.state().into_iter().next()
    }

    pub fn configmap(&self) -> Option<Arc<ConfigMap>> {
        self.configmaps.state().into_iter().next()
    }

    pub fn storage_class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.classes.get(&reflector::ObjectRef::new(name))
    }

    pub fn namespace(&self, name: &str) -> Option<Arc<Namespace>> {
        self.namespace_objects.get(&reflector::ObjectRef::new(name))
    }

    pub fn csi_driver(&self, name: &str) -> Option<Arc<CSIDriver>> {
        self.csi_drivers.get(&reflector::ObjectRef::new(name))
    }
}

/// Is `a` a later version of its object than `b`? resourceVersions are opaque, but etcd's are
/// integers that grow; when either is not, the one in hand is kept.
fn newer(a: &PersistentVolumeClaim, b: &PersistentVolumeClaim) -> bool {
    let version = |c: &PersistentVolumeClaim| {
        c.metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
    };
    matches!((version(a), version(b)), (Some(x), Some(y)) if x > y)
}

impl Drop for World {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        for (_, task, _) in self.claims.values() {
            task.abort();
        }
        for (_, task, _) in self.quotas.values() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::utils::Backoff;

    #[test]
    fn retries_double_to_the_cap_with_bounded_jitter_and_stay_inside_the_quiet_window() {
        let mut b = RetryBackoff::new("pods");
        let mut base = RETRY_MIN;
        for _ in 0..12 {
            let d = b.next().expect("endless");
            assert!(
                d >= base && d <= base.mul_f64(1.5),
                "{d:?} for base {base:?}"
            );
            // The readiness rule counts on a failing watch retrying within RETRY_QUIET.
            assert!(d < RETRY_QUIET, "{d:?}");
            base = (base * 2).min(RETRY_MAX);
        }
        assert_eq!(base, RETRY_MAX);
        b.reset();
        assert!(b.next().expect("endless") <= RETRY_MIN.mul_f64(1.5));
    }
}
