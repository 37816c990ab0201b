//! Validation of workflow YAML (`docs/workflows.md#the-format`): `parse` turns text into a
//! [`Definition`] after checking every rule. It never stops at the first problem: it walks the
//! whole document and reports each problem with its location (`line L, column C` for YAML syntax, a
//! path like `graph.reviewer[0].condition` for the rest; a role text's `{{ }}` templates add the
//! line and column inside that text). Unreachable roles and unused conditions are warnings, not
//! errors.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::Value as Json;
use serde_yaml::Value as Yaml;

use crate::cas::Hash;
use crate::cas::schema::CompiledSchema;

use crate::engine::workflow::definition::{
    Checked, Condition, Definition, END, MAX_RETRY, Problem, Role, START, Transition, Workflow,
};
use crate::engine::workflow::yaml_load::{
    self, FILE, MAX_FILE_BYTES, MAX_NAME_CHARS, key_text, type_name, yaml_to_json,
};
use crate::engine::workflow::{jsonata, schema_words, template};

/// Parses and validates a workflow file's bytes: the file-level checks (size, UTF-8 text, not
/// binary), then [`parse`].
pub(crate) fn parse_bytes(bytes: &[u8]) -> Result<Checked, Vec<Problem>> {
    let refuse = |message: String| {
        Err(vec![Problem {
            location: FILE.to_owned(),
            message,
        }])
    };
    if bytes.len() > MAX_FILE_BYTES {
        return Err(vec![too_large(Some(bytes.len() as u64))]);
    }
    if bytes.contains(&0) {
        return refuse("the file is binary (it holds NUL bytes), not YAML text".to_owned());
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => parse(text),
        Err(e) => {
            let good = &bytes[..e.valid_up_to()];
            let line = good.iter().filter(|&&b| b == b'\n').count() + 1;
            let column =
                good.len() - good.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1) + 1;
            refuse(format!(
                "the file is not UTF-8 text (an invalid byte at line {line}, column {column}); save it as UTF-8"
            ))
        }
    }
}

/// The whole-file problem of a workflow file over [`MAX_FILE_BYTES`]: `size` is the file's real
/// size when it is known (a regular file's `stat`), `None` for a stream (stdin, a pipe, a
/// device) of which only the limit and one byte more were read.
pub(crate) fn too_large(size: Option<u64>) -> Problem {
    let what = match size {
        Some(size) => format!("the file is {size} bytes"),
        None => format!("the input is more than {MAX_FILE_BYTES} bytes"),
    };
    Problem {
        location: FILE.to_owned(),
        message: format!("{what}; a workflow file has at most {MAX_FILE_BYTES} (1 MiB)"),
    }
}

/// Parses and validates YAML text. All problems are collected before refusing.
///
/// A leading byte-order mark is skipped. Whole-file problems (no document, several documents,
/// too deep, too many values after alias expansion) are located at `file` or at the line and
/// column where the parser noticed them.
pub fn parse(text: &str) -> Result<Checked, Vec<Problem>> {
    let doc = yaml_load::load(text)?;
    let mut v = Validator::default();
    let definition = v.document(&doc);
    if v.errors.is_empty()
        && let Some(definition) = definition
    {
        return Ok(Checked {
            definition,
            warnings: v.warnings,
        });
    }
    Err(v.errors)
}

/// Collects problems while walking the YAML document.
#[derive(Default)]
struct Validator {
    errors: Vec<Problem>,
    warnings: Vec<Problem>,
}

fn is_workflow_name(s: &str) -> bool {
    let mut chars = s.chars();
    if s.chars().count() > MAX_NAME_CHARS {
        return false;
    }
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

fn is_role_name(s: &str) -> bool {
    let mut chars = s.chars();
    if s.chars().count() > MAX_NAME_CHARS {
        return false;
    }
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A name as messages show it: a name past [`MAX_NAME_CHARS`] is cut, with its length.
fn shown(name: &str) -> String {
    let len = name.chars().count();
    if len <= MAX_NAME_CHARS {
        return name.to_owned();
    }
    let head: String = name.chars().take(24).collect();
    format!("{head}… ({len} characters)")
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

impl Validator {
    fn error(&mut self, location: impl Into<String>, message: impl Into<String>) {
        self.errors.push(Problem {
            location: location.into(),
            message: message.into(),
        });
    }

    fn warn(&mut self, location: impl Into<String>, message: impl Into<String>) {
        self.warnings.push(Problem {
            location: location.into(),
            message: message.into(),
        });
    }

    /// Checks that `value` is a mapping with string keys from `allowed` and the `required`
    /// ones present; returns its fields in document order.
    fn fields<'a>(
        &mut self,
        path: &str,
        value: &'a Yaml,
        allowed: &[&str],
        required: &[&str],
    ) -> Option<Vec<(String, &'a Yaml)>> {
        let Yaml::Mapping(map) = value else {
            let what = if path.is_empty() {
                "the document"
            } else {
                path
            };
            self.error(
                if path.is_empty() { "(root)" } else { path },
                format!("{what} must be a mapping, found {}", type_name(value)),
            );
            return None;
        };
        let mut out = Vec::new();
        for (k, v) in map {
            let key = key_text(k);
            if !allowed.contains(&key.as_str()) {
                self.error(
                    join(path, &key),
                    format!(
                        "unknown field `{key}` (expected one of: {})",
                        allowed.join(", ")
                    ),
                );
                continue;
            }
            out.push((key, v));
        }
        for r in required {
            if !out.iter().any(|(k, _)| k == r) {
                self.error(join(path, r), format!("required field `{r}` is missing"));
            }
        }
        Some(out)
    }

    fn string(&mut self, path: &str, value: &Yaml) -> Option<String> {
        match value {
            Yaml::String(s) => Some(s.clone()),
            other => {
                self.error(
                    path,
                    format!("must be a string, found {}", type_name(other)),
                );
                None
            }
        }
    }

    fn entries<'a>(&mut self, path: &str, value: &'a Yaml) -> Vec<(String, &'a Yaml)> {
        match value {
            Yaml::Mapping(map) => map.iter().map(|(k, v)| (key_text(k), v)).collect(),
            Yaml::Null => Vec::new(),
            other => {
                self.error(
                    path,
                    format!("must be a mapping, found {}", type_name(other)),
                );
                Vec::new()
            }
        }
    }

    fn document(&mut self, doc: &Yaml) -> Option<Definition> {
        let fields = self.fields(
            "",
            doc,
            &["name", "description", "roles", "conditions", "graph"],
            &["name", "roles", "graph"],
        )?;
        let mut name = None;
        let mut description = None;
        let mut roles = BTreeMap::new();
        let mut schemas = BTreeMap::new();
        let mut conditions = BTreeMap::new();
        let mut graph_value = None;
        for (key, value) in &fields {
            match key.as_str() {
                "name" => {
                    if let Some(n) = self.string("name", value) {
                        if is_workflow_name(&n) {
                            name = Some(n);
                        } else {
                            self.error(
                                "name",
                                format!("`{}` is not a valid workflow name (lower-case letters, digits and `-`, starting with a letter or digit; at most {MAX_NAME_CHARS} characters)", shown(&n)),
                            );
                        }
                    }
                }
                "description" => description = self.string("description", value),
                "roles" => {
                    for (role, v) in self.entries("roles", value) {
                        let path = format!("roles.{}", shown(&role));
                        if role == START || role == END {
                            self.error(
                                &path,
                                format!("`{role}` is reserved and cannot be a role name"),
                            );
                            continue;
                        }
                        if !is_role_name(&role) {
                            self.error(&path, format!("`{}` is not a valid role name (letters, digits, `_` and `-`, starting with a letter or `_`; at most {MAX_NAME_CHARS} characters)", shown(&role)));
                            // Still a role for the graph checks, so one bad name is one problem.
                            roles.insert(role, placeholder_role());
                            continue;
                        }
                        if let Some((r, schema)) = self.role(&path, v) {
                            roles.insert(role.clone(), r);
                            schemas.insert(role, schema);
                        } else {
                            // Keep the name known so the graph checks do not pile up noise.
                            roles.insert(role, placeholder_role());
                        }
                    }
                }
                "conditions" => {
                    for (cname, v) in self.entries("conditions", value) {
                        let path = format!("conditions.{cname}");
                        if let Some(c) = self.condition(&path, v) {
                            conditions.insert(cname, c);
                        } else {
                            conditions.insert(
                                cname,
                                Condition {
                                    description: None,
                                    expression: String::new(),
                                },
                            );
                        }
                    }
                }
                "graph" => graph_value = Some(*value),
                _ => unreachable!("fields() only returns allowed keys"),
            }
        }
        if roles.is_empty() && fields.iter().any(|(k, _)| k == "roles") {
            self.error("roles", "a workflow needs at least one role");
        }
        self.failure_targets(&roles);
        let graph = match graph_value {
            Some(g) => self.graph(g, &roles, &conditions),
            None => BTreeMap::new(),
        };
        if graph_value.is_some() {
            self.reachability(&graph, &roles, &conditions);
        }
        Some(Definition {
            workflow: Workflow {
                name: name?,
                description,
                roles,
                conditions,
                graph,
            },
            schemas,
        })
    }

    fn role(&mut self, path: &str, value: &Yaml) -> Option<(Role, Json)> {
        let fields = self.fields(
            path,
            value,
            &[
                "description",
                "goal",
                "capabilities",
                "procedure",
                "output",
                "meta",
                "retry",
                "onFailure",
            ],
            &["meta"],
        )?;
        let mut role = placeholder_role();
        let mut schema = None;
        let mut ok = true;
        for (key, v) in fields {
            let at = join(path, &key);
            let mut text = |this: &mut Self| {
                let s = this.string(&at, v);
                ok &= s.is_some();
                s
            };
            match key.as_str() {
                "description" => role.description = text(self),
                field @ ("goal" | "procedure" | "output") => {
                    let value = text(self);
                    let value = self.templated(&at, field, value);
                    match field {
                        "goal" => role.goal = value,
                        "procedure" => role.procedure = value,
                        _ => role.output = value,
                    }
                }
                "capabilities" => match v {
                    Yaml::Sequence(items) => {
                        let mut caps = Vec::new();
                        for (i, item) in items.iter().enumerate() {
                            match self.string(&format!("{at}[{i}]"), item) {
                                Some(s) => caps.push(s),
                                None => ok = false,
                            }
                        }
                        role.capabilities = Some(caps);
                    }
                    other => {
                        self.error(
                            &at,
                            format!("must be a list of strings, found {}", type_name(other)),
                        );
                        ok = false;
                    }
                },
                "meta" => schema = self.meta(&at, v),
                "retry" => match v.as_i64().and_then(|n| u32::try_from(n).ok()) {
                    Some(n) if n <= MAX_RETRY => role.retry = (n > 0).then_some(n),
                    _ => {
                        let found = match v {
                            Yaml::Number(n) => n.to_string(),
                            other => type_name(other).to_owned(),
                        };
                        self.error(&at, format!("must be a whole number from 0 to {MAX_RETRY} (how many times the agent runs again after a failure), found {found}"));
                        ok = false;
                    }
                },
                "onFailure" => role.on_failure = text(self),
                _ => unreachable!("fields() only returns allowed keys"),
            }
        }
        match (ok, schema) {
            (true, Some(schema)) => Some((role, schema)),
            _ => None,
        }
    }

    /// Each role's `onFailure` names a role or `$END` (known once every role is read).
    fn failure_targets(&mut self, roles: &BTreeMap<String, Role>) {
        for (name, role) in roles {
            let Some(target) = role.on_failure.as_deref() else {
                continue;
            };
            if target != END && !roles.contains_key(target) {
                let guess = did_you_mean(target, roles.keys());
                self.error(
                    format!("roles.{}.onFailure", shown(name)),
                    format!("`{target}` is neither a role nor `$END`{guess}"),
                );
            }
        }
    }

    /// Reports every template problem of a role's text `field` at `path` (the text is kept:
    /// a refused definition is never stored, and the other checks go on).
    fn templated(&mut self, path: &str, field: &str, text: Option<String>) -> Option<String> {
        for fault in template::check(text.as_deref().unwrap_or_default()) {
            self.error(path, fault.describe(field));
        }
        text
    }

    fn meta(&mut self, path: &str, value: &Yaml) -> Option<Json> {
        if !matches!(value, Yaml::Mapping(_)) {
            self.error(
                path,
                format!(
                    "must be a JSON Schema (a mapping), found {}",
                    type_name(value)
                ),
            );
            return None;
        }
        let json = match yaml_to_json(value) {
            Ok(json) => json,
            Err(reason) => {
                self.error(path, format!("cannot be read as JSON: {reason}"));
                return None;
            }
        };
        match CompiledSchema::compile(&json) {
            Ok(_) => {
                let found = schema_words::check(path, &json);
                let refused = !found.errors.is_empty();
                self.errors.extend(found.errors);
                self.warnings.extend(found.warnings);
                (!refused).then_some(json)
            }
            Err(violations) => {
                let detail = violations
                    .iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join("; ");
                self.error(
                    path,
                    format!("not a valid JSON Schema (draft 2020-12): {detail}"),
                );
                None
            }
        }
    }

    fn condition(&mut self, path: &str, value: &Yaml) -> Option<Condition> {
        let fields = self.fields(path, value, &["description", "expression"], &["expression"])?;
        let mut description = None;
        let mut expression = None;
        for (key, v) in fields {
            let at = join(path, &key);
            match key.as_str() {
                "description" => description = self.string(&at, v),
                "expression" => {
                    if let Some(text) = self.string(&at, v) {
                        match jsonata::compile(&text) {
                            Ok(expr) => {
                                // It would compile, then fail when a step evaluates it.
                                let unknown = expr.unknown_calls();
                                for call in &unknown {
                                    self.error(&at, call.to_string());
                                }
                                if unknown.is_empty() {
                                    expression = Some(text);
                                }
                            }
                            Err(e) => self.error(&at, format!("does not compile: {e}")),
                        }
                    }
                }
                _ => unreachable!("fields() only returns allowed keys"),
            }
        }
        Some(Condition {
            description,
            expression: expression?,
        })
    }

    fn graph(
        &mut self,
        value: &Yaml,
        roles: &BTreeMap<String, Role>,
        conditions: &BTreeMap<String, Condition>,
    ) -> BTreeMap<String, Vec<Transition>> {
        let mut graph = BTreeMap::new();
        // Only an empty list is "no transitions": transitions refused above (a misspelt role)
        // are already reported, and saying `$START` has none would be false.
        let mut start_listed_empty = false;
        for (from, list) in self.entries("graph", value) {
            let path = format!("graph.{from}");
            if from == END {
                self.error(
                    &path,
                    "`$END` ends the thread and cannot have transitions; remove this entry",
                );
                continue;
            }
            if from != START && !roles.contains_key(&from) {
                let guess = did_you_mean(&from, roles.keys());
                self.error(
                    &path,
                    format!(
                        "`{from}` is not a role (graph keys are `$START` and role names){guess}"
                    ),
                );
                continue;
            }
            let Yaml::Sequence(items) = list else {
                self.error(
                    &path,
                    format!("must be a list of transitions, found {}", type_name(list)),
                );
                continue;
            };
            let mut transitions = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let at = format!("{path}[{i}]");
                let Some(fields) = self.fields(&at, item, &["role", "condition"], &["role"]) else {
                    continue;
                };
                let mut target = None;
                let mut condition = None;
                for (key, v) in fields {
                    let field = join(&at, &key);
                    match key.as_str() {
                        "role" => {
                            if let Some(r) = self.string(&field, v) {
                                if r == END || roles.contains_key(&r) {
                                    target = Some(r);
                                } else {
                                    let guess = did_you_mean(&r, roles.keys());
                                    self.error(
                                        &field,
                                        format!("`{r}` is neither a role nor `$END`{guess}"),
                                    );
                                }
                            }
                        }
                        "condition" => match v {
                            Yaml::Null => {}
                            Yaml::String(c) if conditions.contains_key(c) => {
                                condition = Some(c.clone())
                            }
                            Yaml::String(c) => {
                                let guess = did_you_mean(c, conditions.keys());
                                self.error(
                                    &field,
                                    format!(
                                        "condition `{c}` is not defined under `conditions`{guess}"
                                    ),
                                )
                            }
                            other => self.error(
                                &field,
                                format!(
                                    "must be a condition name or null, found {}",
                                    type_name(other)
                                ),
                            ),
                        },
                        _ => unreachable!("fields() only returns allowed keys"),
                    }
                }
                if let Some(role) = target {
                    transitions.push(Transition { role, condition });
                }
            }
            if items.is_empty() && from == START {
                start_listed_empty = true;
            }
            if items.is_empty() && from != START {
                self.error(&path, format!("role `{from}` has no transitions out of it; add at least one (e.g. `- {{ role: $END, condition: null }}`)"));
            }
            graph.insert(from, transitions);
        }
        if !graph.contains_key(START) && matches!(value, Yaml::Mapping(m) if !m.contains_key(START))
        {
            self.error(
                "graph.$START",
                "the graph has no `$START` entry: say which role runs first",
            );
        } else if start_listed_empty {
            self.error(
                "graph.$START",
                "`$START` has no transitions; name the first role",
            );
        }
        for role in roles.keys() {
            let listed = matches!(value, Yaml::Mapping(m) if m.contains_key(role.as_str()));
            if !listed {
                self.error(
                    format!("graph.{role}"),
                    format!(
                        "role `{role}` has no transitions out of it; add `{role}:` to the graph"
                    ),
                );
            }
        }
        graph
    }

    /// `$END` must be reachable from `$START`; roles that cannot be reached are warnings.
    fn reachability(
        &mut self,
        graph: &BTreeMap<String, Vec<Transition>>,
        roles: &BTreeMap<String, Role>,
        conditions: &BTreeMap<String, Condition>,
    ) {
        if !graph.contains_key(START) {
            return; // already reported
        }
        let mut seen = BTreeSet::from([START.to_owned()]);
        let mut queue = VecDeque::from([START.to_owned()]);
        while let Some(at) = queue.pop_front() {
            let targets = graph.get(&at).into_iter().flatten().map(|t| &t.role);
            let on_failure = roles.get(&at).and_then(|r| r.on_failure.as_ref());
            for target in targets.chain(on_failure) {
                if seen.insert(target.clone()) && target != END {
                    queue.push_back(target.clone());
                }
            }
        }
        // Transitions refused above are missing from `graph`; judging reachability without them
        // would add a misleading second error.
        let graph_errors = self.errors.iter().any(|p| p.location.starts_with("graph"));
        if !seen.contains(END) && !graph_errors {
            self.error(
                "graph",
                "`$END` cannot be reached from `$START`: every path loops forever",
            );
        }
        for role in roles.keys() {
            if !seen.contains(role) {
                self.warn(format!("roles.{role}"), "not reachable from `$START`");
            }
        }
        let used: BTreeSet<&str> = graph
            .values()
            .flatten()
            .filter_map(|t| t.condition.as_deref())
            .collect();
        for name in conditions.keys() {
            if !used.contains(name.as_str()) {
                self.warn(
                    format!("conditions.{name}"),
                    "defined but never used in the graph",
                );
            }
        }
    }
}

/// `"; did you mean `x`?"` when one of `known` is close to `word` (a typo), else nothing.
fn did_you_mean<'a>(word: &str, known: impl IntoIterator<Item = &'a String>) -> String {
    crate::engine::suggest::closest(word, known.into_iter().map(String::as_str))
        .map(|k| format!("; did you mean `{k}`?"))
        .unwrap_or_default()
}

fn placeholder_role() -> Role {
    Role {
        description: None,
        goal: None,
        capabilities: None,
        procedure: None,
        output: None,
        meta: Hash::META,
        retry: None,
        on_failure: None,
    }
}
