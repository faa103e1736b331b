//! The reclaim metrics. They live in their own registry until the agent serves metrics; then
//! [`ReclaimMetrics::register`] adds them to the agent's registry (the handles are shared, so
//! counts recorded before or after registering are the same series).

use prometheus::{Gauge, IntCounter, IntCounterVec, Opts, Registry};

use super::state::{Outcome, ReclaimRecord};

#[derive(Clone)]
pub struct ReclaimMetrics {
    pub registry: Registry,
    bytes: IntCounter,
    runs: IntCounterVec,
    last_success: Gauge,
}

impl ReclaimMetrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let m = ReclaimMetrics {
            registry: Registry::new(),
            bytes: IntCounter::new(
                "headroom_reclaim_bytes_total",
                "Bytes the filesystems reported discarded by FITRIM on this node",
            )?,
            runs: IntCounterVec::new(
                Opts::new(
                    "headroom_reclaim_runs_total",
                    "Trims attempted on this node, by result (succeeded, failed)",
                ),
                &["result"],
            )?,
            last_success: Gauge::new(
                "headroom_reclaim_last_success_timestamp_seconds",
                "Unix time of the last successful trim on this node",
            )?,
        };
        m.register(&m.registry)?;
        Ok(m)
    }

    /// Adds these metrics to another registry (the agent's).
    pub fn register(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.bytes.clone()))?;
        registry.register(Box::new(self.runs.clone()))?;
        registry.register(Box::new(self.last_success.clone()))?;
        Ok(())
    }

    pub fn record(&self, r: &ReclaimRecord) {
        match r.result {
            Outcome::Succeeded => {
                self.runs.with_label_values(&["succeeded"]).inc();
                self.bytes.inc_by(r.bytes);
                self.last_success.set(r.at.as_millisecond() as f64 / 1000.0);
            }
            Outcome::Failed => self.runs.with_label_values(&["failed"]).inc(),
            // Not a run: nothing was attempted.
            Outcome::NotPossible => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::Encoder;

    #[test]
    fn records_runs_bytes_and_last_success() {
        let m = ReclaimMetrics::new().expect("metrics");
        let rec = |result, bytes| ReclaimRecord {
            at: "2026-01-04T03:00:00Z".parse().expect("ts"),
            bytes,
            duration_ms: 5,
            result,
            node: "n".into(),
            error: None,
        };
        m.record(&rec(Outcome::Succeeded, 1000));
        m.record(&rec(Outcome::Succeeded, 24));
        m.record(&rec(Outcome::Failed, 0));
        let agent = Registry::new();
        m.register(&agent).expect("register elsewhere");
        let mut out = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&agent.gather(), &mut out)
            .expect("encode");
        let text = String::from_utf8(out).expect("utf8");
        assert!(text.contains("headroom_reclaim_bytes_total 1024"), "{text}");
        assert!(text.contains("headroom_reclaim_runs_total{result=\"succeeded\"} 2"));
        assert!(text.contains("headroom_reclaim_runs_total{result=\"failed\"} 1"));
        assert!(text.contains("headroom_reclaim_last_success_timestamp_seconds 1767495600"));
    }
}
