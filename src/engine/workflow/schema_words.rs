//! Mistakes in a role's `meta` schema that JSON Schema itself lets through: a `required` name
//! that is not among the `properties` given, and a keyword the 2020-12 draft does not know (a
//! typo like `requried` silently checks nothing). `validate` refuses the first and a keyword
//! close to a known one; any other unknown keyword is a warning.

use serde_json::Value as Json;

use crate::engine::workflow::definition::Problem;

/// Every keyword of JSON Schema 2020-12 (core, applicator, unevaluated, validation, meta-data,
/// format and content vocabularies), and `definitions`, which older schemas use for `$defs`.
const KEYWORDS: &[&str] = &[
    "$schema",
    "$id",
    "$ref",
    "$anchor",
    "$dynamicRef",
    "$dynamicAnchor",
    "$vocabulary",
    "$comment",
    "$defs",
    "definitions",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "prefixItems",
    "items",
    "contains",
    "properties",
    "patternProperties",
    "additionalProperties",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "type",
    "enum",
    "const",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxContains",
    "minContains",
    "maxProperties",
    "minProperties",
    "required",
    "dependentRequired",
    "title",
    "description",
    "default",
    "deprecated",
    "readOnly",
    "writeOnly",
    "examples",
    "format",
    "contentEncoding",
    "contentMediaType",
    "contentSchema",
];

/// Keywords whose value is a mapping of names to schemas.
const SCHEMA_MAPS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];

/// Keywords whose value is one schema.
const SCHEMA_ONE: &[&str] = &[
    "additionalProperties",
    "items",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
];

/// Keywords whose value is a list of schemas.
const SCHEMA_LISTS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems"];

/// What [`check`] found: errors refuse the workflow, warnings do not.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    pub errors: Vec<Problem>,
    pub warnings: Vec<Problem>,
}

/// Checks `schema` (a role's `meta`, located at `path`, e.g. `roles.approver.meta`) and every
/// schema nested in it.
pub(crate) fn check(path: &str, schema: &Json) -> Findings {
    let mut found = Findings::default();
    walk(path, schema, &mut found, 0);
    found
}

fn walk(path: &str, schema: &Json, found: &mut Findings, depth: usize) {
    // Deeper than any output schema a person writes; the validator already refused cycles.
    if depth > 64 {
        return;
    }
    let Json::Object(map) = schema else {
        return;
    };
    for key in map.keys() {
        if KEYWORDS.contains(&key.as_str()) || key.starts_with("x-") {
            continue;
        }
        let location = format!("{path}.{key}");
        match crate::engine::suggest::closest(key, KEYWORDS.iter().copied()) {
            Some(known) => found.errors.push(Problem {
                location,
                message: format!(
                    "`{key}` is not a JSON Schema keyword, so it checks nothing; did you mean \
                     `{known}`?"
                ),
            }),
            None => found.warnings.push(Problem {
                location,
                message: format!(
                    "`{key}` is not a JSON Schema keyword (draft 2020-12), so it checks nothing \
                     (a comma in a `{{ … }}` description splits it: quote the description)"
                ),
            }),
        }
    }
    if let (Some(Json::Object(props)), Some(Json::Array(required))) =
        (map.get("properties"), map.get("required"))
        && !map.contains_key("patternProperties")
    {
        for (i, name) in required.iter().enumerate() {
            let Some(name) = name.as_str() else { continue };
            if props.contains_key(name) {
                continue;
            }
            let hint = crate::engine::suggest::closest(name, props.keys().map(String::as_str))
                .map(|k| format!("; did you mean `{k}`?"))
                .unwrap_or_default();
            let known = props.keys().cloned().collect::<Vec<_>>().join(", ");
            found.errors.push(Problem {
                location: format!("{path}.required[{i}]"),
                message: format!(
                    "`{name}` is required but is not one of the `properties` ({known}){hint}"
                ),
            });
        }
    }
    for (key, value) in map {
        let here = format!("{path}.{key}");
        if SCHEMA_MAPS.contains(&key.as_str()) {
            if let Json::Object(subs) = value {
                for (name, sub) in subs {
                    walk(&format!("{here}.{name}"), sub, found, depth + 1);
                }
            }
        } else if SCHEMA_ONE.contains(&key.as_str()) {
            walk(&here, value, found, depth + 1);
        } else if SCHEMA_LISTS.contains(&key.as_str())
            && let Json::Array(subs) = value
        {
            for (i, sub) in subs.iter().enumerate() {
                walk(&format!("{here}[{i}]"), sub, found, depth + 1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn required_names_and_keywords_are_checked_at_every_level() {
        let found = check(
            "roles.r.meta",
            &json!({"type": "object", "properties": {
                "approved": {"type": "boolean"}, "comments": {"type": "string", "x-ui": 1},
                "inner": {"type": "object", "propertes": {}, "when not approved.": null}},
                "required": ["approved", "coments"]}),
        );
        let errors: Vec<String> = found.errors.iter().map(|p| p.to_string()).collect();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors.iter().any(|e| e.contains("roles.r.meta.required[1]")
                && e.contains("did you mean `comments`?"))
        );
        assert!(
            errors
                .iter()
                .any(|e| e.contains("roles.r.meta.properties.inner.propertes")
                    && e.contains("did you mean `properties`?"))
        );
        assert_eq!(found.warnings.len(), 1);
        assert_eq!(
            found.warnings[0].location,
            "roles.r.meta.properties.inner.when not approved."
        );
    }
}
