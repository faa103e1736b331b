//! Postgres WAL health: archive backlog from the volume (no credentials), archiver and
//! replication-slot state over SQL (`pg_monitor`), combined into [`crate::decide::WalHealth`].

pub mod guard;
pub mod health;
pub mod sql;
pub mod tls;
pub mod volume;

pub use health::{combine, gather, gather_with};
pub use sql::{SqlError, SqlTarget};
pub use volume::{VolumeError, VolumeWal};

#[derive(Debug, thiserror::Error)]
pub enum WalError {
    #[error("wal-health: give --pgdata DIR, --dsn CONNSTR, or both")]
    NothingToInspect,
    #[error("wal-health: --connect-timeout must be at least 1 second")]
    ZeroTimeout,
    #[error("wal-health: {0}")]
    Sql(SqlError),
    #[error("wal-health: starting the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("wal-health: writing JSON: {0}")]
    Json(serde_json::Error),
    #[error("wal-health: writing the report: {0}")]
    Output(std::io::Error),
}
