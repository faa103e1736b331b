//! The engine's invariants, over generated policies, measurements, claims, histories and WAL
//! states: at least 10^5 single decisions and 10^5 decisions replayed in sequences.

use jiff::{SignedDuration, Timestamp};
use proptest::prelude::*;

use super::budget::WINDOW;
use super::*;
use crate::policy::{EmergencyGrow, MaintenanceWindow, Mode, Policy, Step, WalSafety};
use crate::quantity::GI;

const MI: u64 = 1 << 20;

fn windows() -> Vec<MaintenanceWindow> {
    [
        ("0 3 * * 0", "4h", "America/New_York"),
        ("30 2 * * *", "1h", "Europe/Berlin"),
        ("0 */6 * * *", "30m", "UTC"),
        ("0 22 * * 1-5", "3h", "Asia/Tokyo"),
    ]
    .iter()
    .map(|(s, d, z)| MaintenanceWindow::new(s, d, z).expect("window"))
    .collect()
}

prop_compose! {
    pub(super) fn policy()(
        convergent in any::<bool>(),
        limit_gi in 1u64..2048,
        usage_threshold in proptest::option::of(1u8..=99),
        min_available in prop_oneof![Just(0u64), 0u64..50 * GI],
        inode_threshold in 1u8..=99,
        step in prop_oneof![(1u32..=200).prop_map(Step::Percent), (1u64..100 * GI).prop_map(Step::Bytes)],
        min_step in 0u64..10 * GI,
        extra_max in 0u64..600 * GI,
        max_actions in 0u32..=10,
        emergency_max in 0u32..=10,
        reserved_frac in 0u32..=10,
        request in proptest::option::of(0u64..2048 * GI),
        target_buffer in 5u8..=50,
        window in proptest::option::of(0usize..4),
        emergency in any::<bool>(),
        critical in 80u8..=99,
        critical_free in 0u64..5 * GI,
        exceed in any::<bool>(),
        ack in any::<bool>(),
        require in any::<bool>(),
        max_pending in 0u64..200,
        max_slot in proptest::option::of(0u64..20 * GI),
        max_age in proptest::option::of(0u64..3600),
        predictive in any::<bool>(),
        lead_s in 1i64..600,
        interval_m in proptest::option::weighted(0.3, 1i64..720),
        per_window in proptest::option::weighted(0.3, (1u32..=5, 1i64..48, any::<bool>())),
        floor_on_claim in any::<bool>(),
        evict in any::<bool>(),
    ) -> Policy {
        let limit = limit_gi * GI;
        Policy {
            enabled: true,
            mode: if convergent { Mode::Convergent } else { Mode::Threshold },
            limit,
            logical_volume: crate::policy::LogicalVolume::Auto,
            offline_expansion: if evict {
                crate::policy::OfflineExpansion::Evict
            } else {
                crate::policy::OfflineExpansion::Off
            },
            node_expansion: crate::policy::NodeExpansion::Online,
            enforcement: crate::policy::Enforcement::Act,
            resize_through: crate::policy::ResizeThrough::Claim,
            usage_threshold,
            min_available: crate::policy::MinAvailable::Bytes(min_available),
            inode_threshold,
            step,
            min_step,
            max_step: min_step + extra_max,
            max_actions_per_day: max_actions,
            request: request.map(|r| r.min(limit)),
            target_buffer,
            predictive: crate::policy::Predictive {
                enabled: predictive,
                resize_lead_time: SignedDuration::from_secs(lead_s),
                margin: SignedDuration::from_secs(lead_s / 4),
            },
            modification_interval: interval_m.map(SignedDuration::from_mins),
            modification_budget: per_window.map(|(count, hours, after_landed)| crate::policy::drivers::Budget {
                count,
                window: SignedDuration::from_hours(hours),
                after_landed,
            }),
            maintenance_window: window.map(|i| windows()[i].clone()),
            emergency_grow: EmergencyGrow {
                enabled: emergency,
                critical_threshold: critical,
                critical_minimum_free: critical_free,
                exceed_limit_on_emergency: exceed,
                max_actions_per_day: emergency_max,
                reserved_actions_for_emergency: reserved_frac.min(emergency_max),
            },
            wal_safety: WalSafety {
                acknowledge_wal_risk: ack,
                require_archive_healthy: require,
                max_pending_wal_files: max_pending,
                max_slot_retention_bytes: max_slot,
                max_pending_wal_age_seconds: max_age.unwrap_or(900),
                alert_on_resize: true,
            },
            fallback: None,
            floor_on_claim,
            pool_reserve: crate::policy::PoolReserve::Bytes(0),
        }
    }
}

pub(super) fn wal() -> impl Strategy<Value = Option<WalHealth>> {
    proptest::option::of(
        (
            proptest::option::of(any::<bool>()),
            proptest::option::of(any::<bool>()),
            proptest::option::of(0u64..300),
            proptest::option::of(proptest::collection::vec(0u64..30 * GI, 0..3)),
        )
            .prop_map(|(configured, healthy, pending, slots)| WalHealth {
                archive_configured: configured,
                archive_healthy: healthy,
                pending_files: pending,
                inactive_slots: slots.map(|v| {
                    v.into_iter()
                        .enumerate()
                        .map(|(i, b)| SlotRetention {
                            name: format!("s{i}"),
                            retained_bytes: b,
                            activity: if i % 2 == 0 {
                                SlotActivity::Inactive
                            } else {
                                SlotActivity::Unknown
                            },
                            restart_lsn: None,
                        })
                        .collect()
                }),
                ..WalHealth::default()
            }),
    )
}

pub(super) fn facts() -> impl Strategy<Value = VolumeFacts> {
    (
        0u8..4,
        any::<bool>(),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.9),
        prop::bool::weighted(0.05),
        any::<bool>(),
        prop::bool::weighted(0.05),
        proptest::option::weighted(0.2, (1u64..2048).prop_map(|g| g * GI)),
        prop::bool::weighted(0.05),
        (
            proptest::option::weighted(0.2, (0u64..8192).prop_map(|m| m * GI / 4)),
            proptest::option::weighted(0.2, (0u64..8192, proptest::option::of(1u64..2048))),
        ),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.05),
    )
        .prop_map(
            |(
                role,
                wal_on_data,
                shared,
                expandable,
                block_mode,
                node_draining,
                unmeasured,
                group_size,
                capacity_unknown,
                (quota_ceiling, pool),
                restoring,
                attributes_changing,
            )| {
                VolumeFacts {
                    role: [
                        VolumeRole::Data,
                        VolumeRole::Wal,
                        VolumeRole::Tablespace,
                        VolumeRole::Other,
                    ][role as usize],
                    wal_on_data,
                    shared,
                    expandable,
                    block_mode,
                    unmeasured,
                    node_draining,
                    group_size,
                    capacity_unknown,
                    quota_ceiling,
                    pool: pool.map(|(free, max)| super::pool::PoolRoom {
                        free_bytes: free * GI / 4,
                        max_volume_bytes: max.map(|m| m * GI),
                    }),
                    restoring,
                    restart: Default::default(),
                    owner: None,

                    attributes_changing,
                }
            },
        )
}

fn start() -> impl Strategy<Value = Timestamp> {
    // Any second of 2026, across both DST transitions.
    (0i64..365 * 86_400).prop_map(|s| Timestamp::from_second(1_767_225_600 + s).expect("ts"))
}

/// Usage of a filesystem of `size` bytes: used fraction in per-mille, root-reserved per-mille.
fn measurement(size: u64, used_pm: u64, reserved_pm: u64, inode_pm: u64) -> Measurement {
    let used = size / 1000 * used_pm;
    let reserved = (size / 1000 * reserved_pm).min(size - used);
    Measurement {
        capacity_bytes: size,
        used_bytes: used,
        available_bytes: size - used - reserved,
        inodes_total: 100_000,
        inodes_used: inode_pm * 100,
    }
}

fn wal_unsafe(p: &Policy, f: &VolumeFacts, w: Option<&WalHealth>) -> bool {
    if !f.holds_wal() {
        return false;
    }
    if f.role == VolumeRole::Data && f.wal_on_data && !p.wal_safety.acknowledge_wal_risk {
        return true;
    }
    let Some(w) = w else { return false };
    // 0 and unset limits are off (the CloudNativePG RFC's meaning); a server that does not
    // archive has no backlog at fault.
    let max_pending = p.wal_safety.max_pending_wal_files;
    let max_slot = p.wal_safety.max_slot_retention_bytes.unwrap_or(0);
    (w.archive_configured != Some(false)
        && max_pending > 0
        && w.pending_files.is_some_and(|n| n > max_pending))
        || (w.archive_configured != Some(false)
            && w.archive_healthy == Some(false)
            && p.wal_safety.require_archive_healthy)
        || (max_slot > 0
            && w.inactive_slots
                .as_ref()
                .is_some_and(|s| s.iter().any(|s| s.retained_bytes > max_slot)))
}

/// Entries the budget counts: inside the window and not beyond the clock-skew allowance.
fn count_since(history: &[Action], now: Timestamp) -> u32 {
    let since = super::budget::minus(now, WINDOW);
    super::budget::counted(history, now)
        .filter(|a| a.at > since)
        .count() as u32
}

/// The daily limit an action of `kind` may still be taken under, written out apart from the
/// engine: threshold mode's one budget; in convergent mode the emergency budget for an
/// emergency, and for planned growth the lesser of maxActionsPerDay and what the emergency
/// budget leaves after its reserve.
fn daily_limit(p: &Policy, kind: GrowKind) -> u32 {
    let e = &p.emergency_grow;
    if p.mode == Mode::Threshold {
        return p.max_actions_per_day;
    }
    let planned = p.max_actions_per_day.min(
        e.max_actions_per_day
            - if e.enabled {
                e.reserved_actions_for_emergency
            } else {
                0
            },
    );
    if kind == GrowKind::EmergencyGrow {
        e.max_actions_per_day.max(planned)
    } else {
        planned
    }
}

pub(super) fn check_one(p: &Policy, i: &Inputs, d: &Decision) -> Result<(), TestCaseError> {
    if let Some(super::restart::Restart::Evict { .. }) = d.restart {
        prop_assert_eq!(p.offline_expansion, crate::policy::OfflineExpansion::Evict);
        let waits = matches!(
            i.claim.resize,
            ResizeState::Failed {
                cause: FailureCause::NeedsRemount,
                ..
            }
        );
        prop_assert!(
            waits && !i.facts.node_draining,
            "evicted: {:?}",
            i.claim.resize
        );
        let open = p
            .maintenance_window
            .as_ref()
            .is_some_and(|w| w.is_open(i.now));
        let e = &p.emergency_grow;
        let critical = i.measurement.crosses(
            f64::from(e.critical_threshold),
            e.critical_minimum_free,
            f64::INFINITY,
        );
        prop_assert!(
            open || (critical && e.enabled),
            "evicted outside the window"
        );
    }
    let Verdict::Grow { to, kind } = d.verdict else {
        return Ok(());
    };
    let current = i.claim.current_bytes();
    prop_assert!(to > current, "shrink or no-op: {current} -> {to}");
    if !(kind == GrowKind::EmergencyGrow && p.emergency_grow.exceed_limit_on_emergency) {
        prop_assert!(to <= p.limit, "over limit: {to} > {}", p.limit);
    }
    // A restoring member joins its peers at once: its copy would fill it before the window.
    if kind == GrowKind::ScheduledGrow
        || (kind == GrowKind::GroupGrow && p.maintenance_window.is_some() && !i.facts.restoring)
    {
        let w = p.maintenance_window.as_ref();
        prop_assert!(
            w.is_some_and(|w| w.is_open(i.now)),
            "ScheduledGrow outside a window"
        );
    }
    prop_assert!(
        !i.facts.shared && i.facts.expandable && !i.facts.block_mode && !i.facts.unmeasured
    );
    prop_assert!(!i.facts.capacity_unknown, "grew a claim of unknown size");
    if let Some(ceiling) = i.facts.quota_ceiling {
        prop_assert!(to <= ceiling, "over quota: {to} > {ceiling}");
    }
    if let Some(room) = i.facts.pool {
        let ceiling = super::pool::ceiling(room, current, p.pool_reserve);
        prop_assert!(to <= ceiling, "past the pool: {to} > {ceiling}");
    }
    prop_assert_eq!(&i.claim.resize, &ResizeState::Idle);
    prop_assert!(!wal_unsafe(p, &i.facts, i.wal), "grew while WAL-unsafe");
    prop_assert!(count_since(i.history, i.now) < daily_limit(p, kind));
    if kind == GrowKind::ScheduledGrow {
        // At most one convergent step (10 %, 2Gi-500Gi), rounded up to whole Gi.
        let step = (current / 100 * 10).clamp(2 * GI, 500 * GI);
        prop_assert!(
            to - current <= step + GI,
            "scheduled step {current} -> {to}"
        );
    }
    prop_assert!(
        !i.facts.attributes_changing,
        "a grow while the claim's VolumeAttributesClass changes"
    );
    if i.facts.node_draining {
        prop_assert!(
            i.measurement.used_percent() >= f64::from(p.emergency_grow.critical_threshold)
                || i.measurement.available_bytes < p.emergency_grow.critical_minimum_free,
            "planned growth while the node drains"
        );
    }
    if to - current > crate::decide::EMERGENCY_MAX_BYTES && kind == GrowKind::EmergencyGrow {
        prop_assert!(false, "emergency step over 500Gi");
    }
    if let Some(iv) = p.modification_interval {
        let since = super::budget::minus(i.now, iv);
        let recent = super::budget::counted(i.history, i.now)
            .any(|a| a.kind != GrowKind::Retry && a.at > since);
        prop_assert!(!recent, "a grow inside the modification interval");
    }
    if let Some(b) = p.modification_budget {
        // This grow and those in the window before it: never more than the storage takes.
        let since = super::budget::minus(i.now, b.window);
        let before = super::budget::counted(i.history, i.now)
            .filter(|a| a.kind != GrowKind::Retry && a.at > since)
            .count();
        prop_assert!(
            before < b.count as usize,
            "grow number {} within {:#} where the storage takes {}",
            before + 1,
            b.window,
            b.count
        );
    }
    if p.mode == Mode::Threshold && kind == GrowKind::Grow {
        check_overgrowth(p, i, to)?;
    }
    Ok(())
}

/// A hold that says when it ends is no shorter than it says: a second before that, the claim is
/// still not grown (nor its pod evicted), so the fast loop's wake at the end comes no later than
/// the grow could. Ends over a year away (saturated sums) are not decided at.
fn check_hold_ends(i: &Inputs, d: &Decision) -> Result<(), TestCaseError> {
    let Some(until) = d.held_until else {
        return Ok(());
    };
    prop_assert!(
        until > i.now,
        "a hold ending at {until}, not after {}",
        i.now
    );
    let Some(before) = until.checked_sub(SignedDuration::from_secs(1)).ok() else {
        return Ok(());
    };
    if before <= i.now || until.duration_since(i.now) > SignedDuration::from_hours(400 * 24) {
        return Ok(());
    }
    let then = decide(&Inputs { now: before, ..*i });
    let evicts = matches!(then.restart, Some(super::restart::Restart::Evict { .. }));
    prop_assert!(
        then.grow_to().is_none() && !evicts,
        "held until {until} ({:?}), yet a second before: {:?} {:?}",
        d.verdict,
        then.verdict,
        then.restart
    );
    Ok(())
}

/// Threshold mode's grow is the step, widened at most to what the fill needs: during the lead
/// time (predictive) or until the next grow is possible (an interval), and then within maxStep
/// (or the step, when larger). Rounded up to a whole Gi (Mi under 1Gi) and capped at the limit.
fn check_overgrowth(p: &Policy, i: &Inputs, to: u64) -> Result<(), TestCaseError> {
    let current = i.claim.current_bytes();
    let step = match p.step {
        Step::Percent(pct) => ((u128::from(current) * u128::from(pct) / 100) as u64)
            .clamp(p.min_step, p.max_step.max(p.min_step)),
        Step::Bytes(b) => b,
    };
    let mut need = 0;
    if let Some(r) = i
        .fill_rate
        .filter(|r| r.bytes_per_second.is_finite() && r.bytes_per_second > 0.0)
    {
        if p.predictive.enabled {
            let lead = super::predictive::lead(p, &r).as_secs_f64();
            need = (r.bytes_per_second * lead).min(u64::MAX as f64) as u64;
        }
        let ratio = super::engine::usable_ratio(i);
        need = need.max(super::interval::lasting_growth(i, p, &r, ratio));
    }
    let widened = step.max(need.min(p.max_step.max(step))).max(1);
    let unit = if current >= GI { GI } else { MI };
    prop_assert!(
        to - current <= widened.saturating_add(unit),
        "grew {current} -> {to}: more than the step {step} widened to {widened}"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 100_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn single_decisions_keep_every_invariant(
        p in policy(),
        size in (GI / 2)..4096 * GI,
        request_delta in 0u64..2 * GI,
        used_pm in 0u64..=1000,
        reserved_pm in 0u64..60,
        inode_pm in 0u64..=1000,
        resize in 0u8..10,
        history in proptest::collection::vec((0i64..48 * 3600, 0u8..3), 0..8),
        w in wal(),
        f in facts(),
        now in start(),
        rate in proptest::option::of((
            prop_oneof![Just(f64::NAN), Just(f64::INFINITY), Just(-1e6), 0.0..1e12],
            proptest::option::of(-60i64..7200),
        )),
    ) {
        let size = size / MI * MI;
        let resize = match resize {
            0 => ResizeState::InProgress { since: None },
            1 => ResizeState::Failed { cause: FailureCause::Stuck, detail: "NodeResizeError".into() },
            2 => ResizeState::Failed { cause: FailureCause::NeedsRemount, detail: String::new() },
            _ => ResizeState::Idle,
        };
        let claim = ClaimState { request_bytes: size + request_delta / MI * MI, capacity_bytes: size, resize };
        let history: Vec<Action> = history.iter().map(|&(ago, k)| Action::new(
            now - SignedDuration::from_secs(ago),
            [GrowKind::Grow, GrowKind::ScheduledGrow, GrowKind::EmergencyGrow][k as usize],
            size,
            size,
        )).collect();
        let inputs = Inputs {
            logical: None,
            policy: PolicyInput::Valid(&p),
            measurement: measurement(size, used_pm, reserved_pm, inode_pm),
            claim: &claim,
            history: &history,
            wal: w.as_ref(),
            facts: f,
            now,
            // Any rate, hostile ones included: a prediction must pass every guard as well.
            fill_rate: rate.map(|(r, lead)| FillRate {
                bytes_per_second: r,
                resize_lead: lead.map(SignedDuration::from_secs),
            }),
        };
        let d = decide(&inputs);
        check_one(&p, &inputs, &d)?;
        check_hold_ends(&inputs, &d)?;
        if d.predicted {
            prop_assert!(p.predictive.enabled && rate.is_some_and(|(r, _)| r > 0.0 && r.is_finite()));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_500, failure_persistence: None, ..ProptestConfig::default() })]

    /// 2,500 sequences of 40 evaluations: actions feed back into the history and the size.
    #[test]
    fn replayed_sequences_respect_budget_and_reserve(
        p in policy(),
        start_size in 1u64..200,
        steps in proptest::collection::vec((0i64..4 * 3600, 500u64..=1000, any::<bool>()), 40),
        now in start(),
        rate in proptest::option::of(0.0f64..1e10),
    ) {
        let mut size = start_size * GI;
        let mut now = now;
        let mut history: Vec<Action> = Vec::new();
        let f = VolumeFacts { expandable: true, ..VolumeFacts::default() };
        for (advance, used_pm, draining) in steps {
            now += SignedDuration::from_secs(advance);
            let claim = ClaimState { request_bytes: size, capacity_bytes: size, resize: ResizeState::Idle };
            let facts = VolumeFacts { node_draining: draining, ..f };
            let inputs = Inputs {
                logical: None,
                policy: PolicyInput::Valid(&p),
                measurement: measurement(size, used_pm, 0, 0),
                claim: &claim,
                history: &history,
                wal: None,
                facts,
                now,
                // Predicted grows spend the same budget and respect the same reserve.
                fill_rate: rate.map(|r| FillRate { bytes_per_second: r, resize_lead: None }),
            };
            let d = decide(&inputs);
            check_one(&p, &inputs, &d)?;
            if let Verdict::Grow { to, kind } = d.verdict {
                history.push(Action::new(now, kind, size, to));
                size = to;
            }
        }
        for (i, a) in history.iter().enumerate() {
            let before = history[..i].iter().filter(|b| b.at > a.at - WINDOW).count() as u32;
            prop_assert!(before < daily_limit(&p, a.kind), "over the daily budget of {:?}", a.kind);
            if p.mode == Mode::Convergent && a.kind != GrowKind::EmergencyGrow {
                let e = &p.emergency_grow;
                let reserve = if e.enabled { e.reserved_actions_for_emergency } else { 0 };
                prop_assert!(before + reserve < e.max_actions_per_day, "planned action ate the reserve");
            }
        }
    }
}
