//! `uwf open [THREAD]`: the dashboard's page for a thread (or its list), printed, and opened in
//! a browser when a person runs it at a terminal. The address is the one a running `uwf serve`
//! of this store recorded in `<root>/serve.json` ([`record`]), else `--url`/`UWF_DASHBOARD_URL`,
//! else the default `http://127.0.0.1:7420/`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::{Value, json};

use crate::cli::Out;
use crate::cli::error::{CliResult, user_error};

/// The file a running `uwf serve` names itself in.
const RECORD: &str = "serve.json";

/// The address `uwf serve` listens on by default.
const DEFAULT_URL: &str = "http://127.0.0.1:7420/";

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  uwf open 01JD8X…             # the thread's page, in your browser\n  \
uwf open                       # the list of threads\n  uwf open 01JD8X… --print     # only print the address\n  \
uwf open 01JD8X… --url https://uwf.example.com/"
)]
pub(crate) struct OpenArgs {
    /// A thread id (or a unique prefix); none: the list of threads
    thread: Option<String>,
    /// Only print the address, even at a terminal
    #[arg(long)]
    print: bool,
    /// The dashboard's address (default: the running `uwf serve` of this store, else
    /// $UWF_DASHBOARD_URL, else http://127.0.0.1:7420/)
    #[arg(long, value_name = "URL")]
    url: Option<String>,
}

pub(crate) fn run(args: OpenArgs, root: &Path, out: &mut Out) -> CliResult {
    let (base, running) = match args.url.or_else(env_url) {
        Some(url) => (url, None),
        None => match recorded(root) {
            Some(url) => (url, Some(true)),
            None => (DEFAULT_URL.to_owned(), Some(false)),
        },
    };
    let base = if base.ends_with('/') {
        base
    } else {
        format!("{base}/")
    };
    if !base.starts_with("http://") && !base.starts_with("https://") {
        return Err(user_error!("`{base}` is not a dashboard address")
            .hint("give it as http://HOST:PORT/ or https://HOST/"));
    }
    let url = match &args.thread {
        Some(id) => {
            let id = crate::engine::cycle::lifecycle::resolve_id(root, id)?;
            format!("{base}threads/{id}")
        }
        None => base.clone(),
    };
    let person = out.mode == crate::cli::terminal::output::Mode::Table;
    if running == Some(false) && person {
        eprintln!(
            "uwf: no `uwf serve` runs for this store that I know of; start one with `uwf serve` (this is its default address)"
        );
    }
    let opened = person && !args.print && std::io::stdout().is_terminal() && open_in_browser(&url);
    out.said(
        &if opened {
            format!("opened {url}")
        } else {
            url.clone()
        },
        &url,
        &json!({"url": url, "running": running, "opened": opened}),
    )?;
    Ok(())
}

fn env_url() -> Option<String> {
    std::env::var("UWF_DASHBOARD_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
}

/// The address a running `uwf serve` of the store at `root` recorded, if its process lives.
pub(super) fn recorded(root: &Path) -> Option<String> {
    let text = std::fs::read_to_string(root.join(RECORD)).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    let pid = i32::try_from(v["pid"].as_u64()?).ok()?;
    // Signal 0 asks only whether the process exists.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).ok()?;
    v["url"].as_str().map(str::to_owned)
}

/// Opens `url` with the desktop's opener, if there is one; whether it started.
fn open_in_browser(url: &str) -> bool {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    if std::env::var_os("DISPLAY").is_none()
        && std::env::var_os("WAYLAND_DISPLAY").is_none()
        && !cfg!(target_os = "macos")
    {
        return false;
    }
    std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .is_ok()
}

/// What `uwf serve` writes once it listens, and removes when it stops: `{url, pid}` in
/// `<root>/serve.json`, for `uwf open`. Best effort: a store that cannot take the file is still
/// served.
pub(crate) struct Record(Option<PathBuf>);

/// Records `url` as this process's dashboard of the store at `root`.
pub(crate) fn record(root: &Path, url: &str) -> Record {
    let path = root.join(RECORD);
    let text = json!({"url": url, "pid": std::process::id()}).to_string();
    let tmp = root.join(format!("{RECORD}.{}", std::process::id()));
    let written = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &path));
    Record(written.ok().map(|()| path))
}

impl Drop for Record {
    fn drop(&mut self) {
        let Some(path) = &self.0 else { return };
        // Only our own record: another server may have started since.
        let ours = std::fs::read_to_string(path)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|v| v["pid"].as_u64() == Some(u64::from(std::process::id())));
        if ours {
            let _ = std::fs::remove_file(path);
        }
    }
}
