//! The providers a box may call, keyed by the program's provider id. A box calls only the
//! provider the program names, and only at the host it was configured with: a program naming
//! another host is refused at open, so egress never goes anywhere the program did not name.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use skillbox_providers::local::LocalProvider;
use skillbox_providers::{Provider, ProviderId, ProviderSettings, build_remote};

use crate::error::{JcError, Result};

/// The provider-table entry naming the embedded model's weights: `local.sha256` → the SHA-256
/// (lowercase hex) of the GGUF file the box's `local` provider runs. Not a provider id, so no
/// program can name it as its provider; a node reads it beside `local` → `in-process` to see,
/// and pin, which weights answer. Absent while the box knows no digest yet (another file than
/// the shipped model's, not there when the box started, until its first load).
pub const LOCAL_WEIGHTS: &str = "local.sha256";

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

    /// The embedded model, checked for its file whenever a program names it. Its weights are
    /// fixed now ([`LocalProvider::measure`]: the shipped model's digest for its file name, else
    /// the file read once), so the table the box attests from its start names them and no other
    /// file is loaded later.
    pub fn register_local(&mut self, local: Arc<LocalProvider>) {
        local.measure();
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
    /// it calls ([`crate::attest::IN_PROCESS`] for one inside the box), and, for the embedded
    /// model, [`LOCAL_WEIGHTS`] → the SHA-256 of the weights it runs (the only file it loads).
    pub fn table(&self) -> BTreeMap<String, String> {
        let mut table = BTreeMap::new();
        for (id, slot) in &self.slots {
            let host = match slot {
                Slot::Ready { host, .. } => host
                    .clone()
                    .unwrap_or_else(|| crate::attest::IN_PROCESS.into()),
                Slot::Local(local) => {
                    if let Some(sha256) = local.weights_sha256() {
                        table.insert(LOCAL_WEIGHTS.to_owned(), sha256);
                    }
                    crate::attest::IN_PROCESS.into()
                }
                Slot::Unavailable(_) => continue,
            };
            table.insert(id.clone(), host);
        }
        table
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

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::Digest;
    use skillbox_providers::local::{MODEL_SHA256, model_path_in};

    fn sha256(bytes: &[u8]) -> String {
        hex::encode(sha2::Sha256::digest(bytes))
    }

    /// A registry whose only provider is `local` at `path`, and that provider.
    fn local_at(path: std::path::PathBuf) -> (ProviderRegistry, Arc<LocalProvider>) {
        let local = Arc::new(LocalProvider::new(path));
        let mut reg = ProviderRegistry::new();
        reg.register_local(local.clone());
        (reg, local)
    }

    /// The attested table names the weights the embedded model runs, and those are the only
    /// ones it loads: a file swapped in after the box measured its own is refused before
    /// llama.cpp reads it (so the files here need not be models).
    #[tokio::test]
    async fn the_attested_table_names_the_weights_the_local_model_runs() {
        let dir = tempfile::tempdir().expect("tempdir");

        // The shipped model's path: its digest, whether or not the file is there yet (no
        // other file loads there).
        let reg =
            ProviderRegistry::from_settings(&ProviderSettings::new(model_path_in(dir.path())));
        let table = reg.table();
        assert_eq!(
            table.get("local").map(String::as_str),
            Some(crate::attest::IN_PROCESS)
        );
        assert_eq!(
            table.get(LOCAL_WEIGHTS).map(String::as_str),
            Some(MODEL_SHA256)
        );
        assert!(
            LOCAL_WEIGHTS.parse::<ProviderId>().is_err(),
            "no program can name it"
        );

        // A file the operator chose: measured when the box registers it.
        let custom = dir.path().join("operator.gguf");
        let first = b"the operator's model, version one".repeat(1000);
        std::fs::write(&custom, &first).expect("write");
        let (reg, local) = local_at(custom.clone());
        assert_eq!(reg.table().get(LOCAL_WEIGHTS), Some(&sha256(&first)));

        // Swapped after the box attested it: refused at load, naming both digests; the table
        // still names the only weights this box will run.
        let second = b"a backdoored model, swapped in".repeat(1000);
        std::fs::write(&custom, &second).expect("write");
        let err = local.model().await.expect_err("a swapped file is refused");
        let said = err.to_string();
        assert!(said.contains("sha256 mismatch"), "{said}");
        assert!(
            said.contains(&sha256(&first)) && said.contains(&sha256(&second)),
            "{said}"
        );
        assert_eq!(reg.table().get(LOCAL_WEIGHTS), Some(&sha256(&first)));

        // No file when the box started: no digest to attest yet.
        let (reg, _) = local_at(dir.path().join("absent.gguf"));
        assert_eq!(reg.table().get(LOCAL_WEIGHTS), None);
        assert_eq!(
            reg.table().get("local").map(String::as_str),
            Some(crate::attest::IN_PROCESS)
        );
    }
}
