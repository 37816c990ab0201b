//! Tokens and cost (`docs/LLM.md#tokens-cost-and-budgets`): the `tokens` field of a step's
//! detail node, what a thread has spent (the sum over its steps), and its budget — read from
//! `config.yaml`, overridden by the thread's own (kept in its context), checked before each step.
//!
//! A step's `tokens` is `{"input", "output", "cached", "model"?, "costUsd"?}`: `input` counts
//! every prompt token, cached ones included; `cached` is the part read from the provider's
//! cache; `costUsd` is there only when the agent itself reported a cost. A step's cost is that,
//! else what `config.yaml`'s `prices` say for its model, else unknown (never 0).
//!
//! Architecture Invariant: the budget is checked before a step, against what the published
//! steps spent; a step's cost is not known in advance, so one step can pass the budget, and the
//! next one is refused.

use std::collections::BTreeMap;
use std::ops::AddAssign;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::advice::Advice;
use crate::cas::{Hash, Store, StoreError};
use crate::engine::chain::{self, ChainError};
use crate::engine::config::Config;
use crate::engine::config::budget::{self, Budget, Prices};
use crate::engine::storage::index_files::IndexError;
use crate::engine::thread::author;
use crate::engine::thread::context;
use crate::engine::thread::run_files::RunFiles;
use crate::pg::{NOTHING_SPENT, SpentChange};

/// Why spending could not be read or a budget recorded.
#[derive(Debug, thiserror::Error)]
pub enum CostError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Chain(#[from] ChainError),
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error("a budget must be above 0: {0}")]
    BadLimit(String),
}

impl Advice for CostError {
    fn hints(&self) -> Vec<String> {
        match self {
            CostError::Store(e) => e.hints(),
            CostError::Chain(e) => e.hints(),
            CostError::Index(e) => e.hints(),
            CostError::BadLimit(_) => {
                vec!["e.g. `--max-tokens 200000` or `--max-cost 5` (US dollars)".into()]
            }
        }
    }
    fn is_busy(&self) -> bool {
        match self {
            CostError::Store(e) => e.is_busy(),
            CostError::Chain(e) => e.is_busy(),
            CostError::Index(e) => e.is_busy(),
            CostError::BadLimit(_) => false,
        }
    }
}

/// The tokens of one step (or a sum of them).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Tokens {
    pub input: u64,
    pub output: u64,
    pub cached: u64,
    pub model: Option<String>,
    /// Dollars, only when the agent reported them.
    pub cost_usd: Option<f64>,
}

fn count(map: &Map<String, Value>, key: &str) -> u64 {
    map.get(key).and_then(Value::as_u64).unwrap_or(0)
}

impl Tokens {
    /// A provider's `usage` object: OpenAI's `prompt_tokens`, `completion_tokens` and
    /// `prompt_tokens_details.cached_tokens`, or Anthropic's `input_tokens`, `output_tokens`,
    /// `cache_read_input_tokens` (and `cache_creation_input_tokens`, counted as input; there
    /// `input_tokens` leaves the cached ones out). `None` when it holds no counts.
    pub(crate) fn from_usage(usage: &Value, model: Option<&str>) -> Option<Tokens> {
        let map = usage.as_object()?;
        let tokens = if map.contains_key("prompt_tokens") || map.contains_key("completion_tokens") {
            let cached = usage
                .pointer("/prompt_tokens_details/cached_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            Tokens {
                input: count(map, "prompt_tokens"),
                output: count(map, "completion_tokens"),
                cached,
                ..Tokens::default()
            }
        } else if map.contains_key("input_tokens") || map.contains_key("output_tokens") {
            let cached = count(map, "cache_read_input_tokens");
            Tokens {
                input: count(map, "input_tokens")
                    + cached
                    + count(map, "cache_creation_input_tokens"),
                output: count(map, "output_tokens"),
                cached,
                ..Tokens::default()
            }
        } else {
            return None;
        };
        Some(Tokens {
            model: model.map(str::to_owned),
            ..tokens
        })
    }

    /// The `tokens` field of a detail node's payload, if it has a readable one.
    pub(crate) fn from_detail(detail: &Value) -> Option<Tokens> {
        let t = detail.get("tokens")?.as_object()?;
        Some(Tokens {
            input: count(t, "input"),
            output: count(t, "output"),
            cached: count(t, "cached"),
            model: t.get("model").and_then(Value::as_str).map(str::to_owned),
            cost_usd: t.get("costUsd").and_then(Value::as_f64),
        })
    }

    /// The shape a detail node keeps.
    pub(crate) fn to_json(&self) -> Value {
        let mut json = json!({"input": self.input, "output": self.output, "cached": self.cached});
        if let Some(model) = &self.model {
            json["model"] = model.clone().into();
        }
        if let Some(cost) = self.cost_usd {
            json["costUsd"] = cost.into();
        }
        json
    }
}

impl AddAssign<&Tokens> for Tokens {
    /// Adds the counts; a model is kept only while every part names the same one, and a
    /// reported cost only while every part reported one.
    fn add_assign(&mut self, other: &Tokens) {
        self.input += other.input;
        self.output += other.output;
        self.cached += other.cached;
        if self.model != other.model {
            self.model = None;
        }
        self.cost_usd = match (self.cost_usd, other.cost_usd) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
    }
}

/// What some steps spent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Spent {
    pub input: u64,
    pub output: u64,
    pub cached: u64,
    /// Steps that recorded tokens.
    pub steps: usize,
    /// Dollars of the steps whose cost is known.
    pub cost_usd: f64,
    /// Steps with tokens whose cost is unknown (no reported cost, no price for the model).
    pub unknown: usize,
}

impl Spent {
    /// Adds another sum.
    pub(crate) fn merge(&mut self, other: &Spent) {
        self.input += other.input;
        self.output += other.output;
        self.cached += other.cached;
        self.steps += other.steps;
        self.cost_usd += other.cost_usd;
        self.unknown += other.unknown;
    }

    /// Input plus output.
    pub(crate) fn tokens(&self) -> u64 {
        self.input + self.output
    }

    /// The dollars, when every step's cost is known (and `None`, "unknown", otherwise).
    pub(crate) fn cost(&self) -> Option<f64> {
        (self.unknown == 0 && self.steps > 0).then_some(self.cost_usd)
    }

    /// `{"input","output","cached","tokens","steps","costUsd"}`: `costUsd` is null when
    /// unknown, with `costKnownUsd` the part that is known when some of it is.
    pub(crate) fn to_json(&self) -> Value {
        let mut json = json!({
            "input": self.input, "output": self.output, "cached": self.cached,
            "tokens": self.tokens(), "steps": self.steps, "costUsd": self.cost(),
        });
        if self.unknown > 0 && self.steps > self.unknown {
            json["costKnownUsd"] = self.cost_usd.into();
        }
        json
    }

    /// One line: `1,234 tokens (1,000 in, 234 out, 0 cached) · $0.0123`; `none reported` when
    /// no step's agent reported tokens (the offline agents, a person).
    pub(crate) fn line(&self) -> String {
        if self.steps == 0 {
            return "none reported".to_owned();
        }
        let cost = match self.cost() {
            Some(cost) => dollars(cost),
            None if self.steps > self.unknown => {
                format!("cost unknown (at least {})", dollars(self.cost_usd))
            }
            None => "cost unknown".to_owned(),
        };
        format!(
            "{} tokens ({} in, {} out, {} cached) · {cost}",
            self.tokens(),
            self.input,
            self.output,
            self.cached
        )
    }
}

/// `$0.0123`: four decimals under a dollar, two above.
pub(crate) fn dollars(amount: f64) -> String {
    if amount < 1.0 {
        format!("${amount:.4}")
    } else {
        format!("${amount:.2}")
    }
}

/// What some steps spent, before prices: the tokens of the steps whose agent reported dollars
/// (with the dollars), and of the others by model. What a thread's row keeps, as JSON
/// ([`Usage::to_row`]), so that a listing of costs reads rows instead of every thread's steps;
/// dollars are worked out when read ([`Usage::spent`]), with the prices of that moment, on each
/// model's totals (prices are per token, so that is the sum of the steps' costs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Usage {
    /// The steps whose agent reported what they cost.
    #[serde(default, skip_serializing_if = "Part::is_empty")]
    reported: Part,
    /// The other steps with tokens, by model (`""`: none named).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    models: BTreeMap<String, Part>,
}

/// The tokens of some steps (and the dollars, for those that reported them).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Part {
    steps: u64,
    input: u64,
    output: u64,
    cached: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    usd: f64,
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

impl Part {
    fn is_empty(&self) -> bool {
        self.steps == 0
    }

    fn merge(&mut self, other: &Part) {
        self.steps += other.steps;
        self.input += other.input;
        self.output += other.output;
        self.cached += other.cached;
        self.usd += other.usd;
    }

    fn add(&mut self, tokens: &Tokens) {
        self.steps += 1;
        self.input += tokens.input;
        self.output += tokens.output;
        self.cached += tokens.cached;
        self.usd += tokens.cost_usd.unwrap_or(0.0);
    }
}

impl Usage {
    /// Counts one step's tokens.
    pub(crate) fn add(&mut self, tokens: &Tokens) {
        if tokens.cost_usd.is_some() {
            self.reported.add(tokens);
        } else {
            let model = tokens.model.clone().unwrap_or_default();
            self.models.entry(model).or_default().add(tokens);
        }
    }

    /// In dollars at `prices`: a step's reported cost, else its model's price, else unknown.
    pub(crate) fn spent(&self, prices: &Prices) -> Spent {
        let mut spent = Spent::default();
        let mut count = |part: &Part, cost: Option<f64>| {
            spent.input += part.input;
            spent.output += part.output;
            spent.cached += part.cached;
            spent.steps += part.steps as usize;
            match cost {
                Some(cost) => spent.cost_usd += cost,
                None => spent.unknown += part.steps as usize,
            }
        };
        if !self.reported.is_empty() {
            count(&self.reported, Some(self.reported.usd));
        }
        for (model, part) in &self.models {
            let price = prices.get(model.as_str()).filter(|_| !model.is_empty());
            count(
                part,
                price.map(|p| p.cost(part.input, part.output, part.cached)),
            );
        }
        spent
    }

    /// Adds what other steps spent.
    fn merge(&mut self, other: &Usage) {
        self.reported.merge(&other.reported);
        for (model, part) in &other.models {
            self.models.entry(model.clone()).or_default().merge(part);
        }
    }

    /// The JSON a thread's row keeps: one line.
    pub(crate) fn to_row(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| NOTHING_SPENT.to_owned())
    }

    /// What a row keeps, read back: the sum of its lines (each step adds one as it moves the
    /// head, see [`StepSpending`]); `None` if a line is not this shape (then it is worked out
    /// again from the steps).
    pub(crate) fn from_row(text: &str) -> Option<Usage> {
        let mut total = Usage::default();
        for line in text.lines() {
            total.merge(&serde_json::from_str(line).ok()?);
        }
        Some(total)
    }

    /// Whether a row's text is more than one line (a reader writes the sum back as one).
    pub(crate) fn row_has_lines(text: &str) -> bool {
        text.contains('\n')
    }
}

/// What one step spent, as its thread's row takes it when the step moves the head.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum StepSpending {
    /// No tokens: what the row knew still holds.
    Nothing,
    /// The step's tokens, as a line of the row ([`Usage::to_row`] of this step alone).
    Spent(String),
    /// Its detail node could not be read: the row forgets, rather than keep a wrong sum.
    Unknown,
}

impl StepSpending {
    /// What the step whose detail node is `detail` spent (read from this process's writes when
    /// it wrote the step).
    pub(crate) fn of(store: &Store, detail: Hash) -> StepSpending {
        match store.get_written_sized(detail) {
            Ok((node, _)) => match Tokens::from_detail(&node.payload) {
                Some(tokens) => {
                    let mut usage = Usage::default();
                    usage.add(&tokens);
                    StepSpending::Spent(usage.to_row())
                }
                None => StepSpending::Nothing,
            },
            Err(_) => StepSpending::Unknown,
        }
    }

    /// The change to the row's spending.
    pub(crate) fn change(&self) -> SpentChange<'_> {
        match self {
            StepSpending::Nothing => SpentChange::Keep,
            StepSpending::Spent(line) => SpentChange::Add(line),
            StepSpending::Unknown => SpentChange::Forget,
        }
    }
}

/// What the steps of the chain ending at `head` spent, before prices.
pub(crate) fn usage_at(store: &Store, head: Hash) -> Result<Usage, CostError> {
    let history = chain::history(store, head)?;
    let mut usage = Usage::default();
    let chain = match history.to_chain() {
        Some(chain) => chain,
        None => chain::load(store, head)?,
    };
    for entry in &chain.steps {
        let node = store.get(entry.detail)?;
        if let Some(tokens) = Tokens::from_detail(&node.payload) {
            usage.add(&tokens);
        }
    }
    Ok(usage)
}

/// What the steps of the chain ending at `head` spent.
pub(crate) fn spent_at(store: &Store, head: Hash, prices: &Prices) -> Result<Spent, CostError> {
    Ok(usage_at(store, head)?.spent(prices))
}

/// The budget of thread `id` of `workflow`: its own limits over `config.yaml`'s.
pub(crate) fn budget_of(
    root: &Path,
    id: &str,
    workflow: &str,
    config: &Config,
) -> Result<Budget, CostError> {
    let configured = budget::configured(&config.budgets, workflow);
    let own = context::read(root, id)?.budget.unwrap_or_default();
    Ok(configured.overlaid(own))
}

/// The status of an active thread whose last step was refused at its budget: it waits for a
/// person to raise the budget (`uwf thread budget`) or end it (`uwf thread kill`), and no
/// worker claims it meanwhile. Derived, like `failed`, from the last outcome the refusal
/// recorded (its error begins with [`REACHED`]).
pub(crate) const OVER_BUDGET: &str = "over-budget";

/// How the error of a step refused at its budget begins.
pub(crate) const REACHED: &str = "budget reached: ";

/// Whether a recorded step error is a refusal at the thread's budget.
pub(crate) fn is_budget_stop(error: &str) -> bool {
    error.starts_with(REACHED)
}

/// The budget a thread has reached, with what it spent: the step does not run.
#[derive(Debug, Clone, PartialEq)]
pub struct Reached {
    pub thread: String,
    pub spent: Spent,
    pub budget: Budget,
}

impl std::fmt::Display for Reached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = &self.thread;
        if let Some(max) = self
            .budget
            .max_cost
            .filter(|max| self.spent.cost_usd >= *max)
        {
            write!(
                f,
                "{REACHED}{} of {} — raise it with `uwf thread budget {t} --max-cost {}` or end it with `uwf thread kill {t}`",
                dollars(self.spent.cost_usd),
                dollars(max),
                suggest_cost(max)
            )
        } else {
            let max = self.budget.max_tokens.unwrap_or(0);
            write!(
                f,
                "{REACHED}{} of {max} tokens — raise it with `uwf thread budget {t} --max-tokens {}` or end it with `uwf thread kill {t}`",
                self.spent.tokens(),
                max.saturating_mul(2).max(1)
            )
        }
    }
}

fn suggest_cost(max: f64) -> String {
    let doubled = (max * 2.0).max(0.01);
    if doubled >= 1.0 {
        format!("{}", doubled.ceil())
    } else {
        format!("{doubled:.2}")
    }
}

/// Whether `spent` has reached `budget` (the known cost counts against `maxCost`).
pub(crate) fn reached(spent: &Spent, budget: &Budget) -> bool {
    budget.max_tokens.is_some_and(|max| spent.tokens() >= max)
        || budget.max_cost.is_some_and(|max| spent.cost_usd >= max)
}

/// Checks thread `id` at `head` against its budget before a step: `Some` when it has reached it.
/// `own` is the thread's own budget, as its context (which the step has read already) holds it.
pub(crate) fn check(
    store: &Store,
    (id, own): (&str, Option<Budget>),
    head: Hash,
    workflow: &str,
    config: &Config,
) -> Result<Option<Reached>, CostError> {
    let budget = budget::configured(&config.budgets, workflow).overlaid(own.unwrap_or_default());
    if budget.is_empty() {
        return Ok(None);
    }
    // What the row knows at this head (each step added its own), else worked out from the
    // steps and written back, so that the thread's next steps add to it.
    let known = super::index::spent_at(store.root(), id, head)
        .ok()
        .flatten()
        .and_then(|text| Usage::from_row(&text));
    let usage = match known {
        Some(usage) => usage,
        None => {
            let usage = usage_at(store, head)?;
            super::index::note_spent(store.root(), id, head, &usage.to_row());
            usage
        }
    };
    let spent = usage.spent(&config.prices);
    Ok(reached(&spent, &budget).then(|| Reached {
        thread: id.to_owned(),
        spent,
        budget,
    }))
}

/// Sets thread `id`'s own budget to `budget` over what it had (a raise, or the limits
/// `thread start` was given), recording the act as a `budget` event of `by`.
pub(crate) fn set_budget(
    root: &Path,
    id: &str,
    budget: Budget,
    by: Option<&str>,
) -> Result<Budget, CostError> {
    if budget.max_tokens == Some(0) {
        return Err(CostError::BadLimit("--max-tokens 0".into()));
    }
    if let Some(cost) = budget.max_cost.filter(|c| !(c.is_finite() && *c > 0.0)) {
        return Err(CostError::BadLimit(format!("--max-cost {cost}")));
    }
    let mut recorded = context::read(root, id)?;
    let now = recorded.budget.unwrap_or_default().overlaid(budget);
    recorded.budget = Some(now);
    context::write(root, id, &recorded)?;
    let files = RunFiles::new(root, id);
    let fields = json!({"maxTokens": now.max_tokens, "maxCost": now.max_cost});
    author::record(&files, id, "budget", by, fields);
    Ok(now)
}

/// After a raise (or an edit of `config.yaml`'s budgets): when thread `id`, at `head` of
/// `workflow`, waits at its budget ([`OVER_BUDGET`]) and is under it now, clears the refusal its
/// last step recorded, so that it steps again; a queued one is claimed by a worker again
/// (claims pass a thread waiting at its budget by and leave it queued). `false` when it was not
/// waiting at its budget, is still over it, or a step holds it (which records its own outcome).
pub(crate) fn resume_under_budget(
    store: &Store,
    id: &str,
    head: Hash,
    workflow: &str,
    config: &Config,
) -> Result<bool, CostError> {
    let files = RunFiles::new(store.root(), id);
    if !files.last_failure().is_some_and(|e| is_budget_stop(&e)) {
        return Ok(false);
    }
    let own = context::read(store.root(), id)?.budget;
    if check(store, (id, own), head, workflow, config)?.is_some() {
        return Ok(false);
    }
    let Ok(lock) = files.try_lock() else {
        return Ok(false);
    };
    lock.record_success(&json!({"thread": id, "resumed": "under its budget"}));
    Ok(true)
}

/// The head of thread `id`, active or archived.
fn head_of(root: &Path, id: &str) -> Option<Hash> {
    match crate::engine::thread::index::state(root, id).ok()? {
        crate::engine::thread::index::State::Active { head } => Some(head),
        crate::engine::thread::index::State::Archived(a) => Some(a.head),
    }
}

/// What the sub-workflow children of thread `id` spent, and theirs, down the tree.
pub(crate) fn children_spent(store: &Store, id: &str, prices: &Prices) -> Spent {
    let mut total = Spent::default();
    let mut todo = crate::engine::thread::family::children(store.root(), id);
    let mut seen = std::collections::BTreeSet::new();
    while let Some(child) = todo.pop() {
        if !seen.insert(child.clone()) {
            continue;
        }
        if let Some(spent) =
            head_of(store.root(), &child).and_then(|head| spent_at(store, head, prices).ok())
        {
            total.merge(&spent);
        }
        todo.extend(crate::engine::thread::family::children(
            store.root(),
            &child,
        ));
    }
    total
}

/// What `thread show` adds for thread `id` at `head` of `workflow`: `cost` (its own steps),
/// `childrenCost` (its sub-workflows', when it has any) and `budget` (null when none).
pub(crate) fn show_json(
    store: &Store,
    id: &str,
    head: Hash,
    workflow: &str,
    config: &Config,
) -> Result<Value, CostError> {
    let spent = spent_at(store, head, &config.prices)?;
    let budget = budget_of(store.root(), id, workflow, config)?;
    let mut json = json!({"cost": spent.to_json()});
    json["budget"] = if budget.is_empty() {
        Value::Null
    } else {
        serde_json::to_value(budget).unwrap_or(Value::Null)
    };
    if !crate::engine::thread::family::children(store.root(), id).is_empty() {
        json["childrenCost"] = children_spent(store, id, &config.prices).to_json();
    }
    Ok(json)
}

/// [`show_json`] as lines for a person (the mount's `threads/<id>/cost`):
/// `spent: …`, `children: …` (when it has any), `budget: …`.
pub(crate) fn text(
    store: &Store,
    id: &str,
    head: Hash,
    workflow: &str,
    config: &Config,
) -> Result<String, CostError> {
    let json = show_json(store, id, head, workflow, config)?;
    let mut out = format!("spent: {}\n", line_of(&json["cost"]).unwrap_or_default());
    if let Some(children) = line_of(&json["childrenCost"]) {
        out.push_str(&format!("children: {children}\n"));
    }
    out.push_str(&format!("budget: {}\n", budget_words(&json["budget"])));
    Ok(out)
}

/// A `budget` object (`{"maxTokens", "maxCost"}`, or null) in words: `200000 tokens, $5.00`,
/// or `none`.
pub(crate) fn budget_words(budget: &Value) -> String {
    let limits: Vec<String> = [
        budget["maxTokens"].as_u64().map(|n| format!("{n} tokens")),
        budget["maxCost"].as_f64().map(dollars),
    ]
    .into_iter()
    .flatten()
    .collect();
    if limits.is_empty() {
        "none".to_owned()
    } else {
        limits.join(", ")
    }
}

/// A `cost` object of [`Spent::to_json`] as one line (for tables and `thread show`).
pub(crate) fn line_of(json: &Value) -> Option<String> {
    let count = |k: &str| json.get(k).and_then(Value::as_u64);
    let (input, output, cached) = (count("input")?, count("output")?, count("cached")?);
    let steps = count("steps").unwrap_or(0) as usize;
    let cost = json.get("costUsd").and_then(Value::as_f64);
    let known = json.get("costKnownUsd").and_then(Value::as_f64);
    let spent = Spent {
        input,
        output,
        cached,
        steps,
        cost_usd: cost.or(known).unwrap_or(0.0),
        unknown: if cost.is_some() || steps == 0 {
            0
        } else if known.is_some() {
            1
        } else {
            steps
        },
    };
    Some(spent.line())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::config::budget::Price;

    #[test]
    fn openai_and_anthropic_usage_become_tokens() {
        let openai = json!({"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
            "prompt_tokens_details": {"cached_tokens": 40}});
        let t = Tokens::from_usage(&openai, Some("gpt-4o-mini")).unwrap();
        assert_eq!((t.input, t.output, t.cached), (100, 20, 40));
        assert_eq!(t.model.as_deref(), Some("gpt-4o-mini"));
        let anthropic =
            json!({"input_tokens": 60, "output_tokens": 20, "cache_read_input_tokens": 40});
        let t = Tokens::from_usage(&anthropic, None).unwrap();
        assert_eq!((t.input, t.output, t.cached), (100, 20, 40));
        assert_eq!(Tokens::from_usage(&json!({}), None), None);
        assert_eq!(Tokens::from_usage(&Value::Null, None), None);
    }

    #[test]
    fn tokens_round_trip_through_a_detail_and_add_up() {
        let t = Tokens {
            input: 10,
            output: 5,
            cached: 2,
            model: Some("m".into()),
            cost_usd: Some(0.5),
        };
        let detail = json!({"tokens": t.to_json()});
        assert_eq!(Tokens::from_detail(&detail).unwrap(), t);
        let mut sum = t.clone();
        sum += &Tokens {
            model: Some("other".into()),
            cost_usd: None,
            ..t.clone()
        };
        assert_eq!((sum.input, sum.output, sum.cached), (20, 10, 4));
        assert_eq!((sum.model, sum.cost_usd), (None, None));
    }

    #[test]
    fn a_cost_is_reported_priced_or_unknown() {
        let mut prices = Prices::new();
        prices.insert(
            "m".into(),
            Price {
                input: 1.0,
                output: 2.0,
                cached: None,
            },
        );
        let priced = Tokens {
            input: 1_000_000,
            output: 1_000_000,
            model: Some("m".into()),
            ..Tokens::default()
        };
        let mut usage = Usage::default();
        usage.add(&priced);
        assert_eq!(usage.spent(&prices).cost(), Some(3.0));
        // The agent's own figure wins over the price of its model.
        usage.add(&Tokens {
            cost_usd: Some(0.5),
            ..priced.clone()
        });
        assert_eq!(usage.spent(&prices).cost(), Some(3.5));
        assert_eq!(usage.spent(&Prices::new()).cost(), None, "m has no price");
        usage.add(&Tokens {
            model: Some("x".into()),
            ..priced.clone()
        });
        usage.add(&Tokens {
            model: None,
            ..priced.clone()
        });
        let spent = usage.spent(&prices);
        assert_eq!((spent.steps, spent.unknown), (4, 2));
        assert_eq!(spent.cost(), None);
        assert!(spent.line().contains("cost unknown"), "{}", spent.line());
        assert_eq!(spent.to_json()["costKnownUsd"], 3.5);
        assert_eq!(spent.tokens(), 8_000_000);
    }

    #[test]
    fn what_a_row_keeps_reads_back_the_same_and_prices_at_reading() {
        assert_eq!(Usage::from_row(NOTHING_SPENT), Some(Usage::default()));
        assert_eq!(Usage::default().to_row(), NOTHING_SPENT);
        let mut usage = Usage::default();
        for (model, cost) in [(Some("m"), None), (Some("m"), None), (None, Some(0.25))] {
            usage.add(&Tokens {
                input: 100,
                output: 10,
                cached: 40,
                model: model.map(str::to_owned),
                cost_usd: cost,
            });
        }
        let row = usage.to_row();
        assert_eq!(Usage::from_row(&row), Some(usage.clone()), "{row}");
        // Prices are the reader's: the same row costs what today's prices say.
        let mut prices = Prices::new();
        assert_eq!(usage.spent(&prices).cost(), None);
        prices.insert(
            "m".into(),
            Price {
                input: 1.0,
                output: 2.0,
                cached: Some(0.5),
            },
        );
        let spent = usage.spent(&prices);
        let m = 2.0 * (60.0 + 40.0 * 0.5 + 10.0 * 2.0) / 1_000_000.0;
        assert!(
            (spent.cost().unwrap() - (m + 0.25)).abs() < 1e-12,
            "{spent:?}"
        );
        assert_eq!((spent.input, spent.output, spent.cached), (300, 30, 120));
        // Not this shape: worked out again from the steps.
        assert_eq!(Usage::from_row(r#"{"steps": 3}"#), None);
        assert_eq!(Usage::from_row("garbage"), None);
    }

    #[test]
    fn a_row_of_lines_reads_as_their_sum() {
        let tokens = |model: Option<&str>, cost: Option<f64>| Tokens {
            input: 100,
            output: 10,
            cached: 40,
            model: model.map(str::to_owned),
            cost_usd: cost,
        };
        let steps = [
            tokens(Some("m"), None),
            tokens(Some("n"), None),
            tokens(Some("m"), None),
            tokens(None, Some(0.25)),
        ];
        let mut whole = Usage::default();
        // A started thread's row, then each step's line as the step adds it.
        let mut row = NOTHING_SPENT.to_owned();
        for step in &steps {
            whole.add(step);
            let mut one = Usage::default();
            one.add(step);
            row.push('\n');
            row.push_str(&one.to_row());
        }
        assert!(Usage::row_has_lines(&row));
        assert!(!Usage::row_has_lines(&whole.to_row()));
        assert_eq!(Usage::from_row(&row), Some(whole), "{row}");
        // One line not of this shape: the whole row is worked out again.
        assert_eq!(Usage::from_row(&format!("{row}\ngarbage")), None);
    }

    #[test]
    fn a_step_adds_its_tokens_keeps_the_row_without_and_forgets_when_unread() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let raw = store
            .put(
                crate::cas::builtin::hash_of("text"),
                &Value::String("raw".into()),
            )
            .unwrap()
            .to_string();
        let with = store
            .put(
                crate::cas::builtin::hash_of("detail"),
                &serde_json::json!({"raw": raw, "exitCode": 0, "durationMs": 1, "stderrTail": "",
                    "tokens": {"input": 5, "output": 1, "model": "m"}}),
            )
            .unwrap();
        let StepSpending::Spent(line) = StepSpending::of(&store, with) else {
            panic!("the tokens are read")
        };
        assert_eq!(
            Usage::from_row(&line)
                .unwrap()
                .spent(&Prices::new())
                .tokens(),
            6
        );
        assert!(!Usage::row_has_lines(&line));
        assert!(matches!(
            StepSpending::of(&store, with).change(),
            SpentChange::Add(_)
        ));
        let none = store
            .put(
                crate::cas::builtin::hash_of("detail"),
                &serde_json::json!({"raw": raw, "exitCode": 0, "durationMs": 1, "stderrTail": ""}),
            )
            .unwrap();
        assert_eq!(StepSpending::of(&store, none), StepSpending::Nothing);
        assert_eq!(StepSpending::Nothing.change(), SpentChange::Keep);
        assert_eq!(
            StepSpending::of(&store, Hash::from_u64(7)),
            StepSpending::Unknown
        );
        assert_eq!(StepSpending::Unknown.change(), SpentChange::Forget);
    }

    #[test]
    fn a_budget_is_reached_at_its_limit() {
        let spent = Spent {
            input: 80,
            output: 20,
            steps: 1,
            cost_usd: 5.02,
            ..Spent::default()
        };
        let tokens = Budget {
            max_tokens: Some(100),
            max_cost: None,
        };
        assert!(reached(&spent, &tokens));
        assert!(!reached(
            &spent,
            &Budget {
                max_tokens: Some(101),
                max_cost: None
            }
        ));
        let cost = Budget {
            max_tokens: None,
            max_cost: Some(5.0),
        };
        assert!(reached(&spent, &cost));
        let message = Reached {
            thread: "T".into(),
            spent,
            budget: cost,
        }
        .to_string();
        assert!(
            message.contains("budget reached: $5.02 of $5.00"),
            "{message}"
        );
        assert!(
            message.contains("uwf thread budget T --max-cost 10"),
            "{message}"
        );
    }
}
