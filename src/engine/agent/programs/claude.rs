//! Claude Code as an agent (`uwf agent claude`): its flags and environment, and its
//! `--output-format json` result read into an [`Answer`].

use std::process::Command;

use serde_json::Value;

use super::{Answer, Options, Program, ProgramError, Ran, Tokens};

/// `claude -p --output-format json --permission-mode acceptEdits [--model M] EXTRA… -- PROMPT`
/// (without `prompt`, Claude Code reads it on stdin), with outside traffic other than the model
/// API turned off.
pub(crate) fn command(cmd: &mut Command, options: &Options, prompt: Option<&str>) {
    cmd.args(["-p", "--output-format", "json"]);
    cmd.args(["--permission-mode", "acceptEdits"]);
    if let Some(model) = &options.model {
        cmd.args(["--model", model]);
    }
    cmd.args(&options.extra);
    if let Some(prompt) = prompt {
        cmd.arg("--").arg(prompt);
    }
    if std::env::var_os("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC").is_none() {
        cmd.env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
    }
    if let Some(url) = &options.base_url {
        cmd.env("ANTHROPIC_BASE_URL", url);
    }
    if let Some(key) = options
        .api_key_env
        .as_deref()
        .and_then(|var| std::env::var(var).ok())
    {
        cmd.env("ANTHROPIC_API_KEY", key);
    }
}

const ROOT_REFUSAL: &str = "cannot be used with root/sudo privileges";
const LOGIN: [&str; 4] = [
    "Invalid API key",
    "Please run /login",
    "Not logged in",
    "authentication_error",
];
const TRUST: [&str; 2] = ["trust this folder", "Do you trust"];

/// The answer in Claude Code's JSON result (the last stdout line that is one), or the named
/// error its output shows.
pub(crate) fn answer(ran: &Ran) -> Result<Answer, ProgramError> {
    let result = ran
        .stdout
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .find(|v| v.get("type").and_then(Value::as_str) == Some("result"))
        .or_else(|| serde_json::from_str::<Value>(ran.stdout.trim()).ok())
        .filter(|v| v.is_object());
    let Some(result) = result else {
        return Err(
            classify(&format!("{}\n{}", ran.stdout, ran.stderr_tail)).unwrap_or_else(|| {
                ProgramError::NoAnswer {
                    program: Program::Claude,
                    status: ran.status_text(),
                    stderr_tail: ran.stderr_tail.clone(),
                }
            }),
        );
    };
    let text = result
        .get("result")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    // `subtype` stays "success" on a provider error: `is_error` is what says it failed.
    if result.get("is_error").and_then(Value::as_bool) == Some(true) {
        return Err(classify(&text).unwrap_or(ProgramError::Provider {
            program: Program::Claude,
            message: if text.is_empty() {
                "the result says is_error, with no message".into()
            } else {
                text
            },
        }));
    }
    if text.trim().is_empty() {
        return Err(ProgramError::NoAnswer {
            program: Program::Claude,
            status: ran.status_text(),
            stderr_tail: ran.stderr_tail.clone(),
        });
    }
    let mut answer = Answer {
        text,
        tokens: tokens(&result),
        session_id: result
            .get("session_id")
            .and_then(Value::as_str)
            .map(str::to_owned),
        turns: result.get("num_turns").and_then(Value::as_u64),
        ..Default::default()
    };
    if let Some(denials) = result
        .get("permission_denials")
        .and_then(Value::as_array)
        .filter(|d| !d.is_empty())
    {
        answer
            .extra
            .insert("permissionDenials".into(), Value::Array(denials.clone()));
    }
    Ok(answer)
}

/// The named error a message shows, if any.
fn classify(text: &str) -> Option<ProgramError> {
    let line_with = |needle: &str| {
        text.lines()
            .find(|l| l.contains(needle))
            .unwrap_or(needle)
            .trim()
            .to_owned()
    };
    if text.contains(ROOT_REFUSAL) {
        return Some(ProgramError::RootRefused {
            program: Program::Claude,
            message: line_with(ROOT_REFUSAL),
        });
    }
    if let Some(n) = LOGIN.iter().find(|n| text.contains(**n)) {
        return Some(ProgramError::Login {
            program: Program::Claude,
            message: line_with(n),
        });
    }
    if let Some(n) = TRUST.iter().find(|n| text.contains(**n)) {
        return Some(ProgramError::Untrusted {
            program: Program::Claude,
            message: line_with(n),
        });
    }
    None
}

/// `usage` summed over the run: every prompt token counts as input, cache reads as cached.
fn tokens(result: &Value) -> Tokens {
    let usage = &result["usage"];
    let n = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    let cached = n("cache_read_input_tokens");
    Tokens {
        input: n("input_tokens") + n("cache_creation_input_tokens") + cached,
        output: n("output_tokens"),
        cached,
        model: result
            .get("modelUsage")
            .and_then(Value::as_object)
            .and_then(|m| m.keys().next().cloned()),
        cost_usd: result.get("total_cost_usd").and_then(Value::as_f64),
    }
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
    fn the_result_gives_text_tokens_session_and_turns() {
        let out = r#"{"type":"result","subtype":"success","is_error":false,"num_turns":2,"result":"done","session_id":"s1","total_cost_usd":0.002,"usage":{"input_tokens":100,"cache_creation_input_tokens":20,"cache_read_input_tokens":30,"output_tokens":40},"modelUsage":{"claude-x":{}}}"#;
        let a = answer(&ran(out, "", 0)).unwrap();
        assert_eq!(a.text, "done");
        assert_eq!(a.session_id.as_deref(), Some("s1"));
        assert_eq!(a.turns, Some(2));
        assert_eq!(
            a.tokens,
            Tokens {
                input: 150,
                output: 40,
                cached: 30,
                model: Some("claude-x".into()),
                cost_usd: Some(0.002)
            }
        );
    }

    #[test]
    fn is_error_is_a_provider_error_even_when_subtype_says_success() {
        let out = r#"{"type":"result","subtype":"success","is_error":true,"result":"API Error: Unable to connect to API (ConnectionRefused)"}"#;
        let e = answer(&ran(out, "", 1)).unwrap_err();
        assert!(matches!(e, ProgramError::Provider { .. }), "{e}");
        assert!(e.to_string().contains("ConnectionRefused"), "{e}");
        let out =
            r#"{"type":"result","is_error":true,"result":"Invalid API key · Please run /login"}"#;
        let e = answer(&ran(out, "", 1)).unwrap_err();
        assert!(matches!(e, ProgramError::Login { .. }), "{e}");
    }

    #[test]
    fn the_root_refusal_and_no_answer_are_named() {
        let e = answer(&ran(
            "",
            "--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons",
            1,
        ))
        .unwrap_err();
        assert!(matches!(e, ProgramError::RootRefused { .. }), "{e}");
        let e = answer(&ran("", "boom", 1)).unwrap_err();
        assert!(matches!(e, ProgramError::NoAnswer { .. }), "{e}");
        assert!(e.to_string().contains("exit code 1"), "{e}");
    }
}
