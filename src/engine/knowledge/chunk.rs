//! Cutting a file into chunks of about 1–2 KB that each say one thing, with their line ranges:
//! Markdown at its headings (a fenced code block is never cut at a heading-like line inside
//! it), code and other text at blank lines; a piece still too long is cut at line ends.

/// Chunks are packed up to about this many bytes.
pub const TARGET_BYTES: usize = 1500;
/// No chunk is longer than this, unless one line is.
pub const MAX_BYTES: usize = 2200;

/// A piece of a file.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    /// The first line, counted from 1.
    pub start: usize,
    /// The last line (inclusive).
    pub end: usize,
    /// The Markdown heading the chunk is under (with its parents: `Install › Linux`).
    pub title: Option<String>,
    pub text: String,
}

/// Whether a file is chunked as Markdown.
pub fn is_markdown(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    [".md", ".markdown", ".mdx"]
        .iter()
        .any(|e| lower.ends_with(e))
}

/// The chunks of a file's text.
pub fn chunks(path: &str, text: &str) -> Vec<Chunk> {
    let lines: Vec<&str> = text.lines().collect();
    let sections = if is_markdown(path) {
        markdown_sections(&lines)
    } else {
        vec![Section {
            start: 0,
            end: lines.len(),
            title: None,
        }]
    };
    let mut out = Vec::new();
    for section in sections {
        pack(&lines, &section, is_markdown(path), &mut out);
    }
    out
}

/// Lines `start..end` (0-based, exclusive end) under one heading.
struct Section {
    start: usize,
    end: usize,
    title: Option<String>,
}

fn fence(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("```") || t.starts_with("~~~")
}

fn heading(line: &str) -> Option<(usize, &str)> {
    let level = line.bytes().take_while(|&b| b == b'#').count();
    let rest = &line[level..];
    ((1..=6).contains(&level) && (rest.is_empty() || rest.starts_with(' ')))
        .then(|| (level, rest.trim().trim_end_matches('#').trim()))
}

fn markdown_sections(lines: &[&str]) -> Vec<Section> {
    let mut sections = Vec::new();
    let mut path: Vec<(usize, String)> = Vec::new();
    let mut start = 0;
    let mut title = None;
    let mut in_fence = false;
    for (i, line) in lines.iter().enumerate() {
        if fence(line) {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let Some((level, text)) = heading(line) else {
            continue;
        };
        if i > start {
            sections.push(Section {
                start,
                end: i,
                title: title.clone(),
            });
        }
        path.retain(|(l, _)| *l < level);
        path.push((level, text.to_owned()));
        title = Some(
            path.iter()
                .map(|(_, t)| t.as_str())
                .collect::<Vec<_>>()
                .join(" › "),
        );
        start = i;
    }
    if lines.len() > start {
        sections.push(Section {
            start,
            end: lines.len(),
            title,
        });
    }
    sections
}

/// Packs a section's blocks (runs of lines between blank lines, a fenced block whole) into
/// chunks of about [`TARGET_BYTES`].
fn pack(lines: &[&str], section: &Section, markdown: bool, out: &mut Vec<Chunk>) {
    let bytes = |from: usize, to: usize| lines[from..to].iter().map(|l| l.len() + 1).sum::<usize>();
    // Block boundaries: a blank line ends a block, except inside a Markdown fence.
    let mut blocks: Vec<(usize, usize)> = Vec::new();
    let mut block_start = None;
    let mut in_fence = false;
    for (i, line) in lines
        .iter()
        .enumerate()
        .take(section.end)
        .skip(section.start)
    {
        if markdown && fence(line) {
            in_fence = !in_fence;
        }
        if line.trim().is_empty() && !in_fence {
            if let Some(s) = block_start.take() {
                blocks.push((s, i));
            }
        } else if block_start.is_none() {
            block_start = Some(i);
        }
    }
    if let Some(s) = block_start {
        blocks.push((s, section.end));
    }
    // A block longer than the maximum is cut at line ends.
    let mut pieces = Vec::new();
    for (s, e) in blocks {
        let mut from = s;
        while from < e {
            let mut to = from + 1;
            while to < e && bytes(from, to + 1) <= MAX_BYTES {
                to += 1;
            }
            pieces.push((from, to));
            from = to;
        }
    }
    let mut current: Option<(usize, usize)> = None;
    let emit = |(s, e): (usize, usize), out: &mut Vec<Chunk>| {
        out.push(Chunk {
            start: s + 1,
            end: e,
            title: section.title.clone(),
            text: lines[s..e].join("\n"),
        });
    };
    for (s, e) in pieces {
        current = match current {
            Some((cs, _)) if bytes(cs, e) <= TARGET_BYTES => Some((cs, e)),
            Some(done) => {
                emit(done, out);
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    if let Some(done) = current {
        emit(done, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_cuts_at_headings_with_their_parents() {
        let text = "# Guide\nintro\n\n## Install\nrun it\n\n### Linux\napt install\n## Use\n```sh\n# not a heading\n```\n";
        let c = chunks("README.md", text);
        let titles: Vec<_> = c.iter().map(|c| c.title.clone().unwrap()).collect();
        assert_eq!(
            titles,
            [
                "Guide",
                "Guide › Install",
                "Guide › Install › Linux",
                "Guide › Use"
            ]
        );
        assert_eq!((c[2].start, c[2].end), (7, 8));
        assert_eq!(c[2].text, "### Linux\napt install");
        assert!(c[3].text.contains("# not a heading"));
    }

    #[test]
    fn code_packs_blank_line_blocks_and_cuts_long_ones() {
        let block = |name: &str| format!("fn {name}() {{\n{}}}\n", "    work();\n".repeat(60));
        let text = (0..6)
            .map(|i| block(&format!("f{i}")))
            .collect::<Vec<_>>()
            .join("\n");
        let c = chunks("src/lib.rs", &text);
        assert!(c.len() >= 3, "{} chunks", c.len());
        assert!(c.iter().all(|c| c.text.len() <= MAX_BYTES));
        // Line ranges cover the text in order, and each range is the chunk's text.
        let lines: Vec<&str> = text.lines().collect();
        for chunk in &c {
            assert_eq!(chunk.text, lines[chunk.start - 1..chunk.end].join("\n"));
        }
        assert_eq!(c.first().unwrap().start, 1);
        assert_eq!(c.last().unwrap().end, lines.len());
        let one_long_line = "x".repeat(5000);
        assert_eq!(chunks("a.txt", &one_long_line).len(), 1);
    }

    #[test]
    fn empty_files_have_no_chunks() {
        assert!(chunks("a.md", "").is_empty());
        assert!(chunks("a.rs", "\n\n\n").is_empty());
    }
}
