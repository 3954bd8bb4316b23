//! Source selection at call start (design §7), exactly:
//! - a list: exactly those sources; a name outside the skill's `requiredSources` is refused
//!   (never dropped), and so is a name this node does not hold;
//! - an empty list: none, the call runs on its request text alone;
//! - omitted: the skill's `requiredSources` this node holds (the router's case); when the skill
//!   requires sources and this node holds none of them, the call is refused where it starts.

use serde::Serialize;

/// Why a selection was refused. Each has its own stable code and HTTP status.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum SelectionError {
    #[error(
        "source {name:?} is not among the skill's requiredSources {required:?}: a call may narrow that list, never widen it"
    )]
    SourceNotRequired { name: String, required: Vec<String> },
    #[error("this node holds no source named {name:?}")]
    SourceNotHeld { name: String },
    #[error("source {name:?} is named twice")]
    DuplicateSource { name: String },
    #[error(
        "the skill requires {required:?} and this node holds none of them as shareable sources: a run over none of the data would only report it missing (mark one shareable: skillbox source share NAME)"
    )]
    RequiredSourcesNotHeld { required: Vec<String> },
}

impl SelectionError {
    pub fn code(&self) -> &'static str {
        match self {
            SelectionError::SourceNotRequired { .. } => "source_not_required",
            SelectionError::SourceNotHeld { .. } => "source_not_held",
            SelectionError::DuplicateSource { .. } => "duplicate_source",
            SelectionError::RequiredSourcesNotHeld { .. } => "required_sources_not_held",
        }
    }

    /// 400 for a request that names the wrong thing; 422 for a well-formed call this node
    /// cannot usefully make.
    pub fn http_status(&self) -> u16 {
        match self {
            SelectionError::RequiredSourcesNotHeld { .. } => 422,
            _ => 400,
        }
    }
}

/// Choose the sources a call applies. `held` answers whether this node holds a source.
pub fn select_sources(
    required: &[String],
    held: impl Fn(&str) -> bool,
    requested: Option<&[String]>,
) -> Result<Vec<String>, SelectionError> {
    match requested {
        Some(list) => {
            let mut chosen: Vec<String> = Vec::with_capacity(list.len());
            for name in list {
                if !required.contains(name) {
                    return Err(SelectionError::SourceNotRequired {
                        name: name.clone(),
                        required: required.to_vec(),
                    });
                }
                if chosen.contains(name) {
                    return Err(SelectionError::DuplicateSource { name: name.clone() });
                }
                if !held(name) {
                    return Err(SelectionError::SourceNotHeld { name: name.clone() });
                }
                chosen.push(name.clone());
            }
            Ok(chosen)
        }
        None => {
            let chosen: Vec<String> = required.iter().filter(|n| held(n)).cloned().collect();
            if !required.is_empty() && chosen.is_empty() {
                return Err(SelectionError::RequiredSourcesNotHeld {
                    required: required.to_vec(),
                });
            }
            Ok(chosen)
        }
    }
}
