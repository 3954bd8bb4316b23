//! AWS Nitro on the real documents (evervault, dstack), each at its own timestamp, and on
//! synthetic documents signed under a self-made root for the parser's edge cases.

use crate::support::*;
use coset::cbor::Value;
use p384::ecdsa::signature::Signer as _;
use proptest::prelude::*;
use skillbox_attest::nitro::{self, Expected, PcrPins, Policy};
use skillbox_attest::{Hex, Platform, Refusal};

const PCR0: &str = "f4d48b81a460c9916d1e685119074bf24660afd3e34fae9fca0a0d28d9d5599936332687e6f66fc890ac8cf150142d8b";
const PCR1: &str = "bcdf05fefccaa8e55bf2c8d6dee9e79bbff31e34bf28a99aa19e6b29c37ee80b214a414b7607236edf26fcb78654e63f";
const PCR2: &str = "d8f114da658de5481f8d9ec73907feb553560787522f705c92d7d96beed8e15e2aa611984e098c576832c292e8dc469a";
const PCR8: &str = "8790eb3cce6c83d07e84b126dc61ca923333d6f66615c4a79157de48c5ab2418bdc60746ea7b7afbff03a1c6210201cb";

fn evervault() -> nitro::Evidence {
    nitro_doc("nitro/evervault-valid-attestation-doc-bytes")
}

fn pins() -> PcrPins {
    PcrPins {
        pcr0: Hex(hex_arr(PCR0)),
        pcr1: Hex(hex_arr(PCR1)),
        pcr2: Hex(hex_arr(PCR2)),
        pcr8: Some(Hex(hex_arr(PCR8))),
    }
}

#[test]
fn evervault_document_verifies_at_its_timestamp() {
    let v = evervault().verified_at(T_NITRO_EVERVAULT);
    assert_eq!(v.platform, Platform::Nitro);
    assert_eq!(v.measurement, PCR0);
    assert_eq!(v.measurement_named("pcr1"), Some(PCR1));
    assert_eq!(v.measurement_named("pcr2"), Some(PCR2));
    assert_eq!(v.measurement_named("pcr8"), Some(PCR8));
    assert_eq!(
        v.nonce.as_ref().map(|n| n.len()),
        Some(512),
        "256-byte nonce"
    );
    assert_eq!(
        v.instance_id.as_deref(),
        Some("i-020b6af9246d90e92-enc0183d09086c24190")
    );
    // The leaf lives about three hours around the document.
    assert!(v.valid_from_ms <= T_NITRO_EVERVAULT && T_NITRO_EVERVAULT <= v.valid_until_ms);
    assert!(v.valid_until_ms - v.valid_from_ms < 4 * 3600 * 1000);
}

#[test]
fn pinned_pcrs_are_compared() {
    let ev = evervault();
    let v = ev
        .verify_under(&Policy::pinned(vec![pins()]), T_NITRO_EVERVAULT)
        .unwrap();
    assert!(v.measurements_pinned);
    let mut p = pins();
    p.pcr2 = Hex([0; 48]);
    assert_eq!(
        ev.refusal_under(&Policy::pinned(vec![p]), T_NITRO_EVERVAULT),
        Refusal::MeasurementNotAllowed("PCR2")
    );
    let mut p = pins();
    p.pcr8 = Some(Hex([8; 48]));
    assert_eq!(
        ev.refusal_under(&Policy::pinned(vec![p.clone()]), T_NITRO_EVERVAULT),
        Refusal::MeasurementNotAllowed("PCR8")
    );
    // PCR8 is compared only when pinned.
    p.pcr8 = None;
    assert!(
        ev.verify_under(&Policy::pinned(vec![p]), T_NITRO_EVERVAULT)
            .is_ok()
    );
}

#[test]
fn dstack_indefinite_length_document_verifies() {
    let (ev, trailing) =
        nitro::Evidence::from_file(&data("nitro/dstack-nitro_attestation-indefinite-cbor.cose"))
            .unwrap();
    // The file carries a wrapper after the COSE item; only the signed item counts.
    assert_eq!(trailing, 151);
    assert_eq!(
        ev.document[10], 0xbf,
        "the payload map is indefinite-length"
    );
    let expected = Expected {
        user_data: Some(vec![0; 64]),
        ..Expected::default()
    };
    let v = ev.verify_expecting(&expected, T_NITRO_DSTACK).unwrap();
    assert!(v.measurement.starts_with("5cb702954321826d"));
    assert!(v.report_data_checked);
    assert_eq!(v.report_data, Some("00".repeat(64)));
    // The wire form is strict: trailing bytes are refused there.
    let mut strict = ev.clone();
    strict.document.push(0);
    assert_eq!(strict.refusal_at(T_NITRO_DSTACK).code(), "malformed");
}

#[test]
fn debug_enclaves_are_refused() {
    for (file, at) in [
        (
            "nitro/evervault-valid-attestation-doc-base64",
            T_NITRO_EVERVAULT_B64,
        ),
        (
            "nitro/evervault-debug-mode-attestation-doc-bytes",
            T_NITRO_DEBUG,
        ),
    ] {
        assert_eq!(
            nitro_doc(file).refusal_at(at),
            Refusal::DebugEnabled("all-zero PCR0 (a debug-mode enclave)"),
            "{file}"
        );
    }
}

#[test]
fn base64_document_binds_the_certificate_key_in_user_data() {
    use der::{Decode, Encode};
    let ev = nitro_doc("nitro/evervault-valid-attestation-doc-base64");
    let doc = nitro::parse(&ev.document).unwrap().document;
    let cert =
        x509_cert::Certificate::from_der(&data("nitro/evervault-valid-certificate.der")).unwrap();
    let spki = cert
        .tbs_certificate
        .subject_public_key_info
        .to_der()
        .unwrap();
    assert_eq!(spki.len(), 91);
    assert_eq!(doc.user_data, Some(spki));
}

#[test]
fn expectations_freshness_and_module_ids() {
    let ev = evervault();
    let doc = nitro::parse(&ev.document).unwrap().document;
    let right = Expected {
        nonce: doc.nonce.clone(),
        ..Expected::default()
    };
    assert!(
        ev.verify_expecting(&right, T_NITRO_EVERVAULT)
            .unwrap()
            .nonce_checked
    );
    let none = Expected::default;
    for (wrong, why) in [
        (
            Expected {
                nonce: Some(vec![1; 32]),
                ..none()
            },
            Refusal::NonceMismatch,
        ),
        (
            Expected {
                user_data: Some(vec![0; 64]),
                ..none()
            },
            Refusal::ReportDataMismatch,
        ),
        (
            Expected {
                public_key: Some(b"key".to_vec()),
                ..none()
            },
            Refusal::PublicKeyMismatch,
        ),
    ] {
        assert_eq!(refused(ev.verify_expecting(&wrong, T_NITRO_EVERVAULT)), why);
    }

    // Fresh within five minutes, not from the future beyond a minute.
    assert!(ev.verify_unpinned(T_NITRO_EVERVAULT + 299_000).is_ok());
    assert_eq!(ev.refusal_at(T_NITRO_EVERVAULT + 301_000), Refusal::Stale);
    assert_eq!(ev.refusal_at(T_2026), Refusal::Stale);
    assert_eq!(
        ev.refusal_at(T_NITRO_EVERVAULT - 61_000),
        Refusal::FromFuture
    );

    let mut p = Policy::unpinned();
    p.module_ids = vec!["i-0000-enc0".into()];
    assert_eq!(
        ev.refusal_under(&p, T_NITRO_EVERVAULT),
        Refusal::InstanceNotAllowed
    );
    p.module_ids = vec!["i-020b6af9246d90e92-enc0183d09086c24190".into()];
    assert!(ev.verify_under(&p, T_NITRO_EVERVAULT).is_ok());
}

#[test]
fn the_cached_verifier_agrees_with_the_cold_path() {
    let verifier = nitro::Verifier::new(Policy::unpinned()).unwrap();
    let cold = evervault().verify_unpinned(T_NITRO_EVERVAULT).unwrap();
    for _ in 0..3 {
        assert_eq!(
            verifier
                .verify(&evervault(), &Expected::default(), T_NITRO_EVERVAULT)
                .unwrap(),
            cold
        );
    }
    let dstack = nitro_doc("nitro/dstack-nitro_attestation-indefinite-cbor.cose");
    assert!(
        verifier
            .verify(&dstack, &Expected::default(), T_NITRO_DSTACK)
            .is_ok()
    );
}

#[test]
fn policy_loads_from_toml() {
    let text = format!(
        "max_age_ms = 60000\n[[accepted]]\npcr0 = \"{PCR0}\"\npcr1 = \"{PCR1}\"\npcr2 = \"{PCR2}\"\n"
    );
    let p: Policy = toml::from_str(&text).unwrap();
    assert_eq!(p.max_clock_skew_ms, 60_000);
    assert!(evervault().verify_under(&p, T_NITRO_EVERVAULT).is_ok());
    let no_pcr2 = format!("[[accepted]]\npcr0 = \"{PCR0}\"\npcr1 = \"{PCR1}\"\n");
    policies_refused::<Policy>(&["accepted = []", &no_pcr2]);
}

// ---- synthetic documents under a self-made root ----

fn cbor(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    coset::cbor::ser::into_writer(v, &mut out).unwrap();
    out
}

fn text(s: &str) -> Value {
    Value::Text(s.into())
}

fn pcr_map(indices: &[u8]) -> Value {
    Value::Map(
        indices
            .iter()
            .map(|i| (Value::Integer((*i).into()), Value::Bytes(vec![i + 1; 48])))
            .collect(),
    )
}

/// The fields of a well-formed document (definite-length when encoded with `cbor`).
fn fields(cabundle: Vec<Vec<u8>>) -> Vec<(Value, Value)> {
    vec![
        (
            text("module_id"),
            text("i-0123456789abcdef0-enc0123456789abcdef"),
        ),
        (text("digest"), text("SHA384")),
        (text("timestamp"), Value::Integer(T_NITRO_EVERVAULT.into())),
        (text("pcrs"), pcr_map(&[0, 1, 2, 8])),
        (
            text("certificate"),
            Value::Bytes(data("forged/p384-leaf.der")),
        ),
        (
            text("cabundle"),
            Value::Array(cabundle.into_iter().map(Value::Bytes).collect()),
        ),
        (text("public_key"), Value::Null),
        (text("user_data"), Value::Bytes(vec![0xab; 64])),
        (text("nonce"), Value::Bytes(vec![0xcd; 32])),
    ]
}

/// The same map with indefinite length (`bf … ff`).
fn indefinite(entries: &[(Value, Value)]) -> Vec<u8> {
    let mut out = vec![0xbf];
    for (k, v) in entries {
        out.extend(cbor(k));
        out.extend(cbor(v));
    }
    out.push(0xff);
    out
}

fn cose(protected: &[u8], unprotected: Value, payload: &[u8]) -> Vec<u8> {
    let tbs = cbor(&Value::Array(vec![
        text("Signature1"),
        Value::Bytes(protected.to_vec()),
        Value::Bytes(vec![]),
        Value::Bytes(payload.to_vec()),
    ]));
    let sig: p384::ecdsa::Signature = forged_p384_key().sign(&tbs);
    cbor(&Value::Array(vec![
        Value::Bytes(protected.to_vec()),
        unprotected,
        Value::Bytes(payload.to_vec()),
        Value::Bytes(sig.to_bytes().to_vec()),
    ]))
}

const ES384: [u8; 4] = [0xa1, 0x01, 0x38, 0x22];

fn forged_root() -> Vec<u8> {
    data("forged/p384-root.der")
}

fn aws_root() -> Vec<u8> {
    skillbox_attest::input::certificates(&data("nitro/aws-nitro-root-g1.pem")).unwrap()[0].clone()
}

fn verify_doc(doc: Vec<u8>) -> Result<skillbox_attest::Verified, Refusal> {
    nitro::Evidence { document: doc }.verify_unpinned(T_NITRO_EVERVAULT)
}

#[test]
fn definite_and_indefinite_maps_parse_to_the_same_document() {
    let f = fields(vec![forged_root()]);
    let definite = cose(&ES384, Value::Map(vec![]), &cbor(&Value::Map(f.clone())));
    let indef = cose(&ES384, Value::Map(vec![]), &indefinite(&f));
    let a = nitro::parse(&definite).unwrap().document;
    let b = nitro::parse(&indef).unwrap().document;
    assert_eq!(a, b);
    assert_eq!(a.user_data, Some(vec![0xab; 64]));
    // Tag 18 (COSE_Sign1) is accepted too.
    let mut tagged = vec![0xd2];
    tagged.extend(&definite);
    assert_eq!(nitro::parse(&tagged).unwrap().document, a);
}

#[test]
fn a_document_under_another_root_is_refused() {
    // A perfectly formed, correctly signed document whose chain ends at a self-made root.
    let doc = cose(
        &ES384,
        Value::Map(vec![]),
        &cbor(&Value::Map(fields(vec![forged_root()]))),
    );
    assert_eq!(verify_doc(doc).unwrap_err(), Refusal::ForeignRoot);
    // Claiming the real AWS root in cabundle[0] does not help: the leaf does not chain to it.
    let doc = cose(
        &ES384,
        Value::Map(vec![]),
        &cbor(&Value::Map(fields(vec![aws_root()]))),
    );
    assert_eq!(verify_doc(doc).unwrap_err(), Refusal::ForeignRoot);
}

#[test]
fn structure_rules_are_enforced() {
    let payload = |f: Vec<(Value, Value)>| cbor(&Value::Map(f));
    let base = || fields(vec![forged_root()]);
    let parse_err = |protected: &[u8], unprotected: Value, payload: Vec<u8>| {
        nitro::parse(&cose(protected, unprotected, &payload)).unwrap_err()
    };

    // Protected header: exactly {1: -35}; ES256, a non-minimal -35, an extra label refused.
    for protected in [
        &[0xa1, 0x01, 0x26][..],
        &[0xa1, 0x01, 0x39, 0x00, 0x22][..],
        &[0xa2, 0x01, 0x38, 0x22, 0x03, 0x00][..],
        &[0xa0][..],
    ] {
        assert_eq!(
            parse_err(protected, Value::Map(vec![]), payload(base())).code(),
            "unsupported",
            "{protected:02x?}"
        );
    }
    assert_eq!(
        parse_err(
            &ES384,
            Value::Map(vec![(Value::Integer(4.into()), Value::Bytes(vec![1]))]),
            payload(base())
        ),
        Refusal::Malformed("COSE unprotected header is not empty")
    );

    // Duplicate keys, at the top and in the PCR map.
    let mut dup = base();
    dup.push((text("nonce"), Value::Bytes(vec![1])));
    assert_eq!(
        parse_err(&ES384, Value::Map(vec![]), payload(dup)),
        Refusal::Malformed("duplicate key in the attestation document")
    );
    let mut dup_pcr = base();
    dup_pcr[3].1 = Value::Map(vec![
        (Value::Integer(0.into()), Value::Bytes(vec![1; 48])),
        (Value::Integer(0.into()), Value::Bytes(vec![2; 48])),
    ]);
    assert_eq!(
        parse_err(&ES384, Value::Map(vec![]), payload(dup_pcr)),
        Refusal::Malformed("duplicate key in the attestation document")
    );
    // Duplicates are refused in indefinite-length maps as well.
    let mut dup = base();
    dup.push((text("digest"), text("SHA384")));
    assert_eq!(
        parse_err(&ES384, Value::Map(vec![]), indefinite(&dup)),
        Refusal::Malformed("duplicate key in the attestation document")
    );

    // Unknown fields, missing PCR0, wrong digest.
    let mut unknown = base();
    unknown.push((text("extra"), Value::Null));
    assert_eq!(
        parse_err(&ES384, Value::Map(vec![]), payload(unknown)).code(),
        "malformed"
    );
    let mut no_pcr0 = base();
    no_pcr0[3].1 = pcr_map(&[1, 2]);
    assert_eq!(
        parse_err(&ES384, Value::Map(vec![]), payload(no_pcr0)),
        Refusal::Malformed("PCR0 missing")
    );
    let mut sha256 = base();
    sha256[1].1 = text("SHA256");
    assert_eq!(
        parse_err(&ES384, Value::Map(vec![]), payload(sha256)).code(),
        "unsupported"
    );

    // Size limits: 512 bytes of user data or nonce and 1024 of public key pass, one more fails.
    for (field, at, limit) in [
        ("user_data", 7, 512),
        ("nonce", 8, 512),
        ("public_key", 6, 1024),
    ] {
        let mut ok = base();
        ok[at].1 = Value::Bytes(vec![1; limit]);
        assert!(
            nitro::parse(&cose(&ES384, Value::Map(vec![]), &payload(ok))).is_ok(),
            "{field} at its limit"
        );
        let mut big = base();
        big[at].1 = Value::Bytes(vec![1; limit + 1]);
        assert_eq!(
            parse_err(&ES384, Value::Map(vec![]), payload(big)).code(),
            "too_large",
            "{field}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// A flipped bit anywhere in the document is refused; in the signature it is a bad
    /// signature (on evervault's document and dstack's indefinite-length one).
    #[test]
    fn any_tampered_byte_is_refused(
        sample in 0usize..2,
        flip in bit_flip(),
    ) {
        let (mut ev, at_ms) = [
            (evervault(), T_NITRO_EVERVAULT),
            (nitro_doc("nitro/dstack-nitro_attestation-indefinite-cbor.cose"), T_NITRO_DSTACK),
        ][sample].clone();
        let within = ev.document.len();
        let at = flip.apply(&mut ev.document, within);
        let r = nitro::Evidence::verifier().verify(&ev, &Expected::default(), at_ms);
        let err = r.unwrap_err();
        if at >= ev.document.len() - 96 {
            prop_assert_eq!(err.code(), "bad_signature");
        }
    }

    #[test]
    fn random_documents_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        if let Ok((ev, _)) = nitro::Evidence::from_file(&bytes) {
            prop_assert!(nitro::Evidence::verifier().verify(&ev, &Expected::default(), T_NITRO_EVERVAULT).is_err());
        }
        prop_assert!(nitro::parse(&bytes).is_err());
    }
}
