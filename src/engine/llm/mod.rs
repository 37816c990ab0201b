//! The model client (`docs/LLM.md`); the agents that use it are in [`crate::engine::agent::llm`].
//!
//! - [`client`]: the OpenAI-compatible chat-completions client (retries, key redaction).
//! - `embed`: text embeddings (`POST …/embeddings`) for project knowledge.
//! - `error`: [`client::LlmError`], with the hints each failure carries.
//! - `sse`: reading a streamed completion's server-sent events.
pub(crate) mod client;
mod embed;
mod error;
mod sse;
