//! Project knowledge end to end, through the real binary: `uwf knowledge sync` over a fixture
//! repository (a fictional project with 20 queries whose best file is known), offline BM25
//! ranking, fusion with embeddings from the mock server (which counts what it embeds), the
//! incremental sync, `-g` across repositories, and the errors a user meets first.

mod common;
mod mock_llm;

use std::path::{Path, PathBuf};

use common::{Env, json};
use mock_llm::Mock;
use serde::Deserialize;

#[derive(Deserialize)]
struct Query {
    query: String,
    best: String,
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/knowledge")
}

fn queries() -> Vec<Query> {
    let text = std::fs::read_to_string(fixture().join("queries.yaml")).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

/// A copy of the fixture repository under the test's directory (syncs write nothing into a
/// repository, but some tests edit files).
fn copy_repo(env: &Env, name: &str) -> PathBuf {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }
    let repo = env.dir.path().join(name);
    copy(&fixture().join("repo"), &repo);
    repo
}

fn embed_config(env: &Env, mock: &Mock) {
    std::fs::write(
        env.root().join("config.yaml"),
        format!(
            "providers:\n  mock: {{ baseUrl: '{}', timeout: 5, retries: 0 }}\n\
             models:\n  emb: {{ provider: mock, name: mock-embed-1 }}\n\
             modelOverrides:\n  embed: emb\n",
            mock.base_url
        ),
    )
    .unwrap();
}

/// The texts the mock embedded so far.
fn embedded(mock: &Mock) -> Vec<String> {
    mock.requests()
        .iter()
        .filter(|r| r.path.ends_with("/embeddings"))
        .flat_map(|r| {
            r.body["input"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `knowledge sync --json --repo REPO`: its report.
fn sync(env: &Env, repo: &Path) -> serde_json::Value {
    json(&env.ok(&[
        "knowledge",
        "sync",
        "--json",
        "--repo",
        repo.to_str().unwrap(),
    ]))
}

/// The hits of a query, as JSON objects.
fn query(env: &Env, repo: &Path, text: &str) -> Vec<serde_json::Value> {
    let out = env.ok(&[
        "knowledge",
        "query",
        "--json",
        "--repo",
        repo.to_str().unwrap(),
        "--limit",
        "10",
        text,
    ]);
    out.lines().map(json).collect()
}

/// For each fixture query, the rank of its best file among the hits' files (0 = first), or
/// `None` when it is not among them; printed, so a failure shows the whole picture.
fn ranks(env: &Env, repo: &Path, label: &str) -> Vec<Option<usize>> {
    let mut ranks = Vec::new();
    for q in queries() {
        let hits = query(env, repo, &q.query);
        let files: Vec<&str> = hits.iter().map(|h| h["file"].as_str().unwrap()).collect();
        for file in &files {
            assert!(
                !file.starts_with("docs/drafts/") && *file != "notes.txt",
                "{file} is not included by knowledge.yaml"
            );
        }
        let mut seen = Vec::new();
        for f in &files {
            if !seen.contains(f) {
                seen.push(*f);
            }
        }
        let rank = seen.iter().position(|f| *f == q.best);
        println!("{label}: {rank:?} {} → {:?}", q.query, seen.first());
        if rank != Some(0) {
            for h in hits.iter().take(4) {
                println!(
                    "    {} {}-{} score {} words {} meaning {}",
                    h["file"],
                    h["startLine"],
                    h["endLine"],
                    h["score"],
                    h["lexical"],
                    h["semantic"]
                );
            }
        }
        ranks.push(rank);
    }
    ranks
}

fn first_share(ranks: &[Option<usize>]) -> f64 {
    ranks.iter().filter(|r| **r == Some(0)).count() as f64 / ranks.len() as f64
}

#[test]
fn offline_words_put_the_right_file_first() {
    let env = Env::new();
    let repo = copy_repo(&env, "tidewater");
    let report = sync(&env, &repo);
    let files = report["files"].as_u64().unwrap();
    assert!(files >= 30, "{report}");
    assert_eq!(report["changed"], files, "{report}");
    assert!(
        report.get("embedded").is_none(),
        "no model, no embeddings: {report}"
    );

    let ranks = ranks(&env, &repo, "words");
    let share = first_share(&ranks);
    assert!(
        share >= 0.8,
        "the best file came first for {:.0}% of the queries",
        share * 100.0
    );

    // A hit says where it is and what it says.
    let hit = &query(&env, &repo, "signs the body of outgoing callback requests")[0];
    assert_eq!(hit["file"], "src/webhooks/signature.rs", "{hit}");
    let (start, end) = (
        hit["startLine"].as_u64().unwrap(),
        hit["endLine"].as_u64().unwrap(),
    );
    let source = std::fs::read_to_string(repo.join("src/webhooks/signature.rs")).unwrap();
    let lines: Vec<&str> = source.lines().collect();
    assert_eq!(
        hit["text"],
        lines[start as usize - 1..end as usize].join("\n")
    );
    assert!(hit["lexical"].as_f64().unwrap() > 0.0 && hit.get("semantic").is_none());

    // -q prints file:lines; a second sync of an unchanged repository chunks nothing.
    let quiet = env.ok(&[
        "knowledge",
        "query",
        "-q",
        "--repo",
        repo.to_str().unwrap(),
        "webhook signature",
    ]);
    assert!(
        quiet
            .lines()
            .all(|l| l.rsplit_once(':').is_some_and(|(_, r)| r.contains('-'))),
        "{quiet}"
    );
    let again = sync(&env, &repo);
    assert_eq!(
        (again["changed"].as_u64(), again["addedChunks"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(again["chunks"], report["chunks"]);

    // doctor, run in the repository, says when its index is behind its files.
    let doctor = |repo: &Path| {
        let out = env
            .uwf()
            .current_dir(repo)
            .args([
                "doctor",
                "--skip",
                "fuse",
                "--skip",
                "providers",
                "--skip",
                "agents",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let report_line = doctor(&repo);
    assert!(
        report_line.contains("ok   knowledge: 1 repository indexed")
            && !report_line.contains("is behind"),
        "{report_line}"
    );
    std::fs::write(
        repo.join("docs/new-page.md"),
        "# New\n\nA page written after the sync.\n",
    )
    .unwrap();
    std::fs::remove_file(repo.join("src/webhooks/signature.rs")).unwrap();
    let behind = doctor(&repo);
    assert!(behind.contains("is behind its files (1 file changed or new, 1 file removed since its last sync): run `uwf knowledge sync`"), "{behind}");

    // A deleted file's chunks go; the query no longer finds it.
    let after = sync(&env, &repo);
    assert_eq!(after["removed"], 1, "{after}");
    let hits = query(&env, &repo, "signs the body of outgoing callback requests");
    assert!(
        hits.iter()
            .all(|h| h["file"] != "src/webhooks/signature.rs")
    );
}

#[test]
fn embeddings_fuse_with_words_and_no_text_is_embedded_twice() {
    let mock = Mock::start(vec![]);
    let env = Env::new();
    embed_config(&env, &mock);
    let repo = copy_repo(&env, "tidewater");
    let report = sync(&env, &repo);
    let chunks = report["chunks"].as_u64().unwrap() as usize;
    let first = embedded(&mock);
    assert_eq!(
        report["embedded"].as_u64(),
        Some(first.len() as u64),
        "{report}"
    );
    assert!(
        first.len() <= chunks && first.len() + 2 >= chunks,
        "{} texts for {chunks} chunks",
        first.len()
    );
    let mut distinct = first.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), first.len(), "a text was sent twice");

    // The fused ranking is at least as good as words alone (same repository, no model).
    let words_only = Env::new();
    words_only.ok(&["knowledge", "sync", "--repo", repo.to_str().unwrap()]);
    let lexical = ranks(&words_only, &repo, "words");
    let fused = ranks(&env, &repo, "fused");
    assert!(
        first_share(&fused) >= first_share(&lexical),
        "fused {} < words {}",
        first_share(&fused),
        first_share(&lexical)
    );
    assert!(first_share(&fused) >= 0.8);
    let hit = &query(&env, &repo, "webhook signature")[0];
    assert!(hit["semantic"].as_f64().is_some(), "{hit}");

    // Queries were embedded once each; asking again embeds nothing.
    let before = embedded(&mock).len();
    query(&env, &repo, &queries()[0].query);
    assert_eq!(
        embedded(&mock).len(),
        before,
        "a repeated query is embedded again"
    );

    // Nothing changed: nothing is sent. One file edited: only its changed chunk is.
    let again = sync(&env, &repo);
    assert_eq!(again["embedded"], 0, "{again}");
    assert_eq!(embedded(&mock).len(), before);
    let file = repo.join("docs/webhooks.md");
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str("\n## Replaying deliveries\n\nA failed delivery can be sent again with `tidewater webhooks replay ID`.\n");
    std::fs::write(&file, text).unwrap();
    let touched = sync(&env, &repo);
    assert_eq!(
        (touched["changed"].as_u64(), touched["embedded"].as_u64()),
        (Some(1), Some(1)),
        "{touched}"
    );
    let sent = &embedded(&mock)[before..];
    assert_eq!(sent.len(), 1);
    assert!(
        sent[0].starts_with("docs/webhooks.md\n") && sent[0].contains("Replaying deliveries"),
        "{sent:?}"
    );
    assert_eq!(
        query(&env, &repo, "replay a failed webhook delivery")[0]["file"],
        "docs/webhooks.md"
    );

    // doctor reports the index and its vectors.
    let doctor = env.ok(&[
        "doctor",
        "--skip",
        "fuse",
        "--skip",
        "providers",
        "--skip",
        "agents",
    ]);
    assert!(doctor.contains(&format!("ok   knowledge: 1 repository indexed, {} chunks, {} embedded by emb (mock/mock-embed-1)", chunks + 1, chunks + 1)), "{doctor}");
}

#[test]
fn an_unreachable_embedding_model_leaves_the_words() {
    let env = Env::new();
    let repo = copy_repo(&env, "tidewater");
    let mock = Mock::start(vec![]);
    embed_config(&env, &mock);
    drop(mock); // nobody listens at its address any more
    let out = env.run(&[
        "knowledge",
        "sync",
        "--json",
        "--repo",
        repo.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let report = json(&String::from_utf8_lossy(&out.stdout));
    assert!(
        report["embedError"]
            .as_str()
            .is_some_and(|e| e.contains("/embeddings")),
        "{report}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("warning: embedding stopped"), "{stderr}");
    let out = env.run(&[
        "knowledge",
        "query",
        "--json",
        "--repo",
        repo.to_str().unwrap(),
        "webhook signature",
    ]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("warning: ranking by words only"));
    assert_eq!(
        json(String::from_utf8_lossy(&out.stdout).lines().next().unwrap())["file"],
        "src/webhooks/signature.rs"
    );
}

#[test]
fn global_search_spans_repositories_and_errors_say_what_to_do() {
    let env = Env::new();
    let tidewater = copy_repo(&env, "tidewater");
    env.ok(&["knowledge", "sync", "--repo", tidewater.to_str().unwrap()]);
    let other = env.dir.path().join("lighthouse");
    std::fs::create_dir_all(other.join("docs")).unwrap();
    std::fs::write(other.join("knowledge.yaml"), "include: ['docs/**']\n").unwrap();
    std::fs::write(
        other.join("docs/beacons.md"),
        "# Beacons\n\n## Rotating the lamp\n\nThe lamp rotates every 7.5 seconds; the gearbox is oiled monthly.\n",
    )
    .unwrap();
    // The repository is found from a directory inside it.
    let inside = other.join("docs");
    let synced = env
        .uwf()
        .current_dir(&inside)
        .args(["knowledge", "sync", "--json"])
        .output()
        .unwrap();
    assert!(
        synced.status.success(),
        "{}",
        String::from_utf8_lossy(&synced.stderr)
    );

    let hits: Vec<_> = env
        .ok(&[
            "knowledge",
            "query",
            "-g",
            "--json",
            "how often does the lamp rotate",
        ])
        .lines()
        .map(json)
        .collect();
    assert_eq!(hits[0]["file"], "docs/beacons.md", "{hits:?}");
    assert_eq!(
        hits[0]["repo"],
        std::fs::canonicalize(&other).unwrap().to_str().unwrap()
    );
    assert_eq!(hits[0]["startLine"], 3);
    // Without -g, the search stays in one repository.
    let local = query(&env, &tidewater, "how often does the lamp rotate");
    assert!(local.iter().all(|h| h["file"] != "docs/beacons.md"));
    let status: Vec<_> = env
        .ok(&["knowledge", "status", "--json"])
        .lines()
        .map(json)
        .collect();
    assert_eq!(status.len(), 2, "{status:?}");

    // An empty query is a usage error, as --repo with -g is.
    let err = env.fails(&["knowledge", "query", "-g", "  "], 2);
    assert!(err.contains("the query is empty"), "{err}");
    // --repo and -g exclude each other (a usage error).
    let err = env.fails(
        &[
            "knowledge",
            "query",
            "-g",
            "--repo",
            tidewater.to_str().unwrap(),
            "lamp",
        ],
        2,
    );
    assert!(err.contains("cannot be used with"), "{err}");

    // No knowledge.yaml: the error names the directory and the hint is a starter file.
    let bare = env.dir.path().join("bare");
    std::fs::create_dir_all(bare.join(".git")).unwrap();
    let err = env.fails(&["knowledge", "sync", "--repo", bare.to_str().unwrap()], 1);
    assert!(
        err.contains(&format!(
            "error: no knowledge.yaml in {}",
            std::fs::canonicalize(&bare).unwrap().display()
        )),
        "{err}"
    );
    assert!(
        err.contains("hint: say what to index in")
            && err.contains("include:\n")
            && err.contains("\"**/*.md\""),
        "{err}"
    );
    // The starter file works as given.
    let starter: String = err
        .lines()
        .skip_while(|l| !l.starts_with("    include:"))
        .take_while(|l| l.starts_with("    "))
        .map(|l| format!("{}\n", &l[4..]))
        .collect();
    std::fs::write(bare.join("knowledge.yaml"), starter).unwrap();
    std::fs::write(
        bare.join("NOTES.md"),
        "# Notes\n\nThe starter file indexes Markdown.\n",
    )
    .unwrap();
    let report = sync(&env, &bare);
    assert_eq!(report["files"], 1, "{report}");

    // A repository never synced: say so, and how.
    let fresh = env.dir.path().join("fresh");
    std::fs::create_dir_all(&fresh).unwrap();
    std::fs::write(fresh.join("knowledge.yaml"), "include: ['*.md']\n").unwrap();
    let err = env.fails(
        &["knowledge", "query", "--repo", fresh.to_str().unwrap(), "x"],
        1,
    );
    assert!(
        err.contains("has not been indexed on this machine")
            && err.contains("hint: run `uwf knowledge sync --repo"),
        "{err}"
    );
    // A broken knowledge.yaml names the file and the problem.
    std::fs::write(fresh.join("knowledge.yaml"), "include: ['a[']\n").unwrap();
    let err = env.fails(&["knowledge", "sync", "--repo", fresh.to_str().unwrap()], 1);
    assert!(err.contains("knowledge.yaml: include[0]"), "{err}");
}

#[test]
fn a_person_at_a_terminal_gets_a_table() {
    let env = Env::new();
    let repo = copy_repo(&env, "tidewater");
    // A sync shows a progress bar, then one line of what it did.
    let screen = common::on_terminal(
        &env,
        &["knowledge", "sync", "--repo", repo.to_str().unwrap()],
        &[],
    );
    assert!(screen.contains("reading ["), "no progress bar: {screen:?}");
    let last = screen.lines().last().unwrap_or_default();
    assert!(
        last.contains(" files (") && last.contains(" chunks ("),
        "{screen:?}"
    );
    let screen = common::on_terminal(
        &env,
        &[
            "knowledge",
            "query",
            "--repo",
            repo.to_str().unwrap(),
            "--limit",
            "3",
            "webhook signature",
        ],
        &[],
    );
    let lines: Vec<&str> = screen.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        lines[0].starts_with("SCORE") && lines[0].contains("WHERE") && lines[0].contains("TEXT"),
        "{screen}"
    );
    assert_eq!(lines.len(), 4, "{screen}");
    assert!(lines[1].contains("src/webhooks/signature.rs:"), "{screen}");
}

/// `knowledge query --json` in `repo` with extra arguments: (hits, stderr), asserting success.
fn query_with(env: &Env, repo: &Path, args: &[&str]) -> (Vec<serde_json::Value>, String) {
    let mut all = vec![
        "knowledge",
        "query",
        "--json",
        "--repo",
        repo.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    let out = env.run(&all);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let hits = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(json)
        .collect();
    (hits, stderr)
}

#[test]
fn sync_names_every_file_it_skips_and_refuses_what_cannot_work() {
    let env = Env::new();
    let repo = copy_repo(&env, "tidewater");
    // Over 1 MiB, binary, minified, generated: each named with its reason.
    let mut huge = String::new();
    while huge.len() <= 1 << 20 {
        huge.push_str("A line of a very long document about nothing in particular.\n");
    }
    std::fs::write(repo.join("docs/huge.md"), &huge).unwrap();
    std::fs::write(repo.join("src/logo.bin"), b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").unwrap();
    std::fs::create_dir_all(repo.join("src/vendor")).unwrap();
    std::fs::write(
        repo.join("src/vendor/app.js"),
        format!("var a={};", "b+".repeat(20_000)),
    )
    .unwrap();
    std::fs::write(
        repo.join("src/proto.rs"),
        "// Code generated by protoc-gen-rust. DO NOT EDIT.\npub struct Wire;\n",
    )
    .unwrap();
    // One Latin-1 byte does not make a file disappear.
    std::fs::write(
        repo.join("docs/cafe.md"),
        b"# Caf\xe9\n\nThe zeppelin hangar is next to the caf\xe9.\n",
    )
    .unwrap();
    let report = sync(&env, &repo);
    let skipped: Vec<(String, String)> = report["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["file"].as_str().unwrap().to_owned(),
                s["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for (file, reason) in [
        ("docs/huge.md", "over 1 MiB"),
        ("src/logo.bin", "binary"),
        ("src/vendor/app.js", "minified"),
        ("src/proto.rs", "generated"),
    ] {
        assert!(
            skipped.contains(&(file.to_owned(), reason.to_owned())),
            "{file} ({reason}) in {skipped:?}"
        );
    }
    assert_eq!(
        report["lossy"],
        serde_json::json!(["docs/cafe.md"]),
        "{report}"
    );
    let (hits, _) = query_with(&env, &repo, &["zeppelin hangar"]);
    assert_eq!(hits[0]["file"], "docs/cafe.md");
    assert!(hits[0]["text"].as_str().unwrap().contains("caf\u{fffd}"));
    // The summary a person reads names them too.
    let text = common::on_terminal(
        &env,
        &["knowledge", "sync", "--repo", repo.to_str().unwrap()],
        &[],
    );
    assert!(
        text.contains("4 skipped") && text.contains("skipped docs/huge.md (over 1 MiB)"),
        "{text}"
    );

    // --limit 0 is a usage error, as qualifiers without words are.
    let err = env.fails(
        &[
            "knowledge",
            "query",
            "--repo",
            repo.to_str().unwrap(),
            "--limit",
            "0",
            "x",
        ],
        2,
    );
    assert!(err.contains("--limit"), "{err}");
    let err = env.fails(
        &[
            "knowledge",
            "query",
            "--repo",
            repo.to_str().unwrap(),
            "path:src/",
        ],
        2,
    );
    assert!(err.contains("no words") && err.contains("hint:"), "{err}");

    // A glob that matches nothing is named; globs that together match nothing are an error.
    std::fs::write(
        repo.join("knowledge.yaml"),
        "include: ['docs/**', 'nowhere/**']\n",
    )
    .unwrap();
    let report = sync(&env, &repo);
    assert_eq!(
        report["unmatched"],
        serde_json::json!(["nowhere/**"]),
        "{report}"
    );
    std::fs::write(repo.join("knowledge.yaml"), "include: ['nowhere/**']\n").unwrap();
    let err = env.fails(&["knowledge", "sync", "--repo", repo.to_str().unwrap()], 1);
    assert!(
        err.contains("match no file") && err.contains("nowhere/**") && err.contains("hint:"),
        "{err}"
    );
}

#[test]
fn global_results_name_full_paths_and_a_gone_repository_can_be_forgotten() {
    let env = Env::new();
    let mut repos = Vec::new();
    for parent in ["a", "b"] {
        let repo = env.dir.path().join(parent).join("lighthouse");
        std::fs::create_dir_all(repo.join("docs")).unwrap();
        std::fs::write(repo.join("knowledge.yaml"), "include: ['docs/**']\n").unwrap();
        std::fs::write(
            repo.join("docs/lamp.md"),
            format!("# Lamp\n\nThe lamp of checkout {parent} rotates every night.\n"),
        )
        .unwrap();
        sync(&env, &repo);
        repos.push(std::fs::canonicalize(&repo).unwrap());
    }
    let quiet = env.ok(&["knowledge", "query", "-g", "-q", "lamp rotates"]);
    for repo in &repos {
        let want = format!("{}:", repo.join("docs/lamp.md").display());
        assert!(
            quiet.lines().any(|l| l.starts_with(&want)),
            "{want} in {quiet}"
        );
    }

    // A deleted checkout is named as gone, then forgotten.
    std::fs::remove_dir_all(&repos[1]).unwrap();
    let out = env.run(&["knowledge", "query", "-g", "-q", "lamp rotates"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no longer exists") && stderr.contains("uwf knowledge forget"),
        "{stderr}"
    );
    let gone = repos[1].to_str().unwrap();
    let said = env.ok(&["knowledge", "forget", gone]);
    assert!(said.contains("forgot"), "{said}");
    let quiet = env.ok(&["knowledge", "query", "-g", "-q", "lamp rotates"]);
    assert!(!quiet.contains(gone), "{quiet}");
    assert!(quiet.contains(repos[0].to_str().unwrap()), "{quiet}");
    let status = env.ok(&["knowledge", "status", "-q"]);
    assert_eq!(status.trim(), repos[0].to_str().unwrap());
    // Forgetting what is not indexed says what is.
    let err = env.fails(&["knowledge", "forget", gone], 2);
    assert!(
        err.contains("is not indexed") && err.contains("indexed here:"),
        "{err}"
    );
    // Forgetting by a directory inside a live repository.
    let inside = repos[0].join("docs");
    let out = env
        .uwf()
        .current_dir(&inside)
        .args(["knowledge", "forget"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(env.ok(&["knowledge", "status", "-q"]).trim(), "");
}

#[test]
fn a_query_answers_from_the_files_as_they_are_now() {
    let env = Env::new();
    let repo = copy_repo(&env, "tidewater");
    sync(&env, &repo);
    let file = repo.join("src/webhooks/signature.rs");
    let before = std::fs::read_to_string(&file).unwrap();
    let filler: String = (1..=50).map(|i| format!("// filler line {i}\n")).collect();
    std::fs::write(&file, format!("{filler}{before}")).unwrap();

    let (hits, stderr) = query_with(
        &env,
        &repo,
        &["signs the body of outgoing callback requests"],
    );
    assert!(
        stderr.contains("note:") && stderr.contains("synced 1 file"),
        "{stderr}"
    );
    let hit = hits
        .iter()
        .find(|h| h["file"] == "src/webhooks/signature.rs")
        .expect("the edited file is found");
    let now = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = now.lines().collect();
    let (start, end) = (
        hit["startLine"].as_u64().unwrap() as usize,
        hit["endLine"].as_u64().unwrap() as usize,
    );
    assert_eq!(hit["text"], lines[start - 1..end].join("\n"), "{hit}");
    // An unchanged repository is not synced again.
    let (_, stderr) = query_with(&env, &repo, &["webhook signature"]);
    assert!(!stderr.contains("note:"), "{stderr}");
    // When the sync cannot run, the query still answers, and says so.
    std::fs::write(&file, format!("{before}// one more line\n")).unwrap();
    std::fs::write(repo.join("knowledge.yaml"), "include: [").unwrap();
    let (hits, stderr) = query_with(&env, &repo, &["webhook signature"]);
    assert!(!hits.is_empty());
    assert!(
        stderr.contains("warning:") && stderr.contains("out of date"),
        "{stderr}"
    );
}

#[test]
fn a_refused_input_is_named_and_the_rest_embedded() {
    const LIMIT: usize = 1800;
    let mock = Mock::start_limited(vec![], LIMIT);
    let env = Env::new();
    embed_config(&env, &mock);
    let repo = copy_repo(&env, "tidewater");
    // A 1 MB one-line file (recognised as minified), and a paragraph on one line whose chunk
    // is longer than the model takes.
    std::fs::write(repo.join("src/bundle.js"), "x".repeat(1_000_000)).unwrap();
    let paragraph = "The lighthouse keeper writes every observation down. ".repeat(40);
    std::fs::write(repo.join("docs/log.md"), format!("# Log\n\n{paragraph}\n")).unwrap();
    let report = sync(&env, &repo);
    let refused: Vec<&str> = report["embedRefused"]
        .as_array()
        .unwrap_or_else(|| panic!("nothing refused: {report}"))
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert!(
        refused.iter().any(|r| r.starts_with("docs/log.md:"))
            && refused.iter().all(|r| r.contains("HTTP 400")),
        "{refused:?}"
    );
    assert!(report.get("embedError").is_none(), "{report}");
    let chunks = report["chunks"].as_u64().unwrap() as usize;
    let embedded = report["embedded"].as_u64().unwrap() as usize;
    assert!(
        embedded > 0 && embedded + refused.len() + 2 >= chunks,
        "{report}"
    );
    // Every text the model took was within its limit, and each was sent.
    let sent = embedded_ok(&mock, LIMIT);
    assert!(sent >= embedded, "{sent} < {embedded}");
    assert!(
        report["skipped"].to_string().contains("src/bundle.js"),
        "{report}"
    );
    // A query says its ranking by meaning is partial.
    let (hits, stderr) = query_with(&env, &repo, &["webhook signature"]);
    assert!(!hits.is_empty());
    assert!(stderr.contains("have no vector"), "{stderr}");
}

/// How many texts the mock embedded in requests it answered (none over `limit`).
fn embedded_ok(mock: &Mock, limit: usize) -> usize {
    mock.requests()
        .iter()
        .filter(|r| r.path.ends_with("/embeddings"))
        .map(|r| r.body["input"].as_array().unwrap().clone())
        .filter(|inputs| inputs.iter().all(|t| t.as_str().unwrap().len() <= limit))
        .map(|inputs| inputs.len())
        .sum()
}

#[test]
fn the_file_defining_a_name_outranks_those_mentioning_it() {
    let env = Env::new();
    let repo = env.dir.path().join("calc");
    std::fs::create_dir_all(repo.join("src")).unwrap();
    std::fs::create_dir_all(repo.join("tests")).unwrap();
    std::fs::write(
        repo.join("knowledge.yaml"),
        "include: ['src/**', 'tests/**']\n",
    )
    .unwrap();
    std::fs::write(
        repo.join("src/lexer.rs"),
        "//! Turning text into tokens.\n\n/// Reads characters one at a time.\npub struct Lexer {\n    chars: Vec<char>,\n    at: usize,\n}\n\nimpl Lexer {\n    pub fn next_token(&mut self) -> Option<Token> {\n        let c = *self.chars.get(self.at)?;\n        self.at += 1;\n        Some(Token::from(c))\n    }\n}\n\npub struct HTTPServerConfig {\n    pub port: u16,\n}\n",
    )
    .unwrap();
    std::fs::write(
        repo.join("src/parser.rs"),
        "//! Parsing expressions: the parser asks the lexer for tokens.\n\nuse crate::lexer::Lexer;\n\n/// Builds a tree from what the lexer gives; the lexer is advanced by the parser only.\npub fn parse(lexer: &mut Lexer) -> Tree {\n    // The lexer may run out: the lexer then returns None.\n    let first = lexer.next_token();\n    let second = lexer.next_token();\n    Tree::new(first, second)\n}\n",
    )
    .unwrap();
    std::fs::write(
        repo.join("tests/lexer_test.rs"),
        "use calc::lexer::Lexer;\n\n#[test]\nfn lexer_reads_tokens() {\n    let mut lexer = Lexer::from(\"1+2\");\n    assert!(lexer.next_token().is_some());\n    assert!(lexer.next_token().is_some());\n}\n",
    )
    .unwrap();
    sync(&env, &repo);
    let (hits, _) = query_with(&env, &repo, &["lexer"]);
    assert_eq!(hits[0]["file"], "src/lexer.rs", "{hits:?}");
    let (hits, _) = query_with(&env, &repo, &["Lexer"]);
    assert_eq!(hits[0]["file"], "src/lexer.rs", "{hits:?}");
    assert!(
        hits[0]["title"]
            .as_str()
            .is_some_and(|t| t.contains("Lexer")),
        "{}",
        hits[0]
    );
    assert!(
        hits[0]["symbols"].to_string().contains("\"Lexer\""),
        "{}",
        hits[0]
    );
    // An acronym's words find it.
    let (hits, _) = query_with(&env, &repo, &["server config"]);
    assert_eq!(hits[0]["file"], "src/lexer.rs", "{hits:?}");
    // Qualifiers narrow the search.
    let (hits, _) = query_with(&env, &repo, &["lexer", "--limit", "20"]);
    assert!(hits.iter().any(|h| h["file"] == "tests/lexer_test.rs"));
    let (hits, _) = query_with(&env, &repo, &["lexer path:tests/"]);
    assert!(
        !hits.is_empty() && hits.iter().all(|h| h["file"] == "tests/lexer_test.rs"),
        "{hits:?}"
    );
    let (hits, _) = query_with(&env, &repo, &["lexer path:src/*.rs symbol:parse"]);
    assert!(
        !hits.is_empty() && hits.iter().all(|h| h["file"] == "src/parser.rs"),
        "{hits:?}"
    );
    let (hits, _) = query_with(&env, &repo, &["lexer lang:python"]);
    assert!(hits.is_empty(), "{hits:?}");
    let (hits, _) = query_with(&env, &repo, &["symbol:next_token"]);
    assert_eq!(hits[0]["file"], "src/lexer.rs", "{hits:?}");
}
