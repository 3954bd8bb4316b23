//! NVIDIA Hopper SPDM evidence on the real sample (trustee / nvtrust), and synthetic
//! transcripts signed under a self-made root.

use crate::support::*;
use p384::ecdsa::signature::Signer as _;
use proptest::prelude::*;
use skillbox_attest::nvidia::{self, Expected, GoldenMeasurement, Policy};
use skillbox_attest::{HexBytes, Platform, Refusal};

const BLOCK2: &str = "8048dfd18fe229bf16eb9d30cca0f11a24dafe6eb731de1462984645a0b189b77c4e4e17de727a5e19e3d07de51da338";

fn nonce() -> [u8; 32] {
    hex_arr(NVIDIA_NONCE)
}

/// The refusal code of unpinned verification at 2025-01-01.
fn code(ev: &nvidia::Evidence, e: &Expected) -> &'static str {
    refused(ev.verify_expecting(e, T_2025)).code()
}

fn golden(index: u8, value: &str) -> GoldenMeasurement {
    GoldenMeasurement {
        index,
        values: vec![HexBytes(hex::decode(value).unwrap())],
    }
}

/// Golden values for every block `ev`'s report carries, as they are: a whole pin of that GPU.
fn every_block(ev: &nvidia::Evidence) -> Vec<GoldenMeasurement> {
    nvidia::Transcript::parse(&ev.transcript)
        .expect("the sample parses")
        .blocks
        .iter()
        .map(|b| GoldenMeasurement {
            index: b.index,
            values: vec![HexBytes(b.value.clone())],
        })
        .collect()
}

/// `every_block` with block `index`'s values replaced.
fn with_block(
    mut golden: Vec<GoldenMeasurement>,
    index: u8,
    values: Vec<HexBytes>,
) -> Vec<GoldenMeasurement> {
    let g = golden
        .iter_mut()
        .find(|g| g.index == index)
        .expect("the sample carries the block");
    g.values = values;
    golden
}

#[test]
fn hopper_sample_verifies_with_its_nonce() {
    let e = Expected {
        nonce: Some(nonce()),
    };
    let v = nvidia_hopper().verify_expecting(&e, T_2025).unwrap();
    assert_eq!(v.platform, Platform::Nvidia);
    assert_eq!(v.nonce.as_deref(), Some(NVIDIA_NONCE));
    assert!(v.nonce_checked);
    assert_eq!(v.measurements.len(), 64);
    assert_eq!(v.measurement_named("block2"), Some(BLOCK2));
    assert_eq!(v.attribute("driver_version"), Some("550.90.07"));
    assert_eq!(v.instance_id.as_deref(), Some("41431D480FE5E87274"));
    assert_eq!(v.measurement.len(), 96, "SHA-384 of the measurement record");
}

#[test]
fn the_binding_hash_covers_transcript_and_chain() {
    let ev = nvidia_hopper();
    let h = ev.binding_hash();
    let mut other = ev.clone();
    other.transcript[40] ^= 1;
    assert_ne!(other.binding_hash(), h);
    let mut other = ev.clone();
    other.chain.pop();
    assert_ne!(other.binding_hash(), h);
    // Moving a byte between parts changes it too (lengths are encoded).
    let mut a = ev.clone();
    let moved = a.chain[0].remove(0);
    a.transcript.push(moved);
    assert_ne!(a.binding_hash(), h);
    assert_eq!(ev.clone().binding_hash(), h);
}

#[test]
fn any_other_nonce_is_refused() {
    let mut other = nonce();
    other[31] ^= 1;
    let e = Expected { nonce: Some(other) };
    assert_eq!(
        refused(nvidia_hopper().verify_expecting(&e, T_2025)),
        Refusal::NonceMismatch
    );
}

#[test]
fn golden_measurements_and_devices_are_compared() {
    let ev = nvidia_hopper();
    let p = Policy {
        measurements: every_block(&ev),
        devices: vec!["41431D480FE5E87274".into()],
    };
    assert!(ev.verify_under(&p, T_2025).unwrap().measurements_pinned);
    // An alternative list: any listed value passes.
    let p = Policy {
        measurements: with_block(
            every_block(&ev),
            2,
            vec![
                HexBytes(vec![0; 48]),
                HexBytes(hex::decode(BLOCK2).unwrap()),
            ],
        ),
        devices: vec![],
    };
    assert!(ev.verify_under(&p, T_2025).is_ok());
    let other_block2 = with_block(every_block(&ev), 2, vec![HexBytes(vec![0; 48])]);
    let mut absent_block = every_block(&ev);
    absent_block.push(golden(200, BLOCK2));
    for bad in [other_block2, absent_block] {
        let p = Policy {
            measurements: bad,
            devices: vec![],
        };
        assert_eq!(
            ev.refusal_under(&p, T_2025),
            Refusal::MeasurementNotAllowed("GPU measurement block")
        );
    }
    let p = Policy {
        measurements: vec![],
        devices: vec!["OTHER".into()],
    };
    assert_eq!(ev.refusal_under(&p, T_2025), Refusal::InstanceNotAllowed);
}

#[test]
fn chain_time_and_shape() {
    let ev = nvidia_hopper();
    // The Provisioner ICA starts 2022-03-01.
    assert_eq!(
        ev.refusal_at(1_640_995_200_000),
        Refusal::CertificateNotYetValid
    );
    // Without the root in the file the pinned one is used.
    let mut no_root = ev.clone();
    no_root.chain.pop();
    assert!(no_root.verify_unpinned(T_2025).is_ok());
    // Without intermediates the leaf cannot reach the root.
    let mut leaf_only = ev.clone();
    leaf_only.chain.truncate(1);
    assert_eq!(leaf_only.refusal_at(T_2025), Refusal::ForeignRoot);
    let mut none = ev.clone();
    none.chain.clear();
    assert_eq!(none.refusal_at(T_2025).code(), "malformed");
}

#[test]
fn policy_loads_from_toml() {
    let text = format!(
        "devices = [\"41431D480FE5E87274\"]\n[[measurements]]\nindex = 2\nvalues = [\"{BLOCK2}\"]\n"
    );
    let p: Policy = toml::from_str(&text).unwrap();
    // It loads; one block of the report's 64 is no pin of the GPU (review 26 V8).
    assert_eq!(
        nvidia_hopper().refusal_under(&p, T_2025),
        Refusal::MeasurementNotAllowed("GPU measurement block not pinned")
    );
    policies_refused::<Policy>(&[
        "measurements = []",
        "[[measurements]]\nindex = 2\nvalues = []\n",
    ]);
}

/// Review 26 V8: "pinned" meant at least one golden block, so a party policy copied partially
/// from a RIM (one block, say) passed a GPU whose mode shows in other blocks. The genuine Hopper
/// sample plays the CC-off GPU: the honest golden set is its blocks with block 5 of another
/// value (the mode-bearing block, in this play). The whole honest pin refuses it; a pin of the
/// unrelated block 2 alone, which matches, refused it not (`measurements_pinned` true) and now
/// refuses it for the blocks it leaves out.
#[test]
fn a_gpu_policy_pinning_some_blocks_passes_no_gpu_on_them_alone() {
    let cc_off = nvidia_hopper();
    let honest = with_block(every_block(&cc_off), 5, vec![HexBytes(vec![0x5a; 48])]);
    assert_eq!(
        cc_off.refusal_under(
            &Policy {
                measurements: honest.clone(),
                devices: vec![]
            },
            T_2025
        ),
        Refusal::MeasurementNotAllowed("GPU measurement block")
    );
    let partial: Vec<GoldenMeasurement> = honest.into_iter().filter(|g| g.index == 2).collect();
    assert_eq!(partial, [golden(2, BLOCK2)]);
    let refused = cc_off.verify_under(
        &Policy {
            measurements: partial,
            devices: vec![],
        },
        T_2025,
    );
    assert_eq!(
        refused.map(|v| v.measurements_pinned),
        Err(Refusal::MeasurementNotAllowed(
            "GPU measurement block not pinned"
        )),
        "a GPU passed on one pinned block"
    );
}

// ---- a synthetic transcript under a self-made root ----

fn forged_transcript(nonce: [u8; 32]) -> Vec<u8> {
    forged_request_for(nonce, 0xff, 2)
}

/// A transcript whose request asks for `operation` (param2) and whose response carries blocks
/// 1..=`blocks` (block `i`'s value is 48 bytes of `i`), signed with the forged leaf's key.
fn forged_request_for(nonce: [u8; 32], operation: u8, blocks: u8) -> Vec<u8> {
    let mut t = vec![0x11, 0xe0, 0x01, operation];
    t.extend(nonce);
    t.push(0);
    let mut record = Vec::new();
    for i in 1..=blocks {
        record.extend([i, 1, 51, 0, 1, 48, 0]);
        record.extend([i; 48]);
    }
    t.extend([0x11, 0x60, 0, 0, blocks]);
    t.extend(&(record.len() as u32).to_le_bytes()[..3]);
    t.extend(&record);
    t.extend([7u8; 32]);
    t.extend(0u16.to_le_bytes());
    let sig: p384::ecdsa::Signature = forged_p384_key().sign(&t);
    t.extend(sig.to_bytes());
    t
}

#[test]
fn a_transcript_under_another_root_is_refused() {
    let t = forged_transcript(nonce());
    let parsed = nvidia::Transcript::parse(&t).expect("well-formed");
    assert_eq!(parsed.blocks.len(), 2);
    let ev = nvidia::Evidence {
        transcript: t.clone(),
        chain: vec![data("forged/p384-leaf.der"), data("forged/p384-root.der")],
    };
    assert_eq!(ev.refusal_at(T_2025), Refusal::ForeignRoot);
    // The forged leaf hung under the real chain's intermediates does not chain either.
    let mut real = nvidia_hopper().chain;
    real[0] = data("forged/p384-leaf.der");
    let ev = nvidia::Evidence {
        transcript: t,
        chain: real,
    };
    assert_eq!(ev.refusal_at(T_2025), Refusal::ForeignRoot);
}

#[test]
fn layout_rules_are_enforced() {
    let good = forged_transcript([1; 32]);
    let err = |t: &[u8]| nvidia::Transcript::parse(t).unwrap_err();
    // A non-zero byte after the signature, a dropped byte (zero padding is accepted: drivers
    // hand the message over in a larger buffer).
    let mut long = good.clone();
    long.push(1);
    assert_eq!(err(&long).code(), "malformed");
    long.pop();
    long.push(0);
    assert!(nvidia::Transcript::parse(&long).is_ok());
    assert_eq!(err(&good[..good.len() - 1]).code(), "malformed");
    // Not GET_MEASUREMENTS / no signature requested / another SPDM version.
    let mut t = good.clone();
    t[1] = 0x81;
    assert_eq!(err(&t).code(), "unsupported");
    let mut t = good.clone();
    t[2] = 0;
    assert_eq!(err(&t).code(), "malformed");
    let mut t = good.clone();
    t[37] = 0x12;
    assert_eq!(err(&t).code(), "unsupported");
    // Block count disagreeing with the record, duplicate index.
    let mut t = good.clone();
    t[37 + 4] = 3;
    assert_eq!(err(&t).code(), "malformed");
    let mut t = good.clone();
    t[37 + 8 + 55] = 1;
    assert_eq!(
        err(&t),
        Refusal::Malformed("duplicate SPDM measurement index")
    );
}

/// Review 27 F5: param2 of the request is the operation, and only 0xFF (every block) was ever
/// meant. A box asking its GPU for block 1 alone gets a signed one-block report, which a policy
/// pinning block 1 alone would pass under the pin-them-all rule (every carried block pinned);
/// the other blocks, where a CC-off or devtools GPU differs, were never asked for. Refused as
/// the request is read, before the chain (the forged leaf chains to no NVIDIA root, so no
/// forged report could get further; the refusal must be the request's).
#[test]
fn a_request_for_fewer_than_every_block_is_refused() {
    let only_block_1 = Policy {
        measurements: vec![golden(1, &hex::encode([1u8; 48]))],
        devices: vec![],
    };
    let fewer = Refusal::Malformed("SPDM request did not ask for every measurement block");
    // 1: that block; 0: the number of blocks (no block at all); 0xFE: the last one.
    for (operation, blocks) in [(1u8, 1u8), (0, 0), (0xfe, 1)] {
        let t = forged_request_for(nonce(), operation, blocks);
        assert_eq!(
            nvidia::Transcript::parse(&t).map(|t| t.blocks.len()),
            Err(fewer),
            "param2 = {operation:#04x} parsed"
        );
        let ev = nvidia::Evidence {
            transcript: t,
            chain: vec![data("forged/p384-leaf.der"), data("forged/p384-root.der")],
        };
        assert_eq!(ev.refusal_under(&only_block_1, T_2025), fewer);
    }
    // The same forge asking for every block reads; it stops at the chain.
    let all = nvidia::Evidence {
        transcript: forged_request_for(nonce(), 0xff, 1),
        chain: vec![data("forged/p384-leaf.der"), data("forged/p384-root.der")],
    };
    assert_eq!(
        nvidia::Transcript::parse(&all.transcript).map(|t| t.blocks.len()),
        Ok(1)
    );
    assert_eq!(
        all.refusal_under(&only_block_1, T_2025),
        Refusal::ForeignRoot
    );
    // NVIDIA's own reports (Hopper on drivers 550 and 580, Blackwell) all ask for every block;
    // the same Hopper request asking for block 2 is refused as the request, not the signature.
    for ev in [nvidia_hopper(), nvidia_hopper_580(), nvidia_blackwell()] {
        assert_eq!(ev.transcript[3], 0xff);
    }
    let mut one = nvidia_hopper();
    one.transcript[3] = 2;
    assert_eq!(one.refusal_at(T_2025), fewer);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// A flipped bit anywhere in a transcript is refused, on every GPU sample (Hopper on drivers
    /// 550, 580 with its trailing zero byte, and Blackwell); in the nonces and measurement
    /// values (where the layout cannot change) and the signature it is a bad signature.
    #[test]
    fn any_tampered_byte_is_refused(
        sample in 0usize..3,
        flip in bit_flip(),
    ) {
        let mut ev = [nvidia_hopper, nvidia_hopper_580, nvidia_blackwell][sample]();
        let expected = requester_nonce(&ev);
        // The 580 report has one zero byte after its signature (outside the signed region).
        let trailer = usize::from(sample == 1);
        let within = ev.transcript.len();
        let at = flip.apply(&mut ev.transcript, within);
        let err = nvidia::Evidence::verifier().verify(&ev, &expected, T_2025).unwrap_err();
        let in_request_nonce = (4..36).contains(&at);
        let block_value = (37 + 8..37 + 8 + 3520).contains(&at) && (at - 45) % 55 >= 7;
        let sig_end = ev.transcript.len() - trailer;
        let in_signature = (sig_end - 96..sig_end).contains(&at);
        if in_request_nonce || block_value || in_signature {
            prop_assert_eq!(err.code(), "bad_signature");
        }
    }

    #[test]
    fn random_transcripts_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let mut ev = nvidia_hopper();
        ev.transcript = bytes;
        prop_assert!(nvidia::Evidence::verifier().verify(&ev, &Expected::default(), T_2025).is_err());
    }
}

/// A Hopper report captured on another host (driver 580.95.05) ends with one zero byte after
/// the signature, as the driver handed it over: it verifies, so would more zero padding; a
/// non-zero byte there, or a signature cut short, is malformed.
#[test]
fn a_report_from_another_host_verifies_and_only_zero_padding_may_follow_the_signature() {
    let ev = nvidia_hopper_580();
    let e = requester_nonce(&ev);
    let v = ev.verify_expecting(&e, T_2025).expect("verifies");
    assert_eq!(v.attribute("driver_version"), Some("580.95.05"));
    assert_eq!(*ev.transcript.last().unwrap(), 0);

    let mut padded = ev.clone();
    padded.transcript.extend([0u8; 7]);
    assert!(padded.verify_expecting(&e, T_2025).is_ok());

    let mut junk = ev.clone();
    *junk.transcript.last_mut().unwrap() = 1;
    assert_eq!(
        refused(junk.verify_expecting(&e, T_2025)),
        Refusal::Malformed("SPDM response length disagrees with its fields")
    );

    let mut cut = ev.clone();
    cut.transcript.truncate(cut.transcript.len() - 2);
    assert_eq!(
        refused(cut.verify_expecting(&e, T_2025)),
        Refusal::Malformed("SPDM response length disagrees with its fields")
    );
}

/// The opaque data carries its own length: the signature starts where that length says, so
/// a length off by one moves the signature and nothing verifies.
#[test]
fn the_opaque_length_decides_where_the_signature_is() {
    let ev = nvidia_hopper_580();
    let e = requester_nonce(&ev);
    let t = nvidia::Transcript::parse(&ev.transcript).unwrap();
    let at = 37 + 8 + t.record.len() + 32;
    assert_eq!(
        usize::from(u16::from_le_bytes([
            ev.transcript[at],
            ev.transcript[at + 1]
        ])),
        t.opaque.len()
    );
    let mut longer = ev.clone();
    longer.transcript[at] += 1;
    assert_eq!(code(&longer, &e), "bad_signature");
    let mut shorter = ev;
    shorter.transcript[at] -= 1;
    assert!(shorter.verify_expecting(&e, T_2025).is_err());
}

/// SPDM 1.2 responses parse, but their signature covers the version/capabilities/algorithms
/// messages, which GPU evidence does not carry: unsupported, never checked over the wrong bytes.
#[test]
fn spdm_1_2_parses_and_is_refused_unsupported() {
    let mut ev = nvidia_hopper();
    ev.transcript[0] = 0x12;
    ev.transcript[37] = 0x12;
    let t = nvidia::Transcript::parse(&ev.transcript).expect("1.2 layout parses");
    assert_eq!(t.version, 0x12);
    assert_eq!(code(&ev, &Expected::default()), "unsupported");
    // Request and response must speak the same version.
    ev.transcript[37] = 0x11;
    assert_eq!(code(&ev, &Expected::default()), "unsupported");
}

/// NVIDIA's serialized evidence for a 4-GPU host: every GPU verifies, each a different device;
/// the same GPU listed twice, a nonce field that is not its transcript's, another expected
/// nonce and an empty list are refused.
#[test]
fn multi_gpu_evidence_verifies_every_gpu_and_refuses_a_repeated_one() {
    let json = data("nvidia/nvat-multi_gpu_hopper.json");
    let list = nvidia::Evidence::list_from_sdk_json(&json).unwrap();
    assert_eq!(list.len(), 4);
    let e = requester_nonce(&list[0]);
    let all = nvidia::Evidence::verifier()
        .verify_all(&list, &e, T_2025)
        .unwrap();
    let mut ids: Vec<_> = all.iter().map(|v| v.instance_id.clone().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4);
    assert!(all.iter().all(|v| v.nonce_checked));

    let twice = vec![list[0].clone(), list[1].clone(), list[0].clone()];
    assert_eq!(
        nvidia::Evidence::verifier()
            .verify_all(&twice, &e, T_2025)
            .unwrap_err(),
        Refusal::Malformed("GPU evidence lists one device twice")
    );
    assert_eq!(
        nvidia::Evidence::verifier()
            .verify_all(
                &list,
                &Expected {
                    nonce: Some([7; 32])
                },
                T_2025
            )
            .unwrap_err(),
        Refusal::NonceMismatch
    );
    assert_eq!(
        nvidia::Evidence::verifier()
            .verify_all(&[], &e, T_2025)
            .unwrap_err(),
        Refusal::Malformed("no GPU evidence given")
    );

    let mut entries: serde_json::Value = serde_json::from_slice(&json).unwrap();
    entries[2]["nonce"] = serde_json::Value::String("00".repeat(32));
    assert_eq!(
        nvidia::Evidence::list_from_sdk_json(&serde_json::to_vec(&entries).unwrap()).unwrap_err(),
        Refusal::Malformed("GPU evidence nonce differs from its transcript's")
    );
    entries[2]["arch"] = serde_json::Value::String("AMPERE".into());
    assert_eq!(
        nvidia::Evidence::list_from_sdk_json(&serde_json::to_vec(&entries).unwrap())
            .unwrap_err()
            .code(),
        "unsupported"
    );
    assert_eq!(
        nvidia::Evidence::list_from_sdk_json(b"{}")
            .unwrap_err()
            .code(),
        "malformed"
    );
}
