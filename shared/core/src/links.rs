//! Which state depends on which (issue 36): the strings a state holds that are identifiers of
//! resources in other states ("uses"), the states it reads through `terraform_remote_state`,
//! the links they make, and an order of states for applies.
//!
//! The rules, shared by every catalog adapter:
//! - a state's identifiers, *uses* and the states it reads are read in the one pass that checks
//!   it (`gitstate-statefile`'s catalogued facts, which state those rules);
//! - a *link* is a use whose value another state holds as an indexed identifier
//!   ([`gitstate_statefile::IDENTIFYING_ATTRIBUTES`]); it is `declared` when the consumer reads
//!   that state through a `terraform_remote_state` data source (its http backend `address`
//!   names the state), `literal` otherwise (the identifier is copied by hand);
//! - the order puts providers before their consumers; states that use each other in a circle
//!   are named as a cycle (and ordered together where the circle stands).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::identifiers::ManagedBy;
/// The uses and remote states the checker reads of a state (`gitstate-statefile`'s types, which
/// the catalog port names as they are: the same concept on two layers).
pub use gitstate_statefile::{StateRef, Use};

/// Whether the consumer reads the provider's state or copied the identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkKind {
    /// Through `terraform_remote_state` of the provider's state.
    Declared,
    /// Hard-coded.
    Literal,
}

impl LinkKind {
    /// Its name as the JSON answers, the catalog and the web page say it.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkKind::Declared => "declared",
            LinkKind::Literal => "literal",
        }
    }
}

/// One link: a use in one state of an identifier another state holds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Link {
    /// The state holding the string.
    pub consumer: StateRef,
    /// Where it holds it ([`Use::address`], [`Use::attribute`]).
    pub consumer_address: String,
    /// See [`Use::attribute`].
    pub consumer_attribute: String,
    /// The state that manages the identified resource.
    pub provider: StateRef,
    /// The resource instance's address there.
    pub provider_address: String,
    /// Which identifying attribute (`id`, `arn`, …).
    pub provider_field: String,
    /// Declared or literal.
    pub kind: LinkKind,
    /// The identifier (kept to tell whether the provider still manages it; never shown).
    pub value: String,
}

/// One side of a link as `catalog links` shows it: the other state and where.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LinkEntry {
    /// The other state's repository.
    pub repository: String,
    /// The other state's path.
    pub path: String,
    /// The resource (or output) address in the other state.
    pub address: String,
    /// The attribute there (the identifying attribute of a provider, the place of a use).
    pub attribute: String,
    /// Declared or literal.
    pub kind: LinkKind,
    /// The provider no longer manages the identifier (it was destroyed or changed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dangling: bool,
    /// This state's side: its address and attribute.
    pub here: Here,
}

/// This state's side of a link.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Here {
    /// The resource (or output) address in this state.
    pub address: String,
    /// The attribute.
    pub attribute: String,
}

/// What `catalog links` answers for one state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Links {
    /// The states whose resources this one uses.
    pub uses: Vec<LinkEntry>,
    /// The states that use this one's resources.
    pub used_by: Vec<LinkEntry>,
}

impl Link {
    /// The entry `catalog links` shows of this link for its consumer (naming the provider).
    pub fn as_use(&self, dangling: bool) -> LinkEntry {
        LinkEntry {
            repository: self.provider.repository.clone(),
            path: self.provider.path.clone(),
            address: self.provider_address.clone(),
            attribute: self.provider_field.clone(),
            kind: self.kind,
            dangling,
            here: Here {
                address: self.consumer_address.clone(),
                attribute: self.consumer_attribute.clone(),
            },
        }
    }

    /// The entry `catalog links` shows of this link for its provider (naming the consumer).
    pub fn as_used_by(&self, dangling: bool) -> LinkEntry {
        LinkEntry {
            repository: self.consumer.repository.clone(),
            path: self.consumer.path.clone(),
            address: self.consumer_address.clone(),
            attribute: self.consumer_attribute.clone(),
            kind: self.kind,
            dangling,
            here: Here {
                address: self.provider_address.clone(),
                attribute: self.provider_field.clone(),
            },
        }
    }
}

/// The links of the `consumer` state: each of its `uses` whose value another state holds
/// (`holders`: per value, the instances that manage it), declared where the consumer `reads`
/// that state. Sorted, without repeats.
pub fn resolve(
    consumer: &StateRef,
    uses: &[Use],
    reads: &[StateRef],
    holders: &HashMap<String, Vec<ManagedBy>>,
) -> Vec<Link> {
    let mut links = BTreeSet::new();
    for one in uses {
        for holder in holders.get(&one.value).into_iter().flatten() {
            let provider = StateRef {
                repository: holder.repository.clone(),
                path: holder.path.clone(),
            };
            if &provider == consumer {
                continue;
            }
            let kind = if reads.contains(&provider) {
                LinkKind::Declared
            } else {
                LinkKind::Literal
            };
            links.insert(Link {
                consumer: consumer.clone(),
                consumer_address: one.address.clone(),
                consumer_attribute: one.attribute.clone(),
                provider,
                provider_address: holder.address.clone(),
                provider_field: holder.field.clone(),
                kind,
                value: one.value.clone(),
            });
        }
    }
    links.into_iter().collect()
}

/// An order of states for applies, and the circles that prevent a strict one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    /// Every state, each after every state it uses (states of one circle stand together).
    pub order: Vec<String>,
    /// Groups of states that use each other in a circle, each sorted.
    pub cycles: Vec<Vec<String>>,
}

/// The states of a repository (not deleted) and who uses whom among them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Graph {
    /// Every state's path.
    pub states: BTreeSet<String>,
    /// Consumer → provider: literal when any of the consumer's links to it is.
    pub edges: BTreeMap<(String, String), LinkKind>,
}

impl Graph {
    /// Adds one link's edge (a literal one makes the edge literal).
    pub fn add(&mut self, consumer: &str, provider: &str, kind: LinkKind) {
        let edge = self
            .edges
            .entry((consumer.to_owned(), provider.to_owned()))
            .or_insert(kind);
        if kind == LinkKind::Literal {
            *edge = LinkKind::Literal;
        }
    }

    /// The order for applies ([`order`]).
    pub fn order(&self) -> Order {
        let edges: Vec<(String, String)> = self.edges.keys().cloned().collect();
        order(&self.states, &edges)
    }
}

/// Orders `states` so that each provider comes before its consumers (`edges`: consumer →
/// provider; ties in name order). States in a circle form one group, placed where the group
/// as a whole can go, and are named in `cycles`.
pub fn order(states: &BTreeSet<String>, edges: &[(String, String)]) -> Order {
    let names: Vec<&String> = states.iter().collect();
    let index: HashMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let mut uses = vec![BTreeSet::new(); names.len()];
    for (consumer, provider) in edges {
        if let (Some(&c), Some(&p)) = (index.get(consumer.as_str()), index.get(provider.as_str())) {
            if c != p {
                uses[c].insert(p);
            }
        }
    }
    let groups = strongly_connected(&uses);
    // The graph of groups: a group waits for the groups its members use.
    let mut group_of = vec![0; names.len()];
    for (g, members) in groups.iter().enumerate() {
        for &m in members {
            group_of[m] = g;
        }
    }
    let mut waits_for = vec![BTreeSet::new(); groups.len()];
    let mut needed_by: Vec<Vec<usize>> = vec![Vec::new(); groups.len()];
    for (c, provided) in uses.iter().enumerate() {
        for &p in provided {
            let (gc, gp) = (group_of[c], group_of[p]);
            if gc != gp && waits_for[gc].insert(gp) {
                needed_by[gp].push(gc);
            }
        }
    }
    // Kahn's algorithm, the ready group with the smallest first name first.
    let first = |g: usize| groups[g].iter().copied().min().unwrap_or(0);
    let mut ready: BTreeMap<usize, usize> = (0..groups.len())
        .filter(|&g| waits_for[g].is_empty())
        .map(|g| (first(g), g))
        .collect();
    let mut remaining: Vec<usize> = waits_for.iter().map(BTreeSet::len).collect();
    let mut result = Order::default();
    while let Some((_, g)) = ready.pop_first() {
        let mut members: Vec<usize> = groups[g].clone();
        members.sort_unstable();
        if members.len() > 1 {
            result
                .cycles
                .push(members.iter().map(|&m| names[m].clone()).collect());
        }
        result
            .order
            .extend(members.iter().map(|&m| names[m].clone()));
        for &next in &needed_by[g] {
            remaining[next] -= 1;
            if remaining[next] == 0 {
                ready.insert(first(next), next);
            }
        }
    }
    result.cycles.sort();
    result
}

/// The strongly connected components of a graph given as adjacency sets (Kosaraju, with
/// explicit stacks: no recursion however long a chain is).
fn strongly_connected(edges: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    let n = edges.len();
    let mut reverse = vec![Vec::new(); n];
    for (from, tos) in edges.iter().enumerate() {
        for &to in tos {
            reverse[to].push(from);
        }
    }
    // First pass: finishing order.
    let mut seen = vec![false; n];
    let mut finished = Vec::with_capacity(n);
    for start in 0..n {
        if seen[start] {
            continue;
        }
        seen[start] = true;
        let mut stack: Vec<(usize, Vec<usize>)> =
            vec![(start, edges[start].iter().copied().collect())];
        while let Some((node, pending)) = stack.last_mut() {
            match pending.pop() {
                Some(next) if !seen[next] => {
                    seen[next] = true;
                    let more = edges[next].iter().copied().collect();
                    stack.push((next, more));
                }
                Some(_) => {}
                None => {
                    finished.push(*node);
                    stack.pop();
                }
            }
        }
    }
    // Second pass, on the reversed graph, in reverse finishing order.
    let mut component = vec![usize::MAX; n];
    let mut groups = Vec::new();
    for &start in finished.iter().rev() {
        if component[start] != usize::MAX {
            continue;
        }
        let g = groups.len();
        let mut members = Vec::new();
        let mut stack = vec![start];
        component[start] = g;
        while let Some(node) = stack.pop() {
            members.push(node);
            for &next in &reverse[node] {
                if component[next] == usize::MAX {
                    component[next] = g;
                    stack.push(next);
                }
            }
        }
        groups.push(members);
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// The uses of `state`, as the catalog reads them.
    fn uses(state: &Value) -> Vec<Use> {
        gitstate_statefile::catalog_facts(&serde_json::to_vec(state).unwrap()).uses
    }

    /// The states `state` reads, as the catalog reads them.
    fn remote_states(state: &Value) -> Vec<StateRef> {
        gitstate_statefile::catalog_facts(&serde_json::to_vec(state).unwrap()).reads
    }

    fn state_ref(path: &str) -> StateRef {
        StateRef {
            repository: "default".into(),
            path: path.into(),
        }
    }

    fn holder(path: &str, address: &str, field: &str) -> ManagedBy {
        ManagedBy {
            repository: "default".into(),
            path: path.into(),
            address: address.into(),
            resource_type: "terraform_data".into(),
            field: field.into(),
        }
    }

    /// A v4 state: a managed resource holding another state's vpc id in a nested attribute, a
    /// remote state of `network.tfstate`, and an output.
    fn consumer() -> Value {
        json!({"version": 4, "serial": 1, "lineage": "l", "outputs": {
            "subnets": {"value": ["subnet-1", "vpc-1"], "type": ["list", "string"]}},
        "resources": [
            {"mode": "managed", "type": "terraform_data", "name": "app", "instances": [{"attributes": {
                "id": "vpc-1", "input": {"vpc": "vpc-1", "tags": {"kubernetes.io/role": "x"}}, "output": null}}]},
            {"mode": "data", "type": "terraform_remote_state", "name": "net", "instances": [{"attributes": {
                "backend": "http",
                "config": {"value": {"address": "http://127.0.0.1:6061/state/default/envs%2Fnetwork.tfstate"}, "type": ["object", {"address": "string"}]},
                "outputs": {"value": {"vpc_id": "vpc-1"}, "type": ["object", {"vpc_id": "string"}]}}}]}
        ]})
    }

    #[test]
    fn links_are_declared_where_the_consumer_reads_the_provider() {
        let me = state_ref("app.tfstate");
        let holders = HashMap::from([
            (
                "vpc-1".to_owned(),
                vec![
                    holder("envs/network.tfstate", "terraform_data.vpc", "id"),
                    holder("app.tfstate", "terraform_data.app", "id"),
                ],
            ),
            (
                "subnet-1".to_owned(),
                vec![holder("other.tfstate", "terraform_data.subnet", "id")],
            ),
        ]);
        let state = consumer();
        let links = resolve(&me, &uses(&state), &remote_states(&state), &holders);
        let shown: Vec<(String, &str, LinkKind)> = links
            .iter()
            .map(|l| {
                (
                    format!("{} {}", l.consumer_address, l.consumer_attribute),
                    l.provider.path.as_str(),
                    l.kind,
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                (
                    "data.terraform_remote_state.net outputs.value.vpc_id".into(),
                    "envs/network.tfstate",
                    LinkKind::Declared
                ),
                (
                    "output.subnets [0]".into(),
                    "other.tfstate",
                    LinkKind::Literal
                ),
                (
                    "output.subnets [1]".into(),
                    "envs/network.tfstate",
                    LinkKind::Declared
                ),
                (
                    "terraform_data.app input.vpc".into(),
                    "envs/network.tfstate",
                    LinkKind::Declared
                ),
            ]
        );
    }

    #[test]
    fn the_order_puts_providers_first_and_names_circles() {
        let states: BTreeSet<String> = ["app", "db", "network", "a", "b", "c", "lone"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let edge = |c: &str, p: &str| (c.to_owned(), p.to_owned());
        let edges = [
            edge("app", "network"),
            edge("db", "network"),
            edge("app", "db"),
            edge("a", "b"),
            edge("b", "c"),
            edge("c", "a"),
            edge("a", "network"),
            edge("network", "gone"),
        ];
        let found = order(&states, &edges);
        let at = |name: &str| found.order.iter().position(|s| s == name).unwrap();
        assert_eq!(found.order.len(), 7, "{found:?}");
        assert!(
            at("network") < at("db") && at("db") < at("app"),
            "{found:?}"
        );
        assert!(
            at("network") < at("a") && at("network") < at("b"),
            "{found:?}"
        );
        assert_eq!(
            found.cycles,
            [vec!["a".to_string(), "b".into(), "c".into()]]
        );
        // A long chain needs no deep recursion.
        let chain: BTreeSet<String> = (0..20_000).map(|i| format!("s{i:05}")).collect();
        let edges: Vec<(String, String)> = (1..20_000)
            .map(|i| (format!("s{i:05}"), format!("s{:05}", i - 1)))
            .collect();
        let long = order(&chain, &edges);
        assert_eq!(long.order.first().map(String::as_str), Some("s00000"));
        assert!(long.cycles.is_empty());
    }
}
