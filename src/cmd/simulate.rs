//! `headroom simulate`: read the policy and trace, replay, print.

use std::process::ExitCode;

use jiff::{SignedDuration, Timestamp};

use crate::cli::{Format, RoleArg, SimulateArgs};
use crate::decide::{VolumeFacts, VolumeRole};
use crate::policy::validate::{Context, parse_policy_yaml};
use crate::quantity;
use crate::simulate::{Comparison, Options, Report, SimulateError, compare, simulate, trace};

fn read(path: &std::path::Path) -> Result<String, SimulateError> {
    std::fs::read_to_string(path).map_err(|source| SimulateError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn duration(flag: &'static str, text: &str) -> Result<SignedDuration, SimulateError> {
    let d: SignedDuration = text.parse().map_err(|e| SimulateError::Flag {
        flag,
        message: format!("'{text}' is not a duration (write e.g. 10s, 1m): {e}"),
    })?;
    if d <= SignedDuration::ZERO && flag == "interval" {
        return Err(SimulateError::Flag {
            flag,
            message: "must be more than zero".into(),
        });
    }
    if d < SignedDuration::ZERO {
        return Err(SimulateError::Flag {
            flag,
            message: "must not be negative".into(),
        });
    }
    Ok(d)
}

pub fn run(args: &SimulateArgs) -> Result<ExitCode, SimulateError> {
    let capacity = quantity::parse(&args.capacity).map_err(|e| SimulateError::Flag {
        flag: "capacity",
        message: e.to_string(),
    })?;
    if capacity == 0 {
        return Err(SimulateError::Flag {
            flag: "capacity",
            message: "must be more than zero".into(),
        });
    }
    let interval = duration("interval", &args.interval)?;
    let resize_delay = duration("resize-delay", &args.resize_delay)?;
    let start: Timestamp = args.start.parse().map_err(|e| SimulateError::Flag {
        flag: "start",
        message: format!("'{}' is not RFC 3339: {e}", args.start),
    })?;
    let role = match args.role {
        RoleArg::Data => VolumeRole::Data,
        RoleArg::Wal => VolumeRole::Wal,
        RoleArg::Tablespace => VolumeRole::Tablespace,
        RoleArg::Other => VolumeRole::Other,
    };
    let storage_rule = args
        .driver
        .as_deref()
        .and_then(crate::policy::drivers::rule);
    let ctx = Context {
        current_size: Some(capacity),
        wal_has_own_volume: match role {
            VolumeRole::Data => Some(!args.wal_on_data),
            VolumeRole::Wal => Some(true),
            _ => None,
        },
        driver_rule: storage_rule,
        // The replay holds a floor the claim cannot meet as an inherited one is held (any
        // inherited layer says the same), and its warning says that alone.
        min_available_source: Some(crate::policy::Source::ConfigMapDefault),
    };
    let policy_path = args.policy.display().to_string();
    let validation = parse_policy_yaml(&read(&args.policy)?, &ctx);
    for w in &validation.warnings {
        eprintln!("{policy_path}: warning: {}: {}", w.field, w.message);
    }
    let Some(mut policy) = validation.policy else {
        let lines: Vec<String> = validation
            .errors
            .iter()
            .map(|e| format!("{policy_path}: error: {}: {}", e.field, e.message))
            .collect();
        return Err(SimulateError::Policy(lines.join("\n")));
    };
    if !policy.enabled {
        eprintln!("{policy_path}: note: the policy has enabled: false; simulating as if enabled");
        policy.enabled = true;
    }
    let trace = trace::parse(&read(&args.trace)?)?;
    let facts = VolumeFacts {
        role,
        wal_on_data: args.wal_on_data,
        expandable: true,
        ..VolumeFacts::default()
    };
    let opts = Options {
        capacity,
        interval,
        resize_delay,
        start,
        facts,
        storage_rule,
    };
    if args.compare_predictive {
        let c = compare(&policy, &trace, &opts);
        let text = match args.format {
            Format::Json => json(&c)? + "\n",
            Format::Table => comparison_table(&c),
        };
        return write(&text);
    }
    let report = simulate(&policy, &trace, &opts);
    let text = match args.format {
        Format::Json => json(&report)? + "\n",
        Format::Table => table(&report),
    };
    write(&text)
}

fn write(text: &str) -> Result<ExitCode, SimulateError> {
    super::output::emit(text).map_err(|source| SimulateError::Read {
        path: "standard output".to_string(),
        source,
    })?;
    Ok(ExitCode::SUCCESS)
}

fn json(value: &impl serde::Serialize) -> Result<String, SimulateError> {
    serde_json::to_string_pretty(value)
        .map_err(|e| SimulateError::Policy(format!("cannot encode the report: {e}")))
}

fn comparison_table(c: &Comparison) -> String {
    let mut out = String::new();
    for (name, r) in [
        ("threshold only", &c.threshold_only),
        ("predictive", &c.predictive),
    ] {
        out.push_str(&format!("== {name}\n{}", table(r)));
    }
    out.push_str(&format!(
        "{:<16} {:>10} {:>12} {:>8} {:>6}\n",
        "TRIGGER", "PEAK USED", "PEAK BYTES", "FULL S", "GROWS"
    ));
    for (name, r) in [
        ("threshold-only", &c.threshold_only),
        ("predictive", &c.predictive),
    ] {
        out.push_str(&format!(
            "{:<16} {:>9.2}% {:>12} {:>8.0} {:>6}\n",
            name,
            r.peak_used_percent,
            quantity::format(r.peak_used_bytes),
            r.full_seconds,
            r.actions.len()
        ));
    }
    out
}

fn table(r: &Report) -> String {
    // One timeline: actions and blocks interleaved by time.
    let mut rows: Vec<(f64, String)> = Vec::new();
    for a in &r.actions {
        let refused = r.refused.iter().any(|x| x.seconds == a.seconds);
        let what = format!(
            "{}{}{} {} -> {}",
            a.kind.as_str(),
            if a.predicted { " (predicted)" } else { "" },
            if refused {
                " REFUSED by the storage (inside its modification interval)"
            } else {
                ""
            },
            quantity::format(a.from_bytes),
            quantity::format(a.to_bytes)
        );
        rows.push((
            a.seconds,
            format!("{:<22} {:>8} {what}\n", a.at.to_string(), a.seconds),
        ));
    }
    for b in &r.blocked {
        rows.push((
            b.seconds,
            format!(
                "{:<22} {:>8} blocked: {}\n",
                b.at.to_string(),
                b.seconds,
                b.reason
            ),
        ));
    }
    for f in &r.fallbacks {
        let what = match f.fallback {
            Some(f) => format!("fallback: {}", f.message()),
            None => "fallback ended: the policy applies as written".to_string(),
        };
        rows.push((
            f.seconds,
            format!("{:<22} {:>8} {what}\n", f.at.to_string(), f.seconds),
        ));
    }
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out = format!("{:<22} {:>8} {}\n", "AT", "SECONDS", "EVENT");
    out.extend(rows.into_iter().map(|(_, line)| line));
    for n in &r.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out.push_str(&format!(
        "final capacity {}, peak used {:.2}%, full for {:.0} s, {} refused resizes, {} evaluations\n",
        quantity::format(r.final_capacity_bytes),
        r.peak_used_percent,
        r.full_seconds,
        r.refused.len(),
        r.evaluations
    ));
    out
}
