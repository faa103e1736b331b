//! Namespace ResourceQuotas on storage: how far a claim's request may grow before the API
//! server's quota admission refuses the write (403 "exceeded quota"), and what a step becomes
//! under that ceiling.
//!
//! The API server (the `ResourceQuota` admission plugin, kube-apiserver 1.20 to 1.34) charges a
//! claim `max(spec.resources.requests.storage, status.allocatedResources.storage)` to
//! `requests.storage` and to `<class>.storageclass.storage.k8s.io/requests.storage`, checks an
//! update's increase against each matching quota's `status.hard - status.used`, and refuses any
//! write while a matching quota has no `status.used` for a limited resource ("status unknown").

use serde::{Deserialize, Serialize};

use crate::quantity::{GI, MI};

/// One hard limit that applies to a claim, as its quota's status says it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaLine {
    /// The ResourceQuota's name.
    pub quota: String,
    /// `requests.storage` or `<class>.storageclass.storage.k8s.io/requests.storage`.
    pub resource: String,
    pub hard_bytes: u64,
    /// `None`: the quota controller has not counted it yet, and admission refuses every
    /// increase until it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
}

impl QuotaLine {
    /// What an increase may still take (nothing while usage is unknown).
    pub fn left(&self) -> u64 {
        self.used_bytes
            .map_or(0, |used| self.hard_bytes.saturating_sub(used))
    }
}

/// The line that leaves the least room, the first by quota and resource name on a tie (so the
/// status and the Event name the same quota scan after scan).
pub fn tightest(lines: &[QuotaLine]) -> Option<&QuotaLine> {
    lines
        .iter()
        .min_by(|a, b| (a.left(), &a.quota, &a.resource).cmp(&(b.left(), &b.quota, &b.resource)))
}

/// The largest request every line admits for a claim now charged `charged` bytes; `None` when
/// no quota limits the claim.
pub fn ceiling(lines: &[QuotaLine], charged: u64) -> Option<u64> {
    tightest(lines).map(|l| charged.saturating_add(l.left()))
}

/// A step cut to `ceiling` (rounded down to the unit sizes grow in: whole Gi from 1Gi, whole Mi
/// below), when that still grows the claim and reaches `floor`.
pub fn fit(current: u64, floor: u64, ceiling: u64) -> Option<u64> {
    let unit = if current >= GI { GI } else { MI };
    let cap = ceiling / unit * unit;
    (cap > current && cap >= floor).then_some(cap)
}

/// What the claim's quotas say, for its status, its Event and `/volumes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaView {
    /// The tightest line.
    #[serde(flatten)]
    pub line: QuotaLine,
    /// Bytes the claim's request may still grow by.
    pub left_bytes: u64,
    /// The API server refused this claim's last grow as over quota, and the namespace's quotas
    /// have not changed since: no room is assumed until they do.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refused: bool,
}

impl QuotaView {
    pub fn of(lines: &[QuotaLine], refused: bool) -> Option<QuotaView> {
        tightest(lines).map(|l| QuotaView {
            line: l.clone(),
            left_bytes: if refused { 0 } else { l.left() },
            refused,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(quota: &str, resource: &str, hard: u64, used: Option<u64>) -> QuotaLine {
        QuotaLine {
            quota: quota.into(),
            resource: resource.into(),
            hard_bytes: hard,
            used_bytes: used,
        }
    }

    #[test]
    fn the_tightest_line_sets_the_ceiling() {
        let lines = [
            line("ns", "requests.storage", 200 * MI, Some(100 * MI)),
            line(
                "gold",
                "gold.storageclass.storage.k8s.io/requests.storage",
                100 * MI,
                Some(84 * MI),
            ),
        ];
        assert_eq!(tightest(&lines).map(|l| l.quota.as_str()), Some("gold"));
        assert_eq!(ceiling(&lines, 64 * MI), Some(80 * MI));
        assert_eq!(ceiling(&[], 64 * MI), None);
    }

    #[test]
    fn unknown_or_overspent_usage_leaves_nothing() {
        assert_eq!(line("q", "requests.storage", 100, None).left(), 0);
        assert_eq!(line("q", "requests.storage", 100, Some(150)).left(), 0);
        assert_eq!(
            ceiling(&[line("q", "requests.storage", 100, None)], 64),
            Some(64)
        );
        // Huge numbers saturate instead of wrapping.
        assert_eq!(
            ceiling(
                &[line("q", "requests.storage", u64::MAX, Some(0))],
                u64::MAX
            ),
            Some(u64::MAX)
        );
    }

    #[test]
    fn a_tie_names_the_same_quota_every_time() {
        let a = line("b", "requests.storage", 10, Some(5));
        let b = line("a", "requests.storage", 10, Some(5));
        assert_eq!(tightest(&[a.clone(), b.clone()]), Some(&b));
        assert_eq!(tightest(&[b.clone(), a]), Some(&b));
    }

    #[test]
    fn a_cut_step_rounds_down_and_must_still_do_its_job() {
        // 64Mi claim, 16Mi wanted, 10.5Mi left: 74Mi lands if 70Mi is enough.
        assert_eq!(fit(64 * MI, 70 * MI, 64 * MI + 21 * MI / 2), Some(74 * MI));
        assert_eq!(fit(64 * MI, 75 * MI, 64 * MI + 21 * MI / 2), None);
        // Less than one unit left: no grow at all.
        assert_eq!(fit(64 * MI, 64 * MI + 1, 64 * MI + MI / 2), None);
        // From 1Gi up, whole Gi.
        assert_eq!(fit(10 * GI, 11 * GI, 12 * GI + 900 * MI), Some(12 * GI));
        assert_eq!(fit(10 * GI, 11 * GI, 10 * GI + 900 * MI), None);
    }

    #[test]
    fn a_refusal_shows_no_room_left() {
        let v = QuotaView::of(&[line("q", "requests.storage", 100, Some(10))], true);
        assert_eq!(v.map(|v| (v.left_bytes, v.refused)), Some((0, true)));
    }
}
