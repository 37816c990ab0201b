//! House rules checked on every test run, as rust-analyzer's `tidy` test does, so they hold
//! without anyone remembering them: every source file says what it is for in a `//!` line at
//! its top, and no file grows past [`LIMIT`] lines of code.
//!
//! Lines of code: the lines before a file's `#[cfg(test)]` module, without blank lines and
//! `//` comment lines. The files in [`OVER_LIMIT`] were past the limit when this test was
//! written; each may not grow, and its entry must go once it is under the limit (the test says
//! so), so the list only shrinks.

use std::path::{Path, PathBuf};

/// The most lines of code a source file may have.
const LIMIT: usize = 700;

/// Files past [`LIMIT`] today, with the size they may not exceed.
const OVER_LIMIT: &[(&str, usize)] = &[
    ("src/engine/index_db.rs", 759),
    ("src/cas/store/mod.rs", 747),
];

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

fn code_lines(text: &str) -> usize {
    text.lines()
        .take_while(|l| !l.starts_with("#[cfg(test)]"))
        .filter(|l| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with("//")
        })
        .count()
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
        if !text.starts_with("//!") {
            problems.push(format!(
                "{name}: does not start with a `//!` line saying what it is for"
            ));
        }
        let lines = code_lines(&text);
        match OVER_LIMIT.iter().find(|(f, _)| *f == name) {
            Some((_, ceiling)) if lines > *ceiling => problems.push(format!(
                "{name}: {lines} lines of code, more than the {ceiling} it had (split it instead)"
            )),
            Some(_) if lines <= LIMIT => problems.push(format!(
                "{name}: {lines} lines of code, under the limit now: remove it from OVER_LIMIT"
            )),
            Some(_) => {}
            None if lines > LIMIT => problems.push(format!(
                "{name}: {lines} lines of code, more than {LIMIT}: split it into modules"
            )),
            None => {}
        }
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
fn lines_of_code_leave_out_blanks_comments_and_tests() {
    let text =
        "//! doc\n\nuse a;\n    // comment\nfn f() {}\n#[cfg(test)]\nmod tests {\n fn g() {}\n}\n";
    assert_eq!(code_lines(text), 2);
}
