//! `uwf knowledge query`: ranks the chunks of one repository, or of every repository indexed on
//! this machine, for a text. The lexical ranking (BM25) always runs; with an embedding model
//! the chunks are also ranked by cosine similarity to the query's vector, and the two rankings
//! are fused by reciprocal rank (each list gives `1 / (60 + rank)`), which needs no tuning
//! between their very different score scales. Everything is an in-memory scan of the index.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::KnowledgeError;
use super::index::Index;
use super::lexical::Ranking;
use super::vectors::{self, Embeddings};

/// The `k` of reciprocal rank fusion (the usual constant).
const RRF_K: f32 = 60.0;
/// How deep each ranking is read for fusion.
const DEPTH: usize = 100;

/// Where to search.
#[derive(Debug, Clone)]
pub enum Scope {
    /// One repository (its canonical root).
    Repo(PathBuf),
    /// Every repository indexed on this machine.
    All,
}

/// A ranked chunk.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Hit {
    /// The repository's root.
    pub repo: String,
    /// The file, relative to the repository's root.
    pub file: String,
    pub start_line: usize,
    pub end_line: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The rank score: the fused score with embeddings, else the BM25 score.
    pub score: f32,
    /// The BM25 score, when the chunk matched lexically.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lexical: Option<f32>,
    /// The cosine similarity, when embeddings took part.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub semantic: Option<f32>,
    pub text: String,
}

/// A query's answer.
#[derive(Debug, Default)]
pub struct Found {
    pub hits: Vec<Hit>,
    /// Whether embeddings took part in the ranking.
    pub fused: bool,
    /// Why they did not although a model is configured (the ranking is lexical).
    pub warning: Option<String>,
}

/// The best `limit` chunks for `text` in `scope`.
pub fn query(
    root: &Path,
    scope: &Scope,
    text: &str,
    limit: usize,
    embeddings: Option<&Embeddings>,
) -> Result<Found, KnowledgeError> {
    let Some(mut index) = Index::existing(root)? else {
        return Err(not_indexed(scope));
    };
    let repo = match scope {
        Scope::Repo(path) => Some(
            index
                .find_repo(&path.display().to_string())?
                .ok_or_else(|| not_indexed(scope))?,
        ),
        Scope::All => None,
    };
    let mut ranking = Ranking::new(text);
    let mut scanned = 0usize;
    index.scan_terms(repo, |id, weights| {
        ranking.add(id, weights);
        scanned += 1;
    })?;
    if scanned == 0 && matches!(scope, Scope::All) {
        return Err(KnowledgeError::NothingIndexed);
    }
    let lexical: Vec<(u32, f32)> = ranking.matches().into_iter().take(DEPTH).collect();

    let mut found = Found::default();
    let mut semantic: Vec<(u32, f32)> = Vec::new();
    if let Some(embeddings) = embeddings {
        match embeddings.cached(&mut index, text) {
            Ok(query) => {
                let norm = vectors::norm(&query);
                index.scan_vectors(repo, &embeddings.key, |id, bytes| {
                    if let Some(similarity) = vectors::cosine(&query, norm, bytes) {
                        semantic.push((id, similarity));
                    }
                })?;
                semantic.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                semantic.truncate(DEPTH);
                found.fused = true;
            }
            Err(e) => {
                found.warning = Some(format!(
                    "ranking by words only: {}",
                    crate::advice::with_hints(&e)
                ))
            }
        }
    }

    let ranked = if found.fused {
        fuse(&lexical, &semantic)
    } else {
        lexical.clone()
    };
    let lexical_scores: HashMap<u32, f32> = lexical.into_iter().collect();
    let semantic_scores: HashMap<u32, f32> = semantic.into_iter().collect();
    for (id, score) in ranked.into_iter().take(limit) {
        let (stored, text) = index.stored(id)?;
        found.hits.push(Hit {
            text,
            repo: stored.repo,
            file: stored.path,
            start_line: stored.start,
            end_line: stored.end,
            title: stored.title,
            score,
            lexical: lexical_scores.get(&id).copied(),
            semantic: semantic_scores.get(&id).copied(),
        });
    }
    Ok(found)
}

/// The indexed repository that `dir` is in, if there is one.
pub fn indexed_repo(root: &Path, dir: &Path) -> Option<PathBuf> {
    let repo = super::manifest::find_repo(dir).ok()?;
    let index = Index::existing(root).ok()??;
    index.find_repo(&repo.display().to_string()).ok()??;
    Some(repo)
}

/// Hits as Markdown for a model: per chunk a line with its file, lines and section, then its
/// text in a fence long enough not to be closed by the text itself.
pub fn as_markdown(hits: &[Hit]) -> String {
    let mut text = String::new();
    for hit in hits {
        let longest = hit
            .text
            .lines()
            .map(|l| l.trim_start().bytes().take_while(|&b| b == b'`').count())
            .max()
            .unwrap_or(0);
        let fence = "`".repeat(longest.max(2) + 1);
        text.push_str(&format!(
            "`{}:{}-{}`{}\n\n{fence}\n{}\n{fence}\n\n",
            hit.file,
            hit.start_line,
            hit.end_line,
            hit.title
                .as_deref()
                .map(|t| format!(" ({t})"))
                .unwrap_or_default(),
            hit.text.trim_end(),
        ));
    }
    text
}

fn not_indexed(scope: &Scope) -> KnowledgeError {
    match scope {
        Scope::Repo(repo) => KnowledgeError::NotIndexed { repo: repo.clone() },
        Scope::All => KnowledgeError::NothingIndexed,
    }
}

/// Reciprocal rank fusion of rankings (best first): a chunk scores `Σ 1 / (k + rank)` over the
/// lists it is in; ties keep the lexical order.
pub fn fuse(lexical: &[(u32, f32)], semantic: &[(u32, f32)]) -> Vec<(u32, f32)> {
    let mut scores: HashMap<u32, (f32, usize)> = HashMap::new();
    for list in [lexical, semantic] {
        for (rank, (id, _)) in list.iter().enumerate() {
            let entry = scores.entry(*id).or_insert((0.0, usize::MAX));
            entry.0 += 1.0 / (RRF_K + rank as f32 + 1.0);
        }
    }
    for (rank, (id, _)) in lexical.iter().enumerate() {
        if let Some(entry) = scores.get_mut(id) {
            entry.1 = rank;
        }
    }
    let mut fused: Vec<(u32, f32, usize)> =
        scores.into_iter().map(|(id, (s, r))| (id, s, r)).collect();
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.2.cmp(&b.2)).then(a.0.cmp(&b.0)));
    fused.into_iter().map(|(id, s, _)| (id, s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fusion_rewards_agreement() {
        // 7 is second in both lists, 1 first in one only: agreement wins.
        let lexical = [(1, 9.0), (7, 8.0), (3, 1.0)];
        let semantic = [(5, 0.9), (7, 0.8), (3, 0.1)];
        let fused = fuse(&lexical, &semantic);
        assert_eq!(fused[0].0, 7);
        assert_eq!(fused.len(), 4);
        // With one list, fusion keeps its order.
        let alone: Vec<u32> = fuse(&lexical, &[]).iter().map(|f| f.0).collect();
        assert_eq!(alone, [1, 7, 3]);
    }
}
