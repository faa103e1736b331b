//! The agent: scan -> resolve -> decide -> act, every interval, for the volumes on this node.

mod act;
pub mod api_metrics;
pub mod claim_watch;
pub mod client;
mod config;
mod contain;
mod enforce;
mod evict;
mod heap;
#[cfg(test)]
mod hostile_tests;
pub mod kubelet_stats;
pub mod kubelet_stats_https;
pub mod measure;
mod owner;
pub mod pgconn;
pub mod samples;
mod scan;
mod server_version;
pub mod shutdown;
mod slim;
#[cfg(test)]
mod trace_tests;
mod wal;
mod work;
pub mod world;

pub use crate::report::{MeasuredBy, VolumeReport};
pub use config::AgentConfig;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

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
    #[error(transparent)]
    Webhook(#[from] crate::webhook::WebhookError),
    #[error("{flag} {addr}: {source}")]
    Listen {
        /// The flag that named the address (`--listen`, `--webhook-listen`).
        flag: &'static str,
        addr: String,
        source: std::io::Error,
    },
}

/// `headroom agent`: builds the runtime and runs until SIGTERM/SIGINT.
pub fn main(args: AgentArgs) -> Result<ExitCode, AgentError> {
    let cfg = AgentConfig::from_args(&args)?;
    heap::limit_arenas();
    crate::probe::anchor::raise_descriptor_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let result = runtime.block_on(run(cfg));
    // A probe call stuck on a hung mount cannot be cancelled; waiting for it would turn SIGTERM
    // into SIGKILL. Anything else still running gets a moment, then is left behind.
    runtime.shutdown_timeout(EXIT_WAIT);
    result
}

/// How long exit waits for blocking threads (a stuck statfs never returns).
const EXIT_WAIT: Duration = Duration::from_millis(500);

/// Feeds API answers to the request counter and `/ready`.
struct ApiHealth(Arc<AdminState>);

impl api_metrics::ApiObserver for ApiHealth {
    fn sent(&self) -> u64 {
        self.0.request_sent()
    }

    fn ended(&self, token: u64, verb: &'static str, status: Option<u16>) {
        if let Some(code) = status {
            self.0.metrics().api_request(verb, code);
        }
        self.0.request_ended(token, status);
    }
}

/// Feeds watch health to `/ready` and the restart counter.
struct WatchHealth(Arc<AdminState>);

impl world::WatchObserver for WatchHealth {
    fn failed(&self, watcher: &str) {
        self.0.metrics().watch_restart(watcher);
        self.0.watch_failed(watcher);
    }

    fn ok(&self, watcher: &str) {
        self.0.watch_ok(watcher);
    }

    fn received(&self, resource: &'static str) {
        self.0.metrics().watch_event(resource);
    }
}

/// What one turn of the reconcile loop did.
enum Turn {
    /// A full scan: every volume on the node.
    Scanned(Vec<VolumeReport>),
    /// The volumes the fast loop saw cross, alone: every claim's last report, theirs fresh.
    Crossed(Vec<VolumeReport>),
    /// The crossed volumes were gone by the time the loop turned.
    Nothing,
}

/// A full scan at the interval's tick, or a scan of the volumes that crossed.
async fn turn(
    scanner: &mut scan::Scanner,
    world: &mut world::World,
    crossed: Option<Vec<(crate::probe::Target, crate::probe::statfs::FsStats)>>,
) -> Result<Turn, crate::probe::ProbeError> {
    match crossed {
        // A crossing is decided on with the last scan's findings of which volumes share a
        // device; when the kubelet's mounts changed since (another claim mounted the same
        // device), only a new scan can say.
        Some(crossed) if !scanner.mounts_changed().await => Ok(scanner
            .scan_crossed(world, crossed)
            .await
            .map_or(Turn::Nothing, Turn::Crossed)),
        _ => Ok(Turn::Scanned(scanner.scan(world).await?)),
    }
}

/// Serves the claim admission webhook on `listener` until `stopped`, reading the watch stores of
/// `world`; its metrics join the agent's `registry`.
fn spawn_webhook(
    cfg: &AgentConfig,
    listener: Option<tokio::net::TcpListener>,
    world: &world::World,
    client: &kube::Client,
    registry: &prometheus::Registry,
    stopped: tokio::sync::oneshot::Receiver<()>,
) -> Result<Option<tokio::task::JoinHandle<()>>, AgentError> {
    let (Some(w), Some(listener)) = (cfg.webhook.clone(), listener) else {
        return Ok(None);
    };
    let metrics = crate::webhook::metrics::WebhookMetrics::new(registry)
        .map_err(crate::webhook::WebhookError::Metrics)?;
    let sources = crate::webhook::Sources {
        classes: world.classes.clone(),
        namespaces: world.namespace_objects.clone(),
        configmaps: world.configmaps.clone(),
        configmap: format!("{}/{}", cfg.namespace, cfg.configmap),
    };
    let client = client.clone();
    Ok(Some(tokio::spawn(async move {
        let stopped = async move {
            let _ = stopped.await;
        };
        let served = crate::webhook::run(w, listener, client, sources, metrics, stopped);
        if let Err(e) = served.await {
            tracing::error!(error = %e, "webhook not served");
        }
    })))
}

/// The notification sinks' supervisor; each scan hands it the ConfigMap's key.
fn start_notifier(
    cfg: &AgentConfig,
    client: &kube::Client,
    admin: &Arc<AdminState>,
) -> crate::notify::Notifier {
    let source = crate::notify::supervise::Source {
        client: client.clone(),
        namespace: cfg.namespace.clone(),
        configmap: format!("{}/{}", cfg.namespace, cfg.configmap),
        api_timeout: cfg.api_timeout,
        proxies: cfg.proxies.clone(),
    };
    let admin = admin.clone();
    crate::notify::supervise::start(
        source,
        Arc::new(move |sink, outcome, n| admin.metrics().notifications(sink, outcome, n)),
    )
}

/// A server task and the sender that stops it.
struct Server<T> {
    stop: tokio::sync::oneshot::Sender<()>,
    task: Option<tokio::task::JoinHandle<T>>,
}

impl<T> Server<T> {
    /// Asks the server to stop and waits until it has.
    async fn stop(self) {
        let _ = self.stop.send(());
        if let Some(task) = self.task {
            let _ = task.await;
        }
    }
}

/// The agent until SIGTERM: its servers and watch stores, then the reconcile loop.
pub async fn run(cfg: AgentConfig) -> Result<ExitCode, AgentError> {
    let shutdown = shutdown::Shutdown::install()?;
    let admin = Arc::new(AdminState::new(
        Metrics::new(&cfg.node)?,
        &cfg.node,
        cfg.interval,
    ));
    let admin_server = serve_admin(&cfg, &admin).await?;
    // Bound before anything else, like --listen: a port in use is a configuration error.
    let webhook_listener = bind_webhook(&cfg).await?;
    let client = build_client(&admin).await?;
    server_version::read_and_say(&client, &admin).await;
    let mut world = start_watches(&cfg, &client, &admin).await?;
    // Served once the stores it reads (classes, the ConfigMap) have synced.
    let webhook = serve_webhook(&cfg, webhook_listener, &world, &client, &admin)?;
    let mut scanner = build_scanner(&cfg, client, &admin, &shutdown)?;
    let signalled = reconcile(&cfg, &admin, &shutdown, &mut scanner, &mut world).await;
    // Volume work that outlasted its scan (a slow PATCH) may finish within what is left of the
    // grace.
    let left = cfg.shutdown_grace.saturating_sub(signalled.elapsed());
    scanner.finish_running(left).await;
    tracing::info!("shutting down");
    admin_server.stop().await;
    webhook.stop().await;
    Ok(ExitCode::SUCCESS)
}

/// Binds `--listen` and serves the admin endpoint (`/metrics`, `/ready`, ...) on it.
async fn serve_admin(
    cfg: &AgentConfig,
    admin: &Arc<AdminState>,
) -> Result<Server<Result<(), crate::http::HttpError>>, AgentError> {
    let listener = tokio::net::TcpListener::bind(&cfg.listen)
        .await
        .map_err(|source| AgentError::Listen {
            flag: "--listen",
            addr: cfg.listen.clone(),
            source,
        })?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(crate::http::serve(listener, admin.clone(), async move {
        let _ = stopped.await;
    }));
    Ok(Server {
        stop,
        task: Some(task),
    })
}

/// The webhook's listener, when `--webhook-listen` is set.
async fn bind_webhook(cfg: &AgentConfig) -> Result<Option<tokio::net::TcpListener>, AgentError> {
    let Some(w) = &cfg.webhook else {
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind(&w.listen)
        .await
        .map_err(|source| AgentError::Listen {
            flag: "--webhook-listen",
            addr: w.listen.clone(),
            source,
        })?;
    Ok(Some(listener))
}

/// The API client, its requests counted and fed to `/ready`.
async fn build_client(admin: &Arc<AdminState>) -> Result<kube::Client, AgentError> {
    let counted = api_metrics::CountRequests(Arc::new(ApiHealth(admin.clone())));
    let config = kube::Config::infer()
        .await
        .map_err(|e| AgentError::Config(e.to_string()))?;
    client::build(config, &counted)
}

/// Starts the watch stores and waits until they have synced.
async fn start_watches(
    cfg: &AgentConfig,
    client: &kube::Client,
    admin: &Arc<AdminState>,
) -> Result<world::World, AgentError> {
    let observer: world::Observer = Arc::new(WatchHealth(admin.clone()));
    let world = world::World::start(
        client.clone(),
        &cfg.node,
        &cfg.namespace,
        &cfg.configmap,
        observer,
    );
    tracing::info!(node = %cfg.node, dry_run = cfg.dry_run, listen = %cfg.listen, "waiting for watches to sync");
    world
        .wait_ready()
        .await
        .map_err(|_| AgentError::StoreDropped)?;
    admin.set_synced(true);
    Ok(world)
}

/// The claim admission webhook on `listener`, if any, reading the synced stores of `world`.
fn serve_webhook(
    cfg: &AgentConfig,
    listener: Option<tokio::net::TcpListener>,
    world: &world::World,
    client: &kube::Client,
    admin: &AdminState,
) -> Result<Server<()>, AgentError> {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let registry = admin.metrics().registry();
    let task = spawn_webhook(cfg, listener, world, client, registry, stopped)?;
    Ok(Server { stop, task })
}

/// The scanner and what it acts through: Events, notifications and the reclaimer.
fn build_scanner(
    cfg: &AgentConfig,
    client: kube::Client,
    admin: &Arc<AdminState>,
    shutdown: &shutdown::Shutdown,
) -> Result<scan::Scanner, AgentError> {
    let events =
        crate::events::Events::new(crate::events::Publisher::new(client.clone(), &cfg.node));
    let reclaimer =
        crate::reclaim::Reclaimer::new(client.clone(), &cfg.node, cfg.dry_run, cfg.api_timeout)?;
    (reclaimer.metrics().register(admin.metrics().registry()))
        .map_err(crate::reclaim::ReclaimError::Metrics)?;
    let notifier = start_notifier(cfg, &client, admin);
    Ok(scan::Scanner::new(
        cfg.clone(),
        client,
        (events, notifier),
        admin.clone(),
        shutdown.clone(),
        reclaimer,
    ))
}

/// The reconcile loop, with the fast measurement loop beside it, until SIGTERM; returns no
/// later than when it arrived (the start of the last scan), so the grace left is never
/// overestimated.
async fn reconcile(
    cfg: &AgentConfig,
    admin: &AdminState,
    shutdown: &shutdown::Shutdown,
    scanner: &mut scan::Scanner,
    world: &mut world::World,
) -> std::time::Instant {
    let mut ticker = tokio::time::interval(cfg.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (watchlist, prober) = scanner.watchlist();
    let measuring = cfg
        .measure_interval
        .map(|every| tokio::spawn(watchlist.clone().run(prober, every)));
    tracing::info!(node = %cfg.node, interval = ?cfg.interval, measure = ?cfg.measure_interval, "agent started");
    admin.loop_started();
    let mut signalled = std::time::Instant::now();
    loop {
        let crossed = tokio::select! {
            _ = ticker.tick() => None,
            // Volumes crossed their triggers between scans: decide on them now, not at the next
            // tick.
            _ = watchlist.crossed() => Some(watchlist.take_crossed()),
            _ = shutdown.wait() => break,
        };
        if crossed.as_ref().is_some_and(Vec::is_empty) {
            // Already decided on by the full scan that ran since they woke the loop.
            continue;
        }
        let started = std::time::Instant::now();
        signalled = started;
        let turn = turn(scanner, world, crossed);
        if let Some(at) = finish_turn(cfg, admin, shutdown, turn, started).await {
            signalled = at;
            break;
        }
        heap::release_free();
    }
    if let Some(task) = measuring {
        task.abort();
    }
    signalled
}

/// Records what `turn` found; when SIGTERM arrives first, lets it finish within the grace and
/// returns when the signal came.
async fn finish_turn(
    cfg: &AgentConfig,
    admin: &AdminState,
    shutdown: &shutdown::Shutdown,
    turn: impl std::future::Future<Output = Result<Turn, crate::probe::ProbeError>>,
    started: std::time::Instant,
) -> Option<std::time::Instant> {
    let mut turn = std::pin::pin!(turn);
    tokio::select! {
        result = &mut turn => match result {
            Ok(Turn::Scanned(reports)) => admin.scan_finished(reports, started.elapsed(), jiff::Timestamp::now()),
            Ok(Turn::Crossed(reports)) => admin.volumes_decided(reports),
            Ok(Turn::Nothing) => {}
            Err(e) => {
                tracing::warn!(error = %e, root = %cfg.kubelet_root.display(), "scan could not measure the node; keeping the last good values");
                admin.scan_failed(started.elapsed(), jiff::Timestamp::now());
            }
        },
        _ = shutdown.wait() => {
            let signalled = std::time::Instant::now();
            // The scan starts no new action now; what is in flight may finish, bounded.
            if tokio::time::timeout(cfg.shutdown_grace, &mut turn).await.is_err() {
                tracing::warn!(grace = ?cfg.shutdown_grace, "scan still running at the end of the shutdown grace");
            }
            return Some(signalled);
        }
    }
    None
}
