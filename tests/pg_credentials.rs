//! The Postgres password goes only through SCRAM: a server (or a pod posing as one) that asks for
//! it in the clear or as MD5 gets nothing; `verify-ca` checks the certificate against the CA and
//! SCRAM with channel binding works through it against a real PostgreSQL.

mod support {
    pub mod fake_pg;
    pub mod pg;
    pub mod ports;
}

use std::time::Duration;

use headroom::postgres::SqlTarget;
use headroom::postgres::sql::query;
use support::fake_pg::{Ask, FakePg};
use support::pg::{Cluster, Options, require_postgres};

const SECRET: &str = "s3cret-password-do-not-leak";

async fn wait_for_connection(fake: &FakePg) -> support::fake_pg::Conn {
    for _ in 0..100 {
        if let Some(c) = fake.connections().into_iter().next() {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the fake server saw no connection");
}

#[tokio::test]
async fn cleartext_and_md5_requests_get_no_secret() {
    for ask in [Ask::Cleartext, Ask::Md5] {
        for sslmode in ["disable", "prefer", "require"] {
            let fake = FakePg::start(&["127.0.0.1"], ask).await;
            let mut t = SqlTarget::from_dsn(&format!(
                "host=127.0.0.1 port={} user=headroom dbname=postgres sslmode={sslmode}",
                fake.port
            ))
            .expect("dsn");
            t.set_password(SECRET).set_timeout(Duration::from_secs(2));
            let err = query(&t).await.expect_err("must not authenticate");
            if sslmode == "require" {
                // The fake has no TLS: refused before any startup message.
                assert!(fake.connections().len() <= 1, "{ask:?}");
                continue;
            }
            assert!(
                err.to_string().contains("refused"),
                "{ask:?} {sslmode}: {err}"
            );
            let conn = wait_for_connection(&fake).await;
            assert!(
                conn.after_request.is_empty(),
                "{ask:?} {sslmode}: the client answered: {:?}",
                String::from_utf8_lossy(&conn.after_request)
            );
        }
    }
}

/// The fake does catch a secret when the client sends one: without the guard, tokio-postgres
/// answers both requests (so the test above could fail).
#[tokio::test]
async fn the_fake_server_sees_what_an_unguarded_client_sends() {
    for ask in [Ask::Cleartext, Ask::Md5] {
        let fake = FakePg::start(&["127.0.0.1"], ask).await;
        let mut config = tokio_postgres::Config::new();
        config
            .host("127.0.0.1")
            .port(fake.port)
            .user("headroom")
            .password(SECRET)
            .connect_timeout(Duration::from_secs(2));
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            config.connect(tokio_postgres::NoTls),
        )
        .await;
        let conn = wait_for_connection(&fake).await;
        assert_eq!(conn.after_request.first(), Some(&b'p'), "{ask:?}");
        if let Ask::Cleartext = ask {
            let sent = String::from_utf8_lossy(&conn.after_request).to_string();
            assert!(sent.contains(SECRET), "{sent}");
        }
    }
}

fn openssl_cert(dir: &std::path::Path) -> std::path::PathBuf {
    let (crt, key) = (dir.join("other.crt"), dir.join("other.key"));
    let out = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=someone-else"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    crt
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_ca_accepts_the_servers_ca_and_refuses_another() {
    let Some(bin) = require_postgres() else {
        return;
    };
    let opts = Options {
        tls_only: true,
        ..Options::archiving("cp %p {archive}/%f")
    };
    let c = Cluster::start(&bin, &opts);
    let pw = c.monitor_role().await;
    // The server's certificate names localhost, not the IP we connect to: verify-ca checks the
    // chain only.
    let ca = std::fs::read(c.data.join("ca.crt")).expect("ca.crt");
    let mut t = SqlTarget::from_dsn(&c.dsn("headroom", "require")).expect("dsn");
    t.set_verify_ca("server.crt", &ca).expect("CA");
    t.set_password_file(&pw).expect("password");
    let facts = query(&t).await.expect("SCRAM over verified TLS");
    assert!(!facts.archive_mode.is_empty(), "{facts:?}");

    // channel_binding=require: only SCRAM-SHA-256-PLUS, bound to the certificate we verified.
    let mut bound = SqlTarget::from_dsn(&format!(
        "{} channel_binding=require",
        c.dsn("headroom", "require")
    ))
    .expect("dsn");
    bound.set_verify_ca("server.crt", &ca).expect("CA");
    bound.set_password_file(&pw).expect("password");
    query(&bound)
        .await
        .expect("SCRAM-SHA-256-PLUS over verified TLS");

    let other_dir = tempfile::tempdir().expect("dir");
    let other = std::fs::read(openssl_cert(other_dir.path())).expect("other.crt");
    let mut wrong = SqlTarget::from_dsn(&c.dsn("headroom", "require")).expect("dsn");
    wrong.set_verify_ca("other.crt", &other).expect("CA");
    wrong.set_password_file(&pw).expect("password");
    let err = query(&wrong).await.expect_err("another CA");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );
}

/// A real PostgreSQL whose pg_hba.conf says `password`, then `md5` (with an MD5-stored
/// password): the client hangs up on the request, the server never gets an answer, and the
/// same client with SCRAM connects (so the refusal is the method, not the setup).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_server_asking_password_or_md5_gets_nothing() {
    let Some(bin) = require_postgres() else {
        return;
    };
    let opts = Options {
        archive_mode: "off",
        archive_command: "",
        tls_only: false,
    };
    let c = Cluster::start(&bin, &opts);
    let pw = c.monitor_role().await;
    let su = c.superuser().await;
    let hba = |method: &str| {
        std::fs::write(
            c.data.join("pg_hba.conf"),
            format!("local all all trust\nhost all all 127.0.0.1/32 {method}\n"),
        )
        .expect("pg_hba.conf")
    };
    let target = || {
        let mut t = SqlTarget::from_dsn(&c.dsn("headroom", "disable")).expect("dsn");
        t.set_password_file(&pw).expect("password");
        t
    };
    let reload = || async {
        su.batch_execute("SELECT pg_reload_conf()")
            .await
            .expect("reload");
    };
    // The postmaster rereads pg_hba.conf on SIGHUP, asynchronously: ask until the new method
    // answers (or 20 s pass, and the last answer is what the assertion sees).
    let settle = |want: &'static str| {
        let target = &target;
        async move {
            let mut last = query(&target()).await;
            for _ in 0..100 {
                let done = match &last {
                    Err(e) => e.to_string().contains(want),
                    Ok(_) => want.is_empty(),
                };
                if done {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                last = query(&target()).await;
            }
            last
        }
    };

    hba("password");
    reload().await;
    let err = settle("cleartext password")
        .await
        .expect_err("password method");
    assert!(err.to_string().contains("cleartext password"), "{err}");

    su.batch_execute(&format!(
        "SET password_encryption = 'md5'; ALTER ROLE headroom PASSWORD '{}'",
        support::pg::MONITOR_PASSWORD
    ))
    .await
    .expect("md5 password");
    hba("md5");
    reload().await;
    let err = settle("MD5 password").await.expect_err("md5 method");
    assert!(err.to_string().contains("MD5 password"), "{err}");

    su.batch_execute(&format!(
        "SET password_encryption = 'scram-sha-256'; ALTER ROLE headroom PASSWORD '{}'",
        support::pg::MONITOR_PASSWORD
    ))
    .await
    .expect("scram password");
    hba("scram-sha-256");
    reload().await;
    settle("").await.expect("SCRAM connects");
}
