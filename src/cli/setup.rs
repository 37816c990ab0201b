//! `uwf setup` (config.yaml and .env from flags, or from a few questions on a terminal) and
//! `uwf doctor` (one line per check).

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

use clap::Args;

use super::Out;
use crate::cli::error::{CliResult, CommandError, Context, user_error};
use crate::engine::config::{self, PRESETS, Setup};
use crate::engine::{config::dotenv, upkeep::doctor};

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
uwf setup --provider openai --api-key-env OPENAI_API_KEY --api-key - \\\n      --model gpt-4o-mini --agent llm < key.txt\n  \
uwf setup --provider local --base-url http://127.0.0.1:8080/v1 --no-key --model qwen2.5-coder\n  \
uwf setup --agent claude   (Claude Code plays every role; or `codex`, `opencode`)\n  \
uwf setup            (on a terminal: asks)\n\n\
Known providers (base URL and key variable filled in): openai, openrouter, ollama.\n\
The key goes to <root>/.env (mode 0600), never to config.yaml.")]
pub(super) struct SetupArgs {
    /// Provider name (e.g. openai); created or updated
    #[arg(long)]
    provider: Option<String>,
    /// The provider's OpenAI-compatible API root, e.g. https://api.openai.com/v1
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// The environment variable that holds the provider's key (default: <PROVIDER>_API_KEY)
    #[arg(long, value_name = "VAR", conflicts_with = "no_key")]
    api_key_env: Option<String>,
    /// The provider takes no key (a local server): no key variable is set or asked for
    #[arg(long, conflicts_with = "api_key")]
    no_key: bool,
    /// The API key, stored in <root>/.env; `-` reads it from stdin (keeps it out of shell history)
    #[arg(long, value_name = "KEY")]
    api_key: Option<String>,
    /// A model name at the provider; it becomes the default model
    #[arg(long)]
    model: Option<String>,
    /// The default agent (dry, llm, react, claude, codex, opencode, or one under `agents:`)
    #[arg(long)]
    agent: Option<String>,
}

/// What a default agent that is a coding-agent program (`claude`, `codex`, `opencode`) needs, and whether
/// it is installed.
fn program_note(agent: &str) -> Option<String> {
    use crate::engine::agent::programs::{self, Program};
    let (program, needs) = match agent {
        "claude" => (
            Program::Claude,
            "ANTHROPIC_API_KEY (or a `claude` login); ANTHROPIC_BASE_URL for another endpoint",
        ),
        "codex" => (
            Program::Codex,
            "a `codex login`, or an agent entry with --base-url URL --api-key-env VAR",
        ),
        "opencode" => (
            Program::OpenCode,
            "an `opencode auth login`, or an agent entry with --base-url URL --model M --api-key-env VAR",
        ),
        _ => return None,
    };
    let installed = match programs::find_executable(program, &Default::default()) {
        Ok(path) => format!("found at {}", path.display()),
        Err(_) => format!("not installed: `{}`", program.install_command()),
    };
    Some(format!(
        "the `{agent}` agent runs `{}` in the thread's working directory ({installed}); it needs {needs} (`uwf agent {agent} --help`)",
        program.name()
    ))
}

#[derive(Debug, Args)]
#[command(
    after_help = "Checks: config, secrets, agents, providers, storage, fuse, knowledge.\n\
Exit status 1 when a check fails.\n\nExamples:\n  uwf doctor\n  uwf doctor --skip fuse --skip providers"
)]
pub(super) struct DoctorArgs {
    /// Leave out a group of checks (repeatable)
    #[arg(long, value_name = "CHECK", value_parser = clap::builder::PossibleValuesParser::new(doctor::GROUPS))]
    skip: Vec<String>,
}

pub(super) fn setup(args: SetupArgs, root: &Path, out: &mut Out) -> CliResult<()> {
    let no_flags = args.provider.is_none()
        && args.base_url.is_none()
        && args.api_key_env.is_none()
        && args.api_key.is_none()
        && !args.no_key
        && args.model.is_none()
        && args.agent.is_none();
    let (setup, key) = if no_flags {
        if !std::io::stdin().is_terminal() {
            return Err(
                user_error!("no settings given and stdin is not a terminal").hint(
                    "pass flags, e.g. `uwf setup --provider openai --api-key-env OPENAI_API_KEY --api-key - --model gpt-4o-mini --agent llm`",
                ),
            );
        }
        let stdin = std::io::stdin();
        let (setup, key) = interactive(&mut stdin.lock(), &mut std::io::stderr(), &read_hidden)?;
        // An empty answer keeps the current key: there must be one.
        if key.is_none()
            && let Some(env) = &setup.api_key_env
            && !key_is_set(root, env)
        {
            return Err(user_error!(
                "no API key was typed for ${env}, and neither {} nor the environment sets it; nothing was written",
                dotenv::path(root).display()
            )
            .hint("run `uwf setup` again and paste the key, or answer the key-variable question with `none` for a provider that takes no key (e.g. a local server)"));
        }
        (setup, key)
    } else {
        let key = match args.api_key.as_deref() {
            Some("-") => {
                let mut line = String::new();
                std::io::stdin()
                    .lock()
                    .read_line(&mut line)
                    .context("cannot read the API key from stdin")?;
                Some(line.trim().to_owned())
            }
            Some(key) => Some(key.trim().to_owned()),
            None => None,
        };
        if let Some(name) = args.api_key_env.as_deref().filter(|n| !is_variable_name(n)) {
            return Err(user_error!(
                "`{name}` is not a variable name (letters, digits and _, not starting with a digit)"
            )
            .hint("`--no-key` for a provider that takes no key"));
        }
        if args.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
            return Err(user_error!("the model is empty; nothing was written")
                .hint("give the name the provider knows the model by, e.g. --model gpt-4o-mini"));
        }
        let setup = Setup {
            provider: args.provider,
            base_url: args.base_url,
            api_key_env: args.api_key_env,
            no_key: args.no_key,
            model: args.model,
            agent: args.agent,
        };
        (setup, key)
    };
    if key.as_deref() == Some("") {
        return Err(user_error!("the API key is empty; nothing was written").hint(
            "pipe the key into `--api-key -`, or give `--no-key` for a provider that takes no key",
        ));
    }
    if key.is_some() && setup.provider.is_none() && setup.api_key_env.is_none() {
        return Err(user_error!("an API key needs a variable to live in")
            .hint("add --provider NAME or --api-key-env NAME (e.g. OPENAI_API_KEY)"));
    }
    let (config, key_env) = config::apply_setup(root, &setup)?;
    let mut said = Vec::new();
    if let Some(p) = &setup.provider
        && let Some(provider) = config.providers.get(p)
    {
        said.push(format!(
            "provider {p} ({}, {})",
            provider.base_url.as_deref().unwrap_or("?"),
            provider
                .api_key_env
                .as_deref()
                .map(|e| format!("key in ${e}"))
                .unwrap_or_else(|| "no key".into())
        ));
    }
    if let Some(m) = &setup.model {
        said.push(format!("default model {m}"));
    }
    if let Some(a) = &setup.agent {
        said.push(format!("default agent {a}"));
    }
    let config_path = root.join("config.yaml");
    if out.json_asked {
        out.line(serde_json::json!({"wrote": config_path, "changes": said}))?;
    } else if out.quiet() {
        out.line(config_path.display())?;
    } else {
        out.line(format!(
            "wrote {}: {}",
            config_path.display(),
            if said.is_empty() {
                "no changes".to_owned()
            } else {
                said.join(", ")
            }
        ))?;
    }
    if let Some(note) = setup.agent.as_deref().and_then(program_note) {
        eprintln!("uwf: note: {note}");
    }
    if key.is_none()
        && let Some(env) = &key_env
        && setup.provider.is_some()
        && !key_is_set(root, env)
    {
        eprintln!(
            "uwf: note: ${env} is set neither in {} nor in the environment; requests to the provider fail until it is: `uwf setup --provider {} --api-key -` reads it from stdin",
            dotenv::path(root).display(),
            setup.provider.as_deref().unwrap_or_default()
        );
    }
    if let Some(key) = key {
        let Some(env) = key_env else {
            return Err(user_error!("an API key needs a variable to live in")
                .hint("add --api-key-env NAME (e.g. OPENAI_API_KEY)"));
        };
        dotenv::set(root, &[(env.as_str(), key.as_str())])?;
        let env_path = dotenv::path(root);
        if out.json_asked {
            out.line(serde_json::json!({"wrote": env_path, "key": env}))?;
        } else if out.quiet() {
            out.line(env_path.display())?;
        } else {
            out.line(format!("wrote {} (mode 0600): {env}", env_path.display()))?;
        }
    }
    Ok(())
}

/// Whether `env` holds a key: a non-empty value in `<root>/.env` or in the environment.
fn key_is_set(root: &Path, env: &str) -> bool {
    let in_file = dotenv::read(root)
        .unwrap_or_default()
        .into_iter()
        .any(|(k, v)| k == env && !v.trim().is_empty());
    in_file || std::env::var(env).is_ok_and(|v| !v.trim().is_empty())
}

/// Asks for the settings with defaults; `secret` reads the key without echo.
fn interactive(
    input: &mut dyn BufRead,
    prompt: &mut dyn Write,
    secret: &dyn Fn(&mut dyn BufRead) -> std::io::Result<String>,
) -> CliResult<(Setup, Option<String>)> {
    let presets = PRESETS.iter().map(|p| p.0).collect::<Vec<_>>().join(", ");
    let provider = ask(
        input,
        prompt,
        &format!("Provider ({presets}, or a name of yours)"),
        "openai",
    )?;
    let preset = PRESETS.iter().find(|p| p.0 == provider);
    let base_url = ask(
        input,
        prompt,
        "Base URL of its OpenAI-compatible API",
        preset.map(|p| p.1).unwrap_or(""),
    )?;
    let default_env = match preset {
        Some((_, _, env)) => env.unwrap_or("").to_owned(),
        None => config::default_key_env(&provider),
    };
    let api_key_env = ask_until(
        input,
        prompt,
        "Environment variable for its API key (`none`: it takes no key)",
        &default_env,
        |answer| match answer {
            "none" | "-" => Ok(String::new()),
            name if is_variable_name(name) => Ok(name.to_owned()),
            name => Err(format!(
                "`{name}` is not a variable name (letters, digits and _, not starting with a \
                 digit); `none` if the provider takes no key"
            )),
        },
    )?;
    let key = if api_key_env.is_empty() {
        None
    } else {
        write!(
            prompt,
            "API key for ${api_key_env} (hidden; empty keeps the current one): "
        )?;
        prompt.flush()?;
        let key = secret(input)?;
        writeln!(prompt)?;
        (!key.trim().is_empty()).then(|| key.trim().to_owned())
    };
    let model = ask_until(
        input,
        prompt,
        "Model",
        if provider == "openai" {
            "gpt-4o-mini"
        } else {
            ""
        },
        |answer| match answer {
            "" => Err("a model is needed: the name the provider knows it by".to_owned()),
            model => Ok(model.to_owned()),
        },
    )?;
    let agent = ask(input, prompt, "Default agent (dry, llm, react)", "llm")?;
    let some = |s: String| (!s.is_empty()).then_some(s);
    Ok((
        Setup {
            provider: some(provider),
            base_url: some(base_url),
            no_key: api_key_env.is_empty(),
            api_key_env: some(api_key_env),
            model: some(model),
            agent: some(agent),
        },
        key,
    ))
}

/// Asks one question; an empty answer takes `default`.
fn ask(
    input: &mut dyn BufRead,
    prompt: &mut dyn Write,
    question: &str,
    default: &str,
) -> CliResult<String> {
    if default.is_empty() {
        write!(prompt, "{question}: ")?;
    } else {
        write!(prompt, "{question} [{default}]: ")?;
    }
    prompt.flush()?;
    let mut line = String::new();
    input.read_line(&mut line)?;
    let line = line.trim();
    Ok(if line.is_empty() { default } else { line }.to_owned())
}

/// Asks until `check` accepts the answer (an empty one takes `default`), saying why it did not;
/// gives up after a few tries or at the end of the input.
fn ask_until(
    input: &mut dyn BufRead,
    prompt: &mut dyn Write,
    question: &str,
    default: &str,
    check: impl Fn(&str) -> Result<String, String>,
) -> CliResult<String> {
    const TRIES: usize = 5;
    let mut why = String::new();
    for _ in 0..TRIES {
        let answer = ask(input, prompt, question, default)?;
        match check(&answer) {
            Ok(taken) => return Ok(taken),
            Err(e) => {
                writeln!(prompt, "  {e}")?;
                why = e;
            }
        }
    }
    Err(user_error!("{question}: {why}; nothing was written"))
}

/// Whether `name` can name an environment variable here (`[A-Za-z_][A-Za-z0-9_]*`).
fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Reads a line from `input` (the terminal's stdin, already locked by the caller) with the
/// terminal's echo off.
fn read_hidden(input: &mut dyn BufRead) -> std::io::Result<String> {
    use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
    let stdin = std::io::stdin();
    let saved = tcgetattr(&stdin).map_err(std::io::Error::from)?;
    let mut quiet = saved.clone();
    quiet.local_flags.remove(LocalFlags::ECHO);
    tcsetattr(&stdin, SetArg::TCSANOW, &quiet).map_err(std::io::Error::from)?;
    let mut line = String::new();
    let read = input.read_line(&mut line);
    let _ = tcsetattr(&stdin, SetArg::TCSANOW, &saved);
    read.map(|_| line)
}

pub(super) fn doctor(args: DoctorArgs, root: &Path, out: &mut Out) -> CliResult<()> {
    let checks = doctor::run(root, &args.skip);
    let failed = checks.iter().filter(|c| !c.ok).count();
    let color = out.color();
    if out.quiet() || out.json_asked {
        for check in &checks {
            if out.json_asked {
                out.line(serde_json::json!({"check": check.name, "ok": check.ok,
                    "off": check.off, "detail": check.detail, "hint": check.hint}))?;
            } else if !check.ok {
                // Only what failed, by name.
                out.line(&check.name)?;
            }
        }
        out.flush()?;
        return if failed == 0 {
            Ok(())
        } else {
            Err(CommandError::silent(1))
        };
    }
    for check in &checks {
        use super::terminal::style::Paint;
        let verdict = match (check.ok, check.off) {
            (true, false) => Paint::Green.on("ok  ", color),
            (true, true) => "off ".to_owned(),
            (false, _) => Paint::Red.on("FAIL", color),
        };
        out.line(format!("{verdict} {}: {}", check.name, check.detail))?;
        if let Some(hint) = check.hint.as_deref().filter(|h| !h.is_empty()) {
            out.line(format!("     hint: {hint}"))?;
        }
    }
    if failed == 0 {
        out.line(format!("all {} checks passed", checks.len()))?;
        Ok(())
    } else {
        out.line(format!("{failed} of {} checks failed", checks.len()))?;
        out.flush()?;
        Err(CommandError::silent(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interactive_setup_takes_defaults_and_answers() {
        let mut input = std::io::Cursor::new("\n\n\n\ndry\n");
        let mut prompts = Vec::new();
        let (setup, key) =
            interactive(&mut input, &mut prompts, &|_| Ok("sk-typed\n".into())).unwrap();
        assert_eq!(
            setup,
            Setup {
                provider: Some("openai".into()),
                base_url: Some("https://api.openai.com/v1".into()),
                api_key_env: Some("OPENAI_API_KEY".into()),
                no_key: false,
                model: Some("gpt-4o-mini".into()),
                agent: Some("dry".into()),
            }
        );
        assert_eq!(key.as_deref(), Some("sk-typed"));
        let prompts = String::from_utf8(prompts).unwrap();
        assert!(
            prompts.contains("Provider (openai, openrouter, ollama"),
            "{prompts}"
        );
        assert!(!prompts.contains("sk-typed"), "the key is never echoed");

        let mut input = std::io::Cursor::new("lab\nhttp://127.0.0.1:8000/v1\n\nqwen\n\n");
        let (setup, key) =
            interactive(&mut input, &mut Vec::new(), &|_| Ok(String::new())).unwrap();
        assert_eq!(setup.api_key_env.as_deref(), Some("LAB_API_KEY"));
        assert_eq!(setup.model.as_deref(), Some("qwen"));
        assert_eq!(key, None);
    }

    #[test]
    fn a_keyless_server_is_set_up_with_none_and_bad_answers_are_asked_again() {
        // A provider of one's own: its default variable is offered; `none` means no key.
        let mut input =
            std::io::Cursor::new("local\nhttp://127.0.0.1:8080/v1\n-x\nnone\n\nllama3\n\n");
        let mut prompts = Vec::new();
        let (setup, key) =
            interactive(&mut input, &mut prompts, &|_| panic!("no key is asked")).unwrap();
        assert_eq!(setup.api_key_env, None);
        assert!(setup.no_key);
        assert_eq!(setup.model.as_deref(), Some("llama3"));
        assert_eq!(key, None);
        let prompts = String::from_utf8(prompts).unwrap();
        assert!(prompts.contains("`-x` is not a variable name"), "{prompts}");
        assert!(prompts.contains("a model is needed"), "{prompts}");
        assert!(is_variable_name("_A1") && !is_variable_name("1A") && !is_variable_name("-"));
        // Answers that never do give up, writing nothing.
        let mut input = std::io::Cursor::new("local\n\nnone\n");
        let err = interactive(&mut input, &mut Vec::new(), &|_| Ok(String::new())).unwrap_err();
        assert!(
            err.render().contains("a model is needed"),
            "{}",
            err.render()
        );
    }

    #[test]
    fn a_key_is_set_by_dotenv_or_the_environment_never_by_an_empty_value() {
        let root = tempfile::tempdir().unwrap();
        let var = "UWF_TEST_SETUP_KEY_NOT_IN_THE_ENVIRONMENT";
        assert!(!key_is_set(root.path(), var));
        dotenv::set(root.path(), &[(var, "")]).unwrap();
        assert!(!key_is_set(root.path(), var));
        dotenv::set(root.path(), &[(var, "sk-1")]).unwrap();
        assert!(key_is_set(root.path(), var));
        assert!(key_is_set(root.path(), "PATH"));
    }
}
