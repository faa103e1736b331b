//! PLACEHOLDER (postgres helper replaces this)
pub fn run(
    _: &crate::cli::WalHealthArgs,
) -> Result<std::process::ExitCode, crate::placeholder::NotYet> {
    Err(crate::placeholder::NotYet)
}
