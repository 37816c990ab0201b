//! OpenCode as an agent (`uwf agent opencode`): its flags and environment (no update check, no
//! models.dev fetch, no LSP downloads, no sharing; with `--base-url`, a provider of our own
//! speaking the OpenAI Chat Completions API), and its `run --format json` events read into an
//! [`Answer`].

use std::process::Command;

use serde_json::{Value, json};

use super::{Answer, Options, Program, ProgramError, Ran, Tokens};

/// The provider uwf defines when given `--base-url`.
const PROVIDER: &str = "uwf";

/// Environment that keeps OpenCode from reaching out on its own.
pub(crate) const QUIET_ENV: [(&str, &str); 4] = [
    ("OPENCODE_DISABLE_AUTOUPDATE", "1"),
    ("OPENCODE_DISABLE_MODELS_FETCH", "1"),
    ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1"),
    ("OPENCODE_DISABLE_SHARE", "1"),
];

/// `opencode run --format json --title uwf [-m M] EXTRA…` with `PWD` set to the working
/// directory, the prompt on stdin (OpenCode reads
/// its message there when none is given as an argument, so no prompt is ever taken for a flag).
/// With `--base-url`, `OPENCODE_CONFIG_CONTENT` defines the provider `uwf` there (the package
/// `@ai-sdk/openai-compatible`, built into OpenCode), its key read from `--api-key-env`.
pub(crate) fn command(cmd: &mut Command, options: &Options) -> Result<(), ProgramError> {
    cmd.args(["run", "--format", "json"]);
    // A title of our own: OpenCode otherwise asks the model for one, a call its events never report.
    cmd.args(["--title", "uwf"]);
    for (key, value) in QUIET_ENV {
        cmd.env(key, value);
    }
    // OpenCode takes its project directory from $PWD, not from the process's working directory:
    // an inherited PWD would put it elsewhere (and refuse writes to the thread's directory).
    if let Ok(dir) = std::env::current_dir() {
        cmd.env("PWD", dir);
    }
    match (&options.base_url, &options.model) {
        (Some(url), Some(model)) => {
            cmd.env(
                "OPENCODE_CONFIG_CONTENT",
                provider_config(url, model, options),
            );
            cmd.args(["-m", &format!("{PROVIDER}/{model}")]);
        }
        (Some(_), None) => {
            return Err(ProgramError::NeedsModel {
                program: Program::OpenCode,
            });
        }
        (None, Some(model)) => {
            cmd.args(["-m", model]);
        }
        (None, None) => {}
    }
    cmd.args(&options.extra);
    Ok(())
}

/// The config that defines the provider `uwf` at `url` with the one model `model`.
fn provider_config(url: &str, model: &str, options: &Options) -> String {
    let key_env = options.api_key_env.as_deref().unwrap_or("OPENAI_API_KEY");
    json!({
        "provider": {PROVIDER: {
            "npm": "@ai-sdk/openai-compatible",
            "name": PROVIDER,
            "options": {"baseURL": url, "apiKey": format!("{{env:{key_env}}}")},
            "models": {model: {"name": model}},
        }},
        "model": format!("{PROVIDER}/{model}"),
        "small_model": format!("{PROVIDER}/{model}"),
        "autoupdate": false,
        "share": "disabled",
    })
    .to_string()
}

/// What an `error` event's HTTP status or name says about a key or a login.
fn is_login(name: &str, status: Option<u64>) -> bool {
    matches!(status, Some(401 | 403)) || name == "ProviderAuthError"
}

/// The answer in OpenCode's JSON events: the text parts of the last message that has text, the
/// tokens and cost of every `step_finish`; an `error` event is the provider's (or the login's).
pub(crate) fn answer(ran: &Ran, options: &Options) -> Result<Answer, ProgramError> {
    let mut answer = Answer::default();
    let mut texts: Vec<String> = Vec::new();
    let mut text_message: Option<String> = None;
    let mut cost = 0.0f64;
    let mut turns = 0u64;
    let mut error: Option<(String, Option<u64>, String)> = None;
    for event in ran
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
    {
        if answer.session_id.is_none() {
            answer.session_id = event
                .get("sessionID")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        let part = &event["part"];
        match event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
        {
            "text" => {
                let message = part.get("messageID").and_then(Value::as_str);
                if message.map(str::to_owned) != text_message {
                    texts.clear();
                    text_message = message.map(str::to_owned);
                }
                if let Some(text) = part.get("text").and_then(Value::as_str) {
                    texts.push(text.to_owned());
                }
            }
            "step_finish" => {
                turns += 1;
                let tokens = &part["tokens"];
                let n = |v: &Value| v.as_u64().unwrap_or(0);
                let (read, write) = (n(&tokens["cache"]["read"]), n(&tokens["cache"]["write"]));
                answer.tokens.input += n(&tokens["input"]) + read + write;
                answer.tokens.cached += read;
                answer.tokens.output += n(&tokens["output"]) + n(&tokens["reasoning"]);
                cost += part.get("cost").and_then(Value::as_f64).unwrap_or(0.0);
            }
            "error" => {
                let e = &event["error"];
                let name = e.get("name").and_then(Value::as_str).unwrap_or("error");
                let message = e["data"]
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or(name);
                let status = e["data"].get("statusCode").and_then(Value::as_u64);
                error = Some((name.to_owned(), status, message.to_owned()));
            }
            _ => {}
        }
    }
    answer.text = texts.join("\n");
    if let Some((name, status, message)) = error.filter(|_| answer.text.trim().is_empty()) {
        let message = match status {
            Some(code) => format!("{message} (HTTP {code})"),
            None => message,
        };
        return Err(if is_login(&name, status) {
            ProgramError::Login {
                program: Program::OpenCode,
                message,
            }
        } else {
            ProgramError::Provider {
                program: Program::OpenCode,
                message,
            }
        });
    }
    if answer.text.trim().is_empty() {
        return Err(ProgramError::NoAnswer {
            program: Program::OpenCode,
            status: ran.status_text(),
            stderr_tail: ran.stderr_tail.clone(),
        });
    }
    answer.turns = Some(turns);
    answer.tokens = Tokens {
        model: options.model.clone(),
        // OpenCode prices only the models it knows; 0 means "no price", left to config.yaml.
        cost_usd: (cost > 0.0).then_some(cost),
        ..answer.tokens
    };
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn ran(stdout: &str, code: i32) -> Ran {
        Ran {
            stdout: stdout.into(),
            stderr_tail: String::new(),
            status: std::process::ExitStatus::from_raw(code << 8),
        }
    }

    #[test]
    fn the_last_text_and_summed_step_tokens_are_the_answer() {
        let out = r#"{"type":"step_start","sessionID":"ses_1","part":{"type":"step-start"}}
{"type":"text","sessionID":"ses_1","part":{"messageID":"msg_1","type":"text","text":"Let me write it."}}
{"type":"tool_use","sessionID":"ses_1","part":{"type":"tool","tool":"write","state":{"status":"completed"}}}
{"type":"step_finish","sessionID":"ses_1","part":{"reason":"tool-calls","tokens":{"total":450,"input":300,"output":50,"reasoning":0,"cache":{"write":0,"read":100}},"cost":0}}
{"type":"text","sessionID":"ses_1","part":{"messageID":"msg_2","type":"text","text":"Done."}}
{"type":"text","sessionID":"ses_1","part":{"messageID":"msg_2","type":"text","text":"{\"approved\": true}"}}
{"type":"step_finish","sessionID":"ses_1","part":{"reason":"stop","tokens":{"total":460,"input":300,"output":50,"reasoning":10,"cache":{"write":5,"read":100}},"cost":0.25}}"#;
        let options = Options {
            model: Some("mock-model".into()),
            ..Default::default()
        };
        let a = answer(&ran(out, 0), &options).unwrap();
        assert_eq!(a.text, "Done.\n{\"approved\": true}");
        assert_eq!(a.session_id.as_deref(), Some("ses_1"));
        assert_eq!(a.turns, Some(2));
        assert_eq!(
            a.tokens,
            Tokens {
                input: 805,
                output: 110,
                cached: 200,
                model: Some("mock-model".into()),
                cost_usd: Some(0.25)
            }
        );
    }

    #[test]
    fn an_error_event_is_a_login_or_the_provider_and_silence_is_named() {
        let out = r#"{"type":"error","sessionID":"ses_1","error":{"name":"APIError","data":{"message":"Incorrect API key provided","statusCode":401}}}"#;
        let e = answer(&ran(out, 1), &Options::default()).unwrap_err();
        assert!(matches!(e, ProgramError::Login { .. }), "{e}");
        assert!(e.to_string().contains("Incorrect API key"), "{e}");
        let out = r#"{"type":"error","error":{"name":"UnknownError","data":{"message":"boom"}}}"#;
        let e = answer(&ran(out, 1), &Options::default()).unwrap_err();
        assert!(matches!(e, ProgramError::Provider { .. }), "{e}");
        let e = answer(&ran("", 0), &Options::default()).unwrap_err();
        assert!(matches!(e, ProgramError::NoAnswer { .. }), "{e}");
    }

    #[test]
    fn a_base_url_makes_a_provider_of_its_own_and_needs_a_model() {
        let mut cmd = Command::new("opencode");
        let mut options = Options {
            base_url: Some("http://127.0.0.1:9/v1".into()),
            api_key_env: Some("MOCK_KEY".into()),
            ..Default::default()
        };
        let e = command(&mut cmd, &options).unwrap_err();
        assert!(matches!(e, ProgramError::NeedsModel { .. }), "{e}");
        options.model = Some("m1".into());
        let mut cmd = Command::new("opencode");
        command(&mut cmd, &options).unwrap();
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(args[..3], ["run", "--format", "json"]);
        assert!(args.ends_with(&["-m".into(), "uwf/m1".into()]), "{args:?}");
        let config = cmd
            .get_envs()
            .find(|(k, _)| *k == "OPENCODE_CONFIG_CONTENT")
            .and_then(|(_, v)| v)
            .map(|v| serde_json::from_str::<Value>(&v.to_string_lossy()).unwrap())
            .unwrap();
        let provider = &config["provider"]["uwf"];
        assert_eq!(provider["options"]["baseURL"], "http://127.0.0.1:9/v1");
        assert_eq!(provider["options"]["apiKey"], "{env:MOCK_KEY}");
        assert_eq!(provider["npm"], "@ai-sdk/openai-compatible");
        assert_eq!(config["model"], "uwf/m1");
    }
}
