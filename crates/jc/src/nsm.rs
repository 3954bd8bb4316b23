//! The Nitro attester: a box inside an AWS Nitro Enclave asks the Nitro Secure Module
//! (`/dev/nsm`, through AWS's `aws-nitro-enclaves-nsm-api`) for an attestation document whose
//! `user_data` is the statement's SHA-512. The document (COSE_Sign1, ES384, chained to the AWS
//! Nitro root) is the evidence `skillbox-attest`'s Nitro verifier checks on the node; the
//! measurement is PCR0 (the enclave image), read from a first document at start.
//!
//! The device sits behind [`Nsm`] (one request in, one response out — the driver's own shape),
//! so tests run against a double that signs documents with a test CA. Untested on an enclave.

use std::sync::Mutex;

use aws_nitro_enclaves_nsm_api::api::{Request, Response};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_bytes::ByteBuf;
use skillbox_attest::nitro;

use crate::attest::{Attestation, Attester, Statement, report_data};
use crate::error::{JcError, Result};

/// The Nitro Secure Module: processes one request.
pub trait Nsm: Send + Sync {
    fn process(&self, request: Request) -> Response;
}

/// The enclave's `/dev/nsm`.
pub struct NsmDevice {
    fd: i32,
}

impl NsmDevice {
    /// Open `/dev/nsm` (present only inside a Nitro Enclave).
    pub fn open() -> Result<NsmDevice> {
        let fd = aws_nitro_enclaves_nsm_api::driver::nsm_init();
        if fd < 0 {
            return Err(JcError::Internal(
                "cannot open /dev/nsm: this is not a Nitro Enclave".into(),
            ));
        }
        Ok(NsmDevice { fd })
    }
}

impl Nsm for NsmDevice {
    fn process(&self, request: Request) -> Response {
        aws_nitro_enclaves_nsm_api::driver::nsm_process_request(self.fd, request)
    }
}

impl Drop for NsmDevice {
    fn drop(&mut self) {
        aws_nitro_enclaves_nsm_api::driver::nsm_exit(self.fd);
    }
}

/// A box's attester inside a Nitro Enclave.
pub struct NitroAttester {
    nsm: Box<dyn Nsm>,
    /// PCR0, hex: the enclave image file's measurement.
    measurement: String,
    /// PCR0, 1, 2 and 8 (when present) of the first document: what a node pins.
    pcrs: Vec<(u8, Vec<u8>)>,
    /// One request at a time: the device is one file descriptor.
    lock: Mutex<()>,
}

impl NitroAttester {
    /// Ask `nsm` for a first document and read PCR0 from it.
    pub fn open(nsm: Box<dyn Nsm>) -> Result<NitroAttester> {
        let mut att = NitroAttester {
            nsm,
            measurement: String::new(),
            pcrs: Vec::new(),
            lock: Mutex::new(()),
        };
        let first = att.document(&[0u8; 64])?;
        let signed = nitro::parse(&first).map_err(|r| JcError::HardwareRefused(r.code()))?;
        let pcr0 = signed
            .document
            .pcr(0)
            .ok_or(JcError::HardwareRefused("malformed"))?;
        att.measurement = hex::encode(pcr0);
        att.pcrs = signed
            .document
            .pcrs
            .iter()
            .filter(|(i, _)| matches!(i, 0 | 1 | 2 | 8))
            .cloned()
            .collect();
        Ok(att)
    }

    /// PCR0–2 (and PCR8 for a signed image) as the enclave reported them at start.
    pub fn pcrs(&self) -> &[(u8, Vec<u8>)] {
        &self.pcrs
    }

    /// The NSM's document with `user_data` = `data`.
    fn document(&self, data: &[u8; 64]) -> Result<Vec<u8>> {
        let _one = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        match self.nsm.process(Request::Attestation {
            user_data: Some(ByteBuf::from(data.to_vec())),
            nonce: None,
            public_key: None,
        }) {
            Response::Attestation { document } => Ok(document),
            // The NSM's own error code names a condition of the device, not a secret.
            Response::Error(code) => Err(JcError::Internal(format!(
                "the NSM refused an attestation: {code:?}"
            ))),
            _ => Err(JcError::Internal(
                "the NSM answered an attestation with something else".into(),
            )),
        }
    }
}

impl Attester for NitroAttester {
    fn platform(&self) -> &str {
        skillbox_attest::Platform::Nitro.as_str()
    }
    fn measurement(&self) -> &str {
        &self.measurement
    }
    fn attest(&self, statement: &Statement) -> Result<Attestation> {
        let bytes = statement.to_canonical()?;
        let document = self.document(&report_data(&bytes))?;
        let evidence = serde_json::to_value(nitro::Evidence { document })
            .map_err(|e| JcError::Internal(format!("evidence: {e}")))?;
        Ok(Attestation {
            platform: self.platform().into(),
            statement: STANDARD.encode(&bytes),
            evidence,
            ..Attestation::default()
        })
    }
}
