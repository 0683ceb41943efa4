//! Value types shared by the views: instants that serialize as RFC 3339, stored JSON text that
//! serializes as JSON.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Serialize, Serializer};
use serde_json::Value as Json;

/// An instant (epoch milliseconds in the catalog), serialized as RFC 3339 in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Time(pub i64);

impl Time {
    /// From an optional epoch-millisecond column.
    pub fn opt(ms: Option<i64>) -> Option<Time> {
        ms.map(Time)
    }

    /// Epoch milliseconds.
    pub fn ms(self) -> i64 {
        self.0
    }

    /// RFC 3339 with milliseconds, in UTC (`2026-12-01T05:13:51.123Z`).
    pub fn rfc3339(self) -> String {
        DateTime::<Utc>::from_timestamp_millis(self.0)
            .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
            .unwrap_or_else(|| self.0.to_string())
    }
}

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.rfc3339())
    }
}

/// JSON the catalog keeps as text (params, results): the value itself when the text parses,
/// else the text as a JSON string (an abbreviated `last_response`, an error message).
pub fn json_of(text: Option<&str>) -> Option<Json> {
    text.map(|t| serde_json::from_str(t).unwrap_or_else(|_| Json::String(t.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_serialize_as_rfc3339_utc() {
        let json = serde_json::to_string(&Time(1_764_566_031_123)).unwrap();
        assert_eq!(json, "\"2025-12-01T05:13:51.123Z\"");
    }

    #[test]
    fn stored_json_text_becomes_json() {
        assert_eq!(
            json_of(Some("{\"a\":1}")),
            Some(serde_json::json!({"a": 1}))
        );
        assert_eq!(json_of(Some("boom")), Some(Json::String("boom".into())));
        assert_eq!(json_of(None), None);
    }
}
