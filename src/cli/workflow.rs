//! `uwf workflow …`: register, inspect, version and draw workflow definitions.

use std::io::Read;
use std::path::Path;

use clap::Subcommand;
use serde_json::json;

use super::Out;
use super::terminal::output::{Mode, ago};
use crate::cas::Store;
use crate::cas::store::now_ms;
use crate::cli::error::{CliResult, Context, bail};
use crate::engine::thread::listing;
use crate::engine::workflow::graph;
use crate::engine::workflow::registry::{self, Registered};
use crate::engine::workflow::{self, Definition, WorkflowError};

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub(super) enum WorkflowCommand {
    /// Validate a YAML definition and register it under its `name`
    #[command(
        after_help = "Prints {\"name\",\"hash\",\"status\"} with status new, updated or unchanged. \
Every problem is listed with its location and nothing is registered when any is found. \
Role `goal`, `procedure` and `output` texts may hold `{{ expr }}` JSONata templates, checked here \
and rendered into agents' prompts (`uwf skill author` explains them). A role may declare \
`retry: N` (0 to 10: its agent runs again after a failure) and `onFailure: ROLE` (or `$END`: \
after the last attempt a step recording the failure moves the thread there). \
A workflow file has at most 1 MiB (1048576 bytes); a larger one is refused with its size.\n\n\
Several files and folders are put one after another; a refused one is named and the others still \
go in (the command then fails, saying how many were refused).\n\n\
Examples:\n  uwf workflow put examples/solve-issue.yaml\n  uwf workflow put examples/\n  \
uwf workflow put --check draft.yaml\n  cat wf.yaml | uwf workflow put -"
    )]
    Put {
        /// YAML files, folders (their `*.yaml` and `*.yml` files), or `-` for stdin
        #[arg(required = true, value_name = "FILE")]
        files: Vec<String>,
        /// Only validate: print problems and warnings, register nothing
        #[arg(long)]
        check: bool,
    },
    /// Print a workflow as YAML with its schemas inline
    #[command(
        after_help = "Prints the YAML as it was saved; --json the definition as one JSON object with \
its hash, -q only the hash.\n\n\
Examples:\n  uwf workflow show solve-issue\n  uwf workflow show 4G86E2KECAKQG > copy.yaml\n  \
uwf workflow show solve-issue --json | jq .roles"
    )]
    Show {
        /// A registered name or a workflow hash
        workflow: String,
    },
    /// List registered workflows: a table on a terminal, else one JSON object per line
    #[command(
        after_help = "Examples:\n  uwf workflow list\n  uwf workflow list --json\n  uwf workflow list -q   # names only"
    )]
    List,
    /// List the versions of a workflow, newest first
    #[command(after_help = "Example:\n  uwf workflow history solve-issue")]
    History {
        /// A registered workflow name
        name: String,
    },
    /// Make an earlier version current again (default: the previous one)
    #[command(
        after_help = "Examples:\n  uwf workflow rollback solve-issue\n  uwf workflow rollback solve-issue 4G86E2KECAKQG"
    )]
    Rollback { name: String, hash: Option<String> },
    /// Draw the graph as a Mermaid flowchart (or Graphviz DOT)
    #[command(
        after_help = "--json prints the transitions ({name, hash, graph}), -q the hash.\n\n\
Examples:\n  uwf workflow graph solve-issue > graph.mmd\n  uwf workflow graph solve-issue --dot | dot -Tsvg > graph.svg"
    )]
    Graph {
        /// A registered name or a workflow hash
        workflow: String,
        /// Print Graphviz DOT instead of Mermaid
        #[arg(long)]
        dot: bool,
    },
    /// Remove a name from the registry (threads using it keep working)
    #[command(after_help = "Example:\n  uwf workflow rm old-draft")]
    Rm { name: String },
}

impl WorkflowCommand {
    /// Whether the command only reads the store (see `needs_a_store`).
    pub(super) fn only_reads(&self) -> bool {
        !matches!(self, WorkflowCommand::Put { .. })
    }
}

pub(super) fn run(cmd: WorkflowCommand, root: &Path, out: &mut Out) -> CliResult<()> {
    let store = crate::engine::storage::open_store(root)?;
    match cmd {
        WorkflowCommand::Put { files, check } => put_all(&store, &files, check, out)?,
        WorkflowCommand::Show { workflow } => {
            let hash = registry::resolve(&store, &workflow)?;
            if out.quiet() {
                out.line(hash)?;
                return Ok(());
            }
            let definition = Definition::load(&store, hash)?;
            if out.json_asked {
                // The definition as `to_yaml` renders it (schemas inline), and its hash.
                let yaml = definition.to_yaml();
                let mut json: serde_json::Value = serde_yaml::from_str(&yaml)
                    .context("the rendered definition is not JSON-compatible")?;
                json["hash"] = hash.to_string().into();
                json["cost"] = workflow_spent(&store, &definition.workflow.name)?.to_json();
                out.line(json)?;
                return Ok(());
            }
            // The text as it was saved (comments kept), else the definition rendered.
            match registry::source_text(&store, hash) {
                Some(text) => out.text(&text)?,
                None => out.text(&definition.to_yaml())?,
            }
            // On a terminal, what its threads spent, as a comment after the YAML (a pipe gets
            // the YAML alone, to be saved and put again).
            if out.mode == Mode::Table {
                let spent = workflow_spent(&store, &definition.workflow.name)?;
                out.line(format!("# spent: {}", spent.line()))?;
            }
        }
        WorkflowCommand::List => {
            let mut rows = Vec::new();
            for (name, entry) in registry::list(root)? {
                match out.mode {
                    Mode::Quiet => out.line(&name)?,
                    Mode::Json => out.line(json!({
                        "name": name,
                        "hash": entry.hash,
                        "registeredAt": entry.registered_at,
                        "versions": entry.history.len() + 1,
                        "cost": workflow_spent(&store, &name)?.to_json(),
                    }))?,
                    Mode::Table => rows.push(vec![
                        name.clone(),
                        entry.hash.to_string(),
                        (entry.history.len() + 1).to_string(),
                        ago(entry.registered_at, now_ms()),
                        short_spent(&workflow_spent(&store, &name)?),
                    ]),
                }
            }
            out.table(&["NAME", "HASH", "VERSIONS", "REGISTERED", "SPENT"], &rows)?;
        }
        WorkflowCommand::History { name } => {
            let entry = registry::entry(root, &name)?;
            let versions = std::iter::once((entry.hash, entry.registered_at, true)).chain(
                entry
                    .history
                    .iter()
                    .rev()
                    .map(|v| (v.hash, v.registered_at, false)),
            );
            let mut rows = Vec::new();
            for (hash, at, current) in versions {
                match out.mode {
                    Mode::Quiet => out.line(hash)?,
                    Mode::Json => {
                        out.line(json!({"hash": hash, "registeredAt": at, "current": current}))?
                    }
                    Mode::Table => rows.push(vec![
                        hash.to_string(),
                        ago(at, now_ms()),
                        if current { "current" } else { "" }.to_owned(),
                    ]),
                }
            }
            out.table(&["HASH", "REGISTERED", ""], &rows)?;
        }
        WorkflowCommand::Rollback { name, hash } => {
            let target = hash.map(|h| crate::cas::Hash::parse(&h)).transpose()?;
            let (from, to) = registry::rollback(root, &name, target, now_ms())?;
            if out.quiet() {
                out.line(to)?;
            } else {
                out.line(json!({"name": name, "hash": to, "previous": from}))?;
            }
        }
        WorkflowCommand::Graph { workflow, dot } => {
            let (hash, w) = registry::load(&store, &workflow)?;
            if out.quiet() {
                out.line(hash)?;
                return Ok(());
            }
            if out.json_asked {
                // The transitions themselves: role → [{to, condition}], as the definition says.
                let graph = serde_json::to_value(&w.graph).context("cannot encode the graph")?;
                out.line(json!({"name": w.name, "hash": hash, "graph": graph}))?;
                return Ok(());
            }
            out.text(&if dot {
                graph::dot(&w)
            } else {
                graph::mermaid(&w)
            })?;
        }
        WorkflowCommand::Rm { name } => {
            let entry = registry::remove(root, &name)?;
            if out.quiet() {
                out.line(entry.hash)?;
            } else {
                out.line(json!({"name": name, "removed": entry.hash}))?;
            }
        }
    }
    Ok(())
}

/// `workflow put` of every file named, folders opened to their YAML files (sorted by name).
/// What the threads of workflow `name` spent: the newest page of them
/// ([`listing::WORKFLOW_SPENT_PAGE`]), priced by `config.yaml`.
fn workflow_spent(store: &Store, name: &str) -> CliResult<listing::WorkflowSpent> {
    let prices = crate::engine::config::load(store.root())
        .map(|l| l.config.prices)
        .unwrap_or_default();
    Ok(listing::workflow_spent(
        store,
        name,
        &prices,
        listing::WORKFLOW_SPENT_PAGE,
    )?)
}

/// A table cell: `660 tokens · $0.0007 (3 threads)`, or `—` when no step reported tokens.
fn short_spent(w: &listing::WorkflowSpent) -> String {
    if w.spent.steps == 0 {
        return "—".to_owned();
    }
    let cost = w
        .spent
        .cost()
        .map(crate::engine::thread::cost::dollars)
        .unwrap_or_else(|| "cost unknown".to_owned());
    let more = if w.counted < w.threads { "+" } else { "" };
    format!(
        "{} tokens · {cost} ({}{more})",
        w.spent.tokens(),
        crate::engine::thread::summary::plural(w.counted as usize, "thread")
    )
}

fn put_all(store: &Store, args: &[String], check: bool, out: &mut Out) -> CliResult<()> {
    let mut files = Vec::new();
    for arg in args {
        let path = Path::new(arg);
        if arg != "-" && path.is_dir() {
            let mut inside: Vec<String> = std::fs::read_dir(path)
                .with_context(|| format!("cannot read the folder {arg}"))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
                .map(|p| p.display().to_string())
                .collect();
            inside.sort();
            if inside.is_empty() {
                bail!("the folder {arg} holds no .yaml or .yml file");
            }
            files.extend(inside);
        } else {
            files.push(arg.clone());
        }
    }
    if files.iter().filter(|f| *f == "-").count() > 1 {
        bail!("`-` (stdin) may be named once");
    }
    if let [file] = files.as_slice() {
        return put(store, file, check, out);
    }
    let mut refused = 0;
    for file in &files {
        if let Err(e) = put(store, file, check, out) {
            refused += 1;
            eprint!(
                "{}",
                e.render()
                    .replacen("error: ", &format!("error: {file}: "), 1)
            );
        }
    }
    if refused > 0 {
        bail!(
            "{refused} of {} workflow files were refused (named above); the others were put",
            files.len()
        );
    }
    Ok(())
}

fn put(store: &Store, file: &str, check: bool, out: &mut Out) -> CliResult<()> {
    // One byte past the limit is enough to refuse a file as too large (`/dev/zero` included);
    // the refusal then reports a regular file's real size from its metadata, never the cap.
    let limit = workflow::MAX_FILE_BYTES as u64 + 1;
    let mut bytes = Vec::new();
    let mut size = None;
    if file == "-" {
        std::io::stdin()
            .take(limit)
            .read_to_end(&mut bytes)
            .context("cannot read stdin")?;
    } else {
        let f = std::fs::File::open(file).with_context(|| format!("cannot read {file}"))?;
        (&f).take(limit)
            .read_to_end(&mut bytes)
            .with_context(|| format!("cannot read {file}"))?;
        size = f.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
    }
    if bytes.len() > workflow::MAX_FILE_BYTES {
        // A file that grew while read reports at least what was read.
        let size = size.map(|s| s.max(bytes.len() as u64));
        return Err(WorkflowError::Invalid {
            problems: vec![workflow::too_large(size)],
        }
        .into());
    }
    let checked =
        workflow::parse_bytes(&bytes).map_err(|problems| WorkflowError::Invalid { problems })?;
    for w in &checked.warnings {
        eprintln!("warning: {w}");
    }
    let name = checked.definition.workflow.name.clone();
    if check {
        if out.quiet() {
            out.line(&name)?;
            return Ok(());
        }
        out.line(json!({"name": name, "valid": true, "warnings": checked.warnings.len()}))?;
        return Ok(());
    }
    // From the first node until the registry names them: GC keeps them (see `cas::gc`).
    let _pin = store.pin()?;
    let hash = checked.definition.store(store)?;
    // parse_bytes accepted the bytes as UTF-8 text: the source node keeps them as saved.
    let text = String::from_utf8_lossy(&bytes);
    let source = registry::store_source(store, &text)?;
    let status = registry::register_source(store.root(), &name, hash, Some(source), now_ms())?;
    let mut report = json!({"name": name, "hash": hash});
    let said = match status {
        Registered::New => {
            report["status"] = "new".into();
            format!("Registered workflow {name} ({hash}).")
        }
        Registered::Unchanged => {
            report["status"] = "unchanged".into();
            format!("Workflow {name} is unchanged ({hash}).")
        }
        Registered::Updated { previous } => {
            report["status"] = "updated".into();
            report["previous"] = previous.to_string().into();
            format!("Updated workflow {name}: {previous} → {hash}.")
        }
    };
    let text = format!("{said}\nNext: `uwf thread start {name} -p \"…\"` starts a thread on it.");
    out.said(&text, hash, &report)?;
    Ok(())
}
