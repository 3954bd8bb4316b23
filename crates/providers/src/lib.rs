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
    #[error("provider reported an error mid-stream: {0}")]
    MidStream(String),
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

impl ProviderError {
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

/// A model back end. Object-safe so the box can hold `Arc<dyn Provider>`.
pub trait Provider: Send + Sync {
    /// `api_key` is the owner's staked key; it goes only into the request header.
    fn complete<'a>(
        &'a self,
        request: ChatRequest,
        api_key: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Completion, ProviderError>>;
}
