//! The declared context made true (review 29 R29-3, R29-4), with the real OpenAI-compatible
//! adapter against loopback doubles of each server kind: OpenRouter's requests pin the route
//! (`transforms: []`, no fallbacks), and a declared context above what the server's API reports
//! fails `unavailable`, the same way whatever the body and the request, before any chat request;
//! a server that does not say — or whose probe fails or answers garbage — leaves the call as it
//! was.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use skillbox_providers::context::{PROBE_MAX_BYTES, ProbeTimes};
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

/// How the double's model answers a chat request of this many tokens (prompt and `max_tokens`):
/// status and body.
type Model = Arc<dyn Fn(u64) -> (u16, String) + Send + Sync>;

/// A completion saying `text`, with the tokens it was sent.
fn completion(text: &str, tokens: u64) -> String {
    json!({
        "choices": [{"message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": tokens, "completion_tokens": 1},
    })
    .to_string()
}

/// A model of [`REAL_CONTEXT`] tokens that never refuses: a prompt over its context is cut
/// silently, as OpenRouter's `middle-out` does, and the answer says `cut` (the model can no
/// longer quote the request's first sentence), else `whole`.
fn cutting_model() -> Model {
    Arc::new(|tokens| {
        let text = if tokens > REAL_CONTEXT {
            "cut"
        } else {
            "whole"
        };
        (200, completion(text, tokens))
    })
}

struct Double {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Double {
    /// A server whose chat endpoint is [`cutting_model`] (the testkit's count, three bytes a
    /// token). Every other request is `route`'s (404 when it has none).
    async fn start(route: Route) -> Double {
        Double::serving(route, cutting_model()).await
    }

    /// A server whose chat endpoint is `model` and every other request `route`'s.
    async fn serving(route: Route, model: Model) -> Double {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let (log, route, model) = (log.clone(), route.clone(), model.clone());
                tokio::spawn(async move { serve(socket, log, route, model).await });
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

async fn serve(mut socket: TcpStream, log: Arc<Mutex<Vec<Seen>>>, route: Route, model: Model) {
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
        model(tokens)
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

/// OpenRouter's `GET /api/v1/models/{author}/{slug}/endpoints` listing `contexts`' endpoints.
fn endpoints_answer(id: &str, contexts: &[u64]) -> String {
    let endpoints: Vec<Value> = contexts
        .iter()
        .enumerate()
        .map(|(i, c)| {
            json!({"name": format!("E{i}"), "provider_name": format!("P{i}"),
                             "tag": format!("p{i}"), "context_length": c})
        })
        .collect();
    json!({"data": {"id": id, "endpoints": endpoints}}).to_string()
}

/// OpenRouter's endpoint lists: the owner's model at [`REAL_CONTEXT`], `openai/gpt-4o` at
/// 128,000, and its `GET /api/v1/models` as it lists them (what the probe read before R30-3).
fn openrouter_models() -> Route {
    Arc::new(|method, path| {
        if method != "GET" {
            return None;
        }
        match path {
            "/api/v1/models/meta-llama/llama-3-8b-instruct/endpoints" => Some((
                200,
                endpoints_answer("meta-llama/llama-3-8b-instruct", &[REAL_CONTEXT]),
            )),
            "/api/v1/models/openai/gpt-4o/endpoints" => {
                Some((200, endpoints_answer("openai/gpt-4o", &[128_000])))
            }
            "/api/v1/models" => {
                let models = json!({"data": [
                    {"id": "openai/gpt-4o", "context_length": 128000,
                     "top_provider": {"context_length": 128000}},
                    {"id": "meta-llama/llama-3-8b-instruct", "context_length": REAL_CONTEXT,
                     "top_provider": {"context_length": REAL_CONTEXT}},
                ]});
                Some((200, models.to_string()))
            }
            _ => None,
        }
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
    assert_eq!(
        probes[0].path,
        "/api/v1/models/meta-llama/llama-3-8b-instruct/endpoints"
    );
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

/// A server that does not say, or whose answer is hostile (wrong types, negative numbers), and
/// never told a context leaves the call as it was: it runs. So does a self-hosted server whose
/// probe fails (an error status, not JSON, too large); OpenRouter's failed endpoint list — it
/// is public and up whenever OpenRouter's chat is — fails the call `unavailable` instead
/// (review 30 R30-4), sending no chat request. A failed probe is not asked again on the next
/// call.
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
        let failed = status == 500 || answer == "not json" || answer.len() > PROBE_MAX_BYTES;
        let what = format!("{status} {}", &answer[..answer.len().min(60)]);
        let route: Route = Arc::new(move |_, _| Some((status, answer.clone())));
        let d = Double::start(route).await;
        let open = adapter(&d.url(), ContextSource::SelfHosted);
        let closed = adapter(&d.url(), ContextSource::OpenRouter);
        for _ in 0..2 {
            let c = open
                .complete(request("m", "be brief", 10, ROUTED_CONTEXT), Some(KEY))
                .await
                .unwrap_or_else(|e| panic!("{what} (self-hosted): {e}"));
            assert_eq!(c.text, "whole", "{what}");
            let routed = closed
                .complete(request("m", "be brief", 10, ROUTED_CONTEXT), Some(KEY))
                .await;
            match routed {
                Err(e) if failed => assert_eq!(e.failure(), ProviderFailure::Unavailable),
                Ok(c) if !failed => assert_eq!(c.text, "whole", "{what}"),
                other => panic!("{what} (OpenRouter): {other:?}"),
            }
        }
        let ran = if failed { 2 } else { 4 };
        assert_eq!(
            d.chats().len(),
            ran,
            "{what}: an OpenRouter call ran unchecked"
        );
        // Self-hosted asks twice (`/models`, `/props`), OpenRouter once, per adapter; each
        // adapter asks once for both of its calls.
        assert_eq!(d.probes().len(), 3, "{what}: {:?}", d.probes());
    }
}

/// The attack of review 30 R30-3: OpenRouter load-balances each request across the model's
/// endpoints, and `allow_fallbacks: false` does not stop it. The owner's model has two, of
/// 8,192 and 32,768 tokens (drawn alternately here); OpenRouter's model list gives the model's
/// 32,768 and the top endpoint's 32,768, so a probe of that list let the declared 32,768 pass.
/// A request drawn to the 8k endpoint is refused at 8,192 less the body, one drawn to the 32k
/// one is answered: a caller sending each padding twice finds the first refused padding — the
/// body's length. Held against the smallest endpoint, every request fails `unavailable` at
/// padding 0 whatever the body, and no chat request is sent.
#[tokio::test]
async fn a_callers_bisection_against_an_openrouter_model_with_a_smaller_endpoint_fails_unavailable()
{
    const SMALL: u64 = 8_192;
    const LARGE: u64 = 32_768;
    let model_id = "meta-llama/llama-3.1-70b-instruct";
    let route: Route = Arc::new(move |method, path| {
        if method != "GET" {
            return None;
        }
        if path == format!("/api/v1/models/{model_id}/endpoints") {
            return Some((200, endpoints_answer(model_id, &[LARGE, SMALL])));
        }
        (path == "/api/v1/models").then(|| {
            let models = json!({"data": [{"id": model_id, "context_length": LARGE,
                                          "top_provider": {"context_length": LARGE}}]});
            (200, models.to_string())
        })
    });
    let drawn = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let model: Model = Arc::new(move |tokens| {
        let n = drawn.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let context = if n.is_multiple_of(2) { SMALL } else { LARGE };
        if tokens > context {
            let refusal = json!({"error": {"code": 400, "message": format!(
                "This endpoint's maximum context length is {context} tokens. However, you \
                 requested about {tokens} tokens.")}});
            (400, refusal.to_string())
        } else {
            (200, completion("whole", tokens))
        }
    });
    let d = Double::serving(route, model).await;
    let a = adapter(&d.url(), ContextSource::OpenRouter);
    // Each padding sent twice: one request meets each endpoint.
    async fn twice(a: &OpenAiCompatible, model: &str, body: &str, padding: usize) -> Outcome {
        for _ in 0..2 {
            let outcome = call(a, model, body, padding).await;
            if outcome != Outcome::Whole {
                return outcome;
            }
        }
        Outcome::Whole
    }
    async fn edge(a: &OpenAiCompatible, model: &str, body: &str, hi: usize) -> Option<usize> {
        if twice(a, model, body, hi).await == Outcome::Whole {
            return None;
        }
        let (mut lo, mut hi) = (0usize, hi);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if twice(a, model, body, mid).await == Outcome::Whole {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Some(hi)
    }
    let hi = ROUTED_CONTEXT - 128 - ROUTED_ALLOWANCE - MAX_TOKENS as usize;
    let short = edge(&a, model_id, &body_of(9_000), hi).await;
    let long = edge(&a, model_id, &body_of(12_000), hi).await;
    println!(
        "OpenRouter model with 8k and 32k endpoints, first padding refused: 9,000-byte body \
         {short:?}, 12,000-byte body {long:?}"
    );
    assert_eq!(
        short, long,
        "the first refused padding moved with the body's length"
    );
    assert_eq!(short, Some(0), "even the shortest request fails");
    let err = a
        .complete(request(model_id, "be brief", 0, ROUTED_CONTEXT), Some(KEY))
        .await
        .expect_err("declared above the smallest endpoint");
    assert_eq!(err.failure(), ProviderFailure::Unavailable);
    assert!(d.chats().is_empty(), "a chat request reached an endpoint");
    // Declared within the smallest endpoint, every request runs wherever it is drawn.
    for _ in 0..4 {
        let c = a
            .complete(
                request_with(model_id, &body_of(1_000), 10, 4_096, SMALL as usize),
                Some(KEY),
            )
            .await
            .expect("declared within the smallest endpoint");
        assert_eq!(c.text, "whole");
    }
}

/// A vLLM endpoint answering `max_model_len` 8,192 once, then 503 to every probe, and no
/// `/props`.
fn vllm_then_503(asked: Arc<std::sync::atomic::AtomicUsize>) -> Route {
    Arc::new(move |method, path| {
        (method == "GET" && path == "/v1/models").then(|| {
            if asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                let models = json!({"object": "list",
                    "data": [{"id": "m", "object": "model", "max_model_len": 8192}]});
                (200, models.to_string())
            } else {
                (503, r#"{"error":"busy"}"#.to_owned())
            }
        })
    })
}

/// Review 30 R30-4: a context the server told stands through later probes that fail, past the
/// time it is believed fresh (injected here as 150 ms: the adapter's constructor takes the
/// times, the box runs the defaults). Before, the first failed probe after it expired let the
/// call run on the bare declaration — the window a caller polling at padding 0 waits for to
/// bisect. The probe is asked again each time (the server is not spared), and a request
/// declared within the told context still runs.
#[tokio::test]
async fn a_told_context_stands_when_the_next_probe_fails() {
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let d = Double::start(vllm_then_503(asked.clone())).await;
    let a = probing_adapter(&d, ContextSource::SelfHosted, 150, 50);
    let over = || request_with("m", "be brief", 10, 1024, 16_384);
    let err = a.complete(over(), Some(KEY)).await.expect_err("over, told");
    assert_eq!(err.failure(), ProviderFailure::Unavailable);
    for round in 1..=3 {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let outcome = a.complete(over(), Some(KEY)).await;
        assert_eq!(
            asked.load(std::sync::atomic::Ordering::SeqCst),
            round + 1,
            "the probe was asked again after it expired"
        );
        let err = outcome.expect_err("after the fresh time, the probe failing");
        assert_eq!(err.failure(), ProviderFailure::Unavailable, "round {round}");
    }
    only_within_the_told_context_runs(&d, &a, 8_192).await;
}

/// An adapter of `source` at the double's `/v1` whose findings are believed `fresh_ms` (a
/// context) and `retry_ms` (anything else): the box runs the defaults, a test shortens them.
fn probing_adapter(
    d: &Double,
    source: ContextSource,
    fresh_ms: u64,
    retry_ms: u64,
) -> OpenAiCompatible {
    let times = ProbeTimes {
        fresh: std::time::Duration::from_millis(fresh_ms),
        retry: std::time::Duration::from_millis(retry_ms),
        ..ProbeTimes::default()
    };
    adapter_timed(d, source, times)
}

/// An adapter of `source` at the double's `/v1` believing its findings for `times`.
fn adapter_timed(d: &Double, source: ContextSource, times: ProbeTimes) -> OpenAiCompatible {
    let mut options = OpenAiOptions {
        stream: false,
        context: source,
        ..OpenAiOptions::default()
    };
    options.context_times = times;
    OpenAiCompatible::new(&format!("http://{}/v1", d.addr), options).expect("adapter")
}

/// No request over the told context reached the model, and one declared at `told` runs.
async fn only_within_the_told_context_runs(d: &Double, a: &OpenAiCompatible, told: usize) {
    assert!(d.chats().is_empty(), "a request over the told context ran");
    let c = a
        .complete(request_with("m", "be brief", 10, 1024, told), Some(KEY))
        .await
        .expect("within the told context");
    assert_eq!(c.text, "whole");
}

/// Review 30 R30-4: a self-hosted server run with a key refuses the keyless probe. vLLM guards
/// `/v1` only, so its `POST /tokenize` tells `max_model_len` and the check applies; a server
/// refusing every read (llama.cpp's `/props` behind `--api-key`) and never telling a context
/// fails every judged call `unavailable` with one fixed message for the owner — never
/// silently unchecked. No probe carries the key.
#[tokio::test]
async fn a_keyed_server_is_checked_or_fails_unavailable_never_silently_unchecked() {
    let keyed_vllm: Route = Arc::new(|method, path| match (method, path) {
        (_, p) if p.starts_with("/v1/") => Some((401, r#"{"error":"Unauthorized"}"#.into())),
        ("POST", "/tokenize") => Some((
            200,
            json!({"count": 1, "max_model_len": 8192, "tokens": [64]}).to_string(),
        )),
        _ => None,
    });
    let keyed_llama: Route = Arc::new(|method, path| match (method, path) {
        ("GET", "/v1/models") => Some((
            200,
            json!({"object": "list", "data": [{"id": "m", "meta": {"n_ctx_train": 131072}}]})
                .to_string(),
        )),
        (_, "/props" | "/tokenize") => Some((401, r#"{"error":"Invalid API Key"}"#.into())),
        _ => None,
    });
    // vLLM: checked through `/tokenize`.
    let d = Double::start(keyed_vllm).await;
    let a = adapter(&format!("http://{}/v1", d.addr), ContextSource::SelfHosted);
    let err = a
        .complete(request_with("m", "be brief", 10, 1024, 16_384), Some(KEY))
        .await
        .expect_err("over vLLM's max_model_len");
    assert_eq!(err.failure(), ProviderFailure::Unavailable);
    assert!(
        err.to_string().contains("more than the provider says"),
        "{err}"
    );
    let c = a
        .complete(request_with("m", "be brief", 10, 1024, 8_192), Some(KEY))
        .await
        .expect("within vLLM's max_model_len");
    assert_eq!(c.text, "whole");
    let tokenize: Vec<Seen> = d
        .probes()
        .into_iter()
        .filter(|p| p.path == "/tokenize")
        .collect();
    assert_eq!(tokenize.len(), 1, "{:?}", d.probes());
    assert!(!tokenize[0].body.contains("be brief"), "{:?}", tokenize[0]);
    // llama.cpp behind a key: nothing tells; the call fails with the owner's words.
    let d2 = Double::start(keyed_llama).await;
    let b = adapter(&format!("http://{}/v1", d2.addr), ContextSource::SelfHosted);
    for padding in [0, 500] {
        let err = b
            .complete(
                request_with("m", "be brief", padding, 1024, 4_096),
                Some(KEY),
            )
            .await
            .expect_err("a keyed server that tells nothing");
        assert_eq!(err.failure(), ProviderFailure::Unavailable);
        assert!(err.to_string().contains("keyless read"), "{err}");
    }
    assert!(d2.chats().is_empty(), "a chat request ran unchecked");
    for probe in d.probes().iter().chain(&d2.probes()) {
        assert!(probe.header("authorization").is_none(), "{probe:?}");
        assert!(!probe.body.contains(KEY), "{probe:?}");
    }
}

/// Review 31 R31-12: a hosted OpenAI-compatible API behind a key (`openai-compatible:groq` at
/// Groq's `/openai/v1`; Together and DeepSeek alike) answers 401 to every keyless read, so it
/// never tells a context. No declaration runs unchecked there — neither the default 4,096 nor
/// the model's documented 131,072, which the box cannot tell from one above the model's: every
/// judged call fails `unavailable` with the fixed words naming what the owner can do (reach the
/// model through OpenRouter, or serve it), before any chat request, the probe asked once for all
/// of them and never with the key. A call the box does not judge (no declared context) is the
/// adapter's as before.
#[tokio::test]
async fn a_keyed_hosted_api_fails_every_judged_call_with_words_the_owner_can_follow() {
    let keyed: Route = Arc::new(|_, _| {
        let refusal = json!({"error": {"message": "Invalid API Key",
                                       "type": "invalid_request_error",
                                       "code": "invalid_api_key"}});
        Some((401, refusal.to_string()))
    });
    let d = Double::start(keyed).await;
    let id = skillbox_providers::ProviderId::OpenAiCompatible("groq".into());
    let mut settings = skillbox_providers::ProviderSettings::new(Default::default())
        .with_base_url(id.clone(), format!("http://{}/openai/v1", d.addr));
    settings.stream = false;
    let groq = skillbox_providers::build_remote(&id, &settings).expect("the registry's adapter");
    for context in [4_096, 131_072] {
        for padding in [0, 500] {
            let err = groq
                .complete(
                    request_with("llama-3.1-8b-instant", "be brief", padding, 1024, context),
                    Some(KEY),
                )
                .await
                .expect_err("a keyed hosted API never tells a context");
            assert_eq!(err.failure(), ProviderFailure::Unavailable, "{context}");
            let words = err.to_string();
            for named in ["keyless read", "hosted API", "openrouter", "vLLM /tokenize"] {
                assert!(words.contains(named), "{named}: {words}");
            }
        }
    }
    assert!(d.chats().is_empty(), "a judged call ran unchecked");
    let probes = d.probes();
    let paths: Vec<&str> = probes.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        ["/openai/v1/models", "/openai/props", "/openai/tokenize"],
        "the refusal is kept, not asked per call"
    );
    for probe in &probes {
        assert!(probe.header("authorization").is_none(), "{probe:?}");
        assert!(!probe.body.contains(KEY), "{probe:?}");
    }
    let unjudged = ChatRequest {
        system_allowance: None,
        context_tokens: None,
        ..request_with("llama-3.1-8b-instant", "be brief", 10, 1024, 4_096)
    };
    let c = groq
        .complete(unjudged, Some(KEY))
        .await
        .expect("not judged");
    assert_eq!(c.text, "whole");
    assert_eq!(
        d.chats()[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
}

/// A self-hosted server: llama.cpp's `/props` slot context (a server started `-c 4096 -np 4`
/// gives each request 1,024) and vLLM's `max_model_len` are held against the declaration
/// (4,096 is the self-hosted default); Ollama's `/api/show` `num_ctx`, and for a stock Modelfile
/// `/api/ps`'s loaded context; each sent without the key.
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
    // Stock Ollama: no Modelfile `num_ctx`, the server's default (2,048 here, as before 0.6
    // or with OLLAMA_CONTEXT_LENGTH=2048) shown by `/api/ps` for the loaded model.
    let ollama_default: Route = Arc::new(|method, path| match (method, path) {
        ("POST", "/api/show") => Some((
            200,
            json!({"model_info": {"llama.context_length": 131072}}).to_string(),
        )),
        ("GET", "/api/ps") => Some((
            200,
            json!({"models": [{"name": "m:latest", "model": "m:latest",
                               "context_length": 2048}]})
            .to_string(),
        )),
        _ => None,
    });
    for (route, source, real) in [
        (llama, ContextSource::SelfHosted, 1024),
        (vllm, ContextSource::SelfHosted, 2048),
        (ollama, ContextSource::Ollama, 2048),
        (ollama_default, ContextSource::Ollama, 2048),
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

/// Review 31 R31-8: stock Ollama (no Modelfile `num_ctx`) loaded the model at the server's
/// default, 4,096, and `/api/ps` told it; after its keep-alive unloads the model, `/api/ps`
/// lists nothing and `/api/show` gives only the trained 131,072 — an upper bound of the
/// context the next load runs with, not a context. Taken for one, it replaced the told 4,096
/// and an 8,192 declaration ran at 4,096 (the R29-3 cut edge, one call per idle gap). The told
/// context stands against the bound: both calls fail `unavailable`, no chat is sent, and the
/// probe is asked each time (fresh and retry times 0 here).
#[tokio::test]
async fn an_unloaded_ollama_model_keeps_the_context_it_told() {
    let ps_asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let asked = ps_asked.clone();
    let route: Route = Arc::new(move |method, path| match (method, path) {
        ("POST", "/api/show") => Some((
            200,
            json!({"model_info": {"llama.context_length": 131072}}).to_string(),
        )),
        ("GET", "/api/ps") => {
            let loaded = if asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                json!({"models": [{"name": "m:latest", "model": "m:latest",
                                   "context_length": 4096}]})
            } else {
                json!({"models": []})
            };
            Some((200, loaded.to_string()))
        }
        _ => None,
    });
    let d = Double::start(route).await;
    let a = probing_adapter(&d, ContextSource::Ollama, 0, 0);
    let over = || request_with("m", "be brief", 10, 1024, 8_192);
    for round in 1..=2 {
        let outcome = a.complete(over(), Some(KEY)).await;
        assert_eq!(
            ps_asked.load(std::sync::atomic::Ordering::SeqCst),
            round,
            "the probe was asked again"
        );
        assert_eq!(
            outcome.as_ref().err().map(|e| e.failure()),
            Some(ProviderFailure::Unavailable),
            "round {round}: an 8,192 declaration over the 4,096 /api/ps told: {:?}",
            outcome.as_ref().map(|c| &c.text)
        );
        let err = outcome.expect_err("over the told context");
        assert!(
            err.to_string().contains("more than the provider says"),
            "{err}"
        );
    }
    // Declared within the told context, the call runs while the model is unloaded.
    only_within_the_told_context_runs(&d, &a, 4_096).await;
}

/// Stock Ollama (no Modelfile `num_ctx`, trained 131,072) as review 32 R32-10 met it: the
/// server loads the model at its default, 4,096, and `/api/ps` shows that context only while the
/// model is loaded; its keep-alive unloads it after each idle gap. The model cuts silently at
/// its context (`cut`). The double loads the model on a load (`POST /api/generate`) and on a
/// chat; `unload` is the keep-alive passing.
struct StockOllama {
    double: Double,
    loaded: Arc<std::sync::atomic::AtomicBool>,
    /// What `/api/ps` lists for the loaded model: its context, or none (a server before
    /// 0.9.7).
    shows_context: bool,
}

const OLLAMA_DEFAULT: u64 = 4_096;

impl StockOllama {
    async fn start(shows_context: bool) -> StockOllama {
        use std::sync::atomic::{AtomicBool, Ordering};
        let loaded = Arc::new(AtomicBool::new(false));
        let (on_load, on_ps, on_chat) = (loaded.clone(), loaded.clone(), loaded.clone());
        let route: Route = Arc::new(move |method, path| match (method, path) {
            ("POST", "/api/show") => Some((
                200,
                json!({"model_info": {"general.architecture": "llama",
                                      "llama.context_length": 131072}})
                .to_string(),
            )),
            ("POST", "/api/generate") => {
                on_load.store(true, Ordering::SeqCst);
                Some((
                    200,
                    json!({"model": "m", "response": "", "done": true, "done_reason": "load"})
                        .to_string(),
                ))
            }
            ("GET", "/api/ps") => {
                let mut entry = json!({"name": "m:latest", "model": "m:latest"});
                if shows_context {
                    entry["context_length"] = json!(OLLAMA_DEFAULT);
                }
                let models: Vec<Value> = if on_ps.load(Ordering::SeqCst) {
                    vec![entry]
                } else {
                    vec![]
                };
                Some((200, json!({ "models": models }).to_string()))
            }
            _ => None,
        });
        let model: Model = Arc::new(move |tokens| {
            on_chat.store(true, Ordering::SeqCst);
            let text = if tokens > OLLAMA_DEFAULT {
                "cut"
            } else {
                "whole"
            };
            (200, completion(text, tokens))
        });
        StockOllama {
            double: Double::serving(route, model).await,
            loaded,
            shows_context,
        }
    }

    fn unload(&self) {
        self.loaded
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// One call of a patient caller: it waits for the keep-alive to unload the model first.
    async fn call_unloaded(
        &self,
        a: &OpenAiCompatible,
        body: &str,
        padding: usize,
        allowance: usize,
        declared: usize,
    ) -> Result<String, skillbox_providers::ProviderError> {
        self.unload();
        a.complete(
            request_with("m", body, padding, allowance, declared),
            Some(KEY),
        )
        .await
        .map(|c| c.text)
    }

    fn loads(&self) -> Vec<Seen> {
        self.double
            .probes()
            .into_iter()
            .filter(|p| p.path == "/api/generate")
            .collect()
    }
}

/// Review 32 R32-10: stock Ollama, the owner's declaration 16,384 over the server's default
/// 4,096. A caller calls only after each keep-alive unload, so `/api/ps` never lists the model
/// when the probe reads it and only the trained 131,072 is there. Held against it once the
/// context `/api/ps` told was a day old (the stale time, 0 here), or from the box's start
/// before any was told, each call ran at 4,096 and cut where the body ends: the R29-3
/// bisection, one call per idle gap. Now the probe loads the model as the chat would and reads
/// the context it loads with: every call fails `unavailable` at padding 0 whatever the body,
/// no chat is sent, the load carries the model's name only. The honest owner declaring 4,096
/// runs after each unload.
#[tokio::test]
async fn a_patient_caller_after_each_unload_meets_the_context_ollama_loads_the_model_with() {
    const DECLARED: usize = 16_384;
    const ALLOWANCE: usize = 8_192;
    let ollama = StockOllama::start(true).await;
    // Every probe asks again, and a context told is past its stale time at once: the day
    // after the last honest call that left the model loaded at the probe.
    let times = ProbeTimes {
        fresh: std::time::Duration::ZERO,
        retry: std::time::Duration::ZERO,
        stale: std::time::Duration::ZERO,
    };
    let a = adapter_timed(&ollama.double, ContextSource::Ollama, times);
    let hi = DECLARED - 128 - ALLOWANCE - MAX_TOKENS as usize;
    let mut edges = Vec::new();
    for len in [6_000, 7_500] {
        let body = body_of(len);
        let outcome = |r: Result<String, skillbox_providers::ProviderError>| match r {
            Ok(text) if text == "whole" => Outcome::Whole,
            Ok(_) => Outcome::Cut,
            Err(e) => Outcome::Failed(e.failure()),
        };
        let top = outcome(
            ollama
                .call_unloaded(&a, &body, hi, ALLOWANCE, DECLARED)
                .await,
        );
        let (mut lo, mut up, mut seen) = (0usize, hi, top);
        if top == Outcome::Whole {
            edges.push(None);
            continue;
        }
        while lo < up {
            let mid = lo + (up - lo) / 2;
            match outcome(
                ollama
                    .call_unloaded(&a, &body, mid, ALLOWANCE, DECLARED)
                    .await,
            ) {
                Outcome::Whole => lo = mid + 1,
                other => {
                    up = mid;
                    seen = other;
                }
            }
        }
        edges.push(Some((up, seen)));
    }
    println!(
        "stock Ollama at {OLLAMA_DEFAULT}, declared {DECLARED}, a call after each unload: \
         first request not answered whole, 6,000-byte body {:?}, 7,500-byte body {:?}",
        edges[0], edges[1]
    );
    let failed = Some((0, Outcome::Failed(ProviderFailure::Unavailable)));
    assert_eq!(
        edges,
        [failed, failed],
        "a call after an unload ran against the trained context: the edge moved with the body"
    );
    assert!(ollama.double.chats().is_empty(), "a chat request ran");
    // From the box's start (the default times, nothing told yet), the first call of an idle
    // gap fails alike.
    let fresh_box = adapter_timed(&ollama.double, ContextSource::Ollama, ProbeTimes::default());
    let err = ollama
        .call_unloaded(&fresh_box, &body_of(6_000), 0, ALLOWANCE, DECLARED)
        .await
        .expect_err("the box's first call, the model unloaded");
    assert_eq!(err.failure(), ProviderFailure::Unavailable);
    assert!(
        err.to_string().contains("more than the provider says"),
        "{err}"
    );
    assert!(ollama.double.chats().is_empty(), "a chat request ran");
    // Each probe loaded the model with its name only: no prompt, no options, no keep-alive,
    // no key.
    let loads = ollama.loads();
    assert!(loads.len() > 2, "{loads:?}");
    for load in &loads {
        let sent: Value = serde_json::from_str(&load.body).expect("the load's body");
        assert_eq!(sent, json!({"model": "m", "stream": false}), "{load:?}");
        assert!(load.header("authorization").is_none(), "{load:?}");
    }
    // The honest owner: declared at the server's default, it runs after every unload.
    let honest = adapter_timed(&ollama.double, ContextSource::Ollama, times);
    for _ in 0..3 {
        let text = ollama
            .call_unloaded(&honest, "be brief", 10, 1_024, OLLAMA_DEFAULT as usize)
            .await
            .expect("declared within the context Ollama loads the model with");
        assert_eq!(text, "whole");
    }
    assert_eq!(ollama.double.chats().len(), 3);
}

/// Review 32 R32-10: an Ollama that shows no loaded context even after the probe loaded the
/// model (a server before 0.9.7, whose `/api/ps` has no `context_length`; likewise a failed
/// load or `OLLAMA_KEEP_ALIVE=0`) never told one: the trained context alone shows no
/// declaration fits, so every judged call fails `unavailable` with words naming what the owner
/// can do — before, it was held against 131,072 and a declaration over the server's default
/// ran. A model whose Modelfile sets `num_ctx` is held against it and is never loaded by the
/// probe; a call the box does not judge runs as before.
#[tokio::test]
async fn an_ollama_that_never_shows_the_loaded_context_fails_judged_calls_with_words_the_owner_can_follow()
 {
    let old = StockOllama::start(false).await;
    assert!(!old.shows_context);
    let a = adapter_timed(&old.double, ContextSource::Ollama, ProbeTimes::default());
    for declared in [2_048, 4_096, 16_384] {
        for padding in [0, 500] {
            let err = old
                .call_unloaded(&a, "be brief", padding, 1_024, declared)
                .await
                .expect_err("no context shown");
            assert_eq!(err.failure(), ProviderFailure::Unavailable, "{declared}");
            let words = err.to_string();
            for named in ["does not show", "num_ctx", "Modelfile", "0.9.7"] {
                assert!(words.contains(named), "{named}: {words}");
            }
        }
    }
    assert!(old.double.chats().is_empty(), "a judged call ran unchecked");
    assert_eq!(
        old.loads().len(),
        1,
        "the finding is kept for the retry time"
    );
    let unjudged = ChatRequest {
        system_allowance: None,
        context_tokens: None,
        ..request_with("m", "be brief", 10, 1_024, 4_096)
    };
    let c = a.complete(unjudged, Some(KEY)).await.expect("not judged");
    assert_eq!(c.text, "whole");
    // A Modelfile `num_ctx`: what `/v1` runs with, read from `/api/show`; nothing loaded.
    let route: Route = Arc::new(|method, path| {
        (method == "POST" && path == "/api/show").then(|| {
            let show = json!({"parameters": "num_ctx 8192",
                              "model_info": {"llama.context_length": 131072}});
            (200, show.to_string())
        })
    });
    let d = Double::start(route).await;
    let b = adapter_timed(&d, ContextSource::Ollama, ProbeTimes::default());
    let err = b
        .complete(request_with("m", "be brief", 10, 1_024, 16_384), Some(KEY))
        .await
        .expect_err("over the Modelfile's num_ctx");
    assert!(
        err.to_string().contains("more than the provider says"),
        "{err}"
    );
    let c = b
        .complete(request_with("m", "be brief", 10, 1_024, 8_192), Some(KEY))
        .await
        .expect("within the Modelfile's num_ctx");
    assert_eq!(c.text, "whole");
    assert!(
        d.probes().iter().all(|p| p.path != "/api/generate"),
        "{:?}",
        d.probes()
    );
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
