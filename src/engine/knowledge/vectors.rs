//! Embeddings for project knowledge: the model `modelOverrides.embed` names, reached as the
//! `llm` agent reaches its model. Vectors are cached in the index by model and text hash, so a
//! text is embedded once on this machine; similarity is the cosine of two vectors.
//!
//! A stored vector is quantised to one signed byte per dimension (scaled so its largest
//! component is ±127), after its Euclidean norm as a little-endian `f32`: a quarter of the
//! bytes a query scans, and cosines within about 1 % of the exact ones, which leaves rankings
//! as they were (the usual scalar quantisation of vector stores).

use crate::engine::config::Config;
use crate::engine::llm::client::{Client, Endpoint};

use super::KnowledgeError;
use super::index::{Index, text_hash};

/// Texts per embeddings request.
pub(crate) const BATCH: usize = 32;

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
    pub(crate) fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, KnowledgeError> {
        self.client.embed(texts).map_err(KnowledgeError::Embeddings)
    }

    /// The vector of one text (as stored), from the cache or else from the model (then cached).
    pub(crate) fn cached(&self, index: &mut Index, text: &str) -> Result<Vec<f32>, KnowledgeError> {
        let hash = text_hash(text);
        if let Some(bytes) = index.vector(&self.key, &hash)? {
            return Ok(decode(&bytes));
        }
        let bytes = encode(&self.embed(&[text])?.remove(0));
        index.put_vectors(&self.key, &[(hash, bytes.clone())])?;
        Ok(decode(&bytes))
    }
}

/// A vector as stored: its quantised components' norm (`f32`, little-endian), then one `i8`
/// per dimension, the largest component at ±127.
pub(crate) fn encode(vector: &[f32]) -> Vec<u8> {
    let largest = vector.iter().fold(0f32, |m, x| m.max(x.abs()));
    let scale = if largest > 0.0 { 127.0 / largest } else { 0.0 };
    let quantised: Vec<i8> = vector
        .iter()
        .map(|x| (x * scale).round().clamp(-127.0, 127.0) as i8)
        .collect();
    let norm = quantised
        .iter()
        .map(|&q| f32::from(q) * f32::from(q))
        .sum::<f32>()
        .sqrt();
    let mut bytes = norm.to_le_bytes().to_vec();
    bytes.extend(quantised.iter().map(|&q| q as u8));
    bytes
}

/// A stored vector's components (scaled, so only its direction is the original's).
pub(crate) fn decode(bytes: &[u8]) -> Vec<f32> {
    bytes.iter().skip(4).map(|&b| f32::from(b as i8)).collect()
}

/// The cosine similarity of `a` (with norm `a_norm`) and a stored vector; `None` when their
/// dimensions differ or either is zero.
pub(crate) fn cosine(a: &[f32], a_norm: f32, stored: &[u8]) -> Option<f32> {
    let (norm, components) = stored.split_first_chunk::<4>()?;
    let norm = f32::from_le_bytes(*norm);
    if components.len() != a.len() || a_norm == 0.0 || norm == 0.0 {
        return None;
    }
    // Eight running sums, so the compiler can keep them in one vector register.
    let mut lanes = [0f32; 8];
    let (a_blocks, a_rest) = a.as_chunks::<8>();
    let (b_blocks, b_rest) = components.as_chunks::<8>();
    for (x, y) in a_blocks.iter().zip(b_blocks) {
        for i in 0..8 {
            lanes[i] += x[i] * f32::from(y[i] as i8);
        }
    }
    let rest: f32 = a_rest
        .iter()
        .zip(b_rest)
        .map(|(x, &y)| x * f32::from(y as i8))
        .sum();
    Some((lanes.iter().sum::<f32>() + rest) / (a_norm * norm))
}

/// The Euclidean norm.
pub(crate) fn norm(a: &[f32]) -> f32 {
    a.iter().map(|x| x * x).sum::<f32>().sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_of_stored_vectors() {
        let a = [1.0, 0.0];
        assert_eq!(cosine(&a, norm(&a), &encode(&[2.0, 0.0])), Some(1.0));
        assert_eq!(cosine(&a, norm(&a), &encode(&[0.0, 3.0])), Some(0.0));
        assert_eq!(cosine(&a, norm(&a), &encode(&[1.0, 0.0, 0.0])), None);
        assert_eq!(cosine(&a, norm(&a), &encode(&[0.0, 0.0])), None);
        assert_eq!(cosine(&a, norm(&a), &[1, 2]), None);
    }

    #[test]
    fn quantised_cosines_stay_close_to_exact_ones() {
        // Pseudo-random vectors of 1,536 dimensions, as embedding models give.
        let mut seed = 42u64;
        let mut vector = || -> Vec<f32> {
            (0..1536)
                .map(|_| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((seed >> 33) as f32 / (1u64 << 31) as f32) - 0.5
                })
                .collect()
        };
        let query = vector();
        for _ in 0..20 {
            let mut other = vector();
            // Make some pairs similar, so cosines spread over a range.
            for (o, q) in other.iter_mut().zip(&query) {
                *o += q;
            }
            let exact = query.iter().zip(&other).map(|(a, b)| a * b).sum::<f32>()
                / (norm(&query) * norm(&other));
            let quantised = cosine(&query, norm(&query), &encode(&other)).unwrap();
            assert!((exact - quantised).abs() < 0.01, "{exact} vs {quantised}");
            assert_eq!(decode(&encode(&other)).len(), 1536);
        }
    }
}
