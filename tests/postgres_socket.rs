//! headroom reaches PostgreSQL over a Unix socket as libpq does: never with TLS, whatever
//! sslmode says (issue 13 item 5). The server only accepts TCP with TLS, so every connection
//! these tests make through the socket proves the socket path, not a TCP fallback.

mod support {
    pub mod pg;
    pub mod ports;
}

use std::process::Command;

use headroom::postgres::{SqlTarget, gather};
use jiff::Timestamp;
use support::pg::{Cluster, Options, require_postgres};

fn socket_dsn(c: &Cluster, sslmode: &str) -> String {
    format!(
        "host={} port={} user=headroom dbname=postgres sslmode={sslmode}",
        c.socket_dir().display(),
        c.port
    )
}

fn tls_only(bin: &std::path::Path) -> Cluster {
    Cluster::start(
        bin,
        &Options {
            tls_only: true,
            ..Options::archiving("cp %p {archive}/%f")
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sslmode_connects_through_the_socket_without_tls() {
    let Some(bin) = require_postgres() else {
        return;
    };
    let c = tls_only(&bin);
    let pw = c.monitor_role().await;
    for mode in ["disable", "prefer", "require"] {
        let mut t = SqlTarget::from_dsn(&socket_dsn(&c, mode)).expect("dsn");
        assert!(t.unix_only(), "{mode}");
        t.set_password_file(&pw).expect("password file");
        let h = gather(None, Some(&t), 100, Timestamp::now()).await;
        assert!(h.sources.sql, "sslmode={mode}: {:?}", h.detail.errors);
        assert_eq!(h.archive_configured, Some(true), "sslmode={mode}: {h:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wal_health_cli_takes_a_socket_directory_as_host() {
    let Some(bin) = require_postgres() else {
        return;
    };
    let c = tls_only(&bin);
    let pw = c.monitor_role().await;
    // The command line of the bug report: a socket DSN, with and without --sslmode.
    for extra in [
        &[][..],
        &["--sslmode", "disable"][..],
        &["--sslmode", "require"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_headroom"))
            .args(["wal-health", "--format", "json", "--dsn"])
            .arg(socket_dsn(&c, "prefer"))
            .arg("--password-file")
            .arg(&pw)
            .args(extra)
            .output()
            .expect("run headroom");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{extra:?}: {stderr}");
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(
            json["sources"]["sql"], true,
            "{extra:?}: {json} (stderr: {stderr})"
        );
        assert!(
            !json.to_string().contains("invalid dns name"),
            "{extra:?}: {json}"
        );
    }
}
