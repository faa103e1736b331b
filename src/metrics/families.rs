//! The per-volume gauge families: name, help and the labels after the volume's own, each with
//! its place in [`FAMILIES`], the table the collector describes and serves from.

/// A family of per-volume series with `N` labels after the volume's own ([`VolumeLabels`]):
/// a sample of it gives exactly `N` values, by type.
pub(super) struct Family<const N: usize> {
    /// Its place in [`FAMILIES`].
    pub(super) index: usize,
    pub(super) name: &'static str,
    pub(super) help: &'static str,
    extra: [&'static str; N],
}

/// A family without its label count, for the collector's table.
pub(super) struct Meta {
    pub(super) name: &'static str,
    pub(super) help: &'static str,
    pub(super) extra: &'static [&'static str],
}

impl<const N: usize> Family<N> {
    pub(super) const fn meta(&'static self) -> Meta {
        Meta {
            name: self.name,
            help: self.help,
            extra: &self.extra,
        }
    }
}

pub(super) const INFO: Family<5> = Family {
    index: 0,
    name: "headroom_volume_info",
    help: "Always 1; labels describe the volume (pv, storage_class, fs_class, measured_by, postgres_cluster).",
    extra: [
        "pv",
        "storage_class",
        "fs_class",
        "measured_by",
        "postgres_cluster",
    ],
};

pub(super) const CAPACITY: Family<0> = Family {
    index: 1,
    name: "headroom_volume_capacity_bytes",
    help: "Filesystem size seen by statfs (or the kubelet as fallback).",
    extra: [],
};

pub(super) const USED: Family<0> = Family {
    index: 2,
    name: "headroom_volume_used_bytes",
    help: "Bytes used.",
    extra: [],
};

pub(super) const AVAILABLE: Family<0> = Family {
    index: 3,
    name: "headroom_volume_available_bytes",
    help: "Bytes available to unprivileged users (statfs f_bavail).",
    extra: [],
};

pub(super) const USED_RATIO: Family<0> = Family {
    index: 4,
    name: "headroom_volume_used_ratio",
    help: "Fraction used, 0-1, like df: used / (used + available).",
    extra: [],
};

pub(super) const INODES_TOTAL: Family<0> = Family {
    index: 5,
    name: "headroom_volume_inodes",
    help: "Inodes in total.",
    extra: [],
};

pub(super) const INODES_USED: Family<0> = Family {
    index: 6,
    name: "headroom_volume_inodes_used",
    help: "Inodes used.",
    extra: [],
};

pub(super) const INODES_FREE: Family<0> = Family {
    index: 7,
    name: "headroom_volume_inodes_free",
    help: "Inodes free.",
    extra: [],
};

pub(super) const LIMIT: Family<0> = Family {
    index: 8,
    name: "headroom_volume_limit_bytes",
    help: "The policy's limit: headroom never grows the claim past it.",
    extra: [],
};

pub(super) const AT_LIMIT: Family<0> = Family {
    index: 9,
    name: "headroom_volume_at_limit",
    help: "1 when the claim's size has reached the policy's limit.",
    extra: [],
};

pub(super) const SHARED: Family<0> = Family {
    index: 10,
    name: "headroom_volume_shared_filesystem",
    help: "1 when the filesystem is shared (network share, directory on a larger filesystem): its numbers are not the claim's own and headroom does not act.",
    extra: [],
};

pub(super) const EFFECTIVE_SIZE: Family<0> = Family {
    index: 11,
    name: "headroom_volume_effective_size_bytes",
    help: "The claim's size: the larger of its request and its reported capacity.",
    extra: [],
};

pub(super) const TARGET_SIZE: Family<0> = Family {
    index: 12,
    name: "headroom_volume_target_size_bytes",
    help: "Convergent mode: the size the volume converges to.",
    extra: [],
};

pub(super) const SECONDS_TO_FULL: Family<0> = Family {
    index: 13,
    name: "headroom_volume_seconds_to_full",
    help: "At the volume's estimated fill rate, seconds until it is full; absent when the rate is unknown or the volume is not filling.",
    extra: [],
};

pub(super) const STATE: Family<1> = Family {
    index: 14,
    name: "headroom_volume_state",
    help: "1 for the volume's current state, 0 for the others.",
    extra: ["state"],
};

pub(super) const BUDGET: Family<0> = Family {
    index: 15,
    name: "headroom_volume_resize_budget_remaining",
    help: "Resizes left in the rolling 24 h budget (emergency reserve included).",
    extra: [],
};

pub(super) const BLOCKED: Family<1> = Family {
    index: 16,
    name: "headroom_volume_resize_blocked",
    help: "1 for the reason growth is blocked, 0 for the other reasons.",
    extra: ["reason"],
};

pub(super) const WAL_ARCHIVE_CONFIGURED: Family<0> = Family {
    index: 17,
    name: "headroom_wal_archive_configured",
    help: "1 when WAL archiving is configured on the Postgres instance of this volume.",
    extra: [],
};

pub(super) const WAL_ARCHIVE_HEALTHY: Family<0> = Family {
    index: 18,
    name: "headroom_wal_archive_healthy",
    help: "1 when WAL archiving keeps up (last failure older than last success, backlog within bounds).",
    extra: [],
};

pub(super) const WAL_PENDING: Family<0> = Family {
    index: 19,
    name: "headroom_wal_pending_archive_files",
    help: "WAL segments waiting to be archived (.ready files).",
    extra: [],
};

pub(super) const WAL_OLDEST_PENDING: Family<0> = Family {
    index: 20,
    name: "headroom_wal_oldest_pending_seconds",
    help: "Age of the oldest WAL segment waiting to be archived.",
    extra: [],
};

pub(super) const WAL_INACTIVE_SLOTS: Family<0> = Family {
    index: 21,
    name: "headroom_wal_inactive_slots",
    help: "Inactive replication slots holding WAL back.",
    extra: [],
};

pub(super) const WAL_SLOT_RETENTION: Family<1> = Family {
    index: 22,
    name: "headroom_wal_slot_retention_bytes",
    help: "WAL an inactive replication slot retains.",
    extra: ["slot"],
};

pub(super) const WAL_SIZE: Family<0> = Family {
    index: 23,
    name: "headroom_wal_size_bytes",
    help: "Bytes of WAL segments in pg_wal on this volume.",
    extra: [],
};

pub(super) const HISTORY_IGNORED: Family<0> = Family {
    index: 24,
    name: "headroom_volume_invalid_history",
    help: "1 when entries of the claim's headroom.dev/history were ignored (dated too far in the future).",
    extra: [],
};

pub(super) const MEASURED_AT: Family<0> = Family {
    index: 25,
    name: "headroom_volume_measured_timestamp_seconds",
    help: "Unix time of the volume's last measurement; older than the last scan means its numbers are stale (probe timed out or failed).",
    extra: [],
};

pub(super) const NOT_MEASURED: Family<1> = Family {
    index: 26,
    name: "headroom_volume_not_measured",
    help: "1 with the reason the probe could not measure a volume it should have (probe_timeout: statfs did not answer in time).",
    extra: ["reason"],
};

pub(super) const LAST_RESIZE: Family<1> = Family {
    index: 27,
    name: "headroom_volume_last_resize_timestamp_seconds",
    help: "Unix time the claim's newest resize reached the filesystem (its history's landed time), by kind; absent until it has.",
    extra: ["kind"],
};

pub(super) const POLICY_FALLBACK: Family<1> = Family {
    index: 28,
    name: "headroom_volume_policy_fallback",
    help: "1 for the reason a trigger is not applied as written (min_available_invalid: minAvailable could not be read; min_available_unreachable: the claim could not meet it even empty), 0 for the other reason; the percent trigger stands in.",
    extra: ["reason"],
};

pub(super) const QUOTA_LEFT: Family<2> = Family {
    index: 29,
    name: "headroom_volume_quota_left_bytes",
    help: "Bytes the claim's request may still grow by under the namespace's tightest ResourceQuota line (0 after the API server refused a grow as over quota, until the quotas change); absent when no quota limits the claim.",
    extra: ["quota", "resource"],
};

pub(super) const SECONDS_TO_LIMIT: Family<0> = Family {
    index: 30,
    name: "headroom_volume_seconds_to_limit",
    help: "At the pace the claim (or its logical volume) was grown over the last week (its headroom.dev/history), seconds until it reaches its limit; 0 at the limit, absent while unknown (not grown in the last week).",
    extra: [],
};

pub(super) const RESTART: Family<1> = Family {
    index: 31,
    name: "headroom_volume_restart",
    help: "For a resize waiting for a remount (blocked reason awaiting_remount): 1 for what headroom does about the pod (evict, off, not_ours, evicted, node_draining, refused, peer_first, outside_window), 0 for the rest; absent otherwise.",
    extra: ["restart"],
};

pub(super) const RECOMMENDED: Family<0> = Family {
    index: 32,
    name: "headroom_volume_recommended_bytes",
    help: "enforcement recommend or approve: the size of the grow waiting for a person (the claim's status annotation has its id); absent when none waits.",
    extra: [],
};

pub(super) const POOL_FREE: Family<2> = Family {
    index: 33,
    name: "headroom_volume_pool_free_bytes",
    help: "Bytes free in the storage pool the claim is carved from, as last read (its class's CSIStorageCapacity for this node's segment, read for a decision that would grow, or TopoLVM's node annotation), before poolReserve; absent when the driver publishes nothing for this node.",
    extra: ["segment", "source"],
};

pub(super) const FAMILIES: [Meta; 34] = [
    INFO.meta(),
    CAPACITY.meta(),
    USED.meta(),
    AVAILABLE.meta(),
    USED_RATIO.meta(),
    INODES_TOTAL.meta(),
    INODES_USED.meta(),
    INODES_FREE.meta(),
    LIMIT.meta(),
    AT_LIMIT.meta(),
    SHARED.meta(),
    EFFECTIVE_SIZE.meta(),
    TARGET_SIZE.meta(),
    SECONDS_TO_FULL.meta(),
    STATE.meta(),
    BUDGET.meta(),
    BLOCKED.meta(),
    WAL_ARCHIVE_CONFIGURED.meta(),
    WAL_ARCHIVE_HEALTHY.meta(),
    WAL_PENDING.meta(),
    WAL_OLDEST_PENDING.meta(),
    WAL_INACTIVE_SLOTS.meta(),
    WAL_SLOT_RETENTION.meta(),
    WAL_SIZE.meta(),
    HISTORY_IGNORED.meta(),
    MEASURED_AT.meta(),
    NOT_MEASURED.meta(),
    LAST_RESIZE.meta(),
    POLICY_FALLBACK.meta(),
    QUOTA_LEFT.meta(),
    SECONDS_TO_LIMIT.meta(),
    RESTART.meta(),
    RECOMMENDED.meta(),
    POOL_FREE.meta(),
];
