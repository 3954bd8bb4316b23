//! The declared context made true (review 29 R29-3, R29-4), with the real OpenAI-compatible
//! adapter against loopback doubles of each server kind: OpenRouter's requests pin the route
//! (`transforms: []`, no fallbacks), and a declared context above what the server's API reports
//! fails `unavailable`, the same way whatever the body and the request, before any chat request;
//! a server that does not say — or whose probe fails or answers garbage — leaves the call as it
//! was.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use skillbox_providers::openai::{OpenAiCompatible, OpenAiOptions};
use skillbox_providers::{ChatRequest, ContextSource, Provider, ProviderFailure};
use skillbox_testkit::provider::approx_prompt_tokens;

use crate::adapters::{Request, read_request};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

const KEY: &str = "sk-or-v1-CONTEXTKEY-0123456789abcdef";

/// OpenRouter's defaults in the box's program (`skillbox_jc::program::ROUTED_*`): what an owner
/// who never ran `skill set` declares for any OpenRouter model.
const ROUTED_CONTEXT: usize = 32_768;
const ROUTED_ALLOWANCE: usize = 16_384;
/// The owner's model's real context: an 8k OpenRouter model (Llama-3-8B-Instruct, Gemma-2).
const REAL_CONTEXT: u64 = 8_192;
const MAX_TOKENS: u32 = 100;

/// One request the double saw.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// How the double answers a request other than the chat one: status and body.
type Route = Arc<dyn Fn(&str, &str) -> Option<(u16, String)> + Send + Sync>;

struct Double {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Double {
    /// A server whose chat endpoint is a model of [`REAL_CONTEXT`] tokens (the testkit's count,
    /// three bytes a token) that never refuses: a prompt over its context is cut silently, as
    /// OpenRouter's `middle-out` does, and the answer says `cut` (the model can no longer quote
    /// the request's first sentence), else `whole`. Every other request is `route`'s (404 when
    /// it has none).
    async fn start(route: Route) -> Double {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let (log, route) = (log.clone(), route.clone());
                tokio::spawn(async move { serve(socket, log, route).await });
            }
        });
        Double { addr, seen }
    }

    fn url(&self) -> String {
        format!("http://{}/api/v1", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn chats(&self) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.path.ends_with("/chat/completions"))
            .collect()
    }

    fn probes(&self) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| !s.path.ends_with("/chat/completions"))
            .collect()
    }
}

async fn serve(mut socket: TcpStream, log: Arc<Mutex<Vec<Seen>>>, route: Route) {
    let Some(Request {
        method,
        path,
        headers,
        body,
    }) = read_request(&mut socket).await
    else {
        return;
    };
    log.lock().unwrap_or_else(|p| p.into_inner()).push(Seen {
        method: method.clone(),
        path: path.clone(),
        headers,
        body: body.clone(),
    });
    let (status, answer) = if path.ends_with("/chat/completions") {
        let sent: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let tokens = approx_prompt_tokens(&sent) + sent["max_tokens"].as_u64().unwrap_or(0);
        let text = if tokens > REAL_CONTEXT {
            "cut"
        } else {
            "whole"
        };
        let answer = json!({
            "choices": [{"message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": tokens, "completion_tokens": 1},
        });
        (200, answer.to_string())
    } else {
        route(&method, &path).unwrap_or((404, r#"{"error":"not found"}"#.into()))
    };
    let out = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
        answer.len()
    );
    let _ = socket.write_all(out.as_bytes()).await;
    let _ = socket.shutdown().await;
}

/// OpenRouter's `GET /api/v1/models` naming the owner's model at [`REAL_CONTEXT`] (and another).
fn openrouter_models() -> Route {
    Arc::new(|method, path| {
        (method == "GET" && path == "/api/v1/models").then(|| {
            let models = json!({"data": [
                {"id": "openai/gpt-4o", "context_length": 128000,
                 "top_provider": {"context_length": 128000}},
                {"id": "meta-llama/llama-3-8b-instruct", "context_length": REAL_CONTEXT,
                 "top_provider": {"context_length": REAL_CONTEXT}},
            ]});
            (200, models.to_string())
        })
    })
}

fn adapter(url: &str, context: ContextSource) -> OpenAiCompatible {
    let mut options = OpenAiOptions::openrouter(Default::default());
    options.stream = false;
    options.context = context;
    OpenAiCompatible::new(url, options).expect("adapter")
}

/// What the box sends a remote provider: the owner's `body` behind its allowance, the caller's
/// request of `padding` bytes, the declared `context`.
fn request(model: &str, body: &str, padding: usize, context: usize) -> ChatRequest {
    request_with(model, body, padding, ROUTED_ALLOWANCE, context)
}

/// [`request`] under another body allowance.
fn request_with(
    model: &str,
    body: &str,
    padding: usize,
    allowance: usize,
    context: usize,
) -> ChatRequest {
    ChatRequest {
        system: body.into(),
        user: "n".repeat(padding),
        model: model.into(),
        max_tokens: MAX_TOKENS,
        temperature: 0.0,
        seed: None,
        system_allowance: Some(allowance),
        context_tokens: Some(context),
    }
}

/// A body of `len` bytes.
fn body_of(len: usize) -> String {
    "Answer in one line. ".repeat(len / 20 + 1)[..len].to_owned()
}

/// What the caller sees of one call: the failure's code, or whether the answer was whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Whole,
    Cut,
    Failed(ProviderFailure),
}

async fn call(a: &OpenAiCompatible, model: &str, body: &str, padding: usize) -> Outcome {
    match a
        .complete(request(model, body, padding, ROUTED_CONTEXT), Some(KEY))
        .await
    {
        Ok(c) if c.text == "whole" => Outcome::Whole,
        Ok(_) => Outcome::Cut,
        Err(e) => Outcome::Failed(e.failure()),
    }
}

/// The shortest padding in `0..=hi` whose call is not a whole answer, by bisection, and what it
/// was.
async fn first_not_whole(
    a: &OpenAiCompatible,
    model: &str,
    body: &str,
    hi: usize,
) -> Option<(usize, Outcome)> {
    let top = call(a, model, body, hi).await;
    if top == Outcome::Whole {
        return None;
    }
    let (mut lo, mut hi, mut seen) = (0usize, hi, top);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match call(a, model, body, mid).await {
            Outcome::Whole => lo = mid + 1,
            other => {
                hi = mid;
                seen = other;
            }
        }
    }
    Some((hi, seen))
}

/// Every OpenRouter request turns `middle-out` off and pins the route, judged by the box or
/// not; a server that is not OpenRouter gets neither field.
#[tokio::test]
async fn openrouter_requests_disable_middle_out() {
    let d = Double::start(openrouter_models()).await;
    let a = adapter(&d.url(), ContextSource::OpenRouter);
    let model = "openai/gpt-4o";
    let judged = request(model, "be brief", 10, ROUTED_CONTEXT);
    let free = ChatRequest {
        system_allowance: None,
        context_tokens: None,
        ..judged.clone()
    };
    for r in [judged, free] {
        let c = a.complete(r, Some(KEY)).await.expect("an answer");
        assert_eq!(c.text, "whole");
    }
    let chats = d.chats();
    assert_eq!(chats.len(), 2);
    for chat in &chats {
        let sent: Value = serde_json::from_str(&chat.body).expect("json");
        assert_eq!(sent["transforms"], json!([]), "{sent}");
        assert_eq!(sent["provider"]["allow_fallbacks"], json!(false), "{sent}");
        assert_eq!(
            chat.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
    }
    let other = Double::start(openrouter_models()).await;
    let plain = adapter(&other.url(), ContextSource::SelfHosted);
    plain
        .complete(request_with(model, "be brief", 10, 1024, 4096), None)
        .await
        .expect("an answer");
    let sent: Value = serde_json::from_str(&other.chats()[0].body).expect("json");
    assert!(sent.get("transforms").is_none() && sent.get("provider").is_none());
}

/// The attack (R29-3): an owner on an 8k OpenRouter model with the defaults (16,384 / 32,768).
/// OpenRouter cut an over-long prompt's middle silently, so the caller, bisecting its request's
/// length for the first answer that can no longer quote its first sentence, found
/// `8,192 - body` — the body's length, some 1,000 tokens apart for bodies of 9,000 and 12,000
/// bytes. With the probe the declared 32,768 is above the 8,192 OpenRouter reports: every
/// request fails `unavailable` the same way, the shortest first, and no chat request is sent;
/// the probe carries no key and is asked once.
#[tokio::test]
async fn a_callers_bisection_against_a_silently_cutting_8k_openrouter_model_fails_unavailable_whatever_the_body()
 {
    let d = Double::start(openrouter_models()).await;
    let a = adapter(&d.url(), ContextSource::OpenRouter);
    let model = "meta-llama/llama-3-8b-instruct";
    let hi = ROUTED_CONTEXT - 128 - ROUTED_ALLOWANCE - MAX_TOKENS as usize;
    let short = first_not_whole(&a, model, &body_of(9_000), hi).await;
    let long = first_not_whole(&a, model, &body_of(12_000), hi).await;
    println!(
        "8k OpenRouter model, first request not answered whole: 9,000-byte body {short:?}, 12,000-byte body {long:?}"
    );
    let (Some(short), Some(long)) = (short, long) else {
        panic!("every request up to {hi} bytes was answered whole: {short:?} {long:?}");
    };
    assert_eq!(
        short.0, long.0,
        "the first request not answered whole moved with the body's length"
    );
    assert_eq!(short.1, Outcome::Failed(ProviderFailure::Unavailable));
    assert_eq!(long.1, short.1);
    assert_eq!(short.0, 0, "even the shortest request fails");
    assert!(d.chats().is_empty(), "a chat request reached the model");
    let probes = d.probes();
    assert_eq!(probes.len(), 1, "the probe is cached: {probes:?}");
    assert_eq!(probes[0].method, "GET");
    assert_eq!(probes[0].path, "/api/v1/models");
    assert!(
        probes[0].header("authorization").is_none() && !probes[0].body.contains(KEY),
        "the probe carries the key"
    );
    // The owner who declares the model's context runs; another model, listed larger, runs.
    let fits = a
        .complete(
            request_with(model, &body_of(1_000), 10, 4_096, REAL_CONTEXT as usize),
            Some(KEY),
        )
        .await
        .expect("declared within the real context");
    assert_eq!(fits.text, "whole");
    let gpt = call(&a, "openai/gpt-4o", &body_of(12_000), 100).await;
    assert_eq!(gpt, Outcome::Whole);
}

/// A server that does not say, whose probe fails, or whose answer is hostile (huge, wrong
/// types, negative numbers) leaves the call as it was: it runs. A failed probe is not asked
/// again on the next call.
#[tokio::test]
async fn a_server_that_does_not_say_or_answers_garbage_leaves_the_call_as_it_was() {
    let huge = format!(
        r#"{{"data":[{{"id":"m","context_length":8192,"pad":"{}"}}]}}"#,
        "x".repeat(9 << 20)
    );
    let answers: Vec<(u16, String)> = vec![
        (404, "{}".into()),
        (500, "{}".into()),
        (200, "not json".into()),
        (200, huge),
        (
            200,
            json!({"data": [{"id": "m", "context_length": -8192,
                              "top_provider": {"context_length": "8192"}}]})
            .to_string(),
        ),
        (200, json!({"data": {"id": "m"}}).to_string()),
        (
            200,
            json!({"data": [{"id": "other", "context_length": 8}]}).to_string(),
        ),
    ];
    for (status, answer) in answers {
        let what = format!("{status} {}", &answer[..answer.len().min(60)]);
        let route: Route = Arc::new(move |_, _| Some((status, answer.clone())));
        let d = Double::start(route).await;
        for source in [ContextSource::OpenRouter, ContextSource::SelfHosted] {
            let a = adapter(&d.url(), source);
            for _ in 0..2 {
                let c = a
                    .complete(request("m", "be brief", 10, ROUTED_CONTEXT), Some(KEY))
                    .await
                    .unwrap_or_else(|e| panic!("{what} ({source:?}): {e}"));
                assert_eq!(c.text, "whole", "{what}");
            }
        }
        // OpenRouter asks once, self-hosted twice (`/models`, `/props`), per adapter; each
        // adapter asks once for both of its calls.
        assert_eq!(d.probes().len(), 3, "{what}: {:?}", d.probes());
    }
}

/// A self-hosted server: llama.cpp's `/props` slot context (a server started `-c 4096 -np 4`
/// gives each request 1,024) and vLLM's `max_model_len` are held against the declaration
/// (4,096 is the self-hosted default); Ollama's `/api/show` `num_ctx`, sent without the key.
#[tokio::test]
async fn self_hosted_servers_report_their_context() {
    let llama: Route = Arc::new(|method, path| {
        (method == "GET" && path == "/props").then(|| {
            let props = json!({"default_generation_settings": {"n_ctx": 1024}, "total_slots": 4});
            (200, props.to_string())
        })
    });
    let vllm: Route = Arc::new(|method, path| {
        (method == "GET" && path == "/v1/models").then(|| {
            let models = json!({"object": "list",
                "data": [{"id": "m", "object": "model", "max_model_len": 2048}]});
            (200, models.to_string())
        })
    });
    let ollama: Route = Arc::new(|method, path| {
        (method == "POST" && path == "/api/show").then(|| {
            let show = json!({"parameters": "num_ctx 2048",
                              "model_info": {"llama.context_length": 131072}});
            (200, show.to_string())
        })
    });
    for (route, source, real) in [
        (llama, ContextSource::SelfHosted, 1024),
        (vllm, ContextSource::SelfHosted, 2048),
        (ollama, ContextSource::Ollama, 2048),
    ] {
        let d = Double::start(route).await;
        let url = format!("http://{}/v1", d.addr);
        let a = adapter(&url, source);
        for padding in [0, 1000] {
            let err = a
                .complete(
                    request_with("m", "be brief", padding, 1024, 4096),
                    Some(KEY),
                )
                .await
                .expect_err("declared above the real context");
            assert_eq!(err.failure(), ProviderFailure::Unavailable, "{source:?}");
        }
        let short = request_with("m", "be brief", 10, 256, real);
        let c = a.complete(short, Some(KEY)).await.expect("declared within");
        assert_eq!(c.text, "whole");
        assert_eq!(d.chats().len(), 1, "{source:?}");
        for probe in d.probes() {
            assert!(probe.header("authorization").is_none(), "{probe:?}");
            assert!(!probe.body.contains(KEY), "{probe:?}");
        }
    }
}

/// OpenAI: no API tells a model's context; the table of known smaller models refuses the
/// default 128,000 for `gpt-4` without asking anything, and lets a model it does not list run.
#[tokio::test]
async fn a_known_small_openai_model_under_the_default_context_fails_unavailable() {
    let d = Double::start(Arc::new(|_, _| None)).await;
    let a = adapter(&format!("http://{}/v1", d.addr), ContextSource::OpenAi);
    for model in ["gpt-4", "gpt-4-0613", "gpt-3.5-turbo"] {
        let err = a
            .complete(request(model, "be brief", 10, 128_000), Some(KEY))
            .await
            .expect_err(model);
        assert_eq!(err.failure(), ProviderFailure::Unavailable, "{model}");
    }
    let c = a
        .complete(request("gpt-4o", "be brief", 10, 128_000), Some(KEY))
        .await
        .expect("gpt-4o");
    assert_eq!(c.text, "whole");
    let ok = a
        .complete(
            request_with("gpt-4", "be brief", 10, 4_096, 8_192),
            Some(KEY),
        )
        .await
        .expect("gpt-4 declared at 8,192");
    assert_eq!(ok.text, "whole");
    assert!(d.probes().is_empty(), "OpenAI was asked for a model list");
}

/// Anthropic: likewise a table (its API does not tell a model's context): `claude-2.0` (100,000)
/// under the default 128,000 fails `unavailable` before anything is sent.
#[tokio::test]
async fn a_known_small_anthropic_model_under_the_default_context_fails_unavailable() {
    let d = Double::start(Arc::new(|_, _| None)).await;
    let a = skillbox_providers::anthropic::Anthropic::new(
        &format!("http://{}", d.addr),
        Default::default(),
    )
    .expect("adapter");
    let err = a
        .complete(request("claude-2.0", "be brief", 10, 128_000), Some(KEY))
        .await
        .expect_err("claude-2.0 over-declared");
    assert_eq!(err.failure(), ProviderFailure::Unavailable);
    assert!(d.seen().is_empty(), "the provider was asked");
}
