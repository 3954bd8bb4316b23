//! RFC 8785 (JCS) canonical JSON bytes: the form every signature, digest and hash chain of this
//! project is taken over.
//!
//! `serde_json_canonicalizer` is the reference. It writes each object's members into buffers of
//! their own and sorts them, which made canonical bytes about 5 % of each process's CPU under
//! load (issue 33). Here a value is written straight from a `serde_json::Value`: members sorted
//! by their UTF-16 code units (RFC 8785 §3.2.3), strings escaped as serde_json escapes them
//! (the reference's own escaping), integers written as integers. Only a number that is not a
//! safe integer (a float, or beyond ±2^53, where ECMAScript's number form differs) goes to the
//! reference, for the whole document. The property tests hold the two equal on any value.

use std::cmp::Ordering;
use std::fmt;

use serde::Serialize;
use serde_json::Value;

/// A value that has no canonical form (serde could not turn it into JSON), with serde's reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no canonical JSON: {}", self.0)
    }
}

impl std::error::Error for Error {}

/// The largest integer every JSON reader (an IEEE double) holds exactly: up to it, ECMAScript
/// writes an integer as its digits, as this writer does.
const SAFE: u64 = 1 << 53;

/// Canonical bytes of any serializable value: the reference's, also where it is odd (a bare
/// float that is not finite is an error, one inside a document is written `null`).
pub fn to_vec<T: Serialize>(value: &T) -> Result<Vec<u8>, Error> {
    let tree = serde_json::to_value(value).map_err(|e| Error(e.to_string()))?;
    let mut out = Vec::with_capacity(256);
    // A `null` in the tree may have been a NaN or an infinity: the reference, which refuses
    // those, writes any value that holds one.
    if write(&tree, &mut out, Nulls::Refer).is_some() {
        return Ok(out);
    }
    serde_json_canonicalizer::to_vec(value).map_err(|e| Error(e.to_string()))
}

/// Canonical text of any serializable value.
pub fn to_string<T: Serialize>(value: &T) -> Result<String, Error> {
    // Canonical bytes are serde_json's output: UTF-8 by construction.
    to_vec(value).and_then(|b| String::from_utf8(b).map_err(|e| Error(e.to_string())))
}

/// Canonical bytes of a JSON value.
pub fn value_to_vec(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    if write(value, &mut out, Nulls::Write).is_some() {
        return out;
    }
    // A float or an unsafe integer somewhere: the reference writes ECMAScript's number form.
    // A `Value` always serializes (its keys are strings, its numbers finite).
    serde_json_canonicalizer::to_vec(value).unwrap_or(out)
}

/// What a `null` means to [`write`].
#[derive(Clone, Copy, PartialEq)]
enum Nulls {
    /// A parsed value: a `null` is a `null`.
    Write,
    /// A value serde turned into a tree: a `null` may stand for a float with no JSON form.
    Refer,
}

/// `None` when the value needs the reference: a number in ECMAScript's form, or a `null` that
/// may not be one.
fn write(value: &Value, out: &mut Vec<u8>, nulls: Nulls) -> Option<()> {
    match value {
        Value::Null => {
            (nulls == Nulls::Write).then_some(())?;
            out.extend_from_slice(b"null");
        }
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                (u <= SAFE).then_some(())?;
                out.extend_from_slice(u.to_string().as_bytes());
            } else {
                let i = n.as_i64()?;
                (i.unsigned_abs() <= SAFE).then_some(())?;
                out.extend_from_slice(i.to_string().as_bytes());
            }
        }
        Value::String(s) => write_str(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(item, out, nulls)?;
            }
            out.push(b']');
        }
        Value::Object(members) => {
            let mut sorted: Vec<(&String, &Value)> = members.iter().collect();
            sorted.sort_unstable_by(|a, b| utf16_order(a.0, b.0));
            out.push(b'{');
            for (i, (key, item)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(key, out);
                out.push(b':');
                write(item, out, nulls)?;
            }
            out.push(b'}');
        }
    }
    Some(())
}

/// serde_json's string form: `"` and `\` escaped, control characters as `\b \t \n \f \r` or
/// `\u00xx`, everything else as it is — RFC 8785 §3.2.2.2, and the reference's own writer.
fn write_str(s: &str, out: &mut Vec<u8>) {
    // Writing a `&str` into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// Member names in the order of their UTF-16 code units (RFC 8785 §3.2.3). For names without
/// characters above U+FFFF this is the order of their bytes.
fn utf16_order(a: &str, b: &str) -> Ordering {
    if a.is_ascii() && b.is_ascii() {
        return a.as_bytes().cmp(b.as_bytes());
    }
    a.encode_utf16().cmp(b.encode_utf16())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn reference(v: &Value) -> Vec<u8> {
        serde_json_canonicalizer::to_vec(v).expect("a Value serializes")
    }

    fn any_value() -> impl Strategy<Value = Value> {
        let number = prop_oneof![
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-(SAFE as i64)..=SAFE as i64).prop_map(Value::from),
            any::<f64>().prop_map(Value::from), // NaN and infinities become null
            (-1e30f64..1e30).prop_map(Value::from),
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            number,
            any::<String>().prop_map(Value::String),
            "[a-zA-Z0-9\\\\\"\u{0}-\u{1f}\u{7f}\u{e000}-\u{ffff}\u{10000}-\u{10ffff}]{0,8}"
                .prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::vec(
                    (
                        prop_oneof![
                            any::<String>(),
                            "[a-z\u{e000}-\u{ffff}\u{10000}-\u{10ffff}]{0,4}"
                        ],
                        inner
                    ),
                    0..8
                )
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// The fast path and the reference write the same bytes for any JSON value.
        #[test]
        fn any_value_is_written_as_the_reference_writes_it(v in any_value()) {
            prop_assert_eq!(value_to_vec(&v), reference(&v));
        }

        /// Integers only (the fast path throughout): still the reference's bytes.
        #[test]
        fn safe_integers_take_the_fast_path_and_agree(
            ns in prop::collection::vec(-(SAFE as i64)..=SAFE as i64, 0..16)
        ) {
            let v = json!({"n": ns});
            let mut fast = Vec::new();
            prop_assert!(write(&v, &mut fast, Nulls::Refer).is_some());
            prop_assert_eq!(fast, reference(&v));
        }
    }

    #[test]
    fn members_sort_by_utf16_code_units_not_bytes() {
        // U+E000 is one UTF-16 unit (0xE000); U+10000 is a surrogate pair (0xD800 ...): UTF-16
        // puts U+10000 first, UTF-8 bytes would put U+E000 first.
        let v = json!({"\u{e000}": 1, "\u{10000}": 2, "a": 3});
        assert_eq!(
            value_to_vec(&v),
            "{\"a\":3,\"\u{10000}\":2,\"\u{e000}\":1}".as_bytes()
        );
        assert_eq!(value_to_vec(&v), reference(&v));
    }

    #[test]
    fn numbers_past_the_safe_range_take_the_reference_form() {
        for v in [
            json!(SAFE + 1),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(1.5),
            json!(1e21),
        ] {
            let mut fast = Vec::new();
            assert!(
                write(&v, &mut fast, Nulls::Write).is_none(),
                "{v} must not take the fast path"
            );
            assert_eq!(value_to_vec(&v), reference(&v));
        }
        assert_eq!(value_to_vec(&json!(SAFE)), b"9007199254740992");
        assert_eq!(value_to_vec(&json!(1e21)), b"1e+21");
    }

    #[derive(Serialize)]
    struct Typed {
        zeta: u32,
        alpha: Vec<&'static str>,
        mid: Option<i64>,
        #[serde(rename = "Ünïcode")]
        unicode: String,
    }

    #[test]
    fn a_typed_value_is_written_as_the_reference_writes_it() {
        let t = Typed {
            zeta: 7,
            alpha: vec!["x\n\u{1}\"\\", "é"],
            mid: None,
            unicode: "\u{2028}".into(),
        };
        let reference = serde_json_canonicalizer::to_vec(&t).expect("serializes");
        assert_eq!(to_vec(&t).expect("serializes"), reference);
        assert_eq!(
            to_string(&t).expect("serializes").as_bytes(),
            reference.as_slice()
        );
    }

    #[test]
    fn a_float_with_no_json_form_is_refused_and_a_null_is_still_written() {
        for f in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(to_vec(&f).is_err(), "{f} has no JSON form");
            // Inside a document the reference writes it as `null`; so does this writer.
            let nested = vec![Some(1.0), Some(f)];
            assert_eq!(
                to_vec(&nested).expect("the reference writes it"),
                serde_json_canonicalizer::to_vec(&nested).expect("written")
            );
        }
        let with_null = Typed {
            zeta: 1,
            alpha: vec![],
            mid: None,
            unicode: String::new(),
        };
        let bytes = to_vec(&with_null).expect("a None is a null");
        assert_eq!(
            bytes,
            b"{\"alpha\":[],\"mid\":null,\"zeta\":1,\"\xc3\x9cn\xc3\xafcode\":\"\"}".to_vec()
        );
    }

    #[test]
    fn a_value_serde_refuses_is_an_error_naming_why() {
        let mut bad = std::collections::BTreeMap::new();
        bad.insert(vec![1u8], 1);
        let e = to_vec(&bad).expect_err("a map with sequence keys has no JSON form");
        assert!(e.to_string().starts_with("no canonical JSON: "), "{e}");
    }
}
