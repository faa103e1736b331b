//! PLACEHOLDER (policy helper replaces this)
pub fn run(
    _: &crate::cli::ValidateArgs,
) -> Result<std::process::ExitCode, crate::placeholder::NotYet> {
    Err(crate::placeholder::NotYet)
}
