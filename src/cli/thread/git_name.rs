//! git's `user.name`, read from git's own configuration files when they are plain, so that a
//! command a person types does not pay for a `git` process (about half a `uwf --version`
//! spawn, measured in `docs/performance.md#the-thread-index-at-scale`).
//!
//! Only the common shape is read here: the system file, the two global files and the
//! repository's `.git/config` found from the working directory, each parsed by git's own rules
//! for a value (quotes, escapes, comments, case-insensitive names, the last value winning).
//! Anything outside that shape — an `include`, a continued line, a setting without a value, a
//! worktree or bare repository, a repository another user owns, a git environment variable — is
//! [`Unsure`], and the caller asks `git config --get user.name` as before. gix-config was not
//! used: it finds git's installation file by running git, which is the cost this avoids.

use std::path::{Path, PathBuf};

/// The files do not say plainly; ask git.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Unsure;

/// Environment variables that change which files git reads, or add settings of their own.
const GIT_ENV: &[&str] = &[
    "GIT_CONFIG",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_NOSYSTEM",
    "GIT_CONFIG_COUNT",
    "GIT_CONFIG_PARAMETERS",
    "GIT_DIR",
    "GIT_COMMON_DIR",
    "GIT_WORK_TREE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    "GIT_CONFIG_NOGLOBAL",
];

/// `user.name` as `git config --get user.name` run here would say it: `Ok(None)` when git is not
/// installed or no file names one.
pub(super) fn user_name() -> Result<Option<String>, Unsure> {
    if GIT_ENV.iter().any(|v| std::env::var_os(v).is_some()) {
        return Err(Unsure);
    }
    if !git_on_path() {
        return Ok(None);
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .ok_or(Unsure)?;
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|x| !x.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".config"));
    let cwd = std::env::current_dir().map_err(|_| Unsure)?;
    let mut files = vec![
        PathBuf::from("/etc/gitconfig"),
        xdg.join("git").join("config"),
        home.join(".gitconfig"),
    ];
    if let Some(local) = repository_config(&cwd)? {
        files.push(local);
    }
    let mut name = None;
    for file in files {
        let text = match std::fs::read(&file) {
            Ok(bytes) => String::from_utf8(bytes).map_err(|_| Unsure)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) => return Err(Unsure),
        };
        if let Some(found) = last_user_name(&text)? {
            name = Some(found);
        }
    }
    Ok(name)
}

/// Whether an executable `git` is in one of `$PATH`'s folders.
fn git_on_path() -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join("git"))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// The `.git/config` of the repository holding `cwd`, found as git finds it: the nearest folder
/// upwards with a `.git` folder, not crossing into another filesystem.
fn repository_config(cwd: &Path) -> Result<Option<PathBuf>, Unsure> {
    use std::os::unix::fs::MetadataExt;
    let device = std::fs::metadata(cwd).map_err(|_| Unsure)?.dev();
    for dir in cwd.ancestors() {
        let Ok(here) = std::fs::metadata(dir) else {
            return Err(Unsure);
        };
        if here.dev() != device {
            return Ok(None);
        }
        if dir.join("HEAD").is_file() && dir.join("objects").is_dir() {
            // Inside a bare repository or a `.git` folder itself.
            return Err(Unsure);
        }
        let dot_git = dir.join(".git");
        match std::fs::symlink_metadata(&dot_git) {
            Ok(m) if m.is_dir() => {
                // git refuses a repository another user owns (`safe.directory`).
                if m.uid() != nix::unistd::geteuid().as_raw() {
                    return Err(Unsure);
                }
                return Ok(Some(dot_git.join("config")));
            }
            // A worktree's or submodule's `.git` file, or a link.
            Ok(_) => return Err(Unsure),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => return Err(Unsure),
        }
    }
    Ok(None)
}

/// The last `user.name` one configuration file sets, by git's parsing rules.
fn last_user_name(text: &str) -> Result<Option<String>, Unsure> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut in_user = false;
    let mut name = None;
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let mut rest = line.trim_start();
        if let Some(header) = rest.strip_prefix('[') {
            let (section, after) = section_header(header)?;
            in_user = section == Some("user".to_owned());
            rest = after.trim_start();
        }
        if rest.is_empty() || rest.starts_with('#') || rest.starts_with(';') {
            continue;
        }
        let (key, value) = setting(rest)?;
        if in_user && key == "name" {
            name = Some(value);
        } else if key == "worktreeconfig" {
            // `extensions.worktreeConfig` adds a file this reader does not look for.
            return Err(Unsure);
        }
    }
    Ok(name)
}

/// A section header after its `[`: the lowercase section name (`None` for a subsection, which
/// `user.name` never lives in) and the text after `]`.
fn section_header(header: &str) -> Result<(Option<String>, &str), Unsure> {
    let close = header.find(']').ok_or(Unsure)?;
    let inside = &header[..close];
    let after = &header[close + 1..];
    let lower = inside.to_ascii_lowercase();
    if lower.contains("include") {
        return Err(Unsure);
    }
    let valid = |name: &str| {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
    };
    if let Some((name, sub)) = inside.split_once(char::is_whitespace) {
        // `[section "subsection"]`; anything else git rejects.
        let sub = sub.trim_start();
        if !valid(name) || sub.len() < 2 || !sub.starts_with('"') || !sub.ends_with('"') {
            return Err(Unsure);
        }
        return Ok((None, after));
    }
    if !valid(inside) {
        return Err(Unsure);
    }
    // `[user.x]` is the old spelling of a subsection.
    Ok(((!inside.contains('.')).then_some(lower), after))
}

/// A `key = value` line: the lowercase key and the value as git reads it.
fn setting(line: &str) -> Result<(String, String), Unsure> {
    let end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .unwrap_or(line.len());
    let key = &line[..end];
    if !key.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Err(Unsure);
    }
    let rest = line[end..].trim_start_matches([' ', '\t']);
    let Some(value) = rest.strip_prefix('=') else {
        // A setting without `=` is a boolean true, or a line git rejects.
        return Err(Unsure);
    };
    Ok((key.to_ascii_lowercase(), value_of(value)?))
}

/// A value after its `=`, by git's rules: whitespace outside quotes is dropped at both ends and
/// kept (each character one space) inside, `#` and `;` outside quotes start a comment, and
/// `\"`, `\\`, `\n`, `\t` and `\b` are the only escapes.
fn value_of(raw: &str) -> Result<String, Unsure> {
    let mut value = String::new();
    let (mut quoted, mut spaces) = (false, 0usize);
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c.is_whitespace() && !quoted {
            if !value.is_empty() {
                spaces += 1;
            }
            continue;
        }
        if !quoted && (c == '#' || c == ';') {
            break;
        }
        value.extend(std::iter::repeat_n(' ', spaces));
        spaces = 0;
        match c {
            '\\' => value.push(match chars.next() {
                Some('t') => '\t',
                Some('b') => '\u{8}',
                Some('n') => '\n',
                Some(same @ ('\\' | '"')) => same,
                // A continued line, or an escape git rejects.
                _ => return Err(Unsure),
            }),
            '"' => quoted = !quoted,
            other => value.push(other),
        }
    }
    if quoted {
        return Err(Unsure);
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_name_of_the_user_section_is_read() {
        let text = "[core]\n\tname = not me\n[user]\n\tname = Ada Lovelace\n\temail = a@b\n[User]\nNAME = Grace Hopper\n";
        assert_eq!(last_user_name(text), Ok(Some("Grace Hopper".into())));
        assert_eq!(last_user_name("[core]\nbare = false\n"), Ok(None));
    }

    #[test]
    fn values_follow_gits_quoting_comments_and_spaces() {
        let read = |v: &str| value_of(v);
        assert_eq!(read("  Ada   Lovelace  # who"), Ok("Ada   Lovelace".into()));
        assert_eq!(read(" \"  Ada ; L \" ; note"), Ok("  Ada ; L ".into()));
        assert_eq!(read("Ada\\tL \\\"x\\\" \\\\"), Ok("Ada\tL \"x\" \\".into()));
        assert_eq!(read("Ada\tLovelace"), Ok("Ada Lovelace".into()));
        assert_eq!(read(""), Ok(String::new()));
        assert_eq!(read("\"open"), Err(Unsure));
        assert_eq!(read("Ada \\"), Err(Unsure));
        assert_eq!(read("Ada \\q"), Err(Unsure));
    }

    #[test]
    fn a_header_and_a_setting_may_share_a_line() {
        assert_eq!(
            last_user_name("[user] name = Ada\n"),
            Ok(Some("Ada".into()))
        );
        assert_eq!(
            last_user_name("\u{feff}[user]\r\nname=Ada\r\n"),
            Ok(Some("Ada".into()))
        );
    }

    #[test]
    fn subsections_are_other_sections() {
        assert_eq!(last_user_name("[user \"x\"]\nname = Ada\n"), Ok(None));
        assert_eq!(last_user_name("[user.x]\nname = Ada\n"), Ok(None));
    }

    #[test]
    fn what_this_reader_does_not_follow_is_unsure() {
        for text in [
            "[include]\npath = other\n[user]\nname = Ada\n",
            "[includeIf \"gitdir:~/w/\"]\npath = w\n",
            "[user]\nname\n",
            "[user]\nname = Ada \\\n Lovelace\n",
            "[extensions]\nworktreeConfig = true\n",
            "[user\nname = Ada\n",
            "[user]\n9name = Ada\n",
            "[ user]\nname = Ada\n",
            "[user x]\nname = Ada\n",
        ] {
            assert_eq!(last_user_name(text), Err(Unsure), "{text:?}");
        }
    }
}
