//! The Nitro attester against an NSM double (issue 31 item 4), as the configfs-tsm attesters
//! are tested against a directory double: the double answers the NSM's attestation request the
//! way `/dev/nsm` does — the payload is AWS's own `AttestationDoc` CBOR (the
//! `aws-nitro-enclaves-nsm-api` types), signed COSE_Sign1 ES384 by a leaf of a test CA (the
//! attest crate's `tests/data/forged/` P-384 root and leaf, made for its tests and trusted by
//! nothing). The node's Nitro verifier, pinning that test root instead of AWS's, verifies what
//! the box produced; with the AWS root pinned, as every real node has, it is `foreign_root`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_nitro_enclaves_nsm_api::api::{AttestationDoc, Digest, ErrorCode, Request, Response};
use coset::cbor::Value;
use p384::ecdsa::signature::Signer as _;
use skillbox_attest::nitro;
use skillbox_jc::JcError;
use skillbox_jc::attest::{
    Attester as _, Statement, Verifier as _, VerifyPolicy, report_data, verify_attestation,
};
use skillbox_jc::hardware::{HardwarePolicy, HardwareVerifier};
use skillbox_jc::nsm::{NitroAttester, Nsm};
use skillbox_jc::program::BoxIdentity;
use skillbox_jc::run::now_secs;

use crate::support::*;

pub(crate) const PCR: [u8; 3] = [0x11, 0x22, 0x33];

/// An NSM that signs with the test CA's leaf; it remembers the user data it was last asked for.
/// The GPU tests attest a hardware box with it.
pub(crate) struct NsmDouble {
    key: p384::ecdsa::SigningKey,
    asked: Arc<Mutex<Option<Vec<u8>>>>,
}

impl NsmDouble {
    pub(crate) fn new() -> (NsmDouble, Arc<Mutex<Option<Vec<u8>>>>) {
        let hex_key = String::from_utf8(attest_data("forged/p384-leaf.key.hex")).expect("utf-8");
        let key = p384::ecdsa::SigningKey::from_slice(&hex::decode(hex_key.trim()).expect("hex"))
            .expect("key");
        let asked = Arc::new(Mutex::new(None));
        (
            NsmDouble {
                key,
                asked: asked.clone(),
            },
            asked,
        )
    }
}

fn cbor(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    coset::cbor::ser::into_writer(v, &mut out).expect("cbor");
    out
}

impl Nsm for NsmDouble {
    fn process(&self, request: Request) -> Response {
        let Request::Attestation {
            user_data,
            nonce,
            public_key,
        } = request
        else {
            return Response::Error(ErrorCode::InvalidOperation);
        };
        let user_data = user_data.map(|b| b.into_vec());
        *self.asked.lock().expect("lock") = user_data.clone();
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis() as u64;
        let pcrs: BTreeMap<usize, Vec<u8>> = (0..3).map(|i| (i, vec![PCR[i]; 48])).collect();
        let payload = AttestationDoc::new(
            "i-0123456789abcdef0-enc0123456789abcdef".into(),
            Digest::SHA384,
            now_ms,
            pcrs,
            attest_data("forged/p384-leaf.der"),
            vec![attest_data("forged/p384-root.der")],
            user_data,
            nonce.map(|b| b.into_vec()),
            public_key.map(|b| b.into_vec()),
        )
        .to_binary();
        // COSE_Sign1 over Sig_structure ["Signature1", protected {1: -35}, b"", payload].
        let protected = vec![0xa1, 0x01, 0x38, 0x22];
        let tbs = cbor(&Value::Array(vec![
            Value::Text("Signature1".into()),
            Value::Bytes(protected.clone()),
            Value::Bytes(vec![]),
            Value::Bytes(payload.clone()),
        ]));
        let sig: p384::ecdsa::Signature = self.key.sign(&tbs);
        let document = cbor(&Value::Array(vec![
            Value::Bytes(protected),
            Value::Map(vec![]),
            Value::Bytes(payload),
            Value::Bytes(sig.to_bytes().to_vec()),
        ]));
        Response::Attestation { document }
    }
}

fn pins() -> nitro::Policy {
    serde_json::from_value(serde_json::json!({"accepted": [{
        "pcr0": hex::encode([PCR[0]; 48]),
        "pcr1": hex::encode([PCR[1]; 48]),
        "pcr2": hex::encode([PCR[2]; 48]),
    }]}))
    .expect("policy")
}

pub(crate) fn test_root_verifier() -> HardwareVerifier {
    HardwareVerifier::from_nitro(
        nitro::Verifier::with_test_root(pins(), &attest_data("forged/p384-root.der"))
            .expect("verifier"),
    )
}

/// The fixture's program, listing the Nitro box of PCR0 `pcr0`, opened and attested at the
/// fixture's box, and the statement it served made the Nitro box's (its platform and PCR0): a
/// statement with a real run's keys for the NSM double to attest.
pub(crate) async fn opened_as_nitro(f: &Fixture, pcr0: &str) -> (Attested, Statement) {
    let mut program = f.program();
    program.boxes.push(BoxIdentity {
        platform: "nitro".into(),
        measurement: pcr0.to_owned(),
    });
    let attested = f.open_attested(&program).await;
    let st: Statement = attested.attestation.statement().expect("statement").1;
    let st = Statement {
        platform: "nitro".into(),
        measurement: pcr0.to_owned(),
        ..st
    };
    (attested, st)
}

#[tokio::test]
async fn a_nitro_box_attests_through_the_nsm_and_the_node_verifies_its_document() {
    let (double, asked) = NsmDouble::new();
    let nitro_box = NitroAttester::open(Box::new(double)).expect("opens");
    let pcr0 = hex::encode([PCR[0]; 48]);
    assert_eq!(nitro_box.platform(), "nitro");
    assert_eq!(
        nitro_box.measurement(),
        pcr0,
        "PCR0 from the first document"
    );

    // A real run at the fixture's box gives a statement with real keys; the Nitro box attests
    // it as its own (its platform and PCR0), for a program listing it.
    let f = start(None).await;
    let (
        Attested {
            approved,
            run_id,
            nonce,
            attestation: served,
        },
        st,
    ) = opened_as_nitro(&f, &pcr0).await;
    let mut att = nitro_box.attest(&st).expect("attests");
    att.providers = served.providers.clone();
    let rd = report_data(&st.to_canonical().expect("canonical"));
    assert_eq!(
        asked.lock().expect("lock").as_deref(),
        Some(&rd[..]),
        "the statement's SHA-512 went to the NSM as user_data"
    );

    let policy = |v: HardwareVerifier| {
        VerifyPolicy::new(false)
            .with_verifier(Box::new(v))
            .only_platform("nitro")
    };
    let check = |a: &skillbox_jc::attest::Attestation, p: &VerifyPolicy| {
        verify_attestation(a, &approved, &run_id, &nonce, p, now_secs())
    };
    let verified = check(&att, &policy(test_root_verifier())).expect("verified");
    assert_eq!(verified.measurement, pcr0);
    assert!(!verified.no_hardware_isolation);

    // A genuine document of this box made for another statement (another run's nonce).
    let other = nitro_box
        .attest(&Statement {
            nonce: "cd".repeat(16),
            ..st.clone()
        })
        .expect("attests");
    let mut replayed = att.clone();
    replayed.evidence = other.evidence;
    let got = check(&replayed, &policy(test_root_verifier()));
    assert!(
        matches!(got, Err(JcError::HardwareRefused("report_data_mismatch"))),
        "{got:?}"
    );
    // Another PCR0 pinned.
    let other_pins = nitro::Policy {
        accepted: vec![
            serde_json::from_value(serde_json::json!({
                "pcr0": "44".repeat(48), "pcr1": "22".repeat(48), "pcr2": "33".repeat(48),
            }))
            .expect("pins"),
        ],
        ..pins()
    };
    let v = HardwareVerifier::from_nitro(
        nitro::Verifier::with_test_root(other_pins, &attest_data("forged/p384-root.der"))
            .expect("verifier"),
    );
    let got = v.verify_evidence(&att, &st, &rd, now_secs() * 1000);
    assert!(
        matches!(
            got,
            Err(JcError::HardwareRefused("measurement_not_allowed"))
        ),
        "{got:?}"
    );
    // A real node pins AWS's root: the test CA is foreign.
    let aws = HardwareVerifier::new(HardwarePolicy::Nitro(pins())).expect("verifier");
    let got = check(&att, &policy(aws));
    assert!(
        matches!(got, Err(JcError::HardwareRefused("foreign_root"))),
        "{got:?}"
    );
}

/// An NSM that refuses, or is not there: a clear error, no box.
#[test]
fn an_nsm_that_refuses_is_a_clear_error() {
    struct Refusing;
    impl Nsm for Refusing {
        fn process(&self, _: Request) -> Response {
            Response::Error(ErrorCode::InternalError)
        }
    }
    let err = NitroAttester::open(Box::new(Refusing))
        .err()
        .expect("refused");
    assert!(err.to_string().contains("NSM refused"), "{err}");
    if !std::path::Path::new("/dev/nsm").exists() {
        let err = skillbox_jc::nsm::NsmDevice::open()
            .err()
            .expect("no device");
        assert!(err.to_string().contains("/dev/nsm"), "{err}");
    }
}
