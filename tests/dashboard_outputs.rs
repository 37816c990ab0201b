//! A step's output on the dashboard's thread page, in a real browser (Debian's Chromium over
//! WebDriver, `common::browser`): the Markdown body an agent writes after its frontmatter is
//! rendered (headings, lists, code, tables) with any HTML in it shown as text, unsafe links
//! dropped and no image loaded; outputs read as YAML with long strings as blocks, and a toggle
//! shows them as JSON, remembered across pages.
//!
//! Skips with a printed reason where Chromium or chromedriver is missing
//! (`UWF_REQUIRE_ALL_TESTS=1` makes that fail).

mod common;

use std::time::Duration;

use common::browser::Browser;
use common::serve::{Server, store};
use serde_json::json;

const BODY: &str = "## What changed\n\n- the parser keeps **comments**\n- `uwf fmt` is faster\n\n\
```sh\nuwf thread show T\n```\n\n| file | lines |\n|---|---|\n| src/a.rs | 12 |\n\n\
A <b>raw tag</b>, <script>window.pwned = 1</script> and <img src=\"https://example.com/x.png\" \
onerror=\"window.pwned = 2\">.\n\n[safe](https://example.com/doc) and [unsafe](javascript:window.pwned=3)\n";

#[test]
fn a_markdown_body_is_rendered_safely_and_outputs_read_as_yaml_or_json() {
    let Some(browser) =
        Browser::start("a_markdown_body_is_rendered_safely_and_outputs_read_as_yaml_or_json")
    else {
        return;
    };
    let env = store();
    let id = env.ok(&["thread", "start", "review", "-p", "Notes for 1.3", "-q"]);
    let answer = env.dir.path().join("answer.md");
    std::fs::write(
        &answer,
        format!("---\ntext: |\n  First line of the notes.\n  Second line.\n---\n{BODY}"),
    )
    .expect("answer");
    let agent = common::script(
        &env,
        "writer.sh",
        &format!(
            "'{}' agent submit \"$1\" \"$2\" --agent writer < '{}'",
            env!("CARGO_BIN_EXE_uwf"),
            answer.display()
        ),
    );
    env.ok(&["thread", "step", &id, "--agent", agent.to_str().unwrap()]);
    let server = Server::start(&env, "127.0.0.1:0", &[]);
    let base = server.url.trim_end_matches('/').to_owned();
    browser.goto(&format!("{base}/threads/{id}"));
    browser
        .wait_for("article.step .markdown", Duration::from_secs(10))
        .expect("the step's Markdown body on the page");

    let seen = browser.execute(
        "const md = document.querySelector('article.step .markdown');
         return {
           h2: md.querySelector('h2') && md.querySelector('h2').textContent,
           items: [...md.querySelectorAll('li')].map((li) => li.textContent),
           strong: md.querySelector('li strong') && md.querySelector('li strong').textContent,
           code: md.querySelector('pre code') && md.querySelector('pre code').textContent,
           cell: md.querySelector('table td') && md.querySelector('table td').textContent,
           markup: md.querySelectorAll('b, script, img, iframe, style').length,
           text: md.textContent,
           links: [...md.querySelectorAll('a')].map((a) => [a.textContent, a.getAttribute('href'), a.getAttribute('rel')]),
           pwned: window.pwned || null,
         };",
        vec![],
    );
    assert_eq!(seen["h2"], json!("What changed"), "{seen}");
    assert_eq!(
        seen["items"],
        json!(["the parser keeps comments", "uwf fmt is faster"]),
        "{seen}"
    );
    assert_eq!(seen["strong"], json!("comments"), "{seen}");
    assert_eq!(seen["code"], json!("uwf thread show T\n"), "{seen}");
    assert_eq!(seen["cell"], json!("src/a.rs"), "{seen}");
    assert_eq!(
        seen["markup"],
        json!(0),
        "HTML in the body became markup: {seen}"
    );
    let text = seen["text"].as_str().unwrap();
    assert!(text.contains("<b>raw tag</b>"), "{seen}");
    assert!(text.contains("<script>"), "{seen}");
    assert_eq!(seen["pwned"], json!(null), "{seen}");
    let links = seen["links"].as_array().unwrap();
    assert!(
        links.iter().any(|l| l[0] == json!("safe")
            && l[1] == json!("https://example.com/doc")
            && l[2].as_str().is_some_and(|r| r.contains("noopener"))),
        "{seen}"
    );
    assert!(
        !links
            .iter()
            .any(|l| l[1].as_str().is_some_and(|h| h.starts_with("javascript"))),
        "{seen}"
    );

    // YAML first: the long string reads as a block of text.
    let output = || {
        browser
            .execute(
                "return document.querySelector('article.step pre.output').textContent",
                vec![],
            )
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let yaml = output();
    assert!(
        yaml.contains("text: |") && yaml.contains("  First line of the notes.\n  Second line."),
        "{yaml}"
    );
    browser.click(&browser.find("#format-json").expect("the JSON toggle"));
    assert!(
        browser.wait_until(Duration::from_secs(5), || output()
            .trim_start()
            .starts_with('{')),
        "the JSON toggle shows {}",
        output()
    );
    let shown: serde_json::Value = serde_json::from_str(&output()).expect("JSON");
    assert_eq!(
        shown["text"],
        json!("First line of the notes.\nSecond line.\n"),
        "{shown}"
    );
    // Remembered on the next page.
    browser.goto(&format!("{base}/threads/{id}"));
    browser
        .wait_for("article.step pre.output", Duration::from_secs(10))
        .expect("the step");
    assert!(output().trim_start().starts_with('{'), "{}", output());
    browser.click(&browser.find("#format-yaml").expect("the YAML toggle"));
    browser.execute(
        "document.querySelector('article.step').scrollIntoView()",
        vec![],
    );
    browser.screenshot("dashboard-markdown-body");
    assert_eq!(browser.console_errors(), Vec::<String>::new());
    assert_eq!(browser.foreign_requests(&base), Vec::<String>::new());
}
