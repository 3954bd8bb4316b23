//! Fixed-length byte values written as hex in policy files (`measurement = "7a1e…"`).

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// `N` bytes, (de)serialized as exactly `2N` hex digits (either case). Anything else is an error
/// naming the expected length, so a truncated pin in a config file cannot load.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hex<const N: usize>(pub [u8; N]);

impl<const N: usize> Hex<N> {
    pub fn parse(text: &str) -> Option<Hex<N>> {
        let text = text.trim();
        if text.len() != 2 * N {
            return None;
        }
        let mut out = [0u8; N];
        hex::decode_to_slice(text, &mut out).ok()?;
        Some(Hex(out))
    }

    pub fn as_bytes(&self) -> &[u8; N] {
        &self.0
    }
}

impl<const N: usize> fmt::Debug for Hex<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl<const N: usize> fmt::Display for Hex<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl<const N: usize> From<[u8; N]> for Hex<N> {
    fn from(value: [u8; N]) -> Self {
        Hex(value)
    }
}

impl<const N: usize> Serialize for Hex<N> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(self.0))
    }
}

impl<'de, const N: usize> Deserialize<'de> for Hex<N> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<const N: usize>;
        impl<const N: usize> Visitor<'_> for V<N> {
            type Value = Hex<N>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{} hex digits ({} bytes)", 2 * N, N)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Hex<N>, E> {
                Hex::parse(v).ok_or_else(|| E::invalid_value(de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_str(V::<N>)
    }
}

/// Variable-length bytes as hex (Nitro user data, nonces).
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct HexBytes(pub Vec<u8>);

impl fmt::Debug for HexBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(&self.0))
    }
}

impl Serialize for HexBytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for HexBytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        hex::decode(text.trim())
            .map(HexBytes)
            .map_err(|_| de::Error::custom("expected hex digits"))
    }
}

/// Serde for `Vec<u8>` fields of evidence carried in JSON: standard base64.
pub mod b64 {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer, de};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        STANDARD
            .decode(text.as_bytes())
            .map_err(|_| de::Error::custom("expected standard base64"))
    }

    /// A list of base64 strings.
    pub mod list {
        use super::*;
        use serde::ser::SerializeSeq;

        pub fn serialize<S: Serializer>(v: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
            let mut seq = s.serialize_seq(Some(v.len()))?;
            for item in v {
                seq.serialize_element(&STANDARD.encode(item))?;
            }
            seq.end()
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<u8>>, D::Error> {
            let items = Vec::<String>::deserialize(d)?;
            items
                .iter()
                .map(|t| {
                    STANDARD
                        .decode(t.as_bytes())
                        .map_err(|_| de::Error::custom("expected standard base64"))
                })
                .collect()
        }
    }
}
