//! `uwf thread list`: active (and with `--all` archived) threads as a table, JSON lines or ids,
//! or as a tree of sub-workflow children under their parents (`--tree`).

use crate::cas::Store;
use crate::cli::Out;
use crate::cli::error::CliResult;
use crate::cli::output::{Mode, ago};
use crate::engine::index_files;
use crate::engine::thread::lifecycle;

pub(super) fn list(
    store: &Store,
    all: bool,
    workflow: Option<&str>,
    tree: bool,
    out: &mut Out,
) -> CliResult<()> {
    let root = store.root();
    let mut ids: Vec<String> = index_files::read_threads(root)?.into_keys().collect();
    if all {
        ids.extend(
            index_files::read_history(root)?
                .into_iter()
                .map(|a| a.thread),
        );
    }
    ids.sort();
    ids.dedup();
    let now = crate::cas::store::now_ms();
    let mut rows = Vec::new();
    for id in ids {
        let summary = match lifecycle::summary(store, &id) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("warning: thread {id}: {e}");
                continue;
            }
        };
        if workflow.is_some_and(|w| w != summary.workflow) {
            continue;
        }
        if tree {
            // Children are printed under their parent (which may be archived even when they
            // are not), so only top-level threads start a line of their own here.
            if lifecycle::family_json(root, &id).0.is_null() {
                out.line(tree_line(0, &summary))?;
                for (depth, child) in lifecycle::descendants(store, &id) {
                    out.line(tree_line(depth, &child))?;
                }
            }
            continue;
        }
        match out.mode {
            Mode::Quiet => out.line(&summary.id)?,
            Mode::Json => out.line(summary.to_json())?,
            Mode::Table => {
                let updated = store
                    .get(summary.head)
                    .map(|n| ago(n.timestamp, now))
                    .unwrap_or_default();
                rows.push(vec![
                    summary.id.clone(),
                    summary.workflow.clone(),
                    summary.status.clone(),
                    summary.steps.to_string(),
                    summary.next.clone().unwrap_or_else(|| "-".into()),
                    updated,
                ]);
            }
        }
    }
    out.table(
        &["THREAD", "WORKFLOW", "STATUS", "STEPS", "NEXT", "UPDATED"],
        &rows,
    )?;
    Ok(())
}

/// One line of `thread list --tree`.
fn tree_line(depth: usize, s: &lifecycle::Summary) -> String {
    format!(
        "{}{}  {:<16} {:<8} {} step{}",
        "  ".repeat(depth),
        s.id,
        s.workflow,
        s.status,
        s.steps,
        if s.steps == 1 { "" } else { "s" }
    )
}
