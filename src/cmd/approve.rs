//! `headroom approve -n NS CLAIM`: approves the grow the claim's status recommends, by setting
//! `headroom.dev/approve` to its id, on the claim as read (a resourceVersion precondition), and
//! prints what the agent will do. The agent judges the approval again when it sees it: a claim
//! changed since, a lowered limit, a spent budget or a closed window refuse it.

use std::process::ExitCode;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::StatusError;
use crate::cli::ApproveArgs;
use crate::decide::recommend::Recommendation;
use crate::k8s::state::read_status;
use crate::quantity::format as q;
use crate::resolve::enforce::APPROVE;

/// The field manager of the approval, which the agent records in the history entry (the API
/// server's audit log names the person).
pub const FIELD_MANAGER: &str = "headroom-approve";

#[derive(Debug, thiserror::Error)]
pub enum ApproveError {
    #[error(transparent)]
    Client(#[from] StatusError),
    #[error("{claim}: {source}")]
    Api { claim: String, source: kube::Error },
    #[error(
        "{claim} has no recommendation waiting ({state}); it needs enforcement: approve (or recommend) and a grow the agent decided"
    )]
    NoRecommendation { claim: String, state: String },
    #[error(
        "{claim}'s recommendation {id} went stale at {at}; the agent makes a new one at its next scan: run this again then"
    )]
    Stale {
        claim: String,
        id: String,
        at: Timestamp,
    },
    #[error("{claim}: the status annotation cannot be read: {message}")]
    Status { claim: String, message: String },
}

pub fn run(args: &ApproveArgs) -> Result<ExitCode, ApproveError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(StatusError::from)?;
    let text = runtime.block_on(approve(args))?;
    super::output::emit(text).map_err(StatusError::from)?;
    Ok(ExitCode::SUCCESS)
}

async fn approve(args: &ApproveArgs) -> Result<String, ApproveError> {
    let (client, default_ns) =
        super::status::connect(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let ns = args.namespace.clone().unwrap_or(default_ns);
    let claim = format!("PersistentVolumeClaim {ns}/{}", args.name);
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client, &ns);
    let api_err = |source| ApproveError::Api {
        claim: claim.clone(),
        source,
    };
    let pvc = api.get(&args.name).await.map_err(api_err)?;
    let status = read_status(&pvc).map_err(|e| ApproveError::Status {
        claim: claim.clone(),
        message: e.to_string(),
    })?;
    let rec = match status.as_ref().and_then(|s| s.recommendation.clone()) {
        Some(r) => r,
        None => {
            return Err(ApproveError::NoRecommendation {
                state: status.map_or_else(|| "no status yet".into(), |s| s.last_decision),
                claim,
            });
        }
    };
    if Timestamp::now() >= rec.stale_at {
        return Err(ApproveError::Stale {
            claim,
            id: rec.id,
            at: rec.stale_at,
        });
    }
    // On the claim as read: a claim changed since is approved again knowingly, not by accident.
    let body = json!({"metadata": {
        "resourceVersion": pvc.metadata.resource_version,
        "annotations": {APPROVE: rec.id},
    }});
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    api.patch(&args.name, &params, &Patch::Merge(&body))
        .await
        .map_err(api_err)?;
    Ok(what_happens(&claim, &rec))
}

fn what_happens(claim: &str, rec: &Recommendation) -> String {
    let full = rec
        .full_at
        .map(|t| format!(" (full at {t} at the current fill rate)"))
        .unwrap_or_default();
    format!(
        "approved recommendation {id} for {claim}: {kind} {from} -> {to}{full}\n\
         At its next scan the agent grows it to {to}, once, and records the approval in \
         headroom.dev/history, if the claim's enforcement is approve and the recommendation \
         still holds: the same request ({from}), within the limit, the daily budget, the \
         maintenance window and the modification interval, before {stale}. Otherwise it \
         refuses it: the claim's status (approval.refused) and an ApprovalRefused Event say why, \
         and nothing is changed.\n",
        id = rec.id,
        kind = rec.kind.as_str(),
        from = q(rec.from_bytes),
        to = q(rec.to_bytes),
        stale = rec.stale_at,
    )
}
