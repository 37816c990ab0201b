//! The list page's work on many threads and its shape, in a real browser (Debian's Chromium over
//! WebDriver, `common::browser`): bulk actions on ticked rows and on every thread a filter
//! matches, each asking first; the date filter; sub-workflow children nested under their
//! parent instead of listed among the threads people started; and the thread page's step
//! timeline, each bar as long as its step took.
//!
//! Skips with a printed reason where Chromium or chromedriver is missing
//! (`UWF_REQUIRE_ALL_TESTS=1` makes that fail).

mod common;

use std::time::Duration;

use common::browser::{Browser, drawn, one_at_a_time};
use common::serve::{Server, store};
use serde_json::json;

fn show(env: &common::Env, id: &str) -> serde_json::Value {
    common::json(&env.ok(&["thread", "show", id, "--json"]))
}

fn click(browser: &Browser, css: &str) {
    let found = browser
        .wait_for(css, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{css}: {e}"));
    browser.click(&found);
}

fn text_of(browser: &Browser, css: &str) -> String {
    let found = browser
        .wait_for(css, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{css}: {e}"));
    browser.text(&found)
}

#[test]
fn bulk_actions_ask_first_then_act_on_ticked_rows_or_on_every_match() {
    let _one = one_at_a_time();
    let Some(browser) =
        Browser::start("bulk_actions_ask_first_then_act_on_ticked_rows_or_on_every_match")
    else {
        return;
    };
    let env = store();
    let reviews: Vec<String> = (0..4)
        .map(|i| {
            env.ok(&[
                "thread",
                "start",
                "review",
                "-p",
                &format!("notes {i}"),
                "-q",
            ])
        })
        .collect();
    let solve = env.ok(&["thread", "start", "solve-issue", "-p", "logged out", "-q"]);
    let server = Server::start(&env, "127.0.0.1:0", &[]);
    let base = server.url.trim_end_matches('/').to_owned();
    browser.goto(&format!("{base}/"));
    drawn(&browser, "/");
    browser.execute("localStorage.setItem('uwf-by', 'Ann')", vec![]);

    // Nothing ticked: the row actions are off.
    assert_eq!(
        browser.property(&browser.find("#bulk-pause").unwrap(), "disabled"),
        json!(true)
    );
    // Tick the two newest reviews (the list is newest first) and pause them: it asks first.
    for id in [&reviews[3], &reviews[2]] {
        click(&browser, &format!("input.pick[data-id='{id}']"));
    }
    assert_eq!(text_of(&browser, "#picked"), "2 selected:");
    click(&browser, "#bulk-pause");
    let asked = text_of(&browser, "#bulk-confirm");
    assert!(asked.starts_with("Pause 2 thread(s)?"), "{asked}");
    assert!(
        show(&env, &reviews[3])["paused"].is_null(),
        "asking changed nothing"
    );
    click(&browser, "#bulk-yes");
    let done = text_of(&browser, "#bulk-result");
    assert!(done.starts_with("pause: 2 of 2 done"), "{done}");
    for id in [&reviews[3], &reviews[2]] {
        let t = show(&env, id);
        assert_eq!(t["paused"], true, "{t}");
        assert_eq!(t["lastAction"]["by"], "Ann", "{t}");
    }
    assert!(show(&env, &reviews[1])["paused"].is_null());
    // The thread's page says who did what.
    browser.goto(&format!("{base}/threads/{}", reviews[3]));
    drawn(&browser, &format!("/threads/{}", reviews[3]));
    click(&browser, "#acts summary");
    let acts = text_of(&browser, "#acts ol");
    assert!(acts.contains("Ann paused"), "{acts}");

    // On a filter: every review thread, whether shown or not, killed after asking; a thread the
    // filter does not match is left alone.
    browser.goto(&format!("{base}/?workflow=review"));
    drawn(&browser, "/");
    click(&browser, "#bulk-filter");
    click(&browser, "#bulk-filter-kill");
    let asked = text_of(&browser, "#bulk-confirm");
    assert!(
        asked.starts_with("Kill every thread the filter matches?")
            && asked.contains("cannot be resumed"),
        "{asked}"
    );
    click(&browser, "#bulk-no");
    assert!(browser.find("#bulk-confirm").is_err(), "cancelled");
    assert_eq!(show(&env, &reviews[0])["status"], "active");
    click(&browser, "#bulk-filter");
    click(&browser, "#bulk-filter-kill");
    click(&browser, "#bulk-yes");
    let done = text_of(&browser, "#bulk-result");
    assert!(done.starts_with("kill: 4 of 4 done"), "{done}");
    for id in &reviews {
        assert_eq!(show(&env, id)["status"], "killed");
    }
    assert_eq!(show(&env, &solve)["status"], "active");

    // Killing again: each refusal is named, nothing else happens.
    let (status, again) = server.post_json(
        "/api/bulk/kill",
        &json!({"threads": [reviews[0], solve]}).to_string(),
    );
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["done"], 1, "{again}");
    assert_eq!(again["refused"][0]["thread"], json!(reviews[0]), "{again}");
    let (status, _) = server.post_json("/api/bulk/step", r#"{"threads": []}"#);
    assert_eq!(status, 404, "step is not a bulk action");
    assert_eq!(browser.console_errors(), Vec::<String>::new());
}

#[test]
fn dates_filter_children_nest_and_steps_draw_as_a_timeline() {
    let _one = one_at_a_time();
    let Some(browser) = Browser::start("dates_filter_children_nest_and_steps_draw_as_a_timeline")
    else {
        return;
    };
    // solve-issue's developer is played by the whole `develop` workflow: a child thread.
    let env = common::Env::new();
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    for name in ["solve-issue", "develop"] {
        env.ok(&[
            "workflow",
            "put",
            examples.join(format!("{name}.yaml")).to_str().unwrap(),
        ]);
    }
    std::fs::write(
        env.root().join("config.yaml"),
        "defaultAgent: dry\nagents:\n  develop-flow: { command: uwf, args: [agent, workflow, --name, develop] }\n\
         agentOverrides:\n  solve-issue: { developer: develop-flow }\n",
    )
    .unwrap();
    let parent = env.ok(&["thread", "start", "solve-issue", "-p", "logged out", "-q"]);
    env.ok(&["thread", "run", &parent]);
    let children = show(&env, &parent)["children"].clone();
    let child = children[0].as_str().expect("a child thread").to_owned();
    let server = Server::start(&env, "127.0.0.1:0", &[]);
    let base = server.url.trim_end_matches('/').to_owned();

    // The list shows the parent only, with a toggle that opens its child under it.
    browser.goto(&format!("{base}/"));
    drawn(&browser, "/");
    let rows = browser.find_all("#threads tbody tr[data-id]");
    assert_eq!(rows.len(), 1, "children are not listed among the rest");
    assert!(browser.find(&format!("tr[data-id='{child}']")).is_err());
    let toggle = text_of(&browser, &format!("tr[data-id='{parent}'] button.kids"));
    assert_eq!(toggle, format!("▸ {}", children.as_array().unwrap().len()));
    click(&browser, &format!("tr[data-id='{parent}'] button.kids"));
    let nested = browser
        .wait_for(
            &format!("tr.child[data-child='{child}']"),
            Duration::from_secs(10),
        )
        .expect("the child under its parent");
    assert_eq!(
        browser.attribute(&nested, "data-under").as_deref(),
        Some(parent.as_str())
    );
    let order = browser.execute(
        "return [...document.querySelectorAll('#threads tbody tr')].map((r) => r.dataset.id || r.dataset.child);",
        vec![],
    );
    assert_eq!(order[0], json!(parent), "{order}");
    assert_eq!(order[1], json!(child), "{order}");
    browser.screenshot("dashboard-children");
    click(&browser, &format!("tr[data-id='{parent}'] button.kids"));
    assert!(browser.find("tr.child").is_err(), "closed again");
    // Asked for, children are among the rest.
    let (_, flat) = server.get_json("/api/threads?children=1");
    assert!(flat["items"].as_array().unwrap().len() >= 2, "{flat}");

    // The date filter: nothing was started after 2099-01-01; everything after 2000-01-01.
    browser.goto(&format!("{base}/?since=2099-01-01"));
    drawn(&browser, "/");
    browser
        .wait_for("#threads td.muted", Duration::from_secs(10))
        .expect("(no threads)");
    assert_eq!(text_of(&browser, "#threads td.muted"), "(no threads)");
    assert_eq!(
        browser.property(&browser.find("input[name=since]").unwrap(), "value"),
        json!("2099-01-01")
    );
    browser.goto(&format!("{base}/?since=2000-01-01"));
    drawn(&browser, "/");
    browser
        .wait_for(&format!("tr[data-id='{parent}']"), Duration::from_secs(10))
        .expect("the thread, started after 2000");
    let (status, bad) = server.get_json("/api/threads?since=someday");
    assert_eq!(status, 422, "{bad}");

    // The step timeline: one bar per step, in time order, each carrying its step's duration.
    browser.goto(&format!("{base}/threads/{parent}"));
    drawn(&browser, &format!("/threads/{parent}"));
    browser
        .wait_for("#step-timeline rect.bar", Duration::from_secs(10))
        .expect("a timeline");
    let (_, steps) = server.get_json(&format!("/api/threads/{parent}/steps"));
    let steps = steps["steps"].as_array().unwrap().clone();
    let bars = browser.execute(
        "return [...document.querySelectorAll('#step-timeline rect.bar')].map((r) => ({
           index: Number(r.dataset.index), ms: Number(r.dataset.ms),
           x: Number(r.getAttribute('x')), w: Number(r.getAttribute('width')) }));",
        vec![],
    );
    let bars = bars.as_array().unwrap();
    assert_eq!(bars.len(), steps.len(), "{bars:?}");
    for (bar, step) in bars.iter().zip(&steps) {
        assert_eq!(bar["index"], step["index"]);
        assert_eq!(bar["ms"], step["durationMs"], "{bar} {step}");
    }
    for pair in bars.windows(2) {
        assert!(
            pair[1]["x"].as_f64() >= pair[0]["x"].as_f64(),
            "bars in time order: {pair:?}"
        );
    }
    // The longest step has the widest bar.
    let longest = bars
        .iter()
        .max_by_key(|b| b["ms"].as_u64().unwrap())
        .unwrap();
    let widest = bars
        .iter()
        .map(|b| b["w"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert_eq!(longest["w"].as_f64().unwrap(), widest, "{bars:?}");
    browser.execute(
        "document.getElementById('step-timeline').scrollIntoView({ block: 'center' })",
        vec![],
    );
    browser.screenshot("dashboard-timeline");
    assert_eq!(browser.console_errors(), Vec::<String>::new());
}
