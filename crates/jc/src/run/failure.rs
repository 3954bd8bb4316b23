//! Why a run failed, as both parties learn it ([`RunFailure`]): closed codes only.

use serde::{Deserialize, Serialize};
use skillbox_providers::ProviderFailure;

use crate::error::JcError;

/// Why a run failed, as both parties learn it: a closed code, never the provider's (or
/// anyone's) words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunFailure {
    Unauthorized,
    RateLimited,
    ModelRejected,
    ContextTooLong,
    UpstreamError,
    Timeout,
    Protocol,
    Unavailable,
    /// The skill body's secret markers are malformed: the box would not run it unguarded.
    GuardBody,
    /// The box itself failed (sealing, a lost stake): nothing the parties did.
    Internal,
    /// The box restarted and could not continue the run: its persisted state did not open
    /// under the box's storage key, or the box died at the provider too often.
    Interrupted,
}

impl RunFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            RunFailure::Internal => "internal",
            RunFailure::GuardBody => "guard_body",
            RunFailure::Interrupted => "interrupted",
            other => other.provider().map_or("internal", ProviderFailure::as_str),
        }
    }

    /// The provider failure this is, if it is one.
    pub fn provider(self) -> Option<ProviderFailure> {
        Some(match self {
            RunFailure::Unauthorized => ProviderFailure::Unauthorized,
            RunFailure::RateLimited => ProviderFailure::RateLimited,
            RunFailure::ModelRejected => ProviderFailure::ModelRejected,
            RunFailure::ContextTooLong => ProviderFailure::ContextTooLong,
            RunFailure::UpstreamError => ProviderFailure::UpstreamError,
            RunFailure::Timeout => ProviderFailure::Timeout,
            RunFailure::Protocol => ProviderFailure::Protocol,
            RunFailure::Unavailable => ProviderFailure::Unavailable,
            RunFailure::Internal | RunFailure::GuardBody | RunFailure::Interrupted => {
                return None;
            }
        })
    }

    /// Words for people, fixed per code.
    pub fn message(self) -> &'static str {
        match self {
            RunFailure::GuardBody => {
                return "the skill body's secret markers are malformed, so the box did not run it";
            }
            RunFailure::Interrupted => {
                return "the box restarted and could not continue the run";
            }
            _ => {}
        }
        self.provider()
            .map_or("the box failed the run", ProviderFailure::message)
    }
}

impl From<ProviderFailure> for RunFailure {
    fn from(f: ProviderFailure) -> RunFailure {
        match f {
            ProviderFailure::Unauthorized => RunFailure::Unauthorized,
            ProviderFailure::RateLimited => RunFailure::RateLimited,
            ProviderFailure::ModelRejected => RunFailure::ModelRejected,
            ProviderFailure::ContextTooLong => RunFailure::ContextTooLong,
            ProviderFailure::UpstreamError => RunFailure::UpstreamError,
            ProviderFailure::Timeout => RunFailure::Timeout,
            ProviderFailure::Protocol => RunFailure::Protocol,
            ProviderFailure::Unavailable => RunFailure::Unavailable,
        }
    }
}

impl From<&JcError> for RunFailure {
    fn from(e: &JcError) -> RunFailure {
        match e {
            JcError::ProviderFailed(f) => (*f).into(),
            JcError::ProviderUnavailable(_) | JcError::ProviderHost { .. } => {
                RunFailure::Unavailable
            }
            JcError::GuardBody => RunFailure::GuardBody,
            JcError::StoreTampered | JcError::RunInterrupted => RunFailure::Interrupted,
            _ => RunFailure::Internal,
        }
    }
}
