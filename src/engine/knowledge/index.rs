//! The knowledge index on this machine: one SQLite file, `<storage root>/knowledge.db`, keyed
//! by repository (its canonical path), so `query -g` can search every repository indexed here.
//! It is never committed with a repository. Tables:
//! - `repos(id, path, synced_ms, avgdl)`: one row per repository; `avgdl` is the average chunk
//!   length (in terms) that the stored term weights were computed with;
//! - `files(repo, path, hash)`: the content hash each file had when it was last chunked;
//! - `stats(repo, path, size, mtime)`: every file the manifest named at the last sync (skipped
//!   ones too) with its size and modification time, so a query can tell by a stat walk, without
//!   reading a file, whether the index is behind;
//! - `chunks(id, repo, path, start_line, end_line, title, symbols, hash, length, terms)`:
//!   `symbols` the names the chunk defines (space-separated), `hash` the chunk text's hash (the
//!   vector cache's key), `terms` its BM25 term weights;
//! - `texts(id, text)`: a chunk's text, apart, so that a query's scan of the terms reads no
//!   text;
//! - `vectors(model, hash, vector)`: embeddings by model and text hash, shared by every
//!   repository, so no text is embedded twice on this machine; stored in 8 bits per dimension
//!   (see [`super::vectors::encode`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use super::KnowledgeError;

/// The file's name under the storage root.
pub(crate) const FILE_NAME: &str = "knowledge.db";

/// The layout's version (`pragma user_version`). An index of another layout is derived data:
/// it is dropped, and the next sync makes it again.
const VERSION: i64 = 5;

const SCHEMA: &str = "
create table if not exists repos(
  id integer primary key, path text unique not null,
  synced_ms integer not null default 0, avgdl real not null default 0);
create table if not exists files(
  repo integer not null, path text not null, hash text not null, primary key(repo, path));
create table if not exists stats(
  repo integer not null, path text not null, size integer not null, mtime integer not null,
  primary key(repo, path)) without rowid;
create table if not exists chunks(
  id integer primary key, repo integer not null, path text not null,
  start_line integer not null, end_line integer not null, title text,
  symbols text not null default '',
  hash text not null, length integer not null, terms blob not null);
create index if not exists chunks_by_file on chunks(repo, path);
create table if not exists texts(id integer primary key, text text not null);
create table if not exists vectors(
  model text not null, hash text not null, vector blob not null, primary key(model, hash))
  without rowid;
";

/// Where a chunk is.
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    pub repo: String,
    pub path: String,
    pub start: usize,
    pub end: usize,
    pub title: Option<String>,
    pub symbols: String,
}

/// One repository's numbers, for `knowledge status` and `doctor`.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RepoState {
    pub path: String,
    pub files: u64,
    pub chunks: u64,
    pub synced_ms: u64,
    /// Chunks with a vector of the configured embedding model, when one is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedded: Option<u64>,
}

/// An open index.
pub(crate) struct Index {
    conn: Connection,
    path: PathBuf,
}

impl Index {
    /// Opens the index under `root`, creating it when missing.
    pub(crate) fn create(root: &Path) -> Result<Index, KnowledgeError> {
        std::fs::create_dir_all(root).map_err(|source| KnowledgeError::Read {
            path: root.to_owned(),
            source,
        })?;
        Index::open(root.join(FILE_NAME))
    }

    /// Opens the index under `root`; `None` when nothing was ever indexed there.
    pub(crate) fn existing(root: &Path) -> Result<Option<Index>, KnowledgeError> {
        let path = root.join(FILE_NAME);
        if !path.exists() {
            return Ok(None);
        }
        Index::open(path).map(Some)
    }

    fn open(path: PathBuf) -> Result<Index, KnowledgeError> {
        let conn = (|| {
            let conn = Connection::open(&path)?;
            conn.busy_timeout(Duration::from_secs(10))?;
            // 8 KiB pages hold a 1,536-dimension vector without an overflow page (a new file
            // only); reads of a scan are mapped rather than copied.
            conn.execute_batch(
                "pragma page_size = 8192; pragma journal_mode = wal; \
                 pragma synchronous = normal; pragma mmap_size = 268435456;",
            )?;
            let version: i64 = conn.query_row("pragma user_version", [], |r| r.get(0))?;
            if version != VERSION {
                conn.execute_batch(
                    "drop table if exists chunks; drop table if exists texts; \
                     drop table if exists files; drop table if exists repos; \
                     drop table if exists stats; \
                     drop table if exists vectors;",
                )?;
            }
            conn.execute_batch(SCHEMA)?;
            conn.execute_batch(&format!("pragma user_version = {VERSION}"))?;
            Ok(conn)
        })()
        .map_err(db_error(&path))?;
        Ok(Index { conn, path })
    }

    fn err(&self) -> impl Fn(rusqlite::Error) -> KnowledgeError + '_ {
        db_error(&self.path)
    }

    /// The row id of a repository, added when new.
    pub(crate) fn repo_id(&self, repo: &str) -> Result<i64, KnowledgeError> {
        self.conn
            .execute("insert or ignore into repos(path) values (?1)", [repo])
            .map_err(self.err())?;
        self.conn
            .query_row("select id from repos where path = ?1", [repo], |r| r.get(0))
            .map_err(self.err())
    }

    /// The row id of an indexed repository.
    pub(crate) fn find_repo(&self, repo: &str) -> Result<Option<i64>, KnowledgeError> {
        self.conn
            .query_row("select id from repos where path = ?1", [repo], |r| r.get(0))
            .optional()
            .map_err(self.err())
    }

    /// File path → content hash, as last indexed.
    pub(crate) fn file_hashes(&self, repo: i64) -> Result<HashMap<String, String>, KnowledgeError> {
        let mut stmt = self
            .conn
            .prepare("select path, hash from files where repo = ?1")
            .map_err(self.err())?;
        let rows = stmt
            .query_map([repo], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(self.err())?;
        rows.collect::<Result<_, _>>().map_err(self.err())
    }

    /// Runs `f` in one transaction (all of a sync's changes land together or not at all).
    pub(crate) fn transaction<T>(
        &mut self,
        f: impl FnOnce(&Writer<'_>) -> Result<T, KnowledgeError>,
    ) -> Result<T, KnowledgeError> {
        let err = db_error(&self.path);
        let tx = self.conn.transaction().map_err(&err)?;
        let value = f(&Writer {
            tx: &tx,
            path: &self.path,
        })?;
        tx.commit().map_err(&err)?;
        Ok(value)
    }

    /// The average chunk length of a repository, and the one its weights were computed with.
    pub(crate) fn lengths(&self, repo: i64) -> Result<(f32, f32), KnowledgeError> {
        self.conn
            .query_row(
                "select coalesce((select avg(length) from chunks where repo = ?1), 0), avgdl \
                 from repos where id = ?1",
                [repo],
                |r| Ok((r.get::<_, f64>(0)? as f32, r.get::<_, f64>(1)? as f32)),
            )
            .map_err(self.err())
    }

    /// How many chunks a repository has.
    pub(crate) fn chunk_count(&self, repo: i64) -> Result<usize, KnowledgeError> {
        self.conn
            .query_row("select count(*) from chunks where repo = ?1", [repo], |r| {
                r.get::<_, i64>(0)
            })
            .map(|n| n as usize)
            .map_err(self.err())
    }

    /// (id, indexed text) of a repository's chunks; only those without weights unless `all`.
    pub(crate) fn texts(&self, repo: i64, all: bool) -> Result<Vec<(u32, String)>, KnowledgeError> {
        let sql = if all {
            "select c.id, c.path, c.title, c.symbols, t.text from chunks c \
             join texts t on t.id = c.id where c.repo = ?1"
        } else {
            "select c.id, c.path, c.title, c.symbols, t.text from chunks c \
             join texts t on t.id = c.id where c.repo = ?1 and length(c.terms) = 0"
        };
        let mut stmt = self.conn.prepare(sql).map_err(self.err())?;
        let rows = stmt
            .query_map([repo], |r| {
                let (path, title, symbols, text): (String, Option<String>, String, String) =
                    (r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?);
                Ok((
                    r.get(0)?,
                    lexical_text(&path, title.as_deref(), &symbols, &text),
                ))
            })
            .map_err(self.err())?;
        rows.collect::<Result<_, _>>().map_err(self.err())
    }

    /// (hash, where, indexed text) of the chunks in `repo` without a vector of `model`, one
    /// per distinct text; `where` is `file:first-last`.
    pub(crate) fn unembedded(
        &self,
        repo: i64,
        model: &str,
    ) -> Result<Vec<(String, String, String)>, KnowledgeError> {
        let mut stmt = self
            .conn
            .prepare(
                "select c.hash, c.path, c.title, t.text, c.start_line, c.end_line from chunks c \
                 join texts t on t.id = c.id where c.repo = ?1 and not exists \
                 (select 1 from vectors v where v.model = ?2 and v.hash = c.hash) group by c.hash",
            )
            .map_err(self.err())?;
        let rows = stmt
            .query_map(params![repo, model], |r| {
                let (path, title, text): (String, Option<String>, String) =
                    (r.get(1)?, r.get(2)?, r.get(3)?);
                let (start, end): (i64, i64) = (r.get(4)?, r.get(5)?);
                Ok((
                    r.get(0)?,
                    format!("{path}:{start}-{end}"),
                    indexed_text(&path, title.as_deref(), &text),
                ))
            })
            .map_err(self.err())?;
        rows.collect::<Result<_, _>>().map_err(self.err())
    }

    /// The stored vector of `model` for a text hash (see [`super::vectors::encode`]).
    pub(crate) fn vector(
        &self,
        model: &str,
        hash: &str,
    ) -> Result<Option<Vec<u8>>, KnowledgeError> {
        self.conn
            .query_row(
                "select vector from vectors where model = ?1 and hash = ?2",
                [model, hash],
                |r| r.get::<_, Vec<u8>>(0),
            )
            .optional()
            .map_err(self.err())
    }

    /// Stores vectors of `model` by text hash.
    pub(crate) fn put_vectors(
        &mut self,
        model: &str,
        vectors: &[(String, Vec<u8>)],
    ) -> Result<(), KnowledgeError> {
        self.transaction(|w| {
            for (hash, bytes) in vectors {
                w.tx.execute(
                    "insert or replace into vectors(model, hash, vector) values (?1, ?2, ?3)",
                    params![model, hash, bytes],
                )
                .map_err(db_error(w.path))?;
            }
            Ok(())
        })
    }

    /// Every chunk in scope (one repository, or all) as its id, term weights, file path,
    /// defined names and title, to `each`.
    pub(crate) fn scan_terms(
        &self,
        repo: Option<i64>,
        mut each: impl FnMut(u32, &[u8], &str, &str, Option<&str>),
    ) -> Result<(), KnowledgeError> {
        let mut stmt = self
            .conn
            .prepare(
                "select id, terms, path, symbols, title from chunks where ?1 is null or repo = ?1",
            )
            .map_err(self.err())?;
        let mut rows = stmt.query([repo]).map_err(self.err())?;
        while let Some(row) = rows.next().map_err(self.err())? {
            let id: u32 = row.get(0).map_err(self.err())?;
            let text = |i: usize| {
                row.get_ref(i)
                    .ok()
                    .and_then(|v| v.as_str().ok())
                    .unwrap_or_default()
            };
            let terms = row
                .get_ref(1)
                .map_err(self.err())?
                .as_blob()
                .unwrap_or_default();
            let title = row.get_ref(4).ok().and_then(|v| v.as_str().ok());
            each(id, terms, text(2), text(3), title);
        }
        Ok(())
    }

    /// The repositories indexed here: (row id, path).
    pub(crate) fn repos(&self) -> Result<Vec<(i64, String)>, KnowledgeError> {
        let mut stmt = self
            .conn
            .prepare("select id, path from repos order by path")
            .map_err(self.err())?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(self.err())?;
        rows.collect::<Result<_, _>>().map_err(self.err())
    }

    /// File path → (size, modification time) as the last sync listed them.
    pub(crate) fn stats(&self, repo: i64) -> Result<HashMap<String, (u64, i64)>, KnowledgeError> {
        let mut stmt = self
            .conn
            .prepare("select path, size, mtime from stats where repo = ?1")
            .map_err(self.err())?;
        let rows = stmt
            .query_map([repo], |r| {
                Ok((r.get(0)?, (r.get::<_, i64>(1)? as u64, r.get(2)?)))
            })
            .map_err(self.err())?;
        rows.collect::<Result<_, _>>().map_err(self.err())
    }

    /// Forgets a repository: its files, chunks and texts (vectors are shared by text, and stay
    /// cached). Whether it was indexed.
    pub(crate) fn forget(&mut self, repo: &str) -> Result<bool, KnowledgeError> {
        let Some(id) = self.find_repo(repo)? else {
            return Ok(false);
        };
        self.transaction(|w| {
            for sql in [
                "delete from texts where id in (select id from chunks where repo = ?1)",
                "delete from chunks where repo = ?1",
                "delete from files where repo = ?1",
                "delete from stats where repo = ?1",
                "delete from repos where id = ?1",
            ] {
                w.tx.execute(sql, [id]).map_err(db_error(w.path))?;
            }
            Ok(true)
        })
    }

    /// Where a chunk is, and its text.
    pub(crate) fn stored(&self, id: u32) -> Result<(Stored, String), KnowledgeError> {
        self.conn
            .query_row(
                "select r.path, c.path, c.start_line, c.end_line, c.title, t.text, c.symbols \
                 from chunks c join repos r on r.id = c.repo join texts t on t.id = c.id \
                 where c.id = ?1",
                [id],
                |row| {
                    Ok((
                        Stored {
                            repo: row.get(0)?,
                            path: row.get(1)?,
                            start: row.get::<_, i64>(2)? as usize,
                            end: row.get::<_, i64>(3)? as usize,
                            title: row.get(4)?,
                            symbols: row.get(6)?,
                        },
                        row.get(5)?,
                    ))
                },
            )
            .map_err(self.err())
    }

    /// Every vector of `model` for chunks in scope: (chunk id, vector bytes) to `each`.
    pub(crate) fn scan_vectors(
        &self,
        repo: Option<i64>,
        model: &str,
        mut each: impl FnMut(u32, &[u8]),
    ) -> Result<(), KnowledgeError> {
        let mut stmt = self
            .conn
            .prepare(
                "select c.id, v.vector from chunks c join vectors v on v.hash = c.hash \
                 and v.model = ?2 where ?1 is null or c.repo = ?1",
            )
            .map_err(self.err())?;
        let mut rows = stmt.query(params![repo, model]).map_err(self.err())?;
        while let Some(row) = rows.next().map_err(self.err())? {
            let id: u32 = row.get(0).map_err(self.err())?;
            let bytes = row
                .get_ref(1)
                .map_err(self.err())?
                .as_blob()
                .unwrap_or_default();
            each(id, bytes);
        }
        Ok(())
    }

    /// Every indexed repository's numbers; `model` counts the chunks it has vectors for.
    pub(crate) fn states(&self, model: Option<&str>) -> Result<Vec<RepoState>, KnowledgeError> {
        let mut stmt = self
            .conn
            .prepare(
                "select r.path, r.synced_ms, \
                 (select count(*) from files f where f.repo = r.id), \
                 (select count(*) from chunks c where c.repo = r.id), \
                 (select count(*) from chunks c where c.repo = r.id and exists \
                   (select 1 from vectors v where v.model = ?1 and v.hash = c.hash)) \
                 from repos r order by r.path",
            )
            .map_err(self.err())?;
        let rows = stmt
            .query_map([model.unwrap_or("")], |r| {
                Ok(RepoState {
                    path: r.get(0)?,
                    synced_ms: r.get::<_, i64>(1)? as u64,
                    files: r.get::<_, i64>(2)? as u64,
                    chunks: r.get::<_, i64>(3)? as u64,
                    embedded: model.map(|_| r.get::<_, i64>(4).unwrap_or(0) as u64),
                })
            })
            .map_err(self.err())?;
        rows.collect::<Result<_, _>>().map_err(self.err())
    }
}

/// Writes inside one transaction.
pub(crate) struct Writer<'a> {
    tx: &'a rusqlite::Transaction<'a>,
    path: &'a Path,
}

/// A chunk to store: where it is, its text, its text's hash and its length in terms.
pub(crate) struct NewChunk<'a> {
    pub path: &'a str,
    pub start: usize,
    pub end: usize,
    pub title: Option<&'a str>,
    /// The names the chunk defines, space-separated.
    pub symbols: &'a str,
    pub text: &'a str,
    pub hash: String,
    pub length: usize,
}

impl Writer<'_> {
    fn err(&self) -> impl Fn(rusqlite::Error) -> KnowledgeError + '_ {
        db_error(self.path)
    }

    /// Forgets a file and its chunks.
    pub(crate) fn remove_file(&self, repo: i64, path: &str) -> Result<(), KnowledgeError> {
        self.tx
            .execute(
                "delete from texts where id in (select id from chunks where repo = ?1 and path = ?2)",
                params![repo, path],
            )
            .map_err(self.err())?;
        self.tx
            .execute(
                "delete from chunks where repo = ?1 and path = ?2",
                params![repo, path],
            )
            .map_err(self.err())?;
        self.tx
            .execute(
                "delete from files where repo = ?1 and path = ?2",
                params![repo, path],
            )
            .map_err(self.err())?;
        Ok(())
    }

    /// Records a file's hash (its chunks are added with [`Writer::add_chunk`]).
    pub(crate) fn set_file(&self, repo: i64, path: &str, hash: &str) -> Result<(), KnowledgeError> {
        self.tx
            .execute(
                "insert or replace into files(repo, path, hash) values (?1, ?2, ?3)",
                params![repo, path, hash],
            )
            .map_err(self.err())?;
        Ok(())
    }

    /// Adds a chunk, without term weights yet.
    pub(crate) fn add_chunk(&self, repo: i64, chunk: &NewChunk<'_>) -> Result<(), KnowledgeError> {
        self.tx
            .execute(
                "insert into chunks(repo, path, start_line, end_line, title, symbols, hash, \
                 length, terms) values (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, x'')",
                params![
                    repo,
                    chunk.path,
                    chunk.start as i64,
                    chunk.end as i64,
                    chunk.title,
                    chunk.symbols,
                    chunk.hash,
                    chunk.length as i64
                ],
            )
            .map_err(self.err())?;
        self.tx
            .execute(
                "insert into texts(id, text) values (?1, ?2)",
                params![self.tx.last_insert_rowid(), chunk.text],
            )
            .map_err(self.err())?;
        Ok(())
    }

    /// Stores a chunk's term weights.
    pub(crate) fn set_terms(&self, id: u32, terms: &[u8]) -> Result<(), KnowledgeError> {
        self.tx
            .execute(
                "update chunks set terms = ?2 where id = ?1",
                params![id, terms],
            )
            .map_err(self.err())?;
        Ok(())
    }

    /// Records the files a sync listed, with their sizes and modification times.
    pub(crate) fn set_stats(
        &self,
        repo: i64,
        files: &[super::manifest::Listed],
    ) -> Result<(), KnowledgeError> {
        self.tx
            .execute("delete from stats where repo = ?1", [repo])
            .map_err(self.err())?;
        let mut stmt = self
            .tx
            .prepare("insert into stats(repo, path, size, mtime) values (?1, ?2, ?3, ?4)")
            .map_err(self.err())?;
        for f in files {
            stmt.execute(params![repo, f.path, f.size as i64, f.mtime])
                .map_err(self.err())?;
        }
        Ok(())
    }

    /// Records a finished sync and the average length the weights were computed with.
    pub(crate) fn synced(&self, repo: i64, avgdl: f32, at_ms: u64) -> Result<(), KnowledgeError> {
        self.tx
            .execute(
                "update repos set avgdl = ?2, synced_ms = ?3 where id = ?1",
                params![repo, avgdl as f64, at_ms as i64],
            )
            .map_err(self.err())?;
        Ok(())
    }
}

/// What is ranked and embedded for a chunk: its file's path and heading give the words of
/// its context, then its own text. Its hash is the chunk's `hash`.
pub(crate) fn indexed_text(path: &str, title: Option<&str>, text: &str) -> String {
    match title {
        Some(title) => format!("{path}\n{title}\n{text}"),
        None => format!("{path}\n{text}"),
    }
}

/// What is ranked by words for a chunk: its indexed text, with its file's path once more and
/// the names it defines twice more (its title holds its definition too), so that a match in a
/// path, a title or a definition weighs above a mere mention in the text (a simple form of
/// BM25F's field weights).
pub(crate) fn lexical_text(path: &str, title: Option<&str>, symbols: &str, text: &str) -> String {
    let indexed = indexed_text(path, title, text);
    if symbols.is_empty() {
        format!("{path}\n{indexed}")
    } else {
        format!("{path}\n{symbols}\n{symbols}\n{indexed}")
    }
}

/// A text's hash, as the store names nodes (XXH64 in Crockford Base32).
pub(crate) fn text_hash(text: &str) -> String {
    crate::cas::Hash::of_bytes(text.as_bytes()).to_string()
}

fn db_error(path: &Path) -> impl Fn(rusqlite::Error) -> KnowledgeError + '_ {
    move |e| KnowledgeError::Database {
        path: path.to_owned(),
        reason: e.to_string(),
    }
}
