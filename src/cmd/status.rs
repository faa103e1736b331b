//! `headroom status`: the cluster-wide view from the claims' own annotations, with one LIST and
//! the caller's kubeconfig, like `kubectl get pvc`. Every claim the LIST returns is a row;
//! claims headroom has not touched show "-", so `-l` (or a claim's name) is how to narrow the
//! view. `--policy` shows the effective policy instead ([`super::status_policy`]).

use std::process::ExitCode;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde::Serialize;

use super::StatusError;
use super::output::within;
use crate::cli::{Format, StatusArgs};
use crate::decide::Action;
use crate::k8s::state::{StatusAnnotation, read_history, read_status};
use crate::k8s::{storage_capacity, storage_request};
use crate::quantity;

/// One claim as `headroom status` shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub namespace: String,
    pub name: String,
    /// The claim's size from its spec and status (the larger of request and capacity).
    pub size_bytes: Option<u64>,
    pub status: Option<StatusAnnotation>,
    pub last_action: Option<Action>,
    /// Annotations or fields that could not be read; the rest of the row is still shown.
    pub errors: Vec<String>,
}

impl Row {
    pub fn from_pvc(pvc: &PersistentVolumeClaim) -> Row {
        let mut errors = Vec::new();
        let mut ok = |r: Result<Option<u64>, crate::k8s::KubeError>| {
            r.unwrap_or_else(|e| {
                errors.push(e.to_string());
                None
            })
        };
        let size = match (ok(storage_request(pvc)), ok(storage_capacity(pvc))) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0).max(b.unwrap_or(0))),
        };
        let status = read_status(pvc).unwrap_or_else(|e| {
            errors.push(e.to_string());
            None
        });
        let last_action = match read_history(pvc) {
            Ok(h) => h.last().cloned(),
            Err(e) => {
                errors.push(e.to_string());
                None
            }
        };
        Row {
            namespace: pvc.metadata.namespace.clone().unwrap_or_default(),
            name: pvc.metadata.name.clone().unwrap_or_default(),
            size_bytes: size,
            status,
            last_action,
            errors,
        }
    }
}

pub fn run(args: &StatusArgs) -> Result<ExitCode, StatusError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let out = runtime.block_on(async {
        let (client, claims) = list(args).await?;
        if args.policy {
            let cm = (args.configmap_namespace.as_str(), args.configmap.as_str());
            let rows = super::status_policy::fetch(client, &claims, cm).await?;
            return Ok::<_, StatusError>(match args.format {
                Format::Json => serde_json::to_string_pretty(&rows)? + "\n",
                Format::Table => super::status_policy::render(&rows),
            });
        }
        let rows: Vec<Row> = claims.iter().map(Row::from_pvc).collect();
        let now = Timestamp::now();
        Ok(match args.format {
            // Each row's status carries its `logicalVolume`.
            Format::Json => serde_json::to_string_pretty(&rows)? + "\n",
            Format::Table => {
                let logical = super::status_logical::rows(&claims, now);
                say_server(&client).await;
                render_table(&rows, now) + &super::status_logical::render(&logical)
            }
        })
    })?;
    super::output::emit(&out)?;
    Ok(ExitCode::SUCCESS)
}

/// The API server's release and how it stands against the releases headroom is tested on, on
/// stderr as kubectl says its version skew, so the table on stdout stays one row per claim;
/// nothing when it cannot be read within a few seconds (the claims are the answer).
async fn say_server(client: &kube::Client) {
    let read = tokio::time::timeout(Duration::from_secs(5), client.apiserver_version()).await;
    if let Ok(Ok(info)) = read {
        let v = crate::k8s::version::judge(&info.major, &info.minor, &info.git_version);
        eprintln!("API server {v}");
    }
}

async fn client(args: &StatusArgs) -> Result<(kube::Client, String), StatusError> {
    connect(args.kubeconfig.as_deref(), args.context.as_deref()).await
}

/// A client from the kubeconfig given (else `$KUBECONFIG`, `~/.kube/config`, in-cluster) and
/// its context's namespace, as kubectl would.
pub(super) async fn connect(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
) -> Result<(kube::Client, String), StatusError> {
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    let kubeconfig_err = |path: &str, e: &dyn std::fmt::Display| StatusError::Kubeconfig {
        path: path.to_string(),
        message: e.to_string(),
    };
    let config = match kubeconfig {
        Some(path) => {
            let shown = path.display().to_string();
            let kc = Kubeconfig::read_from(path).map_err(|e| kubeconfig_err(&shown, &e))?;
            kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| kubeconfig_err(&shown, &e))?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| kubeconfig_err("(default)", &e))?,
        None => kube::Config::infer()
            .await
            .map_err(|e| kubeconfig_err("(default or in-cluster)", &e))?,
    };
    let namespace = config.default_namespace.clone();
    let client = kube::Client::try_from(config).map_err(|source| StatusError::Api {
        action: "building the Kubernetes client".into(),
        source,
    })?;
    Ok((client, namespace))
}

/// The claims to show, sorted by namespace and name, and the client that listed them.
async fn list(
    args: &StatusArgs,
) -> Result<(kube::Client, Vec<PersistentVolumeClaim>), StatusError> {
    let (client, default_ns) = client(args).await?;
    let (api, scope): (Api<PersistentVolumeClaim>, String) = if args.all_namespaces {
        (Api::all(client.clone()), "all namespaces".into())
    } else {
        let ns = args.namespace.clone().unwrap_or(default_ns);
        (
            Api::namespaced(client.clone(), &ns),
            format!("namespace {ns}"),
        )
    };
    let mut params = ListParams::default();
    if let Some(selector) = &args.selector {
        params = params.labels(selector);
    }
    if let Some(name) = &args.name {
        params = params.fields(&format!("metadata.name={name}"));
    }
    let list = api.list(&params).await.map_err(|source| StatusError::Api {
        action: format!("listing PersistentVolumeClaims in {scope}"),
        source,
    })?;
    let mut claims = list.items;
    claims.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    Ok((client, claims))
}

const COLUMNS: usize = 12;

const HEADERS: [&str; COLUMNS] = [
    "NAMESPACE",
    "NAME",
    "NODE",
    "SIZE/LIMIT",
    "USED%",
    "FULL IN",
    "LIMIT IN",
    "STATE",
    "LAST ACTION",
    "BUDGET",
    "QUOTA LEFT",
    "BLOCKED",
];

/// `kubectl`-style age: the largest unit, one number.
pub fn age(from: Timestamp, now: Timestamp) -> String {
    let s = now.duration_since(from).as_secs();
    if s < 0 {
        return "future".into();
    }
    match s {
        0..120 => format!("{s}s"),
        120..7200 => format!("{}m", s / 60),
        7200..172_800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

fn cells(row: &Row, now: Timestamp) -> [String; COLUMNS] {
    let dash = || "-".to_string();
    let st = row.status.as_ref();
    // This claim's size; annotations written before `sizeBytes` had it as `effectiveSizeBytes`.
    let size = st
        .map(|s| s.size_bytes.unwrap_or(s.effective_size_bytes))
        .or(row.size_bytes);
    let limit = st.and_then(|s| s.limit_bytes);
    let size_limit = format!(
        "{}/{}",
        size.map_or_else(dash, quantity::format),
        limit.map_or_else(dash, quantity::format)
    );
    let last = row.last_action.as_ref().map_or_else(dash, |a| {
        format!(
            "{} {}->{} {} ago",
            a.kind.as_str(),
            quantity::format(a.from),
            quantity::format(a.to),
            age(a.at, now)
        )
    });
    let blocked = if row.errors.is_empty() {
        st.and_then(|s| s.blocked_reason.clone())
            .unwrap_or_else(dash)
    } else {
        format!("error: {}", row.errors.join("; "))
    };
    let state = match st {
        Some(s) if s.restoring.is_some() => format!("{} (restoring)", s.state),
        // What a person approves: the size and the id.
        Some(s) => match &s.recommendation {
            Some(r) => format!("{} {} ({})", s.state, quantity::format(r.to_bytes), r.id),
            None => s.state.clone(),
        },
        None if !row.errors.is_empty() => "Error".into(),
        None => dash(),
    };
    [
        row.namespace.clone(),
        row.name.clone(),
        st.map_or_else(dash, |s| s.node.clone()),
        size_limit,
        st.and_then(|s| s.used_percent)
            .map_or_else(dash, |p| format!("{p:.1}")),
        st.and_then(|s| s.full_in_seconds).map_or_else(dash, within),
        st.and_then(|s| s.limit_in_seconds)
            .map_or_else(dash, within),
        state,
        last,
        st.map_or_else(dash, budget),
        st.and_then(|s| s.quota.as_ref())
            .map_or_else(dash, quota_left),
        blocked,
    ]
}

/// Actions left today; `planned/emergency` where an emergency may take more than planned growth
/// (convergent mode's reserve).
fn budget(s: &StatusAnnotation) -> String {
    match s.budget {
        Some(b) if b.available_for_emergency != b.available_for_planned => {
            format!("{}/{}", b.available_for_planned, b.available_for_emergency)
        }
        _ => s.budget_left.to_string(),
    }
}

/// What the namespace's tightest ResourceQuota line leaves the claim, and which quota that is.
fn quota_left(q: &crate::decide::quota::QuotaView) -> String {
    format!("{} ({})", quantity::format(q.left_bytes), q.line.quota)
}

/// The table, columns padded to their widest cell (the last one is not padded).
pub fn render_table(rows: &[Row], now: Timestamp) -> String {
    let body: Vec<[String; COLUMNS]> = rows.iter().map(|r| cells(r, now)).collect();
    let mut widths = HEADERS.map(str::len);
    for r in &body {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let header = HEADERS.map(String::from);
    for r in std::iter::once(&header).chain(&body) {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(c);
            } else {
                line.push_str(&format!("{c:<w$}   ", w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::SignedDuration;

    #[test]
    fn ages_like_kubectl() {
        let now: Timestamp = "2026-03-01T12:00:00Z".parse().expect("ts");
        let ago = |s: i64| age(now - SignedDuration::from_secs(s), now);
        assert_eq!(ago(0), "0s");
        assert_eq!(ago(119), "119s");
        assert_eq!(ago(120), "2m");
        assert_eq!(ago(7199), "119m");
        assert_eq!(ago(7200), "2h");
        assert_eq!(ago(172_800), "2d");
        assert_eq!(ago(-5), "future");
    }

    fn row_of(status: StatusAnnotation) -> Row {
        Row {
            namespace: "db".into(),
            name: "pg-2".into(),
            size_bytes: None,
            status: Some(status),
            last_action: None,
            errors: Vec::new(),
        }
    }

    #[test]
    fn a_restoring_claim_says_so_after_its_state() {
        let now: Timestamp = "2026-03-01T12:00:00Z".parse().expect("ts");
        let status: StatusAnnotation = serde_json::from_value(serde_json::json!({
            "node": "n1", "updatedAt": now, "effectiveSizeBytes": 1, "state": "Growing",
            "lastDecision": "test", "budgetLeft": 1,
        }))
        .expect("status");
        let mut row = row_of(status);
        assert_eq!(cells(&row, now)[7], "Growing");
        if let Some(s) = row.status.as_mut() {
            s.restoring = Some("restoring a base backup".into());
        }
        assert_eq!(cells(&row, now)[7], "Growing (restoring)");
    }

    #[test]
    fn a_recommendation_shows_its_size_and_id() {
        let now: Timestamp = "2026-03-01T12:00:00Z".parse().expect("ts");
        let status: StatusAnnotation = serde_json::from_value(serde_json::json!({
            "node": "n1", "updatedAt": now, "effectiveSizeBytes": 1, "state": "Recommended",
            "lastDecision": "test", "budgetLeft": 1,
            "recommendation": {"id": "0123456789ab", "kind": "Grow", "fromBytes": 67108864,
                "toBytes": 83886080, "madeAt": now, "staleAt": now},
        }))
        .expect("status");
        let row = row_of(status);
        assert_eq!(cells(&row, now)[7], "Recommended 80Mi (0123456789ab)");
    }

    #[test]
    fn deadlines_in_their_largest_unit() {
        assert_eq!(within(0), "<1m");
        assert_eq!(within(2_400), "40m");
        assert_eq!(within(43_200), "12h");
        assert_eq!(within(3 * 86_400), "3d");
    }
}
