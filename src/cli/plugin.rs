//! `kubectl headroom ...`: the same binary, installed on PATH as `kubectl-headroom` (by hand or by
//! krew). kubectl runs a plugin with the words after its name and passes none of its own flags:
//! `kubectl --context prod headroom` is refused by kubectl itself, so the plugin takes kubectl's
//! `--kubeconfig`, `--context` and `-n/--namespace` where a kubectl user writes them, before the
//! subcommand too (`kubectl headroom --context prod status -A`). `KUBECONFIG` is the environment
//! kubectl passes on, read as kubectl reads it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{Arg, ArgMatches, CommandFactory, FromArgMatches, error::ErrorKind};

use super::Cli;

/// The file name kubectl looks for on PATH to run `kubectl headroom`.
pub const PLUGIN_FILE: &str = "kubectl-headroom";

/// Subcommands that work on the machine they run on (the DaemonSet's agent; measuring and trimming
/// local filesystems): a plugin runs on a person's machine, so it neither offers nor runs them.
pub const NODE_COMMANDS: &[&str] = &["agent", "scan", "trim"];

/// kubectl's flags, by the ids the client commands' own fields have (`StatusArgs::kubeconfig`...):
/// given before the subcommand, clap hands the value to the subcommand's field of that id.
const KUBE_FLAGS: &[&str] = &["kubeconfig", "context", "namespace"];

/// The command line, as `kubectl headroom` when this binary was run as `kubectl-headroom`, else as
/// `headroom`. Exits on a usage error, as clap's `parse` does.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Cli {
    let args: Vec<OsString> = args.into_iter().collect();
    if !is_plugin(args.first()) {
        return <Cli as clap::Parser>::parse_from(args);
    }
    try_parse_plugin(args).unwrap_or_else(|e| e.exit())
}

fn is_plugin(argv0: Option<&OsString>) -> bool {
    argv0
        .and_then(|a| Path::new(a).file_name())
        .is_some_and(|name| name == PLUGIN_FILE)
}

/// The plugin's command line: headroom's, named `kubectl headroom`, with kubectl's flags global,
/// the node's commands hidden, and usage when given nothing.
pub fn command() -> clap::Command {
    let mut cmd = Cli::command()
        .name("kubectl headroom")
        .bin_name("kubectl headroom")
        .arg_required_else_help(true)
        .arg(
            Arg::new("kubeconfig")
                .long("kubeconfig")
                .global(true)
                .value_parser(clap::value_parser!(PathBuf))
                .help("Kubeconfig file (default: $KUBECONFIG, ~/.kube/config), as kubectl's"),
        )
        .arg(
            Arg::new("context")
                .long("context")
                .global(true)
                .help("Kubeconfig context (default: the current context), as kubectl's"),
        )
        .arg(
            Arg::new("namespace")
                .short('n')
                .long("namespace")
                .global(true)
                .help("Namespace (default: the context's), as kubectl's"),
        );
    // Each node command becomes a hidden one that takes anything, for `refuse` to answer: its
    // own arguments (the agent's required --node-name) would fail first, or print its help.
    for name in NODE_COMMANDS {
        cmd = cmd.mut_subcommand(*name, |_| {
            clap::Command::new(*name)
                .hide(true)
                .disable_help_flag(true)
                .arg(Arg::new("args").num_args(0..).allow_hyphen_values(true))
        });
    }
    cmd
}

/// `args` (argv[0] first) as `kubectl headroom`'s command line.
pub fn try_parse_plugin(args: Vec<OsString>) -> Result<Cli, clap::Error> {
    let mut cmd = command();
    let matches = cmd.try_get_matches_from_mut(args)?;
    if let Some((name, sub)) = matches.subcommand() {
        refuse(&mut cmd, name, sub)?;
    }
    Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))
}

/// A node command, or a kubectl flag given to a command that does not talk to the cluster (it
/// would be ignored without a word).
fn refuse(cmd: &mut clap::Command, name: &str, sub: &ArgMatches) -> Result<(), clap::Error> {
    if NODE_COMMANDS.contains(&name) {
        let msg = format!(
            "`{name}` runs on a node, as `headroom {name}`; it is not a kubectl plugin command"
        );
        return Err(cmd.error(ErrorKind::InvalidSubcommand, msg));
    }
    let own = Cli::command();
    let takes = |flag: &&str| {
        own.find_subcommand(name)
            .is_some_and(|s| s.get_arguments().any(|a| a.get_id() == *flag))
    };
    let given = |flag: &&str| sub.value_source(flag) == Some(ValueSource::CommandLine);
    match KUBE_FLAGS.iter().find(|f| given(f) && !takes(f)) {
        Some(flag) => {
            let msg =
                format!("`{name}` does not talk to the cluster: --{flag} has no meaning for it");
            Err(cmd.error(ErrorKind::ArgumentConflict, msg))
        }
        None => Ok(()),
    }
}

#[cfg(test)]
#[path = "plugin_tests.rs"]
mod tests;
