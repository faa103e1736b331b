//! `headroom wal-health`: what headroom sees of a Postgres instance's WAL, for operators
//! debugging a blocked resize.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use tokio_postgres::config::SslMode;

use crate::cli::{Format, SslModeArg, WalHealthArgs};
use crate::decide::WalHealth;
use crate::postgres::{SqlTarget, WalError, gather};
use crate::quantity::human;

pub fn run(args: &WalHealthArgs) -> Result<ExitCode, WalError> {
    if args.pgdata.is_none() && args.dsn.is_none() {
        return Err(WalError::NothingToInspect);
    }
    let target = args
        .dsn
        .as_deref()
        .map(|dsn| target(args, dsn))
        .transpose()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(WalError::Runtime)?;
    let now = jiff::Timestamp::now();
    let health = runtime.block_on(gather(
        args.pgdata.as_deref(),
        target.as_ref(),
        args.max_pending_wal_files,
        now,
    ));
    let text = match args.format {
        Format::Json => serde_json::to_string_pretty(&health).map_err(WalError::Json)? + "\n",
        Format::Table => table(&health),
    };
    super::output::emit(&text).map_err(WalError::Output)?;
    Ok(ExitCode::SUCCESS)
}

fn target(args: &WalHealthArgs, dsn: &str) -> Result<SqlTarget, WalError> {
    if args.connect_timeout == 0 {
        return Err(WalError::ZeroTimeout);
    }
    let mut t = SqlTarget::from_dsn(dsn).map_err(WalError::Sql)?;
    t.set_timeout(Duration::from_secs(args.connect_timeout));
    if let Some(mode) = args.sslmode {
        t.set_ssl_mode(match mode {
            SslModeArg::Disable => SslMode::Disable,
            SslModeArg::Prefer => SslMode::Prefer,
            SslModeArg::Require => SslMode::Require,
        });
    }
    if let Some(ca) = &args.ca_file {
        let shown = ca.display().to_string();
        let pem = std::fs::read(ca).map_err(|source| {
            WalError::Sql(crate::postgres::SqlError::CaFile {
                path: shown.clone(),
                source,
            })
        })?;
        t.set_verify_ca(&shown, &pem).map_err(WalError::Sql)?;
    }
    if let Some(path) = &args.password_file {
        t.set_password_file(path).map_err(WalError::Sql)?;
    }
    Ok(t)
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "unknown".to_string(), |v| v.to_string())
}

fn yes_no(v: Option<bool>) -> String {
    opt(v.map(|b| if b { "yes" } else { "no" }))
}

/// Human-readable form; `unknown` where the JSON has `null`.
pub fn table(h: &WalHealth) -> String {
    let mut out = String::new();
    let mut row = |k: &str, v: String| {
        let _ = writeln!(out, "{k:<24}{v}");
    };
    row("archive configured", yes_no(h.archive_configured));
    row("archive healthy", yes_no(h.archive_healthy));
    row("pending files", opt(h.pending_files));
    row(
        "oldest pending",
        opt(h.oldest_pending_seconds.map(|s| format!("{s}s"))),
    );
    row("failed count", opt(h.detail.failed_count));
    row("last archived", opt(h.detail.last_archived_time));
    row("last failed", opt(h.detail.last_failed_time));
    row("in recovery", yes_no(h.detail.in_recovery));
    row("wal bytes", opt(h.detail.wal_bytes.map(human)));
    row("wal on this volume", yes_no(h.detail.wal_on_volume));
    match &h.inactive_slots {
        None => row("inactive slots", "unknown".into()),
        Some(s) if s.is_empty() => row("inactive slots", "none".into()),
        Some(slots) => {
            for s in slots {
                row(
                    "inactive slot",
                    format!("{} retains {}", s.name, human(s.retained_bytes)),
                );
            }
        }
    }
    let mut sources: Vec<&str> = Vec::new();
    if h.sources.volume {
        sources.push("volume");
    }
    if h.sources.sql {
        sources.push("sql");
    }
    row(
        "sources",
        if sources.is_empty() {
            "none".into()
        } else {
            sources.join(", ")
        },
    );
    row("observed at", opt(h.observed_at));
    for p in &h.detail.problems {
        row("problem", p.clone());
    }
    for e in &h.detail.errors {
        row("error", e.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::SlotRetention;

    #[test]
    fn unknown_prints_as_unknown_and_json_as_null() {
        let h = WalHealth::default();
        let t = table(&h);
        assert!(t.contains("archive healthy         unknown"), "{t}");
        assert!(t.contains("sources                 none"), "{t}");
        let v = serde_json::to_value(&h).unwrap();
        for key in [
            "archive_configured",
            "archive_healthy",
            "pending_files",
            "oldest_pending_seconds",
            "inactive_slots",
        ] {
            assert!(v.get(key).is_some_and(|x| x.is_null()), "{key} in {v}");
        }
        assert_eq!(
            v["sources"],
            serde_json::json!({"volume": false, "sql": false})
        );
    }

    #[test]
    fn slots_and_errors_are_listed() {
        let mut h = WalHealth {
            inactive_slots: Some(vec![SlotRetention {
                name: "stuck".into(),
                retained_bytes: 48 << 20,
            }]),
            ..Default::default()
        };
        h.detail.errors.push("sql: refused".into());
        let t = table(&h);
        assert!(t.contains("stuck retains 48.0Mi"), "{t}");
        assert!(t.contains("error                   sql: refused"), "{t}");
        let v = serde_json::to_value(&h).unwrap();
        assert_eq!(
            v["inactive_slots"],
            serde_json::json!([{"name": "stuck", "retained_bytes": 48u64 << 20}])
        );
        let back: WalHealth = serde_json::from_value(v).unwrap();
        assert_eq!(back, h);
    }
}
