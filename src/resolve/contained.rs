//! The evaluation of a claim whose evaluation panicked: what the scan reports for it instead,
//! read from nothing but its name and the probe's measurement.

use std::collections::BTreeMap;

use jiff::Timestamp;

use super::evaluate::{Evaluation, Subject};
use crate::decide::{BlockReason, ClaimState, Decision, Note, ResizeState, VolumeRole};
use crate::report::{MeasuredBy, VolumeReport};

/// The evaluation of a claim whose evaluation panicked (`message`): blocked as `internal_error`,
/// with nothing read from its objects that could trip the same bug again.
pub fn internal_error(s: &Subject, message: String, now: Timestamp) -> Evaluation {
    let namespace = s.pvc.metadata.namespace.clone().unwrap_or_default();
    let pvc = s.pvc.metadata.name.clone().unwrap_or_default();
    let decision = Decision {
        notes: vec![Note::InternalError(message)],
        ..Decision::bare(crate::decide::Verdict::Blocked {
            reason: BlockReason::InternalError,
        })
    };
    let report = VolumeReport {
        namespace,
        pvc,
        pv: s.volume.pv.clone().unwrap_or_default(),
        node: s.node.to_string(),
        storage_class: None,
        role: VolumeRole::Other,
        tablespace: None,
        instance: None,
        postgres_cluster: None,
        mount_path: s.volume.path.clone(),
        fs_class: s.volume.class.as_str().to_string(),
        shared_with: s.volume.shared_with.clone(),
        measurement: s.volume.measurement,
        measured_by: if s.volume.measurement.is_some() {
            MeasuredBy::Statfs
        } else {
            MeasuredBy::None
        },
        measured_at: s.volume.measurement.map(|_| now),
        not_measured: s.volume.unmeasured,
        limit_bytes: None,
        provenance: BTreeMap::new(),
        policy_errors: Vec::new(),
        policy_warnings: Vec::new(),
        future_history: None,
        claim: ClaimState {
            request_bytes: 0,
            capacity_bytes: 0,
            resize: ResizeState::Idle,
        },
        decision,
        wal: None,
        last_action: None,
        fill_rate: None,
        quota: None,
        pool: None,
        logical: None,
        enforced: None,
        evaluated_at: now,
    };
    Evaluation {
        report,
        policy: None,
        history: Vec::new(),
        history_changed: false,
        action: None,
    }
}
