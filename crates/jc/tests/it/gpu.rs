//! A box whose model runs on GPUs binds its GPU evidence into its CPU statement (issue 31 item
//! 4): the statement carries the hash of the GPU reports the attestation carries, made for the
//! asker's nonce. The GPUs here are NVIDIA's serialized evidence of a 4-Hopper host (the attest
//! crate's `nvat-multi_gpu_hopper.json`, Apache-2.0: every GPU signed the same requester nonce),
//! served by a GPU double; the CPU side is the insecure-dev attester re-signing a real box's
//! statement, so the whole node-side check runs on genuine GPU signatures.

use std::sync::Arc;

use skillbox_attest::nvidia;
use skillbox_jc::JcError;
use skillbox_jc::attest::{
    Attester as _, BoxConfiguration, GpuAttester, GpuBound, InsecureDevAttester, Statement,
    VerifyPolicy, verify_attestation,
};
use skillbox_jc::run::now_secs;

use crate::support::*;

/// The nonce every GPU of the sample signed.
const GPU_NONCE: &str = "e97b23a1718095a0e9e35edca810768c70a6a5a389b705e753b197912bc11576";

fn sample_gpus() -> Vec<nvidia::Evidence> {
    let json = std::fs::read(format!(
        "{}/../attest/tests/data/nvidia/nvat-multi_gpu_hopper.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("data");
    nvidia::Evidence::list_from_sdk_json(&json).expect("the sample parses")
}

/// GPUs that answer with recorded reports (a real GPU signs the nonce it is given; these were
/// signed for [`GPU_NONCE`]).
struct RecordedGpus(Vec<nvidia::Evidence>);

impl GpuAttester for RecordedGpus {
    fn evidence(&self, _nonce: &[u8; 32]) -> skillbox_jc::Result<Vec<nvidia::Evidence>> {
        Ok(self.0.clone())
    }
}

/// The fixture's program opened and attested at its box: the approval, the run id, the box's
/// provider table and its statement (what a GPU box's attestation is made over again here).
async fn opened(
    f: &Fixture,
) -> (
    skillbox_jc::dsse::ApprovedProgram,
    String,
    std::collections::BTreeMap<String, String>,
    Statement,
) {
    let Attested {
        approved,
        run_id,
        attestation: served,
        ..
    } = f.open_attested(&f.program()).await;
    let table = served.providers.clone();
    let statement: Statement = served.statement().expect("statement").1;
    (approved, run_id, table, statement)
}

#[tokio::test]
async fn gpu_evidence_is_bound_into_the_cpu_statement_and_another_gpus_report_is_refused() {
    let f = start(None).await;
    let (approved, run_id, table, served) = opened(&f).await;
    let gpus = sample_gpus();
    let cpu = Arc::new(InsecureDevAttester::with_measurement(
        served.measurement.clone(),
    ));
    // A box on GPU 0 and GPU 1, asked with the nonce the recorded GPUs signed.
    let on = |gpus: &[nvidia::Evidence]| {
        GpuBound::new(cpu.clone(), Arc::new(RecordedGpus(gpus.to_vec())))
            .attest(&Statement {
                nonce: GPU_NONCE.into(),
                ..served.clone()
            })
            .expect("attests")
    };
    let check = |a: &skillbox_jc::attest::Attestation, nonce: &str| {
        let mut a = a.clone();
        a.providers = table.clone();
        verify_attestation(
            &a,
            &approved,
            &run_id,
            nonce,
            &VerifyPolicy::new(true),
            now_secs(),
        )
    };
    let honest = on(&gpus[..2]);
    assert_eq!(honest.gpus.len(), 2);
    check(&honest, GPU_NONCE).expect("bound, genuine, for this nonce");

    // The attack: another genuine GPU report (GPU 2, the same nonce, a valid chain) in place of
    // the one the CPU report bound.
    let mut swapped = honest.clone();
    swapped.gpus[1] = gpus[2].clone();
    let got = check(&swapped, GPU_NONCE);
    assert!(
        matches!(got, Err(JcError::HardwareRefused("gpu_evidence_mismatch"))),
        "{got:?}"
    );
    // One dropped, one added, all removed: the same.
    for gpus in [vec![gpus[0].clone()], gpus.clone(), vec![]] {
        let mut changed = honest.clone();
        changed.gpus = gpus;
        let got = check(&changed, GPU_NONCE);
        assert!(
            matches!(got, Err(JcError::HardwareRefused("gpu_evidence_mismatch"))),
            "{got:?}"
        );
    }
    // GPU reports made for another asker (recorded ones replayed): bound, but not fresh.
    let replayed = GpuBound::new(cpu.clone(), Arc::new(RecordedGpus(gpus[..2].to_vec())))
        .attest(&Statement {
            nonce: "ab".repeat(32),
            ..served.clone()
        })
        .expect("attests");
    let got = check(&replayed, &"ab".repeat(32));
    assert!(
        matches!(got, Err(JcError::HardwareRefused("nonce_mismatch"))),
        "{got:?}"
    );

    // A box whose bound configuration names its GPUs cannot drop their evidence.
    let config = BoxConfiguration::new(table.clone(), None).with_gpus(2);
    let mut without = cpu
        .attest(&Statement {
            nonce: GPU_NONCE.into(),
            config_sha256: Some(hex::encode(config.sha256().expect("hash"))),
            ..served.clone()
        })
        .expect("attests");
    without.config = Some(config);
    let got = check(&without, GPU_NONCE);
    assert!(
        matches!(got, Err(JcError::HardwareRefused("gpu_evidence_mismatch"))),
        "{got:?}"
    );
}

/// A party that pins its box's GPUs does not take the box's attestation without GPU evidence:
/// an operator who starts the box without its GPU collector (the configuration then names no
/// GPU) would otherwise run the model on GPUs nobody attested. A party that pins no GPU takes
/// it, as before.
#[tokio::test]
async fn a_party_pinning_gpus_refuses_a_box_that_shows_none() {
    let f = start(None).await;
    let (approved, run_id, table, statement) = opened(&f).await;
    let cpu = InsecureDevAttester::with_measurement(statement.measurement.clone());
    let mut without = cpu
        .attest(&Statement {
            nonce: GPU_NONCE.into(),
            ..statement.clone()
        })
        .expect("attests");
    without.providers = table;
    let check = |policy: &VerifyPolicy| {
        verify_attestation(&without, &approved, &run_id, GPU_NONCE, policy, now_secs())
    };
    check(&VerifyPolicy::new(true)).expect("no GPU pinned: a box without GPUs is taken");
    let pinned = VerifyPolicy::new(true).with_gpu_verifier(Arc::new(
        nvidia::Verifier::new(nvidia::Policy::unpinned()).expect("verifier"),
    ));
    let got = check(&pinned);
    assert!(
        matches!(got, Err(JcError::HardwareRefused("gpu_evidence_mismatch"))),
        "{got:?}"
    );
}

/// The collector program a box runs for its GPUs' evidence: given the requester nonce (64 hex
/// digits), it prints NVIDIA's serialized list; a program that fails or prints something else is
/// a clear error, never evidence.
#[cfg(unix)]
#[test]
fn the_gpu_collector_program_gives_the_evidence_list_or_a_clear_error() {
    use skillbox_jc::tsm::CommandGpus;
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let sample = format!(
        "{}/../attest/tests/data/nvidia/nvat-multi_gpu_hopper.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let script = |name: &str, body: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        CommandGpus::new(path)
    };
    let nonce = [7u8; 32];
    let collector = script(
        "collect",
        &format!(
            "[ \"$1\" = \"{}\" ] || exit 3\ncat '{sample}'",
            hex::encode(nonce)
        ),
    );
    assert_eq!(collector.evidence(&nonce).expect("evidence"), sample_gpus());
    let err = collector
        .evidence(&[8u8; 32])
        .expect_err("another nonce: exit 3");
    assert!(err.to_string().contains("failed"), "{err}");
    let junk = script("junk", "echo not json");
    assert!(matches!(
        junk.evidence(&nonce),
        Err(JcError::HardwareRefused("malformed"))
    ));
    // Through the box's attester: the statement binds the list's hash.
    let cpu = Arc::new(InsecureDevAttester::with_measurement("5a".repeat(48)));
    let a = GpuBound::new(cpu, Arc::new(collector))
        .attest(&Statement {
            nonce: hex::encode(nonce),
            ..Statement::default()
        })
        .expect("attests");
    assert_eq!(a.gpus.len(), 4);
    let st: Statement = a.statement().expect("statement").1;
    assert_eq!(
        st.gpu_evidence_sha256,
        Some(hex::encode(nvidia::list_binding_sha256(&a.gpus)))
    );
}
