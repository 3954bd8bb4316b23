//! Hardware attestation verifiers for skillbox boxes: AMD SEV-SNP, Intel TDX, AWS Nitro
//! Enclaves and NVIDIA Hopper GPUs (design §8).
//!
//! The crate is **pure**: no files, no network, no clock. Evidence, certificates and collateral
//! come in as bytes; `now_ms` (Unix milliseconds) is always a parameter; the vendor roots are
//! compiled in and pinned by SHA-256 fingerprint (a chain that verifies to any other root,
//! however well-formed, is refused with `foreign_root`). It depends on none of skillbox's crates.
//!
//! Each platform module has the same shape:
//!
//! - `Evidence` — what the box serves (serde: base64 fields, so it can travel inside
//!   `skillbox_jc::attest::Attestation::evidence`), with `from_files` for the files people have;
//! - `Expected` — what the verifying node computed for this run (report data = SHA-512 of the
//!   statement, a nonce, HOST_DATA / MRCONFIGID);
//! - `Policy` — what the node's config pins (serde, `deny_unknown_fields`, so it loads from TOML;
//!   deserializing one requires at least one pinned measurement and, for SEV-SNP and TDX, a
//!   TCB floor (`min_tcb`, `min_tcb_eval_data_number`: the box operator chooses firmware and
//!   collateral, so without a floor any generation the vendor still signs passes) — the only
//!   unpinned policy is `Policy::unpinned()`, made in code, which the `skillbox attestation
//!   verify` CLI uses);
//! - `verify(&Evidence, &Expected, &Policy, now_ms) -> Result<Verified, Refusal>` — the cold
//!   path, parsing everything; and `Verifier::new(policy)` whose `verify(&evidence, &expected,
//!   now_ms)` caches verified certificate chains (bounded, keyed by the chain's bytes; validity
//!   at `now` is still checked on every call).
//!
//! Both are written once, here: [`verify`] and [`Verifier`], generic over the platform's
//! `Evidence`, which implements [`PlatformEvidence`] (its pinned root and its checks); a module's
//! `Verifier` is `Verifier<Evidence>` and its `verify` this crate's.
//!
//! Every refusal is a [`Refusal`] with a stable [`Refusal::code`] and a fixed message: nothing
//! from the evidence is echoed except short hex identifiers in [`Verified`].
//!
//! # Using it behind `skillbox_jc::attest::Verifier`
//!
//! The jc adapter (one per platform, held for the node's life) should:
//!
//! 1. keep one `<platform>::Verifier` built from the `[[boxes.accept]]` entry's policy (refuse a
//!    config whose policy pins nothing: `Policy` deserialization already does);
//! 2. in `verify_evidence(attestation, statement, report_data)`: decode `attestation.evidence`
//!    with `serde_json::from_value::<<platform>::Evidence>` (a failure is evidence refusal), build
//!    `Expected` with `report_data` (SEV-SNP/TDX report data, Nitro `user_data`; for NVIDIA the
//!    GPU evidence's requester nonce is the node's nonce and the GPU evidence hash is bound into
//!    the CPU statement), plus HOST_DATA / MRCONFIGID when the box's configuration hash is
//!    pinned;
//! 3. call `verifier.verify(&evidence, &expected, now_ms)`, map `Err(refusal)` to its
//!    `refusal.code()` (the closed code that crosses node boundaries) and, on success, return
//!    `verified.measurement` (and keep `verified.platform`, `instance_id`, `tcb_status` for
//!    receipts and `call show`).
//!
//! The adapter must pass `now_ms` from its own clock, never from the evidence.

mod certs;
pub mod hexval;
pub mod input;
pub mod nitro;
pub mod nvidia;
mod refusal;
pub mod release_log;
pub mod snp;
pub mod tdx;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use certs::fingerprint;
pub use hexval::{Hex, HexBytes};
pub use refusal::Refusal;

/// The hardware platforms this crate verifies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Platform {
    #[serde(rename = "sev-snp")]
    SevSnp,
    #[serde(rename = "tdx")]
    Tdx,
    #[serde(rename = "nitro")]
    Nitro,
    #[serde(rename = "nvidia")]
    Nvidia,
}

impl Platform {
    pub const ALL: [Platform; 4] = [
        Platform::SevSnp,
        Platform::Tdx,
        Platform::Nitro,
        Platform::Nvidia,
    ];

    /// The name used in programs, configs and the CLI.
    pub fn as_str(&self) -> &'static str {
        match self {
            Platform::SevSnp => "sev-snp",
            Platform::Tdx => "tdx",
            Platform::Nitro => "nitro",
            Platform::Nvidia => "nvidia",
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Platform {
    type Err = Refusal;
    fn from_str(s: &str) -> Result<Platform, Refusal> {
        Platform::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or(Refusal::Unsupported("platform name"))
    }
}

/// One named value in a verification result. Names are ours; values are hex, numbers or short
/// identifiers this crate formatted (never free text from the evidence).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Field {
    pub name: &'static str,
    pub value: String,
}

impl Field {
    pub fn new(name: &'static str, value: impl Into<String>) -> Field {
        Field {
            name,
            value: value.into(),
        }
    }
}

/// What a successful verification vouches for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verified {
    pub platform: Platform,
    /// The primary measurement, hex: SEV-SNP MEASUREMENT, TDX MRTD, Nitro PCR0, NVIDIA the
    /// SHA-384 of the measurement record. What a program's box entry names.
    pub measurement: String,
    /// Every measurement the evidence carries (SNP: MEASUREMENT; TDX: MRTD, RTMR0–3,
    /// MRCONFIGID, MROWNER, MROWNERCONFIG; Nitro: each PCR; NVIDIA: each measurement block).
    pub measurements: Vec<Field>,
    /// Whether the measurements were compared against pinned values (false only under
    /// `Policy::unpinned()`).
    pub measurements_pinned: bool,
    /// SEV-SNP/TDX report data, Nitro user data: hex.
    pub report_data: Option<String>,
    /// Whether `report_data` was compared with an expected value.
    pub report_data_checked: bool,
    /// Nitro nonce, NVIDIA requester nonce: hex.
    pub nonce: Option<String>,
    pub nonce_checked: bool,
    /// Policy bits, attributes, versions: what the platform says about how it runs.
    pub attributes: Vec<Field>,
    /// TCB verdict: TDX's status (`UpToDate`…), SEV-SNP's reported TCB, none for Nitro/NVIDIA.
    pub tcb_status: Option<String>,
    /// SEV-SNP CHIP_ID, TDX PCK PPID, Nitro module id, NVIDIA device serial.
    pub instance_id: Option<String>,
    /// The window in which the certificates (and collateral) that vouched are all valid, ms.
    pub valid_from_ms: u64,
    pub valid_until_ms: u64,
    /// The `now_ms` this verification used (a Nitro chain is checked at the document's own
    /// timestamp, which is in `attributes` as `timestamp_ms`).
    pub verified_at_ms: u64,
}

impl Verified {
    /// The value of a named measurement.
    pub fn measurement_named(&self, name: &str) -> Option<&str> {
        self.measurements
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.value.as_str())
    }

    /// The value of a named attribute.
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.value.as_str())
    }
}

/// 32 bytes from 64 hex digits at compile time (pins written the way vendors publish them).
pub(crate) const fn hex32(s: &str) -> [u8; 32] {
    let b = s.as_bytes();
    assert!(b.len() == 64);
    let mut out = [0u8; 32];
    let mut i = 0;
    while i < 32 {
        out[i] = (nibble(b[2 * i]) << 4) | nibble(b[2 * i + 1]);
        i += 1;
    }
    out
}

const fn nibble(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => panic!("not a hex digit"),
    }
}

/// One platform's evidence and how it is checked: what [`Verifier`] needs of each platform
/// module. `Pinned` is what the verifier trusts (the vendor root), loaded and checked against its
/// fingerprint once per verifier; `Chain` is what a certificate chain verified under it leaves,
/// cached by [`Verifier::chain`].
pub trait PlatformEvidence: Sized {
    type Expected;
    type Policy: Clone;
    type Pinned;
    type Chain;

    /// The pinned root, or `foreign_root` when the compiled-in copy is not the pinned one.
    fn pinned() -> Result<Self::Pinned, Refusal>;

    /// Every check of this evidence, under the verifier's policy, root and chain cache.
    fn check(
        &self,
        on: &Verifier<Self>,
        expected: &Self::Expected,
        now_ms: u64,
    ) -> Result<Verified, Refusal>;
}

/// A verifier for one policy: the pinned root loaded once, verified certificate chains cached.
/// Each platform module names its own (`nitro::Verifier` is `Verifier<nitro::Evidence>`).
pub struct Verifier<E: PlatformEvidence> {
    policy: E::Policy,
    root: E::Pinned,
    cache: ChainCache<E::Chain>,
}

impl<E: PlatformEvidence> Verifier<E> {
    pub fn new(policy: E::Policy) -> Result<Verifier<E>, Refusal> {
        Ok(Verifier::with_root(policy, E::pinned()?))
    }

    /// A verifier trusting `root` (the pinned one, or a test's: `nitro::Verifier::with_test_root`).
    pub(crate) fn with_root(policy: E::Policy, root: E::Pinned) -> Verifier<E> {
        Verifier {
            policy,
            root,
            cache: ChainCache::new(),
        }
    }

    pub fn policy(&self) -> &E::Policy {
        &self.policy
    }

    pub fn verify(
        &self,
        evidence: &E,
        expected: &E::Expected,
        now_ms: u64,
    ) -> Result<Verified, Refusal> {
        evidence.check(self, expected, now_ms)
    }

    /// The chain whose DER `parts` (in order) are given, verified under the pinned root by
    /// `verify` unless an earlier call already did (validity in time is the caller's to check).
    pub(crate) fn chain<'a>(
        &self,
        parts: impl IntoIterator<Item = &'a [u8]>,
        verify: impl FnOnce(&E::Pinned) -> Result<E::Chain, Refusal>,
    ) -> Result<std::sync::Arc<E::Chain>, Refusal> {
        self.cache
            .get_or_verify(chain_key(parts), || verify(&self.root))
    }
}

/// Verify with a fresh verifier (loads the root, verifies the chain): the cold path, which each
/// platform module re-exports as its `verify`.
pub fn verify<E: PlatformEvidence>(
    evidence: &E,
    expected: &E::Expected,
    policy: &E::Policy,
    now_ms: u64,
) -> Result<Verified, Refusal> {
    Verifier::new(policy.clone())?.verify(evidence, expected, now_ms)
}

/// A small bounded cache of verified chains, keyed by a hash of the chain's bytes. When full it
/// is cleared (chains change rarely; a flood of distinct chains only costs re-verification).
pub(crate) struct ChainCache<T> {
    entries: std::sync::Mutex<std::collections::HashMap<[u8; 32], std::sync::Arc<T>>>,
}

impl<T> ChainCache<T> {
    const CAPACITY: usize = 64;

    pub(crate) fn new() -> ChainCache<T> {
        ChainCache {
            entries: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    pub(crate) fn get_or_verify(
        &self,
        key: [u8; 32],
        verify: impl FnOnce() -> Result<T, Refusal>,
    ) -> Result<std::sync::Arc<T>, Refusal> {
        if let Some(hit) = self.lock().get(&key) {
            return Ok(hit.clone());
        }
        let fresh = std::sync::Arc::new(verify()?);
        let mut entries = self.lock();
        if entries.len() >= Self::CAPACITY {
            entries.clear();
        }
        entries.insert(key, fresh.clone());
        Ok(fresh)
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<[u8; 32], std::sync::Arc<T>>> {
        // A poisoned lock only means another thread panicked mid-insert; the map is still a
        // valid cache of verified chains.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A field the caller expects of the evidence (`None`: not checked).
pub(crate) trait ExpectedField<T> {
    /// Refused with `refusal` unless the evidence's value (`got`; `None` where the evidence has
    /// no such field, which no expectation matches) is the expected one.
    fn check(&self, got: Option<&T>, refusal: Refusal) -> Result<(), Refusal>;
}

impl<T: PartialEq> ExpectedField<T> for Option<T> {
    fn check(&self, got: Option<&T>, refusal: Refusal) -> Result<(), Refusal> {
        match self {
            Some(want) if got != Some(want) => Err(refusal),
            _ => Ok(()),
        }
    }
}

/// The cache key of a list of DER blobs: SHA-256 over their lengths and bytes.
pub(crate) fn chain_key<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    h.finalize().into()
}

/// Whether a policy's optional allow-list (chip ids, HOST_DATA, PPIDs, module ids, devices)
/// admits what the evidence shows: an empty list admits anything, else one entry must match.
pub(crate) fn admits<T>(list: &[T], matches: impl Fn(&T) -> bool) -> bool {
    list.is_empty() || list.iter().any(matches)
}

/// The default of a policy switch that is on unless a config file turns it off
/// (`#[serde(default = "crate::yes")]`, shared by the platforms' policies).
pub(crate) fn yes() -> bool {
    true
}

/// Deserialize a list that must not be empty (a pin list in a config file).
pub(crate) fn nonempty<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    let v = Vec::<T>::deserialize(d)?;
    if v.is_empty() {
        return Err(serde::de::Error::custom(
            "at least one pinned value is required (an empty list would accept anything)",
        ));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_snake_case() {
        let mut seen = std::collections::HashSet::new();
        for c in Refusal::CODES {
            assert!(seen.insert(*c), "duplicate code {c}");
            assert!(c.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
        }
    }

    #[test]
    fn platform_names_round_trip() {
        for p in Platform::ALL {
            assert_eq!(p.as_str().parse::<Platform>().unwrap(), p);
        }
        assert!("sgx".parse::<Platform>().is_err());
    }

    #[test]
    fn hex32_decodes() {
        assert_eq!(hex32(&"ab".repeat(32)), [0xab; 32]);
    }
}
