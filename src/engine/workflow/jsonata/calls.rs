//! Calls of functions an expression cannot have (issue #27 item 10): `$cont(steps)` compiles,
//! and fails only when evaluated (`T1006 … non-function`), which for a workflow condition is
//! steps later, mid-thread. [`unknown_calls`] walks the parsed tree and names every `$name(…)`
//! whose `$name` is neither a built-in function nor bound anywhere in the expression (assigned
//! with `:=`, a lambda's parameter, a path's `@$focus` or `#$index`), with where it is.
//!
//! Architecture Invariant: no false refusal. A name counts as bound when it is bound anywhere in
//! the expression, whatever the scope (JSONata's closures see assignments made after them, as
//! recursive definitions need), and a name missing from [`BUILTINS`] is asked of the engine
//! itself before it is refused. Calls through other expressions (`$o.f()`, `$f(1)(2)`,
//! `(function($x){$x})(1)`) are not judged: what they call depends on the data.

use std::collections::BTreeSet;
use std::sync::{Mutex, OnceLock, PoisonError};

use jsonata_core::ast::{AstNode, BinaryOp, PathStep, Stage};
use jsonata_core::value::with_stack;

use super::{Expr, Input, Limits, compile};

/// The engine's built-in functions (jsonata-core 2.2.13's table), for the fast path and for
/// "did you mean" suggestions. A unit test checks each against the engine; a name the engine
/// knows and this list misses is still accepted (see [`is_builtin`]).
pub(super) const BUILTINS: &[&str] = &[
    "abs",
    "append",
    "assert",
    "average",
    "base64decode",
    "base64encode",
    "boolean",
    "ceil",
    "contains",
    "count",
    "decodeUrl",
    "decodeUrlComponent",
    "distinct",
    "each",
    "encodeUrl",
    "encodeUrlComponent",
    "error",
    "eval",
    "exists",
    "filter",
    "floor",
    "formatBase",
    "formatInteger",
    "formatNumber",
    "fromMillis",
    "join",
    "keys",
    "length",
    "lookup",
    "lowercase",
    "map",
    "match",
    "max",
    "merge",
    "millis",
    "min",
    "not",
    "now",
    "number",
    "pad",
    "parseInteger",
    "power",
    "random",
    "reduce",
    "replace",
    "reverse",
    "round",
    "shuffle",
    "sift",
    "single",
    "sort",
    "split",
    "spread",
    "sqrt",
    "string",
    "substring",
    "substringAfter",
    "substringBefore",
    "sum",
    "toMillis",
    "trim",
    "type",
    "uppercase",
    "zip",
];

/// A call of a function the expression cannot have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownCall {
    /// The name, without its `$`.
    pub name: String,
    /// 1-based character offset of the call's `$` in the source, when the scan finds it.
    pub position: Option<usize>,
    /// A built-in function with a close name.
    pub suggestion: Option<&'static str>,
}

impl std::fmt::Display for UnknownCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`${}` is called but is neither a built-in function nor bound in the expression \
             (by `:=` or as a function parameter)",
            self.name
        )?;
        if let Some(at) = self.position {
            write!(f, ", at character {at}")?;
        }
        if let Some(s) = self.suggestion {
            write!(f, "; did you mean `${s}`?")?;
        }
        Ok(())
    }
}

impl Expr {
    /// Every `$name(…)` call whose function the expression cannot have, in order of first call.
    pub(crate) fn unknown_calls(&self) -> Vec<UnknownCall> {
        let mut walk = Walk::default();
        walk.node(&self.ast.node);
        let mut seen = BTreeSet::new();
        walk.calls
            .into_iter()
            .filter(|name| !walk.bound.contains(name) && seen.insert(name.clone()))
            .filter(|name| !is_builtin(name))
            .map(|name| UnknownCall {
                position: call_position(&self.source, &name),
                suggestion: crate::engine::suggest::closest(&name, BUILTINS.iter().copied()),
                name,
            })
            .collect()
    }
}

/// Whether the engine gives `$name` as a function when nothing binds it: [`BUILTINS`], else the
/// engine's answer to `$type($name)` (remembered per process).
fn is_builtin(name: &str) -> bool {
    if BUILTINS.binary_search(&name).is_ok() {
        return true;
    }
    if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return false;
    }
    static ASKED: OnceLock<Mutex<std::collections::HashMap<String, bool>>> = OnceLock::new();
    let asked = ASKED.get_or_init(Default::default);
    if let Some(&known) = asked
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(name)
    {
        return known;
    }
    let answer = compile(&format!("$type(${name})"))
        .and_then(|probe| probe.evaluate_prepared(&Input::undefined(), &[], &Limits::default()))
        .is_ok_and(|value| value.as_ref().and_then(|v| v.as_str()) == Some("function"));
    asked
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(name.to_owned(), answer);
    answer
}

/// The names an expression binds and the names it calls as `$name(…)`.
#[derive(Default)]
struct Walk {
    bound: BTreeSet<String>,
    calls: Vec<String>,
}

impl Walk {
    /// Every variant is listed with no wildcard, so a new one must be considered to compile.
    fn node(&mut self, node: &AstNode) {
        with_stack(|| match node {
            AstNode::String(_)
            | AstNode::Name(_)
            | AstNode::Number(_)
            | AstNode::Boolean(_)
            | AstNode::Null
            | AstNode::Undefined
            | AstNode::Placeholder
            | AstNode::Regex { .. }
            | AstNode::Variable(_)
            | AstNode::ParentVariable(_)
            | AstNode::Wildcard
            | AstNode::Descendant
            | AstNode::Parent(_) => {}
            AstNode::Path { steps } => steps.iter().for_each(|s| self.step(s)),
            AstNode::Binary { op, lhs, rhs } => {
                if let (
                    BinaryOp::ColonEqual | BinaryOp::FocusBind | BinaryOp::IndexBind,
                    AstNode::Variable(name),
                ) = (op, lhs.as_ref())
                {
                    self.bound.insert(name.clone());
                }
                if let (BinaryOp::FocusBind | BinaryOp::IndexBind, AstNode::Variable(name)) =
                    (op, rhs.as_ref())
                {
                    self.bound.insert(name.clone());
                }
                self.node(lhs);
                self.node(rhs);
            }
            AstNode::Unary { operand, .. } => self.node(operand),
            AstNode::Function {
                name,
                args,
                is_builtin,
            } => {
                // `$name(…)`; a bare `name(…)` calls a field of the context, which data decides.
                if *is_builtin {
                    self.calls.push(name.clone());
                }
                args.iter().for_each(|a| self.node(a));
            }
            AstNode::Call { procedure, args } => {
                self.node(procedure);
                args.iter().for_each(|a| self.node(a));
            }
            AstNode::Lambda { params, body, .. } => {
                self.bound.extend(params.iter().cloned());
                self.node(body);
            }
            AstNode::Array(items) | AstNode::Block(items) | AstNode::ArrayGroup(items) => {
                items.iter().for_each(|i| self.node(i))
            }
            AstNode::Object(pairs) => pairs.iter().for_each(|(k, v)| {
                self.node(k);
                self.node(v);
            }),
            AstNode::ObjectTransform { input, pattern } => {
                self.node(input);
                pattern.iter().for_each(|(k, v)| {
                    self.node(k);
                    self.node(v);
                });
            }
            AstNode::Conditional {
                condition,
                then_branch,
                else_branch,
            } => {
                self.node(condition);
                self.node(then_branch);
                if let Some(e) = else_branch {
                    self.node(e);
                }
            }
            AstNode::FunctionApplication(inner) => self.node(inner),
            AstNode::Sort { input, terms } => {
                self.node(input);
                terms.iter().for_each(|(t, _)| self.node(t));
            }
            AstNode::Transform {
                location,
                update,
                delete,
            } => {
                self.node(location);
                self.node(update);
                if let Some(d) = delete {
                    self.node(d);
                }
            }
        })
    }

    fn step(&mut self, step: &PathStep) {
        self.bound.extend(step.focus.iter().cloned());
        self.bound.extend(step.index_var.iter().cloned());
        self.node(&step.node);
        for stage in &step.stages {
            match stage {
                Stage::Filter(filter) => self.node(filter),
                Stage::Index(name) => {
                    self.bound.insert(name.clone());
                }
                Stage::KeepArray => {}
            }
        }
    }
}

/// Where `$name(` first appears in `source` as code (1-based character offset of the `$`),
/// skipping string literals, backquoted names and comments.
fn call_position(source: &str, name: &str) -> Option<usize> {
    let chars: Vec<char> = source.chars().collect();
    let wanted: Vec<char> = name.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            quote @ ('"' | '\'' | '`') => {
                i += 1;
                while i < chars.len() && chars[i] != quote {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
            }
            '/' if chars.get(i + 1) == Some(&'*') => {
                i += 2;
                while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                    i += 1;
                }
                i += 2;
            }
            '$' => {
                let start = i;
                let end = i + 1 + wanted.len();
                let named = chars.get(i + 1..end) == Some(&wanted[..])
                    && !chars
                        .get(end)
                        .is_some_and(|c| c.is_alphanumeric() || *c == '_');
                if named {
                    let mut j = end;
                    while chars.get(j).is_some_and(|c| c.is_whitespace()) {
                        j += 1;
                    }
                    if chars.get(j) == Some(&'(') {
                        return Some(start + 1);
                    }
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unknown(text: &str) -> Vec<String> {
        compile(text)
            .unwrap()
            .unknown_calls()
            .into_iter()
            .map(|c| c.to_string())
            .collect()
    }

    #[test]
    fn undefined_calls_are_named_with_where_they_are() {
        let found = unknown("$count(steps) > 1 and $cont(steps) < 3");
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("`$cont` is called but is neither a built-in function")
                && found[0].ends_with(", at character 23; did you mean `$count`?"),
            "{found:?}"
        );
        // A string that mentions the call is not the call.
        let found = unknown("'$nope(' & $nope(1)");
        assert!(found[0].contains("at character 12"), "{found:?}");
        assert_eq!(unknown("$a(1) + $a(2) + $b()").len(), 2);
    }

    #[test]
    fn bound_names_and_builtins_are_not_refused() {
        for ok in [
            "$count(steps[role='reviewer']) < 3",
            "($f := function($x){ $x + 1 }; $f(1))",
            // Recursion: the name is used inside its own definition.
            "($d := function($s,$n){ $n = 0 ? $s : $d($s & $s, $n-1) }; $length($d('x', 3)))",
            "(function($g){ $g(2) })(function($x){ $x })",
            "$map([1,2], function($v, $i, $a){ $a($v) })",
            "steps ~> $filter(function($s){ $s.role = 'x' })",
            "[1,2].$string()",
            "$lookup({'a': 1}, 'a')",
            "$o.next()",
            "steps@$s.output#$i[$i > 0].($s)",
            "$millis() > 0 and $now() != ''",
        ] {
            assert_eq!(unknown(ok), Vec::<String>::new(), "{ok}");
        }
    }

    #[test]
    fn every_listed_builtin_is_a_function_to_the_engine() {
        assert!(BUILTINS.windows(2).all(|w| w[0] < w[1]), "sorted");
        for name in BUILTINS {
            let value = compile(&format!("$type(${name})"))
                .unwrap()
                .evaluate(&serde_json::Value::Null, &[], &Limits::default())
                .unwrap();
            assert_eq!(value, Some(serde_json::json!("function")), "{name}");
        }
        assert!(!is_builtin("cont"));
        assert!(!is_builtin("count2"));
    }
}
