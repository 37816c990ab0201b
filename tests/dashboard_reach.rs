//! The dashboard for everyone who opens it, in a real browser (Debian's Chromium over WebDriver,
//! `common::browser`): on a 390 px phone no page is wider than the screen; under a dark system
//! scheme the pages are dark; the list is used from the keyboard (`/` to search, `j`/`k`,
//! Enter); a permalink that names no node answers with a page, not raw JSON.
//!
//! Skips with a printed reason where Chromium or chromedriver is missing
//! (`UWF_REQUIRE_ALL_TESTS=1` makes that fail).

mod common;

use std::time::Duration;

use common::browser::{Browser, drawn, one_at_a_time};
use common::serve::{Server, store};
use serde_json::json;

/// A store with a thread awaiting a person, one done part way, and a few more.
fn threads() -> (common::Env, String, String) {
    let env = store();
    let review = env.ok(&["thread", "start", "review", "-p", "Release notes for 1.3, with a long prompt that a phone has to wrap rather than scroll sideways to read", "-q"]);
    env.ends(&["thread", "run", &review], 4);
    let solve = env.ok(&[
        "thread",
        "start",
        "solve-issue",
        "-p",
        "Users are logged out",
        "-q",
    ]);
    env.ok(&["thread", "step", &solve]);
    for i in 0..3 {
        env.ok(&[
            "thread",
            "start",
            "review",
            "-p",
            &format!("more {i}"),
            "-q",
        ]);
    }
    (env, review, solve)
}

#[test]
fn no_page_is_wider_than_a_phone() {
    let _one = one_at_a_time();
    let Some(browser) = Browser::start("no_page_is_wider_than_a_phone") else {
        return;
    };
    let (env, review, solve) = threads();
    let server = Server::start(&env, "127.0.0.1:0", &[]);
    let base = server.url.trim_end_matches('/').to_owned();
    browser.cdp(
        "Emulation.setDeviceMetricsOverride",
        json!({"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": true}),
    );
    for (name, path) in [
        ("list", "/".to_owned()),
        ("thread", format!("/threads/{solve}")),
        ("answer", format!("/threads/{review}/answer")),
        ("workflow", "/workflows/solve-issue".to_owned()),
    ] {
        browser.goto(&format!("{base}{path}"));
        drawn(&browser, &path);
        let widths = browser.execute(
            "return { page: document.documentElement.scrollWidth, screen: window.innerWidth };",
            vec![],
        );
        let wide = browser.execute(
            "return [...document.querySelectorAll('body *')].filter((e) => e.getBoundingClientRect().right > 391)
               .slice(0, 5).map((e) => e.tagName + '#' + e.id + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right));",
            vec![],
        );
        assert_eq!(
            widths["screen"],
            json!(390),
            "the {name} page: {widths} {wide}"
        );
        assert!(
            widths["page"].as_u64().unwrap() <= 390,
            "the {name} page is wider than the phone: {widths}"
        );
        browser.screenshot(&format!("dashboard-narrow-{name}"));
    }
    assert_eq!(browser.console_errors(), Vec::<String>::new());
}

#[test]
fn a_dark_system_scheme_gets_dark_pages() {
    let _one = one_at_a_time();
    let Some(browser) = Browser::start("a_dark_system_scheme_gets_dark_pages") else {
        return;
    };
    let (env, _, solve) = threads();
    let server = Server::start(&env, "127.0.0.1:0", &[]);
    let base = server.url.trim_end_matches('/').to_owned();
    let luminance = |css: &str, property: &str| {
        browser
            .execute(
                "const c = getComputedStyle(document.querySelector(arguments[0]))[arguments[1]];
                 const [r, g, b] = c.match(/\\d+/g).map(Number);
                 return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;",
                vec![json!(css), json!(property)],
            )
            .as_f64()
            .expect("a colour")
    };
    browser.goto(&format!("{base}/threads/{solve}"));
    drawn(&browser, &format!("/threads/{solve}"));
    assert!(
        luminance("body", "backgroundColor") > 0.8,
        "light by default"
    );
    browser.cdp(
        "Emulation.setEmulatedMedia",
        json!({"features": [{"name": "prefers-color-scheme", "value": "dark"}]}),
    );
    browser.goto(&format!("{base}/threads/{solve}"));
    drawn(&browser, &format!("/threads/{solve}"));
    for (css, property, dark) in [
        ("body", "backgroundColor", true),
        ("body", "color", false),
        (
            "#graph g.node:not(.visited):not(.current) rect",
            "fill",
            true,
        ),
        ("pre", "backgroundColor", true),
    ] {
        let l = luminance(css, property);
        assert!(
            if dark { l < 0.25 } else { l > 0.7 },
            "{css} {property} has luminance {l:.2} under a dark scheme"
        );
    }
    browser.screenshot("dashboard-dark-thread");
    assert_eq!(browser.console_errors(), Vec::<String>::new());
}

#[test]
fn the_list_is_used_from_the_keyboard() {
    let _one = one_at_a_time();
    let Some(browser) = Browser::start("the_list_is_used_from_the_keyboard") else {
        return;
    };
    let (env, _, _) = threads();
    let server = Server::start(&env, "127.0.0.1:0", &[]);
    let base = server.url.trim_end_matches('/').to_owned();
    browser.goto(&format!("{base}/"));
    drawn(&browser, "/");
    browser
        .wait_for("#threads tbody tr[data-id]", Duration::from_secs(5))
        .expect("rows");
    let ids: Vec<String> = browser
        .execute(
            "return [...document.querySelectorAll('#threads tbody tr[data-id]')].map((tr) => tr.dataset.id)",
            vec![],
        )
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    browser.press("jjjk");
    let selected = browser.execute(
        "return [...document.querySelectorAll('#threads tbody tr.selected')].map((tr) => tr.dataset.id)",
        vec![],
    );
    assert_eq!(selected, json!([ids[1]]), "j j j k selects the second row");
    browser.press("\u{E007}");
    let opened = browser.wait_until(Duration::from_secs(5), || {
        browser.url().ends_with(&format!("/threads/{}", ids[1]))
    });
    assert!(opened, "Enter opened {}", browser.url());
    // `/` puts the cursor in the search box, and keys typed there are the search's.
    browser.goto(&format!("{base}/"));
    drawn(&browser, "/");
    browser.press("/");
    let focused = browser.execute("return document.activeElement.name || ''", vec![]);
    assert_eq!(focused, json!("q"), "`/` did not focus the search");
    browser.press("jk");
    let typed = browser.execute("return document.activeElement.value", vec![]);
    assert_eq!(typed, json!("jk"));
    assert_eq!(
        browser.execute(
            "return document.querySelectorAll('#threads tr.selected').length",
            vec![]
        ),
        json!(0)
    );
}

#[test]
fn a_permalink_to_no_node_answers_with_a_page() {
    let _one = one_at_a_time();
    let Some(browser) = Browser::start("a_permalink_to_no_node_answers_with_a_page") else {
        return;
    };
    let env = store();
    let server = Server::start(&env, "127.0.0.1:0", &[]);
    let base = server.url.trim_end_matches('/').to_owned();
    for (path, says) in [
        ("/n/ZZZZ", "invalid hash"),
        ("/n/0000000000000", "no node 0000000000000"),
    ] {
        browser.goto(&format!("{base}{path}"));
        let error = browser
            .wait_for("#error", Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        let text = browser.text(&error);
        assert!(text.contains(says), "{path}: {text}");
        let body = browser.execute("return document.body.innerText", vec![]);
        assert!(
            !body.as_str().unwrap().trim_start().starts_with('{'),
            "{path} shows raw JSON: {body}"
        );
    }
    // The API itself still answers in JSON.
    let (status, body) = server.get_json("/api/nodes/0000000000000");
    assert_eq!(status, 404);
    assert!(
        body["error"].as_str().unwrap().contains("no node"),
        "{body}"
    );
}
