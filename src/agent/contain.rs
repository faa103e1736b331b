//! One claim's bug stays that claim's: a panic while resolving or deciding it leaves it blocked
//! (`internal_error`, counted, logged with the panic's message) and the scan goes on.

use jiff::Timestamp;

use crate::metrics::Metrics;
use crate::resolve::contained::internal_error;
use crate::resolve::evaluate::{Evaluation, Subject};

/// Runs `f` for the claim `s`; a panic in it becomes the claim's `internal_error` evaluation.
pub fn contain<T>(
    s: &Subject,
    now: Timestamp,
    metrics: &Metrics,
    f: impl FnOnce() -> T,
) -> Result<T, Box<Evaluation>> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|m| m.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic with a non-text payload".to_string());
        let ns = s.pvc.metadata.namespace.as_deref().unwrap_or_default();
        let pvc = s.pvc.metadata.name.as_deref().unwrap_or_default();
        tracing::error!(pvc = %format!("{ns}/{pvc}"), panic = %message, "evaluating the claim panicked; it is left alone");
        metrics.internal_error();
        Box::new(internal_error(s, message, now))
    })
}
