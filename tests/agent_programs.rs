//! Claude Code, Codex and OpenCode as roles of a workflow
//! (`docs/LLM.md#claude-code-codex-and-opencode`), driven for real against a scripted model
//! server on loopback (`tests/mock_agents/`): a thread whose developer is `uwf agent claude` and
//! whose reviewer is `uwf agent codex` edits files in its working directory and finishes, with
//! the tokens the mock reported in each step's detail and their sum as the thread's totals, on
//! the directory store and on PostgreSQL; so does one whose developer is `uwf agent opencode`
//! (OpenAI Chat Completions); a program missing from PATH is named with its install command; a
//! timeout and Ctrl-C end the program's whole process tree. Skipped (with a line saying so) when
//! a program is not installed, unless `UWF_REQUIRE_ALL_TESTS=1`.

mod common;
mod mock_agents;
mod pg_server;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Env, Need, has, json};
use mock_agents::{CHAT_USAGE, CLAUDE_USAGE, CODEX_USAGE, MockAgents, Script};

const UWF: &str = env!("CARGO_BIN_EXE_uwf");

const WORKFLOW: &str = r#"name: pair
roles:
  developer:
    goal: Write hello.txt in the working directory.
    meta:
      type: object
      properties: { summary: { type: string } }
      required: [summary]
  reviewer:
    goal: Review the change and add review.txt.
    meta:
      type: object
      properties: { approved: { type: boolean } }
      required: [approved]
graph:
  $START: [ { role: developer, condition: null } ]
  developer: [ { role: reviewer, condition: null } ]
  reviewer: [ { role: $END, condition: null } ]
"#;

/// A store with the workflow, a working directory, a config binding developer → Claude Code
/// and reviewer → Codex (both at `mock`, each with `timeout` seconds; `dev-opencode` names
/// OpenCode there too), and a started thread.
struct Setup {
    env: Env,
    mock: MockAgents,
    work: PathBuf,
    thread: String,
    /// Every process a step starts carries this in its environment (for the /proc check).
    mark: String,
}

fn setup(timeout: u64) -> Setup {
    setup_with(timeout, "Say hello in a file")
}

fn setup_with(timeout: u64, prompt: &str) -> Setup {
    setup_on(timeout, prompt, None)
}

/// [`setup_with`] on the PostgreSQL database at `url`, when given (`storage:` in `config.yaml`,
/// so every command and every agent's `uwf agent submit` uses it).
fn setup_on(timeout: u64, prompt: &str, url: Option<&str>) -> Setup {
    let env = Env::new();
    let work = env.dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let mock = MockAgents::start(script(&work));
    std::fs::create_dir(env.dir.path().join("codex-home")).unwrap();
    std::fs::write(
        env.root().join("config.yaml"),
        format!(
            "{}agents:\n  dev-claude: {{ command: uwf, args: [agent, claude, --base-url, '{}'], timeout: {timeout} }}\n  \
rev-codex: {{ command: uwf, args: [agent, codex, --model, gpt-5.5, --base-url, '{}', --api-key-env, MOCK_KEY], timeout: {timeout} }}\n  \
dev-opencode: {{ command: uwf, args: [agent, opencode, --model, mock-model, --base-url, '{}', --api-key-env, MOCK_KEY], timeout: {timeout} }}\n\
agentOverrides:\n  pair: {{ developer: dev-claude, reviewer: rev-codex }}\n",
            url.map(|u| format!("storage: '{u}'\n"))
                .unwrap_or_default(),
            mock.claude_url(),
            mock.codex_url(),
            mock.chat_url()
        ),
    )
    .unwrap();
    // OpenCode installs its plugin package into its config directory at every start, from the
    // npm registry, unless that directory's lock file already lists it: this one does, so
    // nothing leaves the machine (docs/LLM.md#claude-code-codex-and-opencode).
    let opencode_config = env.dir.path().join(".config/opencode");
    std::fs::create_dir_all(opencode_config.join("node_modules")).unwrap();
    std::fs::write(
        opencode_config.join("package.json"),
        r#"{"dependencies":{"@opencode-ai/plugin":"*"}}"#,
    )
    .unwrap();
    std::fs::write(
        opencode_config.join("package-lock.json"),
        r#"{"packages":{"":{"dependencies":{"@opencode-ai/plugin":"*"}}}}"#,
    )
    .unwrap();
    env.ok_stdin(&["workflow", "put", "-"], WORKFLOW);
    let out = env.ok_stdin(
        &[
            "thread",
            "start",
            "pair",
            "-p",
            "-",
            "--workdir",
            work.to_str().unwrap(),
        ],
        prompt,
    );
    let thread = json(&out)["thread"].as_str().unwrap().to_owned();
    let mark = format!("uwf-agent-programs-{}", std::process::id()) + &thread;
    Setup {
        env,
        mock,
        work,
        thread,
        mark,
    }
}

fn script(work: &Path) -> Script {
    Script {
        claude_file: work.join("hello.txt").display().to_string(),
        codex_file: "review.txt".into(),
        content: "hello from the mock".into(),
        claude_answer: "Done.\n```json\n{\"summary\": \"wrote hello.txt\"}\n```".into(),
        codex_answer: "{\"approved\": true}".into(),
        chat_file: work.join("chat.txt").display().to_string(),
        chat_answer: "Done.\n```json\n{\"summary\": \"wrote chat.txt\"}\n```".into(),
    }
}

/// `uwf args…` in the setup's store, with the programs' sealed homes and keys.
fn uwf(s: &Setup, args: &[&str]) -> Command {
    let mut cmd = Command::new(UWF);
    cmd.args(args)
        .env_remove("WORKFLOW_STORAGE_ROOT")
        .env("UWF_STORAGE_ROOT", s.env.root())
        .env("HOME", s.env.dir.path())
        .env("CODEX_HOME", s.env.dir.path().join("codex-home"))
        .env("ANTHROPIC_API_KEY", "sk-test")
        .env("MOCK_KEY", "sk-test")
        .env("CLAUDE_CODE_MAX_RETRIES", "0")
        .env("NO_COLOR", "1")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .env_remove("XDG_CACHE_HOME")
        .env_remove("XDG_STATE_HOME")
        .env_remove("OPENCODE_CONFIG")
        .env_remove("OPENCODE_CONFIG_DIR")
        .env("UWF_TEST_MARK", &s.mark)
        .current_dir(s.env.dir.path())
        .stdin(Stdio::null());
    cmd
}

fn installed(test: &str) -> bool {
    has(test, &[Need::Tool("claude"), Need::Tool("codex")])
}

fn opencode_installed(test: &str) -> bool {
    has(test, &[Need::Tool("opencode")])
}

/// OpenCode takes seconds of CPU to start: its tests and the stopped-step tests (whose timeouts
/// are short) run one at a time, so that a busy machine does not make them miss their timeouts.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ALONE.lock().unwrap_or_else(|p| p.into_inner())
}

/// The processes (not zombies) whose environment carries `mark`, as `pid name`.
fn marked_processes(mark: &str) -> Vec<String> {
    let needle = format!("UWF_TEST_MARK={mark}");
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == needle.as_bytes()))
        })
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let close = stat.rfind(')')?;
            let state = stat[close + 1..].split_whitespace().next()?;
            (state != "Z").then(|| format!("{pid} {}", &stat[..close + 1]))
        })
        .collect()
}

/// Waits up to 10 s for every marked process to be gone; returns what is left.
fn leftovers(mark: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = marked_processes(mark);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn claude_develops_codex_reviews_and_the_thread_finishes() {
    if !installed("claude_develops_codex_reviews_and_the_thread_finishes") {
        return;
    }
    let s = setup(120);
    run_pair(&s);
}

#[test]
fn claude_and_codex_totals_over_postgres() {
    let name = "claude_and_codex_totals_over_postgres";
    if !installed(name) {
        return;
    }
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    let s = setup_on(120, "Say hello in a file", Some(&url));
    run_pair(&s);
}

#[test]
fn a_prompt_too_long_for_an_argument_reaches_both_programs_on_stdin() {
    if !installed("a_prompt_too_long_for_an_argument_reaches_both_programs_on_stdin") {
        return;
    }
    // Past the kernel's 128 KiB limit for one argument.
    let prompt = format!(
        "{}the end of a long task",
        "Say hello in a file. ".repeat(8000)
    );
    let s = setup_with(120, &prompt);
    run_pair(&s);
    let (claude, codex) = s.mock.calls_with("the end of a long task");
    assert!(claude >= 1 && codex >= 1, "{claude} {codex}");
}

/// Runs the setup's thread to its end and checks what both programs did.
fn run_pair(s: &Setup) {
    let mock = &s.mock;
    let out = uwf(s, &["thread", "run", &s.thread]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "thread run failed: {stderr}");
    let show = json(&String::from_utf8_lossy(
        &uwf(s, &["thread", "show", &s.thread, "--json"])
            .output()
            .unwrap()
            .stdout,
    ));
    assert_eq!(show["status"], "done", "{show}\n{stderr}");
    assert_eq!(
        std::fs::read_to_string(s.work.join("hello.txt")).unwrap(),
        "hello from the mock\n",
        "Claude Code wrote the file"
    );
    assert_eq!(
        std::fs::read_to_string(s.work.join("review.txt")).unwrap(),
        "hello from the mock\n",
        "Codex wrote the file"
    );
    let detail = |i: usize| {
        let out = uwf(
            s,
            &[
                "thread",
                "step-details",
                &format!("{}:{i}", s.thread),
                "--json",
            ],
        )
        .output()
        .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        json(&String::from_utf8_lossy(&out.stdout))
    };
    let (dev, rev) = (detail(1), detail(2));
    let claude = mock.claude();
    let codex = mock.codex();
    assert_eq!(claude.calls, 2, "a tool turn and the answer");
    assert_eq!(codex.calls, 2, "a tool turn and the answer");
    assert_eq!(dev["tokens"]["input"], claude.input, "{dev}");
    assert_eq!(dev["tokens"]["output"], claude.output, "{dev}");
    assert_eq!(dev["tokens"]["cached"], claude.cached, "{dev}");
    assert!(dev["tokens"]["costUsd"].as_f64().is_some(), "{dev}");
    assert!(dev["sessionId"].is_string(), "{dev}");
    assert_eq!(dev["turns"], 2, "{dev}");
    assert_eq!(rev["tokens"]["input"], codex.input, "{rev}");
    assert_eq!(rev["tokens"]["output"], codex.output, "{rev}");
    assert_eq!(rev["tokens"]["cached"], codex.cached, "{rev}");
    assert_eq!(rev["tokens"]["model"], "gpt-5.5", "{rev}");
    assert!(rev["sessionId"].is_string(), "{rev}");
    // The thread's totals are the sum of what the mock reported to both programs, in
    // `thread show` and in `thread list --json` alike.
    let cost = &show["cost"];
    assert_eq!(
        (
            &cost["input"],
            &cost["output"],
            &cost["cached"],
            &cost["steps"]
        ),
        (
            &(claude.input + codex.input).into(),
            &(claude.output + codex.output).into(),
            &(claude.cached + codex.cached).into(),
            &2.into()
        ),
        "{show}"
    );
    let listed = uwf(s, &["thread", "list", "--all", "--json"])
        .output()
        .unwrap();
    let row = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(json)
        .find(|row| row["thread"] == s.thread.as_str())
        .expect("listed");
    assert_eq!(&row["cost"], cost, "{row}");
    assert_eq!(
        (claude.input, codex.input),
        (
            2 * (CLAUDE_USAGE.0 + CLAUDE_USAGE.1 + CLAUDE_USAGE.2),
            2 * CODEX_USAGE.0
        )
    );
    assert!(leftovers(&s.mark).is_empty());
}

#[test]
fn a_program_missing_from_path_is_named_with_its_install_command() {
    let s = setup(30);
    let empty = s.env.dir.path().join("empty-bin");
    std::fs::create_dir(&empty).unwrap();
    for (agent, install) in [
        ("claude", "npm install -g @anthropic-ai/claude-code"),
        ("codex", "npm install -g @openai/codex"),
        ("opencode", "npm install -g opencode-ai"),
    ] {
        let out = uwf(&s, &["thread", "step", &s.thread, "--agent", agent])
            .env("PATH", &empty)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(&format!("`{agent}` is not installed")),
            "{stderr}"
        );
        assert!(stderr.contains(install), "{stderr}");
    }
}

/// Runs one step of `agent` against a hanging mock; `stop` ends it (or the timeout does).
fn stopped_step(test: &str, agent: &str, interrupt: bool) {
    let installed = if agent == "opencode" {
        opencode_installed(test)
    } else {
        installed(test)
    };
    if !installed {
        return;
    }
    let _alone = one_at_a_time();
    if interrupt {
        common::sigint_as_at_a_terminal();
    }
    // OpenCode takes seconds to start on a busy machine: its timeout must let it reach the model.
    let limit = if agent == "opencode" { 60 } else { 4 };
    let timeout = if interrupt { 120 } else { limit };
    let s = setup(timeout);
    let mock = &s.mock;
    mock.hang();
    let (config_name, wanted) = match agent {
        "claude" => ("dev-claude", "POST /v1/messages"),
        "codex" => ("rev-codex", "POST /v1/responses"),
        _ => ("dev-opencode", "POST /v1/chat/completions"),
    };
    let started = Instant::now();
    let child = uwf(&s, &["thread", "step", &s.thread, "--agent", config_name])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The program is running once the model server has its request.
    let deadline = Instant::now() + Duration::from_secs(limit.max(60));
    while !mock.requests().iter().any(|r| r.starts_with(wanted)) {
        assert!(
            Instant::now() < deadline,
            "no request: {:?}",
            mock.requests()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let running = marked_processes(&s.mark);
    assert!(
        running.iter().any(|p| p.contains(&format!("({agent}"))),
        "the program's processes are found while it runs: {running:?}"
    );
    if interrupt {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        )
        .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let elapsed = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if interrupt {
        assert_eq!(out.status.code(), Some(130), "{stderr}");
        assert!(stderr.contains("interrupted by SIGINT"), "{stderr}");
    } else {
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(&format!("timed out after {limit}s")),
            "{stderr}"
        );
        assert!(elapsed < Duration::from_secs(limit + 26), "{elapsed:?}");
    }
    let left = leftovers(&s.mark);
    assert!(left.is_empty(), "left running: {left:?}");
}

#[test]
fn a_claude_step_that_times_out_ends_its_process_tree() {
    stopped_step(
        "a_claude_step_that_times_out_ends_its_process_tree",
        "claude",
        false,
    );
}

#[test]
fn a_codex_step_that_times_out_ends_its_process_tree() {
    stopped_step(
        "a_codex_step_that_times_out_ends_its_process_tree",
        "codex",
        false,
    );
}

#[test]
fn ctrl_c_on_a_claude_step_ends_its_process_tree() {
    stopped_step(
        "ctrl_c_on_a_claude_step_ends_its_process_tree",
        "claude",
        true,
    );
}

#[test]
fn ctrl_c_on_a_codex_step_ends_its_process_tree() {
    stopped_step(
        "ctrl_c_on_a_codex_step_ends_its_process_tree",
        "codex",
        true,
    );
}

#[test]
fn an_opencode_step_that_times_out_ends_its_process_tree() {
    stopped_step(
        "an_opencode_step_that_times_out_ends_its_process_tree",
        "opencode",
        false,
    );
}

#[test]
fn ctrl_c_on_an_opencode_step_ends_its_process_tree() {
    stopped_step(
        "ctrl_c_on_an_opencode_step_ends_its_process_tree",
        "opencode",
        true,
    );
}

/// OpenCode develops (a `write` tool call over Chat Completions, then the answer); `dry` reviews.
#[test]
fn opencode_develops_over_chat_completions_and_the_thread_finishes() {
    let test = "opencode_develops_over_chat_completions_and_the_thread_finishes";
    if !opencode_installed(test) {
        return;
    }
    let _alone = one_at_a_time();
    let s = setup(300);
    let out = uwf(
        &s,
        &["thread", "step", &s.thread, "--agent", "dev-opencode"],
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "opencode step failed: {stderr}");
    let out = uwf(&s, &["thread", "run", &s.thread, "--agent", "dry"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let show = json(&String::from_utf8_lossy(
        &uwf(&s, &["thread", "show", &s.thread, "--json"])
            .output()
            .unwrap()
            .stdout,
    ));
    assert_eq!(show["status"], "done", "{show}");
    assert_eq!(
        std::fs::read_to_string(s.work.join("chat.txt")).unwrap(),
        "hello from the mock\n",
        "OpenCode wrote the file"
    );
    let out = uwf(
        &s,
        &[
            "thread",
            "step-details",
            &format!("{}:1", s.thread),
            "--json",
        ],
    )
    .output()
    .unwrap();
    let dev = json(&String::from_utf8_lossy(&out.stdout));
    let chat = s.mock.chat();
    assert_eq!(chat.calls, 2, "a tool turn and the answer, no title call");
    assert_eq!(
        s.mock.requests(),
        ["POST /v1/chat/completions", "POST /v1/chat/completions"]
    );
    // Its plugin package was not fetched: npm's cache was never made in the sealed HOME.
    assert!(!s.env.dir.path().join(".npm").exists());
    assert_eq!(
        (chat.input, chat.cached, chat.output),
        (2 * CHAT_USAGE.0, 2 * CHAT_USAGE.1, 2 * CHAT_USAGE.2)
    );
    assert_eq!(dev["program"]["name"], "opencode", "{dev}");
    assert_eq!(dev["tokens"]["input"], chat.input, "{dev}");
    assert_eq!(dev["tokens"]["cached"], chat.cached, "{dev}");
    assert_eq!(dev["tokens"]["output"], chat.output, "{dev}");
    assert_eq!(dev["tokens"]["model"], "mock-model", "{dev}");
    assert_eq!(dev["turns"], 2, "{dev}");
    assert!(dev["sessionId"].is_string(), "{dev}");
    // The thread's totals add up what the mock reported.
    let cost = &show["cost"];
    assert_eq!(
        (&cost["input"], &cost["cached"], &cost["output"]),
        (&chat.input.into(), &chat.cached.into(), &chat.output.into()),
        "{show}"
    );
    assert!(leftovers(&s.mark).is_empty());
}

#[test]
fn opencode_with_a_refused_key_is_named_as_a_login_problem() {
    if !opencode_installed("opencode_with_a_refused_key_is_named_as_a_login_problem") {
        return;
    }
    let _alone = one_at_a_time();
    let s = setup(300);
    s.mock.refuse_key();
    let out = uwf(
        &s,
        &["thread", "step", &s.thread, "--agent", "dev-opencode"],
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("opencode is not logged in") && stderr.contains("HTTP 401"),
        "{stderr}"
    );
    assert!(stderr.contains("opencode auth login"), "{stderr}");
}

#[test]
fn setup_makes_a_program_the_default_agent_and_says_what_it_needs() {
    let env = Env::new();
    let empty = env.dir.path().join("empty-bin");
    std::fs::create_dir(&empty).unwrap();
    let out = env
        .uwf()
        .args(["setup", "--agent", "codex"])
        .env("PATH", &empty)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("not installed: `npm install -g @openai/codex`"),
        "{stderr}"
    );
    let config = std::fs::read_to_string(env.root().join("config.yaml")).unwrap();
    assert!(config.contains("defaultAgent: codex"), "{config}");
    let out = env
        .uwf()
        .args(["doctor", "--skip", "fuse"])
        .env("PATH", &empty)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("FAIL agent codex: `codex` is not installed, and steps use it\n     hint: install it: `npm install -g @openai/codex`"),
        "{stdout}"
    );
    // The default agent is the built-in: a step runs `uwf agent codex`, which finds no codex.
    env.ok_stdin(&["workflow", "put", "-"], WORKFLOW);
    let id = json(&env.ok(&["thread", "start", "pair", "-p", "hi"]))["thread"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = env
        .uwf()
        .args(["thread", "step", &id])
        .env("PATH", &empty)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("`codex` is not installed"), "{stderr}");
}

#[test]
fn setup_and_doctor_name_opencode_and_its_install_command() {
    let env = Env::new();
    let empty = env.dir.path().join("empty-bin");
    std::fs::create_dir(&empty).unwrap();
    let out = env
        .uwf()
        .args(["setup", "--agent", "opencode"])
        .env("PATH", &empty)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("not installed: `npm install -g opencode-ai`")
            && stderr.contains("--base-url URL --model M --api-key-env VAR"),
        "{stderr}"
    );
    let out = env
        .uwf()
        .args(["doctor", "--skip", "fuse"])
        .env("PATH", &empty)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("FAIL agent opencode: `opencode` is not installed, and steps use it\n     hint: install it: `npm install -g opencode-ai`"),
        "{stdout}"
    );
}

#[test]
fn a_refused_key_is_named_as_a_login_problem() {
    if !installed("a_refused_key_is_named_as_a_login_problem") {
        return;
    }
    let s = setup(60);
    s.mock.refuse_key();
    for (agent, hint) in [
        ("dev-claude", "set ANTHROPIC_API_KEY"),
        ("rev-codex", "run `codex login`"),
    ] {
        let out = uwf(&s, &["thread", "step", &s.thread, "--agent", agent])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("is not logged in"), "{agent}: {stderr}");
        assert!(stderr.contains(hint), "{agent}: {stderr}");
    }
}
