//! An OpenAI-compatible chat-completions client (`docs/LLM.md`), blocking, over rustls.
//!
//! Resolution: a model alias → `models.<m>.{provider, name}` → `providers.<p>.{baseUrl,
//! apiKeyEnv}` → the key from the environment (which `<root>/.env` fed at start). A request
//! carries messages, optional function-calling `tools` and optional JSON mode; it is retried
//! with exponential backoff and jitter on 429, 5xx, timeouts and connection errors, honouring a
//! small `Retry-After`.
//!
//! Architecture Invariant: the API key lives in a [`Secret`] that never prints, and every text
//! that leaves this module in an error (a response body, a transport message) passes through
//! [`redact`] first, so no error, log or stored node can contain the key.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::engine::config::Config;
use crate::engine::llm::sse::{self, Streamed};

pub(crate) use super::error::LlmError;

/// The default time one request may take.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// The default number of retries after the first attempt.
pub(crate) const DEFAULT_RETRIES: u32 = 3;
/// The first backoff delay; it doubles on each retry, up to [`MAX_BACKOFF`].
const BACKOFF_BASE: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(8);
/// A `Retry-After` longer than this is not waited for: the error says so instead.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);
/// How much of an error response body is quoted in the error.
const BODY_EXCERPT: usize = 400;

/// An API key. Its `Debug` never shows it; only [`Client`] reads it.
#[derive(Clone)]
pub(crate) struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Replaces every occurrence of `secret` in `text` with `***`.
pub(crate) fn redact(text: &str, secret: Option<&Secret>) -> String {
    match secret {
        Some(Secret(key)) if !key.is_empty() => text.replace(key.as_str(), "***"),
        _ => text.to_owned(),
    }
}

/// A resolved model: where to send requests and with which key.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    /// The alias in config.yaml.
    pub alias: String,
    pub provider: String,
    /// The model's name at the provider.
    pub model: String,
    /// The API root, without a trailing `/`.
    pub base_url: String,
    key: Option<Secret>,
    pub timeout: Duration,
    pub retries: u32,
}

impl Endpoint {
    /// The model for `purpose`: `explicit` (e.g. `--model`) → `modelOverrides.<purpose>` →
    /// `defaultModel`.
    pub(crate) fn for_purpose(
        config: &Config,
        purpose: &str,
        explicit: Option<&str>,
    ) -> Result<Endpoint, LlmError> {
        let alias = explicit
            .or_else(|| config.model_for(purpose))
            .ok_or_else(|| LlmError::NoModel {
                purpose: purpose.to_owned(),
            })?;
        Endpoint::resolve(config, alias)
    }

    /// Resolves a model alias through the config and the environment.
    pub(crate) fn resolve(config: &Config, alias: &str) -> Result<Endpoint, LlmError> {
        let model = config
            .models
            .get(alias)
            .ok_or_else(|| LlmError::UnknownModel {
                alias: alias.to_owned(),
                known: if config.models.is_empty() {
                    "none configured".into()
                } else {
                    config.models.keys().cloned().collect::<Vec<_>>().join(", ")
                },
            })?;
        let provider_name = model.provider.clone().ok_or_else(|| LlmError::NoProvider {
            alias: alias.to_owned(),
        })?;
        if !config.providers.contains_key(&provider_name) {
            return Err(LlmError::UnknownProvider {
                alias: alias.to_owned(),
                provider: provider_name,
            });
        }
        let mut endpoint = Endpoint::of_provider(
            config,
            &provider_name,
            model.name.as_deref().unwrap_or(alias),
        )?;
        endpoint.alias = alias.to_owned();
        Ok(endpoint)
    }

    /// The endpoint of a provider for `model` (also used by `uwf doctor`).
    pub(crate) fn of_provider(
        config: &Config,
        provider: &str,
        model: &str,
    ) -> Result<Endpoint, LlmError> {
        let p = config
            .providers
            .get(provider)
            .ok_or_else(|| LlmError::UnknownProvider {
                alias: model.to_owned(),
                provider: provider.to_owned(),
            })?;
        let base_url = p
            .base_url
            .as_deref()
            .ok_or_else(|| LlmError::NoBaseUrl {
                provider: provider.to_owned(),
            })?
            .trim_end_matches('/')
            .to_owned();
        let key = match &p.api_key_env {
            Some(env) => match std::env::var(env) {
                Ok(key) if !key.trim().is_empty() => Some(Secret(key.trim().to_owned())),
                _ => {
                    return Err(LlmError::MissingKey {
                        provider: provider.to_owned(),
                        env: env.clone(),
                    });
                }
            },
            None => None,
        };
        Ok(Endpoint {
            alias: model.to_owned(),
            provider: provider.to_owned(),
            model: model.to_owned(),
            base_url,
            key,
            timeout: p
                .timeout
                .map(Duration::from_secs)
                .unwrap_or(DEFAULT_TIMEOUT),
            retries: p.retries.unwrap_or(DEFAULT_RETRIES),
        })
    }

    /// The key, for redacting texts that may echo it.
    #[cfg(test)]
    pub(crate) fn secret(&self) -> Option<&Secret> {
        self.key.as_ref()
    }
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Message {
    pub role: String,
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    pub(crate) fn system(text: impl Into<String>) -> Message {
        Message::text("system", text)
    }

    pub(crate) fn user(text: impl Into<String>) -> Message {
        Message::text("user", text)
    }

    pub(crate) fn assistant(text: impl Into<String>) -> Message {
        Message::text("assistant", text)
    }

    /// A tool's result, answering the call `id`.
    pub(crate) fn tool(id: &str, text: impl Into<String>) -> Message {
        Message {
            tool_call_id: Some(id.to_owned()),
            ..Message::text("tool", text)
        }
    }

    fn text(role: &str, text: impl Into<String>) -> Message {
        Message {
            role: role.to_owned(),
            content: Some(text.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// A function call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionCall,
}

fn function_type() -> String {
    "function".into()
}

/// The function and its arguments (a JSON text, as the API sends it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct FunctionCall {
    pub name: String,
    #[serde(default)]
    pub arguments: String,
}

/// A tool definition for function calling.
pub(crate) fn function_tool(name: &str, description: &str, parameters: &Value) -> Value {
    json!({
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    })
}

/// A request.
#[derive(Debug, Clone, Default)]
pub(crate) struct ChatRequest {
    pub messages: Vec<Message>,
    /// Function-calling tools (none: a plain completion).
    pub tools: Vec<Value>,
    /// `response_format: {"type": "json_object"}`.
    pub json_mode: bool,
}

/// The first choice of an answer.
#[derive(Debug, Clone)]
pub(crate) struct ChatResponse {
    pub message: Message,
    pub finish_reason: Option<String>,
    /// The `usage` object as the provider sent it (token counts), if any.
    pub usage: Option<Value>,
    /// How many HTTP attempts the answer took.
    pub attempts: u32,
}

/// A client for one endpoint.
pub(crate) struct Client {
    endpoint: Endpoint,
    agent: ureq::Agent,
}

/// A successful exchange: the answer's body, or a streamed chat answer read to its end.
pub(super) enum Exchanged {
    Body { body: String, attempts: u32 },
    Streamed(ChatResponse),
}

/// What one attempt ended with, before retry decisions.
enum Attempt {
    Answer {
        status: u16,
        retry_after: Option<Duration>,
        body: String,
    },
    Timeout,
    Connection(String),
    /// A streamed answer, read to its end.
    Streamed(ChatResponse),
    /// A stream that broke after some of its text was handed on: not retried (the text was
    /// already shown).
    Broken(String),
}

impl Client {
    pub(crate) fn new(endpoint: Endpoint) -> Client {
        let mut config = ureq::Agent::config_builder()
            .timeout_global(Some(endpoint.timeout))
            .http_status_as_error(false)
            .user_agent(concat!("uwf/", env!("CARGO_PKG_VERSION")));
        // A model server on this machine is never reached through a proxy from the
        // environment (HTTP_PROXY and friends), whatever NO_PROXY says.
        if is_loopback(&endpoint.base_url) {
            config = config.proxy(None);
        }
        let agent = config.build().into();
        Client { endpoint, agent }
    }

    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Sends a chat completion, retrying transient failures.
    pub(crate) fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        self.complete(request, None)
    }

    /// [`Client::chat`], streamed to `on_text` when it is given.
    fn complete(
        &self,
        request: &ChatRequest,
        on_text: Option<&mut dyn FnMut(&str)>,
    ) -> Result<ChatResponse, LlmError> {
        let url = format!("{}/chat/completions", self.endpoint.base_url);
        let mut body = json!({
            "model": self.endpoint.model,
            "messages": request.messages,
        });
        if on_text.is_some() {
            body["stream"] = Value::Bool(true);
        }
        if !request.tools.is_empty() {
            body["tools"] = Value::Array(request.tools.clone());
        }
        if request.json_mode {
            body["response_format"] = json!({"type": "json_object"});
        }
        match self.exchange(&url, &body.to_string(), on_text)? {
            Exchanged::Body { body, attempts } => self.parse(&url, &body, attempts),
            Exchanged::Streamed(response) => Ok(response),
        }
    }

    /// POSTs `body` to `url` until a 2xx answer, retrying 429, 5xx, timeouts and connection
    /// errors with backoff (honouring a short `Retry-After`); an event stream is read into
    /// `on_text` when it is given.
    pub(super) fn exchange(
        &self,
        url: &str,
        body: &str,
        mut on_text: Option<&mut dyn FnMut(&str)>,
    ) -> Result<Exchanged, LlmError> {
        let url = url.to_owned();
        let mut attempts = 0;
        loop {
            attempts += 1;
            let last = attempts > self.endpoint.retries;
            let wait = match self.attempt(&url, Some(body), &mut on_text) {
                Attempt::Answer { status, body, .. } if (200..300).contains(&status) => {
                    return Ok(Exchanged::Body { body, attempts });
                }
                Attempt::Streamed(mut response) => {
                    response.attempts = attempts;
                    return Ok(Exchanged::Streamed(response));
                }
                Attempt::Broken(message) => {
                    return Err(LlmError::Connection {
                        url,
                        message: self.excerpt(&message),
                        attempts,
                    });
                }
                Attempt::Answer {
                    status,
                    retry_after,
                    body,
                } => {
                    let retryable = status == 429 || status >= 500;
                    if let Some(wait) = retry_after.filter(|w| *w > MAX_RETRY_AFTER)
                        && retryable
                    {
                        return Err(LlmError::RateLimited { url, wait });
                    }
                    if !retryable || last {
                        return Err(LlmError::Status {
                            url,
                            status,
                            body: self.excerpt(&body),
                            attempts,
                        });
                    }
                    retry_after.unwrap_or_else(|| backoff(attempts))
                }
                Attempt::Timeout if last => {
                    return Err(LlmError::Timeout {
                        url,
                        timeout: self.endpoint.timeout,
                        attempts,
                    });
                }
                Attempt::Connection(message) if last => {
                    return Err(LlmError::Connection {
                        url,
                        message: self.excerpt(&message),
                        attempts,
                    });
                }
                Attempt::Timeout | Attempt::Connection(_) => backoff(attempts),
            };
            std::thread::sleep(wait);
        }
    }

    /// Sends a chat completion with `"stream": true` and hands each piece of the answer's text to
    /// `on_text` as it arrives (server-sent events). The answer is the same as
    /// [`Client::chat`]'s: the pieces joined. Retries as [`Client::chat`] does; a provider that
    /// answers with one completion instead of a stream is fine, and one that refuses `stream`
    /// (HTTP 400/422 naming it) is asked again without it, so nothing is asked of the user.
    /// Tools are not streamed.
    pub(crate) fn chat_stream(
        &self,
        request: &ChatRequest,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<ChatResponse, LlmError> {
        if !request.tools.is_empty() {
            return self.chat(request);
        }
        match self.complete(request, Some(on_text)) {
            Err(LlmError::Status {
                status: 400 | 422,
                body,
                ..
            }) if body.to_ascii_lowercase().contains("stream") => self.chat(request),
            other => other,
        }
    }

    /// `GET {baseUrl}/models`, once: the HTTP status, for `uwf doctor`.
    pub(crate) fn probe(&self) -> Result<u16, LlmError> {
        let url = format!("{}/models", self.endpoint.base_url);
        match self.attempt(&url, None, &mut None) {
            Attempt::Answer { status, .. } => Ok(status),
            Attempt::Timeout => Err(LlmError::Timeout {
                url,
                timeout: self.endpoint.timeout,
                attempts: 1,
            }),
            Attempt::Streamed(_) | Attempt::Broken(_) => Ok(200),
            Attempt::Connection(message) => Err(LlmError::Connection {
                url,
                message: self.excerpt(&message),
                attempts: 1,
            }),
        }
    }

    /// One HTTP exchange: POST `body` (or GET when `None`). An event-stream answer is read
    /// piece by piece into `on_text` when it is given.
    fn attempt(
        &self,
        url: &str,
        body: Option<&str>,
        on_text: &mut Option<&mut dyn FnMut(&str)>,
    ) -> Attempt {
        let auth = self
            .endpoint
            .key
            .as_ref()
            .map(|Secret(k)| format!("Bearer {k}"));
        let result = match body {
            Some(body) => {
                let mut req = self.agent.post(url).content_type("application/json");
                if let Some(auth) = &auth {
                    req = req.header("Authorization", auth);
                }
                req.send(body)
            }
            None => {
                let mut req = self.agent.get(url);
                if let Some(auth) = &auth {
                    req = req.header("Authorization", auth);
                }
                req.call()
            }
        };
        match result {
            Ok(mut response) => {
                let status = response.status().as_u16();
                let retry_after = response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs);
                let event_stream = response
                    .headers()
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.starts_with("text/event-stream"));
                if let Some(on_text) = on_text.as_mut()
                    && event_stream
                    && (200..300).contains(&status)
                {
                    return match sse::read_stream(
                        response.into_body().into_reader(),
                        &mut **on_text,
                    ) {
                        Streamed::Done {
                            text,
                            finish_reason,
                            usage,
                        } => Attempt::Streamed(ChatResponse {
                            message: Message {
                                role: "assistant".into(),
                                content: Some(text),
                                tool_calls: Vec::new(),
                                tool_call_id: None,
                            },
                            finish_reason,
                            usage,
                            attempts: 1,
                        }),
                        Streamed::Timeout => Attempt::Timeout,
                        Streamed::Connection(e) => Attempt::Connection(e),
                        Streamed::Broken(e) => Attempt::Broken(e),
                    };
                }
                match response.body_mut().read_to_string() {
                    Ok(body) => Attempt::Answer {
                        status,
                        retry_after,
                        body,
                    },
                    Err(ureq::Error::Timeout(_)) => Attempt::Timeout,
                    Err(e) => Attempt::Connection(format!("reading the answer failed: {e}")),
                }
            }
            Err(ureq::Error::Timeout(_)) => Attempt::Timeout,
            Err(ureq::Error::Io(e)) if e.kind() == std::io::ErrorKind::TimedOut => Attempt::Timeout,
            Err(e) => Attempt::Connection(e.to_string()),
        }
    }

    fn parse(&self, url: &str, body: &str, attempts: u32) -> Result<ChatResponse, LlmError> {
        let bad = |reason: String| LlmError::BadResponse {
            url: url.to_owned(),
            reason: self.excerpt(&reason),
        };
        let value: Value = serde_json::from_str(body)
            .map_err(|e| bad(format!("{e} in {}", self.excerpt(body))))?;
        let choice = value
            .get("choices")
            .and_then(|c| c.get(0))
            .ok_or_else(|| bad(format!("no `choices[0]` in {}", self.excerpt(body))))?;
        let message = choice
            .get("message")
            .ok_or_else(|| bad("no `choices[0].message`".into()))?;
        let content = match message.get("content") {
            Some(Value::String(s)) => Some(s.clone()),
            // Some providers send content as a list of parts.
            Some(Value::Array(parts)) => Some(
                parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join(""),
            ),
            _ => None,
        };
        let tool_calls: Vec<ToolCall> = match message.get("tool_calls") {
            Some(Value::Array(_)) => serde_json::from_value(message["tool_calls"].clone())
                .map_err(|e| bad(format!("malformed `tool_calls`: {e}")))?,
            _ => Vec::new(),
        };
        Ok(ChatResponse {
            message: Message {
                role: "assistant".into(),
                content,
                tool_calls,
                tool_call_id: None,
            },
            finish_reason: choice
                .get("finish_reason")
                .and_then(Value::as_str)
                .map(str::to_owned),
            usage: value.get("usage").filter(|u| u.is_object()).cloned(),
            attempts,
        })
    }

    /// A short, redacted excerpt of a text for an error message.
    pub(super) fn excerpt(&self, text: &str) -> String {
        let text = redact(text.trim(), self.endpoint.key.as_ref());
        if text.chars().count() > BODY_EXCERPT {
            format!("{}…", text.chars().take(BODY_EXCERPT).collect::<String>())
        } else {
            text
        }
    }
}

/// Whether a URL's host is this machine (`localhost`, `127.0.0.0/8`, `[::1]`).
fn is_loopback(url: &str) -> bool {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let authority = rest.split('/').next().unwrap_or("");
    let host = authority
        .rsplit_once('@')
        .map(|(_, h)| h)
        .unwrap_or(authority);
    let host = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host.split(':').next().unwrap_or("")
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The delay before retry `n` (1-based): exponential from [`BACKOFF_BASE`], capped, with the
/// upper half jittered so that clients retrying together spread out.
pub(crate) fn backoff(n: u32) -> Duration {
    let full = BACKOFF_BASE
        .saturating_mul(1 << n.saturating_sub(1).min(16))
        .min(MAX_BACKOFF);
    let half = full / 2;
    let jitter = (ulid::Ulid::new().random() % 1000) as u32;
    half + half * jitter / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        for n in 1..=10 {
            let d = backoff(n);
            let full = (BACKOFF_BASE * (1 << (n - 1))).min(MAX_BACKOFF);
            assert!(d >= full / 2 && d <= full, "retry {n}: {d:?}");
        }
    }

    #[test]
    fn loopback_hosts_are_recognised() {
        for url in [
            "http://127.0.0.1:8080/v1",
            "http://localhost/v1",
            "http://127.1.2.3",
            "http://[::1]:9000/v1",
            "http://u:p@127.0.0.1:1/v1",
        ] {
            assert!(is_loopback(url), "{url}");
        }
        for url in [
            "https://api.openai.com/v1",
            "http://10.0.0.1/v1",
            "http://localhost.example/v1",
        ] {
            assert!(!is_loopback(url), "{url}");
        }
    }

    #[test]
    fn secrets_never_print() {
        let secret = Secret("sk-abc".into());
        assert_eq!(format!("{secret:?}"), "Secret(***)");
        assert_eq!(
            redact("bad key sk-abc, sk-abc!", Some(&secret)),
            "bad key ***, ***!"
        );
        assert_eq!(redact("x", None), "x");
    }

    #[test]
    fn resolution_names_what_to_configure() {
        let config = crate::engine::config::parse(
            "providers:\n  p: { baseUrl: 'http://127.0.0.1:9/v1/', apiKeyEnv: UWF_TEST_KEY_NEVER_SET }\n  local: { baseUrl: 'http://127.0.0.1:9' }\n\
             models:\n  m: { provider: p, name: real-name }\n  orphan: { name: x }\n  l: { provider: local }\n",
        )
        .unwrap();
        let err = |r: Result<Endpoint, LlmError>| r.unwrap_err().to_string();
        assert!(
            err(Endpoint::for_purpose(&config, "extract", None))
                .contains("no model is configured for `extract`")
        );
        assert!(
            err(Endpoint::resolve(&config, "nope"))
                .contains("unknown model `nope` (models: l, m, orphan)")
        );
        assert!(
            err(Endpoint::resolve(&config, "orphan")).contains("model `orphan` has no provider")
        );
        let missing = Endpoint::resolve(&config, "m").unwrap_err();
        let hints = crate::advice::Advice::hints(&missing).join("\n");
        assert!(
            missing.to_string().contains("$UWF_TEST_KEY_NEVER_SET")
                && hints.contains("uwf setup --provider p"),
            "{missing}\n{hints}"
        );
        let local = Endpoint::resolve(&config, "l").unwrap();
        assert_eq!(
            (local.model.as_str(), local.base_url.as_str(), local.retries),
            ("l", "http://127.0.0.1:9", DEFAULT_RETRIES)
        );
        assert!(local.secret().is_none());
    }
}
