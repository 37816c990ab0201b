//! Every command honours the global `--json` and `-q` (`docs/cli.md#lists-colour-and-the-pager`):
//! with `--json` each line of stdout is JSON, with `-q` each line is one bare id, hash, name or
//! path. One table lists a run of every command over a small store; the commands that cannot honour
//! them say why in [`EXEMPT`]. The commands are read from `uwf --help` and its groups' help, so a
//! new command fails here until it is in the table or in the list.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::{Env, json, put_example};

/// Commands whose output is a document, a stream or a side effect rather than a result, with
/// the reason.
const EXEMPT: &[(&str, &str)] = &[
    (
        "thread read",
        "a Markdown transcript for people and agents; `thread steps --json` is its JSON",
    ),
    (
        "thread diff",
        "a unified diff; `thread steps --json` holds each step's output",
    ),
    (
        "thread log",
        "prints the log itself: the agents' stdout and stderr",
    ),
    ("thread live", "streams the log as it grows"),
    ("live", "streams the log as it grows"),
    ("agent prompt", "the prompt text an agent reads"),
    (
        "agent script",
        "prints as `agent dry` does (the same code), needs a script file",
    ),
    (
        "agent llm",
        "prints as `agent dry` does (the same code), needs a model",
    ),
    (
        "agent react",
        "prints as `agent dry` does (the same code), needs a model",
    ),
    (
        "agent claude",
        "prints as `agent dry` does (the same code), needs Claude Code (tests/agent_programs.rs)",
    ),
    (
        "agent codex",
        "prints as `agent dry` does (the same code), needs Codex (tests/agent_programs.rs)",
    ),
    (
        "agent opencode",
        "prints as `agent dry` does (the same code), needs OpenCode (tests/agent_programs.rs)",
    ),
    (
        "agent workflow",
        "prints as `agent dry` does (the same code), runs a child thread",
    ),
    (
        "agent human",
        "not a program: always refuses, pointing at `thread answer`",
    ),
    ("cas has", "answers with its exit status only"),
    ("skill", "reference text for agents"),
    ("completions", "a shell script"),
    (
        "mount",
        "needs FUSE (tests/fs_mount.rs); prints {\"mountpoint\"} or, with -q, the path",
    ),
    (
        "umount",
        "needs a mount (tests/fs_mount.rs); prints {\"unmounted\"} or, with -q, the path",
    ),
    ("worker", "runs until stopped; it reports on stderr"),
    ("serve", "a server: runs until stopped"),
];

/// The store the table runs over, and what its words name.
struct Store {
    env: Env,
    /// A thread two steps in.
    thread: String,
    /// The first and second versions of solve-issue (new threads start on the second).
    v1: String,
    v2: String,
    /// Threads made so far by [`Store::fresh_thread`].
    made: std::cell::Cell<usize>,
}

impl Store {
    fn new() -> Store {
        let env = Env::new();
        let v1 = put_example(&env, "solve-issue");
        let source = std::fs::read_to_string(example("solve-issue")).expect("example");
        let changed = source.replacen("description: >-\n", "description: >-\n  Again.\n", 1);
        let v2_path = env.dir.path().join("solve-issue-2.yaml");
        std::fs::write(&v2_path, changed).expect("write v2");
        let v2 = json(&env.ok(&["workflow", "put", v2_path.to_str().expect("utf-8")]))["hash"]
            .as_str()
            .expect("hash")
            .to_owned();
        assert_ne!(v1, v2);
        let thread = common::start_thread(&env, "solve-issue", "Fix the login bug");
        // Still active after two steps: exit 3.
        env.ends(
            &[
                "thread",
                "run",
                &thread,
                "--agent",
                "dry",
                "--max-steps",
                "2",
            ],
            3,
        );
        Store {
            env,
            thread,
            v1,
            v2,
            made: Default::default(),
        }
    }

    /// A new thread with a prompt of its own (threads with the same prompt share their start
    /// node, and a step on it could then continue either).
    fn fresh_thread(&self) -> String {
        self.made.set(self.made.get() + 1);
        let prompt = format!("task {}", self.made.get());
        common::start_thread(&self.env, "solve-issue", &prompt)
    }

    /// A word of the table with its placeholder filled; some make what they name first.
    fn fill(&self, word: &str) -> String {
        let fresh_dir = || {
            let dir = tempfile::tempdir_in(self.env.dir.path()).expect("temp dir");
            dir.keep().join("out").to_str().expect("utf-8").to_owned()
        };
        let filled = match word {
            "{T}" => self.thread.clone(),
            "{T:1}" => format!("{}:1", self.thread),
            "{H}" => self.env.ok(&["thread", "show", "-q", &self.thread]),
            "{V1}" => self.v1.clone(),
            "{V2}" => self.v2.clone(),
            "{WF}" => example("solve-issue").to_str().expect("utf-8").to_owned(),
            "{ROOT}" => self.env.root().to_str().expect("utf-8").to_owned(),
            "{DIR}" => fresh_dir(),
            // A new thread at its start.
            "{K}" => self.fresh_thread(),
            // A new thread waiting for a person's answer.
            "{ASKS}" => {
                let id = self.fresh_thread();
                self.env.ok(&["thread", "step", &id, "--agent", "human"]);
                id
            }
            // A step written by a hand-run agent, not yet published.
            "{UNPUBLISHED}" => {
                let id = self.fresh_thread();
                self.env.ok(&["agent", "dry", &id, "planner"])
            }
            // A repository with project knowledge, indexed when `{SYNCED}`.
            "{REPO}" | "{SYNCED}" => {
                let repo = self.env.dir.path().join("kb");
                std::fs::create_dir_all(&repo).expect("repo");
                std::fs::write(repo.join("knowledge.yaml"), "include: ['*.md']\n").expect("write");
                std::fs::write(repo.join("lamp.md"), "# Lamp\n\nThe lamp turns.\n").expect("write");
                let repo = repo.to_str().expect("utf-8").to_owned();
                if word == "{SYNCED}" {
                    self.env.ok(&["knowledge", "sync", "--repo", &repo]);
                }
                repo
            }
            // A registered workflow to remove.
            "{GONE}" => {
                put_example(&self.env, "analyze-topic");
                "analyze-topic".to_owned()
            }
            other => other.to_owned(),
        };
        filled.replace("{V1}", &self.v1)
    }
}

fn example(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(format!("{name}.yaml"))
}

/// One command of the table: its words, what it reads on stdin, and whether `-q` may print
/// nothing (a command with no id to print, or nothing to list).
struct Case {
    words: &'static [&'static str],
    stdin: &'static str,
    quiet_may_be_empty: bool,
    /// A list that is empty here: JSON lines are then no lines at all.
    empty_list: bool,
}

const fn case(words: &'static [&'static str]) -> Case {
    Case {
        words,
        stdin: "",
        quiet_may_be_empty: false,
        empty_list: false,
    }
}

const fn nothing_quiet(words: &'static [&'static str]) -> Case {
    Case {
        words,
        stdin: "",
        quiet_may_be_empty: true,
        empty_list: false,
    }
}

const fn empty_list(words: &'static [&'static str]) -> Case {
    Case {
        words,
        stdin: "",
        quiet_may_be_empty: true,
        empty_list: true,
    }
}

const fn with_stdin(words: &'static [&'static str], stdin: &'static str) -> Case {
    Case {
        words,
        stdin,
        quiet_may_be_empty: false,
        empty_list: false,
    }
}

const PLAN: &str = "{\"steps\": [\"x\"], \"summary\": \"\"}";

const CASES: &[Case] = &[
    case(&["workflow", "put", "{WF}"]),
    case(&["workflow", "put", "--check", "{WF}"]),
    case(&["workflow", "show", "solve-issue"]),
    case(&["workflow", "list"]),
    case(&["workflow", "history", "solve-issue"]),
    case(&["workflow", "rollback", "solve-issue", "{V2}"]),
    case(&["workflow", "graph", "solve-issue"]),
    case(&["workflow", "rm", "{GONE}"]),
    case(&[
        "run",
        "solve-issue",
        "-p",
        "x",
        "--agent",
        "dry",
        "--max-steps",
        "1",
    ]),
    case(&["eval", "1+1"]),
    case(&["thread", "start", "solve-issue", "-p", "x"]),
    case(&["thread", "step", "{K}", "--agent", "dry"]),
    case(&["thread", "run", "{K}", "--agent", "dry", "--max-steps", "2"]),
    case(&["thread", "show", "{T}"]),
    case(&["thread", "list"]),
    case(&["thread", "steps", "{T}"]),
    case(&["thread", "fork", "{T:1}"]),
    case(&["thread", "step-details", "{T:1}"]),
    case(&["thread", "publish", "{UNPUBLISHED}"]),
    case(&["thread", "queue", "{T}"]),
    case(&["thread", "pause", "{T}"]),
    case(&["thread", "resume", "{T}"]),
    case(&["thread", "rebind", "{T}", "developer=dry"]),
    case(&["thread", "budget", "{T}", "--max-tokens", "1000000"]),
    case(&["thread", "kill", "{K}"]),
    case(&["thread", "rebase", "{K}", "--workflow", "solve-issue@{V1}"]),
    case(&["thread", "eval", "{T}", "$count(steps)"]),
    case(&["thread", "why", "{T}"]),
    case(&["thread", "question", "{ASKS}"]),
    with_stdin(&["thread", "answer", "{ASKS}"], PLAN),
    with_stdin(
        &["agent", "submit", "{K}", "planner", "--agent", "me"],
        PLAN,
    ),
    case(&["agent", "dry", "{K}", "planner"]),
    case(&[
        "agent",
        "exec",
        "--cmd",
        "echo '{\"steps\": [\"x\"], \"summary\": \"\"}'",
        "{K}",
        "planner",
    ]),
    case(&["cas", "get", "{H}"]),
    case(&["cas", "put", "text", "\"hi\""]),
    case(&["cas", "refs", "{H}"]),
    case(&["cas", "walk", "{H}"]),
    case(&["cas", "list", "--type", "step"]),
    nothing_quiet(&["cas", "reindex"]),
    nothing_quiet(&["cas", "gc", "--dry-run"]),
    nothing_quiet(&["cas", "fsck"]),
    case(&["cas", "schema", "list"]),
    case(&["cas", "schema", "get", "step"]),
    with_stdin(&["cas", "schema", "put", "-"], "{\"type\": \"object\"}"),
    case(&["store", "copy", "{ROOT}", "{DIR}"]),
    case(&["setup", "--agent", "dry"]),
    nothing_quiet(&["doctor", "--skip", "fuse"]),
    case(&["export", "{T}", "{DIR}"]),
    empty_list(&["worker", "list"]),
    nothing_quiet(&["status"]),
    case(&["open", "{T}", "--print"]),
    case(&["serve", "token", "add", "ann"]),
    case(&["serve", "token", "list"]),
    case(&["serve", "token", "revoke", "ann"]),
    case(&["knowledge", "sync", "--repo", "{REPO}"]),
    case(&["knowledge", "query", "--repo", "{SYNCED}", "lamp"]),
    case(&["knowledge", "status"]),
    case(&["knowledge", "forget", "{SYNCED}"]),
];

/// Runs one case with `flag` and returns its stdout.
fn run(store: &Store, case: &Case, flag: &str) -> String {
    let words: Vec<String> = case.words.iter().map(|w| store.fill(w)).collect();
    let mut cmd = store.env.uwf();
    cmd.args(&words).arg(flag);
    if !case.stdin.is_empty() {
        cmd.write_stdin(case.stdin);
    }
    let out = cmd.output().expect("run uwf");
    // `doctor` fails where a check fails on this machine; its output is still checked. A run
    // stopped by `--max-steps` exits 3 (`docs/cli.md#exit-codes`).
    let doctor = words[0] == "doctor";
    let stopped = words.iter().any(|w| w == "--max-steps") && out.status.code() == Some(3);
    assert!(
        out.status.success() || stopped || (doctor && out.status.code() == Some(1)),
        "uwf {words:?} {flag} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_command_prints_json_lines_with_json() {
    let store = Store::new();
    for case in CASES {
        let out = run(&store, case, "--json");
        let name = case.words.join(" ");
        assert!(
            case.empty_list || !out.trim().is_empty(),
            "uwf {name} --json printed nothing"
        );
        for line in out.lines() {
            let value = serde_json::from_str::<serde_json::Value>(line);
            assert!(
                value.is_ok(),
                "uwf {name} --json: not a JSON line: {line:?}\n{out}"
            );
            // One naming scheme (docs/cli.md#lists-colour-and-the-pager): camelCase fields,
            // times as `at`/`…At`; only `uwf cas` shows a node's stored `timestamp`.
            let value = value.unwrap();
            let keys: Vec<&String> = value
                .as_object()
                .map(|o| o.keys().collect())
                .unwrap_or_default();
            for key in keys {
                assert!(
                    key.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                        && key.chars().all(|c| c.is_ascii_alphanumeric()),
                    "uwf {name} --json: field `{key}` is not camelCase: {line}"
                );
                assert!(
                    key != "timestamp" || case.words[0] == "cas",
                    "uwf {name} --json: a time is `at` or `…At`, not `timestamp`: {line}"
                );
            }
        }
    }
}

#[test]
fn every_command_prints_bare_ids_with_quiet() {
    let store = Store::new();
    for case in CASES {
        let out = run(&store, case, "-q");
        let name = case.words.join(" ");
        assert!(
            case.quiet_may_be_empty || !out.trim().is_empty(),
            "uwf {name} -q printed nothing"
        );
        for line in out.lines() {
            let bare = !line.is_empty()
                && !line.contains(char::is_whitespace)
                && !line.starts_with(['{', '[', '"']);
            assert!(bare, "uwf {name} -q: not a bare id: {line:?}\n{out}");
        }
    }
}

/// The commands `uwf --help` lists, groups opened (`thread show`, `cas schema get`).
fn commands(env: &Env, group: &[&str]) -> Vec<String> {
    let mut args: Vec<&str> = group.to_vec();
    args.push("--help");
    let help = env.ok(&args);
    let Some((_, rest)) = help.split_once("Commands:\n") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let listed = rest.lines().take_while(|l| !l.trim().is_empty());
    // A command's line is indented by two; its description's next lines by more.
    for line in listed.filter(|l| !l.starts_with("   ")) {
        let name = line.split_whitespace().next().expect("a command name");
        if name == "help" {
            continue;
        }
        let mut path: Vec<&str> = group.to_vec();
        path.push(name);
        let inner = commands(env, &path);
        // A group that runs on its own too (`uwf worker`) is a command as well.
        if inner.is_empty() || name == "worker" {
            found.push(path.join(" "));
        }
        found.extend(inner);
    }
    found
}

#[test]
fn every_command_is_in_the_table_or_exempt_with_a_reason() {
    let env = Env::new();
    let tested: BTreeSet<String> = CASES
        .iter()
        .map(|c| {
            let words: Vec<&str> = c
                .words
                .iter()
                .copied()
                .take_while(|w| !w.starts_with(['{', '-']))
                .collect();
            words.join(" ")
        })
        .collect();
    let exempt: BTreeSet<&str> = EXEMPT.iter().map(|(c, _)| *c).collect();
    let mut missing = Vec::new();
    for command in commands(&env, &[]) {
        let covered = tested
            .iter()
            .any(|t| t == &command || t.starts_with(&format!("{command} ")));
        if !covered && !exempt.contains(command.as_str()) {
            missing.push(command);
        }
    }
    assert!(
        missing.is_empty(),
        "commands neither tested for --json and -q nor exempt: {missing:?}"
    );
}

/// A command whose output is text by nature refuses `--json` (a usage error saying where the
/// JSON is) instead of ignoring it; `thread read`, `thread log` and `thread list --tree`, once
/// ignoring it, print JSON (issue #41: `--json` never silently ignored).
#[test]
fn json_is_honoured_or_refused_never_ignored() {
    let store = Store::new();
    let t = store.thread.as_str();
    let (a, b) = (format!("{t}:1"), format!("{t}:2"));
    for args in [
        &["live", t, "--once"][..],
        &["thread", "live", t, "--once"],
        &["thread", "diff", &a, &b],
        &["agent", "prompt", t, "planner"],
        &["skill"],
        &["completions", "bash"],
    ] {
        let mut with = args.to_vec();
        with.push("--json");
        let err = store.env.fails(&with, 2);
        assert!(
            err.contains("`--json` does not apply here") && err.contains("hint: "),
            "uwf {args:?} --json: {err}"
        );
        // Without it, the command runs as before.
        let out = store.env.run(args);
        assert!(
            out.status.code() != Some(2),
            "uwf {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let read = json(&store.env.ok(&["thread", "read", t, "--json"]));
    assert_eq!(read["thread"], t, "{read}");
    let log = json(&store.env.ok(&["thread", "log", t, "--json"]));
    assert_eq!(log["thread"], t, "{log}");
    for line in store
        .env
        .ok(&["thread", "list", "--tree", "--json"])
        .lines()
    {
        let row = json(line);
        assert!(row["depth"].is_u64() && row["thread"].is_string(), "{row}");
    }
}
