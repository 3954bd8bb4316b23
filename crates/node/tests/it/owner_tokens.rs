//! The owner's body allowance and remote model context for a skill (`skill set NAME
//! bodyMaxTokens=N modelContextTokens=N`), with real nodes, a real box and real libp2p: carried
//! in the advert, named by the caller's program, checked by the owner against its own set
//! values, enforced by the box. A self-hosted skill whose server takes 32,768 tokens runs a
//! 20 KB body once its owner says so (24,576 / 32,768; under the defaults, 1,024 / 4,096, it is
//! `unavailable`),
//! and no caller gets a program with any other allowance or context past the owner.

use std::time::Duration;

use serde_json::json;
use skillbox_jc::program::Program;
use skillbox_peers::PayloadKind;
use skillbox_providers::ProviderId;
use skillbox_testkit::skills::self_hosted_skill_doc;

use crate::hostile::{admissible_program, offers_taste};
use crate::support::{self, Answering, ProviderLog, RawPeer, TestNode};

const LIMIT: Duration = Duration::from_secs(30);
/// What the owner sets for its Ollama server's model: 32k of context, 24k of it for the body.
/// The box has no tokenizer, so it admits a remote body of at most as many bytes as the
/// allowance has tokens (a token covers at least one byte): a 20 KB body needs an allowance of
/// 20,000 or more (under 16,384 it would still be `unavailable`).
const BODY_TOKENS: u64 = 24_576;
const CONTEXT_TOKENS: u64 = 32_768;

/// A body of 20,000 bytes: over the self-hosted default allowance (1,024 tokens, so 1 KiB the
/// box can show fits), within the owner's 24,576.
fn body_20_kb() -> String {
    let mut body = String::from("You are a music critic (BODY-OT). Describe the taste.");
    while body.len() < 20_000 {
        body.push_str(" Name the genres, the decades and the moods the history shows.");
    }
    body.truncate(20_000);
    body
}

/// An owner offering `taste` on `ollama` (a double of [`CONTEXT_TOKENS`] tokens on loopback,
/// reached through a real box) with a 20 KB body, and a caller with the offer on its board.
async fn self_hosted_pair() -> (TestNode, TestNode, ProviderLog, String) {
    let (provider_url, provider) =
        support::provider_double_answering(Duration::ZERO, Answering::WithContext(CONTEXT_TOKENS))
            .await;
    let box_url = support::start_box_serving(ProviderId::Ollama, &provider_url).await;
    let owner = TestNode::start(&box_url, vec![], |_| {}).await;
    owner
        .add_skill(&self_hosted_skill_doc("taste", "ollama", &body_20_kb()))
        .await;
    let caller = TestNode::start(&box_url, vec![owner.p2p.clone()], |_| {}).await;
    caller.wait_board(&owner.peer_id, "taste").await;
    (owner, caller, provider, provider_url)
}

/// The owner sets [`BODY_TOKENS`] / [`CONTEXT_TOKENS`] for `taste` (`PATCH /skills/taste`, what
/// `skill set` sends), and `caller` waits for the advert that carries them.
async fn owner_sets_its_tokens(owner: &TestNode, caller: Option<&TestNode>) {
    let a = owner
        .patch_json(
            "/skills/taste",
            json!({"bodyMaxTokens": BODY_TOKENS, "modelContextTokens": CONTEXT_TOKENS}),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["bodyMaxTokens"], BODY_TOKENS, "{}", a.body);
    assert_eq!(a.body["modelContextTokens"], CONTEXT_TOKENS, "{}", a.body);
    if let Some(caller) = caller {
        caller
            .wait_offer(&owner.peer_id, "taste", "the owner's tokens", |s| {
                s.body_max_tokens == Some(BODY_TOKENS)
                    && s.model_context_tokens == Some(CONTEXT_TOKENS)
            })
            .await;
    }
}

/// Under the defaults a self-hosted skill's 20 KB body is `unavailable` on every call (and never
/// reaches the model); once the owner sets 24,576 / 32,768 the caller's node builds the program
/// from the advert, the owner co-signs it, and the model gets the whole body and answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_owner_set_allowance_and_context_run_a_20_kb_body_on_a_self_hosted_model() {
    let (owner, caller, provider, _) = self_hosted_pair().await;
    let id = caller
        .start_call(&owner.peer_id, "taste", "my history")
        .await;
    let c = caller.wait_call(&id, LIMIT).await;
    println!("under the defaults: {}", c["failure"]);
    support::assert_failed_naming(&c, "unavailable");
    assert!(
        provider.0.lock().expect("log").is_empty(),
        "a body over its allowance reached the model"
    );

    owner_sets_its_tokens(&owner, Some(&caller)).await;
    let id = caller
        .start_call(&owner.peer_id, "taste", "my history")
        .await;
    let c = caller.wait_call(&id, LIMIT).await;
    assert_eq!(c["state"], "answered", "{c}");
    let o = owner.wait_call(&id, LIMIT).await;
    assert_eq!(o["state"], "ran", "{o}");
    let log = provider.0.lock().expect("log").clone();
    assert_eq!(log.len(), 1, "the model was asked once");
    let system = skillbox_testkit::provider::turn(&log[0].1, "system");
    assert!(
        system.contains(&body_20_kb()),
        "the model got the owner's whole body"
    );
    support::stop_all([caller, owner]).await;
}

/// The attack: a caller speaking the protocol itself names an allowance or context of its own
/// choosing (to bisect the body's length on where runs turn `unavailable`, or to move the box's
/// admission past the model's real context). The owner set its own: every other value is refused
/// `program_mismatch` — the provider's defaults too, stated or left out — and only its own pair
/// is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_caller_cannot_name_any_allowance_or_context_but_the_owners_set_ones() {
    let (owner, caller, provider, provider_url) = self_hosted_pair().await;
    owner_sets_its_tokens(&owner, None).await;
    let mut hostile = RawPeer::start(91, &owner).await;
    let offered = hostile
        .advert(LIMIT, |a| {
            offers_taste(a)
                && a.skills
                    .iter()
                    .any(|s| s.body_max_tokens == Some(BODY_TOKENS))
        })
        .await;
    let key = hostile.key.clone();
    let program = |id: &str, body: Option<u64>, context: Option<u64>| {
        let mut p: Program = admissible_program(&offered, &key, id);
        p.provider.id = ProviderId::Ollama;
        p.provider.host = Some(provider_url.clone());
        p.owner_inputs.key_max_bytes = 0;
        p.owner_inputs.body_max_tokens = body;
        p.owner_inputs.model_context_tokens = context;
        p
    };
    let (b, c) = (BODY_TOKENS, CONTEXT_TOKENS);
    let refused = [
        // The provider's defaults, left out and stated.
        (None, None),
        (
            Some(skillbox_jc::program::SELF_HOSTED_BODY_MAX_TOKENS),
            Some(skillbox_jc::program::SELF_HOSTED_MODEL_CONTEXT_TOKENS),
        ),
        // The owner's context with the default allowance (the owner's allowance with the default
        // context is no valid program at all).
        (None, Some(c)),
        // A step either side of each: what a bisection tries.
        (Some(b - 1), Some(c)),
        (Some(b + 1), Some(c)),
        (Some(b), Some(c - 1)),
        (Some(b), Some(c + 1)),
        (Some(1), Some(c)),
        (Some(b), Some(1 << 24)),
    ];
    for (i, (body, context)) in refused.into_iter().enumerate() {
        let id = format!("t{i}");
        let p = program(&id, body, context);
        assert_eq!(p.validate().map_err(|e| e.to_string()), Ok(()), "{id}");
        let got = hostile
            .request(
                &id,
                json!({"skill": "taste", "program": hostile.signed(&p)}),
                LIMIT,
            )
            .await;
        assert_eq!(got.call_id, id);
        assert_eq!(
            (got.kind, got.body["code"].as_str()),
            (PayloadKind::CallFailed, Some("program_mismatch")),
            "allowance {body:?}, context {context:?} was not refused: {}",
            got.body
        );
    }
    // The owner's own pair is admitted: the refusals above were for the tokens alone.
    let got = hostile
        .request(
            "t-own",
            json!({"skill": "taste", "program": hostile.signed(&program("t-own", Some(b), Some(c)))}),
            LIMIT,
        )
        .await;
    assert_eq!(got.kind, PayloadKind::CallAccepted, "{}", got.body);
    assert!(
        provider.0.lock().expect("log").is_empty(),
        "nothing reached the model"
    );
    hostile.handle.shutdown().await;
    support::stop_all([caller, owner]).await;
}

/// A 400 `validation_error` whose message starts with `field`.
#[track_caller]
fn assert_names(a: &support::Answer, field: &str) {
    a.assert_refused(400, "validation_error");
    assert!(
        a.body["message"]
            .as_str()
            .is_some_and(|m| m.starts_with(&format!("{field}: "))),
        "{}",
        a.body
    );
}

/// Bad values are refused naming the field, and nothing is written: zero, past the largest a
/// program may name, a context for `local`, an allowance that with the box's notice, the frame
/// and the smallest answer does not fit the context (the owner's or the provider's default).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_values_are_refused_naming_the_field_and_change_nothing() {
    let (owner, caller, _, _) = self_hosted_pair().await;
    let before = owner.get("/skills/taste").await.body;
    let cases = [
        (json!({"bodyMaxTokens": 0}), "bodyMaxTokens"),
        (json!({"bodyMaxTokens": (1u64 << 20) + 1}), "bodyMaxTokens"),
        (json!({"modelContextTokens": 0}), "modelContextTokens"),
        (
            json!({"modelContextTokens": (1u64 << 24) + 1}),
            "modelContextTokens",
        ),
        (json!({"bodyMaxTokens": "many"}), "bodyMaxTokens"),
        (json!({"modelContextTokens": -1}), "modelContextTokens"),
        // 24,576 of body cannot fit the default 4,096 context of `ollama`.
        (json!({"bodyMaxTokens": BODY_TOKENS}), "bodyMaxTokens"),
        // Nor 8,000 of body a 8,192 context with the notice, the frame and an answer.
        (
            json!({"bodyMaxTokens": 8000, "modelContextTokens": 8192}),
            "modelContextTokens",
        ),
        // A context for the embedded model, whose context is the box's.
        (
            json!({"provider": "local", "modelContextTokens": CONTEXT_TOKENS}),
            "modelContextTokens",
        ),
    ];
    for (change, field) in cases {
        let a = owner.patch_json("/skills/taste", change.clone()).await;
        println!("{change} -> {} {}", a.status, a.body);
        assert_names(&a, field);
    }
    // Set, then moved to `local` with the context still set: refused too, naming the context.
    owner_sets_its_tokens(&owner, None).await;
    let a = owner
        .patch_json("/skills/taste", json!({"provider": "local"}))
        .await;
    assert_names(&a, "modelContextTokens");
    // Cleared (null), both are the provider's defaults again: the skill reads as before.
    let a = owner
        .patch_json(
            "/skills/taste",
            json!({"bodyMaxTokens": null, "modelContextTokens": null}),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let after = owner.get("/skills/taste").await.body;
    for key in ["bodyMaxTokens", "modelContextTokens"] {
        assert_eq!(after.get(key), None, "{after}");
        assert_eq!(before.get(key), None, "{before}");
    }
    assert_eq!(after["declaration"], before["declaration"]);
    support::stop_all([caller, owner]).await;
}
