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
mod http;
pub use http::is_loopback;
pub mod local;
pub mod openai;
mod registry;

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
    /// providers, which have no tokenizer in the box, do not read it.
    pub system_allowance: Option<usize>,
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
