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
    /// A policy from the platform name and its TOML/JSON table (as `[[boxes.pins]]` holds it):
    /// where every hardware pin is loaded (the config check and the node's box table both read
    /// pins through here). An SEV-SNP or TDX table must name its TCB floor, refused otherwise
    /// with [`missing_floor`]'s text: the box operator chooses firmware and collateral, and a
    /// pin without a floor accepted every generation the vendor still signs.
    ///
    /// An SEV-SNP table without `measurements` takes the pin's own (a release-log pin's, once
    /// its log named them); a TDX table without `accepted` takes one entry per pin measurement,
    /// each a box identity ([`tdx::identity`]). A TDX pin measurement that is an accepted
    /// entry's MRTD, or the retired `/1` identity of its registers (before RTMR0 was in it),
    /// rather than its identity is refused, naming the identity to write: before the identity
    /// covered the boot chain, a TDX box was named by its firmware alone, and before review 26
    /// V2 without the ACPI tables its host hands it.
    pub fn from_value(
        platform: &str,
        policy: Option<serde_json::Value>,
        measurements: &[String],
    ) -> std::result::Result<HardwarePolicy, String> {
        let bad = |e: serde_json::Error| format!("policy: {e}");
        let parsed = match platform.parse::<Platform>() {
            Ok(p @ Platform::SevSnp) => {
                let mut table = table(p, policy)?;
                if let Some(fields) = table.as_object_mut()
                    && !fields.contains_key("measurements")
                {
                    fields.insert("measurements".into(), launch_measurements(measurements)?);
                }
                serde_json::from_value(table).map(HardwarePolicy::SevSnp)
            }
            Ok(p @ Platform::Tdx) => {
                let mut table = table(p, policy)?;
                if let Some(fields) = table.as_object_mut()
                    && !fields.contains_key("accepted")
                {
                    fields.insert("accepted".into(), td_identities(measurements)?);
                }
                let policy: tdx::Policy = serde_json::from_value(table).map_err(bad)?;
                named_by_identity(&policy, measurements)?;
                Ok(HardwarePolicy::Tdx(policy))
            }
            Ok(p @ Platform::Nitro) => {
                serde_json::from_value(table(p, policy)?).map(HardwarePolicy::Nitro)
            }
            Ok(Platform::Nvidia) => {
                return Err(
                    "an NVIDIA GPU is attested inside a CPU box's evidence, not as a box".into(),
                );
            }
            Err(_) => return Err(format!("unknown platform {platform:?}")),
        }
        .map_err(bad)?;
        parsed.floor()?;
        Ok(parsed)
    }

    /// The TCB floor this policy names, or [`missing_floor`]'s text when an SEV-SNP or TDX
    /// policy names none (one built in code rather than loaded; Nitro has no TCB to floor).
    pub fn floor(&self) -> std::result::Result<(), String> {
        let named = match self {
            HardwarePolicy::SevSnp(p) => p.min_tcb.is_some(),
            HardwarePolicy::Tdx(p) => p.min_tcb_eval_data_number > 0,
            HardwarePolicy::Nitro(_) => true,
        };
        match missing_floor(self.platform()) {
            Some(text) if !named => Err(text.to_owned()),
            _ => Ok(()),
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

/// A pin's policy table, present and naming its platform's TCB floor (checked before the
/// attest crate reads it, so the refusal says where the value comes from).
fn table(
    platform: Platform,
    policy: Option<serde_json::Value>,
) -> std::result::Result<serde_json::Value, String> {
    let floor = missing_floor(platform);
    let table = policy
        .filter(serde_json::Value::is_object)
        .ok_or_else(|| match floor {
            Some(text) => format!("a {platform} pin needs its policy table: {text}"),
            None => format!("a {platform} pin needs its policy table"),
        })?;
    match floor {
        Some(text) if table.get(floor_field(platform)).is_none_or(|v| v.is_null()) => {
            Err(text.to_owned())
        }
        _ => Ok(table),
    }
}

/// The pin's SEV-SNP launch measurements (96 hex digits each, at least one), as its policy
/// table's `measurements`.
fn launch_measurements(measurements: &[String]) -> std::result::Result<serde_json::Value, String> {
    if measurements.is_empty() {
        return Err("at least one measurement is required".into());
    }
    for m in measurements {
        if m.len() != 96 || !m.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("measurement {m:?} is not 96 hex digits"));
        }
    }
    Ok(serde_json::json!(measurements))
}

/// The pin's TDX box identities as its policy table's `accepted` entries.
fn td_identities(measurements: &[String]) -> std::result::Result<serde_json::Value, String> {
    launch_measurements(measurements)?;
    Ok(measurements
        .iter()
        .map(|m| serde_json::json!({ "identity": m }))
        .collect())
}

/// A TDX pin's measurements name boxes by identity: one that is an accepted entry's MRTD, or
/// the retired `/1` identity of its MRTD, RTMR1 and RTMR2, is old data (a TDX box was once named
/// by its firmware, then without RTMR0) and would match no box; refused with the identity that
/// entry's registers make (or, if it does not name RTMR0, with the need for it).
fn named_by_identity(
    policy: &tdx::Policy,
    measurements: &[String],
) -> std::result::Result<(), String> {
    for (i, m) in measurements.iter().enumerate() {
        let identity_of = |a: &tdx::TdMeasurements| {
            a.box_identity()
                .is_some_and(|id| hex::encode(id).eq_ignore_ascii_case(m))
        };
        if policy.accepted.iter().any(identity_of) {
            continue;
        }
        let firmware = policy.accepted.iter().enumerate().find(|(_, a)| {
            a.mr_td
                .as_ref()
                .is_some_and(|td| hex::encode(td.0).eq_ignore_ascii_case(m))
        });
        let to_write = |a: &tdx::TdMeasurements| {
            a.box_identity().map_or_else(
                || "its rtmr0 must be pinned first".to_owned(),
                |id| format!("here {}", hex::encode(id)),
            )
        };
        if let Some((at, a)) = firmware {
            return Err(format!(
                "measurements[{i}] is the mr_td of accepted[{at}], the firmware alone: a TDX box \
                 is named by its identity, SHA-384(\"skillbox/tdx-identity/2\" ‖ mr_td ‖ rtmr0 ‖ \
                 rtmr1 ‖ rtmr2), {}; `skillbox box --attester tdx --show-identity` prints it",
                to_write(a)
            ));
        }
        let retired = policy.accepted.iter().enumerate().find(|(_, a)| {
            a.retired_identity_v1()
                .is_some_and(|id| hex::encode(id).eq_ignore_ascii_case(m))
        });
        if let Some((at, a)) = retired {
            return Err(format!(
                "measurements[{i}] is the retired skillbox/tdx-identity/1 of accepted[{at}], \
                 which left out rtmr0 (the ACPI tables the host hands the box): a TDX box is \
                 named by SHA-384(\"skillbox/tdx-identity/2\" ‖ mr_td ‖ rtmr0 ‖ rtmr1 ‖ rtmr2), \
                 {}; `skillbox box --attester tdx --show-identity` prints it",
                to_write(a)
            ));
        }
    }
    Ok(())
}

/// The field naming a platform's TCB floor in its policy table.
fn floor_field(platform: Platform) -> &'static str {
    match platform {
        Platform::Tdx => "min_tcb_eval_data_number",
        _ => "min_tcb",
    }
}

/// What a pin without its TCB floor is told: the field, why, and where the value comes from
/// (`None`: the platform has no TCB floor here).
pub fn missing_floor(platform: Platform) -> Option<&'static str> {
    match platform {
        Platform::SevSnp => Some(
            "policy.min_tcb is required: the TCB floor (bootloader, tee, snp, microcode) below \
             which the box is refused, or a guest on old firmware with published flaws passes; \
             `skillbox box --attester sev-snp --show-identity` prints the box's reported TCB as \
             its min_tcb table, `skillbox attestation verify` that of a report you hold \
             (compare it with AMD's current TCB before pinning it)",
        ),
        Platform::Tdx => Some(
            "policy.min_tcb_eval_data_number is required (at least 1): the oldest collateral \
             generation accepted from the box, or collateral rating a since-flawed TCB up to \
             date passes; `skillbox box --attester tdx --show-identity` prints the one of the \
             box's collateral, `skillbox attestation verify` that of a quote and collateral you \
             hold (compare it with Intel's current TCB evaluation data number)",
        ),
        Platform::Nitro | Platform::Nvidia => None,
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
    /// A verifier for `policy`; an SEV-SNP or TDX policy without its TCB floor is refused
    /// (`tcb_floor_missing`), and a TDX policy with an accepted TD that leaves RTMR0, RTMR1 or
    /// RTMR2 unpinned (`rtmr_pins_missing`: MRTD alone is the firmware, any kernel and box under
    /// it pass; without RTMR0 any ACPI code of the host's), however it was built (loading refuses
    /// both, naming the field).
    pub fn new(policy: HardwarePolicy) -> Result<HardwareVerifier> {
        policy
            .floor()
            .map_err(|_| JcError::HardwareRefused("tcb_floor_missing"))?;
        if let HardwarePolicy::Tdx(p) = &policy
            && p.accepted.iter().any(|a| a.boot_chain_unpinned().is_some())
        {
            return Err(JcError::HardwareRefused("rtmr_pins_missing"));
        }
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
