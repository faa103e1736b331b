//! [`PolicySpec`]: the policy as the user wrote it, every key optional, every value kept as its
//! original text so messages quote it (`10GB`, not a parse artefact). Structure is checked here
//! (unknown keys, a mapping where a value belongs); values are checked by [`super::validate`].

use serde::{Serialize, Serializer};

use super::Finding;
use super::PolicyError;
use super::fields::{self, FIELDS, GROUPS};
pub(crate) use super::yaml::{Node, parse_yaml};

/// One value as written, and where it was written when that is not obvious from context
/// (e.g. `PVC annotation headroom.dev/step`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raw {
    pub text: String,
    pub origin: Option<String>,
}

impl Raw {
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            origin: None,
        }
    }
}

impl Serialize for Raw {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

fn none<T>(v: &Option<T>) -> bool {
    v.is_none()
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WindowSpec {
    #[serde(skip_serializing_if = "none")]
    pub schedule: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub duration: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub timezone: Option<Raw>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EmergencyGrowSpec {
    #[serde(skip_serializing_if = "none")]
    pub enabled: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub critical_threshold: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub critical_minimum_free: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub exceed_limit_on_emergency: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub max_actions_per_day: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub reserved_actions_for_emergency: Option<Raw>,
}

/// `reclaimSpace`: scheduled fstrim, independent of the resize keys (see [`super::reclaim`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReclaimSpaceSpec {
    #[serde(skip_serializing_if = "none")]
    pub enabled: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub schedule: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub timezone: Option<Raw>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WalSafetySpec {
    #[serde(rename = "acknowledgeWALRisk", skip_serializing_if = "none")]
    pub acknowledge_wal_risk: Option<Raw>,
    #[serde(rename = "requireArchiveHealthy", skip_serializing_if = "none")]
    pub require_archive_healthy: Option<Raw>,
    #[serde(rename = "maxPendingWALFiles", skip_serializing_if = "none")]
    pub max_pending_wal_files: Option<Raw>,
    #[serde(rename = "maxSlotRetentionBytes", skip_serializing_if = "none")]
    pub max_slot_retention_bytes: Option<Raw>,
    #[serde(rename = "maxPendingWALAge", skip_serializing_if = "none")]
    pub max_pending_wal_age: Option<Raw>,
    #[serde(rename = "alertOnResize", skip_serializing_if = "none")]
    pub alert_on_resize: Option<Raw>,
}

/// `trigger`: when threshold mode grows before the threshold, from the volume's fill rate.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TriggerSpec {
    #[serde(skip_serializing_if = "none")]
    pub predictive: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub resize_lead_time: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub margin: Option<Raw>,
}

/// The raw policy schema. Serialises back to the YAML a user would write.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicySpec {
    #[serde(skip_serializing_if = "none")]
    pub enabled: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub mode: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub limit: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub usage_threshold: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub min_available: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub inode_threshold: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub step: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub min_step: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub max_step: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub max_actions_per_day: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub request: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub target_buffer: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub modification_interval: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub logical_volume: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub offline_expansion: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub node_expansion: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub enforcement: Option<Raw>,
    pub resize_through: Option<Raw>,
    #[serde(skip_serializing_if = "none")]
    pub pool_reserve: Option<Raw>,
    #[serde(skip_serializing_if = "TriggerSpec::is_empty")]
    pub trigger: TriggerSpec,
    #[serde(skip_serializing_if = "WindowSpec::is_empty")]
    pub maintenance_window: WindowSpec,
    #[serde(skip_serializing_if = "EmergencyGrowSpec::is_empty")]
    pub emergency_grow: EmergencyGrowSpec,
    #[serde(skip_serializing_if = "WalSafetySpec::is_empty")]
    pub wal_safety: WalSafetySpec,
    #[serde(skip_serializing_if = "ReclaimSpaceSpec::is_empty")]
    pub reclaim_space: ReclaimSpaceSpec,
    /// Structural problems found while reading (unknown keys, wrong shapes, syntax). They travel
    /// with the spec through the merge so validation refuses the policy instead of silently
    /// falling back to a default.
    #[serde(skip)]
    pub problems: Vec<Finding>,
}

impl WindowSpec {
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}
impl TriggerSpec {
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}
impl EmergencyGrowSpec {
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}
impl WalSafetySpec {
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}
impl ReclaimSpaceSpec {
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

// One match for shared and mutable access, so a key cannot be reachable one way and not the other.
macro_rules! slot {
    ($s:expr, $path:expr, $($r:tt)+) => {
        match $path {
            "enabled" => Some($($r)+ $s.enabled),
            "mode" => Some($($r)+ $s.mode),
            "limit" => Some($($r)+ $s.limit),
            "usageThreshold" => Some($($r)+ $s.usage_threshold),
            "minAvailable" => Some($($r)+ $s.min_available),
            "inodeThreshold" => Some($($r)+ $s.inode_threshold),
            "step" => Some($($r)+ $s.step),
            "minStep" => Some($($r)+ $s.min_step),
            "maxStep" => Some($($r)+ $s.max_step),
            "maxActionsPerDay" => Some($($r)+ $s.max_actions_per_day),
            "request" => Some($($r)+ $s.request),
            "targetBuffer" => Some($($r)+ $s.target_buffer),
            "modificationInterval" => Some($($r)+ $s.modification_interval),
            "logicalVolume" => Some($($r)+ $s.logical_volume),
            "offlineExpansion" => Some($($r)+ $s.offline_expansion),
            "nodeExpansion" => Some($($r)+ $s.node_expansion),
            "enforcement" => Some($($r)+ $s.enforcement),
            "resizeThrough" => Some($($r)+ $s.resize_through),
            "poolReserve" => Some($($r)+ $s.pool_reserve),
            "trigger.predictive" => Some($($r)+ $s.trigger.predictive),
            "trigger.resizeLeadTime" => Some($($r)+ $s.trigger.resize_lead_time),
            "trigger.margin" => Some($($r)+ $s.trigger.margin),
            "maintenanceWindow.schedule" => Some($($r)+ $s.maintenance_window.schedule),
            "maintenanceWindow.duration" => Some($($r)+ $s.maintenance_window.duration),
            "maintenanceWindow.timezone" => Some($($r)+ $s.maintenance_window.timezone),
            "emergencyGrow.enabled" => Some($($r)+ $s.emergency_grow.enabled),
            "emergencyGrow.criticalThreshold" => Some($($r)+ $s.emergency_grow.critical_threshold),
            "emergencyGrow.criticalMinimumFree" => Some($($r)+ $s.emergency_grow.critical_minimum_free),
            "emergencyGrow.exceedLimitOnEmergency" => {
                Some($($r)+ $s.emergency_grow.exceed_limit_on_emergency)
            }
            "emergencyGrow.maxActionsPerDay" => Some($($r)+ $s.emergency_grow.max_actions_per_day),
            "emergencyGrow.reservedActionsForEmergency" => {
                Some($($r)+ $s.emergency_grow.reserved_actions_for_emergency)
            }
            "walSafety.acknowledgeWALRisk" => Some($($r)+ $s.wal_safety.acknowledge_wal_risk),
            "walSafety.requireArchiveHealthy" => Some($($r)+ $s.wal_safety.require_archive_healthy),
            "walSafety.maxPendingWALFiles" => Some($($r)+ $s.wal_safety.max_pending_wal_files),
            "walSafety.maxSlotRetentionBytes" => Some($($r)+ $s.wal_safety.max_slot_retention_bytes),
            "walSafety.maxPendingWALAge" => Some($($r)+ $s.wal_safety.max_pending_wal_age),
            "walSafety.alertOnResize" => Some($($r)+ $s.wal_safety.alert_on_resize),
            "reclaimSpace.enabled" => Some($($r)+ $s.reclaim_space.enabled),
            "reclaimSpace.schedule" => Some($($r)+ $s.reclaim_space.schedule),
            "reclaimSpace.timezone" => Some($($r)+ $s.reclaim_space.timezone),
            _ => None,
        }
    };
}

impl PolicySpec {
    /// The value of a key by YAML path (`emergencyGrow.criticalThreshold`).
    pub fn get(&self, path: &str) -> Option<&Raw> {
        slot!(self, path, &).and_then(Option::as_ref)
    }

    /// The slot of a key by YAML path; `None` for a path that is not a policy key.
    pub fn slot_mut(&mut self, path: &str) -> Option<&mut Option<Raw>> {
        slot!(self, path, &mut)
    }

    /// Whether any key of a group (`maintenanceWindow`) or the key itself is set.
    pub fn has(&self, key_or_group: &str) -> bool {
        FIELDS.iter().any(|f| {
            (f.path == key_or_group
                || f.path
                    .strip_prefix(key_or_group)
                    .is_some_and(|r| r.starts_with('.')))
                && self.get(f.path).is_some()
        })
    }

    /// Records where every value came from, for messages.
    pub fn set_origin(&mut self, origin: &str) {
        for f in FIELDS {
            if let Some(Some(raw)) = self.slot_mut(f.path) {
                raw.origin = Some(origin.to_string());
            }
        }
    }

    /// Reads a policy from YAML text. Syntax errors are an `Err`; structural problems land in
    /// [`PolicySpec::problems`]. `origin` (e.g. `ConfigMap key policy.yaml`) is recorded on every
    /// value and named in every problem.
    pub fn from_yaml(text: &str, origin: Option<&str>) -> Result<Self, PolicyError> {
        Ok(Self::from_node(parse_yaml(text)?, origin))
    }

    pub(crate) fn from_node(node: Node, origin: Option<&str>) -> Self {
        let mut spec = Self::default();
        match node {
            Node::Null => {}
            Node::Map(entries) => spec.fill("", entries, origin),
            other => spec.problem(
                "(document)",
                origin,
                format!("expected a mapping of policy keys, found {}", other.kind()),
            ),
        }
        spec
    }

    fn problem(&mut self, field: &str, origin: Option<&str>, message: String) {
        let message = match origin {
            Some(o) => format!("{message} (in {o})"),
            None => message,
        };
        self.problems.push(Finding {
            field: field.to_string(),
            message,
        });
    }

    fn fill(&mut self, prefix: &str, entries: Vec<(String, Node)>, origin: Option<&str>) {
        for (key, value) in entries {
            // An empty key is named as YAML writes it, so its finding names a field.
            let path = match key.as_str() {
                "" => format!("{prefix}\"\""),
                key => format!("{prefix}{key}"),
            };
            if prefix.is_empty() && GROUPS.contains(&key.as_str()) {
                match value {
                    Node::Null => {}
                    Node::Map(inner) => self.fill(&format!("{key}."), inner, origin),
                    other => {
                        let keys: Vec<&str> = FIELDS
                            .iter()
                            .filter_map(|f| {
                                f.path
                                    .strip_prefix(&format!("{key}."))
                                    .map(|_| f.path.rsplit('.').next().unwrap_or(f.path))
                            })
                            .collect();
                        let msg = format!(
                            "expected a mapping with keys {}, found {}",
                            keys.join(", "),
                            other.kind()
                        );
                        self.problem(&path, origin, msg);
                    }
                }
                continue;
            }
            let Some(slot) = self.slot_mut(&path) else {
                let msg = unknown_key_message(&path, prefix);
                self.problem(&path, origin, msg);
                continue;
            };
            match value {
                Node::Null => {}
                Node::Scalar(text) => {
                    *slot = Some(Raw {
                        text,
                        origin: origin.map(str::to_string),
                    });
                }
                other => {
                    let msg = format!(
                        "expected a single value, found {}; write e.g. {path}: {}",
                        other.kind(),
                        example(&path)
                    );
                    self.problem(&path, origin, msg);
                }
            }
        }
    }
}

fn example(path: &str) -> String {
    fields::default_text(path).unwrap_or_else(|| "<value>".to_string())
}

fn unknown_key_message(path: &str, prefix: &str) -> String {
    let last = path.strip_prefix(prefix).unwrap_or(path);
    // Nested keys suggest among their siblings first, then anywhere.
    let siblings = FIELDS
        .iter()
        .map(|f| f.path)
        .filter(|p| p.starts_with(prefix));
    let suggestion = fields::closest(last, siblings).or_else(|| {
        fields::closest(
            last,
            FIELDS.iter().map(|f| f.path).chain(GROUPS.iter().copied()),
        )
    });
    match suggestion {
        Some(s) => format!(
            "unknown key; did you mean {s}? (a misspelt key would otherwise fall back to its default)"
        ),
        None => "unknown key; remove it (docs/policy.md lists every policy key)".to_string(),
    }
}
