//! Codex as an agent (`uwf agent codex`): its flags (the sandbox that lets it write the working
//! directory, the settings that stop outside traffic, a model provider of our own), and its
//! `exec --json` events read into an [`Answer`].

use std::process::Command;

use serde_json::Value;

use super::{Answer, Options, Program, ProgramError, Ran, Tokens};

/// The provider uwf defines when given `--base-url`.
const PROVIDER: &str = "uwf";

/// `codex exec --json --sandbox workspace-write --skip-git-repo-check [-m M] -c … --disable …
/// EXTRA… -- PROMPT` (without `prompt`, `-`: Codex reads it on stdin).
pub(crate) fn command(cmd: &mut Command, options: &Options, prompt: Option<&str>) {
    cmd.args(["exec", "--json", "--sandbox", "workspace-write"]);
    cmd.arg("--skip-git-repo-check");
    for setting in [
        "check_for_update_on_startup=false",
        "analytics.enabled=false",
    ] {
        cmd.args(["-c", setting]);
    }
    for feature in ["plugins", "remote_plugin", "apps"] {
        cmd.args(["--disable", feature]);
    }
    if let Some(model) = &options.model {
        cmd.args(["-m", model]);
    }
    if let Some(url) = &options.base_url {
        let key_env = options.api_key_env.as_deref().unwrap_or("OPENAI_API_KEY");
        let toml = |s: &str| Value::String(s.to_owned()).to_string();
        for setting in [
            format!("model_provider={}", toml(PROVIDER)),
            format!("model_providers.{PROVIDER}.name={}", toml(PROVIDER)),
            format!("model_providers.{PROVIDER}.base_url={}", toml(url)),
            format!("model_providers.{PROVIDER}.env_key={}", toml(key_env)),
            format!("model_providers.{PROVIDER}.wire_api={}", toml("responses")),
        ] {
            cmd.arg("-c").arg(setting);
        }
    }
    cmd.args(&options.extra);
    cmd.arg("--").arg(prompt.unwrap_or("-"));
}

const UNTRUSTED: &str = "Not inside a trusted directory";
const LOGIN: [&str; 4] = [
    "codex login",
    "401 Unauthorized",
    "Not logged in",
    "not logged in",
];

/// The answer in Codex's JSONL events: the last `agent_message`, the usage of every
/// `turn.completed`; a `turn.failed` (or only `error` events) is the provider's error.
pub(crate) fn answer(ran: &Ran, options: &Options) -> Result<Answer, ProgramError> {
    let mut answer = Answer::default();
    let mut failed: Option<String> = None;
    let mut last_error: Option<String> = None;
    let mut turns = 0u64;
    let mut events = 0usize;
    for event in ran
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
    {
        events += 1;
        match event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
        {
            "thread.started" => {
                answer.session_id = event
                    .get("thread_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            }
            "item.completed" => {
                let item = &event["item"];
                if item.get("type").and_then(Value::as_str) == Some("agent_message")
                    && let Some(text) = item.get("text").and_then(Value::as_str)
                {
                    answer.text = text.to_owned();
                }
            }
            "turn.completed" => {
                turns += 1;
                let usage = &event["usage"];
                let n = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
                answer.tokens.input += n("input_tokens");
                answer.tokens.cached += n("cached_input_tokens");
                answer.tokens.output += n("output_tokens");
            }
            "turn.failed" => {
                failed = Some(
                    event["error"]
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("turn.failed, with no message")
                        .to_owned(),
                );
            }
            "error" => {
                last_error = event
                    .get("message")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            }
            _ => {}
        }
    }
    let all = format!("{}\n{}", ran.stdout, ran.stderr_tail);
    if events == 0 && all.contains(UNTRUSTED) {
        return Err(ProgramError::Untrusted {
            program: Program::Codex,
            message: line_with(&all, UNTRUSTED),
        });
    }
    let problem = failed.or_else(|| last_error.filter(|_| answer.text.trim().is_empty()));
    if let Some(message) = problem {
        if let Some(n) = LOGIN.iter().find(|n| message.contains(**n)) {
            return Err(ProgramError::Login {
                program: Program::Codex,
                message: line_with(&message, n),
            });
        }
        return Err(ProgramError::Provider {
            program: Program::Codex,
            message,
        });
    }
    if answer.text.trim().is_empty() {
        return Err(ProgramError::NoAnswer {
            program: Program::Codex,
            status: ran.status_text(),
            stderr_tail: ran.stderr_tail.clone(),
        });
    }
    answer.turns = Some(turns);
    answer.tokens = Tokens {
        model: options.model.clone(),
        ..answer.tokens
    };
    Ok(answer)
}

fn line_with(text: &str, needle: &str) -> String {
    text.lines()
        .find(|l| l.contains(needle))
        .unwrap_or(needle)
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn ran(stdout: &str, stderr: &str, code: i32) -> Ran {
        Ran {
            stdout: stdout.into(),
            stderr_tail: stderr.into(),
            status: std::process::ExitStatus::from_raw(code << 8),
        }
    }

    #[test]
    fn the_last_agent_message_and_summed_usage_are_the_answer() {
        let out = r#"{"type":"thread.started","thread_id":"t-1"}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Model metadata not found"}}
{"type":"item.completed","item":{"id":"item_1","type":"agent_message","text":"first"}}
{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"{\"approved\": true}"}}
{"type":"turn.completed","usage":{"input_tokens":200,"cached_input_tokens":50,"output_tokens":40}}"#;
        let options = Options {
            model: Some("gpt-5.5".into()),
            ..Default::default()
        };
        let a = answer(
            &ran(out, "Reading additional input from stdin...", 0),
            &options,
        )
        .unwrap();
        assert_eq!(a.text, "{\"approved\": true}");
        assert_eq!(a.session_id.as_deref(), Some("t-1"));
        assert_eq!(a.turns, Some(1));
        assert_eq!(
            a.tokens,
            Tokens {
                input: 200,
                output: 40,
                cached: 50,
                model: Some("gpt-5.5".into()),
                cost_usd: None
            }
        );
    }

    #[test]
    fn a_failed_turn_an_untrusted_directory_and_silence_are_named() {
        let out = r#"{"type":"error","message":"Reconnecting... 1/5"}
{"type":"turn.failed","error":{"message":"unexpected status 500"}}"#;
        let e = answer(&ran(out, "", 1), &Options::default()).unwrap_err();
        assert!(matches!(e, ProgramError::Provider { .. }), "{e}");
        assert!(e.to_string().contains("unexpected status 500"), "{e}");
        let e = answer(
            &ran(
                "",
                "Not inside a trusted directory and --skip-git-repo-check was not specified.",
                1,
            ),
            &Options::default(),
        )
        .unwrap_err();
        assert!(matches!(e, ProgramError::Untrusted { .. }), "{e}");
        let e = answer(&ran("", "", 0), &Options::default()).unwrap_err();
        assert!(matches!(e, ProgramError::NoAnswer { .. }), "{e}");
    }

    #[test]
    fn a_base_url_makes_a_provider_of_its_own() {
        let mut cmd = Command::new("codex");
        let options = Options {
            base_url: Some("http://127.0.0.1:9/v1".into()),
            api_key_env: Some("MOCK_KEY".into()),
            ..Default::default()
        };
        command(&mut cmd, &options, Some("-do it"));
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(args.contains(&"model_providers.uwf.base_url=\"http://127.0.0.1:9/v1\"".into()));
        assert!(args.contains(&"model_providers.uwf.env_key=\"MOCK_KEY\"".into()));
        assert_eq!(&args[args.len() - 2..], ["--", "-do it"]);
    }
}
