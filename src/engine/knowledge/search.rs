//! `uwf knowledge query`: ranks the chunks of one repository, or of every repository indexed on
//! this machine, for a text. The lexical ranking (BM25, where a chunk's path, title and the
//! names it defines weigh above its other words) always runs; with an embedding model the
//! chunks are also ranked by cosine similarity to the query's vector, and the two are fused by
//! a weighted sum of their normalised scores ([`fuse`]), words weighing more, so that a weak
//! model cannot push out a confident match of words.
//!
//! A query may carry qualifiers ([`Query::parse`]): `path:` (a glob or a part of the path),
//! `lang:` or `ext:` (a language or extension), `symbol:` (a name a chunk defines).
//!
//! Before answering, the repositories in scope are checked by a stat walk against what their
//! last sync listed; changed files are synced first, or a warning says that they could not be.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::KnowledgeError;
use super::chunk::is_markdown;
use super::index::Index;
use super::lexical::{Ranking, fold_name};
use super::vectors::{self, Embeddings};

/// How much the words' ranking weighs in a fused score (the meaning's weighs the rest): the
/// lowest weight at which fusing with all-MiniLM-L6-v2 put the right file first no less often
/// than words alone on each of the four repositories the ranking was tuned on, and the best of
/// the weights swept there (docs/knowledge.md, "How well it finds"). A chunk the model ranks
/// first then overtakes the best match of words once its words score over a third of the best.
pub(crate) const WORDS_WEIGHT: f32 = 0.6;
/// A chunk defining a name the query says (`lexer` → `struct Lexer`, `load dotenv` →
/// `def load_dotenv`) has its BM25 score multiplied by this.
const DEFINES_BOOST: f32 = 1.6;
/// A chunk of a file named as the query says (`lexer` → `src/lexer.rs`), by this.
const FILE_NAME_BOOST: f32 = 1.3;
/// A chunk of a test file, by this, unless the query speaks of tests: tests mention every
/// name they test, and would otherwise crowd out the code and documents that explain it.
const TEST_FILE_FACTOR: f32 = 0.75;
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

/// A query: its words and its qualifiers.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Query {
    pub words: String,
    /// `path:` globs (with `*`, `?` or `[`) or parts of a path; a chunk's file matches any.
    pub paths: Vec<String>,
    /// File extensions from `lang:` and `ext:`, without the dot.
    pub extensions: Vec<String>,
    /// `symbol:` names; a chunk defining one (ignoring case) matches.
    pub symbols: Vec<String>,
}

impl Query {
    /// Splits `text` into words and `path:`, `lang:`, `ext:`, `symbol:` qualifiers. A
    /// `symbol:` alone searches for its name too. Errors say what is wrong, for a usage error.
    pub(crate) fn parse(text: &str) -> Result<Query, String> {
        let mut query = Query::default();
        let mut words = Vec::new();
        for token in text.split_whitespace() {
            let Some((key, value)) = token.split_once(':') else {
                words.push(token);
                continue;
            };
            let list = match key.to_ascii_lowercase().as_str() {
                "path" => &mut query.paths,
                "lang" | "ext" => &mut query.extensions,
                "symbol" | "sym" => &mut query.symbols,
                _ => {
                    words.push(token);
                    continue;
                }
            };
            if value.is_empty() {
                return Err(format!("`{token}` names nothing: write e.g. `{key}:src/`"));
            }
            if key.eq_ignore_ascii_case("lang") || key.eq_ignore_ascii_case("ext") {
                let known = super::symbols::extensions(value);
                if known.is_empty() {
                    list.push(value.trim_start_matches('.').to_ascii_lowercase());
                } else {
                    list.extend(known.iter().map(|e| e.to_string()));
                }
            } else {
                if key.eq_ignore_ascii_case("path") && value.contains(['*', '?', '[']) {
                    globset::Glob::new(value)
                        .map_err(|e| format!("`{token}` is not a glob: {e}"))?;
                }
                list.push(value.to_owned());
            }
        }
        query.words = words.join(" ");
        if query.words.trim().is_empty() {
            query.words = query.symbols.join(" ");
        }
        if query.words.trim().is_empty() {
            return Err(if text.trim().is_empty() {
                "the query is empty: say what to look for, in words".into()
            } else {
                "the query has qualifiers but no words: say what to look for too".into()
            });
        }
        Ok(query)
    }

    /// Whether a chunk (its file and defined names) passes the qualifiers.
    fn admits(&self, globs: &globset::GlobSet, path: &str, symbols: &str) -> bool {
        let path_ok = self.paths.is_empty()
            || globs.is_match(path)
            || self
                .paths
                .iter()
                .any(|p| !p.contains(['*', '?', '[']) && path.contains(p.as_str()));
        let ext_ok = self.extensions.is_empty()
            || path
                .rsplit_once('.')
                .is_some_and(|(_, e)| self.extensions.iter().any(|x| x.eq_ignore_ascii_case(e)));
        let symbol_ok = self.symbols.is_empty()
            || symbols.split(' ').any(|s| {
                self.symbols
                    .iter()
                    .any(|want| s.to_lowercase().contains(&want.to_lowercase()))
            });
        path_ok && ext_ok && symbol_ok
    }

    fn filtered(&self) -> bool {
        !(self.paths.is_empty() && self.extensions.is_empty() && self.symbols.is_empty())
    }

    fn globs(&self) -> globset::GlobSet {
        let mut builder = globset::GlobSetBuilder::new();
        for p in self.paths.iter().filter(|p| p.contains(['*', '?', '['])) {
            if let Ok(glob) = globset::Glob::new(p) {
                builder.add(glob);
            }
        }
        builder
            .build()
            .unwrap_or_else(|_| globset::GlobSet::empty())
    }
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
    /// The names the chunk defines.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub symbols: Vec<String>,
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
    /// What the answer lacks: embeddings that did not take part although a model is
    /// configured, or only in part; changed files that could not be synced first.
    pub warnings: Vec<String>,
    /// What was done first (changed files synced).
    pub notes: Vec<String>,
}

/// The best `limit` chunks for `text` in `scope`.
pub fn query(
    root: &Path,
    scope: &Scope,
    text: &str,
    limit: usize,
    embeddings: Option<&Embeddings>,
) -> Result<Found, KnowledgeError> {
    let parsed = Query::parse(text).map_err(|reason| KnowledgeError::BadQuery { reason })?;
    let mut found = Found::default();
    refresh(root, scope, embeddings, &mut found)?;
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
    let mut ranking = Ranking::new(&parsed.words);
    let mut scanned = 0usize;
    let mut admitted: HashSet<u32> = HashSet::new();
    let globs = parsed.globs();
    let filtered = parsed.filtered();
    let names = named(&parsed.words);
    let about_tests = parsed
        .words
        .split(|c: char| !c.is_alphanumeric())
        .any(|w| w.to_lowercase().starts_with("test") || w.eq_ignore_ascii_case("spec"));
    let mut boosts: HashMap<u32, f32> = HashMap::new();
    index.scan_terms(repo, |id, weights, path, symbols, title| {
        scanned += 1;
        if filtered {
            if !parsed.admits(&globs, path, symbols) {
                return;
            }
            admitted.insert(id);
        }
        let mut boost = boost(&names, path, symbols, title);
        if !about_tests && is_test(path) {
            boost *= TEST_FILE_FACTOR;
        }
        if boost != 1.0 {
            boosts.insert(id, boost);
        }
        ranking.add(id, weights);
    })?;
    if scanned == 0 && matches!(scope, Scope::All) {
        return Err(KnowledgeError::NothingIndexed);
    }
    let in_scope = if filtered { admitted.len() } else { scanned };
    let mut lexical: Vec<(u32, f32)> = ranking.matches();
    for (id, score) in &mut lexical {
        *score *= boosts.get(id).copied().unwrap_or(1.0);
    }
    lexical.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    lexical.truncate(DEPTH);

    let mut semantic: Vec<(u32, f32)> = Vec::new();
    if let Some(embeddings) = embeddings {
        match embeddings.cached(&mut index, &parsed.words) {
            Ok(query) => {
                let norm = vectors::norm(&query);
                let mut with_vectors = 0usize;
                index.scan_vectors(repo, &embeddings.key, |id, bytes| {
                    if filtered && !admitted.contains(&id) {
                        return;
                    }
                    with_vectors += 1;
                    if let Some(similarity) = vectors::cosine(&query, norm, bytes) {
                        semantic.push((id, similarity));
                    }
                })?;
                semantic.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                semantic.truncate(DEPTH);
                found.fused = !semantic.is_empty();
                if with_vectors == 0 && in_scope > 0 {
                    found.warnings.push(format!(
                        "ranking by words only: no chunk here has a vector of {}; run `uwf knowledge sync`",
                        embeddings.key
                    ));
                } else if with_vectors < in_scope {
                    found.warnings.push(format!(
                        "{} of {in_scope} chunks have no vector of {} and are ranked by words only;                          `uwf knowledge sync` embeds them (or says why it cannot)",
                        in_scope - with_vectors,
                        embeddings.key
                    ));
                }
            }
            Err(e) => found.warnings.push(format!(
                "ranking by words only: {}",
                crate::advice::with_hints(&e)
            )),
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
            symbols: stored
                .symbols
                .split_whitespace()
                .map(str::to_owned)
                .collect(),
            score,
            lexical: lexical_scores.get(&id).copied(),
            semantic: semantic_scores.get(&id).copied(),
        });
    }
    Ok(found)
}

/// The names a query may be saying, with the share of the query each covers: each word of
/// three letters or more (a share of one over their number), and all its words run together
/// (`load dotenv` → `loaddotenv`, the whole query), folded ([`fold_name`]: parts lowercased
/// and stemmed, so `fish completion` names `fish_completions.go`).
fn named(words: &str) -> Vec<(String, f32)> {
    let folded: Vec<String> = words
        .split_whitespace()
        .map(fold_name)
        .filter(|w| w.chars().count() >= 3)
        .collect();
    let share = 1.0 / folded.len().max(1) as f32;
    let mut names: Vec<(String, f32)> = folded.into_iter().map(|w| (w, share)).collect();
    let joined = fold_name(words);
    if words.split_whitespace().count() > 1 && joined.chars().count() >= 3 {
        names.push((joined, 1.0));
    }
    names
}

/// How much a chunk's BM25 score is multiplied by for defining a name the query says, and
/// for being in a file of that name: the full boost when the name is the whole query
/// (`lexer`, `load dotenv`), a share of it when the name is one word of a longer question.
/// A section of a Markdown page defines its own heading, as code defines its names (`route
/// priority` → `## Route priority`); the part of a page before its first heading is headed by
/// the page's file name (`event hooks` → `event-hooks.md`, as documentation sites title a page
/// that has no heading).
fn boost(names: &[(String, f32)], path: &str, symbols: &str, title: Option<&str>) -> f32 {
    let share = |name: &str| {
        names
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, s)| *s)
            .fold(0f32, f32::max)
    };
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file.split_once('.').map_or(file, |(stem, _)| stem);
    let heading = is_markdown(path).then(|| match title {
        Some(trail) => trail.rsplit(" › ").next().unwrap_or(trail),
        None => stem,
    });
    let defines = symbols
        .split(' ')
        .filter(|s| !s.is_empty())
        .chain(heading)
        .map(|s| share(&fold_name(s)))
        .fold(0f32, f32::max);
    (1.0 + (DEFINES_BOOST - 1.0) * defines)
        * (1.0 + (FILE_NAME_BOOST - 1.0) * share(&fold_name(stem)))
}

/// Whether a file is a test by its path: in a `test`, `tests`, `spec` or `__tests__` folder, or
/// named `*_test.*`, `test_*`, `*.test.*`, `*.spec.*`, `*Test.java`-like.
fn is_test(path: &str) -> bool {
    let mut parts = path.split('/');
    let file = parts.next_back().unwrap_or(path);
    if parts.any(|d| {
        matches!(
            d,
            "test" | "tests" | "spec" | "specs" | "__tests__" | "testdata"
        )
    }) {
        return true;
    }
    let stem = file.split_once('.').map_or(file, |(stem, _)| stem);
    stem.ends_with("_test")
        || stem.starts_with("test_")
        || stem.ends_with("Test")
        || stem.ends_with("Tests")
        || file.contains(".test.")
        || file.contains(".spec.")
}

/// Syncs the repositories in scope whose files changed since their last sync (by size and
/// modification time), noting what it did in `found`, or warning why it could not.
fn refresh(
    root: &Path,
    scope: &Scope,
    embeddings: Option<&Embeddings>,
    found: &mut Found,
) -> Result<(), KnowledgeError> {
    let Some(index) = Index::existing(root)? else {
        return Ok(());
    };
    let repos: Vec<PathBuf> = match scope {
        Scope::Repo(path) => vec![path.clone()],
        Scope::All => index
            .repos()?
            .into_iter()
            .map(|(_, p)| PathBuf::from(p))
            .collect(),
    };
    let mut stale = Vec::new();
    for repo in repos {
        if !repo.is_dir() {
            found.warnings.push(format!(
                "{} no longer exists; its chunks still answer: `uwf knowledge forget {}` drops them",
                repo.display(),
                shell_words::quote(&repo.display().to_string())
            ));
            continue;
        }
        match super::sync::stale(&index, &repo) {
            Ok(Some(true)) => stale.push(repo),
            Ok(_) => {}
            Err(e) => found.warnings.push(format!(
                "cannot tell whether {} changed since its last sync, answers may be out of date: {e}",
                repo.display()
            )),
        }
    }
    drop(index);
    for repo in stale {
        match super::sync::sync(root, &repo, embeddings, &mut |_| {}) {
            Ok(report) => {
                let n = report.changed + report.removed;
                found.notes.push(format!(
                    "{} changed since its last sync: synced {n} file{} before answering",
                    repo.display(),
                    if n == 1 { "" } else { "s" }
                ));
                if let Some(e) = report.embed_error {
                    found
                        .warnings
                        .push(format!("the changed chunks have no vectors yet: {e}"));
                }
            }
            Err(e) => found.warnings.push(format!(
                "{} changed since its last sync and could not be synced, answers may be out of date: {e}",
                repo.display()
            )),
        }
    }
    Ok(())
}

/// The indexed repository that `dir` is in, if there is one.
pub(crate) fn indexed_repo(root: &Path, dir: &Path) -> Option<PathBuf> {
    let repo = super::manifest::find_repo(dir).ok()?;
    let index = Index::existing(root).ok()??;
    index.find_repo(&repo.display().to_string()).ok()??;
    Some(repo)
}

/// Hits as Markdown for a model: per chunk a line with its file, lines and section, then its
/// text in a fence long enough not to be closed by the text itself.
pub(crate) fn as_markdown(hits: &[Hit]) -> String {
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

/// Fuses a lexical and a semantic ranking (best first, with their scores) into one: a chunk
/// scores [`WORDS_WEIGHT`] times its BM25 score over the best one, plus the rest times its
/// cosine scaled between the lowest and the highest of the semantic list (0 when absent from a
/// list). Unlike reciprocal rank fusion, this keeps how far ahead a match is: a chunk far
/// ahead by words stays ahead of one the model merely prefers. Ties keep the lexical order.
pub(crate) fn fuse(lexical: &[(u32, f32)], semantic: &[(u32, f32)]) -> Vec<(u32, f32)> {
    let best = lexical.iter().map(|l| l.1).fold(0f32, f32::max);
    let (high, low) = semantic
        .iter()
        .fold((f32::MIN, f32::MAX), |(h, l), s| (h.max(s.1), l.min(s.1)));
    let mut scores: HashMap<u32, (f32, usize)> = HashMap::new();
    for (rank, (id, score)) in lexical.iter().enumerate() {
        let share = if best > 0.0 { score / best } else { 0.0 };
        scores.insert(*id, (WORDS_WEIGHT * share, rank));
    }
    for (id, cosine) in semantic {
        let share = if high > low {
            (cosine - low) / (high - low)
        } else {
            1.0
        };
        scores.entry(*id).or_insert((0.0, usize::MAX)).0 += (1.0 - WORDS_WEIGHT) * share;
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
    fn fusion_rewards_agreement_but_keeps_a_confident_word_match() {
        // 7 is close behind 1 by words and first by meaning: it wins.
        let lexical = [(1, 9.0), (7, 8.5), (3, 1.0)];
        let semantic = [(7, 0.9), (5, 0.85), (1, 0.5), (3, 0.1)];
        let fused = fuse(&lexical, &semantic);
        assert_eq!(fused[0].0, 7, "{fused:?}");
        assert_eq!(fused.len(), 4);
        // 1 far ahead by words stays first although the model prefers 7.
        let lexical = [(1, 9.0), (7, 3.0)];
        let fused = fuse(&lexical, &semantic);
        assert_eq!(fused[0].0, 1, "{fused:?}");
        // With one list, fusion keeps its order.
        let alone: Vec<u32> = fuse(&lexical, &[]).iter().map(|f| f.0).collect();
        assert_eq!(alone, [1, 7]);
    }

    #[test]
    fn the_model_first_overtakes_words_from_a_third_of_the_best() {
        // 1 is first by words and last by meaning; 7 is first by meaning.
        let semantic = [(7, 0.8), (5, 0.6), (1, 0.2)];
        let first = |words_of_7: f32| fuse(&[(1, 10.0), (7, words_of_7)], &semantic)[0].0;
        // At 45 % of the best words score, 7 wins (a weight of 0.7 would need 58 %).
        assert_eq!(first(4.5), 7);
        // At 30 %, the words' confident match stays first.
        assert_eq!(first(3.0), 1);
    }

    #[test]
    fn definitions_and_file_names_said_by_the_query_weigh_more() {
        let names = named("load dotenv");
        assert_eq!(
            names,
            [
                ("load".to_owned(), 0.5),
                ("dotenv".to_owned(), 0.5),
                ("loaddotenv".to_owned(), 1.0)
            ]
        );
        assert_eq!(
            boost(&names, "src/main.py", "load_dotenv find", None),
            DEFINES_BOOST
        );
        assert_eq!(
            boost(&names, "tests/test_load.py", "test_load_dotenv", None),
            1.0
        );
        let lexer = named("lexer");
        assert_eq!(
            boost(&lexer, "src/lexer.rs", "Lexer", None),
            DEFINES_BOOST * FILE_NAME_BOOST
        );
        assert_eq!(boost(&lexer, "src/lexer.rs", "", None), FILE_NAME_BOOST);
        // One word of a longer question weighs its share only.
        let question = named("how does a worker renew its lease");
        let renew = boost(&question, "src/pg/leases.rs", "renew", None);
        assert!(renew > 1.0 && renew < 1.2, "{renew}");
        assert_eq!(boost(&named("a"), "src/a.rs", "a", None), 1.0);
    }

    #[test]
    fn names_match_across_plural_and_case() {
        // `fish completion` names fish_completions.go (the plural and the underscore aside).
        let names = named("shell completion");
        assert_eq!(
            boost(&names, "shell_completions.go", "", None),
            FILE_NAME_BOOST
        );
        assert_eq!(
            boost(&named("retry policies"), "src/a.py", "RetryPolicy", None),
            DEFINES_BOOST
        );
    }

    #[test]
    fn a_markdown_section_defines_its_heading() {
        let names = named("retry policy");
        assert_eq!(
            boost(&names, "docs/guide.md", "", Some("Guide › Retry policy")),
            DEFINES_BOOST
        );
        // Only its own heading: not one above it.
        assert_eq!(
            boost(&names, "docs/guide.md", "", Some("Retry policy › Backoff")),
            1.0
        );
        // Before its first heading a page is headed by its file name.
        assert_eq!(
            boost(&names, "docs/retry-policy.md", "", None),
            DEFINES_BOOST * FILE_NAME_BOOST
        );
        // A code chunk's title is its definitions' trail, which `symbols` already holds.
        assert_eq!(
            boost(&names, "src/a.py", "", Some("class Retry › def policy")),
            1.0
        );
    }

    #[test]
    fn test_files_are_known_by_their_paths() {
        for test in [
            "tests/knowledge.rs",
            "command_test.go",
            "src/test_utils.py",
            "pkg/__tests__/a.js",
            "web/app.spec.ts",
            "src/FooTest.java",
        ] {
            assert!(is_test(test), "{test}");
        }
        for not in [
            "src/lexer.rs",
            "contest.go",
            "docs/testing.md",
            "src/latest.py",
        ] {
            assert!(!is_test(not), "{not}");
        }
    }

    #[test]
    fn qualifiers_are_parsed_from_the_query() {
        let q = Query::parse("lexer path:src/*.rs lang:rust symbol:Lexer tokens").unwrap();
        assert_eq!(q.words, "lexer tokens");
        assert_eq!(q.paths, ["src/*.rs"]);
        assert_eq!(q.extensions, ["rs"]);
        assert_eq!(q.symbols, ["Lexer"]);
        let globs = q.globs();
        assert!(q.admits(&globs, "src/lexer.rs", "Lexer lex"));
        assert!(!q.admits(&globs, "src/lexer.rs", "Parser"));
        assert!(!q.admits(&globs, "docs/lexer.md", "Lexer"));
        assert_eq!(
            Query::parse("symbol:load_dotenv").unwrap().words,
            "load_dotenv"
        );
        let q = Query::parse("retry path:docs/ ext:.md").unwrap();
        assert!(q.admits(&q.globs(), "docs/retries.md", ""));
        assert!(!q.admits(&q.globs(), "src/retries.md", ""));
        // A colon in words is no qualifier.
        assert_eq!(Query::parse("std::fs read").unwrap().words, "std::fs read");
        assert!(Query::parse("path:src/").unwrap_err().contains("no words"));
        assert!(
            Query::parse("x path:")
                .unwrap_err()
                .contains("names nothing")
        );
        assert!(
            Query::parse("x path:a[")
                .unwrap_err()
                .contains("not a glob")
        );
        assert!(Query::parse("  ").unwrap_err().contains("empty"));
    }
}
