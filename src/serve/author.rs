//! Who acts through the dashboard (`docs/dashboard.md#who-did-what`): the `X-Uwf-By` header
//! (UTF-8, percent-encoded as the page sends it: `Zo%C3%AB`), which [`super::security`] sets
//! to the person whose own token a request carries, else a JSON body's `by`; `dashboard` when
//! a write names none. Names are checked as `--by` checks them.

use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;

use super::error::ApiError;
use crate::engine::thread::author;

/// What a write records as its author.
pub(super) fn by_of(headers: &HeaderMap, body: Option<&Value>) -> Result<String, ApiError> {
    let bad = |problem: String| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, problem);
    let named = match headers.get("x-uwf-by") {
        Some(value) => Some(
            percent_decoded(value.as_bytes())
                .ok_or_else(|| bad("X-Uwf-By is not UTF-8 text".to_owned()))?,
        ),
        None => body.and_then(|b| b["by"].as_str()).map(str::to_owned),
    };
    let name = named.unwrap_or_else(|| "dashboard".to_owned());
    match author::checked(Some(&name)) {
        Ok(Some(name)) => Ok(name),
        Ok(None) => Ok("dashboard".to_owned()),
        Err(e) => Err(bad(e.to_string())),
    }
}

/// `bytes` with each `%XX` replaced by the byte it names, as UTF-8 text (`None` when it is not).
fn percent_decoded(bytes: &[u8]) -> Option<String> {
    String::from_utf8(percent_encoding::percent_decode(bytes).collect()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by(header: Option<&str>, body: Option<Value>) -> Result<String, ApiError> {
        let mut headers = HeaderMap::new();
        if let Some(h) = header {
            headers.insert("x-uwf-by", h.parse().unwrap());
        }
        by_of(&headers, body.as_ref())
    }

    #[test]
    fn the_header_then_the_body_then_dashboard() {
        assert_eq!(by(Some("Zo%C3%AB"), None).unwrap(), "Zoë");
        assert_eq!(
            by(Some("ann"), Some(serde_json::json!({"by": "bob"}))).unwrap(),
            "ann"
        );
        assert_eq!(
            by(None, Some(serde_json::json!({"by": " bob "}))).unwrap(),
            "bob"
        );
        assert_eq!(by(None, None).unwrap(), "dashboard");
        assert!(by(Some("a%0Ab"), None).is_err());
        assert!(by(Some("%FF"), None).is_err());
    }
}
