//! `uwf eval`: try a JSONata expression the way the moderator runs it.

use std::path::Path;
use std::time::Duration;

use clap::Args;
use serde_json::Value;

use super::Out;
use crate::cli::error::{CliResult, user_error};
use crate::engine::input::{self, Source};
use crate::engine::workflow::jsonata::{self, Limits};

#[derive(Debug, Args)]
#[command(
    after_help = "Prints the result as JSON, nothing for undefined. An error exits 1 with its \
JSONata code (e.g. T2006). --input is limited to 16 MiB (UWF_MAX_INPUT=64MiB or `maxInput: 64MiB` \
in config.yaml raise it).\n\n\
Examples:\n  uwf eval '1 + 2'\n  echo '{\"steps\":[{\"role\":\"reviewer\",\"output\":{\"approved\":false}}]}' \\\n    | uwf eval 'steps[-1].output.approved = false' --input -\n  uwf eval '$count(steps) < $max' --input ctx.json --bind max=3"
)]
pub(super) struct EvalArgs {
    /// The JSONata expression
    expression: String,
    /// Input document: a JSON file, or `-` for stdin (default: no input)
    #[arg(long, value_name = "FILE|-")]
    input: Option<String>,
    /// Bind a variable: `--bind name=JSON` makes `$name` available (repeatable)
    #[arg(long, value_name = "NAME=JSON")]
    bind: Vec<String>,
    /// Time limit in milliseconds
    #[arg(long, default_value_t = 1000)]
    timeout_ms: u64,
    /// Evaluation depth limit
    #[arg(long, default_value_t = Limits::default().max_depth)]
    depth: usize,
    /// Memory limit of the evaluation, e.g. 64MiB, 1GiB (default 256MiB, or
    /// $UWF_JSONATA_MAX_MEMORY)
    #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
    max_memory: Option<usize>,
}

/// Parses `--max-memory`.
pub(super) fn parse_memory(text: &str) -> Result<usize, String> {
    jsonata::parse_size(text)
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("`{text}` is not a size (e.g. 64MiB, 1GiB, 1048576)"))
}

pub(super) fn run(args: EvalArgs, root: &Path, out: &mut Out) -> CliResult<()> {
    let input = match args.input.as_deref() {
        None => None,
        Some(file) => {
            let text = input::read_text(Source::of(file), super::input_limit(root)?)?;
            Some(parse_json(&text, if file == "-" { "stdin" } else { file })?)
        }
    };
    let mut bindings = Vec::new();
    for b in &args.bind {
        let (name, json) = b
            .split_once('=')
            .ok_or_else(|| user_error!("--bind `{b}` is not NAME=JSON (e.g. --bind max=3)"))?;
        let name = name.trim_start_matches('$');
        if name.is_empty() {
            return Err(user_error!("--bind `{b}` has no variable name"));
        }
        bindings.push((
            name.to_owned(),
            parse_json(json, &format!("--bind {name}"))?,
        ));
    }
    let limits = Limits {
        timeout: Duration::from_millis(args.timeout_ms),
        max_depth: args.depth,
        max_memory: args.max_memory.unwrap_or_else(jsonata::default_max_memory),
        ..Limits::default()
    };
    let expr = jsonata::compile(&args.expression)?;
    let prepared = match input {
        Some(value) => jsonata::Input::new(value),
        None => jsonata::Input::undefined(),
    };
    if let Some(value) = expr.evaluate_prepared(&prepared, &bindings, &limits)? {
        if out.json_asked {
            out.line(value)?;
        } else {
            out.json_pretty(&value)?;
        }
    }
    Ok(())
}

fn parse_json(text: &str, source: &str) -> CliResult<Value> {
    serde_json::from_str(text).map_err(|e| {
        user_error!(
            "invalid JSON in {source} at line {}, column {}: {e}",
            e.line(),
            e.column()
        )
    })
}
