//! Postgres WAL health: from the volume with no credentials (the archive backlog, the data
//! directory's role, `pg_control`, replication slots and archiving settings) and, where a
//! credential is configured, over SQL (`pg_monitor`), combined into
//! [`crate::decide::WalHealth`].

pub mod conf;
pub mod control;
pub mod datadir;
#[cfg(test)]
mod datadir_tests;
pub mod guard;
pub mod health;
#[cfg(test)]
mod health_tests;
#[cfg(test)]
mod in_pod_tests;
pub mod lsn;
pub mod slotfile;
pub mod slots;
pub mod sql;
pub mod tls;
pub mod volume;

pub use health::{Limits, VolumeRead, combine, gather, read_volumes};
pub use sql::{SqlError, SqlTarget};
pub use volume::{VolumeError, VolumeWal};
