//! The lines threshold mode grows at, for one measurement: the percent line and the free-space
//! floor. The engine, the predictive trigger and the agent's measurement loop all read them
//! here, so the loop wakes exactly where the engine would grow.

use super::inputs::Measurement;
use crate::policy::defaults::USAGE_THRESHOLD;
use crate::policy::{Fallback, MinAvailable, Policy};

/// `minAvailable`, and whether it was written on the claim itself (see [`Lines::new`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Floor {
    pub value: MinAvailable,
    pub on_claim: bool,
}

impl Floor {
    /// A floor from a StorageClass, the ConfigMap or a policy file.
    pub fn inherited(value: MinAvailable) -> Floor {
        Floor {
            value,
            on_claim: false,
        }
    }
}

/// The space lines in force for one measurement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lines {
    /// Percent used at or above which to grow; `None`: no percent trigger.
    pub used_percent: Option<u8>,
    /// Free bytes below which to grow; 0: no floor.
    pub min_available: u64,
    /// A trigger not applied as written, and why.
    pub fallback: Option<Fallback>,
}

impl Lines {
    /// The lines of `policy`'s threshold mode over `m`.
    pub fn of(policy: &Policy, m: &Measurement) -> Lines {
        Lines::new(
            policy.usage_threshold,
            Floor {
                value: policy.min_available,
                on_claim: policy.floor_on_claim,
            },
            policy.fallback,
            m,
        )
    }

    /// A floor the volume could only meet with nothing stored (at least used + available) is
    /// not applied when it was inherited (a StorageClass's or the ConfigMap's): it would grow an
    /// empty claim action after action, and a floor written for every claim of a class or a
    /// fleet was never meant for one smaller than itself. The percent line stands in
    /// (usageThreshold, or its default when the floor was alone) until the claim is larger, and
    /// the fallback says so. A size floor written on the claim itself is applied as written: its
    /// owner asked for that much free, and step by step the claim grows to meet it. A percent
    /// floor grows with the volume, so one it cannot meet is never met by growing: not applied.
    pub fn new(
        used_percent: Option<u8>,
        floor: Floor,
        fallback: Option<Fallback>,
        m: &Measurement,
    ) -> Lines {
        let min_available = floor.value.bytes(m.capacity_bytes);
        let usable = m.used_bytes.saturating_add(m.available_bytes);
        let as_written = floor.on_claim && matches!(floor.value, MinAvailable::Bytes(_));
        if min_available > 0 && usable > 0 && min_available >= usable && !as_written {
            let pct = used_percent.unwrap_or(USAGE_THRESHOLD);
            return Lines {
                used_percent: Some(pct),
                min_available: 0,
                fallback: Some(Fallback::MinAvailableUnreachable {
                    min_available,
                    usable,
                    usage_threshold: pct,
                }),
            };
        }
        Lines {
            used_percent,
            min_available,
            fallback,
        }
    }

    /// The percent line as `Measurement::crosses` takes it (never crossed when there is none).
    pub fn percent(&self) -> f64 {
        self.used_percent.map_or(f64::INFINITY, f64::from)
    }

    /// At or past a line (or `inode_percent` of inodes used).
    pub fn crossed(&self, m: &Measurement, inode_percent: f64) -> bool {
        m.crosses(self.percent(), self.min_available, inode_percent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::{GI, MI};

    fn m(capacity: u64, used: u64) -> Measurement {
        Measurement {
            capacity_bytes: capacity,
            used_bytes: used,
            available_bytes: capacity - used,
            ..Measurement::default()
        }
    }

    #[test]
    fn a_floor_alone_is_purely_absolute() {
        // minAvailable alone: no percent line, so 99 % used with the floor met does not grow.
        let l = Lines::new(
            None,
            Floor::inherited(MinAvailable::Bytes(GI)),
            None,
            &m(100 * GI, 98 * GI),
        );
        assert_eq!(
            (l.used_percent, l.min_available, l.fallback),
            (None, GI, None)
        );
        assert!(!l.crossed(&m(100 * GI, 99 * GI), f64::INFINITY));
        assert!(l.crossed(&m(100 * GI, 99 * GI + 1), f64::INFINITY));
    }

    #[test]
    fn a_percent_floor_is_of_the_filesystems_size_and_strict() {
        // pvc-autoresizer's own cases: 10Gi, threshold 50 %: 5Gi free does not grow, one byte
        // less does.
        let floor = MinAvailable::Percent(50.0);
        let at = m(10 * GI, 5 * GI);
        assert!(!Lines::new(None, Floor::inherited(floor), None, &at).crossed(&at, f64::INFINITY));
        let under = m(10 * GI, 5 * GI + 1);
        assert!(
            Lines::new(None, Floor::inherited(floor), None, &under).crossed(&under, f64::INFINITY)
        );
    }

    #[test]
    fn a_floor_the_volume_cannot_meet_empty_falls_back_to_the_percent_line() {
        // The shipped 5Gi floor on an empty 1Gi claim: not applied, 80 % decides.
        let empty = m(GI, 0);
        let l = Lines::new(
            Some(80),
            Floor::inherited(MinAvailable::Bytes(5 * GI)),
            None,
            &empty,
        );
        assert_eq!(l.min_available, 0);
        assert_eq!(
            l.fallback,
            Some(Fallback::MinAvailableUnreachable {
                min_available: 5 * GI,
                usable: GI,
                usage_threshold: 80
            })
        );
        assert!(!l.crossed(&empty, f64::INFINITY));
        // Alone, the floor falls back to the default percent line.
        let l = Lines::new(
            None,
            Floor::inherited(MinAvailable::Bytes(5 * GI)),
            None,
            &m(GI, 900 * MI),
        );
        assert_eq!(l.used_percent, Some(USAGE_THRESHOLD));
        assert!(l.crossed(&m(GI, 900 * MI), f64::INFINITY));
        // Once the claim is larger than the floor, the floor applies again.
        let l = Lines::new(
            Some(80),
            Floor::inherited(MinAvailable::Bytes(5 * GI)),
            None,
            &m(6 * GI, 0),
        );
        assert_eq!((l.min_available, l.fallback), (5 * GI, None));
        // Unmeasured (all zeros): nothing to compare with.
        let l = Lines::new(
            Some(80),
            Floor::inherited(MinAvailable::Bytes(5 * GI)),
            None,
            &m(0, 0),
        );
        assert_eq!(l.fallback, None);
    }

    #[test]
    fn a_size_floor_written_on_the_claim_applies_as_written() {
        // headroom.dev/min-available: 5Gi on an empty 1Gi claim: crossed, no fallback, so the
        // claim grows by its step until 5Gi are free.
        let own = Floor {
            value: MinAvailable::Bytes(5 * GI),
            on_claim: true,
        };
        let empty = m(GI, 0);
        let l = Lines::new(Some(80), own, None, &empty);
        assert_eq!((l.min_available, l.fallback), (5 * GI, None));
        assert!(l.crossed(&empty, f64::INFINITY));
        // Met once the claim is large enough.
        assert!(!l.crossed(&m(6 * GI, GI), f64::INFINITY));
        // A percent floor grows with the volume: one it cannot meet, growing never meets.
        let pct = Floor {
            value: MinAvailable::Percent(99.0),
            on_claim: true,
        };
        let reserved = Measurement {
            capacity_bytes: 100 * GI,
            used_bytes: 0,
            available_bytes: 95 * GI,
            ..Measurement::default()
        };
        let l = Lines::new(None, pct, None, &reserved);
        assert_eq!(l.min_available, 0);
        assert!(l.fallback.is_some());
    }
}
