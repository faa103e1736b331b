//! The decision engine: a pure function from inputs to one decision. No I/O, no clock.

pub mod decision;
pub mod inputs;

pub use decision::{BlockReason, Decision, State, Verdict};
pub use inputs::*;
