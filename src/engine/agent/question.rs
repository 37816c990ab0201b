//! What a person waiting on a step reads (`uwf thread question`, the mount's `question` file,
//! the dashboard): the role and the task first, as the thread's agents see them, then how to
//! answer in a person's terms — the fields with their types and descriptions, a smallest valid
//! answer to start from, and where to send it. An agent's prompt opens with the output format
//! instead ([`super::prompt::format_instruction`]); a person answers in plain YAML or JSON, so
//! the frontmatter rules are not theirs.

use std::fmt::Write;

use serde_json::Value;

use crate::engine::agent::minimal::minimal;
use crate::engine::agent::prompt::PromptParts;
use crate::engine::thread::render::output_yaml;

/// The heading that starts the part of a question about answering it.
pub(crate) const HOW_TO_ANSWER: &str = "## How to answer";

/// The question for a person, from the prompt `parts` of the role thread `id` waits on.
pub(crate) fn for_person(
    id: &str,
    parts: &PromptParts,
    schema: &Value,
    order: &[String],
) -> String {
    let mut out = String::new();
    out.push_str(parts.role.trim_start());
    out.push_str(&parts.task);
    if !out.ends_with("\n\n") {
        out.push('\n');
    }
    out.push_str(&how_to_answer(id, schema, order));
    out
}

/// The fields of `schema`, a smallest valid answer and the commands that send one.
fn how_to_answer(id: &str, schema: &Value, order: &[String]) -> String {
    let mut out = format!("{HOW_TO_ANSWER}\n\n");
    let fields = fields(schema, order);
    if fields.is_empty() {
        out.push_str("Answer with YAML or JSON that validates against the schema below.\n\n");
    } else {
        out.push_str("Answer with these fields, as YAML (`name: value` lines) or as JSON:\n\n");
        for line in fields {
            let _ = writeln!(out, "- {line}");
        }
        out.push('\n');
    }
    let smallest = minimal(schema);
    // The example lists its fields in the author's order too.
    let example = match smallest.as_object() {
        Some(fields) if !fields.is_empty() => {
            crate::engine::workflow::field_order::ordered(schema, order)
                .iter()
                .filter_map(|name| fields.get(name).map(|v| (name, v)))
                .map(|(name, v)| output_yaml(&serde_json::json!({ name: v })))
                .collect()
        }
        _ => output_yaml(&smallest),
    };
    let _ = write!(
        out,
        "A smallest valid answer, to start from:\n\n```yaml\n{example}```\n\n\
         Send it with `uwf thread answer {id}` (type it, pipe it, or `-f FILE`), or write it to \
         `threads/{id}/answer` in a mount.\n\n\
         The answer must validate against this JSON Schema:\n\n```json\n{}\n```\n",
        serde_json::to_string_pretty(&crate::cas::canonical::sorted(schema)).unwrap_or_default()
    );
    out
}

/// One line per top-level property, in `order` (the author's, see
/// [`crate::engine::workflow::field_order`]; the rest sorted): `name` (type, required) —
/// description.
pub(crate) fn fields(schema: &Value, order: &[String]) -> Vec<String> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    crate::engine::workflow::field_order::ordered(schema, order)
        .into_iter()
        .map(|name| {
            let property = &properties[&name];
            let mut facts = vec![kind(property)];
            if required.contains(&name.as_str()) {
                facts.push("required".to_owned());
            }
            let mut line = format!("`{name}` ({})", facts.join(", "));
            if let Some(text) = property.get("description").and_then(Value::as_str) {
                let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
                if !text.is_empty() {
                    let _ = write!(line, ": {text}");
                }
            }
            line
        })
        .collect()
}

/// A property's kind in words: its choices, its type, or "any value".
fn kind(property: &Value) -> String {
    let shown = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if let Some(choices) = property.get("enum").and_then(Value::as_array) {
        let choices: Vec<String> = choices.iter().map(shown).collect();
        return format!("one of: {}", choices.join(", "));
    }
    if let Some(value) = property.get("const") {
        return format!("exactly {}", shown(value));
    }
    let kind = match property.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts.iter().map(shown).collect::<Vec<_>>().join(" or "),
        _ => return "any value".to_owned(),
    };
    match (
        kind.as_str(),
        property.pointer("/items/type").and_then(Value::as_str),
    ) {
        ("array", Some(item)) => format!("list of {item}"),
        ("boolean", _) => "true or false".to_owned(),
        _ => kind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parts() -> PromptParts {
        PromptParts {
            format: "## Output format\n\nfrontmatter rules\n".into(),
            role: "\nYou are the `review` role.\n\n## Role: review\n\n**Goal:** Review.\n\n".into(),
            task: "## Task\n\nShip it?\n\n## History\n\n(no steps yet)\n".into(),
        }
    }

    #[test]
    fn the_task_comes_first_and_the_format_last_in_a_persons_words() {
        let schema = json!({
            "type": "object",
            "properties": {
                "approved": { "type": "boolean", "description": "Ship  it\nnow?" },
                "severity": { "enum": ["sev1", "sev2"] },
                "notes": { "type": "array", "items": { "type": "string" } }
            },
            "required": ["approved"]
        });
        let q = for_person("T1", &parts(), &schema, &[]);
        assert!(q.starts_with("You are the `review` role."), "{q}");
        let task = q.find("## Task").unwrap();
        let how = q.find(HOW_TO_ANSWER).unwrap();
        assert!(task < how, "{q}");
        assert!(!q.contains("## Output format"), "{q}");
        assert!(!q.contains("frontmatter"), "{q}");
        assert!(
            q.contains("- `approved` (true or false, required): Ship it now?"),
            "{q}"
        );
        assert!(q.contains("- `severity` (one of: sev1, sev2)"), "{q}");
        assert!(q.contains("- `notes` (list of string)"), "{q}");
        assert!(q.contains("```yaml\napproved: false\n"), "{q}");
        assert!(q.contains("uwf thread answer T1"), "{q}");
        assert!(
            q.trim_end().ends_with("```"),
            "the schema closes the question: {q}"
        );
    }

    #[test]
    fn fields_come_in_the_authors_order() {
        let schema = json!({
            "type": "object",
            "properties": { "approved": { "type": "boolean" }, "title": { "type": "string" } },
            "required": ["approved", "title"]
        });
        let order = ["title".to_owned(), "approved".to_owned()];
        let q = for_person("T1", &parts(), &schema, &order);
        let (title, approved) = (
            q.find("- `title`").unwrap(),
            q.find("- `approved`").unwrap(),
        );
        assert!(title < approved, "{q}");
        assert!(q.contains("```yaml\ntitle: ''\napproved: false\n"), "{q}");
    }

    #[test]
    fn a_schema_without_properties_still_says_how_to_answer() {
        let q = for_person("T1", &parts(), &json!({ "type": "object" }), &[]);
        assert!(q.contains("validates against the schema below"), "{q}");
    }
}
