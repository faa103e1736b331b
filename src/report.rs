//! What one scan learned about one volume: the agent's unit of output, read by the metrics, the
//! `/volumes` endpoint, Events and the status annotation.

use std::collections::BTreeMap;
use std::path::PathBuf;

use jiff::Timestamp;
use serde::Serialize;

use crate::decide::{Action, ClaimState, Decision, Measurement, VolumeRole, WalHealth};
use crate::policy::merge::Source;
use crate::policy::validate::Finding;

/// History entries dated beyond the clock-skew allowance, which the budget ignored: no action
/// happened then. Events and metrics act on this; [`FutureHistory::finding`] says it to people.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FutureHistory {
    pub entries: usize,
    pub latest: Timestamp,
}

impl FutureHistory {
    pub fn finding(&self, field: &str, skew: jiff::SignedDuration) -> Finding {
        Finding {
            field: field.into(),
            message: format!(
                "invalid_history: {} entr{} dated more than {skew:#} in the future ignored (latest: {})",
                self.entries,
                if self.entries == 1 { "y" } else { "ies" },
                self.latest,
            ),
        }
    }
}

/// Where the measurement came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MeasuredBy {
    Statfs,
    /// The kubelet's `/stats/summary` (fallback when statfs cannot see the volume).
    Kubelet,
    /// Not measured (block mode, not mounted).
    None,
}

#[derive(Debug, Clone, Serialize)]
pub struct VolumeReport {
    pub namespace: String,
    pub pvc: String,
    pub pv: String,
    pub node: String,
    pub storage_class: Option<String>,
    pub role: VolumeRole,
    /// The tablespace a tablespace volume holds (CloudNativePG's `cnpg.io/tablespaceName`), when
    /// known: the `tablespace` label of its series.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tablespace: Option<String>,
    /// The pod (a Postgres instance) that mounts the volume on this node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// Postgres cluster (or instance) the volume belongs to, when known.
    pub postgres_cluster: Option<String>,
    pub mount_path: PathBuf,
    /// The probe's class: owned_block, shared_network, directory, unknown.
    pub fs_class: String,
    pub shared_with: Vec<PathBuf>,
    pub measurement: Option<Measurement>,
    pub measured_by: MeasuredBy,
    /// When the measurement was taken (the scan's time for statfs, the kubelet's own time for
    /// its numbers).
    pub measured_at: Option<Timestamp>,
    /// Why the probe has no numbers for a volume it should have measured (`probe_timeout`).
    pub not_measured: Option<crate::probe::Unmeasured>,
    /// The effective limit, when the policy is valid.
    pub limit_bytes: Option<u64>,
    /// Where each policy key came from.
    pub provenance: BTreeMap<String, Source>,
    pub policy_errors: Vec<Finding>,
    pub policy_warnings: Vec<Finding>,
    /// History entries the budget ignored (also one of `policy_warnings`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub future_history: Option<FutureHistory>,
    pub claim: ClaimState,
    pub decision: Decision,
    pub wal: Option<WalHealth>,
    pub last_action: Option<Action>,
    /// The fill rate from recent samples and the resize lead time learned from the claim's
    /// history, when known (`/volumes`; the predictive trigger acts on it).
    pub fill_rate: Option<crate::decide::FillRate>,
    /// The namespace's tightest ResourceQuota line on this claim, when one limits it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota: Option<crate::decide::quota::QuotaView>,
    /// The storage pool the claim is carved from, when its driver publishes one for this node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<crate::decide::pool::PoolView>,
    /// The logical volume whose budget and history the claim shares, when it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logical: Option<crate::decide::logical::LogicalView>,
    /// `enforcement: recommend | approve`: the grow held for a person, the last approval and
    /// what became of it; `None` under `act`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enforced: Option<crate::decide::recommend::Enforced>,
    pub evaluated_at: Timestamp,
}
