//! The one-shot commands (`headroom validate`, `simulate`, `scan`, `wal-health`, `status`,
//! `trim`): the top layer, next to [`crate::cli`], so the modules they drive never import the CLI.

pub mod output;
pub mod scan;
pub mod simulate;
pub mod status;
pub mod trim;
pub mod validate;
pub mod wal_health;
