//! Answering from the dashboard as a person would, in a real browser (Debian's Chromium over
//! WebDriver, `common::browser`): the question shows the task before how to answer; the form
//! lists fields in the order the workflow's author wrote them (the CLI's question too); nothing
//! is chosen for the person, and an optional choice or yes/no can be left unset; the browser
//! checks the schema's bounds before anything is sent; a refusal shows where the person looks.
//!
//! Skips with a printed reason where Chromium or chromedriver is missing
//! (`UWF_REQUIRE_ALL_TESTS=1` makes that fail).

mod common;

use std::time::Duration;

use common::browser::Browser;
use common::serve::Server;
use serde_json::json;

const TRIAGE: &str = "name: triage
roles:
  triager:
    goal: Triage the report.
    meta:
      type: object
      properties:
        title: { type: string, description: One line for the tracker. }
        severity: { enum: [sev1, sev2, sev3] }
        labels: { type: array, items: { type: string } }
        urgent: { type: boolean }
        count: { type: integer, minimum: 1, maximum: 5 }
      required: [title, severity]
graph:
  $START: [ { role: triager, condition: null } ]
  triager: [ { role: $END, condition: null } ]
";

#[test]
fn a_person_answers_in_the_authors_order_with_nothing_chosen_for_them() {
    let Some(browser) =
        Browser::start("a_person_answers_in_the_authors_order_with_nothing_chosen_for_them")
    else {
        return;
    };
    let env = common::Env::new();
    let file = env.dir.path().join("triage.yaml");
    std::fs::write(&file, TRIAGE).expect("triage.yaml");
    env.ok(&["workflow", "put", file.to_str().unwrap()]);
    std::fs::write(env.root().join("config.yaml"), "defaultAgent: human\n").expect("config");
    let id = env.ok(&[
        "thread",
        "start",
        "triage",
        "-p",
        "The login page is blank",
        "-q",
    ]);
    env.ends(&["thread", "run", &id], 4);

    // The CLI's question lists the fields as written too.
    let question = env.ok(&["thread", "question", &id]);
    let at = |name: &str| {
        question
            .find(&format!("- `{name}`"))
            .unwrap_or_else(|| panic!("{name} missing: {question}"))
    };
    assert!(
        at("title") < at("severity")
            && at("severity") < at("labels")
            && at("labels") < at("urgent")
            && at("urgent") < at("count"),
        "{question}"
    );

    let server = Server::start(&env, "127.0.0.1:0", &[]);
    let base = server.url.trim_end_matches('/').to_owned();
    browser.goto(&format!("{base}/threads/{id}/answer"));
    browser
        .wait_for("#answer-form", Duration::from_secs(10))
        .expect("the form");
    // What the thread asks: the role and the task, rendered; how to answer from a terminal
    // (the format, the schema) folded away under it.
    let asks = browser.execute(
        "const q = document.getElementById('question');
         const h = document.getElementById('how-to-answer');
         return { text: q.textContent, headings: [...q.querySelectorAll('h2')].map((e) => e.textContent),
                  how: h ? h.textContent : null, open: h ? h.closest('details').open : null };",
        vec![],
    );
    let text = asks["text"].as_str().unwrap();
    assert!(
        text.contains("Triage the report.") && text.contains("The login page is blank"),
        "{asks}"
    );
    assert!(
        !text.contains("How to answer") && !text.contains("Output format"),
        "{asks}"
    );
    assert!(
        asks["headings"]
            .as_array()
            .unwrap()
            .contains(&json!("Task")),
        "{asks}"
    );
    assert!(
        asks["how"]
            .as_str()
            .unwrap()
            .starts_with("## How to answer"),
        "{asks}"
    );
    assert_eq!(asks["open"], json!(false), "{asks}");
    let fields = browser.execute(
        "return [...document.querySelectorAll('#answer-form [name]')].map((e) => [e.name, e.value, e.required])",
        vec![],
    );
    assert_eq!(
        fields,
        json!([
            ["title", "", true],
            ["severity", "", true],
            ["labels", "", false],
            ["urgent", "", false],
            ["count", "", false]
        ]),
        "fields in the author's order, nothing chosen"
    );

    browser.screenshot("dashboard-answer-form");

    // Nothing sent while a required field is empty.
    browser.click(&browser.find("#submit-answer").unwrap());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        common::json(&env.ok(&["thread", "show", &id]))["status"],
        json!("awaiting")
    );
    // The server's refusal, where the page's own check is out of the way, is in view.
    browser.type_text(&browser.find("#f-title").unwrap(), "Blank login page");
    browser.execute(
        "document.getElementById('f-severity').value = '\"sev2\"';
         const count = document.getElementById('f-count');
         count.removeAttribute('max'); count.value = '9';
         window.scrollTo(0, document.body.scrollHeight);",
        vec![],
    );
    browser.click(&browser.find("#submit-answer").unwrap());
    let refused = browser.wait_until(Duration::from_secs(5), || {
        browser
            .text(&browser.find("#answer-error").unwrap())
            .contains("count")
    });
    assert!(refused, "no refusal shown");
    let in_view = browser.execute(
        "const r = document.getElementById('answer-error').getBoundingClientRect();
         return r.top >= 0 && r.bottom <= window.innerHeight;",
        vec![],
    );
    assert_eq!(in_view, json!(true), "the refusal is out of sight");

    // Optional fields left unset stay out of the answer.
    browser.execute("document.getElementById('f-count').value = ''", vec![]);
    browser.click(&browser.find("#submit-answer").unwrap());
    let answered = browser.wait_until(Duration::from_secs(5), || {
        common::json(&env.ok(&["thread", "show", &id]))["status"] == json!("done")
    });
    assert!(answered, "the answer was not taken");
    let (_, steps) = server.get_json(&format!("/api/threads/{id}/steps"));
    assert_eq!(
        steps["steps"][0]["output"],
        json!({"title": "Blank login page", "severity": "sev2"}),
        "the answer recorded"
    );
}
