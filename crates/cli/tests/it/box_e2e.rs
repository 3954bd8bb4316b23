//! End to end through a real `skillbox box` process with the embedded model: two parties with
//! their own keys, a program signed by both, stakes from both, the answer opened by the caller
//! only, the receipt verified with the run key from the attestation.
//!
//! Needs the model: `SKILLBOX_MODEL`, else `$HOME/.local/share/skillbox/models/...`; absent, the
//! test fails and says to run `skillbox model fetch`.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use skillbox_jc::JcError;
use skillbox_jc::attest::{VerifyPolicy, measure_file};
use skillbox_jc::client::{StakeInput, open_result, seal_stake, verify_receipt};
use skillbox_jc::dsse::approved_program;
use skillbox_jc::program::*;
use skillbox_jc::receipt::RunStatus;
use skillbox_jc::registry::ProviderView;
use skillbox_jc::run::now_secs;
use skillbox_jc::seal::HpkeKeyPair;
use skillbox_jc::server::Health;
use skillbox_testkit::box_fixture::{Fixture, program_between, remote_code};
use skillbox_testkit::procs::model_path;

/// A running box process, killed when dropped.
struct BoxProcess {
    child: Child,
    url: String,
    _data: tempfile::TempDir,
}

impl Drop for BoxProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_box(model: &std::path::Path) -> BoxProcess {
    let data = tempfile::tempdir().expect("temp dir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_skillbox"))
        .args(["box", "--listen", "127.0.0.1:0", "--insecure-dev"])
        .env("SKILLBOX_DATA_DIR", data.path())
        .env("SKILLBOX_MODEL", model)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn skillbox box");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let first = lines
        .next()
        .expect("box printed a line")
        .expect("readable line");
    let url = first
        .strip_prefix("box listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .to_owned();
    // Keep draining stdout so the box never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines.by_ref() {});
    BoxProcess {
        child,
        url,
        _data: data,
    }
}

/// What the box says of its `local` provider (the embedded model).
fn local_provider(health: &Health) -> &ProviderView {
    health
        .providers
        .iter()
        .find(|p| p.id == "local")
        .expect("local listed")
}

/// A program between the fixture's parties (the caller's result sealed to its result key) for
/// the box of `measurement`: a request and one `travel_notes` source, 160 bytes of answer.
fn program(fx: &Fixture, measurement: &str) -> Program {
    let base = program_between(
        &fx.caller,
        &fx.owner,
        &fx.result_key,
        measurement,
        "capital-cities",
    );
    let mut p = Program {
        call_id: format!("e2e-{}", skillbox_jc::client::new_nonce()),
        skill: SkillRef {
            name: "capital-cities".into(),
            declaration_digest: format!("sha256:{}", "cd".repeat(32)),
        },
        caller_inputs: CallerInputs {
            request_max_bytes: 1024,
            sources: vec![SourceLimit {
                name: "travel_notes".into(),
                max_bytes: 1024,
            }],
        },
        output: OutputSpec::to_caller(160),
        expires_at: now_secs() + 900,
        ..base
    };
    // The body is ~10 tokens; the embedded model reads every prompt padded to the allowance,
    // and the default (1,024) is most of this test's time.
    p.owner_inputs.body_max_tokens = Some(64);
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn box_process_runs_a_call_with_the_local_model() {
    let model = model_path();
    let bx = spawn_box(&model);
    // Two parties, their own keys; the caller also has a result key for this call.
    let fx = Fixture::at(&bx.url);
    let (client, caller, owner) = (&fx.client, &fx.caller, &fx.owner);
    let health = client.health().await.expect("healthz");
    assert_eq!(health.platform, INSECURE_DEV);
    assert!(health.no_hardware_isolation);
    let local = local_provider(&health);
    assert!(local.available, "{local:?}");
    // insecure-dev's measurement is the SHA-384 of the box's own executable.
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_skillbox"));
    assert_eq!(health.measurement, measure_file(&exe).expect("measure"));

    let p = program(&fx, &health.measurement);
    // jc.propose / jc.approve: the caller signs, the owner co-signs the same bytes.
    let env = fx.approve(&p);
    let approved = approved_program(&env).expect("approved by both");

    let opened = client.open(&env).await.expect("jc.open");
    // Each party attests with its own nonce and its own policy (both allow insecure-dev here).
    let policy = &fx.policy;
    let caller_view = client
        .attest(&approved, &opened.run_id, policy)
        .await
        .expect("caller verifies");
    let owner_view = client
        .attest(&approved, &opened.run_id, policy)
        .await
        .expect("owner verifies");
    assert_eq!(caller_view.hpke_public_key, owner_view.hpke_public_key);
    assert!(caller_view.no_hardware_isolation);
    // A node whose config does not allow insecure-dev refuses this box.
    let strict = client
        .attest(&approved, &opened.run_id, &VerifyPolicy::new(false))
        .await
        .expect_err("strict node");
    assert!(
        matches!(strict, JcError::DevAttestationNotAllowed),
        "{strict:?}"
    );

    let request = "What is the capital of France? Answer with the city name.";
    let notes = "I am planning a trip to Europe.";
    let caller_stake = seal_stake(
        &caller_view,
        Role::Caller,
        vec![
            StakeInput::bytes("request", request.as_bytes()),
            StakeInput {
                name: "travel_notes".into(),
                len: notes.len() as u64,
                reader: Box::new(notes.as_bytes()),
            },
        ],
    )
    .expect("caller seals");
    let body = "You answer geography questions in one short sentence.";
    let owner_stake = seal_stake(
        &owner_view,
        Role::Owner,
        vec![
            StakeInput::bytes("body", body.as_bytes()),
            StakeInput::bytes("model", b"smollm2-135m"),
        ],
    )
    .expect("owner seals");

    // jc.submit is refused before both stakes.
    client
        .stake(&caller_view, Role::Caller, caller_stake, caller)
        .await
        .expect("caller stakes");
    let early = client
        .submit(&opened.run_id, &approved.hash, Role::Caller, caller)
        .await
        .expect_err("early submit");
    assert_eq!(remote_code(&early), "stakes_missing");
    client
        .stake(&owner_view, Role::Owner, owner_stake, owner)
        .await
        .expect("owner stakes");
    assert!(
        !client
            .submit(&opened.run_id, &approved.hash, Role::Caller, caller)
            .await
            .expect("caller submits")
    );
    assert!(
        client
            .submit(&opened.run_id, &approved.hash, Role::Owner, owner)
            .await
            .expect("owner submits")
    );

    let view = client
        .wait_result(&opened.run_id, Duration::from_secs(300))
        .await
        .expect("result");
    assert_eq!(view.status, RunStatus::Ok, "{:?}", view.error);

    // The caller opens the answer; the owner's keys cannot.
    let out = open_result(&view, &fx.result_key, &caller_view).expect("caller opens");
    assert!(!out.answer.trim().is_empty(), "the model answered nothing");
    assert!(out.answer.len() <= 160);
    assert!(out.no_hardware_isolation);
    let owner_hpke = HpkeKeyPair::generate();
    assert!(matches!(
        open_result(&view, &owner_hpke, &owner_view),
        Err(JcError::ResultNotForThisKey)
    ));

    // The owner's receipt, verified with the run key from its own attestation.
    let receipt = verify_receipt(&view, &owner_view).expect("receipt verifies");
    assert_eq!(receipt.run_id, opened.run_id);
    assert_eq!(receipt.program_hash, approved.hash.to_hex());
    assert_eq!(receipt.status, RunStatus::Ok);
    assert!(receipt.output_bucket >= 1024);

    // Material never shows in what the box says in the clear.
    let status =
        serde_json::to_string(&client.status(&opened.run_id).await.expect("status")).expect("json");
    for secret in [request, notes, body] {
        assert!(!status.contains(secret));
        assert!(
            !serde_json::to_string(&view.receipt)
                .expect("json")
                .contains(secret)
        );
    }
    client
        .delete(&opened.run_id, &approved.hash, Role::Owner, owner)
        .await
        .expect("done with the run");
    let spent = client.result(&opened.run_id).await.expect_err("spent");
    assert_eq!(remote_code(&spent), "run_spent");
}

#[tokio::test]
async fn box_without_the_model_starts_and_says_local_is_unavailable() {
    let bx = spawn_box(std::path::Path::new("/nonexistent/skillbox-model.gguf"));
    let fx = Fixture::at(&bx.url);
    let health = fx.client.health().await.expect("healthz");
    let local = local_provider(&health);
    assert!(!local.available);
    assert!(
        local
            .reason
            .as_deref()
            .unwrap_or_default()
            .contains("skillbox model fetch"),
        "{local:?}"
    );
    let env = fx.approve(&program(&fx, &health.measurement));
    let e = fx.client.open(&env).await.expect_err("no model");
    assert_eq!(remote_code(&e), "provider_unavailable");
}

#[test]
fn box_without_insecure_dev_refuses_to_start() {
    let out = Command::new(env!("CARGO_BIN_EXE_skillbox"))
        .args(["box", "--listen", "127.0.0.1:0"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--insecure-dev"));
}

#[test]
fn show_identity_prints_a_pin_that_stays_the_same_across_starts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let show = || {
        crate::support::procs::cli_ok(
            dir.path(),
            &[
                "box",
                "--insecure-dev",
                "--listen",
                "127.0.0.1:7499",
                "--show-identity",
            ],
        )
    };
    let first = show();
    assert_eq!(first, show(), "one identity across starts");
    assert!(first.starts_with("[[boxes.pins]]\n"), "{first}");
    assert!(first.contains("url = \"http://127.0.0.1:7499\""), "{first}");
    assert!(first.contains("platform = \"insecure-dev\""), "{first}");
    let key = first
        .lines()
        .find_map(|l| l.strip_prefix("key = \""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("a key line");
    assert_eq!(key.len(), 64);
    assert!(key.bytes().all(|b| b.is_ascii_hexdigit()));
    assert!(dir.path().join("box").join("insecure-dev.key").is_file());
    // What it prints is a pin the node reads back as is, appended to its config.
    let pin = crate::show_identity::pin_in_config(&first, "http://127.0.0.1:7499");
    assert_eq!(pin.key.as_deref(), Some(key));
    assert_eq!(pin.platform, "insecure-dev");
    assert_eq!(pin.url, "http://127.0.0.1:7499");
}

#[test]
fn a_hardware_attester_outside_a_confidential_vm_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_skillbox"))
        .args([
            "box",
            "--attester",
            "sev-snp",
            "--tsm-dir",
            "/nonexistent/tsm/report",
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("sev-snp attester at /nonexistent/tsm/report"),
        "{err}"
    );
}
