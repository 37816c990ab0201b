//! Content hashes: XXH64 (seed 0) rendered as 13 Crockford Base32 symbols.
//!
//! A [`Hash`] is the name of a node in the store. Its text form never changes
//! (`docs/store.md#hashes`): 13 symbols, most significant first, the first carrying the top 4 bits
//! and each of the other twelve 5 bits. Output is upper case; input is case-insensitive and follows
//! Crockford's decoding rule (`O` → `0`, `I`/`L` → `1`). Anything else is a [`HashParseError`],
//! never a panic.

use crate::advice::Advice;
use std::fmt;
use std::str::FromStr;

/// Crockford's Base32 alphabet (no I, L, O, U).
const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Number of symbols in a rendered hash.
pub(crate) const HASH_LEN: usize = 13;

/// A 64-bit content hash, displayed as 13 Crockford Base32 symbols.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Hash(u64);

/// Why a string is not a valid hash.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HashParseError {
    #[error("invalid hash `{text}`: expected {HASH_LEN} Crockford Base32 symbols, got {len}")]
    Length { text: String, len: usize },
    #[error(
        "invalid hash `{text}`: `{symbol}` at position {position} is not a Crockford Base32 symbol"
    )]
    Symbol {
        text: String,
        symbol: char,
        position: usize,
    },
    #[error("invalid hash `{text}`: the first symbol must be 0-F (it carries only 4 bits)")]
    Overflow { text: String },
}

impl Advice for HashParseError {}

impl Hash {
    /// The reserved hash `0000000000000`: the type of the bootstrap meta-schema node.
    ///
    /// It names no stored node.
    pub(crate) const ZERO: Hash = Hash(0);

    /// `F5VV55NBKX1R5`, the hash of the bootstrap meta-schema node: the type of every schema
    /// node. Pinned by a test in `canonical.rs`.
    pub const META: Hash = Hash(0xf2ef_652d_573e_8705);

    /// Hashes raw bytes with XXH64, seed 0.
    pub fn of_bytes(bytes: &[u8]) -> Hash {
        Hash(twox_hash::XxHash64::oneshot(0, bytes))
    }

    /// Wraps a raw 64-bit value.
    pub const fn from_u64(value: u64) -> Hash {
        Hash(value)
    }

    /// The raw 64-bit value.
    #[cfg(test)]
    pub(crate) const fn as_u64(self) -> u64 {
        self.0
    }

    /// Renders the 13 symbols into a fixed buffer (no allocation).
    pub(crate) fn to_symbols(self) -> [u8; HASH_LEN] {
        let mut out = [0u8; HASH_LEN];
        for (i, slot) in out.iter_mut().enumerate() {
            let shift = 5 * (HASH_LEN - 1 - i);
            *slot = ALPHABET[((self.0 >> shift) & 0x1f) as usize];
        }
        out
    }

    /// The first two symbols: the fan-out directory of the node file.
    pub(crate) fn fanout(self) -> String {
        let s = self.to_symbols();
        String::from_utf8_lossy(&s[..2]).into_owned()
    }

    /// The remaining eleven symbols: the node file's stem inside its fan-out directory.
    #[cfg(test)]
    pub(crate) fn rest(self) -> String {
        let s = self.to_symbols();
        String::from_utf8_lossy(&s[2..]).into_owned()
    }

    /// Parses a hash, accepting lower case and Crockford's `O`/`I`/`L` aliases.
    pub fn parse(text: &str) -> Result<Hash, HashParseError> {
        let len = text.chars().count();
        if len != HASH_LEN {
            return Err(HashParseError::Length {
                text: text.to_owned(),
                len,
            });
        }
        let mut value: u64 = 0;
        for (position, symbol) in text.chars().enumerate() {
            let digit = decode_symbol(symbol).ok_or_else(|| HashParseError::Symbol {
                text: text.to_owned(),
                symbol,
                position,
            })?;
            if position == 0 && digit > 0xf {
                return Err(HashParseError::Overflow {
                    text: text.to_owned(),
                });
            }
            value = (value << 5) | u64::from(digit);
        }
        Ok(Hash(value))
    }
}

/// Decodes one symbol under Crockford's rule; `None` for anything outside the alphabet.
fn decode_symbol(symbol: char) -> Option<u8> {
    let upper = match symbol.to_ascii_uppercase() {
        'O' => '0',
        'I' | 'L' => '1',
        other => other,
    };
    if !upper.is_ascii() {
        return None;
    }
    ALPHABET
        .iter()
        .position(|&b| b == upper as u8)
        .map(|p| p as u8)
}

impl fmt::Display for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let symbols = self.to_symbols();
        // The alphabet is ASCII, so this cannot fail.
        f.write_str(std::str::from_utf8(&symbols).expect("alphabet is ASCII"))
    }
}

impl fmt::Debug for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hash({self})")
    }
}

impl FromStr for Hash {
    type Err = HashParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Hash::parse(s)
    }
}

impl serde::Serialize for Hash {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Hash {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Hash::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn empty_bytes_vector() {
        let h = Hash::of_bytes(b"");
        assert_eq!(h.as_u64(), 0xEF46_DB37_51D8_E999);
        assert_eq!(h.to_string(), "EYHPV6X8XHTCS");
    }

    #[test]
    fn hello_vector() {
        assert_eq!(Hash::of_bytes(b"hello").to_string(), "2DHW2FP49YVD3");
    }

    #[test]
    fn reserved_hashes_render_as_spec_says() {
        assert_eq!(Hash::ZERO.to_string(), "0000000000000");
        assert_eq!(Hash::META.to_string(), "F5VV55NBKX1R5");
    }

    #[test]
    fn parse_is_case_insensitive_with_crockford_aliases() {
        let h = Hash::parse("EYHPV6X8XHTCS").unwrap();
        assert_eq!(Hash::parse("eyhpv6x8xhtcs").unwrap(), h);
        // O reads as 0, I and L read as 1.
        assert_eq!(
            Hash::parse("2DHW2FP49YVD3").unwrap(),
            Hash::parse("2dhw2fp49yvd3").unwrap()
        );
        assert_eq!(
            Hash::parse("O0000000000IL").unwrap(),
            Hash::parse("0000000000011").unwrap()
        );
    }

    #[test]
    fn parse_rejects_bad_input_clearly() {
        assert!(matches!(
            Hash::parse("ABC"),
            Err(HashParseError::Length { len: 3, .. })
        ));
        assert!(matches!(
            Hash::parse("EYHPV6X8XHTCU"),
            Err(HashParseError::Symbol {
                symbol: 'U',
                position: 12,
                ..
            })
        ));
        assert!(matches!(
            Hash::parse("EYHPV6X8XHTC\u{e9}"),
            Err(HashParseError::Symbol { .. })
        ));
        assert!(matches!(
            Hash::parse("GYHPV6X8XHTCS"),
            Err(HashParseError::Overflow { .. })
        ));
        assert!(Hash::parse("").is_err());
        assert!(
            Hash::parse("EYHPV6X8XHTCS ")
                .unwrap_err()
                .to_string()
                .contains("13")
        );
    }

    #[test]
    fn fanout_and_rest_split_the_symbols() {
        let h = Hash::parse("EYHPV6X8XHTCS").unwrap();
        assert_eq!(h.fanout(), "EY");
        assert_eq!(h.rest(), "HPV6X8XHTCS");
    }

    proptest! {
        #[test]
        fn display_parse_round_trip(v in any::<u64>()) {
            let h = Hash::from_u64(v);
            let text = h.to_string();
            prop_assert_eq!(text.len(), HASH_LEN);
            prop_assert_eq!(Hash::parse(&text).unwrap(), h);
            prop_assert_eq!(Hash::parse(&text.to_lowercase()).unwrap(), h);
        }

        #[test]
        fn parse_never_panics(s in "\\PC{0,20}") {
            let _ = Hash::parse(&s);
        }
    }
}
