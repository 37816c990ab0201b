//! What can go wrong resolving a model or talking to its provider, and what to do about it.
//! No error here contains the API key: texts from a provider pass through
//! [`super::client::redact`] before they are put in one.

use std::time::Duration;

use crate::advice::Advice;

/// Errors resolving a model or talking to its provider. None contains the API key.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("no model is configured for `{purpose}`")]
    NoModel { purpose: String },
    #[error("unknown model `{alias}` (models: {known})")]
    UnknownModel { alias: String, known: String },
    #[error("model `{alias}` has no provider")]
    NoProvider { alias: String },
    #[error("model `{alias}` names provider `{provider}`, which is not configured")]
    UnknownProvider { alias: String, provider: String },
    #[error("provider `{provider}` has no baseUrl")]
    NoBaseUrl { provider: String },
    #[error("provider `{provider}` needs an API key in ${env}, which is not set")]
    MissingKey { provider: String, env: String },
    #[error("{url} answered HTTP {status}{}: {body}", attempts_note(*attempts))]
    Status {
        url: String,
        status: u16,
        body: String,
        attempts: u32,
    },
    #[error(
        "{url} answered HTTP 429 and asks to wait {}s; not waiting that long",
        wait.as_secs()
    )]
    RateLimited { url: String, wait: Duration },
    #[error("{url}: no answer within {}s{}", timeout.as_secs(), attempts_note(*attempts))]
    Timeout {
        url: String,
        timeout: Duration,
        attempts: u32,
    },
    #[error("{url}: {message}{}", attempts_note(*attempts))]
    Connection {
        url: String,
        message: String,
        attempts: u32,
    },
    #[error("{url}: the answer is not a chat completion: {reason}")]
    BadResponse { url: String, reason: String },
    #[error("{url}: the answer is not a list of embeddings: {reason}")]
    BadEmbeddings { url: String, reason: String },
}

impl Advice for LlmError {
    fn hints(&self) -> Vec<String> {
        match self {
            LlmError::NoModel { purpose, .. } => vec![format!(
                "set `defaultModel` (or `modelOverrides.{purpose}`) in config.yaml, e.g. `uwf setup --provider openai --base-url https://api.openai.com/v1 --api-key-env OPENAI_API_KEY --api-key - --model gpt-4o-mini`"
            )],
            LlmError::UnknownModel { alias, .. } => vec![format!(
                "add it under `models:` in config.yaml, or run `uwf setup --provider NAME --model {alias}`"
            )],
            LlmError::NoProvider { alias, .. } => vec![format!(
                "set `models.{alias}.provider` in config.yaml to one of `providers:`"
            )],
            LlmError::UnknownProvider { provider, .. } => vec![format!(
                "run `uwf setup --provider {provider} --base-url URL --api-key-env VAR`"
            )],
            LlmError::NoBaseUrl { provider, .. } => vec![format!(
                "run `uwf setup --provider {provider} --base-url https://…/v1`"
            )],
            LlmError::MissingKey { env, provider, .. } => vec![format!(
                "store it in {} with `uwf setup --provider {provider} --api-key-env {env} --api-key -` (reads the key from stdin), or export {env}",
                // An agent runs with $UWF_STORAGE_ROOT set to the store's root.
                crate::cas::store::default_root()
                    .map(|root| root.join(".env").display().to_string())
                    .unwrap_or_else(|_| "the storage root's .env".to_owned())
            )],
            LlmError::RateLimited { .. } => vec!["retry later, or use another model".to_owned()],
            LlmError::Timeout { .. } => {
                vec!["raise `timeout` (seconds) of the provider in config.yaml".to_owned()]
            }
            _ => Vec::new(),
        }
    }
}

fn attempts_note(attempts: u32) -> String {
    if attempts > 1 {
        format!(" (after {attempts} attempts)")
    } else {
        String::new()
    }
}
