//! OpenAI-compatible chat completions (`POST {base}/chat/completions`): OpenRouter, OpenAI,
//! Ollama, vLLM, llama.cpp server.
//!
//! Streams by default (`stream_options.include_usage`), because that is where OpenRouter shows
//! the things a thin client must see: keep-alive comment lines, and an error reported after
//! HTTP 200. A server that ignores `stream` and answers one JSON document is understood too,
//! including an `error` object in a 200 body.

use serde_json::{Value, json};

use crate::context::{ContextProbe, ContextSource, ProbeTimes};
use crate::http::{
    Endpoint, HttpOptions, MAX_ANSWER_BYTES, json_error, read_capped, secret_header,
    transport_error,
};
use crate::{
    ChatRequest, Completion, FinishReason, Provider, ProviderError, ProviderFailure, Reply, Usage,
};

/// How an OpenAI-compatible endpoint is called.
#[derive(Clone, Debug)]
pub struct OpenAiOptions {
    pub http: HttpOptions,
    /// Stream the answer (server-sent events). Off: one JSON answer.
    pub stream: bool,
    /// OpenRouter's app attribution headers (`HTTP-Referer`, `X-OpenRouter-Title`).
    pub referer: Option<String>,
    pub title: Option<String>,
    /// The server behind the base URL, for what its API tells of a model's real context
    /// ([`crate::context`]); `OpenRouter` also pins the route ([`pin_openrouter_route`]).
    pub context: ContextSource,
    /// How long the context probe's findings are believed (the box runs the defaults).
    pub context_times: ProbeTimes,
}

impl Default for OpenAiOptions {
    fn default() -> Self {
        OpenAiOptions {
            http: HttpOptions::default(),
            stream: true,
            referer: None,
            title: None,
            context: ContextSource::Unknown,
            context_times: ProbeTimes::default(),
        }
    }
}

impl OpenAiOptions {
    /// The options for OpenRouter: attribution headers naming skillbox.
    pub fn openrouter(http: HttpOptions) -> Self {
        OpenAiOptions {
            http,
            stream: true,
            referer: Some(env!("CARGO_PKG_REPOSITORY").to_owned()).filter(|r| !r.is_empty()),
            title: Some("skillbox".to_owned()),
            context: ContextSource::OpenRouter,
            context_times: ProbeTimes::default(),
        }
    }
}

/// An OpenAI-compatible chat completions endpoint.
#[derive(Debug)]
pub struct OpenAiCompatible {
    endpoint: Endpoint,
    options: OpenAiOptions,
    context: ContextProbe,
}

impl OpenAiCompatible {
    /// This provider named `id` in what a refused loopback port logs (the registry names
    /// every provider it builds).
    pub fn for_provider(mut self, id: &crate::ProviderId) -> Self {
        self.endpoint.set_provider(id);
        self
    }

    /// `base_url` is the API root, e.g. `https://openrouter.ai/api/v1`; requests go to
    /// `{base_url}/chat/completions` and nowhere else.
    pub fn new(base_url: &str, options: OpenAiOptions) -> Result<Self, ProviderError> {
        Self::trusting(base_url, options, &[])
    }

    /// [`OpenAiCompatible::new`] that also trusts the PEM roots `extra_roots_pem`: for tests
    /// against an https double only. The box never calls it (its roots are compiled in).
    pub fn trusting(
        base_url: &str,
        options: OpenAiOptions,
        extra_roots_pem: &[u8],
    ) -> Result<Self, ProviderError> {
        for value in [&options.referer, &options.title].into_iter().flatten() {
            if reqwest::header::HeaderValue::from_str(value).is_err() {
                return Err(ProviderError::Config(format!(
                    "attribution header {value:?} is not a valid HTTP header value"
                )));
            }
        }
        Ok(OpenAiCompatible {
            endpoint: Endpoint::trusting(base_url, options.http.clone(), extra_roots_pem)?,
            context: ContextProbe::new(options.context, options.context_times),
            options,
        })
    }

    async fn attempt(
        &self,
        body: &Value,
        api_key: Option<&str>,
    ) -> Result<Completion, ProviderError> {
        let mut request = self.endpoint.post("chat/completions")?.json(body);
        if let Some(key) = api_key {
            request = request.header(
                reqwest::header::AUTHORIZATION,
                secret_header("Bearer ", key)?,
            );
        }
        if let Some(referer) = &self.options.referer {
            request = request.header("HTTP-Referer", referer);
        }
        if let Some(title) = &self.options.title {
            request = request.header("X-OpenRouter-Title", title);
        }
        let secs = self.endpoint.timeout_secs();
        let mut response = self.endpoint.send(request).await?;
        let is_event_stream = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if is_event_stream {
            let mut stream = StreamAnswer::default();
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|e| transport_error(e, secs))?
            {
                stream.feed(&chunk)?;
            }
            stream.finish()
        } else {
            let bytes = read_capped(response, secs).await?;
            parse_answer(&bytes)
        }
    }
}

/// The request body: always `max_tokens` (OpenRouter's credit check otherwise assumes the
/// model's maximum and can refuse with 402).
pub fn request_body(request: &ChatRequest, stream: bool) -> Value {
    let mut messages = Vec::with_capacity(2);
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    messages.push(json!({"role": "user", "content": request.user}));
    let mut body = json!({
        "model": request.model,
        "messages": messages,
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
    });
    if let Some(seed) = request.seed {
        body["seed"] = json!(seed);
    }
    if stream {
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

/// OpenRouter's routing pinned (review 29 R29-3): `transforms: []` turns off `middle-out`,
/// which OpenRouter applies by default to models of 8,192 tokens or less and which cuts the
/// middle of an over-long prompt silently (or re-routes it to a model of larger context)
/// instead of refusing it; `provider.allow_fallbacks: false` keeps the request on the owner's
/// model's endpoints, never another model. With both, a prompt over the context of the endpoint
/// it is drawn to is a refusal, never a cut. OpenRouter still load-balances each request across
/// the model's endpoints, whose contexts differ (review 30 R30-3): the probe holds the
/// declaration against the smallest of them ([`crate::context`]), so every endpoint a request
/// may be drawn to takes what the box's admission let in.
pub fn pin_openrouter_route(body: &mut Value) {
    body["transforms"] = json!([]);
    body["provider"] = json!({"allow_fallbacks": false});
}

impl Provider for OpenAiCompatible {
    fn complete<'a>(&'a self, request: ChatRequest, api_key: Option<&'a str>) -> Reply<'a> {
        Box::pin(async move {
            // Judged before sending, from public values only (N5): see `remote_admission`.
            let judged = request.remote_admission()?;
            if judged {
                // The declared context no larger than the server says the model takes.
                self.context.check(&self.endpoint, &request).await?;
            }
            let mut body = request_body(&request, self.options.stream);
            if self.options.context == ContextSource::OpenRouter {
                pin_openrouter_route(&mut body);
            }
            self.endpoint
                .with_retries(|| self.attempt(&body, api_key))
                .await
                .map_err(|e| ChatRequest::after_admission(judged, e))
        })
    }
}

fn finish_reason(value: &str) -> FinishReason {
    match value {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        _ => FinishReason::Other,
    }
}

fn usage(value: &Value) -> Option<Usage> {
    let usage = value.get("usage").filter(|u| u.is_object())?;
    Some(Usage {
        prompt_tokens: usage
            .get("prompt_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        completion_tokens: usage
            .get("completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        cost: usage.get("cost").and_then(Value::as_f64),
    })
}

/// An `error` object the provider put in a 200 answer. Its kind comes from its structured
/// fields only: a numeric `code` that is an HTTP status is that status's kind (so an upstream
/// 502 is retried, unless the answer had started), a string `code` — else `type` — is
/// [`ProviderFailure::classify`]'d; anything else is `upstream_error`. The `message` is never
/// read: it may quote the prompt (see `classify`).
fn reported_error(value: &Value, started: bool) -> Option<ProviderError> {
    let error = value.get("error").filter(|e| !e.is_null())?;
    let field = |name: &str| error.get(name).and_then(Value::as_str);
    Some(match error.get("code") {
        Some(Value::Number(n)) => match n.as_u64().filter(|s| (400..=599).contains(s)) {
            Some(status) => {
                let kind = crate::http::status_error(status as u16, None);
                if started {
                    ProviderError::Reported(kind.failure())
                } else {
                    kind
                }
            }
            None => ProviderError::Reported(ProviderFailure::UpstreamError),
        },
        _ => ProviderError::Reported(ProviderFailure::classify(field("code").or(field("type")))),
    })
}

/// A whole (non-streamed) answer.
pub fn parse_answer(bytes: &[u8]) -> Result<Completion, ProviderError> {
    // OpenRouter pads a slow non-streamed answer with whitespace; serde skips it.
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| json_error("chat completion", &e))?;
    if let Some(err) = reported_error(&value, false) {
        return Err(err);
    }
    let choice = value
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or_else(|| ProviderError::Protocol("chat completion without choices".into()))?;
    let text = choice
        .pointer("/message/content")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let finish = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(finish_reason)
        .unwrap_or(FinishReason::Other);
    if choice.get("finish_reason").and_then(Value::as_str) == Some("error") {
        return Err(ProviderError::Reported(ProviderFailure::UpstreamError));
    }
    Ok(Completion {
        text,
        finish,
        usage: usage(&value).unwrap_or_default(),
    })
}

/// A streamed answer being assembled from server-sent events. Pure: fed bytes, no I/O.
#[derive(Debug, Default)]
pub struct StreamAnswer {
    pending: Vec<u8>,
    text: String,
    finish: Option<FinishReason>,
    usage: Option<Usage>,
    done: bool,
    events: u64,
    /// Bytes searched for a line end, all calls together (the tests' cost count).
    #[cfg(test)]
    scanned: usize,
}

/// Caps a single event line so a hostile server cannot make us buffer without bound.
const MAX_LINE: usize = 4 << 20;

impl StreamAnswer {
    /// Takes the next bytes of the stream; fails on an error event or a malformed one.
    /// Only the new bytes are searched for line ends (what was pending held none), and the
    /// consumed lines are dropped from the buffer once: rescanning the whole buffer on every
    /// chunk let a provider that sent a 4 MiB line and then trickled bytes keep a core busy.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), ProviderError> {
        let mut pending = std::mem::take(&mut self.pending);
        let mut at = pending.len();
        pending.extend_from_slice(bytes);
        let mut start = 0;
        let mut fed = Ok(());
        while let Some(off) = pending[at..].iter().position(|&b| b == b'\n') {
            #[cfg(test)]
            {
                self.scanned += off + 1;
            }
            let end = at + off;
            fed = self.line(&pending[start..end]);
            start = end + 1;
            at = start;
            if fed.is_err() {
                break;
            }
        }
        #[cfg(test)]
        {
            self.scanned += pending.len() - at;
        }
        pending.drain(..start);
        self.pending = pending;
        fed?;
        if self.pending.len() > MAX_LINE {
            return Err(ProviderError::Protocol(
                "event line longer than 4 MiB".into(),
            ));
        }
        Ok(())
    }

    fn line(&mut self, line: &[u8]) -> Result<(), ProviderError> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        // Blank lines end events; `:` lines are comments (`: OPENROUTER PROCESSING`).
        if line.is_empty() || line.starts_with(b":") || self.done {
            return Ok(());
        }
        let Some(data) = line.strip_prefix(b"data:") else {
            // `event:`, `id:`, `retry:` carry nothing we use.
            return Ok(());
        };
        let data = data.strip_prefix(b" ").unwrap_or(data);
        if data == b"[DONE]" {
            self.done = true;
            return Ok(());
        }
        let value: Value =
            serde_json::from_slice(data).map_err(|e| json_error("stream event", &e))?;
        self.events += 1;
        // Once the answer has started, an error is the stream's whatever its code (no retry).
        if let Some(err) = reported_error(&value, !self.text.is_empty()) {
            return Err(err);
        }
        if let Some(u) = usage(&value) {
            self.usage = Some(u);
        }
        if let Some(choice) = value.get("choices").and_then(|c| c.get(0)) {
            if let Some(piece) = choice.pointer("/delta/content").and_then(Value::as_str) {
                if self.text.len() + piece.len() > MAX_ANSWER_BYTES {
                    return Err(ProviderError::Protocol(format!(
                        "streamed answer larger than {} MiB",
                        MAX_ANSWER_BYTES >> 20
                    )));
                }
                self.text.push_str(piece);
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                if reason == "error" {
                    return Err(ProviderError::Reported(ProviderFailure::UpstreamError));
                }
                self.finish = Some(finish_reason(reason));
            }
        }
        Ok(())
    }

    /// The answer, once the stream has closed.
    pub fn finish(mut self) -> Result<Completion, ProviderError> {
        if !self.pending.is_empty() {
            let rest = std::mem::take(&mut self.pending);
            self.line(&rest)?;
        }
        let Some(finish) = self.finish else {
            // Without an answer, or cut before it finished: not the provider's wire format.
            return Err(ProviderError::Reported(ProviderFailure::Protocol));
        };
        Ok(Completion {
            text: self.text,
            finish,
            usage: self.usage.unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(parts: &[&str]) -> Result<Completion, ProviderError> {
        let mut s = StreamAnswer::default();
        for p in parts {
            s.feed(p.as_bytes())?;
        }
        s.finish()
    }

    /// A provider sending most of a 4 MiB line and then trickling one byte at a time: each
    /// byte is searched once (before, the whole pending buffer was searched again per chunk).
    #[test]
    fn a_trickled_long_line_is_searched_once() {
        let mut s = StreamAnswer::default();
        let head = vec![b' '; 2 << 20];
        s.feed(&head).expect("no line end yet");
        for _ in 0..1000 {
            s.feed(b" ").expect("no line end yet");
        }
        s.feed(b"\n").expect("a blank line");
        assert!(s.pending.is_empty());
        assert_eq!(s.scanned, head.len() + 1001);
    }

    proptest::proptest! {
        /// However the stream is cut into chunks, the answer is the one fed whole.
        #[test]
        fn chunk_splits_do_not_change_the_answer(
            pieces in proptest::collection::vec("[a-z \\n]{0,8}", 1..12),
            comment in proptest::bool::ANY,
            crlf in proptest::bool::ANY,
            cuts in proptest::collection::vec(0usize..4096, 0..16),
        ) {
            let nl = if crlf { "\r\n" } else { "\n" };
            let mut wire = String::new();
            if comment {
                wire.push_str(&format!(": PROCESSING{nl}{nl}"));
            }
            for p in &pieces {
                let event = serde_json::json!({"choices": [{"delta": {"content": p}}]});
                wire.push_str(&format!("data: {event}{nl}{nl}"));
            }
            wire.push_str(&format!(
                "data: {{\"choices\":[{{\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}{nl}{nl}data: [DONE]{nl}"
            ));
            let whole = feed_all(&[&wire]).expect("whole");
            proptest::prop_assert_eq!(&whole.text, &pieces.concat());
            let bytes = wire.as_bytes();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut s = StreamAnswer::default();
            let mut from = 0;
            for c in cuts.into_iter().chain([bytes.len()]) {
                s.feed(&bytes[from..c]).expect("a chunk");
                from = c;
            }
            proptest::prop_assert_eq!(s.scanned, bytes.len());
            let split = s.finish().expect("split");
            proptest::prop_assert_eq!(split.text, whole.text);
            proptest::prop_assert_eq!(split.finish, whole.finish);
            proptest::prop_assert_eq!(split.usage, whole.usage);
        }
    }

    #[test]
    fn stream_assembles_text_usage_and_cost_across_splits() {
        let c = feed_all(&[
            ": OPENROUTER PROCESSING\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\nda",
            "ta: {\"choices\":[{\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\r\n\r\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2,\"cost\":0.00012}}\n\n",
            "data: [DONE]\n\n",
        ])
        .unwrap();
        assert_eq!(c.text, "Hello");
        assert_eq!(c.finish, FinishReason::Stop);
        assert_eq!(
            c.usage,
            Usage {
                prompt_tokens: 7,
                completion_tokens: 2,
                cost: Some(0.00012)
            }
        );
    }

    #[test]
    fn stream_error_after_text_is_mid_stream_and_scrubbed() {
        let err = feed_all(&[
            "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n",
            "data: {\"error\":{\"code\":502,\"message\":\"upstream died, key sk-k\"},\"choices\":[{\"delta\":{\"content\":\"\"},\"finish_reason\":\"error\"}]}\n\n",
        ])
        .unwrap_err();
        // Kind only: the provider's words (and the key they quote) never leave the adapter.
        assert!(
            matches!(err, ProviderError::Reported(ProviderFailure::UpstreamError)),
            "{err:?}"
        );
        assert!(!format!("{err:?} {err}").contains("upstream died"));
        assert!(!format!("{err:?} {err}").contains("sk-k"));
    }

    #[test]
    fn stream_cut_short_is_an_error() {
        let err =
            feed_all(&["data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n"]).unwrap_err();
        assert!(
            matches!(err, ProviderError::Reported(ProviderFailure::Protocol)),
            "{err:?}"
        );
        let err = feed_all(&[]).unwrap_err();
        assert!(
            matches!(err, ProviderError::Reported(ProviderFailure::Protocol)),
            "{err:?}"
        );
    }

    #[test]
    fn malformed_event_never_quotes_the_document() {
        let err = feed_all(&["data: {\"choices\": \"secret answer text\n\n"]).unwrap_err();
        assert!(matches!(err, ProviderError::Protocol(_)));
        assert!(!err.to_string().contains("secret"));
        let err = parse_answer(br#"{"choices":[{"message":{"content":5}}], "usage": "secret"}"#);
        // A wrong-typed field is tolerated, never echoed.
        assert!(err.is_ok());
    }

    #[test]
    fn whole_answer_and_error_in_200_body() {
        let c = parse_answer(b"\n\n  {\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"ok\"},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}")
        .unwrap();
        assert_eq!(c.text, "ok");
        assert_eq!(c.finish, FinishReason::Length);
        assert_eq!(c.usage.cost, None);
        let err =
            parse_answer(br#"{"error":{"code":"context_length_exceeded","message":"too long"}}"#)
                .unwrap_err();
        assert!(
            matches!(
                err,
                ProviderError::Reported(ProviderFailure::ContextTooLong)
            ),
            "{err:?}"
        );
        let err = parse_answer(br#"{"error":{"code":502,"message":"bad gateway"}}"#).unwrap_err();
        assert!(
            matches!(err, ProviderError::Upstream { status: 502 }),
            "{err:?}"
        );
    }

    #[test]
    fn body_always_has_max_tokens() {
        let req = ChatRequest {
            system: String::new(),
            user: "u".into(),
            model: "m".into(),
            max_tokens: 17,
            temperature: 0.2,
            seed: Some(9),
            system_allowance: None,
            context_tokens: None,
        };
        let b = request_body(&req, true);
        assert_eq!(b["max_tokens"], 17);
        assert_eq!(b["seed"], 9);
        assert_eq!(b["messages"].as_array().unwrap().len(), 1);
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert!(request_body(&req, false).get("stream").is_none());
    }
}
