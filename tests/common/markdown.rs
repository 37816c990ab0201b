//! Markdown as GitHub reads it, for the tests that check the docs' links and citations.

/// GitHub's anchor for a Markdown heading: lower case, punctuation dropped (`-` and `_` kept),
/// spaces as `-`.
pub fn heading_anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}
