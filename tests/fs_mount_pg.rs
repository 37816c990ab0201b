//! Real mounts over PostgreSQL (issue #18): two storage roots — two machines'
//! local halves — share one fresh database in a private server, each mounted with `uwf mount`.
//! Threads started or stepped through one root show in the other's mount within a second, and a
//! `touch step` through one mount and a `uwf thread step` through the other root exclude each
//! other on the thread's lease: one wins, the other gets EBUSY (the mount) or exit 75 (the CLI).
//!
//! Skips with a printed reason when /dev/fuse or the PostgreSQL binaries are missing
//! (`UWF_REQUIRE_ALL_TESTS=1` / `UWF_REQUIRE_POSTGRES=1` make a skip fail). Every mount is
//! owned by a [`Mounted`] guard whose `Drop` always unmounts (plain → lazy → connection abort)
//! and reaps the daemon, also when a test panics.

mod common;
mod pg_server;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Env, Need};
use uwf::fs::unmount;

const UWF: &str = env!("CARGO_BIN_EXE_uwf");

/// What "within a second" allows (`docs/mount.md#caching-and-control-files`); a test's own commands
/// are measured inside it.
const WITHIN: Duration = Duration::from_secs(1);

const LOOP: &str = "name: loop\nroles:\n  planner:\n    goal: plan\n    meta:\n      type: object\n      \
properties: { plan: { type: string } }\n      required: [plan]\n  reviewer:\n    goal: review\n    \
meta:\n      type: object\n      properties: { ok: { type: boolean } }\n      required: [ok]\n\
conditions:\n  approved:\n    expression: \"steps[-1].output.ok = true\"\n\
graph:\n  $START: [ { role: planner, condition: null } ]\n  planner: [ { role: reviewer, condition: null } ]\n  \
reviewer: [ { role: $END, condition: approved }, { role: planner, condition: null } ]\n";

/// One machine: a storage root whose `config.yaml` names the shared database, and whose default
/// agent is the built-in dry agent after `delay` seconds (a separate program, so a step holds
/// its lease that long).
struct Machine {
    env: Env,
    url: String,
}

impl Machine {
    fn new(url: &str, delay: u32) -> Machine {
        let env = Env::new();
        let agent = common::script(
            &env,
            "slow-dry.sh",
            &format!("sleep {delay}\nexec '{UWF}' agent dry \"$1\" \"$2\""),
        );
        std::fs::write(
            env.root().join("config.yaml"),
            format!(
                "storage: '{url}'\ndefaultAgent: slow\nagents:\n  slow: {{ command: '{}' }}\n",
                agent.display()
            ),
        )
        .expect("config.yaml");
        Machine {
            env,
            url: url.to_owned(),
        }
    }

    fn root(&self) -> PathBuf {
        self.env.root()
    }

    /// `uwf args…` against this root only (a database named in our own environment is not
    /// this test's).
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(UWF);
        cmd.args(args)
            .env_remove("WORKFLOW_STORAGE_ROOT")
            .env_remove("UWF_STORAGE_URL")
            .env("UWF_STORAGE_ROOT", self.root())
            .env("HOME", self.env.dir.path())
            .env("NO_COLOR", "1")
            .current_dir(self.env.dir.path());
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run uwf")
    }

    fn ok(&self, args: &[&str]) -> String {
        common::success_stdout(args, &self.run(args))
    }

    /// `uwf args…` in the background, its output piped.
    fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn uwf")
    }
}

/// Two machines on one fresh database, or `None` (after printing why) when FUSE or PostgreSQL
/// is missing.
fn two_machines(test: &str, delay: u32) -> Option<(Machine, Machine)> {
    if !common::has(test, &[Need::Fuse]) {
        return None;
    }
    let server = pg_server::shared(test)?;
    let url = server.fresh_db(test);
    let a = Machine::new(&url, delay);
    let b = Machine::new(&url, delay);
    let put = a
        .command(&["workflow", "put", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(LOOP.as_bytes())?;
            child.wait_with_output()
        })
        .expect("workflow put");
    assert!(put.status.success(), "{put:?}");
    Some((a, b))
}

/// Unmounts leftovers of earlier crashed runs under `base`.
fn clean_stale_mounts(base: &Path) {
    if let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") {
        for m in unmount::parse_mountinfo(&text) {
            if m.mount_point.starts_with(base) {
                let _ = unmount::unmount(&m.mount_point, true);
            }
        }
    }
}

/// A running `uwf mount --background` of one machine's root.
struct Mounted {
    dir: PathBuf,
    pid: u32,
    root: PathBuf,
}

impl Mounted {
    fn start(machine: &Machine, name: &str) -> Mounted {
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fs-mount-pg");
        std::fs::create_dir_all(&base).expect("mount base");
        let dir = base.join(name);
        clean_stale_mounts(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mount dir");
        let out = machine.run(&["mount", "--background", dir.to_str().expect("utf-8 path")]);
        assert!(
            out.status.success(),
            "mount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("mount prints JSON");
        Mounted {
            dir,
            pid: report["pid"].as_u64().expect("pid") as u32,
            root: machine.root(),
        }
    }

    /// Runs `sh -c script` in the mount under a hard timeout.
    fn sh(&self, script: &str) -> Output {
        Command::new("timeout")
            .args(["-s", "KILL", "30", "sh", "-c", script])
            .current_dir(&self.dir)
            .env("UWF_STORAGE_ROOT", &self.root)
            .env_remove("UWF_STORAGE_URL")
            .output()
            .expect("run sh")
    }

    /// Runs a script that must succeed; returns its stdout.
    fn ok(&self, script: &str) -> String {
        let out = self.sh(script);
        common::assert_succeeded(&format!("`{script}`"), &out);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Polls `script` until its output satisfies `done`; the output and how long it took, or
    /// the last output after `limit`.
    fn until(
        &self,
        script: &str,
        limit: Duration,
        done: impl Fn(&str) -> bool,
    ) -> (String, Option<Duration>) {
        let start = Instant::now();
        loop {
            let out = self.ok(script);
            if done(&out) {
                return (out, Some(start.elapsed()));
            }
            if start.elapsed() > limit {
                return (out, None);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn mounted(&self) -> bool {
        unmount::find(&self.dir).ok().flatten().is_some()
    }

    fn alive(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .is_ok_and(|stat| !stat.contains(") Z "))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.mounted() && (unmount::unmount(&self.dir, false).is_err() || self.mounted()) {
            let _ = unmount::unmount(&self.dir, true);
        }
        let start = Instant::now();
        while self.alive() && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if self.alive() {
            let _ = Command::new("kill")
                .args(["-9", &self.pid.to_string()])
                .status();
        }
    }
}

fn thread_of(json_line: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(json_line.trim()).expect("JSON");
    v["thread"].as_str().expect("thread").to_owned()
}

fn head_of(json_line: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(json_line.trim()).expect("JSON");
    v["head"].as_str().expect("head").to_owned()
}

/// The number of steps `uwf thread show` reports.
fn steps(machine: &Machine, id: &str) -> u64 {
    let v: serde_json::Value =
        serde_json::from_str(&machine.ok(&["thread", "show", id])).expect("JSON");
    v["steps"].as_u64().expect("steps")
}

#[test]
fn two_mounts_see_the_same_threads_within_a_second() {
    let test = "two_mounts_see_the_same_threads_within_a_second";
    let Some((a, b)) = two_machines(test, 0) else {
        return;
    };
    let ma = Mounted::start(&a, "see-a");
    let mb = Mounted::start(&b, "see-b");
    assert_eq!(ma.ok("ls threads"), "");
    assert_eq!(mb.ok("ls threads && ls workflows"), "error\nloop\n");
    // Each mount listens (a session whose last statement is the LISTEN), not only polls; the
    // listener connects in the background after the first look at `threads/`.
    let mut raw = pg_server::PgServer::raw(&a.url);
    let mut listening = || -> i64 {
        raw.query_one(
            "select count(*) from pg_stat_activity \
             where datname = current_database() and query = 'listen uwf_threads'",
            &[],
        )
        .expect("pg_stat_activity")
        .get(0)
    };
    let start = Instant::now();
    while listening() < 2 && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(listening(), 2, "one listener per mount");

    // Started through A: both mounts list it within a second.
    let id = thread_of(&a.ok(&["thread", "start", "loop", "-p", "shared"]));
    for m in [&ma, &mb] {
        let (out, took) = m.until("ls threads", WITHIN, |o| o.contains(&id));
        assert!(took.is_some(), "not listed within {WITHIN:?}: {out:?}");
        assert_eq!(
            m.ok(&format!("cat threads/{id}/status")),
            "active next=planner\n"
        );
    }

    // Stepped through B's CLI: A's mount shows the step, head and status within a second.
    let head = head_of(&b.ok(&["thread", "step", &id]));
    let t = format!("threads/{id}");
    let (out, took) = ma.until(&format!("ls {t}/steps"), WITHIN, |o| {
        o.contains("001-planner")
    });
    assert!(took.is_some(), "step not shown within {WITHIN:?}: {out:?}");
    assert_eq!(ma.ok(&format!("cat {t}/head")), format!("{head}\n"));
    assert!(
        ma.ok(&format!("cat {t}/steps/001-planner/output.yaml"))
            .contains("plan:")
    );
    assert_eq!(ma.ok(&format!("cat {t}/status")), "active next=reviewer\n");
    // The node B wrote is in A's `cas/`, listed from the database.
    let (out, took) = ma.until("ls cas", Duration::from_secs(2), |o| o.contains(&head));
    assert!(took.is_some(), "{head} not in cas/: {out}");
    assert!(ma.ok(&format!("cat cas/{head}")).contains("\"payload\""));

    // A workflow registered through B shows in A's `workflows/` within a second.
    let put = b
        .command(&["workflow", "put", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            let text = LOOP.replace("name: loop", "name: other");
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(text.as_bytes())?;
            child.wait()
        })
        .expect("workflow put");
    assert!(put.success());
    let (out, took) = ma.until("ls workflows", WITHIN + Duration::from_millis(200), |o| {
        o.contains("other")
    });
    assert!(took.is_some(), "registry change not shown: {out}");

    // Archived through A's CLI: B's mount shows it done.
    a.ok(&["thread", "kill", &id]);
    let (out, took) = mb.until(&format!("cat {t}/status"), WITHIN, |o| {
        !o.starts_with("active")
    });
    assert!(took.is_some(), "archive not shown: {out}");
    assert_eq!(out, "killed\n");
}

#[test]
fn a_step_through_one_mount_and_one_through_the_other_root_exclude_each_other() {
    let test = "a_step_through_one_mount_and_one_through_the_other_root_exclude_each_other";
    let Some((a, b)) = two_machines(test, 2) else {
        return;
    };
    let ma = Mounted::start(&a, "race-a");
    let mb = Mounted::start(&b, "race-b");
    let id = thread_of(&a.ok(&["thread", "start", "loop", "-p", "race"]));
    let t = format!("threads/{id}");
    ma.until("ls threads", WITHIN, |o| o.contains(&id));
    mb.until("ls threads", WITHIN, |o| o.contains(&id));

    // B's CLI steps first: A's mount sees it running and refuses `touch step` with EBUSY.
    let mut cli = b.spawn(&["thread", "step", &id]);
    let (status, took) = ma.until(&format!("cat {t}/status"), Duration::from_secs(5), |o| {
        o.starts_with("running")
    });
    assert!(took.is_some(), "B's step not seen running in A: {status}");
    let out = ma.sh(&format!("touch {t}/step"));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Device or resource busy"),
        "{out:?}"
    );
    assert!(ma.ok(&format!("cat {t}/error")).contains("busy"));
    let done = cli.wait().expect("cli step");
    assert!(done.success(), "{done:?}");
    assert_eq!(steps(&a, &id), 1);

    // A's mount steps first: B's CLI is refused as busy (exit 75), and a `wait` in B's mount
    // blocks until A's step is done, then B's mount lists it.
    ma.ok(&format!("touch {t}/step"));
    let (status, took) = mb.until(&format!("cat {t}/status"), Duration::from_secs(5), |o| {
        o.starts_with("running")
    });
    assert!(took.is_some(), "A's step not seen running in B: {status}");
    let out = b.run(&["thread", "step", &id]);
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("busy"),
        "{out:?}"
    );
    let answer = mb.ok(&format!("cat {t}/wait"));
    // B's own last outcome (its step above) was overtaken: the thread's state answers.
    let shown: serde_json::Value = serde_json::from_str(&b.ok(&["thread", "show", &id])).unwrap();
    assert_eq!(
        head_of(&answer),
        shown["head"].as_str().unwrap(),
        "{answer}"
    );
    let (listed, took) = mb.until(&format!("ls {t}/steps"), WITHIN, |o| {
        o.contains("002-reviewer")
    });
    assert!(took.is_some(), "A's step not listed in B: {listed}");
    assert_eq!(steps(&b, &id), 2);

    // Both at once: exactly one wins, the other is refused, and one step is added.
    let _ = std::fs::remove_file(a.root().join("runs").join(format!("{id}.error")));
    let cli = b.spawn(&["thread", "step", &id]);
    let touch = ma.sh(&format!("touch {t}/step"));
    let cli = cli.wait_with_output().expect("cli step");
    // The mount's step, if it started, has ended once `wait` answers.
    ma.ok(&format!("cat {t}/wait"));
    let touch_busy = String::from_utf8_lossy(&touch.stderr).contains("Device or resource busy");
    let cli_busy = cli.status.code() == Some(75);
    let error = ma.ok(&format!("cat {t}/error"));
    match (cli.status.success(), cli_busy) {
        // B won: A's touch was refused at open, or its worker lost the lease and said so.
        (true, false) => assert!(touch_busy || error.contains("busy"), "{touch:?} {error}"),
        // A won: its touch succeeded.
        (false, true) => assert!(touch.status.success(), "{touch:?}"),
        other => panic!("neither won cleanly: {other:?} {cli:?} {touch:?}"),
    }
    assert_eq!(steps(&a, &id), 3, "exactly one new step");
    assert_eq!(steps(&b, &id), 3);
}

/// One role, then the end: a thread of it takes one step.
const ONE: &str = "name: one\nroles:\n  writer:\n    goal: write\n    meta:\n      type: object\n      \
properties: { text: { type: string } }\n      required: [text]\n\
graph:\n  $START: [ { role: writer, condition: null } ]\n  writer: [ { role: $END, condition: null } ]\n";

/// An agent that prints `tick N <ms since the epoch>` every 200 ms, ten times, then writes its
/// step with the dry agent.
fn chatty_agent(machine: &Machine) -> PathBuf {
    common::script(
        &machine.env,
        "chatty.sh",
        &format!(
            "for i in 1 2 3 4 5 6 7 8 9 10; do echo \"tick $i $(date +%s%3N)\" >&2; sleep 0.2; done\n\
             exec '{UWF}' agent dry \"$1\" \"$2\""
        ),
    )
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

/// The acceptance of "see every machine's work": a worker on machine A runs a chatty
/// agent; on machine B `uwf thread live` prints each line within a second of the agent printing
/// it, `tail -f` of the mount's log shows it, `thread log` equals A's log file byte for byte,
/// and the mount's `events` and `status` are A's; a fork made on A shows in B's `origin` and
/// `forks/`.
#[test]
fn a_worker_on_one_machine_is_watched_live_from_the_other() {
    let name = "a_worker_on_one_machine_is_watched_live_from_the_other";
    let Some((a, b)) = two_machines(name, 0) else {
        return;
    };
    let one = a.root().join("one.yaml");
    std::fs::write(&one, ONE).expect("one.yaml");
    a.ok(&["workflow", "put", one.to_str().expect("utf-8")]);
    let agent = chatty_agent(&a);
    let id = a.ok(&["thread", "start", "one", "-p", "tick tock", "--queue", "-q"]);
    let id = id.trim().to_owned();
    let mount = Mounted::start(&b, name);

    // B watches before A's worker starts.
    let mut live = b.spawn(&["thread", "live", &id]);
    let live_out = live.stdout.take().expect("stdout");
    let (first_tick, ticked) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut lines = Vec::new();
        for line in std::io::BufReader::new(live_out).lines() {
            let Ok(line) = line else { break };
            if line.starts_with("tick ") {
                let _ = first_tick.send(());
            }
            lines.push((now_ms(), line));
        }
        lines
    });
    let tail = Command::new("timeout")
        .args(["-s", "KILL", "20", "sh", "-c"])
        .arg(format!(
            "tail -n +1 -f threads/{id}/log | grep -m1 'tick 10'"
        ))
        .current_dir(&mount.dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tail -f");

    let worker = a.spawn(&[
        "worker",
        "--until-idle",
        "--agent",
        agent.to_str().expect("utf-8"),
    ]);
    // While A's step runs, B's `cat wait` blocks until it ends (woken by the lease's release),
    // then shows the outcome A recorded.
    ticked
        .recv_timeout(Duration::from_secs(20))
        .expect("a first tick on B");
    let wait = Command::new("timeout")
        .args(["-s", "KILL", "20", "cat"])
        .arg(format!("threads/{id}/wait"))
        .current_dir(&mount.dir)
        .output()
        .expect("cat wait");
    let waited_until = now_ms();
    common::assert_succeeded("cat wait on B", &wait);
    let outcome: serde_json::Value =
        serde_json::from_slice(&wait.stdout).expect("wait prints JSON");
    assert_eq!(outcome["thread"], id.as_str(), "{outcome}");

    let worker = worker.wait_with_output().expect("worker");
    common::assert_succeeded("uwf worker", &worker);

    let started = Instant::now();
    while live.try_wait().expect("live").is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "`thread live` on B did not end with the thread"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let lines = reader.join().expect("reader");
    let ticks: Vec<(u64, u64)> = lines
        .iter()
        .filter_map(|(seen, line)| {
            let rest = line.strip_prefix("tick ")?;
            let printed: u64 = rest.split(' ').nth(1)?.parse().ok()?;
            Some((*seen, printed))
        })
        .collect();
    assert_eq!(ticks.len(), 10, "B's `thread live` printed: {lines:#?}");
    for (i, (seen, printed)) in ticks.iter().enumerate() {
        let late = seen.saturating_sub(*printed);
        assert!(
            late <= 1000,
            "tick {} reached B's `thread live` {late} ms after the agent printed it",
            i + 1
        );
    }
    let last_tick = ticks.last().expect("ticks").1;
    assert!(
        waited_until >= last_tick,
        "B's `cat wait` returned before A's step ended"
    );
    eprintln!(
        "B saw the ticks {:?} ms after A's agent printed them",
        ticks
            .iter()
            .map(|(s, p)| s.saturating_sub(*p))
            .collect::<Vec<_>>()
    );
    assert!(
        lines.iter().any(|(_, l)| l.contains("is done")),
        "{lines:#?}"
    );

    let tail = tail.wait_with_output().expect("tail");
    let tail_text = String::from_utf8_lossy(&tail.stdout);
    assert!(
        tail_text.contains("tick 10"),
        "`tail -f threads/{id}/log` on B's mount showed: {tail_text}"
    );

    // The log on B is A's log, byte for byte; the mount shows the same.
    let a_log = std::fs::read(a.root().join("runs").join(format!("{id}.log"))).expect("A's log");
    let b_log = b.run(&["thread", "log", &id]);
    assert!(b_log.status.success(), "{b_log:?}");
    assert_eq!(
        String::from_utf8_lossy(&b_log.stdout),
        String::from_utf8_lossy(&a_log)
    );
    let mounted_log = mount.ok(&format!("cat threads/{id}/log"));
    assert_eq!(mounted_log, String::from_utf8_lossy(&a_log));
    let events = mount.ok(&format!("cat threads/{id}/events"));
    let kinds: Vec<String> = events
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("event JSON");
            v["event"].as_str().expect("event").to_owned()
        })
        .collect();
    assert!(
        kinds.starts_with(&["started".to_owned(), "finished".to_owned()]),
        "{events}"
    );
    let status = mount.ok(&format!("cat threads/{id}/status"));
    assert!(status.starts_with("done"), "{status}");

    // A fork made on A: its origin and the source's forks/ on B.
    let fork = a.ok(&["thread", "fork", &format!("{id}:1"), "-q"]);
    let fork = fork.trim().to_owned();
    let (origin, took) = mount.until(
        &format!("readlink threads/{fork}/origin 2>/dev/null; true"),
        Duration::from_secs(5),
        |out| out.contains(&id),
    );
    assert!(took.is_some(), "B's origin of fork {fork}: {origin:?}");
    let (forks, took) = mount.until(
        &format!("ls threads/{id}/forks"),
        Duration::from_secs(5),
        |out| out.contains(&fork),
    );
    assert!(took.is_some(), "B's forks/ of {id}: {forks:?}");
}
