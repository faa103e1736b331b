//! The object store: one global resourceVersion counter like etcd, a bounded history of changes
//! for watches to resume from, and the open watches that every change is offered to.

use std::collections::{BTreeMap, VecDeque};

use serde_json::{Value, json};

use super::resources::Res;
use super::selectors::Filter;
use super::status::ApiError;
use super::watch::{WatchStart, Watcher};

/// How many changes are kept for watches to resume from; older resourceVersions answer 410.
const HISTORY: usize = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

#[derive(Debug, Clone)]
pub struct Change {
    pub rv: u64,
    pub res: Res,
    pub kind: ChangeKind,
    pub old: Option<Value>,
    pub new: Value,
}

type Key = (Res, String, String);

#[derive(Default)]
pub struct Store {
    objects: BTreeMap<Key, Value>,
    rv: u64,
    uids: u64,
    history: VecDeque<Change>,
    /// Changes at or below this resourceVersion are gone from `history`.
    compacted: u64,
    watchers: Vec<Watcher>,
}

pub fn key(res: Res, namespace: &str, name: &str) -> Key {
    let ns = if res.ty().namespaced { namespace } else { "" };
    (res, ns.to_string(), name.to_string())
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj["metadata"][field].as_str().unwrap_or("")
}

/// Equal but for resourceVersion: such a write is a no-op, as on the real server (no new
/// resourceVersion, no watch event).
fn same_content(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v["metadata"].as_object_mut() {
            m.remove("resourceVersion");
            m.remove("managedFields");
        }
        v
    };
    strip(a) == strip(b)
}

impl Store {
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    pub fn get(&self, res: Res, namespace: &str, name: &str) -> Option<&Value> {
        self.objects.get(&key(res, namespace, name))
    }

    /// Objects of one type in key order (namespace, then name), as the real server lists them.
    pub fn list<'a>(&'a self, filter: &'a Filter) -> impl Iterator<Item = (&'a Key, &'a Value)> {
        self.objects
            .iter()
            .filter(move |((res, _, _), obj)| filter.matches(*res, obj))
    }

    pub fn new_uid(&mut self) -> String {
        self.uids += 1;
        format!("00000000-0000-4000-8000-{:012x}", self.uids)
    }

    /// Stores a new object; the caller has filled in name and namespace.
    pub fn create(&mut self, res: Res, mut obj: Value) -> Result<Value, ApiError> {
        let k = key(res, meta_str(&obj, "namespace"), meta_str(&obj, "name"));
        if self.objects.contains_key(&k) {
            return Err(ApiError::already_exists(res.ty(), &k.2));
        }
        let ty = res.ty();
        obj["apiVersion"] = json!(ty.api_version());
        obj["kind"] = json!(ty.kind);
        let meta = &mut obj["metadata"];
        if meta_str_v(meta, "uid").is_empty() {
            meta["uid"] = json!(self.new_uid());
        }
        if meta_str_v(meta, "creationTimestamp").is_empty() {
            meta["creationTimestamp"] = json!(now());
        }
        if meta.get("generation").is_none() {
            meta["generation"] = json!(1);
        }
        self.commit(res, k, None, obj)
    }

    /// Replaces a stored object (the caller has validated it), unless nothing changed.
    pub fn update(&mut self, res: Res, mut new: Value) -> Result<Value, ApiError> {
        let k = key(res, meta_str(&new, "namespace"), meta_str(&new, "name"));
        let Some(old) = self.objects.get(&k).cloned() else {
            return Err(ApiError::not_found(res.ty(), &k.2));
        };
        if same_content(&old, &new) {
            return Ok(old);
        }
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
        let spec_changed = old.get("spec") != new.get("spec");
        new["metadata"]["generation"] = json!(generation + i64::from(spec_changed));
        self.commit(res, k, Some(old), new)
    }

    pub fn delete(&mut self, res: Res, namespace: &str, name: &str) -> Result<Value, ApiError> {
        let k = key(res, namespace, name);
        let Some(mut obj) = self.objects.remove(&k) else {
            return Err(ApiError::not_found(res.ty(), name));
        };
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        self.emit(Change {
            rv: self.rv,
            res,
            kind: ChangeKind::Deleted,
            old: None,
            new: obj.clone(),
        });
        Ok(obj)
    }

    fn commit(
        &mut self,
        res: Res,
        k: Key,
        old: Option<Value>,
        mut new: Value,
    ) -> Result<Value, ApiError> {
        self.rv += 1;
        new["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        self.objects.insert(k, new.clone());
        let kind = if old.is_some() {
            ChangeKind::Modified
        } else {
            ChangeKind::Added
        };
        self.emit(Change {
            rv: self.rv,
            res,
            kind,
            old,
            new: new.clone(),
        });
        Ok(new)
    }

    fn emit(&mut self, change: Change) {
        self.watchers.retain(|w| w.offer(&change));
        self.history.push_back(change);
        while self.history.len() > HISTORY {
            if let Some(gone) = self.history.pop_front() {
                self.compacted = gone.rv;
            }
        }
    }

    /// Opens a watch. Everything it must replay is queued before it is registered, under the
    /// same lock as writes, so no change can slip between the replay and the live stream.
    pub fn watch(&mut self, watcher: Watcher, start: WatchStart) -> Result<(), ApiError> {
        match start {
            WatchStart::After(rv) => {
                if rv < self.compacted {
                    return Err(ApiError::gone(format!(
                        "too old resource version: {rv} ({})",
                        self.compacted + 1
                    )));
                }
                for change in self.history.iter().filter(|c| c.rv > rv) {
                    if !watcher.offer(change) {
                        return Ok(());
                    }
                }
            }
            WatchStart::Now | WatchStart::InitialEvents => {
                let filter = watcher.filter.clone();
                for (_, obj) in self.list(&filter) {
                    watcher.added(obj);
                }
                if start == WatchStart::InitialEvents {
                    watcher.bookmark(self.rv, true);
                }
            }
        }
        self.watchers.push(watcher);
        Ok(())
    }

    /// Sends a BOOKMARK to every watch that asked for them, through the same queue as events so
    /// that a bookmark never overtakes an event it covers.
    pub fn bookmark_all(&mut self) {
        let rv = self.rv;
        self.watchers.retain_mut(|w| w.bookmark(rv, false));
    }

    /// Closes every open watch stream, as an API server restart or a load balancer would.
    pub fn drop_watches(&mut self) {
        self.watchers.clear();
    }

    pub fn open_watches(&mut self) -> usize {
        self.watchers.retain(Watcher::alive);
        self.watchers.len()
    }

    /// Forgets all history: a watch resuming from any earlier resourceVersion gets 410 Gone.
    pub fn compact(&mut self) {
        self.history.clear();
        self.compacted = self.rv;
    }

    pub fn is_compacted(&self, rv: u64) -> bool {
        rv < self.compacted
    }
}

fn meta_str_v<'a>(meta: &'a Value, field: &str) -> &'a str {
    meta[field].as_str().unwrap_or("")
}

pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}
