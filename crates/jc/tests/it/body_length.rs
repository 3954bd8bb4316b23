//! The owner's body length does not reach the caller (review 26 V1), with the real embedded
//! model through the real box. Two programs differ only in the owner's body; the caller's
//! request is padded to the edge of the model's context, as the attack pads it:
//! - A: the request length at which runs start failing `context_too_long` is the same for both
//!   bodies (it was `context - body`: bisection read the body's length in tokens);
//! - B: one call's answer — how many tokens, whether `truncated` — is the same for both (the
//!   answer's budget was `context - prompt`, so its length told the body's);
//! - C: under `regenerate`, the round with the body and the neutral round end alike (their
//!   budgets differed by the body's length, so the released answer's length told the caller
//!   that the guard caught the first one).
//!
//! Needs the model file (`SKILLBOX_MODEL`, or the data dir's copy): without it these tests fail
//! and say how to get it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use skillbox_guard::{Action, GuardSpec};
use skillbox_jc::client::{StakeInput, new_nonce, open_result, seal_stake};
use skillbox_jc::program::{CallerInputs, OutputSpec, Program, ReceiptSpec, Role};
use skillbox_jc::run::{BoxConfig, NEUTRAL_INSTRUCTION, RunFailure};
use skillbox_providers::local::{LocalModel, LocalOptions, LocalProvider};
use skillbox_providers::{ChatRequest, FinishReason, Provider, ProviderFailure, Reply};
use skillbox_testkit::procs::model_path;

use crate::support::*;

/// The box's model context: small, so the edge is reached with short texts.
const CONTEXT: usize = 1024;
/// The owner's body allowance the programs name.
const ALLOWANCE: u64 = 256;
/// Output bounds: the box asks for `max_bytes / 3` tokens (at least 16).
const SMALL_OUTPUT: u64 = 48;
const OUTPUT: u64 = 300;
const ANSWER_TOKENS: u64 = 100;
/// A run's result, waited for at most this long (a loaded machine decodes slowly).
const RESULT_WAIT: Duration = Duration::from_secs(600);
/// The tag suffix the box draws for each prompt tokenizes to a few more or fewer tokens from
/// run to run, whatever the body: the edge a caller finds moves by that much by itself.
const SUFFIX_NOISE: usize = 8;

const SHORT_BODY: &str = "You are a counting assistant. Do exactly what the user asks.";
const FILLER: &str = " Keep every number on one line, with one space between numbers.";

/// What one generation came to, as the provider saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Generation {
    Answered { tokens: u64, finish: FinishReason },
    Refused(ProviderFailure),
}

/// The real local provider, each generation's end noted (and whether it was the neutral round).
struct Observed {
    local: LocalProvider,
    seen: Mutex<Vec<(bool, Generation)>>,
}

impl Observed {
    fn take(&self) -> Vec<(bool, Generation)> {
        std::mem::take(&mut *self.seen.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Provider for Observed {
    fn complete<'a>(&'a self, request: ChatRequest, key: Option<&'a str>) -> Reply<'a> {
        Box::pin(async move {
            let neutral = request.system.starts_with(NEUTRAL_INSTRUCTION);
            let answer = self.local.complete(request, key).await;
            let seen = match &answer {
                Ok(c) => Generation::Answered {
                    tokens: c.usage.completion_tokens,
                    finish: c.finish,
                },
                Err(e) => Generation::Refused(e.failure()),
            };
            self.seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((neutral, seen));
            answer
        })
    }
}

/// What the caller gets from one run: the run's failure code, or its answer's length in tokens
/// (the caller retokenizes it with the public model) and `truncated`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    Failed(RunFailure),
    Answered { tokens: usize, truncated: bool },
}

struct Bench {
    f: Fixture,
    observed: Arc<Observed>,
    model: Arc<LocalModel>,
}

async fn bench() -> Bench {
    let local = LocalProvider::with_options(
        model_path(),
        LocalOptions {
            threads: Some(2),
            parallel: 2,
            context: Some(CONTEXT),
            gpus: 0,
        },
    );
    let model = local.model().await.expect("the local model loads");
    assert_eq!(model.context_tokens(), CONTEXT);
    let observed = Arc::new(Observed {
        local,
        seen: Mutex::new(Vec::new()),
    });
    // Greedy: the same prompt gives the same answer, so only the budget can tell runs apart.
    let config = BoxConfig {
        temperature: 0.0,
        ..BoxConfig::default()
    };
    let f = start_with(observed.clone(), config).await;
    Bench { f, observed, model }
}

impl Bench {
    fn tokens(&self, text: &str) -> usize {
        self.model
            .tokenizer()
            .encode_plain(text)
            .expect("tokenizes")
            .len()
    }

    /// A body `more` tokens or so longer than [`SHORT_BODY`] (whole filler sentences).
    fn body_longer_by(&self, more: usize) -> String {
        let mut body = SHORT_BODY.to_owned();
        while self.tokens(&body) < self.tokens(SHORT_BODY) + more {
            body.push_str(FILLER);
        }
        assert!(
            self.tokens(&body) as u64 <= ALLOWANCE,
            "the test's long body must fit the allowance"
        );
        body
    }

    /// The program both bodies run under: one request of up to 16 KiB, no sources, the
    /// owner's allowance [`ALLOWANCE`], `output` bytes of answer.
    fn program(&self, output: u64, guard: Option<Action>) -> Program {
        let mut p = self.f.program();
        p.call_id = format!("len-{}", new_nonce());
        p.caller_inputs = CallerInputs {
            request_max_bytes: 16 << 10,
            sources: vec![],
        };
        p.owner_inputs.body_max_tokens = Some(ALLOWANCE);
        p.output = OutputSpec::to_caller(output);
        if let Some(action) = guard {
            p.guard = Some(GuardSpec {
                action,
                ..GuardSpec::default_for(true)
            });
            p.receipt = ReceiptSpec::for_guard(true);
        }
        p
    }

    /// One call of `p` with the owner's `body` and the caller's `request`, as the caller sees it.
    async fn call(&self, p: &Program, request: &str, body: &str) -> Seen {
        let f = &self.f;
        let p = Program {
            call_id: format!("len-{}", new_nonce()),
            ..p.clone()
        };
        let (_, run) = f.open(&p).await;
        let sealed = seal_stake(
            &run,
            Role::Caller,
            vec![StakeInput::bytes("request", request.as_bytes())],
        )
        .expect("seal");
        let view = f
            .stake_both_and_wait(&run, sealed, f.owner_stake(&run, body), RESULT_WAIT)
            .await;
        if let Some(failure) = view.error {
            return Seen::Failed(failure);
        }
        let out = open_result(&view, &f.result_key, &run).expect("the caller opens its answer");
        Seen::Answered {
            tokens: self.tokens(&out.answer),
            truncated: out.truncated,
        }
    }

    /// How many tokens the box's prompt for `body` and `request` holds (a fresh suffix, as
    /// the box draws).
    fn prompt_len(&self, body: &str, request: &str) -> usize {
        let (system, user) = skillbox_jc::prompt::build(body, request, &[]).expect("prompt");
        self.model
            .prompt_ids(&system, &user)
            .expect("tokenizes")
            .len()
    }

    /// The smallest `n` for which `request(n)` leaves at most `room` tokens of context after
    /// the prompt with `body` (the attack's padding, computed offline with the public model).
    fn padding_leaving(&self, body: &str, room: usize) -> usize {
        let (mut lo, mut hi) = (0, CONTEXT);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if CONTEXT.saturating_sub(self.prompt_len(body, &request(mid))) <= room {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }
}

/// The caller's padded request: `n` ones, then the instruction to go on writing them.
fn request(n: usize) -> String {
    format!(
        "{}\nWrite the number 1 again and again, separated by spaces, without stopping.",
        "1 ".repeat(n)
    )
}

const TOO_LONG: Seen = Seen::Failed(RunFailure::Provider(ProviderFailure::ContextTooLong));

#[tokio::test]
async fn the_first_refused_request_length_is_the_same_whatever_the_body() {
    let b = bench().await;
    let long = b.body_longer_by(150);
    let p = b.program(SMALL_OUTPUT, None);
    // The caller bisects its padding until runs fail context_too_long, for each body.
    let mut edges = Vec::new();
    for body in [SHORT_BODY, long.as_str()] {
        let (mut lo, mut hi) = (0, CONTEXT);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match b.call(&p, &request(mid), body).await {
                TOO_LONG => hi = mid,
                Seen::Answered { .. } => lo = mid + 1,
                other => panic!("padding {mid}: {other:?}"),
            }
        }
        edges.push(lo);
    }
    let body_gap = b.tokens(&long) - b.tokens(SHORT_BODY);
    println!(
        "first refused padding: {edges:?} (bodies {} and {} tokens)",
        b.tokens(SHORT_BODY),
        b.tokens(&long)
    );
    assert!(
        edges[0].abs_diff(edges[1]) <= SUFFIX_NOISE,
        "the first refused request moved with the body: {edges:?} for bodies {body_gap} tokens apart"
    );
}

#[tokio::test]
async fn one_padded_call_answers_alike_whatever_the_body() {
    let b = bench().await;
    // Closer bodies, so the old budget (context - prompt) binds for both in one call.
    let long = b.body_longer_by(40);
    let p = b.program(OUTPUT, None);
    // Padding that left the short body's answer 75 tokens of context (the long one's about
    // 35): each answer's length told its body's. Both must end alike.
    let padded = b.padding_leaving(SHORT_BODY, 75);
    let short = b.call(&p, &request(padded), SHORT_BODY).await;
    let longer = b.call(&p, &request(padded), &long).await;
    let generated = b.observed.take();
    println!(
        "padding {padded}: short body {short:?}, long body {longer:?}; generated {generated:?}"
    );
    assert_eq!(
        short, longer,
        "padding {padded}: the answer tells the bodies apart (generated {generated:?})"
    );
    // Well inside the room the model stops where the body leads it (its own answer), but an
    // answer cut for length is cut at max_tokens, never at what the context leaves.
    let _ = b.call(&p, &request(20), &long).await;
    assert_budget_is_max_tokens(&b.observed.take());
}

/// Every generation cut for length was cut at `max_tokens`.
#[track_caller]
fn assert_budget_is_max_tokens(generated: &[(bool, Generation)]) {
    for (_, g) in generated {
        if let Generation::Answered {
            tokens,
            finish: FinishReason::Length,
        } = g
        {
            assert_eq!(*tokens, ANSWER_TOKENS, "{generated:?}");
        }
    }
}

#[tokio::test]
async fn regenerate_ends_both_rounds_alike_so_a_catch_does_not_show_in_the_length() {
    let b = bench().await;
    let long = b.body_longer_by(150);
    let p = b.program(OUTPUT, Some(Action::Regenerate));
    // Padding that left the body's round 40 tokens of answer, and the neutral round (its
    // instruction far shorter than the body) its whole max_tokens: a released answer of the
    // neutral length said "caught".
    let padded = b.padding_leaving(&long, 40);
    let seen = b.call(&p, &request(padded), &long).await;
    let rounds = b.observed.take();
    println!("padding {padded}: {seen:?}; rounds {rounds:?}");
    let with_body: Vec<Generation> = rounds.iter().filter(|r| !r.0).map(|r| r.1).collect();
    let neutral: Vec<Generation> = rounds.iter().filter(|r| r.0).map(|r| r.1).collect();
    assert_eq!(
        (with_body.len(), neutral.len()),
        (1, 1),
        "both rounds on every run"
    );
    assert_eq!(
        with_body, neutral,
        "padding {padded}: the neutral round ends unlike the body's ({seen:?})"
    );
    // Inside the room both rounds run; either is cut, if at all, at max_tokens.
    let _ = b.call(&p, &request(20), &long).await;
    assert_budget_is_max_tokens(&b.observed.take());
}

/// The same for a remote provider, judged in bytes against the owner's declared context.
mod remote;
