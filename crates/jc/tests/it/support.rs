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
