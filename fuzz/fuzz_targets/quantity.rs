//! Kubernetes quantities as the agent reads them (requests, capacities, limits, every size in a
//! policy): parsed to bytes; what parses formats back to itself, and the sizes the engine rounds
//! to stay in range.
//!
//! Input: the quantity's text.
#![no_main]

use headroom::quantity::{GI, format, human, parse, round_size, round_up};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(bytes) = parse(&text) else {
        return;
    };
    let written = format(bytes);
    assert_eq!(
        parse(&written).ok(),
        Some(bytes),
        "{text:?} -> {bytes} -> {written:?}"
    );
    let _ = human(bytes);
    for unit in [0, 1, 4096, GI] {
        let r = round_up(bytes, unit);
        assert!(
            r >= bytes || r == u64::MAX,
            "round_up({bytes}, {unit}) = {r}"
        );
    }
    let r = round_size(bytes, bytes);
    assert!(r >= bytes || r == u64::MAX, "round_size({bytes}) = {r}");
});
