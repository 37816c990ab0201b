//! `uwf thread answer T` for a person at a terminal: instead of waiting silently on stdin, it
//! opens `$VISUAL` or `$EDITOR` (else `vi`) on a template made from the role's schema, as `git
//! commit` does — the task and each field's type and description as `#` comments, required
//! fields filled with a value to change, optional ones commented out. A refused answer opens the
//! editor again with the reason on top and the text as it was; an answer left empty (only
//! comments) sends nothing.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use super::run::print_stepped;
use crate::cas::Store;
use crate::cli::Out;
use crate::cli::error::{CliResult, CommandError, user_error};
use crate::engine::agent::minimal::minimal;
use crate::engine::agent::question;
use crate::engine::config;
use crate::engine::config::Config;
use crate::engine::cycle::human::{self, HumanError};
use crate::engine::cycle::lifecycle;
use crate::engine::cycle::step::Stepped;
use crate::engine::input::{self, Source};

/// `uwf thread answer`: the answer from `-f FILE` or stdin, or, for a person at a terminal who
/// names neither, from their editor; then the step it made, as every step is printed.
pub(super) fn command(
    store: &Store,
    thread: &str,
    (stdin, file): (Option<String>, Option<String>),
    by: Option<String>,
    out: &mut Out,
) -> CliResult<()> {
    // The name is checked before any input is read (a bad one wastes no typing).
    let by = super::author::person(by.as_deref())?;
    let root = store.root();
    let id = lifecycle::resolve_id(root, thread)?;
    let config = config::load(root)?;
    let named = file.is_some() || stdin.is_some();
    let stepped = if !named && std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        match in_editor(store, &config.config, &id, by.as_deref())? {
            Some(stepped) => stepped,
            None => return Ok(()),
        }
    } else {
        let limit = input::max_input(&config.config)?;
        // Too large an answer is refused before anything is stored (not even its text).
        let text = input::read_text(Source::of(file.as_deref().unwrap_or("-")), limit)?;
        human::answer(store, &config.config, &id, &text, by.as_deref())?
    };
    print_stepped(store, out, &stepped)
}

/// The comment lines' marker.
const COMMENT: char = '#';

/// Asks the person for an answer in their editor until one is accepted or they leave it empty.
/// `Ok(None)`: nothing sent.
fn in_editor(
    store: &Store,
    config: &Config,
    id: &str,
    by: Option<&str>,
) -> CliResult<Option<Stepped>> {
    let asked = human::question(store, id)?;
    let dir = tempfile::Builder::new()
        .prefix("uwf-answer-")
        .tempdir()
        .map_err(|e| user_error!("cannot make a file for the answer: {e}"))?;
    let path = dir.path().join("ANSWER.yaml");
    let mut text = template(id, &asked.role, &asked.task, &asked.schema, &asked.fields);
    let mut problem: Option<String> = None;
    loop {
        let shown = match &problem {
            Some(problem) => with_problem(problem, &text),
            None => text.clone(),
        };
        std::fs::write(&path, &shown)
            .map_err(|e| user_error!("cannot write {}: {e}", path.display()))?;
        edit(&path)?;
        let written = std::fs::read_to_string(&path)
            .map_err(|e| user_error!("cannot read {}: {e}", path.display()))?;
        let answer = without_comments(&written);
        if answer.trim().is_empty() {
            eprintln!("uwf: the answer is empty: nothing was sent; thread {id} still waits");
            return Ok(None);
        }
        match human::answer(store, config, id, &answer, by) {
            Ok(stepped) => return Ok(Some(stepped)),
            Err(e @ (HumanError::Refused { .. } | HumanError::Empty)) => {
                eprintln!("uwf: the answer was refused; the editor opens again with why");
                problem = Some(crate::advice::with_hints(&e));
                text = without_problem(&written);
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Runs the person's editor on `path` and waits for it.
fn edit(path: &Path) -> CliResult<()> {
    let editor = ["VISUAL", "EDITOR"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .find(|e| !e.trim().is_empty())
        .unwrap_or_else(|| "vi".to_owned());
    // Through the shell, so `EDITOR="code --wait"` works as it does for git.
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(path)
        .status()
        .map_err(|e| user_error!("cannot start the editor `{editor}`: {e}"))?;
    if !status.success() {
        return Err(CommandError::user(format!(
            "the editor `{editor}` ended with {status}: nothing was sent"
        ))
        .hint("set EDITOR (or VISUAL) to the editor you use, or answer with `-f FILE` or a pipe"));
    }
    Ok(())
}

/// The template a person fills in.
pub(super) fn template(
    id: &str,
    role: &str,
    task: &str,
    schema: &Value,
    order: &[String],
) -> String {
    let mut out = format!(
        "# Answer thread {id} as `{role}`. Lines starting with {COMMENT} are left out.\n\
         # Save and close the editor to send the answer; leave it empty to send nothing.\n#\n"
    );
    for line in task.trim_end().lines().take(12) {
        out.push_str(&format!("# {line}\n").replace("# \n", "#\n"));
    }
    out.push_str("#\n");
    let smallest = minimal(schema);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let properties = schema.get("properties").and_then(Value::as_object);
    let (Some(properties), described) = (properties, question::fields(schema, order)) else {
        out.push_str(&yaml_of(&smallest));
        return out;
    };
    let names = crate::engine::workflow::field_order::ordered(schema, order);
    for ((name, property), described) in names
        .iter()
        .map(|n| (n, &properties[n.as_str()]))
        .zip(described)
    {
        out.push_str(&format!("\n# {}\n", described.replace('`', "")));
        let value = smallest
            .get(name)
            .cloned()
            .unwrap_or_else(|| minimal(property));
        let line = yaml_of(&serde_json::json!({ name: value }));
        if required.contains(&name.as_str()) {
            out.push_str(&line);
        } else {
            for l in line.lines() {
                out.push_str(&format!("{COMMENT} {l}\n"));
            }
        }
    }
    out
}

/// A value as YAML lines.
fn yaml_of(value: &Value) -> String {
    serde_yaml::to_string(value).unwrap_or_else(|_| format!("{value}\n"))
}

/// The answer without comment lines.
fn without_comments(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with(COMMENT))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The marker line that starts a refusal shown on top of the template.
const PROBLEM: &str = "# The answer was refused:";

fn with_problem(problem: &str, text: &str) -> String {
    let mut out = format!("{PROBLEM}\n");
    for line in problem.lines() {
        out.push_str(&format!("#   {line}\n"));
    }
    out.push_str("#\n");
    out.push_str(text);
    out
}

/// The text without an earlier refusal's lines on top.
fn without_problem(text: &str) -> String {
    if !text.starts_with(PROBLEM) {
        return text.to_owned();
    }
    let mut lines = text.lines().skip(1).peekable();
    while lines.peek().is_some_and(|l| l.starts_with("#   ")) {
        lines.next();
    }
    if lines.peek() == Some(&"#") {
        lines.next();
    }
    lines.map(|l| format!("{l}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_template_fills_required_fields_and_comments_out_the_rest() {
        let schema = json!({
            "type": "object",
            "properties": {
                "approved": { "type": "boolean", "description": "Ship it?" },
                "comments": { "type": "string" }
            },
            "required": ["approved"]
        });
        let t = template("T1", "approver", "Release notes\n\nfor 2.0", &schema, &[]);
        assert!(t.starts_with("# Answer thread T1 as `approver`."), "{t}");
        assert!(t.contains("# Release notes\n#\n# for 2.0\n"), "{t}");
        assert!(
            t.contains("# approved (true or false, required): Ship it?\napproved: false\n"),
            "{t}"
        );
        assert!(t.contains("# comments (string)\n# comments: ''\n"), "{t}");
        assert_eq!(without_comments(&t).trim(), "approved: false");
    }

    #[test]
    fn a_refusal_goes_on_top_and_comes_off_again() {
        let text = "approved: yes\n";
        let shown = with_problem("at /approved: \"yes\" is not of type \"boolean\"", text);
        assert!(shown.starts_with(PROBLEM), "{shown}");
        assert_eq!(without_comments(&shown), text);
        assert_eq!(without_problem(&shown), text);
    }
}
