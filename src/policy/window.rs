//! Maintenance windows: a cron start, a duration and a time zone.

use std::str::FromStr;

use croner::Cron;
use jiff::{SignedDuration, Timestamp, tz::TimeZone};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    #[error("schedule '{0}' is not a valid cron expression: {1}")]
    Schedule(String, String),
    #[error("duration '{0}' is not valid (write e.g. 30m, 4h, 1h30m)")]
    Duration(String),
    #[error("duration '{0}' must be more than zero and at most 7 days")]
    DurationRange(String),
    #[error("time zone '{0}' is unknown (write an IANA name like Europe/Berlin or UTC)")]
    TimeZone(String),
    #[error(
        "schedule '{0}' never fires: no day from {FIRST_YEAR} to {LAST_YEAR} matches its month, \
         day and weekday fields"
    )]
    NeverFires(String),
}

/// The years a schedule must fire in to be accepted: more than the 28-year cycle of weekdays
/// against leap years, with no century year inside, so any day the calendar can produce (a 29
/// February that is a Monday) occurs.
const FIRST_YEAR: i16 = 2024;
const LAST_YEAR: i16 = 2052;

/// A recurring window: it opens at each cron occurrence (wall-clock time in `timezone`) and stays
/// open for `duration`.
#[derive(Debug, Clone)]
pub struct MaintenanceWindow {
    pub schedule: String,
    pub duration: SignedDuration,
    pub timezone: String,
    cron: Cron,
    tz: TimeZone,
}

impl PartialEq for MaintenanceWindow {
    fn eq(&self, other: &Self) -> bool {
        self.schedule == other.schedule
            && self.duration == other.duration
            && self.timezone == other.timezone
    }
}

/// Parses a cron expression: 5 fields, or 6 with leading seconds (and an optional 7th, the year),
/// or `@daily`-style nicknames (croner's defaults).
pub fn parse_cron(schedule: &str) -> Result<Cron, WindowError> {
    let cron = Cron::from_str(schedule)
        .map_err(|e| WindowError::Schedule(schedule.to_string(), e.to_string()))?;
    if !fires(&cron) {
        return Err(WindowError::NeverFires(schedule.to_string()));
    }
    Ok(cron)
}

/// Whether the schedule has a time of day and some day of [`FIRST_YEAR`]..=[`LAST_YEAR`] matches
/// its date fields. croner finds an occurrence by walking day by day up
/// to the year 5000, so a schedule that never fires (`0 0 31 2 *`) cost about a second of CPU
/// each time the agent asked when a window opens or a trim is due, at every scan of every claim
/// using it (the `schedule` fuzz target found it). Refused here, it costs at most one pass over
/// these years, once; a schedule that fires stops at its first day.
fn fires(cron: &Cron) -> bool {
    let p = &cron.pattern;
    // An empty list parses (`30 , * * *`: no hour at all).
    let any = |n: u32, f: &dyn Fn(u32) -> Result<bool, croner::errors::CronError>| {
        (0..n).any(|v| f(v).unwrap_or(false))
    };
    any(24, &|h| p.hour_match(h))
        && any(60, &|m| p.minute_match(m))
        && any(60, &|s| p.second_match(s))
        && first_day(cron).is_some()
}

fn first_day(cron: &Cron) -> Option<jiff::civil::Date> {
    use jiff::civil::Date;
    let p = &cron.pattern;
    let mut day = Date::new(FIRST_YEAR, 1, 1).ok()?;
    while day.year() <= LAST_YEAR {
        let (year, month) = (i32::from(day.year()), day.month().unsigned_abs().into());
        day = if !p.year_match(year).unwrap_or(false) {
            Date::new(day.year() + 1, 1, 1).ok()?
        } else if !p.month_match(month).unwrap_or(false) {
            day.last_of_month().tomorrow().ok()?
        } else {
            let weekday = croner::Weekday::from_days_from_sunday(
                day.weekday().to_sunday_zero_offset().unsigned_abs().into(),
            );
            let d = day.day().unsigned_abs().into();
            if p.day_match(year, month, d, weekday).unwrap_or(false) {
                return Some(day);
            }
            day.tomorrow().ok()?
        };
    }
    None
}

/// Parses a duration written as Go/Kubernetes does (`4h`, `30m`, `1h30m`) or ISO 8601 (`PT4H`).
pub fn parse_duration(text: &str) -> Result<SignedDuration, WindowError> {
    let d = SignedDuration::from_str(text.trim())
        .map_err(|_| WindowError::Duration(text.to_string()))?;
    Ok(d)
}

pub fn parse_timezone(name: &str) -> Result<TimeZone, WindowError> {
    TimeZone::get(name).map_err(|_| WindowError::TimeZone(name.to_string()))
}

impl MaintenanceWindow {
    pub fn new(schedule: &str, duration: &str, timezone: &str) -> Result<Self, WindowError> {
        let cron = parse_cron(schedule)?;
        let duration_v = parse_duration(duration)?;
        if duration_v <= SignedDuration::ZERO || duration_v > SignedDuration::from_hours(24 * 7) {
            return Err(WindowError::DurationRange(duration.to_string()));
        }
        let tz = parse_timezone(timezone)?;
        Ok(Self {
            schedule: schedule.to_string(),
            duration: duration_v,
            timezone: timezone.to_string(),
            cron,
            tz,
        })
    }

    /// The start of the window that contains `now`, if one does.
    pub fn open_since(&self, now: Timestamp) -> Option<Timestamp> {
        let zoned = now.to_zoned(self.tz.clone());
        let start = self.cron.find_previous_occurrence(&zoned, true).ok()?;
        let start = start.timestamp();
        let end = start.checked_add(self.duration).ok()?;
        (now >= start && now < end).then_some(start)
    }

    /// Convergent mode's window when none is written: the CloudNativePG RFC's daily 03:00 UTC for
    /// 2h. `None` is unreachable (the constants parse; a test says so).
    pub fn rfc_default() -> Option<Self> {
        use super::defaults::{WINDOW_DURATION, WINDOW_SCHEDULE, WINDOW_TIMEZONE};
        Self::new(WINDOW_SCHEDULE, WINDOW_DURATION, WINDOW_TIMEZONE).ok()
    }

    pub fn is_open(&self, now: Timestamp) -> bool {
        self.open_since(now).is_some()
    }

    /// When the next window opens strictly after `now`.
    pub fn next_open(&self, now: Timestamp) -> Option<Timestamp> {
        let zoned = now.to_zoned(self.tz.clone());
        self.cron
            .find_next_occurrence(&zoned, false)
            .ok()
            .map(|z| z.timestamp())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    #[test]
    fn a_schedule_that_never_fires_is_refused_and_a_rare_one_is_not() {
        // Found by the `schedule` fuzz target: `0 3 * * +` (day of month AND an empty set of
        // weekdays) took seconds per question, walking to the year 5000.
        for never in [
            "0 3 * * +",
            "30 , * * 0",
            "0 0 31 2 *",
            "0 0 30 2 *",
            "0 0 0 1 1 * 1999",
            "0 0 0 1 1 * 2060",
        ] {
            assert_eq!(
                parse_cron(never).err(),
                Some(WindowError::NeverFires(never.to_string())),
                "{never}"
            );
        }
        // 29 February on a Monday (day of month AND weekday): first in 2044.
        let rare = parse_cron("0 0 29 2 +1").expect("fires");
        assert_eq!(first_day(&rare), Some(jiff::civil::date(2044, 2, 29)));
        for fires in [
            "0 3 * * *",
            "@weekly",
            "0 0 29 2 *",
            "0 0 L * *",
            "0 0 * * 5#5",
            "0 0 0 1 1 * 2052",
        ] {
            assert!(parse_cron(fires).is_ok(), "{fires}");
        }
        assert!(MaintenanceWindow::new("0 0 31 2 *", "2h", "UTC").is_err());
    }

    #[test]
    fn weekly_window_in_new_york() {
        // Sundays 03:00-07:00 New York time.
        let w = MaintenanceWindow::new("0 3 * * 0", "4h", "America/New_York").expect("window");
        // 2026-01-04 is a Sunday; EST is UTC-5, so the window is 08:00Z-12:00Z.
        assert!(!w.is_open(ts("2026-01-04T07:59:59Z")));
        assert!(w.is_open(ts("2026-01-04T08:00:00Z")));
        assert!(w.is_open(ts("2026-01-04T11:59:59Z")));
        assert!(!w.is_open(ts("2026-01-04T12:00:00Z")));
        assert_eq!(
            w.next_open(ts("2026-01-04T12:00:00Z")),
            Some(ts("2026-01-11T08:00:00Z"))
        );
        // In July (EDT, UTC-4) the same wall-clock window is 07:00Z-11:00Z.
        assert!(w.is_open(ts("2026-07-05T07:30:00Z")));
        assert!(!w.is_open(ts("2026-07-05T11:00:00Z")));
    }

    #[test]
    fn dst_gap_does_not_lose_the_window() {
        // 02:30 does not exist on 2026-03-08 in New York (clocks jump 02:00 -> 03:00).
        let w = MaintenanceWindow::new("30 2 * * *", "1h", "America/New_York").expect("window");
        let opened = (0..48)
            .map(|h| ts("2026-03-08T00:00:00Z") + SignedDuration::from_mins(30 * h))
            .any(|t| w.is_open(t));
        assert!(
            opened,
            "a window whose start falls in a DST gap must still open that day"
        );
    }

    #[test]
    fn the_rfc_default_is_daily_at_three_utc_for_two_hours() {
        let w = MaintenanceWindow::rfc_default().expect("the default window parses");
        assert_eq!(
            (
                w.schedule.as_str(),
                w.duration.as_hours(),
                w.timezone.as_str()
            ),
            ("0 3 * * *", 2, "UTC")
        );
        assert!(!w.is_open(ts("2026-02-03T02:59:59Z")));
        assert!(w.is_open(ts("2026-02-03T03:00:00Z")));
        assert!(w.is_open(ts("2026-02-03T04:59:59Z")));
        assert!(!w.is_open(ts("2026-02-03T05:00:00Z")));
        assert_eq!(
            w.next_open(ts("2026-02-03T05:00:00Z")),
            Some(ts("2026-02-04T03:00:00Z"))
        );
    }

    #[test]
    fn window_spanning_midnight() {
        let w = MaintenanceWindow::new("0 23 * * *", "2h", "UTC").expect("window");
        assert!(w.is_open(ts("2026-02-01T00:30:00Z")));
        assert!(!w.is_open(ts("2026-02-01T01:00:00Z")));
    }

    #[test]
    fn rejects_bad_parts() {
        assert!(matches!(
            MaintenanceWindow::new("61 * * * *", "1h", "UTC"),
            Err(WindowError::Schedule(_, _))
        ));
        assert!(matches!(
            MaintenanceWindow::new("0 3 * * 0", "four hours", "UTC"),
            Err(WindowError::Duration(_))
        ));
        assert!(matches!(
            MaintenanceWindow::new("0 3 * * 0", "0s", "UTC"),
            Err(WindowError::DurationRange(_))
        ));
        assert!(matches!(
            MaintenanceWindow::new("0 3 * * 0", "4h", "Mars/Olympus"),
            Err(WindowError::TimeZone(_))
        ));
    }
}
