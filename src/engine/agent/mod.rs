//! Agents (`docs/agents.md`): which agent runs a role, running it, and the kit every
//! agent uses to turn its raw output into a step.
//!
//! - [`resolve`]: `--agent` → `agentOverrides` → `defaultAgent` → `dry`.
//! - [`spawn`]: **where an agent process is spawned** — process group, timeout, parent-death
//!   signal, stderr tail.
//! - [`watchdog`]: stops an agent's process group when its step process dies.
//! - [`interrupt`]: SIGINT, SIGTERM and SIGHUP caught by a process that runs steps.
//! - [`prompt`]: the prompt an agent gets (`uwf agent prompt`).
//! - [`extract`]: raw output → structured output (frontmatter and JSON fast paths);
//!   its third layer, `extract::llm_layer`, a JSON-mode model completion.
//! - [`submit`]: writing a step's nodes (`uwf agent submit`).
//! - [`builtin`]: the offline built-in agents `dry`, `script` and `exec`.
//! - [`minimal`]: the smallest value a schema accepts (for `dry` and examples).
//! - [`llm`]: the `llm` and `react` built-in agents; [`workdir`]: `react`'s file tools,
//!   confined to the thread's working directory.
//! - [`in_process`]: built-ins run inside a process that takes many steps.
//! - [`programs`]: coding-agent programs as built-ins, `claude` (Claude Code) and `codex`.
//!
//! Agents that drive steps themselves (a person answering, a child workflow) are part of the
//! step cycle, [`crate::engine::cycle`].
pub(crate) mod builtin;
pub(crate) mod extract;
pub(crate) mod in_process;
pub(crate) mod interrupt;
pub(crate) mod knowledge_tool;
pub(crate) mod llm;
pub(crate) mod minimal;
pub(crate) mod programs;
pub(crate) mod prompt;
pub(crate) mod question;
pub(crate) mod resolve;
pub(crate) mod spawn;
pub(crate) mod submit;
pub(crate) mod watchdog;
pub(crate) mod workdir;
