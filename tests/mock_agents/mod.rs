//! A scripted model server on loopback for the agent-program tests (`tests/agent_programs.rs`):
//! it speaks Anthropic Messages (streamed, with `tool_use`) to Claude Code, the OpenAI
//! Responses API (streamed, with an `apply_patch` custom tool call) to Codex and OpenAI Chat
//! Completions (streamed, with a `write` tool call) to OpenCode. The first model
//! call of a run asks the program to write a file; once the tool's result comes back, the model
//! answers with the role's output. Every reply reports token usage, summed here for the tests to
//! compare. In hang mode it takes requests and never answers. Nothing beyond 127.0.0.1.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

/// Usage the mock reports for each Anthropic call: input, cache creation, cache read, output.
pub const CLAUDE_USAGE: (u64, u64, u64, u64) = (100, 10, 5, 20);
/// Usage the mock reports for each Responses call: input (cached included), cached, output.
pub const CODEX_USAGE: (u64, u64, u64) = (300, 50, 30);
/// Usage the mock reports for each Chat Completions call: prompt (cached included), cached,
/// completion.
pub const CHAT_USAGE: (u64, u64, u64) = (400, 100, 50);

/// What the model does in a run.
#[derive(Debug, Clone)]
pub struct Script {
    /// Claude Code: the absolute path its Write tool creates.
    pub claude_file: String,
    /// Codex: the path (relative to its working directory) its apply_patch adds.
    pub codex_file: String,
    /// The file's content (one line).
    pub content: String,
    /// The final answer for Claude Code (the role's output).
    pub claude_answer: String,
    /// The final answer for Codex (the role's output).
    pub codex_answer: String,
    /// OpenCode: the absolute path its write tool creates.
    pub chat_file: String,
    /// The final answer for OpenCode (the role's output).
    pub chat_answer: String,
}

/// Token totals the mock reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reported {
    pub calls: u64,
    pub input: u64,
    pub cached: u64,
    pub output: u64,
}

#[derive(Default)]
struct State {
    claude: Reported,
    codex: Reported,
    chat: Reported,
    requests: Vec<String>,
    bodies: Vec<String>,
}

/// The running server (it lives as long as the test).
pub struct MockAgents {
    pub port: u16,
    state: Arc<Mutex<State>>,
    hang: Arc<AtomicBool>,
    refuse: Arc<AtomicBool>,
}

impl MockAgents {
    pub fn start(script: Script) -> MockAgents {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let port = listener.local_addr().expect("addr").port();
        let state = Arc::new(Mutex::new(State::default()));
        let hang = Arc::new(AtomicBool::new(false));
        let refuse = Arc::new(AtomicBool::new(false));
        let (s, h, r) = (state.clone(), hang.clone(), refuse.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (s, h, r, script) = (s.clone(), h.clone(), r.clone(), script.clone());
                std::thread::spawn(move || {
                    let _ = serve(stream, &script, &s, (&h, &r));
                });
            }
        });
        MockAgents {
            port,
            state,
            hang,
            refuse,
        }
    }

    /// From now on, refuse every model call with 401 (a bad key).
    pub fn refuse_key(&self) {
        self.refuse.store(true, Ordering::SeqCst);
    }

    /// From now on, take requests and never answer them.
    pub fn hang(&self) {
        self.hang.store(true, Ordering::SeqCst);
    }

    pub fn claude_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn codex_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    pub fn claude(&self) -> Reported {
        self.state.lock().unwrap().claude
    }

    pub fn codex(&self) -> Reported {
        self.state.lock().unwrap().codex
    }

    /// What the Chat Completions calls (OpenCode's) reported.
    pub fn chat(&self) -> Reported {
        self.state.lock().unwrap().chat
    }

    pub fn chat_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// How many model calls of each program (`/v1/messages`, `/v1/responses`) carried `needle`.
    pub fn calls_with(&self, needle: &str) -> (usize, usize) {
        let state = self.state.lock().unwrap();
        let count = |path: &str| {
            state
                .requests
                .iter()
                .zip(&state.bodies)
                .filter(|(r, b)| r.contains(path) && b.contains(needle))
                .count()
        };
        (count("/v1/messages"), count("/v1/responses"))
    }

    /// `METHOD path` of every request, in order.
    pub fn requests(&self) -> Vec<String> {
        self.state.lock().unwrap().requests.clone()
    }
}

fn serve(
    stream: TcpStream,
    script: &Script,
    state: &Mutex<State>,
    (hang, refuse): (&AtomicBool, &AtomicBool),
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_owned();
        let path = parts.next().unwrap_or_default().to_owned();
        let mut length = 0usize;
        let mut chunked = false;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h)? == 0 {
                return Ok(());
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let lower = h.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
            if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
                chunked = true;
            }
        }
        let body = if chunked {
            read_chunked(&mut reader)?
        } else {
            let mut b = vec![0u8; length];
            reader.read_exact(&mut b)?;
            b
        };
        {
            let mut state = state.lock().unwrap();
            state.requests.push(format!("{method} {path}"));
            state
                .bodies
                .push(String::from_utf8_lossy(&body).into_owned());
        }
        if method == "HEAD" || method == "GET" {
            out.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")?;
            continue;
        }
        if hang.load(Ordering::SeqCst) {
            // Hold the connection, never answer.
            std::thread::sleep(std::time::Duration::from_secs(3600));
            return Ok(());
        }
        if refuse.load(Ordering::SeqCst) {
            let body = json!({"type": "error", "error": {"type": "authentication_error",
                "message": "invalid x-api-key", "code": "invalid_api_key"}})
            .to_string();
            write!(
                out,
                "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )?;
            return Ok(());
        }
        let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let events = if path.starts_with("/v1/messages") {
            anthropic(&request, script, &mut state.lock().unwrap().claude)
        } else if path.starts_with("/v1/responses") {
            responses(&request, script, &mut state.lock().unwrap().codex)
        } else if path.starts_with("/v1/chat/completions") {
            chat(&request, script, &mut state.lock().unwrap().chat)
        } else {
            out.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")?;
            continue;
        };
        out.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n",
        )?;
        for (name, data) in events {
            // Chat Completions chunks are bare `data:` lines, ended by `data: [DONE]`.
            if name.is_empty() {
                write!(out, "data: {data}\n\n")?;
            } else {
                write!(out, "event: {name}\ndata: {data}\n\n")?;
            }
        }
        if path.starts_with("/v1/chat/completions") {
            out.write_all(b"data: [DONE]\n\n")?;
        }
        out.flush()?;
        return Ok(());
    }
}

fn read_chunked(reader: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size)?;
        let n =
            usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
        let mut chunk = vec![0u8; n + 2];
        reader.read_exact(&mut chunk)?;
        if n == 0 {
            return Ok(body);
        }
        body.extend_from_slice(&chunk[..n]);
    }
}

/// Anthropic Messages SSE: a Write tool call first; after its `tool_result`, the answer.
fn anthropic(request: &Value, script: &Script, total: &mut Reported) -> Vec<(String, Value)> {
    let last = request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or(Value::Null);
    let after_tool = last["content"]
        .as_array()
        .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"));
    let (input, creation, read, output) = CLAUDE_USAGE;
    total.calls += 1;
    total.input += input + creation + read;
    total.cached += read;
    total.output += output;
    let ev = |name: &str, data: Value| (name.to_owned(), data);
    let mut events = vec![ev(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": format!("msg_{}", total.calls), "type": "message", "role": "assistant",
            "model": request["model"], "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input, "cache_creation_input_tokens": creation,
                      "cache_read_input_tokens": read, "output_tokens": 0}}}),
    )];
    let stop = if after_tool {
        events.push(ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ));
        events.push(ev(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": script.claude_answer}}),
        ));
        "end_turn"
    } else {
        let input =
            json!({"file_path": script.claude_file, "content": format!("{}\n", script.content)});
        events.push(ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "Write", "input": {}}}),
        ));
        events.push(ev(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
        ));
        "tool_use"
    };
    events.push(ev(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    events.push(ev(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": output}}),
    ));
    events.push(ev("message_stop", json!({"type": "message_stop"})));
    events
}

/// OpenAI Responses SSE: an apply_patch call first; after its output, the answer.
fn responses(request: &Value, script: &Script, total: &mut Reported) -> Vec<(String, Value)> {
    let after_tool = request["input"].as_array().is_some_and(|items| {
        items
            .iter()
            .any(|i| i["type"] == "custom_tool_call_output" || i["type"] == "function_call_output")
    });
    let (input, cached, output) = CODEX_USAGE;
    total.calls += 1;
    total.input += input;
    total.cached += cached;
    total.output += output;
    let id = format!("resp_{}", total.calls);
    let item = if after_tool {
        json!({"type": "message", "id": format!("msg_{}", total.calls), "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": script.codex_answer, "annotations": []}]})
    } else {
        let patch = format!(
            "*** Begin Patch\n*** Add File: {}\n+{}\n*** End Patch\n",
            script.codex_file, script.content
        );
        json!({"type": "custom_tool_call", "id": format!("ctc_{}", total.calls), "call_id": "call_1",
               "name": "apply_patch", "input": patch, "status": "completed"})
    };
    let ev = |name: &str, mut data: Value| {
        data["type"] = Value::String(name.to_owned());
        (name.to_owned(), data)
    };
    let mut events = vec![
        ev(
            "response.created",
            json!({"response": {"id": id, "status": "in_progress", "output": []}}),
        ),
        ev(
            "response.output_item.added",
            json!({"output_index": 0, "item": item}),
        ),
    ];
    if after_tool {
        events.push(ev(
            "response.output_text.delta",
            json!({"output_index": 0, "content_index": 0, "item_id": item["id"], "delta": script.codex_answer}),
        ));
    }
    events.push(ev(
        "response.output_item.done",
        json!({"output_index": 0, "item": item}),
    ));
    events.push(ev(
        "response.completed",
        json!({"response": {"id": id, "status": "completed", "output": [item],
               "usage": {"input_tokens": input, "input_tokens_details": {"cached_tokens": cached},
                         "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
                         "total_tokens": input + output}}}),
    ));
    events
}

/// OpenAI Chat Completions SSE chunks: a `write` tool call first (its arguments streamed in two
/// pieces); after a `tool` message, the answer. The last chunk carries `usage` (asked for with
/// `stream_options.include_usage`).
fn chat(request: &Value, script: &Script, total: &mut Reported) -> Vec<(String, Value)> {
    let after_tool = request["messages"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
    let (prompt, cached, completion) = CHAT_USAGE;
    total.calls += 1;
    total.input += prompt;
    total.cached += cached;
    total.output += completion;
    let chunk = |delta: Value, finish: Value| {
        (
            String::new(),
            json!({"id": format!("chatcmpl-{}", total.calls), "object": "chat.completion.chunk",
                   "created": 1, "model": request["model"],
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
        )
    };
    let mut chunks = Vec::new();
    let finish = if after_tool {
        chunks.push(chunk(
            json!({"role": "assistant", "content": script.chat_answer}),
            Value::Null,
        ));
        "stop"
    } else {
        let args =
            json!({"filePath": script.chat_file, "content": format!("{}\n", script.content)})
                .to_string();
        let (head, tail) = args.split_at(args.len() / 2);
        chunks.push(chunk(
            json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": "call_1",
                   "type": "function", "function": {"name": "write", "arguments": head}}]}),
            Value::Null,
        ));
        chunks.push(chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": tail}}]}),
            Value::Null,
        ));
        "tool_calls"
    };
    chunks.push(chunk(json!({}), json!(finish)));
    let mut last = chunk(json!({}), Value::Null);
    last.1["choices"] = json!([]);
    last.1["usage"] = json!({"prompt_tokens": prompt, "completion_tokens": completion,
        "total_tokens": prompt + completion, "prompt_tokens_details": {"cached_tokens": cached}});
    chunks.push(last);
    chunks
}
