//! WAL facts read over SQL. Every query needs only the `pg_monitor` role.

use std::path::Path;
use std::time::Duration;

use jiff::Timestamp;
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::{Client, Config, NoTls, Row};

use super::guard::Guarded;
use super::lsn::Lsn;
use super::tls::{CaError, EncryptOnlyTls};

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    #[error("connection string: {0}")]
    Dsn(String),
    #[error("password file {path}: {source}")]
    PasswordFile {
        path: String,
        source: std::io::Error,
    },
    #[error("CA file {path}: {source}")]
    CaFile {
        path: String,
        source: std::io::Error,
    },
    #[error("password file {path}: empty")]
    EmptyPassword { path: String },
    #[error("TLS setup: {0}")]
    Tls(#[from] rustls::Error),
    #[error("{0}")]
    Ca(#[from] CaError),
    #[error("connecting to {target}: {detail}")]
    Connect { target: String, detail: String },
    #[error("connecting to {target}: no answer within {secs}s")]
    Timeout { target: String, secs: u64 },
    #[error("query {what}: {detail}")]
    Query { what: &'static str, detail: String },
    #[error("query {what}: column {column}: {detail}")]
    Column {
        what: &'static str,
        column: &'static str,
        detail: String,
    },
}

/// A server to ask. `Debug` shows no password (tokio-postgres redacts it).
#[derive(Debug, Clone)]
pub struct SqlTarget {
    config: Config,
    timeout: Duration,
    /// Set for `verify-ca`: certificates must chain to this CA.
    verified_tls: Option<VerifiedTls>,
}

/// `Debug` for the TLS connector without its key material.
#[derive(Clone)]
struct VerifiedTls(EncryptOnlyTls);

impl std::fmt::Debug for VerifiedTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("verify-ca")
    }
}

impl SqlTarget {
    /// A libpq-style connection string (`key=value ...` or `postgres://`); `sslmode` is
    /// `disable`, `prefer` (the default) or `require`.
    pub fn from_dsn(dsn: &str) -> Result<Self, SqlError> {
        let mut config: Config = dsn.parse().map_err(|e| SqlError::Dsn(chain(&e)))?;
        if config.get_application_name().is_none() {
            config.application_name("headroom");
        }
        let mut target = Self {
            config,
            timeout: DEFAULT_TIMEOUT,
            verified_tls: None,
        };
        let timeout = target.config.get_connect_timeout().copied();
        target.set_timeout(timeout.unwrap_or(DEFAULT_TIMEOUT));
        Ok(target)
    }

    /// Connect and statement timeout (both: a hung server must not hang the agent).
    pub fn set_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.timeout = timeout;
        self.config.connect_timeout(timeout);
        self
    }

    pub fn set_ssl_mode(&mut self, mode: SslMode) -> &mut Self {
        self.config.ssl_mode(mode);
        self
    }

    /// libpq's `verify-ca`: TLS required, the chain checked against the CA in `pem`, the name
    /// not (pod IPs are not in certificates).
    pub fn set_verify_ca(&mut self, path: &str, pem: &[u8]) -> Result<&mut Self, SqlError> {
        self.verified_tls = Some(VerifiedTls(EncryptOnlyTls::verify_ca(path, pem)?));
        self.config.ssl_mode(SslMode::Require);
        Ok(self)
    }

    pub fn set_password(&mut self, password: impl AsRef<[u8]>) -> &mut Self {
        self.config.password(password);
        self
    }

    /// Reads the password from a mounted file (a Kubernetes Secret); one trailing newline is
    /// dropped. The password itself never appears in an error.
    pub fn set_password_file(&mut self, path: &Path) -> Result<&mut Self, SqlError> {
        let shown = path.display().to_string();
        let raw = std::fs::read(path).map_err(|source| SqlError::PasswordFile {
            path: shown.clone(),
            source,
        })?;
        let trimmed = raw.strip_suffix(b"\n").unwrap_or(&raw);
        let trimmed = trimmed.strip_suffix(b"\r").unwrap_or(trimmed);
        if trimmed.is_empty() {
            return Err(SqlError::EmptyPassword { path: shown });
        }
        Ok(self.set_password(trimmed))
    }

    /// Every host is a Unix socket directory (a host starting with `/`).
    pub fn unix_only(&self) -> bool {
        use tokio_postgres::config::Host;
        let hosts = self.config.get_hosts();
        !hosts.is_empty() && hosts.iter().all(|h| matches!(h, Host::Unix(_)))
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `user@host:port` for messages.
    pub fn describe(&self) -> String {
        let user = self.config.get_user().unwrap_or("?");
        let host = match self.config.get_hosts().first() {
            Some(Host::Tcp(h)) => h.clone(),
            Some(Host::Unix(p)) => p.display().to_string(),
            None => "localhost".to_string(),
        };
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        format!("{user}@{host}:{port}")
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ArchiverStats {
    pub archived_count: u64,
    pub last_archived_time: Option<Timestamp>,
    pub failed_count: u64,
    pub last_failed_time: Option<Timestamp>,
    pub last_failed_wal: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotInfo {
    pub name: String,
    pub slot_type: String,
    pub active: bool,
    pub wal_status: Option<String>,
    /// WAL held back, against [`SqlFacts::position`]; `None` when the slot reserves no WAL.
    pub retained_bytes: Option<u64>,
    /// `None` (null) when the slot reserves no WAL.
    pub restart_lsn: Option<Lsn>,
}

/// What the server says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SqlFacts {
    pub archive_mode: String,
    pub archive_command: String,
    pub archive_library: String,
    pub in_recovery: bool,
    pub archiver: ArchiverStats,
    pub slots: Vec<SlotInfo>,
    /// What slots' retention is measured against: the current LSN (primary) or the last
    /// received, else replayed, LSN (standby).
    pub position: Option<Lsn>,
    /// `.ready` files, from `pg_ls_archive_statusdir()`: the backlog when the volume is not local.
    pub ready_files: u64,
    pub oldest_ready: Option<Timestamp>,
    /// Bytes in `pg_wal`, from `pg_ls_waldir()`.
    pub wal_bytes: u64,
}

/// Connects, asks, disconnects; the whole exchange is bounded by the target's timeout.
pub async fn query(target: &SqlTarget) -> Result<SqlFacts, SqlError> {
    let secs = target.timeout.as_secs().max(1);
    match tokio::time::timeout(target.timeout, query_unbounded(target)).await {
        Ok(result) => result,
        Err(_) => Err(SqlError::Timeout {
            target: target.describe(),
            secs,
        }),
    }
}

async fn query_unbounded(target: &SqlTarget) -> Result<SqlFacts, SqlError> {
    let connect_err = |detail: String| SqlError::Connect {
        target: target.describe(),
        detail,
    };
    // As libpq: no TLS over a Unix socket (the server would refuse it, and a socket path is no
    // name to check a certificate against), whatever sslmode says. The socket is guarded too.
    if let Some(path) = unix_socket(&target.config) {
        let socket = tokio::net::UnixStream::connect(&path)
            .await
            .map_err(|e| connect_err(format!("{}: {e}", path.display())))?;
        let mut config = target.config.clone();
        config.ssl_mode(SslMode::Disable);
        let (client, connection) = config
            .connect_raw(Guarded::from_startup(socket), NoTls)
            .await
            .map_err(|e| connect_err(chain(&e)))?;
        return ask_on(client, tokio::spawn(connection), target).await;
    }
    let tls = match &target.verified_tls {
        Some(v) => v.0.clone(),
        None => EncryptOnlyTls::new()?,
    };
    // The socket is opened here rather than by tokio-postgres so that it can be guarded: no
    // password leaves for a server that asks for it in the clear or as MD5 (see `guard`).
    let (host, port) = tcp_address(&target.config).map_err(connect_err)?;
    let socket = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| connect_err(e.to_string()))?;
    let _ = socket.set_nodelay(true);
    let stream = match target.config.get_ssl_mode() {
        SslMode::Disable => Guarded::from_startup(socket),
        _ => Guarded::after_ssl_request(socket),
    };
    let mut make = tls;
    let connector =
        tokio_postgres::tls::MakeTlsConnect::<Guarded<tokio::net::TcpStream>>::make_tls_connect(
            &mut make, &host,
        )
        .map_err(|e| connect_err(e.to_string()))?;
    let (client, connection) = target
        .config
        .connect_raw(stream, connector)
        .await
        .map_err(|e| connect_err(chain(&e)))?;
    ask_on(client, tokio::spawn(connection), target).await
}

async fn ask_on<E>(
    client: Client,
    conn: tokio::task::JoinHandle<Result<(), E>>,
    target: &SqlTarget,
) -> Result<SqlFacts, SqlError> {
    let result = ask(&client, target.timeout).await;
    drop(client);
    conn.abort();
    result
}

/// The socket file of a target whose hosts are all socket directories (`host=/run/postgresql`),
/// as libpq names it: `<dir>/.s.PGSQL.<port>`.
fn unix_socket(config: &Config) -> Option<std::path::PathBuf> {
    let hosts = config.get_hosts();
    let dir = match hosts {
        [Host::Unix(dir), ..] if hosts.iter().all(|h| matches!(h, Host::Unix(_))) => dir,
        _ => return None,
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    Some(dir.join(format!(".s.PGSQL.{port}")))
}

/// The one TCP host and port a target names (Unix sockets are for the CLI on the same host and
/// have no place in the agent, which reaches pods by IP).
fn tcp_address(config: &Config) -> Result<(String, u16), String> {
    let host = match config.get_hosts() {
        [Host::Tcp(h)] => h.clone(),
        [] => "localhost".to_string(),
        [Host::Unix(p)] => return Err(format!("{}: Unix sockets are not supported", p.display())),
        _ => return Err("name exactly one host".into()),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    Ok((host, port))
}

fn q(what: &'static str) -> impl FnOnce(tokio_postgres::Error) -> SqlError {
    move |e| SqlError::Query {
        what,
        detail: chain(&e),
    }
}

/// tokio-postgres's `Display` says only "db error" or "error connecting to server": the server's
/// message (or the socket error) is in the source chain.
fn chain(e: &tokio_postgres::Error) -> String {
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

async fn ask(client: &Client, timeout: Duration) -> Result<SqlFacts, SqlError> {
    let ms = timeout.as_millis().max(1);
    client
        .batch_execute(&format!(
            "SET statement_timeout = {ms}; SET default_transaction_read_only = on"
        ))
        .await
        .map_err(q("SET statement_timeout"))?;

    // current_setting(.., true): archive_library is NULL before PostgreSQL 15.
    let what = "settings";
    let row = client
        .query_one(
            "SELECT current_setting('archive_mode'), \
                    coalesce(current_setting('archive_command', true), ''), \
                    coalesce(current_setting('archive_library', true), ''), \
                    pg_is_in_recovery()",
            &[],
        )
        .await
        .map_err(q(what))?;
    let mut facts = SqlFacts {
        archive_mode: get(&row, what, 0, "archive_mode")?,
        archive_command: get(&row, what, 1, "archive_command")?,
        archive_library: get(&row, what, 2, "archive_library")?,
        in_recovery: get(&row, what, 3, "pg_is_in_recovery")?,
        ..Default::default()
    };

    facts.archiver = archiver(client).await?;

    let what = "pg_ls_archive_statusdir";
    let row = client
        .query_one(
            "SELECT count(*), extract(epoch FROM min(modification))::float8 \
             FROM pg_ls_archive_statusdir() WHERE name LIKE '%.ready'",
            &[],
        )
        .await
        .map_err(q(what))?;
    facts.ready_files = count(get(&row, what, 0, "count")?);
    facts.oldest_ready = epoch(what, "modification", get(&row, what, 1, "modification")?)?;

    let what = "pg_ls_waldir";
    let row = client
        .query_one(
            "SELECT coalesce(sum(size), 0)::int8 FROM pg_ls_waldir()",
            &[],
        )
        .await
        .map_err(q(what))?;
    facts.wal_bytes = count(get(&row, what, 0, "size")?);

    (facts.position, facts.slots) = slots(client, facts.in_recovery).await?;
    Ok(facts)
}

async fn archiver(client: &Client) -> Result<ArchiverStats, SqlError> {
    let what = "pg_stat_archiver";
    let row = client
        .query_one(
            "SELECT archived_count, extract(epoch FROM last_archived_time)::float8, \
                    failed_count, extract(epoch FROM last_failed_time)::float8, last_failed_wal \
             FROM pg_stat_archiver",
            &[],
        )
        .await
        .map_err(q(what))?;
    Ok(ArchiverStats {
        archived_count: count(get(&row, what, 0, "archived_count")?),
        last_archived_time: epoch(
            what,
            "last_archived_time",
            get(&row, what, 1, "last_archived_time")?,
        )?,
        failed_count: count(get(&row, what, 2, "failed_count")?),
        last_failed_time: epoch(
            what,
            "last_failed_time",
            get(&row, what, 3, "last_failed_time")?,
        )?,
        last_failed_wal: get(&row, what, 4, "last_failed_wal")?,
    })
}

async fn slots(
    client: &Client,
    in_recovery: bool,
) -> Result<(Option<Lsn>, Vec<SlotInfo>), SqlError> {
    // pg_current_wal_lsn() raises an error during recovery: a standby measures against what it
    // has received (or replayed, when it restores from an archive rather than streaming).
    let reference = if in_recovery {
        "coalesce(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())"
    } else {
        "pg_current_wal_lsn()"
    };
    let what = "WAL position";
    let row = client
        .query_one(&format!("SELECT ({reference})::text"), &[])
        .await
        .map_err(q(what))?;
    let position = lsn(what, "position", get(&row, what, 0, "position")?)?;
    let what = "pg_replication_slots";
    let rows = client
        .query(
            "SELECT slot_name::text, slot_type, active, wal_status, restart_lsn::text \
             FROM pg_replication_slots ORDER BY slot_name",
            &[],
        )
        .await
        .map_err(q(what))?;
    let mut slots = Vec::new();
    for row in &rows {
        let restart_lsn = lsn(what, "restart_lsn", get(row, what, 4, "restart_lsn")?)?;
        slots.push(SlotInfo {
            name: get(row, what, 0, "slot_name")?,
            slot_type: get(row, what, 1, "slot_type")?,
            active: get(row, what, 2, "active")?,
            wal_status: get(row, what, 3, "wal_status")?,
            // Against the position read above, which is printed beside it.
            retained_bytes: position.zip(restart_lsn).map(|(p, r)| p.since(r)),
            restart_lsn,
        });
    }
    Ok((position, slots))
}

/// A `pg_lsn` read as text (the text form needs no binary decoder); null stays `None`.
fn lsn(
    what: &'static str,
    column: &'static str,
    text: Option<String>,
) -> Result<Option<Lsn>, SqlError> {
    text.map(|t| t.parse::<Lsn>())
        .transpose()
        .map_err(|e| SqlError::Column {
            what,
            column,
            detail: e.to_string(),
        })
}

fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    what: &'static str,
    idx: usize,
    column: &'static str,
) -> Result<T, SqlError> {
    row.try_get(idx).map_err(|e| SqlError::Column {
        what,
        column,
        detail: e.to_string(),
    })
}

fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

fn epoch(
    what: &'static str,
    column: &'static str,
    secs: Option<f64>,
) -> Result<Option<Timestamp>, SqlError> {
    let Some(secs) = secs else { return Ok(None) };
    let micros = (secs * 1_000_000.0).round() as i64;
    Timestamp::from_microsecond(micros)
        .map(Some)
        .map_err(|e| SqlError::Column {
            what,
            column,
            detail: e.to_string(),
        })
}
