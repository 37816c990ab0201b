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
