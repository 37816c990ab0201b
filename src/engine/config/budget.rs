//! What tokens cost and how much a thread may spend: `config.yaml`'s `prices` (dollars per
//! million tokens, per model) and `budgets` (a default and per workflow), and the budget a
//! thread keeps (`docs/LLM.md#tokens-cost-and-budgets`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The price of one model, in US dollars per million tokens. `cached` is what a prompt token
/// read from the provider's cache costs (default: the `input` price).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached: Option<f64>,
}

impl Price {
    /// Dollars for `input` prompt tokens (of which `cached` came from the cache) and `output`
    /// completion tokens.
    pub(crate) fn cost(&self, input: u64, output: u64, cached: u64) -> f64 {
        let cached = cached.min(input);
        let fresh = (input - cached) as f64 * self.input;
        let from_cache = cached as f64 * self.cached.unwrap_or(self.input);
        (fresh + from_cache + output as f64 * self.output) / 1_000_000.0
    }
}

/// How much a thread may spend: tokens (input plus output) and dollars. Either may be absent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Budget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost: Option<f64>,
}

// A budget is read from YAML or JSON, neither of which can spell NaN.
impl Eq for Budget {}

impl Budget {
    /// Whether neither limit is set.
    pub(crate) fn is_empty(&self) -> bool {
        self.max_tokens.is_none() && self.max_cost.is_none()
    }

    /// `self` with the limits `other` sets replacing its own.
    pub(crate) fn overlaid(self, other: Budget) -> Budget {
        Budget {
            max_tokens: other.max_tokens.or(self.max_tokens),
            max_cost: other.max_cost.or(self.max_cost),
        }
    }
}

/// `prices:` model name (or alias) → price.
pub(crate) type Prices = BTreeMap<String, Price>;

/// `budgets:` `default` or a workflow's name → budget.
pub(crate) type Budgets = BTreeMap<String, Budget>;

/// The budget `config.yaml` gives threads of `workflow`: its own entry over `default`.
pub(crate) fn configured(budgets: &Budgets, workflow: &str) -> Budget {
    let default = budgets.get("default").copied().unwrap_or_default();
    match budgets.get(workflow) {
        Some(own) => default.overlaid(*own),
        None => default,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_price_counts_cached_tokens_at_their_own_rate() {
        let price = Price {
            input: 0.15,
            output: 0.60,
            cached: Some(0.075),
        };
        // 1M input of which 400k cached, 100k output.
        let cost = price.cost(1_000_000, 100_000, 400_000);
        assert!((cost - (0.09 + 0.03 + 0.06)).abs() < 1e-9, "{cost}");
        let plain = Price {
            cached: None,
            ..price
        };
        assert!((plain.cost(1_000_000, 0, 400_000) - 0.15).abs() < 1e-9);
    }

    #[test]
    fn a_workflows_budget_overlays_the_default() {
        let budgets: Budgets =
            serde_yaml::from_str("default: {maxCost: 5}\ndevelop: {maxTokens: 200000}\n").unwrap();
        assert_eq!(
            configured(&budgets, "develop"),
            Budget {
                max_tokens: Some(200_000),
                max_cost: Some(5.0)
            }
        );
        assert_eq!(configured(&budgets, "other").max_tokens, None);
        assert!(configured(&Budgets::new(), "x").is_empty());
    }
}
