//! Payloads from peers, and the owner's admission of a `call.request`.
//!
//! Everything here is input from another node, so: a payload for a call this node does not
//! hold with that peer is ignored; only closed codes are taken from `call.failed`; a run id is
//! checked for form before use; and an owner row is written only **after** admission (peer
//! lists, rate, the program against the offered skill and the owner's ceilings, the daily call
//! counts) — a stranger's refused request leaves nothing behind.

use serde::Deserialize as _;
use serde_json::Value;
use skillbox_calls::machine::{self, Event, FailureCode, NewCall, Role, State};
use skillbox_jc::JcError;
use skillbox_jc::attest::Attestation;
use skillbox_jc::dsse::{Envelope, EnvelopeSignature, approved_program};
use skillbox_jc::program::{BoxIdentity, PROGRAM_PAYLOAD_TYPE, Program, ProgramHash, decode_hex32};
use skillbox_peers::{IncomingPayload, Payload, PayloadKind, PeerId};

use super::actions::failed_body;
use super::driver::Change;
use super::records::{self, CallRow, Patch};
use super::{Calls, Key, blocking, boxes, lock, now_ms, program};
use crate::error::{NodeError, Result};

/// Why the owner did not admit a request: a closed code for the peer, detail for this node.
struct Refused {
    code: FailureCode,
    detail: String,
}

impl Refused {
    fn new(code: FailureCode, detail: impl Into<String>) -> Refused {
        Refused {
            code,
            detail: detail.into(),
        }
    }
}

/// How long a refusal's delivery may take before it is given up.
const REFUSAL_DELIVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a peer's `coverage_exceeded` waits for the box's own word on the run
/// (`Calls::box_word_first`): a run the box refused at its start has its outcome at once.
const BOX_WORD: std::time::Duration = std::time::Duration::from_secs(5);

/// Calls whose peer's `coverage_exceeded` is checked with the box at once. A peer repeating
/// the payload for one call asks nothing more (one question per call); past this many calls a
/// new one takes the peer's failure at once, unchecked (its outcome still comes from this
/// side's own fetch, and an owner keeps its turn until then: `coverage::Turns`).
pub(super) const MAX_ASKING_BOX: usize = 1_024;

/// Whether a peer's `coverage_exceeded` for a call is checked with the box.
#[derive(Debug, PartialEq, Eq)]
enum Asking {
    /// Not yet: this payload asks.
    Now,
    /// A question for the call is under way: the repeat is dropped, the first one's end
    /// applies the peer's failure.
    Already,
    /// Too many calls are asking: the peer's failure is taken as it is.
    Full,
}

/// Whether `row`'s run may have started at its box: this side submitted it or is submitting.
fn at_the_box(row: &CallRow) -> bool {
    row.call.run_id.is_some() && matches!(row.call.state, State::Submitting | State::Submitted)
}

impl Calls {
    pub(super) async fn on_payload(&self, p: IncomingPayload) {
        // The signed copy is not kept by anything here: dropped now, not when the payload's
        // handling (a refusal's delivery, say) is done.
        let IncomingPayload {
            from,
            payload,
            signed,
            ..
        } = p;
        drop(signed);
        let from = from.to_base58();
        let id = payload.call_id;
        let body = payload.body;
        match payload.kind {
            PayloadKind::CallRequest => self.on_request(&from, &id, body).await,
            PayloadKind::CallAccepted => {
                let key = (id, Role::Caller);
                // The row its last step left (kept in memory while the call is open): no read
                // of the store on a blocking thread per payload (issue 33).
                let Some(row) = self.known_row(&key, &from).await else {
                    return;
                };
                match Self::cosigned(&row, &body) {
                    Ok(text) => {
                        // The owner's half of the nonce the open will ask the attestation for
                        // (taken only in the form of a fresh one).
                        if let Some(half) = body
                            .get("nonce")
                            .and_then(Value::as_str)
                            .filter(|h| skillbox_jc::client::is_nonce_half(h))
                        {
                            lock(&self.0.nonce_halves).insert(key.clone(), half.to_owned());
                        }
                        let change = Change::patch(Patch {
                            program: Some(text),
                            ..Patch::default()
                        });
                        let _ = self.apply(key, Event::PeerAccepted, change).await;
                    }
                    Err(e) => {
                        tracing::warn!(call = %row.call.id, code = e.code(), "call.accepted refused: bad co-signature")
                    }
                }
            }
            PayloadKind::CallSession => {
                let key = (id, Role::Owner);
                let Some(row) = self.known_row(&key, &from).await else {
                    return;
                };
                let url = body
                    .get("box")
                    .and_then(Value::as_str)
                    .map(boxes::normalize_url);
                // A run id goes into the box's URLs: only one of the box's own form is taken.
                let run_id = body
                    .get("runId")
                    .and_then(Value::as_str)
                    .filter(|r| skillbox_jc::error::is_run_id(r));
                let (Some(url), Some(run_id)) = (url, run_id) else {
                    tracing::warn!(call = %row.call.id, "call.session without a box or a well-formed runId");
                    return;
                };
                if self.0.boxes.client(&url).is_none() {
                    let event = Event::BoxFailed {
                        code: FailureCode::BoxUnavailable,
                        message: "the caller's box is not one this node accepts".into(),
                    };
                    let _ = self.apply(key, event, Change::none()).await;
                    return;
                }
                // The attestation the caller's open got for the joint nonce, forwarded: checked
                // here, it is the verified run at once (one step, no round trip to the box).
                // Anything wrong with it and the session is taken as a claim, checked at the
                // box as before.
                // The cheap checks first: the evidence is parsed only for a run the call would
                // take, from a half of the right form.
                let forwarded = body
                    .get("nonce")
                    .and_then(Value::as_str)
                    .filter(|h| skillbox_jc::client::is_nonce_half(h))
                    .filter(|_| machine::owner_takes_run(&row.call, run_id))
                    .zip(body.get("attestation"))
                    .and_then(|(half, a)| Some((half, Attestation::deserialize(a).ok()?)));
                if let Some((half, att)) = &forwarded
                    && let Some((event, change)) =
                        self.verify_forwarded(&row, run_id, &url, (att, half))
                {
                    lock(&self.0.nonce_halves).remove(&key);
                    let _ = self.apply(key, event, change).await;
                    return;
                }
                // The box becomes the call's only with its verified run (`verify_run`): a
                // session naming a new run while the call holds one is a move, and the run it
                // holds stays on its own box until then.
                let event = Event::PeerSession {
                    run_id: run_id.to_owned(),
                    box_url: url,
                };
                let _ = self.apply(key, event, Change::none()).await;
            }
            PayloadKind::CallFailed => {
                // The code only, and only one of ours: the peer's words are never taken.
                let code = body
                    .get("code")
                    .and_then(Value::as_str)
                    .and_then(FailureCode::parse);
                for role in [Role::Caller, Role::Owner] {
                    let key = (id.clone(), role);
                    let Some(row) = self.known_row(&key, &from).await else {
                        continue;
                    };
                    if code == Some(FailureCode::CoverageExceeded) && at_the_box(&row) {
                        match self.ask_the_box(&key) {
                            Asking::Now => {
                                let this = self.clone();
                                tokio::spawn(
                                    async move { this.box_word_first(key, &row, code).await },
                                );
                                continue;
                            }
                            Asking::Already => continue,
                            Asking::Full => {}
                        }
                    }
                    let _ = self
                        .apply(key, Event::PeerFailed { code }, Change::none())
                        .await;
                }
            }
        }
    }

    /// A peer's `coverage_exceeded` for a call whose run may have started: the box's own word
    /// on the run is asked first (bounded), and its outcome taken if it has one — so the call
    /// ends with the box's refusal (and an owner keeps the day refused, `driver::RunEnd`)
    /// however the peer's message and this side's own fetch cross, and a peer's word alone
    /// never makes it so. Then the peer's failure as usual, which a call ended already ignores.
    ///
    /// One at a time per call ([`Calls::ask_the_box`]): a peer repeating the payload at its
    /// payload rate would otherwise start a box request (and a task) per payload, each
    /// counted against this node's own rate at the box.
    async fn box_word_first(&self, key: Key, row: &CallRow, code: Option<FailureCode>) {
        if let Ok(Ok(Some((event, change)))) =
            tokio::time::timeout(BOX_WORD, self.fetch_outcome(row)).await
        {
            let _ = self.apply(key.clone(), event, change).await;
        }
        let _ = self
            .apply(key.clone(), Event::PeerFailed { code }, Change::none())
            .await;
        lock(&self.0.asking_box).remove(&key);
    }

    /// Mark call `key` as asking the box about its peer's `coverage_exceeded`, unless it is
    /// already or too many calls are.
    fn ask_the_box(&self, key: &Key) -> Asking {
        let mut asking = lock(&self.0.asking_box);
        if asking.contains(key) {
            Asking::Already
        } else if asking.len() >= MAX_ASKING_BOX {
            Asking::Full
        } else {
            asking.insert(key.clone());
            Asking::Now
        }
    }

    /// The call `key` if `from` is its peer: the row its last step left, or the store's.
    async fn known_row(&self, key: &Key, from: &str) -> Option<std::sync::Arc<CallRow>> {
        match self.row(key).await {
            Ok(row) => row.filter(|r| r.call.peer == from),
            Err(e) => {
                tracing::warn!(call = %key.0, error = %e, "cannot load call");
                None
            }
        }
    }

    /// Add the owner's signature from `call.accepted` and check the program is now approved.
    fn cosigned(row: &CallRow, body: &Value) -> skillbox_jc::Result<String> {
        let sig: EnvelopeSignature =
            serde_json::from_value(body.get("signature").cloned().unwrap_or(Value::Null))
                .map_err(|e| JcError::Envelope(format!("signature: {e}")))?;
        let mut env = Self::envelope(row)?;
        env.signatures.retain(|s| s.keyid != sig.keyid);
        env.signatures.push(sig);
        approved_program(&env)?;
        String::from_utf8(env.to_json()).map_err(|_| JcError::Internal("envelope JSON".into()))
    }

    /// Tell a peer its request was not taken: the code and its fixed words.
    async fn refuse(&self, to: &str, id: &str, refused: &Refused) {
        tracing::info!(call = %id, code = refused.code.as_str(), "call.request refused");
        tracing::debug!(call = %id, detail = %refused.detail, "call.request refusal detail");
        let Ok(peer) = to.parse::<PeerId>() else {
            return;
        };
        let payload = Payload {
            kind: PayloadKind::CallFailed,
            call_id: id.to_owned(),
            body: failed_body(refused.code),
        };
        // Best effort, and bounded: a peer that sends requests and never takes the refusals
        // (a full inbox, gone) must not keep a task per request for the transport's whole
        // retry schedule (6 attempts, about a minute), at its request rate.
        let send = self.0.transport.send(peer, payload);
        match tokio::time::timeout(REFUSAL_DELIVERY, send).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!(call = %id, error = %e, "call.failed not delivered"),
            Err(_) => tracing::debug!(call = %id, "call.failed not delivered in time"),
        }
    }

    async fn on_request(&self, from: &str, id: &str, body: Value) {
        // An id this node already calls with (the peer learnt it from our own call.request):
        // an owner row beside our caller row would let the human's "let P use my skill" answer,
        // a cancel, a call.failed or retention reach our own call, which stakes our sources.
        // Refused, and nothing is written; a node does not call itself, so no honest request
        // carries one. A row that cannot be read refuses nothing but admits nothing either.
        match self.row(&(id.to_owned(), Role::Caller)).await {
            Ok(None) => {}
            Ok(Some(_)) => {
                drop(body);
                let refused = Refused::new(
                    FailureCode::NotAdmitted,
                    "the call id is one of this node's own calls",
                );
                self.refuse(from, id, &refused).await;
                return;
            }
            Err(e) => {
                tracing::warn!(call = %id, error = %e, "cannot load call");
                return;
            }
        }
        let key = (id.to_owned(), Role::Owner);
        if let Some(row) = self.load(&key).await {
            // A retried request: re-send what the call owes (call.accepted), nothing new.
            if row.call.peer == from {
                let _ = self.apply(key, Event::Resume, Change::none()).await;
            }
            return;
        }
        let admitted = self.admit(from, id, &body).await;
        // The request (up to a payload's size) is not held while its refusal is delivered.
        drop(body);
        match admitted {
            Ok(Some(())) => {}
            Ok(None) => {} // a concurrent duplicate won the race; it carries on
            Err(refused) => self.refuse(from, id, &refused).await,
        }
    }

    /// Admission: parse and verify the request, check it against the offered skill and the
    /// owner's ceilings, co-sign, and only then record the call (`accepted`) — in the same
    /// transaction that counts the skill's calls of the day. `Ok(None)`: already recorded.
    async fn admit(
        &self,
        from: &str,
        id: &str,
        body: &Value,
    ) -> std::result::Result<Option<()>, Refused> {
        let (mut env, program) = parse_request(body, id)?;
        let admission = self
            .0
            .policy
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .admission
            .clone();
        admission
            .admit(&mut lock(&self.0.buckets), from, now_ms())
            .map_err(|r| Refused::new(FailureCode::NotAdmitted, r.to_string()))?;

        let skills = self.0.skills.clone();
        let srcs = self.0.sources.clone();
        let name = program.skill.name.clone();
        let found = blocking(move || {
            let Some((declaration, digest, owner_limits, owner_tokens)) = skills.admitted(&name)?
            else {
                return Ok(None);
            };
            let rec = (declaration, digest);
            let d = &rec.0;
            let state = skills.offer_state(d)?;
            let size = |n: &str| -> Result<u64> { Ok(srcs.meta(n)?.map_or(0, |m| m.size)) };
            let body_len = size(&d.body_source_name())?;
            let model_len = match size(&d.model_source_name())? {
                0 => d.model.as_ref().map_or(0, |m| m.len() as u64),
                n => n,
            };
            let key_len = match &d.key {
                Some(k) => size(k)?,
                None => 0,
            };
            Ok(Some((
                rec,
                (owner_limits, owner_tokens),
                state.offered,
                body_len,
                model_len,
                key_len,
            )))
        })
        .await
        .map_err(|e| Refused::new(FailureCode::NotOffered, format!("skill lookup: {e}")))?;
        let sender_key = from
            .parse::<PeerId>()
            .ok()
            .and_then(|p| skillbox_peers::advert::public_key_hex_of_peer(&p))
            .unwrap_or_default();
        let boxes = self.0.boxes.clone();
        let host_boxes = boxes.clone();
        let accepts = move |b: &BoxIdentity| boxes.accepts_identity(&b.platform, &b.measurement);
        let accepts_host = move |id: &skillbox_skill::ProviderId, host: Option<&str>| {
            host_boxes.accepts_provider_host(id, host)
        };
        let defaults = self.0.ceilings.limits();
        let (decl, (owner_limits, owner_tokens), offered, digest, body_len, model_len, key_len) =
            match &found {
                Some(((declaration, digest), owner, offered, b, m, k)) => (
                    Some(declaration),
                    *owner,
                    *offered,
                    digest.as_str(),
                    *b,
                    *m,
                    *k,
                ),
                None => (None, Default::default(), false, "", 0, 0, 0),
            };
        // The owner's own ceilings as set, the file's held to today's `[ceilings]` (review 26
        // V3: held at import only, a row stored before, or one asking exactly the ceilings of
        // its day, outlived every later tightening).
        let limits = decl.map_or(defaults, |d| {
            crate::skills::in_force(&d.limits, &owner_limits, &defaults)
        });
        // The facts borrow a non-Send closure: checked and dropped before the next await.
        {
            let facts = program::OwnerFacts {
                call_id: id,
                owner_key: &self.0.node_key_hex,
                sender_key: &sender_key,
                declaration: decl,
                offered,
                digest,
                body_len,
                model_len,
                key_len,
                limits,
                accepts_box: &accepts,
                accepts_provider_host: &accepts_host,
                now_secs: now_ms() / 1000,
                max_expiry_secs: self.0.settings.expiry_secs.max(3600),
                guard: self.0.guard.spec_for(&program.provider.id),
                body_max_tokens: owner_tokens.body_allowance(&program.provider.id),
                model_context_tokens: owner_tokens.model_context(&program.provider.id),
            };
            program::check(&program, &facts).map_err(|(code, m)| Refused::new(code, m))?;
        }
        env.sign(&self.0.signing)
            .and_then(|_| approved_program(&env).map(|_| ()))
            .map_err(|e| Refused::new(FailureCode::ProgramMismatch, e.to_string()))?;
        let text = String::from_utf8(env.to_json())
            .map_err(|_| Refused::new(FailureCode::ProgramMismatch, "envelope JSON"))?;

        // The machine's owner path: received, then admitted — only the latter is stored.
        let hash = program
            .to_canonical()
            .map(|b| ProgramHash::of(&b))
            .map_err(|e| Refused::new(FailureCode::ProgramMismatch, e.to_string()))?;
        let received = machine::start(
            Role::Owner,
            NewCall {
                id: id.to_owned(),
                peer: from.to_owned(),
                skill: program.skill.name.clone(),
                program_hash: format!("sha256:{}", hash.to_hex()),
                expires_at_ms: program.expires_at.saturating_mul(1000),
            },
            now_ms(),
            &self.0.timing,
        );
        let t = machine::step(&received.call, Event::Admitted, now_ms(), &self.0.timing);
        debug_assert_eq!(t.call.state, State::Accepted);
        let row = CallRow {
            call: t.call.clone(),
            program: Some(text),
            box_url: None,
            verified: None,
            sources: Vec::new(),
            receipt: None,
        };
        let (per_peer, per_day) = (
            limits.calls_per_peer_per_day.unwrap_or(u64::MAX),
            limits.calls_per_day.unwrap_or(u64::MAX),
        );
        let max_unstarted = self.0.settings.max_unstarted_per_peer;
        let guard = self.0.guard.clone();
        let skill = program.skill.name.clone();
        let peer = from.to_owned();
        let row = std::sync::Arc::new(row);
        let stored = row.clone();
        let key = (id.to_owned(), Role::Owner);
        let inserted = self
            .insert_row(&key, row.clone(), move |tx| {
                let admitted = admitted_in(
                    tx,
                    &peer,
                    &skill,
                    &guard,
                    (per_peer, per_day),
                    max_unstarted,
                    &stored,
                )?;
                let inserted = matches!(admitted, Ok(true));
                Ok((admitted, inserted))
            })
            .await;
        match inserted {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => return Ok(None),
            Ok(Err((code, detail))) => return Err(Refused::new(code, detail)),
            Err(e) => return Err(Refused::new(FailureCode::NotAdmitted, e.to_string())),
        }
        tracing::info!(call = %id, peer = %from, skill = %program.skill.name, "call admitted");
        self.crash_point(Role::Owner, State::Accepted);
        for action in t.actions {
            self.dispatch(key.clone(), action, row.clone());
        }
        Ok(Some(()))
    }
}

/// Owner: charge call `id` of `peer` against `skill`'s daily ceilings (`skills::in_force`: the
/// owner's own, else its `limits:` held to the node's `defaults`, else those), in the
/// transaction of the step that takes its verified run (`Change::charge`):
/// the count, the charge and the run in one commit. This is the point its run is verified, just
/// before the owner stakes. Earlier (admission) let a peer that never goes on spend the
/// ceilings (issue 30 item 9); this is the last point where refusing costs the owner nothing,
/// and past it the caller alone decides whether the run happens, so the call counts from here.
/// `Ok(Some(code))`: refused, and nothing written — the ceilings are full (`daily_limit`), or
/// the box refused the peer a run of this skill today since it was admitted, its day used up
/// (`coverage_exceeded`), or the run is on a box instance one move past the day's pin
/// (`coverage::moved_past`: `coverage_exceeded` too, before this side stakes anything) — the
/// day's gate the turn asks too (`coverage::day_closed`).
pub(super) fn charged_in(
    tx: &crate::store::Tx<'_>,
    (id, peer, skill, instance): (&str, &str, &str, &str),
    defaults: skillbox_skill::Limits,
    guard: &crate::config::GuardConfig,
) -> Result<Option<FailureCode>> {
    let now = crate::store::now_secs();
    let run = super::coverage::DayRun {
        peer,
        skill,
        day: super::coverage::day_of(now),
        instance,
    };
    if super::coverage::day_closed(tx, &run, guard)? {
        return Ok(Some(FailureCode::CoverageExceeded));
    }
    let limits = crate::skills::limits_in(tx, skill, &defaults)?.unwrap_or(defaults);
    let caps = (
        limits.calls_per_peer_per_day.unwrap_or(u64::MAX),
        limits.calls_per_day.unwrap_or(u64::MAX),
    );
    let charged = records::charge_run(tx, id, caps, now - 86_400)?;
    Ok((!charged).then_some(FailureCode::DailyLimit))
}

/// Whether the owner takes `row`'s call from `peer` now, in the transaction that inserts it:
/// `Ok(false)` when the call is there already (a repeated request), `Err` with the closed code
/// and the detail when a limit refuses it. The ceilings count calls that reached a run (charged
/// when the owner verified it, `charged_in`): admitted calls that never go further cost
/// nothing against them, and are bounded per peer by `max_unstarted_per_peer` instead.
fn admitted_in(
    tx: &crate::store::Tx<'_>,
    peer: &str,
    skill: &str,
    guard: &crate::config::GuardConfig,
    (per_peer, per_day): (u64, u64),
    max_unstarted: u64,
    row: &CallRow,
) -> Result<std::result::Result<bool, (FailureCode, String)>> {
    let now = crate::store::now_secs();
    let today = super::coverage::day_of(now);
    if super::coverage::refused(tx, peer, skill, today, guard)? {
        return Ok(Err((
            FailureCode::CoverageExceeded,
            format!("the box refused {peer} a run of {skill} today: its day is used up"),
        )));
    }
    let since = now - 86_400;
    let (total, mine) = records::charged_since(tx, skill, peer, since)?;
    if mine >= per_peer || total >= per_day {
        return Ok(Err((
            FailureCode::DailyLimit,
            if mine >= per_peer {
                format!("{peer} made {mine} calls of {skill} in 24 h (limit {per_peer})")
            } else {
                format!("{skill} had {total} calls in 24 h (limit {per_day})")
            },
        )));
    }
    let waiting = records::unstarted_of(tx, peer)?;
    if waiting >= max_unstarted {
        return Ok(Err((
            FailureCode::PendingLimit,
            format!("{peer} has {waiting} calls not yet run (limit {max_unstarted})"),
        )));
    }
    match records::insert(tx, row) {
        Ok(()) => Ok(Ok(true)),
        Err(NodeError::Conflict(_)) => Ok(Ok(false)),
        Err(e) => Err(e),
    }
}

/// A `call.request` body: the DSSE envelope of a canonical program signed by the caller key it
/// names, for this call id and the skill it says.
fn parse_request(body: &Value, id: &str) -> std::result::Result<(Envelope, Program), Refused> {
    let parsed = (|| -> skillbox_jc::Result<(Envelope, Program)> {
        let env: Envelope =
            serde_json::from_value(body.get("program").cloned().unwrap_or(Value::Null))
                .map_err(|e| JcError::Envelope(e.to_string()))?;
        env.check_type(PROGRAM_PAYLOAD_TYPE)?;
        let bytes = env.payload_bytes()?;
        let program = Program::from_canonical(&bytes)?;
        let caller = decode_hex32(&program.parties.caller.node_key)
            .and_then(|b| skillbox_jc::program::ed25519_key(&b))
            .ok_or_else(|| JcError::BadRequest("caller key".into()))?;
        env.verified_payload(PROGRAM_PAYLOAD_TYPE, &caller, "caller")?;
        Ok((env, program))
    })();
    let (env, program) = parsed.map_err(|e| {
        Refused::new(
            FailureCode::ProgramMismatch,
            format!("call.request: {}", e.code()),
        )
    })?;
    let skill = body
        .get("skill")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if skill != program.skill.name || program.call_id != id {
        return Err(Refused::new(
            FailureCode::ProgramMismatch,
            "the request's skill or call id is not the program's",
        ));
    }
    Ok((env, program))
}
