//! Durations in `config.yaml` (an agent's or a provider's `timeout`, `commandTimeout`): whole
//! seconds as before (`timeout: 900`), or a duration written as everywhere else in uwf
//! (`timeout: 15m`, `1h 30m`, `90s`), kept as seconds. A duration of less than a second, or
//! not a whole number of seconds, is rounded up.

use std::fmt;

use serde::Deserializer;
use serde::de::{self, Unexpected, Visitor};

/// What a duration field accepts, in words for error messages.
const EXPECTED: &str = "seconds or a duration (e.g. 900, 15m, 1h 30m)";

/// Deserializes an optional duration field into seconds.
pub(super) fn opt_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    d.deserialize_any(Seconds)
}

struct Seconds;

impl<'de> Visitor<'de> for Seconds {
    type Value = Option<u64>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(EXPECTED)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        u64::try_from(v)
            .map(Some)
            .map_err(|_| E::invalid_value(Unexpected::Signed(v), &EXPECTED))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        let text = v.trim();
        if let Ok(seconds) = text.parse::<u64>() {
            return Ok(Some(seconds));
        }
        let d = humantime::parse_duration(text)
            .map_err(|_| E::invalid_value(Unexpected::Str(v), &EXPECTED))?;
        Ok(Some(d.as_secs() + u64::from(d.subsec_nanos() > 0)))
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct T {
        #[serde(default, deserialize_with = "opt_seconds")]
        timeout: Option<u64>,
    }

    fn seconds(yaml: &str) -> Result<Option<u64>, String> {
        serde_yaml::from_str::<T>(yaml)
            .map(|t| t.timeout)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn seconds_and_durations_read_the_same() {
        assert_eq!(seconds("timeout: 900"), Ok(Some(900)));
        assert_eq!(seconds("timeout: 15m"), Ok(Some(900)));
        assert_eq!(seconds("timeout: '1h 30m'"), Ok(Some(5400)));
        assert_eq!(seconds("timeout: 90s"), Ok(Some(90)));
        assert_eq!(seconds("timeout: 1500ms"), Ok(Some(2)));
        assert_eq!(seconds("timeout: null"), Ok(None));
        assert_eq!(seconds("{}"), Ok(None));
    }

    #[test]
    fn anything_else_is_refused_in_words() {
        for bad in [
            "timeout: soon",
            "timeout: -1",
            "timeout: 1.5",
            "timeout: [1]",
        ] {
            let e = seconds(bad).expect_err(bad);
            assert!(
                e.contains("seconds or a duration") || e.contains("invalid type"),
                "{bad}: {e}"
            );
        }
    }
}
