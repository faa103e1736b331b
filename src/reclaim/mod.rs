//! Reclaim space: scheduled `FITRIM` of mounted volumes (what `fstrim` does), so thin-provisioned
//! storage gets back the blocks their filesystems freed.
//!
//! [`policy::reclaim`](crate::policy::reclaim) resolves whether and when; [`schedule`] says when a
//! trim is due; [`fitrim`] trims; [`state`] keeps the last run on the claim; [`Reclaimer`] is the
//! agent's entry point; [`crate::cmd::trim`] is `headroom trim PATH`.

pub mod fitrim;
pub mod metrics;
mod run;
#[cfg(test)]
mod run_tests;
pub mod schedule;
pub mod state;

pub use fitrim::{TrimError, fitrim};
pub use metrics::ReclaimMetrics;
pub use run::{BLOCK_MODE, Plan, Reclaimer, Target, eligible};

#[derive(Debug, thiserror::Error)]
pub enum ReclaimError {
    #[error(transparent)]
    Trim(#[from] TrimError),
    #[error(
        "{object}: annotation {annotation} is not valid ({source}); headroom will not trim this \
         claim until it is fixed or removed"
    )]
    Annotation {
        object: String,
        annotation: &'static str,
        source: serde_json::Error,
    },
    #[error("reclaim metrics: {0}")]
    Metrics(#[source] prometheus::Error),
}
