//! The directory store's thread index: rows in `index.db` ([`index_db`]), the run queue as one
//! empty file per queued thread under `queue/`, the registry in `registry.yaml`, nodes as files
//! under `cas/objects`.

use std::path::{Path, PathBuf};

use std::collections::HashMap;

use serde_json::Value;

use super::{
    ExportError, GcError, MaintenanceError, NodeCheck, Nodes, Pruned, REBASED, State, ThreadIndex,
    ThreadIndexError, ThreadRecords,
};
use crate::cas::gc::{GcOptions, GcReport};
use crate::cas::{Hash, Node, Store, builtin};
use crate::engine::storage::index_db::{self, Scan};
use crate::engine::storage::index_files::{self, IndexError, Registry, Threads};
use crate::engine::storage::seam::nodes::DirNodes;
use crate::engine::storage::seam::nodes::upkeep::{check_nodes, collect_garbage};
use crate::pg::{
    ActiveThread, ArchivedThread, Entry, Exported, IndexRow, Learned, NewThread, Occupancy,
    RowFacts, SpentChange, Successor,
};

/// `index.db` and the files under one root.
pub(super) struct Dir {
    root: PathBuf,
}

impl Dir {
    pub(super) fn new(root: &Path) -> Dir {
        Dir {
            root: root.to_path_buf(),
        }
    }

    /// Where runnable threads are marked: one empty file per queued thread.
    fn queue_dir(&self) -> PathBuf {
        self.root.join("queue")
    }

    /// Why a write to `id` changed nothing, from its row as it is now.
    fn refused(&self, id: &str, expected: Option<Hash>) -> ThreadIndexError {
        match self.state(id) {
            Err(e) => e,
            Ok(State::Archived(a)) => ThreadIndexError::Archived {
                id: id.to_owned(),
                status: a.status,
                onto: None,
            },
            Ok(State::Active { head }) => match expected {
                Some(expected) => ThreadIndexError::HeadMoved {
                    id: id.to_owned(),
                    expected,
                    actual: head,
                },
                None => ThreadIndexError::Unknown(id.to_owned()),
            },
        }
    }
}

impl ThreadIndex for Dir {
    fn state(&self, id: &str) -> Result<State, ThreadIndexError> {
        match index_db::get(&self.root, id)? {
            Some(row) if row.is_active() => Ok(State::Active { head: row.head }),
            Some(row) => Ok(State::Archived(row.archived())),
            None => Err(ThreadIndexError::Unknown(id.to_owned())),
        }
    }

    fn with_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<String>, ThreadIndexError> {
        Ok(index_db::with_prefix(&self.root, prefix, limit)?)
    }

    fn active_at(&self, head: Hash) -> Result<Vec<String>, ThreadIndexError> {
        Ok(index_db::active_at(&self.root, head)?)
    }

    fn add(&self, row: &NewThread<'_>) -> Result<(), ThreadIndexError> {
        index_db::insert(&self.root, row)?;
        if row.queued {
            self.queue(row.id)?;
        }
        Ok(())
    }

    fn spent_at(&self, id: &str, head: Hash) -> Result<Option<String>, IndexError> {
        index_db::spent_at(&self.root, id, head)
    }

    fn note_spent(&self, id: &str, head: Hash, spent: &str) {
        index_db::note_spent(&self.root, id, head, spent)
    }

    fn compare_and_set(
        &self,
        id: &str,
        expected: Hash,
        new: Hash,
        moved: (Option<&str>, SpentChange<'_>),
    ) -> Result<(), ThreadIndexError> {
        match index_db::compare_and_set(&self.root, id, expected, new, moved)? {
            index_db::Cas::Moved => Ok(()),
            index_db::Cas::Refused(row) if row.is_active() => Err(ThreadIndexError::HeadMoved {
                id: id.to_owned(),
                expected,
                actual: row.head,
            }),
            index_db::Cas::Refused(row) => Err(ThreadIndexError::Archived {
                id: id.to_owned(),
                status: row.status,
                onto: None,
            }),
            index_db::Cas::Unknown => Err(ThreadIndexError::Unknown(id.to_owned())),
        }
    }

    fn archive(&self, id: &str, status: &str) -> Result<ArchivedThread, ThreadIndexError> {
        match index_db::archive(&self.root, id, status)? {
            Some(archived) => {
                let _ = std::fs::remove_file(self.queue_dir().join(id));
                Ok(archived)
            }
            None => Err(self.refused(id, None)),
        }
    }

    fn rebase(
        &self,
        id: &str,
        head: Hash,
        new: &Successor<'_>,
    ) -> Result<Option<ArchivedThread>, ThreadIndexError> {
        let done = index_db::rebase(&self.root, id, head, new)?;
        if done.is_some() {
            let _ = std::fs::remove_file(self.queue_dir().join(id));
        }
        Ok(done)
    }

    fn successor(&self, id: &str) -> Result<Option<String>, ThreadIndexError> {
        Ok(index_db::successor(&self.root, id)?)
    }

    fn parent(&self, id: &str) -> Option<String> {
        index_db::get(&self.root, id).ok()??.parent
    }

    fn queue(&self, id: &str) -> Result<(), ThreadIndexError> {
        if let State::Archived(a) = self.state(id)? {
            return Err(ThreadIndexError::Archived {
                id: id.to_owned(),
                onto: (a.status == REBASED)
                    .then(|| self.successor(id).ok().flatten())
                    .flatten(),
                status: a.status,
            });
        }
        let path = self.queue_dir().join(id);
        let mut options = std::fs::OpenOptions::new();
        options.create(true).truncate(false).write(true);
        crate::file_util::open_in_dir(&options, &path)
            .map(drop)
            .map_err(|source| IndexError::Io { path, source }.into())
    }

    fn dequeue(&self, id: &str) -> Result<(), ThreadIndexError> {
        let path = self.queue_dir().join(id);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(IndexError::Io { path, source }.into()),
        }
    }

    fn queued(&self) -> Result<Vec<String>, ThreadIndexError> {
        let dir = self.queue_dir();
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(IndexError::Io { path: dir, source }.into()),
        };
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let Some(id) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if !index_db::get(&self.root, &id)?.is_some_and(|row| row.is_active()) {
                let _ = std::fs::remove_file(entry.path());
                continue;
            }
            let since = entry
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(std::time::SystemTime::UNIX_EPOCH);
            found.push((since, id));
        }
        found.sort();
        Ok(found.into_iter().map(|(_, id)| id).collect())
    }

    fn active(&self) -> Result<Threads, IndexError> {
        index_db::active(&self.root)
    }

    fn archived(&self) -> Result<Vec<ArchivedThread>, IndexError> {
        index_db::archived(&self.root)
    }

    fn entries(&self) -> Result<Vec<Entry>, IndexError> {
        index_db::entries(&self.root)
    }

    fn thread_workflows(&self) -> Result<Vec<Hash>, IndexError> {
        index_db::workflows(&self.root)
    }

    fn scan(&self, scan: &Scan, each: &mut dyn FnMut(IndexRow) -> bool) -> Result<(), IndexError> {
        index_db::scan(&self.root, scan, each)
    }

    fn note_derived(&self, learned: &[Learned]) {
        index_db::note_derived(&self.root, learned)
    }

    fn unsearchable(&self, limit: usize) -> Result<Vec<(String, Hash)>, IndexError> {
        index_db::unsearchable(&self.root, limit)
    }

    fn note_prompts(&self, prompts: &[(String, String)]) -> Result<(), IndexError> {
        index_db::note_prompts(&self.root, prompts)
    }

    fn registry(&self) -> Result<Registry, IndexError> {
        index_files::read_registry_file(&self.root)
    }

    fn update_registry(
        &self,
        change: &mut dyn FnMut(&mut Registry) -> bool,
    ) -> Result<(), IndexError> {
        /// `change` said no: nothing is written, and that is no error.
        enum Stop {
            Refused,
            Index(IndexError),
        }
        impl From<IndexError> for Stop {
            fn from(e: IndexError) -> Stop {
                Stop::Index(e)
            }
        }
        let changed = index_files::update_yaml(&self.root, "registry.yaml", |registry| {
            if change(registry) {
                Ok(())
            } else {
                Err(Stop::Refused)
            }
        });
        match changed {
            Ok(()) | Err(Stop::Refused) => Ok(()),
            Err(Stop::Index(e)) => Err(e),
        }
    }

    fn prune_logs(&self, cut: u64, dry_run: bool) -> Result<Pruned, IndexError> {
        let mut pruned = Pruned::default();
        for archived in index_db::archived(&self.root)? {
            if archived.completed_ms >= cut {
                continue;
            }
            // The thread's log and event feed (`RunFiles::log` and `RunFiles::events`).
            let runs = self.root.join("runs");
            let mut any = false;
            for suffix in ["log", "events"] {
                let path = runs.join(format!("{}.{suffix}", archived.thread));
                let Ok(meta) = std::fs::metadata(&path) else {
                    continue;
                };
                if dry_run || std::fs::remove_file(&path).is_ok() {
                    pruned.bytes += meta.len();
                    any = true;
                }
            }
            pruned.threads += u64::from(any);
        }
        Ok(pruned)
    }

    fn collect_garbage(&self, store: &Store, options: &GcOptions) -> Result<GcReport, GcError> {
        let roots =
            || crate::engine::storage::threads::gc_roots(&self.root).map_err(GcError::Roots);
        collect_garbage(store, &DirNodes(store), roots, options)
    }

    fn check_nodes<'a>(&'a self, store: &'a Store) -> Result<NodeCheck<'a>, MaintenanceError> {
        check_nodes(store, Box::new(DirNodes(store)))
    }

    fn occupancy(&self) -> Result<Occupancy, IndexError> {
        let (threads, archived) = index_db::counts(&self.root)?;
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        Ok(Occupancy {
            threads: count(threads),
            archived: count(archived),
            workflows: count(index_files::read_registry_file(&self.root)?.len() as u64),
        })
    }

    /// Each active thread's workflow and start time come from its start node, its parent from
    /// the sub-workflow link or the fork record.
    fn export_threads(
        &self,
        records: &dyn ThreadRecords,
        nodes: &dyn Nodes,
    ) -> Result<Exported, ExportError> {
        let root = &self.root;
        let forked_from: HashMap<String, String> = records
            .forks()?
            .into_iter()
            .filter_map(|f| f.from.map(|from| (f.thread, from)))
            .collect();
        let parent = |id: &str| {
            records
                .parent(id)
                .map(|link| link.thread)
                .or_else(|| forked_from.get(id).cloned())
        };
        let mut active = Vec::new();
        for (id, head) in crate::engine::storage::threads::read_threads(root)? {
            let (workflow, started) =
                start_of(nodes, head).map_err(|reason| ExportError::BadThread {
                    thread: id.clone(),
                    reason,
                })?;
            active.push(ActiveThread {
                parent: parent(&id),
                id,
                workflow,
                head,
                started_ms: Some(started),
                // A copy does not carry the run queue.
                queued: false,
            });
        }
        let mut archived = crate::engine::storage::threads::read_history(root)?;
        for a in &mut archived {
            a.parent = parent(&a.thread);
        }
        // What the rows know beyond heads (an archived thread's next role follows from its
        // status, so only active threads' is kept).
        let mut known = HashMap::new();
        let all = Scan {
            all: true,
            ..Default::default()
        };
        index_db::scan(root, &all, |row| {
            if let Some(steps) = row.steps {
                let next = row.next.filter(|_| row.status == "active");
                let spent = row.spent;
                known.insert(row.id, RowFacts { steps, next, spent });
            }
            true
        })?;
        Ok(Exported {
            active,
            archived,
            known,
        })
    }

    fn import_threads(&self, threads: &Exported) -> Result<Result<(), Occupancy>, IndexError> {
        let known = &threads.known;
        let rows: Vec<index_db::Bulk> = threads
            .archived
            .iter()
            .map(|a| index_db::Bulk {
                id: a.thread.clone(),
                workflow: a.workflow,
                head: a.head,
                parent: a.parent.clone(),
                archived: Some((a.status.clone(), a.completed_ms)),
                steps: known.get(&a.thread).map(|f| f.steps),
                next: None,
                // Filled by the first search (`index_db::search`).
                prompt: None,
                spent: known.get(&a.thread).and_then(|f| f.spent.clone()),
            })
            .chain(threads.active.iter().map(|t| index_db::Bulk {
                id: t.id.clone(),
                workflow: t.workflow,
                head: t.head,
                parent: t.parent.clone(),
                archived: None,
                steps: known.get(&t.id).map(|f| f.steps),
                next: known.get(&t.id).and_then(|f| f.next.clone()),
                prompt: None,
                spent: known.get(&t.id).and_then(|f| f.spent.clone()),
            }))
            .collect();
        Ok(
            index_db::insert_all(&self.root, &rows)?.map_err(|(active, archived)| Occupancy {
                threads: i64::try_from(active).unwrap_or(i64::MAX),
                archived: i64::try_from(archived).unwrap_or(i64::MAX),
                workflows: 0,
            }),
        )
    }

    fn shared(&self) -> bool {
        false
    }
}

/// The workflow and start time of the thread at `head` (a step or its start node), from its
/// start node; a reason in words when `head` is not one of those.
fn start_of(nodes: &dyn Nodes, head: Hash) -> Result<(Hash, u64), String> {
    let get = |hash: Hash| nodes.read(hash).map_err(|e| e.to_string());
    let mut node = get(head)?;
    if node.type_hash == builtin::hash_of("step") {
        let start = ref_field(&node, "start")?;
        node = get(start)?;
    }
    if !builtin::is_start(node.type_hash) {
        return Err(format!(
            "{} is a {} node, not a step or start node",
            node.hash,
            builtin::name_of(node.type_hash).unwrap_or("data")
        ));
    }
    let workflow = ref_field(&node, "workflow")?;
    Ok((workflow, node.timestamp))
}

/// A `cas_ref` field of a node's payload.
fn ref_field(node: &Node, field: &str) -> Result<Hash, String> {
    node.payload
        .get(field)
        .and_then(Value::as_str)
        .and_then(|t| Hash::parse(t).ok())
        .ok_or_else(|| format!("node {} has no valid `{field}` reference", node.hash))
}
