//! "Did you mean …?": the known name closest to a misspelt one, for error messages.

/// The name in `known` closest to `word`, when it is close enough to be a typo of it: at most
/// one edit per three characters (and at least one), case ignored. Ties keep the first.
pub(crate) fn closest<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let word_lower = word.to_lowercase();
    let limit = (word.chars().count() / 3).max(1);
    known
        .into_iter()
        .filter(|k| *k != word)
        .map(|k| (strsim::levenshtein(&word_lower, &k.to_lowercase()), k))
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::closest;

    #[test]
    fn a_typo_finds_its_name_and_a_stranger_finds_none() {
        let known = ["writer", "reviewer", "planner"];
        assert_eq!(closest("writr", known), Some("writer"));
        assert_eq!(closest("Reviewr", known), Some("reviewer"));
        assert_eq!(closest("deployer", known), None);
        assert_eq!(closest("x", known), None);
    }
}
