//! The owner's body allowance and remote model context for a skill (`skill set NAME
//! bodyMaxTokens=N modelContextTokens=N`), with real nodes, a real box and real libp2p: carried
//! in the advert, named by the caller's program, checked by the owner against its own set
//! values, enforced by the box. A self-hosted skill whose server takes 32,768 tokens runs a
//! 20 KB body once its owner says so (24,576 / 32,768; under the defaults, 1,024 / 4,096, every
//! call would be `unavailable`, so it is not offered and says why), and no caller gets a program
//! with any other allowance or context past the owner, nor one leaving them out.

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

/// An owner with `taste` on `ollama` (a double of [`CONTEXT_TOKENS`] tokens on loopback,
/// reached through a real box) with `body`, under the defaults (so a 20 KB body is not
/// offered), the provider's log and address, and the box's.
async fn self_hosted_owner(body: &str) -> (TestNode, ProviderLog, String, String) {
    let (provider_url, provider) =
        support::provider_double_answering(Duration::ZERO, Answering::WithContext(CONTEXT_TOKENS))
            .await;
    let box_url = support::start_box_serving(ProviderId::Ollama, &provider_url).await;
    let owner = TestNode::start(&box_url, vec![], |_| {}).await;
    owner
        .add_skill(&self_hosted_skill_doc("taste", "ollama", body))
        .await;
    (owner, provider, provider_url, box_url)
}

/// [`self_hosted_owner`] once the owner set its tokens for `taste`, and a caller with the offer
/// (carrying them) on its board.
async fn self_hosted_pair() -> (TestNode, TestNode, ProviderLog, String) {
    let (owner, provider, provider_url, box_url) = self_hosted_owner(&body_20_kb()).await;
    owner_sets_its_tokens(&owner).await;
    let caller = TestNode::start(&box_url, vec![owner.p2p.clone()], |_| {}).await;
    caller
        .wait_offer(&owner.peer_id, "taste", "the owner's tokens", |s| {
            s.body_max_tokens == Some(BODY_TOKENS) && s.model_context_tokens == Some(CONTEXT_TOKENS)
        })
        .await;
    (owner, caller, provider, provider_url)
}

/// The owner sets [`BODY_TOKENS`] / [`CONTEXT_TOKENS`] for `taste` (`PATCH /skills/taste`, what
/// `skill set` sends).
async fn owner_sets_its_tokens(owner: &TestNode) {
    let a = owner
        .patch_json(
            "/skills/taste",
            json!({"bodyMaxTokens": BODY_TOKENS, "modelContextTokens": CONTEXT_TOKENS}),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["bodyMaxTokens"], BODY_TOKENS, "{}", a.body);
    assert_eq!(a.body["modelContextTokens"], CONTEXT_TOKENS, "{}", a.body);
}

/// `program` for `taste` on the owner's Ollama, signed by a hostile caller from `offered`, with
/// the allowance and context it chooses (`None`: left out of the program).
fn ollama_program(
    offered: &skillbox_peers::Advert,
    key: &ed25519_dalek::SigningKey,
    provider_url: &str,
    id: &str,
    body: Option<u64>,
    context: Option<u64>,
) -> Program {
    let mut p: Program = admissible_program(offered, key, id);
    p.provider.id = ProviderId::Ollama;
    p.provider.host = Some(provider_url.to_owned());
    p.owner_inputs.key_max_bytes = 0;
    p.owner_inputs.body_max_tokens = body;
    p.owner_inputs.model_context_tokens = context;
    p
}

/// Review 29 R29-5: a self-hosted skill whose 20 KB body is over the default allowance (1,024
/// tokens, so 1,024 bytes the box can show fit) would fail `unavailable` on every call. It is
/// not offered: `GET /skills` and `GET /skills/taste` say why in the owner's numbers and name
/// the `skill set` that fixes it, the advert leaves it out (the small skill beside it is in, with
/// the defaults stated), and a caller who knows its name and digest is refused `not_offered`
/// before anything runs. Once the owner sets its allowance and context it is offered and
/// advertised with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_body_over_its_allowance_is_not_offered_and_says_why() {
    let (owner, provider, provider_url, _) = self_hosted_owner(&body_20_kb()).await;
    owner
        .add_skill(&self_hosted_skill_doc(
            "brief",
            "ollama",
            "Answer in one line (BODY-OT-BRIEF).",
        ))
        .await;
    let detail = owner.get("/skills/taste").await.body;
    let bytes = detail["bodySource"]["size"].as_u64().expect("body size");
    assert!(bytes >= 20_000, "{detail}");
    let least = bytes
        + skillbox_jc::prompt::notice_bytes() as u64
        + skillbox_providers::REMOTE_FRAME_TOKENS as u64
        + skillbox_node::skills::SMALLEST_ANSWER_TOKENS;
    let why = format!(
        "body ({bytes} bytes) over its allowance (1024 tokens): provider ollama is sent a body of at most as many bytes as its allowance has tokens, so every call would fail unavailable; raise it: skillbox skill set taste bodyMaxTokens={bytes} modelContextTokens=N, N your model server's context, at least {least}"
    );
    println!("GET /skills/taste state: {}", detail["state"]);
    assert_eq!(
        detail["state"],
        json!({"offered": false, "reasons": [why]}),
        "{detail}"
    );
    let list = owner.get("/skills").await.body;
    let listed = |name: &str| {
        list["skills"]
            .as_array()
            .and_then(|a| a.iter().find(|s| s["name"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("{name} listed: {list}"))
    };
    let taste = listed("taste");
    assert_eq!(
        (&taste["offered"], &taste["reason"]),
        (&json!(false), &json!(why)),
        "{taste}"
    );
    assert_eq!(listed("brief")["offered"], json!(true), "{list}");

    let mut hostile = RawPeer::start(92, &owner).await;
    let advert = hostile
        .advert(LIMIT, |a| a.skills.iter().any(|s| s.name == "brief"))
        .await;
    assert!(
        !offers_taste(&advert),
        "a skill every call of which fails is advertised: {:?}",
        advert.skills
    );
    let brief = advert
        .skills
        .iter()
        .find(|s| s.name == "brief")
        .expect("brief")
        .clone();
    assert_eq!(
        (brief.body_max_tokens, brief.model_context_tokens),
        (Some(1024), Some(4096)),
        "the advert states the defaults in force"
    );
    // A caller holding the skill's name and digest (an earlier advert) asks anyway.
    let digest = detail["digest"].as_str().expect("digest").to_owned();
    let mut known = advert.clone();
    known.skills = vec![skillbox_peers::OfferedSkill {
        name: "taste".into(),
        declaration_digest: digest,
        ..brief
    }];
    let p = ollama_program(
        &known,
        &hostile.key,
        &provider_url,
        "t-over",
        Some(1024),
        Some(4096),
    );
    let got = hostile
        .request(
            "t-over",
            json!({"skill": "taste", "program": hostile.signed(&p)}),
            LIMIT,
        )
        .await;
    assert_eq!(
        (got.kind, got.body["code"].as_str()),
        (PayloadKind::CallFailed, Some("not_offered")),
        "{}",
        got.body
    );
    assert!(
        provider.0.lock().expect("log").is_empty(),
        "nothing reached the model"
    );

    owner_sets_its_tokens(&owner).await;
    let detail = owner.get("/skills/taste").await.body;
    assert_eq!(
        detail["state"],
        json!({"offered": true, "reasons": []}),
        "{detail}"
    );
    hostile
        .advert(LIMIT, |a| {
            a.skills.iter().any(|s| {
                s.name == "taste"
                    && s.body_max_tokens == Some(BODY_TOKENS)
                    && s.model_context_tokens == Some(CONTEXT_TOKENS)
            })
        })
        .await;
    hostile.handle.shutdown().await;
    support::stop_all([owner]).await;
}

/// Review 29 R29-1, the attack with real nodes: an owner whose values are the provider's
/// defaults (1,024 / 4,096 on `ollama`) advertises them stated, and refuses a program that
/// leaves either out — what the caller's node built before, which a box from before 139eec7
/// reads as its larger defaults (8,192 of context: admission past a stock Ollama's 4,096, the
/// body's length bisectable again). The same program stating them is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_program_leaving_out_the_default_allowance_or_context_is_refused() {
    let (owner, provider, provider_url, _) =
        self_hosted_owner("Describe the taste in one line (BODY-OT-SMALL).").await;
    let mut hostile = RawPeer::start(93, &owner).await;
    let offered = hostile.advert(LIMIT, offers_taste).await;
    let taste = offered
        .skills
        .iter()
        .find(|s| s.name == "taste")
        .expect("taste");
    let (b, c) = (
        skillbox_jc::program::SELF_HOSTED_BODY_MAX_TOKENS,
        skillbox_jc::program::SELF_HOSTED_MODEL_CONTEXT_TOKENS,
    );
    assert_eq!((b, c), (1024, 4096));
    assert_eq!(
        (taste.body_max_tokens, taste.model_context_tokens),
        (Some(b), Some(c)),
        "the advert states the defaults"
    );
    for (i, (body, context)) in [(None, None), (Some(b), None), (None, Some(c))]
        .into_iter()
        .enumerate()
    {
        let id = format!("t{i}");
        let p = ollama_program(&offered, &hostile.key, &provider_url, &id, body, context);
        assert_eq!(p.validate().map_err(|e| e.to_string()), Ok(()), "{id}");
        let got = hostile
            .request(
                &id,
                json!({"skill": "taste", "program": hostile.signed(&p)}),
                LIMIT,
            )
            .await;
        println!(
            "allowance {body:?}, context {context:?}: {:?} {}",
            got.kind, got.body
        );
        assert_eq!(
            (got.kind, got.body["code"].as_str()),
            (PayloadKind::CallFailed, Some("program_mismatch")),
            "allowance {body:?}, context {context:?} left out was co-signed: {}",
            got.body
        );
    }
    let p = ollama_program(
        &offered,
        &hostile.key,
        &provider_url,
        "t-stated",
        Some(b),
        Some(c),
    );
    let got = hostile
        .request(
            "t-stated",
            json!({"skill": "taste", "program": hostile.signed(&p)}),
            LIMIT,
        )
        .await;
    assert_eq!(got.kind, PayloadKind::CallAccepted, "{}", got.body);
    assert!(
        provider.0.lock().expect("log").is_empty(),
        "nothing reached the model"
    );
    hostile.handle.shutdown().await;
    support::stop_all([owner]).await;
}

/// Once the owner sets 24,576 / 32,768 for a self-hosted skill's 20 KB body (under the defaults
/// it is not offered: [`a_body_over_its_allowance_is_not_offered_and_says_why`]), the caller's
/// node builds the program from the advert, the owner co-signs it, and the model gets the whole
/// body and answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_owner_set_allowance_and_context_run_a_20_kb_body_on_a_self_hosted_model() {
    let (owner, caller, provider, _) = self_hosted_pair().await;
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
        ollama_program(&offered, &key, &provider_url, id, body, context)
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
    let (owner, _, _, _) = self_hosted_owner(&body_20_kb()).await;
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
    owner_sets_its_tokens(&owner).await;
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
    support::stop_all([owner]).await;
}
