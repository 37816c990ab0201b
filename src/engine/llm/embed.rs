//! Text embeddings from an OpenAI-compatible provider: `POST {baseUrl}/embeddings` with
//! `{"model", "input": [texts]}`, answered with `{"data": [{"index", "embedding": [numbers]}]}`.
//! Same endpoint resolution, retries and key redaction as chat completions.

use serde_json::{Value, json};

use super::client::{Client, Exchanged, LlmError};

impl Client {
    /// One vector per text, in the order of `texts`. Fails when the provider answers anything
    /// but as many vectors of one dimension as texts were sent.
    pub(crate) fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, LlmError> {
        let url = format!("{}/embeddings", self.endpoint().base_url);
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let body = json!({"model": self.endpoint().model, "input": texts}).to_string();
        let body = match self.exchange(&url, &body, None)? {
            Exchanged::Body { body, .. } => body,
            Exchanged::Streamed(_) => {
                return Err(self.bad(&url, "an event stream instead of embeddings".into()));
            }
        };
        let value: Value = serde_json::from_str(&body)
            .map_err(|e| self.bad(&url, format!("{e} in {}", self.excerpt(&body))))?;
        let data = value
            .get("data")
            .and_then(Value::as_array)
            .ok_or_else(|| self.bad(&url, format!("no `data` list in {}", self.excerpt(&body))))?;
        let mut vectors: Vec<Option<Vec<f32>>> = vec![None; texts.len()];
        for (position, item) in data.iter().enumerate() {
            let index = item
                .get("index")
                .and_then(Value::as_u64)
                .map_or(position, |i| i as usize);
            let numbers = item
                .get("embedding")
                .and_then(Value::as_array)
                .ok_or_else(|| self.bad(&url, format!("no `data[{position}].embedding` list")))?;
            let vector = numbers
                .iter()
                .map(|n| n.as_f64().map(|f| f as f32))
                .collect::<Option<Vec<f32>>>()
                .ok_or_else(|| {
                    self.bad(
                        &url,
                        format!("`data[{position}].embedding` holds a non-number"),
                    )
                })?;
            match vectors.get_mut(index) {
                Some(slot) => *slot = Some(vector),
                None => {
                    return Err(self.bad(
                        &url,
                        format!(
                            "`data[{position}].index` is {index}, but {} texts were sent",
                            texts.len()
                        ),
                    ));
                }
            }
        }
        let vectors = vectors
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                self.bad(
                    &url,
                    format!("{} vectors for {} texts", data.len(), texts.len()),
                )
            })?;
        let dimension = vectors[0].len();
        if dimension == 0 || vectors.iter().any(|v| v.len() != dimension) {
            return Err(self.bad(&url, "vectors of different or zero dimensions".into()));
        }
        Ok(vectors)
    }

    fn bad(&self, url: &str, reason: String) -> LlmError {
        LlmError::BadEmbeddings {
            url: url.to_owned(),
            reason: self.excerpt(&reason),
        }
    }
}
