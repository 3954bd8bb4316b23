//! The source store (§5): named material (skill bodies, API keys, private data), encrypted at
//! rest with the data key.
//!
//! Content leaves this module one way only: [`Sources::apply`] streams it into a sink the caller
//! hands in (an HPKE seal for one box run). No function here or elsewhere in the crate returns
//! source bytes; listings and metadata carry name, kind, size, shareable and a keyed digest.
//!
//! A caller's stake goes through [`Sources::apply_for_stake`], which refuses — whatever a remote
//! advert or program names — every source its human did not mark **shareable**, every `secret`,
//! and every name under `skill/`, `agent/`, `call/` (the node's own material).

use std::borrow::Cow;
use std::io::Write;
use std::sync::Arc;

use crate::store::Tx;
use rusqlite::{OptionalExtension, params};
use serde::Serialize;

use crate::crypto::{self, DataKey};
use crate::error::{NodeError, Result};
use crate::store::{Store, now_secs};

/// Names under this prefix are skill bodies, written only by skill import.
pub const SKILL_PREFIX: &str = "skill/";
/// Sources under this prefix belong to calls (a caller's request, result key and answer) and
/// are written by the calls driver only.
pub const CALL_PREFIX: &str = "call/";
/// Sources under `agent/` hold the prompts of imported pack agents (written by pack import).
pub const AGENT_PREFIX: &str = "agent/";
/// Longest source name accepted.
pub const MAX_NAME_LEN: usize = skillbox_skill::document::MAX_SOURCE_NAME;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// UTF-8 text (a skill body, notes, a data set in a text format).
    Text,
    /// A credential (an API key): never shown, only applied.
    Secret,
    /// Arbitrary bytes.
    File,
}

impl SourceKind {
    /// Every kind: the one spelling of each is [`SourceKind::as_str`], parsing reads it back.
    const ALL: [SourceKind; 3] = [SourceKind::Text, SourceKind::Secret, SourceKind::File];

    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Text => "text",
            SourceKind::Secret => "secret",
            SourceKind::File => "file",
        }
    }
}

impl std::str::FromStr for SourceKind {
    type Err = NodeError;
    fn from_str(s: &str) -> Result<Self> {
        SourceKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                NodeError::invalid("kind", format!("{s:?} is not one of text, secret, file"))
            })
    }
}

/// What may be said about a source: never its content. Serialized (the API's answers, the
/// agent surfaces' tool results), its name is [`shown_name`]: a name an older node took from a
/// pasted provider key leaves the node masked, with its [`handle`](Sources::handle_of) to act on
/// it; in process, `name` is the stored name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SourceMeta {
    /// The source's name; for one that reads as a pasted provider key, [`shown_name`]'s label
    /// and its first four characters instead (`handle` then names it).
    #[serde(serialize_with = "serialize_shown")]
    pub name: String,
    pub kind: SourceKind,
    pub size: u64,
    pub digest: String,
    /// Its human marked it as user data a call may stake (opt-in; never a secret or a reserved
    /// name).
    pub shareable: bool,
    #[serde(rename = "createdAt")]
    pub created_at: i64,
    #[serde(rename = "updatedAt")]
    pub updated_at: i64,
    /// Only for a source whose name reads as a pasted provider key (listings): what `PATCH` and
    /// `DELETE /sources/{name}` take in place of that name ([`HANDLE_PREFIX`] and 32 hex digits).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
}

/// Serializes source names as [`shown_name`] shows each (a consent question's sources, read
/// at a terminal, on a dashboard and by an agent's client), for a field that keeps the stored
/// names in process.
pub fn serialize_shown_names<S: serde::Serializer>(
    names: &[String],
    to: S,
) -> std::result::Result<S::Ok, S::Error> {
    to.collect_seq(names.iter().map(|n| shown_name(n)))
}

fn serialize_shown<S: serde::Serializer>(
    name: &str,
    to: S,
) -> std::result::Result<S::Ok, S::Error> {
    to.serialize_str(&shown_name(name))
}

/// What a source name that reads as a provider's API key is refused with. Fixed: the "name" is
/// the user's key, and a refusal is shown, logged and kept by clients (the API's answer, the
/// CLI's output, the dashboard's page).
pub const KEY_IS_NOT_A_SOURCE_NAME: &str = "the source name looks like a provider's API key, not a name: nothing was stored; give the source a short name and the key as its content (`skillbox source add NAME --secret`, or `PUT /sources/NAME?kind=secret` with the key as the body), and revoke the key with its provider if the command line or address was seen or kept";

/// Whether [`check_name`]'s key test refuses `name`: a provider's API key pasted where a name
/// goes, outside the node's own prefixes (whose parts are ids). Every surface that shows or
/// takes a stored name asks this one test (the API's and the dashboard's unshare and remove, the
/// dashboard's label for such a name).
pub fn reads_as_a_pasted_key(name: &str) -> bool {
    !skillbox_skill::is_reserved_source_name(name)
        && skillbox_skill::looks_like_a_provider_key(name)
}

/// What every surface shows in place of a source name that [`reads_as_a_pasted_key`], before the
/// name's first [`KEY_HEAD_SHOWN`] characters.
pub const KEY_NAMED: &str = "a source stored under what looks like a provider API key";
/// Characters of such a name that are shown: enough to tell which provider's key it is (`sk-a`,
/// `AIza`), far too few to tell the key.
pub const KEY_HEAD_SHOWN: usize = 4;

/// A stored source name as every surface shows it (the API's listings, the ledger, the CLI, the
/// dashboard): the name itself, or, for one [`reads_as_a_pasted_key`] (an older node stored such
/// names; the node's own `skill/`, `agent/`, `call/` names are ids and shown as they are),
/// [`KEY_NAMED`] and its first [`KEY_HEAD_SHOWN`] characters — one form everywhere, so no
/// surface prints the key into a screen, a terminal's scrollback, a log or an agent's context.
/// Showing a shown name again changes nothing.
pub fn shown_name(name: &str) -> Cow<'_, str> {
    if reads_as_a_pasted_key(name) {
        let head: String = name.chars().take(KEY_HEAD_SHOWN).collect();
        format!("{KEY_NAMED} ({head}…)").into()
    } else {
        name.into()
    }
}

/// How a handle ([`Sources::handle_of`]) starts: `:` is in no source name, so a handle is never
/// taken for one.
pub const HANDLE_PREFIX: &str = "pasted-key:";
/// What a handle's keyed digest is taken over, before the name (apart from content digests).
const HANDLE_DOMAIN: &[u8] = b"skillbox-source-handle-v1\0";
/// Hex digits of a handle: 128 bits.
const HANDLE_HEX: usize = 32;

/// `line` as the ledger's views and exports show it: its source names as [`show_names_in`]
/// shows them and, when one was masked, the line marked redacted
/// ([`crate::ledger::Redaction::SourceNames`]) — its hash and signature were taken over the
/// stored names, so an offline check (`skillbox ledger verify --file`) then checks it by its
/// hash's place in the chain and the signature over it, and its text by the node's signature
/// as shown, which [`crate::ledger::shown`] (the one caller for a view or export) adds. `true`
/// when a name was masked.
pub(crate) fn redact_names_in(line: &mut crate::ledger::Line) -> bool {
    let masked = show_names_in(&mut line.entry);
    if masked {
        line.redacted = Some(crate::ledger::Redaction::SourceNames);
    }
    masked
}

/// The source names in `entry` (the sources a decision covered, the staked items' sources) as
/// [`shown_name`] shows them (a view of an entry; an export masks through [`redact_names_in`]).
/// `true` when a name was masked.
pub fn show_names_in(entry: &mut crate::ledger::Entry) -> bool {
    let mut masked = false;
    let names = entry
        .sources
        .iter_mut()
        .chain(entry.items.iter_mut().filter_map(|i| i.source.as_mut()));
    for name in names {
        if let Cow::Owned(shown) = shown_name(name) {
            *name = shown;
            masked = true;
        }
    }
    masked
}

/// Whether `name` is one an older node may have stored although [`check_name`] now refuses it
/// for the key test alone (valid under the name grammar, and [`reads_as_a_pasted_key`]).
pub fn is_a_stored_pasted_key_name(name: &str) -> bool {
    skillbox_skill::is_valid_source_name(name) && reads_as_a_pasted_key(name)
}

/// Check a source name with the project's one rule (the same one `key:` and `requiredSources`
/// are checked with): `/`-separated segments of `[A-Za-z0-9_.-]`, each starting with a letter,
/// digit or `_`, at most [`MAX_NAME_LEN`] bytes; and, outside the node's own prefixes, not a
/// provider's API key pasted where the name goes. A refused name may be that key, so no error
/// here repeats any of it: each says which rule failed, with a length or a byte position at most
/// (the skill crate's diagnosis, the one `requiredSources` gives). (The node's own names are exempt from the key test: a call's id is 32 hex digits.)
pub fn check_name(name: &str) -> Result<()> {
    let refused = |why: String| Err(NodeError::invalid("name", why));
    if reads_as_a_pasted_key(name) {
        return refused(KEY_IS_NOT_A_SOURCE_NAME.to_owned());
    }
    match skillbox_skill::document::source_name_problem(name) {
        Some(problem) => refused(problem),
        None => Ok(()),
    }
}

/// Whether the data key opens this store's check value. Writes the check value on first use.
pub(crate) fn verify_data_key(store: &Store, key: &DataKey) -> Result<bool> {
    store.write(|tx| {
        let row: Option<Vec<u8>> = tx
            .query_row(
                "SELECT value FROM meta WHERE key = 'data_key_check'",
                [],
                |r| r.get(0),
            )
            .optional()?;
        match row {
            Some(blob) if blob.len() > crypto::NONCE_LEN => {
                let (nonce, ct) = blob.split_at(crypto::NONCE_LEN);
                Ok(key
                    .open(crypto::KEY_CHECK_AAD, nonce, ct)
                    .as_deref()
                    .map(|v| v.as_slice())
                    == Some(crypto::KEY_CHECK_PLAINTEXT))
            }
            Some(_) => Ok(false),
            None => {
                let (nonce, ct) = key
                    .seal(crypto::KEY_CHECK_AAD, crypto::KEY_CHECK_PLAINTEXT)
                    .map_err(|e| NodeError::io("sealing the data key check", e))?;
                let mut blob = nonce.to_vec();
                blob.extend_from_slice(&ct);
                tx.execute(
                    "INSERT INTO meta (key, value) VALUES ('data_key_check', ?1)",
                    params![blob],
                )?;
                Ok(true)
            }
        }
    })
}

/// The source store. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Sources {
    store: Arc<Store>,
    key: Arc<DataKey>,
}

impl Sources {
    pub fn new(store: Arc<Store>, key: Arc<DataKey>) -> Sources {
        Sources { store, key }
    }

    /// Store (or replace) a source, not shareable. See [`Sources::put_with`].
    pub fn put(&self, name: &str, kind: SourceKind, content: &[u8]) -> Result<SourceMeta> {
        self.put_with(name, kind, content, false)
    }

    /// Store (or replace) a source, shareable or not (a replacement takes the new flag). Names
    /// under `skill/`, `agent/` and `call/` are refused: they are written by skill import and
    /// by calls, with their rows.
    pub fn put_with(
        &self,
        name: &str,
        kind: SourceKind,
        content: &[u8],
        shareable: bool,
    ) -> Result<SourceMeta> {
        check_name(name)?;
        for prefix in [SKILL_PREFIX, AGENT_PREFIX] {
            if name.starts_with(prefix) {
                return Err(NodeError::invalid(
                    "name",
                    format!(
                        "source names under {prefix:?} hold skill bodies and agent prompts and are written by POST /skills"
                    ),
                ));
            }
        }
        if name.starts_with(CALL_PREFIX) {
            return Err(NodeError::invalid(
                "name",
                format!(
                    "source names under {CALL_PREFIX:?} belong to calls and are written by POST /calls"
                ),
            ));
        }
        if content.is_empty() {
            return Err(NodeError::invalid("content", "a source cannot be empty"));
        }
        if shareable {
            check_shareable(name, kind)?;
        }
        self.store.write(|tx| {
            put_in(tx, &self.key, name, kind, content)?;
            set_shareable_in(tx, name, shareable)?;
            meta_in(tx, name)?.ok_or_else(|| NodeError::NotFound {
                kind: "source",
                name: name.to_owned(),
            })
        })
    }

    /// Mark a source shareable (or not) without touching its content. `Ok(None)`: no such
    /// source.
    pub fn set_shareable(&self, name: &str, shareable: bool) -> Result<Option<SourceMeta>> {
        self.store.write(|tx| {
            let Some(meta) = meta_in(tx, name)? else {
                return Ok(None);
            };
            if shareable {
                check_shareable(name, meta.kind)?;
            }
            set_shareable_in(tx, name, shareable)?;
            meta_in(tx, name)
        })
    }

    /// Whether a caller stake may carry this source (see [`stakeable`]).
    pub fn is_stakeable(meta: &SourceMeta) -> bool {
        stakeable(&meta.name, meta.kind, meta.shareable).is_ok()
    }

    /// The store these sources live in (the calls driver writes call rows and their sources in
    /// one transaction).
    pub(crate) fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub(crate) fn key(&self) -> &Arc<DataKey> {
        &self.key
    }

    pub fn list(&self) -> Result<Vec<SourceMeta>> {
        self.list_where("")
    }

    /// The sources a caller's stake may carry ([`Self::is_stakeable`]): those marked shareable,
    /// read by their own index. A call's start needs only these, and every source besides
    /// includes two per call in flight (`call/<id>/…`), which [`Self::list`] would read each
    /// time (issue 33).
    pub fn shareable(&self) -> Result<Vec<SourceMeta>> {
        let all = self.list_where("WHERE shareable = 1")?;
        Ok(all.into_iter().filter(Sources::is_stakeable).collect())
    }

    fn list_where(&self, filter: &str) -> Result<Vec<SourceMeta>> {
        self.store.read(|c| {
            let mut stmt = c.prepare(&listing(filter))?;
            let rows = stmt.query_map([], meta_from_row)?;
            let mut out = Vec::new();
            for r in rows {
                let mut meta = r??;
                if reads_as_a_pasted_key(&meta.name) {
                    meta.handle = Some(self.handle_of(&meta.name));
                }
                out.push(meta);
            }
            Ok(out)
        })
    }

    /// The handle of a source whose name reads as a pasted provider key: [`HANDLE_PREFIX`] and
    /// a digest of the name keyed by this node's data key, so a client that was shown only
    /// [`shown_name`] can still unshare or remove that source. Stable (an API client keeps no
    /// session), useless off this node: without the data key it confirms no guessed key, and
    /// with the API token one can remove the source anyway.
    pub fn handle_of(&self, name: &str) -> String {
        let digest = self.key.digest(&[HANDLE_DOMAIN, name.as_bytes()].concat());
        let hex = digest.rsplit(':').next().unwrap_or_default();
        format!("{HANDLE_PREFIX}{}", &hex[..HANDLE_HEX.min(hex.len())])
    }

    /// The stored name a [`Sources::handle_of`] handle stands for: one of the stored sources
    /// whose name reads as a pasted provider key (compared in constant time); `None` when none
    /// has it (removed since, or never given).
    pub fn named_by_handle(&self, handle: &str) -> Result<Option<String>> {
        Ok(self
            .list()?
            .into_iter()
            .find(|m| {
                is_a_stored_pasted_key_name(&m.name)
                    && m.handle.as_deref().is_some_and(|h| same(h, handle))
            })
            .map(|m| m.name))
    }

    pub fn meta(&self, name: &str) -> Result<Option<SourceMeta>> {
        self.store.read(|c| meta_in(c, name))
    }

    /// Remove a source; `false` when there was none.
    pub fn delete(&self, name: &str) -> Result<bool> {
        self.store
            .write(|tx| Ok(tx.execute("DELETE FROM sources WHERE name = ?1", params![name])? > 0))
    }

    pub fn count(&self) -> Result<u64> {
        self.store.read(|c| {
            Ok(c.query_row("SELECT count(*) FROM sources", [], |r| r.get::<_, i64>(0))? as u64)
        })
    }

    /// **Apply**: decrypt a source and stream it into `sink`, the only way content leaves the
    /// store. The plaintext lives in a zeroized buffer for the duration of the write. For the
    /// node's own use (the owner's body, model and key; a caller's request, result key and
    /// answer); a caller's data sources go through [`Sources::apply_for_stake`].
    pub fn apply(&self, name: &str, sink: &mut dyn Write) -> Result<u64> {
        self.apply_checked(name, sink, false)
    }

    /// **Apply for a caller stake**: like [`Sources::apply`], but only for a source its human
    /// marked shareable — never a secret, never a name under `skill/`, `agent/`, `call/` —
    /// checked on the stored row in the same read that fetches the ciphertext, so whatever a
    /// peer's advert or program names, nothing else leaves.
    pub fn apply_for_stake(&self, name: &str, sink: &mut dyn Write) -> Result<u64> {
        self.apply_checked(name, sink, true)
    }

    fn apply_checked(&self, name: &str, sink: &mut dyn Write, stake: bool) -> Result<u64> {
        if stake && skillbox_skill::is_reserved_source_name(name) {
            return Err(NodeError::NotStakeable {
                name: name.to_owned(),
                why: RESERVED,
            });
        }
        let sealed = self.store.read(|c| {
            c.query_row(
                "SELECT kind, nonce, ciphertext, shareable FROM sources WHERE name = ?1",
                params![name],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, Vec<u8>>(1)?,
                        r.get::<_, Vec<u8>>(2)?,
                        r.get::<_, i64>(3)? == 1,
                    ))
                },
            )
            .optional()
            .map_err(NodeError::from)
        })?;
        let Some((kind, nonce, ciphertext, shareable)) = sealed else {
            return Err(NodeError::NotFound {
                kind: "source",
                name: name.to_owned(),
            });
        };
        if stake {
            let k = kind.parse::<SourceKind>()?;
            stakeable(name, k, shareable)?;
        }
        let plaintext = self
            .key
            .open(&crypto::source_aad(&kind, name), &nonce, &ciphertext)
            .ok_or_else(|| NodeError::Decrypt(name.to_owned()))?;
        sink.write_all(&plaintext)
            .and_then(|_| sink.flush())
            .map_err(|source| NodeError::Sink {
                name: name.to_owned(),
                source,
            })?;
        Ok(plaintext.len() as u64)
    }
}

const RESERVED: &str = "its name is under a reserved prefix (skill/, agent/, call/)";

/// Whether two strings are equal, compared in constant time (a presented handle against ours).
fn same(ours: &str, presented: &str) -> bool {
    ours.len() == presented.len()
        && ours
            .bytes()
            .zip(presented.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The one rule of what a caller stake may carry: a source its human marked shareable, that is
/// not a secret and not under a reserved prefix.
pub fn stakeable(name: &str, kind: SourceKind, shareable: bool) -> Result<()> {
    let why = if skillbox_skill::is_reserved_source_name(name) {
        RESERVED
    } else if kind == SourceKind::Secret {
        "it is a secret"
    } else if !shareable {
        // Fixed words, no command: this reaches an agent's model too (a call it started),
        // and only the human may mark a source shareable. The CLI adds its command.
        "its human has not marked it shareable; only the node's human can"
    } else {
        return Ok(());
    };
    Err(NodeError::NotStakeable {
        name: name.to_owned(),
        why,
    })
}

/// Only user data may be marked shareable.
fn check_shareable(name: &str, kind: SourceKind) -> Result<()> {
    stakeable(name, kind, true).map_err(|e| match e {
        NodeError::NotStakeable { why, .. } => NodeError::invalid(
            "shareable",
            format!("source {:?} cannot be shareable: {why}", shown_name(name)),
        ),
        other => other,
    })
}

fn set_shareable_in(tx: &Tx<'_>, name: &str, shareable: bool) -> Result<()> {
    tx.execute(
        "UPDATE sources SET shareable = ?2 WHERE name = ?1",
        params![name, shareable as i64],
    )?;
    Ok(())
}

/// Encrypt and upsert a source inside a caller's transaction (so skill import can write the
/// body with the declaration atomically).
pub(crate) fn put_in(
    tx: &Tx<'_>,
    key: &DataKey,
    name: &str,
    kind: SourceKind,
    content: &[u8],
) -> Result<SourceMeta> {
    check_name(name)?;
    if kind == SourceKind::Text && std::str::from_utf8(content).is_err() {
        return Err(NodeError::invalid(
            "content",
            "a text source must be UTF-8 (use kind=file for bytes)",
        ));
    }
    let (nonce, ciphertext) = key
        .seal(&crypto::source_aad(kind.as_str(), name), content)
        .map_err(|e| NodeError::io(format!("sealing source {name:?}"), e))?;
    let digest = key.digest(content);
    let now = now_secs();
    tx.execute(
        "INSERT INTO sources (name, kind, size, digest, nonce, ciphertext, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)
         ON CONFLICT(name) DO UPDATE SET kind = excluded.kind, size = excluded.size,
             digest = excluded.digest, nonce = excluded.nonce, ciphertext = excluded.ciphertext,
             updated_at = excluded.updated_at",
        params![
            name,
            kind.as_str(),
            content.len() as i64,
            digest,
            nonce.to_vec(),
            ciphertext,
            now
        ],
    )?;
    meta_in(tx, name)?.ok_or_else(|| NodeError::NotFound {
        kind: "source",
        name: name.to_owned(),
    })
}

pub(crate) fn meta_in(c: &rusqlite::Connection, name: &str) -> Result<Option<SourceMeta>> {
    let row = c
        .query_row(
            "SELECT name, kind, size, digest, created_at, updated_at, shareable FROM sources WHERE name = ?1",
            params![name],
            meta_from_row,
        )
        .optional()?;
    row.transpose()
}

fn meta_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<SourceMeta>> {
    let name: String = r.get(0)?;
    let kind: String = r.get(1)?;
    let size: i64 = r.get(2)?;
    let kind = match kind.parse::<SourceKind>() {
        Ok(k) => k,
        Err(_) => {
            return Ok(Err(NodeError::StoredRow {
                what: "source",
                name,
                problem: format!("kind {kind:?}"),
            }));
        }
    };
    Ok(Ok(SourceMeta {
        name,
        kind,
        size: size.max(0) as u64,
        digest: r.get(3)?,
        created_at: r.get(4)?,
        updated_at: r.get(5)?,
        shareable: r.get::<_, i64>(6)? == 1,
        handle: None,
    }))
}

/// The listing's query: every source's metadata, by name, that `filter` (a `WHERE` clause or
/// nothing) keeps.
fn listing(filter: &str) -> String {
    format!(
        "SELECT name, kind, size, digest, created_at, updated_at, shareable FROM sources {filter} ORDER BY name"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources() -> Sources {
        let store = Arc::new(Store::open_in_memory().expect("store"));
        Sources::new(store, Arc::new(DataKey::from_bytes(&[9u8; 32])))
    }

    #[test]
    fn each_kind_parses_back_from_its_spelling_and_no_other() {
        for kind in SourceKind::ALL {
            assert_eq!(kind.as_str().parse::<SourceKind>().ok(), Some(kind));
            let json = serde_json::to_value(kind).expect("kind serializes");
            assert_eq!(
                json,
                serde_json::json!(kind.as_str()),
                "serde spells it alike"
            );
        }
        for bad in ["", "Text", "secrets", "bytes"] {
            let err = bad.parse::<SourceKind>().expect_err("not a kind");
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn put_list_apply_delete() {
        let s = sources();
        let meta = s
            .put("openrouter-key", SourceKind::Secret, b"sk-or-v1-abc")
            .expect("put");
        assert_eq!(meta.size, 12);
        assert_eq!(s.list().expect("list"), vec![meta.clone()]);
        let mut out = Vec::new();
        assert_eq!(s.apply("openrouter-key", &mut out).expect("apply"), 12);
        assert_eq!(out, b"sk-or-v1-abc");
        let meta2 = s
            .put("openrouter-key", SourceKind::Secret, b"sk-or-v1-xyz")
            .expect("replace");
        assert_ne!(meta.digest, meta2.digest);
        assert!(s.delete("openrouter-key").expect("delete"));
        assert!(!s.delete("openrouter-key").expect("delete again"));
        assert!(matches!(
            s.apply("openrouter-key", &mut out),
            Err(NodeError::NotFound { .. })
        ));
    }

    #[test]
    fn names_are_checked() {
        for bad in [
            "",
            "/a",
            "a/",
            "a//b",
            "a/../b",
            "a b",
            "ä",
            &"x".repeat(129),
            ".hidden",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["spotify_songs", "skill/x/body", "a.b-c_d", "A1"] {
            check_name(good).expect(good);
        }
        let s = sources();
        assert!(s.put("skill/x/body", SourceKind::Text, b"x").is_err());
        assert!(s.put("agent/x/prompt", SourceKind::Text, b"x").is_err());
        assert!(s.put("notes", SourceKind::Text, &[0xff, 0xfe]).is_err());
        assert!(s.put("empty", SourceKind::File, b"").is_err());
    }

    /// A provider's key pasted where a source's name goes (`source add sk-ant-… --secret`,
    /// `PUT /sources/<key>`, the dashboard's form) is refused with a fixed text holding no part
    /// of it, whether the key passes the name rule (it would have become a name, shown in
    /// listings and consent questions) or fails it (its refusal quoted it); nothing is stored.
    /// Other refusals say which rule failed, not the name; the node's own names stay names.
    #[test]
    fn a_pasted_key_is_no_source_name_and_no_refusal_repeats_a_name() {
        let s = sources();
        let too_long = format!("sk-ant-api03-{}", "Xy7".repeat(50));
        for key in [
            "sk-ant-api03-AbCdEf0123456789_xyz",
            "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
            "1fa036b5a9fa7baa4f1260e831e989a4",
            "sk-proj-Q3vT9xLm2+PASTED/kEy7wZr4Nd8Hs1Fb6=",
            &too_long,
        ] {
            for err in [
                check_name(key).expect_err(key).to_string(),
                s.put(key, SourceKind::Secret, b"content")
                    .expect_err(key)
                    .to_string(),
            ] {
                assert!(err.contains(KEY_IS_NOT_A_SOURCE_NAME), "{err}");
                skillbox_testkit::leak::assert_no_part_of("the refusal", &err, key);
            }
        }
        assert_eq!(
            s.list().expect("list"),
            vec![],
            "a refused name left a source"
        );
        for (bad, says) in [
            ("my key WORDSAFTER", "another character at byte 2"),
            (".hiddenWORDS", "starting with another character at byte 0"),
            ("notes//WORDSAFTER", "empty segment at byte 6"),
            (&"WORDSWORDS".repeat(13), "this one is 130"),
        ] {
            let err = check_name(bad).expect_err(bad).to_string();
            assert!(err.contains(says), "{bad:?}: {err}");
            skillbox_testkit::leak::assert_no_markers("the refusal", &err, &["WORDS"]);
        }
        for own in [
            "call/1fa036b5a9fa7baa4f1260e831e989a4/request",
            "skill/summarize2024longdocuments/body",
        ] {
            check_name(own).expect(own);
        }
    }

    use skillbox_testkit::old_node::PASTED_KEYS as STORED_KEYS;

    /// What every surface shows of a name: an ordinary one and the node's own (a call's id
    /// reads as a key) as they are; one that reads as a pasted key by the label and four
    /// characters, which shown again stay as they are.
    #[test]
    fn a_name_that_reads_as_a_key_is_shown_by_its_label() {
        let call = format!("call/{}/request", STORED_KEYS[1]);
        assert_eq!(shown_name("notes"), "notes");
        assert_eq!(shown_name(&call), call);
        for key in STORED_KEYS {
            let shown = shown_name(key);
            skillbox_testkit::leak::assert_no_part_of("a shown name", &shown, key);
            assert!(shown.starts_with(KEY_NAMED), "{shown}");
            assert_eq!(shown_name(&shown), shown, "shown twice");
        }
        assert_eq!(shown_name(STORED_KEYS[0]), format!("{KEY_NAMED} (sk-a…)"));
    }

    /// A source an older node stored under a pasted key is listed, serialized, with its name
    /// masked and a handle; the handle names that source on this node only, and no other
    /// string does.
    #[test]
    fn a_key_named_source_is_listed_masked_with_a_handle_that_names_it() {
        let s = held();
        for (i, key) in STORED_KEYS.iter().enumerate() {
            let old = format!("old-{i}");
            s.put_with(&old, SourceKind::Text, b"notes", true)
                .expect("put");
            s.store
                .write(|tx| {
                    Ok(tx.execute("UPDATE sources SET name = ?1 WHERE name = ?2", (key, &old))?)
                })
                .expect("rename the row");
        }
        let listed = s.list().expect("list");
        let json = serde_json::to_string(&listed).expect("json");
        for key in STORED_KEYS {
            skillbox_testkit::leak::assert_no_part_of("the listing", &json, key);
            let meta = listed.iter().find(|m| m.name == key).expect("listed");
            let handle = meta.handle.clone().expect("a handle");
            assert!(handle.starts_with(HANDLE_PREFIX), "{handle}");
            assert!(json.contains(&handle), "{json}");
            skillbox_testkit::leak::assert_no_part_of("the handle", &handle, key);
            assert_eq!(
                s.named_by_handle(&handle).expect("by handle"),
                Some(key.to_owned())
            );
            // Another node (another data key) gives the same name another handle.
            let other = Sources::new(s.store.clone(), Arc::new(DataKey::from_bytes(&[7u8; 32])));
            assert_ne!(other.handle_of(key), handle);
            assert_eq!(other.named_by_handle(&handle).expect("by handle"), None);
        }
        for m in listed.iter().filter(|m| !reads_as_a_pasted_key(&m.name)) {
            assert_eq!(m.handle, None, "{}", m.name);
            assert!(json.contains(&format!("\"name\":\"{}\"", m.name)), "{json}");
        }
        for not_one in [
            "pasted-key:",
            &format!("{HANDLE_PREFIX}{}", "0".repeat(32)),
            "notes",
        ] {
            assert_eq!(s.named_by_handle(not_one).expect("by handle"), None);
        }
    }

    /// `key` as the name of a shareable text source, as a node before the key test stored it:
    /// sealed under that name, so it opens.
    fn stored_under(s: &Sources, key: &str) {
        s.put_with("old", SourceKind::Text, b"notes", true)
            .expect("put");
        let (nonce, sealed) = s
            .key
            .seal(&crypto::source_aad("text", key), b"notes")
            .expect("seal");
        s.store
            .write(|tx| {
                Ok(tx.execute(
                    "UPDATE sources SET name = ?1, nonce = ?2, ciphertext = ?3 WHERE name = 'old'",
                    params![key, nonce.to_vec(), sealed],
                )?)
            })
            .expect("rename the row");
    }

    /// A writer that refuses every byte (a full disk, a closed pipe).
    struct Refusing;
    impl Write for Refusing {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("refused"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Issue keys2: every error naming a source (`not_found`, `not stakeable`, `decrypt`,
    /// `sink`, an unreadable row, a refusal to share) printed its name as stored, so a call
    /// staking a source an older node stored under a pasted key carried the key into its
    /// failure (the stake's read error), an API answer and the node's log (which logs an
    /// internal error's text, the answer's message). Each now prints the shown name.
    #[test]
    fn an_error_naming_a_key_named_source_prints_its_shown_name() {
        for key in STORED_KEYS {
            let s = sources();
            stored_under(&s, key);
            let raw = |sql: &str| {
                s.store
                    .write(|tx| Ok(tx.execute(sql, params![key])?))
                    .expect("edit the row")
            };
            let mut errors = vec![s.apply_for_stake(key, &mut Refusing).expect_err("sink")];
            assert!(matches!(errors[0], NodeError::Sink { .. }), "{}", errors[0]);
            assert_eq!(s.apply_for_stake(key, &mut Vec::new()).expect("opens"), 5);
            s.set_shareable(key, false).expect("unshare");
            errors.push(
                s.apply_for_stake(key, &mut Vec::new())
                    .expect_err("unshared"),
            );
            raw("UPDATE sources SET kind = 'secret' WHERE name = ?1");
            errors.push(s.set_shareable(key, true).expect_err("a secret"));
            raw(
                "UPDATE sources SET kind = 'text', shareable = 1, ciphertext = x'00' WHERE name = ?1",
            );
            errors.push(
                s.apply_for_stake(key, &mut Vec::new())
                    .expect_err("tampered"),
            );
            // The store's CHECK keeps a kind this node cannot read out; the error still masks.
            errors.push(NodeError::stored_row("source", key, "kind \"bogus\""));
            raw("DELETE FROM sources WHERE name = ?1");
            errors.push(
                s.apply_for_stake(key, &mut Vec::new())
                    .expect_err("removed"),
            );
            let kinds: Vec<&str> = errors
                .iter()
                .map(|e| match e {
                    NodeError::Sink { .. } => "sink",
                    NodeError::NotStakeable { .. } => "not_stakeable",
                    NodeError::Invalid { .. } => "invalid",
                    NodeError::Decrypt(_) => "decrypt",
                    NodeError::StoredRow { .. } => "stored_row",
                    NodeError::NotFound { .. } => "not_found",
                    _ => "other",
                })
                .collect();
            assert_eq!(
                kinds,
                [
                    "sink",
                    "not_stakeable",
                    "invalid",
                    "decrypt",
                    "stored_row",
                    "not_found"
                ]
            );
            for e in errors {
                let text = e.to_string();
                assert!(text.contains(KEY_NAMED), "{text}");
                skillbox_testkit::leak::assert_no_part_of("the error", &text, key);
                let answer = crate::api::error::ApiError::from(e);
                skillbox_testkit::leak::assert_no_part_of("the API answer", &answer.message, key);
            }
        }
        // A call refused for such a source (`start` finds it unshared) says so the same way.
        let refused = crate::calls::CallError::NotShareable {
            name: STORED_KEYS[0].to_owned(),
            why: "it is a secret",
        };
        skillbox_testkit::leak::assert_no_part_of(
            "the call's refusal",
            &refused.to_string(),
            STORED_KEYS[0],
        );
        // Another thing's name is printed as it is: a call's id reads as a key.
        let call = NodeError::NotFound {
            kind: "call",
            name: STORED_KEYS[1].to_owned(),
        };
        assert!(call.to_string().contains(STORED_KEYS[1]), "{call}");
    }

    proptest::proptest! {
        /// The one rule, for any name, kind and flag: stakeable means shareable user data.
        #[test]
        fn stakeable_is_exactly_shareable_user_data(
            name in "[a-z]{1,6}(/[a-z0-9_.-]{1,6}){0,3}",
            kind in proptest::sample::select(vec![SourceKind::Text, SourceKind::Secret, SourceKind::File]),
            shareable in proptest::bool::ANY,
        ) {
            let expected = shareable
                && kind != SourceKind::Secret
                && !skillbox_skill::is_reserved_source_name(&name);
            proptest::prop_assert_eq!(stakeable(&name, kind, shareable).is_ok(), expected);
        }
    }

    /// A key, unshared and shared user data (`diary`, `songs`: 5 bytes), a skill body and a
    /// call's request.
    fn held() -> Sources {
        let s = sources();
        s.put("openrouter-key", SourceKind::Secret, b"sk-secret")
            .expect("key");
        s.put("diary", SourceKind::Text, b"private").expect("diary");
        s.put_with("songs", SourceKind::Text, b"a,b,c", true)
            .expect("songs");
        s.store
            .write(|tx| {
                put_in(tx, &s.key, "skill/x/body", SourceKind::Text, b"BODY")?;
                put_in(tx, &s.key, "call/1/request", SourceKind::Text, b"REQ")?;
                Ok(())
            })
            .expect("node material");
        s
    }

    /// A call's start reads only what a stake may carry, by the partial index: not the call's
    /// own sources (two per call in flight), skill bodies, secrets or unshared data — even
    /// with their flags forged — and not by a scan of every row (issue 33).
    #[test]
    fn a_start_reads_the_shareable_sources_by_their_own_index() {
        let s = held();
        let names = |s: &Sources| -> Vec<String> {
            s.shareable()
                .expect("shareable")
                .into_iter()
                .map(|m| m.name)
                .collect()
        };
        assert_eq!(names(&s), ["songs"]);
        s.store
            .write(|tx| {
                tx.execute("UPDATE sources SET shareable = 1", [])?;
                Ok(())
            })
            .expect("forge flags");
        assert_eq!(names(&s), ["diary", "songs"]);
        let plan: Vec<String> = s
            .store
            .read(|c| {
                let mut stmt = c.prepare(&format!(
                    "EXPLAIN QUERY PLAN {}",
                    listing("WHERE shareable = 1")
                ))?;
                let rows = stmt.query_map([], |r| r.get::<_, String>(3))?;
                Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
            })
            .expect("plan");
        assert!(
            plan.iter().any(|d| d.contains("sources_shareable")),
            "{plan:?}"
        );
    }

    /// The refusal reaches an agent's model (a call it started names the source): it names no
    /// command an agent with a shell could run.
    #[test]
    fn a_refusal_to_stake_names_no_command() {
        let e = stakeable("diary", SourceKind::Text, false).expect_err("not shareable");
        let text = e.to_string();
        assert!(text.contains("only the node's human"), "{text}");
        assert!(
            !text.contains("skillbox") && !text.contains("share NAME"),
            "{text}"
        );
    }

    /// Issue 12: whatever a peer names, a caller stake carries only shareable user data.
    #[test]
    fn only_shareable_user_data_applies_for_a_stake() {
        let s = held();
        let mut out = Vec::new();
        assert_eq!(s.apply_for_stake("songs", &mut out).expect("songs"), 5);
        for refused in ["openrouter-key", "diary", "skill/x/body", "call/1/request"] {
            let mut sink = Vec::new();
            let err = s.apply_for_stake(refused, &mut sink).expect_err(refused);
            assert!(
                matches!(err, NodeError::NotStakeable { .. }),
                "{refused}: {err}"
            );
            assert!(sink.is_empty(), "{refused}: bytes reached the sink");
        }
        // A forged shareable flag on a secret or a reserved row still does not apply.
        s.store
            .write(|tx| {
                tx.execute("UPDATE sources SET shareable = 1", [])?;
                Ok(())
            })
            .expect("forge flags");
        for refused in ["openrouter-key", "skill/x/body", "call/1/request"] {
            assert!(
                s.apply_for_stake(refused, &mut Vec::new()).is_err(),
                "{refused}"
            );
        }
        // Marking: only user data; the flag shows in listings.
        assert!(s.put_with("k2", SourceKind::Secret, b"x", true).is_err());
        assert!(s.set_shareable("openrouter-key", true).is_err());
        assert!(s.set_shareable("missing", true).expect("no row").is_none());
        let diary = s.set_shareable("diary", true).expect("set").expect("row");
        assert!(diary.shareable);
        assert!(
            s.list()
                .expect("list")
                .iter()
                .any(|m| m.name == "diary" && m.shareable)
        );
        let diary = s
            .set_shareable("diary", false)
            .expect("unset")
            .expect("row");
        assert!(!diary.shareable);
        // A replacement takes the new flag.
        let songs = s.put("songs", SourceKind::Text, b"d").expect("replace");
        assert!(!songs.shareable);
    }

    #[test]
    fn tampered_row_fails_to_apply() {
        let s = sources();
        s.put("a", SourceKind::Text, b"hello").expect("put");
        s.store
            .write(|tx| {
                tx.execute("UPDATE sources SET name = 'b' WHERE name = 'a'", [])?;
                Ok(())
            })
            .expect("move row");
        let err = s
            .apply("b", &mut Vec::new())
            .expect_err("moved row must not open");
        assert!(matches!(err, NodeError::Decrypt(_)), "{err}");
    }

    #[test]
    fn key_check_detects_another_key() {
        let store = Arc::new(Store::open_in_memory().expect("store"));
        assert!(verify_data_key(&store, &DataKey::from_bytes(&[1u8; 32])).expect("first"));
        assert!(verify_data_key(&store, &DataKey::from_bytes(&[1u8; 32])).expect("same"));
        assert!(!verify_data_key(&store, &DataKey::from_bytes(&[2u8; 32])).expect("other"));
    }
}
