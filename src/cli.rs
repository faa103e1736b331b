//! Command-line definitions (clap derive). Every agent flag also reads an environment variable.
//! Run as `kubectl-headroom`, the same commands answer as `kubectl headroom` ([`plugin`]).

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

pub mod plugin;

#[derive(Debug, Parser)]
#[command(
    name = "headroom",
    version,
    about = "Grow Kubernetes PVCs before they fill, without masking WAL faults"
)]
pub struct Cli {
    /// Log lines on stderr as text, or as one JSON object each (for log pipelines).
    #[arg(long, global = true, env = "HEADROOM_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Format {
    #[default]
    Table,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the node agent (what the DaemonSet runs): measure, decide and act for this node's volumes.
    Agent(Box<AgentArgs>),
    /// Validate policy YAML files, files of the ConfigMap's selector sections (a YAML list), or
    /// the central ConfigMap's manifest (every data key): warnings print and exit 0, errors print
    /// and exit 1. With --context or --kubeconfig, selector sections that no claim on the
    /// cluster reaches are warnings too.
    Validate(ValidateArgs),
    /// Replay a growth trace through the decision engine (a dry run of a policy).
    Simulate(SimulateArgs),
    /// Measure filesystems: this host's, a kubelet root's PVC volumes, or given mount points.
    Scan(ScanArgs),
    /// Show the WAL archive and replication-slot health of a Postgres data directory or server.
    WalHealth(WalHealthArgs),
    /// Show every claim's headroom status and last action, read from its annotations (one LIST
    /// with your kubeconfig, like kubectl); with --policy, each claim's effective policy and
    /// where every key came from.
    Status(StatusArgs),
    /// Approve the grow headroom recommends for one claim (`enforcement: approve`): reads the
    /// claim's recommendation, sets `headroom.dev/approve` to its id, and prints what will happen.
    Approve(ApproveArgs),
    /// Trim (FITRIM, like fstrim) one mounted filesystem and print what it reclaimed. Needs CAP_SYS_ADMIN.
    Trim(TrimArgs),
}

#[derive(Debug, clap::Args)]
pub struct TrimArgs {
    /// The mount point of the filesystem to trim.
    pub path: PathBuf,
    /// Seconds to wait for the trim (a hung mount never answers; csi-addons' default is 10m).
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
}

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// Policy files (YAML), files of selector sections (a list, or named like `selectors.yaml`),
    /// or ConfigMap or Namespace manifests.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// The claim's size (a quantity), for the checks that need it: a limit at or below it, a
    /// minAvailable it could not meet even empty, an emergency line near it.
    #[arg(long)]
    pub size: Option<String>,
    /// Also check a ConfigMap's selector sections against the claims of the cluster this
    /// kubeconfig reaches (one LIST in every namespace): a section no claim reaches is a warning.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// As --kubeconfig, with this context of the default kubeconfig (or of --kubeconfig's).
    #[arg(long)]
    pub context: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// Policy YAML file.
    #[arg(long)]
    pub policy: PathBuf,
    /// CSV trace: `seconds,used_bytes[,inodes_used,inodes_total,archive_healthy,pending_wal_files,slot_retention_bytes]`.
    #[arg(long)]
    pub trace: PathBuf,
    /// Starting size of the volume (a quantity).
    #[arg(long)]
    pub capacity: String,
    /// Evaluation interval.
    #[arg(long, default_value = "10s")]
    pub interval: String,
    /// Time from a Grow to the filesystem having the new size; the fill goes on meanwhile.
    #[arg(long, default_value = "60s")]
    pub resize_delay: String,
    /// Replay twice, threshold only and with trigger.predictive, and show the peak usage of each.
    #[arg(long)]
    pub compare_predictive: bool,
    /// The claim's CSI driver (e.g. ebs.csi.aws.com). Its known rule (a gap between resizes, or
    /// so many per rolling window, each after the last one landed) is what
    /// `modificationInterval: auto` means, and the simulated storage refuses a resize that breaks
    /// it (the report counts them).
    #[arg(long)]
    pub driver: Option<String>,
    /// Wall-clock time of the trace's first row (RFC 3339).
    #[arg(long, default_value = "2026-01-04T00:00:00Z")]
    pub start: String,
    #[arg(long, value_enum, default_value_t = RoleArg::Other)]
    pub role: RoleArg,
    /// The data volume also holds WAL.
    #[arg(long)]
    pub wal_on_data: bool,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RoleArg {
    Data,
    Wal,
    Tablespace,
    Other,
}

#[derive(Debug, clap::Args)]
pub struct ScanArgs {
    /// Kubelet root to walk for PVC volumes.
    #[arg(long, env = "HEADROOM_KUBELET_ROOT")]
    pub kubelet_root: Option<PathBuf>,
    /// Mount points to measure.
    pub paths: Vec<PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Debug, clap::Args)]
pub struct WalHealthArgs {
    /// A data directory, a volume mount holding one, or a WAL volume mount.
    #[arg(long)]
    pub pgdata: Option<PathBuf>,
    /// libpq-style connection string (key=value or postgres:// URL).
    #[arg(long)]
    pub dsn: Option<String>,
    /// File holding the password (never logged).
    #[arg(long)]
    pub password_file: Option<PathBuf>,
    /// TLS: overrides the connection string's sslmode (`require` encrypts without verifying
    /// the certificate, as libpq does).
    #[arg(long, value_enum)]
    pub sslmode: Option<SslModeArg>,
    /// libpq's `verify-ca`: TLS, with the server's certificate chained to this CA (PEM); the
    /// name is not checked.
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// Seconds allowed for connecting and for each query.
    #[arg(long, default_value_t = 5)]
    pub connect_timeout: u64,
    /// `.ready` backlog above which archiving counts as unhealthy (policy `maxPendingWALFiles`).
    #[arg(long, default_value_t = crate::policy::defaults::MAX_PENDING_WAL_FILES)]
    pub max_pending_wal_files: u64,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SslModeArg {
    Disable,
    Prefer,
    Require,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Only this claim (in the namespace given or the context's).
    pub name: Option<String>,
    /// Show the effective policy of each claim, key by key, and where each key came from (the
    /// claim, its StorageClass, their resize.topolvm.io annotations, the ConfigMap, the default).
    #[arg(long)]
    pub policy: bool,
    /// Namespace of the central policy ConfigMap (--policy).
    #[arg(long, default_value = "headroom")]
    pub configmap_namespace: String,
    /// Name of the central policy ConfigMap (--policy).
    #[arg(long, default_value = "headroom")]
    pub configmap: String,
    /// Namespace to list (default: the kubeconfig context's namespace).
    #[arg(short = 'n', long, conflicts_with = "all_namespaces")]
    pub namespace: Option<String>,
    /// List claims in every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Label selector, as kubectl's `-l` (e.g. `cnpg.io/cluster=pg-main`).
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current context).
    #[arg(long)]
    pub context: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct ApproveArgs {
    /// The claim whose recommendation to approve.
    pub name: String,
    /// Its namespace (default: the kubeconfig context's namespace).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current context).
    #[arg(long)]
    pub context: Option<String>,
}

#[derive(Debug, Clone, clap::Args)]
pub struct AgentArgs {
    /// This node's name (the downward API's spec.nodeName); the agent refuses to start without it.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: String,
    /// Namespace of the agent and its ConfigMap.
    #[arg(long, env = "POD_NAMESPACE", default_value = "headroom")]
    pub namespace: String,
    /// Name of the central policy ConfigMap in that namespace.
    #[arg(long, env = "HEADROOM_CONFIGMAP", default_value = "headroom")]
    pub configmap: String,
    /// The kubelet root, as mounted into the agent.
    #[arg(
        long,
        env = "HEADROOM_KUBELET_ROOT",
        default_value = "/var/lib/kubelet"
    )]
    pub kubelet_root: PathBuf,
    /// This node's IP (downward API `status.hostIP`): the kubelet's stats come from
    /// https://HOST_IP:PORT/stats/summary, needing only `nodes/stats get`. Unset: statfs only.
    #[arg(long, env = "HOST_IP")]
    pub host_ip: Option<String>,
    /// The kubelet's port.
    #[arg(long, env = "HEADROOM_KUBELET_PORT", default_value_t = 10250)]
    pub kubelet_port: u16,
    /// CA bundle the kubelet's serving certificate must chain to (the cluster CA when kubelets
    /// use serverTLSBootstrap; otherwise the kubelet's own CA, see the README).
    #[arg(
        long,
        env = "HEADROOM_KUBELET_CA",
        default_value = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
    )]
    pub kubelet_ca: PathBuf,
    /// Bearer token for the kubelet (re-read at every request).
    #[arg(
        long,
        env = "HEADROOM_KUBELET_TOKEN_FILE",
        default_value = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    )]
    pub kubelet_token_file: PathBuf,
    /// Time between scans.
    #[arg(long, env = "HEADROOM_INTERVAL", default_value = "10s")]
    pub interval: String,
    /// Decide and report, never patch a claim.
    #[arg(long, env = "HEADROOM_DRY_RUN")]
    pub dry_run: bool,
    /// A resize in flight longer than this is reported as failed (or as waiting for the pod:
    /// `awaiting_remount`, `awaiting_detach`).
    #[arg(long, env = "HEADROOM_RESIZE_TIMEOUT", default_value = "10m")]
    pub resize_timeout: String,
    /// Bound on each API request the scan makes (GET, PATCH); watches are not bounded by it.
    #[arg(long, env = "HEADROOM_API_TIMEOUT", default_value = "10s")]
    pub api_timeout: String,
    /// At most this many watches of single claims and of their peers' label selectors; past it,
    /// the namespaces with the most claims here are watched whole instead. Each watch is a stream
    /// on the agent's one HTTP/2 connection, and the API server caps streams per connection.
    #[arg(long, env = "HEADROOM_CLAIM_WATCHES", default_value_t = 100,
          value_parser = clap::value_parser!(u16).range(0..=200))]
    pub claim_watches: u16,
    /// Bound on each blocking probe call (the mount table and kubelet directory walk, each
    /// volume's statfs, its WAL directory read). A volume that does not answer in time is
    /// reported not measured (probe_timeout) and is not called again until the stuck call returns.
    #[arg(long, env = "HEADROOM_PROBE_TIMEOUT", default_value = "5s")]
    pub probe_timeout: String,
    /// Between scans, re-statfs the volumes the last scan found this often (four times as often
    /// near their trigger) and decide at once when one crosses it; `0s` turns this off. 900ms,
    /// not 1s: the PATCH follows the look by some milliseconds, and a fill is to be acted on
    /// within a second.
    #[arg(long, env = "HEADROOM_MEASURE_INTERVAL", default_value = "900ms")]
    pub measure_interval: String,
    /// Address of the metrics and health endpoint (/metrics, /live, /ready, /volumes).
    #[arg(long, env = "HEADROOM_LISTEN", default_value = crate::http::DEFAULT_LISTEN)]
    pub listen: String,
    /// After SIGTERM, how long an in-flight scan (and its patch) may take; keep it below the pod's
    /// terminationGracePeriodSeconds.
    #[arg(long, env = "HEADROOM_SHUTDOWN_GRACE", default_value = "20s")]
    pub shutdown_grace: String,
    /// A restored or cloned peer claim still Pending this long after its creation, below its
    /// group's size, gets a `RestoreTooSmall` Warning Event naming the fix.
    #[arg(long, env = "HEADROOM_RESTORE_PENDING_AFTER", default_value = "1m")]
    pub restore_pending_after: String,
    /// Forward proxy for notification sinks reached over https://, as http://[user:pass@]host:port
    /// (a CONNECT tunnel); in a pod the API server and the kubelet are reached directly.
    #[arg(long, env = "HTTPS_PROXY", hide_env_values = true)]
    pub https_proxy: Option<String>,
    /// Forward proxy for notification sinks reached over http://.
    #[arg(long, env = "HTTP_PROXY", hide_env_values = true)]
    pub http_proxy: Option<String>,
    /// Sink hosts reached without the proxy, comma-separated: names (with their subdomains),
    /// .domains (subdomains only), addresses, networks (10.0.0.0/8), host:port, or *.
    #[arg(long, env = "NO_PROXY")]
    pub no_proxy: Option<String>,
    /// Serve the claim admission webhook (HTTPS) on this address, e.g. 0.0.0.0:9443; unset: off.
    #[arg(long, env = "HEADROOM_WEBHOOK_LISTEN")]
    pub webhook_listen: Option<String>,
    /// The webhook's Service in the agent's namespace: the serving certificate is for
    /// <service>.<namespace>.svc.
    #[arg(
        long,
        env = "HEADROOM_WEBHOOK_SERVICE",
        default_value = "headroom-webhook"
    )]
    pub webhook_service: String,
    /// More names for the serving certificate (DNS names or IP addresses, comma-separated), for
    /// a webhook configured with a URL.
    #[arg(long, env = "HEADROOM_WEBHOOK_EXTRA_NAMES", value_delimiter = ',')]
    pub webhook_extra_names: Vec<String>,
    /// Secret in the agent's namespace holding the webhook's CA and serving certificate; the
    /// first agent that finds it missing creates it.
    #[arg(
        long,
        env = "HEADROOM_WEBHOOK_SECRET",
        default_value = "headroom-webhook-tls"
    )]
    pub webhook_secret: String,
    /// The MutatingWebhookConfiguration whose caBundle the agents keep; empty: left alone.
    #[arg(
        long,
        env = "HEADROOM_WEBHOOK_CONFIGURATION",
        default_value = "headroom"
    )]
    pub webhook_configuration: String,
    /// A serving certificate of your own (PEM, with --webhook-key-file): no Secret is read or
    /// created.
    #[arg(
        long,
        env = "HEADROOM_WEBHOOK_CERT_FILE",
        requires = "webhook_key_file"
    )]
    pub webhook_cert_file: Option<PathBuf>,
    /// The key of --webhook-cert-file (PEM).
    #[arg(
        long,
        env = "HEADROOM_WEBHOOK_KEY_FILE",
        requires = "webhook_cert_file"
    )]
    pub webhook_key_file: Option<PathBuf>,
    /// With your own certificate: the CA (PEM) to set as caBundle; unset: caBundle is yours.
    #[arg(long, env = "HEADROOM_WEBHOOK_CA_FILE", requires = "webhook_cert_file")]
    pub webhook_ca_file: Option<PathBuf>,
    /// How long the certificates the agents make for the webhook are valid (e.g. 90d, 9s); each
    /// is renewed at two thirds of it, with a new CA, without a restart.
    #[arg(long, env = "HEADROOM_WEBHOOK_CERT_VALIDITY", default_value = "90d")]
    pub webhook_cert_validity: String,
    /// Bound on one review, reads included; keep it below the configuration's timeoutSeconds.
    #[arg(long, env = "HEADROOM_WEBHOOK_DEADLINE", default_value = "1500ms")]
    pub webhook_deadline: String,
}
