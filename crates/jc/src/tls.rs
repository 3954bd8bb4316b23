//! The box's own TLS, bound into its attestation (issue 31 item 2).
//!
//! A box that serves HTTPS makes its TLS key inside itself at start (an Ed25519 key and a
//! self-signed certificate: no CA vouches for it, the attestation does): derived from its
//! storage key ([`BoxTls::derived`]), so a box restarted on its run store serves the same key and
//! the runs nodes verified before go on; or fresh ([`BoxTls::generate`]). The hash of the key's
//! SubjectPublicKeyInfo goes into every statement ([`crate::attest::TlsBound`]). A node talks to
//! an https box through three verifiers of its own, never the system's trust store:
//!
//! - [`KeyVerifier::observing`] accepts any key whose handshake signature verifies, for the
//!   box's own attestation (which admits its key: the key the connection showed is compared with
//!   the key the verified report binds, so a TLS front relaying a real box's report is refused)
//!   and a first contact's `/healthz` (the platform and key an unpinned loopback box is trusted
//!   on; its provider and load figures are not taken from it);
//! - [`KeyVerifier::pinned`] accepts only keys an attestation bound and this node verified
//!   ([`AttestedKeys`], the last few): the open (the twice-signed program: who calls whom, for
//!   which skill, with which sources), `/healthz` (the providers and load a node acts on) and a
//!   run's attestation (its run id) go over no other connection. Before the first of them — and
//!   again when a pinned handshake is refused because the box came back with another key — a
//!   node asks the box for its own attestation (`GET /v1/attestation`), bound to no run, and
//!   admits the key it binds: a man in the middle on the path sees no program and no run id, and
//!   forges no health figure;
//! - [`KeyVerifier::only`] accepts one run's key: a verified run's stakes, submits, status,
//!   result and delete go only to the key its attestation bound
//!   ([`AttestedKeys::bind_run`]), never to another key of the same URL (a box's earlier start,
//!   a second box behind a TCP pass-through balancer).
//!
//! Session resumption is off on both sides: every connection shows its key.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};

use crate::error::{JcError, Result};

/// The one crypto provider the box and its clients use: the aws-lc-rs one reqwest already
/// builds rustls with (no second TLS stack).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// sha256 (hex) of a certificate's SubjectPublicKeyInfo; `None` when it does not parse.
pub fn spki_sha256(cert: &CertificateDer<'_>) -> Option<String> {
    let ee = webpki::EndEntityCert::try_from(cert).ok()?;
    Some(hex::encode(Sha256::digest(ee.subject_public_key_info())))
}

/// The TLS identity a box serves with, made at start and never written anywhere.
pub struct BoxTls {
    config: Arc<rustls::ServerConfig>,
    spki_sha256: String,
}

impl std::fmt::Debug for BoxTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BoxTls({})", self.spki_sha256)
    }
}

/// PKCS#8 v1 of an Ed25519 private key, up to its 32-byte seed (RFC 8410).
const ED25519_PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

impl BoxTls {
    /// A fresh key (see [`Self::from_seed`]).
    pub fn generate(names: &[String]) -> Result<BoxTls> {
        let mut seed = zeroize::Zeroizing::new([0u8; 32]);
        getrandom::fill(&mut seed[..])
            .map_err(|_| JcError::Internal("box TLS key: no OS randomness".into()))?;
        BoxTls::from_seed(&seed, names)
    }

    /// The key derived from the box's storage key: the same across restarts on one store, and
    /// as secret as what that store seals.
    pub fn derived(
        storage: &dyn crate::run::store::StorageKey,
        names: &[String],
    ) -> Result<BoxTls> {
        let key = storage.key_bytes()?;
        let mut h = Sha256::new();
        h.update(b"skillbox/box-tls-key/v1\0");
        h.update(&key[..]);
        let seed = zeroize::Zeroizing::new(<[u8; 32]>::from(h.finalize()));
        BoxTls::from_seed(&seed, names)
    }

    /// The Ed25519 key of `seed` and a self-signed certificate naming `names` (DNS names the
    /// box is reached by, ports dropped) and `localhost`. The names are for other clients'
    /// sake: a node checks the key, not the name.
    pub fn from_seed(seed: &[u8; 32], names: &[String]) -> Result<BoxTls> {
        let mut sans = vec!["localhost".to_owned()];
        for n in names {
            let host = n.trim().trim_start_matches('[');
            let host = match host.split_once(']') {
                Some((v6, _)) => v6,
                None => host.rsplit_once(':').map_or(host, |(h, _)| h),
            };
            if !host.is_empty() && !sans.iter().any(|s| s.eq_ignore_ascii_case(host)) {
                sans.push(host.to_ascii_lowercase());
            }
        }
        let fail = |what: &str| JcError::Internal(format!("box TLS key: {what}"));
        let mut der = ED25519_PKCS8_PREFIX.to_vec();
        der.extend_from_slice(seed);
        let pkcs8 = PrivatePkcs8KeyDer::from(der);
        let pair = rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&pkcs8, &rcgen::PKCS_ED25519)
            .map_err(|_| fail("loading"))?;
        let cert = rcgen::CertificateParams::new(sans)
            .and_then(|p| p.self_signed(&pair))
            .map_err(|_| fail("certifying"))?
            .der()
            .clone();
        let spki_sha256 = spki_sha256(&cert).ok_or_else(|| fail("parsing its certificate"))?;
        let key = PrivateKeyDer::Pkcs8(pkcs8);
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|_| fail("protocol versions"))?
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .map_err(|_| fail("loading it"))?;
        config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        config.send_tls13_tickets = 0;
        Ok(BoxTls {
            config: Arc::new(config),
            spki_sha256,
        })
    }

    /// What the statement binds: sha256 (hex) of this key's SubjectPublicKeyInfo.
    pub fn spki_sha256(&self) -> &str {
        &self.spki_sha256
    }

    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.config.clone())
    }

    /// `attester`, each of whose statements binds this key.
    pub fn bind(
        &self,
        attester: Arc<dyn crate::attest::Attester>,
    ) -> Arc<dyn crate::attest::Attester> {
        Arc::new(crate::attest::TlsBound::new(
            attester,
            self.spki_sha256.clone(),
        ))
    }
}

/// At most this many keys of one box URL are accepted for its opens, `/healthz` and run
/// attestations, the most recently admitted: a box makes a new key at a restart (hardware) and a
/// pass-through balancer may show a few boxes' keys, while a key of a start long gone is dropped
/// rather than kept for the node's life.
pub const MAX_ATTESTED_KEYS: usize = 8;

/// At most this many runs' keys are kept per box URL (the runs a node has at one box at once are
/// far fewer); past it, expired runs go first, then the soonest to expire.
pub const MAX_RUN_KEYS: usize = 65_536;

/// The TLS keys of one box URL that verified attestations bound: the only keys its pinned
/// connections accept — for the box's opens, `/healthz` and run attestations any of the last
/// [`MAX_ATTESTED_KEYS`] admitted, and for a verified run's stakes, submits, status, result
/// and delete only the one key that run's attestation bound ([`Self::bind_run`]). Counts the
/// handshakes it refused, so a failed request can say why.
#[derive(Debug, Default)]
pub struct AttestedKeys {
    /// Oldest admission first.
    keys: RwLock<VecDeque<String>>,
    /// Per verified run id: the key its attestation bound, and when the run expires.
    runs: Mutex<BTreeMap<String, (String, u64)>>,
    refused: AtomicU64,
    /// Keys admitted so far (each counted once): a request whose handshake was refused tells
    /// by it whether another one attested the box's new key meanwhile.
    admitted: AtomicU64,
}

impl AttestedKeys {
    /// Accept `spki_sha256` (hex) from now on: a key a verified attestation bound. The oldest
    /// admission goes past [`MAX_ATTESTED_KEYS`].
    pub fn admit(&self, spki_sha256: &str) {
        let key = spki_sha256.to_ascii_lowercase();
        let mut keys = self.keys.write().unwrap_or_else(|p| p.into_inner());
        let known = keys.iter().position(|k| *k == key);
        if let Some(at) = known {
            keys.remove(at);
        }
        keys.push_back(key);
        while keys.len() > MAX_ATTESTED_KEYS {
            keys.pop_front();
        }
        if known.is_none() {
            self.admitted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// How many distinct keys were admitted so far (0: none yet).
    pub fn admissions(&self) -> u64 {
        self.admitted.load(Ordering::Relaxed)
    }

    pub fn contains(&self, spki_sha256: &str) -> bool {
        self.keys
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|k| k == spki_sha256)
    }

    /// Run `run_id`'s requests go to `spki_sha256` only (the key its verified attestation
    /// bound), until it expires at `expires_at` (Unix seconds). Bounded by [`MAX_RUN_KEYS`].
    pub fn bind_run(&self, run_id: &str, spki_sha256: &str, expires_at: u64) {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        if runs.len() >= MAX_RUN_KEYS && !runs.contains_key(run_id) {
            let now = crate::run::now_secs();
            runs.retain(|_, (_, until)| *until > now);
            if runs.len() >= MAX_RUN_KEYS
                && let Some(soonest) = runs
                    .iter()
                    .min_by_key(|(_, (_, until))| *until)
                    .map(|(id, _)| id.clone())
            {
                runs.remove(&soonest);
            }
        }
        runs.insert(
            run_id.to_owned(),
            (spki_sha256.to_ascii_lowercase(), expires_at),
        );
    }

    /// The key run `run_id`'s attestation bound (`None`: no verified run of that id).
    pub fn run_key(&self, run_id: &str) -> Option<String> {
        self.runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(run_id)
            .map(|(k, _)| k.clone())
    }

    /// How many handshakes were refused so far.
    pub fn refusals(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

/// Which keys a [`KeyVerifier`] accepts.
#[derive(Debug)]
enum Accepts {
    /// Any key (observing); the key is checked against the attestation afterwards.
    Any,
    /// The keys attestations of the box admitted.
    Attested(Arc<AttestedKeys>),
    /// One run's key only (its refusals counted with the box's).
    Only(String, Arc<AttestedKeys>),
}

/// A node's verifier of a box's TLS key (see the module docs).
#[derive(Debug)]
pub struct KeyVerifier {
    accepts: Accepts,
    provider: Arc<CryptoProvider>,
}

impl KeyVerifier {
    pub fn observing() -> KeyVerifier {
        KeyVerifier {
            accepts: Accepts::Any,
            provider: provider(),
        }
    }

    pub fn pinned(keys: Arc<AttestedKeys>) -> KeyVerifier {
        KeyVerifier {
            accepts: Accepts::Attested(keys),
            provider: provider(),
        }
    }

    /// `spki_sha256` only (a run's key; see [`AttestedKeys::bind_run`]), its refusals counted
    /// in `keys`.
    pub fn only(spki_sha256: &str, keys: Arc<AttestedKeys>) -> KeyVerifier {
        KeyVerifier {
            accepts: Accepts::Only(spki_sha256.to_ascii_lowercase(), keys),
            provider: provider(),
        }
    }

    /// A client config using this verifier, without session resumption.
    pub fn client_config(self) -> Result<rustls::ClientConfig> {
        let mut config = rustls::ClientConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|_| JcError::Internal("TLS protocol versions".into()))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(self))
            .with_no_client_auth();
        config.resumption = rustls::client::Resumption::disabled();
        Ok(config)
    }
}

impl ServerCertVerifier for KeyVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let shown = spki_sha256(end_entity);
        let (accepted, keys) = match &self.accepts {
            Accepts::Any => return Ok(ServerCertVerified::assertion()),
            Accepts::Attested(keys) => (shown.as_deref().is_some_and(|k| keys.contains(k)), keys),
            Accepts::Only(key, keys) => (shown.as_deref() == Some(key.as_str()), keys),
        };
        match accepted {
            true => Ok(ServerCertVerified::assertion()),
            false => {
                keys.refused.fetch_add(1, Ordering::Relaxed);
                Err(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::ApplicationVerificationFailure,
                ))
            }
        }
    }

    // The handshake must be signed by the key of the certificate shown: otherwise anyone could
    // show the box's certificate without its key.
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: usize) -> String {
        format!("{i:064x}")
    }

    /// A key of a box's start long gone is not accepted for the node's life: past
    /// [`MAX_ATTESTED_KEYS`] the oldest admission goes, and admitting a key again keeps it.
    #[test]
    fn the_attested_keys_are_the_last_few_admitted() {
        let keys = AttestedKeys::default();
        keys.admit(&key(0));
        for i in 1..MAX_ATTESTED_KEYS {
            keys.admit(&key(i));
        }
        // Key 0 shown again: the newest now, key 1 the oldest.
        keys.admit(&key(0));
        assert_eq!(keys.admissions(), MAX_ATTESTED_KEYS as u64);
        keys.admit(&key(MAX_ATTESTED_KEYS));
        assert!(keys.contains(&key(0)));
        assert!(!keys.contains(&key(1)), "the oldest admission went");
        assert!(keys.contains(&key(MAX_ATTESTED_KEYS)));
        assert_eq!(keys.admissions(), MAX_ATTESTED_KEYS as u64 + 1);
    }

    /// A run's requests name one key; the runs kept are bounded, expired ones going first.
    #[test]
    fn each_run_has_its_one_key_and_the_runs_kept_are_bounded() {
        let keys = AttestedKeys::default();
        let now = crate::run::now_secs();
        keys.bind_run("expired", &key(1).to_ascii_uppercase(), now - 1);
        keys.bind_run("soonest", &key(2), now + 10);
        for i in 2..MAX_RUN_KEYS {
            keys.bind_run(&format!("run{i}"), &key(3), now + 600);
        }
        assert_eq!(keys.run_key("expired"), Some(key(1)), "kept lowercase");
        keys.bind_run("new", &key(4), now + 600);
        assert_eq!(keys.run_key("expired"), None, "an expired run goes first");
        assert_eq!(keys.run_key("soonest"), Some(key(2)));
        keys.bind_run("newer", &key(4), now + 600);
        assert_eq!(keys.run_key("soonest"), None, "then the soonest to expire");
        assert_eq!(keys.run_key("newer"), Some(key(4)));
        assert_eq!(keys.run_key("unknown"), None);
        // A run's key is not one the box's opens accept, nor the other way round.
        assert!(!keys.contains(&key(4)));
    }
}
