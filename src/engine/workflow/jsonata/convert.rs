//! Conversion between `serde_json::Value` and the engine's values, bounded in depth so a
//! hostile document or result never overflows the native stack.

use super::*;

/// Converts JSON to the engine's value, growing the stack as deep input needs.
pub(super) fn to_jvalue(value: &Value) -> JValue {
    match value {
        Value::Null => JValue::Null,
        Value::Bool(b) => JValue::Bool(*b),
        // Every serde_json number has an f64 form unless `arbitrary_precision` is on.
        Value::Number(n) => JValue::Number(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => JValue::string(s.as_str()),
        Value::Array(items) => with_stack(|| {
            let items: Vec<JValue> = items.iter().map(to_jvalue).collect();
            // Mirrors jsonata-core's own conversion: an array with no array items is "flat".
            let flat = !items.iter().any(JValue::is_array);
            JValue::Array(JArray::new_flat(items, flat))
        }),
        Value::Object(map) => with_stack(|| {
            let map: IndexMap<String, JValue> = map
                .iter()
                .map(|(key, value)| (key.clone(), to_jvalue(value)))
                .collect();
            JValue::object(map)
        }),
    }
}

/// Bookkeeping for [`to_json`]: a result can share one value millions of times at no cost to the
/// engine (an object holding the previous one twice, built in a loop), so expanding it is counted
/// and watches for cancellation.
pub(super) struct ConvertBudget<'a> {
    pub(super) cancel: &'a CancelToken,
    pub(super) limits: &'a Limits,
    pub(super) visited: usize,
}

/// Converts the engine's value to JSON the way `JSON.stringify` would: functions and regexes are
/// left out of objects, become `null` in arrays and `undefined` at the top; non-finite numbers
/// become `null` (the engine itself raises `D1001` before that can happen).
pub(super) fn to_json(
    value: &JValue,
    depth: usize,
    budget: &mut ConvertBudget<'_>,
) -> Result<Option<Value>, JsonataError> {
    if depth > 0 {
        budget.visited += 1;
        if budget.visited > budget.limits.max_sequence_length {
            return Err(JsonataError::ResultTooLarge {
                limit: budget.limits.max_sequence_length,
            });
        }
        if budget.visited.is_multiple_of(4096) && budget.cancel.is_cancelled() {
            return Err(JsonataError::Timeout {
                limit: budget.limits.timeout,
            });
        }
    }
    Ok(Some(match value {
        JValue::Undefined | JValue::Lambda(_) | JValue::Builtin { .. } | JValue::Regex { .. } => {
            return Ok(None);
        }
        JValue::Null => Value::Null,
        JValue::Bool(b) => Value::Bool(*b),
        JValue::Number(n) => number_to_json(*n),
        JValue::String(s) => {
            // A result that repeats one large string would otherwise copy it past the limit
            // before the count could stop anything.
            if !super::memory::fits(s.len()) {
                return Err(JsonataError::MemoryLimit {
                    limit: budget.limits.max_memory,
                });
            }
            Value::String(s.to_string())
        }
        JValue::Array(items) => {
            if depth >= MAX_RESULT_DEPTH {
                return Err(JsonataError::ResultTooDeep {
                    limit: MAX_RESULT_DEPTH,
                });
            }
            let mut out = Vec::with_capacity(items.len());
            for item in items.iter() {
                out.push(to_json(item, depth + 1, budget)?.unwrap_or(Value::Null));
            }
            Value::Array(out)
        }
        JValue::Object(map) => {
            if depth >= MAX_RESULT_DEPTH {
                return Err(JsonataError::ResultTooDeep {
                    limit: MAX_RESULT_DEPTH,
                });
            }
            let mut out = serde_json::Map::with_capacity(map.len());
            for (key, item) in map.iter() {
                if let Some(item) = to_json(item, depth + 1, budget)? {
                    out.insert(key.clone(), item);
                }
            }
            Value::Object(out)
        }
    }))
}

/// Integral numbers within the exactly representable range print without a fraction (`3`, not
/// `3.0`), as JSONata prints them.
pub(super) fn number_to_json(n: f64) -> Value {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    if n.fract() == 0.0 && n.abs() <= EXACT {
        // In range and integral, so the cast is exact; -0 becomes 0 as in JSON.stringify.
        Value::from(n as i64)
    } else {
        serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number)
    }
}
