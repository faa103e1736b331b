//! How soon a volume reaches its limit: from the claim's own growth history (what it was grown
//! by in the last week), not from the last minute's fill, which says when it is full if nothing
//! is grown ([`super::rate`]). Pure: the history and `now` are passed in.

use jiff::{SignedDuration, Timestamp};

use super::inputs::{Action, ActionResult, GrowKind};

/// The window the growth rate toward the limit is taken over.
pub const GROWTH_WINDOW: SignedDuration = SignedDuration::from_hours(7 * 24);

/// Bytes the claim (or its logical volume) was grown by in the [`GROWTH_WINDOW`] before `now`:
/// each grow's `to - from`. Failed grows and lowered requests (KEP-1790 retries) did not make
/// it larger, and a group raise (a new member catching up with its peers) is not the data
/// growing; entries dated after `now` did not happen yet.
pub fn grown_in_window(history: &[Action], now: Timestamp) -> u64 {
    let since = now.checked_sub(GROWTH_WINDOW).unwrap_or(Timestamp::MIN);
    history
        .iter()
        .filter(|a| a.at > since && a.at <= now)
        .filter(|a| !matches!(a.kind, GrowKind::Retry | GrowKind::GroupGrow))
        .filter(|a| a.result != Some(ActionResult::Failed))
        .map(|a| a.to.saturating_sub(a.from))
        // Histories are plain data: sizes near u64::MAX must not overflow the engine.
        .fold(0, u64::saturating_add)
}

/// Seconds until `size` reaches `limit` at the rate the history grew it over the last week;
/// `Some(0.0)` at or past the limit, `None` while unknown (not grown in the last week).
pub fn seconds_to_limit(size: u64, limit: u64, history: &[Action], now: Timestamp) -> Option<f64> {
    if size >= limit {
        return Some(0.0);
    }
    let grown = grown_in_window(history, now);
    if grown == 0 {
        return None;
    }
    let per_second = grown as f64 / GROWTH_WINDOW.as_secs_f64();
    Some((limit - size) as f64 / per_second)
}

/// Steps a deadline in the status annotation is rounded down to (seconds): a steady fill
/// crosses each once, so the annotation is rewritten a handful of times on the way to full,
/// not every scan.
const STEPS: [u64; 17] = [
    0,
    60,
    300,
    600,
    1_800,
    3_600,
    7_200,
    3 * 3_600,
    6 * 3_600,
    12 * 3_600,
    86_400,
    2 * 86_400,
    3 * 86_400,
    7 * 86_400,
    14 * 86_400,
    30 * 86_400,
    90 * 86_400,
];

/// `seconds` rounded down to a [`STEPS`] step: what the status annotation keeps.
pub fn bucket(seconds: f64) -> Option<u64> {
    if !seconds.is_finite() || seconds < 0.0 {
        return None;
    }
    STEPS.iter().rev().copied().find(|s| *s as f64 <= seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grow(at: &str, from: u64, to: u64) -> Action {
        serde_json::from_value(serde_json::json!({
            "at": at, "kind": "Grow", "from": from, "to": to,
        }))
        .expect("action")
    }

    fn now() -> Timestamp {
        "2026-03-08T00:00:00Z".parse().expect("ts")
    }

    #[test]
    fn the_last_weeks_grows_set_the_pace_to_the_limit() {
        // 10 GiB grown in the week; 20 GiB left: two weeks.
        let h = [
            grow("2026-02-20T00:00:00Z", 0, 100), // older than a week: not counted
            grow("2026-03-02T00:00:00Z", 10, 15),
            grow("2026-03-07T00:00:00Z", 15, 20),
        ];
        let gib = 1u64 << 30;
        let h: Vec<Action> = h
            .into_iter()
            .map(|mut a| {
                a.from *= gib;
                a.to *= gib;
                a
            })
            .collect();
        let s = seconds_to_limit(20 * gib, 40 * gib, &h, now()).expect("known");
        assert_eq!(s.round(), (14 * 86_400) as f64);
    }

    #[test]
    fn unknown_without_grows_and_zero_at_the_limit() {
        let old = [grow("2026-02-20T00:00:00Z", 1, 2)];
        assert_eq!(seconds_to_limit(10, 20, &old, now()), None);
        assert_eq!(seconds_to_limit(10, 20, &[], now()), None);
        assert_eq!(seconds_to_limit(20, 20, &[], now()), Some(0.0));
        let mut failed = grow("2026-03-07T00:00:00Z", 1, 5);
        failed.result = Some(ActionResult::Failed);
        assert_eq!(seconds_to_limit(10, 20, &[failed], now()), None);
        let mut raised = grow("2026-03-07T00:00:00Z", 1, 5);
        raised.kind = GrowKind::GroupGrow;
        assert_eq!(seconds_to_limit(10, 20, &[raised], now()), None);
    }

    #[test]
    fn buckets_round_down_to_humane_steps() {
        assert_eq!(bucket(59.0), Some(0));
        assert_eq!(bucket(2_400.0), Some(1_800));
        assert_eq!(bucket(3.5 * 86_400.0), Some(3 * 86_400));
        assert_eq!(bucket(1e12), Some(90 * 86_400));
        assert_eq!(bucket(f64::NAN), None);
        assert_eq!(bucket(-1.0), None);
    }
}
