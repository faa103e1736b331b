//! The storage pool a claim is carved from, as its driver publishes it for this node: the
//! `CSIStorageCapacity` objects of the claim's StorageClass whose `nodeTopology` selects this
//! node (what external-provisioner's capacity tracking writes, one per class and segment), else
//! TopoLVM's node annotation `capacity.topolvm.io/<device-class>` (or the older
//! `capacity.topolvm.cybozu.com/`), which topolvm-node keeps on the Node. The shell reads the
//! objects only for a decision that would grow; the Node is the one it already watches.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSIStorageCapacity, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::decide::pool::PoolView;
use crate::policy::validate::Finding;

/// The label external-provisioner sets on every `CSIStorageCapacity` it writes: the driver's
/// name, which is the StorageClass's provisioner.
pub const DRIVER_LABEL: &str = "csi.storage.k8s.io/drivername";
/// TopoLVM's provisioner names, now and before its move from cybozu.com.
const TOPOLVM: [&str; 2] = ["topolvm.io", "topolvm.cybozu.com"];
/// The StorageClass parameter naming the device class, now and before.
const DEVICE_CLASS: [&str; 2] = ["topolvm.io/device-class", "topolvm.cybozu.com/device-class"];
/// The annotation prefixes topolvm-node writes a device class's free bytes under.
const ANNOTATION: [&str; 2] = ["capacity.topolvm.io/", "capacity.topolvm.cybozu.com/"];
/// The annotation name of the default device class (a class with no device-class parameter).
const DEFAULT_DEVICE_CLASS: &str = "00default";
/// How much of a hostile value an error repeats.
const SHOWN: usize = 64;

/// A published pool that cannot be read: the claim is not grown blind past it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PoolError {
    #[error("{object}: {field} is missing; the pool's free space is unknown")]
    Missing { object: String, field: String },
    #[error("{object}: {field} '{value}' is not a size in bytes: {problem}")]
    Value {
        object: String,
        field: String,
        value: String,
        problem: String,
    },
    #[error("{object}: nodeTopology cannot be matched: {problem}")]
    Selector { object: String, problem: String },
}

/// What the shell read of the class's `CSIStorageCapacity` objects for this decision.
#[derive(Debug, Clone, Default)]
pub enum PoolRead {
    /// Not read: no grow was decided without them.
    #[default]
    NotRead,
    Read(Vec<CSIStorageCapacity>),
    /// The read failed (its error): the objects bound nothing this time.
    Failed(String),
}

/// The pool behind a claim of `class` on `node`: the tightest `CSIStorageCapacity` of the
/// class that selects the node, else TopoLVM's annotation; `None` when nothing is published.
pub fn pool_of(
    class: &StorageClass,
    node: Option<&Node>,
    read: &PoolRead,
) -> Result<Option<PoolView>, PoolError> {
    let Some(node) = node else {
        return Ok(None);
    };
    if let PoolRead::Read(objects) = read
        && let Some(view) = from_capacities(class, node, objects)?
    {
        return Ok(Some(view));
    }
    from_topolvm(class, node)
}

/// The pool as an evaluation takes it: a published pool that cannot be read is an error (the
/// claim is not grown blind past it); a read that failed bounds nothing, and says so.
pub fn resolve(
    class: Option<&StorageClass>,
    (node, read): (Option<&Node>, &PoolRead),
    errors: &mut Vec<Finding>,
    warnings: &mut Vec<Finding>,
) -> Option<PoolView> {
    if let PoolRead::Failed(e) = read {
        warnings.push(Finding {
            field: "csiStorageCapacity".into(),
            message: format!(
                "could not be read ({e}): the grow is bounded only by what the Node says"
            ),
        });
    }
    pool_of(class?, node, read).unwrap_or_else(|e| {
        errors.push(Finding {
            field: "storagePool".into(),
            message: e.to_string(),
        });
        None
    })
}

fn object_name(c: &CSIStorageCapacity) -> String {
    format!(
        "CSIStorageCapacity {}/{}",
        c.metadata.namespace.as_deref().unwrap_or(""),
        c.metadata.name.as_deref().unwrap_or("")
    )
}

/// The class's objects that select `node`, the one with the least free (first by name on a
/// tie, so the status names the same one scan after scan).
fn from_capacities(
    class: &StorageClass,
    node: &Node,
    objects: &[CSIStorageCapacity],
) -> Result<Option<PoolView>, PoolError> {
    let class_name = class.metadata.name.as_deref().unwrap_or("");
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let mut best: Option<PoolView> = None;
    for c in objects
        .iter()
        .filter(|c| c.storage_class_name == class_name)
    {
        let object = object_name(c);
        // No nodeTopology: the storage is reachable from no node (the API's meaning).
        let Some(selector) = c.node_topology.as_ref() else {
            continue;
        };
        if !super::selector::matches(selector, &labels).map_err(|problem| PoolError::Selector {
            object: object.clone(),
            problem,
        })? {
            continue;
        }
        let free = match c.capacity.as_ref() {
            Some(q) => bytes(&object, "capacity", &q.0)?,
            None => {
                return Err(PoolError::Missing {
                    object,
                    field: "capacity".into(),
                });
            }
        };
        let max = c
            .maximum_volume_size
            .as_ref()
            .map(|q| bytes(&object, "maximumVolumeSize", &q.0))
            .transpose()?;
        let view = PoolView {
            class: class_name.to_string(),
            segment: segment(selector),
            source: object,
            free_bytes: free,
            max_volume_bytes: max,
        };
        let tighter = best
            .as_ref()
            .is_none_or(|b| (view.free_bytes, &view.source) < (b.free_bytes, &b.source));
        if tighter {
            best = Some(view);
        }
    }
    Ok(best)
}

/// TopoLVM's annotation for the class's device class, when the class is TopoLVM's.
fn from_topolvm(class: &StorageClass, node: &Node) -> Result<Option<PoolView>, PoolError> {
    if !TOPOLVM.contains(&class.provisioner.as_str()) {
        return Ok(None);
    }
    let params = class.parameters.clone().unwrap_or_default();
    let device_class = DEVICE_CLASS
        .iter()
        .find_map(|k| params.get(*k).filter(|v| !v.is_empty()))
        .map_or(DEFAULT_DEVICE_CLASS, String::as_str);
    let annotations = node.metadata.annotations.clone().unwrap_or_default();
    let node_name = node.metadata.name.as_deref().unwrap_or("");
    for prefix in ANNOTATION {
        let key = format!("{prefix}{device_class}");
        let Some(value) = annotations.get(&key) else {
            continue;
        };
        let object = format!("Node {node_name}");
        let field = format!("annotation {key}");
        let free = value
            .trim()
            .parse::<u64>()
            .map_err(|e| value_error(&object, &field, value, &e.to_string()))?;
        return Ok(Some(PoolView {
            class: class.metadata.name.clone().unwrap_or_default(),
            segment: format!("node {node_name}, device class {device_class}"),
            source: format!("{object} {field}"),
            free_bytes: free,
            max_volume_bytes: None,
        }));
    }
    Ok(None)
}

fn bytes(object: &str, field: &str, text: &str) -> Result<u64, PoolError> {
    crate::quantity::parse(text).map_err(|e| value_error(object, field, text, &e.to_string()))
}

fn value_error(object: &str, field: &str, value: &str, problem: &str) -> PoolError {
    let shown = |s: &str| -> String {
        let cut: String = s.chars().take(SHOWN).collect();
        let cut = cut.escape_debug().to_string();
        if s.chars().count() > SHOWN {
            format!("{cut}...")
        } else {
            cut
        }
    };
    PoolError::Value {
        object: object.to_string(),
        field: field.to_string(),
        value: shown(value),
        problem: shown(problem),
    }
}

/// The segment as its selector reads: `key=value` and `key In (a,b)` terms, or `every node`.
fn segment(s: &LabelSelector) -> String {
    let labels = s
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"));
    let exprs = s.match_expressions.iter().flatten().map(|e| {
        let values = e.values.as_deref().unwrap_or_default().join(",");
        if values.is_empty() {
            format!("{} {}", e.key, e.operator)
        } else {
            format!("{} {} ({values})", e.key, e.operator)
        }
    });
    let terms: Vec<String> = labels.chain(exprs).collect();
    if terms.is_empty() {
        "every node".to_string()
    } else {
        terms.join(",")
    }
}
