//! The `react` agent's file tools, confined to one working directory
//! (`docs/LLM.md#the-react-agent`).
//!
//! Every path a model names goes through [`Workdir::resolve`]: it is normalised lexically (so
//! `..` cannot climb above the directory), then the deepest part of it that exists is
//! canonicalised (so no symlink, dangling or not, leads out), and the result must stay under
//! the canonical working directory. Tools then act on the resolved path only. Directory walks
//! (`grep`) never follow symlinks.
//!
//! Architecture Invariant: no tool reads, writes or lists anything whose resolved path is not
//! under the working directory. (A race with another process swapping a directory for a symlink
//! between the check and the use is outside this guard: it protects against a model's requests,
//! not against a hostile local user.)

use crate::advice::Advice;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The most of a file `read_file` returns.
const READ_LIMIT: usize = 256 << 10;
/// Entries `list_dir` shows.
const LIST_LIMIT: usize = 500;
/// Matching lines `grep` shows.
const GREP_MATCHES: usize = 100;
/// Files larger than this are not searched by `grep`.
const GREP_FILE_LIMIT: u64 = 2 << 20;
/// Output `run_command` returns, per stream.
const COMMAND_OUTPUT: usize = 16 << 10;

/// Why a tool refused or failed; the text goes back to the model.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ToolError {
    #[error("refused: `{0}` is outside the working directory")]
    Escape(String),
    #[error("refused: `{0}` is a symlink that leads nowhere")]
    Dangling(String),
    #[error("`{0}` does not exist")]
    NotFound(String),
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    #[error("{0}")]
    Invalid(String),
}

impl Advice for ToolError {}

fn io_error(path: &str, e: std::io::Error) -> ToolError {
    if e.kind() == std::io::ErrorKind::NotFound {
        ToolError::NotFound(path.to_owned())
    } else {
        ToolError::Io {
            path: path.to_owned(),
            message: e.to_string(),
        }
    }
}

/// A working directory the tools are confined to.
#[derive(Debug, Clone)]
pub(crate) struct Workdir {
    /// The canonical directory.
    root: PathBuf,
    /// The directory as given (absolute paths under it are accepted too).
    given: PathBuf,
}

impl Workdir {
    /// Confines tools to `dir`, which must exist.
    pub(crate) fn new(dir: &Path) -> std::io::Result<Workdir> {
        let given = std::path::absolute(dir)?;
        Ok(Workdir {
            root: dir.canonicalize()?,
            given: normalize(&given),
        })
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The real path of `path` (relative to the working directory, or absolute inside it), or
    /// a refusal when it would lead outside.
    pub(crate) fn resolve(&self, path: &str) -> Result<PathBuf, ToolError> {
        if path.contains('\0') {
            return Err(ToolError::Invalid(
                "a path cannot contain a NUL byte".into(),
            ));
        }
        let asked = Path::new(if path.is_empty() { "." } else { path });
        let joined = if asked.is_absolute() {
            asked.to_path_buf()
        } else {
            self.root.join(asked)
        };
        let mut lexical = normalize(&joined);
        if !lexical.starts_with(&self.root)
            && let Ok(rest) = lexical.strip_prefix(&self.given)
        {
            lexical = self.root.join(rest);
        }
        if !lexical.starts_with(&self.root) {
            return Err(ToolError::Escape(path.to_owned()));
        }
        // The deepest existing part decides where symlinks lead; what follows it are plain
        // names (normalisation removed `.` and `..`), created under it.
        for existing in lexical.ancestors() {
            if std::fs::symlink_metadata(existing).is_err() {
                continue;
            }
            let real = existing
                .canonicalize()
                .map_err(|_| ToolError::Dangling(path.to_owned()))?;
            if !real.starts_with(&self.root) {
                return Err(ToolError::Escape(path.to_owned()));
            }
            let rest = lexical
                .strip_prefix(existing)
                .expect("an ancestor is a prefix");
            // (Joining an empty rest would add a trailing `/`.)
            return Ok(if rest.as_os_str().is_empty() {
                real
            } else {
                real.join(rest)
            });
        }
        Err(ToolError::Escape(path.to_owned()))
    }

    /// A path for messages: relative to the working directory.
    fn show(&self, real: &Path) -> String {
        match real.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => real.display().to_string(),
        }
    }

    /// `read_file {path}`: the file's text (at most 256 KiB).
    pub(crate) fn read_file(&self, path: &str) -> Result<String, ToolError> {
        let real = self.resolve(path)?;
        if real.is_dir() {
            return Err(ToolError::Invalid(format!(
                "`{path}` is a directory; use list_dir"
            )));
        }
        let file = std::fs::File::open(&real).map_err(|e| io_error(path, e))?;
        let mut bytes = Vec::new();
        file.take(READ_LIMIT as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| io_error(path, e))?;
        let truncated = bytes.len() > READ_LIMIT;
        bytes.truncate(READ_LIMIT);
        let mut text = String::from_utf8_lossy(&bytes).into_owned();
        if truncated {
            text.push_str(&format!(
                "\n[… truncated at {} KiB; use grep to find the part you need]",
                READ_LIMIT >> 10
            ));
        }
        Ok(text)
    }

    /// `write_file {path, content}`: creates or replaces a file (and its directories).
    pub(crate) fn write_file(&self, path: &str, content: &str) -> Result<String, ToolError> {
        let real = self.resolve(path)?;
        if real.is_dir() {
            return Err(ToolError::Invalid(format!("`{path}` is a directory")));
        }
        if let Some(parent) = real.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io_error(path, e))?;
        }
        std::fs::write(&real, content).map_err(|e| io_error(path, e))?;
        Ok(format!(
            "wrote {} bytes to {}",
            content.len(),
            self.show(&real)
        ))
    }

    /// `edit_file {path, old, new}`: replaces the one occurrence of `old`.
    pub(crate) fn edit_file(&self, path: &str, old: &str, new: &str) -> Result<String, ToolError> {
        if old.is_empty() {
            return Err(ToolError::Invalid(
                "`old` is empty; give the exact text to replace".into(),
            ));
        }
        let real = self.resolve(path)?;
        let text = std::fs::read_to_string(&real).map_err(|e| io_error(path, e))?;
        match text.matches(old).count() {
            1 => {
                std::fs::write(&real, text.replacen(old, new, 1)).map_err(|e| io_error(path, e))?;
                Ok(format!("edited {}", self.show(&real)))
            }
            0 => Err(ToolError::Invalid(format!(
                "`old` does not occur in {path}; read the file and copy the text exactly"
            ))),
            n => Err(ToolError::Invalid(format!(
                "`old` occurs {n} times in {path}; include more surrounding text so it occurs once"
            ))),
        }
    }

    /// `list_dir {path}`: entries sorted, directories with a trailing `/`, symlinks with `@`.
    pub(crate) fn list_dir(&self, path: &str) -> Result<String, ToolError> {
        let real = self.resolve(path)?;
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&real).map_err(|e| io_error(path, e))? {
            let entry = entry.map_err(|e| io_error(path, e))?;
            let mut name = entry.file_name().to_string_lossy().into_owned();
            match entry.file_type() {
                Ok(t) if t.is_symlink() => name.push('@'),
                Ok(t) if t.is_dir() => name.push('/'),
                _ => {}
            }
            names.push(name);
        }
        names.sort();
        let total = names.len();
        names.truncate(LIST_LIMIT);
        let mut out = names.join("\n");
        if total > LIST_LIMIT {
            out.push_str(&format!("\n[… {} more entries]", total - LIST_LIMIT));
        }
        if total == 0 {
            out.push_str("(empty)");
        }
        Ok(out)
    }

    /// `grep {pattern, path}`: lines matching a regex in the files under `path`, as
    /// `file:line: text` (at most 100; binary and large files skipped; symlinks not followed).
    pub(crate) fn grep(&self, pattern: &str, path: &str) -> Result<String, ToolError> {
        let regex = regex::RegexBuilder::new(pattern)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| ToolError::Invalid(format!("bad pattern: {e}")))?;
        let start = self.resolve(path)?;
        let mut stack = vec![start];
        let mut files = Vec::new();
        while let Some(p) = stack.pop() {
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if meta.is_dir() {
                if let Ok(entries) = std::fs::read_dir(&p) {
                    let mut children: Vec<PathBuf> = entries
                        .filter_map(Result::ok)
                        .filter(|e| e.file_name() != ".git")
                        .map(|e| e.path())
                        .collect();
                    children.sort();
                    stack.extend(children.into_iter().rev());
                }
            } else if meta.is_file() && meta.len() <= GREP_FILE_LIMIT {
                files.push(p);
            }
        }
        let mut out = Vec::new();
        'files: for file in files {
            let Ok(bytes) = std::fs::read(&file) else {
                continue;
            };
            if bytes[..bytes.len().min(8192)].contains(&0) {
                continue;
            }
            let text = String::from_utf8_lossy(&bytes);
            for (n, line) in text.lines().enumerate() {
                if regex.is_match(line) {
                    if out.len() == GREP_MATCHES {
                        out.push(format!(
                            "[… more than {GREP_MATCHES} matches; narrow the pattern or the path]"
                        ));
                        break 'files;
                    }
                    let line: String = line.chars().take(300).collect();
                    out.push(format!("{}:{}: {line}", self.show(&file), n + 1));
                }
            }
        }
        if out.is_empty() {
            return Ok("no matches".into());
        }
        Ok(out.join("\n"))
    }

    /// `run_command {command}`: `sh -c command` in the working directory, stopped (its whole
    /// process group) after `timeout`. The exit status and both streams, each cut to 16 KiB.
    pub(crate) fn run_command(
        &self,
        command: &str,
        timeout: Duration,
    ) -> Result<String, ToolError> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(command)
            .current_dir(&self.root)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| ToolError::Invalid(format!("cannot start sh: {e}")))?;
        let readers = [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        ]
        .map(|stream| {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                if let Some(mut s) = stream {
                    let _ = s.read_to_end(&mut bytes);
                }
                bytes
            })
        });
        let started = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if started.elapsed() >= timeout => {
                    let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
                    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
                    let _ = child.wait();
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(ToolError::Invalid(format!("waiting for sh: {e}"))),
            }
        };
        let [stdout, stderr] = readers.map(|r| r.join().unwrap_or_default());
        let cut = |bytes: &[u8]| {
            let text = String::from_utf8_lossy(&bytes[..bytes.len().min(COMMAND_OUTPUT)]);
            if bytes.len() > COMMAND_OUTPUT {
                format!("{text}\n[… cut at {} KiB]", COMMAND_OUTPUT >> 10)
            } else {
                text.into_owned()
            }
        };
        let head = match status {
            Some(s) => match s.code() {
                Some(code) => format!("exit code {code}"),
                None => format!("ended by {s}"),
            },
            None => format!("timed out after {}s and was stopped", timeout.as_secs()),
        };
        Ok(format!(
            "{head}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            cut(&stdout),
            cut(&stderr)
        ))
    }
}

/// `path` with `.` removed and `..` applied lexically (never above `/`).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A working directory `work/` beside an `outside/` directory holding a secret, with
    /// symlinks of every kind leading out.
    struct Fixture {
        _dir: tempfile::TempDir,
        base: PathBuf,
        work: Workdir,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let work = base.join("work");
        let outside = base.join("outside");
        std::fs::create_dir_all(work.join("sub/deeper")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::create_dir_all(base.join("work-evil")).unwrap();
        std::fs::write(outside.join("secret.txt"), "TOP SECRET").unwrap();
        std::fs::write(work.join("notes.txt"), "inside\n").unwrap();
        symlink(&outside, work.join("link_out")).unwrap();
        symlink("../outside", work.join("link_rel_out")).unwrap();
        symlink(outside.join("secret.txt"), work.join("link_file")).unwrap();
        symlink(outside.join("missing.txt"), work.join("dangling")).unwrap();
        symlink("../..", work.join("sub/link_up")).unwrap();
        symlink(work.join("link_out"), work.join("link_chain")).unwrap();
        symlink("notes.txt", work.join("link_in")).unwrap();
        symlink("/", work.join("link_root")).unwrap();
        Fixture {
            work: Workdir::new(&work).unwrap(),
            base,
            _dir: dir,
        }
    }

    #[test]
    fn escapes_are_refused() {
        let f = fixture();
        let outside = f.base.join("outside");
        let attempts = [
            "..".to_owned(),
            "../".to_owned(),
            "../outside/secret.txt".to_owned(),
            "../../../../../../etc/passwd".to_owned(),
            "./../outside".to_owned(),
            "sub/../../outside/secret.txt".to_owned(),
            "sub/deeper/../../../outside".to_owned(),
            "sub/../sub/../..".to_owned(),
            "/etc/passwd".to_owned(),
            "//etc/passwd".to_owned(),
            "/".to_owned(),
            "/../etc".to_owned(),
            outside.join("secret.txt").display().to_string(),
            f.base.join("work/../outside").display().to_string(),
            f.base.join("work-evil/x").display().to_string(),
            "../work-evil/x".to_owned(),
            "link_out".to_owned(),
            "link_out/secret.txt".to_owned(),
            "link_out/new-file.txt".to_owned(),
            "link_out/newdir/new-file.txt".to_owned(),
            "link_rel_out/secret.txt".to_owned(),
            "link_file".to_owned(),
            "dangling".to_owned(),
            "sub/link_up".to_owned(),
            "sub/link_up/outside/secret.txt".to_owned(),
            "link_chain/secret.txt".to_owned(),
            "link_root/etc/passwd".to_owned(),
            "./link_root".to_owned(),
            "sub/./../link_out/./secret.txt".to_owned(),
        ];
        assert!(attempts.len() >= 20);
        for path in &attempts {
            match f.work.resolve(path) {
                Err(ToolError::Escape(_) | ToolError::Dangling(_)) => {}
                other => panic!("`{path}` was not refused: {other:?}"),
            }
            // And through each tool, never touching anything outside.
            assert!(f.work.read_file(path).is_err(), "read {path}");
            assert!(f.work.write_file(path, "x").is_err(), "write {path}");
            assert!(f.work.edit_file(path, "TOP", "x").is_err(), "edit {path}");
            assert!(f.work.list_dir(path).is_err(), "list {path}");
            assert!(f.work.grep("SECRET", path).is_err(), "grep {path}");
        }
        assert_eq!(
            std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
            "TOP SECRET"
        );
        assert!(!outside.join("new-file.txt").exists() && !outside.join("newdir").exists());
        assert!(!outside.join("missing.txt").exists());
        assert!(f.work.resolve("a\0b").is_err());
    }

    #[test]
    fn paths_inside_are_allowed() {
        let f = fixture();
        let root = f.work.root().to_path_buf();
        for (path, want) in [
            ("", root.clone()),
            (".", root.clone()),
            ("notes.txt", root.join("notes.txt")),
            ("./sub/deeper/../x.txt", root.join("sub/x.txt")),
            ("new/dir/file.txt", root.join("new/dir/file.txt")),
            ("link_in", root.join("notes.txt")),
            // Lexically `link_out/..` is the working directory itself.
            ("link_out/../notes.txt", root.join("notes.txt")),
            ("sub/link_up/work/notes.txt", root.join("notes.txt")),
        ] {
            assert_eq!(f.work.resolve(path).unwrap(), want, "{path}");
        }
        let absolute = root.join("sub").display().to_string();
        assert_eq!(f.work.resolve(&absolute).unwrap(), root.join("sub"));
    }

    #[test]
    fn tools_read_write_edit_list_and_grep() {
        let f = fixture();
        let w = &f.work;
        assert_eq!(w.read_file("notes.txt").unwrap(), "inside\n");
        assert_eq!(
            w.write_file("src/a.rs", "fn a() {}\nfn b() {}\n").unwrap(),
            "wrote 20 bytes to src/a.rs"
        );
        assert_eq!(
            w.edit_file("src/a.rs", "fn b", "fn c").unwrap(),
            "edited src/a.rs"
        );
        assert_eq!(w.read_file("src/a.rs").unwrap(), "fn a() {}\nfn c() {}\n");
        let twice = w.edit_file("src/a.rs", "fn", "x").unwrap_err().to_string();
        assert!(twice.contains("occurs 2 times"), "{twice}");
        let none = w.edit_file("src/a.rs", "zzz", "x").unwrap_err().to_string();
        assert!(none.contains("does not occur"), "{none}");
        assert!(
            w.read_file("sub")
                .unwrap_err()
                .to_string()
                .contains("directory")
        );
        assert!(matches!(
            w.read_file("nope.txt"),
            Err(ToolError::NotFound(_))
        ));
        let listing = w.list_dir(".").unwrap();
        assert!(
            listing.ends_with("link_out@\nlink_rel_out@\nlink_root@\nnotes.txt\nsrc/\nsub/"),
            "{listing}"
        );
        assert_eq!(w.list_dir("sub/deeper").unwrap(), "(empty)");
        // grep does not follow link_out (which holds "TOP SECRET").
        assert_eq!(w.grep("SECRET", ".").unwrap(), "no matches");
        assert_eq!(
            w.grep(r"fn \w\(", "src").unwrap(),
            "src/a.rs:1: fn a() {}\nsrc/a.rs:2: fn c() {}"
        );
        assert!(
            w.grep("(", ".")
                .unwrap_err()
                .to_string()
                .contains("bad pattern")
        );
    }

    #[test]
    fn grep_output_is_capped() {
        let f = fixture();
        f.work.write_file("many.txt", &"hit\n".repeat(500)).unwrap();
        let out = f.work.grep("hit", "many.txt").unwrap();
        assert_eq!(out.lines().count(), GREP_MATCHES + 1);
        assert!(out.ends_with("narrow the pattern or the path]"));
    }

    #[test]
    fn commands_run_in_the_workdir_and_time_out() {
        let f = fixture();
        let out = f
            .work
            .run_command(
                "cat notes.txt; echo oops >&2; exit 3",
                Duration::from_secs(10),
            )
            .unwrap();
        assert_eq!(
            out,
            "exit code 3\n--- stdout ---\ninside\n\n--- stderr ---\noops\n"
        );
        let started = Instant::now();
        let out = f
            .work
            .run_command("sleep 30 & sleep 30", Duration::from_millis(300))
            .unwrap();
        assert!(out.starts_with("timed out after 0s"), "{out}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
