//! The disclosure ledger: an append-only record of every stake this node made into a box and of
//! every consent decision that allowed or refused one — who decided (a policy rule, the default,
//! the human), for which call, peer and skill, through which box (URL, platform, measurement,
//! hardware isolation or not) and which provider could see the plaintext.
//!
//! Names, size buckets and keyed digests only: never content. A digest is the source store's
//! keyed HMAC of the exact bytes sealed — the same digest `GET /sources` lists, so the human can
//! tell whether a source is still what left, and useless to anyone guessing a short secret from
//! an exported ledger.
//!
//! Each entry is hash-chained to the one before (`prev`) and signed with the node key; the store
//! also keeps the signed head (last sequence number and hash). So an edited entry (its hash),
//! a removed or reordered one (the chain), a forged one (the signature) and a cut tail (the head)
//! are each detected by [`verify`]. SQLite triggers refuse updates and deletes, and call
//! retention never touches this table.
//!
//! What the database alone cannot show is kept outside it: the ledger begins with a `genesis`
//! entry written when the store is created (an emptied ledger is not a new one), and the signed
//! head is also written, after every append, to `ledger.head` beside the store (atomically,
//! never moved back): a database rolled back to an older copy, or wiped, is behind that file.
//! The unsigned columns and the per-source index are only an index: views filter on the signed
//! entry itself, and [`verify_store`] checks the index against the entries. What it cannot stop:
//! someone holding the node key and write access to the data dir rewriting everything, file
//! included — the ledger is the human's record, not a witness against them (a head saved
//! elsewhere, `skillbox ledger head`, still pins everything up to it).
//!
//! The pure part (entry encoding, hashing, signing, verifying a sequence of lines) does no I/O;
//! [`append`], [`list`] and [`verify_store`] are the store's edge.

use crate::store::Tx;
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use rusqlite::{OptionalExtension, params};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{NodeError, Result};
use crate::store::Store;

const ENTRY_DOMAIN: &[u8] = b"skillbox-ledger-entry-v1\0";
const SIG_DOMAIN: &[u8] = b"skillbox-ledger-sig-v1\0";
const HEAD_DOMAIN: &[u8] = b"skillbox-ledger-head-v1\0";
/// A saved head that also pins what each redacted line up to it shows ([`Head::shown`]):
/// version 2, apart from version 1 so neither passes as the other (a `shown` list stripped off
/// or added fails the signature).
const HEAD_DOMAIN_V2: &[u8] = b"skillbox-ledger-head-v2\0";
/// What the node signs of a redacted line when it exports it ([`Line::shown_sig`]): apart from
/// the entry, signature and head domains, so no one of these signatures passes as another.
const SHOWN_DOMAIN: &[u8] = b"skillbox-ledger-shown-v1\0";
const HEAD_KEY: &str = "ledger_head";
/// The head kept outside the database, beside it in the (0700) data dir.
pub const HEAD_FILE: &str = "ledger.head";
/// `prev` of the first entry.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What an entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// The first entry of every ledger, written when the store was created: a ledger without
    /// it was emptied, not new.
    Genesis,
    /// A consent decision: allow (the stake may follow) or deny (nothing leaves).
    Decision,
    /// Material this node sealed to a box, written *before* the bytes are sent (write-ahead):
    /// the bytes may have left even if nothing follows it.
    Stake,
    /// The box answered that it holds the stake of entry `answers`.
    StakeTaken,
    /// The box answered the stake of entry `answers` with a refusal (`boxCode`). Its word only:
    /// the sealed bytes had been sent.
    StakeRefused,
}

impl EntryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Genesis => "genesis",
            EntryKind::Decision => "decision",
            EntryKind::Stake => "stake",
            EntryKind::StakeTaken => "stake_taken",
            EntryKind::StakeRefused => "stake_refused",
        }
    }
}

/// One staked item: what it was, which local source it came from, how big, which bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Item {
    /// `request` or `source` (caller); `body`, `model` or `key` (owner).
    pub stake: String,
    /// The local source's name, where the item is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The size bucket the item was padded to (powers of two from 1 KiB), not its size.
    pub size_bucket: u64,
    /// The source store's keyed digest of the exact bytes sealed.
    pub digest: String,
}

/// One ledger entry, as it is hashed (RFC 8785 canonical JSON of this struct).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Entry {
    /// 1, 2, 3, … with no gap.
    pub seq: u64,
    /// Unix milliseconds.
    pub at: u64,
    pub kind: EntryKind,
    pub call: String,
    /// This node's side of the call: `caller` or `owner`.
    pub role: String,
    pub peer: String,
    pub skill: String,
    #[serde(rename = "box", default, skip_serializing_if = "Option::is_none")]
    pub box_url: Option<String>,
    /// The box run the entry is about, once the call has one: a call whose box was lost moves
    /// to a new run, and each run is staked into at most once ([`stake_state`] is per run).
    /// Absent in entries written before it existed (and then hashed without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measurement: Option<String>,
    /// `false` for an `insecure-dev` box or one not verified yet.
    pub hardware_isolation: bool,
    /// The provider that could see the plaintext, and where.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_host: Option<String>,
    /// `allow` or `deny`.
    pub decision: String,
    /// `rule:N` (the N-th policy rule, from 1), `default`, where a human's or agent's answer
    /// came from — `human:cli` (`skillbox approve` at a terminal), `human:ui` (the dashboard),
    /// `human:api` (`POST /approvals` naming no surface), `agent:elicitation` (an MCP client) —
    /// each with `+remember` when it became a rule (`human`, `human+remember`: entries written
    /// before the surfaces were told apart), `admission` (an owner's stake: it follows admitting the call; the owner's consent rules
    /// decide the submit, recorded after it), or `unrecorded` (a call decided before this node
    /// kept a ledger).
    pub decided_by: String,
    /// The caller's sources the decision covered (names; none on the owner's side).
    #[serde(default)]
    pub sources: Vec<String>,
    /// What was sealed (stake entries only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<Item>,
    /// The stake entry this one answers (`stake_taken`, `stake_refused`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<u64>,
    /// The box's code: why it refused, or `already_staked` when a retry found the stake there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub box_code: Option<String>,
    /// The previous entry's hash ([`GENESIS`] for the first).
    pub prev: String,
}

impl Entry {
    /// An entry of `kind` naming only its call, side and peer (`seq` and `prev` are set by
    /// [`append`]); the caller fills in what else it records.
    pub fn naming(kind: EntryKind, call: &str, role: &str, peer: &str) -> Entry {
        Entry {
            seq: 0,
            at: 0,
            kind,
            call: call.to_owned(),
            role: role.to_owned(),
            peer: peer.to_owned(),
            skill: String::new(),
            box_url: None,
            run: None,
            platform: None,
            measurement: None,
            hardware_isolation: false,
            provider: None,
            provider_host: None,
            decision: String::new(),
            decided_by: String::new(),
            sources: vec![],
            items: vec![],
            answers: None,
            box_code: None,
            prev: String::new(),
        }
    }

    /// What the entry records, in words for its human: `staked request (≤1024 B), source songs
    /// (≤1024 B)`, `allowed by rule:1 for songs`. Names and buckets only, like the entry.
    pub fn summary(&self) -> String {
        match self.kind {
            EntryKind::Stake => {
                let items: Vec<String> = self
                    .items
                    .iter()
                    .map(|i| match &i.source {
                        Some(s) => format!("source {s} (≤{} B)", i.size_bucket),
                        None => format!("{} (≤{} B)", i.stake, i.size_bucket),
                    })
                    .collect();
                format!("staked {}", items.join(", "))
            }
            EntryKind::Genesis => "the ledger begins".to_owned(),
            EntryKind::StakeTaken => format!(
                "the box took the stake of entry {}",
                self.answers.unwrap_or(0)
            ),
            EntryKind::StakeRefused => format!(
                "the box refused the stake of entry {} ({}): its word, the bytes had been sent",
                self.answers.unwrap_or(0),
                self.box_code.as_deref().unwrap_or("no code")
            ),
            EntryKind::Decision => {
                let verb = if self.decision == "allow" {
                    "allowed"
                } else {
                    "refused"
                };
                let covered = if self.sources.is_empty() {
                    String::new()
                } else {
                    format!(" for {}", self.sources.join(", "))
                };
                format!("{verb} by {}{covered}", self.decided_by)
            }
        }
    }

    /// Through what: `box URL (platform, no hardware isolation)`, or `no box yet`.
    pub fn through(&self) -> String {
        match (&self.box_url, &self.platform) {
            (Some(b), Some(p)) if self.hardware_isolation => format!("box {b} ({p})"),
            (Some(b), Some(p)) => format!("box {b} ({p}, no hardware isolation)"),
            (Some(b), None) => format!("box {b}"),
            _ if self.kind == EntryKind::Genesis => format!("node {}", self.peer),
            _ => "no box yet".to_owned(),
        }
    }
}

/// An entry with its hash and the node's signature: one line of the export.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Line {
    #[serde(flatten)]
    pub entry: Entry,
    /// Hex SHA-256 over the domain and the canonical entry.
    pub hash: String,
    /// Hex Ed25519 signature of the node key over the domain and the hash.
    pub sig: String,
    /// Set when the entry is shown with part of what it says masked ([`Redaction`]): its text
    /// then no longer hashes to `hash`, and [`verify`] checks the line by `hash`'s place in the
    /// chain and the signature over it, and its shown text by [`Line::shown_sig`]. Absent from
    /// every line shown as stored, so an export without redactions reads as it always did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redacted: Option<Redaction>,
    /// On a redacted line: hex Ed25519 signature of the node key, made when the node masked the
    /// line for a view or export ([`shown`]), over the line's hash, the redaction and the
    /// canonical entry as shown (its `seq` and `prev` with it), under its own domain. It is what
    /// vouches for the shown text: an edit of it, a line someone else marked redacted, or a
    /// redacted line moved to another place fails [`verify`] (`bad_redaction`).
    #[serde(rename = "shownSig", default, skip_serializing_if = "Option::is_none")]
    pub shown_sig: Option<String>,
}

/// What a redacted line ([`Line::redacted`]) masks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Redaction {
    /// A source name that reads as a pasted provider key, shown as `sources::shown_name`
    /// shows it (an older node stored such names): the key never leaves in an export.
    SourceNames,
}

impl Redaction {
    pub fn as_str(self) -> &'static str {
        match self {
            Redaction::SourceNames => "source_names",
        }
    }
}

/// The signed head: how long the ledger is and how it ends.
///
/// Version 1 (the database's head, `ledger.head`, and heads saved before review 25) pins each
/// entry up to `seq` through the chain of hashes. That pins what a line *says* only where the
/// line's text hashes to its hash: a redacted line's text does not, and was vouched for only by
/// the node key's signature as shown — which whoever holds the key can make for any text
/// (review 25 R1). Version 2, the head `skillbox ledger head` saves, also carries `shown`: what
/// each line up to `seq` that the node showed redacted showed then, so a later holder of the
/// key can neither change such a line's text nor mark another line redacted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Head {
    pub seq: u64,
    pub hash: String,
    pub sig: String,
    /// Version 2: every line up to `seq` that the node showed redacted when the head was saved,
    /// in order, each with the SHA-256 of what the node signed as shown ([`Line::shown_sig`]:
    /// its hash, redaction and shown text with `seq` and `prev`). Absent in version 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shown: Option<Vec<Pinned>>,
}

impl Head {
    /// 2 when the head pins what redacted lines show ([`Head::shown`]), else 1.
    pub fn version(&self) -> u8 {
        if self.shown.is_some() { 2 } else { 1 }
    }
}

/// One redacted line a version 2 head pins ([`Head::shown`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Pinned {
    pub seq: u64,
    /// Hex SHA-256 of the message the node signs for the line as shown.
    pub sha256: String,
}

/// Why a ledger does not verify, at which entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Broken {
    /// The stored text is not an entry.
    Unreadable,
    /// Sequence numbers skip or repeat: an entry was removed or inserted.
    SequenceGap,
    /// The entry's content does not hash to its recorded hash: it was edited.
    HashMismatch,
    /// `prev` is not the previous entry's hash: entries were removed, reordered or replaced.
    BrokenChain,
    /// The signature is not the node key's over this hash.
    BadSignature,
    /// A redacted line's shown text is not what the node key signed when the node masked it
    /// ([`Line::shown_sig`]): edited since, marked redacted by someone else, or moved.
    BadRedaction,
    /// The ledger ends before (or differs from) its signed head: the tail was cut.
    Truncated,
    /// The head itself is not signed by the node key.
    BadHead,
    /// No entry at all, not even the genesis every ledger begins with: it was emptied.
    NoGenesis,
    /// The database holds fewer entries than the head kept outside it (`ledger.head`, or a head
    /// saved elsewhere): it was rolled back to an older copy, cut or wiped.
    RolledBack,
    /// The entry at the outside head's sequence is not the one it names, or a line up to a
    /// saved head (version 2) reads redacted other than it did when the head was saved (another
    /// text, or redacted where it was not): rewritten since.
    Rewritten,
    /// Everything else verifies, but a line up to a saved head of version 1 is redacted: that
    /// head pins only the line's hash, not what it shows, which only the node key vouches for.
    /// Save a head again (version 2) to pin it.
    UnpinnedRedaction,
    /// The head kept outside the database is gone while the ledger has entries.
    HeadFileMissing,
    /// An unsigned column (`at`, `call_id`, `role`, `peer`, `kind`) or the per-source index
    /// does not say what the signed entry says: the database was edited under the ledger.
    IndexMismatch,
}

impl Broken {
    pub fn as_str(self) -> &'static str {
        match self {
            Broken::Unreadable => "unreadable",
            Broken::SequenceGap => "sequence_gap",
            Broken::HashMismatch => "hash_mismatch",
            Broken::BrokenChain => "broken_chain",
            Broken::BadSignature => "bad_signature",
            Broken::BadRedaction => "bad_redaction",
            Broken::Truncated => "truncated",
            Broken::BadHead => "bad_head",
            Broken::NoGenesis => "no_genesis",
            Broken::RolledBack => "rolled_back",
            Broken::Rewritten => "rewritten",
            Broken::UnpinnedRedaction => "unpinned_redaction",
            Broken::HeadFileMissing => "head_file_missing",
            Broken::IndexMismatch => "index_mismatch",
        }
    }
}

/// The outcome of [`verify`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    pub ok: bool,
    pub entries: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// The first entry that fails, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broken_at: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Broken>,
    /// The entries read as redacted lines ([`Line::redacted`]), by sequence number: each is
    /// checked by its hash's place in the chain and the signature over it, and what it shows by
    /// the node's signature over the shown text ([`Line::shown_sig`]) — the masked names
    /// themselves are not in the export to check. Empty for the node's own check.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redacted: Vec<u64>,
    /// The signed head the ledger ends at (the node's own check): version 1 from
    /// [`verify_store`]; version 2 from [`verify_store_to_save`] (`GET /ledger/verify`), what
    /// `skillbox ledger head` saves, so a later check can show nothing before it was rewritten,
    /// redacted lines' text included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_head: Option<Head>,
}

impl Verdict {
    /// A ledger that does not verify: the first entry that fails (`at`), why, and how many
    /// entries were read before it.
    fn broken(at: u64, reason: Broken, entries: u64) -> Verdict {
        Verdict {
            ok: false,
            entries,
            head: None,
            broken_at: Some(at),
            reason: Some(reason),
            redacted: Vec::new(),
            signed_head: None,
        }
    }
}

// ---- the pure part

/// The hash of an entry (hex).
pub fn hash_entry(entry: &Entry) -> Result<String> {
    let canonical = skillbox_jc::jcs::to_canonical(entry)
        .map_err(|e| NodeError::invalid("ledger", e.to_string()))?;
    let mut h = Sha256::new();
    h.update(ENTRY_DOMAIN);
    h.update(&canonical);
    Ok(hex::encode(h.finalize()))
}

fn sig_message(domain: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut m = domain.to_vec();
    for p in parts {
        m.extend_from_slice(&(p.len() as u64).to_be_bytes());
        m.extend_from_slice(p);
    }
    m
}

/// Seal `entry` (its `seq` and `prev` already set): hash and sign it.
pub fn seal(entry: Entry, key: &SigningKey) -> Result<Line> {
    let hash = hash_entry(&entry)?;
    let sig = key.sign(&sig_message(SIG_DOMAIN, &[hash.as_bytes()]));
    Ok(Line {
        entry,
        hash,
        sig: hex::encode(sig.to_bytes()),
        redacted: None,
        shown_sig: None,
    })
}

/// What [`Line::shown_sig`] signs: the line's hash, the redaction, and the canonical entry as
/// shown (masked), under [`SHOWN_DOMAIN`].
fn shown_message(line: &Line, redaction: Redaction) -> Result<Vec<u8>> {
    let shown = skillbox_jc::jcs::to_canonical(&line.entry)
        .map_err(|e| NodeError::invalid("ledger", e.to_string()))?;
    Ok(sig_message(
        SHOWN_DOMAIN,
        &[line.hash.as_bytes(), redaction.as_str().as_bytes(), &shown],
    ))
}

/// `line` as every view and export of `GET /ledger` shows it: its source names as
/// `sources::shown_name` shows them and, when one was masked, the line marked redacted and its
/// shown text signed with the node key ([`Line::shown_sig`]) — so whoever holds an export can
/// tell the node's redaction from an edit, without the masked name. A line with nothing to
/// mask is left as stored.
///
/// The node vouches only for what it checked: a line whose stored text does not hash to its
/// `hash` (the database edited under the ledger, review 25 R2) is still masked — the name may
/// be a real key — but not signed, so an export of it reads `bad_redaction` at that line
/// offline, as the node's own check reads `hash_mismatch`, instead of carrying the edit under
/// the node's signature.
pub fn shown(line: &mut Line, key: &SigningKey) -> Result<()> {
    let needs_masking = source_names(&line.entry)
        .into_iter()
        .any(crate::sources::reads_as_a_pasted_key);
    if !needs_masking {
        return Ok(());
    }
    let intact = hash_entry(&line.entry).is_ok_and(|h| h == line.hash);
    if !crate::sources::redact_names_in(line) {
        return Ok(());
    }
    if !intact {
        tracing::warn!(
            seq = line.entry.seq,
            "a ledger entry does not hash to its hash (hash_mismatch): shown masked and not signed (see `skillbox ledger verify`)"
        );
        return Ok(());
    }
    let redaction = line.redacted.unwrap_or(Redaction::SourceNames);
    let sig = key.sign(&shown_message(line, redaction)?);
    line.shown_sig = Some(hex::encode(sig.to_bytes()));
    Ok(())
}

/// What a head's signature covers: its sequence number and hash, under the head domain.
fn head_message(seq: u64, hash: &str) -> Vec<u8> {
    sig_message(HEAD_DOMAIN, &[&seq.to_be_bytes(), hash.as_bytes()])
}

fn sign_head(seq: u64, hash: &str, key: &SigningKey) -> Head {
    let sig = key.sign(&head_message(seq, hash));
    Head {
        seq,
        hash: hash.to_owned(),
        sig: hex::encode(sig.to_bytes()),
        shown: None,
    }
}

/// What a version 2 head's signature covers: its sequence number, hash and pinned lines
/// (RFC 8785), under its own domain.
fn head_message_v2(seq: u64, hash: &str, pinned: &[Pinned]) -> Result<Vec<u8>> {
    let pinned = skillbox_jc::jcs::to_canonical(&pinned)
        .map_err(|e| NodeError::invalid("ledger", e.to_string()))?;
    Ok(sig_message(
        HEAD_DOMAIN_V2,
        &[&seq.to_be_bytes(), hash.as_bytes(), &pinned],
    ))
}

/// The SHA-256 (hex) of what the node signs of a redacted line as shown: what a version 2 head
/// pins of it.
fn shown_digest(line: &Line, redaction: Redaction) -> Result<String> {
    Ok(hex::encode(Sha256::digest(shown_message(line, redaction)?)))
}

/// The head to save off the machine (`skillbox ledger head`): `head` (the database's, checked)
/// as version 2, pinning what each of `lines` up to it shows redacted. `lines` are the ledger
/// as [`shown`] shows it, from the first entry: a redacted line up to the head that the node
/// did not sign as shown (its stored text does not hash to its hash) is refused — no head
/// vouches for text the node could not check.
pub fn saved_head(lines: &[Line], head: &Head, key: &SigningKey) -> Result<Head> {
    let mut pinned = Vec::new();
    for line in lines.iter().take_while(|l| l.entry.seq <= head.seq) {
        let Some(redaction) = line.redacted else {
            continue;
        };
        if line.shown_sig.is_none() {
            return Err(NodeError::invalid(
                "ledger",
                format!(
                    "entry {} does not hash to its hash (hash_mismatch): no head saved (see `skillbox ledger verify`)",
                    line.entry.seq
                ),
            ));
        }
        pinned.push(Pinned {
            seq: line.entry.seq,
            sha256: shown_digest(line, redaction)?,
        });
    }
    let sig = key.sign(&head_message_v2(head.seq, &head.hash, &pinned)?);
    Ok(Head {
        seq: head.seq,
        hash: head.hash.clone(),
        sig: hex::encode(sig.to_bytes()),
        shown: Some(pinned),
    })
}

fn signature_ok(key: &VerifyingKey, message: &[u8], sig_hex: &str) -> bool {
    let Ok(bytes) = hex::decode(sig_hex) else {
        return false;
    };
    let Ok(arr) = <[u8; 64]>::try_from(bytes.as_slice()) else {
        return false;
    };
    key.verify(message, &Signature::from_bytes(&arr)).is_ok()
}

/// Whether a redacted line carries `key`'s signature over what it shows ([`Line::shown_sig`]).
fn shown_signed(line: &Line, redaction: Redaction, key: &VerifyingKey) -> bool {
    match (&line.shown_sig, shown_message(line, redaction)) {
        (Some(sig), Ok(message)) => signature_ok(key, &message, sig),
        _ => false,
    }
}

/// Whether `head` carries `key`'s signature over what it says (the anchor and the database's
/// head are checked alike).
fn head_signed(head: &Head, key: &VerifyingKey) -> bool {
    match &head.shown {
        None => signature_ok(key, &head_message(head.seq, &head.hash), &head.sig),
        Some(pinned) => head_message_v2(head.seq, &head.hash, pinned)
            .is_ok_and(|m| signature_ok(key, &m, &head.sig)),
    }
}

/// Whether a redacted line at or before a saved head of version 2 shows what it showed when
/// the head was saved: the head pins its place and the digest of its text as shown.
fn pinned_as_shown(line: &Line, redaction: Redaction, pinned: &[Pinned]) -> bool {
    let Ok(i) = pinned.binary_search_by_key(&line.entry.seq, |p| p.seq) else {
        return false;
    };
    shown_digest(line, redaction).is_ok_and(|d| d == pinned[i].sha256)
}

/// Check a whole ledger in order: sequence, hashes, chain, signatures, and (when given) that it
/// ends at its signed head. Lines that did not parse are passed as `None`. A redacted line
/// ([`Line::redacted`]) is checked by its given hash: it must follow the previous entry's hash
/// (its `prev`), carry the node key's signature over that hash, and the next entry's `prev`
/// must be that hash; its text is not hashed but must carry the node key's signature as shown
/// ([`Line::shown_sig`], else `bad_redaction`), and its sequence number is listed in the
/// verdict's `redacted`.
pub fn verify(
    lines: impl IntoIterator<Item = Option<Line>>,
    key: &VerifyingKey,
    head: Option<&Head>,
) -> Verdict {
    verify_anchored(lines, key, head, None)
}

/// [`verify`], and (when given) that the ledger extends `anchor`: a signed head kept outside
/// the database (`ledger.head`) or saved elsewhere. The ledger may have grown since; it may not
/// be shorter (`rolled_back`) nor differ at the anchor (`rewritten`). A redacted line up to the
/// anchor must show what the anchor pins of it (version 2: else `rewritten` at that line), as
/// the node key's signature as shown is no witness against whoever holds the key; against a
/// version 1 anchor, which pins no shown text, such a line is `unpinned_redaction`, named once
/// every other check passed.
pub fn verify_anchored(
    lines: impl IntoIterator<Item = Option<Line>>,
    key: &VerifyingKey,
    head: Option<&Head>,
    anchor: Option<&Head>,
) -> Verdict {
    let broken = Verdict::broken;
    // Lines are checked against the anchor's pins only under an anchor the node signed (one
    // that is not is `bad_head`, below, whatever the lines say).
    let pins = anchor.filter(|a| head_signed(a, key));
    let mut unpinned: Option<u64> = None;
    let mut at_anchor: Option<String> = None;
    let mut prev = GENESIS.to_owned();
    let mut n = 0u64;
    let mut redacted = Vec::new();
    for line in lines {
        let expected = n + 1;
        let Some(line) = line else {
            return broken(expected, Broken::Unreadable, n);
        };
        if line.entry.seq != expected {
            return broken(expected, Broken::SequenceGap, n);
        }
        // A redacted line's text was masked after it was hashed: only its hash is checked,
        // by the chain and the signature below. Every other line's text must hash to it.
        if line.redacted.is_some() {
            redacted.push(expected);
        } else {
            match hash_entry(&line.entry) {
                Ok(h) if h == line.hash => {}
                _ => return broken(expected, Broken::HashMismatch, n),
            }
        }
        if line.entry.prev != prev {
            return broken(expected, Broken::BrokenChain, n);
        }
        if !signature_ok(
            key,
            &sig_message(SIG_DOMAIN, &[line.hash.as_bytes()]),
            &line.sig,
        ) {
            return broken(expected, Broken::BadSignature, n);
        }
        // What a redacted line shows is vouched for by the node's signature as shown, made
        // when it masked the line: without it anyone could edit the text and mark it redacted.
        if let Some(redaction) = line.redacted
            && !shown_signed(&line, redaction, key)
        {
            return broken(expected, Broken::BadRedaction, n);
        }
        if let (Some(redaction), Some(a)) = (line.redacted, pins)
            && expected <= a.seq
        {
            match &a.shown {
                Some(pinned) if !pinned_as_shown(&line, redaction, pinned) => {
                    return broken(expected, Broken::Rewritten, n);
                }
                Some(_) => {}
                None => {
                    unpinned.get_or_insert(expected);
                }
            }
        }
        if anchor.is_some_and(|a| a.seq == expected) {
            at_anchor = Some(line.hash.clone());
        }
        prev = line.hash;
        n = expected;
    }
    if n == 0 {
        return broken(1, Broken::NoGenesis, 0);
    }
    if let Some(a) = anchor {
        if !head_signed(a, key) {
            return broken(a.seq, Broken::BadHead, n);
        }
        if n < a.seq {
            return broken(n + 1, Broken::RolledBack, n);
        }
        if at_anchor.as_deref() != Some(a.hash.as_str()) {
            return broken(a.seq, Broken::Rewritten, n);
        }
    }
    if let Some(h) = head {
        if !head_signed(h, key) {
            return broken(h.seq, Broken::BadHead, n);
        }
        if h.seq != n || h.hash != prev {
            return broken(n + 1, Broken::Truncated, n);
        }
    }
    if let Some(at) = unpinned {
        return broken(at, Broken::UnpinnedRedaction, n);
    }
    Verdict {
        ok: true,
        entries: n,
        head: (n > 0).then_some(prev),
        broken_at: None,
        reason: None,
        redacted,
        signed_head: None,
    }
}

/// The lines as CSV (one row per entry; items as `stake:source:bucket:digest` joined by `;`).
/// A cell a spreadsheet would run as a formula is prefixed with `'`.
pub fn to_csv(lines: &[Line]) -> Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let bad = |e: csv::Error| NodeError::invalid("ledger", format!("writing CSV: {e}"));
    w.write_record([
        "seq",
        "at",
        "kind",
        "call",
        "role",
        "peer",
        "skill",
        "box",
        "platform",
        "measurement",
        "hardware_isolation",
        "provider",
        "provider_host",
        "decision",
        "decided_by",
        "sources",
        "items",
        "hash",
    ])
    .map_err(bad)?;
    for l in lines {
        let e = &l.entry;
        let items = e
            .items
            .iter()
            .map(|i| {
                format!(
                    "{}:{}:{}:{}",
                    i.stake,
                    i.source.as_deref().unwrap_or(""),
                    i.size_bucket,
                    i.digest
                )
            })
            .collect::<Vec<_>>()
            .join(";");
        let row = [
            e.seq.to_string(),
            e.at.to_string(),
            e.kind.as_str().to_owned(),
            e.call.clone(),
            e.role.clone(),
            e.peer.clone(),
            e.skill.clone(),
            e.box_url.clone().unwrap_or_default(),
            e.platform.clone().unwrap_or_default(),
            e.measurement.clone().unwrap_or_default(),
            e.hardware_isolation.to_string(),
            e.provider.clone().unwrap_or_default(),
            e.provider_host.clone().unwrap_or_default(),
            e.decision.clone(),
            e.decided_by.clone(),
            e.sources.join(";"),
            items,
            l.hash.clone(),
        ];
        w.write_record(row.iter().map(|c| no_formula(c)))
            .map_err(bad)?;
    }
    let bytes = w
        .into_inner()
        .map_err(|e| NodeError::invalid("ledger", format!("writing CSV: {e}")))?;
    String::from_utf8(bytes).map_err(|e| NodeError::invalid("ledger", e.to_string()))
}

fn no_formula(cell: &str) -> String {
    if cell.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{cell}")
    } else {
        cell.to_owned()
    }
}

/// The lines as JSON Lines (the export [`verify`] reads back).
pub fn to_jsonl(lines: &[Line]) -> Result<String> {
    let mut out = String::new();
    for l in lines {
        out.push_str(
            &serde_json::to_string(l).map_err(|e| NodeError::invalid("ledger", e.to_string()))?,
        );
        out.push('\n');
    }
    Ok(out)
}

/// Read a JSON Lines export back (a line that is not an entry is `None`, for [`verify`]).
pub fn parse_jsonl(text: &str) -> Vec<Option<Line>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// `since` as the API and CLI take it: unix milliseconds, or a span back from `now_ms`
/// (`30m`, `24h`, `7d`).
pub fn parse_since(text: &str, now_ms: u64) -> std::result::Result<u64, String> {
    let t = text.trim();
    if let Ok(ms) = t.parse::<u64>() {
        return Ok(ms);
    }
    let unit = t
        .chars()
        .last()
        .ok_or_else(|| "empty (give unix milliseconds or a span such as 24h)".to_owned())?;
    let per: u64 = match unit {
        's' => 1_000,
        'm' => 60_000,
        'h' => 3_600_000,
        'd' => 86_400_000,
        _ => {
            return Err(format!(
                "{t:?} is neither unix milliseconds nor a span such as 30m, 24h or 7d"
            ));
        }
    };
    let n: u64 = t[..t.len() - unit.len_utf8()]
        .parse()
        .map_err(|_| format!("{t:?}: the span must be a whole number then s, m, h or d"))?;
    Ok(now_ms.saturating_sub(n.saturating_mul(per)))
}

/// Verify an exported JSON Lines ledger under a node key given in hex (`skillbox ledger verify
/// --file`). Without the node's signed head, a cut tail of an export cannot be told from a
/// shorter ledger: the node's own check ([`verify_store`]) has it.
pub fn verify_export(text: &str, key_hex: &str) -> std::result::Result<Verdict, String> {
    verify_export_anchored(text, key_hex, None)
}

/// [`verify_export`], and that the export extends a signed head saved earlier
/// (`skillbox ledger head`, or the node's `ledger.head`): none of it was rewritten or cut since.
pub fn verify_export_anchored(
    text: &str,
    key_hex: &str,
    anchor: Option<&Head>,
) -> std::result::Result<Verdict, String> {
    let key = parse_key(key_hex)?;
    Ok(verify_anchored(parse_jsonl(text), &key, None, anchor))
}

/// A node key given in hex.
pub fn parse_key(key_hex: &str) -> std::result::Result<VerifyingKey, String> {
    let bytes = hex::decode(key_hex.trim())
        .map_err(|_| "the node key is not hex (see `skillbox peers` or GET /ledger's nodeKey)")?;
    let arr = <[u8; 32]>::try_from(bytes.as_slice())
        .map_err(|_| "the node key must be 32 bytes (64 hex digits)")?;
    Ok(VerifyingKey::from_bytes(&arr).map_err(|_| "the node key is not an Ed25519 key")?)
}

/// A saved head: the JSON `skillbox ledger head` prints (and `ledger.head` holds).
pub fn parse_head(text: &str) -> std::result::Result<Head, String> {
    serde_json::from_str(text.trim())
        .map_err(|_| "not a saved ledger head (the JSON `skillbox ledger head` prints)".to_owned())
}

// ---- the store's edge

/// The names an entry is listed under by `source`: the decision's sources and the staked items'.
fn source_names(e: &Entry) -> Vec<&str> {
    let mut names: Vec<&str> = e.sources.iter().map(String::as_str).collect();
    names.extend(e.items.iter().filter_map(|i| i.source.as_deref()));
    names.sort_unstable();
    names.dedup();
    names
}

/// Append `entry` (its `seq` and `prev` are set here) inside the caller's transaction, and move
/// the signed head: the entry lands with the call transition it records, or not at all. The
/// head outside the database follows with [`publish_head`] once the transaction committed.
pub fn append(tx: &Tx<'_>, key: &SigningKey, mut entry: Entry) -> Result<Line> {
    let last: Option<(i64, String)> = tx
        .query_row(
            "SELECT seq, hash FROM ledger ORDER BY seq DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let (seq, prev) = match last {
        Some((s, h)) => (s as u64 + 1, h),
        None => (1, GENESIS.to_owned()),
    };
    entry.seq = seq;
    entry.prev = prev;
    let line = seal(entry, key)?;
    let text = serde_json::to_string(&line.entry)
        .map_err(|e| NodeError::invalid("ledger", e.to_string()))?;
    tx.execute(
        "INSERT INTO ledger (seq, at, call_id, role, peer, kind, entry, hash, sig)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![
            seq as i64,
            line.entry.at as i64,
            line.entry.call,
            line.entry.role,
            line.entry.peer,
            line.entry.kind.as_str(),
            text,
            line.hash,
            line.sig
        ],
    )?;
    for name in source_names(&line.entry) {
        tx.execute(
            "INSERT INTO ledger_sources (name, seq) VALUES (?1, ?2)",
            params![name, seq as i64],
        )?;
    }
    let key = key.clone();
    tx.at_commit("ledger head", move |tx| sign_last_entry(tx, &key));
    Ok(line)
}

/// Sign the last entry as the head, in the transaction that appended it, just before it
/// commits: once per commit, however many entries the commit holds (issue 33: a signature per
/// entry was half the cost of an append). The head still lands with the entries it names, or
/// not at all.
fn sign_last_entry(tx: &Tx<'_>, key: &SigningKey) -> Result<()> {
    let Some((seq, hash)) = tx
        .query_row(
            "SELECT seq, hash FROM ledger ORDER BY seq DESC LIMIT 1",
            [],
            |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)),
        )
        .optional()?
    else {
        return Ok(());
    };
    let head = sign_head(seq as u64, &hash, key);
    let head_text =
        serde_json::to_vec(&head).map_err(|e| NodeError::invalid("ledger", e.to_string()))?;
    tx.execute(
        "INSERT INTO meta (key, value) VALUES (?1, ?2)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        params![HEAD_KEY, head_text],
    )?;
    Ok(())
}

/// Append `entry` in a transaction of its own and publish the head outside the database: when
/// this returns, the entry is on disk in both places (what a stake written ahead needs).
pub fn append_now(store: &Store, key: &SigningKey, entry: Entry) -> Result<Line> {
    let line = store.write(|tx| append(tx, key, entry))?;
    publish_head_through(store, line.entry.seq)?;
    Ok(line)
}

/// Where the head outside the database lives: beside the store file (none for an in-memory
/// store).
pub fn head_file(store: &Store) -> Option<std::path::PathBuf> {
    store.path().map(|p| p.with_file_name(HEAD_FILE))
}

/// Serialises writers of the head file (a process may append from many tasks).
static HEAD_FILE_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The head file (issue 33: written in place, not a new file renamed over each time — on this
/// project's 2-core machine 0.07 ms against 0.36 ms, twice on each call's path). A header
/// sector naming the format, then two slots of one sector each, written in turn: each holds
/// the length of a head's JSON, its SHA-256, and the JSON. A write lands only in the slot that
/// does not hold the newest head, and is synced before it is relied on, so a write torn by a
/// crash leaves the other slot's head — the file is only behind, which a node's start brings
/// up, never ahead or unreadable. The file is made (and a head file of the older format, one
/// JSON head, replaced) by a temporary file renamed over, as before.
const HEAD_FILE_MAGIC: &[u8] = b"skillbox ledger head, two slots, v2\n";
/// One slot, and the header: a sector each, so a torn write of one touches no other.
const HEAD_SLOT: usize = 512;
const HEAD_SLOT_FIXED: usize = 4 + 32;

/// What the head file holds: its newest head, and the slot the next head goes to (`None`:
/// the file is of the older format, rewritten whole).
struct StoredHead {
    head: Head,
    next_slot: Option<usize>,
}

/// The head in one slot, when the slot holds a whole one.
fn head_in_slot(slot: &[u8]) -> Option<Head> {
    let len = u32::from_le_bytes(slot.get(..4)?.try_into().ok()?) as usize;
    let text = slot.get(HEAD_SLOT_FIXED..HEAD_SLOT_FIXED.checked_add(len)?)?;
    if Sha256::digest(text).as_slice() != slot.get(4..HEAD_SLOT_FIXED)? {
        return None;
    }
    serde_json::from_slice(text).ok()
}

/// The head file's content: `Ok(None)` when there is no file, `Err` when it holds no head.
fn load_head_file(path: &std::path::Path) -> std::result::Result<Option<StoredHead>, ()> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(_) => return Err(()),
    };
    if !bytes.starts_with(HEAD_FILE_MAGIC) {
        // The older format: one JSON head.
        let head = serde_json::from_slice(&bytes).map_err(|_| ())?;
        return Ok(Some(StoredHead {
            head,
            next_slot: None,
        }));
    }
    let slot = |i: usize| {
        bytes
            .get(HEAD_SLOT * (i + 1)..HEAD_SLOT * (i + 2))
            .and_then(head_in_slot)
    };
    let newest = match (slot(0), slot(1)) {
        (Some(a), Some(b)) if b.seq > a.seq => (b, 1),
        (Some(a), _) => (a, 0),
        (None, Some(b)) => (b, 1),
        (None, None) => return Err(()),
    };
    Ok(Some(StoredHead {
        head: newest.0,
        next_slot: Some(1 - newest.1),
    }))
}

/// The head the file names: `Ok(None)` when there is no file, `Err` when it holds no head.
pub(crate) fn read_head_file(path: &std::path::Path) -> std::result::Result<Option<Head>, ()> {
    load_head_file(path).map(|h| h.map(|h| h.head))
}

/// Copy the database's signed head to the file beside it — only forward, and only when the
/// database still holds the entry the file names (a rolled-back or rewritten database never
/// overwrites the evidence). Written to a private temporary file, synced, renamed over, the dir
/// synced: the file holds the old head or the new one, never half of either.
pub fn publish_head(store: &Store) -> Result<()> {
    publish_head_through(store, u64::MAX).map(|_| ())
}

/// [`publish_head`] for an appender whose entry `seq` committed: nothing to do when the file
/// already names `seq` or a later entry. Appenders of one group-committed batch return from the
/// commit together; the first to take the lock publishes the database's head, which covers the
/// whole batch, and the others find it there — one head file write (two fsyncs) per batch, not
/// per entry (issue 33). The file is still only moved forward, by the checks below; a head it
/// holds was checked against the database when it was written.
///
/// `Ok(n)`: the head file now names entry `n` (at least `seq`) — `u64::MAX` for a store with
/// no file (in memory), 0 when nothing was published (no head yet, or a file left as it is
/// after an error logged here) — so a caller can skip asking again for entries up to `n`.
pub fn publish_head_through(store: &Store, seq: u64) -> Result<u64> {
    let Some(path) = head_file(store) else {
        return Ok(u64::MAX);
    };
    let _guard = HEAD_FILE_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let stored = load_head_file(&path);
    if let Ok(Some(f)) = &stored
        && f.head.seq >= seq
    {
        return Ok(f.head.seq);
    }
    let Some(db) = head(store)? else {
        return Ok(0);
    };
    let next_slot = match &stored {
        Ok(Some(f)) => f.next_slot,
        _ => None,
    };
    match stored.map(|f| f.map(|f| f.head)) {
        Ok(Some(file)) if file.seq >= db.seq => return Ok(file.seq),
        Ok(Some(file)) => {
            let at: Option<String> = store.read(|c| {
                Ok(c.query_row(
                    "SELECT hash FROM ledger WHERE seq = ?1",
                    params![file.seq as i64],
                    |r| r.get(0),
                )
                .optional()?)
            })?;
            if at.as_deref() != Some(file.hash.as_str()) {
                tracing::error!(
                    seq = file.seq,
                    "the ledger in the database does not extend ledger.head: left as it is (see `skillbox ledger verify`)"
                );
                return Ok(0);
            }
        }
        Ok(None) => {}
        Err(()) => {
            tracing::error!(
                "ledger.head is unreadable: left as it is (see `skillbox ledger verify`)"
            );
            return Ok(0);
        }
    }
    write_head_file(&path, &db, next_slot)?;
    Ok(db.seq)
}

/// One slot holding `head`: its JSON's length, the JSON's SHA-256, the JSON, zeros.
fn slot_bytes(head: &Head) -> Result<Vec<u8>> {
    let text = serde_json::to_vec(head).map_err(|e| NodeError::invalid("ledger", e.to_string()))?;
    if text.len() > HEAD_SLOT - HEAD_SLOT_FIXED {
        return Err(NodeError::invalid(
            "ledger",
            "the signed head is too long for its slot",
        ));
    }
    let mut filled = vec![0u8; HEAD_SLOT];
    filled[..4].copy_from_slice(&(text.len() as u32).to_le_bytes());
    filled[4..HEAD_SLOT_FIXED].copy_from_slice(&Sha256::digest(&text));
    filled[HEAD_SLOT_FIXED..HEAD_SLOT_FIXED + text.len()].copy_from_slice(&text);
    Ok(filled)
}

/// Write `head` into slot `slot` of the head file in place, synced; `None`: make the file
/// anew with `head` in its first slot (a private temporary file, synced, renamed over, the dir
/// synced: the file holds the old head or the new one, never half of either).
fn write_head_file(path: &std::path::Path, head: &Head, slot: Option<usize>) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let io = |what: &str, e: std::io::Error| NodeError::io(format!("{what} {}", path.display()), e);
    let filled = slot_bytes(head)?;
    if let Some(slot) = slot {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| io("writing", e))?;
        f.write_all_at(&filled, (HEAD_SLOT * (slot + 1)) as u64)
            .map_err(|e| io("writing", e))?;
        // The file's length and place do not change: its data is all there is to sync.
        return f.sync_data().map_err(|e| io("syncing", e));
    }
    let mut whole = vec![0u8; HEAD_SLOT * 3];
    whole[..HEAD_FILE_MAGIC.len()].copy_from_slice(HEAD_FILE_MAGIC);
    whole[HEAD_SLOT..HEAD_SLOT * 2].copy_from_slice(&filled);
    let tmp = path.with_extension("head.tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| io("writing", e))?;
    f.write_all(&whole).map_err(|e| io("writing", e))?;
    f.sync_all().map_err(|e| io("syncing", e))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| io("renaming over", e))?;
    if let Some(dir) = path.parent()
        && let Ok(d) = std::fs::File::open(dir)
    {
        let _ = d.sync_all();
    }
    Ok(())
}

/// At node start: write the genesis entry into a store created (or migrated to the genesis)
/// just now, exactly once, and bring the head file up to the database (a node that kept a
/// ledger before the head file existed gets one). `peer` is this node's id, named by the
/// genesis.
pub fn open(store: &Store, key: &SigningKey, peer: &str) -> Result<()> {
    store.write(|tx| {
        // The row the store migration that introduced the genesis left: written once per store.
        let due: bool = tx.query_row("SELECT count(*) FROM ledger_genesis_due", [], |r| {
            r.get::<_, i64>(0)
        })? > 0;
        if !due {
            return Ok(());
        }
        let empty: bool =
            tx.query_row("SELECT count(*) FROM ledger", [], |r| r.get::<_, i64>(0))? == 0;
        if empty {
            append(
                tx,
                key,
                Entry {
                    at: skillbox_peers::now_ms(),
                    ..Entry::naming(EntryKind::Genesis, "", "node", peer)
                },
            )?;
        }
        tx.execute("DELETE FROM ledger_genesis_due", [])?;
        Ok(())
    })?;
    publish_head(store)
}

/// Filters of `GET /ledger` and `skillbox ledger`.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Entries that name this source (in the decision's sources or a staked item).
    pub source: Option<String>,
    pub peer: Option<String>,
    pub call: Option<String>,
    /// Entries at or after this time (unix ms).
    pub since_ms: Option<u64>,
    pub limit: Option<usize>,
}

impl Filter {
    /// Whether the entry itself (its signed content, not the columns beside it) matches.
    fn matches(&self, e: &Entry) -> bool {
        self.source
            .as_deref()
            .is_none_or(|s| source_names(e).contains(&s))
            && self.peer.as_deref().is_none_or(|p| e.peer == p)
            && self.call.as_deref().is_none_or(|c| e.call == c)
            && self.since_ms.is_none_or(|t| e.at >= t)
    }
}

fn read_line(r: &rusqlite::Row<'_>) -> rusqlite::Result<(String, String, String)> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
}

fn to_line((entry, hash, sig): (String, String, String)) -> Option<Line> {
    Some(Line {
        entry: serde_json::from_str(&entry).ok()?,
        hash,
        sig,
        redacted: None,
        shown_sig: None,
    })
}

/// Entries in order, filtered on what each entry itself says — never on the unsigned columns or
/// the per-source index, which an edit of the database could falsify to hide entries (those are
/// checked by [`verify_store`]). An entry whose stored text does not parse is left out here
/// (and named by [`verify_store`]).
pub fn list(store: &Store, f: &Filter) -> Result<Vec<Line>> {
    store.read(|c| {
        let mut stmt = c.prepare("SELECT entry, hash, sig FROM ledger ORDER BY seq")?;
        let rows = stmt.query_map([], read_line)?;
        let mut out = Vec::new();
        for row in rows {
            if f.limit.is_some_and(|l| out.len() >= l) {
                break;
            }
            if let Some(line) = to_line(row?)
                && f.matches(&line.entry)
            {
                out.push(line);
            }
        }
        Ok(out)
    })
}

/// The signed head, if any entry was ever written.
pub fn head(store: &Store) -> Result<Option<Head>> {
    store.read(|c| Ok(stored_head(c)?.and_then(|b| serde_json::from_slice(&b).ok())))
}

/// The signed head's text as the database keeps it (`meta.ledger_head`), if any.
fn stored_head(c: &rusqlite::Connection) -> rusqlite::Result<Option<Vec<u8>>> {
    c.prepare_cached("SELECT value FROM meta WHERE key = ?1")?
        .query_row(params![HEAD_KEY], |r| r.get(0))
        .optional()
}

/// What a row says beside its entry: the unsigned columns and its per-source index rows.
type RowFacts = (i64, i64, String, String, String, String);

/// The first entry whose unsigned columns or per-source index rows do not say what the entry
/// says (or an index row naming no entry).
fn index_mismatch(c: &rusqlite::Connection, lines: &[(i64, Option<Line>)]) -> Result<Option<u64>> {
    let mut cols =
        c.prepare("SELECT seq, at, call_id, role, peer, kind FROM ledger ORDER BY seq")?;
    let facts: Vec<RowFacts> = cols
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut idx = c.prepare("SELECT seq, name FROM ledger_sources ORDER BY seq, name")?;
    let mut index: std::collections::BTreeMap<i64, Vec<String>> = Default::default();
    for r in idx.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))? {
        let (seq, name) = r?;
        index.entry(seq).or_default().push(name);
    }
    let mut first: Option<u64> = None;
    let mut note = |seq: i64| {
        let seq = seq.max(0) as u64;
        if first.is_none_or(|f| seq < f) {
            first = Some(seq);
        }
    };
    for ((seq, line), (fseq, at, call, role, peer, kind)) in lines.iter().zip(&facts) {
        let Some(line) = line else { continue };
        let e = &line.entry;
        let names: Vec<String> = source_names(e).into_iter().map(str::to_owned).collect();
        let listed = index.remove(seq).unwrap_or_default();
        if seq != fseq
            || *at != e.at as i64
            || *call != e.call
            || *role != e.role
            || *peer != e.peer
            || kind != e.kind.as_str()
            || listed != names
        {
            note(*seq);
        }
    }
    // Index rows naming no entry.
    if let Some((&seq, _)) = index.iter().next() {
        note(seq);
    }
    Ok(first)
}

/// Verify the node's own ledger against the node key, the head in the database, the head kept
/// outside it (`ledger.head`), and its index. A head that exists but does not parse counts as a
/// cut ledger. The file is read first: an append between the two reads only makes the database
/// longer than the file, which it may be.
pub fn verify_store(store: &Store, key: &VerifyingKey) -> Result<Verdict> {
    let file = head_file(store).map(|p| read_head_file(&p));
    let (rows, head_present, head, mismatch) = store.read(|c| {
        // One read transaction: the rows, the head and the index as of one moment.
        let tx = c.unchecked_transaction()?;
        let mut stmt = tx.prepare("SELECT seq, entry, hash, sig FROM ledger ORDER BY seq")?;
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get::<_, i64>(0)?, (r.get(1)?, r.get(2)?, r.get(3)?)))
            })?
            .collect::<rusqlite::Result<Vec<(i64, (String, String, String))>>>()?;
        drop(stmt);
        let raw = stored_head(&tx)?;
        let lines: Vec<(i64, Option<Line>)> =
            rows.into_iter().map(|(s, r)| (s, to_line(r))).collect();
        let mismatch = index_mismatch(&tx, &lines)?;
        let head: Option<Head> = raw.as_ref().and_then(|b| serde_json::from_slice(b).ok());
        Ok((lines, raw.is_some(), head, mismatch))
    })?;
    let entries = rows.len() as u64;
    let broken = |at: u64, reason: Broken| Verdict::broken(at, reason, entries);
    if head_present && head.is_none() {
        return Ok(broken(0, Broken::BadHead));
    }
    let anchor = match file {
        None => None,
        Some(Ok(Some(h))) => Some(h),
        // A file store keeps the head file from its first entry on.
        Some(Ok(None)) if entries > 0 => return Ok(broken(0, Broken::HeadFileMissing)),
        Some(Ok(None)) => None,
        Some(Err(())) => return Ok(broken(0, Broken::BadHead)),
    };
    let v = verify_anchored(
        rows.into_iter().map(|(_, l)| l),
        key,
        head.as_ref(),
        anchor.as_ref(),
    );
    if !v.ok {
        return Ok(v);
    }
    // The head is written with every entry: entries without one means it went with the tail.
    if head.is_none() {
        return Ok(Verdict {
            ok: false,
            head: None,
            broken_at: Some(v.entries + 1),
            reason: Some(Broken::Truncated),
            ..v
        });
    }
    if let Some(seq) = mismatch {
        return Ok(broken(seq, Broken::IndexMismatch));
    }
    Ok(Verdict {
        signed_head: head,
        ..v
    })
}

/// [`verify_store`], with the head to save off the machine as its `signed_head`: the database's
/// head as version 2 ([`saved_head`]), pinning what each line up to it shows redacted — the
/// head `skillbox ledger head` prints, so a later `ledger verify --head` holds every line up to
/// it to what it says now, whoever holds the node key then.
pub fn verify_store_to_save(store: &Store, key: &SigningKey) -> Result<Verdict> {
    let mut v = verify_store(store, &key.verifying_key())?;
    if let Some(head) = v.signed_head.take() {
        let mut lines = list(store, &Filter::default())?;
        lines.retain(|l| l.entry.seq <= head.seq);
        for l in &mut lines {
            shown(l, key)?;
        }
        v.signed_head = Some(saved_head(&lines, &head, key)?);
    }
    Ok(v)
}

/// The last consent decision recorded for this call and side: (`allow`/`deny`, who decided).
/// Read from the entries themselves (the columns only narrow the search).
pub fn last_decision(store: &Store, call: &str, role: &str) -> Result<Option<Decided>> {
    Ok(last_decision_in(&of_call(store, call, role)?))
}

/// A consent decision as an entry records it: `allow`/`deny`, and who decided.
pub type Decided = (String, String);

fn last_decision_in(entries: &[Entry]) -> Option<Decided> {
    entries
        .iter()
        .rev()
        .find(|e| e.kind == EntryKind::Decision)
        .map(|e| (e.decision.clone(), e.decided_by.clone()))
}

/// [`stake_state`] and [`last_decision`] from one read of the call's entries: a stake action
/// needs both (issue 33: each read parses every entry of the call).
pub fn stake_facts(
    store: &Store,
    call: &str,
    role: &str,
    run: &str,
) -> Result<(Option<StakeState>, Option<Decided>)> {
    let entries = of_call(store, call, role)?;
    let decided = last_decision_in(&entries);
    Ok((stake_state_in(entries, run), decided))
}

/// This call's entries on this side, in order, checked against their own content.
fn of_call(store: &Store, call: &str, role: &str) -> Result<Vec<Entry>> {
    let texts: Vec<String> = store.read(|c| {
        let mut stmt = c.prepare("SELECT entry FROM ledger WHERE call_id = ?1 ORDER BY seq")?;
        let rows = stmt
            .query_map(params![call], |r| r.get(0))?
            .collect::<rusqlite::Result<Vec<String>>>()?;
        Ok(rows)
    })?;
    Ok(texts
        .iter()
        .filter_map(|t| serde_json::from_str::<Entry>(t).ok())
        .filter(|e| e.call == call && e.role == role)
        .collect())
}

/// Where this call's stake stands in the ledger on this side: the last stake entry written
/// (ahead of its bytes) and the box's answer to it, if one was recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StakeState {
    pub seq: u64,
    pub items: Vec<Item>,
    /// `stake_taken` or `stake_refused`, with the box's code.
    pub answer: Option<(EntryKind, Option<String>)>,
}

/// See [`StakeState`]; `None` when nothing was staked for this call on this side into `run`.
/// Only that run's entries count (and those written before entries named their run): a stake
/// into a run the call left is never taken for the run it has now.
pub fn stake_state(store: &Store, call: &str, role: &str, run: &str) -> Result<Option<StakeState>> {
    Ok(stake_state_in(of_call(store, call, role)?, run))
}

fn stake_state_in(mut entries: Vec<Entry>, run: &str) -> Option<StakeState> {
    entries.retain(|e| e.run.as_deref().is_none_or(|r| r == run));
    let stake = entries.iter().rev().find(|e| e.kind == EntryKind::Stake)?;
    let answer = entries
        .iter()
        .find(|e| {
            matches!(e.kind, EntryKind::StakeTaken | EntryKind::StakeRefused)
                && e.answers == Some(stake.seq)
        })
        .map(|e| (e.kind, e.box_code.clone()));
    Some(StakeState {
        seq: stake.seq,
        items: stake.items.clone(),
        answer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: EntryKind, call: &str, sources: &[&str]) -> Entry {
        Entry {
            at: 1_700_000_000_000,
            skill: "taste".into(),
            box_url: Some("http://127.0.0.1:7000".into()),
            platform: Some("insecure-dev".into()),
            measurement: Some("ab".repeat(32)),
            provider: Some("local".into()),
            decision: "allow".into(),
            decided_by: "rule:1".into(),
            sources: sources.iter().map(|s| s.to_string()).collect(),
            items: match kind {
                EntryKind::Stake => vec![Item {
                    stake: "source".into(),
                    source: sources.first().map(|s| s.to_string()),
                    size_bucket: 1024,
                    digest: "hmac-sha256:00".into(),
                }],
                _ => vec![],
            },
            ..Entry::naming(kind, call, "caller", "12D3KooWPeer")
        }
    }

    #[test]
    fn an_entry_says_what_it_records_in_words() {
        let stake = entry(EntryKind::Stake, "c", &["songs"]);
        assert_eq!(stake.summary(), "staked source songs (≤1024 B)");
        assert_eq!(
            stake.through(),
            "box http://127.0.0.1:7000 (insecure-dev, no hardware isolation)"
        );
        let mut decision = entry(EntryKind::Decision, "c", &["songs", "notes"]);
        assert_eq!(decision.summary(), "allowed by rule:1 for songs, notes");
        decision.decision = "deny".into();
        decision.sources.clear();
        decision.box_url = None;
        assert_eq!(decision.summary(), "refused by rule:1");
        assert_eq!(decision.through(), "no box yet");
        decision.box_url = Some("https://box.example".into());
        decision.platform = Some("sev-snp".into());
        decision.hardware_isolation = true;
        assert_eq!(decision.through(), "box https://box.example (sev-snp)");
    }

    fn store_with(n: usize) -> (Store, SigningKey) {
        let store = Store::open_in_memory().expect("store");
        let key = SigningKey::from_bytes(&[7u8; 32]);
        for i in 0..n {
            let kind = if i % 2 == 0 {
                EntryKind::Decision
            } else {
                EntryKind::Stake
            };
            store
                .write(|tx| {
                    append(tx, &key, entry(kind, &format!("c{}", i / 2), &["songs"]))?;
                    Ok(())
                })
                .expect("append");
        }
        (store, key)
    }

    /// What the check says of `store`'s ledger under `key`.
    fn verdict(store: &Store, key: &SigningKey) -> Verdict {
        verify_store(store, &key.verifying_key()).expect("verify")
    }

    fn raw(store: &Store, sql: &str) {
        store
            .write(|tx| {
                tx.execute_batch(
                    "DROP TRIGGER ledger_no_update; DROP TRIGGER ledger_no_delete;
                     DROP TRIGGER ledger_sources_no_update; DROP TRIGGER ledger_sources_no_delete;",
                )?;
                tx.execute_batch(sql)?;
                Ok(())
            })
            .expect("raw edit");
    }

    /// What the check says of a ledger of `n` entries after `sql` edited it under its triggers.
    fn tampered(n: usize, sql: &str) -> Verdict {
        let (s, k) = store_with(n);
        raw(&s, sql);
        verdict(&s, &k)
    }

    /// Entries appended in one commit share one head, signed once at the commit: it names the
    /// last of them, and a write that fails after appending takes its entry and its head along.
    #[test]
    fn entries_of_one_commit_share_the_head_signed_at_its_end() {
        let (store, key) = store_with(2);
        store
            .write(|tx| {
                for i in 0..3 {
                    append(tx, &key, entry(EntryKind::Decision, &format!("d{i}"), &[]))?;
                }
                Ok(())
            })
            .expect("three in one");
        let h = head(&store).expect("read").expect("a head");
        assert_eq!(h.seq, 5);
        let last: String = store
            .read(|c| Ok(c.query_row("SELECT hash FROM ledger WHERE seq = 5", [], |r| r.get(0))?))
            .expect("hash");
        assert_eq!(h.hash, last);
        let v = verdict(&store, &key);
        assert!(v.ok, "{v:?}");
        assert_eq!(v.signed_head.map(|h| h.seq), Some(5));
        let failed = store.write(|tx| {
            append(tx, &key, entry(EntryKind::Decision, "gone", &[]))?;
            Err::<(), _>(NodeError::CommitFailed)
        });
        assert!(failed.is_err());
        assert_eq!(head(&store).expect("read"), Some(h));
        assert!(verdict(&store, &key).ok);
    }

    #[test]
    fn an_untouched_ledger_verifies_and_chains() {
        let (store, key) = store_with(6);
        let v = verdict(&store, &key);
        assert!(v.ok, "{v:?}");
        assert_eq!(v.entries, 6);
        let lines = list(&store, &Filter::default()).expect("list");
        assert_eq!(lines[0].entry.prev, GENESIS);
        for w in lines.windows(2) {
            assert_eq!(w[1].entry.prev, w[0].hash);
            assert_eq!(w[1].entry.seq, w[0].entry.seq + 1);
        }
        // The export reads back and verifies on its own.
        let text = to_jsonl(&lines).expect("jsonl");
        let head = head(&store).expect("head");
        assert!(verify(parse_jsonl(&text), &key.verifying_key(), head.as_ref()).ok);
    }

    /// A file-backed store, its key and its head file.
    fn file_store(dir: &std::path::Path) -> (Store, SigningKey, std::path::PathBuf) {
        let store = Store::open(&dir.join("store.db")).expect("store");
        let key = SigningKey::from_bytes(&[7u8; 32]);
        let file = head_file(&store).expect("a file store has a head file");
        (store, key, file)
    }

    /// Append one entry and publish it: its seq.
    fn appended(store: &Store, key: &SigningKey, call: &str) -> u64 {
        append_now(store, key, entry(EntryKind::Decision, call, &[]))
            .expect("append")
            .entry
            .seq
    }

    /// Issue 33: the head file is two slots written in turn, in place. A write torn by a crash
    /// (its slot's bytes half new) leaves the head the other slot holds: the file is behind,
    /// which the ledger's check allows, never unreadable; the next publish writes that slot
    /// again. Both slots torn is a file with no head (`bad_head`).
    #[test]
    fn a_torn_slot_leaves_the_head_before_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (store, key, file) = file_store(tmp.path());
        let first = appended(&store, &key, "c1");
        let second = appended(&store, &key, "c2");
        assert_eq!(read_head_file(&file), Ok(head(&store).expect("head")));
        let bytes = std::fs::read(&file).expect("read");
        assert!(bytes.starts_with(HEAD_FILE_MAGIC));
        // The newest head's slot: the one whose bytes name `second`.
        let newest = (0..2)
            .find(|i| {
                head_in_slot(&bytes[HEAD_SLOT * (i + 1)..HEAD_SLOT * (i + 2)])
                    .is_some_and(|h| h.seq == second)
            })
            .expect("a slot holds the newest head");
        let mut torn = bytes.clone();
        torn[HEAD_SLOT * (newest + 1) + HEAD_SLOT_FIXED + 3] ^= 0x20;
        std::fs::write(&file, &torn).expect("tear");
        assert_eq!(
            read_head_file(&file).map(|h| h.map(|h| h.seq)),
            Ok(Some(first))
        );
        let v = verdict(&store, &key);
        assert!(
            v.ok,
            "a file behind the database is not a broken ledger: {v:?}"
        );
        // Brought up by the next publish, into the torn slot.
        assert_eq!(
            publish_head_through(&store, second).expect("publish"),
            second
        );
        let mended = std::fs::read(&file).expect("read");
        assert_eq!(mended, bytes, "the torn slot was not the one written");
        // Both slots torn: no head in the file.
        let mut both = bytes;
        for i in 0..2 {
            both[HEAD_SLOT * (i + 1) + HEAD_SLOT_FIXED + 3] ^= 0x20;
        }
        std::fs::write(&file, &both).expect("tear");
        assert_eq!(read_head_file(&file), Err(()));
        let v = verdict(&store, &key);
        assert_eq!(v.reason, Some(Broken::BadHead), "{v:?}");
    }

    proptest::proptest! {
        /// The head file's reader, on any bytes after the header or in place of the file: a
        /// head or `Err`, never a panic; and a slot written is read back as the head it holds,
        /// and read as nothing once any byte of its length, checksum or JSON changes.
        #[test]
        fn the_head_files_reader_takes_any_bytes(
            tail in proptest::collection::vec(proptest::num::u8::ANY, 0..1600),
            bare in proptest::bool::ANY,
            seq in 0u64..u64::MAX,
            hash in "[a-z0-9:]{0,80}",
            sig in "[0-9a-f]{0,140}",
            flip in 0usize..HEAD_SLOT,
        ) {
            let tmp = tempfile::tempdir().expect("tempdir");
            let path = tmp.path().join(HEAD_FILE);
            let mut bytes = if bare { Vec::new() } else { HEAD_FILE_MAGIC.to_vec() };
            bytes.extend_from_slice(&tail);
            std::fs::write(&path, &bytes).expect("write");
            let _ = read_head_file(&path);
            let head = Head { seq, hash, sig, shown: None };
            let slot = slot_bytes(&head).expect("a head fits its slot");
            proptest::prop_assert_eq!(head_in_slot(&slot), Some(head.clone()));
            let text_end = HEAD_SLOT_FIXED + serde_json::to_vec(&head).expect("json").len();
            let mut torn = slot;
            torn[flip] ^= 0x01;
            if flip < text_end {
                proptest::prop_assert_eq!(head_in_slot(&torn), None);
            } else {
                proptest::prop_assert_eq!(head_in_slot(&torn), Some(head));
            }
        }
    }

    /// A head file of the older format (one JSON head, renamed over each time) is read as it
    /// is, checked against the database as before, and replaced by the two-slot file at the
    /// next publish.
    #[test]
    fn a_head_file_of_the_older_format_is_read_and_replaced() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (store, key, file) = file_store(tmp.path());
        appended(&store, &key, "c1");
        let old = head(&store).expect("head").expect("one");
        std::fs::write(&file, serde_json::to_vec(&old).expect("json")).expect("write");
        assert_eq!(read_head_file(&file), Ok(Some(old.clone())));
        assert!(verdict(&store, &key).ok);
        let next = appended(&store, &key, "c2");
        assert!(
            std::fs::read(&file)
                .expect("read")
                .starts_with(HEAD_FILE_MAGIC)
        );
        assert_eq!(
            read_head_file(&file).map(|h| h.map(|h| h.seq)),
            Ok(Some(next))
        );
        // A head file of the older format naming a ledger the database does not extend is
        // left as it is, as before.
        let forged = Head {
            hash: format!("sha256:{}", "0".repeat(64)),
            ..old
        };
        std::fs::write(&file, serde_json::to_vec(&forged).expect("json")).expect("write");
        appended(&store, &key, "c3");
        assert_eq!(read_head_file(&file), Ok(Some(forged)));
    }

    /// Issue 33: appenders of one group-committed batch share one head file write. An appender
    /// whose entry the file already names (or passed) writes nothing, even when the database
    /// moved on meanwhile (under load it always has): that later entry's own appender
    /// publishes it. The file only moves forward and names only committed entries.
    #[test]
    fn an_entry_the_head_file_already_covers_is_not_published_again() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&tmp.path().join("store.db")).expect("store");
        let key = SigningKey::from_bytes(&[7u8; 32]);
        let add =
            |n: usize| {
                store
                    .write(|tx| {
                        (0..n)
                            .map(|i| {
                                Ok(append(
                                    tx,
                                    &key,
                                    entry(EntryKind::Decision, &format!("c{i}"), &[]),
                                )?
                                .entry
                                .seq)
                            })
                            .collect::<Result<Vec<u64>>>()
                    })
                    .expect("append")
            };
        let file = head_file(&store).expect("a file store has a head file");
        // Written in place: what changes is the bytes.
        let written = || std::fs::read(&file).expect("head file");
        let named = || read_head_file(&file).expect("readable").expect("there").seq;
        // One batch of two entries; its last appender publishes first.
        let batch = add(2);
        // What it answers is what the file names: an appender may skip asking for entries up
        // to there.
        assert_eq!(
            publish_head_through(&store, batch[0]).expect("publish"),
            batch[1]
        );
        assert_eq!(named(), batch[1]);
        let first = written();
        // The next batch commits before the first batch's other appender publishes.
        let next = add(1);
        assert_eq!(
            publish_head_through(&store, batch[1]).expect("publish"),
            batch[1]
        );
        assert_eq!(
            written(),
            first,
            "the head file was written again for a covered entry"
        );
        assert_eq!(named(), batch[1]);
        publish_head_through(&store, next[0]).expect("publish");
        assert_eq!(named(), next[0]);
        assert_ne!(written(), first);
        let v = verdict(&store, &key);
        assert!(v.ok, "{v:?}");
    }

    #[test]
    fn the_store_refuses_updates_and_deletes() {
        let (store, _) = store_with(2);
        let upd = store.write(|tx| Ok(tx.execute("UPDATE ledger SET peer = 'x'", [])?));
        assert!(upd.is_err());
        let del = store.write(|tx| Ok(tx.execute("DELETE FROM ledger", [])?));
        assert!(del.is_err());
        assert_eq!(list(&store, &Filter::default()).expect("list").len(), 2);
    }

    #[test]
    fn each_kind_of_tampering_is_named() {
        let vk = |k: &SigningKey| k.verifying_key();
        // An edited entry (the peer changed in the stored JSON).
        let v = tampered(
            4,
            "UPDATE ledger SET entry = replace(entry, '12D3KooWPeer', '12D3KooWOther') WHERE seq = 2",
        );
        assert_eq!(
            (v.ok, v.broken_at, v.reason),
            (false, Some(2), Some(Broken::HashMismatch))
        );
        // A removed middle entry.
        let v = tampered(4, "DELETE FROM ledger WHERE seq = 2");
        assert_eq!(
            (v.broken_at, v.reason),
            (Some(2), Some(Broken::SequenceGap))
        );
        // Two entries swapped in place (each row keeps its text, the order changes).
        let v = tampered(
            4,
            "UPDATE ledger SET seq = 100 WHERE seq = 2; UPDATE ledger SET seq = 2 WHERE seq = 3;
             UPDATE ledger SET seq = 3 WHERE seq = 100;",
        );
        assert_eq!(
            (v.broken_at, v.reason),
            (Some(2), Some(Broken::SequenceGap))
        );
        // A cut tail (the head still says 4).
        let v = tampered(4, "DELETE FROM ledger WHERE seq >= 3");
        assert_eq!((v.entries, v.reason), (2, Some(Broken::Truncated)));
        // The tail and the head removed together.
        let v = tampered(
            4,
            "DELETE FROM ledger WHERE seq >= 3; DELETE FROM meta WHERE key = 'ledger_head'",
        );
        assert_eq!(v.reason, Some(Broken::Truncated));
        // Signed by another key (a forged ledger), or checked against another node's key.
        let (s, _) = store_with(2);
        let other = SigningKey::from_bytes(&[9u8; 32]);
        assert_eq!(
            verify_store(&s, &vk(&other)).expect("verify").reason,
            Some(Broken::BadSignature)
        );
        // An entry whose hash was recomputed after the edit: the chain and the signature catch it.
        let (s, k) = store_with(3);
        let mut lines = list(&s, &Filter::default()).expect("list");
        lines[1].entry.peer = "12D3KooWOther".into();
        lines[1].hash = hash_entry(&lines[1].entry).expect("hash");
        let v = verify(lines.into_iter().map(Some), &vk(&k), None);
        assert_eq!(
            (v.broken_at, v.reason),
            (Some(2), Some(Broken::BadSignature))
        );
        // A line that is not an entry.
        let (s, k) = store_with(2);
        let mut text = to_jsonl(&list(&s, &Filter::default()).expect("list")).expect("jsonl");
        text.push_str("{\"not\": \"an entry\"}\n");
        let v = verify(parse_jsonl(&text), &vk(&k), None);
        assert_eq!((v.broken_at, v.reason), (Some(3), Some(Broken::Unreadable)));
    }

    /// A ledger of four entries (decision, stake, decision, stake) whose middle two name a
    /// source an older node stored under a pasted key, and its key.
    fn redacted_store() -> (Store, SigningKey) {
        let key = skillbox_testkit::old_node::PASTED_KEYS[0];
        let store = Store::open_in_memory().expect("store");
        let signing = SigningKey::from_bytes(&[7u8; 32]);
        let entries = [
            entry(EntryKind::Decision, "c0", &["songs"]),
            entry(EntryKind::Stake, "c0", &[key]),
            entry(EntryKind::Decision, "c1", &[key, "songs"]),
            entry(EntryKind::Stake, "c1", &["songs"]),
        ];
        for e in entries {
            append_now(&store, &signing, e).expect("append");
        }
        (store, signing)
    }

    /// `store`'s ledger as `GET /ledger` exports it (`Calls::ledger_shown`: [`list`], then
    /// [`shown`] on each line).
    fn exported(store: &Store, signing: &SigningKey) -> Vec<Line> {
        let mut lines = list(store, &Filter::default()).expect("list");
        for l in &mut lines {
            shown(l, signing).expect("shown");
        }
        lines
    }

    /// An export of [`redacted_store`]'s ledger, as `GET /ledger` exports it: the middle two
    /// lines masked, marked redacted and signed as shown. Also the key.
    fn redacted_export() -> (Vec<Line>, SigningKey) {
        let (store, signing) = redacted_store();
        (exported(&store, &signing), signing)
    }

    /// What `lines` (as an export file reads them back) verify to against `anchor`.
    fn against(
        lines: &[Line],
        key: &SigningKey,
        anchor: &Head,
    ) -> (bool, Option<u64>, Option<Broken>) {
        let text = to_jsonl(lines).expect("jsonl");
        let v = verify_anchored(parse_jsonl(&text), &key.verifying_key(), None, Some(anchor));
        (v.ok, v.broken_at, v.reason)
    }

    /// Review 25 R1, as /tmp/rv25/forge.py did it: whoever holds the node key rewrote what
    /// entries before a head saved off the machine say — an unredacted decision turned to a
    /// refusal by a rule covering nothing, a redacted stake's decision, box and items changed —
    /// marked them redacted and signed each as shown; `ledger verify --head SAVED` said
    /// "verified … 2 redacted entries … a source name masked". The saved head (version 2) now
    /// pins what each redacted line up to it shows: each rewrite is `rewritten` at its line,
    /// while the node's own export verifies against it. A head of version 1 (the database's,
    /// or one saved before) pins no shown text: a redacted line up to it is
    /// `unpinned_redaction`, named after every other check passed, never `ok`.
    #[test]
    fn a_saved_head_pins_what_a_redacted_line_shows() {
        let (store, k) = redacted_store();
        let lines = exported(&store, &k);
        let v = verify_store_to_save(&store, &k).expect("verify");
        assert!(v.ok, "{v:?}");
        let saved = v.signed_head.expect("a head to save");
        assert_eq!(saved.version(), 2);
        let pinned: Vec<u64> = saved.shown.iter().flatten().map(|p| p.seq).collect();
        assert_eq!(pinned, [2, 3]);
        assert_eq!(against(&lines, &k, &saved), (true, None, None));
        // A head saved off the machine reads back as it was printed.
        let text = serde_json::to_string(&saved).expect("json");
        assert_eq!(parse_head(&text), Ok(saved.clone()));

        // The forgery: rewrite a line's text, mark it redacted, sign it as shown with the key.
        let forge = |l: &mut Line, rewrite: &dyn Fn(&mut Entry)| {
            rewrite(&mut l.entry);
            l.redacted = Some(Redaction::SourceNames);
            let sig = k.sign(&shown_message(l, Redaction::SourceNames).expect("message"));
            l.shown_sig = Some(hex::encode(sig.to_bytes()));
        };
        let refused = |e: &mut Entry| {
            e.decision = "deny".into();
            e.decided_by = "rule:1".into();
            e.sources.clear();
        };
        let nothing_staked = |e: &mut Entry| {
            e.decision = "deny".into();
            e.decided_by = "rule:1".into();
            e.items.clear();
            e.box_url = Some("https://other.example".into());
        };
        let mut forged = lines.clone();
        forge(&mut forged[0], &refused);
        forge(&mut forged[1], &nothing_staked);
        // Without an anchor the node key vouches for any view (documented): its holder can
        // sign what it likes.
        let vk = k.verifying_key();
        let v = verify(parse_jsonl(&to_jsonl(&forged).expect("jsonl")), &vk, None);
        assert_eq!((v.ok, v.redacted), (true, vec![1, 2, 3]));
        let mut one = lines.clone();
        forge(&mut one[1], &nothing_staked);
        for (what, l, at) in [
            (
                "an unredacted line rewritten and marked redacted",
                &forged,
                1,
            ),
            ("a redacted line's text rewritten", &one, 2),
        ] {
            let broken = (false, Some(at), Some(Broken::Rewritten));
            assert_eq!(against(l, &k, &saved), broken, "{what}");
        }
        // Past the saved head, a redacted line is vouched for by the node key alone.
        let mut later = lines.clone();
        forge(&mut later[3], &refused);
        let early =
            saved_head(&exported(&store, &k)[..2], &head_at(&lines, 2, &k), &k).expect("head at 2");
        assert_eq!(against(&later, &k, &early), (true, None, None));

        // A version 1 head: the honest export and the forged one alike are not `ok`.
        let v1 = sign_head(saved.seq, &saved.hash, &k);
        assert_eq!(v1.version(), 1);
        assert_eq!(
            against(&lines, &k, &v1),
            (false, Some(2), Some(Broken::UnpinnedRedaction))
        );
        assert_eq!(
            against(&forged, &k, &v1),
            (false, Some(1), Some(Broken::UnpinnedRedaction))
        );
        // Neither version passes as the other: the pins stripped off, or another line pinned.
        let stripped = Head {
            shown: None,
            ..saved.clone()
        };
        assert_eq!(against(&lines, &k, &stripped).2, Some(Broken::BadHead));
        let mut moved = saved.clone();
        if let Some(p) = moved.shown.as_mut() {
            p[0].seq = 1;
        }
        assert_eq!(against(&lines, &k, &moved).2, Some(Broken::BadHead));
    }

    /// The database's head (version 1) at `seq` of `lines`.
    fn head_at(lines: &[Line], seq: usize, key: &SigningKey) -> Head {
        sign_head(seq as u64, &lines[seq - 1].hash, key)
    }

    /// Review 25 R2: the node signed a line as shown without checking its stored text, so an
    /// entry edited in the database (a decision turned, a key-shaped source name added) was
    /// exported as a verified redaction while the node's own check said `hash_mismatch`. Such a
    /// line is now shown masked and not signed: the export reads `bad_redaction` at it, holds
    /// no part of the name, and no head is saved over it.
    #[test]
    fn an_edited_stored_entry_is_not_signed_as_shown() {
        let (store, k) = store_with(3);
        let pasted = skillbox_testkit::old_node::PASTED_KEYS[0];
        let mut edited = list(&store, &Filter::default()).expect("list")[1]
            .entry
            .clone();
        edited.decision = "deny".into();
        edited.sources.push(pasted.into());
        let text = serde_json::to_string(&edited).expect("json");
        assert!(!text.contains('\''));
        raw(
            &store,
            &format!("UPDATE ledger SET entry = '{text}' WHERE seq = 2"),
        );
        let lines = exported(&store, &k);
        assert_eq!(lines[1].redacted, Some(Redaction::SourceNames));
        let export = to_jsonl(&lines).expect("jsonl");
        skillbox_testkit::leak::assert_no_part_of("the export", &export, pasted);
        let v = verify_export(&export, &hex::encode(k.verifying_key().to_bytes())).expect("key");
        assert_eq!(
            (v.ok, v.broken_at, v.reason),
            (false, Some(2), Some(Broken::BadRedaction)),
            "{v:?}"
        );
        let own = verdict(&store, &k);
        assert_eq!(
            (own.broken_at, own.reason),
            (Some(2), Some(Broken::HashMismatch))
        );
        let v = verify_store_to_save(&store, &k).expect("verify");
        assert_eq!((v.ok, v.signed_head), (false, None));
        assert!(saved_head(&lines, &head_at(&lines, 3, &k), &k).is_err());
    }

    /// Issue keys2: an export that masks a source name an older node took from a pasted key
    /// read as tampered (`hash_mismatch` at the first such entry). The masked lines are
    /// redactions: the export verifies, naming them, and carries no part of the key.
    #[test]
    fn an_export_with_masked_source_names_verifies_with_its_redactions_named() {
        let (lines, k) = redacted_export();
        let text = to_jsonl(&lines).expect("jsonl");
        skillbox_testkit::leak::assert_no_part_of(
            "the export",
            &text,
            skillbox_testkit::old_node::PASTED_KEYS[0],
        );
        let v = verify_export(&text, &hex::encode(k.verifying_key().to_bytes())).expect("key");
        assert!(v.ok, "{v:?}");
        assert_eq!((v.entries, v.redacted.clone()), (4, vec![2, 3]), "{v:?}");
        assert_eq!(v.head.as_deref(), Some(lines[3].hash.as_str()));
        // A line shown as stored is written as it always was: no marker.
        assert!(!text.lines().next().expect("a line").contains("redacted"));
        assert_eq!(
            parse_jsonl(&text),
            lines.into_iter().map(Some).collect::<Vec<_>>()
        );
    }

    /// What a redaction does not cover: an edited line not marked redacted is still
    /// `hash_mismatch`; a redacted line whose hash is not the one the chain names (its `prev`
    /// changed) is broken, one carrying another entry's hash and signature is not what the
    /// node signed as shown; and a redacted line whose signature does not cover its hash is
    /// `bad_signature`.
    #[test]
    fn a_redaction_covers_no_other_edit() {
        let (lines, k) = redacted_export();
        let vk = k.verifying_key();
        let check = |edit: &dyn Fn(&mut Vec<Line>)| {
            let mut l = lines.clone();
            edit(&mut l);
            let v = verify(parse_jsonl(&to_jsonl(&l).expect("jsonl")), &vk, None);
            (v.ok, v.broken_at, v.reason)
        };
        type Edit<'a> = &'a dyn Fn(&mut Vec<Line>);
        let cases: [(&str, Edit<'_>, u64, Broken); 4] = [
            (
                "an unredacted line edited",
                &|l| l[3].entry.peer = "12D3KooWOther".into(),
                4,
                Broken::HashMismatch,
            ),
            (
                "a redacted line carrying another entry's hash and signature",
                &|l| {
                    l[2].hash = l[1].hash.clone();
                    l[2].sig = l[1].sig.clone();
                },
                3,
                Broken::BadRedaction,
            ),
            (
                "a redacted line's prev changed",
                &|l| l[2].entry.prev = l[0].hash.clone(),
                3,
                Broken::BrokenChain,
            ),
            (
                "a redacted line whose signature does not cover its hash",
                &|l| l[1].hash = hash_entry(&l[1].entry).expect("hash"),
                2,
                Broken::BadSignature,
            ),
        ];
        for (what, edit, at, reason) in cases {
            assert_eq!(check(edit), (false, Some(at), Some(reason)), "{what}");
        }
    }

    /// Review logs: a redacted line's shown text was vouched for by nothing — whoever held an
    /// export could edit what a redacted line shows (the decision, the box, the masked name,
    /// its place) or mark any edited line redacted, and the export still verified. The node
    /// now signs each redacted line as shown when it exports it; every such edit is
    /// `bad_redaction` at that line, while the export as the node wrote it verifies.
    #[test]
    fn a_redacted_lines_shown_text_is_vouched_for_by_the_node() {
        let (lines, k) = redacted_export();
        let vk = k.verifying_key();
        assert!(lines[1].shown_sig.is_some() && lines[2].shown_sig.is_some());
        assert!(lines[0].shown_sig.is_none() && lines[3].shown_sig.is_none());
        let v = verify(parse_jsonl(&to_jsonl(&lines).expect("jsonl")), &vk, None);
        assert_eq!((v.ok, v.redacted), (true, vec![2, 3]));
        let masked = lines[1].entry.items[0].source.clone().expect("a source");
        type Edit<'a> = &'a dyn Fn(&mut Vec<Line>);
        let cases: [(&str, Edit<'_>, u64); 7] = [
            (
                "the masked name of a staked item replaced",
                &|l| l[1].entry.items[0].source = Some("songs".into()),
                2,
            ),
            (
                "a redacted decision turned from allow to deny",
                &|l| l[2].entry.decision = "deny".into(),
                3,
            ),
            (
                "a redacted line's box moved",
                &|l| l[1].entry.box_url = Some("https://elsewhere.example".into()),
                2,
            ),
            (
                "a redacted line's masked name dropped from its sources",
                &|l| l[2].entry.sources.retain(|s| *s != masked),
                3,
            ),
            (
                "a redacted line without the node's signature as shown",
                &|l| l[1].shown_sig = None,
                2,
            ),
            (
                "an unredacted line edited and marked redacted",
                &|l| {
                    l[0].entry.decision = "deny".into();
                    l[0].redacted = Some(Redaction::SourceNames);
                },
                1,
            ),
            (
                "two redacted lines' signatures as shown swapped",
                &|l| {
                    let first = l[1].shown_sig.take();
                    l[1].shown_sig = l[2].shown_sig.replace(first.unwrap_or_default());
                },
                2,
            ),
        ];
        for (what, edit, at) in cases {
            let mut l = lines.clone();
            edit(&mut l);
            let v = verify(parse_jsonl(&to_jsonl(&l).expect("jsonl")), &vk, None);
            assert_eq!(
                (v.ok, v.broken_at, v.reason),
                (false, Some(at), Some(Broken::BadRedaction)),
                "{what}"
            );
        }
    }

    #[test]
    fn an_empty_ledger_a_shorter_one_and_a_rewritten_one_are_named() {
        let (s, k) = store_with(4);
        let vk = k.verifying_key();
        let lines = list(&s, &Filter::default()).expect("list");
        // Nothing at all is not a new ledger: every ledger begins with its genesis.
        let v = verify(Vec::new(), &vk, None);
        assert_eq!((v.ok, v.reason), (false, Some(Broken::NoGenesis)));
        // Against a head kept outside: longer is fine, shorter is rolled back, other is
        // rewritten, an unsigned one is refused.
        let anchor = sign_head(2, &lines[1].hash, &k);
        let all = || lines.iter().cloned().map(Some);
        assert!(verify_anchored(all(), &vk, None, Some(&anchor)).ok);
        let v = verify_anchored(all().take(1), &vk, None, Some(&anchor));
        assert_eq!((v.broken_at, v.reason), (Some(2), Some(Broken::RolledBack)));
        let other = sign_head(2, &lines[2].hash, &k);
        let v = verify_anchored(all(), &vk, None, Some(&other));
        assert_eq!((v.broken_at, v.reason), (Some(2), Some(Broken::Rewritten)));
        let forged = sign_head(2, &lines[1].hash, &SigningKey::from_bytes(&[9u8; 32]));
        let v = verify_anchored(all(), &vk, None, Some(&forged));
        assert_eq!(v.reason, Some(Broken::BadHead));
    }

    #[test]
    fn the_index_and_the_columns_are_checked_and_never_trusted_by_a_view() {
        let (s, k) = store_with(4);
        let vk = k.verifying_key();
        let songs = |s: &Store| {
            list(
                s,
                &Filter {
                    source: Some("songs".into()),
                    ..Filter::default()
                },
            )
            .expect("list")
            .len()
        };
        assert_eq!(songs(&s), 4);
        raw(&s, "DELETE FROM ledger_sources WHERE seq = 3");
        assert_eq!(songs(&s), 4, "the view reads the entries, not the index");
        let v = verify_store(&s, &vk).expect("verify");
        assert_eq!(
            (v.broken_at, v.reason),
            (Some(3), Some(Broken::IndexMismatch))
        );
        // An index row naming no entry, and a column saying something else.
        let v = tampered(
            2,
            "INSERT INTO ledger_sources (name, seq) VALUES ('diary', 9)",
        );
        assert_eq!(v.reason, Some(Broken::IndexMismatch));
        let (s, _) = store_with(2);
        raw(&s, "UPDATE ledger SET call_id = 'other' WHERE seq = 2");
        let only = |call: &str| Filter {
            call: Some(call.into()),
            ..Filter::default()
        };
        assert_eq!(list(&s, &only("c0")).expect("list").len(), 2);
        assert!(list(&s, &only("other")).expect("list").is_empty());
        assert_eq!(
            verify_store(&s, &vk).expect("verify").reason,
            Some(Broken::IndexMismatch)
        );
    }

    #[test]
    fn filters_by_source_peer_call_and_time() {
        let store = Store::open_in_memory().expect("store");
        let key = SigningKey::from_bytes(&[7u8; 32]);
        let mut a = entry(EntryKind::Stake, "c1", &["songs"]);
        a.at = 1000;
        let mut b = entry(EntryKind::Stake, "c2", &["diary"]);
        b.at = 2000;
        b.peer = "12D3KooWOther".into();
        for e in [a, b] {
            store
                .write(|tx| append(tx, &key, e.clone()).map(|_| ()))
                .expect("append");
        }
        let names = |f: Filter| -> Vec<String> {
            list(&store, &f)
                .expect("list")
                .into_iter()
                .map(|l| l.entry.call)
                .collect()
        };
        // Each filter alone, and the entries (by call) it lists.
        let with = |set: fn(&mut Filter)| {
            let mut f = Filter::default();
            set(&mut f);
            f
        };
        let cases: [(Filter, &[&str]); 5] = [
            (with(|f| f.source = Some("diary".into())), &["c2"]),
            (with(|f| f.peer = Some("12D3KooWPeer".into())), &["c1"]),
            (with(|f| f.since_ms = Some(1500)), &["c2"]),
            (with(|f| f.call = Some("c1".into())), &["c1"]),
            (with(|f| f.source = Some("nothing".into())), &[]),
        ];
        for (f, want) in cases {
            assert_eq!(names(f.clone()), want, "{f:?}");
        }
    }

    #[test]
    fn call_retention_never_prunes_the_ledger() {
        let (store, key) = store_with(2);
        store
            .write(|tx| {
                tx.execute(
                    "INSERT INTO calls (id, role, peer, skill, state, record, created_at, updated_at)
                     VALUES ('c0', 'caller', 'p', 'taste', 'answered', '{}', 0, 0)",
                    [],
                )?;
                Ok(())
            })
            .expect("call row");
        let pruned = crate::calls::records::prune_finished(&store, i64::MAX).expect("prune");
        assert_eq!(pruned, 1);
        assert_eq!(list(&store, &Filter::default()).expect("list").len(), 2);
        assert!(verdict(&store, &key).ok);
    }

    #[test]
    fn since_takes_milliseconds_or_a_span() {
        assert_eq!(parse_since("1700000000000", 5), Ok(1_700_000_000_000));
        assert_eq!(
            parse_since("24h", 100_000_000),
            Ok(100_000_000 - 86_400_000)
        );
        assert_eq!(parse_since("7d", 1), Ok(0));
        for bad in ["", "h", "-1d", "3w", "1.5h", "24 h"] {
            assert!(parse_since(bad, 1_000).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn csv_has_one_row_per_entry_and_no_formulas() {
        let (store, _) = store_with(2);
        let mut lines = list(&store, &Filter::default()).expect("list");
        lines[0].entry.skill = "=HYPERLINK(\"x\")".into();
        let text = to_csv(&lines).expect("csv");
        let mut r = csv::Reader::from_reader(text.as_bytes());
        let rows: Vec<csv::StringRecord> = r.records().map(|x| x.expect("row")).collect();
        assert_eq!(rows.len(), 2);
        assert!(rows[0][6].starts_with("'="), "{:?}", &rows[0]);
        assert!(
            rows[1][16].starts_with("source:songs:1024:"),
            "{:?}",
            &rows[1]
        );
    }
}
