//! `uwf export`: write the mount's tree as plain files.

use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::json;

use super::Out;
use crate::cli::error::{CliResult, CommandError};
use crate::engine::cycle::lifecycle;
use crate::fs::export::{self, Selection};
use crate::fs::views::Source;

#[derive(Debug, Args)]
#[command(after_help = "\
Writes the same files `uwf mount` shows — threads/<id>/{prompt, status, transcript.md, \
steps/NNN-role/output.yaml, …} and, with --all, workflows/ — as plain files and symbolic \
links, for machines without FUSE. The bytes are those a `cat` through the mount shows now.

Examples:
  uwf export 01JD8X… ./snapshot          # threads/01JD8X…/ under ./snapshot
  uwf export --all ./snapshot             # every thread, and workflows/
  diff -r ./snapshot/threads/A/steps/001-planner ./snapshot/threads/B/steps/001-planner")]
pub(super) struct ExportArgs {
    /// THREAD DIR (a thread id or unique prefix, and the directory to write into), or DIR
    /// alone with --all
    #[arg(num_args = 0..=2, value_names = ["THREAD", "DIR"])]
    args: Vec<PathBuf>,
    /// Export every thread and workflows/
    #[arg(long)]
    all: bool,
}

pub(super) fn run(args: ExportArgs, root: &Path, out: &mut Out) -> CliResult<()> {
    let (what, dir) = match (args.all, args.args.as_slice()) {
        (true, [dir]) => (Selection::All, dir.clone()),
        (false, [thread, dir]) => {
            let id = lifecycle::resolve_id(root, &thread.to_string_lossy())?;
            (Selection::Thread(id), dir.clone())
        }
        (true, []) => {
            return Err(
                CommandError::usage("--all needs the directory to write into")
                    .hint("uwf export --all ./snapshot"),
            );
        }
        (true, _) => {
            return Err(CommandError::usage("with --all, give only the directory")
                .hint("uwf export --all ./snapshot"));
        }
        (false, _) => {
            return Err(CommandError::usage(
                "give a thread and a directory, or --all and a directory",
            )
            .hint("uwf export 01JD8X… ./snapshot, or uwf export --all ./snapshot"));
        }
    };
    let store = crate::engine::storage::open_store(root)?;
    let done = export::export(Source::new(store), &what, &dir)?;
    if out.quiet() {
        out.line(dir.display())?;
        return Ok(());
    }
    out.line(json!({
        "exported": dir,
        "dirs": done.dirs,
        "files": done.files,
        "links": done.links,
        "bytes": done.bytes,
    }))?;
    Ok(())
}
