//! Renders a workflow graph as a Mermaid flowchart or Graphviz DOT, edges labelled with their
//! condition names (and their order when a position has several); a role's `onFailure` is a
//! dashed edge labelled `onFailure`.

use std::fmt::Write;

use crate::engine::workflow::{END, START, Workflow};

/// A Mermaid `flowchart TD`.
pub(crate) fn mermaid(w: &Workflow) -> String {
    let ids = node_ids(w);
    let id = |name: &str| {
        ids.iter()
            .find(|(n, _)| n == name)
            .map(|(_, i)| i.clone())
            .unwrap_or_default()
    };
    let mut out = String::from("flowchart TD\n");
    for (name, node_id) in &ids {
        let shape = match name.as_str() {
            START | END => format!("{node_id}((\"{name}\"))"),
            _ => format!("{node_id}[\"{}\"]", name.replace('"', "#quot;")),
        };
        let _ = writeln!(out, "    {shape}");
    }
    for (from, transitions) in ordered_graph(w) {
        for (i, t) in transitions.iter().enumerate() {
            match edge_label(transitions.len(), i, t.condition.as_deref()) {
                Some(label) => {
                    let _ = writeln!(out, "    {} -->|\"{label}\"| {}", id(from), id(&t.role));
                }
                None => {
                    let _ = writeln!(out, "    {} --> {}", id(from), id(&t.role));
                }
            }
        }
    }
    for (from, to) in failure_edges(w) {
        let _ = writeln!(out, "    {} -.->|\"onFailure\"| {}", id(from), id(to));
    }
    out
}

/// A Graphviz `digraph`.
pub(crate) fn dot(w: &Workflow) -> String {
    let quote = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    let mut out = format!("digraph {} {{\n    rankdir=TB;\n", quote(&w.name));
    let _ = writeln!(out, "    {} [shape=circle];", quote(START));
    let _ = writeln!(out, "    {} [shape=doublecircle];", quote(END));
    for role in w.role_order() {
        let _ = writeln!(out, "    {} [shape=box];", quote(role));
    }
    for (from, transitions) in ordered_graph(w) {
        for (i, t) in transitions.iter().enumerate() {
            let label = edge_label(transitions.len(), i, t.condition.as_deref())
                .map(|l| format!(" [label={}]", quote(&l)))
                .unwrap_or_default();
            let _ = writeln!(out, "    {} -> {}{label};", quote(from), quote(&t.role));
        }
    }
    for (from, to) in failure_edges(w) {
        let _ = writeln!(
            out,
            "    {} -> {} [label=\"onFailure\", style=dashed];",
            quote(from),
            quote(to)
        );
    }
    out.push_str("}\n");
    out
}

/// The label of the `i`-th of `count` transitions: its condition, `otherwise` for a null
/// condition after others, numbered when order matters.
fn edge_label(count: usize, i: usize, condition: Option<&str>) -> Option<String> {
    match (count, condition) {
        (1, None) => None,
        (1, Some(c)) => Some(c.to_owned()),
        (_, Some(c)) => Some(format!("{}. {c}", i + 1)),
        (_, None) => Some(format!("{}. otherwise", i + 1)),
    }
}

/// Graph entries in reading order: `$START`, then roles breadth first.
fn ordered_graph(w: &Workflow) -> Vec<(&str, &Vec<crate::engine::workflow::Transition>)> {
    std::iter::once(START)
        .chain(w.role_order())
        .filter_map(|k| w.graph.get_key_value(k).map(|(k, v)| (k.as_str(), v)))
        .collect()
}

/// Each role's `onFailure` edge, roles in reading order.
fn failure_edges(w: &Workflow) -> Vec<(&str, &str)> {
    w.role_order()
        .into_iter()
        .filter_map(|role| Some((role, w.roles.get(role)?.on_failure.as_deref()?)))
        .collect()
}

/// Stable, syntax-safe Mermaid ids: `start`, `r1`, `r2`, …, `done`.
fn node_ids(w: &Workflow) -> Vec<(String, String)> {
    let mut ids = vec![(START.to_owned(), "start".to_owned())];
    for (i, role) in w.role_order().into_iter().enumerate() {
        ids.push((role.to_owned(), format!("r{}", i + 1)));
    }
    ids.push((END.to_owned(), "done".to_owned()));
    ids
}
