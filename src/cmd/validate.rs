//! `headroom validate FILE...`: one line per finding, `FILE: error|warning: FIELD: message`,
//! or `FILE: ok`. Exit 1 when any file has an error (an unreadable file is one), else 0. A file
//! is a bare policy or the central ConfigMap's manifest (see [`crate::policy::manifest`]); a
//! ConfigMap's FIELD starts with its data key, e.g. `storageClasses.yaml[fast]: limit`.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use crate::cli::ValidateArgs;
use crate::policy::manifest::{Checked, check_document};
use crate::policy::validate::Context;
use crate::policy::yaml::one_line;

/// What stops `headroom validate` (a policy's own problems are findings, not errors).
#[derive(Debug, thiserror::Error)]
pub enum ValidateError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write output: {0}")]
    Output(#[source] std::io::Error),
    #[error("--size: {0}")]
    Size(String),
}

pub fn run(args: &ValidateArgs) -> Result<ExitCode, ValidateError> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let size = match &args.size {
        Some(text) => match crate::quantity::parse(text) {
            Ok(0) => return Err(ValidateError::Size("must be more than zero".into())),
            Ok(b) => Some(b),
            Err(e) => return Err(ValidateError::Size(format!("'{text}': {e}"))),
        },
        None => None,
    };
    let ctx = Context {
        current_size: size,
        ..Context::default()
    };
    let mut failed = false;
    for path in &args.files {
        failed |= report(&mut out, path, &ctx)?;
    }
    out.flush().map_err(ValidateError::Output)?;
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Writes the findings for one file, with what is known about the claim it is for; returns
/// whether it had an error.
pub fn report(out: &mut impl Write, path: &Path, ctx: &Context) -> Result<bool, ValidateError> {
    let name = path.display();
    let v = match std::fs::read_to_string(path) {
        Ok(text) => check_document(&text, ctx),
        Err(e) => {
            let e = ValidateError::Read {
                path: path.to_path_buf(),
                source: e,
            };
            writeln!(out, "{name}: error: (file): {}", one_line(&e.to_string()))
                .map_err(ValidateError::Output)?;
            return Ok(true);
        }
    };
    let Checked { errors, warnings } = &v;
    for (level, findings) in [("error", errors), ("warning", warnings)] {
        for f in findings {
            writeln!(
                out,
                "{name}: {level}: {}: {}",
                f.field,
                one_line(&f.message)
            )
            .map_err(ValidateError::Output)?;
        }
    }
    if errors.is_empty() && warnings.is_empty() {
        writeln!(out, "{name}: ok").map_err(ValidateError::Output)?;
    }
    Ok(!errors.is_empty())
}
