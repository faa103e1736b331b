//! The engine's answer for a volume holding WAL, for the WAL tests: one decision for a 10 GiB
//! volume at 90 % (growth needed, not an emergency), with the WAL limits given.
#![allow(dead_code)]

use headroom::decide::{
    ClaimState, Decision, Inputs, Measurement, PolicyInput, ResizeState, VolumeFacts, VolumeRole,
    WalHealth, decide,
};
use headroom::policy::Policy;
use jiff::Timestamp;

pub const GI: u64 = 1 << 30;

/// `role` is `Wal` (a WAL volume) or `Data` (a data volume holding its WAL).
pub fn decide_with(
    wal: &WalHealth,
    role: VolumeRole,
    acknowledge: bool,
    max_pending: u64,
    max_slot: u64,
) -> Decision {
    let mut policy = Policy {
        enabled: true,
        ..Policy::with_limit(100 * GI)
    };
    policy.wal_safety.acknowledge_wal_risk = acknowledge;
    policy.wal_safety.max_pending_wal_files = max_pending;
    policy.wal_safety.max_slot_retention_bytes = Some(max_slot);
    let claim = ClaimState {
        request_bytes: 10 * GI,
        capacity_bytes: 10 * GI,
        resize: ResizeState::Idle,
    };
    let measurement = Measurement {
        capacity_bytes: 10 * GI,
        used_bytes: 9 * GI,
        available_bytes: GI,
        inodes_total: 1_000_000,
        inodes_used: 1_000,
    };
    let facts = VolumeFacts {
        role,
        wal_on_data: role == VolumeRole::Data,
        expandable: true,
        ..Default::default()
    };
    decide(&Inputs {
        logical: None,
        policy: PolicyInput::Valid(&policy),
        measurement,
        claim: &claim,
        history: &[],
        wal: Some(wal),
        facts,
        now: Timestamp::now(),
        fill_rate: None,
    })
}
