//! `config.yaml`: agents, defaults and overrides (`docs/LLM.md#configyaml`).
//!
//! Every field is optional. With no file at all uwf works offline: the built-in agents are
//! predefined and `defaultAgent` is `dry`. Entries under `agents` add to or replace the
//! built-ins. Providers and models are resolved by [`crate::engine::llm::client`].
//!
//! Loading validates in two passes: the YAML shape (serde, whose errors carry the field path and
//! line, rewritten here into plain words) and then the cross-references (a model's provider, the
//! default model and agent, the overrides). Secrets never live here: a provider names the
//! environment variable that holds its key (`apiKeyEnv`), which `<root>/.env` may set.
//!
//! Beside it: [`dotenv`] (the secrets file) and [`setup`] (`uwf setup`'s writer); `uwf doctor`'s
//! checks are [`crate::engine::upkeep::doctor`]. Which agent runs a role is [`crate::engine::agent::resolve`].

pub mod budget;
pub(crate) mod dotenv;
mod duration;
pub(crate) mod setup;

pub(crate) use setup::{PRESETS, Setup, apply_setup, default_key_env};

use crate::advice::Advice;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The default nesting limit of sub-workflows.
pub(crate) const DEFAULT_MAX_DEPTH: usize = 4;

/// The default agent timeout when the config gives none.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// Errors reading the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not valid:\n{}", path.display(), problems.iter().map(|p| format!("  {p}")).collect::<Vec<_>>().join("\n"))]
    Invalid {
        path: PathBuf,
        problems: Vec<String>,
    },
    #[error("unknown agent `{name}` (known: {known})")]
    UnknownAgent { name: String, known: String },
    #[error("agent command `{0}` is empty or cannot be split into words")]
    BadCommand(String),
}

impl Advice for ConfigError {
    fn hints(&self) -> Vec<String> {
        match self {
            ConfigError::Invalid { .. } => vec![
                "every field is optional; see docs/LLM.md for the shape, or run `uwf setup`"
                    .to_owned(),
            ],
            ConfigError::UnknownAgent { .. } => vec![
                "define it under `agents:` in config.yaml, or pass a command with --agent"
                    .to_owned(),
            ],
            _ => Vec::new(),
        }
    }
}

/// An LLM provider.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Provider {
    /// The OpenAI-compatible API root, e.g. `https://api.openai.com/v1`.
    #[serde(default)]
    pub base_url: Option<String>,
    /// The environment variable holding the API key (none: send no key, e.g. a local server).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Seconds one request may take (default 120; `2m` reads as 120).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "duration::opt_seconds"
    )]
    pub timeout: Option<u64>,
    /// Retries on 429, 5xx, timeouts and connection errors (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
}

/// A model alias.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Model {
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
}

/// An agent: a command, its leading arguments, and a timeout in seconds (`900` or `15m`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentConfig {
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default, deserialize_with = "duration::opt_seconds")]
    pub timeout: Option<u64>,
    /// Added to the agent's environment; a value may name a `.env` secret as `${NAME}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub providers: BTreeMap<String, Provider>,
    #[serde(default)]
    pub models: BTreeMap<String, Model>,
    #[serde(default)]
    pub agents: BTreeMap<String, AgentConfig>,
    #[serde(default)]
    pub default_agent: Option<String>,
    /// workflow name → role → agent name.
    #[serde(default)]
    pub agent_overrides: BTreeMap<String, BTreeMap<String, String>>,
    #[serde(default)]
    pub default_model: Option<String>,
    /// purpose (`extract`, `llm`, `react`) → model alias.
    #[serde(default)]
    pub model_overrides: BTreeMap<String, String>,
    /// How deep sub-workflows may nest: a thread with this many ancestors cannot start
    /// a child. Default [`DEFAULT_MAX_DEPTH`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<usize>,
    /// Options of the `react` agent.
    #[serde(default, skip_serializing_if = "ReactConfig::is_default")]
    pub react: ReactConfig,
    /// Where nodes, threads and the registry live when not in this directory:
    /// `postgres://user@host:port/db`. `UWF_STORAGE_URL` wins over it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<String>,
    /// Seconds a step's lease on a thread lasts without renewal over PostgreSQL (default 30):
    /// how long a thread stays busy after the machine stepping it died.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_seconds: Option<u64>,
    /// The largest input a command reads from stdin or a file (a prompt, an answer, an agent's
    /// output, a payload), in bytes: `maxInput: 64MiB` or `maxInput: 67108864`. Default 16 MiB;
    /// `UWF_MAX_INPUT` wins (see [`crate::engine::input`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "deserialize_size"
    )]
    pub max_input: Option<u64>,
    /// Model name (or alias) → dollars per million tokens (`docs/LLM.md#tokens-cost-and-budgets`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prices: budget::Prices,
    /// `default` or a workflow's name → the budget its threads start with.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub budgets: budget::Budgets,
}

/// A size given as a number of bytes or with a unit (`64MiB`); zero is refused.
fn deserialize_size<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }
    let bytes = match Size::deserialize(d)? {
        Size::Bytes(n) => Some(n).filter(|&n| n > 0),
        Size::Text(text) => crate::byte_size::parse_size(&text)
            .filter(|&n| n > 0)
            .map(|n| n as u64),
    };
    bytes.map(Some).ok_or_else(|| {
        serde::de::Error::custom("maxInput: expected a size above 0, such as 64MiB or 1048576")
    })
}

/// Options of the `react` agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReactConfig {
    /// Offer the `run_command` tool (off unless set: it runs shell commands in the workdir).
    #[serde(default)]
    pub run_command: bool,
    /// Seconds one `run_command` may take (default 60; `1m` reads as 60).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "duration::opt_seconds"
    )]
    pub command_timeout: Option<u64>,
    /// Rounds before the loop gives up (default 20; `--max-rounds` wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rounds: Option<usize>,
}

impl ReactConfig {
    fn is_default(&self) -> bool {
        self == &ReactConfig::default()
    }
}

/// Loaded configuration plus whether a file existed.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    pub config: Config,
    pub from_file: bool,
}

/// Reads `<root>/config.yaml` (absent → defaults).
pub fn load(root: &Path) -> Result<Loaded, ConfigError> {
    let path = root.join("config.yaml");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Loaded::default()),
        Err(source) => return Err(ConfigError::Io { path, source }),
    };
    if text.trim().is_empty() {
        return Ok(Loaded {
            config: Config::default(),
            from_file: true,
        });
    }
    let config = parse(&text).map_err(|problems| ConfigError::Invalid {
        path: path.clone(),
        problems,
    })?;
    Ok(Loaded {
        config,
        from_file: true,
    })
}

/// Parses and validates the text of a `config.yaml`; the error lists located problems.
pub fn parse(text: &str) -> Result<Config, Vec<String>> {
    if text.trim().is_empty() {
        return Ok(Config::default());
    }
    let config: Config = serde_yaml::from_str(text).map_err(|e| vec![yaml_problem(&e)])?;
    let problems = config.problems();
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(problems)
    }
}

/// A serde_yaml error in plain words: `line 4, column 14: agents.mine.timeout: expected an
/// integer (0 or more), found a string`. Values are never echoed (a misplaced key must not leak
/// into a terminal or a log).
fn yaml_problem(e: &serde_yaml::Error) -> String {
    let message = e.to_string();
    // serde_yaml appends " at line L column C"; the location is given separately.
    let message = match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message,
    };
    let (field, what) = match message.split_once(": ") {
        Some((field, what)) if !field.contains(' ') => (Some(field), what.to_owned()),
        _ => (None, message.clone()),
    };
    let what = match what.strip_prefix("invalid type: ") {
        Some(rest) => match rest.split_once(", expected ") {
            Some((found, expected)) => {
                format!("expected {}, found {}", words(expected), found_words(found))
            }
            None => what,
        },
        None => match what.strip_prefix("invalid value: ") {
            Some(rest) => match rest.split_once(", expected ") {
                Some((found, expected)) => {
                    format!("expected {}, found {}", words(expected), found_words(found))
                }
                None => what,
            },
            None => what,
        },
    };
    let field = field.map(|f| format!("{f}: ")).unwrap_or_default();
    match e.location() {
        Some(l) => format!("line {}, column {}: {field}{what}", l.line(), l.column()),
        None => format!("{field}{what}"),
    }
}

/// serde's name for an expected type, in words.
fn words(expected: &str) -> String {
    match expected {
        "u64" | "u32" | "u16" | "u8" | "usize" => "an integer (0 or more)".into(),
        "i64" | "i32" => "an integer".into(),
        "a boolean" => "true or false".into(),
        "a map" => "a mapping (`key: value` lines)".into(),
        "a sequence" => "a list".into(),
        other if other.starts_with("struct ") => "a mapping (`key: value` lines)".into(),
        other => other.into(),
    }
}

/// serde's description of what was found, without its value.
fn found_words(found: &str) -> &'static str {
    let kind = found.split([' ', '`', '"']).next().unwrap_or("");
    match kind {
        "string" => "a string",
        "integer" if found.contains('-') => "a negative integer",
        "integer" => "an integer",
        "floating" => "a decimal number",
        "boolean" => "true or false",
        "sequence" => "a list",
        "map" => "a mapping",
        "unit" => "nothing",
        _ => "another kind of value",
    }
}

/// Whether `name` can be an environment variable name.
pub(crate) fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Config {
    /// The cross-reference problems of a parsed config, each naming its field.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let known = |names: Vec<&String>| {
            if names.is_empty() {
                "none defined".to_owned()
            } else {
                names
                    .into_iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        for (name, p) in &self.providers {
            if let Some(url) = &p.base_url
                && !(url.starts_with("http://") || url.starts_with("https://"))
            {
                problems.push(format!(
                    "providers.{name}.baseUrl: expected an http:// or https:// URL"
                ));
            }
            if let Some(var) = &p.api_key_env
                && !is_env_name(var)
            {
                // Never echo it: a key pasted here by mistake must not reach a terminal.
                problems.push(format!(
                    "providers.{name}.apiKeyEnv: expected the name of an environment variable \
                     (like OPENAI_API_KEY), not the key itself; keep the key in <root>/.env"
                ));
            }
            if p.timeout == Some(0) {
                problems.push(format!(
                    "providers.{name}.timeout: must be at least 1 second"
                ));
            }
        }
        for (name, agent) in &self.agents {
            for key in agent.env.keys().filter(|k| !is_env_name(k)) {
                problems.push(format!(
                    "agents.{name}.env.{key}: expected the name of an environment variable \
                     (letters, digits and _, not starting with a digit)"
                ));
            }
        }
        for (name, m) in &self.models {
            if let Some(provider) = &m.provider
                && !self.providers.contains_key(provider)
            {
                problems.push(format!(
                    "models.{name}.provider: unknown provider `{provider}` (providers: {})",
                    known(self.providers.keys().collect())
                ));
            }
        }
        let model_ref = |field: String, alias: &String, problems: &mut Vec<String>| {
            if !self.models.contains_key(alias) {
                problems.push(format!(
                    "{field}: unknown model `{alias}` (models: {})",
                    known(self.models.keys().collect())
                ));
            }
        };
        if let Some(alias) = &self.default_model {
            model_ref("defaultModel".into(), alias, &mut problems);
        }
        for (purpose, alias) in &self.model_overrides {
            model_ref(format!("modelOverrides.{purpose}"), alias, &mut problems);
        }
        for (name, a) in &self.agents {
            if a.command.trim().is_empty() {
                problems.push(format!("agents.{name}.command: must not be empty"));
            }
            if a.timeout == Some(0) {
                problems.push(format!("agents.{name}.timeout: must be at least 1 second"));
            }
        }
        let agents = self.agents();
        let agent_ref = |field: String, name: &String, problems: &mut Vec<String>| {
            if !agents.contains_key(name) {
                problems.push(format!(
                    "{field}: unknown agent `{name}` (agents: {})",
                    known(agents.keys().collect())
                ));
            }
        };
        if let Some(name) = &self.default_agent {
            agent_ref("defaultAgent".into(), name, &mut problems);
        }
        for (workflow, roles) in &self.agent_overrides {
            for (role, name) in roles {
                agent_ref(
                    format!("agentOverrides.{workflow}.{role}"),
                    name,
                    &mut problems,
                );
            }
        }
        if self.max_depth == Some(0) {
            problems.push("maxDepth: must be at least 1".into());
        }
        if self.react.max_rounds == Some(0) {
            problems.push("react.maxRounds: must be at least 1".into());
        }
        problems
    }

    /// The model alias for a purpose: `modelOverrides.<purpose>` → `defaultModel`.
    pub(crate) fn model_for(&self, purpose: &str) -> Option<&str> {
        self.model_overrides
            .get(purpose)
            .or(self.default_model.as_ref())
            .map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_config_means_dry() {
        let spec = Config::default().resolve_agent(None, "w", "r").unwrap();
        assert_eq!(spec.name, "dry");
        assert_eq!(
            (spec.program.as_str(), spec.args.clone()),
            ("uwf", vec!["agent".to_owned(), "dry".to_owned()])
        );
    }

    #[test]
    fn resolution_order_override_then_per_role_then_default() {
        let config: Config = serde_yaml::from_str(
            "agents:\n  mine: { command: my-agent, args: [--fast], timeout: 5 }\n  other: { command: other }\n\
             defaultAgent: other\nagentOverrides:\n  wf: { coder: mine }\n",
        )
        .unwrap();
        assert_eq!(
            config.resolve_agent(None, "wf", "coder").unwrap().name,
            "mine"
        );
        let other = config.resolve_agent(None, "wf", "planner").unwrap();
        assert_eq!(
            (other.name.as_str(), other.timeout),
            ("other", DEFAULT_TIMEOUT)
        );
        let adhoc = config
            .resolve_agent(Some("uwf agent script --file 's s.yaml'"), "wf", "coder")
            .unwrap();
        assert_eq!(adhoc.name, "script");
        assert_eq!(adhoc.args, ["agent", "script", "--file", "s s.yaml"]);
        let named = config
            .resolve_agent(Some("mine --extra"), "wf", "x")
            .unwrap();
        assert_eq!(
            (named.program.as_str(), named.args.clone()),
            ("my-agent", vec!["--fast".to_owned(), "--extra".to_owned()])
        );
        assert_eq!(named.timeout, Duration::from_secs(5));
    }

    #[test]
    fn unknown_agent_and_bad_fields_are_errors() {
        let config: Config = serde_yaml::from_str("defaultAgent: ghost\n").unwrap();
        let err = config
            .resolve_agent(None, "w", "r")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unknown agent `ghost`") && err.contains("dry"),
            "{err}"
        );
        assert!(serde_yaml::from_str::<Config>("agentz: {}\n").is_err());
        assert!(
            Config::default()
                .resolve_agent(Some("  "), "w", "r")
                .is_err()
        );
        assert!(
            Config::default()
                .resolve_agent(Some("'unclosed"), "w", "r")
                .is_err()
        );
    }

    fn problems_of(text: &str) -> Vec<String> {
        parse(text).expect_err("should be invalid")
    }

    #[test]
    fn shape_errors_are_located_and_in_words() {
        let check = |text: &str, want: &str| {
            let problems = problems_of(text);
            assert_eq!(problems, [want], "for {text:?}");
        };
        check(
            "agents:\n  mine:\n    command: x\n    timeout: soon\n",
            "line 4, column 14: agents.mine.timeout: expected seconds or a duration (e.g. 900, 15m, 1h 30m), found a string",
        );
        check(
            "agents:\n  mine: { command: x, timeout: -1 }\n",
            "line 2, column 32: agents.mine.timeout: expected seconds or a duration (e.g. 900, 15m, 1h 30m), found a negative integer",
        );
        check(
            "agents:\n  mine:\n    args: [a]\n",
            "line 3, column 5: agents.mine: missing field `command`",
        );
        check(
            "providers: [openai]\n",
            "line 1, column 12: providers: expected a mapping (`key: value` lines), found a list",
        );
        check(
            "react: { runCommand: yes }\n",
            "line 1, column 22: react.runCommand: expected true or false, found a string",
        );
        let unknown = problems_of("agentz: {}\n");
        assert!(
            unknown[0].starts_with("line 1, column 1: unknown field `agentz`, expected one of"),
            "{unknown:?}"
        );
        let syntax = problems_of("agents: [\n");
        assert!(syntax[0].starts_with("line "), "{syntax:?}");
    }

    #[test]
    fn cross_references_are_checked_without_echoing_secrets() {
        let problems = problems_of(
            "providers:\n  openai: { baseUrl: api.openai.com, apiKeyEnv: sk-secret-123 }\n\
             models:\n  fast: { provider: openia, name: gpt-4o-mini }\n\
             defaultModel: slow\nmodelOverrides: { extract: fast2 }\n\
             defaultAgent: ghost\nagentOverrides: { wf: { coder: nobody } }\n\
             agents:\n  zero: { command: x, timeout: 0 }\n",
        );
        let text = problems.join("\n");
        for want in [
            "providers.openai.baseUrl: expected an http:// or https:// URL",
            "providers.openai.apiKeyEnv: expected the name of an environment variable",
            "models.fast.provider: unknown provider `openia` (providers: openai)",
            "defaultModel: unknown model `slow` (models: fast)",
            "modelOverrides.extract: unknown model `fast2`",
            "agents.zero.timeout: must be at least 1 second",
            "defaultAgent: unknown agent `ghost` (agents: claude, codex, dry, human, llm, opencode, react, zero)",
            "agentOverrides.wf.coder: unknown agent `nobody`",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        assert!(!text.contains("sk-secret-123"), "{text}");
    }

    #[test]
    fn a_full_config_parses_and_picks_models_by_purpose() {
        let config = parse(
            "providers:\n  openai: { baseUrl: 'https://api.openai.com/v1', apiKeyEnv: OPENAI_API_KEY, timeout: 60, retries: 2 }\n\
             models:\n  fast: { provider: openai, name: gpt-4o-mini }\n  big: { provider: openai, name: gpt-4o }\n\
             defaultModel: big\nmodelOverrides: { extract: fast }\ndefaultAgent: llm\n\
             react: { runCommand: true, commandTimeout: 10, maxRounds: 5 }\n",
        )
        .unwrap();
        assert_eq!(config.model_for("extract"), Some("fast"));
        assert_eq!(config.model_for("llm"), Some("big"));
        assert!(config.react.run_command);
        assert_eq!(Config::default().model_for("extract"), None);
        assert_eq!(parse("  \n").unwrap(), Config::default());
    }

    #[test]
    fn setup_merges_into_the_file_and_uses_presets() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(
            root.join("config.yaml"),
            "agents:\n  mine: { command: my-agent, timeout: 5 }\n",
        )
        .unwrap();
        let (config, key_env) = apply_setup(
            root,
            &Setup {
                provider: Some("openai".into()),
                model: Some("gpt-4o-mini".into()),
                agent: Some("llm".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(key_env.as_deref(), Some("OPENAI_API_KEY"));
        assert_eq!(
            config.providers["openai"].base_url.as_deref(),
            Some("https://api.openai.com/v1")
        );
        assert_eq!(
            config.models["gpt-4o-mini"].provider.as_deref(),
            Some("openai")
        );
        assert_eq!(config.default_model.as_deref(), Some("gpt-4o-mini"));
        assert_eq!(config.default_agent.as_deref(), Some("llm"));
        assert_eq!(config.agents["mine"].timeout, Some(5));
        assert_eq!(load(root).unwrap().config, config);

        // A second model for the only provider needs no --provider; custom providers need a URL.
        let (config, _) = apply_setup(
            root,
            &Setup {
                model: Some("gpt-4o".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(config.models.len(), 2);
        assert_eq!(config.default_model.as_deref(), Some("gpt-4o"));
        let err = apply_setup(
            root,
            &Setup {
                provider: Some("my-lab".into()),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains("needs --base-url"), "{err}");
        let (config, key_env) = apply_setup(
            root,
            &Setup {
                provider: Some("my-lab".into()),
                base_url: Some("http://127.0.0.1:8000/v1".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(key_env.as_deref(), Some("MY_LAB_API_KEY"));
        assert_eq!(config.providers.len(), 2);
        let err = apply_setup(
            root,
            &Setup {
                model: Some("x".into()),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("--model needs --provider"),
            "{err}"
        );
        let err = apply_setup(
            root,
            &Setup {
                agent: Some("ghost".into()),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("defaultAgent: unknown agent `ghost`"),
            "{err}"
        );
        assert_eq!(
            load(root).unwrap().config,
            config,
            "a refused setup writes nothing"
        );
    }
}
