//! Nothing of a step is left behind, however the step ends (issue #27): a stop signal to
//! `thread step`/`thread run` stops the agent's whole process group and exits 128 + the signal
//! (one the step was started ignoring, as under `nohup`, stays ignored);
//! `kill -9` of the step leaves no process of the agent's group either, nor a prompt file of
//! `uwf agent exec` in the temporary folder; and a child thread that
//! a sub-workflow started ends — archived as `killed`, its processes gone — with the parent's
//! step, whether that step was stopped, killed or failed.
//!
//! The agents are real: a shell script, or `uwf agent exec` running the same shell line, that
//! starts `sleep 30 &` and then `sleep 30`, so a leftover would be a `sleep` in its group.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use common::{Env, json, script, start_thread};

const ONE: &str = "name: one\nroles:\n  work:\n    goal: Work.\n    meta: { type: object, properties: { done: { type: boolean } }, required: [done] }\ngraph:\n  $START: [ { role: work, condition: null } ]\n  work: [ { role: $END, condition: null } ]\n";

/// The agent's line: a child in the background, then one in the foreground.
const SLEEPS: &str = "sleep 30 & sleep 30";

/// How long after its step's end an agent's group may still have a process.
const GONE_WITHIN: Duration = Duration::from_secs(1);

/// Which program plays the role.
#[derive(Debug, Clone, Copy)]
enum Agent {
    /// A shell script (spawned with a pre-exec hook).
    Shell,
    /// `uwf agent exec`, which runs the same line with `sh` (posix_spawned `uwf`).
    Exec,
}

/// A store with `one` (and `inner`, the same workflow by another name) registered, the shell
/// agent written beside it, and `config(env)` as its config.yaml.
fn env_with(config: impl FnOnce(&Env) -> String) -> Env {
    let env = Env::new();
    for name in ["one", "inner"] {
        let path = env.dir.path().join(format!("{name}.yaml"));
        std::fs::write(&path, ONE.replace("name: one", &format!("name: {name}"))).unwrap();
        env.ok(&["workflow", "put", path.to_str().unwrap()]);
    }
    script(&env, "sleeper.sh", SLEEPS);
    std::fs::write(env.root().join("config.yaml"), config(&env)).unwrap();
    env
}

fn agent_line(env: &Env, agent: Agent) -> String {
    match agent {
        Agent::Shell => env.dir.path().join("sleeper.sh").display().to_string(),
        Agent::Exec => format!("uwf agent exec --cmd '{SLEEPS}'"),
    }
}

/// `uwf thread <command> <id> [--agent A]`, running in the background.
fn spawn(env: &Env, command: &str, id: &str, agent: Option<&str>) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_uwf"));
    cmd.args(["thread", command, id]);
    if let Some(agent) = agent {
        cmd.args(["--agent", agent]);
    }
    cmd.env("UWF_STORAGE_ROOT", env.root())
        .env("TMPDIR", temp_dir(env))
        .current_dir(env.dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The temporary folder the step and its agent are given (`uwf agent exec` writes its prompt
/// file there).
fn temp_dir(env: &Env) -> std::path::PathBuf {
    let dir = env.dir.path().join("tmp");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Files left in the step's temporary folder.
fn temp_files(env: &Env) -> Vec<String> {
    std::fs::read_dir(temp_dir(env))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// The process group of the agent a running step of `id` recorded (its pid).
fn agent_group(env: &Env, id: &str) -> Option<u32> {
    let run = env.root().join("runs").join(format!("{id}.run.json"));
    let text = std::fs::read_to_string(run).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    value["agentPid"].as_u64().map(|p| p as u32)
}

/// The living (not zombie) processes of group `pgid`, as `pid comm`.
fn members(pgid: u32) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        if fields.get(2).and_then(|g| g.parse::<u32>().ok()) == Some(pgid) && fields[0] != "Z" {
            found.push(format!("{pid} {}", &stat[open + 1..close]));
        }
    }
    found
}

fn sleeps_in(pgid: u32) -> usize {
    members(pgid)
        .iter()
        .filter(|m| m.ends_with(" sleep"))
        .count()
}

fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until thread `id`'s agent runs both sleeps; returns its group.
fn running_agent(env: &Env, id: &str) -> u32 {
    let mut group = None;
    wait_for("the agent to start both sleeps", || {
        group = agent_group(env, id);
        group.is_some_and(|g| sleeps_in(g) >= 2)
    });
    group.expect("seen above")
}

/// Asserts that no process of any of `groups` is alive [`GONE_WITHIN`] after `since`.
fn assert_gone(groups: &[u32], since: Instant, what: &str) {
    let deadline = since + GONE_WITHIN;
    loop {
        let left: Vec<String> = groups.iter().flat_map(|g| members(*g)).collect();
        if left.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            for g in groups {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(*g as i32),
                    Signal::SIGKILL,
                );
            }
            panic!("{what}: still alive {GONE_WITHIN:?} after: {left:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn send(child: &Child, signal: Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
}

fn head(env: &Env, id: &str) -> serde_json::Value {
    json(&env.ok(&["thread", "show", id]))["head"].clone()
}

#[test]
fn a_stop_signal_stops_the_agent_group_and_exits_128_plus_the_signal() {
    common::sigint_as_at_a_terminal();
    let trials = [
        (Signal::SIGINT, "step", Agent::Shell),
        (Signal::SIGINT, "run", Agent::Exec),
        (Signal::SIGTERM, "step", Agent::Exec),
        (Signal::SIGTERM, "run", Agent::Shell),
        (Signal::SIGHUP, "step", Agent::Shell),
        (Signal::SIGHUP, "run", Agent::Exec),
    ];
    for (signal, command, agent) in trials {
        let what = format!("{signal} to thread {command} with a {agent:?} agent");
        let env = env_with(|_| String::new());
        let id = start_thread(&env, "one", "p");
        let before = head(&env, &id);
        let mut step = spawn(&env, command, &id, Some(&agent_line(&env, agent)));
        let group = running_agent(&env, &id);
        send(&step, signal);
        let status = step.wait().unwrap();
        let stopped = Instant::now();
        assert_eq!(status.code(), Some(128 + signal as i32), "{what}");
        assert_gone(&[group], stopped, &what);
        assert_eq!(
            temp_files(&env),
            Vec::<String>::new(),
            "{what}: left behind"
        );
        let show = json(&env.ok(&["thread", "show", &id]));
        assert_eq!(show["head"], before, "{what}: the head moved");
        // A stop is not a failure: the thread is still active, and says who stopped its step.
        assert_eq!(show["status"], "active", "{what}: {show}");
        assert!(show.get("error").is_none(), "{what}: {show}");
        let stopped = show["stopped"].as_str().unwrap_or_default();
        assert!(
            stopped.contains(&format!("interrupted by {signal}")),
            "{what}: {show}"
        );
        assert!(
            show["stoppedBy"]
                .as_str()
                .is_some_and(|by| by.starts_with(&signal.to_string())),
            "{what}: {show}"
        );
        let failed = env.ok(&["thread", "list", "--status", "failed", "-q"]);
        assert!(!failed.contains(&id), "{what}: listed as failed");
    }
}

#[test]
fn a_step_started_under_nohup_keeps_ignoring_sighup() {
    let env = env_with(|_| String::new());
    let id = start_thread(&env, "one", "p");
    let mut step = Command::new("nohup")
        .arg(env!("CARGO_BIN_EXE_uwf"))
        .args([
            "thread",
            "step",
            &id,
            "--agent",
            &agent_line(&env, Agent::Shell),
        ])
        .env("UWF_STORAGE_ROOT", env.root())
        .current_dir(env.dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let group = running_agent(&env, &id);
    send(&step, Signal::SIGHUP);
    std::thread::sleep(Duration::from_millis(300));
    assert!(step.try_wait().unwrap().is_none(), "SIGHUP ended the step");
    assert_eq!(sleeps_in(group), 2, "SIGHUP stopped the agent");
    send(&step, Signal::SIGTERM);
    assert_eq!(step.wait().unwrap().code(), Some(128 + libc::SIGTERM));
    assert_gone(&[group], Instant::now(), "SIGTERM after an ignored SIGHUP");
}

#[test]
fn kill_9_of_a_step_stops_every_process_of_its_agent_group() {
    for (command, agent) in [
        ("step", Agent::Shell),
        ("step", Agent::Exec),
        ("run", Agent::Shell),
        ("run", Agent::Exec),
    ] {
        let what = format!("kill -9 of thread {command} with a {agent:?} agent");
        let env = env_with(|_| String::new());
        let id = start_thread(&env, "one", "p");
        let before = head(&env, &id);
        let mut step = spawn(&env, command, &id, Some(&agent_line(&env, agent)));
        let group = running_agent(&env, &id);
        send(&step, Signal::SIGKILL);
        step.wait().unwrap();
        // Nothing else looks at the thread meanwhile: whatever stops the group does it alone.
        assert_gone(&[group], Instant::now(), &what);
        // `uwf agent exec`'s prompt file too: the watchdog's SIGTERM lets it remove the file.
        assert_eq!(
            temp_files(&env),
            Vec::<String>::new(),
            "{what}: left behind"
        );
        assert_eq!(head(&env, &id), before, "{what}: the head moved");
    }
}

/// `one`'s role played by a sub-workflow of `inner`, whose role the sleeping shell script plays.
fn family_env() -> Env {
    env_with(|env| {
        format!(
            "agents:\n  inner-flow: {{ command: uwf, args: [agent, workflow, --name, inner] }}\n  \
sleeper: {{ command: '{}' }}\nagentOverrides:\n  one: {{ work: inner-flow }}\n  inner: {{ work: sleeper }}\n",
            env.dir.path().join("sleeper.sh").display()
        )
    })
}

/// The first child thread of `parent`, once it has one.
fn first_child(env: &Env, parent: &str) -> String {
    let file = env.root().join("runs").join(format!("{parent}.children"));
    let mut child = String::new();
    wait_for("the child thread", || {
        child = std::fs::read_to_string(&file)
            .unwrap_or_default()
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned();
        !child.is_empty()
    });
    child
}

/// Every active thread, children of sub-workflows included.
fn active_threads(env: &Env) -> Vec<String> {
    env.ok(&["thread", "list", "--children"])
        .lines()
        .map(|l| json(l)["thread"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn stopping_a_parent_mid_child_ends_the_child_and_its_processes() {
    common::sigint_as_at_a_terminal();
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGKILL] {
        let what = format!("{signal} to the parent's step");
        let env = family_env();
        let parent = start_thread(&env, "one", "p");
        let before = head(&env, &parent);
        let mut step = spawn(&env, "step", &parent, None);
        let child = first_child(&env, &parent);
        let child_group = running_agent(&env, &child);
        let parent_group = agent_group(&env, &parent).expect("the parent's agent runs");
        send(&step, signal);
        let status = step.wait().unwrap();
        let stopped = Instant::now();
        if signal != Signal::SIGKILL {
            assert_eq!(status.code(), Some(128 + signal as i32), "{what}");
        }
        assert_gone(&[parent_group, child_group], stopped, &what);
        // The next look at the parent finds the child ended (after a `kill -9`, that look
        // is what ends it, if the child's own agent could not).
        assert_eq!(
            head(&env, &parent),
            before,
            "{what}: the parent's head moved"
        );
        let child_show = json(&env.ok(&["thread", "show", &child]));
        assert_eq!(child_show["status"], "killed", "{what}: {child_show}");
        assert_eq!(active_threads(&env), [parent.as_str()], "{what}");
    }
}

#[test]
fn a_failed_child_is_archived_and_retries_leave_no_active_child() {
    // `one` plays its role with a sub-workflow of itself: each level starts another until
    // maxDepth refuses, and every level fails.
    let env = env_with(|_| {
        "maxDepth: 2\nagents:\n  self-flow: { command: uwf, args: [agent, workflow, --name, one] }\n\
agentOverrides:\n  one: { work: self-flow }\n"
            .to_owned()
    });
    let parent = start_thread(&env, "one", "p");
    for attempt in 1..=2 {
        let err = env.fails(&["thread", "step", &parent], 1);
        assert!(err.contains("maxDepth 2"), "attempt {attempt}: {err}");
        assert_eq!(
            active_threads(&env),
            [parent.as_str()],
            "attempt {attempt}: children left active"
        );
    }
    let all = env.ok(&["thread", "list", "--all", "--children"]);
    let killed = all
        .lines()
        .filter(|l| json(l)["status"] == "killed")
        .count();
    assert_eq!(
        killed, 4,
        "two children per attempt, archived as killed: {all}"
    );
}
