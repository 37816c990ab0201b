//! `knowledge.yaml`: which files of a repository its knowledge index holds, as `include` and
//! `exclude` globs relative to the file's directory (the repository root). Finding the root and
//! listing the files it names (honouring `.gitignore`, never entering `.git`) live here too.

use std::path::{Path, PathBuf};

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::Deserialize;

use super::KnowledgeError;

/// The file's name at a repository root.
pub(crate) const FILE_NAME: &str = "knowledge.yaml";

/// A starter file, for the hint of a repository without one.
pub(crate) const STARTER: &str = "include:\n  - \"**/*.md\"\n  - \"src/**\"\nexclude:\n  - \"target/**\"\n  - \"node_modules/**\"\n";

/// Files larger than this are not indexed (they are data, not knowledge); sync names them.
pub(crate) const MAX_FILE_BYTES: u64 = 1 << 20;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    include: Vec<String>,
    #[serde(default)]
    exclude: Vec<String>,
}

/// A parsed `knowledge.yaml`.
#[derive(Debug)]
pub(crate) struct Manifest {
    include: GlobSet,
    exclude: GlobSet,
    /// The `include` globs as written, for naming those that match nothing.
    globs: Vec<String>,
}

/// A file the manifest names, with what its metadata said when it was listed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Listed {
    pub path: String,
    pub size: u64,
    /// Modification time in nanoseconds since the epoch (0 when the system has none).
    pub mtime: i64,
}

/// The files a manifest names in a repository.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    /// Included, not excluded, not ignored by git, sorted by path.
    pub files: Vec<Listed>,
    /// `include` globs that match no file.
    pub unmatched: Vec<String>,
}

impl Manifest {
    /// Parses the text of a `knowledge.yaml` (`path` names it in errors).
    pub(crate) fn parse(text: &str, path: &Path) -> Result<Manifest, KnowledgeError> {
        let bad = |reason: String| KnowledgeError::BadManifest {
            path: path.to_owned(),
            reason,
        };
        let raw: Raw = serde_yaml::from_str(text).map_err(|e| bad(e.to_string()))?;
        if raw.include.is_empty() {
            return Err(bad(
                "`include` lists no glob, so nothing would be indexed".into()
            ));
        }
        let set = |globs: &[String], key: &str| -> Result<GlobSet, KnowledgeError> {
            let mut builder = GlobSetBuilder::new();
            for (i, glob) in globs.iter().enumerate() {
                let glob = Glob::new(glob.trim_start_matches("./"))
                    .map_err(|e| bad(format!("{key}[{i}]: {e}")))?;
                builder.add(glob);
            }
            builder.build().map_err(|e| bad(format!("{key}: {e}")))
        };
        Ok(Manifest {
            include: set(&raw.include, "include")?,
            exclude: set(&raw.exclude, "exclude")?,
            globs: raw.include,
        })
    }

    /// Reads `<repo>/knowledge.yaml`.
    pub(crate) fn load(repo: &Path) -> Result<Manifest, KnowledgeError> {
        let path = repo.join(FILE_NAME);
        let text = std::fs::read_to_string(&path).map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => KnowledgeError::NoManifest {
                dir: repo.to_owned(),
            },
            _ => KnowledgeError::Read {
                path: path.clone(),
                source,
            },
        })?;
        Manifest::parse(&text, &path)
    }

    /// Whether a path relative to the repository root is to be indexed.
    pub(crate) fn wants(&self, relative: &str) -> bool {
        self.include.is_match(relative) && !self.exclude.is_match(relative)
    }

    /// The repository's files to index, relative to `repo`, sorted: included, not excluded,
    /// not ignored by git; `.git` is never entered. Files of any size are listed (sync names
    /// those over [`MAX_FILE_BYTES`] as skipped). Including no file at all is an error.
    pub(crate) fn files(&self, repo: &Path) -> Result<Listing, KnowledgeError> {
        let mut listing = Listing::default();
        let mut used = vec![false; self.globs.len()];
        let walk = ignore::WalkBuilder::new(repo)
            .hidden(false)
            .require_git(false)
            .filter_entry(|entry| entry.file_name() != ".git")
            .build();
        for entry in walk {
            let entry = entry.map_err(|e| KnowledgeError::Walk {
                dir: repo.to_owned(),
                reason: e.to_string(),
            })?;
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            let Ok(relative) = entry.path().strip_prefix(repo) else {
                continue;
            };
            let Some(relative) = relative.to_str() else {
                continue;
            };
            if relative == FILE_NAME || !self.wants(relative) {
                continue;
            }
            for i in self.include.matches(relative) {
                used[i] = true;
            }
            let (size, mtime) = entry.metadata().map(|m| stat(&m)).unwrap_or((0, 0));
            listing.files.push(Listed {
                path: relative.to_owned(),
                size,
                mtime,
            });
        }
        listing.files.sort_by(|a, b| a.path.cmp(&b.path));
        listing.unmatched = self
            .globs
            .iter()
            .zip(used)
            .filter(|(_, used)| !used)
            .map(|(g, _)| g.clone())
            .collect();
        if listing.files.is_empty() {
            return Err(KnowledgeError::NothingIncluded {
                repo: repo.to_owned(),
                globs: self.globs.clone(),
            });
        }
        Ok(listing)
    }
}

/// A file's size and modification time (nanoseconds since the epoch).
pub(crate) fn stat(meta: &std::fs::Metadata) -> (u64, i64) {
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as i64);
    (meta.len(), mtime)
}

/// The repository that `start` is in: the nearest directory at or above it holding a
/// `knowledge.yaml`, looking no higher than a git work tree's root. The path is canonical, so
/// one repository has one key however it is named.
pub(crate) fn find_repo(start: &Path) -> Result<PathBuf, KnowledgeError> {
    let start = std::fs::canonicalize(start).map_err(|source| KnowledgeError::Read {
        path: start.to_owned(),
        source,
    })?;
    let mut dir = start.as_path();
    loop {
        if dir.join(FILE_NAME).is_file() {
            return Ok(dir.to_owned());
        }
        if dir.join(".git").exists() {
            return Err(KnowledgeError::NoManifest {
                dir: dir.to_owned(),
            });
        }
        match dir.parent() {
            Some(parent) => dir = parent,
            None => return Err(KnowledgeError::NoManifest { dir: start }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn includes_minus_excludes() {
        let m = Manifest::parse(
            "include: ['**/*.md', 'src/**']\nexclude: ['src/gen/**']\n",
            Path::new("knowledge.yaml"),
        )
        .unwrap();
        assert!(m.wants("README.md"));
        assert!(m.wants("docs/a/b.md"));
        assert!(m.wants("src/main.rs"));
        assert!(!m.wants("src/gen/x.rs"));
        assert!(!m.wants("Cargo.toml"));
    }

    #[test]
    fn bad_manifests_name_the_problem() {
        let err = |text: &str| {
            Manifest::parse(text, Path::new("k.yaml"))
                .unwrap_err()
                .to_string()
        };
        assert!(
            err("include: []\n").contains("no glob"),
            "{}",
            err("include: []\n")
        );
        assert!(err("include: ['a[']\n").contains("include[0]"));
        assert!(err("includes: ['*']\n").contains("unknown field"));
        assert!(err("exclude: ['*']\n").contains("include"));
    }

    #[test]
    fn the_starter_file_parses() {
        let m = Manifest::parse(STARTER, Path::new("k.yaml")).unwrap();
        assert!(m.wants("README.md") && !m.wants("target/x.md"));
    }
}
