//! Everything tenants write that the policy layer parses, fed arbitrary and extreme input: no
//! parser panics, and neither does anything computed from what they accept (windows at the ends
//! of time, reclaim schedules). Case counts are bounded so this runs in seconds.

use std::collections::BTreeMap;

use jiff::Timestamp;
use proptest::prelude::*;

use super::fields::FIELDS;
use super::merge::{effective_with_limits, parse_configmap};
use super::window::{MaintenanceWindow, parse_cron, parse_duration, parse_timezone};
use super::{Context, PolicySpec, parse_policy_yaml, reclaim, topolvm, validate, value};
use crate::quantity;
use crate::reclaim::schedule::next_occurrence;

/// Values that broke parsers elsewhere, or sit on the edges of types: far future and far past,
/// huge and negative numbers, exponents, odd units, control characters, YAML specials.
pub(crate) const NASTY: &[&str] = &[
    "",
    " ",
    "-",
    "+",
    ".",
    "0",
    "-0",
    "-1",
    "18446744073709551615",
    "18446744073709551616",
    "340282366920938463463374607431768211456",
    "99999999999999999999999999999999999999999999999999Ei",
    "1e308",
    "1e-308",
    "1E19",
    "9e18",
    "0.000000000000000000000000000000000001m",
    "0.00000000000000000000000000000000000000001",
    "1.5",
    "NaN",
    "inf",
    "-inf",
    "100%",
    "101%",
    "-5%",
    "1000000000000000%",
    "9999-12-30T00:00:00Z",
    "-009999-01-02T01:59:59Z",
    "0000-01-01T00:00:00Z",
    "1970-01-01T00:00:00Z",
    "9999999h",
    "PT9999999999H",
    "-1h",
    "2562047788015215h30m7s",
    "P1000000Y",
    "* * * * * * *",
    "0 0 31 2 *",
    "@yearly",
    "59 23 31 12 * 2099",
    "0 0 1 1 * 9999",
    "*/0 * * * *",
    "1-0 * * * *",
    "Europe/Nowhere",
    "../../../../etc/passwd",
    "UTC\u{0}",
    "\u{feff}true",
    "true\n",
    "~",
    "null",
    "[1, 2]",
    "{a: 1}",
    "&a [*a]",
    "!!binary aGVsbG8=",
];

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(NASTY).prop_map(str::to_string),
        2 => any::<String>(),
        2 => "[-+0-9.eE%a-zA-Z/*@ ]{0,24}",
    ]
}

fn any_time() -> impl Strategy<Value = Timestamp> {
    prop_oneof![
        Just(Timestamp::MIN),
        Just(Timestamp::MAX),
        Just(Timestamp::UNIX_EPOCH),
        (Timestamp::MIN.as_second()..=Timestamp::MAX.as_second())
            .prop_map(|s| Timestamp::from_second(s).unwrap_or(Timestamp::UNIX_EPOCH)),
    ]
}

fn annotation_map(keys: Vec<&'static str>) -> impl Strategy<Value = BTreeMap<String, String>> {
    proptest::collection::btree_map(
        proptest::sample::select(keys).prop_map(str::to_string),
        text(),
        0..10,
    )
}

fn policy_keys() -> Vec<&'static str> {
    let mut keys: Vec<&'static str> = FIELDS.iter().map(|f| f.annotation).collect();
    keys.extend([
        topolvm::ENABLED,
        topolvm::THRESHOLD,
        topolvm::INODES_THRESHOLD,
        topolvm::INCREASE,
        topolvm::STORAGE_LIMIT,
        reclaim::CSI_ADDONS_SCHEDULE,
        "headroom.dev/reclaim-space-enabled",
        "headroom.dev/reclaim-space-schedule",
        "headroom.dev/reclaim-space-timezone",
        "headroom.dev/unknown-key",
    ]);
    keys
}

/// A YAML document built from known keys and nasty values, or arbitrary text.
fn yaml() -> impl Strategy<Value = String> {
    let keys: Vec<&'static str> = FIELDS.iter().map(|f| f.path).collect();
    prop_oneof![
        proptest::collection::vec((proptest::sample::select(keys), text()), 0..8).prop_map(
            |entries| {
                entries
                    .iter()
                    .map(|(k, v)| format!("{k}: {}\n", serde_json::json!(v)))
                    .collect::<String>()
            }
        ),
        any::<String>(),
        proptest::sample::select(NASTY).prop_map(str::to_string),
    ]
}

fn exercise_window(w: &MaintenanceWindow, at: Timestamp) {
    let _ = w.is_open(at);
    let _ = w.open_since(at);
    let _ = w.next_open(at);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn scalar_parsers_never_panic(s in text()) {
        let _ = quantity::parse(&s);
        let _ = value::size(&s);
        let _ = value::step(&s);
        let _ = value::boolean(&s);
        let _ = value::mode(&s);
        let _ = value::integer(&s, 0, 100, "percent");
        let _ = parse_duration(&s);
        let _ = parse_timezone(&s);
        let _ = parse_cron(&s);
    }

    #[test]
    fn accepted_quantities_round_trip(s in text()) {
        if let Ok(b) = quantity::parse(&s) {
            prop_assert_eq!(quantity::parse(&quantity::format(b)), Ok(b));
            let _ = quantity::human(b);
        }
    }

    #[test]
    fn windows_at_any_time(
        schedule in text(),
        duration in text(),
        tz in text(),
        at in any_time(),
    ) {
        for (s, d, z) in [
            (schedule.as_str(), duration.as_str(), tz.as_str()),
            (schedule.as_str(), "4h", "UTC"),
            ("0 3 * * 0", "4h", tz.as_str()),
            ("0 3 * * 0", duration.as_str(), "Pacific/Kiritimati"),
        ] {
            if let Ok(w) = MaintenanceWindow::new(s, d, z) {
                exercise_window(&w, at);
            }
        }
    }

    #[test]
    fn reclaim_schedules_at_any_time(schedule in text(), tz in text(), at in any_time()) {
        if let (Ok(cron), Ok(tz)) = (parse_cron(&schedule), parse_timezone(&tz)) {
            let _ = next_occurrence(&cron, &tz, at);
        }
    }

    #[test]
    fn policy_yaml_never_panics(doc in yaml()) {
        let v = parse_policy_yaml(&doc, &Context { current_size: Some(u64::MAX), wal_has_own_volume: Some(false), driver_rule: None, min_available_source: None });
        prop_assert_eq!(v.policy.is_some(), v.errors.is_empty());
        let _ = PolicySpec::from_yaml(&doc, Some("x"));
        let _ = reclaim::parse_global(&doc, "ns/cm");
    }

    #[test]
    fn configmap_never_panics(
        policy in yaml(),
        classes in prop_oneof![
            yaml().prop_map(|y| format!("fast:\n{}", y.lines().map(|l| format!("  {l}\n")).collect::<String>())),
            any::<String>(),
        ],
        reclaim_yaml in yaml(),
    ) {
        let data: BTreeMap<String, String> = [
            ("policy.yaml".to_string(), policy),
            ("storageClasses.yaml".to_string(), classes),
            ("reclaimSpace.yaml".to_string(), reclaim_yaml),
        ]
        .into();
        let central = parse_configmap(&data, "headroom/headroom");
        let merged = effective_with_limits("db/x", &BTreeMap::new(), Some(("fast", &BTreeMap::new())), None, &central);
        let _ = validate(&merged.spec, &Context::default());
    }

    #[test]
    fn annotations_never_panic(
        pvc in annotation_map(policy_keys()),
        class in annotation_map(policy_keys()),
        spec_limit in proptest::option::of(text()),
        size in prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()],
        at in any_time(),
    ) {
        let central = parse_configmap(&BTreeMap::new(), "headroom/headroom");
        let merged = effective_with_limits("db/x", &pvc, Some(("fast", &class)), spec_limit.as_deref(), &central);
        let v = validate(&merged.spec, &Context { current_size: Some(size), wal_has_own_volume: None, driver_rule: None, min_available_source: None });
        if let Some(w) = v.policy.as_ref().and_then(|p| p.maintenance_window.as_ref()) {
            exercise_window(w, at);
        }
        let _ = topolvm::layers("db/x", &pvc, Some(("fast", &class)), spec_limit.as_deref());
        let r = reclaim::resolve("db/x", &pvc, Some(("fast", &class)), &central);
        let _ = format!("{r:?}");
    }
}

#[test]
fn every_nasty_value_in_every_policy_annotation_is_refused_or_accepted_without_panic() {
    let central = parse_configmap(&BTreeMap::new(), "headroom/headroom");
    for key in policy_keys() {
        for v in NASTY {
            let a: BTreeMap<String, String> = [
                ("headroom.dev/enabled".to_string(), "true".to_string()),
                ("headroom.dev/limit".to_string(), "100Gi".to_string()),
                (key.to_string(), v.to_string()),
            ]
            .into();
            let merged = effective_with_limits("db/x", &a, Some(("fast", &a)), Some(v), &central);
            let v = validate(&merged.spec, &Context::default());
            for at in [Timestamp::MIN, Timestamp::MAX] {
                if let Some(w) = v
                    .policy
                    .as_ref()
                    .and_then(|p| p.maintenance_window.as_ref())
                {
                    exercise_window(w, at);
                }
            }
        }
    }
}

#[test]
fn huge_and_far_values_are_errors_naming_the_annotation() {
    let central = parse_configmap(&BTreeMap::new(), "headroom/headroom");
    for (key, value) in [
        (
            "headroom.dev/limit",
            "99999999999999999999999999999999999999999999999999Ei",
        ),
        ("headroom.dev/limit", "-1Gi"),
        (
            "headroom.dev/limit",
            "0.000000000000000000000000000000000001m",
        ),
        (
            "headroom.dev/maintenance-window-duration",
            "2562047788015215h30m7s",
        ),
        (
            "headroom.dev/maintenance-window-duration",
            "9999-12-30T00:00:00Z",
        ),
        ("headroom.dev/maintenance-window-schedule", "0 0 1 1 * 9999"),
        (
            "headroom.dev/maintenance-window-timezone",
            "../../../../etc/passwd",
        ),
        ("headroom.dev/usage-threshold", "18446744073709551616"),
        ("headroom.dev/max-actions-per-day", "1e308"),
    ] {
        let mut a: BTreeMap<String, String> = [
            ("headroom.dev/enabled".to_string(), "true".to_string()),
            ("headroom.dev/limit".to_string(), "100Gi".to_string()),
        ]
        .into();
        if key.starts_with("headroom.dev/maintenance-window") {
            a.insert("headroom.dev/mode".into(), "convergent".into());
            a.insert(
                "headroom.dev/maintenance-window-schedule".into(),
                "0 3 * * 0".into(),
            );
        }
        a.insert(key.to_string(), value.to_string());
        let merged = effective_with_limits("db/x", &a, None, None, &central);
        let v = validate(&merged.spec, &Context::default());
        let window_far = key.ends_with("schedule") && v.errors.is_empty();
        if window_far {
            // A schedule in year 9999 is valid cron; it must simply never open (nor panic).
            let w = v.policy.as_ref().and_then(|p| p.maintenance_window.clone());
            let w = w.expect("window");
            assert!(!w.is_open(Timestamp::UNIX_EPOCH));
            exercise_window(&w, Timestamp::MAX);
            continue;
        }
        assert!(v.policy.is_none(), "{key}={value} accepted");
        let path = FIELDS
            .iter()
            .find(|f| f.annotation == key)
            .map(|f| f.path)
            .expect("a policy key");
        assert!(
            v.errors.iter().any(|f| f.field == path),
            "{key}={value}: {:?}",
            v.errors
        );
    }
}
