//! A thread's history: the chain of step nodes from a head back to the start node, and the
//! moderator context built from it (`docs/workflows.md#the-format`).
//!
//! Architecture Invariant: a chain is a pure function of its head hash (nodes are immutable), so
//! it is cached under `<root>/cache/chains/<head>.json` and never goes stale. Loading a head
//! whose parent is cached costs one parent read plus one node pair, so a step's cost does not
//! grow with the number of nodes walked. A damaged cache file is ignored and rebuilt.
//!
//! The cache file is text: a header line (JSON: format version, start and its file's length,
//! head, length, position, visits per role), then one line per step, `<hash> <output hash>
//! <timestamp> <step>,<output>,<detail> <context item JSON>` where the middle field holds the
//! lengths of those three node files. A step reads only the header ([`History`]); the moderator
//! context is the items joined, and the next head's file is this one with a new header and one
//! more line, so neither parses the steps.
//!
//! Architecture Invariant: a reader that renders steps from the cache ([`check_entry`],
//! [`check_start`]) first checks that each node it stands for is still there with the length
//! it had (a `stat` each), and names the one that is not; re-hashing every node is `uwf cas
//! fsck`'s job.

use crate::advice::Advice;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::cas::{Hash, Node, Store, StoreError, builtin};

mod history;
pub(crate) use history::History;
use history::*;

/// Errors reading a chain.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{hash} is a {kind} node, not a step or start node")]
    NotAStepOrStart { hash: Hash, kind: String },
    #[error("node {hash} is malformed: {reason}")]
    Malformed { hash: Hash, reason: String },
    /// A node the cached history stands for is gone or not the file it was.
    #[error("{kind} node {hash}{} is {reason}", step.map(|s| format!(" (reached from step {s})")).unwrap_or_default())]
    Damaged {
        kind: &'static str,
        hash: Hash,
        step: Option<Hash>,
        reason: String,
    },
}

impl Advice for ChainError {
    fn hints(&self) -> Vec<String> {
        match self {
            ChainError::Store(e) => e.hints(),
            ChainError::Damaged { .. } => vec![
                "`uwf cas fsck` lists the damage; restore the node from a backup, or fork the thread from an intact step (`uwf thread fork HASH`)".into(),
            ],
            _ => Vec::new(),
        }
    }
    fn is_busy(&self) -> bool {
        match self {
            ChainError::Store(e) => e.is_busy(),
            _ => false,
        }
    }
}

/// The payload of a `start` node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Start {
    pub workflow: Hash,
    pub prompt: String,
    /// The parent thread's head, when a sub-workflow started this thread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<Hash>,
    /// Who started the thread (a `start-v2` node; none in a `start` node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

impl Start {
    /// The built-in schema of this start's node: `start-v2` when it names who started the
    /// thread, else `start` (so a start without a name hashes as it always did).
    pub(crate) fn type_name(&self) -> &'static str {
        if self.by.is_some() {
            "start-v2"
        } else {
            "start"
        }
    }
}

/// The payload of a `step` node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StepNode {
    pub start: Hash,
    pub prev: Option<Hash>,
    pub role: String,
    pub output: Hash,
    pub detail: Hash,
    pub agent: String,
}

/// One step of a chain with its output.
///
/// The output is kept as raw JSON text: most readers of a chain need only roles and hashes, and
/// the moderator context is assembled from the raw texts without building values.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    pub hash: Hash,
    pub role: String,
    pub agent: String,
    pub output_hash: Hash,
    raw_output: Box<RawValue>,
    /// The failure the step records instead of an output (its output node is a `failure`
    /// node), as JSON text `{"message", "attempts"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    raw_error: Option<Box<RawValue>>,
    pub detail: Hash,
    pub timestamp: u64,
    /// The lengths of the step's node files when the entry was made.
    #[serde(default)]
    pub sizes: Sizes,
}

/// The lengths of a step's step, output and detail node files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sizes {
    pub step: u64,
    pub output: u64,
    pub detail: u64,
}

impl Entry {
    /// The step's structured output.
    pub(crate) fn output(&self) -> Value {
        serde_json::from_str(self.raw_output.get()).unwrap_or(Value::Null)
    }

    /// The output as compact JSON text.
    pub(crate) fn output_json(&self) -> &str {
        self.raw_output.get()
    }

    /// The failure this step records instead of an output (`{"message", "attempts"}`): its
    /// role's agent failed every attempt and the role's `onFailure` moved the thread on.
    pub(crate) fn error(&self) -> Option<Value> {
        let raw = self.raw_error.as_ref()?;
        serde_json::from_str(raw.get()).ok()
    }

    /// The failure this step records, in one line for people: `failed (3 attempts): <the
    /// error's first line>`.
    pub(crate) fn failure_line(&self) -> Option<String> {
        let error = self.error()?;
        let attempts = error["attempts"].as_u64().unwrap_or(1);
        let message = error["message"].as_str().unwrap_or_default();
        let first = message.lines().find(|l| !l.trim().is_empty());
        let plural = if attempts == 1 { "" } else { "s" };
        Some(format!(
            "failed ({attempts} attempt{plural}): {}",
            first.unwrap_or_default().trim_end()
        ))
    }

    /// This step as an item of the moderator context's `steps`, as JSON text.
    pub(crate) fn context_json(&self) -> String {
        let mut out = String::with_capacity(self.output_json().len() + 80);
        self.write_context(&mut out);
        out
    }

    fn write_context(&self, out: &mut String) {
        let text = |s: &str| serde_json::to_string(s).expect("strings serialize");
        out.push_str("{\"role\":");
        out.push_str(&text(&self.role));
        out.push_str(",\"output\":");
        out.push_str(self.output_json());
        out.push_str(",\"detail\":\"");
        out.push_str(&self.detail.to_string());
        out.push_str("\",\"agent\":");
        out.push_str(&text(&self.agent));
        if let Some(error) = &self.raw_error {
            out.push_str(",\"error\":");
            out.push_str(error.get());
        }
        out.push('}');
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash
    }
}

fn raw(value: &Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(value).expect("JSON values serialize")
}

/// A thread's history, oldest step first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Chain {
    pub start_hash: Hash,
    pub start: Start,
    pub start_timestamp: u64,
    /// The length of the start node's file.
    #[serde(default)]
    pub start_size: u64,
    pub steps: Vec<Entry>,
}

impl Chain {
    /// The head: the last step, or the start node.
    #[cfg(test)]
    pub(crate) fn head(&self) -> Hash {
        self.steps.last().map(|s| s.hash).unwrap_or(self.start_hash)
    }

    /// The moderator context: `{"start": {"workflow", "prompt"}, "steps": [{"role", "output",
    /// "detail", "agent"}]}`.
    pub(crate) fn context(&self) -> Value {
        serde_json::from_str(&self.context_json()).expect("the context text is valid JSON")
    }

    /// The moderator context as JSON text, assembled from the raw outputs.
    pub(crate) fn context_json(&self) -> String {
        let mut out = String::with_capacity(
            128 + self
                .steps
                .iter()
                .map(|s| s.output_json().len() + 80)
                .sum::<usize>(),
        );
        write_context_start(&mut out, &self.start);
        for (i, s) in self.steps.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            s.write_context(&mut out);
        }
        out.push_str("]}");
        out
    }

    /// The moderator's position: the last step's role, or `$START`.
    pub(crate) fn position(&self) -> &str {
        self.steps
            .last()
            .map(|s| s.role.as_str())
            .unwrap_or(crate::engine::START)
    }
}

/// The failure that step `hash` records (a role's `onFailure`): its role, and its `{"message",
/// "attempts"}`; `None` for a start node or a step with an output of its role.
pub(crate) fn recorded_failure(
    store: &Store,
    hash: Hash,
) -> Result<Option<(String, Value)>, ChainError> {
    let node = store.get(hash)?;
    if node.type_hash != builtin::hash_of("step") {
        return Ok(None);
    }
    let step = read_step(&node)?;
    let output = store.get(step.output)?;
    let failed = output.type_hash == builtin::hash_of("failure");
    Ok(failed.then_some((step.role, output.payload)))
}

/// Reads a start node.
pub(crate) fn read_start(node: &Node) -> Result<Start, ChainError> {
    serde_json::from_value(node.payload.clone()).map_err(|e| ChainError::Malformed {
        hash: node.hash,
        reason: e.to_string(),
    })
}

/// The start of the thread whose head is `head` (a start or a step node), in one or two node
/// reads, without walking the chain.
pub(crate) fn start_of(store: &Store, head: Hash) -> Result<Start, ChainError> {
    let node = store.get(head)?;
    if builtin::is_start(node.type_hash) {
        return read_start(&node);
    }
    let step = read_step(&node)?;
    read_start(&store.get(step.start)?)
}

/// Reads a step node.
pub(crate) fn read_step(node: &Node) -> Result<StepNode, ChainError> {
    serde_json::from_value(node.payload.clone()).map_err(|e| ChainError::Malformed {
        hash: node.hash,
        reason: e.to_string(),
    })
}

/// `<root>/cache/<kind>/<name>`: a file of one of the derived caches (`chains`, `decisions`).
pub(crate) fn cache_file(store: &Store, kind: &str, name: &str) -> PathBuf {
    cache_file_in(store.root(), kind, name)
}

/// [`cache_file`] under the storage root `root`.
pub(crate) fn cache_file_in(root: &Path, kind: &str, name: &str) -> PathBuf {
    root.join("cache").join(kind).join(name)
}

fn cache_path(store: &Store, head: Hash) -> PathBuf {
    cache_file(store, "chains", &format!("{head}.json"))
}

/// The file whose inode a thread's next step reuses for its chain cache.
fn spare_path(store: &Store, thread: &str) -> PathBuf {
    cache_file(store, "chains", &format!("{thread}.spare"))
}

/// Removes `thread`'s spare cache file (an archived thread takes no more steps).
pub(crate) fn drop_spare(store: &Store, thread: &str) {
    let _ = std::fs::remove_file(spare_path(store, thread));
}

fn read_history(store: &Store, head: Hash) -> Option<History> {
    let text = std::fs::read_to_string(cache_path(store, head)).ok()?;
    let history = History::parse(text)?;
    (history.head() == head).then_some(history)
}

fn read_cache(store: &Store, head: Hash) -> Option<Chain> {
    read_history(store, head)?.to_chain()
}

fn write_history(store: &Store, history: &History) {
    // The cache is an optimisation: failing to write it only costs time later.
    let path = cache_path(store, history.head());
    if let Some(dir) = path.parent()
        && std::fs::create_dir_all(dir).is_ok()
    {
        let _ = crate::file_util::AtomicWrite::new(&path)
            .temp_in(&store.root().join("cas").join("tmp"))
            .without_fsync()
            .replace(history.to_text().as_bytes());
    }
}

/// The history ending at `head`, from the cache (built and cached first if need be).
///
/// The cache never stands in for a head that is gone: a missing head node is an error even
/// when its history is cached (a stat; a step re-hashes what it builds on itself).
pub(crate) fn history(store: &Store, head: Hash) -> Result<History, ChainError> {
    if !store.has(head) {
        return Err(StoreError::NotFound(head).into());
    }
    if let Some(history) = read_history(store, head) {
        return Ok(history);
    }
    let history = History::of(&build(store, head)?);
    write_history(store, &history);
    Ok(history)
}

/// [`extend_history`] without writing the cache file: a session keeps the history in memory
/// and saves only the last one ([`save_history`]) when it lets go of the thread.
pub(crate) fn extend_in_memory(
    store: &Store,
    parent: &History,
    step: Hash,
) -> Result<(History, Entry), ChainError> {
    // Read moments ago by the step's verification, or written by this process.
    let (node, size) = store.get_written_sized(step)?;
    let payload = read_step(&node)?;
    let entry = entry_written(store, &node, size, payload)?;
    Ok((parent.with(&entry), entry))
}

/// Writes the cache file of `history`, the history of `thread`'s head, and retires the cache
/// file of `retired`, the thread's earlier head, reusing its inode through the thread's spare.
/// Best effort, like every cache write.
pub(crate) fn save_history(root: &Path, thread: &str, history: &History, retired: Hash) {
    let path = |name: String| cache_file_in(root, "chains", &name);
    let _ = crate::file_util::write_recycling(
        &path(format!("{thread}.spare")),
        &path(format!("{}.json", history.head())),
        history.to_text().as_bytes(),
        Some(&path(format!("{retired}.json"))),
    );
}

/// A chain entry for a step node (whose file has `size` bytes), with its output and detail
/// read (and so verified: the lengths recorded are those of intact files).
fn entry(store: &Store, node: &Node, size: u64, step: StepNode) -> Result<Entry, ChainError> {
    let read = |kind, hash| {
        store
            .get_sized(hash)
            .map_err(|e| damaged_read(kind, hash, Some(node.hash), e))
    };
    let (output, output_size) = read("output", step.output)?;
    let (_, detail) = read("detail", step.detail)?;
    Ok(entry_with(node, step, output, [size, output_size, detail]))
}

/// A node a chain needs could not be read: [`ChainError::Damaged`], naming it.
fn damaged_read(kind: &'static str, hash: Hash, step: Option<Hash>, e: StoreError) -> ChainError {
    let reason = match e {
        StoreError::NotFound(_) => "missing".to_owned(),
        other => format!("unreadable: {other}"),
    };
    ChainError::Damaged {
        kind,
        hash,
        step,
        reason,
    }
}

/// [`entry`] for a step this process wrote or verified just now ([`Store::get_written`]).
fn entry_written(
    store: &Store,
    node: &Node,
    size: u64,
    step: StepNode,
) -> Result<Entry, ChainError> {
    let (output, output_size) = store.get_written_sized(step.output)?;
    let detail = store.size_of(step.detail)?;
    Ok(entry_with(node, step, output, [size, output_size, detail]))
}

/// The entry of step `node` whose output node is `output`: a `failure` node is the step's
/// error, and its output is `null`.
fn entry_with(node: &Node, step: StepNode, output: Node, [s, o, d]: [u64; 3]) -> Entry {
    let (raw_output, raw_error) = if output.type_hash == builtin::hash_of("failure") {
        (raw(&Value::Null), Some(raw(&output.payload)))
    } else {
        (raw(&output.payload), None)
    };
    Entry {
        hash: node.hash,
        role: step.role,
        agent: step.agent,
        output_hash: step.output,
        raw_output,
        raw_error,
        detail: step.detail,
        timestamp: node.timestamp,
        sizes: Sizes {
            step: s,
            output: o,
            detail: d,
        },
    }
}

/// Checks that the nodes a cached step stands for — its step, output and detail nodes — are
/// still there with the lengths recorded when it was cached (a `stat` each), naming the first
/// that is not. Their content is not re-hashed: that is `uwf cas fsck`'s job.
pub(crate) fn check_entry(store: &Store, entry: &Entry) -> Result<(), ChainError> {
    let sizes = entry.sizes;
    for (kind, hash, size) in [
        ("step", entry.hash, sizes.step),
        ("output", entry.output_hash, sizes.output),
        ("detail", entry.detail, sizes.detail),
    ] {
        check_node(store, kind, hash, size, Some(entry.hash))?;
    }
    Ok(())
}

/// [`check_entry`] for a chain's start node.
pub(crate) fn check_start(store: &Store, chain: &Chain) -> Result<(), ChainError> {
    check_node(store, "start", chain.start_hash, chain.start_size, None)
}

fn check_node(
    store: &Store,
    kind: &'static str,
    hash: Hash,
    size: u64,
    step: Option<Hash>,
) -> Result<(), ChainError> {
    let damaged = |reason: String| ChainError::Damaged {
        kind,
        hash,
        step: step.filter(|s| *s != hash),
        reason,
    };
    let found = match store.file_len(hash) {
        Ok(found) => found,
        Err(StoreError::NotFound(_)) => return Err(damaged("missing".into())),
        Err(e) => return Err(damaged(format!("unreadable: {e}"))),
    };
    if found == size {
        return Ok(());
    }
    // A file that is a cache: the node is the table's, verified on the way in.
    if store.files_are_cache() && store.get(hash).is_ok() {
        return Ok(());
    }
    Err(damaged(format!(
        "damaged: its file has {found} bytes, {size} when the history was cached"
    )))
}

/// Loads the chain ending at `head` (a step or start node), from the cache where possible.
///
/// The head node is read and verified first, so the cache never stands in for a head that is
/// gone or damaged.
pub(crate) fn load(store: &Store, head: Hash) -> Result<Chain, ChainError> {
    store.get(head)?;
    if let Some(chain) = read_cache(store, head) {
        return Ok(chain);
    }
    let chain = build(store, head)?;
    write_history(store, &History::of(&chain));
    Ok(chain)
}

/// The chain ending at `head` (not cached itself), walked back from it to the nearest cached
/// ancestor or the start node.
fn build(store: &Store, head: Hash) -> Result<Chain, ChainError> {
    build_with(store, head, |at| read_cache(store, at))
}

/// The chain ending at `head` read from the nodes alone, every step to the start; no cache
/// file is read or written (for `uwf cas fsck`, which checks the caches against it).
pub(crate) fn load_from_nodes(store: &Store, head: Hash) -> Result<Chain, ChainError> {
    build_with(store, head, |_| None)
}

/// Checks a chain cache file against the store: it parses, names the head it is filed under,
/// and equals the history rebuilt from the nodes. The error says how it disagrees.
pub(crate) fn check_cache_file(store: &Store, head: Hash, text: String) -> Result<(), String> {
    let Some(history) = History::parse(text.clone()) else {
        return Err("damaged: it does not parse or its checksum does not match".into());
    };
    if history.head() != head {
        return Err(format!("it holds the chain of {}", history.head()));
    }
    let chain =
        load_from_nodes(store, head).map_err(|e| format!("the store cannot rebuild it: {e}"))?;
    if History::of(&chain).to_text() != text {
        return Err("it differs from the chain rebuilt from the nodes".into());
    }
    Ok(())
}

/// [`build`], asking `cached` for an ancestor's chain before reading its node.
fn build_with(
    store: &Store,
    head: Hash,
    cached: impl Fn(Hash) -> Option<Chain>,
) -> Result<Chain, ChainError> {
    let step_type = builtin::hash_of("step");
    // Walk back until a cached ancestor or the start node, then replay forwards.
    let mut pending: Vec<(Node, u64, StepNode)> = Vec::new();
    let mut at = head;
    // What `at` should be, for naming it if it cannot be read.
    let (mut kind, mut after) = ("head", None);
    let mut chain = loop {
        if at != head
            && let Some(chain) = cached(at)
        {
            break chain;
        }
        let (node, size) = store
            .get_sized(at)
            .map_err(|e| damaged_read(kind, at, after, e))?;
        if builtin::is_start(node.type_hash) {
            break Chain {
                start_hash: at,
                start: read_start(&node)?,
                start_timestamp: node.timestamp,
                start_size: size,
                steps: Vec::new(),
            };
        }
        if node.type_hash != step_type {
            return Err(ChainError::NotAStepOrStart {
                hash: at,
                kind: builtin::name_of(node.type_hash)
                    .unwrap_or("data")
                    .to_owned(),
            });
        }
        let step = read_step(&node)?;
        let prev = step.prev.unwrap_or(step.start);
        kind = if step.prev.is_some() { "step" } else { "start" };
        after = Some(at);
        pending.push((node, size, step));
        at = prev;
    };
    for (node, size, step) in pending.into_iter().rev() {
        chain.steps.push(entry(store, &node, size, step)?);
    }
    Ok(chain)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn context_text_is_the_documented_shape() {
        let hash = |s: &str| Hash::parse(s).unwrap();
        let chain = Chain {
            start_hash: hash("EYHPV6X8XHTCS"),
            start: Start {
                workflow: hash("2DHW2FP49YVD3"),
                prompt: "say \"hi\"\nand\\or é".into(),
                parent: None,
                by: None,
            },
            start_timestamp: 1,
            start_size: 90,
            steps: vec![Entry {
                hash: hash("F5VV55NBKX1R5"),
                role: "rev\"iewer".into(),
                agent: "dry".into(),
                output_hash: hash("827F196W26J4M"),
                raw_output: raw(&json!({"approved": false, "notes": ["a", {"b": null}]})),
                raw_error: None,
                detail: hash("298FDNKR7P5MH"),
                timestamp: 2,
                sizes: Sizes::default(),
            }],
        };
        let expected = json!({
            "start": {"workflow": "2DHW2FP49YVD3", "prompt": "say \"hi\"\nand\\or é"},
            "steps": [{"role": "rev\"iewer", "output": {"approved": false, "notes": ["a", {"b": null}]},
                       "detail": "298FDNKR7P5MH", "agent": "dry"}]
        });
        assert_eq!(chain.context(), expected);
        assert_eq!(chain.position(), "rev\"iewer");
        assert_eq!(
            chain.steps[0].output(),
            json!({"approved": false, "notes": ["a", {"b": null}]})
        );
        // The cache round-trips.
        let back: Chain = serde_json::from_slice(&serde_json::to_vec(&chain).unwrap()).unwrap();
        assert_eq!(back.context_json(), chain.context_json());
    }

    fn entry_of(n: u64, role: &str, output: Value) -> Entry {
        let hash = |seed: u64| Hash::from_u64(seed * 7919);
        Entry {
            hash: hash(n),
            role: role.into(),
            agent: "script \"x\"".into(),
            output_hash: hash(n + 1000),
            raw_output: raw(&output),
            raw_error: None,
            detail: hash(n + 2000),
            timestamp: 1_700_000_000_000 + n,
            sizes: Sizes {
                step: 200 + n,
                output: 100 + n,
                detail: 300 + n,
            },
        }
    }

    fn sample() -> Chain {
        Chain {
            start_hash: Hash::of_bytes(b"start"),
            start: Start {
                workflow: Hash::of_bytes(b"workflow"),
                prompt: "multi\nline \"prompt\" with spaces".into(),
                parent: None,
                by: None,
            },
            start_timestamp: 7,
            start_size: 123,
            steps: vec![
                entry_of(1, "planner", json!({"plan": "a b\nc", "n": [1, 2]})),
                entry_of(2, "reviewer", json!({"ok": false, "note": " spaced  out "})),
                entry_of(3, "planner", json!({})),
            ],
        }
    }

    #[test]
    fn a_history_answers_like_its_chain_without_parsing_steps() {
        let chain = sample();
        let history = History::parse(History::of(&chain).to_text()).expect("parses");
        assert_eq!(history.head(), chain.head());
        assert_eq!(history.start_hash(), chain.start_hash);
        assert_eq!(history.start(), &chain.start);
        assert_eq!(history.len(), 3);
        assert_eq!(history.position(), "planner");
        assert_eq!(history.visits("planner"), 2);
        assert_eq!(history.visits("reviewer"), 1);
        assert_eq!(history.visits("coder"), 0);
        assert_eq!(history.context_json(), chain.context_json());
        let back = history.to_chain().expect("steps parse");
        assert_eq!(back.context_json(), chain.context_json());
        assert_eq!(
            back.steps
                .iter()
                .map(|s| (s.hash, s.output_hash, s.detail, s.timestamp, s.sizes))
                .collect::<Vec<_>>(),
            chain
                .steps
                .iter()
                .map(|s| (s.hash, s.output_hash, s.detail, s.timestamp, s.sizes))
                .collect::<Vec<_>>()
        );
        assert_eq!(back.start_size, chain.start_size);
        // An empty chain: the start node is the head.
        let empty = Chain {
            steps: Vec::new(),
            ..sample()
        };
        let history = History::parse(History::of(&empty).to_text()).expect("parses");
        assert_eq!(history.head(), empty.start_hash);
        assert_eq!(history.position(), crate::engine::START);
        assert!(history.is_empty());
        assert_eq!(history.context_json(), empty.context_json());
    }

    #[test]
    fn extending_a_history_equals_the_history_of_the_longer_chain() {
        let mut chain = sample();
        let next = entry_of(4, "reviewer", json!({"ok": true}));
        let extended = History::of(&chain).with(&next);
        chain.steps.push(next);
        assert_eq!(extended.to_text(), History::of(&chain).to_text());
    }

    #[test]
    fn a_failure_step_reads_as_a_null_output_with_an_error_and_the_history_knows_it() {
        let mut chain = sample();
        let mut failed = entry_of(4, "reviewer", Value::Null);
        failed.raw_error = Some(raw(&json!({"message": "agent `x` exited", "attempts": 3})));
        assert!(!History::of(&chain).failed());
        let extended = History::of(&chain).with(&failed);
        chain.steps.push(failed);
        let history = History::parse(History::of(&chain).to_text()).expect("parses");
        assert_eq!(extended.to_text(), history.to_text());
        assert!(history.failed());
        let context: Value = serde_json::from_str(&history.context_json()).unwrap();
        assert_eq!(
            context["steps"][3],
            json!({"role": "reviewer", "output": null, "detail": chain.steps[3].detail.to_string(),
                   "agent": "script \"x\"", "error": {"message": "agent `x` exited", "attempts": 3}})
        );
        let back = history.to_chain().expect("steps parse");
        assert_eq!(back.steps[3].error(), chain.steps[3].error());
        assert_eq!(back.steps[2].error(), None);
        // A step after it did not fail.
        let after = history.with(&entry_of(5, "planner", json!({})));
        assert!(!after.failed());
    }

    #[test]
    fn a_damaged_history_file_is_refused() {
        let text = History::of(&sample()).to_text();
        assert!(History::parse(text.replace("\"ok\":false", "\"ok\":true")).is_none());
        assert!(History::parse(text[..text.len() - 5].to_owned()).is_none());
        assert!(History::parse("{}".to_owned()).is_none());
        // The old format (one JSON document) is not a history either: it is rebuilt.
        let old = serde_json::to_string(&sample()).unwrap();
        assert!(History::parse(old).is_none());
        // Nor is a file of the format before sizes were recorded.
        let unversioned = text.replacen("\"version\":2,", "", 1);
        assert_ne!(unversioned, text);
        assert!(History::parse(unversioned).is_none());
    }
}
