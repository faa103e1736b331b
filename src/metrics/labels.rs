//! Typed label sets: each series family names its labels once, in a type, and a sample gives a
//! value of that type; a label count that does not match its names cannot compile (the
//! `prometheus` crate's vecs take `&[&str]` and refuse a wrong count only at run time).

use std::borrow::Cow;
use std::marker::PhantomData;

use prometheus::{GaugeVec, IntCounterVec, Opts};

use super::{Builder, MetricsError};
use crate::decide::{GrowKind, VolumeRole};
use crate::report::VolumeReport;

/// `N` label names and, for each value of the type, `N` label values.
pub trait LabelSet<const N: usize> {
    const NAMES: [&'static str; N];
    fn values(&self) -> [Cow<'_, str>; N];
}

/// One volume's series: joins with the kubelet's `kubelet_volume_stats_*` on `namespace` and
/// `persistentvolumeclaim` (the registry adds `node`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VolumeLabels {
    pub namespace: String,
    pub persistentvolumeclaim: String,
    pub volume_role: VolumeRole,
}

impl VolumeLabels {
    pub fn new(namespace: &str, persistentvolumeclaim: &str, volume_role: VolumeRole) -> Self {
        VolumeLabels {
            namespace: namespace.to_string(),
            persistentvolumeclaim: persistentvolumeclaim.to_string(),
            volume_role,
        }
    }

    pub fn of(r: &VolumeReport) -> Self {
        VolumeLabels::new(&r.namespace, &r.pvc, r.role)
    }
}

impl LabelSet<3> for VolumeLabels {
    const NAMES: [&'static str; 3] = ["namespace", "persistentvolumeclaim", "volume_role"];
    fn values(&self) -> [Cow<'_, str>; 3] {
        [
            Cow::Borrowed(&self.namespace),
            Cow::Borrowed(&self.persistentvolumeclaim),
            Cow::Borrowed(self.volume_role.as_str()),
        ]
    }
}

/// What became of a resize request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ResizeResult {
    Success,
    /// The claim changed since it was read (409): another writer, decided again.
    Conflict,
    Error,
}

impl ResizeResult {
    pub fn as_str(self) -> &'static str {
        match self {
            ResizeResult::Success => "success",
            ResizeResult::Conflict => "conflict",
            ResizeResult::Error => "error",
        }
    }
}

/// `headroom_resizes_total`: a volume's resize requests by kind and result.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResizeLabels {
    pub volume: VolumeLabels,
    pub kind: GrowKind,
    pub result: ResizeResult,
}

impl LabelSet<5> for ResizeLabels {
    const NAMES: [&'static str; 5] = [
        "namespace",
        "persistentvolumeclaim",
        "volume_role",
        "kind",
        "result",
    ];
    fn values(&self) -> [Cow<'_, str>; 5] {
        let [ns, pvc, role] = self.volume.values();
        [
            ns,
            pvc,
            role,
            Cow::Borrowed(self.kind.as_str()),
            Cow::Borrowed(self.result.as_str()),
        ]
    }
}

/// `headroom_api_requests_total`: by verb and HTTP status code.
pub struct ApiRequestLabels {
    pub verb: &'static str,
    pub code: u16,
}

impl LabelSet<2> for ApiRequestLabels {
    const NAMES: [&'static str; 2] = ["verb", "code"];
    fn values(&self) -> [Cow<'_, str>; 2] {
        [Cow::Borrowed(self.verb), Cow::Owned(self.code.to_string())]
    }
}

/// `headroom_watch_restarts_total`: by watcher.
pub struct WatchLabels {
    pub watcher: String,
}

impl LabelSet<1> for WatchLabels {
    const NAMES: [&'static str; 1] = ["watcher"];
    fn values(&self) -> [Cow<'_, str>; 1] {
        [Cow::Borrowed(&self.watcher)]
    }
}

/// The resources the agent watches, as `headroom_watch_events_total` names them; every one is
/// exported from 0.
pub mod watched {
    pub const PODS: &str = "pods";
    pub const NODES: &str = "nodes";
    pub const STORAGE_CLASSES: &str = "storageclasses";
    pub const CONFIGMAPS: &str = "configmaps";
    pub const NAMESPACES: &str = "namespaces";
    pub const CSI_DRIVERS: &str = "csidrivers";
    pub const CLAIMS: &str = "persistentvolumeclaims";
    pub const QUOTAS: &str = "resourcequotas";
    pub const ALL: [&str; 8] = [
        PODS,
        NODES,
        STORAGE_CLASSES,
        CONFIGMAPS,
        NAMESPACES,
        CSI_DRIVERS,
        CLAIMS,
        QUOTAS,
    ];
}

/// `headroom_watch_events_total`: by the resource watched.
pub struct WatchEventLabels {
    pub resource: &'static str,
}

impl LabelSet<1> for WatchEventLabels {
    const NAMES: [&'static str; 1] = ["resource"];
    fn values(&self) -> [Cow<'_, str>; 1] {
        [Cow::Borrowed(self.resource)]
    }
}

/// `headroom_claim_watches`: by kind (claim, selector, namespace).
pub struct ClaimWatchLabels {
    pub kind: &'static str,
}

impl LabelSet<1> for ClaimWatchLabels {
    const NAMES: [&'static str; 1] = ["kind"];
    fn values(&self) -> [Cow<'_, str>; 1] {
        [Cow::Borrowed(self.kind)]
    }
}

/// The API server's release as the agent read it at start, and how it stands against the
/// releases headroom is tested on (`tested`, `older`, `newer`, `unknown`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ApiServerLabels {
    pub git_version: String,
    pub support: &'static str,
}

impl LabelSet<2> for ApiServerLabels {
    const NAMES: [&'static str; 2] = ["git_version", "support"];
    fn values(&self) -> [Cow<'_, str>; 2] {
        [
            Cow::Borrowed(&self.git_version),
            Cow::Borrowed(self.support),
        ]
    }
}

/// What became of one notification at one sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NotificationOutcome {
    /// The sink answered 2xx.
    Sent,
    /// Not queued: the sink's queue was full.
    Dropped,
    /// Queued, then given up: refused (a 4xx), or not delivered within its `retryFor`.
    Failed,
}

impl NotificationOutcome {
    pub const ALL: [NotificationOutcome; 3] = [
        NotificationOutcome::Sent,
        NotificationOutcome::Dropped,
        NotificationOutcome::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NotificationOutcome::Sent => "sent",
            NotificationOutcome::Dropped => "dropped",
            NotificationOutcome::Failed => "failed",
        }
    }
}

/// `headroom_notifications_total`: by sink (its name in `notifications.yaml`) and outcome.
pub struct NotificationLabels {
    pub sink: String,
    pub outcome: NotificationOutcome,
}

impl LabelSet<2> for NotificationLabels {
    const NAMES: [&'static str; 2] = ["sink", "outcome"];
    fn values(&self) -> [Cow<'_, str>; 2] {
        [
            Cow::Borrowed(&self.sink),
            Cow::Borrowed(self.outcome.as_str()),
        ]
    }
}

/// What became of one `RestoreTooSmall` Event an agent tried to create.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PendingEventOutcome {
    /// Created.
    Posted,
    /// Another agent had created it (409): the claim has its one Event.
    AlreadyPosted,
    /// Refused or not answered in time; tried again at a later scan.
    Failed,
}

impl PendingEventOutcome {
    pub const ALL: [PendingEventOutcome; 3] = [
        PendingEventOutcome::Posted,
        PendingEventOutcome::AlreadyPosted,
        PendingEventOutcome::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PendingEventOutcome::Posted => "posted",
            PendingEventOutcome::AlreadyPosted => "already_posted",
            PendingEventOutcome::Failed => "failed",
        }
    }
}

/// `headroom_restore_too_small_events_total`: by outcome. Not by claim: the claims are the
/// tenants' to create, one series each would grow without bound.
pub struct PendingEventLabels {
    pub outcome: PendingEventOutcome,
}

impl LabelSet<1> for PendingEventLabels {
    const NAMES: [&'static str; 1] = ["outcome"];
    fn values(&self) -> [Cow<'_, str>; 1] {
        [Cow::Borrowed(self.outcome.as_str())]
    }
}

/// A key of the agent's ConfigMap read outside the policy: the notification sinks and the
/// Postgres credentials. (A bad policy key refuses the claims it applies to, with their Events.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConfigKey {
    Notifications,
    Postgres,
}

impl ConfigKey {
    pub const ALL: [ConfigKey; 2] = [ConfigKey::Notifications, ConfigKey::Postgres];

    /// The key's name in the ConfigMap's data.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigKey::Notifications => "notifications.yaml",
            ConfigKey::Postgres => "postgres.yaml",
        }
    }
}

/// `headroom_config_key_invalid`: by the ConfigMap key.
pub struct ConfigKeyLabels {
    pub key: ConfigKey,
}

impl LabelSet<1> for ConfigKeyLabels {
    const NAMES: [&'static str; 1] = ["key"];
    fn values(&self) -> [Cow<'_, str>; 1] {
        [Cow::Borrowed(self.key.as_str())]
    }
}

/// A counter family whose label set is the type `L`.
pub struct Counters<L, const N: usize> {
    vec: IntCounterVec,
    labels: PhantomData<fn(&L)>,
}

impl<L: LabelSet<N>, const N: usize> Counters<L, N> {
    pub(super) fn new(b: &Builder, name: &'static str, help: &str) -> Result<Self, MetricsError> {
        let vec = IntCounterVec::new(Opts::new(name, help), &L::NAMES)
            .map_err(|source| MetricsError::Register { name, source })?;
        b.register(name, vec.clone())?;
        Ok(Counters {
            vec,
            labels: PhantomData,
        })
    }

    pub fn inc(&self, labels: &L) {
        self.inc_by(labels, 1);
    }

    /// Adds `n` (0 exports the series from zero).
    pub fn inc_by(&self, labels: &L, n: u64) {
        let values = labels.values();
        let values: [&str; N] = values.each_ref().map(|v| v.as_ref());
        // Cannot fail: the names and the values are both `N` long, by type.
        if let Ok(c) = self.vec.get_metric_with_label_values(&values) {
            c.inc_by(n);
        }
    }
}

/// A gauge family whose label set is the type `L`.
pub struct Gauges<L, const N: usize> {
    vec: GaugeVec,
    labels: PhantomData<fn(&L)>,
}

impl<L: LabelSet<N>, const N: usize> Gauges<L, N> {
    pub(super) fn new(b: &Builder, name: &'static str, help: &str) -> Result<Self, MetricsError> {
        let vec = GaugeVec::new(Opts::new(name, help), &L::NAMES)
            .map_err(|source| MetricsError::Register { name, source })?;
        b.register(name, vec.clone())?;
        Ok(Gauges {
            vec,
            labels: PhantomData,
        })
    }

    pub fn set(&self, labels: &L, value: f64) {
        let values = labels.values();
        let values: [&str; N] = values.each_ref().map(|v| v.as_ref());
        // Cannot fail: the names and the values are both `N` long, by type.
        if let Ok(g) = self.vec.get_metric_with_label_values(&values) {
            g.set(value);
        }
    }

    pub fn remove(&self, labels: &L) {
        let values = labels.values();
        let values: [&str; N] = values.each_ref().map(|v| v.as_ref());
        let _ = self.vec.remove_label_values(&values);
    }
}
