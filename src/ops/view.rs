//! Value types shared by the views: instants that serialize as RFC 3339, stored JSON text that
//! serializes as JSON.

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
        crate::schedule::rfc3339(self.0)
    }
}

impl utoipa::PartialSchema for Time {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
            .description(Some("An instant, RFC 3339 in UTC with milliseconds"))
            .into()
    }
}

impl utoipa::ToSchema for Time {}

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.rfc3339())
    }
}

/// Reads what [`Serialize`] writes (any RFC 3339 offset): the CLI's `--url` reads the API's
/// views back to print them as the local commands do.
impl<'de> serde::Deserialize<'de> for Time {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        chrono::DateTime::parse_from_rfc3339(&text)
            .map(|t| Time(t.timestamp_millis()))
            .map_err(|e| serde::de::Error::custom(format!("`{text}` is not RFC 3339: {e}")))
    }
}

/// JSON the catalog keeps as text (params, results): the value itself when the text parses,
/// else the text as a JSON string (an abbreviated `last_response`, an error message).
pub fn json_of(text: Option<&str>) -> Option<Json> {
    text.map(|t| serde_json::from_str(t).unwrap_or_else(|_| Json::String(t.to_string())))
}

/// Milliseconds of a duration written as a whole number and a unit (`500ms`, `90s`, `15m`,
/// `2h`, `30d`), saturating; `None` when `text` is not one.
pub fn duration_ms(text: &str) -> Option<i64> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    if split == 0 {
        return None;
    }
    let (n, unit) = text.split_at(split);
    let unit_ms: i64 = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    Some(n.parse::<i64>().ok()?.saturating_mul(unit_ms))
}

/// An instant given as a duration back from `now` (`90s`, `15m`, `2h`, `1d`) or a time (RFC
/// 3339, or `YYYY-MM-DD[ HH:MM[:SS]]` local); an error names `field`.
pub fn parse_instant(field: &str, text: &str, now: i64) -> Result<i64, crate::ops::OpError> {
    let t = text.trim();
    if let Some(ms) = duration_ms(t) {
        return Ok(now - ms);
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(t) {
        return Ok(t.timestamp_millis());
    }
    for format in [
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(naive) = chrono::NaiveDateTime::parse_from_str(t, format)
            && let Some(local) = naive.and_local_timezone(chrono::Local).earliest()
        {
            return Ok(local.timestamp_millis());
        }
    }
    if let Ok(day) = chrono::NaiveDate::parse_from_str(t, "%Y-%m-%d")
        && let Some(local) = day
            .and_hms_opt(0, 0, 0)
            .and_then(|d| d.and_local_timezone(chrono::Local).earliest())
    {
        return Ok(local.timestamp_millis());
    }
    Err(crate::ops::OpError::invalid(
        field,
        format!(
            "expected a duration (90s, 15m, 2h, 1d) or a time (2026-12-01T08:00:00Z, \
             2026-12-01 08:00), got `{text}`"
        ),
    ))
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
