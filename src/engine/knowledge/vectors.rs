//! Embeddings for project knowledge: the model `modelOverrides.embed` names, reached as the
//! `llm` agent reaches its model. Vectors are cached in the index by model and text hash, so a
//! text is embedded once on this machine; similarity is the cosine of two vectors.

use crate::engine::config::Config;
use crate::engine::llm::client::{Client, Endpoint};

use super::KnowledgeError;
use super::index::{Index, text_hash};

/// Texts per embeddings request.
pub const BATCH: usize = 32;

/// The configured embedding model.
pub struct Embeddings {
    client: Client,
    /// The cache key of its vectors: `provider/model`.
    pub key: String,
}

impl Embeddings {
    /// The model of `modelOverrides.embed`, or `None` when none is configured (lexical ranking
    /// only). A configured model that cannot be resolved (unknown alias, missing key) is an
    /// error, as it is for every other purpose.
    pub fn from_config(config: &Config) -> Result<Option<Embeddings>, KnowledgeError> {
        let Some(alias) = config.model_overrides.get("embed") else {
            return Ok(None);
        };
        let endpoint = Endpoint::resolve(config, alias).map_err(KnowledgeError::Embeddings)?;
        Ok(Some(Embeddings {
            key: format!("{}/{}", endpoint.provider, endpoint.model),
            client: Client::new(endpoint),
        }))
    }

    /// Vectors for `texts`, in order, in one request.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, KnowledgeError> {
        self.client.embed(texts).map_err(KnowledgeError::Embeddings)
    }

    /// The vector of one text, from the cache or else from the model (then cached).
    pub fn cached(&self, index: &mut Index, text: &str) -> Result<Vec<f32>, KnowledgeError> {
        let hash = text_hash(text);
        if let Some(vector) = index.vector(&self.key, &hash)? {
            return Ok(vector);
        }
        let vector = self.embed(&[text])?.remove(0);
        index.put_vectors(&self.key, &[(hash, vector.clone())])?;
        Ok(vector)
    }
}

/// The cosine similarity of `a` and the little-endian `f32`s in `b`; `None` when their
/// dimensions differ.
pub fn cosine(a: &[f32], a_norm: f32, b: &[u8]) -> Option<f32> {
    if b.len() != a.len() * 4 || a_norm == 0.0 {
        return None;
    }
    let (mut dot, mut norm) = (0f32, 0f32);
    for (x, bytes) in a.iter().zip(b.chunks_exact(4)) {
        let y = f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        dot += x * y;
        norm += y * y;
    }
    (norm > 0.0).then(|| dot / (a_norm * norm.sqrt()))
}

/// The Euclidean norm.
pub fn norm(a: &[f32]) -> f32 {
    a.iter().map(|x| x * x).sum::<f32>().sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_of_stored_vectors() {
        let bytes = |v: &[f32]| v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
        let a = [1.0, 0.0];
        assert_eq!(cosine(&a, norm(&a), &bytes(&[2.0, 0.0])), Some(1.0));
        assert_eq!(cosine(&a, norm(&a), &bytes(&[0.0, 3.0])), Some(0.0));
        assert_eq!(cosine(&a, norm(&a), &bytes(&[1.0, 0.0, 0.0])), None);
    }
}
