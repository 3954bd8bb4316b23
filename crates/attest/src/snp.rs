//! AMD SEV-SNP attestation reports.
//!
//! Checked, in this order: the VCEK/VLEK chain (ASK or ASVK, then the ARK, which must be one of
//! the pinned Milan/Genoa/Turin roots by SHA-256 fingerprint; signatures RSA-PSS via `sev`);
//! every certificate's validity at `now`; the report's ECDSA P-384 signature over the **raw**
//! bytes `[0, 0x2A0)` (not a re-serialization); then the authenticated fields: report version
//! and signature algorithm, the signing key named in KEY_INFO, the DEBUG policy bit (refused),
//! VMPL (must be 0), the migration-agent bit (refused unless the policy allows it), the VCEK's
//! hwID = CHIP_ID, the VEK's TCB extensions = REPORTED_TCB, the policy's minimum TCB,
//! REPORT_DATA and HOST_DATA against what the caller expects, MEASUREMENT against the pins and
//! CHIP_ID against the allow-list.
//!
//! Not checked (documented limits): the ID block / author key digests (shown, not pinned), the
//! guest SVN and family/image ids (shown), AMD's CRLs (offline; revocation of an ASK would need
//! the CRL supplied), and that MEASUREMENT covers the workload — on cloud paravisors it covers
//! the provider's firmware.

use der::Decode;
use p384::ecdsa::signature::Verifier as _;
use serde::{Deserialize, Serialize};
use sev::certs::snp::Verifiable as _;

use crate::certs::{self, Parsed};
use crate::hexval::{Hex, b64};
pub use crate::verify;
use crate::{ExpectedField as _, Field, Platform, Refusal, Verified, hex32, input};

/// An attestation report is exactly this long.
pub const REPORT_LEN: usize = 1184;
/// The signature covers `[0, SIGNED_LEN)` of the raw report.
pub const SIGNED_LEN: usize = 0x2A0;

/// The AMD processor families whose roots are pinned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Product {
    Milan,
    Genoa,
    Turin,
}

impl Product {
    pub const ALL: [Product; 3] = [Product::Milan, Product::Genoa, Product::Turin];

    pub fn as_str(&self) -> &'static str {
        match self {
            Product::Milan => "milan",
            Product::Genoa => "genoa",
            Product::Turin => "turin",
        }
    }

    /// SHA-256 of the product's ARK (DER), as AMD publishes it at kdsintf.amd.com.
    pub fn ark_fingerprint(&self) -> [u8; 32] {
        match self {
            Product::Milan => ARK_MILAN,
            Product::Genoa => ARK_GENOA,
            Product::Turin => ARK_TURIN,
        }
    }

    fn builtin_ark(&self) -> &'static [u8] {
        match self {
            Product::Milan => sev::certs::snp::builtin::milan::ARK,
            Product::Genoa => sev::certs::snp::builtin::genoa::ARK,
            Product::Turin => sev::certs::snp::builtin::turin::ARK,
        }
    }

    fn builtin_ask(&self) -> &'static [u8] {
        match self {
            Product::Milan => sev::certs::snp::builtin::milan::ASK,
            Product::Genoa => sev::certs::snp::builtin::genoa::ASK,
            Product::Turin => sev::certs::snp::builtin::turin::ASK,
        }
    }
}

const ARK_MILAN: [u8; 32] =
    hex32("69d063b45344d26a2e94e1f4210de49ef555308287d4c174445c95639a540bcd");
const ARK_GENOA: [u8; 32] =
    hex32("4c6598d19c18719c5dfd4a7d335f674e5bfe1d8f800cea2cf270c10d103db2f1");
const ARK_TURIN: [u8; 32] =
    hex32("1f084161a44bb6d93778a904877d4819cafa5d05ef4193b2ded9dd9c73dd3f6a");

/// The product whose pinned ARK has this fingerprint.
pub fn product_for_ark(fingerprint: &[u8; 32]) -> Option<Product> {
    Product::ALL
        .into_iter()
        .find(|p| &p.ark_fingerprint() == fingerprint)
}

/// The evidence a box serves: the raw report, its endorsement key certificate (VCEK or VLEK)
/// and the CA certificates (ASK or ASVK, ARK). Missing ASK/ARK are taken from `sev`'s built-in
/// copies for the product the VEK's issuer names (the ARK still has to match its pin).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    #[serde(with = "b64")]
    pub report: Vec<u8>,
    #[serde(with = "b64")]
    pub vek: Vec<u8>,
    #[serde(with = "b64::list", default)]
    pub chain: Vec<Vec<u8>>,
}

impl Evidence {
    /// From files as they come: the report raw (1184 bytes) or hex; certificates PEM (one or
    /// more blocks) or DER, in any order across any number of files. The VEK is the one
    /// certificate named `SEV-VCEK` or `SEV-VLEK`.
    pub fn from_files(report: &[u8], cert_files: &[&[u8]]) -> Result<Evidence, Refusal> {
        let report = input::raw_or_hex(report, REPORT_LEN, "SEV-SNP report (1184 bytes)")?;
        let mut vek = None;
        let mut chain = Vec::new();
        for file in cert_files {
            for der in input::certificates(file)? {
                let parsed = Parsed::from_der(&der, "SEV-SNP certificate")?;
                if VekKind::of(&parsed).is_some() {
                    if vek.is_some() {
                        return Err(Refusal::Malformed("more than one VCEK/VLEK certificate"));
                    }
                    vek = Some(der);
                } else {
                    chain.push(der);
                }
            }
        }
        let vek = vek.ok_or(Refusal::Malformed("no VCEK or VLEK certificate given"))?;
        Ok(Evidence { report, vek, chain })
    }

    /// The TCB floor this evidence meets exactly: its REPORTED_TCB, once the chain verifies to a
    /// pinned ARK, the report's signature with the VEK, and the VEK's TCB is the reported one
    /// (what `--show-identity` prints for a pin; time is not checked, it does not change the
    /// TCB). The reported TCB is what [`verify`] compares with the floor.
    pub fn tcb_floor(&self) -> Result<MinTcb, Refusal> {
        let chain = verify_chain(&self.vek, &self.chain)?;
        let report = Report::parse(&self.report)?;
        check_signature(&self.report, &chain.key)?;
        let reported = Tcb::decode(report.reported_tcb, chain.product);
        if reported != chain.tcb {
            return Err(Refusal::TcbMismatch);
        }
        Ok(reported.floor())
    }
}

/// What the verifier expects in this report (computed for the run, not pinned in config).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expected {
    /// REPORT_DATA: for a skillbox run, SHA-512 of the attestation statement.
    pub report_data: Option<[u8; 64]>,
    /// HOST_DATA: set by the host at launch (a box's configuration hash).
    pub host_data: Option<[u8; 32]>,
}

/// The minimum TCB (the pin's floor): each component must be at least this. Without one a
/// guest on any firmware AMD still certifies — published flaws and all — passes, and the box
/// operator chooses the firmware, so a pinned policy must name it ([`Policy`]'s `min_tcb`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MinTcb {
    pub bootloader: u8,
    pub tee: u8,
    pub snp: u8,
    pub microcode: u8,
    /// Turin and later only (absent from a printed pin before Turin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fmc: Option<u8>,
}

/// What a node pins for an SEV-SNP box.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Accepted launch MEASUREMENTs (48 bytes, hex). At least one when loaded from config.
    #[serde(deserialize_with = "crate::nonempty")]
    pub measurements: Vec<Hex<48>>,
    /// Accepted CHIP_IDs (64 bytes, hex); empty = any chip. A relay with a key leaked from
    /// another genuine chip is what this list stops.
    #[serde(default)]
    pub chip_ids: Vec<Hex<64>>,
    /// Accepted HOST_DATA values (32 bytes, hex): for a skillbox box, the configuration hash
    /// the host launched it with. Empty = any (the run's expected value is still compared).
    #[serde(default)]
    pub host_data: Vec<Hex<32>>,
    /// The TCB floor: required when the policy is loaded (a `[min_tcb]` table of the
    /// reported TCB's components, as `skillbox box --attester sev-snp --show-identity` prints
    /// it); `None` only in [`Policy::unpinned`].
    #[serde(deserialize_with = "floor")]
    pub min_tcb: Option<MinTcb>,
    /// Accepted processor families (default: all pinned ones).
    #[serde(default = "all_products")]
    pub products: Vec<Product>,
    /// Accept reports signed by a VLEK (a cloud provider's key) as well as a VCEK. Default true.
    #[serde(default = "crate::yes")]
    pub allow_vlek: bool,
    /// Accept a guest whose policy allows a migration agent. Default false.
    #[serde(default)]
    pub allow_migration_agent: bool,
}

/// A loaded policy's `min_tcb`: present (serde refuses it absent, naming the field) and not all
/// zero, which would accept every TCB as no floor does.
fn floor<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<MinTcb>, D::Error> {
    let min = MinTcb::deserialize(d)?;
    if min.bootloader == 0 && min.tee == 0 && min.snp == 0 && min.microcode == 0 {
        return Err(serde::de::Error::custom(
            "min_tcb of all zeros accepts any TCB: pin the reported TCB of the box's evidence",
        ));
    }
    Ok(Some(min))
}

fn all_products() -> Vec<Product> {
    Product::ALL.to_vec()
}

impl Policy {
    /// Pins nothing: signature, chain, time, debug, VMPL and the TCB checks still apply, the
    /// measurement and chip id are reported, not compared. For a person inspecting evidence.
    pub fn unpinned() -> Policy {
        Policy {
            measurements: Vec::new(),
            chip_ids: Vec::new(),
            host_data: Vec::new(),
            min_tcb: None,
            products: all_products(),
            allow_vlek: true,
            allow_migration_agent: false,
        }
    }

    /// Accept exactly these measurements on a TCB at least `min_tcb` (a pin has a floor).
    pub fn pinned(measurements: Vec<[u8; 48]>, min_tcb: MinTcb) -> Policy {
        Policy {
            measurements: measurements.into_iter().map(Hex).collect(),
            min_tcb: Some(min_tcb),
            ..Policy::unpinned()
        }
    }
}

/// Which kind of endorsement key signed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VekKind {
    /// Versioned Chip Endorsement Key: per chip and TCB.
    Vcek,
    /// Versioned Loaded Endorsement Key: per cloud provider, loaded into the chip.
    Vlek,
}

impl VekKind {
    fn of(cert: &Parsed) -> Option<VekKind> {
        match cert.subject_common_name().as_deref() {
            Some("SEV-VCEK") => Some(VekKind::Vcek),
            Some("SEV-VLEK") => Some(VekKind::Vlek),
            _ => None,
        }
    }

    fn as_str(&self) -> &'static str {
        match self {
            VekKind::Vcek => "vcek",
            VekKind::Vlek => "vlek",
        }
    }

    /// KEY_INFO.SIGNING_KEY value that names this key.
    fn key_info_code(&self) -> u32 {
        match self {
            VekKind::Vcek => 0,
            VekKind::Vlek => 1,
        }
    }
}

/// A TCB version, decoded per product (the byte layout changed with Turin).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tcb {
    pub fmc: Option<u8>,
    pub bootloader: u8,
    pub tee: u8,
    pub snp: u8,
    pub microcode: u8,
}

impl Tcb {
    fn decode(raw: [u8; 8], product: Product) -> Tcb {
        match product {
            Product::Milan | Product::Genoa => Tcb {
                fmc: None,
                bootloader: raw[0],
                tee: raw[1],
                snp: raw[6],
                microcode: raw[7],
            },
            Product::Turin => Tcb {
                fmc: Some(raw[0]),
                bootloader: raw[1],
                tee: raw[2],
                snp: raw[3],
                microcode: raw[7],
            },
        }
    }

    /// This TCB as a floor: what a pin names to accept exactly this firmware and newer.
    pub fn floor(&self) -> MinTcb {
        MinTcb {
            bootloader: self.bootloader,
            tee: self.tee,
            snp: self.snp,
            microcode: self.microcode,
            fmc: self.fmc,
        }
    }

    fn at_least(&self, min: &MinTcb) -> bool {
        let fmc_ok = match (min.fmc, self.fmc) {
            (Some(m), Some(v)) => v >= m,
            (Some(_), None) => false,
            (None, _) => true,
        };
        fmc_ok
            && self.bootloader >= min.bootloader
            && self.tee >= min.tee
            && self.snp >= min.snp
            && self.microcode >= min.microcode
    }
}

/// A VEK chain that verified up to a pinned ARK (time not yet checked): cached per chain bytes.
pub struct VerifiedChain {
    product: Product,
    kind: VekKind,
    key: p384::ecdsa::VerifyingKey,
    /// VCEK only: the chip's hardware id (64 bytes; Turin 8).
    hwid: Option<Vec<u8>>,
    tcb: Tcb,
    certs: Vec<Parsed>,
}

const OID_BL_SPL: &str = "1.3.6.1.4.1.3704.1.3.1";
const OID_TEE_SPL: &str = "1.3.6.1.4.1.3704.1.3.2";
const OID_SNP_SPL: &str = "1.3.6.1.4.1.3704.1.3.3";
const OID_UCODE_SPL: &str = "1.3.6.1.4.1.3704.1.3.8";
const OID_FMC_SPL: &str = "1.3.6.1.4.1.3704.1.3.9";
const OID_HWID: &str = "1.3.6.1.4.1.3704.1.4";

fn extension<'a>(cert: &'a Parsed, oid: &str) -> Option<&'a [u8]> {
    let oid = const_oid::ObjectIdentifier::new(oid).ok()?;
    cert.cert
        .tbs_certificate
        .extensions
        .as_ref()?
        .iter()
        .find(|e| e.extn_id == oid)
        .map(|e| e.extn_value.as_bytes())
}

/// A TCB component extension: a DER INTEGER 0..=255 inside the extension's OCTET STRING.
fn spl(cert: &Parsed, oid: &str) -> Result<u8, Refusal> {
    let value = extension(cert, oid).ok_or(Refusal::Malformed("VEK lacks a TCB extension"))?;
    u8::from_der(value).map_err(|_| Refusal::Malformed("VEK TCB extension is not a small integer"))
}

/// The hwID extension: the raw id, or (newer KDS encodings) a DER OCTET STRING wrapping it.
fn hwid(cert: &Parsed, product: Product) -> Result<Vec<u8>, Refusal> {
    let want = match product {
        Product::Turin => 8,
        Product::Milan | Product::Genoa => 64,
    };
    let value = extension(cert, OID_HWID).ok_or(Refusal::Malformed("VCEK lacks its hwID"))?;
    if value.len() == want {
        return Ok(value.to_vec());
    }
    match der::asn1::OctetStringRef::from_der(value) {
        Ok(inner) if inner.as_bytes().len() == want => Ok(inner.as_bytes().to_vec()),
        _ => Err(Refusal::Malformed("VCEK hwID length")),
    }
}

fn sev_cert(c: &Parsed) -> Result<sev::certs::snp::Certificate, Refusal> {
    sev::certs::snp::Certificate::from_der(&c.der)
        .map_err(|_| Refusal::Malformed("SEV-SNP certificate"))
}

fn builtin(pem: &'static [u8]) -> Result<Parsed, Refusal> {
    let der = input::certificates(pem)?
        .into_iter()
        .next()
        .ok_or(Refusal::Malformed("built-in AMD certificate"))?;
    Parsed::from_der(&der, "built-in AMD certificate")
}

/// The built-in certificate (`which`: each product's ASK or ARK) whose subject is `name`.
fn builtin_named(
    name: &x509_cert::name::Name,
    which: fn(&Product) -> &'static [u8],
) -> Result<Option<Parsed>, Refusal> {
    for p in Product::ALL {
        let cert = builtin(which(&p))?;
        if &cert.cert.tbs_certificate.subject == name {
            return Ok(Some(cert));
        }
    }
    Ok(None)
}

/// Verify the VEK ← ASK/ASVK ← ARK signatures and pin the ARK. Time is checked per call.
pub fn verify_chain(vek_der: &[u8], chain: &[Vec<u8>]) -> Result<VerifiedChain, Refusal> {
    let vek = Parsed::from_der(vek_der, "VCEK/VLEK certificate")?;
    let kind = VekKind::of(&vek).ok_or(Refusal::Malformed(
        "endorsement key certificate is neither SEV-VCEK nor SEV-VLEK",
    ))?;
    let given: Vec<Parsed> = chain
        .iter()
        .map(|d| Parsed::from_der(d, "SEV-SNP CA certificate"))
        .collect::<Result<_, _>>()?;

    // The intermediate: the given one that issued the VEK, else sev's built-in ASK for it.
    let vek_issuer = &vek.cert.tbs_certificate.issuer;
    let inter = match given
        .iter()
        .find(|c| !c.is_self_issued() && &c.cert.tbs_certificate.subject == vek_issuer)
    {
        Some(c) => c.clone(),
        None => builtin_named(vek_issuer, Product::builtin_ask)?
            .ok_or(Refusal::BadChain("no ASK/ASVK issued the VCEK/VLEK"))?,
    };
    let inter_cn = inter.subject_common_name().unwrap_or_default();
    let inter_is_vlek_ca = inter_cn.starts_with("SEV-VLEK-");
    if inter_is_vlek_ca != (kind == VekKind::Vlek) {
        return Err(Refusal::BadChain("VCEK under an ASVK or VLEK under an ASK"));
    }

    // The root: a given self-issued certificate named as the intermediate's issuer (a pinned one
    // preferred), else the built-in ARK of that name. Either way its fingerprint decides.
    let inter_issuer = &inter.cert.tbs_certificate.issuer;
    let candidates: Vec<&Parsed> = given
        .iter()
        .filter(|c| c.is_self_issued() && &c.cert.tbs_certificate.subject == inter_issuer)
        .collect();
    let ark = match candidates
        .iter()
        .find(|c| product_for_ark(&c.fingerprint()).is_some())
        .or(candidates.first())
    {
        Some(c) => (*c).clone(),
        None => builtin_named(inter_issuer, Product::builtin_ark)?.ok_or(Refusal::ForeignRoot)?,
    };
    let product = product_for_ark(&ark.fingerprint()).ok_or(Refusal::ForeignRoot)?;

    // Signatures (RSA-PSS, SHA-384) through sev: ARK self-signed, ARK → ASK, ASK → VEK.
    let ca = sev::certs::snp::ca::Chain {
        ark: sev_cert(&ark)?,
        ask: sev_cert(&inter)?,
    };
    let ask = (&ca)
        .verify()
        .map_err(|_| Refusal::BadChain("ARK/ASK signatures"))?;
    let vek_sev = sev_cert(&vek)?;
    (ask, &vek_sev)
        .verify()
        .map_err(|_| Refusal::BadChain("ASK signature over the VCEK/VLEK"))?;

    let key = certs::p384_key(&vek)?;
    let tcb = Tcb {
        fmc: match product {
            Product::Turin => Some(spl(&vek, OID_FMC_SPL)?),
            Product::Milan | Product::Genoa => None,
        },
        bootloader: spl(&vek, OID_BL_SPL)?,
        tee: spl(&vek, OID_TEE_SPL)?,
        snp: spl(&vek, OID_SNP_SPL)?,
        microcode: spl(&vek, OID_UCODE_SPL)?,
    };
    let hwid = match kind {
        VekKind::Vcek => Some(hwid(&vek, product)?),
        VekKind::Vlek => None,
    };
    Ok(VerifiedChain {
        product,
        kind,
        key,
        hwid,
        tcb,
        certs: vec![vek, inter, ark],
    })
}

/// The report's fields, read at their fixed offsets (the same in versions 2 to 5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub version: u32,
    pub guest_svn: u32,
    pub policy: u64,
    pub family_id: [u8; 16],
    pub image_id: [u8; 16],
    pub vmpl: u32,
    pub sig_algo: u32,
    pub current_tcb: [u8; 8],
    pub plat_info: u64,
    pub key_info: u32,
    pub report_data: [u8; 64],
    pub measurement: [u8; 48],
    pub host_data: [u8; 32],
    pub id_key_digest: [u8; 48],
    pub author_key_digest: [u8; 48],
    pub report_id: [u8; 32],
    pub reported_tcb: [u8; 8],
    pub chip_id: [u8; 64],
    pub committed_tcb: [u8; 8],
    pub current_build: u8,
    pub current_minor: u8,
    pub current_major: u8,
    pub launch_tcb: [u8; 8],
}

fn arr<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&b[at..at + N]);
    out
}

fn u32le(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(arr(b, at))
}

fn u64le(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(arr(b, at))
}

/// Guest policy bits (SEV-SNP ABI, table "GUEST_POLICY").
pub const POLICY_MIGRATE_MA: u64 = 1 << 18;
pub const POLICY_DEBUG: u64 = 1 << 19;

impl Report {
    /// Parse a raw report. Length only: field meaning is checked after the signature.
    pub fn parse(raw: &[u8]) -> Result<Report, Refusal> {
        if raw.len() != REPORT_LEN {
            return Err(Refusal::Malformed("SEV-SNP report length (must be 1184)"));
        }
        let b = raw;
        Ok(Report {
            version: u32le(b, 0x00),
            guest_svn: u32le(b, 0x04),
            policy: u64le(b, 0x08),
            family_id: arr(b, 0x10),
            image_id: arr(b, 0x20),
            vmpl: u32le(b, 0x30),
            sig_algo: u32le(b, 0x34),
            current_tcb: arr(b, 0x38),
            plat_info: u64le(b, 0x40),
            key_info: u32le(b, 0x48),
            report_data: arr(b, 0x50),
            measurement: arr(b, 0x90),
            host_data: arr(b, 0xC0),
            id_key_digest: arr(b, 0xE0),
            author_key_digest: arr(b, 0x110),
            report_id: arr(b, 0x140),
            reported_tcb: arr(b, 0x180),
            chip_id: arr(b, 0x1A0),
            committed_tcb: arr(b, 0x1E0),
            current_build: b[0x1E8],
            current_minor: b[0x1E9],
            current_major: b[0x1EA],
            launch_tcb: arr(b, 0x1F0),
        })
    }

    /// KEY_INFO.SIGNING_KEY (bits 4:2): 0 VCEK, 1 VLEK, 7 none.
    pub fn signing_key(&self) -> u32 {
        (self.key_info >> 2) & 0b111
    }
}

/// Check the report's signature over its raw signed bytes. r and s are 72-byte little-endian
/// fields of which P-384 uses 48: the rest must be zero (else two encodings would verify).
fn check_signature(raw: &[u8], key: &p384::ecdsa::VerifyingKey) -> Result<(), Refusal> {
    let r = &raw[0x2A0..0x2A0 + 72];
    let s = &raw[0x2A0 + 72..0x2A0 + 144];
    if r[48..].iter().chain(&s[48..]).any(|&b| b != 0) {
        return Err(Refusal::BadSignature(
            "non-zero padding in the report signature",
        ));
    }
    let mut rs = [0u8; 96];
    for i in 0..48 {
        rs[i] = r[47 - i];
        rs[48 + i] = s[47 - i];
    }
    let sig = p384::ecdsa::Signature::from_slice(&rs)
        .map_err(|_| Refusal::BadSignature("report signature scalars"))?;
    key.verify(&raw[..SIGNED_LEN], &sig)
        .map_err(|_| Refusal::BadSignature("report signature"))
}

/// A verifier for one policy, caching verified chains (a box's VCEK changes only with its TCB).
pub type Verifier = crate::Verifier<Evidence>;

impl crate::PlatformEvidence for Evidence {
    type Expected = Expected;
    type Policy = Policy;
    /// Nothing: the ARK is pinned per product inside [`verify_chain`].
    type Pinned = ();
    type Chain = VerifiedChain;

    fn pinned() -> Result<(), Refusal> {
        Ok(())
    }

    fn check(&self, on: &Verifier, expected: &Expected, now_ms: u64) -> Result<Verified, Refusal> {
        let parts = std::iter::once(self.vek.as_slice()).chain(self.chain.iter().map(|c| &c[..]));
        let chain = on.chain(parts, |()| verify_chain(&self.vek, &self.chain))?;
        verify_with_chain(&chain, &self.report, expected, on.policy(), now_ms)
    }
}

/// Verify a report against an already verified chain.
pub fn verify_with_chain(
    chain: &VerifiedChain,
    raw: &[u8],
    expected: &Expected,
    policy: &Policy,
    now_ms: u64,
) -> Result<Verified, Refusal> {
    let report = Report::parse(raw)?;
    certs::check_validity(&chain.certs, now_ms)?;
    check_signature(raw, &chain.key)?;

    // From here on every field is authenticated.
    if !(2..=5).contains(&report.version) {
        return Err(Refusal::Unsupported("SEV-SNP report version"));
    }
    if report.sig_algo != 1 {
        return Err(Refusal::Unsupported("report signature algorithm"));
    }
    if report.signing_key() != chain.kind.key_info_code() {
        return Err(Refusal::Malformed(
            "KEY_INFO names another key than the one that signed",
        ));
    }
    if report.policy & POLICY_DEBUG != 0 {
        return Err(Refusal::DebugEnabled("guest policy DEBUG bit"));
    }
    if report.vmpl != 0 {
        return Err(Refusal::VmplNotZero);
    }
    if report.policy & POLICY_MIGRATE_MA != 0 && !policy.allow_migration_agent {
        return Err(Refusal::MigrationAgentAllowed);
    }
    if !policy.products.contains(&chain.product) {
        return Err(Refusal::ProductNotAllowed);
    }
    if chain.kind == VekKind::Vlek && !policy.allow_vlek {
        return Err(Refusal::AttributesNotAllowed("VLEK-signed reports"));
    }
    if let Some(hwid) = &chain.hwid
        && report.chip_id[..hwid.len()] != hwid[..]
    {
        return Err(Refusal::ChipIdMismatch);
    }
    let reported = Tcb::decode(report.reported_tcb, chain.product);
    if reported != chain.tcb {
        return Err(Refusal::TcbMismatch);
    }
    if let Some(min) = &policy.min_tcb
        && !reported.at_least(min)
    {
        return Err(Refusal::TcbTooLow);
    }
    expected
        .report_data
        .check(Some(&report.report_data), Refusal::ReportDataMismatch)?;
    expected
        .host_data
        .check(Some(&report.host_data), Refusal::HostDataMismatch)?;
    let pinned = !policy.measurements.is_empty();
    if pinned
        && !policy
            .measurements
            .iter()
            .any(|m| m.0 == report.measurement)
    {
        return Err(Refusal::MeasurementNotAllowed("MEASUREMENT"));
    }
    if !crate::admits(&policy.host_data, |h| h.0 == report.host_data) {
        return Err(Refusal::MeasurementNotAllowed("HOST_DATA"));
    }
    if !crate::admits(&policy.chip_ids, |c| c.0 == report.chip_id) {
        return Err(Refusal::InstanceNotAllowed);
    }

    let (valid_from_ms, valid_until_ms) = certs::window(&chain.certs);
    let measurement = hex::encode(report.measurement);
    let chip_masked = report.chip_id.iter().all(|&b| b == 0);
    Ok(Verified {
        platform: Platform::SevSnp,
        measurement: measurement.clone(),
        measurements: vec![Field::new("measurement", measurement)],
        measurements_pinned: pinned,
        report_data: Some(hex::encode(report.report_data)),
        report_data_checked: expected.report_data.is_some(),
        nonce: None,
        nonce_checked: false,
        attributes: vec![
            Field::new("product", chain.product.as_str()),
            Field::new("signing_key", chain.kind.as_str()),
            Field::new("report_version", report.version.to_string()),
            Field::new("policy", format!("{:#x}", report.policy)),
            Field::new("debug", "false"),
            Field::new("vmpl", report.vmpl.to_string()),
            Field::new("guest_svn", report.guest_svn.to_string()),
            Field::new("host_data", hex::encode(report.host_data)),
            Field::new(
                "host_data_checked",
                expected.host_data.is_some().to_string(),
            ),
            Field::new("family_id", hex::encode(report.family_id)),
            Field::new("image_id", hex::encode(report.image_id)),
            Field::new("id_key_digest", hex::encode(report.id_key_digest)),
            Field::new("author_key_digest", hex::encode(report.author_key_digest)),
            Field::new("platform_info", format!("{:#x}", report.plat_info)),
            Field::new(
                "firmware",
                format!(
                    "{}.{}.{}",
                    report.current_major, report.current_minor, report.current_build
                ),
            ),
            Field::new("current_tcb", hex::encode(report.current_tcb)),
            Field::new("committed_tcb", hex::encode(report.committed_tcb)),
            Field::new("launch_tcb", hex::encode(report.launch_tcb)),
        ],
        tcb_status: Some(format!(
            "reported_tcb {} (bootloader {}, tee {}, snp {}, microcode {}{}); equals the {} TCB",
            hex::encode(report.reported_tcb),
            reported.bootloader,
            reported.tee,
            reported.snp,
            reported.microcode,
            reported
                .fmc
                .map(|f| format!(", fmc {f}"))
                .unwrap_or_default(),
            chain.kind.as_str().to_uppercase(),
        )),
        instance_id: (!chip_masked).then(|| hex::encode(report.chip_id)),
        valid_from_ms,
        valid_until_ms,
        verified_at_ms: now_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_arks_are_the_pinned_ones() {
        for p in Product::ALL {
            let ark = builtin(p.builtin_ark()).unwrap();
            assert_eq!(product_for_ark(&ark.fingerprint()), Some(p), "{p:?}");
        }
    }

    #[test]
    fn tcb_layouts() {
        let raw = [3, 0, 0, 0, 0, 0, 8, 0x73];
        let t = Tcb::decode(raw, Product::Milan);
        assert_eq!((t.bootloader, t.tee, t.snp, t.microcode), (3, 0, 8, 0x73));
        let t = Tcb::decode([1, 2, 3, 4, 0, 0, 0, 5], Product::Turin);
        assert_eq!(
            (t.fmc, t.bootloader, t.tee, t.snp, t.microcode),
            (Some(1), 2, 3, 4, 5)
        );
    }

    #[test]
    fn short_report_is_malformed() {
        assert!(matches!(
            Report::parse(&[0u8; 100]),
            Err(Refusal::Malformed(_))
        ));
    }
}
