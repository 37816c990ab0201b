//! A running `uwf serve` for the dashboard tests: a store with a `review` workflow whose
//! `approver` is a person (everything else the offline dry agent), the server on a free port,
//! and HTTP helpers. The server is killed when the guard drops, also when a test panics.

use std::io::BufRead;
use std::process::{Child, ExitStatus, Stdio};

use super::Env;

/// A workflow that writes, then asks a person to approve (again until approved).
pub const REVIEW: &str = "name: review\nroles:\n  writer:\n    goal: write the text\n    meta:\n      type: object\n      \
properties: { text: { type: string } }\n      required: [text]\n  approver:\n    goal: approve the text\n    \
meta:\n      type: object\n      properties:\n        approved: { type: boolean }\n        note: { type: string, minLength: 3 }\n      \
required: [approved]\nconditions:\n  approved:\n    expression: \"steps[-1].output.approved = true\"\n\
graph:\n  $START: [ { role: writer, condition: null } ]\n  writer: [ { role: approver, condition: null } ]\n  \
approver: [ { role: $END, condition: approved }, { role: writer, condition: null } ]\n";

/// A store with `review` and `solve-issue` registered.
pub fn store() -> Env {
    let env = Env::new();
    let review = env.dir.path().join("review.yaml");
    std::fs::write(&review, REVIEW).expect("review.yaml");
    env.ok(&["workflow", "put", review.to_str().expect("utf-8")]);
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/solve-issue.yaml");
    env.ok(&["workflow", "put", example.to_str().expect("utf-8")]);
    std::fs::write(
        env.root().join("config.yaml"),
        "defaultAgent: dry\nagentOverrides:\n  review: { approver: human }\n",
    )
    .expect("config.yaml");
    env
}

/// A running server.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT/`
    pub url: String,
    pub login: Option<String>,
    agent: ureq::Agent,
}

impl Server {
    /// `uwf serve --bind BIND extra…` on `env`'s root.
    pub fn start(env: &Env, bind: &str, extra: &[&str]) -> Server {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_uwf"));
        command
            .env_remove("WORKFLOW_STORAGE_ROOT")
            .env_remove("UWF_STORAGE_URL")
            .env("UWF_STORAGE_ROOT", env.root())
            .env("HOME", env.dir.path())
            .env("NO_COLOR", "1")
            .current_dir(env.dir.path());
        Server::start_with(command, bind, extra)
    }

    /// `uwf serve --bind BIND extra…` run by `command` (a `uwf` with its environment set).
    pub fn start_with(mut command: std::process::Command, bind: &str, extra: &[&str]) -> Server {
        let mut child = command
            .args(["serve", "--bind", bind])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("uwf serve");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the server's first line");
        let report: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("uwf serve printed {line:?}: {e}"));
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .build()
            .into();
        Server {
            child,
            url: report["url"].as_str().expect("url").to_owned(),
            login: report["login"].as_str().map(str::to_owned),
            agent,
        }
    }

    /// A request: method, path (after the host), headers, body → (status, headers, body).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> (u16, Vec<(String, String)>, String) {
        let url = format!("{}{}", self.url, path.trim_start_matches('/'));
        let builder = ureq::http::Request::builder().method(method).uri(&url);
        let builder = headers.iter().fold(builder, |b, (k, v)| b.header(*k, *v));
        let request = builder
            .body(body.unwrap_or("").to_owned())
            .expect("request");
        let mut response = self.agent.run(request).expect("the server answers");
        let status = response.status().as_u16();
        let heads = response
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        (status, heads, text)
    }

    /// The first `log` event of a live stream (`/api/threads/<id>/live`), asked to resume after
    /// `last_event_id`: (its id, its text).
    pub fn first_log_event(&self, id: &str, last_event_id: Option<u64>) -> (u64, String) {
        use std::io::BufRead as _;
        let url = format!("{}api/threads/{id}/live", self.url);
        let mut builder = ureq::http::Request::builder().method("GET").uri(&url);
        if let Some(n) = last_event_id {
            builder = builder.header("last-event-id", n.to_string());
        }
        let request = builder.body(String::new()).expect("request");
        let mut response = self.agent.run(request).expect("the stream");
        assert_eq!(response.status().as_u16(), 200);
        let reader = std::io::BufReader::new(response.body_mut().as_reader());
        let (mut event, mut event_id, mut data) = (String::new(), 0u64, Vec::new());
        for line in reader.lines() {
            let line = line.expect("a line of the stream");
            if let Some(v) = line.strip_prefix("event:") {
                event = v.trim().to_owned();
            } else if let Some(v) = line.strip_prefix("id:") {
                event_id = v.trim().parse().expect("a numeric id");
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push(v.strip_prefix(' ').unwrap_or(v).to_owned());
            } else if line.is_empty() {
                if event == "log" {
                    // A log event's data is the text as a JSON string.
                    let text: String =
                        serde_json::from_str(&data.join("\n")).expect("a JSON string");
                    return (event_id, text);
                }
                (event, data) = (String::new(), Vec::new());
            }
        }
        panic!("the stream ended without a log event");
    }

    /// `GET path` → (status, body as JSON or `null`).
    pub fn get_json(&self, path: &str) -> (u16, serde_json::Value) {
        let (status, _, body) = self.request("GET", path, &[], None);
        (
            status,
            serde_json::from_str(&body).unwrap_or(serde_json::Value::Null),
        )
    }

    /// A write from the dashboard's own pages (its Origin).
    pub fn post_json(&self, path: &str, body: &str) -> (u16, serde_json::Value) {
        let origin = self.url.trim_end_matches('/').to_owned();
        let (status, _, text) = self.request(
            "POST",
            path,
            &[("origin", &origin), ("content-type", "application/json")],
            Some(body),
        );
        (
            status,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
        )
    }
}

impl Server {
    /// Sends `signal` to the server and waits up to `within` for it to exit: its exit status,
    /// or `None` when it still runs.
    pub fn stop(
        &mut self,
        signal: nix::sys::signal::Signal,
        within: std::time::Duration,
    ) -> Option<ExitStatus> {
        let pid = i32::try_from(self.child.id()).expect("a pid");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal)
            .unwrap_or_else(|e| panic!("kill({pid}, {signal}): {e}"));
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("the server's status") {
                return Some(status);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// A live stream at `path` (`/api/events`, `/api/threads/<id>/live`) held open on a plain
    /// socket, its answer's head read (and checked to be `200`).
    pub fn hold_stream(&self, path: &str) -> std::net::TcpStream {
        use std::io::{Read, Write};
        let host = self
            .url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let mut socket = std::net::TcpStream::connect(&host).expect("connect");
        socket
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .expect("a read timeout");
        write!(
            socket,
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n"
        )
        .expect("the request");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            socket.read_exact(&mut byte).expect("the answer's head");
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head);
        assert!(head.starts_with("HTTP/1.1 200"), "{path}: {head}");
        socket
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of header `name` (lower case) in `headers`.
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}
