//! The thread views without FUSE: what `threads/<id>/…` shows next to what the CLI's renderers
//! say, and the trigger rules of control files replayed with the exact op sequences of `touch`,
//! `echo >` and a path-only time change (as the kernel sends them: `touch` is OPEN, SETATTR times
//! without a handle, FLUSH, RELEASE; `echo >` is OPEN, SETATTR size 0, WRITE, FLUSH, RELEASE).
//!
//! Invariant: rendered files are checked against `engine::render`'s own output, so the mount
//! and the CLI cannot drift apart unnoticed.

use std::time::Duration;

use serde_json::json;

use super::{Fx, ME, WO};
use crate::cas::Store;
use crate::cas::store::now_ms;
use crate::engine::agent::submit::{self, Submission};
use crate::engine::cycle::lifecycle;
use crate::engine::thread::index;
use crate::engine::thread::render;
use crate::engine::thread::view::ThreadView;
use crate::engine::workflow::{self, registry};
use crate::fs::attr::{Kind, Lookup, SetAttr, TimeSet};
use crate::fs::error::FsError;

const LOOP: &str = "name: loop\nroles:\n  planner:\n    goal: plan\n    meta:\n      type: object\n      \
properties: { plan: { type: string } }\n      required: [plan]\n  reviewer:\n    goal: review\n    \
meta:\n      type: object\n      properties: { ok: { type: boolean } }\n      required: [ok]\n\
conditions:\n  approved:\n    expression: \"steps[-1].output.ok = true\"\n\
graph:\n  $START: [ { role: planner, condition: null } ]\n  planner: [ { role: reviewer, condition: null } ]\n  \
reviewer: [ { role: $END, condition: approved }, { role: planner, condition: null } ]\n";

impl Fx {
    fn store(&self) -> Store {
        Store::open(self._dir.path()).unwrap()
    }

    /// Registers the `loop` workflow and writes `config.yaml` (`agent`: a shell command line).
    fn with_loop(agent: &str) -> Fx {
        let fx = Fx::new();
        let store = fx.store();
        let checked = workflow::parse(LOOP).unwrap();
        let hash = checked.definition.store(&store).unwrap();
        registry::register(fx._dir.path(), "loop", hash, now_ms()).unwrap();
        std::fs::write(
            fx._dir.path().join("config.yaml"),
            format!(
                "agents:\n  test:\n    command: sh\n    args: [\"-c\", {agent:?}]\ndefaultAgent: test\n"
            ),
        )
        .unwrap();
        fx
    }

    fn start(&self, prompt: &str) -> String {
        let id = lifecycle::start(&self.store(), "loop", prompt).unwrap().1;
        self.tree.source().index_changed();
        id
    }

    /// Appends a step by hand (as an agent would write it) and moves the head.
    fn add_step(&self, id: &str, role: &str, output: serde_json::Value, body: &str) {
        let store = self.store();
        let view = ThreadView::load(&store, id).unwrap();
        let submission = Submission {
            agent: "hand".into(),
            raw: body.into(),
            ..Default::default()
        };
        let step =
            submit::write_step(&store, &view, role, &output, Some(body), submission).unwrap();
        index::compare_and_set(self._dir.path(), id, view.head, step).unwrap();
        self.tree.source().index_changed();
    }

    fn finish(&self, id: &str) {
        let store = self.store();
        let view = ThreadView::load(&store, id).unwrap();
        index::archive(self._dir.path(), id, view.workflow_hash, "done").unwrap();
        self.tree.source().index_changed();
    }

    fn setattr(&self, path: &str, fh: Option<u64>, set: SetAttr) -> Result<(), FsError> {
        let ino = self.find(path).unwrap();
        self.tree.setattr(ino, fh, set, ME).map(drop)
    }

    fn settle(&self) {
        assert!(self.tree.jobs().wait_idle(Duration::from_secs(20)));
    }
}

fn touch_times() -> SetAttr {
    SetAttr {
        atime: Some(TimeSet::Now),
        mtime: Some(TimeSet::Now),
        ..SetAttr::default()
    }
}

fn truncate() -> SetAttr {
    SetAttr {
        size: Some(0),
        ..SetAttr::default()
    }
}

#[test]
fn a_thread_reads_like_the_cli_renders_it() {
    let fx = Fx::with_loop("exit 3");
    let id = fx.start("Fix the login bug");
    fx.add_step(&id, "planner", json!({"plan": "first"}), "Plan A.");
    fx.add_step(&id, "reviewer", json!({"ok": false}), "No.");
    fx.add_step(&id, "planner", json!({"plan": "second"}), "Plan B.");
    let t = format!("threads/{id}");
    assert_eq!(fx.names("threads"), std::slice::from_ref(&id));
    assert_eq!(
        fx.names(&t),
        [
            "prompt",
            "head",
            "status",
            "workflow",
            "step",
            "run",
            "kill",
            "log",
            "events",
            "error",
            "transcript.md",
            "question",
            "answer",
            "cost",
            "steps",
            "forks"
        ]
    );
    // `wait` is not listed (walking never blocks) but is there by name.
    assert!(fx.cat(&format!("{t}/wait")).starts_with('{'));
    // What it spent: these steps recorded no tokens.
    let cost = fx.cat(&format!("{t}/cost"));
    assert!(cost.starts_with("spent: none reported\n"), "{cost}");
    assert!(cost.ends_with("budget: none\n"), "{cost}");
    assert_eq!(
        fx.names(&format!("{t}/steps")),
        ["001-planner", "002-reviewer", "003-planner", "latest"]
    );
    assert_eq!(fx.cat(&format!("{t}/prompt")), "Fix the login bug");
    assert_eq!(fx.cat(&format!("{t}/status")), "active next=reviewer\n");
    let store = fx.store();
    let summary = lifecycle::summary(&store, &id).unwrap();
    assert_eq!(fx.cat(&format!("{t}/head")), format!("{}\n", summary.head));
    let s3 = format!("{t}/steps/003-planner");
    assert_eq!(fx.cat(&format!("{s3}/output.yaml")), "plan: second\n");
    assert_eq!(
        fx.cat(&format!("{s3}/output.json")),
        render::output_json(&json!({"plan": "second"}))
    );
    assert_eq!(fx.cat(&format!("{s3}/body.md")), "Plan B.");
    assert_eq!(fx.cat(&format!("{s3}/hash")), format!("{}\n", summary.head));
    assert_eq!(fx.cat(&format!("{s3}/role")), "planner\n");
    assert_eq!(fx.cat(&format!("{s3}/agent")), "hand\n");
    let diff = fx.cat(&format!("{s3}/diff"));
    assert!(diff.contains("--- 001-planner/output.yaml"), "{diff}");
    assert!(diff.contains("+++ 003-planner/output.yaml"), "{diff}");
    assert!(diff.contains("-plan: first\n+plan: second"), "{diff}");
    assert_eq!(fx.cat(&format!("{t}/steps/001-planner/diff")), "");
    assert_eq!(fx.cat(&format!("{t}/steps/002-reviewer/diff")), "");
    let detail = fx.cat(&format!("{s3}/detail.yaml"));
    let entry = &ThreadView::load(&store, &id).unwrap().chain.steps[2];
    assert_eq!(detail, render::detail_yaml(&store, entry.detail).unwrap());
    assert!(detail.contains("bodyText: Plan B."), "{detail}");
    // The transcript is `thread read`'s.
    let view = ThreadView::load(&store, &id).unwrap();
    let body_of = |e: &crate::engine::chain::Entry| {
        crate::engine::thread::render::stored_body(&store, e.detail)
    };
    let expected = render::transcript(&view, "active next=reviewer", 3, None, &body_of);
    assert_eq!(fx.cat(&format!("{t}/transcript.md")), expected);
    // Links.
    let link = |p: &str| fx.tree.readlink(fx.find(p).unwrap()).unwrap();
    assert_eq!(link(&format!("{t}/workflow")), "../../workflows/loop");
    assert_eq!(link(&format!("{t}/steps/latest")), "003-planner");
    assert_eq!(link("workflows/loop/latest"), format!("../../threads/{id}"));
    assert_eq!(
        link(&format!("workflows/loop/threads/{id}")),
        format!("../../../threads/{id}")
    );
    assert_eq!(
        fx.names("workflows/loop"),
        [
            "workflow.yaml",
            "hash",
            "graph.mmd",
            "versions",
            "prompt",
            "latest",
            "threads"
        ]
    );
    assert_eq!(fx.names("workflows/demo/threads"), Vec::<String>::new());
    // Sizes are true sizes; kinds and permissions as documented.
    let attr = |p: &str| fx.tree.getattr(fx.find(p).unwrap(), None).unwrap();
    assert_eq!(
        attr(&format!("{t}/transcript.md")).size as usize,
        expected.len()
    );
    assert_eq!(attr(&format!("{s3}/output.yaml")).size, 13);
    assert_eq!(attr(&format!("{t}/workflow")).kind, Kind::Symlink);
    assert_eq!(attr(&format!("{t}/step")).perm, 0o644);
    assert_eq!(attr(&format!("{t}/prompt")).perm, 0o444);
    // Step directories are timed by their nodes (`ls -lt` sorts them).
    assert!(attr(&format!("{t}/steps/001-planner")).mtime <= attr(&s3).mtime);
    // Misses: a name that can never appear is cached for long.
    let steps = fx.find(&format!("{t}/steps")).unwrap();
    let miss = |dir, name| fx.tree.lookup(dir, name).unwrap();
    assert_eq!(
        miss(steps, "004-reviewer"),
        Lookup::Missing { permanent: false }
    );
    assert_eq!(
        miss(steps, "002-planner"),
        Lookup::Missing { permanent: true }
    );
    assert_eq!(miss(steps, "notes"), Lookup::Missing { permanent: true });
    let threads = fx.find("threads").unwrap();
    assert_eq!(miss(threads, "nope"), Lookup::Missing { permanent: true });
    // Archived: status says so, everything still reads.
    fx.finish(&id);
    assert_eq!(fx.cat(&format!("{t}/status")), "done\n");
    assert_eq!(fx.cat(&format!("{s3}/output.yaml")), "plan: second\n");
    assert_eq!(
        miss(steps, "004-reviewer"),
        Lookup::Missing { permanent: true }
    );
}

#[test]
fn touch_echo_and_a_path_only_time_change_each_start_exactly_one_step() {
    let fx = Fx::with_loop("echo failing on purpose >&2; exit 3");
    let id = fx.start("count the steps");
    let step = format!("threads/{id}/step");
    let jobs = || fx.tree.jobs().started();

    // touch: LOOKUP, OPEN WRONLY|NONBLOCK, FLUSH, SETATTR atime=now mtime=now (no fh), FLUSH,
    // RELEASE.
    let (_, fh) = fx.open(&step, WO | libc::O_NONBLOCK);
    fx.tree.flush(fh).unwrap();
    fx.setattr(&step, None, touch_times()).unwrap();
    fx.tree.flush(fh).unwrap();
    fx.tree.release(fh);
    assert_eq!(jobs(), 1, "touch");
    fx.settle();

    // echo > step: OPEN WRONLY, SETATTR size=0 (no fh), FLUSH, WRITE, FLUSH, RELEASE.
    let (_, fh) = fx.open(&step, WO);
    fx.setattr(&step, None, truncate()).unwrap();
    fx.tree.flush(fh).unwrap();
    fx.tree.write(fh, 0, b"\n").unwrap();
    fx.tree.flush(fh).unwrap();
    fx.tree.release(fh);
    assert_eq!(jobs(), 2, "echo >");
    fx.settle();

    // A path-only time change with no handle open (`os.utime`).
    fx.setattr(&step, None, touch_times()).unwrap();
    assert_eq!(jobs(), 3, "utime");
    fx.settle();

    // truncate -s 0: SETATTR size=0 with the handle.
    let (_, fh) = fx.open(&step, WO | libc::O_NONBLOCK);
    fx.setattr(&step, Some(fh), truncate()).unwrap();
    fx.tree.flush(fh).unwrap();
    fx.tree.release(fh);
    assert_eq!(jobs(), 4, "truncate");
    fx.settle();

    // A write handle that changes nothing starts nothing; neither does reading.
    let (_, fh) = fx.open(&step, WO | libc::O_APPEND);
    fx.tree.flush(fh).unwrap();
    fx.tree.release(fh);
    assert_eq!(fx.cat(&step), "");
    assert_eq!(jobs(), 4, "open and close");

    // The steps ran (and failed, as the agent does): the engine recorded why.
    let error = fx.cat(&format!("threads/{id}/error"));
    assert!(error.contains("exited with exit code 3"), "{error}");
    assert!(
        fx.cat(&format!("threads/{id}/status"))
            .starts_with("failed: agent `test` exited")
    );
    let wait = fx.cat(&format!("threads/{id}/wait"));
    assert!(wait.contains("\"ok\":false"), "{wait}");
    assert!(
        fx.cat(&format!("threads/{id}/log"))
            .contains("failing on purpose")
    );
}

#[test]
fn a_running_step_makes_step_busy_and_wait_block() {
    let fx = Fx::with_loop("sleep 1; exit 3");
    let id = fx.start("slow");
    let step = format!("threads/{id}/step");
    fx.setattr(&step, None, touch_times()).unwrap();
    // Busy from the trigger on (the worker may not hold the step lock yet).
    let ino = fx.find(&step).unwrap();
    assert!(matches!(fx.tree.open(ino, WO, ME), Err(FsError::Busy(_))));
    assert!(matches!(
        fx.setattr(&step, None, touch_times()),
        Err(FsError::Busy(_))
    ));
    assert!(
        fx.cat(&format!("threads/{id}/status"))
            .starts_with("running role=planner pid=")
    );
    assert!(fx.cat(&format!("threads/{id}/error")).contains("busy"));
    // `wait` blocks until the step is over, then shows its outcome (there was none before).
    let wait = fx.cat(&format!("threads/{id}/wait"));
    assert!(!fx.tree.jobs().in_flight(&id), "it waited for the step");
    assert!(wait.contains("exited with exit code 3"), "{wait}");
    assert_eq!(fx.tree.jobs().started(), 1);
    fx.settle();
}

#[test]
fn a_finished_thread_refuses_steps_with_einval_and_says_why() {
    let fx = Fx::with_loop("exit 3");
    let id = fx.start("done already");
    fx.add_step(&id, "planner", json!({"plan": "p"}), "");
    fx.finish(&id);
    let step = format!("threads/{id}/step");
    let ino = fx.find(&step).unwrap();
    let refused = fx.tree.open(ino, WO, ME);
    assert!(matches!(&refused, Err(FsError::Refused(_))), "{refused:?}");
    assert_eq!(refused.err().map(|e| e.errno()), Some(libc::EINVAL));
    let error = fx.cat(&format!("threads/{id}/error"));
    assert!(error.starts_with("step: thread"), "{error}");
    assert!(error.contains("archived (done)"), "{error}");
    assert!(matches!(
        fx.setattr(&step, None, touch_times()),
        Err(FsError::Refused(_))
    ));
    assert_eq!(fx.tree.jobs().started(), 0);
}

#[test]
fn a_prompt_starts_one_thread_at_close_or_at_a_read_on_the_same_descriptor() {
    let fx = Fx::with_loop("exit 3");
    let prompt = "workflows/loop/prompt";
    // echo "…" > prompt: OPEN WRONLY, SETATTR size=0, FLUSH (before the write: nothing), WRITE,
    // FLUSH (starts), RELEASE.
    let (_, fh) = fx.open(prompt, WO);
    fx.setattr(prompt, None, truncate()).unwrap();
    fx.tree.flush(fh).unwrap();
    assert!(fx.names("threads").is_empty());
    fx.tree.write(fh, 0, b"Fix the login bug\n").unwrap();
    fx.tree.flush(fh).unwrap();
    fx.tree.release(fh);
    let ids = fx.names("threads");
    assert_eq!(ids.len(), 1);
    assert_eq!(
        fx.cat(&format!("threads/{}/prompt", ids[0])),
        "Fix the login bug\n"
    );
    assert_eq!(
        fx.tree
            .readlink(fx.find("workflows/loop/latest").unwrap())
            .unwrap(),
        format!("../../threads/{}", ids[0])
    );
    // Clone-style: O_RDWR, write, read on the same descriptor → the id; close adds nothing.
    let (ino, fh) = fx.open(prompt, libc::O_RDWR);
    fx.tree.write(fh, 0, b"Second").unwrap();
    let id = String::from_utf8(fx.tree.read(ino, fh, 6, 4096).unwrap()).unwrap();
    assert_eq!(
        fx.tree.read(ino, fh, 6 + id.len() as u64, 4096).unwrap(),
        b""
    );
    fx.close(fh).unwrap();
    let id = id.trim();
    assert_eq!(fx.cat(&format!("threads/{id}/prompt")), "Second");
    assert_eq!(fx.names("threads").len(), 2);
    // An empty prompt starts nothing, fails its write (and its close), and says why.
    let (_, fh) = fx.open(prompt, WO);
    assert!(matches!(
        fx.tree.write(fh, 0, b"\n"),
        Err(FsError::Refused(_))
    ));
    assert!(matches!(fx.tree.flush(fh), Err(FsError::Refused(_))));
    fx.tree.release(fh);
    assert_eq!(fx.names("threads").len(), 2);
    assert!(fx.cat("workflows/error").contains("the prompt is empty"));
}

#[test]
fn fork_starts_a_thread_at_that_step() {
    let fx = Fx::with_loop("exit 3");
    let id = fx.start("to fork");
    fx.add_step(&id, "planner", json!({"plan": "p"}), "");
    fx.add_step(&id, "reviewer", json!({"ok": false}), "");
    let fork = format!("threads/{id}/steps/001-planner/fork");
    let (ino, fh) = fx.open(&fork, libc::O_RDWR);
    fx.tree.write(fh, 0, b"x").unwrap();
    let new = String::from_utf8(fx.tree.read(ino, fh, 1, 4096).unwrap()).unwrap();
    fx.close(fh).unwrap();
    let new = new.trim();
    assert_ne!(new, id);
    assert_eq!(
        fx.names(&format!("threads/{new}/steps")),
        ["001-planner", "latest"]
    );
    assert_eq!(
        fx.cat(&format!("threads/{new}/steps/001-planner/hash")),
        fx.cat(&format!("threads/{id}/steps/001-planner/hash"))
    );
    assert_eq!(
        fx.cat(&format!("threads/{new}/status")),
        "active next=reviewer\n"
    );
}

#[test]
fn kill_archives_the_thread() {
    let fx = Fx::with_loop("exit 3");
    let id = fx.start("to kill");
    let kill = format!("threads/{id}/kill");
    let (_, fh) = fx.open(&kill, WO);
    fx.tree.write(fh, 0, b"\n").unwrap();
    fx.close(fh).unwrap();
    let status = format!("threads/{id}/status");
    let started = std::time::Instant::now();
    while fx.cat(&status) != "killed\n" && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(fx.cat(&status), "killed\n");
    let ino = fx.find(&format!("threads/{id}/run")).unwrap();
    assert!(matches!(
        fx.tree.open(ino, WO, ME),
        Err(FsError::Refused(_))
    ));
}

#[test]
fn warming_renders_a_whole_thread_and_knows_its_neighbours() {
    let fx = Fx::with_loop("exit 3");
    let first = fx.start("one");
    fx.add_step(&first, "planner", json!({"plan": "first"}), "Plan A.");
    fx.add_step(&first, "reviewer", json!({"ok": false}), "No.");
    fx.finish(&first);
    std::thread::sleep(Duration::from_millis(2));
    let second = fx.start("two");
    let source = fx.tree.source();
    assert_eq!(
        source.neighbour_thread(&first, false).as_deref(),
        Some(second.as_str())
    );
    assert_eq!(source.neighbour_thread(&second, false), None);
    assert_eq!(
        source.neighbour_thread(&second, true).as_deref(),
        Some(first.as_str())
    );
    assert_eq!(source.neighbour_thread(&first, true), None);
    let before = source.rendered_count();
    source.warm_thread(&first, crate::fs::views::Order::Listing);
    // Two steps' output.yaml, output.json, body.md, detail.yaml, diff, and the transcript.
    assert_eq!(source.rendered_count(), before + 2 * 5 + 1);
    // What the warmer rendered is what the tree serves.
    let s = format!("threads/{first}/steps/002-reviewer");
    assert_eq!(fx.cat(&format!("{s}/output.yaml")), "ok: false\n");
    assert_eq!(
        source.rendered_count(),
        before + 2 * 5 + 1,
        "nothing new to render"
    );
}

#[test]
fn what_the_mount_starts_forks_and_kills_names_who_mounted_it() {
    let fx = Fx::with_loop("exit 3");
    let (ino, fh) = fx.open("workflows/loop/prompt", libc::O_RDWR);
    fx.tree.write(fh, 0, b"Started here").unwrap();
    let id = String::from_utf8(fx.tree.read(ino, fh, 12, 4096).unwrap()).unwrap();
    fx.close(fh).unwrap();
    let id = id.trim();
    let head = crate::cas::Hash::parse(fx.cat(&format!("threads/{id}/head")).trim()).unwrap();
    let mut shown = json!({});
    crate::engine::thread::author::show(&fx.store(), id, head, &mut shown);
    assert_eq!(shown["by"], "mounter", "{shown}");

    fx.add_step(id, "planner", json!({"plan": "p"}), "");
    let fork = format!("threads/{id}/steps/001-planner/fork");
    let (ino, fh) = fx.open(&fork, libc::O_RDWR);
    fx.tree.write(fh, 0, b"x").unwrap();
    let new = String::from_utf8(fx.tree.read(ino, fh, 1, 4096).unwrap()).unwrap();
    fx.close(fh).unwrap();
    let log = fx.cat(&format!("threads/{}/log", new.trim()));
    assert!(log.starts_with("── forked by mounter · "), "{log}");

    let (_, fh) = fx.open(&format!("threads/{id}/kill"), WO);
    fx.tree.write(fh, 0, b"\n").unwrap();
    fx.close(fh).unwrap();
    let log = format!("threads/{id}/log");
    let started = std::time::Instant::now();
    while !fx.cat(&log).contains("── killed by mounter · ")
        && started.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        fx.cat(&log).contains("── killed by mounter · "),
        "{}",
        fx.cat(&log)
    );
}
