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
