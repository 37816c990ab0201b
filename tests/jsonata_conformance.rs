//! Runs the JSONata reference test suite (jsonata-js v2.2.2, `test/test-suite`) through
//! `uwf::engine::workflow::jsonata`, judging each case the way jsonata-js's `test/run-test-suite.js` does.
//!
//! The suite lives outside the repository, at `../shared/conformance/jsonata-test-suite/`.
//! Judging rules (the same as `../shared/research/jsonata-eval.md` §2):
//! - the input is `data` when the case has that key (even `null`), else the named `dataset`, else
//!   undefined; `expr-file` names a file beside the case holding the expression;
//! - `timelimit` and `depth` are applied only when both are present, as the reference runner does;
//!   other cases get limits loose enough never to matter;
//! - `undefinedResult` needs undefined; `result` is compared as JSON with numbers equal to a
//!   relative 1e-9 and object key order ignored, arrays in order unless the case is `unordered`;
//! - `code` (or `error.code`) must equal the error's JSONata code, whether the expression failed to
//!   compile or to evaluate.
//!
//! Every failure must be listed in [`KNOWN_EXCEPTIONS`] with its reason, and every listed case must
//! still fail, so an engine upgrade that changes either shows up here. The report (pass rate, each
//! failure and why) prints with `cargo test --test jsonata_conformance -- --nocapture`, and always
//! when the test fails.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use uwf::engine::workflow::jsonata::{self, Input, JsonataError, Limits};

/// Cases that fail, by id (`group/file.json`, with `#index` for files holding an array of cases).
const KNOWN_EXCEPTIONS: &[(&str, &str)] = &[
    (
        "function-encodeUrl/case002.json",
        "lone UTF-16 surrogate \"\\uD800\": a Rust string cannot hold one, so the harness reads \
         it as U+FFFD, which encodes fine",
    ),
    (
        "function-encodeUrlComponent/case002.json",
        "lone UTF-16 surrogate \"\\uD800\": a Rust string cannot hold one, so the harness reads \
         it as U+FFFD, which encodes fine",
    ),
    (
        "tail-recursion/case002.json",
        "expects U1001, which only jsonata-js's test runner raises; the engine's depth limit \
         raises D1011 as jsonata-js's own `stack` option does",
    ),
    (
        "tail-recursion/case005.json",
        "expects U1001 from the test runner's hooks; the engine raises D1011 (depth) instead",
    ),
    (
        "tail-recursion/case006.json",
        "expects U1001 from the test runner's hooks; the engine raises D1012 (timeout) instead",
    ),
];

/// Limits for cases that do not set both `timelimit` and `depth` (the reference runs those with
/// none). Generous, so only a hang would reach them.
const LOOSE: Limits = Limits {
    timeout: Duration::from_secs(20),
    max_depth: 30_000,
    max_sequence_length: usize::MAX,
    max_memory: usize::MAX,
};

const MIN_PASS_RATE: f64 = 99.5;

fn suite_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance/jsonata-test-suite")
}

#[test]
fn jsonata_conformance() {
    let root = suite_dir();
    assert!(
        root.join("groups").is_dir(),
        "the JSONata test suite is missing: expected it at {} (a copy of jsonata-js \
         test/test-suite, kept in ../shared/conformance/ beside the repository)",
        root.display()
    );
    let datasets = load_datasets(&root.join("datasets"));
    let cases = load_cases(&root.join("groups"));
    assert!(cases.len() > 1600, "only {} cases found", cases.len());

    let started = Instant::now();
    let mut failures = BTreeMap::new();
    let mut slowest = (Duration::ZERO, String::new());
    for case in &cases {
        let case_started = Instant::now();
        if let Err(reason) = run_case(case, &datasets) {
            failures.insert(case.id.clone(), reason);
        }
        let took = case_started.elapsed();
        if took > slowest.0 {
            slowest = (took, case.id.clone());
        }
    }

    let total = cases.len();
    let passed = total - failures.len();
    let rate = 100.0 * passed as f64 / total as f64;
    let mut report = format!(
        "jsonata conformance: {passed}/{total} = {rate:.1} % ({:.1} s, slowest case {} in {} ms)\n",
        started.elapsed().as_secs_f64(),
        slowest.1,
        slowest.0.as_millis()
    );
    let known: BTreeMap<&str, &str> = KNOWN_EXCEPTIONS.iter().copied().collect();
    let mut unexpected = Vec::new();
    for (id, reason) in &failures {
        match known.get(id.as_str()) {
            Some(why) => writeln!(report, "  known   {id}: {reason}\n          ({why})"),
            None => {
                unexpected.push(id.clone());
                writeln!(report, "  FAILED  {id}: {reason}")
            }
        }
        .expect("writing to a String cannot fail");
    }
    let stale: Vec<&str> = known
        .keys()
        .copied()
        .filter(|id| !failures.contains_key(*id))
        .collect();
    for id in &stale {
        writeln!(
            report,
            "  PASSES  {id}, listed as a known exception: remove it from the list"
        )
        .expect("writing to a String cannot fail");
    }
    println!("{report}");

    assert!(
        rate >= MIN_PASS_RATE,
        "pass rate {rate:.1} % is below {MIN_PASS_RATE} %\n{report}"
    );
    assert!(
        unexpected.is_empty(),
        "unexpected failures: {unexpected:?}\n{report}"
    );
    assert!(
        stale.is_empty(),
        "known exceptions that now pass: {stale:?}\n{report}"
    );
}

struct Case {
    id: String,
    spec: Value,
    expr: String,
}

fn load_datasets(dir: &Path) -> BTreeMap<String, Value> {
    let mut datasets = BTreeMap::new();
    for path in sorted_entries(dir) {
        if let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".json"))
        {
            datasets.insert(name.to_string(), read_json(&path));
        }
    }
    datasets
}

fn load_cases(groups: &Path) -> Vec<Case> {
    let mut cases = Vec::new();
    for group_dir in sorted_entries(groups) {
        let group = group_dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        for path in sorted_entries(&group_dir) {
            let Some(file) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if !file.ends_with(".json") {
                continue;
            }
            let specs = match read_json(&path) {
                Value::Array(items) => items
                    .into_iter()
                    .enumerate()
                    .map(|(i, spec)| (format!("{group}/{file}#{i}"), spec))
                    .collect(),
                spec => vec![(format!("{group}/{file}"), spec)],
            };
            for (id, spec) in specs {
                let expr = match spec.get("expr-file").and_then(Value::as_str) {
                    Some(name) => std::fs::read_to_string(group_dir.join(name))
                        .unwrap_or_else(|e| panic!("{id}: reading expr-file {name}: {e}")),
                    None => spec
                        .get("expr")
                        .and_then(Value::as_str)
                        .unwrap_or_else(|| panic!("{id}: no expr"))
                        .to_string(),
                };
                cases.push(Case { id, spec, expr });
            }
        }
    }
    cases
}

fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| {
            entry
                .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
                .path()
        })
        .collect();
    paths.sort();
    paths
}

/// Reads a suite file. JSON from JavaScript may hold lone UTF-16 surrogates (`"\uD800"`), which a
/// Rust string cannot; those are read as U+FFFD.
fn read_json(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text)
        .or_else(|_| serde_json::from_str(&replace_lone_surrogates(&text)))
        .unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

fn replace_lone_surrogates(text: &str) -> String {
    fn escape_at(chars: &[char], i: usize) -> Option<u32> {
        if chars.get(i) != Some(&'\\') || chars.get(i + 1) != Some(&'u') {
            return None;
        }
        let hex: String = chars.get(i + 2..i + 6)?.iter().collect();
        u32::from_str_radix(&hex, 16).ok()
    }
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        match escape_at(&chars, i) {
            Some(0xD800..=0xDBFF) if matches!(escape_at(&chars, i + 6), Some(0xDC00..=0xDFFF)) => {
                out.extend(&chars[i..i + 12]);
                i += 12;
            }
            Some(0xD800..=0xDFFF) => {
                out.push_str("\\uFFFD");
                i += 6;
            }
            _ if chars[i] == '\\' && i + 1 < chars.len() => {
                out.push(chars[i]);
                out.push(chars[i + 1]);
                i += 2;
            }
            _ => {
                out.push(chars[i]);
                i += 1;
            }
        }
    }
    out
}

/// Runs one case; `Err` says why it failed.
fn run_case(case: &Case, datasets: &BTreeMap<String, Value>) -> Result<(), String> {
    let spec = &case.spec;
    let expected_code = spec
        .get("code")
        .or_else(|| spec.get("error").and_then(|e| e.get("code")))
        .and_then(Value::as_str);

    let expr = match jsonata::compile(&case.expr) {
        Ok(expr) => expr,
        Err(error) => return judge_error(&error, expected_code, "compile"),
    };

    let input = if let Some(data) = spec.get("data") {
        Input::new(data.clone())
    } else {
        match spec.get("dataset") {
            None | Some(Value::Null) => Input::undefined(),
            Some(Value::String(name)) => Input::new(
                datasets
                    .get(name)
                    .cloned()
                    .ok_or_else(|| format!("unknown dataset {name}"))?,
            ),
            Some(other) => return Err(format!("bad dataset {other}")),
        }
    };
    let bindings: Vec<(String, Value)> = match spec.get("bindings") {
        Some(Value::Object(map)) => map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        _ => Vec::new(),
    };
    let limits = match (
        spec.get("timelimit").and_then(Value::as_u64),
        spec.get("depth").and_then(Value::as_u64),
    ) {
        (Some(ms), Some(depth)) => Limits {
            timeout: Duration::from_millis(ms),
            max_depth: usize::try_from(depth).expect("depth fits usize"),
            max_sequence_length: usize::MAX,
            max_memory: usize::MAX,
        },
        _ => LOOSE,
    };

    let outcome = expr.evaluate_prepared(&input, &bindings, &limits);
    if spec.get("undefinedResult").is_some() {
        return match outcome {
            Ok(None) => Ok(()),
            Ok(Some(value)) => Err(format!("expected undefined, got {value}")),
            Err(error) => Err(format!("expected undefined, got error {error}")),
        };
    }
    if let Some(expected) = spec.get("result") {
        let unordered = spec
            .get("unordered")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        return match outcome {
            Ok(Some(actual)) if json_equal(&actual, expected, unordered) => Ok(()),
            Ok(Some(actual)) => Err(format!("expected {expected}, got {actual}")),
            Ok(None) => Err(format!("expected {expected}, got undefined")),
            Err(error) => Err(format!("expected {expected}, got error {error}")),
        };
    }
    if expected_code.is_some() {
        return match outcome {
            Ok(value) => Err(format!(
                "expected error {}, got {}",
                expected_code.unwrap_or_default(),
                value.map_or("undefined".to_string(), |v| v.to_string())
            )),
            Err(error) => judge_error(&error, expected_code, "evaluate"),
        };
    }
    Err("the case expects nothing (no result, undefinedResult, code or error)".to_string())
}

fn judge_error(error: &JsonataError, expected: Option<&str>, phase: &str) -> Result<(), String> {
    match expected {
        Some(code) if error.code() == Some(code) => Ok(()),
        Some(code) => Err(format!("expected error {code}, got {phase} error {error}")),
        None => Err(format!("unexpected {phase} error {error}")),
    }
}

/// JSON equality as chai's `deep.equal` sees parsed JSON, with numbers compared to a relative
/// 1e-9 (the suite's expected values went through JavaScript's number printing).
fn json_equal(actual: &Value, expected: &Value, unordered: bool) -> bool {
    match (actual, expected) {
        (Value::Number(a), Value::Number(b)) => match (a.as_f64(), b.as_f64()) {
            (Some(a), Some(b)) => a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()),
            _ => false,
        },
        (Value::Array(a), Value::Array(b)) if unordered => {
            let mut unused: Vec<&Value> = a.iter().collect();
            a.len() == b.len()
                && b.iter().all(|want| {
                    match unused.iter().position(|have| json_equal(have, want, false)) {
                        Some(i) => {
                            unused.swap_remove(i);
                            true
                        }
                        None => false,
                    }
                })
        }
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| json_equal(x, y, false))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(key, x)| b.get(key).is_some_and(|y| json_equal(x, y, false)))
        }
        _ => actual == expected,
    }
}

/// The judge itself must be able to fail: these pin its rules.
#[test]
fn judge_rules() {
    use serde_json::json;
    assert!(json_equal(&json!(0.1 + 0.2), &json!(0.3), false));
    assert!(!json_equal(&json!(1.000001), &json!(1.0), false));
    assert!(json_equal(
        &json!({"a": 1, "b": 2}),
        &json!({"b": 2, "a": 1}),
        false
    ));
    assert!(!json_equal(&json!([1, 2]), &json!([2, 1]), false));
    assert!(json_equal(&json!([1, 2, 2]), &json!([2, 1, 2]), true));
    assert!(!json_equal(&json!([1, 1, 2]), &json!([2, 1, 2]), true));
    assert!(!json_equal(
        &json!({"a": 1}),
        &json!({"a": 1, "b": null}),
        false
    ));
    assert!(!json_equal(&json!(null), &json!(0), false));
    assert_eq!(replace_lone_surrogates(r#""\uD800x""#), r#""\uFFFDx""#);
    assert_eq!(
        replace_lone_surrogates(r#""\uD834\uDD1E""#),
        r#""\uD834\uDD1E""#
    );
    assert_eq!(replace_lone_surrogates(r#""\\uD800""#), r#""\\uD800""#);
}
