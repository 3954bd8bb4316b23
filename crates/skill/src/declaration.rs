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

/// Source names under these prefixes are owner or node material — skill bodies and model ids
/// (`skill/`), pack agents' prompts (`agent/`), a call's request, result key and answer
/// (`call/`). No caller ever stakes one, whatever a remote advert or program names: the grammar,
/// advert verification, both sides' program checks, the box and the source store refuse them.
pub const RESERVED_SOURCE_PREFIXES: [&str; 3] = ["skill/", "agent/", "call/"];

/// Whether `name` falls under a [`RESERVED_SOURCE_PREFIXES`] prefix.
pub fn is_reserved_source_name(name: &str) -> bool {
    RESERVED_SOURCE_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The owner's ceilings for one skill (front matter `limits:` or `skill set`): what a caller may
/// spend of the owner's key and box time. Absent fields fall back to the node's defaults.
/// Advertised, so a caller builds a program that fits; the owner refuses one that does not.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Limits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_request_bytes: Option<u64>,
    /// Each caller source, at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_source_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_per_peer_per_day: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_per_day: Option<u64>,
}

impl Limits {
    pub const FIELDS: [&'static str; 5] = [
        "maxRequestBytes",
        "maxSourceBytes",
        "maxOutputBytes",
        "callsPerPeerPerDay",
        "callsPerDay",
    ];
    /// The largest value a ceiling may take (a JSON-safe integer; bytes beyond 64 MiB are
    /// refused by the box anyway).
    pub const MAX: u64 = (1 << 53) - 1;

    pub fn is_empty(&self) -> bool {
        *self == Limits::default()
    }

    /// Set one field by its front-matter name; `false` when the name is not a ceiling.
    pub fn set(&mut self, field: &str, value: Option<u64>) -> bool {
        let slot = match field {
            "maxRequestBytes" => &mut self.max_request_bytes,
            "maxSourceBytes" => &mut self.max_source_bytes,
            "maxOutputBytes" => &mut self.max_output_bytes,
            "callsPerPeerPerDay" => &mut self.calls_per_peer_per_day,
            "callsPerDay" => &mut self.calls_per_day,
            _ => return false,
        };
        *slot = value;
        true
    }

    /// The fields, in [`Limits::FIELDS`] order.
    fn values(&self) -> [Option<u64>; 5] {
        [
            self.max_request_bytes,
            self.max_source_bytes,
            self.max_output_bytes,
            self.calls_per_peer_per_day,
            self.calls_per_day,
        ]
    }

    /// Each field of `self` set above the same field of `ceilings`, as (front-matter name,
    /// `self`'s value, `ceilings`' value), in [`Limits::FIELDS`] order: what a skill's own
    /// `limits:` would raise past a node's ceilings.
    pub fn above(&self, ceilings: &Limits) -> Vec<(&'static str, u64, u64)> {
        Self::FIELDS
            .into_iter()
            .zip(self.values().into_iter().zip(ceilings.values()))
            .filter_map(|(name, pair)| match pair {
                (Some(set), Some(ceiling)) if set > ceiling => Some((name, set, ceiling)),
                _ => None,
            })
            .collect()
    }

    /// Each field of `self`, or `defaults`' where `self` has none.
    pub fn or(&self, defaults: &Limits) -> Limits {
        Limits {
            max_request_bytes: self.max_request_bytes.or(defaults.max_request_bytes),
            max_source_bytes: self.max_source_bytes.or(defaults.max_source_bytes),
            max_output_bytes: self.max_output_bytes.or(defaults.max_output_bytes),
            calls_per_peer_per_day: self
                .calls_per_peer_per_day
                .or(defaults.calls_per_peer_per_day),
            calls_per_day: self.calls_per_day.or(defaults.calls_per_day),
        }
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
    /// The owner's ceilings (`limits:`).
    #[serde(default, skip_serializing_if = "Limits::is_empty")]
    pub limits: Limits,
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
    #[serde(default, skip_serializing_if = "Limits::is_empty")]
    pub limits: Limits,
    /// The declaration's commitment ([`Declaration::digest`]), so a caller can pin what it saw.
    pub digest: String,
}

/// Domain separation of the private-fields commitment.
const PRIVATE_COMMITMENT_DOMAIN: &[u8] = b"skillbox/declaration-private/v1\n";

/// The size of a skill's commitment salt (random, owner-only, renewed on every change).
pub const SALT_LEN: usize = 32;

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

    /// The declaration's commitment, `sha256:<hex>`: over the JCS bytes of the public fields and
    /// of a salted hash of the private ones (`model`, `key`). It changes whenever any field (or
    /// the salt) does, so an owner can pin "the same skill" and a caller sees a change; but with
    /// a random 256-bit `salt` that only the owner holds, guessing a model id or key name
    /// confirms nothing (an unsalted hash over the whole declaration gave both away to a
    /// dictionary of model ids).
    pub fn digest(&self, salt: &[u8; SALT_LEN]) -> String {
        let private = serde_json::json!({ "key": self.key, "model": self.model });
        let mut h = Sha256::new();
        h.update(PRIVATE_COMMITMENT_DOMAIN);
        h.update(salt);
        h.update(canonical(&private));
        let mut public = self.clone();
        public.model = None;
        public.key = None;
        let doc = serde_json::json!({
            "private": hex::encode(h.finalize()),
            "public": public,
        });
        format!("sha256:{}", hex::encode(Sha256::digest(canonical(&doc))))
    }

    /// The advert entry of an offered skill, with its commitment ([`Self::digest`]). `provider`
    /// must be set (see [`Self::offer_gap`]).
    pub fn advertised(&self, digest: String) -> Advertised {
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
            limits: self.limits,
            digest,
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

/// RFC 8785 bytes of plain JSON data (maps, strings, numbers, booleans: always canonicalizes).
fn canonical(v: &Value) -> Vec<u8> {
    serde_json_canonicalizer::to_vec(v).unwrap_or_else(|_| v.to_string().into_bytes())
}

/// The source name of a skill's body: `skill/<name>/body`.
pub fn body_source_name(skill: &str) -> String {
    format!("skill/{skill}/body")
}

/// The source name of a skill's commitment salt: `skill/<name>/salt` (owner-only: with it, the
/// advertised digest would confirm guesses of the private fields).
pub fn salt_source_name(skill: &str) -> String {
    format!("skill/{skill}/salt")
}

/// The source name of a skill's model id: `skill/<name>/model` (owner material, like the body:
/// the node keeps it sealed, not in the declaration row).
pub fn model_source_name(skill: &str) -> String {
    format!("skill/{skill}/model")
}
