//! The storage pool a node-local volume is carved from (a volume group, a thin pool, a ZFS
//! pool): how large a grow the pool can still give, as its driver publishes it
//! (`CSIStorageCapacity.capacity` and `maximumVolumeSize`, or TopoLVM's node annotation). A
//! grow past it is refused by `ControllerExpandVolume` (`ResourceExhausted`, `OutOfRange`) and
//! left `ControllerResizeInfeasible`, so it is cut to fit or not sent.

use serde::{Deserialize, Serialize};

use crate::policy::PoolReserve;

/// What the pool admits, in numbers alone: what the engine is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolRoom {
    /// Bytes a volume may still take from the pool (an expansion takes its increase).
    pub free_bytes: u64,
    /// The largest volume the driver creates in it, when it says.
    pub max_volume_bytes: Option<u64>,
}

/// The largest size the pool admits for a volume of `current` bytes: its free bytes less the
/// reserve on top of the volume, and no more than the largest volume.
pub fn ceiling(room: PoolRoom, current: u64, reserve: PoolReserve) -> u64 {
    let usable = room
        .free_bytes
        .saturating_sub(reserve.bytes(room.free_bytes));
    let by_free = current.saturating_add(usable);
    room.max_volume_bytes.map_or(by_free, |m| by_free.min(m))
}

/// The pool behind a claim as it was read, for its status, its Event, its metric and
/// `/volumes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolView {
    /// The claim's StorageClass.
    pub class: String,
    /// The topology segment: the matched object's node selector, or the node whose annotation
    /// was read.
    pub segment: String,
    /// Where the numbers come from: `CSIStorageCapacity <namespace>/<name>` or
    /// `Node <name> annotation <key>`.
    pub source: String,
    pub free_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_volume_bytes: Option<u64>,
}

impl PoolView {
    pub fn room(&self) -> PoolRoom {
        PoolRoom {
            free_bytes: self.free_bytes,
            max_volume_bytes: self.max_volume_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::GI;

    fn room(free: u64, max: Option<u64>) -> PoolRoom {
        PoolRoom {
            free_bytes: free,
            max_volume_bytes: max,
        }
    }

    #[test]
    fn the_ceiling_is_the_volume_plus_the_free_less_the_reserve() {
        let none = PoolReserve::Bytes(0);
        assert_eq!(ceiling(room(5 * GI, None), 10 * GI, none), 15 * GI);
        let two = PoolReserve::Bytes(2 * GI);
        assert_eq!(ceiling(room(5 * GI, None), 10 * GI, two), 13 * GI);
        // A reserve larger than the free space leaves the volume as it is.
        assert_eq!(ceiling(room(GI, None), 10 * GI, two), 10 * GI);
        let tenth = PoolReserve::Percent(10.0);
        assert_eq!(ceiling(room(10 * GI, None), 10 * GI, tenth), 19 * GI);
    }

    #[test]
    fn the_largest_volume_caps_the_ceiling() {
        let none = PoolReserve::Bytes(0);
        assert_eq!(
            ceiling(room(100 * GI, Some(12 * GI)), 10 * GI, none),
            12 * GI
        );
        // A volume already past it has no room at all.
        assert_eq!(ceiling(room(100 * GI, Some(8 * GI)), 10 * GI, none), 8 * GI);
    }

    #[test]
    fn huge_numbers_saturate() {
        let none = PoolReserve::Bytes(0);
        assert_eq!(ceiling(room(u64::MAX, None), u64::MAX, none), u64::MAX);
        let p = PoolReserve::Percent(99.9);
        assert!(ceiling(room(u64::MAX, None), 0, p) < u64::MAX);
    }
}
