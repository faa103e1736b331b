//! The one-shot commands (`headroom validate`, `simulate`, `scan`, `wal-health`, `status`,
//! `approve`, `trim`): the top layer, next to [`crate::cli`], so the modules they drive never import the CLI.

pub mod approve;
pub mod output;
pub mod scan;
pub mod simulate;
pub mod status;
pub mod status_logical;
pub mod status_policy;
pub mod trim;
pub mod validate;
pub mod wal_health;

/// What stops `headroom status` (shared by its claim view and its `--policy` view).
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig { path: String, message: String },
    #[error("{action}: {source}")]
    Api { action: String, source: kube::Error },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("encoding JSON output: {0}")]
    Json(#[from] serde_json::Error),
}
