//! Extraction layer 3 (`docs/LLM.md#the-extraction-fallback-layer-3`): when the fast paths fail and
//! a model is configured, ask it — in JSON mode, with the role's schema and the raw output — for
//! the structured output.
//!
//! One corrective retry: when the reply is not a JSON object or fails the schema, the error is
//! fed back once. The reply goes through the same fast-path parser and schema check as any
//! agent's output, so nothing the model says is trusted unchecked.

use crate::advice::Advice;
use serde_json::Value;

use crate::cas::canonical::sorted;
use crate::cas::schema::CompiledSchema;

use crate::engine::agent::extract::{ExtractError, Extracted, extract};
use crate::engine::llm::client::{ChatRequest, Client, LlmError, Message};

/// How many completions layer 3 may ask for (the first and one corrective retry).
pub(crate) const MAX_CALLS: usize = 2;

const SYSTEM: &str = "You convert an agent's answer into one JSON object that validates against a \
JSON Schema. Reply with the JSON object only: no prose, no code fence. Take every value from the \
answer; keep its wording where a field is text. Where the answer is silent about a required \
field, choose the value its content implies.";

/// A successful layer-3 extraction.
#[derive(Debug, Clone)]
pub(crate) struct LlmExtracted {
    pub extracted: Extracted,
    /// Completions asked for (1 or 2).
    pub calls: usize,
    /// The `usage` objects the provider returned, one per call.
    pub usage: Vec<Value>,
}

/// Why layer 3 failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LlmExtractError {
    #[error(transparent)]
    Llm(#[from] LlmError),
    #[error(
        "the model's reply was not usable twice: {}",
        errors.iter().enumerate().map(|(i, e)| format!("\n  attempt {}: {e}", i + 1)).collect::<String>()
    )]
    Unusable { errors: Vec<String> },
}

impl Advice for LlmExtractError {
    fn hints(&self) -> Vec<String> {
        match self {
            LlmExtractError::Llm(e) => e.hints(),
            _ => Vec::new(),
        }
    }
    fn is_busy(&self) -> bool {
        match self {
            LlmExtractError::Llm(e) => e.is_busy(),
            _ => false,
        }
    }
}

/// Asks `client` for the output of `raw` under `schema`; `fast_error` is why layers 1–2 failed.
pub(crate) fn extract_with_llm(
    client: &Client,
    schema: &CompiledSchema,
    raw: &str,
    fast_error: &ExtractError,
) -> Result<LlmExtracted, LlmExtractError> {
    let schema_text = serde_json::to_string_pretty(&sorted(schema.schema())).unwrap_or_default();
    let mut messages = vec![
        Message::system(SYSTEM),
        Message::user(format!(
            "## JSON Schema\n\n```json\n{schema_text}\n```\n\n## The answer\n\n{raw}\n\n\
             (Read directly, the answer failed: {fast_error}.)\n\nReply with the JSON object."
        )),
    ];
    let mut errors = Vec::new();
    let mut usage = Vec::new();
    for call in 1..=MAX_CALLS {
        let response = client.chat(&ChatRequest {
            messages: messages.clone(),
            tools: Vec::new(),
            json_mode: true,
        })?;
        usage.extend(response.usage.clone());
        let reply = response.message.content.clone().unwrap_or_default();
        match parse_reply(&reply, schema) {
            Ok(output) => {
                let body = raw.trim();
                return Ok(LlmExtracted {
                    extracted: Extracted {
                        output,
                        body: (!body.is_empty()).then(|| body.to_owned()),
                        method: "llm",
                    },
                    calls: call,
                    usage,
                });
            }
            Err(error) => {
                messages.push(Message::assistant(reply));
                messages.push(Message::user(format!(
                    "That reply is not usable: {error}\nReply with the corrected JSON object only."
                )));
                errors.push(error);
            }
        }
    }
    Err(LlmExtractError::Unusable { errors })
}

/// The reply as a schema-valid object, or what is wrong with it.
fn parse_reply(reply: &str, schema: &CompiledSchema) -> Result<Value, String> {
    if !reply.trim_start().starts_with('{') && !reply.contains("```json") {
        return Err("it is not a JSON object".into());
    }
    extract(reply, schema)
        .map(|e| e.output)
        .map_err(|e| match e {
            ExtractError::Schema { violations, .. } => format!(
                "it does not match the schema:{}",
                violations
                    .iter()
                    .map(|v| format!("\n  - {v}"))
                    .collect::<String>()
            ),
            other => other.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn replies_are_checked_like_any_output() {
        let schema = CompiledSchema::compile(&json!({
            "type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]
        }))
        .unwrap();
        assert_eq!(
            parse_reply(" {\"ok\": true}", &schema).unwrap(),
            json!({"ok": true})
        );
        assert_eq!(
            parse_reply("```json\n{\"ok\": false}\n```", &schema).unwrap(),
            json!({"ok": false})
        );
        assert_eq!(
            parse_reply("ok: true", &schema).unwrap_err(),
            "it is not a JSON object"
        );
        assert!(
            parse_reply("{\"ok\": tru", &schema)
                .unwrap_err()
                .contains("not valid at line 1")
        );
        let err = parse_reply("{\"ok\": 1}", &schema).unwrap_err();
        assert!(
            err.starts_with("it does not match the schema:\n  - "),
            "{err}"
        );
    }
}
