//! The first hour of a new user (issue #12): failures that say why, output for people and for
//! scripts (`docs/cli.md`), step references, hand-run agents, help texts and error messages.

mod common;

use common::{Env, json, put_example, script, start_thread};

/// `uwf args…` on a pseudo-terminal, without colour.
fn on_terminal(env: &Env, args: &[&str]) -> String {
    common::on_terminal(env, args, &[("NO_COLOR", "1")])
}

/// A registered solve-issue with a thread run to its end by the dry agent (7 steps).
fn finished_thread() -> (Env, String) {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "Users are logged out after one minute");
    env.ok(&["thread", "run", &id, "--agent", "dry"]);
    (env, id)
}

// Problem 2: steps named without copying hashes.

#[test]
fn steps_are_named_by_thread_and_index_and_by_unique_prefixes() {
    let (env, id) = finished_thread();
    let steps: Vec<serde_json::Value> = env
        .ok(&["thread", "steps", &id, "--json"])
        .lines()
        .map(json)
        .collect();
    let hash = |i: usize| steps[i]["hash"].as_str().unwrap().to_owned();
    let details = |r: &str| env.ok(&["thread", "step-details", r]);
    assert_eq!(details(&format!("{id}:2")), details(&hash(1)));
    assert_eq!(details(&format!("{id}:-1")), details(&hash(6)));
    assert_eq!(details(&hash(3)[..6].to_lowercase()), details(&hash(3)));
    let diff = env.ok(&["thread", "diff", &format!("{id}:1"), &format!("{id}:2")]);
    assert!(diff.contains(&format!("a/{}", hash(0))), "{diff}");
    assert!(diff.contains(&format!("b/{}", hash(1))), "{diff}");
    // T:0 is the start node: a fork from it is a new thread at the start.
    let fork = json(&env.ok(&["thread", "fork", &format!("{id}:0")]));
    assert_eq!(
        json(&env.ok(&["thread", "show", fork["thread"].as_str().unwrap()]))["steps"],
        0
    );
    let err = env.fails(&["thread", "fork", &format!("{id}:9")], 1);
    assert!(err.contains("has 7 steps; there is no step 9"), "{err}");
    let err = env.fails(&["thread", "step-details", "ZZ"], 1);
    assert!(err.contains("hint: name a step by its hash"), "{err}");
}

#[test]
fn an_ambiguous_step_prefix_lists_the_candidates() {
    let (env, id) = finished_thread();
    let hashes = env.ok(&["thread", "steps", &id, "-q"]);
    let hashes: Vec<&str> = hashes.lines().collect();
    // Find the longest prefix two stored step/start nodes share (there are 8+ of them).
    let mut all: Vec<String> = env
        .ok(&["cas", "list", "--type", "step"])
        .lines()
        .map(str::to_owned)
        .collect();
    all.sort();
    let shared = all
        .windows(2)
        .map(|w| {
            w[0].chars()
                .zip(w[1].chars())
                .take_while(|(a, b)| a == b)
                .count()
        })
        .max()
        .unwrap();
    assert_eq!(hashes.len(), 7);
    if shared < 4 {
        // No two hashes share 4 symbols: every 4-symbol prefix is unique.
        let err = env.fails(&["thread", "fork", "0000"], 1);
        assert!(err.contains("no step or start node matches"), "{err}");
        return;
    }
    let pair = all
        .windows(2)
        .find(|w| {
            w[0].chars()
                .zip(w[1].chars())
                .take_while(|(a, b)| a == b)
                .count()
                == shared
        })
        .unwrap();
    let err = env.fails(&["thread", "fork", &pair[0][..shared]], 1);
    assert!(err.contains(&pair[0]) && err.contains(&pair[1]), "{err}");
}

#[test]
fn an_ambiguous_thread_prefix_lists_the_candidates() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let a = start_thread(&env, "solve-issue", "one");
    let b = start_thread(&env, "solve-issue", "two");
    let shared: String = a
        .chars()
        .zip(b.chars())
        .take_while(|(x, y)| x == y)
        .map(|(x, _)| x)
        .collect();
    let err = env.fails(&["thread", "show", &shared], 1);
    assert!(err.contains(&a) && err.contains(&b), "{err}");
    assert!(err.contains("hint: give more of the id"), "{err}");
}

#[test]
fn a_thread_prefix_shorter_than_four_symbols_is_refused_even_when_unique() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "one");
    let err = env.fails(&["thread", "show", &id[..3]], 1);
    assert!(err.contains("is too short to name a thread"), "{err}");
    assert!(
        err.contains("hint: name a thread by its id or a unique prefix of 4"),
        "{err}"
    );
    // Four symbols are enough.
    let shown = common::json(&env.ok(&["thread", "show", &id[..4], "--json"]));
    assert_eq!(shown["thread"], id.as_str(), "{shown}");
}

// Problem 3: failures are never hidden, and said once.

#[test]
fn a_failed_thread_says_why_in_show_and_in_its_log() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "x");
    let agent = script(
        &env,
        "broken.sh",
        "echo 'the model is unreachable' >&2; exit 3",
    );
    let err = env.fails(
        &["thread", "step", &id, "--agent", agent.to_str().unwrap()],
        1,
    );
    assert_eq!(
        err.matches("the model is unreachable").count(),
        1,
        "the agent's stderr is shown once, not repeated in the error:\n{err}"
    );
    let show = json(&env.ok(&["thread", "show", &id]));
    assert_eq!(show["status"], "failed");
    let why = show["error"].as_str().expect("show carries the error");
    assert!(why.contains("exited with exit code 3"), "{why}");
    assert!(why.contains("the model is unreachable"), "{why}");
    let log = env.ok(&["thread", "log", &id]);
    assert!(log.contains("the model is unreachable"), "{log}");
}

#[test]
fn a_missing_agent_is_named_once() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "x");
    let err = env.fails(&["thread", "step", &id, "--agent", "nosuchagent"], 1);
    assert!(!err.contains("caused by"), "{err}");
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
}

#[test]
fn the_offline_notice_comes_once_and_only_when_the_default_agent_is_used() {
    let (env, _) = finished_thread();
    let id = start_thread(&env, "solve-issue", "again");
    let out = env.run(&["thread", "run", &id]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("no config.yaml").count(), 1, "{err}");
    let id = start_thread(&env, "solve-issue", "with an agent");
    let out = env.run(&["thread", "run", &id, "--agent", "dry"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("no config.yaml"), "{err}");
}

// Problem 4: tables for people, JSON for scripts, ids with -q.

#[test]
fn lists_are_tables_on_a_terminal_json_in_a_pipe_and_ids_with_q() {
    let name = "lists_are_tables_on_a_terminal_json_in_a_pipe_and_ids_with_q";
    if !common::has(name, &[common::Need::Tool("script")]) {
        return;
    }
    let (env, id) = finished_thread();
    let table = on_terminal(&env, &["thread", "list", "--all"]);
    let mut lines = table.lines();
    let header = lines.next().unwrap_or_default();
    assert!(
        header.starts_with("THREAD") && header.contains("STATUS") && header.contains("UPDATED"),
        "{table}"
    );
    let row = lines.next().unwrap_or_default();
    assert!(
        row.starts_with(&id) && row.contains("done") && row.contains("ago")
            || row.contains("just now"),
        "{table}"
    );
    let steps = on_terminal(&env, &["thread", "steps", &id]);
    assert!(steps.starts_with("#  STEP"), "{steps}");
    assert!(
        !steps.contains("\"summary\""),
        "no JSON on a terminal: {steps}"
    );
    assert!(on_terminal(&env, &["workflow", "list"]).starts_with("NAME"));
    assert!(on_terminal(&env, &["workflow", "history", "solve-issue"]).starts_with("HASH"));
    // --json on a terminal, and JSON in a pipe without it.
    let forced = on_terminal(&env, &["thread", "list", "--all", "--json"]);
    assert_eq!(json(forced.trim())["thread"], id.as_str());
    assert_eq!(
        json(&env.ok(&["thread", "list", "--all"]))["thread"],
        id.as_str()
    );
    assert_eq!(env.ok(&["thread", "list", "--all", "-q"]), id);
    assert_eq!(env.ok(&["workflow", "list", "-q"]), "solve-issue");
    let q = env.ok(&["thread", "start", "solve-issue", "-p", "quiet", "-q"]);
    assert_eq!(q.len(), 26, "-q prints the thread id: {q}");
}

// Problem 5: read-only commands refuse a missing store.

#[test]
fn reading_commands_refuse_a_store_that_does_not_exist() {
    let env = Env::new();
    let typo = env.dir.path().join("typo");
    let err = env.fails(&["--root", typo.to_str().unwrap(), "thread", "list"], 1);
    assert!(
        err.contains(&format!("error: no uwf store at {}", typo.display())),
        "{err}"
    );
    assert!(
        err.contains("--root") && err.contains("UWF_STORAGE_ROOT"),
        "{err}"
    );
    assert!(err.contains("uwf workflow put FILE"), "{err}");
    assert!(!typo.exists(), "nothing was created");
    // A bare `uwf thread list` with no store under HOME creates no ~/.uwf either.
    let out = env
        .uwf()
        .env_remove("UWF_STORAGE_ROOT")
        .args(["thread", "list"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(!env.dir.path().join(".uwf").exists());
    // Writing commands create it.
    let wf = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/solve-issue.yaml");
    env.ok(&["--root", typo.to_str().unwrap(), "workflow", "put", wf]);
    assert!(typo.join("registry.yaml").exists());
}

// Problem 6: doctor does not call an unusable agent ok.

#[test]
fn doctor_does_not_call_the_llm_agent_ok_without_a_model() {
    let env = Env::new();
    let out = env.run(&["doctor", "--skip", "fuse"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("ok   agent llm"), "{text}");
    assert!(
        text.contains("off  agent llm: no model is configured"),
        "{text}"
    );
    std::fs::write(env.root().join("config.yaml"), "defaultAgent: llm\n").unwrap();
    let out = env.run(&["doctor", "--skip", "fuse"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("FAIL agent llm: no model is configured, and steps use it"),
        "{text}"
    );
    assert_eq!(out.status.code(), Some(1));
}

// Problem 7: hand-run agents.

#[test]
fn submit_refuses_a_role_that_is_not_next_unless_forced() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "x");
    let output = r#"{"approved": true, "replan": false, "comments": []}"#;
    let out = env
        .uwf()
        .args(["agent", "submit", &id, "reviewer", "--agent", "me"])
        .write_stdin(output)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("role `reviewer` is not next on thread") && err.contains("picks `planner`"),
        "{err}"
    );
    let forced = env.ok_stdin(
        &[
            "agent", "submit", &id, "reviewer", "--agent", "me", "--force",
        ],
        output,
    );
    assert_eq!(forced.len(), 13, "a step hash: {forced}");
    // Such a node can never be published: the verification of `thread publish` refuses it.
    let err = env.fails(&["thread", "publish", &forced], 1);
    assert!(
        err.contains(
            "cannot be published: its role is `reviewer`, but the moderator chose `planner`"
        ),
        "{err}"
    );
    assert_eq!(json(&env.ok(&["thread", "show", &id]))["steps"], 0);
}

#[test]
fn a_hand_run_agent_is_told_the_head_did_not_move_and_publish_moves_it() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "x");
    let out = env
        .uwf()
        .args(["agent", "submit", &id, "planner", "--agent", "me"])
        .write_stdin(r#"{"summary": "plan", "steps": ["one"]}"#)
        .output()
        .unwrap();
    assert!(out.status.success());
    let hash = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the head of thread") && err.contains("did not move"),
        "{err}"
    );
    assert!(err.contains(&format!("uwf thread publish {hash}")), "{err}");
    assert_eq!(json(&env.ok(&["thread", "show", &id]))["steps"], 0);
    let published = json(&env.ok(&["thread", "publish", &hash]));
    assert_eq!(published["head"], hash.as_str());
    assert_eq!(published["role"], "planner");
    let show = json(&env.ok(&["thread", "show", &id]));
    assert_eq!(show["head"], hash.as_str());
    assert_eq!(show["next"], "developer");
    // Publishing again: the head has moved past what the node continues.
    let err = env.fails(&["thread", "publish", &hash], 1);
    assert!(err.contains("cannot be published"), "{err}");
}

// Problem 9: help and wording.

#[test]
fn group_commands_show_examples_and_arguments_are_described() {
    let env = Env::new();
    for group in ["thread", "agent", "workflow", "cas"] {
        let help = env.ok(&[group, "--help"]);
        assert!(help.contains("Examples:"), "uwf {group} --help:\n{help}");
    }
    let run = env.ok(&["thread", "run", "--help"]);
    assert!(
        run.contains("Thread id (a unique prefix is enough)"),
        "{run}"
    );
    assert!(run.contains("Stop after this many steps"), "{run}");
    assert!(
        run.contains("configured agent name or a command line"),
        "{run}"
    );
    let exec = env.ok(&["agent", "exec", "--help"]);
    assert!(exec.contains("The command line to run"), "{exec}");
    // Examples never wrap in the middle of a command at the help width.
    for cmd in [&["setup", "--help"][..], &["agent", "submit", "--help"][..]] {
        let help = env.ok(cmd);
        for line in help.lines() {
            assert!(line.chars().count() <= 100, "{cmd:?} wraps:\n{line}");
        }
        // The example block: from "Example…:" to the next blank line. Each line starts a
        // command, or continues one after a trailing `\` or `|`.
        let examples = help.split("Example").nth(1).unwrap_or_default();
        let mut continued = false;
        for line in examples
            .lines()
            .skip(1)
            .take_while(|l| !l.trim().is_empty())
        {
            let t = line.trim_start();
            assert!(
                continued || t.starts_with("uwf") || t.starts_with("printf"),
                "{cmd:?}: an example line starts mid-command:\n{line}\n{help}"
            );
            continued = t.ends_with('\\') || t.ends_with('|');
        }
    }
}

#[test]
fn export_all_without_a_directory_says_what_is_missing() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let err = env.fails(&["export", "--all"], 2);
    assert!(
        err.contains("--all needs the directory to write into"),
        "{err}"
    );
    assert!(err.contains("hint: uwf export --all ./snapshot"), "{err}");
}

#[test]
fn one_step_and_one_day_are_singular() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "x");
    env.ok(&["thread", "step", &id, "--agent", "dry"]);
    let why = env.ok(&["thread", "why", &id]);
    assert!(why.contains("(1 step)"), "{why}");
    let gc = env.ok(&["cas", "gc", "--dry-run", "--grace", "24h"]);
    assert!(gc.contains("younger than 1 day"), "{gc}");
}

// Problem 10: errors that point the way.

#[test]
fn a_misspelt_role_suggests_the_role_and_nothing_false() {
    let env = Env::new();
    let file = env.dir.path().join("wf.yaml");
    std::fs::write(
        &file,
        "name: notes\nroles:\n  writer:\n    goal: write\n    meta: { type: object, properties: { text: { type: string } }, required: [text] }\n\
         graph:\n  $START: [ { role: writr } ]\n  writer: [ { role: $END } ]\n",
    )
    .unwrap();
    let err = env.fails(&["workflow", "put", file.to_str().unwrap()], 1);
    assert!(err.contains("did you mean `writer`?"), "{err}");
    assert!(!err.contains("`$START` has no transitions"), "{err}");
}

#[test]
fn starting_an_unknown_workflow_points_at_list_and_put() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let err = env.fails(&["thread", "start", "solve-isue", "-p", "x"], 1);
    assert!(err.contains("did you mean `solve-issue`?"), "{err}");
    assert!(
        err.contains("uwf workflow list") && err.contains("uwf workflow put FILE"),
        "{err}"
    );
}

#[test]
fn an_output_refused_by_its_schema_names_the_role() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "x");
    let bad = env.dir.path().join("bad.yaml");
    std::fs::write(&bad, "planner:\n  - { summary: 42 }\n").unwrap();
    let agent = format!("uwf agent script --file {}", bad.display());
    let err = env.fails(&["thread", "step", &id, "--agent", &agent], 1);
    assert!(err.contains("role `planner`"), "{err}");
}

// Problem 11: a yes/no check is silent.

#[test]
fn cas_has_answers_with_its_exit_status_only() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let out = env.run(&["cas", "has", "2DHW2FP49YVD3"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
}

// Problem 12: what users install carries no debug info.

#[test]
fn the_release_profile_has_no_debug_info_and_benches_keep_line_tables() {
    let manifest: toml_like::Manifest = toml_like::read();
    assert_eq!(manifest.get("profile.release", "debug"), Some("false"));
    assert_eq!(manifest.get("profile.release", "strip"), Some("true"));
    assert_eq!(
        manifest.get("profile.bench", "debug"),
        Some("\"line-tables-only\"")
    );
}

/// Just enough of Cargo.toml: `[section]` then `key = value` lines.
mod toml_like {
    pub struct Manifest(Vec<(String, String, String)>);

    pub fn read() -> Manifest {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
            .expect("Cargo.toml");
        let mut section = String::new();
        let mut entries = Vec::new();
        for line in text.lines().map(str::trim) {
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name.to_owned();
            } else if let Some((k, v)) = line.split_once('=') {
                entries.push((section.clone(), k.trim().to_owned(), v.trim().to_owned()));
            }
        }
        Manifest(entries)
    }

    impl Manifest {
        pub fn get(&self, section: &str, key: &str) -> Option<&str> {
            self.0
                .iter()
                .find(|(s, k, _)| s == section && k == key)
                .map(|(_, _, v)| v.as_str())
        }
    }
}

// Issue #32: the first hour, round two.

#[test]
fn thread_run_numbers_its_steps_as_the_thread_log_does() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "Users are logged out after one minute");
    env.ok(&["thread", "step", &id, "--agent", "dry"]);
    let shown = on_terminal(&env, &["thread", "run", &id, "--agent", "dry"]);
    assert!(
        shown.contains(&format!("uwf: step 2 of thread {id} (")),
        "{shown}"
    );
    assert!(
        !shown.contains(&format!("step 1 of thread {id}")),
        "{shown}"
    );
    assert!(shown.contains("s elapsed)"), "{shown}");
    assert!(
        !shown.contains("ns elapsed") && !shown.contains("µs elapsed"),
        "{shown}"
    );
    let log = env.ok(&["thread", "log", &id]);
    assert!(log.contains("step 2 ·"), "{log}");
}

/// The subcommands a `--help` text lists under `Commands:` (without `help`).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

#[test]
fn no_help_text_or_skill_cites_a_file_the_user_lacks() {
    let env = Env::new();
    let mut pending = vec![Vec::<String>::new()];
    let mut seen = 0;
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    // A file of the repository a text names (`docs/LLM.md`, `examples/x.yaml`) must be there.
    let named = std::cell::Cell::new(0);
    let names_only_files_we_ship = |what: &str, text: &str| {
        for word in text.split(|c: char| c.is_whitespace() || "`'\"()[],;".contains(c)) {
            let word = word.trim_end_matches(['.', ':']);
            if ["docs/", "examples/", "scripts/"]
                .iter()
                .any(|d| word.starts_with(d))
                && !word.contains(['<', '*', '{', '…'])
            {
                assert!(
                    repo.join(word).exists(),
                    "{what} names {word}, which is not in the repository"
                );
                named.set(named.get() + 1);
            }
        }
    };
    while let Some(path) = pending.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        for flag in ["--help", "-h"] {
            let help = env.ok(&[&args[..], &[flag]].concat());
            names_only_files_we_ship(&format!("uwf {} {flag}", path.join(" ")), &help);
            for cited in ["SPEC", "§"] {
                assert!(
                    !help.contains(cited),
                    "uwf {} {flag} cites {cited}:\n{help}",
                    path.join(" ")
                );
            }
            if flag == "--help" {
                for sub in subcommands(&help) {
                    pending.push([&path[..], &[sub]].concat());
                }
            }
        }
        seen += 1;
    }
    assert!(seen > 50, "only {seen} commands walked");
    for skill in ["cli", "author", "agent"] {
        let text = env.ok(&["skill", skill]);
        assert!(text.len() > 500, "uwf skill {skill}: {text}");
        names_only_files_we_ship(&format!("uwf skill {skill}"), &text);
        assert!(
            !text.contains("SPEC") && !text.contains('§'),
            "uwf skill {skill} cites the spec"
        );
    }
    assert!(
        named.get() > 0,
        "no text named a file of the repository: the check looked at nothing"
    );
    // `thread start` prints JSON; its id alone comes with -q.
    let help = env.ok(&["--help"]);
    assert!(help.contains(r#"# prints {"workflow","thread"}"#), "{help}");
    assert!(help.contains("-q prints only the thread id"), "{help}");
}

/// The lines of a Markdown text outside fenced code blocks.
fn prose_lines(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

#[test]
fn every_relative_link_in_the_docs_names_a_file_and_heading_of_the_repository() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![repo.join("README.md")];
    for entry in std::fs::read_dir(repo.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    let mut links = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let name = page.strip_prefix(repo).unwrap().display().to_string();
        let prose = prose_lines(&text).join("\n");
        for (_, rest) in prose
            .match_indices("](")
            .map(|(i, _)| prose.split_at(i + 2))
        {
            let target = rest.split([')', ' ']).next().unwrap();
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            links += 1;
            let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
            let file = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            assert!(
                file.exists(),
                "{name} links to {target}, which is not in the repository"
            );
            if !anchor.is_empty() {
                let linked = std::fs::read_to_string(&file).unwrap();
                let anchors: Vec<String> = prose_lines(&linked)
                    .iter()
                    .filter_map(|l| l.strip_prefix('#'))
                    .map(|h| common::markdown::heading_anchor(h.trim_start_matches('#')))
                    .collect();
                assert!(
                    anchors.iter().any(|a| a == anchor),
                    "{name} links to {target}, but {} has no such heading (it has {anchors:?})",
                    file.display()
                );
            }
        }
    }
    assert!(links > 20, "only {links} links found in {pages:?}");
    // The README stays short: what uwf is, the two commands, the tour and links.
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines < 150,
        "README.md has {lines} lines: reference belongs in docs/"
    );
}
