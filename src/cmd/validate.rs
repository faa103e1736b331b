//! `headroom validate FILE...`: one line per finding, `FILE: error|warning: FIELD: message`,
//! or `FILE: ok`. Exit 1 when any file has an error (an unreadable file is one), else 0. A file
//! is a bare policy, a file of selector sections, or the central ConfigMap's or a Namespace's
//! manifest (see [`crate::policy::manifest`]); a ConfigMap's FIELD starts with its data key,
//! e.g. `storageClasses.yaml[fast]: limit`.
//!
//! With `--context` or `--kubeconfig`, one LIST of the claims' metadata in every namespace
//! (under a deadline) lets a ConfigMap's selector sections be checked against the claims they
//! are meant for; without them, nothing leaves the machine.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, ListParams};

use super::StatusError;
use crate::cli::ValidateArgs;
use crate::policy::manifest::{Checked, check_file};
use crate::policy::selector_usage::LiveClaim;
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
    #[error(transparent)]
    Cluster(#[from] StatusError),
    #[error("listing PersistentVolumeClaims in all namespaces: no answer within {}s", LIST_DEADLINE.as_secs())]
    Deadline,
}

/// How long the one LIST may take: a hung API server must not hang a CI job's validate.
const LIST_DEADLINE: Duration = Duration::from_secs(30);

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
    let live = if args.context.is_some() || args.kubeconfig.is_some() {
        Some(live_claims(args)?)
    } else {
        None
    };
    let mut failed = false;
    for path in &args.files {
        failed |= report(&mut out, path, &ctx, live.as_deref())?;
    }
    out.flush().map_err(ValidateError::Output)?;
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Every claim's namespace and labels, from one LIST of metadata across namespaces.
fn live_claims(args: &ValidateArgs) -> Result<Vec<LiveClaim>, ValidateError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(StatusError::from)?;
    runtime.block_on(async {
        let (client, _) =
            super::status::connect(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
        let api: Api<PersistentVolumeClaim> = Api::all(client);
        let list = tokio::time::timeout(LIST_DEADLINE, api.list_metadata(&ListParams::default()))
            .await
            .map_err(|_| ValidateError::Deadline)?
            .map_err(|source| StatusError::Api {
                action: "listing PersistentVolumeClaims in all namespaces".into(),
                source,
            })?;
        Ok(list
            .items
            .into_iter()
            .map(|m| LiveClaim {
                namespace: m.metadata.namespace.unwrap_or_default(),
                labels: m.metadata.labels.unwrap_or_default(),
            })
            .collect())
    })
}

/// Writes the findings for one file, with what is known about the claim it is for (and the
/// cluster's claims, when read); returns whether it had an error.
pub fn report(
    out: &mut impl Write,
    path: &Path,
    ctx: &Context,
    live: Option<&[LiveClaim]>,
) -> Result<bool, ValidateError> {
    let name = path.display();
    let file_name = path.file_name().unwrap_or_default().to_string_lossy();
    let v = match std::fs::read_to_string(path) {
        Ok(text) => check_file(&file_name, &text, ctx, live),
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
