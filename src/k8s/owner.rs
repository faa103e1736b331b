//! The owning cluster a claim is grown through (`resizeThrough: owner`): which object and which
//! field hold the size its operator gives the claim, that size read from the object as the API
//! server returned it (hostile input: any shape), and the one patch that raises it. Pure: the
//! agent does the GET and the PATCH.

use std::fmt;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde_json::{Value, json};

use super::KubeError;
use super::logical::{LogicalVolume, Owner, Role};
use crate::quantity;

/// A kind headroom can grow through: its API group, version, kind and resource (plural).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
}

pub const CNPG_CLUSTER: Kind = Kind {
    group: "postgresql.cnpg.io",
    version: "v1",
    kind: "Cluster",
    plural: "clusters",
};

pub const CRUNCHY_POSTGRES_CLUSTER: Kind = Kind {
    group: "postgres-operator.crunchydata.com",
    version: "v1beta1",
    kind: "PostgresCluster",
    plural: "postgresclusters",
};

pub const ZALANDO_POSTGRESQL: Kind = Kind {
    group: "acid.zalan.do",
    version: "v1",
    kind: "postgresql",
    plural: "postgresqls",
};

/// Where in the owner the claim's size is declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// A path of object keys (`spec.storage.size`): a JSON merge patch can address it.
    Path(&'static [&'static str]),
    /// `path` in the element named `name` of the list at `list` (a CloudNativePG tablespace, a
    /// Crunchy instance set): a list element, which a merge patch cannot address (it replaces
    /// the whole list).
    Element {
        list: &'static [&'static str],
        name: String,
        path: &'static [&'static str],
    },
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Field::Path(p) => f.write_str(&p.join(".")),
            Field::Element { list, name, path } => {
                write!(f, "{}[name={name}].{}", list.join("."), path.join("."))
            }
        }
    }
}

/// The owner's field that sizes one logical volume's claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
    pub field: Field,
}

impl Target {
    /// `Cluster db/pg`, how every message names the owner.
    pub fn object(&self) -> String {
        format!("{} {}/{}", self.kind.kind, self.namespace, self.name)
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.object(), self.field)
    }
}

/// The owner's declared size as read, with what a patch of it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    pub bytes: u64,
    pub resource_version: String,
    /// The tablespace's index in `spec.tablespaces`, for a tablespace's field.
    pub index: Option<usize>,
}

fn error(object: String, field: impl fmt::Display, message: impl Into<String>) -> KubeError {
    KubeError::Owner {
        object,
        field: field.to_string(),
        message: message.into(),
    }
}

/// The owner field of the logical volume `lv` (of `pvc`), when its operator's cluster declares
/// its claims' size: CloudNativePG (data, WAL, a tablespace), Zalando (data) and Crunchy (an
/// instance set's data or WAL). `Ok(None)`:
/// no supported owner (the claim is grown as a claim). An error when the claim's
/// ownerReferences name a different object of that kind than its labels do.
pub fn target(
    pvc: &PersistentVolumeClaim,
    lv: &LogicalVolume,
) -> Result<Option<Target>, KubeError> {
    let (kind, name, field) = match (&lv.owner, &lv.role) {
        (Owner::CloudNativePG { cluster }, role) => {
            let field = match role {
                Role::Data => Field::Path(&["spec", "storage", "size"]),
                Role::Wal => Field::Path(&["spec", "walStorage", "size"]),
                Role::Tablespace(t) if !t.is_empty() => Field::Element {
                    list: &["spec", "tablespaces"],
                    name: t.clone(),
                    path: &["storage", "size"],
                },
                _ => return Ok(None),
            };
            (CNPG_CLUSTER, cluster, field)
        }
        (Owner::Zalando { cluster }, Role::Data) => (
            ZALANDO_POSTGRESQL,
            cluster,
            Field::Path(&["spec", "volume", "size"]),
        ),
        (
            Owner::Crunchy {
                cluster,
                instance_set,
            },
            role,
        ) => {
            let path: &'static [&'static str] = match role {
                Role::Data => &["dataVolumeClaimSpec", "resources", "requests", "storage"],
                Role::Wal => &["walVolumeClaimSpec", "resources", "requests", "storage"],
                _ => return Ok(None),
            };
            let field = Field::Element {
                list: &["spec", "instances"],
                name: instance_set.clone(),
                path,
            };
            (CRUNCHY_POSTGRES_CLUSTER, cluster, field)
        }
        _ => return Ok(None),
    };
    // A label value may be `..` or `.`: never a path segment of a request.
    let dns = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    if !dns(name) || !dns(&lv.namespace) {
        return Err(error(
            super::pvc_name(pvc),
            "metadata.labels",
            format!("name the owner '{name}', which is not an object name"),
        ));
    }
    let t = Target {
        kind,
        namespace: lv.namespace.clone(),
        name: name.clone(),
        field,
    };
    let api_version = format!("{}/{}", kind.group, kind.version);
    let other = pvc
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == kind.kind && o.api_version == api_version && o.name != t.name);
    if let Some(o) = other {
        return Err(error(
            super::pvc_name(pvc),
            "metadata.ownerReferences",
            format!(
                "names {} {} while its labels name {}; headroom will not guess which sizes it",
                kind.kind,
                o.name,
                t.object()
            ),
        ));
    }
    Ok(Some(t))
}

/// The size `t` declares in `obj`, the owner as the API server returned it. Every unexpected
/// shape is an error naming the object and the field.
pub fn declared(t: &Target, obj: &Value) -> Result<Declared, KubeError> {
    let object = t.object();
    let meta = |key: &str| {
        obj.pointer(&format!("/metadata/{key}"))
            .and_then(Value::as_str)
    };
    if meta("namespace") != Some(t.namespace.as_str()) {
        return Err(error(
            object,
            "metadata.namespace",
            format!(
                "is {:?}, not the claim's namespace {}",
                meta("namespace").unwrap_or(""),
                t.namespace
            ),
        ));
    }
    if meta("name") != Some(t.name.as_str()) {
        return Err(error(object, "metadata.name", "is not the name asked for"));
    }
    let resource_version = meta("resourceVersion")
        .filter(|v| !v.is_empty())
        .ok_or_else(|| error(t.object(), "metadata.resourceVersion", "is missing"))?
        .to_string();
    let (leaf, index) = match &t.field {
        Field::Path(path) => (walk(obj, path), None),
        Field::Element { list, name, path } => {
            let index = element_index(t, obj, list, name)?;
            let element = walk(obj, list).and_then(|l| l.get(index));
            (element.and_then(|e| walk(e, path)), Some(index))
        }
    };
    let text = match leaf {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(other) => {
            return Err(error(
                object,
                &t.field,
                format!("is {other}, not a quantity such as 10Gi"),
            ));
        }
        None => return Err(error(object, &t.field, "is missing")),
    };
    let bytes = quantity::parse(&text).map_err(|e| {
        error(
            t.object(),
            &t.field,
            format!("'{text}' is not a storage quantity: {e}"),
        )
    })?;
    if bytes == 0 {
        return Err(error(object, &t.field, "is 0"));
    }
    Ok(Declared {
        bytes,
        resource_version,
        index,
    })
}

fn walk<'a>(obj: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, key| v.as_object()?.get(*key))
}

/// The one element of the list at `list` named `name`.
fn element_index(t: &Target, obj: &Value, list: &[&str], name: &str) -> Result<usize, KubeError> {
    let Some(list) = walk(obj, list)
        .and_then(Value::as_array)
        .map(|l| l.as_slice())
    else {
        return Err(error(
            t.object(),
            list.join("."),
            "is missing or not a list",
        ));
    };
    let mut found = list
        .iter()
        .enumerate()
        .filter(|(_, e)| e.get("name").and_then(Value::as_str) == Some(name));
    match (found.next(), found.next()) {
        (Some((i, _)), None) => Ok(i),
        (None, _) => Err(error(
            t.object(),
            &t.field,
            "is missing: no element of the list has that name",
        )),
        (Some(_), Some(_)) => Err(error(
            t.object(),
            &t.field,
            "is ambiguous: more than one element has that name",
        )),
    }
}

/// What the agent read of a claim's owner for one decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    /// The field read (`Cluster db/pg spec.storage.size`), or the claim when its owner could
    /// not be named.
    pub field: String,
    /// The owner's field and its size, or why it could not be read (naming object and field).
    pub declared: Result<(Target, Declared), String>,
}

/// The one patch that sets `t` to `to` in the owner read as `d`, refused by the API server if
/// the object changed since it was read.
#[derive(Debug, Clone, PartialEq)]
pub enum OwnerPatch {
    /// A JSON merge patch of the field alone, with `metadata.resourceVersion`: the API server
    /// answers 409 when the object changed since.
    Merge(Value),
    /// A JSON patch (RFC 6902) for a list element: `test` of the resourceVersion and of the
    /// element's name, then `replace` of its size. A merge patch would replace the whole list.
    Json(Value),
}

pub fn patch(t: &Target, d: &Declared, to: u64) -> OwnerPatch {
    let size = Value::String(quantity::format(to));
    match &t.field {
        Field::Path(path) => {
            let mut body = path.iter().rev().fold(size, |v, key| json!({ *key: v }));
            body["metadata"] = json!({ "resourceVersion": d.resource_version });
            OwnerPatch::Merge(body)
        }
        // `declared` always finds the element's index; were it absent, the test of the name at
        // 0 makes the API server refuse the patch rather than size another element.
        Field::Element { list, name, path } => {
            let at = format!("/{}/{}", list.join("/"), d.index.unwrap_or(0));
            OwnerPatch::Json(json!([
                { "op": "test", "path": "/metadata/resourceVersion", "value": d.resource_version },
                { "op": "test", "path": format!("{at}/name"), "value": name },
                { "op": "replace", "path": format!("{at}/{}", path.join("/")), "value": size },
            ]))
        }
    }
}

#[cfg(test)]
#[path = "owner_tests.rs"]
mod tests;
