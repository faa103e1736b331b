use std::process::ExitCode;

use clap::Parser;
use headroom::cli::{Cli, Command};

fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    // Panics are logged with a backtrace even without RUST_BACKTRACE: a contained panic (one
    // claim's evaluation) leaves the agent running, and this line is all an operator will see.
    std::panic::set_hook(Box::new(|info| {
        let backtrace = std::backtrace::Backtrace::force_capture();
        tracing::error!(%info, %backtrace, "panic");
    }));
    match cli.command {
        Command::Agent(args) => Ok(headroom::agent::main(args)?),
        Command::Validate(args) => Ok(headroom::policy::validate_cmd::run(&args)?),
        Command::Simulate(args) => Ok(headroom::simulate::run(&args)?),
        Command::Scan(args) => Ok(headroom::probe::scan_cmd::run(&args)?),
        Command::WalHealth(args) => Ok(headroom::postgres::cli::run(&args)?),
        Command::Status(args) => Ok(headroom::k8s::status_cmd::run(&args)?),
        Command::Trim(args) => Ok(headroom::reclaim::cmd::run(&args)?),
    }
}
