//! Dynamic prompts: `{{ expr }}` JSONata templates in a role's `goal`, `procedure` and `output`
//! ([`FIELDS`]), evaluated against the moderator's context (`start`, `steps` with their
//! outputs) when an agent's prompt is made, so a role can be told what earlier steps produced.
//!
//! Two stages, as for conditions: [`check`] finds every syntax problem of a text when a workflow
//! is registered (`workflow put`, `--check`), located by line and column inside the field;
//! [`render_role`] evaluates the templates when a prompt is made and fails, naming the role,
//! the field and the template, when one cannot be evaluated.
//!
//! Syntax. `{{` opens a template and the first `}}` outside the expression's own braces,
//! strings, names in backquotes, comments and regex literals closes it, so object constructors
//! work inside: `{{ {"a": 1}.a }}`. A `}}` outside any template is an error, and so is a `{{`
//! that is never closed: there is no escape character. A literal `{{` or `}}` is written as a
//! template whose value is that string: `{{ "{{" }}`.
//!
//! Values. A string is inserted as it is; undefined (nothing matched, as `steps[-1].output.x`
//! at the first step) inserts nothing; anything else is inserted as compact JSON (`42`, `true`,
//! `null`, `["a","b"]`, `{"k":1}`).
//!
//! Architecture Invariant: the context is the moderator's ([`Chain::context_json`] or
//! [`History::context_json`], whichever the caller holds), built only when a field holds a
//! template, converted for the engine once per prompt, and every evaluation is bounded by the
//! moderator's [`Limits`]. Scanning a text never panics, whatever it holds.
//!
//! [`Chain::context_json`]: crate::engine::chain::Chain::context_json
//! [`History::context_json`]: crate::engine::chain::History::context_json

use serde_json::Value;

use crate::advice::Advice;
use crate::engine::workflow::Role;
use crate::engine::workflow::jsonata::{self, Input, JsonataError, Limits, UnknownCall};

/// The role fields that may hold templates.
pub(crate) const FIELDS: [&str; 3] = ["goal", "procedure", "output"];

/// Templates longer than this are cut (with `…`) where messages show them.
const SHOWN_CHARS: usize = 60;

/// Where something is inside a field's text: 1-based line and column, columns in characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// The position of byte `offset` (a character boundary) in `text`.
fn position(text: &str, offset: usize) -> Position {
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    Position {
        line: before.matches('\n').count() + 1,
        column: before[line_start..].chars().count() + 1,
    }
}

/// One piece of a text: literal text, or a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece<'a> {
    Text(&'a str),
    Template {
        /// The expression between the braces.
        expression: &'a str,
        /// The whole template, braces included.
        whole: &'a str,
        /// Where its `{{` is.
        at: Position,
    },
}

/// What is wrong with a template.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// A `{{` that no `}}` closes; `inside` names what swallowed the rest of the text (an
    /// unclosed string, name or comment), when something did.
    Unclosed { inside: Option<&'static str> },
    /// A `}}` outside any template.
    StrayClose,
    /// `{{ }}`: no expression.
    Empty,
    /// The expression does not compile.
    Compile(JsonataError),
    /// The expression calls a function it cannot have (it would fail at every step).
    UnknownCall(UnknownCall),
    /// The expression failed against the thread's context.
    Evaluate(JsonataError),
}

/// A fault with where it is in the field's text.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateFault {
    pub at: Position,
    /// The template as messages show it (whitespace runs as one space, long ones cut); empty for
    /// the faults of a lone `{{` or `}}`.
    pub template: String,
    pub fault: Fault,
}

impl TemplateFault {
    fn new(text: &str, offset: usize, whole: &str, fault: Fault) -> TemplateFault {
        TemplateFault {
            at: position(text, offset),
            template: shown(whole),
            fault,
        }
    }

    /// The fault as a sentence about `field` (`goal`, `procedure`, `output`).
    pub(crate) fn describe(&self, field: &str) -> String {
        let at = format!("at {} of the {field}", self.at);
        let template = &self.template;
        match &self.fault {
            Fault::Unclosed { inside } => format!(
                "`{{{{` {at} is not closed by `}}}}`{}; to write `{{{{` as text, write `{{{{ \"{{{{\" }}}}`",
                inside
                    .map(|what| format!(" ({what} inside it is not closed)"))
                    .unwrap_or_default()
            ),
            Fault::StrayClose => format!(
                "`}}}}` {at} closes no template; to write `}}}}` as text, write `{{{{ \"}}}}\" }}}}`"
            ),
            Fault::Empty => format!("the template `{template}` {at} has no expression"),
            Fault::Compile(error) => {
                format!("the template `{template}` {at} does not compile: {error}")
            }
            Fault::UnknownCall(call) => format!("the template `{template}` {at}: {call}"),
            Fault::Evaluate(error) => format!("the template `{template}` {at} failed: {error}"),
        }
    }
}

/// A template as messages show it: on one line, cut past [`SHOWN_CHARS`].
fn shown(whole: &str) -> String {
    let one_line = whole.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= SHOWN_CHARS {
        return one_line;
    }
    let head: String = one_line.chars().take(SHOWN_CHARS - 4).collect();
    format!("{head}… }}}}")
}

/// Whether `text` has anything a template scan would look at. Texts without `{{` or `}}` are
/// inserted as they are, with no context built.
pub(crate) fn has_templates(text: &str) -> bool {
    text.contains("{{") || text.contains("}}")
}

/// Splits `text` into literal text and templates, or says where its braces are unbalanced.
pub(crate) fn pieces(text: &str) -> Result<Vec<Piece<'_>>, TemplateFault> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut literal = 0; // start of the current literal text
    let mut i = 0;
    while i + 1 < bytes.len() {
        match (bytes[i], bytes[i + 1]) {
            (b'{', b'{') => {
                if literal < i {
                    out.push(Piece::Text(&text[literal..i]));
                }
                let close = closing(bytes, i + 2).map_err(|inside| {
                    TemplateFault::new(text, i, "{{", Fault::Unclosed { inside })
                })?;
                out.push(Piece::Template {
                    expression: &text[i + 2..close],
                    whole: &text[i..close + 2],
                    at: position(text, i),
                });
                i = close + 2;
                literal = i;
            }
            (b'}', b'}') => return Err(TemplateFault::new(text, i, "}}", Fault::StrayClose)),
            _ => i += 1,
        }
    }
    if literal < bytes.len() {
        out.push(Piece::Text(&text[literal..]));
    }
    Ok(out)
}

/// The byte offset of the `}}` that closes a template whose expression starts at `start`, or
/// what swallowed the rest of the text (`None`: nothing did, there is just no `}}`).
///
/// Scans like JSONata's tokenizer, as far as braces go: `{`/`}` pairs of object constructors
/// and blocks nest; strings (`"…"`, `'…'`, with `\` escapes), names in backquotes and
/// `/* comments */` are skipped whole, and so is a regex literal (`/…/`), recognised where an
/// operand may start (after an operator or an opening bracket, as the tokenizer does). A `/`
/// whose regex would never end is taken as a division instead. Delimiters are ASCII, so
/// scanning bytes never splits a character.
fn closing(bytes: &[u8], start: usize) -> Result<usize, Option<&'static str>> {
    let mut depth = 0usize;
    // The last significant byte, to tell a regex's `/` from a division's.
    let mut previous: Option<u8> = None;
    let mut i = start;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'"' | b'\'' => {
                i = skip_quoted(bytes, i, true).ok_or(Some("a string"))?;
                previous = Some(b);
                continue;
            }
            b'`' => {
                i = skip_quoted(bytes, i, false).ok_or(Some("a name in backquotes"))?;
                previous = Some(b);
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                let end = find(bytes, i + 2, b"*/").ok_or(Some("a comment"))?;
                i = end + 2;
                continue;
            }
            b'/' if operand_may_start(previous) => {
                if let Some(end) = skip_regex(bytes, i) {
                    i = end;
                    previous = Some(b'/');
                    continue;
                }
            }
            b'{' => depth += 1,
            b'}' if depth == 0 && bytes.get(i + 1) == Some(&b'}') => return Ok(i),
            // An unmatched `}` is the expression's own syntax error, for the compiler to report.
            b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if !b.is_ascii_whitespace() {
            previous = Some(b);
        }
        i += 1;
    }
    Err(None)
}

/// The offset just past the string or name opening at `open`, or `None` when it never ends.
fn skip_quoted(bytes: &[u8], open: usize, escapes: bool) -> Option<usize> {
    let quote = bytes[open];
    let mut i = open + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if escapes => i += 2,
            b if b == quote => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// The offset just past a regex literal opening at `open` (its flags are ordinary name bytes
/// to the caller), or `None` when no `/` ends it.
fn skip_regex(bytes: &[u8], open: usize) -> Option<usize> {
    let mut in_class = false;
    let mut i = open + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'[' => {
                in_class = true;
                i += 1;
            }
            b']' => {
                in_class = false;
                i += 1;
            }
            b'/' if !in_class => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// Whether a `/` after `previous` starts an operand (a regex) rather than dividing.
fn operand_may_start(previous: Option<u8>) -> bool {
    match previous {
        None => true,
        Some(b) => b"([{,:;?=<>!+-*%&|~".contains(&b),
    }
}

fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| from + p)
}

/// Every syntax problem of the templates in `text`: unbalanced braces (the first one; nothing
/// after it can be told apart), then each template that is empty, does not compile or calls a
/// function it cannot have.
pub(crate) fn check(text: &str) -> Vec<TemplateFault> {
    if !has_templates(text) {
        return Vec::new();
    }
    let pieces = match pieces(text) {
        Ok(pieces) => pieces,
        Err(fault) => return vec![fault],
    };
    let mut faults = Vec::new();
    for piece in pieces {
        let Piece::Template {
            expression,
            whole,
            at,
        } = piece
        else {
            continue;
        };
        let fault = |fault| TemplateFault {
            at,
            template: shown(whole),
            fault,
        };
        if expression.trim().is_empty() {
            faults.push(fault(Fault::Empty));
            continue;
        }
        match jsonata::compile(expression) {
            Ok(expr) => {
                for mut call in expr.unknown_calls() {
                    // An offset into the expression would read as one into the field.
                    call.position = None;
                    faults.push(fault(Fault::UnknownCall(call)));
                }
            }
            Err(error) => faults.push(fault(Fault::Compile(error))),
        }
    }
    faults
}

/// `text` with each template replaced by its value against `input` (see the module's doc for
/// how values are written), or the first template that cannot be evaluated.
pub(crate) fn render(text: &str, input: &Input, limits: &Limits) -> Result<String, TemplateFault> {
    let mut out = String::with_capacity(text.len());
    for piece in pieces(text)? {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Template {
                expression,
                whole,
                at,
            } => {
                let fault = |fault| TemplateFault {
                    at,
                    template: shown(whole),
                    fault,
                };
                if expression.trim().is_empty() {
                    return Err(fault(Fault::Empty));
                }
                let expr = jsonata::compile(expression).map_err(|e| fault(Fault::Compile(e)))?;
                let value = expr
                    .evaluate_prepared(input, &[], limits)
                    .map_err(|e| fault(Fault::Evaluate(e)))?;
                insert(&mut out, value);
            }
        }
    }
    Ok(out)
}

/// Appends a template's value: strings as they are, undefined as nothing, the rest as JSON.
fn insert(out: &mut String, value: Option<Value>) {
    match value {
        None => {}
        Some(Value::String(s)) => out.push_str(&s),
        Some(other) => out.push_str(&serde_json::to_string(&other).expect("JSON serializes")),
    }
}

/// A role's prompt text could not be made: one of its templates failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("cannot make the prompt of role `{role}`: {}", fault.describe(field))]
pub struct TemplateError {
    pub role: String,
    /// `goal`, `procedure` or `output`.
    pub field: &'static str,
    /// Boxed: this error travels inside the agents' error enums, which stay small.
    pub fault: Box<TemplateFault>,
}

impl Advice for TemplateError {
    fn hints(&self) -> Vec<String> {
        match &self.fault.fault {
            Fault::Evaluate(_) => vec![
                "try the expression against this thread with `uwf thread eval THREAD 'EXPR'`; fix the role's text and register the workflow again (`uwf workflow put`)".to_owned(),
            ],
            _ => vec![
                "`uwf workflow put --check FILE` finds template problems before a step does"
                    .to_owned(),
            ],
        }
    }
}

/// A role's templated fields, each with its templates replaced by their values.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct RoleText {
    pub goal: Option<String>,
    pub procedure: Option<String>,
    pub output: Option<String>,
}

/// Renders the templates of `role`'s [`FIELDS`] against the moderator context that `context`
/// makes (as JSON text), which is made only when a field holds a template.
pub(crate) fn render_role(
    name: &str,
    role: &Role,
    context: impl FnOnce() -> String,
) -> Result<RoleText, TemplateError> {
    let fields = [
        (FIELDS[0], &role.goal),
        (FIELDS[1], &role.procedure),
        (FIELDS[2], &role.output),
    ];
    let mut rendered: [Option<String>; 3] = Default::default();
    let mut context = Some(context);
    let mut input: Option<Input> = None;
    let limits = Limits::default();
    for ((field, text), slot) in fields.into_iter().zip(rendered.iter_mut()) {
        let Some(text) = text else { continue };
        if !has_templates(text) {
            *slot = Some(text.clone());
            continue;
        }
        let input = input.get_or_insert_with(|| {
            let make = context.take().expect("the context is made once");
            Input::from_json_text(make())
        });
        let text = render(text, input, &limits).map_err(|fault| TemplateError {
            role: name.to_owned(),
            field,
            fault: Box::new(fault),
        })?;
        *slot = Some(text);
    }
    let [goal, procedure, output] = rendered;
    Ok(RoleText {
        goal,
        procedure,
        output,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cas::Hash;
    use proptest::prelude::*;
    use serde_json::json;

    /// The pieces of `text` as `"text"` and `{expression}` strings.
    fn split(text: &str) -> Vec<String> {
        pieces(text)
            .unwrap_or_else(|f| panic!("{text:?}: {}", f.describe("goal")))
            .into_iter()
            .map(|p| match p {
                Piece::Text(t) => format!("{t:?}"),
                Piece::Template { expression, .. } => format!("{{{}}}", expression.trim()),
            })
            .collect()
    }

    fn fault(text: &str) -> TemplateFault {
        match pieces(text) {
            Ok(p) => panic!("{text:?} split as {p:?}"),
            Err(f) => f,
        }
    }

    fn context() -> Input {
        Input::new(json!({
            "start": {"workflow": "4G86E2KECAKQG", "prompt": "Fix the login bug"},
            "steps": [
                {"role": "planner", "output": {"plan": "1. look\n2. fix", "n": 3, "ok": true,
                 "tags": ["a", "b"], "o": {"k": 1}}, "detail": "4G86E2KECAKQG", "agent": "dry"}
            ]
        }))
    }

    fn rendered(text: &str) -> String {
        render(text, &context(), &Limits::default())
            .unwrap_or_else(|f| panic!("{text:?}: {}", f.describe("goal")))
    }

    #[test]
    fn text_without_templates_is_one_piece() {
        assert_eq!(split("plain { text }"), [r#""plain { text }""#]);
        assert!(split("").is_empty());
        assert!(!has_templates("a { b } c"));
    }

    #[test]
    fn templates_split_from_the_text_around_them() {
        assert_eq!(
            split("Plan: {{ steps[-1].output.plan }}. Done {{x}}"),
            [
                r#""Plan: ""#,
                "{steps[-1].output.plan}",
                r#"". Done ""#,
                "{x}"
            ]
        );
        assert_eq!(split("{{a}}{{b}}"), ["{a}", "{b}"]);
    }

    #[test]
    fn braces_of_the_expression_nest_inside_a_template() {
        assert_eq!(split(r#"{{ {"a": 1}.a }}"#), [r#"{{"a": 1}.a}"#]);
        assert_eq!(
            split(r#"{{{"a":{"b":1}}}}!"#),
            [r#"{{"a":{"b":1}}}"#, r#""!""#]
        );
        assert_eq!(
            split("{{ ( $x := {'k': 2}; $x.k ) }} left"),
            ["{( $x := {'k': 2}; $x.k )}", r#"" left""#]
        );
    }

    #[test]
    fn strings_names_comments_and_regexes_may_hold_braces() {
        assert_eq!(split(r#"{{ "}}" }}"#), [r#"{"}}"}"#]);
        assert_eq!(split(r#"{{ "{{" }}"#), [r#"{"{{"}"#]);
        assert_eq!(split(r#"{{ 'a \' }}' }}"#), [r#"{'a \' }}'}"#]);
        assert_eq!(split("{{ `odd }} name` }}"), ["{`odd }} name`}"]);
        assert_eq!(split("{{ x /* }} */ }}"), ["{x /* }} */}"]);
        assert_eq!(
            split("{{ $replace(x, /[}]}/, '') }}"),
            ["{$replace(x, /[}]}/, '')}"]
        );
        // After an operand, `/` divides.
        assert_eq!(split("{{ $count(steps) / 2 }}"), ["{$count(steps) / 2}"]);
        assert_eq!(split("{{ a/2 }} and 1/2"), ["{a/2}", r#"" and 1/2""#]);
    }

    #[test]
    fn unbalanced_braces_are_located() {
        let f = fault("line one\n  see {{ steps[-1].output");
        assert_eq!(f.at, Position { line: 2, column: 7 });
        assert_eq!(f.fault, Fault::Unclosed { inside: None });
        assert!(
            f.describe("goal").starts_with(
                "`{{` at line 2, column 7 of the goal is not closed by `}}`; to write `{{` as text, write `{{ \"{{\" }}`"
            ),
            "{}",
            f.describe("goal")
        );
        let f = fault("é }} x");
        assert_eq!(
            (f.at, &f.fault),
            (Position { line: 1, column: 3 }, &Fault::StrayClose)
        );
        let f = fault(r#"{{ "open }}"#);
        assert_eq!(
            f.fault,
            Fault::Unclosed {
                inside: Some("a string")
            }
        );
        assert_eq!(
            fault("{{ x /* }}").fault,
            Fault::Unclosed {
                inside: Some("a comment")
            }
        );
        // The stray `}}` after a template is reported, not the template.
        assert_eq!(fault("{{ a }} b }}").fault, Fault::StrayClose);
    }

    #[test]
    fn check_reports_every_template_that_does_not_compile() {
        assert!(check("no templates").is_empty());
        assert!(check(r#"{{ steps[-1].output.x }} and {{ {"a": 1}.a }}"#).is_empty());
        let faults = check("A {{ steps[-1]. }}\nB {{ $foo( }} C {{ }} D {{ $cont(steps) }}");
        let at: Vec<(usize, usize)> = faults.iter().map(|f| (f.at.line, f.at.column)).collect();
        assert_eq!(at, [(1, 3), (2, 3), (2, 17), (2, 25)]);
        assert!(matches!(faults[0].fault, Fault::Compile(_)), "{faults:?}");
        assert_eq!(
            faults[0].describe("procedure"),
            "the template `{{ steps[-1]. }}` at line 1, column 3 of the procedure does not compile: S0207: Unexpected end of expression"
        );
        assert!(matches!(faults[1].fault, Fault::Compile(_)));
        assert_eq!(faults[2].fault, Fault::Empty);
        let unknown = faults[3].describe("goal");
        assert!(
            unknown.contains("`$cont` is called but")
                && unknown.contains("did you mean `$count`?")
                && !unknown.contains("at character"),
            "{unknown}"
        );
    }

    #[test]
    fn values_render_as_text_or_compact_json() {
        assert_eq!(
            rendered("Plan:\n{{ steps[-1].output.plan }}\nend"),
            "Plan:\n1. look\n2. fix\nend"
        );
        assert_eq!(
            rendered("{{ steps[-1].output.n }} {{ steps[-1].output.ok }} {{ null }}"),
            "3 true null"
        );
        assert_eq!(
            rendered("{{ steps[-1].output.tags }} {{ steps[-1].output.o }}"),
            r#"["a","b"] {"k":1}"#
        );
        assert_eq!(rendered("[{{ steps[-1].output.missing }}]"), "[]");
        assert_eq!(rendered(r#"{{ "{{" }} kept {{ "}}" }}"#), "{{ kept }}");
        assert_eq!(rendered(r#"{{ {"a": 1}.a }}"#), "1");
        assert_eq!(
            rendered("Task: {{ start.prompt }}"),
            "Task: Fix the login bug"
        );
    }

    #[test]
    fn the_first_step_renders_missing_steps_as_nothing() {
        let first = Input::new(json!({"start": {"workflow": "W", "prompt": "p"}, "steps": []}));
        let text = render(
            "Previous: [{{ steps[-1].output.x }}] {{ $count(steps) }}",
            &first,
            &Limits::default(),
        );
        assert_eq!(text.unwrap(), "Previous: [] 0");
    }

    #[test]
    fn evaluation_errors_name_the_template() {
        let f = render(r#"ok {{ 1 + "a" }}"#, &context(), &Limits::default()).unwrap_err();
        assert_eq!(f.at, Position { line: 1, column: 4 });
        assert!(matches!(&f.fault, Fault::Evaluate(e) if e.code() == Some("T2002")));
        assert_eq!(
            f.describe("output"),
            r#"the template `{{ 1 + "a" }}` at line 1, column 4 of the output failed: T2002: The right side of the + operator must evaluate to a number"#
        );
    }

    #[test]
    fn hostile_templates_stop_at_the_moderators_limits() {
        let started = std::time::Instant::now();
        let f = render(
            "{{ ($f := function($x){ $f($x) + 1 }; $f(1)) }}",
            &context(),
            &Limits::default(),
        )
        .unwrap_err();
        assert!(matches!(f.fault, Fault::Evaluate(_)), "{f:?}");
        assert!(started.elapsed() < std::time::Duration::from_secs(3));
    }

    fn role(goal: &str) -> Role {
        Role {
            description: Some("{{ not a template here }}".into()),
            goal: Some(goal.into()),
            capabilities: None,
            procedure: Some("plain".into()),
            output: None,
            meta: Hash::META,
            retry: None,
            on_failure: None,
        }
    }

    #[test]
    fn a_role_renders_only_its_templated_fields_and_builds_the_context_only_for_them() {
        let text = render_role("writer", &role("no templates"), || {
            panic!("the context is not needed")
        })
        .unwrap();
        assert_eq!(
            text,
            RoleText {
                goal: Some("no templates".into()),
                procedure: Some("plain".into()),
                output: None
            }
        );
        let context = || {
            r#"{"start":{"workflow":"W","prompt":"p"},"steps":[{"role":"a","output":{"x":"XV"}}]}"#
                .to_owned()
        };
        let text = render_role("writer", &role("Use {{ steps[-1].output.x }}."), context).unwrap();
        assert_eq!(text.goal.as_deref(), Some("Use XV."));
    }

    #[test]
    fn a_role_that_cannot_render_names_role_field_and_template() {
        let err = render_role("writer", &role("{{ $error('boom') }}"), || {
            r#"{"start":{},"steps":[]}"#.to_owned()
        })
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot make the prompt of role `writer`: the template `{{ $error('boom') }}` at line 1, column 1 of the goal failed: D3137: boom"
        );
        assert_eq!(err.field, "goal");
    }

    #[test]
    fn long_templates_are_cut_in_messages() {
        let long = format!("{{{{ {} + }}}}", "a".repeat(200));
        let f = check(&long).remove(0);
        assert!(f.template.chars().count() <= SHOWN_CHARS, "{}", f.template);
        assert!(f.template.ends_with("… }}"), "{}", f.template);
    }

    /// Whether the pieces of `text`, when it splits, put together give the text back.
    fn covers(text: &str) -> bool {
        pieces(text).is_err_and(|f| f.at.line >= 1 && f.at.column >= 1)
            || pieces(text).is_ok_and(|pieces| {
                let joined: String = pieces
                    .iter()
                    .map(|p| match p {
                        Piece::Text(t) => *t,
                        Piece::Template { whole, .. } => *whole,
                    })
                    .collect();
                joined == text
            })
    }

    proptest! {
        #[test]
        fn scanning_never_panics_and_pieces_cover_the_text(s in "\\PC{0,40}") {
            prop_assert!(covers(&s));
        }

        #[test]
        fn brace_heavy_texts_never_panic(s in "[{}\"'`/*\\\\\\[\\] aé\n]{0,30}") {
            prop_assert!(covers(&s));
            for fault in check(&s) {
                prop_assert!(!fault.describe("goal").is_empty());
            }
        }
    }
}
