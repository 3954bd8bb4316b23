//! The remote adapters against a loopback HTTP server that speaks each wire format (a raw
//! `TcpListener`, so the tests control every byte and every pause of an answer).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use skillbox_providers::anthropic::Anthropic;
use skillbox_providers::openai::{OpenAiCompatible, OpenAiOptions};
use skillbox_providers::{
    ChatRequest, Completion, FinishReason, HttpOptions, Provider, ProviderError, ProviderFailure,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const KEY: &str = "sk-or-v1-TESTKEY-0123456789abcdef";

#[derive(Clone, Debug)]
struct Seen {
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

#[derive(Clone)]
enum Reply {
    /// A whole answer.
    Full {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: String,
    },
    /// A 200 event stream written piece by piece, with a pause before each piece.
    Events(Vec<(u64, String)>),
    /// Accept the request and never answer (within the test).
    Hang,
}

fn json(status: u16, body: &str) -> Reply {
    Reply::Full {
        status,
        headers: vec![("content-type", "application/json".into())],
        body: body.into(),
    }
}

struct Loopback {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Loopback {
    /// Serves `replies` in order, one per request; further requests get a 500.
    async fn start(replies: Vec<Reply>) -> Loopback {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            let mut replies = replies.into_iter();
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let reply = replies
                    .next()
                    .unwrap_or_else(|| json(500, r#"{"error":{"message":"script exhausted"}}"#));
                let log = log.clone();
                tokio::spawn(async move { serve_one(socket, reply, log).await });
            }
        });
        Loopback { addr, seen }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// One HTTP/1.1 request as the loopback servers of this binary read it.
pub(crate) struct Request {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// Reads one request (head and a `content-length` body) off `socket`; `None` if the peer
/// closed before the head ended.
pub(crate) async fn read_request(socket: &mut TcpStream) -> Option<Request> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos;
        }
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_owned();
    let path = request_line.next().unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    Some(Request {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).to_string(),
    })
}

async fn serve_one(mut socket: TcpStream, reply: Reply, log: Arc<Mutex<Vec<Seen>>>) {
    let Some(Request {
        path,
        headers,
        body,
        ..
    }) = read_request(&mut socket).await
    else {
        return;
    };
    log.lock().unwrap().push(Seen {
        path,
        headers,
        body,
    });
    match reply {
        Reply::Full {
            status,
            headers,
            body,
        } => {
            let mut out = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            for (n, v) in headers {
                out.push_str(&format!("{n}: {v}\r\n"));
            }
            out.push_str("\r\n");
            out.push_str(&body);
            let _ = socket.write_all(out.as_bytes()).await;
        }
        Reply::Events(parts) => {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n";
            if socket.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            for (pause_ms, part) in parts {
                tokio::time::sleep(Duration::from_millis(pause_ms)).await;
                if socket.write_all(part.as_bytes()).await.is_err() {
                    return;
                }
                let _ = socket.flush().await;
            }
        }
        Reply::Hang => {
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
    }
    let _ = socket.shutdown().await;
}

fn http() -> HttpOptions {
    HttpOptions {
        timeout: Duration::from_secs(3),
        connect_timeout: Duration::from_secs(1),
        max_retries: 2,
        max_retry_wait: Duration::from_secs(5),
        backoff: Duration::from_millis(10),
    }
}

fn request() -> ChatRequest {
    ChatRequest {
        system: "You answer in one word.".into(),
        user: "Capital of France?".into(),
        model: "openai/gpt-4o-mini".into(),
        max_tokens: 32,
        temperature: 0.3,
        seed: Some(7),
        system_allowance: None,
        context_tokens: None,
    }
}

/// A plain OpenAI-compatible client of `url` with `http`, streaming or not.
fn openai_at(url: &str, http: HttpOptions, stream: bool) -> OpenAiCompatible {
    let options = OpenAiOptions {
        http,
        stream,
        ..OpenAiOptions::default()
    };
    OpenAiCompatible::new(url, options).unwrap()
}

fn openrouter(server: &Loopback, stream: bool) -> OpenAiCompatible {
    let mut options = OpenAiOptions::openrouter(http());
    options.stream = stream;
    OpenAiCompatible::new(&server.url("/api/v1"), options).unwrap()
}

/// The `Retry-After` a rate-limit refusal carried; None for any other error.
fn retry_after(err: &ProviderError) -> Option<Option<u64>> {
    match err {
        ProviderError::RateLimited { retry_after_secs } => Some(*retry_after_secs),
        _ => None,
    }
}

/// A 429 with `Retry-After: secs` and no body.
fn rate_limited(secs: &str) -> Reply {
    Reply::Full {
        status: 429,
        headers: vec![("retry-after", secs.into())],
        body: String::new(),
    }
}

/// What an OpenRouter adapter (streaming or not) at `server` completes.
async fn openrouter_done(server: &Loopback, stream: bool) -> Completion {
    openrouter(server, stream)
        .complete(request(), Some(KEY))
        .await
        .unwrap()
}

/// What an OpenRouter adapter (streaming or not) at `server` fails with.
async fn openrouter_error(server: &Loopback, stream: bool) -> ProviderError {
    openrouter(server, stream)
        .complete(request(), Some(KEY))
        .await
        .unwrap_err()
}

/// `$err` is the error `$kind`, and holds the key nowhere ([`assert_no_key`]).
macro_rules! assert_keyless_err {
    ($err:expr, $kind:pat) => {{
        let err = &$err;
        assert!(matches!(err, $kind), "{err:?}");
        assert_no_key(err);
    }};
}

/// The answer is "Paris", stopped, with these (prompt, completion) token counts and cost.
fn assert_paris(done: &Completion, tokens: (u64, u64), cost: Option<f64>) {
    assert_eq!(done.text, "Paris");
    assert_eq!(done.finish, FinishReason::Stop);
    assert_eq!(
        (done.usage.prompt_tokens, done.usage.completion_tokens),
        tokens
    );
    assert_eq!(done.usage.cost, cost);
}

/// The key must appear in no error: neither its message nor its debug form.
fn assert_no_key(err: &ProviderError) {
    assert!(
        !err.to_string().contains(KEY),
        "key in error message: {err}"
    );
    assert!(
        !format!("{err:?}").contains(KEY),
        "key in error debug: {err:?}"
    );
    assert!(
        !err.to_string().contains("TESTKEY"),
        "part of the key in error: {err}"
    );
}

const OK_JSON: &str = r#"{"id":"gen-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Paris"},"finish_reason":"stop"}],"usage":{"prompt_tokens":21,"completion_tokens":2,"total_tokens":23,"cost":0.0000123}}"#;

#[tokio::test]
async fn openrouter_streamed_success_with_usage_cost_and_keepalives() {
    let server = Loopback::start(vec![Reply::Events(vec![
        (0, ": OPENROUTER PROCESSING\n\n".into()),
        (50, ": OPENROUTER PROCESSING\n\n".into()),
        (0, "data: {\"id\":\"gen-1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Pa\"},\"finish_reason\":null}]}\n\n".into()),
        (20, "data: {\"id\":\"gen-1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ris\"},\"finish_reason\":\"stop\"}]}\n\n".into()),
        (0, "data: {\"id\":\"gen-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":21,\"completion_tokens\":2,\"total_tokens\":23,\"cost\":0.0000123}}\n\n".into()),
        (0, "data: [DONE]\n\n".into()),
    ])])
    .await;
    let done = openrouter_done(&server, true).await;
    assert_paris(&done, (21, 2), Some(0.0000123));

    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    let req = &seen[0];
    assert_eq!(req.path, "/api/v1/chat/completions");
    assert_eq!(
        req.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(req.header("x-openrouter-title"), Some("skillbox"));
    assert!(
        req.header("http-referer")
            .is_some_and(|v| v.starts_with("http"))
    );
    // The key travels in the Authorization header only.
    assert!(!req.body.contains(KEY) && !req.path.contains(KEY));
    let body: serde_json::Value = serde_json::from_str(&req.body).unwrap();
    assert_eq!(body["max_tokens"], 32);
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["model"], "openai/gpt-4o-mini");
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(body["messages"][1]["content"], "Capital of France?");
    assert_eq!(body["seed"], 7);
}

#[tokio::test]
async fn openai_whole_answer_with_usage_and_no_key_for_keyless_servers() {
    let server = Loopback::start(vec![json(200, OK_JSON)]).await;
    let provider = openai_at(&server.url("/v1"), http(), false);
    let done = provider.complete(request(), None).await.unwrap();
    assert_eq!(done.text, "Paris");
    assert_eq!(done.usage.completion_tokens, 2);
    let seen = server.seen();
    assert_eq!(seen[0].path, "/v1/chat/completions");
    assert_eq!(seen[0].header("authorization"), None);
    assert_eq!(seen[0].header("x-openrouter-title"), None);
    let body: serde_json::Value = serde_json::from_str(&seen[0].body).unwrap();
    assert_eq!(body["max_tokens"], 32);
    assert!(body.get("stream").is_none());
}

#[tokio::test]
async fn unauthorized_is_not_retried_and_hides_the_key() {
    // The server echoes the key, as some do in their 401 text.
    let server = Loopback::start(vec![json(
        401,
        &format!(r#"{{"error":{{"message":"Incorrect API key provided: {KEY}","code":401}}}}"#),
    )])
    .await;
    let err = openrouter_error(&server, true).await;
    assert_keyless_err!(err, ProviderError::Unauthorized { status: 401 });
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn rate_limit_retry_after_is_honoured_then_succeeds() {
    let limited = Reply::Full {
        status: 429,
        headers: vec![
            ("retry-after", "1".into()),
            ("content-type", "application/json".into()),
        ],
        body: r#"{"error":{"message":"Rate limit exceeded","code":429}}"#.into(),
    };
    let server = Loopback::start(vec![limited, json(200, OK_JSON)]).await;
    let started = Instant::now();
    let done = openrouter_done(&server, false).await;
    assert_eq!(done.text, "Paris");
    assert_eq!(server.seen().len(), 2);
    // The retry waited for Retry-After (1 s), not the 10 ms backoff.
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn rate_limit_exhausts_bounded_retries() {
    let server = Loopback::start(vec![rate_limited("0"); 4]).await;
    let err = openrouter_error(&server, false).await;
    assert_eq!(retry_after(&err), Some(Some(0)), "{err:?}");
    assert_no_key(&err);
    // One try and max_retries (2) retries, then it gives up.
    assert_eq!(server.seen().len(), 3);
}

#[tokio::test]
async fn retry_after_beyond_the_limit_fails_at_once() {
    let limited = rate_limited("3600");
    let server = Loopback::start(vec![limited, json(200, OK_JSON)]).await;
    let err = openrouter_error(&server, false).await;
    assert_eq!(retry_after(&err), Some(Some(3600)), "{err:?}");
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn server_errors_are_retried_then_reported() {
    let server = Loopback::start(vec![json(503, "{}"), json(200, OK_JSON)]).await;
    let done = openrouter_done(&server, false).await;
    assert_eq!(done.text, "Paris");
    assert_eq!(server.seen().len(), 2);

    let server = Loopback::start(vec![
        json(500, "{}"),
        json(502, "{}"),
        json(500, &format!("oops {KEY}")),
    ])
    .await;
    let err = openrouter_error(&server, false).await;
    assert_keyless_err!(err, ProviderError::Upstream { status: 500 });
    assert_eq!(server.seen().len(), 3);

    // A 4xx other than 401/403/429 is final.
    let server = Loopback::start(vec![json(400, "{}"), json(200, OK_JSON)]).await;
    let err = openrouter_error(&server, false).await;
    assert!(
        matches!(err, ProviderError::Upstream { status: 400 }),
        "{err:?}"
    );
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn error_mid_stream_after_200_is_reported_not_retried() {
    let server = Loopback::start(vec![Reply::Events(vec![
        (0, ": OPENROUTER PROCESSING\n\n".into()),
        (0, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Par\"},\"finish_reason\":null}]}\n\n".into()),
        (30, format!("data: {{\"error\":{{\"code\":\"server_error\",\"message\":\"Provider disconnected; key {KEY}\"}},\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"\"}},\"finish_reason\":\"error\"}}]}}\n\n")),
    ])])
    .await;
    let err = openrouter_error(&server, true).await;
    assert_eq!(err.failure(), ProviderFailure::UpstreamError, "{err:?}");
    // The provider's words are not carried at all, let alone the key they quote.
    assert!(!format!("{err} {err:?}").contains("Provider disconnected"));
    assert_no_key(&err);
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn stream_closed_early_is_an_error() {
    let server = Loopback::start(vec![Reply::Events(vec![(
        0,
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Par\"},\"finish_reason\":null}]}\n\n".into(),
    )])])
    .await;
    let err = openrouter_error(&server, true).await;
    assert_eq!(err.failure(), ProviderFailure::Protocol, "{err:?}");
}

#[tokio::test]
async fn error_object_in_a_200_body() {
    let server = Loopback::start(vec![json(
        200,
        r#"{"error":{"code":"moderation","message":"Input was flagged"}}"#,
    )])
    .await;
    let err = openrouter_error(&server, false).await;
    assert_eq!(err.failure(), ProviderFailure::UpstreamError, "{err:?}");
    assert!(!format!("{err} {err:?}").contains("flagged"));
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn timeout_is_reported_after_bounded_tries() {
    let server = Loopback::start(vec![Reply::Hang, Reply::Hang]).await;
    let tight = HttpOptions {
        timeout: Duration::from_millis(300),
        max_retries: 1,
        ..http()
    };
    let provider = openai_at(&server.url("/v1"), tight, true);
    let started = Instant::now();
    let err = provider.complete(request(), Some(KEY)).await.unwrap_err();
    assert_keyless_err!(err, ProviderError::Timeout { .. });
    assert_eq!(server.seen().len(), 2);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn timeout_while_streaming() {
    let server = Loopback::start(vec![Reply::Events(vec![
        (
            0,
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Par\"}}]}\n\n".into(),
        ),
        (10_000, "data: [DONE]\n\n".into()),
    ])])
    .await;
    let tight = HttpOptions {
        timeout: Duration::from_millis(400),
        max_retries: 0,
        ..http()
    };
    let provider = openai_at(&server.url("/v1"), tight, true);
    let err = provider.complete(request(), Some(KEY)).await.unwrap_err();
    assert!(matches!(err, ProviderError::Timeout { .. }), "{err:?}");
}

#[tokio::test]
async fn redirect_is_refused_and_its_target_never_contacted() {
    let elsewhere = Loopback::start(vec![json(200, OK_JSON)]).await;
    for status in [301u16, 302, 307, 308] {
        let server = Loopback::start(vec![Reply::Full {
            status,
            headers: vec![("location", elsewhere.url("/v1/chat/completions"))],
            body: String::new(),
        }])
        .await;
        let err = openrouter_error(&server, false).await;
        assert!(matches!(err, ProviderError::Redirect), "{status}: {err:?}");
        assert_eq!(server.seen().len(), 1, "a redirect is not retried");
    }
    assert!(
        elsewhere.seen().is_empty(),
        "the redirect target was contacted"
    );

    let server = Loopback::start(vec![Reply::Full {
        status: 307,
        headers: vec![("location", elsewhere.url("/v1/messages"))],
        body: String::new(),
    }])
    .await;
    let err = Anthropic::new(&server.url(""), http())
        .unwrap()
        .complete(request(), Some(KEY))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Redirect), "{err:?}");
    assert!(elsewhere.seen().is_empty());
}

#[tokio::test]
async fn connection_refused_is_a_transport_error_without_the_key() {
    // Bind then drop, so the port is (almost surely) closed.
    let addr = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let tight = HttpOptions {
        max_retries: 1,
        ..http()
    };
    let provider = openai_at(&format!("http://{addr}/v1"), tight, true);
    let err = provider.complete(request(), Some(KEY)).await.unwrap_err();
    assert_keyless_err!(err, ProviderError::Transport(_));
}

#[tokio::test]
async fn a_key_that_is_not_a_header_value_is_refused_before_sending() {
    let server = Loopback::start(vec![json(200, OK_JSON)]).await;
    let err = openrouter(&server, false)
        .complete(request(), Some("sk-bad\nInjected: yes"))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::InvalidRequest(_)), "{err:?}");
    assert!(!err.to_string().contains("sk-bad"));
    assert!(server.seen().is_empty());
}

const ANTHROPIC_OK: &str = r#"{"id":"msg_01","type":"message","role":"assistant","model":"claude-haiku","content":[{"type":"text","text":"Paris"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":19,"output_tokens":3}}"#;

#[tokio::test]
async fn anthropic_success_with_usage_and_headers() {
    let server = Loopback::start(vec![json(200, ANTHROPIC_OK)]).await;
    let done = Anthropic::new(&server.url(""), http())
        .unwrap()
        .complete(request(), Some(KEY))
        .await
        .unwrap();
    assert_paris(&done, (19, 3), None);
    let seen = server.seen();
    assert_eq!(seen[0].path, "/v1/messages");
    assert_eq!(seen[0].header("x-api-key"), Some(KEY));
    assert_eq!(seen[0].header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(seen[0].header("authorization"), None);
    let body: serde_json::Value = serde_json::from_str(&seen[0].body).unwrap();
    assert_eq!(body["max_tokens"], 32);
    assert_eq!(body["system"], "You answer in one word.");
    assert_eq!(body["messages"][0]["role"], "user");
}

#[tokio::test]
async fn anthropic_error_kinds() {
    let server = Loopback::start(vec![json(
        401,
        &format!(r#"{{"type":"error","error":{{"type":"authentication_error","message":"invalid x-api-key {KEY}"}}}}"#),
    )])
    .await;
    let provider = Anthropic::new(&server.url(""), http()).unwrap();
    let err = provider.complete(request(), Some(KEY)).await.unwrap_err();
    assert_keyless_err!(err, ProviderError::Unauthorized { status: 401 });

    let limited = Reply::Full {
        status: 429,
        headers: vec![("retry-after", "1".into())],
        body: r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#
            .into(),
    };
    let overloaded = json(
        529,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    );
    let server = Loopback::start(vec![limited, overloaded, json(200, ANTHROPIC_OK)]).await;
    let started = Instant::now();
    let done = Anthropic::new(&server.url(""), http())
        .unwrap()
        .complete(request(), Some(KEY))
        .await
        .unwrap();
    assert_eq!(done.text, "Paris");
    assert_eq!(server.seen().len(), 3);
    assert!(started.elapsed() >= Duration::from_millis(950));

    let server = Loopback::start(vec![json(529, "{}"), json(529, "{}"), json(529, "{}")]).await;
    let err = Anthropic::new(&server.url(""), http())
        .unwrap()
        .complete(request(), Some(KEY))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::Upstream { status: 529 }),
        "{err:?}"
    );

    let server = Loopback::start(vec![Reply::Hang]).await;
    let err = Anthropic::new(
        &server.url(""),
        HttpOptions {
            timeout: Duration::from_millis(300),
            max_retries: 0,
            ..http()
        },
    )
    .unwrap()
    .complete(request(), Some(KEY))
    .await
    .unwrap_err();
    assert!(matches!(err, ProviderError::Timeout { .. }), "{err:?}");
}

/// A provider that echoes its prompt into `error.message` (the skill body is the system prompt)
/// must not let the prompt's words pick the failure code the caller sees: the caller chooses
/// which word its request makes the provider quote, and would read off whether the body holds
/// it. Each error shape, with a message full of trigger words and with a neutral one: one code.
#[tokio::test]
async fn provider_error_words_never_pick_the_failure_code() {
    const TRIGGERS: [&str; 6] = [
        "SECRET BODY: the context is too long",
        "SECRET BODY: maximum of 4096 tokens",
        "SECRET BODY: model invalid, model not found",
        "SECRET BODY: rate limit and quota",
        "SECRET BODY: api key auth permission",
        "SECRET BODY: too many tokens",
    ];
    const NEUTRAL: &str = "SECRET BODY: nothing of note";
    /// The JSON string form of `s`, quotes included.
    fn quoted(s: &str) -> String {
        serde_json::to_string(s).unwrap()
    }
    // (shape, the reply with the message in it)
    type Shape = (&'static str, fn(&str) -> Reply);
    let shapes: [Shape; 7] = [
        ("openai 200, numeric code", |m| {
            json(
                200,
                &format!(r#"{{"error":{{"code":400,"message":{}}}}}"#, quoted(m)),
            )
        }),
        ("openai 200, no code", |m| {
            json(200, &format!(r#"{{"error":{{"message":{}}}}}"#, quoted(m)))
        }),
        ("openai 200, null code", |m| {
            json(
                200,
                &format!(r#"{{"error":{{"code":null,"message":{}}}}}"#, quoted(m)),
            )
        }),
        ("openai stream, error event", |m| {
            Reply::Events(vec![(
                0,
                format!(
                    "data: {{\"error\":{{\"code\":400,\"message\":{}}}}}\n\n",
                    quoted(m)
                ),
            )])
        }),
        ("openai stream, error after text", |m| {
            Reply::Events(vec![
                (0, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Par\"},\"finish_reason\":null}]}\n\n".into()),
                (0, format!("data: {{\"error\":{{\"message\":{}}}}}\n\n", quoted(m))),
            ])
        }),
        ("anthropic 200, invalid_request_error", |m| {
            json(
                200,
                &format!(
                    r#"{{"type":"error","error":{{"type":"invalid_request_error","message":{}}}}}"#,
                    quoted(m)
                ),
            )
        }),
        ("anthropic 400, invalid_request_error", |m| {
            json(
                400,
                &format!(
                    r#"{{"type":"error","error":{{"type":"invalid_request_error","message":{}}}}}"#,
                    quoted(m)
                ),
            )
        }),
    ];
    let no_retries = HttpOptions {
        max_retries: 0,
        ..http()
    };
    for (shape, reply) in shapes {
        let mut codes = Vec::new();
        for message in std::iter::once(NEUTRAL).chain(TRIGGERS) {
            let server = Loopback::start(vec![reply(message)]).await;
            let err = if shape.starts_with("anthropic") {
                Anthropic::new(&server.url(""), no_retries.clone())
                    .unwrap()
                    .complete(request(), Some(KEY))
                    .await
                    .unwrap_err()
            } else {
                openai_at(
                    &server.url("/v1"),
                    no_retries.clone(),
                    shape.contains("stream"),
                )
                .complete(request(), Some(KEY))
                .await
                .unwrap_err()
            };
            assert!(
                !format!("{err} {err:?}").contains("SECRET"),
                "{shape}: {err:?}"
            );
            codes.push((message, err.failure()));
        }
        let neutral = codes[0].1;
        assert_eq!(
            neutral,
            ProviderFailure::UpstreamError,
            "{shape}: a message-only error is upstream_error"
        );
        for (message, code) in &codes {
            assert_eq!(
                *code, neutral,
                "{shape}: the message {message:?} steered the code to {code} (neutral: {neutral})"
            );
        }
    }
}

#[tokio::test]
async fn an_oversized_answer_is_refused() {
    let huge = format!(
        r#"{{"choices":[{{"message":{{"content":"{}"}},"finish_reason":"stop"}}]}}"#,
        "a".repeat(17 << 20)
    );
    let server = Loopback::start(vec![json(200, &huge)]).await;
    let err = openrouter_error(&server, false).await;
    assert!(
        matches!(&err, ProviderError::Protocol(m) if m.contains("MiB")),
        "{err:?}"
    );
}

/// An https double for issue 30 item 12: `openssl s_server` with a leaf certificate for
/// 127.0.0.1 issued by a root of the test's own (the root a box operator would put in
/// `SSL_CERT_FILE`). s_server prints what a client sends after the handshake and never answers.
struct TlsDouble {
    child: std::process::Child,
    url: String,
    seen: Arc<Mutex<String>>,
    root_pem: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for TlsDouble {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl (the https double needs the openssl command)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn tls_double() -> TlsDouble {
    use std::io::Read;
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(
        d.join("ca.cnf"),
        "[req]\ndistinguished_name = dn\nx509_extensions = v3_ca\nprompt = no\n[dn]\n\
         CN = box operator root\n[v3_ca]\nbasicConstraints = critical, CA:TRUE\n\
         keyUsage = critical, keyCertSign, cRLSign\nsubjectKeyIdentifier = hash\n",
    )
    .expect("ca.cnf");
    std::fs::write(
        d.join("leaf.ext"),
        "subjectAltName = IP:127.0.0.1\nbasicConstraints = critical, CA:FALSE\n\
         keyUsage = critical, digitalSignature\nextendedKeyUsage = serverAuth\n\
         authorityKeyIdentifier = keyid\n",
    )
    .expect("leaf.ext");
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let mut args = vec!["req", "-x509", "-config", "ca.cnf", "-days", "2"];
    args.extend(ec);
    args.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
    openssl(d, &args);
    let mut args = vec!["req", "-new", "-subj", "/CN=127.0.0.1"];
    args.extend(ec);
    args.extend(["-keyout", "leaf.key", "-out", "leaf.csr"]);
    openssl(d, &args);
    openssl(
        d,
        &[
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "leaf.ext",
            "-out",
            "leaf.pem",
        ],
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port");
    let mut child = std::process::Command::new("openssl")
        .current_dir(d)
        .args(["s_server", "-accept"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["-cert", "leaf.pem", "-key", "leaf.key"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("openssl s_server");
    let mut stdout = child.stdout.take().expect("stdout");
    let seen = Arc::new(Mutex::new(String::new()));
    let s = seen.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                return;
            }
            s.lock()
                .expect("seen")
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while !seen.lock().expect("seen").contains("ACCEPT") {
        assert!(Instant::now() < deadline, "s_server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    TlsDouble {
        child,
        url: format!("https://127.0.0.1:{port}/v1"),
        seen,
        root_pem: d.join("ca.pem"),
        _dir: dir,
    }
}

/// One chat completion with `KEY` (the double never answers: an error either way).
async fn chat_once(provider: OpenAiCompatible) -> Result<Completion, ProviderError> {
    provider.complete(request(), Some(KEY)).await
}

fn tls_options() -> OpenAiOptions {
    let mut options = OpenAiOptions::openrouter(HttpOptions {
        timeout: Duration::from_secs(2),
        max_retries: 0,
        ..http()
    });
    options.stream = false;
    options
}

/// Issue 30 item 12: the box's operator controls its environment. A root they place in
/// `SSL_CERT_FILE` (or `SSL_CERT_DIR`, or the OS store) must not let them stand in for the
/// provider and read the owner's key and the skill: provider clients trust only the roots
/// compiled in. The test process re-runs itself with those variables set (the environment is
/// read when the client is built); the double, trusted explicitly, shows it would have seen the
/// key.
#[test]
fn provider_tls_ignores_roots_from_the_environment() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    if let Ok(url) = std::env::var("SKILLBOX_TEST_TLS_CHILD_URL") {
        let provider = OpenAiCompatible::new(&url, tls_options()).expect("provider");
        let result = rt.block_on(chat_once(provider));
        let err = result.expect_err("the double never answers");
        assert_no_key(&err);
        println!("child: {err}");
        return;
    }
    let double = tls_double();
    // The operator's root in the environment, the client built as the box builds it (in a
    // process of its own, which closes its connection when it exits: s_server serves one at a
    // time).
    let dir = double.root_pem.parent().expect("dir").to_owned();
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "adapters::provider_tls_ignores_roots_from_the_environment",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("SKILLBOX_TEST_TLS_CHILD_URL", &double.url)
        .env("SSL_CERT_FILE", &double.root_pem)
        .env("SSL_CERT_DIR", &dir)
        .output()
        .expect("re-run the test binary");
    let child = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && child.contains("1 passed"),
        "{child}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::thread::sleep(Duration::from_millis(300));
    let seen = double.seen.lock().expect("seen").clone();
    assert!(
        !seen.contains(KEY) && !seen.contains("chat/completions"),
        "the operator's root let the double read the request ({child}): {seen}"
    );
    // Trusted explicitly (the test-only constructor), the same double does see the request and
    // the key: what the environment's root would have given the operator.
    let root = std::fs::read(&double.root_pem).expect("root");
    let provider = OpenAiCompatible::trusting(&double.url, tls_options(), &root).expect("provider");
    let _ = rt.block_on(chat_once(provider));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !double.seen.lock().expect("seen").contains(KEY) {
        assert!(
            Instant::now() < deadline,
            "the double never saw the key when trusted: {}",
            double.seen.lock().expect("seen")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A request as the box sends it: `body` behind an allowance of 1,000 bytes, `user` of the
/// caller's, 100 tokens of answer, a declared context of 4,096 tokens.
fn judged(body: &str, user: &str) -> ChatRequest {
    ChatRequest {
        system: body.into(),
        user: user.into(),
        max_tokens: 100,
        system_allowance: Some(1000),
        context_tokens: Some(4096),
        ..request()
    }
}

/// The most user bytes [`judged`] lets in.
const JUDGED_ROOM: usize = 4096 - skillbox_providers::REMOTE_FRAME_TOKENS - 1000 - 100;

const CONTEXT_EXCEEDED: &str = r#"{"error":{"message":"This model's maximum context length is 4096 tokens. However, your messages resulted in 5000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
const ANTHROPIC_TOO_LARGE: &str = r#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum size"}}"#;

/// N5 for remote providers: each adapter refuses a request over the declared context before
/// anything is sent (`context_too_long`, the same for every body), refuses a body it cannot
/// show fits its allowance before anything is sent (`unavailable`, whatever the request), and
/// turns a context refusal that still comes back (a wrong declaration) into `unavailable`.
#[tokio::test]
async fn remote_admission_refuses_before_sending_and_a_later_context_refusal_is_unavailable() {
    let at_edge = "u".repeat(JUDGED_ROOM);
    let over_edge = "u".repeat(JUDGED_ROOM + 1);
    for stream in [false, true] {
        // Over the edge, short body or long: refused in the box, the server never asked.
        let server = Loopback::start(vec![]).await;
        for body in ["short", &"b".repeat(1000)] {
            let err = openai_at(&server.url("/v1"), http(), stream)
                .complete(judged(body, &over_edge), None)
                .await
                .unwrap_err();
            assert_eq!(err.failure(), ProviderFailure::ContextTooLong, "{err:?}");
            // A body over its allowance in bytes: unavailable, even for the shortest request.
            let err = openai_at(&server.url("/v1"), http(), stream)
                .complete(judged(&"b".repeat(1001), "hi"), None)
                .await
                .unwrap_err();
            assert_eq!(err.failure(), ProviderFailure::Unavailable, "{err:?}");
        }
        assert!(server.seen().is_empty(), "nothing sent");
        // At the edge the request goes out; the provider still says the context is exceeded
        // (the owner declared more than the model takes), in a 200 answer's error object:
        // unavailable, not context_too_long, and not retried.
        let server = Loopback::start(vec![json(200, CONTEXT_EXCEEDED)]).await;
        let err = openai_at(&server.url("/v1"), http(), stream)
            .complete(judged("short", &at_edge), None)
            .await
            .unwrap_err();
        assert_eq!(err.failure(), ProviderFailure::Unavailable, "{err:?}");
        assert_eq!(server.seen().len(), 1);
        // As an HTTP 400 (OpenAI's own shape) the body is never read: upstream_error, as for
        // any other 400, judged or not.
        let server = Loopback::start(vec![json(400, CONTEXT_EXCEEDED)]).await;
        let err = openai_at(&server.url("/v1"), http(), stream)
            .complete(judged("short", &at_edge), None)
            .await
            .unwrap_err();
        assert_eq!(err.failure(), ProviderFailure::UpstreamError, "{err:?}");
        // The in-band refusal for a request the box did not judge (no allowance) stays what
        // the provider said: the mapping is for the box's requests only.
        let server = Loopback::start(vec![json(200, CONTEXT_EXCEEDED)]).await;
        let err = openai_at(&server.url("/v1"), http(), stream)
            .complete(request(), None)
            .await
            .unwrap_err();
        assert_eq!(err.failure(), ProviderFailure::ContextTooLong, "{err:?}");
    }
    // A 413 from an OpenAI-compatible server after admission, too.
    let server = Loopback::start(vec![json(413, "{}")]).await;
    let err = openai_at(&server.url("/v1"), http(), false)
        .complete(judged("short", "hi"), None)
        .await
        .unwrap_err();
    assert_eq!(err.failure(), ProviderFailure::Unavailable, "{err:?}");
    // Anthropic: the same admission before sending, and its `request_too_large` after it.
    let server = Loopback::start(vec![json(413, ANTHROPIC_TOO_LARGE)]).await;
    let anthropic = Anthropic::new(&server.url(""), http()).unwrap();
    let err = anthropic
        .complete(judged("short", &over_edge), Some(KEY))
        .await
        .unwrap_err();
    assert_eq!(err.failure(), ProviderFailure::ContextTooLong, "{err:?}");
    let err = anthropic
        .complete(judged(&"b".repeat(1001), "hi"), Some(KEY))
        .await
        .unwrap_err();
    assert_eq!(err.failure(), ProviderFailure::Unavailable, "{err:?}");
    assert!(server.seen().is_empty(), "nothing sent");
    let err = anthropic
        .complete(judged("short", &at_edge), Some(KEY))
        .await
        .unwrap_err();
    assert_eq!(err.failure(), ProviderFailure::Unavailable, "{err:?}");
    assert_eq!(server.seen().len(), 1);
}
