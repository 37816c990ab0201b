//! The lexical ranking: BM25 from the `bm25` crate. A chunk's text becomes a sparse vector of
//! term weights at sync time (stored with the chunk); a query scores the chunks in scope with
//! the crate's [`Scorer`] (BM25 with inverse document frequencies over those chunks).
//!
//! Words are English-stemmed with stop words removed; identifiers are also split into their
//! parts (`parse_config`, `parseConfig` and `parse-config` all match "parse config";
//! `HTTPServerConfig` matches "http", "server" and "config", and the whole name still matches).

use bm25::{Embedder, EmbedderBuilder, Embedding, Language, Scorer, TokenEmbedding, Tokenizer};

/// The tokenizer: the crate's English tokenizer over the text with identifier parts added.
pub(crate) struct Words(bm25::DefaultTokenizer);

impl Default for Words {
    fn default() -> Words {
        Words(bm25::DefaultTokenizer::new(Language::English))
    }
}

impl Tokenizer for Words {
    fn tokenize(&self, text: &str) -> Vec<String> {
        self.0.tokenize(&with_identifier_parts(text))
    }
}

/// Characters that join the parts of a compound name: `snake_case`, `kebab-case`, `a::path`,
/// `file.rs`, `src/main.rs`. (Word segmentation keeps `login.rs` as one word; its parts are
/// added so that `login` finds it.)
fn joins(c: char) -> bool {
    matches!(c, '_' | '-' | ':' | '.' | '/')
}

/// `text` followed by the parts of each compound name in it (see [`joins`], and `camelCase`),
/// so either form of a name finds the other.
fn with_identifier_parts(text: &str) -> String {
    let mut extra = String::new();
    for word in text.split(|c: char| !(c.is_alphanumeric() || joins(c))) {
        let parts = identifier_parts(word);
        if parts.len() > 1 {
            extra.push(' ');
            extra.push_str(&parts.join(" "));
        }
    }
    if extra.is_empty() {
        text.to_owned()
    } else {
        format!("{text}\n{extra}")
    }
}

/// The parts of one compound name (see [`joins`], and `camelCase`): `parseConfig` → parse,
/// Config; `HTTPServer` → HTTP, Server (an acronym ends before the capital that starts a
/// lowercase word); a plain word is its one part.
pub(crate) fn identifier_parts(word: &str) -> Vec<String> {
    let word = word.trim_matches(joins);
    let mut parts = Vec::new();
    let mut part = String::new();
    let mut previous_lower = false;
    let mut previous_upper = false;
    let chars: Vec<char> = word.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let acronym_end = c.is_uppercase()
            && previous_upper
            && chars.get(i + 1).is_some_and(|n| n.is_lowercase());
        let boundary = !c.is_alphanumeric() || (c.is_uppercase() && previous_lower) || acronym_end;
        if boundary && !part.is_empty() {
            parts.push(std::mem::take(&mut part));
        }
        if c.is_alphanumeric() {
            part.push(c);
        }
        previous_lower = c.is_lowercase() || c.is_ascii_digit();
        previous_upper = c.is_uppercase();
    }
    if !part.is_empty() {
        parts.push(part);
    }
    parts
}

/// A name folded for comparing names: its parts ([`identifier_parts`]) lowercased and
/// English-stemmed, run together. `load_dotenv`, `LoadDotenv` and `load-dotenv` are all
/// `loaddotenv`; `fish_completions` and `fish completion` are both `fishcomplet`.
pub(crate) fn fold_name(name: &str) -> String {
    let stemmer = rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English);
    identifier_parts(name)
        .iter()
        .map(|p| stemmer.stem(&p.to_lowercase()).into_owned())
        .collect()
}

/// How many terms a text has (its BM25 document length).
pub(crate) fn length(words: &Words, text: &str) -> usize {
    words.tokenize(text).len()
}

/// An embedder for a corpus whose average document length is `avgdl`.
pub(crate) fn embedder(avgdl: f32) -> Embedder<u32, Words> {
    EmbedderBuilder::<u32, Words>::with_avgdl(avgdl.max(1.0))
        .tokenizer(Words::default())
        .build()
}

/// A text's term weights, one entry per distinct term, as stored bytes (little-endian
/// `u32` term, `f32` weight pairs).
pub(crate) fn encode(embedder: &Embedder<u32, Words>, text: &str) -> Vec<u8> {
    let mut seen = std::collections::HashSet::new();
    let mut bytes = Vec::new();
    for TokenEmbedding { index, value } in embedder.embed(text).0 {
        if seen.insert(index) {
            bytes.extend_from_slice(&index.to_le_bytes());
            bytes.extend_from_slice(&value.to_le_bytes());
        }
    }
    bytes
}

/// The terms of a query, as the stored weights name them.
pub(crate) fn query_terms(query: &str) -> Vec<u32> {
    let mut terms: Vec<u32> = embedder(1.0).embed(query).indices().copied().collect();
    terms.sort_unstable();
    terms.dedup();
    terms
}

/// The weights of `terms` (sorted) among stored weights.
fn decode_only(weights: &[u8], terms: &[u32]) -> Embedding<u32> {
    Embedding(
        weights
            .chunks_exact(8)
            .filter_map(|pair| {
                let index = u32::from_le_bytes([pair[0], pair[1], pair[2], pair[3]]);
                terms.binary_search(&index).is_ok().then(|| TokenEmbedding {
                    index,
                    value: f32::from_le_bytes([pair[4], pair[5], pair[6], pair[7]]),
                })
            })
            .collect(),
    )
}

/// The chunks in scope, scored against one query by the crate's BM25 [`Scorer`].
///
/// A BM25 score sums, over the query's terms, the term's inverse document frequency times its
/// weight in the chunk; the scorer takes the corpus's size from the documents it holds and a
/// term's document frequency from those holding the term. So each chunk is held with only its
/// weights of the query's terms, and a chunk with none of them as an empty document: the counts
/// stay those of the whole scope, the scores are exactly those of whole chunks, and the work
/// is a few entries per chunk instead of every term of every chunk.
pub(crate) struct Ranking {
    scorer: Scorer<u32, u32>,
    terms: Vec<u32>,
    query: Embedding<u32>,
    /// Keys of the empty documents, counting down from `u32::MAX` (chunk ids are row ids,
    /// counting up from 1).
    next_empty: u32,
}

impl Ranking {
    /// A ranking for `query`.
    pub(crate) fn new(query: &str) -> Ranking {
        Ranking {
            scorer: Scorer::new(),
            terms: query_terms(query),
            query: embedder(1.0).embed(query),
            next_empty: u32::MAX,
        }
    }

    /// Adds a chunk (by its row id) with its stored term weights.
    pub(crate) fn add(&mut self, id: u32, weights: &[u8]) {
        let relevant = decode_only(weights, &self.terms);
        if relevant.is_empty() {
            self.scorer.upsert(&self.next_empty, relevant);
            self.next_empty -= 1;
        } else {
            self.scorer.upsert(&id, relevant);
        }
    }

    /// The chunks matching the query, best first (equal scores in the order of their ids, so a
    /// query ranks the same every time), with their BM25 scores.
    pub(crate) fn matches(&self) -> Vec<(u32, f32)> {
        let mut matches: Vec<(u32, f32)> = self
            .scorer
            .matches(&self.query)
            .into_iter()
            .map(|d| (d.id, d.score))
            .collect();
        matches.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        matches
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every stored weight of a chunk.
    fn decode(bytes: &[u8]) -> Embedding<u32> {
        Embedding(
            bytes
                .chunks_exact(8)
                .map(|pair| TokenEmbedding {
                    index: u32::from_le_bytes(pair[..4].try_into().unwrap_or_default()),
                    value: f32::from_le_bytes(pair[4..].try_into().unwrap_or_default()),
                })
                .collect(),
        )
    }

    #[test]
    fn identifiers_match_their_parts() {
        let words = Words::default();
        let tokens = words.tokenize("fn parseConfig(path) calls load_settings in src/login.rs");
        for want in ["pars", "config", "load", "set", "login"] {
            assert!(
                tokens.iter().any(|t| t.starts_with(want)),
                "{want} in {tokens:?}"
            );
        }
    }

    #[test]
    fn names_fold_to_stemmed_parts() {
        assert_eq!(fold_name("load_dotenv"), "loaddotenv");
        assert_eq!(fold_name("LoadDotenv"), fold_name("load-dotenv"));
        assert_eq!(fold_name("fish_completions"), fold_name("fish completion"));
        assert_eq!(fold_name("HTTPServerConfig"), "httpserverconfig");
    }

    #[test]
    fn acronyms_end_where_a_word_starts() {
        let words = Words::default();
        let tokens = words.tokenize("struct HTTPServerConfig; fn parseJSON(); XMLHttpRequest");
        for want in [
            "http",
            "server",
            "config",
            "httpserverconfig",
            "pars",
            "json",
            "xml",
            "request",
        ] {
            assert!(tokens.iter().any(|t| t == want), "{want} in {tokens:?}");
        }
        assert!(!tokens.iter().any(|t| t == "httpserver"), "{tokens:?}");
    }

    #[test]
    fn the_chunk_about_the_query_ranks_first() {
        let docs = [
            "How to install the tool on Linux with apt",
            "Configuring the retry policy of the HTTP client",
            "The mount shows threads as directories",
        ];
        let avgdl = docs
            .iter()
            .map(|d| length(&Words::default(), d))
            .sum::<usize>() as f32
            / 3.0;
        let e = embedder(avgdl);
        let rank = |query: &str, skip_empty: bool| {
            let mut ranking = Ranking::new(query);
            for (i, d) in docs.iter().enumerate() {
                let weights = encode(&e, d);
                if !skip_empty || !decode_only(&weights, &query_terms(query)).is_empty() {
                    ranking.add(i as u32, &weights);
                }
            }
            ranking.matches()
        };
        let best = rank("retries of http requests", false);
        assert_eq!(best[0].0, 1, "{best:?}");
        assert!(rank("zebra", false).is_empty());
        // The empty documents count: without them the corpus looks smaller and scores differ.
        let without = rank("retries of http requests", true);
        assert_ne!(best[0].1, without[0].1);
        // Holding every chunk whole gives the very same scores.
        let mut whole = Ranking::new("retries of http requests");
        for (i, d) in docs.iter().enumerate() {
            whole.scorer.upsert(&(i as u32), decode(&encode(&e, d)));
        }
        assert_eq!(whole.matches(), best);
    }
}
