//! Doubles of an OpenAI-compatible provider on loopback, speaking the chat-completions wire
//! protocol: [`blocking`] on threads of its own (process tests need no runtime), [`serve`] on
//! axum in the test's runtime. Both record what they were sent so tests can scan it.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

/// What a provider double saw: (Authorization header, request body).
#[derive(Clone, Default)]
pub struct ProviderLog(pub Arc<Mutex<Vec<(String, Value)>>>);

impl ProviderLog {
    fn push(&self, auth: String, body: Value) {
        self.0.lock().expect("log").push((auth, body));
    }
}

/// A chat completion answering `content`.
pub fn completion(content: &str) -> Value {
    json!({
        "id": "chatcmpl-double", "object": "chat.completion",
        "choices": [{ "index": 0, "finish_reason": "stop",
            "message": { "role": "assistant", "content": content } }],
        "usage": { "prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2 }
    })
}

/// The doubles' ordinary answer: how many bytes of prompt (all messages) they read.
pub fn count_answer(body: &Value) -> String {
    let prompt_len: usize = messages(body)
        .map(|m| m["content"].as_str().map_or(0, str::len))
        .sum();
    format!("The double read {prompt_len} bytes of prompt.")
}

/// How many prompt tokens a model with a tokenizer of three bytes a token on average counts for
/// a chat completion request: each message's bytes / 3, rounded up, plus 4 a message and 3 for
/// the reply's start (OpenAI's framing). Always fewer than the prompt's bytes, as any BPE's.
pub fn approx_prompt_tokens(body: &Value) -> u64 {
    let per_message: u64 = messages(body)
        .map(|m| m["content"].as_str().map_or(0, str::len).div_ceil(3) as u64 + 4)
        .sum();
    per_message + 3
}

/// What [`approx_prompt_tokens`]' double reports as a completion's `usage.prompt_tokens`: the
/// count plus this, so a test finds the figure by its digits wherever it might travel.
pub const USAGE_MARK: u64 = 900_000_000;

/// The content of the request's first `role` message ("" when there is none).
pub fn turn(body: &Value, role: &str) -> String {
    messages(body)
        .find(|m| m["role"] == role)
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_owned()
}

fn messages(body: &Value) -> impl Iterator<Item = &Value> {
    body["messages"].as_array().into_iter().flatten()
}

/// The double on threads: std only, for tests and benches that drive real processes.
pub mod blocking {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    use serde_json::{Value, json};

    pub use super::ProviderLog;

    /// A provider double answering each chat completion after `delay`. Returns its base URL
    /// (`http://127.0.0.1:P/v1`).
    pub fn provider_double(delay: Duration) -> (String, ProviderLog) {
        start(delay, Answering::Count)
    }

    /// A careless or hostile provider: every answer is an HTTP 400 whose error text quotes the
    /// whole request it was sent (system prompt, user text, the Authorization header).
    pub fn provider_double_echoing_errors() -> (String, ProviderLog) {
        start(Duration::ZERO, Answering::EchoError)
    }

    /// A careless or hostile provider (a debugging proxy, an endpoint that quotes what it was
    /// sent): every answer is an HTTP 200 chat completion whose content is the raw request it
    /// got — request line, headers (the Authorization header with the owner's key) and the JSON
    /// body (with the owner's model id).
    pub fn provider_double_echoing_requests() -> (String, ProviderLog) {
        start(Duration::ZERO, Answering::EchoRequest)
    }

    /// A provider double whose every answer is `answer(system prompt, user turn)`: a stand-in
    /// for a model that behaves as the test says (an obedient one gives its system prompt
    /// away).
    pub fn provider_double_by(answer: fn(&str, &str) -> String) -> (String, ProviderLog) {
        start(Duration::ZERO, Answering::By(answer))
    }

    #[derive(Clone, Copy)]
    enum Answering {
        /// "The double read N bytes of prompt."
        Count,
        /// An HTTP 400 quoting the whole request.
        EchoError,
        /// An HTTP 200 whose answer is the raw request.
        EchoRequest,
        /// A completion the function writes from (system, user).
        By(fn(&str, &str) -> String),
    }

    fn start(delay: Duration, answering: Answering) -> (String, ProviderLog) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind provider");
        let addr = listener.local_addr().expect("addr");
        let log = ProviderLog::default();
        let l = log.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let l = l.clone();
                std::thread::spawn(move || serve_one(stream, delay, answering, l));
            }
        });
        (format!("http://{addr}/v1"), log)
    }

    /// One request: its Authorization header, its raw text (request line, headers, body) and
    /// its body (None when the connection ends).
    fn read_request(reader: &mut BufReader<TcpStream>) -> Option<(String, String, Value)> {
        let mut auth = String::new();
        let mut len = 0usize;
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return None;
        }
        let mut raw = line.clone();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return None;
            }
            raw.push_str(&h);
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                let k = k.trim().to_ascii_lowercase();
                if k == "content-length" {
                    len = v.trim().parse().unwrap_or(0);
                } else if k == "authorization" {
                    auth = v.trim().to_owned();
                }
            }
        }
        let mut body = vec![0u8; len];
        reader.read_exact(&mut body).ok()?;
        raw.push_str(&String::from_utf8_lossy(&body));
        Some((
            auth,
            raw,
            serde_json::from_slice(&body).unwrap_or(Value::Null),
        ))
    }

    fn serve_one(stream: TcpStream, delay: Duration, answering: Answering, log: ProviderLog) {
        let Ok(read_half) = stream.try_clone() else {
            return;
        };
        let mut reader = BufReader::new(read_half);
        let mut writer = stream;
        while let Some((auth, raw, body)) = read_request(&mut reader) {
            let (status, answer) = match answering {
                Answering::EchoError => {
                    let quoted = format!("invalid request (auth {auth}): {body}");
                    (
                        "400 Bad Request",
                        json!({ "error": { "code": "invalid_request", "message": quoted } }),
                    )
                }
                Answering::EchoRequest => ("200 OK", super::completion(&raw)),
                Answering::By(f) => (
                    "200 OK",
                    super::completion(&f(
                        &super::turn(&body, "system"),
                        &super::turn(&body, "user"),
                    )),
                ),
                Answering::Count => ("200 OK", super::completion(&super::count_answer(&body))),
            };
            log.push(auth, body);
            std::thread::sleep(delay);
            let answer = answer.to_string();
            let resp = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
                answer.len()
            );
            if writer.write_all(resp.as_bytes()).is_err() {
                return;
            }
        }
    }
}

/// The double on axum, in the test's runtime.
pub mod serve {
    use std::time::Duration;

    use axum::Json;
    use axum::extract::State;
    use axum::http::{HeaderMap, StatusCode};
    use axum::response::{IntoResponse, Response};
    use axum::routing::post;
    use serde_json::{Value, json};

    pub use super::ProviderLog;

    /// How the provider double answers.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Answering {
        /// A chat completion saying how many prompt bytes it read.
        Normally,
        /// A hostile or careless provider: an error whose text quotes its whole input (system
        /// prompt, user text, the key it was given) — as an HTTP 400 error body.
        EchoingErrors,
        /// The same, as an `error` object in a 200 answer.
        EchoingInBand,
        /// An obedient model: answers every request with its system prompt (the skill body)
        /// — the stand-in for a strong remote model asked for its instructions.
        Obedient,
        /// A model of this many tokens of context: a request whose prompt
        /// ([`super::approx_prompt_tokens`]) and `max_tokens` exceed it is refused as OpenAI
        /// refuses it (HTTP 400, `context_length_exceeded`); any other is answered "ok" with
        /// `usage.prompt_tokens` the prompt's count plus [`super::USAGE_MARK`].
        WithContext(u64),
        /// OpenRouter with `middle-out` on a model of this many tokens of context: it never
        /// refuses — a prompt over the context is cut silently and answered `cut` (the model can
        /// no longer quote the request's start), any other `whole` — and its `GET /v1/models`
        /// lists `gpt-double` with this `context_length` (review 29 R29-3), as does its
        /// `GET /v1/models/{id}/endpoints` for any id (one endpoint; review 30 R30-3).
        CuttingAt(u64),
    }

    /// The model list of a [`Answering::CuttingAt`] double, as OpenRouter's `GET /models`.
    async fn models(
        State((_, _, answering)): State<(ProviderLog, Duration, Answering)>,
    ) -> Response {
        let Answering::CuttingAt(context) = answering else {
            return StatusCode::NOT_FOUND.into_response();
        };
        Json(
            json!({ "data": [{ "id": "gpt-double", "context_length": context,
            "top_provider": { "context_length": context } }] }),
        )
        .into_response()
    }

    /// The endpoint list of a [`Answering::CuttingAt`] double, as OpenRouter's
    /// `GET /models/{author}/{slug}/endpoints`: one endpoint of its context.
    async fn endpoints(
        State((_, _, answering)): State<(ProviderLog, Duration, Answering)>,
    ) -> Response {
        let Answering::CuttingAt(context) = answering else {
            return StatusCode::NOT_FOUND.into_response();
        };
        Json(json!({ "data": { "id": "gpt-double", "endpoints": [
            { "provider_name": "Double", "tag": "double", "context_length": context } ] } }))
        .into_response()
    }

    async fn chat(
        State((log, delay, answering)): State<(ProviderLog, Duration, Answering)>,
        headers: HeaderMap,
        Json(body): Json<Value>,
    ) -> Response {
        let auth = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let echo = format!("bad request (key {auth}): {body}");
        let system = body["messages"][0]["content"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let count = super::count_answer(&body);
        // (prompt tokens, answer tokens) as a model of `WithContext` counts them.
        let (prompt, answer) = (
            super::approx_prompt_tokens(&body),
            body["max_tokens"].as_u64().unwrap_or(0),
        );
        log.push(auth, body);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        match answering {
            Answering::Normally => Json(super::completion(&count)).into_response(),
            Answering::EchoingErrors => (
                StatusCode::BAD_REQUEST,
                Json(json!({ "error": { "code": "invalid_request", "message": echo } })),
            )
                .into_response(),
            Answering::EchoingInBand => {
                Json(json!({ "error": { "code": "moderation", "message": echo } })).into_response()
            }
            Answering::Obedient => Json(super::completion(&system)).into_response(),
            Answering::CuttingAt(context) => {
                let text = if prompt + answer > context {
                    "cut"
                } else {
                    "whole"
                };
                Json(super::completion(text)).into_response()
            }
            Answering::WithContext(context) => {
                if prompt + answer > context {
                    let message = format!(
                        "This model's maximum context length is {context} tokens. However, you \
                         requested {} tokens ({prompt} in the messages, {answer} in the \
                         completion).",
                        prompt + answer
                    );
                    return (
                        StatusCode::BAD_REQUEST,
                        Json(json!({ "error": {
                            "message": message, "type": "invalid_request_error",
                            "param": "messages", "code": "context_length_exceeded" } })),
                    )
                        .into_response();
                }
                let mut done = super::completion("ok");
                done["usage"] = json!({
                    "prompt_tokens": super::USAGE_MARK + prompt,
                    "completion_tokens": 1,
                    "total_tokens": super::USAGE_MARK + prompt + 1,
                });
                Json(done).into_response()
            }
        }
    }

    /// Start the provider double; answers after `delay`.
    pub async fn provider_double(delay: Duration) -> (String, ProviderLog) {
        provider_double_answering(delay, Answering::Normally).await
    }

    /// Start the provider double answering as `answering` says. Returns its base URL
    /// (`http://127.0.0.1:P/v1`).
    pub async fn provider_double_answering(
        delay: Duration,
        answering: Answering,
    ) -> (String, ProviderLog) {
        let log = ProviderLog::default();
        let app = axum::Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/chat/completions", post(chat))
            .route("/v1/models", axum::routing::get(models))
            .route("/v1/models/{*id}", axum::routing::get(endpoints))
            .with_state((log.clone(), delay, answering));
        let url = crate::node::serve_loopback(app).await;
        (format!("{url}/v1"), log)
    }
}
