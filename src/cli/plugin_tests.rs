use std::ffi::OsString;
use std::path::PathBuf;

use clap::CommandFactory;
use clap::error::ErrorKind;

use super::*;
use crate::cli::{Command, StatusArgs};

fn argv(words: &str) -> Vec<OsString> {
    std::iter::once("/home/me/.krew/bin/kubectl-headroom")
        .chain(words.split_whitespace())
        .map(OsString::from)
        .collect()
}

fn status(words: &str) -> StatusArgs {
    match try_parse_plugin(argv(words)).map(|c| c.command) {
        Ok(Command::Status(a)) => a,
        other => panic!("{words}: {other:?}"),
    }
}

#[test]
fn the_command_line_is_well_formed() {
    command().debug_assert();
}

#[test]
fn kubectl_flags_are_taken_before_and_after_the_subcommand() {
    let a = status("--context prod --kubeconfig /k -n db status data-pg-1");
    assert_eq!(a.context.as_deref(), Some("prod"));
    assert_eq!(a.kubeconfig, Some(PathBuf::from("/k")));
    assert_eq!(a.namespace.as_deref(), Some("db"));
    assert_eq!(a.name.as_deref(), Some("data-pg-1"));

    let a = status("status --namespace=db --context=dev -l app=pg");
    assert_eq!(a.namespace.as_deref(), Some("db"));
    assert_eq!(a.context.as_deref(), Some("dev"));
    assert_eq!(a.selector.as_deref(), Some("app=pg"));

    // Written twice, the last one counts, as with kubectl.
    let a = status("--context a status --context b");
    assert_eq!(a.context.as_deref(), Some("b"));

    let a = status("status -A");
    assert_eq!((a.namespace, a.context, a.kubeconfig), (None, None, None));
}

#[test]
fn every_client_command_takes_kubectls_flags_the_same_way() {
    match try_parse_plugin(argv(
        "--kubeconfig /k --context prod -n db approve data-pg-1",
    )) {
        Ok(crate::cli::Cli {
            command: Command::Approve(a),
            ..
        }) => {
            assert_eq!(a.kubeconfig, Some(PathBuf::from("/k")));
            assert_eq!(a.context.as_deref(), Some("prod"));
            assert_eq!(a.namespace.as_deref(), Some("db"));
            assert_eq!(a.name, "data-pg-1");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn only_a_binary_named_kubectl_headroom_is_the_plugin() {
    assert!(is_plugin(Some(&OsString::from("kubectl-headroom"))));
    assert!(is_plugin(argv("").first()));
    for other in [
        "headroom",
        "/usr/local/bin/headroom",
        "kubectl-headroom-x",
        "",
    ] {
        assert!(!is_plugin(Some(&OsString::from(other))), "{other}");
    }
    assert!(!is_plugin(None));
}

#[test]
fn node_commands_are_neither_offered_nor_run() {
    let help = command().render_long_help().to_string();
    assert!(help.contains("kubectl headroom"), "{help}");
    let cli = crate::cli::Cli::command();
    for name in NODE_COMMANDS {
        // Each name is one of headroom's subcommands (a renamed one would slip through).
        assert!(cli.find_subcommand(name).is_some(), "{name}");
        assert!(
            !help.contains(&format!("\n  {name} ")),
            "{name} offered: {help}"
        );
        let err = try_parse_plugin(argv(name)).expect_err(name);
        assert_eq!(err.kind(), ErrorKind::InvalidSubcommand, "{name}: {err}");
        assert!(err.to_string().contains("runs on a node"), "{err}");
    }
    for offered in ["status", "validate", "simulate", "wal-health"] {
        assert!(
            help.contains(&format!("\n  {offered} ")),
            "{offered}: {help}"
        );
    }
}

#[test]
fn a_kubectl_flag_for_a_command_that_does_not_use_it_is_refused() {
    let err = try_parse_plugin(argv("-n db validate p.yaml")).expect_err("refused");
    assert_eq!(err.kind(), ErrorKind::ArgumentConflict);
    assert!(err.to_string().contains("--namespace"), "{err}");
    let err = try_parse_plugin(argv(
        "--context prod simulate --policy p.yaml --trace t.csv --capacity 1Gi",
    ))
    .expect_err("refused");
    assert!(err.to_string().contains("--context"), "{err}");
    assert!(try_parse_plugin(argv("validate p.yaml")).is_ok());
}

/// validate reads the cluster's claims when given a context or kubeconfig (its selector
/// sections), so kubectl's flags reach it, before the subcommand too.
#[test]
fn validate_takes_kubectls_context_and_kubeconfig() {
    let cli =
        try_parse_plugin(argv("--context prod validate --kubeconfig kc p.yaml")).expect("taken");
    let Command::Validate(args) = cli.command else {
        panic!("not validate: {:?}", cli.command);
    };
    assert_eq!(args.context.as_deref(), Some("prod"));
    assert_eq!(args.kubeconfig.as_deref(), Some(std::path::Path::new("kc")));
}

#[test]
fn no_arguments_print_the_usage() {
    let err = try_parse_plugin(argv("")).expect_err("usage");
    assert_eq!(
        err.kind(),
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    );
    assert!(err.to_string().contains("Usage: kubectl headroom"), "{err}");
}
