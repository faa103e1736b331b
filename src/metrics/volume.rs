//! Per-volume series: one gauge family per measured or decided value, rebuilt every scan.

use prometheus::GaugeVec;

use super::{BLOCKED_STATE, Builder, MetricsError, bool_f, set, set_opt};
use crate::decide::{BlockReason, State, Verdict};
use crate::report::{INVALID_HISTORY, VolumeReport};

pub(super) struct VolumeGauges {
    info: GaugeVec,
    capacity: GaugeVec,
    used: GaugeVec,
    available: GaugeVec,
    used_ratio: GaugeVec,
    inodes_total: GaugeVec,
    inodes_used: GaugeVec,
    inodes_free: GaugeVec,
    limit: GaugeVec,
    at_limit: GaugeVec,
    shared: GaugeVec,
    effective_size: GaugeVec,
    target_size: GaugeVec,
    seconds_to_full: GaugeVec,
    state: GaugeVec,
    budget: GaugeVec,
    blocked: GaugeVec,
    wal_archive_configured: GaugeVec,
    wal_archive_healthy: GaugeVec,
    wal_pending: GaugeVec,
    wal_oldest_pending: GaugeVec,
    wal_inactive_slots: GaugeVec,
    wal_slot_retention: GaugeVec,
    wal_size: GaugeVec,
    invalid_history: GaugeVec,
    measured_at: GaugeVec,
    not_measured: GaugeVec,
}

impl VolumeGauges {
    pub(super) fn all(&self) -> [&GaugeVec; 27] {
        [
            &self.info,
            &self.capacity,
            &self.used,
            &self.available,
            &self.used_ratio,
            &self.inodes_total,
            &self.inodes_used,
            &self.inodes_free,
            &self.limit,
            &self.at_limit,
            &self.shared,
            &self.effective_size,
            &self.target_size,
            &self.seconds_to_full,
            &self.state,
            &self.budget,
            &self.blocked,
            &self.wal_archive_configured,
            &self.wal_archive_healthy,
            &self.wal_pending,
            &self.wal_oldest_pending,
            &self.wal_inactive_slots,
            &self.wal_slot_retention,
            &self.wal_size,
            &self.invalid_history,
            &self.measured_at,
            &self.not_measured,
        ]
    }

    pub(super) fn new(b: &Builder) -> Result<VolumeGauges, MetricsError> {
        Ok(VolumeGauges {
            info: b.gauge_vec(
                "headroom_volume_info",
                "Always 1; labels describe the volume (pv, storage_class, fs_class, measured_by, postgres_cluster).",
                &["pv", "storage_class", "fs_class", "measured_by", "postgres_cluster"],
            )?,
            capacity: b.gauge_vec(
                "headroom_volume_capacity_bytes",
                "Filesystem size seen by statfs (or the kubelet as fallback).",
                &[],
            )?,
            used: b.gauge_vec("headroom_volume_used_bytes", "Bytes used.", &[])?,
            available: b.gauge_vec(
                "headroom_volume_available_bytes",
                "Bytes available to unprivileged users (statfs f_bavail).",
                &[],
            )?,
            used_ratio: b.gauge_vec(
                "headroom_volume_used_ratio",
                "Fraction used, 0-1, like df: used / (used + available).",
                &[],
            )?,
            inodes_total: b.gauge_vec("headroom_volume_inodes", "Inodes in total.", &[])?,
            inodes_used: b.gauge_vec("headroom_volume_inodes_used", "Inodes used.", &[])?,
            inodes_free: b.gauge_vec("headroom_volume_inodes_free", "Inodes free.", &[])?,
            limit: b.gauge_vec(
                "headroom_volume_limit_bytes",
                "The policy's limit: headroom never grows the claim past it.",
                &[],
            )?,
            at_limit: b.gauge_vec(
                "headroom_volume_at_limit",
                "1 when the claim's size has reached the policy's limit.",
                &[],
            )?,
            shared: b.gauge_vec(
                "headroom_volume_shared_filesystem",
                "1 when the filesystem is shared (network share, directory on a larger filesystem): its numbers are not the claim's own and headroom does not act.",
                &[],
            )?,
            effective_size: b.gauge_vec(
                "headroom_volume_effective_size_bytes",
                "The claim's size: the larger of its request and its reported capacity.",
                &[],
            )?,
            target_size: b.gauge_vec(
                "headroom_volume_target_size_bytes",
                "Convergent mode: the size the volume converges to.",
                &[],
            )?,
            seconds_to_full: b.gauge_vec(
                "headroom_volume_seconds_to_full",
                "At the volume's estimated fill rate, seconds until it is full; absent when the rate is unknown or the volume is not filling.",
                &[],
            )?,
            state: b.gauge_vec(
                "headroom_volume_state",
                "1 for the volume's current state, 0 for the others.",
                &["state"],
            )?,
            budget: b.gauge_vec(
                "headroom_volume_resize_budget_remaining",
                "Resizes left in the rolling 24 h budget (emergency reserve included).",
                &[],
            )?,
            blocked: b.gauge_vec(
                "headroom_volume_resize_blocked",
                "1 for the reason growth is blocked, 0 for the other reasons.",
                &["reason"],
            )?,
            wal_archive_configured: b.gauge_vec(
                "headroom_wal_archive_configured",
                "1 when WAL archiving is configured on the Postgres instance of this volume.",
                &[],
            )?,
            wal_archive_healthy: b.gauge_vec(
                "headroom_wal_archive_healthy",
                "1 when WAL archiving keeps up (last failure older than last success, backlog within bounds).",
                &[],
            )?,
            wal_pending: b.gauge_vec(
                "headroom_wal_pending_archive_files",
                "WAL segments waiting to be archived (.ready files).",
                &[],
            )?,
            wal_oldest_pending: b.gauge_vec(
                "headroom_wal_oldest_pending_seconds",
                "Age of the oldest WAL segment waiting to be archived.",
                &[],
            )?,
            wal_inactive_slots: b.gauge_vec(
                "headroom_wal_inactive_slots",
                "Inactive replication slots holding WAL back.",
                &[],
            )?,
            wal_slot_retention: b.gauge_vec(
                "headroom_wal_slot_retention_bytes",
                "WAL an inactive replication slot retains.",
                &["slot"],
            )?,
            wal_size: b.gauge_vec(
                "headroom_wal_size_bytes",
                "Bytes of WAL segments in pg_wal on this volume.",
                &[],
            )?,
            invalid_history: b.gauge_vec(
                "headroom_volume_invalid_history",
                "1 when entries of the claim's headroom.dev/history were ignored (dated too far in the future).",
                &[],
            )?,
            measured_at: b.gauge_vec(
                "headroom_volume_measured_timestamp_seconds",
                "Unix time of the volume's last measurement; older than the last scan means its numbers are stale (probe timed out or failed).",
                &[],
            )?,
            not_measured: b.gauge_vec(
                "headroom_volume_not_measured",
                "1 with the reason the probe could not measure a volume it should have (probe_timeout: statfs did not answer in time).",
                &["reason"],
            )?,
        })
    }

    /// `measured_at`: the report's measurement time, or the last one remembered for the volume.
    pub(super) fn set(&self, r: &VolumeReport, measured_at: Option<f64>) {
        let g = self;
        let l = [r.namespace.as_str(), r.pvc.as_str(), r.role.as_str()];
        set_opt(&g.measured_at, &l, measured_at);
        if let Some(why) = r.not_measured {
            set(&g.not_measured, &[&l[..], &[why.as_str()]].concat(), 1.0);
        }
        let measured_by = serde_json::to_value(r.measured_by)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let info = [
            r.pv.as_str(),
            r.storage_class.as_deref().unwrap_or(""),
            r.fs_class.as_str(),
            measured_by.as_str(),
            r.postgres_cluster.as_deref().unwrap_or(""),
        ];
        set(&g.info, &[&l[..], &info[..]].concat(), 1.0);
        if let Some(m) = &r.measurement {
            set(&g.capacity, &l, m.capacity_bytes as f64);
            set(&g.used, &l, m.used_bytes as f64);
            set(&g.available, &l, m.available_bytes as f64);
            set(&g.used_ratio, &l, m.used_percent() / 100.0);
            // Filesystems without an inode limit (btrfs) report 0 inodes: unknown, not full.
            if m.inodes_total > 0 {
                set(&g.inodes_total, &l, m.inodes_total as f64);
                set(&g.inodes_used, &l, m.inodes_used as f64);
                let free = m.inodes_total.saturating_sub(m.inodes_used);
                set(&g.inodes_free, &l, free as f64);
            }
        }
        let invalid_history = r
            .policy_warnings
            .iter()
            .any(|f| f.message.starts_with(INVALID_HISTORY));
        set(&g.invalid_history, &l, bool_f(invalid_history));
        let size = r.claim.current_bytes();
        if let Some(limit) = r.limit_bytes {
            set(&g.limit, &l, limit as f64);
            set(&g.at_limit, &l, bool_f(size >= limit));
        }
        set(&g.shared, &l, bool_f(is_shared(r)));
        if size > 0 {
            set(&g.effective_size, &l, size as f64);
        }
        set_opt(
            &g.target_size,
            &l,
            r.decision.target_bytes.map(|b| b as f64),
        );
        set_opt(&g.seconds_to_full, &l, r.decision.seconds_to_full);
        let current = state_label(&r.decision.verdict);
        let states = State::ALL.iter().map(|s| s.as_str());
        for s in states.chain([BLOCKED_STATE]) {
            set(&g.state, &[&l[..], &[s]].concat(), bool_f(s == current));
        }
        let reason = r.decision.blocked_reason();
        // A disabled or invalid policy (or an evaluation that failed) has no budget; its 0 would
        // read as "exhausted".
        if !matches!(
            reason,
            Some(BlockReason::Disabled | BlockReason::InvalidPolicy | BlockReason::InternalError)
        ) {
            set(&g.budget, &l, f64::from(r.decision.budget_left));
        }
        for b in BlockReason::ALL {
            let labels = [&l[..], &[b.as_str()]].concat();
            set(&g.blocked, &labels, bool_f(reason == Some(b)));
        }
        if let Some(w) = &r.wal {
            set_opt(
                &g.wal_archive_configured,
                &l,
                w.archive_configured.map(bool_f),
            );
            set_opt(&g.wal_archive_healthy, &l, w.archive_healthy.map(bool_f));
            set_opt(&g.wal_pending, &l, w.pending_files.map(|n| n as f64));
            let oldest = w.oldest_pending_seconds.map(|n| n as f64);
            set_opt(&g.wal_oldest_pending, &l, oldest);
            set_opt(&g.wal_size, &l, w.detail.wal_bytes.map(|n| n as f64));
            if let Some(slots) = &w.inactive_slots {
                set(&g.wal_inactive_slots, &l, slots.len() as f64);
                for s in slots {
                    let labels = [&l[..], &[s.name.as_str()]].concat();
                    set(&g.wal_slot_retention, &labels, s.retained_bytes as f64);
                }
            }
        }
    }
}

/// The state shown for a volume: the engine's state, or [`BLOCKED_STATE`].
pub fn state_label(verdict: &Verdict) -> &'static str {
    match verdict {
        Verdict::NoAction { state } => state.as_str(),
        Verdict::Grow { .. } => State::NeedsGrow.as_str(),
        Verdict::Blocked { .. } => BLOCKED_STATE,
    }
}

/// The numbers are a filesystem's shared with other claims (or the host), not this claim's own.
pub fn is_shared(r: &VolumeReport) -> bool {
    matches!(r.fs_class.as_str(), "shared_network" | "directory")
        || !r.shared_with.is_empty()
        || r.decision.blocked_reason() == Some(BlockReason::SharedFilesystem)
}
