//! Schema nodes: checking a payload is a JSON Schema (2020-12), validating data against it, and
//! discovering `format: cas_ref` fields.
//!
//! A [`CompiledSchema`] is built once per schema node and cached by the store. References are
//! found by walking the schema and the instance side by side (properties, additional properties,
//! items, prefix items, local `$ref`, and every branch of `allOf`/`anyOf`/`oneOf`/`if`), so the
//! store, GC and fsck all follow the same edges. Every string found that way parses as a hash,
//! because the validator checks the `cas_ref` format.

use std::borrow::Cow;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

use serde_json::Value;

use super::id::Hash;

/// The `$schema` URI schema nodes may name (or leave out).
pub(crate) const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// The format name that marks a string field as a reference to another node.
pub(crate) const CAS_REF_FORMAT: &str = "cas_ref";

/// How deep the ref walker follows nested schemas before giving up (guards `$ref` cycles).
const MAX_WALK_DEPTH: usize = 256;

/// One failed rule: where in the instance, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// JSON pointer into the checked document (`""` is the root).
    pub pointer: String,
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = if self.pointer.is_empty() {
            "/"
        } else {
            &self.pointer
        };
        write!(f, "at {at}: {}", self.message)
    }
}

/// A schema ready to validate instances and find their references.
pub(crate) struct CompiledSchema {
    /// Borrowed for a built-in schema (the binary's own copy), owned otherwise.
    schema: Cow<'static, Value>,
    check: Check,
}

/// How a [`CompiledSchema`] decides validity.
enum Check {
    /// A validator compiled from the schema.
    Compiled(jsonschema::Validator),
    /// A built-in schema (see [`super::builtin::accepts`]): a native check accepts the payloads
    /// uwf itself writes without compiling anything (a one-shot step, which writes three of
    /// them, took 0.05 ms less in paired runs). It only ever accepts what the schema accepts;
    /// anything else goes to the validator, compiled on first need, whose verdict and messages
    /// are the ones reported.
    Builtin {
        accepts: fn(&Value) -> bool,
        compiled: OnceLock<Result<jsonschema::Validator, Vec<Violation>>>,
    },
}

impl std::fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledSchema")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl CompiledSchema {
    /// Checks that `schema` is a valid JSON Schema 2020-12 and compiles it.
    ///
    /// On refusal every meta-schema violation is listed, each with its pointer into the schema.
    pub(crate) fn compile(schema: &Value) -> Result<CompiledSchema, Vec<Violation>> {
        if let Some(uri) = schema.get("$schema")
            && uri.as_str() != Some(DRAFT_2020_12)
        {
            return Err(vec![Violation {
                pointer: "/$schema".into(),
                message: format!(
                    "only JSON Schema 2020-12 is supported (`{DRAFT_2020_12}`), got {uri}"
                ),
            }]);
        }
        Self::build(schema, true)
    }

    /// Compiles a schema that was checked when it was stored. The validator still refuses an
    /// invalid schema, but only the first problem is reported (the full listing is for puts).
    pub(crate) fn compile_stored(schema: &Value) -> Result<CompiledSchema, Vec<Violation>> {
        Self::build(schema, false)
    }

    /// A built-in schema with its native check (see [`Check::Builtin`]); nothing is compiled
    /// until a payload the check does not accept needs the validator's verdict.
    pub(crate) fn builtin(schema: &'static Value, accepts: fn(&Value) -> bool) -> CompiledSchema {
        CompiledSchema {
            schema: Cow::Borrowed(schema),
            check: Check::Builtin {
                accepts,
                compiled: OnceLock::new(),
            },
        }
    }

    fn build(schema: &Value, list_problems: bool) -> Result<CompiledSchema, Vec<Violation>> {
        Ok(CompiledSchema {
            schema: Cow::Owned(schema.clone()),
            check: Check::Compiled(Self::validator(schema, list_problems)?),
        })
    }

    fn validator(
        schema: &Value,
        list_problems: bool,
    ) -> Result<jsonschema::Validator, Vec<Violation>> {
        // The validator crate is well behaved, but a schema is user input: never let a panic in a
        // dependency escape as a crash.
        let checked = catch_unwind(AssertUnwindSafe(|| {
            if list_problems {
                let meta = jsonschema::draft202012::meta::validator();
                let problems: Vec<Violation> = meta
                    .iter_errors(schema)
                    .map(|e| Violation {
                        pointer: e.instance_path().to_string(),
                        message: e.to_string(),
                    })
                    .collect();
                if !problems.is_empty() {
                    return Err(problems);
                }
            }
            jsonschema::draft202012::options()
                .with_format(CAS_REF_FORMAT, |s: &str| Hash::parse(s).is_ok())
                .should_validate_formats(true)
                .build(schema)
                .map_err(|e| {
                    vec![Violation {
                        pointer: e.instance_path().to_string(),
                        message: e.to_string(),
                    }]
                })
        }));
        match checked {
            Ok(result) => result,
            Err(_) => Err(vec![Violation {
                pointer: String::new(),
                message: "the schema could not be compiled (the validator failed internally)"
                    .into(),
            }]),
        }
    }

    /// The schema document itself.
    pub(crate) fn schema(&self) -> &Value {
        &self.schema
    }

    /// Validates `instance`, listing every failed rule with its JSON pointer.
    pub(crate) fn validate(&self, instance: &Value) -> Result<(), Vec<Violation>> {
        let validator = match &self.check {
            Check::Compiled(validator) => validator,
            Check::Builtin { accepts, .. } if accepts(instance) => return Ok(()),
            Check::Builtin { compiled, .. } => compiled
                .get_or_init(|| Self::validator(&self.schema, false))
                .as_ref()
                .map_err(Clone::clone)?,
        };
        let checked = catch_unwind(AssertUnwindSafe(|| {
            validator
                .iter_errors(instance)
                .map(|e| Violation {
                    pointer: e.instance_path().to_string(),
                    message: e.to_string(),
                })
                .collect::<Vec<_>>()
        }));
        match checked {
            Ok(problems) if problems.is_empty() => Ok(()),
            Ok(problems) => Err(problems),
            Err(_) => Err(vec![Violation {
                pointer: String::new(),
                message: "validation failed internally".into(),
            }]),
        }
    }

    /// Every `cas_ref` string in `instance`, in document order, without duplicates.
    ///
    /// Strings that do not parse as hashes are skipped (validation reports them).
    pub(crate) fn refs(&self, instance: &Value) -> Vec<Hash> {
        let mut seen = std::collections::HashSet::new();
        self.located_refs(instance)
            .into_iter()
            .map(|(_, h)| h)
            .filter(|h| seen.insert(*h))
            .collect()
    }

    /// Every `cas_ref` string in `instance` with the JSON pointer where it stands.
    pub(crate) fn located_refs(&self, instance: &Value) -> Vec<(String, Hash)> {
        let mut out = Vec::new();
        let mut walk = RefWalk {
            root: &self.schema,
            pointer: String::new(),
            out: &mut out,
        };
        walk.visit(&self.schema, instance, 0);
        out
    }
}

struct RefWalk<'a> {
    root: &'a Value,
    pointer: String,
    out: &'a mut Vec<(String, Hash)>,
}

impl RefWalk<'_> {
    /// Visits `instance` under `schema`, then its children under their subschemas.
    fn visit(&mut self, schema: &Value, instance: &Value, depth: usize) {
        if depth > MAX_WALK_DEPTH {
            return;
        }
        let Value::Object(s) = schema else {
            return; // boolean schemas carry no formats
        };
        if s.get("format").and_then(Value::as_str) == Some(CAS_REF_FORMAT)
            && let Some(text) = instance.as_str()
            && let Ok(hash) = Hash::parse(text)
        {
            self.out.push((self.pointer.clone(), hash));
        }
        if let Some(reference) = s.get("$ref").and_then(Value::as_str)
            && let Some(pointer) = reference.strip_prefix('#')
            && let Some(target) = self.root.pointer(pointer)
        {
            self.visit(target, instance, depth + 1);
        }
        for key in ["allOf", "anyOf", "oneOf"] {
            if let Some(Value::Array(branches)) = s.get(key) {
                for branch in branches {
                    self.visit(branch, instance, depth + 1);
                }
            }
        }
        for key in ["then", "else"] {
            if let Some(branch) = s.get(key) {
                self.visit(branch, instance, depth + 1);
            }
        }
        match instance {
            Value::Object(fields) => {
                let properties = s.get("properties").and_then(Value::as_object);
                let additional = s.get("additionalProperties");
                for (name, value) in fields {
                    let sub = properties.and_then(|p| p.get(name)).or(additional);
                    if let Some(sub) = sub {
                        self.child(name, sub, value, depth);
                    }
                }
            }
            Value::Array(items) => {
                let prefix = s.get("prefixItems").and_then(Value::as_array);
                let rest = s.get("items");
                for (i, item) in items.iter().enumerate() {
                    let sub = prefix.and_then(|p| p.get(i)).or(rest);
                    if let Some(sub) = sub {
                        self.child(&i.to_string(), sub, item, depth);
                    }
                }
            }
            _ => {}
        }
    }

    fn child(&mut self, segment: &str, schema: &Value, instance: &Value, depth: usize) {
        let len = self.pointer.len();
        self.pointer.push('/');
        self.pointer
            .push_str(&segment.replace('~', "~0").replace('/', "~1"));
        self.visit(schema, instance, depth + 1);
        self.pointer.truncate(len);
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn accepts_a_schema_and_validates_instances() {
        let s = CompiledSchema::compile(&json!({
            "type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
            "required": ["a"]
        }))
        .unwrap();
        assert!(s.validate(&json!({"a": "x", "b": 2})).is_ok());
        let problems = s.validate(&json!({"b": "two"})).unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems.iter().any(|p| p.pointer == "/b"));
        assert!(
            problems
                .iter()
                .any(|p| p.pointer.is_empty() && p.message.contains("\"a\""))
        );
    }

    #[test]
    fn rejects_invalid_schemas_listing_every_problem() {
        let problems = CompiledSchema::compile(&json!({
            "type": "nonsense",
            "properties": {"a": {"minLength": -1}}
        }))
        .unwrap_err();
        assert!(problems.len() >= 2, "{problems:?}");
        assert!(problems.iter().any(|p| p.pointer == "/type"));
        assert!(
            problems
                .iter()
                .any(|p| p.pointer == "/properties/a/minLength")
        );
    }

    #[test]
    fn rejects_other_drafts() {
        let problems = CompiledSchema::compile(
            &json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "string"}),
        )
        .unwrap_err();
        assert!(problems[0].message.contains("2020-12"));
    }

    #[test]
    fn cas_ref_format_is_checked() {
        let s = CompiledSchema::compile(&json!({"type": "string", "format": "cas_ref"})).unwrap();
        assert!(s.validate(&json!("EYHPV6X8XHTCS")).is_ok());
        assert!(s.validate(&json!("eyhpv6x8xhtcs")).is_ok());
        assert!(s.validate(&json!("not a hash")).is_err());
    }

    #[test]
    fn refs_are_found_through_the_schema() {
        let s = CompiledSchema::compile(&json!({
            "$defs": {"ref": {"type": "string", "format": "cas_ref"}},
            "type": "object",
            "properties": {
                "one": {"$ref": "#/$defs/ref"},
                "maybe": {"type": ["string", "null"], "format": "cas_ref"},
                "list": {"type": "array", "items": {"$ref": "#/$defs/ref"}},
                "plain": {"type": "string"},
                "pair": {"prefixItems": [{"type": "string"}, {"format": "cas_ref"}]}
            },
            "additionalProperties": {
                "type": "object",
                "properties": {"inner": {"anyOf": [{"format": "cas_ref"}, {"type": "integer"}]}}
            }
        }))
        .unwrap();
        let h = |s: &str| Hash::parse(s).unwrap();
        let refs = s.refs(&json!({
            "one": "EYHPV6X8XHTCS",
            "maybe": null,
            "list": ["2DHW2FP49YVD3", "EYHPV6X8XHTCS"],
            "plain": "F5VV55NBKX1R5",
            "pair": ["F5VV55NBKX1R5", "827F196W26J4M"],
            "other": {"inner": "298FDNKR7P5MH"}
        }));
        assert_eq!(
            refs,
            vec![
                h("EYHPV6X8XHTCS"),
                h("2DHW2FP49YVD3"),
                h("827F196W26J4M"),
                h("298FDNKR7P5MH")
            ]
        );
    }

    #[test]
    fn located_refs_carry_pointers() {
        let s = CompiledSchema::compile(&json!({
            "type": "object",
            "additionalProperties": {"type": "array", "items": {"format": "cas_ref"}}
        }))
        .unwrap();
        let found = s.located_refs(&json!({"a/b": ["EYHPV6X8XHTCS"]}));
        assert_eq!(found[0].0, "/a~1b/0");
    }

    #[test]
    fn ref_cycles_do_not_hang() {
        let s = CompiledSchema::compile(
            &json!({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}),
        )
        .unwrap();
        assert!(s.refs(&json!("EYHPV6X8XHTCS")).is_empty());
    }
}
