//! PLACEHOLDER (lead is writing this)
pub fn run(
    _: &crate::cli::SimulateArgs,
) -> Result<std::process::ExitCode, crate::placeholder::NotYet> {
    Err(crate::placeholder::NotYet)
}
