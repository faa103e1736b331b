//! A `minAvailable` at least as large as all a claim could have free, even empty. Inherited from
//! a StorageClass or the central ConfigMap, it was written for claims of every size, so it is not
//! applied until the claim is larger (it would grow every small claim empty). Written on the claim
//! itself, its owner asked for that much free: it is applied as written and the claim grows by
//! its step until it is met, as pvc-autoresizer grows it. `validate --size` says which, and how
//! many steps that takes.

use super::checker::Checker;
use super::defaults::USAGE_THRESHOLD;
use super::{MinAvailable, Policy};
use crate::quantity::format as q;

/// More steps than this are not counted: a floor that far away wants a larger step.
const MAX_COUNTED: usize = 1000;

/// What validation knows of `minAvailable`.
pub(super) struct Floor {
    pub(super) value: MinAvailable,
    /// The percent line beside it (`None`: none written).
    pub(super) usage: Option<u8>,
    /// Written on the claim itself; `None`: not known (a policy file could be either).
    pub(super) on_claim: Option<bool>,
}

/// The sizes a claim of `current` bytes grows through, one step at a time, until it is larger
/// than `floor` (free space must not fall strictly below the floor, and a filesystem keeps a
/// little of its size for itself) or reaches its limit: the engine's step and rounding.
pub(super) fn steps(sizing: &Policy, current: u64, floor: u64) -> Vec<u64> {
    let mut sizes = Vec::new();
    let mut size = current;
    while size <= floor && size < sizing.limit && sizes.len() < MAX_COUNTED {
        let next = sizing.grown_by(size, sizing.threshold_step(size));
        if next <= size {
            break;
        }
        sizes.push(next);
        size = next;
    }
    sizes
}

/// The `validate --size` warning for a floor the claim cannot meet at its size.
pub(super) fn warning(c: &mut Checker<'_>, floor: &Floor, current: u64, sizing: &Policy) {
    let bytes = floor.value.bytes(current);
    if bytes == 0 || bytes < current {
        return;
    }
    let (f, size) = (q(bytes), q(current));
    let pct = floor.usage.unwrap_or(USAGE_THRESHOLD);
    let inherited = format!(
        "not applied until the claim is larger, and the claim grows at usageThreshold {pct} meanwhile (the claim's status and an Event say so)"
    );
    let own = as_written(sizing, current, bytes);
    let message = match floor.on_claim {
        Some(false) => format!(
            "{f} can never be met at the claim's size ({size}), even empty: inherited from its StorageClass or the ConfigMap, it is {inherited}; write a value well below {size} for claims this small, or write it on the claim to have it grow"
        ),
        Some(true) => format!(
            "{f} is more than the claim ({size}) can have free even empty; written on the claim, it is applied as written: {own}"
        ),
        None => format!(
            "{f} is more than the claim ({size}) can have free even empty. Written on the claim itself it is applied as written: {own}. Inherited from a StorageClass or the ConfigMap it is {inherited}: write a value well below {size} there for claims this small"
        ),
    };
    c.warn("minAvailable", message);
}

/// What a claim's own floor does to it: how many steps, through which sizes, over how many days.
fn as_written(sizing: &Policy, current: u64, floor: u64) -> String {
    let sizes = steps(sizing, current, floor);
    let Some(&last) = sizes.last() else {
        return format!(
            "the claim is at its limit ({}), so it stays under the floor; raise limit above {}",
            q(sizing.limit),
            q(floor)
        );
    };
    let n = sizes.len();
    let chain = chain(current, &sizes);
    if last <= floor && n >= MAX_COUNTED {
        return format!(
            "the claim grows by its step, more than {MAX_COUNTED} steps ({chain}); write a larger step"
        );
    }
    if last <= floor {
        return format!(
            "the claim grows by its step to its limit, {n} step(s) ({chain}), and stays under the floor there; raise limit above {}",
            q(floor)
        );
    }
    let per_day = sizing.max_actions_per_day;
    let days = match per_day {
        0 => String::new(),
        m if n as u64 > u64::from(m) => format!(
            ", over {} days or more at maxActionsPerDay {m}",
            (n as u64).div_ceil(u64::from(m))
        ),
        _ => String::new(),
    };
    format!("the claim grows by its step until it is met, {n} step(s) ({chain}){days}")
}

/// `1Gi -> 2Gi -> 3Gi`, the middle left out of a long one.
fn chain(current: u64, sizes: &[u64]) -> String {
    let all: Vec<String> = std::iter::once(current)
        .chain(sizes.iter().copied())
        .map(q)
        .collect();
    if all.len() <= 8 {
        return all.join(" -> ");
    }
    let (head, tail) = (&all[..3], &all[all.len() - 2..]);
    format!("{} -> ... -> {}", head.join(" -> "), tail.join(" -> "))
}
