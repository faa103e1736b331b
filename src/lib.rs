//! headroom: a node agent that grows PersistentVolumeClaims before they fill.
//!
//! The pure core is [`policy`], [`decide`] and [`resolve`]; everything else gathers their inputs
//! or carries out their decisions.
//!
//! Layers, lowest first. A module names only modules of lower layers, never one of its own
//! layer or above, and no two files of one folder name each other, even around a circle (the
//! folder's `mod.rs` aside: it holds what its files share). `tests/layering.rs` reads this list
//! and checks it against the `crate::` and `super::` paths in `src/`; test code may reach
//! upward for fixtures.
//!
//! - `quantity`, `ca`, `health`, `net`: leaves (storage sizes, CA bundles, the liveness rule,
//!   addresses as requests write them)
//! - `policy`: the policy keys, their layers and validation (pure)
//! - `decide`: the engine (pure)
//! - `probe`: statfs and the kubelet walk
//! - `postgres`, `report`: WAL health; what one scan measured and decided for one volume
//! - `k8s`, `events`, `metrics`: claim state and annotations; a report as Events; as metrics
//! - `resolve`: a claim's objects and measurements to the engine's inputs, the resize in flight,
//!   which lines fire (pure)
//! - `simulate`: the engine and the resize in flight over a synthetic trace (pure)
//! - `reclaim`, `http`, `webhook`, `notify`: fstrim on schedule; the admin endpoint; the claim
//!   admission webhook (new group members created at size); notifications to HTTP sinks
//! - `cli`: the command line's arguments, also as the kubectl plugin `kubectl headroom`
//! - `agent`: the node agent (watch stores, scan loop, act)
//! - `cmd`: the one-shot commands (`validate`, `simulate`, `scan`, `wal-health`, `status`,
//!   `approve`, `trim`)

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
pub mod net;
pub mod notify;
pub mod policy;
pub mod postgres;
pub mod probe;
pub mod quantity;
pub mod reclaim;
pub mod report;
pub mod resolve;
pub mod simulate;
pub mod webhook;
