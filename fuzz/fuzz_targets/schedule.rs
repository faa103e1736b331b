//! Cron expressions, durations and time zones as the agent uses them: a policy's maintenance
//! window (open at a time, since when, when it next opens) and the reclaim schedule (when a
//! volume's next trim is due after its last run).
//!
//! Input: NUL-separated records `schedule=`, `duration=`, `timezone=`, `now=`, `last=` (seconds
//! since the epoch; anything out of range is the nearest representable time).
#![no_main]

use headroom::policy::window::{MaintenanceWindow, parse_cron, parse_timezone};
use headroom::reclaim::schedule::{due, next_occurrence};
use headroom_fuzz::{number, records, value};
use jiff::Timestamp;
use libfuzzer_sys::fuzz_target;

fn at(seconds: Option<i64>) -> Timestamp {
    let s = seconds.unwrap_or(1_780_000_000);
    let s = s.clamp(Timestamp::MIN.as_second(), Timestamp::MAX.as_second());
    Timestamp::from_second(s).unwrap_or(Timestamp::UNIX_EPOCH)
}

fuzz_target!(|data: &[u8]| {
    let r = records(data);
    let schedule = value(&r, "schedule").unwrap_or("0 3 * * *");
    let duration = value(&r, "duration").unwrap_or("2h");
    let timezone = value(&r, "timezone").unwrap_or("UTC");
    let now = at(number(&r, "now"));
    let last = number(&r, "last").map(|s| at(Some(s)));
    if let Ok(w) = MaintenanceWindow::new(schedule, duration, timezone) {
        if let Some(start) = w.open_since(now) {
            assert!(start <= now, "window opened at {start}, after {now}");
            assert!(w.is_open(now));
        }
        if let Some(next) = w.next_open(now) {
            assert!(next > now, "next window at {next}, not after {now}");
        }
    }
    let (Ok(cron), Ok(tz)) = (parse_cron(schedule), parse_timezone(timezone)) else {
        return;
    };
    let after = last.unwrap_or(now);
    if let Some(next) = next_occurrence(&cron, &tz, after) {
        assert!(next > after, "next trim at {next}, not after {after}");
    }
    let d = due(&cron, &tz, last, now, now);
    assert_eq!(d.due, d.at.is_some_and(|t| t <= now));
});
