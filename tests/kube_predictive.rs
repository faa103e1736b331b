//! The predictive trigger in the agent, against the real kube-apiserver (tests/support/kube): a
//! volume filling steadily is grown before its threshold, from the fill rate the fast
//! measurement loop samples, and the time the resize took to reach the filesystem is written
//! into the claim's history, where the next prediction learns its lead time from.

mod support {
    pub mod http;
    pub mod kube;
    pub mod node;
    pub mod ports;
    pub mod root;
}

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use jiff::Timestamp;
use support::kube::cluster::{KubeCluster, POLICY, annotation};
use support::kube::server;
use support::node::{MI, fill, request_of, wait_for};

/// Writes `per_tick` bytes every `tick` into `mount` until stopped: a steady fill.
struct Filler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Filler {
    /// Up to `cap` bytes (a full tmpfs would fail the writes).
    fn start(
        mount: std::path::PathBuf,
        (from, cap): (u64, u64),
        per_tick: u64,
        tick: Duration,
    ) -> Filler {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut size = from;
            while !stopped.load(Ordering::SeqCst) && size <= cap {
                fill(&mount, size);
                std::thread::sleep(tick);
                size += per_tick;
            }
            size.min(cap)
        });
        Filler {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the fill; the bytes written by then.
    fn stop(&mut self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        self.thread
            .take()
            .map_or(0, |t| t.join().expect("filler thread"))
    }
}

impl Drop for Filler {
    fn drop(&mut self) {
        self.stop();
    }
}

fn history(c: &KubeCluster, name: &str) -> Vec<serde_json::Value> {
    annotation(&c.get(name), "headroom.dev/history")
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// The claim's history entry once one has its landing written.
fn landing(c: &KubeCluster, name: &str) -> serde_json::Value {
    wait_for(
        Duration::from_secs(20),
        "the landing in the history",
        || {
            history(c, name)
                .into_iter()
                .find(|e| e.get("landed").is_some())
        },
    )
}

fn at(v: &serde_json::Value, key: &str) -> Option<Timestamp> {
    v.get(key)?.as_str()?.parse().ok()
}

#[test]
fn a_steady_fill_is_grown_before_the_threshold_and_the_resize_time_is_learned() {
    if !server::available(
        "a_steady_fill_is_grown_before_the_threshold_and_the_resize_time_is_learned",
    ) {
        return;
    }
    let mut c = KubeCluster::new();
    let mut policy = POLICY.to_vec();
    policy.extend([
        ("trigger-predictive", "true"),
        ("trigger-resize-lead-time", "10s"),
        ("trigger-margin", "2s"),
    ]);
    let mount = c.claim("data", &c.fast.clone(), 64, &policy);
    // The resize lands 1.5 s after the request: the history must learn about that, not 10 s.
    let _csi = c.csi(&[("data", mount.clone())], 1_500);
    let port = support::http::free_port();
    let listen = format!("127.0.0.1:{port}");
    // Scans every 60 s: only the fast loop's samples can start this grow in time.
    let _agent = c.agent("60s", &["--listen", &listen]);
    wait_for(Duration::from_secs(20), "the first status", || {
        c.status_field("data", "state")
    });
    // 4 MiB/s from 8 MiB: the 80 % line (51.2 MiB) is about 11 s away, inside the 12 s lead.
    let mut filler = Filler::start(
        mount.clone(),
        (8 * MI, 60 * MI),
        MI,
        Duration::from_millis(250),
    );
    let grown = wait_for(Duration::from_secs(15), "a predicted grow", || {
        let r = request_of(&c.get("data"));
        (r > 64 * MI).then_some(r)
    });
    let written = filler.stop();
    let line = 64 * MI * 8 / 10;
    assert!(
        written < line,
        "grown only after {} MiB were written, past the {} MiB line",
        written / MI,
        line / MI
    );
    // The step covers the fill expected while it lands (4 MiB/s for 12 s), not just 16Mi.
    assert!(grown >= 64 * MI + 40 * MI, "grown to {} MiB", grown / MI);
    let decision = c.status_field("data", "lastDecision").unwrap_or_default();
    assert!(decision.contains("(predicted)"), "{decision}");
    // The scan that grew it exported the time to full from the same estimate.
    let to_full = wait_for(
        Duration::from_secs(5),
        "seconds to full on /metrics",
        || support::http::claim_metric(port, "headroom_volume_seconds_to_full", "data"),
    );
    assert!(to_full > 0.0 && to_full < 60.0, "{to_full} s to full");

    // The resize lands; the agent sees the filesystem grown (its size change wakes the loop)
    // and writes the landing time into the history, without a scan interval going by.
    let entry = landing(&c, "data");
    let took = at(&entry, "landed")
        .zip(at(&entry, "at"))
        .map(|(l, a)| l.duration_since(a).as_secs_f64())
        .expect("landed and at");
    assert!(
        (1.0..10.0).contains(&took),
        "the resize took {took} s by the history (the driver waits 1.5 s)"
    );
    // /volumes shows the lead time learned from it.
    let lead = wait_for(
        Duration::from_secs(10),
        "the learned lead on /volumes",
        || {
            support::http::volume_report(port, "data")?["fill_rate"]["resize_lead"]
                .as_str()
                .map(str::to_string)
        },
    );
    eprintln!(
        "grown to {} MiB with {} MiB written (line {} MiB); the resize took {took:.2} s; /volumes: {lead}",
        grown / MI,
        written / MI,
        line / MI
    );
    assert!(!lead.is_empty());
    // One grow, one landing write: nothing more was written for it.
    c.assert_resize_patches("data", 1);
}

/// A resize that lands while no agent watches (the agent stopped after its PATCH, as in a
/// restart or an upgrade) is recorded when the next agent first sees it, marked
/// `landed_unwatched`, and teaches no lead time: the gap until that first look is not how long
/// the storage took.
#[test]
fn a_resize_landed_while_no_agent_watched_teaches_no_lead_time() {
    if !server::available("a_resize_landed_while_no_agent_watched_teaches_no_lead_time") {
        return;
    }
    let mut c = KubeCluster::new();
    let mut policy = POLICY.to_vec();
    policy.push(("trigger-predictive", "true"));
    let mount = c.claim("data", &c.fast.clone(), 64, &policy);
    let _csi = c.csi(&[("data", mount.clone())], 3_000);
    let agent = c.agent("1s", &[]);
    fill(&mount, 56 * MI);
    let grown = wait_for(Duration::from_secs(20), "the grow", || {
        let r = request_of(&c.get("data"));
        (r > 64 * MI).then_some(r)
    });
    drop(agent);
    c.wait_capacity("data", grown);
    assert!(
        history(&c, "data")
            .iter()
            .all(|e| e.get("landed").is_none()),
        "landed before the agent stopped: {:?}",
        history(&c, "data")
    );
    // Long after the resize landed, a new agent starts.
    std::thread::sleep(Duration::from_secs(3));
    let port = support::http::free_port();
    let _agent = c.agent("1s", &["--listen", &format!("127.0.0.1:{port}")]);
    let entry = landing(&c, "data");
    assert_eq!(entry["landed_unwatched"], true, "{entry}");
    assert_eq!(entry["result"], "Succeeded", "{entry}");
    // A slow fill, for a fill rate to be estimated (and a lead time shown beside it, if any).
    let _filler = Filler::start(
        mount.clone(),
        (56 * MI, 60 * MI),
        64 * 1024,
        Duration::from_millis(250),
    );
    let volume = wait_for(Duration::from_secs(20), "a fill rate on /volumes", || {
        support::http::volume_report(port, "data").filter(|r| !r["fill_rate"].is_null())
    });
    assert!(
        volume["fill_rate"]["resize_lead"].is_null(),
        "a lead time learned from an unwatched landing: {}",
        volume["fill_rate"]
    );
}
