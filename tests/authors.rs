//! Who did what (issue #41, #42 item 8), through the real binary: every start, step, answer,
//! pause, resume, rebind, fork and kill records its author — `--by NAME`, else `$UWF_BY`, else
//! git's `user.name` (not for steps), else the login name — and `thread show` (`by`,
//! `lastAction`) and `thread log` say it; a bad name is refused before anything happens; the
//! same over PostgreSQL.

mod common;
mod pg_server;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use common::machine::Machine;
use common::{json, success_stdout};

/// A person at `machine`: their login name is `user`, git's config is `gitconfig` (a file
/// that may name no one), and `UWF_BY` is unset unless `uwf_by` says.
struct Person<'a> {
    machine: &'a Machine,
    user: &'a str,
    gitconfig: &'a Path,
    uwf_by: Option<&'a str>,
}

impl Person<'_> {
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = self.machine.uwf();
        cmd.args(args)
            .env("USER", self.user)
            .env("LOGNAME", self.user)
            .env("GIT_CONFIG_GLOBAL", self.gitconfig)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("NO_COLOR", "1");
        match self.uwf_by {
            Some(name) => cmd.env("UWF_BY", name),
            None => cmd.env_remove("UWF_BY"),
        };
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run uwf")
    }

    fn ok(&self, args: &[&str]) -> String {
        success_stdout(args, &self.run(args))
    }

    fn show(&self, id: &str) -> Value {
        json(&self.ok(&["thread", "show", id, "--json"]))
    }

    fn log(&self, id: &str) -> String {
        self.ok(&["thread", "log", id])
    }

    /// Starts a thread of `review` and returns its id.
    fn start(&self, extra: &[&str]) -> String {
        let mut args = vec!["thread", "start", "review", "-p", "write it"];
        args.extend_from_slice(extra);
        json(&self.ok(&args))["thread"]
            .as_str()
            .expect("an id")
            .to_owned()
    }
}

const REVIEW: &str = "name: review\nroles:\n  writer:\n    goal: Write.\n    meta: { type: object, properties: { text: { type: string } }, required: [text] }\n  approver:\n    goal: Approve or not.\n    meta: { type: object, properties: { approved: { type: boolean } }, required: [approved] }\ngraph:\n  $START: [ { role: writer, condition: null } ]\n  writer: [ { role: approver, condition: null } ]\n  approver: [ { role: $END, condition: null } ]\n";

/// Git's config naming `name`, or no one.
fn gitconfig(dir: &Path, name: Option<&str>) -> std::path::PathBuf {
    let path = dir.join(format!("gitconfig-{}", name.unwrap_or("none")));
    let text = name
        .map(|n| format!("[user]\n\tname = {n}\n"))
        .unwrap_or_default();
    std::fs::write(&path, text).expect("gitconfig");
    path
}

fn last_action(show: &Value) -> (String, String) {
    let last = &show["lastAction"];
    let text = |key: &str| last[key].as_str().unwrap_or_default().to_owned();
    (text("event"), text("by"))
}

/// Every act with `--by`, on the store `machine` uses: each name in `thread show --json` and
/// `thread log`.
fn every_act_names_its_author(machine: &Machine) {
    let none = gitconfig(machine.dir.path(), None);
    let me = Person {
        machine,
        user: "someone",
        gitconfig: &none,
        uwf_by: None,
    };
    let review = machine.dir.path().join("review.yaml");
    std::fs::write(&review, REVIEW).unwrap();
    me.ok(&["workflow", "put", review.to_str().unwrap()]);

    let id = me.start(&["--by", "Alice Smith"]);
    let show = me.show(&id);
    assert_eq!(show["by"], "Alice Smith", "{show}");

    me.ok(&["thread", "step", &id, "--agent", "dry", "--by", "bob"]);
    assert_eq!(
        last_action(&me.show(&id)),
        ("finished".into(), "bob".into())
    );
    let log = me.log(&id);
    assert!(
        log.contains("── step 1 · writer · agent dry · by bob · "),
        "{log}"
    );

    for (args, event, by) in [
        (["thread", "pause", &id, "--by", "carol"], "paused", "carol"),
        (["thread", "resume", &id, "--by", "dave"], "resumed", "dave"),
    ] {
        me.ok(&args);
        let show = me.show(&id);
        assert_eq!(last_action(&show), (event.into(), by.into()), "{show}");
        assert!(me.log(&id).contains(&format!("\n── {event} by {by} · ")));
    }
    me.ok(&["thread", "rebind", &id, "writer=dry", "--by", "erin"]);
    assert_eq!(
        last_action(&me.show(&id)),
        ("rebound".into(), "erin".into())
    );

    // A fork's author is who forked it, not who started the thread it comes from.
    let from = format!("{id}:1");
    let fork = json(&me.ok(&["thread", "fork", &from, "--by", "frank"]))["thread"]
        .as_str()
        .unwrap()
        .to_owned();
    let show = me.show(&fork);
    assert_eq!(show["by"], "frank", "{show}");
    assert!(me.log(&fork).starts_with("── forked by frank · "));

    // The step that asks is who ran it; the answer is who answered.
    me.ok(&["thread", "step", &fork, "--agent", "human", "--by", "gus"]);
    let answer = machine.dir.path().join("answer.yaml");
    std::fs::write(&answer, "approved: true\n").unwrap();
    let file = answer.to_str().unwrap();
    me.ok(&["thread", "answer", &fork, "-f", file, "--by", "gina"]);
    let show = me.show(&fork);
    assert_eq!(last_action(&show), ("finished".into(), "gina".into()));
    let log = me.log(&fork);
    assert!(
        log.contains("── step 2 · approver · agent human · by gus · "),
        "{log}"
    );
    assert!(log.contains("\n── step 2 answered by gina · "), "{log}");

    me.ok(&["thread", "kill", &id, "--by", "hal"]);
    let show = me.show(&id);
    assert_eq!(show["status"], "killed", "{show}");
    assert_eq!(show["by"], "Alice Smith", "{show}");
    assert_eq!(last_action(&show), ("killed".into(), "hal".into()));
    assert!(me.log(&id).contains("\n── killed by hal · "));
}

#[test]
fn every_act_names_its_author_in_show_and_log() {
    every_act_names_its_author(&Machine::new(None, None));
}

#[test]
fn every_act_names_its_author_over_postgres() {
    let name = "every_act_names_its_author_over_postgres";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    every_act_names_its_author(&Machine::new(Some(&url), None));
}

#[test]
fn the_default_is_uwf_by_else_gits_user_name_else_the_login_name() {
    let machine = Machine::new(None, None);
    let dir = machine.dir.path();
    let (grace, nobody) = (gitconfig(dir, Some("Grace Hopper")), gitconfig(dir, None));
    let with_git = Person {
        machine: &machine,
        user: "ghopper",
        gitconfig: &grace,
        uwf_by: None,
    };
    let review = dir.join("review.yaml");
    std::fs::write(&review, REVIEW).unwrap();
    with_git.ok(&["workflow", "put", review.to_str().unwrap()]);

    let id = with_git.start(&[]);
    assert_eq!(with_git.show(&id)["by"], "Grace Hopper");
    with_git.ok(&["thread", "pause", &id]);
    assert_eq!(
        last_action(&with_git.show(&id)),
        ("paused".into(), "Grace Hopper".into())
    );
    with_git.ok(&["thread", "resume", &id]);
    // Steps run no git: their author is the login name.
    with_git.ok(&["thread", "step", &id, "--agent", "dry"]);
    let log = with_git.log(&id);
    assert!(log.contains("· agent dry · by ghopper · "), "{log}");

    let without_git = Person {
        gitconfig: &nobody,
        ..with_git
    };
    let id = without_git.start(&[]);
    assert_eq!(without_git.show(&id)["by"], "ghopper");

    let set = Person {
        uwf_by: Some("ops bot"),
        ..with_git
    };
    let id = set.start(&[]);
    assert_eq!(set.show(&id)["by"], "ops bot");
    set.ok(&["thread", "step", &id, "--agent", "dry"]);
    assert!(set.log(&id).contains("· agent dry · by ops bot · "));
}

#[test]
fn a_bad_name_is_refused_before_anything_happens() {
    let machine = Machine::new(None, None);
    let none = gitconfig(machine.dir.path(), None);
    let me = Person {
        machine: &machine,
        user: "someone",
        gitconfig: &none,
        uwf_by: None,
    };
    let review = machine.dir.path().join("review.yaml");
    std::fs::write(&review, REVIEW).unwrap();
    me.ok(&["workflow", "put", review.to_str().unwrap()]);
    let id = me.start(&[]);
    let long = "x".repeat(65);
    for (args, says) in [
        (
            vec!["thread", "start", "review", "-p", "p", "--by", "a\nb"],
            "character 2 is U+000A, a control character",
        ),
        (
            vec!["thread", "pause", &id, "--by", "\u{1b}[31mred"],
            "a control character",
        ),
        (
            vec!["thread", "kill", &id, "--by", &long],
            "the name has 65 characters; at most 64",
        ),
        (
            vec!["thread", "step", &id, "--agent", "dry", "--by", "  "],
            "the name is empty",
        ),
    ] {
        let out = me.run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.starts_with("error: --by "), "{err}");
        assert!(err.contains(says), "{err}");
        assert!(
            err.contains("hint: a name is 1 to 64 printable characters"),
            "{err}"
        );
    }
    let bad_env = Person {
        uwf_by: Some("a\tb"),
        ..me
    };
    let out = bad_env.run(&["thread", "pause", &id]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("UWF_BY names who acts"), "{err}");
    // Nothing happened: one thread, active, unpaused, no step.
    let listed = me.ok(&["thread", "list"]);
    assert_eq!(listed.lines().count(), 1, "{listed}");
    let show = me.show(&id);
    assert_eq!(show["status"], "active", "{show}");
    assert_eq!(show["steps"], 0, "{show}");
    assert_eq!(show["lastAction"], Value::Null, "{show}");
}

#[test]
fn a_workers_steps_name_who_runs_it() {
    let machine = Machine::new(None, None);
    let none = gitconfig(machine.dir.path(), None);
    let me = Person {
        machine: &machine,
        user: "someone",
        gitconfig: &none,
        uwf_by: None,
    };
    let review = machine.dir.path().join("review.yaml");
    std::fs::write(&review, REVIEW).unwrap();
    me.ok(&["workflow", "put", review.to_str().unwrap()]);
    let id = me.start(&["--queue"]);
    me.ok(&["worker", "--until-idle", "--agent", "dry", "--by", "wendy"]);
    let log = me.log(&id);
    assert!(
        log.contains("── step 1 · writer · agent dry · by wendy · "),
        "{log}"
    );
    let show = me.show(&id);
    assert_eq!(last_action(&show), ("finished".into(), "wendy".into()));
}

/// The real git, for the wrapper that counts calls.
fn real_git() -> std::path::PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("git"))
        .find(|p| p.is_file())
        .expect("git on PATH")
}

#[test]
fn gits_user_name_is_read_from_its_files_without_a_git_process_when_they_are_plain() {
    if !common::has(
        "gits_user_name_is_read_from_its_files_without_a_git_process_when_they_are_plain",
        &[common::Need::Tool("git")],
    ) {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let machine = Machine::new(None, None);
    let dir = machine.dir.path();
    let review = dir.join("review.yaml");
    std::fs::write(&review, REVIEW).unwrap();
    machine.ok(&["workflow", "put", review.to_str().unwrap()]);

    // A `git` first on PATH that notes each call, then runs the real one.
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let calls = dir.join("git-calls");
    let wrapper = bin.join("git");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\nexec '{}' \"$@\"\n",
            calls.display(),
            real_git().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());

    let home = dir.join("home");
    let xdg = dir.join("xdg");
    let repo = dir.join("repo");
    std::fs::create_dir_all(xdg.join("git")).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(repo.join("sub")).unwrap();
    let init = Command::new(real_git())
        .args(["init", "-q"])
        .current_dir(&repo)
        .env("HOME", &home)
        .output()
        .unwrap();
    assert!(init.status.success(), "{init:?}");
    let cwd = repo.join("sub");

    // What uwf records as the starter, and what git itself says, in the same place.
    let recorded = || {
        let out = machine
            .uwf()
            .args(["thread", "start", "review", "-p", "x"])
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", &xdg)
            .env("PATH", &path)
            .env_remove("UWF_BY")
            .env("USER", "login-name")
            .current_dir(&cwd)
            .output()
            .unwrap();
        let id = json(&success_stdout(&["thread", "start"], &out))["thread"]
            .as_str()
            .unwrap()
            .to_owned();
        let show = json(&machine.ok(&["thread", "show", &id, "--json"]));
        show["by"]
            .as_str()
            .unwrap_or_else(|| panic!("a starter in {show}"))
            .to_owned()
    };
    let git_says = || {
        let out = Command::new(real_git())
            .args(["config", "--get", "user.name"])
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", &xdg)
            .current_dir(&cwd)
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let git_calls = || std::fs::read_to_string(&calls).unwrap_or_default();
    let local = repo.join(".git").join("config");
    let local_text = std::fs::read_to_string(&local).unwrap();

    // Plain files, read by uwf alone, each agreeing with git.
    let cases: [(&str, &str, &str, &str); 4] = [
        (
            "global",
            "[user]\n\tname = \"  Ada \" Lovelace  # a comment\n",
            "",
            "",
        ),
        (
            "xdg below global",
            "[user] name = Global\n",
            "[user]\nname = Xdg\n",
            "",
        ),
        (
            "xdg alone",
            "",
            "[User]\n\tNAME = Grace \\\"Amazing\\\" Hopper ; note\n",
            "",
        ),
        (
            "the repository's own",
            "[user]\nname = Global\n",
            "",
            "[user]\n\tname = Repo Person\n",
        ),
    ];
    for (case, global, xdg_text, repo_text) in cases {
        std::fs::write(home.join(".gitconfig"), global).unwrap();
        std::fs::write(xdg.join("git").join("config"), xdg_text).unwrap();
        std::fs::write(&local, format!("{local_text}{repo_text}")).unwrap();
        let _ = std::fs::remove_file(&calls);
        let expected = git_says();
        assert!(!expected.is_empty(), "{case}: git names someone");
        assert_eq!(recorded(), expected, "{case}: {expected:?}");
        assert_eq!(git_calls(), "", "{case}: no git process");
    }

    // An include is git's to follow: uwf asks git, and agrees with it.
    std::fs::write(home.join("other"), "[user]\n\tname = Included Person\n").unwrap();
    std::fs::write(
        home.join(".gitconfig"),
        "[user]\nname = Before\n[include]\n\tpath = other\n",
    )
    .unwrap();
    std::fs::write(xdg.join("git").join("config"), "").unwrap();
    std::fs::write(&local, &local_text).unwrap();
    let _ = std::fs::remove_file(&calls);
    assert_eq!(git_says(), "Included Person");
    assert_eq!(recorded(), "Included Person");
    assert!(git_calls().contains("user.name"), "{}", git_calls());
}
