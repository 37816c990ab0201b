//! The run sink: how a step's log, events and run state reach PostgreSQL
//! (`docs/several-machines.md#reference`) without slowing the agent down.
//!
//! Writers ([`RunSink::append`], [`RunSink::set_state`]) only put bytes into a pending batch
//! under a mutex and return. One background thread per store and process, on a connection of
//! its own, writes the batch in one statement ([`crate::pg::runs::write_batch`]) when it is
//! [`LINGER`] old or [`EAGER`] bytes big, or when a step ends and asks for it
//! ([`RunSink::flush`]): a chatty agent costs at most about ten round trips a second, however
//! many lines it prints.
//!
//! Architecture Invariant: a writer never waits for the database. While the database does not
//! answer, the batch grows up to [`PENDING_CAP`] bytes and what comes after is dropped and
//! counted; the next batch that reaches the database starts that file with a marker saying how
//! much was lost. The step's nodes and head never go this way: they are written by the step
//! itself, and the local run files keep everything. For the same reason the sink's commits do
//! not wait for the server's disk (`synchronous_commit = off` on its connection).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::cas::store::now_ms;
use crate::pg::PgConfig;
use crate::pg::runs::{self, RunAppend, RunFileKind, RunStateChange};

/// How long bytes wait for more before they are sent.
pub(crate) const LINGER: Duration = Duration::from_millis(100);

/// A batch this big is sent at once.
pub(crate) const EAGER: usize = 64 << 10;

/// Bytes kept for the database while it does not answer; more is dropped and counted.
pub(crate) const PENDING_CAP: usize = 4 << 20;

/// How long to wait before connecting again after a failure.
const RECONNECT: Duration = Duration::from_millis(500);

/// The run sink of one PostgreSQL store in this process.
#[derive(Debug)]
pub(crate) struct RunSink {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    config: PgConfig,
    pending: Mutex<Pending>,
    /// Wakes the writer thread: something to send, or a flush asked for.
    wake: Condvar,
    /// Wakes flushers: a batch was sent (or given up on).
    sent: Condvar,
}

#[derive(Debug, Default)]
struct Pending {
    /// Bytes per file, in the order the files were first written to.
    appends: Vec<RunAppend>,
    changes: HashMap<String, RunStateChange>,
    bytes: usize,
    /// Bytes dropped per file since the last batch that reached the database.
    dropped: HashMap<(String, RunFileKind), u64>,
    /// When the oldest pending bytes came.
    since: Option<Instant>,
    /// Writes made so far, and how many of them were sent (or given up on).
    made: u64,
    done: u64,
    /// A flusher waits for everything up to this write.
    flush_to: u64,
    started: bool,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.appends.is_empty() && self.changes.is_empty() && self.dropped.is_empty()
    }

    fn add(&mut self, append: RunAppend) {
        self.bytes += append.bytes.len();
        match slot(&mut self.appends, &append.thread, append.file) {
            Some(a) => a.bytes.extend_from_slice(&append.bytes),
            None => self.appends.push(append),
        }
    }

    /// Puts appends that were not made back in front of what came since.
    fn put_back(&mut self, append: RunAppend) {
        self.bytes += append.bytes.len();
        prepend(&mut self.appends, append);
    }

    fn change(&mut self, change: RunStateChange) {
        let entry = self
            .changes
            .entry(change.thread.clone())
            .or_insert_with(|| RunStateChange {
                thread: change.thread.clone(),
                ..Default::default()
            });
        if change.last.is_some() {
            entry.last = change.last;
        }
        if change.info.is_some() {
            entry.info = change.info;
        }
    }
}

fn sinks() -> &'static Mutex<HashMap<PathBuf, Arc<RunSink>>> {
    static SINKS: OnceLock<Mutex<HashMap<PathBuf, Arc<RunSink>>>> = OnceLock::new();
    SINKS.get_or_init(Default::default)
}

/// The run sink of `root` when it is a PostgreSQL store (`None` for a directory store).
pub(crate) fn of(root: &Path) -> Option<Arc<RunSink>> {
    let pg = super::pg(root).ok()??;
    let mut sinks = sinks().lock().unwrap_or_else(|p| p.into_inner());
    Some(
        sinks
            .entry(root.to_path_buf())
            .or_insert_with(|| Arc::new(RunSink::new(pg.config().clone())))
            .clone(),
    )
}

/// Sends what every sink of this process holds, waiting at most `timeout` for each (before the
/// process exits).
pub(crate) fn flush_all(timeout: Duration) {
    let all: Vec<Arc<RunSink>> = sinks()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .cloned()
        .collect();
    for sink in all {
        sink.flush(timeout);
    }
}

impl RunSink {
    /// A sink writing to the database of `config`; its thread starts with the first write.
    pub(crate) fn new(config: PgConfig) -> RunSink {
        RunSink {
            shared: Arc::new(Shared {
                config,
                pending: Mutex::new(Pending::default()),
                wake: Condvar::new(),
                sent: Condvar::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.shared
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `bytes` to append to `file` of `thread`. Never waits for the database.
    pub(crate) fn append(&self, thread: &str, file: RunFileKind, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let mut pending = self.lock();
        self.start(&mut pending);
        pending.made += 1;
        if pending.bytes + bytes.len() > PENDING_CAP {
            *pending
                .dropped
                .entry((thread.to_owned(), file))
                .or_default() += bytes.len() as u64;
            return;
        }
        self.note_first(&mut pending);
        pending.add(RunAppend {
            thread: thread.to_owned(),
            file,
            at_ms: now_ms(),
            bytes: bytes.to_vec(),
        });
        if pending.bytes >= EAGER {
            self.shared.wake.notify_one();
        }
    }

    /// Queues a change of `thread`'s run state (`None` fields stay as they are).
    pub(crate) fn set_state(&self, thread: &str, last: Option<&str>, info: Option<&str>) {
        let mut pending = self.lock();
        self.start(&mut pending);
        pending.made += 1;
        self.note_first(&mut pending);
        pending.change(RunStateChange {
            thread: thread.to_owned(),
            last: last.map(str::to_owned),
            info: info.map(str::to_owned),
        });
    }

    /// Waits until everything queued so far was sent (or given up on), at most `timeout`.
    /// Returns whether it was.
    pub(crate) fn flush(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut pending = self.lock();
        let target = pending.made;
        if pending.done >= target {
            return true;
        }
        pending.flush_to = pending.flush_to.max(target);
        self.shared.wake.notify_one();
        while pending.done < target {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            pending = match self.shared.sent.wait_timeout(pending, left) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        true
    }

    /// Starts the linger of a batch with its first bytes, waking the writer thread to time it.
    fn note_first(&self, pending: &mut Pending) {
        if pending.since.is_none() {
            pending.since = Some(Instant::now());
            self.shared.wake.notify_one();
        }
    }

    fn start(&self, pending: &mut Pending) {
        if pending.started {
            return;
        }
        pending.started = true;
        let shared = self.shared.clone();
        let spawned = std::thread::Builder::new()
            .name("uwf-run-sink".to_owned())
            .spawn(move || shared.run());
        if spawned.is_err() {
            // No thread, no database copy: the local files still have it all.
            pending.started = false;
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The writer thread: takes a batch when it is due and sends it.
    fn run(&self) {
        let mut connection: Option<(postgres::Client, postgres::Statement)> = None;
        loop {
            let Batch {
                appends,
                changes,
                lost,
                made,
            } = self.next_batch();
            let sending = with_markers(&appends, &lost);
            let state: Vec<RunStateChange> = changes.values().cloned().collect();
            if connection.as_ref().is_none_or(|(c, _)| c.is_closed()) {
                connection = self.connect();
            }
            let sent = match connection.as_mut() {
                Some((client, statement)) => {
                    runs::write_batch(client, statement, &sending, &state, now_ms())
                        .map_err(|_| connection = None)
                }
                None => Err(()),
            };
            let mut pending = self.lock();
            match sent {
                Ok(not_made) => {
                    for i in not_made.into_iter().rev() {
                        let a = &sending[i];
                        let key = (a.thread.clone(), a.file);
                        if let Some(&n) = lost.get(&key) {
                            // Its marker goes with the next try.
                            *pending.dropped.entry(key.clone()).or_default() += n;
                        }
                        if let Some(a) = appends
                            .iter()
                            .find(|b| b.thread == key.0 && b.file == key.1)
                        {
                            pending.put_back(a.clone());
                        }
                    }
                }
                Err(()) => {
                    let mut all = lost;
                    for a in &appends {
                        *all.entry((a.thread.clone(), a.file)).or_default() += a.bytes.len() as u64;
                    }
                    for (key, n) in all {
                        *pending.dropped.entry(key).or_default() += n;
                    }
                    for (_, change) in changes {
                        // A newer change of the same field wins over the lost one.
                        let newer = pending.changes.remove(&change.thread);
                        pending.change(change);
                        if let Some(newer) = newer {
                            pending.change(newer);
                        }
                    }
                }
            }
            pending.done = pending.done.max(made);
            self.sent.notify_all();
            let failed = connection.is_none();
            drop(pending);
            if failed {
                std::thread::sleep(RECONNECT);
            }
        }
    }

    /// Waits until a batch is due, then takes it.
    fn next_batch(&self) -> Batch {
        let mut pending = self.lock();
        loop {
            let due = match pending.since {
                _ if pending.flush_to > pending.done => true,
                _ if pending.bytes >= EAGER => true,
                Some(since) => since.elapsed() >= LINGER,
                None => !pending.dropped.is_empty(),
            };
            if due && !pending.is_empty() {
                break;
            }
            if pending.is_empty() && pending.flush_to > pending.done {
                // Nothing left to send: the flush is over.
                pending.done = pending.made;
                self.sent.notify_all();
            }
            let wait = match pending.since {
                Some(since) => LINGER.saturating_sub(since.elapsed()),
                None if !pending.dropped.is_empty() => RECONNECT,
                None => Duration::from_secs(3600),
            };
            pending = match self
                .wake
                .wait_timeout(pending, wait.max(Duration::from_millis(1)))
            {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        let batch = Batch {
            appends: std::mem::take(&mut pending.appends),
            changes: std::mem::take(&mut pending.changes),
            lost: std::mem::take(&mut pending.dropped),
            made: pending.made,
        };
        pending.bytes = 0;
        pending.since = None;
        batch
    }

    fn connect(&self) -> Option<(postgres::Client, postgres::Statement)> {
        let mut client = self.config.connect().ok()?;
        // Run text is for watching, and the local files keep it all: its commits need not
        // wait for the server's disk (a server crash may lose the last moments of a log,
        // never a node or a head, which the step writes on its own connection).
        client.batch_execute("set synchronous_commit = off").ok()?;
        let statement = runs::prepare_batch(&mut client).ok()?;
        Some((client, statement))
    }
}

/// What the writer thread sends at once.
struct Batch {
    appends: Vec<RunAppend>,
    changes: HashMap<String, RunStateChange>,
    /// Bytes dropped per file before this batch: each such file starts with a marker.
    lost: HashMap<(String, RunFileKind), u64>,
    /// The count of writes this batch ends at.
    made: u64,
}

/// The appends of a batch, each file that lost bytes starting with its marker.
fn with_markers(
    appends: &[RunAppend],
    lost: &HashMap<(String, RunFileKind), u64>,
) -> Vec<RunAppend> {
    let mut out = appends.to_vec();
    for ((thread, file), n) in lost {
        let marker = RunAppend {
            thread: thread.clone(),
            file: *file,
            at_ms: now_ms(),
            bytes: marker(thread, *file, *n),
        };
        prepend(&mut out, marker);
    }
    out
}

/// The pending bytes of `file` of `thread` in `appends`, if any.
fn slot<'a>(
    appends: &'a mut [RunAppend],
    thread: &str,
    file: RunFileKind,
) -> Option<&'a mut RunAppend> {
    appends
        .iter_mut()
        .find(|a| a.thread == thread && a.file == file)
}

/// Puts `append`'s bytes before those `appends` holds for the same file (or adds them).
fn prepend(appends: &mut Vec<RunAppend>, mut append: RunAppend) {
    match slot(appends, &append.thread, append.file) {
        Some(a) => {
            append.bytes.extend_from_slice(&a.bytes);
            a.bytes = append.bytes;
        }
        None => appends.insert(0, append),
    }
}

/// The line that stands where `lost` bytes of `file` could not reach the database.
fn marker(thread: &str, file: RunFileKind, lost: u64) -> Vec<u8> {
    match file {
        RunFileKind::Log => {
            format!("\n[… {lost} bytes of this log did not reach the database …]\n").into_bytes()
        }
        RunFileKind::Events => {
            let line = serde_json::json!({
                "at": now_ms(), "thread": thread, "event": "lost", "bytes": lost,
            });
            format!("{line}\n").into_bytes()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn append(thread: &str, file: RunFileKind, text: &str) -> RunAppend {
        RunAppend {
            thread: thread.into(),
            file,
            at_ms: 1,
            bytes: text.as_bytes().to_vec(),
        }
    }

    #[test]
    fn appends_to_one_file_merge_in_order_and_put_backs_go_first() {
        let mut p = Pending::default();
        p.add(append("T", RunFileKind::Log, "a"));
        p.add(append("U", RunFileKind::Log, "x"));
        p.add(append("T", RunFileKind::Log, "b"));
        p.add(append("T", RunFileKind::Events, "e"));
        assert_eq!(p.appends.len(), 3);
        assert_eq!(p.appends[0].bytes, b"ab");
        p.put_back(append("T", RunFileKind::Log, "0"));
        assert_eq!(p.appends[0].bytes, b"0ab");
        p.put_back(append("V", RunFileKind::Log, "v"));
        assert_eq!(p.appends[0].thread, "V");
        assert_eq!(p.bytes, 6);
    }

    #[test]
    fn state_changes_keep_the_newest_value_of_each_field() {
        let mut p = Pending::default();
        let change = |last: Option<&str>, info: Option<&str>| RunStateChange {
            thread: "T".into(),
            last: last.map(Into::into),
            info: info.map(Into::into),
        };
        p.change(change(None, Some("{\"pid\":1}")));
        p.change(change(Some("{\"ok\":true}"), None));
        p.change(change(None, Some("{}")));
        let c = &p.changes["T"];
        assert_eq!(c.last.as_deref(), Some("{\"ok\":true}"));
        assert_eq!(c.info.as_deref(), Some("{}"));
    }

    #[test]
    fn markers_say_how_much_was_lost() {
        let log = String::from_utf8(marker("T", RunFileKind::Log, 42)).unwrap();
        assert!(log.contains("42 bytes"), "{log}");
        let event = String::from_utf8(marker("T", RunFileKind::Events, 7)).unwrap();
        let v: serde_json::Value = serde_json::from_str(event.trim()).unwrap();
        assert_eq!(v["event"], "lost");
        assert_eq!(v["bytes"], 7);
    }

    #[test]
    fn a_sink_whose_database_is_gone_never_blocks_a_writer_and_a_flush_gives_up() {
        // Port 9 (discard) on loopback: nothing listens there.
        let config = PgConfig::parse("postgres://uwf@127.0.0.1:9/uwf").unwrap();
        let sink = RunSink::new(config);
        let chunk = vec![b'x'; 1 << 20];
        let t = Instant::now();
        for _ in 0..8 {
            sink.append("T", RunFileKind::Log, &chunk);
        }
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        assert!(sink.lock().bytes <= PENDING_CAP);
        sink.flush(Duration::from_secs(5));
        let pending = sink.lock();
        let lost: u64 = pending.dropped.values().sum();
        assert!(lost >= 4 << 20, "{lost}");
    }
}
