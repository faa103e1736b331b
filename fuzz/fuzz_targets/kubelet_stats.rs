//! The kubelet's `/stats/summary` body as the agent reads it: parsed into each claim's numbers,
//! judged fresh or stale at a time, and cross-checked against a statfs measurement.
//!
//! Input: the JSON body.
//!
//! Beyond "no panic": the used percent is within 0-100, the inode percent finite and not
//! negative (btrfs reports no inode count), the disagreement with statfs finite and not negative.
#![no_main]

use headroom::agent::kubelet_stats::{disagreement, parse};
use headroom::decide::Measurement;
use jiff::Timestamp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(by_claim) = parse(data) else {
        return;
    };
    let statfs = Measurement {
        capacity_bytes: 10 << 30,
        used_bytes: 9 << 30,
        available_bytes: 1 << 30,
        inodes_total: 1000,
        inodes_used: 10,
    };
    for now in [
        Timestamp::MIN,
        Timestamp::UNIX_EPOCH,
        Timestamp::now(),
        Timestamp::MAX,
    ] {
        for v in by_claim.values() {
            let _ = v.fresh(now);
            let m = &v.measurement;
            let used = m.used_percent();
            assert!((0.0..=100.0).contains(&used), "used {used} % of {m:?}");
            let inodes = m.inode_percent();
            assert!(inodes.is_finite() && inodes >= 0.0, "inodes {inodes} % of {m:?}");
            let d = disagreement(&statfs, m);
            assert!(d.is_finite() && d >= 0.0, "disagreement {d} with {m:?}");
        }
    }
});
