//! headroom: a node agent that grows PersistentVolumeClaims before they fill.
//!
//! The pure core is [`policy`] and [`decide`]; everything else gathers their inputs or carries
//! out their decisions.

pub mod agent;
pub mod ca;
pub mod cli;
pub mod cmd;
pub mod decide;
pub mod events;
pub mod health;
pub mod http;
pub mod k8s;
pub mod metrics;
pub mod policy;
pub mod postgres;
pub mod probe;
pub mod quantity;
pub mod reclaim;
pub mod report;
pub mod simulate;
