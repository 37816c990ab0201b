//! Who a thread command acts as (`docs/cli.md#who-did-what`): `--by NAME`, else the person
//! running it.
//!
//! The person running a command is `$UWF_BY` when set, else git's `user.name` (for the
//! commands a person types once: start, fork, kill, pause, resume, rebind, answer), else the
//! login name (`$USER`, `$LOGNAME`, else the name of this process's user id). Steps skip git:
//! `thread step` and `thread run` are on the hot path, and a `git` process per step costs more
//! than the step's own bookkeeping.

use std::process::{Command, Stdio};

use crate::cli::error::CliResult;
use crate::engine::thread::author;

/// The name recorded for an act a person asks for by hand: `--by`, else `$UWF_BY`, else
/// `git config user.name`, else the login name. `None` when none is known (nothing recorded).
pub(crate) fn person(given: Option<&str>) -> CliResult<Option<String>> {
    by_or(given, || git_user_name().or_else(login_name))
}

/// The name recorded for steps: `--by`, else `$UWF_BY`, else the login name (no git process).
pub(crate) fn runner(given: Option<&str>) -> CliResult<Option<String>> {
    by_or(given, login_name)
}

/// `given` (checked: a bad one is an error), else `$UWF_BY` (checked too: it was set on
/// purpose), else `default` when it is a name `--by` would take.
fn by_or(
    given: Option<&str>,
    default: impl FnOnce() -> Option<String>,
) -> CliResult<Option<String>> {
    if let Some(given) = given {
        return Ok(author::checked(Some(given))?);
    }
    if let Some(set) = std::env::var("UWF_BY")
        .ok()
        .filter(|v| !v.trim().is_empty())
    {
        return author::checked(Some(&set)).map_err(|e| {
            crate::cli::error::CommandError::from(e).context("UWF_BY names who acts")
        });
    }
    Ok(default().and_then(|name| author::checked(Some(&name)).ok().flatten()))
}

/// git's `user.name`: read from its files when they are plain (`git_name.rs`), else asked of
/// `git config --get user.name`, when git is there and says one.
fn git_user_name() -> Option<String> {
    match super::git_name::user_name() {
        Ok(name) => name
            .filter(|n| !n.trim().is_empty())
            .map(|n| n.trim().to_owned()),
        Err(super::git_name::Unsure) => ask_git(),
    }
}

/// `git config --get user.name`, when git is there and says one.
fn ask_git() -> Option<String> {
    let out = Command::new("git")
        .args(["config", "--get", "user.name"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let name = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !name.trim().is_empty()).then(|| name.trim().to_owned())
}

/// The login name: `$USER`, `$LOGNAME`, else the user database's name for this uid.
fn login_name() -> Option<String> {
    ["USER", "LOGNAME"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .find(|v| !v.trim().is_empty())
        .or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::getuid())
                .ok()
                .flatten()
                .map(|u| u.name)
        })
}
