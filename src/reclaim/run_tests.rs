//! The per-scan decision of [`Reclaimer::run_due`] on the paths that need no API call (dry run
//! stands in for the trim, so the schedule bookkeeping is exercised without a cluster).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimSpec};

use super::{Plan, Reclaimer, Target};
use crate::policy::merge::{CentralPolicy, parse_configmap};
use crate::probe::{Volume, VolumeClass, VolumeMode};

fn ts(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

fn reclaimer() -> Reclaimer {
    // Never contacted on these paths: port 1 refuses.
    let cfg = kube::Config::new("http://127.0.0.1:1".parse().expect("url"));
    let client = kube::Client::try_from(cfg).expect("client");
    Reclaimer::new(client, "node-a", true, Duration::from_secs(1)).expect("reclaimer")
}

fn volume(mode: VolumeMode, class: VolumeClass) -> Volume {
    let mut v = Volume::new(
        PathBuf::from("/var/lib/kubelet/pods/u/volumes/x/mount"),
        mode,
    );
    v.class = class;
    v.mounted = true;
    v.device = Some("7:3".into());
    v
}

fn pvc(annotations: &[(&str, &str)]) -> PersistentVolumeClaim {
    let mut p = PersistentVolumeClaim::default();
    p.metadata.namespace = Some("db".into());
    p.metadata.name = Some("data-0".into());
    p.metadata.annotations = Some(
        annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
    );
    p.spec = Some(PersistentVolumeClaimSpec::default());
    p
}

fn t<'a>(
    volume: &'a Volume,
    pvc: &'a PersistentVolumeClaim,
    central: &'a CentralPolicy,
    node_draining: bool,
) -> Target<'a> {
    Target {
        volume,
        pvc,
        storage_class: None,
        namespace: None,
        driver: None,
        central,
        node_draining,
    }
}

#[tokio::test]
async fn decides_per_scan_without_touching_the_api() {
    let r = reclaimer();
    let central = CentralPolicy::default();
    let on = pvc(&[
        ("headroom.dev/reclaim-space-enabled", "true"),
        ("headroom.dev/reclaim-space-schedule", "@daily"),
    ]);
    let owned = volume(VolumeMode::Filesystem, VolumeClass::OwnedBlock);

    for (v, why) in [
        // Covered below: a block-mode claim that asks to be trimmed is told why (an Event).
        (
            volume(VolumeMode::Filesystem, VolumeClass::SharedNetwork),
            "shared",
        ),
        (
            volume(VolumeMode::Filesystem, VolumeClass::Directory),
            "shared",
        ),
    ] {
        match r
            .run_due(&t(&v, &on, &central, false), ts("2026-01-05T10:00:00Z"))
            .await
        {
            Plan::NotEligible(m) => assert!(m.contains(why), "{m}"),
            other => panic!("{why}: {other:?}"),
        }
    }
    let off = pvc(&[]);
    assert!(matches!(
        r.run_due(
            &t(&owned, &off, &central, false),
            ts("2026-01-05T10:00:00Z")
        )
        .await,
        Plan::Off(_)
    ));

    // First seen at 10:00: due at the next midnight, not now.
    assert_eq!(
        r.run_due(&t(&owned, &on, &central, false), ts("2026-01-05T10:00:00Z"))
            .await,
        Plan::NotDue(Some(ts("2026-01-06T00:00:00Z")))
    );
    assert_eq!(
        r.run_due(&t(&owned, &on, &central, true), ts("2026-01-06T00:00:10Z"))
            .await,
        Plan::Draining
    );
    assert_eq!(
        r.run_due(&t(&owned, &on, &central, false), ts("2026-01-06T00:00:10Z"))
            .await,
        Plan::WouldTrim
    );
    // The run is remembered even before the claim shows it: not again until the next midnight.
    assert_eq!(
        r.run_due(&t(&owned, &on, &central, false), ts("2026-01-06T00:00:20Z"))
            .await,
        Plan::NotDue(Some(ts("2026-01-07T00:00:00Z")))
    );

    // A last run recorded on the claim (by another node, or before a restart) counts too.
    let recorded = pvc(&[
        ("headroom.dev/reclaim-space-enabled", "true"),
        (
            "headroom.dev/reclaim",
            r#"{"at":"2026-01-08T00:00:03Z","bytes":1,"durationMs":1,"result":"Succeeded","node":"node-b"}"#,
        ),
    ]);
    let mut other = recorded.clone();
    other.metadata.name = Some("data-1".into());
    assert_eq!(
        r.run_due(
            &t(&owned, &other, &central, false),
            ts("2026-01-09T00:00:00Z")
        )
        .await,
        Plan::NotDue(Some(ts("2026-01-11T00:00:00Z"))) // default @weekly: Sunday
    );

    // The ConfigMap's switch stops it all.
    let off_everywhere = parse_configmap(
        &BTreeMap::from([(
            "reclaimSpace.yaml".to_string(),
            "enabled: false".to_string(),
        )]),
        "headroom/headroom",
    );
    let t2 = Target {
        namespace: None,
        driver: None,
        volume: &owned,
        pvc: &on,
        storage_class: None,
        central: &off_everywhere,
        node_draining: false,
    };
    assert!(matches!(
        r.run_due(&t2, ts("2026-02-01T00:00:00Z")).await,
        Plan::Off(_)
    ));
}

#[tokio::test]
async fn a_last_trim_dated_in_the_far_future_is_ignored() {
    let r = reclaimer();
    let central = CentralPolicy::default();
    let owned = volume(VolumeMode::Filesystem, VolumeClass::OwnedBlock);
    for at in ["9999-12-30T00:00:00Z", "2026-01-05T10:05:01Z"] {
        let record =
            format!(r#"{{"at":"{at}","bytes":1,"durationMs":1,"result":"Succeeded","node":"n"}}"#);
        let mut claim = pvc(&[
            ("headroom.dev/reclaim-space-enabled", "true"),
            ("headroom.dev/reclaim-space-schedule", "@daily"),
            ("headroom.dev/reclaim", record.as_str()),
        ]);
        claim.metadata.name = Some(format!("future-{at}"));
        // As if none were recorded: due at the next midnight after first seen, not in year 9999.
        assert_eq!(
            r.run_due(
                &t(&owned, &claim, &central, false),
                ts("2026-01-05T10:00:00Z")
            )
            .await,
            Plan::NotDue(Some(ts("2026-01-06T00:00:00Z"))),
            "{at}"
        );
    }
    // Within the clock-skew allowance the record counts.
    let mut near = pvc(&[
        ("headroom.dev/reclaim-space-enabled", "true"),
        ("headroom.dev/reclaim-space-schedule", "@daily"),
        (
            "headroom.dev/reclaim",
            r#"{"at":"2026-01-06T00:04:00Z","bytes":1,"durationMs":1,"result":"Succeeded","node":"n"}"#,
        ),
    ]);
    near.metadata.name = Some("near".into());
    assert_eq!(
        r.run_due(
            &t(&owned, &near, &central, false),
            ts("2026-01-06T00:00:10Z")
        )
        .await,
        Plan::NotDue(Some(ts("2026-01-07T00:00:00Z")))
    );
}

/// Issue 24 (ReclaimSpace design): a block-mode claim has no filesystem on the node; one that
/// asks to be trimmed is told why the node agent cannot (the storage controller reclaims such
/// volumes), once, instead of a bare failure. One that does not ask is left alone silently.
/// (The `ReclaimNotPossible` Event is attempted against a refusing address here; the dry run
/// writes no record.)
#[tokio::test]
async fn a_block_mode_claim_that_asks_to_be_trimmed_is_told_why() {
    let r = reclaimer();
    let central = CentralPolicy::default();
    let block = volume(VolumeMode::Block, VolumeClass::OwnedBlock);
    let on = pvc(&[(crate::policy::reclaim::CSI_ADDONS_SCHEDULE, "@daily")]);
    match r
        .run_due(&t(&block, &on, &central, false), ts("2026-01-05T10:00:00Z"))
        .await
    {
        Plan::NotEligible(m) => {
            assert_eq!(m, super::BLOCK_MODE);
            assert!(m.contains("block-mode") && m.contains("controller"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    // Said once per claim: the agent remembers it.
    assert_eq!(r.announced("db/data-0").as_deref(), Some(super::BLOCK_MODE));
    let off = pvc(&[]);
    let quiet = reclaimer();
    assert!(matches!(
        quiet
            .run_due(
                &t(&block, &off, &central, false),
                ts("2026-01-05T10:00:00Z")
            )
            .await,
        Plan::NotEligible(_)
    ));
    assert_eq!(quiet.announced("db/data-0"), None);
}
