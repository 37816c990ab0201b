//! The built-in schemas every store holds: `workflow`, `start`, `step`, `text` and `detail`.
//!
//! Their hashes are stable because their payloads are fixed here; changing a payload changes the
//! hash of every node of that type, so treat these definitions as part of the on-disk format.

use std::sync::OnceLock;

use serde_json::{Value, json};

use super::canonical::node_hash;
use super::id::Hash;

/// The payload of the bootstrap meta-schema node (type [`Hash::ZERO`], hash [`Hash::META`]).
pub fn bootstrap_payload() -> Value {
    json!({"$schema": super::schema::DRAFT_2020_12})
}

/// A built-in schema: its name, payload and hash.
#[derive(Debug)]
pub struct Builtin {
    pub name: &'static str,
    pub schema: Value,
    pub hash: Hash,
}

/// All built-in schemas, in a fixed order.
pub fn all() -> &'static [Builtin] {
    static ALL: OnceLock<Vec<Builtin>> = OnceLock::new();
    ALL.get_or_init(|| {
        [
            ("workflow", workflow()),
            ("start", start()),
            ("step", step()),
            ("text", json!({"type": "string"})),
            ("detail", detail()),
            ("subthread", subthread()),
        ]
        .into_iter()
        .map(|(name, schema)| Builtin {
            name,
            hash: node_hash(Hash::META, &schema),
            schema,
        })
        .collect()
    })
}

/// The built-in schema with this name.
///
/// # Panics
/// On a name that is not built in: callers pass literals.
pub fn hash_of(name: &str) -> Hash {
    all()
        .iter()
        .find(|b| b.name == name)
        .map(|b| b.hash)
        .unwrap_or_else(|| panic!("`{name}` is not a built-in schema"))
}

/// The name of a built-in schema, if `hash` is one.
pub fn name_of(hash: Hash) -> Option<&'static str> {
    if hash == legacy_start_hash() {
        return Some("start");
    }
    all().iter().find(|b| b.hash == hash).map(|b| b.name)
}

fn cas_ref() -> Value {
    json!({"type": "string", "format": "cas_ref"})
}

fn workflow() -> Value {
    let text = json!({"type": "string"});
    json!({
        "type": "object",
        "required": ["name", "roles", "graph"],
        "additionalProperties": false,
        "properties": {
            "name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]*$"},
            "description": text,
            "roles": {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "required": ["meta"],
                    "additionalProperties": false,
                    "properties": {
                        "description": text,
                        "goal": text,
                        "capabilities": {"type": "array", "items": text},
                        "procedure": text,
                        "output": text,
                        "meta": cas_ref()
                    }
                }
            },
            "conditions": {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "required": ["expression"],
                    "additionalProperties": false,
                    "properties": {"description": text, "expression": text}
                }
            },
            "graph": {
                "type": "object",
                "additionalProperties": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["role", "condition"],
                        "additionalProperties": false,
                        "properties": {
                            "role": text,
                            "condition": {"type": ["string", "null"]}
                        }
                    }
                }
            }
        }
    })
}

fn start() -> Value {
    let mut schema = legacy_start();
    schema["properties"]["parent"] = json!({
        "description": "the parent thread's head when a sub-workflow started this thread (SPEC §9)",
        "type": "string",
        "format": "cas_ref"
    });
    schema
}

/// The `start` schema before sub-workflows added `parent`. Stores written then hold start nodes
/// of this type, which stay valid start nodes.
fn legacy_start() -> Value {
    json!({
        "type": "object",
        "required": ["workflow", "prompt"],
        "additionalProperties": false,
        "properties": {
            "workflow": cas_ref(),
            "prompt": {"type": "string", "minLength": 1}
        }
    })
}

/// The hash of [`legacy_start`].
pub fn legacy_start_hash() -> Hash {
    static HASH: OnceLock<Hash> = OnceLock::new();
    *HASH.get_or_init(|| node_hash(Hash::META, &legacy_start()))
}

/// Whether `type_hash` is the type of a start node (today's or the legacy one).
pub fn is_start(type_hash: Hash) -> bool {
    type_hash == hash_of("start") || type_hash == legacy_start_hash()
}

/// The detail of a step that a sub-workflow took (SPEC §9): the child thread and its terminal
/// head, plus what any detail may carry (raw output, duration, …).
fn subthread() -> Value {
    json!({
        "type": "object",
        "required": ["thread", "head"],
        "properties": {
            "thread": {"description": "the child thread's id", "type": "string"},
            "head": {"description": "the child's terminal step", "type": "string", "format": "cas_ref"},
            "status": {"description": "how the child ended", "type": "string"},
            "raw": {"description": "the child's transcript, when its output was extracted from it", "type": "string", "format": "cas_ref"},
            "durationMs": {"type": "integer", "minimum": 0}
        }
    })
}

fn step() -> Value {
    json!({
        "type": "object",
        "required": ["start", "prev", "role", "output", "detail", "agent"],
        "additionalProperties": false,
        "properties": {
            "start": cas_ref(),
            "prev": {"type": ["string", "null"], "format": "cas_ref"},
            "role": {"type": "string", "minLength": 1},
            "output": cas_ref(),
            "detail": cas_ref(),
            "agent": {"type": "string"}
        }
    })
}

/// Execution detail. Agents may add fields (tool-call turns, models, token counts).
fn detail() -> Value {
    json!({
        "type": "object",
        "required": ["raw", "exitCode", "durationMs", "stderrTail"],
        "properties": {
            "raw": {"description": "the agent's raw output (a text node)", "type": "string", "format": "cas_ref"},
            "body": {"description": "the Markdown body after extraction (a text node)", "type": ["string", "null"], "format": "cas_ref"},
            "exitCode": {"type": ["integer", "null"]},
            "durationMs": {"type": "integer", "minimum": 0},
            "stderrTail": {"type": "string"}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cas::schema::CompiledSchema;

    #[test]
    fn start_nodes_of_the_schema_before_sub_workflows_stay_start_nodes() {
        // The hash of the start schema every store written before SPEC §9 used.
        assert_eq!(legacy_start_hash().to_string(), "0N2YG80YAGMKQ");
        assert!(is_start(legacy_start_hash()) && is_start(hash_of("start")));
        assert_ne!(hash_of("start"), legacy_start_hash());
        assert_eq!(name_of(legacy_start_hash()), Some("start"));
        assert!(!is_start(hash_of("step")));
    }

    #[test]
    fn builtins_are_valid_schemas_with_distinct_hashes() {
        let mut seen = std::collections::HashSet::new();
        for b in all() {
            CompiledSchema::compile(&b.schema).unwrap_or_else(|e| panic!("{}: {e:?}", b.name));
            assert!(seen.insert(b.hash), "{} repeats a hash", b.name);
            assert_eq!(name_of(b.hash), Some(b.name));
            assert_eq!(hash_of(b.name), b.hash);
        }
    }

    #[test]
    fn step_refs_are_discovered() {
        let s = CompiledSchema::compile(&hash_schema("step")).unwrap();
        let refs = s.refs(&json!({
            "start": "EYHPV6X8XHTCS", "prev": null, "role": "planner",
            "output": "2DHW2FP49YVD3", "detail": "F5VV55NBKX1R5", "agent": "dry"
        }));
        assert_eq!(refs.len(), 3);
    }

    fn hash_schema(name: &str) -> Value {
        all()
            .iter()
            .find(|b| b.name == name)
            .unwrap()
            .schema
            .clone()
    }
}
