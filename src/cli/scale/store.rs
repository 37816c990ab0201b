//! `uwf store …`: whole-store operations across backends (`docs/several-machines.md#reference`).
//! Today: `store copy`.

use std::io::{IsTerminal, Write};
use std::time::Instant;

use clap::Subcommand;
use serde_json::json;

use crate::cli::Out;
use crate::cli::error::CliResult;
use crate::engine::upkeep::store_copy::{self, Endpoint, Progress};

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub(crate) enum StoreCommand {
    /// Copy a whole store (nodes, registry, threads, history) into an empty one, verifying
    /// every hash
    #[command(
        after_help = "FROM and TO are each a storage root (a directory, or file:///ABSOLUTE/PATH) or a \
postgres://USER@HOST:PORT/DB URL (password in the URL or in PGPASSWORD, e.g. in <root>/.env; \
it is never printed).\n\n\
Every node is copied with its timestamp and re-hashed on both sides; then the registry (every \
version and its saved source), the active threads at their heads and the archived threads with \
their status and completion time. The destination may already hold nodes, but no thread and no \
workflow; a directory is created if missing. Config, .env, run files and caches stay behind.\n\n\
Prints one JSON line: {\"from\", \"to\", \"nodes\", \"newNodes\", \"threads\", \"archived\", \
\"workflows\", \"versions\", \"ms\"}. Exit status 1 on any failure.\n\n\
Examples:\n  uwf store copy ~/.uwf postgres://uwf@db/uwf        # a directory store into PostgreSQL\n  \
uwf store copy postgres://uwf@db/uwf ~/uwf-backup   # and back"
    )]
    Copy {
        /// The store to copy from: a directory (or file:// URL) or a postgres:// URL
        from: String,
        /// The store to copy into (empty of threads and workflows): a directory (or file://
        /// URL) or a postgres:// URL
        to: String,
    },
}

pub(crate) fn run(cmd: StoreCommand, out: &mut Out) -> CliResult {
    match cmd {
        StoreCommand::Copy { from, to } => copy(&from, &to, out),
    }
}

fn copy(from: &str, to: &str, out: &mut Out) -> CliResult {
    let started = Instant::now();
    let from = Endpoint::parse(from)?;
    let to = Endpoint::parse(to)?;
    let mut show = progress_display();
    let result = store_copy::copy(&from, &to, &mut show);
    show(Progress {
        phase: "",
        done: 0,
        total: 0,
    });
    let report = result?;
    if out.quiet() {
        out.line(&to)?;
        return Ok(());
    }
    out.line(json!({
        "from": from.to_string(),
        "to": to.to_string(),
        "nodes": report.nodes,
        "newNodes": report.new_nodes,
        "threads": report.threads,
        "archived": report.archived,
        "workflows": report.workflows,
        "versions": report.versions,
        "ms": started.elapsed().as_millis() as u64,
    }))?;
    Ok(())
}

/// A one-line progress display on stderr when it is a terminal (nothing otherwise); an empty
/// phase clears the line.
fn progress_display() -> impl FnMut(Progress) {
    let terminal = std::io::stderr().is_terminal();
    let mut shown = false;
    move |p: Progress| {
        if !terminal {
            return;
        }
        let mut err = std::io::stderr().lock();
        if p.phase.is_empty() {
            if shown {
                let _ = write!(err, "\r\x1b[K");
            }
            return;
        }
        let _ = write!(err, "\r\x1b[K{} {}/{}", p.phase, p.done, p.total);
        let _ = err.flush();
        shown = true;
    }
}
