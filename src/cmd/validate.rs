//! `headroom validate FILE...`: one line per finding, `FILE: error|warning: FIELD: message`,
//! or `FILE: ok`. Exit 1 when any file has an error (an unreadable file is one), else 0.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use crate::cli::ValidateArgs;
use crate::policy::PolicyError;
use crate::policy::validate::{Context, Validation, parse_policy_yaml};
use crate::policy::yaml::one_line;

pub fn run(args: &ValidateArgs) -> Result<ExitCode, PolicyError> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let size = match &args.size {
        Some(text) => match crate::quantity::parse(text) {
            Ok(0) => return Err(PolicyError::Size("must be more than zero".into())),
            Ok(b) => Some(b),
            Err(e) => return Err(PolicyError::Size(format!("'{text}': {e}"))),
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
    out.flush().map_err(PolicyError::Output)?;
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Writes the findings for one file, with what is known about the claim it is for; returns
/// whether it had an error.
pub fn report(out: &mut impl Write, path: &Path, ctx: &Context) -> Result<bool, PolicyError> {
    let name = path.display();
    let v = match std::fs::read_to_string(path) {
        Ok(text) => parse_policy_yaml(&text, ctx),
        Err(e) => {
            let e = PolicyError::Read {
                path: path.to_path_buf(),
                source: e,
            };
            writeln!(out, "{name}: error: (file): {}", one_line(&e.to_string()))
                .map_err(PolicyError::Output)?;
            return Ok(true);
        }
    };
    let Validation {
        errors, warnings, ..
    } = &v;
    for (level, findings) in [("error", errors), ("warning", warnings)] {
        for f in findings {
            writeln!(
                out,
                "{name}: {level}: {}: {}",
                f.field,
                one_line(&f.message)
            )
            .map_err(PolicyError::Output)?;
        }
    }
    if errors.is_empty() && warnings.is_empty() {
        writeln!(out, "{name}: ok").map_err(PolicyError::Output)?;
    }
    Ok(!errors.is_empty())
}
