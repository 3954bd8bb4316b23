//! AWS Nitro Enclaves attestation documents (COSE_Sign1, ES384).
//!
//! Checked, in this order: the COSE_Sign1 structure (untagged or tag 18) with the protected
//! header exactly `{1: -35}` (the bytes `a1 01 38 22`) and an empty unprotected header; the
//! payload, a CBOR map parsed by us (definite **and** indefinite lengths accepted, duplicate
//! keys and unknown keys refused, every field's type and size checked: `user_data` and `nonce`
//! ≤ 512 bytes, `public_key` ≤ 1024); the chain `certificate` ← `cabundle[1..]` ← the AWS Nitro
//! root **pinned by fingerprint** (`cabundle[0]` must be that root; its bytes are the
//! attacker's otherwise) at the document's own timestamp; the document's age against `now`
//! (the freshness bound); the ES384 signature with the leaf's key; PCR0 present and not all
//! zero (an all-zero PCR0 is a debug enclave); PCR0–2 (and PCR8 when pinned) against the pins;
//! user data, nonce and public key against what the caller expects; the module id allow-list.
//!
//! Not checked: PCR3/4 (IAM role, instance id) and PCRs above 8 are reported, not pinned. Low-S
//! is not enforced (AWS does not produce normalized signatures).

use coset::cbor::Value;
use coset::{CborSerializable as _, TaggedCborSerializable as _};
use serde::{Deserialize, Serialize};

use crate::certs::{self, Parsed, PinnedRoot};
use crate::hexval::{Hex, b64};
pub use crate::verify;
use crate::{ExpectedField as _, Field, Platform, Refusal, Verified, hex32, input};

const AWS_ROOT_PEM: &[u8] = include_bytes!("../roots/aws-nitro-root-g1.pem");
/// SHA-256 of the AWS Nitro Enclaves root G1 certificate (DER).
pub const AWS_ROOT_FINGERPRINT: [u8; 32] =
    hex32("641a0321a3e244efe456463195d606317ed7cdcc3c1756e09893f3c68f79bb5b");

/// The protected header every Nitro document carries: `{1: -35}` (alg: ES384).
const PROTECTED_ES384: [u8; 4] = [0xa1, 0x01, 0x38, 0x22];

pub const MAX_USER_DATA: usize = 512;
pub const MAX_NONCE: usize = 512;
pub const MAX_PUBLIC_KEY: usize = 1024;
const MAX_CABUNDLE: usize = 8;
const MAX_CERT: usize = 8 * 1024;

/// What an enclave serves: the COSE_Sign1 document as the NSM returned it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    #[serde(with = "b64")]
    pub document: Vec<u8>,
}

impl Evidence {
    /// Raw COSE bytes (starting with the CBOR array or tag head) or their base64. Returns the
    /// evidence and how many bytes after the COSE item were ignored: tools store documents
    /// with wrappers around them, and nothing outside the signed item counts. (The wire form,
    /// [`Evidence::document`], is strict: [`parse`] refuses any trailing byte.)
    pub fn from_file(bytes: &[u8]) -> Result<(Evidence, usize), Refusal> {
        let decoded = input::raw_or_base64(
            bytes,
            |b| matches!(b.first(), Some(0x84) | Some(0x9f) | Some(0xd2)),
            "Nitro document (neither COSE nor base64)",
        )?;
        let mut rest = decoded.as_slice();
        let _: Value = coset::cbor::de::from_reader_with_recursion_limit(&mut rest, 16)
            .map_err(|_| Refusal::Malformed("COSE_Sign1 structure"))?;
        let trailing = rest.len();
        let mut document = decoded;
        document.truncate(document.len() - trailing);
        Ok((Evidence { document }, trailing))
    }
}

/// What the verifier expects in this document.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expected {
    /// `user_data`: for a skillbox run, the 64-byte SHA-512 of the statement.
    pub user_data: Option<Vec<u8>>,
    pub nonce: Option<Vec<u8>>,
    pub public_key: Option<Vec<u8>>,
}

/// One accepted enclave image: PCR0–2 always, PCR8 (the signing certificate) when set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PcrPins {
    pub pcr0: Hex<48>,
    pub pcr1: Hex<48>,
    pub pcr2: Hex<48>,
    #[serde(default)]
    pub pcr8: Option<Hex<48>>,
}

/// What a node pins for a Nitro box.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    #[serde(deserialize_with = "crate::nonempty")]
    pub accepted: Vec<PcrPins>,
    /// How old a document may be at `now` (default 5 minutes).
    #[serde(default = "five_minutes")]
    pub max_age_ms: u64,
    /// How far in the future a document's timestamp may be (default 60 s).
    #[serde(default = "one_minute")]
    pub max_clock_skew_ms: u64,
    /// Accepted module ids (`i-…-enc…`); empty = any.
    #[serde(default)]
    pub module_ids: Vec<String>,
}

fn five_minutes() -> u64 {
    5 * 60 * 1000
}

fn one_minute() -> u64 {
    60 * 1000
}

impl Policy {
    /// Pins no PCRs (they are reported); PCR0 must still be present and non-zero.
    pub fn unpinned() -> Policy {
        Policy {
            accepted: Vec::new(),
            max_age_ms: five_minutes(),
            max_clock_skew_ms: one_minute(),
            module_ids: Vec::new(),
        }
    }

    /// Accept exactly these PCR sets; age, skew and module ids at their defaults.
    pub fn pinned(accepted: Vec<PcrPins>) -> Policy {
        Policy {
            accepted,
            ..Policy::unpinned()
        }
    }
}

/// The attestation document's payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Document {
    pub module_id: String,
    pub timestamp_ms: u64,
    /// (index, value), ascending, no duplicates.
    pub pcrs: Vec<(u8, Vec<u8>)>,
    pub certificate: Vec<u8>,
    pub cabundle: Vec<Vec<u8>>,
    pub public_key: Option<Vec<u8>>,
    pub user_data: Option<Vec<u8>>,
    pub nonce: Option<Vec<u8>>,
}

impl Document {
    pub fn pcr(&self, index: u8) -> Option<&[u8]> {
        self.pcrs
            .iter()
            .find(|(i, _)| *i == index)
            .map(|(_, v)| v.as_slice())
    }
}

/// A parsed COSE_Sign1: the payload and what the signature covers.
#[derive(Clone, Debug)]
pub struct Signed {
    pub document: Document,
    tbs: Vec<u8>,
    signature: Vec<u8>,
}

/// Parse the COSE_Sign1 envelope and its payload. No signature or chain check here.
pub fn parse(bytes: &[u8]) -> Result<Signed, Refusal> {
    if bytes.len() > input::MAX_INPUT {
        return Err(Refusal::TooLarge("Nitro document"));
    }
    let sign1 = if bytes.first() == Some(&0xd2) {
        coset::CoseSign1::from_tagged_slice(bytes)
    } else {
        coset::CoseSign1::from_slice(bytes)
    }
    .map_err(|_| Refusal::Malformed("COSE_Sign1 structure"))?;
    if sign1.protected.original_data.as_deref() != Some(&PROTECTED_ES384[..]) {
        return Err(Refusal::Unsupported(
            "COSE protected header (must be exactly {1: -35})",
        ));
    }
    if !sign1.unprotected.is_empty() {
        return Err(Refusal::Malformed("COSE unprotected header is not empty"));
    }
    let payload = sign1
        .payload
        .as_deref()
        .ok_or(Refusal::Malformed("COSE_Sign1 without a payload"))?;
    let document = parse_payload(payload)?;
    let tbs = sign1.tbs_data(b"");
    Ok(Signed {
        document,
        tbs,
        signature: sign1.signature,
    })
}

/// Decode exactly one CBOR item (indefinite lengths allowed), nothing after it.
fn decode_one(bytes: &[u8]) -> Result<Value, Refusal> {
    let mut rest = bytes;
    let v: Value = coset::cbor::de::from_reader_with_recursion_limit(&mut rest, 16)
        .map_err(|_| Refusal::Malformed("attestation document CBOR"))?;
    if !rest.is_empty() {
        return Err(Refusal::Malformed("bytes after the attestation document"));
    }
    Ok(v)
}

/// A CBOR map's entries, refusing duplicate keys (ciborium keeps them, in order). Keys are
/// compared by their encoding in one hash set, linear in the map: comparing each key with every
/// earlier one was quadratic, and a 256 KiB document holds ~64 k keys, which cost the node
/// seconds of CPU before any signature was checked.
fn map_entries(v: Value, what: &'static str) -> Result<Vec<(Value, Value)>, Refusal> {
    let Value::Map(entries) = v else {
        return Err(Refusal::Malformed(what));
    };
    let mut seen = std::collections::HashSet::with_capacity(entries.len());
    for (k, _) in &entries {
        let mut encoded = Vec::new();
        coset::cbor::ser::into_writer(k, &mut encoded)
            .map_err(|_| Refusal::Malformed("attestation document CBOR"))?;
        if !seen.insert(encoded) {
            return Err(Refusal::Malformed(
                "duplicate key in the attestation document",
            ));
        }
    }
    Ok(entries)
}

fn bytes_field(v: Value, what: &'static str) -> Result<Vec<u8>, Refusal> {
    match v {
        Value::Bytes(b) => Ok(b),
        _ => Err(Refusal::Malformed(what)),
    }
}

fn optional_bytes(v: Value, max: usize, what: &'static str) -> Result<Option<Vec<u8>>, Refusal> {
    match v {
        Value::Null => Ok(None),
        Value::Bytes(b) if b.len() <= max => Ok(Some(b)),
        Value::Bytes(_) => Err(Refusal::TooLarge(what)),
        _ => Err(Refusal::Malformed(what)),
    }
}

fn parse_payload(payload: &[u8]) -> Result<Document, Refusal> {
    let entries = map_entries(decode_one(payload)?, "attestation document is not a map")?;
    let mut module_id = None;
    let mut digest = None;
    let mut timestamp = None;
    let mut pcrs = None;
    let mut certificate = None;
    let mut cabundle = None;
    let mut public_key = None;
    let mut user_data = None;
    let mut nonce = None;
    for (k, v) in entries {
        let Value::Text(key) = k else {
            return Err(Refusal::Malformed("attestation document key is not text"));
        };
        match key.as_str() {
            "module_id" => match v {
                Value::Text(t) if !t.is_empty() && t.len() <= 128 => module_id = Some(t),
                _ => return Err(Refusal::Malformed("module_id")),
            },
            "digest" => match v {
                Value::Text(t) => digest = Some(t),
                _ => return Err(Refusal::Malformed("digest")),
            },
            "timestamp" => {
                let n = match v {
                    Value::Integer(i) => u64::try_from(i128::from(i)).ok(),
                    _ => None,
                };
                timestamp = Some(n.ok_or(Refusal::Malformed("timestamp"))?);
            }
            "pcrs" => pcrs = Some(parse_pcrs(v)?),
            "certificate" => {
                let der = bytes_field(v, "certificate")?;
                if der.len() > MAX_CERT {
                    return Err(Refusal::TooLarge("certificate"));
                }
                certificate = Some(der);
            }
            "cabundle" => {
                let Value::Array(items) = v else {
                    return Err(Refusal::Malformed("cabundle"));
                };
                if items.is_empty() || items.len() > MAX_CABUNDLE {
                    return Err(Refusal::Malformed("cabundle length"));
                }
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    let der = bytes_field(item, "cabundle entry")?;
                    if der.len() > MAX_CERT {
                        return Err(Refusal::TooLarge("cabundle entry"));
                    }
                    out.push(der);
                }
                cabundle = Some(out);
            }
            "public_key" => public_key = optional_bytes(v, MAX_PUBLIC_KEY, "public_key")?,
            "user_data" => user_data = optional_bytes(v, MAX_USER_DATA, "user_data")?,
            "nonce" => nonce = optional_bytes(v, MAX_NONCE, "nonce")?,
            _ => {
                return Err(Refusal::Malformed(
                    "unknown field in the attestation document",
                ));
            }
        }
    }
    if digest.as_deref() != Some("SHA384") {
        return Err(Refusal::Unsupported("PCR digest (must be SHA384)"));
    }
    let pcrs: Vec<(u8, Vec<u8>)> = pcrs.ok_or(Refusal::Malformed("pcrs missing"))?;
    // A document without PCR0 is not a Nitro document: refused, never skipped.
    if !pcrs.iter().any(|(i, _)| *i == 0) {
        return Err(Refusal::Malformed("PCR0 missing"));
    }
    Ok(Document {
        module_id: module_id.ok_or(Refusal::Malformed("module_id missing"))?,
        timestamp_ms: timestamp.ok_or(Refusal::Malformed("timestamp missing"))?,
        pcrs,
        certificate: certificate.ok_or(Refusal::Malformed("certificate missing"))?,
        cabundle: cabundle.ok_or(Refusal::Malformed("cabundle missing"))?,
        public_key,
        user_data,
        nonce,
    })
}

fn parse_pcrs(v: Value) -> Result<Vec<(u8, Vec<u8>)>, Refusal> {
    let entries = map_entries(v, "pcrs is not a map")?;
    if entries.is_empty() || entries.len() > 32 {
        return Err(Refusal::Malformed("pcrs count"));
    }
    let mut out = Vec::with_capacity(entries.len());
    for (k, v) in entries {
        let index = match k {
            Value::Integer(i) => u8::try_from(i128::from(i)).ok().filter(|i| *i < 32),
            _ => None,
        }
        .ok_or(Refusal::Malformed("PCR index"))?;
        let value = bytes_field(v, "PCR value")?;
        if value.len() != 48 {
            return Err(Refusal::Malformed("PCR length (SHA-384 is 48 bytes)"));
        }
        out.push((index, value));
    }
    out.sort_by_key(|(i, _)| *i);
    Ok(out)
}

/// A leaf and its path to the pinned root, signatures verified (validity is per call, at the
/// document's timestamp).
pub struct VerifiedChain {
    leaf_key: p384::ecdsa::VerifyingKey,
    certs: Vec<Parsed>,
}

fn verify_chain(root: &PinnedRoot, doc: &Document) -> Result<VerifiedChain, Refusal> {
    if crate::fingerprint(&doc.cabundle[0]) != root.fingerprint {
        return Err(Refusal::ForeignRoot);
    }
    let leaf = Parsed::from_der(&doc.certificate, "Nitro leaf certificate")?;
    let inter: Vec<Parsed> = doc.cabundle[1..]
        .iter()
        .map(|d| Parsed::from_der(d, "Nitro cabundle certificate"))
        .collect::<Result<_, _>>()?;
    // The caller then checks the document's own timestamp against every window.
    let (leaf_key, certs) = root.verify_p384_path(&leaf, &inter)?;
    Ok(VerifiedChain { leaf_key, certs })
}

/// A verifier for one policy: the root parsed once, verified chains cached (an enclave's leaf
/// lives a few hours and signs every document it makes meanwhile).
pub type Verifier = crate::Verifier<Evidence>;

const PCR_NAMES: [&str; 32] = [
    "pcr0", "pcr1", "pcr2", "pcr3", "pcr4", "pcr5", "pcr6", "pcr7", "pcr8", "pcr9", "pcr10",
    "pcr11", "pcr12", "pcr13", "pcr14", "pcr15", "pcr16", "pcr17", "pcr18", "pcr19", "pcr20",
    "pcr21", "pcr22", "pcr23", "pcr24", "pcr25", "pcr26", "pcr27", "pcr28", "pcr29", "pcr30",
    "pcr31",
];

impl Verifier {
    /// A verifier that pins `root_der` (a self-signed CA) instead of the AWS root: for a test
    /// whose NSM double signs with a CA of its own. Compiled only with the `test-roots` feature.
    #[cfg(feature = "test-roots")]
    pub fn with_test_root(policy: Policy, root_der: &[u8]) -> Result<Verifier, Refusal> {
        let root = PinnedRoot {
            parsed: Parsed::from_der(root_der, "test root")?,
            fingerprint: crate::fingerprint(root_der),
        };
        Ok(Verifier::with_root(policy, root))
    }
}

impl crate::PlatformEvidence for Evidence {
    type Expected = Expected;
    type Policy = Policy;
    type Pinned = PinnedRoot;
    type Chain = VerifiedChain;

    /// The AWS Nitro Enclaves root.
    fn pinned() -> Result<PinnedRoot, Refusal> {
        PinnedRoot::load(AWS_ROOT_PEM, AWS_ROOT_FINGERPRINT, "pinned AWS root")
    }

    fn check(&self, on: &Verifier, expected: &Expected, now_ms: u64) -> Result<Verified, Refusal> {
        let policy = on.policy();
        let signed = parse(&self.document)?;
        let doc = &signed.document;

        let parts =
            std::iter::once(doc.certificate.as_slice()).chain(doc.cabundle.iter().map(|c| &c[..]));
        let chain = on.chain(parts, |root| verify_chain(root, doc))?;
        // The leaf lives hours: it must have been valid when the document was made, and the
        // document must be recent.
        certs::check_validity(&chain.certs, doc.timestamp_ms)?;
        if doc.timestamp_ms > now_ms.saturating_add(policy.max_clock_skew_ms) {
            return Err(Refusal::FromFuture);
        }
        if now_ms.saturating_sub(doc.timestamp_ms) > policy.max_age_ms {
            return Err(Refusal::Stale);
        }
        certs::verify_p384_raw(
            &chain.leaf_key,
            &signed.tbs,
            &signed.signature,
            "COSE_Sign1 signature",
        )?;

        // Authenticated from here.
        let pcr0 = doc.pcr(0).ok_or(Refusal::Malformed("PCR0 missing"))?;
        // An all-zero PCR0 is what the NSM reports for an enclave started in debug mode.
        if pcr0.iter().all(|&b| b == 0) {
            return Err(Refusal::DebugEnabled(
                "all-zero PCR0 (a debug-mode enclave)",
            ));
        }
        let pinned = !policy.accepted.is_empty();
        if pinned {
            check_pcrs(doc, &policy.accepted)?;
        }
        expected
            .user_data
            .check(doc.user_data.as_ref(), Refusal::ReportDataMismatch)?;
        expected
            .nonce
            .check(doc.nonce.as_ref(), Refusal::NonceMismatch)?;
        expected
            .public_key
            .check(doc.public_key.as_ref(), Refusal::PublicKeyMismatch)?;
        if !crate::admits(&policy.module_ids, |m| *m == doc.module_id) {
            return Err(Refusal::InstanceNotAllowed);
        }

        let (valid_from_ms, valid_until_ms) = certs::window(&chain.certs);
        // The module id is an identifier; anything else is shown as hex.
        let module_id = if doc
            .module_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            doc.module_id.clone()
        } else {
            hex::encode(doc.module_id.as_bytes())
        };
        let mut attributes = vec![
            Field::new("module_id", module_id.clone()),
            Field::new("timestamp_ms", doc.timestamp_ms.to_string()),
            Field::new("digest", "SHA384"),
            Field::new("debug", "false"),
        ];
        if let Some(pk) = &doc.public_key {
            attributes.push(Field::new("public_key", hex::encode(pk)));
        }
        attributes.push(Field::new(
            "public_key_checked",
            expected.public_key.is_some().to_string(),
        ));
        Ok(Verified {
            platform: Platform::Nitro,
            measurement: hex::encode(pcr0),
            measurements: doc
                .pcrs
                .iter()
                .map(|(i, v)| Field::new(PCR_NAMES[usize::from(*i)], hex::encode(v)))
                .collect(),
            measurements_pinned: pinned,
            report_data: doc.user_data.as_ref().map(hex::encode),
            report_data_checked: expected.user_data.is_some(),
            nonce: doc.nonce.as_ref().map(hex::encode),
            nonce_checked: expected.nonce.is_some(),
            attributes,
            tcb_status: None,
            instance_id: Some(module_id),
            valid_from_ms,
            valid_until_ms,
            verified_at_ms: now_ms,
        })
    }
}

fn check_pcrs(doc: &Document, accepted: &[PcrPins]) -> Result<(), Refusal> {
    let mut first_miss = None;
    for a in accepted {
        let mut wants = vec![
            (0u8, &a.pcr0, "PCR0"),
            (1, &a.pcr1, "PCR1"),
            (2, &a.pcr2, "PCR2"),
        ];
        if let Some(p8) = &a.pcr8 {
            wants.push((8, p8, "PCR8"));
        }
        let miss = wants
            .into_iter()
            .find(|(i, want, _)| doc.pcr(*i) != Some(&want.0[..]))
            .map(|(_, _, name)| name);
        match miss {
            None => return Ok(()),
            Some(name) => {
                first_miss.get_or_insert(name);
            }
        }
    }
    Err(Refusal::MeasurementNotAllowed(first_miss.unwrap_or("PCR0")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A document of the most keys its size cap holds: a duplicate as the last key is found,
    /// and as many distinct keys pass, in one pass over the map (each key with every earlier
    /// one took ~2·10⁹ comparisons here).
    #[test]
    fn a_map_of_many_keys_is_checked_in_one_pass() {
        let n: u32 = 60_000;
        let mut keys: Vec<(Value, Value)> = (0..n)
            .map(|i| (Value::Text(format!("k{i}")), Value::Null))
            .collect();
        let distinct = map_entries(Value::Map(keys.clone()), "map").expect("distinct keys");
        assert_eq!(distinct.len(), n as usize);
        keys.push((Value::Text("k0".into()), Value::Null));
        assert_eq!(
            map_entries(Value::Map(keys), "map").unwrap_err(),
            Refusal::Malformed("duplicate key in the attestation document")
        );
        // Equal keys of any kind are one key; a text and a byte string of the same bytes two.
        let twice = |k: Value| Value::Map(vec![(k.clone(), Value::Null), (k, Value::Null)]);
        for k in [Value::Integer(3.into()), Value::Bytes(vec![1, 2])] {
            assert!(map_entries(twice(k), "map").is_err());
        }
        let text_and_bytes = Value::Map(vec![
            (Value::Text("a".into()), Value::Null),
            (Value::Bytes(b"a".to_vec()), Value::Null),
        ]);
        assert!(map_entries(text_and_bytes, "map").is_ok());
    }

    #[test]
    fn duplicate_keys_are_refused() {
        // {"digest": "SHA384", "digest": "SHA384"}
        let mut m = vec![0xa2];
        for _ in 0..2 {
            m.push(0x66);
            m.extend_from_slice(b"digest");
            m.push(0x66);
            m.extend_from_slice(b"SHA384");
        }
        assert_eq!(
            parse_payload(&m),
            Err(Refusal::Malformed(
                "duplicate key in the attestation document"
            ))
        );
    }

    #[test]
    fn trailing_bytes_are_refused() {
        assert!(parse_payload(&[0xa0, 0x00]).is_err());
        assert!(parse_payload(&[0xbf, 0xff]).is_err()); // empty: fields missing
    }
}
