//! Agents (SPEC §5.3 steps 3–4, §6): which agent runs a role, running it, and the kit every
//! agent uses to turn its raw output into a step.
//!
//! - [`resolve`]: `--agent` → `agentOverrides` → `defaultAgent` → `dry`.
//! - [`spawn`]: **where an agent process is spawned** — process group, timeout, parent-death
//!   signal, stderr tail.
//! - [`watchdog`]: stops an agent's process group when its step process dies.
//! - [`interrupt`]: SIGINT, SIGTERM and SIGHUP caught by a process that runs steps.
//! - [`prompt`]: the prompt an agent gets (`uwf agent prompt`).
//! - [`extract`]: raw output → structured output (frontmatter and JSON fast paths).
//! - [`submit`]: writing a step's nodes (`uwf agent submit`).
//! - [`builtin`]: the offline built-in agents `dry`, `script` and `exec`.
//! - [`minimal`]: the smallest value a schema accepts (for `dry` and examples).
pub mod builtin;
pub mod extract;
pub mod human;
pub mod in_process;
pub mod interrupt;
pub mod minimal;
pub mod prompt;
pub mod resolve;
pub mod spawn;
pub mod submit;
pub mod subworkflow;
pub mod watchdog;
