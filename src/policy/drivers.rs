//! How often the storage behind a CSI driver accepts a resize of one volume: a grow sent sooner
//! fails at the cloud (and stays in the claim as a resize error) instead of landing. The table
//! is by driver name, the PV's `spec.csi.driver` (as the kubelet records it in `vol_data.json`)
//! or the StorageClass's provisioner; `modificationInterval` overrides it per policy layer.
//! Unknown drivers have no interval.

use jiff::SignedDuration;

/// One driver whose storage limits how often a volume may be modified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Known {
    pub driver: &'static str,
    pub interval: SignedDuration,
}

/// The known drivers and their documented limits.
pub const KNOWN: &[Known] = &[
    // AWS EBS. EC2 API reference, ModifyVolume: "After modifying a volume, you must wait at
    // least six hours and ensure that the volume is in the in-use or available state before you
    // can modify the same volume" (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/
    // API_ModifyVolume.html). Newer revisions of the same page say "up to four times within a
    // rolling 24-hour period ... all previous modifications ... complete"; one per 6 h satisfies
    // both wordings. pvc-autoresizer's issues #296 and #312 are grows stacking up inside it.
    Known {
        driver: "ebs.csi.aws.com",
        interval: SignedDuration::from_hours(6),
    },
    // Google Compute Engine. "About Hyperdisk": "You can adjust provisioned IOPS, throughput,
    // and the size of a volume ... once every 4 hours"
    // (https://cloud.google.com/compute/docs/disks/hyperdisks). The same driver serves pd-*
    // disks, for which no such limit is documented, and its name does not tell them apart: a
    // pd-* StorageClass may say `headroom.dev/modification-interval: "0s"`.
    Known {
        driver: "pd.csi.storage.gke.io",
        interval: SignedDuration::from_hours(4),
    },
    // Azure disk (disk.csi.azure.com): Azure documents a limit on performance changes of Ultra
    // and Premium SSD v2 disks, not on size increases ("Expand virtual hard disks on a Linux
    // VM", learn.microsoft.com), so it has no entry: no interval.
];

/// The documented minimum time between two resizes of one volume of `driver`; `None` when the
/// driver is unknown or has no such limit.
pub fn modification_interval(driver: &str) -> Option<SignedDuration> {
    KNOWN
        .iter()
        .find(|k| k.driver == driver.trim())
        .map(|k| k.interval)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_and_unknown_drivers() {
        assert_eq!(
            modification_interval("ebs.csi.aws.com"),
            Some(SignedDuration::from_hours(6))
        );
        assert_eq!(
            modification_interval("pd.csi.storage.gke.io"),
            Some(SignedDuration::from_hours(4))
        );
        assert_eq!(modification_interval("disk.csi.azure.com"), None);
        assert_eq!(modification_interval("topolvm.io"), None);
        assert_eq!(modification_interval(""), None);
    }
}
