//! Everything that talks to a language model (SPEC §6.2–6.4).
//!
//! - [`client`]: the OpenAI-compatible chat-completions client (retries, key redaction).
//! - [`agents`]: the `llm` and `react` built-in agents.
//! - [`json_extract`]: extraction's third layer, a JSON-mode completion.
//! - `sse`: reading a streamed completion's server-sent events.
//! - [`workdir`]: `react`'s file tools, confined to the working directory.
pub mod agents;
pub mod client;
pub mod json_extract;
mod sse;
pub mod workdir;
