//! The box fixture (a box server on loopback with an in-process provider, two parties' keys),
//! from the test-support crate (`skillbox_testkit::box_fixture`).
#![allow(unused_imports)]

pub use skillbox_testkit::box_fixture::*;

use skillbox_jc::attest::VerifiedRun;
use skillbox_jc::dsse::{ApprovedProgram, approved_program};
use skillbox_jc::program::Role;
use skillbox_jc::run::{BoxConfig, BoxCore};
use std::sync::Arc;

/// A box whose provider double echoes the prompt, with `config`.
pub async fn start_echo(config: BoxConfig) -> Fixture {
    start_with(Arc::new(EchoProvider { fixed: None }), config).await
}

/// A box core (no server) whose provider double echoes the prompt, with `config`.
pub fn echo_core(config: BoxConfig) -> BoxCore {
    core_with(Arc::new(EchoProvider { fixed: None }), config)
}

/// The fixture's program approved by both parties and opened at its box, not yet attested (for
/// tests of what attestation refuses): the approval and the run id.
pub async fn open_unattested(f: &Fixture) -> (ApprovedProgram, String) {
    let env = f.approve(&f.program());
    let approved = approved_program(&env).expect("approved");
    f.admit_box().await;
    let opened = f.client.open(&env).await.expect("open");
    (approved, opened.run_id)
}

/// The caller stakes `request` and `songs` in `run` (the test fails if the box refuses).
pub async fn caller_stakes(f: &Fixture, run: &VerifiedRun, request: &str, songs: &[u8]) {
    f.stake_as_caller(run, request, songs, &f.caller)
        .await
        .expect("caller stakes");
}

/// Fails the test unless the box refused `answer` with `code` (an error of the client's own, or
/// an answer the box accepted, fails it too).
#[track_caller]
pub fn assert_refused<T: std::fmt::Debug>(answer: skillbox_jc::Result<T>, code: &str) {
    match answer {
        Ok(v) => panic!("the box accepted ({v:?}); expected {code}"),
        Err(e) => assert_eq!(remote_code(&e), code),
    }
}

/// A file of this crate's test data (`tests/data/`, copied from the attestation vectors).
pub fn data(rel: &str) -> Vec<u8> {
    std::fs::read(format!("{}/tests/data/{rel}", env!("CARGO_MANIFEST_DIR")))
        .unwrap_or_else(|e| panic!("test data {rel}: {e}"))
}

/// A hex-text file of this crate's test data, decoded.
pub fn hex_data(rel: &str) -> Vec<u8> {
    let text = String::from_utf8(data(rel)).expect("utf-8");
    hex::decode(text.trim()).expect("hex")
}

/// A file of the attestation crate's test data (its self-made `forged/` certificates and keys).
pub fn attest_data(rel: &str) -> Vec<u8> {
    data(&format!("../../../attest/tests/data/{rel}"))
}

/// An attester that says it is a platform with hardware isolation (the evidence is insecure-dev's):
/// for what the box itself does on such a platform (the run store it takes, what it logs), not
/// for what a verifier accepts.
pub struct SaysHardware(pub Arc<dyn skillbox_jc::attest::Attester>);
impl skillbox_jc::attest::Attester for SaysHardware {
    fn platform(&self) -> &str {
        "sev-snp"
    }
    fn measurement(&self) -> &str {
        self.0.measurement()
    }
    fn attest(
        &self,
        statement: &skillbox_jc::attest::Statement,
    ) -> skillbox_jc::Result<skillbox_jc::attest::Attestation> {
        self.0.attest(statement)
    }
}

/// A box on loopback that says it has hardware isolation ([`SaysHardware`]), answering with
/// `provider`.
pub async fn start_saying_hardware(provider: Arc<dyn skillbox_providers::Provider>) -> Fixture {
    serve_box_loopback(Arc::new(core_attested_by(
        Arc::new(SaysHardware(dev_attester())),
        provider,
        BoxConfig::default(),
    )))
    .await
}

/// Open a run of `p`, listing the box as `sev-snp`, at a [`SaysHardware`] box: its keys read straight off the attested
/// statement, as a verifier would hand them on (no verifier takes insecure-dev evidence for
/// `sev-snp`).
pub async fn open_saying_hardware(f: &Fixture, p: &skillbox_jc::program::Program) -> VerifiedRun {
    use base64::Engine as _;
    let mut p = p.clone();
    p.boxes[0].platform = "sev-snp".into();
    let env = f.approve(&p);
    let approved = approved_program(&env).expect("approved");
    let run_id = f.client.open(&env).await.expect("open").run_id;
    let nonce = skillbox_jc::client::new_nonce();
    let attestation = f.client.attestation(&run_id, &nonce).await.expect("attest");
    let statement: skillbox_jc::attest::Statement = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(&attestation.statement)
            .expect("base64"),
    )
    .expect("statement");
    assert_eq!(statement.platform, "sev-snp");
    let hex32 =
        |h: &str| -> [u8; 32] { hex::decode(h).expect("hex").try_into().expect("32 bytes") };
    VerifiedRun {
        run_id,
        program_hash: approved.hash,
        platform: statement.platform,
        measurement: statement.measurement,
        hpke_public_key: hex32(&statement.hpke_public_key),
        receipt_key: ed25519_dalek::VerifyingKey::from_bytes(&hex32(&statement.receipt_public_key))
            .expect("receipt key"),
        expires_at: statement.expires_at,
        no_hardware_isolation: false,
        tcb_status: None,
        tls_spki_sha256: None,
    }
}

/// What the box logs at its default level (info, `box_cmd`'s), caught on this thread while the
/// returned guard lives: a `#[tokio::test]` runs the box's tasks on its one thread.
pub fn capture_logs() -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .without_time()
        .with_writer(captured.clone())
        .finish();
    (captured, tracing::subscriber::set_default(subscriber))
}

/// Log lines caught by [`capture_logs`].
#[derive(Clone, Default)]
pub struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl Captured {
    /// What was logged since the last take, emptied; what comes next is caught whole.
    pub fn take(&self) -> String {
        // A callsite another test's thread first reached while this subscriber was being set
        // can keep the "nobody listens" it was registered with (tracing's interest cache is
        // shared by all threads): asked again, every callsite counts this subscriber in.
        tracing::callsite::rebuild_interest_cache();
        let bytes = std::mem::take(&mut *self.0.lock().expect("log buffer"));
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// A node key as the X25519 pair its owner notes are sealed to.
pub fn note_key(node_key: &ed25519_dalek::SigningKey) -> skillbox_jc::seal::HpkeKeyPair {
    skillbox_jc::seal::HpkeKeyPair::from_node_key(node_key).expect("a node key's X25519 pair")
}

/// A provider double behind a gate: every request is recorded (its request block's text) as it
/// reaches the provider, then waits until the gate is open before `inner` answers it — so a
/// run can be held at its provider: a box abandoned there (the restart tests), or a run kept
/// in flight while another of its key is checked (the coverage tests).
pub struct Gated {
    asked: std::sync::Mutex<Vec<String>>,
    gate: tokio::sync::Semaphore,
    inner: Arc<dyn skillbox_providers::Provider>,
}

/// Permits of an open gate: a permit is given back once its request has its answer, so this
/// is more requests at once than any test makes.
const OPEN: usize = 1 << 20;

impl Gated {
    /// `inner` behind a gate, open or not (a shut one opens only by [`Self::open`]).
    pub fn new(inner: Arc<dyn skillbox_providers::Provider>, open: bool) -> Arc<Gated> {
        Arc::new(Gated {
            asked: Default::default(),
            gate: tokio::sync::Semaphore::new(if open { OPEN } else { 0 }),
            inner,
        })
    }

    /// Let every request held, and every later one, through.
    pub fn open(&self) {
        self.gate.add_permits(OPEN);
    }

    /// The requests that reached the provider, in order.
    pub fn asked(&self) -> Vec<String> {
        self.asked.lock().expect("asked").clone()
    }

    /// How many requests reached the provider.
    pub fn times_asked(&self) -> usize {
        self.asked.lock().expect("asked").len()
    }

    /// Wait (bounded) until a request reached the provider.
    pub async fn wait_asked(&self) {
        self.wait_until("a request", |asked| !asked.is_empty())
            .await;
    }

    /// Wait (bounded) until `request` reached the provider.
    pub async fn wait_asked_for(&self, request: &str) {
        self.wait_until(request, |asked| asked.iter().any(|r| r == request))
            .await;
    }

    async fn wait_until(&self, what: &str, reached: impl Fn(&[String]) -> bool) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while !reached(&self.asked()) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what} never reached the provider"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}

impl skillbox_providers::Provider for Gated {
    fn complete<'a>(
        &'a self,
        request: skillbox_providers::ChatRequest,
        api_key: Option<&'a str>,
    ) -> skillbox_providers::Reply<'a> {
        Box::pin(async move {
            let asked = skillbox_testkit::prompt::request_of(&request.user).to_owned();
            self.asked.lock().expect("asked").push(asked);
            let _permit = self.gate.acquire().await.expect("the gate is never closed");
            self.inner.complete(request, api_key).await
        })
    }
}
