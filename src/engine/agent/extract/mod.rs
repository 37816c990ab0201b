//! Extraction: turning an agent's raw output into the role's structured output
//! (`docs/agents.md#what-an-agent-is`).
//!
//! Two fast paths cost nothing: a YAML frontmatter block (`---` … `---`) followed by a Markdown
//! body, and a JSON object (the whole output, or a ```json fence). Either must validate against
//! the role's schema. Failures say precisely what was wrong; the caller keeps the raw output.

pub(crate) mod llm_layer;

use std::borrow::Cow;

use crate::advice::Advice;
use serde_json::Value;

use crate::cas::schema::{CompiledSchema, Violation};

use crate::engine::workflow::yaml_to_json;

/// What extraction produced.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Extracted {
    pub output: Value,
    /// The Markdown that came with it (after the frontmatter, or around a JSON fence).
    pub body: Option<String>,
    /// Which path produced it: `frontmatter` or `json`.
    pub method: &'static str,
}

/// Why extraction failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ExtractError {
    #[error("the output is empty")]
    Empty,
    #[error("no YAML frontmatter (`---` on the first line) and no JSON object found in the output")]
    NoStructure,
    #[error("the frontmatter block is not closed: no second `---` line")]
    Unclosed,
    #[error("the frontmatter is not valid YAML at line {line}: {message}")]
    Yaml { line: usize, message: String },
    #[error("the frontmatter must be a mapping of fields, found {0}")]
    NotAMapping(&'static str),
    #[error("the JSON is not valid at line {line}, column {column}: {message}")]
    Json {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("the {method} output does not match the role's schema:\n{}", violations.iter().map(|v| format!("  - {v}")).collect::<Vec<_>>().join("\n"))]
    Schema {
        method: &'static str,
        violations: Vec<Violation>,
    },
}

impl Advice for ExtractError {}

/// Extracts a structured output that validates against `schema`.
pub(crate) fn extract(raw: &str, schema: &CompiledSchema) -> Result<Extracted, ExtractError> {
    let found = parse(raw)?;
    schema
        .validate(&found.output)
        .map_err(|violations| ExtractError::Schema {
            method: found.method,
            violations,
        })?;
    Ok(found)
}

/// The structured output in `raw` (frontmatter or a JSON object), not yet checked against any
/// schema.
pub(crate) fn parse(raw: &str) -> Result<Extracted, ExtractError> {
    let text = raw.trim_start_matches('\u{feff}');
    if text.trim().is_empty() {
        return Err(ExtractError::Empty);
    }
    if let Some(rest) = strip_fence_line(text.trim_start()) {
        frontmatter(rest)
    } else if let Some(found) = json_object(text)? {
        Ok(found)
    } else {
        Err(ExtractError::NoStructure)
    }
}

/// A person's answer in the form [`extract`] reads. A person may write the fields as plain YAML
/// (`approved: true`) with no `---` lines around them: such a text, when it is a YAML mapping, is
/// returned as a frontmatter block with no body. Anything else (frontmatter, a JSON object, or a
/// text that is no mapping) is returned as it is.
pub(crate) fn answer_text(raw: &str) -> Cow<'_, str> {
    let text = raw.trim_start_matches('\u{feff}').trim();
    if text.starts_with("---") || text.starts_with('{') || text.is_empty() {
        return Cow::Borrowed(raw);
    }
    match serde_yaml::from_str::<serde_yaml::Value>(text) {
        Ok(serde_yaml::Value::Mapping(_)) => Cow::Owned(format!("---\n{text}\n---\n")),
        _ => Cow::Borrowed(raw),
    }
}

/// Whether `raw` is a whole answer already: a JSON object or a closed frontmatter block that
/// parse (more text could only be a body, or break it), or a plain YAML mapping (which more
/// lines could still extend).
pub(crate) fn answer_is_complete(raw: &str) -> bool {
    parse(&answer_text(raw)).is_ok()
}

/// If `text` starts with a `---` line, the text after it.
fn strip_fence_line(text: &str) -> Option<&str> {
    let rest = text.strip_prefix("---")?;
    let rest = rest.trim_start_matches([' ', '\t']);
    rest.strip_prefix("\r\n")
        .or_else(|| rest.strip_prefix('\n'))
}

fn frontmatter(rest: &str) -> Result<Extracted, ExtractError> {
    // Find the closing `---` (or `...`) alone on a line.
    let mut offset = 0;
    let mut close = None;
    for line in rest.split_inclusive('\n') {
        let bare = line.trim_end();
        if bare == "---" || bare == "..." {
            close = Some((offset, offset + line.len()));
            break;
        }
        offset += line.len();
    }
    let (end, after) = close.ok_or(ExtractError::Unclosed)?;
    let yaml = &rest[..end];
    let parsed: serde_yaml::Value = serde_yaml::from_str(yaml).map_err(|e| ExtractError::Yaml {
        // +1: the opening `---` line precedes the YAML.
        line: e.location().map(|l| l.line() + 1).unwrap_or(1),
        message: e.to_string(),
    })?;
    let output = match &parsed {
        serde_yaml::Value::Mapping(_) => {
            yaml_to_json(&parsed).map_err(|message| ExtractError::Yaml { line: 1, message })?
        }
        serde_yaml::Value::Null => return Err(ExtractError::NotAMapping("nothing")),
        serde_yaml::Value::Sequence(_) => return Err(ExtractError::NotAMapping("a list")),
        _ => return Err(ExtractError::NotAMapping("a single value")),
    };
    let body = rest[after..].trim_start_matches(['\r', '\n']).to_owned();
    Ok(Extracted {
        output,
        body: (!body.trim().is_empty()).then_some(body),
        method: "frontmatter",
    })
}

/// The whole output as a JSON object, or the last ```json fence in it.
fn json_object(text: &str) -> Result<Option<Extracted>, ExtractError> {
    let trimmed = text.trim();
    if trimmed.starts_with('{') {
        let output = parse_json(trimmed)?;
        return Ok(Some(Extracted {
            output,
            body: None,
            method: "json",
        }));
    }
    let Some(open) = text.rfind("```json") else {
        return Ok(None);
    };
    let after_open = &text[open + "```json".len()..];
    let Some(newline) = after_open.find('\n') else {
        return Ok(None);
    };
    let inner_start = open + "```json".len() + newline + 1;
    let Some(close) = text[inner_start..].find("```") else {
        return Ok(None);
    };
    let inner = &text[inner_start..inner_start + close];
    let output = parse_json(inner.trim())?;
    let body = format!("{}{}", &text[..open], &text[inner_start + close + 3..]);
    Ok(Some(Extracted {
        output,
        body: (!body.trim().is_empty()).then(|| body.trim().to_owned()),
        method: "json",
    }))
}

fn parse_json(text: &str) -> Result<Value, ExtractError> {
    let value: Value = serde_json::from_str(text).map_err(|e| ExtractError::Json {
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    if !value.is_object() {
        return Err(ExtractError::NoStructure);
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> CompiledSchema {
        CompiledSchema::compile(&json!({
            "type": "object",
            "properties": {"approved": {"type": "boolean"}, "notes": {"type": "string"}},
            "required": ["approved"]
        }))
        .unwrap()
    }

    #[test]
    fn frontmatter_with_body() {
        let e = extract(
            "---\napproved: true\nnotes: fine\n---\n\n# Review\nLooks good.\n",
            &schema(),
        )
        .unwrap();
        assert_eq!(e.output, json!({"approved": true, "notes": "fine"}));
        assert_eq!(e.body.as_deref(), Some("# Review\nLooks good.\n"));
        assert_eq!(e.method, "frontmatter");
    }

    #[test]
    fn json_whole_and_fenced() {
        let e = extract("  {\"approved\": false}\n", &schema()).unwrap();
        assert_eq!(
            (e.output, e.body, e.method),
            (json!({"approved": false}), None, "json")
        );
        let e = extract(
            "Here you go:\n```json\n{\"approved\": true}\n```\nThanks.",
            &schema(),
        )
        .unwrap();
        assert_eq!(e.output, json!({"approved": true}));
        assert_eq!(e.body.as_deref(), Some("Here you go:\n\nThanks."));
    }

    #[test]
    fn a_plain_yaml_answer_reads_as_frontmatter() {
        let e = extract(&answer_text("approved: true\nnotes: fine\n"), &schema()).unwrap();
        assert_eq!(e.output, json!({"approved": true, "notes": "fine"}));
        assert_eq!(e.body, None);
        assert_eq!(answer_text("I approve."), "I approve.");
        assert_eq!(answer_text("{\"approved\": true}"), "{\"approved\": true}");
        assert!(answer_is_complete("approved: true"));
        assert!(!answer_is_complete("{\"approved\":"));
        assert!(!answer_is_complete("---\napproved: true\n"));
    }

    #[test]
    fn failures_are_precise() {
        let s = schema();
        assert!(matches!(extract("   \n", &s), Err(ExtractError::Empty)));
        assert!(matches!(
            extract("I approve.", &s),
            Err(ExtractError::NoStructure)
        ));
        assert!(matches!(
            extract("---\napproved: true\n", &s),
            Err(ExtractError::Unclosed)
        ));
        let err = extract("---\napproved: true\nnotes: [unclosed\n---\n", &s).unwrap_err();
        assert!(matches!(err, ExtractError::Yaml { .. }), "{err}");
        assert!(err.to_string().contains("line"), "{err}");
        let err = extract("---\n- a\n---\n", &s).unwrap_err();
        assert!(matches!(err, ExtractError::NotAMapping("a list")));
        let err = extract("---\nnotes: 3\n---\n", &s).unwrap_err().to_string();
        assert!(
            err.contains("frontmatter output does not match")
                && err.contains("\"approved\" is a required property")
                && err.contains("at /notes"),
            "{err}"
        );
        let err = extract("{\"approved\": tru}", &s).unwrap_err();
        assert!(matches!(err, ExtractError::Json { line: 1, .. }), "{err}");
    }
}
