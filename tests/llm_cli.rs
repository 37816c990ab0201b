//! The LLM side through the real binary, against a scripted OpenAI-compatible server on
//! loopback: `uwf setup`, `.env`, config validation, `uwf doctor`, the client's request shapes,
//! retries and timeouts, the extraction fallback, and the `llm` and `react` agents (`docs/LLM.md`).

mod common;
mod mock_llm;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{Env, json, start_thread};
use mock_llm::{Mock, Reply, call, calls_raw, content};
use serde_json::{Value, json};

/// The API key of every test; it must never show up anywhere but `<root>/.env`.
const KEY: &str = "sk-test-SECRET-7f3a9c41e2";
const KEY_ENV: &str = "UWF_TEST_LLM_KEY";

const WORKFLOW: &str = r#"
name: review
description: One reviewer judges the task.
roles:
  reviewer:
    description: Judges the change described in the task.
    goal: You are a strict reviewer.
    procedure: Read the task and decide.
    output: A verdict and notes.
    meta:
      type: object
      properties:
        approved: { type: boolean, description: True when the change is good. }
        notes: { type: string, description: Why. }
      required: [approved, notes]
      additionalProperties: false
conditions: {}
graph:
  $START:
    - role: reviewer
      condition: null
  reviewer:
    - role: $END
      condition: null
"#;

/// An environment with the `review` workflow, a thread of it, and a config pointing at `mock`.
struct Llm {
    env: Env,
    thread: String,
}

impl Llm {
    fn new(mock: &Mock) -> Llm {
        Llm::with_config(mock, "")
    }

    /// `extra` is appended to the config (more keys at the top level).
    fn with_config(mock: &Mock, extra: &str) -> Llm {
        let env = Env::new();
        let file = env.dir.path().join("review.yaml");
        std::fs::write(&file, WORKFLOW).unwrap();
        env.ok(&["workflow", "put", file.to_str().unwrap()]);
        let thread = start_thread(&env, "review", "Review the login fix in PR 42");
        write_config(&env, mock, extra);
        let dotenv = env.root().join(".env");
        std::fs::write(&dotenv, format!("{KEY_ENV}={KEY}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dotenv, std::fs::Permissions::from_mode(0o600)).unwrap();
        Llm { env, thread }
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        self.env
            .uwf()
            .env_remove(KEY_ENV)
            .args(args)
            .output()
            .expect("run uwf")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        let (stdout, stderr) = texts(&out);
        assert!(
            out.status.success(),
            "uwf {args:?} failed\nstdout: {stdout}\nstderr: {stderr}"
        );
        assert_no_key(&stdout, &stderr);
        stdout.trim().to_owned()
    }

    fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        let (stdout, stderr) = texts(&out);
        assert_eq!(
            out.status.code(),
            Some(1),
            "uwf {args:?}\nstdout: {stdout}\nstderr: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert_no_key(&stdout, &stderr);
        stderr
    }

    /// One step with a built-in LLM agent; returns the step JSON.
    fn step(&self, agent: &str) -> Value {
        json(&self.ok(&["thread", "step", &self.thread, "--agent", agent]))
    }

    /// The detail node of a step, as JSON.
    fn detail(&self, step: &str) -> Value {
        let node = json(&self.ok(&["cas", "get", step, "--payload"]));
        json(&self.ok(&["cas", "get", node["detail"].as_str().unwrap(), "--payload"]))
    }

    /// The thread's head (its last step).
    fn step_head(&self) -> String {
        json(&self.ok(&["thread", "show", &self.thread]))["head"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    fn output(&self, step: &str) -> Value {
        let node = json(&self.ok(&["cas", "get", step, "--payload"]));
        json(&self.ok(&["cas", "get", node["output"].as_str().unwrap(), "--payload"]))
    }
}

fn write_config(env: &Env, mock: &Mock, extra: &str) {
    std::fs::create_dir_all(env.root()).unwrap();
    std::fs::write(
        env.root().join("config.yaml"),
        format!(
            "providers:\n  mock: {{ baseUrl: '{}', apiKeyEnv: {KEY_ENV}, timeout: 5, retries: 2 }}\n\
             models:\n  fast: {{ provider: mock, name: mock-fast-1 }}\n  cheap: {{ provider: mock, name: mock-cheap }}\n\
             defaultModel: fast\n{extra}",
            mock.base_url
        ),
    )
    .unwrap();
}

fn texts(out: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn assert_no_key(stdout: &str, stderr: &str) {
    assert!(!stdout.contains(KEY), "the API key is on stdout: {stdout}");
    assert!(!stderr.contains(KEY), "the API key is on stderr: {stderr}");
}

/// Every file under `dir` whose bytes contain the key.
fn files_with_key(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let meta = std::fs::symlink_metadata(&p).unwrap();
        if meta.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        } else if meta.is_file() {
            let bytes = std::fs::read(&p).unwrap();
            if bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()) {
                found.push(p);
            }
        }
    }
    found
}

const APPROVE_FRONTMATTER: &str = "---\napproved: true\nnotes: tests cover it\n---\nLooks good.\n";

#[test]
fn llm_agent_sends_the_role_prompt_and_records_the_model() {
    let mock = Mock::start(vec![content(APPROVE_FRONTMATTER)]);
    let t = Llm::new(&mock);
    let step = t.step("llm");
    assert_eq!(
        (step["role"].as_str(), step["done"].as_bool()),
        (Some("reviewer"), Some(true))
    );
    let head = step["head"].as_str().unwrap();
    assert_eq!(
        t.output(head),
        json!({"approved": true, "notes": "tests cover it"})
    );

    // Exactly one request: the frontmatter fast path needs no extraction call.
    let requests = mock.requests();
    assert_eq!(requests.len(), 1, "{requests:#?}");
    let r = &requests[0];
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(
        r.authorization.as_deref(),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(r.body["model"], "mock-fast-1");
    assert!(r.body.get("tools").is_none() && r.body.get("response_format").is_none());
    let messages = r.messages();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "system");
    let system = messages[0]["content"].as_str().unwrap();
    assert!(system.starts_with("## Output format"), "{system}");
    assert!(
        system.contains("## Role: reviewer") && system.contains("strict reviewer"),
        "{system}"
    );
    assert!(!system.contains("## Task"), "{system}");
    assert_eq!(messages[1]["role"], "user");
    let user = messages[1]["content"].as_str().unwrap();
    assert!(
        user.starts_with("## Task\n\nReview the login fix in PR 42"),
        "{user}"
    );
    assert!(user.contains("## History"), "{user}");

    let detail = t.detail(head);
    assert_eq!(detail["model"], "fast");
    assert_eq!(detail["modelName"], "mock-fast-1");
    assert_eq!(detail["provider"], "mock");
    assert_eq!(detail["extractedBy"], "frontmatter");
    assert_eq!(detail["usage"]["total_tokens"], 18);
    assert_eq!(detail["attempts"], 1);
    assert_eq!(
        files_with_key(t.env.dir.path()),
        [t.env.root().join(".env")]
    );
}

#[test]
fn prose_is_extracted_by_the_model_in_json_mode() {
    let mock = Mock::start(vec![
        content("I approve: the tests cover the session check."),
        content(r#"{"approved": true, "notes": "the tests cover the session check"}"#),
    ]);
    let t = Llm::with_config(&mock, "modelOverrides: { extract: cheap }\n");
    let step = t.step("llm");
    let head = step["head"].as_str().unwrap();
    assert_eq!(
        t.output(head),
        json!({"approved": true, "notes": "the tests cover the session check"})
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let extract = &requests[1];
    assert_eq!(extract.body["model"], "mock-cheap");
    assert_eq!(
        extract.body["response_format"],
        json!({"type": "json_object"})
    );
    assert_eq!(
        extract.authorization.as_deref(),
        Some(format!("Bearer {KEY}").as_str())
    );
    let user = extract.message(-1)["content"].as_str().unwrap();
    assert!(
        user.contains("\"approved\"") && user.contains("## JSON Schema"),
        "{user}"
    );
    assert!(
        user.contains("I approve: the tests cover the session check."),
        "{user}"
    );
    let detail = t.detail(head);
    assert_eq!(detail["extractedBy"], "llm");
    assert_eq!(detail["extraction"]["model"], "cheap");
    assert_eq!(detail["extraction"]["calls"], 1);
    assert!(
        detail["extraction"]["fastPathError"]
            .as_str()
            .unwrap()
            .contains("no YAML frontmatter")
    );
}

#[test]
fn extraction_retries_once_with_the_error_then_fails_keeping_the_raw_output() {
    // Malformed JSON, then a schema-valid object: one corrective retry suffices.
    let mock = Mock::start(vec![
        content("Approved, nice work."),
        content(r#"{"approved": true, "notes": "nice work""#),
        content(r#"{"approved": true, "notes": "nice work"}"#),
    ]);
    let t = Llm::new(&mock);
    let head = t.step("llm")["head"].as_str().unwrap().to_owned();
    assert_eq!(
        t.output(&head),
        json!({"approved": true, "notes": "nice work"})
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    let retry = &requests[2];
    assert_eq!(
        retry.messages().len(),
        4,
        "system, user, the bad reply, the correction"
    );
    assert_eq!(
        retry.message(2)["content"],
        r#"{"approved": true, "notes": "nice work""#
    );
    let correction = retry.message(3)["content"].as_str().unwrap();
    assert!(
        correction.starts_with("That reply is not usable: the JSON is not valid at line 1"),
        "{correction}"
    );
    assert_eq!(t.detail(&head)["extraction"]["calls"], 2);

    // Prose, then a schema failure twice: the step fails, naming both, and the raw is kept.
    let mock = Mock::start(vec![
        content("Approved, nice work."),
        content(r#"{"approved": "yes"}"#),
        content("approved: yes"),
    ]);
    let t = Llm::new(&mock);
    let err = t.fails(&["agent", "llm", &t.thread, "reviewer"]);
    assert!(err.contains("no YAML frontmatter"), "{err}");
    assert!(err.contains("the LLM fallback failed too"), "{err}");
    assert!(
        err.contains("attempt 1: it does not match the schema"),
        "{err}"
    );
    assert!(err.contains("attempt 2: it is not a JSON object"), "{err}");
    let retry = &mock.requests()[2];
    assert!(
        retry.message(-1)["content"]
            .as_str()
            .unwrap()
            .contains("\"notes\" is a required property"),
        "{retry:?}"
    );
    let raw = err.split("kept as text node ").nth(1).unwrap()[..13].to_owned();
    assert_eq!(
        json(&t.ok(&["cas", "get", &raw, "--payload"])),
        json!("Approved, nice work.")
    );
    assert_eq!(
        mock.requests().len(),
        3,
        "no more than one corrective retry"
    );
}

#[test]
fn agents_that_follow_the_format_cost_no_llm_call() {
    let mock = Mock::start(vec![]);
    let t = Llm::new(&mock);
    let head = t.ok_stdin(
        &["agent", "submit", &t.thread, "reviewer", "--agent", "me"],
        APPROVE_FRONTMATTER,
    );
    assert_eq!(t.detail(&head)["extractedBy"], "frontmatter");
    let head = t.ok_stdin(
        &["agent", "submit", &t.thread, "reviewer", "--agent", "me"],
        "```json\n{\"approved\": false, \"notes\": \"no\"}\n```",
    );
    assert_eq!(t.detail(&head)["extractedBy"], "json");
    let script = t.env.dir.path().join("s.yaml");
    std::fs::write(
        &script,
        "reviewer:\n  - \"---\\napproved: true\\nnotes: ok\\n---\\n\"\n",
    )
    .unwrap();
    t.step(&format!("uwf agent script --file {}", script.display()));
    // A deterministic CLI that prints JSON, given only the task ({task}), through exec.
    let t2 = Llm::new(&mock);
    let head = t2.step(
        r#"uwf agent exec --cmd 'printf "{\"approved\": true, \"notes\": \"%s\"}\n" {task}'"#,
    )["head"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        t2.output(&head),
        json!({"approved": true, "notes": "Review the login fix in PR 42"})
    );
    assert_eq!(t2.detail(&head)["extractedBy"], "json");
    assert!(mock.requests().is_empty(), "{:#?}", mock.requests());
}

impl Llm {
    fn ok_stdin(&self, args: &[&str], stdin: &str) -> String {
        let out = self
            .env
            .uwf()
            .env_remove(KEY_ENV)
            .args(args)
            .write_stdin(stdin.to_owned())
            .output()
            .unwrap();
        let (stdout, stderr) = texts(&out);
        assert!(out.status.success(), "{stderr}");
        assert_no_key(&stdout, &stderr);
        stdout.trim().to_owned()
    }
}

#[test]
fn submit_goes_through_the_llm_fallback_too() {
    let mock = Mock::start(vec![content(
        r#"{"approved": false, "notes": "missing test"}"#,
    )]);
    let t = Llm::new(&mock);
    let head = t.ok_stdin(
        &["agent", "submit", &t.thread, "reviewer", "--agent", "me"],
        "Not yet: there is no test for the expiry.",
    );
    assert_eq!(
        t.output(&head),
        json!({"approved": false, "notes": "missing test"})
    );
    assert_eq!(t.detail(&head)["extractedBy"], "llm");
    assert_eq!(mock.requests().len(), 1);
}

#[test]
fn rate_limits_and_server_errors_are_retried() {
    let mock = Mock::start(vec![
        Reply::status(429, r#"{"error":"slow down"}"#, &[("Retry-After", "0")]),
        Reply::status(503, "overloaded", &[]),
        content(APPROVE_FRONTMATTER),
    ]);
    let t = Llm::new(&mock);
    let head = t.step("llm")["head"].as_str().unwrap().to_owned();
    assert_eq!(mock.requests().len(), 3);
    assert_eq!(t.detail(&head)["attempts"], 3);

    // Out of retries (2 in the config): the last status and body are named, never the key.
    let mock = Mock::start(vec![
        Reply::status(500, "boom 1", &[("Retry-After", "0")]),
        Reply::status(502, "boom 2", &[("Retry-After", "0")]),
        Reply::status(
            500,
            &format!("boom 3 for key {KEY}"),
            &[("Retry-After", "0")],
        ),
    ]);
    let t = Llm::new(&mock);
    let err = t.fails(&["agent", "llm", &t.thread, "reviewer"]);
    assert!(
        err.contains(
            "/v1/chat/completions answered HTTP 500 (after 3 attempts): boom 3 for key ***"
        ),
        "{err}"
    );
    assert_eq!(mock.requests().len(), 3);

    // A client error is not retried; a long Retry-After is not waited for.
    let mock = Mock::start(vec![Reply::status(400, r#"{"error":"bad model"}"#, &[])]);
    let t = Llm::new(&mock);
    let err = t.fails(&["agent", "llm", &t.thread, "reviewer"]);
    assert!(
        err.contains("answered HTTP 400: {\"error\":\"bad model\"}"),
        "{err}"
    );
    assert_eq!(mock.requests().len(), 1);
    let mock = Mock::start(vec![Reply::status(429, "", &[("Retry-After", "3600")])]);
    let t = Llm::new(&mock);
    let err = t.fails(&["agent", "llm", &t.thread, "reviewer"]);
    assert!(
        err.contains("asks to wait 3600s; not waiting that long"),
        "{err}"
    );
}

#[test]
fn a_refused_key_is_reported_without_the_key() {
    let body = format!(r#"{{"error": {{"message": "Incorrect API key provided: {KEY}"}}}}"#);
    let mock = Mock::start(vec![Reply::status(401, &body, &[])]);
    let t = Llm::new(&mock);
    let err = t.fails(&["thread", "step", &t.thread, "--agent", "llm"]);
    assert!(
        err.contains("HTTP 401") && err.contains("Incorrect API key provided: ***"),
        "{err}"
    );
    // Nothing in the storage root holds the key but .env (the step's log included).
    assert_eq!(
        files_with_key(t.env.dir.path()),
        [t.env.root().join(".env")]
    );
}

#[test]
fn timeouts_are_retried_then_reported() {
    let mock = Mock::start(vec![
        Reply::Sleep(
            Duration::from_secs(3),
            Box::new(content(APPROVE_FRONTMATTER)),
        ),
        content(APPROVE_FRONTMATTER),
    ]);
    let t = Llm::new(&mock);
    let config = std::fs::read_to_string(t.env.root().join("config.yaml")).unwrap();
    std::fs::write(
        t.env.root().join("config.yaml"),
        config.replace("timeout: 5, retries: 2", "timeout: 1, retries: 1"),
    )
    .unwrap();
    let started = Instant::now();
    t.step("llm");
    assert_eq!(mock.requests().len(), 2);
    assert!(started.elapsed() < Duration::from_secs(10));

    let mock = Mock::start(vec![Reply::Sleep(
        Duration::from_secs(4),
        Box::new(content(APPROVE_FRONTMATTER)),
    )]);
    let t = Llm::new(&mock);
    let config = std::fs::read_to_string(t.env.root().join("config.yaml")).unwrap();
    std::fs::write(
        t.env.root().join("config.yaml"),
        config.replace("timeout: 5, retries: 2", "timeout: 1, retries: 0"),
    )
    .unwrap();
    let started = Instant::now();
    let err = t.fails(&["agent", "llm", &t.thread, "reviewer"]);
    assert!(
        err.contains("/v1/chat/completions: no answer within 1s"),
        "{err}"
    );
    assert!(err.contains("raise `timeout`"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn connection_errors_are_retried_then_reported() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mock = Mock::start(vec![]);
    let t = Llm::new(&mock);
    std::fs::write(
        t.env.root().join("config.yaml"),
        format!(
            "providers:\n  gone: {{ baseUrl: 'http://127.0.0.1:{port}/v1', apiKeyEnv: {KEY_ENV}, retries: 1 }}\n\
             models:\n  fast: {{ provider: gone, name: m }}\ndefaultModel: fast\n"
        ),
    )
    .unwrap();
    let err = t.fails(&["agent", "llm", &t.thread, "reviewer"]);
    assert!(
        err.contains(&format!("http://127.0.0.1:{port}/v1/chat/completions: "))
            && err.contains("(after 2 attempts)"),
        "{err}"
    );
}

#[test]
fn missing_configuration_names_what_to_set() {
    let mock = Mock::start(vec![]);
    let t = Llm::new(&mock);
    std::fs::remove_file(t.env.root().join(".env")).unwrap();
    let err = t.fails(&["agent", "llm", &t.thread, "reviewer"]);
    assert!(
        err.contains(&format!("needs an API key in ${KEY_ENV}, which is not set")),
        "{err}"
    );
    assert!(err.contains("uwf setup --provider mock"), "{err}");
    let err = t.fails(&["agent", "llm", "--model", "nope", &t.thread, "reviewer"]);
    assert!(
        err.contains("unknown model `nope` (models: cheap, fast)"),
        "{err}"
    );
    std::fs::write(t.env.root().join("config.yaml"), "defaultAgent: dry\n").unwrap();
    let err = t.fails(&["agent", "react", &t.thread, "reviewer"]);
    assert!(err.contains("no model is configured for `react`"), "{err}");
    assert!(err.contains("uwf setup --provider openai"), "{err}");
    assert!(mock.requests().is_empty());
}

#[test]
fn a_variable_already_set_wins_over_dotenv() {
    let mock = Mock::start(vec![content(APPROVE_FRONTMATTER)]);
    let t = Llm::new(&mock);
    let out = t
        .env
        .uwf()
        .env(KEY_ENV, "sk-from-the-environment")
        .args(["agent", "llm", &t.thread, "reviewer"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        mock.requests()[0].authorization.as_deref(),
        Some("Bearer sk-from-the-environment")
    );
}

// ---- react ----

/// A working directory with a source file, and a secret beside it (outside).
fn workdir(t: &Llm) -> PathBuf {
    let work = t.env.dir.path().join("project");
    std::fs::create_dir_all(work.join("src")).unwrap();
    std::fs::write(
        work.join("src/login.rs"),
        "fn check_session() { /* 60s expiry */ }\n",
    )
    .unwrap();
    std::fs::write(t.env.dir.path().join("secret.txt"), "OUTSIDE-SECRET-TEXT").unwrap();
    std::os::unix::fs::symlink(t.env.dir.path(), work.join("escape")).unwrap();
    work
}

impl Llm {
    fn react(&self, work: &Path, extra_args: &[&str]) -> std::process::Output {
        let mut args = vec!["agent", "react"];
        args.extend_from_slice(extra_args);
        args.extend_from_slice(&[&self.thread, "reviewer"]);
        self.env
            .uwf()
            .env_remove(KEY_ENV)
            .current_dir(work)
            .args(&args)
            .output()
            .unwrap()
    }
}

/// The names of the tools a request offered.
fn tool_names(request: &mock_llm::Recorded) -> Vec<&str> {
    request.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect()
}

/// `workdir` made a knowledge repository (docs and code) and indexed.
fn indexed_workdir(t: &Llm) -> PathBuf {
    let work = workdir(t);
    std::fs::write(
        work.join("knowledge.yaml"),
        "include: ['**/*.md', 'src/**']\n",
    )
    .unwrap();
    std::fs::create_dir_all(work.join("docs")).unwrap();
    std::fs::write(
        work.join("docs/sessions.md"),
        "# Sessions\n\n## Expiry\n\nA session expires after 60 seconds of inactivity; the check is in src/login.rs.\n\n## Cookies\n\nThe cookie is HttpOnly.\n",
    )
    .unwrap();
    let out = t.run(&["knowledge", "sync", "--repo", work.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    work
}

#[test]
fn react_searches_the_project_knowledge_of_its_workdir() {
    let mock = Mock::start(vec![
        call(
            "knowledge",
            json!({"query": "when does a session expire", "limit": 2}),
        ),
        calls_raw(
            None,
            &[(
                "resolve",
                r#"{"approved": true, "notes": "expiry documented"}"#,
            )],
        ),
    ]);
    let t = Llm::new(&mock);
    let work = indexed_workdir(&t);
    let out = t.react(&work.join("src"), &[]);
    let (_, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("react: knowledge {"), "{stderr}");
    let requests = mock.requests();
    let names = tool_names(&requests[0]);
    assert!(names.contains(&"knowledge"), "{names:?}");
    let result = requests[1].message(-1)["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        result.starts_with("`docs/sessions.md:3-5` (Sessions › Expiry)")
            && result.contains("expires after 60 seconds"),
        "{result}"
    );
}

#[test]
fn agent_prompt_appends_the_passages_for_the_task() {
    let mock = Mock::start(vec![]);
    let t = Llm::new(&mock);
    let work = indexed_workdir(&t);
    let prompt = |dir: &Path| {
        t.env
            .uwf()
            .current_dir(dir)
            .args(["agent", "prompt", &t.thread, "reviewer", "--knowledge", "1"])
            .output()
            .unwrap()
    };
    let out = prompt(&work);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    let (before, section) = stdout
        .split_once("\n## Project knowledge\n")
        .expect(&stdout);
    assert!(
        before.contains("## Task") && before.contains("Review the login fix"),
        "{stdout}"
    );
    assert!(
        section.contains("`src/login.rs:1-1`") && section.contains("check_session"),
        "{section}"
    );
    assert_eq!(section.matches("```").count(), 2, "one passage: {section}");
    // Outside an indexed repository, asking for knowledge is an error that says what to do.
    let elsewhere = t.env.dir.path().join("elsewhere");
    std::fs::create_dir_all(elsewhere.join(".git")).unwrap();
    let out = prompt(&elsewhere);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("no knowledge.yaml in") && stderr.contains("hint: say what to index"),
        "{stderr}"
    );
}

#[test]
fn react_reads_a_file_and_resolves_with_the_role_schema() {
    let mock = Mock::start(vec![
        call("list_dir", json!({"path": "."})),
        call("read_file", json!({"path": "src/login.rs"})),
        calls_raw(
            Some("The expiry is hard-coded."),
            &[(
                "resolve",
                r#"{"approved": false, "notes": "60s expiry is hard-coded"}"#,
            )],
        ),
    ]);
    let t = Llm::new(&mock);
    let work = workdir(&t);
    let out = t.react(&work, &[]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    assert_no_key(&stdout, &stderr);
    let head = stdout.trim();
    assert_eq!(
        t.output(head),
        json!({"approved": false, "notes": "60s expiry is hard-coded"})
    );
    // One progress line per tool call, as it happens.
    assert!(
        stderr.contains("react: list_dir {\"path\":\".\"} → ")
            && stderr.contains("react: read_file {\"path\":\"src/login.rs\"} → ")
            && stderr.contains("react: resolve "),
        "{stderr}"
    );

    let requests = mock.requests();
    assert_eq!(requests.len(), 3, "resolve needs no extraction call");
    let first = &requests[0];
    let names = tool_names(first);
    assert_eq!(
        names,
        [
            "read_file",
            "write_file",
            "edit_file",
            "list_dir",
            "grep",
            "resolve"
        ]
    );
    let resolve = &first.body["tools"][5]["function"]["parameters"];
    assert_eq!(resolve["required"], json!(["approved", "notes"]));
    assert_eq!(resolve["properties"]["approved"]["type"], "boolean");
    assert_eq!(
        first.authorization.as_deref(),
        Some(format!("Bearer {KEY}").as_str())
    );
    let system = first.message(0)["content"].as_str().unwrap();
    assert!(
        system.contains("call `resolve` once") && system.contains("## Role: reviewer"),
        "{system}"
    );
    // The listing and the file's text went back as tool results.
    let listing = requests[1].message(-1);
    assert_eq!(
        (listing["role"].as_str(), listing["tool_call_id"].as_str()),
        (Some("tool"), Some("call_0"))
    );
    assert_eq!(listing["content"], "escape@\nsrc/");
    let read = requests[2].message(-1);
    assert_eq!(read["content"], "fn check_session() { /* 60s expiry */ }\n");
    assert_eq!(
        requests[2].message(-2)["tool_calls"][0]["function"]["name"],
        "read_file"
    );

    let detail = t.detail(head);
    assert_eq!(detail["extractedBy"], "resolve");
    assert_eq!(detail["rounds"], 3);
    assert_eq!(detail["usage"]["total_tokens"], 75);
    let turns = detail["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 3);
    assert_eq!(turns[1]["toolCalls"][0]["name"], "read_file");
    assert_eq!(
        turns[1]["toolCalls"][0]["arguments"],
        json!({"path": "src/login.rs"})
    );
    assert_eq!(
        turns[1]["toolCalls"][0]["result"],
        "fn check_session() { /* 60s expiry */ }\n"
    );
    assert_eq!(turns[2]["assistant"], "The expiry is hard-coded.");
    let step = json(&t.ok(&["cas", "get", head, "--payload"]));
    assert_eq!(step["agent"], "react");
    assert_eq!(
        json(&t.ok(&["cas", "get", detail["body"].as_str().unwrap(), "--payload"])),
        json!("The expiry is hard-coded.")
    );
    assert_eq!(
        files_with_key(t.env.dir.path()),
        [t.env.root().join(".env")]
    );
}

#[test]
fn react_refuses_escapes_corrects_prose_and_invalid_resolves() {
    let mock = Mock::start(vec![
        call("read_file", json!({"path": "../secret.txt"})),
        call("read_file", json!({"path": "escape/secret.txt"})),
        call(
            "write_file",
            json!({"path": "/tmp/../etc/uwf-escape", "content": "x"}),
        ),
        call("grep", json!({"pattern": "SECRET", "path": "escape"})),
        call("run_command", json!({"command": "cat ../secret.txt"})),
        content("I think it is fine."),
        calls_raw(None, &[("resolve", r#"{"approved": "yes"}"#)]),
        calls_raw(None, &[("resolve", "{not json")]),
        call(
            "edit_file",
            json!({"path": "src/login.rs", "old": "60s", "new": "30 min"}),
        ),
        call(
            "resolve",
            json!({"approved": true, "notes": "fixed the expiry"}),
        ),
    ]);
    let t = Llm::new(&mock);
    let work = workdir(&t);
    let out = t.react(&work, &[]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(work.join("src/login.rs")).unwrap(),
        "fn check_session() { /* 30 min expiry */ }\n"
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 10);
    let result = |i: usize| {
        requests[i].message(-1)["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(
        result(1),
        "error: refused: `../secret.txt` is outside the working directory"
    );
    assert_eq!(
        result(2),
        "error: refused: `escape/secret.txt` is outside the working directory"
    );
    assert!(
        result(3).starts_with("error: refused: `/tmp/../etc/uwf-escape`"),
        "{}",
        result(3)
    );
    assert!(
        result(4).starts_with("error: refused: `escape`"),
        "{}",
        result(4)
    );
    assert!(
        result(5).contains("run_command is not enabled"),
        "{}",
        result(5)
    );
    assert_eq!(
        result(6),
        "Call a tool, or call `resolve` with your output when your part is done. A reply without a tool call is not accepted."
    );
    assert_eq!(requests[6].message(-1)["role"], "user");
    assert!(
        result(7).contains("does not match the role's schema")
            && result(7).contains("\"notes\" is a required property"),
        "{}",
        result(7)
    );
    assert!(
        result(8).starts_with("error: the arguments are not valid JSON"),
        "{}",
        result(8)
    );
    assert_eq!(result(9), "edited src/login.rs");
    for r in &requests {
        assert!(
            !r.body.to_string().contains("OUTSIDE-SECRET-TEXT"),
            "a secret leaked into {r:?}"
        );
    }
    assert!(!Path::new("/etc/uwf-escape").exists());
    let detail = t.detail(stdout.trim());
    let turns = detail["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 10);
    assert_eq!(turns[5]["correction"], result(6));
    assert_eq!(turns[0]["toolCalls"][0]["ok"], false);
}

#[test]
fn react_gives_up_after_max_rounds_keeping_the_turns() {
    let mock = Mock::start(vec![
        call("list_dir", json!({"path": "src"})),
        content("Still thinking."),
        content("Still thinking."),
    ]);
    let t = Llm::new(&mock);
    let work = workdir(&t);
    let out = t.react(&work, &["--max-rounds", "3"]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("react: no `resolve` after 3 rounds"),
        "{stderr}"
    );
    assert!(stderr.contains("raise --max-rounds"), "{stderr}");
    let transcript = stderr.split("text node ").nth(1).unwrap()[..13].to_owned();
    let turns: Value = serde_json::from_str(
        json(&t.ok(&["cas", "get", &transcript, "--payload"]))
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(turns.as_array().unwrap().len(), 3);
    assert_eq!(turns[0]["toolCalls"][0]["result"], "login.rs");
    assert_eq!(mock.requests().len(), 3);
}

#[test]
fn react_runs_commands_only_when_enabled() {
    let mock = Mock::start(vec![
        call(
            "run_command",
            json!({"command": "wc -l < src/login.rs; echo err >&2"}),
        ),
        call("resolve", json!({"approved": true, "notes": "one line"})),
    ]);
    let t = Llm::with_config(&mock, "react: { runCommand: true, commandTimeout: 5 }\n");
    let work = workdir(&t);
    let out = t.react(&work, &[]);
    assert!(out.status.success(), "{}", texts(&out).1);
    let requests = mock.requests();
    let names: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"run_command"), "{names:?}");
    assert_eq!(
        requests[1].message(-1)["content"],
        "exit code 0\n--- stdout ---\n1\n\n--- stderr ---\nerr\n"
    );
}

// ---- setup, .env, validation, doctor ----

#[test]
fn setup_writes_config_and_a_private_dotenv_that_agents_use() {
    let mock = Mock::start(vec![content(APPROVE_FRONTMATTER)]);
    let env = Env::new();
    let out = env
        .uwf()
        .args([
            "setup",
            "--provider",
            "mock",
            "--base-url",
            &mock.base_url,
            "--api-key-env",
            KEY_ENV,
            "--api-key",
            "-",
            "--model",
            "mock-model",
            "--agent",
            "llm",
        ])
        .write_stdin(format!("{KEY}\n"))
        .output()
        .unwrap();
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    assert_no_key(&stdout, &stderr);
    assert_eq!(
        stdout,
        format!(
            "wrote {}: provider mock ({}, key in ${KEY_ENV}), default model mock-model, default agent llm\n\
             wrote {} (mode 0600): {KEY_ENV}\n",
            env.root().join("config.yaml").display(),
            mock.base_url,
            env.root().join(".env").display()
        )
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(env.root().join(".env"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let config = std::fs::read_to_string(env.root().join("config.yaml")).unwrap();
    assert!(!config.contains(KEY), "{config}");
    assert!(config.contains("defaultAgent: llm"), "{config}");

    // The default agent is now the llm one, keyed from .env.
    std::fs::write(env.dir.path().join("review.yaml"), WORKFLOW).unwrap();
    env.ok(&[
        "workflow",
        "put",
        env.dir.path().join("review.yaml").to_str().unwrap(),
    ]);
    let thread = start_thread(&env, "review", "Review it");
    let step = json(&env.ok(&["thread", "step", &thread]));
    assert_eq!(step["done"], true);
    assert_eq!(
        mock.requests()[0].authorization.as_deref(),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(mock.requests()[0].body["model"], "mock-model");

    // A second setup merges: the provider stays, the key is replaced in place.
    env.uwf()
        .args(["setup", "--provider", "mock", "--api-key", "-"])
        .write_stdin("sk-second\n")
        .assert()
        .success();
    assert_eq!(
        std::fs::read_to_string(env.root().join(".env")).unwrap(),
        format!("{KEY_ENV}=sk-second\n")
    );
    let config = std::fs::read_to_string(env.root().join("config.yaml")).unwrap();
    assert!(
        config.contains("mock-model") && config.contains(&mock.base_url),
        "{config}"
    );
    assert!(
        files_with_key(env.dir.path()).is_empty(),
        "the old key was replaced"
    );

    // Without flags and without a terminal, setup explains itself.
    let err = env.fails(&["setup"], 1);
    assert!(
        err.contains("stdin is not a terminal") && err.contains("--provider openai"),
        "{err}"
    );
}

#[test]
fn setup_refuses_an_empty_key_and_doctor_checks_only_the_provider_in_use() {
    let env = Env::new();
    let setup = |args: &[&str], stdin: &str| {
        env.uwf()
            .arg("setup")
            .args(args)
            .write_stdin(stdin.to_owned())
            .output()
            .unwrap()
    };
    let out = setup(
        &[
            "--provider",
            "openai",
            "--api-key",
            "-",
            "--model",
            "gpt-4o-mini",
            "--agent",
            "llm",
        ],
        "\n",
    );
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the API key is empty; nothing was written"),
        "{stderr}"
    );
    assert!(!env.root().join("config.yaml").exists());

    // Set up one provider, then switch to another whose server has no model list.
    let old = Mock::start(vec![]);
    let new = Mock::start(vec![Reply::status(404, "not found", &[])]);
    let args = |mock: &Mock, name: &str, model: &str| {
        let args = [
            "--provider",
            name,
            "--base-url",
            &mock.base_url,
            "--api-key",
            "-",
        ];
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        args.extend(["--model", model, "--agent", "llm"].map(String::from));
        args
    };
    let first = args(&old, "mock", "mock-model");
    let first: Vec<&str> = first.iter().map(String::as_str).collect();
    assert!(setup(&first, &format!("{KEY}\n")).status.success());
    let second = args(&new, "local", "qwen");
    let second: Vec<&str> = second.iter().map(String::as_str).collect();
    assert!(setup(&second, "sk-local\n").status.success());
    let out = env.run(&["doctor", "--skip", "fuse"]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!(
            "ok   provider local: GET {}/models → 404: the server answers but lists no models",
            new.base_url
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("off  provider mock: no model in use names it"),
        "{stdout}"
    );
    assert!(
        old.requests().is_empty(),
        "the unused provider is not probed"
    );
}

#[test]
fn config_errors_are_located_and_stop_steps() {
    let env = Env::new();
    std::fs::create_dir_all(env.root()).unwrap();
    std::fs::write(
        env.root().join("config.yaml"),
        "agents:\n  mine:\n    command: my-agent\n    timeout: soon\n",
    )
    .unwrap();
    common::put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "p");
    let err = env.fails(&["thread", "step", &id], 1);
    assert!(
        err.contains("config.yaml is not valid:\n  line 4, column 14: agents.mine.timeout: expected seconds or a duration (e.g. 900, 15m, 1h 30m), found a string"),
        "{err}"
    );
    std::fs::write(
        env.root().join("config.yaml"),
        "models:\n  m: { provider: nowhere }\ndefaultModel: m\n",
    )
    .unwrap();
    let err = env.fails(&["thread", "step", &id], 1);
    assert!(
        err.contains("models.m.provider: unknown provider `nowhere` (providers: none defined)"),
        "{err}"
    );
    // A broken .env is reported by line, never by value, and does not stop other commands.
    std::fs::write(env.root().join("config.yaml"), "").unwrap();
    std::fs::write(env.root().join(".env"), "GOOD=1\nsk-pasted-secret-value\n").unwrap();
    let out = env.run(&["thread", "show", &id]);
    let (_, stderr) = texts(&out);
    assert!(out.status.success());
    assert!(
        stderr.contains(".env line 2: expected KEY=VALUE"),
        "{stderr}"
    );
    assert!(!stderr.contains("sk-pasted-secret-value"), "{stderr}");
}

#[test]
fn doctor_reports_one_line_per_check() {
    let mock = Mock::start(vec![Reply::json(200, json!({"data": []}))]);
    let t = Llm::with_config(
        &mock,
        "agents:\n  ghost: { command: uwf-no-such-agent-program }\n  shell: { command: sh }\n",
    );
    let out = t.run(&["doctor", "--skip", "fuse"]);
    let (stdout, stderr) = texts(&out);
    assert_no_key(&stdout, &stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let root = t.env.root();
    let expected = format!(
        "ok   config: {root}/config.yaml is valid (1 providers, 2 models, 2 agents)\n\
         ok   secrets: {root}/.env has 1 keys, mode 0600\n",
        root = root.display()
    );
    assert!(stdout.starts_with(&expected), "{stdout}");
    // Claude Code, Codex and OpenCode: `ok` with their path where installed, else `off` (no role
    // uses them).
    for program in ["claude", "codex", "opencode"] {
        assert!(
            stdout.contains(&format!(
                "ok   agent {program}: `uwf agent {program}` runs /"
            )) || stdout.contains(&format!(
                "off  agent {program}: `{program}` is not installed (not used now)"
            )),
            "{stdout}"
        );
    }
    let expected = "ok   agent dry: `uwf` (this program)\n\
         FAIL agent ghost: `uwf-no-such-agent-program` is not on PATH\n     \
         hint: install it, or fix agents.ghost.command in config.yaml\n\
         ok   agent human: a person answers: `uwf thread question ID`, then `uwf thread answer ID` (or the mount's `answer` file)\n\
         ok   agent llm: `uwf agent llm` with model `fast`\n";
    assert!(stdout.contains(expected), "{stdout}");
    assert!(
        stdout.contains("ok   agent react: `uwf agent react` with model `fast`\n"),
        "{stdout}"
    );
    assert!(stdout.contains("ok   agent shell: `sh` is /"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "ok   provider mock: GET {}/models → 200 (key from ${KEY_ENV})\n",
            mock.base_url
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("ok   storage: {} is writable\n", root.display())),
        "{stdout}"
    );
    assert!(stdout.ends_with("1 of 14 checks failed\n"), "{stdout}");
    let probe = &mock.requests()[0];
    assert_eq!(
        (probe.method.as_str(), probe.path.as_str()),
        ("GET", "/v1/models")
    );
    assert_eq!(
        probe.authorization.as_deref(),
        Some(format!("Bearer {KEY}").as_str())
    );

    // A refused key and a missing one fail with hints; all good otherwise exits 0.
    let mock = Mock::start(vec![Reply::status(401, "no", &[])]);
    let t = Llm::new(&mock);
    let out = t.run(&["doctor", "--skip", "fuse"]);
    let (stdout, _) = texts(&out);
    assert!(stdout.contains("→ 401: the key was refused"), "{stdout}");
    assert!(
        stdout.contains("hint: store a valid key: `uwf setup --provider mock --api-key -`"),
        "{stdout}"
    );
    std::fs::remove_file(t.env.root().join(".env")).unwrap();
    let out = t.run(&["doctor", "--skip", "fuse"]);
    let (stdout, _) = texts(&out);
    assert!(
        stdout.contains(&format!(
            "FAIL provider mock: provider `mock` needs an API key in ${KEY_ENV}"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "hint: store it in {} with `uwf setup",
            t.env.root().join(".env").display()
        )) && !stdout.contains("<root>"),
        "{stdout}"
    );
    let out = t.run(&["doctor", "--skip", "fuse", "--skip", "providers"]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.ends_with("all 11 checks passed\n"), "{stdout}");
}

#[test]
fn a_streamed_completion_shows_tokens_as_they_arrive_and_stores_the_same_output() {
    // The same answer, once in one piece and once as a stream of pieces one second apart.
    let pieces = [
        "---\napproved: true\n",
        "notes: tests cover it\n---\n",
        "Looks good.\n",
    ];
    let plain = Mock::start(vec![content(&pieces.concat())]);
    let t = Llm::new(&plain);
    let plain_output = t.output(t.step("llm")["head"].as_str().unwrap());
    let plain_step = json(&t.ok(&["cas", "get", &t.step_head(), "--payload"]));

    let streamed = Mock::start(vec![mock_llm::stream(&pieces, Duration::from_millis(1000))]);
    let t = Llm::new(&streamed);
    let started = Instant::now();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_uwf"))
        .env_remove(KEY_ENV)
        .env_remove("WORKFLOW_STORAGE_ROOT")
        .env("UWF_STORAGE_ROOT", t.env.root())
        .env("HOME", t.env.dir.path())
        .args(["thread", "step", &t.thread, "--agent", "llm"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stderr, &mut first).unwrap();
    let first_at = started.elapsed();
    let status = child.wait().unwrap();
    let ended_at = started.elapsed();
    assert!(status.success());
    assert!(first.contains("---"), "{first}");
    assert!(
        first_at + Duration::from_millis(1500) < ended_at,
        "the first token ({first_at:?}) came no earlier than the end ({ended_at:?})"
    );
    assert!(streamed.requests()[0].body["stream"] == true);
    let streamed_output = t.output(&t.step_head());
    assert_eq!(streamed_output, plain_output);
    // The step node's output hash is the same: identical output nodes.
    let streamed_step = json(&t.ok(&["cas", "get", &t.step_head(), "--payload"]));
    assert_eq!(streamed_step["output"], plain_step["output"]);
}

#[test]
fn a_streamed_completion_shows_in_the_live_view_before_it_ends() {
    let pieces = ["---\napproved: true\n", "notes: streamed\n---\n", "Done.\n"];
    let mock = Mock::start(vec![mock_llm::stream(&pieces, Duration::from_millis(1200))]);
    let t = Llm::new(&mock);
    let uwf = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_uwf"))
            .env_remove(KEY_ENV)
            .env_remove("WORKFLOW_STORAGE_ROOT")
            .env("UWF_STORAGE_ROOT", t.env.root())
            .env("HOME", t.env.dir.path())
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let started = Instant::now();
    let mut step = uwf(&["thread", "step", &t.thread, "--agent", "llm"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while json(&t.ok(&["thread", "show", &t.thread]))["status"] != "running" {
        assert!(Instant::now() < deadline, "the step never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut live = uwf(&["thread", "live", &t.thread, "--once"]);
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(live.stdout.take().unwrap()));
    let first_token_at = loop {
        let line = lines.next().expect("live ended early").unwrap();
        if line == "approved: true" {
            break started.elapsed();
        }
    };
    assert!(step.wait().unwrap().success());
    let ended_at = started.elapsed();
    assert!(
        first_token_at + Duration::from_millis(1500) < ended_at,
        "first token at {first_token_at:?}, the completion ended at {ended_at:?}"
    );
    assert!(live.wait().unwrap().success());
}

#[test]
fn setup_refuses_a_variable_that_is_no_name_and_an_empty_model() {
    let env = Env::new();
    for (args, said) in [
        (
            &["setup", "--provider", "local", "--api-key-env", "-"][..],
            "`-` is not a variable name",
        ),
        (
            &["setup", "--provider", "local", "--model", " "][..],
            "the model is empty",
        ),
    ] {
        let out = env.uwf().args(args).output().unwrap();
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(said), "{args:?}: {stderr}");
        assert!(
            !env.root().join("config.yaml").exists(),
            "nothing is written"
        );
    }
}

/// An agent's timeout reads as seconds or as a duration (`2s`), as durations do everywhere.
#[test]
fn an_agent_timeout_reads_as_a_duration() {
    let env = Env::new();
    std::fs::create_dir_all(env.root()).unwrap();
    let sleeper = common::script(&env, "sleeper.sh", "sleep 30");
    std::fs::write(
        env.root().join("config.yaml"),
        format!(
            "agents:\n  slow: {{ command: {}, timeout: 2s }}\n",
            sleeper.display()
        ),
    )
    .unwrap();
    common::put_example(&env, "solve-issue");
    let id = start_thread(&env, "solve-issue", "p");
    let started = std::time::Instant::now();
    let err = env.fails(&["thread", "step", &id, "--agent", "slow"], 1);
    let took = started.elapsed();
    assert!(
        err.contains("2 s") || err.contains("2s") || err.contains("timed out"),
        "{err}"
    );
    assert!(
        took >= std::time::Duration::from_secs(2) && took < std::time::Duration::from_secs(20),
        "the step took {took:?}: {err}"
    );
}

/// `uwf setup` on a terminal, answering `lines` one by one as a person types them; everything
/// it printed.
fn setup_on_terminal(env: &Env, lines: &[&str]) -> String {
    let typed: String = lines
        .iter()
        .map(|l| format!("sleep 0.3; echo '{l}'; "))
        .collect();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "({typed} sleep 1) | script -qec '{} setup' /dev/null",
            env!("CARGO_BIN_EXE_uwf")
        ))
        .env("UWF_STORAGE_ROOT", env.root())
        .env("HOME", env.dir.path())
        .env_remove("WORKFLOW_STORAGE_ROOT")
        .env_remove("LOCAL_API_KEY")
        .env("NO_COLOR", "1")
        .env("TERM", "xterm")
        .current_dir(env.dir.path())
        .output()
        .expect("run script(1)");
    String::from_utf8_lossy(&out.stdout).replace('\r', "")
}

/// A keyless server (llama.cpp's, a local vLLM) is set up on a terminal by answering `none`
/// to the key-variable question, and by flags with `--no-key`: no key variable is written, and
/// no key is asked for or said to be missing (issue #41 item 8).
#[test]
fn a_keyless_server_is_set_up_on_a_terminal_and_with_no_key() {
    if !common::has(
        "a_keyless_server_is_set_up_on_a_terminal_and_with_no_key",
        &[common::Need::Tool("script")],
    ) {
        return;
    }
    let env = Env::new();
    let said = setup_on_terminal(
        &env,
        &["local", "http://127.0.0.1:8080/v1", "none", "llama3", ""],
    );
    let config = std::fs::read_to_string(env.root().join("config.yaml")).expect("config.yaml");
    assert!(!config.contains("apiKeyEnv"), "{config}\n{said}");
    assert!(
        config.contains("baseUrl: http://127.0.0.1:8080/v1"),
        "{config}"
    );
    assert!(
        said.contains("provider local (http://127.0.0.1:8080/v1, no key)"),
        "{said}"
    );
    assert!(!said.contains("API key for"), "no key is asked: {said}");
    assert!(!said.contains("is set neither"), "{said}");

    // By flags; and a provider that had a key variable loses it.
    let flags = Env::new();
    let setup = |args: &[&str]| flags.uwf().arg("setup").args(args).output().unwrap();
    let out = setup(&[
        "--provider",
        "lab",
        "--base-url",
        "http://127.0.0.1:8000/v1",
        "--model",
        "m",
    ]);
    assert!(out.status.success(), "{:?}", texts(&out));
    let config = std::fs::read_to_string(flags.root().join("config.yaml")).unwrap();
    assert!(config.contains("apiKeyEnv: LAB_API_KEY"), "{config}");
    let out = setup(&["--provider", "lab", "--no-key"]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("no key"), "{stdout}");
    assert!(!stderr.contains("is set neither"), "{stderr}");
    let config = std::fs::read_to_string(flags.root().join("config.yaml")).unwrap();
    assert!(!config.contains("apiKeyEnv"), "{config}");
    // A key and no key at once is a usage error.
    let out = setup(&["--provider", "lab", "--no-key", "--api-key-env", "LAB_KEY"]);
    assert_eq!(out.status.code(), Some(2), "{:?}", texts(&out));
}

/// Every duration in `config.yaml` — a provider's `timeout`, react's `commandTimeout`, an
/// agent's `timeout` — reads `1m`, `30s` and `1h 30m` as the CLI's flags do, and a word that is
/// none is located and named the same way for each (issue #41: durations read the same
/// everywhere).
#[test]
fn every_config_duration_reads_as_a_duration() {
    let env = Env::new();
    let config = "providers:\n  lab: { baseUrl: 'http://127.0.0.1:9/v1', timeout: 1m }\n\
                  models:\n  m: { provider: lab, name: m }\n\
                  react: { commandTimeout: 30s }\n\
                  agents:\n  slow: { command: sleep, timeout: 1h 30m }\n";
    let doctor = |text: &str| {
        std::fs::write(env.root().join("config.yaml"), text).unwrap();
        env.uwf()
            .args([
                "doctor",
                "--skip",
                "providers",
                "--skip",
                "fuse",
                "--skip",
                "knowledge",
            ])
            .args(["--skip", "agents", "--skip", "storage", "--skip", "secrets"])
            .output()
            .unwrap()
    };
    let out = doctor(config);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("ok   config:"), "{stdout}");
    for (from, field) in [
        ("timeout: 1m", "providers.lab.timeout"),
        ("commandTimeout: 30s", "react.commandTimeout"),
        ("timeout: 1h 30m", "agents.slow.timeout"),
    ] {
        let broken = config.replace(from, &format!("{}: soon", from.split(':').next().unwrap()));
        let out = doctor(&broken);
        let (stdout, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
        assert!(
            stdout.contains(&format!(
                "{field}: expected seconds or a duration (e.g. 900, 15m, 1h 30m), found a string"
            )),
            "{field}: {stdout}{stderr}"
        );
    }
}
