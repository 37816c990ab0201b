//! The browser harness (`tests/common/browser.rs`) against a page of our own: a real headless
//! Chromium reads, clicks and types, its console errors and foreign loads are seen, and a
//! screenshot is saved. Skips (with the reason) where Chromium or chromedriver is missing.

mod common;

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::json;

use common::browser::Browser;

/// The page: a text one button changes, a button that logs an error, and an input. The icon is
/// declared so that Chromium does not ask for `/favicon.ico` (a 404 is a console error).
const PAGE: &str = r#"<!doctype html>
<html><head><meta charset="utf-8"><title>Browser smoke</title><link rel="icon" href="data:,">
<style>body { font: 16px sans-serif; margin: 2em } #status { color: #063 }</style></head>
<body>
<h1>Browser smoke</h1>
<p id="status">waiting</p>
<button id="change" onclick="document.getElementById('status').textContent = 'clicked'">Change</button>
<button id="fail" onclick="console.error('boom')">Fail</button>
<input id="name" value="old" data-role="name">
</body></html>
"#;

/// A page that loads an image from another origin (which cannot resolve here).
const FOREIGN: &str = r#"<!doctype html>
<html><head><meta charset="utf-8"><link rel="icon" href="data:,"></head>
<body><img src="http://foreign.invalid/pixel.png" alt=""></body></html>
"#;

const WAIT: Duration = Duration::from_secs(5);

#[test]
fn a_page_is_read_clicked_and_watched() {
    let Some(browser) = Browser::start("a_page_is_read_clicked_and_watched") else {
        return;
    };
    let site = Site::serve();
    let home = format!("{}/", site.origin);
    browser.goto(&home);
    assert_eq!(browser.url(), home);

    let status = browser.find("#status").expect("the status line");
    assert_eq!(browser.text(&status), "waiting");
    assert!(browser.find("#no-such-thing").is_err());
    assert_eq!(browser.find_all("button").len(), 2);

    browser.click(&browser.find("#change").expect("the change button"));
    assert!(
        browser.wait_until(WAIT, || browser.text(&status) == "clicked"),
        "the text did not change: {:?}",
        browser.text(&status)
    );

    let input = browser.wait_for("input#name", WAIT).expect("the input");
    assert_eq!(
        browser.attribute(&input, "data-role").as_deref(),
        Some("name")
    );
    assert_eq!(browser.attribute(&input, "no-such-attribute"), None);
    browser.clear(&input);
    browser.type_text(&input, "Ada");
    assert_eq!(browser.property(&input, "value"), json!("Ada"));
    let tag = browser.execute(
        "return arguments[0].tagName + arguments[1];",
        vec![input.arg(), json!("!")],
    );
    assert_eq!(tag, json!("INPUT!"));

    assert_eq!(browser.console_errors(), Vec::<String>::new());
    browser.click(&browser.find("#fail").expect("the fail button"));
    assert!(
        browser.wait_until(WAIT, || browser
            .console_errors()
            .iter()
            .any(|e| e.contains("boom"))),
        "no `boom` among the console errors: {:?}",
        browser.console_errors()
    );
    assert_eq!(
        browser.console_errors().len(),
        1,
        "{:?}",
        browser.console_errors()
    );

    assert_eq!(browser.foreign_requests(&site.origin), Vec::<String>::new());
    let shot = browser.screenshot("a_page_is_read_clicked_and_watched");
    let png = std::fs::read(&shot).expect("the screenshot");
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "not a PNG: {}",
        shot.display()
    );

    // The check above can fail: a page that loads from elsewhere is caught.
    browser.goto(&format!("{}/foreign", site.origin));
    let foreign = || browser.foreign_requests(&site.origin);
    assert!(
        browser.wait_until(WAIT, || !foreign().is_empty()),
        "no foreign load seen"
    );
    assert_eq!(foreign(), ["http://foreign.invalid/pixel.png"]);
}

/// `PAGE` at `/` and `FOREIGN` at `/foreign` on a loopback port; stops when dropped.
struct Site {
    /// `http://127.0.0.1:<port>`.
    origin: String,
    server: Arc<tiny_http::Server>,
    handle: Option<JoinHandle<()>>,
}

impl Site {
    fn serve() -> Site {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind loopback"));
        let port = server.server_addr().to_ip().expect("ip address").port();
        let handle = {
            let server = server.clone();
            std::thread::spawn(move || {
                for request in server.incoming_requests() {
                    let (status, body) = match request.url() {
                        "/" => (200, PAGE),
                        "/foreign" => (200, FOREIGN),
                        _ => (404, "not found"),
                    };
                    let html =
                        tiny_http::Header::from_bytes("Content-Type", "text/html; charset=utf-8")
                            .expect("header");
                    let response = tiny_http::Response::from_string(body)
                        .with_status_code(status)
                        .with_header(html);
                    let _ = request.respond(response);
                }
            })
        };
        Site {
            origin: format!("http://127.0.0.1:{port}"),
            server,
            handle: Some(handle),
        }
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}
