//! Shell completion that knows the store: the real binary asked the way a registered shell
//! script asks it on TAB (`COMPLETE=<shell> uwf -- <words>`), over a store with a workflow and
//! two threads. Fish prints `value<TAB>description` lines, so it shows the descriptions too;
//! bash's words are split at colons the way bash splits them (checked by hand in a real bash:
//! `T:` reaches the script as `T` and `:`).

mod common;

use std::path::Path;

use common::{Env, put_example};

/// The candidates for the last word of `words` (as fish asks), as (value, description) pairs.
fn fish(env: &Env, words: &[&str]) -> Vec<(String, String)> {
    let out = env
        .uwf()
        .env("COMPLETE", "fish")
        .arg("--")
        .arg("uwf")
        .args(words)
        .output()
        .expect("run uwf");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "completing {words:?}: {out:?}"
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('-'))
        .map(|l| {
            let (value, help) = l.split_once('\t').unwrap_or((l, ""));
            (value.to_owned(), help.to_owned())
        })
        .collect()
}

fn values(candidates: &[(String, String)]) -> Vec<&str> {
    candidates.iter().map(|(v, _)| v.as_str()).collect()
}

/// A store with solve-issue registered and two threads, the first two steps in (dry agent).
fn store() -> (Env, String, String) {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let first = common::start_thread(&env, "solve-issue", "Fix the login bug");
    let second = common::start_thread(&env, "solve-issue", "Add a --json flag\nand test it");
    // Still active after --max-steps: exit 3 (`docs/cli.md#exit-codes`).
    env.ends(
        &[
            "thread",
            "run",
            &first,
            "--agent",
            "dry",
            "--max-steps",
            "2",
        ],
        3,
    );
    (env, first, second)
}

#[test]
fn thread_ids_complete_with_their_prompts() {
    let (env, first, second) = store();
    for command in ["show", "step", "log", "read"] {
        let got = fish(&env, &["thread", command, ""]);
        assert_eq!(values(&got), [&second, &first], "thread {command}: {got:?}");
        assert_eq!(got[0].1, "solve-issue active: Add a --json flag");
        assert_eq!(got[1].1, "solve-issue active: Fix the login bug");
    }
    // What is typed narrows them, in either case.
    let typed = first[..first.len() - 1].to_ascii_lowercase();
    assert_eq!(values(&fish(&env, &["thread", "show", &typed])), [&first]);
    assert_eq!(values(&fish(&env, &["live", ""])), [&second, &first]);
}

#[test]
fn bash_gets_the_values_for_the_word_under_the_cursor() {
    let (env, first, second) = store();
    let out = env
        .uwf()
        .env("COMPLETE", "bash")
        .env("_CLAP_COMPLETE_INDEX", "3")
        .env("_CLAP_IFS", "\n")
        .args(["--", "uwf", "thread", "kill", ""])
        .output()
        .expect("run uwf");
    let text = String::from_utf8_lossy(&out.stdout);
    let ids: Vec<&str> = text.lines().filter(|l| !l.starts_with('-')).collect();
    assert_eq!(ids, [&second, &first], "{out:?}");
}

/// What bash passes for the word under the cursor at `index`, split at colons as bash splits
/// (`T:2` is `T`, `:`, `2`), and the values it gets back.
fn bash(env: &Env, words: &[&str], index: usize) -> Vec<String> {
    let out = env
        .uwf()
        .env("COMPLETE", "bash")
        .env("_CLAP_COMPLETE_INDEX", index.to_string())
        .env("_CLAP_IFS", "\n")
        .arg("--")
        .arg("uwf")
        .args(words)
        .output()
        .expect("run uwf");
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn bash_completes_steps_across_its_colon_word_break() {
    let (env, first, _) = store();
    // `uwf thread diff T:<TAB>`: bash passes `T` and a lone `:`, and replaces what follows
    // the colon; so the candidates are the indexes alone.
    assert_eq!(
        bash(&env, &["thread", "diff", &first, ":"], 4),
        ["-1", "2", "1", "0"]
    );
    // `uwf thread diff T:-<TAB>`
    assert_eq!(bash(&env, &["thread", "diff", &first, ":", "-"], 5), ["-1"]);
    // The second step reference, after a whole first one.
    assert_eq!(
        bash(
            &env,
            &["thread", "diff", &first, ":", "1", &first, ":", "2"],
            8
        ),
        ["2"]
    );
    // The script keeps the lone `:` it would otherwise replace with the empty word after it.
    let script = env.ok(&["completions", "bash"]);
    assert!(
        script.contains(r#""${COMP_WORDS[COMP_CWORD]}" != ":""#),
        "{script}"
    );
}

#[test]
fn workflow_names_complete_where_a_workflow_is_named() {
    let (env, _, _) = store();
    for words in [
        &["thread", "start", ""][..],
        &["run", "so"],
        &["workflow", "graph", ""],
        &["workflow", "history", ""],
        &["thread", "list", "--workflow", ""],
    ] {
        let got = fish(&env, words);
        assert_eq!(values(&got), ["solve-issue"], "{words:?}");
        assert!(got[0].1.starts_with("Resolve an issue"), "{got:?}");
    }
    assert!(fish(&env, &["thread", "start", "x"]).is_empty());
}

#[test]
fn roles_complete_from_the_workflow_of_the_thread_on_the_line() {
    let (env, first, second) = store();
    // After planner and developer, the moderator picks the reviewer: it comes first.
    let got = fish(&env, &["agent", "prompt", &first, ""]);
    assert_eq!(
        values(&got),
        ["reviewer", "developer", "planner"],
        "{got:?}"
    );
    assert!(got[0].1.starts_with("next: "), "{got:?}");
    let got = fish(&env, &["agent", "dry", &second, ""]);
    assert_eq!(values(&got)[0], "planner", "{got:?}");
    assert_eq!(
        values(&fish(&env, &["thread", "rebind", &first, "dev"])),
        ["developer="]
    );
    let agents = fish(&env, &["thread", "rebind", &first, "developer="]);
    assert!(
        agents.contains(&("developer=dry".into(), "uwf agent dry".into())),
        "{agents:?}"
    );
    // No thread on the line, no roles.
    assert!(fish(&env, &["agent", "prompt", "NOPE", ""]).is_empty());
}

#[test]
fn step_references_complete_as_thread_and_index() {
    let (env, first, second) = store();
    let expected = [
        format!("{first}:-1"),
        format!("{first}:2"),
        format!("{first}:1"),
        format!("{first}:0"),
    ];
    let got = fish(&env, &["thread", "diff", &format!("{first}:")]);
    assert_eq!(values(&got), expected, "{got:?}");
    assert_eq!(got[0].1, "the head: developer by dry");
    assert_eq!(got[2].1, "planner by dry");
    assert_eq!(got[3].1, "the start: Fix the login bug");
    // A prefix that names one thread goes straight to its steps; several threads are offered
    // as THREAD: to go on from.
    let typed = &first[..first.len() - 1];
    let got = fish(&env, &["thread", "fork", typed]);
    assert_eq!(values(&got), expected, "{got:?}");
    let got = fish(&env, &["thread", "step-details", ""]);
    assert_eq!(
        values(&got),
        [format!("{second}:"), format!("{first}:")],
        "{got:?}"
    );
    let got = fish(
        &env,
        &[
            "thread",
            "diff",
            &format!("{first}:1"),
            &format!("{first}:-"),
        ],
    );
    assert_eq!(values(&got), [format!("{first}:-1")]);
}

#[test]
fn the_root_typed_on_the_line_is_the_store_asked() {
    let (env, first, second) = store();
    let root = env.root();
    let root = root.to_str().expect("utf-8 root");
    let out = env
        .uwf()
        .env("UWF_STORAGE_ROOT", env.dir.path().join("elsewhere"))
        .env("COMPLETE", "fish")
        .args(["--", "uwf", "--root", root, "thread", "show", ""])
        .output()
        .expect("run uwf");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&first) && text.contains(&second), "{out:?}");
}

#[test]
fn no_store_no_candidates_and_nothing_made() {
    let env = Env::new();
    let missing = env.dir.path().join("missing");
    let out = env
        .uwf()
        .env("UWF_STORAGE_ROOT", &missing)
        .env("COMPLETE", "fish")
        .args(["--", "uwf", "thread", "show", ""])
        .output()
        .expect("run uwf");
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .all(|l| l.starts_with('-')),
        "{out:?}"
    );
    assert!(!Path::new(&missing).exists());
    // An empty store: nothing either.
    assert!(fish(&env, &["thread", "show", ""]).is_empty());
    assert!(fish(&env, &["thread", "start", ""]).is_empty());
}

#[test]
fn completions_prints_the_dynamic_registration() {
    let env = Env::new();
    let bash = env.ok(&["completions", "bash"]);
    assert!(
        bash.contains("COMPLETE=\"bash\"") && bash.contains("complete -o nospace"),
        "{bash}"
    );
    let zsh = env.ok(&["completions", "zsh"]);
    assert!(
        zsh.contains("compdef _clap_dynamic_completer_uwf uwf"),
        "{zsh}"
    );
    let fish = env.ok(&["completions", "fish"]);
    assert!(fish.contains("COMPLETE=fish"), "{fish}");
    // The registration is what `COMPLETE=bash uwf` prints too.
    let out = env.uwf().env("COMPLETE", "bash").output().expect("run uwf");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), bash);
    let help = env.ok(&["completions", "--help"]);
    assert!(help.contains("source <(uwf completions bash)"), "{help}");
}

#[test]
fn file_and_folder_arguments_complete_paths() {
    let env = Env::new();
    put_example(&env, "solve-issue");
    let dir = env.dir.path();
    std::fs::create_dir(dir.join("flows")).unwrap();
    std::fs::write(dir.join("flows/review.yaml"), "name: review\n").unwrap();
    std::fs::write(dir.join("task.md"), "Fix it\n").unwrap();
    let put = fish(&env, &["workflow", "put", "flo"]);
    assert_eq!(values(&put), ["flows/"], "{put:?}");
    let inside = fish(&env, &["workflow", "put", "flows/r"]);
    assert_eq!(values(&inside), ["flows/review.yaml"], "{inside:?}");
    let prompt = fish(
        &env,
        &["thread", "start", "solve-issue", "--prompt-file", "ta"],
    );
    assert_eq!(values(&prompt), ["task.md"], "{prompt:?}");
    let answer = fish(&env, &["thread", "answer", "X", "-f", "ta"]);
    assert_eq!(values(&answer), ["task.md"], "{answer:?}");
    // A folder argument offers folders only.
    let mount = fish(&env, &["mount", "f"]);
    assert_eq!(values(&mount), ["flows/"], "{mount:?}");
    assert!(fish(&env, &["mount", "ta"]).is_empty());
}
