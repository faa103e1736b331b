//! Ports for the processes a test starts (agents, the API server, etcd, Postgres).
//!
//! A port found with `bind(127.0.0.1:0)` and released is still the kernel's to hand out: the next
//! `bind(0)` anywhere on the machine (an agent's `--listen 127.0.0.1:0`, another test's free port)
//! draws from the same few thousand ports (on Linux, the odd ones of the lower half of
//! `ip_local_port_range` when `SO_REUSEADDR` is set): a port and the next three picks met 89
//! times in 200,000 tries on the CI machine, and the process started second failed to bind.
//! These ports come from below that range, where neither `bind(0)` nor `connect()` ever looks,
//! one after another from a process-wide counter, each checked free when handed out.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// Below the kernel's default ephemeral range (32768-60999), above what the real node's etcd
/// holds (23790, 23800), and below the NodePort range (30000-32767).
const FIRST: u32 = 24_000;
const LAST: u32 = 29_999;

fn ephemeral_low() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A port nothing listens on now, that no `bind(0)` or outgoing connection on this machine will
/// take before the caller's process binds it.
pub fn free_port() -> u16 {
    // Where the machine's ephemeral range reaches down into ours, the kernel's pick is as good
    // as any.
    if ephemeral_low().is_some_and(|low| low <= LAST) {
        return kernel_pick();
    }
    // Test binaries run one after another; starting each at its own place keeps a port a
    // previous binary's child may still hold out of the first picks.
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let span = LAST - FIRST + 1;
    let start = (std::process::id() % 600) * 10;
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = FIRST + (start + n) % span;
        let port = u16::try_from(port).expect("port fits");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}-{LAST}")
}

fn kernel_pick() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("local addr").port()
}
