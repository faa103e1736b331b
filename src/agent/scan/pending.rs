//! The `RestoreTooSmall` Event on a restored or cloned claim left Pending below its group's size
//! ([`crate::resolve::pending`]). Such a claim has no pod on any node, so no agent watches it as
//! its own; the agents holding another member of its group hold it in their peer watch, and each
//! looks at the peers of the groups mounted here after a full scan. No new watch, LIST or GET:
//! the stores have it all. Each agent creates the Event once per claim, under a name made from
//! the claim's uid, so however many agents see it the claim gets one (the others' creates are
//! refused, 409). The claim itself is never written: it has no agent.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use tokio::task::JoinHandle;

use super::Common;
use crate::agent::work::Work;
use crate::agent::world::World;
use crate::events::{Named, Notice};
use crate::k8s::roles;
use crate::metrics::labels::PendingEventOutcome;
use crate::resolve::pending::{REASON, Undersized, is_pending, undersized};

/// At most this many Events are created per scan; more wait for the next.
const PER_SCAN: usize = 8;

/// A create that failed is tried again after this long, not every scan.
const RETRY: std::time::Duration = std::time::Duration::from_secs(10 * 60);

/// What this agent did about each claim it found undersized, by uid.
#[derive(Default)]
pub(super) struct PendingClaims {
    /// `None`: its Event exists (created here or by another agent). `Some(t)`: creating it
    /// failed at `t`.
    told: Arc<Mutex<HashMap<String, Option<tokio::time::Instant>>>>,
    /// The creates of the last scan, one batch at a time.
    task: Option<JoinHandle<()>>,
}

/// Each group mounted here, as `(namespace, group key)`.
pub(super) type Groups = BTreeSet<(String, String)>;

impl PendingClaims {
    /// Creates the Events due for the peers of `groups` (the groups of the claims mounted here),
    /// in the background: the scan never waits for them.
    pub(super) fn check(
        &mut self,
        world: &World,
        groups: &Groups,
        common: &Common,
        work: &Arc<Work>,
    ) {
        let found = candidates(world, groups, common, work.cfg.restore_pending_after);
        let told = self.told.clone();
        let todo: Vec<(Arc<PersistentVolumeClaim>, Undersized)> = {
            let mut told = told.lock().unwrap_or_else(PoisonError::into_inner);
            // A claim bound, resized, deleted or out of sight since is forgotten.
            let live: HashSet<&str> = found.keys().map(String::as_str).collect();
            told.retain(|uid, _| live.contains(uid.as_str()));
            if self.task.as_ref().is_some_and(|t| !t.is_finished()) {
                return;
            }
            let due = |uid: &str| match told.get(uid) {
                None => true,
                Some(None) => false,
                Some(Some(failed)) => failed.elapsed() >= RETRY,
            };
            found
                .into_values()
                .filter(|(_, u)| due(&u.uid))
                .take(PER_SCAN)
                .collect()
        };
        if todo.is_empty() {
            return;
        }
        let work = work.clone();
        self.task = Some(tokio::spawn(async move {
            for (pvc, u) in todo {
                let after = work.cfg.restore_pending_after;
                let notice = Notice {
                    warning: true,
                    reason: REASON,
                    note: u.note(after),
                };
                let publisher = work.events.publisher();
                let named = publisher
                    .publish_named(&*pvc, &u.event_name(), &notice, work.cfg.api_timeout)
                    .await;
                let (outcome, memo) = match named {
                    Named::Created => (PendingEventOutcome::Posted, None),
                    Named::AlreadyExists => (PendingEventOutcome::AlreadyPosted, None),
                    Named::Failed => (
                        PendingEventOutcome::Failed,
                        Some(tokio::time::Instant::now()),
                    ),
                };
                work.admin.metrics().restore_too_small(outcome);
                told.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(u.uid, memo);
            }
        }));
    }
}

/// The peers of `groups` that are undersized now, by uid.
fn candidates(
    world: &World,
    groups: &Groups,
    common: &Common,
    after: jiff::SignedDuration,
) -> BTreeMap<String, (Arc<PersistentVolumeClaim>, Undersized)> {
    let mut found = BTreeMap::new();
    for (ns, key) in groups {
        let members: Vec<Arc<PersistentVolumeClaim>> = world
            .claims_in(ns)
            .into_iter()
            .filter(|c| roles::in_group(c, key))
            .collect();
        let size = roles::group_size(members.iter().map(AsRef::as_ref), key);
        for m in members.iter().filter(|m| is_pending(m)) {
            let opted_in = opted_in(world, m, common);
            if let Some(u) = undersized(m, size, opted_in, common.now, after) {
                found.insert(u.uid.clone(), (m.clone(), u));
            }
        }
    }
    found
}

/// Whether the claim's own policy asks for growth, merged as for a claim mounted here (its
/// annotations, Namespace, StorageClass, the central policy): the Event is said only about a
/// claim that opted in.
fn opted_in(world: &World, pvc: &PersistentVolumeClaim, common: &Common) -> bool {
    let class_name = pvc
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref());
    let class = class_name.and_then(|n| world.storage_class(n));
    let ns = pvc.metadata.namespace.as_deref().unwrap_or_default();
    let namespace = world.namespace(ns);
    crate::resolve::claim_policy(
        pvc,
        class_name,
        class.as_deref(),
        namespace.as_deref(),
        &common.central,
    )
    .wants_enabled()
}
