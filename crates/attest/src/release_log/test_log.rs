//! A small transparency log for tests (feature `test-log`, dev-only): it logs `hashedrekord`
//! v0.0.1 entries the way Rekor v1 does, computes RFC 6962 inclusion proofs, signs checkpoints as
//! signed notes, and writes the Sigstore bundles (v0.3, managed key) and the trusted root that
//! name it. It only *produces*; what accepts or refuses its bundles is the same
//! `sigstore-verify` path as for Rekor's (`ReleaseLog::verify`).
//!
//! Keys are derived from a one-byte seed so tests are reproducible; they protect nothing.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use p256::ecdsa::signature::Signer as _;
use p256::ecdsa::{Signature, SigningKey};
use sha2::{Digest, Sha256};

/// The DER prefix of a P-256 SubjectPublicKeyInfo (id-ecPublicKey, prime256v1, bit string of
/// the 65-byte uncompressed point).
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// When every entry of a test log says it was integrated (2025-11-24, in the past as the
/// verifier requires).
pub const INTEGRATED_TIME: i64 = 1_764_000_000;

fn key_from_seed(seed: u8, purpose: &str) -> SigningKey {
    let mut counter = 0u32;
    loop {
        let d = Sha256::new()
            .chain_update(purpose.as_bytes())
            .chain_update([seed])
            .chain_update(counter.to_be_bytes())
            .finalize();
        if let Ok(k) = SigningKey::from_bytes(&d) {
            return k;
        }
        counter += 1;
    }
}

fn spki(key: &SigningKey) -> Vec<u8> {
    let point = key.verifying_key().to_encoded_point(false);
    let mut der = P256_SPKI_PREFIX.to_vec();
    der.extend_from_slice(point.as_bytes());
    der
}

fn pem(der: &[u8]) -> String {
    let b64 = B64.encode(der);
    let mut out = String::from("-----BEGIN PUBLIC KEY-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str("-----END PUBLIC KEY-----\n");
    out
}

/// A release signer's managed key (what `cosign generate-key-pair` would make).
pub struct ReleaseSigner {
    key: SigningKey,
}

impl ReleaseSigner {
    pub fn new(seed: u8) -> ReleaseSigner {
        ReleaseSigner {
            key: key_from_seed(seed, "skillbox test release signer"),
        }
    }

    /// The public key's SubjectPublicKeyInfo DER (what `Signer::Key` pins).
    pub fn spki_der(&self) -> Vec<u8> {
        spki(&self.key)
    }

    /// The public key as PEM (`cosign.pub`).
    pub fn public_pem(&self) -> String {
        pem(&self.spki_der())
    }
}

struct Entry {
    body: Vec<u8>,
    digest: [u8; 32],
    signature: Vec<u8>,
    signer_spki: Vec<u8>,
}

/// The log: its key, its origin line, and its entries in order.
pub struct TestLog {
    key: SigningKey,
    name: String,
    entries: Vec<Entry>,
}

fn leaf_hash(body: &[u8]) -> [u8; 32] {
    Sha256::new()
        .chain_update([0u8])
        .chain_update(body)
        .finalize()
        .into()
}

fn node_hash(l: &[u8; 32], r: &[u8; 32]) -> [u8; 32] {
    Sha256::new()
        .chain_update([1u8])
        .chain_update(l)
        .chain_update(r)
        .finalize()
        .into()
}

/// The largest power of two smaller than `n` (n ≥ 2).
fn split(n: usize) -> usize {
    let mut k = 1;
    while k * 2 < n {
        k *= 2;
    }
    k
}

/// RFC 6962 §2.1 MTH over leaf hashes (non-empty).
fn root(leaves: &[[u8; 32]]) -> [u8; 32] {
    if leaves.len() == 1 {
        return leaves[0];
    }
    let k = split(leaves.len());
    node_hash(&root(&leaves[..k]), &root(&leaves[k..]))
}

/// RFC 6962 §2.1.1 PATH(m, D[n]).
fn path(m: usize, leaves: &[[u8; 32]]) -> Vec<[u8; 32]> {
    if leaves.len() <= 1 {
        return Vec::new();
    }
    let k = split(leaves.len());
    if m < k {
        let mut p = path(m, &leaves[..k]);
        p.push(root(&leaves[k..]));
        p
    } else {
        let mut p = path(m - k, &leaves[k..]);
        p.push(root(&leaves[..k]));
        p
    }
}

impl TestLog {
    pub fn new(seed: u8) -> TestLog {
        TestLog {
            key: key_from_seed(seed, "skillbox test transparency log"),
            name: format!("skillbox-test-log-{seed}"),
            entries: Vec::new(),
        }
    }

    /// The log's public key, SubjectPublicKeyInfo DER.
    pub fn public_key_der(&self) -> Vec<u8> {
        spki(&self.key)
    }

    /// A release log pinning `signer` and this log's key (what a test verifies its bundles with).
    pub fn release_log(
        &self,
        signer: super::Signer,
    ) -> Result<super::ReleaseLog, super::ReleaseLogError> {
        super::ReleaseLog::new(signer, Some(&self.trusted_root_json()))
    }

    /// A Sigstore `trusted_root.json` naming this log's key (and no CA, CT log or TSA: enough
    /// for managed-key bundles).
    pub fn trusted_root_json(&self) -> String {
        let der = self.public_key_der();
        let id: [u8; 32] = Sha256::digest(&der).into();
        serde_json::json!({
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [{
                "baseUrl": "https://log.invalid",
                "hashAlgorithm": "SHA2_256",
                "publicKey": {
                    "rawBytes": B64.encode(&der),
                    "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                    "validFor": {"start": "2020-01-01T00:00:00Z"}
                },
                "logId": {"keyId": B64.encode(id)}
            }],
            "certificateAuthorities": [],
            "ctlogs": [],
            "timestampAuthorities": []
        })
        .to_string()
    }

    /// Log `signer`'s signature over `artifact`; the entry's index.
    pub fn append(&mut self, signer: &ReleaseSigner, artifact: &[u8]) -> usize {
        let digest: [u8; 32] = Sha256::digest(artifact).into();
        let sig: Signature = signer.key.sign(artifact);
        let signature = sig.to_der().as_bytes().to_vec();
        let signer_spki = signer.spki_der();
        // Rekor's canonical JSON: keys sorted, no spaces.
        let body = format!(
            concat!(
                r#"{{"apiVersion":"0.0.1","kind":"hashedrekord","spec":{{"data":{{"hash":"#,
                r#"{{"algorithm":"sha256","value":"{}"}}}},"signature":{{"content":"{}","#,
                r#""publicKey":{{"content":"{}"}}}}}}}}"#
            ),
            hex::encode(digest),
            B64.encode(&signature),
            B64.encode(pem(&signer_spki)),
        );
        self.entries.push(Entry {
            body: body.into_bytes(),
            digest,
            signature,
            signer_spki,
        });
        self.entries.len() - 1
    }

    /// The signed checkpoint (signed note) of the current tree: origin, size, root.
    pub fn checkpoint(&self) -> String {
        let leaves: Vec<[u8; 32]> = self.entries.iter().map(|e| leaf_hash(&e.body)).collect();
        let note = format!(
            "{} - 1\n{}\n{}\n",
            self.name,
            leaves.len(),
            B64.encode(root(&leaves))
        );
        let sig: Signature = self.key.sign(note.as_bytes());
        let hint = Sha256::digest(self.public_key_der());
        let mut signed = hint[..4].to_vec();
        signed.extend_from_slice(sig.to_der().as_bytes());
        format!("{note}\n\u{2014} {} {}\n", self.name, B64.encode(signed))
    }

    /// The Sigstore bundle (v0.3 JSON) of entry `index`, its inclusion proof against the
    /// current tree and the current checkpoint. `None` for an index not logged.
    pub fn bundle(&self, index: usize) -> Option<String> {
        let e = self.entries.get(index)?;
        let leaves: Vec<[u8; 32]> = self.entries.iter().map(|e| leaf_hash(&e.body)).collect();
        let log_id: [u8; 32] = Sha256::digest(self.public_key_der()).into();
        let hint: [u8; 32] = Sha256::digest(&e.signer_spki).into();
        let bundle = serde_json::json!({
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": {
                "publicKey": {"hint": B64.encode(hint)},
                "tlogEntries": [{
                    "logIndex": index.to_string(),
                    "logId": {"keyId": B64.encode(log_id)},
                    "kindVersion": {"kind": "hashedrekord", "version": "0.0.1"},
                    "integratedTime": INTEGRATED_TIME.to_string(),
                    "inclusionProof": {
                        "logIndex": index.to_string(),
                        "rootHash": B64.encode(root(&leaves)),
                        "treeSize": leaves.len().to_string(),
                        "hashes": path(index, &leaves).iter().map(|h| B64.encode(h)).collect::<Vec<_>>(),
                        "checkpoint": {"envelope": self.checkpoint()}
                    },
                    "canonicalizedBody": B64.encode(&e.body)
                }]
            },
            "messageSignature": {
                "messageDigest": {"algorithm": "SHA2_256", "digest": B64.encode(e.digest)},
                "signature": B64.encode(&e.signature)
            }
        });
        Some(bundle.to_string())
    }
}
