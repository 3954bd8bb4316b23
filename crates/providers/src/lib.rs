//! Providers: the model back ends a box calls, and nothing else. Used only inside the box.
//!
//! The box hands a [`ChatRequest`] and (for remote providers) the owner's API key to a
//! [`Provider`]; the provider answers with a [`Completion`] or a [`ProviderError`] whose kind the
//! box can act on (retry, fail the run, report "unavailable"). Nothing here logs prompt text,
//! answers or keys.

use std::future::Future;
use std::pin::Pin;

pub use skillbox_skill::{ProviderId, UnknownProvider};

pub mod anthropic;
pub mod context;
mod http;
pub use http::is_loopback;
pub mod local;
pub mod loopback_owner;
pub mod openai;
mod registry;

pub use context::ContextSource;
pub use http::HttpOptions;
pub use registry::{ProviderSettings, Registry, build_remote, default_base_url};

/// One chat turn: the skill body as system prompt, the caller's request and sources as user text.
#[derive(Clone, Debug)]
pub struct ChatRequest {
    pub system: String,
    pub user: String,
    /// Provider model id (the owner's stake); ignored by `local`.
    pub model: String,
    pub max_tokens: u32,
    pub temperature: f32,
    /// Sampling seed, for reproducible runs where the provider supports one.
    pub seed: Option<u64>,
    /// Tokens the system text may take, fixed by the owner's configuration and never by the
    /// text itself (the box sets it from the program: the owner's body allowance plus its own
    /// notice). With it, `local` judges the prompt against what the caller can compute — its
    /// own text, the frame at its largest, this allowance and `max_tokens` — and always answers
    /// with a budget of `max_tokens`, so neither a refusal nor the answer's length depends on
    /// how long the body really is; a system text over it fails `unavailable`, whatever the
    /// request. `None`: the prompt is judged as it is (one party holds both texts). Remote
    /// providers, which have no tokenizer in the box, judge it in bytes
    /// ([`ChatRequest::remote_admission`]).
    pub system_allowance: Option<usize>,
    /// The model's context in tokens as the owner declared it in the program
    /// (`owner_inputs.model_context_tokens`, else its default): what a remote provider judges
    /// a request against before sending it, with the [`system_allowance`](Self::system_allowance).
    /// `local` knows its own context and does not read it.
    pub context_tokens: Option<usize>,
}

/// What a remote chat template adds to a prompt besides its texts, at most, in tokens (role
/// markers, BOS, a template's fixed lines: OpenAI's is about 3 a message plus 3, Llama 3's
/// about 30). Public, so the caller computes the same admission as the box.
pub const REMOTE_FRAME_TOKENS: usize = 128;

/// The words for a system text over its allowance at a remote provider: fixed, the owner's to
/// fix, and the same whatever the request (the box never names a length).
const REMOTE_OVER_ALLOWANCE: &str = "remote model: the system prompt's bytes are more than its \
     allowance (the owner's body_max_tokens), so the box cannot show it fits";

/// The words for a box with an allowance but no declared context: nothing to judge against.
const REMOTE_NO_CONTEXT: &str =
    "remote model: no declared model context to judge the request against";

/// The words for a context refusal from a remote provider after the box let the request in:
/// the owner's declared context is more than the model takes. Fixed, like any owner fault.
const REMOTE_MISDECLARED: &str = "remote model: the provider refused a request the box judged \
     within the declared context (the owner's model_context_tokens is more than the model's)";

impl ChatRequest {
    /// Whether a remote provider may be sent this request, judged before sending from what the
    /// caller can compute only (review 26 V1, N5 for remote providers): the box has no remote
    /// tokenizer, but a token covers at least one byte, so bytes bound tokens from above.
    ///
    /// With a [`system_allowance`](Self::system_allowance):
    /// - a system text of more bytes than the allowance fails `unavailable`, whatever the
    ///   request: the box cannot show it fits (the owner's to fix, constant across probes);
    /// - without a [`context_tokens`](Self::context_tokens) it fails `unavailable` (fail closed:
    ///   nothing public to judge against);
    /// - the user text's bytes + [`REMOTE_FRAME_TOKENS`] + the allowance + `max_tokens` over the
    ///   context fails `context_too_long` (`InvalidRequest`): only the caller's own text and
    ///   the program decide it, never the body's length.
    ///
    /// Let in, the prompt and `max_tokens` fit the declared context, so the provider's answer
    /// budget is `max_tokens` and a context refusal can only mean a wrong declaration
    /// ([`ChatRequest::after_admission`]). Without an allowance: nothing judged (`Ok(false)`),
    /// for a party holding both texts. `Ok(true)`: judged and let in.
    pub fn remote_admission(&self) -> Result<bool, ProviderError> {
        let Some(allowance) = self.system_allowance else {
            return Ok(false);
        };
        if self.system.len() > allowance {
            return Err(ProviderError::Unavailable(REMOTE_OVER_ALLOWANCE.into()));
        }
        let Some(context) = self.context_tokens else {
            return Err(ProviderError::Unavailable(REMOTE_NO_CONTEXT.into()));
        };
        let most = remote_prompt_bound(self.user.len(), allowance, self.max_tokens);
        if most > context {
            return Err(ProviderError::InvalidRequest(format!(
                "the request is {} bytes; with the frame ({REMOTE_FRAME_TOKENS}), the body \
                 allowance ({allowance}) and the answer ({}) the declared model context takes \
                 at most {context} tokens",
                self.user.len(),
                self.max_tokens
            )));
        }
        Ok(true)
    }

    /// A remote provider's error for a request [`remote_admission`](Self::remote_admission)
    /// let in (`judged`): a context refusal then means the owner declared more context than the
    /// model takes, and its edge sits at the model's context less the real body — so it fails
    /// `unavailable` like any other owner-side fault, never `context_too_long`, which the caller
    /// could bisect. Other errors, and any error of a request not judged, pass as they are.
    pub fn after_admission(judged: bool, error: ProviderError) -> ProviderError {
        if judged && error.failure() == ProviderFailure::ContextTooLong {
            ProviderError::Unavailable(REMOTE_MISDECLARED.into())
        } else {
            error
        }
    }
}

/// The most tokens a remote prompt of `user_bytes` of user text and a system text within
/// `allowance` takes with its answer of `max_tokens`: what [`ChatRequest::remote_admission`]
/// holds against the declared context. Saturating: no sum wraps.
pub fn remote_prompt_bound(user_bytes: usize, allowance: usize, max_tokens: u32) -> usize {
    REMOTE_FRAME_TOKENS
        .saturating_add(allowance)
        .saturating_add(user_bytes)
        .saturating_add(max_tokens as usize)
}

/// Token accounting as the provider reported it.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// OpenRouter reports the cost of every request; others leave this empty.
    pub cost: Option<f64>,
}

/// Why generation stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Stop,
    Length,
    Other,
}

#[derive(Clone, Debug)]
pub struct Completion {
    pub text: String,
    pub finish: FinishReason,
    pub usage: Usage,
}

/// What went wrong, in kinds the box can act on. Messages never carry prompt text or keys.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("provider rejected the API key (HTTP {status})")]
    Unauthorized { status: u16 },
    #[error("provider rate limit (HTTP 429), retry after {retry_after_secs:?} s")]
    RateLimited { retry_after_secs: Option<u64> },
    #[error("provider error HTTP {status}")]
    Upstream { status: u16 },
    #[error("provider did not answer within {secs} s")]
    Timeout { secs: u64 },
    #[error("provider answered with a redirect, which a box never follows")]
    Redirect,
    /// The provider reported an error in its answer (a 200 body's `error`, a stream's error
    /// event). Its own words are read inside the box only to pick the kind, then dropped: a
    /// provider quoting its input would otherwise carry the prompt out.
    #[error("provider reported an error: {0}")]
    Reported(ProviderFailure),
    #[error("provider answer not understood: {0}")]
    Protocol(String),
    #[error("provider unavailable: {0}")]
    Unavailable(String),
    #[error("provider request failed: {0}")]
    Transport(String),
    /// The request cannot be sent as asked (prompt longer than the model's context, a key that
    /// is not a valid header value, ...). Not retryable.
    #[error("provider request refused before sending: {0}")]
    InvalidRequest(String),
    /// The provider is configured wrongly (no base URL for `openai-compatible:<id>`, a base URL
    /// with credentials, ...).
    #[error("provider configuration: {0}")]
    Config(String),
    /// `skillbox model fetch` failed (pip, the wheel, the checksum, the data dir).
    #[error("model fetch failed: {0}")]
    Fetch(String),
}

/// The closed set of provider failures that may leave a box (design §9): a run's failure is one
/// of these codes, never provider text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderFailure {
    /// The key was refused.
    Unauthorized,
    RateLimited,
    /// The model id is unknown to the provider or not allowed for the key.
    ModelRejected,
    /// The prompt (body + request + sources) is longer than the model takes.
    ContextTooLong,
    /// Any other error the provider reported (5xx, an error event, a moderation refusal).
    UpstreamError,
    Timeout,
    /// The answer was not in the provider's wire format (or a redirect, which is never followed).
    Protocol,
    /// The provider is not available at this box (no model file, not configured).
    Unavailable,
}

impl ProviderFailure {
    pub const ALL: [ProviderFailure; 8] = [
        ProviderFailure::Unauthorized,
        ProviderFailure::RateLimited,
        ProviderFailure::ModelRejected,
        ProviderFailure::ContextTooLong,
        ProviderFailure::UpstreamError,
        ProviderFailure::Timeout,
        ProviderFailure::Protocol,
        ProviderFailure::Unavailable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ProviderFailure::Unauthorized => "unauthorized",
            ProviderFailure::RateLimited => "rate_limited",
            ProviderFailure::ModelRejected => "model_rejected",
            ProviderFailure::ContextTooLong => "context_too_long",
            ProviderFailure::UpstreamError => "upstream_error",
            ProviderFailure::Timeout => "timeout",
            ProviderFailure::Protocol => "protocol",
            ProviderFailure::Unavailable => "unavailable",
        }
    }

    pub fn parse(s: &str) -> Option<ProviderFailure> {
        Self::ALL.into_iter().find(|f| f.as_str() == s)
    }

    /// Words for people, fixed per code.
    pub fn message(self) -> &'static str {
        match self {
            ProviderFailure::Unauthorized => "the provider refused the owner's API key",
            ProviderFailure::RateLimited => "the provider's rate limit was reached",
            ProviderFailure::ModelRejected => "the provider does not take the owner's model",
            ProviderFailure::ContextTooLong => "the prompt is longer than the model takes",
            ProviderFailure::UpstreamError => "the provider reported an error",
            ProviderFailure::Timeout => "the provider did not answer in time",
            ProviderFailure::Protocol => "the provider's answer was not understood",
            ProviderFailure::Unavailable => "the provider is not available at this box",
        }
    }

    /// Pick the kind of an error a provider reported from its structured code (OpenAI's
    /// `error.code` or `error.type`, ...), never from its message: a provider may quote its
    /// input there — the owner's skill body and the caller's request — and the caller chooses
    /// which words its request makes it quote, so a kind picked from them would tell the caller
    /// whether the body holds a word. A code that is not an identifier (at most 64 ASCII
    /// letters, digits, `_`, `-`, `.`), or none, is `upstream_error`. Runs inside the box; the
    /// code is not kept.
    pub fn classify(code: Option<&str>) -> ProviderFailure {
        let Some(code) = code.filter(|c| {
            !c.is_empty()
                && c.len() <= 64
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        }) else {
            return ProviderFailure::UpstreamError;
        };
        let text = code.to_ascii_lowercase().replace(['_', '-', '.'], " ");
        let has = |w: &str| text.contains(w);
        if has("context")
            || has("too long")
            || has("too many tokens")
            || (has("max") && has("token"))
        {
            ProviderFailure::ContextTooLong
        } else if has("model")
            && (has("not found")
                || has("does not exist")
                || has("invalid")
                || has("unknown")
                || has("not available")
                || has("not supported"))
        {
            ProviderFailure::ModelRejected
        } else if (has("rate") && has("limit")) || has("quota") {
            ProviderFailure::RateLimited
        } else if has("auth") || has("api key") || has("permission") {
            ProviderFailure::Unauthorized
        } else {
            ProviderFailure::UpstreamError
        }
    }
}

impl std::fmt::Display for ProviderFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ProviderError {
    /// The closed code this error crosses the box boundary as.
    pub fn failure(&self) -> ProviderFailure {
        match self {
            ProviderError::Unauthorized { .. } => ProviderFailure::Unauthorized,
            ProviderError::RateLimited { .. } => ProviderFailure::RateLimited,
            ProviderError::Upstream { status: 404 } => ProviderFailure::ModelRejected,
            ProviderError::Upstream { status: 413 } => ProviderFailure::ContextTooLong,
            ProviderError::Upstream { .. } | ProviderError::Transport(_) => {
                ProviderFailure::UpstreamError
            }
            ProviderError::Timeout { .. } => ProviderFailure::Timeout,
            ProviderError::Redirect | ProviderError::Protocol(_) => ProviderFailure::Protocol,
            ProviderError::Reported(f) => *f,
            ProviderError::InvalidRequest(_) => ProviderFailure::ContextTooLong,
            ProviderError::Unavailable(_) | ProviderError::Config(_) | ProviderError::Fetch(_) => {
                ProviderFailure::Unavailable
            }
        }
    }

    /// Worth another try after a pause (rate limit, 5xx, timeout, transport).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ProviderError::RateLimited { .. }
                | ProviderError::Upstream { status: 500..=599 }
                | ProviderError::Timeout { .. }
                | ProviderError::Transport(_)
        )
    }
}

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What [`Provider::complete`] returns: one completion or why not, later.
pub type Reply<'a> = BoxFuture<'a, Result<Completion, ProviderError>>;

/// A model back end. Object-safe so the box can hold `Arc<dyn Provider>`.
pub trait Provider: Send + Sync {
    /// `api_key` is the owner's staked key; it goes only into the request header.
    fn complete<'a>(&'a self, request: ChatRequest, api_key: Option<&'a str>) -> Reply<'a>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reported_errors_map_to_closed_codes_by_their_code_only() {
        use ProviderFailure::*;
        for (code, want) in [
            (Some("context_length_exceeded"), ContextTooLong),
            (Some("model_not_found"), ModelRejected),
            (Some("invalid_model"), ModelRejected),
            (Some("rate_limit_exceeded"), RateLimited),
            (Some("insufficient_quota"), RateLimited),
            (Some("invalid_api_key"), Unauthorized),
            (Some("moderation"), UpstreamError),
            (Some("server_error"), UpstreamError),
            // Not a code but words (a provider quoting its input there): no kind from them.
            (Some("the context is too long"), UpstreamError),
            (Some(""), UpstreamError),
            (None, UpstreamError),
        ] {
            assert_eq!(ProviderFailure::classify(code), want, "{code:?}");
        }
        for f in ProviderFailure::ALL {
            assert_eq!(ProviderFailure::parse(f.as_str()), Some(f));
            assert!(!f.message().is_empty());
        }
        assert_eq!(ProviderFailure::parse("anything else"), None);
    }

    /// A request as the box sends a remote provider: `body` behind a fixed allowance, `user`
    /// of the caller's, `max_tokens` of answer, the declared `context`.
    fn remote(body: &str, user: &str, max_tokens: u32, context: Option<usize>) -> ChatRequest {
        ChatRequest {
            system: body.into(),
            user: user.into(),
            model: "m".into(),
            max_tokens,
            temperature: 0.0,
            seed: None,
            system_allowance: Some(1000),
            context_tokens: context,
        }
    }

    #[test]
    fn remote_admission_judges_the_callers_bytes_the_allowance_and_the_answer_only() {
        // The edge: frame + allowance + user bytes + max_tokens == context is let in, one byte
        // more is refused `context_too_long`, whatever the body within its allowance.
        let context = 4096;
        let room = context - REMOTE_FRAME_TOKENS - 1000 - 100;
        assert_eq!(remote_prompt_bound(room, 1000, 100), context);
        let mut refusals = Vec::new();
        for body in ["", "short", &"b".repeat(999), &"b".repeat(1000)] {
            let fits = remote(body, &"u".repeat(room), 100, Some(context));
            assert_eq!(fits.remote_admission().ok(), Some(true), "{}", body.len());
            let over = remote(body, &"u".repeat(room + 1), 100, Some(context));
            let err = over.remote_admission().expect_err("one byte over");
            assert_eq!(err.failure(), ProviderFailure::ContextTooLong);
            refusals.push(err.to_string());
        }
        // The refusal's words name the caller's length and the public bounds: one text for
        // every body.
        refusals.dedup();
        assert_eq!(refusals.len(), 1, "{refusals:?}");
        // max_tokens is budgeted in full: one more answer token is one byte less of request.
        let err = remote("", &"u".repeat(room), 101, Some(context)).remote_admission();
        assert_eq!(
            err.map_err(|e| e.failure()),
            Err(ProviderFailure::ContextTooLong)
        );
        // A body of more bytes than its allowance fails `unavailable` on every request, the
        // shortest included: the box cannot show it fits.
        for user in ["", "hi", &"u".repeat(room + 1)] {
            let err = remote(&"b".repeat(1001), user, 100, Some(context)).remote_admission();
            assert_eq!(
                err.map_err(|e| e.failure()),
                Err(ProviderFailure::Unavailable)
            );
        }
        // An allowance and no declared context: closed, `unavailable`.
        let err = remote("short", "hi", 100, None).remote_admission();
        assert_eq!(
            err.map_err(|e| e.failure()),
            Err(ProviderFailure::Unavailable)
        );
        // No allowance (no box): nothing judged.
        let free = ChatRequest {
            system_allowance: None,
            context_tokens: None,
            ..remote(&"b".repeat(5000), &"u".repeat(9000), 100, None)
        };
        assert_eq!(free.remote_admission().ok(), Some(false));
        // Sums saturate instead of wrapping.
        assert_eq!(
            remote_prompt_bound(usize::MAX, usize::MAX, u32::MAX),
            usize::MAX
        );
    }

    #[test]
    fn a_context_refusal_after_admission_is_unavailable_and_other_errors_pass() {
        for e in [
            ProviderError::Reported(ProviderFailure::ContextTooLong),
            ProviderError::Upstream { status: 413 },
            ProviderError::InvalidRequest("x".into()),
        ] {
            assert_eq!(e.failure(), ProviderFailure::ContextTooLong);
            let mapped = ChatRequest::after_admission(true, e);
            assert_eq!(mapped.failure(), ProviderFailure::Unavailable, "{mapped}");
        }
        // Not judged (no box), it stays what it was.
        let kept = ChatRequest::after_admission(false, ProviderError::Upstream { status: 413 });
        assert_eq!(kept.failure(), ProviderFailure::ContextTooLong);
        for (e, want) in [
            (
                ProviderError::Upstream { status: 502 },
                ProviderFailure::UpstreamError,
            ),
            (ProviderError::Timeout { secs: 1 }, ProviderFailure::Timeout),
            (
                ProviderError::Reported(ProviderFailure::RateLimited),
                ProviderFailure::RateLimited,
            ),
        ] {
            assert_eq!(ChatRequest::after_admission(true, e).failure(), want);
        }
    }

    #[test]
    fn every_error_kind_has_a_closed_code_and_none_carries_provider_words() {
        use ProviderFailure::*;
        for (e, want) in [
            (ProviderError::Reported(ContextTooLong), ContextTooLong),
            (ProviderError::Upstream { status: 404 }, ModelRejected),
            (ProviderError::Upstream { status: 502 }, UpstreamError),
            (ProviderError::Timeout { secs: 3 }, Timeout),
            (ProviderError::Redirect, Protocol),
            (
                ProviderError::Unavailable("no model file".into()),
                Unavailable,
            ),
        ] {
            assert_eq!(e.failure(), want, "{e}");
        }
    }
}
