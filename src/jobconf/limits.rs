//! A command job's declared resource limits, `payload.limits` (`limits = { memory = "256MiB"
//! }`): what the node counts a run of it as costing when it decides whether the job fits the
//! budget. (Another job type's payload is its input: `limits` there is its own.)
//!
//! Invariant: opens nothing and reads no clock; a size is bytes as an integer or a number with
//! a unit (`B`, `KB`/`MB`/`GB` decimal, `KiB`/`MiB`/`GiB` binary, `K`/`M`/`G` binary as the
//! kernel writes them), and anything else is a problem naming the field.

use serde_json::{Map as JsonMap, Value as Json};

/// `payload.limits.memory` in bytes: `Ok(None)` when not declared, `Err` with the reason when
/// it is not a size.
pub fn memory_limit(payload: &JsonMap<String, Json>) -> Result<Option<u64>, String> {
    let Some(limits) = payload.get("limits") else {
        return Ok(None);
    };
    let Some(limits) = limits.as_object() else {
        return Err("payload.limits must be a table, e.g. { memory = \"256MiB\" }".into());
    };
    match limits.get("memory") {
        None => Ok(None),
        Some(v) => size(v).filter(|b| *b > 0).map(Some).ok_or_else(|| {
            format!("payload.limits.memory must be a size such as \"256MiB\" or bytes, got {v}")
        }),
    }
}

/// A size: bytes, or a number and a unit.
pub fn size(v: &Json) -> Option<u64> {
    if let Some(n) = v.as_u64() {
        return Some(n);
    }
    let text = v.as_str()?.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (num, unit) = text.split_at(split);
    let num: f64 = num.parse().ok()?;
    let mult: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "K" | "KiB" => 1024.0,
        "M" | "MiB" => 1024.0 * 1024.0,
        "G" | "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let bytes = num * mult;
    (bytes.is_finite() && bytes >= 0.0).then_some(bytes.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn of(v: Json) -> Result<Option<u64>, String> {
        memory_limit(v.as_object().unwrap())
    }

    #[test]
    fn declared_memory_limits_read_as_bytes() {
        assert_eq!(of(json!({})), Ok(None));
        assert_eq!(of(json!({"limits": {}})), Ok(None));
        assert_eq!(
            of(json!({"limits": {"memory": "256MiB"}})),
            Ok(Some(256 << 20))
        );
        assert_eq!(
            of(json!({"limits": {"memory": "90MB"}})),
            Ok(Some(90_000_000))
        );
        assert_eq!(
            of(json!({"limits": {"memory": "1.5G"}})),
            Ok(Some(1_610_612_736))
        );
        assert_eq!(of(json!({"limits": {"memory": 4096}})), Ok(Some(4096)));
        for bad in [
            json!("lots"),
            json!("12 parsecs"),
            json!(-1),
            json!(0),
            json!(true),
        ] {
            let e = of(json!({"limits": {"memory": bad}})).unwrap_err();
            assert!(e.starts_with("payload.limits.memory must be a size"), "{e}");
        }
        assert!(of(json!({"limits": "256MiB"})).is_err());
    }
}
