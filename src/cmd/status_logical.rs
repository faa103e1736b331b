//! `headroom status`'s logical volumes: the claims whose agents share budget and history with a
//! logical volume (their status says so), grouped by it, with each member's size and node, the
//! volume's distinct actions of the day, the budget its members have left and the quota left.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde::Serialize;

use crate::decide::logical::{self, Member};
use crate::k8s::logical::{LogicalVolume, logical_volume, peer};
use crate::k8s::state::read_status;
use crate::quantity;

/// One member as the table shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberRow {
    pub name: String,
    pub request_bytes: u64,
    /// The node its agent last wrote the status from, else the scheduler's pick for its volume.
    pub node: Option<String>,
}

/// One logical volume.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LogicalRow {
    pub namespace: String,
    pub name: String,
    pub members: Vec<MemberRow>,
    /// Distinct logical actions in the rolling 24 h, from every member's history.
    pub actions_last_24h: u32,
    /// The fewest actions any member's own policy leaves it of the shared budget.
    pub budget_left: Option<u32>,
    /// The least room the namespace's quotas leave any member.
    pub quota_left_bytes: Option<u64>,
    /// The soonest any member fills at its fill rate (status annotations' rounded deadlines).
    pub full_in_seconds: Option<u64>,
    /// The soonest any member reaches its limit at the volume's growth of the last week.
    pub limit_in_seconds: Option<u64>,
    /// Members whose history cannot be read: the count above leaves them out.
    pub unreadable: Vec<String>,
}

/// The logical volumes of `claims` whose members' statuses say they share one.
pub fn rows(claims: &[PersistentVolumeClaim], now: Timestamp) -> Vec<LogicalRow> {
    let mut by_volume: BTreeMap<LogicalVolume, Vec<&PersistentVolumeClaim>> = BTreeMap::new();
    for c in claims {
        if let Some(lv) = logical_volume(c, None) {
            by_volume.entry(lv).or_default().push(c);
        }
    }
    by_volume
        .into_iter()
        .filter_map(|(lv, members)| row(&lv, &members, now))
        .collect()
}

fn row(
    lv: &LogicalVolume,
    claims: &[&PersistentVolumeClaim],
    now: Timestamp,
) -> Option<LogicalRow> {
    let statuses: Vec<_> = claims
        .iter()
        .map(|c| read_status(c).ok().flatten())
        .collect();
    if !statuses
        .iter()
        .flatten()
        .any(|s| s.logical_volume.is_some())
    {
        return None;
    }
    let peers: Vec<_> = claims.iter().map(|c| peer(c)).collect();
    let readable: Vec<Member> = peers
        .iter()
        .filter_map(|p| {
            p.history.as_ref().ok().map(|h| Member {
                request: p.request,
                history: h,
            })
        })
        .collect();
    let used = readable
        .split_first()
        .map_or(0, |(own, rest)| logical::combine(*own, rest).used(now));
    let shared = || {
        statuses
            .iter()
            .flatten()
            .filter(|s| s.logical_volume.is_some())
    };
    Some(LogicalRow {
        namespace: lv.namespace.clone(),
        name: lv.to_string(),
        members: peers
            .iter()
            .zip(&statuses)
            .map(|(p, s)| MemberRow {
                name: p.name.clone(),
                request_bytes: p.request,
                node: s
                    .as_ref()
                    .map(|s| s.node.clone())
                    .or_else(|| p.node.clone()),
            })
            .collect(),
        actions_last_24h: used,
        budget_left: shared().map(|s| s.budget_left).min(),
        quota_left_bytes: shared()
            .filter_map(|s| s.quota.as_ref())
            .map(|q| q.left_bytes)
            .min(),
        full_in_seconds: shared().filter_map(|s| s.full_in_seconds).min(),
        limit_in_seconds: shared().filter_map(|s| s.limit_in_seconds).min(),
        unreadable: peers
            .iter()
            .filter(|p| p.history.is_err())
            .map(|p| p.name.clone())
            .collect(),
    })
}

/// The logical volumes as a second table; empty when there are none.
pub fn render(rows: &[LogicalRow]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let dash = || "-".to_string();
    let header = [
        "NAMESPACE",
        "LOGICAL VOLUME",
        "MEMBERS (SIZE@NODE)",
        "ACTIONS 24H",
        "BUDGET LEFT",
        "QUOTA LEFT",
        "FULL IN",
        "LIMIT IN",
    ];
    let body: Vec<[String; 8]> = rows
        .iter()
        .map(|r| {
            let members = r
                .members
                .iter()
                .map(|m| {
                    let node = m.node.clone().unwrap_or_else(dash);
                    format!("{} {}@{node}", m.name, quantity::format(m.request_bytes))
                })
                .collect::<Vec<_>>()
                .join(", ");
            let mut actions = r.actions_last_24h.to_string();
            if !r.unreadable.is_empty() {
                actions.push_str(&format!(" (unreadable: {})", r.unreadable.join(", ")));
            }
            [
                r.namespace.clone(),
                r.name.clone(),
                members,
                actions,
                r.budget_left.map_or_else(dash, |b| b.to_string()),
                r.quota_left_bytes.map_or_else(dash, quantity::format),
                r.full_in_seconds.map_or_else(dash, super::output::within),
                r.limit_in_seconds.map_or_else(dash, super::output::within),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for r in &body {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::from("\n");
    for r in std::iter::once(&header.map(String::from)).chain(&body) {
        let line: Vec<String> = r
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(name: &str, size: &str, annotations: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "db", "annotations": annotations,
                "labels": {"cnpg.io/cluster": "pg", "cnpg.io/pvcRole": "PG_DATA"}},
            "spec": {"resources": {"requests": {"storage": size}}},
        }))
        .expect("claim")
    }

    #[test]
    fn members_sizes_nodes_and_the_shared_budget() {
        let now: Timestamp = "2026-01-04T04:00:00Z".parse().expect("ts");
        let entry =
            |at: &str| format!(r#"[{{"at":"{at}","kind":"Grow","from":1,"to":2,"action":"a-1"}}]"#);
        let status = |node: &str, left: u32| {
            json!({"node": node, "updatedAt": "2026-01-04T03:00:00Z", "effectiveSizeBytes": 1,
                "state": "Balanced", "lastDecision": "x", "budgetLeft": left,
                "fullInSeconds": 3_600 * u64::from(left + 1), "limitInSeconds": 3 * 86_400,
                "logicalVolume": {"name": "cnpg/pg/data", "members": 3, "sizeBytes": 1,
                    "actionsLast24h": 1}})
            .to_string()
        };
        let claims = [
            claim(
                "pg-1",
                "80Mi",
                json!({"headroom.dev/history": entry("2026-01-04T01:00:00Z"),
                       "headroom.dev/status": status("worker-1", 0)}),
            ),
            claim(
                "pg-2",
                "80Mi",
                json!({"headroom.dev/history": entry("2026-01-04T01:00:05Z"),
                       "headroom.dev/status": status("worker-2", 1)}),
            ),
            // Not evaluated yet: the scheduler's pick is its node.
            claim(
                "pg-3",
                "64Mi",
                json!({"volume.kubernetes.io/selected-node": "worker-3"}),
            ),
            claim("other", "1Gi", json!({})),
        ];
        let rows = rows(&claims[..3], now);
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!(r.name, "cnpg/pg/data");
        assert_eq!(r.actions_last_24h, 1, "one action, recorded by two members");
        assert_eq!(r.budget_left, Some(0));
        assert_eq!(r.full_in_seconds, Some(3_600), "the soonest member");
        let table = render(&rows);
        let row: Vec<&str> = table
            .lines()
            .last()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        assert_eq!(row[row.len() - 2..], ["1h", "3d"], "{table}");
        assert!(
            table.contains("pg-1 80Mi@worker-1, pg-2 80Mi@worker-2, pg-3 64Mi@worker-3"),
            "{table}"
        );
        // Claims whose agents share nothing show no logical table.
        assert!(super::rows(&claims[2..], now).is_empty());
    }
}
