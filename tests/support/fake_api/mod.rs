//! An in-process fake of kube-apiserver, kept only for what the real test server
//! (tests/support/kube: kube-apiserver 1.20.2) cannot be made to do: injected 5xx and
//! timeouts, stalled answers, dropped watches and 410s on demand, 409 storms, and API fields
//! newer than 1.20. It mimics kube-apiserver 1.34: `status.allocatedResourceStatuses` and the
//! KEP-1790 rule that a bound claim may lower its request while it stays above `status.capacity`
//! (`Features::recover_expansion`, GA in 1.34); without that feature it refuses any decrease as
//! servers before 1.34 do. Everything else the agent meets in production (admission, RBAC,
//! field selectors, bookmarks, resourceVersion semantics, events.k8s.io) is tested on the real
//! server: see tests/README.md for which tests use which.
//!
//! A real `kube::Client` talks plain HTTP/1.1 to it on 127.0.0.1; it keeps one global
//! resourceVersion with 409 on stale preconditions, watches that resume or answer 410, field and
//! label selectors, the status subresource, and the PVC validation and resize admission rules
//! with kube-apiserver's messages, so the fault tests run on believable semantics.
//!
//! Include it with `#[path = "support/fake_api/mod.rs"] mod fake_api;`.
#![allow(dead_code)]

mod faults;
pub mod fixtures;
mod handlers;
mod resources;
mod rules;
mod selectors;
mod server;
mod status;
mod store;
mod watch;
mod write;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use rules::Features;

use faults::Faults;
use store::Store;

/// One request as the fake saw it, in arrival order (logged when answered).
#[derive(Debug, Clone)]
pub struct RequestRecord {
    pub method: String,
    pub path: String,
    /// Raw (still percent-encoded) query string.
    pub query: String,
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Option<String>,
}

impl RequestRecord {
    /// A decoded query parameter.
    pub fn param(&self, name: &str) -> Option<String> {
        form_urlencoded::parse(self.query.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }

    pub fn is_watch(&self) -> bool {
        matches!(self.param("watch").as_deref(), Some("true" | "1"))
    }
}

struct Shared {
    store: Mutex<Store>,
    faults: Mutex<Faults>,
    log: Mutex<Vec<RequestRecord>>,
    /// Requests as they arrive, before any delay (status 0: not answered yet).
    arrivals: Mutex<Vec<RequestRecord>>,
    stats: Mutex<HashMap<String, Value>>,
    features: Mutex<Features>,
}

/// A poisoned lock only means another test thread panicked; the data is still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub struct FakeApi {
    shared: Arc<Shared>,
    server: server::Server,
}

impl FakeApi {
    /// Starts a server on 127.0.0.1 with an ephemeral port; it stops when dropped.
    pub async fn start() -> FakeApi {
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::default()),
            faults: Mutex::new(Faults::default()),
            log: Mutex::new(Vec::new()),
            arrivals: Mutex::new(Vec::new()),
            stats: Mutex::new(HashMap::new()),
            features: Mutex::new(Features::default()),
        });
        let server = server::Server::spawn(shared.clone());
        FakeApi { shared, server }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.server.addr)
    }

    /// Client configuration for this server (plain HTTP, no auth, default namespace
    /// "default"). kube's client retries 429, 503 and 504 by itself unless `default_retry` is
    /// turned off.
    pub fn config(&self) -> kube::Config {
        kube::Config::new(self.url().parse().expect("fake API URL is a valid URI"))
    }

    /// A real kube client for this server.
    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config()).expect("kube client for the fake API")
    }

    /// A kubeconfig naming this server, for an agent run as a child process (`KUBECONFIG`).
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\n\
             clusters:\n- name: fake\n  cluster:\n    server: {}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\n\
             users:\n- name: fake\n  user: {{}}\n",
            self.url()
        )
    }

    /// Writes [`Self::kubeconfig_yaml`] to `path`.
    pub fn write_kubeconfig(&self, path: &std::path::Path) {
        std::fs::write(path, self.kubeconfig_yaml()).expect("write the fake API kubeconfig");
    }

    // ---- direct access, for tests to seed and mutate state as a controller would ----

    /// Stores an object as is (status included), replacing any object of the same name; bumps
    /// the resourceVersion and notifies watchers. Namespaced types need `metadata.namespace`.
    pub fn insert<K>(&self, obj: K) -> K
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        let res = resources::of::<K>();
        let mut v = serde_json::to_value(&obj).expect("object serializes to JSON");
        let ns = v["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let name = v["metadata"]["name"].as_str().unwrap_or("").to_string();
        assert!(!name.is_empty(), "insert: metadata.name is required");
        assert!(
            !res.ty().namespaced || !ns.is_empty(),
            "insert: {} {name} needs metadata.namespace",
            res.ty().kind
        );
        rules::apply_defaults(res, &mut v);
        let mut store = lock(&self.shared.store);
        let stored = if store.get(res, &ns, &name).is_some() {
            v["metadata"]["resourceVersion"] = Value::Null;
            let old = store.get(res, &ns, &name).cloned().unwrap_or_default();
            for kept in ["uid", "creationTimestamp"] {
                if v["metadata"][kept].is_null() {
                    v["metadata"][kept] = old["metadata"][kept].clone();
                }
            }
            store.update(res, v)
        } else {
            store.create(res, v)
        };
        from_value(stored.expect("insert into the fake store"))
    }

    pub fn get<K>(&self, namespace: &str, name: &str) -> Option<K>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        let res = resources::of::<K>();
        lock(&self.shared.store)
            .get(res, namespace, name)
            .cloned()
            .map(from_value)
    }

    /// Changes a stored object in place, bypassing validation (as a controller with its own
    /// rules would, e.g. the "CSI driver" setting `status.capacity`). A change bumps the
    /// resourceVersion and notifies watchers; no change is a no-op, as on the real server.
    pub fn update_with<K>(&self, namespace: &str, name: &str, f: impl FnOnce(&mut K)) -> K
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        let res = resources::of::<K>();
        let mut store = lock(&self.shared.store);
        let current = store.get(res, namespace, name).cloned().unwrap_or_else(|| {
            panic!(
                "update_with: {} {namespace}/{name} not found",
                res.ty().kind
            )
        });
        let mut obj: K = from_value(current);
        f(&mut obj);
        let v = serde_json::to_value(&obj).expect("object serializes to JSON");
        from_value(store.update(res, v).expect("update in the fake store"))
    }

    /// Deletes at once (no finalizers, no grace period), notifying watchers.
    pub fn remove<K>(&self, namespace: &str, name: &str) -> Option<K>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        let res = resources::of::<K>();
        lock(&self.shared.store)
            .delete(res, namespace, name)
            .ok()
            .map(from_value)
    }

    /// All objects of a type, in namespace/name order.
    pub fn list<K>(&self) -> Vec<K>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        let res = resources::of::<K>();
        let filter = selectors::Filter::all(res, None);
        lock(&self.shared.store)
            .list(&filter)
            .map(|(_, v)| from_value(v.clone()))
            .collect()
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.store).resource_version()
    }

    // ---- observation ----

    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.shared.log).clone()
    }

    pub fn clear_requests(&self) {
        lock(&self.shared.log).clear();
        lock(&self.shared.arrivals).clear();
    }

    /// Requests as they arrived, answered or not (`status` 0): with `set_delay`, what is in
    /// flight is in here and not yet in [`Self::requests`].
    pub fn arrivals(&self) -> Vec<RequestRecord> {
        lock(&self.shared.arrivals).clone()
    }

    /// Watch streams currently open (readers that went away are not counted).
    pub fn open_watches(&self) -> usize {
        lock(&self.shared.store).open_watches()
    }

    // ---- faults and cluster behaviour ----

    /// The next `n` requests answer `status` with a matching `metav1.Status`. Note that the
    /// kube client itself retries 429, 503 and 504 (up to 15 times); 500 reaches the caller.
    pub fn fail_next(&self, n: usize, status: u16) {
        lock(&self.shared.faults).fail_next(n, status, None, None);
    }

    /// Like `fail_next`, for requests of one method whose path contains `path_contains`, so
    /// background watchers do not use up the failures.
    pub fn fail_next_matching(&self, n: usize, status: u16, method: &str, path_contains: &str) {
        lock(&self.shared.faults).fail_next(n, status, Some(method), Some(path_contains));
    }

    /// While set, every new request answers 500. Open watches stay open (see `drop_watches`).
    pub fn set_failing(&self, failing: bool) {
        lock(&self.shared.faults).set_failing(failing);
    }

    /// Every request waits this long before it is answered (zero to stop).
    pub fn set_delay(&self, delay: Duration) {
        lock(&self.shared.faults).set_delay(delay);
    }

    /// Holds every `method` request whose path contains `path_contains` for `delay`.
    pub fn set_slow(&self, method: &str, path_contains: &str, delay: Duration) {
        lock(&self.shared.faults).set_slow(method, path_contains, delay);
    }

    /// Closes every open watch stream; clients see a clean end of stream and must re-watch.
    pub fn drop_watches(&self) {
        lock(&self.shared.store).drop_watches();
    }

    /// Forgets the change history: a watch resuming from an earlier resourceVersion, or a
    /// continue token from before, gets 410 Gone.
    pub fn compact(&self) {
        lock(&self.shared.store).compact();
    }

    /// Sends a BOOKMARK now to every watch that allows them (they also come every second).
    pub fn send_bookmarks(&self) {
        lock(&self.shared.store).bookmark_all();
    }

    pub fn set_features(&self, features: Features) {
        *lock(&self.shared.features) = features;
    }

    /// What `GET /api/v1/nodes/{node}/proxy/stats/summary` answers (404 while unset).
    pub fn set_stats_summary(&self, node: &str, summary: Value) {
        lock(&self.shared.stats).insert(node.to_string(), summary);
    }

    pub fn clear_stats_summary(&self, node: &str) {
        lock(&self.shared.stats).remove(node);
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        lock(&self.shared.store).drop_watches();
    }
}

fn from_value<K: DeserializeOwned>(v: Value) -> K {
    serde_json::from_value(v).expect("stored object deserializes as its type")
}
