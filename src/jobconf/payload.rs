//! A job's payload as the catalog model holds it: the JSON object's compact text.
//!
//! Invariant: the text is the object serialized with its keys sorted (serde_json's map), so
//! two payloads are equal exactly when their objects are; an empty object is the empty text.
//! Kept as text because a map's first node takes 632 bytes even for one key, and a catalog of
//! many jobs holds one payload each; as text a payload takes its length.

use std::fmt;

use serde_json::{Map as JsonMap, Value as Json};

/// A JSON object, kept as its text and read when asked.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Payload(Box<str>);

impl Payload {
    /// The object.
    pub fn map(&self) -> JsonMap<String, Json> {
        if self.0.is_empty() {
            return JsonMap::new();
        }
        // The text was written from a map: it reads back.
        serde_json::from_str(&self.0).unwrap_or_default()
    }

    /// The value of `key`, if the object has one.
    pub fn get(&self, key: &str) -> Option<Json> {
        self.map().remove(key)
    }

    /// The value of `key` when it is a string.
    pub fn get_str(&self, key: &str) -> Option<String> {
        match self.get(key)? {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    /// Whether the object has no key.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The object as JSON text (`{}` when empty).
    pub fn text(&self) -> &str {
        if self.0.is_empty() { "{}" } else { &self.0 }
    }

    /// The object as a JSON value.
    pub fn json(&self) -> Json {
        Json::Object(self.map())
    }
}

impl From<JsonMap<String, Json>> for Payload {
    fn from(map: JsonMap<String, Json>) -> Self {
        if map.is_empty() {
            return Self::default();
        }
        Self(Json::Object(map).to_string().into_boxed_str())
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_reads_back_the_object_it_was_made_from_and_compares_as_it() {
        let a: JsonMap<String, Json> =
            serde_json::from_str(r#"{"url":"http://x","method":"GET","n":1.5}"#).unwrap();
        let b: JsonMap<String, Json> =
            serde_json::from_str(r#"{"n":1.5,"method":"GET","url":"http://x"}"#).unwrap();
        let (pa, pb) = (Payload::from(a.clone()), Payload::from(b));
        assert_eq!(pa, pb, "key order does not matter");
        assert_eq!(pa.map(), a);
        assert_eq!(pa.get_str("method").as_deref(), Some("GET"));
        assert_eq!(pa.get("n"), Some(Json::from(1.5)));
        assert_eq!(pa.get_str("n"), None);
        let empty = Payload::from(JsonMap::new());
        assert!(empty.is_empty() && empty.map().is_empty());
        assert_eq!(empty.text(), "{}");
        assert_ne!(empty, pa);
    }
}
