//! `uwf knowledge sync`: brings a repository's index up to date with its files. Only files
//! whose content hash changed are chunked again; term weights are computed for new chunks (for
//! all when the average chunk length moved enough to skew BM25); with an embedding model, only
//! texts without a cached vector are sent. Files and chunks land in one transaction, so an
//! interrupted sync leaves the previous index; vectors land batch by batch, so an interrupted
//! embedding run keeps what it paid for.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde::Serialize;

use super::KnowledgeError;
use super::chunk;
use super::index::{Index, NewChunk, indexed_text, text_hash};
use super::lexical::{self, Words};
use super::manifest::Manifest;
use super::vectors::{BATCH, Embeddings};

/// Term weights are recomputed for every chunk when the average chunk length moved by more than
/// this fraction since they were computed.
const REWEIGHT_DRIFT: f32 = 0.1;

/// What a sync did.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub repo: String,
    /// Files the manifest names (text files up to the size limit).
    pub files: usize,
    /// Files chunked again because they are new or changed.
    pub changed: usize,
    /// Files gone (or no longer included) whose chunks were dropped.
    pub removed: usize,
    /// Files skipped because they are not UTF-8 text.
    pub skipped: usize,
    /// Chunks in the index for this repository, and how many this sync added.
    pub chunks: usize,
    pub added_chunks: usize,
    /// Whether every chunk's term weights were recomputed.
    pub reweighted: bool,
    /// Texts sent to the embedding model, and in how many requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedded: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embed_requests: Option<usize>,
    /// Why embedding stopped early (the lexical index is complete regardless).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embed_error: Option<String>,
}

/// Where a sync is: `phase` (`chunking`, `weighting`, `embedding`), `done` of `total`.
pub struct Progress {
    pub phase: &'static str,
    pub done: usize,
    pub total: usize,
}

/// Syncs the repository at `repo` (its canonical root) into the index under `root`.
pub fn sync(
    root: &Path,
    repo: &Path,
    embeddings: Option<&Embeddings>,
    progress: &mut dyn FnMut(Progress),
) -> Result<Report, KnowledgeError> {
    let manifest = Manifest::load(repo)?;
    let files = manifest.files(repo)?;
    let mut index = Index::create(root)?;
    let key = repo.display().to_string();
    let repo_id = index.repo_id(&key)?;
    let known = index.file_hashes(repo_id)?;
    let mut report = Report {
        repo: key,
        files: files.len(),
        ..Report::default()
    };

    let scan = read_changes(repo, &files, &known, progress)?;
    report.skipped = scan.skipped;
    report.changed = scan.changed.len();
    report.removed = scan.removed.len();
    let (changed, removed) = (scan.changed, scan.removed);

    let words = Words::default();
    let total = changed.len();
    index.transaction(|w| {
        for path in &removed {
            w.remove_file(repo_id, path)?;
        }
        for (i, (path, hash, text)) in changed.iter().enumerate() {
            progress(Progress {
                phase: "chunking",
                done: i,
                total,
            });
            w.remove_file(repo_id, path)?;
            w.set_file(repo_id, path, hash)?;
            for c in chunk::chunks(path, text) {
                let indexed = indexed_text(path, c.title.as_deref(), &c.text);
                w.add_chunk(
                    repo_id,
                    &NewChunk {
                        path,
                        start: c.start,
                        end: c.end,
                        title: c.title.as_deref(),
                        text: &c.text,
                        hash: text_hash(&indexed),
                        length: lexical::length(&words, &indexed),
                    },
                )?;
                report.added_chunks += 1;
            }
        }
        Ok(())
    })?;

    // BM25 term weights, for the new chunks or (when the average length drifted) for all.
    let (average, weighted_with) = index.lengths(repo_id)?;
    report.reweighted = weighted_with <= 0.0
        || (average - weighted_with).abs() > REWEIGHT_DRIFT * weighted_with.max(1.0);
    let avgdl = if report.reweighted {
        average
    } else {
        weighted_with
    };
    let texts = index.texts(repo_id, report.reweighted)?;
    let embedder = lexical::embedder(avgdl);
    index.transaction(|w| {
        for (i, (id, text)) in texts.iter().enumerate() {
            if i % 64 == 0 {
                progress(Progress {
                    phase: "weighting",
                    done: i,
                    total: texts.len(),
                });
            }
            w.set_terms(*id, &lexical::encode(&embedder, text))?;
        }
        w.synced(repo_id, avgdl, crate::cas::store::now_ms())
    })?;
    report.chunks = index.chunk_count(repo_id)?;

    if let Some(embeddings) = embeddings {
        embed_missing(&mut index, repo_id, embeddings, &mut report, progress)?;
    }
    Ok(report)
}

/// A repository's files against the index: the changed ones with their hash and text.
struct Changes {
    changed: Vec<(String, String, String)>,
    removed: Vec<String>,
    skipped: usize,
}

/// Reads every file the manifest names and keeps those whose content hash differs from the
/// one `known` (path → hash) holds; files `known` holds that are gone are `removed`.
fn read_changes(
    repo: &Path,
    files: &[String],
    known: &HashMap<String, String>,
    progress: &mut dyn FnMut(Progress),
) -> Result<Changes, KnowledgeError> {
    let mut changes = Changes {
        changed: Vec::new(),
        removed: Vec::new(),
        skipped: 0,
    };
    let mut present = HashSet::new();
    for (i, path) in files.iter().enumerate() {
        progress(Progress {
            phase: "reading",
            done: i,
            total: files.len(),
        });
        let full = repo.join(path);
        let bytes = std::fs::read(&full).map_err(|source| KnowledgeError::Read {
            path: full.clone(),
            source,
        })?;
        let Ok(text) = String::from_utf8(bytes) else {
            changes.skipped += 1;
            continue;
        };
        present.insert(path.as_str());
        let hash = text_hash(&text);
        if known.get(path) != Some(&hash) {
            changes.changed.push((path.clone(), hash, text));
        }
    }
    changes.removed = known
        .keys()
        .filter(|p| !present.contains(p.as_str()))
        .cloned()
        .collect();
    Ok(changes)
}

/// How far an indexed repository is behind its files: (changed or new, removed) files, or
/// `None` when the repository is not indexed. Reads every file, as a sync would, and writes
/// nothing (for `uwf doctor`).
pub fn pending(root: &Path, repo: &Path) -> Result<Option<(usize, usize)>, KnowledgeError> {
    let Some(index) = Index::existing(root)? else {
        return Ok(None);
    };
    let Some(repo_id) = index.find_repo(&repo.display().to_string())? else {
        return Ok(None);
    };
    let known = index.file_hashes(repo_id)?;
    let files = Manifest::load(repo)?.files(repo)?;
    let changes = read_changes(repo, &files, &known, &mut |_| {})?;
    Ok(Some((changes.changed.len(), changes.removed.len())))
}

/// Sends the repository's texts that have no vector of the model yet, in batches, storing each
/// batch as it arrives. A failed request stops embedding and is reported, not raised: the
/// lexical index is complete and a later sync embeds the rest.
fn embed_missing(
    index: &mut Index,
    repo_id: i64,
    embeddings: &Embeddings,
    report: &mut Report,
    progress: &mut dyn FnMut(Progress),
) -> Result<(), KnowledgeError> {
    let missing = index.unembedded(repo_id, &embeddings.key)?;
    let (mut sent, mut requests) = (0, 0);
    for batch in missing.chunks(BATCH) {
        progress(Progress {
            phase: "embedding",
            done: sent,
            total: missing.len(),
        });
        let texts: Vec<&str> = batch.iter().map(|(_, t)| t.as_str()).collect();
        requests += 1;
        match embeddings.embed(&texts) {
            Ok(vectors) => {
                let rows: Vec<(String, Vec<u8>)> = batch
                    .iter()
                    .map(|(hash, _)| hash.clone())
                    .zip(vectors.iter().map(|v| super::vectors::encode(v)))
                    .collect();
                index.put_vectors(&embeddings.key, &rows)?;
                sent += batch.len();
            }
            Err(e) => {
                report.embed_error = Some(crate::advice::with_hints(&e));
                break;
            }
        }
    }
    report.embedded = Some(sent);
    report.embed_requests = Some(requests);
    Ok(())
}
