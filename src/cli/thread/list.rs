//! `uwf thread list`: threads newest first, as a table (the newest 50 on a terminal, and how
//! many more), JSON lines or ids, streamed as the index is read; or as a tree of sub-workflow
//! children under their parents (`--tree`).

use crate::cas::Store;
use crate::cli::Out;
use crate::cli::error::CliResult;
use crate::cli::terminal::output::{Mode, ago};
use crate::engine::cycle::lifecycle;
use crate::engine::thread::listing::{self, Listed, Query};

/// How many threads a terminal table shows unless `--limit` says otherwise.
const TABLE_ROWS: usize = 50;

pub(super) fn list(
    store: &Store,
    query: &Query,
    limit: Option<usize>,
    tree: bool,
    out: &mut Out,
) -> CliResult<()> {
    let root = store.root();
    let now = crate::cas::store::now_ms();
    let limit = match out.mode {
        Mode::Table if !tree => Some(limit.unwrap_or(TABLE_ROWS)),
        _ => limit,
    };
    let prices = crate::engine::config::load(root)
        .map(|l| l.config.prices)
        .unwrap_or_default();
    let mut shown = 0usize;
    let mut rows = Vec::new();
    let mut failed = None;
    let matched = listing::list(store, query, |listed: Listed| {
        if limit.is_some_and(|l| shown >= l) {
            return false;
        }
        shown += 1;
        let summary = &listed.summary;
        let written = if tree {
            // Children are printed under their parent (which may be archived even when they
            // are not), so only top-level threads start a line of their own here.
            if lifecycle::family_json(root, &summary.id).0.is_null() {
                tree_row(out, 0, &summary.id, summary).and_then(|()| {
                    lifecycle::descendants(store, &summary.id)
                        .into_iter()
                        .try_for_each(|(depth, child)| tree_row(out, depth, &summary.id, &child))
                })
            } else {
                Ok(())
            }
        } else {
            match out.mode {
                Mode::Quiet => out.line(&summary.id),
                Mode::Json => {
                    let mut json = summary.to_json();
                    json["updatedAt"] = listed.updated_ms.into();
                    json["cost"] = cost_json(&listed, &prices);
                    out.line(json)
                }
                Mode::Table => {
                    rows.push(vec![
                        summary.id.clone(),
                        summary.workflow.clone(),
                        summary.status.clone(),
                        summary.steps.to_string(),
                        summary.next.clone().unwrap_or_else(|| "-".into()),
                        ago(listed.updated_ms, now),
                    ]);
                    Ok(())
                }
            }
        };
        match written {
            Ok(()) => true,
            Err(e) => {
                failed = Some(e);
                false
            }
        }
    })?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    if out.mode == Mode::Table && !tree {
        out.table(
            &["THREAD", "WORKFLOW", "STATUS", "STEPS", "NEXT", "UPDATED"],
            &rows,
        )?;
        let more = matched.saturating_sub(shown as u64);
        if more > 0 {
            let last = rows.last().map(|r| r[0].as_str()).unwrap_or_default();
            out.line(format!(
                "… and {more} more (--limit N shows more; --before {last} the next page)"
            ))?;
        }
    }
    Ok(())
}

/// `--since`: a duration ago (`2h`), a date or a time (RFC 3339), as ms since the epoch.
pub(super) fn parse_since(text: &str) -> Result<u64, String> {
    crate::engine::thread::listing::since_ms(text)
}

/// One row of `thread list --tree`: a line for a person, the id with `-q`, else the thread as
/// JSON with its `depth` (0 for a top-level thread) and the top-level thread it is under (`top`).
fn tree_row(out: &mut Out, depth: usize, top: &str, s: &lifecycle::Summary) -> std::io::Result<()> {
    match out.mode {
        Mode::Table => out.line(tree_line(depth, s)),
        Mode::Quiet => out.line(&s.id),
        Mode::Json => {
            let mut json = s.to_json();
            json["depth"] = depth.into();
            json["top"] = top.into();
            out.line(json)
        }
    }
}

/// One line of `thread list --tree`.
fn tree_line(depth: usize, s: &lifecycle::Summary) -> String {
    format!(
        "{}{}  {:<16} {:<8} {} step{}",
        "  ".repeat(depth),
        s.id,
        s.workflow,
        s.status,
        s.steps,
        if s.steps == 1 { "" } else { "s" }
    )
}

/// A row's `cost`: what the thread's own steps spent (null when its chain cannot be read).
fn cost_json(listed: &Listed, prices: &crate::engine::config::budget::Prices) -> serde_json::Value {
    listed
        .usage
        .as_ref()
        .map(|usage| usage.spent(prices).to_json())
        .unwrap_or(serde_json::Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_durations_and_times() {
        // Two hours before the moment it was read, which lies between these two clock reads
        // (a millisecond may pass between them).
        let before = crate::cas::store::now_ms();
        let two_hours = parse_since("2h").unwrap();
        let after = crate::cas::store::now_ms();
        assert!(
            (before - 7_200_000..=after - 7_200_000).contains(&two_hours),
            "{before} {two_hours} {after}"
        );
        assert_eq!(parse_since("1970-01-01T00:00:01Z").unwrap(), 1000);
        let err = parse_since("yesterday-ish").unwrap_err();
        assert!(err.contains("neither a duration"), "{err}");
    }
}
