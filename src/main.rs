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
