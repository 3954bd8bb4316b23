//! Why a run failed, as both parties learn it ([`RunFailure`]): closed codes only.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use skillbox_providers::ProviderFailure;

use crate::error::JcError;

/// Why a run failed, as both parties learn it: a closed code, never the provider's (or
/// anyone's) words. On the wire and on disk it is the bare code (`"rate_limited"`,
/// `"guard_body"`): a provider failure's code is the provider crate's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunFailure {
    /// The provider failed, in the provider crate's closed set.
    Provider(ProviderFailure),
    /// The skill body's secret markers are malformed: the box would not run it unguarded.
    GuardBody,
    /// The box itself failed (sealing, a lost stake): nothing the parties did.
    Internal,
    /// The box restarted and could not continue the run: its persisted state did not open
    /// under the box's storage key, or the box died at the provider too often.
    Interrupted,
    /// The caller's released answers of this skill today already carried the owner's day
    /// limits (the `day_limits` entry of its stake), added up by the box's day book: the box
    /// refused the run before any provider request. How much was carried never leaves the box.
    CoverageExceeded,
    /// The box was upgraded while the run was open or running, and its program names a prompt
    /// template the new build does not run (the code a program naming it gets at open): the
    /// run stopped before any provider request. Not the host's doing: a tampered run is
    /// refused, never failed.
    PromptTemplateUnknown,
}

impl RunFailure {
    /// The failures that are the box's own (not a provider's).
    const OWN: [RunFailure; 5] = [
        RunFailure::GuardBody,
        RunFailure::Internal,
        RunFailure::Interrupted,
        RunFailure::CoverageExceeded,
        RunFailure::PromptTemplateUnknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunFailure::Provider(f) => f.as_str(),
            RunFailure::Internal => "internal",
            RunFailure::GuardBody => "guard_body",
            RunFailure::Interrupted => "interrupted",
            RunFailure::CoverageExceeded => "coverage_exceeded",
            RunFailure::PromptTemplateUnknown => "prompt_template_unknown",
        }
    }

    /// The failure a code names, if it names one.
    pub fn parse(code: &str) -> Option<RunFailure> {
        ProviderFailure::parse(code)
            .map(RunFailure::Provider)
            .or_else(|| Self::OWN.into_iter().find(|f| f.as_str() == code))
    }

    /// The provider failure this is, if it is one.
    pub fn provider(self) -> Option<ProviderFailure> {
        match self {
            RunFailure::Provider(f) => Some(f),
            RunFailure::Internal
            | RunFailure::GuardBody
            | RunFailure::Interrupted
            | RunFailure::CoverageExceeded
            | RunFailure::PromptTemplateUnknown => None,
        }
    }

    /// Words for people, fixed per code.
    pub fn message(self) -> &'static str {
        match self {
            RunFailure::Provider(f) => f.message(),
            RunFailure::GuardBody => {
                "the skill body's secret markers are malformed, so the box did not run it"
            }
            RunFailure::Interrupted => "the box restarted and could not continue the run",
            RunFailure::Internal => "the box failed the run",
            RunFailure::CoverageExceeded => {
                "the skill's owner allows this caller no more of this skill today"
            }
            RunFailure::PromptTemplateUnknown => {
                "the box was upgraded and no longer runs the prompt template this run's program names"
            }
        }
    }
}

impl Serialize for RunFailure {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for RunFailure {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RunFailure, D::Error> {
        let code = std::borrow::Cow::<'de, str>::deserialize(d)?;
        RunFailure::parse(&code).ok_or_else(|| serde::de::Error::custom("unknown run failure code"))
    }
}

impl From<ProviderFailure> for RunFailure {
    fn from(f: ProviderFailure) -> RunFailure {
        RunFailure::Provider(f)
    }
}

impl From<&JcError> for RunFailure {
    fn from(e: &JcError) -> RunFailure {
        match e {
            JcError::ProviderFailed(f) => (*f).into(),
            JcError::ProviderUnavailable(_) | JcError::ProviderHost { .. } => {
                RunFailure::Provider(ProviderFailure::Unavailable)
            }
            JcError::GuardBody => RunFailure::GuardBody,
            JcError::StoreTampered | JcError::RunInterrupted => RunFailure::Interrupted,
            JcError::CoverageExceeded => RunFailure::CoverageExceeded,
            JcError::PromptTemplateUnknown => RunFailure::PromptTemplateUnknown,
            // The run did not get to its provider in time (an earlier run of its caller and
            // skill held the day's turn): a timeout, a code every node version parses.
            JcError::DayTurnTimedOut => RunFailure::Provider(ProviderFailure::Timeout),
            _ => RunFailure::Internal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every failure travels as its bare code and comes back the same; the codes are the ones
    /// the enum had before provider failures were folded into one variant (`rename_all =
    /// "snake_case"` of the same names), so runs stored before read back.
    #[test]
    fn codes_round_trip_as_bare_strings() {
        let all: Vec<RunFailure> = ProviderFailure::ALL
            .into_iter()
            .map(RunFailure::from)
            .chain(RunFailure::OWN)
            .collect();
        let codes: Vec<&str> = all.iter().map(|f| f.as_str()).collect();
        assert_eq!(
            codes,
            [
                "unauthorized",
                "rate_limited",
                "model_rejected",
                "context_too_long",
                "upstream_error",
                "timeout",
                "protocol",
                "unavailable",
                "guard_body",
                "internal",
                "interrupted",
                "coverage_exceeded",
                "prompt_template_unknown",
            ]
        );
        for f in all {
            let json = serde_json::to_string(&f).unwrap();
            assert_eq!(json, format!("\"{}\"", f.as_str()));
            assert_eq!(serde_json::from_str::<RunFailure>(&json).unwrap(), f);
            assert!(!f.message().is_empty());
        }
        assert!(serde_json::from_str::<RunFailure>("\"stolen\"").is_err());
        assert!(serde_json::from_str::<RunFailure>("3").is_err());
    }
}
