//! `uwf knowledge sync|query|status|forget`: a repository's documents and code, indexed on this
//! machine and searched by words (BM25) and, with an embedding model configured, by meaning.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use super::Out;
use super::error::{CliResult, CommandError};
use super::terminal::output::{Mode, ago, shorten};
use crate::engine::config;
use crate::engine::knowledge::search::{self, Scope};
use crate::engine::knowledge::vectors::Embeddings;
use crate::engine::knowledge::{index::Index, manifest, sync};

#[derive(Debug, Subcommand)]
pub(super) enum KnowledgeCommand {
    /// Index the repository's changed files (those its knowledge.yaml includes)
    #[command(
        after_help = "The repository is the nearest directory at or above --repo (default: here) \
with a knowledge.yaml, e.g.:\n\n  include:\n    - \"**/*.md\"\n    - \"src/**\"\n  exclude:\n    - \"target/**\"\n\n\
Files are cut into chunks of at most 2.2 KB (Markdown at its headings, code at its definitions, \
other text at blank lines); only files whose content changed are cut again. Files over 1 MiB, \
binary, minified or generated ones are skipped and named. With `modelOverrides.embed` naming a \
model in config.yaml, chunks also get embeddings (once per text: they are cached by content \
hash); a text the model refuses is named and skipped, the others embedded.\n\n\
Examples:\n  uwf knowledge sync\n  uwf knowledge sync --repo ~/src/app"
    )]
    Sync {
        /// A directory in the repository (default: the current one)
        #[arg(long, value_name = "DIR")]
        repo: Option<PathBuf>,
    },
    /// Search the index: the best chunks for a text, with file, lines and score
    #[command(
        after_help = "Ranks by words (BM25) offline, where a file's path, a chunk's title and \
the names its code defines count more than other mentions; with an embedding model configured, \
also by meaning, fusing both rankings (words weigh more). Files changed since the last sync are \
synced first. Prints a table on a terminal, JSON lines (with each chunk's text) otherwise or \
with --json, file:lines with -q.\n\n\
Qualifiers narrow the search: path:GLOB-OR-PART, lang:NAME or ext:EXT, symbol:NAME (a name \
the chunk defines).\n\n\
Examples:\n  uwf knowledge query 'how are retries configured'\n  \
uwf knowledge query 'lexer symbol:Lexer lang:rust'\n  \
uwf knowledge query 'retry policy path:docs/'\n  \
uwf knowledge query -g 'lease renewal' --limit 5\n  uwf knowledge query --json 'mount options' | jq -r .text"
    )]
    Query(QueryArgs),
    /// List the repositories indexed on this machine
    Status,
    /// Drop a repository from this machine's index (e.g. one deleted or moved)
    #[command(
        after_help = "PATH is the repository as `uwf knowledge status` lists it, or a directory \
in it (default: the current one's repository). Its files and chunks are dropped; cached vectors \
stay (they are shared by text). The repository's own files are not touched.\n\n\
Examples:\n  uwf knowledge forget\n  uwf knowledge forget /home/me/src/old-checkout"
    )]
    Forget {
        /// The repository (default: the one the current directory is in)
        path: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
pub(super) struct QueryArgs {
    /// What to look for, in words
    text: String,
    /// A directory in the repository to search (default: the current one)
    #[arg(long, value_name = "DIR", conflicts_with = "global")]
    repo: Option<PathBuf>,
    /// Search every repository indexed on this machine
    #[arg(short = 'g', long = "global")]
    global: bool,
    /// How many chunks to print (at least 1)
    #[arg(long, default_value_t = 10, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    limit: u64,
}

pub(super) fn run(cmd: KnowledgeCommand, root: &Path, out: &mut Out) -> CliResult<()> {
    match cmd {
        KnowledgeCommand::Sync { repo } => sync_repo(root, repo, out),
        KnowledgeCommand::Query(args) => query(root, args, out),
        KnowledgeCommand::Status => status(root, out),
        KnowledgeCommand::Forget { path } => forget(root, path, out),
    }
}

fn embeddings(root: &Path) -> CliResult<Option<Embeddings>> {
    let config = config::load(root)?.config;
    Ok(Embeddings::from_config(&config)?)
}

fn repo_of(dir: Option<PathBuf>) -> CliResult<PathBuf> {
    Ok(manifest::find_repo(
        &dir.unwrap_or_else(|| PathBuf::from(".")),
    )?)
}

fn sync_repo(root: &Path, repo: Option<PathBuf>, out: &mut Out) -> CliResult<()> {
    let repo = repo_of(repo)?;
    let embeddings = embeddings(root)?;
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template("{prefix:>10} [{bar:30}] {pos}/{len} {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar
    });
    let mut phase = "";
    let report = sync::sync(root, &repo, embeddings.as_ref(), &mut |p| {
        let Some(bar) = &bar else { return };
        if p.phase != phase {
            phase = p.phase;
            bar.set_prefix(p.phase);
            bar.set_length(p.total as u64);
            bar.reset();
        }
        bar.set_position(p.done as u64);
    });
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let report = report?;
    if let Some(error) = &report.embed_error {
        eprintln!(
            "warning: embedding stopped, the index ranks by words until the next sync: {error}"
        );
    }
    for refused in &report.embed_refused {
        eprintln!("warning: the embedding model refused {refused}");
    }
    for glob in &report.unmatched {
        eprintln!("warning: the include glob `{glob}` of knowledge.yaml matches no file");
    }
    match out.mode {
        Mode::Quiet | Mode::Json => out.result(
            &report.repo,
            &serde_json::to_value(&report).unwrap_or_default(),
        )?,
        Mode::Table => {
            let mut line = format!(
                "{}: {} files ({} changed, {} removed{}), {} chunks ({} new)",
                report.repo,
                report.files,
                report.changed,
                report.removed,
                match report.skipped.len() {
                    0 => String::new(),
                    n => format!(", {n} skipped"),
                },
                report.chunks,
                report.added_chunks,
            );
            if let (Some(n), Some(requests)) = (report.embedded, report.embed_requests) {
                line.push_str(&format!(
                    "; embedded {n} texts in {requests} request{}",
                    if requests == 1 { "" } else { "s" }
                ));
            }
            out.line(line)?;
            for s in &report.skipped {
                out.line(format!("  skipped {} ({})", s.file, s.reason))?;
            }
            for file in &report.lossy {
                out.line(format!(
                    "  {file} is not UTF-8: indexed with its undecodable bytes replaced"
                ))?;
            }
        }
    }
    Ok(())
}

fn query(root: &Path, args: QueryArgs, out: &mut Out) -> CliResult<()> {
    if let Err(reason) = search::Query::parse(&args.text) {
        return Err(CommandError::usage(reason)
            .hint("uwf knowledge query 'how are retries configured'")
            .hint("qualifiers: path:src/ or path:'*.md', lang:rust, ext:py, symbol:Lexer"));
    }
    let scope = if args.global {
        Scope::All
    } else {
        Scope::Repo(repo_of(args.repo)?)
    };
    let embeddings = embeddings(root)?;
    let found = search::query(
        root,
        &scope,
        &args.text,
        usize::try_from(args.limit).unwrap_or(usize::MAX),
        embeddings.as_ref(),
    )?;
    for note in &found.notes {
        eprintln!("note: {note}");
    }
    for warning in &found.warnings {
        eprintln!("warning: {warning}");
    }
    let place = |hit: &search::Hit| {
        // Across repositories, the file's full path: two checkouts named alike stay apart.
        let file = match scope {
            Scope::All => Path::new(&hit.repo).join(&hit.file).display().to_string(),
            Scope::Repo(_) => hit.file.clone(),
        };
        format!("{file}:{}-{}", hit.start_line, hit.end_line)
    };
    match out.mode {
        Mode::Quiet => {
            for hit in &found.hits {
                out.line(place(hit))?;
            }
        }
        Mode::Json => {
            for hit in &found.hits {
                out.line(serde_json::to_value(hit).unwrap_or_default())?;
            }
        }
        Mode::Table => {
            let rows: Vec<Vec<String>> = found
                .hits
                .iter()
                .map(|hit| {
                    // Where the chunk is (its heading or definition), else its first line.
                    let first = hit.title.as_deref().unwrap_or_else(|| {
                        hit.text
                            .lines()
                            .find(|l| !l.trim().is_empty())
                            .unwrap_or("")
                    });
                    vec![
                        if found.fused {
                            format!("{:.4}", hit.score)
                        } else {
                            format!("{:.2}", hit.score)
                        },
                        place(hit),
                        shorten(first.trim(), 70),
                    ]
                })
                .collect();
            out.table(&["SCORE", "WHERE", "TEXT"], &rows)?;
        }
    }
    Ok(())
}

fn status(root: &Path, out: &mut Out) -> CliResult<()> {
    let embeddings = embeddings(root)?;
    let states = match Index::existing(root)? {
        Some(index) => index.states(embeddings.as_ref().map(|e| e.key.as_str()))?,
        None => Vec::new(),
    };
    let now = crate::cas::store::now_ms();
    match out.mode {
        Mode::Quiet => {
            for s in &states {
                out.line(&s.path)?;
            }
        }
        Mode::Json => {
            for s in &states {
                out.line(serde_json::to_value(s).unwrap_or_default())?;
            }
        }
        Mode::Table => {
            let rows: Vec<Vec<String>> = states
                .iter()
                .map(|s| {
                    vec![
                        s.path.clone(),
                        s.files.to_string(),
                        s.chunks.to_string(),
                        s.embedded.map_or("-".into(), |n| n.to_string()),
                        ago(s.synced_ms, now),
                    ]
                })
                .collect();
            out.table(
                &["REPOSITORY", "FILES", "CHUNKS", "EMBEDDED", "SYNCED"],
                &rows,
            )?;
        }
    }
    Ok(())
}

fn forget(root: &Path, path: Option<PathBuf>, out: &mut Out) -> CliResult<()> {
    let Some(mut index) = Index::existing(root)? else {
        return Err(crate::engine::knowledge::KnowledgeError::NothingIndexed.into());
    };
    let dir = path.unwrap_or_else(|| PathBuf::from("."));
    // A repository that still exists is named by any directory in it; one that is gone, by
    // the path `status` lists.
    let key = match manifest::find_repo(&dir) {
        Ok(repo) => repo.display().to_string(),
        Err(_) => std::path::absolute(&dir)
            .unwrap_or(dir.clone())
            .display()
            .to_string()
            .trim_end_matches('/')
            .to_owned(),
    };
    if !index.forget(&key)? {
        let known: Vec<String> = index.repos()?.into_iter().map(|(_, p)| p).collect();
        return Err(
            CommandError::usage(format!("{key} is not indexed on this machine")).hint(
                if known.is_empty() {
                    "no repository is indexed here".to_owned()
                } else {
                    format!("indexed here: {}", known.join(", "))
                },
            ),
        );
    }
    match out.mode {
        Mode::Json => out.line(serde_json::json!({"forgotten": key}))?,
        Mode::Quiet => out.line(&key)?,
        Mode::Table => out.line(format!(
            "forgot {key}: its chunks no longer answer queries (its files are untouched)"
        ))?,
    }
    Ok(())
}
