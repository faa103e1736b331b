//! Prometheus metrics of one agent: its own registry (never the global default), every series
//! labelled so it joins with the kubelet's `kubelet_volume_stats_*` (`namespace`,
//! `persistentvolumeclaim`), plus a constant `node` label and `volume_role`.
//!
//! Unknown values are absent series, never 0: a dashboard must not show "0 pending WAL files"
//! when the archiver could not be asked. Series of volumes that left the node are removed at the
//! next scan, so alerts do not fire on a pod that moved away.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError, RwLock};
use std::time::Duration;

use jiff::Timestamp;
use prometheus::{Encoder, Registry, TextEncoder};

use crate::decide::GrowKind;
use crate::report::VolumeReport;

mod families;
pub mod labels;
mod own;
mod resizes;
#[cfg(test)]
pub(crate) mod tests;
mod volume;

use labels::{
    ApiRequestLabels, ApiServerLabels, ClaimWatchLabels, ConfigKey, ConfigKeyLabels, Gauges,
    NotificationLabels, NotificationOutcome, PendingEventLabels, PendingEventOutcome, ResizeLabels,
    ResizeResult, VolumeLabels, WatchEventLabels, WatchLabels,
};
use volume::VolumeGauges;
pub use volume::{is_shared, state_label};

/// The `Content-Type` of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

/// The pseudo-state of a volume whose growth is blocked, next to [`State::ALL`].
pub const BLOCKED_STATE: &str = "Blocked";
/// The convergent-storage RFC's `Emergency` state: past the critical line, not growing now.
pub const EMERGENCY_STATE: &str = "Emergency";

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("metric {name}: {source}")]
    Register {
        name: &'static str,
        source: prometheus::Error,
    },
    #[error("encoding metrics: {0}")]
    Encode(prometheus::Error),
    #[error("encoded metrics are not UTF-8: {0}")]
    Utf8(#[from] std::string::FromUtf8Error),
}

/// The agent's metrics. Cheap to share behind an `Arc`; every method takes `&self`.
pub struct Metrics {
    registry: Registry,
    /// Held for writing while a scan's series are rebuilt, for reading while encoding, so a
    /// scrape never sees a half-written scan.
    scan_lock: RwLock<()>,
    volumes: VolumeGauges,
    resizes: resizes::Resizes,
    disagreement: Gauges<VolumeLabels, 3>,
    /// Label values of the series above that are set outside scans; removed when their volume
    /// leaves the node.
    disagreement_series: Mutex<BTreeSet<VolumeLabels>>,
    /// Each volume's last measurement time, kept across scans that could not measure it.
    measured_at: Mutex<HashMap<VolumeLabels, f64>>,
    scans: own::Scans,
    api: own::Api,
    notices: own::Notices,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Builder<'a> {
    registry: &'a Registry,
}

impl Builder<'_> {
    fn register(
        &self,
        name: &'static str,
        c: impl prometheus::core::Collector + Clone + 'static,
    ) -> Result<(), MetricsError> {
        self.registry
            .register(Box::new(c))
            .map_err(|source| MetricsError::Register { name, source })
    }

    fn gauge(&self, name: &'static str, help: &str) -> Result<prometheus::Gauge, MetricsError> {
        let g = prometheus::Gauge::new(name, help)
            .map_err(|source| MetricsError::Register { name, source })?;
        self.register(name, g.clone())?;
        Ok(g)
    }

    fn int_counter(
        &self,
        name: &'static str,
        help: &str,
    ) -> Result<prometheus::IntCounter, MetricsError> {
        let c = prometheus::IntCounter::new(name, help)
            .map_err(|source| MetricsError::Register { name, source })?;
        self.register(name, c.clone())?;
        Ok(c)
    }
}

/// The agent's own registry (never the global default), `node` on every series.
fn node_registry(node: &str) -> Result<Registry, MetricsError> {
    let labels = HashMap::from([("node".to_string(), node.to_string())]);
    Registry::new_custom(None, Some(labels)).map_err(|source| MetricsError::Register {
        name: "node",
        source,
    })
}

fn bool_f(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

impl Metrics {
    /// A fresh registry whose every series carries `node="<node>"`.
    pub fn new(node: &str) -> Result<Metrics, MetricsError> {
        let registry = node_registry(node)?;
        let b = Builder {
            registry: &registry,
        };
        let metrics = Metrics {
            scan_lock: RwLock::new(()),
            volumes: VolumeGauges::new(&b)?,
            resizes: resizes::Resizes::new(&b)?,
            disagreement: Gauges::new(
                &b,
                "headroom_kubelet_statfs_disagreement_ratio",
                "How far the kubelet's used bytes are from statfs's, as a fraction of capacity (0 = agree).",
            )?,
            disagreement_series: Mutex::new(BTreeSet::new()),
            measured_at: Mutex::new(HashMap::new()),
            scans: own::Scans::new(&b)?,
            api: own::Api::new(&b)?,
            notices: own::Notices::new(&b)?,
            registry,
        };
        metrics.claim_watches(&BTreeMap::new());
        Ok(metrics)
    }

    /// Replaces every per-volume series with this scan's, drops the series of volumes no longer
    /// reported, and records the scan itself.
    pub fn observe_scan(
        &self,
        reports: &[VolumeReport],
        duration: Duration,
        finished_at: Timestamp,
    ) {
        self.observe_volumes(reports);
        self.scans.duration.observe(duration.as_secs_f64());
        self.scans
            .last_success
            .set(finished_at.as_millisecond() as f64 / 1000.0);
    }

    /// Every volume's series from its report; the series of volumes not in `reports` go.
    pub fn observe_volumes(&self, reports: &[VolumeReport]) {
        let _w = self
            .scan_lock
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let present: BTreeSet<VolumeLabels> = reports.iter().map(VolumeLabels::of).collect();
        let samples = {
            let mut seen = lock(&self.measured_at);
            seen.retain(|l, _| present.contains(l));
            let measured: Vec<Option<f64>> = reports
                .iter()
                .map(|r| {
                    let key = VolumeLabels::of(r);
                    match r.measured_at {
                        Some(t) => {
                            let secs = t.as_millisecond() as f64 / 1000.0;
                            seen.insert(key, secs);
                            Some(secs)
                        }
                        None => seen.get(&key).copied(),
                    }
                })
                .collect();
            volume::ScanSeries::of(reports.iter().zip(measured))
        };
        self.volumes.replace(samples);
        self.resizes.retain(|l| present.contains(l));
        lock(&self.disagreement_series).retain(|l| {
            let keep = present.contains(l);
            if !keep {
                self.disagreement.remove(l);
            }
            keep
        });
        self.scans.volumes_seen.set(reports.len() as f64);
    }

    /// A scan that could not measure: the per-volume series and the last-successful timestamp
    /// stay as the last good scan left them.
    pub fn scan_failed(&self, duration: Duration) {
        self.scans.duration.observe(duration.as_secs_f64());
        self.scans.failures.inc();
    }

    pub fn stuck_calls(&self, n: usize) {
        self.scans.stuck_calls.set(n as f64);
    }

    /// Counts one resize request.
    pub fn resize(&self, volume: VolumeLabels, kind: GrowKind, result: ResizeResult) {
        self.resizes.inc(
            ResizeLabels {
                volume,
                kind,
                result,
            },
            None,
        );
    }

    /// [`Metrics::resize`] for a volume as reported: a tablespace volume's series carry its
    /// `tablespace` label, as the per-volume series do.
    pub fn resize_of(&self, r: &VolumeReport, kind: GrowKind, result: ResizeResult) {
        let labels = ResizeLabels {
            volume: VolumeLabels::of(r),
            kind,
            result,
        };
        self.resizes.inc(labels, r.tablespace.clone());
    }

    pub fn api_request(&self, verb: &'static str, code: u16) {
        self.api.requests.inc(&ApiRequestLabels { verb, code });
    }

    /// The API server's release, read once at start.
    pub fn api_server(&self, git_version: &str, support: &'static str) {
        let labels = ApiServerLabels {
            git_version: git_version.to_string(),
            support,
        };
        self.api.server.set(&labels, 1.0);
    }

    /// One claim evaluation that panicked.
    pub fn internal_error(&self) {
        self.scans.internal_errors.inc();
    }

    pub fn watch_restart(&self, watcher: &str) {
        self.api.watch_restarts.inc(&WatchLabels {
            watcher: watcher.to_string(),
        });
    }

    /// `n` notifications of `sink` ended with `outcome` (0 exports the series from zero).
    pub fn notifications(&self, sink: &str, outcome: NotificationOutcome, n: u64) {
        let labels = NotificationLabels {
            sink: sink.to_string(),
            outcome,
        };
        self.notices.notifications.inc_by(&labels, n);
    }

    /// Whether `key` of the agent's ConfigMap could be read at the last scan.
    pub fn config_key_invalid(&self, key: ConfigKey, invalid: bool) {
        let v = if invalid { 1.0 } else { 0.0 };
        self.notices
            .config_key_invalid
            .set(&ConfigKeyLabels { key }, v);
    }

    /// One `RestoreTooSmall` Event tried, and what became of it.
    pub fn restore_too_small(&self, outcome: PendingEventOutcome) {
        self.notices
            .restore_too_small
            .inc(&PendingEventLabels { outcome });
    }

    /// An object received on a watch of `resource`.
    pub fn watch_event(&self, resource: &'static str) {
        self.api.watch_events.inc(&WatchEventLabels { resource });
    }

    /// The claim watches held now, by kind; every kind is set, so a rate is defined from 0.
    pub fn claim_watches(&self, by_kind: &BTreeMap<&'static str, usize>) {
        for kind in ["claim", "selector", "namespace"] {
            let n = by_kind.get(kind).copied().unwrap_or(0);
            self.api
                .claim_watches
                .set(&ClaimWatchLabels { kind }, n as f64);
        }
    }

    /// `ratio`: |kubelet used - statfs used| / capacity, for a volume both measured.
    pub fn kubelet_disagreement(&self, volume: VolumeLabels, ratio: f64) {
        self.disagreement.set(&volume, ratio);
        lock(&self.disagreement_series).insert(volume);
    }

    /// The registry, for collectors kept elsewhere (the reclaim metrics) to join `/metrics`.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The Prometheus text exposition format ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> Result<String, MetricsError> {
        let families = {
            let _r = self
                .scan_lock
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            self.registry.gather()
        };
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&families, &mut buf)
            .map_err(MetricsError::Encode)?;
        Ok(String::from_utf8(buf)?)
    }
}
