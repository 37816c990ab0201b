//! `uwf knowledge sync`: brings a repository's index up to date with its files. Only files
//! whose content hash changed are chunked again; term weights are computed for new chunks (for
//! all when the average chunk length moved enough to skew BM25); with an embedding model, only
//! texts without a cached vector are sent. Files and chunks land in one transaction, so an
//! interrupted sync leaves the previous index; vectors land batch by batch, so an interrupted
//! embedding run keeps what it paid for. A request the model refuses (an input over its limit)
//! is tried again one text at a time: the refused texts are named and skipped, the rest
//! embedded.
//!
//! Files are never dropped unnamed: those over [`MAX_FILE_BYTES`], binary ones (holding a NUL
//! byte), and minified or generated ones ([`chunk::unfit`]) are listed in the report with the
//! reason; text that is not UTF-8 is decoded lossily (and listed too).

use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde::Serialize;

use super::KnowledgeError;
use super::chunk;
use super::index::{Index, NewChunk, indexed_text, lexical_text, text_hash};
use super::lexical::{self, Words};
use super::manifest::{Listed, MAX_FILE_BYTES, Manifest};
use super::vectors::{BATCH, Embeddings};
use crate::engine::llm::client::LlmError;

/// Term weights are recomputed for every chunk when the average chunk length moved by more than
/// this fraction since they were computed.
const REWEIGHT_DRIFT: f32 = 0.1;

/// What a sync did.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Report {
    pub repo: String,
    /// Files the manifest names, indexed or skipped.
    pub files: usize,
    /// Files chunked again because they are new or changed.
    pub changed: usize,
    /// Files gone (or no longer included) whose chunks were dropped.
    pub removed: usize,
    /// Files not indexed, with why (`over 1 MiB`, `binary`, `minified`, `generated`).
    pub skipped: Vec<Skipped>,
    /// Files that are not UTF-8, indexed with their undecodable bytes replaced.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lossy: Vec<String>,
    /// `include` globs of knowledge.yaml that match no file.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unmatched: Vec<String>,
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
    /// Chunks the model refused one by one (`file:lines: why`); the others were embedded.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub embed_refused: Vec<String>,
}

/// A file left out of the index, and why.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Skipped {
    pub file: String,
    pub reason: String,
}

/// Where a sync is: `phase` (`chunking`, `weighting`, `embedding`), `done` of `total`.
pub(crate) struct Progress {
    pub phase: &'static str,
    pub done: usize,
    pub total: usize,
}

/// Syncs the repository at `repo` (its canonical root) into the index under `root`.
pub(crate) fn sync(
    root: &Path,
    repo: &Path,
    embeddings: Option<&Embeddings>,
    progress: &mut dyn FnMut(Progress),
) -> Result<Report, KnowledgeError> {
    let manifest = Manifest::load(repo)?;
    let listing = manifest.files(repo)?;
    let mut index = Index::create(root)?;
    let key = repo.display().to_string();
    let repo_id = index.repo_id(&key)?;
    let known = index.file_hashes(repo_id)?;
    let mut report = Report {
        repo: key,
        files: listing.files.len(),
        unmatched: listing.unmatched,
        ..Report::default()
    };

    let scan = read_changes(repo, &listing.files, &known, progress)?;
    report.skipped = scan.skipped;
    report.lossy = scan.lossy;
    report.changed = scan.changed.len();
    report.removed = scan.removed.len();
    let (changed, removed) = (scan.changed, scan.removed);

    let words = Words::default();
    let total = changed.len();
    index.transaction(|w| {
        w.set_stats(repo_id, &listing.files)?;
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
                let symbols = c.symbols.join(" ");
                let ranked = lexical_text(path, c.title.as_deref(), &symbols, &c.text);
                w.add_chunk(
                    repo_id,
                    &NewChunk {
                        path,
                        start: c.start,
                        end: c.end,
                        title: c.title.as_deref(),
                        symbols: &symbols,
                        text: &c.text,
                        hash: text_hash(&indexed),
                        length: lexical::length(&words, &ranked),
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
    skipped: Vec<Skipped>,
    lossy: Vec<String>,
}

/// Reads every file listed and keeps those whose content hash differs from the one `known`
/// (path → hash) holds; files `known` holds that are gone (or now skipped) are `removed`.
fn read_changes(
    repo: &Path,
    files: &[Listed],
    known: &HashMap<String, String>,
    progress: &mut dyn FnMut(Progress),
) -> Result<Changes, KnowledgeError> {
    let mut changes = Changes {
        changed: Vec::new(),
        removed: Vec::new(),
        skipped: Vec::new(),
        lossy: Vec::new(),
    };
    let mut present = HashSet::new();
    for (i, file) in files.iter().enumerate() {
        progress(Progress {
            phase: "reading",
            done: i,
            total: files.len(),
        });
        let path = &file.path;
        let mut skip = |reason: &str| {
            changes.skipped.push(Skipped {
                file: path.clone(),
                reason: reason.to_owned(),
            })
        };
        if file.size > MAX_FILE_BYTES {
            skip("over 1 MiB");
            continue;
        }
        let full = repo.join(path);
        let bytes = std::fs::read(&full).map_err(|source| KnowledgeError::Read {
            path: full.clone(),
            source,
        })?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            skip("over 1 MiB");
            continue;
        }
        if bytes.iter().take(8192).any(|&b| b == 0) {
            skip("binary");
            continue;
        }
        let text = match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => {
                changes.lossy.push(path.clone());
                String::from_utf8_lossy(e.as_bytes()).into_owned()
            }
        };
        if let Some(reason) = chunk::unfit(path, &text) {
            skip(reason);
            continue;
        }
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

/// Whether the files of an indexed repository differ, by size or modification time, from
/// what its last sync listed (a stat walk, reading no file): `None` when it is not indexed.
pub(crate) fn stale(index: &Index, repo: &Path) -> Result<Option<bool>, KnowledgeError> {
    let Some(repo_id) = index.find_repo(&repo.display().to_string())? else {
        return Ok(None);
    };
    let recorded = index.stats(repo_id)?;
    let listing = Manifest::load(repo)?.files(repo)?;
    Ok(Some(
        listing.files.len() != recorded.len()
            || listing
                .files
                .iter()
                .any(|f| recorded.get(&f.path) != Some(&(f.size, f.mtime))),
    ))
}

/// How far an indexed repository is behind its files: (changed or new, removed) files, or
/// `None` when the repository is not indexed. Reads every file, as a sync would, and writes
/// nothing (for `uwf doctor`).
pub(crate) fn pending(root: &Path, repo: &Path) -> Result<Option<(usize, usize)>, KnowledgeError> {
    let Some(index) = Index::existing(root)? else {
        return Ok(None);
    };
    let Some(repo_id) = index.find_repo(&repo.display().to_string())? else {
        return Ok(None);
    };
    let known = index.file_hashes(repo_id)?;
    let files = Manifest::load(repo)?.files(repo)?.files;
    let changes = read_changes(repo, &files, &known, &mut |_| {})?;
    Ok(Some((changes.changed.len(), changes.removed.len())))
}

/// Sends the repository's texts that have no vector of the model yet, in batches, storing each
/// batch as it arrives. A batch the model refuses is sent again one text at a time, and the
/// texts refused alone are named in the report. Any other failure stops embedding and is
/// reported, not raised: the lexical index is complete and a later sync embeds the rest.
fn embed_missing(
    index: &mut Index,
    repo_id: i64,
    embeddings: &Embeddings,
    report: &mut Report,
    progress: &mut dyn FnMut(Progress),
) -> Result<(), KnowledgeError> {
    let missing = index.unembedded(repo_id, &embeddings.key)?;
    let (mut sent, mut requests) = (0, 0);
    let mut done = 0;
    'batches: for batch in missing.chunks(BATCH) {
        progress(Progress {
            phase: "embedding",
            done,
            total: missing.len(),
        });
        done += batch.len();
        let texts: Vec<&str> = batch.iter().map(|(_, _, t)| t.as_str()).collect();
        requests += 1;
        let failure = match embeddings.embed(&texts) {
            Ok(vectors) => {
                store(index, embeddings, batch, &vectors)?;
                sent += batch.len();
                continue;
            }
            Err(e) => e,
        };
        if !refused(&failure) {
            report.embed_error = Some(crate::advice::with_hints(&failure));
            break;
        }
        for item in batch {
            if batch.len() > 1 {
                requests += 1;
                match embeddings.embed(&[item.2.as_str()]) {
                    Ok(vectors) => {
                        store(index, embeddings, std::slice::from_ref(item), &vectors)?;
                        sent += 1;
                        continue;
                    }
                    Err(e) if refused(&e) => report.embed_refused.push(refusal(item, &e)),
                    Err(e) => {
                        report.embed_error = Some(crate::advice::with_hints(&e));
                        break 'batches;
                    }
                }
            } else {
                report.embed_refused.push(refusal(item, &failure));
            }
        }
    }
    report.embedded = Some(sent);
    report.embed_requests = Some(requests);
    Ok(())
}

fn store(
    index: &mut Index,
    embeddings: &Embeddings,
    batch: &[(String, String, String)],
    vectors: &[Vec<f32>],
) -> Result<(), KnowledgeError> {
    let rows: Vec<(String, Vec<u8>)> = batch
        .iter()
        .map(|(hash, _, _)| hash.clone())
        .zip(vectors.iter().map(|v| super::vectors::encode(v)))
        .collect();
    index.put_vectors(&embeddings.key, &rows)
}

/// Whether the model refused the input itself (too long, or otherwise unacceptable), as
/// opposed to being unreachable or failing: HTTP 400, 413 or 422.
fn refused(error: &KnowledgeError) -> bool {
    matches!(
        error,
        KnowledgeError::Embeddings(LlmError::Status {
            status: 400 | 413 | 422,
            ..
        })
    )
}

fn refusal(item: &(String, String, String), error: &KnowledgeError) -> String {
    let why = match error {
        KnowledgeError::Embeddings(LlmError::Status { status, body, .. }) => {
            let body: String = body.chars().take(120).collect();
            format!("HTTP {status}: {body}")
        }
        e => e.to_string(),
    };
    format!("{}: {why}", item.1)
}
