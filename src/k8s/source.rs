//! What a claim is created from: its `spec.dataSourceRef`, else its `spec.dataSource`, when that
//! is a VolumeSnapshot or another claim (the sources a provisioner requires a minimum size of).
//! Both fields are the tenant's: a reference into another namespace or a name the API server
//! would never have given an object is told apart, never read, and echoed only clipped.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

pub const SNAPSHOT_GROUP: &str = "snapshot.storage.k8s.io";

/// At most this many characters of a tenant's reference are echoed in a message.
const ECHO: usize = 64;

/// What a claim's `dataSourceRef` (else its `dataSource`) names, when it is a source a
/// provisioner sizes against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Snapshot(String),
    Claim(String),
    /// A `dataSourceRef` into another namespace (CrossNamespaceVolumeDataSource): never read.
    OtherNamespace {
        kind: String,
        reference: String,
    },
    /// A name the API server would never have given an object (a path, say): never read.
    BadName {
        kind: String,
        name: String,
    },
}

/// An object name the API server accepts (a DNS subdomain), so that it is a name in a URL and
/// never a path.
pub fn is_object_name(name: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    name.len() <= 253
        && edge(name.chars().next())
        && edge(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

/// The source `pvc` is created from, when it is a VolumeSnapshot or a claim.
pub fn source_of(pvc: &PersistentVolumeClaim) -> Option<Source> {
    let spec = pvc.spec.as_ref()?;
    let (group, kind, name, namespace) = match (&spec.data_source_ref, &spec.data_source) {
        (Some(r), _) => (&r.api_group, &r.kind, &r.name, r.namespace.as_deref()),
        (None, Some(s)) => (&s.api_group, &s.kind, &s.name, None),
        (None, None) => return None,
    };
    let group = group.as_deref().unwrap_or("");
    let sized = (group == SNAPSHOT_GROUP && kind == "VolumeSnapshot")
        || (group.is_empty() && kind == "PersistentVolumeClaim");
    if !sized {
        return None;
    }
    let own = pvc.metadata.namespace.as_deref().unwrap_or("");
    if let Some(ns) = namespace.filter(|ns| !ns.is_empty() && *ns != own) {
        let clip = |s: &str| s.chars().take(ECHO).collect::<String>();
        let reference = format!("{}/{}", clip(ns), clip(name));
        return Some(Source::OtherNamespace {
            kind: kind.clone(),
            reference,
        });
    }
    if !is_object_name(name) {
        let name = name.chars().take(ECHO).collect();
        return Some(Source::BadName {
            kind: kind.clone(),
            name,
        });
    }
    Some(if kind == "VolumeSnapshot" {
        Source::Snapshot(name.clone())
    } else {
        Source::Claim(name.clone())
    })
}
