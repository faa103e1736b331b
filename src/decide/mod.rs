//! The decision engine: a pure function from inputs to one decision. No I/O, no clock.

pub mod budget;
pub mod deadline;
pub mod decision;
mod engine;
mod gates;
pub mod held;
pub mod inputs;
pub mod interval;
pub mod lines;
pub mod logical;
pub mod lsn;
pub mod pool;
pub mod predictive;
pub mod quota;
pub mod rate;
pub mod recommend;
pub mod recover;
pub mod restart;
mod restart_facts;
mod wal;
mod wal_inputs;

pub use budget::{BudgetView, COOLDOWN};
pub use decision::{BlockReason, Decision, Note, State, Verdict};
pub use engine::{
    EMERGENCY_MAX_BYTES, EMERGENCY_MIN_BYTES, EMERGENCY_MIN_PERCENT, MIN_CHANGE_PERCENT,
    SHRINK_MARGIN_POINTS, decide,
};
pub use inputs::*;
pub use lsn::{Lsn, PositionSource, WalPosition};
pub use rate::{FillRate, Sample};
pub use wal_inputs::*;

#[cfg(test)]
mod convergent_tests;
#[cfg(test)]
mod extreme_tests;
#[cfg(test)]
mod held_tests;
#[cfg(test)]
mod interval_tests;
#[cfg(test)]
mod planned_tests;
#[cfg(test)]
mod pool_tests;
#[cfg(test)]
mod predictive_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod quota_tests;
#[cfg(test)]
mod restoring_tests;
#[cfg(test)]
mod tests;
