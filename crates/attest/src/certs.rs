//! X.509 helpers shared by the verifiers: fingerprints, validity windows at a given time, and
//! chain building with rustls-webpki against one pinned root (Nitro, NVIDIA).

use std::time::Duration;

use der::{Decode, Encode};
use p384::ecdsa::signature::Verifier as _;
use rustls_pki_types::{
    AlgorithmIdentifier, CertificateDer, InvalidSignature, SignatureVerificationAlgorithm,
    UnixTime, alg_id,
};
use sha2::{Digest, Sha256};
use webpki::{EndEntityCert, KeyPurposeIdIter};

use crate::Refusal;

/// SHA-256 over a certificate's DER: the pin format used in the vectors' README and by vendors.
pub fn fingerprint(der: &[u8]) -> [u8; 32] {
    Sha256::digest(der).into()
}

/// A vendor root that a verifier trusts, parsed once, with the fingerprint that pins it (AWS's
/// for Nitro, NVIDIA's for GPUs: the `Pinned` of both platforms).
pub struct PinnedRoot {
    pub parsed: Parsed,
    pub fingerprint: [u8; 32],
}

impl PinnedRoot {
    /// The first certificate of a compiled-in PEM file, which must be the root pinned by
    /// `fingerprint`: compared before it is parsed, so a swapped file is `foreign_root`.
    pub fn load(
        pem: &[u8],
        fingerprint: [u8; 32],
        what: &'static str,
    ) -> Result<PinnedRoot, Refusal> {
        let der = crate::input::certificates(pem)?
            .into_iter()
            .next()
            .ok_or(Refusal::Malformed(what))?;
        if crate::fingerprint(&der) != fingerprint {
            return Err(Refusal::ForeignRoot);
        }
        Ok(PinnedRoot {
            parsed: Parsed::from_der(&der, what)?,
            fingerprint,
        })
    }
}

/// A certificate parsed once, with what the verifiers ask of it.
#[derive(Clone, Debug)]
pub struct Parsed {
    pub der: Vec<u8>,
    pub cert: x509_cert::Certificate,
    pub not_before_ms: u64,
    pub not_after_ms: u64,
}

impl Parsed {
    pub fn from_der(der: &[u8], what: &'static str) -> Result<Parsed, Refusal> {
        let cert = x509_cert::Certificate::from_der(der).map_err(|_| Refusal::Malformed(what))?;
        // Re-encoding must give the same bytes: a certificate with trailing or non-DER bytes
        // would otherwise hash (fingerprint) differently from what was checked.
        let again = cert.to_der().map_err(|_| Refusal::Malformed(what))?;
        if again != der {
            return Err(Refusal::Malformed(what));
        }
        let validity = &cert.tbs_certificate.validity;
        let not_before_ms = ms(validity.not_before.to_unix_duration());
        let not_after_ms = ms(validity.not_after.to_unix_duration());
        Ok(Parsed {
            der: der.to_vec(),
            cert,
            not_before_ms,
            not_after_ms,
        })
    }

    pub fn fingerprint(&self) -> [u8; 32] {
        fingerprint(&self.der)
    }

    pub fn is_self_issued(&self) -> bool {
        self.cert.tbs_certificate.subject == self.cert.tbs_certificate.issuer
    }

    /// The subject's `serialNumber` attribute (2.5.4.5), when it is short printable text.
    pub fn subject_serial_number(&self) -> Option<String> {
        const SERIAL_NUMBER: const_oid::ObjectIdentifier =
            const_oid::ObjectIdentifier::new_unwrap("2.5.4.5");
        for rdn in self.cert.tbs_certificate.subject.0.iter() {
            for atv in rdn.0.iter() {
                if atv.oid == SERIAL_NUMBER {
                    let text = der::asn1::PrintableStringRef::try_from(&atv.value)
                        .map(|s| s.as_str().to_owned())
                        .or_else(|_| {
                            der::asn1::Utf8StringRef::try_from(&atv.value)
                                .map(|s| s.as_str().to_owned())
                        })
                        .ok()?;
                    // Only an identifier, never free text, leaves this crate.
                    if !text.is_empty()
                        && text.len() <= 64
                        && text.bytes().all(|b| b.is_ascii_alphanumeric())
                    {
                        return Some(text);
                    }
                }
            }
        }
        None
    }

    /// The subject's common name, when it is short printable text.
    pub fn subject_common_name(&self) -> Option<String> {
        for rdn in self.cert.tbs_certificate.subject.0.iter() {
            for atv in rdn.0.iter() {
                if atv.oid == const_oid::db::rfc4519::CN {
                    let text = der::asn1::PrintableStringRef::try_from(&atv.value)
                        .map(|s| s.as_str().to_owned())
                        .or_else(|_| {
                            der::asn1::Utf8StringRef::try_from(&atv.value)
                                .map(|s| s.as_str().to_owned())
                        })
                        .or_else(|_| {
                            der::asn1::Ia5StringRef::try_from(&atv.value)
                                .map(|s| s.as_str().to_owned())
                        })
                        .ok()?;
                    return Some(text);
                }
            }
        }
        None
    }

    /// The raw subjectPublicKey bits (SEC1 point for EC keys).
    pub fn public_key_bits(&self) -> &[u8] {
        self.cert
            .tbs_certificate
            .subject_public_key_info
            .subject_public_key
            .raw_bytes()
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The intersection of the certificates' validity windows, `[from, until]` in Unix ms.
pub fn window<'a>(certs: impl IntoIterator<Item = &'a Parsed>) -> (u64, u64) {
    let mut from = 0u64;
    let mut until = u64::MAX;
    for c in certs {
        from = from.max(c.not_before_ms);
        until = until.min(c.not_after_ms);
    }
    (from, until)
}

/// Every certificate valid at `at_ms` (inclusive bounds, as X.509 says).
pub fn check_validity<'a>(
    certs: impl IntoIterator<Item = &'a Parsed>,
    at_ms: u64,
) -> Result<(), Refusal> {
    for c in certs {
        if at_ms > c.not_after_ms {
            return Err(Refusal::CertificateExpired);
        }
        if at_ms < c.not_before_ms {
            return Err(Refusal::CertificateNotYetValid);
        }
    }
    Ok(())
}

/// ECDSA P-384 with SHA-384 for rustls-webpki, in pure Rust (p384): the one algorithm the Nitro
/// and NVIDIA chains use.
#[derive(Debug)]
pub struct EcdsaP384Sha384;

impl SignatureVerificationAlgorithm for EcdsaP384Sha384 {
    fn verify_signature(
        &self,
        public_key: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), InvalidSignature> {
        let key =
            p384::ecdsa::VerifyingKey::from_sec1_bytes(public_key).map_err(|_| InvalidSignature)?;
        let sig = p384::ecdsa::Signature::from_der(signature).map_err(|_| InvalidSignature)?;
        key.verify(message, &sig).map_err(|_| InvalidSignature)
    }

    fn public_key_alg_id(&self) -> AlgorithmIdentifier {
        alg_id::ECDSA_P384
    }

    fn signature_alg_id(&self) -> AlgorithmIdentifier {
        alg_id::ECDSA_SHA384
    }
}

static P384: EcdsaP384Sha384 = EcdsaP384Sha384;

/// Attestation leaf certificates are not TLS certificates: whatever EKU they carry, their
/// purpose is fixed by the pinned root and their place in the evidence.
struct AnyPurpose;

impl webpki::ExtendedKeyUsageValidator for AnyPurpose {
    fn validate(&self, _iter: KeyPurposeIdIter<'_, '_>) -> Result<(), webpki::Error> {
        Ok(())
    }
}

/// Build and verify the path leaf → intermediates → `root` (the pinned one; any root the
/// evidence carries is ignored) at `at_ms`. Signatures, basic constraints, key usage, critical
/// extensions and validity of every certificate below the root are webpki's; the root's own
/// validity the caller checks with [`check_validity`].
pub fn verify_path(
    leaf: &Parsed,
    intermediates: &[Parsed],
    root: &Parsed,
    at_ms: u64,
) -> Result<(), Refusal> {
    let root_der = CertificateDer::from(root.der.as_slice());
    let anchor = webpki::anchor_from_trusted_cert(&root_der)
        .map_err(|_| Refusal::Malformed("pinned root certificate"))?;
    let leaf_der = CertificateDer::from(leaf.der.as_slice());
    let ee =
        EndEntityCert::try_from(&leaf_der).map_err(|_| Refusal::Malformed("leaf certificate"))?;
    let inter: Vec<CertificateDer<'_>> = intermediates
        .iter()
        .map(|c| CertificateDer::from(c.der.as_slice()))
        .collect();
    let time = UnixTime::since_unix_epoch(Duration::from_millis(at_ms));
    ee.verify_for_usage(&[&P384], &[anchor], &inter, time, AnyPurpose, None, None)
        .map(|_| ())
        .map_err(map_webpki)
}

impl PinnedRoot {
    /// Verify the path leaf → intermediates → this root as [`verify_path`] does, at a time
    /// every certificate of it is valid — webpki checks validity while it builds the path; the
    /// caller checks its own time against every window afterwards (so the path is returned
    /// whole: the leaf, the intermediates, the root) — and return the leaf's P-384 key with it.
    pub fn verify_p384_path(
        &self,
        leaf: &Parsed,
        intermediates: &[Parsed],
    ) -> Result<(p384::ecdsa::VerifyingKey, Vec<Parsed>), Refusal> {
        let mut all = Vec::with_capacity(intermediates.len() + 2);
        all.push(leaf.clone());
        all.extend(intermediates.iter().cloned());
        all.push(self.parsed.clone());
        let (from, until) = window(&all);
        if from > until {
            return Err(Refusal::BadChain(
                "certificate validity windows do not overlap",
            ));
        }
        verify_path(leaf, intermediates, &self.parsed, from)?;
        Ok((p384_key(leaf)?, all))
    }
}

fn map_webpki(e: webpki::Error) -> Refusal {
    use webpki::Error as E;
    match e {
        E::CertExpired { .. } => Refusal::CertificateExpired,
        E::CertNotValidYet { .. } => Refusal::CertificateNotYetValid,
        E::CertRevoked => Refusal::CertificateRevoked,
        E::UnknownIssuer => Refusal::ForeignRoot,
        E::InvalidSignatureForPublicKey => Refusal::BadChain("a certificate signature"),
        E::UnsupportedSignatureAlgorithmContext(_)
        | E::UnsupportedSignatureAlgorithmForPublicKeyContext(_) => {
            Refusal::Unsupported("certificate signature algorithm")
        }
        E::CaUsedAsEndEntity | E::EndEntityUsedAsCa | E::PathLenConstraintViolated => {
            Refusal::BadChain("certificate roles (basic constraints)")
        }
        E::UnsupportedCriticalExtension => Refusal::BadChain("unknown critical extension"),
        E::MaximumPathDepthExceeded
        | E::MaximumPathBuildCallsExceeded
        | E::MaximumSignatureChecksExceeded => Refusal::BadChain("path too long"),
        _ => Refusal::Malformed("certificate"),
    }
}

/// Raw big-endian `r ‖ s` (as COSE and SPDM carry ECDSA signatures) to a P-384 signature.
fn p384_signature_raw(raw: &[u8]) -> Result<p384::ecdsa::Signature, Refusal> {
    if raw.len() != 96 {
        return Err(Refusal::Malformed("ECDSA P-384 signature length"));
    }
    p384::ecdsa::Signature::from_slice(raw).map_err(|_| Refusal::BadSignature("signature scalars"))
}

/// The evidence's own signature (raw `r ‖ s`) over `signed`, checked with the leaf key of its
/// verified chain: `bad_signature` naming `what` (the COSE_Sign1 or SPDM signature) when it
/// does not verify.
pub fn verify_p384_raw(
    leaf_key: &p384::ecdsa::VerifyingKey,
    signed: &[u8],
    signature: &[u8],
    what: &'static str,
) -> Result<(), Refusal> {
    let sig = p384_signature_raw(signature)?;
    leaf_key
        .verify(signed, &sig)
        .map_err(|_| Refusal::BadSignature(what))
}

/// The P-384 key of a certificate, refused unless it is an EC P-384 key.
pub fn p384_key(cert: &Parsed) -> Result<p384::ecdsa::VerifyingKey, Refusal> {
    const EC_PUBLIC_KEY: const_oid::ObjectIdentifier =
        const_oid::ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
    const SECP384R1: const_oid::ObjectIdentifier =
        const_oid::ObjectIdentifier::new_unwrap("1.3.132.0.34");
    let spki = &cert.cert.tbs_certificate.subject_public_key_info;
    if spki.algorithm.oid != EC_PUBLIC_KEY {
        return Err(Refusal::Unsupported("endorsement key type (not EC)"));
    }
    let curve = spki
        .algorithm
        .parameters
        .as_ref()
        .and_then(|p| p.decode_as::<const_oid::ObjectIdentifier>().ok());
    if curve != Some(SECP384R1) {
        return Err(Refusal::Unsupported("endorsement key curve (not P-384)"));
    }
    p384::ecdsa::VerifyingKey::from_sec1_bytes(cert.public_key_bits())
        .map_err(|_| Refusal::Malformed("endorsement public key"))
}

#[cfg(test)]
mod tests {
    use crate::PlatformEvidence;

    // The compiled-in PEM files are the roots the fingerprints pin (a swapped file would make
    // every verifier of the platform refuse with `foreign_root`).
    #[test]
    fn the_compiled_aws_root_is_the_pinned_one() {
        assert!(crate::nitro::Evidence::pinned().is_ok());
    }

    #[test]
    fn the_compiled_nvidia_root_is_the_pinned_one() {
        assert!(crate::nvidia::Evidence::pinned().is_ok());
    }
}
