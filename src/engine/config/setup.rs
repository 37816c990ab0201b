//! `uwf setup`'s writer: merges provider, model and agent settings into `config.yaml`, keeping
//! every other entry, validates the result and replaces the file atomically.

use crate::advice::Advice;
use std::path::Path;

use crate::engine::config::{Config, ConfigError, parse};

/// What `uwf setup` changes; `None` leaves a setting as it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Setup {
    pub provider: Option<String>,
    pub base_url: Option<String>,
    pub api_key_env: Option<String>,
    /// The provider takes no key (a local server): its `apiKeyEnv` is removed, none is made up.
    pub no_key: bool,
    /// A model name at the provider; it becomes an alias of the same name and `defaultModel`.
    pub model: Option<String>,
    /// The new `defaultAgent`.
    pub agent: Option<String>,
}

/// Known providers: name → (baseUrl, apiKeyEnv), used when setup is not told otherwise.
pub(crate) const PRESETS: &[(&str, &str, Option<&str>)] = &[
    (
        "openai",
        "https://api.openai.com/v1",
        Some("OPENAI_API_KEY"),
    ),
    (
        "openrouter",
        "https://openrouter.ai/api/v1",
        Some("OPENROUTER_API_KEY"),
    ),
    ("ollama", "http://localhost:11434/v1", None),
];

/// Errors of `uwf setup`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SetupError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Write(#[from] crate::file_util::FileError),
}

impl Advice for SetupError {
    fn hints(&self) -> Vec<String> {
        match self {
            SetupError::Config(e) => e.hints(),
            _ => Vec::new(),
        }
    }
    fn is_busy(&self) -> bool {
        match self {
            SetupError::Config(e) => e.is_busy(),
            _ => false,
        }
    }
}

/// Merges `setup` into `<root>/config.yaml` (keeping every other entry; comments are not kept),
/// validates the result and writes it atomically. Returns the new config and the name of the
/// variable that holds the provider's key, if any.
pub(crate) fn apply_setup(
    root: &Path,
    setup: &Setup,
) -> Result<(Config, Option<String>), SetupError> {
    use serde_yaml::{Mapping, Value};
    let path = root.join("config.yaml");
    let old = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => return Err(ConfigError::Io { path, source }.into()),
    };
    // An invalid file is not silently replaced: its problems are reported first.
    let current = parse(&old).map_err(|problems| ConfigError::Invalid {
        path: path.clone(),
        problems,
    })?;
    let mut doc: Mapping = match serde_yaml::from_str::<Value>(&old) {
        Ok(Value::Mapping(m)) => m,
        _ => Mapping::new(),
    };
    let key = |k: &str| Value::String(k.to_owned());
    let provider = match (&setup.provider, setup.model.is_some()) {
        (Some(p), _) => Some(p.clone()),
        (None, true) if current.providers.len() == 1 => current.providers.keys().next().cloned(),
        (None, true) => {
            return Err(SetupError::Usage(
                "--model needs --provider (which provider serves it?)".into(),
            ));
        }
        (None, false) => None,
    };
    if let Some(p) = &provider {
        let preset = PRESETS.iter().find(|(name, _, _)| name == p);
        let entry = mapping_at(mapping_at(&mut doc, "providers"), p);
        let base_url = setup.base_url.clone().or_else(|| {
            (!entry.contains_key("baseUrl"))
                .then(|| preset.map(|p| p.1.to_owned()))
                .flatten()
        });
        if let Some(url) = base_url {
            entry.insert(key("baseUrl"), Value::String(url));
        }
        if !entry.contains_key("baseUrl") {
            return Err(SetupError::Usage(format!(
                "provider `{p}` needs --base-url (the OpenAI-compatible API root, e.g. https://api.openai.com/v1)"
            )));
        }
        if setup.no_key {
            entry.remove(key("apiKeyEnv"));
        }
        let key_env = setup
            .api_key_env
            .clone()
            .filter(|_| !setup.no_key)
            .or_else(|| {
                if setup.no_key {
                    return None;
                }
                if entry.contains_key("apiKeyEnv") {
                    return None;
                }
                match preset {
                    Some((_, _, env)) => env.map(str::to_owned),
                    None => Some(default_key_env(p)),
                }
            });
        if let Some(env) = key_env {
            entry.insert(key("apiKeyEnv"), Value::String(env));
        }
    }
    if let (Some(model), Some(p)) = (&setup.model, &provider) {
        let models = mapping_at(&mut doc, "models");
        let mut entry = Mapping::new();
        entry.insert(key("provider"), Value::String(p.clone()));
        entry.insert(key("name"), Value::String(model.clone()));
        models.insert(key(model), Value::Mapping(entry));
        doc.insert(key("defaultModel"), Value::String(model.clone()));
    }
    if let Some(agent) = &setup.agent {
        doc.insert(key("defaultAgent"), Value::String(agent.clone()));
    }
    let text = serde_yaml::to_string(&Value::Mapping(doc))
        .map_err(|e| SetupError::Usage(format!("cannot render the configuration: {e}")))?;
    let config = parse(&text).map_err(|problems| ConfigError::Invalid {
        path: path.clone(),
        problems,
    })?;
    crate::file_util::AtomicWrite::new(&path).replace(text.as_bytes())?;
    let key_env = provider
        .and_then(|p| config.providers.get(&p).and_then(|p| p.api_key_env.clone()))
        .or_else(|| setup.api_key_env.clone());
    Ok((config, key_env))
}

/// The mapping under `key` in `map`, made one if it is absent or not a mapping (`null`).
fn mapping_at<'a>(map: &'a mut serde_yaml::Mapping, key: &str) -> &'a mut serde_yaml::Mapping {
    use serde_yaml::{Mapping, Value};
    let value = map
        .entry(Value::String(key.to_owned()))
        .or_insert(Value::Null);
    if !value.is_mapping() {
        *value = Value::Mapping(Mapping::new());
    }
    match value {
        Value::Mapping(m) => m,
        _ => unreachable!("made a mapping just above"),
    }
}

/// `OPENAI_API_KEY` for `openai`, `MY_LAB_API_KEY` for `my-lab`.
pub(crate) fn default_key_env(provider: &str) -> String {
    let mut name: String = provider
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        name.insert(0, 'P');
    }
    format!("{name}_API_KEY")
}
