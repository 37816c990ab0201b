//! The order in which a workflow's author wrote a role's output fields. Stored nodes are
//! canonical JSON (keys sorted), so the order lives only in the YAML the author saved, which the
//! registry keeps beside each version ([`super::registry::source_text`]). Forms and templates
//! for a person list the fields in that order: `title` before `body` before `labels`, as
//! written, not alphabetically.

use serde_json::Value;

use crate::cas::{Hash, Store};

/// The top-level property names of `schema`, the output schema of `role` in workflow version
/// `workflow`: first as its author wrote them, then any the saved text does not name (or all of
/// them, sorted, when no text was saved), so every property appears exactly once.
pub(crate) fn of_role(store: &Store, workflow: Hash, role: &str, schema: &Value) -> Vec<String> {
    let written = super::registry::source_text(store, workflow)
        .map(|text| written_order(&text, role))
        .unwrap_or_default();
    ordered(schema, &written)
}

/// The names under `roles.<role>.meta.properties` in `yaml`, in the order written.
fn written_order(yaml: &str, role: &str) -> Vec<String> {
    let Ok(doc) = serde_yaml::from_str::<serde_yaml::Value>(yaml) else {
        return Vec::new();
    };
    doc.get("roles")
        .and_then(|r| r.get(role))
        .and_then(|r| r.get("meta"))
        .and_then(|m| m.get("properties"))
        .and_then(serde_yaml::Value::as_mapping)
        .map(|props| {
            props
                .keys()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The properties of `schema`: those in `written` first, in that order, then the rest sorted.
pub(crate) fn ordered(schema: &Value, written: &[String]) -> Vec<String> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    let mut names: Vec<String> = Vec::with_capacity(properties.len());
    for name in written {
        if properties.contains_key(name.as_str()) && !names.contains(name) {
            names.push(name.clone());
        }
    }
    let mut rest: Vec<String> = properties
        .keys()
        .filter(|name| !names.contains(name))
        .cloned()
        .collect();
    rest.sort();
    names.extend(rest);
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const YAML: &str = "name: triage\nroles:\n  triager:\n    goal: Sort it.\n    meta:\n      type: object\n      properties:\n        title: { type: string }\n        severity: { enum: [sev1, sev2] }\n        body: { type: string }\n        approved: { type: boolean }\n      required: [title]\n";

    #[test]
    fn the_written_order_wins_over_the_sorted_one() {
        assert_eq!(
            written_order(YAML, "triager"),
            ["title", "severity", "body", "approved"]
        );
        let schema = json!({"properties": {"approved": {}, "body": {}, "severity": {}, "title": {}, "extra": {}}});
        assert_eq!(
            ordered(&schema, &written_order(YAML, "triager")),
            ["title", "severity", "body", "approved", "extra"]
        );
    }

    #[test]
    fn without_saved_text_the_fields_are_sorted_and_none_is_lost() {
        let schema = json!({"properties": {"b": {}, "a": {}}});
        assert_eq!(ordered(&schema, &[]), ["a", "b"]);
        assert_eq!(written_order("not: [yaml", "r"), Vec::<String>::new());
        assert_eq!(written_order(YAML, "nobody"), Vec::<String>::new());
        assert_eq!(
            ordered(&schema, &["gone".into(), "b".into(), "b".into()]),
            ["b", "a"]
        );
    }
}
