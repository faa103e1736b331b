//! Kubernetes-facing building blocks: plain functions on k8s-openapi objects that read a claim's
//! sizes, resize progress, Postgres role and durable state, and build the patches that act on it.
//! The agent loop calls them; `headroom status` reads the same annotations.
//!
//! Named `k8s` rather than `kube` so that `kube::` keeps meaning the client crate everywhere.

pub mod claim;
pub mod logical;
pub mod owner;
pub mod quota;
pub mod roles;
pub mod scope;
pub mod source;
pub mod state;
pub mod version;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

pub use claim::{claim_state, is_block_mode, is_bound, storage_capacity, storage_request};
pub use roles::{Operator, PgVolume, group_key, postgres_volume, wal_on_data};
pub use state::{StatusAnnotation, append, grow_patch, read_history, read_status, status_patch};

#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("{object}: {field} '{value}' is not a storage quantity: {source}")]
    Quantity {
        object: String,
        field: &'static str,
        value: String,
        source: crate::quantity::QuantityError,
    },
    /// A quantity in a field whose name is built from data (a quota's resource name).
    #[error("{object}: {field} '{value}' is not a storage quantity: {source}")]
    FieldQuantity {
        object: String,
        field: String,
        value: String,
        source: crate::quantity::QuantityError,
    },
    #[error("{object}: {field} is missing")]
    Missing { object: String, field: &'static str },
    #[error(
        "{object}: annotation {annotation} is not valid ({source}); headroom will not act on this \
         claim until it is fixed or removed"
    )]
    Annotation {
        object: String,
        annotation: &'static str,
        source: serde_json::Error,
    },
    #[error("{object}: annotation {annotation}: {message}")]
    InvalidAnnotation {
        object: String,
        annotation: &'static str,
        message: String,
    },
    /// The owning cluster a claim is grown through (`resizeThrough: owner`) has an unexpected
    /// shape, or is not the one the claim names.
    #[error("{object}: {field} {message}")]
    Owner {
        object: String,
        field: String,
        message: String,
    },
    #[error("encoding a claim patch: {0}")]
    Encode(#[from] serde_json::Error),
}

/// `PVC <namespace>/<name>`, how every message names a claim.
pub fn pvc_name(pvc: &PersistentVolumeClaim) -> String {
    format!(
        "PVC {}/{}",
        pvc.metadata.namespace.as_deref().unwrap_or(""),
        pvc.metadata.name.as_deref().unwrap_or("")
    )
}

#[cfg(test)]
mod hostile_tests;
