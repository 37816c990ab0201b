//! A headless Chromium for tests that check pages in a real browser: a small blocking W3C
//! WebDriver client (over `ureq`) talking to a private `chromedriver`.
//!
//! Architecture Invariant: nothing of a [`Browser`] outlives it. Its `chromedriver` runs in a
//! process group of its own with Chromium inside it, and `Drop` — which also runs when the test
//! panicked — ends the session, kills that group and then any process still naming the
//! browser's temporary directory (Chromium's crash handlers put themselves in sessions of their
//! own, so the group alone does not reach them), and waits until they are gone.
//!
//! The browser is sealed: a fresh profile and `HOME` in a temporary directory, and the flags
//! that keep Chromium from reaching for the network by itself (this machine has no internet; a
//! Chromium without them fills its log with refused connections). A test without Chromium or
//! `chromedriver` skips by the rule of [`super::has`]. Screenshots are written to
//! `<target dir>/screenshots/` (the parent of `CARGO_TARGET_TMPDIR`, so `CARGO_TARGET_DIR` is
//! honoured), where CI keeps them; a test that panics leaves `<test>-panicked.png` there.
//!
//! Pages under test should declare an icon (`<link rel="icon" href="data:,">`, or serve
//! `/favicon.ico`): otherwise Chromium's request for `/favicon.ico` may end in a 404, which
//! [`Browser::console_errors`] reports like any other failed load.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The key under which W3C WebDriver names an element in JSON.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// How long `chromedriver` may take to answer `/status` with `ready`.
const DRIVER_READY: Duration = Duration::from_secs(10);

/// How long one WebDriver command may take (session creation starts Chromium).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// How often `wait_until` and `wait_for` look again.
const POLL: Duration = Duration::from_millis(50);

/// Chromium's flags. Without the `--disable-*-networking/update/sync` ones, Chromium tries to
/// reach Google's servers in the background (refused here, and noise everywhere).
const CHROMIUM_ARGS: &[&str] = &[
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
];

/// An element of the current page, as the driver names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    id: String,
}

impl Element {
    /// The element as an argument of [`Browser::execute`] (it arrives as the DOM node).
    pub fn arg(&self) -> Value {
        json!({ ELEMENT_KEY: self.id })
    }

    fn from_json(value: &Value) -> Option<Element> {
        let id = value.get(ELEMENT_KEY)?.as_str()?;
        Some(Element { id: id.to_owned() })
    }
}

/// A headless Chromium driven through its own `chromedriver`, for one test.
///
/// Commands that should not fail in a working browser (navigate, click, read a text) panic
/// with the driver's message; the ones whose failure a test may expect return `Result` or
/// `Option`.
pub struct Browser {
    test: String,
    agent: ureq::Agent,
    /// `http://127.0.0.1:<port>/session/<id>`.
    session: String,
    driver: Child,
    /// SEVERE entries of the browser log read so far (the driver hands each entry out once).
    errors: RefCell<Vec<String>>,
    /// The profile, `HOME` and the driver's log; removed after the processes are gone.
    dir: tempfile::TempDir,
}

impl Browser {
    /// A fresh browser for `test` (its name, for the skip line and screenshots), or `None` when
    /// the machine lacks Chromium or `chromedriver` and the test should return.
    ///
    /// Chromium is `/usr/bin/chromium` or `chromium` on PATH; the driver is `chromedriver` on
    /// PATH or `/usr/bin/chromedriver`. When one is missing this prints `SKIP <test>: …` (or
    /// panics under `UWF_REQUIRE_ALL_TESTS=1`), as [`super::has`] does. A browser that is
    /// installed but does not start is a failure, not a skip: this panics with the driver's log.
    pub fn start(test: &str) -> Option<Browser> {
        let chromium =
            executable(Path::new("/usr/bin/chromium")).or_else(|| super::which("chromium"));
        let driver =
            super::which("chromedriver").or_else(|| executable(Path::new("/usr/bin/chromedriver")));
        let mut missing = Vec::new();
        if chromium.is_none() {
            missing.push("chromium not found".to_owned());
        }
        if driver.is_none() {
            missing.push("chromedriver not found".to_owned());
        }
        if !super::runs(test, &missing) {
            return None;
        }
        let (Some(chromium), Some(driver)) = (chromium, driver) else {
            unreachable!("runs() lets a test run only when nothing is missing")
        };
        Some(Browser::launch(test, &chromium, &driver))
    }

    fn launch(test: &str, chromium: &Path, driver: &Path) -> Browser {
        let dir = tempfile::Builder::new()
            .prefix("uwf-browser-")
            .tempdir()
            .expect("temp dir for the browser");
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(COMMAND_TIMEOUT))
            .http_status_as_error(false)
            .proxy(None)
            .build()
            .into();
        let (child, base) = start_driver(&agent, driver, dir.path());
        let mut args: Vec<String> = CHROMIUM_ARGS.iter().map(|a| (*a).to_owned()).collect();
        args.push(format!(
            "--user-data-dir={}",
            dir.path().join("profile").display()
        ));
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "timeouts": {"pageLoad": 30_000, "script": 30_000, "implicit": 0},
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {"binary": chromium, "args": args},
        }}});
        let mut browser = Browser {
            test: test.to_owned(),
            agent,
            session: String::new(),
            driver: child,
            errors: RefCell::new(Vec::new()),
            dir,
        };
        // From here on `browser`'s Drop cleans up, also when the session cannot be made.
        let created = request(
            &browser.agent,
            Method::Post,
            &format!("{base}/session"),
            Some(&capabilities),
        );
        match created.as_ref().ok().and_then(|v| v["sessionId"].as_str()) {
            Some(id) => browser.session = format!("{base}/session/{id}"),
            None => panic!(
                "chromedriver did not start Chromium: {}\n{}",
                created
                    .err()
                    .unwrap_or_else(|| "no sessionId in its answer".to_owned()),
                browser.driver_log()
            ),
        }
        browser
    }

    /// Opens `url` and waits for it to load.
    pub fn goto(&self, url: &str) {
        self.cmd(Method::Post, "/url", json!({ "url": url }));
    }

    /// Resizes the window to `width` × `height` CSS pixels (the viewport is a little smaller
    /// in a headful window; headless, the same).
    pub fn set_window_size(&self, width: u32, height: u32) {
        self.cmd(
            Method::Post,
            "/window/rect",
            json!({ "width": width, "height": height }),
        );
    }

    /// Runs a Chrome DevTools Protocol command (`Emulation.setDeviceMetricsOverride`, …)
    /// through chromedriver and returns its result.
    pub fn cdp(&self, command: &str, params: Value) -> Value {
        self.cmd(
            Method::Post,
            "/goog/cdp/execute",
            json!({ "cmd": command, "params": params }),
        )
    }

    /// Presses and releases each key of `keys` in turn on whatever has the focus (WebDriver
    /// key codes for the special ones: `"\u{E007}"` is Enter).
    pub fn press(&self, keys: &str) {
        let actions: Vec<Value> = keys
            .chars()
            .flat_map(|k| {
                let k = k.to_string();
                [
                    json!({"type": "keyDown", "value": k}),
                    json!({"type": "keyUp", "value": k}),
                ]
            })
            .collect();
        self.cmd(
            Method::Post,
            "/actions",
            json!({ "actions": [{ "type": "key", "id": "keyboard", "actions": actions }] }),
        );
    }

    /// The URL of the current page.
    pub fn url(&self) -> String {
        string(self.cmd(Method::Get, "/url", Value::Null))
    }

    /// The first element that the CSS selector `css` matches, or why there is none.
    pub fn find(&self, css: &str) -> Result<Element, String> {
        let found = self.call(Method::Post, "/element", &locator(css))?;
        Element::from_json(&found).ok_or_else(|| format!("not an element: {found}"))
    }

    /// Every element that `css` matches, in document order.
    pub fn find_all(&self, css: &str) -> Vec<Element> {
        let found = self.cmd(Method::Post, "/elements", locator(css));
        found
            .as_array()
            .map(|all| all.iter().filter_map(Element::from_json).collect())
            .unwrap_or_default()
    }

    /// The rendered text of `element` (what a reader sees, whitespace collapsed).
    pub fn text(&self, element: &Element) -> String {
        string(self.cmd(
            Method::Get,
            &format!("/element/{}/text", element.id),
            Value::Null,
        ))
    }

    /// Clicks the middle of `element` (scrolled into view first).
    pub fn click(&self, element: &Element) {
        self.cmd(
            Method::Post,
            &format!("/element/{}/click", element.id),
            json!({}),
        );
    }

    /// Types `text` into `element`, as keystrokes after what it holds.
    pub fn type_text(&self, element: &Element, text: &str) {
        self.cmd(
            Method::Post,
            &format!("/element/{}/value", element.id),
            json!({ "text": text }),
        );
    }

    /// Empties an input or textarea.
    pub fn clear(&self, element: &Element) {
        self.cmd(
            Method::Post,
            &format!("/element/{}/clear", element.id),
            json!({}),
        );
    }

    /// The HTML attribute `name` of `element` as written in the page, if it has one.
    ///
    /// An input's current text is its `value` property, not attribute: see [`Browser::property`].
    pub fn attribute(&self, element: &Element, name: &str) -> Option<String> {
        let path = format!("/element/{}/attribute/{name}", element.id);
        self.cmd(Method::Get, &path, Value::Null)
            .as_str()
            .map(str::to_owned)
    }

    /// The DOM property `name` of `element` (`value`, `checked`, …); `Null` when it has none.
    pub fn property(&self, element: &Element, name: &str) -> Value {
        self.cmd(
            Method::Get,
            &format!("/element/{}/property/{name}", element.id),
            Value::Null,
        )
    }

    /// Runs `script` as the body of a function called with `args` (`arguments[0]`, …) and
    /// returns what it returns; a promise is not awaited. Panics when the script throws.
    pub fn execute(&self, script: &str, args: Vec<Value>) -> Value {
        self.cmd(
            Method::Post,
            "/execute/sync",
            json!({ "script": script, "args": args }),
        )
    }

    /// Whether `condition` holds within `timeout`, asking again every 50 ms.
    pub fn wait_until(&self, timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if condition() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(POLL);
        }
    }

    /// The first element matching `css` once there is one, or why there was none by `timeout`.
    pub fn wait_for(&self, css: &str, timeout: Duration) -> Result<Element, String> {
        let mut last = None;
        let found = self.wait_until(timeout, || match self.find(css) {
            Ok(element) => {
                last = Some(Ok(element));
                true
            }
            Err(e) => {
                last = Some(Err(e));
                false
            }
        });
        match last {
            Some(Ok(element)) if found => Ok(element),
            Some(Err(e)) => Err(format!("no `{css}` after {timeout:?}: {e}")),
            _ => Err(format!("no `{css}` after {timeout:?}")),
        }
    }

    /// Saves a PNG of the viewport as `<target dir>/screenshots/<name>.png` and returns its path.
    pub fn screenshot(&self, name: &str) -> PathBuf {
        let encoded = string(self.cmd(Method::Get, "/screenshot", Value::Null));
        let png = {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .expect("the driver sends a screenshot as base64")
        };
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        path
    }

    /// Every SEVERE entry of the browser's log since it started: `console.error` calls,
    /// uncaught exceptions and failed loads (a 404 included), each as the driver words it
    /// (`console-api 12:8 "boom"`, `http://… - Failed to load resource: …`).
    ///
    /// They come from Chromium's log through chromedriver's `POST /session/{id}/se/log`
    /// (`goog:loggingPrefs` asks for it), which hands out each entry only once; the browser
    /// keeps them, so every call returns the whole list. An entry may arrive a moment after
    /// the action that caused it: wait for it with [`Browser::wait_until`].
    pub fn console_errors(&self) -> Vec<String> {
        let entries = self.cmd(Method::Post, "/se/log", json!({ "type": "browser" }));
        let mut errors = self.errors.borrow_mut();
        for entry in entries.as_array().into_iter().flatten() {
            if entry["level"] == "SEVERE" {
                errors.push(entry["message"].as_str().unwrap_or_default().to_owned());
            }
        }
        errors.clone()
    }

    /// Every URL the current page loaded — the page itself, then each resource (scripts,
    /// styles, images, `fetch`, failed loads included) — that is not on `allowed_origin`
    /// (`http://127.0.0.1:8080`, no trailing slash needed), each once.
    ///
    /// Read from the page's Performance API, so it covers the current document only (an earlier
    /// page's loads are gone after navigating), up to its buffer of 250 resources. `data:`,
    /// `blob:` and `about:` URLs load nothing and are left out.
    pub fn foreign_requests(&self, allowed_origin: &str) -> Vec<String> {
        let loaded = self.execute(
            "return [location.href]
                .concat(performance.getEntriesByType('navigation').map(e => e.name))
                .concat(performance.getEntriesByType('resource').map(e => e.name));",
            Vec::new(),
        );
        let origin = allowed_origin.trim_end_matches('/');
        let mut foreign: Vec<String> = Vec::new();
        for url in loaded
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            let local = url == origin || url.starts_with(&format!("{origin}/"));
            let no_load = ["data:", "blob:", "about:"]
                .iter()
                .any(|s| url.starts_with(s));
            if !local && !no_load && !foreign.iter().any(|f| f == url) {
                foreign.push(url.to_owned());
            }
        }
        foreign
    }

    /// Sends a session command, panicking with the driver's message if it fails.
    fn cmd(&self, method: Method, path: &str, body: Value) -> Value {
        self.call(method, path, &body)
            .unwrap_or_else(|e| panic!("{} {path} failed: {e}", method.name()))
    }

    /// Sends a session command (`body` is ignored for GET) and returns its `value`.
    fn call(&self, method: Method, path: &str, body: &Value) -> Result<Value, String> {
        request(
            &self.agent,
            method,
            &format!("{}{path}", self.session),
            Some(body),
        )
    }

    /// The end of the driver's output, for a failure message.
    fn driver_log(&self) -> String {
        let path = self.dir.path().join("chromedriver.log");
        let log = std::fs::read_to_string(&path).unwrap_or_default();
        let start = log.len().saturating_sub(4000);
        let start = (start..log.len())
            .find(|&i| log.is_char_boundary(i))
            .unwrap_or(log.len());
        format!(
            "--- the end of chromedriver's output ---\n{}",
            &log[start..]
        )
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.session.is_empty() {
            // Best effort: what the page looked like and said when the test failed.
            let shot = request(
                &self.agent,
                Method::Get,
                &format!("{}/screenshot", self.session),
                None,
            );
            if let Some(png) = shot.ok().as_ref().and_then(Value::as_str).and_then(|b| {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD.decode(b).ok()
            }) {
                let path = screenshot_dir().join(format!("{}-panicked.png", self.test));
                if std::fs::create_dir_all(screenshot_dir()).is_ok()
                    && std::fs::write(&path, png).is_ok()
                {
                    eprintln!("{}: screenshot at {}", self.test, path.display());
                }
            }
            if let Ok(errors) = self.call(Method::Post, "/se/log", &json!({ "type": "browser" })) {
                eprintln!("{}: browser log since the last read: {errors}", self.test);
            }
        }
        if !self.session.is_empty() {
            // Lets Chromium close its profile; the kill below is what guarantees the end.
            let _ = self
                .agent
                .delete(&self.session)
                .config()
                .timeout_global(Some(Duration::from_secs(5)))
                .build()
                .call();
        }
        stop_all(&mut self.driver, self.dir.path());
    }
}

/// Starts `chromedriver` on a free port in a process group of its own, with `dir` as its
/// `HOME` and log, and waits until it is ready; returns it and its base URL.
fn start_driver(agent: &ureq::Agent, driver: &Path, dir: &Path) -> (Child, String) {
    use std::os::unix::process::CommandExt;
    let log_path = dir.join("chromedriver.log");
    // The port is free when asked but could be taken before the driver binds it: another try
    // then has another port.
    let mut failures = Vec::new();
    for _ in 0..3 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap_or_else(|e| panic!("open {}: {e}", log_path.display()));
        let mut child = Command::new(driver)
            .arg(format!("--port={port}"))
            // Chromium keeps its crash database under $HOME/.config: in the temp dir, not ~.
            .env("HOME", dir)
            .env_remove("XDG_CONFIG_HOME")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file handle"))
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", driver.display()));
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + DRIVER_READY;
        loop {
            let status = request(agent, Method::Get, &format!("{base}/status"), None);
            if status.is_ok_and(|s| s["ready"] == true) {
                return (child, base);
            }
            if let Ok(Some(exit)) = child.try_wait() {
                failures.push(format!("port {port}: chromedriver exited ({exit})"));
                break;
            }
            if Instant::now() >= deadline {
                stop_all(&mut child, dir);
                failures.push(format!("port {port}: not ready after {DRIVER_READY:?}"));
                break;
            }
            std::thread::sleep(POLL);
        }
    }
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    panic!("chromedriver did not start: {}\n{log}", failures.join("; "))
}

/// Kills `driver`'s process group and every process whose command line names `dir` (the
/// profile and crash database), then waits — at most a few seconds — until none is alive.
///
/// Dead is enough: the driver's orphans become zombies of init, which here reaps them only
/// every second or so, and a zombie runs nothing.
fn stop_all(driver: &mut Child, dir: &Path) {
    use nix::sys::signal::{Signal, kill, killpg};
    let group = i32::try_from(driver.id()).expect("a pid fits i32");
    let _ = killpg(nix::unistd::Pid::from_raw(group), Signal::SIGKILL);
    let _ = driver.wait();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let alive = live_processes(group, dir);
        if alive.is_empty() || Instant::now() >= deadline {
            return;
        }
        for pid in alive {
            let _ = kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
        }
        std::thread::sleep(POLL);
    }
}

/// The processes, zombies aside, that are in process group `group` or whose command line
/// contains `dir`.
fn live_processes(group: i32, dir: &Path) -> Vec<i32> {
    use std::os::unix::ffi::OsStrExt;
    let needle = dir.as_os_str().as_bytes();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let pid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            // `pid (comm) state ppid pgrp …`; comm may hold spaces and parentheses.
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
            let (state, pgrp) = (fields.next()?, fields.nth(1)?);
            if state == "Z" || state == "X" {
                return None;
            }
            let in_group = pgrp.parse() == Ok(group);
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let names_dir = cmdline.windows(needle.len()).any(|w| w == needle);
            (in_group || names_dir).then_some(pid)
        })
        .collect()
}

/// The directory screenshots go to: `screenshots/` in the target directory.
fn screenshot_dir() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().unwrap_or(tmp).join("screenshots")
}

/// `path` if it is an executable file.
fn executable(path: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .then(|| path.to_owned())
}

fn locator(css: &str) -> Value {
    json!({ "using": "css selector", "value": css })
}

fn string(value: Value) -> String {
    match value {
        Value::String(s) => s,
        other => panic!("expected a string from the driver, got {other}"),
    }
}

/// The methods of the commands used here (DELETE only ends the session, in `Drop`).
#[derive(Debug, Clone, Copy)]
enum Method {
    Get,
    Post,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }
}

/// One WebDriver request: its `value` on success, or the driver's error and message (or the
/// transport's error).
fn request(
    agent: &ureq::Agent,
    method: Method,
    url: &str,
    body: Option<&Value>,
) -> Result<Value, String> {
    let sent = match method {
        Method::Get => agent.get(url).call(),
        Method::Post => agent
            .post(url)
            .header("Content-Type", "application/json; charset=utf-8")
            .send(body.unwrap_or(&Value::Null).to_string()),
    };
    let mut response = sent.map_err(|e| format!("{url}: {e}"))?;
    let status = response.status();
    // A screenshot of a long page is several megabytes of base64 (ureq's default cap is 10 MB).
    let text = response
        .body_mut()
        .with_config()
        .limit(256 * 1024 * 1024)
        .read_to_string()
        .map_err(|e| format!("{url}: reading the answer: {e}"))?;
    let mut answer: Value =
        serde_json::from_str(&text).map_err(|e| format!("{url}: not JSON ({e}): {text}"))?;
    let value = answer["value"].take();
    if status.is_success() {
        return Ok(value);
    }
    // An error is a non-2xx status with `{"error", "message"}` as the value (W3C §6.6).
    match (value["error"].as_str(), value["message"].as_str()) {
        (Some(error), Some(message)) => Err(format!("{error}: {message}")),
        _ => Err(format!("{url}: HTTP {status}: {text}")),
    }
}

/// One browser at a time in a test binary: several at once on a small machine slow each other
/// past their timeouts.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Holds the browser turn of this test binary until dropped.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits until the dashboard's script has drawn `path` (it marks the body when done).
pub fn drawn(browser: &Browser, path: &str) {
    let ok = browser.wait_until(Duration::from_secs(10), || {
        browser.execute("return document.body.dataset.ready || ''", vec![]) == json!(path)
    });
    assert!(ok, "the page {path} was not drawn");
}
