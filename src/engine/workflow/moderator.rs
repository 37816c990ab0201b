//! The moderator: picks a thread's next role by evaluating the workflow's JSONata conditions
//! against the thread's context (`docs/workflows.md#the-format`).
//!
//! Context shape: `{"start": {"workflow", "prompt"}, "steps": [{"role", "output", "detail",
//! "agent"}, …]}`, oldest first; a step that records its role's failure (`onFailure`) has
//! `"output": null` and `"error": {"message", "attempts"}`. The position is the last step's
//! role, or `$START`. When that step failed and its role declares `onFailure`, that target is
//! next before any transition is tried. Otherwise the transitions of the position are tried in
//! order; `condition: null` always matches; a named condition matches only when its result is
//! boolean `true`. The first match wins.
//!
//! Architecture Invariant: the context is converted for the engine once per decision (an
//! [`Input`]), not once per condition, and every evaluation is bounded by [`Limits`]. No I/O.

use crate::advice::Advice;
use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

use crate::engine::chain::{Entry, History};
use crate::engine::workflow::jsonata::{self, Compiling, Expr, Input, JsonataError, Limits};
use crate::engine::workflow::{START, Workflow};

/// Errors of a routing decision.
#[derive(Debug, thiserror::Error)]
pub enum ModeratorError {
    #[error("no transition out of `{position}` matched (tried: {})", tried.join(", "))]
    NoMatch {
        position: String,
        tried: Vec<String>,
    },
    #[error("condition `{condition}` failed: {error}\n  expression: {expression}")]
    Evaluation {
        condition: String,
        expression: String,
        error: JsonataError,
    },
    #[error("condition `{condition}` does not compile: {error}")]
    Compile {
        condition: String,
        error: JsonataError,
    },
    #[error("the thread is at `{0}`, which has no entry in the workflow's graph")]
    UnknownPosition(String),
}

impl Advice for ModeratorError {
    fn hints(&self) -> Vec<String> {
        match self {
            ModeratorError::NoMatch { .. } => vec![
                "add a final `condition: null` transition so routing never dead-ends".to_owned(),
            ],
            _ => Vec::new(),
        }
    }
}

/// How one transition fared.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// `condition: null`: always matches.
    Always,
    /// The condition evaluated; it matches only when the value is boolean `true`. `None` is
    /// JSONata's undefined.
    Evaluated(Option<Value>),
    /// The condition raised an error.
    Failed(JsonataError),
    /// Not evaluated because an earlier transition matched.
    NotTried,
    /// The role's `onFailure`, taken first because the step at the position failed.
    OnFailure,
}

impl Outcome {
    /// The outcome in words, as `thread why` and the dashboard show it.
    pub(crate) fn verdict(&self) -> String {
        match self {
            Outcome::Always => "always matches".to_owned(),
            Outcome::Evaluated(Some(v)) => format!("= {v}"),
            Outcome::Evaluated(None) => "= undefined".to_owned(),
            Outcome::Failed(e) => format!("error: {e}"),
            Outcome::NotTried => "not tried".to_owned(),
            Outcome::OnFailure => "the step failed: onFailure".to_owned(),
        }
    }
}

impl Outcome {
    pub(crate) fn matched(&self) -> bool {
        matches!(
            self,
            Outcome::Always | Outcome::Evaluated(Some(Value::Bool(true))) | Outcome::OnFailure
        )
    }
}

/// Where a thread stands for routing: its position (the last step's role, or `$START`) and
/// whether the step there recorded its role's failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct At<'a> {
    pub position: &'a str,
    pub failed: bool,
}

impl<'a> At<'a> {
    /// At `position`, whose step (if any) did not fail.
    #[cfg(test)]
    pub(crate) fn ok(position: &'a str) -> At<'a> {
        At {
            position,
            failed: false,
        }
    }

    /// Where `context` stands: its last step's role, and whether that step has an `error`.
    pub(crate) fn of(context: &'a Value) -> At<'a> {
        let last = context
            .get("steps")
            .and_then(Value::as_array)
            .and_then(|steps| steps.last());
        At {
            position: position(context),
            failed: last
                .and_then(|step| step.get("error"))
                .is_some_and(|e| !e.is_null()),
        }
    }
}

impl History {
    /// Where the thread whose history this is stands.
    pub(crate) fn at(&self) -> At<'_> {
        At {
            position: self.position(),
            failed: self.failed(),
        }
    }
}

impl Entry {
    /// Where a thread whose last step is this one stands.
    pub(crate) fn at(&self) -> At<'_> {
        At {
            position: &self.role,
            failed: self.error().is_some(),
        }
    }
}

/// One transition with its outcome.
#[derive(Debug, Clone)]
pub struct Tried {
    pub target: String,
    pub condition: Option<String>,
    pub expression: Option<String>,
    pub outcome: Outcome,
}

impl Tried {
    /// `{to, condition, expression, verdict, matched}`, as `thread why --json` and the dashboard
    /// give each transition tried.
    pub(crate) fn to_json(&self) -> Value {
        serde_json::json!({"to": self.target, "condition": self.condition,
            "expression": self.expression, "verdict": self.outcome.verdict(),
            "matched": self.outcome.matched()})
    }
}

/// A routing decision.
#[derive(Debug, Clone)]
pub struct Decision {
    pub position: String,
    /// The chosen role, or `$END`.
    pub next: String,
    pub trace: Vec<Tried>,
}

impl Decision {
    #[cfg(test)]
    pub(crate) fn is_end(&self) -> bool {
        self.next == crate::engine::workflow::END
    }
}

/// A workflow's routing with its conditions compiled once.
#[derive(Debug)]
pub struct Moderator {
    workflow: Workflow,
    /// The compiled conditions, or the first that does not compile. Set by [`Moderator::new`];
    /// after [`Moderator::new_on`], filled from `compiling` at the first decision.
    conditions: OnceLock<Result<BTreeMap<String, Expr>, (String, JsonataError)>>,
    compiling: Mutex<Vec<(String, Compiling)>>,
    limits: Limits,
}

/// The position a context is at: the last step's role, or `$START`.
pub(crate) fn position(context: &Value) -> &str {
    context
        .get("steps")
        .and_then(Value::as_array)
        .and_then(|steps| steps.last())
        .and_then(|step| step.get("role"))
        .and_then(Value::as_str)
        .unwrap_or(START)
}

impl Moderator {
    pub fn new(workflow: Workflow) -> Result<Moderator, ModeratorError> {
        let mut conditions = BTreeMap::new();
        for (name, c) in &workflow.conditions {
            let expr =
                jsonata::compile(&c.expression).map_err(|error| ModeratorError::Compile {
                    condition: name.clone(),
                    error,
                })?;
            conditions.insert(name.clone(), expr);
        }
        Ok(Moderator {
            workflow,
            conditions: OnceLock::from(Ok(conditions)),
            compiling: Mutex::new(Vec::new()),
            limits: Limits::default(),
        })
    }

    /// A moderator whose conditions compile on `input`'s evaluation thread meanwhile (see
    /// [`Input::compile_later`]): what a step makes, which evaluates them against that input
    /// after its agent ran. A condition that does not compile fails the first decision (and
    /// [`Moderator::compiled`]) with the error [`Moderator::new`] would have returned.
    pub(crate) fn new_on(workflow: Workflow, input: &Input) -> Moderator {
        let compiling = workflow
            .conditions
            .iter()
            .map(|(name, c)| (name.clone(), input.compile_later(&c.expression)))
            .collect();
        Moderator {
            workflow,
            conditions: OnceLock::new(),
            compiling: Mutex::new(compiling),
            limits: Limits::default(),
        }
    }

    /// Whether every condition compiled: what [`Moderator::new`] checks at once, and a
    /// moderator from [`Moderator::new_on`] at its first decision or here, waiting for the
    /// compilation (a step asks before it publishes anything).
    pub(crate) fn compiled(&self) -> Result<(), ModeratorError> {
        self.conditions().map(drop)
    }

    /// The compiled conditions, waiting for those still being compiled.
    fn conditions(&self) -> Result<&BTreeMap<String, Expr>, ModeratorError> {
        let compiled = self.conditions.get_or_init(|| {
            let deadline = std::time::Instant::now() + jsonata::COMPILE_WAIT;
            let compiling = std::mem::take(
                &mut *self
                    .compiling
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            let mut conditions = BTreeMap::new();
            for (name, c) in compiling {
                match c.finish_by(deadline) {
                    Ok(expr) => conditions.insert(name, expr),
                    Err(error) => return Err((name, error)),
                };
            }
            Ok(conditions)
        });
        compiled
            .as_ref()
            .map_err(|(condition, error)| ModeratorError::Compile {
                condition: condition.clone(),
                error: error.clone(),
            })
    }

    /// Picks the next role for `context`, stopping at the first match.
    pub fn decide(&self, context: &Value) -> Result<Decision, ModeratorError> {
        let input = Input::new(context.clone());
        self.run(At::of(context), &input, true)
    }

    /// Picks the next role for a thread's chain (the context is handed to the engine as text).
    pub(crate) fn decide_chain(
        &self,
        chain: &crate::engine::chain::Chain,
    ) -> Result<Decision, ModeratorError> {
        let input = Input::from_json_text(chain.context_json());
        let failed = chain.steps.last().is_some_and(|s| s.error().is_some());
        let at = At {
            position: chain.position(),
            failed,
        };
        self.run(at, &input, true)
    }

    /// Picks the next role from an already prepared input of a thread standing `at`.
    pub(crate) fn decide_prepared(
        &self,
        at: At<'_>,
        input: &Input,
    ) -> Result<Decision, ModeratorError> {
        self.run(at, input, true)
    }

    /// The `onFailure` target taken first at `at`: its step failed and its role declares one.
    fn on_failure(&self, at: At<'_>) -> Option<&str> {
        if !at.failed {
            return None;
        }
        let role = self.workflow.roles.get(at.position)?;
        role.on_failure.as_deref()
    }

    fn on_failure_tried(&self, target: &str) -> Tried {
        self.tried(target.to_owned(), None, Outcome::OnFailure)
    }

    /// Evaluates every transition of the current position (for `thread why`) and records each
    /// outcome, errors included. The decision is exactly a step's ([`Moderator::decide`]): the
    /// first match, unless a condition tried before it fails (then the step would fail with
    /// that error) or nothing matches.
    pub(crate) fn explain(
        &self,
        context: &Value,
    ) -> Result<(Vec<Tried>, Result<String, ModeratorError>), ModeratorError> {
        let at = At::of(context);
        let position = at.position.to_owned();
        let input = Input::new(context.clone());
        let transitions = self
            .workflow
            .graph
            .get(&position)
            .ok_or_else(|| ModeratorError::UnknownPosition(position.clone()))?;
        let conditions = self.conditions()?;
        let mut trace = Vec::new();
        let mut decision = None;
        if let Some(target) = self.on_failure(at) {
            trace.push(self.on_failure_tried(target));
            decision = Some(Ok(target.to_owned()));
        }
        for t in transitions {
            let outcome = self.outcome(conditions, t.condition.as_deref(), &input);
            if decision.is_none() {
                if let Outcome::Failed(error) = &outcome {
                    let condition = t.condition.clone().unwrap_or_default();
                    decision = Some(Err(ModeratorError::Evaluation {
                        expression: self.expression_of(&condition),
                        condition,
                        error: error.clone(),
                    }));
                } else if outcome.matched() {
                    decision = Some(Ok(t.role.clone()));
                }
            }
            trace.push(self.tried(t.role.clone(), t.condition.clone(), outcome));
        }
        let decision = decision.unwrap_or_else(|| {
            Err(ModeratorError::NoMatch {
                position: position.clone(),
                tried: transitions
                    .iter()
                    .map(|t| t.condition.clone().unwrap_or_else(|| "null".into()))
                    .collect(),
            })
        });
        Ok((trace, decision))
    }

    fn run(
        &self,
        at: At<'_>,
        input: &Input,
        stop_at_match: bool,
    ) -> Result<Decision, ModeratorError> {
        let position = at.position;
        let transitions = self
            .workflow
            .graph
            .get(position)
            .ok_or_else(|| ModeratorError::UnknownPosition(position.to_owned()))?;
        let conditions = self.conditions()?;
        let mut trace: Vec<Tried> = Vec::new();
        let mut next = None;
        if let Some(target) = self.on_failure(at) {
            trace.push(self.on_failure_tried(target));
            next = Some(target.to_owned());
        }
        for t in transitions {
            if next.is_some() && stop_at_match {
                trace.push(self.tried(t.role.clone(), t.condition.clone(), Outcome::NotTried));
                continue;
            }
            let outcome = self.outcome(conditions, t.condition.as_deref(), input);
            if let Outcome::Failed(error) = &outcome {
                let condition = t.condition.clone().unwrap_or_default();
                return Err(ModeratorError::Evaluation {
                    expression: self.expression_of(&condition),
                    condition,
                    error: error.clone(),
                });
            }
            if next.is_none() && outcome.matched() {
                next = Some(t.role.clone());
            }
            trace.push(self.tried(t.role.clone(), t.condition.clone(), outcome));
        }
        match next {
            Some(next) => Ok(Decision {
                position: position.to_owned(),
                next,
                trace,
            }),
            None => Err(ModeratorError::NoMatch {
                position: position.to_owned(),
                tried: transitions
                    .iter()
                    .map(|t| t.condition.clone().unwrap_or_else(|| "null".into()))
                    .collect(),
            }),
        }
    }

    fn outcome(
        &self,
        conditions: &BTreeMap<String, Expr>,
        condition: Option<&str>,
        input: &Input,
    ) -> Outcome {
        let Some(name) = condition else {
            return Outcome::Always;
        };
        let Some(expr) = conditions.get(name) else {
            // Validation guarantees every referenced condition exists; a stored workflow that
            // says otherwise is reported as an evaluation failure, not a panic.
            return Outcome::Failed(JsonataError::Evaluate {
                code: None,
                message: format!("condition `{name}` is not defined in the workflow"),
            });
        };
        match expr.evaluate_prepared(input, &[], &self.limits) {
            Ok(value) => Outcome::Evaluated(value),
            Err(e) => Outcome::Failed(e),
        }
    }

    fn tried(&self, target: String, condition: Option<String>, outcome: Outcome) -> Tried {
        let expression = condition.as_deref().map(|c| self.expression_of(c));
        Tried {
            target,
            condition,
            expression,
            outcome,
        }
    }

    fn expression_of(&self, condition: &str) -> String {
        self.workflow
            .conditions
            .get(condition)
            .map(|c| c.expression.clone())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::workflow;
    use serde_json::json;

    const YAML: &str = r#"
name: review-loop
roles:
  writer: { meta: { type: object } }
  reviewer: { meta: { type: object, properties: { approved: { type: boolean } } } }
conditions:
  notApproved: { expression: "steps[-1].output.approved = false" }
  tooMany: { expression: "$count(steps[role='reviewer']) >= 3" }
  truthy: { expression: "'yes'" }
  broken: { expression: "$number('abc') + {}" }
graph:
  $START: [ { role: writer, condition: null } ]
  writer: [ { role: reviewer, condition: null } ]
  reviewer:
    - { role: $END, condition: tooMany }
    - { role: writer, condition: notApproved }
    - { role: $END, condition: null }
"#;

    fn moderator(yaml: &str) -> Moderator {
        let checked = workflow::parse(yaml).unwrap_or_else(|p| panic!("{p:?}"));
        Moderator::new(checked.definition.workflow).unwrap()
    }

    fn ctx(steps: Value) -> Value {
        json!({"start": {"workflow": "4G86E2KECAKQG", "prompt": "p"}, "steps": steps})
    }

    #[test]
    fn starts_at_start_and_follows_null_conditions() {
        let m = moderator(YAML);
        let d = m.decide(&ctx(json!([]))).unwrap();
        assert_eq!((d.position.as_str(), d.next.as_str()), ("$START", "writer"));
        let d = m
            .decide(&ctx(json!([{"role": "writer", "output": {}}])))
            .unwrap();
        assert_eq!(d.next, "reviewer");
    }

    #[test]
    fn transitions_are_tried_in_order_first_match_wins() {
        let m = moderator(YAML);
        let rejected = json!([{"role": "writer", "output": {}}, {"role": "reviewer", "output": {"approved": false}}]);
        let d = m.decide(&ctx(rejected)).unwrap();
        assert_eq!(d.next, "writer");
        assert_eq!(d.trace[0].outcome, Outcome::Evaluated(Some(json!(false))));
        assert!(d.trace[1].outcome.matched());
        assert_eq!(d.trace[2].outcome, Outcome::NotTried);

        let approved = json!([{"role": "reviewer", "output": {"approved": true}}]);
        assert_eq!(m.decide(&ctx(approved)).unwrap().next, "$END");

        let three = json!([{"role": "reviewer", "output": {"approved": false}}, {"role": "reviewer", "output": {"approved": false}}, {"role": "reviewer", "output": {"approved": false}}]);
        let d = m.decide(&ctx(three)).unwrap();
        assert!(d.is_end());
        assert!(d.trace[0].outcome.matched());
    }

    #[test]
    fn only_boolean_true_matches() {
        let yaml = YAML
            .replace(
                "- { role: $END, condition: tooMany }",
                "- { role: $END, condition: truthy }",
            )
            .replace(
                "steps[-1].output.approved = false",
                "steps[-1].output.approved",
            );
        let m = moderator(&yaml);
        // `'yes'` is truthy in JSONata, but not boolean true; undefined (no `approved`) neither.
        let d = m
            .decide(&ctx(json!([{"role": "reviewer", "output": {}}])))
            .unwrap();
        assert_eq!(d.trace[0].outcome, Outcome::Evaluated(Some(json!("yes"))));
        assert_eq!(d.trace[1].outcome, Outcome::Evaluated(None));
        assert_eq!(d.next, "$END");
        assert_eq!(d.trace[2].outcome, Outcome::Always);
    }

    #[test]
    fn conditions_compiled_on_the_input_decide_as_the_eager_ones() {
        let checked = workflow::parse(YAML).unwrap_or_else(|p| panic!("{p:?}"));
        let wf = checked.definition.workflow;
        let eager = Moderator::new(wf.clone()).unwrap();
        let review = |approved: bool| json!({"role": "reviewer", "output": {"approved": approved}});
        let writer = json!({"role": "writer", "output": {}});
        for steps in [
            json!([]),
            json!([writer]),
            json!([writer, review(false)]),
            json!([writer, review(true)]),
            json!([review(false), review(false), review(false)]),
        ] {
            let context = ctx(steps);
            let input = Input::new(context.clone());
            let lazy = Moderator::new_on(wf.clone(), &input);
            assert_eq!(
                format!("{:?}", lazy.decide_prepared(At::of(&context), &input)),
                format!("{:?}", eager.decide(&context)),
                "{context}"
            );
        }
    }

    #[test]
    fn a_condition_compiled_on_the_input_that_does_not_compile_fails_each_decision() {
        let checked = workflow::parse(YAML).unwrap_or_else(|p| panic!("{p:?}"));
        let mut wf = checked.definition.workflow;
        wf.conditions.get_mut("tooMany").unwrap().expression = "steps[".into();
        let eager = Moderator::new(wf.clone()).unwrap_err().to_string();
        assert!(
            eager.contains("condition `tooMany` does not compile"),
            "{eager}"
        );
        let input = Input::new(ctx(json!([])));
        let lazy = Moderator::new_on(wf, &input);
        assert_eq!(lazy.compiled().unwrap_err().to_string(), eager);
        for _ in 0..2 {
            let err = lazy.decide_prepared(At::ok(START), &input).unwrap_err();
            assert_eq!(err.to_string(), eager);
        }
    }

    #[test]
    fn a_failed_step_takes_its_roles_on_failure_first() {
        let yaml = YAML.replace(
            "  reviewer: { meta:",
            "  fallback: { meta: { type: object } }\n  reviewer: { onFailure: fallback, retry: 2, meta:",
        ) + "  fallback: [ { role: $END, condition: null } ]\n";
        let m = moderator(&yaml);
        let error = json!({"message": "agent `x` exited with exit code 3", "attempts": 3});
        let failed = ctx(json!([{"role": "reviewer", "output": null, "error": error}]));
        let d = m.decide(&failed).unwrap();
        assert_eq!(d.next, "fallback");
        assert_eq!(d.trace[0].outcome, Outcome::OnFailure);
        assert!(d.trace[1..].iter().all(|t| t.outcome == Outcome::NotTried));
        let input = Input::new(failed.clone());
        let at = At::of(&failed);
        assert_eq!(
            at,
            At {
                position: "reviewer",
                failed: true
            }
        );
        assert_eq!(m.decide_prepared(at, &input).unwrap().next, "fallback");
        let (trace, decision) = m.explain(&failed).unwrap();
        assert_eq!(
            (trace[0].outcome.clone(), decision.unwrap()),
            (Outcome::OnFailure, "fallback".into())
        );
        // The same position without a failure routes by the graph; so does a failure at a
        // role without `onFailure` (a thread rebased onto a workflow that dropped it).
        let approved = ctx(json!([{"role": "reviewer", "output": {"approved": true}}]));
        assert_eq!(m.decide(&approved).unwrap().next, "$END");
        let writer = ctx(json!([{"role": "writer", "output": null, "error": error}]));
        assert_eq!(m.decide(&writer).unwrap().next, "reviewer");
    }

    #[test]
    fn no_match_names_position_and_conditions() {
        let yaml = YAML.replace("    - { role: $END, condition: null }\n", "");
        let m = moderator(&yaml);
        let err = m
            .decide(&ctx(
                json!([{"role": "reviewer", "output": {"approved": true}}]),
            ))
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("no transition out of `reviewer` matched (tried: tooMany, notApproved)"),
            "{text}"
        );
    }

    #[test]
    fn evaluation_errors_name_condition_and_expression() {
        let yaml = YAML.replace(
            "- { role: $END, condition: tooMany }",
            "- { role: $END, condition: broken }",
        );
        let m = moderator(&yaml);
        let err = m
            .decide(&ctx(json!([{"role": "reviewer", "output": {}}])))
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("condition `broken` failed") && text.contains("$number('abc') + {}"),
            "{text}"
        );
        // `explain` records the failure and the later match, and decides as the step does:
        // the failure comes first, so the step fails with it (issue #27 item 10).
        let (trace, decision) = m
            .explain(&ctx(
                json!([{"role": "reviewer", "output": {"approved": false}}]),
            ))
            .unwrap();
        assert!(matches!(trace[0].outcome, Outcome::Failed(_)));
        assert!(trace[1].outcome.matched(), "{trace:?}");
        let err = decision.unwrap_err().to_string();
        assert!(err.contains("condition `broken` failed"), "{err}");
    }

    #[test]
    fn hostile_condition_fails_cleanly_and_quickly() {
        let yaml = YAML
            .replace("'yes'", "($f := function($x){ $f($x) + 1 }; $f(1))")
            .replace(
                "- { role: $END, condition: tooMany }",
                "- { role: $END, condition: truthy }",
            );
        let m = moderator(&yaml);
        let started = std::time::Instant::now();
        let err = m
            .decide(&ctx(json!([{"role": "reviewer", "output": {}}])))
            .unwrap_err();
        assert!(
            started.elapsed() < std::time::Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        assert!(
            err.to_string().contains("condition `truthy` failed"),
            "{err}"
        );
    }
}
