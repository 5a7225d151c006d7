//! The dependency graph of a repository's states on the web page (`/_/ui/graph?repo=R`): an SVG
//! the server draws (no script), providers to the left of their consumers, literal links in a
//! warning colour. A view shows at most [`MAX_NODES`] boxes: beyond that, the states under the
//! prefix are clustered by their next folder (a box per folder, which opens that folder's view),
//! and a folder holding more states than that is shown a page at a time.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use gitstate_core::links::{order, Graph, LinkKind};

use crate::error::ApiError;
use crate::inspect::{catalog, url_part};
use crate::ui::{escape, page};
use crate::AppState;

/// Boxes in one view at most.
pub const MAX_NODES: usize = 120;
const COLUMN: usize = 330;
const ROW: usize = 34;
const BOX_WIDTH: usize = 240;
const BOX_HEIGHT: usize = 24;
const MARGIN: usize = 20;
/// The warning colour of a literal link, and the colour of a declared one.
const LITERAL: &str = "#d9480f";
const DECLARED: &str = "#6a737d";

/// An arrowhead of `colour` (its size not scaled by the line's width).
fn marker(class: &str, colour: &str) -> String {
    format!(
        "<marker id=\"arrow-{class}\" viewBox=\"0 0 8 8\" refX=\"8\" refY=\"4\" markerWidth=\"8\" \
         markerHeight=\"8\" markerUnits=\"userSpaceOnUse\" orient=\"auto\"><path d=\"M0,0 L8,4 L0,8 z\" fill=\"{colour}\"/></marker>"
    )
}

/// One box: a state, or a folder of states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The state's path, or the folder's (ending in `/`).
    pub key: String,
    /// What the box says.
    pub label: String,
    /// States it stands for (1 for a state).
    pub states: usize,
}

/// What one view shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    pub nodes: Vec<Node>,
    /// Between boxes (index of the consumer, of the provider): literal when any link is.
    pub edges: BTreeMap<(usize, usize), LinkKind>,
    /// Links with one end outside the view.
    pub outside: usize,
    /// States under the prefix.
    pub total: usize,
    /// The page shown, and whether another follows (a folder with more states than a view).
    pub page: usize,
    pub more: bool,
}

impl View {
    /// The view of `graph` under `prefix`, page `page` (0-based).
    pub fn of(graph: &Graph, prefix: &str, page: usize) -> View {
        let under: Vec<&String> = graph
            .states
            .iter()
            .filter(|s| s.starts_with(prefix))
            .collect();
        // Each state's box: itself when few enough, else its next folder (files stay boxes).
        let cluster = under.len() > MAX_NODES;
        let key_of = |state: &str| -> String {
            let rest = &state[prefix.len()..];
            match rest.split_once('/') {
                Some((folder, _)) if cluster => format!("{prefix}{folder}/"),
                _ => state.to_owned(),
            }
        };
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for state in &under {
            *counts.entry(key_of(state)).or_default() += 1;
        }
        let skip = page.saturating_mul(MAX_NODES);
        let more = counts.len() > skip + MAX_NODES;
        let nodes: Vec<Node> = counts
            .into_iter()
            .skip(skip)
            .take(MAX_NODES)
            .map(|(key, states)| Node {
                label: if key.ends_with('/') {
                    format!("{} ({states} states)", &key[prefix.len()..])
                } else {
                    key[prefix.len()..].to_owned()
                },
                key,
                states,
            })
            .collect();
        let index: HashMap<&str, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.key.as_str(), i))
            .collect();
        let mut view = View {
            total: under.len(),
            page,
            more,
            ..View::default()
        };
        for ((consumer, provider), kind) in &graph.edges {
            let at = |state: &str| {
                state
                    .starts_with(prefix)
                    .then(|| index.get(key_of(state).as_str()).copied())
                    .flatten()
            };
            match (at(consumer), at(provider)) {
                (Some(c), Some(p)) if c != p => {
                    let edge = view.edges.entry((c, p)).or_insert(*kind);
                    if *kind == LinkKind::Literal {
                        *edge = LinkKind::Literal;
                    }
                }
                (Some(_), Some(_)) => {}
                (None, None) => {}
                _ => view.outside += 1,
            }
        }
        view.nodes = nodes;
        view
    }

    /// Each box's column: one past the furthest of the providers it uses (those in a circle
    /// with it aside), so every link runs left to right.
    fn columns(&self) -> Vec<usize> {
        let index: HashMap<&str, usize> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.key.as_str(), i))
            .collect();
        let names: BTreeSet<String> = self.nodes.iter().map(|n| n.key.clone()).collect();
        let pairs: Vec<(String, String)> = self
            .edges
            .keys()
            .map(|(c, p)| (self.nodes[*c].key.clone(), self.nodes[*p].key.clone()))
            .collect();
        let mut column = vec![0usize; self.nodes.len()];
        let mut placed = vec![false; self.nodes.len()];
        for name in order(&names, &pairs).order {
            let Some(&i) = index.get(name.as_str()) else {
                continue;
            };
            column[i] = self
                .edges
                .keys()
                .filter(|(c, p)| *c == i && placed[*p])
                .map(|(_, p)| column[*p] + 1)
                .max()
                .unwrap_or(0);
            placed[i] = true;
        }
        column
    }

    /// The SVG: a box per node (a link to `href(node)`), a curve per edge.
    pub fn svg(&self, href: impl Fn(&Node) -> String) -> String {
        let columns = self.columns();
        let mut rows = vec![0usize; columns.iter().max().map_or(1, |m| m + 1)];
        let mut at = Vec::with_capacity(self.nodes.len());
        for &column in &columns {
            at.push((column, rows[column]));
            rows[column] += 1;
        }
        let x = |column: usize| MARGIN + column * COLUMN;
        let y = |row: usize| MARGIN + row * ROW;
        let width = MARGIN * 2 + rows.len() * COLUMN;
        let height = MARGIN * 2 + rows.iter().max().copied().unwrap_or(0) * ROW;
        let mut svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" aria-label=\"dependency graph\" \
             width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\">\
             <defs>{}{}</defs>",
            marker("literal", LITERAL),
            marker("declared", DECLARED)
        );
        for ((consumer, provider), kind) in &self.edges {
            let (pc, pr) = at[*provider];
            let (cc, cr) = at[*consumer];
            let (x1, y1) = (x(pc) + BOX_WIDTH, y(pr) + BOX_HEIGHT / 2);
            let (x2, y2) = (x(cc), y(cr) + BOX_HEIGHT / 2);
            let bend = (x2.abs_diff(x1) / 2).max(30);
            let (class, colour, width) = match kind {
                LinkKind::Literal => ("literal", LITERAL, 2),
                LinkKind::Declared => ("declared", DECLARED, 1),
            };
            let _ = write!(
                svg,
                "<path class=\"link {class}\" d=\"M{x1},{y1} C{},{y1} {},{y2} {x2},{y2}\" fill=\"none\" \
                 stroke=\"{colour}\" stroke-width=\"{width}\" marker-end=\"url(#arrow-{class})\"><title>{} uses {} ({class})</title></path>",
                x1 + bend,
                x2.saturating_sub(bend),
                escape(&self.nodes[*consumer].key),
                escape(&self.nodes[*provider].key),
            );
        }
        for (node, (column, row)) in self.nodes.iter().zip(&at) {
            let (bx, by) = (x(*column), y(*row));
            let fill = if node.states > 1 { "#eef3fb" } else { "#fff" };
            let label: String = node.label.chars().take(34).collect();
            let _ = write!(
                svg,
                "<a href=\"{}\"><rect x=\"{bx}\" y=\"{by}\" width=\"{BOX_WIDTH}\" height=\"{BOX_HEIGHT}\" rx=\"4\" \
                 fill=\"{fill}\" stroke=\"#888\"/><text x=\"{}\" y=\"{}\" font-size=\"12\" \
                 font-family=\"system-ui,sans-serif\">{}</text><title>{}</title></a>",
                escape(&href(node)),
                bx + 6,
                by + 16,
                escape(&label),
                escape(&node.key),
            );
        }
        svg.push_str("</svg>");
        svg
    }
}

/// `GET /_/ui/graph?repo=R&prefix=P&page=N`: the dependency graph of a repository's states.
pub async fn graph(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let repo = params
        .get("repo")
        .filter(|r| !r.is_empty())
        .ok_or_else(|| ApiError::bad_request("name the repository: /_/ui/graph?repo=NAME"))?;
    let prefix = params.get("prefix").map(String::as_str).unwrap_or("");
    if prefix.len() > 1024 {
        return Err(ApiError::bad_request(
            "the prefix is longer than 1,024 bytes",
        ));
    }
    let page_number: usize = match params.get("page") {
        None => 0,
        Some(n) => n
            .parse()
            .ok()
            .filter(|n| *n < 100_000)
            .ok_or_else(|| ApiError::bad_request("?page= takes a number from 0"))?,
    };
    let graph = catalog(&app, &headers).await?.graph(repo).await?;
    let view = View::of(&graph, prefix, page_number);
    let base = format!("/_/ui/graph?repo={}", url_part(repo));
    let mut body = format!(
        "<p><a href=\"/_/ui?repo={}\">← states</a></p><h1>Dependencies in <code>{}</code></h1>\n\
         <p>{} states{}; an arrow runs from a state to a state that uses one of its resources \
         (apply from left to right). <span class=\"literal\">Orange</span>: an identifier copied \
         by hand (literal); grey: read through <code>terraform_remote_state</code> (declared). \
         A box opens its state (or folder).</p>",
        url_part(repo),
        escape(repo),
        view.total,
        if prefix.is_empty() {
            String::new()
        } else {
            format!(" under <code>{}</code>", escape(prefix))
        },
    );
    if view.outside > 0 {
        let _ = write!(
            body,
            "<p>{} links reach states outside this view.</p>",
            view.outside
        );
    }
    body.push_str(&view.svg(|node| {
        if node.key.ends_with('/') {
            format!("{base}&prefix={}", url_part(&node.key))
        } else {
            format!("/_/ui/{}/{}", url_part(repo), url_part(&node.key))
        }
    }));
    let here = format!("{base}&prefix={}", url_part(prefix));
    if view.page > 0 {
        let _ = write!(
            body,
            "<p><a href=\"{}&page={}\">← previous</a></p>",
            escape(&here),
            view.page - 1
        );
    }
    if view.more {
        let _ = write!(
            body,
            "<p><a href=\"{}&page={}\">next →</a></p>",
            escape(&here),
            view.page + 1
        );
    }
    Ok(page(&format!("dependencies in {repo}"), &body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(states: &[String], edges: &[(&str, &str, LinkKind)]) -> Graph {
        let mut graph = Graph {
            states: states.iter().cloned().collect(),
            ..Graph::default()
        };
        for (c, p, k) in edges {
            graph.add(c, p, *k);
        }
        graph
    }

    #[test]
    fn providers_stand_left_of_their_consumers_and_literal_links_are_marked() {
        let states: Vec<String> = ["app.tfstate", "db.tfstate", "network.tfstate"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let g = graph(
            &states,
            &[
                ("app.tfstate", "network.tfstate", LinkKind::Literal),
                ("db.tfstate", "network.tfstate", LinkKind::Declared),
                ("app.tfstate", "db.tfstate", LinkKind::Declared),
            ],
        );
        let view = View::of(&g, "", 0);
        assert_eq!(view.nodes.len(), 3);
        let columns = view.columns();
        // network 0, db 1, app 2
        assert_eq!(columns, [2, 1, 0]);
        let svg = view.svg(|n| format!("/x/{}", n.key));
        assert_eq!(svg.matches("class=\"link literal\"").count(), 1, "{svg}");
        assert_eq!(svg.matches("class=\"link declared\"").count(), 2, "{svg}");
        assert!(svg.contains("href=\"/x/network.tfstate\""), "{svg}");
        assert!(!svg.contains("<script"), "{svg}");
    }

    #[test]
    fn two_thousand_states_are_clustered_by_folder_and_a_big_folder_is_paged() {
        let states: Vec<String> = (0..2_000)
            .map(|i| format!("team-{:02}/svc-{i:04}.tfstate", i % 20))
            .collect();
        let edges: Vec<(String, String)> = (1..2_000)
            .map(|i| (states[i].clone(), states[i - 1].clone()))
            .collect();
        let edge_refs: Vec<(&str, &str, LinkKind)> = edges
            .iter()
            .map(|(c, p)| (c.as_str(), p.as_str(), LinkKind::Declared))
            .collect();
        let g = graph(&states, &edge_refs);
        let top = View::of(&g, "", 0);
        assert_eq!(top.total, 2_000);
        assert_eq!(top.nodes.len(), 20, "one box per folder");
        assert_eq!(top.nodes[0].label, "team-00/ (100 states)");
        assert!(!top.edges.is_empty() && !top.more);
        let folder = View::of(&g, "team-03/", 0);
        assert_eq!(folder.nodes.len(), 100);
        assert!(folder.nodes.iter().all(|n| n.states == 1));
        assert!(folder.outside > 0, "links to the other folders are counted");
        // One flat folder of 2,000: pages of MAX_NODES.
        let flat: Vec<String> = (0..2_000).map(|i| format!("svc-{i:04}.tfstate")).collect();
        let g = graph(&flat, &[]);
        let first = View::of(&g, "", 0);
        assert_eq!(first.nodes.len(), MAX_NODES);
        assert!(first.more);
        let last = View::of(&g, "", 2_000 / MAX_NODES);
        assert_eq!(last.nodes.len(), 2_000 % MAX_NODES);
        assert!(!last.more);
    }
}
