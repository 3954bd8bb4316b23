//! The hardware verifiers of `skillbox-attest` behind [`crate::attest::Verifier`]: one per
//! pinned box, holding that box's policy (its measurements and platform rules) and a cache of
//! verified certificate chains. The report data (SEV-SNP, TDX) or user data (Nitro) must be the
//! SHA-512 of the run's statement, so the evidence vouches for this run's keys, program, nonce and
//! provider table; an SEV-SNP report's HOST_DATA or a TDX quote's MRCONFIGID must carry the
//! configuration hash the statement binds (`config_not_bound` when it binds none). A refusal becomes [`JcError::HardwareRefused`] with the attest crate's closed
//! code: nothing from the evidence is passed on.

use skillbox_attest::{Platform, nitro, snp, tdx};

use crate::attest::{Attestation, Statement, Verifier, Vouched};
use crate::error::{JcError, Result};

/// What a node pins for a hardware box: the attest crate's policy of that platform.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HardwarePolicy {
    SevSnp(snp::Policy),
    Tdx(tdx::Policy),
    Nitro(nitro::Policy),
}

impl HardwarePolicy {
    /// A policy from the platform name and its TOML/JSON table (as `[[boxes.pins]]` holds it).
    /// For SEV-SNP without a table, the launch measurements alone.
    pub fn from_value(
        platform: &str,
        policy: Option<serde_json::Value>,
        measurements: &[String],
    ) -> std::result::Result<HardwarePolicy, String> {
        let parse = |what: &str| -> std::result::Result<serde_json::Value, String> {
            policy
                .clone()
                .ok_or_else(|| format!("a {what} pin needs its policy table"))
        };
        let bad = |e: serde_json::Error| format!("policy: {e}");
        match platform.parse::<Platform>() {
            Ok(Platform::SevSnp) => match policy {
                Some(v) => serde_json::from_value(v)
                    .map(HardwarePolicy::SevSnp)
                    .map_err(bad),
                None => {
                    let ms = measurements
                        .iter()
                        .map(|m| {
                            let bytes = hex::decode(m).ok().filter(|b| b.len() == 48);
                            bytes
                                .and_then(|b| <[u8; 48]>::try_from(b).ok())
                                .ok_or_else(|| format!("measurement {m:?} is not 96 hex digits"))
                        })
                        .collect::<std::result::Result<Vec<_>, _>>()?;
                    if ms.is_empty() {
                        return Err("at least one measurement is required".into());
                    }
                    Ok(HardwarePolicy::SevSnp(snp::Policy::pinned(ms)))
                }
            },
            Ok(Platform::Tdx) => serde_json::from_value(parse("tdx")?)
                .map(HardwarePolicy::Tdx)
                .map_err(bad),
            Ok(Platform::Nitro) => serde_json::from_value(parse("nitro")?)
                .map(HardwarePolicy::Nitro)
                .map_err(bad),
            Ok(Platform::Nvidia) => {
                Err("an NVIDIA GPU is attested inside a CPU box's evidence, not as a box".into())
            }
            Err(_) => Err(format!("unknown platform {platform:?}")),
        }
    }

    pub fn platform(&self) -> Platform {
        match self {
            HardwarePolicy::SevSnp(_) => Platform::SevSnp,
            HardwarePolicy::Tdx(_) => Platform::Tdx,
            HardwarePolicy::Nitro(_) => Platform::Nitro,
        }
    }
}

enum Inner {
    SevSnp(snp::Verifier),
    Tdx(tdx::Verifier),
    Nitro(Box<nitro::Verifier>),
}

/// A hardware platform's verifier for one pinned box.
pub struct HardwareVerifier {
    platform: Platform,
    inner: Inner,
}

impl HardwareVerifier {
    pub fn new(policy: HardwarePolicy) -> Result<HardwareVerifier> {
        let platform = policy.platform();
        let refused = |r: skillbox_attest::Refusal| JcError::HardwareRefused(r.code());
        let inner = match policy {
            HardwarePolicy::SevSnp(p) => Inner::SevSnp(snp::Verifier::new(p).map_err(refused)?),
            HardwarePolicy::Tdx(p) => Inner::Tdx(tdx::Verifier::new(p).map_err(refused)?),
            HardwarePolicy::Nitro(p) => {
                Inner::Nitro(Box::new(nitro::Verifier::new(p).map_err(refused)?))
            }
        };
        Ok(HardwareVerifier { platform, inner })
    }

    /// A Nitro verifier built elsewhere (a test's, pinning its NSM double's root).
    pub fn from_nitro(verifier: nitro::Verifier) -> HardwareVerifier {
        HardwareVerifier {
            platform: Platform::Nitro,
            inner: Inner::Nitro(Box::new(verifier)),
        }
    }
}

/// The configuration hash the statement binds, which the report's HOST_DATA / MRCONFIGID must
/// carry: without it the host's launch value vouches for nothing, so an SEV-SNP or TDX
/// statement that binds no configuration is refused.
fn config_hash(statement: &Statement) -> Result<[u8; 32]> {
    statement
        .config_sha256
        .as_deref()
        .and_then(crate::program::decode_hex32)
        .ok_or(JcError::HardwareRefused("config_not_bound"))
}

/// The attestation's evidence, decoded as `verifier`'s platform's (undecodable: `malformed`), and
/// checked against what `expected` builds (after the decoding, so a malformed evidence is
/// `malformed` whatever the statement binds) at `now_ms`; a refusal keeps only its closed code.
fn check<E>(
    verifier: &skillbox_attest::Verifier<E>,
    attestation: &Attestation,
    now_ms: u64,
    expected: impl FnOnce() -> Result<E::Expected>,
) -> Result<skillbox_attest::Verified>
where
    E: skillbox_attest::PlatformEvidence + serde::de::DeserializeOwned,
{
    let ev: E = serde_json::from_value(attestation.evidence.clone())
        .map_err(|_| JcError::HardwareRefused("malformed"))?;
    verifier
        .verify(&ev, &expected()?, now_ms)
        .map_err(|r| JcError::HardwareRefused(r.code()))
}

impl Verifier for HardwareVerifier {
    fn platform(&self) -> &str {
        self.platform.as_str()
    }

    fn verify_evidence(
        &self,
        attestation: &Attestation,
        statement: &Statement,
        report_data: &[u8; 64],
        now_ms: u64,
    ) -> Result<Vouched> {
        let verified = match &self.inner {
            Inner::SevSnp(v) => check(v, attestation, now_ms, || {
                Ok(snp::Expected {
                    report_data: Some(*report_data),
                    host_data: Some(config_hash(statement)?),
                })
            })?,
            Inner::Tdx(v) => check(v, attestation, now_ms, || {
                let mut mr_config_id = [0u8; 48];
                mr_config_id[..32].copy_from_slice(&config_hash(statement)?);
                Ok(tdx::Expected {
                    report_data: Some(*report_data),
                    mr_config_id: Some(mr_config_id),
                })
            })?,
            Inner::Nitro(v) => check(v, attestation, now_ms, || {
                Ok(nitro::Expected {
                    user_data: Some(report_data.to_vec()),
                    nonce: None,
                    public_key: None,
                })
            })?,
        };
        Ok(Vouched {
            measurement: verified.measurement,
            key: None,
            tcb_status: verified.tcb_status,
        })
    }
}
