//! PLACEHOLDER until the policy parser lands.
use std::process::ExitCode;
pub fn run(_: &crate::cli::SimulateArgs) -> Result<ExitCode, super::SimulateError> {
    Err(super::SimulateError::Policy("not built yet".into()))
}
