//! A real PostgreSQL for tests: initdb in a temp dir, own port on 127.0.0.1 and own socket dir,
//! run as the `postgres` OS user when the tests run as root; stopped and removed on drop.
//! Debian's server (`require_postgres`) or any major 13-18 (`require_major`): those npm builds
//! find their lib/ through an `$ORIGIN/../lib` runpath, so they need no LD_LIBRARY_PATH.
#![allow(dead_code)]

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The one line README tells users to run; every test connects as this role.
pub const MONITOR_ROLE_SQL: &str =
    "CREATE ROLE headroom LOGIN PASSWORD 'monitor-secret' IN ROLE pg_monitor";
pub const MONITOR_PASSWORD: &str = "monitor-secret";

/// Postgres server binaries, or `None` with a printed reason; panics under `CI`.
pub fn require_postgres() -> Option<PathBuf> {
    let found = fs::read_dir("/usr/lib/postgresql")
        .ok()
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("initdb").is_file() && b.join("pg_ctl").is_file())
        .max();
    if found.is_none() {
        let why = "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin (Debian package `postgresql`; ./scripts/test.sh installs it)";
        if std::env::var_os("CI").is_some() {
            panic!("CI is set and Postgres tests cannot run: {why}");
        }
        eprintln!("skipping Postgres test: {why}");
    }
    found
}

/// Every PostgreSQL major headroom supports: `require_major` finds each under `HEADROOM_PG_VERSIONS`.
pub const MAJORS: [u32; 6] = [13, 14, 15, 16, 17, 18];

/// The server binaries of one major from `HEADROOM_PG_VERSIONS` (the cache root that
/// scripts/postgres-versions.sh prints: `<root>/<major>/bin`), or `None` with a printed reason;
/// panics under `CI`.
pub fn require_major(major: u32) -> Option<PathBuf> {
    let why = match std::env::var_os("HEADROOM_PG_VERSIONS") {
        None => "HEADROOM_PG_VERSIONS is not set (./scripts/test.sh sets it to what scripts/postgres-versions.sh prints)".to_string(),
        Some(root) => {
            let bin = Path::new(&root).join(major.to_string()).join("bin");
            let missing: Vec<&str> = ["initdb", "pg_ctl", "postgres"]
                .into_iter()
                .filter(|t| !bin.join(t).is_file())
                .collect();
            if missing.is_empty() {
                return Some(bin);
            }
            format!(
                "no {} in {} (scripts/postgres-versions.sh installs PostgreSQL {major})",
                missing.join(", "),
                bin.display()
            )
        }
    };
    if std::env::var_os("CI").is_some() {
        panic!("CI is set and the PostgreSQL {major} test cannot run: {why}");
    }
    eprintln!("skipping PostgreSQL {major} test: {why}");
    None
}

#[derive(Debug, Clone)]
pub struct Options {
    pub archive_mode: &'static str,
    /// `{archive}` is replaced by the cluster's archive directory.
    pub archive_command: &'static str,
    /// Serve TLS (self-signed, made with the openssl CLI) and refuse plain TCP connections.
    pub tls_only: bool,
}

impl Options {
    pub fn archiving(command: &'static str) -> Self {
        Self {
            archive_mode: "on",
            archive_command: command,
            tls_only: false,
        }
    }
}

pub struct Cluster {
    bin: PathBuf,
    opts: Options,
    extra: Vec<String>,
    owner: Option<(nix::unistd::Uid, nix::unistd::Gid)>,
    pub data: PathBuf,
    pub archive: PathBuf,
    pub port: u16,
    running: bool,
    dir: TempDir,
}

impl Cluster {
    pub fn start(bin: &Path, opts: &Options) -> Cluster {
        Self::start_in(bin, opts, &std::env::temp_dir())
    }

    /// A cluster whose directory (data, archive, logs) lives under `parent`, e.g. a volume's mount.
    pub fn start_in(bin: &Path, opts: &Options, parent: &Path) -> Cluster {
        Self::start_in_with(bin, opts, &[], parent)
    }

    /// `extra` are more postgresql.conf lines (e.g. `wal_level = logical`), written after the
    /// defaults so that they win. Not a field of `Options`: callers spell out all its fields.
    pub fn start_with(bin: &Path, opts: &Options, extra: &[&str]) -> Cluster {
        Self::start_in_with(bin, opts, extra, &std::env::temp_dir())
    }

    pub fn start_in_with(bin: &Path, opts: &Options, extra: &[&str], parent: &Path) -> Cluster {
        let mut c = Self::empty(bin, opts, extra, parent);
        let initdb = c.run(
            "initdb",
            &[
                "-D",
                c.data.to_str().unwrap(),
                "-U",
                "postgres",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        );
        assert!(
            initdb.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&initdb.stderr)
        );
        if opts.tls_only {
            c.make_certificate();
            fs::write(
                c.data.join("pg_hba.conf"),
                "local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256\n",
            )
            .unwrap();
        }
        c.launch(false);
        c
    }

    /// A cluster directory with no data directory yet, owned by the server's user.
    fn empty(bin: &Path, opts: &Options, extra: &[&str], parent: &Path) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("headroom-pg")
            .tempdir_in(parent)
            .expect("temp dir");
        let owner = if nix::unistd::geteuid().is_root() {
            let user = nix::unistd::User::from_name("postgres")
                .expect("look up user postgres")
                .expect("running as root: the `postgres` OS user must exist to run PostgreSQL");
            Some((user.uid, user.gid))
        } else {
            None
        };
        let c = Cluster {
            bin: bin.to_path_buf(),
            opts: opts.clone(),
            extra: extra.iter().map(|l| l.to_string()).collect(),
            owner,
            data: dir.path().join("data"),
            archive: dir.path().join("archive"),
            port: 0,
            running: false,
            dir,
        };
        fs::create_dir(&c.archive).expect("archive dir");
        c.chown(c.dir.path());
        c.chown(&c.archive);
        c
    }

    /// Writes the config and starts the server; `keep_port` tries the current port first, so
    /// that a restarted server stays where clients know it.
    fn launch(&mut self, keep_port: bool) {
        // A free port can be taken between probing and binding by a test running in parallel.
        for attempt in 0..3 {
            if !(keep_port && attempt == 0) {
                self.port = free_port();
            }
            self.write_config();
            let log = self.dir.path().join("server.log");
            let out = self.run(
                "pg_ctl",
                &[
                    "-D",
                    self.data.to_str().unwrap(),
                    "-l",
                    log.to_str().unwrap(),
                    "-w",
                    "-t",
                    "60",
                    "start",
                ],
            );
            if out.status.success() {
                self.running = true;
                return;
            }
            eprintln!(
                "pg_ctl start failed on port {}: {}",
                self.port,
                fs::read_to_string(&log).unwrap_or_default()
            );
        }
        panic!("PostgreSQL did not start (see the logs above)");
    }

    fn write_config(&self) {
        let opts = &self.opts;
        let command = opts
            .archive_command
            .replace("{archive}", self.archive.to_str().unwrap());
        let ssl = if opts.tls_only { "ssl = on\n" } else { "" };
        let conf = format!(
            "listen_addresses = '127.0.0.1'\nport = {}\nunix_socket_directories = '{}'\n\
             wal_level = replica\narchive_mode = {}\narchive_command = '{}'\n\
             max_wal_size = '1GB'\ncheckpoint_timeout = '1h'\nfsync = off\nsynchronous_commit = off\n\
             full_page_writes = off\nshared_buffers = '16MB'\nmax_connections = 20\n{ssl}{}",
            self.port,
            self.dir.path().display(),
            opts.archive_mode,
            command.replace('\'', "''"),
            self.extra
                .iter()
                .map(|l| format!("{l}\n"))
                .collect::<String>(),
        );
        let base = fs::read_to_string(self.data.join("postgresql.conf")).unwrap();
        let base = base
            .split("\n# headroom test\n")
            .next()
            .unwrap()
            .to_string();
        fs::write(
            self.data.join("postgresql.conf"),
            format!("{base}\n# headroom test\n{conf}"),
        )
        .unwrap();
    }

    /// A CA (`ca.crt` in the data directory, for `verify-ca`) and a server certificate it
    /// signed, for `localhost` (not the IP clients connect to).
    fn make_certificate(&self) {
        let d = &self.data;
        let (crt, key) = (d.join("server.crt"), d.join("server.key"));
        let ext = d.join("server.ext");
        fs::write(
            &ext,
            "basicConstraints=CA:FALSE\nsubjectAltName=DNS:localhost\n",
        )
        .unwrap();
        let p = |n: &str| d.join(n).to_str().unwrap().to_string();
        let steps: [Vec<String>; 3] = [
            [
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=headroom test CA",
                "-keyout",
                &p("ca.key"),
                "-out",
                &p("ca.crt"),
            ]
            .map(String::from)
            .to_vec(),
            [
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                "/CN=localhost",
                "-keyout",
                &p("server.key"),
                "-out",
                &p("server.csr"),
            ]
            .map(String::from)
            .to_vec(),
            [
                "x509",
                "-req",
                "-in",
                &p("server.csr"),
                "-CA",
                &p("ca.crt"),
                "-CAkey",
                &p("ca.key"),
                "-CAcreateserial",
                "-days",
                "1",
                "-extfile",
                &p("server.ext"),
                "-out",
                &p("server.crt"),
            ]
            .map(String::from)
            .to_vec(),
        ];
        for args in steps {
            let out = Command::new("openssl")
                .args(&args)
                .output()
                .expect("run the openssl CLI to make a test certificate");
            assert!(
                out.status.success(),
                "openssl: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).unwrap();
        self.chown(&crt);
        self.chown(&key);
    }

    fn chown(&self, path: &Path) {
        if let Some((uid, gid)) = self.owner {
            nix::unistd::chown(path, Some(uid), Some(gid)).expect("chown to postgres");
        }
    }

    fn run(&self, tool: &str, args: &[&str]) -> Output {
        let mut cmd = Command::new(self.bin.join(tool));
        cmd.args(args)
            .current_dir(self.dir.path())
            .env("LC_ALL", "C");
        if let Some((uid, gid)) = self.owner {
            cmd.uid(uid.as_raw()).gid(gid.as_raw());
        }
        cmd.output().unwrap_or_else(|e| panic!("run {tool}: {e}"))
    }

    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Superuser over the unix socket (trust): for setting scenarios up, never for headroom.
    pub async fn superuser(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::Config::new()
            .host_path(self.socket_dir())
            .port(self.port)
            .user("postgres")
            .dbname("postgres")
            .connect(tokio_postgres::NoTls)
            .await
            .expect("superuser connection over the socket");
        tokio::spawn(conn);
        client
    }

    /// Creates the monitoring role exactly as README says, and returns a password file for it.
    pub async fn monitor_role(&self) -> PathBuf {
        self.superuser()
            .await
            .batch_execute(MONITOR_ROLE_SQL)
            .await
            .expect("create role headroom");
        let file = self.dir.path().join("headroom.password");
        fs::write(&file, format!("{MONITOR_PASSWORD}\n")).unwrap();
        file
    }

    /// TCP connection string for `user` (no password: that comes from a file).
    pub fn dsn(&self, user: &str, sslmode: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user={user} dbname=postgres sslmode={sslmode}",
            self.port
        )
    }

    /// Writes some rows and switches to a new segment, `n` times: `n` completed segments.
    pub async fn generate_wal(&self, client: &tokio_postgres::Client, n: usize) {
        client
            .batch_execute("CREATE TABLE IF NOT EXISTS filler (x int)")
            .await
            .unwrap();
        for _ in 0..n {
            client
                .batch_execute(
                    "INSERT INTO filler SELECT generate_series(1, 1000); SELECT pg_switch_wal()",
                )
                .await
                .unwrap();
        }
    }

    /// A streaming standby of `primary`, from a cold copy of its data directory (the npm
    /// builds have no pg_basebackup): the primary is stopped cleanly, copied and started again
    /// on its port. The standby has its own directory, port and socket, the primary's options
    /// and extra lines, and streams over the primary's socket, from `slot` when given (a
    /// physical slot that must exist on the primary).
    pub fn standby_of(primary: &mut Cluster, slot: Option<&str>) -> Cluster {
        let parent = primary.dir.path().parent().unwrap().to_path_buf();
        let extra: Vec<&str> = primary.extra.iter().map(String::as_str).collect();
        let mut s = Self::empty(&primary.bin, &primary.opts, &extra, &parent);

        // pg_hba's first match wins and `all` does not cover replication, so appending is enough
        // even after tls_only's file.
        let hba = primary.data.join("pg_hba.conf");
        let mut rules = fs::read_to_string(&hba).unwrap();
        rules.push_str("\nlocal replication postgres trust\n");
        fs::write(&hba, rules).unwrap();

        assert!(primary.running, "standby_of: the primary is not running");
        let out = primary.run(
            "pg_ctl",
            &[
                "-D",
                primary.data.to_str().unwrap(),
                "-m",
                "fast",
                "-w",
                "stop",
            ],
        );
        assert!(
            out.status.success(),
            "pg_ctl stop: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        primary.running = false;
        // -a keeps the owner and the 0700 mode the server insists on.
        let out = Command::new("cp")
            .arg("-a")
            .arg(&primary.data)
            .arg(&s.data)
            .output()
            .expect("run cp");
        assert!(
            out.status.success(),
            "cp -a {} {}: {}",
            primary.data.display(),
            s.data.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        primary.launch(true);

        // Slots are the primary's own: a backup leaves pg_replslot's contents out.
        let _ = fs::remove_file(s.data.join("postmaster.pid"));
        for slot_dir in fs::read_dir(s.data.join("pg_replslot")).unwrap() {
            fs::remove_dir_all(slot_dir.unwrap().path()).unwrap();
        }
        let signal = s.data.join("standby.signal");
        fs::write(&signal, "").unwrap();
        s.chown(&signal);
        s.extra.push(format!(
            "primary_conninfo = 'host={} port={} user=postgres application_name=standby'",
            primary.socket_dir().display(),
            primary.port
        ));
        if let Some(slot) = slot {
            s.extra.push(format!("primary_slot_name = '{slot}'"));
        }
        s.launch(false);
        s
    }

    /// `pg_is_in_recovery()`: a standby (or a server replaying archived WAL).
    pub async fn in_recovery(&self) -> bool {
        self.superuser()
            .await
            .query_one("SELECT pg_is_in_recovery()", &[])
            .await
            .unwrap()
            .get(0)
    }

    /// Promotes a standby and waits until it takes writes.
    pub async fn promote(&self) {
        let out = self.run(
            "pg_ctl",
            &[
                "-D",
                self.data.to_str().unwrap(),
                "-w",
                "-t",
                "60",
                "promote",
            ],
        );
        assert!(
            out.status.success(),
            "pg_ctl promote: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let client = self.superuser().await;
        poll(
            "pg_is_in_recovery() to be false",
            Duration::from_secs(60),
            || {
                let client = &client;
                async move {
                    let row = client
                        .query_one("SELECT pg_is_in_recovery()", &[])
                        .await
                        .unwrap();
                    (!row.get::<_, bool>(0)).then_some(())
                }
            },
        )
        .await;
    }

    pub fn stop(&mut self) {
        if self.running {
            let out = self.run(
                "pg_ctl",
                &[
                    "-D",
                    self.data.to_str().unwrap(),
                    "-m",
                    "immediate",
                    "-w",
                    "stop",
                ],
            );
            assert!(
                out.status.success(),
                "pg_ctl stop: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            self.running = false;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.running {
            let _ = self.run(
                "pg_ctl",
                &[
                    "-D",
                    self.data.to_str().unwrap_or(""),
                    "-m",
                    "immediate",
                    "-w",
                    "stop",
                ],
            );
        }
    }
}

/// A port for a Postgres server.
pub fn free_port() -> u16 {
    super::ports::free_port()
}

/// Polls `check` until it returns `Some`, or panics with `what` after `limit`.
pub async fn poll<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
