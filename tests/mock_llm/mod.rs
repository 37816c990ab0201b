//! A scripted OpenAI-compatible server on loopback for the LLM tests: it answers requests in
//! order with the replies it was given and records every request (method, path, Authorization
//! header, JSON body). No network beyond 127.0.0.1.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};

/// One scripted reply.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A status, extra headers and a body.
    Http {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// Answer `then` after sleeping (longer than the client's timeout, to test it).
    Sleep(Duration, Box<Reply>),
    /// A streamed completion (`text/event-stream`, chunked): one `data:` event per piece of
    /// text, each sent after `delay`, then `data: [DONE]`.
    Stream {
        pieces: Vec<String>,
        delay: Duration,
    },
}

impl Reply {
    pub fn json(status: u16, body: Value) -> Reply {
        Reply::Http {
            status,
            headers: vec![],
            body: body.to_string(),
        }
    }

    pub fn status(status: u16, body: &str, headers: &[(&str, &str)]) -> Reply {
        Reply::Http {
            status,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: body.to_owned(),
        }
    }
}

/// A completion whose message is `text`.
pub fn content(text: &str) -> Reply {
    Reply::json(
        200,
        json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": "mock",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
        }),
    )
}

/// A streamed completion of `pieces`, one every `delay`.
pub fn stream(pieces: &[&str], delay: Duration) -> Reply {
    Reply::Stream {
        pieces: pieces.iter().map(|p| p.to_string()).collect(),
        delay,
    }
}

/// A completion that calls tools: `(name, arguments as JSON text)`, with optional text.
pub fn calls_raw(text: Option<&str>, calls: &[(&str, &str)]) -> Reply {
    let tool_calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| {
            json!({"id": format!("call_{i}"), "type": "function", "function": {"name": name, "arguments": args}})
        })
        .collect();
    Reply::json(
        200,
        json!({
            "id": "chatcmpl-2", "object": "chat.completion", "model": "mock",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "tool_calls": tool_calls}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
        }),
    )
}

/// A completion with one tool call.
pub fn call(name: &str, args: Value) -> Reply {
    calls_raw(None, &[(name, &args.to_string())])
}

/// A request the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub authorization: Option<String>,
    pub body: Value,
}

impl Recorded {
    /// The request's messages.
    pub fn messages(&self) -> &Vec<Value> {
        self.body["messages"].as_array().expect("messages")
    }

    /// The text of message `i` (negative: from the end).
    pub fn message(&self, i: isize) -> &Value {
        let m = self.messages();
        let at = if i < 0 { m.len() as isize + i } else { i } as usize;
        &m[at]
    }
}

/// The running server; stops when dropped.
pub struct Mock {
    /// The API root to put in `baseUrl`.
    pub base_url: String,
    server: Arc<tiny_http::Server>,
    requests: Arc<Mutex<Vec<Recorded>>>,
    handle: Option<JoinHandle<()>>,
}

impl Mock {
    pub fn start(replies: Vec<Reply>) -> Mock {
        Mock::start_limited(replies, usize::MAX)
    }

    /// A server whose `/embeddings` refuses (HTTP 400, as providers do) a request holding an
    /// input longer than `input_limit` bytes.
    pub fn start_limited(replies: Vec<Reply>, input_limit: usize) -> Mock {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind loopback"));
        let port = server.server_addr().to_ip().expect("ip address").port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let replies = Arc::new(Mutex::new(VecDeque::from(replies)));
        let handle = {
            let (server, requests) = (server.clone(), requests.clone());
            std::thread::spawn(move || {
                for mut request in server.incoming_requests() {
                    let mut body = String::new();
                    let _ = request.as_reader().read_to_string(&mut body);
                    let authorization = request
                        .headers()
                        .iter()
                        .find(|h| h.field.equiv("Authorization"))
                        .map(|h| h.value.to_string());
                    requests.lock().unwrap().push(Recorded {
                        method: request.method().to_string(),
                        path: request.url().to_owned(),
                        authorization,
                        body: serde_json::from_str(&body).unwrap_or(Value::Null),
                    });
                    // Embeddings are computed, not scripted: any number of them, in any order.
                    if request.url().ends_with("/embeddings") {
                        let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                        respond(request, embeddings_reply(&body, input_limit));
                        continue;
                    }
                    let reply = replies.lock().unwrap().pop_front().unwrap_or_else(|| {
                        Reply::json(500, json!({"error": {"message": "no scripted reply left"}}))
                    });
                    match reply {
                        Reply::Sleep(delay, then) => {
                            std::thread::spawn(move || {
                                std::thread::sleep(delay);
                                respond(request, *then);
                            });
                        }
                        reply => respond(request, reply),
                    }
                }
            })
        };
        Mock {
            base_url: format!("http://127.0.0.1:{port}/v1"),
            server,
            requests,
            handle: Some(handle),
        }
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

/// The dimension of the mock's embeddings.
pub const EMBED_DIM: usize = 1024;

/// Words too common to say what a text is about.
const STOP: &[&str] = &[
    "the", "and", "for", "are", "but", "not", "you", "all", "any", "can", "had", "her", "was",
    "one", "our", "out", "has", "how", "its", "may", "who", "did", "get", "got", "let", "use",
    "this", "that", "with", "from", "they", "them", "then", "than", "what", "when", "where",
    "which", "will", "would", "should", "could", "into", "onto", "over", "does", "doe", "each",
    "your", "their", "there", "these", "those", "been", "being", "have", "were", "why", "also",
    "some", "such", "only", "very", "just", "more", "most", "other",
];

/// Words a model would place near each other: each group shares one dimension, as a real
/// embedding puts synonyms together. Generic software vocabulary, not tuned to any query.
const SYNONYMS: &[&[&str]] = &[
    &["credential", "key", "token", "secret", "password"],
    &[
        "alive",
        "liveness",
        "health",
        "healthz",
        "healthy",
        "readiness",
        "ready",
    ],
    &["poll", "probe", "check", "ping"],
    &["freeze", "pause", "suspend", "halt", "stop"],
    &["resume", "unpause", "continue", "restart"],
    &["retry", "attempt", "redeliver", "backoff"],
    &["callback", "webhook", "hook", "notification"],
    &["sign", "signature", "hmac", "digest"],
    &["restore", "recover", "backup", "dump", "snapshot"],
    &["upgrade", "migrate", "migration", "version", "bump"],
    &["limit", "quota", "throttle", "burst", "rate"],
    &["schedule", "cron", "crontab", "periodic", "recurring"],
    &["plugin", "extension", "addon", "module"],
    &["page", "paginate", "pagination", "cursor", "offset"],
    &["stuck", "hang", "hung", "frozen", "blocked"],
    &["benchmark", "throughput", "load", "performance"],
    &["chart", "graph", "dashboard", "grafana", "plot"],
    &["config", "configuration", "setting", "option", "env"],
];

/// A deterministic stand-in for a model's embedding: a bag of words (lower-cased, split at
/// anything not alphanumeric, stop words dropped, a few English suffixes cut, synonyms of
/// [`SYNONYMS`] merged), each word adding `1 + ln(count)` to the dimension its hash picks,
/// with a sign; normalised. Texts about the same thing point the same way, even in other
/// words, as real embeddings of related texts do.
pub fn mock_embedding(text: &str) -> Vec<f32> {
    let mut counts = std::collections::BTreeMap::<String, u32>::new();
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
    {
        if word.len() < 3 || STOP.contains(&word.as_str()) {
            continue;
        }
        let mut stem = word.as_str();
        for suffix in ["ing", "ed", "es", "s"] {
            if let Some(s) = stem.strip_suffix(suffix).filter(|s| s.len() >= 3) {
                stem = s;
                break;
            }
        }
        let concept = SYNONYMS
            .iter()
            .find(|group| group.contains(&stem) || group.contains(&word.as_str()))
            .map_or(stem, |group| group[0]);
        *counts.entry(concept.to_owned()).or_default() += 1;
    }
    let mut v = vec![0f32; EMBED_DIM];
    for (word, count) in counts {
        let h = word.bytes().fold(0xcbf29ce484222325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100000001b3)
        });
        let weight = 1.0 + (count as f32).ln();
        let sign = if h >> 63 == 0 { 1.0 } else { -1.0 };
        v[(h % EMBED_DIM as u64) as usize] += sign * weight;
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
    v.iter().map(|x| x / norm).collect()
}

/// The answer to `POST /embeddings` in the OpenAI shape.
fn embeddings_reply(body: &Value, input_limit: usize) -> Reply {
    let texts: Vec<String> = match &body["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items
            .iter()
            .map(|t| t.as_str().unwrap_or("").to_owned())
            .collect(),
        _ => return Reply::json(400, json!({"error": {"message": "no input"}})),
    };
    if let Some(i) = texts.iter().position(|t| t.len() > input_limit) {
        return Reply::json(
            400,
            json!({"error": {"message": format!(
                "input[{i}] is {} bytes, over this model's limit of {input_limit}",
                texts[i].len()
            )}}),
        );
    }
    let data: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": mock_embedding(t)}))
        .collect();
    Reply::json(
        200,
        json!({"object": "list", "data": data, "model": body["model"]}),
    )
}

fn respond(request: tiny_http::Request, reply: Reply) {
    if let Reply::Stream { pieces, delay } = reply {
        let mut pending: VecDeque<Vec<u8>> = pieces
            .iter()
            .map(|p| {
                let event = json!({"id": "chatcmpl-s", "object": "chat.completion.chunk", "model": "mock",
                    "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": null}]});
                format!("data: {event}\n\n").into_bytes()
            })
            .collect();
        let last = json!({"id": "chatcmpl-s", "object": "chat.completion.chunk", "model": "mock",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
        pending.push_back(format!("data: {last}\n\ndata: [DONE]\n\n").into_bytes());
        // Written by hand on the raw connection, flushed event by event: tiny_http's own
        // chunked writer buffers, which would hide the timing under test.
        let mut out = request.into_writer();
        let _ = out.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
        );
        let _ = out.flush();
        for event in pending {
            std::thread::sleep(delay);
            if out.write_all(&event).and_then(|()| out.flush()).is_err() {
                return;
            }
        }
        return;
    }
    let Reply::Http {
        status,
        headers,
        body,
    } = reply
    else {
        panic!("nested sleeps are not scripted");
    };
    let mut response = tiny_http::Response::from_string(body)
        .with_status_code(status)
        .with_header(
            tiny_http::Header::from_bytes("Content-Type", "application/json").expect("header"),
        );
    for (k, v) in headers {
        response = response.with_header(tiny_http::Header::from_bytes(k, v).expect("header"));
    }
    let _ = request.respond(response);
}

impl Drop for Mock {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}
