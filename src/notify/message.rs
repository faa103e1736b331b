//! What one message says, built from what the scan decided: names, sizes, reasons and times.
//! Nothing read from the tenant's volume and no Event note (those can quote a replication slot's
//! name or a driver's error text) goes in.

use jiff::Timestamp;
use serde::Serialize;

use super::{Format, Kind};
use crate::decide::recommend::Recommendation;
use crate::decide::{BlockReason, GrowKind};
use crate::quantity;
use crate::report::VolumeReport;

/// One thing to tell about a claim. The generic JSON payload is this, field for field.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    pub kind: Kind,
    pub namespace: String,
    pub claim: String,
    pub node: String,
    /// The Event's reason (`Resized`, `AtLimit`, `ExpansionInfeasible`, ...).
    pub reason: &'static str,
    /// Why growth is refused, as the status annotation and metrics name it (`at_limit`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked: Option<&'static str>,
    /// The grow's kind (`Grow`, `EmergencyGrow`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grow: Option<&'static str>,
    /// The claim's size before (a grow), or now (a block).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_bytes: Option<u64>,
    /// The size asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<u64>,
    /// The deadline that motivates acting: when the filesystem is full at the fill rate measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub full_at: Option<Timestamp>,
    /// When the block lifts by itself (the next budget slot, the window, modificationInterval).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<Timestamp>,
    /// The recommendation's id, what a person approves (`headroom.dev/approve`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recommendation: Option<String>,
    pub time: Timestamp,
}

impl Message {
    fn of(report: &VolumeReport, kind: Kind, reason: &'static str, now: Timestamp) -> Self {
        let full_at = report
            .decision
            .seconds_to_full
            .filter(|s| s.is_finite() && *s >= 0.0 && *s < 1e10)
            .and_then(|s| now.checked_add(jiff::SignedDuration::from_secs_f64(s)).ok());
        Message {
            kind,
            namespace: report.namespace.clone(),
            claim: report.pvc.clone(),
            node: report.node.clone(),
            reason,
            blocked: None,
            grow: None,
            from_bytes: Some(report.claim.current_bytes()),
            to_bytes: None,
            limit_bytes: report.limit_bytes,
            full_at,
            until: None,
            recommendation: None,
            time: now,
        }
    }

    /// A grow the API server accepted.
    pub fn grown(
        report: &VolumeReport,
        (kind, from, to): (GrowKind, u64, u64),
        now: Timestamp,
    ) -> Self {
        Message {
            grow: Some(kind.as_str()),
            from_bytes: Some(from),
            to_bytes: Some(to),
            ..Message::of(report, Kind::Grown, "Resized", now)
        }
    }

    /// A grow held for a person (the `GrowRecommended` Event), with its deadline and id.
    pub fn recommended(report: &VolumeReport, rec: &Recommendation, now: Timestamp) -> Self {
        Message {
            grow: Some(rec.kind.as_str()),
            from_bytes: Some(rec.from_bytes),
            to_bytes: Some(rec.to_bytes),
            full_at: rec.full_at,
            until: Some(rec.stale_at),
            recommendation: Some(rec.id.clone()),
            ..Message::of(report, Kind::Recommended, "GrowRecommended", now)
        }
    }

    /// A refusal announced as the Event `reason`; `None` when the report is not blocked.
    pub fn blocked(report: &VolumeReport, reason: &'static str, now: Timestamp) -> Option<Self> {
        let block = report.decision.blocked_reason()?;
        let kind = if block == BlockReason::ResizeFailed {
            Kind::ResizeFailed
        } else {
            Kind::Blocked
        };
        let d = &report.decision;
        let until = match block {
            BlockReason::BudgetExhausted => d.next_slot,
            BlockReason::ModificationInterval => d.next_grow,
            BlockReason::OutsideWindow => d.next_window,
            _ => None,
        };
        Some(Message {
            blocked: Some(block.as_str()),
            to_bytes: d.target_bytes,
            until,
            ..Message::of(report, kind, reason, now)
        })
    }

    /// The request's body in `format`.
    pub fn payload(&self, format: Format) -> Vec<u8> {
        let value = match format {
            Format::Json => serde_json::to_value(self),
            Format::Slack => Ok(serde_json::json!({ "text": self.text() })),
        };
        value
            .and_then(|v| serde_json::to_vec(&v))
            .unwrap_or_default()
    }

    /// One line a person reads in a channel.
    pub fn text(&self) -> String {
        let who = format!("{}/{} (node {})", self.namespace, self.claim, self.node);
        let size = |b: Option<u64>| b.map_or_else(|| "?".to_string(), quantity::format);
        let mut line = match self.kind {
            Kind::Grown => format!(
                "headroom grew {who} from {} to {} ({})",
                size(self.from_bytes),
                size(self.to_bytes),
                self.grow.unwrap_or("grow")
            ),
            Kind::Blocked => format!(
                "headroom cannot grow {who}: {} ({}), at {}",
                self.blocked.unwrap_or("blocked"),
                self.reason,
                size(self.from_bytes)
            ),
            Kind::ResizeFailed => format!(
                "a resize of {who} failed: {}; headroom will not grow it until this is resolved",
                self.reason
            ),
            Kind::Recommended => format!(
                "headroom recommends growing {who} from {} to {} ({}), recommendation {}; approve with headroom approve -n {} {}",
                size(self.from_bytes),
                size(self.to_bytes),
                self.grow.unwrap_or("grow"),
                self.recommendation.as_deref().unwrap_or("?"),
                self.namespace,
                self.claim
            ),
        };
        if let Some(l) = self.limit_bytes {
            line.push_str(&format!(", limit {}", quantity::format(l)));
        }
        if let Some(t) = self.full_at {
            line.push_str(&format!("; full at {t} at the current rate"));
        }
        if let Some(t) = self.until {
            let until = match self.kind {
                Kind::Recommended => "stale at",
                _ => "until",
            };
            line.push_str(&format!("; {until} {t}"));
        }
        line
    }
}
