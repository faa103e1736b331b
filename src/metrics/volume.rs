//! Per-volume series: one gauge family per measured or decided value, rebuilt every scan.
//!
//! Not prometheus `GaugeVec`s: each child of a vec carries its own copy of the family's
//! descriptor (name, help, label names) and its label pairs, some 600 bytes a series; at about
//! 45 series a volume that was 13 MiB resident for 500 volumes, all rebuilt every scan. A scan
//! here leaves one compact list of samples, turned into families only when scraped.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus::core::{Collector, Desc};
use prometheus::proto::{Gauge, LabelPair, Metric, MetricFamily, MetricType};

use super::families::*;
use super::labels::{LabelSet, VolumeLabels};
use super::{BLOCKED_STATE, Builder, EMERGENCY_STATE, MetricsError, bool_f};
use crate::decide::restart::Restart;
use crate::decide::{BlockReason, Decision, State, Verdict};
use crate::report::VolumeReport;

/// One series of the last scan.
struct Sample {
    family: u8,
    /// Index into [`ScanSeries::volumes`].
    volume: u32,
    /// Values of the family's extra labels, in order.
    extra: Box<[Cow<'static, str>]>,
    value: f64,
}

/// A scan's series: each volume's [`VolumeLabels`] once (and its tablespace, the
/// `tablespace` label of a tablespace volume's series only), and its samples.
#[derive(Default)]
pub(super) struct ScanSeries {
    volumes: Vec<(VolumeLabels, Option<String>)>,
    samples: Vec<Sample>,
}

impl ScanSeries {
    fn put<const N: usize>(&mut self, f: &Family<N>, extra: [Cow<'static, str>; N], value: f64) {
        self.samples.push(Sample {
            family: f.index as u8,
            volume: self.volumes.len().saturating_sub(1) as u32,
            extra: extra.into(),
            value,
        });
    }

    fn put_opt(&mut self, f: &Family<0>, value: Option<f64>) {
        if let Some(v) = value {
            self.put(f, [], v);
        }
    }

    /// The reports' series; a volume reported twice keeps its last report, as a vec's child
    /// would.
    pub(super) fn of<'a>(
        reports: impl IntoIterator<Item = (&'a VolumeReport, Option<f64>)>,
    ) -> ScanSeries {
        let reports: Vec<_> = reports.into_iter().collect();
        let last: HashMap<VolumeLabels, usize> = reports
            .iter()
            .enumerate()
            .map(|(i, (r, _))| (VolumeLabels::of(r), i))
            .collect();
        let mut s = ScanSeries::default();
        for (i, (r, at)) in reports.iter().enumerate() {
            if last.get(&VolumeLabels::of(r)) == Some(&i) {
                s.add(r, *at);
            }
        }
        // Kept until the next scan: no room left over from growing.
        s.samples.shrink_to_fit();
        s
    }

    /// `measured_at`: the report's measurement time, or the last one remembered for the volume.
    fn add(&mut self, r: &VolumeReport, measured_at: Option<f64>) {
        self.volumes
            .push((VolumeLabels::of(r), r.tablespace.clone()));
        self.put_opt(&MEASURED_AT, measured_at);
        if let Some(why) = r.not_measured {
            self.put(&NOT_MEASURED, [why.as_str().into()], 1.0);
        }
        let measured_by = serde_json::to_value(r.measured_by)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let info: [Cow<'static, str>; 5] = [
            r.pv.clone().into(),
            r.storage_class.clone().unwrap_or_default().into(),
            r.fs_class.clone().into(),
            measured_by.into(),
            r.postgres_cluster.clone().unwrap_or_default().into(),
        ];
        self.put(&INFO, info, 1.0);
        if let Some(m) = &r.measurement {
            self.put(&CAPACITY, [], m.capacity_bytes as f64);
            self.put(&USED, [], m.used_bytes as f64);
            self.put(&AVAILABLE, [], m.available_bytes as f64);
            self.put(&USED_RATIO, [], m.used_percent() / 100.0);
            // Filesystems without an inode limit (btrfs) report 0 inodes: unknown, not full.
            if m.inodes_total > 0 {
                self.put(&INODES_TOTAL, [], m.inodes_total as f64);
                self.put(&INODES_USED, [], m.inodes_used as f64);
                let free = m.inodes_total.saturating_sub(m.inodes_used);
                self.put(&INODES_FREE, [], free as f64);
            }
        }
        self.put(&HISTORY_IGNORED, [], bool_f(r.future_history.is_some()));
        let fallback = r.decision.fallback.map(|f| f.as_str());
        for reason in crate::policy::Fallback::REASONS {
            self.put(
                &POLICY_FALLBACK,
                [reason.into()],
                bool_f(fallback == Some(reason)),
            );
        }
        if let Some(q) = &r.quota {
            let labels = [q.line.quota.clone().into(), q.line.resource.clone().into()];
            self.put(&QUOTA_LEFT, labels, q.left_bytes as f64);
        }
        if let Some(p) = &r.pool {
            let labels = [p.segment.clone().into(), p.source.clone().into()];
            self.put(&POOL_FREE, labels, p.free_bytes as f64);
        }
        let size = r.claim.current_bytes();
        if let Some(limit) = r.limit_bytes {
            self.put(&LIMIT, [], limit as f64);
            self.put(&AT_LIMIT, [], bool_f(size >= limit));
        }
        self.put(&SHARED, [], bool_f(is_shared(r)));
        if size > 0 {
            self.put(&EFFECTIVE_SIZE, [], size as f64);
        }
        self.put_opt(&TARGET_SIZE, r.decision.target_bytes.map(|b| b as f64));
        let waiting = r.enforced.as_ref().and_then(|e| e.recommendation.as_ref());
        self.put_opt(&RECOMMENDED, waiting.map(|w| w.to_bytes as f64));
        // From the claim's own history, so a restarted agent or a moved pod still says it.
        if let Some((a, landed)) = r
            .last_action
            .as_ref()
            .and_then(|a| a.landed.map(|l| (a, l)))
        {
            let secs = landed.as_millisecond() as f64 / 1000.0;
            self.put(&LAST_RESIZE, [a.kind.as_str().into()], secs);
        }
        self.put_opt(&SECONDS_TO_FULL, r.decision.seconds_to_full);
        self.put_opt(&SECONDS_TO_LIMIT, r.decision.seconds_to_limit);
        let current = state_label(&r.decision);
        let states = State::ALL.iter().map(|s| s.as_str());
        for s in states.chain([BLOCKED_STATE, EMERGENCY_STATE]) {
            self.put(&STATE, [s.into()], bool_f(s == current));
        }
        let reason = r.decision.blocked_reason();
        // A disabled or invalid policy (or an evaluation that failed) has no budget; its 0 would
        // read as "exhausted".
        if !matches!(
            reason,
            Some(BlockReason::Disabled | BlockReason::InvalidPolicy | BlockReason::InternalError)
        ) {
            self.put(&BUDGET, [], f64::from(r.decision.budget_left));
        }
        for b in BlockReason::ALL {
            self.put(&BLOCKED, [b.as_str().into()], bool_f(reason == Some(b)));
        }
        if let Some(restart) = r.decision.restart {
            for name in Restart::NAMES {
                self.put(&RESTART, [name.into()], bool_f(name == restart.as_str()));
            }
        }
        if let Some(w) = &r.wal {
            self.add_wal(w);
        }
    }

    fn add_wal(&mut self, w: &crate::decide::WalHealth) {
        self.put_opt(&WAL_ARCHIVE_CONFIGURED, w.archive_configured.map(bool_f));
        self.put_opt(&WAL_ARCHIVE_HEALTHY, w.archive_healthy.map(bool_f));
        self.put_opt(&WAL_PENDING, w.pending_files.map(|n| n as f64));
        self.put_opt(
            &WAL_OLDEST_PENDING,
            w.oldest_pending_seconds.map(|n| n as f64),
        );
        self.put_opt(&WAL_SIZE, w.detail.wal_bytes.map(|n| n as f64));
        if let Some(slots) = &w.inactive_slots {
            self.put(&WAL_INACTIVE_SLOTS, [], slots.len() as f64);
            for s in slots {
                self.put(
                    &WAL_SLOT_RETENTION,
                    [s.name.clone().into()],
                    s.retained_bytes as f64,
                );
            }
        }
    }
}

/// The per-volume families, registered as one collector.
#[derive(Clone)]
pub(super) struct VolumeGauges(Arc<Inner>);

struct Inner {
    descs: Vec<Desc>,
    last: Mutex<Arc<ScanSeries>>,
}

impl VolumeGauges {
    pub(super) fn new(b: &Builder) -> Result<VolumeGauges, MetricsError> {
        let descs = FAMILIES
            .iter()
            .map(|f| {
                let labels = VolumeLabels::NAMES
                    .iter()
                    .chain(f.extra)
                    .map(|l| l.to_string())
                    .collect();
                Desc::new(f.name.into(), f.help.into(), labels, HashMap::new()).map_err(|source| {
                    MetricsError::Register {
                        name: f.name,
                        source,
                    }
                })
            })
            .collect::<Result<_, _>>()?;
        let g = VolumeGauges(Arc::new(Inner {
            descs,
            last: Mutex::new(Arc::new(ScanSeries::default())),
        }));
        b.register("headroom_volume_*", g.clone())?;
        Ok(g)
    }

    /// Replaces every per-volume series with these.
    pub(super) fn replace(&self, samples: ScanSeries) {
        *self.0.last.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(samples);
    }
}

impl Collector for VolumeGauges {
    fn desc(&self) -> Vec<&Desc> {
        self.0.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let last = self
            .0
            .last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut metrics: Vec<Vec<Metric>> = FAMILIES.iter().map(|_| Vec::new()).collect();
        for s in &last.samples {
            let (Some(family), Some(volume)) = (
                FAMILIES.get(usize::from(s.family)),
                last.volumes.get(s.volume as usize),
            ) else {
                continue;
            };
            let (volume, tablespace) = volume;
            let names = VolumeLabels::NAMES.iter().chain(family.extra);
            let volume = volume.values();
            let values = volume
                .iter()
                .map(|v| v.as_ref())
                .chain(s.extra.iter().map(|v| v.as_ref()));
            // Sorted by name, as a vec's child sorts its pairs.
            let mut labels: Vec<LabelPair> = names
                .copied()
                .zip(values)
                .chain(tablespace.as_deref().map(|t| ("tablespace", t)))
                .map(|(n, v)| {
                    let mut l = LabelPair::default();
                    l.set_name(n.to_string());
                    l.set_value(v.to_string());
                    l
                })
                .collect();
            labels.sort_by(|a, b| a.name().cmp(b.name()));
            let mut g = Gauge::default();
            g.set_value(s.value);
            let mut m = Metric::from_gauge(g);
            m.set_label(labels);
            if let Some(list) = metrics.get_mut(usize::from(s.family)) {
                list.push(m);
            }
        }
        FAMILIES
            .iter()
            .zip(metrics)
            .map(|(f, list)| {
                let mut mf = MetricFamily::default();
                mf.set_name(f.name.into());
                mf.set_help(f.help.into());
                mf.set_field_type(MetricType::GAUGE);
                mf.set_metric(list);
                mf
            })
            .collect()
    }
}

/// The state shown for a volume: the engine's state, [`BLOCKED_STATE`], or [`EMERGENCY_STATE`]
/// for a convergent volume past the critical line that is not growing this instant.
pub fn state_label(decision: &Decision) -> &'static str {
    match decision.verdict {
        Verdict::Grow { .. } => State::NeedsGrow.as_str(),
        _ if decision.emergency => EMERGENCY_STATE,
        Verdict::NoAction { state } => state.as_str(),
        Verdict::Blocked { .. } => BLOCKED_STATE,
    }
}

/// The numbers are a filesystem's shared with other claims (or the host), not this claim's own.
pub fn is_shared(r: &VolumeReport) -> bool {
    matches!(r.fs_class.as_str(), "shared_network" | "directory")
        || !r.shared_with.is_empty()
        || r.decision.blocked_reason() == Some(BlockReason::SharedFilesystem)
}
