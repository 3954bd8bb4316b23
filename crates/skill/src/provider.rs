//! The `provider:` grammar of a declaration. Lives here, at the bottom of the crate graph, so the
//! document layer and the box agree on one spelling.

/// Which provider a skill declares (`provider:` in SKILL.md) and a program names.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum ProviderId {
    OpenRouter,
    OpenAi,
    Anthropic,
    Ollama,
    /// `openai-compatible:<id>`: any server speaking OpenAI chat completions (vLLM, llama.cpp, ...).
    OpenAiCompatible(String),
    /// The embedded model (SmolLM2-135M-Instruct by default, llama.cpp in the box); needs no key.
    Local,
}

impl ProviderId {
    /// Whether calling this provider spends an API key the owner must stake.
    pub fn needs_key(&self) -> bool {
        !matches!(self, ProviderId::Local | ProviderId::Ollama)
    }
}

impl std::fmt::Display for ProviderId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProviderId::OpenRouter => f.write_str("openrouter"),
            ProviderId::OpenAi => f.write_str("openai"),
            ProviderId::Anthropic => f.write_str("anthropic"),
            ProviderId::Ollama => f.write_str("ollama"),
            ProviderId::OpenAiCompatible(id) => write!(f, "openai-compatible:{id}"),
            ProviderId::Local => f.write_str("local"),
        }
    }
}

impl From<ProviderId> for String {
    fn from(p: ProviderId) -> String {
        p.to_string()
    }
}

/// A provider string that is not one of the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown provider {0:?}: expected openrouter, openai, anthropic, ollama, openai-compatible:<id> or local"
)]
pub struct UnknownProvider(pub String);

impl std::str::FromStr for ProviderId {
    type Err = UnknownProvider;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "openrouter" => ProviderId::OpenRouter,
            "openai" => ProviderId::OpenAi,
            "anthropic" => ProviderId::Anthropic,
            "ollama" => ProviderId::Ollama,
            "local" => ProviderId::Local,
            other => match other.strip_prefix("openai-compatible:") {
                Some(id)
                    if !id.is_empty()
                        && id.len() <= 64
                        && id.bytes().all(|b| {
                            b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.'
                        }) =>
                {
                    ProviderId::OpenAiCompatible(id.to_owned())
                }
                _ => return Err(UnknownProvider(s.to_owned())),
            },
        })
    }
}

impl TryFrom<String> for ProviderId {
    type Error = UnknownProvider;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}
