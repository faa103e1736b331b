//! Plain HTTP/1.1 GETs against the agent's own endpoint (/metrics, /live, /ready, /volumes).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// (status code, body), or `None` while nothing answers.
pub fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((code, body))
}

/// A port for the agent's `--listen`.
pub fn free_port() -> u16 {
    super::ports::free_port()
}

/// The agent's report of claim `pvc` on /volumes, if it lists it.
pub fn volume_report(port: u16, pvc: &str) -> Option<serde_json::Value> {
    let (_, body) = get(port, "/volumes").filter(|(c, _)| *c == 200)?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["volumes"]
        .as_array()?
        .iter()
        .find(|r| r["pvc"] == pvc)
        .cloned()
}

/// The value of `metric` for claim `claim` on /metrics, once the agent reports it.
pub fn claim_metric(port: u16, metric: &str, claim: &str) -> Option<f64> {
    let (_, text) = get(port, "/metrics").filter(|(code, _)| *code == 200)?;
    let label = format!("persistentvolumeclaim=\"{claim}\"");
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{metric}{{")) && l.contains(&label))?;
    line.rsplit(' ').next()?.parse().ok()
}

/// `headroom_volume_resize_blocked` of `claim` for `reason` (1 while that reason holds it).
pub fn blocked_metric(port: u16, claim: &str, reason: &str) -> Option<f64> {
    let claim = format!("persistentvolumeclaim=\"{claim}\"");
    let reason = format!("reason=\"{reason}\"");
    metric(port, "headroom_volume_resize_blocked", &[&claim, &reason])
}

/// The value of the first series of `metric` whose line contains every one of `labels` (none:
/// the unlabelled series, e.g. a histogram's `_count`).
pub fn metric(port: u16, metric: &str, labels: &[&str]) -> Option<f64> {
    let (_, text) = get(port, "/metrics").filter(|(c, _)| *c == 200)?;
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")) || l.starts_with(&format!("{metric} ")))
        .find(|l| labels.iter().all(|want| l.contains(want)))?
        .rsplit(' ')
        .next()?
        .parse()
        .ok()
}
