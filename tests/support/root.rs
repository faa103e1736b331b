//! Gate for tests that mount filesystems: they need root (CAP_SYS_ADMIN) and the tools named.
//! With `CI` set a missing requirement fails the test loudly; otherwise it skips with a reason.
#![allow(dead_code)]

use std::path::Path;

/// True when the test may run. `tools` are executables the test runs (with their Debian package
/// in the message), e.g. `("mkfs.ext4", "e2fsprogs")`.
pub fn require_root(test: &str, tools: &[(&str, &str)]) -> bool {
    let mut missing = Vec::new();
    if !nix::unistd::geteuid().is_root() {
        missing.push("root (it mounts tmpfs, loop devices and bind mounts)".to_owned());
    }
    for (tool, package) in tools {
        if !on_path(tool) {
            missing.push(format!("`{tool}` (Debian package {package})"));
        }
    }
    if missing.is_empty() {
        return true;
    }
    let why = missing.join(", ");
    if std::env::var_os("CI").is_some() {
        panic!("{test} cannot run: it needs {why}, and CI is set so it may not skip");
    }
    eprintln!("skipping {test}: needs {why} (set CI to make this a failure)");
    false
}

/// [`require_root`] for a test that runs no outside tool.
pub fn needs_root(test: &str) -> bool {
    require_root(test, &[])
}

fn on_path(tool: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(Into::into))
        .any(|dir| Path::new(&dir).join(tool).is_file())
}
