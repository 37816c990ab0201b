//! `uwf doctor`: checks of what a run needs (`docs/LLM.md#uwf-doctor`), each a verdict, a detail
//! and a hint.
//!
//! The checks: the config parses and validates, `.env` parses and is private, every configured
//! agent's program can be found, each provider a model in use names answers `GET {baseUrl}/models` (with its key,
//! which no detail ever shows), the storage root is writable (and over PostgreSQL, the server answers and its uwf schema is
//! one this binary understands), and FUSE is usable.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::advice::Advice;
use crate::engine::config::dotenv;
use crate::engine::config::{self, AgentConfig, Config};
use crate::engine::llm::client::{Client, Endpoint};

/// How long a provider may take to answer the probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The names of the check groups, for `--skip`.
pub(crate) const GROUPS: &[&str] = &[
    "config",
    "secrets",
    "agents",
    "providers",
    "storage",
    "fuse",
    "knowledge",
];

/// One check's verdict.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Check {
    /// `config`, `agent NAME`, `provider NAME`, …
    pub name: String,
    pub ok: bool,
    /// Not usable as configured, but nothing uses it either (an LLM agent with no model while
    /// the default agent is offline): neither ok nor a failure.
    pub off: bool,
    pub detail: String,
    /// What to do when it failed.
    pub hint: Option<String>,
}

impl Check {
    fn ok(name: impl Into<String>, detail: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            ok: true,
            off: false,
            detail: detail.into(),
            hint: None,
        }
    }

    fn off(name: impl Into<String>, detail: impl Into<String>, hint: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            ok: true,
            off: true,
            detail: detail.into(),
            hint: Some(hint.into()),
        }
    }

    fn fail(name: impl Into<String>, detail: impl Into<String>, hint: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            ok: false,
            off: false,
            detail: detail.into(),
            hint: Some(hint.into()),
        }
    }
}

/// Runs every check not in `skip`, in order.
pub(crate) fn run(root: &Path, skip: &[String]) -> Vec<Check> {
    let wanted = |group: &str| !skip.iter().any(|s| s == group);
    let mut checks = Vec::new();
    let config_path = root.join("config.yaml");
    let config = match config::load(root) {
        Ok(loaded) => {
            if wanted("config") {
                checks.push(if loaded.from_file {
                    let c = &loaded.config;
                    Check::ok(
                        "config",
                        format!(
                            "{} is valid ({} providers, {} models, {} agents)",
                            config_path.display(),
                            c.providers.len(),
                            c.models.len(),
                            c.agents.len()
                        ),
                    )
                } else {
                    Check::ok(
                        "config",
                        format!(
                            "no {}; the offline built-in agents apply (default agent: dry)",
                            config_path.display()
                        ),
                    )
                });
            }
            Some(loaded.config)
        }
        Err(e) => {
            if wanted("config") {
                let detail = e.to_string();
                let detail = detail.lines().map(str::trim).collect::<Vec<_>>().join(" ");
                checks.push(Check::fail(
                    "config",
                    detail,
                    "fix the lines named above, or move the file away and run `uwf setup`",
                ));
            }
            None
        }
    };
    if wanted("secrets") {
        checks.push(secrets(root));
    }
    if let Some(config) = &config {
        if wanted("agents") {
            checks.extend(agents(root, config));
        }
        if wanted("providers") {
            checks.extend(providers(root, config));
        }
    }
    if wanted("storage") {
        checks.push(storage(root));
    }
    if wanted("fuse") {
        checks.push(fuse(Path::new("/dev/fuse")));
    }
    if wanted("knowledge") {
        checks.push(knowledge(root, config.as_ref()));
    }
    checks
}

/// The project knowledge index: what is indexed, how much is embedded, and whether the
/// repository of the current directory is among it.
fn knowledge(root: &Path, config: Option<&config::Config>) -> Check {
    use crate::engine::knowledge::{index::Index, manifest, vectors::Embeddings};
    let model = config.and_then(|c| c.model_overrides.get("embed"));
    let key = match config.map(Embeddings::from_config) {
        Some(Ok(Some(e))) => Some(e.key),
        Some(Err(e)) => {
            return Check::fail(
                "knowledge",
                e.to_string(),
                crate::advice::Advice::hints(&e).join("; "),
            );
        }
        _ => None,
    };
    let states = match Index::existing(root) {
        Ok(Some(index)) => match index.states(key.as_deref()) {
            Ok(states) => states,
            Err(e) => {
                return Check::fail(
                    "knowledge",
                    e.to_string(),
                    "run `uwf knowledge sync` again to rebuild it",
                );
            }
        },
        Ok(None) => Vec::new(),
        Err(e) => {
            return Check::fail(
                "knowledge",
                e.to_string(),
                "move the file away and run `uwf knowledge sync`",
            );
        }
    };
    let here = std::env::current_dir()
        .ok()
        .and_then(|dir| manifest::find_repo(&dir).ok());
    let unindexed_here = here
        .as_ref()
        .filter(|repo| !states.iter().any(|s| Path::new(&s.path) == repo.as_path()));
    if states.is_empty() {
        let hint = match unindexed_here {
            Some(repo) => format!("index {} with `uwf knowledge sync`", repo.display()),
            None => {
                "add a knowledge.yaml to a repository and run `uwf knowledge sync` there".into()
            }
        };
        return Check::off(
            "knowledge",
            "no repository is indexed on this machine",
            hint,
        );
    }
    let chunks: u64 = states.iter().map(|s| s.chunks).sum();
    let mut detail = format!(
        "{} {} indexed, {chunks} chunks",
        states.len(),
        if states.len() == 1 {
            "repository"
        } else {
            "repositories"
        }
    );
    let mut hints = Vec::new();
    match (model, &key) {
        (Some(model), Some(key)) => {
            let embedded: u64 = states.iter().filter_map(|s| s.embedded).sum();
            detail.push_str(&format!(", {embedded} embedded by {model} ({key})"));
            if embedded < chunks {
                hints.push(
                    "`uwf knowledge sync` embeds the chunks that have no vector yet".to_owned(),
                );
            }
        }
        _ => detail.push_str("; ranked by words (set modelOverrides.embed to rank by meaning too)"),
    }
    if let Some(repo) = unindexed_here {
        hints.push(format!(
            "{} has a knowledge.yaml but is not indexed: run `uwf knowledge sync`",
            repo.display()
        ));
    } else if let Some(repo) = &here {
        // The current directory's repository is indexed: is it behind its files?
        match crate::engine::knowledge::sync::pending(root, repo) {
            Ok(Some((0, 0))) | Ok(None) => {}
            Ok(Some((changed, removed))) => {
                use crate::engine::thread::summary::plural;
                hints.push(format!(
                    "{} is behind its files ({} changed or new, {} removed since its last sync): run `uwf knowledge sync`",
                    repo.display(),
                    plural(changed, "file"),
                    plural(removed, "file")
                ))
            }
            Err(e) => hints.push(format!("{}: {e}", repo.display())),
        }
    }
    let mut check = Check::ok("knowledge", detail);
    check.hint = (!hints.is_empty()).then(|| hints.join("; "));
    check
}

fn secrets(root: &Path) -> Check {
    let path = dotenv::path(root);
    match dotenv::read(root) {
        Ok(_) if !path.exists() => Check::ok(
            "secrets",
            format!("no {}; keys come from the environment", path.display()),
        ),
        Ok(pairs) if dotenv::too_open(root) => Check::fail(
            "secrets",
            format!(
                "{} ({} keys) is readable by other users",
                path.display(),
                pairs.len()
            ),
            format!("chmod 600 {}", path.display()),
        ),
        Ok(pairs) => Check::ok(
            "secrets",
            format!("{} has {} keys, mode 0600", path.display(), pairs.len()),
        ),
        Err(e) => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default().to_owned();
            Check::fail(
                "secrets",
                first,
                "fix that line (KEY=VALUE), or rewrite the key with `uwf setup --api-key-env NAME --api-key -`",
            )
        }
    }
}

fn agents(root: &Path, config: &Config) -> Vec<Check> {
    let in_file: Vec<String> = dotenv::read(root)
        .unwrap_or_default()
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    config
        .agents()
        .into_iter()
        .map(|(name, agent)| {
            let label = format!("agent {name}");
            if let Some(check) = missing_secret(root, &in_file, (&name, &label), &agent) {
                return check;
            }
            if let Some(check) = kind_check(root, config, &name, &label, &agent) {
                return check;
            }
            if agent.command == "uwf" {
                return Check::ok(label, "`uwf` (this program)");
            }
            match find_program(&agent.command) {
                Some(path) => {
                    Check::ok(label, format!("`{}` is {}", agent.command, path.display()))
                }
                None => Check::fail(
                    label,
                    format!("`{}` is not on PATH", agent.command),
                    format!("install it, or fix agents.{name}.command in config.yaml"),
                ),
            }
        })
        .collect()
}

/// A failed check when the agent's `env` names a `${SECRET}` that neither the root's `.env`
/// (whose keys are `in_file`) nor this process's environment sets.
fn missing_secret(
    root: &Path,
    in_file: &[String],
    (name, label): (&str, &str),
    agent: &AgentConfig,
) -> Option<Check> {
    let missing: Vec<String> = crate::engine::agent::resolve::secrets_named(&agent.env)
        .into_iter()
        .filter(|s| !in_file.contains(s) && std::env::var_os(s).is_none())
        .collect();
    let first = missing.first()?;
    Some(Check::fail(
        label,
        format!(
            "its env names the secret{} {}, which neither {} nor the environment sets",
            if missing.len() == 1 { "" } else { "s" },
            missing
                .iter()
                .map(|s| format!("`{s}`"))
                .collect::<Vec<_>>()
                .join(", "),
            dotenv::path(root).display()
        ),
        format!(
            "add {first}=… to {} (mode 0600), or fix agents.{name}.env in config.yaml",
            dotenv::path(root).display()
        ),
    ))
}

/// The checks of the two agent kinds no program plays alone: `human` (a person answers) and
/// `workflow --name W` (a sub-workflow, whose workflow must be registered).
fn kind_check(
    root: &Path,
    config: &Config,
    name: &str,
    label: &str,
    agent: &AgentConfig,
) -> Option<Check> {
    if agent.command != "uwf" || agent.args.first().map(String::as_str) != Some("agent") {
        return None;
    }
    match agent.args.get(1).map(String::as_str) {
        Some(kind @ ("llm" | "react")) => {
            let model = agent
                .args
                .iter()
                .position(|a| a == "--model")
                .and_then(|i| agent.args.get(i + 1))
                .map(String::as_str)
                .or_else(|| config.model_for(kind));
            let used = used(config, name);
            let hint = format!(
                "configure a model: `uwf setup --provider … --model …`, or defaultModel / \
                 modelOverrides.{kind} in config.yaml"
            );
            Some(match model {
                Some(model) => Check::ok(label, format!("`uwf agent {kind}` with model `{model}`")),
                None if used => {
                    Check::fail(label, "no model is configured, and steps use it", hint)
                }
                None => Check::off(label, "no model is configured (not used now)", hint),
            })
        }
        Some(kind @ ("claude" | "codex" | "opencode")) => {
            use crate::engine::agent::programs::{self, Program};
            let program = match kind {
                "claude" => Program::Claude,
                "codex" => Program::Codex,
                _ => Program::OpenCode,
            };
            let options = programs::Options {
                executable: agent
                    .args
                    .iter()
                    .position(|a| a == "--executable")
                    .and_then(|i| agent.args.get(i + 1))
                    .map(Into::into),
                ..Default::default()
            };
            let hint = format!("install it: `{}`", program.install_command());
            Some(match programs::find_executable(program, &options) {
                Ok(path) => Check::ok(label, format!("`uwf agent {kind}` runs {}", path.display())),
                Err(_) if used(config, name) => Check::fail(
                    label,
                    format!("`{kind}` is not installed, and steps use it"),
                    hint,
                ),
                Err(_) => Check::off(
                    label,
                    format!("`{kind}` is not installed (not used now)"),
                    hint,
                ),
            })
        }
        Some("human") => Some(Check::ok(
            label,
            "a person answers: `uwf thread question ID`, then `uwf thread answer ID` (or the mount's `answer` file)",
        )),
        Some("workflow") => {
            let name = agent
                .args
                .iter()
                .position(|a| a == "--name")
                .and_then(|i| agent.args.get(i + 1));
            let depth = config.max_depth.unwrap_or(config::DEFAULT_MAX_DEPTH);
            let registered =
                crate::engine::storage::index_files::read_registry(root).unwrap_or_default();
            Some(match name {
                Some(name) if registered.contains_key(name) => Check::ok(
                    label,
                    format!("runs workflow `{name}` as a sub-workflow (maxDepth {depth})"),
                ),
                Some(name) => Check::fail(
                    label,
                    format!("runs workflow `{name}`, which is not registered"),
                    format!("register it: `uwf workflow put {name}.yaml`"),
                ),
                None => Check::fail(
                    label,
                    "`uwf agent workflow` without --name",
                    "add `--name WORKFLOW` to its args, e.g. args: [agent, workflow, --name, develop]",
                ),
            })
        }
        _ => None,
    }
}

/// Whether steps use the agent `name`: it is the default agent or named in `agentOverrides`.
fn used(config: &Config, name: &str) -> bool {
    config.default_agent.as_deref() == Some(name)
        || config
            .agent_overrides
            .values()
            .any(|roles| roles.values().any(|a| a == name))
}

/// Where `program` would be run from: itself when it has a `/`, else the first executable
/// match on `$PATH`.
pub(crate) fn find_program(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let p = PathBuf::from(program);
        return executable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| executable(p))
}

/// The providers steps may reach: those of the default model, of `modelOverrides` and of the
/// models agents name with `--model`. A provider only other (unused) models name is not.
fn used_providers(config: &Config) -> std::collections::BTreeSet<String> {
    let agents = config.agents();
    let named = agents.values().filter_map(|agent| {
        let at = agent.args.iter().position(|a| a == "--model")?;
        agent.args.get(at + 1)
    });
    config
        .default_model
        .iter()
        .chain(config.model_overrides.values())
        .chain(named)
        .filter_map(|alias| config.models.get(alias)?.provider.clone())
        .collect()
}

fn providers(root: &Path, config: &Config) -> Vec<Check> {
    let used = used_providers(config);
    config
        .providers
        .keys()
        .map(|name| {
            let label = format!("provider {name}");
            if !used.contains(name) {
                return Check::off(
                    label,
                    "no model in use names it (defaultModel, modelOverrides, an agent's --model); not probed",
                    format!("point defaultModel at one of its models to use it, or remove providers.{name} from config.yaml"),
                );
            }
            // Any model name serves for `GET /models`.
            let mut endpoint = match Endpoint::of_provider(config, name, "-") {
                Ok(e) => e,
                Err(crate::engine::llm::client::LlmError::MissingKey { env, provider }) => {
                    let dotenv = dotenv::path(root);
                    return Check::fail(
                        label,
                        format!("provider `{provider}` needs an API key in ${env}, which neither {} nor the environment sets", dotenv.display()),
                        format!("store it in {} with `uwf setup --provider {provider} --api-key -` (reads the key from stdin), or export {env}", dotenv.display()),
                    );
                }
                Err(e) => {
                    return Check::fail(label, e.to_string(), e.hints().join("; "));
                }
            };
            endpoint.timeout = endpoint.timeout.min(PROBE_TIMEOUT);
            let url = format!("{}/models", endpoint.base_url);
            let keyed = match config.providers[name].api_key_env.as_deref() {
                Some(env) => format!(" (key from ${env})"),
                None => " (no key)".into(),
            };
            match Client::new(endpoint).probe() {
                Ok(status) if (200..300).contains(&status) => {
                    Check::ok(label, format!("GET {url} → {status}{keyed}"))
                }
                Ok(status @ (401 | 403)) => Check::fail(
                    label,
                    format!("GET {url} → {status}: the key was refused{keyed}"),
                    format!(
                        "store a valid key: `uwf setup --provider {name} --api-key -` (reads it from stdin)"
                    ),
                ),
                // Many OpenAI-compatible servers serve chat completions without a model list.
                Ok(status @ (404 | 405 | 501)) => Check::ok(
                    label,
                    format!(
                        "GET {url} → {status}: the server answers but lists no models (not a \
                         failure; chat completions are not probed){keyed}"
                    ),
                ),
                Ok(status) => Check::fail(
                    label,
                    format!("GET {url} → {status}{keyed}"),
                    format!("check providers.{name}.baseUrl (the API root, ending in /v1 for most)"),
                ),
                Err(e) => Check::fail(
                    label,
                    e.to_string().lines().next().unwrap_or_default().to_owned(),
                    format!("check providers.{name}.baseUrl and the network"),
                ),
            }
        })
        .collect()
}

fn storage(root: &Path) -> Check {
    let result = std::fs::create_dir_all(root).and_then(|()| tempfile::tempfile_in(root));
    let local = match result {
        Ok(_) => format!("{} is writable", root.display()),
        Err(e) => {
            return Check::fail(
                "storage",
                format!("{} is not writable: {e}", root.display()),
                "choose another root with --root or $UWF_STORAGE_ROOT, or fix its permissions",
            );
        }
    };
    match crate::engine::storage::url(root) {
        Ok(None) => Check::ok("storage", local),
        Ok(Some(url)) => postgres(&url, &local),
        Err(e) => Check::fail(
            "storage",
            first_line(&e.to_string()),
            "fix `storage:` in config.yaml (postgres://USER@HOST:PORT/DB), or unset it for a directory store",
        ),
    }
}

/// The storage check of a PostgreSQL store: connects (without migrating or writing anything)
/// and reads the server's version and the uwf schema's. Only the redacted URL is shown.
fn postgres(url: &str, local: &str) -> Check {
    use crate::pg::{PgConfig, SCHEMA_VERSION, redact, schema};
    let shown = redact(url);
    let fail = |e: crate::pg::PgError| {
        let hint = e.hints().into_iter().next().unwrap_or_else(|| {
            "check the storage URL ($UWF_STORAGE_URL or `storage:` in config.yaml)".to_owned()
        });
        Check::fail(
            "storage",
            format!("PostgreSQL {shown}: {}", first_line(&e.to_string())),
            hint,
        )
    };
    let mut client = match PgConfig::parse(url).and_then(|c| c.connect()) {
        Ok(client) => client,
        Err(e) => return fail(e),
    };
    let server = client
        .query_one("show server_version", &[])
        .map(|row| row.get::<_, String>(0))
        .unwrap_or_else(|_| "?".to_owned());
    let version = match schema::read_version(&mut client) {
        Ok(version) => version,
        Err(e) => return fail(e),
    };
    let detail = |schema: String| {
        format!("PostgreSQL {shown} (server {server}, {schema}); node cache: {local}")
    };
    match version {
        Some(found) if found > SCHEMA_VERSION => fail(crate::pg::PgError::SchemaTooNew {
            found,
            supported: SCHEMA_VERSION,
        }),
        Some(found) if found == SCHEMA_VERSION => {
            Check::ok("storage", detail(format!("uwf schema {found}")))
        }
        Some(found) => Check::ok(
            "storage",
            detail(format!(
                "uwf schema {found}, migrated to {SCHEMA_VERSION} on first use"
            )),
        ),
        None => Check::ok(
            "storage",
            detail("no uwf tables yet: created on first use".to_owned()),
        ),
    }
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_owned()
}

fn fuse(device: &Path) -> Check {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(device)
    {
        Ok(_) => Check::ok("fuse", format!("{} opens", device.display())),
        Err(e) => Check::fail(
            "fuse",
            format!("{} cannot be opened: {e}", device.display()),
            "only `uwf mount` needs it: install fuse3 and `modprobe fuse` (in a container: --device /dev/fuse), or skip with --skip fuse",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_found_on_path_or_by_path() {
        assert!(find_program("sh").is_some());
        assert!(find_program("/bin/sh").is_some());
        assert!(find_program("uwf-no-such-program-here").is_none());
        assert!(find_program("/nonexistent/sh").is_none());
    }

    #[test]
    fn a_missing_fuse_device_fails_with_a_hint() {
        let check = fuse(Path::new("/nonexistent/fuse"));
        assert!(!check.ok);
        assert!(check.hint.unwrap().contains("--skip fuse"));
    }
}
