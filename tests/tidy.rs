//! House rules checked on every test run, as rust-analyzer's `tidy` test does, so they hold
//! without anyone remembering them:
//! - every source file says what it is for in a `//!` line at its top;
//! - no file grows past [`LIMIT`] lines before its tests, and no folder past [`FOLDER_LIMIT`]
//!   entries;
//! - arrows between rooms point one way: inside every folder of `src/`, the rooms (its files
//!   and sub-folders) import each other without a cycle, so each folder's rooms can be drawn
//!   as layers;
//! - only the storage layer (`src/engine/storage/`, `src/pg/`) asks which backend a root uses;
//!   everything else asks the storage handle;
//! - the repository stands on its own docs: no tracked file cites the product specification
//!   (which lives outside the repository), every `docs/<page>.md#anchor` a tracked file names
//!   is a page with that heading, and every repository path the docs name (in backticks)
//!   exists — in the codemap, `docs/ARCHITECTURE.md`, above all.
//!
//! Lines: every line before a file's `#[cfg(test)]` module, comments and blank lines too
//! (a reader scrolls past them all). The files in [`OVER_LIMIT`] were past the limit when this test was
//! written; each may not grow, and its entry must go once it is under the limit (the test says
//! so), so the list only shrinks.
//!
//! Imports: `use` trees and inline paths from `crate::` or `super::` in a file's code before
//! its tests, each resolved to the deepest module it names. An import between a module and
//! its own parts (a `mod.rs` and its files) is how Rust modules are built, not an arrow.

#[path = "common/markdown.rs"]
mod markdown;

use markdown::heading_anchor;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The most lines a source file may have before its tests.
const LIMIT: usize = 700;

/// Files past [`LIMIT`] today, with the size they may not exceed.
const OVER_LIMIT: &[(&str, usize)] = &[];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn lines_before_tests(text: &str) -> usize {
    text.lines()
        .take_while(|l| !l.starts_with("#[cfg(test)]"))
        .count()
}

/// What is wrong with one source file named `name` (relative to the manifest dir): a missing
/// `//!` line, or too many lines before its tests for the limit (or the ceiling `over_limit` gives it).
fn file_problems(name: &str, text: &str, over_limit: &[(&str, usize)]) -> Vec<String> {
    let mut problems = Vec::new();
    if !text.starts_with("//!") {
        problems.push(format!(
            "{name}: does not start with a `//!` line saying what it is for"
        ));
    }
    let lines = lines_before_tests(text);
    match over_limit.iter().find(|(f, _)| *f == name) {
        Some((_, ceiling)) if lines > *ceiling => problems.push(format!(
            "{name}: {lines} lines before its tests, more than the {ceiling} it had (split it instead)"
        )),
        Some(_) if lines <= LIMIT => problems.push(format!(
            "{name}: {lines} lines before its tests, under the limit now: remove it from OVER_LIMIT"
        )),
        Some(_) => {}
        None if lines > LIMIT => problems.push(format!(
            "{name}: {lines} lines before its tests, more than {LIMIT}: split it into modules"
        )),
        None => {}
    }
    problems
}

#[test]
fn every_source_file_says_what_it_is_for_and_stays_small() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    assert!(files.len() > 50, "found only {} source files", files.len());
    let mut problems = Vec::new();
    for path in &files {
        let name = path
            .strip_prefix(root)
            .expect("under the manifest dir")
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(path).expect("read source");
        problems.extend(file_problems(&name, &text, OVER_LIMIT));
    }
    for (listed, _) in OVER_LIMIT {
        assert!(
            root.join(listed).exists(),
            "{listed} is in OVER_LIMIT but does not exist"
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn an_oversized_file_is_named() {
    let body = "fn f() {}\n".repeat(LIMIT - 1);
    let small = format!("//! doc\n{body}");
    assert!(file_problems("src/a.rs", &small, &[]).is_empty());
    let big = format!("{small}fn g() {{}}\n");
    let problems = file_problems("src/a.rs", &big, &[]);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("701 lines before its tests"),
        "{problems:?}"
    );
    // A file on the list may not grow past its ceiling, and leaves the list once under.
    assert!(file_problems("src/a.rs", &big, &[("src/a.rs", 701)]).is_empty());
    assert_eq!(
        file_problems("src/a.rs", &big, &[("src/a.rs", 700)]).len(),
        1
    );
    assert_eq!(
        file_problems("src/a.rs", &small, &[("src/a.rs", 710)]).len(),
        1
    );
    assert_eq!(file_problems("src/a.rs", "fn f() {}\n", &[]).len(), 1);
}

#[test]
fn lines_count_comments_and_blanks_but_not_tests() {
    let text =
        "//! doc\n\nuse a;\n    // comment\nfn f() {}\n#[cfg(test)]\nmod tests {\n fn g() {}\n}\n";
    assert_eq!(lines_before_tests(text), 5);
}

// ---------------------------------------------------------------------------------------------
// Rooms: folders, and the arrows between them.
// ---------------------------------------------------------------------------------------------

/// The most entries (files and sub-folders) a folder of `src/` may hold before it is crowded.
const FOLDER_LIMIT: usize = 16;

/// A module path below the crate root, as its segments (`["engine", "thread", "chain"]`).
type ModPath = Vec<String>;

/// One source file's module and the text the checks read (the part before its tests).
struct Module {
    path: ModPath,
    file: String,
    text: String,
}

/// The module a source file defines, or `None` for files that are not part of the library's
/// module tree as built (the binary's `main.rs`, test-only files).
fn module_of(relative: &Path) -> Option<ModPath> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts.first().map(String::as_str) != Some("src") {
        return None;
    }
    parts.remove(0);
    let last = parts.pop()?;
    if parts.iter().any(|p| p == "tests") || last == "tests.rs" || last == "main.rs" {
        return None;
    }
    let stem = last.strip_suffix(".rs")?;
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_owned());
    }
    Some(parts)
}

/// The text of `text` a reader of imports looks at: the code before `#[cfg(test)]`, without
/// `//` comments (doc comments name modules without depending on them).
fn code_without_comments(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines().take_while(|l| !l.starts_with("#[cfg(test)]")) {
        let code = match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        };
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// Expands a `use` tree (`crate::a::{b, c::{d, e}}`) into its paths.
fn expand_use_tree(tree: &str) -> Vec<String> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or("");
        return vec![path.split("as").next().unwrap_or(path).to_owned()];
    };
    let prefix = &tree[..open];
    let inner = tree[open + 1..]
        .strip_suffix('}')
        .unwrap_or(&tree[open + 1..]);
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
        .into_iter()
        .filter(|item| !item.is_empty())
        .flat_map(|item| {
            if item == "self" {
                vec![prefix.trim_end_matches("::").to_owned()]
            } else {
                expand_use_tree(item)
                    .into_iter()
                    .map(|rest| format!("{prefix}{rest}"))
                    .collect()
            }
        })
        .collect()
}

/// Every path a module's code names: `use` trees and paths written inline, starting at
/// `crate::` or `super::`, each with the line it is on.
fn named_paths(code: &str) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let bytes = code.as_bytes();
    let mut at = 0;
    while let Some(offset) = code[at..].find("use ") {
        let start = at + offset;
        at = start + 4;
        let word_start =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        if !word_start {
            continue;
        }
        let Some(end) = code[at..].find(';') else {
            break;
        };
        let tree = &code[at..at + end];
        if tree.starts_with("crate::") || tree.starts_with("super::") {
            for path in expand_use_tree(tree) {
                found.push((path, line_of(start)));
            }
        }
        at += end;
    }
    for root in ["crate::", "super::"] {
        let mut at = 0;
        while let Some(offset) = code[at..].find(root) {
            let start = at + offset;
            at = start + root.len();
            if start > 0
                && (bytes[start - 1].is_ascii_alphanumeric()
                    || bytes[start - 1] == b'_'
                    || bytes[start - 1] == b':')
            {
                continue;
            }
            let path: String = code[start..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            found.push((path, line_of(start)));
        }
    }
    found
}

/// The module a written path leads to: the longest known module its segments start with.
fn resolve(from: &ModPath, written: &str, known: &BTreeSet<ModPath>) -> Option<ModPath> {
    let mut segments = written.split("::").filter(|s| !s.is_empty());
    let mut path: ModPath = match segments.next()? {
        "crate" => Vec::new(),
        "super" => from[..from.len().saturating_sub(1)].to_vec(),
        _ => return None,
    };
    let mut rest: Vec<&str> = segments.collect();
    while rest.first() == Some(&"super") {
        path.pop();
        rest.remove(0);
    }
    let mut best = path.clone();
    for segment in rest {
        path.push(segment.to_owned());
        if known.contains(&path) {
            best = path.clone();
        } else {
            break;
        }
    }
    Some(best)
}

/// One arrow between two rooms of the same folder, with where it was seen.
#[derive(Debug)]
struct Arrow {
    folder: ModPath,
    from: String,
    to: String,
    seen_at: String,
}

/// The arrows between sibling rooms: an import from `a::x::…` to `a::y::…` is an arrow from
/// room `x` to room `y` inside folder `a`. Imports between a module and its own parts (a
/// `mod.rs` and its files) are how Rust modules are made, not arrows.
fn arrows(modules: &[Module]) -> Vec<Arrow> {
    let known: BTreeSet<ModPath> = modules.iter().map(|m| m.path.clone()).collect();
    let mut out = Vec::new();
    for module in modules {
        for (written, line) in named_paths(&module.text) {
            let Some(target) = resolve(&module.path, &written, &known) else {
                continue;
            };
            let common = module
                .path
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            if common == module.path.len() || common == target.len() {
                continue;
            }
            out.push(Arrow {
                folder: module.path[..common].to_vec(),
                from: module.path[common].clone(),
                to: target[common].clone(),
                seen_at: format!("{}:{line} ({written})", module.file),
            });
        }
    }
    out
}

/// The groups of rooms of one folder that reach each other (strongly connected components
/// with more than one room), each with the arrows inside it.
fn cycles(arrows: &[Arrow]) -> Vec<(ModPath, Vec<String>, Vec<&Arrow>)> {
    let mut by_folder: BTreeMap<&ModPath, Vec<&Arrow>> = BTreeMap::new();
    for arrow in arrows {
        by_folder.entry(&arrow.folder).or_default().push(arrow);
    }
    let mut found = Vec::new();
    for (folder, arrows) in by_folder {
        let mut next: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for a in &arrows {
            next.entry(a.from.as_str())
                .or_default()
                .insert(a.to.as_str());
        }
        let reach = |start: &str| {
            let mut seen = BTreeSet::new();
            let mut todo = vec![start];
            while let Some(room) = todo.pop() {
                for n in next.get(room).into_iter().flatten() {
                    if seen.insert(*n) {
                        todo.push(n);
                    }
                }
            }
            seen
        };
        let rooms: BTreeSet<&str> = arrows
            .iter()
            .flat_map(|a| [a.from.as_str(), a.to.as_str()])
            .collect();
        let reaches: BTreeMap<&str, BTreeSet<&str>> =
            rooms.iter().map(|r| (*r, reach(r))).collect();
        let mut placed = BTreeSet::new();
        for room in &rooms {
            if placed.contains(room) || !reaches[room].contains(room) {
                continue;
            }
            let group: Vec<&str> = rooms
                .iter()
                .filter(|other| reaches[room].contains(*other) && reaches[*other].contains(room))
                .copied()
                .collect();
            placed.extend(group.iter().copied());
            let inside: Vec<&Arrow> = arrows
                .iter()
                .filter(|a| group.contains(&a.from.as_str()) && group.contains(&a.to.as_str()))
                .copied()
                .collect();
            found.push((
                folder.clone(),
                group.iter().map(|s| s.to_string()).collect(),
                inside,
            ));
        }
    }
    found
}

fn library_modules(root: &Path) -> Vec<Module> {
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    files
        .iter()
        .filter_map(|path| {
            let relative = path.strip_prefix(root).expect("under the manifest dir");
            let module = module_of(relative)?;
            let text = std::fs::read_to_string(path).expect("read source");
            Some(Module {
                path: module,
                file: relative.to_string_lossy().into_owned(),
                text: code_without_comments(&text),
            })
        })
        .collect()
}

/// The folders under `dir` (itself included) with more than [`FOLDER_LIMIT`] entries.
fn crowded_folders(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read folder")
        .map(|e| e.expect("entry").path())
        .collect();
    if entries.len() > FOLDER_LIMIT {
        out.push(format!(
            "{}: {} entries, more than {FOLDER_LIMIT}: give related files a room of their own",
            dir.display(),
            entries.len()
        ));
    }
    for path in entries.iter().filter(|p| p.is_dir()) {
        out.extend(crowded_folders(path));
    }
    out
}

#[test]
fn no_folder_is_crowded() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let problems = crowded_folders(&src);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_crowded_folder_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let inner = dir.path().join("room");
    std::fs::create_dir(&inner).unwrap();
    for i in 0..FOLDER_LIMIT {
        std::fs::write(inner.join(format!("f{i}.rs")), "").unwrap();
    }
    assert!(crowded_folders(dir.path()).is_empty());
    std::fs::write(inner.join("one_more.rs"), "").unwrap();
    let problems = crowded_folders(dir.path());
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("room: 17 entries"), "{problems:?}");
}

/// Each group of rooms that import each other, worded with an example import per arrow.
fn cycle_problems(modules: &[Module]) -> Vec<String> {
    let arrows = arrows(modules);
    let mut problems = Vec::new();
    for (folder, group, inside) in cycles(&arrows) {
        let folder = if folder.is_empty() {
            "src".to_owned()
        } else {
            format!("src/{}", folder.join("/"))
        };
        let mut text = format!("{folder}: rooms {} import each other:", group.join(", "));
        let mut pairs: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
        for a in inside {
            pairs.entry((&a.from, &a.to)).or_default().push(&a.seen_at);
        }
        for ((from, to), seen) in pairs {
            text.push_str(&format!(
                "\n    {from} -> {to} ({} imports), e.g. {}",
                seen.len(),
                seen[0]
            ));
        }
        problems.push(text);
    }
    problems
}

#[test]
fn arrows_between_rooms_point_one_way() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let modules = library_modules(root);
    let count = arrows(&modules).len();
    assert!(count > 100, "found only {count} arrows");
    let problems = cycle_problems(&modules);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn an_import_cycle_between_rooms_is_named() {
    let module = |path: &str, text: &str| Module {
        path: path.split("::").map(str::to_owned).collect(),
        file: format!("src/{}.rs", path.replace("::", "/")),
        text: code_without_comments(text),
    };
    let rooms = |extra: &str| {
        vec![
            module("engine", "pub mod low; pub mod high;"),
            module("engine::low", "use super::Shared;\n"),
            module("engine::low::part", "use crate::engine::low::Thing;\n"),
            module(
                "engine::high",
                "use crate::engine::{low::{self, part::X}, Shared};\n",
            ),
            module("engine::high::part", extra),
        ]
    };
    // Down only, and parts using their room: no problem.
    assert!(cycle_problems(&rooms("")).is_empty());
    // A comment naming a room above is not an import.
    assert!(cycle_problems(&rooms("// see crate::engine::high\n")).is_empty());
    let mut up = rooms("");
    up[2] = module(
        "engine::low::part",
        "fn f() { crate::engine::high::part::g() }\n",
    );
    let problems = cycle_problems(&up);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("src/engine: rooms high, low import each other")
            && problems[0].contains("low -> high (1 imports), e.g. src/engine/low/part.rs:1"),
        "{problems:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Docs: the repository cites itself, and its codemap names files that exist.
// ---------------------------------------------------------------------------------------------

/// Texts that are hashed into node ids (built-in schema descriptions, and the same text in a
/// fixture store's node), which must stay byte for byte although they cite the specification.
/// The section sign is written as an escape so that this file does not cite it itself.
const HASHED: &[&str] =
    &["the parent thread's head when a sub-workflow started this thread (SPEC \u{a7}9)"];

/// The codemaps, whose paths are most of what they say; every other page's paths are checked
/// too (links are `tests/first_hour.rs`'s to check).
const CODEMAPS: &[&str] = &["docs/ARCHITECTURE.md", "docs/performance.md"];

/// The files of the repository as git tracks them (relative paths), or, without git, every
/// file under `root`; never `vendor/` (copies of other projects) nor `target/`.
fn tracked_files(root: &Path) -> Vec<String> {
    let listed = std::process::Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split('\0')
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        });
    let files = listed.unwrap_or_else(|| {
        fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).expect("read folder") {
                let path = entry.expect("entry").path();
                let name = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                if name == ".git" || name == "target" {
                    continue;
                }
                if path.is_dir() {
                    walk(&path, root, out);
                } else {
                    out.push(name);
                }
            }
        }
        let mut out = Vec::new();
        walk(root, root, &mut out);
        out
    });
    files
        .into_iter()
        .filter(|p| !p.starts_with("vendor/") && !p.starts_with("target/"))
        .filter(|p| root.join(p).is_file())
        .collect()
}

/// Where `text` cites the specification, as `line N: …`: the word `SPEC` followed by a section
/// sign (comment markers and line breaks between them allowed), by `.md`, or by `'s`. The
/// [`HASHED`] texts are left out.
fn spec_citations(text: &str) -> Vec<String> {
    let mut text = text.to_owned();
    for hashed in HASHED {
        text = text.replace(hashed, "");
    }
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let mut found = Vec::new();
    for (at, _) in text.match_indices("SPEC") {
        let before = text[..at].chars().next_back();
        let rest = &text[at + 4..];
        if before.is_some_and(word) || rest.chars().next().is_some_and(word) {
            continue;
        }
        let after_markers =
            rest.trim_start_matches(|c: char| c.is_whitespace() || "/!#*".contains(c));
        if after_markers.starts_with('\u{a7}') || rest.starts_with(".md") || rest.starts_with("'s ")
        {
            let line = text[..at].matches('\n').count() + 1;
            let shown: String = text[at..].chars().take(24).collect();
            found.push(format!("line {line}: {}", shown.replace('\n', " ")));
        }
    }
    found
}

/// The anchors of a Markdown page's headings (outside fenced code blocks).
fn page_anchors(page: &str) -> Vec<String> {
    let mut fenced = false;
    page.lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
            }
            !fenced && l.starts_with('#')
        })
        .map(|l| heading_anchor(l.trim_start_matches('#')))
        .collect()
}

/// The part of tracked file `name` whose citations of `docs/` are the repository's own: all of a
/// Markdown page, the comments of any other file (`//` in Rust, `#` elsewhere); nothing of the
/// fixtures under `tests/fixtures/`, which play other repositories with docs of their own.
fn citing_text(name: &str, text: &str) -> String {
    if name.starts_with("tests/fixtures/") {
        return String::new();
    }
    if name.ends_with(".md") {
        return text.to_owned();
    }
    let marker = if name.ends_with(".rs") { "//" } else { "#" };
    text.lines()
        .filter(|l| l.trim_start().starts_with(marker))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `docs/<page>.md` and `docs/<page>.md#anchor` citations in `text`, as (page, anchor).
fn doc_citations(text: &str) -> Vec<(String, String)> {
    let path_char = |c: char| c.is_alphanumeric() || "/._-".contains(c);
    let name_char = |c: char| c.is_alphanumeric() || "_-".contains(c);
    let mut found = Vec::new();
    for (at, _) in text.match_indices("docs/") {
        if text[..at].chars().next_back().is_some_and(path_char) {
            continue;
        }
        let rest = &text[at + 5..];
        let name_len = rest.find(|c: char| !name_char(c)).unwrap_or(rest.len());
        if name_len == 0 || !rest[name_len..].starts_with(".md") {
            continue;
        }
        let page = format!("docs/{}.md", &rest[..name_len]);
        let tail = &rest[name_len + 3..];
        let anchor = match tail.strip_prefix('#') {
            Some(a) => a[..a.find(|c: char| !name_char(c)).unwrap_or(a.len())].to_owned(),
            None => String::new(),
        };
        found.push((page, anchor));
    }
    found
}

/// What is wrong with the doc citations of `text`: a page that `read_page` cannot find, or an
/// anchor that is none of its headings'.
fn citation_problems(text: &str, read_page: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    let mut problems = Vec::new();
    for (page, anchor) in doc_citations(text) {
        let Some(body) = read_page(&page) else {
            problems.push(format!("cites {page}, which is not in the repository"));
            continue;
        };
        if !anchor.is_empty() && !page_anchors(&body).contains(&anchor) {
            problems.push(format!(
                "cites {page}#{anchor}, but {page} has no such heading"
            ));
        }
    }
    problems
}

/// The repository paths (`src/…`, `tests/…`, `docs/…`, `benches/…`, `scripts/…`) named in
/// backticks in `text` for which `exists` says no. Patterns (`<id>`, `*`, `{…}`, `…`) are not
/// paths and are left alone.
fn missing_paths(text: &str, exists: &dyn Fn(&str) -> bool) -> Vec<String> {
    let roots = ["src/", "tests/", "docs/", "benches/", "scripts/"];
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|quoted| roots.iter().any(|r| quoted.starts_with(r)))
        .filter(|quoted| !quoted.contains(['<', '*', '{', '\u{2026}', ' ', '#']))
        .filter(|quoted| !exists(quoted.trim_end_matches('/')))
        .map(|quoted| format!("names `{quoted}`, which is not in the repository"))
        .collect()
}

#[test]
fn the_repository_cites_its_own_docs_and_they_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = tracked_files(root);
    assert!(
        files.len() > 100,
        "only {} tracked files found",
        files.len()
    );
    let read_page = |page: &str| std::fs::read_to_string(root.join(page)).ok();
    let mut problems = Vec::new();
    let mut cited = 0;
    for name in &files {
        let Ok(text) = std::fs::read_to_string(root.join(name)) else {
            continue; // not text (an image)
        };
        for found in spec_citations(&text) {
            problems.push(format!(
                "{name}: cites the specification, {found}: cite docs/ instead"
            ));
        }
        let citing = citing_text(name, &text);
        cited += doc_citations(&citing).len();
        for problem in citation_problems(&citing, &read_page) {
            problems.push(format!("{name}: {problem}"));
        }
    }
    assert!(
        cited > 50,
        "only {cited} citations of docs/ found: the check looked at little"
    );
    let pages: Vec<&String> = files
        .iter()
        .filter(|f| f.as_str() == "README.md" || (f.starts_with("docs/") && f.ends_with(".md")))
        .collect();
    for codemap in CODEMAPS {
        assert!(
            pages.iter().any(|p| p == codemap),
            "{codemap} is not tracked"
        );
    }
    for page in pages {
        let text = std::fs::read_to_string(root.join(page)).expect("read page");
        for problem in missing_paths(&text, &|p| root.join(p).exists()) {
            problems.push(format!("{page}: {problem}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_spec_citation_is_found_and_hashed_text_is_not() {
    let section = "\u{a7}";
    let cited = format!("//! The store.\n//! Its bytes (SPEC {section}2.1).\n");
    let found = spec_citations(&cited);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with(&format!("line 2: SPEC {section}2.1")),
        "{found:?}"
    );
    // Across a wrapped comment line, by file name, and by possessive.
    let wrapped = format!("/// a\n/// set (SPEC\n/// {section}6.4). A broken");
    assert_eq!(spec_citations(&wrapped).len(), 1, "{wrapped}");
    assert_eq!(spec_citations(concat!("see SPEC", ".md")).len(), 1);
    assert_eq!(spec_citations(concat!("SPEC", "'s durability")).len(), 1);
    // Not citations: another word, a name in code, a string a test looks for.
    for fine in [
        "INVALID_AUTHORIZATION_SPECIFICATION",
        "[\"SPEC\", \"x\"]",
        "W3C \u{a7}6.6",
    ] {
        assert!(spec_citations(fine).is_empty(), "{fine}");
    }
    assert!(spec_citations(&format!("\"description\": \"{}\"", HASHED[0])).is_empty());
}

#[test]
fn a_citation_of_a_missing_page_or_heading_is_named() {
    let page = "# Title\n\n## The storage root\n\n```sh\n# not a heading\n```\n";
    let read = |p: &str| (p == "docs/store.md").then(|| page.to_owned());
    let good = concat!(
        "//! Files (`docs/",
        "store.md#the-storage-root`), `docs/",
        "store.md`."
    );
    assert_eq!(doc_citations(good).len(), 2);
    assert!(citation_problems(good, &read).is_empty());
    let bad_anchor = concat!("// see docs/", "store.md#not-a-heading");
    let problems = citation_problems(bad_anchor, &read);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("no such heading"), "{problems:?}");
    // A heading inside a code block is not a heading.
    assert_eq!(
        citation_problems(concat!("docs/", "store.md#not-a-heading"), &read).len(),
        1
    );
    let bad_page = concat!("(`docs/", "nowhere.md`)");
    assert_eq!(citation_problems(bad_page, &read).len(), 1);
    // Another folder's `docs/` is not ours.
    assert!(doc_citations(concat!("vendor/x/docs/", "a.md")).is_empty());
    assert_eq!(heading_anchor(" `uwf cas`"), "uwf-cas");
    assert_eq!(
        heading_anchor(" The extraction fallback (layer 3)"),
        "the-extraction-fallback-layer-3"
    );
}

#[test]
fn only_comments_and_pages_cite_and_fixtures_do_not() {
    let code = concat!(
        "// see `docs/",
        "store.md`\nlet page = \"docs/",
        "webhooks.md\";\n"
    );
    assert_eq!(doc_citations(&citing_text("tests/a.rs", code)).len(), 1);
    let yaml = concat!("# docs/", "store.md\nquery: docs/", "plugins.md\n");
    assert_eq!(
        doc_citations(&citing_text("examples/a.yaml", yaml)).len(),
        1
    );
    assert_eq!(doc_citations(&citing_text("docs/a.md", yaml)).len(), 2);
    assert!(citing_text("tests/fixtures/repo/README.md", yaml).is_empty());
}

#[test]
fn a_codemap_path_that_does_not_exist_is_named() {
    let exists = |p: &str| p == "src/cas" || p == "src/cas/id.rs";
    let text =
        "`src/cas/`, `src/cas/id.rs`, `runs/<id>.log`, `src/gone.rs`, `tests/*.rs`, `uwf cas`";
    let problems = missing_paths(text, &exists);
    assert_eq!(
        problems,
        vec!["names `src/gone.rs`, which is not in the repository"]
    );
}

/// What asks which backend a root uses: only the storage layer and the PostgreSQL backend may.
const BACKEND_QUESTIONS: &[&str] = &[
    "storage::pg(",
    "storage::backend(",
    ".is_pg()",
    "remote().is_some()",
    "remote().is_none()",
    "Backend::Pg",
    "Backend::Dir",
    // A side of a copy or a maintenance task holding a database of its own.
    "PgStore",
];

/// The folders whose code may know which backend a root uses.
const STORAGE_LAYER: &[&str] = &["src/engine/storage/", "src/pg/"];

/// The backend questions in one file's code before its tests, as `name:line: question`.
fn backend_questions(name: &str, text: &str) -> Vec<String> {
    let code = code_without_comments(text);
    code.lines()
        .take_while(|l| !l.starts_with("#[cfg(test)]"))
        .enumerate()
        .flat_map(|(i, line)| {
            BACKEND_QUESTIONS
                .iter()
                .filter(move |q| line.contains(*q))
                .map(move |q| format!("{name}:{}: asks the backend (`{q}`)", i + 1))
        })
        .collect()
}

#[test]
fn only_the_storage_layer_asks_which_backend_a_root_uses() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    let mut problems = Vec::new();
    for path in &files {
        let name = path
            .strip_prefix(root)
            .expect("under the manifest dir")
            .to_string_lossy()
            .into_owned();
        if STORAGE_LAYER.iter().any(|dir| name.starts_with(dir)) {
            continue;
        }
        let text = std::fs::read_to_string(path).expect("read source");
        problems.extend(backend_questions(&name, &text));
    }
    assert!(
        problems.is_empty(),
        "ask the storage handle (`storage::handle(root)`) instead:\n{}",
        problems.join("\n")
    );
}

#[test]
fn a_backend_question_is_found_in_code_and_not_in_comments_or_tests() {
    let text = "//! Says storage::pg( in a doc.\nfn f() {\n    if storage::pg(root)?.is_some() {}\n    \
                // if watch.is_pg() {}\n}\n#[cfg(test)]\nmod tests { fn g() { w.is_pg(); } }\n";
    assert_eq!(
        backend_questions("src/x.rs", text),
        vec!["src/x.rs:3: asks the backend (`storage::pg(`)".to_owned()]
    );
}
