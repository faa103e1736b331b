//! WAL safety: growth must not hide a volume that fills because WAL cannot be recycled.

use super::decision::BlockReason;
use super::inputs::{Inputs, VolumeRole};
use crate::policy::Policy;

/// Returns the reason growth of a WAL-holding volume is unsafe, adding notes where health is
/// unknown (fail open: a database that does not answer must not stop an emergency).
pub fn gate(inputs: &Inputs, policy: &Policy, notes: &mut Vec<String>) -> Option<BlockReason> {
    let safety = &policy.wal_safety;
    if inputs.facts.role == VolumeRole::Data
        && inputs.facts.wal_on_data
        && !safety.acknowledge_wal_risk
    {
        return Some(BlockReason::WalRiskNotAcknowledged);
    }
    let Some(wal) = inputs.wal else {
        notes.push("WAL health unknown: growing anyway (fail open)".to_string());
        return None;
    };
    if wal
        .pending_files
        .is_some_and(|n| n > safety.max_pending_wal_files)
    {
        return Some(BlockReason::WalPendingFiles);
    }
    match (wal.archive_configured, wal.archive_healthy) {
        (Some(false), _) => notes.push(
            "WAL archiving is not configured: requireArchiveHealthy does not block".to_string(),
        ),
        (_, Some(false)) if safety.require_archive_healthy => {
            return Some(BlockReason::WalArchiveUnhealthy);
        }
        (_, None) => {
            notes.push("WAL archive health unknown: growing anyway (fail open)".to_string())
        }
        _ => {}
    }
    match &wal.inactive_slots {
        Some(slots) => {
            if slots
                .iter()
                .any(|s| s.retained_bytes > safety.max_slot_retention_bytes)
            {
                return Some(BlockReason::WalSlotRetention);
            }
        }
        None => notes.push("replication slots unknown: growing anyway (fail open)".to_string()),
    }
    None
}
