//! Personal dashboard tokens (`uwf serve token`, `docs/dashboard.md#a-token-per-person`): one
//! per person, so that every write through the dashboard names who made it and one person's
//! access can be taken back alone. They are kept in `<root>/serve.people` (mode 0600) as lines
//! `name TAB sha256(token) TAB created-ms`: the file names people but holds no token, so reading
//! it lets no one in. It is read on every request, so a token added or revoked takes effect at
//! once, on a running server too.
//!
//! Once the file names anyone, the shared token (`serve.token`) no longer lets anyone in: a team
//! that gives out personal tokens wants every write to name a person.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::advice::Advice;
use crate::engine::thread::author;
use crate::file_util::{AtomicWrite, FileError};

/// The file of `root` that lists the people with a token.
pub(crate) fn path(root: &Path) -> PathBuf {
    root.join("serve.people")
}

/// One person with a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Person {
    pub name: String,
    /// When the token was made, in ms since the epoch.
    pub created_at: u64,
    digest: String,
}

/// Errors managing the people's tokens.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PeopleError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} line {line} is not `name<TAB>digest<TAB>created`", path.display())]
    Malformed { path: PathBuf, line: usize },
    #[error(transparent)]
    Write(#[from] FileError),
    #[error("cannot make a token: {0}")]
    Random(std::io::Error),
    #[error(transparent)]
    Name(#[from] author::BadName),
    #[error("a name is needed")]
    NoName,
    #[error("{0} has no token")]
    Unknown(String),
}

impl Advice for PeopleError {
    fn hints(&self) -> Vec<String> {
        match self {
            PeopleError::Malformed { path, .. } => vec![format!(
                "fix or remove that line of {} (`uwf serve token revoke NAME` rewrites the file)",
                path.display()
            )],
            PeopleError::Unknown(_) => {
                vec!["`uwf serve token list` names the people who have one".to_owned()]
            }
            PeopleError::Name(e) => e.hints(),
            _ => Vec::new(),
        }
    }
}

/// The people of a store and their tokens' digests, as read from its file.
#[derive(Debug, Default)]
pub(crate) struct Roster {
    pub people: Vec<Person>,
}

impl Roster {
    /// The roster of `root`; empty when the file does not exist.
    pub(crate) fn read(root: &Path) -> Result<Roster, PeopleError> {
        let path = path(root);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Roster::default()),
            Err(source) => return Err(PeopleError::Read { path, source }),
        };
        let mut people = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let mut fields = line.split('\t');
            let (Some(name), Some(digest), Some(created), None) =
                (fields.next(), fields.next(), fields.next(), fields.next())
            else {
                return Err(PeopleError::Malformed { path, line: i + 1 });
            };
            let created_at = created.parse().map_err(|_| PeopleError::Malformed {
                path: path.clone(),
                line: i + 1,
            })?;
            people.push(Person {
                name: name.to_owned(),
                created_at,
                digest: digest.to_owned(),
            });
        }
        Ok(Roster { people })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.people.is_empty()
    }

    /// The person whose token `token` is.
    pub(crate) fn who(&self, token: &str) -> Option<&str> {
        let digest = digest_of(token);
        self.people
            .iter()
            .find(|p| same(&p.digest, &digest))
            .map(|p| p.name.as_str())
    }

    fn write(&self, root: &Path) -> Result<(), PeopleError> {
        let text: String = self
            .people
            .iter()
            .map(|p| format!("{}\t{}\t{}\n", p.name, p.digest, p.created_at))
            .collect();
        std::fs::create_dir_all(root).map_err(|source| PeopleError::Read {
            path: root.to_path_buf(),
            source,
        })?;
        AtomicWrite::new(&path(root))
            .mode(0o600)
            .replace(text.as_bytes())?;
        Ok(())
    }
}

/// Makes a token for `name` (replacing the one they had) and returns it: the only time it is
/// seen.
pub(crate) fn add(root: &Path, name: &str) -> Result<String, PeopleError> {
    let name = author::checked(Some(name))?.ok_or(PeopleError::NoName)?;
    let mut roster = Roster::read(root)?;
    let token = random_token().map_err(PeopleError::Random)?;
    roster.people.retain(|p| p.name != name);
    roster.people.push(Person {
        name,
        created_at: now_ms(),
        digest: digest_of(&token),
    });
    roster.write(root)?;
    Ok(token)
}

/// Takes `name`'s token back.
pub(crate) fn revoke(root: &Path, name: &str) -> Result<(), PeopleError> {
    let mut roster = Roster::read(root)?;
    let before = roster.people.len();
    roster.people.retain(|p| p.name != name.trim());
    if roster.people.len() == before {
        return Err(PeopleError::Unknown(name.trim().to_owned()));
    }
    roster.write(root)
}

/// 24 random bytes as 48 hex digits.
pub(crate) fn random_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn digest_of(token: &str) -> String {
    Sha256::digest(token.trim().as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Compares two strings in time independent of where they differ.
pub(crate) fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_its_person_until_revoked_and_is_never_stored() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        assert!(Roster::read(dir.path()).unwrap().is_empty());
        let ann = add(dir.path(), " Ann Lee ").unwrap();
        let bob = add(dir.path(), "bob").unwrap();
        let roster = Roster::read(dir.path()).unwrap();
        assert_eq!(roster.who(&ann), Some("Ann Lee"));
        assert_eq!(roster.who(&bob), Some("bob"));
        assert_eq!(roster.who("nope"), None);
        let text = std::fs::read_to_string(path(dir.path())).unwrap();
        assert!(!text.contains(&ann) && !text.contains(&bob), "{text}");
        let mode = std::fs::metadata(path(dir.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);

        // A new token for Ann replaces her old one.
        let ann2 = add(dir.path(), "Ann Lee").unwrap();
        let roster = Roster::read(dir.path()).unwrap();
        assert_eq!(roster.people.len(), 2);
        assert_eq!(roster.who(&ann), None);
        assert_eq!(roster.who(&ann2), Some("Ann Lee"));

        revoke(dir.path(), "bob").unwrap();
        assert_eq!(Roster::read(dir.path()).unwrap().who(&bob), None);
        assert!(matches!(
            revoke(dir.path(), "bob"),
            Err(PeopleError::Unknown(_))
        ));
    }

    #[test]
    fn names_are_checked_as_by_is() {
        let dir = tempfile::tempdir().unwrap();
        assert!(add(dir.path(), "a\tb").is_err());
        assert!(add(dir.path(), "   ").is_err());
        assert!(!path(dir.path()).exists());
    }

    #[test]
    fn a_damaged_file_is_an_error_not_an_open_door() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(path(dir.path()), "ann\n").unwrap();
        assert!(matches!(
            Roster::read(dir.path()),
            Err(PeopleError::Malformed { line: 1, .. })
        ));
    }
}
