//! PLACEHOLDER (probe helper replaces this)
pub fn run(_: &crate::cli::ScanArgs) -> Result<std::process::ExitCode, crate::placeholder::NotYet> {
    Err(crate::placeholder::NotYet)
}
