//! The providers a box may call, keyed by the program's provider id. A box calls only the
//! provider the program names, and only at the host it was configured with: a program naming
//! another host is refused at open, so egress never goes anywhere the program did not name.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use skillbox_providers::local::LocalProvider;
use skillbox_providers::{Provider, ProviderId, ProviderSettings, build_remote};

use crate::error::{JcError, Result};

enum Slot {
    Ready {
        provider: Arc<dyn Provider>,
        host: Option<String>,
    },
    /// The embedded model: available as soon as its file is there (no restart after a fetch).
    Local(Arc<LocalProvider>),
    Unavailable(String),
}

#[derive(Default)]
pub struct ProviderRegistry {
    slots: BTreeMap<String, Slot>,
}

/// How `GET /healthz` shows a provider.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProviderView {
    pub id: String,
    pub available: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ProviderRegistry {
    pub fn new() -> ProviderRegistry {
        ProviderRegistry::default()
    }

    /// A provider ready to call at `host` (None for `local`).
    pub fn register(&mut self, id: ProviderId, host: Option<String>, provider: Arc<dyn Provider>) {
        self.slots
            .insert(id.to_string(), Slot::Ready { provider, host });
    }

    /// The embedded model, checked for its file whenever a program names it.
    pub fn register_local(&mut self, local: Arc<LocalProvider>) {
        self.slots
            .insert(ProviderId::Local.to_string(), Slot::Local(local));
    }

    /// Every provider the providers crate offers: the local model, and each remote provider at
    /// its configured (or default) base URL. A remote one that cannot be built is listed as
    /// unavailable with the reason.
    pub fn from_settings(settings: &ProviderSettings) -> ProviderRegistry {
        let mut reg = ProviderRegistry::new();
        reg.register_local(Arc::new(LocalProvider::from_settings(settings)));
        let mut ids = vec![
            ProviderId::OpenRouter,
            ProviderId::OpenAi,
            ProviderId::Anthropic,
            ProviderId::Ollama,
        ];
        ids.extend(
            settings
                .base_urls
                .keys()
                .filter(|id| matches!(id, ProviderId::OpenAiCompatible(_)))
                .cloned(),
        );
        for id in ids {
            match (settings.base_url(&id), build_remote(&id, settings)) {
                (Ok(url), Ok(p)) => reg.register(id, Some(url), p),
                (_, Err(e)) | (Err(e), _) => reg.unavailable(id, e.to_string()),
            }
        }
        reg
    }

    /// A provider this box knows but cannot call now (e.g. the model file is missing).
    pub fn unavailable(&mut self, id: ProviderId, reason: impl Into<String>) {
        self.slots
            .insert(id.to_string(), Slot::Unavailable(reason.into()));
    }

    /// The provider for a program, checking the host it names.
    pub fn get(&self, id: &ProviderId, host: Option<&str>) -> Result<Arc<dyn Provider>> {
        match self.slots.get(&id.to_string()) {
            Some(Slot::Ready {
                provider,
                host: configured,
            }) => {
                if configured.as_deref() != host {
                    return Err(JcError::ProviderHost {
                        expected: configured.clone().unwrap_or_default(),
                        found: host.unwrap_or_default().chars().take(256).collect(),
                    });
                }
                Ok(provider.clone())
            }
            Some(Slot::Local(local)) => {
                if host.is_some() {
                    return Err(JcError::ProviderHost {
                        expected: String::new(),
                        found: host.unwrap_or_default().chars().take(256).collect(),
                    });
                }
                local
                    .status()
                    .map_err(|e| JcError::ProviderUnavailable(e.to_string()))?;
                Ok(local.clone())
            }
            Some(Slot::Unavailable(reason)) => {
                Err(JcError::ProviderUnavailable(format!("{id}: {reason}")))
            }
            None => Err(JcError::ProviderUnavailable(id.to_string())),
        }
    }

    /// The provider table the box attests: each provider id it can call → the exact base URL
    /// it calls ([`crate::attest::IN_PROCESS`] for one inside the box).
    pub fn table(&self) -> BTreeMap<String, String> {
        self.slots
            .iter()
            .filter_map(|(id, slot)| {
                let host = match slot {
                    Slot::Ready { host, .. } => host
                        .clone()
                        .unwrap_or_else(|| crate::attest::IN_PROCESS.into()),
                    Slot::Local(_) => crate::attest::IN_PROCESS.into(),
                    Slot::Unavailable(_) => return None,
                };
                Some((id.clone(), host))
            })
            .collect()
    }

    pub fn views(&self) -> Vec<ProviderView> {
        self.slots
            .iter()
            .map(|(id, slot)| match slot {
                Slot::Ready { host, .. } => ProviderView {
                    id: id.clone(),
                    available: true,
                    host: host.clone(),
                    reason: None,
                },
                Slot::Local(local) => match local.status() {
                    Ok(()) => ProviderView {
                        id: id.clone(),
                        available: true,
                        host: None,
                        reason: None,
                    },
                    Err(e) => ProviderView {
                        id: id.clone(),
                        available: false,
                        host: None,
                        reason: Some(e.to_string()),
                    },
                },
                Slot::Unavailable(r) => ProviderView {
                    id: id.clone(),
                    available: false,
                    host: None,
                    reason: Some(r.clone()),
                },
            })
            .collect()
    }
}
