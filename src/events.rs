//! Kubernetes Events on claims, emitted when what there is to say changes, not every scan.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use crate::decide::{BlockReason, FailureCause, Note, ResizeState, Verdict};
use crate::quantity;
use crate::report::VolumeReport;

/// One thing to tell about a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub warning: bool,
    pub reason: &'static str,
    pub note: String,
}

impl Notice {
    fn warning(reason: &'static str, note: String) -> Self {
        Notice {
            warning: true,
            reason,
            note,
        }
    }
}

/// `walSafety.alertOnResize`: a volume holding WAL was grown. Growth there can hide a WAL fault
/// (archiving that stopped, a slot nobody reads), so a person is told even when every check
/// passed.
pub fn wal_resized(report: &VolumeReport, note: &str) -> Notice {
    let role = match report.role {
        crate::decide::VolumeRole::Wal => "WAL volume",
        _ => "data volume holding WAL",
    };
    Notice::warning(
        "WALVolumeResized",
        format!(
            "{role} grown ({note}): check WAL archiving and replication slots (headroom wal-health) before it grows again"
        ),
    )
}

/// A trigger the decision did not apply as written (an invalid `minAvailable`, or one the claim
/// cannot meet at its size): one Warning when it appears or changes, so a claim is never grown
/// (or left alone) on a line other than the one written without anyone being told.
pub fn fallback_notice(report: &VolumeReport) -> Option<Notice> {
    report
        .decision
        .fallback
        .map(|f| Notice::warning("PolicyFallback", f.message()))
}

/// What a decision has to say, if anything. Notes are stable across scans (no live usage
/// numbers), so the same situation is announced once.
pub fn notice_for(report: &VolumeReport) -> Option<Notice> {
    let Verdict::Blocked { reason } = report.decision.verdict else {
        return None;
    };
    // A hung mount matters more than any other reason not to act (a shared filesystem's or an
    // unexpandable class's): the workload on it is stuck too.
    if let Some(why) = report.not_measured
        && reason != BlockReason::Disabled
    {
        return Some(Notice::warning(
            "ProbeTimeout",
            format!(
                "the volume's mount at {} did not answer statfs within the probe deadline (hung storage?): not measured ({}), no action until it answers",
                report.mount_path.display(),
                why.as_str()
            ),
        ));
    }
    let limit = report
        .limit_bytes
        .map(quantity::format)
        .unwrap_or_else(|| "?".into());
    Some(match reason {
        BlockReason::Disabled | BlockReason::ResizeInProgress => return None,
        BlockReason::InvalidPolicy => invalid_policy(report),
        BlockReason::InternalError => internal_error(report),
        BlockReason::CapacityUnknown => Notice::warning(
            "CapacityUnknown",
            "the claim is bound but has no status.capacity.storage: its size is unknown, so headroom will not resize it".to_string(),
        ),
        BlockReason::AtLimit => Notice::warning(
            "AtLimit",
            format!("growth needed but the claim is at its limit of {limit}"),
        ),
        BlockReason::BudgetExhausted => Notice::warning(
            "BudgetExhausted",
            match report.decision.next_slot {
                Some(t) => {
                    format!("growth needed but the daily action budget is spent; next slot at {t}")
                }
                None => "growth needed but the daily action budget is spent".to_string(),
            },
        ),
        BlockReason::SharedFilesystem => shared_filesystem(report),
        // Stable text (the interval's end, not the time left), so it is announced once.
        BlockReason::ModificationInterval => Notice::warning(
            "ModificationInterval",
            match report.decision.next_grow {
                Some(t) => format!(
                    "growth needed, but the volume's storage would refuse another resize until {t} (modificationInterval, or its CSI driver's limit on resizes per day): none sent"
                ),
                None => "growth needed, but the volume's storage would refuse another resize (modificationInterval, or its CSI driver's limit on resizes per day): none sent".to_string(),
            },
        ),
        BlockReason::VolumeAttributesChanging => Notice::warning(
            "VolumeAttributesChanging",
            "growth needed, but the claim's VolumeAttributesClass is changing (spec.volumeAttributesClassName differs from status.currentVolumeAttributesClassName, or status.modifyVolumeStatus is set) and its storage would refuse a resize until that lands: none sent".to_string(),
        ),
        BlockReason::OutsideWindow | BlockReason::Cooldown => Notice {
            warning: false,
            reason: "ResizeBlocked",
            note: format!("growth planned, waiting: {reason}"),
        },
        BlockReason::ResizeFailed => resize_failed(report),
        BlockReason::AwaitingRemount | BlockReason::AwaitingDetach => awaiting_pod(report),
        BlockReason::AwaitingOwner => Notice::warning(
            "ExpansionAwaitingOwner",
            format!(
                "{}; its operator applies the owner's size to the claims: see the operator's log (docs/operations.md#growth-through-the-owner)",
                resize_failed(report).note
            ),
        ),
        BlockReason::OwnerReverted => owner_notice(report, "OwnerReverted"),
        BlockReason::OwnerInvalid => owner_notice(report, "OwnerInvalid"),
        BlockReason::QuotaExhausted => Notice::warning("QuotaExhausted", quota_note(report)),
        BlockReason::PoolExhausted => Notice::warning("PoolExhausted", pool_note(report)),
        BlockReason::WalSlotRetention => Notice::warning(
            "ResizeBlocked",
            format!("growth needed but blocked: {reason}{}", slot_over_limit(report)),
        ),
        other => Notice::warning(
            "ResizeBlocked",
            format!("growth needed but blocked: {other}"),
        ),
    })
}

/// Names the slot that blocks and the limit it passed (not its bytes, which move every scan:
/// the note must stay the same while the slot does, so it is announced once).
fn slot_over_limit(report: &VolumeReport) -> String {
    report
        .decision
        .notes
        .iter()
        .find_map(|n| match n {
            // The name is read from the tenant's volume: escaped, and as long as Postgres allows.
            Note::SlotOverLimit { name, limit, .. } => Some(format!(
                " (replication slot '{}', not seen in use, retains more WAL than walSafety.maxSlotRetentionBytes {}; drop it or bring its consumer back)",
                name.chars().take(63).collect::<String>().escape_debug(),
                quantity::format(*limit)
            )),
            _ => None,
        })
        .unwrap_or_default()
}

fn invalid_policy(report: &VolumeReport) -> Notice {
    let detail: Vec<String> = report
        .policy_errors
        .iter()
        .map(|f| format!("{}: {}", f.field, f.message))
        .collect();
    Notice::warning(
        "InvalidPolicy",
        format!("policy refused, no action: {}", detail.join("; ")),
    )
}

fn internal_error(report: &VolumeReport) -> Notice {
    let notes: Vec<String> = report
        .decision
        .notes
        .iter()
        .map(ToString::to_string)
        .collect();
    Notice::warning(
        "InternalError",
        format!(
            "headroom hit an internal error evaluating this claim and leaves it alone: {}",
            notes.join("; ")
        ),
    )
}

fn shared_filesystem(report: &VolumeReport) -> Notice {
    let others: Vec<String> = report
        .shared_with
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let with = if others.is_empty() {
        String::new()
    } else {
        format!(" with {}", others.join(", "))
    };
    Notice::warning(
        "SharedFilesystem",
        format!(
            "the volume's filesystem is shared ({}{with}): its numbers are not this claim's, headroom will not resize it",
            report.fs_class,
        ),
    )
}

/// The quota that blocks, with its numbers. The step wanted is left out: it moves with the
/// measurement, and the Event is said once per quota state, not once per scan.
fn quota_note(report: &VolumeReport) -> String {
    let Some(q) = &report.quota else {
        return "growth needed but the API server refused it as over the namespace's ResourceQuota; \
                no retry until the namespace's quotas change"
            .to_string();
    };
    let l = &q.line;
    let used = l
        .used_bytes
        .map_or_else(|| "not yet counted".to_string(), quantity::format);
    let refused = if q.refused {
        "; the API server refused the last grow, no retry until the namespace's quotas change"
    } else {
        ""
    };
    format!(
        "growth needed but ResourceQuota {} leaves {} of {} (used {} of {}): no step that would do fits{refused}",
        l.quota,
        quantity::format(q.left_bytes),
        l.resource,
        used,
        quantity::format(l.hard_bytes),
    )
}

/// The pool that blocks: its class, segment and source, its free bytes and the increase the grow
/// needed (a step, which moves only with the claim's size, so the Event is said once per pool
/// state).
fn pool_note(report: &VolumeReport) -> String {
    let needed = report.decision.notes.iter().find_map(|n| match n {
        Note::PoolShort { needed, room } => Some((*needed, *room)),
        _ => None,
    });
    let Some(p) = &report.pool else {
        return "growth needed but the storage pool has too little free: no step that would do fits"
            .to_string();
    };
    let max = p.max_volume_bytes.map_or_else(String::new, |m| {
        format!(", largest volume {}", quantity::format(m))
    });
    let (needed, room) = needed.unwrap_or_default();
    format!(
        "pool_exhausted: growth needed but the storage pool of StorageClass {} in segment {} ({}) has {} free{max}: the grow needs {}, the pool gives {} after poolReserve; no step that would do fits, not sent",
        p.class,
        p.segment,
        p.source,
        quantity::format(p.free_bytes),
        quantity::format(needed),
        quantity::format(room),
    )
}

/// A resize only a restart or a detach of the pod can finish: what it waits for, and what
/// finishes it (the runbook says the rest).
fn awaiting_pod(report: &VolumeReport) -> Notice {
    use crate::decide::restart::Restart;
    let Notice { reason, note, .. } = resize_failed(report);
    let restart = report.decision.restart;
    // The restart's name only, never its times: said once per state, not once per refusal.
    let next = match (report.decision.blocked_reason(), restart) {
        (Some(BlockReason::AwaitingDetach), _) => {
            "stop the pod until the claim's capacity shows the new size".to_string()
        }
        (_, None | Some(Restart::Off)) => {
            "restart the pod that mounts it, or set offlineExpansion: evict".to_string()
        }
        (_, Some(r)) => format!(
            "offlineExpansion: evict restarts the pod (restart: {})",
            r.as_str()
        ),
    };
    Notice::warning(
        reason,
        format!("{note}; to finish it: {next} (docs/operations.md#headroomresizestuck)"),
    )
}

/// What the owning cluster showed (`resizeThrough: owner`), as the engine's note says it.
fn owner_notice(report: &VolumeReport, reason: &'static str) -> Notice {
    let said = report.decision.notes.iter().find_map(|n| match n {
        crate::decide::Note::Owner(m) => Some(m.as_str()),
        _ => None,
    });
    Notice::warning(
        reason,
        format!("no growth through the owner: {}", said.unwrap_or("unknown")),
    )
}

/// The Event's reason names the failure's cause.
fn resize_failed(report: &VolumeReport) -> Notice {
    let (cause, detail) = match &report.claim.resize {
        ResizeState::Failed { cause, detail } => (Some(*cause), detail.as_str()),
        _ => (None, ""),
    };
    let reason = match cause {
        Some(FailureCause::Infeasible) => "ExpansionInfeasible",
        Some(FailureCause::FilesystemNotExpanded) => "FilesystemNotExpanded",
        Some(FailureCause::NeedsRemount) => "ExpansionAwaitingRemount",
        Some(FailureCause::NeedsDetach) => "ExpansionAwaitingDetach",
        _ => "ExpansionStuck",
    };
    Notice::warning(
        reason,
        format!("no further growth until this is resolved: {detail}"),
    )
}

/// Where Events go. Each is published through a recorder of its own: kube-runtime's `Recorder`
/// (5.0) counts a later Event with the same reason and action on the same object as a repeat of
/// the first (a `series`, within minutes) and keeps the first one's note, so a claim blocked for
/// `not_measured` and then for `wal_slot_retention` would still read `not_measured`, and a second
/// grow would repeat the first one's sizes. What is new is decided here ([`Events::update`]).
#[derive(Clone)]
pub struct Publisher {
    client: kube::Client,
    reporter: Reporter,
}

impl Publisher {
    pub fn new(client: kube::Client, node: &str) -> Self {
        Publisher {
            client,
            reporter: Reporter {
                controller: "headroom".into(),
                instance: Some(format!("headroom-{node}")),
            },
        }
    }

    /// Publishes one Event about `pvc`; a failure is logged, never fatal (Events are a
    /// courtesy).
    pub async fn publish(&self, pvc: &PersistentVolumeClaim, n: &Notice, action: &str) {
        let event = Event {
            type_: if n.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: n.reason.to_string(),
            note: Some(n.note.clone()),
            action: action.to_string(),
            secondary: None,
        };
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        if let Err(e) = recorder.publish(&event, &pvc.object_ref(&())).await {
            tracing::warn!(error = %e, reason = n.reason, "could not publish event");
        }
    }

    /// Creates one Event about `obj` (a claim, the agent's ConfigMap) named `name`, within
    /// `deadline`. The name is the same on every agent that would say it, so the agents that see
    /// one object post one Event between them: the API server refuses the others' creates with 409.
    pub async fn publish_named<K: kube::Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        name: &str,
        n: &Notice,
        deadline: std::time::Duration,
    ) -> Named {
        use k8s_openapi::api::events::v1::Event as K8sEvent;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
        let regarding = obj.object_ref(&());
        let event = K8sEvent {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: regarding.namespace.clone(),
                ..ObjectMeta::default()
            },
            action: Some("Report".into()),
            reason: Some(n.reason.into()),
            note: Some(n.note.clone()),
            type_: Some(if n.warning { "Warning" } else { "Normal" }.into()),
            event_time: Some(MicroTime(jiff::Timestamp::now())),
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: self.reporter.instance.clone(),
            regarding: Some(regarding),
            ..K8sEvent::default()
        };
        let ns = obj.meta().namespace.as_deref().unwrap_or_default();
        let api: kube::Api<K8sEvent> = kube::Api::namespaced(self.client.clone(), ns);
        let params = kube::api::PostParams::default();
        let create = api.create(&params, &event);
        match tokio::time::timeout(deadline, create).await {
            Ok(Ok(_)) => Named::Created,
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => Named::AlreadyExists,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, reason = n.reason, event = name, "could not create event");
                Named::Failed
            }
            Err(_) => {
                tracing::warn!(reason = n.reason, event = name, "creating event timed out");
                Named::Failed
            }
        }
    }
}

/// What became of an Event created under a name of its own ([`Publisher::publish_named`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Named {
    Created,
    /// An Event of that name exists: another agent created it.
    AlreadyExists,
    /// Refused, or not answered within the deadline (logged).
    Failed,
}

/// Publishes notices, remembering the last one per claim.
pub struct Events {
    publisher: Publisher,
    last: Mutex<HashMap<String, Option<Notice>>>,
}

impl Events {
    pub fn new(publisher: Publisher) -> Self {
        Events {
            publisher,
            last: Mutex::new(HashMap::new()),
        }
    }

    /// Records `notice` (or that there is nothing to say) for `key`; publishes only on change,
    /// and says whether it did (what else is told once per change, notifications, follows it).
    pub async fn update(
        &self,
        key: &str,
        pvc: &PersistentVolumeClaim,
        notice: Option<Notice>,
    ) -> bool {
        let changed = match self.last.lock() {
            Ok(mut last) => last.insert(key.to_string(), notice.clone()) != Some(notice.clone()),
            Err(_) => true,
        };
        match (changed, notice) {
            (true, Some(n)) => {
                self.publish(pvc, n).await;
                true
            }
            _ => false,
        }
    }

    /// Publishes unconditionally (actions are each worth an Event).
    pub async fn publish(&self, pvc: &PersistentVolumeClaim, n: Notice) {
        self.publisher.publish(pvc, &n, "Resize").await;
    }

    /// [`Publisher::publish_named`].
    pub fn publisher(&self) -> &Publisher {
        &self.publisher
    }

    /// Forgets claims no longer on this node.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        if let Ok(mut last) = self.last.lock() {
            last.retain(|k, _| keep(k));
        }
    }
}
