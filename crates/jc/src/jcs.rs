//! RFC 8785 (JCS) helpers: canonical bytes out, canonical-or-reject in.
//!
//! serde_json keeps the last of duplicate keys silently, so parsing goes through [`StrictValue`],
//! a visitor that refuses a repeated key before anything else looks at the document.

use std::fmt;

use serde::Serialize;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::error::{JcError, Result};

/// Canonical JSON bytes of any serializable value.
pub fn to_canonical<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    skillbox_jcs::to_vec(value).map_err(|e| JcError::Internal(format!("canonicalize: {e}")))
}

/// Canonical JSON bytes of a parsed value (no detour through serde).
pub fn value_canonical(value: &Value) -> Vec<u8> {
    skillbox_jcs::value_to_vec(value)
}

/// Parse JSON refusing duplicate keys (anywhere in the tree).
pub fn parse_strict(bytes: &[u8]) -> Result<Value> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = match StrictValue::deserialize(&mut de) {
        Ok(v) => v.0,
        Err(e) => {
            let msg = e.to_string();
            if let Some(rest) = msg.strip_prefix(DUP_PREFIX) {
                // serde_json appends " at line L column C"; the key is what sits before it.
                let key = rest
                    .rsplit_once(" at line ")
                    .map(|(k, _)| k)
                    .unwrap_or(rest);
                return Err(JcError::DuplicateKey {
                    key: key.to_owned(),
                });
            }
            return Err(JcError::ProgramJson(msg));
        }
    };
    de.end().map_err(|e| JcError::ProgramJson(e.to_string()))?;
    Ok(value)
}

/// Parse bytes that must already be canonical: duplicate keys and any difference from the
/// re-canonicalized form are refused. Returns the parsed value.
pub fn parse_canonical(bytes: &[u8]) -> Result<Value> {
    let value = parse_strict(bytes)?;
    check_same(bytes, &value_canonical(&value))?;
    Ok(value)
}

/// `Ok` when `bytes == canonical`, else the offset of the first difference.
pub fn check_same(bytes: &[u8], canonical: &[u8]) -> Result<()> {
    if bytes == canonical {
        return Ok(());
    }
    let offset = bytes
        .iter()
        .zip(canonical)
        .position(|(a, b)| a != b)
        .unwrap_or(bytes.len().min(canonical.len()));
    Err(JcError::NonCanonical { offset })
}

const DUP_PREFIX: &str = "duplicate key ";

/// A `serde_json::Value` whose deserializer refuses duplicate object keys.
pub struct StrictValue(pub Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> std::result::Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> std::result::Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> std::result::Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number is not finite"))
    }
    fn visit_str<E>(self, v: &str) -> std::result::Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> std::result::Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> std::result::Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> std::result::Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(StrictValue(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!("{DUP_PREFIX}{key}")));
            }
            let StrictValue(v) = map.next_value()?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(input: &str) -> Vec<u8> {
        let v = parse_strict(input.as_bytes()).expect("test input parses");
        to_canonical(&v).expect("canonicalizes")
    }

    /// RFC 8785 §3.2.2: whitespace, number and string serialization, literals.
    #[test]
    fn rfc8785_sample_structure() {
        let input = r#"{
  "numbers": [333333333.33333329, 1E30, 4.50,
              2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}"#;
        let expected = "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],\"string\":\"\u{20ac}$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}";
        assert_eq!(String::from_utf8(canon(input)).expect("utf-8"), expected);
    }

    /// RFC 8785 §3.2.3: property sorting by UTF-16 code units.
    #[test]
    fn rfc8785_sorting() {
        let input = r#"{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}"#;
        let expected = "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\"\u{1f600}\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}";
        assert_eq!(String::from_utf8(canon(input)).expect("utf-8"), expected);
    }

    /// RFC 8785 Appendix B: IEEE 754 doubles to ECMAScript number text.
    #[test]
    fn rfc8785_numbers() {
        let cases: &[(u64, &str)] = &[
            (0x0000000000000000, "0"),
            (0x8000000000000000, "0"),
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            (0x43143ff3c1cb0959, "1424953923781206.2"),
        ];
        for (bits, text) in cases {
            let f = f64::from_bits(*bits);
            let out = to_canonical(&f).expect("finite number");
            assert_eq!(
                String::from_utf8(out).expect("utf-8"),
                *text,
                "bits {bits:#018x}"
            );
        }
        // NaN and infinities have no JSON form: refused, never written.
        assert!(to_canonical(&f64::NAN).is_err());
        assert!(to_canonical(&f64::INFINITY).is_err());
    }

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        let err = parse_strict(br#"{"a":1,"b":{"c":1,"c":2}}"#).expect_err("dup");
        assert!(
            matches!(err, JcError::DuplicateKey { ref key } if key == "c"),
            "{err:?}"
        );
        let err = parse_strict(br#"{"a":1,"a":1}"#).expect_err("dup");
        assert!(
            matches!(err, JcError::DuplicateKey { ref key } if key == "a"),
            "{err:?}"
        );
    }

    #[test]
    fn non_canonical_is_refused_with_offset() {
        let err = parse_canonical(br#"{"b":1,"a":2}"#).expect_err("unsorted");
        assert!(
            matches!(err, JcError::NonCanonical { offset: 2 }),
            "{err:?}"
        );
        assert!(matches!(
            parse_canonical(br#"{"a": 2}"#),
            Err(JcError::NonCanonical { offset: 5 })
        ));
        assert!(matches!(
            parse_canonical(b"{\"a\":1.0}"),
            Err(JcError::NonCanonical { .. })
        ));
        assert!(parse_canonical(br#"{"a":2,"b":[1,"x",null]}"#).is_ok());
        assert!(matches!(
            parse_canonical(br#"{"a":2} x"#),
            Err(JcError::ProgramJson(_))
        ));
    }
}
