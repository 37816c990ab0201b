//! Project knowledge: a per-repository index of its documents and code, searched by agents and
//! people (`uwf knowledge sync`, `uwf knowledge query`, the `react` agent's `knowledge` tool,
//! `uwf agent prompt --knowledge N`).
//!
//! A repository says what to index in its committed `knowledge.yaml` ([`manifest`]); `sync`
//! cuts changed files into chunks ([`chunk`]) and keeps them in a local index under the storage
//! root ([`index`]), with BM25 term weights ([`lexical`]) and, when `modelOverrides.embed` names
//! a model, embeddings cached by text hash ([`vectors`]). A query ranks chunks lexically and, with
//! embeddings, by cosine similarity too, fusing the two rankings ([`search`]). Everything works
//! offline with no model.

pub(crate) mod chunk;
pub(crate) mod index;
pub(crate) mod lexical;
pub(crate) mod manifest;
pub mod search;
pub(crate) mod symbols;
pub(crate) mod sync;
pub mod vectors;

use std::path::PathBuf;

use crate::advice::Advice;
use crate::engine::llm::client::LlmError;

/// What can go wrong with project knowledge.
#[derive(Debug, thiserror::Error)]
pub enum KnowledgeError {
    #[error("no {} in {} or the directories above it", manifest::FILE_NAME, dir.display())]
    NoManifest { dir: PathBuf },
    #[error("{}: {reason}", path.display())]
    BadManifest { path: PathBuf, reason: String },
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot list the files of {}: {reason}", dir.display())]
    Walk { dir: PathBuf, reason: String },
    #[error("the knowledge index {}: {reason}", path.display())]
    Database { path: PathBuf, reason: String },
    #[error("{} has not been indexed on this machine", repo.display())]
    NotIndexed { repo: PathBuf },
    #[error("the include globs of {} match no file: {}", repo.join(manifest::FILE_NAME).display(), globs.join(", "))]
    NothingIncluded { repo: PathBuf, globs: Vec<String> },
    #[error("no repository has been indexed on this machine")]
    NothingIndexed,
    #[error("{reason}")]
    BadQuery { reason: String },
    #[error("the embedding model: {0}")]
    Embeddings(#[source] LlmError),
}

impl Advice for KnowledgeError {
    fn hints(&self) -> Vec<String> {
        match self {
            KnowledgeError::NoManifest { dir } => vec![format!(
                "say what to index in {}, e.g.:\n\n{}\nthen run `uwf knowledge sync`",
                dir.join(manifest::FILE_NAME).display(),
                manifest::STARTER
                    .lines()
                    .map(|l| format!("    {l}\n"))
                    .collect::<String>()
            )],
            KnowledgeError::BadManifest { .. } => vec![format!(
                "`include` and `exclude` are lists of globs relative to the repository root, e.g.:\n\n{}",
                manifest::STARTER
                    .lines()
                    .map(|l| format!("    {l}\n"))
                    .collect::<String>()
            )],
            KnowledgeError::NotIndexed { repo } => vec![format!(
                "run `uwf knowledge sync --repo {}` first",
                shell_words::quote(&repo.display().to_string())
            )],
            KnowledgeError::NothingIncluded { .. } => vec![
                "globs are relative to the directory of knowledge.yaml: `docs/**/*.md` takes every Markdown file under docs/, `**/*.rs` every Rust file".into(),
            ],
            KnowledgeError::NothingIndexed => {
                vec!["run `uwf knowledge sync` in a repository with a knowledge.yaml".into()]
            }
            KnowledgeError::BadQuery { .. } => vec![
                "qualifiers narrow a query: `path:src/` or `path:'*.md'`, `lang:rust`, `ext:py`, `symbol:Lexer`, e.g. `uwf knowledge query 'lexer symbol:Lexer'`".into(),
            ],
            KnowledgeError::Embeddings(e) => e.hints(),
            _ => Vec::new(),
        }
    }
}
