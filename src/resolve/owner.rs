//! A claim grown through its owning cluster (`resizeThrough: owner`): what the owner's size, as
//! the shell read it for this decision, says about growing. An owner that cannot be read stops
//! growth; so does one declaring less than headroom set it to, since someone lowered it (a GitOps
//! sync restoring its manifest) and raising it again would fight them. Pure.

use crate::decide::{Action, Logical, OwnerProblem};
use crate::k8s::owner::Seen;
use crate::policy::{Policy, ResizeThrough};
use crate::quantity::format as q;

/// Why the owner stops growth, and the message that says so; `None` when it was not read, the
/// policy grows claims, or its size is at least every size headroom set it to.
pub fn problem(
    seen: Option<&Seen>,
    policy: Option<&Policy>,
    history: &[Action],
    logical: Option<&Logical>,
) -> Option<(OwnerProblem, String)> {
    let seen = seen?;
    if policy?.resize_through != ResizeThrough::Owner {
        return None;
    }
    let declared = match &seen.declared {
        Err(m) => {
            return Some((
                OwnerProblem::Invalid,
                format!("{m}; nothing is grown until it is fixed"),
            ));
        }
        Ok((_, d)) => d.bytes,
    };
    let peers = logical.map_or(&[][..], |l| l.actions.as_slice());
    let set = history
        .iter()
        .chain(peers)
        .filter(|a| a.through_owner && a.to > a.from)
        .max_by_key(|a| (a.to, a.at))?;
    (declared < set.to).then(|| {
        (
            OwnerProblem::Reverted,
            format!(
                "{} is {}, lower than the {} headroom set it to at {}: someone lowered it (a GitOps sync?) and headroom does not raise it again; set it to at least {} where it is managed, or write resizeThrough: claim",
                seen.field,
                q(declared),
                q(set.to),
                set.at,
                q(set.to)
            ),
        )
    })
}

/// Whether headroom has set the owner's size (a grow through it in the claim's history): the
/// owner is then read at every full scan (one GET), so a revert is seen within a scan whether or
/// not a grow is due, and an operator that has yet to apply the grow is timed against what the
/// owner says now. Before that, the owner is read only when a grow would be made.
pub fn watched(history: &[Action]) -> bool {
    history.iter().any(|a| a.through_owner && a.to > a.from)
}

#[cfg(test)]
#[path = "owner_tests.rs"]
mod tests;
