//! `uwf export`: write the mount's tree as plain files.

use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::json;

use super::Out;
use crate::cas::Store;
use crate::cli::error::{CliResult, bail};
use crate::engine::thread::lifecycle;
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
pub struct ExportArgs {
    /// THREAD DIR (a thread id or unique prefix, and the directory to write into), or DIR
    /// alone with --all
    #[arg(required = true, num_args = 1..=2, value_names = ["THREAD", "DIR"])]
    args: Vec<PathBuf>,
    /// Export every thread and workflows/
    #[arg(long)]
    all: bool,
}

pub fn run(args: ExportArgs, root: &Path, out: &mut Out) -> CliResult<()> {
    let (what, dir) = match (args.all, args.args.as_slice()) {
        (true, [dir]) => (Selection::All, dir.clone()),
        (false, [thread, dir]) => {
            let id = lifecycle::resolve_id(root, &thread.to_string_lossy())?;
            (Selection::Thread(id), dir.clone())
        }
        (true, _) => bail!("with --all, give only the directory: uwf export --all DIR"),
        (false, _) => bail!("give a thread and a directory (uwf export THREAD DIR), or --all DIR"),
    };
    let store = Store::open(root)?;
    let done = export::export(Source::new(store), &what, &dir)?;
    out.line(json!({
        "exported": dir,
        "dirs": done.dirs,
        "files": done.files,
        "links": done.links,
        "bytes": done.bytes,
    }))?;
    Ok(())
}
