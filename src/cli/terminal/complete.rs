//! Shell completion that knows the store: thread ids (with their prompts), step references
//! (`THREAD:INDEX`), workflow names and versions, roles and agents, as jj and git complete
//! revisions.
//!
//! The shell runs `COMPLETE=<shell> uwf -- <words>` on every TAB (the script `uwf completions
//! SHELL` prints registers that); [`on_request`] answers it before the command line is parsed.
//! The command tree is clap's own, with a completer attached to each argument that names
//! something in the store, by what the argument is (see [`kind`]): every `thread` argument,
//! every `STEP`, every workflow name, and so on, so a new command's arguments complete too.
//!
//! Architecture Invariant: a completer never fails loudly and never creates a store. It reads
//! the store of `--root` (as typed on the line) or of the environment, as any command does; a
//! store that is missing or unreadable, or any error, gives no candidates. It offers at most
//! [`MAX_THREADS`] threads (the newest) and reads a prompt only for the threads that match
//! what is typed.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::PathBuf;

use clap::{Arg, ArgMatches, Command, CommandFactory};
use clap_complete::engine::{ArgValueCompleter, CompletionCandidate, PathCompleter};
use clap_complete::env::{self, EnvCompleter, Shells};

use super::output::shorten;
use crate::cas::Store;
use crate::cli::Cli;
use crate::engine::chain;
use crate::engine::thread::listing::{self, Query};
use crate::engine::thread::summary;
use crate::engine::workflow::Workflow;
use crate::engine::workflow::registry;

/// The most threads offered for one TAB: the newest.
const MAX_THREADS: usize = 200;

/// The most steps of one thread offered for one TAB: the newest.
const MAX_STEPS: usize = 500;

/// How much of a prompt or description a candidate shows.
const HELP_CHARS: usize = 60;

/// Answers the shell and exits when `COMPLETE` is set (the registered script calls uwf so);
/// otherwise returns and the command runs.
pub(crate) fn on_request() {
    clap_complete::CompleteEnv::with_factory(command)
        .shells(SHELLS)
        .complete();
}

/// clap_complete's shells, with bash's adapter replaced by [`Bash`].
const SHELLS: Shells<'static> =
    Shells(&[&Bash, &env::Elvish, &env::Fish, &env::Powershell, &env::Zsh]);

/// Bash splits words at `:` (it is in `COMP_WORDBREAKS`), so `T:2` reaches a completer as
/// `T`, `:`, `2`, and a candidate replaces only what follows the last colon. This adapter
/// keeps a lone `:` word in what the script passes, joins the pieces back into one word for
/// clap, and prints candidates from after the colon, as git's completion does
/// (`__ltrim_colon_completions`).
struct Bash;

/// The line of clap's bash script that replaces the word under the cursor by what precedes
/// the cursor, and what it becomes: the same, except for a lone `:`, kept for [`rejoin`].
const BASH_CURSOR_WORD: (&str, &str) = (
    r#"if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
        words[COMP_CWORD]="$2""#,
    r#"if [[ "${BASH_VERSINFO[0]}" -ge 4 && "${COMP_WORDS[COMP_CWORD]}" != ":" ]]; then
        words[COMP_CWORD]="$2""#,
);

impl EnvCompleter for Bash {
    fn name(&self) -> &'static str {
        env::Bash.name()
    }

    fn is(&self, name: &str) -> bool {
        env::Bash.is(name)
    }

    fn write_registration(
        &self,
        var: &str,
        name: &str,
        bin: &str,
        completer: &str,
        buf: &mut dyn Write,
    ) -> std::io::Result<()> {
        let mut script = Vec::new();
        env::Bash.write_registration(var, name, bin, completer, &mut script)?;
        let script = String::from_utf8_lossy(&script);
        let (from, to) = BASH_CURSOR_WORD;
        buf.write_all(script.replace(from, to).as_bytes())
    }

    fn write_complete(
        &self,
        cmd: &mut Command,
        args: Vec<OsString>,
        current_dir: Option<&std::path::Path>,
        buf: &mut dyn Write,
    ) -> std::io::Result<()> {
        let index = std::env::var("_CLAP_COMPLETE_INDEX")
            .ok()
            .and_then(|i| i.parse().ok())
            .unwrap_or_default();
        let ifs = std::env::var("_CLAP_IFS").unwrap_or_else(|_| "\n".to_owned());
        let typed = args.get(index).cloned().unwrap_or_default();
        let (args, index) = rejoin(args, index);
        // What bash replaces is what follows the last colon of the joined word.
        let joined = args.get(index).map(|w| w.to_string_lossy().into_owned());
        let cut = match joined {
            Some(word) if word.contains(':') && typed != word.as_str() => {
                word[..=word.rfind(':').expect("contains a colon")].to_owned()
            }
            _ => String::new(),
        };
        let completions = clap_complete::engine::complete(cmd, args, index, current_dir)?;
        let values: Vec<String> = completions
            .iter()
            .map(|c| {
                let value = c.get_value().to_string_lossy();
                value.strip_prefix(&cut).unwrap_or(&value).to_owned()
            })
            .collect();
        buf.write_all(values.join(&ifs).as_bytes())
    }
}

/// Joins words bash split at colons (`T`, `:`, `2` → `T:2`; `T`, `:` → `T:`), and moves
/// `index` (the word under the cursor) with them. Fish and zsh never pass a lone `:`.
fn rejoin(words: Vec<OsString>, index: usize) -> (Vec<OsString>, usize) {
    let mut joined: Vec<OsString> = Vec::with_capacity(words.len());
    let mut at = index;
    let mut glue = false;
    for (i, word) in words.into_iter().enumerate() {
        let colon = word == ":";
        match joined.last_mut() {
            Some(last) if (colon || glue) && i > 1 => {
                last.push(&word);
                if i <= index {
                    at -= 1;
                }
            }
            _ => joined.push(word),
        }
        glue = colon;
    }
    (joined, at)
}

/// Writes the registration script for `shell` (a name clap_complete knows: bash, zsh, fish,
/// elvish, powershell): the same text `COMPLETE=<shell> uwf` prints.
pub(crate) fn registration(shell: &str, buf: &mut Vec<u8>) -> std::io::Result<()> {
    let Some(completer) = SHELLS.completer(shell) else {
        return Err(std::io::Error::other(format!(
            "no completion for shell `{shell}`"
        )));
    };
    // The program the script calls back: this one, as it was named (as `COMPLETE=` does).
    let program = std::env::args_os()
        .next()
        .map(PathBuf::from)
        .filter(|p| p.components().count() > 1)
        .and_then(|p| std::env::current_dir().ok().map(|d| d.join(p)))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| "uwf".to_owned());
    completer.write_registration("COMPLETE", "uwf", "uwf", &program, buf)
}

/// The command tree with the store's completers attached.
fn command() -> Command {
    let mut cmd = Cli::command();
    // Subcommands are deferred: build them so their arguments exist to attach to.
    cmd.build();
    attach(cmd, "uwf")
}

fn attach(mut cmd: Command, path: &str) -> Command {
    let found: Vec<(clap::Id, Kind)> = cmd
        .get_arguments()
        .filter_map(|arg| kind(path, arg).map(|k| (arg.get_id().clone(), k)))
        .collect();
    for (id, kind) in found {
        cmd = cmd.mut_arg(id, |arg| arg.add(kind.value_completer()));
    }
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_owned())
        .collect();
    for name in names {
        let inner = format!("{path} {name}");
        cmd = cmd.mut_subcommand(&name, |sub| attach(sub, &inner));
    }
    cmd
}

/// What an argument names in the store.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Thread,
    Step,
    Workflow,
    /// A version (hash) of the workflow named on the line.
    Version,
    /// A role of the workflow of the thread named on the line.
    Role,
    /// `ROLE=AGENT` pairs of `thread rebind`.
    Binding,
    Agent,
    /// A file on disk (`FILE`: a workflow to put, a prompt or answer file); folders are
    /// offered too, to type a path through them (and `workflow put` takes folders).
    File,
    /// A folder on disk (`DIR`).
    Dir,
}

/// What the argument `arg` of the command at `path` (`uwf thread show`) names, if anything.
fn kind(path: &str, arg: &Arg) -> Option<Kind> {
    let id = arg.get_id().as_str();
    let value_names = arg.get_value_names().unwrap_or_default();
    let value = match value_names {
        [one] => Some(one.as_str()),
        _ => None,
    };
    Some(match (path, id, value) {
        (_, _, Some("STEP" | "STEP-A" | "STEP-B")) => Kind::Step,
        (_, "thread", _) | (_, _, Some("THREAD")) => Kind::Thread,
        (_, "role", _) => Kind::Role,
        ("uwf thread rebind", "bindings", _) => Kind::Binding,
        (_, "agent", _) => Kind::Agent,
        (_, "workflow", _) => Kind::Workflow,
        (
            "uwf workflow history"
            | "uwf workflow rollback"
            | "uwf workflow rm"
            | "uwf agent workflow",
            "name",
            _,
        ) => Kind::Workflow,
        ("uwf workflow rollback", "hash", _) => Kind::Version,
        (_, _, Some("FILE")) => Kind::File,
        (_, _, Some("DIR")) => Kind::Dir,
        _ => return None,
    })
}

impl Kind {
    /// The completer of an argument of this kind: paths from the filesystem (files and folders
    /// for a file, so a path can be typed through its folders), else names from the store.
    fn value_completer(self) -> ArgValueCompleter {
        match self {
            Kind::File => ArgValueCompleter::new(PathCompleter::any()),
            Kind::Dir => ArgValueCompleter::new(PathCompleter::dir()),
            store => ArgValueCompleter::new(store.completer()),
        }
    }

    fn completer(self) -> impl Fn(&OsStr) -> Vec<CompletionCandidate> + Send + Sync + 'static {
        move |current: &OsStr| {
            let current = current.to_string_lossy();
            let Some(line) = Line::read() else {
                return Vec::new();
            };
            let Some(store) = line.store() else {
                return Vec::new();
            };
            match self {
                Kind::Thread => threads(&store, &current, ""),
                Kind::Step => steps(&store, &current),
                Kind::Workflow => workflows(&store, &current),
                Kind::Version => versions(&store, &line, &current),
                Kind::Role => roles(&store, &line, &current, ""),
                Kind::Binding => bindings(&store, &line, &current),
                Kind::Agent => agents(&store, &current),
                // Completed from the filesystem ([`Kind::value_completer`]).
                Kind::File | Kind::Dir => Vec::new(),
            }
        }
    }
}

/// The words of the command line before the one being completed, parsed as far as they go.
struct Line {
    matches: ArgMatches,
}

impl Line {
    /// The shell passes `uwf -- uwf thread show 01J`; bash and zsh say which word the cursor
    /// is in (`_CLAP_COMPLETE_INDEX`), fish completes the last. Words after the cursor count
    /// too (`uwf thread show <TAB> --root DIR`).
    fn read() -> Option<Line> {
        let args: Vec<OsString> = std::env::args_os().collect();
        let words = args[args.iter().position(|a| a == "--")? + 1..].to_vec();
        let index = std::env::var("_CLAP_COMPLETE_INDEX")
            .ok()
            .and_then(|i| i.parse().ok())
            .unwrap_or(words.len().saturating_sub(1))
            .min(words.len());
        let (words, index) = rejoin(words, index);
        // The word under the cursor is left out: it is what is being completed.
        let others = words[..index]
            .iter()
            .chain(words.get(index + 1..).unwrap_or_default());
        let matches = Cli::command()
            .ignore_errors(true)
            .try_get_matches_from(others)
            .ok()?;
        Some(Line { matches })
    }

    /// The innermost subcommand's matches.
    fn leaf(&self) -> &ArgMatches {
        let mut at = &self.matches;
        while let Some((_, sub)) = at.subcommand() {
            at = sub;
        }
        at
    }

    /// A string argument of the innermost subcommand, when it is there.
    fn value(&self, id: &str) -> Option<String> {
        self.leaf()
            .try_get_one::<String>(id)
            .ok()
            .flatten()
            .cloned()
    }

    /// The store the command would use, when there is one: `--root`, else the environment's.
    /// A root that does not exist is no store (unless the database is named), and is not made.
    fn store(&self) -> Option<Store> {
        let typed = self
            .matches
            .try_get_one::<PathBuf>("root")
            .ok()
            .flatten()
            .cloned();
        let root = match typed {
            Some(root) => root,
            None => crate::cas::store::default_root().ok()?,
        };
        let remote =
            std::env::var_os(crate::engine::storage::URL_VAR).is_some_and(|u| !u.is_empty());
        if !root.is_dir() && !remote {
            return None;
        }
        crate::engine::storage::open_store(&root).ok()
    }
}

/// Whether `candidate` completes what is typed (thread ids and hashes read either case).
fn extends(candidate: &str, typed: &str) -> bool {
    candidate
        .to_ascii_uppercase()
        .starts_with(&typed.to_ascii_uppercase())
}

fn candidate(value: impl Into<OsString>, help: impl Into<String>) -> CompletionCandidate {
    let help: String = help.into();
    CompletionCandidate::new(value).help((!help.is_empty()).then(|| help.into()))
}

/// The first line of `text`, shortened.
fn gist(text: &str) -> String {
    shorten(text.lines().next().unwrap_or_default().trim(), HELP_CHARS)
}

/// The newest threads whose id starts with `typed`, each `<id><suffix>`, described by its
/// status and prompt.
fn threads(store: &Store, typed: &str, suffix: &str) -> Vec<CompletionCandidate> {
    let mut found = Vec::new();
    let query = Query {
        all: true,
        ..Query::default()
    };
    let listed = listing::list_page(store, &query, |listed| {
        if extends(&listed.summary.id, typed) {
            found.push(listed.summary);
        }
        found.len() < MAX_THREADS
    });
    if listed.is_err() {
        return Vec::new();
    }
    found
        .into_iter()
        .map(|s| {
            let prompt = chain::load(store, s.head)
                .map(|c| gist(&c.start.prompt))
                .unwrap_or_default();
            candidate(
                format!("{}{suffix}", s.id),
                format!("{} {}: {prompt}", s.workflow, s.status),
            )
        })
        .collect()
}

/// Step references: `THREAD:INDEX` for the steps of the thread typed before the colon; without
/// a colon, the matching threads as `THREAD:`, or the steps at once when only one matches.
fn steps(store: &Store, typed: &str) -> Vec<CompletionCandidate> {
    let (thread, id) = match typed.rsplit_once(':') {
        Some((thread, _)) => match summary::resolve_id(store.root(), thread) {
            Ok(id) => (thread.to_owned(), id),
            Err(_) => return Vec::new(),
        },
        None => {
            let mut matching = threads(store, typed, ":");
            if matching.len() != 1 {
                return matching;
            }
            let only = matching
                .remove(0)
                .get_value()
                .to_string_lossy()
                .into_owned();
            let id = only.trim_end_matches(':').to_owned();
            (id.clone(), id)
        }
    };
    let Ok(found) = summary::summary(store, &id) else {
        return Vec::new();
    };
    let Ok(chain) = chain::load(store, found.head) else {
        return Vec::new();
    };
    let mut all = Vec::new();
    let count = chain.steps.len();
    if count > 0 {
        let last = &chain.steps[count - 1];
        all.push(candidate(
            format!("{thread}:-1"),
            format!("the head: {} by {}", last.role, last.agent),
        ));
    }
    let newest = count.saturating_sub(MAX_STEPS);
    for (i, step) in chain.steps.iter().enumerate().skip(newest).rev() {
        all.push(candidate(
            format!("{thread}:{}", i + 1),
            format!("{} by {}", step.role, step.agent),
        ));
    }
    all.push(candidate(
        format!("{thread}:0"),
        format!("the start: {}", gist(&chain.start.prompt)),
    ));
    all.retain(|c| extends(&c.get_value().to_string_lossy(), typed));
    all
}

/// Registered workflow names, described by the current version's description.
fn workflows(store: &Store, typed: &str) -> Vec<CompletionCandidate> {
    let Ok(registry) = registry::list(store.root()) else {
        return Vec::new();
    };
    registry
        .into_iter()
        .filter(|(name, _)| name.starts_with(typed))
        .map(|(name, entry)| {
            let about = Workflow::load(store, entry.hash)
                .ok()
                .and_then(|w| w.description)
                .map(|d| gist(&d))
                .unwrap_or_else(|| format!("{} roles", role_count(store, entry.hash)));
            candidate(name, about)
        })
        .collect()
}

fn role_count(store: &Store, hash: crate::cas::Hash) -> usize {
    Workflow::load(store, hash).map_or(0, |w| w.roles.len())
}

/// The earlier versions of the workflow named on the line (`workflow rollback NAME HASH`).
fn versions(store: &Store, line: &Line, typed: &str) -> Vec<CompletionCandidate> {
    let Some(name) = line.value("name") else {
        return Vec::new();
    };
    let Ok(entry) = registry::entry(store.root(), &name) else {
        return Vec::new();
    };
    let now = crate::cas::store::now_ms();
    entry
        .history
        .iter()
        .rev()
        .map(|v| (v.hash.to_string(), v.registered_at))
        .filter(|(hash, _)| extends(hash, typed))
        .map(|(hash, at)| candidate(hash, format!("registered {}", super::output::ago(at, now))))
        .collect()
}

/// The roles of the workflow of the thread named on the line, the one the moderator picks next
/// first; each `<role><suffix>`.
fn roles(store: &Store, line: &Line, typed: &str, suffix: &str) -> Vec<CompletionCandidate> {
    let Some(thread) = line.value("thread") else {
        return Vec::new();
    };
    let Ok(id) = summary::resolve_id(store.root(), &thread) else {
        return Vec::new();
    };
    let Ok(found) = summary::summary(store, &id) else {
        return Vec::new();
    };
    let Ok(workflow) = Workflow::load(store, found.workflow_hash) else {
        return Vec::new();
    };
    let next = found.next.as_deref();
    let mut all: Vec<(bool, CompletionCandidate)> = workflow
        .roles
        .iter()
        .filter(|(name, _)| name.starts_with(typed))
        .map(|(name, role)| {
            let about = role.description.as_deref().or(role.goal.as_deref());
            let about = about.map(gist).unwrap_or_default();
            let is_next = next == Some(name.as_str());
            let help = match (is_next, about.is_empty()) {
                (true, true) => "next".to_owned(),
                (true, false) => format!("next: {about}"),
                (false, _) => about,
            };
            (!is_next, candidate(format!("{name}{suffix}"), help))
        })
        .collect();
    all.sort_by_key(|(later, _)| *later);
    all.into_iter().map(|(_, c)| c).collect()
}

/// `ROLE=AGENT`: roles as `ROLE=` first, then the agents after the `=`.
fn bindings(store: &Store, line: &Line, typed: &str) -> Vec<CompletionCandidate> {
    match typed.split_once('=') {
        None => roles(store, line, typed, "="),
        Some((role, agent)) => agents(store, agent)
            .into_iter()
            .map(|c| c.add_prefix(format!("{role}=")))
            .collect(),
    }
}

/// The agents config.yaml configures, and the built-in ones, described by their command.
fn agents(store: &Store, typed: &str) -> Vec<CompletionCandidate> {
    let config = crate::engine::config::load(store.root())
        .map(|l| l.config)
        .unwrap_or_default();
    config
        .agents()
        .into_iter()
        .filter(|(name, _)| name.starts_with(typed))
        .map(|(name, agent)| {
            let command = std::iter::once(agent.command.as_str())
                .chain(agent.args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" ");
            candidate(name, gist(&command))
        })
        .collect()
}
