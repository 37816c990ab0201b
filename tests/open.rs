//! `uwf open`: the dashboard's address for a thread — the running `uwf serve` of the store (its
//! `serve.json`, gone when it stops), else the default — printed as JSON in a pipe and alone with
//! `-q`; a thread named by a prefix; `--url` overrides; bad input is refused in words.

mod common;

use common::serve::{Server, store};
use serde_json::json;

#[test]
fn open_names_the_running_dashboards_page_for_a_thread() {
    let env = store();
    let id = env.ok(&["thread", "start", "review", "-p", "Open me", "-q"]);
    // No server: the default address, and saying none runs.
    let shown = common::json(&env.ok(&["open", &id[..10]]));
    assert_eq!(
        shown,
        json!({"url": format!("http://127.0.0.1:7420/threads/{id}"), "running": false, "opened": false})
    );
    assert_eq!(env.ok(&["open", "-q"]), "http://127.0.0.1:7420/");

    let mut server = Server::start(&env, "127.0.0.1:0", &[]);
    let url = env.ok(&["open", &id, "-q"]);
    assert_eq!(url, format!("{}threads/{id}", server.url));
    let page = ureq::get(&url).call().expect("the page");
    assert_eq!(page.status().as_u16(), 200);
    assert_eq!(
        common::json(&env.ok(&["open", &id]))["running"],
        json!(true)
    );
    let status = server
        .stop(
            nix::sys::signal::Signal::SIGTERM,
            std::time::Duration::from_secs(5),
        )
        .expect("the server stops");
    assert!(status.success(), "{status:?}");
    assert!(
        !env.root().join("serve.json").exists(),
        "a stopped server's address is left behind"
    );
    assert_eq!(
        env.ok(&["open", &id, "-q"]),
        format!("http://127.0.0.1:7420/threads/{id}")
    );

    // --url wins; bad input is refused in words.
    assert_eq!(
        env.ok(&["open", &id, "-q", "--url", "https://uwf.example.com"]),
        format!("https://uwf.example.com/threads/{id}")
    );
    let err = env.fails(&["open", &id, "--url", "uwf.example.com"], 1);
    assert!(err.contains("not a dashboard address"), "{err}");
    let err = env.fails(&["open", "NOSUCHTHREAD"], 1);
    assert!(err.contains("NOSUCHTHREAD"), "{err}");
}
