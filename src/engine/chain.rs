//! A thread's history: the chain of step nodes from a head back to the start node, and the
//! moderator context built from it (SPEC §4, §5.3 step 1).
//!
//! Architecture Invariant: a chain is a pure function of its head hash (nodes are immutable), so
//! it is cached under `<root>/cache/chains/<head>.json` and never goes stale. Loading a head
//! whose parent is cached costs one parent read plus one node pair, so a step's cost does not
//! grow with the number of nodes walked. A damaged cache file is ignored and rebuilt.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::cas::{Hash, Node, Store, StoreError, builtin};

/// Errors reading a chain.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{hash} is a {kind} node, not a step or start node")]
    NotAStepOrStart { hash: Hash, kind: String },
    #[error("node {hash} is malformed: {reason}")]
    Malformed { hash: Hash, reason: String },
}

/// The payload of a `start` node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Start {
    pub workflow: Hash,
    pub prompt: String,
}

/// The payload of a `step` node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepNode {
    pub start: Hash,
    pub prev: Option<Hash>,
    pub role: String,
    pub output: Hash,
    pub detail: Hash,
    pub agent: String,
}

/// One step of a chain with its output.
///
/// The output is kept as raw JSON text: most readers of a chain need only roles and hashes, and
/// the moderator context is assembled from the raw texts without building values.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    pub hash: Hash,
    pub role: String,
    pub agent: String,
    pub output_hash: Hash,
    raw_output: Box<RawValue>,
    pub detail: Hash,
    pub timestamp: u64,
}

impl Entry {
    /// The step's structured output.
    pub fn output(&self) -> Value {
        serde_json::from_str(self.raw_output.get()).unwrap_or(Value::Null)
    }

    /// The output as compact JSON text.
    pub fn output_json(&self) -> &str {
        self.raw_output.get()
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash
    }
}

fn raw(value: &Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(value).expect("JSON values serialize")
}

/// A thread's history, oldest step first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Chain {
    pub start_hash: Hash,
    pub start: Start,
    pub start_timestamp: u64,
    pub steps: Vec<Entry>,
}

impl Chain {
    /// The head: the last step, or the start node.
    pub fn head(&self) -> Hash {
        self.steps.last().map(|s| s.hash).unwrap_or(self.start_hash)
    }

    /// The moderator context: `{"start": {"workflow", "prompt"}, "steps": [{"role", "output",
    /// "detail", "agent"}]}`.
    pub fn context(&self) -> Value {
        serde_json::from_str(&self.context_json()).expect("the context text is valid JSON")
    }

    /// The moderator context as JSON text, assembled from the raw outputs.
    pub fn context_json(&self) -> String {
        let text = |s: &str| serde_json::to_string(s).expect("strings serialize");
        let mut out = String::with_capacity(
            128 + self
                .steps
                .iter()
                .map(|s| s.output_json().len() + 80)
                .sum::<usize>(),
        );
        out.push_str("{\"start\":{\"workflow\":\"");
        out.push_str(&self.start.workflow.to_string());
        out.push_str("\",\"prompt\":");
        out.push_str(&text(&self.start.prompt));
        out.push_str("},\"steps\":[");
        for (i, s) in self.steps.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str("{\"role\":");
            out.push_str(&text(&s.role));
            out.push_str(",\"output\":");
            out.push_str(s.output_json());
            out.push_str(",\"detail\":\"");
            out.push_str(&s.detail.to_string());
            out.push_str("\",\"agent\":");
            out.push_str(&text(&s.agent));
            out.push('}');
        }
        out.push_str("]}");
        out
    }

    /// The moderator's position: the last step's role, or `$START`.
    pub fn position(&self) -> &str {
        self.steps
            .last()
            .map(|s| s.role.as_str())
            .unwrap_or(super::workflow::START)
    }

    /// How many steps of `role` the chain has.
    pub fn visits(&self, role: &str) -> usize {
        self.steps.iter().filter(|s| s.role == role).count()
    }
}

/// Reads a start node.
pub fn read_start(node: &Node) -> Result<Start, ChainError> {
    serde_json::from_value(node.payload.clone()).map_err(|e| ChainError::Malformed {
        hash: node.hash,
        reason: e.to_string(),
    })
}

/// Reads a step node.
pub fn read_step(node: &Node) -> Result<StepNode, ChainError> {
    serde_json::from_value(node.payload.clone()).map_err(|e| ChainError::Malformed {
        hash: node.hash,
        reason: e.to_string(),
    })
}

fn cache_path(store: &Store, head: Hash) -> PathBuf {
    store
        .root()
        .join("cache")
        .join("chains")
        .join(format!("{head}.json"))
}

fn read_cache(store: &Store, head: Hash) -> Option<Chain> {
    let bytes = std::fs::read(cache_path(store, head)).ok()?;
    let chain: Chain = serde_json::from_slice(&bytes).ok()?;
    (chain.head() == head).then_some(chain)
}

fn write_cache(store: &Store, chain: &Chain) {
    // The cache is an optimisation: failing to write it only costs time later.
    let path = cache_path(store, chain.head());
    if let Some(dir) = path.parent()
        && std::fs::create_dir_all(dir).is_ok()
        && let Ok(bytes) = serde_json::to_vec(chain)
    {
        let _ = crate::cas::store::write_atomic(
            &store.root().join("cas").join("tmp"),
            &path,
            &bytes,
            false,
        );
    }
}

/// Drops the cached chain of a head that is no longer any thread's head.
pub fn forget(store: &Store, head: Hash) {
    let _ = std::fs::remove_file(cache_path(store, head));
}

/// The chain of `step`, a step whose prev is `parent`'s head; cached like [`load`]'s result.
pub fn extend(store: &Store, mut parent: Chain, step: Hash) -> Result<Chain, ChainError> {
    let node = store.get(step)?;
    let payload = read_step(&node)?;
    parent.steps.push(entry(store, &node, payload)?);
    write_cache(store, &parent);
    Ok(parent)
}

/// A chain entry for a step node, with its output read.
fn entry(store: &Store, node: &Node, step: StepNode) -> Result<Entry, ChainError> {
    let output = store.get_payload(step.output)?;
    Ok(Entry {
        hash: node.hash,
        role: step.role,
        agent: step.agent,
        output_hash: step.output,
        raw_output: raw(&output),
        detail: step.detail,
        timestamp: node.timestamp,
    })
}

/// Loads the chain ending at `head` (a step or start node), from the cache where possible.
pub fn load(store: &Store, head: Hash) -> Result<Chain, ChainError> {
    if let Some(chain) = read_cache(store, head) {
        return Ok(chain);
    }
    let step_type = builtin::hash_of("step");
    let start_type = builtin::hash_of("start");
    // Walk back until a cached ancestor or the start node, then replay forwards.
    let mut pending: Vec<(Node, StepNode)> = Vec::new();
    let mut at = head;
    let mut chain = loop {
        if at != head
            && let Some(chain) = read_cache(store, at)
        {
            break chain;
        }
        let node = store.get(at)?;
        if node.type_hash == start_type {
            break Chain {
                start_hash: at,
                start: read_start(&node)?,
                start_timestamp: node.timestamp,
                steps: Vec::new(),
            };
        }
        if node.type_hash != step_type {
            return Err(ChainError::NotAStepOrStart {
                hash: at,
                kind: builtin::name_of(node.type_hash)
                    .unwrap_or("data")
                    .to_owned(),
            });
        }
        let step = read_step(&node)?;
        let prev = step.prev.unwrap_or(step.start);
        pending.push((node, step));
        at = prev;
    };
    for (node, step) in pending.into_iter().rev() {
        chain.steps.push(entry(store, &node, step)?);
    }
    write_cache(store, &chain);
    Ok(chain)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn context_text_is_the_documented_shape() {
        let hash = |s: &str| Hash::parse(s).unwrap();
        let chain = Chain {
            start_hash: hash("EYHPV6X8XHTCS"),
            start: Start {
                workflow: hash("2DHW2FP49YVD3"),
                prompt: "say \"hi\"\nand\\or é".into(),
            },
            start_timestamp: 1,
            steps: vec![Entry {
                hash: hash("F5VV55NBKX1R5"),
                role: "rev\"iewer".into(),
                agent: "dry".into(),
                output_hash: hash("827F196W26J4M"),
                raw_output: raw(&json!({"approved": false, "notes": ["a", {"b": null}]})),
                detail: hash("298FDNKR7P5MH"),
                timestamp: 2,
            }],
        };
        let expected = json!({
            "start": {"workflow": "2DHW2FP49YVD3", "prompt": "say \"hi\"\nand\\or é"},
            "steps": [{"role": "rev\"iewer", "output": {"approved": false, "notes": ["a", {"b": null}]},
                       "detail": "298FDNKR7P5MH", "agent": "dry"}]
        });
        assert_eq!(chain.context(), expected);
        assert_eq!(chain.position(), "rev\"iewer");
        assert_eq!(
            chain.steps[0].output(),
            json!({"approved": false, "notes": ["a", {"b": null}]})
        );
        // The cache round-trips.
        let back: Chain = serde_json::from_slice(&serde_json::to_vec(&chain).unwrap()).unwrap();
        assert_eq!(back.context_json(), chain.context_json());
    }
}
