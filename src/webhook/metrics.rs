//! The webhook's metrics: every request answered, by outcome, and how long the answer took. A
//! webhook that allows everything (`failurePolicy: Ignore`, no patch when in doubt) fails
//! silently; these series are how an operator sees that new members are no longer born at size.

use prometheus::{Gauge, Histogram, HistogramOpts, IntCounterVec, Opts, Registry};

/// From a TLS round trip on loopback to the review's deadline (10 s by default).
const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// What became of one request to the webhook. Every review is allowed; this says with what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The new claim was raised to its group's size.
    Raised,
    /// Created at the size it asked for (no group, not opted in, already at size).
    AsRequested,
    /// Created as asked because its policy is invalid (the warning names the field).
    InvalidPolicy,
    /// A review of something other than a claim's CREATE.
    NotACreate,
    /// A body that is not an AdmissionReview this webhook can read.
    Unreadable,
    /// No size decided within the deadline.
    TimedOut,
    /// The group's members could not be read from the API server.
    LookupFailed,
    /// The claim's data source (a VolumeSnapshot, a claim) could not be sized: missing, its API
    /// not served, refused by RBAC, another namespace's, or a `restoreSize` that is no size.
    /// Sized by its group alone, if it has one.
    SourceUnknown,
    /// Not answered with a review: not a POST, a body too large or too slow.
    Refused,
}

impl Outcome {
    pub const ALL: [Outcome; 9] = [
        Outcome::Raised,
        Outcome::AsRequested,
        Outcome::InvalidPolicy,
        Outcome::NotACreate,
        Outcome::Unreadable,
        Outcome::TimedOut,
        Outcome::LookupFailed,
        Outcome::SourceUnknown,
        Outcome::Refused,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Raised => "raised",
            Outcome::AsRequested => "as_requested",
            Outcome::InvalidPolicy => "invalid_policy",
            Outcome::NotACreate => "not_a_create",
            Outcome::Unreadable => "unreadable",
            Outcome::TimedOut => "timed_out",
            Outcome::LookupFailed => "lookup_failed",
            Outcome::SourceUnknown => "source_unknown",
            Outcome::Refused => "refused",
        }
    }
}

/// Shared handles: clones count into the same series.
#[derive(Clone)]
pub struct WebhookMetrics {
    requests: IntCounterVec,
    duration: Histogram,
    expiry: Gauge,
}

impl WebhookMetrics {
    /// The series, registered in `registry` (the agent's), every outcome at 0 from the start so
    /// a rate over them is defined before the first review.
    pub fn new(registry: &Registry) -> Result<Self, prometheus::Error> {
        let requests = IntCounterVec::new(
            Opts::new(
                "headroom_webhook_requests_total",
                "Requests the claim admission webhook answered, by outcome",
            ),
            &["outcome"],
        )?;
        let duration = Histogram::with_opts(
            HistogramOpts::new(
                "headroom_webhook_request_duration_seconds",
                "Time from a webhook request's arrival to its answer, body included",
            )
            .buckets(BUCKETS.to_vec()),
        )?;
        // A renewal that keeps failing is silent until the certificate expires and every
        // review fails its handshake; this is what an alert watches instead.
        let expiry = Gauge::new(
            "headroom_webhook_certificate_expiry_timestamp_seconds",
            "When the certificate the webhook serves expires (Unix time); 0 before one is served",
        )?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        registry.register(Box::new(expiry.clone()))?;
        for o in Outcome::ALL {
            requests.with_label_values(&[o.as_str()]);
        }
        Ok(WebhookMetrics {
            requests,
            duration,
            expiry,
        })
    }

    /// The served certificate's validity; `None` (unreadable) shows as 0, already expired.
    pub fn expires(&self, validity: Option<super::certs::Validity>) {
        #[allow(clippy::cast_precision_loss)] // seconds since 1970 fit f64 exactly
        self.expiry
            .set(validity.map_or(0.0, |v| v.not_after as f64));
    }

    pub fn answered(&self, outcome: Outcome, took: std::time::Duration) {
        self.requests.with_label_values(&[outcome.as_str()]).inc();
        self.duration.observe(took.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::Encoder;
    use std::time::Duration;

    fn text(r: &Registry) -> String {
        let mut out = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&r.gather(), &mut out)
            .expect("encode");
        String::from_utf8(out).expect("utf8")
    }

    #[test]
    fn every_outcome_starts_at_zero_and_answers_are_counted_and_timed() {
        let r = Registry::new();
        let m = WebhookMetrics::new(&r).expect("metrics");
        for o in Outcome::ALL {
            let line = format!(
                "headroom_webhook_requests_total{{outcome=\"{}\"}} 0",
                o.as_str()
            );
            assert!(text(&r).contains(&line), "{line}");
        }
        m.clone()
            .answered(Outcome::Raised, Duration::from_millis(3));
        m.answered(Outcome::Raised, Duration::from_millis(30));
        m.answered(Outcome::TimedOut, Duration::from_secs(10));
        let t = text(&r);
        assert!(
            t.contains("headroom_webhook_requests_total{outcome=\"raised\"} 2"),
            "{t}"
        );
        assert!(
            t.contains("headroom_webhook_requests_total{outcome=\"timed_out\"} 1"),
            "{t}"
        );
        assert!(
            t.contains("headroom_webhook_request_duration_seconds_count 3"),
            "{t}"
        );
        assert!(
            t.contains("headroom_webhook_request_duration_seconds_bucket{le=\"0.005\"} 1"),
            "{t}"
        );
        assert!(
            t.contains("headroom_webhook_request_duration_seconds_bucket{le=\"0.05\"} 2"),
            "{t}"
        );
    }
}
