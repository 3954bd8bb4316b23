//! What the owner configures: the guard's settings as the program binds them.
//!
//! The program is one RFC 8785 (JCS) document that both parties sign and that is hashed, so the
//! spec holds integers and enums only (no floats: their JCS form is easy to get wrong across
//! implementations) and refuses unknown fields.

use serde::{Deserialize, Serialize};

/// What the box does with an answer the guard caught.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Replace the answer by a fixed refusal.
    Withhold,
    /// Run the provider again with the body replaced by [`crate::NEUTRAL_INSTRUCTION`], check that
    /// answer too, and withhold it if it is caught as well. The caller then cannot tell a caught
    /// attempt from an ordinary answer (PromptKeeper-style).
    Regenerate,
}

/// The owner's guard settings for one skill, bound byte for byte into the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardSpec {
    /// Off means every answer passes unchecked.
    pub enabled: bool,
    /// Word n-gram size of the containment measure (shrunk for short bodies, see
    /// [`crate::Prepared::ngram`]).
    pub ngram: u32,
    /// An answer is caught when the body words covered by its contained n-grams reach this many
    /// per mille of the body's words.
    pub threshold_permille: u32,
    /// An answer is also caught when it copies a passage of at least this many body words
    /// (small gaps bridged), whatever the fraction: it keeps a long body from leaking a large
    /// chunk per answer. 0 turns it off.
    pub max_copied_words: u32,
    pub action: Action,
    /// Check the canaries the owner marked (inline markers and `secret` lines).
    pub canaries: bool,
    /// Also treat secrets found in the body without a mark (a password, access code, PIN, API
    /// key, high-entropy token) as canaries.
    pub auto_canaries: bool,
}

pub const MIN_NGRAM: u32 = 3;
pub const MAX_NGRAM: u32 = 16;
pub const MIN_THRESHOLD_PERMILLE: u32 = 50;
pub const MAX_THRESHOLD_PERMILLE: u32 = 1000;
pub const MAX_COPIED_WORDS: u32 = 1_000_000;

/// The defaults, chosen from the measurement in `tests/extraction.rs` (see ARCHITECTURE.md).
pub const DEFAULT_NGRAM: u32 = 4;
pub const DEFAULT_THRESHOLD_PERMILLE: u32 = 350;
pub const DEFAULT_MAX_COPIED_WORDS: u32 = 80;

/// A spec value out of range, with the field named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("guard.{field}: {value} is out of range ({min}..={max})")]
    OutOfRange {
        field: &'static str,
        value: u32,
        min: u32,
        max: u32,
    },
}

impl GuardSpec {
    /// On; `regenerate` for the embedded model (a second run costs only local compute),
    /// `withhold` for remote providers (a second run costs the owner money).
    pub fn default_for(local: bool) -> Self {
        GuardSpec {
            enabled: true,
            ngram: DEFAULT_NGRAM,
            threshold_permille: DEFAULT_THRESHOLD_PERMILLE,
            max_copied_words: DEFAULT_MAX_COPIED_WORDS,
            action: if local {
                Action::Regenerate
            } else {
                Action::Withhold
            },
            canaries: true,
            auto_canaries: true,
        }
    }

    /// Refuse values the guard cannot honour, naming the field.
    pub fn validate(&self) -> Result<(), SpecError> {
        range("ngram", self.ngram, MIN_NGRAM, MAX_NGRAM)?;
        range(
            "threshold_permille",
            self.threshold_permille,
            MIN_THRESHOLD_PERMILLE,
            MAX_THRESHOLD_PERMILLE,
        )?;
        if self.max_copied_words != 0 {
            range(
                "max_copied_words",
                self.max_copied_words,
                self.ngram,
                MAX_COPIED_WORDS,
            )?;
        }
        Ok(())
    }
}

fn range(field: &'static str, value: u32, min: u32, max: u32) -> Result<(), SpecError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(SpecError::OutOfRange {
            field,
            value,
            min,
            max,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_depend_on_the_provider() {
        assert_eq!(GuardSpec::default_for(true).action, Action::Regenerate);
        assert_eq!(GuardSpec::default_for(false).action, Action::Withhold);
        for local in [true, false] {
            let spec = GuardSpec::default_for(local);
            assert!(spec.enabled && spec.canaries && spec.auto_canaries);
            spec.validate().unwrap();
        }
    }

    #[test]
    fn out_of_range_values_name_the_field() {
        let ok = GuardSpec::default_for(false);
        let cases = [
            (GuardSpec { ngram: 2, ..ok }, "ngram"),
            (GuardSpec { ngram: 17, ..ok }, "ngram"),
            (
                GuardSpec {
                    threshold_permille: 0,
                    ..ok
                },
                "threshold_permille",
            ),
            (
                GuardSpec {
                    threshold_permille: 1001,
                    ..ok
                },
                "threshold_permille",
            ),
            (
                GuardSpec {
                    max_copied_words: 3,
                    ..ok
                },
                "max_copied_words",
            ),
        ];
        for (spec, field) in cases {
            let err = spec.validate().unwrap_err();
            let SpecError::OutOfRange { field: f, .. } = err.clone();
            assert_eq!(f, field);
            assert!(err.to_string().starts_with(&format!("guard.{field}:")));
        }
        GuardSpec {
            max_copied_words: 0,
            ..ok
        }
        .validate()
        .unwrap();
    }

    #[test]
    fn json_is_integers_and_names_and_refuses_unknown_fields() {
        let spec = GuardSpec::default_for(true);
        let json = serde_json::to_string(&spec).unwrap();
        assert_eq!(
            json,
            r#"{"enabled":true,"ngram":4,"threshold_permille":350,"max_copied_words":80,"action":"regenerate","canaries":true,"auto_canaries":true}"#
        );
        assert!(!json.contains('.'), "no floats in the bound spec");
        let back: GuardSpec = serde_json::from_str(&json).unwrap();
        assert_eq!(back, spec);
        let extra = json.replace("}", r#","score":1}"#);
        assert!(serde_json::from_str::<GuardSpec>(&extra).is_err());
        let float = json.replace("350", "0.35");
        assert!(serde_json::from_str::<GuardSpec>(&float).is_err());
        let missing = r#"{"enabled":true}"#;
        assert!(serde_json::from_str::<GuardSpec>(missing).is_err());
    }
}
