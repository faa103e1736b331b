//! How often the storage behind a CSI driver accepts a resize of one volume: a grow sent sooner
//! fails at the cloud (and stays in the claim as a resize error) instead of landing. A driver's
//! rule is a fixed gap between two modifications, a budget (so many per rolling window), or
//! both, and may require the previous modification to have completed first. The table is by
//! driver name, the PV's `spec.csi.driver` (as the kubelet records it in `vol_data.json`) or the
//! StorageClass's provisioner; `modificationInterval` overrides it per policy layer. Unknown
//! drivers have no rule.

use jiff::SignedDuration;

/// At most `count` modifications of one volume in any rolling `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub count: u32,
    pub window: SignedDuration,
    /// Each only once the previous one has completed (for headroom: its history's `landed`).
    pub after_landed: bool,
}

/// What a driver's storage allows: a least gap between two modifications, a budget, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub gap: Option<SignedDuration>,
    pub budget: Option<Budget>,
}

/// One driver whose storage limits how often a volume may be modified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Known {
    pub driver: &'static str,
    pub rule: Rule,
}

/// The known drivers and their documented limits.
pub const KNOWN: &[Known] = &[
    // AWS EBS. Since 15 January 2026, up to four modifications of a volume within a rolling 24 h,
    // each once the previous one has completed; before, one per six hours. aws-ebs-csi-driver
    // PR #2829 removed the six-hour cooldown from its docs; the EC2 API reference, ModifyVolume
    // (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_ModifyVolume.html), says "You
    // can modify a volume only after any previous modification for that volume has finished"
    // in its current revision. A modification the storage still counts as optimizing after the
    // filesystem grew is refused and shows as a resize error; headroom counts a modification
    // complete when the filesystem shows it (`landed`). pvc-autoresizer's issues #296 and #312
    // are grows stacking up inside the old rule; `modificationInterval: 6h` restores it.
    Known {
        driver: "ebs.csi.aws.com",
        rule: Rule {
            gap: None,
            budget: Some(Budget {
                count: 4,
                window: SignedDuration::from_hours(24),
                after_landed: true,
            }),
        },
    },
    // Google Compute Engine. The Hyperdisk pages as stored today ("About Hyperdisk",
    // https://cloud.google.com/compute/docs/disks/hyperdisks, and "Modify the settings of a
    // Hyperdisk volume", .../disks/modify-hyperdisks) say size, IOPS and throughput can be
    // adjusted, and no longer show the "once every 4 hours" sentence this entry was written
    // from; the provider docs built from the API (Pulumi's `provisionedThroughput`) still say
    // "hyperdisk allows for an update of Throughput every 4 hours". No newer rule for size was
    // found, so the 4 h gap stays. The same driver serves pd-* disks, for which no such limit is
    // documented, and its name does not tell them apart: a pd-* StorageClass may say
    // `headroom.dev/modification-interval: "0s"`.
    Known {
        driver: "pd.csi.storage.gke.io",
        rule: Rule {
            gap: Some(SignedDuration::from_hours(4)),
            budget: None,
        },
    },
    // Azure disk (disk.csi.azure.com): Azure's current pages document limits on performance
    // changes of Ultra and Premium SSD v2 disks and on performance tiers ("Performance tiers for
    // managed disks", https://learn.microsoft.com/azure/virtual-machines/disks-change-performance),
    // none on size increases ("Expand virtual hard disks on a Linux VM"), so it has no entry:
    // no rule.
];

/// The documented rule for modifying one volume of `driver`; `None` when the driver is unknown
/// or has no such limit.
pub fn rule(driver: &str) -> Option<Rule> {
    KNOWN
        .iter()
        .find(|k| k.driver == driver.trim())
        .map(|k| k.rule)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_and_unknown_drivers() {
        let ebs = rule("ebs.csi.aws.com").expect("known");
        assert_eq!(ebs.gap, None);
        assert_eq!(
            ebs.budget,
            Some(Budget {
                count: 4,
                window: SignedDuration::from_hours(24),
                after_landed: true
            })
        );
        assert_eq!(
            rule("pd.csi.storage.gke.io").and_then(|r| r.gap),
            Some(SignedDuration::from_hours(4))
        );
        assert_eq!(rule("disk.csi.azure.com"), None);
        assert_eq!(rule("topolvm.io"), None);
        assert_eq!(rule(""), None);
    }
}
