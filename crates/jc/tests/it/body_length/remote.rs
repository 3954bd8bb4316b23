//! The owner's body length does not reach the caller through a remote provider (N5), with the
//! real box and the real OpenAI-compatible adapter against a loopback model double whose context
//! is the provider's default (4,096 tokens for `ollama`, 128,000 for `openai`) (it counts a prompt at three bytes a token and refuses a longer one with
//! OpenAI's `context_length_exceeded`). Two programs differ only in the owner's body; the
//! caller bisects its request's length until runs fail, as the attack does: the first failing
//! length is the same for both bodies (it was `context - body`: the body's length in about a
//! dozen calls). Needs no model file.

use std::sync::Arc;
use std::time::Duration;

use skillbox_jc::client::{StakeInput, new_nonce, open_result, seal_stake};
use skillbox_jc::program::{
    CallerInputs, HOSTED_MODEL_CONTEXT_TOKENS, OutputSpec, Program, ProviderGrant, Role,
    SELF_HOSTED_BODY_MAX_TOKENS, SELF_HOSTED_MODEL_CONTEXT_TOKENS,
};
use skillbox_jc::registry::ProviderRegistry;
use skillbox_jc::run::{BoxConfig, BoxCore, RunFailure};
use skillbox_providers::openai::{OpenAiCompatible, OpenAiOptions};
use skillbox_providers::{ProviderFailure, ProviderId};
use skillbox_testkit::provider::serve::{Answering, ProviderLog, provider_double_answering};
use skillbox_testkit::provider::{USAGE_MARK, approx_prompt_tokens};

use crate::support::*;

/// The `ollama` double's context: the provider's default, which the owner's program carries.
const CONTEXT: u64 = SELF_HOSTED_MODEL_CONTEXT_TOKENS;
/// Output bound: the box asks for `max_bytes / 3` tokens, 100.
const OUTPUT: u64 = 300;
/// The caller's request room the program grants: far past the edge.
const REQUEST_MAX: u64 = 64 << 10;
const RESULT_WAIT: Duration = Duration::from_secs(60);

const SHORT_BODY: &str = "You are a counting assistant. Do exactly what the user asks.";

/// A body of `len` bytes: the short one and filler sentences.
fn body_of(len: usize) -> String {
    let mut body = SHORT_BODY.to_owned();
    while body.len() < len {
        body.push_str(" Keep every number on one line, with one space between numbers.");
    }
    body.truncate(len);
    body
}

struct Remote {
    f: Fixture,
    log: ProviderLog,
    url: String,
    provider: ProviderId,
    context: u64,
}

/// A box whose `ollama` provider is the real OpenAI-compatible adapter at a double of
/// [`CONTEXT`] tokens on loopback.
async fn remote() -> Remote {
    remote_of(ProviderId::Ollama, CONTEXT).await
}

/// A box whose `provider` is the real OpenAI-compatible adapter at a double of `context` tokens
/// on loopback.
async fn remote_of(provider: ProviderId, context: u64) -> Remote {
    let (url, log) =
        provider_double_answering(Duration::ZERO, Answering::WithContext(context)).await;
    let adapter = OpenAiCompatible::new(
        &url,
        OpenAiOptions {
            stream: false,
            ..OpenAiOptions::default()
        },
    )
    .expect("adapter");
    let mut providers = ProviderRegistry::new();
    providers.register(provider.clone(), Some(url.clone()), Arc::new(adapter));
    let core = BoxCore::new(dev_attester(), providers, BoxConfig::default());
    let f = serve_box_loopback(Arc::new(core)).await;
    Remote {
        f,
        log,
        url,
        provider,
        context,
    }
}

/// What the caller gets from one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    Failed(RunFailure),
    Answered,
}

impl Remote {
    /// The program both bodies run under: the `ollama` double, one request of up to 64 KiB,
    /// the default body allowance and the model's context as the owner declares it.
    fn program(&self, declared: Option<u64>) -> Program {
        let mut p = self.f.program();
        p.provider = ProviderGrant {
            id: self.provider.clone(),
            host: Some(self.url.clone()),
        };
        // The stake limits a node's program always states (room for any SKILL.md body).
        p.owner_inputs.body_max_bytes = 1 << 20;
        p.owner_inputs.model_max_bytes = 1024;
        if self.provider.needs_key() {
            p.owner_inputs.key_max_bytes = 16 * 1024;
        }
        p.caller_inputs = CallerInputs {
            request_max_bytes: REQUEST_MAX,
            sources: vec![],
        };
        p.owner_inputs.model_context_tokens = declared;
        p.output = OutputSpec::to_caller(OUTPUT);
        p
    }

    /// One call of `p` with the owner's `body` and a request of `padding` bytes, as the caller
    /// sees it, and the result's view (for what travels with it).
    async fn call(&self, p: &Program, padding: usize, body: &str) -> (Seen, String) {
        let f = &self.f;
        let p = Program {
            call_id: format!("remote-len-{}", new_nonce()),
            ..p.clone()
        };
        let (_, run) = f.open(&p).await;
        let request = "n ".repeat(padding / 2) + &"n".repeat(padding % 2);
        let sealed = seal_stake(
            &run,
            Role::Caller,
            vec![StakeInput::bytes("request", request.as_bytes())],
        )
        .expect("seal");
        let owner_stake = if self.provider.needs_key() {
            let entries = vec![
                StakeInput::bytes("body", body.as_bytes()),
                StakeInput::bytes("model", b"gpt-double"),
                StakeInput::bytes("key", b"sk-double-key"),
            ];
            seal_stake(&run, Role::Owner, entries).expect("seal")
        } else {
            f.owner_stake(&run, body)
        };
        let view = f
            .stake_both_and_wait(&run, sealed, owner_stake, RESULT_WAIT)
            .await;
        // Everything of the result the caller holds: the view, the receipt's payload and, for
        // an answer, what it opens.
        let mut held = serde_json::to_string(&view).expect("view");
        held.push_str(&String::from_utf8_lossy(
            &view.receipt.payload_bytes().expect("receipt payload"),
        ));
        if let Some(failure) = view.error {
            return (Seen::Failed(failure), held);
        }
        let out = open_result(&view, &f.result_key, &run).expect("the caller opens its answer");
        held.push_str(&out.answer);
        (Seen::Answered, held)
    }

    /// The shortest request padding in `0..=hi` whose run fails, by bisection (runs fail from
    /// some length on), and what the first failing run failed with; `None` if none fails.
    async fn first_refused(&self, p: &Program, body: &str, hi: usize) -> Option<(usize, Seen)> {
        let (top, _) = self.call(p, hi, body).await;
        if top == Seen::Answered {
            return None;
        }
        let (mut lo, mut hi, mut seen) = (0usize, hi, top);
        // Invariant: `hi` fails; everything below `lo` answered.
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.call(p, mid, body).await {
                (Seen::Answered, _) => lo = mid + 1,
                (failed, _) => {
                    hi = mid;
                    seen = failed;
                }
            }
        }
        Some((hi, seen))
    }

    /// How many requests the double refused (its own count of their prompts over its context).
    fn refused_by_the_model(&self) -> usize {
        let log = self.log.0.lock().unwrap_or_else(|p| p.into_inner());
        log.iter()
            .filter(|(_, body)| {
                approx_prompt_tokens(body) + body["max_tokens"].as_u64().unwrap_or(0) > self.context
            })
            .count()
    }

    /// The attack's check: a caller bisecting its request's length under `p` finds the first
    /// refused length at one and the same place for both bodies, refused `context_too_long` by
    /// the box before the provider (the model refuses nothing).
    async fn assert_one_edge(&self, p: &Program, short: &str, long: &str, hi: usize, what: &str) {
        let short_edge = self.first_refused(p, short, hi).await;
        let long_edge = self.first_refused(p, long, hi).await;
        println!(
            "{what}, first refused padding: short body {short_edge:?}, long body {long_edge:?}"
        );
        let (Some(short_edge), Some(long_edge)) = (short_edge, long_edge) else {
            panic!("no request up to {hi} bytes was refused: {short_edge:?} {long_edge:?}");
        };
        assert_eq!(
            short_edge.0, long_edge.0,
            "the first refused request length moved with the body's length"
        );
        assert_eq!(
            short_edge.1,
            Seen::Failed(RunFailure::Provider(ProviderFailure::ContextTooLong))
        );
        assert_eq!(long_edge.1, short_edge.1);
        assert_eq!(
            self.refused_by_the_model(),
            0,
            "the model refused a request"
        );
    }
}

/// The attack: the caller bisects its request's length against two programs that differ only
/// in the owner's body (60 and 1,000 bytes, about 313 tokens apart at the double's count). With
/// the box's admission the first refused length is one and the same, refused
/// `context_too_long` by the box before the provider, which never refuses; without it the edge
/// sat at the model's context less the body's tokens and moved by some 940 bytes.
#[tokio::test]
async fn a_callers_bisection_against_a_remote_model_finds_the_same_edge_whatever_the_body() {
    let r = remote().await;
    // The program every caller builds: the provider's default context, declared or not.
    let p = r.program(None);
    let (short, long) = (body_of(SHORT_BODY.len()), body_of(1000));
    // The box refuses before sending: the model never sees a request over its context.
    r.assert_one_edge(&p, &short, &long, 16 << 10, "default context")
        .await;
}

/// A body the box cannot show fits its allowance (more bytes than the allowance's tokens)
/// fails `unavailable` on every request, the shortest and the longest alike, and reaches no
/// model; a program with no declared context is judged against the default one.
#[tokio::test]
async fn a_body_over_its_allowance_is_unavailable_whatever_the_request_and_never_sent() {
    let r = remote().await;
    let p = r.program(None);
    let over = body_of(SELF_HOSTED_BODY_MAX_TOKENS as usize + 1);
    for padding in [0, 100, 3000, 20_000] {
        let (seen, _) = r.call(&p, padding, &over).await;
        assert_eq!(
            seen,
            Seen::Failed(RunFailure::Provider(ProviderFailure::Unavailable)),
            "padding {padding}"
        );
    }
    assert!(
        r.log.0.lock().unwrap_or_else(|e| e.into_inner()).is_empty(),
        "a body over its allowance reached the model"
    );
    // A body within its allowance is sent; a request past the default context is the box's
    // refusal, whether the program states the default or leaves it out.
    let stated = r.program(Some(CONTEXT));
    for program in [&p, &stated] {
        let (seen, _) = r.call(program, CONTEXT as usize, SHORT_BODY).await;
        assert_eq!(
            seen,
            Seen::Failed(RunFailure::Provider(ProviderFailure::ContextTooLong)),
            "a request past the default context is the box's refusal"
        );
    }
    let (seen, _) = r
        .call(&p, 0, &body_of(SELF_HOSTED_BODY_MAX_TOKENS as usize))
        .await;
    assert_eq!(seen, Seen::Answered, "a body at its allowance runs");
}

/// The provider's usage figures (`prompt_tokens` counts the body) stay in the box: nothing the
/// caller holds of a run — the result view, the receipt, the opened answer — carries them.
#[tokio::test]
async fn usage_figures_never_reach_the_caller() {
    let r = remote().await;
    let p = r.program(None);
    for body in [body_of(SHORT_BODY.len()), body_of(1000)] {
        let (seen, held) = r.call(&p, 40, &body).await;
        assert_eq!(seen, Seen::Answered);
        let log = r.log.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let (_, sent) = log.last().expect("the model was asked");
        let usage = USAGE_MARK + approx_prompt_tokens(sent);
        assert!(
            !held.contains(&usage.to_string()) && !held.contains("900000"),
            "the caller holds the provider's usage ({usage}): {held}"
        );
    }
}

/// A real skill's body on a hosted provider runs with the program every caller builds (the
/// provider's defaults: 49,152 tokens of body allowance, 128,000 of context): a 20 KB body and a
/// request of 16 KiB are answered by the model (before the defaults by provider, any body over
/// 1,024 bytes failed `unavailable` on every call), and the bisection still finds one edge for a
/// 20 KB and a 40 KB body, the box's own, where the model refuses nothing.
#[tokio::test]
async fn a_real_skill_body_runs_on_a_hosted_provider_with_the_default_program() {
    let r = remote_of(ProviderId::OpenAi, HOSTED_MODEL_CONTEXT_TOKENS).await;
    let p = r.program(None);
    let body = body_of(20_000);
    for padding in [0, 16 << 10] {
        let (seen, _) = r.call(&p, padding, &body).await;
        assert_eq!(seen, Seen::Answered, "padding {padding}");
    }
    let log = r.log.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(log.len(), 2, "the model was asked each time");
    assert!(
        log.iter()
            .all(|(_, sent)| skillbox_testkit::provider::turn(sent, "system").len() >= body.len()),
        "the model got the owner's whole body"
    );
    let hi = REQUEST_MAX as usize - 1;
    let edge_20k = r.first_refused(&p, &body, hi).await;
    let edge_40k = r.first_refused(&p, &body_of(40_000), hi).await;
    println!("hosted, first refused padding: 20 KB body {edge_20k:?}, 40 KB body {edge_40k:?}");
    // With the defaults no request the program allows is refused at all.
    assert_eq!(edge_20k, None, "an honest request was refused");
    assert_eq!(edge_40k, None, "an honest request was refused");
    assert_eq!(r.refused_by_the_model(), 0, "the model refused a request");
}

/// What an owner of a self-hosted server of 32k context sets (`skill set taste
/// bodyMaxTokens=24576 modelContextTokens=32768`): the program the caller builds from the advert
/// carries both, and the owner co-signs no other (node it `owner_tokens`). The box judges a
/// remote body in bytes (a token covers at least one byte), so a 20 KB body needs an allowance
/// of 20,000 tokens or more.
const OWNER_BODY: u64 = 24_576;
const OWNER_CONTEXT: u64 = 32_768;

impl Remote {
    /// [`Remote::program`] naming the owner's body allowance `body` too.
    fn program_with(&self, body: Option<u64>, context: Option<u64>) -> Program {
        let mut p = self.program(context);
        p.owner_inputs.body_max_tokens = body;
        p
    }
}

/// The box enforces the owner's set values: an `ollama` server of 32,768 tokens and a 20 KB
/// body fail `unavailable` under the defaults (1,024 / 4,096), never sent, and under an
/// allowance of 16,384 (fewer tokens than the body has bytes); under the owner's 24,576 /
/// 32,768 the model gets the whole body and answers, with room for a request of 4 KiB.
#[tokio::test]
async fn an_owner_set_allowance_and_context_run_a_20_kb_body_on_a_self_hosted_model() {
    let r = remote_of(ProviderId::Ollama, OWNER_CONTEXT).await;
    let body = body_of(20_000);
    let (seen, _) = r.call(&r.program(None), 40, &body).await;
    assert_eq!(
        seen,
        Seen::Failed(RunFailure::Provider(ProviderFailure::Unavailable)),
        "under the defaults"
    );
    assert!(
        r.log.0.lock().unwrap_or_else(|e| e.into_inner()).is_empty(),
        "a body over the default allowance reached the model"
    );
    let (seen, _) = r
        .call(
            &r.program_with(Some(16_384), Some(OWNER_CONTEXT)),
            40,
            &body,
        )
        .await;
    assert_eq!(
        seen,
        Seen::Failed(RunFailure::Provider(ProviderFailure::Unavailable)),
        "under 16,384 tokens of allowance"
    );
    let owners = r.program_with(Some(OWNER_BODY), Some(OWNER_CONTEXT));
    for padding in [0, 4 << 10] {
        let (seen, _) = r.call(&owners, padding, &body).await;
        assert_eq!(seen, Seen::Answered, "padding {padding}");
    }
    let log = r.log.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(log.len(), 2, "the model was asked each time");
    assert!(
        log.iter()
            .all(|(_, sent)| skillbox_testkit::provider::turn(sent, "system").contains(&body)),
        "the model got the owner's whole body"
    );
}

/// The attack against an owner-set context: the caller bisects its request's length against
/// two programs that differ only in the owner's body (60 bytes and 12,000, some 4,000 tokens
/// apart at the double's count), under the owner's 24,576 / 32,768 and a request room of
/// 128 KiB (past the model's real edge for both bodies). The first refused length is one and
/// the same, the box's `context_too_long`; the model refuses nothing. Control: the same
/// bisection under a context the caller picked (2^24, what the owner's check refuses) finds
/// edges that move with the body, so the double can tell them apart.
#[tokio::test]
async fn a_callers_bisection_against_an_owner_set_context_finds_the_same_edge_whatever_the_body() {
    let r = remote_of(ProviderId::Ollama, OWNER_CONTEXT).await;
    let room = 128 << 10;
    let with_room = |mut p: Program| {
        p.caller_inputs.request_max_bytes = room;
        p
    };
    let owners = with_room(r.program_with(Some(OWNER_BODY), Some(OWNER_CONTEXT)));
    let (short, long) = (body_of(SHORT_BODY.len()), body_of(12_000));
    let hi = room as usize - 1;
    r.assert_one_edge(&owners, &short, &long, hi, "owner-set context")
        .await;

    let chosen = with_room(r.program_with(Some(OWNER_BODY), Some(1 << 24)));
    let short_chosen = r.first_refused(&chosen, &short, hi).await;
    let long_chosen = r.first_refused(&chosen, &long, hi).await;
    println!("caller-chosen context: short {short_chosen:?}, long {long_chosen:?}");
    assert_ne!(
        short_chosen.map(|e| e.0),
        long_chosen.map(|e| e.0),
        "control: under a context the caller picks, the model's own edge shows the body"
    );
}

/// An 8k OpenRouter model (Llama-3-8B-Instruct, Gemma-2) as OpenRouter serves it by default:
/// `middle-out` cuts an over-long prompt's middle silently, never refusing.
const OPENROUTER_8K: u64 = 8_192;

/// A box whose `openrouter` is the real adapter with OpenRouter's options at a double of an
/// [`OPENROUTER_8K`] model that cuts silently and lists its context at `GET /models`.
async fn openrouter_cutting() -> Remote {
    let (url, log) =
        provider_double_answering(Duration::ZERO, Answering::CuttingAt(OPENROUTER_8K)).await;
    let mut options = OpenAiOptions::openrouter(Default::default());
    options.stream = false;
    let adapter = OpenAiCompatible::new(&url, options).expect("adapter");
    let mut providers = ProviderRegistry::new();
    providers.register(ProviderId::OpenRouter, Some(url.clone()), Arc::new(adapter));
    let core = BoxCore::new(dev_attester(), providers, BoxConfig::default());
    let f = serve_box_loopback(Arc::new(core)).await;
    Remote {
        f,
        log,
        url,
        provider: ProviderId::OpenRouter,
        context: OPENROUTER_8K,
    }
}

impl Remote {
    /// The shortest request padding in `0..=hi` whose run is not answered `whole` (failed, or
    /// answered from a prompt cut short), by bisection, and what that run gave.
    async fn first_not_whole(&self, p: &Program, body: &str, hi: usize) -> Option<(usize, Seen)> {
        let whole = |(seen, held): (Seen, String)| {
            (seen == Seen::Answered && held.ends_with("whole"), seen)
        };
        let (top_whole, top) = whole(self.call(p, hi, body).await);
        if top_whole {
            return None;
        }
        let (mut lo, mut hi, mut seen) = (0usize, hi, top);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match whole(self.call(p, mid, body).await) {
                (true, _) => lo = mid + 1,
                (false, got) => {
                    hi = mid;
                    seen = got;
                }
            }
        }
        Some((hi, seen))
    }
}

/// The attack of review 29 R29-3: an owner on an 8k OpenRouter model with the program every
/// caller builds (OpenRouter's defaults, 16,384 / 32,768). The caller bisects its request's
/// length for the first answer that can no longer quote the request's start. Before, OpenRouter
/// cut the middle silently and the box let every request in, so that length was 8,192 tokens
/// less the body — some 1,000 tokens apart for bodies of 9,000 and 12,000 bytes. Now the box
/// reads the model's 8,192 at OpenRouter's `GET /models`, under the declared 32,768: every
/// request fails `unavailable` the same way, the shortest first, and the model is never asked.
#[tokio::test]
async fn a_callers_bisection_against_a_silently_cutting_8k_openrouter_model_fails_unavailable() {
    let r = openrouter_cutting().await;
    let p = r.program(None);
    let hi = REQUEST_MAX as usize - 1;
    let short = r.first_not_whole(&p, &body_of(9_000), hi).await;
    let long = r.first_not_whole(&p, &body_of(12_000), hi).await;
    println!(
        "8k OpenRouter model, first request not answered whole: 9,000-byte body {short:?}, 12,000-byte body {long:?}"
    );
    let (Some(short), Some(long)) = (short, long) else {
        panic!("every request was answered whole: {short:?} {long:?}");
    };
    assert_eq!(
        short.0, long.0,
        "the first request not answered whole moved with the body's length"
    );
    assert_eq!(
        short.1,
        Seen::Failed(RunFailure::Provider(ProviderFailure::Unavailable))
    );
    assert_eq!(long.1, short.1);
    assert_eq!(short.0, 0, "even the shortest request fails");
    assert!(
        r.log.0.lock().unwrap_or_else(|e| e.into_inner()).is_empty(),
        "a request reached the model"
    );
}
