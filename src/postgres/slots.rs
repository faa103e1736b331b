//! Whether a replication slot is in use, judged from its on-disk `restart_lsn` over time: pure,
//! with time passed in.
//!
//! `pg_replication_slots.active` says whether a process holds the slot right now; that is not on
//! disk. What is on disk is whether the slot moves. A slot counts as **active** while its
//! `restart_lsn` has moved within the last [`WINDOW`], **inactive** once it has stood still for
//! [`WINDOW`] while the WAL position advanced, and **unknown** before either can be said (first
//! seen less than a window ago, or an idle server whose WAL does not advance). The differences
//! from `active` (README, "WAL health", lists them): a consumer that is connected but stuck is
//! inactive here and active in SQL; a slot whose consumer left less than a window ago is still
//! active here; and a physical slot's file is rewritten only at checkpoints, so its movement
//! shows a checkpoint late, which is why the window is three of the server's
//! `checkpoint_timeout`s (three default ones, [`WINDOW`], where its configuration does not say).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use jiff::{SignedDuration, Timestamp};

use super::lsn::Lsn;
pub use crate::decide::SlotActivity as Activity;

/// How long a slot's `restart_lsn` must stand still, while WAL advances, to count as inactive,
/// on a server whose `checkpoint_timeout` is not known: three of its default (5 minutes).
pub const WINDOW: SignedDuration = SignedDuration::from_mins(15);

/// Checkpoints per window: a slot in use moves at least once in two, with one to spare.
const CHECKPOINTS: i32 = 3;

#[derive(Debug, Clone, Copy)]
struct Track {
    restart: Lsn,
    /// When `restart` was first seen, and the WAL position then.
    since: Timestamp,
    position_then: Option<Lsn>,
    /// When the slot was last seen to move.
    moved: Option<Timestamp>,
}

/// Slots of every data directory the agent reads, keyed by the directory: when it was last read,
/// the window it was judged over, and its slots.
#[derive(Debug, Default)]
pub struct Tracker {
    /// One window for every server (tests that cannot wait minutes); `None`: each server's own.
    fixed: Option<SignedDuration>,
    dirs: BTreeMap<PathBuf, (Timestamp, SignedDuration, BTreeMap<String, Track>)>,
}

impl Tracker {
    /// A tracker judging every server over `window`, whatever its `checkpoint_timeout`.
    pub fn new(window: SignedDuration) -> Self {
        Tracker {
            fixed: Some(window),
            dirs: BTreeMap::new(),
        }
    }

    /// The window for a server whose configuration sets `checkpoint_timeout` (or does not).
    pub fn window_for(&self, checkpoint_timeout: Option<SignedDuration>) -> SignedDuration {
        self.fixed
            .unwrap_or_else(|| checkpoint_timeout.map_or(WINDOW, |t| t * CHECKPOINTS))
    }

    /// Records what one read of `dir` showed (each slot's name and `restart_lsn`, and the WAL
    /// position) and says what each slot is doing over `window` (see [`Tracker::window_for`]),
    /// in the order given. Slots no longer on disk are forgotten, and so are directories not
    /// read for two of their windows.
    pub fn observe(
        &mut self,
        dir: &Path,
        slots: &[(&str, Lsn)],
        position: Option<Lsn>,
        window: SignedDuration,
        now: Timestamp,
    ) -> Vec<Activity> {
        self.dirs
            .retain(|_, (seen, w, _)| now.duration_since(*seen) < *w * 2);
        let (seen, w, tracks) = self.dirs.entry(dir.to_path_buf()).or_default();
        (*seen, *w) = (now, window);
        tracks.retain(|name, _| slots.iter().any(|(n, _)| n == name));
        slots
            .iter()
            .map(|&(name, restart)| {
                let track = tracks.entry(name.to_string()).or_insert(Track {
                    restart,
                    since: now,
                    position_then: position,
                    moved: None,
                });
                judge(track, restart, position, now, window)
            })
            .collect()
    }
}

fn judge(
    t: &mut Track,
    restart: Lsn,
    position: Option<Lsn>,
    now: Timestamp,
    window: SignedDuration,
) -> Activity {
    if restart != t.restart {
        *t = Track {
            restart,
            since: now,
            position_then: position,
            moved: Some(now),
        };
        return Activity::Active;
    }
    if t.moved.is_some_and(|m| now.duration_since(m) < window) {
        return Activity::Active;
    }
    let advanced = matches!((t.position_then, position), (Some(then), Some(p)) if p > then);
    if now.duration_since(t.since) >= window && advanced {
        Activity::Inactive
    } else {
        Activity::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: SignedDuration = SignedDuration::from_mins(15);

    fn at(min: i64) -> Timestamp {
        Timestamp::from_second(1_900_000_000 + min * 60).unwrap()
    }

    #[test]
    fn a_slot_that_stands_still_while_wal_advances_becomes_inactive_after_the_window() {
        let mut t = Tracker::new(W);
        let d = Path::new("/v/pgdata");
        let seen = |t: &mut Tracker, min, pos| {
            t.observe(d, &[("s", Lsn(100))], Some(Lsn(pos)), W, at(min))[0]
        };
        assert_eq!(seen(&mut t, 0, 1000), Activity::Unknown);
        assert_eq!(seen(&mut t, 14, 5000), Activity::Unknown);
        assert_eq!(seen(&mut t, 15, 6000), Activity::Inactive);
    }

    #[test]
    fn an_idle_server_leaves_a_still_slot_unknown() {
        let mut t = Tracker::new(W);
        let d = Path::new("/v/pgdata");
        for min in [0, 20, 40] {
            let a = t.observe(d, &[("s", Lsn(100))], Some(Lsn(1000)), W, at(min));
            assert_eq!(a, vec![Activity::Unknown], "{min}");
        }
    }

    #[test]
    fn a_moving_slot_is_active_for_a_window_after_each_move() {
        let mut t = Tracker::new(W);
        let d = Path::new("/v/pgdata");
        let mut seen =
            |min, restart, pos| t.observe(d, &[("s", Lsn(restart))], Some(Lsn(pos)), W, at(min))[0];
        assert_eq!(seen(0, 100, 1000), Activity::Unknown);
        // Moved at the next checkpoint.
        assert_eq!(seen(5, 900, 2000), Activity::Active);
        assert_eq!(seen(19, 900, 9000), Activity::Active);
        // Stood still for a window after its last move while WAL advanced.
        assert_eq!(seen(20, 900, 9500), Activity::Inactive);
        assert_eq!(seen(21, 9500, 9600), Activity::Active);
    }

    /// Three of the server's checkpoint_timeouts: a server checkpointing every 30 s shows a
    /// consumer gone within 90 s, one checkpointing every 30 minutes keeps a slot in use active
    /// for 90 minutes; a tracker with a fixed window ignores both.
    #[test]
    fn the_window_is_three_of_the_servers_checkpoint_timeouts() {
        let t = Tracker::default();
        assert_eq!(t.window_for(None), WINDOW);
        assert_eq!(
            t.window_for(Some(SignedDuration::from_secs(30))),
            SignedDuration::from_secs(90)
        );
        assert_eq!(
            t.window_for(Some(SignedDuration::from_mins(30))),
            SignedDuration::from_mins(90)
        );
        assert_eq!(
            Tracker::new(W).window_for(Some(SignedDuration::from_secs(30))),
            W
        );
        let mut t = Tracker::default();
        let d = Path::new("/v/pgdata");
        let w = t.window_for(Some(SignedDuration::from_secs(30)));
        let at_s = |s: i64| Timestamp::from_second(1_900_000_000 + s).unwrap();
        assert_eq!(
            t.observe(d, &[("s", Lsn(1))], Some(Lsn(10)), w, at_s(0)),
            [Activity::Unknown]
        );
        assert_eq!(
            t.observe(d, &[("s", Lsn(1))], Some(Lsn(20)), w, at_s(90)),
            [Activity::Inactive]
        );
    }

    #[test]
    fn dropped_slots_and_unread_directories_are_forgotten() {
        let mut t = Tracker::new(W);
        let (a, b) = (Path::new("/a"), Path::new("/b"));
        t.observe(a, &[("s", Lsn(1)), ("r", Lsn(1))], Some(Lsn(10)), W, at(0));
        t.observe(b, &[("s", Lsn(1))], Some(Lsn(10)), W, at(0));
        t.observe(a, &[("s", Lsn(1))], Some(Lsn(10)), W, at(1));
        assert_eq!(t.dirs[a].2.len(), 1);
        // /b unread for two windows: gone; a slot of that name starts over.
        t.observe(a, &[("s", Lsn(1))], Some(Lsn(10)), W, at(31));
        assert!(!t.dirs.contains_key(b));
        // Unknown position (pg_control unreadable): never inactive.
        let got = t.observe(a, &[("s", Lsn(1))], None, W, at(60));
        assert_eq!(got, vec![Activity::Unknown]);
    }
}
