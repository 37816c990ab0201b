//! Reading a workflow file's YAML within limits (issue #13): its size, one document,
//! nesting depth and the number of values after alias expansion (a "billion laughs" file of a
//! few lines expands to billions), each refusal with its own message and a location (`line L,
//! column C`, or `file` for problems with the file as a whole), and turning its values into JSON
//! (string keys only, no tags, finite numbers) with the words that describe them in messages.

use serde_json::Value as Json;
use serde_yaml::Value as Yaml;

use crate::engine::workflow::definition::Problem;

/// The largest workflow file accepted.
pub(crate) const MAX_FILE_BYTES: usize = 1 << 20;
/// The deepest nesting of lists and mappings accepted (a workflow needs about ten levels; JSON
/// Schemas with `$defs` a few more).
pub(crate) const MAX_DEPTH: usize = 64;
/// The most values (scalars, lists, mappings) a document may hold once its aliases are expanded:
/// a "billion laughs" file of a few lines expands to billions.
pub(crate) const MAX_NODES: usize = 100_000;
/// The longest workflow or role name.
pub(crate) const MAX_NAME_CHARS: usize = 64;

/// The location of problems with the file as a whole (encoding, size, documents).
pub(super) const FILE: &str = "file";

/// Where a YAML error is (`line L, column C`, or `file`) and what it says, in words.
fn yaml_error(e: &serde_yaml::Error) -> (String, String) {
    let location = match e.location() {
        Some(l) => format!("line {}, column {}", l.line(), l.column()),
        None => FILE.to_owned(),
    };
    let message = e.to_string();
    // serde_yaml appends " at line L column C"; the location already says it.
    let message = match message.find(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message,
    };
    let message = if message.contains("more than one document") {
        "the file holds more than one YAML document (a `---` line starts each); a workflow is one document".to_owned()
    } else if message.contains("repetition limit exceeded") {
        format!(
            "the YAML aliases expand to too many values (at most {MAX_NODES} in all): an alias bomb?"
        )
    } else if message.contains("recursion limit exceeded") {
        format!("the YAML nests deeper than {MAX_DEPTH} levels")
    } else if let Some(i) = message.find(BUDGET_PREFIX) {
        // Past serde_yaml's path to the value (`a[0][3]…: `), which says nothing useful here.
        message[i + BUDGET_PREFIX.len()..].to_owned()
    } else {
        format!("YAML does not parse: {message}")
    };
    (location, message)
}

/// Marks the errors [`Budget`] raises, so they are shown without "does not parse".
const BUDGET_PREFIX: &str = "uwf-limit: ";

/// Counts the values of a document as the parser replays it (aliases expanded) and the depth of
/// nesting, and stops the parse past [`MAX_NODES`] or [`MAX_DEPTH`].
#[derive(Default)]
struct Budget {
    nodes: std::cell::Cell<usize>,
    depth: std::cell::Cell<usize>,
}

impl Budget {
    fn enter<E: serde::de::Error>(&self) -> Result<(), E> {
        let nodes = self.nodes.get() + 1;
        self.nodes.set(nodes);
        if nodes > MAX_NODES {
            return Err(E::custom(format!(
                "{BUDGET_PREFIX}the document holds more than {MAX_NODES} values once its aliases are expanded (an alias bomb?)"
            )));
        }
        Ok(())
    }

    fn nest<E: serde::de::Error, T>(&self, inner: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        let depth = self.depth.get() + 1;
        if depth > MAX_DEPTH {
            return Err(E::custom(format!(
                "{BUDGET_PREFIX}the YAML nests deeper than {MAX_DEPTH} levels"
            )));
        }
        self.depth.set(depth);
        let result = inner();
        self.depth.set(depth - 1);
        result
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for &Budget {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for &Budget {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        self.enter()
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        self.enter()
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        self.enter()
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        self.enter()
    }
    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<(), E> {
        self.enter()
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.enter()
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
        self.enter()
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.enter()?;
        self.nest(|| {
            while seq.next_element_seed(self)?.is_some() {}
            Ok(())
        })
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.enter()?;
        self.nest(|| {
            while map.next_key_seed(self)?.is_some() {
                map.next_value_seed(self)?;
            }
            Ok(())
        })
    }
    fn visit_enum<A: serde::de::EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        // A tagged value (`!tag x`): count the value under the tag.
        use serde::de::VariantAccess;
        let ((), variant) = data.variant_seed(self)?;
        variant.newtype_variant_seed(self)
    }
}

/// The one YAML document of a workflow file's text, within the limits: a leading byte-order
/// mark is skipped; no document, several documents, nesting past [`MAX_DEPTH`] and more than
/// [`MAX_NODES`] values after alias expansion are each refused with its own problem.
pub(crate) fn load(text: &str) -> Result<Yaml, Vec<Problem>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let refuse = |location: String, message: String| Err(vec![Problem { location, message }]);
    // A first pass that only counts, so an alias bomb or a deep nest is refused before any
    // value is built.
    let budget = Budget::default();
    if let Err(e) =
        serde::de::DeserializeSeed::deserialize(&budget, serde_yaml::Deserializer::from_str(text))
    {
        let (location, message) = yaml_error(&e);
        return refuse(location, message);
    }
    let doc: Yaml = match serde_yaml::from_str(text) {
        Ok(doc) => doc,
        Err(e) => {
            let (location, message) = yaml_error(&e);
            return refuse(location, message);
        }
    };
    if doc.is_null() {
        return refuse(
            FILE.to_owned(),
            "the file holds no YAML document (it is empty or only comments)".to_owned(),
        );
    }
    Ok(doc)
}

pub(crate) fn type_name(v: &Yaml) -> &'static str {
    match v {
        Yaml::Null => "null",
        Yaml::Bool(_) => "a boolean",
        Yaml::Number(_) => "a number",
        Yaml::String(_) => "a string",
        Yaml::Sequence(_) => "a list",
        Yaml::Mapping(_) => "a mapping",
        Yaml::Tagged(_) => "a tagged value",
    }
}

pub(crate) fn key_text(k: &Yaml) -> String {
    match k {
        Yaml::String(s) => s.clone(),
        Yaml::Number(n) => n.to_string(),
        Yaml::Bool(b) => b.to_string(),
        Yaml::Null => "null".into(),
        other => format!("<{}>", type_name(other)),
    }
}

/// Converts YAML to JSON: string keys only, no tags, finite numbers.
pub(crate) fn yaml_to_json(value: &Yaml) -> Result<Json, String> {
    Ok(match value {
        Yaml::Null => Json::Null,
        Yaml::Bool(b) => Json::Bool(*b),
        Yaml::Number(n) => {
            if let Some(i) = n.as_i64() {
                Json::from(i)
            } else if let Some(u) = n.as_u64() {
                Json::from(u)
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                serde_json::Number::from_f64(f)
                    .map(Json::Number)
                    .ok_or_else(|| format!("{n} is not a finite number"))?
            }
        }
        Yaml::String(s) => Json::String(s.clone()),
        Yaml::Sequence(items) => {
            Json::Array(items.iter().map(yaml_to_json).collect::<Result<_, _>>()?)
        }
        Yaml::Mapping(map) => {
            let mut out = serde_json::Map::new();
            for (k, v) in map {
                let Yaml::String(key) = k else {
                    return Err(format!("mapping key {} is not a string", key_text(k)));
                };
                out.insert(key.clone(), yaml_to_json(v)?);
            }
            Json::Object(out)
        }
        Yaml::Tagged(t) => return Err(format!("YAML tag {} is not supported", t.tag)),
    })
}
