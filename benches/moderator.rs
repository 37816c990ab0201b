//! Moderator decision time for a 10-step and a 1,000-step context.
//!
//! Run: `cargo bench --bench moderator`. Prints medians, asserts nothing. Side by side in one run:
//! a decision as the engine makes it (context converted for JSONata once per decision) and the
//! naive way (converted once per condition), to show why the first matters as threads grow.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use uwf::engine::workflow;
use uwf::engine::workflow::jsonata::{self, Limits};
use uwf::engine::workflow::moderator::Moderator;

const WORKFLOW: &str = r#"
name: bench
roles:
  planner: { meta: { type: object } }
  coder: { meta: { type: object } }
  reviewer: { meta: { type: object } }
conditions:
  tooManyRounds: { expression: "$count(steps[role='reviewer']) >= 500" }
  hasIssues: { expression: "$exists(steps[-1].output.issues) and $count(steps[-1].output.issues) > 0" }
  notApproved: { expression: "steps[-1].output.approved = false" }
  phasesLeft: { expression: "$count(steps[role='coder']) < $count(steps[role='planner'][-1].output.phases)" }
graph:
  $START: [ { role: planner, condition: null } ]
  planner: [ { role: coder, condition: null } ]
  coder: [ { role: reviewer, condition: null } ]
  reviewer:
    - { role: $END, condition: tooManyRounds }
    - { role: coder, condition: hasIssues }
    - { role: coder, condition: phasesLeft }
    - { role: planner, condition: notApproved }
    - { role: $END, condition: null }
"#;

fn context(steps: usize) -> Value {
    let roles = ["planner", "coder", "reviewer"];
    let list: Vec<Value> = (0..steps)
        .map(|i| {
            let role = if i + 1 == steps { "reviewer" } else { roles[i % 3] };
            json!({
                "role": role,
                "agent": "script",
                "detail": "FT12V7ESWYX6K",
                "output": {
                    "approved": i % 7 == 0 || i + 1 == steps,
                    "phases": ["design", "build", "test"],
                    "summary": format!("step {i}: a paragraph of prose about what was done, long enough to be realistic"),
                    "issues": []
                }
            })
        })
        .collect();
    json!({"start": {"workflow": "4G86E2KECAKQG", "prompt": "Build the thing"}, "steps": list})
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() {
    let checked = workflow::parse(WORKFLOW).expect("bench workflow is valid");
    let conditions: Vec<jsonata::Expr> = checked
        .definition
        .workflow
        .conditions
        .values()
        .map(|c| jsonata::compile(&c.expression).expect("compiles"))
        .collect();
    let moderator = Moderator::new(checked.definition.workflow).expect("moderator");
    println!("moderator: 5 transitions at the last position, 4 conditions evaluated per decision");
    for steps in [10usize, 1000] {
        let ctx = context(steps);
        let runs = if steps > 100 { 200 } else { 2000 };
        let mut once = Vec::with_capacity(runs);
        let mut naive = Vec::with_capacity(runs);
        for _ in 0..runs {
            let t = Instant::now();
            let d = moderator.decide(&ctx).expect("decides");
            once.push(t.elapsed());
            assert_eq!(d.next, "$END");

            let t = Instant::now();
            for c in &conditions {
                let _ = c.evaluate(&ctx, &[], &Limits::default());
            }
            naive.push(t.elapsed());
        }
        let (once, naive) = (median(once), median(naive));
        println!(
            "{steps:>5} steps ({:>6} KB of JSON): decision {:>9.1?} median | converting per condition {:>9.1?} ({:.1}x)",
            serde_json::to_vec(&ctx)
                .map(|v| v.len() / 1024)
                .unwrap_or(0),
            once,
            naive,
            naive.as_secs_f64() / once.as_secs_f64()
        );
    }
}
