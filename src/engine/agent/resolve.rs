//! Which agent runs a role (`docs/agents.md#choosing-agents`): an `--agent` override (a configured
//! name or a command line) → `agentOverrides[workflow][role]` → `defaultAgent` → `dry`, over the
//! built-in agents overlaid with the configured ones.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::engine::config::{AgentConfig, Config, ConfigError, DEFAULT_TIMEOUT};
use crate::engine::thread::context::Binding;
use crate::engine::workflow::Workflow;

/// A resolved agent: what to run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AgentSpec {
    /// The agent's name (recorded in the step), e.g. `dry` or the command's first word.
    pub name: String,
    /// The program; `uwf` means this very binary.
    pub program: String,
    pub args: Vec<String>,
    pub timeout: Duration,
    /// Added to the agent's environment, `${NAME}` unexpanded ([`expand_env`]).
    pub env: BTreeMap<String, String>,
}

impl From<&Binding> for AgentSpec {
    fn from(b: &Binding) -> AgentSpec {
        AgentSpec {
            name: b.name.clone(),
            program: b.command.clone(),
            args: b.args.clone(),
            timeout: Duration::from_secs(b.timeout),
            env: b.env.clone(),
        }
    }
}

impl From<&AgentSpec> for Binding {
    fn from(s: &AgentSpec) -> Binding {
        Binding {
            name: s.name.clone(),
            command: s.program.clone(),
            args: s.args.clone(),
            timeout: s.timeout.as_secs(),
            env: s.env.clone(),
        }
    }
}

impl AgentSpec {
    /// Whether this is the `human` agent kind (`uwf agent human`), which no process plays: the
    /// step records a question and a person answers it.
    pub(crate) fn is_human(&self) -> bool {
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
        env: BTreeMap::new(),
    };
    BTreeMap::from([
        ("claude".to_owned(), builtin(&["agent", "claude"], 1800)),
        ("codex".to_owned(), builtin(&["agent", "codex"], 1800)),
        ("dry".to_owned(), builtin(&["agent", "dry"], 60)),
        // Never run as a process: a step whose agent is `human` records a question.
        ("human".to_owned(), builtin(&["agent", "human"], 60)),
        ("llm".to_owned(), builtin(&["agent", "llm"], 600)),
        ("opencode".to_owned(), builtin(&["agent", "opencode"], 1800)),
        ("react".to_owned(), builtin(&["agent", "react"], 1800)),
    ])
}

impl Config {
    /// All agents: built-ins overlaid with the configured ones.
    pub(crate) fn agents(&self) -> BTreeMap<String, AgentConfig> {
        let mut all = builtin_agents();
        all.extend(self.agents.clone());
        all
    }

    /// The agent for a role: `override_cmd` (a configured name or a command line) →
    /// `agentOverrides[workflow][role]` → `defaultAgent` → `dry`.
    pub(crate) fn resolve_agent(
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
                env: BTreeMap::new(),
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

impl Config {
    /// The agent of every role of `workflow` as this configuration binds them now (what a new
    /// thread records). A role whose agent does not resolve is left out: its step resolves it
    /// then, and says what is wrong.
    pub(crate) fn bindings(&self, workflow: &Workflow) -> BTreeMap<String, Binding> {
        workflow
            .roles
            .keys()
            .filter_map(|role| {
                let spec = self.resolve_agent(None, &workflow.name, role).ok()?;
                Some((role.clone(), Binding::from(&spec)))
            })
            .collect()
    }

    /// The agent for a role of a thread: `override_cmd` (`--agent`), else the thread's
    /// binding for the role, else what the configuration names now.
    pub(crate) fn resolve_bound(
        &self,
        override_cmd: Option<&str>,
        bound: Option<&Binding>,
        workflow: &str,
        role: &str,
    ) -> Result<AgentSpec, ConfigError> {
        match (override_cmd, bound) {
            (None, Some(binding)) => Ok(AgentSpec::from(binding)),
            _ => self.resolve_agent(override_cmd, workflow, role),
        }
    }
}

/// The first `${NAME}` of `value` that names no variable of this process's environment
/// (which holds the root's `.env`), or the value with every `${NAME}` replaced.
pub(crate) fn expand(
    value: &str,
    mut lookup: impl FnMut(&str) -> Option<String>,
) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(at) = rest.find("${") {
        let Some(len) = rest[at + 2..].find('}') else {
            break;
        };
        let name = &rest[at + 2..at + 2 + len];
        out.push_str(&rest[..at]);
        out.push_str(&lookup(name).ok_or_else(|| name.to_owned())?);
        rest = &rest[at + 3 + len..];
    }
    out.push_str(rest);
    Ok(out)
}

/// An agent's `env` with its secrets filled in from this process's environment; `Err` names
/// the first secret that is not set.
pub(crate) fn expand_env(env: &BTreeMap<String, String>) -> Result<Vec<(String, String)>, String> {
    env.iter()
        .map(|(key, value)| Ok((key.clone(), expand(value, |n| std::env::var(n).ok())?)))
        .collect()
}

/// The secrets (`${NAME}`) an agent's `env` names.
pub(crate) fn secrets_named(env: &BTreeMap<String, String>) -> Vec<String> {
    let mut names = Vec::new();
    for value in env.values() {
        let _ = expand(value, |name| {
            names.push(name.to_owned());
            Some(String::new())
        });
    }
    names.sort();
    names.dedup();
    names
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
        env: agent.env.clone(),
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
    fn secrets_are_filled_in_and_a_missing_one_is_named() {
        let lookup = |n: &str| (n == "KEY").then(|| "s3cret".to_owned());
        assert_eq!(expand("Bearer ${KEY}!", lookup).unwrap(), "Bearer s3cret!");
        assert_eq!(
            expand("plain $HOME {x}", lookup).unwrap(),
            "plain $HOME {x}"
        );
        assert_eq!(expand("${KEY}${NOPE}", lookup).unwrap_err(), "NOPE");
        assert_eq!(expand("unclosed ${KEY", lookup).unwrap(), "unclosed ${KEY");
        let env = BTreeMap::from([
            ("A".to_owned(), "${KEY}-${OTHER}".to_owned()),
            ("B".to_owned(), "${KEY}".to_owned()),
        ]);
        assert_eq!(secrets_named(&env), ["KEY", "OTHER"]);
    }
}
