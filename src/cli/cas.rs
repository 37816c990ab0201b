//! `uwf cas …`: inspect and maintain the content-addressed store.

use std::path::Path;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::Out;
use crate::cas::gc::GcOptions;
use crate::cas::{Hash, Store, StoreError, builtin};
use crate::cli::error::{CliResult, CommandError, Context, bail, user_error};
use crate::engine::input::{self, Source};
use crate::engine::storage::{self, seam::GcError};
use crate::engine::upkeep::fsck as engine_fsck;
use crate::engine::upkeep::retention;

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub(super) enum CasCommand {
    /// Print a node as pretty JSON
    #[command(after_help = "Example:\n  uwf cas get 2DHW2FP49YVD3 --payload")]
    Get {
        /// Node hash (case-insensitive)
        hash: String,
        /// Print only the payload
        #[arg(long)]
        payload: bool,
    },
    /// Validate and store a node; prints its hash
    #[command(after_help = "The type is a schema hash or a built-in schema name \
(workflow, start, step, text, detail), or `meta` (F5VV55NBKX1R5) to store a schema. A payload read from stdin is limited to 16 MiB \
(UWF_MAX_INPUT=64MiB or `maxInput: 64MiB` in config.yaml raise it); a larger one is refused and \
nothing is stored.\n\n\
Examples:\n  uwf cas put text '\"hello\"'\n  uwf cas put 827F196W26J4M - < payload.json\n  \
UWF_MAX_INPUT=64MiB uwf cas put text - < big.json")]
    Put {
        /// Type: a schema node's hash or a built-in schema name
        #[arg(value_name = "TYPE")]
        type_hash: String,
        /// The payload as JSON, or `-` to read it from stdin
        json: String,
    },
    /// Exit 0 if the node exists, 1 if not (2 for a malformed hash)
    #[command(after_help = "Example:\n  uwf cas has 2DHW2FP49YVD3 && echo present")]
    Has { hash: String },
    /// List a node's direct references (its type and its cas_ref fields)
    #[command(after_help = "Example:\n  uwf cas refs 2DHW2FP49YVD3")]
    Refs { hash: String },
    /// List every node reachable from a node, itself included, once each
    #[command(after_help = "Example:\n  uwf cas walk 2DHW2FP49YVD3")]
    Walk { hash: String },
    /// List node hashes, all of them or those of one type
    #[command(after_help = "Examples:\n  uwf cas list\n  uwf cas list --type step")]
    List {
        /// Only nodes of this type (schema hash or built-in name)
        #[arg(long = "type", value_name = "TYPE")]
        type_hash: Option<String>,
    },
    /// Rebuild the type index from the node files
    #[command(
        after_help = "Over PostgreSQL the database keeps each node's type in a column; this rebuilds \
only the index of this machine's node cache.\n\nExample:\n  uwf cas reindex"
    )]
    Reindex,
    /// Remove nodes unreachable from the registry and thread heads
    #[command(
        after_help = "Roots: built-in schemas, registry.yaml (current and earlier versions), \
the heads of every thread in the thread index (index.db), active and archived. A damaged index is \
an error and nothing is removed. Unreachable nodes younger than the grace period are kept. \
Over PostgreSQL the roots and nodes are the database's: unreachable rows older than the grace \
period are deleted (in batches), with this machine's cache files of them.\n\n\
Logs and event feeds of threads archived more than --keep-logs ago (30 days unless given) are \
removed too; a living thread's log grows by at most about 1 MiB a step.\n\n\
Examples:\n  uwf cas gc --dry-run\n  uwf cas gc --grace 1h\n  uwf cas gc --keep-logs 7d"
    )]
    Gc(GcArgs),
    /// Check every node, every thread and workflow from its roots, and the derived files
    #[command(
        after_help = "Checks every node file (hash, references, validity against its schema); \
walks every root (registry.yaml versions, every thread's head in index.db) along every \
reference and reports each missing or corrupt node with its kind and the threads and workflows \
that reach it; checks cache/chains, cache/decisions and the type index against the store. \
Over PostgreSQL every row of the nodes table is re-hashed instead, and the node files under the \
root are a cache: one that does not hold its node is a derived file (--repair removes it).\n\n\
Exit status 1 when any problem is found.\n\nExamples:\n  uwf cas fsck\n  uwf cas fsck --repair"
    )]
    Fsck {
        /// Rebuild derived data that disagrees with the store (cache files, the type index);
        /// never touches nodes or index files
        #[arg(long)]
        repair: bool,
    },
    /// Work with schema nodes
    #[command(subcommand)]
    Schema(SchemaCommand),
}

#[derive(Debug, Args)]
pub(super) struct GcArgs {
    /// Keep unreachable nodes younger than this (e.g. 0s, 30m, 24h)
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    grace: Duration,
    /// Report what would be removed; remove nothing
    #[arg(long)]
    dry_run: bool,
    /// Keep the logs and event feeds of threads archived less than this long ago (e.g. 30d,
    /// 12h, 0s); older ones are removed (over PostgreSQL from the database, else from runs/)
    #[arg(long, default_value = "30d", value_parser = parse_duration)]
    keep_logs: Duration,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub(super) enum SchemaCommand {
    /// List schema nodes (built-ins with their names)
    #[command(after_help = "Example:\n  uwf cas schema list")]
    List,
    /// Print a schema as pretty JSON
    #[command(after_help = "Example:\n  uwf cas schema get step")]
    Get {
        /// Schema hash or built-in name
        schema: String,
    },
    /// Store a JSON Schema (draft 2020-12) from a file or stdin; prints its hash
    #[command(after_help = "Example:\n  uwf cas schema put review.schema.json")]
    Put {
        /// A file, or `-` for stdin
        file: String,
    },
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{e} (use a number with a unit, e.g. 0s, 90s, 30m, 24h, 7days)"))
}

impl CasCommand {
    /// Whether the command only reads the store (see `needs_a_store`).
    pub(super) fn only_reads(&self) -> bool {
        !matches!(
            self,
            CasCommand::Put { .. }
                | CasCommand::Schema(SchemaCommand::Put { .. })
                | CasCommand::Reindex
        )
    }

    /// Whether this command needs a store that exists: every reading command but those the
    /// built-in schemas answer (`schema list`, `schema get` of a built-in), which need none.
    pub(super) fn needs_a_store(&self) -> bool {
        match self {
            CasCommand::Schema(SchemaCommand::List) => false,
            CasCommand::Schema(SchemaCommand::Get { schema }) => builtin_schema(schema).is_none(),
            _ => self.only_reads(),
        }
    }
}

/// The payload of a built-in schema (or of `meta`) named by its name or hash, if it is one.
fn builtin_schema(text: &str) -> Option<(Hash, Value)> {
    let hash = parse_type(text).ok()?;
    if hash == Hash::META {
        return Some((hash, builtin::bootstrap_payload()));
    }
    // As a store gives it back: keys in canonical order.
    builtin::by_hash(hash).map(|b| (hash, crate::cas::canonical::sorted(b.schema())))
}

pub(super) fn run(cmd: CasCommand, root: &Path, out: &mut Out) -> CliResult<()> {
    if let CasCommand::Has { hash } = &cmd {
        // `has` answers with its exit status only; a malformed hash is a usage error.
        let hash = Hash::parse(hash).map_err(|e| CommandError::usage(e.to_string()))?;
        let store = crate::engine::storage::open_store(root)?;
        return if store.has(hash) {
            Ok(())
        } else {
            Err(CommandError::silent(1))
        };
    }
    let remote = std::env::var_os(storage::URL_VAR).is_some_and(|u| !u.is_empty());
    if let CasCommand::Schema(schema) = &cmd
        && !cmd.needs_a_store()
        && !root.exists()
        && !remote
    {
        // No store: the built-in schemas answer, and nothing is made.
        return builtin_schemas(schema, out);
    }
    let store = crate::engine::storage::open_store(root)?;
    match cmd {
        CasCommand::Get { hash, payload } => {
            let hash = parse_hash(&hash)?;
            let node = store.get(hash)?;
            let value = if payload {
                node.payload
            } else {
                node.to_json()
            };
            print_node(out, hash, &value)?;
        }
        CasCommand::Put { type_hash, json } => {
            let type_hash = parse_type(&type_hash)?;
            let payload = read_json(&json, root)?;
            hash_line(out, store.put(type_hash, &payload)?)?;
        }
        CasCommand::Has { .. } => unreachable!("handled above"),
        CasCommand::Refs { hash } => {
            for r in store.refs(parse_hash(&hash)?)? {
                hash_line(out, r)?;
            }
        }
        CasCommand::Walk { hash } => {
            for r in store.walk(parse_hash(&hash)?)? {
                hash_line(out, r)?;
            }
        }
        CasCommand::List { type_hash } => {
            let hashes = match type_hash {
                Some(t) => store.list_type(parse_type(&t)?)?,
                None => store.list_all()?,
            };
            list(&store, &hashes, out)?;
        }
        CasCommand::Reindex => {
            let count = store.reindex()?;
            if out.quiet() {
                // Nothing has an id here: the exit status says it worked.
            } else if out.json_asked {
                out.line(json!({"indexed": count}))?;
            } else if store.files_are_cache() {
                // The database keeps each node's type in a column: nothing to rebuild there.
                out.line(format!(
                    "indexed {count} nodes in this machine's node cache (the database needs no index rebuilt)"
                ))?;
            } else {
                out.line(format!("indexed {count} nodes"))?;
            }
        }
        CasCommand::Gc(args) => run_gc(&store, root, &args, out)?,
        CasCommand::Fsck { repair } => run_fsck(&store, root, repair, out)?,
        CasCommand::Schema(cmd) => run_schema(&store, cmd, out)?,
    }
    Ok(())
}

/// How `cas fsck` says what it found: a line each for people, `{"problem", "hash"}` objects
/// with `--json`, and with `-q` only the hashes of damaged nodes.
fn finding(out: &mut Out, hash: Option<Hash>, text: &str) -> std::io::Result<()> {
    if out.quiet() {
        return match hash {
            Some(hash) => out.line(hash),
            None => Ok(()),
        };
    }
    if out.json_asked {
        return out.line(json!({"problem": text, "hash": hash}));
    }
    out.line(text)
}

fn run_fsck(store: &Store, root: &Path, repair: bool, out: &mut Out) -> CliResult<()> {
    let handle = storage::handle(root)?;
    let check = handle.index().check_nodes(store)?;
    let nodes = check.nodes;
    for p in &nodes.problems {
        let name = p
            .hash
            .map(|h| h.to_string())
            .unwrap_or_else(|| p.path.display().to_string());
        finding(out, p.hash, &format!("{name}: {}", p.message))?;
    }
    let mut report = engine_fsck::check_with(store, check.table.as_deref())?;
    report.derived.extend(check.cache);
    report.derived.sort_by(|a, b| a.path.cmp(&b.path));
    for d in &report.damaged {
        let from = d
            .reached_from
            .iter()
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        let what = match &d.condition {
            engine_fsck::Condition::Missing => format!("missing {} node {}", d.kind, d.hash),
            engine_fsck::Condition::Corrupt(why) => {
                format!("corrupt {} node {}: {why}", d.kind, d.hash)
            }
        };
        finding(out, Some(d.hash), &format!("{what} (reached from {from})"))?;
    }
    let root = store.root();
    for d in &report.derived {
        let path = d.path.strip_prefix(root).unwrap_or(&d.path);
        finding(
            out,
            None,
            &format!("derived {}: {}", path.display(), d.problem),
        )?;
    }
    if repair && !report.derived.is_empty() {
        let repaired = engine_fsck::repair(store, &report)?;
        for path in &repaired.removed {
            let path = path.strip_prefix(root).unwrap_or(path);
            finding(
                out,
                None,
                &format!(
                    "repair: removed {} (rebuilt when next needed)",
                    path.display()
                ),
            )?;
        }
        if let Some(count) = repaired.reindexed {
            finding(
                out,
                None,
                &format!("repair: rebuilt the type index ({count} nodes)"),
            )?;
        }
    }
    let node_problems = nodes.problems.len() + report.damaged.len();
    // Nothing wrong, or only derived data that was just rebuilt: the store is sound.
    if node_problems == 0 && (report.derived.is_empty() || repair) {
        if out.json_asked {
            out.line(json!({"ok": true, "nodes": nodes.checked, "roots": report.roots}))?;
        } else if report.derived.is_empty() && !out.quiet() {
            out.line(format!(
                "ok: {} nodes checked, {} roots walked, no problems",
                nodes.checked, report.roots
            ))?;
        }
        return Ok(());
    }
    let derived_note = match (report.derived.len(), repair) {
        (0, _) => String::new(),
        (n, true) => format!(", {n} derived file(s) rebuilt"),
        (n, false) => format!(", {n} derived file(s) disagree with the store"),
    };
    let mut error = user_error!(
        "{} problem(s) in {} nodes: {} missing and {} corrupt reachable node(s){derived_note}",
        node_problems + report.derived.len(),
        nodes.checked,
        report.missing(),
        report.corrupt(),
    );
    let (place, changed) = if store.files_are_cache() {
        ("the database's nodes table", "in the database")
    } else {
        ("cas/objects", "on disk")
    };
    if report.missing() > 0 {
        error = error.hint(format!(
            "a missing node was deleted from {place}; restore it from a backup, or fork the thread from an intact step"
        ));
    }
    if report.corrupt() > 0 || !nodes.problems.is_empty() {
        error = error.hint(format!(
            "a node with a hash mismatch or corrupt content was changed {changed}; restore it from a backup or remove it"
        ));
    }
    if !report.derived.is_empty() && !repair {
        error = error.hint(
            "`uwf cas fsck --repair` rebuilds the derived files (caches, type index) from the store",
        );
    }
    Err(error)
}

fn run_gc(store: &Store, root: &Path, args: &GcArgs, out: &mut Out) -> CliResult<()> {
    let options = GcOptions {
        grace: args.grace,
        dry_run: args.dry_run,
    };
    // The roots are read once GC holds the store (see `cas::gc`).
    let report = match storage::handle(root)?
        .index()
        .collect_garbage(store, &options)
    {
        Ok(report) => report,
        Err(GcError::Roots(e)) => {
            return Err(e).context("cannot collect GC roots; nothing was removed");
        }
        Err(e) => return Err(e.into()),
    };
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    let pruned = retention::prune_logs(root, args.keep_logs, args.dry_run)?;
    if out.quiet() {
        for h in &report.removed {
            out.line(h)?;
        }
        return Ok(());
    }
    if out.json_asked {
        out.line(json!({
            "dryRun": args.dry_run,
            "reachable": report.reachable,
            "removed": report.removed,
            "young": report.young,
            "tempFiles": report.temp_files,
            "missingRoots": report.missing_roots,
            "logsPruned": {"threads": pruned.threads, "bytes": pruned.bytes},
        }))?;
        return Ok(());
    }
    for h in &report.removed {
        out.line(format!("{verb} {h}"))?;
    }
    for h in &report.missing_roots {
        out.line(format!("warning: root {h} is not in the store"))?;
    }
    out.line(format!(
        "{} reachable, {verb} {}, kept {} younger than {}{}",
        report.reachable,
        report.removed.len(),
        report.young,
        spoken_duration(args.grace),
        if report.temp_files > 0 {
            format!(", {verb} {} abandoned temp files", report.temp_files)
        } else {
            String::new()
        }
    ))?;
    if pruned.threads > 0 {
        out.line(format!(
            "{verb} the logs of {} thread{} archived more than {} ago ({} bytes)",
            pruned.threads,
            if pruned.threads == 1 { "" } else { "s" },
            spoken_duration(args.keep_logs),
            pruned.bytes
        ))?;
    }
    Ok(())
}

/// A duration as people say it, in its largest whole unit: `1 day`, `30 minutes`, `90 seconds`.
fn spoken_duration(duration: Duration) -> String {
    let secs = duration.as_secs();
    let (n, unit) = match secs {
        0 => (0, "second"),
        s if s % 86_400 == 0 => (s / 86_400, "day"),
        s if s % 3_600 == 0 => (s / 3_600, "hour"),
        s if s % 60 == 0 => (s / 60, "minute"),
        s => (s, "second"),
    };
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

/// `schema list` and `schema get` of a built-in without a store: the built-ins every store
/// holds, printed as a store's listing would print them.
fn builtin_schemas(cmd: &SchemaCommand, out: &mut Out) -> CliResult<()> {
    match cmd {
        SchemaCommand::List => {
            schema_line(out, Hash::META, META_LABEL)?;
            for b in builtin::all() {
                schema_line(out, b.hash, b.name)?;
            }
        }
        SchemaCommand::Get { schema } => {
            let (hash, payload) = builtin_schema(schema)
                .ok_or_else(|| user_error!("`{schema}` is not a built-in schema"))?;
            print_node(out, hash, &payload)?;
        }
        SchemaCommand::Put { .. } => unreachable!("schema put makes its store"),
    }
    Ok(())
}

/// How `schema list` names the bootstrap schema.
const META_LABEL: &str = "meta (bootstrap: the type of every schema)";

/// One line of `schema list`: a hash and what it is.
fn schema_line(out: &mut Out, hash: Hash, label: &str) -> std::io::Result<()> {
    if out.quiet() {
        out.line(hash)
    } else if out.json_asked {
        out.line(json!({"hash": hash, "name": label}))
    } else {
        out.line(format!("{hash}  {label}"))
    }
}

fn run_schema(store: &Store, cmd: SchemaCommand, out: &mut Out) -> CliResult<()> {
    match cmd {
        SchemaCommand::List => {
            schema_line(out, Hash::META, META_LABEL)?;
            for h in store.list_type(Hash::META)? {
                let label = match builtin::name_of(h) {
                    Some(name) => name.to_owned(),
                    None => store
                        .get_payload(h)
                        .ok()
                        .and_then(|p| p.get("title").and_then(Value::as_str).map(str::to_owned))
                        .unwrap_or_else(|| "-".into()),
                };
                schema_line(out, h, &label)?;
            }
        }
        SchemaCommand::Get { schema } => {
            let hash = parse_type(&schema)?;
            let node = store.get(hash)?;
            // `meta` is the schema of schemas: its own type is the zero hash.
            if !node.is_schema() && hash != Hash::META {
                return Err(StoreError::NotASchema(hash).into());
            }
            print_node(out, hash, &node.payload)?;
        }
        SchemaCommand::Put { file } => {
            let schema = read_json(&file, store.root())?;
            hash_line(out, store.put(Hash::META, &schema)?)?;
        }
    }
    Ok(())
}

/// A node or payload: pretty JSON for people and by default, one line with `--json`, its hash
/// with `-q`.
fn print_node(out: &mut Out, hash: Hash, value: &Value) -> std::io::Result<()> {
    if out.quiet() {
        out.line(hash)
    } else if out.json_asked {
        out.line(value)
    } else {
        out.json_pretty(value)
    }
}

/// One hash of a list: bare, or `{"hash"}` with `--json`.
fn hash_line(out: &mut Out, hash: Hash) -> std::io::Result<()> {
    if out.json_asked {
        out.line(json!({ "hash": hash }))
    } else {
        out.line(hash)
    }
}

fn parse_hash(text: &str) -> CliResult<Hash> {
    Ok(Hash::parse(text)?)
}

/// A type given as a hash or as a built-in schema's name.
fn parse_type(text: &str) -> CliResult<Hash> {
    if text == "meta" {
        return Ok(Hash::META);
    }
    if let Some(b) = builtin::all().iter().find(|b| b.name == text) {
        return Ok(b.hash);
    }
    Hash::parse(text).map_err(|e| {
        CommandError::from(e).context(format!(
            "unknown type `{text}`: give a schema hash or one of: meta, {}",
            builtin::all()
                .iter()
                .map(|b| b.name)
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}

/// Reads JSON from an argument that is inline JSON, `-` (stdin) or — for `schema put` — a file;
/// stdin and files within the input limit of the store at `root`.
fn read_json(arg: &str, root: &Path) -> CliResult<Value> {
    let (text, source) = if arg == "-" {
        let text = input::read_text(Source::Stdin, super::input_limit(root)?)?;
        (text, "stdin".to_owned())
    } else if Path::new(arg).is_file() {
        let text = input::read_text(Source::File(Path::new(arg)), super::input_limit(root)?)?;
        (text, arg.to_owned())
    } else {
        (arg.to_owned(), "the argument".to_owned())
    };
    if text.trim().is_empty() {
        bail!("no JSON in {source}");
    }
    serde_json::from_str(&text).map_err(|e| {
        user_error!(
            "invalid JSON in {source} at line {}, column {}: {e}",
            e.line(),
            e.column()
        )
    })
}

/// `cas list`: hashes one per line (as scripts expect, also with `-q`), JSON lines with
/// `--json`, a table of hash, type and age on a terminal.
fn list(store: &Store, hashes: &[Hash], out: &mut Out) -> CliResult<()> {
    let now = crate::cas::store::now_ms();
    let mut rows = Vec::new();
    for &h in hashes {
        match out.mode {
            super::terminal::output::Mode::Table => {
                let (kind, age) = match store.get(h) {
                    Ok(node) => (
                        type_label(node.type_hash),
                        super::terminal::output::ago(node.timestamp, now),
                    ),
                    Err(_) => ("?".to_owned(), String::new()),
                };
                rows.push(vec![h.to_string(), kind, age]);
            }
            super::terminal::output::Mode::Json if out.json_asked => {
                let node = store.get(h)?;
                out.line(serde_json::json!({
                    "hash": h.to_string(),
                    "type": node.type_hash.to_string(),
                    "typeName": builtin::name_of(node.type_hash),
                    "timestamp": node.timestamp,
                }))?;
            }
            _ => out.line(h)?,
        }
    }
    out.table(&["HASH", "TYPE", "WRITTEN"], &rows)?;
    Ok(())
}

/// A type hash as a person reads it: the built-in schema's name, or the hash.
fn type_label(type_hash: Hash) -> String {
    if type_hash == Hash::META {
        return "meta".to_owned();
    }
    builtin::name_of(type_hash)
        .map(str::to_owned)
        .unwrap_or_else(|| type_hash.to_string())
}
