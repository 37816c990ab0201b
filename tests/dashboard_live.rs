//! The dashboard kept true while things happen, in a real browser (Debian's Chromium over
//! WebDriver, `common::browser`): the live log shows what an agent wrote as a terminal would
//! (pieces of a line joined, a progress line rewritten in place, no blank lines between
//! chunks); a thread's row turns "running" while another process runs its step; the page of
//! the list is in the URL, so Back returns to it; the "awaiting" count follows an answer; kill
//! asks before it archives.
//!
//! Skips with a printed reason where Chromium or chromedriver is missing
//! (`UWF_REQUIRE_ALL_TESTS=1` makes that fail).

mod common;

use std::time::Duration;

use common::browser::{Browser, drawn, one_at_a_time};
use common::serve::{Server, store};
use serde_json::json;

fn base(server: &Server) -> String {
    server.url.trim_end_matches('/').to_owned()
}

fn text_of(browser: &Browser, css: &str) -> String {
    browser
        .execute(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : ''",
            vec![json!(css)],
        )
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn the_live_log_reads_as_a_terminal_would() {
    let _one = one_at_a_time();
    let Some(browser) = Browser::start("the_live_log_reads_as_a_terminal_would") else {
        return;
    };
    let env = store();
    let id = env.ok(&["thread", "start", "review", "-p", "Slow writer", "-q"]);
    // Pieces of one line a second apart, then a progress line rewriting itself.
    let agent = common::script(
        &env,
        "writer.sh",
        &format!(
            "printf 'downloading' >&2; for i in 1 2 3; do sleep 0.4; printf '.' >&2; done\n\
             printf ' done\\n' >&2\n\
             printf 'progress 10%%' >&2; sleep 0.4; printf '\\rprogress 50%%' >&2; sleep 0.4; printf '\\rprogress 100%%\\n' >&2\n\
             printf -- '---\\ntext: written\\n---\\n' | '{}' agent submit \"$1\" \"$2\" --agent writer",
            env!("CARGO_BIN_EXE_uwf")
        ),
    );
    let server = Server::start(&env, "127.0.0.1:0", &[]);
    browser.goto(&format!("{}/threads/{id}", base(&server)));
    drawn(&browser, &format!("/threads/{id}"));
    // The step runs in another process while the page watches.
    env.ok(&["thread", "step", &id, "--agent", agent.to_str().unwrap()]);
    let settled = browser.wait_until(Duration::from_secs(10), || {
        text_of(&browser, "#log").contains("progress 100%")
    });
    let log = text_of(&browser, "#log");
    assert!(settled, "the log shows {log:?}");
    let lines: Vec<&str> = log.lines().collect();
    assert!(
        lines.contains(&"downloading... done"),
        "a line written in pieces is split: {log:?}"
    );
    assert!(
        lines.contains(&"progress 100%") && !log.contains("progress 10%\n") && !log.contains("50%"),
        "the progress line was not rewritten in place: {log:?}"
    );
    assert!(!log.contains("\n\n"), "blank lines between chunks: {log:?}");
    browser.screenshot("dashboard-live-log");
    assert_eq!(browser.console_errors(), Vec::<String>::new());
}

#[test]
fn a_row_turns_running_while_another_process_steps_its_thread() {
    let _one = one_at_a_time();
    let Some(browser) =
        Browser::start("a_row_turns_running_while_another_process_steps_its_thread")
    else {
        return;
    };
    let env = store();
    let id = env.ok(&["thread", "start", "review", "-p", "Run me slowly", "-q"]);
    let agent = common::script(
        &env,
        "slow.sh",
        &format!(
            "sleep 4\nprintf -- '---\\ntext: slow\\n---\\n' | '{}' agent submit \"$1\" \"$2\" --agent slow",
            env!("CARGO_BIN_EXE_uwf")
        ),
    );
    let server = Server::start(&env, "127.0.0.1:0", &[]);
    browser.goto(&format!("{}/", base(&server)));
    drawn(&browser, "/");
    let row = format!("tr[data-id='{id}']");
    browser
        .wait_for(&row, Duration::from_secs(5))
        .expect("the thread's row");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_uwf"))
        .args(["thread", "step", &id, "--agent", agent.to_str().unwrap()])
        .env_remove("WORKFLOW_STORAGE_ROOT")
        .env("UWF_STORAGE_ROOT", env.root())
        .env("HOME", env.dir.path())
        .current_dir(env.dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the step");
    let running = browser.wait_until(Duration::from_secs(3), || {
        text_of(&browser, &row).contains("(running)")
    });
    let shown = text_of(&browser, &row);
    let _ = child.wait();
    assert!(running, "the row did not turn running: {shown:?}");
    // And back once the step is over.
    let after = browser.wait_until(Duration::from_secs(5), || {
        let t = text_of(&browser, &row);
        !t.contains("(running)") && t.contains("approver")
    });
    assert!(
        after,
        "the row after the step: {:?}",
        text_of(&browser, &row)
    );
}

#[test]
fn the_list_page_is_in_the_url_and_back_returns_to_it() {
    let _one = one_at_a_time();
    let Some(browser) = Browser::start("the_list_page_is_in_the_url_and_back_returns_to_it") else {
        return;
    };
    let env = store();
    for i in 0..60 {
        env.ok(&[
            "thread",
            "start",
            "review",
            "-p",
            &format!("thread {i}"),
            "-q",
        ]);
    }
    let server = Server::start(&env, "127.0.0.1:0", &[]);
    browser.goto(&format!("{}/", base(&server)));
    drawn(&browser, "/");
    browser
        .wait_for("#older", Duration::from_secs(5))
        .expect("a second page");
    browser.click(&browser.find("#older").unwrap());
    let second = browser.wait_until(Duration::from_secs(5), || {
        browser.url().contains("cursor=")
            && text_of(&browser, "#threads tbody").contains("thread 9")
    });
    assert!(second, "the second page: {}", browser.url());
    let second_url = browser.url();
    // Into a thread and Back: the same page, with its way back to the first.
    let first_row = browser.find("#threads tbody tr a").expect("a row");
    browser.click(&first_row);
    browser.wait_until(Duration::from_secs(5), || {
        browser.url().contains("/threads/")
    });
    browser.execute("history.back()", vec![]);
    let back = browser.wait_until(Duration::from_secs(5), || {
        browser.url() == second_url && text_of(&browser, "#threads tbody").contains("thread 9")
    });
    assert!(
        back,
        "Back went to {} showing {}",
        browser.url(),
        text_of(&browser, "#threads tbody")
    );
    browser
        .wait_for("#newer", Duration::from_secs(5))
        .expect("the way back to the newer page");
    // Reloading keeps the page too.
    browser.goto(&second_url);
    drawn(&browser, "/");
    assert!(text_of(&browser, "#threads tbody").contains("thread 9"));
    assert!(!text_of(&browser, "#threads tbody").contains("thread 59"));
}

#[test]
fn the_awaiting_count_follows_an_answer_and_kill_asks_first() {
    let _one = one_at_a_time();
    let Some(browser) = Browser::start("the_awaiting_count_follows_an_answer_and_kill_asks_first")
    else {
        return;
    };
    let env = store();
    let review = env.ok(&["thread", "start", "review", "-p", "Approve me", "-q"]);
    // Waiting for a person: exit 4.
    env.ends(&["thread", "run", &review], 4);
    let server = Server::start(&env, "127.0.0.1:0", &[]);
    browser.goto(&format!("{}/threads/{review}", base(&server)));
    drawn(&browser, &format!("/threads/{review}"));
    let badge = || {
        browser
            .execute(
                "const b = document.getElementById('awaiting'); return b.hidden ? '' : b.textContent",
                vec![],
            )
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert!(
        browser.wait_until(Duration::from_secs(5), || badge().contains("1 awaiting")),
        "the badge: {:?}",
        badge()
    );
    // Answered from a terminal while the page is open: the count goes with it.
    env.ok_stdin(
        &["thread", "answer", &review, "-"],
        "approved: true\nnote: fine by me\n",
    );
    assert!(
        browser.wait_until(Duration::from_secs(5), || badge().is_empty()),
        "the badge stayed: {:?}",
        badge()
    );

    // Kill asks first; Cancel leaves the thread as it was.
    let other = env.ok(&["thread", "start", "solve-issue", "-p", "Keep me", "-q"]);
    browser.goto(&format!("{}/threads/{other}", base(&server)));
    drawn(&browser, &format!("/threads/{other}"));
    browser.click(&browser.find("#do-kill").expect("kill"));
    browser
        .wait_for("#confirm-kill", Duration::from_secs(3))
        .expect("a question before killing");
    browser.click(&browser.find("#confirm-kill-no").unwrap());
    std::thread::sleep(Duration::from_millis(500));
    let show = common::json(&env.ok(&["thread", "show", &other]));
    assert_eq!(show["status"], json!("active"), "{show}");
    browser.click(&browser.find("#do-kill").unwrap());
    browser.click(
        &browser
            .wait_for("#confirm-kill-yes", Duration::from_secs(3))
            .unwrap(),
    );
    let killed = browser.wait_until(Duration::from_secs(5), || {
        common::json(&env.ok(&["thread", "show", &other]))["status"] == json!("killed")
    });
    assert!(killed, "Kill it did not kill");
    assert_eq!(browser.console_errors(), Vec::<String>::new());
}
