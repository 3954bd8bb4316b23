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
//! retention never touches this table. What it cannot stop: someone holding the node key
//! rewriting the whole ledger — the ledger is the human's record, not a witness against them.
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
const HEAD_KEY: &str = "ledger_head";
/// `prev` of the first entry.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What an entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A consent decision: allow (the stake may follow) or deny (nothing leaves).
    Decision,
    /// Material this node sealed to a box.
    Stake,
}

impl EntryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Decision => "decision",
            EntryKind::Stake => "stake",
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
    /// `rule:N` (the N-th policy rule, from 1), `default`, `human`, `human+remember`,
    /// `admission` (an owner's stake: it follows admitting the call; the owner's consent rules
    /// decide the submit, recorded after it), or `unrecorded` (a call decided before this node
    /// kept a ledger).
    pub decided_by: String,
    /// The caller's sources the decision covered (names; none on the owner's side).
    #[serde(default)]
    pub sources: Vec<String>,
    /// What was sealed (stake entries only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<Item>,
    /// The previous entry's hash ([`GENESIS`] for the first).
    pub prev: String,
}

impl Entry {
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
}

/// The signed head: how long the ledger is and how it ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    pub seq: u64,
    pub hash: String,
    pub sig: String,
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
    /// The ledger ends before (or differs from) its signed head: the tail was cut.
    Truncated,
    /// The head itself is not signed by the node key.
    BadHead,
}

impl Broken {
    pub fn as_str(self) -> &'static str {
        match self {
            Broken::Unreadable => "unreadable",
            Broken::SequenceGap => "sequence_gap",
            Broken::HashMismatch => "hash_mismatch",
            Broken::BrokenChain => "broken_chain",
            Broken::BadSignature => "bad_signature",
            Broken::Truncated => "truncated",
            Broken::BadHead => "bad_head",
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
    })
}

fn sign_head(seq: u64, hash: &str, key: &SigningKey) -> Head {
    let sig = key.sign(&sig_message(
        HEAD_DOMAIN,
        &[&seq.to_be_bytes(), hash.as_bytes()],
    ));
    Head {
        seq,
        hash: hash.to_owned(),
        sig: hex::encode(sig.to_bytes()),
    }
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

/// Check a whole ledger in order: sequence, hashes, chain, signatures, and (when given) that it
/// ends at its signed head. Lines that did not parse are passed as `None`.
pub fn verify(
    lines: impl IntoIterator<Item = Option<Line>>,
    key: &VerifyingKey,
    head: Option<&Head>,
) -> Verdict {
    let broken = |at: u64, reason: Broken, entries: u64| Verdict {
        ok: false,
        entries,
        head: None,
        broken_at: Some(at),
        reason: Some(reason),
    };
    let mut prev = GENESIS.to_owned();
    let mut n = 0u64;
    for line in lines {
        let expected = n + 1;
        let Some(line) = line else {
            return broken(expected, Broken::Unreadable, n);
        };
        if line.entry.seq != expected {
            return broken(expected, Broken::SequenceGap, n);
        }
        match hash_entry(&line.entry) {
            Ok(h) if h == line.hash => {}
            _ => return broken(expected, Broken::HashMismatch, n),
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
        prev = line.hash;
        n = expected;
    }
    if let Some(h) = head {
        if !signature_ok(
            key,
            &sig_message(HEAD_DOMAIN, &[&h.seq.to_be_bytes(), h.hash.as_bytes()]),
            &h.sig,
        ) {
            return broken(h.seq, Broken::BadHead, n);
        }
        if h.seq != n || h.hash != prev {
            return broken(n + 1, Broken::Truncated, n);
        }
    }
    Verdict {
        ok: true,
        entries: n,
        head: (n > 0).then_some(prev),
        broken_at: None,
        reason: None,
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
    let bytes = hex::decode(key_hex.trim())
        .map_err(|_| "the node key is not hex (see `skillbox peers` or GET /ledger's nodeKey)")?;
    let arr = <[u8; 32]>::try_from(bytes.as_slice())
        .map_err(|_| "the node key must be 32 bytes (64 hex digits)")?;
    let key = VerifyingKey::from_bytes(&arr).map_err(|_| "the node key is not an Ed25519 key")?;
    Ok(verify(parse_jsonl(text), &key, None))
}

// ---- the store's edge

/// Append `entry` (its `seq` and `prev` are set here) inside the caller's transaction, and move
/// the signed head: the entry lands with the call transition it records, or not at all.
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
    let mut names: Vec<&str> = line.entry.sources.iter().map(String::as_str).collect();
    names.extend(line.entry.items.iter().filter_map(|i| i.source.as_deref()));
    names.sort_unstable();
    names.dedup();
    for name in names {
        tx.execute(
            "INSERT INTO ledger_sources (name, seq) VALUES (?1, ?2)",
            params![name, seq as i64],
        )?;
    }
    let head = sign_head(seq, &line.hash, key);
    let head_text =
        serde_json::to_vec(&head).map_err(|e| NodeError::invalid("ledger", e.to_string()))?;
    tx.execute(
        "INSERT INTO meta (key, value) VALUES (?1, ?2)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        params![HEAD_KEY, head_text],
    )?;
    Ok(line)
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

fn read_line(r: &rusqlite::Row<'_>) -> rusqlite::Result<(String, String, String)> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
}

fn to_line((entry, hash, sig): (String, String, String)) -> Option<Line> {
    Some(Line {
        entry: serde_json::from_str(&entry).ok()?,
        hash,
        sig,
    })
}

/// Entries in order, filtered. An entry whose stored text does not parse is left out here
/// (and named by [`verify_store`]).
pub fn list(store: &Store, f: &Filter) -> Result<Vec<Line>> {
    store.read(|c| {
        let mut stmt = c.prepare(
            "SELECT entry, hash, sig FROM ledger
             WHERE (?1 IS NULL OR seq IN (SELECT seq FROM ledger_sources WHERE name = ?1))
               AND (?2 IS NULL OR peer = ?2)
               AND (?3 IS NULL OR call_id = ?3)
               AND (?4 IS NULL OR at >= ?4)
             ORDER BY seq
             LIMIT ?5",
        )?;
        let limit = f.limit.map(|l| l as i64).unwrap_or(-1);
        let rows = stmt
            .query_map(
                params![
                    f.source,
                    f.peer,
                    f.call,
                    f.since_ms.map(|s| s as i64),
                    limit
                ],
                read_line,
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows.into_iter().filter_map(to_line).collect())
    })
}

/// The signed head, if any entry was ever written.
pub fn head(store: &Store) -> Result<Option<Head>> {
    store.read(|c| {
        let v: Option<Vec<u8>> = c
            .query_row(
                "SELECT value FROM meta WHERE key = ?1",
                params![HEAD_KEY],
                |r| r.get(0),
            )
            .optional()?;
        Ok(v.and_then(|b| serde_json::from_slice(&b).ok()))
    })
}

/// Verify the node's own ledger against the node key and the stored head. A head that exists but
/// does not parse counts as a cut ledger.
pub fn verify_store(store: &Store, key: &VerifyingKey) -> Result<Verdict> {
    let rows = store.read(|c| {
        let mut stmt = c.prepare("SELECT entry, hash, sig FROM ledger ORDER BY seq")?;
        let rows = stmt
            .query_map([], read_line)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    })?;
    let head_present: bool = store.read(|c| {
        Ok(c.query_row(
            "SELECT count(*) FROM meta WHERE key = ?1",
            params![HEAD_KEY],
            |r| r.get::<_, i64>(0),
        )? > 0)
    })?;
    let head = head(store)?;
    if head_present && head.is_none() {
        return Ok(Verdict {
            ok: false,
            entries: rows.len() as u64,
            head: None,
            broken_at: Some(0),
            reason: Some(Broken::BadHead),
        });
    }
    let v = verify(rows.into_iter().map(to_line), key, head.as_ref());
    // The head is written with every entry: entries without one means it went with the tail.
    if v.ok && head.is_none() && v.entries > 0 {
        return Ok(Verdict {
            ok: false,
            head: None,
            broken_at: Some(v.entries + 1),
            reason: Some(Broken::Truncated),
            ..v
        });
    }
    Ok(v)
}

/// The last consent decision recorded for this call and side: (`allow`/`deny`, who decided).
pub fn last_decision(store: &Store, call: &str, role: &str) -> Result<Option<(String, String)>> {
    let text: Option<String> = store.read(|c| {
        Ok(c.query_row(
            "SELECT entry FROM ledger WHERE call_id = ?1 AND role = ?2 AND kind = 'decision'
             ORDER BY seq DESC LIMIT 1",
            params![call, role],
            |r| r.get(0),
        )
        .optional()?)
    })?;
    Ok(text
        .and_then(|t| serde_json::from_str::<Entry>(&t).ok())
        .map(|e| (e.decision, e.decided_by)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: EntryKind, call: &str, sources: &[&str]) -> Entry {
        Entry {
            seq: 0,
            at: 1_700_000_000_000,
            kind,
            call: call.into(),
            role: "caller".into(),
            peer: "12D3KooWPeer".into(),
            skill: "taste".into(),
            box_url: Some("http://127.0.0.1:7000".into()),
            platform: Some("insecure-dev".into()),
            measurement: Some("ab".repeat(32)),
            hardware_isolation: false,
            provider: Some("local".into()),
            provider_host: None,
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
                EntryKind::Decision => vec![],
            },
            prev: String::new(),
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

    fn raw(store: &Store, sql: &str) {
        store
            .write(|tx| {
                tx.execute_batch("DROP TRIGGER ledger_no_update; DROP TRIGGER ledger_no_delete;")?;
                tx.execute_batch(sql)?;
                Ok(())
            })
            .expect("raw edit");
    }

    #[test]
    fn an_untouched_ledger_verifies_and_chains() {
        let (store, key) = store_with(6);
        let v = verify_store(&store, &key.verifying_key()).expect("verify");
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
        let (s, k) = store_with(4);
        raw(
            &s,
            "UPDATE ledger SET entry = replace(entry, '12D3KooWPeer', '12D3KooWOther') WHERE seq = 2",
        );
        let v = verify_store(&s, &vk(&k)).expect("verify");
        assert_eq!(
            (v.ok, v.broken_at, v.reason),
            (false, Some(2), Some(Broken::HashMismatch))
        );
        // A removed middle entry.
        let (s, k) = store_with(4);
        raw(&s, "DELETE FROM ledger WHERE seq = 2");
        let v = verify_store(&s, &vk(&k)).expect("verify");
        assert_eq!(
            (v.broken_at, v.reason),
            (Some(2), Some(Broken::SequenceGap))
        );
        // Two entries swapped in place (each row keeps its text, the order changes).
        let (s, k) = store_with(4);
        raw(
            &s,
            "UPDATE ledger SET seq = 100 WHERE seq = 2; UPDATE ledger SET seq = 2 WHERE seq = 3;
             UPDATE ledger SET seq = 3 WHERE seq = 100;",
        );
        let v = verify_store(&s, &vk(&k)).expect("verify");
        assert_eq!(
            (v.broken_at, v.reason),
            (Some(2), Some(Broken::SequenceGap))
        );
        // A cut tail (the head still says 4).
        let (s, k) = store_with(4);
        raw(&s, "DELETE FROM ledger WHERE seq >= 3");
        let v = verify_store(&s, &vk(&k)).expect("verify");
        assert_eq!((v.entries, v.reason), (2, Some(Broken::Truncated)));
        // The tail and the head removed together.
        let (s, k) = store_with(4);
        raw(
            &s,
            "DELETE FROM ledger WHERE seq >= 3; DELETE FROM meta WHERE key = 'ledger_head'",
        );
        assert_eq!(
            verify_store(&s, &vk(&k)).expect("verify").reason,
            Some(Broken::Truncated)
        );
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
        assert_eq!(
            names(Filter {
                source: Some("diary".into()),
                ..Filter::default()
            }),
            ["c2"]
        );
        assert_eq!(
            names(Filter {
                peer: Some("12D3KooWPeer".into()),
                ..Filter::default()
            }),
            ["c1"]
        );
        assert_eq!(
            names(Filter {
                since_ms: Some(1500),
                ..Filter::default()
            }),
            ["c2"]
        );
        assert_eq!(
            names(Filter {
                call: Some("c1".into()),
                ..Filter::default()
            }),
            ["c1"]
        );
        assert!(
            names(Filter {
                source: Some("nothing".into()),
                ..Filter::default()
            })
            .is_empty()
        );
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
        assert!(
            verify_store(&store, &key.verifying_key())
                .expect("verify")
                .ok
        );
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
