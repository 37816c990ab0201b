//! Built-in agents run inside the step's own process (issue #17: a step is one process, not two).
//!
//! When the resolved agent is this very `uwf` binary's `agent dry` or `agent script --file F` —
//! named in config, or given as a command line however `uwf` is spelled on it (`uwf`, a path to the
//! same file) — the step calls the same function `uwf agent <kind>` calls, instead of spawning it.
//! The nodes written are the same, and the step verifies and publishes them the same way
//! (`docs/ARCHITECTURE.md#one-step`). Anything else, including a copy of uwf at another path or
//! arguments this module does not recognise, is spawned as a program.

use std::path::{Path, PathBuf};

use crate::cas::{Hash, Store};
use crate::engine::agent::builtin::{self, BuiltinError};
use crate::engine::agent::resolve::AgentSpec;
use crate::engine::agent::spawn::{is_own_binary, own_exe, program_path};
use crate::engine::chain::History;
use crate::engine::config::Config;
use crate::engine::workflow::Workflow;

/// A built-in agent the step can run itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InProcess {
    Dry,
    Script { file: PathBuf },
}

impl InProcess {
    /// The built-in `spec` runs, if it is one this process can run itself.
    pub(crate) fn of(spec: &AgentSpec) -> Option<InProcess> {
        if std::env::var_os("UWF_SPAWN_BUILTINS").is_some_and(|v| v == "1") {
            return None;
        }
        if !is_this_binary(&program_path(&spec.program)) {
            return None;
        }
        let args: Vec<&str> = spec.args.iter().map(String::as_str).collect();
        match args.as_slice() {
            ["agent", "dry"] => Some(InProcess::Dry),
            ["agent", "script", "--file", file] => Some(InProcess::Script {
                file: PathBuf::from(file),
            }),
            ["agent", "script", flag] => {
                flag.strip_prefix("--file=").map(|file| InProcess::Script {
                    file: PathBuf::from(file),
                })
            }
            _ => None,
        }
    }

    /// The same agent run as if in `dir` (a thread's working directory): a relative script
    /// file is taken under it.
    pub(crate) fn in_dir(self, dir: Option<&Path>) -> InProcess {
        match (self, dir) {
            (InProcess::Script { file }, Some(dir)) if file.is_relative() => InProcess::Script {
                file: dir.join(file),
            },
            (other, _) => other,
        }
    }

    /// Plays `role` of thread `thread`; returns the step hash, as `uwf agent <kind>` prints it.
    /// Plays `role` on `thread`, whose history and workflow the step has loaded.
    pub(crate) fn run(
        &self,
        store: &Store,
        config: &Config,
        (thread, role): (&str, &str),
        history: &History,
        workflow: &Workflow,
    ) -> Result<Hash, BuiltinError> {
        match self {
            InProcess::Dry => builtin::dry_at(store, thread, role, history, workflow),
            InProcess::Script { file } => {
                builtin::script_at(store, config, file, (thread, role), history, workflow)
            }
        }
    }
}

/// Whether `program` is the running executable itself (the same file, not just the same name).
fn is_this_binary(program: &Path) -> bool {
    if own_exe() == Some(program) {
        return true;
    }
    // A bare name other than `uwf` (which `program_path` already made the executable) is looked
    // up on PATH by the spawn; it is not ours to second-guess.
    program.components().count() > 1 && is_own_binary(program.as_os_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn spec(program: &str, args: &[&str]) -> AgentSpec {
        AgentSpec {
            name: "x".into(),
            program: program.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            timeout: Duration::from_secs(1),
            env: Default::default(),
        }
    }

    #[test]
    fn only_this_binarys_dry_and_script_run_in_process() {
        let exe = std::env::current_exe().unwrap();
        let exe = exe.to_str().unwrap();
        assert_eq!(
            InProcess::of(&spec("uwf", &["agent", "dry"])),
            Some(InProcess::Dry)
        );
        assert_eq!(
            InProcess::of(&spec(exe, &["agent", "dry"])),
            Some(InProcess::Dry)
        );
        assert_eq!(
            InProcess::of(&spec("uwf", &["agent", "script", "--file", "s.yaml"])),
            Some(InProcess::Script {
                file: "s.yaml".into()
            })
        );
        assert_eq!(
            InProcess::of(&spec("uwf", &["agent", "script", "--file=s.yaml"])),
            Some(InProcess::Script {
                file: "s.yaml".into()
            })
        );
        // Other kinds, other programs, other spellings: spawned.
        assert_eq!(InProcess::of(&spec("uwf", &["agent", "llm"])), None);
        assert_eq!(
            InProcess::of(&spec("uwf", &["agent", "dry", "--extra"])),
            None
        );
        assert_eq!(InProcess::of(&spec("/bin/true", &["agent", "dry"])), None);
        assert_eq!(InProcess::of(&spec("uwf-copy", &["agent", "dry"])), None);
    }
}
