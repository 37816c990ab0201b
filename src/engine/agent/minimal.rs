//! The smallest value a JSON Schema accepts, for the `dry` agent and for examples in prompts.
//!
//! Objects get only their required properties, strings their minimum length, numbers their
//! minimum (or 0), booleans `false`, arrays their minimum number of items; `const`, `enum`,
//! `default`-free first choices for `anyOf`/`oneOf`, and local `$ref`s are followed. The result
//! is checked against the schema by the caller; this is a best effort, not a solver.

use serde_json::{Map, Value, json};

const MAX_DEPTH: usize = 32;

/// The smallest value `schema` accepts (best effort).
pub(crate) fn minimal(schema: &Value) -> Value {
    build(schema, schema, 0)
}

fn build(root: &Value, schema: &Value, depth: usize) -> Value {
    if depth > MAX_DEPTH {
        return Value::Null;
    }
    let Value::Object(s) = schema else {
        return Value::Null; // `true` accepts anything; null is as small as it gets
    };
    if let Some(c) = s.get("const") {
        return c.clone();
    }
    if let Some(Value::Array(choices)) = s.get("enum")
        && let Some(first) = choices.first()
    {
        return first.clone();
    }
    if let Some(target) = s
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix('#'))
        .and_then(|p| root.pointer(p))
    {
        return build(root, target, depth + 1);
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(Value::Array(branches)) = s.get(key)
            && let Some(first) = branches.first()
        {
            return build(root, first, depth + 1);
        }
    }
    if let Some(Value::Array(all)) = s.get("allOf") {
        let mut merged = Map::new();
        for sub in all {
            if let Value::Object(fields) = build(root, sub, depth + 1) {
                merged.extend(fields);
            }
        }
        if !merged.is_empty() {
            return Value::Object(merged);
        }
    }
    let ty = match s.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(types)) => {
            // Prefer null when allowed: it is the smallest.
            if types.iter().any(|t| t == "null") {
                "null"
            } else {
                types.first().and_then(Value::as_str).unwrap_or("null")
            }
        }
        _ if s.contains_key("properties") || s.contains_key("required") => "object",
        _ if s.contains_key("items") => "array",
        _ => "null",
    };
    match ty {
        "object" => {
            let mut out = Map::new();
            let props = s.get("properties").and_then(Value::as_object);
            if let Some(Value::Array(required)) = s.get("required") {
                for name in required.iter().filter_map(Value::as_str) {
                    let sub = props
                        .and_then(|p| p.get(name))
                        .unwrap_or(&Value::Bool(true));
                    let mut value = build(root, sub, depth + 1);
                    // A required field with no type (or not among the properties) would be
                    // null, which reads as "missing" downstream: a short text says "filled".
                    if value.is_null() && !allows_null(sub) {
                        value = Value::String(String::new());
                    }
                    out.insert(name.to_owned(), value);
                }
            }
            Value::Object(out)
        }
        "array" => {
            let n = s.get("minItems").and_then(Value::as_u64).unwrap_or(0) as usize;
            let items = s.get("items").unwrap_or(&Value::Bool(true));
            Value::Array(
                (0..n.min(64))
                    .map(|_| build(root, items, depth + 1))
                    .collect(),
            )
        }
        "string" => {
            let n = s.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
            Value::String("x".repeat(n.min(4096)))
        }
        "integer" => json!(number_floor(s).ceil() as i64),
        "number" => {
            let n = number_floor(s);
            if n.fract() == 0.0 {
                json!(n as i64)
            } else {
                json!(n)
            }
        }
        "boolean" => Value::Bool(false),
        _ => Value::Null,
    }
}

/// The least number allowed: `minimum`, just above `exclusiveMinimum`, else 0 (clamped to
/// `maximum`).
/// Whether `schema` says null outright: `type: null` (alone or among others), `const: null`, or
/// null as the first `enum` choice.
fn allows_null(schema: &Value) -> bool {
    let names_null = |t: &Value| t == "null";
    match schema.get("type") {
        Some(Value::String(t)) if t == "null" => return true,
        Some(Value::Array(types)) if types.iter().any(names_null) => return true,
        _ => {}
    }
    schema.get("const").is_some_and(Value::is_null)
        || schema
            .get("enum")
            .and_then(|e| e.get(0))
            .is_some_and(Value::is_null)
}

fn number_floor(s: &Map<String, Value>) -> f64 {
    let mut n = 0.0;
    if let Some(min) = s.get("minimum").and_then(Value::as_f64) {
        n = min;
    } else if let Some(min) = s.get("exclusiveMinimum").and_then(Value::as_f64) {
        n = min.floor() + 1.0;
    }
    if let Some(max) = s.get("maximum").and_then(Value::as_f64)
        && n > max
    {
        n = max;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cas::schema::CompiledSchema;

    fn check(schema: Value) -> Value {
        let value = minimal(&schema);
        CompiledSchema::compile(&schema)
            .unwrap()
            .validate(&value)
            .unwrap_or_else(|e| panic!("{value} does not validate: {e:?}"));
        value
    }

    #[test]
    fn objects_get_required_fields_only() {
        let v = check(json!({
            "type": "object",
            "properties": {
                "approved": {"type": "boolean"},
                "notes": {"type": "string", "minLength": 3},
                "score": {"type": "integer", "minimum": 2},
                "ratio": {"type": "number", "exclusiveMinimum": 0.5},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "mode": {"enum": ["generate", "edit"]},
                "optional": {"type": "string"}
            },
            "required": ["approved", "notes", "score", "ratio", "tags", "mode"]
        }));
        assert_eq!(
            v,
            json!({"approved": false, "notes": "xxx", "score": 2, "ratio": 1, "tags": [""], "mode": "generate"})
        );
    }

    #[test]
    fn refs_choices_and_nullable() {
        check(json!({
            "$defs": {"item": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}},
            "type": "object",
            "properties": {
                "items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "minItems": 2},
                "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                "maybe": {"type": ["string", "null"]},
                "fixed": {"const": 7}
            },
            "required": ["items", "either", "maybe", "fixed"]
        }));
    }

    #[test]
    fn a_required_field_with_no_type_is_a_text_not_null() {
        let v = check(json!({
            "type": "object",
            "properties": {"note": {"description": "Anything."}, "maybe": {"type": ["string", "null"]}},
            "required": ["note", "maybe", "unlisted"]
        }));
        assert_eq!(v, json!({"note": "", "maybe": null, "unlisted": ""}));
    }
}
