//! `uwf mount` and `uwf umount`: serve the storage root as files, and stop serving it.
//!
//! `mount` serves in the foreground until unmounted (Ctrl-C, SIGTERM, SIGHUP or `uwf umount`).
//! With `--background` it starts itself again as a detached daemon and returns once the mount is
//! usable, reporting the daemon's error if mounting failed.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use clap::Args;
use nix::sys::signal::{SigSet, Signal};
use serde_json::json;

use super::Out;
use crate::cli::error::{CliResult, Context, bail, user_error};
use crate::fs::fuse::{self, MountConfig};
use crate::fs::scratch::Limits;
use crate::fs::unmount::{self, Unmounted};
use crate::fs::views::Source;
use crate::fs::{Options, Tree};

#[derive(Debug, Args)]
#[command(after_help = "\
Serves the storage root as files at DIR (see DIR/README.md once mounted): workflows/, cas/, \
threads/. Saving a workflow file registers it; refused saves fail with EINVAL and are explained \
in DIR/workflows/error.

Examples:
  uwf mount ~/uwf                      # foreground; Ctrl-C unmounts
  uwf mount --background ~/uwf         # returns once mounted
  uwf mount --background --read-only /srv/uwf
  uwf umount ~/uwf")]
pub(super) struct MountArgs {
    /// An existing, empty directory to mount on (see --nonempty)
    dir: PathBuf,
    /// Detach and return once the mount is ready
    #[arg(long)]
    background: bool,
    /// Mount even if DIR holds files (they are hidden until unmounted)
    #[arg(long)]
    nonempty: bool,
    /// Nothing can be written; reads are cached by the kernel with no round trips
    #[arg(long)]
    read_only: bool,
    /// Let other users see the mount (default: only the mounting user)
    #[arg(long)]
    allow_other: bool,
    /// Where the agents of threads started through the mount run (default: this directory);
    /// threads started elsewhere keep their own
    #[arg(long, value_name = "DIR")]
    workdir: Option<PathBuf>,
    /// Who acts through the mount: named by the threads it starts, steps, answers, forks and
    /// kills (default: $UWF_BY, else git's user.name, else your login name)
    #[arg(long, value_name = "NAME")]
    by: Option<String>,
    /// Internal: this process is the daemon started by --background
    #[arg(long, hide = true)]
    daemon: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Works also after the serving process was killed (the mount then answers \"Transport endpoint is \
not connected\"). Busy mounts (a shell inside, an open file) are detached lazily.

Examples:
  uwf umount ~/uwf
  uwf umount --force ~/uwf             # the daemon hangs: abort its connection first")]
pub(super) struct UmountArgs {
    /// The mount point
    dir: PathBuf,
    /// Abort the kernel connection first (releases processes stuck on a hung daemon)
    #[arg(long)]
    force: bool,
}

pub(super) fn run_mount(args: MountArgs, root: &Path, out: &mut Out) -> CliResult<()> {
    let dir = unmount::lexical_absolute(&args.dir)
        .with_context(|| format!("bad mount point {}", args.dir.display()))?;
    if unmount::find(&dir)?.is_some() {
        return Err(
            user_error!("{} is already a FUSE mount point", dir.display())
                .hint(format!("`uwf umount {}` first", dir.display())),
        );
    }
    if !dir.is_dir() {
        return Err(user_error!("{} is not a directory", dir.display())
            .hint(format!("mkdir -p {}", dir.display())));
    }
    if !args.nonempty && holds_files(&dir)? {
        return Err(user_error!(
            "{} is not empty: a mount would hide its files",
            dir.display()
        )
        .hint("mount on an empty directory, or pass --nonempty to hide them until unmounted"));
    }
    // Resolved before a daemon is started in `/`, so "this directory" is the caller's.
    let workdir = super::thread::workdir(args.workdir.as_deref())?;
    let by = super::thread::author::person(args.by.as_deref())?;
    if args.background && !args.daemon {
        return spawn_daemon(&args, root, &dir, (&workdir, by.as_deref()), out);
    }
    serve(&args, root, &dir, (workdir, by))
}

/// Whether the directory has any entry a mount on it would hide.
fn holds_files(dir: &Path) -> CliResult<bool> {
    let mut entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))?;
    Ok(entries.next().is_some())
}

/// Starts `uwf mount --daemon` detached and waits for it to say the mount is ready.
fn spawn_daemon(
    args: &MountArgs,
    root: &Path,
    dir: &Path,
    (workdir, by): (&Path, Option<&str>),
    out: &mut Out,
) -> CliResult<()> {
    let exe = std::env::current_exe().context("cannot find the uwf executable")?;
    let root = std::path::absolute(root)
        .with_context(|| format!("bad storage root {}", root.display()))?;
    let mut cmd = Command::new(exe);
    cmd.arg("--root")
        .arg(&root)
        .arg("mount")
        .arg(dir)
        .arg("--workdir")
        .arg(workdir)
        .arg("--daemon");
    // A daemon must not keep the caller's working directory (maybe another mount) busy.
    cmd.current_dir("/");
    if args.read_only {
        cmd.arg("--read-only");
    }
    if args.nonempty {
        cmd.arg("--nonempty");
    }
    if args.allow_other {
        cmd.arg("--allow-other");
    }
    if let Some(by) = by {
        cmd.arg("--by").arg(by);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setsid is async-signal-safe; the closure touches nothing else.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("cannot start the mount daemon")?;
    let mut line = String::new();
    if let Some(stdout) = child.stdout.take() {
        let _ = BufReader::new(stdout).read_line(&mut line);
    }
    if line.trim() == "ready" {
        if out.quiet() {
            out.line(dir.display())?;
            return Ok(());
        }
        out.line(json!({
            "mountpoint": dir,
            "pid": child.id(),
            "readOnly": args.read_only,
        }))?;
        return Ok(());
    }
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    let _ = child.wait();
    let stderr = stderr.trim();
    let reason = stderr.strip_prefix("error: ").unwrap_or(stderr);
    if reason.is_empty() {
        bail!("the mount daemon exited before the mount was ready");
    }
    bail!("{reason}");
}

/// Mounts and serves until unmounted.
fn serve(
    args: &MountArgs,
    root: &Path,
    dir: &Path,
    (workdir, by): (PathBuf, Option<String>),
) -> CliResult<()> {
    // Block the stop signals before any thread starts, so every thread inherits the mask and
    // only the waiting thread below receives them.
    let mut signals = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        signals.add(s);
    }
    signals
        .thread_block()
        .context("cannot block signals for the mount")?;

    let store = crate::engine::storage::open_store(root)?;
    let tree = Tree::new(
        Source::new(store),
        Options {
            read_only: args.read_only,
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
            limits: Limits::default(),
            workdir,
            by,
        },
    );
    let config = MountConfig {
        read_only: args.read_only,
        allow_other: args.allow_other,
    };
    let mut mounted = fuse::mount(tree, dir, config).map_err(|e| {
        let hint = if nix::unistd::geteuid().is_root() {
            "is /dev/fuse there (modprobe fuse)?"
        } else {
            "without root, mounting needs fusermount3 (Debian: apt-get install fuse3)"
        };
        user_error!("cannot mount on {}: {e}", dir.display()).hint(hint)
    })?;
    let mut unmounter = mounted.unmounter();
    let point = dir.to_path_buf();
    std::thread::Builder::new()
        .name("uwf-signals".to_owned())
        .spawn(move || {
            let mut stops = 0;
            while signals.wait().is_ok() {
                stops += 1;
                if stops == 1 {
                    // Busy (a shell inside, an open file): detach lazily; the session ends when
                    // the last file closes.
                    if unmounter.unmount().is_err() {
                        let _ = unmount::unmount(&point, false);
                    }
                } else {
                    // A second signal: the user wants out now, even with requests in flight.
                    let _ = unmount::unmount(&point, true);
                    std::process::exit(130);
                }
            }
        })
        .context("cannot start the signal thread")?;
    if args.daemon {
        println!("ready");
        detach_stdio();
    } else {
        eprintln!(
            "uwf: serving {} at {}; Ctrl-C or `uwf umount {}` stops",
            root.display(),
            dir.display(),
            dir.display()
        );
    }
    mounted
        .run()
        .with_context(|| format!("the mount at {} failed", dir.display()))?;
    Ok(())
}

/// The daemon's parent stops reading: point stdout and stderr at /dev/null so a late message
/// cannot fail (or kill) the daemon.
fn detach_stdio() {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        let _ = nix::unistd::dup2_stdout(&null);
        let _ = nix::unistd::dup2_stderr(&null);
    }
}

pub(super) fn run_umount(args: UmountArgs, out: &mut Out) -> CliResult<()> {
    let how = unmount::unmount(&args.dir, args.force)?;
    if how == Unmounted::Lazy {
        eprintln!(
            "uwf: {} is busy (a shell's working directory or an open file is inside it): it is \
             detached now, so new paths no longer reach it, and the mount ends when the last open \
             file or working directory inside it goes away",
            args.dir.display()
        );
    }
    let unmounted = unmount::lexical_absolute(&args.dir)?;
    if out.quiet() {
        out.line(unmounted.display())?;
        return Ok(());
    }
    out.line(json!({
        "unmounted": unmounted,
        "lazy": how == Unmounted::Lazy,
    }))?;
    Ok(())
}
