//! `promtool` (Debian package `prometheus`) for the alert rule tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// The promtool binary, or `None` with a printed reason; panics under `CI`.
pub fn require_promtool() -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("promtool"))
        .find(|p| p.is_file());
    if found.is_none() {
        let why =
            "promtool not on PATH (Debian package `prometheus`; ./scripts/test.sh installs it)";
        if std::env::var_os("CI").is_some() {
            panic!("CI is set and the alert rule tests cannot run: {why}");
        }
        eprintln!("skipping promtool test: {why}");
    }
    found
}
