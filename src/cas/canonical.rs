//! Canonical JSON bytes and the node hash (`docs/store.md#hashes`).
//!
//! Architecture Invariant: every hash in the store is XXH64 of the bytes this module writes for
//! `{"payload": P, "type": T}`. The encoding sorts object keys by code point *explicitly*; it
//! never relies on `serde_json::Map` iteration order, because a dependency enabling serde_json's
//! `preserve_order` feature would otherwise silently change every hash. The test vectors at the
//! bottom pin the encoding.

use serde_json::Value;

use super::id::Hash;

/// Writes the canonical JSON encoding of `value`.
///
/// Keys are sorted by code point (Rust's `str` order on UTF-8 is code-point order), there is no
/// insignificant whitespace, strings escape only `"`, `\` and control characters, integers are
/// plain decimal and other numbers use the shortest form that round-trips.
pub(crate) fn to_canonical_bytes(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    write_value(&mut out, value);
    out
}

/// The canonical bytes of a node's hashed part: `{"payload": P, "type": T}`.
pub fn node_bytes(type_hash: Hash, payload: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"{\"payload\":");
    write_value(&mut out, payload);
    out.extend_from_slice(b",\"type\":\"");
    out.extend_from_slice(&type_hash.to_symbols());
    out.extend_from_slice(b"\"}");
    out
}

/// The hash of a node with this type and payload.
pub fn node_hash(type_hash: Hash, payload: &Value) -> Hash {
    Hash::of_bytes(&node_bytes(type_hash, payload))
}

/// A copy of `value` whose objects iterate in sorted key order (for stable rendering: serde_json
/// maps keep insertion order in this build).
pub(crate) fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.clone(), sorted(v)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(out, key);
                out.push(b':');
                write_value(out, item);
            }
            out.push(b'}');
        }
    }
}

/// Integers print in plain decimal. A float with an integral value that an IEEE double holds
/// exactly (|x| < 2^53) prints as that integer too, so `1.0` and `1` are the same content, as in
/// JavaScript. Every other float uses the shortest round-trip form.
fn write_number(out: &mut Vec<u8>, n: &serde_json::Number) {
    if let Some(i) = n.as_i64() {
        out.extend_from_slice(i.to_string().as_bytes());
    } else if let Some(u) = n.as_u64() {
        out.extend_from_slice(u.to_string().as_bytes());
    } else if let Some(f) = n.as_f64() {
        const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
        if f.fract() == 0.0 && f.abs() < EXACT {
            out.extend_from_slice((f as i64).to_string().as_bytes());
        } else {
            // serde_json prints finite floats in shortest round-trip form.
            out.extend_from_slice(n.to_string().as_bytes());
        }
    }
}

fn write_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            0x08 => Some(b"\\b"),
            0x0c => Some(b"\\f"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            0x00..=0x1f => None,
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        match escape {
            Some(e) => out.extend_from_slice(e),
            None => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[(b >> 4) as usize]);
                out.push(HEX[(b & 0xf) as usize]);
            }
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn canonical_str(v: &Value) -> String {
        String::from_utf8(to_canonical_bytes(v)).unwrap()
    }

    #[test]
    fn bootstrap_meta_schema_vector() {
        let payload = json!({"$schema": "https://json-schema.org/draft/2020-12/schema"});
        assert_eq!(
            String::from_utf8(node_bytes(Hash::ZERO, &payload)).unwrap(),
            r#"{"payload":{"$schema":"https://json-schema.org/draft/2020-12/schema"},"type":"0000000000000"}"#
        );
        assert_eq!(node_hash(Hash::ZERO, &payload).to_string(), "F5VV55NBKX1R5");
        assert_eq!(node_hash(Hash::ZERO, &payload), Hash::META);
    }

    #[test]
    fn schema_node_vector() {
        let meta = Hash::META;
        let payload: Value = serde_json::from_str(
            r#"{"properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["a"],"type":"object"}"#,
        )
        .unwrap();
        assert_eq!(node_hash(meta, &payload).to_string(), "827F196W26J4M");
    }

    #[test]
    fn data_node_vector() {
        let text = r#"{"payload":{"a":"héllo\n\"q\"","b":-3,"z":[true,null,0.5,{"x":2,"y":1}]},"type":"827F196W26J4M"}"#;
        let node: Value = serde_json::from_str(text).unwrap();
        // The text is already canonical: re-encoding it gives the same bytes.
        assert_eq!(canonical_str(&node), text);
        let ty = Hash::parse("827F196W26J4M").unwrap();
        assert_eq!(node_hash(ty, &node["payload"]).to_string(), "298FDNKR7P5MH");
        assert_eq!(Hash::of_bytes(text.as_bytes()).to_string(), "298FDNKR7P5MH");
    }

    /// Guards against relying on map order: a map built in reverse insertion order must still
    /// encode sorted. With serde_json's `preserve_order` feature enabled, an encoder that iterated
    /// the map as-is would fail here.
    #[test]
    fn keys_are_sorted_even_when_inserted_in_reverse() {
        let mut map = serde_json::Map::new();
        map.insert("zeta".into(), json!(1));
        map.insert("beta".into(), json!({"y": 1, "x": 2}));
        map.insert("alpha".into(), json!(3));
        assert_eq!(
            canonical_str(&Value::Object(map)),
            r#"{"alpha":3,"beta":{"x":2,"y":1},"zeta":1}"#
        );
    }

    /// jsonata-core enables serde_json's `preserve_order`, so in this build maps iterate in
    /// insertion order. That is exactly why the test above matters; this one pins the fact so that
    /// the reverse-insertion test is known to exercise the dangerous case.
    #[test]
    fn this_build_has_preserve_order_on() {
        let mut map = serde_json::Map::new();
        map.insert("b".into(), json!(1));
        map.insert("a".into(), json!(2));
        let keys: Vec<&String> = map.keys().collect();
        assert_eq!(
            keys,
            ["b", "a"],
            "serde_json maps no longer keep insertion order: update this note"
        );
    }

    #[test]
    fn strings_escape_only_what_json_requires() {
        assert_eq!(
            canonical_str(&json!("a\"b\\c\u{8}\u{c}\n\r\t\u{1}\u{1f}\u{7f}é/")),
            "\"a\\\"b\\\\c\\b\\f\\n\\r\\t\\u0001\\u001f\u{7f}é/\""
        );
    }

    #[test]
    fn numbers_are_plain() {
        let v: Value = serde_json::from_str(
            "[1, -0, 1.0, 0.5, 1e3, 1.5e300, 12345678901234567890, -9007199254740993]",
        )
        .unwrap();
        assert_eq!(
            canonical_str(&v),
            "[1,0,1,0.5,1000,1.5e+300,12345678901234567890,-9007199254740993]"
        );
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|i| json!(i)),
            (-1e6f64..1e6).prop_map(|f| json!(f)),
            "\\PC{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec(("\\PC{0,6}", inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    /// Re-serialises `v` with object keys in reverse order and arbitrary whitespace.
    fn scramble(v: &Value, indent: bool) -> String {
        match v {
            Value::Object(map) => {
                let mut parts: Vec<String> = map
                    .iter()
                    .map(|(k, v)| {
                        format!(
                            "{} :\n {}",
                            serde_json::to_string(k).unwrap(),
                            scramble(v, !indent)
                        )
                    })
                    .collect();
                parts.reverse();
                let sep = if indent { " ,\n\t" } else { "," };
                format!("{{ {} }}", parts.join(sep))
            }
            Value::Array(items) => {
                let parts: Vec<String> = items.iter().map(|i| scramble(i, !indent)).collect();
                format!("[ {} ]", parts.join(" , "))
            }
            other => serde_json::to_string(other).unwrap(),
        }
    }

    proptest! {
        #[test]
        fn canonical_bytes_ignore_key_order_and_whitespace(v in arb_json(), indent in any::<bool>()) {
            let reparsed: Value = serde_json::from_str(&scramble(&v, indent)).unwrap();
            prop_assert_eq!(to_canonical_bytes(&reparsed), to_canonical_bytes(&v));
            let pretty: Value = serde_json::from_str(&serde_json::to_string_pretty(&v).unwrap()).unwrap();
            prop_assert_eq!(node_hash(Hash::META, &pretty), node_hash(Hash::META, &v));
        }

        #[test]
        fn canonical_bytes_are_valid_json_of_the_same_value(v in arb_json()) {
            let bytes = to_canonical_bytes(&v);
            let back: Value = serde_json::from_slice(&bytes).unwrap();
            prop_assert_eq!(to_canonical_bytes(&back), bytes);
        }
    }
}
