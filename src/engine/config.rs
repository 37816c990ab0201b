//! `config.yaml`: agents, defaults and overrides (SPEC §6.4).
//!
//! Every field is optional. With no file at all uwf works offline: the built-in agents are
//! predefined and `defaultAgent` is `dry`. Entries under `agents` add to or replace the
//! built-ins. LLM providers and models are parsed here so a config written for them is accepted;
//! they are used by the LLM agents.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The default agent timeout when the config gives none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// Errors reading the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not valid: {reason}\nhint: every field is optional; see `uwf skill cli` for the shape", path.display())]
    Invalid { path: PathBuf, reason: String },
    #[error(
        "unknown agent `{name}` (known: {known})\nhint: define it under `agents:` in config.yaml, or pass a command with --agent"
    )]
    UnknownAgent { name: String, known: String },
    #[error("agent command `{0}` is empty or cannot be split into words")]
    BadCommand(String),
}

/// An LLM provider.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Provider {
    #[serde(default)]
    pub base_url: Option<String>,
    #[serde(default)]
    pub api_key_env: Option<String>,
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

/// An agent: a command, its leading arguments, and a timeout in seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentConfig {
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub timeout: Option<u64>,
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
    #[serde(default)]
    pub model_overrides: BTreeMap<String, String>,
}

/// A resolved agent: what to run.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSpec {
    /// The agent's name (recorded in the step), e.g. `dry` or the command's first word.
    pub name: String,
    /// The program; `uwf` means this very binary.
    pub program: String,
    pub args: Vec<String>,
    pub timeout: Duration,
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
    let config: Config = serde_yaml::from_str(&text).map_err(|e| ConfigError::Invalid {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    Ok(Loaded {
        config,
        from_file: true,
    })
}

/// The built-in agents, as configured when no file says otherwise.
fn builtin_agents() -> BTreeMap<String, AgentConfig> {
    let builtin = |args: &[&str], timeout: u64| AgentConfig {
        command: "uwf".into(),
        args: args.iter().map(|s| s.to_string()).collect(),
        timeout: Some(timeout),
    };
    BTreeMap::from([
        ("dry".to_owned(), builtin(&["agent", "dry"], 60)),
        ("llm".to_owned(), builtin(&["agent", "llm"], 600)),
        ("react".to_owned(), builtin(&["agent", "react"], 1800)),
    ])
}

impl Config {
    /// All agents: built-ins overlaid with the configured ones.
    pub fn agents(&self) -> BTreeMap<String, AgentConfig> {
        let mut all = builtin_agents();
        all.extend(self.agents.clone());
        all
    }

    /// The agent for a role: `override_cmd` (a configured name or a command line) →
    /// `agentOverrides[workflow][role]` → `defaultAgent` → `dry`.
    pub fn resolve_agent(
        &self,
        override_cmd: Option<&str>,
        workflow: &str,
        role: &str,
    ) -> Result<AgentSpec, ConfigError> {
        let agents = self.agents();
        if let Some(cmd) = override_cmd {
            let words =
                shell_words::split(cmd).map_err(|_| ConfigError::BadCommand(cmd.to_owned()))?;
            let Some((first, rest)) = words.split_first() else {
                return Err(ConfigError::BadCommand(cmd.to_owned()));
            };
            if let Some(agent) = agents.get(first) {
                let mut spec = spec(first, agent);
                spec.args.extend(rest.iter().cloned());
                return Ok(spec);
            }
            return Ok(AgentSpec {
                name: agent_name(&words),
                program: first.clone(),
                args: rest.to_vec(),
                timeout: DEFAULT_TIMEOUT,
            });
        }
        let name = self
            .agent_overrides
            .get(workflow)
            .and_then(|roles| roles.get(role))
            .or(self.default_agent.as_ref())
            .map(String::as_str)
            .unwrap_or("dry");
        match agents.get(name) {
            Some(agent) => Ok(spec(name, agent)),
            None => Err(ConfigError::UnknownAgent {
                name: name.to_owned(),
                known: agents.keys().cloned().collect::<Vec<_>>().join(", "),
            }),
        }
    }
}

fn spec(name: &str, agent: &AgentConfig) -> AgentSpec {
    AgentSpec {
        name: name.to_owned(),
        program: agent.command.clone(),
        args: agent.args.clone(),
        timeout: agent
            .timeout
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_TIMEOUT),
    }
}

/// A readable name for an ad-hoc command: `uwf agent script …` → `script`, else the program's
/// file name.
fn agent_name(words: &[String]) -> String {
    let program = Path::new(&words[0])
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| words[0].clone());
    if program == "uwf"
        && words.get(1).map(String::as_str) == Some("agent")
        && let Some(kind) = words.get(2)
    {
        return kind.clone();
    }
    program
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
}
