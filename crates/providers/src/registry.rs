//! How a box gets the provider a program names: one instance per [`ProviderId`], built from
//! default or configured base URLs, the local model shared by all runs.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::anthropic::Anthropic;
use crate::http::HttpOptions;
use crate::local::LocalProvider;
use crate::openai::{OpenAiCompatible, OpenAiOptions};
use crate::{ContextSource, Provider, ProviderError, ProviderId};

/// The base URL a provider is reached at unless configured otherwise. `openai-compatible:<id>`
/// and `local` have none.
pub fn default_base_url(id: &ProviderId) -> Option<&'static str> {
    match id {
        ProviderId::OpenRouter => Some("https://openrouter.ai/api/v1"),
        ProviderId::OpenAi => Some("https://api.openai.com/v1"),
        ProviderId::Anthropic => Some("https://api.anthropic.com"),
        ProviderId::Ollama => Some("http://127.0.0.1:11434/v1"),
        ProviderId::OpenAiCompatible(_) | ProviderId::Local => None,
    }
}

/// What a box knows about its providers.
#[derive(Clone, Debug)]
pub struct ProviderSettings {
    /// Base URLs that replace the defaults; required for every `openai-compatible:<id>` used.
    pub base_urls: HashMap<ProviderId, String>,
    pub http: HttpOptions,
    /// Stream OpenAI-compatible answers (see [`crate::openai`]).
    pub stream: bool,
    /// The GGUF file of the embedded model (see [`crate::local::default_model_path`]).
    pub model_path: PathBuf,
    /// Local generations decoded together (see [`crate::local::LocalOptions`]).
    pub local_parallelism: usize,
    /// Compute threads of the local model; `None`: the machine's physical cores.
    pub local_threads: Option<usize>,
    /// Tokens per local generation; `None`: the model's training context, at most 4096.
    pub local_context: Option<usize>,
    /// GPUs the box's attested configuration names; 0 (the default): the local model stays off
    /// every GPU (see [`crate::local::LocalOptions::gpus`]).
    pub local_gpus: u32,
}

impl ProviderSettings {
    pub fn new(model_path: PathBuf) -> Self {
        ProviderSettings {
            base_urls: HashMap::new(),
            http: HttpOptions::default(),
            stream: true,
            model_path,
            local_parallelism: crate::local::DEFAULT_PARALLEL,
            local_threads: None,
            local_context: None,
            local_gpus: 0,
        }
    }

    /// How the embedded model runs.
    pub fn local_options(&self) -> crate::local::LocalOptions {
        crate::local::LocalOptions {
            threads: self.local_threads,
            parallel: self.local_parallelism,
            context: self.local_context,
            gpus: self.local_gpus,
        }
    }

    pub fn with_base_url(mut self, id: ProviderId, url: impl Into<String>) -> Self {
        self.base_urls.insert(id, url.into());
        self
    }

    /// The base URL in force for `id`.
    pub fn base_url(&self, id: &ProviderId) -> Result<String, ProviderError> {
        if let Some(url) = self.base_urls.get(id) {
            return Ok(url.clone());
        }
        default_base_url(id).map(str::to_owned).ok_or_else(|| {
            ProviderError::Config(format!("provider {id} needs a configured base URL"))
        })
    }
}

/// Builds providers on first use and keeps them (connection pools, the loaded model).
pub struct Registry {
    settings: ProviderSettings,
    local: Arc<LocalProvider>,
    built: Mutex<HashMap<ProviderId, Arc<dyn Provider>>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Registry {
    pub fn new(settings: ProviderSettings) -> Self {
        let local = Arc::new(LocalProvider::from_settings(&settings));
        Registry {
            settings,
            local,
            built: Mutex::new(HashMap::new()),
        }
    }

    pub fn settings(&self) -> &ProviderSettings {
        &self.settings
    }

    /// The embedded model's provider (for start-up status and preloading).
    pub fn local(&self) -> &Arc<LocalProvider> {
        &self.local
    }

    /// The provider for `id`. Remote providers talk only to their base URL's host.
    pub fn get(&self, id: &ProviderId) -> Result<Arc<dyn Provider>, ProviderError> {
        if *id == ProviderId::Local {
            return Ok(self.local.clone());
        }
        // A poisoned lock only means another thread panicked mid-insert; the map is still valid.
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = built.get(id) {
            return Ok(p.clone());
        }
        let provider = build_remote(id, &self.settings)?;
        built.insert(id.clone(), provider.clone());
        Ok(provider)
    }
}

/// A remote provider for `id` with the settings' base URL and HTTP options.
pub fn build_remote(
    id: &ProviderId,
    settings: &ProviderSettings,
) -> Result<Arc<dyn Provider>, ProviderError> {
    let url = settings.base_url(id)?;
    let http = settings.http.clone();
    Ok(match id {
        ProviderId::Anthropic => Arc::new(Anthropic::new(&url, http)?.for_provider(id)),
        ProviderId::OpenRouter => {
            let mut options = OpenAiOptions::openrouter(http);
            options.stream = settings.stream;
            Arc::new(OpenAiCompatible::new(&url, options)?.for_provider(id))
        }
        ProviderId::OpenAi | ProviderId::Ollama | ProviderId::OpenAiCompatible(_) => {
            let context = match id {
                ProviderId::OpenAi => ContextSource::OpenAi,
                ProviderId::Ollama => ContextSource::Ollama,
                _ => ContextSource::SelfHosted,
            };
            let options = OpenAiOptions {
                http,
                stream: settings.stream,
                context,
                ..OpenAiOptions::default()
            };
            Arc::new(OpenAiCompatible::new(&url, options)?.for_provider(id))
        }
        ProviderId::Local => {
            return Err(ProviderError::Config(
                "local is not a remote provider".into(),
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_required_urls() {
        let s = ProviderSettings::new(PathBuf::from("/nonexistent/model.gguf"));
        let r = Registry::new(s);
        assert!(r.get(&ProviderId::OpenRouter).is_ok());
        assert!(r.get(&ProviderId::Anthropic).is_ok());
        assert!(r.get(&ProviderId::Ollama).is_ok());
        let custom = ProviderId::OpenAiCompatible("vllm".into());
        assert!(matches!(r.get(&custom), Err(ProviderError::Config(_))));
        assert!(r.get(&ProviderId::Local).is_ok());
        assert!(matches!(
            r.local().status(),
            Err(ProviderError::Unavailable(_))
        ));
        let s = ProviderSettings::new(PathBuf::new())
            .with_base_url(custom.clone(), "http://127.0.0.1:8000/v1");
        assert!(Registry::new(s).get(&custom).is_ok());
    }
}
