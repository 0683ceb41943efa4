//! Request extractors whose failures name the field: a JSON body ([`Body`]) and a query string
//! ([`Query`]) read through `serde_path_to_error`, so `{"priority": "high"}` answers
//! `priority: invalid type …` rather than a bare serde message.
//!
//! Invariant: a body is at most [`super::BODY_LIMIT`] bytes (413 past it), JSON (415 for another
//! content type), UTF-8 (400), names each key of an object once (400 naming the key: serde_json
//! would keep the last, [`no_duplicate_keys`]), and a type or unknown-field error is 422 naming
//! the field.

use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::http::header::CONTENT_TYPE;
use actix_web::{FromRequest, HttpRequest, web};
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// A JSON request body. An empty body reads as `{}` (so a trigger may send none).
#[derive(Debug)]
pub struct Body<T>(pub T);

/// The query string.
#[derive(Debug)]
pub struct Query<T>(pub T);

/// The start of the error [`no_duplicate_keys`] reports.
const DUPLICATE: &str = "duplicate key `";

/// A JSON value walked without being built, refusing an object that names a key twice.
struct Unique;

impl<'de> serde::Deserialize<'de> for Unique {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Unique)
    }
}

impl<'de> serde::de::Visitor<'de> for Unique {
    type Value = Unique;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_str<E>(self, _: &str) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_unit<E>(self) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Unique, A::Error> {
        while seq.next_element::<Unique>()?.is_some() {}
        Ok(Unique)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Unique, A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if seen.contains(&key) {
                return Err(serde::de::Error::custom(format!("{DUPLICATE}{key}`")));
            }
            map.next_value::<Unique>()?;
            seen.insert(key);
        }
        Ok(Unique)
    }
}

/// Refuses a JSON text in which an object names a key twice — serde_json keeps the last, so
/// `{"method": "rpc.methods", "method": "node.pause"}` would read as a pause — with 400
/// naming the key by its path (`runs[1].job`). Other errors are left to the parser that reads
/// the value (this one answers `Ok` for them).
pub fn no_duplicate_keys(text: &str) -> Result<(), ApiError> {
    let mut de = serde_json::Deserializer::from_str(text);
    match serde_path_to_error::deserialize::<_, Unique>(&mut de) {
        Err(e) => {
            let message = e.inner().to_string();
            let Some(key) = message
                .strip_prefix(DUPLICATE)
                .and_then(|rest| rest.split('`').next())
            else {
                return Ok(());
            };
            // The error is raised in the object, before its value: the path is the object's.
            let field = match e.path().to_string() {
                object if object == "." => key.to_string(),
                object => format!("{object}.{key}"),
            };
            Err(ApiError::bad_request(
                Some(&field),
                format!("duplicate key `{key}`: a JSON object names each key once"),
            ))
        }
        Ok(_) => Ok(()),
    }
}

/// Turns a serde error at `path` into a 400 (syntax) or a 422 naming the field.
fn field_error(path: &str, e: &dyn std::fmt::Display, syntax: bool) -> ApiError {
    let message = e.to_string();
    // An unknown field is reported at its parent's path: name the field itself.
    let field = match message.strip_prefix("unknown field `") {
        Some(rest) => {
            let name = rest.split('`').next().unwrap_or_default();
            if path == "." || path.is_empty() {
                name.to_string()
            } else if path == name || path.ends_with(&format!(".{name}")) {
                path.to_string()
            } else {
                format!("{path}.{name}")
            }
        }
        None => path.to_string(),
    };
    let field = (!field.is_empty() && field != ".").then_some(field);
    if syntax {
        ApiError::bad_request(field.as_deref(), format!("not valid JSON: {message}"))
    } else {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, field.as_deref(), message)
    }
}

/// Parses a JSON body.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        ApiError::bad_request(
            None,
            format!("the body is not UTF-8 (byte {})", e.valid_up_to()),
        )
    })?;
    let text = if text.trim().is_empty() { "{}" } else { text };
    no_duplicate_keys(text)?;
    let mut json: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| ApiError::bad_request(None, format!("not valid JSON: {e}")))?;
    // Every body is an object: serde would read a struct from an array by position too.
    if !json.is_object() {
        return Err(ApiError::invalid("body", "expected a JSON object"));
    }
    integral_numbers(&mut json);
    serde_path_to_error::deserialize(json)
        .map_err(|e| field_error(&e.path().to_string(), e.inner(), false))
}

/// JSON has one number type: `8.0` is the integer 8 (as JSON Schema and the OpenAPI document
/// say), so a number without a fraction reads as an integer where one is expected. Free-form
/// JSON a job receives (`payload`, `params`) is kept as sent.
fn integral_numbers(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            // Beyond ±2^63 an f64 cannot be an i64; NaN and infinities are not JSON numbers.
            if f.fract() == 0.0
                && (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&f)
            {
                *v = Value::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_numbers),
        Value::Object(map) => map
            .iter_mut()
            .filter(|(k, _)| !matches!(k.as_str(), "payload" | "params"))
            .for_each(|(_, v)| integral_numbers(v)),
        _ => {}
    }
}

impl<T: DeserializeOwned + 'static> FromRequest for Body<T> {
    type Error = ApiError;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Self, ApiError>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let content_type = req
            .headers()
            .get(CONTENT_TYPE)
            .map(|v| v.to_str().unwrap_or("?").to_ascii_lowercase());
        let bytes = web::Bytes::from_request(req, payload);
        Box::pin(async move {
            let bytes = bytes
                .await
                .map_err(|e| super::error::for_status(e.as_response_error().status_code()))?;
            if !bytes.is_empty()
                && !content_type
                    .as_deref()
                    .is_some_and(|t| t.starts_with("application/json"))
            {
                return Err(ApiError::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    None,
                    format!(
                        "expected Content-Type: application/json, got {}",
                        content_type.as_deref().unwrap_or("none")
                    ),
                ));
            }
            parse_json(&bytes).map(Body)
        })
    }
}

impl<T: DeserializeOwned> FromRequest for Query<T> {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let parse = || {
            let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(
                req.query_string().as_bytes(),
            ));
            serde_path_to_error::deserialize(de)
                .map(Query)
                .map_err(|e| field_error(&e.path().to_string(), e.inner(), false))
        };
        std::future::ready(parse())
    }
}

/// A run id from the path: 400 naming `id` when it is not one.
pub fn run_id(text: &str) -> Result<i64, ApiError> {
    text.parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| {
            ApiError::bad_request(
                Some("id"),
                format!("expected a run id (a positive integer), got `{text}`"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Sample {
        priority: Option<i64>,
        inner: Option<Inner>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        n: i64,
    }

    #[test]
    fn errors_name_the_field() {
        let e = parse_json::<Sample>(br#"{"priority": "high"}"#).unwrap_err();
        assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(e.body.field.as_deref(), Some("priority"));
        let e = parse_json::<Sample>(br#"{"prio": 1}"#).unwrap_err();
        assert_eq!(e.body.field.as_deref(), Some("prio"));
        let e = parse_json::<Sample>(br#"{"inner": {"n": 1, "m": 2}}"#).unwrap_err();
        assert_eq!(e.body.field.as_deref(), Some("inner.m"));
        let e = parse_json::<Sample>(br#"[1, null]"#).unwrap_err();
        assert_eq!(e.body.field.as_deref(), Some("body"), "{e:?}");
        let e = parse_json::<Sample>(br#"{"priority": 1"#).unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        let s = parse_json::<Sample>(br#"{"priority": 8.0}"#).unwrap();
        assert_eq!(s.priority, Some(8), "an integral number is an integer");
        let e = parse_json::<Sample>(br#"{"priority": 8.5}"#).unwrap_err();
        assert_eq!(e.body.field.as_deref(), Some("priority"));
        let e = parse_json::<Sample>(b"{\"priority\": \xff}").unwrap_err();
        assert!(e.body.reason.contains("UTF-8"), "{}", e.body.reason);
        assert!(parse_json::<Sample>(b"").is_ok());
    }

    /// Issue 27, point 11: duplicate keys were last-wins, in every JSON body.
    #[test]
    fn a_key_named_twice_is_refused_naming_it_wherever_it_is() {
        for (text, field) in [
            (r#"{"priority": 1, "priority": 2}"#, "priority"),
            (r#"{"inner": {"n": 1, "n": 2}}"#, "inner.n"),
            (r#"{"k": {"k": 1, "k": 2}}"#, "k.k"),
            (
                r#"[{"a": 1}, {"b": {"c": [{"d": 1, "d": 1}]}}]"#,
                "[1].b.c[0].d",
            ),
            (
                r#"{"jsonrpc":"2.0","method":"rpc.methods","method":"node.pause","id":1}"#,
                "method",
            ),
        ] {
            let e = no_duplicate_keys(text).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{text}");
            assert_eq!(e.body.field.as_deref(), Some(field), "{text}");
            let key = field.rsplit('.').next().unwrap();
            assert!(
                e.body
                    .reason
                    .starts_with(&format!("duplicate key `{key}`: ")),
                "{}",
                e.body.reason
            );
        }
        let e = parse_json::<Sample>(br#"{"priority": 1, "priority": 2}"#).unwrap_err();
        assert_eq!(e.body.field.as_deref(), Some("priority"));
        // The same key in two objects, escapes, and bad syntax (left to the parser) pass.
        for ok in [
            r#"{"a": {"k": 1}, "b": {"k": 1}}"#,
            r#"{"k": 1, "\u006b2": 2}"#,
            "{not json",
        ] {
            assert!(no_duplicate_keys(ok).is_ok(), "{ok}");
        }
        assert!(no_duplicate_keys(r#"{"k": 1, "\u006b": 2}"#).is_err());
    }
}
