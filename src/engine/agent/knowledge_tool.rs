//! The `react` agent's `knowledge` tool: a search of the project knowledge of the repository
//! the agent works in (its working directory), offered only when that repository is indexed on
//! this machine (`uwf knowledge sync`).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::engine::config::Config;
use crate::engine::knowledge::KnowledgeError;
use crate::engine::knowledge::search::{self, Scope};
use crate::engine::knowledge::vectors::Embeddings;
use crate::engine::llm::client;

use super::workdir::ToolError;

/// Chunks a call returns unless it asks for another number.
const DEFAULT_LIMIT: usize = 5;
/// The most chunks one call returns.
const MAX_LIMIT: usize = 20;

/// The index of one repository, for one agent run.
pub(crate) struct KnowledgeTool {
    root: PathBuf,
    repo: PathBuf,
    embeddings: Option<Embeddings>,
}

impl KnowledgeTool {
    /// The tool for `workdir`'s repository, when it is indexed under `root`. An embedding model
    /// that cannot be reached leaves the ranking lexical.
    pub(crate) fn for_workdir(
        root: &Path,
        workdir: &Path,
        config: &Config,
    ) -> Option<KnowledgeTool> {
        let repo = search::indexed_repo(root, workdir)?;
        Some(KnowledgeTool {
            root: root.to_owned(),
            repo,
            embeddings: Embeddings::from_config(config).ok().flatten(),
        })
    }

    /// The tool's definition for the model.
    pub(crate) fn definition() -> Value {
        client::function_tool(
            "knowledge",
            "Search the project's indexed documents and code by meaning and words; returns the best passages with their file and lines.",
            &json!({"type": "object", "properties": {
                "query": {"type": "string", "description": "What to look for, in words"},
                "limit": {"type": "integer", "description": "How many passages (default 5, at most 20)"}
            }, "required": ["query"]}),
        )
    }

    /// Runs one call.
    pub(crate) fn call(&self, args: &Value) -> Result<String, ToolError> {
        let query = args
            .get("query")
            .and_then(Value::as_str)
            .filter(|q| !q.trim().is_empty())
            .ok_or_else(|| ToolError::Invalid("missing string argument `query`".into()))?;
        let limit = args
            .get("limit")
            .and_then(Value::as_u64)
            .map_or(DEFAULT_LIMIT, |n| (n as usize).clamp(1, MAX_LIMIT));
        let found = search::query(
            &self.root,
            &Scope::Repo(self.repo.clone()),
            query,
            limit,
            self.embeddings.as_ref(),
        )
        .map_err(|e| ToolError::Invalid(e.to_string()))?;
        if found.hits.is_empty() {
            return Ok(format!("no passage of the project matches `{query}`"));
        }
        Ok(search::as_markdown(&found.hits))
    }
}

/// `uwf agent prompt --knowledge N`: a `## Project knowledge` section with the `n` passages of
/// `dir`'s repository that best match `task`. Fails when the repository has no knowledge.yaml
/// or was never synced, since the caller asked for the section by name.
pub(crate) fn prompt_section(
    root: &Path,
    dir: &Path,
    task: &str,
    n: usize,
    config: &Config,
) -> Result<String, KnowledgeError> {
    let repo = crate::engine::knowledge::manifest::find_repo(dir)?;
    let embeddings = Embeddings::from_config(config)?;
    let found = search::query(
        root,
        &Scope::Repo(repo),
        task,
        n.max(1),
        embeddings.as_ref(),
    )?;
    for warning in &found.warnings {
        eprintln!("warning: {warning}");
    }
    if found.hits.is_empty() {
        return Ok(String::new());
    }
    Ok(format!(
        "\n## Project knowledge\n\nPassages of this repository's documents and code that bear on the task, best first:\n\n{}",
        search::as_markdown(&found.hits)
    ))
}
