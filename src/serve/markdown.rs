//! Markdown a step's agent wrote (the body after its frontmatter), as HTML that is safe to put
//! on the dashboard: rendered by pulldown-cmark with any HTML in the text kept as text, then
//! cleaned by ammonia (a fixed set of tags, links only to http, https and mailto, opened
//! without the page as their opener, no images: nothing is loaded from elsewhere). The page's
//! Content-Security-Policy still applies on top.

use std::collections::HashSet;

use pulldown_cmark::{Event, Options, Parser};

/// The tags a rendered body may keep.
const TAGS: &[&str] = &[
    "a",
    "blockquote",
    "br",
    "code",
    "del",
    "em",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "hr",
    "li",
    "ol",
    "p",
    "pre",
    "strong",
    "table",
    "tbody",
    "td",
    "th",
    "thead",
    "tr",
    "ul",
    "input",
];

/// `text` (Markdown) as cleaned HTML.
pub(super) fn to_html(text: &str) -> String {
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    // HTML written into the Markdown is shown as the text it is, never as markup.
    let events = Parser::new_ext(text, options).map(|event| match event {
        Event::Html(raw) | Event::InlineHtml(raw) => Event::Text(raw),
        other => other,
    });
    let mut html = String::with_capacity(text.len() * 3 / 2);
    pulldown_cmark::html::push_html(&mut html, events);
    ammonia::Builder::default()
        .tags(TAGS.iter().copied().collect::<HashSet<_>>())
        .url_schemes(["http", "https", "mailto"].into_iter().collect())
        .link_rel(Some("noopener noreferrer nofollow"))
        .add_tag_attributes("input", ["type", "checked", "disabled"])
        .add_tag_attributes("td", ["align"])
        .add_tag_attributes("th", ["align"])
        .clean(&html)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_becomes_markup() {
        let html = to_html(
            "# Plan\n\n- one\n- **two**\n\n```sh\nmake\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n",
        );
        for tag in [
            "<h1>Plan</h1>",
            "<li>one</li>",
            "<strong>two</strong>",
            "<pre><code",
            "<table>",
            "<td>1</td>",
        ] {
            assert!(html.contains(tag), "{tag} missing from {html}");
        }
    }

    #[test]
    fn html_in_the_text_stays_text() {
        let html = to_html(
            "hello <b>bold</b>\n\n<script>alert(1)</script>\n\n<img src=x onerror=alert(1)>\n",
        );
        assert!(!html.contains("<b>"), "{html}");
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(html.contains("&lt;b&gt;bold&lt;/b&gt;"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
    }

    #[test]
    fn links_keep_only_safe_schemes_and_no_images_load() {
        let html = to_html(
            "[ok](https://example.com) [bad](javascript:alert(1)) [data](data:text/html,x) ![pic](https://example.com/p.png)",
        );
        assert!(html.contains(r#"href="https://example.com""#), "{html}");
        assert!(html.contains("noopener"), "{html}");
        assert!(!html.contains("javascript:"), "{html}");
        assert!(!html.contains("data:text"), "{html}");
        assert!(!html.contains("<img"), "{html}");
    }
}
