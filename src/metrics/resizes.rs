//! `headroom_resizes_total`: resize requests by volume, kind and result. A collector of its own
//! rather than a counter vec, so a tablespace volume's series carry the `tablespace` label and
//! every other volume's do not (a vec has one label set for all).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use prometheus::core::{Collector, Desc};
use prometheus::proto::{Counter, LabelPair, Metric, MetricFamily, MetricType};

use super::labels::{LabelSet, ResizeLabels, VolumeLabels};
use super::{Builder, MetricsError};

const NAME: &str = "headroom_resizes_total";
const HELP: &str = "Resize requests sent, by kind (Grow, ScheduledGrow, EmergencyGrow, GroupGrow, Retry) and result.";

/// The series' labels; then the tablespace, if any.
type Key = (ResizeLabels, Option<String>);

#[derive(Clone)]
pub(super) struct Resizes(Arc<Inner>);

struct Inner {
    desc: Desc,
    counts: Mutex<BTreeMap<Key, u64>>,
}

impl Resizes {
    pub(super) fn new(b: &Builder) -> Result<Resizes, MetricsError> {
        let labels = ResizeLabels::NAMES.iter().map(|l| l.to_string()).collect();
        let desc = Desc::new(NAME.into(), HELP.into(), labels, HashMap::new())
            .map_err(|source| MetricsError::Register { name: NAME, source })?;
        let r = Resizes(Arc::new(Inner {
            desc,
            counts: Mutex::new(BTreeMap::new()),
        }));
        b.register(NAME, r.clone())?;
        Ok(r)
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, u64>> {
        self.0.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn inc(&self, labels: ResizeLabels, tablespace: Option<String>) {
        *self.counts().entry((labels, tablespace)).or_insert(0) += 1;
    }

    /// Drops the series of volumes not in `keep`.
    pub(super) fn retain(&self, keep: impl Fn(&VolumeLabels) -> bool) {
        self.counts().retain(|(labels, _), _| keep(&labels.volume));
    }
}

impl Collector for Resizes {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.0.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let metrics = self
            .counts()
            .iter()
            .map(|((key, tablespace), n)| {
                let values = key.values();
                let mut labels: Vec<LabelPair> = ResizeLabels::NAMES
                    .iter()
                    .zip(values.iter())
                    .map(|(k, v)| (*k, v.as_ref()))
                    .chain(tablespace.as_deref().map(|t| ("tablespace", t)))
                    .map(|(k, v)| {
                        let mut l = LabelPair::default();
                        l.set_name(k.to_string());
                        l.set_value(v.to_string());
                        l
                    })
                    .collect();
                labels.sort_by(|a, b| a.name().cmp(b.name()));
                let mut c = Counter::default();
                c.set_value(*n as f64);
                let mut m = Metric::default();
                m.set_counter(c);
                m.set_label(labels);
                m
            })
            .collect();
        let mut mf = MetricFamily::default();
        mf.set_name(NAME.into());
        mf.set_help(HELP.into());
        mf.set_field_type(MetricType::COUNTER);
        mf.set_metric(metrics);
        vec![mf]
    }
}
