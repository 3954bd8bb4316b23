//! Hardware attesters for a box inside a confidential VM: AMD SEV-SNP and Intel TDX through
//! Linux configfs-tsm (`/sys/kernel/config/tsm/report`). The box writes the statement's SHA-512
//! to an entry's `inblob` and reads the signed report (SNP) or quote (TDX) from `outblob`; SNP's
//! certificates come from `auxblob` (the host's certificate table) and/or files the operator
//! gives, TDX's collateral from a file the operator fetched (the box never reaches Intel's
//! services). The evidence is what `skillbox-attest` verifies on the node.
//!
//! [`CommandGpus`] gets a box's GPU evidence from a collector program (see
//! [`crate::attest::GpuBound`]).
//!
//! Tested against a directory double (no hardware here); untested on hardware so far.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use skillbox_attest::{Platform, snp, tdx};

use crate::attest::{Attestation, Attester, Statement, report_data};
use crate::error::{JcError, Result};

/// The entry this box uses under the configfs-tsm report directory.
pub const ENTRY: &str = "skillbox";

/// A configfs-tsm attester for one platform.
pub struct TsmAttester {
    entry: PathBuf,
    platform: Platform,
    measurement: String,
    /// HOST_DATA (SEV-SNP) / MRCONFIGID (TDX) of the first report: what the host set at launch.
    launch_config: Vec<u8>,
    /// SEV-SNP: certificates (PEM or DER files' contents) added to those in `auxblob`.
    snp_certs: Vec<Vec<u8>>,
    /// TDX: the collateral JSON for this platform's quotes.
    tdx_collateral: Option<Vec<u8>>,
    /// One report at a time: configfs entries are not safe for concurrent writers.
    lock: Mutex<()>,
}

fn io(what: &str, path: &Path, e: std::io::Error) -> JcError {
    JcError::Internal(format!("configfs-tsm {what} {}: {e}", path.display()))
}

impl TsmAttester {
    /// Open (or make) the box's entry under `root`, check the kernel's provider is `platform`'s,
    /// and read the launch measurement from a first report.
    pub fn open(
        root: &Path,
        platform: Platform,
        snp_certs: Vec<Vec<u8>>,
        tdx_collateral: Option<Vec<u8>>,
    ) -> Result<TsmAttester> {
        let want = match platform {
            Platform::SevSnp => "sev_guest",
            Platform::Tdx => "tdx_guest",
            other => {
                return Err(JcError::Internal(format!(
                    "configfs-tsm does not attest {other}"
                )));
            }
        };
        if platform == Platform::Tdx && tdx_collateral.is_none() {
            return Err(JcError::Internal(
                "a TDX box needs the collateral for its quotes (--tdx-collateral FILE)".into(),
            ));
        }
        let entry = root.join(ENTRY);
        if !entry.is_dir() {
            std::fs::create_dir(&entry).map_err(|e| io("making", &entry, e))?;
        }
        let provider_file = entry.join("provider");
        let provider = std::fs::read_to_string(&provider_file)
            .map_err(|e| io("reading", &provider_file, e))?;
        if provider.trim() != want {
            return Err(JcError::Internal(format!(
                "configfs-tsm provider is {:?}, not {want}: this is not a {platform} guest",
                provider.trim().chars().take(32).collect::<String>()
            )));
        }
        let mut att = TsmAttester {
            entry,
            platform,
            measurement: String::new(),
            launch_config: Vec::new(),
            snp_certs,
            tdx_collateral,
            lock: Mutex::new(()),
        };
        let first = att.report(&[0u8; 64])?;
        let refused = |r: skillbox_attest::Refusal| JcError::HardwareRefused(r.code());
        (att.measurement, att.launch_config) = match platform {
            Platform::SevSnp => {
                let report = snp::Report::parse(&first.0).map_err(refused)?;
                (hex::encode(report.measurement), report.host_data.to_vec())
            }
            _ => {
                let quote = tdx::Quote::parse(&first.0).map_err(refused)?;
                // The box identity, not MRTD (the firmware, shared by every guest under it).
                (
                    hex::encode(quote.report.identity()),
                    quote.report.mr_config_id.to_vec(),
                )
            }
        };
        Ok(att)
    }

    /// `inblob` ← report data; → (`outblob`, `auxblob` if any).
    fn report(&self, data: &[u8; 64]) -> Result<(Vec<u8>, Option<Vec<u8>>)> {
        let _one = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let inblob = self.entry.join("inblob");
        std::fs::write(&inblob, data).map_err(|e| io("writing", &inblob, e))?;
        let outblob = self.entry.join("outblob");
        let out = std::fs::read(&outblob).map_err(|e| io("reading", &outblob, e))?;
        let aux = std::fs::read(self.entry.join("auxblob")).ok();
        Ok((out, aux))
    }

    fn evidence(&self, out: Vec<u8>, aux: Option<Vec<u8>>) -> Result<serde_json::Value> {
        let refused = |r: skillbox_attest::Refusal| JcError::HardwareRefused(r.code());
        let json = match self.platform {
            Platform::SevSnp => {
                let mut files: Vec<Vec<u8>> = aux.as_deref().map(cert_table).unwrap_or_default();
                files.extend(self.snp_certs.iter().cloned());
                let refs: Vec<&[u8]> = files.iter().map(Vec::as_slice).collect();
                serde_json::to_value(snp::Evidence::from_files(&out, &refs).map_err(refused)?)
            }
            _ => {
                let collateral = self.tdx_collateral.as_deref().unwrap_or_default();
                serde_json::to_value(tdx::Evidence::from_files(&out, collateral).map_err(refused)?)
            }
        };
        json.map_err(|e| JcError::Internal(format!("evidence: {e}")))
    }
}

/// The certificates in an SEV-SNP certificate table (`auxblob`): entries of a 16-byte GUID, a
/// little-endian offset and length, ended by an all-zero entry. Each certificate is returned as
/// DER; which one is the VCEK/VLEK is told by its name when the evidence is built.
pub fn cert_table(aux: &[u8]) -> Vec<Vec<u8>> {
    let mut certs = Vec::new();
    for entry in aux.chunks_exact(24).take(64) {
        if entry.iter().all(|&b| b == 0) {
            break;
        }
        let word = |at: usize| {
            u32::from_le_bytes([entry[at], entry[at + 1], entry[at + 2], entry[at + 3]])
        };
        let (offset, len) = (word(16) as usize, word(20) as usize);
        if let Some(der) = offset.checked_add(len).and_then(|end| aux.get(offset..end)) {
            certs.push(der.to_vec());
        }
    }
    certs
}

impl Attester for TsmAttester {
    fn platform(&self) -> &str {
        self.platform.as_str()
    }
    fn measurement(&self) -> &str {
        &self.measurement
    }
    fn launch_config(&self) -> Option<Vec<u8>> {
        Some(self.launch_config.clone())
    }
    fn attest(&self, statement: &Statement) -> Result<Attestation> {
        let bytes = statement.to_canonical()?;
        let (out, aux) = self.report(&report_data(&bytes))?;
        Ok(Attestation {
            platform: self.platform.as_str().into(),
            statement: STANDARD.encode(&bytes),
            evidence: self.evidence(out, aux)?,
            providers: Default::default(),
            config: None,
            gpus: Vec::new(),
        })
    }
}

/// The box's GPUs through a collector program the operator installs in the image (one built on
/// NVIDIA's attestation SDK or nvtrust): run with the requester nonce as its one argument (64
/// hex digits), it prints NVIDIA's serialized evidence list (`[{"arch", "certificate",
/// "evidence", "nonce"}, …]`, one entry per GPU) on stdout. No NVML binding is compiled in.
pub struct CommandGpus {
    program: PathBuf,
}

/// At most this much of the collector's output is read (four GPUs' evidence is ~40 KiB).
const MAX_GPU_OUTPUT: usize = 4 << 20;

impl CommandGpus {
    pub fn new(program: PathBuf) -> CommandGpus {
        CommandGpus { program }
    }
}

impl crate::attest::GpuAttester for CommandGpus {
    fn evidence(&self, nonce: &[u8; 32]) -> Result<Vec<skillbox_attest::nvidia::Evidence>> {
        let out = std::process::Command::new(&self.program)
            .arg(hex::encode(nonce))
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| {
                JcError::Internal(format!(
                    "the GPU evidence program {}: {e}",
                    self.program.display()
                ))
            })?;
        if !out.status.success() {
            return Err(JcError::Internal(format!(
                "the GPU evidence program {} failed ({})",
                self.program.display(),
                out.status
            )));
        }
        if out.stdout.len() > MAX_GPU_OUTPUT {
            return Err(JcError::HardwareRefused("too_large"));
        }
        skillbox_attest::nvidia::Evidence::list_from_sdk_json(&out.stdout)
            .map_err(|r| JcError::HardwareRefused(r.code()))
    }
}
