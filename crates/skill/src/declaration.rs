//! The declaration: the front matter, parsed and validated — what the protocol reads.
//!
//! It has no field that can hold the body: describing a skill must not mean reading it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::provider::ProviderId;

/// OpenWOP memoryShape flags a skill asks for (`memory:` or `metadata.memory:`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scratchpad: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversation: Option<bool>,
    #[serde(rename = "longTerm", skip_serializing_if = "Option::is_none")]
    pub long_term: Option<bool>,
}

impl Memory {
    fn is_default(&self) -> bool {
        *self == Memory::default()
    }
}

/// A skill's front matter, validated.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Declaration {
    pub name: String,
    pub description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<ProviderId>,
    /// The owner's provider model id: staked into the box, never advertised.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The *name* of the source holding the API key: never advertised.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The caller's sources the skill asks for.
    #[serde(
        rename = "requiredSources",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub required_sources: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compatibility: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    #[serde(rename = "allowed-tools", skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Value>,
    #[serde(rename = "modelClass", skip_serializing_if = "Option::is_none")]
    pub model_class: Option<String>,
    #[serde(default, skip_serializing_if = "Memory::is_default")]
    pub memory: Memory,
    /// Unknown front-matter keys, kept (and warned about), never silently dropped.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Value>,
}

/// What peers may see of a skill. Built from the declaration by naming the public fields, so a
/// new private field can never leak into an advert by default.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Advertised {
    pub name: String,
    pub description: String,
    pub provider: String,
    #[serde(rename = "requiredSources")]
    pub required_sources: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compatibility: Option<String>,
    /// `sha256:<hex>` of the declaration, so a caller can pin what it saw.
    pub digest: String,
}

/// Why a declared skill cannot be offered, as far as the declaration alone can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeclarationGap {
    /// No `provider:`.
    NoProvider,
    /// The provider spends a key but no `key:` source is named.
    NoKeyNamed,
}

impl std::fmt::Display for DeclarationGap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DeclarationGap::NoProvider => "no provider declared",
            DeclarationGap::NoKeyNamed => {
                "the provider needs an API key but no `key` source is named"
            }
        })
    }
}

impl Declaration {
    /// Where the body lives in the source store.
    pub fn body_source_name(&self) -> String {
        body_source_name(&self.name)
    }

    /// Where the model id lives in the source store.
    pub fn model_source_name(&self) -> String {
        model_source_name(&self.name)
    }

    /// `sha256:<hex>` over the declaration's RFC 8785 (JCS) bytes: changes whenever any field does.
    pub fn digest(&self) -> String {
        let bytes = serde_json_canonicalizer::to_vec(self)
            .expect("a Declaration is plain JSON data and always canonicalizes");
        format!("sha256:{}", hex::encode(Sha256::digest(&bytes)))
    }

    /// The advert entry of an offered skill. `provider` must be set (see [`Self::offer_gap`]).
    pub fn advertised(&self) -> Advertised {
        Advertised {
            name: self.name.clone(),
            description: self.description.clone(),
            provider: self
                .provider
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            required_sources: self.required_sources.clone(),
            license: self.license.clone(),
            compatibility: self.compatibility.clone(),
            digest: self.digest(),
        }
    }

    /// What the declaration lacks to be offered. The node adds what only it can know (whether
    /// the body and key sources are present).
    pub fn offer_gap(&self) -> Option<DeclarationGap> {
        match &self.provider {
            None => Some(DeclarationGap::NoProvider),
            Some(p) if p.needs_key() && self.key.is_none() => Some(DeclarationGap::NoKeyNamed),
            Some(_) => None,
        }
    }
}

/// The source name of a skill's body: `skill/<name>/body`.
pub fn body_source_name(skill: &str) -> String {
    format!("skill/{skill}/body")
}

/// The source name of a skill's model id: `skill/<name>/model` (owner material, like the body:
/// the node keeps it sealed, not in the declaration row).
pub fn model_source_name(skill: &str) -> String {
    format!("skill/{skill}/model")
}
