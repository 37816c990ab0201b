//! Workflow definitions: the types of the YAML form people write and of the stored form.
//!
//! Checking YAML text against every rule of a workflow is [`super::validate`].
//!
//! The stored form ([`Workflow`], the payload of a `workflow` node) is the definition with each
//! role's `meta` schema replaced by the hash of its schema node. [`Definition::to_yaml`] renders a
//! stored workflow back with schemas inline, and that text parses to the same payload again.

use crate::advice::Advice;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use serde_yaml::Value as Yaml;

use crate::cas::{Hash, Store, StoreError, builtin};

/// The reserved positions before the first step and after the last (defined with the engine's
/// shared vocabulary, below every room that names them).
pub(crate) use crate::engine::{END, START};

/// One problem found in a definition, with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub location: String,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

/// Errors of the workflow layer.
#[derive(Debug, thiserror::Error)]
pub enum WorkflowError {
    #[error("workflow definition refused ({} problem{}):\n{}", problems.len(), if problems.len() == 1 { "" } else { "s" }, list(problems))]
    Invalid { problems: Vec<Problem> },
    #[error("{0} is not a workflow node")]
    NotAWorkflow(Hash),
    #[error("stored workflow {hash} cannot be read: {reason}")]
    Damaged { hash: Hash, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Advice for WorkflowError {
    fn hints(&self) -> Vec<String> {
        match self {
            WorkflowError::Store(e) => e.hints(),
            _ => Vec::new(),
        }
    }
    fn is_busy(&self) -> bool {
        match self {
            WorkflowError::Store(e) => e.is_busy(),
            _ => false,
        }
    }
}

fn list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("  - {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The most times a role may declare its agent re-run after a failure (`retry`).
pub(crate) const MAX_RETRY: u32 = 10;

/// A role as stored: prompt parts, the hash of its output schema, and what happens when its agent
/// fails (`docs/workflows.md#when-a-role-fails`; absent fields are left out, so a workflow that
/// uses neither keeps the payload and the hash it had before they existed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Role {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub procedure: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    pub meta: Hash,
    /// How many times the agent runs again after a failed attempt (at most [`MAX_RETRY`]);
    /// absent, or 0, is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<u32>,
    /// Where the thread goes when the role failed every attempt: a role or `$END`. A step
    /// recording the failure is published first. Absent: the step fails, the thread stays.
    #[serde(default, rename = "onFailure", skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<String>,
}

impl Role {
    /// Whether the role uses a field the first `workflow` schema does not have (its workflow is
    /// then stored as `workflow-v2`).
    fn uses_v2(&self) -> bool {
        self.retry.is_some() || self.on_failure.is_some()
    }
}

/// A named JSONata condition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub expression: String,
}

/// One edge of the graph; `condition: None` always matches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Transition {
    pub role: String,
    pub condition: Option<String>,
}

/// The payload of a `workflow` node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workflow {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub roles: BTreeMap<String, Role>,
    #[serde(default)]
    pub conditions: BTreeMap<String, Condition>,
    pub graph: BTreeMap<String, Vec<Transition>>,
}

impl Workflow {
    /// Reads a stored workflow.
    pub(crate) fn load(store: &Store, hash: Hash) -> Result<Workflow, WorkflowError> {
        let node = store.get(hash)?;
        if !builtin::is_workflow(node.type_hash) {
            return Err(WorkflowError::NotAWorkflow(hash));
        }
        serde_json::from_value(node.payload).map_err(|e| WorkflowError::Damaged {
            hash,
            reason: e.to_string(),
        })
    }

    /// Roles in the order a reader meets them: breadth first from `$START` along the graph
    /// (a role's `onFailure` target after its transitions), then any unreachable ones by name.
    pub(crate) fn role_order(&self) -> Vec<&str> {
        let mut order: Vec<&str> = Vec::new();
        let mut queue = VecDeque::from([START]);
        let mut seen = BTreeSet::from([START]);
        while let Some(at) = queue.pop_front() {
            let targets = self.graph.get(at).into_iter().flatten().map(|t| &t.role);
            let on_failure = self.roles.get(at).and_then(|r| r.on_failure.as_ref());
            for role in targets.chain(on_failure) {
                if self.roles.contains_key(role) && seen.insert(role.as_str()) {
                    order.push(role.as_str());
                    queue.push_back(role.as_str());
                }
            }
        }
        for name in self.roles.keys() {
            if !seen.contains(name.as_str()) {
                order.push(name);
            }
        }
        order
    }
}

/// A validated definition in its YAML form: schemas inline, not yet stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Definition {
    pub workflow: Workflow,
    /// Each role's output schema, by role name.
    pub schemas: BTreeMap<String, Json>,
}

/// The outcome of checking a definition.
#[derive(Debug)]
pub struct Checked {
    pub definition: Definition,
    pub warnings: Vec<Problem>,
}

impl Definition {
    /// Stores the role schemas and the workflow node; returns the workflow's hash.
    pub(crate) fn store(&self, store: &Store) -> Result<Hash, WorkflowError> {
        let mut workflow = self.workflow.clone();
        for (name, schema) in &self.schemas {
            let hash = store.put(Hash::META, schema)?;
            if let Some(role) = workflow.roles.get_mut(name) {
                role.meta = hash;
            }
        }
        let payload = serde_json::to_value(&workflow).expect("a workflow serializes to JSON");
        let schema = if workflow.roles.values().any(Role::uses_v2) {
            "workflow-v2"
        } else {
            "workflow"
        };
        Ok(store.put(builtin::hash_of(schema), &payload)?)
    }

    /// Reads a stored workflow with its schemas inline.
    pub(crate) fn load(store: &Store, hash: Hash) -> Result<Definition, WorkflowError> {
        let workflow = Workflow::load(store, hash)?;
        let mut schemas = BTreeMap::new();
        for (name, role) in &workflow.roles {
            schemas.insert(name.clone(), store.get_payload(role.meta)?);
        }
        Ok(Definition { workflow, schemas })
    }

    /// Renders the definition as YAML with schemas inline, fields in the documented order,
    /// roles and graph entries in reading order (from `$START`).
    pub(crate) fn to_yaml(&self) -> String {
        let w = &self.workflow;
        let mut top = serde_yaml::Mapping::new();
        top.insert("name".into(), w.name.clone().into());
        if let Some(d) = &w.description {
            top.insert("description".into(), d.clone().into());
        }
        let order = w.role_order();
        let mut roles = serde_yaml::Mapping::new();
        for name in &order {
            let role = &w.roles[*name];
            let mut r = serde_yaml::Mapping::new();
            let mut text = |key: &str, value: &Option<String>| {
                if let Some(v) = value {
                    r.insert(key.into(), v.clone().into());
                }
            };
            text("description", &role.description);
            text("goal", &role.goal);
            if let Some(caps) = &role.capabilities {
                r.insert(
                    "capabilities".into(),
                    Yaml::Sequence(caps.iter().map(|c| c.clone().into()).collect()),
                );
            }
            let mut text = |key: &str, value: &Option<String>| {
                if let Some(v) = value {
                    r.insert(key.into(), v.clone().into());
                }
            };
            text("procedure", &role.procedure);
            text("output", &role.output);
            if let Some(retry) = role.retry {
                r.insert("retry".into(), retry.into());
            }
            if let Some(target) = &role.on_failure {
                r.insert("onFailure".into(), target.clone().into());
            }
            let schema = self.schemas.get(*name).cloned().unwrap_or(Json::Null);
            r.insert(
                "meta".into(),
                serde_yaml::to_value(&schema).expect("JSON converts to YAML"),
            );
            roles.insert((*name).into(), Yaml::Mapping(r));
        }
        top.insert("roles".into(), Yaml::Mapping(roles));
        let mut conditions = serde_yaml::Mapping::new();
        for (name, c) in &w.conditions {
            conditions.insert(
                name.clone().into(),
                serde_yaml::to_value(c).expect("a condition converts to YAML"),
            );
        }
        top.insert("conditions".into(), Yaml::Mapping(conditions));
        let mut graph = serde_yaml::Mapping::new();
        for key in std::iter::once(START).chain(order.iter().copied()) {
            if let Some(ts) = w.graph.get(key) {
                graph.insert(
                    key.into(),
                    serde_yaml::to_value(ts).expect("transitions convert to YAML"),
                );
            }
        }
        for (key, ts) in &w.graph {
            if !graph.contains_key(key.as_str()) {
                graph.insert(key.clone().into(), serde_yaml::to_value(ts).expect("YAML"));
            }
        }
        top.insert("graph".into(), Yaml::Mapping(graph));
        serde_yaml::to_string(&Yaml::Mapping(top)).expect("YAML renders")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: &str = "name: w\nroles:\n  a: { meta: { type: object } }\n  b: { meta: { type: object } }\n\
graph:\n  $START: [ { role: a, condition: null } ]\n  a: [ { role: $END, condition: null } ]\n  \
b: [ { role: $END, condition: null } ]\n";

    /// Stores `yaml`'s workflow in a new store under `dir`.
    fn stored_in(dir: &tempfile::TempDir, yaml: &str) -> (Store, Hash, Definition) {
        let store = Store::open(&dir.path().join(yaml.len().to_string())).unwrap();
        let definition = crate::engine::workflow::parse(yaml)
            .unwrap_or_else(|p| panic!("{p:?}"))
            .definition;
        let hash = definition.store(&store).unwrap();
        (store, hash, definition)
    }

    #[test]
    fn only_a_workflow_that_handles_failures_is_stored_as_workflow_v2() {
        let dir = tempfile::tempdir().unwrap();
        let stored = |yaml: &str| stored_in(&dir, yaml);
        let (store, plain, definition) = stored(PLAIN);
        assert_eq!(
            store.get(plain).unwrap().type_hash,
            builtin::hash_of("workflow")
        );
        let payload = store.get_payload(plain).unwrap();
        assert!(
            !payload.to_string().contains("retry") && !payload.to_string().contains("onFailure")
        );
        assert!(!definition.to_yaml().contains("retry"));
        // `retry: 0` is no retry: the same workflow, the same hash.
        let zero = PLAIN.replace("a: { meta", "a: { retry: 0, meta");
        assert_eq!(stored(&zero).1, plain);

        let handled = PLAIN.replace("a: { meta", "a: { retry: 2, onFailure: b, meta");
        let (store, hash, definition) = stored(&handled);
        assert_eq!(
            store.get(hash).unwrap().type_hash,
            builtin::hash_of("workflow-v2")
        );
        let workflow = Workflow::load(&store, hash).unwrap();
        assert_eq!(workflow.roles["a"].retry, Some(2));
        assert_eq!(workflow.roles["a"].on_failure.as_deref(), Some("b"));
        // `b` is reached through `a`'s onFailure alone: it is read in that order.
        assert_eq!(workflow.role_order(), ["a", "b"]);
        let yaml = definition.to_yaml();
        assert!(
            yaml.contains("retry: 2") && yaml.contains("onFailure: b"),
            "{yaml}"
        );
        assert_eq!(stored(&yaml).1, hash);
    }
}
