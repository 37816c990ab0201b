//! `uwf thread …`: start, step, run and inspect threads.

use std::path::Path;

use serde_json::json;

use super::Out;
use crate::cas::{Store, builtin};
use crate::cli::error::{CliResult, CommandError, Context, bail, user_error};
use crate::engine::agent::interrupt;
use crate::engine::chain::{self, Entry};
use crate::engine::config;
use crate::engine::cycle::failure;
use crate::engine::cycle::human;
use crate::engine::cycle::lifecycle;
use crate::engine::cycle::step::{self, StepOptions};
use crate::engine::input::{self, Source};
use crate::engine::thread::index;
use crate::engine::thread::render;
use crate::engine::thread::run_files::RunFiles;
use crate::engine::thread::view::ThreadView;
use crate::engine::workflow::jsonata;
use crate::engine::workflow::moderator::{Moderator, Outcome};

mod args;
mod controls;
mod run;
pub(super) use args::{StartArgs, ThreadCommand};
pub(super) use controls::workdir;
pub(super) use run::{RunArgs, start_and_run};
use run::{print_notice, print_stepped, run_steps};
mod answer;
pub(super) mod author;
mod git_name;
mod list;
mod rebase;
mod show;
mod steps;
use steps::steps;
pub(super) mod status;
use list::list;

impl StartArgs {
    /// The prompt, from `-p TEXT`, `-p -` (stdin) or `--prompt-file`.
    pub(super) fn prompt(&self, root: &Path) -> CliResult<String> {
        Ok(
            match (self.prompt.as_deref(), self.prompt_file.as_deref()) {
                (Some("-"), _) => input::read_text(Source::Stdin, super::input_limit(root)?)?,
                (Some(p), _) => p.to_owned(),
                (None, Some(f)) => {
                    input::read_text(Source::File(Path::new(f)), super::input_limit(root)?)?
                }
                (None, None) => {
                    return Err(CommandError::usage(
                        "no prompt: give -p TEXT, -p - (stdin) or --prompt-file FILE",
                    ));
                }
            },
        )
    }

    /// Starts the thread with its agent context: returns `(workflow name, id)`.
    pub(super) fn start(&self, store: &Store, root: &Path) -> CliResult<(String, String)> {
        // Checked before the prompt is read (a bad name wastes no typing).
        let by = author::person(self.by.as_deref())?;
        self.start_by(store, root, by.as_deref())
    }

    /// [`StartArgs::start`] as `by`, already checked.
    pub(super) fn start_by(
        &self,
        store: &Store,
        root: &Path,
        by: Option<&str>,
    ) -> CliResult<(String, String)> {
        let prompt = self.prompt(root)?;
        let workdir = controls::workdir(self.workdir.as_deref())?;
        // A broken config.yaml does not stop a start (its steps say what is wrong, where); the
        // thread then keeps no agents of its own.
        let loaded = config::load(root);
        if let Err(e) = &loaded {
            eprintln!(
                "uwf: warning: {}; the thread's steps take the agents config.yaml names when they run",
                e.to_string().lines().next().unwrap_or_default()
            );
        }
        let config = loaded.as_ref().ok().map(|l| &l.config);
        let setting = (workdir.as_path(), config);
        let started = lifecycle::start_in(store, &self.workflow, &prompt, setting, by)?;
        controls::start_budget(root, &started.1, (self.max_tokens, self.max_cost), by)?;
        if self.queue {
            index::queue(root, &started.1)?;
        }
        Ok(started)
    }
}

pub(super) fn run(cmd: ThreadCommand, root: &Path, out: &mut Out) -> CliResult<()> {
    if matches!(cmd, ThreadCommand::Step { .. } | ThreadCommand::Run { .. }) {
        // Overlap the engine's one-time set-up with reading the store.
        jsonata::prewarm();
        // Ctrl-C, SIGTERM or SIGHUP stop the agent's group and leave the head where it is.
        interrupt::catch_stop_signals().context("cannot catch stop signals")?;
        failure::report_to(print_notice);
    }
    if let ThreadCommand::Live(args) = cmd {
        return super::live::run(args, root, out);
    }
    let store = crate::engine::storage::open_store(root)?;
    match cmd {
        ThreadCommand::Live(_) => unreachable!("handled above"),
        ThreadCommand::Start(args) => {
            let (workflow, id) = args.start(&store, root)?;
            let text = format!(
                "Started thread {id} ({workflow}).\nNext: `uwf thread run {id}` runs it to its \
                 end; `uwf thread step {id}` takes one step."
            );
            out.said(&text, &id, &json!({"workflow": workflow, "thread": id}))?;
        }
        ThreadCommand::Step { thread, agent, by } => {
            let by = author::runner(by.as_deref())?;
            let id = lifecycle::resolve_id(root, &thread)?;
            let config = load_config(root, agent.as_deref())?;
            let options = StepOptions {
                agent,
                passthrough: true,
                from_queue: false,
                by,
            };
            let stepped = step::step(&store, &config, &id, &options)?;
            print_stepped(&store, out, &stepped)?;
        }
        ThreadCommand::Run {
            thread,
            max_steps,
            agent,
            by,
        } => {
            let by = author::runner(by.as_deref())?;
            let id = lifecycle::resolve_id(root, &thread)?;
            run_steps(&store, &id, max_steps, (agent, by), out)?;
        }
        ThreadCommand::Show { thread } => show::show(&store, &thread, out)?,
        ThreadCommand::List {
            all,
            workflow,
            status,
            since,
            limit,
            before,
            search,
            tree,
            children,
        } => {
            let query = crate::engine::thread::listing::Query {
                all,
                workflow,
                status,
                since_ms: since,
                before: before.map(|b| b.trim().to_ascii_uppercase()),
                parent: None,
                top_level: !children,
                text: search.filter(|s| !s.is_empty()),
                // `--json` rows carry what each thread spent.
                usage: out.mode == crate::cli::terminal::output::Mode::Json && !tree,
            };
            list(&store, &query, limit, tree, out)?
        }
        ThreadCommand::Steps { thread } => {
            let id = lifecycle::resolve_id(root, &thread)?;
            let summary = lifecycle::summary(&store, &id)?;
            let view = ThreadView::at(&store, &id, summary.head)?;
            // Every step listed stands for nodes that are still there (a stat each).
            chain::check_start(&store, &view.chain)?;
            for entry in &view.chain.steps {
                chain::check_entry(&store, entry)?;
            }
            steps(&store, &view, out)?;
        }
        ThreadCommand::Read {
            thread,
            quota,
            before,
        } => {
            let id = lifecycle::resolve_id(root, &thread)?;
            let summary = lifecycle::summary(&store, &id)?;
            let view = ThreadView::at(&store, &id, summary.head)?;
            let upto = match before {
                Some(h) => {
                    let h = lifecycle::resolve_step(&store, &h)?;
                    view.chain
                        .steps
                        .iter()
                        .position(|s| s.hash == h)
                        .ok_or_else(|| user_error!("{h} is not a step of thread {id}"))?
                }
                None => view.chain.steps.len(),
            };
            // Each step rendered stands for nodes that are still there (a stat each), and its
            // detail and body are read: the first that is not is named, and nothing printed.
            chain::check_start(&store, &view.chain)?;
            let damage = std::cell::RefCell::new(None);
            let body_of = |e: &Entry| match render::checked_body(&store, e) {
                Ok(body) => body,
                Err(error) => {
                    damage.borrow_mut().get_or_insert(error);
                    None
                }
            };
            let files = RunFiles::new(root, &id);
            let mut text =
                render::transcript(&view, &summary.status_line(&files), upto, quota, &body_of);
            if let Some(error) = damage.into_inner() {
                return Err(error.into());
            }
            let descendants = lifecycle::descendants(&store, &id);
            if !descendants.is_empty() {
                text.push_str("\n## Sub-threads\n\n");
                for (depth, s) in descendants {
                    text.push_str(&format!(
                        "{}- {} `{}`: {} ({} step{})\n",
                        "  ".repeat(depth - 1),
                        s.workflow,
                        s.id,
                        s.status,
                        s.steps,
                        if s.steps == 1 { "" } else { "s" }
                    ));
                }
            }
            if out.json_asked {
                // `--json`: the same Markdown, with each step's parts as data.
                let steps: Vec<serde_json::Value> = view.chain.steps[..upto]
                    .iter()
                    .enumerate()
                    .map(|(i, e)| {
                        json!({"index": i + 1, "hash": e.hash.to_string(), "role": e.role,
                               "agent": e.agent, "at": e.timestamp, "output": e.output(),
                               "body": render::checked_body(&store, e).ok().flatten()})
                    })
                    .collect();
                out.line(json!({"thread": id, "workflow": view.workflow.name,
                                "task": view.chain.start.prompt, "steps": steps,
                                "markdown": text}))?;
                return Ok(());
            }
            out.page();
            out.text(&text)?;
        }
        ThreadCommand::Fork { step, by } => {
            let by = author::person(by.as_deref())?;
            let from = lifecycle::resolve_step(&store, &step)?;
            let (workflow, id, head) = lifecycle::fork(&store, from, by.as_deref())?;
            let text = format!(
                "Forked thread {id} ({workflow}) at step {head}.\nNext: `uwf thread run {id}` \
                 goes on from there."
            );
            let json = json!({"workflow": workflow, "thread": id, "head": head.to_string()});
            out.said(&text, &id, &json)?;
        }
        ThreadCommand::StepDetails { step } => {
            let hash = lifecycle::resolve_step(&store, &step)?;
            let node = store.get(hash)?;
            if node.type_hash != builtin::hash_of("step") {
                bail!("{hash} is not a step node");
            }
            let step = chain::read_step(&node)?;
            if out.quiet() {
                out.line(step.detail)?;
            } else if out.json_asked {
                out.line(store.get_payload(step.detail)?)?;
            } else {
                out.text(&render::detail_yaml(&store, step.detail)?)?;
            }
        }
        ThreadCommand::Diff { a, b } => {
            let a = lifecycle::resolve_step(&store, &a)?;
            let b = lifecycle::resolve_step(&store, &b)?;
            let diff = render::step_diff(&store, a, b)?;
            out.page();
            if out.color() {
                out.text(&super::terminal::style::diff(&diff))?;
            } else {
                out.text(&diff)?;
            }
        }
        ThreadCommand::Log { thread } => {
            let id = lifecycle::resolve_id(root, &thread)?;
            let files = crate::engine::thread::run_files::RunFiles::new(root, &id);
            let bytes = files
                .read_text_all(crate::pg::RunFileKind::Log)
                .map_err(|e| {
                    CommandError::from(e).context(format!("cannot read the log of thread {id}"))
                })?;
            if out.json_asked {
                out.line(json!({"thread": id, "log": String::from_utf8_lossy(&bytes)}))?;
            } else if bytes.is_empty() {
                eprintln!("uwf: thread {id} has no log yet (no step has run an agent)");
            } else {
                out.page();
                out.text(&String::from_utf8_lossy(&bytes))?;
            }
        }
        ThreadCommand::Publish { step } => {
            let hash = lifecycle::resolve_step(&store, &step)?;
            let stepped = crate::engine::cycle::publish::publish_node(&store, hash)?;
            print_stepped(&store, out, &stepped)?;
        }
        ThreadCommand::Queue { thread, off } => {
            let id = lifecycle::resolve_id(root, &thread)?;
            let change = if off { index::dequeue } else { index::queue };
            change(root, &id)?;
            out.result(&id, &json!({"thread": id, "queued": !off}))?;
        }
        ThreadCommand::Pause { thread, by } => {
            let by = author::person(by.as_deref())?;
            controls::pause(&store, &thread, (true, by.as_deref()), out)?
        }
        ThreadCommand::Budget {
            thread,
            max_tokens,
            max_cost,
            by,
        } => {
            let by = author::person(by.as_deref())?;
            controls::budget(&store, &thread, (max_tokens, max_cost), by.as_deref(), out)?
        }
        ThreadCommand::Resume { thread, by } => {
            let by = author::person(by.as_deref())?;
            controls::pause(&store, &thread, (false, by.as_deref()), out)?
        }
        ThreadCommand::Rebind {
            thread,
            bindings,
            by,
        } => {
            let by = author::person(by.as_deref())?;
            controls::rebind(&store, &thread, &bindings, by.as_deref(), out)?
        }
        ThreadCommand::Kill { thread, by } => {
            let by = author::person(by.as_deref())?;
            let id = lifecycle::resolve_id(root, &thread)?;
            let head = lifecycle::kill(&store, &id, by.as_deref())?;
            out.result(
                &id,
                &json!({"thread": id, "head": head.to_string(), "status": "killed"}),
            )?;
        }
        ThreadCommand::Rebase(args) => rebase::run(&store, args, out)?,
        ThreadCommand::Eval {
            thread,
            expression,
            max_memory,
        } => {
            let id = lifecycle::resolve_id(root, &thread)?;
            let summary = lifecycle::summary(&store, &id)?;
            let view = ThreadView::at(&store, &id, summary.head)?;
            let expr = jsonata::compile(&expression)?;
            let mut limits = jsonata::Limits::default();
            if let Some(max) = max_memory {
                limits.max_memory = max;
            }
            if let Some(v) = expr.evaluate(&view.chain.context(), &[], &limits)? {
                if out.json_asked {
                    out.line(v)?;
                } else {
                    out.json_pretty(&v)?;
                }
            }
        }
        ThreadCommand::Why { thread } => {
            let id = lifecycle::resolve_id(root, &thread)?;
            let summary = lifecycle::summary(&store, &id)?;
            let view = ThreadView::at(&store, &id, summary.head)?;
            let context = view.chain.context();
            let position = crate::engine::workflow::moderator::position(&context).to_owned();
            let moderator = Moderator::new(view.workflow.clone())?;
            let (trace, decision) = moderator.explain(&context)?;
            if out.json_asked {
                // The dashboard's shape, with the thread.
                let tried: Vec<serde_json::Value> = trace.iter().map(|t| t.to_json()).collect();
                let (next, error) = match &decision {
                    Ok(next) => (Some(next.clone()), None),
                    Err(e) => (None, Some(crate::advice::with_hints(e))),
                };
                out.line(json!({"thread": id, "position": position,
                    "steps": view.chain.steps.len(), "trace": tried, "next": next, "error": error}))?;
                return decision.map(drop).map_err(Into::into);
            }
            if out.quiet() {
                // The role a step now would take; none (and the error) when it would fail.
                return Ok(out.line(decision?)?);
            }
            out.line(format!(
                "thread {id} is at `{position}` ({})",
                lifecycle::plural(view.chain.steps.len(), "step")
            ))?;
            for (i, t) in trace.iter().enumerate() {
                let verdict = match &t.outcome {
                    Outcome::Always => "always matches".to_owned(),
                    Outcome::Evaluated(Some(v)) => {
                        format!("= {v}{}", if t.outcome.matched() { " (match)" } else { "" })
                    }
                    Outcome::Evaluated(None) => "= undefined".to_owned(),
                    Outcome::Failed(e) => format!("error: {e}"),
                    Outcome::NotTried => "not tried".to_owned(),
                    Outcome::OnFailure => "the step failed, taken first".to_owned(),
                };
                let cond = match (&t.condition, &t.expression) {
                    (Some(c), Some(e)) => format!("{c} `{e}`"),
                    _ if t.outcome == Outcome::OnFailure => "onFailure".to_owned(),
                    _ => "null".to_owned(),
                };
                out.line(format!("  {}. → {:<12} {cond}: {verdict}", i + 1, t.target))?;
            }
            // A step now would fail exactly when this does, with the same error (exit 1).
            match decision {
                Ok(next) => out.line(format!("next: {next}"))?,
                Err(e) => {
                    out.line("next: none — a step now would fail")?;
                    return Err(e.into());
                }
            }
        }
        ThreadCommand::Question { thread } => {
            let id = lifecycle::resolve_id(root, &thread)?;
            let question = human::question(&store, &id)?;
            if out.quiet() {
                out.line(&question.role)?;
            } else if out.json_asked {
                out.line(json!({"thread": id, "role": question.role, "prompt": question.prompt}))?;
            } else {
                out.text(&question.prompt)?;
            }
        }
        ThreadCommand::Answer {
            thread,
            stdin,
            file,
            by,
        } => {
            answer::command(&store, &thread, (stdin, file), by, out)?;
        }
    }
    Ok(())
}

/// Loads the configuration for steps. With no config.yaml and no `--agent`, the steps use the
/// offline default agent: say so once (per command, not per step).
fn load_config(root: &Path, agent: Option<&str>) -> CliResult<config::Loaded> {
    let loaded = config::load(root)?;
    if !loaded.from_file && agent.is_none() {
        eprintln!(
            "uwf: no config.yaml in {}; using the offline built-in agents (default agent: dry)",
            root.display()
        );
    }
    Ok(loaded)
}
