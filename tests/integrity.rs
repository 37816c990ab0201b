//! Integrity under damage, crashes and hostile input (issue #13): a full disk leaves whole run
//! files and says "write"; fsck sees every damaged node; a step refuses to build on damage;
//! killed steps leave no processes and no temp files behind; bounded inputs and logs.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Env, json, start_thread};

const LOOP: &str = r#"
name: counter
roles:
  tick: { meta: { type: object, properties: { n: { type: integer } }, required: [n] } }
conditions:
  more: { expression: "$count(steps) < 50" }
graph:
  $START: [ { role: tick, condition: null } ]
  tick: [ { role: tick, condition: more }, { role: $END, condition: null } ]
"#;

/// A small tmpfs mounted at `path` for the life of the guard (this machine's tests run as root).
struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    fn mount(path: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(path).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "cannot mount a tmpfs at {}",
            path.display()
        );
        Tmpfs {
            path: path.to_path_buf(),
        }
    }

    /// Fills the filesystem: writes until the disk is full. Returns the filler's path.
    fn fill(&self) -> PathBuf {
        let filler = self.path.join("filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let block = vec![b'x'; 64 * 1024];
        loop {
            match file.write(&block) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    assert_eq!(e.kind(), std::io::ErrorKind::StorageFull, "{e}");
                    break;
                }
            }
        }
        // Fill the last partial page too.
        while file.write(b"x").is_ok_and(|n| n > 0) {}
        filler
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.path)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        }
    }
}

/// The thread's run files (`runs/<id>.*` but the lock and the log) and their contents.
fn run_files(env: &Env, id: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(env.root().join("runs")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let kept = ["run.json", "last.json", "error"]
            .iter()
            .any(|suffix| name == format!("{id}.{suffix}"));
        if kept {
            let text = std::fs::read_to_string(env.root().join("runs").join(&name)).unwrap();
            out.push((name, text));
        }
    }
    out.sort();
    out
}

/// Item 5: on a full disk, run and error files are never left empty or torn, and a failed
/// index write says "write" (once), not "cannot read".
#[test]
fn a_full_disk_leaves_whole_run_files_and_says_write() {
    let env = Env::new();
    let disk = Tmpfs::mount(&env.root(), "2m");
    env.ok_stdin(&["workflow", "put", "-"], LOOP);
    let id = start_thread(&env, "counter", "p");
    let head = json(&env.ok(&["thread", "step", &id, "--agent", "dry"]))["head"]
        .as_str()
        .unwrap()
        .to_owned();
    disk.fill();

    // A step cannot write its nodes: it fails, and its run files stay whole.
    let err = env.fails(&["thread", "step", &id, "--agent", "dry"], 1);
    assert!(!err.contains("cannot read"), "{err}");
    let files = run_files(&env, &id);
    assert!(!files.is_empty());
    for (name, text) in &files {
        assert!(!text.is_empty(), "{name} was left empty on a full disk");
        assert!(
            text.ends_with('\n') || text.starts_with('{'),
            "{name}: {text:?}"
        );
    }

    // An index write says what failed, once, and changes nothing (starting the same thread
    // again writes no node — its start node exists — only the thread index).
    let before = env.ok(&["thread", "list", "--all", "-q"]);
    let filler = disk.fill();
    let err = env.fails(&["thread", "start", "counter", "-p", "p"], 1);
    assert!(err.contains("index.db"), "{err}");
    assert!(!err.contains("cannot read"), "{err}");
    assert_eq!(
        err.matches("disk is full").count(),
        1,
        "the cause is said once: {err}"
    );
    assert_eq!(env.ok(&["thread", "list", "--all", "-q"]), before);
    // So does an append (a fork records where it came from first, in forks.jsonl).
    let err = env.fails(&["thread", "fork", &head], 1);
    assert!(
        err.contains("cannot append to") && err.contains("forks.jsonl"),
        "{err}"
    );
    assert!(!err.contains("cannot read"), "{err}");
    assert_eq!(err.matches("No space left on device").count(), 1, "{err}");

    // Space freed: the thread steps again and records the outcome.
    std::fs::remove_file(filler).unwrap();
    env.ok(&["thread", "step", &id, "--agent", "dry"]);
    let last: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(env.root().join("runs").join(format!("{id}.last.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(last["thread"], id.as_str());
    drop(disk);
}

/// A thread of `counter` with two steps written through `uwf agent submit` (so each has a raw
/// text and a body), and the hash of every kind of node it reaches.
struct Damageable {
    env: Env,
    id: String,
    nodes: Vec<(&'static str, &'static str, String)>,
}

fn payload(env: &Env, hash: &str) -> serde_json::Value {
    json(&env.ok(&["cas", "get", hash, "--payload"]))
}

fn two_step_thread() -> Damageable {
    let env = Env::new();
    env.ok_stdin(&["workflow", "put", "-"], LOOP);
    let id = start_thread(&env, "counter", "p");
    let agent = common::script(
        &env,
        "submit.sh",
        &format!(
            "printf -- '---\\nn: %d\\n---\\nBody of %d.\\n' $$ $$ | '{}' agent submit \"$1\" \"$2\" --agent sh",
            env!("CARGO_BIN_EXE_uwf")
        ),
    );
    let agent = agent.to_str().unwrap().to_owned();
    env.ok(&["thread", "step", &id, "--agent", &agent]);
    let head = json(&env.ok(&["thread", "step", &id, "--agent", &agent]))["head"]
        .as_str()
        .unwrap()
        .to_owned();
    let step = payload(&env, &head);
    let s = |v: &serde_json::Value| v.as_str().unwrap().to_owned();
    let detail = payload(&env, &s(&step["detail"]));
    let start = payload(&env, &s(&step["start"]));
    let workflow = payload(&env, &s(&start["workflow"]));
    let nodes = vec![
        // (kind as fsck names it, which node, the hash)
        ("head", "the head step", head.clone()),
        ("step", "the first step", s(&step["prev"])),
        ("start", "the start node", s(&step["start"])),
        ("output", "the head's output", s(&step["output"])),
        ("detail", "the head's detail", s(&step["detail"])),
        ("text", "the head's raw output", s(&detail["raw"])),
        ("text", "the head's body", s(&detail["body"])),
        ("workflow", "the workflow", s(&start["workflow"])),
        (
            "schema",
            "the role's schema",
            s(&workflow["roles"]["tick"]["meta"]),
        ),
    ];
    Damageable { env, id, nodes }
}

/// Items 1 and 2: every kind of node reachable from a thread, deleted or truncated: fsck names
/// it (missing or corrupt, its kind, the thread reaching it) and exits 1; a step refuses (and
/// leaves the head) when the damage is in what it builds on; a warm cache changes nothing.
#[test]
fn fsck_finds_every_damaged_node_and_a_step_refuses_to_build_on_damage() {
    // What a step builds on: checked before the agent runs.
    let builds_on = |what: &str| {
        matches!(
            what,
            "the head step"
                | "the start node"
                | "the head's output"
                | "the workflow"
                | "the role's schema"
        )
    };
    let mut cases = 0;
    for delete in [true, false] {
        for i in 0..9 {
            // A fresh thread per case, caches warm (the thread just stepped).
            let Damageable { env, id, nodes } = two_step_thread();
            let (kind, what, hash) = nodes[i].clone();
            let path = env.object_path(&hash);
            common::make_writable(&path);
            if delete {
                std::fs::remove_file(&path).unwrap();
            } else {
                let bytes = std::fs::read(&path).unwrap();
                std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
            }
            let case = format!(
                "{} {what} ({hash})",
                if delete { "deleted" } else { "truncated" }
            );
            let out = env.run(&["cas", "fsck"]);
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert_eq!(out.status.code(), Some(1), "{case}: {stdout}");
            let condition = if delete { "missing" } else { "corrupt" };
            let line = stdout
                .lines()
                .find(|l| l.starts_with(&format!("{condition} {kind} node {hash}")))
                .unwrap_or_else(|| panic!("{case}: fsck did not report it:\n{stdout}"));
            assert!(line.contains(&format!("thread {id}")), "{case}: {line}");
            if kind == "workflow" || kind == "schema" {
                assert!(line.contains("workflow counter"), "{case}: {line}");
            }
            if !delete {
                assert!(
                    !stdout.contains(&format!("missing {kind} node {hash}")),
                    "{case}"
                );
            }

            let head_of = |id: &str| {
                uwf::engine::storage::threads::read_threads(&env.root()).unwrap()[id].to_string()
            };
            let before = head_of(&id);
            let step = env.run(&["thread", "step", &id, "--agent", "dry"]);
            if builds_on(what) {
                let stderr = String::from_utf8_lossy(&step.stderr);
                assert_eq!(
                    step.status.code(),
                    Some(1),
                    "{case}: the step ran: {stderr}"
                );
                assert!(stderr.contains(&hash), "{case}: {stderr}");
                assert_eq!(head_of(&id), before, "{case}: the head moved");
            }
            if what == "the head step" {
                let err = env.fails(&["thread", "show", &id], 1);
                assert!(err.contains(&hash), "{case}: {err}");
            }
            cases += 1;
        }
    }
    assert_eq!(cases, 18, "every kind, deleted and truncated");
}

/// Issue #27 item 11: a middle step's step, output, detail or body node deleted or truncated,
/// with the thread's history cached (warm) or not (cold): `thread read` and `thread steps`
/// refuse (exit 1, nothing printed) and name the node by kind and hash, instead of rendering
/// the history from the chain cache. (`thread steps` renders no body, so body damage is read's.)
#[test]
fn reads_refuse_to_render_a_history_whose_nodes_are_gone() {
    let env = Env::new();
    env.ok_stdin(&["workflow", "put", "-"], LOOP);
    let id = start_thread(&env, "counter", "p");
    let agent = common::script(
        &env,
        "submit.sh",
        &format!(
            "printf -- '---\\nn: %d\\n---\\nBody of %d.\\n' $$ $$ | '{}' agent submit \"$1\" \"$2\" --agent sh",
            env!("CARGO_BIN_EXE_uwf")
        ),
    );
    let agent = agent.to_str().unwrap().to_owned();
    for _ in 0..3 {
        env.ok(&["thread", "step", &id, "--agent", &agent]);
    }
    let steps: Vec<serde_json::Value> = env
        .ok(&["thread", "steps", &id])
        .lines()
        .map(json)
        .collect();
    let middle = steps[1]["hash"].as_str().unwrap().to_owned();
    let step = payload(&env, &middle);
    let s = |v: &serde_json::Value| v.as_str().unwrap().to_owned();
    let detail = payload(&env, &s(&step["detail"]));
    let nodes = [
        ("step", middle.clone()),
        ("output", s(&step["output"])),
        ("detail", s(&step["detail"])),
        ("body", s(&detail["body"])),
    ];
    let chains = env.root().join("cache/chains");
    let mut cases = 0;
    for (kind, hash) in &nodes {
        let path = env.object_path(hash);
        let original = std::fs::read(&path).unwrap();
        for delete in [true, false] {
            for warm in [true, false] {
                for command in ["read", "steps"] {
                    if *kind == "body" && command == "steps" {
                        continue;
                    }
                    // Warm: the history as the steps left it cached. Cold: no cache at all.
                    env.ok(&["thread", "read", &id]);
                    if !warm {
                        std::fs::remove_dir_all(&chains).unwrap();
                    }
                    common::make_writable(&path);
                    if delete {
                        std::fs::remove_file(&path).unwrap();
                    } else {
                        std::fs::write(&path, &original[..original.len() / 2]).unwrap();
                    }
                    let case = format!(
                        "{} {kind} {hash}, {} cache, thread {command}",
                        if delete { "deleted" } else { "truncated" },
                        if warm { "warm" } else { "cold" }
                    );
                    let out = env.run(&["thread", command, &id]);
                    let stderr = String::from_utf8_lossy(&out.stderr);
                    assert_eq!(out.status.code(), Some(1), "{case}: {stderr}");
                    assert!(out.stdout.is_empty(), "{case}: printed anyway");
                    assert!(
                        stderr.contains(&format!("{kind} node {hash}")),
                        "{case}: {stderr}"
                    );
                    // Put back as it was.
                    std::fs::write(&path, &original).unwrap();
                    cases += 1;
                }
            }
        }
    }
    assert_eq!(cases, 28);
    env.ok(&["thread", "steps", &id]);
    assert!(env.ok(&["cas", "fsck"]).starts_with("ok:"));
}

/// Item 1: derived files that disagree with the store are reported, and `--repair` rebuilds
/// only them.
#[test]
fn fsck_checks_derived_files_and_repair_rebuilds_only_them() {
    let Damageable { env, id, nodes } = two_step_thread();
    let head = &nodes[0].2;
    let out = env.ok(&["cas", "fsck"]);
    assert!(out.starts_with("ok:"), "{out}");
    // A chain cache that claims another history, a decision that says another role, a type
    // index that lost a line.
    let chain = env.root().join(format!("cache/chains/{head}.json"));
    let text = std::fs::read_to_string(&chain).unwrap();
    std::fs::write(
        &chain,
        text.replace("\"position\":\"tick\"", "\"position\":\"tock\""),
    )
    .unwrap();
    let decision = env.root().join(format!("cache/decisions/{head}.json"));
    let text = std::fs::read_to_string(&decision).unwrap();
    std::fs::write(&decision, text.replace("\"tick\"", "\"$END\"")).unwrap();
    let step_type = env.ok(&["cas", "list", "--type", "step"]);
    assert_eq!(step_type.lines().count(), 2);
    let index = std::fs::read_dir(env.root().join("cas/index/types"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| std::fs::read_to_string(p).unwrap().contains(head.as_str()))
        .unwrap();
    let text = std::fs::read_to_string(&index).unwrap();
    std::fs::write(&index, text.replace(&format!("{head}\n"), "")).unwrap();

    let out = env.run(&["cas", "fsck"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(&format!("derived cache/chains/{head}.json")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("derived cache/decisions/{head}.json")),
        "{stdout}"
    );
    assert!(
        stdout.contains("derived cas/index/types: type index"),
        "{stdout}"
    );
    assert!(stderr.contains("--repair"), "{stderr}");

    let objects = |env: &Env| env.ok(&["cas", "list"]);
    let before = objects(&env);
    let out = env.ok(&["cas", "fsck", "--repair"]);
    assert!(out.contains("repair: rebuilt the type index"), "{out}");
    assert_eq!(objects(&env), before, "repair never touches nodes");
    assert!(env.ok(&["cas", "fsck"]).starts_with("ok:"));
    assert_eq!(
        env.ok(&["cas", "list", "--type", "step"]).lines().count(),
        2
    );
    // The thread carries on from the rebuilt caches.
    env.ok(&["thread", "step", &id, "--agent", "dry"]);
}

/// Whether process `pid` is alive (exists and is not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| Some(s[s.rfind(')')? + 2..].chars().next()? != 'Z'))
        .unwrap_or(false)
}

fn wait_until(what: &str, seconds: u64, mut ready: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    while !ready() {
        if std::time::Instant::now() > deadline {
            eprintln!("timed out waiting for {what}");
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    true
}

/// The step's watchdog (`uwf-watchdog`, a child of the step process), once it has started.
fn watchdog_of(step: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let comm = &stat[stat.find('(')? + 1..stat.rfind(')')?];
        let ppid: u32 = stat[stat.rfind(')')? + 2..]
            .split(' ')
            .nth(1)?
            .parse()
            .ok()?;
        (comm == "uwf-watchdog" && ppid == step && alive(pid)).then_some(pid)
    })
}

/// Item 3: `kill -9` of a step whose agent left `sleep 30` running in the background, with the
/// step's watchdog gone first (issue #27: it normally stops the agent's group itself, see
/// `tests/nothing_left_behind.rs`; a fork can fail): whoever next takes the thread (a step,
/// `thread kill`, `thread show`) kills that leftover first.
#[test]
fn a_killed_step_leaves_no_agent_children_behind() {
    for next in ["step", "kill", "show"] {
        let env = Env::new();
        env.ok_stdin(&["workflow", "put", "-"], LOOP);
        let id = start_thread(&env, "counter", "p");
        let pidfile = env.dir.path().join("sleep.pid");
        let agent = common::script(
            &env,
            "spawner.sh",
            &format!(
                "sleep 30 >/dev/null 2>&1 &\necho $! > '{}'\nsleep 30",
                pidfile.display()
            ),
        );
        let mut step = Command::new(env!("CARGO_BIN_EXE_uwf"))
            .args(["thread", "step", &id, "--agent"])
            .arg(&agent)
            .env("UWF_STORAGE_ROOT", env.root())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let run = env.root().join("runs").join(format!("{id}.run.json"));
        // The step has recorded its agent (the pid is written once the agent runs; a step
        // killed before that cannot know what to clean up) and the agent has started its child.
        let sleeper =
            || -> Option<u32> { std::fs::read_to_string(&pidfile).ok()?.trim().parse().ok() };
        assert!(wait_until("the agent's child", 10, || {
            sleeper().is_some()
                && std::fs::read_to_string(&run)
                    .is_ok_and(|t| t.contains("\"agentPid\":") && !t.contains("\"agentPid\":null"))
        }));
        let sleeper = sleeper().unwrap();
        let mut watchdog = None;
        assert!(wait_until("the step's watchdog", 10, || {
            watchdog = watchdog_of(step.id());
            watchdog.is_some()
        }));
        nix_kill(watchdog.unwrap()).unwrap();
        step.kill().unwrap(); // SIGKILL
        step.wait().unwrap();
        // The premise: the agent got its parent-death signal, its background child did not.
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(
            alive(sleeper),
            "{next}: the orphan should still run before anyone looks"
        );

        match next {
            "step" => {
                env.ok(&["thread", "step", &id, "--agent", "dry"]);
            }
            "kill" => {
                env.ok(&["thread", "kill", &id]);
            }
            _ => {
                env.ok(&["thread", "show", &id]);
            }
        }
        let gone = wait_until("the orphan to die", 3, || !alive(sleeper));
        if !gone {
            let _ = nix_kill(sleeper);
        }
        assert!(
            gone,
            "after `thread {next}`, the agent's `sleep 30` is still running"
        );
    }
}

fn nix_kill(pid: u32) -> std::io::Result<()> {
    let status = Command::new("kill")
        .arg("-9")
        .arg(pid.to_string())
        .status()?;
    assert!(status.success());
    Ok(())
}

/// Item 4: temp files of killed writers are removed by `cas gc` (older than its grace, here
/// none) and by the next writer in the same directory (older than an hour).
#[test]
fn abandoned_temp_files_are_removed_by_gc_and_by_the_next_writer() {
    let env = Env::new();
    env.ok(&["cas", "put", "text", "\"a\""]);
    let tmp = env.root().join("cas/tmp");
    let age = |path: &Path, secs: u64| {
        let file = std::fs::File::options().write(true).open(path).unwrap();
        file.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(secs))
            .unwrap();
    };
    // What a killed node writer and a killed index writer leave behind, two hours ago and now.
    let stale = [tmp.join(".uwf-tmp-AbC123"), tmp.join(".uwf-tmp-XyZ789")];
    let fresh = tmp.join(".uwf-tmp-busy00");
    for path in stale.iter().chain([&fresh]) {
        std::fs::write(path, "{\"partial").unwrap();
    }
    for path in &stale {
        age(path, 7200);
    }
    // The next writer (a new process putting a node) sweeps the stale ones, not the fresh one.
    env.ok(&["cas", "put", "text", "\"b\""]);
    for path in &stale {
        assert!(!path.exists(), "{} was left", path.display());
    }
    assert!(
        fresh.exists(),
        "a temp file young enough to be in use is kept"
    );
    // GC with no grace takes the rest.
    let out = env.ok(&["cas", "gc", "--grace", "0s", "--dry-run"]);
    assert!(out.contains("would remove 1 abandoned temp files"), "{out}");
    assert!(fresh.exists());
    let out = env.ok(&["cas", "gc", "--grace", "0s"]);
    assert!(out.contains("removed 1 abandoned temp files"), "{out}");
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
    // Index writers' temp files beside the root's files go the same way.
    let stale_root = env.root().join(".uwf-tmp-cfg000");
    std::fs::write(&stale_root, "partial").unwrap();
    age(&stale_root, 7200);
    env.ok(&["setup", "--agent", "dry"]);
    assert!(
        !stale_root.exists(),
        "the next writer of config.yaml swept it"
    );
}

/// Item 7: a workflow file larger than 1 MiB (even endless input) is refused as a whole-file
/// problem, before any YAML is parsed.
#[test]
fn oversized_workflow_files_are_refused_with_the_limit() {
    let env = Env::new();
    let big = env.dir.path().join("big.yaml");
    let mut text = LOOP.to_owned();
    while text.len() <= 1 << 20 {
        text.push_str("# padding padding padding padding padding padding padding padding\n");
    }
    std::fs::write(&big, &text).unwrap();
    let err = env.fails(&["workflow", "put", big.to_str().unwrap()], 1);
    assert!(err.contains("  - file: the file is"), "{err}");
    assert!(err.contains("at most 1048576"), "{err}");
    let err = env.fails(&["workflow", "put", "/dev/zero"], 1);
    assert!(
        err.contains("  - file: the input is more than 1048576 bytes"),
        "{err}"
    );
    // A name of 64 characters is fine, 65 is not.
    let ok = LOOP.replace("name: counter", &format!("name: {}", "n".repeat(64)));
    env.ok_stdin(&["workflow", "put", "-"], &ok);
    let long = LOOP.replace("name: counter", &format!("name: {}", "n".repeat(65)));
    let err = env.fails_stdin(&["workflow", "put", "-"], &long);
    assert!(err.contains("at most 64 characters"), "{err}");
}

/// Issue #27 item 14: an oversized workflow file is reported with its real size (from its
/// metadata), not with the read cap plus one; stdin reports the limit it passed.
#[test]
fn oversized_workflow_file_reports_its_real_size() {
    let env = Env::new();
    let big = env.dir.path().join("big.yaml");
    let mut text = LOOP.to_owned();
    text.push_str(&"#".repeat(10_486_317 - LOOP.len() - 1));
    text.push('\n');
    assert_eq!(text.len(), 10_486_317);
    std::fs::write(&big, &text).unwrap();
    let err = env.fails(&["workflow", "put", big.to_str().unwrap()], 1);
    assert!(
        err.contains("the file is 10486317 bytes; a workflow file has at most 1048576 (1 MiB)"),
        "{err}"
    );
    assert!(!err.contains("1048577"), "{err}");
    let err = env.fails_stdin(&["workflow", "put", "-"], &text);
    assert!(
        err.contains("the input is more than 1048576 bytes; a workflow file has at most 1048576"),
        "{err}"
    );
}

/// Peak RSS in KiB and the output of `uwf args…` (run to completion, reaped with `wait4`).
fn run_measured(env: &Env, args: &[&str], vars: &[(&str, &str)]) -> (i64, std::process::Output) {
    let child = Command::new(env!("CARGO_BIN_EXE_uwf"))
        .args(args)
        .env("UWF_STORAGE_ROOT", env.root())
        .envs(vars.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let out = child.wait_with_output_no_reap();
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid);
    let code = if libc::WIFEXITED(status) {
        Some(libc::WEXITSTATUS(status))
    } else {
        None
    };
    use std::os::unix::process::ExitStatusExt;
    let out = std::process::Output {
        status: std::process::ExitStatus::from_raw(code.map(|c| c << 8).unwrap_or(status)),
        stdout: out.0,
        stderr: out.1,
    };
    (usage.ru_maxrss, out)
}

/// Reads a child's stdout and stderr to the end, keeping the last 64 KiB of each, without
/// waiting for (reaping) it.
trait NoReap {
    fn wait_with_output_no_reap(self) -> (Vec<u8>, Vec<u8>);
}

fn read_tail(mut r: impl std::io::Read) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match r.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                kept.extend_from_slice(&buf[..n]);
                if kept.len() > 65536 {
                    kept.drain(..kept.len() - 65536);
                }
            }
        }
    }
    kept
}

impl NoReap for std::process::Child {
    fn wait_with_output_no_reap(mut self) -> (Vec<u8>, Vec<u8>) {
        let stderr = self.stderr.take().unwrap();
        let reader = std::thread::spawn(move || read_tail(stderr));
        let stdout = read_tail(self.stdout.take().unwrap());
        (stdout, reader.join().unwrap())
    }
}

/// Item 8: JSONata evaluation is bounded in memory: `uwf eval` of a product of two ranges stops
/// with an error naming the limit and how to raise it, well under 300 MB; the moderator obeys
/// the same limit (here set by the environment).
#[test]
fn jsonata_evaluation_is_bounded_in_memory() {
    let env = Env::new();
    // A generous time limit, so that on a loaded machine it is the memory limit that ends it.
    let (rss_kib, out) = run_measured(
        &env,
        &[
            "eval",
            "$count([1..10000].([1..10000]))",
            "--timeout-ms",
            "30000",
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("more than 256 MiB of memory"), "{stderr}");
    assert!(stderr.contains("--max-memory"), "{stderr}");
    assert!(rss_kib < 300 * 1024, "peak RSS {} MB", rss_kib / 1024);
    // Lower and raised limits are obeyed; a modest evaluation is untouched.
    let err = env.fails(
        &[
            "eval",
            "$count([1..500].([1..500]))",
            "--max-memory",
            "4MiB",
        ],
        1,
    );
    assert!(err.contains("more than 4 MiB"), "{err}");
    assert_eq!(env.ok(&["eval", "$count([1..500].([1..500]))"]), "250000");
    let err = env.fails(&["eval", "1", "--max-memory", "lots"], 2);
    assert!(err.contains("not a size"), "{err}");

    // The moderator: a condition that builds a large sequence.
    let bomb = LOOP.replace(
        "$count(steps) < 50",
        "$count([1..500].([1..500])) > 0 and $count(steps) < 50",
    );
    env.ok_stdin(&["workflow", "put", "-"], &bomb);
    let id = start_thread(&env, "counter", "p");
    let step_with_4_mib = || {
        env.uwf()
            .args(["thread", "step", &id, "--agent", "dry"])
            .env("UWF_JSONATA_MAX_MEMORY", "4MiB")
            .output()
            .unwrap()
    };
    // The first step needs no condition ($START goes to tick unconditionally); the decision
    // after it cannot be made within 4 MiB, so the next step has to make it and fails.
    assert!(step_with_4_mib().status.success());
    let out = step_with_4_mib();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("more than 4 MiB of memory"), "{stderr}");
    // With the default limit the same step works.
    env.ok(&["thread", "step", &id, "--agent", "dry"]);
}

/// Issue #27 item 9: values built in one go (string concatenation, `$pad`, `$join`, `$replace`,
/// `$string`, `$split`, a result repeating a large string, arrays flattened into one) are asked
/// of the memory budget before they are made, so no expression's peak RSS passes 300 MB while
/// the limit is 256 MiB; what fits is unchanged.
#[test]
fn jsonata_string_growth_is_bounded_in_memory() {
    let env = Env::new();
    for expression in [
        "( $d := function($s,$n){ $n = 0 ? $s : $d($s & $s, $n-1) }; $length($d('x', 40)) )",
        "$length($reduce([1..40], function($a,$b){ $a & $a }, 'x'))",
        "$length($pad('x', 1000000000))",
        "( $s := $pad('x', 100000000); $length($join([$s,$s,$s,$s], '')) )",
        "$length($replace($pad('', 100000000, 'x'), 'x', 'yyyy'))",
        "$length($replace($pad('', 100000000, 'x'), /x/, 'yyyy'))",
        "( $s := $pad('x', 60000000); $length($string([$s,$s,$s,$s,$s])) )",
        "( $s := $pad('x', 100000000); $length($uppercase($s) & '') )",
        "( $s := $pad('x', 100000000); [$s,$s,$s] )",
        "$count($split($pad('', 10000000, 'x'), ''))",
        "( $a := [1..1000000]; $count([$a,$a,$a,$a,$a,$a,$a,$a,$a,$a,$a,$a,$a,$a,$a,$a,$a,$a,$a,$a]) )",
    ] {
        let (rss_kib, out) =
            run_measured(&env, &["eval", expression, "--timeout-ms", "60000"], &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{expression}: {stderr}");
        assert!(
            stderr.contains("more than 256 MiB of memory"),
            "{expression}: {stderr}"
        );
        assert!(
            rss_kib < 300 * 1024,
            "{expression}: peak RSS {} MB",
            rss_kib / 1024
        );
    }
    for (expression, result) in [
        ("$length($pad('x', 1000000))", "1000000"),
        ("$pad('x', -5, 'ab') & $pad('x', 5, 'ab')", "\"ababxxabab\""),
        ("$replace('aXbXc', 'X', '--', 1)", "\"a--bXc\""),
        (
            "( $s := $pad('x', 2000000); $length($s & $s & $s) )",
            "6000000",
        ),
    ] {
        assert_eq!(env.ok(&["eval", expression]), result, "{expression}");
    }
}

/// Item 9: an agent printing 100 MB on stdout and 100 MB on stderr: the step keeps only the tail
/// of stdout it needs (the hash is the last line), its log keeps a head and a tail with the cut
/// marked, and its memory stays small.
#[test]
fn a_flood_of_agent_output_is_capped_in_the_log_and_in_memory() {
    let env = Env::new();
    env.ok_stdin(&["workflow", "put", "-"], LOOP);
    let id = start_thread(&env, "counter", "p");
    let agent = common::script(
        &env,
        "flood.sh",
        &format!(
            "head -c 100000000 /dev/zero | tr '\\0' o; echo\n\
             head -c 100000000 /dev/zero | tr '\\0' e >&2\n\
             exec '{}' agent dry \"$1\" \"$2\"",
            env!("CARGO_BIN_EXE_uwf")
        ),
    );
    let (rss_kib, out) = run_measured(
        &env,
        &["thread", "step", &id, "--agent", agent.to_str().unwrap()],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The step passes stderr through to its own; count what it is, not its contents.
    let log = env.root().join("runs").join(format!("{id}.log"));
    let size = std::fs::metadata(&log).unwrap().len();
    assert!(size < 2 << 20, "the log grew to {size} bytes");
    let text = String::from_utf8_lossy(&std::fs::read(&log).unwrap()).into_owned();
    assert!(
        text.contains("bytes of agent output cut here"),
        "no cut marked"
    );
    assert!(
        rss_kib < 40 * 1024,
        "the step peaked at {} MB",
        rss_kib / 1024
    );
}
