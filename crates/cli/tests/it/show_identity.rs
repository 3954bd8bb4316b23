//! `skillbox box --attester … --show-identity` (issue 31 item 6) prints, on every hardware
//! platform, a `[[boxes.pins]]` entry the node's config takes as it is: SEV-SNP by its
//! MEASUREMENT, TDX with the `policy = { accepted = [...] }` table its pin needs (MRTD and
//! RTMR0–3 of the TD), each naming the configuration hash the host must launch the guest with
//! (SEV-SNP `host_data`, TDX `mr_config_id`), which a box launched otherwise refuses to start
//! on (issue 31 item 4). The box runs against a configfs-tsm directory double holding real evidence
//! (the jc crate's vectors: virtee's Milan report, dcap-qvl's TDX sample quote). Each pin names
//! the TCB floor of that evidence, and the printed pin, read back as a node reads it, accepts
//! the evidence it was printed from.

use std::path::{Path, PathBuf};
use std::process::Output;

use skillbox_attest::{Hex, Refusal, snp, tdx};
use skillbox_jc::hardware::HardwarePolicy;
use skillbox_testkit::floors::{DCAPQVL_TDX_EVAL, virtee_snp_floor};

use crate::support::procs;

/// 2025-01-01, inside the virtee report's certificate window.
const T_2025: u64 = 1_735_689_600_000;
/// Inside dcap-qvl's TDX sample collateral window.
const T_TDX: u64 = 1_751_000_000_000;

fn jc_data(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/../jc/tests/data/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("data")
}

/// A configfs-tsm double: the report entry with its provider and the blobs it "generates".
fn double(root: &Path, provider: &str, outblob: &[u8], auxblob: Option<&[u8]>) {
    let entry = root.join(skillbox_jc::tsm::ENTRY);
    std::fs::create_dir_all(&entry).expect("entry");
    std::fs::write(entry.join("provider"), format!("{provider}\n")).expect("provider");
    std::fs::write(entry.join("outblob"), outblob).expect("outblob");
    if let Some(aux) = auxblob {
        std::fs::write(entry.join("auxblob"), aux).expect("auxblob");
    }
}

/// The variable a debug `skillbox box` reads for the root it looks for NVIDIA GPUs under instead
/// of `/` (`box_cmd::system_root`; a release build never reads it).
const SYSTEM_ROOT_SEAM: &str = "SKILLBOX_DEBUG_SYSTEM_ROOT";

/// `skillbox ARGS` in `dir` (a box) looking for GPUs under `system`, not `/`: a developer
/// machine's own NVIDIA GPU would refuse every hardware box these tests start without evidence.
fn box_cli(dir: &Path, system: &Path, args: &[&str]) -> Output {
    std::fs::create_dir_all(system).expect("system root");
    let system = system.to_str().expect("path");
    procs::skillbox_with(dir, args, &[(SYSTEM_ROOT_SEAM, system)], None)
}

/// An NVIDIA H100-class PCI function `0000:4N:00.0` in the sysfs double under `root`.
fn gpu_double(root: &Path, n: u8) {
    let f = root.join(format!("sys/bus/pci/devices/0000:4{n}:00.0"));
    std::fs::create_dir_all(&f).expect("dir");
    std::fs::write(f.join("vendor"), "0x10de\n").expect("vendor");
    std::fs::write(f.join("class"), "0x030200\n").expect("class");
}

/// Run a box with `attester` on the configfs-tsm double at `tsm` and its evidence flag, with
/// `--show-identity`; the pin it printed, read back by the node's config parser
/// with the box's placeholder name filled in.
fn shown_pin(
    dir: &Path,
    attester: &str,
    tsm: &Path,
    (flag, file): (&str, &Path),
) -> (skillbox_node::config::BoxPin, String) {
    let (tsm, file) = (path(tsm), path(file));
    let all = [
        "box",
        "--attester",
        attester,
        "--tsm-dir",
        &tsm,
        flag,
        &file,
        "--listen",
        "127.0.0.1:7480",
        "--show-identity",
    ];
    let system = dir.join("system");
    let shown = box_cli(dir, &system, &all);
    assert!(shown.status.success(), "{}", procs::text(&shown));
    let printed = String::from_utf8(shown.stdout)
        .expect("utf-8 output")
        .replace("<this box's name>", "box.example");
    let pin = pin_in_config(&printed, "https://box.example:7480");
    assert!(pin.hardware_policy().expect("policy").is_some());
    // The launch value the host must set, named above the pin; the double's genuine report
    // was launched with zeros, so this box would not start.
    let launch = printed
        .lines()
        .find_map(|l| l.split_once(" = ").filter(|_| l.starts_with("# the box's")))
        .map(|(_, v)| v.to_owned())
        .unwrap_or_else(|| panic!("no launch value: {printed}"));
    assert!(printed.contains("the box will not start"), "{printed}");
    // Without --show-identity the box refuses to start, naming the value.
    let serve = box_cli(dir, &system, &all[..all.len() - 1]);
    assert!(!serve.status.success());
    assert!(
        procs::text(&serve).contains(&launch),
        "{}",
        procs::text(&serve)
    );
    (pin, launch)
}

/// The pin `--show-identity` printed, read back by the node's config parser as is, appended to
/// a config that accepts the box at `url`.
pub(crate) fn pin_in_config(printed: &str, url: &str) -> skillbox_node::config::BoxPin {
    let mut base = skillbox_node::Config::default();
    base.boxes.accept = vec![url.to_owned()];
    let text = format!("{}\n{printed}", base.render());
    let config = skillbox_node::Config::parse(&text, Path::new("config.toml"))
        .unwrap_or_else(|e| panic!("the printed pin is not valid config: {e}\n{printed}"));
    config.boxes.pins[0].clone()
}

#[test]
fn a_tdx_box_prints_a_pin_with_its_policy_table() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tsm = dir.path().join("tsm");
    double(&tsm, "tdx_guest", &jc_data("tdx/dcapqvl-tdx_quote"), None);
    let collateral = dir.path().join("collateral.json");
    std::fs::write(
        &collateral,
        jc_data("tdx/dcapqvl-tdx_quote_collateral.json"),
    )
    .expect("write");
    let (pin, launch) = shown_pin(dir.path(), "tdx", &tsm, ("--tdx-collateral", &collateral));
    assert_eq!(pin.platform, "tdx");
    // Named by its box identity (MRTD, RTMR1, RTMR2); the policy pins the registers it hashes.
    assert_eq!(
        pin.measurements,
        [skillbox_testkit::floors::DCAPQVL_TDX_IDENTITY],
        "{pin:?}"
    );
    let accepted = &pin.policy.as_ref().expect("policy")["accepted"][0];
    assert_eq!(
        accepted["mr_td"].as_str(),
        Some(skillbox_testkit::floors::DCAPQVL_TDX_MR_TD)
    );
    for r in ["rtmr0", "rtmr1", "rtmr2", "rtmr3"] {
        assert_eq!(accepted[r].as_str().map(str::len), Some(96), "{r}: {pin:?}");
    }
    // MRCONFIGID: the configuration hash, then 16 zero bytes.
    assert_eq!(accepted["mr_config_id"].as_str(), Some(launch.as_str()));
    assert!(
        launch.len() == 96 && launch.ends_with(&"00".repeat(16)),
        "{launch}"
    );
    // The collateral floor: the evaluation data number of the collateral the box serves.
    assert_eq!(
        serde_json::to_value(&pin.policy.as_ref().expect("policy")["min_tcb_eval_data_number"])
            .expect("json"),
        serde_json::json!(DCAPQVL_TDX_EVAL),
        "{pin:?}"
    );
    // Fed back as a node reads it, at the collateral's time: everything holds, the floor
    // included, up to MRCONFIGID — the genuine quote was launched with zeros, not this box's
    // configuration hash; with that launch value the printed pin accepts the quote.
    let Some(HardwarePolicy::Tdx(mut printed)) = pin.hardware_policy().expect("policy") else {
        panic!("a TDX policy: {pin:?}")
    };
    let ev = tdx::Evidence::from_files(
        &jc_data("tdx/dcapqvl-tdx_quote"),
        &jc_data("tdx/dcapqvl-tdx_quote_collateral.json"),
    )
    .expect("the sample parses");
    let expected = tdx::Expected::default();
    assert_eq!(
        tdx::verify(&ev, &expected, &printed, T_TDX).map(|v| v.measurement),
        Err(Refusal::MeasurementNotAllowed("MRCONFIGID"))
    );
    printed.accepted[0].mr_config_id = Some(Hex([0; 48]));
    tdx::verify(&ev, &expected, &printed, T_TDX).expect("the printed pin accepts its quote");
}

/// An SEV-SNP configfs-tsm double under `dir` holding virtee's Milan report and VCEK, and the
/// certificate chain file `--snp-certs` takes: the report, the VCEK, the double and the chain.
fn snp_double(dir: &Path) -> (Vec<u8>, Vec<u8>, PathBuf, PathBuf) {
    let tsm = dir.join("tsm");
    let report = hex::decode(
        String::from_utf8(jc_data("sev-snp/virtee-report_milan.hex"))
            .expect("utf-8")
            .trim(),
    )
    .expect("hex");
    let vcek = jc_data("sev-snp/virtee-vcek_milan.der");
    // The certificate table configfs-tsm gives: one entry (the VCEK), then the all-zero end.
    let mut table = vec![0x8d; 16];
    table.extend_from_slice(&48u32.to_le_bytes());
    table.extend_from_slice(&(vcek.len() as u32).to_le_bytes());
    table.extend_from_slice(&[0u8; 24]);
    table.extend_from_slice(&vcek);
    double(&tsm, "sev_guest", &report, Some(&table));
    let chain = dir.join("chain.pem");
    std::fs::write(&chain, jc_data("sev-snp/virtee-cert_chain_milan.pem")).expect("write");
    (report, vcek, tsm, chain)
}

fn path(p: &Path) -> String {
    p.to_str().expect("path").to_owned()
}

/// `skillbox box --attester sev-snp` in `dir` on [`snp_double`]'s configfs-tsm double and
/// certificate chain, looking for GPUs under `system`, with `extra` flags.
fn snp_box(dir: &Path, (tsm, chain): (&Path, &Path), system: &Path, extra: &[&str]) -> Output {
    let (tsm, chain) = (path(tsm), path(chain));
    let mut args = vec![
        "box",
        "--attester",
        "sev-snp",
        "--tsm-dir",
        &tsm,
        "--snp-certs",
        &chain,
        "--listen",
        "127.0.0.1:7480",
    ];
    args.extend_from_slice(extra);
    box_cli(dir, system, &args)
}

#[test]
fn an_sev_snp_box_prints_a_pin_of_its_measurement() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (report, vcek, tsm, chain) = snp_double(dir.path());
    let (pin, launch) = shown_pin(dir.path(), "sev-snp", &tsm, ("--snp-certs", &chain));
    assert_eq!(pin.platform, "sev-snp");
    assert_eq!(pin.measurements.len(), 1);
    assert_eq!(pin.measurements[0].len(), 96);
    let policy = pin.policy.as_ref().expect("policy");
    assert_eq!(
        policy["measurements"][0].as_str(),
        Some(pin.measurements[0].as_str())
    );
    // HOST_DATA: the configuration hash.
    assert_eq!(policy["host_data"][0].as_str(), Some(launch.as_str()));
    assert_eq!(launch.len(), 64);
    // The TCB floor: the reported TCB of the report the box read.
    let printed_floor = serde_json::to_value(&policy["min_tcb"]).expect("json");
    assert_eq!(printed_floor, virtee_snp_floor()["min_tcb"], "{policy}");
    // Fed back as a node reads it, at the certificates' time: everything holds, the floor
    // included, up to HOST_DATA — the genuine report was launched with zeros, not this box's
    // configuration hash; with that launch value the printed pin accepts the report.
    let Some(HardwarePolicy::SevSnp(mut printed)) = pin.hardware_policy().expect("policy") else {
        panic!("an SEV-SNP policy: {pin:?}")
    };
    let pem = jc_data("sev-snp/virtee-cert_chain_milan.pem");
    let ev = snp::Evidence::from_files(&report, &[&vcek, &pem]).expect("the vector parses");
    let expected = snp::Expected::default();
    assert_eq!(
        snp::verify(&ev, &expected, &printed, T_2025).map(|v| v.measurement),
        Err(Refusal::MeasurementNotAllowed("HOST_DATA"))
    );
    printed.host_data = vec![Hex([0; 32])];
    snp::verify(&ev, &expected, &printed, T_2025).expect("the printed pin accepts its report");
}

/// Review 24b G3: a host that passes a GPU into the confidential VM of a box started without
/// `--gpu-evidence-cmd` had the box attest `gpus = 0` (its evidence naming no GPU) while a CUDA
/// build may still compute on that GPU, through buffers the host reads unless the GPU is in CC
/// mode. The box now looks for NVIDIA GPUs at start — here in a sysfs double (`--gpu-root`)
/// holding one H100-class function — and neither prints its pin nor starts, naming the flag.
/// With a collector whose evidence covers the GPUs it goes on; a collector naming fewer GPUs
/// than the machine shows is refused too.
#[test]
fn a_hardware_box_that_sees_a_gpu_it_does_not_attest_does_not_start() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, _, tsm, chain) = snp_double(dir.path());
    let gpu_root = dir.path().join("gpus");
    let gpu = |n: u8| gpu_double(&gpu_root, n);
    gpu(1);
    let system = dir.path().join("system");
    let collector = dir.path().join("collect");
    let sample = format!(
        "{}/../attest/tests/data/nvidia/nvat-multi_gpu_hopper.json",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::write(&collector, format!("#!/bin/sh\ncat '{sample}'\n")).expect("write");
    std::fs::set_permissions(&collector, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let (gpu_dir, collector) = (path(&gpu_root), path(&collector));
    let box_args = |extra: &[&str]| {
        let mut args = vec!["--gpu-root", &gpu_dir];
        args.extend_from_slice(extra);
        snp_box(dir.path(), (&tsm, &chain), &system, &args)
    };
    let refused = |out: &std::process::Output, says: &str| {
        assert!(!out.status.success(), "{}", procs::text(out));
        let text = procs::text(out);
        assert!(
            text.contains(says) && text.contains("PCI 0000:41:00.0"),
            "{text}"
        );
    };
    for extra in [&["--show-identity"][..], &[]] {
        refused(&box_args(extra), "started without --gpu-evidence-cmd");
    }
    let out = box_args(&["--gpu-evidence-cmd", &collector, "--show-identity"]);
    assert!(out.status.success(), "{}", procs::text(&out));
    assert!(procs::text(&out).contains("[[boxes.pins]]"));
    // Five GPUs on the machine, evidence for four.
    (2..=5).for_each(gpu);
    let out = box_args(&["--gpu-evidence-cmd", &collector, "--show-identity"]);
    refused(&out, "gave evidence for 4");
}

/// The test seam replaces the root a debug box looks for GPUs under, not the look: told that the
/// system is a root holding a GPU, and given no evidence, the box neither prints its pin nor
/// starts. A release build does not read the seam: it looks at `/` (which may hold GPUs of its
/// own, but never the double's).
#[test]
fn a_box_whose_system_root_holds_a_gpu_it_does_not_attest_does_not_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, _, tsm, chain) = snp_double(dir.path());
    let system = dir.path().join("system");
    gpu_double(&system, 1);
    // Printing the pin, then serving (which the double's launch value refuses after the look).
    for extra in [&["--show-identity"][..], &[]] {
        let out = snp_box(dir.path(), (&tsm, &chain), &system, extra);
        let text = procs::text(&out);
        if cfg!(debug_assertions) {
            assert!(!out.status.success(), "{text}");
            assert!(
                text.contains("started without --gpu-evidence-cmd")
                    && text.contains("PCI 0000:41:00.0"),
                "{text}"
            );
        } else {
            assert!(
                !text.contains("0000:41:00.0"),
                "a release box read the seam: {text}"
            );
        }
    }
}

/// Outside a Nitro Enclave there is no `/dev/nsm`: the Nitro box says so and does not start
/// (its document path is tested against an NSM double in jc it `nitro`).
#[test]
fn a_nitro_box_outside_an_enclave_is_a_clear_error() {
    if Path::new("/dev/nsm").exists() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    for show in [true, false] {
        let mut args = vec!["box", "--attester", "nitro", "--listen", "127.0.0.1:0"];
        if show {
            args.push("--show-identity");
        }
        let out = procs::cli(dir.path(), &args);
        assert!(!out.status.success());
        assert!(
            procs::text(&out).contains("/dev/nsm"),
            "{}",
            procs::text(&out)
        );
    }
}
