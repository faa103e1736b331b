//! `headroom trim PATH`: trim one mounted filesystem by hand and say what it reclaimed.

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use crate::cli::TrimArgs;
use crate::quantity;
use crate::reclaim::{ReclaimError, fitrim};

pub fn run(args: &TrimArgs) -> Result<ExitCode, ReclaimError> {
    let started = Instant::now();
    let bytes = fitrim(&args.path)?;
    let secs = started.elapsed().as_secs_f64();
    writeln!(
        std::io::stdout(),
        "{}: trimmed {} ({bytes} bytes) in {secs:.3}s",
        args.path.display(),
        quantity::human(bytes),
    )
    .map_err(ReclaimError::Output)?;
    Ok(ExitCode::SUCCESS)
}
