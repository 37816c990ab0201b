//! Which agent runs a role (SPEC §5.3 step 3): an `--agent` override (a configured name or a
//! command line) → `agentOverrides[workflow][role]` → `defaultAgent` → `dry`, over the built-in
//! agents overlaid with the configured ones.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::engine::config::{AgentConfig, Config, ConfigError, DEFAULT_TIMEOUT};

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

impl AgentSpec {
    /// Whether this is the `human` agent kind (`uwf agent human`), which no process plays: the
    /// step records a question and a person answers it (SPEC §10).
    pub fn is_human(&self) -> bool {
        let program = Path::new(&self.program)
            .file_name()
            .is_some_and(|n| n == "uwf");
        program && self.args.len() >= 2 && self.args[0] == "agent" && self.args[1] == "human"
    }
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
        // Never run as a process: a step whose agent is `human` records a question (SPEC §10).
        ("human".to_owned(), builtin(&["agent", "human"], 60)),
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
