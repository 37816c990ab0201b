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
    let (_, thread) = server.get_json(&format!("/api/threads/{new}"));
    assert_eq!(thread["paused"], true, "{thread}");
    assert!(
        thread["workdir"].as_str().is_some_and(|d| !d.is_empty()),
        "{thread}"
    );
    let (status, refused) = server.post_json(&format!("/api/threads/{new}/step"), "");
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .unwrap_or_default()
            .contains("paused"),
        "{refused}"
    );
    server.post_json(&format!("/api/threads/{new}/resume"), "");
    let (_, thread) = server.get_json(&format!("/api/threads/{new}"));
    assert!(thread.get("paused").is_none(), "{thread}");

    // A workflow saved from the page: checked and registered as `workflow put` does.
    let origin = server.url.trim_end_matches('/').to_owned();
    let changed =
        common::serve::REVIEW.replace("goal: write the text", "goal: write the text well");
    let put = |name: &str, body: &str| {
        let (status, _, text) = server.request(
            "PUT",
            &format!("/api/workflows/{name}"),
            &[("origin", &origin)],
            Some(body),
        );
        (
            status,
            serde_json::from_str::<serde_json::Value>(&text).unwrap_or_default(),
        )
    };
    let (status, saved) = put("review", &changed);
    assert_eq!(
        (status, saved["status"].as_str()),
        (200, Some("updated")),
        "{saved}"
    );
    let (_, listed) = server.get_json("/api/workflows/review");
    assert_eq!(listed["versions"].as_array().map(Vec::len), Some(2));
    assert!(
        env.ok(&["workflow", "show", "review"])
            .contains("write the text well")
    );
    let (status, wrong) = put("other", &changed);
    assert_eq!(status, 422, "{wrong}");
    let (status, invalid) = put("review", "name: review\nroles: {}\n");
    assert_eq!(status, 422, "{invalid}");
    assert!(invalid["error"].as_str().is_some());

    // A node permalink: immutable, its hash as ETag, the same bytes never sent twice, and the
    // prompt shown as text.
    let start_hash = env.ok(&["thread", "show", &id]);
    let head = common::json(&start_hash)["head"]
        .as_str()
        .expect("head")
        .to_owned();
    let (status, headers, body) = server.request("GET", &format!("/n/{head}"), &[], None);
    assert_eq!(status, 200);
    assert!(header(&headers, "cache-control").is_some_and(|c| c.contains("immutable")));
    assert_eq!(
        header(&headers, "etag"),
        Some(format!("\"{head}\"").as_str())
    );
    assert!(body.contains(&head));
    let etag = format!("\"{head}\"");
    let (status, _, body) = server.request(
        "GET",
        &format!("/n/{head}"),
        &[("if-none-match", &etag)],
        None,
    );
    assert_eq!((status, body.as_str()), (304, ""));
    let (_, _, page) = server.request(
        "GET",
        &format!("/n/{}", thread["head"].as_str().unwrap()),
        &[],
        None,
    );
    assert!(!page.contains("<script>x()"), "{page}");
}

/// A person's answer posted to the API as they would type it, plain YAML, is taken as the CLI
/// and the mount take it; a refused one says which field and why (issue #41).
#[test]
fn the_api_takes_an_answer_in_plain_yaml() {
    let env = store();
    let id = env.ok(&["thread", "start", "review", "-p", "Notes", "-q"]);
    env.ends(&["thread", "run", &id], 4);
    let server = Server::start(&env, "127.0.0.1:0", &[]);
    let answer = format!("/api/threads/{id}/answer");
    let (status, refused) = server.post_json(&answer, "approved: yes please\n");
    assert_eq!(status, 422, "{refused}");
    let message = refused["error"].as_str().unwrap_or_default();
    assert!(
        message.contains("the field `approved` must be true or false"),
        "{message}"
    );
    let (status, answered) = server.post_json(&answer, "approved: true\n");
    assert_eq!(status, 200, "{answered}");
    let shown = common::json(&env.ok(&["thread", "show", &id]));
    assert_eq!(shown["status"], "done", "{shown}");
    let steps = env.ok(&["thread", "steps", &id]);
    assert!(steps.contains("\"approved\":true"), "{steps}");
}

#[test]
fn the_security_model_holds() {
    let env = store();
    let id = env.ok(&["thread", "start", "review", "-p", "guarded", "-q"]);
    let server = Server::start(&env, "127.0.0.1:0", &[]);
    // DNS rebinding: another host name is refused.
    let (status, _, _) =
        server.request("GET", "/api/threads", &[("host", "evil.example:80")], None);
    assert_eq!(status, 403);
    // A write from another site is refused, and nothing happens.
    let (status, _, body) = server.request(
        "POST",
        &format!("/api/threads/{id}/step"),
        &[("origin", "http://evil.example")],
        None,
    );
    assert_eq!(status, 403, "{body}");
    assert_eq!(steps_of(&env, &id), 0);
    // The page's own origin may.
    let (status, stepped) = server.post_json(&format!("/api/threads/{id}/step"), "");
    assert_eq!(status, 200, "{stepped}");
    assert_eq!(steps_of(&env, &id), 1);
    drop(server);

    // Read-only: every write is 405.
    let server = Server::start(&env, "127.0.0.1:0", &["--read-only"]);
    let (status, _) = server.post_json(&format!("/api/threads/{id}/step"), "");
    assert_eq!(status, 405);
    let (status, _, body) = server.request("GET", "/", &[], None);
    assert_eq!(status, 200);
    assert!(body.contains("data-mode=\"read-only\""), "{body}");
    assert_eq!(steps_of(&env, &id), 1);
    drop(server);

    // Beyond loopback: 401 without the token; the bearer token or the login's cookie pass.
    let server = Server::start(&env, "0.0.0.0:0", &[]);
    let login = server.login.clone().expect("a login URL");
    let token = std::fs::read_to_string(env.root().join("serve.token")).expect("token file");
    let token = token.trim();
    assert!(login.ends_with(&format!("?token={token}")), "{login}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(env.root().join("serve.token"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let (status, _, _) = server.request("GET", "/api/threads", &[], None);
    assert_eq!(status, 401);
    let (status, _, _) = server.request("GET", "/", &[], None);
    assert_eq!(status, 401);
    let bearer = format!("Bearer {token}");
    let (status, _, _) = server.request("GET", "/api/threads", &[("authorization", &bearer)], None);
    assert_eq!(status, 200);
    let (status, headers, _) = server.request("GET", &format!("/login?token={token}"), &[], None);
    assert_eq!(status, 303);
    let cookie = header(&headers, "set-cookie").expect("a cookie").to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap();
    let (status, _, _) = server.request("GET", "/api/threads", &[("cookie", pair)], None);
    assert_eq!(status, 200);
    let (status, _, _) = server.request("GET", "/login?token=wrong", &[], None);
    assert_eq!(status, 401);
}

/// Behind a TLS-terminating proxy (`docs/dashboard.md#behind-a-tls-proxy`) the browser's writes
/// carry `Origin: https://<host>`: they pass; other sites stay refused (issue #42: every write
/// got 403).
#[test]
fn writes_through_a_tls_proxy_pass_and_other_sites_stay_refused() {
    let env = store();
    let id = env.ok(&["thread", "start", "review", "-p", "proxied", "-q"]);
    // On loopback: the page's own host over https.
    let server = Server::start(&env, "127.0.0.1:0", &[]);
    let host = server
        .url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let (status, _, body) = server.request(
        "POST",
        &format!("/api/threads/{id}/step"),
        &[("origin", &format!("https://{host}"))],
        None,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(steps_of(&env, &id), 1);
    drop(server);

    // As the docs set it up: bound beyond loopback with the token, the proxy passing the
    // browser's `Host` on.
    let server = Server::start(&env, "0.0.0.0:0", &[]);
    let token = std::fs::read_to_string(env.root().join("serve.token")).expect("token file");
    let bearer = format!("Bearer {}", token.trim());
    let write = |origin: &str| {
        server.request(
            "POST",
            &format!("/api/threads/{id}/pause"),
            &[
                ("host", "dash.example"),
                ("origin", origin),
                ("authorization", &bearer),
            ],
            None,
        )
    };
    for foreign in [
        "https://evil.example",
        "http://evil.example",
        "https://dash.example.evil.example",
        "https://evil.example/dash.example",
        "null",
    ] {
        let (status, _, body) = write(foreign);
        assert_eq!(status, 403, "{foreign}: {body}");
    }
    let paused = || common::json(&env.ok(&["thread", "show", &id]))["paused"] == true;
    assert!(!paused(), "a refused write paused the thread");
    let (status, _, body) = write("https://dash.example");
    assert_eq!(status, 200, "{body}");
    assert!(paused());
}

/// A thread's live stream starts with its log and resumes where `Last-Event-ID` says.
#[test]
fn the_live_stream_resumes_at_the_log_offset() {
    let env = store();
    let id = env.ok(&["thread", "start", "solve-issue", "-p", "stream me", "-q"]);
    env.ok(&["thread", "step", &id]);
    env.ok(&["thread", "step", &id]);
    let log = std::fs::read_to_string(env.root().join("runs").join(format!("{id}.log"))).unwrap();
    let server = Server::start(&env, "127.0.0.1:0", &[]);
    let (end, whole) = server.first_log_event(&id, None);
    assert_eq!(end as usize, log.len());
    assert_eq!(whole, log);
    let second = log.find("── step 2").expect("a second header");
    let (_, rest) = server.first_log_event(&id, Some(second as u64));
    assert!(rest.starts_with("── step 2"), "{rest}");
}

/// Over PostgreSQL the dashboard of one machine shows another machine's threads and their logs.
#[test]
fn over_postgres_one_machines_dashboard_shows_anothers_work() {
    let name = "over_postgres_one_machines_dashboard_shows_anothers_work";
    let Some(server) = pg_server::shared(name) else {
        return;
    };
    let url = server.fresh_db(name);
    let a = common::machine::Machine::new(Some(&url), None);
    let b = common::machine::Machine::new(Some(&url), None);
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/solve-issue.yaml");
    a.ok(&["workflow", "put", example.to_str().unwrap()]);
    let id = a.ok(&["thread", "start", "solve-issue", "-p", "on machine A", "-q"]);
    a.ok(&["thread", "step", &id, "--agent", "dry"]);
    let dashboard = Server::start_with(b.uwf(), "127.0.0.1:0", &[]);
    let (status, list) = dashboard.get_json("/api/threads");
    assert_eq!(status, 200);
    assert_eq!(list["items"][0]["thread"], id.as_str());
    assert_eq!(list["items"][0]["prompt"], "on machine A");
    let (_, text) = dashboard.first_log_event(&id, Some(0));
    assert!(
        text.starts_with("── step 1 · planner · agent dry"),
        "{text}"
    );
}

/// A token per person (issue #42 point 8: "everyone shares one token"): the token names the
/// author of every write, whatever the page says of itself; once anyone has one the shared token
/// lets no one in; revoking takes effect on the running server; the file keeps no token.
#[test]
fn a_personal_token_names_its_author_and_can_be_taken_back() {
    let env = store();
    let id = env.ok(&["thread", "start", "review", "-p", "whose hands", "-q"]);
    let shared_server = Server::start(&env, "0.0.0.0:0", &[]);
    assert!(shared_server.login.is_some(), "no one has a token yet");
    drop(shared_server);
    let shared = std::fs::read_to_string(env.root().join("serve.token")).expect("token file");
    let shared = format!("Bearer {}", shared.trim());

    let added: serde_json::Value =
        serde_json::from_str(&env.ok(&["serve", "token", "add", "Ann Lee", "--json"])).unwrap();
    let ann = added["token"].as_str().expect("a token").to_owned();
    assert!(
        added["login"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/login?token={ann}")),
        "{added}"
    );
    let bob = env.ok(&["serve", "token", "add", "bob", "-q"]);
    let people = std::fs::read_to_string(env.root().join("serve.people")).unwrap();
    assert!(!people.contains(&ann) && !people.contains(&bob), "{people}");
    let listed = env.ok(&["serve", "token", "list", "--json"]);
    assert!(
        listed.contains("\"name\":\"Ann Lee\"")
            && listed.contains("\"name\":\"bob\"")
            && !listed.contains(&ann),
        "{listed}"
    );

    let server = Server::start(&env, "0.0.0.0:0", &[]);
    assert!(
        server.login.is_none(),
        "the shared login URL is not printed any more"
    );
    // The shared token no longer lets anyone in.
    let (status, _, body) =
        server.request("GET", "/api/threads", &[("authorization", &shared)], None);
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("your own token"), "{body}");
    // Ann pauses the thread, her page claiming to be someone else: the token decides.
    let bearer = format!("Bearer {ann}");
    let (status, _, body) = server.request(
        "POST",
        &format!("/api/threads/{id}/pause"),
        &[("authorization", &bearer), ("x-uwf-by", "mallory")],
        Some(""),
    );
    assert_eq!(status, 200, "{body}");
    let show: serde_json::Value =
        serde_json::from_str(&env.ok(&["thread", "show", &id, "--json"])).unwrap();
    assert_eq!(show["lastAction"]["event"], "paused", "{show}");
    assert_eq!(show["lastAction"]["by"], "Ann Lee", "{show}");
    // Her login sets her cookie; the cookie works as the header does.
    let (status, headers, _) = server.request("GET", &format!("/login?token={ann}"), &[], None);
    assert_eq!(status, 303);
    let cookie = header(&headers, "set-cookie").expect("a cookie").to_owned();
    let pair = cookie.split(';').next().unwrap();
    let (status, _, body) = server.request(
        "POST",
        &format!("/api/threads/{id}/resume"),
        &[("cookie", pair)],
        Some(""),
    );
    assert_eq!(status, 200, "{body}");
    let show: serde_json::Value =
        serde_json::from_str(&env.ok(&["thread", "show", &id, "--json"])).unwrap();
    assert_eq!(show["lastAction"]["by"], "Ann Lee", "{show}");
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
