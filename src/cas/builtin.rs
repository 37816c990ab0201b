//! The built-in schemas every store holds: `workflow` (and `workflow-v2`), `start` (and
//! `start-v2`), `step`, `text`, `detail`, `subthread` and `failure`.
//!
//! Their hashes are stable because their payloads are fixed here; changing a payload changes the
//! hash of every node of that type, so treat these definitions as part of the on-disk format.
//! The hashes are also written out in `ALL`, and a test holds them to the payloads.

use std::sync::OnceLock;

use serde_json::{Value, json};

use super::id::Hash;

/// The payload of the bootstrap meta-schema node (type [`Hash::ZERO`], hash [`Hash::META`]).
pub(crate) fn bootstrap_payload() -> Value {
    json!({"$schema": super::schema::DRAFT_2020_12})
}

/// A built-in schema: its name, its hash, and its payload (built on first use).
#[derive(Debug)]
pub struct Builtin {
    pub name: &'static str,
    pub hash: Hash,
    payload: fn() -> Value,
    schema: OnceLock<Value>,
}

impl Builtin {
    const fn new(name: &'static str, hash: u64, payload: fn() -> Value) -> Builtin {
        Builtin {
            name,
            hash: Hash::from_u64(hash),
            payload,
            schema: OnceLock::new(),
        }
    }

    /// The schema document, the payload of the node `hash` names.
    pub(crate) fn schema(&self) -> &Value {
        self.schema.get_or_init(self.payload)
    }
}

/// All built-in schemas, in a fixed order. The hashes are written out (a test recomputes them
/// from the payloads): a command that only needs to know them, like opening a store, builds and
/// hashes no schema document.
static ALL: [Builtin; 9] = [
    Builtin::new("workflow", 0x4820_ce14_dcc5_4ef0, workflow),
    Builtin::new("start", 0x7c66_81d4_9e5e_ecda, start),
    Builtin::new("step", 0xe718_2f91_68e6_9363, step),
    Builtin::new("text", 0xfc71_8460_acd4_13a7, text),
    Builtin::new("detail", 0x5e10_b36b_67a7_88c4, detail),
    Builtin::new("subthread", 0x3312_952a_ec5d_864b, subthread),
    Builtin::new("workflow-v2", 0x0b6e_b766_77c0_37f9, workflow_v2),
    Builtin::new("failure", 0x619e_2ccf_a673_4b97, failure),
    Builtin::new("start-v2", 0xcf60_822f_458c_5ca2, start_v2),
];

/// All built-in schemas, in a fixed order.
pub fn all() -> &'static [Builtin] {
    &ALL
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
pub(crate) fn name_of(hash: Hash) -> Option<&'static str> {
    if hash == legacy_start_hash() {
        return Some("start");
    }
    all().iter().find(|b| b.hash == hash).map(|b| b.name)
}

/// The built-in schema whose hash is `hash` (today's built-ins, not the legacy start schema).
pub(crate) fn by_hash(hash: Hash) -> Option<&'static Builtin> {
    all().iter().find(|b| b.hash == hash)
}

/// A native check for the built-in schema `name`, where there is one: it accepts only payloads
/// the schema accepts (a test holds it to that on generated payloads), and it accepts every
/// payload uwf itself writes, so a step validates its text, detail and step nodes without
/// compiling a JSON Schema validator. A payload it turns down goes to the real validator.
pub(crate) fn accepts(name: &str) -> Option<fn(&Value) -> bool> {
    match name {
        "text" => Some(Value::is_string),
        "step" => Some(accepts_step),
        "detail" => Some(accepts_detail),
        "start" => Some(accepts_start),
        "start-v2" => Some(accepts_start_v2),
        _ => None,
    }
}

/// A string that parses as a hash: what the `cas_ref` format checks.
fn is_ref(v: &Value) -> bool {
    v.as_str().is_some_and(|s| Hash::parse(s).is_ok())
}

fn non_empty_string(v: &Value) -> bool {
    v.as_str().is_some_and(|s| !s.is_empty())
}

/// An integer as JSON Schema sees it, when serde_json holds it as one (a float with no
/// fraction, which the schema also takes, is left to the validator).
fn is_whole(v: &Value) -> bool {
    v.is_i64() || v.is_u64()
}

fn accepts_step(v: &Value) -> bool {
    const KEYS: [&str; 6] = ["start", "prev", "role", "output", "detail", "agent"];
    let Some(o) = v.as_object() else {
        return false;
    };
    o.len() == KEYS.len()
        && o.keys().all(|k| KEYS.contains(&k.as_str()))
        && o.get("start").is_some_and(is_ref)
        && o.get("prev").is_some_and(|p| p.is_null() || is_ref(p))
        && o.get("role").is_some_and(non_empty_string)
        && o.get("output").is_some_and(is_ref)
        && o.get("detail").is_some_and(is_ref)
        && o.get("agent").is_some_and(Value::is_string)
}

fn accepts_detail(v: &Value) -> bool {
    let Some(o) = v.as_object() else {
        return false;
    };
    o.get("raw").is_some_and(is_ref)
        && o.get("body").is_none_or(|b| b.is_null() || is_ref(b))
        && o.get("exitCode")
            .is_some_and(|c| c.is_null() || is_whole(c))
        && o.get("durationMs").is_some_and(Value::is_u64)
        && o.get("stderrTail").is_some_and(Value::is_string)
}

fn accepts_start(v: &Value) -> bool {
    let Some(o) = v.as_object() else {
        return false;
    };
    o.keys()
        .all(|k| matches!(k.as_str(), "workflow" | "prompt" | "parent"))
        && o.get("workflow").is_some_and(is_ref)
        && o.get("prompt").is_some_and(non_empty_string)
        && o.get("parent").is_none_or(is_ref)
}

/// A `start-v2` payload: a start's fields and `by`, the name of who started the thread.
fn accepts_start_v2(v: &Value) -> bool {
    let Some(o) = v.as_object() else {
        return false;
    };
    o.keys()
        .all(|k| matches!(k.as_str(), "workflow" | "prompt" | "parent" | "by"))
        && o.get("workflow").is_some_and(is_ref)
        && o.get("prompt").is_some_and(non_empty_string)
        && o.get("parent").is_none_or(is_ref)
        && o.get("by").is_some_and(|b| {
            b.as_str()
                .is_some_and(|b| (1..=64).contains(&b.chars().count()))
        })
}

fn text() -> Value {
    json!({"type": "string"})
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

/// The `workflow` schema with the role fields of failure handling
/// (`docs/workflows.md#when-a-role-fails`): `retry` and `onFailure`. Only a workflow that uses one
/// of them is stored with this type, so a workflow that uses none keeps the hash it always had.
fn workflow_v2() -> Value {
    let mut schema = workflow();
    let role = &mut schema["properties"]["roles"]["additionalProperties"]["properties"];
    role["retry"] = json!({"type": "integer", "minimum": 0, "maximum": 10});
    role["onFailure"] = json!({"type": "string"});
    schema
}

/// The output of a step that records its role's failure (a role's `onFailure`): what the last
/// attempt's error said and how many times the agent ran. A step of this output has no output of
/// the role's schema; the moderator context shows it as `output: null` and `error: {…}`.
fn failure() -> Value {
    json!({
        "type": "object",
        "required": ["message", "attempts"],
        "properties": {
            "message": {"description": "why the last attempt failed", "type": "string"},
            "attempts": {"description": "how many times the agent ran", "type": "integer", "minimum": 1}
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

/// The start of a thread whose starter is known: [`start`] and `by`, the name of who started it
/// (the start without one keeps the `start` type, so its hash stays what it was).
fn start_v2() -> Value {
    let mut schema = start();
    schema["required"] = json!(["workflow", "prompt", "by"]);
    schema["properties"]["by"] = json!({
        "description": "who started the thread: the name `--by` gave, else the person running the command",
        "type": "string",
        "minLength": 1,
        "maxLength": 64
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

/// The hash of [`legacy_start`] (recomputed by a test).
pub(crate) const fn legacy_start_hash() -> Hash {
    Hash::from_u64(0x0a8b_d040_3ca8_5277)
}

/// Whether `type_hash` is the type of a workflow node: `workflow`, or `workflow-v2` for a
/// workflow whose roles use the fields added since (`retry`, `onFailure`).
pub(crate) fn is_workflow(type_hash: Hash) -> bool {
    type_hash == hash_of("workflow") || type_hash == hash_of("workflow-v2")
}

/// Whether `type_hash` is the type of a start node (`start`, `start-v2` or the legacy one).
pub(crate) fn is_start(type_hash: Hash) -> bool {
    type_hash == hash_of("start")
        || type_hash == hash_of("start-v2")
        || type_hash == legacy_start_hash()
}

/// The detail of a step that a sub-workflow took: the child thread and its terminal
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
    use crate::cas::canonical::node_hash;
    use crate::cas::schema::CompiledSchema;

    #[test]
    fn start_nodes_of_the_schema_before_sub_workflows_stay_start_nodes() {
        // The hash of the start schema every store written before sub-workflows existed used.
        assert_eq!(legacy_start_hash().to_string(), "0N2YG80YAGMKQ");
        assert!(is_start(legacy_start_hash()) && is_start(hash_of("start")));
        assert_ne!(hash_of("start"), legacy_start_hash());
        assert_eq!(name_of(legacy_start_hash()), Some("start"));
        assert!(!is_start(hash_of("step")));
    }

    #[test]
    fn both_workflow_schemas_type_workflow_nodes_and_the_first_keeps_its_hash() {
        // Every workflow stored before `workflow-v2` existed has this type, and a workflow
        // that uses none of the v2 fields is stored with it still.
        assert_eq!(hash_of("workflow").to_string(), "4G86E2KECAKQG");
        assert!(is_workflow(hash_of("workflow")) && is_workflow(hash_of("workflow-v2")));
        assert!(!is_workflow(hash_of("step")) && !is_workflow(hash_of("failure")));
    }

    #[test]
    fn the_written_out_hashes_are_those_of_the_payloads() {
        for b in all() {
            assert_eq!(node_hash(Hash::META, b.schema()), b.hash, "{}", b.name);
        }
        assert_eq!(node_hash(Hash::META, &legacy_start()), legacy_start_hash());
    }

    #[test]
    fn builtins_are_valid_schemas_with_distinct_hashes() {
        let mut seen = std::collections::HashSet::new();
        for b in all() {
            CompiledSchema::compile(b.schema()).unwrap_or_else(|e| panic!("{}: {e:?}", b.name));
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

    /// Payloads of the shapes uwf writes, each of which the native check must take itself.
    fn written_payloads() -> Vec<(&'static str, Value)> {
        let (a, b) = ("EYHPV6X8XHTCS", "2DHW2FP49YVD3");
        vec![
            ("text", json!("")),
            ("text", json!("---\nn: 1\n---\n")),
            (
                "step",
                json!({"start": a, "prev": null, "role": "tick", "output": b, "detail": a, "agent": "dry"}),
            ),
            (
                "step",
                json!({"start": a, "prev": b, "role": "tick", "output": b, "detail": a, "agent": ""}),
            ),
            (
                "detail",
                json!({"raw": a, "body": null, "exitCode": 0, "durationMs": 0, "stderrTail": "",
                       "script": "s.yaml", "entry": 1}),
            ),
            (
                "detail",
                json!({"raw": a, "body": b, "exitCode": null, "durationMs": 12, "stderrTail": "x"}),
            ),
            (
                "detail",
                json!({"raw": a, "exitCode": -1, "durationMs": 3, "stderrTail": ""}),
            ),
            ("start", json!({"workflow": a, "prompt": "go"})),
            ("start", json!({"workflow": a, "prompt": "go", "parent": b})),
            (
                "start-v2",
                json!({"workflow": a, "prompt": "go", "by": "alice"}),
            ),
            (
                "start-v2",
                json!({"workflow": a, "prompt": "go", "parent": b, "by": "Alice Smith"}),
            ),
        ]
    }

    #[test]
    fn native_checks_take_every_payload_uwf_writes_and_the_schema_agrees() {
        for (name, payload) in written_payloads() {
            let accepts = accepts(name).unwrap();
            assert!(accepts(&payload), "{name}: {payload}");
            let schema = CompiledSchema::compile(&hash_schema(name)).unwrap();
            assert_eq!(schema.validate(&payload), Ok(()), "{name}: {payload}");
        }
    }

    #[test]
    fn a_payload_the_native_check_turns_down_gets_the_validators_verdict_and_messages() {
        let b = by_hash(hash_of("step")).unwrap();
        let schema = CompiledSchema::builtin(b.schema(), accepts("step").unwrap());
        let bad = json!({"start": "EYHPV6X8XHTCS", "prev": null, "role": "", "output": "nope",
                         "detail": "EYHPV6X8XHTCS", "agent": "dry"});
        let problems = schema.validate(&bad).unwrap_err();
        let pointers: Vec<&str> = problems.iter().map(|v| v.pointer.as_str()).collect();
        assert!(
            pointers.contains(&"/role") && pointers.contains(&"/output"),
            "{problems:?}"
        );
        // A float with no fraction is an integer to JSON Schema: the check leaves it to the
        // validator, which takes it.
        let detail = by_hash(hash_of("detail")).unwrap();
        let schema = CompiledSchema::builtin(detail.schema(), accepts("detail").unwrap());
        let whole_float: Value = serde_json::from_str(
            r#"{"raw": "EYHPV6X8XHTCS", "exitCode": 0, "durationMs": 5.0, "stderrTail": ""}"#,
        )
        .unwrap();
        assert!(!accepts("detail").unwrap()(&whole_float));
        assert_eq!(schema.validate(&whole_float), Ok(()));
    }

    /// Values to put in a field: a hash, a non-hash string, an empty string, null, numbers
    /// (negative, whole, fractional, a float with no fraction), a boolean, containers.
    fn leaves() -> Vec<Value> {
        let whole_float: Value = serde_json::from_str("2.0").unwrap();
        vec![
            json!("EYHPV6X8XHTCS"),
            json!("not a hash"),
            json!(""),
            Value::Null,
            json!(0),
            json!(-1),
            json!(7),
            json!(1.5),
            whole_float,
            json!(true),
            json!([]),
            json!({}),
        ]
    }

    /// Asserts that what `name`'s native check accepts, its schema accepts.
    fn assert_sound(name: &str, payload: &Value) {
        thread_local! {
            static COMPILED: std::cell::RefCell<std::collections::HashMap<String, CompiledSchema>> =
                Default::default();
        }
        if !accepts(name).unwrap()(payload) {
            return;
        }
        COMPILED.with(|c| {
            let mut c = c.borrow_mut();
            let schema = c
                .entry(name.to_owned())
                .or_insert_with(|| CompiledSchema::compile(&hash_schema(name)).unwrap());
            assert_eq!(schema.validate(payload), Ok(()), "{name} accepts {payload}");
        });
    }

    #[test]
    fn native_checks_accept_no_single_field_change_their_schema_refuses() {
        // Every payload uwf writes with one field set to every leaf, removed, or added.
        let mut checked = 0;
        for (_, payload) in written_payloads() {
            let mut keys: Vec<String> = payload
                .as_object()
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default();
            keys.extend(["extra", "parent", "body", "prev"].map(String::from));
            for key in &keys {
                let mut edits: Vec<Option<Value>> = leaves().into_iter().map(Some).collect();
                edits.push(None);
                for edit in edits {
                    let mut changed = payload.clone();
                    if let Some(o) = changed.as_object_mut() {
                        match edit {
                            Some(v) => o.insert(key.clone(), v),
                            None => o.remove(key),
                        };
                    }
                    for name in ["text", "step", "detail", "start"] {
                        assert_sound(name, &changed);
                    }
                    checked += 1;
                }
            }
        }
        assert!(checked > 500, "{checked}");
    }

    /// Values near the built-in shapes: a payload uwf writes with a few of its keys set to
    /// other values (a hash, a non-hash string, an empty string, null, numbers, containers),
    /// removed, or added.
    fn near_builtin_payload() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        const KEYS: [&str; 15] = [
            "start",
            "prev",
            "role",
            "output",
            "detail",
            "agent",
            "raw",
            "body",
            "exitCode",
            "durationMs",
            "stderrTail",
            "workflow",
            "prompt",
            "parent",
            "extra",
        ];
        let leaf = proptest::sample::select(leaves());
        let edit = (
            proptest::sample::select(&KEYS[..]),
            proptest::option::of(leaf.clone()),
        );
        let written: Vec<Value> = written_payloads().into_iter().map(|(_, p)| p).collect();
        let edited = (
            proptest::sample::select(written),
            proptest::collection::vec(edit, 0..4),
        )
            .prop_map(|(mut payload, edits)| {
                for (key, value) in edits {
                    if let Some(o) = payload.as_object_mut() {
                        match value {
                            Some(v) => o.insert(key.to_owned(), v),
                            None => o.remove(key),
                        };
                    }
                }
                payload
            });
        prop_oneof![leaf, edited]
    }

    proptest::proptest! {
        #[test]
        fn native_checks_accept_only_what_the_schemas_accept(payload in near_builtin_payload()) {
            for name in ["text", "step", "detail", "start"] {
                assert_sound(name, &payload);
            }
        }
    }

    fn hash_schema(name: &str) -> Value {
        all()
            .iter()
            .find(|b| b.name == name)
            .unwrap()
            .schema()
            .clone()
    }
}
