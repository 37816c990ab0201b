//! `uwf thread rebase`: a thread's history onto another version of its workflow,
//! through [`crate::engine::cycle::rebase`].

use clap::Args;

use crate::cas::Store;
use crate::cli::Out;
use crate::cli::error::CliResult;
use crate::engine::cycle::{lifecycle, rebase};

/// The text after `uwf thread rebase --help`'s options.
pub(super) const AFTER_HELP: &str = "\
A thread stuck on a broken workflow version (a condition that fails to evaluate, a role that \
cannot go on) goes on once the workflow is fixed: register the fix (`uwf workflow put FILE`), \
then rebase the thread. The new thread has a new start node and a new step node for each step, \
with the same roles, agents, outputs and details; every output is checked against its role's \
schema in the new version. The rebase is refused, naming each step that does not fit (index, \
hash, role, and why), when a step's role is not in the new version or its output no longer \
fits the role's schema; then nothing changes.

Conditions are not evaluated again: the history stays as it happened, even where the new graph \
would have routed differently, and the next step routes from the last step's role.

The old thread is archived as `rebased` (`uwf thread show` names the new one, \"rebasedOnto\"), \
and the new one names it (\"rebasedFrom\"). The new thread is not queued: `uwf thread queue \
NEW` hands it to workers. Exit status 75 while a step runs on the thread.

Examples:
  uwf workflow put solve-issue.yaml          # the fixed version
  uwf thread rebase 01JD8X…                  # onto solve-issue's current version
  uwf thread run $(uwf thread rebase 01JD8X… -q)
  uwf thread rebase 01JD8X… --workflow solve-issue@4X5K4AE2AA5F2";

#[derive(Debug, Args)]
pub(crate) struct RebaseArgs {
    /// Thread id (a unique prefix is enough)
    thread: String,
    /// The version to rebase onto: NAME (its current version), NAME@HASH, or a workflow hash
    /// (default: the current version of the thread's own workflow)
    #[arg(long, value_name = "NAME[@HASH]")]
    workflow: Option<String>,
}

/// Rebases the thread and prints the new one: `{"workflow","thread","head","version",
/// "rebasedFrom","fromVersion","steps","retyped"}`, or with `-q` its id.
pub(super) fn run(store: &Store, args: RebaseArgs, out: &mut Out) -> CliResult<()> {
    let id = lifecycle::resolve_id(store.root(), &args.thread)?;
    let rebased = rebase::rebase(store, &id, args.workflow.as_deref())?;
    if out.quiet() {
        out.line(&rebased.thread)?;
    } else {
        out.line(rebased.to_json())?;
    }
    Ok(())
}
