//! Errors and warnings about a document, each naming the field and the line it is about.

use serde::Serialize;

/// One problem (or warning) found in a SKILL.md, located as precisely as the input allows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// The front-matter field, e.g. `description` or `memory.longTerm`; `None` for the document
    /// as a whole (encoding, size, missing front matter).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// 1-based line in the whole document (front-matter delimiters count).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    pub message: String,
}

impl Diagnostic {
    pub fn new(field: Option<&str>, line: Option<usize>, message: impl Into<String>) -> Self {
        Diagnostic {
            field: field.map(str::to_owned),
            line,
            message: message.into(),
        }
    }

    pub fn document(line: Option<usize>, message: impl Into<String>) -> Self {
        Self::new(None, line, message)
    }
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.line, &self.field) {
            (Some(line), Some(field)) => write!(f, "line {line}: {field}: {}", self.message),
            (Some(line), None) => write!(f, "line {line}: {}", self.message),
            (None, Some(field)) => write!(f, "{field}: {}", self.message),
            (None, None) => f.write_str(&self.message),
        }
    }
}

/// A document that cannot be a skill. Holds every problem found, not just the first, so an
/// author fixes them in one pass.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct DocumentError {
    pub problems: Vec<Diagnostic>,
}

impl DocumentError {
    pub(crate) fn one(d: Diagnostic) -> Self {
        DocumentError { problems: vec![d] }
    }
}

impl std::fmt::Display for DocumentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}
