//! The growth trace: `seconds,used_bytes` plus optional inode and WAL columns.

use crate::decide::{SlotActivity, SlotRetention, WalHealth};

use super::SimulateError;

/// One row; `None` is an empty cell (unknown).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub seconds: f64,
    pub used_bytes: f64,
    pub inodes_used: Option<u64>,
    pub inodes_total: Option<u64>,
    pub archive_healthy: Option<bool>,
    pub pending_wal_files: Option<u64>,
    pub slot_retention_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub rows: Vec<Row>,
    /// Does the trace speak about WAL at all? Without WAL columns, WAL health is unknown.
    pub has_wal_columns: bool,
}

const REQUIRED: [&str; 2] = ["seconds", "used_bytes"];
const OPTIONAL: [&str; 5] = [
    "inodes_used",
    "inodes_total",
    "archive_healthy",
    "pending_wal_files",
    "slot_retention_bytes",
];

fn err(line: usize, message: impl Into<String>) -> SimulateError {
    SimulateError::Trace {
        line,
        message: message.into(),
    }
}

fn cell<'a>(cells: &[&'a str], idx: Option<usize>) -> Option<&'a str> {
    idx.and_then(|i| cells.get(i))
        .map(|c| c.trim())
        .filter(|c| !c.is_empty())
}

fn number<T: std::str::FromStr>(
    line: usize,
    column: &str,
    text: Option<&str>,
) -> Result<Option<T>, SimulateError> {
    text.map(|t| {
        t.parse::<T>()
            .map_err(|_| err(line, format!("column {column}: '{t}' is not a number")))
    })
    .transpose()
}

fn boolean(line: usize, text: Option<&str>) -> Result<Option<bool>, SimulateError> {
    text.map(|t| match t.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(err(
            line,
            format!("column archive_healthy: '{t}' is not true/false"),
        )),
    })
    .transpose()
}

pub fn parse(text: &str) -> Result<Trace, SimulateError> {
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
    let (header_line, header) = lines.next().ok_or_else(|| err(1, "the trace is empty"))?;
    let names: Vec<&str> = header.split(',').map(str::trim).collect();
    for name in &names {
        if !REQUIRED.contains(name) && !OPTIONAL.contains(name) {
            return Err(err(
                header_line,
                format!(
                    "unknown column '{name}' (columns: {}, {})",
                    REQUIRED.join(", "),
                    OPTIONAL.join(", ")
                ),
            ));
        }
    }
    let col = |name: &str| names.iter().position(|n| *n == name);
    let (Some(seconds_col), Some(used_col)) = (col("seconds"), col("used_bytes")) else {
        return Err(err(
            header_line,
            "the header must start with seconds,used_bytes",
        ));
    };
    let has_wal_columns = [
        "archive_healthy",
        "pending_wal_files",
        "slot_retention_bytes",
    ]
    .iter()
    .any(|c| col(c).is_some());

    let mut rows: Vec<Row> = Vec::new();
    for (line, text) in lines {
        let cells: Vec<&str> = text.split(',').collect();
        if cells.len() > names.len() {
            return Err(err(
                line,
                format!(
                    "{} cells but the header has {} columns",
                    cells.len(),
                    names.len()
                ),
            ));
        }
        let seconds: f64 = number(line, "seconds", cell(&cells, Some(seconds_col)))?
            .ok_or_else(|| err(line, "column seconds is empty"))?;
        let used_bytes: f64 = number(line, "used_bytes", cell(&cells, Some(used_col)))?
            .ok_or_else(|| err(line, "column used_bytes is empty"))?;
        if !seconds.is_finite() || !used_bytes.is_finite() || used_bytes < 0.0 {
            return Err(err(
                line,
                "seconds and used_bytes must be finite and used_bytes not negative",
            ));
        }
        if let Some(prev) = rows.last()
            && seconds <= prev.seconds
        {
            return Err(err(
                line,
                format!("seconds must increase ({seconds} after {})", prev.seconds),
            ));
        }
        rows.push(Row {
            seconds,
            used_bytes,
            inodes_used: number(line, "inodes_used", cell(&cells, col("inodes_used")))?,
            inodes_total: number(line, "inodes_total", cell(&cells, col("inodes_total")))?,
            archive_healthy: boolean(line, cell(&cells, col("archive_healthy")))?,
            pending_wal_files: number(
                line,
                "pending_wal_files",
                cell(&cells, col("pending_wal_files")),
            )?,
            slot_retention_bytes: number(
                line,
                "slot_retention_bytes",
                cell(&cells, col("slot_retention_bytes")),
            )?,
        });
    }
    if rows.len() < 2 {
        return Err(err(header_line, "the trace needs at least two rows"));
    }
    Ok(Trace {
        rows,
        has_wal_columns,
    })
}

impl Trace {
    /// Index of the last row at or before `t` (the trace is sorted and non-empty).
    fn at_or_before(&self, t: f64) -> usize {
        self.rows
            .partition_point(|r| r.seconds <= t)
            .saturating_sub(1)
    }

    /// Usage at `t`, interpolated linearly between rows.
    pub fn used_at(&self, t: f64) -> f64 {
        let i = self.at_or_before(t);
        let a = &self.rows[i];
        match self.rows.get(i + 1) {
            Some(b) if t > a.seconds => {
                a.used_bytes
                    + (b.used_bytes - a.used_bytes) * (t - a.seconds) / (b.seconds - a.seconds)
            }
            _ => a.used_bytes,
        }
    }

    /// Inodes (used, total) at `t`: interpolated when both neighbours know them.
    pub fn inodes_at(&self, t: f64) -> Option<(u64, u64)> {
        let i = self.at_or_before(t);
        let a = &self.rows[i];
        let (used, total) = (a.inodes_used?, a.inodes_total?);
        match self.rows.get(i + 1) {
            Some(b) if t > a.seconds => match b.inodes_used {
                Some(bu) => {
                    let f = (t - a.seconds) / (b.seconds - a.seconds);
                    Some((
                        (used as f64 + (bu as f64 - used as f64) * f).round() as u64,
                        total,
                    ))
                }
                None => Some((used, total)),
            },
            _ => Some((used, total)),
        }
    }

    /// WAL health as of the last row at or before `t` (WAL state changes in steps).
    pub fn wal_at(&self, t: f64) -> Option<WalHealth> {
        if !self.has_wal_columns {
            return None;
        }
        let r = &self.rows[self.at_or_before(t)];
        Some(WalHealth {
            archive_configured: r.archive_healthy.map(|_| true),
            archive_healthy: r.archive_healthy,
            pending_files: r.pending_wal_files,
            inactive_slots: r.slot_retention_bytes.map(|b| {
                vec![SlotRetention {
                    name: "trace".to_string(),
                    retained_bytes: b,
                    activity: SlotActivity::Inactive,
                    restart_lsn: None,
                }]
            }),
            ..WalHealth::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_interpolates() {
        let t = parse("seconds,used_bytes,inodes_used,inodes_total\n0,100,10,1000\n10,200,,1000\n20,200,30,1000\n")
            .expect("trace");
        assert_eq!(t.used_at(5.0), 150.0);
        assert_eq!(t.used_at(25.0), 200.0);
        assert_eq!(t.inodes_at(5.0), Some((10, 1000)));
        assert_eq!(t.inodes_at(10.0), None);
        assert_eq!(t.wal_at(0.0), None);
    }

    #[test]
    fn wal_cells_step_and_empty_means_unknown() {
        let t = parse(
            "seconds,used_bytes,archive_healthy,pending_wal_files\n0,1,true,0\n10,1,false,\n",
        )
        .expect("trace");
        let w = t.wal_at(15.0).expect("wal columns present");
        assert_eq!(w.archive_healthy, Some(false));
        assert_eq!(w.pending_files, None);
        assert_eq!(t.wal_at(9.0).and_then(|w| w.archive_healthy), Some(true));
    }

    #[test]
    fn errors_name_the_line_and_column() {
        let e = parse("seconds,used_bytes\n0,1\n5,lots\n").expect_err("bad");
        assert!(
            e.to_string().contains("line 3") && e.to_string().contains("used_bytes"),
            "{e}"
        );
        let e = parse("seconds,used_bytes,usage\n0,1\n").expect_err("bad");
        assert!(e.to_string().contains("unknown column 'usage'"), "{e}");
        let e = parse("seconds,used_bytes\n5,1\n5,2\n").expect_err("bad");
        assert!(e.to_string().contains("must increase"), "{e}");
        assert!(parse("seconds,used_bytes\n0,1\n").is_err());
    }
}
