//! WAL safety: growth must not hide a volume that fills because WAL cannot be recycled.

use super::decision::{BlockReason, Note};
use super::inputs::{Inputs, VolumeRole};
use super::wal_inputs::SlotActivity;
use crate::policy::Policy;

/// Returns the reason growth of a WAL-holding volume is unsafe, adding notes where health is
/// unknown (fail open: a database that does not answer must not stop an emergency).
pub fn gate(inputs: &Inputs, policy: &Policy, notes: &mut Vec<Note>) -> Option<BlockReason> {
    let safety = &policy.wal_safety;
    if inputs.facts.role == VolumeRole::Data
        && inputs.facts.wal_on_data
        && !safety.acknowledge_wal_risk
    {
        return Some(BlockReason::WalRiskNotAcknowledged);
    }
    let Some(wal) = inputs.wal else {
        notes.push(Note::WalHealthUnknown);
        return None;
    };
    // A server that does not archive (a standby with `archive_mode: on`) has no backlog to be
    // at fault: leftover `.ready` files are not a pile-up.
    let max = safety.max_pending_wal_files;
    if wal.archive_configured != Some(false)
        && max > 0
        && let Some(n) = wal.pending_files.filter(|&n| n > max)
    {
        notes.push(Note::PendingOverLimit { pending: n, max });
        return Some(BlockReason::WalPendingFiles);
    }
    match (wal.archive_configured, wal.archive_healthy) {
        (Some(false), _) => notes.push(Note::ArchiveNotConfigured),
        (_, Some(false)) if safety.require_archive_healthy => {
            notes.extend(
                wal.detail
                    .problems
                    .iter()
                    .cloned()
                    .map(Note::ArchiveProblem),
            );
            return Some(BlockReason::WalArchiveUnhealthy);
        }
        (_, None) => notes.push(Note::ArchiveHealthUnknown),
        _ => {}
    }
    slots(wal, safety.max_slot_retention_bytes, notes)
}

/// A slot not known to be in use that holds back more WAL than the limit blocks growth: one
/// still unknown counts too (the volume has not yet seen it move), so a stuck slot blocks from
/// the first scan, and a slot in use unblocks once it is seen moving.
fn slots(
    wal: &super::wal_inputs::WalHealth,
    limit: Option<u64>,
    notes: &mut Vec<Note>,
) -> Option<BlockReason> {
    let limit = limit.filter(|&l| l > 0)?;
    let Some(slots) = &wal.inactive_slots else {
        notes.push(Note::SlotsUnknown);
        return None;
    };
    let over = slots.iter().find(|s| s.retained_bytes > limit)?;
    notes.push(Note::SlotOverLimit {
        name: over.name.clone(),
        unknown: over.activity == SlotActivity::Unknown,
        retained: over.retained_bytes,
        limit,
    });
    Some(BlockReason::WalSlotRetention)
}
