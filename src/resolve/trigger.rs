//! Which lines a volume's numbers wake the loop for, from its effective policy: the engine's own
//! lines (threshold mode), the emergency line (convergent mode), and with `trigger.predictive`
//! the same lead the engine uses. Past its line, a claim whose growth is held (the node drains,
//! a group member waits for its window) is still watched for the emergency line, which lifts
//! those holds: [`Level`]. Also how soon a volume is measured again: near a line or moving fast,
//! four times as often; every other volume, idle or not, once a period. Pure: the fast loop in
//! `agent::measure` measures, this says what the numbers mean.

use std::time::Duration;

use jiff::SignedDuration;

use crate::decide::Measurement;
use crate::decide::lines::{Floor, Lines};
use crate::decide::predictive::bytes_to_line;
use crate::policy::{Fallback, Mode, Policy};

/// Percentage points under a trigger at which a volume counts as near it.
pub const NEAR_POINTS: f64 = 5.0;
/// At its fill rate, a volume this close in time to its trigger counts as near it.
pub const NEAR_SECONDS: f64 = 60.0;
/// A volume whose usage moved by more than this share of its size since its last sample is
/// measured as often as one near its trigger (the rate estimate needs samples soonest then).
pub const FAST_MOVE: f64 = 0.01;

/// When a volume's numbers call for a decision now: the lines the engine grows at, from its
/// effective policy. Convergent mode plans its growth for windows; only its emergency line
/// cannot wait for the next scan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trigger {
    lines: Source,
    inode_percent: f64,
    /// With `trigger.predictive`: seconds a resize takes to land (learned, else the policy's)
    /// plus the margin. The engine's `predictive::crosses_soon` with the same numbers.
    lead_seconds: Option<f64>,
    /// The emergency line (percent used, free bytes), the engine's `is_critical`: past the
    /// trigger, crossing it lifts the holds an emergency overrides. `None`: nothing to wake for
    /// beyond the trigger (convergent mode's trigger is this line itself).
    emergency: Option<(f64, u64)>,
}

/// How far a volume's numbers are past its trigger. Each level the numbers reach can change
/// the engine's decision: the loop wakes when a volume reaches a level above the one its last
/// decision saw, so a claim held past its line (the node drains, outside its window) is grown
/// the moment it crosses the emergency line, not at the next scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// The trigger does not fire.
    Below,
    /// The trigger fires (crossed, or with `trigger.predictive` crossing before a resize lands).
    Line,
    /// The trigger fires and the emergency line is crossed: a drain no longer holds the grow.
    Emergency,
}

/// Where a trigger's space lines come from.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Source {
    /// Threshold mode: the engine's own lines, resolved per measurement ([`Lines`]), since a
    /// percent floor and one the volume cannot meet depend on its numbers.
    Threshold {
        used_percent: Option<u8>,
        floor: Floor,
        fallback: Option<Fallback>,
    },
    /// Convergent mode: the emergency line, or none.
    Fixed {
        used_percent: f64,
        min_available: u64,
    },
}

impl Trigger {
    /// `learned_lead`: how long this claim's resizes took, from its history.
    pub fn for_policy(p: &Policy, learned_lead: Option<SignedDuration>) -> Option<Trigger> {
        if !p.enabled {
            return None;
        }
        match p.mode {
            Mode::Threshold => Some(Trigger {
                lines: Source::Threshold {
                    used_percent: p.usage_threshold,
                    floor: Floor {
                        value: p.min_available,
                        on_claim: p.floor_on_claim,
                    },
                    fallback: p.fallback,
                },
                inode_percent: f64::from(p.inode_threshold),
                lead_seconds: p.predictive.enabled.then(|| {
                    learned_lead
                        .unwrap_or(p.predictive.resize_lead_time)
                        .saturating_add(p.predictive.margin)
                        .as_secs_f64()
                }),
                // In threshold mode too: the engine's drain gate lets an emergency through
                // whether or not `emergencyGrow` is enabled (that key is convergent mode's).
                emergency: Some((
                    f64::from(p.emergency_grow.critical_threshold),
                    p.emergency_grow.critical_minimum_free,
                )),
            }),
            Mode::Convergent if p.emergency_grow.enabled => Some(Trigger {
                lines: Source::Fixed {
                    used_percent: f64::from(p.emergency_grow.critical_threshold),
                    min_available: p.emergency_grow.critical_minimum_free,
                },
                inode_percent: 100.0,
                lead_seconds: None,
                emergency: None,
            }),
            // Nothing to wake for, but still sampled: its fill rate and time to full are shown.
            Mode::Convergent => Some(Trigger {
                lines: Source::Fixed {
                    used_percent: f64::INFINITY,
                    min_available: 0,
                },
                inode_percent: f64::INFINITY,
                lead_seconds: None,
                emergency: None,
            }),
        }
    }

    /// The same lines without the predictive trigger: for an instance restoring a base backup,
    /// whose fill rate is the copy's and which the engine does not extrapolate.
    pub fn without_prediction(self) -> Trigger {
        Trigger {
            lead_seconds: None,
            ..self
        }
    }

    /// The percent line (infinite: none) and the free-space floor (0: none) over `m`.
    fn lines(&self, m: &Measurement) -> (f64, u64) {
        match self.lines {
            Source::Threshold {
                used_percent,
                floor,
                fallback,
            } => {
                let l = Lines::new(used_percent, floor, fallback, m);
                (l.percent(), l.min_available)
            }
            Source::Fixed {
                used_percent,
                min_available,
            } => (used_percent, min_available),
        }
    }

    pub fn crossed(&self, m: &Measurement) -> bool {
        let (pct, floor) = self.lines(m);
        m.crosses(pct, floor, self.inode_percent)
    }

    /// Seconds to the usage or minAvailable line at `rate` bytes per second; `None` when not
    /// filling.
    fn seconds_to_line(&self, m: &Measurement, rate: Option<f64>) -> Option<f64> {
        let r = rate.filter(|r| r.is_finite() && *r > 0.0)?;
        let (pct, floor) = self.lines(m);
        if !pct.is_finite() && floor == 0 {
            return None;
        }
        Some(bytes_to_line(m, pct, floor) as f64 / r)
    }

    /// The predictive trigger fires: the line is nearer in time than a resize takes to land.
    pub fn soon(&self, m: &Measurement, rate: Option<f64>) -> bool {
        match (self.lead_seconds, self.seconds_to_line(m, rate)) {
            (Some(lead), Some(s)) => s < lead,
            _ => false,
        }
    }

    fn near(&self, m: &Measurement, rate: Option<f64>) -> bool {
        let (pct, floor) = self.lines(m);
        m.used_percent() >= pct - NEAR_POINTS
            || m.available_bytes < floor.saturating_mul(2)
            || (m.inodes_total > 0 && m.inode_percent() >= self.inode_percent - NEAR_POINTS)
            || self
                .seconds_to_line(m, rate)
                .is_some_and(|s| s < NEAR_SECONDS.max(2.0 * self.lead_seconds.unwrap_or(0.0)))
    }

    /// How long until this volume is measured again, given its last usage `before`: a quarter
    /// of `every` when near its trigger or moving fast, else `every` (an idle volume far below
    /// its lines too: a fill from idle is seen within one period).
    pub fn period(
        &self,
        m: &Measurement,
        before: u64,
        rate: Option<f64>,
        every: Duration,
    ) -> Duration {
        let moved = m.used_bytes.abs_diff(before) as f64 > FAST_MOVE * m.capacity_bytes as f64;
        if moved || self.near(m, rate) {
            every / 4
        } else {
            every
        }
    }

    pub fn fires(&self, m: &Measurement, rate: Option<f64>) -> bool {
        self.crossed(m) || self.soon(m, rate)
    }

    /// The level `m` (filling at `rate`) reaches: the loop wakes for each one above the level
    /// the last decision saw.
    pub fn level(&self, m: &Measurement, rate: Option<f64>) -> Level {
        if !self.fires(m, rate) {
            return Level::Below;
        }
        let no_inode_line = f64::INFINITY;
        match self.emergency {
            Some((pct, free)) if m.crosses(pct, free, no_inode_line) => Level::Emergency,
            _ => Level::Line,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::MinAvailable;

    fn m(used_pct: u64, avail: u64) -> Measurement {
        Measurement {
            capacity_bytes: 100,
            used_bytes: used_pct,
            available_bytes: avail,
            inodes_total: 0,
            inodes_used: 0,
        }
    }

    #[test]
    fn threshold_trigger_is_the_engines_lines() {
        let mut p = Policy::with_limit(1 << 30);
        p.enabled = true;
        p.usage_threshold = Some(80);
        p.min_available = MinAvailable::Bytes(10);
        let t = Trigger::for_policy(&p, None).expect("trigger");
        assert!(!t.crossed(&m(70, 30)));
        assert!(t.crossed(&m(80, 20)));
        assert!(t.crossed(&m(10, 5)), "min available");
        assert!(t.near(&m(76, 24), None) && !t.near(&m(70, 30), None));
        p.enabled = false;
        assert_eq!(Trigger::for_policy(&p, None), None);
    }

    #[test]
    fn convergent_mode_wakes_only_for_emergencies() {
        let mut p = Policy::with_limit(1 << 30);
        p.enabled = true;
        p.mode = Mode::Convergent;
        p.emergency_grow.critical_threshold = 95;
        p.emergency_grow.critical_minimum_free = 0;
        let t = Trigger::for_policy(&p, None).expect("trigger");
        assert!(!t.crossed(&m(90, 10)));
        assert!(t.crossed(&m(96, 4)));
        p.emergency_grow.enabled = false;
        let sampled = Trigger::for_policy(&p, None).expect("sampled, never fires");
        assert!(!sampled.fires(&m(100, 0), Some(1e9)) && !sampled.near(&m(100, 0), Some(1e9)));
    }

    #[test]
    fn predictive_trigger_fires_when_the_line_is_nearer_than_the_lead() {
        let mut p = Policy::with_limit(1 << 30);
        p.enabled = true;
        p.usage_threshold = Some(80);
        p.predictive.enabled = true;
        p.predictive.resize_lead_time = SignedDuration::from_secs(20);
        p.predictive.margin = SignedDuration::from_secs(10);
        let t = Trigger::for_policy(&p, None).expect("trigger");
        // 10 bytes to the line: 30 s lead. At 1 B/s 10 s away, at 0.2 B/s 50 s away.
        assert!(t.soon(&m(70, 30), Some(1.0)));
        assert!(!t.soon(&m(70, 30), Some(0.2)));
        assert!(!t.soon(&m(70, 30), None) && !t.soon(&m(70, 30), Some(-5.0)));
        assert!(!t.soon(&m(70, 30), Some(f64::NAN)));
        // A learned lead of 2 s replaces the policy's 20 s.
        let learned = Trigger::for_policy(&p, Some(SignedDuration::from_secs(2))).expect("t");
        assert!(!learned.soon(&m(70, 30), Some(0.5)) && t.soon(&m(70, 30), Some(0.5)));
        // Off by default: the rate alone never fires it.
        p.predictive.enabled = false;
        let off = Trigger::for_policy(&p, None).expect("trigger");
        assert!(!off.soon(&m(79, 21), Some(1e9)));
        // Near in time at its rate: measured often even far below the line.
        assert!(off.near(&m(10, 90), Some(2.0)) && !off.near(&m(10, 90), Some(0.1)));
    }

    #[test]
    fn quiet_volumes_every_period_and_busy_ones_four_times_as_often() {
        let mut p = Policy::with_limit(1 << 30);
        p.enabled = true;
        p.usage_threshold = Some(80);
        p.min_available = MinAvailable::OFF;
        let t = Trigger::for_policy(&p, None).expect("trigger");
        let every = Duration::from_secs(1);
        // Idle far below the line, idle nearer to it, or moving a little: every second.
        assert_eq!(t.period(&m(19, 81), 19, None, every), every);
        assert_eq!(t.period(&m(19, 81), 18, None, every), every);
        assert_eq!(t.period(&m(65, 35), 65, None, every), every);
        // Near the line, or moving over 1 % of the size: every 250 ms.
        assert_eq!(t.period(&m(76, 24), 76, None, every), every / 4);
        assert_eq!(t.period(&m(30, 70), 10, None, every), every / 4);
        // Near in time at its fill rate (50 points at 2/s is 25 s away).
        assert_eq!(t.period(&m(30, 70), 30, Some(2.0), every), every / 4);
    }

    /// Past its line and held (the node drains), a claim is still watched: the emergency line
    /// is a level of its own, since the engine lets an emergency through a drain.
    #[test]
    fn past_the_line_the_emergency_line_is_the_next_level() {
        let mut p = Policy::with_limit(1 << 30);
        p.enabled = true;
        p.usage_threshold = Some(80);
        p.min_available = MinAvailable::OFF;
        p.emergency_grow.critical_threshold = 95;
        p.emergency_grow.critical_minimum_free = 2;
        let t = Trigger::for_policy(&p, None).expect("trigger");
        assert_eq!(t.level(&m(70, 30), None), Level::Below);
        assert_eq!(t.level(&m(87, 13), None), Level::Line);
        assert_eq!(t.level(&m(96, 4), None), Level::Emergency);
        assert_eq!(
            t.level(&m(90, 1), None),
            Level::Emergency,
            "critical free bytes"
        );
        assert!(Level::Below < Level::Line && Level::Line < Level::Emergency);
        // The emergency line alone does not grow in threshold mode: no level of its own.
        p.usage_threshold = Some(99);
        let high = Trigger::for_policy(&p, None).expect("trigger");
        assert_eq!(high.level(&m(96, 4), None), Level::Below);
        assert_eq!(high.level(&m(99, 1), None), Level::Emergency);
        // Convergent mode's trigger is the emergency line itself: one level.
        p.mode = Mode::Convergent;
        let conv = Trigger::for_policy(&p, None).expect("trigger");
        assert_eq!(conv.level(&m(90, 10), None), Level::Below);
        assert_eq!(conv.level(&m(96, 4), None), Level::Line);
    }

    /// A volume `used_frac` full of `cap`, an enabled threshold policy with these lines, and its
    /// claim at that size: what the properties below generate their cases from.
    fn generated(
        cap: u64,
        used_frac: f64,
        threshold: u8,
        min_free: Option<u64>,
    ) -> (Measurement, Policy, crate::decide::ClaimState) {
        let used = (cap as f64 * used_frac) as u64;
        let meas = Measurement {
            capacity_bytes: cap,
            used_bytes: used,
            available_bytes: cap - used,
            inodes_total: 0,
            inodes_used: 0,
        };
        let mut p = Policy::with_limit(1 << 50);
        p.enabled = true;
        p.usage_threshold = (threshold < 100).then_some(threshold);
        p.min_available = MinAvailable::Bytes(min_free.unwrap_or(0));
        let claim = crate::decide::ClaimState {
            request_bytes: cap,
            capacity_bytes: cap,
            resize: crate::decide::ResizeState::Idle,
        };
        (meas, p, claim)
    }

    proptest::proptest! {
        /// On a draining node, the level the loop sees is the engine's decision: below, no
        /// need; at the line, held for the drain; past the emergency line, grown.
        #[test]
        fn on_a_draining_node_each_level_is_the_engines_decision(
            cap in 1u64..1 << 40, used_frac in 0.0f64..1.0, threshold in 1u8..=100,
            min_free in proptest::option::of(0u64..1 << 40), critical in 80u8..=99,
            critical_free in 0u64..1 << 40, rate in -1e6f64..1e10, predictive in proptest::bool::ANY,
        ) {
            use crate::decide::decision::{BlockReason, Verdict};
            use crate::decide::{Inputs, PolicyInput, VolumeFacts};
            let (meas, mut p, claim) = generated(cap, used_frac, threshold, min_free);
            p.emergency_grow.critical_threshold = critical;
            p.emergency_grow.critical_minimum_free = critical_free;
            p.predictive.enabled = predictive;
            let fill = crate::decide::FillRate { bytes_per_second: rate, resize_lead: None };
            let facts = VolumeFacts { expandable: true, node_draining: true, ..VolumeFacts::default() };
            let inputs = Inputs {
                logical: None,
                policy: PolicyInput::Valid(&p), measurement: meas, claim: &claim, history: &[],
                wal: None, facts, now: jiff::Timestamp::UNIX_EPOCH, fill_rate: Some(fill),
            };
            let t = Trigger::for_policy(&p, None).expect("trigger");
            let verdict = crate::decide::decide(&inputs).verdict;
            let level = t.level(&meas, Some(rate));
            match verdict {
                Verdict::NoAction { .. } => proptest::prop_assert_eq!(level, Level::Below),
                Verdict::Blocked { reason: BlockReason::NodeDraining } => {
                    proptest::prop_assert_eq!(level, Level::Line)
                }
                Verdict::Grow { .. } => proptest::prop_assert_eq!(level, Level::Emergency),
                other => proptest::prop_assert!(false, "{other:?} at {level:?}"),
            }
        }
    }

    proptest::proptest! {
        /// The loop wakes for the predictive trigger exactly when the engine would grow for it.
        #[test]
        fn the_loop_and_the_engine_agree(
            cap in 1u64..1 << 40, used_frac in 0.0f64..1.0, threshold in 1u8..=100,
            min_free in proptest::option::of(0u64..1 << 40), rate in -1e6f64..1e10,
            lead in 0i64..3600, margin in 0i64..600, learned in proptest::option::of(1i64..3600),
            on_claim in proptest::bool::ANY,
        ) {
            use crate::decide::{Inputs, PolicyInput, VolumeFacts};
            let (meas, mut p, claim) = generated(cap, used_frac, threshold, min_free);
            p.floor_on_claim = on_claim;
            p.predictive.enabled = true;
            p.predictive.resize_lead_time = SignedDuration::from_secs(lead);
            p.predictive.margin = SignedDuration::from_secs(margin);
            let learned = learned.map(SignedDuration::from_secs);
            let fill = crate::decide::FillRate { bytes_per_second: rate, resize_lead: learned };
            let inputs = Inputs {
                logical: None,
                policy: PolicyInput::Valid(&p), measurement: meas, claim: &claim, history: &[],
                wal: None, facts: VolumeFacts::default(), now: jiff::Timestamp::UNIX_EPOCH,
                fill_rate: Some(fill),
            };
            let t = Trigger::for_policy(&p, learned).expect("trigger");
            proptest::prop_assert_eq!(
                t.soon(&meas, Some(rate)),
                crate::decide::predictive::crosses_soon(&inputs, &p, &fill)
            );
        }
    }
}
