//! The boxes this node accepts (`boxes.accept` in config): their identity (platform and
//! measurement, read from each box's `/healthz`), the providers each can reach, and one HTTP
//! client per box. A box is *accepted* only by URL from config; its identity is what a program
//! lists and what an attestation must match. An `insecure-dev` box counts only when
//! `boxes.allow_insecure_dev` is set.

use std::collections::BTreeMap;
use std::sync::RwLock;

use skillbox_jc::attest::VerifyPolicy;
use skillbox_jc::client::BoxClient;
use skillbox_jc::program::{BoxIdentity, INSECURE_DEV};
use skillbox_jc::registry::ProviderView;
use skillbox_peers::AcceptedBox;

/// One accepted box as last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownBox {
    pub url: String,
    pub platform: String,
    pub measurement: String,
    pub providers: Vec<ProviderView>,
}

impl KnownBox {
    /// Whether this box's `/healthz` listed `provider` as available when last asked.
    pub fn offers(&self, provider: &str) -> bool {
        self.providers
            .iter()
            .any(|p| p.id == provider && p.available)
    }

    pub fn identity(&self) -> BoxIdentity {
        BoxIdentity {
            platform: self.platform.clone(),
            measurement: self.measurement.clone(),
        }
    }
}

pub fn normalize_url(url: &str) -> String {
    url.trim_end_matches('/').to_owned()
}

pub struct Boxes {
    allow_insecure_dev: bool,
    clients: BTreeMap<String, BoxClient>,
    known: RwLock<BTreeMap<String, KnownBox>>,
    /// When every box was last asked.
    refreshed_at: RwLock<Option<std::time::Instant>>,
}

/// What a node knows of its boxes is refreshed on demand past this age (and on the advert
/// schedule).
const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

impl std::fmt::Debug for Boxes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Boxes")
            .field("accept", &self.clients.keys().collect::<Vec<_>>())
            .field("allow_insecure_dev", &self.allow_insecure_dev)
            .finish()
    }
}

impl Boxes {
    /// Clients for the configured URLs. A URL the HTTP client cannot use is skipped and logged
    /// (config parsing already refused anything but http(s)).
    pub fn new(urls: &[String], allow_insecure_dev: bool) -> Boxes {
        let mut clients = BTreeMap::new();
        for url in urls {
            let url = normalize_url(url);
            match BoxClient::new(&url) {
                Ok(c) => {
                    clients.insert(url, c);
                }
                Err(e) => tracing::warn!(%url, error = %e, "box client cannot be built"),
            }
        }
        Boxes {
            allow_insecure_dev,
            clients,
            known: RwLock::new(BTreeMap::new()),
            refreshed_at: RwLock::new(None),
        }
    }

    /// Ask every accepted box who it is. A box that does not answer keeps its last identity
    /// (a restarting box is still the same box); one that answers with another identity is
    /// updated.
    pub async fn refresh(&self) {
        for (url, client) in &self.clients {
            match client.health().await {
                Ok(h) => {
                    if h.platform == INSECURE_DEV && !self.allow_insecure_dev {
                        tracing::warn!(%url, "box attests with insecure-dev, which this node does not allow (boxes.allow_insecure_dev)");
                        continue;
                    }
                    let kb = KnownBox {
                        url: url.clone(),
                        platform: h.platform,
                        measurement: h.measurement,
                        providers: h.providers,
                    };
                    let mut known = self.known.write().unwrap_or_else(|p| p.into_inner());
                    known.insert(url.clone(), kb);
                }
                Err(e) => tracing::debug!(%url, code = e.code(), "box did not answer /healthz"),
            }
        }
        *self.refreshed_at.write().unwrap_or_else(|p| p.into_inner()) =
            Some(std::time::Instant::now());
    }

    /// Whether call start should ask the boxes again first: an accepted box whose identity is
    /// unknown (a box started after this node), or nothing asked for a while.
    pub fn needs_refresh(&self) -> bool {
        let known = self.known.read().unwrap_or_else(|p| p.into_inner());
        let stale = self
            .refreshed_at
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_none_or(|t| t.elapsed() > STALE_AFTER);
        stale || self.clients.keys().any(|u| !known.contains_key(u))
    }

    pub fn known(&self) -> Vec<KnownBox> {
        let known = self.known.read().unwrap_or_else(|p| p.into_inner());
        known.values().cloned().collect()
    }

    /// The advert's `boxes`: identity and URL of each accepted box seen so far.
    pub fn advertised(&self) -> Vec<AcceptedBox> {
        self.known()
            .into_iter()
            .map(|k| AcceptedBox {
                platform: k.platform,
                measurement: k.measurement,
                url: Some(k.url),
            })
            .collect()
    }

    /// The client of an accepted box; `None` for a URL not in config.
    pub fn client(&self, url: &str) -> Option<&BoxClient> {
        self.clients.get(&normalize_url(url))
    }

    pub fn accepts_identity(&self, platform: &str, measurement: &str) -> bool {
        self.known()
            .iter()
            .any(|k| k.platform == platform && k.measurement == measurement)
    }

    /// How this node verifies attestations.
    pub fn verify_policy(&self) -> VerifyPolicy {
        VerifyPolicy::new(self.allow_insecure_dev)
    }
}
