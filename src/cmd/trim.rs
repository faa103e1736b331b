//! `headroom trim PATH`: trim one mounted filesystem by hand and say what it reclaimed.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::cli::TrimArgs;
use crate::probe::bounded::{BoundedError, BusyPaths};
use crate::quantity;
use crate::reclaim::{TrimError, fitrim};

#[derive(Debug, thiserror::Error)]
pub enum TrimCmdError {
    #[error(transparent)]
    Trim(#[from] TrimError),
    /// A hung mount (or a device that never finishes): the command returns, the call is left.
    #[error("{path}: {source}")]
    NoAnswer { path: String, source: BoundedError },
    #[error("trim: starting the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot write output: {0}")]
    Output(std::io::Error),
}

pub fn run(args: &TrimArgs) -> Result<ExitCode, TrimCmdError> {
    let started = Instant::now();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(TrimCmdError::Runtime)?;
    let path = args.path.clone();
    let deadline = Duration::from_secs(args.timeout);
    // The same bounded call as the agent's probe: opening a hung mount blocks in the kernel.
    let result =
        runtime.block_on(BusyPaths::new().run(&args.path, deadline, move || fitrim(&path)));
    runtime.shutdown_background();
    let bytes = result.map_err(|source| TrimCmdError::NoAnswer {
        path: args.path.display().to_string(),
        source,
    })??;
    let secs = started.elapsed().as_secs_f64();
    writeln!(
        std::io::stdout(),
        "{}: trimmed {} ({bytes} bytes) in {secs:.3}s",
        args.path.display(),
        quantity::human(bytes),
    )
    .map_err(TrimCmdError::Output)?;
    Ok(ExitCode::SUCCESS)
}
