//! The agent: scan -> resolve -> decide -> act, every interval, for the volumes on this node.

mod act;
pub mod api_metrics;
pub mod evaluate;
pub mod events;
pub mod kubelet;
pub mod kubelet_https;
pub mod pgconn;
pub mod report;
mod scan;
pub mod shutdown;
pub mod world;

pub use report::{MeasuredBy, VolumeReport};

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use jiff::SignedDuration;
use kube::runtime::events::{Recorder, Reporter};

use crate::cli::AgentArgs;
use crate::http::AdminState;
use crate::metrics::Metrics;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("--{flag}: {message}")]
    Flag { flag: &'static str, message: String },
    #[error("cannot reach the Kubernetes API: {0}")]
    Client(#[from] kube::Error),
    #[error("cannot build the Kubernetes client configuration: {0}")]
    Config(String),
    #[error("the async runtime: {0}")]
    Runtime(#[from] std::io::Error),
    #[error("a watch store was dropped before it synced")]
    StoreDropped,
    #[error("metrics: {0}")]
    Metrics(#[from] crate::metrics::MetricsError),
    #[error("reclaim: {0}")]
    Reclaim(#[from] crate::reclaim::ReclaimError),
    #[error("--listen {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
}

/// The agent's settings, validated from the command line.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub node: String,
    pub namespace: String,
    pub configmap: String,
    pub kubelet_root: std::path::PathBuf,
    /// This node's kubelet, when `HOST_IP` is known.
    pub kubelet: Option<kubelet_https::KubeletEndpoint>,
    pub interval: Duration,
    pub dry_run: bool,
    pub resize_timeout: SignedDuration,
    pub api_timeout: Duration,
    pub listen: String,
    pub shutdown_grace: Duration,
}

fn duration(flag: &'static str, text: &str) -> Result<Duration, AgentError> {
    let d: SignedDuration = text.parse().map_err(|e| AgentError::Flag {
        flag,
        message: format!("'{text}' is not a duration (e.g. 10s, 5m): {e}"),
    })?;
    Duration::try_from(d)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| AgentError::Flag {
            flag,
            message: format!("'{text}' must be more than zero"),
        })
}

impl AgentConfig {
    pub fn from_args(a: &AgentArgs) -> Result<Self, AgentError> {
        if a.node_name.trim().is_empty() {
            return Err(AgentError::Flag {
                flag: "node-name",
                message: "NODE_NAME is empty; set it from the downward API (spec.nodeName)".into(),
            });
        }
        let resize_timeout = duration("resize-timeout", &a.resize_timeout)?;
        Ok(AgentConfig {
            node: a.node_name.clone(),
            namespace: a.namespace.clone(),
            configmap: a.configmap.clone(),
            kubelet_root: a.kubelet_root.clone(),
            kubelet: a
                .host_ip
                .as_deref()
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .map(|host| kubelet_https::KubeletEndpoint {
                    host: host.to_string(),
                    port: a.kubelet_port,
                    ca_file: a.kubelet_ca.clone(),
                    token_file: a.kubelet_token_file.clone(),
                }),
            interval: duration("interval", &a.interval)?,
            dry_run: a.dry_run,
            resize_timeout: SignedDuration::try_from(resize_timeout).map_err(|e| {
                AgentError::Flag {
                    flag: "resize-timeout",
                    message: e.to_string(),
                }
            })?,
            api_timeout: duration("api-timeout", &a.api_timeout)?,
            listen: a.listen.clone(),
            shutdown_grace: duration("shutdown-grace", &a.shutdown_grace)?,
        })
    }
}

/// `headroom agent`: builds the runtime and runs until SIGTERM/SIGINT.
pub fn main(args: AgentArgs) -> Result<ExitCode, AgentError> {
    let cfg = AgentConfig::from_args(&args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(run(cfg))
}

pub async fn run(cfg: AgentConfig) -> Result<ExitCode, AgentError> {
    let shutdown = shutdown::Shutdown::install()?;
    let admin = Arc::new(AdminState::new(
        Metrics::new(&cfg.node)?,
        &cfg.node,
        cfg.interval,
    ));
    let listener = tokio::net::TcpListener::bind(&cfg.listen)
        .await
        .map_err(|source| AgentError::Listen {
            addr: cfg.listen.clone(),
            source,
        })?;
    let (stop_http, http_stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(crate::http::serve(listener, admin.clone(), async move {
        let _ = http_stopped.await;
    }));

    let counted = {
        let admin = admin.clone();
        api_metrics::CountRequests(Arc::new(move |verb: &'static str, code: u16| {
            admin.metrics().api_request(verb, code)
        }))
    };
    let client = kube::client::ClientBuilder::try_from(
        kube::Config::infer()
            .await
            .map_err(|e| AgentError::Config(e.to_string()))?,
    )?
    .with_layer(&counted)
    .build();
    let on_restart: world::OnRestart = {
        let admin = admin.clone();
        Arc::new(move |name: &str| admin.metrics().watch_restart(name))
    };
    let mut world = world::World::start(
        client.clone(),
        &cfg.node,
        &cfg.namespace,
        &cfg.configmap,
        on_restart,
    );
    tracing::info!(node = %cfg.node, dry_run = cfg.dry_run, listen = %cfg.listen, "waiting for watches to sync");
    world
        .wait_ready()
        .await
        .map_err(|_| AgentError::StoreDropped)?;
    admin.set_synced(true);
    let reporter = Reporter {
        controller: "headroom".into(),
        instance: Some(format!("headroom-{}", cfg.node)),
    };
    let events = events::Events::new(Recorder::new(client.clone(), reporter));
    let reclaimer =
        crate::reclaim::Reclaimer::new(client.clone(), &cfg.node, cfg.dry_run, cfg.api_timeout)?;
    (reclaimer.metrics().register(admin.metrics().registry()))
        .map_err(crate::reclaim::ReclaimError::Metrics)?;
    let mut scanner = scan::Scanner::new(
        cfg.clone(),
        client,
        events,
        admin.clone(),
        shutdown.clone(),
        reclaimer,
    );

    let mut ticker = tokio::time::interval(cfg.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tracing::info!(node = %cfg.node, interval = ?cfg.interval, "agent started");
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.wait() => break,
        }
        let started = std::time::Instant::now();
        let scan = scanner.scan(&mut world);
        let mut scan = std::pin::pin!(scan);
        tokio::select! {
            reports = &mut scan => admin.scan_finished(reports, started.elapsed(), jiff::Timestamp::now()),
            _ = shutdown.wait() => {
                // The scan starts no new action now; what is in flight may finish, bounded.
                if tokio::time::timeout(cfg.shutdown_grace, &mut scan).await.is_err() {
                    tracing::warn!(grace = ?cfg.shutdown_grace, "scan still running at the end of the shutdown grace");
                }
                break;
            }
        }
    }
    tracing::info!("shutting down");
    let _ = stop_http.send(());
    let _ = server.await;
    Ok(ExitCode::SUCCESS)
}
