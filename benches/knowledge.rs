//! Project knowledge at project scale: `uwf knowledge sync` and `uwf knowledge query` over
//! generated repositories of 1,000, 10,000 and 30,000 chunks, by words alone and fused with
//! embeddings from a loopback mock server, printed side by side in one run.
//!
//! A repository is Markdown files of ten sections each (a section is one chunk), their words
//! drawn from a 6,000-word vocabulary with a Zipf-like skew, as prose has. Timed per size:
//! - the first sync (chunking, BM25 weights; with embeddings, every text sent once);
//! - a second sync with nothing changed, and one after a file was edited;
//! - a query as a real `uwf` process (median of several runs), and in-process (the index scan
//!   and ranking alone, without starting a process), which the ≤ 100 ms target is about.
//!
//! Run: `cargo bench --bench knowledge` (env `KNOWLEDGE_BENCH_SIZES`, default
//! `1000,10000,30000`). Prints numbers, asserts nothing.

#[path = "../tests/mock_llm/mod.rs"]
mod mock_llm;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use uwf::engine::config;
use uwf::engine::knowledge::search::{self, Scope};
use uwf::engine::knowledge::vectors::Embeddings;

const SECTIONS_PER_FILE: usize = 10;
const QUERY_RUNS: usize = 7;
const QUERIES: [&str; 4] = [
    "how does the scheduler retry failed deliveries",
    "token expiry and renewal",
    "configure the storage backend",
    "metrics exported by the worker",
];

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn vocabulary() -> Vec<String> {
    const SYLLABLES: [&str; 24] = [
        "ra", "to", "ken", "sche", "du", "ler", "re", "try", "sto", "rage", "met", "ric", "wor",
        "ker", "con", "fig", "de", "li", "ve", "ry", "ex", "pi", "lo", "ad",
    ];
    let mut rng = Rng(7);
    let mut words: Vec<String> = [
        "scheduler",
        "retry",
        "failed",
        "deliveries",
        "token",
        "expiry",
        "renewal",
        "configure",
        "storage",
        "backend",
        "metrics",
        "exported",
        "worker",
    ]
    .iter()
    .map(|w| w.to_string())
    .collect();
    while words.len() < 6000 {
        let n = 2 + (rng.next() % 3) as usize;
        words.push(
            (0..n)
                .map(|_| SYLLABLES[(rng.next() % 24) as usize])
                .collect(),
        );
    }
    words
}

/// Writes a repository of `chunks` sections under `dir`.
fn generate(dir: &Path, chunks: usize) {
    let words = vocabulary();
    let mut rng = Rng(chunks as u64 + 1);
    std::fs::create_dir_all(dir.join("docs")).unwrap();
    std::fs::write(dir.join("knowledge.yaml"), "include: [\"**/*.md\"]\n").unwrap();
    for file in 0..chunks.div_ceil(SECTIONS_PER_FILE) {
        let mut text = format!("# Document {file}\n\n");
        for section in 0..SECTIONS_PER_FILE {
            text.push_str(&format!("## Section {section}\n\n"));
            let mut line = String::new();
            for _ in 0..170 {
                // Zipf-like: low indices are common words.
                let u = rng.unit();
                let w = &words[((u * u * u) * words.len() as f64) as usize];
                line.push_str(w);
                line.push(' ');
                if line.len() > 72 {
                    text.push_str(line.trim_end());
                    text.push('\n');
                    line.clear();
                }
            }
            text.push_str(line.trim_end());
            text.push_str("\n\n");
        }
        std::fs::write(dir.join(format!("docs/doc{file:05}.md")), text).unwrap();
    }
}

fn uwf(root: &Path, repo: &Path, args: &[&str]) -> Duration {
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_uwf"))
        .args(args)
        .arg("--repo")
        .arg(repo)
        .env("UWF_STORAGE_ROOT", root)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = t.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

struct Row {
    size: usize,
    cells: Vec<String>,
}

fn measure(size: usize, mock: Option<&mock_llm::Mock>) -> Row {
    let tmp = tempfile::tempdir().unwrap();
    let (root, repo) = (tmp.path().join("root"), tmp.path().join("repo"));
    std::fs::create_dir_all(&root).unwrap();
    generate(&repo, size);
    if let Some(mock) = mock {
        std::fs::write(
            root.join("config.yaml"),
            format!(
                "providers:\n  mock: {{ baseUrl: '{}' }}\nmodels:\n  emb: {{ provider: mock, name: mock-embed }}\nmodelOverrides:\n  embed: emb\n",
                mock.base_url
            ),
        )
        .unwrap();
    }
    let first = uwf(&root, &repo, &["knowledge", "sync"]);
    let again = uwf(&root, &repo, &["knowledge", "sync"]);
    let edited = repo.join("docs/doc00000.md");
    let mut text = std::fs::read_to_string(&edited).unwrap();
    text.push_str("\n## Appendix\n\nA new section about the scheduler.\n");
    std::fs::write(&edited, text).unwrap();
    let touched = uwf(&root, &repo, &["knowledge", "sync"]);
    let process = median(
        (0..QUERY_RUNS)
            .map(|i| {
                uwf(
                    &root,
                    &repo,
                    &["knowledge", "query", "--json", QUERIES[i % QUERIES.len()]],
                )
            })
            .collect(),
    );
    let config = config::load(&root).unwrap().config;
    let embeddings = Embeddings::from_config(&config).unwrap();
    let scope = Scope::Repo(std::fs::canonicalize(&repo).unwrap());
    let in_process = median(
        (0..QUERY_RUNS)
            .map(|i| {
                let t = Instant::now();
                let found = search::query(
                    &root,
                    &scope,
                    QUERIES[i % QUERIES.len()],
                    10,
                    embeddings.as_ref(),
                )
                .unwrap();
                assert!(!found.hits.is_empty());
                t.elapsed()
            })
            .collect(),
    );
    Row {
        size,
        cells: vec![
            ms(first),
            ms(again),
            ms(touched),
            ms(process),
            ms(in_process),
        ],
    }
}

fn main() {
    let sizes: Vec<usize> = std::env::var("KNOWLEDGE_BENCH_SIZES")
        .unwrap_or_else(|_| "1000,10000,30000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let header = [
        "chunks",
        "sync (first)",
        "sync (same)",
        "sync (1 file)",
        "query (uwf)",
        "query (scan)",
    ];
    for (label, mock) in [
        ("words only (BM25)", None),
        (
            "fused with embeddings (mock, 1,024 dimensions)",
            Some(mock_llm::Mock::start(vec![])),
        ),
    ] {
        println!("\n{label}");
        println!("{}", header.map(|h| format!("{h:>14}")).join(""));
        for &size in &sizes {
            let row = measure(size, mock.as_ref());
            println!(
                "{:>14}{}",
                row.size,
                row.cells
                    .iter()
                    .map(|c| format!("{c:>14}"))
                    .collect::<String>()
            );
        }
        if let Some(mock) = &mock {
            let requests = mock
                .requests()
                .iter()
                .filter(|r| r.path.ends_with("/embeddings"))
                .count();
            println!("embedding requests in all: {requests}");
        }
    }
}
