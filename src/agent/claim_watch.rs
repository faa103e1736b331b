//! Which claim watches a node keeps: one per claim its pods mount (a `metadata.name` field
//! selector, as the kubelet watches a pod's Secrets), one per label selector that holds those
//! claims' peers ([`crate::k8s::scope`]), and a whole namespace only where the peers cannot be
//! selected or the node mounts so many of its claims that one watch is cheaper. Every watch is a
//! stream on the agent's one HTTP/2 connection; the cap keeps their count well under the
//! server's concurrent-stream limit (250 in Go's HTTP/2 server, which kube-apiserver raises), past
//! which new requests on the connection would wait.

use std::collections::{BTreeMap, BTreeSet};

use crate::k8s::scope::PeerScope;

/// One claim watch.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClaimWatch {
    /// One claim, by name.
    Claim { namespace: String, name: String },
    /// The claims carrying these labels: peers of claims here.
    Labels { namespace: String, selector: String },
    /// Every claim of the namespace.
    Namespace(String),
}

impl ClaimWatch {
    pub fn namespace(&self) -> &str {
        match self {
            ClaimWatch::Claim { namespace, .. } | ClaimWatch::Labels { namespace, .. } => namespace,
            ClaimWatch::Namespace(ns) => ns,
        }
    }

    /// The watcher's name in logs, readiness and `headroom_watch_restarts_total`.
    pub fn name(&self) -> String {
        match self {
            ClaimWatch::Claim { namespace, name } => format!("pvc {namespace}/{name}"),
            ClaimWatch::Labels {
                namespace,
                selector,
            } => format!("pvcs {selector} in {namespace}"),
            ClaimWatch::Namespace(ns) => format!("pvcs in {ns}"),
        }
    }

    /// The `headroom_claim_watches` label.
    pub fn kind(&self) -> &'static str {
        match self {
            ClaimWatch::Claim { .. } => "claim",
            ClaimWatch::Labels { .. } => "selector",
            ClaimWatch::Namespace(_) => "namespace",
        }
    }
}

/// What the node needs: the claims its pods mount, by namespace, and where their peers are.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Needs {
    pub claims: BTreeMap<String, BTreeSet<String>>,
    pub peers: BTreeMap<String, BTreeSet<PeerScope>>,
}

impl Needs {
    /// Watches of single claims and selectors a namespace would take.
    fn narrow_cost(&self, ns: &str) -> usize {
        let claims = self.claims.get(ns).map_or(0, BTreeSet::len);
        let selectors = self.peers.get(ns).map_or(0, |s| {
            s.iter()
                .filter(|p| matches!(p, PeerScope::Labels(_)))
                .count()
        });
        claims + selectors
    }

    fn namespaces(&self) -> BTreeSet<&str> {
        self.claims
            .keys()
            .chain(self.peers.keys())
            .map(String::as_str)
            .collect()
    }

    /// The watches that cover these needs with at most `cap` claim and selector watches: a
    /// namespace whose peers only the whole namespace holds is watched whole, and then the
    /// namespaces costing most, until the narrow watches fit.
    pub fn plan(&self, cap: usize) -> BTreeSet<ClaimWatch> {
        let namespaces = self.namespaces();
        let mut whole: BTreeSet<&str> = namespaces
            .iter()
            .copied()
            .filter(|ns| {
                self.peers
                    .get(*ns)
                    .is_some_and(|s| s.contains(&PeerScope::Namespace))
            })
            .collect();
        let mut narrow: Vec<(usize, &str)> = namespaces
            .iter()
            .copied()
            .filter(|ns| !whole.contains(ns))
            .map(|ns| (self.narrow_cost(ns), ns))
            .collect();
        // Costliest first; by name among equals, so every scan plans alike.
        narrow.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        let mut total: usize = narrow.iter().map(|(c, _)| c).sum();
        for (cost, ns) in &narrow {
            if total <= cap {
                break;
            }
            whole.insert(ns);
            total -= cost;
        }
        let mut plan = BTreeSet::new();
        for ns in namespaces {
            if whole.contains(ns) {
                plan.insert(ClaimWatch::Namespace(ns.into()));
                continue;
            }
            for name in self.claims.get(ns).into_iter().flatten() {
                plan.insert(ClaimWatch::Claim {
                    namespace: ns.into(),
                    name: name.clone(),
                });
            }
            for selector in self
                .peers
                .get(ns)
                .into_iter()
                .flatten()
                .filter_map(PeerScope::selector)
            {
                plan.insert(ClaimWatch::Labels {
                    namespace: ns.into(),
                    selector,
                });
            }
        }
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needs(claims: &[(&str, &str)], peers: &[(&str, PeerScope)]) -> Needs {
        let mut n = Needs::default();
        for (ns, c) in claims {
            n.claims
                .entry(ns.to_string())
                .or_default()
                .insert(c.to_string());
        }
        for (ns, p) in peers {
            n.peers.entry(ns.to_string()).or_default().insert(p.clone());
        }
        n
    }

    fn labels(k: &str, v: &str) -> PeerScope {
        PeerScope::Labels([(k.to_string(), v.to_string())].into())
    }

    #[test]
    fn a_nodes_own_claims_and_their_peers_selectors_are_watched_alone() {
        let n = needs(
            &[("a", "c1"), ("a", "c2"), ("b", "d1")],
            &[("a", labels("cnpg.io/cluster", "pg"))],
        );
        let plan: Vec<String> = n.plan(100).iter().map(ClaimWatch::name).collect();
        assert_eq!(
            plan,
            vec![
                "pvc a/c1",
                "pvc a/c2",
                "pvc b/d1",
                "pvcs cnpg.io/cluster=pg in a"
            ]
        );
    }

    #[test]
    fn peers_no_selector_holds_take_the_whole_namespace() {
        let n = needs(
            &[("a", "c1"), ("b", "d1")],
            &[
                ("a", PeerScope::Namespace),
                ("a", labels("cnpg.io/cluster", "pg")),
            ],
        );
        let plan: Vec<String> = n.plan(100).iter().map(ClaimWatch::name).collect();
        assert_eq!(plan, vec!["pvc b/d1", "pvcs in a"]);
    }

    #[test]
    fn past_the_cap_the_costliest_namespaces_are_watched_whole() {
        let mut claims: Vec<(&str, String)> = Vec::new();
        for i in 0..8 {
            claims.push(("big", format!("c{i}")));
        }
        for i in 0..3 {
            claims.push(("mid", format!("c{i}")));
        }
        claims.push(("small", "c0".into()));
        let refs: Vec<(&str, &str)> = claims.iter().map(|(a, b)| (*a, b.as_str())).collect();
        let n = needs(&refs, &[]);
        assert_eq!(n.plan(12).len(), 12, "all fit: one watch a claim");
        let plan = n.plan(5);
        assert!(plan.contains(&ClaimWatch::Namespace("big".into())));
        assert_eq!(plan.len(), 1 + 3 + 1, "{plan:?}");
        let plan = n.plan(1);
        assert!(plan.contains(&ClaimWatch::Namespace("mid".into())));
        assert_eq!(plan.len(), 3, "{plan:?}");
        let plan = n.plan(0);
        assert!(plan.iter().all(|w| w.kind() == "namespace"), "{plan:?}");
        // Planned alike whatever the order the needs were gathered in.
        let mut reversed = refs.clone();
        reversed.reverse();
        assert_eq!(needs(&reversed, &[]).plan(5), n.plan(5));
    }
}
