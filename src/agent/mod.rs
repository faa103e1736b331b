//! The agent: scan -> resolve -> decide -> act, every interval, for the volumes on this node.

pub mod report;

pub use report::{MeasuredBy, VolumeReport};
