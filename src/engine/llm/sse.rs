//! Streamed chat completions: reading the server-sent events of a
//! `"stream": true` answer, handing each piece of text on as it arrives.

use serde_json::Value;

/// How reading a stream ended.
pub(super) enum Streamed {
    /// To its end: the pieces joined, and what the last events said.
    Done {
        text: String,
        finish_reason: Option<String>,
        usage: Option<Value>,
    },
    /// Timed out before any text.
    Timeout,
    /// Failed before any text.
    Connection(String),
    /// Broke after some text was handed on.
    Broken(String),
}

/// Reads a chat completion's server-sent events: `data: {choices: [{delta: {content}}]}` events
/// until `data: [DONE]` (or the end), handing each piece of text to `on_text`.
pub(super) fn read_stream(body: impl std::io::Read, on_text: &mut dyn FnMut(&str)) -> Streamed {
    let mut text = String::new();
    let mut finish_reason = None;
    let mut usage = None;
    for line in std::io::BufRead::lines(std::io::BufReader::new(body)) {
        let line = match line {
            Ok(line) => line,
            Err(e) if text.is_empty() && e.kind() == std::io::ErrorKind::TimedOut => {
                return Streamed::Timeout;
            }
            Err(e) if text.is_empty() => return Streamed::Connection(e.to_string()),
            Err(e) => return Streamed::Broken(format!("the stream broke: {e}")),
        };
        let Some(data) = line.strip_prefix("data:").map(str::trim) else {
            continue;
        };
        if data == "[DONE]" {
            break;
        }
        let Ok(event) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        if let Some(u) = event.get("usage").filter(|u| u.is_object()) {
            usage = Some(u.clone());
        }
        let Some(choice) = event.get("choices").and_then(|c| c.get(0)) else {
            continue;
        };
        if let Some(piece) = choice
            .get("delta")
            .and_then(|d| d.get("content"))
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
        {
            on_text(piece);
            text.push_str(piece);
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            finish_reason = Some(reason.to_owned());
        }
    }
    Streamed::Done {
        text,
        finish_reason,
        usage,
    }
}
