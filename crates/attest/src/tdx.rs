//! Intel TDX quotes (v4 and v5) with supplied collateral.
//!
//! Checked, in this order: the quote's layout, decoded by `dcap-qvl` (quote v4 with a TD 1.0
//! body; v5 with a TD 1.0, TD 1.5 or TD 1.5 ex body — `TEE_TCB_SVN_2`, `MRSERVICETD`, the
//! TD id), plus our check that every length field is exact; its ECDSA P-256 signature over
//! header ‖ body with the attestation key it carries (so a tampered byte in the signed region
//! is `bad_signature` whatever else it breaks); then `dcap-qvl`, offline, against the
//! Intel SGX Root CA compiled in and pinned by fingerprint: the collateral's signatures, chains,
//! CRLs and validity at `now`, the PCK chain, the QE report and its binding of the attestation
//! key, the QE identity, the TCB level matching and the TD attributes (debug, profiling,
//! migration, service TDs refused); then ours: the TCB status against the policy's allow-list
//! (default `UpToDate` only), advisories, platform flags (SMT, dynamic platform, cached keys),
//! MRTD / RTMR0–3 / MRCONFIGID against the pins, MRCONFIGID and REPORT_DATA against what the
//! caller expects, the PPID allow-list. Those fields are read from the report dcap-qvl
//! verified, for its body version; for a TD 1.5 dcap-qvl appraises the TCB the TD was launched
//! on (`TEE_TCB_SVN`) and reports a relaunch advice from the current one (`TEE_TCB_SVN_2`).
//!
//! The collateral's freshness: its validity window, and its TCB evaluation data number against
//! the pin's floor (`min_tcb_eval_data_number`, required in a loaded policy: the box operator
//! fetches the collateral and would otherwise choose its generation).
//!
//! Not checked: MROWNER / MROWNERCONFIG / MRSEAM (shown, not pinned).
//!
//! A TDX box's **identity** (its `measurement` in statements, programs, adverts, pins and
//! release manifests) is [`identity`]: SHA-384 over a domain tag, MRTD, RTMR0, RTMR1 and RTMR2.
//! MRTD alone measures only the TD's firmware (TDVF), which every guest booted under it shares;
//! RTMR0 the firmware's configuration the host supplies, its ACPI tables among it (their AML
//! runs in the box's kernel, ring 0, on events the host raises); the kernel, initrd and command
//! line, and so the box binary, are in RTMR1 and RTMR2. SEV-SNP's
//! MEASUREMENT and Nitro's PCR0 are one register that already covers the image, so they are the
//! identity as reported; TDX needs three, and one 48-byte value keeps every place that names a
//! box (`platform`, 96 hex digits) unchanged.

use serde::{Deserialize, Serialize};

use p256::ecdsa::signature::Verifier as _;

use crate::hexval::{Hex, HexBytes, b64};
pub use crate::verify;
use crate::{ExpectedField as _, Field, Platform, Refusal, Verified, hex32, input};

/// Intel SGX Root CA (DER), compiled in; its fingerprint is checked before use.
const INTEL_ROOT: &[u8] = include_bytes!("../roots/intel-sgx-root-ca.der");
/// SHA-256 of the Intel SGX Root CA certificate (DER).
pub const INTEL_ROOT_FINGERPRINT: [u8; 32] =
    hex32("44a0196b2b99f889b8e149e95b807a350e7424964399e885a7cbb8ccfab674d3");

const TEE_TYPE_TDX: u32 = 0x81;

/// The domain of a TDX box identity's hash, like the crate's other derived values
/// (`skillbox/nvidia-evidence/1`): an identity is never the SHA-384 of anything else. Version 2
/// added RTMR0 (review 26 V2); an identity computed under `/1` (MRTD ‖ RTMR1 ‖ RTMR2) is the hash
/// of other bytes under another tag, so it matches no box: a pin or release manifest naming one
/// refuses every box (`measurement_not_allowed`, `identity`) until it is re-pinned.
pub const IDENTITY_DOMAIN: &[u8] = b"skillbox/tdx-identity/2";

/// A TDX box's identity: SHA-384(`skillbox/tdx-identity/2` ‖ MRTD ‖ RTMR0 ‖ RTMR1 ‖ RTMR2): the
/// firmware, the configuration the host hands it (ACPI tables, whose AML the box's kernel runs;
/// so one identity per VM shape), and the boot chain (kernel, initrd, command line: the box
/// binary) in one value. A box running another binary under the same firmware is another box,
/// and so is the same binary under ACPI tables of the host's making.
pub fn identity(
    mr_td: &[u8; 48],
    rtmr0: &[u8; 48],
    rtmr1: &[u8; 48],
    rtmr2: &[u8; 48],
) -> [u8; 48] {
    use sha2::{Digest as _, Sha384};
    let mut h = Sha384::new();
    h.update(IDENTITY_DOMAIN);
    h.update(mr_td);
    h.update(rtmr0);
    h.update(rtmr1);
    h.update(rtmr2);
    h.finalize().into()
}

/// The retired `skillbox/tdx-identity/1` of these registers (MRTD ‖ RTMR1 ‖ RTMR2, no RTMR0).
/// Never accepted: only recognised, so a pin still naming one is refused at load with the
/// identity to write instead of loading and then matching no box.
pub fn retired_identity_v1(mr_td: &[u8; 48], rtmr1: &[u8; 48], rtmr2: &[u8; 48]) -> [u8; 48] {
    use sha2::{Digest as _, Sha384};
    let mut h = Sha384::new();
    h.update(b"skillbox/tdx-identity/1");
    h.update(mr_td);
    h.update(rtmr1);
    h.update(rtmr2);
    h.finalize().into()
}

const ATT_KEY_ECDSA_P256: u16 = 2;

/// What a box serves: the quote and the collateral its operator fetched (Intel PCS or a PCCS).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    #[serde(with = "b64")]
    pub quote: Vec<u8>,
    pub collateral: dcap_qvl::QuoteCollateralV3,
}

impl Evidence {
    /// From files: the quote raw or hex, the collateral as dcap-qvl's JSON.
    pub fn from_files(quote: &[u8], collateral_json: &[u8]) -> Result<Evidence, Refusal> {
        let quote = if quote.first().is_some_and(|b| *b == 4 || *b == 5) {
            quote.to_vec()
        } else {
            input::raw_or_hex_any(quote, "TDX quote")?
        };
        if collateral_json.len() > input::MAX_INPUT {
            return Err(Refusal::TooLarge("TDX collateral"));
        }
        let collateral = serde_json::from_slice(collateral_json)
            .map_err(|_| Refusal::Malformed("TDX collateral JSON"))?;
        Ok(Evidence { quote, collateral })
    }

    /// The collateral's TCB evaluation data number as [`verify`] compares it with the floor:
    /// the lower of the TCB info's and the QE identity's (what `--show-identity` prints for a
    /// pin). Read, not verified: [`verify`] checks the signatures over both.
    pub fn tcb_eval_data_number(&self) -> Result<u32, Refusal> {
        let number = |json: &str| {
            serde_json::from_str::<serde_json::Value>(json)
                .ok()?
                .get("tcbEvaluationDataNumber")?
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
        };
        let tcb = number(&self.collateral.tcb_info);
        let qe = number(&self.collateral.qe_identity);
        tcb.zip(qe)
            .map(|(t, q)| t.min(q))
            .ok_or(Refusal::CollateralInvalid(
                "collateral names no TCB evaluation data number",
            ))
    }
}

/// What the verifier expects in this quote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expected {
    pub report_data: Option<[u8; 64]>,
    /// MRCONFIGID: a box puts its configuration hash there.
    pub mr_config_id: Option<[u8; 48]>,
}

/// TCB statuses, as Intel names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TcbStatus {
    UpToDate,
    SWHardeningNeeded,
    ConfigurationNeeded,
    ConfigurationAndSWHardeningNeeded,
    OutOfDate,
    OutOfDateConfigurationNeeded,
    TDRelaunchAdvised,
    TDRelaunchAdvisedConfigurationNeeded,
    Revoked,
}

impl TcbStatus {
    pub fn as_str(&self) -> &'static str {
        match self {
            TcbStatus::UpToDate => "UpToDate",
            TcbStatus::SWHardeningNeeded => "SWHardeningNeeded",
            TcbStatus::ConfigurationNeeded => "ConfigurationNeeded",
            TcbStatus::ConfigurationAndSWHardeningNeeded => "ConfigurationAndSWHardeningNeeded",
            TcbStatus::OutOfDate => "OutOfDate",
            TcbStatus::OutOfDateConfigurationNeeded => "OutOfDateConfigurationNeeded",
            TcbStatus::TDRelaunchAdvised => "TDRelaunchAdvised",
            TcbStatus::TDRelaunchAdvisedConfigurationNeeded => {
                "TDRelaunchAdvisedConfigurationNeeded"
            }
            TcbStatus::Revoked => "Revoked",
        }
    }

    fn from_dcap(s: dcap_qvl::TcbStatus) -> TcbStatus {
        use dcap_qvl::TcbStatus as D;
        match s {
            D::UpToDate => TcbStatus::UpToDate,
            D::SWHardeningNeeded => TcbStatus::SWHardeningNeeded,
            D::ConfigurationNeeded => TcbStatus::ConfigurationNeeded,
            D::ConfigurationAndSWHardeningNeeded => TcbStatus::ConfigurationAndSWHardeningNeeded,
            D::OutOfDate => TcbStatus::OutOfDate,
            D::OutOfDateConfigurationNeeded => TcbStatus::OutOfDateConfigurationNeeded,
            D::TDRelaunchAdvised => TcbStatus::TDRelaunchAdvised,
            D::TDRelaunchAdvisedConfigurationNeeded => {
                TcbStatus::TDRelaunchAdvisedConfigurationNeeded
            }
            D::Revoked => TcbStatus::Revoked,
        }
    }

    fn to_dcap(self) -> dcap_qvl::TcbStatus {
        use dcap_qvl::TcbStatus as D;
        match self {
            TcbStatus::UpToDate => D::UpToDate,
            TcbStatus::SWHardeningNeeded => D::SWHardeningNeeded,
            TcbStatus::ConfigurationNeeded => D::ConfigurationNeeded,
            TcbStatus::ConfigurationAndSWHardeningNeeded => D::ConfigurationAndSWHardeningNeeded,
            TcbStatus::OutOfDate => D::OutOfDate,
            TcbStatus::OutOfDateConfigurationNeeded => D::OutOfDateConfigurationNeeded,
            TcbStatus::TDRelaunchAdvised => D::TDRelaunchAdvised,
            TcbStatus::TDRelaunchAdvisedConfigurationNeeded => {
                D::TDRelaunchAdvisedConfigurationNeeded
            }
            TcbStatus::Revoked => D::Revoked,
        }
    }
}

/// One accepted TD: its [`identity`], or MRTD, RTMR0, RTMR1 and RTMR2 (which it is made of), and
/// the other registers when set. MRTD measures only the TD's firmware (TDVF); the kernel, initrd
/// and command line, and so the box binary the image carries, are measured into RTMR1 and RTMR2,
/// so an entry without them accepts any guest the host boots under that firmware. RTMR0 measures
/// the configuration the host hands the firmware, the ACPI tables among it: their AML bytecode
/// runs in the box's kernel (ring 0) on events the host raises and can read any guest memory, so
/// an entry without it accepts the honest box running the host's code (review 26 V2). It
/// changes with the VM's shape (vCPUs, memory): one entry per shape. RTMR3 (extended at run
/// time, empty unless the guest extends it) stays optional. An entry naming only `identity` is
/// what a release log (or a pin's `measurements`) gives: the identity pins the four registers it
/// hashes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TdMeasurements {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<Hex<48>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mr_td: Option<Hex<48>>,
    #[serde(default)]
    pub rtmr0: Option<Hex<48>>,
    #[serde(default)]
    pub rtmr1: Option<Hex<48>>,
    #[serde(default)]
    pub rtmr2: Option<Hex<48>>,
    #[serde(default)]
    pub rtmr3: Option<Hex<48>>,
    #[serde(default)]
    pub mr_config_id: Option<Hex<48>>,
}

/// What a node pins for a TDX box.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Accepted TDs; the quote must match one entry on every field the entry sets. Each entry
    /// must set `identity`, or `mr_td`, `rtmr0`, `rtmr1` and `rtmr2` (refused at load otherwise,
    /// naming the field); one setting both must agree.
    #[serde(deserialize_with = "boot_chain_pinned")]
    pub accepted: Vec<TdMeasurements>,
    /// Accepted TCB statuses (default: `UpToDate` only). `Revoked` is never accepted.
    #[serde(default = "up_to_date")]
    pub tcb_statuses: Vec<TcbStatus>,
    /// Advisory ids (e.g. `INTEL-SA-00837`) that refuse a platform whatever its status.
    #[serde(default)]
    pub rejected_advisories: Vec<String>,
    /// Accept a platform whose PCK says SMT (hyperthreading) is enabled. Default true: nearly
    /// every TDX host (the Intel sample included) runs with SMT on; set false to refuse them.
    #[serde(default = "crate::yes")]
    pub allow_smt: bool,
    /// Accept a platform whose PCK says it is a dynamic (multi-package) platform. Default
    /// true, for the same reason (cloud hosts are).
    #[serde(default = "crate::yes")]
    pub allow_dynamic_platform: bool,
    /// Accept a platform whose keys Intel's registration service caches. Default true.
    #[serde(default = "crate::yes")]
    pub allow_cached_keys: bool,
    /// Seconds an `OutOfDate` platform stays acceptable after its TCB level's date (only when
    /// `OutOfDate` is in `tcb_statuses`). Default 0.
    #[serde(default)]
    pub platform_grace_period_secs: u64,
    /// The collateral's freshness floor: its TCB evaluation data number (the lower of the TCB
    /// info's and the QE identity's) must be at least this. Required when the policy is loaded
    /// and at least 1 — the box operator fetches the collateral, and at 0 any generation
    /// however old, from before Intel's fixes for published flaws, passes. `skillbox box
    /// --attester tdx --show-identity` prints the box's collateral's. 0 only in
    /// [`Policy::unpinned`].
    #[serde(deserialize_with = "eval_floor")]
    pub min_tcb_eval_data_number: u32,
    /// Accepted PCK PPIDs (hex); empty = any platform.
    #[serde(default)]
    pub ppids: Vec<HexBytes>,
}

/// A loaded policy's `accepted`: at least one entry, each pinning the boot chain (`identity`, or
/// `rtmr1` and `rtmr2` besides the firmware's `mr_td`, which alone any patched kernel or box
/// passes, and `rtmr0`, without which any ACPI code of the host's passes), and an entry naming
/// both an identity and its registers naming one TD.
fn boot_chain_pinned<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Vec<TdMeasurements>, D::Error> {
    let accepted: Vec<TdMeasurements> = crate::nonempty(d)?;
    for (i, a) in accepted.iter().enumerate() {
        match a.boot_chain_unpinned() {
            Some("mr_td") => {
                return Err(serde::de::Error::custom(format!(
                    "accepted[{i}].identity (or mr_td, rtmr0, rtmr1 and rtmr2) is required: the \
                     TD's identity hashes its firmware, its ACPI tables and its boot chain; \
                     `skillbox box --attester tdx --show-identity` prints them"
                )));
            }
            Some("rtmr0") => {
                return Err(serde::de::Error::custom(format!(
                    "accepted[{i}].rtmr0 is required: it measures the ACPI tables the host \
                     hands the firmware, whose code runs in the box's kernel, so without it the \
                     box passes running code of its host's; `skillbox box --attester tdx \
                     --show-identity` prints it (one entry per VM shape)"
                )));
            }
            Some(field) => {
                return Err(serde::de::Error::custom(format!(
                    "accepted[{i}].{field} is required: mr_td measures only the firmware, rtmr1 \
                     and rtmr2 the kernel, initrd and command line (the box binary), so without \
                     them any guest booted under that firmware passes; `skillbox box --attester \
                     tdx --show-identity` prints them"
                )));
            }
            None => {}
        }
        if let (Some(named), Some(made)) = (&a.identity, a.registers_identity())
            && named.0 != made
        {
            return Err(serde::de::Error::custom(format!(
                "accepted[{i}].identity is not the identity of its mr_td, rtmr0, rtmr1 and rtmr2 \
                 ({}): the entry names two TDs",
                hex::encode(made)
            )));
        }
    }
    Ok(accepted)
}

impl TdMeasurements {
    /// The entry that accepts exactly the TD of this identity.
    pub fn of_identity(identity: [u8; 48]) -> TdMeasurements {
        TdMeasurements {
            identity: Some(Hex(identity)),
            ..TdMeasurements::default()
        }
    }

    /// The first boot-chain field this entry leaves unpinned (`None`: its identity, or MRTD,
    /// RTMR0, RTMR1 and RTMR2, are pinned). RTMR0 is asked for last: an entry of the firmware
    /// alone is told about the kernel first, as before RTMR0 joined the identity.
    pub fn boot_chain_unpinned(&self) -> Option<&'static str> {
        if self.identity.is_some() {
            return None;
        }
        match (&self.mr_td, &self.rtmr1, &self.rtmr2, &self.rtmr0) {
            (None, _, _, _) => Some("mr_td"),
            (_, None, _, _) => Some("rtmr1"),
            (_, _, None, _) => Some("rtmr2"),
            (_, _, _, None) => Some("rtmr0"),
            _ => None,
        }
    }

    /// The identity of this entry's MRTD, RTMR0, RTMR1 and RTMR2, when it names all four.
    pub fn registers_identity(&self) -> Option<[u8; 48]> {
        match (&self.mr_td, &self.rtmr0, &self.rtmr1, &self.rtmr2) {
            (Some(td), Some(r0), Some(r1), Some(r2)) => Some(identity(&td.0, &r0.0, &r1.0, &r2.0)),
            _ => None,
        }
    }

    /// The retired `/1` identity of this entry's MRTD, RTMR1 and RTMR2, when it names them
    /// ([`retired_identity_v1`]: to recognise an old pin, never to accept one).
    pub fn retired_identity_v1(&self) -> Option<[u8; 48]> {
        match (&self.mr_td, &self.rtmr1, &self.rtmr2) {
            (Some(td), Some(r1), Some(r2)) => Some(retired_identity_v1(&td.0, &r1.0, &r2.0)),
            _ => None,
        }
    }

    /// The box identity this entry accepts: the one it names, or that of its registers.
    pub fn box_identity(&self) -> Option<[u8; 48]> {
        self.identity
            .as_ref()
            .map(|h| h.0)
            .or_else(|| self.registers_identity())
    }

    /// Why `r` is not this TD (`None`: it is), and whether `r` runs the firmware this entry
    /// names (a miss on a TD of that firmware says more than "another firmware").
    fn miss(&self, r: &TdReport, r_identity: &[u8; 48]) -> Option<(Refusal, bool)> {
        if let Some(want) = &self.mr_td
            && want.0 != r.mr_td
        {
            return Some((Refusal::MeasurementNotAllowed("MRTD"), false));
        }
        let same_firmware = self.mr_td.is_some();
        let registers = [&self.rtmr0, &self.rtmr1, &self.rtmr2, &self.rtmr3];
        let names = ["RTMR0", "RTMR1", "RTMR2", "RTMR3"];
        for i in 0..4 {
            if let Some(want) = registers[i]
                && want.0 != r.rtmr[i]
            {
                return Some((Refusal::MeasurementNotAllowed(names[i]), same_firmware));
            }
        }
        if let Some(want) = &self.identity
            && want.0 != *r_identity
        {
            return Some((Refusal::MeasurementNotAllowed("identity"), same_firmware));
        }
        if let Some(want) = &self.mr_config_id
            && want.0 != r.mr_config_id
        {
            return Some((Refusal::MeasurementNotAllowed("MRCONFIGID"), true));
        }
        None
    }
}

/// A loaded policy's `min_tcb_eval_data_number`: present (serde refuses it absent, naming the
/// field) and not 0, which accepts collateral of any generation as no floor does.
fn eval_floor<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    match u32::deserialize(d)? {
        0 => Err(serde::de::Error::custom(
            "min_tcb_eval_data_number 0 accepts collateral of any age: pin the evaluation \
             data number of the box's collateral",
        )),
        n => Ok(n),
    }
}

fn up_to_date() -> Vec<TcbStatus> {
    vec![TcbStatus::UpToDate]
}

impl Policy {
    /// Pins no measurement (they are reported); every other check at its strict default.
    pub fn unpinned() -> Policy {
        Policy {
            accepted: Vec::new(),
            tcb_statuses: up_to_date(),
            rejected_advisories: Vec::new(),
            allow_smt: true,
            allow_dynamic_platform: true,
            allow_cached_keys: true,
            platform_grace_period_secs: 0,
            min_tcb_eval_data_number: 0,
            ppids: Vec::new(),
        }
    }

    /// Accept exactly these measurement sets on collateral of evaluation data number at least
    /// `min_tcb_eval_data_number` (a pin has a floor); every other check at its strict default.
    pub fn pinned(accepted: Vec<TdMeasurements>, min_tcb_eval_data_number: u32) -> Policy {
        Policy {
            accepted,
            min_tcb_eval_data_number,
            ..Policy::unpinned()
        }
    }
}

/// The TD report fields, read from the quote body as dcap-qvl decoded it for its body version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TdReport {
    pub quote_version: u16,
    /// Which TD report the quote carries: `TD 1.0` (v4, or v5 body type 2), `TD 1.5` (v5
    /// body type 3) or `TD 1.5 ex` (v5 body type 4).
    pub body: TdBody,
    pub tee_tcb_svn: [u8; 16],
    pub mr_seam: [u8; 48],
    pub mr_signer_seam: [u8; 48],
    pub seam_attributes: [u8; 8],
    pub td_attributes: [u8; 8],
    pub xfam: [u8; 8],
    pub mr_td: [u8; 48],
    pub mr_config_id: [u8; 48],
    pub mr_owner: [u8; 48],
    pub mr_owner_config: [u8; 48],
    pub rtmr: [[u8; 48]; 4],
    pub report_data: [u8; 64],
    /// TD 1.5 and later: the TCB the TD runs on now (after TD-preserving module updates);
    /// `tee_tcb_svn` is the one it was launched on.
    pub tee_tcb_svn_2: Option<[u8; 16]>,
    /// TD 1.5 and later.
    pub mr_service_td: Option<[u8; 48]>,
    /// TD 1.5 ex only: the TD instance id (regenerated on relaunch).
    pub td_id: Option<[u8; 32]>,
}

/// The TD report body versions a quote can carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TdBody {
    Td10,
    Td15,
    Td15Ex,
}

impl TdBody {
    pub fn as_str(&self) -> &'static str {
        match self {
            TdBody::Td10 => "TD 1.0",
            TdBody::Td15 => "TD 1.5",
            TdBody::Td15Ex => "TD 1.5 ex",
        }
    }
}

impl TdReport {
    /// This TD's box [`identity`] (MRTD, RTMR0, RTMR1, RTMR2).
    pub fn identity(&self) -> [u8; 48] {
        identity(&self.mr_td, &self.rtmr[0], &self.rtmr[1], &self.rtmr[2])
    }

    /// The fields of whichever TD report dcap-qvl decoded (an SGX enclave report is not a TD).
    fn from_dcap(quote_version: u16, r: &dcap_qvl::quote::Report) -> Result<TdReport, Refusal> {
        use dcap_qvl::quote::Report as R;
        let b = r
            .as_td10()
            .ok_or(Refusal::Unsupported("TEE type (not TDX)"))?;
        let body = match r {
            R::TD15Ex(_) => TdBody::Td15Ex,
            R::TD15(_) => TdBody::Td15,
            _ => TdBody::Td10,
        };
        Ok(TdReport {
            quote_version,
            body,
            tee_tcb_svn: b.tee_tcb_svn,
            mr_seam: b.mr_seam,
            mr_signer_seam: b.mr_signer_seam,
            seam_attributes: b.seam_attributes,
            td_attributes: b.td_attributes,
            xfam: b.xfam,
            mr_td: b.mr_td,
            mr_config_id: b.mr_config_id,
            mr_owner: b.mr_owner,
            mr_owner_config: b.mr_owner_config,
            rtmr: [b.rt_mr0, b.rt_mr1, b.rt_mr2, b.rt_mr3],
            report_data: b.report_data,
            tee_tcb_svn_2: r.as_td15().map(|t| t.tee_tcb_svn2),
            mr_service_td: r.as_td15().map(|t| t.mr_service_td),
            td_id: r.as_td15_ex().map(|t| t.td_id),
        })
    }
}

/// A parsed quote: the TD report, the signed byte range, the signature and attestation key.
#[derive(Clone, Debug)]
pub struct Quote {
    pub report: TdReport,
    pub attestation_key_type: u16,
    pub tee_type: u32,
    pub signed_len: usize,
    pub signature: [u8; 64],
    pub attestation_key: [u8; 64],
}

fn u16le(b: &[u8], at: usize) -> Result<u16, Refusal> {
    let two = b
        .get(at..at + 2)
        .ok_or(Refusal::Malformed("TDX quote is truncated"))?;
    Ok(u16::from_le_bytes([two[0], two[1]]))
}

/// Sort dcap-qvl's quote decoding errors (text, version pinned) into our codes.
fn classify_layout(text: &str) -> Refusal {
    if text.contains("body type") {
        Refusal::Unsupported("TDX v5 body type")
    } else if text.contains("TEE type") {
        Refusal::Unsupported("TEE type (not TDX)")
    } else if text.contains("quote version") {
        Refusal::Unsupported("TDX quote version")
    } else if text.contains("body size") {
        Refusal::Malformed("TDX v5 body size")
    } else {
        Refusal::Malformed("TDX quote layout")
    }
}

/// QE report certification data: the QE report (384), its signature (64), then the QE
/// authentication data and the PCK certification data, each length-prefixed.
const QE_REPORT_CERT_TYPE: u16 = 6;

impl Quote {
    /// Parse with dcap-qvl's decoder (quote v4 and v5, TD 1.0 / 1.5 / 1.5 ex bodies), then
    /// require the framing to be exact: every length field accounts for exactly the bytes
    /// after it, so no unsigned bytes hide behind a length that is off by some zeros.
    pub fn parse(raw: &[u8]) -> Result<Quote, Refusal> {
        if raw.len() > input::MAX_INPUT {
            return Err(Refusal::TooLarge("TDX quote"));
        }
        // The version decides the layout: read it first so an SGX v3 quote is `unsupported`
        // rather than whatever dcap-qvl's SGX decoder makes of it.
        let version = u16le(raw, 0)?;
        if version != 4 && version != 5 {
            return Err(Refusal::Unsupported("TDX quote version"));
        }
        let q =
            dcap_qvl::quote::Quote::parse(raw).map_err(|e| classify_layout(&format!("{e:#}")))?;
        let report = TdReport::from_dcap(version, &q.report)?;
        let dcap_qvl::quote::AuthData::V4(auth) = &q.auth_data else {
            return Err(Refusal::Unsupported("TDX quote auth data version"));
        };
        if auth.certification_data.cert_type != QE_REPORT_CERT_TYPE {
            return Err(Refusal::Unsupported("TDX certification data type"));
        }
        let qe = &auth.qe_report_data;
        let qe_len =
            384 + 64 + 2 + qe.qe_auth_data.data.len() + 6 + qe.certification_data.body.data.len();
        if auth.certification_data.body.data.len() != qe_len {
            return Err(Refusal::Malformed(
                "TDX QE certification data length disagrees with its fields",
            ));
        }
        let signed_len = q.signed_length();
        let declared = raw
            .get(signed_len..signed_len + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or(Refusal::Malformed("TDX quote is truncated"))?;
        // Signature (64), attestation key (64), certification data (type 2, size 4, data).
        let auth_len = 134 + auth.certification_data.body.data.len();
        let end = signed_len + 4 + auth_len;
        // Quotes read from configfs-tsm or a PCCS cache may be zero-padded; anything else
        // after the auth data is refused.
        if declared != auth_len || raw.len() < end || raw[end..].iter().any(|&b| b != 0) {
            return Err(Refusal::Malformed(
                "TDX quote length disagrees with its header",
            ));
        }
        Ok(Quote {
            report,
            attestation_key_type: q.header.attestation_key_type,
            tee_type: q.header.tee_type,
            signed_len,
            signature: auth.ecdsa_signature,
            attestation_key: auth.ecdsa_attestation_key,
        })
    }

    fn check_signature(&self, raw: &[u8]) -> Result<(), Refusal> {
        let mut point = [0x04u8; 65];
        point[1..].copy_from_slice(&self.attestation_key);
        let key = p256::ecdsa::VerifyingKey::from_sec1_bytes(&point)
            .map_err(|_| Refusal::BadSignature("attestation key is not a P-256 point"))?;
        let sig = p256::ecdsa::Signature::from_slice(&self.signature)
            .map_err(|_| Refusal::BadSignature("quote signature scalars"))?;
        key.verify(&raw[..self.signed_len], &sig)
            .map_err(|_| Refusal::BadSignature("quote signature"))
    }
}

/// TD attributes bit 0: the TD is debuggable (the host can read and write its memory).
const TD_ATTR_DEBUG: u8 = 1;

/// Sort a dcap-qvl refusal (anyhow text, version pinned in Cargo.toml) into our closed codes.
/// The text only chooses the code; it is never passed on.
fn classify(text: &str) -> Refusal {
    let has = |needle: &str| text.contains(needle);
    if has("TCB status is invalid: Revoked") {
        Refusal::TcbNotAllowed("Revoked")
    } else if has("No matching TCB level") || has("TCB level check") {
        Refusal::TcbNotAllowed("no TCB level matches the platform")
    } else if has("CertRevoked") {
        Refusal::CertificateRevoked
    } else if has("expired")
        || has("Expired")
        || has("in the future")
        || has("NotValidYet")
        || has("CrlExpired")
    {
        Refusal::CollateralExpired
    } else if has("UnknownIssuer") || has("root ca") {
        Refusal::ForeignRoot
    } else if has("Debug mode") {
        Refusal::DebugEnabled("TD attributes DEBUG bit")
    } else if has("profiling")
        || has("migration")
        || has("Reserved bits in TD attributes")
        || has("SERVTD")
        || has("SEPT_VE_DISABLE")
        || has("service TD")
    {
        Refusal::AttributesNotAllowed("TD attributes")
    } else if has("Fmspc mismatch") || has("non-TDX TCB info") || has("QE Identity id/version") {
        Refusal::CollateralInvalid("collateral is for another platform")
    } else if has("ISV enclave report signature") {
        Refusal::BadSignature("quote signature")
    } else if has("qe_report") || has("QE report") {
        Refusal::BadSignature("QE report does not vouch for the attestation key")
    } else if has("Signature is invalid") || has("InvalidSignature") {
        Refusal::CollateralInvalid("collateral signature")
    } else if has("PCK") || has("Certificate chain") {
        Refusal::BadChain("PCK certificate chain")
    } else if has("TcbInfo") || has("QeIdentity") || has("CRL") || has("crl") {
        Refusal::CollateralInvalid("collateral does not parse")
    } else if has("decode") || has("Unsupported") || has("Unknown QE vendor") || has("parse") {
        Refusal::Malformed("TDX quote or collateral")
    } else {
        Refusal::CollateralInvalid("collateral")
    }
}

/// A verifier for one policy: the pinned root checked once (every call re-verifies the
/// collateral: dcap-qvl has no cache).
pub type Verifier = crate::Verifier<Evidence>;

impl crate::PlatformEvidence for Evidence {
    type Expected = Expected;
    type Policy = Policy;
    /// Nothing to keep: dcap-qvl takes the root's bytes, checked here against the pin.
    type Pinned = ();
    /// Nothing cached: dcap-qvl verifies the PCK chain with the collateral on every call.
    type Chain = ();

    fn pinned() -> Result<(), Refusal> {
        if crate::fingerprint(INTEL_ROOT) != INTEL_ROOT_FINGERPRINT {
            return Err(Refusal::ForeignRoot);
        }
        Ok(())
    }

    fn check(&self, on: &Verifier, expected: &Expected, now_ms: u64) -> Result<Verified, Refusal> {
        let policy = on.policy();
        let raw = &self.quote;
        let quote = Quote::parse(raw)?;
        quote.check_signature(raw)?;
        // Header fields that do not decide the layout are read once they are authenticated.
        if quote.attestation_key_type != ATT_KEY_ECDSA_P256 {
            return Err(Refusal::Unsupported("TDX attestation key type"));
        }
        if quote.tee_type != TEE_TYPE_TDX {
            return Err(Refusal::Unsupported("TEE type (not TDX)"));
        }

        let now_secs = now_ms / 1000;
        let claims = dcap_qvl::verify::QuoteVerifier::new(INTEL_ROOT.to_vec())
            .verify_with_policy(
                raw,
                &self.collateral,
                now_secs,
                &dcap_qvl::QuotePolicy::claims_only(now_secs),
            )
            .map_err(|e| classify(&format!("{e:#}")))?;
        if claims.tee_type != TEE_TYPE_TDX {
            return Err(Refusal::Unsupported("TEE type (not TDX)"));
        }

        // Every field the policy checks is read from the report dcap-qvl verified, decoded
        // for its body version (TD 1.0, 1.5, 1.5 ex).
        let verified = TdReport::from_dcap(quote.report.quote_version, &claims.report)?;
        let r = &verified;
        if r.td_attributes[0] & TD_ATTR_DEBUG != 0 {
            return Err(Refusal::DebugEnabled("TD attributes DEBUG bit"));
        }
        if claims.earliest_expiration_date < now_secs || claims.latest_issue_date > now_secs {
            return Err(Refusal::CollateralExpired);
        }
        let status = TcbStatus::from_dcap(claims.tcb.status);
        if status == TcbStatus::Revoked || !policy.tcb_statuses.contains(&status) {
            return Err(Refusal::TcbNotAllowed(status.as_str()));
        }
        let pck = &claims.platform.pck;
        let flag = |f: dcap_qvl::PckCertFlag| f == dcap_qvl::PckCertFlag::True;
        if flag(pck.smt_enabled) && !policy.allow_smt {
            return Err(Refusal::AttributesNotAllowed("SMT enabled on the platform"));
        }
        if flag(pck.dynamic_platform) && !policy.allow_dynamic_platform {
            return Err(Refusal::AttributesNotAllowed("dynamic platform"));
        }
        if flag(pck.cached_keys) && !policy.allow_cached_keys {
            return Err(Refusal::AttributesNotAllowed("cached platform keys"));
        }
        // The rest of Intel's appraisal (advisories, grace periods, QE TCB date, evaluation
        // data number) through dcap-qvl's own policy, built from ours.
        let mut dp = dcap_qvl::QuotePolicy::strict(now_secs)
            .allow_smt(policy.allow_smt)
            .allow_dynamic_platform(policy.allow_dynamic_platform)
            .allow_cached_keys(policy.allow_cached_keys)
            .reject_advisories(&policy.rejected_advisories);
        for s in &policy.tcb_statuses {
            if *s != TcbStatus::Revoked {
                dp = dp.allow_status(s.to_dcap());
            }
        }
        if policy.platform_grace_period_secs > 0 {
            dp = dp.platform_grace_period(std::time::Duration::from_secs(
                policy.platform_grace_period_secs,
            ));
        }
        dcap_qvl::Policy::validate(&dp, &claims).map_err(|_| {
            Refusal::TcbNotAllowed("advisory, TCB date or evaluation number refused by policy")
        })?;
        // The freshness floor, ours: collateral from before the pinned evaluation (an
        // operator's old, signed and still valid TCB info that rates a flawed TCB up to date).
        if claims.tcb.eval_data_number < policy.min_tcb_eval_data_number {
            return Err(Refusal::TcbNotAllowed(
                "collateral evaluation data number below the pinned floor",
            ));
        }

        expected
            .report_data
            .check(Some(&r.report_data), Refusal::ReportDataMismatch)?;
        expected
            .mr_config_id
            .check(Some(&r.mr_config_id), Refusal::ConfigIdMismatch)?;
        let pinned = !policy.accepted.is_empty();
        if pinned {
            check_measurements(r, &policy.accepted)?;
        }
        let ppid = &claims.platform.pck.ppid;
        if !crate::admits(&policy.ppids, |p| &p.0 == ppid) {
            return Err(Refusal::InstanceNotAllowed);
        }

        let identity = hex::encode(r.identity());
        let mut measurements = vec![
            Field::new("identity", identity.clone()),
            Field::new("mr_td", hex::encode(r.mr_td)),
            Field::new("rtmr0", hex::encode(r.rtmr[0])),
            Field::new("rtmr1", hex::encode(r.rtmr[1])),
            Field::new("rtmr2", hex::encode(r.rtmr[2])),
            Field::new("rtmr3", hex::encode(r.rtmr[3])),
            Field::new("mr_config_id", hex::encode(r.mr_config_id)),
            Field::new("mr_owner", hex::encode(r.mr_owner)),
            Field::new("mr_owner_config", hex::encode(r.mr_owner_config)),
            Field::new("mr_seam", hex::encode(r.mr_seam)),
        ];
        if let Some(m) = r.mr_service_td {
            measurements.push(Field::new("mr_service_td", hex::encode(m)));
        }
        let advisories: Vec<&str> = claims
            .tcb
            .advisory_ids
            .iter()
            .map(String::as_str)
            .filter(|a| {
                a.len() <= 32
                    && a.bytes()
                        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'-')
            })
            .collect();
        Ok(Verified {
            platform: Platform::Tdx,
            measurement: identity,
            measurements,
            measurements_pinned: pinned,
            report_data: Some(hex::encode(r.report_data)),
            report_data_checked: expected.report_data.is_some(),
            nonce: None,
            nonce_checked: false,
            attributes: vec![
                Field::new("quote_version", r.quote_version.to_string()),
                Field::new("td_body", r.body.as_str()),
                Field::new("td_attributes", hex::encode(r.td_attributes)),
                Field::new("debug", "false"),
                Field::new("xfam", hex::encode(r.xfam)),
                Field::new("seam_attributes", hex::encode(r.seam_attributes)),
                Field::new("tee_tcb_svn", hex::encode(r.tee_tcb_svn)),
                Field::new(
                    "tee_tcb_svn_2",
                    r.tee_tcb_svn_2.map(hex::encode).unwrap_or_default(),
                ),
                Field::new("td_id", r.td_id.map(hex::encode).unwrap_or_default()),
                Field::new("fmspc", hex::encode(pck.fmspc)),
                Field::new("advisories", advisories.join(",")),
                Field::new(
                    "tcb_eval_data_number",
                    claims.tcb.eval_data_number.to_string(),
                ),
                Field::new(
                    "mr_config_id_checked",
                    expected.mr_config_id.is_some().to_string(),
                ),
            ],
            tcb_status: Some(status.as_str().to_owned()),
            instance_id: (!ppid.is_empty() && ppid.iter().any(|&b| b != 0))
                .then(|| hex::encode(ppid)),
            valid_from_ms: claims.latest_issue_date.saturating_mul(1000),
            valid_until_ms: claims.earliest_expiration_date.saturating_mul(1000),
            verified_at_ms: now_ms,
        })
    }
}

/// `r` against the accepted TDs: one must match on every field it sets. Refused with the miss of
/// the first entry naming `r`'s firmware, or else of the first entry.
fn check_measurements(r: &TdReport, accepted: &[TdMeasurements]) -> Result<(), Refusal> {
    let r_identity = r.identity();
    let mut refusal: Option<(Refusal, bool)> = None;
    for a in accepted {
        match a.miss(r, &r_identity) {
            None => return Ok(()),
            Some((miss, same_firmware)) => {
                if refusal
                    .as_ref()
                    .is_none_or(|(_, named)| same_firmware && !named)
                {
                    refusal = Some((miss, same_firmware));
                }
            }
        }
    }
    Err(refusal.map_or(Refusal::MeasurementNotAllowed("MRTD"), |(miss, _)| miss))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compiled_root_is_the_pinned_one() {
        assert_eq!(crate::fingerprint(INTEL_ROOT), INTEL_ROOT_FINGERPRINT);
    }

    #[test]
    fn classify_sorts_dcap_text() {
        assert_eq!(
            classify("No matching TCB level found"),
            Refusal::TcbNotAllowed("no TCB level matches the platform")
        );
        assert_eq!(classify("TCBInfo expired"), Refusal::CollateralExpired);
        assert_eq!(
            classify("Debug mode is enabled"),
            Refusal::DebugEnabled("TD attributes DEBUG bit")
        );
        assert_eq!(
            classify("something new"),
            Refusal::CollateralInvalid("collateral")
        );
    }

    #[test]
    fn short_quotes_are_malformed() {
        for n in [0, 1, 10, 47, 48, 100, 631, 636] {
            let mut q = vec![0u8; n];
            if n >= 8 {
                q[0] = 4;
                q[2] = 2;
                q[4] = 0x81;
            }
            assert!(Quote::parse(&q).is_err(), "{n}");
        }
    }
}
