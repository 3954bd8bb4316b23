//! A box whose model runs on GPUs binds its GPU evidence into its CPU statement (issue 31 item
//! 4): the statement carries the hash of the GPU reports the attestation carries, made for the
//! asker's nonce. The GPUs here are NVIDIA's serialized evidence of a 4-Hopper host (the attest
//! crate's `nvat-multi_gpu_hopper.json`, Apache-2.0: every GPU signed the same requester nonce),
//! served by a GPU double; the CPU side is the insecure-dev attester re-signing a real box's
//! statement, so the whole node-side check runs on genuine GPU signatures; a hardware box's
//! GPUs (review 24b N4) are bound by the Nitro attester through its NSM double (`nitro.rs`).

use std::sync::Arc;

use skillbox_attest::HexBytes;
use skillbox_attest::nvidia;
use skillbox_jc::JcError;
use skillbox_jc::attest::{
    Attester as _, BoxConfiguration, GpuAttester, GpuBound, InsecureDevAttester, Statement,
    VerifyPolicy, VisibleGpus, verify_attestation,
};
use skillbox_jc::nsm::NitroAttester;
use skillbox_jc::run::now_secs;

use crate::nitro::{NsmDouble, PCR, opened_as_nitro, test_root_verifier};
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

/// Golden values for every measurement block of `gpus` (each index: the values they report),
/// as a node pins them from NVIDIA's RIMs.
fn golden_values(gpus: &[nvidia::Evidence]) -> nvidia::Policy {
    let mut golden: Vec<nvidia::GoldenMeasurement> = Vec::new();
    for ev in gpus {
        let t = nvidia::Transcript::parse(&ev.transcript).expect("parses");
        for b in t.blocks {
            let value = HexBytes(b.value);
            match golden.iter_mut().find(|g| g.index == b.index) {
                Some(g) if !g.values.contains(&value) => g.values.push(value),
                Some(_) => {}
                None => golden.push(nvidia::GoldenMeasurement {
                    index: b.index,
                    values: vec![value],
                }),
            }
        }
    }
    nvidia::Policy {
        measurements: golden,
        devices: Vec::new(),
    }
}

/// Review 24b N4. A GPU's signed report carries no confidential-computing or devtools flag:
/// NVIDIA's verifiers read the mode from NVML (the attesting machine's own driver), and otherwise
/// see a GPU with CC off or in devtools mode only as measurements that differ from its RIM's
/// golden values. A party pinning no golden values took any GPU that chains to NVIDIA's root
/// and signed its nonce, whatever its mode, even on a hardware box. The attack here: a hardware
/// box (Nitro, through its NSM double) binds two genuine Hopper reports nobody compared with
/// anything; it is refused `gpu_not_pinned`. With golden values the same box verifies, and a
/// report whose measurement differs from them (what CC off or devtools shows) is refused.
#[tokio::test]
async fn a_hardware_box_whose_gpus_nobody_pinned_is_refused() {
    let f = start(None).await;
    let (double, _) = NsmDouble::new();
    let nitro_box = Arc::new(NitroAttester::open(Box::new(double)).expect("opens"));
    let (
        Attested {
            approved,
            run_id,
            attestation: served,
            ..
        },
        statement,
    ) = opened_as_nitro(&f, &hex::encode([PCR[0]; 48])).await;
    let gpus = sample_gpus();
    let mut attestation = GpuBound::new(nitro_box, Arc::new(RecordedGpus(gpus[..2].to_vec())))
        .attest(&Statement {
            nonce: GPU_NONCE.into(),
            ..statement
        })
        .expect("attests");
    attestation.providers = served.providers.clone();
    let check = |gpu: Option<nvidia::Policy>| {
        let mut policy = VerifyPolicy::new(false)
            .with_verifier(Box::new(test_root_verifier()))
            .only_platform("nitro");
        if let Some(gpu) = gpu {
            let verifier = nvidia::Verifier::new(gpu).expect("verifier");
            policy = policy.with_gpu_verifier(Arc::new(verifier));
        }
        verify_attestation(
            &attestation,
            &approved,
            &run_id,
            GPU_NONCE,
            &policy,
            now_secs(),
        )
    };
    for unpinned in [None, Some(nvidia::Policy::unpinned())] {
        let got = check(unpinned);
        assert!(
            matches!(got, Err(JcError::HardwareRefused("gpu_not_pinned"))),
            "{got:?}"
        );
    }
    let golden = golden_values(&gpus[..2]);
    let verified = check(Some(golden.clone())).expect("golden values pinned: verified");
    assert!(!verified.no_hardware_isolation);
    let mut other_mode = golden;
    other_mode.measurements[0].values = vec![HexBytes(vec![0x5a; 48])];
    let got = check(Some(other_mode.clone()));
    assert!(
        matches!(
            got,
            Err(JcError::HardwareRefused("measurement_not_allowed"))
        ),
        "{got:?}"
    );
    // Review 26 V8: "pinned" meant one golden block. The party copies block 2 alone from the
    // golden set whose first block says the GPUs are in another mode: block 2 matches, and the
    // box passed as pinned. A policy pinning some blocks must pin every block the reports carry.
    let mut partial = other_mode;
    partial.measurements.retain(|g| g.index == 2);
    assert_eq!(partial.measurements.len(), 1);
    let got = check(Some(partial));
    assert!(
        matches!(
            got,
            Err(JcError::HardwareRefused("measurement_not_allowed"))
        ),
        "a box passed on one pinned GPU block: {got:?}"
    );
}

/// What a box counts as its GPUs at start (review 24b G3): NVIDIA display-class PCI functions
/// in sysfs and the driver's per-GPU nodes in /dev, read from a directory double as the box
/// reads `/`. An NVSwitch (an NVIDIA bridge), another vendor's GPU and the driver's control
/// nodes are not GPUs.
#[test]
fn the_gpus_a_box_sees_are_nvidia_display_functions_and_their_device_nodes() {
    let root = tempfile::tempdir().expect("tempdir");
    assert_eq!(VisibleGpus::under(root.path()).count(), 0, "nothing there");
    let pci = |addr: &str, vendor: &str, class: &str| {
        let dir = root.path().join("sys/bus/pci/devices").join(addr);
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("vendor"), format!("{vendor}\n")).expect("vendor");
        std::fs::write(dir.join("class"), format!("{class}\n")).expect("class");
    };
    pci("0000:00:02.0", "0x8086", "0x030000");
    pci("0000:07:00.0", "0x10de", "0x068000");
    pci("0000:41:00.0", "0x10de", "0x030200");
    let dev = root.path().join("dev");
    std::fs::create_dir_all(dev.join("nvidia-caps")).expect("dev");
    for node in [
        "nvidiactl",
        "nvidia-uvm",
        "nvidia-modeset",
        "nvidia0",
        "nvidia1",
    ] {
        std::fs::write(dev.join(node), b"").expect("node");
    }
    let seen = VisibleGpus::under(root.path());
    assert_eq!(seen.pci, vec!["0000:41:00.0".to_owned()]);
    assert_eq!(seen.nodes, vec!["nvidia0".to_owned(), "nvidia1".to_owned()]);
    assert_eq!(seen.count(), 2);
    assert_eq!(seen.describe(), "PCI 0000:41:00.0");
}
