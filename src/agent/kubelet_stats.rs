//! The kubelet's own volume numbers (`/stats/summary` from this node's kubelet, see
//! `kubelet_stats_https`): the fallback when statfs cannot see a volume, and then a cross-check of the
//! volumes statfs did measure.

use std::collections::HashMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde::Deserialize;

use super::kubelet_stats_https::{KubeletEndpoint, fetch_summary};

use crate::decide::Measurement;

/// The kubelet refreshes volume stats every minute or two; asking more often buys nothing.
pub const REFRESH: SignedDuration = SignedDuration::from_mins(1);
pub use crate::resolve::{KubeletVolume, MAX_AGE};

#[derive(Debug, Deserialize)]
struct Summary {
    #[serde(default)]
    pods: Vec<PodStats>,
}

#[derive(Debug, Deserialize)]
struct PodStats {
    #[serde(default)]
    volume: Vec<VolumeStats>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct VolumeStats {
    pvc_ref: Option<PvcRef>,
    time: Option<Timestamp>,
    capacity_bytes: Option<u64>,
    used_bytes: Option<u64>,
    available_bytes: Option<u64>,
    inodes: Option<u64>,
    inodes_used: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct PvcRef {
    name: String,
    namespace: String,
}

pub type ByClaim = HashMap<(String, String), KubeletVolume>;

/// Parses a summary; volumes that are not claims, or lack byte counts, are skipped.
pub fn parse(body: &[u8]) -> Result<ByClaim, serde_json::Error> {
    let summary: Summary = serde_json::from_slice(body)?;
    let mut out = ByClaim::new();
    for v in summary.pods.into_iter().flat_map(|p| p.volume) {
        let (Some(r), Some(capacity), Some(used), Some(available)) =
            (v.pvc_ref, v.capacity_bytes, v.used_bytes, v.available_bytes)
        else {
            continue;
        };
        let measurement = Measurement {
            capacity_bytes: capacity,
            used_bytes: used,
            available_bytes: available,
            inodes_total: v.inodes.unwrap_or(0),
            inodes_used: v.inodes_used.unwrap_or(0),
        };
        out.insert(
            (r.namespace, r.name),
            KubeletVolume {
                measurement,
                at: v.time,
            },
        );
    }
    Ok(out)
}

/// How far apart the two sources are on used bytes, as a share of the capacity.
pub fn disagreement(statfs: &Measurement, kubelet: &Measurement) -> f64 {
    let capacity = statfs.capacity_bytes.max(kubelet.capacity_bytes).max(1) as f64;
    (statfs.used_bytes as f64 - kubelet.used_bytes as f64).abs() / capacity
}

/// Fetches and caches the summary of this node.
pub struct KubeletStats {
    endpoint: Option<KubeletEndpoint>,
    timeout: Duration,
    cached: ByClaim,
    fetched: Option<Timestamp>,
}

impl KubeletStats {
    /// `None`: no kubelet to ask (no `HOST_IP`); statfs is then the only source.
    pub fn new(endpoint: Option<KubeletEndpoint>, timeout: Duration) -> Self {
        KubeletStats {
            endpoint,
            timeout,
            cached: ByClaim::new(),
            fetched: None,
        }
    }

    /// The cached numbers, refreshed when `needed` (statfs missed a volume) and older than
    /// [`REFRESH`]; never asked for when statfs measured everything. A failed fetch keeps the
    /// old numbers (they carry their own timestamps) and is logged.
    pub async fn get(&mut self, now: Timestamp, needed: bool) -> &ByClaim {
        let due = self
            .fetched
            .is_none_or(|t| crate::decide::budget::minus(now, REFRESH) >= t);
        if let (true, true, Some(ep)) = (needed, due, &self.endpoint) {
            self.fetched = Some(now);
            match fetch_summary(ep, self.timeout).await {
                Ok(body) => match parse(&body) {
                    Ok(fresh) => self.cached = fresh,
                    Err(e) => tracing::warn!(error = %e, "kubelet summary is not valid"),
                },
                Err(e) => tracing::warn!(error = %e, "kubelet stats unavailable"),
            }
        }
        &self.cached
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUMMARY: &str = r#"{"node":{"nodeName":"n"},"pods":[
      {"podRef":{"name":"pg-0","namespace":"db"},"volume":[
        {"time":"2026-11-22T10:00:00Z","name":"data","pvcRef":{"name":"data-pg-0","namespace":"db"},
         "capacityBytes":1000,"usedBytes":800,"availableBytes":150,"inodes":100,"inodesUsed":10,"inodesFree":90},
        {"time":"2026-11-22T10:00:00Z","name":"kube-api-access","capacityBytes":1,"usedBytes":1,"availableBytes":0}]},
      {"podRef":{"name":"x","namespace":"db"}}]}"#;

    #[test]
    fn maps_claims_and_skips_other_volumes() {
        let m = parse(SUMMARY.as_bytes()).expect("parse");
        assert_eq!(m.len(), 1);
        let v = m[&("db".to_string(), "data-pg-0".to_string())];
        assert_eq!(
            (
                v.measurement.used_bytes,
                v.measurement.available_bytes,
                v.measurement.inodes_used
            ),
            (800, 150, 10)
        );
        let at: Timestamp = "2026-11-22T10:00:00Z".parse().expect("ts");
        assert!(v.fresh(at + SignedDuration::from_mins(5)));
        assert!(!v.fresh(at + SignedDuration::from_mins(6)));
    }

    #[test]
    fn disagreement_is_a_share_of_capacity() {
        let a = Measurement {
            capacity_bytes: 1000,
            used_bytes: 800,
            available_bytes: 200,
            ..Default::default()
        };
        let b = Measurement {
            used_bytes: 600,
            ..a
        };
        assert!((disagreement(&a, &b) - 0.2).abs() < 1e-9);
        assert_eq!(disagreement(&a, &a), 0.0);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(parse(b"<html>").is_err());
        assert!(parse(b"{}").is_ok_and(|m| m.is_empty()));
    }
}
