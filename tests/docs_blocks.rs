//! Every ```sh block under `docs/` runs as pasted on a fresh store, or says in the page why not.
//!
//! A block is run by this test unless an HTML comment right above its fence says otherwise:
//!
//! - `<!-- before it runs: … -->` holds hidden lines that make the state the page's prose
//!   assumes (a registered workflow, a thread in `$T`); they run first, in the same shell.
//! - `<!-- script: WHAT -->`: the block is a script file shown (it starts with `#!`), for a
//!   program the reader has and this machine lacks. It is not run, but its interpreter
//!   (`sh` or `bash`) parses it with `-n`, so a syntax error fails this test. A block that starts
//!   with `#!` must be marked so, and a block marked so must start with `#!`.
//! - `<!-- not run: REASON -->`: the block talks to a paid provider, or starts a server that runs
//!   until stopped, or takes minutes. The reason is printed by this test.
//! - `<!-- run by tests/readme_tour.rs -->`: that test runs the block (it needs FUSE,
//!   PostgreSQL, or looks at what the block prints).
//!
//! A run is one fresh `bash -x` in a temp folder holding the clone's `examples/`, with `uwf` from this
//! build first on PATH and an empty HOME, TMPDIR and storage root. A line that exits non-zero
//! fails the test, unless its own comment says it "exits N" with that N (the docs say so where
//! an exit code is the point, as `thread run`'s 4 for a thread waiting for a person).

use std::path::{Path, PathBuf};
use std::process::Command;

/// What the page says about one block.
#[derive(Debug)]
enum Mark {
    Run { before: String },
    NotRun(String),
    Script(String),
    ElsewhereRun,
}

/// One ```sh block of a page.
#[derive(Debug)]
struct Block {
    page: String,
    line: usize,
    text: String,
    mark: Mark,
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The ```sh blocks of `page` with their marks.
fn blocks_of(page: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(page).unwrap_or_else(|e| panic!("{page:?}: {e}"));
    let lines: Vec<&str> = text.lines().collect();
    let name = page
        .strip_prefix(repo())
        .unwrap_or(page)
        .display()
        .to_string();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_end() != "```sh" {
            // Fences of other languages are skipped whole, so a ```sh inside them is not one.
            if lines[i].starts_with("```") {
                i += 1;
                while i < lines.len() && !lines[i].starts_with("```") {
                    i += 1;
                }
            }
            i += 1;
            continue;
        }
        let start = i;
        let mut body = Vec::new();
        i += 1;
        while i < lines.len() && !lines[i].starts_with("```") {
            body.push(lines[i]);
            i += 1;
        }
        blocks.push(Block {
            page: name.clone(),
            line: start + 1,
            text: body.join("\n") + "\n",
            mark: mark_above(&lines[..start]),
        });
        i += 1;
    }
    blocks
}

/// The mark in the HTML comment that ends right above a fence (blank lines between allowed).
fn mark_above(lines: &[&str]) -> Mark {
    let mut end = lines.len();
    while end > 0 && lines[end - 1].trim().is_empty() {
        end -= 1;
    }
    if end == 0 || !lines[end - 1].trim_end().ends_with("-->") {
        return Mark::Run {
            before: String::new(),
        };
    }
    let mut start = end - 1;
    while !lines[start].trim_start().starts_with("<!--") {
        assert!(start > 0, "an HTML comment's end without its start");
        start -= 1;
    }
    let comment = lines[start..end].join("\n");
    let inner = comment
        .trim()
        .trim_start_matches("<!--")
        .trim_end_matches("-->")
        .trim();
    if let Some(reason) = inner.strip_prefix("not run:") {
        Mark::NotRun(reason.trim().to_owned())
    } else if let Some(what) = inner.strip_prefix("script:") {
        Mark::Script(what.trim().to_owned())
    } else if inner == "run by tests/readme_tour.rs" {
        Mark::ElsewhereRun
    } else if let Some(before) = inner.strip_prefix("before it runs:") {
        Mark::Run {
            before: before.trim().to_owned() + "\n",
        }
    } else {
        Mark::Run {
            before: String::new(),
        }
    }
}

fn every_block() -> Vec<Block> {
    let mut pages: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    pages.iter().flat_map(|p| blocks_of(p)).collect()
}

/// The shell run: a line that fails stops the run unless its own text says it "exits" with
/// that code.
const GUARD: &str = r#"trap 'rc=$?; l=$(sed -n "${LINENO}p" "$0"); case "$l" in *"exits $rc"*) ;; *) echo "that line exited $rc: $l" >&2; exit 99;; esac' ERR
"#;

/// The interpreter a script block's `#!` line names, if it is one this test can parse with.
fn shell_of(text: &str) -> Option<&'static str> {
    let first = text.lines().next()?.strip_prefix("#!")?;
    let program = first.split_whitespace().next_back()?;
    ["sh", "bash"]
        .into_iter()
        .find(|&s| program == s || program.ends_with(&format!("/{s}")))
}

/// Parses a script block with its shell's `-n` (nothing runs): `Err` holds why it does not parse.
fn parse_check(block: &Block) -> Result<&'static str, String> {
    let Some(shell) = shell_of(&block.text) else {
        return Err("a script block must start with `#!/bin/sh` or `#!/bin/bash`".into());
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("script.sh");
    std::fs::write(&file, &block.text).expect("write script");
    let out = Command::new(shell)
        .arg("-n")
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("run {shell} -n: {e}"));
    if out.status.success() {
        Ok(shell)
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn run(block: &Block, before: &str) -> std::process::Output {
    let home = tempfile::tempdir().expect("temp dir");
    let store = home.path().join("store");
    // The blocks run from a folder of their own that has the clone's examples: what they
    // write (a worker's log, a thread's files) stays out of the clone.
    let work = home.path().join("work");
    std::fs::create_dir(&work).expect("work dir");
    std::os::unix::fs::symlink(repo().join("examples"), work.join("examples")).expect("examples");
    let script = home.path().join("block.sh");
    std::fs::write(&script, format!("{GUARD}{before}{}exit 0\n", block.text))
        .expect("write script");
    let bin = Path::new(env!("CARGO_BIN_EXE_uwf"))
        .parent()
        .expect("bin dir");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("bash")
        .args(["--noprofile", "--norc", "-x"])
        .arg(&script)
        .current_dir(&work)
        .env_clear()
        .env("PATH", path)
        .env("HOME", home.path())
        .env("TMPDIR", home.path())
        .env("UWF_STORAGE_ROOT", &store)
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run bash")
}

#[test]
fn every_sh_block_under_docs_runs_as_pasted_or_says_why_not() {
    let blocks = every_block();
    assert!(blocks.len() >= 10, "found only {} blocks", blocks.len());
    let mut failures = Vec::new();
    let mut ran = 0;
    let mut scripts = 0;
    for block in &blocks {
        if block.text.starts_with("#!") && !matches!(block.mark, Mark::Script(_)) {
            failures.push(format!(
                "{}:{}: a block that starts with `#!` is a script file: mark it `<!-- script: WHAT -->` so it is parse-checked",
                block.page, block.line
            ));
            continue;
        }
        match &block.mark {
            Mark::Script(what) => {
                assert!(
                    what.len() >= 10,
                    "{}:{}: a script block must say what it stands for",
                    block.page,
                    block.line
                );
                match parse_check(block) {
                    Ok(shell) => {
                        scripts += 1;
                        println!(
                            "parsed with {shell} -n, not run: {}:{}: {what}",
                            block.page, block.line
                        );
                    }
                    Err(why) => failures.push(format!(
                        "{}:{}: the script does not parse:\n{}\n{why}",
                        block.page, block.line, block.text
                    )),
                }
            }
            Mark::NotRun(reason) => {
                assert!(
                    reason.len() >= 10,
                    "{}:{}: a block not run must say why",
                    block.page,
                    block.line
                );
                println!("not run: {}:{}: {reason}", block.page, block.line);
            }
            Mark::ElsewhereRun => {
                println!("run by tests/readme_tour.rs: {}:{}", block.page, block.line)
            }
            Mark::Run { before } => {
                ran += 1;
                let out = run(block, before);
                let stderr = String::from_utf8_lossy(&out.stderr);
                if !out.status.success() {
                    failures.push(format!(
                        "{}:{} ({:?}):\n{}\nstderr:\n{stderr}\nstdout:\n{}",
                        block.page,
                        block.line,
                        out.status.code(),
                        block.text,
                        String::from_utf8_lossy(&out.stdout)
                    ));
                } else {
                    println!("ran: {}:{}", block.page, block.line);
                }
            }
        }
    }
    assert!(ran >= 5, "only {ran} blocks ran");
    assert!(
        scripts >= 3,
        "only {scripts} script blocks were parse-checked"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn a_failing_line_fails_the_run_unless_it_says_its_exit_code() {
    let block = |text: &str| Block {
        page: "test".into(),
        line: 1,
        text: text.into(),
        mark: Mark::Run {
            before: String::new(),
        },
    };
    let failed = |out: &std::process::Output| !out.status.success();
    assert!(failed(&run(&block("false\necho after\n"), "")));
    assert!(failed(&run(&block("uwf thread show NOPE\n"), "")));
    assert!(!failed(&run(
        &block("sh -c 'exit 4'   # exits 4 here\n"),
        ""
    )));
    assert!(failed(&run(
        &block("sh -c 'exit 5'   # exits 4 here\n"),
        ""
    )));
    assert!(!failed(&run(&block("uwf --version\n"), "")));
}

#[test]
fn a_script_block_is_parsed_and_a_syntax_error_fails() {
    let block = |text: &str| Block {
        page: "test".into(),
        line: 1,
        text: text.into(),
        mark: Mark::Script("a script file".into()),
    };
    assert_eq!(
        parse_check(&block("#!/bin/sh\nuwf agent prompt \"$1\" | my-llm-cli\n")),
        Ok("sh")
    );
    assert_eq!(
        parse_check(&block("#!/usr/bin/env bash\n[[ -n $1 ]] && echo yes\n")),
        Ok("bash")
    );
    // Parsed, never run: a script that would remove a file leaves it.
    let dir = tempfile::tempdir().unwrap();
    let kept = dir.path().join("kept");
    std::fs::write(&kept, "x").unwrap();
    assert!(parse_check(&block(&format!("#!/bin/sh\nrm {}\n", kept.display()))).is_ok());
    assert!(kept.exists(), "a script block was run, not parsed");
    let err = parse_check(&block("#!/bin/sh\nif true; then echo unclosed\n")).unwrap_err();
    assert!(!err.is_empty(), "an unclosed if must not parse");
    assert!(parse_check(&block("#!/usr/bin/python3\nprint(1)\n")).is_err());
    assert!(parse_check(&block("echo no shebang\n")).is_err());
}

#[test]
fn marks_are_read_from_the_comment_above_the_fence() {
    let page = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        page.path(),
        "# P\n\n<!-- not run: a script file, shown -->\n```sh\nrm -rf /\n```\n\n\
         <!-- before it runs:\nT=1\n-->\n\n```sh\necho $T\n```\n\n```yaml\na: 1\n```\n\n```sh\nls\n```\n\n\
         <!-- script: my-agent.sh, for a CLI this machine lacks -->\n```sh\n#!/bin/sh\ntrue\n```\n",
    )
    .unwrap();
    let blocks = blocks_of(page.path());
    assert_eq!(blocks.len(), 4, "{blocks:?}");
    assert!(
        matches!(&blocks[3].mark, Mark::Script(w) if w == "my-agent.sh, for a CLI this machine lacks")
    );
    assert!(matches!(&blocks[0].mark, Mark::NotRun(r) if r == "a script file, shown"));
    assert!(matches!(&blocks[1].mark, Mark::Run { before } if before == "T=1\n"));
    assert!(matches!(&blocks[2].mark, Mark::Run { before } if before.is_empty()));
}
