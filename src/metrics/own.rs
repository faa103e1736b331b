//! The agent's own series, beside the per-volume ones: its scans, its traffic with the API
//! server, and what it told people (notifications, Events, ignored ConfigMap keys).

use prometheus::{Histogram, HistogramOpts};

use super::labels::{
    self, ApiRequestLabels, ApiServerLabels, ClaimWatchLabels, ConfigKey, ConfigKeyLabels,
    Counters, Gauges, NotificationLabels, PendingEventLabels, PendingEventOutcome,
    WatchEventLabels, WatchLabels,
};
use super::{Builder, MetricsError};

/// Scan durations from a few statfs calls to a slow API server or Postgres.
const SCAN_BUCKETS: &[f64] = &[0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// How the scans went.
pub(super) struct Scans {
    pub(super) duration: Histogram,
    pub(super) volumes_seen: prometheus::Gauge,
    pub(super) last_success: prometheus::Gauge,
    pub(super) failures: prometheus::IntCounter,
    pub(super) internal_errors: prometheus::IntCounter,
    pub(super) stuck_calls: prometheus::Gauge,
}

impl Scans {
    pub(super) fn new(b: &Builder) -> Result<Scans, MetricsError> {
        let duration = Histogram::with_opts(
            HistogramOpts::new(
                "headroom_scan_duration_seconds",
                "Time one scan of the node's volumes took.",
            )
            .buckets(SCAN_BUCKETS.to_vec()),
        )
        .map_err(|source| MetricsError::Register {
            name: "headroom_scan_duration_seconds",
            source,
        })?;
        b.register("headroom_scan_duration_seconds", duration.clone())?;
        Ok(Scans {
            duration,
            volumes_seen: b.gauge(
                "headroom_volumes_seen",
                "Volumes on this node in the last scan.",
            )?,
            last_success: b.gauge(
                "headroom_last_successful_scan_timestamp_seconds",
                "Unix time the last successful scan finished.",
            )?,
            internal_errors: b.int_counter(
                "headroom_internal_errors_total",
                "Claim evaluations that panicked (a bug); each left its claim blocked with internal_error.",
            )?,
            failures: b.int_counter(
                "headroom_scan_failures_total",
                "Scans that could not measure the node (the probe failed or timed out); the last good values are kept.",
            )?,
            stuck_calls: b.gauge(
                "headroom_probe_stuck_calls",
                "Blocking probe calls (statfs, directory reads) past their deadline that have not returned: one per hung mount.",
            )?,
        })
    }
}

/// The agent's requests to the API server and its watches.
pub(super) struct Api {
    pub(super) requests: Counters<ApiRequestLabels, 2>,
    pub(super) watch_restarts: Counters<WatchLabels, 1>,
    pub(super) watch_events: Counters<WatchEventLabels, 1>,
    pub(super) claim_watches: Gauges<ClaimWatchLabels, 1>,
    pub(super) server: Gauges<ApiServerLabels, 2>,
}

impl Api {
    pub(super) fn new(b: &Builder) -> Result<Api, MetricsError> {
        let api = Api {
            requests: Counters::new(
                b,
                "headroom_api_requests_total",
                "Kubernetes API requests, by verb and HTTP status code.",
            )?,
            watch_restarts: Counters::new(
                b,
                "headroom_watch_restarts_total",
                "Times a Kubernetes watch was restarted, by watcher.",
            )?,
            watch_events: Counters::new(
                b,
                "headroom_watch_events_total",
                "Objects received on the agent's watches (added, changed, deleted, listed), by resource.",
            )?,
            claim_watches: Gauges::new(
                b,
                "headroom_claim_watches",
                "Claim watches held, by kind: a claim mounted here, a selector of their peers, a whole namespace.",
            )?,
            server: Gauges::new(
                b,
                "headroom_api_server_info",
                "1 for the API server's release as read at start (GET /version), with how it stands against the releases headroom is tested on: tested, older, newer or unknown.",
            )?,
        };
        for resource in labels::watched::ALL {
            api.watch_events.inc_by(&WatchEventLabels { resource }, 0);
        }
        Ok(api)
    }
}

/// What the agent told people, and the ConfigMap keys it could not read.
pub(super) struct Notices {
    pub(super) notifications: Counters<NotificationLabels, 2>,
    pub(super) restore_too_small: Counters<PendingEventLabels, 1>,
    pub(super) config_key_invalid: Gauges<ConfigKeyLabels, 1>,
}

impl Notices {
    pub(super) fn new(b: &Builder) -> Result<Notices, MetricsError> {
        let notices = Notices {
            notifications: Counters::new(
                b,
                "headroom_notifications_total",
                "Notifications to each configured sink, by outcome: sent (2xx), dropped (its queue was full), failed (refused, or not delivered within retryFor).",
            )?,
            restore_too_small: Counters::new(
                b,
                "headroom_restore_too_small_events_total",
                "RestoreTooSmall Events on a restored or cloned claim left Pending below its group's size, by outcome: posted, already_posted (another agent had, 409), failed.",
            )?,
            config_key_invalid: Gauges::new(
                b,
                "headroom_config_key_invalid",
                "1 while a key of the agent's ConfigMap read outside the policy (notifications.yaml, postgres.yaml) cannot be read: it is ignored (a ConfigKeyInvalid Event on the ConfigMap says why).",
            )?,
        };
        for outcome in PendingEventOutcome::ALL {
            notices
                .restore_too_small
                .inc_by(&PendingEventLabels { outcome }, 0);
        }
        for key in ConfigKey::ALL {
            notices
                .config_key_invalid
                .set(&ConfigKeyLabels { key }, 0.0);
        }
        Ok(notices)
    }
}
