//! The dashboard's workflow graph and the thread page's layout, in a real browser (Debian's
//! Chromium over WebDriver, `common::browser`), for the five example workflows: every edge ends in
//! an arrowhead and passes behind no node, every self-loop is drawn outside its role, every
//! condition's name is written where it covers no node and no other label, a finished thread
//! shows its last edge into `$END` as taken, and the live log keeps a readable width beside the
//! graph of a `develop` thread at 1280, 1440 and 1920 pixels. Screenshots go to
//! `target/screenshots/`.
//!
//! Skips with a printed reason where Chromium or chromedriver is missing
//! (`UWF_REQUIRE_ALL_TESTS=1` makes that fail).

mod common;

use std::path::Path;
use std::time::Duration;

use common::browser::{Browser, drawn, one_at_a_time};
use common::serve::Server;
use serde_json::{Value, json};

const EXAMPLES: [&str; 5] = [
    "analyze-topic",
    "develop",
    "document",
    "release-notes",
    "solve-issue",
];

/// A store with the five example workflows and the dry agent for every role.
fn examples_store() -> common::Env {
    let env = common::Env::new();
    for name in EXAMPLES {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("examples/{name}.yaml"));
        env.ok(&["workflow", "put", file.to_str().expect("utf-8")]);
    }
    std::fs::write(env.root().join("config.yaml"), "defaultAgent: dry\n").expect("config.yaml");
    env
}

/// The edges of example `name` as its YAML writes them: (from, to, condition).
fn edges_of(name: &str) -> Vec<(String, String, Option<String>)> {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("examples/{name}.yaml"));
    let yaml: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(file).expect("example")).expect("YAML");
    let mut edges = Vec::new();
    for (from, transitions) in yaml["graph"].as_mapping().expect("a graph") {
        for t in transitions.as_sequence().expect("transitions") {
            edges.push((
                from.as_str().expect("a role").to_owned(),
                t["role"].as_str().expect("a target").to_owned(),
                t["condition"].as_str().map(str::to_owned),
            ));
        }
    }
    edges
}

/// What the drawn graph looks like, measured in the page: nodes' boxes, and for each edge its
/// ends, its arrowhead, its label's box and points sampled every 2 px along it.
const MEASURE: &str = r#"
const graph = document.getElementById('graph');
if (!graph) return null;
const box = (r) => ({ x: r.x, y: r.y, w: r.width, h: r.height });
const nodes = [...graph.querySelectorAll('g.node')].map((g) => ({ role: g.dataset.role, box: box(g.querySelector('rect').getBoundingClientRect()) }));
const origin = graph.getBoundingClientRect();
const frame = box(origin);
const scale = origin.width / graph.viewBox.baseVal.width;
const edges = [...graph.querySelectorAll('g.edge-group')].map((g) => {
  const path = g.querySelector('path.edge');
  const length = path.getTotalLength();
  const points = [];
  for (let at = 0; at <= length; at += 2) {
    const p = path.getPointAtLength(at);
    points.push({ x: origin.x + p.x * scale, y: origin.y + p.y * scale });
  }
  const marker = (path.getAttribute('marker-end') || '').match(/^url\(#(.+)\)$/);
  const label = g.querySelector('text.edge-label');
  return { from: g.dataset.from, to: g.dataset.to, kind: g.dataset.kind, length, points,
    arrow: marker && graph.querySelector(`marker#${marker[1]} path`) ? marker[1] : null,
    taken: path.classList.contains('taken'),
    label: label ? { text: label.textContent, box: box(label.getBoundingClientRect()) } : null };
});
return { nodes, edges, frame };
"#;

struct Rect {
    x: f64,
    y: f64,
    w: f64,
    h: f64,
}

impl Rect {
    fn of(v: &Value) -> Rect {
        let n = |k: &str| v[k].as_f64().expect("a number");
        Rect {
            x: n("x"),
            y: n("y"),
            w: n("w"),
            h: n("h"),
        }
    }

    /// Whether (x, y) lies inside, `margin` pixels in from every side.
    fn holds(&self, x: f64, y: f64, margin: f64) -> bool {
        x > self.x + margin
            && x < self.x + self.w - margin
            && y > self.y + margin
            && y < self.y + self.h - margin
    }

    fn overlaps(&self, o: &Rect) -> bool {
        self.x < o.x + o.w && o.x < self.x + self.w && self.y < o.y + o.h && o.y < self.y + self.h
    }
}

/// Checks the graph on the page against the edges its workflow's YAML writes.
fn check_graph(name: &str, graph: &Value) {
    let nodes: Vec<(String, Rect)> = graph["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| (n["role"].as_str().unwrap().to_owned(), Rect::of(&n["box"])))
        .collect();
    let node = |role: &str| {
        &nodes
            .iter()
            .find(|(r, _)| r == role)
            .unwrap_or_else(|| panic!("{name}: no node {role}"))
            .1
    };
    let drawn = graph["edges"].as_array().expect("edges");
    let written = edges_of(name);
    assert_eq!(drawn.len(), written.len(), "{name}: edges drawn {drawn:?}");
    let mut labels: Vec<(String, Rect)> = Vec::new();
    for (k, (from, to, condition)) in written.iter().enumerate() {
        let e = drawn
            .iter()
            .filter(|e| e["from"] == json!(from) && e["to"] == json!(to))
            .nth(
                written[..k]
                    .iter()
                    .filter(|(f, t, _)| f == from && t == to)
                    .count(),
            )
            .unwrap_or_else(|| panic!("{name}: no edge {from} → {to}"));
        let what = format!("{name}: {from} → {to}");
        assert!(e["arrow"].is_string(), "{what} has no arrowhead");
        assert!(e["length"].as_f64().unwrap() > 20.0, "{what} is not drawn");
        // Behind no node: no point of the edge inside a node other than its own ends (and a
        // self-loop stays outside its role altogether).
        for p in e["points"].as_array().unwrap() {
            let (x, y) = (p["x"].as_f64().unwrap(), p["y"].as_f64().unwrap());
            for (role, rect) in &nodes {
                let own = (role == from || role == to) && from != to;
                if !own {
                    assert!(
                        !rect.holds(x, y, 1.0),
                        "{what} passes behind {role} at ({x:.0}, {y:.0})"
                    );
                }
            }
        }
        if from == to {
            assert_eq!(e["kind"], json!("self"), "{what}");
            let right = e["points"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["x"].as_f64().unwrap())
                .fold(f64::MIN, f64::max);
            let r = node(from);
            assert!(right > r.x + r.w + 10.0, "{what}: the loop is not visible");
        }
        // The condition's name, clear of every node and every other label.
        let outgoing = written.iter().filter(|(f, _, _)| f == from).count();
        let expected = condition
            .clone()
            .or_else(|| (outgoing > 1).then(|| "otherwise".to_owned()));
        match (&expected, e["label"].as_object()) {
            (None, None) => {}
            (Some(text), Some(label)) => {
                assert_eq!(label["text"], json!(text), "{what}");
                let b = Rect::of(&label["box"]);
                let f = Rect::of(&graph["frame"]);
                assert!(
                    b.x >= f.x && b.y >= f.y && b.x + b.w <= f.x + f.w && b.y + b.h <= f.y + f.h,
                    "{what}: label {text} is cut off by the graph's edge"
                );
                for (role, rect) in &nodes {
                    assert!(!rect.overlaps(&b), "{what}: label {text} covers {role}");
                }
                for (other, o) in &labels {
                    assert!(!o.overlaps(&b), "{what}: label {text} covers label {other}");
                }
                labels.push((text.clone(), b));
            }
            (expected, label) => panic!("{what}: label {label:?}, expected {expected:?}"),
        }
    }
}

#[test]
fn every_example_graph_shows_every_edge_arrow_loop_and_condition() {
    let _one = one_at_a_time();
    let Some(browser) =
        Browser::start("every_example_graph_shows_every_edge_arrow_loop_and_condition")
    else {
        return;
    };
    let env = examples_store();
    let server = Server::start(&env, "127.0.0.1:0", &[]);
    let base = server.url.trim_end_matches('/').to_owned();
    // Tall enough for the whole of the largest graph in a screenshot.
    browser.set_window_size(1280, 1500);
    for name in EXAMPLES {
        browser.goto(&format!("{base}/workflows/{name}"));
        drawn(&browser, &format!("/workflows/{name}"));
        let graph = browser.execute(MEASURE, vec![]);
        assert!(graph.is_object(), "{name}: no graph on the page");
        browser.screenshot(&format!("graph-{name}"));
        check_graph(name, &graph);
        assert_eq!(browser.console_errors(), Vec::<String>::new(), "{name}");
    }
}

#[test]
fn a_finished_thread_shows_its_edge_into_end_as_taken() {
    let _one = one_at_a_time();
    let Some(browser) = Browser::start("a_finished_thread_shows_its_edge_into_end_as_taken") else {
        return;
    };
    let env = examples_store();
    let id = env.ok(&[
        "thread",
        "start",
        "solve-issue",
        "-p",
        "Fix the login",
        "-q",
    ]);
    env.ok(&["thread", "run", &id]);
    let show = common::json(&env.ok(&["thread", "show", &id]));
    assert_eq!(show["status"], json!("done"), "{show}");
    let server = Server::start(&env, "127.0.0.1:0", &[]);
    let base = server.url.trim_end_matches('/').to_owned();
    browser.goto(&format!("{base}/threads/{id}"));
    drawn(&browser, &format!("/threads/{id}"));
    let graph = browser.execute(MEASURE, vec![]);
    let taken: Vec<(String, String)> = graph["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .filter(|e| e["taken"] == json!(true))
        .map(|e| {
            (
                e["from"].as_str().unwrap().to_owned(),
                e["to"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        taken.iter().any(|(f, t)| f == "reviewer" && t == "$END"),
        "the last edge is not taken: {taken:?}"
    );
    assert!(
        taken.iter().any(|(f, t)| f == "$START" && t == "planner"),
        "{taken:?}"
    );
    let end_visited = browser.execute(
        "return document.querySelector('#graph g.node[data-role=\"$END\"]').classList.contains('visited')",
        vec![],
    );
    assert_eq!(end_visited, json!(true), "$END is not shown as reached");
    browser.screenshot("graph-finished-thread");
}

#[test]
fn the_live_log_keeps_its_width_beside_a_develop_graph() {
    let _one = one_at_a_time();
    let Some(browser) = Browser::start("the_live_log_keeps_its_width_beside_a_develop_graph")
    else {
        return;
    };
    let env = examples_store();
    let id = env.ok(&[
        "thread",
        "start",
        "develop",
        "-p",
        "Add a --dry-run flag",
        "-q",
    ]);
    env.run(&["thread", "run", &id, "--max-steps", "4"]);
    let server = Server::start(&env, "127.0.0.1:0", &[]);
    let base = server.url.trim_end_matches('/').to_owned();
    for width in [1280, 1440, 1920] {
        browser.set_window_size(width, 1000);
        browser.goto(&format!("{base}/threads/{id}"));
        drawn(&browser, &format!("/threads/{id}"));
        browser.wait_until(Duration::from_secs(3), || {
            browser
                .execute("return document.getElementById('log').textContent", vec![])
                .as_str()
                .is_some_and(|t| !t.is_empty())
        });
        let sizes = browser.execute(
            "const log = document.getElementById('log').getBoundingClientRect();
             const main = document.getElementById('page').getBoundingClientRect();
             const graph = document.getElementById('graph').getBoundingClientRect();
             return { log: log.width, main: main.width, graph: graph.width, right: graph.right, logLeft: log.left };",
            vec![],
        );
        let (log, main) = (
            sizes["log"].as_f64().unwrap(),
            sizes["main"].as_f64().unwrap(),
        );
        assert!(
            log >= 400.0 && log >= 0.4 * main,
            "at {width} px the log is {log:.0} px wide of {main:.0}: {sizes}"
        );
        assert!(
            sizes["right"].as_f64().unwrap() <= sizes["logLeft"].as_f64().unwrap(),
            "at {width} px the graph runs under the log: {sizes}"
        );
        browser.screenshot(&format!("develop-thread-{width}"));
    }
    assert_eq!(browser.console_errors(), Vec::<String>::new());
}
