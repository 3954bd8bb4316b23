//! Point-to-point call payloads: signed envelopes, and the receiving side's checks (pure).

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

use libp2p::PeerId;
use libp2p::identity::Keypair;
use serde::{Deserialize, Serialize};

use crate::PeersError;
use crate::advert::{key_of_peer, public_key_hex};
use crate::rate::Buckets;

/// 2: envelopes carry `pad` and are padded to size buckets ([`padded_size`]). 3: the signature
/// covers the envelope's canonical text with an empty `pad` ([`SignedPayload::sign`]).
pub const PAYLOAD_VERSION: u32 = 3;
const PAYLOAD_DOMAIN: &[u8] = b"skillbox/payload/v3\n";
/// Default size limit of one signed envelope: a bucket itself, so whatever fits unpadded
/// still fits padded.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 1024 * 1024;
/// The smallest size bucket of a signed envelope. Noise and QUIC hide a payload's bytes, not
/// its length, and the calls' own messages differ by size (measured, envelope + signature:
/// `call.failed` ~520, `call.accepted` ~700, `call.session` ~540 without and ~2,100 with an
/// insecure-dev attestation, ~9,700 with SEV-SNP's, ~8,300 with Nitro's, `call.request` ~2,300
/// for a small program): at 16 KiB all of them are one bucket, so a path observer or a relay
/// cannot tell a request from an acceptance, a refusal from an acceptance, or one of these
/// platforms from another. TDX's collateral (~24-33 KB) and GPU evidence (~10 KB a GPU) still
/// go to a larger bucket.
pub const MIN_PADDED_BYTES: usize = 16 * 1024;
/// An Ed25519 signature in lowercase hex: the part of [`SignedPayload::size`] besides the
/// envelope.
const SIGNATURE_HEX_LEN: usize = 128;
const MAX_CALL_ID_LEN: usize = 128;
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// The payload types of the calls protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PayloadKind {
    #[serde(rename = "call.request")]
    CallRequest,
    #[serde(rename = "call.accepted")]
    CallAccepted,
    #[serde(rename = "call.failed")]
    CallFailed,
    #[serde(rename = "call.session")]
    CallSession,
}

impl PayloadKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PayloadKind::CallRequest => "call.request",
            PayloadKind::CallAccepted => "call.accepted",
            PayloadKind::CallFailed => "call.failed",
            PayloadKind::CallSession => "call.session",
        }
    }
}

/// What the calls layer sends: the body is its own business (programs, signatures, codes).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Payload {
    #[serde(rename = "type")]
    pub kind: PayloadKind,
    pub call_id: String,
    pub body: serde_json::Value,
}

/// The signed part: who sends what to whom, when, and a per-sender sequence number that
/// makes each envelope unique (the de-duplication key is `(sender, seq)`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Envelope {
    pub v: u32,
    #[serde(rename = "type")]
    pub kind: PayloadKind,
    pub call_id: String,
    pub sender: String,
    /// Lowercase hex of the sender's 32-byte Ed25519 node key.
    pub sender_key: String,
    /// Binding the recipient stops a payload being replayed to a third node.
    pub recipient: String,
    pub seq: u64,
    /// Unix milliseconds when signed.
    pub time: u64,
    pub body: serde_json::Value,
    /// ASCII `0`s bringing the signed payload to its size bucket ([`padded_size`]). Signed as
    /// empty: its length is a function of the rest (the bucket of the text without it), so
    /// checking on receipt that it is all zeros and exactly as long as the bucket needs leaves
    /// nobody on the way a pad to change, and the sender none to carry anything in.
    pub pad: String,
}

/// The size a signed payload of `unpadded` bytes (envelope and signature) is padded to: the next
/// power of two, at least [`MIN_PADDED_BYTES`]. Powers of two, as the box's stakes and answers
/// are padded: at most twice the bytes, and a message's size says only its bucket.
pub fn padded_size(unpadded: usize) -> Option<usize> {
    Some(unpadded.checked_next_power_of_two()?.max(MIN_PADDED_BYTES))
}

/// Where a pad's zeros go in the canonical text of an envelope signed with an empty `pad`: after
/// the `"pad":"` of this, its last occurrence. Its quotes are all unescaped, so every match is
/// the JSON's own structure, never a string's content; JCS writes the members sorted, and after
/// the envelope's `pad` come only `recipient`, `sender`, `senderKey`, `seq`, `time`, `type` and
/// `v` (strings and numbers, no objects), so the last match is the envelope's own `pad`, not
/// one in its `body`.
const EMPTY_PAD: &str = "\"pad\":\"\",\"recipient\":\"";

/// The offset in `unpadded` (an envelope's canonical text with an empty `pad`) where its pad's
/// zeros go.
fn pad_offset(unpadded: &str) -> Option<usize> {
    Some(unpadded.rfind(EMPTY_PAD)? + "\"pad\":\"".len())
}

/// What follows the pad's zeros in an envelope's canonical text: the member after `pad`.
const AFTER_PAD: &str = "\",\"recipient\":\"";

/// The run of ASCII `0`s before the last [`AFTER_PAD`] of `text`, `(start, length)`: the
/// envelope's own pad in a canonical text (after it come only `recipient`…`v`, strings and
/// numbers, which hold no unescaped `"`), some other run or none in a text of another form.
/// Found from the end: the members after the pad are a few hundred bytes, and the zeros are
/// counted a chunk at a time.
fn pad_run(text: &str) -> (usize, usize) {
    let end = text.rfind(AFTER_PAD).unwrap_or(0);
    let len = trailing_zeros(&text.as_bytes()[..end]);
    (end - len, len)
}

/// Checks that a signed payload of `size` bytes is padded and nothing else, given `cut`, its text
/// with the run of `pad_len` zeros at `at` ([`pad_run`]) taken out, and `envelope`, parsed from
/// `cut`: the pad left in `envelope` must be empty (else data was there: `bad_padding` if it is
/// not zeros), `cut` must be the canonical text of `envelope` (an empty `pad`) and `at` its
/// pad's place — so the text is exactly that canonical text with those zeros in the pad, every
/// zero as one byte: no escapes, no reordered members, no second `"pad"` in the body standing in
/// for it — and the pad exactly as long as the bucket of the rest needs. On the parsed value, not
/// by searching the text for `"pad":"`, which a body holding that text could answer. All before
/// the signature is checked: the signature covers `cut`, not the zeros; this check pins them
/// instead (their length is a function of what is signed, their bytes fixed).
fn check_padding(
    cut: &str,
    at: usize,
    envelope: &Envelope,
    pad_len: usize,
    size: usize,
) -> Result<(), PayloadRefusal> {
    if !envelope.pad.bytes().all(|b| b == b'0') {
        return Err(PayloadRefusal::BadPadding("padding is not zeros"));
    }
    let canonical = envelope.pad.is_empty()
        && skillbox_jcs::to_string(envelope).ok().as_deref() == Some(cut)
        && pad_offset(cut) == Some(at);
    if !canonical {
        return Err(PayloadRefusal::Malformed(
            "envelope is not in canonical form".into(),
        ));
    }
    if padded_size(size.saturating_sub(pad_len)) != Some(size) {
        return Err(PayloadRefusal::BadPadding(
            "payload is not padded to its size bucket",
        ));
    }
    Ok(())
}

/// An envelope whose form and padding passed, with the text its signature covers.
struct Parsed {
    envelope: Envelope,
    /// The envelope's canonical text with an empty `pad`: what the signature covers.
    unpadded: String,
    /// The zeros of its pad on the wire.
    pad_len: usize,
}

/// The wire form: the envelope's canonical JSON text and a hex Ed25519 signature over it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedPayload {
    pub envelope: String,
    pub signature: String,
}

/// A payload that passed every check, handed to the calls logic.
#[derive(Clone, Debug, PartialEq)]
pub struct IncomingPayload {
    /// The sender (authenticated by the transport and by the signature).
    pub from: PeerId,
    pub payload: Payload,
    pub seq: u64,
    /// When the sender signed it, unix milliseconds.
    pub sent_at: u64,
    /// The signed bytes as received, for a record that must prove who said what.
    pub signed: SignedPayload,
}

/// Per-sender sequence numbers: time-based in microseconds, so they keep increasing after a
/// restart, and strictly increasing within a run.
#[derive(Debug, Default)]
pub struct SeqClock {
    last: u64,
}

impl SeqClock {
    pub fn next(&mut self, now_us: u64) -> u64 {
        self.last = now_us.max(self.last + 1).min(MAX_SAFE_INTEGER);
        self.last
    }

    /// Sign `payload` for `recipient` with this sender's next sequence number and the time now:
    /// how every transport signs what it sends.
    pub fn sign_next(
        clock: &std::sync::Mutex<SeqClock>,
        keypair: &Keypair,
        recipient: &PeerId,
        payload: &Payload,
    ) -> Result<SignedPayload, PeersError> {
        let seq = clock
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .next(crate::time::unix_us());
        SignedPayload::sign(keypair, recipient, payload, seq, crate::time::unix_ms())
    }
}

impl SignedPayload {
    /// Sign `payload` for `recipient` with the sender's node key.
    pub fn sign(
        keypair: &Keypair,
        recipient: &PeerId,
        payload: &Payload,
        seq: u64,
        time_ms: u64,
    ) -> Result<SignedPayload, PeersError> {
        check_call_id(&payload.call_id).map_err(PeersError::InvalidPayload)?;
        if seq > MAX_SAFE_INTEGER || time_ms > MAX_SAFE_INTEGER {
            return Err(PeersError::InvalidPayload("seq/time beyond 2^53".into()));
        }
        let envelope = Envelope {
            v: PAYLOAD_VERSION,
            kind: payload.kind,
            call_id: payload.call_id.clone(),
            sender: keypair.public().to_peer_id().to_base58(),
            sender_key: public_key_hex(keypair)?,
            recipient: recipient.to_base58(),
            seq,
            time: time_ms,
            body: payload.body.clone(),
            pad: String::new(),
        };
        // Signed with an empty pad: Ed25519 hashes what it signs twice over, and the zeros are
        // most of a padded payload (a ~600-byte message in 16 KiB). The zeros then go into the
        // text at the pad (they need no escaping, so each adds one byte); the receiver
        // recomputes their exact count from the rest and refuses any other.
        let unpadded = skillbox_jcs::to_string(&envelope).map_err(|e| {
            PeersError::InvalidPayload(format!("body cannot be canonicalized: {e}"))
        })?;
        let unpadded_size = unpadded.len() + SIGNATURE_HEX_LEN;
        let target = padded_size(unpadded_size)
            .ok_or_else(|| PeersError::InvalidPayload("payload too large to pad".into()))?;
        let at = pad_offset(&unpadded)
            .ok_or_else(|| PeersError::InvalidPayload("envelope has no pad".into()))?;
        let mut msg = Vec::with_capacity(PAYLOAD_DOMAIN.len() + unpadded.len());
        msg.extend_from_slice(PAYLOAD_DOMAIN);
        msg.extend_from_slice(unpadded.as_bytes());
        let signature = keypair
            .sign(&msg)
            .map_err(|e| PeersError::InvalidKey(e.to_string()))?;
        let signature = hex::encode(signature);
        Ok(PadElided {
            text: unpadded,
            pad_at: at,
            pad_len: target - unpadded_size,
            signature,
        }
        .padded())
    }

    /// Size as the receiver counts it.
    pub fn size(&self) -> usize {
        self.envelope.len() + self.signature.len()
    }

    /// Verify the signature and the sender's key; returns the envelope. No freshness checks.
    pub fn open(&self) -> Result<Envelope, PayloadRefusal> {
        let parsed = self.parse()?;
        self.verify(&parsed)?;
        let mut envelope = parsed.envelope;
        envelope.pad = "0".repeat(parsed.pad_len);
        Ok(envelope)
    }

    /// The first half of [`Self::open`]: the envelope's form and padding, nothing decoded or
    /// verified.
    fn parse(&self) -> Result<Parsed, PayloadRefusal> {
        // Parsed without its run of zeros: the parser would scan and copy every one of them (a
        // third of a padded payload's receive time).
        let text = &self.envelope;
        let (at, pad_len) = pad_run(text);
        let mut cut = String::with_capacity(text.len() - pad_len);
        cut.push_str(&text[..at]);
        cut.push_str(&text[at + pad_len..]);
        let envelope: Envelope =
            serde_json::from_str(&cut).map_err(|e| PayloadRefusal::Malformed(e.to_string()))?;
        if envelope.v != PAYLOAD_VERSION {
            return Err(PayloadRefusal::Malformed(format!(
                "unsupported version {}",
                envelope.v
            )));
        }
        check_call_id(&envelope.call_id).map_err(PayloadRefusal::Malformed)?;
        check_padding(&cut, at, &envelope, pad_len, self.size())?;
        Ok(Parsed {
            envelope,
            unpadded: cut,
            pad_len,
        })
    }

    /// The second half of [`Self::open`]: the sender's key (a point decompression) and the
    /// signature (an Ed25519 verification) of the envelope [`Self::parse`] read, over its text
    /// with an empty pad.
    fn verify(&self, parsed: &Parsed) -> Result<(), PayloadRefusal> {
        let envelope = &parsed.envelope;
        let key = key_of_peer(&envelope.sender_key).map_err(PayloadRefusal::Malformed)?;
        if *key.peer_text != envelope.sender {
            return Err(PayloadRefusal::SenderMismatch(format!(
                "key belongs to {}, envelope names {}",
                key.peer, envelope.sender
            )));
        }
        let public = key.public;
        let signature = hex::decode(&self.signature).map_err(|_| PayloadRefusal::BadSignature)?;
        let mut msg = Vec::with_capacity(PAYLOAD_DOMAIN.len() + parsed.unpadded.len());
        msg.extend_from_slice(PAYLOAD_DOMAIN);
        msg.extend_from_slice(parsed.unpadded.as_bytes());
        if !public.verify(&msg, &signature) {
            return Err(PayloadRefusal::BadSignature);
        }
        Ok(())
    }
}

/// A signed payload held without its padding's zeros: what waits in a send queue. Padded, a
/// payload is at least [`MIN_PADDED_BYTES`] (a `call.failed` of ~520 bytes takes 16 KiB), so a
/// queue of thousands to a peer that never answers held ~30x the bytes its messages have. The
/// zeros are written back, byte for byte, only when the payload goes onto a stream
/// ([`Self::padded`]); the signature covers the text without them, and the receiver checks they
/// are exactly the zeros that text's bucket needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PadElided {
    /// The envelope text with the run of zeros at `pad_at` taken out.
    text: String,
    pad_at: usize,
    pad_len: usize,
    signature: String,
}

impl PadElided {
    /// Takes the pad's zeros out of `signed`. Lossless whatever `signed` holds: the run of zeros
    /// before the `recipient` member (the envelope's own `pad` in the canonical text a node
    /// signs, where `recipient` is the member after it) is cut and [`Self::padded`] puts the
    /// same count back at the same place; in a text of any other form less or nothing is cut,
    /// and it is still given back as it was. Found from the end: the members after the pad are
    /// a few hundred bytes, and the zeros are counted a chunk at a time (0.4 us; a search from the
    /// pad's start and a count a byte at a time took 21 us for 16 KiB; see the payload bench).
    pub fn new(signed: SignedPayload) -> PadElided {
        let SignedPayload {
            envelope: mut text,
            signature,
        } = signed;
        let (pad_at, pad_len) = pad_run(&text);
        text.replace_range(pad_at..pad_at + pad_len, "");
        text.shrink_to_fit();
        PadElided {
            text,
            pad_at,
            pad_len,
            signature,
        }
    }

    /// The signed payload as it was signed, zeros and all: built for the stream, dropped after.
    pub fn padded(&self) -> SignedPayload {
        let mut envelope = String::with_capacity(self.text.len() + self.pad_len);
        envelope.push_str(&self.text[..self.pad_at]);
        // A kibibyte of zeros at a time: one copy each, not a push per char.
        const ZEROS: &str = match str::from_utf8(&[b'0'; 1024]) {
            Ok(zeros) => zeros,
            Err(_) => panic!("ASCII zeros are UTF-8"),
        };
        let mut left = self.pad_len;
        while left > 0 {
            let n = left.min(ZEROS.len());
            envelope.push_str(&ZEROS[..n]);
            left -= n;
        }
        envelope.push_str(&self.text[self.pad_at..]);
        SignedPayload {
            envelope,
            signature: self.signature.clone(),
        }
    }

    /// The bytes this holds (its texts' capacity), what a send queue counts.
    pub fn held_bytes(&self) -> usize {
        self.text.capacity() + self.signature.capacity()
    }
}

/// How many ASCII `0`s `bytes` ends with, compared 32 bytes at a time.
fn trailing_zeros(bytes: &[u8]) -> usize {
    const ZEROS: [u8; 32] = [b'0'; 32];
    let mut rest = bytes;
    let mut count = 0;
    while let Some((head, chunk)) = rest.split_last_chunk::<32>() {
        if *chunk != ZEROS {
            break;
        }
        count += 32;
        rest = head;
    }
    count + rest.iter().rev().take_while(|b| **b == b'0').count()
}

fn check_call_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_CALL_ID_LEN {
        return Err(format!(
            "call id must be 1..={MAX_CALL_ID_LEN} bytes, got {}",
            id.len()
        ));
    }
    if id.chars().any(|c| c.is_control()) {
        return Err("call id contains control characters".into());
    }
    Ok(())
}

/// Why a received payload was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PayloadRefusal {
    #[error("payload of {size} bytes exceeds the limit of {max} bytes")]
    TooLarge { size: usize, max: usize },
    #[error("malformed payload: {0}")]
    Malformed(String),
    #[error("bad signature")]
    BadSignature,
    #[error("sender mismatch: {0}")]
    SenderMismatch(String),
    #[error("payload is addressed to {recipient}, not to this node")]
    WrongRecipient { recipient: String },
    #[error("payload time {time} is outside the accepted window (now {now})")]
    OutOfWindow { time: u64, now: u64 },
    /// The padding is not zeros, or not the length its size bucket needs.
    #[error("bad padding: {0}")]
    BadPadding(&'static str),
}

impl PayloadRefusal {
    /// The closed code a sender is told: the refusal's details (a parser's message quoting the
    /// payload, the node's clock, the addressee) stay with the receiver.
    pub fn code(&self) -> &'static str {
        match self {
            PayloadRefusal::TooLarge { .. } => "too_large",
            PayloadRefusal::Malformed(_) => "malformed",
            PayloadRefusal::BadSignature => "bad_signature",
            PayloadRefusal::SenderMismatch(_) => "sender_mismatch",
            PayloadRefusal::WrongRecipient { .. } => "wrong_recipient",
            PayloadRefusal::OutOfWindow { .. } => "out_of_window",
            PayloadRefusal::BadPadding(_) => "bad_padding",
        }
    }
}

/// The codes [`Ack::Refused`] may carry.
pub const REFUSAL_CODES: [&str; 7] = [
    "too_large",
    "malformed",
    "bad_signature",
    "sender_mismatch",
    "wrong_recipient",
    "out_of_window",
    "bad_padding",
];

/// A receiver's refusal reason as this node takes it: one of [`REFUSAL_CODES`], or `other`
/// for anything else a peer wrote there (it reaches this node's logs and errors, and a hostile
/// receiver writes what it likes).
pub fn refusal_code(reason: &str) -> &'static str {
    REFUSAL_CODES
        .into_iter()
        .find(|c| *c == reason)
        .unwrap_or("other")
}

/// The answer a receiver gives a sender.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ack", rename_all = "camelCase")]
pub enum Ack {
    /// Taken and handed to the calls logic.
    Delivered,
    /// Seen before: acknowledged, changes nothing, not handed on again.
    Duplicate,
    /// Refused for good: retrying the same bytes cannot help. `reason`: a closed code
    /// ([`PayloadRefusal::code`]).
    Refused { reason: String },
    /// Over this sender's rate: retry later.
    RateLimited,
    /// The receiver's queue is full: retry later.
    Busy,
}

/// Default of [`InboxConfig::max_remembered`]: about 64 MiB of `(sender, seq)` entries, room for
/// ~430 payloads a second, every second of a 10-minute window, from all peers together.
pub const DEFAULT_MAX_REMEMBERED: usize = 262_144;

/// Receiving-side limits.
#[derive(Clone, Debug)]
pub struct InboxConfig {
    pub max_payload_bytes: usize,
    /// How old an envelope may be; de-duplication remembers envelopes this long.
    pub replay_window_ms: u64,
    /// Envelopes the de-duplication memory holds at most, from all senders together. The rate
    /// bounds each sender, but sender ids cost nothing: without this, a flood of fresh ids
    /// grew the memory without bound. When it is full a new payload is still taken, and the
    /// oldest entry of the sender holding the most is forgotten (among equals, the one whose
    /// oldest entry arrived first). Refusing instead (`busy`) let ~22 ids at their rate keep
    /// every other peer's payloads out for good. Forgetting is safe for everyone else: an
    /// envelope is taken only from its own sender (the transport's peer), so a forgotten entry
    /// lets only that sender deliver its own payload again — which it could sign anew anyway.
    /// A heavy sender forgets its own first; under a flood of one-entry ids every entry is kept
    /// for at least as many arrivals after it as the memory holds, whatever its sender's id.
    pub max_remembered: usize,
    pub max_skew_ms: u64,
    /// Token bucket per sender: sustained payloads per second and burst.
    pub rate_per_sec: f64,
    pub burst: f64,
}

impl Default for InboxConfig {
    fn default() -> Self {
        InboxConfig {
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            replay_window_ms: 10 * 60 * 1000,
            max_remembered: DEFAULT_MAX_REMEMBERED,
            max_skew_ms: 30_000,
            rate_per_sec: 20.0,
            burst: 100.0,
        }
    }
}

/// The outcome of receiving one signed payload.
#[derive(Clone, Debug, PartialEq)]
pub enum Received {
    New(Box<IncomingPayload>),
    Duplicate,
    Refused(PayloadRefusal),
    RateLimited,
}

impl Received {
    pub fn ack(&self) -> Ack {
        match self {
            Received::New(_) => Ack::Delivered,
            Received::Duplicate => Ack::Duplicate,
            Received::Refused(r) => Ack::Refused {
                reason: r.code().to_owned(),
            },
            Received::RateLimited => Ack::RateLimited,
        }
    }
}

/// The receiving side's state: replay memory and rate buckets. Pure; `now` is passed in.
pub struct Inbox {
    local: PeerId,
    config: InboxConfig,
    seen: Remembered,
    buckets: Buckets,
}

/// The de-duplication memory: `(sender, seq)` of every envelope taken in the window, each
/// sender's in arrival order (its oldest first: what goes when the memory is full, or when the
/// window passes), and the senders by how many they hold, then by how long ago their oldest
/// entry arrived.
#[derive(Default)]
struct Remembered {
    seen: HashSet<(PeerId, u64)>,
    /// Per sender: `(until, seq, arrival)`, oldest first.
    senders: HashMap<PeerId, VecDeque<(u64, u64, u64)>>,
    /// `(entries held, Reverse(arrival of its oldest), sender)`: the last is the sender holding
    /// the most and, among those, the one whose oldest entry arrived first. Ties among equal
    /// counts went by `PeerId` before, which a sender chooses freely: a flood of one-entry ids
    /// that sort low made every honest light sender's entry the one forgotten at each insert.
    /// Arrival order is the node's own (not the envelope's time, which the sender sets).
    by_count: BTreeSet<(usize, Reverse<u64>, PeerId)>,
    /// Entries taken so far: the next entry's arrival stamp.
    arrivals: u64,
    /// When every sender's expired entries are next dropped (one pass a second at most).
    next_sweep_ms: u64,
}

impl Remembered {
    fn len(&self) -> usize {
        self.seen.len()
    }

    fn contains(&self, key: &(PeerId, u64)) -> bool {
        self.seen.contains(key)
    }

    /// `peer`'s place in [`Self::by_count`], if it holds any entry.
    fn rank(&self, peer: &PeerId) -> Option<(usize, Reverse<u64>, PeerId)> {
        let queue = self.senders.get(peer)?;
        let &(_, _, oldest) = queue.front()?;
        Some((queue.len(), Reverse(oldest), *peer))
    }

    fn insert(&mut self, peer: PeerId, seq: u64, until: u64) {
        if let Some(rank) = self.rank(&peer) {
            self.by_count.remove(&rank);
        }
        let arrival = self.arrivals;
        self.arrivals += 1;
        self.senders
            .entry(peer)
            .or_default()
            .push_back((until, seq, arrival));
        if let Some(rank) = self.rank(&peer) {
            self.by_count.insert(rank);
        }
        self.seen.insert((peer, seq));
    }

    /// Forget `peer`'s oldest entry if `expired_by` says so (`None`: whatever its age).
    fn pop_oldest(&mut self, peer: &PeerId, expired_by: Option<u64>) -> bool {
        let Some(rank) = self.rank(peer) else {
            return false;
        };
        let Some(queue) = self.senders.get_mut(peer) else {
            return false;
        };
        let Some(&(until, seq, _)) = queue.front() else {
            return false;
        };
        if expired_by.is_some_and(|now| until > now) {
            return false;
        }
        queue.pop_front();
        if queue.is_empty() {
            self.senders.remove(peer);
        }
        self.by_count.remove(&rank);
        if let Some(rank) = self.rank(peer) {
            self.by_count.insert(rank);
        }
        self.seen.remove(&(*peer, seq));
        true
    }

    /// Make room for one: the oldest entry of the sender holding the most goes (among equals,
    /// the sender whose oldest entry arrived first, so every entry is kept for as many arrivals
    /// after it whoever sent it).
    fn evict_one(&mut self) {
        if let Some(&(_, _, peer)) = self.by_count.last() {
            self.pop_oldest(&peer, None);
        }
    }

    /// Drop entries past their window: `from`'s at every payload, everyone's once a second.
    fn forget_old(&mut self, from: &PeerId, now_ms: u64) {
        while self.pop_oldest(from, Some(now_ms)) {}
        if now_ms < self.next_sweep_ms {
            return;
        }
        self.next_sweep_ms = now_ms.saturating_add(1000);
        let peers: Vec<PeerId> = self.senders.keys().copied().collect();
        for peer in peers {
            while self.pop_oldest(&peer, Some(now_ms)) {}
        }
    }
}

impl Inbox {
    pub fn new(local: PeerId, config: InboxConfig) -> Inbox {
        let buckets = Buckets::new(config.rate_per_sec, config.burst);
        Inbox {
            local,
            config,
            seen: Remembered::default(),
            buckets,
        }
    }

    pub fn config(&self) -> &InboxConfig {
        &self.config
    }

    /// Check one payload that `from` (the transport-authenticated peer) sent.
    pub fn receive(&mut self, from: &PeerId, signed: &SignedPayload, now_ms: u64) -> Received {
        self.seen.forget_old(from, now_ms);
        let size = signed.size();
        if size > self.config.max_payload_bytes {
            return Received::Refused(PayloadRefusal::TooLarge {
                size,
                max: self.config.max_payload_bytes,
            });
        }
        // The transport-authenticated peer pays for every payload it sends, refused or not,
        // before anything is parsed, decoded or verified: a peer sending garbage, other nodes'
        // envelopes or bad signatures gets its rate's worth of work out of this node and then
        // `RateLimited`, as one sending good payloads does. (A duplicate costs a token too.)
        if !self.take_token(from, now_ms) {
            return Received::RateLimited;
        }
        let parsed = match signed.parse() {
            Ok(p) => p,
            Err(r) => return Received::Refused(r),
        };
        // Text against text before the key is decoded and the signature checked.
        if parsed.envelope.sender != from.to_base58() {
            return Received::Refused(PayloadRefusal::SenderMismatch(format!(
                "signed by {}, sent by {from}",
                parsed.envelope.sender
            )));
        }
        if let Err(r) = signed.verify(&parsed) {
            return Received::Refused(r);
        }
        let envelope = parsed.envelope;
        if envelope.recipient != self.local.to_base58() {
            return Received::Refused(PayloadRefusal::WrongRecipient {
                recipient: envelope.recipient,
            });
        }
        if envelope.time > now_ms.saturating_add(self.config.max_skew_ms)
            || envelope.time.saturating_add(self.config.replay_window_ms) <= now_ms
        {
            // Outside the window the replay memory may have forgotten it: refuse, never re-deliver.
            return Received::Refused(PayloadRefusal::OutOfWindow {
                time: envelope.time,
                now: now_ms,
            });
        }
        let key = (*from, envelope.seq);
        if self.seen.contains(&key) {
            return Received::Duplicate;
        }
        if self.seen.len() >= self.config.max_remembered {
            self.seen.evict_one();
        }
        self.seen.insert(
            *from,
            envelope.seq,
            envelope.time.saturating_add(self.config.replay_window_ms),
        );
        Received::New(Box::new(IncomingPayload {
            from: *from,
            payload: Payload {
                kind: envelope.kind,
                call_id: envelope.call_id,
                body: envelope.body,
            },
            seq: envelope.seq,
            sent_at: envelope.time,
            signed: signed.clone(),
        }))
    }

    fn take_token(&mut self, from: &PeerId, now_ms: u64) -> bool {
        self.buckets.take(from, now_ms)
    }

    /// Envelopes remembered for de-duplication.
    pub fn remembered(&self) -> usize {
        self.seen.len()
    }
}
