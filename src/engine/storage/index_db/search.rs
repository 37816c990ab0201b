//! Searching the directory store's thread index (`docs/dashboard.md#search`): every row keeps
//! what a search reads of its start prompt in the `prompt` column (lowercase, the first
//! [`crate::pg::rows::SEARCH_CHARS`] characters), so a search is one pass over the rows by id, newest first,
//! reading no node.
//!
//! The match is a case-insensitive substring: the text is lowercased here, as the column was,
//! and found with `instr`, which takes it literally (`%` and `_` are characters like any other).
//! A row made before the column existed, or copied from another store, has `NULL` there; the
//! search fills such rows from their start nodes first ([`unsearchable`], [`note_prompts`]),
//! through the partial index `threads_unsearchable`, which is empty once they are filled.

use std::path::Path;

use rusqlite::params;

use super::connection::{with, write};
use super::parse_hash;
use crate::cas::Hash;
use crate::engine::storage::index_files::IndexError;

pub(crate) use crate::pg::search_text;

/// A text to search for, as a listing's filter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextFilter {
    /// The text as typed; matched without regard to case.
    pub text: String,
    /// The workflow versions whose name holds the text (a thread of one matches too).
    pub workflows: Vec<Hash>,
}

impl TextFilter {
    /// The text as the column keeps prompts: lowercase.
    pub(crate) fn needle(&self) -> String {
        self.text.to_lowercase()
    }
}

/// Adds the text condition to a scan's `where` clause, its arguments after `args`.
pub(super) fn push_condition(sql: &mut String, args: &mut Vec<String>, text: &TextFilter) {
    args.push(text.needle());
    let needle = args.len();
    let mut any = format!("instr(prompt, ?{needle}) > 0 or instr(lower(id), ?{needle}) > 0");
    if !text.workflows.is_empty() {
        let first = args.len() + 1;
        args.extend(text.workflows.iter().map(Hash::to_string));
        let marks: Vec<String> = (first..=args.len()).map(|i| format!("?{i}")).collect();
        any.push_str(&format!(" or workflow in ({})", marks.join(", ")));
    }
    sql.push_str(&format!(" and ({any})"));
}

/// Rows whose prompt the index does not know yet, `(id, head)`, at most `limit`.
pub(crate) fn unsearchable(root: &Path, limit: usize) -> Result<Vec<(String, Hash)>, IndexError> {
    let rows = with(root, false, "finding rows to make searchable", |c| {
        let mut stmt = c.prepare_cached(
            "select id, head from threads indexed by threads_unsearchable \
             where prompt is null limit ?1",
        )?;
        let rows = stmt.query_map(params![limit as i64], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
    })?
    .unwrap_or_default();
    rows.into_iter()
        .map(|(id, head)| Ok((id, parse_hash(root, &head)?)))
        .collect()
}

/// Records the start prompts of rows that did not know them, `(id, prompt)`, in one
/// transaction (not synced: a cache the next search fills again if it is lost).
pub(crate) fn note_prompts(root: &Path, prompts: &[(String, String)]) -> Result<(), IndexError> {
    if prompts.is_empty() {
        return Ok(());
    }
    write(root, "making rows searchable", |c| {
        c.execute_batch("pragma synchronous = normal;")?;
        let done = (|| {
            let tx = c.transaction()?;
            {
                let mut update = tx.prepare_cached(
                    "update threads set prompt = ?2 where id = ?1 and prompt is null",
                )?;
                for (id, prompt) in prompts {
                    update.execute(params![id, search_text(prompt)])?;
                }
            }
            tx.commit()
        })();
        c.execute_batch("pragma synchronous = full;")?;
        done
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg::rows::SEARCH_CHARS;

    #[test]
    fn the_kept_text_is_lowercase_and_bounded_by_characters() {
        assert_eq!(search_text("Fix the ÉCLAIR bug"), "fix the éclair bug");
        let long = "Ä".repeat(SEARCH_CHARS + 5);
        let kept = search_text(&long);
        assert_eq!(kept.chars().count(), SEARCH_CHARS);
        assert!(kept.chars().all(|c| c == 'ä'));
    }
}
