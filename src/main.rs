use std::process::ExitCode;

use headroom::cli::{Command, LogFormat};
use headroom::cmd;

fn main() -> anyhow::Result<ExitCode> {
    let cli = headroom::cli::plugin::parse(std::env::args_os());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal: a container's log (kubectl logs, a log
        // shipper) would keep the escape codes as text.
        .with_ansi(
            std::io::IsTerminal::is_terminal(&std::io::stderr())
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        );
    match cli.log_format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
    // Panics are logged with a backtrace even without RUST_BACKTRACE: a contained panic (one
    // claim's evaluation) leaves the agent running, and this line is all an operator will see.
    std::panic::set_hook(Box::new(|info| {
        let backtrace = std::backtrace::Backtrace::force_capture();
        tracing::error!(%info, %backtrace, "panic");
    }));
    match cli.command {
        Command::Agent(args) => Ok(headroom::agent::main(*args)?),
        Command::Validate(args) => Ok(cmd::validate::run(&args)?),
        Command::Simulate(args) => Ok(cmd::simulate::run(&args)?),
        Command::Scan(args) => Ok(cmd::scan::run(&args)?),
        Command::WalHealth(args) => Ok(cmd::wal_health::run(&args)?),
        Command::Status(args) => Ok(cmd::status::run(&args)?),
        Command::Approve(args) => Ok(cmd::approve::run(&args)?),
        Command::Trim(args) => Ok(cmd::trim::run(&args)?),
    }
}
