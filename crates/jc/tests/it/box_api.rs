//! The box through its HTTP API (a real axum server on loopback) with a provider double: the whole
//! flow, and every refusal of the list, each with its own error.

use std::time::Duration;

use crate::support::*;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use skillbox_jc::JcError;
use skillbox_jc::attest::{Attestation, VerifyPolicy, verify_attestation};
use skillbox_jc::client::{StakeInput, new_nonce, open_result, seal_stake, verify_receipt};
use skillbox_jc::dsse::{Envelope, sign_program};
use skillbox_jc::program::{PROGRAM_PAYLOAD_TYPE, Role};
use skillbox_jc::receipt::RunStatus;
use skillbox_jc::run::now_secs;
use skillbox_jc::seal::HpkeKeyPair;
use skillbox_testkit::prompt::{body_of, suffix_of};

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn whole_run_caller_opens_owner_cannot_and_receipt_verifies() {
    let f = start(None).await;
    let p = f.program();
    let (_, run) = f.open(&p).await;
    assert!(run.no_hardware_isolation, "insecure-dev must be flagged");
    f.run_all(&run, "which song first?", "You pick songs.")
        .await;
    let view = f.result(&run).await;
    assert_eq!(view.status, RunStatus::Ok);
    assert!(view.no_hardware_isolation);

    let out = open_result(&view, &f.result_key, &run).expect("caller opens");
    assert!(!out.truncated);
    assert!(out.no_hardware_isolation);
    // The echo double's answer is its prompt: the owner's body then the box's notice, and the
    // request and source in blocks whose tags carry the prompt's own suffix.
    let (system, user) = out
        .answer
        .strip_prefix("SYSTEM[")
        .and_then(|r| r.strip_suffix("] MODEL[hex:736d6f6c6c6d32] KEY[false]"))
        .and_then(|r| r.split_once("] USER["))
        .expect("the echo double's shape");
    let s = suffix_of(user);
    assert_eq!(s.len(), 16, "{user}");
    assert_eq!(
        user,
        format!(
            "<request-{s}>\nwhich song first?\n</request-{s}>\n<source-{s} name=\"spotify_songs\">\nsong a\nsong b\n</source-{s}>\n"
        )
    );
    assert_eq!(body_of(system), "You pick songs.");
    assert!(system.contains(&format!("</source-{s}>")), "{system}");

    // The owner has keys of its own, none of which opens the answer.
    let owner_hpke = HpkeKeyPair::generate();
    assert!(matches!(
        open_result(&view, &owner_hpke, &run),
        Err(JcError::ResultNotForThisKey)
    ));

    let receipt = verify_receipt(&view, &run).expect("receipt verifies with the attested run key");
    // A party restarted mid-run verifies with the stored record of its checked attestation.
    let record = run.to_record();
    let text = serde_json::to_string(&record).expect("record serializes");
    let back = skillbox_jc::attest::VerifiedRun::from_record(
        &serde_json::from_str(&text).expect("record parses"),
    )
    .expect("record restores");
    assert_eq!(back.to_record(), record);
    verify_receipt(&view, &back).expect("the restored run verifies the receipt");
    let mut broken = record.clone();
    broken.receipt_key = "zz".into();
    assert!(skillbox_jc::attest::VerifiedRun::from_record(&broken).is_err());
    assert_eq!(receipt.run_id, run.run_id);
    assert_eq!(receipt.program_hash, run.program_hash.to_hex());
    assert_eq!(receipt.status, RunStatus::Ok);
    assert_eq!(receipt.finished_at % 60, 0);
    // The program's 4 KiB bound, whatever the answer's length (review 23 F1).
    assert_eq!(
        receipt.output_bucket,
        skillbox_jc::seal::answer_padded_len(4096)
    );

    // The same receipt against another run's key is refused.
    let (_, other) = f.open(&f.program()).await;
    assert!(matches!(
        verify_receipt(&view, &other),
        Err(JcError::SignatureMissing { .. } | JcError::BadSignature { .. })
    ));
}

#[tokio::test]
async fn material_never_shows_outside_the_sealed_answer() {
    let f = start(Some("fine answer")).await;
    let (_, run) = f.open(&f.program()).await;
    let secrets = [
        "SECRET-REQUEST-TEXT",
        "SECRET-SONG-LIST",
        "SECRET-SKILL-BODY",
    ];
    caller_stakes(&f, &run, secrets[0], secrets[1].as_bytes()).await;
    f.stake_as_owner(&run, secrets[2]).await.expect("stake");
    // Refusals must not echo material either.
    let again = f.stake_as_owner(&run, secrets[2]).await.expect_err("twice");
    assert_eq!(remote_code(&again), "already_staked");
    f.submit_as(&run, Role::Caller).await.expect("submit");
    f.submit_as(&run, Role::Owner).await.expect("submit");
    f.result(&run).await;
    let http = reqwest::Client::new();
    let mut seen = format!("{again}");
    for path in [
        "/healthz".to_string(),
        format!("/v1/runs/{}", run.run_id),
        format!("/v1/runs/{}/result", run.run_id),
    ] {
        seen.push_str(
            &http
                .get(format!("{}{path}", f.url))
                .send()
                .await
                .expect("get")
                .text()
                .await
                .expect("text"),
        );
    }
    let sealed = STANDARD
        .decode(
            f.client
                .result(&run.run_id)
                .await
                .expect("result")
                .sealed_output
                .expect("sealed"),
        )
        .expect("b64");
    for s in secrets {
        assert!(!seen.contains(s), "{s} leaked into a box response");
        assert!(
            !sealed.windows(s.len()).any(|w| w == s.as_bytes()),
            "{s} visible in the sealed bytes"
        );
    }
}

#[tokio::test]
async fn program_refusals_each_with_its_own_error() {
    let f = start(None).await;
    let p = f.program();
    let bytes = String::from_utf8(p.to_canonical().expect("canonical")).expect("utf-8");

    let post = |text: String, sign_both: bool| {
        let mut env = Envelope::new(PROGRAM_PAYLOAD_TYPE, text.as_bytes());
        env.sign(&f.caller).expect("sign");
        if sign_both {
            env.sign(&f.owner).expect("sign");
        }
        env
    };
    // Non-canonical: a space after the first brace.
    assert_refused(
        f.client
            .open(&post(bytes.replacen('{', "{ ", 1), true))
            .await,
        "program_not_canonical",
    );
    // Duplicate key, same value.
    let dup = bytes.replacen("\"version\":1", "\"version\":1,\"version\":1", 1);
    assert_refused(
        f.client.open(&post(dup, true)).await,
        "program_duplicate_key",
    );
    // One signature missing.
    assert_refused(
        f.client.open(&post(bytes.clone(), false)).await,
        "signature_missing",
    );
    // A signature from a key not in the program (instead of the owner's).
    let mut env = sign_program(&p, &f.caller).expect("sign");
    env.sign(&key(9)).expect("sign");
    assert_refused(f.client.open(&env).await, "signer_not_in_program");
    // Expired.
    let mut old = f.program();
    old.expires_at = now_secs() - 1;
    assert_refused(f.client.open(&f.approve(&old)).await, "program_expired");
    // An older node's program, naming the template from before the blocks' tags carried the
    // box's per-prompt suffix: refused by name, not run under a prompt it did not agree to.
    for template in ["skillbox.prompt/v1", "skillbox.prompt/v3", ""] {
        let mut other = f.program();
        other.prompt_template = template.into();
        assert_refused(
            f.client.open(&f.approve(&other)).await,
            "prompt_template_unknown",
        );
    }
    // This box not listed.
    let mut elsewhere = f.program();
    elsewhere.boxes[0].measurement = "00".repeat(48);
    assert_refused(
        f.client.open(&f.approve(&elsewhere)).await,
        "box_not_listed",
    );
    // A provider this box does not have.
    let mut remote = f.program();
    remote.provider = skillbox_jc::program::ProviderGrant {
        id: "openrouter".parse().expect("id"),
        host: Some("https://openrouter.ai/api/v1".into()),
    };
    remote.owner_inputs.key_max_bytes = 256;
    assert_refused(
        f.client.open(&f.approve(&remote)).await,
        "provider_unavailable",
    );
}

/// The owner checks the attestation the caller's open got for their joint nonce, forwarded,
/// without asking the box (issue 33): it holds for the nonce made of both halves, and an
/// attestation replayed from another open (the caller's own nonce, another owner half, another
/// run) is refused — the owner's fresh half is what makes a forwarded report fresh for it.
#[tokio::test]
async fn a_forwarded_attestation_holds_only_for_the_joint_nonce_of_its_run() {
    let f = start(None).await;
    let env = f.approve(&f.program());
    let approved = skillbox_jc::dsse::approved_program(&env).expect("approved");
    let (caller_half, owner_half) = (new_nonce(), new_nonce());
    let joint = skillbox_jc::client::joint_nonce(&caller_half, &owner_half);
    let run = f
        .client
        .open_attesting_for(&env, joint.clone())
        .await
        .expect("open");
    let (att, asked) = run.attestation().expect("attested");
    assert_eq!(asked, joint);
    let att = att.clone();
    let run_id = run.opened.run_id.clone();
    let verified = f
        .client
        .check_forwarded(&att, &approved, &run_id, &joint, &f.policy)
        .expect("the owner verifies the forwarded report");
    assert_eq!(verified.run_id, run_id);

    let refused = |nonce: &str, run: &str| {
        f.client
            .check_forwarded(&att, &approved, run, nonce, &f.policy)
            .expect_err("refused")
    };
    // Replayed for another owner half, or passed off as the caller's own nonce.
    for nonce in [
        skillbox_jc::client::joint_nonce(&caller_half, &new_nonce()),
        caller_half.clone(),
        owner_half.clone(),
    ] {
        let e = refused(&nonce, &run_id);
        assert!(matches!(e, JcError::NonceMismatch), "{e:?}");
    }
    // Another run's report is not this run's.
    let other = f.client.open(&f.approve(&f.program())).await.expect("open");
    let e = refused(&joint, &other.run_id);
    assert!(matches!(e, JcError::StatementRunMismatch { .. }), "{e:?}");
}

/// An open that sends a nonce is answered with the run's attestation for that nonce, one round
/// trip sooner (issue 33), checked as a fetched one is; an open without one is answered as
/// before, with the open alone.
#[tokio::test]
async fn an_open_with_a_nonce_is_answered_with_the_runs_attestation_for_it() {
    let f = start(None).await;
    let env = f.approve(&f.program());
    let approved = skillbox_jc::dsse::approved_program(&env).expect("approved");
    let run = f.client.open_attesting(&env).await.expect("open");
    assert!(run.attested(), "the box answered without the attestation");
    let run_id = run.opened.run_id.clone();
    let verified = f
        .client
        .attest_opened(&approved, run, &f.policy)
        .await
        .expect("verifies");
    assert_eq!(verified.run_id, run_id);

    // On the wire: the attestation answers that nonce and no other.
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let post = |env: &Envelope, query: &str| {
        http.post(format!("{}/v1/runs{query}", f.url))
            .header("content-type", "application/json")
            .body(env.to_json())
            .send()
    };
    let env2 = f.approve(&f.program());
    let approved2 = skillbox_jc::dsse::approved_program(&env2).expect("approved");
    let nonce = new_nonce();
    let reply: serde_json::Value = post(&env2, &format!("?nonce={nonce}"))
        .await
        .expect("open")
        .json()
        .await
        .expect("json");
    let run2 = reply["run_id"].as_str().expect("run id").to_owned();
    let att: Attestation =
        serde_json::from_value(reply["attestation"].clone()).expect("an attestation");
    let now = now_secs();
    verify_attestation(&att, &approved2, &run2, &nonce, &f.policy, now).expect("verifies");
    let e = verify_attestation(&att, &approved2, &run2, &new_nonce(), &f.policy, now)
        .expect_err("another nonce");
    assert!(matches!(e, JcError::NonceMismatch), "{e:?}");

    let env3 = f.approve(&f.program());
    let plain: serde_json::Value = post(&env3, "")
        .await
        .expect("open")
        .json()
        .await
        .expect("json");
    assert!(plain["run_id"].is_string(), "{plain}");
    assert!(plain.get("attestation").is_none(), "{plain}");
}

#[tokio::test]
async fn attestation_checks_on_the_client() {
    let f = start(None).await;
    let p = f.program();
    let Attested {
        approved,
        run_id,
        nonce,
        attestation: att,
    } = f.open_attested(&p).await;
    let now = now_secs();
    let ok =
        verify_attestation(&att, &approved, &run_id, &nonce, &f.policy, now).expect("verifies");
    assert_eq!(ok.measurement, MEASUREMENT);

    // Nonce mismatch (a replayed attestation for an older question).
    let e = verify_attestation(&att, &approved, &run_id, &new_nonce(), &f.policy, now)
        .expect_err("nonce");
    assert!(matches!(e, JcError::NonceMismatch), "{e:?}");
    // Statement for another program: a second run's attestation checked against the first program.
    let p2 = f.program();
    let env2 = f.approve(&p2);
    let opened2 = f.client.open(&env2).await.expect("open 2");
    let att2 = f
        .client
        .attestation(&opened2.run_id, &nonce)
        .await
        .expect("attestation 2");
    let e = verify_attestation(&att2, &approved, &opened2.run_id, &nonce, &f.policy, now)
        .expect_err("other program");
    assert!(
        matches!(e, JcError::StatementProgramMismatch { .. }),
        "{e:?}"
    );
    // Statement for another run of... the right program is impossible (a program runs once), so
    // the run id check: the right attestation presented for another run id.
    let e = verify_attestation(&att, &approved, &opened2.run_id, &nonce, &f.policy, now)
        .expect_err("other run");
    assert!(matches!(e, JcError::StatementRunMismatch { .. }), "{e:?}");
    // Swapped HPKE key: someone in the middle replaces the run key with their own.
    let mut swapped = att.clone();
    let stmt = String::from_utf8(STANDARD.decode(&att.statement).expect("b64")).expect("utf-8");
    let run_hpke = {
        let v: serde_json::Value = serde_json::from_str(&stmt).expect("json");
        v["hpke_public_key"].as_str().expect("key").to_owned()
    };
    let attacker = HpkeKeyPair::generate().public_hex();
    swapped.statement = STANDARD.encode(stmt.replace(&run_hpke, &attacker));
    let e = verify_attestation(&swapped, &approved, &run_id, &nonce, &f.policy, now)
        .expect_err("swapped key");
    assert!(matches!(e, JcError::ReportDataMismatch), "{e:?}");
    // ... and re-computing the report data does not help: the evidence signature fails.
    let mut resigned = swapped.clone();
    let new_rd =
        skillbox_jc::attest::report_data(&STANDARD.decode(&swapped.statement).expect("b64"));
    resigned.evidence["report_data"] = hex::encode(new_rd).into();
    let e = verify_attestation(&resigned, &approved, &run_id, &nonce, &f.policy, now)
        .expect_err("resigned");
    assert!(matches!(e, JcError::Evidence(_)), "{e:?}");
    // Dev attestation not allowed by this node's config.
    let strict = VerifyPolicy::new(false);
    let e = verify_attestation(&att, &approved, &run_id, &nonce, &strict, now)
        .expect_err("not allowed");
    assert!(matches!(e, JcError::DevAttestationNotAllowed), "{e:?}");
    // Dev attestation allowed by config but not listed by the program.
    let mut unlisted = approved.clone();
    unlisted.program.boxes[0].platform = "sev-snp".into();
    let e = verify_attestation(&att, &unlisted, &run_id, &nonce, &f.policy, now)
        .expect_err("not listed");
    assert!(matches!(e, JcError::BoxNotListed { .. }), "{e:?}");
    // Expired attestation.
    let e = verify_attestation(&att, &approved, &run_id, &nonce, &f.policy, now + 10_000)
        .expect_err("expired");
    assert!(matches!(e, JcError::AttestationExpired { .. }), "{e:?}");
    // Unknown platform.
    let other = Attestation {
        platform: "tdx".into(),
        ..att.clone()
    };
    let e = verify_attestation(&other, &approved, &run_id, &nonce, &f.policy, now)
        .expect_err("platform");
    assert!(matches!(e, JcError::PlatformNotAllowed(_)), "{e:?}");
    // The box refuses a nonce that is not one.
    assert_refused(f.client.attestation(&run_id, "short").await, "bad_request");
}

/// The box's evidence key is decoded once and kept (issue 33): after a good attestation put
/// it in the kept keys, the same key with a signature changed by one bit, another key's bytes
/// beside the box's signature, and bytes that are no point are each still refused.
#[tokio::test]
async fn a_kept_evidence_key_still_has_every_attestation_checked_in_full() {
    let f = start(None).await;
    let Attested {
        approved,
        run_id,
        nonce,
        attestation: att,
    } = f.open_attested(&f.program()).await;
    let now = now_secs();
    verify_attestation(&att, &approved, &run_id, &nonce, &f.policy, now).expect("verifies");
    let evidence = |field: &str, value: String| {
        let mut a = att.clone();
        a.evidence[field] = value.into();
        a
    };

    let sig = att.evidence["signature"]
        .as_str()
        .expect("signature")
        .to_owned();
    let mut bits = hex::decode(&sig).expect("hex");
    bits[17] ^= 0x01;
    let e = verify_attestation(
        &evidence("signature", hex::encode(&bits)),
        &approved,
        &run_id,
        &nonce,
        &f.policy,
        now,
    )
    .expect_err("a changed signature under the kept key");
    assert!(
        matches!(&e, JcError::Evidence(m) if m.contains("does not verify")),
        "{e:?}"
    );

    let other = ed25519_dalek::SigningKey::from_bytes(&[7; 32]).verifying_key();
    let e = verify_attestation(
        &evidence("key", hex::encode(other.to_bytes())),
        &approved,
        &run_id,
        &nonce,
        &f.policy,
        now,
    )
    .expect_err("another key beside the box's signature");
    assert!(
        matches!(&e, JcError::Evidence(m) if m.contains("does not verify")),
        "{e:?}"
    );

    // 32 bytes that decode to no point: about half of all y have no x on the curve.
    let no_point = (2u8..=255)
        .map(|y| {
            let mut b = [0u8; 32];
            b[0] = y;
            b
        })
        .find(|b| ed25519_dalek::VerifyingKey::from_bytes(b).is_err())
        .expect("a y with no point");
    let e = verify_attestation(
        &evidence("key", hex::encode(no_point)),
        &approved,
        &run_id,
        &nonce,
        &f.policy,
        now,
    )
    .expect_err("no point");
    assert!(
        matches!(&e, JcError::Evidence(m) if m == "dev key"),
        "{e:?}"
    );

    // And the good one still verifies.
    verify_attestation(&att, &approved, &run_id, &nonce, &f.policy, now).expect("verifies again");
}

#[tokio::test]
async fn stake_and_submit_refusals() {
    let f = start(Some("ok")).await;
    let (_, run) = f.open(&f.program()).await;

    // Submit before any stake, then before the second.
    assert_refused(f.submit_as(&run, Role::Caller).await, "stakes_missing");

    // Sealed with the wrong info: the owner's info, posted as the caller's stake.
    let wrong =
        seal_stake(&run, Role::Owner, vec![StakeInput::bytes("request", b"hi")]).expect("seal");
    assert_refused(
        f.client.stake(&run, Role::Caller, wrong, &f.caller).await,
        "stake_wrong_info",
    );

    // Sealed to another run's key (e.g. a swapped key): does not open either.
    let (_, run2) = f.open(&f.program()).await;
    let mut elsewhere = run.clone();
    elsewhere.hpke_public_key = run2.hpke_public_key;
    let sealed = f.caller_stake(&elsewhere, "hi", b"x");
    assert_refused(
        f.client.stake(&run, Role::Caller, sealed, &f.caller).await,
        "stake_wrong_info",
    );

    // Oversize: an entry past its program limit (4096 for spotify_songs).
    let big = vec![b'x'; 5000];
    assert_refused(
        f.stake_as_caller(&run, "hi", &big, &f.caller).await,
        "stake_entry_too_large",
    );
    // Oversize: a sealed body past the role's limit.
    let huge = vec![b'x'; 30_000];
    let sealed = seal_stake(
        &run,
        Role::Caller,
        vec![StakeInput::bytes("request", &huge)],
    )
    .expect("seal");
    // Refused on its declared length, before the body is read.
    assert_refused(
        f.client.stake(&run, Role::Caller, sealed, &f.caller).await,
        "stake_too_large",
    );
    // A name the program does not list.
    let sealed = seal_stake(
        &run,
        Role::Caller,
        vec![
            StakeInput::bytes("request", b"hi"),
            StakeInput::bytes("passwords", b"x"),
        ],
    )
    .expect("seal");
    assert_refused(
        f.client.stake(&run, Role::Caller, sealed, &f.caller).await,
        "stake_entry_not_in_program",
    );
    // A stake signed by the wrong party.
    assert_refused(
        f.stake_as_caller(&run, "hi", b"x", &f.owner).await,
        "signature_missing",
    );

    caller_stakes(&f, &run, "hi", b"x").await;
    assert_refused(f.submit_as(&run, Role::Owner).await, "stakes_missing");
    assert_refused(f.client.result(&run.run_id).await, "not_ready");
}

#[tokio::test]
async fn run_ids_and_programs_are_single_use() {
    let f = start(Some("ok")).await;
    let p = f.program();
    let env = f.approve(&p);
    let (_, run) = f.open(&p).await;
    // Opening the same program again while open is a retry: same run.
    let again = f.client.open(&env).await.expect("retry");
    assert_eq!(again.run_id, run.run_id);
    f.run_all(&run, "q", "b").await;
    f.result(&run).await;
    // Replaying the program after its run: refused.
    assert_refused(f.client.open(&env).await, "program_spent");
    // Submitting again to the finished run.
    assert_refused(f.submit_as(&run, Role::Caller).await, "wrong_state");
    f.client
        .delete(&run.run_id, &run.program_hash, Role::Caller, &f.caller)
        .await
        .expect("delete");
    // The replayed run id: every route refuses it as spent.
    assert_refused(
        f.stake_as_caller(&run, "q", b"x", &f.caller).await,
        "run_spent",
    );
    assert_refused(
        f.client.attestation(&run.run_id, &new_nonce()).await,
        "run_spent",
    );
    assert_refused(f.client.result(&run.run_id).await, "run_spent");
    assert_refused(f.client.status(&"0123".repeat(8)).await, "run_not_found");
    // A malformed id never leaves the client.
    let e = f.client.status("0123").await.expect_err("malformed");
    assert_eq!(e.code(), "bad_run_id");
}

#[tokio::test]
async fn output_over_the_cap_is_truncated_and_flagged() {
    let long = "é".repeat(5000); // 10,000 bytes, cap 4096: the cut must land on a char boundary
    let f = start(Some(&long)).await;
    let (_, run) = f.open(&f.program()).await;
    f.run_all(&run, "q", "b").await;
    let view = f.result(&run).await;
    let out = open_result(&view, &f.result_key, &run).expect("open");
    assert!(out.truncated);
    assert!(out.answer.len() <= 4096, "{} bytes", out.answer.len());
    assert_eq!(out.answer.len(), 4096);
    assert!(long.starts_with(&out.answer));
    let receipt = verify_receipt(&view, &run).expect("receipt");
    assert_eq!(
        receipt.output_bucket,
        skillbox_jc::seal::answer_padded_len(4096)
    );
}

/// A box that keeps its spent-program list refuses, after a restart, the programs it opened
/// before, and still opens new ones; two boxes cannot share one list.
#[tokio::test]
async fn a_restarted_box_still_refuses_a_program_it_opened() {
    let f = start(Some("ok")).await;
    let dir = tempfile::tempdir().expect("dir");
    let list = dir.path().join("box").join("spent-programs");
    let echo = || -> std::sync::Arc<dyn skillbox_providers::Provider> {
        std::sync::Arc::new(EchoProvider { fixed: None })
    };
    let now = now_secs();
    let (one, two) = (f.approve(&f.program()), f.approve(&f.program()));
    let core = core_with(echo(), skillbox_jc::run::BoxConfig::default())
        .with_spent_log(&list, now)
        .expect("list");
    core.open(&one, now).expect("first open");
    core.open(&two, now).expect("first open");
    let e = core_with(echo(), skillbox_jc::run::BoxConfig::default())
        .with_spent_log(&list, now)
        .err()
        .expect("a second box on the same list is refused");
    assert_eq!(e.code(), "storage_failed");
    drop(core);
    let restarted = core_with(echo(), skillbox_jc::run::BoxConfig::default())
        .with_spent_log(&list, now)
        .expect("list");
    for env in [&one, &two] {
        let e = restarted.open(env, now).expect_err("replay after restart");
        assert!(matches!(e, JcError::ProgramSpent(_)), "{e}");
    }
    restarted
        .open(&f.approve(&f.program()), now)
        .expect("a new program opens");
    // Without a list (in memory) the same replay is possible: the list is what refuses it.
    let forgetful = core_with(echo(), skillbox_jc::run::BoxConfig::default());
    forgetful
        .open(&one, now)
        .expect("an in-memory box has forgotten");
}

/// A node asks once per step: the box holds a submit until the other party's stake is there,
/// and a result request until the run finished (each bounded by its `wait_ms`).
#[tokio::test]
async fn submit_and_result_wait_at_the_box_instead_of_being_polled() {
    let f = std::sync::Arc::new(start(Some("held")).await);
    let (_, run) = f.open(&f.program()).await;
    caller_stakes(&f, &run, "q", b"song a").await;
    // Without a wait: refused at once, as before.
    assert_refused(f.submit_as(&run, Role::Caller).await, "stakes_missing");
    // A result asked with a short wait comes back not ready once the wait is over.
    let asked = std::time::Instant::now();
    assert_refused(
        f.client
            .send_result_once(&run.run_id, Duration::from_millis(150))
            .await,
        "not_ready",
    );
    assert!(
        asked.elapsed() >= Duration::from_millis(150),
        "held for its wait"
    );
    // The caller's submit and a result request wait at the box; the owner stakes and submits.
    let (g, r) = (f.clone(), run.clone());
    let submit = tokio::spawn(async move {
        g.client
            .submit_waiting(&r.run_id, &r.program_hash, Role::Caller, &g.caller, WAIT)
            .await
    });
    let (g, r) = (f.clone(), run.clone());
    let result = tokio::spawn(async move { g.client.send_result_once(&r.run_id, WAIT).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !submit.is_finished() && !result.is_finished(),
        "both are held"
    );
    f.stake_as_owner(&run, "b").await.expect("owner stakes");
    let started_by_caller = submit.await.expect("task").expect("held submit succeeds");
    assert!(!started_by_caller, "the caller's submit was the first");
    assert!(f.submit_as(&run, Role::Owner).await.expect("owner submits"));
    let view = result.await.expect("task").expect("held result answers");
    assert_eq!(view.status, RunStatus::Ok);
}

/// A party's submit sent with its stake (`skillbox-submit-action`): taken with the stake, it
/// is that party's go, and the run starts once both stakes are in and both parties went —
/// never earlier, and a submit of the other party's own is still refused before its stake.
#[tokio::test]
async fn a_submit_sent_with_a_stake_is_the_partys_go_once_both_stakes_are_in() {
    use skillbox_jc::run::Phase;
    let f = start(Some("ok")).await;
    let (_, run) = f.open(&f.program()).await;
    // A stake the box refuses takes its submit with it: the go counts only with the stake.
    let wrong =
        seal_stake(&run, Role::Owner, vec![StakeInput::bytes("request", b"hi")]).expect("seal");
    assert_refused(
        f.stake_and_submit_as(&run, Role::Caller, wrong)
            .await
            .map(|s| s.submitted),
        "stake_wrong_info",
    );
    let view = f.client.status(&run.run_id).await.expect("status");
    assert!(
        view.staked.is_empty() && view.submitted.is_empty(),
        "{view:?}"
    );
    let sealed = f.caller_stake(&run, "hi", b"x");
    let staked = f
        .stake_and_submit_as(&run, Role::Caller, sealed)
        .await
        .expect("stake with submit");
    assert!(staked.submitted, "the box took the caller's submit");
    let view = f.client.status(&run.run_id).await.expect("status");
    assert_eq!(
        (view.state, view.staked, view.submitted),
        (Phase::Open, vec![Role::Caller], vec![Role::Caller])
    );
    assert_refused(f.submit_as(&run, Role::Owner).await, "stakes_missing");
    f.stake_as_owner(&run, "BODY").await.expect("owner stakes");
    let view = f.client.status(&run.run_id).await.expect("status");
    assert_eq!(view.state, Phase::Open, "the owner has not gone yet");
    assert!(
        f.submit_as(&run, Role::Owner).await.expect("owner submits"),
        "the owner's submit is the second: it starts the run"
    );
    assert_eq!(f.result(&run).await.status, RunStatus::Ok);

    // Both with their stakes: the second stake starts the run, no submit request at all.
    let (_, run) = f.open(&f.program()).await;
    let owner = f.owner_stake(&run, "BODY");
    let first = f
        .stake_and_submit_as(&run, Role::Owner, owner)
        .await
        .expect("owner");
    assert!(first.submitted);
    let caller = f.caller_stake(&run, "hi", b"x");
    f.stake_and_submit_as(&run, Role::Caller, caller)
        .await
        .expect("caller");
    assert_eq!(f.result(&run).await.status, RunStatus::Ok);
}

/// The go sent with a stake is the staking party's own, for this run: another party's submit
/// (captured on the path, say) or one for another run is refused, and with it the stake —
/// nothing of either is taken.
#[tokio::test]
async fn a_stake_carries_only_its_own_partys_submit_for_its_run() {
    use sha2::{Digest, Sha256};
    use skillbox_jc::dsse::{PartyAction, sign_action};
    use skillbox_jc::server::{STAKE_ACTION_HEADER, SUBMIT_ACTION_HEADER};
    let f = start(Some("ok")).await;
    let (_, run) = f.open(&f.program()).await;
    let (_, other_run) = f.open(&f.program()).await;
    let action = |kind: &str, run_id: &str, role: Role, digest: Option<String>, key| {
        let env = sign_action(
            &PartyAction {
                action: kind.into(),
                role,
                run_id: run_id.into(),
                program_hash: run.program_hash.to_hex(),
                stake_sha256: digest,
            },
            key,
        )
        .expect("signs");
        STANDARD.encode(env.to_json())
    };
    let http = reqwest::Client::new();
    let stake_with = |go: String| {
        let sealed = f.caller_stake(&run, "hi", b"x");
        let digest = hex::encode(Sha256::digest(&sealed));
        let stake = action("stake", &run.run_id, Role::Caller, Some(digest), &f.caller);
        http.post(format!("{}/v1/runs/{}/stakes", f.url, run.run_id))
            .header("content-type", "application/octet-stream")
            .header(STAKE_ACTION_HEADER, stake)
            .header(SUBMIT_ACTION_HEADER, go)
            .body(sealed)
            .send()
    };
    let refusals = [
        // The owner's go, as the path saw it, on the caller's stake.
        (
            action("submit", &run.run_id, Role::Owner, None, &f.owner),
            "envelope_invalid",
        ),
        // The caller's go for another run.
        (
            action("submit", &other_run.run_id, Role::Caller, None, &f.caller),
            "envelope_invalid",
        ),
        // A stake action where the submit goes.
        (
            action("stake", &run.run_id, Role::Caller, None, &f.caller),
            "envelope_invalid",
        ),
        // Signed as the caller by the owner's key.
        (
            action("submit", &run.run_id, Role::Caller, None, &f.owner),
            "signature_missing",
        ),
        ("not base64!".to_owned(), "bad_request"),
    ];
    for (go, code) in refusals {
        let answer = stake_with(go).await.expect("answered");
        assert!(answer.status().is_client_error(), "{code}: {answer:?}");
        let body: serde_json::Value = answer.json().await.expect("json");
        assert_eq!(body["error"], code, "{body}");
        let view = f.client.status(&run.run_id).await.expect("status");
        assert!(
            view.staked.is_empty() && view.submitted.is_empty(),
            "{code}: something was taken: {view:?}"
        );
    }
    // Its own go for its run is taken.
    let go = action("submit", &run.run_id, Role::Caller, None, &f.caller);
    let answer = stake_with(go).await.expect("answered");
    assert!(answer.status().is_success(), "{answer:?}");
    let view = f.client.status(&run.run_id).await.expect("status");
    assert_eq!(
        (view.staked, view.submitted),
        (vec![Role::Caller], vec![Role::Caller])
    );
}
