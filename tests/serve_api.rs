//! `uwf serve`'s API and security through the real binary (`docs/dashboard.md`): the statuses the
//! CLI's exit codes map to, the security model (loopback host check, foreign origins, the token,
//! read-only), immutable node permalinks, and answers, diffs, starts and forks that give what the
//! CLI gives.

mod common;
mod pg_server;

use common::serve::{Server, header, store};

fn steps_of(env: &common::Env, id: &str) -> serde_json::Value {
    common::json(&env.ok(&["thread", "show", id]))["steps"].clone()
}

#[test]
fn the_api_answers_as_the_cli_does() {
    let env = store();
    let id = env.ok(&[
        "thread",
        "start",
        "review",
        "-p",
        "Fix <b>login</b> & <script>x()</script>",
        "-q",
    ]);
    // Waiting for a person: exit 4.
    env.ends(&["thread", "run", &id], 4);
    let server = Server::start(&env, "127.0.0.1:0", &[]);

    // Pages: every path gets the shell with a strict CSP.
    for path in [
        "/",
        &format!("/threads/{id}"),
        "/workflows",
        "/workflows/review",
        "/diff?a=x&b=y",
    ] {
        let (status, headers, body) = server.request("GET", path, &[], None);
        assert_eq!(status, 200, "{path}");
        let csp = header(&headers, "content-security-policy").expect("CSP");
        assert!(
            csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
            "{csp}"
        );
        assert!(body.contains("/assets/app.js"), "{path}: {body}");
    }

    // The list, the thread, its steps and its question.
    let (status, list) = server.get_json("/api/threads?limit=10");
    assert_eq!(status, 200);
    assert_eq!(list["items"][0]["thread"], id.as_str());
    assert_eq!(list["items"][0]["status"], "awaiting");
    let (_, count) = server.get_json("/api/threads/count?status=awaiting");
    assert_eq!(count["count"], 1);
    let (_, found) = server.get_json("/api/threads?q=LOGIN");
    assert_eq!(found["items"].as_array().map(Vec::len), Some(1));
    let (_, none) = server.get_json("/api/threads?q=nothing-like-it");
    assert_eq!(none["items"].as_array().map(Vec::len), Some(0));
    let (status, bad) = server.get_json("/api/threads?status=sleeping");
    assert_eq!(status, 422, "{bad}");
    let (status, thread) = server.get_json(&format!("/api/threads/{id}"));
    assert_eq!(status, 200);
    assert_eq!(thread["awaiting"], "approver");
    assert_eq!(thread["path"], serde_json::json!(["writer"]));
    let (_, question) = server.get_json(&format!("/api/threads/{id}/question"));
    assert_eq!(question["role"], "approver");
    assert_eq!(
        question["schema"]["properties"]["approved"]["type"],
        "boolean"
    );
    let (status, missing) = server.get_json("/api/threads/01ZZZZZZZZZZZZZZZZZZZZZZZZ");
    assert_eq!(status, 404, "{missing}");
    assert!(missing["error"].as_str().is_some());

    // An invalid answer is refused with the schema's message; a valid one publishes the step.
    let (status, refused) = server.post_json(
        &format!("/api/threads/{id}/answer"),
        "{\"approved\": \"yes\"}",
    );
    assert_eq!(status, 422, "{refused}");
    let message = refused["error"].as_str().unwrap_or_default();
    assert!(
        message.contains("/approved") && message.contains("boolean"),
        "{message}"
    );
    assert_eq!(steps_of(&env, &id), 1);
    let (status, answered) =
        server.post_json(&format!("/api/threads/{id}/answer"), "{\"approved\": true}");
    assert_eq!(status, 200, "{answered}");
    assert_eq!(steps_of(&env, &id), 2);

    // A diff is `uwf thread diff`'s.
    let other = env.ok(&["thread", "start", "solve-issue", "-p", "other", "-q"]);
    env.ok(&["thread", "step", &other]);
    let a = format!("{id}:1");
    let b = format!("{other}:1");
    let (status, diff) = server.get_json(&format!("/api/diff?a={a}&b={b}"));
    assert_eq!(status, 200, "{diff}");
    assert_eq!(
        diff["diff"].as_str().expect("diff"),
        env.ok(&["thread", "diff", &a, &b]) + "\n"
    );

    // Start and fork.
    let (status, started) = server.post_json(
        "/api/threads",
        "{\"workflow\": \"review\", \"prompt\": \"from the API\"}",
    );
    assert_eq!(status, 201, "{started}");
    let new = started["thread"].as_str().expect("thread").to_owned();
    assert_eq!(
        common::json(&env.ok(&["thread", "show", &new]))["status"],
        "active"
    );
    let (status, forked) = server.post_json(&format!("/api/steps/{a}/fork"), "");
    assert_eq!(status, 200, "{forked}");
    let fork = forked["thread"].as_str().expect("fork");
    assert_eq!(steps_of(&env, fork), 1);
    let (_, children) = server.get_json(&format!("/api/threads?parent={id}"));
    let ids: Vec<&str> = children["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|t| t["thread"].as_str())
        .collect();
    assert_eq!(ids, vec![fork], "{children}");
    let (status, unknown) = server.post_json("/api/steps/ZZZZZZZZZZZZZ/fork", "");
    assert_eq!(status, 404, "{unknown}");

    // Pause and resume: the thread says so, and a step is refused while it is paused. A thread
    // started here runs in the server's working directory.
    let (status, paused) = server.post_json(&format!("/api/threads/{new}/pause"), "");
    assert_eq!(
        (status, &paused["paused"]),
        (200, &serde_json::json!(true)),
        "{paused}"
    );
    let thread: serde_json::Value = server
        .request(
            "GET",
            &format!("/api/threads/{id}"),
            &[("authorization", &bearer)],
            None,
        )
        .2
        .parse()
        .expect("JSON");
    let acts: Vec<(String, String)> = thread["acts"]
        .as_array()
        .expect("acts")
        .iter()
        .map(|a| {
            (
                a["event"].as_str().unwrap().to_owned(),
                a["by"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        acts.ends_with(&[
            ("paused".into(), "Ann Lee".into()),
            ("resumed".into(), "Ann Lee".into())
        ]),
        "{acts:?}"
    );

    // Revoked while the server runs: Ann is out at once, bob is not.
    env.ok(&["serve", "token", "revoke", "Ann Lee"]);
    let (status, _, _) = server.request("GET", "/api/threads", &[("authorization", &bearer)], None);
    assert_eq!(status, 401);
    let (status, _, _) = server.request("GET", &format!("/login?token={ann}"), &[], None);
    assert_eq!(status, 401);
    let (status, _, _) = server.request(
        "GET",
        "/api/threads",
        &[("authorization", &format!("Bearer {bob}"))],
        None,
    );
    assert_eq!(status, 200);
    let out = env
        .uwf()
        .args(["serve", "token", "revoke", "Ann Lee"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Ann Lee has no token"));
}
