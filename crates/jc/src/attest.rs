//! Attestation: what a box proves about a run, and how a party checks it (design §8).
//!
//! The statement is the JCS of {platform, measurement, program hash, run id, both run public
//! keys, the asker's nonce, expiry, the provider table's hash, and — when the box has them — its
//! TLS key's hash and its configuration hash}; its SHA-512 is the 64-byte report data a hardware
//! attester signs (it fits SEV-SNP and TDX report data and Nitro user data). The configuration
//! hash ([`BoxConfiguration`]) is also what the host set at launch as SEV-SNP HOST_DATA / TDX
//! MRCONFIGID: the box checks that at start ([`ConfigBound`]) and a node checks the report's
//! field against the statement's hash. Platforms sit behind [`Attester`] / [`Verifier`];
//! `insecure-dev` is accepted only when the verifying node's config allows it *and* the program
//! lists it.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signer, SigningKey, Verifier as _, VerifyingKey};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use sha2::{Digest, Sha256, Sha384, Sha512};

use crate::dsse::{ApprovedProgram, key_hex};
use crate::error::{JcError, Result};
use crate::jcs;
use crate::program::{INSECURE_DEV, decode_hex32};
use skillbox_attest::nvidia;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Statement {
    pub platform: String,
    pub measurement: String,
    pub program_hash: String,
    pub run_id: String,
    /// The run's X25519 HPKE public key (stakes are sealed to it), hex.
    pub hpke_public_key: String,
    /// The run's Ed25519 receipt key, hex.
    pub receipt_public_key: String,
    /// The asker's nonce, as it asked (hex).
    pub nonce: String,
    pub expires_at: u64,
    /// sha256 (hex) of the canonical provider table the attestation carries: which base URL
    /// each provider id reaches from this box. Bound here, so a box cannot show one table and
    /// send plaintext to another host.
    pub providers: String,
    /// sha256 (hex) of the DER SubjectPublicKeyInfo of the TLS key the box serves with, a key
    /// made inside it at start: a node pins exactly that key for the run's connections, so no
    /// TLS front or proxy can sit between. Absent for a box serving plain HTTP (loopback only);
    /// left out of the canonical form then, so statements without TLS keep their bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_spki_sha256: Option<String>,
    /// sha256 (hex) of the box's configuration ([`BoxConfiguration`], provider table included),
    /// the value the host set as HOST_DATA (SEV-SNP) / MRCONFIGID (TDX) when it launched the
    /// guest, which the box checked at start. Absent for a box without a launch configuration
    /// (insecure-dev); a node refuses an SEV-SNP or TDX statement without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_sha256: Option<String>,
    /// For a box whose model runs on GPUs: [`nvidia::list_binding_sha256`] (hex) of the GPU
    /// evidence the attestation carries, made for [`gpu_nonce`] of the asker's nonce. Bound here,
    /// so the CPU report vouches for exactly those GPU reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_evidence_sha256: Option<String>,
}

impl Statement {
    pub fn to_canonical(&self) -> Result<Vec<u8>> {
        jcs::to_canonical(self)
    }
}

/// SHA-512 of the canonical statement bytes.
pub fn report_data(statement_bytes: &[u8]) -> [u8; 64] {
    Sha512::digest(statement_bytes).into()
}

/// What a box answers to `GET /v1/runs/{id}/attestation`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Attestation {
    pub platform: String,
    /// base64 of the canonical statement bytes (what the report data is the hash of).
    pub statement: String,
    /// Platform-specific evidence.
    pub evidence: serde_json::Value,
    /// The box's provider table: provider id → the exact base URL it calls (`in-process` for
    /// the embedded model). Its hash is in the statement.
    #[serde(default)]
    pub providers: BTreeMap<String, String>,
    /// The box's configuration, whose hash the statement binds ([`Statement::config_sha256`])
    /// and the hardware reports as HOST_DATA / MRCONFIGID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<BoxConfiguration>,
    /// The evidence of the box's GPUs (NVIDIA SPDM reports), whose hash the statement binds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<nvidia::Evidence>,
}

impl Attestation {
    /// The statement as signed — its bytes (what the report data is the hash of) and its
    /// fields — read as a verifier reads it: base64 of canonical JSON, nothing else.
    pub fn statement(&self) -> Result<(Vec<u8>, Statement)> {
        let bytes = STANDARD
            .decode(&self.statement)
            .map_err(|_| JcError::Evidence("statement is not base64".into()))?;
        let value = jcs::parse_canonical(&bytes)?;
        let st = serde_json::from_value(value)
            .map_err(|e| JcError::Evidence(format!("statement: {e}")))?;
        Ok((bytes, st))
    }
}

/// What a box is configured to do that a party trusts it with: where each provider's plaintext
/// goes and whose programs it serves. Its SHA-256 over the canonical (RFC 8785) bytes is the
/// box's configuration hash, which the host sets at launch as SEV-SNP HOST_DATA (32 bytes) or
/// TDX MRCONFIGID (the hash, then 16 zero bytes): the hardware then vouches that the box runs
/// with this configuration, and a node's pin may name the hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoxConfiguration {
    /// The form's version: 1.
    pub skillbox_box_config: u32,
    /// Provider id → the exact base URL the box calls (`in-process` for the embedded model),
    /// as the attestation's provider table.
    pub providers: BTreeMap<String, String>,
    /// The node keys one of which a program must name (`--allow-key`), sorted; absent: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_keys: Option<Vec<String>>,
    /// GPUs whose evidence every attestation carries (the model runs on them); absent: none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpus: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl BoxConfiguration {
    pub const VERSION: u32 = 1;

    /// The configuration of a box with this provider table and allow-list (keys lowercased,
    /// sorted and without repeats, so the same list always hashes the same).
    pub fn new(
        providers: BTreeMap<String, String>,
        allowed_keys: Option<&[String]>,
    ) -> BoxConfiguration {
        let allowed_keys = allowed_keys.map(|keys| {
            let mut keys: Vec<String> = keys.iter().map(|k| k.to_ascii_lowercase()).collect();
            keys.sort();
            keys.dedup();
            keys
        });
        BoxConfiguration {
            skillbox_box_config: Self::VERSION,
            providers,
            allowed_keys,
            gpus: 0,
        }
    }

    /// The same configuration for a box whose model runs on `gpus` GPUs.
    pub fn with_gpus(self, gpus: u32) -> BoxConfiguration {
        BoxConfiguration { gpus, ..self }
    }

    /// SHA-256 of the canonical bytes: the configuration hash.
    pub fn sha256(&self) -> Result<[u8; 32]> {
        Ok(Sha256::digest(jcs::to_canonical(self)?).into())
    }

    /// The value the host sets at launch for `platform`: SEV-SNP HOST_DATA is the hash; TDX
    /// MRCONFIGID is the hash followed by 16 zero bytes (one hash to pin on both platforms).
    pub fn launch_value(hash: &[u8; 32], platform: &str) -> Vec<u8> {
        let mut v = hash.to_vec();
        if platform == skillbox_attest::Platform::Tdx.as_str() {
            v.resize(48, 0);
        }
        v
    }
}

/// The [`Attester`] methods a wrapper that adds one binding to the statement passes to the
/// attester it wraps (`self.inner`): the platform, measurement and identity stay the inner's.
/// Exported for the wrappers tests make (one that counts the statements a box makes).
#[macro_export]
macro_rules! same_identity_as_inner {
    () => {
        fn platform(&self) -> &str {
            self.inner.platform()
        }
        fn measurement(&self) -> &str {
            self.inner.measurement()
        }
        fn identity_key(&self) -> Option<String> {
            self.inner.identity_key()
        }
        fn launch_config(&self) -> Option<Vec<u8>> {
            self.inner.launch_config()
        }
    };
}

/// An attester whose statements bind the box's configuration. Made only when the hardware's
/// launch value (HOST_DATA / MRCONFIGID, read by the attester at start) is the configuration's
/// hash: a box started with another configuration than its host launched it for does not start.
pub struct ConfigBound {
    inner: std::sync::Arc<dyn Attester>,
    config: BoxConfiguration,
    hash: String,
}

impl ConfigBound {
    pub fn new(inner: std::sync::Arc<dyn Attester>, config: BoxConfiguration) -> Result<Self> {
        let hash = config.sha256()?;
        let want = BoxConfiguration::launch_value(&hash, inner.platform());
        let field = match inner.platform() {
            "tdx" => "MRCONFIGID",
            _ => "HOST_DATA",
        };
        match inner.launch_config() {
            Some(got) if got == want => {}
            Some(got) => {
                return Err(JcError::Internal(format!(
                    "this {} guest was launched with {field} {}, but the box's configuration \
                     hashes to {}: launch it with that value (skillbox box --show-identity \
                     prints it), or start the box with the configuration it was launched for",
                    inner.platform(),
                    hex::encode(got),
                    hex::encode(&want)
                )));
            }
            None => {
                return Err(JcError::Internal(format!(
                    "the {} attester reports no launch configuration to bind",
                    inner.platform()
                )));
            }
        }
        Ok(ConfigBound {
            inner,
            config,
            hash: hex::encode(hash),
        })
    }
}

impl Attester for ConfigBound {
    same_identity_as_inner!();
    fn tls_spki_sha256(&self) -> Option<String> {
        self.inner.tls_spki_sha256()
    }
    fn attest(&self, statement: &Statement) -> Result<Attestation> {
        let bound = Statement {
            config_sha256: Some(self.hash.clone()),
            ..statement.clone()
        };
        let mut attestation = self.inner.attest(&bound)?;
        attestation.config = Some(self.config.clone());
        Ok(attestation)
    }
}

/// What the provider table says of a provider that runs inside the box.
pub const IN_PROCESS: &str = "in-process";

/// sha256 (hex) of a provider table's canonical JSON.
pub fn provider_table_hash(table: &BTreeMap<String, String>) -> Result<String> {
    Ok(hex::encode(Sha256::digest(jcs::to_canonical(table)?)))
}

/// Produces evidence for a statement. One per box process.
pub trait Attester: Send + Sync {
    fn platform(&self) -> &str;
    fn measurement(&self) -> &str;
    /// The public key the evidence is signed with, when the platform's identity is one
    /// (insecure-dev); what a node pins.
    fn identity_key(&self) -> Option<String> {
        None
    }
    /// The hash of the TLS key the box serves with, which the statement binds
    /// ([`Statement::tls_spki_sha256`]); `None` for a box serving plain HTTP.
    fn tls_spki_sha256(&self) -> Option<String> {
        None
    }
    /// What the hardware says the host set at launch for the box's configuration: SEV-SNP
    /// HOST_DATA, TDX MRCONFIGID (read from a report at start); `None` where there is no such
    /// field (insecure-dev, Nitro).
    fn launch_config(&self) -> Option<Vec<u8>> {
        None
    }
    fn attest(&self, statement: &Statement) -> Result<Attestation>;
}

/// An attester whose every statement binds the TLS key the box serves with: whatever the box
/// core put in the statement, the key field is this one.
pub struct TlsBound {
    inner: std::sync::Arc<dyn Attester>,
    spki_sha256: String,
}

impl TlsBound {
    pub fn new(inner: std::sync::Arc<dyn Attester>, spki_sha256: String) -> TlsBound {
        TlsBound { inner, spki_sha256 }
    }
}

impl Attester for TlsBound {
    same_identity_as_inner!();
    fn tls_spki_sha256(&self) -> Option<String> {
        Some(self.spki_sha256.clone())
    }
    fn attest(&self, statement: &Statement) -> Result<Attestation> {
        let bound = Statement {
            tls_spki_sha256: Some(self.spki_sha256.clone()),
            ..statement.clone()
        };
        self.inner.attest(&bound)
    }
}

/// The requester nonce a box asks its GPUs to sign for an attestation: the asker's nonce when
/// it is 32 bytes (what NVIDIA's own flow passes a GPU), else SHA-256 of a label and it. Fresh
/// for the asker either way; the CPU statement binds the GPU reports made with it.
pub fn gpu_nonce(asker_nonce_hex: &str) -> [u8; 32] {
    let bytes =
        hex::decode(asker_nonce_hex).unwrap_or_else(|_| asker_nonce_hex.as_bytes().to_vec());
    match <[u8; 32]>::try_from(bytes.as_slice()) {
        Ok(n) => n,
        Err(_) => {
            let mut h = Sha256::new();
            h.update(b"skillbox/gpu-nonce/1");
            h.update(&bytes);
            h.finalize().into()
        }
    }
}

/// The box's GPUs: evidence from each for a requester nonce (NVIDIA SPDM GET_MEASUREMENTS
/// with its certificate chain).
pub trait GpuAttester: Send + Sync {
    fn evidence(&self, nonce: &[u8; 32]) -> Result<Vec<nvidia::Evidence>>;
}

/// The NVIDIA GPUs a system shows, as a box looks for them at start: a GPU the host passed into
/// the guest is there whether or not the box attests it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VisibleGpus {
    /// PCI functions of NVIDIA's vendor id (`0x10de`) whose class is a display controller (VGA
    /// `0x0300`, 3D `0x0302`: an H100 is the latter), by address; NVSwitches (bridges) are not.
    pub pci: Vec<String>,
    /// The driver's per-GPU device nodes (`nvidia0`, `nvidia1`, …; not `nvidiactl`, `-uvm`).
    pub nodes: Vec<String>,
}

/// NVIDIA's PCI vendor id.
const NVIDIA_PCI_VENDOR: &str = "0x10de";

impl VisibleGpus {
    /// Look under `root` (`/` on a box; a directory double in tests): `sys/bus/pci/devices`, which
    /// lists the guest's PCI functions whether or not a driver is loaded, and `dev`, where the
    /// driver makes a node per GPU (CUDA reaches a GPU through it). Unreadable entries are
    /// skipped: what the kernel shows is read, nothing is asked of a device.
    pub fn under(root: &std::path::Path) -> VisibleGpus {
        let names = |dir: std::path::PathBuf| -> Vec<String> {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return Vec::new();
            };
            let mut names: Vec<String> = entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect();
            names.sort();
            names
        };
        let pci_dir = root.join("sys/bus/pci/devices");
        let read = |f: std::path::PathBuf| std::fs::read_to_string(f).unwrap_or_default();
        let pci = names(pci_dir.clone())
            .into_iter()
            .filter(|addr| {
                let dev = pci_dir.join(addr);
                read(dev.join("vendor"))
                    .trim()
                    .eq_ignore_ascii_case(NVIDIA_PCI_VENDOR)
                    && read(dev.join("class")).trim().starts_with("0x03")
            })
            .collect();
        let nodes = names(root.join("dev"))
            .into_iter()
            .filter(|n| {
                n.strip_prefix("nvidia")
                    .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            })
            .collect();
        VisibleGpus { pci, nodes }
    }

    /// How many GPUs: each shows as a PCI function and, with the driver loaded, a node.
    pub fn count(&self) -> usize {
        self.pci.len().max(self.nodes.len())
    }

    /// Where they were seen, for a message (PCI addresses, else device nodes).
    pub fn describe(&self) -> String {
        if self.pci.is_empty() {
            self.nodes
                .iter()
                .map(|n| format!("/dev/{n}"))
                .collect::<Vec<_>>()
                .join(", ")
        } else {
            format!("PCI {}", self.pci.join(", "))
        }
    }
}

/// An attester for a box whose model runs on GPUs: every statement binds the hash of the GPU
/// evidence made for the asker's nonce, and the attestation carries that evidence.
pub struct GpuBound {
    inner: std::sync::Arc<dyn Attester>,
    gpus: std::sync::Arc<dyn GpuAttester>,
}

impl GpuBound {
    pub fn new(
        inner: std::sync::Arc<dyn Attester>,
        gpus: std::sync::Arc<dyn GpuAttester>,
    ) -> GpuBound {
        GpuBound { inner, gpus }
    }
}

impl Attester for GpuBound {
    same_identity_as_inner!();
    fn tls_spki_sha256(&self) -> Option<String> {
        self.inner.tls_spki_sha256()
    }
    fn attest(&self, statement: &Statement) -> Result<Attestation> {
        let gpus = self.gpus.evidence(&gpu_nonce(&statement.nonce))?;
        if gpus.is_empty() {
            return Err(JcError::Internal("the GPUs gave no evidence".into()));
        }
        let bound = Statement {
            gpu_evidence_sha256: Some(hex::encode(nvidia::list_binding_sha256(&gpus))),
            ..statement.clone()
        };
        let mut attestation = self.inner.attest(&bound)?;
        attestation.gpus = gpus;
        Ok(attestation)
    }
}

/// What a platform's evidence vouches for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vouched {
    pub measurement: String,
    /// The signing key of the evidence, for platforms whose identity is a key (insecure-dev).
    pub key: Option<String>,
    /// The platform's TCB verdict (TDX's status, SEV-SNP's reported TCB), in the verifier's own
    /// words — never text from the evidence; none for insecure-dev, Nitro, NVIDIA.
    pub tcb_status: Option<String>,
}

/// Checks a platform's evidence over `report_data` and returns the measurement it vouches for.
pub trait Verifier: Send + Sync {
    fn platform(&self) -> &str;
    fn verify_evidence(
        &self,
        attestation: &Attestation,
        statement: &Statement,
        report_data: &[u8; 64],
        now_ms: u64,
    ) -> Result<Vouched>;
}

/// SHA-384 of a file (the insecure-dev measurement of the box's own executable).
pub fn measure_file(path: &std::path::Path) -> Result<String> {
    let mut f = std::fs::File::open(path)
        .map_err(|e| JcError::Internal(format!("measure {}: {e}", path.display())))?;
    let mut h = Sha384::new();
    std::io::copy(&mut f, &mut h)
        .map_err(|e| JcError::Internal(format!("measure {}: {e}", path.display())))?;
    Ok(hex::encode(h.finalize()))
}

/// The software attester: a key made at box start signs the report data. No hardware isolation:
/// anyone who runs the same binary can produce this evidence, which is why both sides must opt in.
pub struct InsecureDevAttester {
    key: SigningKey,
    measurement: String,
}

impl InsecureDevAttester {
    /// Measure the running executable (`std::env::current_exe`).
    pub fn for_current_exe() -> Result<InsecureDevAttester> {
        let exe =
            std::env::current_exe().map_err(|e| JcError::Internal(format!("current_exe: {e}")))?;
        Ok(InsecureDevAttester::with_measurement(measure_file(&exe)?))
    }

    pub fn with_measurement(measurement: String) -> InsecureDevAttester {
        let mut seed = zeroize::Zeroizing::new([0u8; 32]);
        getrandom::fill(&mut seed[..]).expect("the OS random source is available");
        InsecureDevAttester {
            key: SigningKey::from_bytes(&seed),
            measurement,
        }
    }

    /// The attester with the persistent key kept in `path` (hex of a 32-byte seed, mode 0600),
    /// made there on first use: the box keeps one identity across restarts, which nodes pin.
    pub fn with_key_file(path: &std::path::Path, measurement: String) -> Result<Self> {
        let fail = |what: &str, e: std::io::Error| {
            JcError::Internal(format!("box key {}: {what}: {e}", path.display()))
        };
        let seed = match std::fs::read_to_string(path) {
            Ok(text) => decode_hex32(text.trim()).ok_or_else(|| {
                JcError::Internal(format!(
                    "box key {} is not 64 hex digits; remove it to make a new identity",
                    path.display()
                ))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut seed = [0u8; 32];
                getrandom::fill(&mut seed[..])
                    .map_err(|e| JcError::Internal(format!("box key: no OS randomness: {e}")))?;
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(|e| fail("creating its folder", e))?;
                }
                write_private(path, hex::encode(seed).as_bytes())
                    .map_err(|e| fail("writing", e))?;
                seed
            }
            Err(e) => return Err(fail("reading", e)),
        };
        let seed = zeroize::Zeroizing::new(seed);
        Ok(InsecureDevAttester {
            key: SigningKey::from_bytes(&seed),
            measurement,
        })
    }

    /// The evidence key (hex), as a node pins it.
    pub fn public_key_hex(&self) -> String {
        key_hex(&self.key.verifying_key())
    }
}

/// Put `bytes` at `path` readable by this user only (0600 on Unix), synced: the box's key files
/// (attestation key, run-store key). Written to a new file of a random name beside it (made
/// with `O_EXCL`: never a file or link someone else put there — a key file's folder may be
/// shared, and a predictable temporary name opened for truncation handed the key to whoever
/// made that name first), then renamed over `path`, so a crash leaves no half key.
pub(crate) fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut suffix = [0u8; 8];
    getrandom::fill(&mut suffix).map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.tmp", hex::encode(suffix)));
    let tmp = path.with_file_name(name);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        opts.mode(0o600);
    }
    let written = opts.open(&tmp).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    });
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DevEvidence {
    report_data: String,
    key: String,
    signature: String,
}

impl Attester for InsecureDevAttester {
    fn platform(&self) -> &str {
        INSECURE_DEV
    }
    fn measurement(&self) -> &str {
        &self.measurement
    }
    fn identity_key(&self) -> Option<String> {
        Some(self.public_key_hex())
    }
    fn attest(&self, statement: &Statement) -> Result<Attestation> {
        let bytes = statement.to_canonical()?;
        let rd = report_data(&bytes);
        let sig = self.key.sign(&rd);
        let evidence = DevEvidence {
            report_data: hex::encode(rd),
            key: key_hex(&self.key.verifying_key()),
            signature: hex::encode(sig.to_bytes()),
        };
        Ok(Attestation {
            platform: INSECURE_DEV.into(),
            statement: STANDARD.encode(&bytes),
            evidence: serde_json::to_value(evidence)
                .map_err(|e| JcError::Internal(e.to_string()))?,
            providers: BTreeMap::new(),
            config: None,
            gpus: Vec::new(),
        })
    }
}

pub struct InsecureDevVerifier;

impl Verifier for InsecureDevVerifier {
    fn platform(&self) -> &str {
        INSECURE_DEV
    }
    fn verify_evidence(
        &self,
        attestation: &Attestation,
        statement: &Statement,
        rd: &[u8; 64],
        _now_ms: u64,
    ) -> Result<Vouched> {
        let ev: DevEvidence = serde_json::from_value(attestation.evidence.clone())
            .map_err(|e| JcError::Evidence(e.to_string()))?;
        if ev.report_data != hex::encode(rd) {
            return Err(JcError::ReportDataMismatch);
        }
        // The box's identity key, the same on every run's attestation: decoded once and kept
        // under its exact bytes (`program::ed25519_key`, a point decompression per attestation
        // before, issue 33). Only a key that decoded is kept, so another key's bytes — or bytes
        // that are no point — are decoded, or refused, as before; the signature is checked in
        // full every time.
        let key = decode_hex32(&ev.key)
            .and_then(|k| crate::program::ed25519_key(&k))
            .ok_or_else(|| JcError::Evidence("dev key".into()))?;
        let sig_bytes = hex::decode(&ev.signature)
            .map_err(|_| JcError::Evidence("signature is not hex".into()))?;
        let sig = ed25519_dalek::Signature::from_slice(&sig_bytes)
            .map_err(|_| JcError::Evidence("signature length".into()))?;
        key.verify(rd, &sig).map_err(|_| {
            JcError::Evidence("signature does not verify over the report data".into())
        })?;
        // A software key vouches for nothing about the code: the measurement is the box's claim,
        // and the key is the box's identity (which a node pins).
        Ok(Vouched {
            measurement: statement.measurement.clone(),
            key: Some(ev.key),
            tcb_status: None,
        })
    }
}

/// Whether a party accepts that `provider` is reached at `host` (`None`: in the box).
pub type ProviderHostCheck =
    dyn Fn(&skillbox_skill::ProviderId, Option<&str>) -> bool + Send + Sync;

/// A verifying party's attestation policy (from its config).
pub struct VerifyPolicy {
    pub allow_insecure_dev: bool,
    pub verifiers: Vec<Box<dyn Verifier>>,
    /// The evidence keys this party accepts from the box it asks (insecure-dev): its pin.
    /// Empty: any key (a party that pins nothing).
    pub box_keys: Vec<String>,
    /// The party's own pins of provider hosts; `None` accepts whatever the box attests.
    pub provider_hosts: Option<std::sync::Arc<ProviderHostCheck>>,
    /// The one platform this party accepts from the box it asks (its pin's, or the one it
    /// first showed); `None` accepts any platform a verifier is present for (tests, tools).
    /// Without it the box chooses the verifier by the platform it claims: a hardware-pinned
    /// box could answer with a software attestation for a key of its own (a downgrade).
    pub platform: Option<String>,
    /// The GPU golden values this party pins for a box's GPUs; `None` (or a policy pinning no
    /// block): an insecure-dev box's GPU reports are verified (NVIDIA root, signature, nonce,
    /// binding) with no measurement compared, a hardware box's are refused `gpu_not_pinned`.
    pub gpu: Option<std::sync::Arc<nvidia::Verifier>>,
}

impl VerifyPolicy {
    /// The verifiers available today; `insecure-dev` only if the config allows it.
    pub fn new(allow_insecure_dev: bool) -> VerifyPolicy {
        VerifyPolicy {
            allow_insecure_dev,
            verifiers: vec![Box::new(InsecureDevVerifier)],
            box_keys: Vec::new(),
            provider_hosts: None,
            platform: None,
            gpu: None,
        }
    }

    /// A policy that accepts no attestation at all (a box whose identity is not known).
    pub fn refusing() -> VerifyPolicy {
        VerifyPolicy {
            allow_insecure_dev: false,
            verifiers: Vec::new(),
            box_keys: Vec::new(),
            provider_hosts: None,
            platform: Some(String::new()),
            gpu: None,
        }
    }

    /// Accept `platform` only: every other verifier is dropped, and the verified platform is
    /// compared with it again.
    pub fn only_platform(mut self, platform: &str) -> VerifyPolicy {
        self.verifiers.retain(|v| v.platform() == platform);
        self.platform = Some(platform.to_owned());
        self
    }

    /// Only a box whose evidence is signed by one of `keys`.
    pub fn with_box_keys(mut self, keys: Vec<String>) -> VerifyPolicy {
        self.box_keys = keys;
        self
    }

    /// Also accept the hardware platform `verifier` vouches for (a pinned box's policy).
    pub fn with_verifier(mut self, verifier: Box<dyn Verifier>) -> VerifyPolicy {
        self.verifiers.push(verifier);
        self
    }

    /// Verify a box's GPUs against `verifier`'s pinned golden values.
    pub fn with_gpu_verifier(mut self, verifier: std::sync::Arc<nvidia::Verifier>) -> Self {
        self.gpu = Some(verifier);
        self
    }

    /// Only provider hosts `check` accepts.
    pub fn with_provider_hosts(mut self, check: std::sync::Arc<ProviderHostCheck>) -> Self {
        self.provider_hosts = Some(check);
        self
    }
}

/// A run whose attestation checked out: what the party may now seal to and verify with.
#[derive(Clone, Debug)]
pub struct VerifiedRun {
    pub run_id: String,
    pub program_hash: crate::program::ProgramHash,
    pub platform: String,
    pub measurement: String,
    pub hpke_public_key: [u8; 32],
    pub receipt_key: VerifyingKey,
    pub expires_at: u64,
    /// True when the run was accepted on an `insecure-dev` attestation: every surface that
    /// shows the call must say so.
    pub no_hardware_isolation: bool,
    /// The TCB verdict of the evidence (see [`Vouched::tcb_status`]).
    pub tcb_status: Option<String>,
    /// The TLS key the statement binds (see [`Statement::tls_spki_sha256`]): the only key the
    /// run's connections accept.
    pub tls_spki_sha256: Option<String>,
}

/// The public facts of a verified run, as a party keeps them across a restart: no secret in it,
/// and nothing a party could not re-derive from the attestation it checked.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VerifiedRunRecord {
    pub run_id: String,
    pub program_hash: String,
    pub platform: String,
    pub measurement: String,
    pub hpke_public_key: String,
    pub receipt_key: String,
    pub expires_at: u64,
    pub no_hardware_isolation: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcb_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_spki_sha256: Option<String>,
}

impl VerifiedRun {
    pub fn to_record(&self) -> VerifiedRunRecord {
        VerifiedRunRecord {
            run_id: self.run_id.clone(),
            program_hash: self.program_hash.to_hex(),
            platform: self.platform.clone(),
            measurement: self.measurement.clone(),
            hpke_public_key: hex::encode(self.hpke_public_key),
            receipt_key: hex::encode(self.receipt_key.to_bytes()),
            expires_at: self.expires_at,
            no_hardware_isolation: self.no_hardware_isolation,
            tcb_status: self.tcb_status.clone(),
            tls_spki_sha256: self.tls_spki_sha256.clone(),
        }
    }

    /// Back from a stored record (a malformed one is an error, never a panic).
    pub fn from_record(r: &VerifiedRunRecord) -> Result<VerifiedRun> {
        let bad = |what: &str| JcError::Internal(format!("stored verified run: bad {what}"));
        let hpke_public_key =
            crate::program::decode_hex32(&r.hpke_public_key).ok_or_else(|| bad("hpke key"))?;
        let receipt =
            crate::program::decode_hex32(&r.receipt_key).ok_or_else(|| bad("receipt key"))?;
        Ok(VerifiedRun {
            run_id: r.run_id.clone(),
            program_hash: crate::program::ProgramHash::from_hex(&r.program_hash)?,
            platform: r.platform.clone(),
            measurement: r.measurement.clone(),
            hpke_public_key,
            receipt_key: VerifyingKey::from_bytes(&receipt).map_err(|_| bad("receipt key"))?,
            expires_at: r.expires_at,
            no_hardware_isolation: r.no_hardware_isolation,
            tcb_status: r.tcb_status.clone(),
            tls_spki_sha256: match &r.tls_spki_sha256 {
                Some(k) => Some(tls_key_hex(k).ok_or_else(|| bad("tls key"))?),
                None => None,
            },
        })
    }
}

/// What a box-level attestation ([`verify_box_attestation`]) established: the box behind a
/// URL is one this party's policy accepts, and it serves with the TLS key its statement binds.
/// Bound to no run: it admits a key, never a run's keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedBox {
    pub platform: String,
    pub measurement: String,
    /// The TCB verdict of the evidence (see [`Vouched::tcb_status`]).
    pub tcb_status: Option<String>,
    /// The TLS key the statement binds; `None` for a box serving plain HTTP.
    pub tls_spki_sha256: Option<String>,
    pub no_hardware_isolation: bool,
}

/// The checks of §8 that concern the box, not a run: the platform this party accepts, the
/// evidence over the statement's report data, the measurement, the pinned key, the provider
/// table and configuration the statement binds, the GPU evidence. A run's attestation and the
/// box's own both go through exactly these (one verifier, one policy).
fn verify_box_evidence(
    attestation: &Attestation,
    policy: &VerifyPolicy,
    now: u64,
) -> Result<(Statement, Vouched)> {
    if attestation.platform == INSECURE_DEV && !policy.allow_insecure_dev {
        return Err(JcError::DevAttestationNotAllowed);
    }
    // The platform is this party's choice (the pin), never the box's claim.
    let expected = |platform: &str| policy.platform.as_deref().is_none_or(|p| p == platform);
    if !expected(&attestation.platform) {
        return Err(JcError::PlatformNotAllowed(
            attestation.platform.chars().take(32).collect(),
        ));
    }
    let verifier = policy
        .verifiers
        .iter()
        .find(|v| v.platform() == attestation.platform)
        .ok_or_else(|| {
            JcError::PlatformNotAllowed(attestation.platform.chars().take(32).collect())
        })?;
    let (bytes, st) = attestation.statement()?;
    if st.platform != attestation.platform {
        return Err(JcError::Evidence(
            "statement platform differs from the attestation's".into(),
        ));
    }
    if verifier.platform() != st.platform || !expected(&st.platform) {
        return Err(JcError::PlatformNotAllowed(
            st.platform.chars().take(32).collect(),
        ));
    }
    let rd = report_data(&bytes);
    let vouched = verifier.verify_evidence(attestation, &st, &rd, now.saturating_mul(1000))?;
    if vouched.measurement != st.measurement {
        return Err(JcError::Evidence(
            "evidence measurement differs from the statement's".into(),
        ));
    }
    // Pins, not claims: a box answering on the pinned URL with another key is another box.
    if !policy.box_keys.is_empty()
        && !vouched
            .key
            .as_ref()
            .is_some_and(|k| policy.box_keys.iter().any(|p| p.eq_ignore_ascii_case(k)))
    {
        return Err(JcError::BoxKeyNotPinned);
    }
    // The provider the program grants must be reached where the attested table says, and
    // where this party's own pins allow.
    if provider_table_hash(&attestation.providers)? != st.providers {
        return Err(JcError::Evidence(
            "provider table differs from the statement's".into(),
        ));
    }
    check_config(attestation, &st)?;
    check_gpus(attestation, &st, policy, now.saturating_mul(1000))?;
    Ok((st, vouched))
}

/// Every client-side check of a box-level attestation (`GET /v1/attestation?nonce=`) asked for
/// `nonce`: the box checks a run's attestation makes ([`verify_box_evidence`]), a statement of
/// the box itself (a run's statement names a run, a program and its keys: refused here, as a
/// box statement, naming none, never passes [`verify_attestation`]), the nonce and the expiry.
/// Whether the TLS key it binds is the connection's is the client's to check.
pub fn verify_box_attestation(
    attestation: &Attestation,
    nonce: &str,
    policy: &VerifyPolicy,
    now: u64,
) -> Result<VerifiedBox> {
    let (st, vouched) = verify_box_evidence(attestation, policy, now)?;
    if !st.run_id.is_empty() {
        return Err(JcError::StatementRunMismatch {
            found: st.run_id.chars().take(64).collect(),
        });
    }
    if !st.program_hash.is_empty()
        || !st.hpke_public_key.is_empty()
        || !st.receipt_public_key.is_empty()
    {
        return Err(JcError::StatementProgramMismatch {
            found: st.program_hash.chars().take(64).collect(),
        });
    }
    let tls_spki_sha256 = fresh_for(&st, nonce, now)?;
    Ok(VerifiedBox {
        no_hardware_isolation: st.platform == INSECURE_DEV,
        platform: st.platform,
        measurement: st.measurement,
        tcb_status: vouched.tcb_status,
        tls_spki_sha256,
    })
}

/// The statement answers `nonce` and has not expired: the TLS key it binds (lowercase hex).
fn fresh_for(st: &Statement, nonce: &str, now: u64) -> Result<Option<String>> {
    if st.nonce != nonce {
        return Err(JcError::NonceMismatch);
    }
    if now >= st.expires_at {
        return Err(JcError::AttestationExpired {
            expires_at: st.expires_at,
            now,
        });
    }
    match &st.tls_spki_sha256 {
        Some(k) => Ok(Some(
            tls_key_hex(k).ok_or_else(|| JcError::Evidence("tls key".into()))?,
        )),
        None => Ok(None),
    }
}

/// Every client-side check of §8 on one attestation.
pub fn verify_attestation(
    attestation: &Attestation,
    program: &ApprovedProgram,
    run_id: &str,
    nonce: &str,
    policy: &VerifyPolicy,
    now: u64,
) -> Result<VerifiedRun> {
    let (st, vouched) = verify_box_evidence(attestation, policy, now)?;
    let grant = &program.program.provider;
    let attested = attestation.providers.get(&grant.id.to_string());
    if attested.map(String::as_str) != Some(grant.host.as_deref().unwrap_or(IN_PROCESS)) {
        return Err(JcError::ProviderHostNotAttested);
    }
    if let Some(check) = &policy.provider_hosts
        && !check(&grant.id, grant.host.as_deref())
    {
        return Err(JcError::ProviderHostNotPinned);
    }
    if !program.program.lists_box(&st.platform, &st.measurement) {
        return Err(JcError::BoxNotListed {
            platform: st.platform.clone(),
            measurement: st.measurement.clone(),
        });
    }
    if st.program_hash != program.hash.to_hex() {
        return Err(JcError::StatementProgramMismatch {
            found: st.program_hash.chars().take(64).collect(),
        });
    }
    if st.run_id != run_id {
        return Err(JcError::StatementRunMismatch {
            found: st.run_id.chars().take(64).collect(),
        });
    }
    let tls_spki_sha256 = fresh_for(&st, nonce, now)?;
    program.program.check_expiry(now)?;
    let hpke_public_key =
        decode_hex32(&st.hpke_public_key).ok_or_else(|| JcError::Evidence("hpke key".into()))?;
    let receipt_key = decode_hex32(&st.receipt_public_key)
        .and_then(|k| VerifyingKey::from_bytes(&k).ok())
        .ok_or_else(|| JcError::Evidence("receipt key".into()))?;
    Ok(VerifiedRun {
        run_id: st.run_id,
        program_hash: program.hash,
        platform: st.platform.clone(),
        measurement: st.measurement,
        hpke_public_key,
        receipt_key,
        expires_at: st.expires_at,
        no_hardware_isolation: st.platform == INSECURE_DEV,
        tcb_status: vouched.tcb_status,
        tls_spki_sha256,
    })
}

/// The configuration the attestation carries is the one the statement binds (and so the one
/// the hardware reported at launch, which the platform's verifier compared), and its provider
/// table is the attested one.
fn check_config(attestation: &Attestation, st: &Statement) -> Result<()> {
    let differs = || JcError::Evidence("box configuration differs from the statement's".into());
    match (&attestation.config, &st.config_sha256) {
        (None, None) => Ok(()),
        (Some(config), Some(hash)) => {
            if !hash.eq_ignore_ascii_case(&hex::encode(config.sha256()?)) {
                return Err(differs());
            }
            if config.providers != attestation.providers {
                return Err(JcError::Evidence(
                    "provider table differs from the box configuration's".into(),
                ));
            }
            Ok(())
        }
        _ => Err(differs()),
    }
}

/// The GPU evidence the attestation carries is exactly what the statement (and so the CPU
/// report) binds, as many GPUs as the bound configuration names, and each GPU's report verifies
/// for the asker's nonce: another GPU's genuine report swapped in, one dropped or added, or one
/// made for another asker is refused. A hardware box's GPUs must meet golden values the party
/// pins (`gpu_not_pinned` otherwise): nothing else in their reports tells CC on from off.
fn check_gpus(
    attestation: &Attestation,
    st: &Statement,
    policy: &VerifyPolicy,
    now_ms: u64,
) -> Result<()> {
    let mismatch = JcError::HardwareRefused("gpu_evidence_mismatch");
    let wanted = attestation.config.as_ref().map_or(0, |c| c.gpus) as usize;
    let bound = match &st.gpu_evidence_sha256 {
        // No GPU at all is fine only for a party that pins none: one that pins its box's GPUs
        // does not take a box whose operator left their evidence out (a GPU build offloads the
        // model, the request and the body with it, to GPUs nobody attested).
        None if attestation.gpus.is_empty() && wanted == 0 && policy.gpu.is_none() => {
            return Ok(());
        }
        None => return Err(mismatch),
        Some(h) => h,
    };
    if attestation.gpus.is_empty()
        || !bound.eq_ignore_ascii_case(&hex::encode(nvidia::list_binding_sha256(&attestation.gpus)))
    {
        return Err(mismatch);
    }
    if wanted != 0 && attestation.gpus.len() != wanted {
        return Err(mismatch);
    }
    let refused = |r: skillbox_attest::Refusal| JcError::HardwareRefused(r.code());
    let expected = nvidia::Expected {
        nonce: Some(gpu_nonce(&st.nonce)),
    };
    // The floor a CPU verifier keeps even unpinned (a debug guest is refused), for GPUs: the
    // signed SPDM report carries no confidential-computing or devtools flag (NVIDIA's verifiers
    // read the mode from NVML, the attesting machine's own driver, and otherwise see a GPU with
    // CC off or in devtools mode only as measurements that differ from its RIM's golden
    // values). So on a hardware box, whose isolation is the point, a GPU is taken only against
    // golden values this party pins; unpinned it is refused, whatever mode it may be in.
    let pinned = policy
        .gpu
        .as_ref()
        .is_some_and(|v| !v.policy().measurements.is_empty());
    if !pinned && st.platform != INSECURE_DEV {
        return Err(JcError::HardwareRefused("gpu_not_pinned"));
    }
    let unpinned;
    let verifier = match &policy.gpu {
        Some(v) => v.as_ref(),
        None => {
            unpinned = nvidia::Verifier::new(nvidia::Policy::unpinned()).map_err(refused)?;
            &unpinned
        }
    };
    verifier
        .verify_all(&attestation.gpus, &expected, now_ms)
        .map_err(refused)?;
    Ok(())
}

/// A TLS key hash as the statement carries it: 64 hex digits, lowercased (`None` otherwise).
fn tls_key_hex(k: &str) -> Option<String> {
    decode_hex32(k).map(hex::encode)
}
