//! The skills registry: import a SKILL.md (declaration row + encrypted body source, one
//! transaction), list every declared skill with whether it is offered and why not, and project
//! the OpenWOP inventory. Everything here reads declarations and source *metadata* only:
//! describing a skill never means reading it.

use std::sync::Arc;

use rusqlite::{OptionalExtension, params};
use serde::Serialize;
use serde_json::Value;
use skillbox_jc::program::{
    MAX_BODY_MAX_TOKENS, MAX_MODEL_CONTEXT_TOKENS, body_allowance_in_force, model_context_in_force,
};
use skillbox_skill::{Declaration, Diagnostic, Limits, ProviderId, check_skill};

use crate::crypto::DataKey;
use crate::error::{NodeError, Result};
use crate::sources::{self, SourceKind, SourceMeta};
use crate::store::{Store, Tx, now_secs};

/// Whether a skill is offered, and every reason it is not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct OfferState {
    pub offered: bool,
    /// Empty when offered.
    pub reasons: Vec<String>,
}

/// One declared skill as stored.
#[derive(Debug, Clone)]
pub struct SkillRecord {
    pub declaration: Declaration,
    pub manifest: Value,
    pub agent_id: String,
    pub digest: String,
    pub warnings: Value,
    /// The ceilings the owner set with `skill set` (each applies as set, above `[ceilings]`
    /// too); the declaration's other `limits:` are held to `[ceilings]` ([`in_force`]).
    pub owner_limits: Limits,
    /// The body allowance and remote model context the owner set (`skill set`); absent, the
    /// provider's defaults.
    pub owner_tokens: OwnerTokens,
    pub created_at: i64,
    pub updated_at: i64,
}

/// The smallest answer a program can ask for, in tokens: the box asks the provider for at least
/// this many (`skillbox_jc::run`: `max_tokens` is the output bound in bytes / 3, clamped to 16
/// at least). A context that cannot hold the allowance with it admits no request at all.
pub const SMALLEST_ANSWER_TOKENS: u64 = 16;

/// A skill's **body allowance** and, for a remote provider, its model's **declared context**, in
/// tokens, as the owner set them (`skill set NAME bodyMaxTokens=N modelContextTokens=N`); each
/// absent is the provider's default (one table, `skillbox_jc::program::default_body_max_tokens`
/// / `default_model_context_tokens`). The owner's, like the guard: the advert carries the ones
/// in force, the caller's program states them, and the owner refuses a program naming any
/// other or leaving one out (a caller choosing the allowance could bisect the body's length on
/// where runs start to fail `unavailable`; one choosing the context, move the box's admission
/// past the model's real context). Not in a SKILL.md: the context is a fact of the owner's model
/// server, not of the file, and a file that is someone else's must not declare it larger.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct OwnerTokens {
    #[serde(rename = "bodyMaxTokens", skip_serializing_if = "Option::is_none")]
    pub body_max_tokens: Option<u64>,
    #[serde(rename = "modelContextTokens", skip_serializing_if = "Option::is_none")]
    pub model_context_tokens: Option<u64>,
}

impl OwnerTokens {
    /// The field names `skill set`, `PATCH /skills/{name}` and every refusal use.
    pub const BODY: &'static str = "bodyMaxTokens";
    pub const CONTEXT: &'static str = "modelContextTokens";

    pub fn is_default(&self) -> bool {
        *self == OwnerTokens::default()
    }

    /// The allowance in force for a skill of `provider`: the owner's, else the default.
    pub fn body_allowance(&self, provider: &ProviderId) -> u64 {
        body_allowance_in_force(self.body_max_tokens, provider)
    }

    /// The remote model context in force for a skill of `provider`: the owner's, else the
    /// default; `None` for `local` (the box's model's own).
    pub fn model_context(&self, provider: &ProviderId) -> Option<u64> {
        model_context_in_force(self.model_context_tokens, provider)
    }

    /// What the advert carries for a skill of `provider`: the values in force, always — the
    /// defaults too (review 29 R29-1). The owner co-signs only a program stating its own values,
    /// so the advert says them rather than leave a caller to its own build's table of defaults:
    /// a caller of another release (whose table differs: 139eec7 lowered it) still names the
    /// owner's numbers, and the owner's explicit word is never dropped for equalling a default.
    /// A peer older than the advert's fields ignores such an advert (`UnknownFormat`, not
    /// scored), as it ignores the `guard` every advert already carries; its programs leave the
    /// values out, which the owner refuses anyway.
    pub fn advertised(&self, provider: &ProviderId) -> OwnerTokens {
        OwnerTokens {
            body_max_tokens: Some(self.body_allowance(provider)),
            model_context_tokens: self.model_context(provider),
        }
    }

    /// Why a skill on `provider` whose body has `body_bytes` bytes cannot run, if it cannot
    /// (review 29 R29-5). The box has no tokenizer for a remote model, so it sends a body only
    /// within as many bytes as the allowance has tokens (a token covers at least one byte): a
    /// body over that fails `unavailable` on every call, whatever the request. Its stored bytes
    /// are what is compared (the box strips the secret markers, so it sees no more than these:
    /// a body over only by its markers is held over too, the safe side). The reason names the
    /// sizes and the `skill set` that fixes it: the owner's own numbers, not the body. `None`
    /// for `local`, whose box counts the body's tokens itself.
    pub fn body_over_allowance(
        &self,
        name: &str,
        provider: &ProviderId,
        body_bytes: u64,
    ) -> Option<String> {
        let context = self.model_context(provider)?;
        let allowance = self.body_allowance(provider);
        if body_bytes <= allowance {
            return None;
        }
        let notice = skillbox_jc::prompt::notice_bytes() as u64;
        let frame = skillbox_providers::REMOTE_FRAME_TOKENS as u64;
        let least = body_bytes + notice + frame + SMALLEST_ANSWER_TOKENS;
        let fix = if least <= context {
            format!("skillbox skill set {name} {}={body_bytes}", Self::BODY)
        } else {
            format!(
                "skillbox skill set {name} {}={body_bytes} {}=N, N your model server's context, at least {least}",
                Self::BODY,
                Self::CONTEXT
            )
        };
        Some(format!(
            "body ({body_bytes} bytes) over its allowance ({allowance} tokens): provider {provider} is sent a body of at most as many bytes as its allowance has tokens, so every call would fail unavailable; raise it: {fix}"
        ))
    }

    /// Whether the owner may set these for a skill of `provider` (`None`: no provider yet, so
    /// only each number's own range is known). Refusals name the field: zero or past the
    /// largest a program may name; a context for `local`; a remote allowance that, with the
    /// box's notice, the frame and the smallest answer, does not fit the context (no request
    /// could be admitted).
    pub fn check(&self, provider: Option<&ProviderId>) -> Result<()> {
        if let Some(n) = self.body_max_tokens
            && !(1..=MAX_BODY_MAX_TOKENS).contains(&n)
        {
            return Err(NodeError::invalid(
                Self::BODY,
                format!("must be a whole number of tokens from 1 to {MAX_BODY_MAX_TOKENS}"),
            ));
        }
        if let Some(n) = self.model_context_tokens {
            if provider == Some(&ProviderId::Local) {
                return Err(NodeError::invalid(
                    Self::CONTEXT,
                    "is for a remote provider only: the local provider runs the box's own model, whose context is the box's (clear it with modelContextTokens=)",
                ));
            }
            if !(1..=MAX_MODEL_CONTEXT_TOKENS).contains(&n) {
                return Err(NodeError::invalid(
                    Self::CONTEXT,
                    format!(
                        "must be a whole number of tokens from 1 to {MAX_MODEL_CONTEXT_TOKENS}"
                    ),
                ));
            }
        }
        let Some(provider) = provider else {
            return Ok(());
        };
        let Some(context) = self.model_context(provider) else {
            return Ok(());
        };
        let allowance = self.body_allowance(provider);
        let notice = skillbox_jc::prompt::notice_bytes() as u64;
        let frame = skillbox_providers::REMOTE_FRAME_TOKENS as u64;
        let least = allowance + notice + frame + SMALLEST_ANSWER_TOKENS;
        if least > context {
            // The field the owner set is the one to change; both set, the context.
            let field = if self.model_context_tokens.is_none() {
                Self::BODY
            } else {
                Self::CONTEXT
            };
            return Err(NodeError::invalid(
                field,
                format!(
                    "the body allowance ({allowance} tokens) with the box's notice ({notice}), the frame ({frame}) and the smallest answer ({SMALLEST_ANSWER_TOKENS}) takes {least} tokens, more than the model context ({context}) for provider {provider}"
                ),
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct SkillSummary {
    pub name: String,
    #[serde(rename = "agentId")]
    pub agent_id: String,
    pub description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(rename = "requiredSources")]
    pub required_sources: Vec<String>,
    /// The ceilings that hold (the owner's own, else the declaration's held to `[ceilings]`;
    /// a field absent is the node's `[ceilings]`): what the advert carries.
    #[serde(skip_serializing_if = "Limits::is_empty")]
    pub limits: Limits,
    /// The body allowance and remote model context the owner set; absent, the provider's.
    #[serde(flatten)]
    pub tokens: OwnerTokens,
    pub digest: String,
    pub offered: bool,
    /// The reasons joined, present only when not offered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub reasons: Vec<String>,
    #[serde(rename = "createdAt")]
    pub created_at: i64,
    #[serde(rename = "updatedAt")]
    pub updated_at: i64,
}

/// `GET /skills/{name}`: declaration, manifest, state; the body only as source metadata.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct SkillDetail {
    pub name: String,
    #[serde(rename = "agentId")]
    pub agent_id: String,
    pub digest: String,
    /// The front matter as declared (the SkillDeclaration).
    #[schema(value_type = Object)]
    pub declaration: Declaration,
    pub manifest: Value,
    pub state: OfferState,
    /// The body allowance and remote model context the owner set; absent, the provider's.
    #[serde(flatten)]
    pub tokens: OwnerTokens,
    pub warnings: Value,
    #[serde(rename = "bodySource", skip_serializing_if = "Option::is_none")]
    pub body_source: Option<SourceMeta>,
    #[serde(rename = "createdAt")]
    pub created_at: i64,
    #[serde(rename = "updatedAt")]
    pub updated_at: i64,
}

/// A change to a skill's staking fields (`PATCH /skills/{name}`): `None` leaves a field,
/// `Some(None)` clears it.
#[derive(Clone, Default)]
pub struct SkillChange {
    pub provider: Option<Option<String>>,
    pub model: Option<Option<String>>,
    pub key: Option<Option<String>>,
    /// The owner's ceilings, by front-matter name: each set (`Some`) or cleared (`None`); the
    /// rest stay. A ceiling set here is the owner's own word and holds as set, above `[ceilings]`
    /// too; one cleared falls back to `[ceilings]`.
    pub limits: Vec<(String, Option<u64>)>,
    /// The body allowance and remote model context in tokens: set (`Some(Some)`), cleared to
    /// the provider's default (`Some(None)`) or left (`None`).
    pub body_max_tokens: Option<Option<u64>>,
    pub model_context_tokens: Option<Option<u64>>,
}

impl std::fmt::Debug for SkillChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The model is the owner's private choice: which fields change, not their values.
        f.debug_struct("SkillChange")
            .field("provider", &self.provider)
            .field(
                "model",
                &self.model.as_ref().map(|m| m.as_ref().map(|_| "..")),
            )
            // The key's name too: a client may have put a pasted key there (refused by `set`,
            // but this value is printed before that).
            .field("key", &self.key.as_ref().map(|k| k.as_ref().map(|_| "..")))
            .field("limits", &self.limits)
            .field("body_max_tokens", &self.body_max_tokens)
            .field("model_context_tokens", &self.model_context_tokens)
            .finish()
    }
}

/// What an import did.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Imported {
    pub name: String,
    #[serde(rename = "agentId")]
    pub agent_id: String,
    pub digest: String,
    /// `true` when a skill of that name existed and was replaced.
    pub replaced: bool,
    pub state: OfferState,
    pub warnings: Value,
    /// What the import committed the owner to: a SKILL.md is often someone else's file. (Boxed:
    /// the import's answer is an enum of one skill or a pack.)
    pub spends: Box<Spends>,
}

/// What a skill spends of its owner's when a peer calls it: the provider the box sends the
/// prompt to, the model and the key (the name of the secret source holding it) it sends there,
/// and the ceilings in force — the skill's own `limits:`, else the node's `[ceilings]`.
#[derive(Clone, Serialize, utoipa::ToSchema)]
pub struct Spends {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    pub limits: Limits,
}

impl std::fmt::Debug for Spends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The model and the key's name stay out of logs, as in `SkillChange`.
        f.debug_struct("Spends")
            .field("provider", &self.provider)
            .field("model", &self.model.as_ref().map(|_| ".."))
            .field("key", &self.key.as_ref().map(|_| ".."))
            .field("limits", &self.limits)
            .finish()
    }
}

/// A skill's own `limits:` held to the node's `ceilings`: each field set above the node's is
/// dropped, so the node's ceiling applies to it (and follows `[ceilings]` when it changes), with
/// a warning naming the field, what was asked and what applies. A SKILL.md is text anyone can
/// hand the owner; what a caller may spend of the owner's key is the owner's to raise, with
/// `skillbox skill set` (`Skills::set`, not held here). A field at or below the ceiling stays.
fn held_to_ceilings(decl: &mut Declaration, ceilings: &Limits) -> Vec<Diagnostic> {
    let name = decl.name.clone();
    decl.limits
        .above(ceilings)
        .into_iter()
        .map(|(field, asked, ceiling)| {
            decl.limits.set(field, None);
            Diagnostic::new(
                Some(&format!("limits.{field}")),
                None,
                format!(
                    "{asked} is above this node's [ceilings] ({ceiling}), so {ceiling} applies: a SKILL.md does not raise what callers may spend of your key (raise it yourself with `skillbox skill set {name} {field}=N`)"
                ),
            )
        })
        .collect()
}

/// The ceilings a skill holds, field by field: one the owner set (`owner`, `skill set`) as
/// set; else the declaration's own (`declared`, a SKILL.md's `limits:`) but never above the
/// same field of `ceilings`; else none (the node's `[ceilings]` applies: [`in_force`]). Held at
/// every read, not only at import (review 26 V3): a row stored before imports were held, or a
/// file asking exactly the `[ceilings]` of its day, follows `[ceilings]` when the owner lowers
/// them.
pub fn held(declared: &Limits, owner: &Limits, ceilings: &Limits) -> Limits {
    let mut out = Limits::default();
    for field in Limits::FIELDS {
        let (d, o, c) = (
            get(declared, field),
            get(owner, field),
            get(ceilings, field),
        );
        let declared_held = d.map(|d| c.map_or(d, |c| d.min(c)));
        out.set(field, o.or(declared_held));
    }
    out
}

/// What admission and the charge apply: [`held`], each field it leaves unset the node's
/// `ceilings`.
pub fn in_force(declared: &Limits, owner: &Limits, ceilings: &Limits) -> Limits {
    held(declared, owner, ceilings).or(ceilings)
}

/// One field of `limits` by its front-matter name.
fn get(limits: &Limits, field: &str) -> Option<u64> {
    match field {
        "maxRequestBytes" => limits.max_request_bytes,
        "maxSourceBytes" => limits.max_source_bytes,
        "maxOutputBytes" => limits.max_output_bytes,
        "callsPerPeerPerDay" => limits.calls_per_peer_per_day,
        "callsPerDay" => limits.calls_per_day,
        _ => None,
    }
}

/// The `owner_limits` column read: a value that does not parse is the stored row's error.
fn owner_limits_of(name: &str, text: &str) -> Result<Limits> {
    serde_json::from_str(text).map_err(|e| NodeError::stored_row("owner limits", name, e))
}

/// The `body_max_tokens` / `model_context_tokens` columns read: a negative value (no write of
/// this node's makes one) is the stored row's error.
fn owner_tokens_of(name: &str, body: Option<i64>, context: Option<i64>) -> Result<OwnerTokens> {
    let read = |what: &'static str, n: Option<i64>| {
        n.map(|n| {
            u64::try_from(n)
                .map_err(|_| NodeError::stored_row(what, name, format!("{n} is negative")))
        })
        .transpose()
    };
    Ok(OwnerTokens {
        body_max_tokens: read("body allowance", body)?,
        model_context_tokens: read("model context", context)?,
    })
}

/// A new random commitment salt.
fn new_salt() -> [u8; skillbox_skill::SALT_LEN] {
    let mut salt = [0u8; skillbox_skill::SALT_LEN];
    // The OS random source failing is not something a node can work around.
    if let Err(e) = getrandom::fill(&mut salt) {
        panic!("the OS random source is unavailable: {e}");
    }
    salt
}

/// What `PATCH /skills/{name}` answers a `key` that is not a secret source of this node's. Fixed:
/// the value may be a provider's key pasted where its source's name goes, and an error is
/// logged, shown and kept by clients, so no refusal repeats it.
pub const KEY_NOT_A_SECRET: &str = "must name a secret source of this node's: add the API key with `skillbox source add NAME --secret` (or `PUT /sources/NAME?kind=secret`), then set key to NAME; nothing was changed";

/// `key` must be a source this node holds as a secret, read in the change's own transaction (a
/// source removed meanwhile cannot slip in). Any other value, a pasted key above all, would be
/// kept as the skill's key name: in the store, in `GET /skills`, in the "key source missing"
/// reason.
fn key_names_a_secret_in(tx: &Tx<'_>, key: &str) -> Result<()> {
    let kind: Option<String> = tx
        .query_row(
            "SELECT kind FROM sources WHERE name = ?1",
            params![key],
            |r| r.get(0),
        )
        .optional()?;
    if kind.as_deref() == Some(SourceKind::Secret.as_str()) {
        Ok(())
    } else {
        Err(NodeError::invalid("key", KEY_NOT_A_SECRET))
    }
}

/// Source names present, each with its size in bytes (metadata only).
pub type Present = std::collections::HashMap<String, u64>;

/// Offer state from the declaration, the sources present (name to size) and the owner's body
/// allowance and model context: a declaration with a provider (and a key named when the
/// provider spends one) whose body and key sources exist, and whose body its allowance can hold
/// ([`OwnerTokens::body_over_allowance`]: a skill every call of which fails is not offered, so
/// not advertised, and says why).
pub fn offer_state_with(decl: &Declaration, present: &Present, tokens: &OwnerTokens) -> OfferState {
    let mut reasons = Vec::new();
    if let Some(gap) = decl.offer_gap() {
        reasons.push(gap.to_string());
    }
    let body = decl.body_source_name();
    match (present.get(&body), decl.provider.as_ref()) {
        (None, _) => reasons.push(format!("body source missing ({body})")),
        (Some(&bytes), Some(provider)) => {
            reasons.extend(tokens.body_over_allowance(&decl.name, provider, bytes));
        }
        (Some(_), None) => {}
    }
    let key_needed = decl.provider.as_ref().is_some_and(|p| p.needs_key());
    if let Some(key) = decl.key.as_ref().filter(|_| key_needed)
        && !present.contains_key(key)
    {
        // Fixed, no name: a declaration stored before import refused pasted keys may hold one
        // here, and the reason travels to `GET /skills`, the dashboard and every client's log.
        reasons.push("key source missing".to_owned());
    }
    OfferState {
        offered: reasons.is_empty(),
        reasons,
    }
}

#[derive(Debug, Clone)]
pub struct Skills {
    store: Arc<Store>,
    key: Arc<DataKey>,
    namespace: String,
    /// The node's `[ceilings]`: an import holds a skill's own `limits:` to them.
    ceilings: Limits,
}

impl Skills {
    /// Imports are held to the default `[ceilings]` until [`Skills::with_ceilings`] says the
    /// node's.
    pub fn new(store: Arc<Store>, key: Arc<DataKey>, namespace: impl Into<String>) -> Skills {
        Skills {
            store,
            key,
            namespace: namespace.into(),
            ceilings: crate::config::CeilingsConfig::default().limits(),
        }
    }

    /// The node's `[ceilings]`, which every import holds a skill's own `limits:` to.
    pub fn with_ceilings(mut self, ceilings: &crate::config::CeilingsConfig) -> Skills {
        self.ceilings = ceilings.limits();
        self
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Import a SKILL.md. Parse, project and validate first (nothing is written when that fails);
    /// then write the declaration and the body source in one transaction. The body is dropped
    /// as soon as it is sealed.
    pub fn import(&self, input: &[u8], fallback_name: Option<&str>) -> Result<Imported> {
        let mut all = self.import_all(&[(input, fallback_name)])?;
        Ok(all.pop().expect("one document in, one import out"))
    }

    /// Import several SKILL.md documents all or nothing: every one is checked before anything
    /// is written, and all are written in one transaction (a pack's skills land together).
    pub fn import_all(&self, docs: &[(&[u8], Option<&str>)]) -> Result<Vec<Imported>> {
        Ok(self.import_pack(docs, &[])?.0)
    }

    /// A pack: its skills (as SKILL.md documents) and its other agents, all checked first and
    /// written in one transaction.
    pub fn import_pack(
        &self,
        docs: &[(&[u8], Option<&str>)],
        agents: &[crate::agents::PackAgent],
    ) -> Result<(Vec<Imported>, Vec<crate::agents::StoredAgent>)> {
        let mut checked = Vec::with_capacity(docs.len());
        for (input, fallback) in docs {
            let mut c = check_skill(input, *fallback, &self.namespace)?;
            let held = held_to_ceilings(&mut c.declaration, &self.ceilings);
            c.warnings.extend(held);
            // The box refuses to run a body whose secret markers it cannot read; say so now,
            // with the line, rather than at the first call.
            if let Err(e) = skillbox_guard::prepare(
                c.body.as_str(),
                &skillbox_guard::GuardSpec::default_for(true),
            ) {
                return Err(NodeError::invalid("body", e.to_string()));
            }
            checked.push(c);
        }
        let mut names = std::collections::BTreeSet::new();
        for c in &checked {
            if !names.insert(c.declaration.name.clone()) {
                return Err(NodeError::Conflict(format!(
                    "skill {:?} appears twice in one import",
                    c.declaration.name
                )));
            }
        }
        let rows = checked
            .into_iter()
            .map(|c| {
                // The model id is owner material: it goes to the source store with the body,
                // and the stored declaration row does not carry it (the digest still covers it).
                let mut stored = c.declaration.clone();
                stored.model = None;
                let decl_json = serde_json::to_string(&stored)
                    .map_err(|e| NodeError::stored_row("declaration", &c.declaration.name, e))?;
                let warnings =
                    serde_json::to_value(&c.warnings).unwrap_or(Value::Array(Vec::new()));
                // A fresh salt for every import: the commitment changes with each change, and
                // only this node can open it.
                let salt = new_salt();
                Ok((
                    (c.declaration.digest(&salt), salt),
                    decl_json,
                    c.manifest.to_string(),
                    warnings,
                    c,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let (replaced, stored_agents) = self.store.write(|tx| {
            let mut replaced = Vec::with_capacity(rows.len());
            for ((digest, salt), decl_json, manifest_json, warnings, c) in &rows {
                let name = &c.declaration.name;
                let agent_id = &c.agent_id;
                let holder: Option<String> = tx
                    .query_row("SELECT name FROM skills WHERE agent_id = ?1", params![agent_id], |r| r.get(0))
                    .optional()?;
                if let Some(other) = holder.filter(|other| other != name) {
                    return Err(NodeError::Conflict(format!(
                        "skill {other:?} already has agentId {agent_id:?}; rename one of them"
                    )));
                }
                let pack_agent = tx
                    .query_row("SELECT 1 FROM pack_agents WHERE agent_id = ?1", params![agent_id], |_| Ok(()))
                    .optional()?;
                if pack_agent.is_some() {
                    return Err(NodeError::Conflict(format!(
                        "a pack agent already has agentId {agent_id:?}; rename the skill"
                    )));
                }
                let now = now_secs();
                let warnings = warnings.to_string();
                let row = params![name, agent_id, decl_json, manifest_json, digest, warnings, now];
                let was = tx.execute(
                    // A file imported again is the file's word: the ceilings, body allowance and
                    // model context the owner set on the one it replaces go with it (its
                    // provider may be another).
                    "UPDATE skills SET agent_id = ?2, declaration = ?3, manifest = ?4, digest = ?5,
                         warnings = ?6, owner_limits = '{}', body_max_tokens = NULL,
                         model_context_tokens = NULL, updated_at = ?7 WHERE name = ?1",
                    row,
                )? > 0;
                if !was {
                    tx.execute(
                        "INSERT INTO skills (name, agent_id, declaration, manifest, digest, warnings,
                             created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
                        row,
                    )?;
                }
                sources::put_in(
                    tx,
                    &self.key,
                    &c.declaration.body_source_name(),
                    SourceKind::Text,
                    c.body.as_str().as_bytes(),
                )?;
                self.put_salt(tx, name, salt)?;
                let model_source = c.declaration.model_source_name();
                match c.declaration.model.as_deref().filter(|m| !m.is_empty()) {
                    Some(model) => {
                        sources::put_in(
                            tx,
                            &self.key,
                            &model_source,
                            SourceKind::Secret,
                            model.as_bytes(),
                        )?;
                    }
                    None => {
                        tx.execute("DELETE FROM sources WHERE name = ?1", params![model_source])?;
                    }
                }
                replaced.push(was);
            }
            let stored_agents = crate::agents::put_pack_agents_in(tx, &self.key, agents)?;
            Ok((replaced, stored_agents))
        })?;
        let mut out = Vec::with_capacity(rows.len());
        for (((digest, _), _, _, warnings, c), replaced) in rows.into_iter().zip(replaced) {
            let decl = c.declaration;
            drop(c.body);
            let state = self.offer_state(&decl)?;
            tracing::info!(skill = %decl.name, agent_id = %c.agent_id, %digest, replaced, offered = state.offered, "skill imported");
            let spends = Box::new(Spends {
                provider: decl.provider.as_ref().map(ToString::to_string),
                model: decl.model.clone(),
                key: decl.key.clone(),
                limits: decl.limits.or(&self.ceilings),
            });
            out.push(Imported {
                name: decl.name,
                agent_id: c.agent_id,
                digest,
                replaced,
                state,
                warnings,
                spends,
            });
        }
        for a in &stored_agents {
            tracing::info!(agent_id = %a.agent_id, pack = %a.pack_name, replaced = a.replaced, "pack agent imported");
        }
        Ok((out, stored_agents))
    }

    /// `skill set NAME provider=… model=… key=…`: change what the owner stakes for a declared
    /// skill, each field checked by the document's own rules. `Some(None)` clears a field,
    /// `None` leaves it. `Ok(None)` when there is no such skill.
    pub fn set(&self, name: &str, change: &SkillChange) -> Result<Option<SkillDetail>> {
        let provider = match &change.provider {
            Some(Some(p)) => Some(Some(
                p.parse::<skillbox_skill::ProviderId>()
                    .map_err(|e| NodeError::invalid("provider", e.to_string()))?,
            )),
            Some(None) => Some(None),
            None => None,
        };
        if let Some(Some(m)) = &change.model
            && (m.trim().is_empty() || m.len() > 256)
        {
            return Err(NodeError::invalid(
                "model",
                "must be a provider model id of 1 to 256 characters",
            ));
        }
        if let Some(Some(k)) = &change.key
            && skillbox_skill::is_reserved_source_name(k)
        {
            // As the import refuses it: another skill's body or a pack's prompt is not a key.
            return Err(NodeError::invalid(
                "key",
                "is under a reserved prefix: the key must be a secret source of the owner's own",
            ));
        }
        if let Some(Some(k)) = &change.key
            && !skillbox_skill::is_valid_source_name(k)
        {
            return Err(NodeError::invalid(
                "key",
                "must name a source (letters, digits, `_`, `.`, `-`), e.g. `openrouter-key`",
            ));
        }
        // The model id lives in the source store (see import): read the current one through
        // apply when it is not being changed, so the digest still covers it.
        let current_model: Option<String> = match &change.model {
            Some(m) => m.clone(),
            None => {
                let sources = crate::sources::Sources::new(self.store.clone(), self.key.clone());
                let mut buf = zeroize::Zeroizing::new(Vec::new());
                match sources.apply(&skillbox_skill::model_source_name(name), &mut *buf) {
                    Ok(_) => Some(String::from_utf8_lossy(&buf).into_owned()),
                    Err(NodeError::NotFound { .. }) => None,
                    Err(e) => return Err(e),
                }
            }
        };
        if let Some((field, _)) = change
            .limits
            .iter()
            .find(|(f, _)| !Limits::FIELDS.contains(&f.as_str()))
        {
            return Err(NodeError::invalid(
                format!("limits.{field}"),
                format!("unknown ceiling (accepted: {})", Limits::FIELDS.join(", ")),
            ));
        }
        if change
            .limits
            .iter()
            .any(|(_, v)| v.is_some_and(|n| n > Limits::MAX))
        {
            return Err(NodeError::invalid(
                "limits",
                "each ceiling must be a whole number up to 2^53-1",
            ));
        }
        // Each number's own range first, before the row is read: its fit with the provider's
        // default is checked with the row below.
        OwnerTokens {
            body_max_tokens: change.body_max_tokens.flatten(),
            model_context_tokens: change.model_context_tokens.flatten(),
        }
        .check(None)?;
        let updated = self.store.write(|tx| {
            let row: Option<(String, String, Option<i64>, Option<i64>)> = tx
                .query_row(
                    "SELECT declaration, owner_limits, body_max_tokens, model_context_tokens
                         FROM skills WHERE name = ?1",
                    params![name],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .optional()?;
            let Some((decl, owner, body_tokens, context_tokens)) = row else {
                return Ok(false);
            };
            let mut tokens = owner_tokens_of(name, body_tokens, context_tokens)?;
            let mut decl: Declaration = serde_json::from_str(&decl)
                .map_err(|e| NodeError::stored_row("declaration", name, e))?;
            let mut owner = owner_limits_of(name, &owner)?;
            if let Some(p) = provider.clone() {
                decl.provider = p;
            }
            if let Some(k) = change.key.clone() {
                if let Some(name) = &k {
                    key_names_a_secret_in(tx, name)?;
                }
                decl.key = k;
            }
            // Each ceiling named is the owner's from now (set) or no one's (cleared): the
            // declaration carries it for the digest and the advert, `owner_limits` says whose
            // it is, so admission does not hold it to `[ceilings]`.
            for (field, value) in &change.limits {
                decl.limits.set(field, *value);
                owner.set(field, *value);
            }
            if let Some(n) = change.body_max_tokens {
                tokens.body_max_tokens = n;
            }
            if let Some(n) = change.model_context_tokens {
                tokens.model_context_tokens = n;
            }
            // Checked against the provider the skill has after this change: a provider set to
            // `local` with a context still set, or a hosted one whose default context the set
            // allowance overruns, is refused here, naming the field.
            tokens.check(decl.provider.as_ref())?;
            let owner = serde_json::to_string(&owner)
                .map_err(|e| NodeError::stored_row("owner limits", name, e))?;
            // The digest covers the model; the stored row does not carry it. A new salt with
            // every change.
            decl.model = current_model.clone();
            let salt = new_salt();
            let digest = decl.digest(&salt);
            self.put_salt(tx, name, &salt)?;
            let model_source = decl.model_source_name();
            if change.model.is_some() {
                match decl.model.as_deref() {
                    Some(m) => {
                        sources::put_in(
                            tx,
                            &self.key,
                            &model_source,
                            SourceKind::Secret,
                            m.as_bytes(),
                        )?;
                    }
                    None => {
                        tx.execute("DELETE FROM sources WHERE name = ?1", params![model_source])?;
                    }
                }
            }
            decl.model = None;
            let text = serde_json::to_string(&decl)
                .map_err(|e| NodeError::stored_row("declaration", name, e))?;
            tx.execute(
                "UPDATE skills SET declaration = ?2, digest = ?3, owner_limits = ?4, updated_at = ?5,
                     body_max_tokens = ?6, model_context_tokens = ?7 WHERE name = ?1",
                params![
                    name,
                    text,
                    digest,
                    owner,
                    now_secs(),
                    tokens.body_max_tokens.map(|n| n as i64),
                    tokens.model_context_tokens.map(|n| n as i64)
                ],
            )?;
            Ok(true)
        })?;
        if !updated {
            return Ok(None);
        }
        // Never the model or key in the log: only which fields changed.
        tracing::info!(
            skill = %name,
            provider = change.provider.is_some(),
            model = change.model.is_some(),
            key = change.key.is_some(),
            limits = !change.limits.is_empty(),
            tokens = change.body_max_tokens.is_some() || change.model_context_tokens.is_some(),
            "skill declaration changed"
        );
        self.detail(name)
    }

    /// Keep `salt`, the one the digest of skill `name` was made with, as its secret source:
    /// only this node can open the commitment.
    fn put_salt(&self, tx: &Tx<'_>, name: &str, salt: &[u8]) -> Result<()> {
        let source = skillbox_skill::salt_source_name(name);
        sources::put_in(tx, &self.key, &source, SourceKind::Secret, salt).map(|_| ())
    }

    /// Whether a declared skill is offered: its declaration is complete (provider, a key named
    /// when the provider spends one), its body and key sources are present, and its body fits
    /// the allowance the owner set for it (else the provider's default). Sizes and the skill's
    /// row only, in one read: the body is never opened.
    pub fn offer_state(&self, decl: &Declaration) -> Result<OfferState> {
        let body = decl.body_source_name();
        let key = decl.key.clone();
        let (present, tokens) = self.store.read(|c| {
            let mut present = Present::new();
            for name in std::iter::once(&body).chain(key.as_ref()) {
                let size: Option<i64> = c
                    .query_row(
                        "SELECT size FROM sources WHERE name = ?1",
                        params![name],
                        |r| r.get(0),
                    )
                    .optional()?;
                if let Some(size) = size {
                    present.insert(name.clone(), size.max(0) as u64);
                }
            }
            let tokens: Option<(Option<i64>, Option<i64>)> = c
                .query_row(
                    "SELECT body_max_tokens, model_context_tokens FROM skills WHERE name = ?1",
                    params![decl.name],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            Ok((present, tokens))
        })?;
        let tokens = match tokens {
            Some((body, context)) => owner_tokens_of(&decl.name, body, context)?,
            None => OwnerTokens::default(),
        };
        Ok(offer_state_with(decl, &present, &tokens))
    }

    /// Every source's name and size (metadata only), for computing many offer states at once.
    fn source_sizes(&self) -> Result<Present> {
        self.store.read(|c| {
            let mut stmt = c.prepare("SELECT name, size FROM sources")?;
            let sizes = stmt
                .query_map([], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?.max(0) as u64))
                })?
                .collect::<rusqlite::Result<_>>()?;
            Ok(sizes)
        })
    }

    /// `(manifest, digest)` of every declared skill: all the inventory needs (no declaration
    /// parsing, no source lookups).
    pub fn manifests(&self) -> Result<Vec<(Value, String)>> {
        let rows: Vec<(String, String, String)> = self.store.read(|c| {
            let mut stmt =
                c.prepare("SELECT name, manifest, digest FROM skills ORDER BY agent_id")?;
            let rows = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<rusqlite::Result<_>>()?;
            Ok(rows)
        })?;
        rows.into_iter()
            .map(|(name, manifest, digest)| {
                let manifest = serde_json::from_str(&manifest)
                    .map_err(|e| NodeError::stored_row("manifest", name, e))?;
                Ok((manifest, digest))
            })
            .collect()
    }

    fn records(&self, filter: Option<(&str, &str)>) -> Result<Vec<SkillRecord>> {
        self.store.read(|c| {
            let base = "SELECT name, agent_id, declaration, manifest, digest, warnings, owner_limits, created_at, updated_at, body_max_tokens, model_context_tokens FROM skills";
            let (sql, arg) = match filter {
                Some((column, value)) => (format!("{base} WHERE {column} = ?1"), Some(value)),
                None => (format!("{base} ORDER BY name"), None),
            };
            let mut stmt = c.prepare(&sql)?;
            type Cols = (String, String, String, String, String, String, String, i64, i64, Option<i64>, Option<i64>);
            let map = |r: &rusqlite::Row<'_>| Cols::try_from(r);
            let rows: Vec<_> = match arg {
                Some(v) => stmt.query_map(params![v], map)?.collect::<rusqlite::Result<_>>()?,
                None => stmt.query_map([], map)?.collect::<rusqlite::Result<_>>()?,
            };
            rows.into_iter()
                .map(|(name, agent_id, decl, manifest, digest, warnings, owner, created_at, updated_at, body_tokens, context_tokens)| {
                    let bad = |what: &'static str, e: serde_json::Error| NodeError::StoredRow {
                        what,
                        name: name.clone(),
                        problem: e.to_string(),
                    };
                    Ok(SkillRecord {
                        declaration: serde_json::from_str(&decl).map_err(|e| bad("declaration", e))?,
                        manifest: serde_json::from_str(&manifest).map_err(|e| bad("manifest", e))?,
                        warnings: serde_json::from_str(&warnings).map_err(|e| bad("warnings", e))?,
                        owner_limits: serde_json::from_str(&owner).map_err(|e| bad("owner limits", e))?,
                        owner_tokens: owner_tokens_of(&name, body_tokens, context_tokens)?,
                        agent_id,
                        digest,
                        created_at,
                        updated_at,
                    })
                })
                .collect()
        })
    }

    /// Every declared skill, by name.
    pub fn records_all(&self) -> Result<Vec<SkillRecord>> {
        self.records(None)
    }

    /// A skill's declaration and digest alone — what the owner's stake reads, once a call: not
    /// its manifest and warnings, which a whole record also parses.
    pub fn declared(&self, name: &str) -> Result<Option<(Declaration, String)>> {
        Ok(self.admitted(name)?.map(|(d, digest, _, _)| (d, digest)))
    }

    /// [`Skills::declared`], the ceilings the owner set (`owner_limits`) and its body allowance
    /// and model context: what a call's admission reads, to apply [`in_force`] and check the
    /// program's tokens.
    pub fn admitted(
        &self,
        name: &str,
    ) -> Result<Option<(Declaration, String, Limits, OwnerTokens)>> {
        type Row = (String, String, String, Option<i64>, Option<i64>);
        let row: Option<Row> = self.store.read(|c| {
            Ok(c.query_row(
                "SELECT declaration, digest, owner_limits, body_max_tokens, model_context_tokens
                     FROM skills WHERE name = ?1",
                params![name],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
            )
            .optional()?)
        })?;
        row.map(|(decl, digest, owner, body, context)| {
            let declaration = serde_json::from_str(&decl)
                .map_err(|e| NodeError::stored_row("declaration", name, e))?;
            Ok((
                declaration,
                digest,
                owner_limits_of(name, &owner)?,
                owner_tokens_of(name, body, context)?,
            ))
        })
        .transpose()
    }

    pub fn record(&self, name: &str) -> Result<Option<SkillRecord>> {
        Ok(self.records(Some(("name", name)))?.pop())
    }

    pub fn record_by_agent_id(&self, agent_id: &str) -> Result<Option<SkillRecord>> {
        Ok(self.records(Some(("agent_id", agent_id)))?.pop())
    }

    pub fn list(&self) -> Result<Vec<SkillSummary>> {
        let present = self.source_sizes()?;
        self.records_all()?
            .into_iter()
            .map(|r| {
                let state = offer_state_with(&r.declaration, &present, &r.owner_tokens);
                let d = &r.declaration;
                Ok(SkillSummary {
                    name: d.name.clone(),
                    agent_id: r.agent_id,
                    description: d.description.clone(),
                    provider: d.provider.as_ref().map(ToString::to_string),
                    required_sources: d.required_sources.clone(),
                    limits: held(&d.limits, &r.owner_limits, &self.ceilings),
                    tokens: r.owner_tokens,
                    digest: r.digest,
                    offered: state.offered,
                    reason: (!state.offered).then(|| state.reasons.join("; ")),
                    reasons: state.reasons,
                    created_at: r.created_at,
                    updated_at: r.updated_at,
                })
            })
            .collect()
    }

    pub fn detail(&self, name: &str) -> Result<Option<SkillDetail>> {
        let Some(r) = self.record(name)? else {
            return Ok(None);
        };
        let state = self.offer_state(&r.declaration)?;
        let body_name = r.declaration.body_source_name();
        let body_source = self.store.read(|c| sources::meta_in(c, &body_name))?;
        Ok(Some(SkillDetail {
            name: r.declaration.name.clone(),
            agent_id: r.agent_id,
            digest: r.digest,
            declaration: r.declaration,
            manifest: r.manifest,
            state,
            tokens: r.owner_tokens,
            warnings: r.warnings,
            body_source,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }))
    }

    /// Remove a skill: its declaration and its owner sources (body, model, salt), in one
    /// transaction.
    pub fn delete(&self, name: &str) -> Result<bool> {
        let owned = [
            skillbox_skill::body_source_name(name),
            skillbox_skill::model_source_name(name),
            skillbox_skill::salt_source_name(name),
        ];
        let removed = self.store.write(|tx| {
            let n = tx.execute("DELETE FROM skills WHERE name = ?1", params![name])?;
            if n > 0 {
                for source in &owned {
                    tx.execute("DELETE FROM sources WHERE name = ?1", params![source])?;
                }
            }
            Ok(n > 0)
        })?;
        if removed {
            tracing::info!(skill = %name, "skill removed");
        }
        Ok(removed)
    }

    pub fn count(&self) -> Result<u64> {
        self.store.read(|c| {
            Ok(c.query_row("SELECT count(*) FROM skills", [], |r| r.get::<_, i64>(0))? as u64)
        })
    }
}

/// The ceilings in force for skill `name` under the node's `ceilings` ([`in_force`]), read in
/// the caller's transaction: `None` when there is no such skill. Only the `limits:` member and
/// the owner's are read and parsed, not the whole record: the owner charges each call's run
/// against them in the write that opens it (issue 33).
pub(crate) fn limits_in(tx: &Tx<'_>, name: &str, ceilings: &Limits) -> Result<Option<Limits>> {
    let stored: Option<(Option<String>, String)> = tx
        .query_row(
            "SELECT json_extract(declaration, '$.limits'), owner_limits FROM skills WHERE name = ?1",
            params![name],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let Some((declared, owner)) = stored else {
        return Ok(None);
    };
    let declared = match declared {
        None => Limits::default(),
        Some(text) => serde_json::from_str(&text)
            .map_err(|e| NodeError::stored_row("declaration", name, e))?,
    };
    let owner = owner_limits_of(name, &owner)?;
    Ok(Some(in_force(&declared, &owner, ceilings)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the charge reads of a skill's ceilings, and what admission and a stake read of its
    /// declaration and digest, is what its whole record says, with limits and without; no
    /// skill reads as none.
    #[test]
    fn the_parts_read_alone_are_the_records() {
        let store = Arc::new(Store::open_in_memory().expect("store"));
        let skills = Skills::new(
            store.clone(),
            Arc::new(DataKey::from_bytes(&[3u8; 32])),
            "local.test",
        );
        let with = b"---\nname: capped\ndescription: d\nlimits:\n  callsPerDay: 3\n  maxOutputBytes: 900\n---\nbody\n";
        let without = b"---\nname: open\ndescription: d\n---\nbody\n";
        skills
            .import_all(&[(with, None), (without, None)])
            .expect("import");
        for name in ["capped", "open"] {
            let whole = skills.record(name).expect("record").expect("there");
            let read = store
                .write(|tx| limits_in(tx, name, &Limits::default()))
                .expect("read");
            assert_eq!(read, Some(whole.declaration.limits), "{name}");
            let declared = skills.declared(name).expect("declared");
            assert_eq!(declared, Some((whole.declaration, whole.digest)), "{name}");
        }
        assert_eq!(skills.declared("absent").expect("declared"), None);
        let capped = store
            .write(|tx| limits_in(tx, "capped", &Limits::default()))
            .expect("read");
        assert_eq!(capped.and_then(|l| l.calls_per_day), Some(3));
        assert_eq!(
            store
                .write(|tx| limits_in(tx, "absent", &Limits::default()))
                .expect("read"),
            None
        );
    }

    /// Review 25 S1, performed: someone else's SKILL.md (the review's, /tmp/rv25/evil-skill)
    /// asks for ceilings of 2^53-1 calls a day and 64 MiB answers on an expensive model under
    /// the owner's `openrouter-key`. What admission and the charge read (`limits_in`, over the
    /// node's `[ceilings]`) is the node's ceiling for each raised field, each named in a warning;
    /// a field asked below the ceiling stays; the import answers what the skill spends. The
    /// owner's own `skill set` still raises a ceiling past `[ceilings]`.
    #[test]
    fn a_declared_ceiling_above_the_nodes_is_held_to_it_and_warned() {
        let store = Arc::new(Store::open_in_memory().expect("store"));
        let ceilings = crate::config::CeilingsConfig::default();
        let skills = Skills::new(
            store.clone(),
            Arc::new(DataKey::from_bytes(&[3u8; 32])),
            "local.test",
        )
        .with_ceilings(&ceilings);
        let evil = b"---\nname: evil-skill\ndescription: Reviews code.\nprovider: openrouter\nkey: openrouter-key\nmodel: openai/o1-pro\nlimits:\n  callsPerDay: 9007199254740991\n  callsPerPeerPerDay: 9007199254740991\n  maxOutputBytes: 67108864\n  maxRequestBytes: 67108864\n  maxSourceBytes: 1000\n---\nReview the code.\n";
        let imported = skills.import(evil, None).expect("import");
        let defaults = ceilings.limits();
        let applied = store
            .write(|tx| limits_in(tx, "evil-skill", &defaults))
            .expect("read")
            .expect("there");
        let expected = Limits {
            max_source_bytes: Some(1000),
            ..defaults
        };
        assert_eq!(applied, expected, "what admission applies");
        let warned: Vec<&str> = imported
            .warnings
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|w| w["field"].as_str())
            .collect();
        assert_eq!(
            warned,
            [
                "limits.maxRequestBytes",
                "limits.maxOutputBytes",
                "limits.callsPerPeerPerDay",
                "limits.callsPerDay"
            ]
        );
        let day = &imported.warnings[3]["message"];
        assert_eq!(
            day.as_str(),
            Some(
                "9007199254740991 is above this node's [ceilings] (1000), so 1000 applies: a SKILL.md does not raise what callers may spend of your key (raise it yourself with `skillbox skill set evil-skill callsPerDay=N`)"
            )
        );
        let spends = serde_json::to_value(&imported.spends).expect("json");
        assert_eq!(
            spends,
            serde_json::json!({
                "provider": "openrouter", "model": "openai/o1-pro", "key": "openrouter-key",
                "limits": serde_json::to_value(expected).expect("json"),
            })
        );
        let listed = skills.list().expect("list");
        assert_eq!(
            listed[0].limits.calls_per_day, None,
            "the advert asks no more"
        );

        let change = SkillChange {
            limits: vec![("callsPerDay".into(), Some(5000))],
            ..SkillChange::default()
        };
        skills
            .set("evil-skill", &change)
            .expect("set")
            .expect("there");
        let applied = store
            .write(|tx| limits_in(tx, "evil-skill", &defaults))
            .expect("read")
            .expect("there");
        assert_eq!(applied.calls_per_day, Some(5000), "the owner's own word");
    }

    /// The node's `[ceilings]` as a config section with `calls_per_day` and
    /// `max_output_bytes` set to `day` and `output`, the rest the defaults.
    fn ceilings(day: u64, output: u64) -> crate::config::CeilingsConfig {
        crate::config::CeilingsConfig {
            calls_per_day: day,
            max_output_bytes: output,
            ..crate::config::CeilingsConfig::default()
        }
    }

    /// What admission and the charge apply to skill `name` under `ceilings`: what
    /// `calls::inbound` reads, the declaration row's path (`Skills::admitted`, `in_force`) and
    /// the charge's (`limits_in`), asserted equal.
    fn applied(skills: &Skills, name: &str, ceilings: &Limits) -> Limits {
        let (d, _, owner, _) = skills.admitted(name).expect("read").expect("there");
        let admitted = in_force(&d.limits, &owner, ceilings);
        let charged = skills
            .store
            .write(|tx| limits_in(tx, name, ceilings))
            .expect("read")
            .expect("there");
        assert_eq!(admitted, charged, "admission and the charge apply the same");
        admitted
    }

    /// Review 26 V3, attack 1 (upgrade): a row stored by a node from before imports were held
    /// (808c431), its `limits:` 2^53-1 calls a day and 64 MiB answers as review 25's evil
    /// SKILL.md asked, and migrated with nothing of it the owner's. Each call is held to the
    /// node's `[ceilings]`, and so is the advert (`list`). Without the fix admission applied
    /// `calls_per_day: Some(9007199254740991)`.
    #[test]
    fn a_row_stored_before_imports_were_held_is_held_to_the_ceilings_at_each_call() {
        let store = Arc::new(Store::open_in_memory().expect("store"));
        let key = Arc::new(DataKey::from_bytes(&[3u8; 32]));
        let ceilings = crate::config::CeilingsConfig::default();
        let skills = Skills::new(store.clone(), key, "local.test").with_ceilings(&ceilings);
        let doc = b"---
name: evil-skill
description: Reviews code.
provider: openrouter
key: openrouter-key
limits:
  callsPerDay: 7
---
Review the code.
";
        skills.import(doc, None).expect("import");
        // As the old node stored it: the file's limits verbatim, in the declaration row.
        store
            .write(|tx| {
                tx.execute(
                    "UPDATE skills SET declaration = json_set(declaration,
                         '$.limits.callsPerDay', 9007199254740991,
                         '$.limits.callsPerPeerPerDay', 9007199254740991,
                         '$.limits.maxOutputBytes', 67108864) WHERE name = 'evil-skill'",
                    [],
                )?;
                Ok(())
            })
            .expect("an old row");
        let stored = skills.record("evil-skill").expect("read").expect("there");
        assert_eq!(stored.declaration.limits.calls_per_day, Some(Limits::MAX));
        let defaults = ceilings.limits();
        let got = applied(&skills, "evil-skill", &defaults);
        assert_eq!(got.calls_per_day, Some(1000), "calls a day: {got:?}");
        assert_eq!(got.calls_per_peer_per_day, Some(100), "{got:?}");
        assert_eq!(got.max_output_bytes, Some(16 * 1024), "{got:?}");
        assert_eq!(got, defaults);
        let listed = skills.list().expect("list");
        assert_eq!(listed[0].limits.calls_per_day, Some(1000), "the advert");
        assert_eq!(listed[0].limits.max_output_bytes, Some(16 * 1024));
    }

    /// Review 26 V3, attack 2 (later tightening): a file asking exactly the default
    /// `[ceilings]` is imported with no warning and stored as it asks; the owner lowers
    /// `[ceilings]` and restarts (a `Skills` over the same store, as `Node::open` makes one
    /// from the new config). The skill follows the lowered ceilings, at admission, in the
    /// charge and in the advert; a field it asked below them stays. Without the fix it kept
    /// 1000 calls a day.
    #[test]
    fn a_file_asking_todays_ceilings_follows_them_when_the_owner_lowers_them() {
        let store = Arc::new(Store::open_in_memory().expect("store"));
        let key = Arc::new(DataKey::from_bytes(&[3u8; 32]));
        let before = ceilings(1000, 16 * 1024);
        let skills = Skills::new(store.clone(), key.clone(), "local.test").with_ceilings(&before);
        let doc = b"---
name: exact
description: d
limits:
  callsPerDay: 1000
  callsPerPeerPerDay: 100
  maxOutputBytes: 16384
  maxSourceBytes: 1000
---
body
";
        let imported = skills.import(doc, None).expect("import");
        assert_eq!(imported.warnings, serde_json::json!([]), "at the ceilings");
        assert_eq!(
            applied(&skills, "exact", &before.limits()).calls_per_day,
            Some(1000)
        );

        let after = ceilings(2, 4096);
        let restarted = Skills::new(store, key, "local.test").with_ceilings(&after);
        let got = applied(&restarted, "exact", &after.limits());
        assert_eq!(got.calls_per_day, Some(2), "calls a day: {got:?}");
        assert_eq!(got.max_output_bytes, Some(4096), "{got:?}");
        assert_eq!(got.max_source_bytes, Some(1000), "asked below: {got:?}");
        assert_eq!(got.calls_per_peer_per_day, Some(100), "{got:?}");
        let listed = restarted.list().expect("list");
        assert_eq!(listed[0].limits.calls_per_day, Some(2), "the advert");
    }

    /// The owner's own word stands: a ceiling set with `skill set` above `[ceilings]` applies
    /// as set, and still does after the owner lowers `[ceilings]`; the fields it did not name
    /// stay the file's, held; clearing it gives it back to `[ceilings]`; importing the file
    /// again is the file's word.
    #[test]
    fn an_owners_skill_set_above_the_ceilings_still_applies() {
        let store = Arc::new(Store::open_in_memory().expect("store"));
        let key = Arc::new(DataKey::from_bytes(&[3u8; 32]));
        let before = ceilings(1000, 16 * 1024);
        let skills = Skills::new(store.clone(), key.clone(), "local.test").with_ceilings(&before);
        let doc = b"---
name: mine
description: d
limits:
  callsPerDay: 1000
  maxOutputBytes: 16384
---
body
";
        skills.import(doc, None).expect("import");
        let set = |skills: &Skills, field: &str, value: Option<u64>| {
            let change = SkillChange {
                limits: vec![(field.into(), value)],
                ..SkillChange::default()
            };
            skills.set("mine", &change).expect("set").expect("there");
        };
        set(&skills, "callsPerDay", Some(5000));
        assert_eq!(
            applied(&skills, "mine", &before.limits()).calls_per_day,
            Some(5000)
        );

        let after = ceilings(2, 4096);
        let restarted = Skills::new(store, key, "local.test").with_ceilings(&after);
        let got = applied(&restarted, "mine", &after.limits());
        assert_eq!(got.calls_per_day, Some(5000), "the owner's: {got:?}");
        assert_eq!(
            got.max_output_bytes,
            Some(4096),
            "the file's, held: {got:?}"
        );
        let listed = restarted.list().expect("list");
        assert_eq!(listed[0].limits.calls_per_day, Some(5000), "the advert");
        let record = restarted.record("mine").expect("read").expect("there");
        assert_eq!(record.owner_limits.calls_per_day, Some(5000));
        assert_eq!(record.owner_limits.max_output_bytes, None);

        set(&restarted, "callsPerDay", None);
        let got = applied(&restarted, "mine", &after.limits());
        assert_eq!(got.calls_per_day, Some(2), "cleared: {got:?}");

        set(&restarted, "callsPerDay", Some(5000));
        restarted.import(doc, None).expect("import again");
        let got = applied(&restarted, "mine", &after.limits());
        assert_eq!(got.calls_per_day, Some(2), "the file again: {got:?}");

        let unknown = SkillChange {
            limits: vec![("callsPerYear".into(), Some(1))],
            ..SkillChange::default()
        };
        let refused = restarted
            .set("mine", &unknown)
            .expect_err("unknown ceiling");
        assert!(
            refused.to_string().contains("limits.callsPerYear"),
            "{refused}"
        );
    }

    fn tokens(body: Option<u64>, context: Option<u64>) -> SkillChange {
        SkillChange {
            body_max_tokens: Some(body),
            model_context_tokens: Some(context),
            ..SkillChange::default()
        }
    }

    /// `skill set`'s tokens: kept as set, read back by admission, the listing and the advert's
    /// projection; bad values refused naming the field with nothing written; cleared, the
    /// provider's defaults; a file imported again drops them (its provider may be another).
    #[test]
    fn the_owners_tokens_are_set_checked_read_and_dropped_by_a_new_import() {
        let store = Arc::new(Store::open_in_memory().expect("store"));
        let skills = Skills::new(
            store,
            Arc::new(DataKey::from_bytes(&[3u8; 32])),
            "local.test",
        );
        let doc = b"---\nname: taste\ndescription: d\nprovider: ollama\nmodel: m\n---\nbody\n";
        skills.import(doc, None).expect("import");
        let ollama = ProviderId::Ollama;
        let read = |skills: &Skills| skills.admitted("taste").expect("read").expect("there").3;
        assert_eq!(
            read(&skills),
            OwnerTokens::default(),
            "an imported row: the defaults"
        );

        let detail = skills
            .set("taste", &tokens(Some(16_384), Some(32_768)))
            .expect("set")
            .expect("there");
        let set = OwnerTokens {
            body_max_tokens: Some(16_384),
            model_context_tokens: Some(32_768),
        };
        assert_eq!(detail.tokens, set);
        assert_eq!(read(&skills), set);
        assert_eq!(skills.list().expect("list")[0].tokens, set);
        assert_eq!(set.advertised(&ollama), set);
        assert_eq!(
            (set.body_allowance(&ollama), set.model_context(&ollama)),
            (16_384, Some(32_768))
        );

        // Refused, naming the field; nothing changes.
        let refused = [
            (tokens(Some(0), None), OwnerTokens::BODY),
            (
                tokens(Some(MAX_BODY_MAX_TOKENS + 1), None),
                OwnerTokens::BODY,
            ),
            (tokens(None, Some(0)), OwnerTokens::CONTEXT),
            (
                tokens(None, Some(MAX_MODEL_CONTEXT_TOKENS + 1)),
                OwnerTokens::CONTEXT,
            ),
            // The default 4,096 context cannot hold 16,384 of body.
            (tokens(Some(16_384), None), OwnerTokens::BODY),
            // Nor a context the allowance fills, with the notice, frame and smallest answer.
            (tokens(Some(8_000), Some(8_192)), OwnerTokens::CONTEXT),
            (
                SkillChange {
                    provider: Some(Some("local".into())),
                    ..SkillChange::default()
                },
                OwnerTokens::CONTEXT,
            ),
        ];
        for (change, field) in refused {
            match skills.set("taste", &change) {
                Err(NodeError::Invalid { field: f, message }) => {
                    assert_eq!(f, field, "{message}");
                }
                other => panic!("{change:?}: {other:?}"),
            }
            assert_eq!(read(&skills), set, "{change:?} wrote");
        }
        // The edge of the fit: the least context a 1,000-token allowance takes is let in.
        let notice = skillbox_jc::prompt::notice_bytes() as u64;
        let least =
            1000 + notice + skillbox_providers::REMOTE_FRAME_TOKENS as u64 + SMALLEST_ANSWER_TOKENS;
        assert!(
            skills
                .set("taste", &tokens(Some(1000), Some(least - 1)))
                .is_err()
        );
        assert!(
            skills
                .set("taste", &tokens(Some(1000), Some(least)))
                .is_ok()
        );

        // The defaults set are advertised as set, like any other value (review 29 R29-1: they
        // were dropped, and an older box read the program's `None` with its larger table).
        skills
            .set(
                "taste",
                &tokens(
                    Some(skillbox_jc::program::SELF_HOSTED_BODY_MAX_TOKENS),
                    Some(skillbox_jc::program::SELF_HOSTED_MODEL_CONTEXT_TOKENS),
                ),
            )
            .expect("set");
        assert_eq!(
            read(&skills).advertised(&ollama),
            OwnerTokens {
                body_max_tokens: Some(skillbox_jc::program::SELF_HOSTED_BODY_MAX_TOKENS),
                model_context_tokens: Some(skillbox_jc::program::SELF_HOSTED_MODEL_CONTEXT_TOKENS),
            }
        );
        skills.set("taste", &tokens(None, None)).expect("cleared");
        assert_eq!(read(&skills), OwnerTokens::default());

        skills
            .set("taste", &tokens(Some(16_384), Some(32_768)))
            .expect("set");
        skills.import(doc, None).expect("imported again");
        assert_eq!(read(&skills), OwnerTokens::default(), "the file's word");
        // Unset, the advert states the defaults in force (review 29 R29-1).
        assert_eq!(
            read(&skills).advertised(&ollama),
            OwnerTokens {
                body_max_tokens: Some(1024),
                model_context_tokens: Some(4096),
            }
        );
        // A context for `local` is no one's, and `local`'s allowance is its own number.
        let local = b"---\nname: here\ndescription: d\nprovider: local\nmodel: m\n---\nbody\n";
        skills.import(local, None).expect("import");
        assert!(matches!(
            skills.set("here", &tokens(None, Some(32_768))),
            Err(NodeError::Invalid { ref field, .. }) if field == OwnerTokens::CONTEXT
        ));
        skills.set("here", &tokens(Some(2048), None)).expect("set");
        let here = skills.admitted("here").expect("read").expect("there").3;
        assert_eq!(
            here.advertised(&ProviderId::Local).body_max_tokens,
            Some(2048)
        );
        assert_eq!(here.model_context(&ProviderId::Local), None);
        assert_eq!(
            here.advertised(&ProviderId::Local).model_context_tokens,
            None
        );
    }

    /// Review 29 R29-5: a remote skill whose body's bytes are over its allowance in force (every
    /// call `unavailable`) is not offered, and the reason names the sizes and the `skill set`
    /// that fixes it; at the allowance exactly it is offered, and `local` (whose box counts
    /// tokens) is never held to bytes.
    #[test]
    fn a_remote_body_over_its_allowance_is_not_offered_and_says_why() {
        let store = Arc::new(Store::open_in_memory().expect("store"));
        let skills = Skills::new(
            store,
            Arc::new(DataKey::from_bytes(&[3u8; 32])),
            "local.test",
        );
        let doc = |provider: &str, body: &str| {
            format!("---\nname: taste\ndescription: d\nprovider: {provider}\nmodel: m\n---\n{body}")
        };
        let state = |skills: &Skills| {
            let listed = skills.list().expect("list").remove(0);
            let detail = skills
                .detail("taste")
                .expect("detail")
                .expect("there")
                .state;
            assert_eq!(listed.reasons, detail.reasons, "list and detail agree");
            detail
        };
        // 1,024 bytes exactly: the self-hosted default holds it.
        skills
            .import(doc("ollama", &"a".repeat(1024)).as_bytes(), None)
            .expect("import");
        assert_eq!(state(&skills).reasons, Vec::<String>::new());
        // 1,500 bytes: over; raising the allowance alone fits the default 4,096 context.
        let imported = skills
            .import(doc("ollama", &"a".repeat(1500)).as_bytes(), None)
            .expect("import");
        assert!(!imported.state.offered, "the import says so");
        let s = state(&skills);
        assert!(!s.offered);
        assert_eq!(
            s.reasons,
            [
                "body (1500 bytes) over its allowance (1024 tokens): provider ollama is sent a body of at most as many bytes as its allowance has tokens, so every call would fail unavailable; raise it: skillbox skill set taste bodyMaxTokens=1500"
            ]
        );
        skills.set("taste", &tokens(Some(1500), None)).expect("set");
        assert!(state(&skills).offered);
        // 20,000 bytes needs a context too: the reason says how much at least.
        skills
            .import(doc("ollama", &"a".repeat(20_000)).as_bytes(), None)
            .expect("import");
        let why = state(&skills).reasons.join("; ");
        let least = 20_000
            + skillbox_jc::prompt::notice_bytes() as u64
            + skillbox_providers::REMOTE_FRAME_TOKENS as u64
            + SMALLEST_ANSWER_TOKENS;
        assert!(
            why.contains(&format!(
                "raise it: skillbox skill set taste bodyMaxTokens=20000 modelContextTokens=N, N your model server's context, at least {least}"
            )),
            "{why}"
        );
        skills
            .set("taste", &tokens(Some(20_000), Some(least)))
            .expect("set");
        assert!(state(&skills).offered);
        // The embedded model's box counts the body's tokens itself: no byte rule.
        skills
            .import(doc("local", &"a".repeat(20_000)).as_bytes(), None)
            .expect("import");
        assert!(state(&skills).offered);
        // Routed: 16 KiB of body under the default.
        skills
            .import(doc("openrouter", &"a".repeat(16_385)).as_bytes(), None)
            .expect("import");
        let s = state(&skills);
        assert!(
            s.reasons
                .iter()
                .any(|r| r.starts_with("body (16385 bytes) over its allowance (16384 tokens)")),
            "{s:?}"
        );
    }

    /// The advert's bounds are the program's: the peers crate holds its own copy (it does not
    /// depend on the box's crate), and this keeps them one number.
    #[test]
    fn the_adverts_token_bounds_are_the_programs() {
        assert_eq!(
            skillbox_peers::advert::MAX_BODY_MAX_TOKENS,
            MAX_BODY_MAX_TOKENS
        );
        assert_eq!(
            skillbox_peers::advert::MAX_MODEL_CONTEXT_TOKENS,
            MAX_MODEL_CONTEXT_TOKENS
        );
    }
}
