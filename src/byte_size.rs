//! Sizes written for people: `1048576`, `512KiB`, `16 MiB` read, and byte counts shown in the
//! largest unit that divides them.

/// A size as `1048576`, `512KiB`, `256MiB`, `1GiB` (also `K`, `M`, `G`, `KB`, `MB`, `GB`, all
/// powers of 1024).
pub(crate) fn parse_size(text: &str) -> Option<usize> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: usize = number.parse().ok()?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return None,
    };
    number.checked_mul(1 << shift)
}

/// A size in the largest binary unit that divides it (`256 MiB`).
pub(crate) fn show_size(bytes: usize) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{bytes} bytes")
}
