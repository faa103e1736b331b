//! `headroom wal-health`: what headroom sees of a Postgres instance's WAL, for operators
//! debugging a blocked resize.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use tokio_postgres::config::SslMode;

use crate::cli::{Format, SslModeArg, WalHealthArgs};
use crate::decide::{WalHealth, WalPosition};
use crate::postgres::health::{self, Limits, VolumeRead, combine};
use crate::postgres::slots::Tracker;
use crate::postgres::{SqlError, SqlTarget};
use crate::quantity::human;

/// What stops `headroom wal-health`.
#[derive(Debug, thiserror::Error)]
pub enum WalHealthError {
    #[error("wal-health: give --pgdata DIR, --dsn CONNSTR, or both")]
    NothingToInspect,
    #[error("wal-health: --connect-timeout must be at least 1 second")]
    ZeroTimeout,
    #[error("wal-health: {0}")]
    Sql(SqlError),
    #[error("wal-health: starting the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("wal-health: writing JSON: {0}")]
    Json(serde_json::Error),
    #[error("wal-health: writing the report: {0}")]
    Output(std::io::Error),
}

/// What `wal-health` prints: the combined answer (what the agent would use), and each source's
/// own answer beside it.
#[derive(Debug, serde::Serialize)]
struct Report {
    #[serde(flatten)]
    used: WalHealth,
    by_source: BySource,
}

#[derive(Debug, serde::Serialize)]
struct BySource {
    volume: Option<WalHealth>,
    sql: Option<WalHealth>,
}

pub fn run(args: &WalHealthArgs) -> Result<ExitCode, WalHealthError> {
    if args.pgdata.is_none() && args.dsn.is_none() {
        return Err(WalHealthError::NothingToInspect);
    }
    let target = args
        .dsn
        .as_deref()
        .map(|dsn| target(args, dsn))
        .transpose()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(WalHealthError::Runtime)?;
    let now = jiff::Timestamp::now();
    let limits = Limits::from(args.max_pending_wal_files);
    let (read, sql) = runtime.block_on(async {
        tokio::join!(
            health::read_bounded(args.pgdata.as_deref(), now),
            health::query(target.as_ref())
        )
    });
    // A reader stuck on a hung mount is abandoned, not waited for at exit.
    runtime.shutdown_background();
    let alone = |read: VolumeRead, sql| combine(read, sql, &mut Tracker::default(), limits, now);
    let report = Report {
        used: alone(read.clone(), sql.clone()),
        by_source: BySource {
            volume: args.pgdata.is_some().then(|| alone(read, None)),
            sql: sql.is_some().then(|| alone(VolumeRead::default(), sql)),
        },
    };
    let text = match args.format {
        Format::Json => serde_json::to_string_pretty(&report).map_err(WalHealthError::Json)? + "\n",
        Format::Table => side_by_side(&report),
    };
    super::output::emit(&text).map_err(WalHealthError::Output)?;
    Ok(ExitCode::SUCCESS)
}

fn target(args: &WalHealthArgs, dsn: &str) -> Result<SqlTarget, WalHealthError> {
    if args.connect_timeout == 0 {
        return Err(WalHealthError::ZeroTimeout);
    }
    let mut t = SqlTarget::from_dsn(dsn).map_err(WalHealthError::Sql)?;
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
            WalHealthError::Sql(SqlError::CaFile {
                path: shown.clone(),
                source,
            })
        })?;
        t.set_verify_ca(&shown, &pem).map_err(WalHealthError::Sql)?;
    }
    if let Some(path) = &args.password_file {
        t.set_password_file(path).map_err(WalHealthError::Sql)?;
    }
    Ok(t)
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "unknown".to_string(), |v| v.to_string())
}

fn yes_no(v: Option<bool>) -> String {
    opt(v.map(|b| if b { "yes" } else { "no" }))
}

/// The facts shown, each as one line of text per answer.
fn facts(h: &WalHealth) -> Vec<(&'static str, String)> {
    vec![
        ("archive configured", yes_no(h.archive_configured)),
        ("archive healthy", yes_no(h.archive_healthy)),
        ("archive_mode", opt(h.detail.archive_mode.clone())),
        ("pending files", opt(h.pending_files)),
        (
            "oldest pending",
            opt(h.oldest_pending_seconds.map(|s| format!("{s}s"))),
        ),
        ("failed count", opt(h.detail.failed_count)),
        ("last archived", opt(h.detail.last_archived_time)),
        ("last failed", opt(h.detail.last_failed_time)),
        ("in recovery", yes_no(h.detail.in_recovery)),
        ("role", opt(h.detail.role.map(|r| r.as_str()))),
        ("wal bytes", opt(h.detail.wal_bytes.map(human))),
        ("wal on this volume", yes_no(h.detail.wal_on_volume)),
        ("wal position", opt(h.detail.position.map(position))),
    ]
}

/// The position slots' retention is measured from, its source and how far the server's may be
/// ahead of it (README, "WAL health").
fn position(p: WalPosition) -> String {
    format!("{} ({}: {})", p.lsn, p.source.as_str(), p.source.bound())
}

/// Every slot, in `pg_replication_slots`' terms.
fn all_slots(h: &WalHealth) -> Vec<String> {
    match &h.detail.slots {
        None => vec!["unknown".into()],
        Some(s) if s.is_empty() => vec!["none".into()],
        Some(slots) => slots
            .iter()
            .map(|s| {
                format!(
                    "{} {} restart_lsn {} retains {} ({})",
                    s.slot_name,
                    s.slot_type,
                    s.restart_lsn
                        .map_or_else(|| "null".into(), |l| l.to_string()),
                    opt(s.retained_bytes.map(human)),
                    s.activity.as_str()
                )
            })
            .collect(),
    }
}

fn slots(h: &WalHealth) -> Vec<String> {
    match &h.inactive_slots {
        None => vec!["unknown".into()],
        Some(s) if s.is_empty() => vec!["none".into()],
        Some(slots) => slots
            .iter()
            .map(|s| {
                format!(
                    "{} retains {} ({})",
                    s.name,
                    human(s.retained_bytes),
                    s.activity.as_str()
                )
            })
            .collect(),
    }
}

/// Human-readable form of one answer; `unknown` where the JSON has `null`.
pub fn table(h: &WalHealth) -> String {
    let mut out = String::new();
    let mut row = |k: &str, v: String| {
        let _ = writeln!(out, "{k:<24}{v}");
    };
    for (k, v) in facts(h) {
        row(k, v);
    }
    for s in all_slots(h) {
        row("slot", s);
    }
    for s in slots(h) {
        row("inactive slot", s);
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
    for d in &h.detail.disagreements {
        row("disagreement", d.clone());
    }
    out
}

/// The combined answer, then each source's answer beside it where both were asked.
fn side_by_side(r: &Report) -> String {
    let (Some(v), Some(s)) = (&r.by_source.volume, &r.by_source.sql) else {
        return table(&r.used);
    };
    let mut out = table(&r.used);
    let _ = writeln!(out, "\n{:<24}{:<28}sql", "by source", "volume");
    for ((k, a), (_, b)) in facts(v).into_iter().zip(facts(s)) {
        let mark = if a == b { "" } else { "  (differ)" };
        let _ = writeln!(out, "{k:<24}{a:<28}{b}{mark}");
    }
    for (name, list) in [
        ("slot", all_slots as fn(&WalHealth) -> Vec<String>),
        ("inactive slot", slots),
    ] {
        let (a, b) = (list(v), list(s));
        for i in 0..a.len().max(b.len()) {
            let get = |x: &[String]| x.get(i).cloned().unwrap_or_default();
            let _ = writeln!(out, "{name:<24}{:<28}{}", get(&a), get(&b));
        }
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
                activity: crate::decide::SlotActivity::Inactive,
                restart_lsn: None,
            }]),
            ..Default::default()
        };
        h.detail.errors.push("sql: refused".into());
        h.detail.position = Some(WalPosition {
            lsn: crate::decide::Lsn(0x5000000),
            source: crate::decide::PositionSource::Checkpoint,
        });
        h.detail.slots = Some(vec![crate::decide::ReplicationSlot {
            slot_name: "stuck".into(),
            slot_type: "physical".into(),
            restart_lsn: Some(crate::decide::Lsn(0x2000000)),
            retained_bytes: Some(48 << 20),
            activity: crate::decide::SlotActivity::Inactive,
        }]);
        let t = table(&h);
        assert!(t.contains("stuck retains 48.0Mi (inactive)"), "{t}");
        assert!(
            t.contains("slot                    stuck physical restart_lsn 0/2000000 retains 48.0Mi (inactive)"),
            "{t}"
        );
        assert!(
            t.contains("wal position            0/5000000 (checkpoint: the server's is ahead by less than one WAL segment"),
            "{t}"
        );
        assert!(t.contains("error                   sql: refused"), "{t}");
        let v = serde_json::to_value(&h).unwrap();
        assert_eq!(
            v["inactive_slots"],
            serde_json::json!([{"name": "stuck", "retained_bytes": 48u64 << 20, "activity": "inactive"}])
        );
        assert_eq!(v["slots"][0]["restart_lsn"], "0/2000000");
        assert_eq!(
            v["position"],
            serde_json::json!({"lsn": "0/5000000", "source": "checkpoint"})
        );
        let back: WalHealth = serde_json::from_value(v).unwrap();
        assert_eq!(back, h);
    }
}
