//! The release log of accepted box images (issue 31 item 3): a box release publishes a signed
//! **release manifest** of its measurements, per platform, and logs the signature in a
//! transparency log (Sigstore's Rekor, or any log whose key a Sigstore trusted root names). A
//! node that pins a release-log identity instead of raw measurements accepts a measurement only
//! from a manifest whose Sigstore bundle verifies offline:
//!
//! - the Merkle inclusion proof of the log entry (RFC 6962) up to the proof's root,
//! - the signed checkpoint (signed note) carrying that root, by a log key of the pinned trusted
//!   root (compiled in: Sigstore's public-good root; or the node's own file),
//! - the entry's consistency with the bundle (the logged hash is the manifest's, the logged
//!   signature and key are the bundle's: CVE-2022-36056),
//! - the signature over the manifest, by the pinned signer: a Fulcio certificate for the pinned
//!   identity and OIDC issuer (chain, SCT, validity at the log's integrated time), or a pinned
//!   managed key.
//!
//! All of that is `sigstore-verify`'s (the sigstore-rust project's verifier), not ours: this
//! module only picks the policy, refuses a bundle whose entries lack an inclusion proof (a v0.1
//! bundle with a promise alone), sorts the library's errors into closed codes and reads the
//! manifest. Unlike the platform verifiers the library reads the clock (an integrated time in the
//! future is refused, log keys have validity windows); nothing else here does.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sigstore_verify::trust_root::{SIGSTORE_PRODUCTION_TRUSTED_ROOT, TrustedRoot};
use sigstore_verify::types::{Bundle, DerPublicKey};
use sigstore_verify::{
    Error as SigstoreError, PublicKeyVerificationPolicy, TransparencyLogError, VerificationPolicy,
    Verifier,
};

#[cfg(feature = "test-log")]
pub mod test_log;

/// The largest manifest and bundle read (a real bundle is a few KiB).
pub const MAX_MANIFEST: usize = 64 * 1024;
pub const MAX_BUNDLE: usize = 1024 * 1024;

/// The platforms a manifest may name, and the measurement each carries (all 48 bytes): the
/// insecure-dev executable's SHA-384, SEV-SNP MEASUREMENT, the TDX box identity
/// ([`crate::tdx::identity`] of MRTD, RTMR0, RTMR1, RTMR2), Nitro PCR0.
pub const PLATFORMS: [&str; 4] = ["insecure-dev", "sev-snp", "tdx", "nitro"];

/// The manifest format this crate writes about: 2, whose `tdx` entry names box identities.
/// Format 1 named TDX boxes by MRTD, the firmware alone (any kernel and box binary under it):
/// its other platforms are read as before, its `tdx` entry is refused (`tdx_firmware_only`),
/// since an MRTD cannot be told from an identity by its form.
pub const FORMAT: u32 = 2;

/// Why a release bundle or manifest was refused: closed codes, fixed messages (the library's
/// own text is never passed on: it quotes bundle contents).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReleaseLogError {
    #[error("the trusted root naming the log keys is not usable")]
    BadTrustRoot,
    #[error("the pinned signer key is not a usable public key")]
    BadSignerKey,
    #[error("the bundle is not a Sigstore bundle this verifier reads")]
    MalformedBundle,
    #[error("the bundle or manifest is larger than its limit")]
    TooLarge,
    #[error("a log entry of the bundle has no inclusion proof and checkpoint")]
    NoInclusionProof,
    #[error("the inclusion proof does not lead to the logged root")]
    BadInclusionProof,
    #[error("the checkpoint is not signed by a pinned log key or does not match the proof")]
    BadCheckpoint,
    #[error("the entry was logged by a log this node does not pin")]
    UnknownLog,
    #[error("the log's signed entry timestamp does not verify")]
    BadInclusionPromise,
    #[error("the log entry does not describe this bundle")]
    EntryMismatch,
    #[error("the log's integrated time is not acceptable")]
    BadIntegratedTime,
    #[error("the signature does not verify with the pinned signer")]
    BadSignature,
    #[error("the signed artefact is not the one given")]
    ArtifactMismatch,
    #[error("the signing certificate does not verify")]
    BadCertificate,
    #[error("the signer is not the pinned identity or issuer")]
    SignerMismatch,
    #[error("a timestamp of the bundle does not verify")]
    BadTimestamp,
    #[error("the release manifest is malformed")]
    MalformedManifest,
    #[error("a format 1 release manifest names TDX boxes by MRTD, the firmware alone")]
    TdxFirmwareOnly,
    #[error("the bundle was refused")]
    Refused,
}

impl ReleaseLogError {
    /// The stable code (logs, receipts, tests).
    pub fn code(&self) -> &'static str {
        match self {
            ReleaseLogError::BadTrustRoot => "bad_trust_root",
            ReleaseLogError::BadSignerKey => "bad_signer_key",
            ReleaseLogError::MalformedBundle => "malformed_bundle",
            ReleaseLogError::TooLarge => "too_large",
            ReleaseLogError::NoInclusionProof => "no_inclusion_proof",
            ReleaseLogError::BadInclusionProof => "bad_inclusion_proof",
            ReleaseLogError::BadCheckpoint => "bad_checkpoint",
            ReleaseLogError::UnknownLog => "unknown_log",
            ReleaseLogError::BadInclusionPromise => "bad_inclusion_promise",
            ReleaseLogError::EntryMismatch => "entry_mismatch",
            ReleaseLogError::BadIntegratedTime => "bad_integrated_time",
            ReleaseLogError::BadSignature => "bad_signature",
            ReleaseLogError::ArtifactMismatch => "artifact_mismatch",
            ReleaseLogError::BadCertificate => "bad_certificate",
            ReleaseLogError::SignerMismatch => "signer_mismatch",
            ReleaseLogError::BadTimestamp => "bad_timestamp",
            ReleaseLogError::MalformedManifest => "malformed_manifest",
            ReleaseLogError::TdxFirmwareOnly => "tdx_firmware_only",
            ReleaseLogError::Refused => "refused",
        }
    }

    fn from_sigstore(e: &SigstoreError) -> ReleaseLogError {
        use ReleaseLogError as R;
        match e {
            SigstoreError::TransparencyLog(t) => match t {
                TransparencyLogError::UnknownLog { .. } => R::UnknownLog,
                TransparencyLogError::InclusionProof(_) => R::BadInclusionProof,
                TransparencyLogError::Checkpoint(_) => R::BadCheckpoint,
                TransparencyLogError::InclusionPromise(_) => R::BadInclusionPromise,
                TransparencyLogError::EntryMismatch(_) => R::EntryMismatch,
                TransparencyLogError::IntegratedTime(_) => R::BadIntegratedTime,
                TransparencyLogError::MalformedEntry(_) => R::EntryMismatch,
                _ => R::Refused,
            },
            SigstoreError::IdentityMismatch { .. } | SigstoreError::IssuerMismatch { .. } => {
                R::SignerMismatch
            }
            SigstoreError::SignatureInvalid(_) | SigstoreError::Crypto(_) => R::BadSignature,
            SigstoreError::ArtifactMismatch(_) => R::ArtifactMismatch,
            SigstoreError::Certificate(_) => R::BadCertificate,
            SigstoreError::Timestamp(_) => R::BadTimestamp,
            SigstoreError::InvalidBundle(_)
            | SigstoreError::UnsupportedBundle(_)
            | SigstoreError::Bundle(_)
            | SigstoreError::Types(_) => R::MalformedBundle,
            SigstoreError::InvalidTrustRoot(_)
            | SigstoreError::TrustRoot(_)
            | SigstoreError::TrustedCertificate(_) => R::BadTrustRoot,
            _ => R::Refused,
        }
    }
}

/// Who must have signed a release manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Signer {
    /// Keyless: the Fulcio certificate's identity (its SAN, exactly: a release workflow's URI
    /// or an e-mail address) and the OIDC issuer that vouched for it.
    Identity { identity: String, issuer: String },
    /// A managed key (cosign `--key`): its SubjectPublicKeyInfo DER.
    Key(Vec<u8>),
}

impl Signer {
    /// A managed key from its PEM (`-----BEGIN PUBLIC KEY-----`, as `cosign generate-key-pair`
    /// writes `cosign.pub`).
    pub fn key_from_pem(pem: &str) -> Result<Signer, ReleaseLogError> {
        DerPublicKey::from_pem(pem)
            .map(|k| Signer::Key(k.as_bytes().to_vec()))
            .map_err(|_| ReleaseLogError::BadSignerKey)
    }
}

/// What a release manifest says: the release's name and its accepted measurements per platform
/// (lowercase hex, 48 bytes each). The signed bytes are the manifest file as published.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseManifest {
    /// The manifest format: [`FORMAT`], or 1 (read without its `tdx` entry).
    pub skillbox_box_release: u32,
    /// The release (a tag, e.g. `v0.2.0`).
    pub release: String,
    pub measurements: BTreeMap<String, Vec<String>>,
}

impl ReleaseManifest {
    /// Parse and check a manifest: format 1 or 2, a short printable release name, known platforms,
    /// 96 hex digits per measurement (returned lowercase).
    pub fn parse(bytes: &[u8]) -> Result<ReleaseManifest, ReleaseLogError> {
        if bytes.len() > MAX_MANIFEST {
            return Err(ReleaseLogError::TooLarge);
        }
        let mut m: ReleaseManifest =
            serde_json::from_slice(bytes).map_err(|_| ReleaseLogError::MalformedManifest)?;
        let name_ok = !m.release.is_empty()
            && m.release.len() <= 128
            && m.release.bytes().all(|b| b.is_ascii_graphic());
        if !(1..=FORMAT).contains(&m.skillbox_box_release) || !name_ok || m.measurements.is_empty()
        {
            return Err(ReleaseLogError::MalformedManifest);
        }
        for (platform, values) in m.measurements.iter_mut() {
            let hex_ok = |v: &String| v.len() == 96 && v.bytes().all(|c| c.is_ascii_hexdigit());
            if !PLATFORMS.contains(&platform.as_str())
                || values.is_empty()
                || !values.iter().all(hex_ok)
            {
                return Err(ReleaseLogError::MalformedManifest);
            }
            for v in values.iter_mut() {
                v.make_ascii_lowercase();
            }
        }
        Ok(m)
    }

    /// The measurements this manifest accepts on `platform` (empty when it names none). A format
    /// 1 manifest's TDX entry is refused: it names MRTDs, which say nothing of the box binary,
    /// and read as identities they would match no box without saying why.
    pub fn on(&self, platform: &str) -> Result<&[String], ReleaseLogError> {
        let named = self.measurements.get(platform).map(Vec::as_slice);
        if self.skillbox_box_release == 1 && platform == "tdx" && named.is_some() {
            return Err(ReleaseLogError::TdxFirmwareOnly);
        }
        Ok(named.unwrap_or(&[]))
    }
}

/// A pinned release log: the log keys (a Sigstore trusted root) and the release signer.
pub struct ReleaseLog {
    verifier: Verifier,
    signer: Signer,
}

impl std::fmt::Debug for ReleaseLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReleaseLog")
            .field("signer", &self.signer)
            .finish()
    }
}

impl ReleaseLog {
    /// Pin `signer` and the log keys of `trusted_root_json` (a Sigstore `trusted_root.json`);
    /// `None`: Sigstore's public-good root as compiled into `sigstore-trust-root` (Rekor's key,
    /// Fulcio's CAs, the CT logs).
    pub fn new(signer: Signer, trusted_root_json: Option<&str>) -> Result<Self, ReleaseLogError> {
        let root =
            TrustedRoot::from_json(trusted_root_json.unwrap_or(SIGSTORE_PRODUCTION_TRUSTED_ROOT))
                .map_err(|_| ReleaseLogError::BadTrustRoot)?;
        let verifier = Verifier::new(&root).map_err(|_| ReleaseLogError::BadTrustRoot)?;
        if let Signer::Key(der) = &signer {
            sigstore_verify::crypto::KeyAlgorithm::from_spki(&DerPublicKey::new(der.clone()))
                .map_err(|_| ReleaseLogError::BadSignerKey)?;
        }
        Ok(ReleaseLog { verifier, signer })
    }

    /// Verify that `bundle_json` (a Sigstore bundle, v0.1–v0.3 JSON) logs a signature by the
    /// pinned signer over `artifact`, with an inclusion proof and signed checkpoint for every
    /// log entry.
    pub fn verify(&self, artifact: &[u8], bundle_json: &[u8]) -> Result<(), ReleaseLogError> {
        if bundle_json.len() > MAX_BUNDLE {
            return Err(ReleaseLogError::TooLarge);
        }
        let text =
            std::str::from_utf8(bundle_json).map_err(|_| ReleaseLogError::MalformedBundle)?;
        let bundle = Bundle::from_json(text).map_err(|_| ReleaseLogError::MalformedBundle)?;
        // The library checks a proof when there is one and only a promise (SET) otherwise; a
        // promise is the log's word that it will include the entry, not proof that it did.
        let entries = &bundle.verification_material.tlog_entries;
        if entries.is_empty() || entries.iter().any(|e| e.inclusion_proof.is_none()) {
            return Err(ReleaseLogError::NoInclusionProof);
        }
        let result = match &self.signer {
            Signer::Identity { identity, issuer } => self.verifier.verify(
                artifact,
                &bundle,
                &VerificationPolicy::new(identity.as_str(), issuer.as_str()),
            ),
            Signer::Key(der) => self.verifier.verify(
                artifact,
                &bundle,
                &PublicKeyVerificationPolicy::new(DerPublicKey::new(der.clone())),
            ),
        };
        let verified = result.map_err(|e| ReleaseLogError::from_sigstore(&e))?;
        // Belt and braces: never accept a result whose log inclusion was not checked.
        if !verified.tlog_verified() {
            return Err(ReleaseLogError::NoInclusionProof);
        }
        Ok(())
    }

    /// [`verify`](Self::verify) the bundle over the manifest's bytes, then read the manifest.
    pub fn verify_manifest(
        &self,
        manifest: &[u8],
        bundle_json: &[u8],
    ) -> Result<ReleaseManifest, ReleaseLogError> {
        if manifest.len() > MAX_MANIFEST {
            return Err(ReleaseLogError::TooLarge);
        }
        self.verify(manifest, bundle_json)?;
        ReleaseManifest::parse(manifest)
    }
}
