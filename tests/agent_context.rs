//! A thread's agent context through the real binary, over a directory store and over
//! PostgreSQL: its agents run in the thread's working directory with the `env` of their
//! configuration (secrets from `.env`), keep the bindings they started with until `thread
//! rebind`, and stop at a pause — for `thread step`, `uwf run` and a worker. (The mount's part
//! is in `fs_mount.rs`.)

mod common;
mod pg_server;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::machine::Machine;

/// A machine whose default agent appends `THREAD ROLE PWD TAG` to `seen.txt`, then answers
/// with the solve-issue script; `TAG` comes from the agent's `env`.
struct Scene {
    machine: Machine,
    seen: PathBuf,
}

impl Scene {
    fn new(url: Option<&str>) -> Scene {
        let machine = Machine::new(url, None);
        let dir = machine.dir.path().to_path_buf();
        let seen = dir.join("seen.txt");
        let agent = common::write_script(
            &dir.join("agent.sh"),
            &format!(
                "echo \"$1 $2 $(pwd) $TAG\" >> {}\nexec {} agent script --file {} \"$1\" \"$2\"",
                seen.display(),
                env!("CARGO_BIN_EXE_uwf"),
                machine.script().display()
            ),
        );
        let scene = Scene { machine, seen };
        scene.config(&agent, "one");
        std::fs::write(scene.machine.root().join(".env"), "TAG_SECRET=s3\n").unwrap();
        common::chmod_600(&scene.machine.root().join(".env"));
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/solve-issue.yaml");
        scene
            .machine
            .ok(&["workflow", "put", example.to_str().unwrap()]);
        scene
    }

    /// config.yaml: the agent with `TAG: <tag>-${TAG_SECRET}`.
    fn config(&self, agent: &Path, tag: &str) {
        std::fs::write(
            self.machine.root().join("config.yaml"),
            format!(
                "agents:\n  tagged:\n    command: {}\n    env:\n      TAG: \"{tag}-${{TAG_SECRET}}\"\ndefaultAgent: tagged\n",
                agent.display()
            ),
        )
        .unwrap();
    }

    fn agent(&self) -> PathBuf {
        self.machine.dir.path().join("agent.sh")
    }

    /// A new directory under the machine's, canonical.
    fn dir(&self, name: &str) -> PathBuf {
        let dir = self.machine.dir.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        dir.canonicalize().unwrap()
    }

    fn start(&self, workdir: &Path, queue: bool) -> String {
        let mut args = vec!["thread", "start", "solve-issue", "-p", "task", "-q"];
        args.extend(["--workdir", workdir.to_str().unwrap()]);
        if queue {
            args.push("--queue");
        }
        self.machine.ok(&args)
    }

    /// What the agent saw for thread `id`: `(role, pwd, tag)` per step.
    fn seen(&self, id: &str) -> Vec<(String, String, String)> {
        std::fs::read_to_string(&self.seen)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut w = l.split(' ');
                (w.next()? == id).then(|| {
                    let role = w.next().unwrap_or_default().to_owned();
                    let pwd = w.next().unwrap_or_default().to_owned();
                    (role, pwd, w.next().unwrap_or_default().to_owned())
                })
            })
            .collect()
    }

    fn steps(&self, id: &str) -> usize {
        let show = common::json(&self.machine.ok(&["thread", "show", id]));
        show["steps"].as_u64().unwrap() as usize
    }

    /// `uwf worker` (running until killed, or until idle), in a directory of its own.
    fn worker(&self, until_idle: bool) -> Child {
        let mut cmd = self.machine.uwf();
        cmd.arg("worker");
        if until_idle {
            cmd.arg("--until-idle");
        }
        cmd.current_dir("/")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn worker")
    }
}

fn wait_until(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn finish(mut child: Child) {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("a worker did not finish");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(child.wait().unwrap().success(), "the worker failed");
}

fn scenario(url: Option<&str>) {
    let s = Scene::new(url);
    let (w1, w2, w3) = (s.dir("one"), s.dir("two"), s.dir("three"));
    let w1s = w1.display().to_string();

    // `thread step` from another directory runs the agent in the thread's; its env reaches it
    // with the secret filled in from .env.
    let t1 = s.start(&w1, false);
    s.machine.ok(&["thread", "step", &t1]);
    assert_eq!(
        s.seen(&t1),
        [("planner".into(), w1s.clone(), "one-s3".into())]
    );
    let show = common::json(&s.machine.ok(&["thread", "show", &t1]));
    assert_eq!(show["workdir"], w1s.as_str(), "{show}");
    assert_eq!(show["agents"]["developer"], "tagged", "{show}");

    // A config edit after the start: the running thread keeps its agent, a new one gets the
    // new one — stepped by a worker that was running before the edit.
    let worker = s.worker(false);
    s.config(&s.agent(), "two");
    let t2 = s.start(&w2, true);
    wait_until(
        "the worker to finish the new thread",
        Duration::from_secs(60),
        || s.seen(&t2).len() == 5,
    );
    assert!(
        s.seen(&t2)
            .iter()
            .all(|(_, pwd, tag)| *pwd == w2.display().to_string() && tag == "two-s3"),
        "{:?}",
        s.seen(&t2)
    );
    s.machine.ok(&["thread", "queue", &t1]);
    wait_until(
        "the worker to step the old thread",
        Duration::from_secs(60),
        || s.seen(&t1).len() >= 2,
    );
    let mut worker = worker;
    let _ = worker.kill();
    let _ = worker.wait();
    assert_eq!(
        s.seen(&t1)[1],
        ("developer".into(), w1s.clone(), "one-s3".into())
    );

    // Paused: a step is refused naming the pause, a worker passes it by; resumed, it goes on.
    let t3 = s.start(&w3, false);
    s.machine.ok(&["thread", "pause", &t3]);
    let err = s.machine.fails(&["thread", "step", &t3]);
    assert!(err.contains("is paused"), "{err}");
    assert!(err.contains(&format!("uwf thread resume {t3}")), "{err}");
    let show = common::json(&s.machine.ok(&["thread", "show", &t3]));
    assert_eq!(show["paused"], true, "{show}");
    assert_eq!(
        show["status"], "active",
        "a refused step is no failure: {show}"
    );
    s.machine.ok(&["thread", "queue", &t3]);
    finish(s.worker(true));
    assert_eq!(s.steps(&t3), 0, "a worker skips a paused thread");
    s.machine.ok(&["thread", "resume", &t3]);
    finish(s.worker(true));
    assert_eq!(s.steps(&t3), 5, "resumed, a worker runs it to its end");

    // Rebind: the old thread takes the agent config.yaml names now.
    let t4 = s.start(&w1, false);
    s.config(&s.agent(), "three");
    s.machine.ok(&["thread", "step", &t4]);
    s.machine.ok(&["thread", "rebind", &t4]);
    s.machine.ok(&["thread", "step", &t4]);
    let tags: Vec<String> = s.seen(&t4).into_iter().map(|(_, _, tag)| tag).collect();
    assert_eq!(tags, ["two-s3", "three-s3"]);
    let err = s.machine.fails(&["thread", "rebind", &t4, "nosuch=dry"]);
    assert!(err.contains("has no role `nosuch`"), "{err}");

    // A missing secret: doctor names it, and a step says which one.
    std::fs::write(s.machine.root().join(".env"), "OTHER=x\n").unwrap();
    let out = s.machine.run(&["doctor"]);
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("TAG_SECRET"), "{text}");
    let err = s.machine.fails(&["thread", "step", &t4]);
    assert!(err.contains("`TAG_SECRET`"), "{err}");
    std::fs::write(s.machine.root().join(".env"), "TAG_SECRET=s3\n").unwrap();

    // `uwf run`: started and run to the end here, one line per step.
    let out = s.machine.ok(&["run", "solve-issue", "-p", "all at once"]);
    let lines: Vec<serde_json::Value> = out.lines().map(common::json).collect();
    let id = lines[0]["thread"].as_str().unwrap().to_owned();
    assert_eq!(lines.len(), s.steps(&id), "{out}");
    assert_eq!(lines.last().unwrap()["done"], true, "{out}");
    let here = s.machine.dir.path().canonicalize().unwrap();
    assert!(
        s.seen(&id)
            .iter()
            .all(|(_, pwd, _)| *pwd == here.display().to_string()),
        "by default a thread runs where it was started: {:?}",
        s.seen(&id)
    );
}

#[test]
fn agents_run_in_the_threads_directory_with_their_bindings_and_stop_at_a_pause() {
    scenario(None);
}

#[test]
fn agent_context_over_postgresql() {
    let name = "agent_context_over_postgresql";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    scenario(Some(&url));
}

#[test]
fn a_missing_working_directory_is_named_when_the_step_starts() {
    let s = Scene::new(None);
    let gone = s.dir("gone");
    let t = s.start(&gone, false);
    std::fs::remove_dir(&gone).unwrap();
    let err = s.machine.fails(&["thread", "step", &t]);
    assert!(err.contains("working directory"), "{err}");
    assert!(err.contains(&gone.display().to_string()), "{err}");
    let err = s.machine.fails(&[
        "thread",
        "start",
        "solve-issue",
        "-p",
        "x",
        "--workdir",
        "/no/such/dir",
    ]);
    assert!(err.contains("/no/such/dir"), "{err}");
}
