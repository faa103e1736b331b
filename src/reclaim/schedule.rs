//! When a volume's next trim is due. Pure: the caller brings the clock.
//!
//! A trim is due at the first cron occurrence after the last run (success or failure: a failed
//! trim waits for the next occurrence too, so a missing capability costs one Event per
//! occurrence, not one per scan). A volume never trimmed is due at the first occurrence after
//! the agent first saw it, not at once: turning trimming on for a StorageClass with hundreds of
//! volumes must not start hundreds of trims (and storage-backend discards) in the same minute;
//! they start at the time the schedule names, like cron, and one node trims one at a time.
//! A run that happened late (the agent was down) is followed by the next occurrence after it:
//! missed occurrences are not replayed.

use croner::Cron;
use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::TimeZone;

/// Where a volume stands on its schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// The occurrence the volume is waiting for (or, when due, the one it is late for).
    pub at: Option<Timestamp>,
    pub due: bool,
}

/// The first occurrence strictly after `after` whose wall-clock time in `tz` is also later than
/// `after`'s. The second condition matters when clocks fall back: a daily 01:30 trim done at the
/// first 01:30 is not due again at the second 01:30 an hour later. (croner 4 already skips the
/// repeated occurrence; the check keeps the rule here rather than in a library's behaviour.)
pub fn next_occurrence(cron: &Cron, tz: &TimeZone, after: Timestamp) -> Option<Timestamp> {
    let base = after.to_zoned(tz.clone());
    let base_civil: DateTime = base.datetime();
    let mut cursor = base;
    // A repeated wall-clock hour can hold at most a handful of occurrences.
    for _ in 0..128 {
        let next = cron.find_next_occurrence(&cursor, false).ok()?;
        if next.datetime() > base_civil {
            return Some(next.timestamp());
        }
        cursor = next;
    }
    None
}

/// Whether a trim is due at `now`, given the last run (from `headroom.dev/reclaim`) and when
/// this agent first saw the volume.
pub fn due(
    cron: &Cron,
    tz: &TimeZone,
    last_run: Option<Timestamp>,
    first_seen: Timestamp,
    now: Timestamp,
) -> Due {
    let at = next_occurrence(cron, tz, last_run.unwrap_or(first_seen));
    Due {
        at,
        due: at.is_some_and(|t| t <= now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::window::{parse_cron, parse_timezone};

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }
    fn sched(cron: &str, tz: &str) -> (Cron, TimeZone) {
        (
            parse_cron(cron).expect("cron"),
            parse_timezone(tz).expect("tz"),
        )
    }

    #[test]
    fn never_trimmed_waits_for_the_first_occurrence_after_first_seen() {
        let (c, tz) = sched("@daily", "UTC");
        let seen = ts("2026-01-05T10:00:00Z");
        let d = due(&c, &tz, None, seen, ts("2026-01-05T23:59:59Z"));
        assert_eq!(
            d,
            Due {
                at: Some(ts("2026-01-06T00:00:00Z")),
                due: false
            }
        );
        assert!(due(&c, &tz, None, seen, ts("2026-01-06T00:00:00Z")).due);
    }

    #[test]
    fn after_a_run_the_next_occurrence_and_no_catch_up() {
        let (c, tz) = sched("0 3 * * 0", "UTC"); // Sundays 03:00
        // Ran late on Tuesday (agent was down on Sunday): next is the following Sunday.
        let last = ts("2026-01-06T12:00:00Z");
        let d = due(
            &c,
            &tz,
            Some(last),
            ts("2025-01-01T00:00:00Z"),
            ts("2026-01-10T00:00:00Z"),
        );
        assert_eq!(
            d,
            Due {
                at: Some(ts("2026-01-11T03:00:00Z")),
                due: false
            }
        );
        let d = due(&c, &tz, Some(last), last, ts("2026-02-20T00:00:00Z"));
        assert!(d.due, "weeks overdue is due once");
        assert_eq!(d.at, Some(ts("2026-01-11T03:00:00Z")));
    }

    #[test]
    fn same_schedule_in_different_time_zones() {
        let last = ts("2026-01-04T00:00:00Z");
        let next = |tz: &str| {
            let (c, tz) = sched("0 2 * * *", tz);
            next_occurrence(&c, &tz, last)
        };
        assert_eq!(next("UTC"), Some(ts("2026-01-04T02:00:00Z")));
        assert_eq!(next("Europe/Berlin"), Some(ts("2026-01-04T01:00:00Z"))); // CET, UTC+1
        assert_eq!(next("America/New_York"), Some(ts("2026-01-04T07:00:00Z"))); // EST, UTC-5
        assert_eq!(next("Asia/Kolkata"), Some(ts("2026-01-04T20:30:00Z"))); // IST, UTC+5:30
        // In July Berlin is on CEST (UTC+2): the same wall-clock time is an hour earlier in UTC.
        let (c, tz) = sched("0 2 * * *", "Europe/Berlin");
        assert_eq!(
            next_occurrence(&c, &tz, ts("2026-07-01T12:00:00Z")),
            Some(ts("2026-07-02T00:00:00Z"))
        );
        let (c, tz) = sched("@monthly", "Australia/Sydney");
        assert_eq!(
            next_occurrence(&c, &tz, last),
            Some(ts("2026-01-31T13:00:00Z")) // Feb 1 00:00 AEDT (UTC+11)
        );
    }

    #[test]
    fn dst_spring_forward_still_trims_that_day() {
        // 02:30 does not exist in New York on 2026-03-08 (02:00 -> 03:00).
        let (c, tz) = sched("30 2 * * *", "America/New_York");
        let last = ts("2026-03-07T07:30:00Z"); // 02:30 EST on the 7th
        let next = next_occurrence(&c, &tz, last).expect("next");
        assert!(
            next > last + jiff::SignedDuration::from_hours(12) && next < ts("2026-03-09T06:00:00Z"),
            "the trim of the 8th must neither vanish nor come early: {next}"
        );
        // After it, the 9th at 02:30 EDT (06:30Z).
        assert_eq!(
            next_occurrence(&c, &tz, next),
            Some(ts("2026-03-09T06:30:00Z"))
        );
    }

    #[test]
    fn dst_fall_back_does_not_trim_twice() {
        // 01:30 happens twice in New York on 2026-11-01: 05:30Z (EDT) and 06:30Z (EST).
        let (c, tz) = sched("30 1 * * *", "America/New_York");
        let first = next_occurrence(&c, &tz, ts("2026-10-31T12:00:00Z")).expect("next");
        assert_eq!(first, ts("2026-11-01T05:30:00Z"));
        // Trimmed at the first 01:30 (a few seconds late): next is the 2nd, not an hour later.
        let ran = first + jiff::SignedDuration::from_secs(7);
        assert_eq!(
            next_occurrence(&c, &tz, ran),
            Some(ts("2026-11-02T06:30:00Z"))
        );
        let d = due(&c, &tz, Some(ran), ran, ts("2026-11-01T06:45:00Z"));
        assert!(!d.due);
        // Also when the run was late, between the two 01:30s.
        let late = first + jiff::SignedDuration::from_mins(20);
        assert_eq!(
            next_occurrence(&c, &tz, late),
            Some(ts("2026-11-02T06:30:00Z"))
        );
    }
}
