//! NVIDIA GPU evidence (Hopper, Blackwell): an SPDM 1.1 GET_MEASUREMENTS exchange, parsed as
//! DSP0274 defines it.
//!
//! The evidence is the 37-byte request (`GET_MEASUREMENTS`: version, code `E0`, param1 with the
//! signature bit, param2 the operation — `FF`, every block, any other is `malformed` — the
//! requester's 32-byte nonce, the slot) followed by the `MEASUREMENTS` response: header, number
//! of blocks, the 3-byte measurement record length and the record (DMTF measurement blocks), the
//! responder nonce, the opaque data with its own 2-byte length, then the signature, whose size
//! is the one of the algorithm the chain's leaf names (ECDSA P-384: 96 bytes, the only key
//! NVIDIA GPUs use; another leaf key is `unsupported`). The driver may hand the report over in a
//! larger buffer: zero bytes after the signature are accepted (outside the signed region),
//! anything else is `malformed`. SPDM 1.2 responses parse the same, but their signature covers
//! the version/capabilities/algorithms negotiation, which GPU evidence does not carry: refused
//! `unsupported`.
//!
//! Checked, in this order: the certificate chain from the leaf up to the NVIDIA Device Identity
//! CA **pinned by fingerprint** (a chain ending in another self-signed root is `foreign_root`),
//! valid at `now`; the exact layout of request and response (every length agrees, blocks are
//! DMTF-format, indices unique, nothing left over but zero padding); the signature over request
//! ‖ response up to the signature with the leaf's key; the requester nonce against what the
//! caller expects; every measurement block the policy pins (golden values from NVIDIA's RIMs,
//! configured offline — no online service is asked), and, when it pins any, that it pins every
//! block the report carries; the device id allow-list.
//!
//! Several GPUs: [`Evidence::list_from_sdk_json`] reads NVIDIA's serialized evidence (the
//! attestation SDK's and nvtrust's JSON list, one entry per GPU) and
//! [`Verifier::verify_all`] verifies every entry, refusing a list that names one device twice.
//!
//! Not checked: blocks an unpinned policy (no golden value at all) sees (reported); the opaque
//! data beyond what is shown
//! (driver and VBIOS version, FWID); revocation (NVIDIA's OCSP is online). A GPU is only half a
//! box: the CPU's attestation must bind this evidence's hash (the lead's statement does).
//!
//! Whether the GPU runs with confidential computing on, off or in devtools (debug) mode is in no
//! field of the signed report: the opaque data's types (NVIDIA's `OPAQUE_FIELD_ID_*`, 1–36) name
//! none (type 36, the feature flag, is the multi-GPU mode: MPT, SPT or PPCIe), and NVIDIA's
//! verifiers read the mode from NVML, the attesting machine's own driver. A GPU with CC off or
//! in devtools mode shows only as measurement blocks that differ from its RIM's golden values;
//! so an unpinned policy vouches for no mode, and a node refuses a hardware box's GPUs
//! unless it pins them (`skillbox-jc`, `gpu_not_pinned`). For the same reason a policy that pins
//! some blocks pins them all (review 26 V8): which blocks a CC-off or devtools GPU changes is
//! NVIDIA's to say, not the party's to guess, so a report carrying a block the policy leaves out
//! is refused (`measurement_not_allowed`, "GPU measurement block not pinned"), never passed on
//! the blocks that happen to be pinned.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256, Sha384};

use crate::certs::{self, Parsed, PinnedRoot};
use crate::hexval::{HexBytes, b64};
pub use crate::verify;
use crate::{ExpectedField as _, Field, Platform, Refusal, Verified, hex32, input};

const NVIDIA_ROOT_PEM: &[u8] = include_bytes!("../roots/nvidia_device_root.pem");
/// SHA-256 of the NVIDIA Device Identity CA certificate (DER).
pub const NVIDIA_ROOT_FINGERPRINT: [u8; 32] =
    hex32("102bf659d5419614c9d8e6aecebc80454eb26b1df6a769ac720b9a690b167b48");

pub const REQUEST_LEN: usize = 37;
/// ECDSA P-384 `r ‖ s`: the signature size of every NVIDIA GPU leaf key.
const SIGNATURE_LEN: usize = 96;
const SPDM_1_1: u8 = 0x11;
const SPDM_1_2: u8 = 0x12;
/// The most GPUs one evidence list may name (an 8-GPU host, with room).
pub const MAX_GPUS: usize = 16;
const GET_MEASUREMENTS: u8 = 0xE0;
const MEASUREMENTS: u8 = 0x60;
/// GET_MEASUREMENTS param2 asking for every measurement block (DSP0274: 0 asks for their count,
/// 1–0xFE for that one block).
const ALL_BLOCKS: u8 = 0xFF;
const MAX_CHAIN: usize = 8;

/// What a GPU attester serves: the SPDM transcript and the device certificate chain (leaf
/// first, as the driver returns it; the root may be included).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    #[serde(with = "b64")]
    pub transcript: Vec<u8>,
    #[serde(with = "b64::list")]
    pub chain: Vec<Vec<u8>>,
}

impl Evidence {
    /// The transcript as hex text (or raw), the chain as PEM or DER files, leaf first.
    pub fn from_files(transcript: &[u8], cert_files: &[&[u8]]) -> Result<Evidence, Refusal> {
        let transcript = input::raw_or_hex_any(transcript, "NVIDIA SPDM transcript")?;
        let mut chain = Vec::new();
        for f in cert_files {
            chain.extend(input::certificates(f)?);
        }
        Ok(Evidence { transcript, chain })
    }
}

impl Evidence {
    /// SHA-512 over a domain-separated, length-prefixed encoding of the transcript and the
    /// chain: what a box binds into its CPU attestation statement so the GPU evidence cannot be
    /// swapped for another GPU's. Encoding: `"skillbox/nvidia-evidence/1"`, then for the
    /// transcript and each certificate in order its length (u64 big-endian) and bytes.
    pub fn binding_hash(&self) -> [u8; 64] {
        use sha2::Sha512;
        let mut h = Sha512::new();
        h.update(b"skillbox/nvidia-evidence/1");
        for part in std::iter::once(&self.transcript).chain(self.chain.iter()) {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part);
        }
        h.finalize().into()
    }
}

/// SHA-256 over the [`Evidence::binding_hash`] of every GPU of a box, in order, after a
/// domain label and the count: what a box binds into its CPU statement for all its GPUs (one
/// value whatever their number; another GPU's report, a dropped or an added one changes it).
pub fn list_binding_sha256(evidence: &[Evidence]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"skillbox/nvidia-evidence-list/1");
    h.update((evidence.len() as u64).to_be_bytes());
    for ev in evidence {
        h.update(ev.binding_hash());
    }
    h.finalize().into()
}

/// What the verifier expects.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expected {
    /// The requester nonce the verifier (or the box, from the statement) chose.
    pub nonce: Option<[u8; 32]>,
}

/// Golden values for one measurement block index (alternatives allowed, as RIMs list them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GoldenMeasurement {
    pub index: u8,
    #[serde(deserialize_with = "crate::nonempty")]
    pub values: Vec<HexBytes>,
}

/// What a node pins for a GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Every listed index must be present with one of its values, and every block the report
    /// carries must be listed (a policy pinning some blocks vouches for the GPU's mode only if
    /// it pins them all: the mode shows in no field, only in which blocks differ).
    #[serde(deserialize_with = "crate::nonempty")]
    pub measurements: Vec<GoldenMeasurement>,
    /// Accepted device ids (the serial number of the device's BROM certificate); empty = any.
    #[serde(default)]
    pub devices: Vec<String>,
}

impl Policy {
    /// Pins no measurement block (they are reported).
    pub fn unpinned() -> Policy {
        Policy {
            measurements: Vec::new(),
            devices: Vec::new(),
        }
    }
}

/// One DMTF measurement block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    pub index: u8,
    pub value_type: u8,
    pub value: Vec<u8>,
}

/// A parsed GET_MEASUREMENTS exchange.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transcript {
    /// SPDM version byte (`0x11` or `0x12`), the same in request and response.
    pub version: u8,
    pub requester_nonce: [u8; 32],
    pub responder_nonce: [u8; 32],
    pub slot: u8,
    pub blocks: Vec<Block>,
    /// The measurement record bytes as signed (its SHA-384 is the primary measurement).
    pub record: Vec<u8>,
    pub opaque: Vec<u8>,
    /// request ‖ response up to the signature.
    signed_len: usize,
    pub signature: Vec<u8>,
}

impl Transcript {
    /// Parse with the 96-byte ECDSA P-384 signature every NVIDIA GPU leaf key makes.
    pub fn parse(b: &[u8]) -> Result<Transcript, Refusal> {
        Transcript::parse_with_signature_len(b, SIGNATURE_LEN)
    }

    /// Parse with the signature size of the algorithm the leaf certificate names.
    pub fn parse_with_signature_len(b: &[u8], sig_len: usize) -> Result<Transcript, Refusal> {
        if b.len() > input::MAX_INPUT {
            return Err(Refusal::TooLarge("SPDM transcript"));
        }
        let short = Refusal::Malformed("SPDM transcript is truncated");
        let req = b.get(..REQUEST_LEN).ok_or(short)?;
        let version = req[0];
        if !matches!(version, SPDM_1_1 | SPDM_1_2) || req[1] != GET_MEASUREMENTS {
            return Err(Refusal::Unsupported(
                "SPDM request (not 1.1/1.2 GET_MEASUREMENTS)",
            ));
        }
        if req[2] & 1 != 1 {
            return Err(Refusal::Malformed(
                "SPDM request did not ask for a signature",
            ));
        }
        // Param2 is the operation: 0xFF asks for every block. A report of fewer blocks would
        // leave out exactly those a policy must see (review 27 F5; the pin-them-all rule refuses
        // it too, unless the policy pins just the blocks asked for).
        if req[3] != ALL_BLOCKS {
            return Err(Refusal::Malformed(
                "SPDM request did not ask for every measurement block",
            ));
        }
        let mut requester_nonce = [0u8; 32];
        requester_nonce.copy_from_slice(&req[4..36]);
        let slot = req[36];

        let resp = &b[REQUEST_LEN..];
        let head = resp.get(..8).ok_or(short)?;
        if head[0] != version || head[1] != MEASUREMENTS {
            return Err(Refusal::Unsupported(
                "SPDM response (not MEASUREMENTS of the request's version)",
            ));
        }
        // Param2 bits 3:0 are the slot (1.2 adds content-changed bits above them).
        if head[3] & 0x0f != slot & 0x0f {
            return Err(Refusal::Malformed(
                "SPDM response slot differs from the request",
            ));
        }
        let count = usize::from(head[4]);
        let record_len =
            usize::from(head[5]) | usize::from(head[6]) << 8 | usize::from(head[7]) << 16;
        let record_end = 8 + record_len;
        let record = resp.get(8..record_end).ok_or(short)?;
        let nonce_end = record_end + 32;
        let responder = resp.get(record_end..nonce_end).ok_or(short)?;
        let mut responder_nonce = [0u8; 32];
        responder_nonce.copy_from_slice(responder);
        let ol = resp.get(nonce_end..nonce_end + 2).ok_or(short)?;
        let opaque_len = usize::from(u16::from_le_bytes([ol[0], ol[1]]));
        let opaque_at = nonce_end + 2;
        let opaque = resp.get(opaque_at..opaque_at + opaque_len).ok_or(short)?;
        let sig_at = opaque_at + opaque_len;
        let signature = resp
            .get(sig_at..sig_at + sig_len)
            .ok_or(Refusal::Malformed(
                "SPDM response length disagrees with its fields",
            ))?;
        // The SPDM message ends with the signature. Drivers may return it in a larger buffer
        // (a captured Hopper report on driver 580 carries one zero byte after it): zero padding
        // is outside the signed region and accepted; any other byte is refused.
        if resp[sig_at + sig_len..].iter().any(|&x| x != 0) {
            return Err(Refusal::Malformed(
                "SPDM response length disagrees with its fields",
            ));
        }

        let blocks = parse_record(record, count)?;
        Ok(Transcript {
            version,
            requester_nonce,
            responder_nonce,
            slot,
            blocks,
            record: record.to_vec(),
            opaque: opaque.to_vec(),
            signed_len: REQUEST_LEN + sig_at,
            signature: signature.to_vec(),
        })
    }

    /// Known opaque-data fields (NVIDIA's TLV: type u16, length u16, value), best effort:
    /// only well-formed entries of the types shown are returned.
    fn opaque_fields(&self) -> Vec<Field> {
        const DRIVER_VERSION: u16 = 3;
        const VBIOS_VERSION: u16 = 6;
        const FWID: u16 = 20;
        let mut out = Vec::new();
        let mut rest = self.opaque.as_slice();
        while rest.len() >= 4 {
            let t = u16::from_le_bytes([rest[0], rest[1]]);
            let n = usize::from(u16::from_le_bytes([rest[2], rest[3]]));
            let Some(v) = rest.get(4..4 + n) else { break };
            match t {
                DRIVER_VERSION => {
                    let text: Vec<u8> = v.iter().copied().take_while(|&c| c != 0).collect();
                    if !text.is_empty()
                        && text.len() <= 32
                        && text.iter().all(|c| c.is_ascii_digit() || *c == b'.')
                        && let Ok(s) = String::from_utf8(text)
                    {
                        out.push(Field::new("driver_version", s));
                    }
                }
                VBIOS_VERSION => out.push(Field::new("vbios_version", hex::encode(v))),
                FWID => out.push(Field::new("fwid", hex::encode(v))),
                _ => {}
            }
            rest = &rest[4 + n..];
        }
        out
    }
}

fn parse_record(mut rec: &[u8], count: usize) -> Result<Vec<Block>, Refusal> {
    let mut blocks: Vec<Block> = Vec::with_capacity(count);
    while !rec.is_empty() {
        if rec.len() < 7 {
            return Err(Refusal::Malformed("SPDM measurement block is truncated"));
        }
        let index = rec[0];
        if rec[1] != 1 {
            return Err(Refusal::Unsupported("measurement specification (not DMTF)"));
        }
        let size = usize::from(u16::from_le_bytes([rec[2], rec[3]]));
        let value_type = rec[4];
        let value_size = usize::from(u16::from_le_bytes([rec[5], rec[6]]));
        if size != value_size + 3 || rec.len() < 4 + size {
            return Err(Refusal::Malformed("SPDM measurement block size"));
        }
        if blocks.iter().any(|b| b.index == index) {
            return Err(Refusal::Malformed("duplicate SPDM measurement index"));
        }
        blocks.push(Block {
            index,
            value_type,
            value: rec[7..4 + size].to_vec(),
        });
        rec = &rec[4 + size..];
    }
    if blocks.len() != count {
        return Err(Refusal::Malformed(
            "SPDM block count disagrees with the record",
        ));
    }
    Ok(blocks)
}

/// A device chain verified to the pinned root (validity is checked per call).
pub struct VerifiedChain {
    leaf_key: p384::ecdsa::VerifyingKey,
    device_id: Option<String>,
    certs: Vec<Parsed>,
}

fn verify_chain(root: &PinnedRoot, chain: &[Vec<u8>]) -> Result<VerifiedChain, Refusal> {
    if chain.is_empty() {
        return Err(Refusal::Malformed("no GPU certificate chain given"));
    }
    if chain.len() > MAX_CHAIN {
        return Err(Refusal::TooLarge("GPU certificate chain"));
    }
    let parsed: Vec<Parsed> = chain
        .iter()
        .map(|d| Parsed::from_der(d, "GPU certificate"))
        .collect::<Result<_, _>>()?;
    let (root_given, below): (Vec<&Parsed>, Vec<&Parsed>) =
        parsed.iter().partition(|c| c.is_self_issued());
    if root_given
        .iter()
        .any(|c| c.fingerprint() != NVIDIA_ROOT_FINGERPRINT)
    {
        return Err(Refusal::ForeignRoot);
    }
    let leaf = below
        .first()
        .copied()
        .ok_or(Refusal::Malformed("GPU chain has no leaf certificate"))?;
    let inter: Vec<Parsed> = below[1..].iter().map(|c| (*c).clone()).collect();
    let (leaf_key, all) = root.verify_p384_path(leaf, &inter)?;
    // The device: the certificate that issued the leaf (the GPU's BROM identity).
    let leaf_issuer = &leaf.cert.tbs_certificate.issuer;
    let device_id = inter
        .iter()
        .find(|c| &c.cert.tbs_certificate.subject == leaf_issuer)
        .and_then(Parsed::subject_serial_number);
    Ok(VerifiedChain {
        leaf_key,
        device_id,
        certs: all,
    })
}

/// A verifier for one policy: root parsed once, device chains cached.
pub type Verifier = crate::Verifier<Evidence>;

/// "block<N>" for every index, so result names stay `&'static str`.
const BLOCK_NAMES: [&str; 256] = include!("nvidia_block_names.in");

impl crate::PlatformEvidence for Evidence {
    type Expected = Expected;
    type Policy = Policy;
    type Pinned = PinnedRoot;
    type Chain = VerifiedChain;

    /// NVIDIA's device identity root.
    fn pinned() -> Result<PinnedRoot, Refusal> {
        PinnedRoot::load(
            NVIDIA_ROOT_PEM,
            NVIDIA_ROOT_FINGERPRINT,
            "pinned NVIDIA root",
        )
    }

    fn check(&self, on: &Verifier, expected: &Expected, now_ms: u64) -> Result<Verified, Refusal> {
        let policy = on.policy();
        // The signature's size is the leaf key's: `verify_chain` accepts only an ECDSA P-384
        // leaf (the key NVIDIA GPUs carry), so it is 96 bytes.
        let t = Transcript::parse_with_signature_len(&self.transcript, SIGNATURE_LEN)?;
        let parts = self.chain.iter().map(|c| &c[..]);
        let chain = on.chain(parts, |root| verify_chain(root, &self.chain))?;
        certs::check_validity(&chain.certs, now_ms)?;
        if t.version != SPDM_1_1 {
            // 1.2 signs the version/capabilities/algorithms messages too (DSP0274 1.2, L1/L2),
            // and GPU evidence does not carry them: there is nothing to check the signature on.
            return Err(Refusal::Unsupported(
                "SPDM 1.2 measurement signature (covers a negotiation the evidence lacks)",
            ));
        }
        certs::verify_p384_raw(
            &chain.leaf_key,
            &self.transcript[..t.signed_len],
            &t.signature,
            "SPDM measurements signature",
        )?;

        expected
            .nonce
            .check(Some(&t.requester_nonce), Refusal::NonceMismatch)?;
        let pinned = !policy.measurements.is_empty();
        for golden in &policy.measurements {
            let ok = t
                .blocks
                .iter()
                .find(|b| b.index == golden.index)
                .is_some_and(|b| golden.values.iter().any(|v| v.0 == b.value));
            if !ok {
                return Err(Refusal::MeasurementNotAllowed("GPU measurement block"));
            }
        }
        // Pinned means all of it: a CC-off or devtools GPU differs from its golden values only
        // in some blocks, so a policy leaving any out may leave out exactly those.
        if pinned
            && t.blocks
                .iter()
                .any(|b| !policy.measurements.iter().any(|g| g.index == b.index))
        {
            return Err(Refusal::MeasurementNotAllowed(
                "GPU measurement block not pinned",
            ));
        }
        if !crate::admits(&policy.devices, |d| chain.device_id.as_ref() == Some(d)) {
            return Err(Refusal::InstanceNotAllowed);
        }

        let (valid_from_ms, valid_until_ms) = certs::window(&chain.certs);
        let mut attributes = vec![
            Field::new("spdm_version", "1.1"),
            Field::new("slot", t.slot.to_string()),
            Field::new("blocks", t.blocks.len().to_string()),
            Field::new("responder_nonce", hex::encode(t.responder_nonce)),
        ];
        attributes.extend(t.opaque_fields());
        Ok(Verified {
            platform: Platform::Nvidia,
            measurement: hex::encode(Sha384::digest(&t.record)),
            measurements: t
                .blocks
                .iter()
                .map(|b| Field::new(BLOCK_NAMES[usize::from(b.index)], hex::encode(&b.value)))
                .collect(),
            measurements_pinned: pinned,
            report_data: None,
            report_data_checked: false,
            nonce: Some(hex::encode(t.requester_nonce)),
            nonce_checked: expected.nonce.is_some(),
            attributes,
            tcb_status: None,
            instance_id: chain.device_id.clone(),
            valid_from_ms,
            valid_until_ms,
            verified_at_ms: now_ms,
        })
    }
}

impl Verifier {
    /// Verify the evidence of every GPU of a box (all against the same expectations). Refused
    /// unless each verifies, and if two entries are the same device (one GPU's evidence
    /// repeated to look like several).
    pub fn verify_all(
        &self,
        evidence: &[Evidence],
        expected: &Expected,
        now_ms: u64,
    ) -> Result<Vec<Verified>, Refusal> {
        if evidence.is_empty() {
            return Err(Refusal::Malformed("no GPU evidence given"));
        }
        if evidence.len() > MAX_GPUS {
            return Err(Refusal::TooLarge("GPU evidence list"));
        }
        let mut out: Vec<Verified> = Vec::with_capacity(evidence.len());
        for ev in evidence {
            let v = self.verify(ev, expected, now_ms)?;
            if out.iter().any(|o| o.instance_id == v.instance_id) {
                return Err(Refusal::Malformed("GPU evidence lists one device twice"));
            }
            out.push(v);
        }
        Ok(out)
    }
}

/// One entry of NVIDIA's serialized GPU evidence (what the attestation SDK and nvtrust write:
/// a JSON list, one object per GPU).
#[derive(Deserialize)]
struct SdkEntry {
    arch: String,
    /// Base64 of the PEM chain, leaf first.
    certificate: String,
    /// Base64 of the raw SPDM request ‖ response.
    evidence: String,
    /// Hex: the requester nonce the collector asked with.
    nonce: String,
}

impl Evidence {
    /// Read NVIDIA's serialized evidence list (`[{"arch", "certificate", "evidence",
    /// "nonce"}, …]`, one entry per GPU) into one [`Evidence`] each. An entry whose `nonce`
    /// is not the requester nonce inside its own transcript is malformed (the field is only a
    /// copy: the verifier checks the transcript's).
    pub fn list_from_sdk_json(json: &[u8]) -> Result<Vec<Evidence>, Refusal> {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        if json.len() > input::MAX_INPUT {
            return Err(Refusal::TooLarge("GPU evidence list"));
        }
        let entries: Vec<SdkEntry> = serde_json::from_slice(json)
            .map_err(|_| Refusal::Malformed("GPU evidence list JSON"))?;
        if entries.len() > MAX_GPUS {
            return Err(Refusal::TooLarge("GPU evidence list"));
        }
        entries
            .iter()
            .map(|e| {
                if !matches!(e.arch.as_str(), "HOPPER" | "BLACKWELL") {
                    return Err(Refusal::Unsupported("GPU architecture"));
                }
                let pem = b64
                    .decode(&e.certificate)
                    .map_err(|_| Refusal::Malformed("GPU evidence certificate is not base64"))?;
                let transcript = b64
                    .decode(&e.evidence)
                    .map_err(|_| Refusal::Malformed("GPU evidence is not base64"))?;
                let ev = Evidence::from_files(&transcript, &[&pem])?;
                let nonce = ev
                    .transcript
                    .get(4..36)
                    .ok_or(Refusal::Malformed("SPDM transcript is truncated"))?;
                if !e.nonce.eq_ignore_ascii_case(&hex::encode(nonce)) {
                    return Err(Refusal::Malformed(
                        "GPU evidence nonce differs from its transcript's",
                    ));
                }
                Ok(ev)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_names() {
        assert_eq!(BLOCK_NAMES[0], "block0");
        assert_eq!(BLOCK_NAMES[64], "block64");
        assert_eq!(BLOCK_NAMES[255], "block255");
    }

    #[test]
    fn short_transcripts_are_malformed() {
        for n in [0, 37, 100, 200] {
            assert!(Transcript::parse(&vec![0x11; n]).is_err());
        }
    }
}
